//! Crash test with a real process killed by SIGKILL, on the real file system.
//!
//! The test binary re-executes itself as a child (the ignored test `crash_child`, which does
//! nothing unless `RIPTIDE_CRASH_CHILD_DIR` is set). The child opens the database and writes
//! synced batches from several threads, mixing `write` and `write_async`; each batch puts keys
//! `b{id}-{j}` into two tables with the batch id in every value. It prints `START <id>` before
//! submitting a batch and `ACK <id>` once the batch is acknowledged. The parent kills it with
//! SIGKILL after a random 50–400 ms, reopens the database and checks that:
//! - every acknowledged batch, and every batch seen in an earlier round, is fully present;
//! - no batch is partially applied: a batch id found anywhere has all its keys in both tables,
//!   each with its exact value;
//! - no batch appears that was never started, or that the parent deleted in an earlier round.
//!
//! Then it deletes the batches of the round before, closes (with or without the redo rewrite,
//! or abandoning the instance) and starts the next round on the same directory, the child
//! resuming at a higher id range. `crash_stress` (ignored) runs 500 rounds:
//! `cargo test -p riptide --test crash -- --ignored crash_stress`. `RIPTIDE_CRASH_SEED` replays
//! a seed printed by a failure.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, Options, ReadOptions, Table, WriteBatch, WriteOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_DIR_ENV: &str = "RIPTIDE_CRASH_CHILD_DIR";
const CHILD_BASE_ENV: &str = "RIPTIDE_CRASH_CHILD_BASE";
const SEED_ENV: &str = "RIPTIDE_CRASH_SEED";
const TABLES: [&str; 2] = ["accounts", "ledger"];
const THREADS: u64 = 4;
/// Keys per batch in each table.
const KEYS: u64 = 3;
/// Ids of writer thread `t` in a round start at `base + t * THREAD_SPAN`.
const THREAD_SPAN: u64 = 100_000;
/// Ids of round `r` are `r * ROUND_SPAN ..`.
const ROUND_SPAN: u64 = 1_000_000;
/// A child not killed by then exits by itself.
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(10);

fn key(id: u64, j: u64) -> Vec<u8> {
    format!("b{id:016}-{j}").into_bytes()
}

fn parse_key(k: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(k).ok()?.strip_prefix('b')?;
    let (id, j) = s.split_once('-')?;
    Some((id.parse().ok()?, j.parse().ok()?))
}

/// The value of key `j` of batch `id` in `table`: names all three, padded to a length that
/// varies with the batch so records and segment rolls fall at varied offsets.
fn value(id: u64, j: u64, table: &str) -> Vec<u8> {
    let mut v = format!("{id}/{j}/{table}/").into_bytes();
    let pad = (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize; // 0..1024
    v.extend(std::iter::repeat_n(b'.', pad));
    v
}

fn options() -> Options {
    Options {
        // Small segments: the log rolls every few dozen batches, also while being killed.
        redo_segment_size: 64 << 10,
        // Small memtables, a tiny checkpoint threshold and an eager L0 trigger: flushes,
        // slog checkpoints and compactions run all the time, so kills land inside them.
        write_buffer_size: 64 << 10,
        slog_checkpoint_bytes: 4 << 10,
        level0_layer_trigger: 3,
        level0_extents_trigger: 2,
        level1_extents_trigger: 2,
        level1_dynamic_trigger: false,
        ..Default::default()
    }
}

fn batch(tables: &[Table], id: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    for j in 0..KEYS {
        for t in tables {
            b.put(t, &key(id, j), &value(id, j, t.name())).unwrap();
        }
    }
    b
}

/// One line to the parent, written and flushed whole.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // The parent may be gone; nothing to do about it then.
    let _ = out.write_fmt(format_args!("{line}\n"));
    let _ = out.flush();
}

/// The child process: does nothing unless started by `run_rounds`.
#[test]
#[ignore = "child process of the crash tests"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let base: u64 = std::env::var(CHILD_BASE_ENV).unwrap().parse().unwrap();
    // A watchdog, in case anything hangs: nothing may outlive the test.
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_TIME_LIMIT + Duration::from_secs(5));
        std::process::exit(3);
    });
    let deadline = Instant::now() + CHILD_TIME_LIMIT;
    // Start on a fresh line, whatever the test harness printed before.
    say(format_args!("\nOPENING"));
    let db = Db::open(&dir, options()).unwrap();
    let tables: Vec<Table> = TABLES.iter().map(|n| db.table(n).unwrap()).collect();
    say(format_args!("READY"));
    let sync = WriteOptions {
        sync: true,
        ..Default::default()
    };
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let (db, tables, sync) = (db.clone(), tables.clone(), sync.clone());
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(base + th);
                let mut next = base + th * THREAD_SPAN;
                while Instant::now() < deadline {
                    if rng.random_bool(0.5) {
                        let id = next;
                        next += 1;
                        say(format_args!("START {id}"));
                        db.write(batch(&tables, id), &sync).unwrap();
                        say(format_args!("ACK {id}"));
                    } else {
                        let n = rng.random_range(1..=4);
                        let mut handles = Vec::new();
                        for _ in 0..n {
                            let id = next;
                            next += 1;
                            say(format_args!("START {id}"));
                            handles.push((id, db.write_async(batch(&tables, id), &sync)));
                        }
                        for (id, h) in handles {
                            h.wait().unwrap();
                            say(format_args!("ACK {id}"));
                        }
                    }
                    // Keep the volume per round moderate on fast disks.
                    std::thread::sleep(Duration::from_micros(rng.random_range(0..200)));
                }
            });
        }
    });
    say(format_args!("DONE"));
}

/// What the child said before it died.
#[derive(Default)]
struct ChildOutput {
    started: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    ready: bool,
    other: Vec<String>,
}

fn read_child_stdout(stdout: impl Read) -> ChildOutput {
    let mut out = ChildOutput::default();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A line cut by the kill (no newline) says nothing.
        let Some(l) = line.strip_suffix('\n') else { break };
        if let Some(id) = l.strip_prefix("ACK ") {
            out.acked.insert(id.parse().expect("bad ACK line"));
        } else if let Some(id) = l.strip_prefix("START ") {
            out.started.insert(id.parse().expect("bad START line"));
        } else if l == "READY" {
            out.ready = true;
        } else if !l.is_empty() {
            out.other.push(l.to_string());
        }
    }
    out
}

/// How the parent leaves the database after checking it.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// `close()` with the default rewrite of the redo log into one superseding segment.
    CloseRewrite,
    /// `close()` without the rewrite: the child sees a multi-segment log.
    CloseNoRewrite,
    /// Abandoned without closing, as a crash of the parent would.
    Abandon,
}

/// The state the parent carries from round to round.
struct Model {
    /// Batch ids that must be present: acknowledged or seen present, and not deleted.
    must_have: BTreeSet<u64>,
}

/// Reopens the database after round `round` and checks it against `model` and what the child
/// said; then deletes the batches of the round before and leaves the database as `leave` says.
fn check_round(dir: &Path, round: u64, child: &ChildOutput, model: &mut Model, leave: Leave) -> Result<(), String> {
    let opts = Options {
        flush_on_close: matches!(leave, Leave::CloseRewrite),
        ..options()
    };
    let db = Db::open(dir, opts).map_err(|e| format!("reopen failed: {e}"))?;
    let tables: Vec<Table> = TABLES
        .iter()
        .map(|n| db.table(n).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    // id -> keys present, per table.
    let mut present: Vec<BTreeMap<u64, BTreeSet<u64>>> = Vec::new();
    for t in &tables {
        let mut ids: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for item in t.iter(&ReadOptions::default()).map_err(|e| e.to_string())? {
            let (k, v) = item.map_err(|e| e.to_string())?;
            let (id, j) = parse_key(&k).ok_or_else(|| format!("table {}: unexpected key {k:?}", t.name()))?;
            if v != value(id, j, t.name()) {
                return Err(format!(
                    "table {}: key {} has a wrong value",
                    t.name(),
                    String::from_utf8_lossy(&k)
                ));
            }
            ids.entry(id).or_default().insert(j);
        }
        present.push(ids);
    }
    let full: BTreeSet<u64> = (0..KEYS).collect();
    let all_ids: BTreeSet<u64> = present.iter().flat_map(|m| m.keys().copied()).collect();
    for &id in &all_ids {
        for (t, ids) in TABLES.iter().zip(&present) {
            if ids.get(&id) != Some(&full) {
                return Err(format!(
                    "batch {id} is partially applied: table {t} has keys {:?} of {full:?} (acked: {})",
                    ids.get(&id),
                    child.acked.contains(&id)
                ));
            }
        }
        if !model.must_have.contains(&id) && !child.started.contains(&id) {
            return Err(format!(
                "batch {id} is present but was never written in this round, or was deleted"
            ));
        }
    }
    let lost: Vec<&u64> = model.must_have.difference(&all_ids).collect();
    if !lost.is_empty() {
        return Err(format!(
            "{} batches from earlier rounds lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    let lost: Vec<&u64> = child.acked.difference(&all_ids).collect();
    if !lost.is_empty() {
        return Err(format!(
            "{} acknowledged batches lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    // Delete the batches of earlier rounds; they must never come back.
    let old: Vec<u64> = all_ids.iter().copied().filter(|&id| id < round * ROUND_SPAN).collect();
    for chunk in old.chunks(500) {
        let mut b = WriteBatch::new();
        for &id in chunk {
            for j in 0..KEYS {
                for t in &tables {
                    b.delete(t, &key(id, j)).map_err(|e| e.to_string())?;
                }
            }
        }
        let sync = WriteOptions {
            sync: true,
            ..Default::default()
        };
        db.write(b, &sync).map_err(|e| format!("deleting old batches: {e}"))?;
    }
    model.must_have = all_ids.into_iter().filter(|&id| id >= round * ROUND_SPAN).collect();
    // No extent leaked by the killed flushes and compactions: every slot in use belongs to
    // the current metadata, and every checksum verifies.
    db.wait_for_background_work().map_err(|e| e.to_string())?;
    let live: usize = tables
        .iter()
        .map(|t| t.level_info().extents.iter().sum::<usize>())
        .sum();
    let stats = db.stats();
    if stats.space_used_slots as usize != live {
        return Err(format!(
            "{} slots in use but {live} live extents",
            stats.space_used_slots
        ));
    }
    drop(tables);
    match leave {
        Leave::CloseRewrite | Leave::CloseNoRewrite => db.close().map_err(|e| format!("close failed: {e}"))?,
        Leave::Abandon => db.abandon_for_test(),
    }
    let report = riptide::inspect::verify(riptide::inspect::posix().as_ref(), dir).map_err(|e| e.to_string())?;
    if !report.ok() {
        return Err(format!("inspect verify after round {round}: {:?}", report.problems));
    }
    Ok(())
}

/// Statistics of a run, for the log.
#[derive(Default, Debug)]
struct Totals {
    started: usize,
    acked: usize,
    in_flight_kept: usize,
    killed_before_ready: usize,
}

fn run_rounds(rounds: u64) {
    let seed = match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().expect("RIPTIDE_CRASH_SEED must be a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    // Kept on failure for inspection; removed at the end of a successful run.
    let root = tempfile::tempdir().unwrap().keep();
    let dir = root.join("db");
    {
        let db = Db::open(&dir, options()).unwrap();
        for t in TABLES {
            db.create_table(t).unwrap();
        }
        db.close().unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let mut model = Model {
        must_have: BTreeSet::new(),
    };
    let mut totals = Totals::default();
    let started = Instant::now();
    for round in 1..=rounds {
        let base = round * ROUND_SPAN;
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, &dir)
            .env(CHILD_BASE_ENV, base.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the child");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out_reader = std::thread::spawn(move || read_child_stdout(stdout));
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let delay = Duration::from_millis(rng.random_range(50..=400));
        std::thread::sleep(delay);
        let exited = child.try_wait().unwrap();
        if exited.is_none() {
            child.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix
        }
        let status = child.wait().unwrap();
        let out = out_reader.join().unwrap();
        let err = err_reader.join().unwrap();
        let fail = |what: String| -> ! {
            panic!(
                "crash test failed in round {round} (seed {seed}, killed after {delay:?}, child status {status:?}) \
                 on directory {} (kept): {what}\nchild stdout (other lines): {:?}\nchild stderr:\n{err}",
                dir.display(),
                out.other
            );
        };
        if let Some(st) = exited {
            fail(format!("the child exited by itself ({st}) before the kill"));
        }
        if !out.ready {
            totals.killed_before_ready += 1;
        }
        totals.started += out.started.len();
        totals.acked += out.acked.len();
        if let Some(bad) = out.acked.difference(&out.started).next() {
            fail(format!(
                "batch {bad} acknowledged but never started: the test's output parsing is broken"
            ));
        }
        let leave = match rng.random_range(0..3) {
            0 => Leave::CloseRewrite,
            1 => Leave::CloseNoRewrite,
            _ => Leave::Abandon,
        };
        if let Err(what) = check_round(&dir, round, &out, &mut model, leave) {
            fail(what);
        }
        // Batches of this round that were in flight at the kill and made it anyway.
        totals.in_flight_kept += model.must_have.len() - out.acked.len();
    }
    eprintln!(
        "crash test: {rounds} rounds in {:?} (seed {seed}): {totals:?}, {} batches live at the end",
        started.elapsed(),
        model.must_have.len()
    );
    assert!(
        totals.acked > 0,
        "no batch was ever acknowledged: the child never got to write"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn crash_recovery_with_sigkill() {
    run_rounds(25);
}

#[test]
#[ignore = "stress: 500 rounds, several minutes"]
fn crash_stress() {
    run_rounds(500);
}
