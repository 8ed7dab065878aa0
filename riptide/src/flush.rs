//! Flush: writes a sub-table's oldest immutable memtable as a new L0 layer.
//!
//! Steps (one slog mini-transaction, X-Engine's install order):
//! 1. Wait until every write bound to the memtable has committed (visible LSN >= its seal).
//! 2. Read the live snapshot list and the visible LSN under the snapshot lock; keep, per key,
//!    the newest version and every older version a live snapshot can still see.
//! 3. Cut the entries into extents (only between user keys), write each into freshly allocated
//!    slots, fsync the data files.
//!    Then fsync the redo log, so no older write of another table can be lost while this
//!    one survives in an extent (recovered state stays a prefix).
//! 4. Commit one slog transaction: the extent metas, the new L0 layer, the table's new
//!    recovery point (the memtable's seal LSN). Fsynced.
//! 5. Publish a new `MetaSnapshot` without the memtable and with the layer, then refresh cached
//!    rows of the flushed keys, then delete redo segments no table needs any more.
//!
//! A failure before step 4 frees the new extents and leaves the memtable in place (its data
//! stays readable and in the redo log); the error is reported and the flush retried later. A
//! failed slog commit leaves the new extents allocated until the next open, because the commit
//! may still be durable.

use crate::error::{Error, Result};
use crate::extent::{BuiltExtent, ExtentBuilder, ExtentOptions, EXTENT_SIZE};
use crate::key::{encode_internal_key, Lsn, ValueKind};
use crate::memtable::Memtable;
use crate::meta::edit::{ExtentMeta, SlogEntry, TableEdit};
use crate::snapshot::snapshot_between;
use crate::space::ExtentId;
use crate::subtable::TableInner;
use crate::version::MetaSnapshot;
use std::sync::Arc;

/// What a flush needs from the database.
pub(crate) trait FlushContext {
    /// Blocks until every write with an LSN <= `lsn` has committed (or the instance failed).
    fn wait_visible(&self, lsn: Lsn) -> Result<()>;
    /// The visible LSN and the sorted LSNs of live snapshots, read atomically with respect to
    /// new snapshots.
    fn gc_view(&self) -> (Lsn, Vec<Lsn>);
    /// Makes the redo log durable up to everything written so far.
    fn sync_redo(&self) -> Result<()>;
    /// Commits one slog transaction (durable on return).
    fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()>;
    /// Options for new extents.
    /// How table `t`'s extents are built in `level`.
    fn extent_options(&self, t: &TableInner, level: usize) -> ExtentOptions;
}

/// Counters of one flush.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FlushOutcome {
    pub(crate) extents: u64,
    pub(crate) entries: u64,
    pub(crate) deletes: u64,
    pub(crate) bytes: u64,
}

/// An extent written to disk but not yet in metadata.
struct Written {
    id: ExtentId,
    built: BuiltExtent,
}

/// Flushes the oldest immutable memtable of `t`, if any. Returns `None` when there was
/// nothing to flush.
pub(crate) fn flush_oldest(ctx: &dyn FlushContext, t: &Arc<TableInner>) -> Result<Option<FlushOutcome>> {
    let _one_at_a_time = t.flush_lock.lock();
    if t.is_dropped() {
        return Ok(None);
    }
    let view = t.current();
    let Some(mem) = view.immutables.last().cloned() else {
        return Ok(None);
    };
    let sealed = mem
        .sealed_lsn()
        .ok_or_else(|| Error::corruption("<memtable>", 0, "immutable memtable without a seal"))?;
    ctx.wait_visible(sealed)?;
    let (visible, snapshots) = ctx.gc_view();
    let store = t.store.clone();
    let mut written: Vec<Written> = Vec::new();
    let result = (|| -> Result<FlushOutcome> {
        let mut outcome = FlushOutcome::default();
        build_extents(ctx, t, &mem, &snapshots, &mut |built| {
            let id = store.space.allocate(built.slots)?;
            let w = Written { id, built };
            written.push(w);
            let w = written.last_mut().expect("just pushed");
            store
                .space
                .write_extent(w.id, w.built.slots, &w.built.valid, &w.built.footer)?;
            // Written: keep only the metadata; the bytes' buffer builds a later extent.
            let spare = std::mem::take(&mut w.built.valid);
            outcome.extents += 1;
            outcome.entries += w.built.props.entries;
            outcome.deletes += w.built.props.deletes;
            outcome.bytes += w.built.data_size;
            Ok(spare)
        })?;
        let ids: Vec<ExtentId> = written.iter().map(|w| w.id).collect();
        store.space.sync(&ids)?;
        // Writes of other tables older than the seal may sit unsynced in the redo log: once
        // this flush is durable they must be too, or a power cut could leave a hole.
        ctx.sync_redo()?;
        Ok(outcome)
    })();
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            for w in &written {
                store.space.free(w.id, w.built.slots);
            }
            return Err(e);
        }
    };
    let metas: Vec<ExtentMeta> = written
        .iter()
        .map(|w| ExtentMeta::of_built(t.id, w.id, &w.built))
        .collect();
    // Cached rows of the flushed keys become their flushed versions before the layer is
    // visible; inserts stay frozen until it is (they could carry a row older than the layer).
    t.row_cache_frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    refresh_row_cache(t, &mem);
    let result = install_flush(ctx, t, &mem, metas, sealed, visible);
    t.row_cache_frozen.store(false, std::sync::atomic::Ordering::SeqCst);
    result.map(|()| Some(outcome))
}

/// Steps 4 and 5: commit the edit and publish the new snapshot.
fn install_flush(
    ctx: &dyn FlushContext,
    t: &Arc<TableInner>,
    mem: &Arc<Memtable>,
    metas: Vec<ExtentMeta>,
    sealed: Lsn,
    visible: Lsn,
) -> Result<()> {
    let store = t.store.clone();
    // Steps 4 and 5 under the table's change lock, so no memtable switch or other install
    // interleaves between reading `current` and publishing.
    let mut state = t.change.lock();
    let layer = state.next_layer;
    let edit = TableEdit {
        table: t.id,
        removed: Vec::new(),
        added: metas.into_iter().map(|m| (0u8, layer, m)).collect(),
        flushed_lsn: Some(sealed),
        next_layer: Some(layer + 1),
    };
    let cur = t.current();
    let (levels, _dropped) = cur.levels.apply(&store, &edit)?;
    crate::failpoint::hit("flush", "", "before_commit");
    if let Err(e) = ctx.commit_meta(vec![SlogEntry::Edit(edit)]) {
        // The commit record may still reach the disk (a failed fsync says nothing about what
        // was written), so the new extents stay allocated: if the commit survives, recovery
        // finds them in the metadata; if not, recovery frees them.
        drop(state);
        return Err(e);
    }
    crate::failpoint::hit("flush", "", "after_commit");
    state.next_layer = layer + 1;
    state.flushed_lsn = sealed;
    let immutables: Vec<Arc<Memtable>> = cur
        .immutables
        .iter()
        .filter(|m| !Arc::ptr_eq(m, mem))
        .cloned()
        .collect();
    t.publish(MetaSnapshot {
        active: cur.active.clone(),
        immutables,
        levels: Arc::new(levels),
        version: cur.version + 1,
        gc_horizon: cur.gc_horizon.max(visible),
    });
    Ok(())
}

/// Replaces cached rows of every key in `mem` by their newest version (now in L0).
fn refresh_row_cache(t: &TableInner, mem: &Arc<Memtable>) {
    if !t.row_cache_enabled() {
        return;
    }
    let mut c = mem.cursor();
    c.seek_to_first();
    while c.valid() {
        let mut newest = None;
        c.for_each_version(|lsn, kind, value| {
            newest = Some(crate::cache::RowEntry {
                lsn,
                value: match kind {
                    ValueKind::Put => Some(Arc::from(value)),
                    ValueKind::Delete => None,
                },
            });
            false
        });
        if let Some(entry) = newest {
            t.row_cache.replace_if_present(t.id, c.key(), entry);
        }
        c.next();
    }
}

/// Streams the versions of `mem` that must survive into extents, cut between user keys, and
/// hands each finished extent to `emit`, which returns a byte buffer for a later extent.
fn build_extents(
    ctx: &dyn FlushContext,
    t: &TableInner,
    mem: &Arc<Memtable>,
    snapshots: &[Lsn],
    emit: &mut dyn FnMut(BuiltExtent) -> Result<Vec<u8>>,
) -> Result<()> {
    let opts = ctx.extent_options(t, 0);
    let mut builder = ExtentBuilder::new(opts.clone());
    let mut spare = Vec::new();
    let mut ikey = Vec::new();
    let mut c = mem.cursor();
    c.seek_to_first();
    // The surviving versions of the current key as (lsn, kind, value length); reused, so a
    // key costs no allocation. Their values are fetched in a second walk of the versions.
    let mut kept: Vec<(Lsn, ValueKind, usize)> = Vec::with_capacity(4);
    while c.valid() {
        kept.clear();
        let mut newer: Option<Lsn> = None;
        c.for_each_version(|lsn, kind, value| {
            let keep = match newer {
                None => true,
                Some(n) => snapshot_between(snapshots, lsn, n),
            };
            if keep {
                kept.push((lsn, kind, value.len()));
            }
            newer = Some(lsn);
            true
        });
        // Cut before this key if its versions would overflow the extent.
        let after = builder.estimated_size_after_entries(kept.iter().map(|&(_, _, vlen)| (c.key().len() + 8, vlen)));
        if !builder.is_empty() && after > EXTENT_SIZE as usize {
            let next = ExtentBuilder::with_buffer(opts.clone(), std::mem::take(&mut spare));
            let full = std::mem::replace(&mut builder, next);
            spare = emit(full.finish()?)?;
        }
        let mut next = 0;
        let mut added = Ok(());
        c.for_each_version(|lsn, kind, value| {
            if let Some(&(want, _, _)) = kept.get(next) {
                if want == lsn {
                    ikey.clear();
                    encode_internal_key(&mut ikey, c.key(), lsn, kind);
                    added = builder.add(&ikey, value);
                    next += 1;
                }
            }
            added.is_ok() && next < kept.len()
        });
        added?;
        c.next();
    }
    if !builder.is_empty() {
        emit(builder.finish()?)?;
    }
    Ok(())
}
