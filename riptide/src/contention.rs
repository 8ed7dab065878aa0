//! Contention counters per lock class: how often a thread found one of the engine's shared
//! mutexes taken, and how long it then waited. They make a serial section visible on a machine
//! with few cores, where throughput hides it ([`crate::Db::lock_contention`]).
//!
//! Cost: an uncontended acquisition is one `try_lock`, which is what `lock` does first anyway;
//! only a thread that has to wait reads the clock (twice) and adds to its class's counters, so
//! the counters are always on.
//!
//! Spinning: a component may give its short-held classes a spin budget
//! ([`Contention::with_spin`]). A thread that finds such a mutex taken then watches it (a
//! read, then `try_lock` once it looks free) for up to the budget before it blocks in
//! `parking_lot`, which parks it after a few yields. A critical section of a few hundred
//! nanoseconds is then handed to a thread that is already running instead of to a parked one
//! that a futex must wake first (on 16 cores at 16 writers the log-buffer lock turned over
//! once per 2.4 µs, mostly wake-up latency). The budget bounds the time a spinner can waste
//! when the holder is descheduled.
//!
//! Invariants:
//! - Counters only grow (relaxed atomics, one cache line per class); a snapshot is not one
//!   atomic cut.
//! - A wait is counted once per contended acquisition, whatever the mutex's fairness did,
//!   spinning or blocking.
//! - A class spins only if it was given a budget; spinning never replaces the blocking
//!   `lock`, it only precedes it.

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Pause instructions between two looks at a taken mutex while spinning (a pause takes from
/// about 10 to about 140 cycles, depending on the CPU).
const PAUSES_PER_LOOK: u32 = 4;

/// The counters of one component (the pipeline, the lock manager); see the module header.
#[derive(Default)]
pub(crate) struct Contention {
    slots: [CachePadded<Slot>; LockClass::ALL.len()],
    /// Spin budget per class, in nanoseconds (0: block at once).
    spin_nanos: [u64; LockClass::ALL.len()],
}

impl Contention {
    /// Counters whose `classes` spin up to `budget` before blocking (see the module header);
    /// a zero budget spins nowhere.
    pub(crate) fn with_spin(classes: &[LockClass], budget: Duration) -> Self {
        let mut c = Contention::default();
        let nanos = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        for class in classes {
            c.spin_nanos[class.index()] = nanos;
        }
        c
    }

    /// The spin budget of `class`.
    #[cfg(test)]
    pub(crate) fn spin_budget(&self, class: LockClass) -> Duration {
        Duration::from_nanos(self.spin_nanos[class.index()])
    }

    /// Locks `mutex`, counting the wait under `class` if it was taken.
    #[inline]
    pub(crate) fn lock<'a, T>(&self, class: LockClass, mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        if let Some(guard) = mutex.try_lock() {
            return guard;
        }
        self.lock_contended(class, mutex)
    }

    #[cold]
    fn lock_contended<'a, T>(&self, class: LockClass, mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        let started = Instant::now();
        let guard = match spin_for(mutex, started, self.spin_nanos[class.index()]) {
            Some(guard) => guard,
            None => mutex.lock(),
        };
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

/// Watches `mutex` until it can be taken or `budget_nanos` have passed since `started`
/// (`None` then, and at once for a zero budget; the budget is exact to a look, a few pauses).
/// Reads the lock state before each `try_lock`, so spinners share the mutex's cache line
/// instead of bouncing it.
fn spin_for<'a, T>(mutex: &'a Mutex<T>, started: Instant, budget_nanos: u64) -> Option<MutexGuard<'a, T>> {
    if budget_nanos == 0 {
        return None;
    }
    loop {
        if !mutex.is_locked() {
            if let Some(guard) = mutex.try_lock() {
                return Some(guard);
            }
        }
        if started.elapsed().as_nanos() as u64 >= budget_nanos {
            return None;
        }
        for _ in 0..PAUSES_PER_LOOK {
            std::hint::spin_loop();
        }
    }
}

/// Spins until `done()` or `budget` has passed (the same watching as a contended lock's):
/// for a waiter whose condition usually turns true within a few hundred nanoseconds, a
/// futex sleep and wake-up cost more than watching. Returns `done()`'s last answer.
pub(crate) fn spin_until(budget: Duration, done: impl Fn() -> bool) -> bool {
    if budget.is_zero() {
        return done();
    }
    let started = Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() >= budget {
            return done();
        }
        for _ in 0..PAUSES_PER_LOOK {
            std::hint::spin_loop();
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

    /// A spinner gets a mutex released within its budget without blocking, and gives up at
    /// the end of its budget while the mutex stays taken; a zero budget never spins.
    #[test]
    fn spinning_takes_a_mutex_released_in_time_and_gives_up_after_the_budget() {
        let m = Arc::new(Mutex::new(0u32));
        let held = m.lock();
        let started = Instant::now();
        assert!(spin_for(&m, started, 0).is_none());
        assert!(started.elapsed() < Duration::from_millis(50));
        let started = Instant::now();
        assert!(spin_for(&m, started, 2_000_000).is_none());
        assert!(started.elapsed() >= Duration::from_millis(2));
        drop(held);

        // Released 5 ms into a 10 s budget: taken by spinning, long before the budget ends.
        let held = m.lock();
        let m2 = m.clone();
        let spinner = std::thread::spawn(move || {
            let started = Instant::now();
            let guard = spin_for(&m2, started, 10_000_000_000).map(|mut g| {
                *g += 1;
            });
            (guard.is_some(), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(5));
        drop(held);
        let (took, waited) = spinner.join().unwrap();
        assert!(took);
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(*m.lock(), 1);
    }

    /// Only the classes given a budget spin, and a spinning acquisition still counts its wait.
    #[test]
    fn only_classes_given_a_budget_spin_and_their_waits_count() {
        let c = Arc::new(Contention::with_spin(&[LockClass::LogBuffer], Duration::from_secs(10)));
        assert_eq!(c.spin_nanos[LockClass::LogBuffer.index()], 10_000_000_000);
        assert!(LockClass::ALL
            .iter()
            .filter(|&&k| k != LockClass::LogBuffer)
            .all(|k| c.spin_nanos[k.index()] == 0));
        let m = Arc::new(Mutex::new(()));
        let held = m.lock();
        let (c2, m2) = (c.clone(), m.clone());
        let waiter = std::thread::spawn(move || {
            let _g = c2.lock(LockClass::LogBuffer, &m2);
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        waiter.join().unwrap();
        let mut r = empty_report();
        c.add_to(&mut r);
        let log = r.iter().find(|x| x.class == LockClass::LogBuffer).unwrap();
        assert_eq!(log.waits, 1);
        assert!(log.wait_nanos >= 10_000_000, "{log:?}");
    }

    /// CPU time this thread has used.
    fn thread_cpu_time() -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// A class with a budget really spins (its waiter burns CPU while the mutex is held), a
    /// class without one blocks (its waiter sleeps).
    #[test]
    fn a_waiter_with_a_budget_burns_cpu_and_one_without_sleeps() {
        let c = Arc::new(Contention::with_spin(&[LockClass::LogBuffer], Duration::from_secs(10)));
        for (class, spins) in [(LockClass::LogBuffer, true), (LockClass::LogFile, false)] {
            let m = Arc::new(Mutex::new(()));
            let held = m.lock();
            let (c2, m2) = (c.clone(), m.clone());
            let waiter = std::thread::spawn(move || {
                let before = thread_cpu_time();
                let _g = c2.lock(class, &m2);
                thread_cpu_time() - before
            });
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
            let cpu = waiter.join().unwrap();
            if spins {
                assert!(
                    cpu >= Duration::from_millis(5),
                    "{class:?} spun for only {cpu:?} of CPU"
                );
            } else {
                assert!(cpu < Duration::from_millis(5), "{class:?} used {cpu:?} of CPU blocking");
            }
        }
    }

    #[test]
    fn spin_until_sees_a_condition_turn_true_and_gives_up_after_its_budget() {
        assert!(!spin_until(Duration::ZERO, || false));
        assert!(spin_until(Duration::ZERO, || true));
        let started = Instant::now();
        assert!(!spin_until(Duration::from_millis(2), || false));
        assert!(started.elapsed() >= Duration::from_millis(2));
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f2 = flag.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            f2.store(true, Ordering::Release);
        });
        assert!(spin_until(Duration::from_secs(10), || flag.load(Ordering::Acquire)));
        setter.join().unwrap();
    }
}
