//! Helpers shared by the checkpoint, read-only, backup and write-pipeline tests.
#![allow(dead_code)]

use riptide::fs::{FileSystem, PosixFs};
use riptide::{Db, Options, ReadOptions, Table, TxnOptions, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

/// A table's contents.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Small memtables and triggers on `fs`, so a few thousand writes reach every level.
pub fn small_on(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        write_buffer_size: 64 << 10,
        redo_segment_size: 256 << 10,
        level0_layer_trigger: 2,
        level0_extents_trigger: 3,
        level1_extents_trigger: 3,
        level1_dynamic_trigger: false,
        ..Default::default()
    }
}

/// [`small_on`] the operating system's file system.
pub fn small() -> Options {
    small_on(Arc::new(PosixFs))
}

/// Every row of `t`.
pub fn scan(t: &Table) -> Model {
    t.iter(&ReadOptions::default())
        .unwrap()
        .collect::<riptide::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .collect()
}

/// Spawns `threads` transactions threads in `s` that increment the hot counters `counter-0`
/// .. `counter-{counters - 1}` of `t` (each thread round robin from its own index: locked
/// read, put of the value plus one, commit) until `stop` is set; each returns how many
/// increments it committed. A lock released before its write is in place loses increments.
pub fn spawn_counter_increments<'scope>(
    s: &'scope Scope<'scope, '_>,
    db: &'scope Db,
    t: &Table,
    threads: usize,
    counters: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<ScopedJoinHandle<'scope, u64>> {
    (0..threads)
        .map(|w| {
            let (t, stop) = (t.clone(), stop.clone());
            s.spawn(move || {
                let mut n = 0u64;
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("counter-{}", i % counters).into_bytes();
                    i += 1;
                    let mut txn = db.begin(TxnOptions::default()).unwrap();
                    let old = txn
                        .get_for_update(&t, &key)
                        .unwrap()
                        .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
                    txn.put(&t, &key, &(old + 1).to_be_bytes()).unwrap();
                    txn.commit().unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect()
}

/// The sum of the counters [`spawn_counter_increments`] increments.
pub fn counters_total(t: &Table, counters: usize) -> u64 {
    (0..counters)
        .map(|c| {
            t.get(format!("counter-{c}").as_bytes())
                .unwrap()
                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()))
        })
        .sum()
}

/// Key `i` of blocking writer `w` whose keys start with `prefix` (one letter).
pub fn writer_key(prefix: char, w: usize, i: u64) -> Vec<u8> {
    format!("{prefix}{w:02}-{i:08}").into_bytes()
}

/// Key `j` of large batch `batch` ([`spawn_large_writer`]).
pub fn large_key(batch: u64, j: usize) -> Vec<u8> {
    format!("l{batch:06}-{j:05}").into_bytes()
}

/// Spawns `writers` threads in `s`, each writing single puts of [`writer_key`]`(prefix, w, n)`
/// = `n` (big-endian) with `db.write` until `stop` is set, and, if `read_back`, reading each
/// back as soon as its write returns (acknowledged means visible). Each returns how many of
/// its writes were acknowledged.
pub fn spawn_blocking_writers<'scope>(
    s: &'scope Scope<'scope, '_>,
    db: &'scope Db,
    t: &Table,
    writers: usize,
    prefix: char,
    read_back: bool,
    stop: &Arc<AtomicBool>,
) -> Vec<ScopedJoinHandle<'scope, u64>> {
    (0..writers)
        .map(|w| {
            let (t, stop) = (t.clone(), stop.clone());
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = writer_key(prefix, w, n);
                    let mut b = WriteBatch::new();
                    b.put(&t, &key, &n.to_be_bytes()).unwrap();
                    db.write(b, &WriteOptions::default()).unwrap();
                    if read_back {
                        assert_eq!(
                            t.get(&key).unwrap(),
                            Some(n.to_be_bytes().to_vec()),
                            "writer {w}: write {n} acknowledged but not visible"
                        );
                    }
                    n += 1;
                }
                n
            })
        })
        .collect()
}

/// Spawns a thread in `s` writing batches of `puts` puts ([`large_key`]`(n, j)` = `n`,
/// big-endian) until `stop` is set, which keeps its group's leader busy inserting while other
/// writers join groups behind it; returns how many batches were acknowledged.
pub fn spawn_large_writer<'scope>(
    s: &'scope Scope<'scope, '_>,
    db: &'scope Db,
    t: &Table,
    puts: usize,
    stop: &Arc<AtomicBool>,
) -> ScopedJoinHandle<'scope, u64> {
    let (t, stop) = (t.clone(), stop.clone());
    s.spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let mut b = WriteBatch::new();
            for j in 0..puts {
                b.put(&t, &large_key(n, j), &n.to_be_bytes()).unwrap();
            }
            db.write(b, &WriteOptions::default()).unwrap();
            n += 1;
        }
        n
    })
}

/// Asserts that blocking writer `w` of `prefix` has each of its `counts[w]` writes in `t`.
pub fn check_writer_keys(t: &Table, prefix: char, counts: &[u64]) {
    for (w, &n) in counts.iter().enumerate() {
        for i in 0..n {
            assert_eq!(
                t.get(&writer_key(prefix, w, i)).unwrap(),
                Some(i.to_be_bytes().to_vec()),
                "writer {prefix}{w} write {i}"
            );
        }
    }
}
