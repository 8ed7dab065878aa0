//! Views: `Db::open_read_only` of a database another instance has open for writes. A view
//! holds a prefix of the writer's commits (every write made before its open, none after, each
//! transaction whole), keeps serving every read while the writer overwrites, flushes and
//! compacts (the writer holds the slots it frees while a view's lease is live, across a
//! restart of the writer too), reads the writer's object tier, and leaves nothing behind but
//! its lease while open.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::PosixFs;
use riptide::tier::{DirObjectStore, ObjectStore, Tier};
use riptide::{Db, Error, Options, ReadOptions, Table, TxnOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

mod common;

use common::{scan, small, Model};

const KEYS: u32 = 3000;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Random puts and deletes over [`KEYS`] keys; `round` marks every value written.
fn load(t: &Table, model: &mut Model, seed: u64, ops: usize, round: u8) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..ops {
        let k = key(rng.random_range(0..KEYS));
        if rng.random_bool(0.15) {
            t.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = vec![round; rng.random_range(8..120)];
            t.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
}

/// A view's reads: no caches, so every read of an extent goes to its file.
fn view_opts(base: Options) -> Options {
    Options {
        block_cache_size: 0,
        row_cache_size: 0,
        ..base
    }
}

/// Every key of the view by `get` and all rows by a scan must be `model`'s.
fn check(view: &Db, model: &Model, what: &str) {
    let t = view.default_table();
    for i in 0..KEYS {
        let k = key(i);
        assert_eq!(t.get(&k).unwrap().as_ref(), model.get(&k), "{what}: get {i}");
    }
    assert_eq!(scan(&t), *model, "{what}: scan");
}

/// Lease files in the database's `readers` directory.
fn leases(db: &Path) -> usize {
    std::fs::read_dir(db.join("readers"))
        .map(|d| {
            d.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".lease"))
                .count()
        })
        .unwrap_or(0)
}

/// Overwrites every key with `round` and compacts fully: every extent of before is freed.
fn rewrite_all(t: &Table, model: &mut Model, round: u8) {
    for i in 0..KEYS {
        let v = vec![round; 40];
        t.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    t.compact().unwrap();
}

/// The writer's data in every level and in its memtable; a view opened then holds exactly
/// those writes, and reads all of them while the writer rewrites every key and compacts three
/// times, and after the writer closes and reopens and rewrites again. A new view sees the new
/// writes; the lease goes when the view closes.
#[test]
fn a_view_holds_its_writes_while_the_writer_rewrites_compacts_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 1, 30_000, 1);
    t.compact().unwrap();
    load(&t, &mut model, 2, 2_000, 2); // some only in the memtable and the redo log
    let view = Db::open_read_only(&path, view_opts(small())).unwrap();
    assert_eq!(leases(&path), 1);
    check(&view, &model, "the view at its open");
    assert!(matches!(view.default_table().put(b"x", b"y"), Err(Error::ReadOnly(_))));

    let at_view = model.clone();
    for round in 3..6u8 {
        rewrite_all(&t, &mut model, round);
    }
    db.wait_for_background_work().unwrap();
    check(&view, &at_view, "the view after the writer rewrote everything");
    // The writer restarts: what its previous instance freed stays held.
    drop(t);
    db.close().unwrap();
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    for round in 6..8u8 {
        rewrite_all(&t, &mut model, round);
    }
    db.wait_for_background_work().unwrap();
    check(
        &view,
        &at_view,
        "the view after the writer restarted and rewrote everything",
    );
    view.close().unwrap();
    assert_eq!(leases(&path), 0, "the lease outlived its view");

    let view = Db::open_read_only(&path, view_opts(small())).unwrap();
    check(&view, &model, "a new view");
    view.close().unwrap();
    drop(t);
    db.close().unwrap();
}

/// Space: the writer holds the slots it frees while views are open, each batch until the
/// views open when it was freed are gone, so views that overlap in time do not keep older
/// batches; a lease whose view died (an unlocked lease file) is deleted and holds nothing.
#[test]
fn the_writer_holds_freed_slots_only_for_the_views_open_when_it_freed_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 3, 20_000, 1);
    t.compact().unwrap();
    let held = |db: &Db| db.stats().space_held_slots;
    rewrite_all(&t, &mut model, 2);
    assert_eq!(held(&db), 0, "held without a view");
    let v1 = Db::open_read_only(&path, view_opts(small())).unwrap();
    rewrite_all(&t, &mut model, 3);
    let for_v1 = held(&db);
    assert!(for_v1 > 0, "nothing held for an open view");
    // Views refreshed in turn, each open before the one before it closes: each batch goes
    // back once the views open when it was freed are gone, so the held slots stay about two
    // rounds' worth instead of growing with every round.
    let mut view = v1;
    let mut most = 0;
    let mut at_open = Model::new();
    for round in 4..12u8 {
        let next = Db::open_read_only(&path, view_opts(small())).unwrap();
        at_open = model.clone();
        view.close().unwrap();
        view = next;
        rewrite_all(&t, &mut model, round);
        most = most.max(held(&db));
    }
    assert!(
        most < 4 * for_v1,
        "held slots grew with the rounds: {most} after 8, {for_v1} after 1"
    );
    check(&view, &at_open, "the last view");
    view.close().unwrap();
    // A lease of a view that died: a lease file nobody locks.
    std::fs::write(path.join("readers").join("0123456789abcdef0123456789abcdef.lease"), b"").unwrap();
    rewrite_all(&t, &mut model, 6);
    assert_eq!(held(&db), 0, "slots held with every view gone");
    assert_eq!(leases(&path), 0, "the dead view's lease is still there");
    assert_eq!(scan(&t), model);
    drop(t);
    db.close().unwrap();
}

/// An iterator of a view keeps the view's lease past the view's close: the writer holds the
/// extents it reads until the iterator is dropped too.
#[test]
fn an_iterator_keeps_the_lease_after_its_view_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 5, 20_000, 1);
    t.compact().unwrap();
    let view = Db::open_read_only(&path, view_opts(small())).unwrap();
    let at_view = model.clone();
    let iter = view.default_table().iter(&ReadOptions::default()).unwrap();
    view.close().unwrap();
    assert_eq!(leases(&path), 1, "the lease went with the view, before its iterator");
    for round in 2..5u8 {
        rewrite_all(&t, &mut model, round);
    }
    drop(t);
    db.close().unwrap();
    // With the writer closed, only the lease keeps the database from being destroyed.
    assert!(matches!(Db::destroy(&path), Err(Error::Locked(_))));
    let rows: Model = iter.collect::<riptide::Result<Vec<_>>>().unwrap().into_iter().collect();
    assert_eq!(rows, at_view, "the iterator read the writer's rewritten slots");
    assert_eq!(leases(&path), 0, "the lease outlived the iterator");
    Db::destroy(&path).unwrap();
    assert!(!path.exists());
}

/// Views opened over and over while a writer commits transactions that each write the same
/// counter to a key of table `a` and of table `b`, and flushes and compacts: each view opens
/// (retrying its races with the writer), holds every commit made before its open, and sees
/// each transaction whole (the key has the same value in both tables).
#[test]
fn views_hold_a_prefix_of_whole_transactions_while_the_writer_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    db.create_table("a").unwrap();
    db.create_table("b").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, committed) = (db.clone(), stop.clone(), committed.clone());
        std::thread::spawn(move || {
            let (a, b) = (db.table("a").unwrap(), db.table("b").unwrap());
            let mut n = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let k = key((n * 7919 % u64::from(KEYS)) as u32);
                let mut txn = db.begin(TxnOptions::default()).unwrap();
                txn.put(&a, &k, &n.to_be_bytes()).unwrap();
                txn.put(&b, &k, &n.to_be_bytes()).unwrap();
                txn.commit().unwrap();
                committed.store(n, Ordering::Release);
                if n.is_multiple_of(3000) {
                    a.compact_l0().unwrap();
                }
                n += 1;
            }
        })
    };
    for _ in 0..12 {
        let before = committed.load(Ordering::Acquire);
        let view = Db::open_read_only(&path, view_opts(small())).unwrap_or_else(|e| panic!("open a view: {e:?}"));
        let (a, b) = (view.table("a").unwrap(), view.table("b").unwrap());
        let rows_a: Model = scan(&a);
        let rows_b: Model = scan(&b);
        assert_eq!(rows_a, rows_b, "a transaction seen in part");
        for n in before.saturating_sub(100).max(1)..=before {
            let k = key((n * 7919 % u64::from(KEYS)) as u32);
            let got = rows_a
                .get(&k)
                .map(|v| u64::from_be_bytes(v.as_slice().try_into().unwrap()));
            assert!(
                got.is_some_and(|g| g >= n),
                "commit {n} missing from the view ({got:?})"
            );
        }
        drop((a, b));
        view.close().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    db.close().unwrap();
    assert_eq!(leases(&path), 0);
}

/// With L2 in the object tier, a view reads the writer's objects, which stay (for the
/// writer's grace period) after the writer rewrote them, and writes and deletes nothing in
/// the store.
#[test]
fn a_view_reads_the_writers_object_tier() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(DirObjectStore::new(Arc::new(PosixFs), dir.path().join("bucket")));
    let opts = || Options {
        object_store: Some(store.clone()),
        l2_tier: Tier::Object,
        ..small()
    };
    let path = dir.path().join("db");
    let db = Db::open(&path, opts()).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 7, 30_000, 1);
    t.compact().unwrap();
    assert!(db.stats().object_extents > 0);
    let view = Db::open_read_only(&path, view_opts(opts())).unwrap();
    assert_eq!(scan(&view.default_table()), model);
    let objects = store.list("ext/").unwrap();
    let at_view = model.clone();
    rewrite_all(&t, &mut model, 9);
    assert!(
        store.list("ext/").unwrap().len() > objects.len(),
        "the writer wrote new objects"
    );
    let before = view.default_table().iter(&ReadOptions::default()).unwrap().count();
    assert_eq!(before, at_view.len());
    check(&view, &at_view, "the view after the writer's rewrite");
    let s = view.stats().object_tier.unwrap();
    assert_eq!((s.objects_written, s.objects_deleted), (0, 0));
    view.close().unwrap();
    drop(t);
    db.close().unwrap();
}
