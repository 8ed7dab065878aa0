//! A failing redo-log fsync, injected through the engine's file-system trait (`FaultFs`), under
//! an in-process server with durable commits: a commit made on the connection's own thread
//! (an autocommit write of the only client) and ones made asynchronously (COMMIT, several
//! clients at once) all answer with an error, never OK; what was acknowledged before stays; the
//! server keeps answering.

mod common;

use riptide::fs::{FaultFs, FaultOp};
use riptide_server::client::Client;
use riptide_server::server::start;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_fails_inline_and_asynchronous_commits() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let mut config = common::config(dir.path(), 1 << 20);
    config.session.sync = true;
    config.engine.fs = Arc::new(fs.clone());
    let server = start(config).await.unwrap();
    let addr = server.addr;
    let faults = fs.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(addr, "root", "", Some("d")).unwrap();
        c.query("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)").unwrap();
        c.query("INSERT INTO t VALUES (1, 1)").unwrap();
        c.query("BEGIN").unwrap();
        c.query("INSERT INTO t VALUES (2, 2)").unwrap();
        c.query("COMMIT").unwrap();

        faults.fail_always(FaultOp::Sync, Some("redo"), 5 /* EIO */);
        let before = faults.faults_fired();
        // One client: the autocommit write commits on the connection's thread, COMMIT
        // asynchronously.
        assert!(
            c.query("INSERT INTO t VALUES (3, 3)").is_err(),
            "an autocommit write acknowledged"
        );
        c.query("BEGIN").unwrap();
        c.query("UPDATE t SET v = 20 WHERE id = 2").unwrap();
        assert!(c.query("COMMIT").is_err(), "a COMMIT acknowledged");
        assert!(faults.faults_fired() > before, "no fsync failed");
        // Several clients at once: their commits go asynchronously; none is acknowledged.
        let writers: Vec<_> = (0..4)
            .map(|w| {
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr, "root", "", Some("d")).unwrap();
                    (0..10)
                        .filter(|i| {
                            c.query(&format!("INSERT INTO t VALUES ({}, 0)", 100 + w * 10 + i))
                                .is_ok()
                        })
                        .count()
                })
            })
            .collect();
        for w in writers {
            assert_eq!(w.join().unwrap(), 0, "a write was acknowledged after the log failed");
        }
        // The server still answers, and what was acknowledged before the fault is there.
        let mut fresh = Client::connect(addr, "root", "", Some("d")).unwrap();
        let rows = fresh.rows("SELECT id, v FROM t WHERE id <= 2 ORDER BY id").unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Some("1".into()), Some("1".into())],
                vec![Some("2".into()), Some("2".into())]
            ]
        );
    })
    .await
    .unwrap();
}
