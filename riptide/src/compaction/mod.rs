//! Compaction: merges extents of one level into the next, dropping versions no reader can see.
//!
//! This is the plain merging path: every input entry is decoded, merged and re-encoded. (Data
//! reuse, the scheduler with scores, intra-L0 and the other kinds build on it.)
//!
//! Kinds here:
//! - `L0ToL1` (minor): every L0 layer plus the L1 extents overlapping their key range → L1.
//! - `L1ToL2` (major): every L1 extent plus the overlapping L2 extents → L2.
//!
//! Invariants:
//! - One compaction per table at a time (`TableInner::compaction_lock`); flushes may run
//!   concurrently (they only add L0 layers, and every install applies its edit to the current
//!   levels under the table's change lock).
//! - A merge keeps, per user key, the newest version and every older version that a live
//!   snapshot can see (the snapshot list and visible LSN are read atomically); the new
//!   `MetaSnapshot` carries the visible LSN as its `gc_horizon` so unregistered reads at an
//!   older LSN retry.
//! - Tombstones are dropped only when the output level is the bottom of the key range (nothing
//!   older below) and no snapshot needs them.
//! - Outputs are cut between user keys, so no user key spans two extents of a level.

mod merge;

use crate::error::Result;
use crate::extent::{BuiltExtent, ExtentBuilder, EXTENT_SIZE};
use crate::extent_store::{user_part, LiveExtent};
use crate::flush::FlushContext;
use crate::key::{decode_internal_key, Lsn, ValueKind};
use crate::meta::edit::{ExtentMeta, SlogEntry, TableEdit};
use crate::meta::version::{Layer, MetaSnapshot};
use crate::space::ExtentId;
use crate::subtable::TableInner;
use merge::{MergingEntries, RunEntries};
use std::sync::Arc;

/// Which compaction to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompactionKind {
    /// L0 layers (and overlapping L1) into L1.
    L0ToL1,
    /// L1 (and overlapping L2) into L2.
    L1ToL2,
    /// Every L2 extent rewritten within L2 (manual full compaction: purges old versions and
    /// tombstones once nothing needs them).
    L2Rewrite,
}

/// Counters of one compaction.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CompactionOutcome {
    pub(crate) output_extents: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) entries_in: u64,
    pub(crate) entries_out: u64,
}

/// True if some snapshot in `snapshots` (sorted) is in `[lo, hi)`.
pub(crate) fn snapshot_between(snapshots: &[Lsn], lo: Lsn, hi: Lsn) -> bool {
    let i = snapshots.partition_point(|&s| s < lo);
    i < snapshots.len() && snapshots[i] < hi
}

/// The user-key range `[lo, hi]` covered by `extents`.
fn user_range(extents: &[&Arc<LiveExtent>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = extents.iter().map(|e| user_part(&e.meta.smallest)).min()?;
    let hi = extents.iter().map(|e| user_part(&e.meta.largest)).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

fn overlapping<'a>(layer: &'a Layer, lo: &[u8], hi: &[u8]) -> Vec<&'a Arc<LiveExtent>> {
    layer
        .extents
        .iter()
        .filter(|e| user_part(&e.meta.smallest) <= hi && user_part(&e.meta.largest) >= lo)
        .collect()
}

/// Runs one compaction of `kind` on `t`; `None` if there was nothing to do.
pub(crate) fn compact(
    ctx: &dyn FlushContext,
    t: &Arc<TableInner>,
    kind: CompactionKind,
) -> Result<Option<CompactionOutcome>> {
    let _one_at_a_time = t.compaction_lock.lock();
    if t.is_dropped() {
        return Ok(None);
    }
    let view = t.current();
    let levels = &view.levels;
    // Inputs: runs newest first, with their (level, layer) for the edit.
    let mut runs: Vec<(u8, u64, Vec<Arc<LiveExtent>>)> = Vec::new();
    let out_level: u8 = match kind {
        CompactionKind::L0ToL1 => {
            if levels.l0.is_empty() {
                return Ok(None);
            }
            for l in &levels.l0 {
                runs.push((0, l.id, l.extents.clone()));
            }
            1
        }
        CompactionKind::L1ToL2 => {
            if levels.sorted[0].extents.is_empty() {
                return Ok(None);
            }
            runs.push((1, 0, levels.sorted[0].extents.clone()));
            2
        }
        CompactionKind::L2Rewrite => {
            if levels.sorted[1].extents.is_empty() || !levels.sorted[0].extents.is_empty() {
                return Ok(None);
            }
            runs.push((2, 0, levels.sorted[1].extents.clone()));
            2
        }
    };
    let upper: Vec<&Arc<LiveExtent>> = runs.iter().flat_map(|r| r.2.iter()).collect();
    let Some((lo, hi)) = user_range(&upper) else {
        return Ok(None);
    };
    let target = &levels.sorted[usize::from(out_level) - 1];
    if kind != CompactionKind::L2Rewrite {
        let lower: Vec<Arc<LiveExtent>> = overlapping(target, &lo, &hi).into_iter().cloned().collect();
        runs.push((out_level, 0, lower));
    }
    // Bottom: nothing older than the output lies below the range of *all* inputs (the
    // overlapping extents of the output level may reach beyond the upper inputs' range).
    let all: Vec<&Arc<LiveExtent>> = runs.iter().flat_map(|r| r.2.iter()).collect();
    let (lo, hi) = user_range(&all).unwrap_or((lo, hi));
    let bottom = out_level == 2 || overlapping(&levels.sorted[1], &lo, &hi).is_empty();

    let (visible, snapshots) = ctx.gc_view();
    let store = t.store.clone();
    let mut outcome = CompactionOutcome {
        bytes_read: runs.iter().flat_map(|r| r.2.iter()).map(|e| e.meta.data_size).sum(),
        ..Default::default()
    };
    let mut written: Vec<(ExtentId, BuiltExtent)> = Vec::new();
    let result = (|| -> Result<()> {
        let sources: Vec<RunEntries> = runs
            .iter()
            .filter(|r| !r.2.is_empty())
            .map(|r| RunEntries::new(store.clone(), r.2.clone()))
            .collect();
        let mut merged = MergingEntries::new(sources)?;
        let opts = ctx.extent_options();
        let mut builder = ExtentBuilder::new(opts.clone());
        let mut versions: Vec<(Vec<u8>, Vec<u8>)> = Vec::new(); // (ikey, value) of one user key
        let emit = |builder: ExtentBuilder, written: &mut Vec<(ExtentId, BuiltExtent)>| -> Result<()> {
            let built = builder.finish()?;
            let id = store.space.allocate(built.slots)?;
            written.push((id, built));
            let (id, built) = written.last().expect("just pushed");
            store.space.write_extent(*id, built.slots, &built.valid, &built.footer)
        };
        loop {
            let next = merged.next_entry()?;
            let same_key = match (&next, versions.first()) {
                (Some((k, _)), Some((first, _))) => user_part(k) == user_part(first),
                _ => false,
            };
            if !same_key && !versions.is_empty() {
                let kept = gc_versions(&versions, &snapshots, bottom);
                let size: usize = kept
                    .iter()
                    .map(|&i| versions[i].0.len() + versions[i].1.len() + 16)
                    .sum();
                if !builder.is_empty() && builder.estimated_size() + size > EXTENT_SIZE as usize {
                    let full = std::mem::replace(&mut builder, ExtentBuilder::new(opts.clone()));
                    emit(full, &mut written)?;
                }
                for i in kept {
                    builder.add(&versions[i].0, &versions[i].1)?;
                    outcome.entries_out += 1;
                }
                versions.clear();
            }
            match next {
                Some(entry) => {
                    outcome.entries_in += 1;
                    versions.push(entry);
                }
                None => break,
            }
        }
        if !builder.is_empty() {
            emit(builder, &mut written)?;
        }
        let ids: Vec<ExtentId> = written.iter().map(|w| w.0).collect();
        store.space.sync(&ids)
    })();
    if let Err(e) = result {
        for (id, b) in &written {
            store.space.free(*id, b.slots);
        }
        return Err(e);
    }
    outcome.output_extents = written.len() as u64;
    outcome.bytes_written = written.iter().map(|w| w.1.valid.len() as u64).sum();
    let edit = TableEdit {
        table: t.id,
        removed: runs
            .iter()
            .flat_map(|(level, layer, es)| es.iter().map(move |e| (*level, *layer, e.meta.id)))
            .collect(),
        added: written
            .iter()
            .map(|(id, b)| (out_level, 0, extent_meta(t.id, *id, b)))
            .collect(),
        flushed_lsn: None,
        next_layer: None,
    };
    let state = t.change.lock();
    let cur = t.current();
    let applied = cur.levels.apply(&store, &edit);
    let (next_levels, obsolete) = match applied {
        Ok(x) => x,
        Err(e) => {
            drop(state);
            for (id, b) in &written {
                store.space.free(*id, b.slots);
            }
            return Err(e);
        }
    };
    if let Err(e) = ctx.commit_meta(vec![SlogEntry::Edit(edit)]) {
        // The commit may still be durable: keep the outputs allocated (recovery decides).
        drop(state);
        drop(next_levels);
        return Err(e);
    }
    t.publish(MetaSnapshot {
        active: cur.active.clone(),
        immutables: cur.immutables.clone(),
        levels: Arc::new(next_levels),
        version: cur.version + 1,
        gc_horizon: cur.gc_horizon.max(visible),
    });
    drop(state);
    for e in obsolete {
        e.mark_obsolete();
    }
    Ok(Some(outcome))
}

/// Indexes of the versions of one user key (newest first) that must survive.
fn gc_versions(versions: &[(Vec<u8>, Vec<u8>)], snapshots: &[Lsn], bottom: bool) -> Vec<usize> {
    let mut kept = Vec::with_capacity(1);
    let mut newer: Option<Lsn> = None;
    for (i, (ikey, _)) in versions.iter().enumerate() {
        let Some((_, lsn, _)) = decode_internal_key(ikey) else {
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
            match decode_internal_key(&versions[last].0) {
                Some((_, _, ValueKind::Delete)) => {
                    kept.pop();
                }
                _ => break,
            }
        }
    }
    kept
}

fn extent_meta(table: u32, id: ExtentId, b: &BuiltExtent) -> ExtentMeta {
    let p = &b.props;
    ExtentMeta {
        id: id.0,
        slots: b.slots,
        table,
        smallest: p.smallest.clone(),
        largest: p.largest.clone(),
        min_lsn: p.min_lsn,
        max_lsn: p.max_lsn,
        entries: p.entries,
        deletes: p.deletes,
        data_size: b.valid.len() as u64,
        blocks: b.blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ik(k: &[u8], lsn: Lsn, kind: ValueKind) -> (Vec<u8>, Vec<u8>) {
        let mut v = Vec::new();
        crate::key::encode_internal_key(&mut v, k, lsn, kind);
        (v, b"x".to_vec())
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
