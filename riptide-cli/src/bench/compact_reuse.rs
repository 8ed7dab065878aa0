//! `compact_reuse`: seed 000 Fig. 16, the throughput of a compaction that merges two runs.
//!
//! One round per `--distinct_pct` value, each on a freshly wiped database:
//! 1. **Large run**: `10 * num` records with uniformly random 64-bit key numbers, written in
//!    batches of 1000, then compacted all the way down (`compact` + `waitforcompaction`), so they
//!    form the last level.
//! 2. **Small run**: `num` records. Each record is, with probability `distinct_pct`, a new
//!    uniformly random key; otherwise a new version of one of `max(1, hot_records / 10)` hot keys
//!    (so hot keys carry about ten versions each, interleaved with everything else), then a
//!    flush. The small run is one L0 layer (one L0 file on RocksDB: it fits one memtable when
//!    `num` records fit `--write_buffer_size`).
//! 3. **Timed**: [`BenchEngine::compact_merge`]: the engine merges the two runs the way its own
//!    compactions do. Throughput is input records (`11 * num`) per second.
//!
//! Both engines see the same records in the same order (seeded by `--seed`). The report line
//! is db_bench's format with one operation per input record (MB/s = bytes the merge wrote to
//! data files); a `compact_reuse details:` line follows.

use super::engine::{BenchEngine, EngineError};
use super::error::BenchError;
use super::flags::Config;
use super::keys::{KeyBuf, Mt64, ValueSource};
use super::report;
use super::stats::Merged;
use super::wipe_dir;
use std::time::Instant;

/// Records per write batch while loading the runs.
const LOAD_BATCH: usize = 1000;
/// The large run is this many times the small one (the seed's 500M vs 50M).
const LARGE_FACTOR: u64 = 10;
/// Average versions per hot key in the small run.
const VERSIONS_PER_HOT_KEY: u64 = 10;

/// Runs every round; returns the (reopened, fresh) database for the benchmarks that follow.
pub fn run<E: BenchEngine>(cfg: &Config, mut db: E, values: &ValueSource) -> Result<E, BenchError> {
    let fail = |what: &'static str| move |e: EngineError| BenchError::engine(what, e);
    for &pct in &cfg.distinct_pcts {
        db.close().map_err(fail("closing the database"))?;
        wipe_dir(&cfg.db)?;
        db = E::open(cfg)?;
        let mut rng = Mt64::new(cfg.seed ^ u64::from(pct).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut key = KeyBuf::new(cfg.key_size);
        let mut vals = values.cursor(0);
        let large = cfg.num * LARGE_FACTOR;
        load(&db, large, &mut key, &mut vals, || rng.next_u64()).map_err(fail("loading the large run"))?;
        db.compact().map_err(fail("compacting the large run"))?;
        db.wait_for_background_work().map_err(fail("waiting for compaction"))?;

        let hot_records = cfg.num * u64::from(100 - pct) / 100;
        let hot: Vec<u64> = (0..(hot_records / VERSIONS_PER_HOT_KEY).max(1))
            .map(|_| rng.next_u64())
            .collect();
        let mut rng2 = Mt64::new(rng.next_u64());
        let pick = move || {
            let r = rng2.next_u64();
            if r % 100 < u64::from(pct) {
                rng2.next_u64()
            } else {
                hot[(rng2.next_u64() % hot.len() as u64) as usize]
            }
        };
        load(&db, cfg.num, &mut key, &mut vals, pick).map_err(fail("loading the small run"))?;
        db.flush().map_err(fail("flushing the small run"))?;
        db.wait_for_background_work().map_err(fail("waiting for flushes"))?;

        let start = Instant::now();
        let written = db.compact_merge().map_err(fail("compact_reuse"))?;
        let elapsed = start.elapsed();
        let records = large + cfg.num;
        let m = Merged {
            done: records,
            bytes: written.unwrap_or(0),
            found: 0,
            lookups: 0,
            elapsed,
            thread_seconds: elapsed.as_secs_f64(),
            hist: None,
        };
        println!("{}", report::result_line("compact_reuse", &m));
        let written = written.map_or_else(|| "unknown".to_string(), |b| format!("{:.1} MB", b as f64 / 1e6));
        println!(
            "compact_reuse details: distinct_pct={pct}: merged {large} + {} records ({} hot keys), {written} written",
            cfg.num,
            (hot_records / VERSIONS_PER_HOT_KEY).max(1)
        );
        println!("{}", db.level_stats_report().map_err(fail("levelstats"))?);
    }
    Ok(db)
}

/// Writes `n` records with key numbers from `next_key` in batches of [`LOAD_BATCH`].
fn load<E: BenchEngine>(
    db: &E,
    n: u64,
    key: &mut KeyBuf,
    vals: &mut super::keys::ValueCursor<'_>,
    mut next_key: impl FnMut() -> u64,
) -> Result<(), EngineError> {
    let mut left = n;
    while left > 0 {
        let ops = left.min(LOAD_BATCH as u64) as usize;
        let mut batch = db.new_batch(ops);
        for _ in 0..ops {
            db.put(&mut batch, key.set(next_key()), vals.next_value())?;
        }
        db.write(batch)?;
        left -= ops as u64;
    }
    Ok(())
}
