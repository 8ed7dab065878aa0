//! `xbench` and `tsunami`: seed 000's e-commerce workload (X-Bench, §4.2 and App. B) over
//! transactions, and the tsunami of Fig. 1 (a ~100x jump in offered load in one second).
//!
//! The table: records `0..num` with `--key_size`-byte keys (the key number big-endian, padded, as
//! every benchmark) and `--value_size`-byte values; seed 000 uses 12-byte keys and 500-byte
//! values (`--key_size=12 --value_size=500`). On a pristine database the records are loaded
//! first (in key order, plain batches of [`LOAD_BATCH`], then a flush); otherwise (for example
//! `--use_existing_db=1` after a `fillseq` with the same sizes) the run uses what is there.
//!
//! A transaction is `--txn_queries` queries, each drawn from `--mix=P:R:U:I`:
//! - point lookup: `get` of a key drawn from `[0, num)` (uniform, or `--zipf`);
//! - range lookup: `--range_size` entries from such a key on (a short scan);
//! - update: `get_for_update` of such a key, then `put` of a new value;
//! - insert: `get_for_update` of a new key (the uniqueness check of a primary key), then `put`;
//!   new keys are `num, num+1, ...` shared by all threads (an auto-increment order id); on an
//!   existing database they start after the largest key number already there, so a second run
//!   inserts new records instead of overwriting the first run's ([`first_insert_key`]).
//!
//! Invariants:
//! - Keys and values come from the same generators as every other benchmark (seeded per
//!   thread), so two engines get byte-identical operations.
//! - A transaction that hits a conflict (write conflict, lock timeout, deadlock) is rolled back
//!   and retried with the same queries (new insert keys are kept); its latency includes the
//!   retries. Only committed transactions count; aborts are reported.
//! - Latency percentiles come from full histograms (not samples), per transaction and per query
//!   kind.

pub mod engine;
pub mod plot;
pub mod tsunami;

use super::cpu::{self, CpuShare};
use super::engine::{BenchEngine, EngineKind};
use super::error::BenchError;
use super::flags::{Config, XbenchConfig};
use super::keys::{KeyBuf, KeyDist, Mt64, ValueSource};
use super::report;
use super::stats::{new_histogram, record_duration, Merged};
use engine::{EngineTxn, TxnEngine, TxnError};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Records per load batch.
pub const LOAD_BATCH: usize = 1000;

/// Retries of one conflicting transaction before the benchmark gives up.
pub const MAX_RETRIES: u32 = 1000;

/// The kinds of query, in `--mix` order.
pub const KINDS: [&str; 4] = ["point", "range", "update", "insert"];

/// One query, its key drawn before the transaction starts (so a retry repeats it).
#[derive(Debug, Clone, Copy)]
enum Query {
    Point(u64),
    Range(u64),
    Update(u64),
    Insert(u64),
}

impl Query {
    fn kind(self) -> usize {
        match self {
            Query::Point(_) => 0,
            Query::Range(_) => 1,
            Query::Update(_) => 2,
            Query::Insert(_) => 3,
        }
    }
}

/// What one thread measured.
pub struct XStats {
    /// Committed transactions.
    pub txns: u64,
    /// Committed queries per kind.
    pub queries: [u64; 4],
    /// Entries read by range lookups, and point lookups / updates that found their key.
    pub rows_scanned: u64,
    /// Point lookups that found their key.
    pub found: u64,
    /// User bytes read and written.
    pub bytes: u64,
    /// User bytes written (keys and values of committed updates and inserts).
    pub bytes_written: u64,
    /// Transactions rolled back on a conflict (each was retried).
    pub aborts: u64,
    /// Transaction latency (begin to commit, including retries), ns.
    pub txn_hist: Histogram<u64>,
    /// Latency of each query kind (inside its transaction, the last attempt), ns.
    pub query_hist: [Histogram<u64>; 4],
    /// Per committed transaction, its last attempt's time from `begin` to the end of its last
    /// statement, ns.
    pub statements_hist: Histogram<u64>,
    /// Per committed transaction, the time of its (successful) `commit` call, ns.
    pub commit_hist: Histogram<u64>,
}

impl XStats {
    fn new() -> XStats {
        XStats {
            txns: 0,
            queries: [0; 4],
            rows_scanned: 0,
            found: 0,
            bytes: 0,
            bytes_written: 0,
            aborts: 0,
            txn_hist: new_histogram(),
            query_hist: [new_histogram(), new_histogram(), new_histogram(), new_histogram()],
            statements_hist: new_histogram(),
            commit_hist: new_histogram(),
        }
    }

    fn merge(&mut self, o: &XStats) {
        self.txns += o.txns;
        for i in 0..4 {
            self.queries[i] += o.queries[i];
            let _ = self.query_hist[i].add(&o.query_hist[i]);
        }
        self.rows_scanned += o.rows_scanned;
        self.found += o.found;
        self.bytes += o.bytes;
        self.bytes_written += o.bytes_written;
        self.aborts += o.aborts;
        let _ = self.txn_hist.add(&o.txn_hist);
        let _ = self.statements_hist.add(&o.statements_hist);
        let _ = self.commit_hist.add(&o.commit_hist);
    }

    /// Committed queries of every kind.
    pub fn total_queries(&self) -> u64 {
        self.queries.iter().sum()
    }
}

/// One benchmark thread's generators.
pub struct Worker<'a, T: TxnEngine> {
    engine: &'a T,
    x: &'a XbenchConfig,
    rng: Mt64,
    dist: KeyDist,
    key: KeyBuf,
    values: super::keys::ValueCursor<'a>,
    next_insert: &'a AtomicU64,
    queries: Vec<Query>,
    /// Each query's latency in the current attempt (reused across transactions).
    latencies: Vec<Duration>,
}

impl<'a, T: TxnEngine> Worker<'a, T> {
    /// A worker seeded with `seed`; inserts take key numbers from `next_insert`.
    pub fn new(
        engine: &'a T,
        cfg: &'a Config,
        values: &'a ValueSource,
        seed: u64,
        next_insert: &'a AtomicU64,
    ) -> Worker<'a, T> {
        Worker {
            engine,
            x: &cfg.xbench,
            rng: Mt64::new(seed),
            dist: KeyDist::new(cfg.num, 0.0).with_zipf(cfg.zipf),
            key: KeyBuf::new(cfg.key_size),
            values: values.cursor((seed as usize).wrapping_mul(7919)),
            next_insert,
            queries: Vec::with_capacity(cfg.xbench.txn_queries),
            latencies: Vec::with_capacity(cfg.xbench.txn_queries),
        }
    }

    /// Draws the next transaction's queries.
    fn draw(&mut self) {
        self.queries.clear();
        for _ in 0..self.x.txn_queries {
            let kind = self.x.mix.pick(self.rng.next_u64());
            let q = match kind {
                0 => Query::Point(self.dist.key(self.rng.next_u64())),
                1 => Query::Range(self.dist.key(self.rng.next_u64())),
                2 => Query::Update(self.dist.key(self.rng.next_u64())),
                _ => Query::Insert(self.next_insert.fetch_add(1, Ordering::Relaxed)),
            };
            self.queries.push(q);
        }
    }

    /// Runs one attempt of the drawn transaction; query latencies go to `lat`. Returns the time
    /// from `begin` to the end of the last statement, and the time of the `commit` call.
    fn attempt(&mut self, lat: &mut [Duration], s: &mut XStats) -> Result<(Duration, Duration), TxnError> {
        let began = Instant::now();
        let mut txn = self.engine.begin().map_err(TxnError::Fatal)?;
        let mut found = 0u64;
        let mut rows = 0u64;
        let mut bytes = 0u64;
        let mut written = 0u64;
        let key_size = self.key.get().len() as u64;
        for (i, q) in self.queries.iter().enumerate() {
            let t = Instant::now();
            let r = match *q {
                Query::Point(k) => txn.get(self.key.set(k)).map(|v| {
                    if let Some(len) = v {
                        found += 1;
                        bytes += key_size + len as u64;
                    }
                }),
                Query::Range(k) => txn.scan(self.key.set(k), self.x.range_size).map(|(n, b)| {
                    rows += n as u64;
                    bytes += b;
                }),
                Query::Update(k) | Query::Insert(k) => {
                    let key = self.key.set(k);
                    let value = self.values.next_value();
                    txn.get_for_update(key).and_then(|_| {
                        bytes += key_size + value.len() as u64;
                        written += key_size + value.len() as u64;
                        txn.put(key, value)
                    })
                }
            };
            if let Err(e) = r {
                let _ = txn.rollback();
                return Err(e);
            }
            lat[i] = t.elapsed();
        }
        let committing = Instant::now();
        txn.commit()?;
        let commit = committing.elapsed();
        s.found += found;
        s.rows_scanned += rows;
        s.bytes += bytes;
        s.bytes_written += written;
        Ok((committing - began, commit))
    }

    /// Draws and runs one transaction to commit, retrying conflicts; returns its latency
    /// measured from `since` (its start, or for tsunami its scheduled time).
    pub fn transaction(&mut self, s: &mut XStats, since: Instant) -> Result<Duration, BenchError> {
        self.draw();
        let mut lat = std::mem::take(&mut self.latencies);
        lat.clear();
        lat.resize(self.queries.len(), Duration::ZERO);
        let mut tries = 0;
        // A retry writes the same values as the first attempt, so the values (and what the
        // engines end up holding) do not depend on how many conflicts an engine had.
        let values_at_start = self.values.clone();
        let (statements, commit) = loop {
            self.values.clone_from(&values_at_start);
            match self.attempt(&mut lat, s) {
                Ok(split) => break split,
                Err(TxnError::Conflict(e)) => {
                    s.aborts += 1;
                    tries += 1;
                    if tries > MAX_RETRIES {
                        return Err(BenchError::engine(
                            format!("a transaction still conflicted after {MAX_RETRIES} retries"),
                            e,
                        ));
                    }
                }
                Err(TxnError::Fatal(e)) => return Err(BenchError::engine("transaction failed", e)),
            }
        };
        let took = since.elapsed();
        s.txns += 1;
        record_duration(&mut s.txn_hist, took);
        record_duration(&mut s.statements_hist, statements);
        record_duration(&mut s.commit_hist, commit);
        for (q, l) in self.queries.iter().zip(&lat) {
            s.queries[q.kind()] += 1;
            record_duration(&mut s.query_hist[q.kind()], *l);
        }
        self.latencies = lat;
        Ok(took)
    }
}

/// Runs `xbench` or `tsunami` on the engine of `--engine`: closes `db`, opens the same
/// directory as a transactional database, loads the records if `pristine`, runs, reports,
/// closes, and reopens `db` for the benchmarks that follow.
pub fn run<E: BenchEngine>(
    cfg: &Config,
    bench: super::flags::Benchmark,
    db: E,
    values: &ValueSource,
    pristine: bool,
    seed_base: &mut super::runner::SeedCounter,
) -> Result<E, BenchError> {
    db.close().map_err(|e| BenchError::engine("closing the database", e))?;
    match cfg.engine {
        EngineKind::Riptide => {
            run_txn::<engine::riptide_txn::RiptideTxnEngine>(cfg, bench, values, pristine, seed_base)?
        }
        #[cfg(feature = "bench-rocksdb")]
        EngineKind::RocksDb => run_txn::<engine::rocksdb_txn::RocksTxnEngine>(cfg, bench, values, pristine, seed_base)?,
        other => {
            return Err(BenchError::Usage(format!(
                "{}: the {} adapter has no transactions (use riptide or rocksdb)",
                bench.name(),
                other.name()
            )))
        }
    }
    E::open(cfg)
}

fn run_txn<T: TxnEngine>(
    cfg: &Config,
    bench: super::flags::Benchmark,
    values: &ValueSource,
    pristine: bool,
    seeds: &mut super::runner::SeedCounter,
) -> Result<(), BenchError> {
    let engine = T::open_txn(cfg)?;
    // The engine's options were printed when the run opened it; add the transaction settings.
    println!("Transactions: {}", engine.describe_txn());
    let loaded = if pristine { load(&engine, cfg, values)? } else { 0 };
    println!("DB path: [{}]", cfg.db.display());
    let thread_seeds: Vec<u64> = (0..cfg.threads).map(|_| seeds.next_seed(cfg.seed)).collect();
    let first_insert = if pristine {
        cfg.num
    } else {
        first_insert_key(&engine, cfg)?
    };
    let before = engine.profile();
    let result = match bench {
        super::flags::Benchmark::Tsunami => tsunami::run(&engine, cfg, values, &thread_seeds, first_insert),
        _ => run_closed_loop(&engine, cfg, values, &thread_seeds, first_insert),
    };
    if let (Some(before), Some(after)) = (before, engine.profile()) {
        for line in after.lines_since(&before) {
            println!("{line}");
        }
    }
    let written = loaded + result.as_ref().map_or(0, |s| s.bytes_written);
    for line in engine.stats_lines(written) {
        println!("{line}");
    }
    let closed = engine
        .close_txn()
        .map_err(|e| BenchError::engine("closing the database", e));
    result?;
    closed
}

/// The first key number inserts take: `num`, or past the largest key number at or above `num`
/// already in the table (an earlier run's inserts). Keys order like their numbers (big-endian,
/// same padding), so "some key >= key(n) exists" is monotone in `n`: an exponential then a
/// binary search over one-row scans finds the first `n` with none.
fn first_insert_key<T: TxnEngine>(engine: &T, cfg: &Config) -> Result<u64, BenchError> {
    let mut key = KeyBuf::new(cfg.key_size);
    let mut any_from = |n: u64| -> Result<bool, BenchError> {
        let fail = |e: TxnError| {
            let (TxnError::Conflict(e) | TxnError::Fatal(e)) = e;
            BenchError::engine("xbench: finding the last inserted key", e)
        };
        let mut txn = engine.begin().map_err(|e| BenchError::engine("xbench: begin", e))?;
        let (rows, _) = txn.scan(key.set(n), 1).map_err(fail)?;
        txn.rollback().map_err(fail)?;
        Ok(rows > 0)
    };
    if !any_from(cfg.num)? {
        return Ok(cfg.num);
    }
    // Invariant: a key >= key(lo) exists; none >= key(hi) does (or hi is u64::MAX).
    let (mut lo, mut step) = (cfg.num, 1u64);
    let mut hi = loop {
        let probe = cfg.num.saturating_add(step);
        if probe == u64::MAX || !any_from(probe)? {
            break probe;
        }
        lo = probe;
        step = step.saturating_mul(2);
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if any_from(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if hi == u64::MAX {
        return Err(BenchError::Usage(
            "xbench: the table holds a key at or past the largest key number; no room for inserts".into(),
        ));
    }
    Ok(hi)
}

/// Loads records `0..num` in key order, then flushes and waits for background work; returns the
/// key and value bytes written.
fn load<T: TxnEngine>(engine: &T, cfg: &Config, values: &ValueSource) -> Result<u64, BenchError> {
    let start = Instant::now();
    let mut key = KeyBuf::new(cfg.key_size);
    let mut vals = values.cursor(0);
    let mut batch: Vec<(Vec<u8>, &[u8])> = Vec::with_capacity(LOAD_BATCH);
    let mut k = 0;
    while k < cfg.num {
        batch.clear();
        while batch.len() < LOAD_BATCH && k < cfg.num {
            batch.push((key.set(k).to_vec(), vals.next_value()));
            k += 1;
        }
        engine.load(&batch).map_err(|e| BenchError::engine("xbench load", e))?;
    }
    let loaded = start.elapsed();
    engine
        .settle()
        .map_err(|e| BenchError::engine("xbench load: flush", e))?;
    println!(
        "xbench load : {} records ({} B keys, {} B values) in {:.3} s ({:.0} records/s), flushed and settled in \
         {:.3} s",
        cfg.num,
        cfg.key_size,
        cfg.value_size,
        loaded.as_secs_f64(),
        cfg.num as f64 / loaded.as_secs_f64().max(1e-9),
        start.elapsed().as_secs_f64() - loaded.as_secs_f64()
    );
    Ok(cfg.num * (cfg.key_size + cfg.value_size) as u64)
}

/// xbench: every thread runs transactions back to back for `--duration` seconds, or
/// `--reads` transactions each.
fn run_closed_loop<T: TxnEngine>(
    engine: &T,
    cfg: &Config,
    values: &ValueSource,
    seeds: &[u64],
    first_insert: u64,
) -> Result<XStats, BenchError> {
    let next_insert = AtomicU64::new(first_insert);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (results, cpu_use): (Vec<Result<(XStats, Duration), BenchError>>, _) = cpu::measure(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = seeds
                .iter()
                .map(|&seed| {
                    let (next_insert, stop) = (&next_insert, &stop);
                    scope.spawn(move || {
                        let mut w = Worker::new(engine, cfg, values, seed, next_insert);
                        let mut s = XStats::new();
                        let t0 = Instant::now();
                        let mut n = 0u64;
                        loop {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            match cfg.duration {
                                Some(d) if t0.elapsed() >= d => break,
                                None if n >= cfg.reads => break,
                                _ => {}
                            }
                            if let Err(e) = w.transaction(&mut s, Instant::now()) {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                            n += 1;
                        }
                        Ok((s, t0.elapsed()))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(BenchError::Usage("an xbench thread panicked".into())))
                })
                .collect()
        })
    });
    let elapsed = start.elapsed();
    let mut total = XStats::new();
    let mut thread_seconds = 0.0;
    for r in results {
        let (s, took) = r?;
        total.merge(&s);
        thread_seconds += took.as_secs_f64();
    }
    for line in report_lines("xbench", cfg, &total, elapsed, thread_seconds, cpu_use.as_ref()) {
        println!("{line}");
    }
    Ok(total)
}

/// xbench's result lines: db_bench's result line (ops = committed queries), then QPS/TPS, the
/// query counts, and the latency percentiles.
pub fn report_lines(
    name: &str,
    cfg: &Config,
    s: &XStats,
    elapsed: Duration,
    thread_seconds: f64,
    cpu_use: Option<&CpuShare>,
) -> Vec<String> {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let m = Merged {
        done: s.total_queries(),
        bytes: s.bytes,
        found: 0,
        lookups: 0,
        elapsed,
        thread_seconds,
        hist: None,
    };
    let x = &cfg.xbench;
    let mut out = vec![report::result_line(name, &m).trim_end().to_string()];
    out.extend(cpu_use.map(|c| cpu::line(name, c)));
    out.push(format!(
        "{name} summary: mix {} ({} queries per transaction, isolation {}, {} keys, {} threads): QPS {:.0}, TPS {:.0}, \
         {} transactions committed, {} aborted and retried",
        x.mix.name(),
        x.txn_queries,
        x.isolation.name(),
        cfg.zipf.map_or_else(|| "uniform".to_string(), |z| format!("zipf {}", z.theta())),
        cfg.threads,
        s.total_queries() as f64 / secs,
        s.txns as f64 / secs,
        s.txns,
        s.aborts
    ));
    out.push(format!(
        "{name} queries: point {} ({} found), range {} ({} rows, --range_size={}), update {}, insert {}",
        s.queries[0], s.found, s.queries[1], s.rows_scanned, x.range_size, s.queries[2], s.queries[3]
    ));
    out.push(format!(
        "{name} latency (us): {:<11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "", "count", "P50", "P95", "P99", "P99.9", "max"
    ));
    let mut row = |kind: &str, h: &Histogram<u64>| {
        if h.is_empty() {
            return;
        }
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
        out.push(format!(
            "{name} latency (us): {:<11} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
            kind,
            h.len(),
            q(0.5),
            q(0.95),
            q(0.99),
            q(0.999),
            h.max() as f64 / 1000.0
        ));
    };
    row("transaction", &s.txn_hist);
    for (i, k) in KINDS.iter().enumerate() {
        row(k, &s.query_hist[i]);
    }
    out.extend(time_split_line(name, s));
    out
}

/// `name time split (us): statements mean M P99 P, commit mean M P99 P (commit C % of the
/// two)`: where a committed transaction's last attempt spent its time, from `begin` to its last
/// statement vs in its `commit` call (retries and, for tsunami, waiting for a late start are in
/// neither). `None` before any transaction committed.
pub fn time_split_line(name: &str, s: &XStats) -> Option<String> {
    let (st, co) = (&s.statements_hist, &s.commit_hist);
    if st.is_empty() || co.is_empty() {
        return None;
    }
    let us = |ns: f64| ns / 1000.0;
    let p99 = |h: &Histogram<u64>| us(h.value_at_quantile(0.99) as f64);
    let both = st.mean() + co.mean();
    Some(format!(
        "{name} time split (us): statements mean {:.1} P99 {:.1}, commit mean {:.1} P99 {:.1} \
         (commit {:.1} % of the two)",
        us(st.mean()),
        p99(st),
        us(co.mean()),
        p99(co),
        if both > 0.0 { 100.0 * co.mean() / both } else { 0.0 }
    ))
}

#[cfg(test)]
mod tests {
    use crate::bench::flags::Mix;

    #[test]
    fn mix_parses_and_picks_in_proportion() {
        let m = Mix::parse("42:10:32:16").unwrap();
        assert_eq!(m.name(), "42:10:32:16");
        let mut counts = [0u32; 4];
        for r in 0..100u64 {
            counts[m.pick(r)] += 1;
        }
        assert_eq!(counts, [42, 10, 32, 16]);
        assert_eq!(Mix::parse("0:0:0:5").unwrap().pick(3), 3);
        for bad in [
            "",
            "1:2:3",
            "1:2:3:4:5",
            "0:0:0:0",
            "a:1:1:1",
            "-1:1:1:1",
            "4294967295:1:0:0",
        ] {
            assert!(Mix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn time_split_gives_means_p99s_and_the_commit_share() {
        use super::{time_split_line, XStats};
        use crate::bench::stats::record_duration;
        use std::time::Duration;
        let mut s = XStats::new();
        assert_eq!(time_split_line("xbench", &s), None);
        for _ in 0..100 {
            record_duration(&mut s.statements_hist, Duration::from_micros(30));
            record_duration(&mut s.commit_hist, Duration::from_micros(10));
        }
        let line = time_split_line("xbench", &s).unwrap();
        assert_eq!(
            line,
            "xbench time split (us): statements mean 30.0 P99 30.0, commit mean 10.0 P99 10.0 (commit 25.0 % of the two)"
        );
    }
}
