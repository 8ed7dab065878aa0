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

use super::args::StressArgs;
use super::{key, parse_value, value};
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

fn sweep_options(fs: Option<&FaultFs>) -> Options {
    let mut o = Options {
        write_buffer_size: 64 << 10,
        block_size: 2 << 10,
        slog_checkpoint_bytes: 4 << 10,
        level0_layer_trigger: 3,
        level0_extents_trigger: 4,
        level1_extents_trigger: 4,
        level1_dynamic_trigger: false,
        redo_segment_size: 1 << 20,
        extents_per_file: 6,
        flush_on_close: false,
        // Every read of a round goes to the damaged bytes.
        block_cache_size: 0,
        ..Default::default()
    };
    if let Some(fs) = fs {
        o.fs = Arc::new(fs.clone());
    }
    o
}

fn table_name(t: u32) -> String {
    format!("s{t}")
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

fn write_key(t: &Table, n: u32, tab: u32, ver: Option<u32>, a: &StressArgs) -> Result<(), String> {
    match ver {
        Some(v) => t.put(&key(n), &value(tab, n, v, a)),
        None => t.delete(&key(n)),
    }
    .map_err(|e| format!("build: write: {e}"))
}

/// Builds the database; returns the expected content and the redo tail's write groups.
fn build(a: &StressArgs, rng: &mut StdRng) -> Result<(State, Vec<Group>), String> {
    fn err(what: &'static str) -> impl Fn(Error) -> String {
        move |e| format!("build: {what}: {e}")
    }
    if let Some(p) = a.db.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("creating {}: {e}", p.display()))?;
    }
    let db = Db::open(&a.db, sweep_options(None)).map_err(err("open"))?;
    let tables: Vec<Table> = (0..a.tables)
        .map(|t| db.create_table(&table_name(t)))
        .collect::<Result<_, _>>()
        .map_err(err("create table"))?;
    let mut state: State = vec![vec![None; a.keys as usize]; a.tables as usize];
    let mut version = vec![vec![0u32; a.keys as usize]; a.tables as usize];
    let mut next = |t: u32, n: u32, delete: bool, state: &mut State| -> Option<u32> {
        version[t as usize][n as usize] += 1;
        let v = (!delete).then_some(version[t as usize][n as usize]);
        state[t as usize][n as usize] = v;
        v
    };
    for (ti, t) in tables.iter().enumerate() {
        let tab = ti as u32;
        // Everything, compacted to L2.
        for n in 0..a.keys {
            let v = next(tab, n, false, &mut state);
            write_key(t, n, tab, v, a)?;
        }
        t.compact().map_err(err("compact"))?;
        // A third overwritten or deleted, merged into L1.
        for n in 0..a.keys {
            if rng.random_bool(0.33) {
                let v = next(tab, n, rng.random_bool(0.2), &mut state);
                write_key(t, n, tab, v, a)?;
            }
        }
        t.flush().map_err(err("flush"))?;
        t.compact_l0().map_err(err("compact_l0"))?;
        // A fifth again, left in L0.
        for n in 0..a.keys {
            if rng.random_bool(0.2) {
                let v = next(tab, n, rng.random_bool(0.2), &mut state);
                write_key(t, n, tab, v, a)?;
            }
        }
        t.flush().map_err(err("flush"))?;
    }
    // A checkpoint, and a slog holding transactions after it: flush single writes until both
    // exist (each flush commits one slog transaction; past 4 KiB of them the metadata is
    // checkpointed and the slog starts empty).
    let meta_files = |db: &Path| -> (bool, u64) {
        let mut checkpoint = false;
        let mut slog = 0;
        for e in std::fs::read_dir(db.join("meta")).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            checkpoint |= name.starts_with("CHECKPOINT-");
            if name.starts_with("SLOG-") {
                slog = slog.max(e.metadata().map_or(0, |m| m.len()));
            }
        }
        (checkpoint, slog)
    };
    for _ in 0..500 {
        let (checkpoint, slog) = meta_files(&a.db);
        if checkpoint && slog > 32 {
            break;
        }
        let tab = rng.random_range(0..a.tables);
        let n = rng.random_range(0..a.keys);
        let v = next(tab, n, false, &mut state);
        write_key(&tables[tab as usize], n, tab, v, a)?;
        tables[tab as usize].flush().map_err(err("flush"))?;
    }
    db.wait_for_background_work().map_err(err("background work"))?;
    // The redo tail: single writes and multi-table batches, never flushed.
    let mut tail: Vec<Group> = Vec::new();
    for i in 0..200u32.min(a.keys) {
        let ops = if i % 5 == 4 { 3 } else { 1 };
        let mut group: Group = Vec::new();
        let mut batch = WriteBatch::new();
        for _ in 0..ops {
            let tab = rng.random_range(0..a.tables);
            let n = rng.random_range(0..a.keys);
            if group.iter().any(|g| (g.0, g.1) == (tab, n)) {
                continue;
            }
            let before = state[tab as usize][n as usize];
            let v = next(tab, n, rng.random_bool(0.2), &mut state);
            let t = &tables[tab as usize];
            match v {
                Some(v) => batch.put(t, &key(n), &value(tab, n, v, a)),
                None => batch.delete(t, &key(n)),
            }
            .map_err(err("batch"))?;
            group.push((tab, n, before, v));
        }
        db.write(batch, &Default::default()).map_err(err("write"))?;
        tail.push(group);
    }
    let mut levels = [0usize; 3];
    for t in &tables {
        let info = t.level_info();
        for (l, n) in info.extents.iter().enumerate() {
            levels[l] += n;
        }
    }
    println!(
        "extents per level: L0 {}, L1 {}, L2 {}",
        levels[0], levels[1], levels[2]
    );
    drop(tables);
    db.close().map_err(err("close"))?;
    Ok((state, tail))
}

// ---------------------------------------------------------------------------------------------
// Files and regions

/// Every file of the database, by path relative to it.
fn load_files(db: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let dir = db.join(&rel);
        for e in std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let r = rel.join(e.file_name());
            if e.file_type().map_err(|e| e.to_string())?.is_dir() {
                dirs.push(r);
            } else {
                let bytes = std::fs::read(db.join(&r)).map_err(|e| format!("reading {}: {e}", r.display()))?;
                out.insert(r, bytes);
            }
        }
    }
    Ok(out)
}

/// The regions of every kind (`KINDS` order).
fn regions(db: &Path, files: &BTreeMap<PathBuf, Vec<u8>>) -> Result<Vec<Vec<Region>>, String> {
    let mut kinds: Vec<Vec<Region>> = vec![Vec::new(); KINDS.len()];
    let whole = |file: &Path, len: usize| Region {
        file: file.to_path_buf(),
        start: 0,
        end: len as u64,
    };
    // Extent regions of each data file, from the metadata.
    let fs = inspect::posix();
    let mut extent_parts: BTreeMap<PathBuf, Vec<(usize, u64, u64)>> = BTreeMap::new();
    for id in inspect::extent_ids(fs.as_ref(), db).map_err(|e| format!("extent ids: {e}"))? {
        for (name, path, off, len) in
            inspect::extent_regions(fs.as_ref(), db, &id).map_err(|e| format!("extent {id}: {e}"))?
        {
            let rel = path.strip_prefix(db).map_err(|e| e.to_string())?.to_path_buf();
            let (kind, len) = match name.as_str() {
                // A data block's region is its contents; its 5-byte trailer follows.
                n if n.starts_with("data block") => (EXTENT_BLOCK, len + 5),
                "footer" => (EXTENT_FOOTER, len),
                _ => (EXTENT_META, len),
            };
            extent_parts.entry(rel).or_default().push((kind, off, off + len));
        }
    }
    for (rel, bytes) in files {
        if bytes.is_empty() {
            continue; // LOCK: nothing to flip
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = match rel.parent().and_then(|p| p.to_str()).unwrap_or("") {
            "" if name == "CATALOG" => Some(0),
            "meta" if name == "CURRENT" => Some(1),
            "meta" if name.starts_with("CHECKPOINT-") => Some(2),
            "meta" if name.starts_with("SLOG-") => Some(3),
            "redo" if name.ends_with(".log") => Some(REDO),
            "data" if name.ends_with(".dat") => None,
            _ => return Err(format!("unexpected file {} in the database", rel.display())),
        };
        if let Some(k) = kind {
            kinds[k].push(whole(rel, bytes.len()));
            if k == REDO {
                // The newest segment's last records (redo files are listed in order, so the
                // last one pushed wins): where the torn-tail rule applies.
                kinds[REDO_TAIL] = vec![Region {
                    file: rel.clone(),
                    start: (bytes.len() as u64).saturating_sub(1024).max(32),
                    end: bytes.len() as u64,
                }];
            }
            continue;
        }
        // A data file: header copies, extent parts, and everything else is unused.
        let mut parts: Vec<(usize, u64, u64)> = extent_parts.remove(rel).unwrap_or_default();
        parts.push((DATA_HEADER, 0, 4096));
        parts.push((DATA_HEADER, 16 << 10, (16 << 10) + 4096));
        parts.sort_by_key(|p| p.1);
        let mut at = 0u64;
        for (k, s, e) in parts {
            if s > at {
                kinds[UNUSED].push(Region {
                    file: rel.clone(),
                    start: at,
                    end: s,
                });
            }
            kinds[k].push(Region {
                file: rel.clone(),
                start: s,
                end: e,
            });
            at = at.max(e);
        }
        if (bytes.len() as u64) > at {
            kinds[UNUSED].push(Region {
                file: rel.clone(),
                start: at,
                end: bytes.len() as u64,
            });
        }
    }
    if let Some((f, _)) = extent_parts.into_iter().next() {
        return Err(format!("metadata names extents in {}, which is missing", f.display()));
    }
    Ok(kinds)
}

/// A random damage in one of `regions`: the file, the offset and 1–3 non-zero XOR masks (the
/// bytes stay inside the region's file).
fn pick(rng: &mut StdRng, regions: &[Region], files: &BTreeMap<PathBuf, Vec<u8>>) -> (PathBuf, u64, Vec<u8>) {
    let total: u64 = regions.iter().map(|r| r.end - r.start).sum();
    let mut x = rng.random_range(0..total);
    let r = regions
        .iter()
        .find(|r| {
            let len = r.end - r.start;
            if x < len {
                true
            } else {
                x -= len;
                false
            }
        })
        .unwrap_or(&regions[0]);
    let offset = r.start + x;
    let file_len = files.get(&r.file).map_or(0, |f| f.len() as u64);
    let n = rng.random_range(1..=3u64).min(file_len - offset);
    let masks = (0..n).map(|_| rng.random_range(1..=255u8)).collect();
    (r.file.clone(), offset, masks)
}

/// A fresh in-memory copy of the database, with the damage applied.
fn materialize(files: &BTreeMap<PathBuf, Vec<u8>>, damage: Option<(&PathBuf, u64, &[u8])>) -> FaultFs {
    let fs = FaultFs::new();
    for (rel, bytes) in files {
        let mut b = bytes.clone();
        if let Some((f, off, masks)) = damage {
            if f == rel {
                for (i, m) in masks.iter().enumerate() {
                    b[off as usize + i] ^= m;
                }
            }
        }
        fs.write_file(&Path::new(MEM_DB).join(rel), b);
    }
    fs
}

fn save_copy(
    db: &Path,
    round: u32,
    files: &BTreeMap<PathBuf, Vec<u8>>,
    file: &PathBuf,
    offset: u64,
    masks: &[u8],
) -> String {
    let mut out = db.as_os_str().to_owned();
    out.push(format!(".failed-round-{round}"));
    let out = PathBuf::from(out);
    let fs = materialize(files, Some((file, offset, masks)));
    for rel in files.keys() {
        let target = out.join(rel);
        if let (Some(bytes), Some(parent)) = (fs.read_file(&Path::new(MEM_DB).join(rel)), target.parent()) {
            if std::fs::create_dir_all(parent)
                .and_then(|_| std::fs::write(&target, bytes))
                .is_err()
            {
                return format!("(could not write {})", target.display());
            }
        }
    }
    out.display().to_string()
}

// ---------------------------------------------------------------------------------------------
// One round

fn typed(e: &Error) -> bool {
    matches!(e, Error::Corruption { .. } | Error::UnsupportedFormat { .. })
}

/// What the database shows, read in full; `Err(Outcome)` when a read fails or shows something
/// that cannot be right whatever was lost (a wrong value, a foreign key, gets or scans that
/// disagree).
fn read_all(db: &Db, a: &StressArgs) -> Result<State, Outcome> {
    let fail = |why: String| Outcome::Failure(why);
    let read_err = |what: String, e: Error| {
        if typed(&e) {
            Outcome::AtRead
        } else {
            Outcome::Failure(format!("{what}: an error that is not a corruption report: {e}"))
        }
    };
    let mut shown: State = Vec::new();
    // The default table holds nothing.
    let default = db.default_table();
    let mut it = default
        .iter(&ReadOptions::default())
        .map_err(|e| read_err("default table".into(), e))?;
    if let Some(item) = it.next() {
        let (k, _) = item.map_err(|e| read_err("default table scan".into(), e))?;
        return Err(fail(format!("the default table shows key {k:?}")));
    }
    for tab in 0..a.tables {
        let t = db
            .table(&table_name(tab))
            .map_err(|e| fail(format!("table s{tab} is gone without a corruption report: {e}")))?;
        let parse = |k: &[u8], v: &[u8]| -> Result<(u32, u32), Outcome> {
            let n = std::str::from_utf8(k)
                .ok()
                .and_then(|s| s.strip_prefix('k'))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&n| n < a.keys && key(n) == k)
                .ok_or_else(|| fail(format!("table s{tab}: unexpected key {k:?}")))?;
            let ver = parse_value(tab, n, v).map_err(|e| fail(format!("table s{tab} key {n}: {e}")))?;
            if v != value(tab, n, ver, a) {
                return Err(fail(format!("table s{tab} key {n}: a damaged value of version {ver}")));
            }
            Ok((n, ver))
        };
        let mut forward: Vec<Option<u32>> = vec![None; a.keys as usize];
        let mut order: Vec<u32> = Vec::new();
        for item in t
            .iter(&ReadOptions::default())
            .map_err(|e| read_err(format!("s{tab} scan"), e))?
        {
            let (k, v) = item.map_err(|e| read_err(format!("s{tab} scan"), e))?;
            let (n, ver) = parse(&k, &v)?;
            if order.last().is_some_and(|&p| p >= n) {
                return Err(fail(format!("table s{tab}: scan out of order at key {n}")));
            }
            order.push(n);
            forward[n as usize] = Some(ver);
        }
        let mut backward: Vec<Option<u32>> = vec![None; a.keys as usize];
        let mut back_order: Vec<u32> = Vec::new();
        for item in t
            .iter(&ReadOptions::default())
            .map_err(|e| read_err(format!("s{tab} reverse scan"), e))?
            .rev()
        {
            let (k, v) = item.map_err(|e| read_err(format!("s{tab} reverse scan"), e))?;
            let (n, ver) = parse(&k, &v)?;
            back_order.push(n);
            backward[n as usize] = Some(ver);
        }
        back_order.reverse();
        if back_order != order || backward != forward {
            return Err(fail(format!(
                "table s{tab}: the backward scan differs from the forward one"
            )));
        }
        for n in 0..a.keys {
            let got = match t.get(&key(n)) {
                Ok(Some(v)) => Some(parse(&key(n), &v)?.1),
                Ok(None) => None,
                Err(e) => return Err(read_err(format!("s{tab} get k{n}"), e)),
            };
            if got != forward[n as usize] {
                return Err(fail(format!(
                    "table s{tab} key {n}: get says {got:?}, the scan {:?}",
                    forward[n as usize]
                )));
            }
        }
        shown.push(forward);
    }
    Ok(shown)
}

/// The number of tail groups lost if `shown` is `expected` minus the last k groups of `tail`.
fn tail_cut(shown: &State, expected: &State, tail: &[Group]) -> Option<usize> {
    let mut s = expected.clone();
    for (lost, g) in tail.iter().rev().enumerate() {
        for &(t, n, before, _) in g.iter().rev() {
            s[t as usize][n as usize] = before;
        }
        if *shown == s {
            return Some(lost + 1);
        }
    }
    None
}

fn open_and_read(fs: &FaultFs, a: &StressArgs, mode: RecoveryMode) -> Result<State, Outcome> {
    let mut o = sweep_options(Some(fs));
    o.recovery_mode = mode;
    let db = match Db::open(MEM_DB, o) {
        Ok(db) => db,
        Err(e) if typed(&e) => return Err(Outcome::AtOpen),
        Err(e) => {
            return Err(Outcome::Failure(format!(
                "open failed without a corruption report: {e}"
            )))
        }
    };
    let r = read_all(&db, a);
    drop(db);
    r
}

/// One round: verify, open, read everything, classify.
fn round(
    a: &StressArgs,
    files: &BTreeMap<PathBuf, Vec<u8>>,
    damage: Option<(&PathBuf, u64, &[u8])>,
    expected: &State,
    tail: &[Group],
    in_redo: bool,
) -> Result<Outcome, String> {
    let fs = materialize(files, damage);
    let flagged = match inspect::verify(&fs, Path::new(MEM_DB)) {
        Ok(report) => !report.ok(),
        Err(_) => true,
    };
    let shown = match open_and_read(&fs, a, RecoveryMode::TolerateCorruptedTail) {
        Ok(s) => s,
        Err(o) => return Ok(o),
    };
    if shown == *expected {
        return Ok(Outcome::Harmless { flagged });
    }
    let first_diff = || {
        for (t, (s, e)) in shown.iter().zip(expected).enumerate() {
            if let Some(n) = (0..s.len()).find(|&n| s[n] != e[n]) {
                return format!("table s{t} key {n}: shows {:?}, expected {:?}", s[n], e[n]);
            }
        }
        String::new()
    };
    if in_redo {
        if let Some(lost) = tail_cut(&shown, expected, tail) {
            // The documented torn-tail rule dropped the last records; the strict mode must
            // refuse the same bytes.
            let strict = materialize(files, damage);
            return Ok(match open_and_read(&strict, a, RecoveryMode::AbsoluteConsistency) {
                Err(Outcome::AtOpen) => Outcome::TailCut { lost },
                _ => Outcome::Failure(format!(
                    "the last {lost} redo write groups were cut as a torn tail, and AbsoluteConsistency \
                     does not refuse the same bytes"
                )),
            });
        }
    }
    Ok(Outcome::Failure(format!(
        "wrong data without an error: {}",
        first_diff()
    )))
}
