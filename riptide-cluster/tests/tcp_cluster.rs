//! Three nodes of one partition talking over loopback TCP through the authenticated transport:
//! writes replicate, a stopped leader is replaced; a peer without the cluster's secret, or of
//! another cluster, is refused, and so is garbage. The same over mutual TLS, where a peer
//! without TLS, with a certificate of another CA, or naming another address is refused.

use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{BasicNode, Config, Raft, Vote};
use riptide_cluster::transport::{server::ServerHandle, spawn_server, ClusterAuth, TcpNetwork};
use riptide_cluster::TypeConfig;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{applied, put, TestCa};

type NodeId = u64;
const SECRET: &[u8] = b"a cluster secret of 32 bytes....";

struct Node {
    raft: Raft<TypeConfig>,
    server: ServerHandle,
    addr: String,
    db: riptide::Db,
    _dir: tempfile::TempDir,
}

async fn start_node(id: NodeId, auth: &ClusterAuth) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let db = riptide::Db::open(dir.path(), riptide::Options::default()).unwrap();
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        ..Config::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (log, sm) = riptide_cluster::open_partition(&db).unwrap();
    let raft = Raft::new(
        id,
        Arc::new(config.validate().unwrap()),
        TcpNetwork::new(id, auth.clone()),
        log,
        sm,
    )
    .await
    .unwrap();
    let server = spawn_server(listener, raft.clone(), auth.clone(), Default::default());
    Node {
        raft,
        server,
        addr,
        db,
        _dir: dir,
    }
}

/// The leader the running nodes among `ids` agree on, other than `not`.
async fn leader(nodes: &BTreeMap<NodeId, Node>, ids: &[NodeId], not: Option<NodeId>) -> NodeId {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen: HashSet<Option<NodeId>> = ids
            .iter()
            .map(|id| nodes[id].raft.metrics().borrow().current_leader)
            .collect();
        if let [Some(l)] = seen.into_iter().collect::<Vec<_>>()[..] {
            if Some(l) != not {
                return l;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader agreed on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn write(nodes: &BTreeMap<NodeId, Node>, ids: &[NodeId], not: Option<NodeId>, key: u32) -> u64 {
    for attempt in 1.. {
        let l = leader(nodes, ids, not).await;
        match nodes[&l].raft.client_write(put(key)).await {
            Ok(reply) => return reply.log_id.index,
            Err(e) => assert!(attempt < 100, "write {key} kept failing: {e}"),
        }
    }
    unreachable!()
}

fn key_count(node: &Node) -> usize {
    node.db
        .table("kv")
        .map(|t| t.iter(&Default::default()).unwrap().count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_replicates_over_tcp_and_outlives_its_leader() {
    let auth = ClusterAuth::new("test-cluster", SECRET).unwrap();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(id, &auth).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = nodes.iter().map(|(id, n)| (*id, BasicNode::new(&n.addr))).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let mut last = 0;
    for key in 0..30 {
        last = write(&nodes, &[1, 2, 3], None, key).await;
    }
    for node in nodes.values() {
        applied(&node.raft, last).await;
        assert_eq!(key_count(node), 30);
    }

    // The leader goes away (server stopped, Raft shut down): the other two go on.
    let old = leader(&nodes, &[1, 2, 3], None).await;
    nodes[&old].server.stop();
    nodes[&old].raft.shutdown().await.unwrap();
    let rest: Vec<NodeId> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    for key in 30..45 {
        last = write(&nodes, &rest, Some(old), key).await;
    }
    for id in &rest {
        applied(&nodes[id].raft, last).await;
        assert_eq!(key_count(&nodes[id]), 45);
    }
    for id in &rest {
        assert!(nodes[id].server.stats().accepted.load(Ordering::Relaxed) >= 1);
        assert_eq!(nodes[id].server.stats().refused.load(Ordering::Relaxed), 0);
        nodes[id].raft.shutdown().await.unwrap();
        nodes[id].server.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_the_secret_or_of_another_cluster_and_garbage_are_refused() {
    let auth = ClusterAuth::new("test-cluster", SECRET).unwrap();
    let node = start_node(1, &auth).await;
    let target = BasicNode::new(&node.addr);
    let vote = || VoteRequest::new(Vote::new(7, 99), None);
    let option = RPCOption::new(Duration::from_secs(2));

    let strangers = [
        ClusterAuth::new("test-cluster", b"another secret of 32 bytes......").unwrap(),
        ClusterAuth::new("other-cluster", SECRET).unwrap(),
    ];
    for (i, stranger) in strangers.into_iter().enumerate() {
        let mut conn = TcpNetwork::new(99, stranger).new_client(1, &target).await;
        let err = conn.vote(vote(), option.clone()).await.unwrap_err();
        assert!(
            matches!(err, openraft::error::RPCError::Unreachable(_)),
            "stranger {i} got {err:?}"
        );
    }
    // A frame announcing 4 GiB: refused without reading (or allocating) it.
    let mut raw = tokio::net::TcpStream::connect(&node.addr).await.unwrap();
    raw.write_all(&[0xff; 16]).await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
        .await
        .unwrap();
    assert!(
        matches!(closed, Ok(0) | Err(_)),
        "the server kept a garbage connection open"
    );
    assert_eq!(node.server.stats().refused.load(Ordering::Relaxed), 3);

    // A member of the cluster still gets through.
    let mut member = TcpNetwork::new(2, auth).new_client(1, &target).await;
    member.vote(vote(), option).await.unwrap();
    assert_eq!(node.server.stats().accepted.load(Ordering::Relaxed), 1);
    node.raft.shutdown().await.unwrap();
    node.server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_replicates_over_mutual_tls_and_refuses_peers_without_a_certificate_of_its_ca() {
    let ca = TestCa::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let auth = ClusterAuth::new("test-cluster", SECRET)
            .unwrap()
            .with_tls(ca.tls(&["127.0.0.1"]));
        nodes.insert(id, start_node(id, &auth).await);
    }
    let members: BTreeMap<NodeId, BasicNode> = nodes.iter().map(|(id, n)| (*id, BasicNode::new(&n.addr))).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let mut last = 0;
    for key in 0..20 {
        last = write(&nodes, &[1, 2, 3], None, key).await;
    }
    for node in nodes.values() {
        applied(&node.raft, last).await;
        assert_eq!(key_count(node), 20);
    }

    let target = BasicNode::new(&nodes[&1].addr);
    let vote = || VoteRequest::new(Vote::new(7, 99), None);
    let option = RPCOption::new(Duration::from_secs(2));
    let refused_before = nodes[&1].server.stats().refused.load(Ordering::Relaxed);
    let other_ca = TestCa::new();
    let strangers = [
        ("no TLS", ClusterAuth::new("test-cluster", SECRET).unwrap()),
        (
            "a certificate of another CA",
            ClusterAuth::new("test-cluster", SECRET)
                .unwrap()
                .with_tls(other_ca.tls(&["127.0.0.1"])),
        ),
        // It trusts the node's certificate: only the node's check of the client's can refuse.
        (
            "a certificate of another CA, trusting the cluster's",
            ClusterAuth::new("test-cluster", SECRET)
                .unwrap()
                .with_tls(other_ca.tls_trusting(&ca, &["127.0.0.1"])),
        ),
        (
            "the cluster's CA but not its secret",
            ClusterAuth::new("test-cluster", b"another secret of 32 bytes......")
                .unwrap()
                .with_tls(ca.tls(&["127.0.0.1"])),
        ),
    ];
    for (what, stranger) in strangers {
        let mut conn = TcpNetwork::new(99, stranger).new_client(1, &target).await;
        let err = conn.vote(vote(), option.clone()).await.unwrap_err();
        assert!(
            matches!(err, openraft::error::RPCError::Unreachable(_)),
            "a peer with {what} got {err:?}"
        );
    }
    // The node counts a refusal when its side of the handshake ends, which may be just after
    // the stranger's side gave up. (A member's connection cut mid-handshake would count too.)
    let refused = || nodes[&1].server.stats().refused.load(Ordering::Relaxed) - refused_before;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while refused() < 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused() >= 4, "{} refusals counted", refused());

    // A member refuses a server whose certificate names another address, or comes from
    // another CA: it dials 127.0.0.1, so a server certificate for 127.0.0.2 will not do.
    // Each impostor trusts the member's certificate: only the member's check can refuse.
    for (what, server_tls) in [
        ("names another address", ca.tls(&["127.0.0.2"])),
        ("comes from another CA", other_ca.tls_trusting(&ca, &["127.0.0.1"])),
    ] {
        let auth = ClusterAuth::new("test-cluster", SECRET).unwrap().with_tls(server_tls);
        let impostor = start_node(9, &auth).await;
        let member = ClusterAuth::new("test-cluster", SECRET)
            .unwrap()
            .with_tls(ca.tls(&["127.0.0.1"]));
        let mut conn = TcpNetwork::new(2, member)
            .new_client(9, &BasicNode::new(&impostor.addr))
            .await;
        let err = conn.vote(vote(), option.clone()).await.unwrap_err();
        assert!(
            matches!(err, openraft::error::RPCError::Unreachable(_)),
            "a member trusted a server whose certificate {what}: {err:?}"
        );
        impostor.raft.shutdown().await.unwrap();
        impostor.server.stop();
    }

    for node in nodes.values() {
        node.raft.shutdown().await.unwrap();
        node.server.stop();
    }
}
