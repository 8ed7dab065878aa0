//! The sending side: openraft's `RaftNetworkFactory` over TCP. A connection to a peer is made
//! (and its handshake run) when no idle one is at hand; one RPC is in flight per connection,
//! bounded by openraft's hard time-to-live. Connections that ended a clean exchange are kept
//! idle for the next client to the same peer (openraft makes one per leadership check); an
//! idle connection that fails at once (the peer closed it) is replaced by a fresh one once.
//!
//! Invariants: a failure to connect or to complete the handshake (in time) is `Unreachable`
//! (openraft backs off); an append of several entries weighing more than
//! [`APPEND_RPC_BYTES`], or too large for one frame, is `PayloadTooLarge` before anything is
//! sent (openraft retries with fewer entries); any other failure is a `Network` error. Every
//! failure but the first two drops the connection, so the next RPC starts afresh and never
//! reads a reply meant for an earlier one.

use super::tls::PeerStream;
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
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};

type NodeId = u64;
type RpcResult<T, E = openraft::error::Infallible> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

/// The network of node `node`: connections to its peers at their `BasicNode::addr`.
#[derive(Clone)]
pub struct TcpNetwork {
    node: NodeId,
    auth: ClusterAuth,
    source: Option<IpAddr>,
    idle: IdlePool,
}

impl std::fmt::Debug for TcpNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpNetwork")
            .field("node", &self.node)
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Connections that completed a clean exchange, by peer address, shared by every
/// [`TcpConnection`] of one [`TcpNetwork`]: openraft makes a new client for each leadership
/// check (a read index) and each election, and without the pool each would pay a TCP connect
/// and a handshake.
type IdlePool = Arc<parking_lot::Mutex<HashMap<String, Vec<PeerStream>>>>;

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 8;

impl TcpNetwork {
    /// The network node `node` sends its RPCs through, proving `auth` to every peer.
    pub fn new(node: NodeId, auth: ClusterAuth) -> Self {
        TcpNetwork {
            node,
            auth,
            source: None,
            idle: IdlePool::default(),
        }
    }

    /// Connections leave from address `ip` (the node's own listening address, so that peers
    /// and anything between them see which node a connection comes from).
    pub fn with_source(mut self, ip: IpAddr) -> Self {
        self.source = Some(ip);
        self
    }
}

/// A connection from this node to one peer.
pub struct TcpConnection {
    from: NodeId,
    target: NodeId,
    addr: String,
    auth: ClusterAuth,
    source: Option<IpAddr>,
    stream: Option<PeerStream>,
    idle: IdlePool,
}

impl Drop for TcpConnection {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            let mut idle = self.idle.lock();
            let spare = idle.entry(self.addr.clone()).or_default();
            if spare.len() < IDLE_PER_PEER {
                spare.push(stream);
            }
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> TcpConnection {
        TcpConnection {
            from: self.node,
            target,
            addr: node.addr.clone(),
            auth: self.auth.clone(),
            source: self.source,
            stream: None,
            idle: self.idle.clone(),
        }
    }
}

impl TcpConnection {
    /// A new connection to the peer, its handshake done.
    async fn connect(&self) -> Result<PeerStream, TransportError> {
        let tcp = match self.source {
            None => TcpStream::connect(&self.addr).await?,
            Some(ip) => {
                let peer = tokio::net::lookup_host(&self.addr)
                    .await?
                    .find(|a| a.is_ipv4() == ip.is_ipv4())
                    .ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            format!("no address of {} in {ip}'s family", self.addr),
                        )
                    })?;
                let socket = if ip.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                socket.bind(SocketAddr::new(ip, 0))?;
                socket.connect(peer).await?
            }
        };
        let _ = tcp.set_nodelay(true);
        self.auth.open(tcp, &self.addr, self.from).await
    }

    /// A fresh connection by `deadline`, or `Unreachable` (openraft backs off).
    async fn connect_by<E: std::error::Error>(
        &self,
        deadline: tokio::time::Instant,
        timed_out: &impl Fn(&str) -> TransportError,
    ) -> Result<PeerStream, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        match tokio::time::timeout_at(deadline, self.connect()).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(_) => Err(RPCError::Unreachable(Unreachable::new(&timed_out("connecting to")))),
        }
    }

    /// Sends `request` and returns the reply, within `ttl` (connecting and the handshake
    /// included). The connection is taken for the call and kept only after a clean exchange.
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
        let spare = || self.idle.lock().get_mut(&self.addr).and_then(Vec::pop);
        let kept = self.stream.take().or_else(spare);
        let reused = kept.is_some();
        let mut stream = match kept {
            Some(stream) => stream,
            None => self.connect_by(deadline, &timed_out).await?,
        };
        let entries = match &request {
            Request::AppendEntries(rpc) => rpc.entries.len() as u64,
            _ => 0,
        };
        let mut outcome = exchange(&mut stream, &request, deadline, &timed_out).await;
        if reused && matches!(&outcome, Err(TransportError::Io(e)) if e.kind() != std::io::ErrorKind::TimedOut) {
            // A kept connection the peer had closed (idle, or it restarted): once more, afresh.
            stream = self.connect_by(deadline, &timed_out).await?;
            outcome = exchange(&mut stream, &request, deadline, &timed_out).await;
        }
        let reply = match outcome {
            Ok(reply) => reply,
            Err(TransportError::TooLarge(_)) if entries > 1 => {
                // Nothing was sent: openraft retries with fewer entries.
                self.stream = Some(stream);
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(
                    entries / 2,
                )));
            }
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        match pick(reply) {
            Some(result) => {
                self.stream = Some(stream);
                result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            None => {
                let e = TransportError::Malformed("a reply of another kind than the request".into());
                Err(RPCError::Network(NetworkError::new(&e)))
            }
        }
    }
}

/// Writes `request` and reads its reply on `stream`, by `deadline`.
async fn exchange(
    stream: &mut PeerStream,
    request: &Request,
    deadline: tokio::time::Instant,
    timed_out: &impl Fn(&str) -> TransportError,
) -> Result<Response, TransportError> {
    tokio::time::timeout_at(deadline, async {
        write_frame(stream, request).await?;
        read_frame::<Response>(stream).await
    })
    .await
    .unwrap_or_else(|_| Err(timed_out("an RPC to")))
}

/// The most an append of several entries may weigh (write sets, [`crate::WriteSet::weight`]).
/// openraft gives an append one heartbeat interval (50 ms by default) for the transfer and the
/// follower's synced write; with its 300 entries of a bulk load (sysbench's prepare sends
/// INSERTs of 1,000 rows) an append weighed tens of megabytes, always timed out, and was sent
/// again after a back-off: the follower never caught up but by a snapshot.
pub const APPEND_RPC_BYTES: usize = 1 << 20;

/// How many of `entries` to send at once: all when they weigh at most [`APPEND_RPC_BYTES`] (or
/// there is one), else as many as fit on average (at least 1).
fn entries_that_fit(entries: &[openraft::Entry<TypeConfig>]) -> Option<u64> {
    if entries.len() < 2 {
        return None;
    }
    let weight = entries
        .iter()
        .map(|e| match &e.payload {
            openraft::EntryPayload::Normal(set) => set.weight(),
            _ => OVERHEAD_PER_ENTRY,
        })
        .fold(0usize, usize::saturating_add);
    if weight <= APPEND_RPC_BYTES {
        return None;
    }
    let fit = (entries.len() as u128 * APPEND_RPC_BYTES as u128 / weight as u128) as u64;
    Some(fit.max(1))
}

/// What an entry without a write set counts for in [`entries_that_fit`].
const OVERHEAD_PER_ENTRY: usize = 64;

impl RaftNetwork<TypeConfig> for TcpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        if let Some(fit) = entries_that_fit(&rpc.entries) {
            // Nothing is sent: openraft sends fewer entries (for its next few appends).
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(fit)));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{WriteOp, WriteSet};
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};

    fn entry(index: u64, value_bytes: usize) -> Entry<TypeConfig> {
        let set = WriteSet {
            ops: vec![WriteOp::Put {
                table: "t".into(),
                key: b"k".to_vec(),
                value: vec![0; value_bytes],
            }],
        };
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(set),
        }
    }

    #[test]
    fn heavy_appends_are_cut_to_what_fits_and_one_entry_always_goes() {
        let small: Vec<_> = (1..=300).map(|i| entry(i, 100)).collect();
        assert_eq!(entries_that_fit(&small), None, "300 small entries go at once");
        // sysbench's prepare: 300 entries of about 190 KB.
        let heavy: Vec<_> = (1..=300).map(|i| entry(i, 190_000)).collect();
        let fit = entries_that_fit(&heavy).expect("cut");
        assert!((1..=6).contains(&fit), "{fit}");
        let sent: usize = heavy[..fit as usize]
            .iter()
            .map(|e| match &e.payload {
                EntryPayload::Normal(s) => s.weight(),
                _ => 0,
            })
            .sum();
        assert!(sent <= APPEND_RPC_BYTES, "{sent}");
        // One entry heavier than the budget still goes alone, and two such go one by one.
        assert_eq!(entries_that_fit(&heavy[..1]), None);
        let huge: Vec<_> = (1..=2).map(|i| entry(i, 3 * APPEND_RPC_BYTES)).collect();
        assert_eq!(entries_that_fit(&huge), Some(1));
        let blanks: Vec<_> = (1..=300)
            .map(|i| Entry::<TypeConfig> {
                log_id: log_id(1, 1, i),
                payload: EntryPayload::Blank,
            })
            .collect();
        assert_eq!(entries_that_fit(&blanks), None);
    }
}
