//! End-to-end tests of `riptide bench`: run the built binary on a temporary directory, parse its
//! db_bench-format output and check the operation counts and found counts it reports.
//!
//! The "(X of Y found)" figures of `matches_db_bench_key_sequences` were printed by RocksDB's
//! db_bench 7.8.3 with the same flags: the bench draws the same keys for the same seed.

use std::path::Path;
use std::process::{Command, Output};

/// One db_bench result line.
#[derive(Debug, Clone, PartialEq)]
struct ResultLine {
    name: String,
    micros_per_op: f64,
    ops_per_sec: u64,
    seconds: f64,
    ops: u64,
    mb_per_sec: Option<f64>,
    found: Option<(u64, u64)>,
}

/// Parses `name : X micros/op Y ops/sec Z seconds N operations;[ W MB/s][ (F of R found)]`.
fn parse_result(line: &str) -> Option<ResultLine> {
    let (name, rest) = line.split_once(" : ")?;
    let name = name.trim_end();
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    let (head, tail) = rest.split_once(" operations;")?;
    let f: Vec<&str> = head.split_whitespace().collect();
    if f.len() != 7 || f[1] != "micros/op" || f[3] != "ops/sec" || f[5] != "seconds" {
        return None;
    }
    let mut mb_per_sec = None;
    let mut found = None;
    let mut tail = tail.trim();
    if let Some(i) = tail.find(" MB/s") {
        mb_per_sec = Some(tail[..i].trim().parse().ok()?);
        tail = tail[i + " MB/s".len()..].trim();
    }
    if !tail.is_empty() {
        let inner = tail.strip_prefix('(')?.strip_suffix(" found)")?;
        let (x, y) = inner.split_once(" of ")?;
        found = Some((x.parse().ok()?, y.parse().ok()?));
    }
    Some(ResultLine {
        name: name.to_string(),
        micros_per_op: f[0].parse().ok()?,
        ops_per_sec: f[2].parse().ok()?,
        seconds: f[4].parse().ok()?,
        ops: f[6].parse().ok()?,
        mb_per_sec,
        found,
    })
}

fn run(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("bench")
        .arg(format!("--db={}", db.display()))
        .args(args)
        .output()
        .expect("run riptide")
}

/// Runs the bench, asserts success, returns stdout and its result lines.
fn bench(db: &Path, args: &[&str]) -> (String, Vec<ResultLine>) {
    let out = run(db, args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "riptide bench {args:?} failed: {stderr}\n{stdout}"
    );
    let results = stdout.lines().filter_map(parse_result).collect();
    (stdout, results)
}

fn result<'a>(results: &'a [ResultLine], name: &str, nth: usize) -> &'a ResultLine {
    results
        .iter()
        .filter(|r| r.name == name)
        .nth(nth)
        .unwrap_or_else(|| panic!("no result #{nth} for {name} in {results:?}"))
}

#[test]
fn parser_accepts_db_bench_output() {
    // Lines printed by db_bench 7.8.3.
    let r = parse_result(
        "readrandom   :       1.171 micros/op 830564 ops/sec 0.001 seconds 1000 operations;   58.3 MB/s (635 of 1000 found)",
    )
    .unwrap();
    assert_eq!(
        (r.ops, r.ops_per_sec, r.found, r.mb_per_sec),
        (1000, 830564, Some((635, 1000)), Some(58.3))
    );
    let r = parse_result("deleterandom :      22.840 micros/op 87542 ops/sec 0.228 seconds 20000 operations;").unwrap();
    assert_eq!((r.ops, r.found, r.mb_per_sec), (20000, None, None));
    let r = parse_result("readwhilewriting :       5.184 micros/op 322945 ops/sec 0.062 seconds 20000 operations;   35.7 MB/s (10000 of 10000 found)").unwrap();
    assert_eq!(r.name, "readwhilewriting");
    assert!(parse_result("Write path: 1 writes").is_none());
}

#[test]
fn every_benchmark_reports_its_op_count() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let list = "fillseq,readrandom,seekrandom,readseq,readreverse,overwrite,readwhilewriting,deleterandom,fillrandom,readrandom";
    let out = run(
        &db,
        &[&format!("--benchmarks={list}"), "--num=2000", "--threads=2", "--seed=3"],
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}\n{stdout}");
    // No progress bar or anything else on stderr when it is not a terminal.
    assert_eq!(stderr, "");
    let results: Vec<ResultLine> = stdout.lines().filter_map(parse_result).collect();
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, list.split(',').collect::<Vec<_>>(), "{stdout}");
    for r in &results {
        // 2 threads x 2000 ops each (reads, writes and deletes default to --num per thread).
        assert_eq!(r.ops, 4000, "{r:?}");
        assert!(r.seconds >= 0.0 && r.micros_per_op > 0.0 && r.ops_per_sec > 0, "{r:?}");
        // micros/op is per thread: about threads / throughput.
        let expect = 2.0 * 1e6 / r.ops_per_sec as f64;
        assert!(r.micros_per_op < expect * 1.5 + 1.0, "{r:?}");
    }
    // After fillseq every key of [0,num) exists: every random read and seek finds its key.
    assert_eq!(result(&results, "readrandom", 0).found, Some((4000, 4000)));
    assert_eq!(result(&results, "seekrandom", 0).found, Some((4000, 4000)));
    // readwhilewriting's writer only overwrites keys in [0,num): still all found.
    assert_eq!(result(&results, "readwhilewriting", 0).found, Some((4000, 4000)));
    // MB/s where db_bench prints it, not for deletes and seeks.
    for name in [
        "fillseq",
        "readrandom",
        "readseq",
        "readreverse",
        "overwrite",
        "fillrandom",
    ] {
        assert!(result(&results, name, 0).mb_per_sec.is_some(), "{name}");
    }
    assert!(result(&results, "deleterandom", 0).mb_per_sec.is_none());
    assert!(result(&results, "seekrandom", 0).mb_per_sec.is_none());
    // fillrandom starts from an empty database (db_bench's fresh_db) and draws keys with
    // replacement: 4000 random puts over 2000 keys leave about 1 - e^-2 = 86% of them.
    let (found, of) = result(&results, "readrandom", 1).found.unwrap();
    assert_eq!(of, 4000);
    assert!((3000..3950).contains(&found), "found {found}");
    // The extra lines.
    let write_paths: Vec<&str> = stdout.lines().filter(|l| l.starts_with("Write path: ")).collect();
    assert_eq!(
        write_paths.len(),
        5,
        "fillseq, overwrite, readwhilewriting, deleterandom, fillrandom"
    );
    assert!(
        write_paths[0].starts_with("Write path: 4000 writes (4000 ops) in "),
        "{}",
        write_paths[0]
    );
    assert!(write_paths[0].contains("0 fsyncs"), "{}", write_paths[0]);
    let writer = stdout
        .lines()
        .find(|l| l.starts_with("Background writer: "))
        .expect("writer line");
    assert!(writer.ends_with(" ops/sec"), "{writer}");
    assert_eq!(stdout.matches("DB path: [").count(), 10);
    assert!(stdout.contains("Closed the database in "));
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("Peak RSS (VmHWM): ") && last.ends_with(" kB)"),
        "{last}"
    );
    assert!(stdout.starts_with("Riptide:    version "));
    assert!(stdout.contains("Keys:       16 bytes each"));
    assert!(stdout.contains("Entries:    2000\n"));
}

#[test]
fn matches_db_bench_key_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (_, r) = bench(&db, &["--benchmarks=fillrandom,readrandom", "--num=1000", "--seed=1"]);
    assert_eq!(result(&r, "readrandom", 0).found, Some((617, 1000)));
    let (_, r) = bench(
        &db,
        &[
            "--benchmarks=fillrandom,readrandom,seekrandom",
            "--num=5000",
            "--seed=1",
        ],
    );
    assert_eq!(result(&r, "readrandom", 0).found, Some((3200, 5000)));
    assert_eq!(result(&r, "seekrandom", 0).found, Some((3222, 5000)));
    let (_, r) = bench(
        &db,
        &["--benchmarks=fillseq,deleterandom,readrandom", "--num=5000", "--seed=1"],
    );
    assert_eq!(result(&r, "deleterandom", 0).ops, 5000);
    assert_eq!(result(&r, "readrandom", 0).found, Some((1836, 5000)));
    // Batches: db_bench does floor(5000 / 3) batches of 3.
    let (_, r) = bench(
        &db,
        &[
            "--benchmarks=fillrandom,readrandom",
            "--num=5000",
            "--seed=1",
            "--batch_size=3",
        ],
    );
    assert_eq!(result(&r, "fillrandom", 0).ops, 4998);
    assert_eq!(result(&r, "readrandom", 0).found, Some((3150, 5000)));
    // Three threads of 1000 random puts each, then a full scan per thread.
    let (_, r) = bench(
        &db,
        &[
            "--benchmarks=fillrandom,readseq",
            "--num=3000",
            "--seed=7",
            "--threads=3",
            "--writes=1000",
        ],
    );
    assert_eq!(result(&r, "fillrandom", 0).ops, 3000);
    assert_eq!(result(&r, "readseq", 0).ops, 5685);
}

#[test]
fn use_existing_db_skips_fills_and_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    bench(&db, &["--benchmarks=fillseq", "--num=1000"]);
    let (stdout, r) = bench(
        &db,
        &[
            "--benchmarks=fillseq,readrandom,readreverse",
            "--num=1000",
            "--use_existing_db=1",
            "--reads=300",
        ],
    );
    assert!(
        stdout.contains("fillseq      : skipped (--use_existing_db is true)\n"),
        "{stdout}"
    );
    assert_eq!(result(&r, "readrandom", 0).found, Some((300, 300)));
    assert_eq!(result(&r, "readreverse", 0).ops, 300);
    // Without it, the directory is wiped first.
    let (_, r) = bench(&db, &["--benchmarks=readseq", "--num=1000"]);
    assert_eq!(
        result(&r, "readseq", 0).ops,
        1,
        "an empty table: db_bench reports at least 1 op"
    );
}

#[test]
fn histogram_blocks_count_every_op() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, _) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillseq,readrandom,seekrandom",
            "--num=500",
            "--histogram=1",
        ],
    );
    for op in ["write", "read", "seek"] {
        let block: Vec<&str> = stdout
            .split(&format!("Microseconds per {op}:\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {op} histogram in {stdout}"))
            .lines()
            .collect();
        assert!(block[0].starts_with("Count: 500 Average: "), "{}", block[0]);
        assert!(
            block[1].starts_with("Min: ") && block[1].contains("  Median: "),
            "{}",
            block[1]
        );
        let p: Vec<f64> = block[2]
            .strip_prefix("Percentiles: ")
            .unwrap()
            .split_whitespace()
            .skip(1)
            .step_by(2)
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(p.len(), 5, "{}", block[2]);
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{}", block[2]);
        assert!(p[4] > 0.0);
        assert_eq!(block[3], "------------------------------------------------------");
        // The bucket counts add up to the op count.
        let total: u64 = block[4..]
            .iter()
            .take_while(|l| l.starts_with('[') || l.starts_with('('))
            .map(|l| {
                l.split(']')
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(total, 500);
    }
}

#[test]
fn async_commits_count_only_completed_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, r) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillrandom,readseq",
            "--num=400",
            "--threads=4",
            "--sync=1",
            "--async_commit_depth=8",
        ],
    );
    assert_eq!(result(&r, "fillrandom", 0).ops, 1600);
    let wp = stdout.lines().find(|l| l.starts_with("Write path: ")).unwrap();
    assert!(wp.starts_with("Write path: 1600 writes (1600 ops) in "), "{wp}");
    let fsyncs: u64 = wp
        .split(" fsyncs")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=1600).contains(&fsyncs), "{wp}");
    // 1600 random puts over 400 keys leave about 1 - e^-4 = 98% of them, each thread scans all.
    let keys = result(&r, "readseq", 0).ops / 4;
    assert!((370..=400).contains(&keys), "{keys}");
}

#[test]
fn disable_wal_skips_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, r) = bench(
        &dir.path().join("db"),
        &["--benchmarks=fillseq", "--num=300", "--disable_wal=1"],
    );
    assert_eq!(result(&r, "fillseq", 0).ops, 300);
    let wp = stdout.lines().find(|l| l.starts_with("Write path: ")).unwrap();
    assert!(wp.contains(" 0 log writes, 0 fsyncs"), "{wp}");
}

#[test]
fn duration_runs_random_benchmarks_for_that_long() {
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillseq,readrandom,fillrandom",
            "--num=1000",
            "--duration=1",
        ],
    );
    // fillseq ignores --duration.
    assert_eq!(result(&r, "fillseq", 0).ops, 1000);
    for name in ["readrandom", "fillrandom"] {
        let x = result(&r, name, 0);
        assert!(x.seconds >= 1.0 && x.seconds < 3.0, "{x:?}");
        assert!(x.ops > 0, "{x:?}");
    }
}

#[test]
fn bad_flags_exit_non_zero_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for (args, needle) in [
        (&["--bogus=1"][..], "--bogus"),
        (&["--key_size=4"], "key_size"),
        (&["--benchmarks=fillseq,nope"], "nope"),
        (&["--threads=0"], "threads"),
        (&["--sync=2"], "sync"),
        (&["--num=abc"], "num"),
        (&["--write_buffer_size=10"], "write_buffer_size"),
        (&["--read_random_exp_range=-1"], "--read_random_exp_range=-1"),
        (&["--read_random_exp_range=inf"], "read_random_exp_range"),
        (&["--compression_ratio=2"], "--compression_ratio=2"),
        (&["--row_cache_size=-5"], "--row_cache_size=-5"),
        (&["--max_background_flushes=0"], "--max_background_flushes=0"),
        (&["--bloom_bits=40"], "--bloom_bits"),
        (
            &["--level0_slowdown_writes_trigger=50"],
            "--level0_slowdown_writes_trigger",
        ),
        (&["--block_size=100"], "--block_size=100"),
    ] {
        let out = run(&db, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(
        !db.exists(),
        "bad flags must be rejected before the directory is touched"
    );
    // `riptide` alone prints help and fails; `--help` succeeds.
    let out = Command::new(env!("CARGO_BIN_EXE_riptide")).output().unwrap();
    assert!(!out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--async_commit_depth"));
}

#[test]
fn refuses_to_wipe_a_directory_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"keep me").unwrap();
    let out = run(dir.path(), &["--benchmarks=fillseq", "--num=10"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to wipe"));
    assert_eq!(std::fs::read(dir.path().join("notes.txt")).unwrap(), b"keep me");
}

#[test]
fn engine_options_are_printed_and_missing_engines_explained() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (stdout, r) = bench(&db, &["--engine=riptide", "--benchmarks=fillseq", "--num=100"]);
    assert_eq!(result(&r, "fillseq", 0).ops, 100);
    let block = stdout
        .split("Engine options:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no engine options in {stdout}"));
    let settings: Vec<&str> = block
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim_start().split(':').next().unwrap())
        .collect();
    for s in [
        "block_size",
        "bloom_bits_per_key",
        "compression",
        "block_cache_size",
        "row_cache_size",
        "write_buffer_size",
        "compaction",
        "wal",
        "sync",
    ] {
        assert!(settings.contains(&s), "{s} missing from {settings:?}");
    }
    assert!(stdout.contains("Engine:     riptide "), "{stdout}");
    // db_bench's defaults reach Riptide's options: 8 MiB block cache, 10 bloom bits, no
    // compression, no row cache.
    assert!(
        stdout.contains("  block_cache_size: 8388608 (8.0 MiB) (decoded data blocks"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  bloom_bits_per_key: 10 (one filter per data block"),
        "{stdout}"
    );
    assert!(stdout.contains("  compression: none\n"), "{stdout}");
    assert!(stdout.contains("  row_cache_size: 0 (no row cache)\n"), "{stdout}");
    // The engine block comes before the rule and the first benchmark.
    assert!(stdout.find("Engine options:").unwrap() < stdout.find("DB path:").unwrap());
    // Riptide refuses peer-only settings instead of ignoring them.
    for (args, needle) in [
        (&["--compression_type=snappy"][..], "expected none, lz4 or zstd"),
        (&["--compression_level=30"], "must be in -7..=22"),
        (&["--max_write_buffer_number=4"], "RocksDB option"),
        (&["--engine=leveldb"], "unknown engine"),
    ] {
        let out = run(&db, args);
        assert!(!out.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{args:?}");
    }
    // Engines this binary was built without say how to build them.
    for (engine, feature) in [("rocksdb", "bench-rocksdb"), ("fjall", "bench-fjall")] {
        let built = match engine {
            "rocksdb" => cfg!(feature = "bench-rocksdb"),
            _ => cfg!(feature = "bench-fjall"),
        };
        if !built {
            let out = run(&db, &[&format!("--engine={engine}")]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success());
            assert!(stderr.contains(feature) && stderr.contains("cargo build"), "{stderr}");
        }
    }
}

#[test]
fn dump_file_lists_every_entry_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump.txt");
    let (stdout, _) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillseq,deleterandom",
            "--num=50",
            "--deletes=20",
            "--key_size=8",
            "--value_size=3",
            &format!("--dump_file={}", dump.display()),
        ],
    );
    let text = std::fs::read_to_string(&dump).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        stdout.contains(&format!("Dump: {} entries written to ", lines.len())),
        "{stdout}"
    );
    // 20 random deletes over 50 keys remove some of them.
    assert!(lines.len() > 30 && lines.len() < 50, "{}", lines.len());
    let keys: Vec<u64> = lines
        .iter()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            assert_eq!((k.len(), v.len()), (16, 6), "{l}");
            u64::from_str_radix(k, 16).unwrap()
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]) && keys[keys.len() - 1] < 50,
        "{keys:?}"
    );
}

/// The lines of the block that follows `header` up to the first empty line.
fn block_after<'a>(stdout: &'a str, header: &str) -> Vec<&'a str> {
    stdout
        .split(header)
        .nth(1)
        .unwrap_or_else(|| panic!("no {header:?} in {stdout}"))
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn flush_stats_and_caches_with_skewed_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (stdout, r) = bench(
        &db,
        &[
            "--benchmarks=fillrandom,flush,readrandom,stats,levelstats",
            "--num=2000",
            "--write_buffer_size=65536",
            "--cache_size=1048576",
            "--row_cache_size=1048576",
            "--read_random_exp_range=10",
            "--seed=1",
        ],
    );
    let names: Vec<&str> = r.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["fillrandom", "flush", "readrandom"], "{stdout}");
    // A meta operation is one timed call; the flush wrote something (MB/s present).
    let flush = result(&r, "flush", 0);
    assert_eq!(flush.ops, 1);
    assert!(flush.mb_per_sec.is_some(), "{flush:?}");
    // db_bench 7.8.3 with --benchmarks=fillrandom,readrandom --num=2000
    // --read_random_exp_range=10 --seed=1 prints "(1312 of 2000 found)": same skewed keys,
    // now read from extents through the caches.
    assert_eq!(result(&r, "readrandom", 0).found, Some((1312, 2000)));
    assert!(
        stdout.contains("Read keys:  skewed, read_random_exp_range=10 "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  row_cache_size: 1048576 (1.0 MiB) (latest versions"),
        "{stdout}"
    );
    // stats: Riptide's DbStats, with cache hit ratios and write amplification.
    let stats = block_after(&stdout, "** Riptide stats (since the database was opened) **");
    let find = |prefix: &str| {
        *stats
            .iter()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {stats:?}"))
    };
    let flushes: u64 = find("flushes: ").trim_start()["flushes: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(flushes >= 2, "64 KiB memtables of 2000 x 116 bytes: {stats:?}");
    assert!(find("write amplification: ").contains(" of user keys and values put since open"));
    assert!(!find("write amplification: ").contains("write amplification: -"));
    assert!(find("block cache: hit ratio ").contains(" of 1048576 bytes in use"));
    let row = find("row cache: hit ratio ");
    assert!(!row.contains("hit ratio -") && !row.contains(" (0 hits"), "{row}");
    // levelstats: a table of the default table's levels.
    let levels = block_after(&stdout, "Level stats of table \"default\":");
    assert!(levels[0].starts_with("Level  Layers  Extents"), "{levels:?}");
    assert!(levels.iter().any(|l| l.starts_with("L0 ")), "{levels:?}");
    assert!(levels.iter().any(|l| l.starts_with("Sum ")), "{levels:?}");
    // End of run: the same statistics, then the size on disk before and after closing.
    assert!(stdout.contains("\nRiptide stats: flushes: "), "{stdout}");
    assert!(stdout.contains("\nRiptide stats: row cache: hit ratio "), "{stdout}");
    let size = stdout
        .lines()
        .find(|l| l.starts_with("DB size on disk: "))
        .expect("size line");
    assert!(size.contains(" allocated (") && size.contains("data/"), "{size}");
    assert!(stdout.contains("\nDB size on disk after close: "), "{stdout}");
}

#[test]
fn compact_and_waitforcompaction_leave_one_sorted_level() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, r) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillseq,waitforcompaction,compact,levelstats,readseq,readrandom",
            "--num=3000",
            "--write_buffer_size=65536",
            "--compression_type=lz4",
            "--bloom_bits=0",
            "--block_size=4096",
        ],
    );
    let names: Vec<&str> = r.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        ["fillseq", "waitforcompaction", "compact", "readseq", "readrandom"],
        "{stdout}"
    );
    assert_eq!(result(&r, "compact", 0).ops, 1);
    assert_eq!(result(&r, "readseq", 0).ops, 3000);
    assert_eq!(result(&r, "readrandom", 0).found, Some((3000, 3000)));
    // After a full compaction everything is in L2.
    let levels = block_after(&stdout, "Level stats of table \"default\":");
    let extents = |level: &str| -> u64 {
        let line = levels
            .iter()
            .find(|l| l.starts_with(level))
            .unwrap_or_else(|| panic!("{levels:?}"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert_eq!((extents("L0 "), extents("L1 ")), (0, 0), "{levels:?}");
    assert!(extents("L2 ") >= 1, "{levels:?}");
    assert!(
        stdout.contains("  compression: lz4, lz4, lz4 in L0, L1, L2 (data blocks"),
        "{stdout}"
    );
    assert!(stdout.contains("  bloom_bits_per_key: 0 (no filter)"), "{stdout}");
    assert!(stdout.contains("  block_size: 4096 (4.0 KiB)"), "{stdout}");
}

#[test]
fn multireadrandom_matches_db_bench() {
    let dir = tempfile::tempdir().unwrap();
    // db_bench 7.8.3, same flags: "multireadrandom ... 4998 operations; ... (3098 of 4998
    // found)" (no newline after it) and "readrandom ... (3097 of 5000 found)".
    let (stdout, r) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillrandom,multireadrandom,readrandom",
            "--num=5000",
            "--batch_size=7",
            "--read_random_exp_range=3.5",
            "--seed=5",
        ],
    );
    assert_eq!(result(&r, "multireadrandom", 0).found, Some((3098, 4998)));
    assert_eq!(result(&r, "readrandom", 0).found, Some((3097, 5000)));
    let line = stdout.lines().position(|l| l.starts_with("multireadrandom :")).unwrap();
    assert!(!stdout.lines().nth(line + 1).unwrap().is_empty());
}

#[test]
fn a_flag_given_twice_takes_its_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, r) = bench(
        &dir.path().join("db"),
        &[
            "--benchmarks=fillseq",
            "--num=10",
            "--num=300",
            "--cache_size=0",
            "--cache_size=65536",
        ],
    );
    assert_eq!(result(&r, "fillseq", 0).ops, 300);
    assert!(stdout.contains("  block_cache_size: 65536 (64.0 KiB)"), "{stdout}");
}

/// compact_reuse runs one timed merge per --distinct_pct value, each on a fresh database: the
/// line counts every input record (11 x num) and the merge leaves everything in L2 with the
/// small run's distinct keys added to the large run's.
#[test]
fn compact_reuse_merges_both_runs_per_percentage() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (stdout, results) = bench(
        &db,
        &[
            "--benchmarks=compact_reuse,readseq",
            "--num=3000",
            "--distinct_pct=50,100",
            "--seed=5",
        ],
    );
    let rounds: Vec<&ResultLine> = results.iter().filter(|r| r.name == "compact_reuse").collect();
    assert_eq!(rounds.len(), 2, "{stdout}");
    for r in &rounds {
        assert_eq!(r.ops, 33_000, "{r:?}");
    }
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("compact_reuse details: ") && l.contains(" merged 30000 + "))
        .collect();
    assert!(
        lines[0].contains("distinct_pct=50: merged 30000 + 3000 records (150 hot keys, layout uniform)"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("distinct_pct=100: merged 30000 + 3000 records (1 hot keys, layout uniform)"),
        "{}",
        lines[1]
    );
    // After the last round everything is in L2: 30000 + 3000 distinct keys (64-bit random key
    // numbers do not collide at this size).
    let l2 = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("L2 "))
        .expect("level stats");
    assert!(l2.trim_end().ends_with(" 33000"), "{l2}");
    assert_eq!(
        result(&results, "readseq", 0).ops,
        3000,
        "readseq reads --reads = num entries"
    );
    let out = run(&db, &["--benchmarks=compact_reuse", "--distinct_pct=0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--distinct_pct=0"));
}

/// compact_reuse --reuse_layout=appended: the hot keys are records of the large run (updates
/// add no rows) and the distinct keys lie above it, so after the merge L2 holds the large run
/// plus the distinct records only, and most of the large run's blocks were copied, not merged.
#[test]
fn compact_reuse_appended_layout_updates_the_large_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (stdout, results) = bench(
        &db,
        &[
            "--benchmarks=compact_reuse",
            "--num=3000",
            "--distinct_pct=90",
            "--reuse_layout=appended",
            "--seed=5",
        ],
    );
    assert_eq!(result(&results, "compact_reuse", 0).ops, 33_000);
    assert!(
        stdout.contains("distinct_pct=90: merged 30000 + 3000 records (30 hot keys, layout appended)"),
        "{stdout}"
    );
    let l2_entries: u64 = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("L2 "))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .expect("level stats");
    // About 90 % of the 3000 small-run records are new keys; the rest update existing rows.
    assert!(
        (32_500..=32_900).contains(&l2_entries),
        "L2 holds {l2_entries} entries\n{stdout}"
    );
    let reuse = stdout
        .lines()
        .find(|l| l.starts_with("compact_reuse details: distinct_pct=90: L"))
        .expect("reuse details");
    let count = |what: &str| -> u64 {
        let l2 = &reuse[reuse.find("L2: ").expect("an L2 part")..];
        let at = l2.find(what).expect(what);
        l2[..at].split_whitespace().last().unwrap().parse().unwrap()
    };
    let (copied, merged) = (count(" blocks copied"), count(" merged"));
    assert!(copied > 2 * merged, "{reuse}");
    let out = run(&db, &["--benchmarks=compact_reuse", "--reuse_layout=clustered"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reuse_layout=clustered"));
}

/// With --histogram and --stats_interval_seconds each interval line carries that interval's
/// latency percentiles.
#[test]
fn interval_lines_carry_latency_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run(
        &db,
        &[
            "--benchmarks=fillrandom",
            "--num=100000000",
            "--duration=3",
            "--stats_interval_seconds=1",
            "--histogram=1",
            "--value_size=10",
        ],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("fillrandom ... ")).collect();
    assert!(lines.len() >= 2, "{stderr}");
    for l in &lines {
        let p = l
            .split("; latency (micros) in the last interval: P50 ")
            .nth(1)
            .unwrap_or_else(|| panic!("{l}"));
        let p = p.split(';').next().unwrap();
        let nums: Vec<f64> = p.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert_eq!(nums.len(), 4, "{l}");
        assert!(
            nums[0] > 0.0 && nums[0] <= nums[1] && nums[1] <= nums[2] && nums[2] <= nums[3],
            "{l}"
        );
        // Then the process's memory and the engine's shape.
        assert!(l.contains("; RSS ") && l.contains(" MB (peak "), "{l}");
        assert!(l.contains("; L0 layers ") && l.contains(", extents L0/L1/L2 "), "{l}");
    }
}

/// --zipf makes random keys Zipfian for writes too: a fill of num random keys leaves far fewer
/// distinct keys than a uniform fill (about 63 %), and bad thetas are refused.
#[test]
fn zipf_keys_concentrate_writes_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (out, r) = bench(
        &db,
        &[
            "--benchmarks=fillrandom,readseq,readrandom",
            "--num=20000",
            "--zipf=0.99",
            "--seed=2",
        ],
    );
    let distinct = result(&r, "readseq", 0).ops;
    assert!(distinct < 8000, "{distinct} distinct keys after a Zipfian fill\n{out}");
    // Reads draw from the same distribution, so they find written (hot) keys far more often
    // than the 63 % a uniform fill and uniform reads give (about 82 % here).
    let (found, of) = result(&r, "readrandom", 0).found.unwrap();
    assert!(found as f64 > 0.75 * of as f64, "{found} of {of}");
    for bad in ["--zipf=1", "--zipf=-0.5", "--zipf=1.5"] {
        let o = run(&db, &["--benchmarks=readrandom", bad]);
        assert!(!o.status.success(), "{bad} accepted");
    }
    let o = run(
        &db,
        &["--benchmarks=readrandom", "--zipf=0.9", "--read_random_exp_range=5"],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("give one"));
}

/// The number after `label` in `line` (e.g. "update 123," -> 123).
fn count_after(line: &str, label: &str) -> u64 {
    let rest = &line[line.find(label).unwrap_or_else(|| panic!("no {label:?} in {line}")) + label.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no count after {label:?} in {line}"))
}

/// xbench loads num records, runs threads x reads transactions of --txn_queries queries each,
/// and its counts add up: queries per kind, inserts = new keys in the dump, the latency table
/// has one row per kind with every committed query in it.
#[test]
fn xbench_runs_the_mix_and_counts_every_query() {
    let dir = tempfile::tempdir().unwrap();
    for (isolation, txn_queries) in [("si", 1u64), ("rc", 3)] {
        let db = dir.path().join(format!("db-{isolation}"));
        let dump = dir.path().join(format!("dump-{isolation}"));
        let dump_flag = format!("--dump_file={}", dump.display());
        let tq = format!("--txn_queries={txn_queries}");
        let iso = format!("--isolation={isolation}");
        let (stdout, results) = bench(
            &db,
            &[
                "--benchmarks=xbench",
                "--num=3000",
                "--reads=400",
                "--threads=2",
                "--key_size=12",
                "--value_size=500",
                "--mix=40:10:30:20",
                "--range_size=7",
                "--zipf=0.99",
                &tq,
                &iso,
                &dump_flag,
            ],
        );
        let queries = 2 * 400 * txn_queries;
        assert_eq!(result(&results, "xbench", 0).ops, queries, "{stdout}");
        assert!(
            stdout.contains("xbench load : 3000 records (12 B keys, 500 B values)"),
            "{stdout}"
        );
        let summary = stdout.lines().find(|l| l.starts_with("xbench summary:")).unwrap();
        assert!(
            summary.contains(&format!(
                "{txn_queries} queries per transaction, isolation {isolation}, zipf 0.99"
            )),
            "{summary}"
        );
        assert!(count_after(summary, "QPS ") > 0, "{summary}");
        assert!(summary.contains("800 transactions committed"), "{summary}");
        let q = stdout.lines().find(|l| l.starts_with("xbench queries:")).unwrap();
        let (point, range, update, insert) = (
            count_after(q, "point "),
            count_after(q, "range "),
            count_after(q, "update "),
            count_after(q, "insert "),
        );
        assert_eq!(point + range + update + insert, queries, "{q}");
        for (n, share) in [(point, 40), (range, 10), (update, 30), (insert, 20)] {
            let expected = queries * share / 100;
            assert!(n.abs_diff(expected) < expected / 3 + 10, "{q}: {n} vs ~{expected}");
        }
        // Every point lookup hits a loaded record; a range lookup reads at most 7 entries.
        assert!(q.contains(&format!("point {point} ({point} found)")), "{q}");
        let rows = count_after(q, &format!("range {range} ("));
        assert!(rows <= 7 * range && rows >= 6 * range, "{q}");
        // Inserted keys are new records.
        let entries = std::fs::read_to_string(&dump).unwrap().lines().count() as u64;
        assert_eq!(entries, 3000 + insert, "dump entries");
        for (kind, n) in [
            ("transaction", 800),
            ("point", point),
            ("range", range),
            ("update", update),
            ("insert", insert),
        ] {
            let row = stdout
                .lines()
                .find(|l| l.starts_with(&format!("xbench latency (us): {kind} ")))
                .unwrap_or_else(|| panic!("no {kind} row in {stdout}"));
            let count: u64 = row.split_whitespace().nth(4).unwrap().parse().unwrap();
            assert_eq!(count, if kind == "transaction" { 800 } else { n }, "{row}");
        }
        // Conflicts on hot keys are rolled back and retried: every attempt began, 800 committed.
        let aborts = count_after(summary, "committed, ");
        assert!(
            stdout.contains(&format!(
                "Riptide transactions: {} begun, 800 committed, {aborts} rolled back",
                800 + aborts
            )),
            "{stdout}"
        );
    }
}

/// A second xbench on the same database (`--use_existing_db=1`) inserts new records after the
/// first run's: the dump grows by both runs' inserts (were they to start at --num again, the
/// second run's would overwrite the first's).
#[test]
fn xbench_on_an_existing_database_inserts_new_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let dump = dir.path().join("dump");
    let dump_flag = format!("--dump_file={}", dump.display());
    let mut inserts = 0;
    for (run, existing) in [
        (1, "--use_existing_db=0"),
        (2, "--use_existing_db=1"),
        (3, "--use_existing_db=1"),
    ] {
        let (stdout, _) = bench(
            &db,
            &[
                "--benchmarks=xbench",
                existing,
                "--num=500",
                "--reads=100",
                "--threads=2",
                "--key_size=12",
                "--value_size=50",
                "--mix=0:0:0:100",
                &dump_flag,
            ],
        );
        let q = stdout.lines().find(|l| l.starts_with("xbench queries:")).unwrap();
        let n = count_after(q, "insert ");
        assert_eq!(n, 200, "run {run}: {q}");
        inserts += n;
        let entries = std::fs::read_to_string(&dump).unwrap().lines().count() as u64;
        assert_eq!(entries, 500 + inserts, "run {run}: dump entries");
    }
}

/// tsunami offers base, spike and base rates; the CSV has a row per second whose transactions
/// add up to the schedule, the spike's second carries the most, and the SVG is written.
#[test]
fn tsunami_writes_a_per_second_csv_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = dir.path().join("t");
    let out_flag = format!("--tsunami_out={}", out.display());
    let (stdout, _) = bench(
        &db,
        &[
            "--benchmarks=tsunami",
            "--num=2000",
            "--threads=4",
            "--key_size=12",
            "--value_size=100",
            "--tsunami_base_tps=40",
            "--tsunami_factor=20",
            "--tsunami_phases=1,1,1",
            &out_flag,
        ],
    );
    assert!(
        stdout.contains("tsunami schedule: 880 transactions over 3 s"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("second,phase,offered_tps,tps,qps,p50_us,p99_us,max_us,aborts")
    );
    let rows: Vec<Vec<String>> = lines.map(|l| l.split(',').map(str::to_string).collect()).collect();
    assert!(rows.len() >= 3, "{csv}");
    let tps: Vec<u64> = rows.iter().map(|r| r[3].parse().unwrap()).collect();
    assert_eq!(tps.iter().sum::<u64>(), 880, "{csv}");
    assert_eq!(
        rows.iter()
            .take(3)
            .map(|r| (r[1].as_str(), r[2].as_str()))
            .collect::<Vec<_>>(),
        [("before", "40"), ("spike", "800"), ("after", "40")]
    );
    assert!(tps[1] > 5 * tps[0].max(tps[2]), "{csv}");
    assert!(rows[1][6].parse::<f64>().unwrap() > 0.0, "the spike has a P99: {csv}");
    let svg = std::fs::read_to_string(dir.path().join("t.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{svg}");
    assert!(stdout.contains("tsunami phase spike"), "{stdout}");
}

#[test]
fn xbench_flags_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for (args, needle) in [
        (&["--benchmarks=xbench", "--mix=1:2:3"][..], "--mix=1:2:3"),
        (&["--benchmarks=xbench", "--mix=0:0:0:0"], "--mix=0:0:0:0"),
        (&["--benchmarks=xbench", "--isolation=serializable"], "--isolation"),
        (&["--benchmarks=xbench", "--range_size=0"], "--range_size"),
        (&["--benchmarks=xbench", "--txn_queries=0"], "--txn_queries"),
        (&["--benchmarks=tsunami", "--tsunami_phases=1,0,1"], "--tsunami_phases"),
        (&["--benchmarks=tsunami", "--tsunami_base_tps=0"], "--tsunami_base_tps"),
        (&["--benchmarks=tsunami", "--tsunami_factor=-2"], "--tsunami_factor"),
    ] {
        let out = run(&db, args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// hotkeysnapshot writes --num newer versions of one key above a snapshot and reads the key at
/// that snapshot --reads times: every read finds the old version, and the run goes on.
#[test]
fn hotkeysnapshot_reads_the_version_of_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (stdout, results) = bench(
        &db,
        &[
            "--benchmarks=fillseq,hotkeysnapshot,readrandom",
            "--num=3000",
            "--reads=500",
        ],
    );
    let r = result(&results, "hotkeysnapshot", 0);
    assert_eq!(r.ops, 500, "{r:?}");
    assert_eq!(r.found, Some((500, 500)), "{stdout}");
    assert!(r.micros_per_op > 0.0 && r.ops_per_sec > 0, "{r:?}");
    assert!(
        stdout.contains("hotkeysnapshot details: 3000 newer versions of one key written in "),
        "{stdout}"
    );
    assert_eq!(result(&results, "readrandom", 0).found, Some((500, 500)));
}

/// Parses `name : cpu B of C cores busy (user U %, system S %, idle I % of the machine)`.
fn parse_cpu_line(line: &str) -> Option<(String, f64, u64, f64, f64, f64)> {
    let (name, rest) = line.split_once(" : cpu ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // B of C cores busy (user U %, system S %, idle I % of the machine)
    if f.len() != 17 || f[1] != "of" || f[3] != "cores" || f[5] != "(user" || f[8] != "system" || f[11] != "idle" {
        return None;
    }
    Some((
        name.trim_end().to_string(),
        f[0].parse().ok()?,
        f[2].parse().ok()?,
        f[6].parse().ok()?,
        f[9].parse().ok()?,
        f[12].parse().ok()?,
    ))
}

/// Every timed benchmark prints the process's CPU use right under its result line: busy cores
/// within the cores there are, shares between 0 and 100 that add up to 100 (Linux only; other
/// systems print no CPU line). xbench prints one too.
#[test]
fn cpu_line_follows_the_result_line() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (stdout, _) = bench(
        &dir.path().join("db"),
        &["--benchmarks=fillrandom,readrandom,xbench", "--num=5000", "--reads=200"],
    );
    let lines: Vec<&str> = stdout.lines().collect();
    for name in ["fillrandom", "readrandom", "xbench"] {
        let i = lines
            .iter()
            .position(|l| l.starts_with(&format!("{name:<12} : ")) && l.contains(" micros/op "))
            .unwrap_or_else(|| panic!("no {name} result line in {stdout}"));
        let (n, busy, cores, user, system, idle) =
            parse_cpu_line(lines[i + 1]).unwrap_or_else(|| panic!("no cpu line after {}: {stdout}", lines[i]));
        assert_eq!(n, name);
        assert!(cores >= 1, "{}", lines[i + 1]);
        assert!(busy >= 0.0 && busy <= cores as f64, "{}", lines[i + 1]);
        for share in [user, system, idle] {
            assert!((0.0..=100.0).contains(&share), "{}", lines[i + 1]);
        }
        assert!((user + system + idle - 100.0).abs() <= 0.2, "{}", lines[i + 1]);
    }
    // xbench also splits its transactions' time between their statements and their commit.
    let split = lines
        .iter()
        .find(|l| l.starts_with("xbench time split (us): statements mean "))
        .unwrap_or_else(|| panic!("no time split line: {stdout}"));
    assert!(
        split.contains(", commit mean ") && split.ends_with(" % of the two)"),
        "{split}"
    );
}
