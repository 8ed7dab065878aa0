//! `riptide cluster` against three `riptide serve` replicas: `status` names the leader and the
//! members; a fourth node started without `--bootstrap` is added (`add-node`, through a
//! follower, which hands the change to the leader) and catches up; `transfer-leader` moves the
//! leadership to it; `remove-node` takes node 1 out and writes go on; a wrong secret and
//! missing flags are refused. With `--tls-*`, replicas and `riptide cluster` talk over mutual
//! TLS, and a command without a certificate of the cluster's CA is refused.

mod serve_common;

use riptide_server::client::Client;
use serve_common::{free_port, Server};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn cluster(args: &[&str], secret: &Path) -> (i32, String, String) {
    cluster_with(args, secret, &[])
}

/// `riptide cluster` with `extra` flags (TLS files).
fn cluster_with(args: &[&str], secret: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("cluster")
        .args(args)
        .args(extra)
        .arg("--cluster-secret-file")
        .arg(secret)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn start(dir: &Path, id: u64, raft: &str, secret: &Path, bootstrap: Option<&str>) -> Server {
    start_with(dir, id, raft, secret, bootstrap, &[])
}

fn start_with(dir: &Path, id: u64, raft: &str, secret: &Path, bootstrap: Option<&str>, extra: &[&str]) -> Server {
    let id = id.to_string();
    let mut flags = vec![
        "--node-id",
        &id,
        "--raft-listen",
        raft,
        "--cluster-secret-file",
        secret.to_str().unwrap(),
        "--follower-reads",
    ];
    if let Some(b) = bootstrap {
        flags.extend(["--bootstrap", b]);
    }
    flags.extend(extra);
    Server::start_with(dir, true, &flags)
}

/// Polls `status` at `raft` until `check` holds on its output (20 s at most).
fn wait_status(raft: &str, secret: &Path, what: &str, check: impl Fn(&str) -> bool) -> String {
    wait_status_with(raft, secret, &[], what, check)
}

fn wait_status_with(raft: &str, secret: &Path, extra: &[&str], what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, out, err) = cluster_with(&["status", "--node", raft], secret, extra);
        if code == 0 && check(&out) {
            return out;
        }
        assert!(Instant::now() < deadline, "{what}: last status {out} {err}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn leader_of(status: &str) -> u64 {
    let first = status.lines().next().unwrap();
    let after = first.split("leader ").nth(1).unwrap();
    after.split(',').next().unwrap().trim().parse().unwrap()
}

fn query_until_ok(port: u16, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = Client::connect(("127.0.0.1", port), "root", "", None).and_then(|mut c| c.query(sql));
        match result {
            Ok(_) => return,
            // An earlier try whose answer was lost did insert the row.
            Err(e) if e.code() == Some(1062) => return,
            Err(e) => assert!(Instant::now() < deadline, "{sql} on port {port}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn count(port: u16) -> Option<String> {
    let mut c = Client::connect(("127.0.0.1", port), "root", "", None).ok()?;
    c.rows("SELECT COUNT(*) FROM sbtest.t")
        .ok()
        .map(|r| r[0][0].clone().unwrap())
}

#[test]
fn cluster_commands_add_move_and_remove_members() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("secret");
    std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
    let raft: Vec<String> = (0..4).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let members = format!("1={},2={},3={}", raft[0], raft[1], raft[2]);
    let mut servers: Vec<Option<Server>> = (0..3)
        .map(|i| {
            Some(start(
                &root.path().join(format!("n{}", i + 1)),
                i as u64 + 1,
                &raft[i],
                &secret,
                Some(&members),
            ))
        })
        .collect();

    let status = wait_status(&raft[0], &secret, "a leader", |s| {
        !s.lines().next().unwrap().contains("leader -")
    });
    assert!(status.contains(&format!("voters: {members}")), "{status}");
    let leader = leader_of(&status);
    let leader_port = servers[leader as usize - 1].as_ref().unwrap().port;
    query_until_ok(leader_port, "CREATE TABLE sbtest.t (id INT PRIMARY KEY)");
    query_until_ok(leader_port, "INSERT INTO sbtest.t VALUES (1), (2), (3)");
    query_until_ok(leader_port, "CREATE TABLE sbtest.load (id INT PRIMARY KEY)");
    // The leader's status shows each follower's lag.
    let on_leader = wait_status(&raft[leader as usize - 1], &secret, "lags", |s| s.contains("follower"));
    assert_eq!(on_leader.matches("follower ").count(), 2, "{on_leader}");

    // A fourth node, started without --bootstrap, joins through a follower's address.
    let n4 = start(&root.path().join("n4"), 4, &raft[3], &secret, None);
    // A follower as of now (the group may still be settling after its first elections).
    let leader = leader_of(&wait_status(&raft[0], &secret, "a leader", |s| {
        !s.lines().next().unwrap().contains("leader -")
    }));
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let (code, out, err) = cluster(
        &[
            "add-node",
            "--node",
            &raft[follower as usize - 1],
            "--id",
            "4",
            "--addr",
            &raft[3],
        ],
        &secret,
    );
    assert_eq!(code, 0, "add-node: {out} {err}");
    // Sent to a follower, the change went to the leader (unless leadership moved meanwhile).
    if !err.contains("asking the leader") {
        eprintln!("add-node was not redirected: node {follower} led by then ({err})");
    }
    wait_status(&raft[0], &secret, "four voters", |s| {
        s.contains(&format!("4={}", raft[3]))
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(n4.port).as_deref() != Some("3") {
        assert!(Instant::now() < deadline, "node 4 never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The leadership moves to node 4 at the first try, which then takes writes, while a client
    // writes to the old leader all along (the leader refuses writes during the transfer, with
    // 1290, and the other voters do not stand, so only node 4 can win).
    let old = leader_of(&wait_status(&raft[0], &secret, "a leader", |s| {
        !s.lines().next().unwrap().contains("leader -")
    }));
    let old_port = servers[old as usize - 1].as_ref().unwrap().port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut refused) = (0u64, 0u64);
            let mut client = None;
            for id in 1000.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                if client.is_none() {
                    client = Client::connect(("127.0.0.1", old_port), "root", "", None).ok();
                }
                let Some(c) = client.as_mut() else { continue };
                match c.query(&format!("INSERT INTO sbtest.load VALUES ({id})")) {
                    Ok(_) => ok += 1,
                    Err(e) if e.code() == Some(1290) => refused += 1,
                    Err(_) => client = None,
                }
            }
            (ok, refused)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = cluster(&["transfer-leader", "--node", &raft[0], "--to", "4"], &secret);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, refused) = load.join().unwrap();
    assert_eq!(code, 0, "transfer-leader under writes: {out} {err}");
    assert!(out.contains("node 4 leads"), "{out}");
    assert!(ok > 0, "no write went through before the transfer ({refused} refused)");
    query_until_ok(n4.port, "INSERT INTO sbtest.t VALUES (4)");

    // Node 1 leaves; the other three go on, and node 1 may stop.
    let (code, out, err) = cluster(&["remove-node", "--node", &raft[3], "--id", "1"], &secret);
    assert_eq!(code, 0, "remove-node: {out} {err}");
    wait_status(&raft[3], &secret, "node 1 gone", |s| {
        s.contains(&format!("voters: 2={},3={},4={}", raft[1], raft[2], raft[3]))
    });
    servers[0].take().unwrap().stop();
    let status = wait_status(&raft[3], &secret, "a leader after the removal", |s| {
        !s.lines().next().unwrap().contains("leader -")
    });
    let leader = leader_of(&status);
    let port = if leader == 4 {
        n4.port
    } else {
        servers[leader as usize - 1].as_ref().unwrap().port
    };
    query_until_ok(port, "INSERT INTO sbtest.t VALUES (5)");
    assert_eq!(count(port).as_deref(), Some("5"));

    // Refusals: a wrong secret, a missing --node, bad members.
    let wrong = root.path().join("wrong");
    std::fs::write(&wrong, "another secret of sixteen bytes or more").unwrap();
    let (code, _, err) = cluster(&["status", "--node", &raft[3]], &wrong);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = cluster(&["status"], &secret);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cluster(&["init", "--node", &raft[3], "--members", "0=nowhere"], &secret);
    assert_eq!(code, 2, "{err}");
    // init on a formed group changes nothing.
    let (code, out, err) = cluster(&["init", "--node", &raft[3], "--members", &members], &secret);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing changed"), "{out}");

    n4.stop();
    for s in servers.into_iter().flatten() {
        s.stop();
    }
}

/// Writes a CA and, under it, a certificate for 127.0.0.1 with its key into `dir`; returns
/// the `--tls-*` flags naming them. `prefix` keeps several CAs apart.
fn write_pki(dir: &Path, prefix: &str) -> Vec<String> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let files = [("ca", ca.pem()), ("cert", cert.pem()), ("key", key.serialize_pem())];
    let mut flags = Vec::new();
    for (name, pem) in files {
        let path = dir.join(format!("{prefix}-{name}.pem"));
        std::fs::write(&path, pem).unwrap();
        flags.push(format!("--tls-{name}"));
        flags.push(path.to_str().unwrap().to_string());
    }
    flags
}

#[test]
fn replicas_and_cluster_commands_talk_over_mutual_tls_when_configured() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("secret");
    std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
    let tls = write_pki(root.path(), "cluster");
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let raft: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let members = format!("1={},2={},3={}", raft[0], raft[1], raft[2]);
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            start_with(
                &root.path().join(format!("n{}", i + 1)),
                i as u64 + 1,
                &raft[i],
                &secret,
                Some(&members),
                &tls,
            )
        })
        .collect();
    let status = wait_status_with(&raft[0], &secret, &tls, "a leader over TLS", |s| {
        !s.lines().next().unwrap().contains("leader -")
    });
    let leader = leader_of(&status);
    let leader_port = servers[leader as usize - 1].port;
    query_until_ok(leader_port, "CREATE TABLE sbtest.t (id INT PRIMARY KEY)");
    query_until_ok(leader_port, "INSERT INTO sbtest.t VALUES (1), (2)");
    // Every replica has the rows (followers read their applied state).
    for s in &servers {
        let deadline = Instant::now() + Duration::from_secs(20);
        while count(s.port).as_deref() != Some("2") {
            assert!(Instant::now() < deadline, "a replica never got the rows over TLS");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Without TLS, or with a certificate of another CA, the command is refused.
    let (code, out, err) = cluster(&["status", "--node", &raft[0]], &secret);
    assert_eq!(code, 1, "status without TLS: {out} {err}");
    let other = write_pki(root.path(), "other");
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    let (code, out, err) = cluster_with(&["status", "--node", &raft[0]], &secret, &other);
    assert_eq!(code, 1, "status with another CA's certificate: {out} {err}");
    // Some TLS flags but not all: a usage error.
    let (code, _, err) = cluster_with(&["status", "--node", &raft[0]], &secret, &tls[..2]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("go together"), "{err}");

    for s in servers {
        s.stop();
    }
}
