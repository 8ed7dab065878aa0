//! The body of one benchmark thread: what db_bench's `DoWrite`, `DoDelete`, `ReadRandom`,
//! `SeekRandom`, `ReadSequential`/`ReadReverse` and `BGWriter` do, against any
//! [`BenchEngine`] (the same code, monomorphised per engine).
//!
//! Invariants:
//! - Random key numbers are `rng.next() % num`, drawn in db_bench's order: write and delete
//!   loops draw one number per batch for db_bench's DB selection, then one per key; readrandom
//!   draws one for the DB selection and one for the key; multireadrandom one for the DB
//!   selection per batch, then one per key; seekrandom one for the key. So a seed reproduces
//!   db_bench's keys (checked against db_bench 7.8.3's found counts).
//! - readrandom, multireadrandom and readwhilewriting's readers turn their key draws into key
//!   numbers with db_bench's `GetRandomKey` ([`KeyDist`], skewed by `--read_random_exp_range`);
//!   seekrandom and the writers do not (db_bench's `SeekRandom` uses `rand % num` too).
//! - [`OpBudget`] is db_bench's `Duration`: count mode does `floor(max_ops / batch_size)` calls;
//!   time mode checks the clock every [`CLOCK_CHECK_OPS`] ops.
//! - With `async_commit_depth = N > 0` a thread keeps at most N `write_async` handles; an op is
//!   done (counted, sampled) only when its handle has completed; all are drained before the
//!   thread stops its clock. Only engines that accept the flag (Riptide) get here.

use super::engine::{BenchEngine, Cursor, EngineError};
use super::flags::Config;
use super::keys::{KeyBuf, KeyDist, Mt64, ValueSource};
use super::stats::ThreadStats;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// In time mode, the clock is read when the op count crosses a multiple of this.
pub const CLOCK_CHECK_OPS: u64 = 16;

/// Ops a thread accumulates before publishing them to the shared progress counter.
const PROGRESS_CHUNK: u64 = 256;

/// What one thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Puts of keys 0, 1, 2, ... (fillseq).
    WriteSeq,
    /// Puts of random keys (fillrandom, overwrite).
    WriteRandom,
    /// Deletes of random keys (deleterandom).
    DeleteRandom,
    /// Point reads of random keys (readrandom, readwhilewriting readers).
    ReadRandom,
    /// Multi-gets of `--batch_size` random keys (multireadrandom).
    MultiReadRandom,
    /// Seek to a random key and read the entry there (seekrandom).
    SeekRandom,
    /// Forward or backward scan (readseq / readreverse).
    Scan { reverse: bool },
    /// readwhilewriting's writer: random puts until every reader is done.
    BackgroundWriter { readers: usize },
}

/// db_bench's `Duration`: stop after an op budget, or after a time.
#[derive(Debug)]
pub struct OpBudget {
    max_ops: u64,
    deadline: Option<(Instant, Duration)>,
    ops: u64,
}

impl OpBudget {
    /// `max_ops` ops, or `duration` if given (then `max_ops` is ignored).
    pub fn new(max_ops: u64, duration: Option<Duration>) -> OpBudget {
        OpBudget {
            max_ops,
            deadline: duration.map(|d| (Instant::now(), d)),
            ops: 0,
        }
    }

    /// Accounts `increment` more ops about to be done; true when the thread must stop instead.
    /// `abort` is looked at on the same schedule as the clock.
    pub fn done(&mut self, increment: u64, abort: &AtomicBool) -> bool {
        let increment = increment.max(1);
        let before = self.ops;
        self.ops += increment;
        let check = self.ops / CLOCK_CHECK_OPS != before / CLOCK_CHECK_OPS;
        if check && abort.load(Ordering::Relaxed) {
            return true;
        }
        match self.deadline {
            Some((start, d)) => check && start.elapsed() >= d,
            None => self.ops > self.max_ops,
        }
    }
}

/// An engine operation's result.
pub type OpResult<T> = Result<T, EngineError>;

/// Everything a benchmark thread shares with the others.
pub struct Shared<'a, E: BenchEngine> {
    pub cfg: &'a Config,
    pub db: &'a E,
    pub values: &'a ValueSource,
    /// Ops finished by the reported threads (for the progress bar and interval stats).
    pub progress: &'a AtomicU64,
    /// Set when a thread failed or the watchdog fired: every thread stops soon.
    pub abort: &'a AtomicBool,
    /// Readers of readwhilewriting that have finished.
    pub readers_done: &'a AtomicUsize,
    /// Per-thread histograms the monitor drains every `--stats_interval_seconds` (empty unless
    /// that and `--histogram` are on).
    pub interval_hists: &'a [std::sync::Arc<std::sync::Mutex<hdrhistogram::Histogram<u64>>>],
}

/// Publishes finished ops to [`Shared::progress`] in chunks.
struct Progress<'a> {
    shared: &'a AtomicU64,
    pending: u64,
}

impl Progress<'_> {
    #[inline]
    fn add(&mut self, n: u64) {
        self.pending += n;
        if self.pending >= PROGRESS_CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.pending > 0 {
            self.shared.fetch_add(self.pending, Ordering::Relaxed);
            self.pending = 0;
        }
    }
}

/// Runs `role` as thread `tid` with RNG seed `seed`; returns its measurements.
pub fn run_thread<E: BenchEngine>(role: Role, tid: usize, seed: u64, sh: &Shared<'_, E>) -> OpResult<ThreadStats> {
    let mut rng = Mt64::new(seed);
    // Progress shows the reported threads only: readwhilewriting's writer counts apart.
    let unreported = AtomicU64::new(0);
    let mut progress = Progress {
        shared: if matches!(role, Role::BackgroundWriter { .. }) {
            &unreported
        } else {
            sh.progress
        },
        pending: 0,
    };
    let mut st = ThreadStats::start(sh.cfg.histogram).with_interval(sh.interval_hists.get(tid).cloned());
    let result = match role {
        Role::WriteSeq | Role::WriteRandom | Role::DeleteRandom | Role::BackgroundWriter { .. } => {
            write_loop(role, tid, &mut rng, sh, &mut st, &mut progress)
        }
        Role::ReadRandom => read_random(&mut rng, sh, &mut st, &mut progress),
        Role::MultiReadRandom => multi_read_random(&mut rng, sh, &mut st, &mut progress),
        Role::SeekRandom => seek_random(&mut rng, sh, &mut st, &mut progress),
        Role::Scan { reverse } => scan(reverse, sh, &mut st, &mut progress),
    };
    progress.flush();
    st.stop();
    result.map(|()| st)
}

/// A write waiting for its handle.
struct InFlight<P> {
    handle: P,
    submitted: Instant,
    ops: u64,
    bytes: u64,
}

fn write_loop<E: BenchEngine>(
    role: Role,
    tid: usize,
    rng: &mut Mt64,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    let cfg = sh.cfg;
    // Random keys: `rand % num` (db_bench), or Zipfian with --zipf.
    let write_keys = KeyDist::new(cfg.num, 0.0).with_zipf(cfg.zipf);
    let delete = role == Role::DeleteRandom;
    let max_ops = if delete { cfg.deletes } else { cfg.writes };
    // db_bench: fillseq ignores --duration; the background writer runs until the readers stop.
    let duration = if role == Role::WriteSeq { None } else { cfg.duration };
    let mut budget = OpBudget::new(max_ops, duration);
    let batch_size = cfg.batch_size as u64;
    let mut key = KeyBuf::new(cfg.key_size);
    let mut values = sh.values.cursor(tid.wrapping_mul(7919 * 64));
    let mut inflight: VecDeque<InFlight<E::Pending>> = VecDeque::with_capacity(cfg.async_commit_depth);
    let mut next_seq = 0u64;
    let entry_bytes = (cfg.key_size + cfg.value_size) as u64;
    loop {
        let stop = match role {
            Role::BackgroundWriter { readers } => {
                sh.abort.load(Ordering::Relaxed) || sh.readers_done.load(Ordering::Acquire) >= readers
            }
            _ => budget.done(batch_size, sh.abort),
        };
        if stop {
            break;
        }
        // db_bench draws one number per batch to pick a DB (of one); keep the sequence.
        let _db_pick = rng.next_u64();
        let mut batch = sh.db.new_batch(cfg.batch_size);
        for _ in 0..batch_size {
            let k = match role {
                Role::WriteSeq => {
                    next_seq += 1;
                    next_seq - 1
                }
                _ => write_keys.key(rng.next_u64()),
            };
            key.set(k);
            if delete {
                sh.db.delete(&mut batch, key.get())?;
            } else {
                sh.db.put(&mut batch, key.get(), values.next_value())?;
            }
        }
        let bytes = if delete { 0 } else { entry_bytes * batch_size };
        let submitted = Instant::now();
        if cfg.async_commit_depth == 0 {
            sh.db.write(batch)?;
            finish_write(st, progress, submitted, batch_size, bytes);
        } else {
            if inflight.len() >= cfg.async_commit_depth {
                complete_oldest(sh.db, &mut inflight, st, progress)?;
            }
            inflight.push_back(InFlight {
                handle: sh.db.write_async(batch)?,
                submitted,
                ops: batch_size,
                bytes,
            });
        }
    }
    while !inflight.is_empty() {
        complete_oldest(sh.db, &mut inflight, st, progress)?;
    }
    Ok(())
}

fn finish_write(st: &mut ThreadStats, progress: &mut Progress<'_>, submitted: Instant, ops: u64, bytes: u64) {
    if st.hist.is_some() {
        st.sample(submitted.elapsed());
    }
    st.done += ops;
    st.bytes += bytes;
    progress.add(ops);
}

fn complete_oldest<E: BenchEngine>(
    db: &E,
    inflight: &mut VecDeque<InFlight<E::Pending>>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    if let Some(w) = inflight.pop_front() {
        db.wait(w.handle)?;
        finish_write(st, progress, w.submitted, w.ops, w.bytes);
    }
    Ok(())
}

/// The loop shared by readrandom and seekrandom: draws a key per op in db_bench's RNG order
/// (readrandom first draws db_bench's unused database pick), times `lookup` and counts it.
/// `dist` maps the draw to a key number. `lookup` records what it found in the stats.
fn random_lookups<E: BenchEngine>(
    rng: &mut Mt64,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
    draws_db_pick: bool,
    dist: KeyDist,
    mut lookup: impl FnMut(&[u8], &mut ThreadStats) -> OpResult<()>,
) -> OpResult<()> {
    let cfg = sh.cfg;
    let mut budget = OpBudget::new(cfg.reads, cfg.duration);
    let mut key = KeyBuf::new(cfg.key_size);
    let timed = st.hist.is_some();
    while !budget.done(1, sh.abort) {
        if draws_db_pick {
            let _db_pick = rng.next_u64();
        }
        key.set(dist.key(rng.next_u64()));
        let t0 = timed.then(Instant::now);
        lookup(key.get(), st)?;
        st.lookups += 1;
        if let Some(t0) = t0 {
            st.sample(t0.elapsed());
        }
        st.done += 1;
        progress.add(1);
    }
    Ok(())
}

/// The key distribution of db_bench's `GetRandomKey` for this run.
fn get_random_key_dist(cfg: &Config) -> KeyDist {
    KeyDist::new(cfg.num, cfg.read_random_exp_range).with_zipf(cfg.zipf)
}

/// db_bench's `MultiReadRandom` (without `--multiread_stride`): per batch one draw for the
/// database pick, then `--batch_size` keys from `GetRandomKey`, read with one multi-get; the
/// budget counts keys (`floor(reads / batch_size)` batches), one histogram sample per batch.
fn multi_read_random<E: BenchEngine>(
    rng: &mut Mt64,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    let cfg = sh.cfg;
    let dist = get_random_key_dist(cfg);
    let batch = cfg.batch_size;
    let mut budget = OpBudget::new(cfg.reads, cfg.duration);
    let mut keys: Vec<KeyBuf> = (0..batch).map(|_| KeyBuf::new(cfg.key_size)).collect();
    let timed = st.hist.is_some();
    while !budget.done(batch as u64, sh.abort) {
        let _db_pick = rng.next_u64();
        for k in &mut keys {
            k.set(dist.key(rng.next_u64()));
        }
        let slices: Vec<&[u8]> = keys.iter().map(KeyBuf::get).collect();
        let t0 = timed.then(Instant::now);
        let lens = sh.db.multi_get(&slices)?;
        for len in lens.into_iter().flatten() {
            st.found += 1;
            st.bytes += (cfg.key_size + len) as u64;
        }
        if let Some(t0) = t0 {
            st.sample(t0.elapsed());
        }
        st.lookups += batch as u64;
        st.done += batch as u64;
        progress.add(batch as u64);
    }
    Ok(())
}

fn read_random<E: BenchEngine>(
    rng: &mut Mt64,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    let key_size = sh.cfg.key_size;
    let dist = get_random_key_dist(sh.cfg);
    random_lookups(rng, sh, st, progress, true, dist, |key, st| {
        if let Some(len) = sh.db.get(key, <[u8]>::len)? {
            st.found += 1;
            st.bytes += (key_size + len) as u64;
        }
        Ok(())
    })
}

fn seek_random<E: BenchEngine>(
    rng: &mut Mt64,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    // db_bench's SeekRandom draws `rand % num`, never skewed.
    let dist = KeyDist::new(sh.cfg.num, 0.0).with_zipf(sh.cfg.zipf);
    random_lookups(rng, sh, st, progress, false, dist, |key, st| {
        // As db_bench (without --use_tailing_iterator): a fresh iterator per seek, so it sees
        // the latest data.
        let mut it = sh.db.cursor()?;
        it.seek(key);
        if it.valid() {
            // Read the entry: the key (compared) and its value.
            std::hint::black_box(it.value());
            if it.key() == key {
                st.found += 1;
            }
        }
        it.status()?;
        Ok(())
    })
}

fn scan<E: BenchEngine>(
    reverse: bool,
    sh: &Shared<'_, E>,
    st: &mut ThreadStats,
    progress: &mut Progress<'_>,
) -> OpResult<()> {
    let cfg = sh.cfg;
    let timed = st.hist.is_some();
    let mut it = sh.db.cursor()?;
    if reverse {
        it.seek_to_last();
    } else {
        it.seek_to_first();
    }
    let mut last = timed.then(Instant::now);
    let mut n = 0u64;
    while n < cfg.reads && it.valid() {
        st.bytes += (it.key().len() + it.value().len()) as u64;
        st.done += 1;
        n += 1;
        progress.add(1);
        if let Some(t) = &mut last {
            // db_bench samples the time between consecutive finished ops.
            let now = Instant::now();
            st.sample(now - *t);
            *t = now;
        }
        if n.is_multiple_of(CLOCK_CHECK_OPS) && sh.abort.load(Ordering::Relaxed) {
            break;
        }
        if reverse {
            it.prev();
        } else {
            it.next();
        }
    }
    it.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_budget_is_db_bench_duration() {
        let abort = AtomicBool::new(false);
        let calls = |max: u64, inc: u64| {
            let mut b = OpBudget::new(max, None);
            let mut n = 0;
            while !b.done(inc, &abort) {
                n += 1;
            }
            n
        };
        assert_eq!(calls(1000, 1), 1000);
        assert_eq!(calls(10000, 7), 1428); // db_bench: 9996 ops with --batch_size=7
        assert_eq!(calls(0, 1), 0);
        assert_eq!(calls(5, 10), 0);
    }

    #[test]
    fn time_budget_ignores_counts_and_stops() {
        let abort = AtomicBool::new(false);
        let mut b = OpBudget::new(1, Some(Duration::from_millis(30)));
        let start = Instant::now();
        let mut n = 0u64;
        while !b.done(1, &abort) {
            n += 1;
        }
        assert!(n > 1, "time mode must not stop at max_ops");
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn abort_stops_within_a_check_interval() {
        let abort = AtomicBool::new(true);
        let mut b = OpBudget::new(u64::MAX, None);
        let mut n = 0;
        while !b.done(1, &abort) {
            n += 1;
        }
        assert!(n < CLOCK_CHECK_OPS);
    }
}
