//! The RocksDB adapter (cargo feature `bench-rocksdb`): RocksDB 11.8 built from C++ source in
//! release mode (NDEBUG) by the `rocksdb` crate, with options mirroring Riptide's (see
//! [`RocksDbEngine::open`] and docs/PERFORMANCE.md, "Peer engines").
//!
//! One `DB` with the default column family; writes are `WriteBatch`es through `DB::write_opt`
//! with `sync` / `disableWAL` from the flags; point reads use `get_pinned_opt` (no copy),
//! multireadrandom the vector `MultiGet` (db_bench's default); seeks and scans use a fresh raw
//! iterator each, like db_bench. The meta operations are db_bench's: `Flush` (waiting),
//! `CompactRange` over everything with `bottommost_level_compaction = kForceOptimized`, polling
//! the flush/compaction properties for `waitforcompaction`, and the "rocksdb.stats" /
//! "rocksdb.levelstats" properties.

use super::EngineError;
use super::{
    bytes, durability_options, hit_ratio, mb, refuse_riptide_only_flags, BenchEngine, Compression, Cursor, Description,
    RunTotals,
};
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
use ::rocksdb::statistics::Ticker;
use ::rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, CompactOptions, DBCompressionType, DBRawIterator, Options,
    ReadOptions, WriteBatch, WriteOptions, DB,
};
use std::collections::HashSet;
use std::convert::Infallible;
use std::time::Duration;

/// RocksDB's default `max_write_buffer_number`, also db_bench's.
pub const DEFAULT_MAX_WRITE_BUFFER_NUMBER: usize = 2;

/// The `rocksdb` crate version this adapter was written against (Cargo.toml pins it).
const CRATE: &str = "rust-rocksdb 0.25.0, librocksdb-sys 0.19.0+11.8.1";

/// How often `waitforcompaction` looks at the properties.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// The properties `waitforcompaction` waits to read 0 (db_bench's `WaitForCompactionHelper`).
const BUSY_PROPERTIES: [&str; 4] = [
    "rocksdb.mem-table-flush-pending",
    "rocksdb.num-running-flushes",
    "rocksdb.compaction-pending",
    "rocksdb.num-running-compactions",
];

/// An open RocksDB database.
pub struct RocksDbEngine {
    db: DB,
    wopts: WriteOptions,
    ropts: ReadOptions,
    /// The options it was opened with (their statistics object, with `--statistics`).
    opts: Options,
    statistics: bool,
    /// RocksDB's version as its OPTIONS file records it.
    version: Option<String>,
    // Kept alive for the database's lifetime (RocksDB holds its own reference too).
    cache: Cache,
    cache_capacity: u64,
    row_cache: Option<Cache>,
}

fn compression(c: Compression) -> DBCompressionType {
    match c {
        Compression::None => DBCompressionType::None,
        Compression::Lz4 => DBCompressionType::Lz4,
        Compression::Zstd => DBCompressionType::Zstd,
    }
}

/// `rocksdb_version` from the newest `OPTIONS-*` file RocksDB wrote in `dir`.
fn version_from_options_file(dir: &std::path::Path) -> Option<String> {
    let newest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
            Some((n, e.path()))
        })
        .max_by_key(|(n, _)| *n)?;
    let text = std::fs::read_to_string(newest.1).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("rocksdb_version=").map(|v| v.trim().to_string()))
}

/// db_bench's `WaitForCompactionHelper`: polls the flush/compaction properties (read by
/// `property`) until they read 0 twice in a row.
pub(crate) fn wait_until_idle(property: impl Fn(&str) -> Result<u64, EngineError>) -> Result<(), EngineError> {
    let mut idle_looks = 0;
    while idle_looks < 2 {
        let mut busy = false;
        for p in BUSY_PROPERTIES {
            if property(p)? > 0 {
                busy = true;
                break;
            }
        }
        idle_looks = if busy { 0 } else { idle_looks + 1 };
        if idle_looks < 2 {
            std::thread::sleep(WAIT_POLL);
        }
    }
    Ok(())
}

impl RocksDbEngine {
    fn max_write_buffer_number(cfg: &Config) -> usize {
        cfg.max_write_buffer_number.unwrap_or(DEFAULT_MAX_WRITE_BUFFER_NUMBER)
    }

    /// Names and sizes of the live SST files.
    fn live_files(&self) -> Result<Vec<(String, u64)>, EngineError> {
        Ok(self
            .db
            .live_files()?
            .into_iter()
            .map(|f| (f.name, f.size as u64))
            .collect())
    }

    /// Runs `op`, then returns the bytes of the SST files that became live meanwhile (its
    /// output, plus that of any background job finishing meanwhile).
    fn new_file_bytes(&self, op: impl FnOnce() -> Result<(), EngineError>) -> Result<Option<u64>, EngineError> {
        let before: HashSet<String> = self.live_files()?.into_iter().map(|(n, _)| n).collect();
        op()?;
        Ok(Some(
            self.live_files()?
                .into_iter()
                .filter(|(n, _)| !before.contains(n))
                .map(|(_, size)| size)
                .sum(),
        ))
    }

    /// The options mirroring Riptide's (see [`BenchEngine::open`]), with the block cache and the
    /// row cache they use. Shared with the TransactionDB of `xbench` and `tsunami`.
    pub(crate) fn db_options(cfg: &Config) -> (Options, Cache, Option<Cache>) {
        let cache = Cache::new_lru_cache(cfg.cache_size);
        let mut table = BlockBasedOptions::default();
        table.set_block_size(cfg.block_size);
        table.set_block_restart_interval(cfg.block_restart_interval as i32);
        if cfg.data_block_hash_index == Some(true) {
            table.set_data_block_index_type(rocksdb::DataBlockIndexType::BinaryAndHash);
        }
        table.set_block_cache(&cache);
        if cfg.bloom_bits > 0 {
            table.set_bloom_filter(f64::from(cfg.bloom_bits), false);
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_compression_type(compression(cfg.compression));
        // Window bits -14 and strategy 0 are RocksDB's defaults; only the level changes.
        // A dictionary (max_dict_bytes) is trained on 100x its size of samples, as zstd advises.
        let dict = i32::try_from(cfg.compression_max_dict_bytes).unwrap_or(0);
        opts.set_compression_options(-14, cfg.compression_level, 0, dict);
        if dict > 0 {
            opts.set_zstd_max_train_bytes(dict.saturating_mul(100));
        }
        if cfg.bottommost_compression != cfg.compression {
            opts.set_bottommost_compression_type(compression(cfg.bottommost_compression));
            opts.set_bottommost_compression_options(-14, cfg.compression_level, 0, dict, true);
            if dict > 0 {
                opts.set_bottommost_zstd_max_train_bytes(dict.saturating_mul(100), true);
            }
        }
        opts.set_write_buffer_size(cfg.options.write_buffer_size);
        opts.set_max_write_buffer_number(Self::max_write_buffer_number(cfg) as i32);
        let row_cache = (cfg.row_cache_size > 0).then(|| Cache::new_lru_cache(cfg.row_cache_size));
        if let Some(rc) = &row_cache {
            opts.set_row_cache(rc);
        }
        // Deprecated in favour of max_background_jobs, but RocksDB still honours them when set
        // (GetBGJobLimits), as db_bench sets them from the same flags.
        #[allow(deprecated)]
        if let Some(n) = cfg.max_background_flushes {
            opts.set_max_background_flushes(n as i32);
        }
        #[allow(deprecated)]
        if let Some(n) = cfg.subcompactions {
            opts.set_max_subcompactions(n as u32);
        }
        #[allow(deprecated)]
        if let Some(n) = cfg.max_background_compactions {
            opts.set_max_background_compactions(n as i32);
        }
        if let Some(n) = cfg.level0_compaction_trigger {
            opts.set_level_zero_file_num_compaction_trigger(n as i32);
        }
        if let Some(n) = cfg.level0_slowdown_trigger {
            opts.set_level_zero_slowdown_writes_trigger(n as i32);
        }
        if let Some(n) = cfg.level0_stop_trigger {
            opts.set_level_zero_stop_writes_trigger(n as i32);
        }
        if cfg.statistics {
            opts.enable_statistics();
        }
        (opts, cache, row_cache)
    }

    fn int_property(&self, name: &str) -> Result<u64, EngineError> {
        self.db
            .property_int_value(name)?
            .ok_or_else(|| format!("RocksDB has no property {name}").into())
    }

    fn text_property(&self, name: &str) -> Result<String, EngineError> {
        self.db
            .property_value(name)?
            .ok_or_else(|| format!("RocksDB has no property {name}").into())
    }
}

impl BenchEngine for RocksDbEngine {
    type Batch = WriteBatch;
    type Pending = Infallible;
    type Cursor<'a> = RocksCursor<'a>;

    fn check(cfg: &Config) -> Result<(), BenchError> {
        refuse_riptide_only_flags(cfg)?;
        if cfg.sync && cfg.disable_wal {
            return Err(BenchError::Usage(
                "--sync=1 with --disable_wal=1: RocksDB refuses synchronous writes without a WAL".into(),
            ));
        }
        Ok(())
    }

    /// Mirrors Riptide's settings: 16 KiB blocks, 10 bloom bits per key (full filter), no
    /// compression, an LRU block cache of `--cache_size`, an LRU row cache of `--row_cache_size`
    /// (if not 0), `write_buffer_size` memtables (2 by default), WAL on unless `--disable_wal`,
    /// `sync` per write from `--sync`, and `--max_background_flushes` /
    /// `--max_background_compactions` / `--level0_*` / `--statistics` if given;
    /// everything else is RocksDB's default.
    fn open(cfg: &Config) -> Result<Self, BenchError> {
        let (opts, cache, row_cache) = Self::db_options(cfg);
        let db = DB::open(&opts, &cfg.db)
            .map_err(|e| BenchError::engine(format!("opening the RocksDB database in {}", cfg.db.display()), e))?;
        let mut wopts = WriteOptions::default();
        wopts.set_sync(cfg.sync);
        wopts.disable_wal(cfg.disable_wal);
        Ok(RocksDbEngine {
            db,
            wopts,
            ropts: ReadOptions::default(),
            opts,
            statistics: cfg.statistics,
            version: version_from_options_file(&cfg.db),
            cache,
            cache_capacity: cfg.cache_size as u64,
            row_cache,
        })
    }

    fn describe(&self, cfg: &Config) -> Description {
        let crc = if cfg!(target_feature = "sse4.2") {
            "built with SSE4.2 (hardware CRC32C)"
        } else {
            "built without SSE4.2: software CRC32C (RUSTFLAGS=-Ctarget-cpu=... would enable it)"
        };
        let mut options = vec![
            (
                "block_size",
                format!("{} (block-based table)", bytes(cfg.block_size as u64)),
            ),
            ("block_restart_interval", cfg.block_restart_interval.to_string()),
            (
                "bloom_bits_per_key",
                if cfg.bloom_bits > 0 {
                    format!("{} (full filter)", cfg.bloom_bits)
                } else {
                    "0 (no filter)".to_string()
                },
            ),
            (
                "compression",
                if cfg.bottommost_compression == cfg.compression {
                    cfg.compression.name().to_string()
                } else {
                    format!(
                        "{} (bottommost level: {})",
                        cfg.compression.name(),
                        cfg.bottommost_compression.name()
                    )
                },
            ),
            ("block_cache_size", format!("{} (LRU)", bytes(cfg.cache_size as u64))),
            (
                "row_cache_size",
                if cfg.row_cache_size > 0 {
                    format!("{} (LRU row cache)", bytes(cfg.row_cache_size as u64))
                } else {
                    "0 (no row cache)".to_string()
                },
            ),
            ("write_buffer_size", bytes(cfg.options.write_buffer_size as u64)),
            (
                "max_memtables",
                format!(
                    "{} (max_write_buffer_number: active + immutable; flushed to L0 SSTs)",
                    Self::max_write_buffer_number(cfg)
                ),
            ),
        ];
        let trigger = |v: Option<usize>, default: usize| v.unwrap_or(default);
        options.push((
            "compaction",
            format!(
                "leveled (default): L0 -> L1 at {} L0 files; writes slow down at {} L0 files and stop at {}",
                trigger(cfg.level0_compaction_trigger, 4),
                trigger(cfg.level0_slowdown_trigger, 20),
                trigger(cfg.level0_stop_trigger, 36)
            ),
        ));
        options.extend(durability_options(cfg, "WAL", "fdatasync of the WAL (group commit)"));
        options.push((
            "write_path",
            "default: leader/follower group commit, concurrent memtable writes, no pipelining".to_string(),
        ));
        options.push((
            "background_threads",
            match (cfg.max_background_flushes, cfg.max_background_compactions) {
                (None, None) => "max_background_jobs=2 (default): flushes and leveled compaction".to_string(),
                (f, c) => format!(
                    "max_background_jobs=2 (default), max_background_flushes={}, max_background_compactions={}",
                    f.map_or("-1 (default)".to_string(), |n| n.to_string()),
                    c.map_or("-1 (default)".to_string(), |n| n.to_string())
                ),
            },
        ));
        options.push((
            "max_subcompactions",
            cfg.subcompactions.map_or("1 (default)".to_string(), |n| n.to_string()),
        ));
        options.push((
            "statistics",
            if cfg.statistics {
                "on (--statistics: tickers for cache hits, flush and compaction bytes)".to_string()
            } else {
                "off (--statistics=1 for cache hit ratios and write amplification)".to_string()
            },
        ));
        options.push(("build", format!("release (NDEBUG), {crc}")));
        Description {
            version: format!(
                "RocksDB {} ({CRATE}, built from source)",
                self.version.as_deref().unwrap_or("11.8")
            ),
            options,
        }
    }

    fn new_batch(&self, _ops: usize) -> WriteBatch {
        WriteBatch::default()
    }

    #[inline]
    fn put(&self, batch: &mut WriteBatch, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        batch.put(key, value);
        Ok(())
    }

    #[inline]
    fn delete(&self, batch: &mut WriteBatch, key: &[u8]) -> Result<(), EngineError> {
        batch.delete(key);
        Ok(())
    }

    #[inline]
    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        Ok(self.db.write_opt(batch, &self.wopts)?)
    }

    fn write_async(&self, _batch: WriteBatch) -> Result<Infallible, EngineError> {
        Err("RocksDB has no asynchronous commit".into())
    }

    fn wait(&self, pending: Infallible) -> Result<(), EngineError> {
        match pending {}
    }

    #[inline]
    fn get<R>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, EngineError> {
        Ok(self.db.get_pinned_opt(key, &self.ropts)?.map(|v| read(&v)))
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<usize>>, EngineError> {
        self.db
            .multi_get_opt(keys.iter().copied(), &self.ropts)
            .into_iter()
            .map(|r| r.map(|v| v.map(|v| v.len())).map_err(EngineError::from))
            .collect()
    }

    fn cursor(&self) -> Result<RocksCursor<'_>, EngineError> {
        Ok(RocksCursor(self.db.raw_iterator()))
    }

    fn flush(&self) -> Result<Option<u64>, EngineError> {
        // `DB::flush` waits (FlushOptions::wait = true), as db_bench's Flush.
        self.new_file_bytes(|| Ok(self.db.flush()?))
    }

    fn compact(&self) -> Result<Option<u64>, EngineError> {
        let mut co = CompactOptions::default();
        co.set_bottommost_level_compaction(BottommostLevelCompaction::ForceOptimized);
        self.new_file_bytes(|| {
            self.db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &co);
            Ok(())
        })
    }

    /// CompactRange over everything with RocksDB's default bottommost policy
    /// (kIfHaveCompactionFilter: last-level files the input does not overlap are left alone).
    fn compact_merge(&self) -> Result<(Option<u64>, Option<String>), EngineError> {
        let written = self.new_file_bytes(|| {
            self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
            Ok(())
        })?;
        Ok((written, None))
    }

    /// Polls db_bench's four properties until all read 0 twice in a row (db_bench sleeps 5 s,
    /// then 10 s per busy look; this polls every 50 ms).
    fn wait_for_background_work(&self) -> Result<(), EngineError> {
        wait_until_idle(|p| self.int_property(p))
    }

    fn stats_report(&self, _totals: &RunTotals) -> Result<String, EngineError> {
        self.text_property("rocksdb.stats")
    }

    fn level_stats_report(&self) -> Result<String, EngineError> {
        self.text_property("rocksdb.levelstats")
    }

    fn close(self) -> Result<(), EngineError> {
        // Dropping the DB closes it (waiting for background work); the WAL holds the memtables.
        drop(self);
        Ok(())
    }

    fn end_of_run_stats(&self, totals: &RunTotals) -> Vec<String> {
        stats_lines(
            &StatsSources {
                property: &|name| self.db.property_value(name).ok().flatten(),
                cache: &self.cache,
                cache_capacity: self.cache_capacity,
                row_cache: self.row_cache.as_ref(),
                statistics: self.statistics.then_some(&self.opts),
            },
            totals,
        )
    }
}

/// A RocksDB raw iterator.
pub struct RocksCursor<'a>(DBRawIterator<'a>);

impl Cursor for RocksCursor<'_> {
    #[inline]
    fn seek_to_first(&mut self) {
        self.0.seek_to_first()
    }
    #[inline]
    fn seek_to_last(&mut self) {
        self.0.seek_to_last()
    }
    #[inline]
    fn seek(&mut self, target: &[u8]) {
        self.0.seek(target)
    }
    #[inline]
    fn next(&mut self) {
        self.0.next()
    }
    #[inline]
    fn prev(&mut self) {
        self.0.prev()
    }
    #[inline]
    fn valid(&self) -> bool {
        self.0.valid()
    }
    #[inline]
    fn key(&self) -> &[u8] {
        self.0.key().unwrap_or_default()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        self.0.value().unwrap_or_default()
    }
    fn status(&self) -> Result<(), EngineError> {
        Ok(self.0.status()?)
    }
}

/// Where [`stats_lines`] reads RocksDB's figures (a `DB` or a `TransactionDB`).
pub(crate) struct StatsSources<'a> {
    /// A property's value.
    pub property: &'a dyn Fn(&str) -> Option<String>,
    /// The block cache and its capacity.
    pub cache: &'a Cache,
    pub cache_capacity: u64,
    /// The row cache, if any.
    pub row_cache: Option<&'a Cache>,
    /// The options holding the statistics object, with `--statistics`.
    pub statistics: Option<&'a Options>,
}

/// The end-of-run "RocksDB stats:" lines.
pub(crate) fn stats_lines(src: &StatsSources<'_>, totals: &RunTotals) -> Vec<String> {
    let stats = (src.property)("rocksdb.stats").unwrap_or_default();
    let mut lines: Vec<String> = stats
        .lines()
        .filter(|l| {
            l.starts_with("Cumulative writes:")
                || l.starts_with("Cumulative WAL:")
                || l.starts_with("Cumulative stall:")
                || l.starts_with("Flush(GB):")
                || l.starts_with("Cumulative compaction:")
        })
        .map(|l| format!("RocksDB stats: {}", l.trim()))
        .collect();
    let files: Vec<String> = (0..7)
        .map(|level| (src.property)(&format!("rocksdb.num-files-at-level{level}")).unwrap_or_else(|| "?".into()))
        .collect();
    lines.push(format!(
        "RocksDB stats: SST files per level L0..L6: {}",
        files.join(" ")
    ));
    lines.push(format!(
        "RocksDB stats: live SST files {}",
        (src.property)("rocksdb.live-sst-files-size")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or_else(|| "?".to_string(), mb)
    ));
    let row_cache = src
        .row_cache
        .map_or_else(|| "off".to_string(), |c| mb(c.get_usage() as u64));
    lines.push(format!(
        "RocksDB stats: block cache usage {} of {}; row cache usage {}",
        mb(src.cache.get_usage() as u64),
        mb(src.cache_capacity),
        row_cache
    ));
    if let Some(opts) = src.statistics {
        let t = |ticker| opts.get_ticker_count(ticker);
        let (flush, compaction) = (t(Ticker::FlushWriteBytes), t(Ticker::CompactWriteBytes));
        lines.push(format!(
            "RocksDB stats: flush wrote {}, compaction read {} and wrote {}; write amplification {}",
            mb(flush),
            mb(t(Ticker::CompactReadBytes)),
            mb(compaction),
            if totals.user_bytes_written > 0 {
                format!(
                    "{:.2} (/ {} of user keys and values put since open)",
                    (flush + compaction) as f64 / totals.user_bytes_written as f64,
                    mb(totals.user_bytes_written)
                )
            } else {
                "- (no puts since open)".to_string()
            }
        ));
        lines.push(format!(
            "RocksDB stats: block cache hit ratio {} ({} hits, {} misses; data blocks {}); row cache hit ratio {}",
            hit_ratio(t(Ticker::BlockCacheHit), t(Ticker::BlockCacheMiss)),
            t(Ticker::BlockCacheHit),
            t(Ticker::BlockCacheMiss),
            hit_ratio(t(Ticker::BlockCacheDataHit), t(Ticker::BlockCacheDataMiss)),
            hit_ratio(t(Ticker::RowCacheHit), t(Ticker::RowCacheMiss))
        ));
    }
    lines
}
