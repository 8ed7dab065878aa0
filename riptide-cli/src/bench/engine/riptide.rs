//! The Riptide adapter: the engine of this repository, driven exactly as `riptide bench` always
//! did (one `Db`, its default table, `Db::write` / `Db::write_async`, a fresh raw iterator per
//! seek or scan), with db_bench's flags mapped onto its options in [`Config::from_flags`]:
//! `--cache_size` = `block_cache_size`, `--row_cache_size`, `--bloom_bits` =
//! `bloom_bits_per_key`, `--block_size`, `--compression_type` (none or lz4),
//! `--max_background_flushes` = `max_flushes`, `--max_background_compactions` =
//! `max_compactions`, and the `--level0_*` triggers (counted in L0 layers: each flush adds one,
//! as each RocksDB flush adds one L0 file; `--level0_file_num_compaction_trigger` is the layer
//! count that starts an intra-L0 merge, L0 -> L1 follows at `level0_extents_trigger` extents).

use super::{
    bytes, durability_options, hit_ratio, mb, mb_per_sec, BenchEngine, Cursor, Description, EngineError, RunTotals,
    SnapshotReader, WriteStopWatch,
};
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
use crate::bench::profile::Profile;
use ::riptide::{CacheStats, Db, DbIterator, DbStats, ReadOptions, Table, WriteBatch, WriteHandle, WriteOptions};
use std::fmt::Write as _;

/// Bytes of one extent slot in Riptide's data files.
const SLOT_BYTES: u64 = 2 << 20;

/// An open Riptide database and its default table.
pub struct RiptideEngine {
    db: Db,
    table: Table,
    wopts: WriteOptions,
    ropts: ReadOptions,
    /// What the options let the engine hold in memory for the default table: memtables up to
    /// the immutable stop trigger (active + immutables) plus the block and row caches.
    memory_budget: u64,
}

impl RiptideEngine {
    /// The open database (for `xbench`'s transactions).
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// The default table, which every benchmark uses.
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }

    /// The write options of `--sync` / `--disable_wal`.
    pub(crate) fn write_options(&self) -> &WriteOptions {
        &self.wopts
    }

    /// Every table of the database (the bench writes only the default one).
    fn tables(&self) -> Result<Vec<Table>, EngineError> {
        self.db
            .tables()
            .iter()
            .map(|name| self.db.table(name).map_err(EngineError::from))
            .collect()
    }

    /// The statistics, one line each (without a prefix).
    fn stats_lines(&self, totals: &RunTotals) -> Vec<String> {
        let s = self.db.stats();
        let rate = mb_per_sec;
        let written = s.flush_bytes + s.compaction_bytes_written;
        let mut lines = vec![
            format!(
                "flushes: {} ({} extents, {} written in {:.3} s, {}), {} failed",
                s.flushes,
                s.flush_extents,
                mb(s.flush_bytes),
                s.flush_micros as f64 / 1e6,
                rate(s.flush_bytes, s.flush_micros),
                s.flush_errors
            ),
            format!(
                "compactions: {} ({} read, {} written in {:.3} s, {}), {} failed; {} extents freed",
                s.compactions,
                mb(s.compaction_bytes_read),
                mb(s.compaction_bytes_written),
                s.compaction_micros as f64 / 1e6,
                rate(
                    s.compaction_bytes_read + s.compaction_bytes_written,
                    s.compaction_micros
                ),
                s.compaction_errors,
                s.extents_freed
            ),
            compaction_levels_line(&s),
            if totals.user_bytes_written > 0 {
                format!(
                    "write amplification: {:.2} ({} flushed + compacted / {} of user keys and values put since open; \
                     memtables not yet flushed are not counted)",
                    written as f64 / totals.user_bytes_written as f64,
                    mb(written),
                    mb(totals.user_bytes_written)
                )
            } else {
                format!(
                    "write amplification: - (no puts since open; {} flushed + compacted)",
                    mb(written)
                )
            },
            format!(
                "memtables: {} allocated (active and immutable, not yet in extents)",
                mb(self.db.memtable_usage() as u64)
            ),
            format!(
                "memory budget: {} (write_buffer_size x (immutable_stop_trigger + 1) + block cache + row cache, \
                 one table); compare with the peak RSS below",
                mb(self.memory_budget)
            ),
            cache_line("block cache", &s.caches.block_cache, "bytes"),
            format!(
                "partial block reads: {} (point lookups that missed the block cache and read only a block's tail and one restart region)",
                s.caches.partial_block_reads
            ),
            format!(
                "swizzled block hits: {} (cached blocks read through their extent's reference, without a block cache lookup)",
                s.caches.swizzled_block_hits
            ),
            cache_line("row cache", &s.caches.row_cache, "bytes"),
            cache_line("table cache", &s.caches.table_cache, "open extents"),
            format!(
                "extent space: {} data files, {} slots in use ({}), {} free slots ({} keeping their disk blocks for reuse); {} given back to the file system by cutting files, {} free slots' blocks by punching holes",
                s.space_files,
                s.space_used_slots,
                mb(s.space_used_slots * SLOT_BYTES),
                s.space_free_slots,
                s.space_unpunched_slots,
                mb(s.space_released_bytes),
                s.space_punched_slots
            ),
            match (s.space_allocated_bytes, s.space_amplification()) {
                (Some(on_disk), Some(amp)) => format!(
                    "space amplification: {amp:.3} ({} of data files on disk over {} of live extents)",
                    mb(on_disk),
                    mb(s.live_extent_bytes)
                ),
                _ => format!("space amplification: unknown ({} of live extents)", mb(s.live_extent_bytes)),
            },
            format!(
                "redo and metadata: {} redo segments deleted, {} metadata checkpoints",
                s.redo_segments_deleted, s.checkpoints
            ),
            format!(
                "tiers: local {} of extents ({} hot); object {} extents, {} ({} hot)",
                mb(s.live_extent_bytes),
                mb(s.hot_local_bytes),
                s.object_extents,
                mb(s.object_extent_bytes),
                mb(s.hot_object_bytes)
            ),
        ];
        if let Some(t) = &s.object_tier {
            lines.push(format!(
                "object tier {}: {} objects written ({}), {} ranged and {} whole reads ({}), {} read ahead, \
                 {} deleted, {} waiting for deletion, {} orphans found, {} retries, {} failed; \
                 extent cache {} hits, {} misses, {} extents ({} of {})",
                t.location,
                t.objects_written,
                mb(t.bytes_written),
                t.range_reads,
                t.whole_reads,
                mb(t.bytes_read),
                t.prefetches,
                t.objects_deleted,
                t.pending_deletes,
                t.orphans_found,
                t.retries,
                t.errors,
                t.cache_hits,
                t.cache_misses,
                t.cache_extents,
                mb(t.cache_bytes),
                mb(t.cache_capacity)
            ));
        }
        if let Some(e) = self.db.background_error() {
            lines.push(format!("background error: {e}"));
        }
        lines
    }

    fn background_bytes(s: &DbStats) -> u64 {
        s.flush_bytes + s.compaction_bytes_written
    }
}

/// Compactions per output level (L0: intra-L0, L1: minor, L2: major and rewrites) with data
/// reuse.
fn compaction_levels_line(s: &DbStats) -> String {
    let per_level: Vec<String> = s
        .levels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "L{i} {} ({} read, {} written, {:.0}% of input extents and {:.0}% of blocks reused)",
                l.compactions,
                mb(l.bytes_read),
                mb(l.bytes_written),
                100.0 * l.extent_reuse_ratio(),
                100.0 * l.block_reuse_ratio()
            )
        })
        .collect();
    format!("compactions into {}", per_level.join(", "))
}

/// One cache's figures: hit ratio, lookups, usage, churn.
fn cache_line(name: &str, c: &CacheStats, unit: &str) -> String {
    if c.capacity == 0 {
        return format!("{name}: off");
    }
    format!(
        "{name}: hit ratio {} ({} hits, {} misses), {} of {} {unit} in use, {} entries, {} inserts, {} evictions",
        hit_ratio(c.hits, c.misses),
        c.hits,
        c.misses,
        c.usage,
        c.capacity,
        c.entries,
        c.inserts,
        c.evictions
    )
}

impl BenchEngine for RiptideEngine {
    type Batch = WriteBatch;
    type Pending = WriteHandle;
    type Cursor<'a> = DbIterator;

    fn check(cfg: &Config) -> Result<(), BenchError> {
        if cfg.max_write_buffer_number.is_some() {
            return Err(BenchError::Usage(
                "--max_write_buffer_number: a RocksDB option; Riptide keeps 1 active + up to immutable_stop_trigger \
                 (16) immutable memtables per table while background flushes write them to L0"
                    .into(),
            ));
        }
        Ok(())
    }

    fn open(cfg: &Config) -> Result<Self, BenchError> {
        let db = Db::open(&cfg.db, cfg.options.clone())
            .map_err(|e| BenchError::engine(format!("opening the database in {}", cfg.db.display()), e))?;
        let table = db.default_table();
        let o = &cfg.options;
        let memory_budget =
            (o.write_buffer_size * (o.immutable_stop_trigger + 1) + o.block_cache_size + o.row_cache_size) as u64;
        Ok(RiptideEngine {
            memory_budget,
            db,
            table,
            wopts: WriteOptions {
                sync: cfg.sync,
                disable_wal: cfg.disable_wal,
                no_slowdown: false,
                replication_fence: None,
            },
            ropts: ReadOptions::default(),
        })
    }

    fn describe(&self, cfg: &Config) -> Description {
        let o = &cfg.options;
        let mut options = vec![
            (
                "block_size",
                format!(
                    "{} (data blocks of 2 MiB extents, before compression)",
                    bytes(o.block_size as u64)
                ),
            ),
            ("block_restart_interval", o.block_restart_interval.to_string()),
            (
                "bloom_bits_per_key",
                if o.bloom_bits_per_key > 0 {
                    format!(
                        "{} (one filter per data block, over its user keys)",
                        o.bloom_bits_per_key
                    )
                } else {
                    "0 (no filter)".to_string()
                },
            ),
            (
                "compression",
                if o.compression_per_level
                    .iter()
                    .all(|c| *c == ::riptide::Compression::None)
                {
                    "none".to_string()
                } else {
                    let names: Vec<String> = o.compression_per_level.iter().map(|c| c.name()).collect();
                    format!(
                        "{} in L0, L1, L2 (data blocks; a block is kept compressed only if that saves 12.5%)",
                        names.join(", ")
                    )
                },
            ),
            (
                "block_cache_size",
                if o.block_cache_size > 0 {
                    format!(
                        "{} (decoded data blocks, shared by all tables)",
                        bytes(o.block_cache_size as u64)
                    )
                } else {
                    "0 (no block cache)".to_string()
                },
            ),
            (
                "row_cache_size",
                if o.row_cache_size > 0 {
                    format!(
                        "{} (latest versions of rows read from extents)",
                        bytes(o.row_cache_size as u64)
                    )
                } else {
                    "0 (no row cache)".to_string()
                },
            ),
            (
                "table_cache_size",
                format!("{} open extents (index and filter in memory)", o.table_cache_size),
            ),
            ("write_buffer_size", bytes(o.write_buffer_size as u64)),
            (
                "max_memtables",
                format!(
                    "1 active + up to {} immutable per table, flushed to L0 extents in the background (writes slow \
                     down at {} immutable memtables and stop at {} until flushes catch up)",
                    o.immutable_stop_trigger, o.immutable_slowdown_trigger, o.immutable_stop_trigger
                ),
            ),
            (
                "compaction",
                format!(
                    "levels L0/L1/L2 of 2 MiB extents: intra-L0 merge at {} L0 layers, L0 -> L1 at {} L0 extents, \
                     L1 -> L2 at {} L1 extents{}; data reuse {}; writes slow down at {} L0 layers or {} pending and \
                     stop at {} L0 layers or {} pending",
                    o.level0_layer_trigger,
                    o.level0_extents_trigger,
                    o.level1_extents_trigger,
                    if o.level1_dynamic_trigger {
                        " or sqrt(2 x L0 trigger x L2 extents) if more"
                    } else {
                        ""
                    },
                    if o.compaction_reuse { "on" } else { "off" },
                    o.level0_slowdown_layers,
                    bytes(o.pending_compaction_slowdown_bytes),
                    o.level0_stop_layers,
                    bytes(o.pending_compaction_stop_bytes)
                ),
            ),
        ];
        options.extend(durability_options(
            cfg,
            &format!("redo log, {} segments, CRC32C", bytes(o.redo_segment_size)),
            "fdatasync of the redo log (group commit)",
        ));
        options.push((
            "write_path",
            format!(
                "X-Engine pipeline: write_queues={} max_group_size={} max_group_bytes={} async_commit_depth={}",
                o.write_queues, o.max_group_size, o.max_group_bytes, cfg.async_commit_depth
            ),
        ));
        options.push((
            "background_threads",
            format!(
                "max_flushes={} flush threads; max_compactions={} compaction jobs at a time, each run by \
                 compaction_units={} unit threads",
                o.max_flushes, o.max_compactions, o.compaction_units
            ),
        ));
        options.push((
            "statistics",
            "always counted (Db::stats: flushes, compactions, caches; --statistics changes nothing)".to_string(),
        ));
        options.push((
            "flush_on_close",
            if o.flush_on_close {
                "1 (close flushes every memtable to L0 and deletes the redo log)".to_string()
            } else {
                "0".to_string()
            },
        ));
        Description {
            version: format!("riptide {} (this repository)", env!("CARGO_PKG_VERSION")),
            options,
        }
    }

    fn new_batch(&self, _ops: usize) -> WriteBatch {
        WriteBatch::new()
    }

    #[inline]
    fn put(&self, batch: &mut WriteBatch, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        Ok(batch.put(&self.table, key, value)?)
    }

    #[inline]
    fn delete(&self, batch: &mut WriteBatch, key: &[u8]) -> Result<(), EngineError> {
        Ok(batch.delete(&self.table, key)?)
    }

    #[inline]
    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        Ok(self.db.write(batch, &self.wopts)?)
    }

    #[inline]
    fn write_async(&self, batch: WriteBatch) -> Result<WriteHandle, EngineError> {
        Ok(self.db.write_async(batch, &self.wopts))
    }

    #[inline]
    fn wait(&self, pending: WriteHandle) -> Result<(), EngineError> {
        Ok(pending.wait()?)
    }

    /// The value is handed over in place (no copy), like RocksDB's `get_pinned`.
    #[inline]
    fn get<R>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, EngineError> {
        Ok(self.table.get_with_opt(key, &self.ropts, read)?)
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<usize>>, EngineError> {
        let pairs: Vec<(&Table, &[u8])> = keys.iter().map(|k| (&self.table, *k)).collect();
        self.db
            .multi_get(&self.ropts, &pairs)
            .into_iter()
            .map(|r| r.map(|v| v.map(|v| v.len())).map_err(EngineError::from))
            .collect()
    }

    fn cursor(&self) -> Result<DbIterator, EngineError> {
        Ok(self.table.raw_iter(&self.ropts)?)
    }

    fn flush(&self) -> Result<Option<u64>, EngineError> {
        let before = self.db.stats().flush_bytes;
        self.db.flush()?;
        Ok(Some(self.db.stats().flush_bytes.saturating_sub(before)))
    }

    fn compact(&self) -> Result<Option<u64>, EngineError> {
        let before = Self::background_bytes(&self.db.stats());
        for t in self.tables()? {
            t.compact()?;
        }
        Ok(Some(Self::background_bytes(&self.db.stats()).saturating_sub(before)))
    }

    fn compact_merge(&self) -> Result<(Option<u64>, Option<String>), EngineError> {
        let before = self.db.stats();
        for t in self.tables()? {
            t.flush()?;
            t.compact_l0()?;
            t.compact_l1()?;
        }
        let after = self.db.stats();
        let written = Self::background_bytes(&after).saturating_sub(Self::background_bytes(&before));
        let per_level: Vec<String> = after
            .levels
            .iter()
            .zip(&before.levels)
            .enumerate()
            .filter(|(_, (a, b))| a.compactions > b.compactions)
            .map(|(i, (a, b))| {
                format!(
                    "L{i}: {} of {} input extents re-linked, {} blocks copied ({} decoded), {} merged, {} read, \
                     {} written, {} tasks ({} closed ranges split)",
                    a.extents_reused - b.extents_reused,
                    a.input_extents - b.input_extents,
                    a.blocks_reused - b.blocks_reused,
                    a.blocks_reused_decoded - b.blocks_reused_decoded,
                    a.blocks_merged - b.blocks_merged,
                    mb(a.bytes_read - b.bytes_read),
                    mb(a.bytes_written - b.bytes_written),
                    a.tasks - b.tasks,
                    a.ranges_split - b.ranges_split
                )
            })
            .collect();
        Ok((Some(written), (!per_level.is_empty()).then(|| per_level.join("; "))))
    }

    fn wait_for_background_work(&self) -> Result<(), EngineError> {
        Ok(self.db.wait_for_background_work()?)
    }

    fn stats_report(&self, totals: &RunTotals) -> Result<String, EngineError> {
        let mut s = String::from("** Riptide stats (since the database was opened) **\n");
        for line in self.stats_lines(totals) {
            let _ = writeln!(s, "  {line}");
        }
        let w = self.db.write_stats();
        let _ = writeln!(
            s,
            "  write path: {} writes ({} ops) in {} commit groups ({:.2} writes/group), {} log writes, {} fsyncs, {} \
             logged, stall {:.3} s",
            w.writes,
            w.ops,
            w.groups,
            w.writes_per_group(),
            w.log_writes,
            w.fsyncs,
            mb(w.bytes_logged),
            w.stall_micros as f64 / 1e6
        );
        Ok(s)
    }

    fn level_stats_report(&self) -> Result<String, EngineError> {
        let mut s = String::new();
        for t in self.tables()? {
            let info = t.level_info();
            let _ = writeln!(s, "Level stats of table \"{}\":", t.name());
            let _ = writeln!(s, "Level  Layers  Extents  Size(MB)      Entries");
            let _ = writeln!(s, "---------------------------------------------");
            for level in 0..3 {
                let layers = if level == 0 {
                    info.l0_layers.len().to_string()
                } else {
                    "-".to_string()
                };
                let _ = writeln!(
                    s,
                    "L{level}     {layers:>6}  {:>7}  {:>8.1}  {:>11}",
                    info.extents[level],
                    info.bytes[level] as f64 / 1_048_576.0,
                    info.entries[level]
                );
            }
            let _ = writeln!(
                s,
                "Sum         -  {:>7}  {:>8.1}  {:>11}",
                info.extents.iter().sum::<usize>(),
                info.bytes.iter().sum::<u64>() as f64 / 1_048_576.0,
                info.entries.iter().sum::<u64>()
            );
            let _ = writeln!(
                s,
                "L0 layers (newest first, extents each): {:?}; immutable memtables: {}; flushed LSN: {}",
                info.l0_layers, info.immutable_memtables, info.flushed_lsn
            );
            let dict = match info.zstd_dictionary {
                riptide::DictionaryStatus::None => "none".to_string(),
                riptide::DictionaryStatus::Declined {
                    plain_bytes,
                    dict_bytes,
                } => format!("declined (judged samples: {plain_bytes} bytes plain, {dict_bytes} with it)"),
                riptide::DictionaryStatus::InUse { id, bytes } => format!("in use, {bytes} bytes, id {id:016x}"),
            };
            let _ = writeln!(s, "zstd dictionary: {dict}");
        }
        Ok(s)
    }

    fn close(self) -> Result<(), EngineError> {
        Ok(self.db.close()?)
    }

    fn profile(&self) -> Option<Profile> {
        Some(Profile::of(&self.db))
    }

    fn end_of_run_stats(&self, totals: &RunTotals) -> Vec<String> {
        self.stats_lines(totals)
            .into_iter()
            .map(|l| format!("Riptide stats: {l}"))
            .collect()
    }

    fn write_stop_watch(&self) -> Option<&dyn WriteStopWatch> {
        Some(self)
    }

    /// The deepest L0 of any table, immutable memtables, memtable bytes, extents per level and
    /// extent space in use.
    fn interval_status(&self) -> Option<String> {
        let tables = self.tables().ok()?;
        let infos: Vec<_> = tables.iter().map(|t| t.level_info()).collect();
        let l0 = infos.iter().map(|i| i.l0_layers.len()).max().unwrap_or(0);
        let imm: usize = infos.iter().map(|i| i.immutable_memtables).sum();
        let mut extents = [0usize; 3];
        for i in &infos {
            for (n, e) in extents.iter_mut().zip(i.extents) {
                *n += e;
            }
        }
        let s = self.db.stats();
        Some(format!(
            "L0 layers {l0}, immutable memtables {imm}, memtables {:.1} MB, extents L0/L1/L2 {}/{}/{}, extent space {:.1} MB",
            self.db.memtable_usage() as f64 / 1e6,
            extents[0],
            extents[1],
            extents[2],
            s.space_used_slots as f64 * 2.0 * 1024.0 * 1024.0 / 1e6
        ))
    }

    /// `Db::snapshot`, read through `Table::get_opt` with `ReadOptions { snapshot }`.
    fn snapshot_reader(&self) -> Option<Box<dyn SnapshotReader + '_>> {
        Some(Box::new(RiptideSnapshot {
            table: &self.table,
            ropts: ReadOptions {
                snapshot: Some(self.db.snapshot()),
                ..ReadOptions::default()
            },
        }))
    }
}

/// A snapshot of the default table (held until dropped).
struct RiptideSnapshot<'a> {
    table: &'a Table,
    ropts: ReadOptions,
}

impl SnapshotReader for RiptideSnapshot<'_> {
    fn get_len(&self, key: &[u8]) -> Result<Option<usize>, EngineError> {
        Ok(self.table.get_with_opt(key, &self.ropts, <[u8]>::len)?)
    }
}

impl WriteStopWatch for RiptideEngine {
    fn committed_writes(&self) -> u64 {
        self.db.write_stats().writes
    }

    /// Writers wait while memtables or L0 are full, until flushes and compactions catch up; that
    /// only lasts forever while background work keeps failing. The runner asks only after
    /// writes made no progress for the runner's `STOP_GRACE`.
    fn stopped_for_good(&self, _cfg: &Config) -> Option<String> {
        self.db.background_error().map(|e| {
            format!(
                "writes stopped: background work keeps failing ({e}), so full memtables (or L0) cannot drain and \
                 the writers would wait forever; the database was closed"
            )
        })
    }

    fn abort_writers(&self) {
        // Stalled writers re-check `closed` every 50 ms and then fail with `Closed`.
        let _ = self.db.clone().close();
    }
}

impl Cursor for DbIterator {
    #[inline]
    fn seek_to_first(&mut self) {
        DbIterator::seek_to_first(self)
    }
    #[inline]
    fn seek_to_last(&mut self) {
        DbIterator::seek_to_last(self)
    }
    #[inline]
    fn seek(&mut self, target: &[u8]) {
        DbIterator::seek(self, target)
    }
    #[inline]
    fn next(&mut self) {
        DbIterator::next(self)
    }
    #[inline]
    fn prev(&mut self) {
        DbIterator::prev(self)
    }
    #[inline]
    fn valid(&self) -> bool {
        DbIterator::valid(self)
    }
    #[inline]
    fn key(&self) -> &[u8] {
        DbIterator::key(self)
    }
    #[inline]
    fn value(&self) -> &[u8] {
        DbIterator::value(self)
    }
    fn status(&self) -> Result<(), EngineError> {
        Ok(DbIterator::status(self)?)
    }
}
