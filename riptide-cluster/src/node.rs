//! [`PartitionNode`]: one node's replica of a partition, assembled: the partition database's
//! Raft log and state machine, the Raft node, the authenticated transport's server, and the
//! engine's replicator, so that from [`PartitionNode::start`] on every write to the database
//! (a commit, a batch, a table creation or drop) goes through the Raft group.
//!
//! Invariants:
//! - The replicator is installed before `start` returns and never removed: a replicated
//!   database is written only through Raft (or by the cluster layer itself).
//! - [`PartitionNode::bootstrap`] initializes the group only on a node whose log is empty;
//!   on any other it changes nothing and says so. Only the nodes of the first membership may
//!   be bootstrapped, all with the same member list (openraft: the same configuration on
//!   several nodes is safe, different ones split the group).
//!
//! Using the database of a node directly (without the SQL server, which does this itself):
//! a transaction on the leader must begin after a [`PartitionNode::read_barrier`] that ended in
//! the current term, and should commit with [`riptide::WriteOptions::replication_fence`] set
//! to that term. Entries of earlier terms are applied after an election without taking row
//! locks, so a transaction begun before the barrier may have locked and read rows that such an
//! entry then overwrites; the fence makes a write computed in one term fail rather than commit
//! in another. Neither rule is enforced here.

use crate::read_index::{read_index, RestartFloor};
use crate::state_machine::ApplyListener;
use crate::transport::{server::ServerHandle, spawn_server, ClusterAuth, TcpNetwork};
use crate::{RaftReplicator, TypeConfig};
use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, Config, Raft, RaftMetrics};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

type NodeId = u64;

/// How one node of a partition runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id in the group (not 0).
    pub id: NodeId,
    /// Where the node listens for its peers' Raft RPCs.
    pub raft_listen: SocketAddr,
    /// The cluster's name and shared secret.
    pub auth: ClusterAuth,
    /// Leader heartbeat interval.
    pub heartbeat: Duration,
    /// Election timeout range: a follower that hears no leader for a random time in it stands.
    pub election_timeout: (Duration, Duration),
    /// A proposed write not answered within this fails with an unknown outcome.
    pub write_timeout: Duration,
    /// Entries applied since the last snapshot that make the node build the next one (an
    /// engine checkpoint of the whole partition, so not too often); the log is then purged up
    /// to the snapshot, keeping the last `min(snapshot_every, 1000)` entries for followers
    /// that are only a little behind.
    pub snapshot_every: u64,
}

/// [`NodeConfig::snapshot_every`] by default.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 100_000;

impl NodeConfig {
    /// A node with the default timings: heartbeats every 50 ms, elections after 300–600 ms
    /// of silence, writes answered within 10 s; a snapshot every
    /// [`DEFAULT_SNAPSHOT_EVERY`] entries.
    pub fn new(id: NodeId, raft_listen: SocketAddr, auth: ClusterAuth) -> Self {
        NodeConfig {
            id,
            raft_listen,
            auth,
            heartbeat: Duration::from_millis(50),
            election_timeout: (Duration::from_millis(300), Duration::from_millis(600)),
            write_timeout: Duration::from_secs(10),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
        }
    }

    fn raft_config(&self) -> Result<Config, NodeError> {
        let ms = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
        let config = Config {
            cluster_name: self.auth.cluster().to_string(),
            heartbeat_interval: ms(self.heartbeat),
            election_timeout_min: ms(self.election_timeout.0),
            election_timeout_max: ms(self.election_timeout.1),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            // The RPC carrying a snapshot's last chunk is answered after the install, which
            // rewrites the partition: at openraft's 200 ms the leader would resend it all.
            install_snapshot_timeout: 600_000,
            max_in_snapshot_log_to_keep: self.snapshot_every.min(1000),
            ..Config::default()
        };
        config.validate().map_err(|e| NodeError::Config(e.to_string()))
    }
}

/// Runs leadership checks until no caller waits (see [`PartitionNode::read_barrier`]).
async fn run_barriers(
    raft: Raft<TypeConfig>,
    queue: Arc<Mutex<BarrierQueue>>,
    floor: Arc<RestartFloor>,
    apply_wait: Duration,
) {
    loop {
        let callers = {
            let mut q = queue.lock();
            if q.waiting.is_empty() {
                q.running = false;
                return;
            }
            std::mem::take(&mut q.waiting)
        };
        let outcome = read_index(&raft, &floor, apply_wait).await;
        for caller in callers {
            let _ = caller.send(outcome.clone());
        }
    }
}

/// Why a node could not start or act.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Bad timings or id.
    #[error("cluster configuration: {0}")]
    Config(String),
    /// The partition database failed.
    #[error("partition database: {0}")]
    Engine(#[from] riptide::Error),
    /// The Raft listener could not be bound.
    #[error("raft listener: {0}")]
    Io(#[from] std::io::Error),
    /// The partition's snapshots could not be recovered at start.
    #[error("partition snapshots: {0}")]
    Snapshot(#[from] crate::SnapshotError),
    /// openraft refused or failed.
    #[error("raft: {0}")]
    Raft(String),
}

/// One running replica of a partition.
pub struct PartitionNode {
    id: NodeId,
    raft: Raft<TypeConfig>,
    server: ServerHandle,
    addr: SocketAddr,
    barriers: Arc<Mutex<BarrierQueue>>,
    /// What a restart as leader left to apply before reads ([`crate::read_index`]).
    restart_floor: Arc<RestartFloor>,
    /// How long a read barrier waits for it.
    apply_wait: Duration,
    snapshot_stats: Arc<crate::snapshot::SnapshotStats>,
    /// Set by an administrator during `transfer-leader`.
    pause: Arc<crate::replicator::WritePause>,
    /// What the node's proposer did.
    proposer_stats: Arc<crate::proposer::ProposerStats>,
}

/// Read barriers waiting for a leadership check: callers that arrive while one check runs are
/// served together by the next, which starts after they arrived.
#[derive(Default)]
struct BarrierQueue {
    running: bool,
    waiting: Vec<tokio::sync::oneshot::Sender<riptide::Result<()>>>,
}

impl PartitionNode {
    /// Starts the replica of the partition database `db` (opened by the caller, and closed by
    /// it after [`PartitionNode::shutdown`]): binds the Raft listener, starts the Raft node and
    /// installs the replicator. `listener` hears what each apply changed.
    pub async fn start(
        db: &riptide::Db,
        config: NodeConfig,
        listener: Option<ApplyListener>,
    ) -> Result<Self, NodeError> {
        if config.id == 0 {
            return Err(NodeError::Config("node ids start at 1".into()));
        }
        let raft_config = Arc::new(config.raft_config()?);
        let tcp = tokio::net::TcpListener::bind(config.raft_listen).await?;
        let addr = tcp.local_addr()?;
        let (log, sm) = tokio::task::block_in_place(|| crate::open_partition(db))?;
        let appends = log.appends();
        let restart_floor = Arc::new(
            RestartFloor::of(&log, config.id)
                .await
                .map_err(|e| NodeError::Raft(e.to_string()))?,
        );
        let snapshot_stats = sm.snapshot_stats();
        let inflight = Arc::new(crate::inflight::InflightWrites::default());
        let sm = sm.with_inflight_writes(inflight.clone());
        let sm = match listener {
            Some(l) => sm.with_apply_listener(l),
            None => sm,
        };
        let mut network = TcpNetwork::new(config.id, config.auth.clone());
        if !addr.ip().is_unspecified() {
            network = network.with_source(addr.ip());
        }
        let raft = Raft::new(config.id, raft_config, network, log, sm)
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        if restart_floor.get().is_some() {
            // Restored as leader: if the crash came before its term's blank entry was logged,
            // openraft never proposes it, and the read index waits for its index (see
            // `crate::read_index`). An empty write set of this term fills that place.
            let raft = raft.clone();
            tokio::spawn(async move {
                let _ = raft.client_write(crate::WriteSet::default()).await;
            });
        }
        let pause = Arc::new(crate::replicator::WritePause::default());
        let server = spawn_server(tcp, raft.clone(), config.auth.clone(), pause.clone());
        let replicator = RaftReplicator::new(
            raft.clone(),
            tokio::runtime::Handle::current(),
            config.write_timeout,
            inflight,
            Some(appends),
        )
        .with_write_pause(pause.clone());
        let proposer_stats = replicator.proposer_stats();
        db.set_replicator(Arc::new(replicator))?;
        Ok(PartitionNode {
            id: config.id,
            raft,
            server,
            addr,
            barriers: Arc::default(),
            restart_floor,
            apply_wait: config.write_timeout,
            snapshot_stats,
            proposer_stats,
            pause,
        })
    }

    /// Forms the group with `members` (id → Raft address) if this node has the smallest id of
    /// them and its log is empty; `false` when it changed nothing (another member forms the
    /// group, or it was formed before).
    ///
    /// Only one member forms it: openraft allows every member to, with the same members, but a
    /// member that does so after the others have elected a leader stands at the first term
    /// with a higher node id, which makes that leader step down and leaves the group without
    /// one for an election timeout.
    pub async fn bootstrap(&self, members: BTreeMap<NodeId, String>) -> Result<bool, NodeError> {
        if !members.contains_key(&self.id) {
            return Err(NodeError::Config(format!(
                "the members do not include this node ({})",
                self.id
            )));
        }
        if members.keys().next() != Some(&self.id) {
            return Ok(false);
        }
        if self
            .metrics()
            .membership_config
            .membership()
            .voter_ids()
            .next()
            .is_some()
        {
            return Ok(false);
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members.into_iter().map(|(id, a)| (id, BasicNode::new(a))).collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(true),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(false),
            Err(e) => Err(NodeError::Raft(e.to_string())),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Where this node's Raft listener is bound.
    pub fn raft_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Raft node.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// The transport server (its counters).
    pub fn transport(&self) -> &ServerHandle {
        &self.server
    }

    /// What the partition's snapshots did since the node started.
    pub fn snapshot_stats(&self) -> &crate::snapshot::SnapshotStats {
        &self.snapshot_stats
    }

    /// Entries this node proposed and the write sets in them (their ratio is the group
    /// commit's average group).
    pub fn proposer_stats(&self) -> &crate::proposer::ProposerStats {
        &self.proposer_stats
    }

    /// The node's current Raft figures.
    pub fn metrics(&self) -> RaftMetrics<NodeId, BasicNode> {
        self.raft.metrics().borrow().clone()
    }

    /// True while this node believes it leads.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// Returns once a read of this replica's engine made after it is linearizable: this node
    /// confirmed with a majority that it still leads, and has applied every entry committed
    /// before the call (Raft's read index), and, restarted as leader in its term, every entry
    /// its log held at start ([`crate::read_index`]), so that no entry applied later overwrites
    /// rows a transaction has locked and read. [`riptide::Error::NotLeader`] on a follower or
    /// a leader that lost its majority.
    ///
    /// Concurrent callers share leadership checks: one runs at a time, and those who arrive
    /// meanwhile are answered together by the next one, which starts after they arrived (so
    /// each still sees every write acknowledged before its call).
    pub async fn read_barrier(&self) -> riptide::Result<()> {
        if self.pause.is_paused() {
            return Err(crate::replicator::WritePause::refusal());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut queue = self.barriers.lock();
            queue.waiting.push(tx);
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            tokio::spawn(run_barriers(
                self.raft.clone(),
                self.barriers.clone(),
                self.restart_floor.clone(),
                self.apply_wait,
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(riptide::Error::Replication("the Raft node stopped".into())))
    }

    /// Stops the transport and the Raft node (the caller closes the database then).
    pub async fn shutdown(&self) {
        self.server.stop();
        let _ = self.raft.shutdown().await;
    }
}
