//! Early lock release (`docs/transactions.md`): a committing transaction's row locks are free
//! once its batch is placed in the log, before its fsync ends; the next holder sees the new
//! version in its locked reads; and no dependant is acknowledged before the earlier commit is
//! durable — when that commit's fsync fails, the dependants fail too.
//!
//! The fsync of the redo log is held open through [`FaultFs::hold`], so each interleaving is
//! forced, not hoped for.

use riptide::fs::{CrashMode, FaultFs, FaultOp};
use riptide::{Db, Error, Isolation, Options, Table, TxnOptions, WriteBatch, WriteOptions};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const DB: &str = "/db";
const WAIT: Duration = Duration::from_secs(10);
/// How long a check that something did *not* happen watches for it.
const QUIET: Duration = Duration::from_millis(50);

fn open(fs: &FaultFs) -> Db {
    Db::open(
        DB,
        Options {
            fs: Arc::new(fs.clone()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn opts(isolation: Isolation, sync: bool) -> TxnOptions {
    TxnOptions {
        isolation,
        lock_timeout: Duration::from_secs(2),
        write_options: WriteOptions {
            sync,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Starts T1 in a thread: it locks `k`, writes `value` and commits with sync, which blocks in
/// the held fsync. Returns once the fsync is held.
fn start_blocked_commit(
    db: &Db,
    t: &Table,
    fs: &FaultFs,
    hold: u64,
    value: &'static [u8],
) -> JoinHandle<riptide::Result<()>> {
    let (db, t) = (db.clone(), t.clone());
    let t1 = std::thread::spawn(move || {
        let mut txn = db.begin(opts(Isolation::ReadCommitted, true))?;
        txn.get_for_update(&t, b"k")?;
        txn.put(&t, b"k", value)?;
        txn.commit()
    });
    assert!(fs.wait_held(hold, WAIT), "T1's fsync never started");
    t1
}

/// Waits until `h` finishes, or fails the test.
fn join<T>(h: JoinHandle<T>) -> T {
    h.join().expect("thread panicked")
}

fn finished_within<T>(h: &JoinHandle<T>, d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        if h.is_finished() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    h.is_finished()
}

/// T2 takes the row T1 released early, reads T1's value, writes and commits (asynchronously);
/// T3 takes it after T2 and commits without writing. Returns T2's handle and T3's thread.
fn dependants(db: &Db, t: &Table) -> (riptide::WriteHandle, JoinHandle<riptide::Result<()>>) {
    let mut t2 = db.begin(opts(Isolation::ReadCommitted, false)).unwrap();
    // Without early lock release this waits for T1's fsync and times out after 2 s.
    let seen = t2
        .get_for_update(t, b"k")
        .expect("T1's lock was not released before its fsync");
    assert_eq!(
        seen.as_deref(),
        Some(&b"1"[..]),
        "the locked read sees T1's placed version"
    );
    // Plain reads do not: T1 is not visible yet.
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"0"[..]));
    t2.put(t, b"k", b"2").unwrap();
    let t2 = t2.commit_async();
    let (db, t) = (db.clone(), t.clone());
    let t3 = std::thread::spawn(move || {
        let mut txn = db.begin(opts(Isolation::ReadCommitted, false))?;
        let seen = txn.get_for_update(&t, b"k")?;
        assert_eq!(seen.as_deref(), Some(&b"2"[..]));
        txn.commit()
    });
    (t2, t3)
}

#[test]
fn dependants_are_acknowledged_only_after_the_earlier_commit_is_durable() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    t.put(b"k", b"0").unwrap();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    let t1 = start_blocked_commit(&db, &t, &fs, hold, b"1");
    let (t2, t3) = dependants(&db, &t);

    std::thread::sleep(QUIET);
    assert!(!t1.is_finished());
    assert!(!t2.is_done(), "T2 acknowledged before T1's fsync ended");
    assert!(
        !finished_within(&t3, QUIET),
        "read-only T3 acknowledged before T1's fsync ended"
    );

    fs.release_hold(hold);
    join(t1).unwrap();
    t2.wait().unwrap();
    join(t3).unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"2"[..]));
    let stats = db.txn_stats();
    assert_eq!(stats.locked_rows, 0);
    assert_eq!(stats.lock_holders, 3);
    assert!(stats.lock_hold_nanos > 0);
    db.close().unwrap();
}

#[test]
fn a_failed_fsync_fails_every_dependant() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    let mut durable = WriteBatch::new();
    durable.put(&t, b"k", b"0").unwrap();
    db.write(
        durable,
        &WriteOptions {
            sync: true,
            ..Default::default()
        },
    )
    .unwrap();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    let t1 = start_blocked_commit(&db, &t, &fs, hold, b"1");
    let (t2, t3) = dependants(&db, &t);
    assert!(!t2.is_done());
    assert!(!finished_within(&t3, QUIET));

    fs.fail_always(FaultOp::Sync, Some("redo"), libc::EIO);
    fs.release_hold(hold);
    assert!(matches!(join(t1), Err(Error::Poisoned(_))));
    assert!(
        matches!(t2.wait(), Err(Error::Poisoned(_))),
        "T2 read T1's write: it must fail with it"
    );
    assert!(
        matches!(join(t3), Err(Error::Poisoned(_))),
        "T3 read T2's write: it must fail with it"
    );
    // Readers never saw the failed versions.
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"0"[..]));
    assert_eq!(db.txn_stats().locked_rows, 0);
    drop(t);
    let _ = db.close();

    fs.clear_faults();
    fs.crash(CrashMode::DropUnsynced);
    let db = open(&fs);
    assert_eq!(db.default_table().get(b"k").unwrap().as_deref(), Some(&b"0"[..]));
    db.close().unwrap();
}

#[test]
fn a_snapshot_writer_conflicts_with_a_commit_still_being_logged_once_it_is_visible() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    t.put(b"k", b"0").unwrap();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    // T2's snapshot is older than T1's commit, and fixed by an unlocked read.
    let mut t2 = db.begin(opts(Isolation::Snapshot, false)).unwrap();
    assert_eq!(t2.get(&t, b"k").unwrap().as_deref(), Some(&b"0"[..]));
    let t1 = start_blocked_commit(&db, &t, &fs, hold, b"1");
    // The lock is free at once and the check sees T1's version though it is not visible; the
    // conflict is reported once T1 is visible, so that a retry does not meet it again.
    let t2 = {
        let t = t.clone();
        std::thread::spawn(move || t2.put(&t, b"k", b"2"))
    };
    assert!(
        !finished_within(&t2, QUIET),
        "the conflict was reported before T1 was visible"
    );
    fs.release_hold(hold);
    match join(t2) {
        Err(Error::WriteConflict { .. }) => {}
        other => panic!("expected a write conflict with T1, got {other:?}"),
    }
    join(t1).unwrap();
    let mut retry = db.begin(opts(Isolation::Snapshot, false)).unwrap();
    retry.put(&t, b"k", b"2").unwrap();
    retry.commit().unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"2"[..]));
    db.close().unwrap();
}

#[test]
fn locks_are_released_when_the_commit_fails_before_it_is_placed() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    fs.fail_always(FaultOp::WriteAt, Some("redo"), libc::EIO);
    assert!(t.put(b"x", b"1").is_err()); // poisons the instance
    for asynchronous in [false, true] {
        let mut txn = db.begin(opts(Isolation::Snapshot, false)).unwrap();
        txn.put(&t, b"k", b"v").unwrap();
        assert_eq!(db.txn_stats().locked_rows, 1);
        let r = if asynchronous {
            txn.commit_async().wait()
        } else {
            txn.commit()
        };
        assert!(matches!(r, Err(Error::Poisoned(_))), "{r:?}");
        assert_eq!(db.txn_stats().locked_rows, 0);
    }
    let _ = db.close();
}

#[test]
fn without_early_release_the_lock_is_held_through_the_fsync() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    t.put(b"k", b"0").unwrap();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    let t1 = {
        let (db, t) = (db.clone(), t.clone());
        std::thread::spawn(move || {
            let mut txn = db.begin(TxnOptions {
                early_lock_release: false,
                ..opts(Isolation::ReadCommitted, true)
            })?;
            txn.put(&t, b"k", b"1")?;
            txn.commit()
        })
    };
    assert!(fs.wait_held(hold, WAIT));
    let mut t2 = db
        .begin(TxnOptions {
            lock_timeout: Duration::from_millis(100),
            ..opts(Isolation::ReadCommitted, false)
        })
        .unwrap();
    assert!(matches!(t2.get_for_update(&t, b"k"), Err(Error::LockTimeout { .. })));
    fs.release_hold(hold);
    join(t1).unwrap();
    assert_eq!(t2.get_for_update(&t, b"k").unwrap().as_deref(), Some(&b"1"[..]));
    drop(t2);
    assert_eq!(db.txn_stats().lock_holders, 1);
    db.close().unwrap();
}

#[test]
fn a_snapshot_writer_that_read_nothing_moves_its_snapshot_past_the_commit() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    t.put(b"k", b"0").unwrap();
    t.put(b"other", b"x").unwrap();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    let mut t2 = db.begin(opts(Isolation::Snapshot, false)).unwrap();
    let old = t2.snapshot_lsn().unwrap();
    // A locked read does not fix the snapshot: the row stays T2's.
    assert_eq!(t2.get_for_update(&t, b"other").unwrap().as_deref(), Some(&b"x"[..]));
    let t1 = start_blocked_commit(&db, &t, &fs, hold, b"1");
    let t2 = {
        let t = t.clone();
        std::thread::spawn(move || {
            let seen = t2.get_for_update(&t, b"k")?;
            Ok::<_, Error>((t2, seen))
        })
    };
    assert!(
        !finished_within(&t2, QUIET),
        "T2 went past T1's version before it was visible"
    );
    fs.release_hold(hold);
    let (mut t2, seen) = join(t2).unwrap();
    assert_eq!(seen.as_deref(), Some(&b"1"[..]), "T2 reads at its new snapshot");
    assert!(t2.snapshot_lsn().unwrap() > old);
    assert_eq!(t2.get(&t, b"other").unwrap().as_deref(), Some(&b"x"[..]));
    t2.put(&t, b"k", b"2").unwrap();
    t2.commit().unwrap();
    join(t1).unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"2"[..]));
    let stats = db.txn_stats();
    assert_eq!((stats.snapshot_advances, stats.conflicts), (1, 0));
    db.close().unwrap();
}

/// Versions are in the memtables before their log write ends; when it fails, a later group
/// that needs no log write (`disable_wal`) must not make them visible by committing past them.
#[test]
fn a_failed_group_stays_invisible_behind_a_later_unlogged_one() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.default_table();
    let hold = fs.hold(FaultOp::Sync, Some("redo"));
    let logged = {
        let t = t.clone();
        std::thread::spawn(move || {
            t.put_opt(
                b"a",
                b"1",
                &WriteOptions {
                    sync: true,
                    ..Default::default()
                },
            )
        })
    };
    assert!(fs.wait_held(hold, WAIT));
    let unlogged = {
        let t = t.clone();
        std::thread::spawn(move || {
            t.put_opt(
                b"b",
                b"2",
                &WriteOptions {
                    disable_wal: true,
                    ..Default::default()
                },
            )
        })
    };
    assert!(
        !finished_within(&unlogged, QUIET),
        "acknowledged before the earlier group"
    );
    fs.fail_always(FaultOp::Sync, Some("redo"), libc::EIO);
    fs.release_hold(hold);
    assert!(matches!(join(logged), Err(Error::Poisoned(_))));
    assert!(matches!(join(unlogged), Err(Error::Poisoned(_))));
    assert_eq!(t.get(b"a").unwrap(), None, "a failed write became visible");
    assert_eq!(t.get(b"b").unwrap(), None, "a write after a failed one became visible");
    let _ = db.close();
}
