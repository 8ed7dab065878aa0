//! `riptide stress`: random operations from several threads over several tables, checked
//! against an expected state kept in a file beside the database ([`expected`]), and a blackbox
//! crash mode that kills itself and checks recovery (after RocksDB's db_stress and
//! db_crashtest.py).
//!
//! - Keys are `k{n:08}` in tables `s0..s{tables-1}`; key `n` of every table belongs to thread
//!   `n % threads`, so each key has one writer and a thread knows exactly what its reads must
//!   return.
//! - A value names its table, key and version (`t/k/v/` then filler), so a wrong or stale value is
//!   recognised, not only a missing one.
//! - Operations: put, delete, a batch over several tables (one atomic write), get (must equal the
//!   expected state), a bounded scan (its own keys in range must match), a snapshot check (values
//!   read at a snapshot stay as they were while the thread overwrites them), flush, a range
//!   compaction, a transaction over several tables committed or rolled back ([`ops`]), and a
//!   step of the thread's scratch table's create / fill / drop cycle ([`ops`]).
//! - Every write goes through [`Worker::write`]: the expected state marks its keys pending (and,
//!   for several keys, records them as one atomic group) before the write and committed after
//!   the acknowledgement; in power-cut mode it also stamps the write's start and acknowledgement
//!   on a global clock ([`history::History`]).
//! - Every run starts by verifying the whole database against the expected state, resolving the
//!   writes that were in flight when the previous run died (the database holds either the old or
//!   the new version of such a key, and all or none of an atomic group's new versions; anything
//!   else is a failure), and ends the same way.
//! - `--crash_rounds=N` runs the workload as a child process N times, killing it with SIGKILL
//!   after a random time each round; each child verifies on start.
//! - `--power_cuts=N` ([`powercut`]) runs in process on the in-memory fault-injecting file system
//!   and cuts the power N times; `--crash_points` ([`whitebox`]) makes a child abort at each
//!   named crash point of the engine.
//! - A failure prints the seed, the thread and its last operations, and exits with status 1;
//!   a usage error (a flag, or a `--db` that does not fit) exits with status 2 ([`error`]).
//! - A run only touches a database that stress created with the expected state beside it, or
//!   one it is told to adopt with `--reuse` ([`owner`]).
//!
//! Files: [`args`] (flags), [`owner`] (which database is stress's; opening it), [`worker`] (one
//! thread's operations), [`ops`] (transactions and scratch tables), [`verify`] (whole-database
//! checks), [`crash`], [`powercut`], [`whitebox`] and [`corrupt`] (the modes), [`expected`]
//! (the expected-state file), [`error`]. This file holds the key and value formats and the
//! plain run.

mod args;
pub mod corrupt;
mod crash;
pub mod error;
pub mod expected;
mod history;
pub mod ops;
mod owner;
pub mod powercut;
mod verify;
pub mod whitebox;
mod worker;

pub use args::StressArgs;
pub(crate) use crash::child_command;
use error::StressError;
use expected::DELETED;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use verify::{open_tables, verify_all};
use worker::{fmt_counts, Worker};

fn key(n: u32) -> Vec<u8> {
    format!("k{n:08}").into_bytes()
}

fn value(table: u32, n: u32, version: u32, a: &StressArgs) -> Vec<u8> {
    let mut v = format!("{table}/{n}/{version}/").into_bytes();
    let span = a.value_max.saturating_sub(a.value_min) as u64 + 1;
    let len = a.value_min + (u64::from(version).wrapping_mul(0x9E37_79B9) % span) as usize;
    let mut x = u64::from(version) ^ (u64::from(n) << 32);
    while v.len() < len {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        v.push(b'a' + ((x >> 59) % 26) as u8);
    }
    v
}

/// The version a stored value names, checking that it belongs to `table`/`n`.
fn parse_value(table: u32, n: u32, v: &[u8]) -> Result<u32, String> {
    let s = String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned();
    let mut parts = s.splitn(4, '/');
    let (t, k, ver) = (parts.next(), parts.next(), parts.next());
    match (
        t.and_then(|x| x.parse::<u32>().ok()),
        k.and_then(|x| x.parse::<u32>().ok()),
        ver.and_then(|x| x.parse::<u32>().ok()),
    ) {
        (Some(t), Some(k), Some(ver)) if t == table && k == n => Ok(ver),
        _ => Err(format!("value {s:?} does not belong to table {table} key {n}")),
    }
}

/// What the database should show for a state word: `None` = absent, `Some(v)` = version v.
fn shown(state: u32) -> Option<u32> {
    (state != 0 && state & DELETED == 0).then_some(state)
}

/// Runs `riptide stress`; returns whether everything verified.
pub fn run(a: &StressArgs) -> Result<bool, StressError> {
    let mix = args::validate(a)?;
    let seed = if a.seed != 0 {
        a.seed
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    };
    if a.corrupt_sweep > 0 {
        return Ok(corrupt::run(a, seed)?);
    }
    if a.power_cuts > 0 {
        return Ok(powercut::run(a, &mix, seed)?);
    }
    if let Some(points) = a.crash_points.as_deref().filter(|_| !a.child) {
        return Ok(whitebox::run(a, points, seed)?);
    }
    if a.crash_rounds > 0 && !a.child {
        return Ok(crash::crash_driver(a, seed)?);
    }
    if let Some(parent) = a.db.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    let (db, exp) = owner::open(a)?;
    let tables = open_tables(&db, a.tables)?;
    if !a.child {
        println!(
            "riptide stress: seed {seed}, {} threads, {} tables x {} keys, {} s",
            a.threads, a.tables, a.keys, a.duration
        );
    }
    let resolved = verify_all(&db, &tables, &exp)?;
    println!(
        "VERIFIED {} keys ({resolved} in-flight writes resolved)",
        u64::from(a.tables) * u64::from(a.keys)
    );
    let failed = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let counts: [AtomicU64; 10] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(a.duration);
    std::thread::scope(|s| {
        for th in 0..a.threads {
            let (db, tables, exp, failed, ops, counts) = (&db, &tables, &exp, &failed, &ops, &counts);
            s.spawn(move || {
                let mut w = Worker::new(a, th, seed, db, tables, exp, None);
                while Instant::now() < deadline && !failed.load(Ordering::Relaxed) {
                    if let Err(e) = w.step(&mix) {
                        if !failed.swap(true, Ordering::SeqCst) {
                            eprintln!("riptide stress: FAILED (seed {seed}, thread {th}): {e}");
                            eprintln!("last operations of thread {th}, oldest first:");
                            for op in &w.recent {
                                eprintln!("  {op}");
                            }
                        }
                        return;
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                for (c, n) in counts.iter().zip(w.counts) {
                    c.fetch_add(n, Ordering::Relaxed);
                }
            });
        }
    });
    if failed.load(Ordering::SeqCst) {
        return Ok(false);
    }
    verify_all(&db, &tables, &exp)?;
    let caches = db.stats().caches;
    drop(tables);
    db.close().map_err(|e| format!("close: {e}"))?;
    println!(
        "DONE {} operations ({}), verified; {} partial block reads, block cache {} hits / {} misses, row cache {} hits",
        ops.load(Ordering::Relaxed),
        fmt_counts(&counts.each_ref().map(|c| c.load(Ordering::Relaxed))),
        caches.partial_block_reads,
        caches.block_cache.hits,
        caches.block_cache.misses,
        caches.row_cache.hits,
    );
    Ok(true)
}
