//! `riptide bench`: a db_bench-compatible benchmark driver for Riptide.
//!
//! [`run`] validates the flags, prints the header, prepares the database directory, then runs
//! each benchmark of `--benchmarks` in order on one database directory and prints db_bench's
//! result line for it (plus the histogram, the write-path line and readwhilewriting's writer
//! line), then closes the database cleanly and prints the peak RSS.
//!
//! Modules: [`flags`] (command line), [`keys`] (keys, values, RNG), [`workload`] (one thread's
//! loop), [`runner`] (threads, progress, watchdog), [`stats`] (measurements), [`report`] (text).
//!
//! Directory rules: with `--use_existing_db=0` the directory is wiped first, and again before
//! each fillseq/fillrandom that follows a write benchmark (db_bench's `fresh_db`); a directory
//! is only wiped if it is empty or holds a Riptide `CATALOG` file.

pub mod error;
pub mod flags;
pub mod keys;
pub mod report;
pub mod runner;
pub mod stats;
pub mod workload;

use error::BenchError;
use flags::{BenchFlags, Config};
use keys::ValueSource;
use riptide::Db;
use runner::SeedCounter;
use std::path::Path;
use std::time::Instant;

/// Runs `riptide bench` with the given flags, printing to stdout (progress and interval stats
/// go to stderr). `bare` = no flag was given at all: run the default workload
/// ([`BenchFlags::apply_default_workload`]).
pub fn run(flags: &BenchFlags, bare: bool) -> Result<(), BenchError> {
    let mut flags = flags.clone();
    if bare {
        flags.apply_default_workload();
    }
    let mut cfg = Config::from_flags(&flags)?;
    cfg.default_workload = bare;
    print!("{}", report::header(&cfg));
    if !cfg.use_existing_db {
        wipe_dir(&cfg.db)?;
    }
    let mut db = open(&cfg)?;
    // True while the open database holds nothing this run wrote (so a fill need not wipe it).
    let mut pristine = !cfg.use_existing_db;
    let values = ValueSource::new(cfg.seed, cfg.value_size);
    let mut seeds = SeedCounter::default();
    for &bench in &cfg.benchmarks {
        if bench.fresh_db() {
            if cfg.use_existing_db {
                println!("{:<12} : skipped (--use_existing_db is true)", bench.name());
                continue;
            }
            if !pristine {
                db.close().map_err(|e| BenchError::engine("closing the database", e))?;
                wipe_dir(&cfg.db)?;
                db = open(&cfg)?;
                pristine = true;
            }
        }
        let table = db.default_table();
        println!("DB path: [{}]", cfg.db.display());
        let before = db.write_stats();
        let outcome = runner::run(bench, &cfg, &db, &table, &values, &mut seeds)?;
        println!("{}", report::result_line(bench.name(), &outcome.result));
        if let Some(h) = &outcome.result.hist {
            println!("{}", report::histogram_block(bench.op_name(), h));
        }
        if let Some(w) = &outcome.writer {
            println!("{}", report::background_writer_line(w));
        }
        if bench.writes() {
            pristine = false;
            let delta = report::write_stats_delta(&before, &db.write_stats());
            println!("{}", report::write_path_line(&delta));
        }
    }
    let t = Instant::now();
    db.close().map_err(|e| BenchError::engine("closing the database", e))?;
    println!("Closed the database in {:.3} seconds", t.elapsed().as_secs_f64());
    println!("{}", report::peak_rss_line());
    Ok(())
}

fn open(cfg: &Config) -> Result<Db, BenchError> {
    Db::open(&cfg.db, cfg.options.clone())
        .map_err(|e| BenchError::engine(format!("opening the database in {}", cfg.db.display()), e))
}

/// Removes `dir` if it is missing, empty or a Riptide database; refuses anything else.
pub fn wipe_dir(dir: &Path) -> Result<(), BenchError> {
    let io = |what: &str, e| BenchError::Io {
        context: format!("{what} {}", dir.display()),
        source: e,
    };
    let mut entries = match std::fs::read_dir(dir) {
        Ok(it) => it,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("reading", e)),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if !dir.join("CATALOG").is_file() {
        return Err(BenchError::NotADatabase(dir.to_path_buf()));
    }
    std::fs::remove_dir_all(dir).map_err(|e| io("wiping", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wipe_only_touches_riptide_databases() {
        let tmp = std::env::temp_dir().join(format!("riptide-cli-wipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        // Missing: fine.
        wipe_dir(&tmp).unwrap();
        // Empty: fine, and kept.
        std::fs::create_dir_all(&tmp).unwrap();
        wipe_dir(&tmp).unwrap();
        // Foreign content: refused, untouched.
        std::fs::write(tmp.join("precious.txt"), b"x").unwrap();
        assert!(matches!(wipe_dir(&tmp), Err(BenchError::NotADatabase(_))));
        assert!(tmp.join("precious.txt").exists());
        // A Riptide database: wiped.
        std::fs::remove_file(tmp.join("precious.txt")).unwrap();
        let db = Db::open(&tmp, riptide::Options::default()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        db.close().unwrap();
        wipe_dir(&tmp).unwrap();
        assert!(!tmp.exists());
    }
}
