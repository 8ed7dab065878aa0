//! Where a Riptide run's time went, beyond its throughput: the write path's counters, the
//! commit-time split, row-lock waits and hold times, and the contention of the engine's hot
//! mutexes, taken before and after a benchmark and printed as the difference. These show a
//! serial section on a machine with few cores, where throughput hides it.
//!
//! Invariant: every figure printed is a difference of two snapshots of the same database, so
//! a benchmark's lines cover that benchmark only (the load of xbench is outside them).

use riptide::{Db, LockContention, TxnStats, WriteStats};

/// The counters of one database at one moment.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The write path's counters.
    pub write: WriteStats,
    txn: TxnStats,
    locks: Vec<LockContention>,
}

impl Profile {
    /// The counters of `db` now.
    pub fn of(db: &Db) -> Self {
        Profile {
            write: db.write_stats(),
            txn: db.txn_stats(),
            locks: db.lock_contention(),
        }
    }

    /// The write-path counters since `before`.
    pub fn write_since(&self, before: &Profile) -> WriteStats {
        write_stats_delta(&before.write, &self.write)
    }

    /// The lines for the run between `before` and `self`: the commit-time split (if anything
    /// was written), row locks (if any transaction locked a row) and lock contention (if any
    /// mutex was found taken).
    pub fn lines_since(&self, before: &Profile) -> Vec<String> {
        let mut lines = Vec::new();
        let w = self.write_since(before);
        if w.writes > 0 {
            lines.push(commit_split_line(&w));
        }
        let (a, b) = (&self.txn, &before.txn);
        let holders = a.lock_holders.saturating_sub(b.lock_holders);
        let waits = a.lock_waits.saturating_sub(b.lock_waits);
        if holders > 0 || waits > 0 {
            let hold = a.lock_hold_nanos.saturating_sub(b.lock_hold_nanos);
            let wait = a.lock_wait_nanos.saturating_sub(b.lock_wait_nanos);
            lines.push(format!(
                "Row locks: committed writers held their locks {:.1} us on average ({holders} writers); \
                 {waits} lock waits, {:.1} us each on average, {:.3} s in all",
                micros_per(hold, holders),
                micros_per(wait, waits),
                wait as f64 / 1e9
            ));
        }
        let contended: Vec<String> = self
            .locks
            .iter()
            .zip(&before.locks)
            .filter_map(|(a, b)| {
                let waits = a.waits.saturating_sub(b.waits);
                let nanos = a.wait_nanos.saturating_sub(b.wait_nanos);
                (waits > 0).then(|| {
                    format!(
                        "{} {waits} waits ({:.1} us each, {:.3} s in all)",
                        a.class.name(),
                        micros_per(nanos, waits),
                        nanos as f64 / 1e9
                    )
                })
            })
            .collect();
        if !contended.is_empty() {
            lines.push(format!("Lock contention: {}", contended.join("; ")));
        }
        lines
    }
}

/// The write path's counters over one benchmark: `after - before`.
pub fn write_stats_delta(before: &WriteStats, after: &WriteStats) -> WriteStats {
    WriteStats {
        groups: after.groups.saturating_sub(before.groups),
        writes: after.writes.saturating_sub(before.writes),
        ops: after.ops.saturating_sub(before.ops),
        log_writes: after.log_writes.saturating_sub(before.log_writes),
        fsyncs: after.fsyncs.saturating_sub(before.fsyncs),
        synced_writes: after.synced_writes.saturating_sub(before.synced_writes),
        bytes_logged: after.bytes_logged.saturating_sub(before.bytes_logged),
        stall_micros: after.stall_micros.saturating_sub(before.stall_micros),
        join_nanos: after.join_nanos.saturating_sub(before.join_nanos),
        timed_joins: after.timed_joins.saturating_sub(before.timed_joins),
        timed_writes: after.timed_writes.saturating_sub(before.timed_writes),
        buffer_nanos: after.buffer_nanos.saturating_sub(before.buffer_nanos),
        insert_nanos: after.insert_nanos.saturating_sub(before.insert_nanos),
        log_nanos: after.log_nanos.saturating_sub(before.log_nanos),
        visible_nanos: after.visible_nanos.saturating_sub(before.visible_nanos),
        helped_inserts: after.helped_inserts.saturating_sub(before.helped_inserts),
        wake_nanos: after.wake_nanos.saturating_sub(before.wake_nanos),
        timed_wakes: after.timed_wakes.saturating_sub(before.timed_wakes),
        commit_handoffs: after.commit_handoffs.saturating_sub(before.commit_handoffs),
    }
}

fn micros_per(nanos: u64, n: u64) -> f64 {
    nanos as f64 / 1000.0 / n.max(1) as f64
}

/// `Commit split (us per write): ...` from the write path's counters over a run.
pub fn commit_split_line(w: &WriteStats) -> String {
    let [join, buffer, insert, log, visible, wake] = w.commit_split_micros();
    format!(
        "Commit split (us per write): join a group {join:.2}, log buffer {buffer:.2}, memtable insert {insert:.2}, \
         log write/fsync after insert {log:.2}, becoming visible {visible:.2}, waking up {wake:.2}; total {:.2}; \
         {:.1}% of batches inserted by their followers; {:.1}% of log writes committed by a waiting writer",
        join + buffer + insert + log + visible + wake,
        100.0 * w.helped_inserts as f64 / w.writes.max(1) as f64,
        100.0 * w.commit_handoffs as f64 / w.log_writes.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_with_locks_and_writes_reports_all_three() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Default::default()).unwrap();
        let t = db.default_table();
        let before = Profile::of(&db);
        for i in 0..10u8 {
            let mut txn = db.begin(Default::default()).unwrap();
            txn.put(&t, &[i], b"v").unwrap();
            txn.commit().unwrap();
        }
        let lines = Profile::of(&db).lines_since(&before);
        assert!(
            lines[0].starts_with("Commit split (us per write): join a group "),
            "{lines:?}"
        );
        assert!(lines[1].contains("(10 writers); 0 lock waits"), "{lines:?}");
        // Nothing ran before `before`: a profile taken now shows nothing since itself.
        let now = Profile::of(&db);
        assert!(now.lines_since(&now).is_empty());
        db.close().unwrap();
    }

    #[test]
    fn the_split_line_sums_its_parts() {
        let w = WriteStats {
            writes: 16,
            timed_joins: 2,
            timed_writes: 2,
            join_nanos: 2_000,
            buffer_nanos: 4_000,
            insert_nanos: 6_000,
            log_nanos: 8_000,
            visible_nanos: 10_000,
            timed_wakes: 4,
            wake_nanos: 24_000,
            helped_inserts: 4,
            log_writes: 8,
            commit_handoffs: 2,
            ..Default::default()
        };
        assert_eq!(
            commit_split_line(&w),
            "Commit split (us per write): join a group 1.00, log buffer 2.00, memtable insert 3.00, \
             log write/fsync after insert 4.00, becoming visible 5.00, waking up 6.00; total 21.00; \
             25.0% of batches inserted by their followers; 25.0% of log writes committed by a waiting writer"
        );
    }
}
