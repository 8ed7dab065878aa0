//! Power-cut mode of `riptide stress` (`--power_cuts=N`): the workload runs in process on
//! [`FaultFs`], the in-memory file system that simulates power loss; at a random moment while
//! the threads write, the power goes ([`FaultFs::crash`]: everything not fsynced is dropped,
//! in turn [`CrashMode::DropUnsynced`], [`CrashMode::KeepRandomPrefix`] and
//! [`CrashMode::KeepRandomSectors`]); then the
//! database is reopened on the same file system, verified, and the workload goes on from the
//! recovered state. The oracle ([`Expected::in_memory`] plus a [`History`]) is in memory too.
//!
//! The order of acknowledgements. Every write stamps a global clock just before it is submitted
//! (`start`) and just after it is acknowledged (`ack`). If `a.ack < b.start`, write `a` was
//! acknowledged before `b` was even submitted, in real time; writes whose intervals overlap are
//! concurrent and may be ordered either way by the engine. The guarantees checked ([`check_cut`]):
//! - every write is atomic: each of its keys (and, for a scratch-table fill, the table) shows it
//!   or none does;
//! - `sync=true`: no acknowledged write is lost;
//! - every mode: no holes: if a write survived, every write acknowledged before it started
//!   survived too; i.e. `min(ack of lost acknowledged writes) > max(start of surviving writes)`;
//! - a key shows its state at the last recovery or one of the writes since (nothing else).
//!
//! Which writes survived is read off the keys: a key has one writer thread, so its writes since
//! the last recovery are in version order, and the version the database shows tells which of
//! them survived. A key that shows "absent" is ambiguous when several of its states were absent
//! (never written, deleted, deleted again); such keys are checked after the others, each for
//! some interpretation consistent with the order fixed by the unambiguous ones.
//!
//! Fencing: the old instance's threads keep running for a moment after the cut; a real power
//! loss stops them. [`FencedFs`] makes every call of a file system handed to an instance fail
//! once the power was cut (a generation under a lock that the cut takes exclusively), and
//! [`FaultFs`] already refuses calls on file handles opened before the cut; so nothing the old
//! instance does afterwards reaches the recovered state.

use super::args::{options, StressArgs};
use super::expected::{lock, Expected};
use super::history::{History, WriteRec};
use super::ops::{self, Seen};
use super::shown;
use super::verify::{open_tables, read_all};
use super::worker::Worker;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::{CrashMode, FaultFs, FileLock, FileSystem, RandomRwFile, ReadableFile, WritableFile};
use riptide::Db;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The power switch: a generation that a cut bumps while holding it exclusively.
#[derive(Debug, Default)]
struct Gate {
    generation: RwLock<u64>,
}

impl Gate {
    fn current(&self) -> u64 {
        *self
            .generation
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Cuts the power: no call of an older [`FencedFs`] runs during or after the crash.
    fn cut(&self, fs: &FaultFs, mode: CrashMode) {
        let mut g = self
            .generation
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        fs.crash(mode);
        *g += 1;
    }
}

/// The file system one instance sees: [`FaultFs`] until the power is cut, then only errors.
#[derive(Debug)]
struct FencedFs {
    inner: FaultFs,
    gate: Arc<Gate>,
    generation: u64,
}

impl FencedFs {
    fn on<T>(&self, f: impl FnOnce(&FaultFs) -> io::Result<T>) -> io::Result<T> {
        let g = self
            .gate
            .generation
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *g != self.generation {
            return Err(io::Error::other("the power was cut"));
        }
        f(&self.inner)
    }
}

impl FileSystem for FencedFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.on(|fs| fs.create_dir_all(path))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.on(|fs| fs.list_dir(path))
    }
    fn exists(&self, path: &Path) -> bool {
        self.on(|fs| Ok(fs.exists(path))).unwrap_or(false)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.on(|fs| fs.create(path))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn ReadableFile>> {
        self.on(|fs| fs.open_read(path))
    }
    fn open_rw(&self, path: &Path, create: bool) -> io::Result<Arc<dyn RandomRwFile>> {
        self.on(|fs| fs.open_rw(path, create))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.on(|fs| fs.rename(from, to))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.on(|fs| fs.remove_file(path))
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.on(|fs| fs.truncate(path, len))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.on(|fs| fs.sync_dir(path))
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.on(|fs| fs.lock(path))
    }
}

/// What one recovery showed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CutOutcome {
    /// The state each key is at now (index `table * keys + key`).
    pub state: Vec<u32>,
    /// Writes acknowledged before the cut (since the last recovery).
    pub acked: u64,
    /// Acknowledged writes that are gone (legitimate only with `sync=false`).
    pub lost_acked: u64,
    /// Writes in flight at the cut, and how many of them are there.
    pub in_flight: u64,
    pub in_flight_survived: u64,
    /// Keys showing "absent" with several candidate states.
    pub ambiguous: u64,
}

/// Checks a recovered state against the writes since the last recovery (see the module
/// comment). `base[i]` and `seen[i]` are key `i`'s state at the last recovery and what the
/// database shows now (`None` = absent); `scratch` is what each thread's scratch table shows.
pub fn check_cut(
    keys: u32,
    base: &[u32],
    recs: &[WriteRec],
    seen: &[Option<u32>],
    scratch: &[(u32, u32, Seen)],
    sync: bool,
) -> Result<CutOutcome, String> {
    let name = |i: usize| format!("s{} k{}", i / keys as usize, i % keys as usize);
    let mut per_key: HashMap<usize, Vec<(usize, u32)>> = HashMap::new();
    for (ri, r) in recs.iter().enumerate() {
        for k in &r.keys {
            per_key
                .entry(k.table as usize * keys as usize + k.key as usize)
                .or_default()
                .push((ri, k.new));
        }
    }
    let mut status: Vec<Option<bool>> = vec![None; recs.len()];
    let mut set = |ri: usize, survived: bool, why: &str| -> Result<(), String> {
        match status[ri] {
            Some(s) if s != survived => Err(format!(
                "a write is torn: {why} says it {}, another of its keys says it {}: {}",
                if survived { "survived" } else { "is lost" },
                if s { "survived" } else { "is lost" },
                recs[ri]
            )),
            _ => {
                status[ri] = Some(survived);
                Ok(())
            }
        }
    };
    let none = Vec::new();
    let history = |i: usize| -> String {
        let h = per_key.get(&i).unwrap_or(&none);
        let w: Vec<String> = h.iter().map(|&(ri, v)| format!("{v:#x} by {}", recs[ri])).collect();
        format!(
            "state at the last recovery {:#x}, writes since: [{}]",
            base[i],
            w.join("; ")
        )
    };
    let mut state = base.to_vec();
    let mut ambiguous = Vec::new();
    for i in 0..base.len() {
        let h = per_key.get(&i).unwrap_or(&none);
        let version = |j: usize| if j == 0 { base[i] } else { h[j - 1].1 };
        let cands: Vec<usize> = (0..=h.len()).filter(|&j| shown(version(j)) == seen[i]).collect();
        let c = match cands[..] {
            [] => {
                return Err(format!(
                    "{} shows {:?}, neither its state at the last recovery nor a write since ({})",
                    name(i),
                    seen[i],
                    history(i)
                ))
            }
            [c] => c,
            _ => {
                ambiguous.push((i, cands));
                continue;
            }
        };
        for (j, &(ri, _)) in h.iter().enumerate() {
            set(ri, j < c, &name(i))?;
        }
        state[i] = version(c);
    }
    for r in recs.iter().enumerate().filter(|(_, r)| r.scratch.is_some()) {
        let (ri, r) = r;
        let g = r.scratch.unwrap_or(0);
        match scratch.iter().find(|&&(th, sg, _)| th == r.th && sg == g).map(|x| x.2) {
            Some(Seen::Full(sg)) if sg == g => set(ri, true, &ops::scratch_name(r.th))?,
            Some(Seen::Empty) => set(ri, false, &ops::scratch_name(r.th))?,
            _ => {} // dropped since, or a later generation: says nothing
        }
    }
    let lost_acked: Vec<usize> = (0..recs.len())
        .filter(|&ri| status[ri] == Some(false) && recs[ri].ack.is_some())
        .collect();
    if sync {
        if let Some(&ri) = lost_acked.first() {
            return Err(format!(
                "sync=true, yet an acknowledged write is lost ({} of them): {}",
                lost_acked.len(),
                recs[ri]
            ));
        }
    }
    let last_survivor = (0..recs.len())
        .filter(|&ri| status[ri] == Some(true))
        .max_by_key(|&ri| recs[ri].start);
    let first_lost = lost_acked.iter().copied().min_by_key(|&ri| recs[ri].ack);
    let t_s = last_survivor.map(|ri| recs[ri].start);
    let t_l = first_lost.and_then(|ri| recs[ri].ack);
    if let (Some(s), Some(l)) = (last_survivor, first_lost) {
        if recs[l].ack < Some(recs[s].start) {
            return Err(format!(
                "a hole: this write is lost: {}\n  though it was acknowledged before this one started, which survived: {}",
                recs[l], recs[s]
            ));
        }
    }
    // Ambiguous keys: some interpretation must agree with the statuses and the order so far.
    let n_ambiguous = ambiguous.len() as u64;
    for (i, cands) in ambiguous {
        let h = per_key.get(&i).unwrap_or(&none);
        let fits = |c: usize| {
            h.iter().enumerate().all(|(j, &(ri, _))| {
                let survived = j < c;
                let r = &recs[ri];
                match status[ri] {
                    Some(s) => s == survived,
                    None if survived => t_l.is_none_or(|l| r.start < l),
                    None => r.ack.is_none_or(|a| !sync && t_s.is_none_or(|s| a > s)),
                }
            })
        };
        match cands.iter().rev().find(|&&c| fits(c)) {
            Some(&c) => state[i] = if c == 0 { base[i] } else { h[c - 1].1 },
            None => {
                return Err(format!(
                    "{} is absent, but no state it had as absent fits the other keys ({})",
                    name(i),
                    history(i)
                ))
            }
        }
    }
    Ok(CutOutcome {
        state,
        acked: recs.iter().filter(|r| r.ack.is_some()).count() as u64,
        lost_acked: lost_acked.len() as u64,
        in_flight: recs.iter().filter(|r| r.ack.is_none()).count() as u64,
        in_flight_survived: (0..recs.len())
            .filter(|&ri| recs[ri].ack.is_none() && status[ri] == Some(true))
            .count() as u64,
        ambiguous: n_ambiguous,
    })
}

/// Verifies the reopened database after a cut and settles the oracle to what it shows.
fn verify_cut(
    db: &Db,
    tables: &[riptide::Table],
    exp: &Expected,
    base: &[u32],
    recs: &[WriteRec],
    sync: bool,
) -> Result<CutOutcome, String> {
    let seen: Vec<Option<u32>> = read_all(tables, exp.keys)?.into_iter().flatten().collect();
    let acked_fill = |th: u32, g: u32| {
        !sync
            && recs
                .iter()
                .any(|r| r.th == th && r.scratch == Some(g) && r.ack.is_some())
    };
    let scratch = ops::verify_scratch(db, exp, Some(&acked_fill))?;
    let out = check_cut(exp.keys, base, recs, &seen, &scratch, sync)?;
    for (i, &s) in out.state.iter().enumerate() {
        exp.resolve(i as u32 / exp.keys, i as u32 % exp.keys, s)?;
    }
    exp.clear_groups()?;
    Ok(out)
}

/// Runs `--power_cuts` rounds; returns whether every recovery verified.
pub fn run(a: &StressArgs, mix: &[u32; 10], seed: u64) -> Result<bool, String> {
    let fs = FaultFs::new();
    let gate = Arc::new(Gate::default());
    let exp = Expected::in_memory(a.tables, a.keys);
    let mut rng = StdRng::seed_from_u64(seed);
    println!(
        "riptide stress: power-cut mode, seed {seed}, {} cuts after {}..{} ms, sync={}, {} threads, {} tables x {} keys",
        a.power_cuts, a.cut_min_ms, a.cut_max_ms, a.sync, a.threads, a.tables, a.keys
    );
    let mut total = CutOutcome::default();
    let (mut prefix_cuts, mut sector_cuts, mut ops, mut counts) = (0u64, 0u64, 0u64, [0u64; 10]);
    let mut hist = History::new(a.threads);
    let mut base = vec![0u32; exp.tables as usize * exp.keys as usize];
    let mut last: (String, Vec<VecDeque<String>>) = (String::new(), Vec::new());
    let fail = |round: u32, what: &str, e: &str, last: &(String, Vec<VecDeque<String>>)| {
        eprintln!("riptide stress: FAILED (seed {seed}) in power-cut round {round}: {what}: {e}");
        if !last.0.is_empty() {
            eprintln!("the last round: {}", last.0);
        }
        for (th, ops) in last.1.iter().enumerate() {
            eprintln!("last operations of thread {th} before the cut, oldest first:");
            for op in ops {
                eprintln!("  {op}");
            }
        }
    };
    for round in 0..=a.power_cuts {
        let mut o = options(a).map_err(|e| e.to_string())?;
        o.fs = Arc::new(FencedFs {
            inner: fs.clone(),
            gate: gate.clone(),
            generation: gate.current(),
        });
        let db = match Db::open(&a.db, o) {
            Ok(db) => db,
            Err(e) => {
                fail(round, "reopening", &e.to_string(), &last);
                return Ok(false);
            }
        };
        let tables = open_tables(&db, a.tables)?;
        if round > 0 {
            match verify_cut(&db, &tables, &exp, &base, &hist.take(), a.sync) {
                Ok(out) => {
                    total.acked += out.acked;
                    total.lost_acked += out.lost_acked;
                    total.in_flight += out.in_flight;
                    total.in_flight_survived += out.in_flight_survived;
                    total.ambiguous += out.ambiguous;
                }
                Err(e) => {
                    fail(round, "verifying the recovered state", &e, &last);
                    return Ok(false);
                }
            }
        }
        base = (0..exp.tables)
            .flat_map(|t| (0..exp.keys).map(move |n| (t, n)))
            .map(|(t, n)| exp.get(t, n).0)
            .collect();
        if round == a.power_cuts {
            // A clean close and reopen keeps exactly the verified state.
            drop(tables);
            db.close().map_err(|e| format!("close: {e}"))?;
            let mut o = options(a).map_err(|e| e.to_string())?;
            o.fs = Arc::new(fs.clone());
            let db = Db::open(&a.db, o).map_err(|e| format!("reopen after a clean close: {e}"))?;
            let tables = open_tables(&db, a.tables)?;
            let again: Vec<Option<u32>> = read_all(&tables, exp.keys)?.into_iter().flatten().collect();
            if again != base.iter().map(|&s| shown(s)).collect::<Vec<_>>() {
                fail(round, "after a clean close", "the reopened database differs", &last);
                return Ok(false);
            }
            ops::verify_scratch(&db, &exp, None)?;
            drop(tables);
            db.close().map_err(|e| format!("close: {e}"))?;
            let report = riptide::inspect::verify(&fs, &a.db).map_err(|e| format!("inspect verify: {e}"))?;
            if !report.ok() {
                fail(round, "inspect verify", &format!("{:?}", report.problems), &last);
                return Ok(false);
            }
            break;
        }
        hist = History::new(a.threads);
        let mode = match round % 3 {
            0 => CrashMode::DropUnsynced,
            1 => {
                prefix_cuts += 1;
                CrashMode::KeepRandomPrefix { seed: rng.random() }
            }
            _ => {
                sector_cuts += 1;
                CrashMode::KeepRandomSectors { seed: rng.random() }
            }
        };
        let cut_after = Duration::from_millis(rng.random_range(a.cut_min_ms..=a.cut_max_ms.max(a.cut_min_ms)));
        let round_seed: u64 = rng.random();
        let cut = AtomicBool::new(false);
        let failure: Mutex<Option<String>> = Mutex::new(None);
        let finished = AtomicU32::new(0);
        let done_ops = AtomicU64::new(0);
        let logs: Vec<(VecDeque<String>, [u64; 10])> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..a.threads)
                .map(|th| {
                    let (db, tables, exp, hist) = (&db, &tables, &exp, &hist);
                    let (cut, failure, finished, done_ops) = (&cut, &failure, &finished, &done_ops);
                    s.spawn(move || {
                        let mut w = Worker::new(a, th, round_seed, db, tables, exp, Some(hist));
                        while !cut.load(Ordering::SeqCst) {
                            if let Err(e) = w.step(mix) {
                                if !cut.load(Ordering::SeqCst) {
                                    lock(failure).get_or_insert(format!("thread {th}: {e}"));
                                }
                                break;
                            }
                            done_ops.fetch_add(1, Ordering::Relaxed);
                        }
                        finished.fetch_add(1, Ordering::SeqCst);
                        (w.recent, w.counts)
                    })
                })
                .collect();
            let start = Instant::now();
            while start.elapsed() < cut_after && lock(&failure).is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            cut.store(true, Ordering::SeqCst);
            gate.cut(&fs, mode);
            // The old instance's threads must notice the cut and stop.
            let deadline = Instant::now() + Duration::from_secs(120);
            while finished.load(Ordering::SeqCst) < a.threads {
                if Instant::now() > deadline {
                    eprintln!(
                        "riptide stress: FAILED (seed {seed}) in power-cut round {round}: worker threads still \
                         running 120 s after the cut ({mode:?} after {cut_after:?})"
                    );
                    std::process::exit(1);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
        });
        for (_, c) in &logs {
            for (t, n) in counts.iter_mut().zip(c) {
                *t += n;
            }
        }
        last = (
            format!("{mode:?} after {cut_after:?} (worker seed {round_seed})"),
            logs.into_iter().map(|(l, _)| l).collect(),
        );
        ops += done_ops.load(Ordering::Relaxed);
        if let Some(e) = lock(&failure).take() {
            fail(round, "while writing before the cut", &e, &last);
            return Ok(false);
        }
        drop(tables);
        db.abandon_for_test();
    }
    println!(
        "DONE {} power cuts ({} keeping a random prefix of unsynced data, {} a random subset of the sectors of \
         unsynced overwrites); {ops} operations ({}), {} writes \
         acknowledged, {} acknowledged unsynced writes lost legitimately, {} of {} in-flight writes survived, \
         {} ambiguous absent keys resolved; 0 failures",
        a.power_cuts,
        prefix_cuts,
        sector_cuts,
        super::worker::fmt_counts(&counts),
        total.acked,
        total.lost_acked,
        total.in_flight_survived,
        total.in_flight,
        total.ambiguous
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stress::expected::{GroupKey, DELETED};

    /// One-key write `key` (table 0) to state `new` by thread 0.
    fn w(key: u32, old: u32, new: u32, start: u64, ack: Option<u64>) -> WriteRec {
        WriteRec {
            th: 0,
            start,
            ack,
            keys: vec![GroupKey {
                table: 0,
                key,
                old,
                new,
            }],
            scratch: None,
            what: format!("put k{key} -> {new:#x}"),
        }
    }

    fn batch(keys: &[(u32, u32)], start: u64, ack: Option<u64>) -> WriteRec {
        WriteRec {
            th: 1,
            start,
            ack,
            keys: keys
                .iter()
                .map(|&(key, new)| GroupKey {
                    table: 0,
                    key,
                    old: 0,
                    new,
                })
                .collect(),
            scratch: None,
            what: format!("batch {keys:?}"),
        }
    }

    #[test]
    fn a_prefix_passes_and_counts_the_lost() {
        // k0: 1 -> 2 (acked at 2) -> 3 (acked at 4); k1: 0 -> 5 (started 5, acked 6).
        let recs = [w(0, 1, 2, 1, Some(2)), w(0, 2, 3, 3, Some(4)), w(1, 0, 5, 5, Some(6))];
        let base = [1, 0];
        // Everything there.
        let out = check_cut(2, &base, &recs, &[Some(3), Some(5)], &[], true).unwrap();
        assert_eq!((out.state, out.lost_acked), (vec![3, 5], 0));
        // The last two lost: a prefix, fine without sync.
        let out = check_cut(2, &base, &recs, &[Some(2), None], &[], false).unwrap();
        assert_eq!((out.state.clone(), out.lost_acked, out.acked), (vec![2, 0], 2, 3));
        // ... but with sync=true an acknowledged write is missing.
        let e = check_cut(2, &base, &recs, &[Some(2), None], &[], true).unwrap_err();
        assert!(e.contains("acknowledged write is lost"), "{e}");
    }

    #[test]
    fn a_hole_is_caught() {
        // k0's write was acknowledged (2) before k1's started (3); k1's survived, k0's did not.
        let recs = [w(0, 0, 1, 1, Some(2)), w(1, 0, 1, 3, Some(4))];
        let e = check_cut(2, &[0, 0], &recs, &[None, Some(1)], &[], false).unwrap_err();
        assert!(e.contains("a hole"), "{e}");
        // Overlapping writes may land in either order.
        let recs = [w(0, 0, 1, 1, Some(4)), w(1, 0, 1, 2, Some(3))];
        check_cut(2, &[0, 0], &recs, &[None, Some(1)], &[], false).unwrap();
        // An in-flight write may survive or not, but not after a lost earlier one.
        let recs = [w(0, 0, 1, 1, Some(2)), w(1, 0, 1, 3, None)];
        check_cut(2, &[0, 0], &recs, &[Some(1), None], &[], false).unwrap();
        assert!(check_cut(2, &[0, 0], &recs, &[None, Some(1)], &[], false).is_err());
    }

    #[test]
    fn a_torn_batch_and_a_stranger_version_are_caught() {
        let recs = [batch(&[(0, 1), (1, 1)], 1, Some(2))];
        let e = check_cut(2, &[0, 0], &recs, &[Some(1), None], &[], false).unwrap_err();
        assert!(e.contains("torn"), "{e}");
        check_cut(2, &[0, 0], &recs, &[None, None], &[], false).unwrap();
        // A version nobody wrote (or the oracle forgot).
        let e = check_cut(2, &[0, 0], &recs, &[Some(7), Some(1)], &[], false).unwrap_err();
        assert!(e.contains("neither its state"), "{e}");
    }

    #[test]
    fn a_tampered_oracle_is_caught() {
        // The database is right; the oracle is corrupted in two ways the check must notice.
        let recs = [w(0, 1, 2, 1, Some(2)), w(1, 0, 5, 3, Some(4))];
        let seen = [Some(2), Some(5)];
        check_cut(2, &[1, 0], &recs, &seen, &[], true).unwrap();
        // It forgets a write: k1 shows a version the oracle never saw.
        assert!(check_cut(2, &[1, 0], &recs[..1], &seen, &[], true).is_err());
        // It claims a newer acknowledged write to k0 that the database lacks.
        let mut more = recs.to_vec();
        more.push(w(0, 2, 3, 5, Some(6)));
        assert!(check_cut(2, &[1, 0], &more, &seen, &[], true).is_err());
    }

    #[test]
    fn absent_keys_are_resolved_against_the_order() {
        // k0: base absent, put 1 (acked 2), delete 2 (start 3, acked 4). k1: put 1 (start 5).
        let recs = [
            w(0, 0, 1, 1, Some(2)),
            w(0, 1, 2 | DELETED, 3, Some(4)),
            w(1, 0, 1, 5, Some(6)),
        ];
        // k1 survived, so k0's writes (acknowledged before it started) did: k0 = the delete.
        let out = check_cut(2, &[0, 0], &recs, &[None, Some(1)], &[], false).unwrap();
        assert_eq!(out.state, vec![2 | DELETED, 1]);
        assert_eq!(out.ambiguous, 1);
        // Nothing survived: k0 is back to never written.
        let out = check_cut(2, &[0, 0], &recs, &[None, None], &[], false).unwrap();
        assert_eq!(out.state, vec![2 | DELETED, 0]);
        // With sync=true all were acknowledged, so k1 must be there.
        assert!(check_cut(2, &[0, 0], &recs, &[None, None], &[], true).is_err());
    }

    #[test]
    fn scratch_fills_take_part_in_the_order() {
        let fill = WriteRec {
            th: 2,
            start: 1,
            ack: Some(2),
            keys: vec![],
            scratch: Some(4),
            what: "fill x2".into(),
        };
        let recs = [fill, w(0, 0, 1, 3, Some(4))];
        check_cut(1, &[0], &recs, &[Some(1)], &[(2, 4, Seen::Full(4))], false).unwrap();
        let e = check_cut(1, &[0], &recs, &[Some(1)], &[(2, 4, Seen::Empty)], false).unwrap_err();
        assert!(e.contains("a hole"), "{e}");
    }
}
