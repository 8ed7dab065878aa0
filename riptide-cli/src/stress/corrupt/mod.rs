//! `riptide stress --corrupt_sweep=N`: damage at rest in every file kind, and never wrong data.
//!
//! 1. **Build.** A fresh database at `--db` (which must not exist yet) gets data in every file
//!    kind: `--tables` tables of `--keys` keys, written, then compacted to L2, overwritten in
//!    part and merged into L1, overwritten again into L0, and a last run of single writes and
//!    multi-table batches left only in the redo log (closed without a flush). Small memtables,
//!    a 4 KiB checkpoint threshold and small data files give several data files, a checkpoint
//!    and a slog with transactions after it. The exact expected content (per table, per key:
//!    absent or the version whose value is [`super::value`]) is kept in memory, with the redo
//!    tail's writes in order.
//! 2. **Regions.** Every byte of the database is assigned one kind: `CATALOG`, `CURRENT`,
//!    checkpoint, slog, redo log, data-file header (either copy), extent data block, extent
//!    index/filter/properties, extent footer, or unused data-file bytes (header padding, the gap
//!    between an extent's valid bytes and its footer, free slots). The last KiB of the newest
//!    redo segment is also a kind of its own, so that the torn-tail rule gets its share of
//!    rounds (uniform offsets would almost never land in the last record).
//! 3. **Rounds.** Round `i` damages kind `i mod kinds` (so every kind gets its share): one to
//!    three consecutive bytes XORed with random non-zero masks at a random offset of a random
//!    region of that kind. The whole database, with the damage, is copied into an in-memory
//!    [`FaultFs`] (the engine's code unchanged, the pristine files never touched). Then
//!    `inspect::verify` runs on it, the database is opened (default `recovery_mode`), and every
//!    table is read in full: a `get` of every key of the key space (present or not), a forward
//!    and a backward scan.
//! 4. **Classification**, per round:
//!    - *detected at open* / *detected at read*: a typed `Corruption` or `UnsupportedFormat`
//!      error (any other error is a failure);
//!    - *harmless*: open and every read return exactly the expected content (split into those
//!      `inspect verify` still flags, e.g. one of two header copies, and silent ones);
//!    - *redo tail cut*: the damage is in the redo log and the content equals the expected
//!      content minus the last k write groups (no holes, batches whole). That is the documented
//!      `TolerateCorruptedTail` rule (a payload checksum mismatch in the very last record is
//!      treated as a torn write and cut): acknowledged writes are lost without an error. It is
//!      reported as such, never as harmless, and the same damaged copy must then fail to open
//!      under `RecoveryMode::AbsoluteConsistency` (else it is a failure);
//!    - anything else — a wrong value, an unexpected key, a missing key without an error, gets
//!      disagreeing with scans, a forward scan disagreeing with a backward one — is a
//!      **failure**: the seed, round, file, offset and bytes are printed, the damaged copy is
//!      written to `<db>.failed-round-N`, and the tool exits with status 1.

mod build;
mod check;
mod regions;

use build::{build, sweep_options, table_name};
use check::round;
use regions::{load_files, pick, regions, save_copy};

use super::args::StressArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::FaultFs;
use riptide::{inspect, Db, Error, Options, ReadOptions, RecoveryMode, Table, WriteBatch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The kinds of bytes, in report order.
const KINDS: [&str; 11] = [
    "CATALOG",
    "CURRENT",
    "checkpoint",
    "slog",
    "redo log",
    "redo log, last 1 KiB",
    "data-file header",
    "extent data block",
    "extent index/filter/props",
    "extent footer",
    "data-file unused bytes",
];
const REDO: usize = 4;
const REDO_TAIL: usize = 5;
const DATA_HEADER: usize = 6;
const EXTENT_BLOCK: usize = 7;
const EXTENT_META: usize = 8;
const EXTENT_FOOTER: usize = 9;
const UNUSED: usize = 10;

/// Where the in-memory copy lives.
const MEM_DB: &str = "/db";

/// Expected content: per table, per key, `None` (absent) or the version of its value.
type State = Vec<Vec<Option<u32>>>;

/// One write group of the redo tail: `(table, key, before, after)` per op.
type Group = Vec<(u32, u32, Option<u32>, Option<u32>)>;

/// A byte range of one file, of one kind.
#[derive(Debug, Clone)]
struct Region {
    file: PathBuf,
    start: u64,
    end: u64,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    injected: u64,
    at_open: u64,
    at_read: u64,
    flagged: u64,
    silent: u64,
    tail_cut: u64,
    writes_lost: u64,
    failures: u64,
}

/// How one round ended.
enum Outcome {
    AtOpen,
    AtRead,
    Harmless { flagged: bool },
    TailCut { lost: usize },
    Failure(String),
}

/// Runs the sweep; `Ok(true)` when no round served wrong data.
pub fn run(a: &StressArgs, seed: u64) -> Result<bool, String> {
    // `--db` (missing) and --keys / --tables were checked by `args::validate`.
    println!(
        "riptide stress: corruption sweep, seed {seed}, {} rounds, {} tables x {} keys",
        a.corrupt_sweep, a.tables, a.keys
    );
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let (expected, tail) = build(a, &mut rng)?;
    let files = load_files(&a.db)?;
    let kinds = regions(&a.db, &files)?;
    let present: Vec<usize> = (0..KINDS.len()).filter(|&k| !kinds[k].is_empty()).collect();
    let bytes: u64 = files.values().map(|f| f.len() as u64).sum();
    println!(
        "built {} in {:.1} s: {} files, {bytes} bytes; {} writes in the redo tail; kinds present: {}",
        a.db.display(),
        started.elapsed().as_secs_f64(),
        files.len(),
        tail.len(),
        present.iter().map(|&k| KINDS[k]).collect::<Vec<_>>().join(", ")
    );
    for (k, name) in KINDS.iter().enumerate() {
        if kinds[k].is_empty() {
            println!("warning: no {name} bytes in this database");
        }
    }
    // The undamaged copy must read back exactly and verify clean, or nothing below means much.
    match round(a, &files, None, &expected, &tail, false)? {
        Outcome::Harmless { flagged: false } => {}
        Outcome::Harmless { flagged: true } => return Err("inspect verify flags the undamaged database".into()),
        Outcome::Failure(e) => return Err(format!("the undamaged database does not read back: {e}")),
        _ => return Err("the undamaged database reports damage".into()),
    }
    let mut counts = [Counts::default(); KINDS.len()];
    for r in 0..a.corrupt_sweep {
        let kind = present[r as usize % present.len()];
        let (file, offset, masks) = pick(&mut rng, &kinds[kind], &files);
        let in_redo = kind == REDO || kind == REDO_TAIL;
        let outcome = round(a, &files, Some((&file, offset, &masks[..])), &expected, &tail, in_redo)?;
        let c = &mut counts[kind];
        c.injected += 1;
        match outcome {
            Outcome::AtOpen => c.at_open += 1,
            Outcome::AtRead => c.at_read += 1,
            Outcome::Harmless { flagged: true } => c.flagged += 1,
            Outcome::Harmless { flagged: false } => c.silent += 1,
            Outcome::TailCut { lost } => {
                c.tail_cut += 1;
                c.writes_lost += lost as u64;
            }
            Outcome::Failure(why) => {
                c.failures += 1;
                let saved = save_copy(&a.db, r, &files, &file, offset, &masks);
                eprintln!(
                    "riptide stress: FAILED (seed {seed}, round {r}): {} bytes {masks:02x?} XORed at offset {offset} \
                     of {} ({}): {why}\nthe damaged copy: {saved}",
                    masks.len(),
                    file.display(),
                    KINDS[kind]
                );
            }
        }
    }
    print_summary(&counts);
    let failures: u64 = counts.iter().map(|c| c.failures).sum();
    println!(
        "DONE {} rounds in {:.1} s; {failures} failures",
        a.corrupt_sweep,
        started.elapsed().as_secs_f64()
    );
    Ok(failures == 0)
}

fn print_summary(counts: &[Counts; KINDS.len()]) {
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>8}",
        "file kind", "injected", "open", "read", "verify", "silent", "tail cut", "FAILED"
    );
    let mut total = Counts::default();
    for (k, c) in counts.iter().enumerate() {
        if c.injected == 0 {
            continue;
        }
        println!(
            "{:<26} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>8}",
            KINDS[k], c.injected, c.at_open, c.at_read, c.flagged, c.silent, c.tail_cut, c.failures
        );
        total.injected += c.injected;
        total.at_open += c.at_open;
        total.at_read += c.at_read;
        total.flagged += c.flagged;
        total.silent += c.silent;
        total.tail_cut += c.tail_cut;
        total.writes_lost += c.writes_lost;
        total.failures += c.failures;
    }
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>8}",
        "total",
        total.injected,
        total.at_open,
        total.at_read,
        total.flagged,
        total.silent,
        total.tail_cut,
        total.failures
    );
    println!(
        "(open/read: detected with a typed error; verify: every read exact, `inspect verify` flags it; \
         silent: every read exact, nothing flags it; tail cut: the redo log's last write groups dropped \
         as a torn tail under TolerateCorruptedTail ({} acknowledged write groups lost in all), each \
         copy refused under AbsoluteConsistency)",
        total.writes_lost
    );
}

// ---------------------------------------------------------------------------------------------
// Build
