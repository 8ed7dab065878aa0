//! Views: `Db::open_read_only` of a database another instance has open for writes. A view
//! holds exactly the writes made before its open, whether flushed or only in the redo log;
//! the writer's later writes, flushes and compactions never show through it; a read of an
//! extent the writer freed (and may have rewritten) fails with `Error::ViewOutdated` and
//! never returns the slot's new bytes; object-tier extents stay readable; the view writes
//! nothing to the directory or the store.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::PosixFs;
use riptide::tier::{DirObjectStore, ObjectStore, Tier};
use riptide::{Db, Error, Options, ReadOptions, Table};
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

/// Reads every key of the view by `get` and by a scan; each answer must be `model`'s or
/// `ViewOutdated`. Returns how many reads were outdated.
fn read_all(view: &Db, model: &Model) -> usize {
    let t = view.default_table();
    let mut outdated = 0;
    for i in 0..KEYS {
        let k = key(i);
        match t.get(&k) {
            Ok(v) => assert_eq!(v.as_ref(), model.get(&k), "get {i}"),
            Err(Error::ViewOutdated { .. }) => outdated += 1,
            Err(e) => panic!("get {i}: {e}"),
        }
    }
    let mut seen = Model::new();
    for row in t.iter(&ReadOptions::default()).unwrap() {
        match row {
            Ok((k, v)) => {
                assert_eq!(model.get(&k), Some(&v), "scan {}", String::from_utf8_lossy(&k));
                seen.insert(k, v);
            }
            Err(Error::ViewOutdated { .. }) => {
                outdated += 1;
                break;
            }
            Err(e) => panic!("scan: {e}"),
        }
    }
    outdated
}

/// The writer's data in every level and in its memtable; a view opened then holds exactly
/// those writes, and keeps holding them while the writer overwrites every key, flushes and
/// compacts: each read gives the view's value or `ViewOutdated` (at least one does once the
/// writer rewrote every extent), never the writer's new one. A new view sees the new writes.
#[test]
fn a_view_holds_the_writes_before_its_open_and_never_reads_a_reused_slot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 1, 30_000, 1);
    t.compact().unwrap();
    load(&t, &mut model, 2, 2_000, 2); // some only in the memtable and the redo log
                                       // The writer's flushes and compactions done: until it writes again, no extent is freed.
    db.wait_for_background_work().unwrap();
    let view = Db::open_read_only(&path, view_opts(small())).unwrap();
    assert_eq!(scan(&view.default_table()), model, "the view at its open");
    assert_eq!(read_all(&view, &model), 0);
    assert!(matches!(view.default_table().put(b"x", b"y"), Err(Error::ReadOnly(_))));

    // The writer rewrites every key and compacts: the view's extents are freed, their slots
    // reused.
    let at_view = model.clone();
    for round in 3..6u8 {
        for i in 0..KEYS {
            let v = vec![round; 40];
            t.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        t.compact().unwrap();
    }
    db.wait_for_background_work().unwrap();
    let outdated = read_all(&view, &at_view);
    assert!(outdated > 0, "no read met a freed extent");
    view.close().unwrap();

    let view = Db::open_read_only(&path, view_opts(small())).unwrap();
    assert_eq!(scan(&view.default_table()), model, "a new view");
    view.close().unwrap();
    drop(t);
    db.close().unwrap();
}

/// Views opened over and over while writers write, flush and compact: each opens (retrying
/// the races with the writer's metadata and redo changes) and reads a prefix of the writes:
/// every key written before the view's open has its value then or a later one.
#[test]
fn views_open_while_the_writer_flushes_and_compacts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (db, stop, written) = (db.clone(), stop.clone(), written.clone());
        std::thread::spawn(move || {
            let t = db.default_table();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Key i holds the count of writes when it was written: it only grows.
                let i = (n * 7919) % u64::from(KEYS);
                t.put(&key(i as u32), &n.to_be_bytes()).unwrap();
                n += 1;
                written.store(n, std::sync::atomic::Ordering::Release);
                if n.is_multiple_of(4000) {
                    t.compact_l0().unwrap();
                }
            }
        })
    };
    for _ in 0..15 {
        let before = written.load(std::sync::atomic::Ordering::Acquire);
        let view = Db::open_read_only(&path, view_opts(small())).unwrap_or_else(|e| panic!("open a view: {e:?}"));
        let t = view.default_table();
        // Every write acknowledged before the open is in the view.
        for n in before.saturating_sub(50)..before {
            let i = (n * 7919) % u64::from(KEYS);
            match t.get(&key(i as u32)) {
                Ok(Some(v)) => {
                    let got = u64::from_be_bytes(v.try_into().unwrap());
                    assert!(got >= n, "key {i}: write {n} missing from the view (has {got})");
                }
                Ok(None) => panic!("key {i}: write {n} missing from the view"),
                Err(Error::ViewOutdated { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        drop(t);
        view.close().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    db.close().unwrap();
}

/// With L2 in the object tier, a view reads the writer's objects, which stay (for the
/// writer's grace period) after the writer rewrote them, and claims, writes and deletes
/// nothing in the store.
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
    // The writer rewrites every object (they stay for its 5-minute grace period).
    for i in 0..KEYS {
        t.put(&key(i), &[9; 30]).unwrap();
    }
    t.compact().unwrap();
    assert!(
        store.list("ext/").unwrap().len() > objects.len(),
        "the writer wrote new objects and deleted none yet"
    );
    // Everything of the view lies in its memtable or L2 after the full compaction: it reads
    // every row, from the old objects.
    assert_eq!(
        scan(&view.default_table()),
        model,
        "the view after the writer's rewrite"
    );
    let s = view.stats().object_tier.unwrap();
    assert_eq!((s.objects_written, s.objects_deleted), (0, 0));
    view.close().unwrap();
    drop(t);
    db.close().unwrap();
}
