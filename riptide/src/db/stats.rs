//! The statistics of one database instance: the counters background work adds to, and the
//! public snapshots of them ([`DbStats`], [`LevelStats`], [`LevelInfo`]).
//!
//! Invariants: counters only grow (relaxed atomics, read without a lock, so a [`DbStats`] is
//! not one atomic cut across counters); compaction statistics go to the compaction's output
//! level.

use super::{Db, Table};
use crate::compaction::{CompactionKind, JobStats};
use crate::extent::dictionary::DictChoice;
use crate::extent_store::CacheCounters;
use crate::key::Lsn;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of background work.
#[derive(Debug, Default)]
pub(super) struct BackgroundCounters {
    pub(super) flushes: AtomicU64,
    pub(super) flush_extents: AtomicU64,
    pub(super) flush_bytes: AtomicU64,
    pub(super) flush_micros: AtomicU64,
    pub(super) flush_errors: AtomicU64,
    pub(super) redo_segments_deleted: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) compactions: AtomicU64,
    pub(super) compaction_bytes_read: AtomicU64,
    pub(super) compaction_bytes_written: AtomicU64,
    pub(super) compaction_micros: AtomicU64,
    pub(super) compaction_errors: AtomicU64,
    pub(super) space_released: AtomicU64,
    pub(super) space_shrink_errors: AtomicU64,
    pub(super) space_punched_slots: AtomicU64,
}

/// Compaction counters of one output level.
#[derive(Debug, Default)]
pub(super) struct LevelCounters {
    compactions: AtomicU64,
    tasks: AtomicU64,
    tasks_retried: AtomicU64,
    ranges_split: AtomicU64,
    micros: AtomicU64,
    input_extents: AtomicU64,
    extents_reused: AtomicU64,
    blocks_reused: AtomicU64,
    blocks_reused_decoded: AtomicU64,
    blocks_recompressed: AtomicU64,
    blocks_merged: AtomicU64,
    lsns_zeroed: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl LevelCounters {
    /// Adds one compaction into this level.
    pub(super) fn add(&self, s: &JobStats, micros: u64) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.tasks.fetch_add(s.tasks, Ordering::Relaxed);
        self.tasks_retried.fetch_add(s.tasks_retried, Ordering::Relaxed);
        self.ranges_split.fetch_add(s.ranges_split, Ordering::Relaxed);
        self.micros.fetch_add(micros, Ordering::Relaxed);
        self.input_extents.fetch_add(s.input_extents, Ordering::Relaxed);
        self.extents_reused.fetch_add(s.extents_reused, Ordering::Relaxed);
        self.blocks_reused.fetch_add(s.blocks_reused, Ordering::Relaxed);
        self.blocks_reused_decoded
            .fetch_add(s.blocks_reused_decoded, Ordering::Relaxed);
        self.blocks_recompressed
            .fetch_add(s.blocks_recompressed, Ordering::Relaxed);
        self.blocks_merged.fetch_add(s.blocks_merged, Ordering::Relaxed);
        self.lsns_zeroed.fetch_add(s.lsns_zeroed, Ordering::Relaxed);
        self.bytes_read.fetch_add(s.bytes_read, Ordering::Relaxed);
        self.bytes_written.fetch_add(s.bytes_written, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LevelStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LevelStats {
            compactions: l(&self.compactions),
            tasks: l(&self.tasks),
            tasks_retried: l(&self.tasks_retried),
            ranges_split: l(&self.ranges_split),
            micros: l(&self.micros),
            input_extents: l(&self.input_extents),
            extents_reused: l(&self.extents_reused),
            blocks_reused: l(&self.blocks_reused),
            blocks_reused_decoded: l(&self.blocks_reused_decoded),
            blocks_recompressed: l(&self.blocks_recompressed),
            blocks_merged: l(&self.blocks_merged),
            lsns_zeroed: l(&self.lsns_zeroed),
            bytes_read: l(&self.bytes_read),
            bytes_written: l(&self.bytes_written),
        }
    }
}

/// Compaction statistics of one output level (like RocksDB's compaction stats), summed over
/// all sub-tables since open ([`DbStats::levels`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Compactions that wrote into this level.
    pub compactions: u64,
    /// Tasks those compactions were split into (run by compaction units).
    pub tasks: u64,
    /// Tasks a unit failed or rejected that the job thread ran again (CPU fallback).
    pub tasks_retried: u64,
    /// Closed ranges larger than a task that were cut between block groups into several
    /// tasks, so units could share them.
    pub ranges_split: u64,
    /// Time they took, in microseconds.
    pub micros: u64,
    /// Input extents they considered.
    pub input_extents: u64,
    /// Input extents re-linked into this level without being read or written.
    pub extents_reused: u64,
    /// Data blocks copied verbatim (not re-encoded).
    pub blocks_reused: u64,
    /// Of those, blocks decoded once to compute their index entry and filter lines: blocks of
    /// extents written before format 3 (or with other bloom bits per key). 0 once a database's
    /// extents are all format 3; the others are copied without being decoded.
    pub blocks_reused_decoded: u64,
    /// Of `blocks_reused`, blocks copied from an extent written with another codec than this
    /// level's ([`crate::Options::compression_per_level`]): decompressed and compressed again
    /// with this level's codec (their entries are not re-encoded). An extent of another codec
    /// is never re-linked into a level; its blocks are copied this way instead.
    pub blocks_recompressed: u64,
    /// Data blocks decoded and merged.
    pub blocks_merged: u64,
    /// Rows written into L2 with LSN 0 (a key's only version, a Put older than every
    /// snapshot; RocksDB's bottommost sequence-number zeroing): every reader sees the same
    /// value, and the rows' tags compress to almost nothing.
    pub lsns_zeroed: u64,
    /// Bytes of input blocks read.
    pub bytes_read: u64,
    /// Bytes of extents written.
    pub bytes_written: u64,
}

impl DbStats {
    /// Space amplification of the extent space: bytes of disk the data files occupy over the
    /// valid bytes of live extents (1.0 = nothing but live data). `None` where the file system
    /// cannot tell allocated bytes, or with no extent.
    pub fn space_amplification(&self) -> Option<f64> {
        let on_disk = self.space_allocated_bytes?;
        (self.live_extent_bytes > 0).then(|| on_disk as f64 / self.live_extent_bytes as f64)
    }
}

impl LevelStats {
    /// Share of input extents re-linked (0 when there were none).
    pub fn extent_reuse_ratio(&self) -> f64 {
        if self.input_extents == 0 {
            0.0
        } else {
            self.extents_reused as f64 / self.input_extents as f64
        }
    }

    /// Share of the blocks in overlapping extents that were copied rather than merged.
    pub fn block_reuse_ratio(&self) -> f64 {
        let total = self.blocks_reused + self.blocks_merged;
        if total == 0 {
            0.0
        } else {
            self.blocks_reused as f64 / total as f64
        }
    }
}

/// Statistics of flushes, extents and caches ([`Db::stats`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DbStats {
    /// Memtables flushed to L0 since open.
    pub flushes: u64,
    /// Extents written by flushes.
    pub flush_extents: u64,
    /// Bytes written by flushes.
    pub flush_bytes: u64,
    /// Time spent in flushes, in microseconds.
    pub flush_micros: u64,
    /// Flushes that failed (and were retried).
    pub flush_errors: u64,
    /// Redo segments deleted because every table had flushed their contents.
    pub redo_segments_deleted: u64,
    /// Metadata checkpoints written.
    pub checkpoints: u64,
    /// Compactions run since open.
    pub compactions: u64,
    /// Bytes of input extents read by compactions.
    pub compaction_bytes_read: u64,
    /// Bytes of extents written by compactions.
    pub compaction_bytes_written: u64,
    /// Time spent in compactions, in microseconds.
    pub compaction_micros: u64,
    /// Compactions that failed.
    pub compaction_errors: u64,
    /// Bytes of data files given back to the file system (free tails cut, empty files deleted).
    pub space_released_bytes: u64,
    /// Extents freed (unreachable from any metadata snapshot).
    pub extents_freed: u64,
    /// Data files, slots in use and free slots of the extent space.
    pub space_files: u64,
    /// Slots (2 MiB) holding extents.
    pub space_used_slots: u64,
    /// Free slots inside data files.
    pub space_free_slots: u64,
    /// Slots freed while read-only views of this database were open, kept for them until
    /// they close (`Db::open_read_only`): neither used nor free.
    pub space_held_slots: u64,
    /// Free slots that still hold their disk blocks (at most about
    /// [`crate::Options::free_slots_kept`], and one per
    /// [`crate::Options::used_slots_per_kept_slot`] used slots, once the background thread has
    /// caught up).
    pub space_unpunched_slots: u64,
    /// Bytes of disk the data files occupy (allocated blocks); `None` where the file system
    /// cannot tell.
    pub space_allocated_bytes: Option<u64>,
    /// Valid bytes of the local extents the current metadata names (every table, every level).
    pub live_extent_bytes: u64,
    /// Extents in the object tier the current metadata names.
    pub object_extents: u64,
    /// Their valid bytes.
    pub object_extent_bytes: u64,
    /// Valid bytes of hot local extents (temperature at least
    /// `HOT_TEMPERATURE`: read often since the last major compactions); the rest of
    /// `live_extent_bytes` is cold.
    pub hot_local_bytes: u64,
    /// Valid bytes of hot object-tier extents; the rest of `object_extent_bytes` is cold.
    pub hot_object_bytes: u64,
    /// The object tier's counters, if the database has an object store.
    pub object_tier: Option<crate::tier::ObjectTierStats>,
    /// Free slots whose disk blocks were given back to the file system (hole punching).
    pub space_punched_slots: u64,
    /// Compaction statistics per output level (L0: intra-L0, L1: minor, L2: major, self-major
    /// and manual rewrites).
    pub levels: [LevelStats; 3],
    /// Cache counters.
    pub caches: CacheCounters,
}

/// The shape of one sub-table's levels ([`Table::level_info`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelInfo {
    /// L0 layers, newest first: extents per layer.
    pub l0_layers: Vec<usize>,
    /// Extents per level (L0, L1, L2).
    pub extents: [usize; 3],
    /// Valid bytes per level.
    pub bytes: [u64; 3],
    /// Entries (versions) per level.
    pub entries: [u64; 3],
    /// Immutable memtables waiting for a flush.
    pub immutable_memtables: usize,
    /// The table's recovery point: writes at or below this LSN are in extents.
    pub flushed_lsn: Lsn,
    /// The zstd dictionary its compactions use ([`crate::Options::zstd_dictionary_bytes`]).
    pub zstd_dictionary: DictionaryStatus,
}

/// Where a table's zstd dictionary stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DictionaryStatus {
    /// None: not configured, or no compaction into a zstd level has decided yet.
    #[default]
    None,
    /// Trained and judged not worth its copy per extent: the judged sample blocks took
    /// `plain_bytes` stored without it and `dict_bytes` with it (both 0: zstd could not train
    /// one on the samples).
    Declined {
        /// Stored bytes of the judged samples without a dictionary.
        plain_bytes: u64,
        /// Stored bytes of the judged samples with the dictionary.
        dict_bytes: u64,
    },
    /// In use by compactions into zstd levels.
    InUse {
        /// XXH3-64 of the dictionary (as `riptide inspect extent` shows for each extent).
        id: u64,
        /// Its size in bytes.
        bytes: usize,
    },
}

impl LevelCounters {
    /// The output level of a compaction of `kind` (L0: intra-L0; L1: minor, split; L2: the
    /// others).
    pub(super) fn output_level(kind: CompactionKind) -> usize {
        match kind {
            CompactionKind::IntraL0 => 0,
            CompactionKind::Minor | CompactionKind::MinorRange | CompactionKind::Split => 1,
            CompactionKind::Major
            | CompactionKind::MajorCold
            | CompactionKind::MajorSelf
            | CompactionKind::L2Rewrite
            | CompactionKind::MajorRange => 2,
        }
    }
}

/// Live extent bytes per tier.
#[derive(Default)]
struct TierBytes {
    local_bytes: u64,
    object_extents: u64,
    object_bytes: u64,
    hot_local_bytes: u64,
    hot_object_bytes: u64,
}

impl Db {
    /// Counters of flushes, the extent space and the caches.
    pub fn stats(&self) -> DbStats {
        let inner = &self.inner;
        let c = &inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let space = inner.store.space.stats();
        let mut tiers = TierBytes::default();
        for t in inner.all_tables() {
            for e in t.current().levels.all_extents() {
                let hot = e.temperature() >= crate::extent_store::HOT_TEMPERATURE;
                let size = e.meta.data_size;
                if e.id.is_object() {
                    tiers.object_extents += 1;
                    tiers.object_bytes += size;
                    tiers.hot_object_bytes += if hot { size } else { 0 };
                } else {
                    tiers.local_bytes += size;
                    tiers.hot_local_bytes += if hot { size } else { 0 };
                }
            }
        }
        DbStats {
            flushes: l(&c.flushes),
            flush_extents: l(&c.flush_extents),
            flush_bytes: l(&c.flush_bytes),
            flush_micros: l(&c.flush_micros),
            flush_errors: l(&c.flush_errors),
            redo_segments_deleted: l(&c.redo_segments_deleted),
            checkpoints: l(&c.checkpoints),
            compactions: l(&c.compactions),
            compaction_bytes_read: l(&c.compaction_bytes_read),
            compaction_bytes_written: l(&c.compaction_bytes_written),
            compaction_micros: l(&c.compaction_micros),
            compaction_errors: l(&c.compaction_errors),
            space_released_bytes: l(&c.space_released),
            extents_freed: l(&inner.store.freed),
            space_files: space.files as u64,
            space_used_slots: space.used_slots,
            space_free_slots: space.free_slots,
            space_held_slots: space.held_slots,
            space_unpunched_slots: space.unpunched_slots,
            space_allocated_bytes: inner.store.space.allocated_bytes(),
            live_extent_bytes: tiers.local_bytes,
            object_extents: tiers.object_extents,
            object_extent_bytes: tiers.object_bytes,
            hot_local_bytes: tiers.hot_local_bytes,
            hot_object_bytes: tiers.hot_object_bytes,
            object_tier: inner.store.objects.as_ref().map(|t| t.stats()),
            space_punched_slots: l(&c.space_punched_slots),
            levels: [
                inner.level_counters[0].snapshot(),
                inner.level_counters[1].snapshot(),
                inner.level_counters[2].snapshot(),
            ],
            caches: CacheCounters {
                block_cache: inner.store.blocks.stats(),
                table_cache: inner.store.readers.stats(),
                row_cache: inner.row_cache.stats(),
                partial_block_reads: inner.store.partial_block_reads.get(),
                swizzled_block_hits: inner.store.swizzled_block_hits.get(),
            },
        }
    }
}

impl Table {
    /// The shape of this table's levels.
    pub fn level_info(&self) -> LevelInfo {
        let view = self.inner.current();
        // One lock at a time: the change lock is taken by writers, the dictionary's by a
        // compaction that may be training one.
        let flushed_lsn = self.inner.change.lock().flushed_lsn;
        let mut info = LevelInfo {
            l0_layers: view.levels.l0.iter().map(|l| l.extents.len()).collect(),
            immutable_memtables: view.immutables.len(),
            flushed_lsn,
            zstd_dictionary: match &*self.inner.dictionary.lock() {
                DictChoice::Undecided => DictionaryStatus::None,
                DictChoice::Declined { plain, with_dict } => DictionaryStatus::Declined {
                    plain_bytes: *plain,
                    dict_bytes: *with_dict,
                },
                DictChoice::Use(d) => DictionaryStatus::InUse {
                    id: d.id(),
                    bytes: d.bytes().len(),
                },
            },
            ..Default::default()
        };
        for (i, layers) in [
            view.levels.l0.iter().collect::<Vec<_>>(),
            vec![&view.levels.sorted[0]],
            vec![&view.levels.sorted[1]],
        ]
        .iter()
        .enumerate()
        {
            for l in layers {
                info.extents[i] += l.extents.len();
                info.bytes[i] += l.bytes();
                info.entries[i] += l.extents.iter().map(|e| e.meta.entries).sum::<u64>();
            }
        }
        info
    }
}
