//! Stage 4, commit through the commit window, and the state a group carries through stages 2
//! and 3 (memtable insertion, `insert.rs`, runs while the driver writes the log).
//!
//! Invariants:
//! - A group's versions may be in their memtables before its log write ends, but at LSNs above
//!   `visible_lsn`, so no snapshot read sees them; only the transaction layer's locked reads
//!   (which see the newest version of a row they hold the lock on) do, and a transaction that
//!   saw them commits after them (`docs/transactions.md`).
//! - `visible_lsn` advances only over a contiguous prefix of done groups, so it never exposes
//!   LSN n+1 before n, nor part of a group.
//! - A writer is acknowledged only after its group's bytes were written to the log (and
//!   fsynced, for `sync`) and its group is visible.
//! - Writers leave the in-flight count before their completions run: a callback may drop the
//!   last database handle, whose close waits for in-flight writes.

use super::buffer::Bound;
use super::stats::Counter;
use super::{Pipeline, Writer};
use crate::contention::LockClass;
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::write::completion::{complete_many, Completion, Invitation};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Writers the driver tries, of each kind (polling, other), to hand a round's commit to.
const HANDOFF_CANDIDATES: usize = 4;

/// A hook run once a writer's batch is placed: its LSNs are allocated in log order and its
/// versions are in their memtables, but its log write (and fsync) may still be under way. The
/// transaction layer releases row locks here (early lock release, `docs/transactions.md`).
/// Dropped without running if the write fails before it is placed.
pub(crate) type OnPlaced = Box<dyn FnOnce() + Send>;

/// The work of stage 3 for one group: its batches and the memtables bound to it.
pub(super) struct GroupWork {
    pub(super) writers: Vec<Writer>,
    pub(super) bound: Bound,
    pub(super) first_lsn: Lsn,
}

pub(super) enum Phase {
    Buffered,
    Flushed,
    Failed(Error),
}

/// A group whose batches are in their memtables (stage 3 done).
pub(super) struct Inserted {
    pub(super) completions: Vec<Arc<Completion>>,
    /// When the insertion ended, if the group is one of the timed ones.
    pub(super) at: Option<Instant>,
}

pub(super) struct GroupProgress {
    pub(super) phase: Phase,
    /// When the driver set `phase` past `Buffered`.
    pub(super) flushed_at: Option<Instant>,
    /// Set by whoever ends stage 3; taken by whoever finishes the group (stage 4).
    pub(super) inserted: Option<Inserted>,
}

/// A buffered group on its way through stages 2 and 3, which run at the same time: its leader
/// (and the followers it invites) insert its batches while the driver writes its bytes. Stage
/// 4 starts when both are done: by the last inserter if the log write ended first, otherwise
/// by the driver, or, for a group with an fsync whose leader waits, by that leader, whom the
/// driver wakes.
pub(super) struct GroupState {
    /// Its commit-window seq; set in stage 1 under the log-buffer lock (the state is allocated
    /// before it), read only after that lock was released.
    pub(super) seq: AtomicU64,
    /// Highest LSN of the group; set like `seq`.
    pub(super) last_lsn: AtomicU64,
    /// The leader waits for its write (it drives the log itself if no one does); an
    /// asynchronous leader hands driving to the log-flush thread.
    pub(super) leader_waits: bool,
    /// The leader sleeps until the group is flushed, then finishes it (unless an invited
    /// follower is still inserting: then that follower does, when it ends stage 3). Only for
    /// a group with an fsync whose leader waits: after an fsync every writer of a flush sleeps,
    /// and the driver would wake each of them one after the other before the next fsync
    /// (fillrandom sync=1, 32 threads, 2 cores: -28 % when the driver finished every group).
    /// Any other group is finished by the driver, so its visibility, and that of every later
    /// group behind it in the commit window, does not wait for a woken leader (16 cores, xbench
    /// at 16 threads: 31.5 us of a 67.6 us commit were spent becoming visible).
    pub(super) leader_finishes: bool,
    /// One of the timed groups (the driver then records when it was flushed).
    pub(super) timed: bool,
    /// Set (after `progress.phase` left `Buffered`) so a waiting leader can poll without locking.
    pub(super) flushed: AtomicBool,
    pub(super) progress: Mutex<GroupProgress>,
    pub(super) cond: Condvar,
}

pub(super) enum EntryState {
    Pending,
    Done,
    Failed(Error),
}

pub(super) struct WindowEntry {
    pub(super) last_lsn: Lsn,
    pub(super) state: EntryState,
    pub(super) completions: Vec<Arc<Completion>>,
    /// When the group became ready to commit, if it is one of the timed ones.
    pub(super) ready_at: Option<Instant>,
}

/// A group ready for stage 4: its outcome and writers (see [`Pipeline::finish_all`]).
pub(super) struct Finishable {
    seq: u64,
    state: EntryState,
    completions: Vec<Arc<Completion>>,
    ready_at: Option<Instant>,
}

pub(super) struct CommitWindow {
    pub(super) front_seq: u64,
    pub(super) entries: VecDeque<WindowEntry>,
    /// The error of the first failed group committed through the window. Every later group
    /// fails with it, also one that is done (an unlogged group, or one logged before the
    /// failure was known): its versions, and the failed group's below them, are in the
    /// memtables, and advancing `visible_lsn` past the failed group would show them.
    pub(super) failed: Option<Error>,
}

impl Pipeline {
    /// Completes `completions` with `result`, waking few sleepers on this thread
    /// ([`complete_many`]: the driver's round must not make a futex call per writer).
    pub(super) fn complete_all(&self, completions: Vec<Arc<Completion>>, result: Result<()>) {
        // Out of flight before callbacks run: a callback may drop the last database handle,
        // whose close waits for in-flight writes.
        self.inflight.fetch_sub(completions.len(), Ordering::AcqRel);
        // One time for all: a writer completed later by a woken writer it was handed to counts
        // that delay in its wake-up time.
        complete_many(completions, &result, Some(Instant::now()));
    }

    /// Stage 4 for a logged group, once it is both flushed (or failed) and inserted; does
    /// nothing if either is missing or someone already finished it.
    pub(super) fn finish_group(&self, state: &GroupState, progress: MutexGuard<'_, GroupProgress>) {
        if let Some(done) = self.take_finishable(state, progress) {
            self.finish_all(vec![done]);
        }
    }

    /// A logged group's stage-4 entry if it is both flushed (or failed) and inserted, taken so
    /// that no one else finishes it; `None` if either is missing or it was taken already.
    pub(super) fn take_finishable(
        &self,
        state: &GroupState,
        mut progress: MutexGuard<'_, GroupProgress>,
    ) -> Option<Finishable> {
        let entry = match &progress.phase {
            Phase::Buffered => return None,
            Phase::Flushed => EntryState::Done,
            Phase::Failed(e) => EntryState::Failed(e.clone()),
        };
        let inserted = progress.inserted.take()?;
        let flushed_at = progress.flushed_at;
        drop(progress);
        let mut ready_at = None;
        if let (Some(flushed_at), Some(inserted_at)) = (flushed_at, inserted.at) {
            // Log time the group waited after its insertion ended (zero if the log was faster).
            let waited = flushed_at.saturating_duration_since(inserted_at);
            self.counters
                .time(Counter::LogNanos, inserted.completions.len() as u64, waited);
            ready_at = Some(Instant::now());
        }
        Some(Finishable {
            seq: state.seq.load(Ordering::Relaxed),
            state: entry,
            completions: inserted.completions,
            ready_at,
        })
    }

    /// Stage 4 for one group: records its outcome and commits the done prefix of the window.
    pub(super) fn finish(
        &self,
        seq: u64,
        state: EntryState,
        completions: Vec<Arc<Completion>>,
        ready_at: Option<Instant>,
    ) {
        self.finish_all(vec![Finishable {
            seq,
            state,
            completions,
            ready_at,
        }]);
    }

    /// Stage 4 for the groups of a flush round that the driver may finish (flushed and
    /// already inserted): by the driver itself when they are at most
    /// `driver_commit_groups`, else by one of their writers that waits in
    /// [`Completion::wait`], preferably one polling (no wake-up), so the driver starts the
    /// next log write at once instead of committing, completing and waking this round's
    /// writers first. The writer it is handed to runs it before its own `wait` returns (its
    /// own group is among them, so its completion waits for that work); if no writer of these
    /// groups waits, the driver runs it.
    pub(super) fn finish_round(&self, groups: Vec<Finishable>) {
        if groups.len() <= self.cfg.driver_commit_groups {
            return self.finish_all(groups);
        }
        let Some(me) = self.me.upgrade() else {
            return self.finish_all(groups);
        };
        // A few candidates, newest writers first (the likeliest to be polling still).
        let (mut awake, mut others) = (Vec::new(), Vec::new());
        for c in groups.iter().rev().flat_map(|g| g.completions.iter().rev()) {
            if c.has_awake_waiter() {
                awake.push(c.clone());
                if awake.len() == HANDOFF_CANDIDATES {
                    break;
                }
            } else if others.len() < HANDOFF_CANDIDATES {
                others.push(c.clone());
            }
        }
        let mut work: Invitation = Box::new(move || me.finish_all(groups));
        for c in awake.iter().chain(&others) {
            match c.invite_waiting(work) {
                Ok(()) => {
                    self.counters.add(Counter::CommitHandoffs, 1);
                    return;
                }
                Err(back) => work = back,
            }
        }
        work();
    }

    /// Stage 4 for several groups under one hold of the commit window's lock (the driver
    /// finishes every group of its flush at once: taking the lock once per group, against the
    /// inserters finishing theirs, made its rounds slow on 16 cores).
    pub(super) fn finish_all(&self, groups: Vec<Finishable>) {
        if groups.is_empty() {
            return;
        }
        // The writers of the groups committed here: one list for those that succeeded (their
        // wake-ups are spread as one), one per failed group.
        let mut committed: Vec<Arc<Completion>> = Vec::new();
        let mut failed: Vec<(Vec<Arc<Completion>>, Result<()>)> = Vec::new();
        {
            let mut win = self.contention.lock(LockClass::CommitWindow, &self.window);
            for g in groups {
                let idx = (g.seq - win.front_seq) as usize;
                // Registered by the group's leader before it was inserted (`buffer.rs`).
                debug_assert!(idx < win.entries.len(), "group {} finished unregistered", g.seq);
                if let Some(entry) = win.entries.get_mut(idx) {
                    entry.state = g.state;
                    entry.completions = g.completions;
                    entry.ready_at = g.ready_at;
                }
            }
            let mut now = None;
            while matches!(win.entries.front(), Some(e) if !matches!(e.state, EntryState::Pending)) {
                let Some(entry) = win.entries.pop_front() else { break };
                win.front_seq += 1;
                if let Some(at) = entry.ready_at {
                    let now = *now.get_or_insert_with(Instant::now);
                    let writers = entry.completions.len() as u64;
                    self.counters
                        .time(Counter::VisibleNanos, writers, now.saturating_duration_since(at));
                }
                match (entry.state, &win.failed) {
                    (EntryState::Done, None) => {
                        self.visible_lsn.store(entry.last_lsn, Ordering::Release);
                        committed.extend(entry.completions);
                    }
                    (EntryState::Done, Some(e)) => failed.push((entry.completions, Err(e.clone()))),
                    (EntryState::Failed(e), _) => {
                        win.failed.get_or_insert_with(|| e.clone());
                        failed.push((entry.completions, Err(e)));
                    }
                    (EntryState::Pending, _) => {}
                }
            }
        }
        if !committed.is_empty() {
            self.complete_all(committed, Ok(()));
        }
        for (completions, result) in failed {
            self.complete_all(completions, result);
        }
    }
}
