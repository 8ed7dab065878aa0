//! Whitebox crash test: the process dies at each named crash point of the flush, compaction
//! and checkpoint paths (`riptide::failpoint::POINTS`), then the database is reopened and
//! checked against an exact model. Built only with `--features failpoints`.
//!
//! The test binary re-executes itself as a child (the ignored test `crash_points_child`, inert
//! unless `RIPTIDE_CRASH_POINTS_DIR` is set) with `RIPTIDE_CRASH_AT=<point>@<n>`. The child
//! runs a deterministic operation log on one table — op `i` is a put or a delete (60 %) of a key
//! drawn from a seeded RNG — and prints `ACK i` once op `i` returned. Tiny memtables and
//! triggers make flushes, every compaction kind and slog checkpoints run all the time; the
//! child also holds snapshots for a while (so tombstones survive into L2 and self-major
//! compactions have delete-heavy extents to rewrite) and runs a manual full
//! compaction and a range compaction now and then (the manual kinds). At the point the child
//! prints `CRASHPOINT <point>` and aborts: no unwinding, nothing written after.
//!
//! The parent then requires that the child died at exactly that point, reopens the database
//! and checks that its contents equal the model after the last acknowledged op, or after the
//! one op that may have been in flight (a process crash keeps what reached the OS, so with one
//! writer the state is one of those two); that no extent slot is leaked; and that
//! `inspect verify` finds nothing wrong. Then it writes a few more ops, closes and checks
//! again. `RIPTIDE_CRASH_POINTS_SEED` replays a seed printed by a failure;
//! `RIPTIDE_CRASH_POINTS_ONLY=<substring>` runs only the points whose names contain it.

#![cfg(feature = "failpoints")]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, Options, ReadOptions, Table};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIR_ENV: &str = "RIPTIDE_CRASH_POINTS_DIR";
const SEED_ENV: &str = "RIPTIDE_CRASH_POINTS_SEED";
/// The op log writes into one region of keys at a time, moving on every `REGION_OPS` ops and
/// coming back after `REGIONS` regions: L2 extents of the regions left behind stay untouched
/// by later merges, which is where self-major compactions find their work.
const REGIONS: u64 = 8;
const REGION_KEYS: u64 = 2000;
const REGION_OPS: u64 = 4000;
/// A snapshot is taken every `SNAPSHOT_EVERY` ops and released `SNAPSHOT_HOLD` ops later
/// (three regions later, when the data of its region has long settled in L2).
const SNAPSHOT_EVERY: u64 = 100;
const SNAPSHOT_HOLD: u64 = 12_000;
/// A child that has not reached its point by then stops and says so. A child dies at its point
/// long before this; the limit only bounds a run that never gets there, so it is generous: the
/// third manual range compaction comes at op 49,999, which a loaded CI machine took more than
/// 20 s to reach.
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(60);

fn options() -> Options {
    Options {
        write_buffer_size: 64 << 10,
        redo_segment_size: 256 << 10,
        slog_checkpoint_bytes: 8 << 10,
        level0_layer_trigger: 3,
        level0_extents_trigger: 3,
        level1_extents_trigger: 3,
        level1_dynamic_trigger: false,
        extents_per_file: 64,
        ..Default::default()
    }
}

/// Op `i` of the log seeded `seed`: `(key, Some(value))` for a put, `(key, None)` for a delete.
struct OpLog {
    rng: StdRng,
    next: u64,
}

impl OpLog {
    fn new(seed: u64) -> OpLog {
        OpLog {
            rng: StdRng::seed_from_u64(seed),
            next: 0,
        }
    }

    fn next_op(&mut self) -> (Vec<u8>, Option<Vec<u8>>) {
        let i = self.next;
        self.next += 1;
        let region = (i / REGION_OPS) % REGIONS;
        let k = region * REGION_KEYS + self.rng.random_range(0..REGION_KEYS);
        let key = format!("k{k:06}").into_bytes();
        if self.rng.random_bool(0.6) {
            return (key, None);
        }
        let mut v = format!("v{i}-").into_bytes();
        // Incompressible filler (the default options compress blocks with LZ4), so the table
        // spans many 2 MiB extents.
        let len = self.rng.random_range(500..2000);
        while v.len() < len {
            v.extend_from_slice(&self.rng.random::<u64>().to_le_bytes());
        }
        v.truncate(len);
        (key, Some(v))
    }
}

fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, op: (Vec<u8>, Option<Vec<u8>>)) {
    match op {
        (k, Some(v)) => {
            model.insert(k, v);
        }
        (k, None) => {
            model.remove(&k);
        }
    }
}

/// The child: runs the op log until the crash point kills it.
#[test]
#[ignore = "child process of the whitebox crash test"]
fn crash_points_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let db = Db::open(&dir, options()).unwrap();
    let t = db.default_table();
    let mut log = OpLog::new(seed);
    let deadline = Instant::now() + CHILD_TIME_LIMIT;
    let mut snapshots = std::collections::VecDeque::new();
    println!("\nREADY");
    while Instant::now() < deadline {
        let i = log.next;
        match log.next_op() {
            (k, Some(v)) => t.put(&k, &v).unwrap(),
            (k, None) => t.delete(&k).unwrap(),
        }
        println!("ACK {i}");
        // Compactions keep every version some snapshot sees, tombstones included, so a
        // region's L2 extents come out delete-heavy; once its snapshots are gone and the
        // writes have moved to another region, self-major compactions rewrite them.
        if i.is_multiple_of(SNAPSHOT_EVERY) {
            snapshots.push_back((i, db.snapshot()));
        }
        while snapshots.front().is_some_and(|(at, _)| at + SNAPSHOT_HOLD <= i) {
            snapshots.pop_front();
        }
        // Manual compactions purge everything, so they stay rare.
        if i % 20_000 == 19_999 {
            t.compact().unwrap();
        }
        if i % 20_000 == 9_999 {
            t.compact_range(Some(b"k001000"), Some(b"k001500")).unwrap();
        }
        // Let the background catch up now and then, so the picker sees quiet moments (where
        // self-major compactions run).
        if i % 1000 == 999 {
            db.wait_for_background_work().unwrap();
        }
    }
    drop(snapshots);
    if std::env::var("RIPTIDE_CRASH_POINTS_DEBUG").is_ok() {
        println!(
            "ops {} levels {:?} stats {:?}",
            log.next,
            t.level_info(),
            db.stats().levels
        );
    }
    println!("DONE");
}

/// Runs the child until it dies at `point` (its `nth` pass); returns the last acknowledged op.
fn run_child(dir: &Path, seed: u64, point: &str, nth: u64) -> Result<Option<u64>, String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "crash_points_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(SEED_ENV, seed.to_string())
        .env("RIPTIDE_CRASH_AT", format!("{point}@{nth}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().unwrap();
    let mut last_ack = None;
    let mut crashed_at = None;
    let mut done = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(i) = line.strip_prefix("ACK ") {
            last_ack = Some(i.parse::<u64>().map_err(|e| e.to_string())?);
        } else if let Some(p) = line.strip_prefix("CRASHPOINT ") {
            crashed_at = Some(p.to_string());
        } else if line == "DONE" {
            done = true;
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if done || crashed_at.as_deref() != Some(point) {
        return Err(format!(
            "child did not die at {point}@{nth} (status {status}, crashed at {crashed_at:?}, finished: {done})"
        ));
    }
    if status.success() {
        return Err(format!("child printed CRASHPOINT {point} but exited cleanly"));
    }
    Ok(last_ack)
}

fn contents(t: &Table) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    t.iter(&ReadOptions::default())
        .map_err(|e| e.to_string())?
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
}

/// Reopens after the crash and checks contents, leaks and `inspect verify`.
fn check(dir: &Path, seed: u64, last_ack: Option<u64>) -> Result<(), String> {
    let mut log = OpLog::new(seed);
    let mut model = BTreeMap::new();
    let acked = last_ack.map_or(0, |i| i + 1);
    for _ in 0..acked {
        apply(&mut model, log.next_op());
    }
    let mut with_in_flight = model.clone();
    apply(&mut with_in_flight, log.next_op());
    let db = Db::open(dir, options()).map_err(|e| format!("reopen: {e}"))?;
    let t = db.default_table();
    let got = contents(&t)?;
    if got != model && got != with_in_flight {
        let diff: Vec<String> = model
            .keys()
            .chain(got.keys())
            .filter(|k| model.get(*k) != got.get(*k))
            .take(5)
            .map(|k| {
                format!(
                    "{}: want {:?} got {:?}",
                    String::from_utf8_lossy(k),
                    model.get(k).map(|v| v.len()),
                    got.get(k).map(|v| v.len())
                )
            })
            .collect();
        return Err(format!(
            "after {acked} acknowledged ops the database matches neither model: {diff:?}"
        ));
    }
    // More writes and a flush on the recovered state, then a clean close and a second look.
    t.put(b"after-crash", b"1").map_err(|e| e.to_string())?;
    t.flush().map_err(|e| e.to_string())?;
    db.wait_for_background_work().map_err(|e| e.to_string())?;
    let live: usize = t.level_info().extents.iter().sum();
    let used = db.stats().space_used_slots as usize;
    if used != live {
        return Err(format!("{used} slots in use but {live} live extents"));
    }
    drop(t);
    db.close().map_err(|e| e.to_string())?;
    let report = riptide::inspect::verify(riptide::inspect::posix().as_ref(), dir).map_err(|e| e.to_string())?;
    if !report.ok() {
        return Err(format!("inspect verify: {:?}", report.problems));
    }
    let db = Db::open(dir, options()).map_err(|e| format!("second reopen: {e}"))?;
    let t = db.default_table();
    let again = contents(&t)?;
    let mut expect = got;
    expect.insert(b"after-crash".to_vec(), b"1".to_vec());
    if again != expect {
        return Err("contents changed across a clean close and reopen".into());
    }
    drop(t);
    db.close().map_err(|e| e.to_string())
}

#[test]
fn every_crash_point_recovers_exactly() {
    let base_seed = match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().expect("RIPTIDE_CRASH_POINTS_SEED must be a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let mut rng = StdRng::seed_from_u64(base_seed);
    let mut failures = Vec::new();
    let only = std::env::var("RIPTIDE_CRASH_POINTS_ONLY").ok();
    for &point in riptide::failpoint::POINTS {
        if only.as_deref().is_some_and(|o| !point.contains(o)) {
            continue;
        }
        let seed: u64 = rng.random();
        // Die at the first pass, or a later one (deeper into the run, after more compactions).
        let nth = rng.random_range(1..=3);
        let dir = tempfile::tempdir().unwrap();
        let r = run_child(dir.path(), seed, point, nth).and_then(|last| check(dir.path(), seed, last));
        eprintln!("{point}@{nth}: {}", if r.is_ok() { "ok" } else { "FAILED" });
        if let Err(e) = r {
            failures.push(format!("{point}@{nth} (seed {seed}): {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "base seed {base_seed} (RIPTIDE_CRASH_POINTS_SEED replays it):\n{}",
        failures.join("\n")
    );
}
