//! Runs one benchmark: starts its threads together, watches them, merges their results.
//!
//! - All threads wait at a start gate until every one of them exists, then start their clocks
//!   together (db_bench's SharedState).
//! - Seeds: each thread started in this process takes the next number n = 1, 2, 3, ... and
//!   seeds its RNG with `seed + n` (db_bench's `total_thread_count_`).
//! - readwhilewriting runs `threads` readers plus one writer (thread index 0, as in db_bench);
//!   the writer stops when every reader is done and is reported on its own.
//! - The calling thread draws the progress bar (stderr, only on a terminal), prints
//!   `--stats_interval_seconds` lines to stderr, and runs the write-stop watchdog for engines that
//!   have one ([`BenchEngine::write_stop_watch`]): Riptide's writers wait while its memtables or
//!   L0 are full until background flushes catch up, which never happens while flushes keep
//!   failing. If writes make no progress for [`STOP_GRACE`] and the engine reports such a
//!   failure, the watchdog closes the database (stalled writers then fail with `Closed`) and the
//!   benchmark fails with an explanation instead of hanging.
//! - Meta operations (flush, compact, ...) do not come here: they run on the calling thread
//!   (`bench::run_meta`).

use super::engine::BenchEngine;
use super::error::BenchError;
use super::flags::{Benchmark, Config};
use super::keys::ValueSource;
use super::stats::{Merged, ThreadStats};
use super::workload::{run_thread, Role, Shared};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long writes may make no progress, with background flushes failing, before the watchdog
/// gives up.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// How often the calling thread wakes up to draw progress and check the watchdog.
const TICK: Duration = Duration::from_millis(100);

/// The outcome of one benchmark.
#[derive(Debug)]
pub struct Outcome {
    /// Merged measurements of the reported threads.
    pub result: Merged,
    /// readwhilewriting's writer, reported apart.
    pub writer: Option<Merged>,
}

/// Per-process thread numbering for seeds (db_bench's `total_thread_count_`).
#[derive(Debug, Default)]
pub struct SeedCounter {
    started: u64,
}

impl SeedCounter {
    /// The seed of the next thread started.
    pub fn next_seed(&mut self, base: u64) -> u64 {
        self.started += 1;
        base.wrapping_add(self.started)
    }
}

/// The roles of a benchmark's threads, in thread-index order.
pub fn roles(bench: Benchmark, threads: usize) -> Vec<Role> {
    let all = |r: Role| vec![r; threads];
    match bench {
        Benchmark::FillSeq => all(Role::WriteSeq),
        Benchmark::FillRandom | Benchmark::Overwrite => all(Role::WriteRandom),
        Benchmark::DeleteRandom => all(Role::DeleteRandom),
        Benchmark::ReadRandom => all(Role::ReadRandom),
        Benchmark::MultiReadRandom => all(Role::MultiReadRandom),
        Benchmark::SeekRandom => all(Role::SeekRandom),
        Benchmark::ReadSeq => all(Role::Scan { reverse: false }),
        Benchmark::ReadReverse => all(Role::Scan { reverse: true }),
        Benchmark::ReadWhileWriting => {
            let mut r = vec![Role::BackgroundWriter { readers: threads }];
            r.extend(all(Role::ReadRandom));
            r
        }
        // Meta operations have no benchmark threads (see `bench::run_meta`).
        Benchmark::Flush
        | Benchmark::Compact
        | Benchmark::WaitForCompaction
        | Benchmark::Stats
        | Benchmark::LevelStats
        | Benchmark::CompactReuse
        | Benchmark::XBench
        | Benchmark::Tsunami
        | Benchmark::HotKeySnapshot => Vec::new(),
    }
}

/// Total ops expected, for the progress bar; `None` when time decides.
fn expected_ops(bench: Benchmark, cfg: &Config) -> Option<u64> {
    let t = cfg.threads as u64;
    let batches = |ops: u64| ops / cfg.batch_size as u64 * cfg.batch_size as u64;
    match bench {
        Benchmark::FillSeq => Some(batches(cfg.writes) * t),
        Benchmark::ReadSeq | Benchmark::ReadReverse => Some(cfg.reads * t),
        _ if cfg.duration.is_some() => None,
        Benchmark::FillRandom | Benchmark::Overwrite => Some(batches(cfg.writes) * t),
        Benchmark::DeleteRandom => Some(batches(cfg.deletes) * t),
        Benchmark::ReadRandom | Benchmark::SeekRandom | Benchmark::ReadWhileWriting => Some(cfg.reads * t),
        Benchmark::MultiReadRandom => Some(batches(cfg.reads) * t),
        Benchmark::Flush
        | Benchmark::Compact
        | Benchmark::WaitForCompaction
        | Benchmark::Stats
        | Benchmark::LevelStats
        | Benchmark::CompactReuse
        | Benchmark::XBench
        | Benchmark::Tsunami
        | Benchmark::HotKeySnapshot => None,
    }
}

fn progress_bar(bench: Benchmark, cfg: &Config) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match expected_ops(bench, cfg) {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{prefix:>16} [{bar:40}] {human_pos}/{human_len} ops [{elapsed}, eta {eta}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        ),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{prefix:>16} {spinner} {human_pos} ops [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_prefix(bench.name());
    bar
}

/// Runs `bench` on `db` and returns its merged result.
pub fn run<E: BenchEngine>(
    bench: Benchmark,
    cfg: &Config,
    db: &E,
    values: &ValueSource,
    seeds: &mut SeedCounter,
) -> Result<Outcome, BenchError> {
    let roles = roles(bench, cfg.threads);
    let seeds: Vec<u64> = roles.iter().map(|_| seeds.next_seed(cfg.seed)).collect();
    let progress = AtomicU64::new(0);
    let abort = AtomicBool::new(false);
    let readers_done = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let watchdog_msg: Mutex<Option<String>> = Mutex::new(None);
    let interval_hists: Vec<_> = if cfg.histogram && cfg.stats_interval.is_some() {
        roles
            .iter()
            .map(|_| std::sync::Arc::new(Mutex::new(super::stats::new_histogram())))
            .collect()
    } else {
        Vec::new()
    };
    let shared = Shared {
        cfg,
        db,
        values,
        progress: &progress,
        abort: &abort,
        readers_done: &readers_done,
        interval_hists: &interval_hists,
    };
    let bar = progress_bar(bench, cfg);
    let gate = StartGate::default();
    let results: Vec<Result<ThreadStats, BenchError>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(roles.len());
        for (tid, (&role, &seed)) in roles.iter().zip(&seeds).enumerate() {
            let (shared, gate, finished, abort, readers_done) = (&shared, &gate, &finished, &abort, &readers_done);
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{tid}"))
                .spawn_scoped(s, move || {
                    let go = gate.arrive_and_wait();
                    let r = if go {
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_thread(role, tid, seed, shared)
                        })) {
                            Ok(Ok(st)) => Ok(st),
                            Ok(Err(e)) => Err(BenchError::engine(format!("{} failed", bench.name()), e)),
                            Err(p) => Err(BenchError::Panicked(panic_message(p.as_ref()))),
                        }
                    } else {
                        Err(BenchError::Usage("benchmark cancelled".into()))
                    };
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    if role == Role::ReadRandom {
                        readers_done.fetch_add(1, Ordering::AcqRel);
                    }
                    finished.fetch_add(1, Ordering::AcqRel);
                    r
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.open(false);
                    let mut out: Vec<_> = handles.into_iter().map(|h| join(h)).collect();
                    out.push(Err(BenchError::Io {
                        context: "starting benchmark threads".into(),
                        source: e,
                    }));
                    return out;
                }
            }
        }
        gate.wait_for(roles.len());
        gate.open(true);
        monitor(
            bench,
            cfg,
            db,
            &bar,
            &progress,
            &finished,
            roles.len(),
            &abort,
            &watchdog_msg,
            &interval_hists,
        );
        handles.into_iter().map(join).collect()
    });
    bar.finish_and_clear();
    if let Some(msg) = watchdog_msg.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(BenchError::WriteStop(msg));
    }
    let mut reported = Vec::new();
    let mut writer = Vec::new();
    let mut first_error = None;
    for (r, role) in results.into_iter().zip(&roles) {
        match r {
            Ok(stats) if matches!(role, Role::BackgroundWriter { .. }) => writer.push(stats),
            Ok(stats) => reported.push(stats),
            // Report the root cause, not a "cancelled" of a thread that never started.
            Err(e) => {
                if first_error.is_none() || matches!(first_error, Some(BenchError::Usage(_))) {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Outcome {
        result: Merged::from_threads(&reported),
        writer: (!writer.is_empty()).then(|| Merged::from_threads(&writer)),
    })
}

fn join(h: std::thread::ScopedJoinHandle<'_, Result<ThreadStats, BenchError>>) -> Result<ThreadStats, BenchError> {
    h.join()
        .unwrap_or_else(|p| Err(BenchError::Panicked(panic_message(p.as_ref()))))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Holds benchmark threads until all of them exist, then releases them together (or tells
/// them to give up, if a thread could not be started).
#[derive(Default)]
struct StartGate {
    state: Mutex<(usize, Option<bool>)>,
    cond: Condvar,
}

impl StartGate {
    /// Called by a benchmark thread: waits for the gate; true = go, false = cancelled.
    fn arrive_and_wait(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 += 1;
        self.cond.notify_all();
        loop {
            if let Some(go) = st.1 {
                return go;
            }
            st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits until `n` threads arrived.
    fn wait_for(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.0 < n {
            st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self, go: bool) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(go);
        self.cond.notify_all();
    }
}

/// The calling thread's loop while the benchmark threads run.
#[allow(clippy::too_many_arguments)]
fn monitor<E: BenchEngine>(
    bench: Benchmark,
    cfg: &Config,
    db: &E,
    bar: &ProgressBar,
    progress: &AtomicU64,
    finished: &AtomicUsize,
    threads: usize,
    abort: &AtomicBool,
    watchdog_msg: &Mutex<Option<String>>,
    interval_hists: &[std::sync::Arc<Mutex<hdrhistogram::Histogram<u64>>>],
) {
    let start = Instant::now();
    let mut last_report = (start, 0u64);
    let watch = db.write_stop_watch().filter(|_| bench.writes());
    let mut last_writes = (Instant::now(), watch.map_or(0, |w| w.committed_writes()));
    while finished.load(Ordering::Acquire) < threads {
        std::thread::sleep(TICK);
        let done = progress.load(Ordering::Relaxed);
        bar.set_position(done);
        if let Some(every) = cfg.stats_interval {
            let now = Instant::now();
            if now - last_report.0 >= every {
                let interval = (now - last_report.0).as_secs_f64();
                let total = (now - start).as_secs_f64();
                let mut line = format!(
                    "{} ... {:.1} s: {} ops in the last {:.1} s ({:.1} ops/sec), {} ops total ({:.1} ops/sec)",
                    bench.name(),
                    total,
                    done - last_report.1,
                    interval,
                    (done - last_report.1) as f64 / interval,
                    done,
                    done as f64 / total
                );
                if let Some(h) = super::stats::take_interval(interval_hists) {
                    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
                    line.push_str(&format!(
                        "; latency (micros) in the last interval: P50 {:.1} P99 {:.1} P99.9 {:.1} max {:.1}",
                        us(0.5),
                        us(0.99),
                        us(0.999),
                        h.max() as f64 / 1000.0
                    ));
                }
                if let Some((rss, peak)) = super::report::rss_now_and_peak() {
                    line.push_str(&format!("; RSS {rss:.1} MB (peak {peak:.1} MB)"));
                }
                if let Some(status) = db.interval_status() {
                    line.push_str("; ");
                    line.push_str(&status);
                }
                bar.suspend(|| eprintln!("{line}"));
                last_report = (now, done);
            }
        }
        if let Some(watch) = watch {
            let writes = watch.committed_writes();
            if writes != last_writes.1 {
                last_writes = (Instant::now(), writes);
            } else if last_writes.0.elapsed() >= STOP_GRACE {
                if let Some(why) = watch.stopped_for_good(cfg) {
                    *watchdog_msg.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{}: {why}", bench.name()));
                    abort.store(true, Ordering::Relaxed);
                    watch.abort_writers();
                    // Keep waiting for the threads to notice.
                    last_writes = (Instant::now() + Duration::from_secs(3600), writes);
                }
            }
        }
    }
    bar.set_position(progress.load(Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_continue_across_benchmarks_like_db_bench() {
        let mut c = SeedCounter::default();
        assert_eq!(c.next_seed(10), 11);
        assert_eq!(c.next_seed(10), 12);
        assert_eq!(c.next_seed(10), 13);
    }

    #[test]
    fn readwhilewriting_has_one_extra_writer_first() {
        let r = roles(Benchmark::ReadWhileWriting, 3);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], Role::BackgroundWriter { readers: 3 });
        assert!(r[1..].iter().all(|&x| x == Role::ReadRandom));
        assert_eq!(roles(Benchmark::FillSeq, 2), vec![Role::WriteSeq; 2]);
    }
}
