//! The log driver hands a flush round's commit (stage 4) to one of the round's waiting writers
//! (`Options::driver_commit_groups`): that writer advances the visible LSN and completes the
//! round's writers before its own `wait` returns.
//!
//! The runs use `driver_commit_groups: 0` (every round with a waiting writer is handed over),
//! one write queue with a writer of large batches (so groups of several writers form while a
//! leader inserts) and parallel insertion (followers invited to insert while the driver hands
//! rounds to them: an offer to insert must never replace a commit handed over, or that
//! round's writers, and every later one, wait forever). They require
//! `write_stats().commit_handoffs > 0` before they check anything, so they cannot pass with
//! the driver committing every round itself; the first also requires followers to have
//! inserted batches (`helped_inserts > 0`).
//!
//! Checked: a writer reads its own write as soon as its `write` returns (acknowledged means
//! visible, whoever committed it); every acknowledged write is there after a reopen; hot-row
//! transactions stay exact; asynchronous writes mixed in complete (their writer waits on
//! batches of handles, so it may take rounds too, or be waiting on none).

mod common;

use riptide::{Db, Options, WriteBatch, WriteOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITERS: usize = 8;
/// A run ends once this many rounds were handed over (and, with the large writer, this many
/// batches were inserted by followers), or after [`MAX_RUN`].
const HANDOFFS_WANTED: u64 = 200;
const HELPED_WANTED: u64 = 50;
/// Puts in each batch of the large writer.
const LARGE_BATCH: usize = 2000;
const MAX_RUN: Duration = Duration::from_secs(20);

fn options() -> Options {
    Options {
        driver_commit_groups: 0,
        write_queues: 1,
        parallel_insert_helpers: 8,
        ..Default::default()
    }
}

/// Blocking writers (each reading its own write back at once) and one asynchronous writer,
/// until enough rounds were handed over; returns the blocking writers' acknowledged counts and
/// the asynchronous writer's.
fn run_writers(db: &Db) -> (Vec<u64>, u64) {
    let t = db.default_table();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    std::thread::scope(|s| {
        let blocking = common::spawn_blocking_writers(s, db, &t, WRITERS, 'w', true, &stop);
        let asynchronous = {
            let (t, stop) = (t.clone(), stop.clone());
            s.spawn(move || {
                let mut n = 0u64;
                let mut handles = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut b = WriteBatch::new();
                    b.put(&t, &common::writer_key('a', 0, n), &n.to_be_bytes()).unwrap();
                    handles.push(db.write_async(b, &WriteOptions::default()));
                    n += 1;
                    if handles.len() == 16 {
                        for h in handles.drain(..) {
                            h.wait().unwrap();
                        }
                    }
                }
                for h in handles {
                    h.wait().unwrap();
                }
                n
            })
        };
        let large = common::spawn_large_writer(s, db, &t, LARGE_BATCH, &stop);
        while started.elapsed() < MAX_RUN {
            let stats = db.write_stats();
            if stats.commit_handoffs >= HANDOFFS_WANTED && stats.helped_inserts >= HELPED_WANTED {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        large.join().unwrap();
        let counts = blocking.into_iter().map(|h| h.join().unwrap()).collect();
        (counts, asynchronous.join().unwrap())
    })
}

fn check_all(db: &Db, blocking: &[u64], asynchronous: u64) {
    let t = db.default_table();
    common::check_writer_keys(&t, 'w', blocking);
    common::check_writer_keys(&t, 'a', &[asynchronous]);
}

#[test]
fn rounds_committed_by_a_waiting_writer_are_visible_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let (blocking, asynchronous) = run_writers(&db);
    let stats = db.write_stats();
    eprintln!("blocking writers {blocking:?}, asynchronous {asynchronous}; {stats:?}");
    assert!(
        stats.commit_handoffs > 0,
        "no flush round was handed to a waiting writer in {MAX_RUN:?}: {stats:?}"
    );
    assert!(stats.commit_handoffs <= stats.log_writes, "{stats:?}");
    assert!(
        stats.helped_inserts > 0,
        "no batch was inserted by a follower in {MAX_RUN:?}: {stats:?}"
    );
    check_all(&db, &blocking, asynchronous);
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    check_all(&db, &blocking, asynchronous);
    db.close().unwrap();
}

/// With the driver committing every round itself (the default), nothing is handed over: the
/// counter counts hand-overs only, and the limit is obeyed.
#[test]
fn a_driver_that_commits_every_round_hands_nothing_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            driver_commit_groups: usize::MAX,
            ..options()
        },
    )
    .unwrap();
    let t = db.default_table();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (t, db) = (t.clone(), &db);
            s.spawn(move || {
                for i in 0..500u64 {
                    let mut b = WriteBatch::new();
                    b.put(&t, &common::writer_key('w', w, i), &i.to_be_bytes()).unwrap();
                    db.write(b, &WriteOptions::default()).unwrap();
                }
            });
        }
    });
    let stats = db.write_stats();
    assert_eq!(stats.writes, 500 * WRITERS as u64);
    assert_eq!(stats.commit_handoffs, 0, "{stats:?}");
    check_all(&db, &[500; WRITERS], 0);
}

/// Hot-row transactions whose commits are handed over: a transaction's acknowledgement comes
/// from whichever writer committed its round, and every increment must survive.
#[test]
fn hot_counters_stay_exact_when_waiting_writers_commit_rounds() {
    const COUNTERS: usize = 3;
    const TXN_THREADS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let t = db.default_table();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let committed: u64 = std::thread::scope(|s| {
        let txns = common::spawn_counter_increments(s, &db, &t, TXN_THREADS, COUNTERS, &stop);
        while db.write_stats().commit_handoffs < HANDOFFS_WANTED && started.elapsed() < MAX_RUN {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        txns.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let stats = db.write_stats();
    assert!(stats.commit_handoffs > 0, "no round handed over: {stats:?}");
    let total = common::counters_total(&t, COUNTERS);
    assert_eq!(total, committed, "increments lost or invented; {stats:?}");
    db.close().unwrap();
}
