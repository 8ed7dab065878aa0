//! The sending side: openraft's `RaftNetworkFactory` over TCP. A connection to a peer is made
//! (and its handshake run) on the first RPC and after any failure; one RPC is in flight per
//! connection, bounded by openraft's hard time-to-live.
//!
//! Invariants: a failure to connect or to complete the handshake is `Unreachable` (openraft
//! backs off); a failure after that is a `Network` error; either drops the connection, so the
//! next RPC starts afresh and never reads a reply meant for an earlier one.

use super::{read_frame, write_frame, ClusterAuth, Request, Response, TransportError};
use crate::types::TypeConfig;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
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

/// Why a call failed: before the peer was reached (connect, handshake) or after.
enum CallError {
    Unreachable(TransportError),
    Network(TransportError),
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

    async fn round_trip(&mut self, request: &Request) -> Result<Response, CallError> {
        let stream = self.connected().await.map_err(CallError::Unreachable)?;
        write_frame(stream, request).await.map_err(CallError::Network)?;
        read_frame(stream).await.map_err(CallError::Network)
    }

    /// Sends `request` and returns the reply, within `ttl`; drops the connection on failure.
    async fn call<T, E: std::error::Error>(
        &mut self,
        request: Request,
        ttl: Duration,
        pick: impl FnOnce(Response) -> Option<Result<T, RaftError<NodeId, E>>>,
    ) -> Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let outcome = match tokio::time::timeout(ttl, self.round_trip(&request)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Network(TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no reply from node {} within {ttl:?}", self.target),
            )))),
        };
        let reply = match outcome {
            Ok(reply) => reply,
            Err(e) => {
                self.stream = None;
                return Err(match e {
                    CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
                    CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
                });
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
