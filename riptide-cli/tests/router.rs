//! `riptide router` over partitions, with real processes on loopback:
//!
//! - over three plain `riptide serve` partitions: DDL reaches every partition; each row is
//!   stored on the partition its key hashes to and nowhere else; point statements, fanned-out
//!   reads (rows; COUNT, SUM, MIN, MAX; DISTINCT, ORDER BY, LIMIT/OFFSET) and single-partition
//!   transactions give what one server would;
//!   a write that would span partitions is refused and changes nothing, inside a transaction
//!   too, where the transaction goes on;
//! - session state (autocommit off, SETs replayed on connections opened later) keeps a
//!   transaction on one partition and commits what the client committed;
//! - over two partitions that are each a replicated group of three: inserts and transfers
//!   through the router go on while a partition's leader is killed; every acknowledged insert
//!   is there at the end, and no transfer is half applied.

mod cluster_common;
mod router_common;
mod serve_common;

use cluster_common::{on_leader, Cluster};
use riptide_server::client::{Client, ClientError, Param, QueryResult};
use riptide_server::router::placement::{partition_of, KeyValue};
use router_common::Router;
use serve_common::Server;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn direct(port: u16) -> Client {
    Client::connect(("127.0.0.1", port), "root", "", Some("sbtest")).unwrap()
}

fn ids(c: &mut Client, sql: &str) -> BTreeSet<i64> {
    c.rows(sql)
        .unwrap()
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect()
}

fn one_value(c: &mut Client, sql: &str) -> String {
    let rows = c.rows(sql).unwrap();
    assert_eq!(rows.len(), 1, "{sql}");
    rows[0][0].clone().unwrap_or_else(|| "NULL".into())
}

fn code(r: Result<QueryResult, ClientError>) -> Option<u16> {
    r.err().and_then(|e| e.code())
}

fn part(id: i64) -> usize {
    partition_of(&[KeyValue::Int(i128::from(id))], 3)
}

#[test]
fn the_router_places_rows_by_key_and_keeps_writes_on_one_partition() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path(), false)).collect();
    let router = Router::start(&servers.iter().map(|s| vec![s.port]).collect::<Vec<_>>());
    let mut c = router.client();
    c.query("CREATE TABLE t (id INT NOT NULL, k INT, c VARCHAR(20), PRIMARY KEY (id))")
        .unwrap();
    for id in 0..60i64 {
        c.query(&format!("INSERT INTO t VALUES ({id}, {}, 'row{id}')", id * 10))
            .unwrap();
    }
    // Each partition holds exactly its keys.
    for (p, s) in servers.iter().enumerate() {
        let held = ids(&mut direct(s.port), "SELECT id FROM t");
        let expected: BTreeSet<i64> = (0..60).filter(|&id| part(id) == p).collect();
        assert_eq!(held, expected, "partition {p}");
        assert!(!held.is_empty());
    }
    assert_eq!(one_value(&mut c, "SELECT c FROM t WHERE id = 17"), "row17");
    assert_eq!(ids(&mut c, "SELECT id FROM t"), (0..60).collect());
    assert_eq!(ids(&mut c, "SELECT id FROM t WHERE k >= 300"), (30..60).collect());
    assert_eq!(
        ids(&mut c, "SELECT id FROM t WHERE id IN (1, 2, 3, 4)"),
        (1..5).collect()
    );
    let agg = c.rows("SELECT COUNT(*), SUM(k) FROM t").unwrap();
    assert_eq!(
        agg,
        vec![vec![
            Some("60".to_string()),
            Some((0..60).map(|i| i * 10).sum::<i64>().to_string())
        ]]
    );
    // Fanned-out reads combined as one server would answer them.
    let ordered = c.rows("SELECT id FROM t ORDER BY id DESC LIMIT 2, 3").unwrap();
    assert_eq!(
        ordered,
        [
            [Some("57".to_string())],
            [Some("56".to_string())],
            [Some("55".to_string())]
        ]
    );
    let ordered = c.rows("SELECT c FROM t WHERE id < 12 ORDER BY c LIMIT 3").unwrap();
    let expected: Vec<Vec<Option<String>>> = ["row0", "row1", "row10"]
        .iter()
        .map(|v| vec![Some(v.to_string())])
        .collect();
    assert_eq!(ordered, expected);
    let agg = c.rows("SELECT MIN(id), MAX(c), COUNT(c) FROM t WHERE k < 100").unwrap();
    assert_eq!(
        agg,
        [[Some("0".to_string()), Some("row9".to_string()), Some("10".to_string())]]
    );
    // DISTINCT values that span partitions fold into one row each; negative numbers, a
    // backslash in a literal and LIMIT with OFFSET as one server answers them.
    c.query("CREATE TABLE g (id INT PRIMARY KEY, bucket INT, path VARCHAR(20))")
        .unwrap();
    for id in 0..40 {
        c.query(&format!(
            "INSERT INTO g VALUES ({id}, {}, 'C:\\\\d{}')",
            5 - id % 4 * 5,
            id % 2
        ))
        .unwrap();
    }
    let distinct = c.rows("SELECT DISTINCT bucket FROM g ORDER BY bucket").unwrap();
    let expected: Vec<Vec<Option<String>>> = ["-10", "-5", "0", "5"]
        .iter()
        .map(|v| vec![Some(v.to_string())])
        .collect();
    assert_eq!(distinct, expected);
    let page = c
        .rows("SELECT id, bucket FROM g WHERE path = 'C:\\\\d1' ORDER BY bucket DESC, id LIMIT 3, 4")
        .unwrap();
    let page: Vec<Vec<Option<String>>> = page.into_iter().map(|r| vec![r[0].clone()]).collect();
    // Odd ids; bucket 5 - (id % 4) * 5 is 0 for id % 4 = 1 and -10 for id % 4 = 3.
    let mut odd: Vec<(i64, i64)> = (0..40)
        .filter(|id| id % 2 == 1)
        .map(|id| (-(5 - id % 4 * 5), id))
        .collect();
    odd.sort();
    let expected: Vec<Vec<Option<String>>> = odd[3..7].iter().map(|(_, id)| vec![Some(id.to_string())]).collect();
    assert_eq!(page, expected);
    assert_eq!(
        code(c.query("SELECT bucket, COUNT(*) FROM g GROUP BY bucket")),
        Some(1235)
    );
    assert_eq!(code(c.query("SELECT AVG(k) FROM t")), Some(1235));
    assert_eq!(code(c.query("SELECT c FROM t ORDER BY k")), Some(1235));

    // A multi-row INSERT on one partition goes; one across partitions changes nothing.
    let same: Vec<i64> = (100..200).filter(|&id| part(id) == 1).take(3).collect();
    let values: Vec<String> = same.iter().map(|id| format!("({id}, 0, 'x')")).collect();
    c.query(&format!("INSERT INTO t VALUES {}", values.join(","))).unwrap();
    let (a, b) = {
        let a = (200..300).find(|&id| part(id) == 0).unwrap();
        let b = (200..300).find(|&id| part(id) == 2).unwrap();
        (a, b)
    };
    assert_eq!(
        code(c.query(&format!("INSERT INTO t VALUES ({a}, 0, 'x'), ({b}, 0, 'y')"))),
        Some(1235)
    );
    assert_eq!(one_value(&mut c, "SELECT COUNT(*) FROM t"), "63");
    // Writes without a key, or that would move a row, are refused.
    assert_eq!(code(c.query("UPDATE t SET k = 0 WHERE k > 5")), Some(1235));
    assert_eq!(code(c.query("DELETE FROM t")), Some(1235));
    assert_eq!(code(c.query("UPDATE t SET id = 1000 WHERE id = 5")), Some(1235));
    assert_eq!(code(c.query("INSERT INTO t (k, c) VALUES (1, 'no key')")), Some(1235));
    match c.query("UPDATE t SET k = k + 1 WHERE id = 5").unwrap() {
        QueryResult::Ok { affected, .. } => assert_eq!(affected, 1),
        other => panic!("{other:?}"),
    }

    // A transaction lives on its first partition; a statement on another is refused and the
    // transaction goes on.
    let (x, y) = {
        let x = (0..60).find(|&id| part(id) == 0).unwrap();
        let y = (0..60).find(|&id| part(id) == 1).unwrap();
        (x, y)
    };
    let x2 = (0..60).filter(|&id| part(id) == 0).nth(1).unwrap();
    c.query("BEGIN").unwrap();
    c.query(&format!("UPDATE t SET c = 'txn' WHERE id = {x}")).unwrap();
    assert_eq!(
        code(c.query(&format!("UPDATE t SET c = 'txn' WHERE id = {y}"))),
        Some(1235)
    );
    assert_eq!(code(c.query(&format!("SELECT c FROM t WHERE id = {y}"))), Some(1235));
    assert_eq!(code(c.query("SELECT COUNT(*) FROM t")), Some(1235));
    c.query(&format!("UPDATE t SET c = 'txn' WHERE id = {x2}")).unwrap();
    // Not visible outside before COMMIT.
    let mut other = router.client();
    assert_eq!(
        one_value(&mut other, &format!("SELECT c FROM t WHERE id = {x}")),
        format!("row{x}")
    );
    c.query("COMMIT").unwrap();
    let changed = ids(&mut other, "SELECT id FROM t WHERE c = 'txn'");
    assert_eq!(changed, BTreeSet::from([x, x2]));
    c.query("BEGIN").unwrap();
    c.query("INSERT INTO t VALUES (5000, 1, 'gone')").unwrap();
    c.query("ROLLBACK").unwrap();
    assert!(c.rows("SELECT id FROM t WHERE id = 5000").unwrap().is_empty());
    // After the transaction, other partitions are open again; statements that read no table
    // (or only the schema) do not tie a held BEGIN to a partition.
    c.query("BEGIN").unwrap();
    c.query("SELECT 1").unwrap();
    c.query("SET NAMES utf8mb4").unwrap();
    c.query(&format!("UPDATE t SET c = 'after' WHERE id = {y}")).unwrap();
    c.query("COMMIT").unwrap();
    assert_eq!(
        one_value(&mut other, &format!("SELECT c FROM t WHERE id = {y}")),
        "after"
    );

    // DDL reaches every partition.
    c.query("DROP TABLE t").unwrap();
    for s in &servers {
        assert_eq!(code(direct(s.port).query("SELECT * FROM t")), Some(1146));
    }
    drop(router);
    for s in servers {
        s.stop();
    }
}

#[test]
fn the_router_follows_a_partition_through_a_leader_kill() {
    let mut partitions = [Cluster::start(3, 300), Cluster::start(3, 300)];
    // Each partition creates `sbtest` once its first leader is elected; wait for that.
    for p in &partitions {
        on_leader(&p.ports, "CREATE DATABASE IF NOT EXISTS sbtest");
    }
    let ports: Vec<Vec<u16>> = partitions
        .iter()
        .map(|p| p.nodes.iter().map(|n| n.port).collect())
        .collect();
    let router = Router::start(&ports);
    let mut c = router.client();
    c.query("CREATE TABLE kv (id BIGINT PRIMARY KEY, v INT)").unwrap();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (acked, stop, port) = (acked.clone(), stop.clone(), router.port);
        std::thread::spawn(move || {
            let mut c =
                Client::connect_within(("127.0.0.1", port), "root", "", Some("sbtest"), Duration::from_secs(30))
                    .unwrap();
            let mut id = 0i64;
            let mut failures = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                id += 1;
                match c.query(&format!("INSERT INTO kv VALUES ({id}, 1)")) {
                    Ok(_) => {
                        acked.lock().unwrap().insert(id);
                    }
                    // Unknown outcome (the leader died with the statement): neither counted nor
                    // forbidden.
                    Err(e) if e.code() == Some(1105) => failures += 1,
                    Err(e) => panic!("insert {id}: {e}"),
                }
            }
            (id, failures)
        })
    };
    // Transfers between two accounts of partition 0: each moves 1 in one transaction.
    let accounts: Vec<i64> = (1_000_000..)
        .filter(|&id| partition_of(&[KeyValue::Int(i128::from(id))], 2) == 0)
        .take(2)
        .collect();
    for a in &accounts {
        c.query(&format!("INSERT INTO kv VALUES ({a}, 100)")).unwrap();
    }
    let transfers = {
        let (stop, port, accounts) = (stop.clone(), router.port, accounts.clone());
        std::thread::spawn(move || {
            let mut c =
                Client::connect_within(("127.0.0.1", port), "root", "", Some("sbtest"), Duration::from_secs(30))
                    .unwrap();
            let mut done = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (from, to) = if done % 2 == 0 {
                    (accounts[0], accounts[1])
                } else {
                    (accounts[1], accounts[0])
                };
                let ok = c.query("BEGIN").is_ok()
                    && c.query(&format!("UPDATE kv SET v = v - 1 WHERE id = {from}")).is_ok()
                    && c.query(&format!("UPDATE kv SET v = v + 1 WHERE id = {to}")).is_ok()
                    && c.query("COMMIT").is_ok();
                if ok {
                    done += 1;
                } else {
                    let _ = c.query("ROLLBACK");
                }
            }
            done
        })
    };
    let started = Instant::now();
    while acked.lock().unwrap().len() < 50 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no progress before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let leader = partitions[0].wait_for_leader();
    partitions[0].kill(leader);
    let before = acked.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < before + 100 {
        assert!(Instant::now() < deadline, "writes did not resume after the leader kill");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, failures) = writer.join().unwrap();
    let transferred = transfers.join().unwrap();
    assert!(transferred > 0);
    let total = one_value(
        &mut c,
        &format!("SELECT SUM(v) FROM kv WHERE id IN ({}, {})", accounts[0], accounts[1]),
    );
    assert_eq!(total, "200", "a transfer was half applied ({transferred} transfers)");
    assert!(failures <= 3, "{failures} inserts failed around one leader kill");
    let acked = acked.lock().unwrap().clone();
    let stored: BTreeSet<i64> = ids(&mut c, "SELECT id FROM kv")
        .into_iter()
        .filter(|id| *id < 1_000_000)
        .collect();
    assert!(
        acked.is_subset(&stored),
        "acknowledged inserts lost: {:?}",
        acked.difference(&stored).collect::<Vec<_>>()
    );
    assert!(stored.iter().all(|id| (1..=sent).contains(id)));
    // Both partitions took rows.
    assert!(stored
        .iter()
        .any(|&id| partition_of(&[KeyValue::Int(i128::from(id))], 2) == 0));
    assert!(stored
        .iter()
        .any(|&id| partition_of(&[KeyValue::Int(i128::from(id))], 2) == 1));
    partitions[0].restart(leader);
    drop(router);
    for p in partitions {
        p.stop();
    }
}

#[test]
fn prepared_statements_are_placed_by_their_parameters() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path(), false)).collect();
    let router = Router::start(&servers.iter().map(|s| vec![s.port]).collect::<Vec<_>>());
    let mut c = router.client();
    c.query("CREATE TABLE p (id BIGINT PRIMARY KEY, k INT, c VARCHAR(20))")
        .unwrap();
    let (insert, n) = c.prepare("INSERT INTO p VALUES (?, ?, ?)").unwrap();
    assert_eq!(n, 3);
    for id in 0..30i64 {
        // Keys sent as integers and as strings place alike.
        let key = if id % 2 == 0 {
            Param::Int(id)
        } else {
            Param::Text(id.to_string())
        };
        c.execute(insert, &[key, Param::Int(id), Param::Text(format!("v{id}"))])
            .unwrap();
    }
    for (i, s) in servers.iter().enumerate() {
        let held = ids(&mut direct(s.port), "SELECT id FROM p");
        assert_eq!(held, (0..30).filter(|&id| part(id) == i).collect(), "partition {i}");
    }
    let (select, _) = c.prepare("SELECT c, k FROM p WHERE id = ?").unwrap();
    for id in [0i64, 7, 29] {
        match c.execute(select, &[Param::Int(id)]).unwrap() {
            QueryResult::Rows { rows, .. } => {
                assert_eq!(rows, vec![vec![Some(format!("v{id}")), Some(id.to_string())]])
            }
            other => panic!("{other:?}"),
        }
    }
    let (scan, _) = c.prepare("SELECT id FROM p WHERE k >= ?").unwrap();
    match c.execute(scan, &[Param::Int(20)]).unwrap() {
        QueryResult::Rows { rows, .. } => {
            let got: BTreeSet<i64> = rows.iter().map(|r| r[0].as_deref().unwrap().parse().unwrap()).collect();
            assert_eq!(got, (20..30).collect());
        }
        other => panic!("{other:?}"),
    }
    let (count, _) = c.prepare("SELECT COUNT(*) FROM p WHERE k > ?").unwrap();
    assert_eq!(code(c.execute(count, &[Param::Int(1)])), Some(1235));
    // In a transaction, the parameters decide the partition too.
    let (bump, _) = c.prepare("UPDATE p SET k = k + ? WHERE id = ?").unwrap();
    let a = (0..30).find(|&id| part(id) == 0).unwrap();
    let b = (0..30).find(|&id| part(id) == 2).unwrap();
    c.query("BEGIN").unwrap();
    c.execute(bump, &[Param::Int(100), Param::Int(a)]).unwrap();
    assert_eq!(code(c.execute(bump, &[Param::Int(100), Param::Int(b)])), Some(1235));
    c.query("COMMIT").unwrap();
    assert_eq!(
        one_value(&mut c, &format!("SELECT k FROM p WHERE id = {a}")),
        (a + 100).to_string()
    );
    assert_eq!(
        one_value(&mut c, &format!("SELECT k FROM p WHERE id = {b}")),
        b.to_string()
    );
    // A key that is not a literal of the key's type cannot be placed: the write is refused.
    let (odd, _) = c.prepare("INSERT INTO p (id, k) VALUES (? + 1, 0)").unwrap();
    assert_eq!(code(c.execute(odd, &[Param::Int(1)])), Some(1235));
    assert_eq!(code(c.execute(9999, &[])), Some(1243));
    drop(router);
    for s in servers {
        s.stop();
    }
}

#[test]
fn session_state_follows_the_client_across_partitions() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path(), false)).collect();
    let router = Router::start(&servers.iter().map(|s| vec![s.port]).collect::<Vec<_>>());
    let mut c = router.client();
    let mut other = router.client();
    c.query("CREATE TABLE s (id INT PRIMARY KEY, v INT)").unwrap();
    let on = |p: usize, nth: usize| (0..1000).filter(|&id| part(id) == p).nth(nth).unwrap();
    for p in 0..3 {
        for n in 0..4 {
            c.query(&format!("INSERT INTO s VALUES ({}, 0)", on(p, n))).unwrap();
        }
    }
    let v = |c: &mut Client, id: i64| one_value(c, &format!("SELECT v FROM s WHERE id = {id}"));

    // Autocommit off: the first statement opens the transaction on its partition.
    c.query("SET autocommit = 0").unwrap();
    c.query(&format!("UPDATE s SET v = 1 WHERE id = {}", on(0, 0))).unwrap();
    assert_eq!(
        code(c.query(&format!("UPDATE s SET v = 1 WHERE id = {}", on(1, 0)))),
        Some(1235)
    );
    assert_eq!(v(&mut other, on(0, 0)), "0");
    c.query("COMMIT").unwrap();
    assert_eq!(v(&mut other, on(0, 0)), "1");
    // A failed statement opens the transaction too (and holds its locks): other partitions
    // wait for its end.
    assert_eq!(
        code(c.query(&format!("INSERT INTO s VALUES ({}, 0)", on(0, 1)))),
        Some(1062)
    );
    assert_eq!(
        code(c.query(&format!("UPDATE s SET v = 2 WHERE id = {}", on(1, 0)))),
        Some(1235)
    );
    c.query("ROLLBACK").unwrap();
    c.query(&format!("UPDATE s SET v = 2 WHERE id = {}", on(1, 0))).unwrap();
    c.query("COMMIT").unwrap();
    assert_eq!(v(&mut other, on(1, 0)), "2");
    // autocommit 0 -> 1 ends a held BEGIN: the next write commits by itself.
    c.query("BEGIN").unwrap();
    c.query("SET autocommit = 1").unwrap();
    c.query(&format!("UPDATE s SET v = 3 WHERE id = {}", on(2, 0))).unwrap();
    assert_eq!(v(&mut other, on(2, 0)), "3");
    c.query(&format!("UPDATE s SET v = 3 WHERE id = {}", on(1, 1))).unwrap();
    assert_eq!(v(&mut other, on(1, 1)), "3");

    // Hundreds of SETs: a partition connection opened afterwards gets the last of them.
    let mut fresh = router.client();
    // (The last SET autocommit turns it on; a replay that kept only the first 256 SETs would
    // end with it off.)
    for i in 0..=300 {
        fresh
            .query(if i % 2 == 1 {
                "SET autocommit = 0"
            } else {
                "SET autocommit = 1"
            })
            .unwrap();
        fresh
            .query(&format!("SET SESSION innodb_lock_wait_timeout = {}", 10 + i % 7))
            .unwrap();
    }
    // Its first statement on partitions 1 and 2: new connections, autocommit on.
    fresh
        .query(&format!("UPDATE s SET v = 4 WHERE id = {}", on(1, 2)))
        .unwrap();
    fresh
        .query(&format!("UPDATE s SET v = 4 WHERE id = {}", on(2, 2)))
        .unwrap();
    assert_eq!(v(&mut other, on(1, 2)), "4");
    assert_eq!(v(&mut other, on(2, 2)), "4");
    drop(router);
    for s in servers {
        s.stop();
    }
}
