//! [`Snapshot`]s and the list of live ones.
//!
//! Invariant: a snapshot's LSN is read and registered under the list's lock, and flushes and
//! compactions read the visible LSN and the list under the same lock ([`SnapshotList::gc_view`]).
//! So a version a flush drops is invisible to every registered snapshot, and any snapshot taken
//! after the flush read the list has an LSN at or above the flush's visible LSN.

use crate::key::Lsn;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Live snapshots, counted per LSN.
#[derive(Default)]
pub(crate) struct SnapshotList {
    counts: Mutex<BTreeMap<Lsn, usize>>,
}

impl SnapshotList {
    /// Registers a snapshot at the LSN `visible` returns (called under the lock).
    pub(crate) fn acquire(self: &Arc<Self>, db_id: u64, visible: impl FnOnce() -> Lsn) -> Snapshot {
        let mut counts = self.counts.lock();
        let lsn = visible();
        *counts.entry(lsn).or_insert(0) += 1;
        drop(counts);
        Snapshot {
            inner: Arc::new(SnapshotInner {
                lsn,
                db_id,
                list: self.clone(),
            }),
        }
    }

    fn release(&self, lsn: Lsn) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&lsn) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&lsn);
            }
        }
    }

    /// The oldest live snapshot's LSN.
    pub(crate) fn oldest(&self) -> Option<Lsn> {
        self.counts.lock().keys().next().copied()
    }

    /// The visible LSN (from `visible`) and the sorted LSNs of live snapshots, atomically with
    /// respect to new snapshots.
    pub(crate) fn gc_view(&self, visible: impl FnOnce() -> Lsn) -> (Lsn, Vec<Lsn>) {
        let counts = self.counts.lock();
        (visible(), counts.keys().copied().collect())
    }
}

/// True if some snapshot in `snapshots` (sorted) is in `[lo, hi)`: a version at `lo` that a
/// newer version at `hi` hides is still visible to that snapshot, so flushes and compactions
/// keep it.
pub(crate) fn snapshot_between(snapshots: &[Lsn], lo: Lsn, hi: Lsn) -> bool {
    let i = snapshots.partition_point(|&s| s < lo);
    i < snapshots.len() && snapshots[i] < hi
}

struct SnapshotInner {
    lsn: Lsn,
    db_id: u64,
    list: Arc<SnapshotList>,
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        self.list.release(self.lsn);
    }
}

/// A consistent point-in-time view of every table of a database ([`crate::Db::snapshot`]).
///
/// Cheap to clone; the view stays readable until the last clone drops.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<SnapshotInner>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("lsn", &self.inner.lsn).finish()
    }
}

impl Snapshot {
    /// The LSN this snapshot reads at: it sees every write with a smaller or equal LSN.
    pub fn lsn(&self) -> Lsn {
        self.inner.lsn
    }

    pub(crate) fn db_id(&self) -> u64 {
        self.inner.db_id
    }
}
