//! Contention counters per lock class: how often a thread found one of the engine's shared
//! mutexes taken, and how long it then waited. They make a serial section visible on a machine
//! with few cores, where throughput hides it ([`crate::Db::lock_contention`]).
//!
//! Cost: an uncontended acquisition is one `try_lock`, which is what `lock` does first anyway;
//! only a thread that has to wait reads the clock (twice) and adds to its class's counters, so
//! the counters are always on.
//!
//! Invariants:
//! - Counters only grow (relaxed atomics, one cache line per class); a snapshot is not one
//!   atomic cut.
//! - A wait is counted once per contended acquisition, whatever the mutex's fairness did.

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The shared mutexes of the engine's hot paths, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockClass {
    /// A write task queue (joining a group).
    WriteQueue,
    /// Stage 1: the shared log buffer, LSN allocation and memtable binding.
    LogBuffer,
    /// Stage 2: the redo log file (held across the write and fsync).
    LogFile,
    /// Who drives stage 2.
    LogDriver,
    /// Stage 4: the commit window.
    CommitWindow,
    /// A stripe of the row-lock table.
    RowLockStripe,
    /// The deadlock detector's wait-for graph.
    WaitGraph,
}

impl LockClass {
    /// Every class, in the order of the report of [`crate::Db::lock_contention`].
    pub const ALL: [LockClass; 7] = [
        LockClass::WriteQueue,
        LockClass::LogBuffer,
        LockClass::LogFile,
        LockClass::LogDriver,
        LockClass::CommitWindow,
        LockClass::RowLockStripe,
        LockClass::WaitGraph,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            LockClass::WriteQueue => "write queue",
            LockClass::LogBuffer => "log buffer",
            LockClass::LogFile => "log file",
            LockClass::LogDriver => "log driver",
            LockClass::CommitWindow => "commit window",
            LockClass::RowLockStripe => "row-lock stripe",
            LockClass::WaitGraph => "wait-for graph",
        }
    }
}

/// Contention of one lock class since open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockContention {
    /// Which mutex.
    pub class: LockClass,
    /// Acquisitions that found it taken and waited.
    pub waits: u64,
    /// Total time those acquisitions waited, in nanoseconds.
    pub wait_nanos: u64,
}

#[derive(Default)]
struct Slot {
    waits: AtomicU64,
    wait_nanos: AtomicU64,
}

/// The counters of one component (the pipeline, the lock manager); see the module header.
#[derive(Default)]
pub(crate) struct Contention {
    slots: [CachePadded<Slot>; LockClass::ALL.len()],
}

impl Contention {
    /// Locks `mutex`, counting the wait under `class` if it was taken.
    #[inline]
    pub(crate) fn lock<'a, T>(&self, class: LockClass, mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        if let Some(guard) = mutex.try_lock() {
            return guard;
        }
        let started = Instant::now();
        let guard = mutex.lock();
        let slot = &self.slots[class.index()];
        slot.waits.fetch_add(1, Ordering::Relaxed);
        slot.wait_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        guard
    }

    /// Adds this component's counters to `into` (indexed like [`LockClass::ALL`]).
    pub(crate) fn add_to(&self, into: &mut [LockContention]) {
        for (slot, out) in self.slots.iter().zip(into.iter_mut()) {
            out.waits += slot.waits.load(Ordering::Relaxed);
            out.wait_nanos += slot.wait_nanos.load(Ordering::Relaxed);
        }
    }
}

/// A zeroed report, one entry per class in the order of [`LockClass::ALL`].
pub(crate) fn empty_report() -> Vec<LockContention> {
    LockClass::ALL
        .iter()
        .map(|&class| LockContention {
            class,
            waits: 0,
            wait_nanos: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn uncontended_locks_count_nothing() {
        let c = Contention::default();
        let m = Mutex::new(0);
        for _ in 0..1000 {
            *c.lock(LockClass::LogBuffer, &m) += 1;
        }
        let mut r = empty_report();
        c.add_to(&mut r);
        assert!(r.iter().all(|x| x.waits == 0 && x.wait_nanos == 0), "{r:?}");
    }

    #[test]
    fn a_contended_lock_counts_its_wait_under_its_class() {
        let c = Arc::new(Contention::default());
        let m = Arc::new(Mutex::new(()));
        let held = m.lock();
        let (c2, m2) = (c.clone(), m.clone());
        let waiter = std::thread::spawn(move || {
            let _g = c2.lock(LockClass::CommitWindow, &m2);
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(held);
        waiter.join().unwrap();
        let mut r = empty_report();
        c.add_to(&mut r);
        let window = r.iter().find(|x| x.class == LockClass::CommitWindow).unwrap();
        assert_eq!(window.waits, 1);
        assert!(window.wait_nanos >= 20_000_000, "{window:?}");
        assert!(r
            .iter()
            .filter(|x| x.class != LockClass::CommitWindow)
            .all(|x| x.waits == 0));
    }
}
