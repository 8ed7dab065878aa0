//! The `riptide` command: `riptide bench` (db_bench-compatible benchmarks), `riptide inspect`
//! (levels, extents, slog, redo log, checksum verification), `riptide stress` (random
//! operations against an expected state, with a blackbox crash mode), `riptide serve` (the
//! MySQL-protocol server), `riptide checkpoint` and `riptide backup` (copies and backups),
//! `riptide compact` (a full manual compaction), `riptide cluster` (a replicated partition's
//! members).
//!
//! Exit status, the same for every subcommand: 0 on success; 1 when the run failed (a runtime
//! error, a failed verification, damage found by `inspect verify`); 2 for a usage error, both
//! clap's own parse errors and a flag value the tool refuses after parsing.

mod backup;
mod bench;
mod cluster;
mod compact;
mod inspect;
mod objects;
mod router;
mod serve;
mod stress;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The binary's allocator (feature `mimalloc`, default): per-thread free lists instead of
/// glibc's locked arenas. A library choice for the `riptide` binary only; an application that
/// embeds the engine brings its own.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status of a run that failed (usage errors exit 2, as clap's do).
const RUNTIME_ERROR: u8 = 1;

/// Riptide: a tiered LSM-tree storage engine after Alibaba's X-Engine.
#[derive(Parser, Debug)]
#[command(name = "riptide", version, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Backups: create, list, verify, restore (incremental, in an object store or a directory)
    Backup(backup::BackupArgs),
    Bench(Box<bench::flags::BenchFlags>),
    /// Makes a consistent, openable copy of a database in another directory
    Checkpoint(Box<backup::CheckpointArgs>),
    Cluster(Box<cluster::ClusterArgs>),
    /// Compacts a closed database fully into its bottom level (RocksDB's `ldb compact`)
    Compact(Box<compact::CompactArgs>),
    Inspect(inspect::InspectArgs),
    /// Routes MySQL clients' statements to the partitions that hold their rows
    Router(Box<router::RouterArgs>),
    Serve(Box<serve::ServeArgs>),
    Stress(Box<stress::StressArgs>),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`riptide bench | head`) like db_bench, instead of panicking
    // in println!.
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // `riptide bench` and nothing else: the default workload (README's main job).
    let bare = std::env::args_os().len() == 2;
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(flags) => match bench::run(&flags, bare) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide bench: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Stress(args) => match stress::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(RUNTIME_ERROR),
            Err(e) => {
                eprintln!("riptide stress: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Serve(args) => match serve::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide serve: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Router(args) => match router::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide router: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Cluster(args) => match cluster::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide cluster: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Checkpoint(args) => match backup::checkpoint(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide checkpoint: error: {e}");
                ExitCode::from(RUNTIME_ERROR)
            }
        },
        Command::Compact(args) => match compact::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide compact: error: {e}");
                ExitCode::from(RUNTIME_ERROR)
            }
        },
        Command::Backup(args) => match backup::backup(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("riptide backup: error: {e}");
                ExitCode::from(RUNTIME_ERROR)
            }
        },
        Command::Inspect(args) => match inspect::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(RUNTIME_ERROR),
            Err(e) => {
                eprintln!("riptide inspect: error: {e}");
                ExitCode::from(RUNTIME_ERROR)
            }
        },
    }
}
