//! The four-stage write pipeline (X-Engine, seed 000 §3.2.2; as built: reference §6).
//!
//! A writer joins one of N write task queues. The first writer of a queue's pending group is
//! its leader: it waits until the queue's previous group has left stage 1 (so the group grows
//! meanwhile), takes the whole pending group and drives it through:
//!
//! 1. **log buffering** (one thread at a time, `log` mutex): allocate the group's LSN range
//!    and commit-window seq, bind each touched table's active memtable, append header and
//!    batches to the shared log buffer (the payload CRC was computed before taking the lock),
//!    enter the flush queue; after the lock, enter the commit window;
//! 2. **log flushing** (one thread at a time: the *driver*): take the whole buffer — the groups
//!    of every queue that arrived since the last flush — write it with one call and at most one
//!    `fdatasync` (if any group in it asked for sync), then mark each flushed group;
//! 3. **memtable insertion**, in parallel with stage 2 and with other groups: the leader and
//!    the waiting followers it invites insert the group (`insert.rs`), at LSNs no reader can
//!    see yet, each writer's [`OnPlaced`] hook (where transactions release their row locks
//!    early) running right after its batch — right after stage 1 if the group needs an fsync,
//!    so no lock waits for it; otherwise after starting the log write if no one was driving
//!    (then the insert follows a write call, which is short);
//! 4. **commit**: once a group is both flushed and inserted, mark it done in the commit window;
//!    the visible LSN advances only over a contiguous prefix of done groups, and the thread
//!    that advances it completes those groups' writers (waking sync writers, running async
//!    callbacks). Whichever of stages 2 and 3 ends second runs it: the last inserter if the
//!    flush ended first; otherwise the driver itself, except for a group with an fsync whose
//!    leader waits: that leader, whom the driver wakes (so after an fsync the wake-ups of its
//!    writers are spread over their leaders instead of delaying the next fsync).
//!
//! Who drives stage 2: a leader that finds no driver becomes it, flushes until its own group
//! is flushed, and then, if more groups are waiting, hands driving to the pipeline's log-flush
//! thread, which drives until the buffer is empty. So a lone writer does everything on its own
//! thread (no context switch), and under load one thread flushes back to back while writers
//! wait once per write. A leader that finishes its group is woken only when it is flushed.
//!
//! The time a write spends in each step is counted ([`WriteStats`]'s commit-time split), and
//! so is the contention of each mutex here ([`crate::contention`]).
//!
//! Invariants:
//! - LSNs are allocated in log-buffer order, so the redo log is in LSN order.
//! - A memtable holds exactly the LSNs bound to it in stage 1; memtables of a table are
//!   therefore ordered by LSN, newest first, and a read may stop at the first one that answers.
//! - `visible_lsn` never exposes LSN n+1 before n, nor part of a group; versions inserted
//!   before their log write ended sit above it.
//! - A writer is acknowledged only after its group's bytes were written to the log (and
//!   fsynced, for `sync`), and after its group is visible — so after every earlier group is
//!   durable in the same sense.
//! - Any failed log write or fsync poisons the pipeline: the failing and all later groups fail,
//!   no later write is accepted, reads keep working.
//! - Buffered groups are never stranded: the driver gives up driving only after seeing, under
//!   the driver lock, an empty flush queue; a leader that buffers a group then checks, under
//!   the same lock, whether a driver is active (or, without it, sees the `driving` flag that
//!   is cleared only under the log-buffer lock; `driver.rs`).

mod buffer;
mod commit;
mod driver;
mod insert;
mod stats;

pub(crate) use commit::OnPlaced;
pub(crate) use stats::sampled_write_clock;
pub use stats::WriteStats;

use buffer::{Buffered, LogBuffer};
use commit::{CommitWindow, Phase};
use driver::{DriverState, Flusher};
use insert::InsertTarget;
use stats::{Counter, Counters};

use super::batch::WriteBatch;
use super::completion::Completion;
use crate::contention::{Contention, LockClass};
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::redo::{RedoLog, SyncedEnd};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One `write` call waiting in a queue.
pub(crate) struct Writer {
    pub(crate) batch: WriteBatch,
    pub(crate) sync: bool,
    pub(crate) disable_wal: bool,
    /// `write_async`: the caller does not wait; the driver inserts the group if needed.
    pub(crate) asynchronous: bool,
    pub(crate) completion: Arc<Completion>,
    /// Run once the batch is placed (see [`OnPlaced`]).
    pub(crate) on_placed: Option<OnPlaced>,
    /// When the writer was submitted, if it is one of the timed ones (commit-time split).
    pub(crate) queued_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct QueueState {
    pending: Vec<Writer>,
    pending_bytes: usize,
    /// A group of this queue is in stage 1 (log buffering).
    busy: bool,
}

#[derive(Default)]
struct WriteQueue {
    state: Mutex<QueueState>,
    cond: Condvar,
    /// `state.busy`, readable without the lock: a leader waiting for the queue's previous
    /// group to leave stage 1 watches it before sleeping on `cond`.
    busy: AtomicBool,
}

/// Sizes the pipeline needs from [`crate::Options`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PipelineConfig {
    pub(crate) queues: usize,
    pub(crate) max_group_size: usize,
    pub(crate) max_group_bytes: usize,
    /// Most followers a leader invites to insert their own batches (0: the leader inserts
    /// the whole group).
    pub(crate) parallel_insert_helpers: usize,
    /// How long a waiting writer polls before it sleeps (see `Completion`).
    pub(crate) write_wait_spin: Duration,
    /// A poller stops early on a contended CPU (see `Completion`).
    pub(crate) write_wait_adaptive: bool,
    /// Most groups of a flush round the driver commits itself (more are handed to a waiting
    /// writer; `commit.rs`).
    pub(crate) driver_commit_groups: usize,
    /// How long a writer watches a taken pipeline mutex, or its queue's busy stage 1, before
    /// it blocks (see [`crate::contention`]).
    pub(crate) write_lock_spin: Duration,
}

/// The pipeline's mutexes that are held for short sections only, and so may be spun on
/// (the log file's is held across a write and an fsync).
const SPUN_LOCKS: [LockClass; 4] = [
    LockClass::WriteQueue,
    LockClass::LogBuffer,
    LockClass::LogDriver,
    LockClass::CommitWindow,
];

/// The write pipeline of one database instance; see the module header.
pub(crate) struct Pipeline {
    /// This pipeline, for the invitations a leader hands its followers.
    me: Weak<Pipeline>,
    cfg: PipelineConfig,
    queues: Vec<CachePadded<WriteQueue>>,
    log: CachePadded<Mutex<LogBuffer>>,
    flusher: Mutex<Flusher>,
    driver: Mutex<DriverState>,
    /// `driver.active`, readable without the lock (see `driver.rs`).
    driving: CachePadded<AtomicBool>,
    driver_cond: Condvar,
    flush_thread: Mutex<Option<JoinHandle<()>>>,
    window: CachePadded<Mutex<CommitWindow>>,
    visible_lsn: CachePadded<AtomicU64>,
    poisoned: AtomicBool,
    poison: Mutex<Option<Error>>,
    closed: AtomicBool,
    inflight: AtomicUsize,
    counters: Counters,
    contention: Contention,
    /// The log was taken by `close` and synced by the shutdown that took it: where its
    /// records ended then.
    synced_at_close: Mutex<Option<SyncedEnd>>,
}

/// How often a waiting leader yields its time slice before sleeping on its group.
const WAIT_YIELDS: u32 = 20;

impl Pipeline {
    /// A pipeline appending to `log`, whose last recovered LSN is `last_lsn`, with its
    /// log-flush thread running.
    pub(crate) fn start(cfg: PipelineConfig, log: RedoLog, last_lsn: Lsn) -> Result<Arc<Self>> {
        let pipeline = Arc::new_cyclic(|me| Pipeline {
            me: me.clone(),
            cfg,
            queues: (0..cfg.queues)
                .map(|_| CachePadded::new(WriteQueue::default()))
                .collect(),
            log: CachePadded::new(Mutex::new(LogBuffer {
                next_lsn: last_lsn + 1,
                next_seq: 0,
                buf: Vec::with_capacity(1 << 20),
                sync_needed: false,
                sync_writes: 0,
                flush_queue: Vec::new(),
            })),
            flusher: Mutex::new(Flusher {
                log: Some(log),
                spare: Vec::with_capacity(1 << 20),
            }),
            driver: Mutex::new(DriverState::default()),
            driving: CachePadded::new(AtomicBool::new(false)),
            driver_cond: Condvar::new(),
            flush_thread: Mutex::new(None),
            window: CachePadded::new(Mutex::new(CommitWindow {
                front_seq: 0,
                entries: VecDeque::new(),
                failed: None,
            })),
            visible_lsn: CachePadded::new(AtomicU64::new(last_lsn)),
            synced_at_close: Mutex::new(None),
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            closed: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            counters: Counters::default(),
            contention: Contention::with_spin(&SPUN_LOCKS, cfg.write_lock_spin),
        });
        let worker = pipeline.clone();
        let handle = std::thread::Builder::new()
            .name("riptide-log-flush".into())
            .spawn(move || worker.flush_thread_main())
            .map_err(|e| Error::io("spawn log-flush thread", "", e))?;
        *pipeline.flush_thread.lock() = Some(handle);
        Ok(pipeline)
    }

    /// The newest LSN readers may see.
    pub(crate) fn visible_lsn(&self) -> Lsn {
        self.visible_lsn.load(Ordering::Acquire)
    }

    /// A completion for a writer about to be submitted (with the configured spin budget);
    /// `timed` if the write is one of the timed ones (then [`Pipeline::note_wake`] counts it).
    pub(crate) fn new_completion(&self, timed: bool) -> Arc<Completion> {
        Completion::with_spin(self.cfg.write_wait_spin, self.cfg.write_wait_adaptive, timed)
    }

    /// Counts the time a timed writer took to resume after its completion (the last part of
    /// the commit-time split); call right after its `wait` returned.
    pub(crate) fn note_wake(&self, completion: &Completion) {
        if let Some(woke) = completion.woke_after() {
            self.counters.add(Counter::TimedWakes, 1);
            self.counters.time(Counter::WakeNanos, 1, woke);
        }
    }

    /// The contention counters of the pipeline's mutexes.
    pub(crate) fn contention(&self) -> &Contention {
        &self.contention
    }

    /// Waits until `visible_lsn` reaches `lsn`, or fails with the error that poisoned the
    /// pipeline: yields `yields` times, then sleeps `nap` between looks.
    pub(crate) fn wait_visible(&self, lsn: Lsn, yields: u32, nap: Duration) -> Result<()> {
        let mut looks = 0u32;
        loop {
            if self.visible_lsn() >= lsn {
                return Ok(());
            }
            if let Some(e) = self.poison_error() {
                return Err(Error::Poisoned(Arc::new(e)));
            }
            looks += 1;
            if looks <= yields {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
            }
        }
    }

    /// The error that poisoned the pipeline, if any.
    pub(crate) fn poison_error(&self) -> Option<Error> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        self.poison.lock().clone()
    }

    fn poison_with(&self, err: &Error) -> Error {
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(err.clone());
            self.poisoned.store(true, Ordering::Release);
        }
        Error::Poisoned(Arc::new(p.clone().unwrap_or_else(|| err.clone())))
    }

    /// Refuses new writes if closed or poisoned.
    fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        if let Some(e) = self.poison_error() {
            return Err(Error::Poisoned(Arc::new(e)));
        }
        Ok(())
    }

    /// Adds stall time to the counters.
    pub(crate) fn add_stall(&self, since: Instant) {
        self.counters
            .add(Counter::StallMicros, since.elapsed().as_micros() as u64);
    }

    /// Submits a writer. Returns once the writer is queued as a follower, or after it led its
    /// group through the pipeline. Completion is reported through `writer.completion`.
    pub(crate) fn submit(&self, writer: Writer) {
        // SeqCst pairs with `close`: either close sees this writer in flight, or this writer
        // sees `closed`.
        self.inflight.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.check_writable() {
            self.complete_all(vec![writer.completion.clone()], Err(e));
            return;
        }
        let q = &self.queues[crate::thread_index::thread_index() % self.queues.len()];
        let bytes = writer.batch.rep.len();
        let mut st = self.contention.lock(LockClass::WriteQueue, &q.state);
        while !st.pending.is_empty()
            && (st.pending.len() >= self.cfg.max_group_size || st.pending_bytes + bytes > self.cfg.max_group_bytes)
        {
            q.cond.wait(&mut st);
        }
        let leader = st.pending.is_empty();
        st.pending.push(writer);
        st.pending_bytes += bytes;
        if !leader {
            return;
        }
        if st.busy && !self.cfg.write_lock_spin.is_zero() {
            // Followers keep joining the group meanwhile; only this leader takes it. (The
            // mutex is taken back with a plain `lock`: that wait is not counted.)
            parking_lot::MutexGuard::unlocked(&mut st, || {
                crate::contention::spin_until(self.cfg.write_lock_spin, || !q.busy.load(Ordering::Acquire))
            });
        }
        while st.busy {
            q.cond.wait(&mut st);
        }
        let group = std::mem::take(&mut st.pending);
        st.pending_bytes = 0;
        st.busy = true;
        q.busy.store(true, Ordering::Relaxed);
        q.cond.notify_all();
        drop(st);
        let timed = stats::sample_group();
        let taken = (timed || group.iter().any(|w| w.queued_at.is_some())).then(Instant::now);
        if let Some(taken) = taken {
            let (n, joined) = group
                .iter()
                .filter_map(|w| w.queued_at)
                .fold((0u64, Duration::ZERO), |(n, d), at| {
                    (n + 1, d + taken.saturating_duration_since(at))
                });
            self.counters.add(Counter::TimedJoins, n);
            self.counters.time(Counter::JoinNanos, 1, joined);
        }
        self.run_group(group, q, taken.filter(|_| timed));
    }

    fn release_queue(&self, q: &WriteQueue) {
        let mut st = self.contention.lock(LockClass::WriteQueue, &q.state);
        st.busy = false;
        q.busy.store(false, Ordering::Release);
        q.cond.notify_all();
    }

    /// Runs a group through the stages; `taken` (when the group was taken from its queue) is
    /// set if this group is one of the timed ones.
    fn run_group(&self, mut group: Vec<Writer>, q: &WriteQueue, taken: Option<Instant>) {
        // The leader (this thread) is the first writer of the group.
        let leader_waits = !group[0].asynchronous;
        let leader = group[0].completion.clone();
        let timed = taken.is_some();
        // Order the group: logged batches first, so their LSNs are contiguous in one record.
        group.sort_by_key(|w| w.disable_wal);
        let wal_writers = group.iter().filter(|w| !w.disable_wal).count();
        let mut payload_crc = 0u32;
        let mut payload_len = 0usize;
        for w in &group[..wal_writers] {
            payload_crc = crc32c::crc32c_append(payload_crc, &w.batch.rep);
            payload_len += w.batch.rep.len();
        }
        let writers = group.len() as u64;
        let group_syncs = group[..wal_writers].iter().any(|w| w.sync);
        self.counters.add(Counter::Groups, 1);
        self.counters.add(Counter::Writes, writers);

        // Stage 1: log buffering. Once the group is in the log buffer, the queue's next group may
        // form and buffer too, so one flush can carry several groups of every queue.
        let buffered = self.buffer_group(group, wal_writers, payload_crc, payload_len, leader_waits, timed);
        self.release_queue(q);
        if let Some(taken) = taken {
            self.counters.add(Counter::TimedWrites, writers);
            self.counters.time(Counter::BufferNanos, writers, taken.elapsed());
        }
        let (state, work) = match buffered {
            Ok(Buffered::Logged(state, work)) => (state, work),
            Ok(Buffered::Unlogged(seq, work)) => {
                // No redo bytes: straight to stages 3 and 4.
                self.insert_group(work, InsertTarget::Unlogged(seq), &leader, timed);
                return;
            }
            Err((e, writers)) => {
                let completions: Vec<_> = writers.iter().map(|w| w.completion.clone()).collect();
                self.complete_all(completions, Err(e));
                return;
            }
        };
        // Who inserts when. A group that needs an fsync is inserted first, so that its writers'
        // row locks are released before the fsync (early lock release) even when this thread
        // then drives the flush. A group without fsync drives first if no one is driving: the
        // log write starts at once, and the insertion follows a write call, not an fsync
        // (measured: inserting before driving left the log idle while the would-be driver
        // inserted; fillrandom, 32 threads, sync=0, 2 cores: -14 %).
        if !group_syncs {
            self.drive_if_idle(&state);
        }
        // Stage 3, while the driver writes the log: our own group, by this thread and the
        // followers it invites. Whoever inserts last runs stage 4 if the log write is done.
        self.insert_group(work, InsertTarget::Logged(state.clone()), &leader, timed);
        {
            let progress = state.progress.lock();
            if !matches!(progress.phase, Phase::Buffered) {
                // Flushed (or failed) meanwhile: stage 4 is ours if the insertion ended
                // (finish_group does nothing otherwise: the last inserter then runs it).
                self.finish_group(&state, progress);
                return;
            }
        }
        if group_syncs {
            self.drive_if_idle(&state);
        }
        if !state.leader_finishes {
            // The driver or the last inserter, whichever is done second, finishes it; this
            // thread then waits on its own completion like its followers.
            return;
        }
        // Wait until flushed, then finish the group (unless a helper still inserting will).
        // Yield a few times before sleeping: a flush usually ends within a few scheduling slices,
        // and a futex sleep and wake-up per write costs more than that on a busy machine
        // (measured: 32 threads, sync=1 on 2 cores, +40% writes/s; see docs/write-path.md).
        for _ in 0..WAIT_YIELDS {
            if state.flushed.load(Ordering::Acquire) {
                break;
            }
            std::thread::yield_now();
        }
        let mut progress = state.progress.lock();
        while matches!(progress.phase, Phase::Buffered) {
            state.cond.wait(&mut progress);
        }
        self.finish_group(&state, progress);
    }

    /// Runs `f` under the stage-1 lock with the last LSN allocated so far: no group can bind a
    /// memtable meanwhile, so a memtable sealed inside `f` at that LSN gets no later write.
    pub(crate) fn at_seal_point<R>(&self, f: impl FnOnce(Lsn) -> R) -> R {
        let log = self.log.lock();
        let r = f(log.next_lsn - 1);
        drop(log);
        r
    }

    /// Makes every record written to the redo log so far durable (a flush calls this before
    /// its slog commit, so extents never hold a write whose predecessors could be lost).
    /// Returns where the synced records end: a copy of the log must stop there, since the
    /// newest segment's zero-filled space fills (or is cut off) while it is read.
    pub(crate) fn sync_log(&self) -> Result<SyncedEnd> {
        if let Some(e) = self.poison_error() {
            return Err(Error::Poisoned(Arc::new(e)));
        }
        let mut fl = self.flusher.lock();
        match fl.log.as_mut() {
            Some(log) => {
                log.sync().map_err(|e| self.poison_with(&e))?;
                Ok(log.synced_end())
            }
            // Closed: only a clean shutdown that synced the log itself may go on flushing.
            None => (*self.synced_at_close.lock()).ok_or(Error::Closed),
        }
    }

    /// Records that the closed log was synced by its owner (a clean shutdown), so flushes
    /// during shutdown may proceed.
    pub(crate) fn mark_synced_at_close(&self, end: SyncedEnd) {
        *self.synced_at_close.lock() = Some(end);
    }

    /// True once [`Pipeline::close`] started.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuses new writes, waits for in-flight ones, syncs the log and hands it back (`None` if
    /// already closed). The log is returned even when poisoned, so the caller can decide.
    pub(crate) fn close(&self) -> Option<RedoLog> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return None;
        }
        while self.inflight.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        self.stop_flush_thread();
        let mut fl = self.flusher.lock();
        fl.log.take()
    }

    /// Stops and joins the log-flush thread (idempotent). Called once no write is in flight.
    pub(crate) fn stop_flush_thread(&self) {
        {
            let mut d = self.driver.lock();
            d.shutdown = true;
            self.driver_cond.notify_all();
        }
        let handle = self.flush_thread.lock().take();
        if let Some(handle) = handle {
            // The last handle of a database may drop inside a completion callback, which runs on
            // the flush thread itself: it then just exits after the callback.
            if handle.thread().id() != std::thread::current().id() {
                // The thread never panics on its own; a join error means it already died.
                let _ = handle.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SPUN_LOCKS;
    use crate::contention::LockClass;
    use std::time::Duration;

    /// `write_lock_spin_nanos` reaches the pipeline's short-held mutexes, and only them: the
    /// log file's (held across writes and fsyncs) and the row locks' never spin.
    #[test]
    fn the_option_reaches_the_short_held_mutexes_only() {
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::Options {
            write_lock_spin_nanos: 3_000,
            ..Default::default()
        };
        let db = crate::Db::open(dir.path(), opts).unwrap();
        let pipeline = db.inner.pipeline.contention();
        let row_locks = db.inner.txns.locks.contention();
        for class in LockClass::ALL {
            let want = if SPUN_LOCKS.contains(&class) {
                Duration::from_nanos(3_000)
            } else {
                Duration::ZERO
            };
            assert_eq!(pipeline.spin_budget(class), want, "{class:?}");
            assert_eq!(row_locks.spin_budget(class), Duration::ZERO, "{class:?}");
        }
        assert!(!SPUN_LOCKS.contains(&LockClass::LogFile));
    }
}
