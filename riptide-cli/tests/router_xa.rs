//! Cross-partition transactions through `riptide router` (two-phase commit over XA branches),
//! with real processes on loopback: three partitions, each a replicated group of one
//! `riptide serve` (so it can prepare), and routers.
//!
//! - Bank: client threads move money between accounts on different partitions in
//!   transactions (some reading the total across partitions inside the transaction); the
//!   total never changes, and no branch or decision is left behind.
//! - A transaction's writes on several partitions are invisible until its COMMIT, and a
//!   ROLLBACK leaves nothing.
//! - A router killed (by its test hook `RIPTIDE_ROUTER_CRASH_AT`) after the prepares: another
//!   router's resolver aborts the prepared branch, and nothing of the transfer stays. Killed
//!   after the home's commit: the resolver commits the branch, and the whole transfer stays.

mod router_common;
mod serve_common;

use riptide_server::client::{Client, ClientError, QueryResult};
use riptide_server::router::placement::{partition_of, KeyValue};
use router_common::Router;
use serve_common::{free_port, Server};
use std::time::{Duration, Instant};

const ACCOUNTS: i64 = 12;
const START: i64 = 100;

/// A router over single-replica partitions whose resolver acts after 2 s, killed at
/// `crash_at` of its first cross-partition commit when given (its test hook).
fn start_router(partitions: &[u16], crash_at: Option<&str>) -> Router {
    let lists: Vec<Vec<u16>> = partitions.iter().map(|p| vec![*p]).collect();
    let env: Vec<(&str, &str)> = crash_at.map(|c| ("RIPTIDE_ROUTER_CRASH_AT", c)).into_iter().collect();
    Router::start_with(&lists, &["--xa-resolve-after-ms", "2000"], &env)
}

/// A partition: one `riptide serve` that is the only replica of its Raft group.
fn partition(dir: &std::path::Path, secret: &std::path::Path) -> Server {
    let raft = format!("127.0.0.1:{}", free_port());
    let member = format!("1={raft}");
    Server::start_with(
        dir,
        true,
        &[
            "--node-id",
            "1",
            "--raft-listen",
            &raft,
            "--cluster-secret-file",
            secret.to_str().unwrap(),
            "--bootstrap",
            &member,
            "--election-timeout-ms",
            "300",
        ],
    )
}

fn part(id: i64) -> usize {
    partition_of(&[KeyValue::Int(i128::from(id))], 3)
}

fn code(r: Result<QueryResult, ClientError>) -> Option<u16> {
    r.err().and_then(|e| e.code())
}

fn value(c: &mut Client, sql: &str) -> i64 {
    c.rows(sql).unwrap()[0][0].as_deref().unwrap().parse().unwrap()
}

fn bal(c: &mut Client, id: i64) -> i64 {
    value(c, &format!("SELECT bal FROM accounts WHERE id = {id}"))
}

/// Prepared branches and decision rows left on a partition (read on the partition itself).
fn leftovers(port: u16) -> (usize, Vec<String>) {
    let mut c = Client::connect(("127.0.0.1", port), "root", "", None).unwrap();
    let prepared = c.rows("XA RECOVER").unwrap().len();
    let decisions = match c.rows("SELECT outcome FROM riptide_xa.decisions") {
        Ok(rows) => {
            let mut v: Vec<String> = rows.into_iter().map(|r| r[0].clone().unwrap()).collect();
            v.sort();
            v
        }
        Err(e) if matches!(e.code(), Some(1146) | Some(1049)) => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    (prepared, decisions)
}

/// One transfer of 1 from `a` to `b`, retried on deadlocks and conflicts; true once committed.
fn transfer(c: &mut Client, a: i64, b: i64, read_total: bool) -> bool {
    for _ in 0..50 {
        let step = (|| -> Result<(), ClientError> {
            c.query("BEGIN")?;
            c.query(&format!("UPDATE accounts SET bal = bal - 1 WHERE id = {a}"))?;
            if read_total {
                c.query("SELECT SUM(bal) FROM accounts")?;
            }
            c.query(&format!("UPDATE accounts SET bal = bal + 1 WHERE id = {b}"))?;
            c.query("COMMIT")?;
            Ok(())
        })();
        match step {
            Ok(()) => return true,
            Err(e) if matches!(e.code(), Some(1213) | Some(1205)) => {
                let _ = c.query("ROLLBACK");
            }
            Err(e) => panic!("transfer {a} -> {b}: {e}"),
        }
    }
    false
}

#[test]
fn transactions_over_partitions_commit_whole_or_not_at_all() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("secret");
    std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
    let servers: Vec<Server> = (0..3)
        .map(|i| partition(&root.path().join(format!("p{i}")), &secret))
        .collect();
    let ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    // Each partition creates `sbtest` once it leads its group.
    let deadline = Instant::now() + Duration::from_secs(30);
    for &port in &ports {
        while Client::connect(("127.0.0.1", port), "root", "", Some("sbtest")).is_err() {
            assert!(Instant::now() < deadline, "partition at {port} never created sbtest");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let router = start_router(&ports, None);
    let mut c = router.client();
    c.query("CREATE TABLE accounts (id INT PRIMARY KEY, bal INT NOT NULL)")
        .unwrap();
    for id in 0..ACCOUNTS {
        c.query(&format!("INSERT INTO accounts VALUES ({id}, {START})"))
            .unwrap();
    }
    let total = ACCOUNTS * START;
    let on = |p: usize, n: usize| (0..ACCOUNTS).filter(|&id| part(id) == p).nth(n).unwrap();
    let (a, b, d) = (on(0, 0), on(1, 0), on(2, 0));

    // Invisible until COMMIT; a ROLLBACK leaves nothing.
    let mut other = router.client();
    c.query("BEGIN").unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal - 10 WHERE id = {a}"))
        .unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal + 10 WHERE id = {b}"))
        .unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal + 0 WHERE id = {d}"))
        .unwrap();
    assert_eq!(value(&mut c, "SELECT SUM(bal) FROM accounts"), total);
    assert_eq!(bal(&mut other, b), START);
    c.query("COMMIT").unwrap();
    assert_eq!((bal(&mut other, a), bal(&mut other, b)), (START - 10, START + 10));
    c.query("BEGIN").unwrap();
    c.query(&format!("UPDATE accounts SET bal = 0 WHERE id = {a}")).unwrap();
    c.query(&format!("UPDATE accounts SET bal = 0 WHERE id = {b}")).unwrap();
    c.query("ROLLBACK").unwrap();
    assert_eq!((bal(&mut other, a), bal(&mut other, b)), (START - 10, START + 10));
    // An error that rolls back the home's transaction rolls back the branches too: a client
    // that commits anyway commits nothing. (c's snapshot on a's partition predates other's
    // update of a, so c's own update of a is a write conflict.)
    let before = (bal(&mut other, a), bal(&mut other, b));
    c.query("BEGIN").unwrap();
    assert_eq!(bal(&mut c, a), before.0);
    c.query(&format!("UPDATE accounts SET bal = bal + 1 WHERE id = {b}"))
        .unwrap();
    other
        .query(&format!("UPDATE accounts SET bal = bal + 1 WHERE id = {a}"))
        .unwrap();
    assert_eq!(
        code(c.query(&format!("UPDATE accounts SET bal = bal - 1 WHERE id = {a}"))),
        Some(1213)
    );
    let _ = c.query("COMMIT");
    assert_eq!((bal(&mut other, a), bal(&mut other, b)), (before.0 + 1, before.1));
    other
        .query(&format!("UPDATE accounts SET bal = bal - 1 WHERE id = {a}"))
        .unwrap();
    // One statement still writes to one partition.
    assert_eq!(
        code(c.query(&format!("UPDATE accounts SET bal = 0 WHERE id IN ({a}, {b})"))),
        Some(1235)
    );

    // Bank: concurrent transfers between random accounts keep the total.
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let port = router.port;
        workers.push(std::thread::spawn(move || {
            let mut c = Client::connect(("127.0.0.1", port), "root", "", Some("sbtest")).unwrap();
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (w + 1);
            let mut done = 0;
            for i in 0..30 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let x = (seed % ACCOUNTS as u64) as i64;
                let y = (x + 1 + (seed >> 20) as i64 % (ACCOUNTS - 1)) % ACCOUNTS;
                if transfer(&mut c, x, y, i % 5 == 0) {
                    done += 1;
                }
            }
            done
        }));
    }
    let done: i32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(done > 45, "only {done} of 90 transfers committed");
    assert_eq!(value(&mut other, "SELECT SUM(bal) FROM accounts"), total);
    // Nothing left prepared, and soon no decision but aborts (the resolver task deletes
    // commit rows in batches; it may also abort a coordinator it found slow, whose transfer
    // was then retried).
    for &port in &ports {
        assert_eq!(leftovers(port).0, 0, "partition at {port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let decisions = leftovers(port).1;
            if decisions.iter().all(|d| d == "A") {
                break;
            }
            assert!(Instant::now() < deadline, "partition at {port}: {decisions:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Autocommit off: the first statement opens the home, the second a branch; COMMIT commits
    // both. A SET in a transaction on one partition opens no branch elsewhere.
    c.query("SET autocommit = 0").unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal - 2 WHERE id = {a}"))
        .unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal + 2 WHERE id = {d}"))
        .unwrap();
    c.query("COMMIT").unwrap();
    c.query("SET autocommit = 1").unwrap();
    assert_eq!(value(&mut other, "SELECT SUM(bal) FROM accounts"), total);
    let a2 = on(0, 1);
    c.query("BEGIN").unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal - 1 WHERE id = {a}"))
        .unwrap();
    c.query("SET SESSION innodb_lock_wait_timeout = 20").unwrap();
    c.query(&format!("UPDATE accounts SET bal = bal + 1 WHERE id = {a2}"))
        .unwrap();
    c.query("COMMIT").unwrap();
    assert_eq!(value(&mut other, "SELECT SUM(bal) FROM accounts"), total);
    for &port in &ports {
        assert_eq!(leftovers(port).0, 0);
    }

    // A router dies after the prepares: the resolver (of the first router) aborts the branch.
    let aborts = |port| leftovers(port).1.iter().filter(|d| *d == "A").count();
    let aborts_before = aborts(ports[part(a)]);
    let before = (bal(&mut other, a), bal(&mut other, b));
    {
        let crashing = start_router(&ports, Some("after-prepare"));
        let mut x = crashing.client();
        x.query("BEGIN").unwrap();
        x.query(&format!("UPDATE accounts SET bal = bal - 5 WHERE id = {a}"))
            .unwrap();
        x.query(&format!("UPDATE accounts SET bal = bal + 5 WHERE id = {b}"))
            .unwrap();
        assert!(x.query("COMMIT").is_err(), "the router died in the COMMIT");
    }
    wait_until_resolved(&ports);
    assert_eq!((bal(&mut other, a), bal(&mut other, b)), before, "nothing of it stays");
    assert_eq!(aborts(ports[part(a)]), aborts_before + 1, "the abort is recorded");
    // Its rows are free again.
    assert!(transfer(&mut c, a, b, false));

    // A router dies after the home's commit: the resolver commits the branch.
    let before = (bal(&mut other, a), bal(&mut other, b));
    {
        let crashing = start_router(&ports, Some("after-commit"));
        let mut x = crashing.client();
        x.query("BEGIN").unwrap();
        x.query(&format!("UPDATE accounts SET bal = bal - 7 WHERE id = {a}"))
            .unwrap();
        x.query(&format!("UPDATE accounts SET bal = bal + 7 WHERE id = {b}"))
            .unwrap();
        assert!(x.query("COMMIT").is_err(), "the router died in the COMMIT");
    }
    wait_until_resolved(&ports);
    assert_eq!(
        (bal(&mut other, a), bal(&mut other, b)),
        (before.0 - 7, before.1 + 7),
        "all of it stays"
    );
    assert_eq!(value(&mut other, "SELECT SUM(bal) FROM accounts"), total);
    drop(router);
    for s in servers {
        s.stop();
    }
}

/// Waits (at most 30 s) until no partition holds a prepared branch.
fn wait_until_resolved(ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ports.iter().any(|&p| leftovers(p).0 > 0) {
        assert!(Instant::now() < deadline, "a prepared branch was never resolved");
        std::thread::sleep(Duration::from_millis(50));
    }
}
