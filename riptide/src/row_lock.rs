//! The row-lock manager: exclusive locks on (table, key), striped, with lock-wait timeouts and
//! deadlock detection over a wait-for graph; and [`TxnShared`], the per-instance state that a
//! database carries for the transaction layer above it (which holds `Db::begin`).
//!
//! Invariants:
//! - A row is locked by at most one transaction; a lock entry lives in the stripe its key hashes
//!   to, and exists while the row is held or waited for (`holder` is `None` between a release
//!   and the next grant). An entry with no holder and no waiter is removed.
//! - Locks are released only by [`LockManager::release_all`] at the end of a transaction
//!   (strict two-phase locking): a transaction never releases one lock and keeps running. So a
//!   finished transaction has no outgoing wait-for edge, and stale edges pointing at it can
//!   never be part of a cycle.
//! - A waiter records its edge `waiter -> holder` in the wait-for graph, under the stripe lock
//!   (so `holder` is the current holder) and checks, before it sleeps, whether the edge closes
//!   a cycle; if so it is the victim and gets [`LockError::Deadlock`] instead of waiting. When
//!   a row is granted while others wait for it, their edges are repointed to the new holder
//!   under the same stripe lock (a release wakes only one of them, so the sleepers could not do
//!   it themselves); so every edge names its row's current holder (or a holder that has just
//!   released it), and of the transactions in a cycle the last one to register sees the whole
//!   cycle.
//! - Lock order: a stripe mutex, then the graph mutex; never the other way round, and never two
//!   stripes at once.
//! - No thread per transaction: a waiting transaction sleeps in the caller's thread on its row's
//!   condition variable (created with the row's first waiter). A release wakes one waiter of
//!   that row, not every waiter of the stripe; a woken waiter that finds the row free takes
//!   it, and one that finds it taken again waits for the next release, which wakes one again.
//! - Locks may be released before the holder's commit is durable (early lock release, see
//!   `txn`): the lock manager does not know about durability; the transaction layer orders
//!   the acknowledgements.

use crate::contention::{Contention, LockClass};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Transaction state shared by all transactions of one database instance.
#[derive(Default)]
pub(crate) struct TxnShared {
    pub(crate) locks: LockManager,
    pub(crate) next_id: AtomicU64,
    pub(crate) begun: AtomicU64,
    pub(crate) committed: AtomicU64,
    pub(crate) rolled_back: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) snapshot_advances: AtomicU64,
    /// Committed transactions that held row locks, and their total lock hold time (first
    /// lock granted to release), in nanoseconds.
    pub(crate) lock_holders: AtomicU64,
    pub(crate) lock_hold_nanos: AtomicU64,
    /// The row locks of transactions prepared for two-phase commit (`txn/prepared.rs`).
    pub(crate) prepared: PreparedLocks,
}

/// The row locks of prepared transactions, by transaction id: each id's rows, held in the
/// lock table by one owner until the id's decision is applied (or its prepare fails for good).
#[derive(Default)]
pub(crate) struct PreparedLocks {
    by_id: Mutex<HashMap<Vec<u8>, PreparedRows>>,
}

/// A locked row: table id and key.
type LockedRow = (u32, Vec<u8>);
/// A prepared id's rows and their owner in the lock table.
type PreparedRows = (TxnId, Vec<LockedRow>);

impl PreparedLocks {
    /// Registers `rows`, held by `owner`, as `xid`'s; false (nothing registered) when `xid`
    /// holds rows already.
    pub(crate) fn register(&self, xid: Vec<u8>, owner: TxnId, rows: Vec<LockedRow>) -> Result<(), Vec<LockedRow>> {
        let mut by_id = self.by_id.lock();
        if by_id.contains_key(&xid) {
            return Err(rows);
        }
        by_id.insert(xid, (owner, rows));
        Ok(())
    }

    /// Releases the rows of `xid`, if it holds any (and, with `owner`, only if they are that
    /// owner's).
    pub(crate) fn release(&self, locks: &LockManager, xid: &[u8], owner: Option<TxnId>) {
        let held = {
            let mut by_id = self.by_id.lock();
            match by_id.get(xid) {
                Some((o, _)) if owner.is_none_or(|owner| owner == *o) => by_id.remove(xid),
                _ => None,
            }
        };
        if let Some((owner, rows)) = held {
            locks.release_all(owner, rows);
        }
    }

    /// The ids that hold rows, sorted.
    pub(crate) fn ids(&self) -> Vec<Vec<u8>> {
        let mut ids: Vec<_> = self.by_id.lock().keys().cloned().collect();
        ids.sort();
        ids
    }
}

impl std::fmt::Debug for PreparedLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedLocks").field("ids", &self.ids().len()).finish()
    }
}

/// A transaction id (never 0, never reused within a process).
pub(crate) type TxnId = u64;

/// Number of stripes of the lock table (a power of two).
const STRIPES: usize = 256;

/// Why a lock was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockError {
    /// Waited the whole timeout.
    Timeout(Duration),
    /// Waiting would deadlock; the requester is the victim.
    Deadlock,
}

#[derive(Debug)]
struct Entry {
    holder: Option<TxnId>,
    /// The transactions waiting for this row.
    waiting: Vec<TxnId>,
    /// Where this row's waiters sleep (made by its first waiter).
    cond: Option<Arc<Condvar>>,
}

#[derive(Default)]
struct Stripe {
    locks: Mutex<HashMap<(u32, Vec<u8>), Entry>>,
}

/// Who waits for whom: each waiting transaction waits for exactly one holder.
#[derive(Default)]
struct WaitGraph {
    edges: HashMap<TxnId, TxnId>,
}

impl WaitGraph {
    /// True if `from` waiting for `to` closes a cycle (following `to`'s chain leads back).
    fn closes_cycle(&self, from: TxnId, to: TxnId) -> bool {
        let mut cur = to;
        // Each transaction has at most one outgoing edge, so the chain is a path; a path
        // longer than the graph loops without `from` (cannot happen, see the header) and is
        // left to the timeout.
        for _ in 0..=self.edges.len() {
            if cur == from {
                return true;
            }
            match self.edges.get(&cur) {
                Some(&next) => cur = next,
                None => return false,
            }
        }
        false
    }
}

/// Counters of lock waits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LockCounters {
    pub(crate) waits: u64,
    pub(crate) timeouts: u64,
    pub(crate) deadlocks: u64,
    /// Total time spent waiting for rows, in nanoseconds.
    pub(crate) wait_nanos: u64,
}

#[derive(Default)]
struct AtomicLockCounters {
    waits: AtomicU64,
    timeouts: AtomicU64,
    deadlocks: AtomicU64,
    wait_nanos: AtomicU64,
}

/// The lock table of one database instance; see the module header.
pub(crate) struct LockManager {
    stripes: Box<[crossbeam_utils::CachePadded<Stripe>]>,
    graph: Mutex<WaitGraph>,
    hasher: std::collections::hash_map::RandomState,
    counters: AtomicLockCounters,
    contention: Contention,
}

impl Default for LockManager {
    fn default() -> Self {
        LockManager {
            stripes: (0..STRIPES).map(|_| Default::default()).collect(),
            graph: Mutex::new(WaitGraph::default()),
            hasher: Default::default(),
            counters: AtomicLockCounters::default(),
            contention: Contention::default(),
        }
    }
}

impl LockManager {
    fn stripe(&self, table: u32, key: &[u8]) -> &Stripe {
        let mut h = self.hasher.build_hasher();
        table.hash(&mut h);
        key.hash(&mut h);
        &self.stripes[(h.finish() as usize) & (STRIPES - 1)]
    }

    /// Locks (`table`, `key`) for `txn`, waiting up to `timeout` for another holder to finish.
    /// Returns true if the lock was newly granted, false if `txn` already held it.
    pub(crate) fn acquire(
        &self,
        txn: TxnId,
        table: u32,
        key: &[u8],
        timeout: Duration,
        detect_deadlocks: bool,
    ) -> Result<bool, LockError> {
        let stripe = self.stripe(table, key);
        let mut locks = self.contention.lock(LockClass::RowLockStripe, &stripe.locks);
        let owned = (table, key.to_vec());
        let mut deadline: Option<Instant> = None;
        let started = Instant::now();
        let result = loop {
            let holder = match locks.get_mut(&owned) {
                None => {
                    locks.insert(
                        owned,
                        Entry {
                            holder: Some(txn),
                            waiting: Vec::new(),
                            cond: None,
                        },
                    );
                    break Ok(true);
                }
                Some(e) => match e.holder {
                    None => {
                        e.holder = Some(txn);
                        self.repoint_waiters(e, txn);
                        break Ok(true);
                    }
                    Some(h) if h == txn => return Ok(false),
                    Some(h) => h,
                },
            };
            if timeout.is_zero() {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(LockError::Timeout(Duration::ZERO));
            }
            let deadline = *deadline.get_or_insert_with(|| {
                self.counters.waits.fetch_add(1, Ordering::Relaxed);
                started
                    .checked_add(timeout)
                    .unwrap_or(started + Duration::from_secs(86_400 * 365))
            });
            {
                let mut g = self.contention.lock(LockClass::WaitGraph, &self.graph);
                if detect_deadlocks && g.closes_cycle(txn, holder) {
                    g.edges.remove(&txn);
                    drop(g);
                    self.counters.deadlocks.fetch_add(1, Ordering::Relaxed);
                    break Err(LockError::Deadlock);
                }
                g.edges.insert(txn, holder);
            }
            let Some(e) = locks.get_mut(&owned) else {
                continue; // unreachable: we saw the entry above, under the same stripe lock
            };
            e.waiting.push(txn);
            let cond = e.cond.get_or_insert_with(Default::default).clone();
            let timed_out = cond.wait_until(&mut locks, deadline).timed_out();
            self.contention
                .lock(LockClass::WaitGraph, &self.graph)
                .edges
                .remove(&txn);
            let Some(e) = locks.get_mut(&owned) else {
                continue; // unreachable while we are counted as a waiter; treat as free
            };
            if let Some(i) = e.waiting.iter().position(|&w| w == txn) {
                e.waiting.swap_remove(i);
            }
            if timed_out {
                if e.holder.is_none() {
                    // Released just as the wait ended: take it rather than fail.
                    e.holder = Some(txn);
                    self.repoint_waiters(e, txn);
                    break Ok(true);
                }
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                break Err(LockError::Timeout(started.elapsed()));
            }
        };
        if deadline.is_some() {
            self.counters
                .wait_nanos
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        result
    }

    /// The row of `e` was just granted to `holder`: the edges of its other waiters, which
    /// still name the previous holder (a release wakes only one waiter), now name `holder`, so
    /// a cycle through this row is seen by the next requester that closes it. Called under the
    /// row's stripe lock (lock order: stripe, then graph).
    fn repoint_waiters(&self, e: &Entry, holder: TxnId) {
        if e.waiting.is_empty() {
            return;
        }
        let mut g = self.contention.lock(LockClass::WaitGraph, &self.graph);
        for &w in &e.waiting {
            g.edges.insert(w, holder);
        }
    }

    /// Releases every lock in `keys` held by `txn` and wakes one waiter of each.
    pub(crate) fn release_all(&self, txn: TxnId, keys: impl IntoIterator<Item = (u32, Vec<u8>)>) {
        for owned in keys {
            let stripe = self.stripe(owned.0, &owned.1);
            let mut locks = self.contention.lock(LockClass::RowLockStripe, &stripe.locks);
            let Some(e) = locks.get_mut(&owned) else {
                continue;
            };
            if e.holder != Some(txn) {
                continue;
            }
            if e.waiting.is_empty() {
                locks.remove(&owned);
            } else {
                e.holder = None;
                if let Some(cond) = &e.cond {
                    cond.notify_one();
                }
            }
        }
    }

    /// Rows currently held or waited for (for tests and stats).
    pub(crate) fn entries(&self) -> usize {
        self.stripes.iter().map(|s| s.locks.lock().len()).sum()
    }

    pub(crate) fn counters(&self) -> LockCounters {
        let c = &self.counters;
        LockCounters {
            waits: c.waits.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            deadlocks: c.deadlocks.load(Ordering::Relaxed),
            wait_nanos: c.wait_nanos.load(Ordering::Relaxed),
        }
    }

    /// The contention counters of the stripes and the wait-for graph.
    pub(crate) fn contention(&self) -> &Contention {
        &self.contention
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn reentrant_and_exclusive() {
        let m = LockManager::default();
        assert_eq!(m.acquire(1, 0, b"a", T, true), Ok(true));
        assert_eq!(m.acquire(1, 0, b"a", T, true), Ok(false));
        assert_eq!(
            m.acquire(2, 0, b"a", Duration::ZERO, true),
            Err(LockError::Timeout(Duration::ZERO))
        );
        // Another table, same key: a different row.
        assert_eq!(m.acquire(2, 1, b"a", T, true), Ok(true));
        m.release_all(1, [(0, b"a".to_vec())]);
        assert_eq!(m.acquire(2, 0, b"a", T, true), Ok(true));
        m.release_all(2, [(0, b"a".to_vec()), (1, b"a".to_vec())]);
        assert_eq!(m.entries(), 0);
    }

    #[test]
    fn release_by_non_holder_is_ignored() {
        let m = LockManager::default();
        m.acquire(1, 0, b"a", T, true).unwrap();
        m.release_all(2, [(0, b"a".to_vec())]);
        assert!(m.acquire(3, 0, b"a", Duration::from_millis(20), true).is_err());
    }

    #[test]
    fn waiter_times_out_then_gets_lock_after_release() {
        let m = Arc::new(LockManager::default());
        m.acquire(1, 0, b"k", T, true).unwrap();
        let t0 = Instant::now();
        match m.acquire(2, 0, b"k", Duration::from_millis(50), true) {
            Err(LockError::Timeout(w)) => assert!(w >= Duration::from_millis(50)),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let m2 = m.clone();
        let waiter = std::thread::spawn(move || m2.acquire(2, 0, b"k", T, true));
        std::thread::sleep(Duration::from_millis(30));
        m.release_all(1, [(0, b"k".to_vec())]);
        assert_eq!(waiter.join().unwrap(), Ok(true));
        assert_eq!(m.counters().timeouts, 1);
    }

    #[test]
    fn two_way_deadlock_has_exactly_one_victim() {
        let m = Arc::new(LockManager::default());
        let barrier = Arc::new(Barrier::new(2));
        let victims = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = [(1u64, b"a", b"b"), (2u64, b"b", b"a")]
            .into_iter()
            .map(|(id, first, second)| {
                let (m, barrier, victims) = (m.clone(), barrier.clone(), victims.clone());
                std::thread::spawn(move || {
                    m.acquire(id, 0, first, T, true).unwrap();
                    barrier.wait();
                    let r = m.acquire(id, 0, second, T, true);
                    if r == Err(LockError::Deadlock) {
                        victims.fetch_add(1, Ordering::SeqCst);
                    } else {
                        assert_eq!(r, Ok(true));
                    }
                    m.release_all(id, [(0, first.to_vec()), (0, second.to_vec())]);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(victims.load(Ordering::SeqCst), 1);
        assert_eq!(m.entries(), 0);
    }

    /// Two transactions, each holding its own row, wait for a third's row; its release wakes
    /// only one of them, which then asks for the other's row: a deadlock that must be found at
    /// once although the other one's edge was registered against the third.
    #[test]
    fn a_deadlock_through_a_row_handed_over_by_one_wakeup_is_found() {
        let m = Arc::new(LockManager::default());
        let timeout = Duration::from_secs(3);
        m.acquire(9, 0, b"r", T, true).unwrap();
        let barrier = Arc::new(Barrier::new(3));
        let handles: Vec<_> = [(1u64, b"s1", b"s2"), (2u64, b"s2", b"s1")]
            .into_iter()
            .map(|(id, own, other)| {
                let (m, barrier) = (m.clone(), barrier.clone());
                std::thread::spawn(move || {
                    m.acquire(id, 0, own, T, true).unwrap();
                    barrier.wait();
                    let started = Instant::now();
                    let r = m
                        .acquire(id, 0, b"r", timeout, true)
                        .and_then(|_| m.acquire(id, 0, other, timeout, true));
                    m.release_all(id, [(0, own.to_vec()), (0, other.to_vec()), (0, b"r".to_vec())]);
                    (r, started.elapsed())
                })
            })
            .collect();
        barrier.wait();
        // Both are waiting for `r` before it is released.
        while m.counters().waits < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        m.release_all(9, [(0, b"r".to_vec())]);
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let victims = results.iter().filter(|(r, _)| *r == Err(LockError::Deadlock)).count();
        assert_eq!(victims, 1, "{results:?}");
        assert!(
            results.iter().all(|(r, waited)| r.is_ok() || *waited < timeout),
            "{results:?}"
        );
        assert_eq!(m.counters().timeouts, 0, "{results:?}");
        assert_eq!(m.entries(), 0);
    }

    #[test]
    fn without_detection_a_deadlock_times_out() {
        let m = Arc::new(LockManager::default());
        m.acquire(1, 0, b"a", T, false).unwrap();
        m.acquire(2, 0, b"b", T, false).unwrap();
        let m2 = m.clone();
        let h = std::thread::spawn(move || m2.acquire(1, 0, b"b", Duration::from_millis(300), false));
        std::thread::sleep(Duration::from_millis(20));
        let r = m.acquire(2, 0, b"a", Duration::from_millis(100), false);
        assert!(matches!(r, Err(LockError::Timeout(_))), "{r:?}");
        m.release_all(2, [(0, b"a".to_vec()), (0, b"b".to_vec())]);
        assert_eq!(h.join().unwrap(), Ok(true));
    }

    #[test]
    fn cycle_check_follows_chains() {
        let mut g = WaitGraph::default();
        g.edges.insert(2, 3);
        g.edges.insert(3, 4);
        assert!(g.closes_cycle(4, 2));
        assert!(!g.closes_cycle(5, 2));
        assert!(!g.closes_cycle(1, 9));
    }
}
