//! Unit tests of the metadata module: entry encoding round trips (proptest) and refusal of
//! malformed bytes; [`MetaState::apply`] semantics and every error it reports (leaving the state
//! unchanged); slog commit + reopen; crashes ([`FaultFs::crash`] with `DropUnsynced` and
//! `KeepRandomPrefix`) after a commit returned, during a commit (faults on append and sync),
//! and at every step of a checkpoint and of open; uncommitted and torn tails; damage in the
//! middle of a slog; CRC-valid records that break the transaction structure; checkpoint round
//! trips (also large, multi-record states); every flipped byte of CURRENT and of a checkpoint;
//! poisoning; leftover files; `dump_slog`; and a run on the real file system.

use super::checkpoint::{load_checkpoint, read_checkpoint, write_checkpoint, CHECKPOINT_HEADER_SIZE};
use super::current::*;
use super::dump::*;
use super::edit::*;
use super::framing::*;
use super::slog::*;
use crate::coding::{seal_crc_tail, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::{CrashMode, FaultFs, FaultOp, FileSystem, PosixFs};
use crate::key::{encode_internal_key, ValueKind};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Helpers

fn db() -> PathBuf {
    PathBuf::from("/db")
}

fn mdir() -> PathBuf {
    meta_dir(&db())
}

fn new_fs() -> (FaultFs, Arc<dyn FileSystem>) {
    let fs = FaultFs::new();
    fs.create_dir_all(&db()).unwrap();
    let arc: Arc<dyn FileSystem> = Arc::new(fs.clone());
    (fs, arc)
}

fn open(afs: &Arc<dyn FileSystem>) -> Result<(Slog, SlogRecovery)> {
    Slog::open(afs.clone(), &db())
}

/// Sorted names in the metadata directory.
fn names(fs: &FaultFs) -> Vec<String> {
    let mut v = fs.list_dir(&mdir()).unwrap();
    v.sort();
    v
}

fn ikey(user: &[u8], lsn: u64) -> Vec<u8> {
    let mut k = Vec::new();
    encode_internal_key(&mut k, user, lsn, ValueKind::Put);
    k
}

/// An extent of `table` covering user keys `lo..=hi`.
fn ext(id: u64, table: u32, lo: &str, hi: &str) -> ExtentMeta {
    ExtentMeta {
        id,
        slots: 1,
        table,
        smallest: ikey(lo.as_bytes(), 9),
        largest: ikey(hi.as_bytes(), 1),
        min_lsn: 1,
        max_lsn: 9,
        entries: 100 + id,
        deletes: id % 3,
        data_size: id.wrapping_mul(4096),
        blocks: 3,
    }
}

/// A flush of `table`: a new L0 layer `layer` holding `extents`, recovery point `lsn`.
fn flush(table: u32, layer: u64, lsn: u64, extents: Vec<ExtentMeta>) -> SlogEntry {
    SlogEntry::Edit(TableEdit {
        table,
        removed: vec![],
        added: extents.into_iter().map(|e| (0, layer, e)).collect(),
        flushed_lsn: Some(lsn),
        next_layer: Some(layer + 1),
    })
}

fn edit(table: u32, removed: Vec<(u8, u64, u64)>, added: Vec<(u8, u64, ExtentMeta)>) -> SlogEntry {
    SlogEntry::Edit(TableEdit {
        table,
        removed,
        added,
        flushed_lsn: None,
        next_layer: None,
    })
}

fn apply_all(state: &mut MetaState, entries: &[SlogEntry]) {
    for e in entries {
        state.apply(e).unwrap();
    }
}

fn state_of(entries: &[SlogEntry]) -> MetaState {
    let mut s = MetaState::default();
    apply_all(&mut s, entries);
    s
}

fn assert_corruption<T: std::fmt::Debug>(r: Result<T>, path: &Path) -> Error {
    let e = r.unwrap_err();
    match &e {
        Error::Corruption { path: p, .. } => assert_eq!(p, path, "{e}"),
        _ => panic!("expected corruption in {path:?}, got {e}"),
    }
    e
}

fn corruption_offset(e: &Error) -> u64 {
    match e {
        Error::Corruption { offset, .. } => *offset,
        _ => panic!("not corruption: {e}"),
    }
}

/// Generates random valid entries against a model state.
struct Gen {
    rng: StdRng,
    next_id: u64,
    lsn: u64,
}

impl Gen {
    fn new(seed: u64) -> Self {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            next_id: 1,
            lsn: 1,
        }
    }

    fn key(&mut self) -> Vec<u8> {
        let len = self.rng.random_range(0..12);
        let user: Vec<u8> = (0..len).map(|_| self.rng.random_range(b'a'..=b'e')).collect();
        ikey(&user, self.rng.random_range(0..1000))
    }

    fn extent(&mut self, table: u32) -> ExtentMeta {
        let id = (self.next_id << 8) | self.rng.random_range(0..4);
        self.next_id += 1;
        let (a, b) = (self.key(), self.key());
        ExtentMeta {
            id,
            slots: self.rng.random_range(1..4),
            table,
            smallest: a,
            largest: b,
            min_lsn: self.rng.random(),
            max_lsn: self.rng.random(),
            entries: self.rng.random_range(0..1 << 40),
            deletes: self.rng.random_range(0..1000),
            data_size: self.rng.random_range(0..2 << 20),
            blocks: self.rng.random(),
        }
    }

    /// One valid entry for `state`.
    fn entry(&mut self, state: &MetaState) -> SlogEntry {
        let table = self.rng.random_range(0..4u32);
        let tm = state.tables.get(&table).cloned().unwrap_or_default();
        match self.rng.random_range(0..20) {
            0 => SlogEntry::DropTable(table),
            1..=9 => {
                // Flush: a new L0 layer.
                let n = self.rng.random_range(1..4);
                let extents = (0..n).map(|_| self.extent(table)).collect();
                self.lsn += self.rng.random_range(0..100);
                flush(table, tm.next_layer, self.lsn, extents)
            }
            _ => {
                // Compaction: remove some extents, add some to L1/L2, move one.
                let live: Vec<(u8, u64, ExtentMeta)> = tm.extents().map(|(l, y, e)| (l, y, e.clone())).collect();
                let mut removed = Vec::new();
                let mut added = Vec::new();
                for (level, layer, e) in &live {
                    if self.rng.random_bool(0.3) {
                        removed.push((*level, *layer, e.id));
                        if self.rng.random_bool(0.3) {
                            // Reuse: the same extent moves to another level.
                            added.push((self.rng.random_range(1..3), 0, e.clone()));
                        }
                    }
                }
                for _ in 0..self.rng.random_range(0..4) {
                    let e = self.extent(table);
                    added.push((self.rng.random_range(1..3), 0, e));
                }
                if self.rng.random_bool(0.2) && tm.next_layer > 0 {
                    // Intra-L0 output into an existing layer id.
                    let e = self.extent(table);
                    added.push((0, self.rng.random_range(0..tm.next_layer), e));
                }
                SlogEntry::Edit(TableEdit {
                    table,
                    removed,
                    added,
                    flushed_lsn: None,
                    next_layer: self.rng.random_bool(0.1).then_some(tm.next_layer + 2),
                })
            }
        }
    }

    /// A transaction of 1..=4 entries valid against `state` (which it advances).
    fn txn(&mut self, state: &mut MetaState) -> Vec<SlogEntry> {
        let n = self.rng.random_range(1..=4);
        let mut out = Vec::new();
        for _ in 0..n {
            let e = self.entry(state);
            state.apply(&e).unwrap();
            out.push(e);
        }
        out
    }
}

/// A random valid state built by `n` random entries.
fn random_state(seed: u64, n: usize) -> MetaState {
    let mut g = Gen::new(seed);
    let mut s = MetaState::default();
    for _ in 0..n {
        let e = g.entry(&s);
        s.apply(&e).unwrap();
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Encoding

fn arb_extent() -> impl Strategy<Value = ExtentMeta> {
    (
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (
            prop::collection::vec(any::<u8>(), 0..24),
            prop::collection::vec(any::<u8>(), 0..24),
        ),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        any::<u32>(),
    )
        .prop_map(
            |((id, slots, table), (smallest, largest), (min_lsn, max_lsn, entries, deletes, data_size), blocks)| {
                ExtentMeta {
                    id,
                    slots,
                    table,
                    smallest,
                    largest,
                    min_lsn,
                    max_lsn,
                    entries,
                    deletes,
                    data_size,
                    blocks,
                }
            },
        )
}

fn arb_entry() -> impl Strategy<Value = SlogEntry> {
    let edit = (
        any::<u32>(),
        prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 0..5),
        prop::collection::vec((any::<u8>(), any::<u64>(), arb_extent()), 0..5),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
    )
        .prop_map(|(table, removed, added, flushed_lsn, next_layer)| {
            SlogEntry::Edit(TableEdit {
                table,
                removed,
                added,
                flushed_lsn,
                next_layer,
            })
        });
    prop_oneof![4 => edit, 1 => any::<u32>().prop_map(SlogEntry::DropTable)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn entries_round_trip(entries in prop::collection::vec(arb_entry(), 0..6)) {
        let mut buf = Vec::new();
        for e in &entries {
            put_entry(&mut buf, e);
        }
        prop_assert_eq!(decode_entries(&buf).unwrap(), entries.clone());
        // Every strict prefix that cuts the last entry is refused, never misread.
        if let Some(last) = entries.last() {
            let mut one = Vec::new();
            put_entry(&mut one, last);
            let start = buf.len() - one.len();
            for cut in start + 1..buf.len() {
                prop_assert!(decode_entries(&buf[..cut]).is_err(), "cut at {}", cut);
            }
        }
    }

    #[test]
    fn garbage_entries_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_entries(&bytes);
    }

    #[test]
    fn random_states_survive_a_checkpoint(seed in any::<u64>(), n in 0usize..80) {
        let state = random_state(seed, n);
        state.validate().unwrap();
        let (fs, _) = new_fs();
        let path = db().join("CHECKPOINT-000007");
        write_checkpoint(&fs, &path, 7, &state).unwrap();
        let (number, back) = load_checkpoint(&fs, &path).unwrap();
        prop_assert_eq!(number, 7);
        back.validate().unwrap();
        prop_assert_eq!(back, state);
    }

    #[test]
    fn random_transactions_replay(seed in any::<u64>(), txns in 1usize..12) {
        let (_fs, afs) = new_fs();
        let (mut slog, rec) = open(&afs).unwrap();
        prop_assert_eq!(rec.state, MetaState::default());
        let mut g = Gen::new(seed);
        let mut model = MetaState::default();
        for _ in 0..txns {
            let t = g.txn(&mut model);
            slog.commit(&t).unwrap();
        }
        drop(slog);
        let (_, rec) = open(&afs).unwrap();
        prop_assert_eq!(rec.replayed_txns, txns as u64);
        prop_assert_eq!(rec.truncated_tail_bytes, 0);
        rec.state.validate().unwrap();
        prop_assert_eq!(rec.state, model);
    }
}

#[test]
fn malformed_entries_are_refused() {
    // Unknown tag, unknown edit flag bits, a u32 field out of range, a count beyond the input.
    assert_eq!(decode_entries(&[9]), Err(0));
    let mut e = Vec::new();
    put_entry(&mut e, &edit(1, vec![], vec![]));
    *e.last_mut().unwrap() = 0x04;
    assert!(decode_entries(&e).is_err());
    let mut big = vec![2];
    crate::coding::put_varint(&mut big, u64::from(u32::MAX) + 1);
    assert!(decode_entries(&big).is_err());
    let mut huge_count = vec![1, 0];
    crate::coding::put_varint(&mut huge_count, u64::MAX >> 1);
    assert!(decode_entries(&huge_count).is_err());
    // Good entry then garbage: the offset of the garbage is reported.
    let mut two = Vec::new();
    put_entry(&mut two, &SlogEntry::DropTable(3));
    let good = two.len();
    two.push(77);
    assert_eq!(decode_entries(&two), Err(good));
}

// ---------------------------------------------------------------------------------------------
// MetaState::apply

#[test]
fn apply_flush_compaction_move_and_drop() {
    let mut s = MetaState::default();
    // Extents are kept sorted by smallest key, whatever the order they are added in.
    s.apply(&flush(
        1,
        0,
        10,
        vec![ext(3, 1, "m", "p"), ext(1, 1, "a", "c"), ext(2, 1, "d", "f")],
    ))
    .unwrap();
    let ids = |s: &MetaState, level: usize, layer: u64| -> Vec<u64> {
        s.tables[&1].levels[level]
            .get(&layer)
            .map(|v| v.iter().map(|e| e.id).collect())
            .unwrap_or_default()
    };
    assert_eq!(ids(&s, 0, 0), [1, 2, 3]);
    assert_eq!((s.tables[&1].flushed_lsn, s.tables[&1].next_layer), (10, 1));
    s.apply(&flush(1, 1, 20, vec![ext(4, 1, "b", "z")])).unwrap();
    assert_eq!(s.tables[&1].levels[0].len(), 2);
    // Compaction of layer 0 into L1, reusing extent 2 (moved, same id).
    s.apply(&edit(
        1,
        vec![(0, 0, 1), (0, 0, 2), (0, 0, 3)],
        vec![
            (1, 0, ext(5, 1, "a", "c")),
            (1, 0, ext(2, 1, "d", "f")),
            (1, 0, ext(6, 1, "m", "p")),
        ],
    ))
    .unwrap();
    // The emptied L0 layer is dropped; the other stays.
    assert_eq!(s.tables[&1].levels[0].keys().copied().collect::<Vec<_>>(), [1]);
    assert_eq!(ids(&s, 1, 0), [5, 2, 6]);
    assert_eq!(s.extent_count(), 4);
    assert!(s.contains_extent(2) && !s.contains_extent(1));
    let mut all: Vec<u64> = s.extents().map(|e| e.id).collect();
    all.sort_unstable();
    assert_eq!(all, [2, 4, 5, 6]);
    // A removal that empties L1 drops its layer 0 too.
    s.apply(&edit(1, vec![(1, 0, 5), (1, 0, 2), (1, 0, 6)], vec![]))
        .unwrap();
    assert!(s.tables[&1].levels[1].is_empty());
    // An edit of an unknown table creates it; a drop removes everything, an unknown drop is a no-op.
    s.apply(&edit(2, vec![], vec![(2, 0, ext(9, 2, "a", "b"))])).unwrap();
    assert_eq!(s.tables[&2].extent_count(), 1);
    s.apply(&SlogEntry::DropTable(2)).unwrap();
    s.apply(&SlogEntry::DropTable(42)).unwrap();
    assert!(!s.tables.contains_key(&2) && !s.contains_extent(9));
    // A dropped table's extent ids may be live again (e.g. a recreated table).
    s.apply(&edit(3, vec![], vec![(2, 0, ext(9, 3, "a", "b"))])).unwrap();
    s.validate().unwrap();
    assert_eq!(MetaState::from_tables(s.tables.clone()).unwrap(), s);
}

#[test]
fn apply_errors_are_corruption_and_change_nothing() {
    let mut s = MetaState::default();
    s.apply(&flush(1, 0, 10, vec![ext(1, 1, "a", "c"), ext(2, 1, "d", "f")]))
        .unwrap();
    s.apply(&flush(2, 4, 7, vec![ext(3, 2, "a", "c")])).unwrap();
    let bad: Vec<(&str, SlogEntry)> = vec![
        ("remove missing", edit(1, vec![(0, 0, 99)], vec![])),
        ("remove wrong layer", edit(1, vec![(0, 1, 1)], vec![])),
        ("remove wrong level", edit(1, vec![(1, 0, 1)], vec![])),
        ("remove other table's", edit(1, vec![(0, 4, 3)], vec![])),
        ("remove twice", edit(1, vec![(0, 0, 1), (0, 0, 1)], vec![])),
        ("add live id", edit(1, vec![], vec![(1, 0, ext(2, 1, "x", "y"))])),
        (
            "add id live elsewhere",
            edit(1, vec![], vec![(1, 0, ext(3, 1, "x", "y"))]),
        ),
        (
            "add twice",
            edit(
                1,
                vec![],
                vec![(1, 0, ext(8, 1, "x", "y")), (2, 0, ext(8, 1, "x", "y"))],
            ),
        ),
        ("level 3", edit(1, vec![], vec![(3, 0, ext(8, 1, "x", "y"))])),
        ("remove level 3", edit(1, vec![(3, 0, 1)], vec![])),
        ("L1 layer 1", edit(1, vec![], vec![(1, 1, ext(8, 1, "x", "y"))])),
        (
            "L0 layer >= next_layer",
            edit(1, vec![], vec![(0, 1, ext(8, 1, "x", "y"))]),
        ),
        ("table mismatch", edit(1, vec![], vec![(1, 0, ext(8, 2, "x", "y"))])),
        ("flushed_lsn back", flush(1, 1, 9, vec![])),
        (
            "next_layer back",
            SlogEntry::Edit(TableEdit {
                table: 2,
                removed: vec![],
                added: vec![],
                flushed_lsn: None,
                next_layer: Some(4),
            }),
        ),
        // A valid removal followed by an invalid add: nothing may happen.
        (
            "half valid",
            edit(1, vec![(0, 0, 1)], vec![(1, 0, ext(3, 1, "x", "y"))]),
        ),
    ];
    for (what, e) in bad {
        let before = s.clone();
        let err = s.apply(&e).unwrap_err();
        assert!(err.is_corruption(), "{what}: {err}");
        assert_eq!(s, before, "{what} changed the state");
        s.validate().unwrap();
    }
}

#[test]
fn invalid_plain_states_are_refused() {
    let good = state_of(&[flush(1, 0, 10, vec![ext(1, 1, "a", "c"), ext(2, 1, "d", "f")])]);
    let check = |what: &str, f: &dyn Fn(&mut BTreeMap<u32, TableMeta>)| {
        let mut t = good.tables.clone();
        f(&mut t);
        assert!(MetaState::from_tables(t).unwrap_err().is_corruption(), "{what}");
    };
    check("unsorted", &|t| {
        t.get_mut(&1).unwrap().levels[0].get_mut(&0).unwrap().reverse()
    });
    check("empty layer", &|t| {
        t.get_mut(&1).unwrap().levels[1].insert(0, vec![]);
    });
    check("duplicate id", &|t| {
        t.get_mut(&1).unwrap().levels[2].insert(0, vec![ext(1, 1, "a", "b")]);
    });
    check("L2 layer 3", &|t| {
        t.get_mut(&1).unwrap().levels[2].insert(3, vec![ext(7, 1, "a", "b")]);
    });
    check("L0 layer beyond next_layer", &|t| {
        t.get_mut(&1).unwrap().levels[0].insert(5, vec![ext(7, 1, "a", "b")]);
    });
    check("wrong table", &|t| {
        t.get_mut(&1).unwrap().levels[2].insert(0, vec![ext(7, 9, "a", "b")]);
    });
    // Tables changed behind the index are caught by validate (and refused by checkpoint).
    let mut s = good.clone();
    s.tables.get_mut(&1).unwrap().levels[2].insert(0, vec![ext(7, 1, "a", "b")]);
    assert!(s.validate().unwrap_err().is_corruption());
    let (_fs, afs) = new_fs();
    let (mut slog, _) = open(&afs).unwrap();
    assert!(slog.checkpoint(&s).unwrap_err().is_corruption());
    // Refusing an invalid state does not poison.
    slog.commit(&[flush(1, 0, 10, vec![ext(1, 1, "a", "c")])]).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Slog: commit and reopen

#[test]
fn fresh_open_creates_current_and_first_slog() {
    let (fs, afs) = new_fs();
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!(
        (rec.checkpoint, rec.slog, rec.replayed_txns, rec.truncated_tail_bytes),
        (0, 1, 0, 0)
    );
    assert_eq!(rec.state, MetaState::default());
    // Open always moves the committed prefix to a new slog.
    assert_eq!(slog.numbers(), (0, 2));
    assert_eq!(names(&fs), ["CURRENT", "SLOG-000002"]);
    assert_eq!(slog.bytes_since_checkpoint(), 0);
    // Everything is durable.
    drop(slog);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), ["CURRENT", "SLOG-000002"]);
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!((rec.slog, slog.slog_number()), (2, 3));
    assert_eq!(slog.dir(), mdir());
}

#[test]
fn commits_replay_after_reopen_and_txn_ids_continue() {
    let (fs, afs) = new_fs();
    let (mut slog, _) = open(&afs).unwrap();
    let t1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")])];
    let t2 = vec![
        flush(2, 0, 11, vec![ext(2, 2, "a", "c")]),
        edit(1, vec![(0, 0, 1)], vec![(1, 0, ext(1, 1, "a", "c"))]),
    ];
    slog.commit(&t1).unwrap();
    let after1 = slog.bytes_since_checkpoint();
    assert!(after1 > 0);
    slog.commit(&t2).unwrap();
    slog.commit(&[]).unwrap(); // writes nothing
    let size = slog.bytes_since_checkpoint();
    assert!(size > after1);
    drop(slog);
    let (mut slog, rec) = open(&afs).unwrap();
    assert_eq!(rec.replayed_txns, 2);
    assert_eq!(rec.state, state_of(&[t1.clone(), t2.clone()].concat()));
    assert_eq!(
        slog.bytes_since_checkpoint(),
        size,
        "the committed prefix is carried over"
    );
    let t3 = vec![SlogEntry::DropTable(2)];
    slog.commit(&t3).unwrap();
    drop(slog);
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!(rec.replayed_txns, 3);
    assert_eq!(rec.state, state_of(&[t1, t2, t3].concat()));
    // Transaction ids are 1, 2, 3 in the carried-over slog.
    let path = slog_path(&mdir(), slog.slog_number());
    let txns: Vec<u64> = dump_slog(&fs, &path)
        .unwrap()
        .into_iter()
        .filter_map(|(_, v)| match v {
            SlogRecordView::Commit { txn, .. } => Some(txn),
            _ => None,
        })
        .collect();
    assert_eq!(txns, [1, 2, 3]);
}

#[test]
fn a_large_transaction_spans_several_records() {
    let (fs, afs) = new_fs();
    let (mut slog, _) = open(&afs).unwrap();
    // Three entries of ~600 KiB each (long keys) and many small ones.
    let big_key = |c: u8| ikey(&vec![c; 300 << 10], 5);
    let mut entries = Vec::new();
    for (i, c) in [b'a', b'b', b'c'].into_iter().enumerate() {
        let mut e = ext(10 + i as u64, 1, "a", "b");
        e.smallest = big_key(c);
        e.largest = big_key(c);
        entries.push(edit(1, vec![], vec![(2, 0, e)]));
    }
    for i in 0..2000u64 {
        entries.push(edit(
            5,
            vec![],
            vec![(1, 0, ext(1000 + i, 5, &format!("k{i:05}"), "z"))],
        ));
    }
    slog.commit(&entries).unwrap();
    let path = slog_path(&mdir(), slog.slog_number());
    let views = dump_slog(&fs, &path).unwrap();
    let records = views
        .iter()
        .filter(|(_, v)| matches!(v, SlogRecordView::Entries { .. }))
        .count();
    assert!(records >= 3, "{records} records");
    let decoded: Vec<SlogEntry> = views
        .into_iter()
        .flat_map(|(_, v)| match v {
            SlogRecordView::Entries { entries, .. } => entries,
            _ => vec![],
        })
        .collect();
    assert_eq!(decoded, entries);
    drop(slog);
    fs.crash(CrashMode::DropUnsynced);
    let (_, rec) = open(&afs).unwrap();
    assert_eq!(rec.state, state_of(&entries));
}

#[test]
fn a_commit_that_returned_survives_any_crash() {
    for mode in [CrashMode::DropUnsynced, CrashMode::KeepRandomPrefix { seed: 7 }] {
        let (fs, afs) = new_fs();
        let (mut slog, _) = open(&afs).unwrap();
        let mut g = Gen::new(1);
        let mut model = MetaState::default();
        for _ in 0..5 {
            let t = g.txn(&mut model);
            slog.commit(&t).unwrap();
        }
        fs.crash(mode);
        // The old handle is dead; its next commit fails and poisons.
        assert!(slog.commit(&g.txn(&mut model.clone())).is_err());
        let (_, rec) = open(&afs).unwrap();
        assert_eq!(rec.state, model);
        assert_eq!(rec.truncated_tail_bytes, 0);
    }
}

/// Opens a slog on a fresh FaultFs and commits `n` random transactions; returns the model.
fn setup_with_txns(seed: u64, n: usize) -> (FaultFs, Arc<dyn FileSystem>, Slog, MetaState, Gen) {
    let (fs, afs) = new_fs();
    let (mut slog, _) = open(&afs).unwrap();
    let mut g = Gen::new(seed);
    let mut model = MetaState::default();
    for _ in 0..n {
        let t = g.txn(&mut model);
        slog.commit(&t).unwrap();
    }
    (fs, afs, slog, model, g)
}

#[test]
fn failed_append_leaves_the_previous_state_and_poisons() {
    let (fs, afs, mut slog, model, mut g) = setup_with_txns(2, 3);
    fs.fail_after(FaultOp::Append, Some("SLOG"), 0, libc::ENOSPC);
    let t = g.txn(&mut model.clone());
    let err = slog.commit(&t).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    // Poisoned: the same error, for commits and checkpoints, even once the disk is fine.
    let again = slog.commit(&t).unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
    assert_eq!(slog.checkpoint(&model).unwrap_err().to_string(), err.to_string());
    assert_eq!(fs.faults_fired(), 1);
    drop(slog);
    let (_, rec) = open(&afs).unwrap();
    assert_eq!(rec.state, model);
}

#[test]
fn failed_sync_poisons_and_the_commit_is_in_doubt() {
    for seed in 0..24u64 {
        let (fs, afs, mut slog, model, mut g) = setup_with_txns(seed, 2);
        let mut after = model.clone();
        let t = g.txn(&mut after);
        fs.fail_after(FaultOp::Sync, Some("SLOG"), 0, libc::EIO);
        let err = slog.commit(&t).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert_eq!(slog.commit(&t).unwrap_err().to_string(), err.to_string());
        match seed % 3 {
            // Power loss drops the unsynced bytes: the previous state.
            0 => {
                fs.crash(CrashMode::DropUnsynced);
                let (_, rec) = open(&afs).unwrap();
                assert_eq!(rec.state, model);
            }
            // A torn write: the previous state or, if all of it survived, the new one.
            1 => {
                fs.crash(CrashMode::KeepRandomPrefix { seed });
                let (_, rec) = open(&afs).unwrap();
                assert!(rec.state == model || rec.state == after, "seed {seed}");
            }
            // No crash: the bytes are in the file and the transaction is complete.
            _ => {
                drop(slog);
                let (_, rec) = open(&afs).unwrap();
                assert_eq!(rec.state, after);
            }
        }
    }
}

#[test]
fn a_crash_in_the_middle_of_a_large_commit_keeps_the_previous_state() {
    let mut outcomes = [0usize; 2];
    for seed in 0..48u64 {
        let (fs, afs, mut slog, model, mut g) = setup_with_txns(seed, 3);
        // A transaction of several records, whose fdatasync fails: torn at a random point.
        let mut after = model.clone();
        let mut t = g.txn(&mut after);
        for i in 0..3000u64 {
            let e = edit(
                9,
                vec![],
                vec![(2, 0, ext((1 << 60) + i, 9, &format!("k{i:06}{}", "p".repeat(300)), "z"))],
            );
            after.apply(&e).unwrap();
            t.push(e);
        }
        fs.fail_after(FaultOp::Sync, Some("SLOG"), 0, libc::EIO);
        assert!(slog.commit(&t).is_err());
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        let (_, rec) = open(&afs).unwrap();
        if rec.state == model {
            outcomes[0] += 1;
        } else {
            assert_eq!(rec.state, after, "seed {seed}");
            outcomes[1] += 1;
        }
    }
    assert!(outcomes[0] > 0, "{outcomes:?}");
}

/// The bytes of one encoded transaction `txn` holding `entries`.
fn txn_bytes(txn: u64, entries: &[SlogEntry]) -> Vec<u8> {
    let mut enc = Vec::new();
    encode_record(&mut enc, REC_BEGIN, txn, &[]).unwrap();
    pack_entries(entries, &mut |p| {
        encode_record(&mut enc, REC_ENTRIES, txn, p).unwrap();
        Ok(())
    })
    .unwrap();
    encode_record(&mut enc, REC_COMMIT, txn, &(entries.len() as u64).to_le_bytes()).unwrap();
    enc
}

/// Builds a database whose CURRENT is `(0, 1)` and whose SLOG-000001 is `header ‖ body`.
fn fs_with_slog(body: &[u8]) -> (FaultFs, Arc<dyn FileSystem>) {
    let (fs, afs) = new_fs();
    let (slog, _) = open(&afs).unwrap(); // CURRENT (0, 2), empty SLOG-000002
    drop(slog);
    let path = slog_path(&mdir(), 2);
    let mut data = fs.read_file(&path).unwrap();
    assert_eq!(data.len(), SLOG_HEADER_SIZE);
    data.extend_from_slice(body);
    fs.write_file(&path, data);
    (fs, afs)
}

fn slog2() -> PathBuf {
    slog_path(&mdir(), 2)
}

#[test]
fn begin_without_commit_is_not_replayed() {
    let t1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")])];
    let t2 = vec![flush(1, 1, 20, vec![ext(2, 1, "a", "c")])];
    let committed = txn_bytes(1, &t1);
    let full2 = txn_bytes(2, &t2);
    // t2 without its COMMIT record (BEGIN and ENTRIES only, all CRC-valid).
    let commit_len = RECORD_HEADER_SIZE + 8;
    let open2 = &full2[..full2.len() - commit_len];
    let (fs, afs) = fs_with_slog(&[committed.clone(), open2.to_vec()].concat());
    let views = dump_slog(&fs, &slog2()).unwrap();
    assert!(views.iter().all(|(_, v)| !matches!(v, SlogRecordView::TornTail { .. })));
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!(rec.state, state_of(&t1));
    assert_eq!(rec.replayed_txns, 1);
    assert_eq!(rec.truncated_tail_bytes, open2.len() as u64);
    // The open transaction is gone for good: the new slog holds only t1.
    let new = fs.read_file(&slog_path(&mdir(), slog.slog_number())).unwrap();
    assert_eq!(&new[SLOG_HEADER_SIZE..], &committed[..]);
    drop(slog);
    let (_, rec) = open(&afs).unwrap();
    assert_eq!((rec.truncated_tail_bytes, rec.replayed_txns), (0, 1));
}

#[test]
fn torn_tail_is_truncated_at_every_cut() {
    let t1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")])];
    let t2 = vec![
        flush(1, 1, 20, vec![ext(2, 1, "a", "c"), ext(3, 1, "d", "e")]),
        SlogEntry::DropTable(7),
    ];
    let b1 = txn_bytes(1, &t1);
    let b2 = txn_bytes(2, &t2);
    for cut in 0..b2.len() {
        let (fs, afs) = fs_with_slog(&[b1.clone(), b2[..cut].to_vec()].concat());
        let (slog, rec) = open(&afs).unwrap();
        assert_eq!(rec.state, state_of(&t1), "cut {cut}");
        assert_eq!(rec.truncated_tail_bytes, cut as u64, "cut {cut}");
        let new = fs.read_file(&slog_path(&mdir(), slog.slog_number())).unwrap();
        assert_eq!(new.len(), SLOG_HEADER_SIZE + b1.len());
    }
    // Zeros after the last record (space allocated, write lost) are a tail too.
    let (_fs, afs) = fs_with_slog(&[b1.clone(), vec![0; 100]].concat());
    let (_, rec) = open(&afs).unwrap();
    assert_eq!((rec.state, rec.truncated_tail_bytes), (state_of(&t1), 100));
}

#[test]
fn damage_anywhere_in_a_complete_record_is_corruption() {
    let t1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")])];
    let t2 = vec![flush(1, 1, 20, vec![ext(2, 1, "a", "c")])];
    let b1 = txn_bytes(1, &t1);
    let b2 = txn_bytes(2, &t2);
    let body = [b1.clone(), b2.clone()].concat();
    for i in 0..body.len() {
        let mut bad = body.clone();
        bad[i] ^= 0x20;
        let (_fs, afs) = fs_with_slog(&bad);
        // Every flip is damage, the very last record included: a torn append leaves a prefix
        // (see `torn_tail_is_truncated_at_every_cut`), never a complete record with a bad CRC.
        let e = assert_corruption(open(&afs), &slog2());
        let off = corruption_offset(&e) as usize;
        assert!(off >= SLOG_HEADER_SIZE && off <= SLOG_HEADER_SIZE + i, "byte {i}: {e}");
    }
    // The slog header cannot be torn (fsynced before CURRENT names the file).
    let (fs, afs) = fs_with_slog(&body);
    let clean = fs.read_file(&slog2()).unwrap();
    for i in 0..SLOG_HEADER_SIZE {
        let mut bad = clean.clone();
        bad[i] ^= 0x01;
        fs.write_file(&slog2(), bad);
        assert_corruption(open(&afs), &slog2());
    }
    fs.write_file(&slog2(), clean[..10].to_vec());
    assert_corruption(open(&afs), &slog2());
}

#[test]
fn crc_valid_records_that_break_the_structure_are_corruption() {
    let e1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")])];
    let rec = |kind: u8, txn: u64, payload: &[u8]| {
        let mut v = Vec::new();
        encode_record(&mut v, kind, txn, payload).unwrap();
        v
    };
    let mut entries = Vec::new();
    put_entry(&mut entries, &e1[0]);
    let commit1 = rec(REC_COMMIT, 1, &1u64.to_le_bytes());
    // (what, bytes, whether the inspector sees the problem too: record-level, not txn-level)
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "BEGIN twice",
            [rec(REC_BEGIN, 1, &[]), rec(REC_BEGIN, 2, &[])].concat(),
            false,
        ),
        ("COMMIT without BEGIN", commit1.clone(), false),
        ("ENTRIES without BEGIN", rec(REC_ENTRIES, 1, &entries), false),
        (
            "ENTRIES of another txn",
            [rec(REC_BEGIN, 1, &[]), rec(REC_ENTRIES, 2, &entries)].concat(),
            false,
        ),
        (
            "COMMIT of another txn",
            [rec(REC_BEGIN, 1, &[]), rec(REC_COMMIT, 2, &0u64.to_le_bytes())].concat(),
            false,
        ),
        (
            "entry count mismatch",
            [
                rec(REC_BEGIN, 1, &[]),
                rec(REC_ENTRIES, 1, &entries),
                rec(REC_COMMIT, 1, &2u64.to_le_bytes()),
            ]
            .concat(),
            false,
        ),
        (
            "txn id not increasing",
            [txn_bytes(5, &e1), txn_bytes(5, &[SlogEntry::DropTable(1)])].concat(),
            false,
        ),
        (
            "entry does not apply",
            txn_bytes(1, &[edit(1, vec![(0, 0, 5)], vec![])]),
            false,
        ),
        ("unknown record type", rec(9, 1, &[]), true),
        ("BEGIN with payload", rec(REC_BEGIN, 1, &[1]), true),
        (
            "COMMIT short",
            [rec(REC_BEGIN, 1, &[]), rec(REC_COMMIT, 1, &[0; 4])].concat(),
            true,
        ),
        (
            "malformed entry",
            [rec(REC_BEGIN, 1, &[]), rec(REC_ENTRIES, 1, &[77])].concat(),
            true,
        ),
        ("checkpoint record type in a slog", rec(REC_END, 1, &[0; 24]), true),
    ];
    for (what, body, record_level) in cases {
        let (fs, afs) = fs_with_slog(&body);
        let e = open(&afs).unwrap_err();
        assert!(e.is_corruption(), "{what}: {e}");
        assert_eq!(dump_slog(&fs, &slog2()).is_err(), record_level, "{what}");
    }
    // A record header with non-zero reserved bytes (CRC recomputed) is corruption.
    let mut r = rec(REC_BEGIN, 1, &[]);
    r[13] = 1;
    let crc = crate::coding::mask_crc(crc32c::crc32c(&r[4..24]));
    r[0..4].copy_from_slice(&crc.to_le_bytes());
    let (_fs, afs) = fs_with_slog(&r);
    assert!(open(&afs).unwrap_err().is_corruption());
}

#[test]
fn dump_slog_shows_every_record_with_offsets() {
    let t1 = vec![flush(1, 0, 10, vec![ext(1, 1, "a", "c")]), SlogEntry::DropTable(4)];
    let b1 = txn_bytes(3, &t1);
    let tail = txn_bytes(4, &[SlogEntry::DropTable(1)]);
    let (fs, _afs) = fs_with_slog(&[b1.clone(), tail[..10].to_vec()].concat());
    let h = SLOG_HEADER_SIZE as u64;
    let views = dump_slog(&fs, &slog2()).unwrap();
    assert_eq!(
        views,
        vec![
            (
                0,
                SlogRecordView::Header {
                    number: 2,
                    version: super::current::META_FORMAT_VERSION
                }
            ),
            (h, SlogRecordView::Begin { txn: 3 }),
            (
                h + RECORD_HEADER_SIZE as u64,
                SlogRecordView::Entries {
                    txn: 3,
                    entries: t1.clone()
                }
            ),
            (
                h + b1.len() as u64 - (RECORD_HEADER_SIZE as u64 + 8),
                SlogRecordView::Commit { txn: 3, entries: 2 }
            ),
            (
                h + b1.len() as u64,
                SlogRecordView::TornTail {
                    len: 10,
                    reason: "incomplete record header".into()
                }
            ),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// CURRENT

#[test]
fn current_round_trips_and_every_flipped_byte_is_caught() {
    let c = Current { checkpoint: 5, slog: 6 };
    let p = Path::new("/db/meta/CURRENT");
    let enc = c.encode();
    assert_eq!(Current::decode(p, &enc).unwrap(), c);
    for i in 0..enc.len() {
        for bit in [0x01, 0x80] {
            let mut bad = enc;
            bad[i] ^= bit;
            assert_corruption(Current::decode(p, &bad), p);
        }
    }
    assert_corruption(Current::decode(p, &enc[..20]), p);
    assert_corruption(Current::decode(p, &[enc.to_vec(), vec![0]].concat()), p);
    // Structurally impossible pairs, even with a valid CRC.
    for (checkpoint, slog) in [(0, 0), (7, 6)] {
        assert_corruption(Current::decode(p, &Current { checkpoint, slog }.encode()), p);
    }
    // A newer version with a valid CRC is UnsupportedFormat.
    let mut newer = enc;
    newer[8..12].copy_from_slice(&(META_FORMAT_VERSION + 1).to_le_bytes());
    seal_crc_tail(&mut newer);
    assert!(matches!(
        Current::decode(p, &newer),
        Err(Error::UnsupportedFormat { found, supported: META_FORMAT_VERSION, .. }) if found == META_FORMAT_VERSION + 1
    ));
    // Version 1 (before object-tier extent ids) is still read.
    let mut older = enc;
    older[8..12].copy_from_slice(&1u32.to_le_bytes());
    seal_crc_tail(&mut older);
    assert!(Current::decode(p, &older).is_ok());
}

#[test]
fn damaged_current_fails_open() {
    let (fs, afs, slog, model, _) = setup_with_txns(3, 4);
    let mut slog = slog;
    slog.checkpoint(&model).unwrap();
    drop(slog);
    let path = mdir().join("CURRENT");
    let clean = fs.read_file(&path).unwrap();
    let files = names(&fs);
    for i in 0..clean.len() {
        let mut bad = clean.clone();
        bad[i] ^= 0x04;
        fs.write_file(&path, bad);
        assert_corruption(open(&afs), &path);
        // A refused open deletes nothing.
        assert_eq!(names(&fs), files);
    }
    fs.write_file(&path, clean);
    assert_eq!(open(&afs).unwrap().1.state, model);
}

#[test]
fn missing_current_with_metadata_files_is_corruption() {
    let (fs, afs, slog, _, _) = setup_with_txns(4, 2);
    drop(slog);
    fs.remove_file(&mdir().join("CURRENT")).unwrap();
    assert_corruption(open(&afs), &mdir().join("CURRENT"));
    // What an interrupted initialization leaves is fine: an empty SLOG-000001, CURRENT.tmp.
    let (fs, afs) = new_fs();
    fs.write_file(&slog_path(&mdir(), 1), vec![1, 2, 3]);
    fs.write_file(&mdir().join("CURRENT.tmp"), vec![9; 36]);
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!(rec.state, MetaState::default());
    assert_eq!(slog.numbers(), (0, 2));
    assert_eq!(names(&fs), ["CURRENT", "SLOG-000002"]);
}

#[test]
fn an_interrupted_initialization_is_redone() {
    // A fault at every step of creating a new database, then a crash: the next open works.
    for op in [
        FaultOp::Create,
        FaultOp::Append,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ] {
        for n in 0.. {
            let (fs, afs) = new_fs();
            fs.fail_after(op, None, n, libc::EIO);
            let r = open(&afs);
            let fired = fs.faults_fired() > 0;
            fs.clear_faults();
            assert_eq!(r.is_err(), fired, "{op:?} {n}");
            fs.crash(CrashMode::DropUnsynced);
            let (_, rec) = open(&afs).unwrap();
            assert_eq!(rec.state, MetaState::default());
            if !fired {
                break;
            }
        }
    }
}

#[test]
fn a_file_named_by_current_that_is_missing_is_corruption() {
    let (fs, afs, mut slog, model, _) = setup_with_txns(10, 2);
    slog.checkpoint(&model).unwrap();
    let (c, s) = slog.numbers();
    drop(slog);
    for p in [slog_path(&mdir(), s), checkpoint_path(&mdir(), c)] {
        let data = fs.read_file(&p).unwrap();
        fs.remove_file(&p).unwrap();
        assert_corruption(open(&afs), &p);
        fs.write_file(&p, data);
    }
    assert_eq!(rec_state(&afs), model);
}

#[test]
fn leftover_files_are_removed_and_unknown_ones_kept() {
    let (fs, afs, slog, model, _) = setup_with_txns(5, 2);
    drop(slog);
    for name in [
        "CHECKPOINT-000099",
        "SLOG-000001",
        "SLOG-000077",
        "CURRENT.tmp",
        "notes.txt",
        "SLOG-1",
    ] {
        fs.write_file(&mdir().join(name), b"junk".to_vec());
    }
    let (slog, rec) = open(&afs).unwrap();
    assert_eq!(rec.state, model);
    assert_eq!(
        names(&fs),
        [
            "CURRENT",
            &format!("SLOG-{:06}", slog.slog_number()),
            "SLOG-1",
            "notes.txt"
        ]
    );
}

#[test]
fn slog_or_checkpoint_with_the_wrong_number_is_corruption() {
    let (fs, afs, slog, model, _) = setup_with_txns(6, 2);
    let (_, s) = slog.numbers();
    drop(slog);
    // Copy the live slog (header says s) over the name CURRENT will point at next.
    let data = fs.read_file(&slog_path(&mdir(), s)).unwrap();
    let cur = mdir().join("CURRENT");
    fs.write_file(&slog_path(&mdir(), s + 5), data);
    fs.write_file(
        &cur,
        Current {
            checkpoint: 0,
            slog: s + 5,
        }
        .encode()
        .to_vec(),
    );
    assert_corruption(open(&afs), &slog_path(&mdir(), s + 5));
    // Same for a checkpoint.
    fs.write_file(&cur, Current { checkpoint: 0, slog: s }.encode().to_vec());
    let (mut slog, _) = open(&afs).unwrap();
    slog.checkpoint(&model).unwrap();
    let (c, s) = slog.numbers();
    drop(slog);
    let data = fs.read_file(&checkpoint_path(&mdir(), c)).unwrap();
    fs.write_file(&checkpoint_path(&mdir(), c + 1), data);
    fs.write_file(
        &cur,
        Current {
            checkpoint: c + 1,
            slog: s + 1,
        }
        .encode()
        .to_vec(),
    );
    fs.write_file(
        &slog_path(&mdir(), s + 1),
        fs.read_file(&slog_path(&mdir(), s)).unwrap(),
    );
    assert_corruption(open(&afs), &checkpoint_path(&mdir(), c + 1));
}

#[test]
fn newer_format_versions_are_unsupported() {
    let (fs, afs, slog, _, _) = setup_with_txns(7, 1);
    let s = slog.slog_number();
    drop(slog);
    let p = slog_path(&mdir(), s);
    let mut data = fs.read_file(&p).unwrap();
    data[8..12].copy_from_slice(&9u32.to_le_bytes());
    seal_crc_tail(&mut data[..SLOG_HEADER_SIZE]);
    fs.write_file(&p, data);
    assert!(matches!(open(&afs), Err(Error::UnsupportedFormat { found: 9, .. })));
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

#[test]
fn checkpoint_then_reopen_equals_the_state() {
    let (fs, afs, mut slog, mut model, mut g) = setup_with_txns(8, 6);
    assert!(slog.bytes_since_checkpoint() > 0);
    slog.checkpoint(&model).unwrap();
    assert_eq!(slog.bytes_since_checkpoint(), 0);
    let (c, s) = slog.numbers();
    assert_eq!((c, s), (3, 3));
    assert_eq!(names(&fs), ["CHECKPOINT-000003", "CURRENT", "SLOG-000003"]);
    let t = g.txn(&mut model);
    slog.commit(&t).unwrap();
    drop(slog);
    fs.crash(CrashMode::DropUnsynced);
    let (mut slog, rec) = open(&afs).unwrap();
    assert_eq!((rec.checkpoint, rec.slog, rec.replayed_txns), (3, 3, 1));
    assert_eq!(rec.state, model);
    assert_eq!(names(&fs), ["CHECKPOINT-000003", "CURRENT", "SLOG-000004"]);
    // Checkpoint again right after open, then with nothing in the slog.
    slog.checkpoint(&model).unwrap();
    slog.checkpoint(&model).unwrap();
    assert_eq!(slog.numbers(), (6, 6));
    assert_eq!(names(&fs), ["CHECKPOINT-000006", "CURRENT", "SLOG-000006"]);
    drop(slog);
    let (_, rec) = open(&afs).unwrap();
    assert_eq!((rec.state, rec.replayed_txns), (model, 0));
    assert_eq!(
        read_checkpoint(&fs, &checkpoint_path(&mdir(), 6)).unwrap(),
        rec_state(&afs)
    );
}

/// The state a fresh open recovers.
fn rec_state(afs: &Arc<dyn FileSystem>) -> MetaState {
    open(afs).unwrap().1.state
}

#[test]
fn an_empty_state_and_empty_tables_checkpoint() {
    let (fs, _afs) = new_fs();
    let p = db().join("CHECKPOINT-000001");
    write_checkpoint(&fs, &p, 1, &MetaState::default()).unwrap();
    assert_eq!(read_checkpoint(&fs, &p).unwrap(), MetaState::default());
    // A table with no extents still has a recovery point and a layer counter.
    let s = state_of(&[
        flush(4, 0, 77, vec![ext(1, 4, "a", "b")]),
        edit(4, vec![(0, 0, 1)], vec![]),
    ]);
    assert_eq!(s.tables[&4].extent_count(), 0);
    write_checkpoint(&fs, &p, 1, &s).unwrap();
    let back = read_checkpoint(&fs, &p).unwrap();
    assert_eq!((back.tables[&4].flushed_lsn, back.tables[&4].next_layer), (77, 1));
    assert_eq!(back, s);
}

#[test]
fn a_large_checkpoint_is_written_in_many_records() {
    let mut entries = Vec::new();
    for t in 0..3u32 {
        let mut added = Vec::new();
        for i in 0..12_000u64 {
            let id = (u64::from(t) << 32) | i;
            let lo = format!("key-{i:08}-{}", "x".repeat(40));
            added.push((2, 0, ext(id, t, &lo, &lo)));
        }
        entries.push(edit(t, vec![], added));
        entries.push(flush(t, 0, 5, vec![ext((9 << 32) | u64::from(t), t, "a", "b")]));
    }
    let s = state_of(&entries);
    let (fs, _afs) = new_fs();
    let p = db().join("CHECKPOINT-000002");
    write_checkpoint(&fs, &p, 2, &s).unwrap();
    let data = fs.read_file(&p).unwrap();
    assert!(data.len() > 3 * RECORD_TARGET, "{} bytes", data.len());
    let (n, back) = load_checkpoint(&fs, &p).unwrap();
    assert_eq!(n, 2);
    assert_eq!(back, s);
    // Truncation anywhere is corruption (sampled: 40 lengths spread over the file, and the last bytes).
    for cut in (0..data.len())
        .step_by(data.len() / 40)
        .chain(data.len() - 30..data.len())
    {
        fs.write_file(&p, data[..cut].to_vec());
        assert_corruption(read_checkpoint(&fs, &p), &p);
    }
}

#[test]
fn every_flipped_byte_of_a_checkpoint_is_caught() {
    let s = state_of(&[
        flush(1, 0, 10, vec![ext(1, 1, "a", "c"), ext(2, 1, "d", "f")]),
        edit(2, vec![], vec![(2, 0, ext(3, 2, "a", "z"))]),
    ]);
    let (fs, _afs) = new_fs();
    let p = db().join("CHECKPOINT-000001");
    write_checkpoint(&fs, &p, 1, &s).unwrap();
    let clean = fs.read_file(&p).unwrap();
    for i in 0..clean.len() {
        for bit in [0x01, 0x40] {
            let mut bad = clean.clone();
            bad[i] ^= bit;
            fs.write_file(&p, bad);
            let e = assert_corruption(read_checkpoint(&fs, &p), &p);
            assert!(corruption_offset(&e) <= i as u64, "byte {i}: {e}");
        }
    }
    // Trailing bytes and a missing trailer.
    fs.write_file(&p, [clean.clone(), vec![0]].concat());
    assert_corruption(read_checkpoint(&fs, &p), &p);
    fs.write_file(&p, clean[..clean.len() - RECORD_HEADER_SIZE - 24].to_vec());
    assert_corruption(read_checkpoint(&fs, &p), &p);
    fs.write_file(&p, clean[..CHECKPOINT_HEADER_SIZE].to_vec());
    assert_corruption(read_checkpoint(&fs, &p), &p);
}

#[test]
fn crc_valid_but_inconsistent_checkpoints_are_corruption() {
    let (fs, _afs) = new_fs();
    let p = db().join("CHECKPOINT-000001");
    let s = state_of(&[flush(1, 0, 10, vec![ext(1, 1, "a", "c")])]);
    write_checkpoint(&fs, &p, 1, &s).unwrap();
    let clean = fs.read_file(&p).unwrap();
    // Header counts that disagree with the content (CRC recomputed).
    let mut bad = clean.clone();
    bad[32..40].copy_from_slice(&5u64.to_le_bytes());
    seal_crc_tail(&mut bad[..CHECKPOINT_HEADER_SIZE]);
    fs.write_file(&p, bad);
    assert_corruption(read_checkpoint(&fs, &p), &p);
    // A record carrying a removal, a record out of sequence, an END of the wrong size.
    let header = &clean[..CHECKPOINT_HEADER_SIZE];
    let mut entries = Vec::new();
    put_entry(&mut entries, &edit(1, vec![(0, 0, 1)], vec![]));
    let rec = |kind: u8, seq: u64, payload: &[u8]| {
        let mut v = Vec::new();
        encode_record(&mut v, kind, seq, payload).unwrap();
        v
    };
    for body in [
        rec(REC_ENTRIES, 0, &entries),
        rec(REC_END, 3, &[0; 24]),
        rec(REC_END, 0, &[0; 16]),
        rec(REC_BEGIN, 0, &[]),
    ] {
        fs.write_file(&p, [header, &body].concat());
        assert_corruption(read_checkpoint(&fs, &p), &p);
    }
}

/// Runs: 4 transactions, a checkpoint with a fault at `(op, n)`, then (if it succeeded) one
/// more transaction; crash with `mode`; reopen. Returns whether the fault fired.
fn checkpoint_fault_run(op: FaultOp, n: u64, mode: CrashMode) -> bool {
    let (fs, afs, mut slog, mut model, mut g) = setup_with_txns(u64::from(op as u8) * 1000 + n, 4);
    let before = model.clone();
    fs.fail_after(op, None, n, libc::EIO);
    let r = slog.checkpoint(&model);
    let fired = fs.faults_fired() > 0;
    fs.clear_faults();
    assert_eq!(r.is_err(), fired, "{op:?} after {n}: {r:?}");
    if r.is_ok() {
        let t = g.txn(&mut model);
        slog.commit(&t).unwrap();
    } else {
        // Poisoned.
        assert!(slog.commit(&[SlogEntry::DropTable(0)]).is_err());
    }
    fs.crash(mode);
    let (mut slog2, rec) = open(&afs).unwrap_or_else(|e| panic!("{op:?} after {n}: {e}"));
    if fired {
        assert_eq!(rec.state, before, "{op:?} after {n}");
    } else {
        assert_eq!(rec.state, model, "{op:?} after {n}");
    }
    // Only the live pair is left, and the database keeps working.
    let (c, s) = slog2.numbers();
    let mut want = vec!["CURRENT".to_string(), format!("SLOG-{s:06}")];
    if c > 0 {
        want.insert(0, format!("CHECKPOINT-{c:06}"));
    }
    assert_eq!(names(&fs), want, "{op:?} after {n}");
    slog2.checkpoint(&rec.state).unwrap();
    drop(slog2);
    assert_eq!(rec_state(&afs), rec.state);
    fired
}

#[test]
fn a_crash_at_every_step_of_a_checkpoint_leaves_old_or_new() {
    let ops = [
        FaultOp::Create,
        FaultOp::Append,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
        FaultOp::Remove,
    ];
    for op in ops {
        let mut steps = 0;
        for n in 0.. {
            let modes = [
                CrashMode::DropUnsynced,
                CrashMode::KeepRandomPrefix { seed: n },
                CrashMode::KeepRandomPrefix { seed: n + 100 },
            ];
            let fired: Vec<bool> = modes.iter().map(|&m| checkpoint_fault_run(op, n, m)).collect();
            if !fired[0] {
                break;
            }
            steps += 1;
        }
        assert!(steps > 0, "{op:?} never happens in a checkpoint");
    }
}

#[test]
fn a_crash_at_every_step_of_open_keeps_the_state() {
    for op in [
        FaultOp::Create,
        FaultOp::Append,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
        FaultOp::Remove,
    ] {
        for n in 0.. {
            let (fs, afs, slog, model, _) = setup_with_txns(9, 3);
            drop(slog);
            // Leave some leftovers so that open has something to remove.
            fs.write_file(&mdir().join("CHECKPOINT-000050"), vec![1]);
            fs.fail_after(op, None, n, libc::EIO);
            let r = open(&afs);
            let fired = fs.faults_fired() > 0;
            fs.clear_faults();
            assert_eq!(r.is_err(), fired, "{op:?} {n}");
            for seed in [n, n + 7] {
                fs.crash(CrashMode::KeepRandomPrefix { seed });
                assert_eq!(rec_state(&afs), model, "{op:?} {n}");
            }
            if !fired {
                break;
            }
        }
    }
}

#[test]
fn random_workload_with_checkpoints_faults_and_crashes() {
    for seed in 0..12u64 {
        let (fs, afs) = new_fs();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut g = Gen::new(seed);
        let (mut slog, _) = open(&afs).unwrap();
        let mut model = MetaState::default();
        for _ in 0..40 {
            match rng.random_range(0..10) {
                0..=5 => {
                    let mut next = model.clone();
                    let t = g.txn(&mut next);
                    if rng.random_bool(0.1) {
                        let op = if rng.random_bool(0.5) {
                            FaultOp::Append
                        } else {
                            FaultOp::Sync
                        };
                        fs.fail_after(op, None, 0, libc::EIO);
                    }
                    match slog.commit(&t) {
                        Ok(()) => model = next,
                        Err(_) => {
                            // In doubt: a crash settles it (either outcome is allowed).
                            fs.clear_faults();
                            fs.crash(CrashMode::KeepRandomPrefix { seed: rng.random() });
                            let (s, rec) = open(&afs).unwrap();
                            assert!(rec.state == model || rec.state == next, "seed {seed}");
                            model = rec.state;
                            slog = s;
                        }
                    }
                }
                6 | 7 => {
                    if rng.random_bool(0.2) {
                        let ops = [FaultOp::Create, FaultOp::Sync, FaultOp::Rename, FaultOp::SyncDir];
                        fs.fail_after(
                            ops[rng.random_range(0..ops.len())],
                            None,
                            rng.random_range(0..3),
                            libc::EIO,
                        );
                    }
                    if slog.checkpoint(&model).is_err() {
                        fs.clear_faults();
                        fs.crash(CrashMode::DropUnsynced);
                        let (s, rec) = open(&afs).unwrap();
                        assert_eq!(rec.state, model, "seed {seed}");
                        slog = s;
                    }
                    fs.clear_faults();
                }
                _ => {
                    drop(slog);
                    fs.crash(CrashMode::KeepRandomPrefix { seed: rng.random() });
                    let (s, rec) = open(&afs).unwrap();
                    assert_eq!(rec.state, model, "seed {seed}");
                    slog = s;
                }
            }
        }
    }
}

#[test]
fn works_on_the_real_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let afs: Arc<dyn FileSystem> = Arc::new(PosixFs);
    let (mut slog, rec) = Slog::open(afs.clone(), dir.path()).unwrap();
    assert_eq!(rec.state, MetaState::default());
    let mut g = Gen::new(11);
    let mut model = MetaState::default();
    for i in 0..10 {
        let t = g.txn(&mut model);
        slog.commit(&t).unwrap();
        if i == 5 {
            slog.checkpoint(&model).unwrap();
        }
    }
    drop(slog);
    let (slog, rec) = Slog::open(afs.clone(), dir.path()).unwrap();
    assert_eq!(rec.state, model);
    assert_eq!(rec.replayed_txns, 4);
    let (c, s) = slog.numbers();
    let mut listed = afs.list_dir(&meta_dir(dir.path())).unwrap();
    listed.sort();
    assert_eq!(
        listed,
        [format!("CHECKPOINT-{c:06}"), "CURRENT".into(), format!("SLOG-{s:06}")]
    );
    // A torn tail on a real file.
    let p = slog_path(&meta_dir(dir.path()), s);
    let mut data = std::fs::read(&p).unwrap();
    data.extend_from_slice(&txn_bytes(99, &[SlogEntry::DropTable(1)])[..30]);
    std::fs::write(&p, data).unwrap();
    drop(slog);
    let (_, rec) = Slog::open(afs, dir.path()).unwrap();
    assert_eq!((rec.state, rec.truncated_tail_bytes), (model, 30));
}
