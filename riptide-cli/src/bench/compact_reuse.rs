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
//! 3. **Timed**, after a `sync(2)` so the load's writeback stays out of the window:
//!    [`BenchEngine::compact_merge`]: the engine merges the two runs the way its own
//!    compactions do. Throughput is input records (`11 * num`) per second.
//!
//! `--reuse_layout` says where the small run's keys fall. The seed says only that "all keys are
//! distributed uniformly at random" and that the rest of the small run "contains groups of
//! different versions of the same record":
//! - `uniform` (default) reads that literally: distinct and hot keys are new uniformly random
//!   key numbers, so the small run lands in every 16 KiB block of the large one.
//! - `appended` reads it as e-commerce traffic: distinct keys are new records with key numbers
//!   above every key of the large run (uniformly random in the upper half of the key space, as
//!   new orders), and the hot keys are records of the large run (uniformly random among them:
//!   updates of existing rows). Only the hot keys overlap the large run.
//!
//! Both engines see the same records in the same order (seeded by `--seed`). The report line
//! is db_bench's format with one operation per input record (MB/s = bytes the merge wrote to
//! data files); a `compact_reuse details:` line follows.

use super::engine::{load, BenchEngine, EngineError};
use super::error::BenchError;
use super::flags::{Config, Layout};
use super::keys::{KeyBuf, Mt64, ValueSource};
use super::report;
use super::stats::Merged;
use super::wipe_dir;
use std::time::Instant;

/// Records per write batch while loading the runs.
/// The large run is this many times the small one (the seed's 500M vs 50M).
const LARGE_FACTOR: u64 = 10;
/// Average versions per hot key in the small run.
const VERSIONS_PER_HOT_KEY: u64 = 10;

/// The top bit of a key number: clear in the large run and set in the appended layout's
/// distinct keys (key numbers are stored big-endian, so they sort above every large-run key).
const UPPER_HALF: u64 = 1 << 63;

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
        let hot_records = cfg.num * u64::from(100 - pct) / 100;
        let hot_count = (hot_records / VERSIONS_PER_HOT_KEY).max(1);
        let hot: Vec<u64> = match cfg.reuse_layout {
            Layout::Uniform => {
                load(&db, large, &mut key, &mut vals, || rng.next_u64()).map_err(fail("loading the large run"))?;
                (0..hot_count).map(|_| rng.next_u64()).collect()
            }
            Layout::Appended => {
                // The hot keys are the large run's records at `hot_count` random positions.
                let mut pos_rng = Mt64::new(rng.next_u64());
                let mut positions: Vec<u64> = (0..hot_count).map(|_| pos_rng.next_u64() % large).collect();
                positions.sort_unstable();
                let mut hot = Vec::with_capacity(positions.len());
                let (mut i, mut next_pos) = (0u64, 0usize);
                load(&db, large, &mut key, &mut vals, || {
                    let k = rng.next_u64() & !UPPER_HALF;
                    while next_pos < positions.len() && positions[next_pos] == i {
                        hot.push(k);
                        next_pos += 1;
                    }
                    i += 1;
                    k
                })
                .map_err(fail("loading the large run"))?;
                hot
            }
        };
        db.compact().map_err(fail("compacting the large run"))?;
        db.wait_for_background_work().map_err(fail("waiting for compaction"))?;

        let layout = cfg.reuse_layout;
        let mut rng2 = Mt64::new(rng.next_u64());
        let pick = move || {
            let r = rng2.next_u64();
            if r % 100 < u64::from(pct) {
                match layout {
                    Layout::Uniform => rng2.next_u64(),
                    Layout::Appended => rng2.next_u64() | UPPER_HALF,
                }
            } else {
                hot[(rng2.next_u64() % hot.len() as u64) as usize]
            }
        };
        load(&db, cfg.num, &mut key, &mut vals, pick).map_err(fail("loading the small run"))?;
        db.flush().map_err(fail("flushing the small run"))?;
        db.wait_for_background_work().map_err(fail("waiting for flushes"))?;

        println!("compact_reuse details: distinct_pct={pct}: before the timed merge:");
        println!("{}", db.level_stats_report().map_err(fail("levelstats"))?);
        // Leftover writeback of the load must not land in the timed window (on either engine).
        sync_file_systems();
        let start = Instant::now();
        let (written, detail) = db.compact_merge().map_err(fail("compact_reuse"))?;
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
            "compact_reuse details: distinct_pct={pct}: merged {large} + {} records ({hot_count} hot keys, layout {}), {written} written",
            cfg.num,
            layout.name()
        );
        if let Some(detail) = detail {
            println!("compact_reuse details: distinct_pct={pct}: {detail}");
        }
        // Work the merge handed to background threads (Riptide: punching the holes of freed
        // extents beyond the reserve) is not in the timed figure; say how long it took.
        let idle = Instant::now();
        db.wait_for_background_work()
            .map_err(fail("waiting for background work after the merge"))?;
        println!(
            "compact_reuse details: distinct_pct={pct}: background work left by the merge finished {:.3} s after it (polled, not in the timed figure)",
            idle.elapsed().as_secs_f64()
        );
        println!("{}", db.level_stats_report().map_err(fail("levelstats"))?);
    }
    Ok(db)
}

/// Writes every file system's dirty pages to disk (sync(2)), so the timed merge starts from a
/// quiet page cache.
fn sync_file_systems() {
    // SAFETY: sync(2) takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::sync() }
}
