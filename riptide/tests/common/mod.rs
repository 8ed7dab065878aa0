//! Helpers shared by the checkpoint, read-only, backup and write-pipeline tests.
#![allow(dead_code)]

use riptide::fs::{FileSystem, PosixFs};
use riptide::{Db, Options, ReadOptions, Table, TxnOptions};
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
