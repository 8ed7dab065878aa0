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
//!   on a global clock ([`powercut::History`]).
//! - Every run starts by verifying the whole database against the expected state, resolving the
//!   writes that were in flight when the previous run died (the database holds either the old or
//!   the new version of such a key, and all or none of an atomic group's new versions; anything
//!   else is a failure), and ends the same way.
//! - `--crash_rounds=N` runs the workload as a child process N times, killing it with SIGKILL
//!   after a random time each round; each child verifies on start.
//! - `--power_cuts=N` ([`powercut`]) runs in process on the in-memory fault-injecting file system
//!   and cuts the power N times; `--crash_points` ([`whitebox`]) makes a child abort at each
//!   named crash point of the engine.
//! - A failure prints the seed, the thread and its last operations, and exits with status 1.

pub mod corrupt;
pub mod expected;
pub mod ops;
pub mod powercut;
pub mod whitebox;

use clap::Args;
use expected::{Expected, GroupKey, DELETED, MAX_THREADS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, Options, ReadOptions, Table, WriteBatch, WriteOptions};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// Internal: run as the crash driver's child
    #[arg(long, hide = true, default_value_t = false)]
    pub child: bool,
    /// Internal: tiny memtables and triggers (whitebox children), so every path runs soon
    #[arg(long, hide = true, default_value_t = false)]
    pub tiny: bool,
}

const OPS: [&str; 10] = [
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
const OP_TXN: usize = 8;

/// The weights of `--mix`: 10, or 8 (the mix before transactions and table create/drop, which
/// then get weight 0).
fn parse_mix(s: &str) -> Result<[u32; 10], String> {
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

fn options(a: &StressArgs) -> Options {
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
    o
}

fn expected_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".expected");
    PathBuf::from(p)
}

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
pub fn run(a: &StressArgs) -> Result<bool, String> {
    let mix = parse_mix(&a.mix)?;
    if a.threads == 0 || a.tables == 0 || a.keys == 0 || a.value_min > a.value_max || a.value_max > 1 << 20 {
        return Err("need --threads, --tables, --keys > 0 and --value_min <= --value_max <= 1 MiB".into());
    }
    if u64::from(a.tables) * u64::from(a.keys) > 1 << 28 || a.threads > MAX_THREADS || a.duration > 1 << 30 {
        return Err("--tables x --keys must be at most 2^28, --threads at most 1024, --duration at most 2^30 s".into());
    }
    let seed = if a.seed != 0 {
        a.seed
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    };
    let modes = [
        a.crash_rounds > 0,
        a.power_cuts > 0,
        a.crash_points.is_some(),
        a.corrupt_sweep > 0,
    ];
    if !a.child && modes.iter().filter(|&&m| m).count() > 1 {
        return Err("choose one of --crash_rounds, --power_cuts, --crash_points and --corrupt_sweep".into());
    }
    if a.corrupt_sweep > 0 {
        return corrupt::run(a, seed);
    }
    if a.power_cuts > 0 {
        return powercut::run(a, &mix, seed);
    }
    if let Some(points) = a.crash_points.as_deref().filter(|_| !a.child) {
        return whitebox::run(a, points, seed);
    }
    if a.crash_rounds > 0 && !a.child {
        return crash_driver(a, seed);
    }
    if let Some(parent) = a.db.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    let exp_path = expected_path(&a.db);
    // No database yet: an expected state left beside it (`rm -rf <db>` leaves `<db>.expected`
    // behind) describes writes this database never had, so it starts over. No acknowledged
    // write can be missing here: the expected state records a write only after `Db::open` has
    // created the directory.
    if !a.db.exists() && exp_path.exists() {
        std::fs::remove_file(&exp_path).map_err(|e| format!("removing the stale {}: {e}", exp_path.display()))?;
        println!(
            "riptide stress: {} does not exist; removed the expected state left by an earlier run",
            a.db.display()
        );
    }
    let exp = Expected::open(&exp_path, a.tables, a.keys)?;
    let db = Db::open(&a.db, options(a)).map_err(|e| format!("opening {}: {e}", a.db.display()))?;
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

/// Opens (or creates) the main tables `s0..s{n-1}`.
fn open_tables(db: &Db, n: u32) -> Result<Vec<Table>, String> {
    (0..n)
        .map(|i| match db.table(&format!("s{i}")) {
            Ok(t) => Ok(t),
            Err(_) => db.create_table(&format!("s{i}")),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tables: {e}"))
}

/// What the database shows for every key of every table (`[table][key]`: `None` = absent,
/// `Some(version)`), read with a full scan per table and a point read per key, which must
/// agree.
fn read_all(tables: &[Table], keys: u32) -> Result<Vec<Vec<Option<u32>>>, String> {
    let mut all = Vec::with_capacity(tables.len());
    for (ti, t) in tables.iter().enumerate() {
        let ti = ti as u32;
        let mut in_scan: Vec<Option<u32>> = vec![None; keys as usize];
        for item in t.iter(&ReadOptions::default()).map_err(|e| format!("scan: {e}"))? {
            let (k, v) = item.map_err(|e| format!("table s{ti}: scan failed: {e}"))?;
            let n = std::str::from_utf8(&k)
                .ok()
                .and_then(|s| s.strip_prefix('k'))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&n| n < keys)
                .ok_or_else(|| format!("table s{ti}: unexpected key {k:?}"))?;
            in_scan[n as usize] = Some(parse_value(ti, n, &v)?);
        }
        for n in 0..keys {
            let point = t
                .get(&key(n))
                .map_err(|e| format!("table s{ti} key {n}: get failed: {e}"))?
                .map(|v| parse_value(ti, n, &v))
                .transpose()?;
            if point != in_scan[n as usize] {
                return Err(format!(
                    "table s{ti} key {n}: get says {point:?}, the scan {:?}",
                    in_scan[n as usize]
                ));
            }
        }
        all.push(in_scan);
    }
    Ok(all)
}

/// Checks that each atomic write that was in flight (a thread's group record) is wholly
/// present or wholly absent in `seen`; a key whose old and new states look the same (absent
/// both) says nothing.
fn check_groups(exp: &Expected, seen: &[Vec<Option<u32>>]) -> Result<(), String> {
    for th in 0..MAX_THREADS {
        let g = exp.group(th);
        let (mut applied, mut missing) = (Vec::new(), Vec::new());
        for k in &g {
            let (old, new) = (shown(k.old), shown(k.new));
            let got = seen[k.table as usize][k.key as usize];
            if old == new {
                continue;
            }
            if got == new {
                applied.push(format!("s{} k{}", k.table, k.key));
            } else if got == old {
                missing.push(format!("s{} k{}", k.table, k.key));
            }
        }
        if !applied.is_empty() && !missing.is_empty() {
            return Err(format!(
                "an atomic write of thread {th} is torn: {applied:?} have the new version, {missing:?} the old one \
                 (the write: {g:?})"
            ));
        }
    }
    Ok(())
}

/// Reads every key of every table and the scratch tables and compares them with the expected
/// state; resolves in-flight writes (each key to its old or new version, each atomic group
/// wholly). Returns how many keys were resolved.
fn verify_all(db: &Db, tables: &[Table], exp: &Expected) -> Result<u64, String> {
    let seen = read_all(tables, exp.keys)?;
    check_groups(exp, &seen)?;
    let mut resolved = 0;
    for (ti, col) in seen.iter().enumerate() {
        let ti = ti as u32;
        for n in 0..exp.keys {
            let point = col[n as usize];
            let (c, p) = exp.get(ti, n);
            if point == shown(c) {
                if p != 0 {
                    exp.resolve(ti, n, c)?;
                    resolved += 1;
                }
            } else if p != 0 && point == shown(p) {
                exp.resolve(ti, n, p)?;
                resolved += 1;
            } else {
                return Err(format!(
                    "table s{ti} key {n}: the database has version {point:?}; expected {:?}{}",
                    shown(c),
                    if p != 0 {
                        format!(" or the in-flight {:?}", shown(p))
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    exp.clear_groups()?;
    ops::verify_scratch(db, exp, None)?;
    Ok(resolved)
}

struct Worker<'a> {
    a: &'a StressArgs,
    th: u32,
    rng: StdRng,
    recent: VecDeque<String>,
    db: &'a Db,
    tables: &'a [Table],
    exp: &'a Expected,
    /// Power-cut mode: the clock and log of writes.
    hist: Option<&'a powercut::History>,
    /// Operations started, by kind (`OPS`).
    counts: [u64; 10],
}

impl<'a> Worker<'a> {
    fn new(
        a: &'a StressArgs,
        th: u32,
        seed: u64,
        db: &'a Db,
        tables: &'a [Table],
        exp: &'a Expected,
        hist: Option<&'a powercut::History>,
    ) -> Worker<'a> {
        Worker {
            a,
            th,
            rng: StdRng::seed_from_u64(seed.wrapping_add(u64::from(th).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
            recent: VecDeque::new(),
            db,
            tables,
            exp,
            hist,
            counts: [0; 10],
        }
    }

    /// Performs one write of `keys` (each `(table, key, new state)`; empty for a scratch-table
    /// fill, which `scratch` names by generation) through `f`, keeping the expected state (and
    /// in power-cut mode the history) in step: pending before, committed after the
    /// acknowledgement.
    fn write(
        &mut self,
        keys: &[(u32, u32, u32)],
        scratch: Option<u32>,
        what: String,
        f: impl FnOnce() -> riptide::Result<()>,
    ) -> Result<(), String> {
        let group: Vec<GroupKey> = keys
            .iter()
            .map(|&(table, key, new)| GroupKey {
                table,
                key,
                old: self.exp.get(table, key).0,
                new,
            })
            .collect();
        self.log(what.clone());
        if group.len() > 1 {
            self.exp.set_group(self.th, &group)?;
        }
        for k in &group {
            self.exp.begin(k.table, k.key, k.new)?;
        }
        let stamped = self.hist.map(|h| (h, h.stamp()));
        let r = f();
        if let Some((h, start)) = stamped {
            let ack = r.is_ok().then(|| h.stamp());
            h.record(self.th, start, ack, group.clone(), scratch, what.clone());
        }
        r.map_err(|e| format!("{what} failed: {e}"))?;
        for k in &group {
            self.exp.commit(k.table, k.key)?;
        }
        if group.len() > 1 {
            self.exp.clear_group(self.th)?;
        }
        Ok(())
    }

    fn log(&mut self, op: String) {
        if self.recent.len() == 32 {
            self.recent.pop_front();
        }
        self.recent.push_back(op);
    }

    /// A key this thread owns.
    /// A key this thread owns (`step` runs only for threads that own at least one).
    fn own_key(&mut self) -> u32 {
        let per = (self.a.keys - self.th - 1) / self.a.threads + 1;
        self.th + self.rng.random_range(0..per) * self.a.threads
    }

    fn wopts(&self) -> WriteOptions {
        WriteOptions {
            sync: self.a.sync,
            ..Default::default()
        }
    }

    fn step(&mut self, mix: &[u32; 10]) -> Result<(), String> {
        if self.th >= self.a.keys {
            return Ok(()); // more threads than keys: this one owns nothing
        }
        let total: u32 = mix.iter().sum();
        let mut r = self.rng.random_range(0..total);
        let op = mix.iter().position(|&w| {
            if r < w {
                true
            } else {
                r -= w;
                false
            }
        });
        let t = self.rng.random_range(0..self.a.tables);
        self.counts[op.unwrap_or(0)] += 1;
        match op.unwrap_or(0) {
            0 | 1 => {
                let n = self.own_key();
                let delete = op == Some(1);
                let v = self.exp.next(t, n, delete);
                let (tab, val, wo) = (&self.tables[t as usize], value(t, n, v, self.a), self.wopts());
                let what = format!("{} s{t} k{n} -> {v:#x}", if delete { "delete" } else { "put" });
                self.write(&[(t, n, v)], None, what, || {
                    if delete {
                        tab.delete_opt(&key(n), &wo)
                    } else {
                        tab.put_opt(&key(n), &val, &wo)
                    }
                })
            }
            2 => {
                let mut b = WriteBatch::new();
                let mut keys = Vec::new();
                for _ in 0..self.rng.random_range(2..=6) {
                    let t = self.rng.random_range(0..self.a.tables);
                    let n = self.own_key();
                    if keys.iter().any(|&(t2, n2, _)| (t2, n2) == (t, n)) {
                        continue;
                    }
                    let v = self.exp.next(t, n, self.rng.random_bool(0.2));
                    let tab = &self.tables[t as usize];
                    if v & DELETED != 0 {
                        b.delete(tab, &key(n))
                    } else {
                        b.put(tab, &key(n), &value(t, n, v, self.a))
                    }
                    .map_err(|e| format!("batch: {e}"))?;
                    keys.push((t, n, v));
                }
                let (db, wo) = (self.db, self.wopts());
                self.write(&keys, None, format!("batch {}", fmt_keys(&keys)), || db.write(b, &wo))
            }
            3 => {
                let n = self.own_key();
                self.log(format!("get s{t} k{n}"));
                self.check_key(t, n, None)
            }
            4 => {
                let start = self.rng.random_range(0..self.a.keys);
                let end = start.saturating_add(64).min(self.a.keys);
                self.log(format!("scan s{t} k{start}..k{end}"));
                let opts = ReadOptions {
                    lower_bound: Some(key(start)),
                    upper_bound: Some(key(end)),
                    ..Default::default()
                };
                let mut seen = vec![None; (end - start) as usize];
                for item in self.tables[t as usize].iter(&opts).map_err(|e| e.to_string())? {
                    let (k, v) = item.map_err(|e| format!("scan failed: {e}"))?;
                    let n: u32 = std::str::from_utf8(&k[1..])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .filter(|n| (start..end).contains(n))
                        .ok_or_else(|| format!("scan returned {k:?} outside its bounds"))?;
                    seen[(n - start) as usize] = Some(parse_value(t, n, &v)?);
                }
                for n in start..end {
                    if n % self.a.threads == self.th {
                        let want = shown(self.exp.get(t, n).0);
                        if seen[(n - start) as usize] != want {
                            return Err(format!(
                                "scan: s{t} k{n} is {:?}, expected {want:?}",
                                seen[(n - start) as usize]
                            ));
                        }
                    }
                }
                Ok(())
            }
            5 => {
                let snap = self.db.snapshot();
                let keys: Vec<u32> = (0..4).map(|_| self.own_key()).collect();
                let before: Vec<Option<u32>> = keys.iter().map(|&n| shown(self.exp.get(t, n).0)).collect();
                self.log(format!("snapshot check s{t} {keys:?}"));
                for &n in &keys {
                    let v = self.exp.next(t, n, false);
                    let (tab, val, wo) = (&self.tables[t as usize], value(t, n, v, self.a), self.wopts());
                    self.write(&[(t, n, v)], None, format!("put s{t} k{n} -> {v:#x}"), || {
                        tab.put_opt(&key(n), &val, &wo)
                    })?;
                }
                for (&n, want) in keys.iter().zip(before) {
                    self.check_key(t, n, Some((&snap, want)))?;
                }
                Ok(())
            }
            6 => {
                self.log(format!("flush s{t}"));
                self.tables[t as usize]
                    .flush()
                    .map_err(|e| format!("flush failed: {e}"))
            }
            8 => self.txn_step(),
            9 => self.scratch_step(),
            _ => {
                let lo = self.rng.random_range(0..self.a.keys);
                let hi = lo.saturating_add(self.a.keys / 10).min(self.a.keys - 1);
                self.log(format!("compact_range s{t} k{lo}..=k{hi}"));
                self.tables[t as usize]
                    .compact_range(Some(&key(lo)), Some(&key(hi)))
                    .map_err(|e| format!("compact_range failed: {e}"))
            }
        }
    }

    /// A point read of an own key equals the expected state (or, at a snapshot, `want`).
    fn check_key(&self, t: u32, n: u32, at: Option<(&riptide::Snapshot, Option<u32>)>) -> Result<(), String> {
        let opts = ReadOptions {
            snapshot: at.map(|(s, _)| s.clone()),
            ..Default::default()
        };
        let got = self.tables[t as usize]
            .get_opt(&key(n), &opts)
            .map_err(|e| format!("get failed: {e}"))?
            .map(|v| parse_value(t, n, &v))
            .transpose()?;
        let want = match at {
            Some((_, w)) => w,
            None => shown(self.exp.get(t, n).0),
        };
        if got != want {
            return Err(format!(
                "{}s{t} k{n} is {got:?}, expected {want:?}",
                if at.is_some() { "at a snapshot, " } else { "" }
            ));
        }
        Ok(())
    }
}

/// `put 12, delete 3, ...`: operations by kind.
fn fmt_counts(counts: &[u64; 10]) -> String {
    let parts: Vec<String> = OPS.iter().zip(counts).map(|(o, n)| format!("{o} {n}")).collect();
    parts.join(", ")
}

/// `s{t} k{n}={version:#x}` for each key of a write.
fn fmt_keys(keys: &[(u32, u32, u32)]) -> String {
    let parts: Vec<String> = keys.iter().map(|(t, n, v)| format!("s{t} k{n}={v:#x}")).collect();
    parts.join(", ")
}

/// A child `riptide stress` run of the workload of `a` on `db` (`--child`: it verifies on start
/// and skips the drivers), with its own seed and duration; the caller adds the rest.
pub(crate) fn child_command(exe: &Path, a: &StressArgs, db: &Path, seed: u64, duration: u64) -> std::process::Command {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("stress")
        .arg(format!("--db={}", db.display()))
        .arg(format!("--duration={duration}"))
        .arg(format!("--threads={}", a.threads))
        .arg(format!("--tables={}", a.tables))
        .arg(format!("--keys={}", a.keys))
        .arg(format!("--value_min={}", a.value_min))
        .arg(format!("--value_max={}", a.value_max))
        .arg(format!("--mix={}", a.mix))
        .arg(format!("--seed={seed}"))
        .arg(format!("--sync={}", a.sync))
        .arg(format!("--row_cache_size={}", a.row_cache_size))
        .arg(format!("--block_cache_size={}", a.block_cache_size))
        .arg("--child");
    cmd
}

/// The blackbox crash loop: runs the workload in a child, kills it after a random time,
/// repeats; each child verifies the recovered state first. A last run verifies at the end.
fn crash_driver(a: &StressArgs, seed: u64) -> Result<bool, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = StdRng::seed_from_u64(seed);
    println!(
        "riptide stress: crash mode, seed {seed}, {} rounds, kill after {}..{} ms",
        a.crash_rounds, a.kill_min_ms, a.kill_max_ms
    );
    let (mut killed, mut resolved, mut verified_rounds) = (0, 0u64, 0u64);
    for round in 0..=a.crash_rounds {
        let last = round == a.crash_rounds;
        let child_seed: u64 = rng.random();
        let mut cmd = child_command(&exe, a, &a.db, child_seed, if last { 1 } else { a.duration });
        cmd.arg(format!("--small={}", a.small))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| format!("starting the child: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        let verified = |lines: &[String]| lines.iter().any(|l| l.starts_with("VERIFIED "));
        let status = if last {
            child.wait().map_err(|e| e.to_string())?
        } else {
            let kill_at = Duration::from_millis(rng.random_range(a.kill_min_ms..=a.kill_max_ms.max(a.kill_min_ms)));
            let start = Instant::now();
            loop {
                if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                    break st;
                }
                if start.elapsed() >= kill_at {
                    let _ = child.kill();
                    break child.wait().map_err(|e| e.to_string())?;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let lines = reader.join().unwrap_or_default();
        resolved += lines
            .iter()
            .filter_map(|l| l.split(" keys (").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        verified_rounds += u64::from(verified(&lines));
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(libc::SIGKILL) {
            killed += 1;
        } else if !status.success() {
            eprintln!(
                "riptide stress: round {round} failed (seed {seed}, child seed {child_seed}, {status}); its output:\n{}",
                lines.join("\n")
            );
            return Ok(false);
        }
        if last && !(verified(&lines) && lines.iter().any(|l| l.starts_with("DONE "))) {
            return Err(format!("the final run did not verify: {}", lines.join("\n")));
        }
    }
    println!(
        "DONE {} rounds ({killed} killed by SIGKILL while running); {verified_rounds} recoveries verified, \
         {resolved} in-flight writes resolved",
        a.crash_rounds
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_atomic_write_is_caught_after_a_kill() {
        let exp = Expected::in_memory(2, 4);
        let g = [
            GroupKey {
                table: 0,
                key: 1,
                old: 3,
                new: 4,
            },
            GroupKey {
                table: 1,
                key: 1,
                old: 0,
                new: 1 | DELETED,
            },
            GroupKey {
                table: 1,
                key: 2,
                old: 5 | DELETED,
                new: 6,
            },
        ];
        exp.set_group(1, &g).unwrap();
        let seen = |a: Option<u32>, b: Option<u32>| vec![vec![None, a, None, None], vec![None, None, b, None]];
        // All new, or all old (k1 of s1 says nothing: absent before and after).
        check_groups(&exp, &seen(Some(4), Some(6))).unwrap();
        check_groups(&exp, &seen(Some(3), None)).unwrap();
        // Half of it.
        let e = check_groups(&exp, &seen(Some(4), None)).unwrap_err();
        assert!(e.contains("torn"), "{e}");
        assert!(check_groups(&exp, &seen(Some(3), Some(6))).is_err());
    }

    #[test]
    fn mix_takes_eight_or_ten_weights() {
        assert_eq!(parse_mix("1,0,0,0,0,0,0,0").unwrap(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse_mix("0,0,0,1,0,0,0,0,1,1").unwrap()[OP_TXN], 1);
        assert!(parse_mix("0,0,0,1,0,0,0,0").is_err());
        assert!(parse_mix("1,2,3").is_err());
    }
}
