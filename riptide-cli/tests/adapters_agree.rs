//! The engine adapters agree: the same seeded workload, run by `riptide bench --engine=X` on
//! each engine, leaves byte-identical contents (the `--dump_file` of a full scan, which the
//! bench has already checked against a backward scan and point reads), and the same
//! "(X of Y found)" counts.
//!
//! Needs the peer engines, so it only exists in the feature build (not in CI):
//! `CARGO_TARGET_DIR=target/peers cargo test --release -p riptide-cli --features bench-rocksdb,bench-fjall --test adapters_agree`
#![cfg(all(feature = "bench-rocksdb", feature = "bench-fjall"))]

use std::path::Path;
use std::process::{Command, Output};

const ENGINES: [&str; 3] = ["riptide", "rocksdb", "fjall"];

fn bench(engine: &str, db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("bench")
        .arg(format!("--engine={engine}"))
        .arg(format!("--db={}", db.display()))
        .args(args)
        .output()
        .expect("run riptide")
}

/// One engine's run: its stdout and its dump.
struct Run {
    engine: &'static str,
    stdout: String,
    dump: String,
}

impl Run {
    /// The "(X of Y found)" of the `nth` result line of `name`.
    fn found(&self, name: &str) -> String {
        let line = self
            .stdout
            .lines()
            .find(|l| l.split(" : ").next().map(str::trim_end) == Some(name))
            .unwrap_or_else(|| panic!("{}: no {name} line in\n{}", self.engine, self.stdout));
        line[line.find('(').unwrap_or_else(|| panic!("{line}"))..].to_string()
    }

    /// The operation count of the result line of `name`.
    fn ops(&self, name: &str) -> u64 {
        let line = self
            .stdout
            .lines()
            .find(|l| l.split(" : ").next().map(str::trim_end) == Some(name))
            .unwrap_or_else(|| panic!("{}: no {name} line", self.engine));
        let head = line.split(" operations;").next().unwrap();
        head.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

/// Runs `args` on every engine (each in its own directory, `per_engine` flags added) and returns
/// the runs.
fn run_all(args: &[&str], per_engine: impl Fn(&str) -> Vec<String>) -> Vec<Run> {
    let dir = tempfile::tempdir().unwrap();
    ENGINES
        .iter()
        .map(|&engine| {
            let dump = dir.path().join(format!("{engine}.dump"));
            let dump_flag = format!("--dump_file={}", dump.display());
            let extra = per_engine(engine);
            let mut all: Vec<&str> = args.to_vec();
            all.extend(extra.iter().map(String::as_str));
            all.push(&dump_flag);
            let out = bench(engine, &dir.path().join(engine), &all);
            let stdout = String::from_utf8(out.stdout).unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{engine} {all:?} failed: {stderr}\n{stdout}");
            assert!(stdout.contains("Engine options:\n"), "{stdout}");
            Run {
                engine,
                stdout,
                dump: std::fs::read_to_string(&dump).unwrap(),
            }
        })
        .collect()
}

/// Asserts every run left the same contents as the first (riptide) and found the same keys.
fn assert_agree(runs: &[Run], num: usize, lookups: &[&str]) {
    let base = &runs[0];
    let entries = base.dump.lines().count();
    // Deletes and overwrites did something: neither an empty nor a full key space.
    assert!(
        entries > num / 10 && entries < num * 9 / 10,
        "{entries} entries of {num}"
    );
    for run in &runs[1..] {
        if run.dump != base.dump {
            let (i, (a, b)) = base
                .dump
                .lines()
                .zip(run.dump.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .unwrap_or((entries, ("<end>", "<end>")));
            panic!(
                "{} and {} disagree: {} vs {} entries; first difference at entry {i}:\n  {}: {a}\n  {}: {b}",
                base.engine,
                run.engine,
                entries,
                run.dump.lines().count(),
                base.engine,
                run.engine
            );
        }
        for name in lookups {
            assert_eq!(
                base.found(name),
                run.found(name),
                "{name}: {} vs {}",
                base.engine,
                run.engine
            );
        }
    }
    for run in runs {
        for scan in ["readseq", "readreverse"] {
            if run.stdout.contains(&format!("\n{scan} ")) {
                assert_eq!(run.ops(scan), entries as u64, "{} {scan}", run.engine);
            }
        }
    }
}

#[test]
fn same_seeded_workload_same_contents() {
    // Random puts, overwrites and deletes, one at a time, all in the memtables.
    let runs = run_all(
        &[
            "--benchmarks=fillrandom,overwrite,deleterandom,overwrite,deleterandom,readrandom,seekrandom,readseq,readreverse",
            "--num=20000",
            "--seed=11",
        ],
        |_| Vec::new(),
    );
    assert_agree(&runs, 20000, &["readrandom", "seekrandom"]);
}

#[test]
fn batches_and_flushed_data_agree_too() {
    // Batches of 7 mixed over odd key and value sizes, 256 KiB memtables so every engine flushes
    // to data files and compacts, an explicit flush and full compaction in the middle, lz4
    // blocks, caches, and skewed reads.
    let runs = run_all(
        &[
            "--benchmarks=fillrandom,overwrite,deleterandom,flush,overwrite,compact,readrandom,multireadrandom,\
             seekrandom,readreverse,readseq,waitforcompaction",
            "--num=12000",
            "--writes=20000",
            "--deletes=9000",
            "--batch_size=7",
            "--key_size=20",
            "--value_size=300",
            "--seed=5",
            "--write_buffer_size=262144",
            "--compression_type=lz4",
            "--cache_size=1048576",
            "--read_random_exp_range=4",
        ],
        |engine| match engine {
            "fjall" => Vec::new(),
            _ => vec!["--row_cache_size=1048576".to_string()],
        },
    );
    assert_agree(&runs, 12000, &["readrandom", "multireadrandom", "seekrandom"]);
    // Riptide really did flush and compact.
    let flushes: u64 = runs[0]
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Riptide stats: flushes: "))
        .expect("Riptide flush line")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(flushes > 1, "{}", runs[0].stdout);
    // So did the peers.
    let rocks = &runs[1].stdout;
    let files = rocks
        .lines()
        .find_map(|l| l.strip_prefix("RocksDB stats: SST files per level L0..L6: "))
        .expect("RocksDB SST line");
    let total: u64 = files.split_whitespace().map(|n| n.parse::<u64>().unwrap()).sum();
    assert!(total > 0, "RocksDB wrote no SST file: {files}");
}

#[test]
fn peers_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for (engine, args, needle) in [
        ("rocksdb", &["--async_commit_depth=8"][..], "no asynchronous commit"),
        ("fjall", &["--async_commit_depth=8"], "no asynchronous commit"),
        ("rocksdb", &["--write_queues=2"], "write task queues"),
        ("fjall", &["--disable_wal=1"], "journal"),
        ("fjall", &["--compression_type=zstd"], "none and lz4"),
        ("rocksdb", &["--sync=1", "--disable_wal=1"], "without a WAL"),
        ("riptide", &["--compression_type=zstd"], "lz4 only"),
        ("fjall", &["--row_cache_size=1048576"], "no row cache"),
        ("fjall", &["--max_background_flushes=2"], "no such settings"),
        ("fjall", &["--level0_stop_writes_trigger=10"], "no such settings"),
        ("riptide", &["--max_write_buffer_number=3"], "RocksDB option"),
    ] {
        let out = bench(engine, &db, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{engine} {args:?} succeeded");
        assert!(stderr.contains(needle), "{engine} {args:?}: {stderr}");
        assert!(!db.exists(), "{engine} {args:?} touched the directory");
    }
}

#[test]
fn peers_run_synced_multithreaded_writes() {
    for engine in &ENGINES[1..] {
        let dir = tempfile::tempdir().unwrap();
        let out = bench(
            engine,
            &dir.path().join("db"),
            &[
                "--benchmarks=fillrandom,readseq",
                "--num=300",
                "--threads=4",
                "--sync=1",
                "--histogram=1",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{engine}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("sync: 1 (every write waits for"), "{stdout}");
        assert!(stdout.contains("Microseconds per write:\nCount: 1200 "), "{stdout}");
    }
}

/// xbench drives both transactional engines with byte-identical operations: one thread, the
/// same seed, so the same loads, updates and inserts leave the same contents, and every point
/// lookup and range lookup reads the same.
#[test]
fn xbench_transactions_agree_on_riptide_and_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for engine in ["riptide", "rocksdb"] {
        let dump = dir.path().join(format!("{engine}.dump"));
        let args = [
            "--benchmarks=xbench".to_string(),
            "--num=5000".to_string(),
            "--reads=3000".to_string(),
            "--threads=1".to_string(),
            "--key_size=12".to_string(),
            "--value_size=500".to_string(),
            "--mix=30:10:40:20".to_string(),
            "--range_size=5".to_string(),
            "--txn_queries=2".to_string(),
            "--zipf=0.9".to_string(),
            "--seed=3".to_string(),
            format!("--dump_file={}", dump.display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = bench(engine, &dir.path().join(engine), &args);
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{engine}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let queries = stdout
            .lines()
            .find(|l| l.starts_with("xbench queries:"))
            .unwrap()
            .to_string();
        runs.push((engine, queries, std::fs::read_to_string(&dump).unwrap()));
    }
    assert_eq!(runs[0].1, runs[1].1, "query counts, found and rows read");
    assert!(runs[0].2.lines().count() > 5000, "inserts added records");
    assert!(
        runs[0].2 == runs[1].2,
        "riptide and rocksdb contents differ after xbench"
    );
}
