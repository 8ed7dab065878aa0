//! The command line of `riptide stress` ([`StressArgs`]), its checks ([`validate`]), the
//! operation mix it parses ([`parse_mix`]) and the engine [`Options`] it maps to ([`options`]).
//!
//! Invariants: a value refused here is a usage error (exit status 2) and is refused before any
//! file is touched; the mix always has some writes; `--tiny` (whitebox children) wins over
//! `--small`.

use super::error::StressError;
use super::expected::MAX_THREADS;
use clap::Args;
use riptide::Options;
use std::path::PathBuf;

/// `riptide stress` flags.
#[derive(Args, Debug, Clone)]
#[command(
    about = "Random operations checked against an expected state; --crash_rounds kills and recovers",
    rename_all = "snake_case"
)]
pub struct StressArgs {
    /// Database directory (the expected state is `<db>.expected`; it is reset when the directory
    /// does not exist)
    #[arg(long, default_value = "./stress-data/db")]
    pub db: PathBuf,
    /// Seconds per run (per round with --crash_rounds: the child's limit if not killed first)
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Worker threads
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Tables (sub-tables)
    #[arg(long, default_value_t = 3)]
    pub tables: u32,
    /// Keys per table
    #[arg(long, default_value_t = 10_000)]
    pub keys: u32,
    /// Smallest value in bytes
    #[arg(long, default_value_t = 8)]
    pub value_min: usize,
    /// Largest value in bytes
    #[arg(long, default_value_t = 200)]
    pub value_max: usize,
    /// Operation mix, weights: put,delete,batch,get,scan,snapshot,flush,compact,txn,table_ddl
    /// (8 weights as before are accepted too: then no transactions and no table create/drop)
    #[arg(long, default_value = "40,10,15,20,5,5,1,1,5,1")]
    pub mix: String,
    /// Seed (0 = from the clock); printed so a failure can be replayed
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sync every write (fdatasync of the redo log before acknowledging): --sync=true
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub sync: bool,
    /// Small memtables and triggers so flushes and every compaction kind run all the time
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub small: bool,
    /// Row cache bytes (0 = off). Small by default, so cached rows, tombstones and absences
    /// are replaced by flushes and evicted all the time while the checks read through them
    #[arg(long, default_value_t = 256 << 10)]
    pub row_cache_size: usize,
    /// Block cache bytes (0 = off). Small by default (64 KiB), so it evicts and most point lookups that
    /// miss it read only a block's tail and one restart region (partial block reads)
    #[arg(long, default_value_t = 64 << 10)]
    pub block_cache_size: usize,
    /// Blackbox crash mode: this many rounds of run-and-SIGKILL in a child process
    #[arg(long, default_value_t = 0)]
    pub crash_rounds: u32,
    /// Crash mode: kill after a random time between these (milliseconds)
    #[arg(long, default_value_t = 200)]
    pub kill_min_ms: u64,
    #[arg(long, default_value_t = 3000)]
    pub kill_max_ms: u64,
    /// Power-cut mode: this many power cuts on the in-memory fault-injecting file system,
    /// each followed by recovery and verification (the database lives in memory; --db only
    /// names it)
    #[arg(long, default_value_t = 0)]
    pub power_cuts: u32,
    /// Power-cut mode: cut after a random time between these (milliseconds) of writing
    #[arg(long, default_value_t = 20)]
    pub cut_min_ms: u64,
    #[arg(long, default_value_t = 300)]
    pub cut_max_ms: u64,
    /// Whitebox mode: `all` or a comma-separated list of crash points
    /// (riptide::failpoint::POINTS); each runs in a child that aborts there, then the database
    /// is recovered and verified. Needs a binary built with `--features failpoints`
    #[arg(long)]
    pub crash_points: Option<String>,
    /// Corruption sweep: build a fresh database at --db, then this many rounds of flipped bytes
    /// in every file kind, each opened and read in full (see stress/corrupt.rs)
    #[arg(long, default_value_t = 0)]
    pub corrupt_sweep: u32,
    /// Run on a database that stress did not create (no `<db>.expected` beside it), or whose
    /// expected state was made for another database; without it such a `--db` is refused
    #[arg(long, default_value_t = false)]
    pub reuse: bool,
    /// The object tier: --object_store, --object_endpoint, --l2_tier, ...
    #[command(flatten)]
    pub objects: crate::objects::ObjectArgs,
    /// Internal: run as the crash driver's child
    #[arg(long, hide = true, default_value_t = false)]
    pub child: bool,
    /// Internal: tiny memtables and triggers (whitebox children), so every path runs soon
    #[arg(long, hide = true, default_value_t = false)]
    pub tiny: bool,
}

pub(super) const OPS: [&str; 10] = [
    "put",
    "delete",
    "batch",
    "get",
    "scan",
    "snapshot",
    "flush",
    "compact",
    "txn",
    "table_ddl",
];
/// Index of the transaction op in the mix.
pub(super) const OP_TXN: usize = 8;

/// The weights of `--mix`: 10, or 8 (the mix before transactions and table create/drop, which
/// then get weight 0).
pub(super) fn parse_mix(s: &str) -> Result<[u32; 10], String> {
    let mut w: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("--mix={s}: expected 8 or 10 weights separated by commas"))?;
    if w.len() == 8 {
        w.extend([0, 0]);
    }
    let w: [u32; 10] = w
        .try_into()
        .map_err(|_| format!("--mix={s}: expected 8 or 10 weights ({})", OPS.join(",")))?;
    if w[..3].iter().all(|&x| x == 0) && w[OP_TXN] == 0 {
        return Err(format!("--mix={s}: needs some writes (put, delete, batch or txn)"));
    }
    if w.iter().map(|&x| u64::from(x)).sum::<u64>() > u64::from(u32::MAX) {
        return Err(format!("--mix={s}: weights too large"));
    }
    Ok(w)
}

pub(super) fn options(a: &StressArgs) -> Result<Options, StressError> {
    let mut o = Options {
        row_cache_size: a.row_cache_size,
        block_cache_size: a.block_cache_size,
        ..Options::default()
    };
    if a.tiny {
        // The whitebox crash test's settings: flushes, every compaction kind and slog
        // checkpoints all the time.
        o.write_buffer_size = 64 << 10;
        o.redo_segment_size = 256 << 10;
        o.slog_checkpoint_bytes = 8 << 10;
        o.level0_layer_trigger = 3;
        o.level0_extents_trigger = 3;
        o.level1_extents_trigger = 3;
        o.level1_dynamic_trigger = false;
        o.extents_per_file = 64;
    } else if a.small {
        o.write_buffer_size = 256 << 10;
        o.slog_checkpoint_bytes = 64 << 10;
        o.level0_layer_trigger = 3;
        o.level0_extents_trigger = 4;
        o.level1_extents_trigger = 4;
        o.level1_dynamic_trigger = false;
        o.redo_segment_size = 1 << 20;
    }
    a.objects.apply(&mut o).map_err(StressError::Usage)?;
    Ok(o)
}

/// Checks the flags that clap cannot; returns the parsed mix.
pub fn validate(a: &StressArgs) -> Result<[u32; 10], StressError> {
    let mix = parse_mix(&a.mix).map_err(StressError::Usage)?;
    if a.threads == 0 || a.tables == 0 || a.keys == 0 || a.value_min > a.value_max || a.value_max > 1 << 20 {
        return Err(StressError::Usage(
            "need --threads, --tables, --keys > 0 and --value_min <= --value_max <= 1 MiB".into(),
        ));
    }
    if u64::from(a.tables) * u64::from(a.keys) > 1 << 28 || a.threads > MAX_THREADS || a.duration > 1 << 30 {
        return Err(StressError::Usage(
            "--tables x --keys must be at most 2^28, --threads at most 1024, --duration at most 2^30 s".into(),
        ));
    }
    let modes = [
        a.crash_rounds > 0,
        a.power_cuts > 0,
        a.crash_points.is_some(),
        a.corrupt_sweep > 0,
    ];
    if !a.child && modes.iter().filter(|&&m| m).count() > 1 {
        return Err(StressError::Usage(
            "choose one of --crash_rounds, --power_cuts, --crash_points and --corrupt_sweep".into(),
        ));
    }
    if a.corrupt_sweep > 0 && !a.child {
        if a.db.exists() {
            return Err(StressError::Usage(format!(
                "--corrupt_sweep builds a fresh database: {} already exists (remove it or pick another --db)",
                a.db.display()
            )));
        }
        if a.keys < 50 || a.keys > 200_000 || a.tables > 16 {
            return Err(StressError::Usage(
                "--corrupt_sweep needs 50 <= --keys <= 200000 and --tables <= 16".into(),
            ));
        }
    }
    if a.crash_points.is_some() && !a.child && !riptide::failpoint::ENABLED {
        return Err(StressError::Usage(
            "--crash_points needs the engine's crash points, and this riptide was built without them: \
             build it with `cargo build --release -p riptide-cli --features failpoints`"
                .into(),
        ));
    }
    Ok(mix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_takes_eight_or_ten_weights() {
        assert_eq!(parse_mix("1,0,0,0,0,0,0,0").unwrap(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse_mix("0,0,0,1,0,0,0,0,1,1").unwrap()[OP_TXN], 1);
        assert!(parse_mix("0,0,0,1,0,0,0,0").is_err());
        assert!(parse_mix("1,2,3").is_err());
    }
}
