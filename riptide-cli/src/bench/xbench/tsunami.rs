//! `tsunami`: seed 000 Fig. 1. Transactions (the xbench mix) are offered at `--tsunami_base_tps`
//! for the first phase, at `--tsunami_factor` times that for the spike, and at the base rate
//! again after it (`--tsunami_phases=BEFORE,SPIKE,AFTER` seconds); each second's committed
//! transactions and queries and its response-time percentiles go to `<--tsunami_out>.csv`, and a
//! plot of both to `<--tsunami_out>.svg`.
//!
//! Invariants:
//! - Open loop: transaction `i` is due at a time fixed by the schedule ([`Schedule::due`]),
//!   whatever happened before it; threads take the next due transaction from a shared counter
//!   and wait until it is due. Response time is measured from the due time, not from when a
//!   thread got to it, so a backlog shows up as latency (no coordinated omission).
//! - A transaction is counted in the second (since the start) in which it committed.
//! - When the engine cannot keep up, transactions complete after their phase; the run lasts
//!   until every scheduled transaction has committed, and the CSV covers every second, unless
//!   `--tsunami_drain_limit` ends it that many seconds after the schedule: transactions not
//!   started by then are reported as left over (a started one always runs to its commit).

use super::engine::TxnEngine;
use super::plot;
use super::{Worker, XStats};
use crate::bench::cpu;
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
pub use crate::bench::flags::TsunamiConfig;
use crate::bench::keys::ValueSource;
use crate::bench::stats::{new_histogram, record_duration};
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What one tsunami client thread hands back: its per-second counts and its totals.
type ThreadOutcome = Result<(Vec<Second>, XStats), BenchError>;

/// When each transaction is due.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    base: f64,
    peak: f64,
    phases: [u64; 3],
    counts: [u64; 3],
}

impl Schedule {
    /// The schedule of `t`.
    pub fn new(t: &TsunamiConfig) -> Schedule {
        let peak = t.base_tps * t.factor;
        let rates = [t.base_tps, peak, t.base_tps];
        let counts = std::array::from_fn(|i| (rates[i] * t.phases[i] as f64).round() as u64);
        Schedule {
            base: t.base_tps,
            peak,
            phases: t.phases,
            counts,
        }
    }

    /// Seconds after the start at which transaction `i` is due; `None` past the end.
    pub fn due(&self, i: u64) -> Option<f64> {
        let [n1, n2, n3] = self.counts;
        let [b, s, _] = self.phases;
        if i < n1 {
            Some(i as f64 / self.base)
        } else if i < n1 + n2 {
            Some(b as f64 + (i - n1) as f64 / self.peak)
        } else if i < n1 + n2 + n3 {
            Some((b + s) as f64 + (i - n1 - n2) as f64 / self.base)
        } else {
            None
        }
    }

    /// Transactions offered in second `sec`.
    pub fn offered(&self, sec: u64) -> f64 {
        let [b, s, a] = self.phases;
        if sec < b {
            self.base
        } else if sec < b + s {
            self.peak
        } else if sec < b + s + a {
            self.base
        } else {
            0.0
        }
    }

    /// The phase name of second `sec`.
    pub fn phase(&self, sec: u64) -> &'static str {
        let [b, s, a] = self.phases;
        if sec < b {
            "before"
        } else if sec < b + s {
            "spike"
        } else if sec < b + s + a {
            "after"
        } else {
            "drain"
        }
    }

    /// Scheduled seconds.
    pub fn seconds(&self) -> u64 {
        self.phases.iter().sum()
    }

    /// Scheduled transactions.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// One second's measurements.
pub struct Second {
    /// Committed transactions.
    pub txns: u64,
    /// Committed queries.
    pub queries: u64,
    /// Aborted (and retried) attempts.
    pub aborts: u64,
    /// Response times (from the due time), ns.
    pub hist: Histogram<u64>,
}

impl Second {
    fn new() -> Second {
        Second {
            txns: 0,
            queries: 0,
            aborts: 0,
            hist: new_histogram(),
        }
    }
}

/// One row of the CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Second since the start.
    pub second: u64,
    /// Phase name.
    pub phase: &'static str,
    /// Offered transactions per second.
    pub offered_tps: f64,
    /// Committed transactions in that second.
    pub tps: u64,
    /// Committed queries in that second.
    pub qps: u64,
    /// Response-time percentiles in microseconds (0 without transactions).
    pub p50_us: f64,
    /// P99.
    pub p99_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Aborted attempts.
    pub aborts: u64,
}

/// Runs the schedule; writes the CSV and the plot; prints a summary per phase.
pub fn run<T: TxnEngine>(
    engine: &T,
    cfg: &Config,
    values: &ValueSource,
    seeds: &[u64],
    first_insert: u64,
) -> Result<XStats, BenchError> {
    let t = &cfg.xbench.tsunami;
    let schedule = Schedule::new(t);
    let next = AtomicU64::new(0);
    let next_insert = AtomicU64::new(first_insert);
    let txn_queries = cfg.xbench.txn_queries as u64;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let give_up_at = t
        .drain_limit
        .map(|d| start + Duration::from_secs(schedule.seconds().saturating_add(d)));
    let (per_thread, cpu_use): (Vec<ThreadOutcome>, _) = cpu::measure(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = seeds
                .iter()
                .map(|&seed| {
                    let (next, next_insert, stop, schedule) = (&next, &next_insert, &stop, &schedule);
                    scope.spawn(move || {
                        let mut w = Worker::new(engine, cfg, values, seed, next_insert);
                        let mut totals = XStats::new();
                        let mut secs: Vec<Second> = Vec::new();
                        while !stop.load(Ordering::Relaxed) {
                            if give_up_at.is_some_and(|g| Instant::now() >= g) {
                                break;
                            }
                            let Some(at) = schedule.due(next.fetch_add(1, Ordering::Relaxed)) else {
                                break;
                            };
                            let due = start + Duration::from_secs_f64(at);
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            let aborts = totals.aborts;
                            let took = match w.transaction(&mut totals, due) {
                                Ok(d) => d,
                                Err(e) => {
                                    stop.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                            };
                            let sec = start.elapsed().as_secs() as usize;
                            if secs.len() <= sec {
                                secs.resize_with(sec + 1, Second::new);
                            }
                            // A transaction returns only once committed, with all its queries.
                            let s = &mut secs[sec];
                            s.txns += 1;
                            s.queries += txn_queries;
                            s.aborts += totals.aborts - aborts;
                            record_duration(&mut s.hist, took);
                        }
                        Ok((secs, totals))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(BenchError::Usage("a tsunami thread panicked".into())))
                })
                .collect()
        })
    });
    let elapsed = start.elapsed();
    let mut seconds: Vec<Second> = Vec::new();
    let mut total = XStats::new();
    let mut thread_seconds = 0.0;
    for r in per_thread {
        let (secs, s) = r?;
        total.merge(&s);
        thread_seconds += elapsed.as_secs_f64();
        if seconds.len() < secs.len() {
            seconds.resize_with(secs.len(), Second::new);
        }
        for (i, sec) in secs.into_iter().enumerate() {
            let m = &mut seconds[i];
            m.txns += sec.txns;
            m.queries += sec.queries;
            m.aborts += sec.aborts;
            let _ = m.hist.add(&sec.hist);
        }
    }
    if (seconds.len() as u64) < schedule.seconds() {
        seconds.resize_with(schedule.seconds() as usize, Second::new);
    }
    let rows = rows(&schedule, &seconds);
    let prefix = t
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("./bench-data/tsunami-{}", cfg.engine.name())));
    let csv_path = with_ext(&prefix, "csv");
    let svg_path = with_ext(&prefix, "svg");
    if let Some(dir) = csv_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::Io {
            context: format!("creating {}", dir.display()),
            source: e,
        })?;
    }
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).map_err(|e| BenchError::Io {
            context: format!("writing {}", path.display()),
            source: e,
        })
    };
    write(&csv_path, csv(&rows))?;
    let title = format!(
        "riptide bench --benchmarks=tsunami --engine={}: {} threads, mix {}, {} tps then x{} for {} s",
        cfg.engine.name(),
        cfg.threads,
        cfg.xbench.mix.name(),
        t.base_tps,
        t.factor,
        t.phases[1]
    );
    write(&svg_path, plot::tsunami_svg(&title, &rows))?;
    for line in super::report_lines("tsunami", cfg, &total, elapsed, thread_seconds, cpu_use.as_ref()) {
        println!("{line}");
    }
    for phase in ["before", "spike", "after", "drain"] {
        let in_phase: Vec<&Row> = rows.iter().filter(|r| r.phase == phase).collect();
        if in_phase.is_empty() {
            continue;
        }
        let mut h = new_histogram();
        let mut txns = 0;
        for (r, s) in rows.iter().zip(&seconds) {
            if r.phase == phase {
                let _ = h.add(&s.hist);
                txns += s.txns;
            }
        }
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
        println!(
            "tsunami phase {phase:<6}: {:>3} s, offered {:>8.0} tps, committed {:>8.0} tps; response time (us) P50 \
             {:.1} P99 {:.1} max {:.1}",
            in_phase.len(),
            in_phase[0].offered_tps,
            txns as f64 / in_phase.len() as f64,
            q(0.5),
            q(0.99),
            h.max() as f64 / 1000.0
        );
    }
    let committed: u64 = seconds.iter().map(|s| s.txns).sum();
    println!(
        "tsunami schedule: {} transactions over {} s; the last committed {:.1} s after the start",
        schedule.total(),
        schedule.seconds(),
        elapsed.as_secs_f64()
    );
    if let Some(limit) = t.drain_limit.filter(|_| committed < schedule.total()) {
        println!(
            "tsunami left over: {} transactions not started when the drain limit ({limit} s after the schedule) passed",
            schedule.total() - committed
        );
    }
    println!(
        "tsunami output: {} (per second) and {} (plot)",
        csv_path.display(),
        svg_path.display()
    );
    Ok(total)
}

fn with_ext(prefix: &std::path::Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// The CSV rows of `seconds`.
pub fn rows(schedule: &Schedule, seconds: &[Second]) -> Vec<Row> {
    seconds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let q = |p: f64| {
                if s.hist.is_empty() {
                    0.0
                } else {
                    s.hist.value_at_quantile(p) as f64 / 1000.0
                }
            };
            Row {
                second: i as u64,
                phase: schedule.phase(i as u64),
                offered_tps: schedule.offered(i as u64),
                tps: s.txns,
                qps: s.queries,
                p50_us: q(0.5),
                p99_us: q(0.99),
                max_us: s.hist.max() as f64 / 1000.0,
                aborts: s.aborts,
            }
        })
        .collect()
}

/// The CSV text: a header, then one line per second.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from("second,phase,offered_tps,tps,qps,p50_us,p99_us,max_us,aborts\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{:.0},{},{},{:.1},{:.1},{:.1},{}",
            r.second, r.phase, r.offered_tps, r.tps, r.qps, r.p50_us, r.p99_us, r.max_us, r.aborts
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(base: f64, factor: f64, phases: [u64; 3]) -> TsunamiConfig {
        TsunamiConfig {
            base_tps: base,
            factor,
            phases,
            out: None,
            drain_limit: None,
        }
    }

    #[test]
    fn schedule_offers_the_base_rate_then_the_spike_then_the_base_rate() {
        let s = Schedule::new(&cfg(10.0, 100.0, [2, 1, 3]));
        assert_eq!(s.total(), 20 + 1000 + 30);
        assert_eq!(s.seconds(), 6);
        assert_eq!(s.due(0), Some(0.0));
        assert_eq!(s.due(19), Some(1.9));
        assert_eq!(s.due(20), Some(2.0));
        assert_eq!(s.due(520), Some(2.5));
        assert_eq!(s.due(1020), Some(3.0));
        assert_eq!(s.due(1049), Some(3.0 + 29.0 / 10.0));
        assert_eq!(s.due(1050), None);
        // Due times never go back, and each second gets what it offers.
        let mut per_sec = [0u64; 6];
        let mut last = 0.0;
        for i in 0..s.total() {
            let d = s.due(i).unwrap();
            assert!(d >= last);
            last = d;
            per_sec[d as usize] += 1;
        }
        for (sec, n) in per_sec.iter().enumerate() {
            assert_eq!(*n as f64, s.offered(sec as u64), "second {sec}");
        }
        assert_eq!(
            (0..7).map(|i| s.phase(i)).collect::<Vec<_>>(),
            ["before", "before", "spike", "after", "after", "after", "drain"]
        );
    }

    #[test]
    fn csv_has_one_line_per_second_with_percentiles() {
        let s = Schedule::new(&cfg(10.0, 10.0, [1, 1, 1]));
        let mut secs: Vec<Second> = (0..3).map(|_| Second::new()).collect();
        for us in 1..=100u64 {
            secs[1].hist.record(us * 1000).unwrap();
        }
        secs[1].txns = 100;
        secs[1].queries = 300;
        let rows = rows(&s, &secs);
        assert_eq!(rows[0].p99_us, 0.0);
        assert_eq!(rows[1].phase, "spike");
        assert_eq!(rows[1].offered_tps, 100.0);
        assert!((rows[1].p50_us - 50.0).abs() < 0.1, "{}", rows[1].p50_us);
        assert!((rows[1].p99_us - 99.0).abs() < 0.1, "{}", rows[1].p99_us);
        let text = csv(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].starts_with("1,spike,100,100,300,"), "{}", lines[2]);
    }
}
