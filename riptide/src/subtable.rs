//! [`TableInner`]: one sub-table, i.e. one LSM-tree: its current [`MetaSnapshot`] (memtables and
//! levels) and the state that changes it.
//!
//! Invariants:
//! - `current` is replaced, never mutated: readers pin an `Arc<MetaSnapshot>` without a lock.
//!   Every replacement happens under `change` (memtable switches and installs of flushes and
//!   compactions are serialized per table).
//! - A memtable becomes immutable only in pipeline stage 1 (under the log-buffer lock), sealed
//!   at the last LSN allocated before the switch, so every version in an immutable memtable is
//!   older than every version in newer memtables.
//! - A read loads its LSN *before* pinning the snapshot, so every version at or below that LSN
//!   is in a memtable or level the read looks at. A read at an LSN that is not a registered
//!   snapshot retries if that LSN is below the pinned snapshot's `gc_horizon` (a flush may have
//!   dropped versions only such a read could see).
//! - The row cache only holds the newest version in the levels of the current `MetaSnapshot`:
//!   reads insert only at the latest LSN, only if the table's levels did not change since they
//!   pinned and only while no flush is installing (both checked under the row-cache shard
//!   lock). A flush freezes inserts, replaces the cached rows of the keys it flushed, installs
//!   its layer and unfreezes, so no reader ever finds a row older than the levels it pinned.

use crate::cache::{RowCache, RowEntry};
use crate::error::Result;
use crate::extent_store::ExtentStore;
use crate::key::{Lsn, ValueKind, MAX_LSN};
use crate::memtable::{Lookup, Memtable};
use crate::read::get_from_levels;
use crate::table_options::TableOptions;
use crate::version::{LevelSet, MetaSnapshot};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Per-table metadata that changes with flushes (guarded by `TableInner::change`).
#[derive(Debug, Default)]
pub(crate) struct TableState {
    /// Every write to the table with an LSN at or below this is in extents.
    pub(crate) flushed_lsn: Lsn,
    /// Next L0 layer id.
    pub(crate) next_layer: u64,
}

/// The shared state of one sub-table.
pub(crate) struct TableInner {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) db_id: u64,
    write_buffer_size: usize,
    current: ArcSwap<MetaSnapshot>,
    pub(crate) change: Mutex<TableState>,
    /// One flush at a time per table.
    pub(crate) flush_lock: Mutex<()>,
    /// One compaction at a time per table.
    pub(crate) compaction_lock: Mutex<()>,
    /// The zstd dictionary of the table's compactions (`zstd_dictionary_bytes`).
    pub(crate) dictionary: Mutex<crate::extent::dictionary::DictChoice>,
    pub(crate) dropped: AtomicBool,
    /// Set while a flush refreshes cached rows and installs its layer: row-cache inserts are
    /// refused meanwhile (see the module header).
    pub(crate) row_cache_frozen: AtomicBool,
    /// A flush wrote a delete-heavy memtable: the picker runs a delete-triggered compaction.
    pub(crate) delete_triggered: AtomicBool,
    pub(crate) store: Arc<ExtentStore>,
    pub(crate) row_cache: Arc<RowCache>,
    /// The table's own options (fields left `None` follow the database's).
    pub(crate) options: TableOptions,
    /// Called (without locks held) when a memtable became immutable.
    pub(crate) on_switch: Arc<dyn Fn(u32) + Send + Sync>,
}

impl TableInner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        name: String,
        db_id: u64,
        write_buffer_size: usize,
        levels: LevelSet,
        state: TableState,
        store: Arc<ExtentStore>,
        row_cache: Arc<RowCache>,
        options: TableOptions,
        on_switch: Arc<dyn Fn(u32) + Send + Sync>,
    ) -> Self {
        TableInner {
            id,
            name,
            db_id,
            write_buffer_size,
            current: ArcSwap::from_pointee(MetaSnapshot {
                active: Arc::new(Memtable::for_write_buffer(write_buffer_size)),
                immutables: Vec::new(),
                levels: Arc::new(levels),
                version: 1,
                gc_horizon: 0,
            }),
            change: Mutex::new(state),
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            dictionary: Mutex::new(Default::default()),
            dropped: AtomicBool::new(false),
            row_cache_frozen: AtomicBool::new(false),
            delete_triggered: AtomicBool::new(false),
            store,
            row_cache,
            options,
            on_switch,
        }
    }

    /// True if reads of this table use the row cache: the database has one and the table did
    /// not turn it off.
    pub(crate) fn row_cache_enabled(&self) -> bool {
        self.row_cache.enabled() && self.options.row_cache != Some(false)
    }

    /// The current snapshot of memtables and levels.
    pub(crate) fn current(&self) -> Arc<MetaSnapshot> {
        self.current.load_full()
    }

    /// Runs `f` on the current snapshot, pinned without touching its reference count (an
    /// `ArcSwap` guard), for short looks on the write path (the write stall) where an `Arc`
    /// clone per write would bounce one cache line between every writer's core.
    pub(crate) fn with_current<R>(&self, f: impl FnOnce(&MetaSnapshot) -> R) -> R {
        f(&self.current.load())
    }

    /// Replaces the current snapshot; the caller holds `change`.
    pub(crate) fn publish(&self, next: MetaSnapshot) {
        self.current.store(Arc::new(next));
    }

    /// Pins the current snapshot for a read at an LSN from `load_lsn` (called again when a
    /// flush raced with the read; see the module header). `registered` reads (user snapshots)
    /// never retry.
    pub(crate) fn pin(&self, registered: Option<Lsn>, load_lsn: impl Fn() -> Lsn) -> (Lsn, Arc<MetaSnapshot>) {
        if let Some(lsn) = registered {
            return (lsn, self.current());
        }
        loop {
            let lsn = load_lsn();
            let view = self.current();
            if lsn >= view.gc_horizon {
                return (lsn, view);
            }
        }
    }

    /// Runs a read at an LSN from `load_lsn` against the current snapshot, pinned without
    /// touching its reference count (an `ArcSwap` guard; for short reads such as point
    /// lookups). Retries like [`Self::pin`].
    pub(crate) fn with_pinned<R>(
        &self,
        registered: Option<Lsn>,
        load_lsn: impl Fn() -> Lsn,
        read: impl FnOnce(Lsn, &MetaSnapshot) -> R,
    ) -> R {
        loop {
            let lsn = registered.unwrap_or_else(&load_lsn);
            let view = self.current.load();
            if registered.is_some() || lsn >= view.gc_horizon {
                return read(lsn, &view);
            }
        }
    }

    /// The active memtable now, for a writer to bind once [`TableInner::is_active_with_room`]
    /// confirms it under the log-buffer lock (taking the reference outside that lock keeps
    /// the reference count's cache line out of the stage-1 critical section).
    pub(crate) fn active_memtable(&self) -> Arc<Memtable> {
        self.current.load().active.clone()
    }

    /// True if `mem` is still the active memtable and below `write_buffer_size`: what
    /// [`TableInner::memtable_for_write`] would return. Called under the log-buffer lock.
    pub(crate) fn is_active_with_room(&self, mem: &Arc<Memtable>) -> bool {
        let view = self.current.load();
        Arc::ptr_eq(&view.active, mem) && self.has_room(mem)
    }

    /// True while `mem` is below `write_buffer_size` (an active memtable takes writes).
    fn has_room(&self, mem: &Memtable) -> bool {
        mem.memory_usage() < self.write_buffer_size
    }

    /// The active memtable, switching to a new one first if it reached `write_buffer_size`.
    /// Called in pipeline stage 1 (under the log-buffer lock) with the first LSN of the group
    /// being bound, which orders switches with LSNs.
    pub(crate) fn memtable_for_write(&self, first_lsn: Lsn) -> Arc<Memtable> {
        {
            let view = self.current.load();
            if self.has_room(&view.active) {
                return view.active.clone();
            }
        }
        let active = {
            let _g = self.change.lock();
            let view = self.current();
            if self.has_room(&view.active) {
                return view.active.clone();
            }
            self.switch_memtable(&view, first_lsn.saturating_sub(1))
        };
        (self.on_switch)(self.id);
        active
    }

    /// Makes the active memtable immutable (sealed at `last_lsn`) and publishes a new empty
    /// one. The caller holds `change`.
    pub(crate) fn switch_memtable(&self, view: &MetaSnapshot, last_lsn: Lsn) -> Arc<Memtable> {
        view.active.seal(last_lsn);
        let mut immutables = Vec::with_capacity(view.immutables.len() + 1);
        immutables.push(view.active.clone());
        immutables.extend(view.immutables.iter().cloned());
        let active = Arc::new(Memtable::for_write_buffer(self.write_buffer_size));
        self.publish(MetaSnapshot {
            active: active.clone(),
            immutables,
            levels: view.levels.clone(),
            version: view.version,
            gc_horizon: view.gc_horizon,
        });
        active
    }

    /// Number of immutable memtables.
    pub(crate) fn immutable_count(&self) -> usize {
        self.current.load().immutables.len()
    }

    /// Point lookup at `lsn` in `view`: memtables, row cache, then levels. `latest` says that
    /// `lsn` is the latest visible LSN (not a user snapshot), which allows row-cache fills.
    /// `read` sees the value in place (no copy); `None` if the key is absent or deleted.
    pub(crate) fn get_with<R>(
        &self,
        view: &MetaSnapshot,
        key: &[u8],
        lsn: Lsn,
        latest: bool,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        for mem in view.memtables() {
            if mem.min_lsn() > lsn {
                continue;
            }
            match mem.get(key, lsn) {
                Lookup::Value(v) => return Ok(Some(read(v))),
                Lookup::Deleted => return Ok(None),
                Lookup::NotFound => {}
            }
        }
        if view.levels.l0.is_empty() && view.levels.sorted.iter().all(|l| l.extents.is_empty()) {
            return Ok(None);
        }
        let mut read = Some(read);
        let cache_on = self.row_cache_enabled();
        if cache_on {
            // Some(Some(r)): a cached value; Some(None): a cached tombstone; None: no usable row.
            let hit = self
                .row_cache
                .get_with(self.id, key, |row_lsn, value| {
                    if row_lsn > lsn {
                        return None; // newer than this read: bypass
                    }
                    Some(value.map(|v| read.take().map(|f| f(v))))
                })
                .flatten();
            if let Some(r) = hit {
                return Ok(r.flatten());
            }
        }
        let fill = cache_on && latest && lsn >= view.levels.max_lsn;
        let found = get_from_levels(&self.store, &view.levels, key, lsn, |found_lsn, kind, value| {
            let entry = fill.then(|| RowEntry {
                lsn: found_lsn,
                value: match kind {
                    ValueKind::Put => Some(Arc::from(value)),
                    ValueKind::Delete => None,
                },
            });
            let r = match kind {
                ValueKind::Put => read.take().map(|f| f(value)),
                ValueKind::Delete => None,
            };
            (entry, r)
        })?;
        let (entry, r) = match found {
            Some(found) => found,
            // No version in any level: cache the absence as a tombstone older than every
            // version (LSN 0), so repeated lookups of absent hot keys skip the level walk. It
            // is as safe as any cached row: memtables are read first, a flush replaces it with
            // the flushed version, and the version guard refuses it if the levels changed.
            None => (fill.then_some(RowEntry { lsn: 0, value: None }), None),
        };
        if let Some(entry) = entry {
            let version = view.version;
            self.row_cache.insert_if(self.id, key, entry, || {
                !self.row_cache_frozen.load(Ordering::SeqCst) && self.current.load().version == version
            });
        }
        Ok(r)
    }

    /// The LSN of the newest version of `key` (a put or a tombstone), looking at memtables
    /// first, then the levels; `None` if the table holds no version of it. Memtable versions
    /// of groups still being committed count too (they are logged and will become visible).
    /// For the conflict checks of transactions. With `with_value`, also the
    /// value of that version (`None` for a tombstone; always `None` without `with_value`), so
    /// one lookup serves both the check of `get_for_update` and its read.
    pub(crate) fn latest_version(&self, key: &[u8], with_value: bool) -> Result<Option<(Lsn, Option<Vec<u8>>)>> {
        let take =
            |lsn: Lsn, kind: ValueKind, v: &[u8]| (lsn, (with_value && kind == ValueKind::Put).then(|| v.to_vec()));
        let view = self.current.load();
        for mem in view.memtables() {
            let mut c = mem.cursor();
            c.seek(key);
            if c.valid() && c.key() == key {
                if let Some((lsn, kind, v)) = c.version(MAX_LSN) {
                    return Ok(Some(take(lsn, kind, v)));
                }
            }
        }
        get_from_levels(&self.store, &view.levels, key, MAX_LSN, take)
    }

    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }
}
