//! Per-thread measurements ([`ThreadStats`]) and their merge into one benchmark result
//! ([`Merged`]), following db_bench's `Stats`.
//!
//! - `done` counts finished operations (an op is a put/delete/read/seek; a batch of N puts is N
//!   ops); an asynchronous write counts only once its handle completed.
//! - The histogram holds one sample per finished call (a whole batch for batched writes, as in
//!   db_bench), in nanoseconds, reported in microseconds.
//! - Elapsed time of a benchmark = latest thread finish - earliest thread start; micros/op uses
//!   the sum of the per-thread times, so it is per-thread latency, like db_bench's.

use hdrhistogram::Histogram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one benchmark thread measured.
#[derive(Debug)]
pub struct ThreadStats {
    /// Operations finished.
    pub done: u64,
    /// User bytes moved (key + value of writes and of found reads), for MB/s.
    pub bytes: u64,
    /// Lookups that found their key (readrandom, seekrandom).
    pub found: u64,
    /// Lookups attempted (readrandom, seekrandom); 0 = no "(X of Y found)" message.
    pub lookups: u64,
    /// Latency samples in nanoseconds, if `--histogram`.
    pub hist: Option<Histogram<u64>>,
    /// The same samples again, for `--stats_interval_seconds` lines: the monitor thread takes
    /// and resets it at each interval (uncontended between intervals).
    interval: Option<Arc<Mutex<Histogram<u64>>>>,
    start: Instant,
    finish: Instant,
}

/// Records `ns`; `record` grows the histogram, `saturating_record` alone would clamp to its
/// current range (2048 ns for a new one).
#[inline]
fn record(h: &mut Histogram<u64>, ns: u64) {
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}

/// Records latency `d` in nanoseconds (saturating at the histogram's top).
pub(crate) fn record_duration(h: &mut Histogram<u64>, d: Duration) {
    record(h, d.as_nanos().min(u64::MAX as u128) as u64);
}

/// Takes the samples gathered in `hists` since the last call (resetting them) and returns
/// their merge, or `None` if there were none.
pub fn take_interval(hists: &[Arc<Mutex<Histogram<u64>>>]) -> Option<Histogram<u64>> {
    let mut out = new_histogram();
    for h in hists {
        let mut g = h.lock().unwrap_or_else(|e| e.into_inner());
        // Same precision, growing bounds: add fails only on a range it cannot grow to.
        let _ = out.add(&*g);
        g.reset();
    }
    (!out.is_empty()).then_some(out)
}

/// A new histogram for nanosecond samples (3 significant digits, grows as needed).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid hdrhistogram precision")
}

impl ThreadStats {
    /// Starts measuring now.
    pub fn start(histogram: bool) -> ThreadStats {
        let now = Instant::now();
        ThreadStats {
            done: 0,
            bytes: 0,
            found: 0,
            lookups: 0,
            hist: histogram.then(new_histogram),
            interval: None,
            start: now,
            finish: now,
        }
    }

    /// Also records every sample into `h` (per-interval latency lines).
    pub fn with_interval(mut self, h: Option<Arc<Mutex<Histogram<u64>>>>) -> ThreadStats {
        self.interval = h;
        self
    }

    /// Records one latency sample.
    #[inline]
    pub fn sample(&mut self, latency: Duration) {
        if let Some(h) = &mut self.hist {
            record_duration(h, latency);
            if let Some(i) = &self.interval {
                record_duration(&mut i.lock().unwrap_or_else(|e| e.into_inner()), latency);
            }
        }
    }

    /// Stops the clock.
    pub fn stop(&mut self) {
        self.finish = Instant::now();
    }

    /// Time between start and stop.
    pub fn elapsed(&self) -> Duration {
        self.finish.saturating_duration_since(self.start)
    }
}

/// The result of one benchmark: its threads' [`ThreadStats`] merged.
#[derive(Debug)]
pub struct Merged {
    /// Operations finished by all threads.
    pub done: u64,
    /// User bytes moved by all threads.
    pub bytes: u64,
    /// Lookups that found their key, all threads.
    pub found: u64,
    /// Lookups attempted, all threads.
    pub lookups: u64,
    /// Latest finish - earliest start.
    pub elapsed: Duration,
    /// Sum of the per-thread elapsed times, in seconds.
    pub thread_seconds: f64,
    /// Merged latency histogram (nanoseconds), if `--histogram`.
    pub hist: Option<Histogram<u64>>,
}

impl Merged {
    /// Merges the given threads (at least one).
    pub fn from_threads<'a>(threads: impl IntoIterator<Item = &'a ThreadStats>) -> Merged {
        let mut m = Merged {
            done: 0,
            bytes: 0,
            found: 0,
            lookups: 0,
            elapsed: Duration::ZERO,
            thread_seconds: 0.0,
            hist: None,
        };
        let mut start: Option<Instant> = None;
        let mut finish: Option<Instant> = None;
        for t in threads {
            m.done += t.done;
            m.bytes += t.bytes;
            m.found += t.found;
            m.lookups += t.lookups;
            m.thread_seconds += t.elapsed().as_secs_f64();
            start = Some(start.map_or(t.start, |s| s.min(t.start)));
            finish = Some(finish.map_or(t.finish, |f| f.max(t.finish)));
            if let Some(h) = &t.hist {
                let into = m.hist.get_or_insert_with(new_histogram);
                // Both histograms auto-resize, so adding cannot fail on range.
                let _ = into.add(h);
            }
        }
        if let (Some(s), Some(f)) = (start, finish) {
            m.elapsed = f.saturating_duration_since(s);
        }
        m
    }

    /// Aggregate operations per second (db_bench's `ops/sec`).
    pub fn ops_per_sec(&self) -> f64 {
        self.done.max(1) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Per-thread microseconds per operation (db_bench's `micros/op`).
    pub fn micros_per_op(&self) -> f64 {
        self.thread_seconds * 1e6 / self.done.max(1) as f64
    }

    /// Megabytes (MiB) per second of user data, as db_bench computes it.
    pub fn mb_per_sec(&self) -> f64 {
        (self.bytes as f64 / 1_048_576.0) / self.elapsed.as_secs_f64().max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_counts_and_spans_time() {
        let mut a = ThreadStats::start(true);
        let mut b = ThreadStats::start(true);
        a.done = 10;
        a.bytes = 100;
        a.found = 3;
        a.lookups = 10;
        a.sample(Duration::from_micros(5));
        b.done = 30;
        b.sample(Duration::from_micros(7));
        b.sample(Duration::from_micros(9_000));
        std::thread::sleep(Duration::from_millis(20));
        a.stop();
        std::thread::sleep(Duration::from_millis(20));
        b.stop();
        let m = Merged::from_threads([&a, &b]);
        assert_eq!((m.done, m.bytes, m.found, m.lookups), (40, 100, 3, 10));
        assert!(m.elapsed >= b.elapsed() && m.elapsed >= Duration::from_millis(40));
        assert!((m.thread_seconds - (a.elapsed() + b.elapsed()).as_secs_f64()).abs() < 1e-9);
        let h = m.hist.as_ref().unwrap();
        assert_eq!(h.len(), 3);
        // Large samples are kept, not clamped to a new histogram's initial range.
        assert!(h.max() >= 8_990_000 && h.max() <= 9_010_000, "{}", h.max());
        assert!(h.min() >= 4_990 && h.min() <= 5_010, "{}", h.min());
        // micros/op is per thread: sum of thread times / ops.
        assert!((m.micros_per_op() - m.thread_seconds * 1e6 / 40.0).abs() < 1e-6);
        assert!((m.ops_per_sec() - 40.0 / m.elapsed.as_secs_f64()).abs() < 1e-6);
    }

    #[test]
    fn no_histogram_without_the_flag() {
        let mut t = ThreadStats::start(false);
        t.sample(Duration::from_micros(1));
        t.stop();
        assert!(Merged::from_threads([&t]).hist.is_none());
    }
}
