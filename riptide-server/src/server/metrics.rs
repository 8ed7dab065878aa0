//! Prometheus metrics of `riptide serve`: statements by kind, errors by MySQL code, statement
//! latency, connections, and the engine's own counters, served as Prometheus text on
//! `--metrics-listen`.
//!
//! Invariants: counting costs one relaxed atomic add per statement (errors, which are rare,
//! take a mutex); the text is rendered from a consistent read of each counter, never from
//! stale copies.

use parking_lot::Mutex;
use sqlparser::ast::Statement;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Statement kinds counted.
const KINDS: [&str; 8] = [
    "select", "insert", "update", "delete", "begin", "commit", "rollback", "other",
];
/// Upper bounds (seconds) of the latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// A latency histogram with the fixed buckets above.
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; 12],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|&b| s <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    fn render(&self, o: &mut String, name: &str, help: &str) {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(o, "{name}_sum {}", self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(o, "{name}_count {count}");
    }
}

/// The server's counters.
#[derive(Default)]
pub struct Metrics {
    statements: [AtomicU64; 8],
    errors: Mutex<BTreeMap<u16, u64>>,
    latency: Histogram,
    commit_latency: Histogram,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
}

impl Metrics {
    /// Counts a statement by kind.
    pub fn statement(&self, s: &Statement) {
        let k = match s {
            Statement::Query(_) => 0,
            Statement::Insert(_) => 1,
            Statement::Update(_) => 2,
            Statement::Delete(_) => 3,
            Statement::StartTransaction { .. } => 4,
            Statement::Commit { .. } => 5,
            Statement::Rollback { .. } => 6,
            _ => 7,
        };
        self.statements[k].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error sent to a client.
    pub fn error(&self, code: u16) {
        *self.errors.lock().entry(code).or_default() += 1;
    }

    /// Records a statement's latency (including its commit).
    pub fn latency(&self, d: Duration) {
        self.latency.record(d);
    }

    /// Records how long a commit took from its start to durable and visible.
    pub fn commit(&self, d: Duration) {
        self.commit_latency.record(d);
    }

    /// Prometheus text exposition.
    pub fn render(&self, connections: u64, db: &riptide::Db) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "# TYPE riptide_statements_total counter");
        for (i, k) in KINDS.iter().enumerate() {
            let _ = writeln!(
                o,
                "riptide_statements_total{{kind=\"{k}\"}} {}",
                self.statements[i].load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(o, "# TYPE riptide_errors_total counter");
        for (code, n) in self.errors.lock().iter() {
            let _ = writeln!(o, "riptide_errors_total{{code=\"{code}\"}} {n}");
        }
        self.latency.render(
            &mut o,
            "riptide_statement_seconds",
            "statement latency, its commit included",
        );
        self.commit_latency.render(
            &mut o,
            "riptide_commit_seconds",
            "commit latency: from the commit's start to durable and visible",
        );
        let _ = writeln!(o, "# TYPE riptide_connections gauge\nriptide_connections {connections}");
        let _ = writeln!(
            o,
            "# TYPE riptide_connections_total counter\nriptide_connections_total {}",
            self.connections_total.load(Ordering::Relaxed)
        );
        let s = db.stats();
        let t = db.txn_stats();
        let w = db.write_stats();
        let gauges = [("riptide_memtable_bytes", db.memtable_usage() as u64)];
        for (n, v) in gauges {
            let _ = writeln!(o, "# TYPE {n} gauge\n{n} {v}");
        }
        let counters = [
            ("riptide_flushes_total", s.flushes),
            ("riptide_compactions_total", s.compactions),
            ("riptide_compaction_bytes_written_total", s.compaction_bytes_written),
            ("riptide_txn_committed_total", t.committed),
            ("riptide_txn_rolled_back_total", t.rolled_back),
            ("riptide_txn_conflicts_total", t.conflicts),
            ("riptide_lock_waits_total", t.lock_waits),
            ("riptide_deadlocks_total", t.deadlocks),
            ("riptide_write_stall_micros_total", w.stall_micros),
            ("riptide_fsyncs_total", w.fsyncs),
            ("riptide_write_groups_total", w.groups),
        ];
        for (n, v) in counters {
            let _ = writeln!(o, "# TYPE {n} counter\n{n} {v}");
        }
        let caches = [
            ("block", s.caches.block_cache),
            ("row", s.caches.row_cache),
            ("table", s.caches.table_cache),
        ];
        let _ = writeln!(o, "# TYPE riptide_cache_hits_total counter");
        for (c, st) in &caches {
            let _ = writeln!(o, "riptide_cache_hits_total{{cache=\"{c}\"}} {}", st.hits);
        }
        let _ = writeln!(o, "# TYPE riptide_cache_misses_total counter");
        for (c, st) in &caches {
            let _ = writeln!(o, "riptide_cache_misses_total{{cache=\"{c}\"}} {}", st.misses);
        }
        let _ = writeln!(o, "# TYPE riptide_cache_hit_ratio gauge");
        for (c, st) in &caches {
            let total = st.hits + st.misses;
            let ratio = if total == 0 { 0.0 } else { st.hits as f64 / total as f64 };
            let _ = writeln!(o, "riptide_cache_hit_ratio{{cache=\"{c}\"}} {ratio:.4}");
        }
        o
    }
}
