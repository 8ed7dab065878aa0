//! `hotkeysnapshot`: reads of one hot key at an old snapshot (issue 21, item 4).
//!
//! 1. Writes version 0 of one key (key number 0), then takes a snapshot
//!    ([`BenchEngine::snapshot_reader`]; Riptide: `Db::snapshot`).
//! 2. Writes `--num` newer versions of the same key, in write batches of `engine::LOAD_BATCH` (one
//!    LSN per version), so the memtable holds a chain of `--num` versions above the snapshot's.
//! 3. **Timed**: `min(--reads, MAX_READS)` reads of the key at the snapshot, on the calling
//!    thread (Riptide: `Table::get_opt` with `ReadOptions { snapshot }`). Every read must find
//!    version 0's value; "(X of Y found)" counts those that did.
//!
//! The result line is db_bench's format (micros/op, ops/sec); a `hotkeysnapshot details:` line
//! says how long the writes took. Engines without a snapshot reader skip the benchmark.
//!
//! Invariant: the snapshot is held from before the first newer version is written until the
//! last timed read, so every read must see version 0.

use super::engine::{load, BenchEngine, EngineError};
use super::error::BenchError;
use super::flags::Config;
use super::keys::{KeyBuf, ValueSource};
use super::report;
use super::stats::Merged;
use std::time::Instant;

/// Most timed reads: without a version index one read can take milliseconds.
pub const MAX_READS: u64 = 10_000;

/// Runs the benchmark on `db`, printing its result line.
pub fn run<E: BenchEngine>(cfg: &Config, db: &E, values: &ValueSource) -> Result<(), BenchError> {
    let fail = |what: &'static str| move |e: EngineError| BenchError::engine(what, e);
    let mut key = KeyBuf::new(cfg.key_size);
    let key = key.set(0).to_vec();
    let mut vals = values.cursor(0);
    // Version 0: a value of a length no newer version has, so a read that returns a newer
    // version is caught.
    let old_len = cfg.value_size + 1;
    let old_value = vec![b'o'; old_len];
    let mut batch = db.new_batch(1);
    db.put(&mut batch, &key, &old_value)
        .map_err(fail("writing version 0"))?;
    db.write(batch).map_err(fail("writing version 0"))?;
    let Some(snapshot) = db.snapshot_reader() else {
        println!(
            "{:<12} : skipped (the engine has no snapshot reads here)",
            "hotkeysnapshot"
        );
        return Ok(());
    };

    let start = Instant::now();
    let mut one_key = KeyBuf::new(cfg.key_size);
    load(db, cfg.num, &mut one_key, &mut vals, || 0).map_err(fail("writing newer versions"))?;
    let write_secs = start.elapsed().as_secs_f64();

    let reads = cfg.reads.clamp(1, MAX_READS);
    let mut found = 0;
    let start = Instant::now();
    for _ in 0..reads {
        if snapshot.get_len(&key).map_err(fail("reading at the snapshot"))? == Some(old_len) {
            found += 1;
        }
    }
    let elapsed = start.elapsed();
    drop(snapshot);
    let m = Merged {
        done: reads,
        bytes: 0,
        found,
        lookups: reads,
        elapsed,
        thread_seconds: elapsed.as_secs_f64(),
        hist: None,
    };
    println!("{}", report::result_line("hotkeysnapshot", &m));
    println!(
        "hotkeysnapshot details: {} newer versions of one key written in {write_secs:.3} s before the reads",
        cfg.num
    );
    Ok(())
}
