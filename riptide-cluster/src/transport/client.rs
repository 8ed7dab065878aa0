//! The sending side: openraft's `RaftNetworkFactory` over TCP. A connection to a peer is made
//! (and its handshake run) on the first RPC and after any failure; one RPC is in flight per
//! connection, bounded by openraft's hard time-to-live.
//!
//! Invariants: a failure to connect or to complete the handshake (in time) is `Unreachable`
//! (openraft backs off); an append too large for one frame is `PayloadTooLarge` before anything
//! is sent (openraft retries with fewer entries); any other failure is a `Network` error. Every
//! failure but the first two drops the connection, so the next RPC starts afresh and never
//! reads a reply meant for an earlier one.

use super::{read_frame, write_frame, ClusterAuth, Request, Response, TransportError};
use crate::types::TypeConfig;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use std::time::Duration;
use tokio::net::TcpStream;

type NodeId = u64;
type RpcResult<T, E = openraft::error::Infallible> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

/// The network of node `node`: connections to its peers at their `BasicNode::addr`.
#[derive(Clone, Debug)]
pub struct TcpNetwork {
    node: NodeId,
    auth: ClusterAuth,
}

impl TcpNetwork {
    /// The network node `node` sends its RPCs through, proving `auth` to every peer.
    pub fn new(node: NodeId, auth: ClusterAuth) -> Self {
        TcpNetwork { node, auth }
    }
}

/// A connection from this node to one peer.
pub struct TcpConnection {
    from: NodeId,
    target: NodeId,
    addr: String,
    auth: ClusterAuth,
    stream: Option<TcpStream>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> TcpConnection {
        TcpConnection {
            from: self.node,
            target,
            addr: node.addr.clone(),
            auth: self.auth.clone(),
            stream: None,
        }
    }
}

impl TcpConnection {
    async fn connected(&mut self) -> Result<&mut TcpStream, TransportError> {
        if self.stream.is_none() {
            let mut stream = TcpStream::connect(&self.addr).await?;
            let _ = stream.set_nodelay(true);
            self.auth.connect(&mut stream, self.from).await?;
            self.stream = Some(stream);
        }
        self.stream
            .as_mut()
            .ok_or_else(|| TransportError::Malformed("no connection".into()))
    }

    /// Sends `request` and returns the reply, within `ttl` (connecting and the handshake
    /// included); drops the connection on failure.
    async fn call<T, E: std::error::Error>(
        &mut self,
        request: Request,
        ttl: Duration,
        pick: impl FnOnce(Response) -> Option<Result<T, RaftError<NodeId, E>>>,
    ) -> Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let deadline = tokio::time::Instant::now() + ttl;
        let target = self.target;
        let timed_out = move |what: &str| {
            TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{what} node {target} took over {ttl:?}"),
            ))
        };
        // Not reached (connect, handshake, or their time-out): `Unreachable`, so openraft backs off.
        let connected = match tokio::time::timeout_at(deadline, self.connected()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(timed_out("connecting to")),
        };
        if let Err(e) = connected {
            self.stream = None;
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let entries = match &request {
            Request::AppendEntries(rpc) => Some(rpc.entries.len() as u64),
            _ => None,
        };
        let outcome = match self.stream.as_mut() {
            Some(stream) => tokio::time::timeout_at(deadline, async {
                write_frame(stream, &request).await?;
                read_frame::<Response>(stream).await
            })
            .await
            .unwrap_or_else(|_| Err(timed_out("an RPC to"))),
            None => Err(TransportError::Malformed("no connection".into())),
        };
        let reply = match outcome {
            Ok(reply) => reply,
            Err(TransportError::TooLarge(_)) if entries.unwrap_or(0) > 1 => {
                // Nothing was sent: openraft retries with fewer entries.
                let hint = entries.unwrap_or(2) / 2;
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint)));
            }
            Err(e) => {
                self.stream = None;
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        match pick(reply) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            None => {
                self.stream = None;
                let e = TransportError::Malformed("a reply of another kind than the request".into());
                Err(RPCError::Network(NetworkError::new(&e)))
            }
        }
    }
}

impl RaftNetwork<TypeConfig> for TcpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.call(Request::AppendEntries(rpc), option.hard_ttl(), |r| match r {
            Response::AppendEntries(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Request::InstallSnapshot(rpc), option.hard_ttl(), |r| match r {
            Response::InstallSnapshot(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn vote(&mut self, rpc: VoteRequest<NodeId>, option: RPCOption) -> RpcResult<VoteResponse<NodeId>> {
        self.call(Request::Vote(rpc), option.hard_ttl(), |r| match r {
            Response::Vote(r) => Some(r),
            _ => None,
        })
        .await
    }
}
