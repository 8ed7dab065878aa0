//! Three `riptide serve` processes as the replicas of one partition (`--node-id`), on
//! loopback, with durable commits:
//!
//! - a write on a follower is refused with 1290 (naming the leader), a read too unless the
//!   follower has `--follower-reads`, where it sees the applied rows;
//! - client threads insert rows through whichever node leads while the leader is killed with
//!   SIGKILL twice (each time restarted on its data directory, so it rejoins as a follower);
//!   clients reconnect to another node and go on;
//! - at the end the leader holds every row whose INSERT was acknowledged, and nothing else than
//!   rows that were sent (an INSERT whose answer was lost may or may not be there), and the
//!   follower with `--follower-reads` converges to exactly the leader's rows, after a kill of
//!   its own while every node snapshots and purges its log every 25 entries (so it catches up
//!   from a snapshot).

mod cluster_common;
mod serve_common;

use cluster_common::{connect, leader_port, on_leader, wait_for_leader_port};
use riptide_server::client::{Client, ClientError};
use serve_common::{free_port, Server};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: u64 = 3;
const WRITERS: u64 = 3;
const KILLS: usize = 2;

struct Node {
    id: u64,
    dir: PathBuf,
    raft_port: u16,
    metrics_port: u16,
    server: Option<Server>,
    port: u16,
}

fn start(node: &mut Node, secret: &Path, bootstrap: Option<&str>) {
    let raft = format!("127.0.0.1:{}", node.raft_port);
    let metrics = format!("127.0.0.1:{}", node.metrics_port);
    let id = node.id.to_string();
    let mut flags = vec![
        "--node-id",
        &id,
        "--raft-listen",
        &raft,
        "--cluster-secret-file",
        secret.to_str().unwrap(),
        "--election-timeout-ms",
        "300",
        // Snapshots and purges all along: a restarted node may have to catch up from one.
        "--raft-snapshot-every",
        "25",
    ];
    flags.extend(["--metrics-listen", &metrics]);
    if node.id == NODES {
        flags.push("--follower-reads");
    }
    if let Some(list) = bootstrap {
        flags.extend(["--bootstrap", list]);
    }
    let server = Server::start_with(&node.dir, true, &flags);
    node.port = server.port;
    node.server = Some(server);
}

/// The Prometheus text a node serves.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The value of one unlabelled-by-kind Raft gauge (`riptide_raft_<name>{node="<id>"}`) a node
/// serves, or None while the node does not answer.
fn raft_gauge(node: &Node, name: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.metrics_port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let prefix = format!("riptide_raft_{name}{{node=\"{}\"}} ", node.id);
    body.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The value of a Raft counter of one kind (`riptide_raft_<name>{node="<id>",kind="<kind>"}`).
fn raft_counter(node: &Node, name: &str, kind: &str) -> Option<u64> {
    let body = scrape(node.metrics_port);
    let prefix = format!("riptide_raft_{name}{{node=\"{}\",kind=\"{kind}\"}} ", node.id);
    body.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

fn ids(c: &mut Client) -> Result<BTreeSet<u64>, ClientError> {
    Ok(c.rows("SELECT id FROM sbtest.kv")?
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect())
}

/// The ids a follower read sees; none while the follower has not yet applied the replicated
/// CREATE TABLE (error 1146, which a follower that lags the leader answers for a moment). Any
/// other error fails the test.
fn follower_ids(c: &mut Client) -> BTreeSet<u64> {
    match ids(c) {
        Ok(ids) => ids,
        Err(e) if e.code() == Some(1146) => BTreeSet::new(),
        Err(e) => panic!("follower read failed: {e}"),
    }
}

#[test]
fn a_replicated_partition_keeps_every_acknowledged_insert_across_leader_kills() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("secret");
    std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
    let mut nodes: Vec<Node> = (1..=NODES)
        .map(|id| Node {
            id,
            dir: root.path().join(format!("node{id}")),
            raft_port: free_port(),
            metrics_port: free_port(),
            server: None,
            port: 0,
        })
        .collect();
    let members: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}=127.0.0.1:{}", n.id, n.raft_port))
        .collect();
    let members = members.join(",");
    for n in nodes.iter_mut() {
        start(n, &secret, Some(&members));
    }
    let ports = Arc::new(Mutex::new(nodes.iter().map(|n| n.port).collect::<Vec<_>>()));

    // The leader creates the database (`--create-database sbtest`) and the table.
    on_leader(
        &ports,
        "CREATE TABLE sbtest.kv (id BIGINT PRIMARY KEY, writer INT NOT NULL)",
    );
    on_leader(&ports, "INSERT INTO sbtest.kv VALUES (0, 0)");
    let leader = wait_for_leader_port(&ports.lock().unwrap());
    // The leader counts what it proposed: the table and the row at least.
    let proposer = nodes.iter().find(|n| n.port == leader).unwrap();
    let entries = raft_counter(proposer, "proposed_total", "entries").expect("proposed entries");
    let sets = raft_counter(proposer, "proposed_total", "write_sets").expect("proposed write sets");
    assert!(
        entries >= 2 && sets >= entries,
        "proposed {entries} entries holding {sets} write sets"
    );

    // Followers: writes refused with 1290 naming the leader; reads refused unless
    // --follower-reads, which sees the applied row.
    for n in nodes.iter().filter(|n| n.port != leader) {
        let mut f = connect(n.port).unwrap();
        let e = f.query("INSERT INTO sbtest.kv VALUES (1, 0)").unwrap_err();
        assert_eq!(e.code(), Some(1290), "{e}");
        assert!(e.to_string().contains("leader is node"), "{e}");
        if n.id == NODES {
            let deadline = Instant::now() + Duration::from_secs(10);
            while follower_ids(&mut f) != BTreeSet::from([0]) {
                assert!(Instant::now() < deadline, "a follower read never saw the applied row");
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            assert_eq!(f.query("SELECT id FROM sbtest.kv").unwrap_err().code(), Some(1290));
        }
        // Statements without a table are answered everywhere.
        f.query("SELECT 1").unwrap();
    }

    // Writers insert unique ids through the leader, reconnecting on any failure.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let sent = Arc::new(Mutex::new(BTreeSet::new()));
    let counter = Arc::new(AtomicU64::new(1));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (stop, acked, sent, counter, ports) = (
            stop.clone(),
            acked.clone(),
            sent.clone(),
            counter.clone(),
            ports.clone(),
        );
        writers.push(std::thread::spawn(move || {
            let mut client: Option<Client> = None;
            while !stop.load(Ordering::Relaxed) {
                let c = match client.as_mut() {
                    Some(c) => c,
                    None => {
                        let list = ports.lock().unwrap().clone();
                        client = leader_port(&list).and_then(connect);
                        if client.is_none() {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        continue;
                    }
                };
                let id = counter.fetch_add(1, Ordering::Relaxed);
                sent.lock().unwrap().insert(id);
                match c.query(&format!("INSERT INTO sbtest.kv VALUES ({id}, {w})")) {
                    Ok(_) => {
                        acked.lock().unwrap().insert(id);
                    }
                    Err(_) => client = None,
                }
            }
        }));
    }

    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(1500));
        let leader = wait_for_leader_port(&ports.lock().unwrap());
        let n = nodes.iter_mut().find(|n| n.port == leader).unwrap();
        n.server.take().unwrap().kill9();
        std::thread::sleep(Duration::from_millis(1000));
        // Restarted on its data: it rejoins as a follower (no bootstrap: its log is not empty).
        start(n, &secret, None);
        *ports.lock().unwrap() = nodes.iter().map(|n| n.port).collect();
    }
    // The --follower-reads node goes down while the writes go on, and every node snapshots
    // and purges its log every 25 entries: it comes back behind the leader's purged log and
    // catches up from a snapshot (an engine checkpoint sent as one file), which the
    // convergence check below reads.
    {
        let reader = nodes.iter().find(|n| n.id == NODES).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let last = loop {
            if let Some(last) = raft_gauge(reader, "last_log_index") {
                break last;
            }
            assert!(Instant::now() < deadline, "node {NODES} serves no metrics");
            std::thread::sleep(Duration::from_millis(50));
        };
        nodes
            .iter_mut()
            .find(|n| n.id == NODES)
            .unwrap()
            .server
            .take()
            .unwrap()
            .kill9();
        // It stays down until the leader has purged past the end of its log (timing alone
        // left it sometimes close enough behind to catch up from the log).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ports_now = ports.lock().unwrap().clone();
            let leader = leader_port(&ports_now);
            let purged = nodes
                .iter()
                .find(|n| Some(n.port) == leader && n.id != NODES)
                .and_then(|n| raft_gauge(n, "purged_index"));
            if purged.is_some_and(|p| p > last) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the leader never purged past node {NODES}'s last index {last} (purged: {purged:?})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let n = nodes.iter_mut().find(|n| n.id == NODES).unwrap();
        start(n, &secret, None);
        *ports.lock().unwrap() = nodes.iter().map(|n| n.port).collect();
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let sent = sent.lock().unwrap().clone();
    eprintln!("{} inserts acknowledged, {} sent", acked.len(), sent.len());
    assert!(acked.len() > 50, "too few inserts acknowledged: {}", acked.len());

    // Every node, once caught up, holds every acknowledged row and only rows that were sent.
    let leader = wait_for_leader_port(&ports.lock().unwrap());
    let mut c = connect(leader).unwrap();
    let on_leader = ids(&mut c).unwrap();
    let missing: Vec<_> = acked.difference(&on_leader).collect();
    assert!(missing.is_empty(), "acknowledged inserts lost: {missing:?}");
    let unexpected: Vec<_> = on_leader.iter().filter(|id| **id != 0 && !sent.contains(id)).collect();
    assert!(unexpected.is_empty(), "rows never sent: {unexpected:?}");
    // The follower with --follower-reads converges to the leader's rows.
    let reader = nodes.iter().find(|n| n.id == NODES).unwrap();
    if reader.port != leader {
        let mut f = connect(reader.port).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while follower_ids(&mut f) != on_leader {
            assert!(Instant::now() < deadline, "node {NODES} never caught up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // It came back hundreds of entries behind logs that keep 25: it installed a snapshot.
    let metrics = scrape(reader.metrics_port);
    let installed = format!("riptide_raft_snapshots_total{{node=\"{NODES}\",kind=\"installed\"}} ");
    let count: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&installed))
        .unwrap_or_else(|| panic!("no {installed} in:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(count >= 1, "node {NODES} caught up without a snapshot:\n{metrics}");
    for n in nodes.iter_mut() {
        n.server.take().unwrap().stop();
    }
}
