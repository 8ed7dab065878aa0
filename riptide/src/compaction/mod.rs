//! Compaction: merges extents into a level below (or within a level), re-linking and copying
//! what does not overlap (data reuse, `job.rs`) and dropping versions no reader can see.
//!
//! Kinds (picked by `picker.rs`, or asked for by `Table::compact`):
//! - intra-L0: the oldest L0 layers (up to 16) into one L0 layer that takes the oldest input's
//!   layer id, so it sorts below every newer layer;
//! - minor: every L0 layer plus the overlapping L1 extents into L1;
//! - major: every L1 extent plus the overlapping L2 extents into L2;
//! - self-major: delete-heavy L2 extents rewritten within L2 (purging their tombstones);
//! - full L2 rewrite (manual): every L2 extent rewritten, nothing reused.
//!
//! Invariants:
//! - One compaction per table at a time (`TableInner::compaction_lock`); flushes may run
//!   concurrently (they only add L0 layers, and every install applies its edit to the current
//!   levels under the table's change lock).
//! - A merge keeps, per user key, the newest version and every older version that a live
//!   snapshot can see (the snapshot list and visible LSN are read atomically); the new
//!   `MetaSnapshot` carries the visible LSN as its `gc_horizon` so unregistered reads at an
//!   older LSN retry.
//! - Tombstones are dropped only when nothing older lies below the key range of *all* inputs.
//! - Outputs are cut between user keys, so no user key spans two extents of a level.
//! - The edit is one slog transaction: consumed extents removed, outputs added, re-linked
//!   extents removed from their old position and added at the new one (same id).

pub(crate) mod dictionary;
mod job;
mod merge;
pub(crate) mod picker;
mod plan;

use crate::cache::BlockKey;
use crate::error::Result;
use crate::extent::ExtentOptions;
use crate::extent_store::{user_part, LiveExtent};
use crate::key::{compare_internal_keys, decode_internal_key, Lsn, ValueKind};
use crate::meta::edit::{ExtentMeta, SlogEntry, TableEdit};
use crate::snapshot::snapshot_between;
use crate::space::ExtentId;
use crate::subtable::TableInner;
use crate::version::{LevelSet, MetaSnapshot};
use job::{HotBlock, JobResult};
pub(crate) use job::{JobStats, Units};
use plan::plan;
use std::cmp::Ordering;
use std::sync::Arc;

/// Which compaction to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CompactionKind {
    /// The oldest L0 layers into one L0 layer.
    IntraL0,
    /// L0 layers (and overlapping L1) into L1.
    Minor,
    /// L1 (and overlapping L2) into L2.
    Major,
    /// The coldest half of L1 (and the overlapping L2) into L2: a major compaction of a table
    /// whose L2 is on the object tier (seed 000 App. C: cold extents go down first, hot ranges
    /// stay in the local tier). Same crash points as `Major`.
    MajorCold,
    /// Delete-heavy L2 extents rewritten within L2 (only those whose deletes it can purge,
    /// see [`purgeable`]), and runs of sparse ones packed ([`packable`]).
    MajorSelf,
    /// L1 extents whose rows skip whole L2 extents, cut within L1 where each skipped L2 extent
    /// starts (run before a major compaction, so the skipped L2 extents stay untouched by it).
    Split,
    /// Every L2 extent rewritten within L2 (manual full compaction).
    L2Rewrite,
    /// Manual, for a user-key range: the L0 extents overlapping it (closed under overlap, so
    /// no older L0 version is left above a newer L1 one) and the overlapping L1 → L1.
    MinorRange,
    /// Manual, for a user-key range: the L1 extents overlapping it and the overlapping L2
    /// extents, all rewritten → L2.
    MajorRange,
}

impl CompactionKind {
    /// The kind's name in crash points and logs.
    pub(crate) fn point_name(self) -> &'static str {
        match self {
            CompactionKind::IntraL0 => "intra_l0",
            CompactionKind::Minor => "minor",
            CompactionKind::Major | CompactionKind::MajorCold => "major",
            CompactionKind::MajorSelf => "major_self",
            CompactionKind::Split => "split",
            CompactionKind::L2Rewrite => "l2_rewrite",
            CompactionKind::MinorRange => "minor_range",
            CompactionKind::MajorRange => "major_range",
        }
    }
}

/// Each extent a compaction wrote takes the highest temperature of the inputs whose user keys
/// it overlaps, so rewriting (a split, a minor) never makes hot rows look cold.
fn inherit_temperature(levels: &LevelSet, result: &JobResult) {
    let written: std::collections::HashSet<u64> = result.written.iter().map(|(id, _)| id.0).collect();
    let range = |e: &LiveExtent| {
        (
            user_part(&e.meta.smallest).to_vec(),
            user_part(&e.meta.largest).to_vec(),
        )
    };
    for out in levels.all_extents().filter(|e| written.contains(&e.meta.id)) {
        let (lo, hi) = range(out);
        let t = result
            .consumed
            .iter()
            .filter(|(_, _, e)| {
                let (elo, ehi) = range(e);
                elo <= hi && lo <= ehi
            })
            .map(|(_, _, e)| e.temperature())
            .max()
            .unwrap_or(0);
        if t > 0 {
            out.warm_to(t);
        }
    }
}

/// What a compaction needs from the database.
pub(crate) trait CompactionContext {
    /// The visible LSN and the sorted LSNs of live snapshots, read atomically with respect to
    /// new snapshots.
    fn gc_view(&self) -> (Lsn, Vec<Lsn>);
    /// Commits one slog transaction (durable on return).
    fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()>;
    /// How table `t`'s extents are built in `level`.
    fn extent_options(&self, t: &TableInner, level: usize) -> ExtentOptions;
    /// Largest zstd dictionary table `t`'s compactions train (0 = none).
    fn dictionary_bytes(&self, t: &TableInner) -> usize;
    /// Where table `t`'s new extents in `level` go.
    fn output_tier(&self, t: &TableInner, level: usize) -> crate::tier::Tier;
    /// Compactions may re-link extents and copy blocks (data reuse).
    fn reuse(&self) -> bool;
    /// How compaction jobs are split into tasks and run on units.
    fn units(&self) -> Units;
}

/// An inclusive user-key range; `None` bounds are open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub(crate) lo: Option<Vec<u8>>,
    pub(crate) hi: Option<Vec<u8>>,
}

impl KeyRange {
    fn overlaps(&self, e: &LiveExtent) -> bool {
        let (a, b) = (user_part(&e.meta.smallest), user_part(&e.meta.largest));
        self.lo.as_deref().is_none_or(|lo| b >= lo) && self.hi.as_deref().is_none_or(|hi| a <= hi)
    }

    fn widen(&mut self, e: &LiveExtent) -> bool {
        let (a, b) = (user_part(&e.meta.smallest), user_part(&e.meta.largest));
        let mut changed = false;
        if self.lo.as_deref().is_some_and(|lo| a < lo) {
            self.lo = Some(a.to_vec());
            changed = true;
        }
        if self.hi.as_deref().is_some_and(|hi| b > hi) {
            self.hi = Some(b.to_vec());
            changed = true;
        }
        changed
    }
}

/// An extent is delete-heavy when at least this percentage of its entries are tombstones.
pub(crate) const DELETE_HEAVY_PERCENT: u64 = 30;

/// True if `e` is delete-heavy.
pub(crate) fn delete_heavy(e: &ExtentMeta) -> bool {
    e.entries > 0 && e.deletes * 100 >= e.entries * DELETE_HEAVY_PERCENT
}

/// L2 needs at least this many extents before sparse ones are packed (small tables do not
/// churn).
const PACK_MIN_L2_EXTENTS: usize = 16;
/// A run of adjacent sparse L2 extents is packed when it has at least this many extents...
const PACK_MIN_RUN: usize = 4;

/// True if `e` is one slot less than half full of data.
fn sparse(e: &ExtentMeta) -> bool {
    e.slots == 1 && e.data_size * 2 < crate::extent::EXTENT_SIZE
}

/// The L2 extents a self-major compaction packs: every maximal run of at least
/// [`PACK_MIN_RUN`] adjacent sparse extents whose data fits in at most half as many extents
/// (X-Engine's auto self-major picks the emptiest window of L2 the same way), once L2 has
/// [`PACK_MIN_L2_EXTENTS`] extents.
pub(crate) fn packable(l2: &[Arc<LiveExtent>]) -> Vec<Arc<LiveExtent>> {
    let mut out = Vec::new();
    if l2.len() < PACK_MIN_L2_EXTENTS {
        return out;
    }
    for run in l2.chunk_by(|a, b| sparse(&a.meta) == sparse(&b.meta)) {
        let data: u64 = run.iter().map(|e| e.meta.data_size).sum();
        let needed = data.div_ceil(crate::extent::EXTENT_SIZE) as usize;
        if sparse(&run[0].meta) && run.len() >= PACK_MIN_RUN && needed * 2 <= run.len() {
            out.extend(run.iter().cloned());
        }
    }
    out
}

/// True if a self-major compaction of L2 extent `e` would purge its deletes: it is
/// delete-heavy and every version in it is at or below the oldest live snapshot
/// (`oldest_snapshot`, `None` = no snapshot), so each key collapses to its newest version and
/// bottom tombstones go. Without the LSN test a snapshot that pins the tombstones would make
/// the picker rewrite the same extents again and again for nothing.
pub(crate) fn purgeable(e: &ExtentMeta, oldest_snapshot: Option<Lsn>) -> bool {
    delete_heavy(e) && oldest_snapshot.is_none_or(|s| e.max_lsn <= s)
}

/// Runs one compaction of `kind` on `t`; `None` if there was nothing to do.
pub(crate) fn compact(
    ctx: &dyn CompactionContext,
    t: &Arc<TableInner>,
    kind: CompactionKind,
    range: &KeyRange,
) -> Result<Option<JobStats>> {
    let _one_at_a_time = t.compaction_lock.lock();
    if t.is_dropped() {
        return Ok(None);
    }
    let view = t.current();
    let (visible, snapshots) = ctx.gc_view();
    let Some(plan) = plan(
        &t.store,
        &view.levels,
        kind,
        range,
        ctx.reuse(),
        snapshots.first().copied(),
    ) else {
        return Ok(None);
    };
    let store = t.store.clone();
    let mut result = JobResult::default();
    let mut opts = ctx.extent_options(t, usize::from(plan.out_level));
    opts.dictionary = dictionary::choose(&store, t, &view.levels, &plan, &opts, ctx.dictionary_bytes(t));
    let ran = job::run(
        &store,
        &plan,
        opts,
        ctx.output_tier(t, usize::from(plan.out_level)),
        &snapshots,
        ctx.units(),
        &mut result,
    )
    .and_then(|()| {
        let ids: Vec<ExtentId> = result.written.iter().map(|w| w.0).collect();
        store.sync(&ids)
    });
    if let Err(e) = ran {
        for (id, b) in &result.written {
            store.discard(*id, b.slots);
        }
        return Err(e);
    }
    result.stats.bytes_written = result.written.iter().map(|w| w.1.data_size).sum();
    let (out_level, out_layer) = (plan.out_level, plan.out_layer);
    let mut removed: Vec<(u8, u64, u64)> = Vec::new();
    let mut added: Vec<(u8, u64, ExtentMeta)> = Vec::new();
    for (level, layer, e) in &result.consumed {
        removed.push((*level, *layer, e.meta.id));
    }
    for (level, layer, e) in &result.moved {
        removed.push((*level, *layer, e.meta.id));
        added.push((out_level, out_layer, e.meta.clone()));
    }
    for (id, b) in &result.written {
        added.push((out_level, out_layer, ExtentMeta::of_built(t.id, *id, b)));
    }
    if removed.is_empty() && added.is_empty() {
        return Ok(None);
    }
    let edit = TableEdit {
        table: t.id,
        removed,
        added,
        flushed_lsn: None,
        next_layer: None,
    };
    let state = t.change.lock();
    let cur = t.current();
    let (next_levels, obsolete) = match cur.levels.apply(&store, &edit) {
        Ok(x) => x,
        Err(e) => {
            drop(state);
            for (id, b) in &result.written {
                store.discard(*id, b.slots);
            }
            return Err(e);
        }
    };
    inherit_temperature(&next_levels, &result);
    crate::failpoint::hit("compaction", kind.point_name(), "before_commit");
    if let Err(e) = ctx.commit_meta(vec![SlogEntry::Edit(edit)]) {
        // The commit may still be durable: keep the outputs allocated (recovery decides).
        drop(state);
        return Err(e);
    }
    crate::failpoint::hit("compaction", kind.point_name(), "after_commit");
    let next_levels = Arc::new(next_levels);
    t.publish(MetaSnapshot {
        active: cur.active.clone(),
        immutables: cur.immutables.clone(),
        levels: next_levels.clone(),
        version: cur.version + 1,
        gc_horizon: cur.gc_horizon.max(visible),
    });
    drop(state);
    for e in obsolete {
        e.mark_obsolete();
    }
    replace_cached_blocks(t, &next_levels, &result);
    if matches!(kind, CompactionKind::Major | CompactionKind::MajorCold) {
        // Temperatures follow recent reads: every major halves them.
        for e in next_levels.all_extents() {
            e.decay();
        }
    }
    Ok(Some(result.stats))
}

/// Incremental cache replacement (seed 000 §3.1.4): output blocks take the place of cached
/// input blocks, so a compaction does not turn hot reads into misses. Copied blocks move their
/// cached `Arc<Block>` to the new key (no read); merged ranges load their output blocks.
fn replace_cached_blocks(t: &TableInner, levels: &LevelSet, result: &JobResult) {
    if result.hot.is_empty() {
        return;
    }
    let store = &t.store;
    // Output index → its installed extent (one pass over the levels, not one per block).
    let by_id: std::collections::HashMap<u64, Arc<LiveExtent>> =
        levels.all_extents().map(|e| (e.meta.id, e.clone())).collect();
    let find = |output: usize| -> Option<Arc<LiveExtent>> { by_id.get(&result.written.get(output)?.0 .0).cloned() };
    let mut merged: Vec<(&[u8], &[u8])> = Vec::new();
    for hot in &result.hot {
        match hot {
            HotBlock::Copied { old, output, first_key } => {
                let old_key = BlockKey {
                    extent: old.0,
                    offset: old.1,
                };
                let Some(block) = store.blocks.get(&old_key) else {
                    continue;
                };
                let Some(e) = find(*output) else { continue };
                let Ok(open) = store.open(&e) else { continue };
                // Index entries are in key order: find the copied block by its first key.
                let index = open.reader.index();
                let at = index.partition_point(|ie| compare_internal_keys(&ie.first_key, first_key) == Ordering::Less);
                if let Some(entry) = index.get(at).filter(|ie| &ie.first_key == first_key) {
                    let size = block.size();
                    store.blocks.insert(
                        BlockKey {
                            extent: e.cache_id,
                            offset: entry.offset,
                        },
                        block,
                        size,
                    );
                    store.blocks.remove(&old_key);
                }
            }
            HotBlock::Merged { lo, hi } => merged.push((lo, hi)),
        }
    }
    if merged.is_empty() {
        return;
    }
    // Load the output blocks that overlap a merged range: ranges sorted and coalesced, then
    // one sweep per output extent.
    merged.sort_unstable();
    let mut ranges: Vec<(&[u8], &[u8])> = Vec::with_capacity(merged.len());
    for (lo, hi) in merged {
        match ranges.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => ranges.push((lo, hi)),
        }
    }
    for output in 0..result.written.len() {
        let Some(e) = find(output) else { continue };
        let (smallest, largest) = (user_part(&e.meta.smallest), user_part(&e.meta.largest));
        let first = ranges.partition_point(|r| r.1 < smallest);
        if ranges.get(first).is_none_or(|r| r.0 > largest) {
            continue;
        }
        let Ok(open) = store.open(&e) else { continue };
        let mut r = first;
        for (i, ie) in open.reader.index().iter().enumerate() {
            let (lo, hi) = (user_part(&ie.first_key), user_part(&ie.last_key));
            while ranges.get(r).is_some_and(|range| range.1 < lo) {
                r += 1;
            }
            let Some(range) = ranges.get(r) else { break };
            if range.0 <= hi {
                let _ = store.block(&e, open, i);
            }
        }
    }
}

/// Indexes of the versions of one user key (newest first) that must survive.
#[cfg(test)]
fn gc_versions<K: AsRef<[u8]>>(versions: &[K], snapshots: &[Lsn], bottom: bool) -> Vec<usize> {
    let mut kept = Vec::new();
    gc_versions_into(versions.len(), |i| versions[i].as_ref(), snapshots, bottom, &mut kept);
    kept
}

/// [`gc_versions`] without allocating: the internal keys of the `n` versions (newest first)
/// are `key(0..n)`, and `kept` (cleared first) receives the indexes that must survive.
pub(crate) fn gc_versions_into<'k>(
    n: usize,
    key: impl Fn(usize) -> &'k [u8],
    snapshots: &[Lsn],
    bottom: bool,
    kept: &mut Vec<usize>,
) {
    kept.clear();
    let mut newer: Option<Lsn> = None;
    for i in 0..n {
        let Some((_, lsn, _)) = decode_internal_key(key(i)) else {
            continue;
        };
        let keep = match newer {
            None => true,
            Some(n) => snapshot_between(snapshots, lsn, n),
        };
        if keep {
            kept.push(i);
        }
        newer = Some(lsn);
    }
    if bottom {
        // A tombstone with nothing older below it hides nothing.
        while let Some(&last) = kept.last() {
            match decode_internal_key(key(last)) {
                Some((_, _, ValueKind::Delete)) => {
                    kept.pop();
                }
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ik(k: &[u8], lsn: Lsn, kind: ValueKind) -> Vec<u8> {
        let mut v = Vec::new();
        crate::key::encode_internal_key(&mut v, k, lsn, kind);
        v
    }

    #[test]
    fn gc_keeps_newest_and_snapshot_visible_versions() {
        let v = vec![
            ik(b"a", 9, ValueKind::Put),
            ik(b"a", 7, ValueKind::Put),
            ik(b"a", 5, ValueKind::Put),
            ik(b"a", 2, ValueKind::Put),
        ];
        assert_eq!(gc_versions(&v, &[], false), vec![0]);
        // A snapshot at 6 sees version 5; at 8 sees 7.
        assert_eq!(gc_versions(&v, &[6], false), vec![0, 2]);
        assert_eq!(gc_versions(&v, &[5, 8], false), vec![0, 1, 2]);
        assert_eq!(gc_versions(&v, &[1], false), vec![0]);
    }

    #[test]
    fn self_major_purges_only_what_no_snapshot_pins() {
        let meta = |entries, deletes, max_lsn| ExtentMeta {
            entries,
            deletes,
            max_lsn,
            ..Default::default()
        };
        assert!(purgeable(&meta(10, 3, 50), None));
        assert!(purgeable(&meta(10, 3, 50), Some(50)));
        // A snapshot older than the extent's newest version may need its tombstones.
        assert!(!purgeable(&meta(10, 3, 50), Some(49)));
        assert!(!purgeable(&meta(10, 2, 50), None), "not delete-heavy");
        assert!(!purgeable(&meta(0, 0, 0), None));
    }

    #[test]
    fn gc_drops_tombstones_only_at_the_bottom() {
        let v = vec![ik(b"a", 9, ValueKind::Delete), ik(b"a", 5, ValueKind::Put)];
        assert_eq!(gc_versions(&v, &[], false), vec![0]);
        assert_eq!(gc_versions(&v, &[], true), Vec::<usize>::new());
        // A snapshot at 6 still sees the put; the tombstone above it must stay too.
        assert_eq!(gc_versions(&v, &[6], true), vec![0, 1]);
        let w = vec![ik(b"a", 9, ValueKind::Put), ik(b"a", 5, ValueKind::Delete)];
        assert_eq!(gc_versions(&w, &[6], true), vec![0]);
    }
}
