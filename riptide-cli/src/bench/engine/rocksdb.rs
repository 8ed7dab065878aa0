//! The RocksDB adapter (cargo feature `bench-rocksdb`): RocksDB 11.8 built from C++ source in
//! release mode (NDEBUG) by the `rocksdb` crate, with options mirroring Riptide's (see
//! [`RocksDbEngine::open`] and docs/PERFORMANCE.md, "Peer engines").
//!
//! One `DB` with the default column family; writes are `WriteBatch`es through `DB::write_opt`
//! with `sync` / `disableWAL` from the flags; point reads use `get_pinned_opt` (no copy); seeks
//! and scans use a fresh raw iterator each, like db_bench.

use super::EngineError;
use super::{bytes, durability_options, refuse_riptide_only_flags, BenchEngine, Compression, Cursor, Description};
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
use ::rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DBRawIterator, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use std::convert::Infallible;

/// RocksDB's default `max_write_buffer_number`, also db_bench's.
pub const DEFAULT_MAX_WRITE_BUFFER_NUMBER: usize = 2;

/// The `rocksdb` crate version this adapter was written against (Cargo.toml pins it).
const CRATE: &str = "rust-rocksdb 0.25.0, librocksdb-sys 0.19.0+11.8.1";

/// An open RocksDB database.
pub struct RocksDbEngine {
    db: DB,
    wopts: WriteOptions,
    ropts: ReadOptions,
    /// RocksDB's version as its OPTIONS file records it.
    version: Option<String>,
    // Kept alive for the database's lifetime (RocksDB holds its own reference too).
    _cache: Cache,
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

impl RocksDbEngine {
    fn max_write_buffer_number(cfg: &Config) -> usize {
        cfg.max_write_buffer_number.unwrap_or(DEFAULT_MAX_WRITE_BUFFER_NUMBER)
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
    /// compression, an LRU block cache of `--cache_size`, `write_buffer_size` memtables (2 by
    /// default), WAL on unless `--disable_wal`, `sync` per write from `--sync`; everything else
    /// is RocksDB's default.
    fn open(cfg: &Config) -> Result<Self, BenchError> {
        let cache = Cache::new_lru_cache(cfg.cache_size);
        let mut table = BlockBasedOptions::default();
        table.set_block_size(cfg.block_size);
        table.set_block_cache(&cache);
        if cfg.bloom_bits > 0 {
            table.set_bloom_filter(f64::from(cfg.bloom_bits), false);
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_compression_type(compression(cfg.compression));
        opts.set_write_buffer_size(cfg.options.write_buffer_size);
        opts.set_max_write_buffer_number(Self::max_write_buffer_number(cfg) as i32);
        let db = DB::open(&opts, &cfg.db)
            .map_err(|e| BenchError::engine(format!("opening the RocksDB database in {}", cfg.db.display()), e))?;
        let mut wopts = WriteOptions::default();
        wopts.set_sync(cfg.sync);
        wopts.disable_wal(cfg.disable_wal);
        Ok(RocksDbEngine {
            db,
            wopts,
            ropts: ReadOptions::default(),
            version: version_from_options_file(&cfg.db),
            _cache: cache,
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
            (
                "bloom_bits_per_key",
                if cfg.bloom_bits > 0 {
                    format!("{} (full filter)", cfg.bloom_bits)
                } else {
                    "0 (no filter)".to_string()
                },
            ),
            ("compression", cfg.compression.name().to_string()),
            ("block_cache_size", format!("{} (LRU)", bytes(cfg.cache_size as u64))),
            ("write_buffer_size", bytes(cfg.options.write_buffer_size as u64)),
            (
                "max_memtables",
                format!(
                    "{} (max_write_buffer_number: active + immutable; flushed to L0 SSTs)",
                    Self::max_write_buffer_number(cfg)
                ),
            ),
        ];
        options.extend(durability_options(cfg, "WAL", "fdatasync of the WAL (group commit)"));
        options.push((
            "write_path",
            "default: leader/follower group commit, concurrent memtable writes, no pipelining".to_string(),
        ));
        options.push((
            "background_threads",
            "max_background_jobs=2 (default): flushes and leveled compaction".to_string(),
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

    fn cursor(&self) -> Result<RocksCursor<'_>, EngineError> {
        Ok(RocksCursor(self.db.raw_iterator()))
    }

    fn close(self) -> Result<(), EngineError> {
        // Dropping the DB closes it (waiting for background work); the WAL holds the memtables.
        drop(self);
        Ok(())
    }

    fn end_of_run_stats(&self) -> Vec<String> {
        let stats = match self.db.property_value("rocksdb.stats") {
            Ok(Some(s)) => s,
            _ => return Vec::new(),
        };
        let mut lines: Vec<String> = stats
            .lines()
            .filter(|l| {
                l.starts_with("Cumulative writes:")
                    || l.starts_with("Cumulative WAL:")
                    || l.starts_with("Cumulative stall:")
            })
            .map(|l| format!("RocksDB stats: {}", l.trim()))
            .collect();
        let files: Vec<String> = (0..7)
            .map(|level| {
                self.db
                    .property_value(&format!("rocksdb.num-files-at-level{level}"))
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| "?".into())
            })
            .collect();
        lines.push(format!(
            "RocksDB stats: SST files per level L0..L6: {}",
            files.join(" ")
        ));
        lines
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
