//! Stages 3 and 4: memtable insertion (in parallel, by each group's leader or, for asynchronous
//! leaders, by the driver) and commit through the commit window.
//!
//! Invariants:
//! - `visible_lsn` advances only over a contiguous prefix of done groups, so it never exposes
//!   LSN n+1 before n, nor part of a group.
//! - A writer is acknowledged only after its group's bytes were written to the log (and
//!   fsynced, for `sync`) and its group is visible.
//! - Writers leave the in-flight count before their completions run: a callback may drop the
//!   last database handle, whose close waits for in-flight writes.

use super::buffer::Bound;
use super::{Pipeline, Writer};
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::write::completion::Completion;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

pub(super) struct GroupProgress {
    pub(super) phase: Phase,
    /// Taken by whoever inserts the group (its leader, or the driver for async leaders).
    pub(super) work: Option<GroupWork>,
}

/// A buffered group on its way through stages 2 and 3.
pub(super) struct GroupState {
    pub(super) seq: u64,
    /// Highest LSN of the group.
    pub(super) last_lsn: Lsn,
    /// The leader sleeps until the group is flushed, then inserts it itself.
    pub(super) leader_waits: bool,
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
}

pub(super) struct CommitWindow {
    pub(super) front_seq: u64,
    pub(super) entries: VecDeque<WindowEntry>,
}

impl Pipeline {
    pub(super) fn complete_all(&self, completions: &[Arc<Completion>], result: Result<()>) {
        // Out of flight before callbacks run: a callback may drop the last database handle,
        // whose close waits for in-flight writes.
        self.inflight.fetch_sub(completions.len(), Ordering::AcqRel);
        for c in completions {
            c.complete(result.clone());
        }
    }

    /// Takes a flushed (or failed) group's work and runs stages 3 and 4 for it.
    pub(super) fn take_and_process(
        &self,
        state: &GroupState,
        mut progress: parking_lot::MutexGuard<'_, GroupProgress>,
    ) {
        let phase = match &progress.phase {
            Phase::Buffered => return,
            Phase::Flushed => Ok(()),
            Phase::Failed(e) => Err(e.clone()),
        };
        let Some(work) = progress.work.take() else {
            return;
        };
        drop(progress);
        match phase {
            Ok(()) => self.insert_and_finish(state.seq, work),
            Err(e) => {
                let completions = work.writers.iter().map(|w| w.completion.clone()).collect();
                self.finish(state.seq, EntryState::Failed(e), completions);
            }
        }
    }

    /// Stages 3 and 4 for one group.
    pub(super) fn insert_and_finish(&self, seq: u64, work: GroupWork) {
        let mut lsn = work.first_lsn;
        for w in &work.writers {
            for op in w.batch.ops(lsn) {
                if let Some(mem) = work.bound.get(op.table) {
                    if w.disable_wal {
                        mem.mark_unlogged();
                    }
                    mem.insert(op.key, op.lsn, op.kind, op.value);
                }
            }
            lsn += u64::from(w.batch.count);
        }
        let completions = work.writers.iter().map(|w| w.completion.clone()).collect();
        drop(work);
        self.finish(seq, EntryState::Done, completions);
    }

    /// Stage 4: records the group's outcome and commits the done prefix of the window.
    pub(super) fn finish(&self, seq: u64, state: EntryState, completions: Vec<Arc<Completion>>) {
        let mut ready: Vec<(Vec<Arc<Completion>>, Result<()>)> = Vec::new();
        {
            let mut win = self.window.lock();
            let idx = (seq - win.front_seq) as usize;
            if let Some(entry) = win.entries.get_mut(idx) {
                entry.state = state;
                entry.completions = completions;
            }
            while matches!(win.entries.front(), Some(e) if !matches!(e.state, EntryState::Pending)) {
                let Some(entry) = win.entries.pop_front() else { break };
                win.front_seq += 1;
                match entry.state {
                    EntryState::Done => {
                        self.visible_lsn.store(entry.last_lsn, Ordering::Release);
                        ready.push((entry.completions, Ok(())));
                    }
                    EntryState::Failed(e) => ready.push((entry.completions, Err(e))),
                    EntryState::Pending => {}
                }
            }
        }
        for (completions, result) in ready {
            self.complete_all(&completions, result);
        }
    }
}
