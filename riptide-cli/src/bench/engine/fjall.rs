//! The fjall adapter (cargo feature `bench-fjall`): fjall 3.1, an LSM-tree engine in Rust, with
//! options mirroring Riptide's (see [`FjallEngine::open`] and docs/PERFORMANCE.md, "Peer
//! engines").
//!
//! One `Database` with one keyspace; writes are `OwnedWriteBatch`es committed with
//! `PersistMode::SyncData` under `--sync` and `PersistMode::Buffer` (written to the OS) otherwise;
//! seeks and scans open a fresh range iterator each. fjall cannot skip its journal, so
//! `--disable_wal=1` is refused; it has no row cache and no settings for flush threads or L0
//! triggers, so `--row_cache_size`, `--max_background_flushes`, `--max_background_compactions`
//! and `--level0_*` are refused too.
//! Meta operations use fjall's own (partly `#[doc(hidden)]`) calls: `flush` rotates the memtable
//! and waits for its flush, `compact` is `major_compact`, `waitforcompaction` polls the
//! outstanding flushes, sealed memtables and active compactions; fjall reports no per-level
//! breakdown beyond L0 and no bytes per flush.

use super::EngineError;
use super::{
    bytes, durability_options, mb, refuse_riptide_only_flags, BenchEngine, Compression, Cursor, Description, RunTotals,
};
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
use ::fjall::config::{BlockSizePolicy, BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use ::fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode, Slice};
use std::convert::Infallible;
use std::ops::Bound;
use std::time::Duration;

/// The `fjall` crate version this adapter was written against (Cargo.toml pins it).
const CRATE: &str = "fjall 3.1.13, lsm-tree 3.1.10";

/// Name of the keyspace the bench uses.
const KEYSPACE: &str = "bench";

/// An open fjall database and the bench's keyspace.
pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    persist: PersistMode,
}

impl BenchEngine for FjallEngine {
    type Batch = OwnedWriteBatch;
    type Pending = Infallible;
    type Cursor<'a> = FjallCursor<'a>;

    fn check(cfg: &Config) -> Result<(), BenchError> {
        refuse_riptide_only_flags(cfg)?;
        if cfg.disable_wal {
            return Err(BenchError::Usage(
                "--disable_wal=1: fjall always writes its journal; it has no way to skip it".into(),
            ));
        }
        if cfg.max_write_buffer_number.is_some() {
            return Err(BenchError::Usage(
                "--max_write_buffer_number: a RocksDB option; fjall has no fixed memtable count".into(),
            ));
        }
        if cfg.compression == Compression::Zstd || cfg.bottommost_compression == Compression::Zstd {
            return Err(BenchError::Usage(
                "--compression_type=zstd / --bottommost_compression_type=zstd: fjall supports none and lz4".into(),
            ));
        }
        if cfg.row_cache_size > 0 {
            return Err(BenchError::Usage(format!(
                "--row_cache_size={}: fjall has no row cache (use 0; its block cache is --cache_size)",
                cfg.row_cache_size
            )));
        }
        if cfg.subcompactions.is_some() {
            return Err(BenchError::Usage(
                "--subcompactions: fjall has no setting for threads per compaction".into(),
            ));
        }
        if cfg.max_background_flushes.is_some() || cfg.max_background_compactions.is_some() {
            return Err(BenchError::Usage(
                "--max_background_flushes/--max_background_compactions: fjall has no such settings (its \
                 worker_threads do flushes and compactions)"
                    .into(),
            ));
        }
        if cfg.level0_compaction_trigger.is_some()
            || cfg.level0_slowdown_trigger.is_some()
            || cfg.level0_stop_trigger.is_some()
        {
            return Err(BenchError::Usage(
                "--level0_*_trigger: fjall's leveled compaction has no such settings in this adapter".into(),
            ));
        }
        Ok(())
    }

    /// Mirrors Riptide's settings: 16 KiB data blocks and 10 bloom bits per key on every level,
    /// no compression (data blocks and journal), a block cache of `--cache_size`, memtables of
    /// `write_buffer_size`; journal always on; `--sync` = `PersistMode::SyncData` per batch.
    fn open(cfg: &Config) -> Result<Self, BenchError> {
        let fjall_type = |c: Compression| match c {
            Compression::Lz4 => CompressionType::Lz4,
            _ => CompressionType::None,
        };
        let (upper, bottom) = (fjall_type(cfg.compression), fjall_type(cfg.bottommost_compression));
        // fjall's 7 levels: the last takes the bottommost codec.
        let blocks = if upper == bottom {
            CompressionPolicy::all(upper)
        } else {
            CompressionPolicy::new(vec![upper, upper, upper, upper, upper, upper, bottom])
        };
        let journal = upper;
        let db = Database::builder(&cfg.db)
            .cache_size(cfg.cache_size as u64)
            .journal_compression(journal)
            .open()
            .map_err(|e| BenchError::engine(format!("opening the fjall database in {}", cfg.db.display()), e))?;
        let filter = if cfg.bloom_bits > 0 {
            FilterPolicy::all(FilterPolicyEntry::Bloom(BloomConstructionPolicy::BitsPerKey(
                cfg.bloom_bits as f32,
            )))
        } else {
            FilterPolicy::disabled()
        };
        let block_size = cfg.block_size as u32;
        let memtable = cfg.options.write_buffer_size as u64;
        let ks = db
            .keyspace(KEYSPACE, move || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .data_block_size_policy(BlockSizePolicy::all(block_size))
                    .filter_policy(filter)
                    .data_block_compression_policy(blocks)
            })
            .map_err(|e| BenchError::engine("opening the fjall keyspace", e))?;
        Ok(FjallEngine {
            db,
            ks,
            persist: if cfg.sync {
                PersistMode::SyncData
            } else {
                PersistMode::Buffer
            },
        })
    }

    fn describe(&self, cfg: &Config) -> Description {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        let mut options = vec![
            (
                "block_size",
                format!("{} (data blocks, every level)", bytes(cfg.block_size as u64)),
            ),
            (
                "bloom_bits_per_key",
                if cfg.bloom_bits > 0 {
                    format!("{} (every level; fjall's default is FPR 0.0001 on L0)", cfg.bloom_bits)
                } else {
                    "0 (no filter)".to_string()
                },
            ),
            (
                "compression",
                if cfg.bottommost_compression == cfg.compression {
                    format!("{} (data blocks and journal)", cfg.compression.name())
                } else {
                    format!(
                        "{} (data blocks and journal; last level: {})",
                        cfg.compression.name(),
                        cfg.bottommost_compression.name()
                    )
                },
            ),
            (
                "block_cache_size",
                format!("{} (fjall's shared cache)", bytes(cfg.cache_size as u64)),
            ),
            ("row_cache_size", "0 (fjall has no row cache)".to_string()),
            (
                "write_buffer_size",
                format!(
                    "{} (keyspace max_memtable_size)",
                    bytes(cfg.options.write_buffer_size as u64)
                ),
            ),
            (
                "max_memtables",
                "1 active + sealed ones until flushed (no fixed count; journals capped at 512 MiB)".to_string(),
            ),
        ];
        options.extend(durability_options(
            cfg,
            "journal",
            "PersistMode::SyncData (fdatasync) of the journal",
        ));
        options.push((
            "write_path",
            "one journal lock: each batch is written (and synced) on its own, no group commit".to_string(),
        ));
        options.push((
            "background_threads",
            format!("worker_threads={workers} (default min(cores, 4)): flushes and leveled compaction"),
        ));
        options.push((
            "statistics",
            "fjall's own counters only (tables, journals, compactions)".to_string(),
        ));
        Description {
            version: format!("fjall ({CRATE})"),
            options,
        }
    }

    fn new_batch(&self, ops: usize) -> OwnedWriteBatch {
        OwnedWriteBatch::with_capacity(self.db.clone(), ops).durability(Some(self.persist))
    }

    #[inline]
    fn put(&self, batch: &mut OwnedWriteBatch, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        batch.insert(&self.ks, key, value);
        Ok(())
    }

    #[inline]
    fn delete(&self, batch: &mut OwnedWriteBatch, key: &[u8]) -> Result<(), EngineError> {
        batch.remove(&self.ks, key);
        Ok(())
    }

    #[inline]
    fn write(&self, batch: OwnedWriteBatch) -> Result<(), EngineError> {
        Ok(batch.commit()?)
    }

    fn write_async(&self, _batch: OwnedWriteBatch) -> Result<Infallible, EngineError> {
        Err("fjall has no asynchronous commit".into())
    }

    fn wait(&self, pending: Infallible) -> Result<(), EngineError> {
        match pending {}
    }

    #[inline]
    fn get<R>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, EngineError> {
        Ok(self.ks.get(key)?.map(|v| read(&v)))
    }

    /// fjall has no multi-get: one `get` per key (each sees the latest state).
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<usize>>, EngineError> {
        keys.iter().map(|k| Ok(self.ks.get(k)?.map(|v| v.len()))).collect()
    }

    fn flush(&self) -> Result<Option<u64>, EngineError> {
        self.ks.rotate_memtable_and_wait()?;
        Ok(None)
    }

    fn compact(&self) -> Result<Option<u64>, EngineError> {
        self.ks.rotate_memtable_and_wait()?;
        self.ks.major_compact()?;
        Ok(None)
    }

    /// fjall has no partial manual compaction: a major compaction merges every level.
    fn compact_merge(&self) -> Result<(Option<u64>, Option<String>), EngineError> {
        Ok((self.compact()?, None))
    }

    /// Polls until no flush is queued, no memtable is sealed and no compaction runs, twice in a
    /// row 50 ms apart.
    fn wait_for_background_work(&self) -> Result<(), EngineError> {
        let mut idle_looks = 0;
        while idle_looks < 2 {
            let busy = self.db.outstanding_flushes() > 0
                || self.ks.sealed_memtable_count() > 0
                || self.db.active_compactions() > 0;
            idle_looks = if busy { 0 } else { idle_looks + 1 };
            if idle_looks < 2 {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn stats_report(&self, _totals: &RunTotals) -> Result<String, EngineError> {
        let mut s = String::from("** fjall stats **\n");
        for line in self.stats_lines()? {
            s.push_str("  ");
            s.push_str(&line);
            s.push('\n');
        }
        Ok(s)
    }

    fn level_stats_report(&self) -> Result<String, EngineError> {
        Ok(format!(
            "Level stats of keyspace \"{KEYSPACE}\" (fjall reports L0 apart, not the other levels):\n\
             L0: {} tables; all levels: {} tables, {} on disk\n",
            self.ks.l0_table_count(),
            self.ks.table_count(),
            mb(self.ks.disk_space())
        ))
    }

    fn cursor(&self) -> Result<FjallCursor<'_>, EngineError> {
        Ok(FjallCursor {
            ks: &self.ks,
            iter: None,
            cur: None,
            reverse: false,
            err: None,
        })
    }

    fn close(self) -> Result<(), EngineError> {
        self.db.persist(PersistMode::SyncAll)?;
        drop(self.ks);
        drop(self.db);
        Ok(())
    }

    fn end_of_run_stats(&self, _totals: &RunTotals) -> Vec<String> {
        match self.stats_lines() {
            Ok(lines) => lines.into_iter().map(|l| format!("fjall stats: {l}")).collect(),
            Err(e) => vec![format!("fjall stats: unavailable ({e})")],
        }
    }
}

impl FjallEngine {
    fn stats_lines(&self) -> Result<Vec<String>, EngineError> {
        Ok(vec![
            format!(
                "{} tables ({} in L0), {} journal files, {} sealed memtables, {} flushes queued",
                self.ks.table_count(),
                self.ks.l0_table_count(),
                self.db.journal_count(),
                self.ks.sealed_memtable_count(),
                self.db.outstanding_flushes()
            ),
            format!(
                "{} compactions completed ({} running), {:.3} s compacting",
                self.db.compactions_completed(),
                self.db.active_compactions(),
                self.db.time_compacting().as_secs_f64()
            ),
            format!(
                "disk space {} (journals {}); cache {} of {}",
                mb(self.db.disk_space()?),
                mb(self.db.journal_disk_space()?),
                mb(self.db.cache_size()),
                mb(self.db.cache_capacity())
            ),
        ])
    }
}

/// A cursor over a fjall keyspace: fjall iterators run one way over a range, so each seek opens
/// one, and a change of direction reopens one just past the current key.
pub struct FjallCursor<'a> {
    ks: &'a Keyspace,
    iter: Option<::fjall::Iter>,
    cur: Option<(Slice, Slice)>,
    /// The iterator runs backwards (`next_back`).
    reverse: bool,
    err: Option<String>,
}

impl FjallCursor<'_> {
    fn start(&mut self, iter: ::fjall::Iter, reverse: bool) {
        self.iter = Some(iter);
        self.reverse = reverse;
        self.err = None;
        self.step();
    }

    fn step(&mut self) {
        let next = match &mut self.iter {
            Some(it) if self.reverse => it.next_back(),
            Some(it) => it.next(),
            None => None,
        };
        self.cur = match next.map(|g| g.into_inner()) {
            Some(Ok(kv)) => Some(kv),
            Some(Err(e)) => {
                self.err = Some(e.to_string());
                self.iter = None;
                None
            }
            None => None,
        };
    }
}

impl Cursor for FjallCursor<'_> {
    fn seek_to_first(&mut self) {
        let it = self.ks.iter();
        self.start(it, false);
    }

    fn seek_to_last(&mut self) {
        let it = self.ks.iter();
        self.start(it, true);
    }

    fn seek(&mut self, target: &[u8]) {
        let it = self.ks.range::<&[u8], _>(target..);
        self.start(it, false);
    }

    fn next(&mut self) {
        if self.reverse {
            let Some((k, _)) = self.cur.take() else { return };
            let it = self.ks.range::<&[u8], _>((Bound::Excluded(&*k), Bound::Unbounded));
            self.start(it, false);
        } else {
            self.step();
        }
    }

    fn prev(&mut self) {
        if self.reverse {
            self.step();
        } else {
            let Some((k, _)) = self.cur.take() else { return };
            let it = self.ks.range::<&[u8], _>((Bound::Unbounded, Bound::Excluded(&*k)));
            self.start(it, true);
        }
    }

    #[inline]
    fn valid(&self) -> bool {
        self.cur.is_some()
    }

    #[inline]
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |(k, _)| k)
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |(_, v)| v)
    }

    fn status(&self) -> Result<(), EngineError> {
        match &self.err {
            Some(e) => Err(e.clone().into()),
            None => Ok(()),
        }
    }
}
