//! The write path's counters and their public snapshot, [`WriteStats`].
//!
//! The counters are striped: each thread adds to the stripe of its `thread_index`, one cache
//! line apart, so writers on many cores do not bounce one line between them; a snapshot sums
//! the stripes.
//!
//! The commit-time split is sampled: each thread times one write in [`SAMPLE`] it submits and
//! one group in [`SAMPLE`] it leads (a clock read costs about as much as a tenth of a small
//! write's whole pipeline work; timing every write cost 4 % of single-thread fillrandom).
//!
//! Invariant: counters only grow (relaxed atomics); a snapshot is not one atomic cut.

use super::Pipeline;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One in this many writes, and groups, per thread is timed for the commit-time split.
pub(crate) const SAMPLE: u32 = 8;

thread_local! {
    static WRITE_TICK: Cell<u32> = const { Cell::new(0) };
    static GROUP_TICK: Cell<u32> = const { Cell::new(0) };
}

fn tick(t: &'static std::thread::LocalKey<Cell<u32>>) -> bool {
    t.with(|c| {
        let v = c.get().wrapping_add(1);
        c.set(v);
        v % SAMPLE == 0
    })
}

/// The time now if this thread's next write is one of the timed ones.
pub(crate) fn sampled_write_clock() -> Option<Instant> {
    tick(&WRITE_TICK).then(Instant::now)
}

/// Whether the group this thread leads now is timed.
pub(super) fn sample_group() -> bool {
    tick(&GROUP_TICK)
}

/// What the pipeline counts; an index into a stripe.
#[derive(Debug, Clone, Copy)]
pub(super) enum Counter {
    Groups,
    Writes,
    Ops,
    LogWrites,
    Fsyncs,
    SyncedWrites,
    BytesLogged,
    StallMicros,
    /// Commit-time split, summed over writers, in nanoseconds (see [`WriteStats`]).
    JoinNanos,
    BufferNanos,
    InsertNanos,
    LogNanos,
    VisibleNanos,
    /// Writes whose join time was measured.
    TimedJoins,
    /// Writes in groups whose stages were timed.
    TimedWrites,
    /// Batches inserted by the follower that wrote them or another invited follower.
    HelpedInserts,
    /// Time timed writers took to resume after their completion, and how many.
    WakeNanos,
    TimedWakes,
    /// Flush rounds whose commit the driver handed to a waiting writer.
    CommitHandoffs,
}

const COUNTERS: usize = Counter::CommitHandoffs as usize + 1;
const STRIPES: usize = 16;

/// Counters of the write path; see the module header.
pub(super) struct Counters {
    stripes: Box<[CachePadded<[AtomicU64; COUNTERS]>]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

impl Counters {
    /// Adds `n` to `counter` in this thread's stripe.
    #[inline]
    pub(super) fn add(&self, counter: Counter, n: u64) {
        let stripe = &self.stripes[crate::thread_index::thread_index() % STRIPES];
        stripe[counter as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `took` once per writer of a group of `writers` to a time counter.
    #[inline]
    pub(super) fn time(&self, counter: Counter, writers: u64, took: Duration) {
        self.add(counter, writers * took.as_nanos() as u64);
    }

    fn sum(&self, counter: Counter) -> u64 {
        self.stripes
            .iter()
            .map(|s| s[counter as usize].load(Ordering::Relaxed))
            .sum()
    }
}

/// A snapshot of the write path's counters ([`crate::Db::write_stats`]).
///
/// The six `*_nanos` fields split the time a write spends in the pipeline, summed over the
/// sampled writes ([`WriteStats::commit_split_micros`] gives the averages): waiting to join a
/// group (over `timed_joins` writes), and over `timed_writes`: stage 1 (the log buffer),
/// stage 3 (memtable insertion), waiting for the log write and fsync after its insertion ended
/// (the two overlap; only the part not hidden behind the insertion counts), and waiting in the
/// commit window until every earlier group is done (becoming visible); then, over
/// `timed_wakes`, the time a waiting writer took to resume once its write was complete.
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
    /// Time from a write's submission until its group's leader took the group.
    pub join_nanos: u64,
    /// Time in stage 1: waiting for and holding the log buffer.
    pub buffer_nanos: u64,
    /// Time in stage 3: inserting the group's batches into memtables.
    pub insert_nanos: u64,
    /// Time waiting for the group's log write (and fsync) after its insertion ended.
    pub log_nanos: u64,
    /// Time from a group being done until it was visible (earlier groups still running).
    pub visible_nanos: u64,
    /// Writes whose join time was measured (one in eight per thread).
    pub timed_joins: u64,
    /// Writes in the groups whose stages were timed (one group in eight per leading thread).
    pub timed_writes: u64,
    /// Batches inserted by invited followers instead of their group's leader (parallel stage
    /// 3, [`crate::Options::parallel_insert_helpers`]).
    pub helped_inserts: u64,
    /// Time from a write's completion until its waiting thread resumed (the wake-up, or the
    /// end of its poll), over `timed_wakes` waiting writes.
    pub wake_nanos: u64,
    /// Waiting writes whose wake-up was measured.
    pub timed_wakes: u64,
    /// Flush rounds whose stage 4 the log driver handed to one of their waiting writers
    /// instead of running it ([`crate::Options::driver_commit_groups`]).
    pub commit_handoffs: u64,
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

    /// The commit-time split per write, in microseconds: (join, buffer, insert, log, visible,
    /// wake), averaged over the sampled writes.
    pub fn commit_split_micros(&self) -> [f64; 6] {
        let per = |n: u64, of: u64| n as f64 / 1000.0 / of.max(1) as f64;
        let timed = self.timed_writes;
        [
            per(self.join_nanos, self.timed_joins),
            per(self.buffer_nanos, timed),
            per(self.insert_nanos, timed),
            per(self.log_nanos, timed),
            per(self.visible_nanos, timed),
            per(self.wake_nanos, self.timed_wakes),
        ]
    }
}

impl Pipeline {
    /// Counters so far.
    pub(crate) fn stats(&self) -> WriteStats {
        let c = &self.counters;
        WriteStats {
            groups: c.sum(Counter::Groups),
            writes: c.sum(Counter::Writes),
            ops: c.sum(Counter::Ops),
            log_writes: c.sum(Counter::LogWrites),
            fsyncs: c.sum(Counter::Fsyncs),
            synced_writes: c.sum(Counter::SyncedWrites),
            bytes_logged: c.sum(Counter::BytesLogged),
            stall_micros: c.sum(Counter::StallMicros),
            join_nanos: c.sum(Counter::JoinNanos),
            buffer_nanos: c.sum(Counter::BufferNanos),
            insert_nanos: c.sum(Counter::InsertNanos),
            log_nanos: c.sum(Counter::LogNanos),
            visible_nanos: c.sum(Counter::VisibleNanos),
            timed_joins: c.sum(Counter::TimedJoins),
            timed_writes: c.sum(Counter::TimedWrites),
            helped_inserts: c.sum(Counter::HelpedInserts),
            wake_nanos: c.sum(Counter::WakeNanos),
            timed_wakes: c.sum(Counter::TimedWakes),
            commit_handoffs: c.sum(Counter::CommitHandoffs),
        }
    }
}
