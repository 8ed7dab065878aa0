//! MySQL's XA statements against three `riptide serve` replicas of one partition (the
//! participant's side of cross-partition transactions):
//!
//! - a branch runs as a transaction (XA START ... XA END), is prepared, listed by XA RECOVER,
//!   invisible to readers and locked against writers until another connection commits it by
//!   its id; one rolled back leaves nothing; ONE PHASE commits an idle branch directly;
//! - the XA state rules answer MySQL's errors (1399, 1397, 1400, 1440), and a branch an error
//!   rolled back stays ROLLBACK ONLY (1399, then 1402) instead of letting statements commit
//!   outside it;
//! - the leader is killed with a branch prepared: the new leader lists it, keeps its row
//!   locked, and commits it.

mod cluster_common;
mod serve_common;

use cluster_common::{connect, on_leader, wait_for_leader_port, Cluster};
use riptide_server::client::Client;
use std::time::{Duration, Instant};

fn leader_client(cluster: &Cluster) -> Client {
    let port = wait_for_leader_port(&cluster.live_ports());
    connect(port).unwrap()
}

fn code(c: &mut Client, sql: &str) -> Option<u16> {
    c.query(sql).err().and_then(|e| e.code())
}

fn count(c: &mut Client, sql: &str) -> String {
    c.rows(sql).unwrap()[0][0].clone().unwrap()
}

/// Runs `sql` on the leader, retrying while leadership settles after a kill (1290: not the
/// leader; 1180 or no answer: outcome unknown, after which 1397 means it was done).
fn on_new_leader(cluster: &Cluster, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut unknown = false;
    loop {
        let mut c = leader_client(cluster);
        match c.query(sql) {
            Ok(_) => return,
            Err(e) if unknown && e.code() == Some(1397) => return,
            Err(e) if e.code() == Some(1290) => {}
            Err(e) if matches!(e.code(), Some(1180) | None) => unknown = true,
            Err(e) => panic!("{sql}: {e}"),
        }
        assert!(Instant::now() < deadline, "{sql} never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn xa_branches_prepare_commit_and_survive_the_leader() {
    let mut cluster = Cluster::start(3, 300);
    on_leader(
        &cluster.ports,
        "CREATE TABLE sbtest.acct (id INT PRIMARY KEY, bal INT NOT NULL)",
    );
    on_leader(&cluster.ports, "INSERT INTO sbtest.acct VALUES (1, 100), (2, 0)");
    let mut a = leader_client(&cluster);
    let mut b = leader_client(&cluster);

    // A branch prepared: listed, invisible, its rows locked.
    a.query("XA START 'g1', 'p0', 7").unwrap();
    a.query("UPDATE sbtest.acct SET bal = bal - 30 WHERE id = 1").unwrap();
    a.query("INSERT INTO sbtest.acct VALUES (3, 30)").unwrap();
    assert_eq!(code(&mut a, "COMMIT"), Some(1399), "no COMMIT inside an active branch");
    assert_eq!(
        code(&mut a, "XA PREPARE 'g1', 'p0', 7"),
        Some(1399),
        "not before XA END"
    );
    assert_eq!(code(&mut a, "XA END 'other'"), Some(1397));
    a.query("XA END 'g1', 'p0', 7").unwrap();
    assert_eq!(
        code(&mut a, "SELECT 1 FROM sbtest.acct"),
        Some(1399),
        "an idle branch runs nothing"
    );
    a.query("XA PREPARE 'g1', 'p0', 7").unwrap();
    let recovered = a.rows("XA RECOVER").unwrap();
    assert_eq!(
        recovered,
        vec![vec![
            Some("7".to_string()),
            Some("2".to_string()),
            Some("2".to_string()),
            Some("g1p0".to_string())
        ]]
    );
    assert_eq!(count(&mut b, "SELECT bal FROM sbtest.acct WHERE id = 1"), "100");
    assert_eq!(count(&mut b, "SELECT COUNT(*) FROM sbtest.acct"), "2");

    // A writer waits for the prepared row until another connection commits the branch.
    let port = wait_for_leader_port(&cluster.live_ports());
    let waiter = std::thread::spawn(move || {
        let mut w = connect(port).unwrap();
        w.query("UPDATE sbtest.acct SET bal = bal + 1 WHERE id = 1").unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the prepared row is locked");
    assert_eq!(code(&mut b, "XA COMMIT 'nope'"), Some(1397));
    b.query("XA COMMIT 'g1', 'p0', 7").unwrap();
    waiter.join().unwrap();
    assert_eq!(count(&mut b, "SELECT bal FROM sbtest.acct WHERE id = 1"), "71");
    assert_eq!(count(&mut b, "SELECT bal FROM sbtest.acct WHERE id = 3"), "30");
    assert!(b.rows("XA RECOVER").unwrap().is_empty());
    assert_eq!(code(&mut b, "XA COMMIT 'g1', 'p0', 7"), Some(1397), "decided once");

    // Rolled back: nothing stays. ONE PHASE: committed without a prepare.
    a.query("XA START 'g2'").unwrap();
    a.query("UPDATE sbtest.acct SET bal = 0 WHERE id = 2").unwrap();
    a.query("XA END 'g2'").unwrap();
    a.query("XA PREPARE 'g2'").unwrap();
    b.query("XA ROLLBACK 'g2'").unwrap();
    assert_eq!(count(&mut b, "SELECT bal FROM sbtest.acct WHERE id = 2"), "0");
    a.query("XA START 'g3'").unwrap();
    a.query("UPDATE sbtest.acct SET bal = 5 WHERE id = 2").unwrap();
    a.query("XA END 'g3'").unwrap();
    a.query("XA COMMIT 'g3' ONE PHASE").unwrap();
    assert_eq!(count(&mut b, "SELECT bal FROM sbtest.acct WHERE id = 2"), "5");

    // State errors: a branch inside a transaction, a prepared id prepared again.
    a.query("BEGIN").unwrap();
    assert_eq!(code(&mut a, "XA START 'g4'"), Some(1400));
    a.query("ROLLBACK").unwrap();
    a.query("XA START 'g4'").unwrap();
    a.query("UPDATE sbtest.acct SET bal = 6 WHERE id = 2").unwrap();
    a.query("XA END 'g4'").unwrap();
    a.query("XA PREPARE 'g4'").unwrap();
    assert_eq!(code(&mut a, "XA START 'g4'"), Some(1440));
    assert_eq!(code(&mut a, "XA COMMIT 'g4' ONE PHASE"), Some(1399));

    // An error that rolls the branch back leaves it ROLLBACK ONLY: nothing after it runs
    // outside the branch. (The branch's snapshot predates b's update of row 1, so its own
    // update of that row is a write conflict, 1213.)
    a.query("XA START 'g5'").unwrap();
    a.query("SELECT bal FROM sbtest.acct WHERE id = 1").unwrap();
    b.query("UPDATE sbtest.acct SET bal = bal + 1 WHERE id = 1").unwrap();
    assert_eq!(code(&mut a, "UPDATE sbtest.acct SET bal = 0 WHERE id = 1"), Some(1213));
    assert_eq!(code(&mut a, "INSERT INTO sbtest.acct VALUES (9, 9)"), Some(1399));
    assert_eq!(code(&mut a, "XA END 'g5'"), Some(1402));
    assert_eq!(count(&mut b, "SELECT COUNT(*) FROM sbtest.acct WHERE id = 9"), "0");
    a.query("XA START 'g6'").unwrap();
    a.query("XA END 'g6'").unwrap();
    a.query("XA ROLLBACK 'g6'").unwrap();

    // The leader dies with g4 prepared: the new leader lists it, keeps row 2 locked, and
    // commits it.
    let old = cluster.wait_for_leader();
    drop((a, b));
    cluster.kill(old);
    let mut c = leader_client(&cluster);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.rows("XA RECOVER") {
            Ok(rows) if rows.len() == 1 => break,
            Ok(rows) => panic!("XA RECOVER on the new leader: {rows:?}"),
            Err(e) if e.code() == Some(1290) => {
                assert!(Instant::now() < deadline, "no new leader");
                std::thread::sleep(Duration::from_millis(50));
                c = leader_client(&cluster);
            }
            Err(e) => panic!("XA RECOVER: {e}"),
        }
    }
    let port = wait_for_leader_port(&cluster.live_ports());
    let waiter = std::thread::spawn(move || {
        let mut w = connect(port).unwrap();
        w.rows("SELECT bal FROM sbtest.acct WHERE id = 2 FOR UPDATE").unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the prepared row stays locked on the new leader");
    on_new_leader(&cluster, "XA COMMIT 'g4'");
    assert_eq!(waiter.join().unwrap(), vec![vec![Some("6".to_string())]]);
    cluster.stop();
}
