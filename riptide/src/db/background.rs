//! Background work of one instance: flushes, compaction scheduling, space reclamation and redo
//! retirement, and the narrow views ([`FlushContext`], [`CompactionContext`]) that the flush
//! and compaction modules get of the instance.
//!
//! Invariants:
//! - A memtable is sealed only at the pipeline's seal point ([`DbInner::seal_active`]), so
//!   every LSN allocated before the switch is at or below the seal.
//! - After every flush: the background error is cleared, stalled writers are woken, redo
//!   segments no table needs are deleted, and the table is queued for compaction.
//! - After every compaction: stalled writers are woken and free file tails are given back;
//!   holes beyond `free_slots_kept` are punched by a compaction worker, never by a user's
//!   thread.
//! - A failed flush or compaction sets the background error (and counts); the worker retries.

use super::stats::LevelCounters;
use super::DbInner;
use crate::compaction::picker::{flush_triggers_delete_compaction, pick, Shape, TaskKind, Triggers};
use crate::compaction::{compact, packable, purgeable, CompactionContext, CompactionKind, KeyRange, Units};
use crate::error::Result;
use crate::extent::ExtentOptions;
use crate::flush::{flush_oldest, FlushContext};
use crate::key::Lsn;
use crate::meta::edit::SlogEntry;
use crate::options::Compression;
use crate::subtable::TableInner;
use crate::tier::Tier;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl DbInner {
    /// Seals the table's active memtable (if it holds anything) at the pipeline's seal point
    /// and switches to a new one; the sealed memtable waits for a flush.
    pub(super) fn seal_active(&self, t: &Arc<TableInner>) {
        // Under the stage-1 lock no group is binding memtables, so every LSN allocated so far
        // is at or below the seal.
        self.pipeline.at_seal_point(|last| {
            let _g = t.change.lock();
            let view = t.current();
            if !view.active.is_empty() {
                t.switch_memtable(&view, last);
            }
        });
    }

    /// Seals the active memtable and flushes every immutable memtable, in this thread.
    pub(super) fn flush_table_now(&self, t: &Arc<TableInner>) -> Result<()> {
        self.check_open()?;
        self.check_writable()?;
        self.seal_active(t);
        self.flush_all_immutables(t)
    }

    /// Flushes the table's immutable memtables, oldest first, until none is left.
    pub(super) fn flush_all_immutables(&self, t: &Arc<TableInner>) -> Result<()> {
        loop {
            if t.is_dropped() {
                return Ok(());
            }
            let started = Instant::now();
            match flush_oldest(self, t) {
                Ok(None) => return Ok(()),
                Ok(Some(o)) => {
                    let c = &self.counters;
                    c.flushes.fetch_add(1, Ordering::Relaxed);
                    c.flush_extents.fetch_add(o.extents, Ordering::Relaxed);
                    c.flush_bytes.fetch_add(o.bytes, Ordering::Relaxed);
                    c.flush_micros
                        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    *self.bg_error.lock() = None;
                    self.stall.wake();
                    if flush_triggers_delete_compaction(o.entries, o.deletes) {
                        t.delete_triggered.store(true, Ordering::Release);
                    }
                    self.retire_redo()?;
                    self.workers.compactions.push(t.id);
                }
                Err(e) => {
                    self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
                    *self.bg_error.lock() = Some(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// The picker's view of a table.
    fn shape(&self, t: &TableInner) -> Shape {
        let view = t.current();
        Shape {
            l0_layers: view.levels.l0.iter().map(|l| l.extents.len()).collect(),
            n1: view.levels.sorted[0].extents.len(),
            n2: view.levels.sorted[1].extents.len(),
            l2_delete_heavy: {
                let oldest_snapshot = self.snapshots.gc_view(|| 0).1.first().copied();
                view.levels.sorted[1]
                    .extents
                    .iter()
                    .filter(|e| purgeable(&e.meta, oldest_snapshot))
                    .count()
            },
            l2_sparse: packable(&view.levels.sorted[1].extents).len(),
            delete_triggered: t.delete_triggered.load(Ordering::Acquire),
            l2_object: self.output_tier(t, crate::LEVELS - 1) == Tier::Object,
        }
    }

    /// Runs the compactions the picker asks for, best first, until none scores 1 or more.
    pub(super) fn compact_until_idle(&self, t: &Arc<TableInner>) -> Result<()> {
        let triggers = Triggers::from_options(&self.opts);
        // A bound on the loop: each job changes the shape; a job that finds nothing to do, or
        // leaves the shape unchanged, ends it.
        for _ in 0..64 {
            if t.is_dropped() || self.pipeline.is_closed() {
                return Ok(());
            }
            if self.futile_versions.lock().get(&t.id) == Some(&t.current().version) {
                return Ok(());
            }
            let shape = self.shape(t);
            let Some(task) = pick(&shape, &triggers) else {
                return Ok(());
            };
            let kind = match task {
                TaskKind::Delete => {
                    t.delete_triggered.store(false, Ordering::Release);
                    if shape.l0_layers.is_empty() {
                        CompactionKind::Major
                    } else {
                        CompactionKind::Minor
                    }
                }
                TaskKind::IntraL0 => CompactionKind::IntraL0,
                TaskKind::Minor => CompactionKind::Minor,
                TaskKind::Major => {
                    // X-Engine's split: first cut L1 extents whose rows skip whole L2
                    // extents, so the major below leaves those L2 extents untouched.
                    self.run_compaction(t, CompactionKind::Split)?;
                    if shape.l2_object {
                        CompactionKind::MajorCold
                    } else {
                        CompactionKind::Major
                    }
                }
                TaskKind::MajorSelf => CompactionKind::MajorSelf,
            };
            if !self.run_compaction(t, kind)? {
                return Ok(());
            }
            // A job that leaves the shape as it was would be picked again for the same
            // result: remember the version it left and end the round; the next flush or
            // compaction makes a new version and starts the next one.
            let after = self.shape(t);
            let mut futile = self.futile_versions.lock();
            if after == shape {
                futile.insert(t.id, t.current().version);
                return Ok(());
            }
            futile.remove(&t.id);
        }
        Ok(())
    }

    /// Runs one compaction over the whole table; false if there was nothing to do.
    pub(super) fn run_compaction(&self, t: &Arc<TableInner>, kind: CompactionKind) -> Result<bool> {
        self.run_compaction_in(t, kind, &KeyRange::default())
    }

    /// Runs one compaction over the user keys in `range`; false if there was nothing to do.
    pub(super) fn run_compaction_in(
        &self,
        t: &Arc<TableInner>,
        kind: CompactionKind,
        range: &KeyRange,
    ) -> Result<bool> {
        self.check_writable()?;
        let started = Instant::now();
        match compact(self, t, kind, range) {
            Ok(Some(o)) => {
                let micros = started.elapsed().as_micros() as u64;
                let c = &self.counters;
                c.compactions.fetch_add(1, Ordering::Relaxed);
                c.compaction_bytes_read.fetch_add(o.bytes_read, Ordering::Relaxed);
                c.compaction_bytes_written.fetch_add(o.bytes_written, Ordering::Relaxed);
                c.compaction_micros.fetch_add(micros, Ordering::Relaxed);
                self.level_counters[LevelCounters::output_level(kind)].add(&o, micros);
                self.stall.wake();
                self.reclaim_space();
                // Freed slots beyond the reserve get their holes punched by a worker, not by
                // this thread (which may be a user's, in a manual compaction).
                if self.store.space.unpunched_slots() > self.slots_to_keep() {
                    self.workers.compactions.push(t.id);
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.counters.compaction_errors.fetch_add(1, Ordering::Relaxed);
                *self.bg_error.lock() = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Free slots that keep their disk blocks: `Options::free_slots_kept` at most, and one per
    /// `Options::used_slots_per_kept_slot` slots of live extents (so a database's size on disk
    /// follows its data).
    pub(super) fn slots_to_keep(&self) -> u64 {
        self.store.space.slots_to_keep(
            u64::from(self.opts.free_slots_kept),
            u64::from(self.opts.used_slots_per_kept_slot),
        )
    }

    /// Gives the disk blocks of free slots beyond [`Self::slots_to_keep`] back to the file
    /// system. Compaction workers (and close) only: punching a few hundred holes takes tens of
    /// milliseconds, which must not delay a flush or a user's call.
    pub(super) fn punch_free_slots(&self) {
        self.punch_free_slots_keeping(self.slots_to_keep());
    }

    /// Gives the disk blocks of free slots beyond `keep` back to the file system.
    pub(super) fn punch_free_slots_keeping(&self, keep: u64) {
        // Slots held for read-only views that have closed since become free first.
        self.store.space.release_held_slots();
        let n = self.store.space.punch_free_slots(keep);
        self.counters.space_punched_slots.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives the free tails of data files back to the file system (and deletes data files
    /// that hold no extent). A failure is counted, not fatal: the space is reclaimed later.
    pub(super) fn reclaim_space(&self) {
        match self.store.space.shrink() {
            Ok(bytes) => {
                self.counters.space_released.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.space_shrink_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Deletes redo segments whose every record is in extents or belongs to a dropped table.
    fn retire_redo(&self) -> Result<()> {
        let needed = self.needed_lsn();
        let n = self
            .redo_segments
            .retire(self.opts.fs.as_ref(), &self.redo_dir, needed)?;
        self.counters
            .redo_segments_deleted
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The oldest LSN recovery may still need: the oldest version in any memtable, or the
    /// next LSN to commit (writes in flight are above the visible LSN).
    pub(super) fn needed_lsn(&self) -> Lsn {
        let mut needed = self.pipeline.visible_lsn() + 1;
        for t in self.all_tables() {
            for m in t.current().memtables() {
                needed = needed.min(m.min_lsn());
            }
        }
        needed
    }

    /// How table `t`'s extents are built in `level`: its own options where it set them, the
    /// database's otherwise.
    fn extent_options(&self, t: &TableInner, level: usize) -> ExtentOptions {
        let o = &t.options;
        let codecs = o.compression_per_level.unwrap_or(self.opts.compression_per_level);
        let codec = codecs[level.min(codecs.len() - 1)];
        let (compression, compression_level) = match codec {
            Compression::None => (crate::extent::Compression::None, 0),
            Compression::Lz4 => (crate::extent::Compression::Lz4, 0),
            Compression::Zstd { level } => (crate::extent::Compression::Zstd, level),
        };
        ExtentOptions {
            block_size: o.block_size.unwrap_or(self.opts.block_size),
            restart_interval: self.opts.block_restart_interval,
            hash_index: self.opts.block_hash_index,
            bloom_bits_per_key: o.bloom_bits_per_key.unwrap_or(self.opts.bloom_bits_per_key),
            compression,
            compression_level,
            dictionary: None,
        }
    }

    fn gc_view(&self) -> (Lsn, Vec<Lsn>) {
        self.snapshots.gc_view(|| self.pipeline.visible_lsn())
    }
}

impl FlushContext for DbInner {
    fn wait_visible(&self, lsn: Lsn) -> Result<()> {
        self.pipeline.wait_visible(lsn, 0, Duration::from_micros(100))
    }

    fn gc_view(&self) -> (Lsn, Vec<Lsn>) {
        DbInner::gc_view(self)
    }

    fn sync_redo(&self) -> Result<()> {
        self.pipeline.sync_log().map(drop)
    }

    fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()> {
        DbInner::commit_meta(self, entries)
    }

    fn extent_options(&self, t: &TableInner, level: usize) -> ExtentOptions {
        DbInner::extent_options(self, t, level)
    }
}

impl CompactionContext for DbInner {
    fn dictionary_bytes(&self, t: &TableInner) -> usize {
        t.options
            .zstd_dictionary_bytes
            .unwrap_or(self.opts.zstd_dictionary_bytes)
    }

    fn output_tier(&self, t: &TableInner, level: usize) -> Tier {
        if level + 1 < crate::LEVELS {
            return Tier::Local;
        }
        t.options.l2_tier.unwrap_or(self.opts.l2_tier)
    }

    fn gc_view(&self) -> (Lsn, Vec<Lsn>) {
        DbInner::gc_view(self)
    }

    fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()> {
        DbInner::commit_meta(self, entries)
    }

    fn extent_options(&self, t: &TableInner, level: usize) -> ExtentOptions {
        DbInner::extent_options(self, t, level)
    }

    fn reuse(&self) -> bool {
        self.opts.compaction_reuse
    }

    fn units(&self) -> Units {
        Units {
            units: self.opts.compaction_units,
            task_extents: self.opts.compaction_task_extents,
            prefetch: self.opts.compaction_prefetch,
            reject_every: self.opts.compaction_unit_reject_every,
            piece_bytes: self.opts.compaction_piece_bytes,
        }
    }
}
