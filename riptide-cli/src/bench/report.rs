//! Text output of `riptide bench`, in db_bench 7.8's formats where db_bench has one.
//!
//! - [`header`]: the run's settings (db_bench's Keys/Values/Entries block) plus Riptide's options;
//!   [`engine_block`]: the engine's version and its options, one per line, after it is open.
//! - [`result_line`]: `name : X micros/op Y ops/sec Z seconds N operations; W MB/s (msg)`, byte
//!   for byte as db_bench's `Stats::Report` prints it.
//! - [`histogram_block`]: db_bench's `HistogramImpl::ToString` (Count/Average/StdDev, Min/Median/
//!   Max, Percentiles, then RocksDB's bucket table), from an hdrhistogram in nanoseconds.
//! - [`write_path_line`], [`peak_rss_line`], [`disk_usage_line`]: the bench's own figures, on
//!   lines no db_bench parser mistakes for a result.

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
    // db_bench: (int)(value_size * compression_ratio + 0.5).
    let _ = writeln!(
        s,
        "Values:     {} bytes each ({} bytes after compression)",
        cfg.value_size,
        (cfg.value_size as f64 * cfg.compression_ratio + 0.5) as u64
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
    if cfg.read_random_exp_range > 0.0 {
        let _ = writeln!(
            s,
            "Read keys:  skewed, read_random_exp_range={} (readrandom, multireadrandom, readwhilewriting)",
            cfg.read_random_exp_range
        );
    } else {
        let _ = writeln!(s, "Read keys:  uniform");
    }
    let _ = writeln!(
        s,
        "Writes:     sync={} disable_wal={} async_commit_depth={} batch_size={}",
        u8::from(cfg.sync),
        u8::from(cfg.disable_wal),
        cfg.async_commit_depth,
        cfg.batch_size
    );
    if cfg.engine == EngineKind::Riptide {
        let _ = writeln!(s, "Options:    {}", riptide_options_line(o));
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

/// Riptide's options as `name=value` words, from their `Debug` form, so every option the engine
/// lists appears (new ones too) in the engine's order; the file system (`fs`) is left out.
pub fn riptide_options_line(o: &riptide::Options) -> String {
    let dbg = format!("{o:?}");
    let inner = dbg
        .strip_prefix("Options { ")
        .and_then(|x| x.strip_suffix(" }"))
        .unwrap_or(&dbg);
    // Split at ", " outside brackets (a value could be a nested Debug form).
    let mut fields = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let bytes = inner.as_bytes();
    for (i, &c) in bytes.iter().enumerate() {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 && bytes.get(i + 1) == Some(&b' ') => {
                fields.push(&inner[start..i]);
                start = i + 2;
            }
            _ => {}
        }
    }
    fields.push(&inner[start..]);
    fields
        .into_iter()
        .filter_map(|f| f.split_once(": "))
        .filter(|(name, _)| *name != "fs")
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
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

/// Space a directory takes, as `du` counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Allocated bytes (`st_blocks * 512`), what `du` reports.
    pub allocated: u64,
    /// Apparent bytes (file lengths; sparse files count their holes).
    pub apparent: u64,
    /// Regular files.
    pub files: u64,
    /// Allocated bytes per top-level entry kind: `name/` for a subdirectory, `*.ext` for files
    /// by extension, `PREFIX-*` for names like `MANIFEST-000005`, `other` for the rest; largest
    /// first.
    pub groups: Vec<(String, u64)>,
}

/// Walks `dir` (not following symlinks) and adds up its files; `None` if it does not exist.
pub fn disk_usage(dir: &std::path::Path) -> Option<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    fn walk(path: &std::path::Path, total: &mut DiskUsage) -> u64 {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return 0; // Vanished meanwhile (a background job deleted it).
        };
        let mut allocated = meta.blocks() * 512;
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(path) {
                for e in entries.flatten() {
                    allocated += walk(&e.path(), total);
                }
            }
        } else if meta.is_file() {
            total.files += 1;
            total.apparent += meta.len();
        }
        allocated
    }
    let entries = std::fs::read_dir(dir).ok()?;
    let mut total = DiskUsage::default();
    let mut groups: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for e in entries.flatten() {
        let path = e.path();
        let bytes = walk(&path, &mut total);
        let name = e.file_name().to_string_lossy().into_owned();
        let group = if path.is_dir() {
            format!("{name}/")
        } else {
            match (name.rsplit_once('.'), name.split_once('-')) {
                (Some((stem, ext)), _)
                    if !stem.is_empty() && !ext.is_empty() && !ext.chars().all(|c| c.is_ascii_digit()) =>
                {
                    format!("*.{ext}")
                }
                // RocksDB's MANIFEST-000005, OPTIONS-000007.
                (_, Some((prefix, _))) if !prefix.is_empty() => format!("{prefix}-*"),
                _ => "other".to_string(),
            }
        };
        *groups.entry(group).or_default() += bytes;
        total.allocated += bytes;
    }
    total.groups = groups.into_iter().collect();
    total.groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Some(total)
}

/// `<what>: X MB allocated (Y MB apparent) in N files (group A MB, ...)` for `dir`.
pub fn disk_usage_line(what: &str, dir: &std::path::Path) -> String {
    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1_048_576.0);
    match disk_usage(dir) {
        None => format!("{what}: - ({} does not exist)", dir.display()),
        Some(u) => {
            let groups: Vec<String> = u
                .groups
                .iter()
                .filter(|(_, b)| *b > 0)
                .map(|(g, b)| format!("{g} {}", mb(*b)))
                .collect();
            format!(
                "{what}: {} allocated ({} bytes; {} apparent) in {} files{}",
                mb(u.allocated),
                u.allocated,
                mb(u.apparent),
                u.files,
                if groups.is_empty() {
                    String::new()
                } else {
                    format!(": {}", groups.join(", "))
                }
            )
        }
    }
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
    parse_status_kib(status, "VmHWM:")
}

/// A `<field> <n> kB` line of `/proc/<pid>/status`, in KiB.
fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// The process's resident set now and at its peak, for interval lines.
pub fn rss_now_and_peak() -> Option<(f64, f64)> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let mb = |field| parse_status_kib(&s, field).map(|k| k as f64 / 1024.0);
    Some((mb("VmRSS:")?, mb("VmHWM:")?))
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
            ..Default::default()
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
            ..Default::default()
        };
        let d = crate::bench::profile::write_stats_delta(&before, &after);
        assert_eq!(
            write_path_line(&d),
            "Write path: 100 writes (200 ops) in 25 commit groups (4.00 writes/group), 25 log writes, \
             20 fsyncs (5.00 writes/fsync), 3.0 MB logged, stall 1.500 seconds"
        );
    }

    #[test]
    fn disk_usage_counts_allocated_blocks_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        assert!(disk_usage(&dir.path().join("missing")).is_none());
        assert!(disk_usage_line("DB size on disk", &dir.path().join("missing")).contains("does not exist"));
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/000001.dat"), vec![7u8; 100_000]).unwrap();
        std::fs::write(dir.path().join("000004.log"), vec![1u8; 10_000]).unwrap();
        std::fs::write(dir.path().join("CURRENT"), b"x").unwrap();
        std::fs::write(dir.path().join("MANIFEST-000005"), b"m").unwrap();
        // A sparse file: long, nothing allocated.
        std::fs::File::create(dir.path().join("sparse.sst"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let u = disk_usage(dir.path()).unwrap();
        assert_eq!(u.files, 5);
        assert_eq!(u.apparent, 100_000 + 10_000 + 1 + 1 + (1 << 30));
        assert!(u.allocated >= 110_000 && u.allocated < 1 << 20, "{u:?}");
        assert_eq!(u.groups[0].0, "data/");
        let names: Vec<&str> = u.groups.iter().map(|g| g.0.as_str()).collect();
        for g in ["data/", "*.log", "other", "*.sst", "MANIFEST-*"] {
            assert!(names.contains(&g), "{names:?}");
        }
        let line = disk_usage_line("DB size on disk", dir.path());
        assert!(line.starts_with("DB size on disk: 0.1 MB allocated ("), "{line}");
        assert!(line.contains(" in 5 files: data/ 0.1 MB"), "{line}");
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
        // db_bench's "after compression" figure: value_size * compression_ratio, rounded.
        assert!(
            h.contains("Values:     10 bytes each (5 bytes after compression)"),
            "{h}"
        );
        assert!(h.contains("Read keys:  uniform\n"));
        assert!(h.contains(" block_cache_size=8388608 "), "{h}");
        assert!(h.contains(" row_cache_size=0 "), "{h}");
        assert!(h.contains(" compression_per_level=none,none,none "), "{h}");
        assert!(!h.contains(" fs="), "{h}");
        let line = riptide_options_line(&riptide::Options::default());
        assert!(
            line.starts_with("create_if_missing=true error_if_exists=false write_buffer_size="),
            "{line}"
        );
        assert!(line.contains(" flush_on_close=true "), "{line}");
        assert!(!line.contains(": ") && !line.contains(", "), "{line}");
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
