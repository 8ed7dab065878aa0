//! Stage 2, log flushing (one thread at a time: the *driver*): takes the whole log buffer, the
//! groups of every queue that arrived since the last flush, writes it with one call and at most
//! one `fdatasync`, then hands each flushed group on to stage 3.
//!
//! Invariants:
//! - Buffered groups are never stranded: the driver gives up driving only after seeing, under
//!   the driver lock, an empty flush queue; a leader that buffers a group then checks, under
//!   the same lock, whether a driver is active.
//! - `Pipeline::driving` mirrors `DriverState::active` and is cleared only under the log-buffer
//!   lock, in the same critical section that saw the flush queue empty. A leader that buffered
//!   its group (under that lock) and then reads `driving` as true therefore knows that the
//!   active driver has yet to look at the queue and will flush its group: it skips the driver
//!   lock, which every leader took before (16 cores, fillrandom at 16 threads: 345K waits of
//!   9 us on it in 5 s, the driver's own among them).
//! - A failed write or fsync poisons the pipeline: the groups of that flush and every later one
//!   fail.

use super::commit::{GroupState, Phase};
use super::stats::Counter;
use super::Pipeline;
use crate::contention::LockClass;
use crate::error::Error;
use crate::redo::RedoLog;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

#[derive(Default)]
pub(super) struct DriverState {
    /// A thread is driving stage 2.
    pub(super) active: bool,
    /// The active driver handed driving to the log-flush thread.
    pub(super) handoff: bool,
    pub(super) shutdown: bool,
}

pub(super) struct Flusher {
    pub(super) log: Option<RedoLog>,
    pub(super) spare: Vec<u8>,
}

impl Pipeline {
    /// Makes this thread the driver if none is active (a synchronous leader), or wakes the
    /// log-flush thread to drive (an asynchronous one). A synchronous driver flushes until `own`
    /// is flushed and hands any remaining groups to the log-flush thread.
    pub(super) fn drive_if_idle(&self, own: &GroupState) {
        if self.driving.load(Ordering::Acquire) {
            return; // see the module header: that driver will flush our group
        }
        {
            let mut d = self.contention.lock(LockClass::LogDriver, &self.driver);
            if d.active {
                return;
            }
            d.active = true;
            self.driving.store(true, Ordering::Release);
            if !own.leader_waits {
                // An asynchronous leader must not wait for an fsync: the log-flush thread
                // drives instead, and this thread goes on submitting.
                d.handoff = true;
                self.driver_cond.notify_all();
                return;
            }
        }
        loop {
            self.flush_round();
            let own_flushed = !matches!(own.progress.lock().phase, Phase::Buffered);
            let mut d = self.contention.lock(LockClass::LogDriver, &self.driver);
            if self.stop_driving_if_empty() {
                d.active = false;
                return;
            }
            if own_flushed {
                d.handoff = true;
                self.driver_cond.notify_all();
                return;
            }
        }
    }

    /// If no buffered group waits for a flush (looked at under the log-buffer lock), clears
    /// `driving` under that same lock and returns true. The caller holds the driver lock and
    /// clears `DriverState::active` too.
    fn stop_driving_if_empty(&self) -> bool {
        let log = self.contention.lock(LockClass::LogBuffer, &self.log);
        if !log.flush_queue.is_empty() {
            return false;
        }
        self.driving.store(false, Ordering::Release);
        true
    }

    /// The log-flush thread: drives stage 2 whenever a leader hands it over, until the buffer
    /// is empty.
    pub(super) fn flush_thread_main(&self) {
        loop {
            {
                let mut d = self.contention.lock(LockClass::LogDriver, &self.driver);
                while !d.handoff && !d.shutdown {
                    self.driver_cond.wait(&mut d);
                }
                if !d.handoff {
                    return; // shutdown
                }
                d.handoff = false;
            }
            loop {
                // Under load a round finds groups waiting: flush again at once (one log-buffer
                // lock per round, not two); the stop check follows a round that found none.
                if self.flush_round() {
                    continue;
                }
                let mut d = self.contention.lock(LockClass::LogDriver, &self.driver);
                if self.stop_driving_if_empty() {
                    d.active = false;
                    break;
                }
            }
        }
    }

    /// Stage 2 once: writes (and fsyncs, if asked) everything buffered, then marks each group
    /// flushed (or failed): a leader that finishes its group is woken to; any other group is
    /// finished here if its insertion already ended. Returns false if no group was buffered.
    pub(super) fn flush_round(&self) -> bool {
        let mut fl = self.contention.lock(LockClass::LogFile, &self.flusher);
        let spare = std::mem::take(&mut fl.spare);
        let (mut buf, sync, synced_writes, groups) = {
            let mut log = self.contention.lock(LockClass::LogBuffer, &self.log);
            let buf = std::mem::replace(&mut log.buf, spare);
            let sync = std::mem::take(&mut log.sync_needed);
            let groups = std::mem::take(&mut log.flush_queue);
            (buf, sync, std::mem::take(&mut log.sync_writes), groups)
        };
        if groups.is_empty() {
            fl.spare = buf;
            return false;
        }
        let result = match (self.poison_error(), fl.log.as_mut()) {
            (Some(e), _) => Err(Error::Poisoned(Arc::new(e))),
            (None, None) => Err(Error::Closed),
            (None, Some(redo)) => redo
                // Groups are in log order: the last one ends the flush.
                .append_records(
                    &mut buf,
                    groups.last().map_or(0, |g| g.last_lsn.load(Ordering::Relaxed)),
                )
                .and_then(|()| if sync { redo.sync_for_commit() } else { Ok(()) })
                .and_then(|()| redo.maybe_roll())
                .map_err(|e| self.poison_with(&e)),
        };
        if result.is_ok() {
            self.counters.add(Counter::LogWrites, 1);
            self.counters.add(Counter::BytesLogged, buf.len() as u64);
            if sync {
                self.counters.add(Counter::Fsyncs, 1);
                self.counters.add(Counter::SyncedWrites, synced_writes);
            }
        }
        buf.clear();
        fl.spare = buf;
        drop(fl);
        let flushed_at = groups.iter().any(|g| g.timed).then(Instant::now);
        let mut finishable = Vec::with_capacity(groups.len());
        for g in &groups {
            if g.leader_finishes && !finishable.is_empty() {
                // The groups before it leave the window first, so its leader, once it sees its
                // group flushed, commits it and wakes its writers itself (a leader that found an
                // earlier group still pending would leave that work to this thread).
                self.finish_all(std::mem::take(&mut finishable));
            }
            let mut progress = g.progress.lock();
            progress.phase = match &result {
                Ok(()) => Phase::Flushed,
                Err(e) => Phase::Failed(e.clone()),
            };
            if g.timed {
                progress.flushed_at = flushed_at;
            }
            g.flushed.store(true, Ordering::Release);
            if g.leader_finishes {
                g.cond.notify_one();
            } else if let Some(done) = self.take_finishable(g, progress) {
                // Finished here if already inserted, else by whoever ends its insertion.
                finishable.push(done);
            }
        }
        self.finish_round(finishable);
        true
    }
}
