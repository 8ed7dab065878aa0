//! The four-stage write pipeline (X-Engine, seed 000 §3.2.2; as built: reference §6).
//!
//! A writer joins one of N write task queues. The first writer of a queue's pending group is
//! its leader: it waits until the queue's previous group has left stage 1 (so the group grows
//! meanwhile), takes the whole pending group and drives it through:
//!
//! 1. **log buffering** (one thread at a time, `log` mutex): allocate the group's LSN range,
//!    bind each touched table's active memtable, append header and batches to the shared log
//!    buffer (the payload CRC was computed before taking the lock), enter the commit window and
//!    the flush queue;
//! 2. **log flushing** (one thread at a time: the *driver*): take the whole buffer — the groups
//!    of every queue that arrived since the last flush — write it with one call and at most one
//!    `fdatasync` (if any group in it asked for sync), then hand each flushed group on;
//! 3. **memtable insertion**, in parallel: a synchronous leader wakes and inserts its own group;
//!    the groups of asynchronous leaders (which returned at once) are inserted by the driver;
//! 4. **commit**: mark the group done in the commit window; the visible LSN advances only over a
//!    contiguous prefix of done groups, and the thread that advances it completes those groups'
//!    writers (waking sync writers, running async callbacks).
//!
//! Who drives stage 2: a leader that finds no driver becomes it, flushes until its own group
//! is flushed, and then, if more groups are waiting, hands driving to the pipeline's log-flush
//! thread, which drives until the buffer is empty. So a lone writer does everything on its own
//! thread (no context switch), and under load one thread flushes back to back while writers
//! sleep once per write. A waiting leader is woken only when its group is flushed.
//!
//! Invariants:
//! - LSNs are allocated in log-buffer order, so the redo log is in LSN order.
//! - A memtable holds exactly the LSNs bound to it in stage 1; memtables of a table are
//!   therefore ordered by LSN, newest first, and a read may stop at the first one that answers.
//! - `visible_lsn` never exposes LSN n+1 before n, nor part of a group.
//! - A writer is acknowledged only after its group's bytes were written to the log (and
//!   fsynced, for `sync`), and after its group is visible.
//! - Any failed log write or fsync poisons the pipeline: the failing and all later groups fail,
//!   no later write is accepted, reads keep working.
//! - Buffered groups are never stranded: the driver gives up driving only after seeing, under
//!   the driver lock, an empty flush queue; a leader that buffers a group then checks, under
//!   the same lock, whether a driver is active.

use super::batch::WriteBatch;
use super::completion::Completion;
use crate::coding::RecordHeader;
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::memtable::Memtable;
use crate::redo::record::RECORD_GROUP;
use crate::redo::RedoLog;
use crate::subtable::TableInner;
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// One `write` call waiting in a queue.
pub(crate) struct Writer {
    pub(crate) batch: WriteBatch,
    pub(crate) sync: bool,
    pub(crate) disable_wal: bool,
    /// `write_async`: the caller does not wait; the driver inserts the group if needed.
    pub(crate) asynchronous: bool,
    pub(crate) completion: Arc<Completion>,
}

#[derive(Default)]
struct QueueState {
    pending: Vec<Writer>,
    pending_bytes: usize,
    /// A group of this queue is in stage 1 (log buffering).
    busy: bool,
}

#[derive(Default)]
struct WriteQueue {
    state: Mutex<QueueState>,
    cond: Condvar,
}

struct LogBuffer {
    next_lsn: Lsn,
    buf: Vec<u8>,
    sync_needed: bool,
    /// Writes with `sync` in `buf`.
    sync_writes: u64,
    /// Groups whose bytes are in `buf`, in log order.
    flush_queue: Vec<Arc<GroupState>>,
}

/// The work of stage 3 for one group: its batches and the memtables bound to it.
struct GroupWork {
    writers: Vec<Writer>,
    bound: Bound,
    first_lsn: Lsn,
}

enum Phase {
    Buffered,
    Flushed,
    Failed(Error),
}

struct GroupProgress {
    phase: Phase,
    /// Taken by whoever inserts the group (its leader, or the driver for async leaders).
    work: Option<GroupWork>,
}

/// A buffered group on its way through stages 2 and 3.
struct GroupState {
    seq: u64,
    /// Highest LSN of the group.
    last_lsn: Lsn,
    /// The leader sleeps until the group is flushed, then inserts it itself.
    leader_waits: bool,
    /// Set (after `progress.phase` left `Buffered`) so a waiting leader can poll without locking.
    flushed: AtomicBool,
    progress: Mutex<GroupProgress>,
    cond: Condvar,
}

#[derive(Default)]
struct DriverState {
    /// A thread is driving stage 2.
    active: bool,
    /// The active driver handed driving to the log-flush thread.
    handoff: bool,
    shutdown: bool,
}

struct Flusher {
    log: Option<RedoLog>,
    spare: Vec<u8>,
}

enum EntryState {
    Pending,
    Done,
    Failed(Error),
}

struct WindowEntry {
    last_lsn: Lsn,
    state: EntryState,
    completions: Vec<Arc<Completion>>,
}

struct CommitWindow {
    front_seq: u64,
    entries: VecDeque<WindowEntry>,
}

/// Counters of the write path.
#[derive(Debug, Default)]
struct Counters {
    groups: AtomicU64,
    writes: AtomicU64,
    ops: AtomicU64,
    log_writes: AtomicU64,
    fsyncs: AtomicU64,
    synced_writes: AtomicU64,
    bytes_logged: AtomicU64,
    stall_micros: AtomicU64,
}

/// A snapshot of the write path's counters ([`crate::Db::write_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Commit groups formed.
    pub groups: u64,
    /// Write calls (batches) committed or failed.
    pub writes: u64,
    /// Puts and deletes in those batches.
    pub ops: u64,
    /// Write calls to the redo log.
    pub log_writes: u64,
    /// `fdatasync` calls on the redo log.
    pub fsyncs: u64,
    /// Writes made durable by those fsyncs (so `synced_writes / fsyncs` is writes per fsync).
    pub synced_writes: u64,
    /// Bytes appended to the redo log.
    pub bytes_logged: u64,
    /// Time writers spent stalled (slowed down or stopped), in microseconds.
    pub stall_micros: u64,
}

impl WriteStats {
    /// Average writes per commit group.
    pub fn writes_per_group(&self) -> f64 {
        self.writes as f64 / self.groups.max(1) as f64
    }

    /// Average writes made durable per fsync.
    pub fn writes_per_fsync(&self) -> f64 {
        self.synced_writes as f64 / self.fsyncs.max(1) as f64
    }
}

/// Sizes the pipeline needs from [`crate::Options`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PipelineConfig {
    pub(crate) queues: usize,
    pub(crate) max_group_size: usize,
    pub(crate) max_group_bytes: usize,
}

/// The write pipeline of one database instance; see the module header.
pub(crate) struct Pipeline {
    cfg: PipelineConfig,
    queues: Vec<CachePadded<WriteQueue>>,
    log: CachePadded<Mutex<LogBuffer>>,
    flusher: Mutex<Flusher>,
    driver: Mutex<DriverState>,
    driver_cond: Condvar,
    flush_thread: Mutex<Option<JoinHandle<()>>>,
    window: CachePadded<Mutex<CommitWindow>>,
    visible_lsn: CachePadded<AtomicU64>,
    poisoned: AtomicBool,
    poison: Mutex<Option<Error>>,
    closed: AtomicBool,
    inflight: AtomicUsize,
    counters: Counters,
    /// The log was taken by `close` and synced by the shutdown that took it.
    synced_at_close: AtomicBool,
}

thread_local! {
    static QUEUE_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_QUEUE_HINT: AtomicUsize = AtomicUsize::new(0);

fn queue_hint() -> usize {
    QUEUE_HINT.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT_QUEUE_HINT.fetch_add(1, Ordering::Relaxed));
        }
        h.get()
    })
}

/// How often a waiting leader yields its time slice before sleeping on its group.
const WAIT_YIELDS: u32 = 20;

/// Outcome of stage 1.
enum Buffered {
    /// The group has redo bytes and waits for a flush.
    Logged(Arc<GroupState>),
    /// The group has no redo bytes (`disable_wal`): its window seq and work.
    Unlogged(u64, GroupWork),
}

/// Memtables bound to a group in stage 1, by table id.
struct Bound(Vec<(u32, Arc<Memtable>)>);

impl Bound {
    fn get(&self, table: u32) -> Option<&Memtable> {
        self.0.iter().find(|(id, _)| *id == table).map(|(_, m)| m.as_ref())
    }
}

impl Pipeline {
    /// A pipeline appending to `log`, whose last recovered LSN is `last_lsn`, with its
    /// log-flush thread running.
    pub(crate) fn start(cfg: PipelineConfig, log: RedoLog, last_lsn: Lsn) -> Result<Arc<Self>> {
        let pipeline = Arc::new(Pipeline {
            cfg,
            queues: (0..cfg.queues)
                .map(|_| CachePadded::new(WriteQueue::default()))
                .collect(),
            log: CachePadded::new(Mutex::new(LogBuffer {
                next_lsn: last_lsn + 1,
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
            driver_cond: Condvar::new(),
            flush_thread: Mutex::new(None),
            window: CachePadded::new(Mutex::new(CommitWindow {
                front_seq: 0,
                entries: VecDeque::new(),
            })),
            visible_lsn: CachePadded::new(AtomicU64::new(last_lsn)),
            synced_at_close: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            closed: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            counters: Counters::default(),
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
            .stall_micros
            .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Submits a writer. Returns once the writer is queued as a follower, or after it led its
    /// group through the pipeline. Completion is reported through `writer.completion`.
    pub(crate) fn submit(&self, writer: Writer) {
        // SeqCst pairs with `close`: either close sees this writer in flight, or this writer
        // sees `closed`.
        self.inflight.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.check_writable() {
            self.complete_all(std::slice::from_ref(&writer.completion), Err(e));
            return;
        }
        let q = &self.queues[queue_hint() % self.queues.len()];
        let bytes = writer.batch.rep.len();
        let mut st = q.state.lock();
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
        while st.busy {
            q.cond.wait(&mut st);
        }
        let group = std::mem::take(&mut st.pending);
        st.pending_bytes = 0;
        st.busy = true;
        q.cond.notify_all();
        drop(st);
        self.run_group(group, q);
    }

    fn release_queue(q: &WriteQueue) {
        let mut st = q.state.lock();
        st.busy = false;
        q.cond.notify_all();
    }

    fn complete_all(&self, completions: &[Arc<Completion>], result: Result<()>) {
        // Out of flight before callbacks run: a callback may drop the last database handle,
        // whose close waits for in-flight writes.
        self.inflight.fetch_sub(completions.len(), Ordering::AcqRel);
        for c in completions {
            c.complete(result.clone());
        }
    }

    fn run_group(&self, mut group: Vec<Writer>, q: &WriteQueue) {
        // The leader (this thread) is the first writer of the group.
        let leader_waits = !group[0].asynchronous;
        // Order the group: logged batches first, so their LSNs are contiguous in one record.
        group.sort_by_key(|w| w.disable_wal);
        let wal_writers = group.iter().filter(|w| !w.disable_wal).count();
        let mut payload_crc = 0u32;
        let mut payload_len = 0usize;
        for w in &group[..wal_writers] {
            payload_crc = crc32c::crc32c_append(payload_crc, &w.batch.rep);
            payload_len += w.batch.rep.len();
        }
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.counters.writes.fetch_add(group.len() as u64, Ordering::Relaxed);

        // Stage 1: log buffering. Once the group is in the log buffer, the queue's next group may
        // form and buffer too, so one flush can carry several groups of every queue.
        let buffered = self.buffer_group(group, wal_writers, payload_crc, payload_len, leader_waits);
        Self::release_queue(q);
        let state = match buffered {
            Ok(Buffered::Logged(state)) => state,
            Ok(Buffered::Unlogged(seq, work)) => {
                // No redo bytes: straight to stages 3 and 4.
                self.insert_and_finish(seq, work);
                return;
            }
            Err((e, writers)) => {
                let completions: Vec<_> = writers.iter().map(|w| w.completion.clone()).collect();
                self.complete_all(&completions, Err(e));
                return;
            }
        };
        // Stage 2: log flushing, by this thread if no one else is driving.
        self.drive_if_idle(&state);
        if !state.leader_waits {
            return; // the driver inserts the group and completes it
        }
        // Stage 3 (parallel): wait until flushed, then insert our own group.
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
        self.take_and_process(&state, progress);
    }

    /// Takes a flushed (or failed) group's work and runs stages 3 and 4 for it.
    fn take_and_process(&self, state: &GroupState, mut progress: parking_lot::MutexGuard<'_, GroupProgress>) {
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
    fn insert_and_finish(&self, seq: u64, work: GroupWork) {
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

    /// Stage 1. Appends the group to the log buffer (if it has logged batches) and enters it in
    /// the commit window.
    fn buffer_group(
        &self,
        group: Vec<Writer>,
        wal_writers: usize,
        payload_crc: u32,
        payload_len: usize,
        leader_waits: bool,
    ) -> std::result::Result<Buffered, (Error, Vec<Writer>)> {
        let ops: u64 = group.iter().map(|w| u64::from(w.batch.count)).sum();
        let wal_ops: u64 = group[..wal_writers].iter().map(|w| u64::from(w.batch.count)).sum();
        let mut tables: Vec<&Arc<TableInner>> = Vec::new();
        for w in &group {
            for t in &w.batch.tables {
                if !tables.iter().any(|x| x.id == t.id) {
                    tables.push(t);
                }
            }
        }
        let mut log = self.log.lock();
        // Only poison stops an accepted write; `close` waits for accepted writes to finish.
        if let Some(e) = self.poison_error() {
            return Err((Error::Poisoned(Arc::new(e)), group));
        }
        let first_lsn = log.next_lsn;
        log.next_lsn += ops;
        let bound = Bound(tables.iter().map(|t| (t.id, t.memtable_for_write(first_lsn))).collect());
        if wal_ops > 0 {
            let header = RecordHeader {
                payload_crc,
                payload_len: payload_len as u32,
                record_type: RECORD_GROUP,
                first_lsn,
            };
            log.buf.extend_from_slice(&header.encode());
            for w in &group[..wal_writers] {
                log.buf.extend_from_slice(&w.batch.rep);
            }
            let sync_writes = group[..wal_writers].iter().filter(|w| w.sync).count() as u64;
            log.sync_writes += sync_writes;
            log.sync_needed |= sync_writes > 0;
        }
        let seq = {
            let mut win = self.window.lock();
            win.entries.push_back(WindowEntry {
                last_lsn: first_lsn + ops - 1,
                state: EntryState::Pending,
                completions: Vec::new(),
            });
            win.front_seq + win.entries.len() as u64 - 1
        };
        self.counters.ops.fetch_add(ops, Ordering::Relaxed);
        let work = GroupWork {
            writers: group,
            bound,
            first_lsn,
        };
        if wal_ops == 0 {
            return Ok(Buffered::Unlogged(seq, work));
        }
        let state = Arc::new(GroupState {
            seq,
            last_lsn: first_lsn + ops - 1,
            leader_waits,
            flushed: AtomicBool::new(false),
            progress: Mutex::new(GroupProgress {
                phase: Phase::Buffered,
                work: Some(work),
            }),
            cond: Condvar::new(),
        });
        log.flush_queue.push(state.clone());
        Ok(Buffered::Logged(state))
    }

    /// Makes this thread the driver if none is active (a synchronous leader), or wakes the
    /// log-flush thread to drive (an asynchronous one). A synchronous driver flushes until `own`
    /// is flushed and hands any remaining groups to the log-flush thread.
    fn drive_if_idle(&self, own: &GroupState) {
        {
            let mut d = self.driver.lock();
            if d.active {
                return;
            }
            d.active = true;
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
            let mut d = self.driver.lock();
            if self.log.lock().flush_queue.is_empty() {
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

    /// The log-flush thread: drives stage 2 whenever a leader hands it over, until the buffer
    /// is empty.
    fn flush_thread_main(&self) {
        loop {
            {
                let mut d = self.driver.lock();
                while !d.handoff && !d.shutdown {
                    self.driver_cond.wait(&mut d);
                }
                if !d.handoff {
                    return; // shutdown
                }
                d.handoff = false;
            }
            loop {
                self.flush_round();
                let mut d = self.driver.lock();
                if self.log.lock().flush_queue.is_empty() {
                    d.active = false;
                    break;
                }
            }
        }
    }

    /// Stage 2 once: writes (and fsyncs, if asked) everything buffered, then hands each flushed
    /// group on: a waiting leader is woken to insert it; the driver inserts the others.
    fn flush_round(&self) {
        let mut fl = self.flusher.lock();
        let spare = std::mem::take(&mut fl.spare);
        let (mut buf, sync, synced_writes, groups) = {
            let mut log = self.log.lock();
            let buf = std::mem::replace(&mut log.buf, spare);
            let sync = std::mem::take(&mut log.sync_needed);
            let groups = std::mem::take(&mut log.flush_queue);
            (buf, sync, std::mem::take(&mut log.sync_writes), groups)
        };
        if groups.is_empty() {
            fl.spare = buf;
            return;
        }
        let result = match (self.poison_error(), fl.log.as_mut()) {
            (Some(e), _) => Err(Error::Poisoned(Arc::new(e))),
            (None, None) => Err(Error::Closed),
            (None, Some(redo)) => redo
                .append(&buf, groups.iter().map(|g| g.last_lsn).max().unwrap_or(0))
                .and_then(|()| if sync { redo.sync() } else { Ok(()) })
                .and_then(|()| redo.maybe_roll())
                .map_err(|e| self.poison_with(&e)),
        };
        if result.is_ok() {
            self.counters.log_writes.fetch_add(1, Ordering::Relaxed);
            self.counters
                .bytes_logged
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            if sync {
                self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
                self.counters.synced_writes.fetch_add(synced_writes, Ordering::Relaxed);
            }
        }
        buf.clear();
        fl.spare = buf;
        drop(fl);
        for g in &groups {
            let mut progress = g.progress.lock();
            progress.phase = match &result {
                Ok(()) => Phase::Flushed,
                Err(e) => Phase::Failed(e.clone()),
            };
            g.flushed.store(true, Ordering::Release);
            if g.leader_waits {
                g.cond.notify_one();
            } else {
                self.take_and_process(g, progress);
            }
        }
    }

    /// Stage 4: records the group's outcome and commits the done prefix of the window.
    fn finish(&self, seq: u64, state: EntryState, completions: Vec<Arc<Completion>>) {
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

    /// Counters so far.
    pub(crate) fn stats(&self) -> WriteStats {
        let c = &self.counters;
        WriteStats {
            groups: c.groups.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            ops: c.ops.load(Ordering::Relaxed),
            log_writes: c.log_writes.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            synced_writes: c.synced_writes.load(Ordering::Relaxed),
            bytes_logged: c.bytes_logged.load(Ordering::Relaxed),
            stall_micros: c.stall_micros.load(Ordering::Relaxed),
        }
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
    pub(crate) fn sync_log(&self) -> Result<()> {
        if let Some(e) = self.poison_error() {
            return Err(Error::Poisoned(Arc::new(e)));
        }
        let mut fl = self.flusher.lock();
        match fl.log.as_mut() {
            Some(log) => log.sync().map_err(|e| self.poison_with(&e)),
            // Closed: only a clean shutdown that synced the log itself may go on flushing.
            None if self.synced_at_close.load(Ordering::Acquire) => Ok(()),
            None => Err(Error::Closed),
        }
    }

    /// Records that the closed log was synced by its owner (a clean shutdown), so flushes
    /// during shutdown may proceed.
    pub(crate) fn mark_synced_at_close(&self) {
        self.synced_at_close.store(true, Ordering::Release);
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
