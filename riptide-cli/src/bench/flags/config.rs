//! [`Config`]: the validated settings of one `riptide bench` run, built from [`BenchFlags`] by
//! [`Config::from_flags`], and the mapping of db_bench's flags onto Riptide's [`Options`].
//!
//! Invariants: every field is in range (a bad value is a [`BenchError::Usage`] naming its flag,
//! found before the database directory is touched); `options` passed `Options::validate`. The
//! checks that depend on the engine adapter (flags an engine cannot honour) are the adapters'
//! (`engine::check`, called by the driver right after this).

use super::benchmark::{parse_benchmarks, Benchmark};
use super::engine_choice::{Compression, EngineKind};
use super::workload_settings::{Layout, Mix, TsunamiConfig, XIsolation, XbenchConfig};
use super::{default_db, BenchFlags, DEFAULT_SEED};
use crate::bench::error::BenchError;
use crate::bench::keys::Zipf;
use riptide::{Options, MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use std::path::PathBuf;
use std::time::Duration;

/// Validated settings of one `riptide bench` run.
#[derive(Debug, Clone)]
pub struct Config {
    pub benchmarks: Vec<Benchmark>,
    pub num: u64,
    pub reads: u64,
    pub writes: u64,
    pub deletes: u64,
    pub threads: usize,
    pub key_size: usize,
    pub value_size: usize,
    pub sync: bool,
    pub disable_wal: bool,
    pub histogram: bool,
    /// `--statistics` (RocksDB's statistics object).
    #[cfg_attr(not(feature = "bench-rocksdb"), allow(dead_code))]
    pub statistics: bool,
    pub db: PathBuf,
    pub use_existing_db: bool,
    /// `None` = run by op counts.
    pub duration: Option<Duration>,
    /// The effective seed base (never 0).
    pub seed: u64,
    /// True when `--seed=0` was replaced by [`DEFAULT_SEED`].
    pub seed_defaulted: bool,
    pub async_commit_depth: usize,
    pub batch_size: usize,
    pub stats_interval: Option<Duration>,
    /// The engine under test.
    pub engine: EngineKind,
    /// Block cache bytes (`--cache_size`; for Riptide also in [`Config::options`], as are the
    /// other engine settings below).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub cache_size: usize,
    /// Data block bytes.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub block_size: usize,
    /// Bloom filter bits per key; 0 = none.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub bloom_bits: u32,
    /// Entries between restart points in data blocks.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub block_restart_interval: usize,
    /// Data blocks carry a hash index (`None`: the engine's default).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub data_block_hash_index: Option<bool>,
    /// Block compression (riptide: L0 and L1; rocksdb: all levels but the bottommost).
    pub compression: Compression,
    /// Block compression of the bottommost level (riptide: L2).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub bottommost_compression: Compression,
    /// zstd level.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub compression_level: i32,
    /// Largest zstd dictionary (0 = none).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub compression_max_dict_bytes: usize,
    /// Row cache bytes; 0 = none.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub row_cache_size: usize,
    /// `--read_random_exp_range` (0 = uniform keys).
    pub read_random_exp_range: f64,
    /// `--zipf` (precomputed), if given.
    pub zipf: Option<Zipf>,
    /// `--compression_ratio` of the generated values.
    pub compression_ratio: f64,
    /// compact_reuse's `--distinct_pct` rounds (each in 1..=100).
    pub distinct_pcts: Vec<u32>,
    /// compact_reuse's `--reuse_layout`.
    pub reuse_layout: Layout,
    /// xbench's and tsunami's settings.
    pub xbench: XbenchConfig,
    /// `--max_background_flushes` if given (not negative).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub max_background_flushes: Option<usize>,
    /// `--subcompactions` if given.
    #[cfg_attr(not(feature = "bench-rocksdb"), allow(dead_code))]
    pub subcompactions: Option<usize>,
    /// `--max_background_compactions` if given (not negative).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub max_background_compactions: Option<usize>,
    /// `--level0_file_num_compaction_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_compaction_trigger: Option<usize>,
    /// `--level0_slowdown_writes_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_slowdown_trigger: Option<usize>,
    /// `--level0_stop_writes_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_stop_trigger: Option<usize>,
    /// `--max_write_buffer_number` if given (RocksDB).
    pub max_write_buffer_number: Option<usize>,
    /// True if `--write_queues` was given (a Riptide-only option).
    pub write_queues_given: bool,
    /// Riptide-only flags that were given (the peers refuse them), by name.
    pub riptide_only_given: Vec<&'static str>,
    /// `--dump_file`.
    pub dump_file: Option<PathBuf>,
    /// Riptide's options (already validated; the peers take their memtable size from here). For
    /// `--engine=riptide` they also carry the mapped flags: block size, bloom bits, compression,
    /// block cache (`--cache_size`), row cache, flush threads and L0 triggers.
    pub options: Options,
    /// The run is the default workload (`riptide bench` with no flags); only shown in the header.
    pub default_workload: bool,
}

/// Most benchmark threads accepted.
pub const MAX_THREADS: i64 = 4096;

fn in_range(flag: &str, v: i64, lo: i64, hi: i64, why: &str) -> Result<i64, BenchError> {
    if v < lo || v > hi {
        return Err(BenchError::Usage(format!("--{flag}={v}: {why}")));
    }
    Ok(v)
}

impl Config {
    /// Checks every flag and builds the run's settings.
    pub fn from_flags(f: &BenchFlags) -> Result<Config, BenchError> {
        let benchmarks = parse_benchmarks(&f.benchmarks)?;
        let num = in_range("num", f.num, 1, i64::MAX, "must be at least 1")? as u64;
        let per_thread = |v: i64| if v < 0 { num } else { v as u64 };
        let threads = in_range("threads", f.threads, 1, MAX_THREADS, "must be in 1..=4096")? as usize;
        let key_size = in_range(
            "key_size",
            f.key_size,
            8,
            MAX_KEY_SIZE as i64,
            "must be in 8..=65536 (keys start with the 8-byte big-endian key number)",
        )? as usize;
        let value_size = in_range(
            "value_size",
            f.value_size,
            0,
            MAX_VALUE_SIZE as i64,
            "must be in 0..=64 MiB",
        )? as usize;
        let duration = in_range("duration", f.duration, 0, i64::MAX, "must not be negative")? as u64;
        let async_commit_depth = in_range(
            "async_commit_depth",
            f.async_commit_depth,
            0,
            1 << 20,
            "must be in 0..=1048576",
        )? as usize;
        let batch_size = in_range("batch_size", f.batch_size, 1, 1 << 24, "must be at least 1")? as usize;
        // Same bound as riptide's WriteBatch: key + value + 21 bytes of encoding per op.
        let batch_bytes = batch_size as u128 * (key_size + value_size + 21) as u128;
        if batch_bytes > MAX_BATCH_SIZE as u128 {
            return Err(BenchError::Usage(format!(
                "--batch_size={batch_size}: a batch of {batch_bytes} bytes exceeds riptide's limit of {MAX_BATCH_SIZE} bytes"
            )));
        }
        let stats_interval = in_range(
            "stats_interval_seconds",
            f.stats_interval_seconds,
            0,
            i64::MAX,
            "must not be negative",
        )? as u64;
        let (seed, seed_defaulted) = match f.seed {
            0 => (DEFAULT_SEED, true),
            s => (s as u64, false),
        };
        let engine = EngineKind::from_name(&f.engine)?;
        let cache_size = in_range("cache_size", f.cache_size, 0, i64::MAX, "must not be negative")? as usize;
        let block_size = in_range(
            "block_size",
            f.block_size,
            1 << 10,
            1 << 20,
            "must be in 1024..=1048576",
        )? as usize;
        let bloom_bits = in_range("bloom_bits", f.bloom_bits, 0, 64, "must be in 0..=64")? as u32;
        let data_block_hash_index = match f.data_block_index_type {
            Some(v) => Some(in_range("data_block_index_type", v, 0, 1, "must be 0 or 1")? == 1),
            None => None,
        };
        let block_restart_interval = in_range(
            "block_restart_interval",
            f.block_restart_interval,
            1,
            128,
            "must be in 1..=128",
        )? as usize;
        let compression = Compression::from_name(&f.compression_type)?;
        let bottommost_compression = match &f.bottommost_compression_type {
            Some(name) => Compression::from_name(name)?,
            None => compression,
        };
        let compression_level =
            in_range("compression_level", f.compression_level, -7, 22, "must be in -7..=22")? as i32;
        let compression_max_dict_bytes = in_range(
            "compression_max_dict_bytes",
            f.compression_max_dict_bytes,
            0,
            64 << 10,
            "must be in 0..=65536",
        )? as usize;
        let row_cache_size =
            in_range("row_cache_size", f.row_cache_size, 0, i64::MAX, "must not be negative")? as usize;
        let read_random_exp_range = f.read_random_exp_range;
        if !read_random_exp_range.is_finite() || read_random_exp_range < 0.0 {
            return Err(BenchError::Usage(format!(
                "--read_random_exp_range={read_random_exp_range}: must be a finite number >= 0 (0 = uniform keys)"
            )));
        }
        let distinct_pcts = f
            .distinct_pct
            .split(',')
            .map(|p| match p.trim().parse::<u32>() {
                Ok(n) if (1..=100).contains(&n) => Ok(n),
                _ => Err(BenchError::Usage(format!(
                    "--distinct_pct={}: expected percentages in 1..=100 separated by commas",
                    f.distinct_pct
                ))),
            })
            .collect::<Result<Vec<u32>, BenchError>>()?;
        let reuse_layout = Layout::from_name(&f.reuse_layout)?;
        let xbench = xbench_config(f)?;
        if engine == EngineKind::Fjall
            && benchmarks
                .iter()
                .any(|b| matches!(b, Benchmark::XBench | Benchmark::Tsunami))
        {
            return Err(BenchError::Usage(
                "xbench and tsunami run transactions: the fjall adapter has none (use --engine=riptide or rocksdb)"
                    .into(),
            ));
        }
        let zipf = if f.zipf == 0.0 {
            None
        } else if !(f.zipf > 0.0 && f.zipf < 1.0) {
            return Err(BenchError::Usage(format!(
                "--zipf={}: theta must be in (0, 1), e.g. 0.99 (0 = off)",
                f.zipf
            )));
        } else if read_random_exp_range != 0.0 {
            return Err(BenchError::Usage(
                "--zipf and --read_random_exp_range both skew the keys; give one".into(),
            ));
        } else if num > 1 << 28 {
            return Err(BenchError::Usage(format!(
                "--zipf with --num={num}: at most 2^28 keys (the generator sums num terms at start)"
            )));
        } else {
            Some(Zipf::new(num, f.zipf))
        };
        let compression_ratio = f.compression_ratio;
        if !(0.0..=1.0).contains(&compression_ratio) {
            return Err(BenchError::Usage(format!(
                "--compression_ratio={compression_ratio}: must be in 0..=1"
            )));
        }
        let max_background_flushes = match f.max_background_flushes {
            Some(v) if v >= 0 => Some(in_range(
                "max_background_flushes",
                v,
                1,
                64,
                "must be in 1..=64 (or negative for the engine's default)",
            )? as usize),
            _ => None,
        };
        let max_background_compactions = match f.max_background_compactions {
            Some(v) if v >= 0 => Some(in_range(
                "max_background_compactions",
                v,
                1,
                64,
                "must be in 1..=64 (or negative for the engine's default)",
            )? as usize),
            _ => None,
        };
        let subcompactions = f
            .subcompactions
            .map(|v| in_range("subcompactions", v, 1, 64, "must be in 1..=64").map(|v| v as usize))
            .transpose()?;
        let trigger = |flag: &str, v: Option<i64>| -> Result<Option<usize>, BenchError> {
            v.map(|v| in_range(flag, v, 1, 1 << 20, "must be in 1..=1048576").map(|v| v as usize))
                .transpose()
        };
        let level0_compaction_trigger = trigger(
            "level0_file_num_compaction_trigger",
            f.level0_file_num_compaction_trigger,
        )?;
        let level0_slowdown_trigger = trigger("level0_slowdown_writes_trigger", f.level0_slowdown_writes_trigger)?;
        let level0_stop_trigger = trigger("level0_stop_writes_trigger", f.level0_stop_writes_trigger)?;
        let max_write_buffer_number = match f.max_write_buffer_number {
            Some(v) => Some(in_range("max_write_buffer_number", v, 2, 1024, "must be in 2..=1024")? as usize),
            None => None,
        };
        let defaults = Options::default();
        let write_buffer_size = match f.write_buffer_size {
            Some(v) => in_range("write_buffer_size", v, 1, i64::MAX, "must be positive")? as usize,
            None => defaults.write_buffer_size,
        };
        let write_queues = match f.write_queues {
            Some(v) => in_range("write_queues", v, 1, 256, "must be in 1..=256")? as usize,
            None => defaults.write_queues,
        };
        let mut options = Options {
            write_buffer_size,
            write_queues,
            ..defaults
        };
        if engine == EngineKind::Riptide {
            // db_bench's flags onto Riptide's options (the peers map them in their adapters).
            options.block_size = block_size;
            options.block_restart_interval = block_restart_interval;
            if let Some(h) = data_block_hash_index {
                options.block_hash_index = h;
            }
            options.bloom_bits_per_key = bloom_bits;
            let codec = |c: Compression| match c {
                Compression::None => riptide::Compression::None,
                Compression::Lz4 => riptide::Compression::Lz4,
                Compression::Zstd => riptide::Compression::Zstd {
                    level: compression_level,
                },
            };
            options.compression_per_level = [codec(compression), codec(compression), codec(bottommost_compression)];
            options.zstd_dictionary_bytes = compression_max_dict_bytes;
            options.block_cache_size = cache_size;
            options.row_cache_size = row_cache_size;
            if let Some(n) = max_background_flushes {
                options.max_flushes = n;
            }
            if let Some(n) = max_background_compactions {
                options.max_compactions = n;
            }
            if let Some(n) = subcompactions {
                options.compaction_units = n;
            }
            if let Some(n) = level0_compaction_trigger {
                options.level0_layer_trigger = n;
            }
            if let Some(n) = trigger("level0_extents_trigger", f.level0_extents_trigger)? {
                options.level0_extents_trigger = n;
            }
            if let Some(n) = trigger("level1_extents_trigger", f.level1_extents_trigger)? {
                options.level1_extents_trigger = n;
            }
            if let Some(on) = f.partial_block_reads {
                options.partial_block_reads = on;
            }
            if let Some(on) = f.block_swizzling {
                options.block_swizzling = on;
            }
            if let Some(n) = f.parallel_insert_helpers {
                options.parallel_insert_helpers = n;
            }
            if let Some(n) = f.write_wait_spin_micros {
                options.write_wait_spin_micros = n;
            }
            if let Some(on) = f.write_wait_adaptive {
                options.write_wait_adaptive = on;
            }
            if let Some(n) = f.driver_commit_groups {
                options.driver_commit_groups = n;
            }
            if let Some(n) = f.write_lock_spin_nanos {
                options.write_lock_spin_nanos = n;
            }
            if let Some(on) = f.redo_preallocate {
                options.redo_preallocate = on;
            }
            if let Some(on) = f.level1_dynamic_trigger {
                options.level1_dynamic_trigger = on;
            }
            if let Some(n) = level0_slowdown_trigger {
                options.level0_slowdown_layers = n;
            }
            if let Some(n) = level0_stop_trigger {
                options.level0_stop_layers = n;
            }
        }
        f.objects.apply(&mut options).map_err(BenchError::Usage)?;
        options.validate().map_err(|e| match e {
            riptide::Error::InvalidOption { option, reason } => {
                BenchError::Usage(format!("--{}: {reason}", flag_of_option(option)))
            }
            other => BenchError::Usage(other.to_string()),
        })?;
        let cfg = Config {
            benchmarks,
            num,
            reads: per_thread(f.reads),
            writes: per_thread(f.writes),
            deletes: per_thread(f.deletes),
            threads,
            key_size,
            value_size,
            sync: f.sync,
            disable_wal: f.disable_wal,
            histogram: f.histogram,
            statistics: f.statistics,
            db: f.db.clone().unwrap_or_else(|| default_db(engine)),
            use_existing_db: f.use_existing_db,
            duration: (duration > 0).then(|| Duration::from_secs(duration)),
            seed,
            seed_defaulted,
            async_commit_depth,
            batch_size,
            stats_interval: (stats_interval > 0).then(|| Duration::from_secs(stats_interval)),
            engine,
            cache_size,
            block_size,
            bloom_bits,
            block_restart_interval,
            data_block_hash_index,
            compression,
            bottommost_compression,
            compression_level,
            compression_max_dict_bytes,
            row_cache_size,
            read_random_exp_range,
            zipf,
            compression_ratio,
            distinct_pcts,
            reuse_layout,
            xbench,
            max_background_flushes,
            max_background_compactions,
            subcompactions,
            level0_compaction_trigger,
            level0_slowdown_trigger,
            level0_stop_trigger,
            max_write_buffer_number,
            write_queues_given: f.write_queues.is_some(),
            riptide_only_given: [
                ("level0_extents_trigger", f.level0_extents_trigger.is_some()),
                ("level1_extents_trigger", f.level1_extents_trigger.is_some()),
                ("partial_block_reads", f.partial_block_reads.is_some()),
                ("block_swizzling", f.block_swizzling.is_some()),
                ("parallel_insert_helpers", f.parallel_insert_helpers.is_some()),
                ("write_wait_spin_micros", f.write_wait_spin_micros.is_some()),
                ("write_wait_adaptive", f.write_wait_adaptive.is_some()),
                ("driver_commit_groups", f.driver_commit_groups.is_some()),
                ("write_lock_spin_nanos", f.write_lock_spin_nanos.is_some()),
                ("redo_preallocate", f.redo_preallocate.is_some()),
                ("level1_dynamic_trigger", f.level1_dynamic_trigger.is_some()),
            ]
            .into_iter()
            .filter_map(|(n, given)| given.then_some(n))
            .collect(),
            dump_file: f.dump_file.clone(),
            options,
            default_workload: false,
        };
        Ok(cfg)
    }
}

/// Checks xbench's and tsunami's flags.
fn xbench_config(f: &BenchFlags) -> Result<XbenchConfig, BenchError> {
    let range_size = in_range("range_size", f.range_size, 1, 1 << 20, "must be in 1..=1048576")? as usize;
    let txn_queries = in_range("txn_queries", f.txn_queries, 1, 10_000, "must be in 1..=10000")? as usize;
    let lock_timeout_ms = in_range(
        "lock_timeout_ms",
        f.lock_timeout_ms,
        0,
        3_600_000,
        "must be in 0..=3600000 (an hour)",
    )?;
    let rate_ok = |v: f64| v.is_finite() && v > 0.0;
    if !rate_ok(f.tsunami_base_tps) || f.tsunami_base_tps > 1e8 {
        return Err(BenchError::Usage(format!(
            "--tsunami_base_tps={}: must be above 0 and at most 1e8",
            f.tsunami_base_tps
        )));
    }
    if !rate_ok(f.tsunami_factor) || f.tsunami_base_tps * f.tsunami_factor > 1e8 {
        return Err(BenchError::Usage(format!(
            "--tsunami_factor={}: must be above 0, with base x factor at most 1e8 transactions per second",
            f.tsunami_factor
        )));
    }
    if f.tsunami_drain_limit > 86_400 {
        return Err(BenchError::Usage(format!(
            "--tsunami_drain_limit={}: must be at most 86400 seconds (0 = no limit)",
            f.tsunami_drain_limit
        )));
    }
    let phases: Vec<u64> = f
        .tsunami_phases
        .split(',')
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .ok()
        .filter(|p: &Vec<u64>| p.len() == 3 && p.iter().all(|&s| s <= 86_400) && p[1] > 0)
        .ok_or_else(|| {
            BenchError::Usage(format!(
                "--tsunami_phases={}: expected BEFORE,SPIKE,AFTER in seconds (each at most 86400, SPIKE above 0)",
                f.tsunami_phases
            ))
        })?;
    Ok(XbenchConfig {
        mix: Mix::parse(&f.mix)?,
        range_size,
        txn_queries,
        isolation: XIsolation::from_name(&f.isolation)?,
        lock_timeout: Duration::from_millis(lock_timeout_ms as u64),
        early_lock_release: f.early_lock_release,
        tsunami: TsunamiConfig {
            base_tps: f.tsunami_base_tps,
            factor: f.tsunami_factor,
            phases: [phases[0], phases[1], phases[2]],
            out: f.tsunami_out.clone(),
            drain_limit: (f.tsunami_drain_limit > 0).then_some(f.tsunami_drain_limit),
        },
    })
}

/// The `riptide bench` flag that sets Riptide option `option` (for error messages).
fn flag_of_option(option: &str) -> &str {
    match option {
        "bloom_bits_per_key" => "bloom_bits",
        "block_cache_size" => "cache_size",
        "max_flushes" => "max_background_flushes",
        "max_compactions" => "max_background_compactions",
        "level0_layer_trigger" => "level0_file_num_compaction_trigger",
        "level0_slowdown_layers" => "level0_slowdown_writes_trigger",
        "level0_stop_layers" => "level0_stop_writes_trigger",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse_bool, DEFAULT_BENCHMARKS, DEFAULT_DB, DEFAULT_WORKLOAD_READS};
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        flags: BenchFlags,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        let w =
            Wrap::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_flags(&w.flags).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_db_bench_and_riptide() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.benchmarks.len(), 6);
        assert_eq!(c.benchmarks[0], Benchmark::FillSeq);
        assert_eq!(
            (c.num, c.reads, c.writes, c.deletes),
            (1_000_000, 1_000_000, 1_000_000, 1_000_000)
        );
        assert_eq!((c.threads, c.key_size, c.value_size, c.batch_size), (1, 16, 100, 1));
        assert!(!c.sync && !c.disable_wal && !c.histogram && !c.use_existing_db);
        assert_eq!(c.duration, None);
        assert_eq!((c.seed, c.seed_defaulted), (DEFAULT_SEED, true));
        assert_eq!(c.db, PathBuf::from(DEFAULT_DB));
        assert_eq!(c.options.write_buffer_size, Options::default().write_buffer_size);
        assert_eq!(c.options.write_queues, Options::default().write_queues);
    }

    #[test]
    fn db_bench_spelling_and_booleans() {
        let c = parse(&[
            "--benchmarks=readrandom,,fillseq",
            "--num=50",
            "--reads=7",
            "--writes=-1",
            "--threads=3",
            "--key_size=8",
            "--value_size=0",
            "--sync=true",
            "--disable_wal=0",
            "--histogram",
            "--duration=2",
            "--seed=9",
            "--async_commit_depth=16",
            "--write_buffer_size=1048576",
            "--write_queues=2",
            "--batch_size=4",
            "--use_existing_db=1",
        ])
        .unwrap();
        assert_eq!(c.benchmarks, vec![Benchmark::ReadRandom, Benchmark::FillSeq]);
        assert_eq!((c.num, c.reads, c.writes, c.threads), (50, 7, 50, 3));
        assert!(c.sync && !c.disable_wal && c.histogram && c.use_existing_db);
        assert_eq!(c.duration, Some(Duration::from_secs(2)));
        assert_eq!((c.seed, c.seed_defaulted), (9, false));
        assert_eq!((c.async_commit_depth, c.batch_size), (16, 4));
        assert_eq!((c.options.write_buffer_size, c.options.write_queues), (1 << 20, 2));
        // Space-separated values work for non-boolean flags too.
        assert_eq!(parse(&["--num", "12"]).unwrap().num, 12);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        for (args, needle) in [
            (&["--key_size=4"][..], "--key_size=4"),
            (&["--num=0"], "--num=0"),
            (&["--threads=0"], "--threads=0"),
            (&["--batch_size=0"], "--batch_size=0"),
            (&["--duration=-1"], "--duration=-1"),
            (&["--benchmarks=fillseq,nope"], "unknown benchmark `nope`"),
            (&["--benchmarks=,"], "no benchmark"),
            (&["--write_buffer_size=1000"], "write_buffer_size"),
            (&["--write_queues=0"], "--write_queues=0"),
            (&["--sync=maybe"], "expected 0, 1, true or false"),
            (&["--value_size=100000000"], "--value_size"),
            (
                &["--batch_size=16000000", "--value_size=100"],
                "exceeds riptide's limit",
            ),
            (&["--no_such_flag=1"], "no_such_flag"),
        ] {
            let err = parse(args).expect_err(needle);
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn default_workload_only_shortens_reads() {
        let w = Wrap::try_parse_from(["bench"]).unwrap();
        let mut flags = w.flags.clone();
        flags.apply_default_workload();
        let c = Config::from_flags(&flags).unwrap();
        assert_eq!(
            (c.num, c.reads, c.writes, c.value_size),
            (1_000_000, DEFAULT_WORKLOAD_READS as u64, 1_000_000, 100)
        );
        assert_eq!(c.benchmarks, parse_benchmarks(DEFAULT_BENCHMARKS).unwrap());
    }

    #[test]
    fn db_bench_flags_map_onto_riptide_options() {
        let c = parse(&[
            "--cache_size=1048576",
            "--row_cache_size=4096",
            "--bloom_bits=7",
            "--block_size=4096",
            "--compression_type=lz4",
            "--max_background_flushes=3",
            "--max_background_compactions=5",
            "--level0_file_num_compaction_trigger=2",
            "--level0_slowdown_writes_trigger=5",
            "--level0_stop_writes_trigger=9",
            "--read_random_exp_range=2.5",
            "--compression_ratio=0.25",
            "--statistics",
        ])
        .unwrap();
        let o = &c.options;
        assert_eq!(
            (o.block_cache_size, o.row_cache_size, o.bloom_bits_per_key, o.block_size),
            (1 << 20, 4096, 7, 4096)
        );
        assert_eq!(o.compression_per_level, [riptide::Compression::Lz4; 3]);
        let z = parse(&[
            "--compression_type=lz4",
            "--bottommost_compression_type=zstd",
            "--compression_level=5",
        ])
        .unwrap();
        assert_eq!(
            z.options.compression_per_level,
            [
                riptide::Compression::Lz4,
                riptide::Compression::Lz4,
                riptide::Compression::Zstd { level: 5 }
            ]
        );
        assert!(parse(&["--compression_level=23"]).is_err());
        assert!(parse(&["--bottommost_compression_type=snappy"]).is_err());
        assert_eq!(
            (
                o.max_flushes,
                o.level0_layer_trigger,
                o.level0_slowdown_layers,
                o.level0_stop_layers
            ),
            (3, 2, 5, 9)
        );
        assert_eq!(o.max_compactions, 5);
        assert_eq!((c.read_random_exp_range, c.compression_ratio), (2.5, 0.25));
        assert!(c.statistics);
        // Defaults: db_bench's 8 MiB block cache and no compression (not Riptide's own 256 MiB
        // and lz4), no row cache, Riptide's flush threads and triggers.
        let d = parse(&[]).unwrap();
        let (o, r) = (&d.options, Options::default());
        assert_eq!((o.block_cache_size, o.row_cache_size), (8 << 20, 0));
        assert_eq!(o.compression_per_level, [riptide::Compression::None; 3]);
        assert_eq!((o.bloom_bits_per_key, o.block_size), (10, 16 << 10));
        assert_eq!(
            (o.max_flushes, o.level0_layer_trigger),
            (r.max_flushes, r.level0_layer_trigger)
        );
        assert_eq!((d.read_random_exp_range, d.compression_ratio), (0.0, 0.5));
        // db_bench's -1: the engine's default.
        assert_eq!(
            parse(&["--max_background_flushes=-1"]).unwrap().max_background_flushes,
            None
        );
    }

    #[test]
    fn bool_parser() {
        for t in ["1", "true", "TRUE", "yes", "on"] {
            assert_eq!(parse_bool(t), Ok(true));
        }
        for f in ["0", "false", "False", "no", "off"] {
            assert_eq!(parse_bool(f), Ok(false));
        }
        assert!(parse_bool("2").is_err());
    }

    #[test]
    fn benchmark_names_round_trip() {
        for b in Benchmark::ALL {
            assert_eq!(Benchmark::from_name(b.name()), Some(b));
            assert!(!(b.is_meta() && (b.writes() || b.fresh_db())), "{b:?}");
        }
        assert!(Benchmark::Flush.is_meta() && Benchmark::LevelStats.is_meta() && !Benchmark::ReadRandom.is_meta());
        assert!(Benchmark::FillSeq.fresh_db() && Benchmark::FillRandom.fresh_db() && !Benchmark::Overwrite.fresh_db());
    }
}
