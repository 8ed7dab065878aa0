//! Stage 3, memtable insertion, shared by a group's leader and the followers it invites
//! (X-Engine's parallel stage 3, seed 000 §3.2.2; RocksDB's concurrent memtable writes).
//!
//! After stage 1 the leader turns its group into an [`InsertJob`]: one slot per batch, with
//! the batch's first LSN and its [`OnPlaced`] hook. It invites up to `helpers` of the group's
//! waiting followers (each sleeps on its own completion, which runs the invitation), then
//! claims slots itself until none is left. An invited follower first claims its own slot, so
//! it inserts the batch it built (still in its cache), then claims further slots like the
//! leader. Whoever inserts the last slot ends stage 3: it records the group as inserted and,
//! if its log write is already done, runs stage 4.
//!
//! So a follower that is not scheduled in time costs nothing: the leader inserts its slot.
//! On a machine with idle cores, a group of n batches is inserted in about the time of one.
//!
//! Invariants:
//! - Every slot is inserted exactly once (a slot is claimed by one `swap` of its flag), and
//!   stage 3 ends exactly once, after every slot (the `remaining` count reaches zero once).
//! - A writer's [`OnPlaced`] hook runs right after its own batch is in its memtables, on the
//!   thread that inserted it.
//! - Nothing here makes a version visible: every slot's LSNs are above `visible_lsn` until
//!   stage 4, which needs this job's end.

use super::buffer::Bound;
use super::commit::{EntryState, GroupState, GroupWork, Inserted, OnPlaced};
use super::stats::Counter;
use super::{Pipeline, Writer};
use crate::key::Lsn;
use crate::memtable::Memtable;
use crate::write::batch::WriteBatch;
use crate::write::completion::Completion;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Where a group goes once inserted.
pub(super) enum InsertTarget {
    /// A logged group: stage 4 once its log write is also done.
    Logged(Arc<GroupState>),
    /// A group without redo bytes, by its commit-window seq: stage 4 at once.
    Unlogged(u64),
}

struct InsertSlot {
    claimed: AtomicBool,
    first_lsn: Lsn,
    disable_wal: bool,
    /// Taken by the thread that claimed the slot.
    work: Mutex<Option<(WriteBatch, Option<OnPlaced>)>>,
}

/// Stage 3 of one group; see the module header.
pub(super) struct InsertJob {
    slots: Vec<InsertSlot>,
    /// Next slot to try, for claims in group order.
    cursor: AtomicUsize,
    /// Slots not yet inserted.
    remaining: AtomicUsize,
    bound: Bound,
    target: InsertTarget,
    /// The group's completions in group order, taken by whoever ends stage 3.
    completions: Mutex<Vec<Arc<Completion>>>,
    /// When stage 3 started, if the group is one of the timed ones.
    started: Option<Instant>,
    /// Batches inserted by invited followers (for the counters).
    helped: AtomicUsize,
}

impl InsertJob {
    /// The job for `writers`, whose LSNs start at `first_lsn`, with their bound memtables.
    /// Returns the job and the writers' completions (for invitations).
    pub(super) fn new(
        writers: Vec<Writer>,
        bound: Bound,
        first_lsn: Lsn,
        target: InsertTarget,
        timed: bool,
    ) -> (Arc<Self>, Vec<(Arc<Completion>, bool)>) {
        let mut lsn = first_lsn;
        let mut completions = Vec::with_capacity(writers.len());
        let mut invitable = Vec::with_capacity(writers.len());
        let slots = writers
            .into_iter()
            .map(|w| {
                let ops = u64::from(w.batch.count);
                let slot = InsertSlot {
                    claimed: AtomicBool::new(false),
                    first_lsn: lsn,
                    disable_wal: w.disable_wal,
                    work: Mutex::new(Some((w.batch, w.on_placed))),
                };
                lsn += ops;
                invitable.push((w.completion.clone(), !w.asynchronous));
                completions.push(w.completion);
                slot
            })
            .collect::<Vec<_>>();
        let job = Arc::new(InsertJob {
            remaining: AtomicUsize::new(slots.len()),
            slots,
            cursor: AtomicUsize::new(0),
            bound,
            target,
            completions: Mutex::new(completions),
            started: timed.then(Instant::now),
            helped: AtomicUsize::new(0),
        });
        (job, invitable)
    }

    /// Inserts slots until none is left to claim: first `own` (an invited follower's slot),
    /// then in group order. Ends stage 3 if this thread inserts the last slot.
    pub(super) fn help(&self, pipeline: &Pipeline, own: Option<usize>) {
        if let Some(i) = own {
            if self.claim(i) {
                self.helped.fetch_add(1, Ordering::Relaxed);
                self.insert_slot(pipeline, i);
            }
        }
        loop {
            let i = self.cursor.fetch_add(1, Ordering::Relaxed);
            if i >= self.slots.len() {
                return;
            }
            if self.claim(i) {
                if own.is_some() {
                    self.helped.fetch_add(1, Ordering::Relaxed);
                }
                self.insert_slot(pipeline, i);
            }
        }
    }

    fn claim(&self, i: usize) -> bool {
        self.slots
            .get(i)
            .is_some_and(|s| !s.claimed.load(Ordering::Relaxed) && !s.claimed.swap(true, Ordering::AcqRel))
    }

    /// Inserts claimed slot `i`, runs its hook, and ends stage 3 if it was the last.
    fn insert_slot(&self, pipeline: &Pipeline, i: usize) {
        let slot = &self.slots[i];
        if let Some((batch, on_placed)) = slot.work.lock().take() {
            place(&self.bound, &batch, slot.first_lsn, slot.disable_wal, on_placed);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end(pipeline);
        }
    }

    /// Stage 3 is over: records the group as inserted, and runs stage 4 if it may.
    fn end(&self, pipeline: &Pipeline) {
        let completions = std::mem::take(&mut *self.completions.lock());
        let helped = self.helped.load(Ordering::Relaxed) as u64;
        if helped > 0 {
            pipeline.counters.add(Counter::HelpedInserts, helped);
        }
        pipeline.end_stage3(&self.target, completions, self.started);
    }
}

/// Inserts one batch at `first_lsn` (see [`insert_batch`]), then runs its writer's hook.
fn place(bound: &Bound, batch: &WriteBatch, first_lsn: Lsn, disable_wal: bool, on_placed: Option<OnPlaced>) {
    insert_batch(bound, batch, first_lsn, disable_wal);
    if let Some(placed) = on_placed {
        placed();
    }
}

/// Inserts one batch, whose LSNs start at `first_lsn`, into its bound memtables, counting the
/// versions once per run of ops on one table.
fn insert_batch(bound: &Bound, batch: &WriteBatch, first_lsn: Lsn, disable_wal: bool) {
    // (table, memtable, versions, first LSN, last LSN) of the current run.
    let mut run: Option<(u32, &Memtable, u64, Lsn, Lsn)> = None;
    for op in batch.ops(first_lsn) {
        let mem = match run {
            Some((table, mem, ref mut n, _, ref mut last)) if table == op.table => {
                *n += 1;
                *last = op.lsn;
                mem
            }
            _ => {
                let Some(mem) = bound.get(op.table) else { continue };
                if let Some((_, done, n, first, last)) = run.take() {
                    done.note_inserted(n, first, last);
                }
                if disable_wal {
                    mem.mark_unlogged();
                }
                run = Some((op.table, mem, 1, op.lsn, op.lsn));
                mem
            }
        };
        mem.insert_uncounted(op.key, op.lsn, op.kind, op.value);
    }
    if let Some((_, mem, n, first, last)) = run {
        mem.note_inserted(n, first, last);
    }
}

impl Pipeline {
    /// Stage 3 for a group led by the writer of `leader` (this thread): by this thread alone
    /// if it is a single batch or no follower may be invited (no job to share, nothing
    /// allocated), else through an [`InsertJob`].
    pub(super) fn insert_group(&self, work: GroupWork, target: InsertTarget, leader: &Arc<Completion>, timed: bool) {
        let GroupWork {
            writers,
            bound,
            first_lsn,
        } = work;
        if writers.len() > 1 && self.cfg.parallel_insert_helpers > 0 {
            let (job, invitable) = InsertJob::new(writers, bound, first_lsn, target, timed);
            self.insert_job(&job, invitable, leader);
            return;
        }
        let started = timed.then(Instant::now);
        let mut lsn = first_lsn;
        let mut completions = Vec::with_capacity(writers.len());
        for w in writers {
            place(&bound, &w.batch, lsn, w.disable_wal, w.on_placed);
            lsn += u64::from(w.batch.count);
            completions.push(w.completion);
        }
        drop(bound);
        self.end_stage3(&target, completions, started);
    }

    /// Stage 3 of a group is over: records it as inserted, and runs stage 4 if it may.
    fn end_stage3(&self, target: &InsertTarget, completions: Vec<Arc<Completion>>, started: Option<Instant>) {
        let writers = completions.len() as u64;
        let ended = started.map(|started| {
            let now = Instant::now();
            self.counters.time(Counter::InsertNanos, writers, now - started);
            now
        });
        match target {
            InsertTarget::Unlogged(seq) => self.finish(*seq, EntryState::Done, completions, ended),
            InsertTarget::Logged(state) => {
                let mut progress = state.progress.lock();
                progress.inserted = Some(Inserted { completions, at: ended });
                // Flushed (or failed) already: stage 4 is ours. Otherwise the driver (or the
                // waiting leader it wakes) runs it.
                self.finish_group(state, progress);
            }
        }
    }

    /// Stage 3 for a group: invites up to the configured number of its waiting followers to
    /// insert with this thread (the last ones of the group, since this thread starts at the
    /// front), then inserts until no slot is left.
    fn insert_job(&self, job: &Arc<InsertJob>, invitable: Vec<(Arc<Completion>, bool)>, leader: &Arc<Completion>) {
        if let Some(me) = self.me.upgrade() {
            let mut invited = 0;
            for (i, (completion, waits)) in invitable.into_iter().enumerate().rev() {
                if invited == self.cfg.parallel_insert_helpers {
                    break;
                }
                if !waits || Arc::ptr_eq(&completion, leader) {
                    continue;
                }
                let (job, me) = (job.clone(), me.clone());
                if completion.invite(Box::new(move || job.help(&me, Some(i)))) {
                    invited += 1;
                }
            }
        }
        job.help(self, None);
    }
}
