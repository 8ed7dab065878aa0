//! One partition replicated over three nodes in this process, through an in-memory network
//! that can cut a node off: write sets committed through the leader reach every replica's
//! tables; when the leader is cut off, the others elect a new one and go on, the old one can
//! no longer commit, and after the cut heals it holds every acknowledged write.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Config, Raft};
use parking_lot::Mutex;
use riptide_cluster::inflight::InflightWrites;
use riptide_cluster::read_index::{read_index, RestartFloor};
use riptide_cluster::replicator::RaftReplicator;
use riptide_cluster::TypeConfig;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{applied, put};

type NodeId = u64;

/// Every node's Raft handle, and the nodes cut off from the others.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<HashMap<NodeId, Raft<TypeConfig>>>>,
    cut_off: Arc<Mutex<HashSet<NodeId>>>,
    /// Nodes whose appends carrying entries are lost (their heartbeats and leadership checks,
    /// appends without entries, still arrive).
    entries_held: Arc<Mutex<HashSet<NodeId>>>,
}

impl Router {
    /// The target's handle if a message from `from` reaches it.
    fn reach(&self, from: NodeId, to: NodeId) -> Result<Raft<TypeConfig>, Unreachable> {
        let cut = self.cut_off.lock();
        if cut.contains(&from) || cut.contains(&to) {
            return Err(Unreachable::new(&std::io::Error::other(format!(
                "{from} -> {to} is cut off"
            ))));
        }
        self.nodes
            .lock()
            .get(&to)
            .cloned()
            .ok_or_else(|| Unreachable::new(&std::io::Error::other(format!("node {to} is not running"))))
    }
}

struct Connection {
    router: Router,
    from: NodeId,
    to: NodeId,
}

/// A node's view of the router: connections from this node.
struct NodeNet {
    router: Router,
    id: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for NodeNet {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.router.clone(),
            from: self.id,
            to: target,
        }
    }
}

type RpcResult<T, E = openraft::error::Infallible> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let raft = self.router.reach(self.from, self.to)?;
        if !rpc.entries.is_empty() && self.router.entries_held.lock().contains(&self.from) {
            return Err(RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
                "entries held",
            ))));
        }
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let raft = self.router.reach(self.from, self.to)?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }

    async fn vote(&mut self, rpc: VoteRequest<NodeId>, _option: RPCOption) -> RpcResult<VoteResponse<NodeId>> {
        let raft = self.router.reach(self.from, self.to)?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

struct Node {
    raft: Raft<TypeConfig>,
    db: riptide::Db,
    /// The node's proposals not yet answered (for a replicator set on `db`).
    inflight: Arc<InflightWrites>,
    _dir: tempfile::TempDir,
}

/// The test clusters' Raft settings; `snapshot_every` entries, if given, trigger a snapshot
/// after which the log is purged (so a new member can only catch up from a snapshot).
fn config(snapshot_every: Option<u64>) -> Arc<Config> {
    let mut config = Config {
        heartbeat_interval: 50,
        // Long enough that a loaded 2-core machine does not start elections by itself.
        election_timeout_min: 500,
        election_timeout_max: 1000,
        ..Config::default()
    };
    if let Some(n) = snapshot_every {
        config.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(n);
        config.max_in_snapshot_log_to_keep = 0;
        config.purge_batch_size = 1;
    }
    Arc::new(config.validate().unwrap())
}

async fn start_node(router: &Router, id: NodeId, config: Arc<Config>) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let db = riptide::Db::open(dir.path(), riptide::Options::default()).unwrap();
    let (node, _) = run_node(router, id, config, db, dir).await;
    node
}

/// Starts node `id` over `db` (new or left by an earlier run); returns it and its restart floor.
async fn run_node(
    router: &Router,
    id: NodeId,
    config: Arc<Config>,
    db: riptide::Db,
    dir: tempfile::TempDir,
) -> (Node, RestartFloor) {
    let net = NodeNet {
        router: router.clone(),
        id,
    };
    let (log, sm) = riptide_cluster::open_partition(&db).unwrap();
    let floor = RestartFloor::of(&log, id).await.unwrap();
    let inflight = Arc::new(InflightWrites::default());
    let sm = sm.with_inflight_writes(inflight.clone());
    let raft = Raft::new(id, config, net, log, sm).await.unwrap();
    router.nodes.lock().insert(id, raft.clone());
    let node = Node {
        raft,
        db,
        inflight,
        _dir: dir,
    };
    (node, floor)
}

/// The leader all of `nodes` agree on, other than `not`.
async fn leader_among(nodes: &[&Node], not: Option<NodeId>) -> NodeId {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leaders: HashSet<Option<NodeId>> = nodes.iter().map(|n| n.raft.metrics().borrow().current_leader).collect();
        if leaders.len() == 1 {
            if let Some(Some(l)) = leaders.into_iter().next() {
                if Some(l) != not {
                    return l;
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader agreed on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `key` through whichever of `candidates` leads, retrying (the put is idempotent) if
/// leadership moves under a loaded machine; returns the entry's log index once acknowledged.
async fn write(nodes: &BTreeMap<NodeId, Node>, candidates: &[NodeId], not: Option<NodeId>, key: u32) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let among: Vec<&Node> = candidates.iter().map(|id| &nodes[id]).collect();
        let leader = leader_among(&among, not).await;
        match nodes[&leader].raft.client_write(put(key)).await {
            Ok(reply) => {
                assert_eq!(reply.data.writes, 1);
                return reply.log_id.index;
            }
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "write {key} kept failing: {e}"),
        }
    }
}

fn keys_of(node: &Node) -> Vec<u32> {
    let Ok(kv) = node.db.table("kv") else {
        return Vec::new();
    };
    kv.iter(&Default::default())
        .unwrap()
        .map(|row| u32::from_be_bytes(row.unwrap().0.try_into().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_replicate_and_survive_the_loss_of_the_leader() {
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&router, id, config(None)).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let all_ids = [1, 2, 3];

    // Writes through the leader reach every replica.
    let mut acknowledged = Vec::new();
    let mut last_index = 0;
    for key in 0..50 {
        last_index = write(&nodes, &all_ids, None, key).await;
        acknowledged.push(key);
    }
    for node in nodes.values() {
        applied(&node.raft, last_index).await;
        assert_eq!(keys_of(node), acknowledged);
    }

    // Cut the leader off: the other two elect a new leader and go on.
    let all: Vec<&Node> = nodes.values().collect();
    let first = leader_among(&all, None).await;
    router.cut_off.lock().insert(first);
    let rest: Vec<NodeId> = all_ids.into_iter().filter(|id| *id != first).collect();
    for key in 50..80 {
        last_index = write(&nodes, &rest, Some(first), key).await;
        acknowledged.push(key);
    }

    // The old leader, alone, acknowledges nothing.
    let lonely = tokio::time::timeout(Duration::from_secs(2), nodes[&first].raft.client_write(put(1000))).await;
    assert!(
        !matches!(lonely, Ok(Ok(_))),
        "a leader without a majority acknowledged a write"
    );

    // Healed, it catches up: every acknowledged write is on every node, and nothing else.
    router.cut_off.lock().clear();
    for node in nodes.values() {
        applied(&node.raft, last_index).await;
        let keys = keys_of(node);
        assert!(!keys.contains(&1000), "a write without a majority was applied");
        assert_eq!(keys, acknowledged);
    }
    for node in nodes.values() {
        node.raft.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_member_catches_up_from_a_snapshot_and_replaces_an_old_one() {
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&router, id, config(Some(10))).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let mut last_index = 0;
    for key in 0..40 {
        last_index = write(&nodes, &[1, 2, 3], None, key).await;
    }
    let all: Vec<&Node> = nodes.values().collect();
    let leader = leader_among(&all, None).await;
    // The leader snapshotted and purged its log: a new member cannot catch up from entries.
    nodes[&leader]
        .raft
        .wait(Some(Duration::from_secs(20)))
        .metrics(|m| m.purged.map(|p| p.index) >= Some(10), "log purged after a snapshot")
        .await
        .unwrap();

    // Node 4 builds no snapshot of its own soon (default policy): one it has, it installed.
    nodes.insert(4, start_node(&router, 4, config(None)).await);
    nodes[&leader]
        .raft
        .add_learner(4, BasicNode::default(), true)
        .await
        .unwrap();
    applied(&nodes[&4].raft, last_index).await;
    assert_eq!(
        keys_of(&nodes[&4]),
        (0..40).collect::<Vec<_>>(),
        "the learner's snapshot and log"
    );
    let installed = nodes[&4].raft.metrics().borrow().snapshot;
    assert!(installed.is_some(), "node 4 caught up without installing a snapshot");

    // Node 4 replaces node 1 (which may be the leader): writes go on through the change.
    let new_members: std::collections::BTreeSet<NodeId> = [2, 3, 4].into();
    for attempt in 1.. {
        let voters = || -> Vec<NodeId> {
            let m = nodes[&2].raft.metrics().borrow().membership_config.clone();
            m.membership().voter_ids().collect()
        };
        if voters() == [2, 3, 4] {
            break; // an attempt that reported an error committed after all
        }
        let among: Vec<&Node> = nodes.values().collect();
        let l = leader_among(&among, None).await;
        match nodes[&l].raft.change_membership(new_members.clone(), false).await {
            Ok(_) => break,
            Err(e) => assert!(attempt < 50, "membership change kept failing: {e}"),
        }
    }
    for key in 40..60 {
        last_index = write(&nodes, &[2, 3, 4], Some(1), key).await;
    }
    for id in [2, 3, 4] {
        applied(&nodes[&id].raft, last_index).await;
        assert_eq!(keys_of(&nodes[&id]), (0..60).collect::<Vec<_>>(), "node {id}");
    }
    let voters: Vec<NodeId> = nodes[&2]
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voters, [2, 3, 4]);
    for node in nodes.values() {
        node.raft.shutdown().await.unwrap();
    }
}

/// A leader cut off while committing a transaction cannot settle it: the write's entry is in
/// its log only. The others go on, snapshot and purge past it; healed, the old leader catches
/// up by installing their snapshot, which purges its own entry without truncating it, and
/// openraft never answers that write. The install settles it (outcome unknown), so its row
/// locks do not stay held until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_leaders_write_overtaken_by_a_snapshot_releases_its_locks() {
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&router, id, config(Some(5))).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    for key in 0..10 {
        write(&nodes, &[1, 2, 3], None, key).await;
    }
    let all: Vec<&Node> = nodes.values().collect();
    let first = leader_among(&all, None).await;
    let old = &nodes[&first];
    let replicator = RaftReplicator::new(
        old.raft.clone(),
        tokio::runtime::Handle::current(),
        Duration::from_millis(300),
        old.inflight.clone(),
        None,
    );
    old.db.set_replicator(Arc::new(replicator)).unwrap();

    // Cut off, the leader commits a transaction on key 1: the write is proposed (in its log
    // only) and its outcome is unknown after the write time-out; its lock stays held.
    router.cut_off.lock().insert(first);
    let db = old.db.clone();
    let committed = tokio::task::spawn_blocking(move || {
        let kv = db.table("kv").unwrap();
        let mut txn = db.begin(riptide::TxnOptions::default()).unwrap();
        txn.put(&kv, &1u32.to_be_bytes(), b"from the deposed leader").unwrap();
        txn.commit()
    })
    .await
    .unwrap();
    assert!(
        matches!(committed, Err(riptide::Error::Replication(_))),
        "{committed:?}"
    );
    assert_eq!(old.inflight.len(), 1);

    // The others go on, snapshotting and purging every 5 entries: a leader keeps the entries
    // a replication stream still needs (the cut-off node's), a follower purges at once.
    let rest: Vec<NodeId> = [1, 2, 3].into_iter().filter(|id| *id != first).collect();
    let mut last_index = 0;
    for key in 10..40 {
        last_index = write(&nodes, &rest, Some(first), key).await;
    }
    let all: Vec<&Node> = nodes.values().filter(|n| !std::ptr::eq(*n, old)).collect();
    let second = leader_among(&all, Some(first)).await;
    let follower = rest.iter().copied().find(|id| *id != second).unwrap();
    applied(&nodes[&follower].raft, last_index).await;
    // A follower snapshots when entries arrive; asked again until it covers them (a request
    // made while a build runs is dropped).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while nodes[&follower].raft.metrics().borrow().purged.map(|p| p.index) < Some(20) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower never purged its log"
        );
        nodes[&follower].raft.trigger().snapshot().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The second leader is cut off and the first comes back: the follower, whose log is
    // purged past the old leader's entry, leads and sends it a snapshot, which purges that
    // entry without truncating it (the old leader's log is shorter than the snapshot).
    *router.cut_off.lock() = [second].into();
    applied(&old.raft, last_index).await;
    let installed = old.raft.metrics().borrow().snapshot;
    assert!(
        installed.map(|s| s.index) >= Some(20),
        "caught up without a snapshot: {installed:?}"
    );
    assert_eq!(old.inflight.len(), 0, "the overtaken write was never settled");
    let db = old.db.clone();
    let relocked = tokio::task::spawn_blocking(move || {
        let kv = db.table("kv").unwrap();
        let opts = riptide::TxnOptions {
            lock_timeout: Duration::from_millis(200),
            ..Default::default()
        };
        let mut txn = db.begin(opts).unwrap();
        txn.put(&kv, &1u32.to_be_bytes(), b"later")
    })
    .await
    .unwrap();
    assert!(relocked.is_ok(), "the row is still locked: {relocked:?}");
    for node in nodes.values() {
        node.raft.shutdown().await.unwrap();
    }
}

/// openraft restores a node whose stored vote is its own committed one as leader of the same
/// term, with no new blank entry, so its read index can lie below entries its previous run
/// logged. Applied later, such an entry would overwrite rows that a transaction of the new run
/// had locked and read (a lost update; the fault tests' bank saw money appear). The read
/// index waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_restarted_in_its_term_reads_only_after_applying_its_log() {
    // Elections slow enough that the followers, which hear no heartbeat while entries are
    // held (openraft sends its pending entries instead), never stand during the test.
    let mut slow = (*config(None)).clone();
    slow.election_timeout_min = 3000;
    slow.election_timeout_max = 4000;
    let slow = Arc::new(slow.validate().unwrap());
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&router, id, slow.clone()).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let mut last_index = 0;
    for key in 0..5 {
        last_index = write(&nodes, &[1, 2, 3], None, key).await;
    }
    let all: Vec<&Node> = nodes.values().collect();
    let leader = leader_among(&all, None).await;
    applied(&nodes[&leader].raft, last_index).await;

    // The leader logs a write its followers never receive, then stops.
    router.entries_held.lock().insert(leader);
    let raft = nodes[&leader].raft.clone();
    let unanswered = tokio::spawn(async move { raft.client_write(put(100)).await });
    let logged = last_index + 1;
    nodes[&leader]
        .raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.last_log_index >= Some(logged), "logged")
        .await
        .unwrap();
    let old = nodes.remove(&leader).unwrap();
    old.raft.shutdown().await.unwrap();
    drop(unanswered);
    // The entry is durable once the log store's writer got to it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = riptide_cluster::open_partition(&old.db).unwrap().0;
        let floor = RestartFloor::of(&log, leader).await.unwrap();
        if floor.get().map(|(_, index)| index) == Some(logged) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry never reached the log: {:?}",
            floor.get()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Restarted (before its followers stand), it leads the same term at once; openraft's read
    // index confirms that with a majority, but the logged entry is not applied.
    let Node { db, _dir, .. } = old;
    let (node, floor) = run_node(&router, leader, slow.clone(), db, _dir).await;
    let term = floor.get().expect("restarted as leader").0;
    node.raft
        .wait(Some(Duration::from_secs(5)))
        .metrics(
            |m| m.current_leader == Some(leader) && m.current_term == term,
            "leads its old term",
        )
        .await
        .unwrap();
    node.raft.ensure_linearizable().await.unwrap();
    assert!(
        node.raft.metrics().borrow().last_applied.map(|l| l.index) < Some(logged),
        "openraft's read index covered the restarted leader's log after all"
    );
    // Ours waits for it, and fails while the entry cannot commit.
    let early = read_index(&node.raft, &floor, Duration::from_millis(300)).await;
    assert!(matches!(early, Err(riptide::Error::Replication(_))), "{early:?}");
    assert!(node.raft.metrics().borrow().last_applied.map(|l| l.index) < Some(logged));

    // Once its followers get the entry, it commits, applies, and the read index passes.
    router.entries_held.lock().clear();
    read_index(&node.raft, &floor, Duration::from_secs(10)).await.unwrap();
    assert!(node.raft.metrics().borrow().last_applied.map(|l| l.index) >= Some(logged));
    assert!(keys_of(&node).contains(&100));
    assert_eq!(floor.get(), None, "a reached floor is cleared");
    nodes.insert(leader, node);
    for node in nodes.values() {
        node.raft.shutdown().await.unwrap();
    }
}
