//! The RPC server of one node: accepts connections, runs the handshakes (TLS where configured,
//! then the shared secret), then answers each request frame with the node's Raft handle, one
//! request at a time per connection.
//!
//! Invariants: a connection that fails its handshake, sends a malformed frame or stalls its
//! handshake past [`HANDSHAKE_TIMEOUT`] is closed and counted, and costs the node nothing
//! else; one idle for [`IDLE_TIMEOUT`] (no request, or a reply it does not read) is closed;
//! stopping the server ([`ServerHandle::stop`]) aborts its connections with it (they close
//! shortly after `stop` returns).

use super::{read_frame, write_frame, ClusterAuth, Request, Response, TransportError};
use crate::types::TypeConfig;
use openraft::Raft;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// How long a peer has to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection without a request for this long is closed (a peer lost to a network partition
/// leaves a half-open connection behind; a live leader sends heartbeats far more often).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Counters of one server.
#[derive(Default, Debug)]
pub struct ServerStats {
    /// Connections that completed the handshake.
    pub accepted: AtomicU64,
    /// Connections refused by the handshake (wrong secret, cluster or version, no certificate
    /// of the cluster's CA when it uses TLS, or too slow).
    pub refused: AtomicU64,
    /// Connections closed for a malformed or oversized frame after the handshake.
    pub malformed: AtomicU64,
}

/// A running server; dropping it leaves the server running, [`ServerHandle::stop`] stops it.
pub struct ServerHandle {
    task: JoinHandle<()>,
    stats: Arc<ServerStats>,
}

impl ServerHandle {
    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// Stops accepting and closes every connection.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Serves `raft`'s RPCs to the peers that connect to `listener` and prove `auth`.
/// `pause` is the node's write pause, which administrators set (`transfer-leader`).
pub fn spawn_server(
    listener: TcpListener,
    raft: Raft<TypeConfig>,
    auth: ClusterAuth,
    pause: Arc<crate::replicator::WritePause>,
) -> ServerHandle {
    let stats = Arc::new(ServerStats::default());
    let counters = stats.clone();
    let task = tokio::spawn(async move {
        // Owned by this task: aborting it drops the set, which aborts every connection.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let (raft, auth, counters, pause) =
                            (raft.clone(), auth.clone(), counters.clone(), pause.clone());
                        connections.spawn(async move { serve_connection(stream, raft, auth, counters, pause).await });
                    }
                    // Out of descriptors or similar: the next accept may succeed.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    ServerHandle { task, stats }
}

async fn serve_connection(
    tcp: TcpStream,
    raft: Raft<TypeConfig>,
    auth: ClusterAuth,
    stats: Arc<ServerStats>,
    pause: Arc<crate::replicator::WritePause>,
) {
    let mut stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, auth.admit(tcp)).await {
        Ok(Ok((stream, _peer))) => {
            stats.accepted.fetch_add(1, Ordering::Relaxed);
            stream
        }
        Ok(Err(_)) | Err(_) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    loop {
        let request: Request = match tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut stream)).await {
            Err(_) => return, // idle: the peer is gone or will reconnect
            Ok(Ok(r)) => r,
            Ok(Err(TransportError::Io(_))) => return, // the peer went away
            Ok(Err(_)) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let response = match request {
            Request::AppendEntries(rpc) => Response::AppendEntries(raft.append_entries(rpc).await),
            Request::Vote(rpc) => Response::Vote(raft.vote(rpc).await),
            Request::InstallSnapshot(rpc) => Response::InstallSnapshot(raft.install_snapshot(rpc).await),
            Request::Admin(request) => Response::Admin(super::admin::handle(&raft, &pause, request).await),
        };
        // A peer that stops reading is dropped like an idle one.
        match tokio::time::timeout(IDLE_TIMEOUT, write_frame(&mut stream, &response)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}
