//! Parallel memtable insertion (X-Engine's stage 3, `Options::parallel_insert_helpers`): a
//! commit group's leader invites its waiting followers to insert their own batches.
//!
//! The runs are built so that followers really do insert: one queue (every writer joins the
//! same groups) and one writer whose batches are large, so the leader of a group holding one
//! is busy long enough for invited followers to claim their own slots. Each test requires
//! `write_stats().helped_inserts > 0` before it checks the outcome, so it cannot pass with
//! the leader inserting everything.
//!
//! Checked: every acknowledged write is readable with its value, in memory and after a
//! reopen; batches are atomic; transactions whose row locks are released on a helper's thread
//! (early lock release runs in the hook of the thread that inserts the batch) keep their
//! counters exact.

mod common;

use riptide::{Db, Options, WriteBatch, WriteOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Threads writing single puts.
const SMALL_WRITERS: usize = 6;
/// Puts in each batch of the large writer.
const LARGE_BATCH: usize = 3000;
/// A run ends once followers inserted this many batches, or after [`MAX_RUN`].
const HELPED_WANTED: u64 = 50;
const MAX_RUN: Duration = Duration::from_secs(20);

fn options() -> Options {
    Options {
        write_queues: 1,
        parallel_insert_helpers: 8,
        // Followers poll before they sleep, so invitations also reach polling waiters.
        write_wait_spin_micros: 100,
        ..Default::default()
    }
}

/// Runs the writers until enough batches were inserted by followers; returns how many writes
/// each small writer and the large writer got acknowledged.
fn run_writers(db: &Db) -> (Vec<u64>, u64) {
    let t = db.default_table();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    std::thread::scope(|s| {
        let small = common::spawn_blocking_writers(s, db, &t, SMALL_WRITERS, 's', false, &stop);
        let large = common::spawn_large_writer(s, db, &t, LARGE_BATCH, &stop);
        while db.write_stats().helped_inserts < HELPED_WANTED && started.elapsed() < MAX_RUN {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        let small = small.into_iter().map(|h| h.join().unwrap()).collect();
        (small, large.join().unwrap())
    })
}

fn check_all(db: &Db, small: &[u64], large: u64) {
    let t = db.default_table();
    common::check_writer_keys(&t, 's', small);
    for b in 0..large {
        for j in (0..LARGE_BATCH).step_by(97) {
            assert_eq!(
                t.get(&common::large_key(b, j)).unwrap(),
                Some(b.to_be_bytes().to_vec()),
                "large batch {b} put {j}"
            );
        }
    }
    // Atomicity of the large batches: each has exactly LARGE_BATCH keys.
    let per_batch = t
        .iter(&Default::default())
        .unwrap()
        .map(|e| e.unwrap().0)
        .filter(|k| k.starts_with(b"l"))
        .count();
    assert_eq!(per_batch as u64, large * LARGE_BATCH as u64, "large-batch keys");
}

#[test]
fn followers_insert_their_own_batches_and_every_write_lands() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let (small, large) = run_writers(&db);
    let stats = db.write_stats();
    eprintln!("small writers {small:?}, large batches {large}; {stats:?}");
    assert!(
        stats.helped_inserts > 0,
        "no batch was inserted by a follower in {MAX_RUN:?}: {stats:?}"
    );
    assert!(stats.helped_inserts <= stats.writes);
    check_all(&db, &small, large);
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    check_all(&db, &small, large);
    db.close().unwrap();
}

/// Without invitations nothing is inserted by a follower: the counter is real.
#[test]
fn no_helpers_means_the_leader_inserts_every_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            parallel_insert_helpers: 0,
            ..options()
        },
    )
    .unwrap();
    let t = db.default_table();
    std::thread::scope(|s| {
        for w in 0..4 {
            let (t, db) = (t.clone(), &db);
            s.spawn(move || {
                for i in 0..500u64 {
                    let mut b = WriteBatch::new();
                    b.put(&t, &common::writer_key('s', w, i), &i.to_be_bytes()).unwrap();
                    db.write(b, &WriteOptions::default()).unwrap();
                }
            });
        }
    });
    let stats = db.write_stats();
    assert_eq!(stats.writes, 2000);
    assert_eq!(stats.helped_inserts, 0, "{stats:?}");
    check_all(&db, &[500; 4], 0);
}

/// Transactions incrementing hot counters while a large writer keeps groups busy: a committing
/// transaction's row locks are released by whichever thread inserts its batch; every
/// increment must survive (a lock released before its batch is in the memtable would let the
/// next holder read the old value and lose one).
#[test]
fn hot_counters_stay_exact_when_followers_insert_and_release_locks() {
    const COUNTERS: usize = 4;
    const TXN_THREADS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let t = db.default_table();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let committed: u64 = std::thread::scope(|s| {
        let txns = common::spawn_counter_increments(s, &db, &t, TXN_THREADS, COUNTERS, &stop);
        let large = common::spawn_large_writer(s, &db, &t, LARGE_BATCH, &stop);
        while db.write_stats().helped_inserts < HELPED_WANTED && started.elapsed() < MAX_RUN {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        large.join().unwrap();
        txns.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let stats = db.write_stats();
    eprintln!("{committed} transactions; {stats:?}");
    assert!(
        stats.helped_inserts > 0,
        "no batch was inserted by a follower: {stats:?}"
    );
    let total = common::counters_total(&t, COUNTERS);
    assert_eq!(total, committed, "increments lost or invented");
}
