//! Concurrency tests: while writers commit, every reader's view is a consistent prefix of the
//! committed batches.
//!
//! Writer `w` commits batches numbered 1, 2, ...; batch `c` puts one value into the keys
//! `w{w}-k0..k4` of both tables A and B: `c` (big-endian), then the counters of every writer
//! that were already acknowledged when the batch was submitted, then padding. Readers repeatedly
//! take a snapshot, read every key with `multi_get` and with iterators (`iter`, `.rev()`, and
//! `raw_iter` cursors with direction changes) at that snapshot, and check:
//! - atomicity: the ten keys of a writer hold the same batch (never half a batch);
//! - no holes: a batch is only visible together with every batch acknowledged before it was
//!   submitted (a view never shows LSN n+1 without n);
//! - monotonicity: per writer, counters never go back across a reader's successive snapshots,
//!   nor across successive point reads; snapshot LSNs never go back;
//! - visibility: a snapshot taken after an acknowledgement sees it; writers read their own
//!   writes; reading the same snapshot twice gives the same answer.
//!
//! Variants: blocking `write` on the real file system; `write_async` with a window of in-flight
//! handles, most completed through `on_complete` callbacks; and mixed `sync: true` / `false`
//! writes over `write_queues` (1, 4, 16) × `max_group_size` (1, 2, 128) (with 8, 0 and 1
//! followers invited to insert in parallel; waiters polling 200 µs before they sleep with 16
//! queues), on the real file system
//! (fsync latency makes commit groups form) and on `FaultFs` with a power cut in the middle of
//! the run, after which the recovered state must be a consistent prefix holding every
//! acknowledged synced batch.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::{CrashMode, FaultFs};
use riptide::{Db, Error, Options, ReadOptions, Table, WriteBatch, WriteHandle, WriteOptions};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Writers.
const W: usize = 6;
/// Keys per writer per table.
const KEYS: usize = 5;
/// Slots per writer in a view: KEYS in table A, then KEYS in table B.
const SLOTS: usize = 2 * KEYS;
const HEADER: usize = 8 * (W + 1);

fn key(w: usize, j: usize) -> Vec<u8> {
    format!("w{w}-k{j}").into_bytes()
}

fn parse_key(k: &[u8]) -> Option<(usize, usize)> {
    let s = std::str::from_utf8(k).ok()?;
    let (w, j) = s.strip_prefix('w')?.split_once("-k")?;
    let (w, j) = (w.parse().ok()?, j.parse().ok()?);
    (w < W && j < KEYS).then_some((w, j))
}

/// What a batch writes: its counter and the counters acknowledged before it was submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    counter: u64,
    deps: [u64; W],
}

fn encode(s: &Stamp, pad: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + pad);
    v.extend_from_slice(&s.counter.to_be_bytes());
    for d in s.deps {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.resize(HEADER + pad, s.counter as u8);
    v
}

fn decode(v: &[u8]) -> Result<Stamp, String> {
    if v.len() < HEADER {
        return Err(format!("value of {} bytes is shorter than a stamp", v.len()));
    }
    let word = |i: usize| u64::from_be_bytes(v[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let counter = word(0);
    if v[HEADER..].iter().any(|&b| b != counter as u8) {
        return Err(format!("garbled padding in the value of batch {counter}"));
    }
    let mut deps = [0; W];
    for (x, d) in deps.iter_mut().enumerate() {
        *d = word(x + 1);
    }
    Ok(Stamp { counter, deps })
}

/// The error text of a read or write refused because the instance was stopped (power-cut runs).
const CLOSED: &str = "database is closed";

fn err(what: &str, e: Error) -> String {
    match e {
        Error::Closed => CLOSED.to_string(),
        e => format!("{what}: {e}"),
    }
}

/// Entries of a table, in key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// One read of every key: `cells[w][slot]`, `None` where the key is absent.
type Cells = [[Option<Stamp>; SLOTS]; W];

/// Checks that a view is a consistent prefix; returns each writer's counter (0: none yet).
fn check_view(cells: &Cells) -> Result<[u64; W], String> {
    let mut counters = [0; W];
    for (w, (row, counter)) in cells.iter().zip(&mut counters).enumerate() {
        let first = row[0];
        if let Some(i) = row.iter().position(|c| *c != first) {
            let all: Vec<Option<u64>> = row.iter().map(|c| c.map(|s| s.counter)).collect();
            return Err(format!(
                "torn batch of writer {w}: slot 0 holds batch {:?}, slot {i} batch {:?} (slots: {all:?})",
                first.map(|s| s.counter),
                row[i].map(|s| s.counter)
            ));
        }
        *counter = first.map_or(0, |s| s.counter);
    }
    for (w, row) in cells.iter().enumerate() {
        let Some(s) = row[0] else { continue };
        for (x, (&have, &dep)) in counters.iter().zip(&s.deps).enumerate() {
            if have < dep {
                return Err(format!(
                    "hole: batch {} of writer {w} is visible, but batch {dep} of writer {x}, acknowledged before it \
                     was submitted, is not (writer {x} is at {have})",
                    s.counter
                ));
            }
        }
    }
    Ok(counters)
}

struct Ctx {
    db: Db,
    tables: [Table; 2],
    /// Highest batch of each writer known to be acknowledged.
    acked: [AtomicU64; W],
    /// Highest acknowledged batch of each writer written with `sync`.
    synced: [AtomicU64; W],
    /// Writes submitted with `sync`.
    sync_writes: AtomicU64,
    writers_running: AtomicUsize,
    /// Set just before a power cut stops the instance mid-run: `Closed` errors are expected then.
    crashed: AtomicBool,
    failed: AtomicBool,
    errors: Mutex<Vec<String>>,
}

impl Ctx {
    /// A fresh database: creates tables A and B.
    fn new(db: Db) -> Arc<Ctx> {
        db.create_table("A").unwrap();
        db.create_table("B").unwrap();
        Arc::new(Ctx::attach(db))
    }

    /// A reopened database holding tables A and B.
    fn attach(db: Db) -> Ctx {
        let tables = [db.table("A").unwrap(), db.table("B").unwrap()];
        Ctx {
            db,
            tables,
            acked: Default::default(),
            synced: Default::default(),
            sync_writes: AtomicU64::new(0),
            writers_running: AtomicUsize::new(0),
            crashed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            errors: Mutex::new(Vec::new()),
        }
    }

    fn acked(&self) -> [u64; W] {
        std::array::from_fn(|w| self.acked[w].load(Ordering::Acquire))
    }

    fn fail(&self, msg: String) {
        self.failed.store(true, Ordering::Release);
        self.errors.lock().unwrap().push(msg);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// True if `e` is the expected consequence of a power cut: the abandoned database refuses
    /// new operations (`Closed`), and a read already past that check when the power went finds
    /// its file handle dead (FaultFs's error for handles from before a crash).
    fn stopped(&self, e: &str) -> bool {
        self.crashed.load(Ordering::Acquire) && (e == CLOSED || e.ends_with("file handle from before crash"))
    }

    fn batch(&self, w: usize, value: &[u8]) -> WriteBatch {
        let mut b = WriteBatch::new();
        for j in 0..KEYS {
            b.put(&self.tables[0], &key(w, j), value).unwrap();
            b.put(&self.tables[1], &key(w, j), value).unwrap();
        }
        b
    }

    fn read_multi_get(&self, ropts: &ReadOptions) -> Result<Cells, String> {
        let keys: Vec<(&Table, Vec<u8>)> = (0..W)
            .flat_map(|w| (0..SLOTS).map(move |s| (w, s)))
            .map(|(w, s)| (&self.tables[s / KEYS], key(w, s % KEYS)))
            .collect();
        let got = self.db.multi_get(ropts, &keys);
        let mut cells: Cells = [[None; SLOTS]; W];
        for (i, r) in got.into_iter().enumerate() {
            let v = r.map_err(|e| err("multi_get", e))?;
            cells[i / SLOTS][i % SLOTS] = v.map(|v| decode(&v)).transpose()?;
        }
        Ok(cells)
    }

    /// Reads both tables with iterators, in one of several styles.
    fn read_iters(&self, ropts: &ReadOptions, style: usize, rng: &mut StdRng) -> Result<Cells, String> {
        let mut cells: Cells = [[None; SLOTS]; W];
        for (ti, table) in self.tables.iter().enumerate() {
            let entries: Entries = match (style + ti) % 3 {
                0 => table
                    .iter(ropts)
                    .and_then(|it| it.collect())
                    .map_err(|e| err("iter", e))?,
                1 => {
                    let mut v: Vec<_> = table
                        .iter(ropts)
                        .and_then(|it| it.rev().collect())
                        .map_err(|e| err("iter", e))?;
                    v.reverse();
                    v
                }
                _ => cursor_scan(table, ropts, rng)?,
            };
            for pair in entries.windows(2) {
                if pair[0].0 >= pair[1].0 {
                    return Err(format!("iterator out of order: {:?} then {:?}", pair[0].0, pair[1].0));
                }
            }
            for (k, v) in entries {
                let (w, j) = parse_key(&k).ok_or_else(|| format!("unexpected key {k:?}"))?;
                cells[w][ti * KEYS + j] = Some(decode(&v)?);
            }
        }
        Ok(cells)
    }
}

/// Walks a table with a raw cursor: backward from the end, with a random detour (next, then
/// prev again) that must land on the same entries. Returns the entries in key order.
fn cursor_scan(table: &Table, ropts: &ReadOptions, rng: &mut StdRng) -> Result<Entries, String> {
    let mut it = table.raw_iter(ropts).map_err(|e| err("raw_iter", e))?;
    let mut out = Vec::new();
    it.seek_to_last();
    while it.valid() {
        let here = (it.key().to_vec(), it.value().to_vec());
        if rng.random_bool(0.2) {
            it.next();
            if it.valid() {
                let after = it.key().to_vec();
                if Some(&after) != out.last().map(|(k, _): &(Vec<u8>, Vec<u8>)| k) {
                    return Err(format!("cursor: next from {:?} gave {after:?}", here.0));
                }
                it.prev();
            } else {
                it.seek_for_prev(&here.0);
            }
            if !it.valid() || it.key() != here.0.as_slice() || it.value() != here.1.as_slice() {
                return Err(format!("cursor: direction change did not return to {:?}", here.0));
            }
        }
        out.push(here);
        it.prev();
    }
    it.status().map_err(|e| err("status", e))?;
    out.reverse();
    Ok(out)
}

/// A reader loop until the writers are done; returns the number of views checked.
fn reader(ctx: &Ctx, id: u64) -> Result<u64, String> {
    let mut rounds = 0;
    match reader_rounds(ctx, id, &mut rounds) {
        Err(e) if !ctx.stopped(&e) => Err(e),
        _ => Ok(rounds),
    }
}

fn reader_rounds(ctx: &Ctx, id: u64, rounds: &mut u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(id);
    let mut last = [0u64; W];
    let mut last_lsn = 0;
    while (ctx.writers_running.load(Ordering::Acquire) > 0 || *rounds < 3) && !ctx.failed() {
        *rounds += 1;
        let floor = ctx.acked();
        let snap = ctx.db.snapshot();
        if snap.lsn() < last_lsn {
            return Err(format!("snapshot LSN went back from {last_lsn} to {}", snap.lsn()));
        }
        last_lsn = snap.lsn();
        let at_snap = ReadOptions {
            snapshot: Some(snap.clone()),
            ..Default::default()
        };
        let v1 = ctx.read_multi_get(&at_snap)?;
        let c1 = check_view(&v1).map_err(|e| format!("multi_get at snapshot {}: {e}", snap.lsn()))?;
        for w in 0..W {
            if c1[w] < floor[w] {
                return Err(format!(
                    "snapshot {} misses batch {} of writer {w}, acknowledged before it was taken (sees {})",
                    snap.lsn(),
                    floor[w],
                    c1[w]
                ));
            }
            if c1[w] < last[w] {
                return Err(format!(
                    "writer {w} went back from batch {} to {} between snapshots",
                    last[w], c1[w]
                ));
            }
        }
        let v2 = ctx.read_iters(&at_snap, *rounds as usize, &mut rng)?;
        if v2 != v1 {
            let c2 = check_view(&v2).map_err(|e| format!("iterators at snapshot {}: {e}", snap.lsn()))?;
            return Err(format!(
                "snapshot {} read twice differs: multi_get {c1:?}, iterators {c2:?}",
                snap.lsn()
            ));
        }
        // The latest state (no snapshot) is newer still.
        let v3 = ctx.read_multi_get(&ReadOptions::default())?;
        let c3 = check_view(&v3).map_err(|e| format!("multi_get at latest: {e}"))?;
        if let Some(w) = (0..W).find(|&w| c3[w] < c1[w]) {
            return Err(format!(
                "latest read of writer {w} ({}) older than snapshot ({})",
                c3[w], c1[w]
            ));
        }
        // Successive point reads never go back.
        let w = rng.random_range(0..W);
        let mut prev = c3[w];
        for s in 0..SLOTS {
            let got = ctx.tables[s / KEYS].get(&key(w, s % KEYS)).map_err(|e| err("get", e))?;
            let c = got.map(|v| decode(&v)).transpose()?.map_or(0, |s| s.counter);
            if c < prev {
                return Err(format!("point reads of writer {w} went back from batch {prev} to {c}"));
            }
            prev = c;
        }
        last = c3;
    }
    Ok(())
}

/// Blocking writer: `n` batches; each synced with probability `sync_p`.
fn writer(ctx: &Ctx, w: usize, n: u64, sync_p: f64) -> Result<(), String> {
    match writer_batches(ctx, w, n, sync_p) {
        Err(e) if !ctx.stopped(&e) => Err(e),
        _ => Ok(()),
    }
}

fn writer_batches(ctx: &Ctx, w: usize, n: u64, sync_p: f64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(1000 + w as u64);
    for c in 1..=n {
        if ctx.failed() {
            return Ok(());
        }
        let deps = ctx.acked();
        if deps[w] != c - 1 {
            return Err(format!("writer {w}: own acked counter {} before batch {c}", deps[w]));
        }
        let v = encode(&Stamp { counter: c, deps }, rng.random_range(0..400));
        let sync = rng.random_bool(sync_p);
        ctx.sync_writes.fetch_add(u64::from(sync), Ordering::Relaxed);
        ctx.db
            .write(
                ctx.batch(w, &v),
                &WriteOptions {
                    sync,
                    ..Default::default()
                },
            )
            .map_err(|e| err(&format!("writer {w}: batch {c}"), e))?;
        ctx.acked[w].store(c, Ordering::Release);
        if sync {
            ctx.synced[w].store(c, Ordering::Release);
        }
        // Read your writes: nobody else writes this writer's keys.
        let j = c as usize % KEYS;
        for t in &ctx.tables {
            let got = t.get(&key(w, j)).map_err(|e| err("get", e))?;
            if got.as_deref() != Some(v.as_slice()) {
                let seen = got.map(|g| decode(&g).map(|s| s.counter));
                return Err(format!(
                    "writer {w} does not read its own batch {c} from {} (sees {seen:?})",
                    t.name()
                ));
            }
        }
    }
    Ok(())
}

/// Asynchronous writer: up to `n` batches through `write_async`, at most `depth` in flight;
/// every fourth handle is waited on, the others complete through `on_complete` callbacks. Every
/// handle must complete, and with `Ok` (unless a power cut stopped the instance).
fn async_writer(ctx: &Arc<Ctx>, w: usize, n: u64, depth: u64, sync_p: f64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(2000 + w as u64);
    let completed = Arc::new(AtomicU64::new(0));
    let mut submitted = 0;
    let mut waited = VecDeque::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_one = |waited: &mut VecDeque<(u64, bool, WriteHandle)>| -> Result<(), String> {
        let (c, sync, h) = waited.pop_front().expect("a handle");
        let r = h.wait();
        completed.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = r {
            let e = err(&format!("writer {w}: batch {c} failed"), e);
            return if ctx.stopped(&e) { Ok(()) } else { Err(e) };
        }
        ctx.acked[w].fetch_max(c, Ordering::AcqRel);
        if sync {
            ctx.synced[w].fetch_max(c, Ordering::AcqRel);
        }
        Ok(())
    };
    for c in 1..=n {
        if ctx.failed() || ctx.crashed.load(Ordering::Acquire) {
            break;
        }
        while c - 1 - completed.load(Ordering::Acquire) >= depth {
            if Instant::now() > deadline {
                return Err(format!("writer {w}: handles stopped completing before batch {c}"));
            }
            if waited.is_empty() {
                std::thread::yield_now();
            } else {
                wait_one(&mut waited)?;
            }
        }
        let v = encode(
            &Stamp {
                counter: c,
                deps: ctx.acked(),
            },
            rng.random_range(0..400),
        );
        let sync = rng.random_bool(sync_p);
        ctx.sync_writes.fetch_add(u64::from(sync), Ordering::Relaxed);
        let h = ctx.db.write_async(
            ctx.batch(w, &v),
            &WriteOptions {
                sync,
                ..Default::default()
            },
        );
        submitted += 1;
        if c % 4 == 0 {
            waited.push_back((c, sync, h));
        } else {
            let (cx, done) = (ctx.clone(), completed.clone());
            h.on_complete(move |r| {
                match r {
                    Ok(()) => {
                        cx.acked[w].fetch_max(c, Ordering::AcqRel);
                        if sync {
                            cx.synced[w].fetch_max(c, Ordering::AcqRel);
                        }
                    }
                    Err(e) => {
                        let e = err(&format!("writer {w}: batch {c} completed with an error"), e);
                        if !cx.stopped(&e) {
                            cx.fail(e);
                        }
                    }
                }
                done.fetch_add(1, Ordering::AcqRel);
            });
        }
    }
    while !waited.is_empty() {
        wait_one(&mut waited)?;
    }
    while completed.load(Ordering::Acquire) < submitted {
        if Instant::now() > deadline {
            return Err(format!(
                "writer {w}: only {} of {submitted} handles completed",
                completed.load(Ordering::Acquire)
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// A power cut in the middle of a run: once `after` batches in all were acknowledged, the
/// instance is stopped (`abandon_for_test`) and the file system crashes, while the writers and
/// readers go on (and get `Closed`).
struct PowerCut {
    fs: FaultFs,
    mode: CrashMode,
    after: u64,
}

/// Runs writer and reader threads to the end; panics with every error reported.
fn run(
    ctx: &Arc<Ctx>,
    readers: u64,
    power_cut: Option<PowerCut>,
    writer_fn: impl Fn(&Arc<Ctx>, usize) -> Result<(), String> + Sync,
) -> Vec<u64> {
    run_with(ctx, readers, power_cut, writer_fn, |_| Ok(()))
}

/// [`run`], plus `side` on one more thread alongside the writers.
fn run_with(
    ctx: &Arc<Ctx>,
    readers: u64,
    power_cut: Option<PowerCut>,
    writer_fn: impl Fn(&Arc<Ctx>, usize) -> Result<(), String> + Sync,
    side: impl Fn(&Arc<Ctx>) -> Result<(), String> + Send,
) -> Vec<u64> {
    ctx.writers_running.store(W, Ordering::Release);
    let rounds = std::thread::scope(|s| {
        s.spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| side(ctx)));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => ctx.fail(e),
                Err(p) => ctx.fail(format!("side thread panicked: {}", panic_message(p.as_ref()))),
            }
        });
        if let Some(cut) = power_cut {
            s.spawn(move || {
                while ctx.acked().iter().sum::<u64>() < cut.after
                    && ctx.writers_running.load(Ordering::Acquire) > 0
                    && !ctx.failed()
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                ctx.crashed.store(true, Ordering::Release);
                ctx.db.clone().abandon_for_test();
                cut.fs.crash(cut.mode);
            });
        }
        for w in 0..W {
            let writer_fn = &writer_fn;
            s.spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer_fn(ctx, w)));
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => ctx.fail(e),
                    Err(p) => ctx.fail(format!("writer {w} panicked: {}", panic_message(p.as_ref()))),
                }
                ctx.writers_running.fetch_sub(1, Ordering::AcqRel);
            });
        }
        let handles: Vec<_> = (0..readers)
            .map(|id| {
                s.spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader(ctx, id)));
                    match r {
                        Ok(Ok(n)) => n,
                        Ok(Err(e)) => {
                            ctx.fail(format!("reader {id}: {e}"));
                            0
                        }
                        Err(p) => {
                            ctx.fail(format!("reader {id} panicked: {}", panic_message(p.as_ref())));
                            0
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<u64>>()
    });
    let errors = ctx.errors.lock().unwrap();
    assert!(errors.is_empty(), "{} error(s):\n{}", errors.len(), errors.join("\n"));
    assert!(rounds.iter().all(|&r| r > 0), "a reader checked no view: {rounds:?}");
    rounds
}

const SCRATCH_KEYS: usize = 3;

/// Checks a scratch table: its keys hold their own names.
fn check_scratch(t: &Table) -> Result<(), String> {
    let got: Entries = t
        .iter(&ReadOptions::default())
        .and_then(|it| it.collect())
        .map_err(|e| err("iter", e))?;
    let want: Entries = (0..SCRATCH_KEYS)
        .map(|j| {
            let k = format!("{}-{j}", t.name()).into_bytes();
            (k.clone(), k)
        })
        .collect();
    if got != want {
        return Err(format!(
            "scratch table {}: {} entries, want {}",
            t.name(),
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

/// DDL while the writers and readers run: creates scratch tables, writes and reads them, and
/// drops most of them again (the names of those kept go to `kept`).
fn ddl_churn(ctx: &Ctx, kept: &Mutex<Vec<String>>) -> Result<(), String> {
    let mut i = 0;
    while ctx.writers_running.load(Ordering::Acquire) > 0 && !ctx.failed() {
        i += 1;
        let name = format!("scratch{i}");
        let t = ctx.db.create_table(&name).map_err(|e| err("create_table", e))?;
        let mut b = WriteBatch::new();
        for j in 0..SCRATCH_KEYS {
            let k = format!("{name}-{j}").into_bytes();
            b.put(&t, &k, &k).map_err(|e| err("put", e))?;
        }
        ctx.db.write(b, &WriteOptions::default()).map_err(|e| err("write", e))?;
        check_scratch(&t)?;
        if i % 8 == 0 {
            kept.lock().unwrap().push(name);
            continue;
        }
        ctx.db.drop_table(&name).map_err(|e| err("drop_table", e))?;
        if !matches!(t.get(b"x"), Err(Error::TableDropped(_))) {
            return Err(format!("{name}: a dropped table's handle still reads"));
        }
        if !matches!(ctx.db.table(&name), Err(Error::TableNotFound(_))) {
            return Err(format!("{name}: a dropped table is still found"));
        }
        let mut b = WriteBatch::new();
        b.put(&t, b"late", b"write").map_err(|e| err("put", e))?;
        if !matches!(ctx.db.write(b, &WriteOptions::default()), Err(Error::TableDropped(_))) {
            return Err(format!("{name}: a write to a dropped table was accepted"));
        }
    }
    Ok(())
}

/// The final state holds the last batch of every writer.
fn check_final(ctx: &Ctx, n: u64) {
    let cells = ctx.read_multi_get(&ReadOptions::default()).unwrap();
    let counters = check_view(&cells).unwrap();
    assert_eq!(counters, [n; W], "final state is not the last batch of every writer");
}

fn options() -> Options {
    Options {
        // The smallest memtables: a switch every 64 KiB of data, hundreds of memtables per run
        // (raised triggers: nothing flushes them yet, and writers must never stall).
        write_buffer_size: 64 << 10,
        immutable_slowdown_trigger: 100_000,
        immutable_stop_trigger: 100_000,
        redo_segment_size: 256 << 10,
        // Leaders invite followers to insert their own batches (parallel stage 3).
        parallel_insert_helpers: 8,
        ..Default::default()
    }
}

/// Blocking writers (a few synced) and readers on the real file system; then the final state
/// survives a clean close and reopen.
#[test]
fn readers_see_consistent_prefixes_of_blocking_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let ctx = Ctx::new(db);
    let n = 1000;
    let kept = Mutex::new(Vec::new());
    let rounds = run_with(
        &ctx,
        3,
        None,
        |ctx, w| writer(ctx, w, n, 0.05),
        |ctx| ddl_churn(ctx, &kept),
    );
    check_final(&ctx, n);
    let kept = kept.into_inner().unwrap();
    eprintln!(
        "reader rounds: {rounds:?}; {} scratch tables kept; {:?}",
        kept.len(),
        ctx.db.write_stats()
    );
    let ctx = Arc::into_inner(ctx).expect("threads are done");
    let path = ctx.db.path().to_path_buf();
    drop(ctx.tables);
    ctx.db.close().unwrap();
    // And the same after a reopen, with exactly the tables that were not dropped.
    let ctx = Ctx::attach(Db::open(&path, options()).unwrap());
    check_final(&ctx, n);
    let mut want: Vec<String> = ["A", "B", "default"].iter().map(|s| s.to_string()).collect();
    want.extend(kept.iter().cloned());
    want.sort();
    assert_eq!(ctx.db.tables(), want, "tables after reopen");
    for name in &kept {
        check_scratch(&ctx.db.table(name).unwrap()).unwrap();
    }
    drop(ctx.tables);
    ctx.db.close().unwrap();
}

/// `write_async` writers with up to 16 handles in flight: every handle completes `Ok` (through
/// `on_complete` or `wait`), readers see consistent prefixes, and the final state holds every
/// writer's last batch.
#[test]
fn async_writes_with_callbacks_complete_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let ctx = Ctx::new(db);
    let n = 1000;
    let rounds = run(&ctx, 3, None, |ctx, w| async_writer(ctx, w, n, 16, 0.05));
    check_final(&ctx, n);
    let stats = ctx.db.write_stats();
    eprintln!("reader rounds: {rounds:?}; {stats:?}");
    assert_eq!(stats.writes, W as u64 * n, "write_stats().writes");
    assert_eq!(stats.ops, W as u64 * n * SLOTS as u64, "write_stats().ops");
    assert_eq!(
        stats.synced_writes,
        ctx.sync_writes.load(Ordering::Relaxed),
        "write_stats().synced_writes"
    );
}

/// One run of mixed synced and unsynced writes (even writers block, odd ones write
/// asynchronously) with the given pipeline settings; checks the final state and the write
/// statistics. With a `FaultFs`, ends with a power cut after which the recovered state must be a
/// consistent prefix holding every acknowledged synced batch.
fn mixed_sync_case(queues: usize, group: usize, n: u64, fault: Option<(FaultFs, CrashMode)>) {
    // The leader inserts whole groups, or with one helper, or with many.
    let helpers = match queues {
        1 => 8,
        4 => 0,
        _ => 1,
    };
    // Waiters sleep at once, or poll first (with many queues: most groups commit meanwhile),
    // giving up on a busy CPU or not; the log driver commits every flush round itself, hands
    // every one over to a waiting writer, or hands over those of more than one group.
    // Contended pipeline mutexes block at once, or are watched for a while first.
    // (One queue is where leaders most often find the queue's previous group in stage 1,
    // so that is where they spin on it.)
    let (spin, adaptive, commit_groups, lock_spin) = match queues {
        1 => (0, false, 0, 50_000),
        4 => (50, false, usize::MAX, 2_000),
        _ => (200, true, 1, 0),
    };
    let what = format!(
        "write_queues={queues} max_group_size={group} parallel_insert_helpers={helpers} write_wait_spin_micros={spin} \
         write_wait_adaptive={adaptive} driver_commit_groups={commit_groups} write_lock_spin_nanos={lock_spin}"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Options {
        write_queues: queues,
        max_group_size: group,
        parallel_insert_helpers: helpers,
        write_wait_spin_micros: spin,
        write_wait_adaptive: adaptive,
        driver_commit_groups: commit_groups,
        write_lock_spin_nanos: lock_spin,
        // Larger memtables for some runs: many versions of a key in one memtable.
        write_buffer_size: if group == 2 { 2 << 20 } else { 64 << 10 },
        ..options()
    };
    let path = match &fault {
        Some((fs, _)) => {
            opts.fs = Arc::new(fs.clone());
            std::path::PathBuf::from("/db")
        }
        None => dir.path().join("db"),
    };
    let ctx = Ctx::new(Db::open(&path, opts.clone()).unwrap());
    let power_cut = fault.as_ref().map(|(fs, mode)| PowerCut {
        fs: fs.clone(),
        mode: *mode,
        after: W as u64 * n / 2,
    });
    run(&ctx, 2, power_cut, |ctx, w| {
        if w % 2 == 0 {
            writer(ctx, w, n, 0.3)
        } else {
            async_writer(ctx, w, n, 8, 0.3)
        }
    });
    let stats = ctx.db.write_stats();
    eprintln!("{what}: {:.2} writes/group, {stats:?}", stats.writes_per_group());
    assert!(stats.fsyncs <= stats.synced_writes, "{what}: {stats:?}");
    let Some((_, mode)) = fault else {
        check_final(&ctx, n);
        assert_eq!(stats.writes, W as u64 * n, "{what}: write_stats().writes");
        assert_eq!(stats.ops, W as u64 * n * SLOTS as u64, "{what}: write_stats().ops");
        assert_eq!(
            stats.synced_writes,
            ctx.sync_writes.load(Ordering::Relaxed),
            "{what}: write_stats().synced_writes"
        );
        assert!(
            stats.groups * group as u64 >= stats.writes && stats.groups <= stats.writes,
            "{what}: {} groups of 1..={group} writes cannot hold {} writes",
            stats.groups,
            stats.writes
        );
        let ctx = Arc::into_inner(ctx).expect("threads are done");
        drop(ctx.tables);
        ctx.db.close().unwrap();
        return;
    };
    // The power cut happened during the run: reopen and check what survived.
    let synced: [u64; W] = std::array::from_fn(|w| ctx.synced[w].load(Ordering::Acquire));
    let acked = ctx.acked();
    drop(Arc::into_inner(ctx).expect("threads are done"));
    let db = Db::open(&path, opts).unwrap_or_else(|e| panic!("{what}: reopen after {mode:?}: {e}"));
    let ctx = Ctx::attach(db);
    let cells = ctx.read_multi_get(&ReadOptions::default()).unwrap();
    let counters = check_view(&cells).unwrap_or_else(|e| panic!("{what}: after {mode:?}: {e}"));
    for w in 0..W {
        assert!(
            counters[w] >= synced[w],
            "{what}: after {mode:?}: writer {w} recovered at batch {}, but batch {} was synced",
            counters[w],
            synced[w]
        );
    }
    let mut rng = StdRng::seed_from_u64(queues as u64 * 1000 + group as u64);
    for style in 0..3 {
        let it_cells = ctx.read_iters(&ReadOptions::default(), style, &mut rng).unwrap();
        assert_eq!(
            it_cells, cells,
            "{what}: iterators and multi_get disagree after recovery"
        );
    }
    eprintln!("{what}: after {mode:?}: recovered {counters:?}, synced {synced:?}, acknowledged {acked:?}");
}

/// Mixed synced and unsynced writes on the real file system (real fsync latency makes groups
/// form) over `write_queues` × `max_group_size` settings.
#[test]
fn mixed_sync_over_queue_and_group_settings() {
    for queues in [1, 4, 16] {
        for group in [1, 2, 128] {
            mixed_sync_case(queues, group, 60, None);
        }
    }
}

/// The same settings on `FaultFs`, each run ending with a power cut.
#[test]
fn mixed_sync_then_power_cut_recovers_a_consistent_prefix() {
    let mut case = 0;
    for queues in [1, 4, 16] {
        for group in [1, 2, 128] {
            case += 1;
            let mode = if case % 2 == 0 {
                CrashMode::DropUnsynced
            } else {
                CrashMode::KeepRandomPrefix { seed: case }
            };
            mixed_sync_case(queues, group, 400, Some((FaultFs::new(), mode)));
        }
    }
}

/// The view checker itself must be able to fail: half a batch, or a hole, is caught.
#[test]
fn checker_rejects_torn_and_holey_views() {
    let stamp = |counter, seen: &[u64]| {
        let mut deps = [0; W];
        deps[..seen.len()].copy_from_slice(seen);
        Some(Stamp { counter, deps })
    };
    let mut cells: Cells = [[None; SLOTS]; W];
    cells[0] = [stamp(2, &[1]); SLOTS];
    cells[1] = [stamp(1, &[1]); SLOTS];
    let mut want = [0; W];
    want[..2].copy_from_slice(&[2, 1]);
    assert_eq!(check_view(&cells).unwrap(), want);
    let mut torn = cells;
    torn[1][7] = stamp(2, &[1, 1]);
    assert!(check_view(&torn).unwrap_err().contains("torn"));
    let mut half = cells;
    half[0][3] = None;
    assert!(check_view(&half).unwrap_err().contains("torn"));
    let mut hole = cells;
    hole[2] = [stamp(1, &[3]); SLOTS];
    assert!(check_view(&hole).unwrap_err().contains("hole"));
    let v = encode(
        &Stamp {
            counter: 7,
            deps: [3; W],
        },
        20,
    );
    assert_eq!(
        decode(&v).unwrap(),
        Stamp {
            counter: 7,
            deps: [3; W]
        }
    );
    let mut garbled = v;
    garbled[HEADER + 5] ^= 1;
    assert!(decode(&garbled).is_err());
}

/// A completion callback may drop the last handle of the database, also when the pipeline
/// thread running it (the log-flush thread, or a leader driving the log) is the one that must
/// flush the writes still in flight, which the shutdown waits for. Each round: a writer
/// submits an asynchronous write whose callback holds a handle and waits until the writer has
/// submitted more writes and dropped its own handles; the callback then drops the last one.
/// The database must close (its LOCK released) with every write in it.
#[test]
fn a_callback_may_drop_the_last_handle_while_writes_are_in_flight() {
    const ROUNDS: usize = 30;
    const LATER: usize = 50;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for round in 0..ROUNDS {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path(), Options::default()).unwrap();
            let t = db.create_table("t").unwrap();
            let dropped = Arc::new(AtomicBool::new(false));
            let put = |i: usize| {
                let mut b = WriteBatch::new();
                b.put(&t, format!("k{i:04}").as_bytes(), b"v").unwrap();
                db.write_async(b, &WriteOptions::default())
            };
            let (last, seen, writer) = (db.clone(), dropped.clone(), std::thread::current().id());
            put(0).on_complete(move |r| {
                r.unwrap();
                // Run by this writer itself (it finished its own group), the callback cannot
                // wait for it.
                let wait = std::thread::current().id() != writer;
                let deadline = Instant::now() + Duration::from_secs(5);
                while wait && !seen.load(Ordering::Acquire) && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                drop(last);
            });
            for i in 1..=LATER {
                drop(put(i));
            }
            drop(t);
            drop(db);
            dropped.store(true, Ordering::Release);
            // The shutdown may still be running: reopen once the LOCK is free.
            let deadline = Instant::now() + Duration::from_secs(20);
            let db = loop {
                match Db::open(dir.path(), Options::default()) {
                    Ok(db) => break db,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("round {round}: the database never closed: {e}"),
                }
            };
            let t = db.table("t").unwrap();
            assert_eq!(
                t.iter(&ReadOptions::default()).unwrap().count(),
                LATER + 1,
                "round {round}"
            );
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("a callback dropping the last handle hung the shutdown");
}
