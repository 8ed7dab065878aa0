//! `riptide bench`: a db_bench-compatible benchmark driver for Riptide and its peers.
//!
//! [`run`] validates the flags, prints the header, prepares the database directory, opens the
//! engine of `--engine` and prints its options, then runs each benchmark of `--benchmarks` in
//! order on one database directory and prints db_bench's result line for it (plus the histogram,
//! the write-path line and readwhilewriting's writer line; meta operations such as `flush` run
//! on this thread, see [`run_meta`]), then prints the engine's statistics and the database's
//! size on disk, closes the database cleanly, prints the size again and the peak RSS.
//!
//! Modules: [`flags`] (command line and its parsed settings), [`dbdir`] (wiping under the lock), [`engine`] (the adapter trait and one adapter per engine),
//! [`keys`] (keys, values, RNG), [`compact_reuse`] (seed 000 Fig. 16), [`hotkey`] (old-snapshot reads of a
//! hot key), [`xbench`] (transactions: xbench and tsunami), [`workload`] (one thread's loop), [`runner`] (threads,
//! progress, watchdog), [`stats`] (measurements), [`cpu`] (the process's CPU use per benchmark), [`report`] (text), [`dump`] (`--dump_file`).
//!
//! Directory rules: with `--use_existing_db=0` the directory is wiped first, and again before
//! each fillseq/fillrandom that follows a write benchmark (db_bench's `fresh_db`); a directory
//! is only wiped if it is empty or holds a database of one of the engines, and never while
//! another process has that database open ([`dbdir::wipe_dir`]).
//!
//! Layering (no module imports one above it): [`error`], [`keys`], [`stats`], [`cpu`] and [`flags`]
//! at the bottom; [`dbdir`] and the adapters in [`engine`] on them; then [`report`], [`workload`]
//! and [`runner`]; the workloads with their own drivers ([`compact_reuse`], [`hotkey`],
//! [`xbench`], [`dump`]) on top, and this file, which ties them together.

pub mod compact_reuse;
pub mod cpu;
pub mod dbdir;
pub mod dump;
pub mod engine;
pub mod error;
pub mod flags;
pub mod hotkey;
pub mod keys;
pub mod profile;
pub mod report;
pub mod runner;
pub mod stats;
pub mod workload;
pub mod xbench;

use dbdir::wipe_dir;
use engine::{BenchEngine, EngineKind, RunTotals};
use error::BenchError;
use flags::{BenchFlags, Benchmark, Config};
use keys::ValueSource;
use runner::SeedCounter;
use stats::Merged;
use std::time::{Duration, Instant};

/// Runs `riptide bench` with the given flags, printing to stdout (progress and interval stats
/// go to stderr). `bare` = no flag was given at all: run the default workload
/// ([`BenchFlags::apply_default_workload`]).
pub fn run(flags: &BenchFlags, bare: bool) -> Result<(), BenchError> {
    let mut flags = flags.clone();
    if bare {
        flags.apply_default_workload();
    }
    let mut cfg = Config::from_flags(&flags)?;
    // Flags the chosen engine cannot honour are refused here, before the directory is touched.
    engine::check(&cfg)?;
    cfg.default_workload = bare;
    match cfg.engine {
        EngineKind::Riptide => run_on::<engine::riptide::RiptideEngine>(&cfg),
        #[cfg(feature = "bench-rocksdb")]
        EngineKind::RocksDb => run_on::<engine::rocksdb::RocksDbEngine>(&cfg),
        #[cfg(feature = "bench-fjall")]
        EngineKind::Fjall => run_on::<engine::fjall::FjallEngine>(&cfg),
        #[allow(unreachable_patterns)]
        other => Err(engine::not_built(other)),
    }
}

/// The whole run on engine `E`.
fn run_on<E: BenchEngine>(cfg: &Config) -> Result<(), BenchError> {
    print!("{}", report::header(cfg));
    if !cfg.use_existing_db {
        wipe_dir(&cfg.db)?;
    }
    let mut db = E::open(cfg)?;
    print!("{}", report::engine_block(&db.describe(cfg)));
    println!("{}", report::HEADER_RULE);
    // True while the open database holds nothing this run wrote (so a fill need not wipe it).
    let mut pristine = !cfg.use_existing_db;
    let mut totals = RunTotals::default();
    let values = ValueSource::new(cfg.value_size, cfg.compression_ratio);
    let mut seeds = SeedCounter::default();
    for &bench in &cfg.benchmarks {
        if bench == Benchmark::CompactReuse {
            if cfg.use_existing_db {
                println!("{:<12} : skipped (--use_existing_db is true)", bench.name());
                continue;
            }
            db = compact_reuse::run(cfg, db, &values)?;
            pristine = false;
            totals = RunTotals::default();
            continue;
        }
        if bench == Benchmark::HotKeySnapshot {
            println!("DB path: [{}]", cfg.db.display());
            hotkey::run(cfg, &db, &values)?;
            pristine = false;
            continue;
        }
        if matches!(bench, Benchmark::XBench | Benchmark::Tsunami) {
            db = xbench::run(cfg, bench, db, &values, pristine, &mut seeds)?;
            pristine = false;
            totals = RunTotals::default();
            continue;
        }
        if bench.fresh_db() {
            if cfg.use_existing_db {
                println!("{:<12} : skipped (--use_existing_db is true)", bench.name());
                continue;
            }
            if !pristine {
                db.close().map_err(|e| BenchError::engine("closing the database", e))?;
                wipe_dir(&cfg.db)?;
                db = E::open(cfg)?;
                pristine = true;
                totals = RunTotals::default();
            }
        }
        if bench.is_meta() {
            run_meta(bench, &db, &totals)?;
            continue;
        }
        println!("DB path: [{}]", cfg.db.display());
        let before = db.profile();
        let (outcome, cpu_use) = cpu::measure(|| runner::run(bench, cfg, &db, &values, &mut seeds));
        let outcome = outcome?;
        let line = report::result_line(bench.name(), &outcome.result);
        // db_bench ends readrandom's "(X of Y found)" with a newline, multireadrandom's not; the
        // CPU line goes right under the result line, before that blank line.
        println!("{}", line.trim_end());
        if let Some(c) = &cpu_use {
            println!("{}", cpu::line(bench.name(), c));
        }
        if line.ends_with('\n') && bench != Benchmark::MultiReadRandom {
            println!();
        }
        if let Some(h) = &outcome.result.hist {
            println!("{}", report::histogram_block(bench.op_name(), h));
        }
        if let Some(w) = &outcome.writer {
            println!("{}", report::background_writer_line(w));
            totals.user_bytes_written += w.bytes;
        }
        if bench.writes() {
            pristine = false;
            // Readers' bytes are reads; a writer of readwhilewriting was counted above.
            if bench != Benchmark::ReadWhileWriting {
                totals.user_bytes_written += outcome.result.bytes;
            }
            if let (Some(before), Some(after)) = (before, db.profile()) {
                println!("{}", report::write_path_line(&after.write_since(&before)));
                for line in after.lines_since(&before) {
                    println!("{line}");
                }
            }
        }
    }
    if let Some(path) = &cfg.dump_file {
        let entries = dump::dump(&db, cfg, path)?;
        println!(
            "Dump: {entries} entries written to {} (forward scan = backward scan = point reads)",
            path.display()
        );
    }
    // xbench and tsunami print the statistics of the database they ran on; if one ran last, the
    // database reopened after it has nothing new to say.
    let stats_printed = matches!(cfg.benchmarks.last(), Some(Benchmark::XBench | Benchmark::Tsunami));
    if !stats_printed {
        for line in db.end_of_run_stats(&totals) {
            println!("{line}");
        }
    }
    println!("{}", report::disk_usage_line("DB size on disk", &cfg.db));
    let t = Instant::now();
    db.close().map_err(|e| BenchError::engine("closing the database", e))?;
    println!("Closed the database in {:.3} seconds", t.elapsed().as_secs_f64());
    println!("{}", report::disk_usage_line("DB size on disk after close", &cfg.db));
    println!("{}", report::peak_rss_line());
    Ok(())
}

/// Runs a meta operation on this thread: flush, compact and waitforcompaction print a db_bench
/// result line (1 operation, its time; MB/s = bytes written to data files, where the engine
/// tells), stats and levelstats print the engine's report.
fn run_meta<E: BenchEngine>(bench: Benchmark, db: &E, totals: &RunTotals) -> Result<(), BenchError> {
    let fail = |e| BenchError::engine(format!("{} failed", bench.name()), e);
    let timed = |f: &dyn Fn() -> Result<Option<u64>, engine::EngineError>| -> Result<(), BenchError> {
        let start = Instant::now();
        let bytes = f().map_err(fail)?;
        let elapsed = start.elapsed();
        println!("{}", report::result_line(bench.name(), &meta_result(elapsed, bytes)));
        Ok(())
    };
    match bench {
        Benchmark::Flush => timed(&|| db.flush()),
        Benchmark::Compact => timed(&|| db.compact()),
        Benchmark::WaitForCompaction => timed(&|| db.wait_for_background_work().map(|()| None)),
        Benchmark::Stats => {
            println!("\n{}", db.stats_report(totals).map_err(fail)?);
            Ok(())
        }
        Benchmark::LevelStats => {
            println!("\n{}", db.level_stats_report().map_err(fail)?);
            Ok(())
        }
        other => Err(BenchError::Usage(format!("{} is not a meta operation", other.name()))),
    }
}

/// The result of a meta operation: one op taking `elapsed`, moving `bytes` if known.
fn meta_result(elapsed: Duration, bytes: Option<u64>) -> Merged {
    Merged {
        done: 1,
        bytes: bytes.unwrap_or(0),
        found: 0,
        lookups: 0,
        elapsed,
        thread_seconds: elapsed.as_secs_f64(),
        hist: None,
    }
}
