//! Text output of `riptide bench`, in db_bench 7.8's formats where db_bench has one.
//!
//! - [`header`]: the run's settings (db_bench's Keys/Values/Entries block) plus Riptide's options;
//!   [`engine_block`]: the engine's version and its options, one per line, after it is open.
//! - [`result_line`]: `name : X micros/op Y ops/sec Z seconds N operations; W MB/s (msg)`, byte
//!   for byte as db_bench's `Stats::Report` prints it.
//! - [`histogram_block`]: db_bench's `HistogramImpl::ToString` (Count/Average/StdDev, Min/Median/
//!   Max, Percentiles, then RocksDB's bucket table), from an hdrhistogram in nanoseconds.
//! - [`write_path_line`], [`peak_rss_line`]: Riptide's own figures, on lines no db_bench parser
//!   mistakes for a result.

use super::engine::{Description, EngineKind};
use super::flags::Config;
use super::stats::Merged;
use hdrhistogram::Histogram;
use riptide::WriteStats;
use std::fmt::Write as _;

/// The separator db_bench prints after its header.
pub const HEADER_RULE: &str = "------------------------------------------------";

/// The header printed once before the benchmarks (without the closing rule, which follows the
/// [`engine_block`]).
pub fn header(cfg: &Config) -> String {
    let mut s = String::new();
    let o = &cfg.options;
    let _ = writeln!(s, "Riptide:    version {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(s, "Date:       {}", local_date());
    let (cpus, model, cache) = cpu_info();
    let _ = writeln!(s, "CPU:        {cpus} * {model}");
    let _ = writeln!(s, "CPUCache:   {cache}");
    if cfg.seed_defaulted {
        let _ = writeln!(s, "Set seed to {} because --seed was 0", cfg.seed);
    }
    let _ = writeln!(
        s,
        "Keys:       {} bytes each (+ 0 bytes user-defined timestamp)",
        cfg.key_size
    );
    let _ = writeln!(
        s,
        "Values:     {} bytes each ({} bytes after compression)",
        cfg.value_size, cfg.value_size
    );
    let _ = writeln!(s, "Entries:    {}", cfg.num);
    let raw_mb = (cfg.key_size + cfg.value_size) as f64 * cfg.num as f64 / 1_048_576.0;
    let _ = writeln!(s, "RawSize:    {raw_mb:.1} MB (estimated)");
    let _ = writeln!(s, "Compression: {}", cfg.compression.db_bench_name());
    let _ = writeln!(s, "Memtablerep: {}", cfg.engine.memtablerep());
    let _ = writeln!(
        s,
        "Threads:    {} (reads {} / writes {} / deletes {} per thread)",
        cfg.threads, cfg.reads, cfg.writes, cfg.deletes
    );
    match cfg.duration {
        Some(d) => {
            let _ = writeln!(s, "Duration:   {} seconds per random-key benchmark", d.as_secs());
        }
        None => {
            let _ = writeln!(s, "Duration:   0 (op counts decide)");
        }
    }
    let _ = writeln!(s, "Seed:       {}", cfg.seed);
    let _ = writeln!(
        s,
        "Writes:     sync={} disable_wal={} async_commit_depth={} batch_size={}",
        u8::from(cfg.sync),
        u8::from(cfg.disable_wal),
        cfg.async_commit_depth,
        cfg.batch_size
    );
    if cfg.engine == EngineKind::Riptide {
        let _ = writeln!(
            s,
            "Options:    write_buffer_size={} write_queues={} max_group_size={} max_group_bytes={} \
         immutable_slowdown_trigger={} immutable_stop_trigger={} slowdown_delay_micros={} redo_segment_size={} \
         flush_on_close={}",
            o.write_buffer_size,
            o.write_queues,
            o.max_group_size,
            o.max_group_bytes,
            o.immutable_slowdown_trigger,
            o.immutable_stop_trigger,
            o.slowdown_delay_micros,
            o.redo_segment_size,
            u8::from(o.flush_on_close)
        );
    }
    if cfg.default_workload {
        let _ = writeln!(
            s,
            "Workload:   default (no flags given): --benchmarks={} --num={} --reads={}; see riptide bench --help",
            cfg.benchmarks.iter().map(|b| b.name()).collect::<Vec<_>>().join(","),
            cfg.num,
            cfg.reads
        );
    }
    s
}

/// The engine's version and options, printed after it is open:
/// `Engine:     <version>`, then `Engine options:` and one `  <setting>: <value>` line each.
pub fn engine_block(d: &Description) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Engine:     {}", d.version);
    let _ = writeln!(s, "Engine options:");
    for (name, value) in &d.options {
        let _ = writeln!(s, "  {name}: {value}");
    }
    s
}

/// db_bench's result line (without the final newline; a "(X of Y found)" message carries its
/// own trailing newline, as in db_bench, so a blank line follows it).
pub fn result_line(name: &str, m: &Merged) -> String {
    let mut extra = String::new();
    if m.bytes > 0 {
        extra = format!("{:6.1} MB/s", m.mb_per_sec());
    }
    if m.lookups > 0 {
        if !extra.is_empty() {
            extra.push(' ');
        }
        let _ = writeln!(extra, "({} of {} found)", m.found, m.lookups);
    }
    format!(
        "{:<12} : {:11.3} micros/op {} ops/sec {:.3} seconds {} operations;{}{}",
        name,
        m.micros_per_op(),
        m.ops_per_sec() as i64,
        m.elapsed.as_secs_f64(),
        m.done.max(1),
        if extra.is_empty() { "" } else { " " },
        extra
    )
}

/// Upper limits of RocksDB's histogram buckets (`HistogramBucketMapper`): 1, 2, then x1.5
/// rounded down to two significant digits, up to `u64::MAX`.
pub fn rocksdb_bucket_limits() -> Vec<u64> {
    let mut limits = vec![1u64, 2];
    let mut v = 2.0f64;
    loop {
        v *= 1.5;
        if v > u64::MAX as f64 {
            break;
        }
        let mut b = v as u64;
        let mut pow = 1u64;
        while b / 10 > 10 {
            b /= 10;
            pow *= 10;
        }
        limits.push(b.saturating_mul(pow));
    }
    limits
}

/// db_bench's "Microseconds per <op>:" block for a nanosecond histogram.
pub fn histogram_block(op: &str, h: &Histogram<u64>) -> String {
    let us = |ns: f64| ns / 1000.0;
    let q = |p: f64| us(h.value_at_quantile(p / 100.0) as f64);
    let n = h.len();
    let mut s = format!("Microseconds per {op}:\n");
    let _ = writeln!(
        s,
        "Count: {} Average: {:.4}  StdDev: {:.2}",
        n,
        us(h.mean()),
        us(h.stdev())
    );
    let (min, max) = if n == 0 {
        (0, 0)
    } else {
        (h.min() / 1000, h.max() / 1000)
    };
    let _ = writeln!(s, "Min: {min}  Median: {:.4}  Max: {max}", q(50.0));
    let _ = writeln!(
        s,
        "Percentiles: P50: {:.2} P75: {:.2} P99: {:.2} P99.9: {:.2} P99.99: {:.2}",
        q(50.0),
        q(75.0),
        q(99.0),
        q(99.9),
        q(99.99)
    );
    s.push_str("------------------------------------------------------\n");
    if n == 0 {
        return s;
    }
    // Re-bin into RocksDB's buckets by whole microseconds: a value v goes to the first bucket
    // whose limit is > v (RocksDB's `IndexForValue`).
    let limits = rocksdb_bucket_limits();
    let mut counts = vec![0u64; limits.len()];
    for it in h.iter_recorded() {
        let v = h.median_equivalent(it.value_iterated_to()) / 1000;
        let idx = limits.partition_point(|&l| l <= v).min(limits.len() - 1);
        counts[idx] += it.count_at_value();
    }
    let mult = 100.0 / n as f64;
    let mut cumulative = 0u64;
    for (b, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        cumulative += c;
        let left = if b == 0 { 0 } else { limits[b - 1] };
        let _ = write!(
            s,
            "{} {:7}, {:7} ] {:8} {:7.3}% {:7.3}% ",
            if b == 0 { '[' } else { '(' },
            left,
            limits[b],
            c,
            mult * c as f64,
            mult * cumulative as f64
        );
        let marks = (mult * c as f64 / 5.0 + 0.5) as usize;
        s.push_str(&"#".repeat(marks));
        s.push('\n');
    }
    s
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
    }
}

/// One line of write-path figures for a benchmark.
pub fn write_path_line(d: &WriteStats) -> String {
    format!(
        "Write path: {} writes ({} ops) in {} commit groups ({:.2} writes/group), {} log writes, \
         {} fsyncs ({:.2} writes/fsync), {:.1} MB logged, stall {:.3} seconds",
        d.writes,
        d.ops,
        d.groups,
        d.writes_per_group(),
        d.log_writes,
        d.fsyncs,
        d.writes_per_fsync(),
        d.bytes_logged as f64 / 1_048_576.0,
        d.stall_micros as f64 / 1e6
    )
}

/// readwhilewriting's writer, reported apart from the readers.
pub fn background_writer_line(m: &Merged) -> String {
    format!(
        "Background writer: {} operations in {:.3} seconds, {} ops/sec",
        m.done,
        m.elapsed.as_secs_f64(),
        m.ops_per_sec() as i64
    )
}

/// The process's peak resident set size, from `VmHWM` in `/proc/self/status`.
pub fn peak_rss_line() -> String {
    match std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_vm_hwm_kib(&s))
    {
        Some(kib) => format!("Peak RSS (VmHWM): {:.1} MB ({kib} kB)", kib as f64 / 1024.0),
        None => "Peak RSS (VmHWM): unavailable".to_string(),
    }
}

/// `VmHWM` in KiB from the text of `/proc/<pid>/status`.
pub fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line["VmHWM:".len()..].split_whitespace().next()?.parse().ok()
}

/// CPU count, model name and cache size, as db_bench reads them from `/proc/cpuinfo`.
fn cpu_info() -> (usize, String, String) {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |line: &str| line.split_once(':').map(|(_, v)| v.trim().to_string());
    let mut cpus = 0;
    let mut model = String::new();
    let mut cache = String::new();
    for line in text.lines() {
        if line.starts_with("model name") {
            cpus += 1;
            model = field(line).unwrap_or_default();
        } else if line.starts_with("cache size") {
            cache = field(line).unwrap_or_default();
        }
    }
    if cpus == 0 {
        cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    }
    (cpus, model, cache)
}

/// The local time in `ctime` form ("Sun Nov 22 16:51:44 2026"), like db_bench's Date line.
fn local_date() -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: `time(NULL)` only returns the clock; `ctime_r` writes at most 26 bytes into `buf`
    // (64 long) and returns either NULL or `buf`, which then holds a NUL-terminated string.
    let text = unsafe {
        let t = libc::time(std::ptr::null_mut());
        if libc::ctime_r(&t, buf.as_mut_ptr()).is_null() {
            return "unknown".to_string();
        }
        std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    };
    text.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::{new_histogram, ThreadStats};
    use std::time::Duration;

    fn merged(done: u64, bytes: u64, found: u64, lookups: u64, secs: f64, thread_secs: f64) -> Merged {
        Merged {
            done,
            bytes,
            found,
            lookups,
            elapsed: Duration::from_secs_f64(secs),
            thread_seconds: thread_secs,
            hist: None,
        }
    }

    #[test]
    fn result_lines_match_db_bench_byte_for_byte() {
        // Lines printed by db_bench 7.8.3 (same figures fed in).
        let m = merged(1000, 1000 * 116, 0, 0, 0.0089920, 0.0089420);
        assert_eq!(
            result_line("fillseq", &m),
            "fillseq      :       8.942 micros/op 111209 ops/sec 0.009 seconds 1000 operations;   12.3 MB/s"
        );
        let m = merged(1000, 0, 624, 1000, 0.002422, 0.002381);
        assert_eq!(
            result_line("seekrandom", &m),
            "seekrandom   :       2.381 micros/op 412881 ops/sec 0.002 seconds 1000 operations; (624 of 1000 found)\n"
        );
        let m = merged(20000, 0, 0, 0, 0.228460, 0.4568);
        assert_eq!(
            result_line("deleterandom", &m),
            "deleterandom :      22.840 micros/op 87542 ops/sec 0.228 seconds 20000 operations;"
        );
        let m = merged(20000, 2_312_000, 10000, 10000, 0.06192998, 0.10368);
        assert_eq!(
            result_line("readwhilewriting", &m),
            "readwhilewriting :       5.184 micros/op 322945 ops/sec 0.062 seconds 20000 operations;   35.6 MB/s (10000 of 10000 found)\n"
        );
    }

    #[test]
    fn bucket_limits_are_rocksdbs() {
        let l = rocksdb_bucket_limits();
        assert_eq!(
            &l[..24],
            &[
                1, 2, 3, 4, 6, 10, 15, 22, 34, 51, 76, 110, 170, 250, 380, 580, 870, 1300, 1900, 2900, 4400, 6600,
                9900, 14000
            ]
        );
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        assert!(*l.last().unwrap() > 1u64 << 62);
    }

    #[test]
    fn histogram_block_has_db_bench_shape() {
        let mut t = ThreadStats::start(true);
        for us in [0.5, 3.2, 3.4, 5.0, 2950.0] {
            t.sample(Duration::from_secs_f64(us / 1e6));
        }
        let h = t.hist.take().unwrap();
        let text = histogram_block("write", &h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Microseconds per write:");
        assert!(lines[1].starts_with("Count: 5 Average: "), "{}", lines[1]);
        assert!(lines[1].contains("  StdDev: "));
        assert!(lines[2].starts_with("Min: 0  Median: 3.4"), "{}", lines[2]);
        assert!(
            lines[2].ends_with("Max: 2951") || lines[2].ends_with("Max: 2950"),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("Percentiles: P50: 3.4"), "{}", lines[3]);
        assert_eq!(lines[4], "------------------------------------------------------");
        assert_eq!(lines[5], "[       0,       1 ]        1  20.000%  20.000% ####");
        assert_eq!(lines[6], "(       3,       4 ]        2  40.000%  60.000% ########");
        assert_eq!(lines[7], "(       4,       6 ]        1  20.000%  80.000% ####");
        assert_eq!(lines[8], "(    2900,    4400 ]        1  20.000% 100.000% ####");
        assert_eq!(lines.len(), 9);
        // An empty histogram stops after the rule.
        assert_eq!(histogram_block("read", &new_histogram()).lines().count(), 5);
    }

    #[test]
    fn write_path_figures() {
        let before = WriteStats {
            groups: 10,
            writes: 20,
            ops: 20,
            log_writes: 5,
            fsyncs: 5,
            synced_writes: 20,
            bytes_logged: 1000,
            stall_micros: 0,
        };
        let after = WriteStats {
            groups: 35,
            writes: 120,
            ops: 220,
            log_writes: 30,
            fsyncs: 25,
            synced_writes: 120,
            bytes_logged: 1000 + 3 * 1_048_576,
            stall_micros: 1_500_000,
        };
        let d = write_stats_delta(&before, &after);
        assert_eq!(
            write_path_line(&d),
            "Write path: 100 writes (200 ops) in 25 commit groups (4.00 writes/group), 25 log writes, \
             20 fsyncs (5.00 writes/fsync), 3.0 MB logged, stall 1.500 seconds"
        );
    }

    #[test]
    fn vm_hwm_parsing() {
        let status = "Name:\triptide\nVmPeak:\t  300 kB\nVmHWM:\t   187604 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm_kib(status), Some(187_604));
        assert_eq!(parse_vm_hwm_kib("Name: x\n"), None);
        assert!(peak_rss_line().starts_with("Peak RSS (VmHWM): "));
    }

    #[test]
    fn header_names_the_settings() {
        let flags =
            <crate::bench::flags::BenchFlags as clap::FromArgMatches>::from_arg_matches(
                &<crate::bench::flags::BenchFlags as clap::Args>::augment_args(clap::Command::new("t"))
                    .get_matches_from(["t", "--num=1234", "--value_size=10"]),
            )
            .unwrap();
        let cfg = Config::from_flags(&flags).unwrap();
        let h = header(&cfg);
        assert!(h.contains("Keys:       16 bytes each"));
        assert!(h.contains("Values:     10 bytes each"));
        assert!(h.contains("Entries:    1234\n"));
        assert!(h.contains("write_buffer_size=67108864"));
        assert!(h.contains("Set seed to 1 because --seed was 0"));
        assert!(h.contains("Compression: NoCompression\n"));
        let block = engine_block(&Description {
            version: "x 1.0".into(),
            options: vec![("block_size", "16384".into()), ("sync", "0".into())],
        });
        assert_eq!(
            block,
            "Engine:     x 1.0\nEngine options:\n  block_size: 16384\n  sync: 0\n"
        );
    }
}
