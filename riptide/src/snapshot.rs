//! [`Snapshot`]s and the list of live ones.
//!
//! The list is striped: a thread registers its snapshots in its own stripe, under that
//! stripe's lock only, so snapshot-isolation transactions on many cores do not all take one
//! mutex twice each (to begin and to end).
//!
//! Invariant: a snapshot's LSN is read and registered under its stripe's lock, and flushes and
//! compactions read the visible LSN and the list under every stripe's lock
//! ([`SnapshotList::gc_view`]). So a version a flush drops is invisible to every registered
//! snapshot, and any snapshot taken after the flush read the list has an LSN at or above the
//! flush's visible LSN. A snapshot is released in the stripe it was registered in.

use crate::key::Lsn;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Stripes of the list.
const STRIPES: usize = 16;

/// Live snapshots, counted per LSN, in stripes.
pub(crate) struct SnapshotList {
    stripes: [CachePadded<Mutex<BTreeMap<Lsn, usize>>>; STRIPES],
}

impl Default for SnapshotList {
    fn default() -> Self {
        SnapshotList {
            stripes: std::array::from_fn(|_| CachePadded::new(Mutex::new(BTreeMap::new()))),
        }
    }
}

impl SnapshotList {
    /// Registers a snapshot at the LSN `visible` returns (called under the stripe's lock).
    pub(crate) fn acquire(self: &Arc<Self>, db_id: u64, visible: impl FnOnce() -> Lsn) -> Snapshot {
        let stripe = crate::thread_index::thread_index() % STRIPES;
        let mut counts = self.stripes[stripe].lock();
        let lsn = visible();
        *counts.entry(lsn).or_insert(0) += 1;
        drop(counts);
        Snapshot {
            inner: Arc::new(SnapshotInner {
                lsn,
                db_id,
                stripe,
                list: self.clone(),
            }),
        }
    }

    fn release(&self, stripe: usize, lsn: Lsn) {
        let mut counts = self.stripes[stripe].lock();
        if let Some(n) = counts.get_mut(&lsn) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&lsn);
            }
        }
    }

    /// The oldest live snapshot's LSN (every stripe locked at once, so the answer is one
    /// moment's).
    pub(crate) fn oldest(&self) -> Option<Lsn> {
        self.lock_all().iter().filter_map(|c| c.keys().next().copied()).min()
    }

    /// Every stripe, locked in order.
    fn lock_all(&self) -> Vec<parking_lot::MutexGuard<'_, BTreeMap<Lsn, usize>>> {
        self.stripes.iter().map(|s| s.lock()).collect()
    }

    /// The visible LSN (from `visible`) and the sorted LSNs of live snapshots, atomically with
    /// respect to new snapshots: every stripe is locked (in order) while `visible` runs.
    pub(crate) fn gc_view(&self, visible: impl FnOnce() -> Lsn) -> (Lsn, Vec<Lsn>) {
        let locked = self.lock_all();
        let lsn = visible();
        let mut live: Vec<Lsn> = locked.iter().flat_map(|c| c.keys().copied()).collect();
        drop(locked);
        live.sort_unstable();
        live.dedup();
        (lsn, live)
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
    /// The stripe it is registered in.
    stripe: usize,
    list: Arc<SnapshotList>,
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        self.list.release(self.stripe, self.lsn);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots registered by many threads (every stripe) are all in the GC view and the
    /// oldest, each LSN once; dropping them, from other threads than took them, empties the
    /// list.
    #[test]
    fn snapshots_of_every_stripe_are_seen_and_released() {
        let list = Arc::new(SnapshotList::default());
        let taken: Vec<Snapshot> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2 * STRIPES as u64)
                .map(|t| {
                    let list = list.clone();
                    s.spawn(move || vec![list.acquire(1, || 100 + t), list.acquire(1, || 100 + t % 3)])
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let (visible, live) = list.gc_view(|| 7);
        assert_eq!(visible, 7);
        let want: Vec<Lsn> = (100..100 + 2 * STRIPES as u64).collect();
        assert_eq!(live, want, "sorted, each LSN once");
        assert_eq!(list.oldest(), Some(100));
        // Released on another thread than took them: all but thread 0's two and thread 1's
        // first (LSNs 100, 100, 101).
        let mut taken = taken;
        let rest = taken.split_off(3);
        std::thread::spawn(move || drop(rest)).join().unwrap();
        assert_eq!(list.gc_view(|| 0).1, vec![100, 101]);
        drop(taken);
        assert_eq!(list.oldest(), None);
        assert_eq!(list.gc_view(|| 0).1, Vec::<Lsn>::new());
    }
}
