//! [`Completion`] and [`WriteHandle`]: how a writer learns that its batch committed.
//!
//! Invariants: a completion is completed exactly once; a callback runs exactly once, either on
//! the thread that completes the write or, if registered after completion, on the registering
//! thread. An invitation runs at most once, on a thread waiting in [`Completion::wait`]. Two
//! kinds: an offer to help insert ([`Completion::invite`]), which is optional (completing drops
//! one not yet taken; one taken just before may still run and find nothing left to do), and
//! a commit handed over by the log driver ([`Completion::invite_waiting`]), which must run:
//! it completes this completion's own group, so nothing else completes it first, and an
//! offer to help never replaces a pending invitation (a commit replaces a pending offer,
//! which is stale by then: the group it offers to insert is inserted).
//!
//! A waiter may first poll for a while (its spin budget, `Options::write_wait_spin_micros`)
//! instead of sleeping at once: when its group commits within the budget, neither side makes a
//! futex call, and the waiter does not pay a wake-up's latency (RocksDB's writers poll the
//! same way before they block). `done` and `invited` are set after the state they announce,
//! under the lock, so a poller that sees one finds that state when it takes the lock.
//!
//! Waking a sleeping waiter costs its completer a futex call. [`complete_many`] completes the
//! waiters that are awake itself (cheap) and wakes only a few sleepers, handing each of them
//! half of the sleepers left, which it completes before its `wait` returns: the completer (the
//! log driver, one thread for the whole machine) makes about log2(n) wake-ups instead of n
//! (16 cores, fillrandom at 16 / 64 / 256 threads: +0.6 to +3.4 % / +3 % / +9 %).
//! Work is handed only to a completion whose waiter is inside [`Completion::wait`]: `waiter`
//! leaves `NO_WAITER` on entry and returns to it only under the lock, after the waiter took its
//! outcome (and the handed work with it), so handed work always runs.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Callback = Box<dyn FnOnce(Result<()>) + Send>;
/// Work a waiter is invited to do while it waits (inserting batches of its commit group).
pub(crate) type Invitation = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    result: Option<Result<()>>,
    callback: Option<Callback>,
    invitation: Option<Invitation>,
    /// When it was completed, if `timed`.
    completed_at: Option<Instant>,
    /// Completions this one's waiter completes, with their outcome, before its `wait` returns.
    handed: Option<Handed>,
}

/// Completions handed to a woken waiter to complete (see [`complete_many`]).
struct Handed {
    completions: Vec<Arc<Completion>>,
    result: Result<()>,
    /// When they became complete (their wake-up time counts from there).
    since: Option<Instant>,
}

/// No thread is inside [`Completion::wait`] (yet, or any more).
const NO_WAITER: u8 = 0;
/// A thread is inside `wait`, polling or running invited work.
const WAITER_AWAKE: u8 = 1;
/// A thread is inside `wait`, asleep on the condition variable.
const WAITER_ASLEEP: u8 = 2;
/// Sleepers [`complete_many`] wakes itself when no more are left than this.
const DIRECT_WAKES: usize = 2;
/// A yield that took this long gave the core away ([`Completion::poll`]; RocksDB's
/// `write_thread_slow_yield_usec`).
const SLOW_YIELD: Duration = Duration::from_micros(3);
/// Slow yields after which an adaptive poller sleeps (RocksDB: 3).
const SLOW_YIELDS: u32 = 3;

/// Shared between a writer and the pipeline.
#[derive(Default)]
pub(crate) struct Completion {
    state: Mutex<State>,
    cond: Condvar,
    /// Completed (set after `state.result`).
    done: AtomicBool,
    /// An invitation waits (set after `state.invitation`).
    invited: AtomicBool,
    /// How long [`Completion::wait`] polls before it sleeps.
    spin: Duration,
    /// Polling stops early once the CPU proves contended (see [`Completion::poll`]).
    adaptive: bool,
    /// One of the timed writes of the commit-time split: completing records when.
    timed: bool,
    /// Whether a thread is inside `wait`, and asleep (`NO_WAITER`, `WAITER_AWAKE`,
    /// `WAITER_ASLEEP`); changed to `NO_WAITER` or `WAITER_ASLEEP` only under the lock.
    waiter: AtomicU8,
}

impl Completion {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A completion whose waiter polls for up to `spin` before sleeping (giving up early on
    /// a contended CPU if `adaptive`); a `timed` one records when it completed
    /// ([`Completion::woke_after`]).
    pub(crate) fn with_spin(spin: Duration, adaptive: bool, timed: bool) -> Arc<Self> {
        Arc::new(Completion {
            spin,
            adaptive,
            timed,
            ..Self::default()
        })
    }

    /// For a timed completion that was completed: how long ago that was (called right after
    /// [`Completion::wait`] returns, the time its waiter took to resume).
    pub(crate) fn woke_after(&self) -> Option<Duration> {
        if !self.timed {
            return None; // the usual case: no lock on the write path
        }
        self.state.lock().completed_at.map(|at| at.elapsed())
    }

    /// Records the outcome, wakes a waiter and runs the callback (outside the lock).
    pub(crate) fn complete(&self, result: Result<()>) {
        self.complete_handing(result, Vec::new(), None);
    }

    /// Completes this completion and, if a thread waits on it, hands it `others` to complete
    /// with the same outcome before its `wait` returns. Returns the completions not handed
    /// over (all of them if no thread waits, or if this one was already completed). `since`:
    /// when the outcome became known (timed completions record it as their completion time).
    fn complete_handing(
        &self,
        result: Result<()>,
        others: Vec<Arc<Completion>>,
        since: Option<Instant>,
    ) -> Vec<Arc<Completion>> {
        let (callback, _invitation, others) = {
            let mut st = self.state.lock();
            if st.result.is_some() {
                return others;
            }
            let others = if !others.is_empty() && self.waiter.load(Ordering::Relaxed) != NO_WAITER {
                st.handed = Some(Handed {
                    completions: others,
                    result: result.clone(),
                    since,
                });
                Vec::new()
            } else {
                others
            };
            let cb = st.callback.take();
            st.result = Some(result.clone());
            if self.timed {
                st.completed_at = Some(since.unwrap_or_else(Instant::now));
            }
            self.done.store(true, Ordering::Release);
            self.cond.notify_all();
            // Dropped outside the lock: it may hold the last reference to a commit group.
            (cb, st.invitation.take(), others)
        };
        if let Some(cb) = callback {
            run_callback(cb, result);
        }
        others
    }

    /// Offers optional `work` to the thread waiting (or about to wait) on this completion,
    /// waking it. Returns false, dropping `work`, if the write already completed or another
    /// invitation is pending (which may be a commit handed over, that must not be lost).
    pub(crate) fn invite(&self, work: Invitation) -> bool {
        let mut st = self.state.lock();
        if st.result.is_some() || st.invitation.is_some() {
            return false;
        }
        st.invitation = Some(work);
        self.invited.store(true, Ordering::Release);
        self.cond.notify_one();
        true
    }

    /// Offers `work` to the thread inside [`Completion::wait`] on this completion, waking it if
    /// it sleeps. Gives `work` back if no thread waits on it (an asynchronous write, or a
    /// writer that has not started waiting) or if it completed: work given here always runs,
    /// as long as completing this completion waits for that work.
    pub(crate) fn invite_waiting(&self, work: Invitation) -> std::result::Result<(), Invitation> {
        let mut st = self.state.lock();
        // `waiter` returns to NO_WAITER only under this lock, after the waiter took its outcome.
        if st.result.is_some() || self.waiter.load(Ordering::Relaxed) == NO_WAITER {
            return Err(work);
        }
        st.invitation = Some(work);
        self.invited.store(true, Ordering::Release);
        self.cond.notify_one();
        Ok(())
    }

    /// A thread is inside [`Completion::wait`] on this completion and awake (polling, or
    /// running invited work): work handed to it starts without a wake-up. A hint only.
    pub(crate) fn has_awake_waiter(&self) -> bool {
        self.waiter.load(Ordering::Relaxed) == WAITER_AWAKE
    }

    /// Blocks until completed, doing the work it is invited to meanwhile; polls for up to
    /// the spin budget before each sleep. Completes the completions handed to it, if any,
    /// before it returns.
    pub(crate) fn wait(&self) -> Result<()> {
        self.waiter.store(WAITER_AWAKE, Ordering::Relaxed);
        loop {
            self.poll();
            let mut st = self.state.lock();
            loop {
                if let Some(r) = &st.result {
                    let r = r.clone();
                    let handed = st.handed.take();
                    self.waiter.store(NO_WAITER, Ordering::Relaxed);
                    drop(st);
                    if let Some(h) = handed {
                        complete_many(h.completions, &h.result, h.since);
                    }
                    return r;
                }
                if let Some(work) = st.invitation.take() {
                    self.invited.store(false, Ordering::Relaxed);
                    drop(st);
                    work();
                    break; // poll again: the group is usually about to commit
                }
                self.waiter.store(WAITER_ASLEEP, Ordering::Relaxed);
                self.cond.wait(&mut st);
                self.waiter.store(WAITER_AWAKE, Ordering::Relaxed);
            }
        }
    }

    /// Polls until completed or invited, for at most the spin budget: a few pause
    /// instructions, then yielding the CPU between looks (so a poller never keeps a runnable
    /// thread off a core).
    ///
    /// Adaptive: a yield that returns after [`SLOW_YIELD`] or more gave the core to another
    /// runnable thread, so the CPU has more runnable threads than cores; after
    /// [`SLOW_YIELDS`] such yields the poller sleeps instead (RocksDB's adaptive yield does the
    /// same). Pollers then never crowd out the threads whose work they wait for: on 16 cores,
    /// 64 polling writers kept 12.5 cores busy and left the log driver yielding its core
    /// among them.
    fn poll(&self) {
        if self.spin.is_zero() {
            return;
        }
        let started = Instant::now();
        let mut looks = 0u32;
        let mut slow_yields = 0u32;
        while !self.done.load(Ordering::Acquire) && !self.invited.load(Ordering::Acquire) {
            looks += 1;
            if looks <= 64 {
                std::hint::spin_loop();
                continue;
            }
            if !self.adaptive {
                std::thread::yield_now();
                if looks.is_multiple_of(8) && started.elapsed() >= self.spin {
                    return;
                }
                continue;
            }
            let before = Instant::now();
            std::thread::yield_now();
            let after = Instant::now();
            if after - before >= SLOW_YIELD {
                slow_yields += 1;
                if slow_yields >= SLOW_YIELDS {
                    return;
                }
            }
            if after - started >= self.spin {
                return;
            }
        }
    }

    fn is_done(&self) -> bool {
        self.state.lock().result.is_some()
    }

    fn set_callback(&self, cb: Callback) {
        let done = {
            let mut st = self.state.lock();
            match &st.result {
                Some(r) => Some(r.clone()),
                None => {
                    st.callback = Some(cb);
                    return;
                }
            }
        };
        if let Some(r) = done {
            run_callback(cb, r);
        }
    }
}

/// Completes every completion of `completions` with `result` (`since`: when it became known,
/// if the caller took the time), waking as few sleeping waiters itself as it can: those awake
/// are completed here, and each sleeper woken while more than [`DIRECT_WAKES`] are left takes
/// half of the rest with it (see the module header).
///
/// Returns how many sleepers this call woke itself.
pub(crate) fn complete_many(completions: Vec<Arc<Completion>>, result: &Result<()>, since: Option<Instant>) -> usize {
    let mut asleep = Vec::new();
    for c in completions {
        if c.waiter.load(Ordering::Relaxed) == WAITER_ASLEEP {
            asleep.push(c);
        } else {
            c.complete_handing(result.clone(), Vec::new(), since);
        }
    }
    let mut woken_here = 0;
    while asleep.len() > DIRECT_WAKES {
        let Some(woken) = asleep.pop() else { break };
        let half = asleep.split_off(asleep.len() / 2);
        let kept = woken.complete_handing(result.clone(), half, since);
        asleep.extend(kept);
        woken_here += 1;
    }
    woken_here += asleep.len();
    for c in asleep {
        c.complete_handing(result.clone(), Vec::new(), since);
    }
    woken_here
}

thread_local! {
    /// This thread is running a completion callback.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `cb`, marking this thread as inside a callback meanwhile (nested callbacks keep the
/// mark until the outermost one returns).
fn run_callback(cb: Callback, result: Result<()>) {
    let outer = IN_CALLBACK.with(|c| c.replace(true));
    cb(result);
    IN_CALLBACK.with(|c| c.set(outer));
}

/// True while this thread runs a completion callback. The pipeline thread running it may be
/// the one that must flush the writes still in flight, so a shutdown started here (the last
/// database handle dropped by the callback) must not wait on this thread.
pub(crate) fn in_completion_callback() -> bool {
    IN_CALLBACK.with(Cell::get)
}

/// The handle of an asynchronous write ([`crate::Db::write_async`]).
///
/// The write is acknowledged (and, with `sync`, durable) when the handle completes. Dropping the
/// handle does not cancel the write.
pub struct WriteHandle {
    pub(crate) completion: Arc<Completion>,
}

impl std::fmt::Debug for WriteHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteHandle").field("done", &self.is_done()).finish()
    }
}

impl WriteHandle {
    /// Blocks until the batch has committed; returns its outcome.
    pub fn wait(self) -> Result<()> {
        self.completion.wait()
    }

    /// True once the batch has committed or failed.
    pub fn is_done(&self) -> bool {
        self.completion.is_done()
    }

    /// Runs `f` with the outcome when the batch commits (at once, on this thread, if it already
    /// has). `f` runs on whichever thread commits the batch's group: the log-flush thread or
    /// another writer's thread, possibly one inside its own `write` or `commit` call. Keep it
    /// short, never block in it (`Db::close` included), and take no lock that a writing thread
    /// may hold. It may drop the last handle of the database: the shutdown then runs on a
    /// thread of its own (the thread running `f` may have to flush the writes it waits for),
    /// so the database is closed a little later, as reopening it finds.
    pub fn on_complete(self, f: impl FnOnce(Result<()>) + Send + 'static) {
        self.completion.set_callback(Box::new(f));
    }

    /// A handle that is already failed (used when a write is refused before it is queued).
    pub(crate) fn failed(err: Error) -> Self {
        let completion = Completion::new();
        completion.complete(Err(err));
        WriteHandle { completion }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A polling waiter returns the outcome completed on another thread, both when it lands
    /// within the budget and when the waiter had to sleep first.
    #[test]
    fn a_polling_waiter_sees_completion_in_and_after_its_budget() {
        for (spin, delay) in [(5_000, 1), (200, 20_000), (0, 1_000)] {
            let c = Completion::with_spin(Duration::from_micros(spin), false, true);
            let done = c.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(delay));
                done.complete(Err(Error::Closed));
            });
            assert!(
                matches!(c.wait(), Err(Error::Closed)),
                "spin {spin} µs, delay {delay} µs"
            );
            t.join().unwrap();
            assert!(c.is_done());
            assert!(c.woke_after().is_some());
        }
    }

    /// An invitation reaches a polling waiter, runs once on its thread, and the waiter then
    /// still waits for the outcome; an invitation after completion is refused.
    #[test]
    fn an_invitation_runs_on_the_waiting_thread_then_it_waits_on() {
        for spin in [0, 10_000] {
            let c = Completion::with_spin(Duration::from_micros(spin), false, false);
            let (inviter, ran_on) = (c.clone(), Arc::new(Mutex::new(None)));
            let ran = ran_on.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                let done = inviter.clone();
                assert!(inviter.invite(Box::new(move || {
                    *ran.lock() = Some(std::thread::current().id());
                    // Completed from inside the work, as the last inserter of a group does.
                    done.complete(Ok(()));
                })));
            });
            c.wait().unwrap();
            t.join().unwrap();
            assert_eq!(*ran_on.lock(), Some(std::thread::current().id()), "spin {spin}");
            assert!(!c.invite(Box::new(|| unreachable!("completed"))));
            assert_eq!(c.woke_after(), None, "not a timed completion");
        }
    }

    /// A commit handed to a waiter is never replaced by a later offer to help insert (that
    /// would leave the round uncommitted and every writer behind it waiting); a commit
    /// replaces a pending offer (stale by then), and a second offer is refused. The waiter is
    /// marked as inside `wait` by hand, so no thread can take an invitation meanwhile.
    #[test]
    fn an_offer_never_replaces_a_handed_over_commit() {
        let run_pending = |c: &Completion| {
            let work = c.state.lock().invitation.take().expect("an invitation pending");
            work();
        };
        let c = Completion::new();
        assert!(c.invite(Box::new(|| {})));
        assert!(!c.invite(Box::new(|| unreachable!("a second offer"))));
        assert!(
            c.invite_waiting(Box::new(|| {})).is_err(),
            "no thread waits: a commit must not be handed over"
        );

        c.waiter.store(WAITER_AWAKE, Ordering::Relaxed);
        let done = c.clone();
        let handed = c.invite_waiting(Box::new(move || done.complete(Ok(()))));
        assert!(handed.is_ok(), "the commit replaces the stale offer");
        assert!(!c.invite(Box::new(|| unreachable!("an offer replaced the commit"))));
        run_pending(&c);
        assert!(c.is_done(), "the pending invitation was the commit");
        c.waiter.store(NO_WAITER, Ordering::Relaxed);
    }

    /// `complete_many` completes every completion with the outcome, whether its waiter sleeps
    /// (then most are completed by other woken waiters, from the work handed to them: the
    /// caller wakes about log2(n) of them itself), polls, or has not started waiting.
    #[test]
    fn complete_many_spreads_wake_ups_and_reaches_every_completion() {
        let sleepers: Vec<_> = (0..37)
            .map(|i| Completion::with_spin(Duration::ZERO, false, i % 5 == 0))
            .collect();
        let pollers: Vec<_> = (0..3)
            .map(|_| Completion::with_spin(Duration::from_secs(30), false, false))
            .collect();
        let unwaited: Vec<_> = (0..4).map(|_| Completion::new()).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        for c in sleepers.iter().chain(&pollers) {
            let (c, tx) = (c.clone(), tx.clone());
            std::thread::spawn(move || tx.send(c.wait()));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while sleepers
            .iter()
            .any(|c| c.waiter.load(Ordering::Relaxed) != WAITER_ASLEEP)
            || pollers.iter().any(|c| c.waiter.load(Ordering::Relaxed) != WAITER_AWAKE)
        {
            assert!(Instant::now() < deadline, "waiters never settled");
            std::thread::sleep(Duration::from_millis(1));
        }
        let all: Vec<_> = sleepers.iter().chain(&pollers).chain(&unwaited).cloned().collect();
        let since = Instant::now();
        let woken_here = complete_many(all, &Err(Error::Closed), Some(since));
        // 37 sleepers, halved from the top: the caller wakes 5 itself (about log2 of 37).
        assert!(woken_here <= 8, "the caller woke {woken_here} of 37 sleepers itself");
        for _ in 0..sleepers.len() + pollers.len() {
            let outcome = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("a waiter never returned");
            assert!(matches!(outcome, Err(Error::Closed)));
        }
        for c in sleepers.iter().chain(&pollers).chain(&unwaited) {
            assert!(c.is_done());
            assert!(c.state.lock().handed.is_none(), "handed work left behind");
            assert_eq!(c.waiter.load(Ordering::Relaxed), NO_WAITER);
        }
        for c in sleepers.iter().filter(|c| c.timed) {
            assert_eq!(c.state.lock().completed_at, Some(since), "timed from when it was known");
        }
    }

    /// Work is handed only to a completion a thread waits on: a completion nobody waits on
    /// gives the others back (they would never be completed), and so does one completed
    /// already; a waiting one takes them and completes them before its `wait` returns.
    #[test]
    fn work_is_handed_only_to_a_waiting_thread() {
        let others = || (0..3).map(|_| Completion::new()).collect::<Vec<_>>();
        let unwaited = Completion::new();
        let given = others();
        let back = unwaited.complete_handing(Ok(()), given.clone(), None);
        assert_eq!(back.len(), 3, "handed to a completion nobody waits on");
        assert!(given.iter().all(|c| !c.is_done()));
        assert!(unwaited.is_done());
        assert_eq!(unwaited.complete_handing(Ok(()), given.clone(), None).len(), 3);

        let waited = Completion::with_spin(Duration::ZERO, false, false);
        let (tx, rx) = std::sync::mpsc::channel();
        let c = waited.clone();
        std::thread::spawn(move || tx.send(c.wait()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while waited.waiter.load(Ordering::Relaxed) != WAITER_ASLEEP {
            assert!(Instant::now() < deadline, "the waiter never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        let given = others();
        assert!(waited.complete_handing(Ok(()), given.clone(), None).is_empty());
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the waiter never returned")
            .unwrap();
        assert!(
            given.iter().all(|c| c.is_done()),
            "the waiter returned before completing its list"
        );
    }
}
