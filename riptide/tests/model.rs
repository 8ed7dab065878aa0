//! Model-based randomized tests: Riptide against a `BTreeMap` oracle.
//!
//! Each test drives a database through a random sequence of operations — puts, deletes,
//! multi-table write batches (including the same key twice: last wins, and batches naming a
//! dropped table: nothing applies), `get`, `multi_get`, snapshots read much later, double-ended
//! iterators (forward, `.rev()`, and interleaved from both ends) and `raw_iter` cursors with
//! random bounds, seeks and direction changes, writes while a cursor is open, table creation and
//! drop, clean close and drop-without-close reopens — and checks every answer against a model:
//! one `BTreeMap<Vec<u8>, Vec<u8>>` per sub-table. Most seeds use the smallest
//! `write_buffer_size` (64 KiB) with values up to 70 KB, so memtables switch every few writes and
//! reads merge many immutable memtables; the others use 2 MiB (many versions per memtable).
//!
//! Variants: many seeds on the in-memory `FaultFs`; a few seeds on the real file system; a
//! proptest generating op sequences (it shrinks a failure to a short sequence); power cuts with
//! only `sync: true` writes, after which the recovered state must equal the model exactly; and
//! power cuts with mostly unsynced writes, after which the recovered state must equal the model
//! after some prefix of the acknowledged writes (no holes), at least up to the last synced write.
//!
//! A failure names the test, the seed, the op index and the last ops. Environment:
//! `RIPTIDE_MODEL_SEED=<n>` runs only seed n (and prints a summary of the run),
//! `RIPTIDE_MODEL_SEEDS=<n>` runs seeds 0..n, `RIPTIDE_MODEL_OPS=<n>` sets the ops per seed,
//! `RIPTIDE_MODEL_TRACE=1` prints every op and every write it makes, `RIPTIDE_MODEL_VERIFY_EACH=1`
//! compares every table with the model after every op (finds the first divergent op),
//! `PROPTEST_CASES=<n>` the proptest cases (256).

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::{CrashMode, FaultFs};
use riptide::{Db, Error, Options, ReadOptions, Snapshot, Table, WriteBatch, WriteOptions};
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

type Data = BTreeMap<Vec<u8>, Vec<u8>>;

/// One live table of the model: its incarnation (a table dropped and created again under the
/// same name is a new incarnation, empty at first) and its data.
#[derive(Clone, Debug, PartialEq)]
struct TableModel {
    inc: u64,
    data: Data,
}

/// The model of the whole database: the live tables by name.
type Model = BTreeMap<String, TableModel>;

static EMPTY: Data = BTreeMap::new();

const TABLE_NAMES: [&str; 5] = ["default", "t1", "t2", "t3", "t4"];
const NKEYS: usize = 40;
const NPROBES: u16 = (NKEYS * 4) as u16;
const MAX_SNAPSHOTS: usize = 4;
/// Stands for a dropped table's handle in a `multi_get`.
const DROPPED: &str = "<dropped>";

/// The key space: small, so overwrites and deletes hit, with empty, prefix-related, 0x00/0xff
/// and long keys.
fn keys() -> &'static [Vec<u8>] {
    static KEYS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut ks: Vec<Vec<u8>> = vec![
            Vec::new(),
            vec![0],
            vec![0, 0],
            b"a".to_vec(),
            b"ab".to_vec(),
            b"abc".to_vec(),
            vec![0xff],
            vec![0xff, 0xff, 0xff],
            vec![b'k'; 300],
            vec![b'k'; 2000],
        ];
        let mut rng = StdRng::seed_from_u64(0x5EED_4E15);
        const ALPHABET: [u8; 7] = [0, 1, b'a', b'b', b'c', 0xfe, 0xff];
        while ks.len() < NKEYS {
            let len = rng.random_range(1..=10);
            let k: Vec<u8> = (0..len)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
                .collect();
            if !ks.contains(&k) {
                ks.push(k);
            }
        }
        ks
    })
}

fn key(k: u16) -> Vec<u8> {
    keys()[k as usize % NKEYS].clone()
}

/// Bounds and seek targets: the keys, and byte strings just after, before and between them.
fn probe(p: u16) -> Vec<u8> {
    let mut b = key(p);
    match (p as usize / NKEYS) % 4 {
        0 => {}
        1 => b.push(0),
        2 => {
            b.pop();
        }
        _ => match b.last_mut() {
            Some(x) if *x < 0xff => *x += 1,
            _ => b.push(0x80),
        },
    }
    b
}

/// A value of `len` bytes that is (nearly always) unique to write number `seq`.
fn value(seq: u64, len: u32) -> Vec<u8> {
    let s = seq.to_le_bytes();
    (0..len as usize)
        .map(|i| s[i % 8].wrapping_add((i / 8) as u8))
        .collect()
}

fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(12).map(|x| format!("{x:02x}")).collect();
    if b.len() > 12 {
        format!("{shown}..(len {})", b.len())
    } else {
        format!("[{shown}]")
    }
}

fn show(v: &Option<Vec<u8>>) -> String {
    match v {
        None => "None".into(),
        Some(v) => format!("Some({})", hex(v)),
    }
}

/// Describes the first difference between two ordered entry lists, if any.
fn diff(engine: &[(Vec<u8>, Vec<u8>)], model: &[(Vec<u8>, Vec<u8>)]) -> Option<String> {
    for i in 0..engine.len().max(model.len()) {
        let (e, m) = (engine.get(i), model.get(i));
        if e != m {
            let fmt = |x: Option<&(Vec<u8>, Vec<u8>)>| match x {
                None => "end".to_string(),
                Some((k, v)) => format!("{} => {}", hex(k), hex(v)),
            };
            return Some(format!(
                "entry {i}: engine {} / model {} (engine has {} entries, model {})",
                fmt(e),
                fmt(m),
                engine.len(),
                model.len()
            ));
        }
    }
    None
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

#[derive(Debug, Clone)]
struct BOp {
    t: u8,
    k: u16,
    /// Put a value of this length; `None` deletes.
    val: Option<u32>,
}

#[derive(Debug, Clone)]
enum Move {
    First,
    Last,
    Seek(u16),
    SeekForPrev(u16),
    Next,
    Prev,
    /// A write to the cursor's table while the cursor is open (it must not see it).
    Write {
        k: u16,
        val: Option<u32>,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        t: u8,
        k: u16,
        len: u32,
    },
    Delete {
        t: u8,
        k: u16,
    },
    Batch {
        ops: Vec<BOp>,
        with_dropped: bool,
    },
    Get {
        t: u8,
        k: u16,
        snap: Option<u8>,
    },
    MultiGet {
        keys: Vec<(u8, u16)>,
        snap: Option<u8>,
    },
    TakeSnapshot,
    ReleaseSnapshot {
        i: u8,
    },
    /// `dirs` empty: collect forward and `.rev()`; else `true` = `next`, `false` = `next_back`.
    Iter {
        t: u8,
        lo: Option<u16>,
        hi: Option<u16>,
        snap: Option<u8>,
        dirs: Vec<bool>,
    },
    Cursor {
        t: u8,
        lo: Option<u16>,
        hi: Option<u16>,
        snap: Option<u8>,
        moves: Vec<Move>,
    },
    CreateTable {
        name: u8,
    },
    DropTable {
        name: u8,
    },
    Reopen {
        clean: bool,
    },
    Crash {
        keep_prefix: Option<u64>,
    },
    /// Flush a table's memtables to L0 (`Table::flush`).
    Flush {
        t: u8,
    },
    /// `full`: `Table::compact` (down to L2); else `Table::compact_l0` (L0 into L1).
    Compact {
        t: u8,
        full: bool,
    },
    /// `Table::compact_range` over probes `lo..=hi`.
    CompactRange {
        t: u8,
        lo: Option<u16>,
        hi: Option<u16>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Mostly unsynced writes, no power cuts generated.
    Plain,
    /// Every write synced; power cuts must lose nothing acknowledged.
    PowerCutSynced,
    /// Mostly unsynced writes; after a power cut the state is a prefix of the acknowledged writes.
    PowerCutUnsynced,
}

/// One acknowledged write: (incarnation, key, value or delete) per op, in batch order.
type JournalEntry = Vec<(u64, Vec<u8>, Option<Vec<u8>>)>;

struct Harness {
    kind: Kind,
    fs: Option<FaultFs>,
    _dir: Option<tempfile::TempDir>,
    path: PathBuf,
    opts: Options,
    db: Option<Db>,
    tables: BTreeMap<String, Table>,
    dropped: Vec<Table>,
    model: Model,
    next_inc: u64,
    snaps: Vec<(Snapshot, Model)>,
    seq: u64,
    /// The model state (by incarnation) at the last point known durable (open, clean close).
    base: BTreeMap<u64, Data>,
    /// Acknowledged writes since `base`, in commit order.
    journal: Vec<JournalEntry>,
    /// The first `durable` journal entries are durable (a synced write acknowledged them).
    durable: usize,
    rng: StdRng,
    /// Counts for the summary printed when a single seed runs.
    writes: u64,
    reopens: u64,
    power_cuts: u64,
    peak_memtable_usage: usize,
}

impl Harness {
    fn new(kind: Kind, posix: bool, seed: u64) -> Result<Harness, String> {
        let rng = StdRng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15);
        let (fs, dir, path) = if posix {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let path = dir.path().join("db");
            (None, Some(dir), path)
        } else {
            (Some(FaultFs::new()), None, PathBuf::from("/db"))
        };
        let mut opts = Options {
            // A single writer must never wait for background work.
            immutable_slowdown_trigger: 100_000,
            immutable_stop_trigger: 100_000,
            level0_slowdown_layers: 100_000,
            level0_stop_layers: 100_000,
            ..Default::default()
        };
        if let Some(fs) = &fs {
            opts.fs = Arc::new(fs.clone());
        }
        let mut h = Harness {
            kind,
            fs,
            _dir: dir,
            path,
            opts,
            db: None,
            tables: BTreeMap::new(),
            dropped: Vec::new(),
            model: Model::new(),
            next_inc: 0,
            snaps: Vec::new(),
            seq: 0,
            base: BTreeMap::new(),
            journal: Vec::new(),
            durable: 0,
            rng,
            writes: 0,
            reopens: 0,
            power_cuts: 0,
            peak_memtable_usage: 0,
        };
        h.vary_options();
        let db = Db::open(&h.path, h.opts.clone()).map_err(|e| format!("open: {e}"))?;
        h.tables.insert("default".into(), db.default_table());
        let tm = h.new_table_model();
        h.model.insert("default".into(), tm);
        let extra = if h.rng.random_bool(0.5) { 2 } else { 3 };
        for name in &TABLE_NAMES[1..=extra] {
            let t = db.create_table(name).map_err(|e| format!("create {name}: {e}"))?;
            h.tables.insert(name.to_string(), t);
            let tm = h.new_table_model();
            h.model.insert(name.to_string(), tm);
        }
        h.db = Some(db);
        h.reset_journal();
        Ok(h)
    }

    fn new_table_model(&mut self) -> TableModel {
        self.next_inc += 1;
        TableModel {
            inc: self.next_inc,
            data: Data::new(),
        }
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("database is open")
    }

    fn reset_journal(&mut self) {
        self.base = self.model.values().map(|tm| (tm.inc, tm.data.clone())).collect();
        self.journal.clear();
        self.durable = 0;
    }

    /// The `t`-th live table (modulo their number), by name order.
    fn table_at(&self, t: u8) -> (String, Table) {
        let (name, table) = self
            .tables
            .iter()
            .nth(t as usize % self.tables.len())
            .expect("a table exists");
        (name.clone(), table.clone())
    }

    fn next_value(&mut self, len: u32) -> Vec<u8> {
        self.seq += 1;
        value(self.seq, len)
    }

    fn pick_sync(&mut self) -> bool {
        match self.kind {
            Kind::PowerCutSynced => true,
            Kind::Plain => self.rng.random_bool(0.05),
            Kind::PowerCutUnsynced => self.rng.random_bool(0.1),
        }
    }

    fn write_opts(sync: bool) -> WriteOptions {
        WriteOptions {
            sync,
            ..Default::default()
        }
    }

    /// Applies an acknowledged write to the model and the journal.
    fn commit(&mut self, changes: Vec<(String, Vec<u8>, Option<Vec<u8>>)>, sync: bool) {
        let mut entry = Vec::with_capacity(changes.len());
        for (name, k, v) in changes {
            if std::env::var("RIPTIDE_MODEL_TRACE").is_ok() {
                eprintln!("  write {name} {k:?} {}", if v.is_some() { "put" } else { "delete" });
            }
            let tm = self.model.get_mut(&name).expect("written table is live");
            match &v {
                Some(v) => tm.data.insert(k.clone(), v.clone()),
                None => tm.data.remove(&k),
            };
            entry.push((tm.inc, k, v));
        }
        self.journal.push(entry);
        self.writes += 1;
        self.peak_memtable_usage = self.peak_memtable_usage.max(self.db().memtable_usage());
        if sync {
            self.durable = self.journal.len();
        }
    }

    /// The model data of live table `name` at a snapshot whose model was `snap`.
    fn data_at<'a>(&'a self, name: &str, snap: Option<&'a Model>) -> &'a Data {
        let tm = &self.model[name];
        match snap {
            None => &tm.data,
            Some(m) => match m.get(name) {
                Some(old) if old.inc == tm.inc => &old.data,
                _ => &EMPTY,
            },
        }
    }

    fn snapshot_at(&self, snap: Option<u8>) -> Option<(Snapshot, Model)> {
        match snap {
            Some(i) if !self.snaps.is_empty() => Some(self.snaps[i as usize % self.snaps.len()].clone()),
            _ => None,
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Put { t, k, len } => {
                let (name, table) = self.table_at(*t);
                let (key, val) = (key(*k), self.next_value(*len));
                let sync = self.pick_sync();
                table
                    .put_opt(&key, &val, &Self::write_opts(sync))
                    .map_err(|e| format!("put into {name}: {e}"))?;
                self.commit(vec![(name, key, Some(val))], sync);
            }
            Op::Delete { t, k } => {
                let (name, table) = self.table_at(*t);
                let key = key(*k);
                let sync = self.pick_sync();
                table
                    .delete_opt(&key, &Self::write_opts(sync))
                    .map_err(|e| format!("delete from {name}: {e}"))?;
                self.commit(vec![(name, key, None)], sync);
            }
            Op::Batch { ops, with_dropped } => self.batch(ops, *with_dropped)?,
            Op::Get { t, k, snap } => {
                let (name, table) = self.table_at(*t);
                let snap = self.snapshot_at(*snap);
                let key = key(*k);
                let ropts = ReadOptions {
                    snapshot: snap.as_ref().map(|s| s.0.clone()),
                    ..Default::default()
                };
                let got = table.get_opt(&key, &ropts).map_err(|e| format!("get: {e}"))?;
                let want = self.data_at(&name, snap.as_ref().map(|s| &s.1)).get(&key).cloned();
                ensure!(
                    got == want,
                    "get {name}/{} at {:?}: engine {} != model {}",
                    hex(&key),
                    snap.as_ref().map(|s| s.0.lsn()),
                    show(&got),
                    show(&want)
                );
            }
            Op::MultiGet { keys, snap } => {
                let snap = self.snapshot_at(*snap);
                let mut picked: Vec<(String, Table, Vec<u8>)> = keys
                    .iter()
                    .map(|(t, k)| {
                        let (name, table) = self.table_at(*t);
                        (name, table, key(*k))
                    })
                    .collect();
                if !self.dropped.is_empty() && self.rng.random_bool(0.2) {
                    // A handle of a dropped table fails alone; the other keys are still read.
                    let at = self.rng.random_range(0..=picked.len());
                    picked.insert(at, (DROPPED.into(), self.dropped[0].clone(), b"a".to_vec()));
                }
                let pairs: Vec<(&Table, &[u8])> = picked.iter().map(|(_, t, k)| (t, k.as_slice())).collect();
                let ropts = ReadOptions {
                    snapshot: snap.as_ref().map(|s| s.0.clone()),
                    ..Default::default()
                };
                let got = self.db().multi_get(&ropts, &pairs);
                ensure!(
                    got.len() == picked.len(),
                    "multi_get returned {} results for {}",
                    got.len(),
                    picked.len()
                );
                for ((name, _, k), got) in picked.iter().zip(got) {
                    if name == DROPPED {
                        ensure!(
                            matches!(got, Err(Error::TableDropped(_))),
                            "multi_get through a dropped table's handle: {got:?}"
                        );
                        continue;
                    }
                    let got = got.map_err(|e| format!("multi_get: {e}"))?;
                    let want = self.data_at(name, snap.as_ref().map(|s| &s.1)).get(k).cloned();
                    ensure!(
                        got == want,
                        "multi_get {name}/{}: engine {} != model {}",
                        hex(k),
                        show(&got),
                        show(&want)
                    );
                }
            }
            Op::TakeSnapshot => {
                if self.snaps.len() >= MAX_SNAPSHOTS {
                    self.snaps.remove(0);
                }
                let s = self.db().snapshot();
                if let Some((last, _)) = self.snaps.last() {
                    ensure!(
                        s.lsn() >= last.lsn(),
                        "snapshot LSN went back: {} after {}",
                        s.lsn(),
                        last.lsn()
                    );
                }
                self.snaps.push((s, self.model.clone()));
                self.check_oldest_snapshot()?;
            }
            Op::ReleaseSnapshot { i } => {
                if !self.snaps.is_empty() {
                    let i = *i as usize % self.snaps.len();
                    self.snaps.remove(i);
                }
                self.check_oldest_snapshot()?;
            }
            Op::Iter { t, lo, hi, snap, dirs } => self.iter(*t, *lo, *hi, *snap, dirs)?,
            Op::Cursor { t, lo, hi, snap, moves } => self.cursor(*t, *lo, *hi, *snap, moves)?,
            Op::CreateTable { name } => {
                let name = TABLE_NAMES[1 + *name as usize % (TABLE_NAMES.len() - 1)];
                let res = self.db().create_table(name);
                if self.model.contains_key(name) {
                    ensure!(
                        matches!(res, Err(Error::TableExists(_))),
                        "create existing {name}: {res:?}, want TableExists"
                    );
                } else {
                    let t = res.map_err(|e| format!("create {name}: {e}"))?;
                    self.tables.insert(name.to_string(), t);
                    let tm = self.new_table_model();
                    self.model.insert(name.to_string(), tm);
                }
                self.check_table_names()?;
            }
            Op::DropTable { name } => {
                let name = TABLE_NAMES[*name as usize % TABLE_NAMES.len()];
                let res = self.db().drop_table(name);
                if name == "default" {
                    ensure!(
                        matches!(res, Err(Error::InvalidTableName { .. })),
                        "drop default: {res:?}, want InvalidTableName"
                    );
                } else if !self.model.contains_key(name) {
                    ensure!(
                        matches!(res, Err(Error::TableNotFound(_))),
                        "drop missing {name}: {res:?}, want TableNotFound"
                    );
                } else {
                    res.map_err(|e| format!("drop {name}: {e}"))?;
                    self.model.remove(name);
                    let old = self.tables.remove(name).expect("handle of live table");
                    let r = old.get(b"a");
                    ensure!(
                        matches!(r, Err(Error::TableDropped(_))),
                        "get on dropped {name}: {r:?}, want TableDropped"
                    );
                    self.dropped.push(old);
                    if self.dropped.len() > 2 {
                        self.dropped.remove(0);
                    }
                }
                self.check_table_names()?;
            }
            Op::Reopen { clean } => self.reopen(*clean)?,
            Op::Crash { keep_prefix } => self.crash(*keep_prefix)?,
            Op::Flush { t } => {
                let (name, table) = self.table_at(*t);
                table.flush().map_err(|e| format!("flush {name}: {e}"))?;
            }
            Op::Compact { t, full } => {
                let (name, table) = self.table_at(*t);
                let r = if *full { table.compact() } else { table.compact_l0() };
                r.map_err(|e| format!("compact {name}: {e}"))?;
            }
            Op::CompactRange { t, lo, hi } => {
                let (name, table) = self.table_at(*t);
                let (lo, hi) = (lo.map(probe), hi.map(probe));
                table
                    .compact_range(lo.as_deref(), hi.as_deref())
                    .map_err(|e| format!("compact_range {name}: {e}"))?;
            }
        }
        Ok(())
    }

    fn batch(&mut self, ops: &[BOp], with_dropped: bool) -> Result<(), String> {
        let mut batch = WriteBatch::new();
        let mut changes = Vec::new();
        let dropped_at = if with_dropped && !self.dropped.is_empty() {
            Some(self.rng.random_range(0..=ops.len()))
        } else {
            None
        };
        for (i, op) in ops.iter().enumerate() {
            if dropped_at == Some(i) {
                batch
                    .put(&self.dropped[0], b"zombie", b"z")
                    .map_err(|e| e.to_string())?;
            }
            let (name, table) = self.table_at(op.t);
            let key = key(op.k);
            match op.val {
                Some(len) => {
                    let v = self.next_value(len);
                    batch.put(&table, &key, &v).map_err(|e| format!("batch put: {e}"))?;
                    changes.push((name, key, Some(v)));
                }
                None => {
                    batch.delete(&table, &key).map_err(|e| format!("batch delete: {e}"))?;
                    changes.push((name, key, None));
                }
            }
        }
        if dropped_at == Some(ops.len()) {
            batch
                .put(&self.dropped[0], b"zombie", b"z")
                .map_err(|e| e.to_string())?;
        }
        ensure!(
            batch.len() == ops.len() + usize::from(dropped_at.is_some()),
            "batch.len() {}",
            batch.len()
        );
        let sync = self.pick_sync();
        let res = self.db().write(batch, &Self::write_opts(sync));
        if dropped_at.is_some() {
            // Refused as a whole: the model is unchanged, and later reads check nothing applied.
            ensure!(
                matches!(res, Err(Error::TableDropped(_))),
                "batch naming a dropped table: {res:?}, want TableDropped"
            );
        } else {
            res.map_err(|e| format!("write batch: {e}"))?;
            if !changes.is_empty() {
                self.commit(changes, sync);
            }
        }
        Ok(())
    }

    fn read_opts(snap: &Option<(Snapshot, Model)>, lo: Option<u16>, hi: Option<u16>) -> ReadOptions {
        ReadOptions {
            snapshot: snap.as_ref().map(|s| s.0.clone()),
            lower_bound: lo.map(probe),
            upper_bound: hi.map(probe),
        }
    }

    /// The model entries of `name` within the bounds, at the snapshot.
    fn expected(&self, name: &str, snap: &Option<(Snapshot, Model)>, ropts: &ReadOptions) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.data_at(name, snap.as_ref().map(|s| &s.1))
            .iter()
            .filter(|(k, _)| {
                ropts.lower_bound.as_ref().is_none_or(|l| k.as_slice() >= l.as_slice())
                    && ropts.upper_bound.as_ref().is_none_or(|u| k.as_slice() < u.as_slice())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn iter(&mut self, t: u8, lo: Option<u16>, hi: Option<u16>, snap: Option<u8>, dirs: &[bool]) -> Result<(), String> {
        let (name, table) = self.table_at(t);
        let snap = self.snapshot_at(snap);
        let ropts = Self::read_opts(&snap, lo, hi);
        let want = self.expected(&name, &snap, &ropts);
        let what = format!(
            "iter {name} [{:?}, {:?}) at {:?}",
            ropts.lower_bound.as_deref().map(hex),
            ropts.upper_bound.as_deref().map(hex),
            snap.as_ref().map(|s| s.0.lsn())
        );
        let open = || table.iter(&ropts).map_err(|e| format!("{what}: {e}"));
        if dirs.is_empty() {
            let fwd: Vec<_> = open()?.collect::<Result<_, _>>().map_err(|e| format!("{what}: {e}"))?;
            if let Some(d) = diff(&fwd, &want) {
                return Err(format!("{what} forward: {d}"));
            }
            let mut back: Vec<_> = open()?
                .rev()
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{what}: {e}"))?;
            back.reverse();
            if let Some(d) = diff(&back, &want) {
                return Err(format!("{what} reverse: {d}"));
            }
            return Ok(());
        }
        let mut it = open()?;
        let (mut front, mut back) = (0usize, want.len());
        for (step, &forward) in dirs.iter().enumerate() {
            let got = if forward { it.next() } else { it.next_back() };
            let got = got.transpose().map_err(|e| format!("{what}: {e}"))?;
            let exp = if front < back {
                if forward {
                    front += 1;
                    Some(want[front - 1].clone())
                } else {
                    back -= 1;
                    Some(want[back].clone())
                }
            } else {
                None
            };
            if got != exp {
                let fmt = |x: &Option<(Vec<u8>, Vec<u8>)>| x.as_ref().map(|(k, v)| format!("{} => {}", hex(k), hex(v)));
                return Err(format!(
                    "{what}: step {step} ({}): engine {:?} != model {:?}",
                    if forward { "next" } else { "next_back" },
                    fmt(&got),
                    fmt(&exp)
                ));
            }
        }
        let rest: Vec<_> = it
            .by_ref()
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{what}: {e}"))?;
        if let Some(d) = diff(&rest, &want[front.min(back)..back]) {
            return Err(format!("{what}: rest after {} steps: {d}", dirs.len()));
        }
        ensure!(
            it.next_back().is_none(),
            "{what}: next_back after exhaustion returned an entry"
        );
        Ok(())
    }

    fn cursor(
        &mut self,
        t: u8,
        lo: Option<u16>,
        hi: Option<u16>,
        snap: Option<u8>,
        moves: &[Move],
    ) -> Result<(), String> {
        let (name, table) = self.table_at(t);
        let snap = self.snapshot_at(snap);
        let ropts = Self::read_opts(&snap, lo, hi);
        let want = self.expected(&name, &snap, &ropts);
        let what = format!(
            "raw_iter {name} [{:?}, {:?}) at {:?}",
            ropts.lower_bound.as_deref().map(hex),
            ropts.upper_bound.as_deref().map(hex),
            snap.as_ref().map(|s| s.0.lsn())
        );
        let mut it = table.raw_iter(&ropts).map_err(|e| format!("{what}: {e}"))?;
        ensure!(!it.valid(), "{what}: valid before positioning");
        let mut pos: Option<usize> = None;
        let mut trace = Vec::new();
        for mv in moves {
            match mv {
                Move::First => {
                    it.seek_to_first();
                    pos = (!want.is_empty()).then_some(0);
                }
                Move::Last => {
                    it.seek_to_last();
                    pos = want.len().checked_sub(1);
                }
                Move::Seek(p) => {
                    let target = probe(*p);
                    it.seek(&target);
                    pos = want.iter().position(|(k, _)| *k >= target);
                }
                Move::SeekForPrev(p) => {
                    let target = probe(*p);
                    it.seek_for_prev(&target);
                    pos = want.iter().rposition(|(k, _)| *k <= target);
                }
                Move::Next => {
                    it.next();
                    pos = pos.and_then(|i| (i + 1 < want.len()).then_some(i + 1));
                }
                Move::Prev => {
                    it.prev();
                    pos = pos.and_then(|i| i.checked_sub(1));
                }
                Move::Write { k, val } => {
                    // A write to the live table: the open cursor must not see it.
                    let key = key(*k);
                    let sync = self.pick_sync();
                    let v = val.map(|len| self.next_value(len));
                    let res = match &v {
                        Some(v) => table.put_opt(&key, v, &Self::write_opts(sync)),
                        None => table.delete_opt(&key, &Self::write_opts(sync)),
                    };
                    res.map_err(|e| format!("{what}: write during iteration: {e}"))?;
                    self.commit(vec![(name.clone(), key, v)], sync);
                }
            }
            trace.push(format!("{mv:?}"));
            it.status().map_err(|e| format!("{what}: status: {e}"))?;
            let got = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
            let exp = pos.map(|i| want[i].clone());
            if got != exp {
                let fmt = |x: &Option<(Vec<u8>, Vec<u8>)>| x.as_ref().map(|(k, v)| format!("{} => {}", hex(k), hex(v)));
                return Err(format!(
                    "{what}: after moves {trace:?}: engine {:?} != model {:?} (model has {} entries)",
                    fmt(&got),
                    fmt(&exp),
                    want.len()
                ));
            }
        }
        Ok(())
    }

    fn check_oldest_snapshot(&self) -> Result<(), String> {
        let want = self.snaps.iter().map(|(s, _)| s.lsn()).min();
        let got = self.db().oldest_snapshot();
        ensure!(got == want, "oldest_snapshot {got:?}, want {want:?}");
        Ok(())
    }

    fn check_table_names(&self) -> Result<(), String> {
        let got = self.db().tables();
        let want: Vec<String> = self.model.keys().cloned().collect();
        ensure!(got == want, "tables() {got:?}, model {want:?}");
        Ok(())
    }

    /// Reads every live table in full (iterator and point reads) and compares with the model.
    fn verify_all(&self, ctx: &str) -> Result<(), String> {
        self.check_table_names().map_err(|e| format!("{ctx}: {e}"))?;
        for (name, tm) in &self.model {
            let table = &self.tables[name];
            let got: Vec<_> = table
                .iter(&ReadOptions::default())
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{ctx}: iter {name}: {e}"))?;
            let want: Vec<_> = tm.data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            if let Some(d) = diff(&got, &want) {
                return Err(format!("{ctx}: table {name}: {d}"));
            }
            for k in keys() {
                let got = table.get(k).map_err(|e| format!("{ctx}: get: {e}"))?;
                let want = tm.data.get(k).cloned();
                ensure!(
                    got == want,
                    "{ctx}: get {name}/{}: engine {} != model {}",
                    hex(k),
                    show(&got),
                    show(&want)
                );
            }
        }
        Ok(())
    }

    /// Random instance options; they may change at every reopen (the data must not care).
    fn vary_options(&mut self) {
        let rng = &mut self.rng;
        self.opts.write_buffer_size = if rng.random_bool(0.75) { 64 << 10 } else { 2 << 20 };
        self.opts.write_queues = rng.random_range(1..=4);
        self.opts.max_group_size = [1, 4, 128][rng.random_range(0..3)];
        self.opts.redo_segment_size = if rng.random_bool(0.5) { 64 << 10 } else { 1 << 20 };
        self.opts.flush_on_close = rng.random_bool(0.7);
        // Extents: several blocks each, several files, with and without filters and caches.
        self.opts.block_size = [1 << 10, 4 << 10, 16 << 10][rng.random_range(0..3)];
        self.opts.bloom_bits_per_key = [0, 10][rng.random_range(0..2)];
        self.opts.block_cache_size = [0, 64 << 10, 8 << 20][rng.random_range(0..3)];
        self.opts.row_cache_size = [0, 1 << 20][rng.random_range(0..2)];
        self.opts.partial_block_reads = rng.random_bool(0.7);
        self.opts.extents_per_file = [3, 8, 5120][rng.random_range(0..3)];
        self.opts.level0_layer_trigger = rng.random_range(2..=6);
        self.opts.level0_extents_trigger = rng.random_range(1..=4);
        self.opts.level1_extents_trigger = rng.random_range(1..=4);
        self.opts.level1_dynamic_trigger = rng.random_bool(0.5);
        self.opts.compaction_reuse = rng.random_bool(0.8);
        self.opts.slog_checkpoint_bytes = if rng.random_bool(0.5) { 4 << 10 } else { 1 << 20 };
        self.opts.max_flushes = rng.random_range(1..=2);
    }

    fn open_again(&mut self) -> Result<(), String> {
        self.vary_options();
        let db = Db::open(&self.path, self.opts.clone()).map_err(|e| format!("reopen: {e}"))?;
        self.tables.clear();
        for name in db.tables() {
            let t = db.table(&name).map_err(|e| format!("table {name}: {e}"))?;
            self.tables.insert(name, t);
        }
        self.db = Some(db);
        Ok(())
    }

    fn reopen(&mut self, clean: bool) -> Result<(), String> {
        let stale = self.snaps.last().map(|s| s.0.clone());
        self.snaps.clear();
        self.dropped.clear();
        let probe_handle = self.tables.values().next().cloned();
        self.tables.clear();
        let db = self.db.take().expect("open");
        if clean {
            db.close().map_err(|e| format!("close: {e}"))?;
            if let Some(t) = probe_handle {
                let r = t.get(b"a");
                ensure!(
                    matches!(r, Err(Error::Closed)),
                    "get through a handle after close: {r:?}"
                );
            }
        } else {
            drop(probe_handle);
            drop(db);
        }
        self.open_again()?;
        self.verify_all(if clean {
            "after close + reopen"
        } else {
            "after drop + reopen"
        })?;
        if let Some(s) = stale {
            let (_, t) = self.table_at(0);
            let r = t.get_opt(
                b"a",
                &ReadOptions {
                    snapshot: Some(s),
                    ..Default::default()
                },
            );
            ensure!(
                matches!(r, Err(Error::ForeignTable { what: "snapshot" })),
                "read at a snapshot of the previous instance: {r:?}"
            );
        }
        self.reset_journal();
        self.reopens += 1;
        Ok(())
    }

    fn crash(&mut self, keep_prefix: Option<u64>) -> Result<(), String> {
        let Some(fs) = self.fs.clone() else {
            return self.reopen(false);
        };
        self.snaps.clear();
        self.dropped.clear();
        self.tables.clear();
        self.db.take().expect("open").abandon_for_test();
        // Odd seeds keep sectors of unsynced overwrites instead of a prefix of the changes.
        let mode = match keep_prefix {
            Some(seed) if seed % 2 == 1 => CrashMode::KeepRandomSectors { seed },
            Some(seed) => CrashMode::KeepRandomPrefix { seed },
            None => CrashMode::DropUnsynced,
        };
        fs.crash(mode);
        self.open_again()?;
        let ctx = format!("after power cut ({mode:?})");
        // Table creation and drop are durable at once.
        self.check_table_names().map_err(|e| format!("{ctx}: {e}"))?;
        let mut recovered = BTreeMap::new();
        for (name, table) in &self.tables {
            let data: Data = table
                .iter(&ReadOptions::default())
                .and_then(|it| it.collect::<Result<Data, _>>())
                .map_err(|e| format!("{ctx}: iter {name}: {e}"))?;
            recovered.insert(name.clone(), data);
        }
        // Find the longest prefix of acknowledged writes that the recovered state equals.
        let mut state = self.base.clone();
        let mut found = None;
        for p in 0..=self.journal.len() {
            if p > 0 {
                for (inc, k, v) in &self.journal[p - 1] {
                    let d = state.entry(*inc).or_default();
                    match v {
                        Some(v) => d.insert(k.clone(), v.clone()),
                        None => d.remove(k),
                    };
                }
            }
            let matches = self
                .model
                .iter()
                .all(|(name, tm)| recovered[name] == *state.get(&tm.inc).unwrap_or(&EMPTY));
            if matches {
                found = Some((p, state.clone()));
            }
        }
        let Some((p, state)) = found else {
            let detail: Vec<String> = self
                .model
                .iter()
                .map(|(name, tm)| {
                    let got: Vec<_> = recovered[name].iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    let want: Vec<_> = tm.data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    format!(
                        "{name}: {}",
                        diff(&got, &want).unwrap_or_else(|| "= final model".into())
                    )
                })
                .collect();
            return Err(format!(
                "{ctx}: recovered state is no prefix of the {} acknowledged writes (vs final model: {detail:?})",
                self.journal.len()
            ));
        };
        ensure!(
            p >= self.durable,
            "{ctx}: recovered only the first {p} of {} acknowledged writes, but the first {} were synced",
            self.journal.len(),
            self.durable
        );
        for tm in self.model.values_mut() {
            tm.data = state.get(&tm.inc).cloned().unwrap_or_default();
        }
        self.verify_all(&ctx)?;
        self.reset_journal();
        self.power_cuts += 1;
        Ok(())
    }

    /// Final check, then a clean close and one more reopen.
    fn finish(mut self) -> Result<(), String> {
        self.verify_all("at the end")?;
        if std::env::var_os("RIPTIDE_MODEL_SEED").is_some() {
            eprintln!(
                "{} acknowledged writes, {} reopens, {} power cuts, peak memtable usage {} KiB, options {:?}",
                self.writes,
                self.reopens,
                self.power_cuts,
                self.peak_memtable_usage >> 10,
                self.opts
            );
        }
        self.reopen(true)?;
        self.snaps.clear();
        self.tables.clear();
        self.dropped.clear();
        self.db
            .take()
            .expect("open")
            .close()
            .map_err(|e| format!("final close: {e}"))
    }
}

// ---- random op generation (seeded runs) ----

fn gen_len(rng: &mut StdRng) -> u32 {
    match rng.random_range(0..100) {
        0..15 => 0,
        15..45 => rng.random_range(1..=16),
        45..75 => rng.random_range(17..=512),
        75..92 => rng.random_range(513..=8192),
        _ => rng.random_range(8193..=70_000),
    }
}

fn gen_bound(rng: &mut StdRng) -> Option<u16> {
    rng.random_bool(0.6).then(|| rng.random_range(0..NPROBES))
}

fn gen_snap(rng: &mut StdRng) -> Option<u8> {
    rng.random_bool(0.4).then(|| rng.random())
}

fn gen_batch(rng: &mut StdRng) -> Vec<BOp> {
    let n = rng.random_range(0..=8);
    let mut ops: Vec<BOp> = (0..n)
        .map(|_| BOp {
            t: rng.random(),
            k: rng.random_range(0..NKEYS as u16),
            val: rng.random_bool(0.75).then(|| gen_len(rng)),
        })
        .collect();
    if !ops.is_empty() && rng.random_bool(0.5) {
        // The same key again later in the batch: the last op wins.
        let i = rng.random_range(0..ops.len());
        let dup = BOp {
            val: rng.random_bool(0.6).then(|| gen_len(rng)),
            ..ops[i].clone()
        };
        let at = rng.random_range(i + 1..=ops.len());
        ops.insert(at, dup);
    }
    ops
}

fn gen_move(rng: &mut StdRng) -> Move {
    match rng.random_range(0..100) {
        0..8 => Move::First,
        8..16 => Move::Last,
        16..33 => Move::Seek(rng.random_range(0..NPROBES)),
        33..50 => Move::SeekForPrev(rng.random_range(0..NPROBES)),
        50..70 => Move::Next,
        70..90 => Move::Prev,
        _ => Move::Write {
            k: rng.random_range(0..NKEYS as u16),
            val: rng.random_bool(0.7).then(|| gen_len(rng)),
        },
    }
}

fn gen_op(rng: &mut StdRng, kind: Kind) -> Op {
    let t = rng.random();
    let k = rng.random_range(0..NKEYS as u16);
    match rng.random_range(0..1000) {
        0..230 => Op::Put {
            t,
            k,
            len: gen_len(rng),
        },
        230..330 => Op::Delete { t, k },
        330..450 => Op::Batch {
            ops: gen_batch(rng),
            with_dropped: rng.random_bool(0.15),
        },
        450..550 => Op::Get {
            t,
            k,
            snap: gen_snap(rng),
        },
        550..610 => Op::MultiGet {
            keys: (0..rng.random_range(0..8))
                .map(|_| (rng.random(), rng.random_range(0..NKEYS as u16)))
                .collect(),
            snap: gen_snap(rng),
        },
        610..650 => Op::TakeSnapshot,
        650..665 => Op::ReleaseSnapshot { i: rng.random() },
        665..745 => Op::Iter {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
            snap: gen_snap(rng),
            dirs: if rng.random_bool(0.5) {
                Vec::new()
            } else {
                (0..rng.random_range(1..30)).map(|_| rng.random()).collect()
            },
        },
        745..835 => Op::Cursor {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
            snap: gen_snap(rng),
            moves: (0..rng.random_range(1..40)).map(|_| gen_move(rng)).collect(),
        },
        835..860 => Op::CreateTable { name: rng.random() },
        860..875 => Op::DropTable { name: rng.random() },
        875..883 => Op::Reopen {
            clean: rng.random_bool(0.5),
        },
        883..897 if kind != Kind::Plain => Op::Crash {
            keep_prefix: rng.random_bool(0.5).then(|| rng.random()),
        },
        897..930 => Op::Flush { t },
        930..945 => Op::Compact {
            t,
            full: rng.random_bool(0.5),
        },
        945..955 => Op::CompactRange {
            t,
            lo: gen_bound(rng),
            hi: gen_bound(rng),
        },
        _ => Op::Put {
            t,
            k,
            len: gen_len(rng),
        },
    }
}

// ---- seeded runs ----

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

fn seeds(default_count: u64) -> Vec<u64> {
    if let Some(s) = env_u64("RIPTIDE_MODEL_SEED") {
        return vec![s];
    }
    (0..env_u64("RIPTIDE_MODEL_SEEDS").unwrap_or(default_count)).collect()
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Runs one seed; a failure (or a panic inside the engine) reports seed and op index.
fn run_seed(test: &str, kind: Kind, posix: bool, seed: u64, nops: usize) {
    let at = Cell::new(usize::MAX);
    let recent: std::cell::RefCell<VecDeque<String>> = Default::default();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        // Each test gets its own op streams for the same seed numbers.
        let salted = test
            .bytes()
            .fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3));
        let mut rng = StdRng::seed_from_u64(salted);
        let mut h = Harness::new(kind, posix, salted)?;
        for i in 0..nops {
            let op = gen_op(&mut rng, kind);
            at.set(i);
            {
                let mut r = recent.borrow_mut();
                if r.len() == 6 {
                    r.pop_front();
                }
                r.push_back(format!("  op {i}: {op:?}"));
            }
            if std::env::var("RIPTIDE_MODEL_TRACE").is_ok() {
                eprintln!("op {i}: {op:?}");
            }
            h.apply(&op)?;
            if std::env::var("RIPTIDE_MODEL_VERIFY_EACH").is_ok() {
                h.verify_all(&format!("after op {i}"))?;
            }
        }
        at.set(nops);
        h.finish()
    }));
    let err = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(p) => format!("panicked: {}", panic_message(p.as_ref())),
    };
    let op = match at.get() {
        usize::MAX => "setup".to_string(),
        i if i == nops => "final check".to_string(),
        i => format!("op={i}"),
    };
    let recent: Vec<String> = recent.into_inner().into_iter().collect();
    panic!(
        "{test}: seed={seed} {op} FAILED: {err}\nlast ops:\n{}\nrerun: RIPTIDE_MODEL_SEED={seed} cargo test -p riptide --test model {test}",
        recent.join("\n")
    );
}

fn run_seeds(test: &str, kind: Kind, posix: bool, default_seeds: u64, default_ops: u64) {
    let nops = env_u64("RIPTIDE_MODEL_OPS").unwrap_or(default_ops) as usize;
    for seed in seeds(default_seeds) {
        run_seed(test, kind, posix, seed, nops);
    }
}

#[test]
fn model_random_ops() {
    run_seeds("model_random_ops", Kind::Plain, false, 500, 400);
}

#[test]
fn model_random_ops_posix_fs() {
    run_seeds("model_random_ops_posix_fs", Kind::Plain, true, 10, 300);
}

#[test]
fn model_power_cut_synced_writes_lose_nothing() {
    run_seeds(
        "model_power_cut_synced_writes_lose_nothing",
        Kind::PowerCutSynced,
        false,
        300,
        400,
    );
}

#[test]
fn model_power_cut_unsynced_writes_recover_a_prefix() {
    run_seeds(
        "model_power_cut_unsynced_writes_recover_a_prefix",
        Kind::PowerCutUnsynced,
        false,
        300,
        400,
    );
}

/// The checker itself must be able to fail: a model that diverges from the engine is caught.
#[test]
fn model_checker_detects_divergence() {
    let mut h = Harness::new(Kind::Plain, false, 1).unwrap();
    h.apply(&Op::Put { t: 0, k: 3, len: 5 }).unwrap();
    h.verify_all("sanity").unwrap();
    let name = h.table_at(0).0;
    h.model.get_mut(&name).unwrap().data.insert(key(4), b"phantom".to_vec());
    assert!(
        h.verify_all("diverged").is_err(),
        "a phantom model entry went unnoticed"
    );
    h.model.get_mut(&name).unwrap().data.remove(&key(4));
    h.model.get_mut(&name).unwrap().data.insert(key(3), b"other".to_vec());
    assert!(
        h.apply(&Op::Get { t: 0, k: 3, snap: None }).is_err(),
        "a wrong value went unnoticed"
    );
}

// ---- proptest ----

fn len_s() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 6 => 1u32..=16, 6 => 17u32..=512, 3 => 513u32..=8192, 2 => 8193u32..=70_000]
}

fn key_s() -> impl Strategy<Value = u16> {
    0..NKEYS as u16
}

fn bound_s() -> impl Strategy<Value = Option<u16>> {
    prop::option::weighted(0.6, 0..NPROBES)
}

fn snap_s() -> impl Strategy<Value = Option<u8>> {
    prop::option::weighted(0.4, any::<u8>())
}

fn batch_s() -> impl Strategy<Value = Vec<BOp>> {
    let bop = (any::<u8>(), key_s(), prop::option::weighted(0.75, len_s())).prop_map(|(t, k, val)| BOp { t, k, val });
    (
        prop::collection::vec(bop, 0..8),
        prop::option::of((any::<u16>(), prop::option::of(len_s()))),
    )
        .prop_map(|(mut ops, dup)| {
            if let (Some((i, val)), false) = (dup, ops.is_empty()) {
                let d = BOp {
                    val,
                    ..ops[i as usize % ops.len()].clone()
                };
                ops.push(d);
            }
            ops
        })
}

fn move_s() -> impl Strategy<Value = Move> {
    prop_oneof![
        1 => Just(Move::First),
        1 => Just(Move::Last),
        2 => (0..NPROBES).prop_map(Move::Seek),
        2 => (0..NPROBES).prop_map(Move::SeekForPrev),
        3 => Just(Move::Next),
        3 => Just(Move::Prev),
        1 => (key_s(), prop::option::of(len_s())).prop_map(|(k, val)| Move::Write { k, val }),
    ]
}

fn op_s() -> BoxedStrategy<Op> {
    prop_oneof![
        10 => (any::<u8>(), key_s(), len_s()).prop_map(|(t, k, len)| Op::Put { t, k, len }).boxed(),
        4 => (any::<u8>(), key_s()).prop_map(|(t, k)| Op::Delete { t, k }).boxed(),
        5 => (batch_s(), prop::bool::weighted(0.15))
            .prop_map(|(ops, with_dropped)| Op::Batch { ops, with_dropped })
            .boxed(),
        4 => (any::<u8>(), key_s(), snap_s()).prop_map(|(t, k, snap)| Op::Get { t, k, snap }).boxed(),
        2 => (prop::collection::vec((any::<u8>(), key_s()), 0..6), snap_s())
            .prop_map(|(keys, snap)| Op::MultiGet { keys, snap })
            .boxed(),
        2 => Just(Op::TakeSnapshot).boxed(),
        1 => any::<u8>().prop_map(|i| Op::ReleaseSnapshot { i }).boxed(),
        4 => (any::<u8>(), bound_s(), bound_s(), snap_s(), prop::collection::vec(any::<bool>(), 0..20))
            .prop_map(|(t, lo, hi, snap, dirs)| Op::Iter { t, lo, hi, snap, dirs })
            .boxed(),
        4 => (any::<u8>(), bound_s(), bound_s(), snap_s(), prop::collection::vec(move_s(), 1..24))
            .prop_map(|(t, lo, hi, snap, moves)| Op::Cursor { t, lo, hi, snap, moves })
            .boxed(),
        1 => any::<u8>().prop_map(|name| Op::CreateTable { name }).boxed(),
        1 => any::<u8>().prop_map(|name| Op::DropTable { name }).boxed(),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }).boxed(),
        1 => prop::option::of(any::<u64>()).prop_map(|keep_prefix| Op::Crash { keep_prefix }).boxed(),
        2 => any::<u8>().prop_map(|t| Op::Flush { t }).boxed(),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(t, full)| Op::Compact { t, full }).boxed(),
        1 => (any::<u8>(), bound_s(), bound_s()).prop_map(|(t, lo, hi)| Op::CompactRange { t, lo, hi }).boxed(),
    ]
    .boxed()
}

proptest! {
    // 256 cases unless PROPTEST_CASES says otherwise; no regression file is written.
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Generated op sequences (with power cuts of mostly unsynced writes) against the model.
    #[test]
    fn model_proptest_op_sequences(ops in prop::collection::vec(op_s(), 1..120)) {
        let mut h = Harness::new(Kind::PowerCutUnsynced, false, 7).map_err(TestCaseError::fail)?;
        for (i, op) in ops.iter().enumerate() {
            h.apply(op).map_err(|e| TestCaseError::fail(format!("op {i} {op:?}: {e}")))?;
        }
        h.finish().map_err(TestCaseError::fail)?;
    }
}
