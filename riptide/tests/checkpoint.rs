//! `Db::checkpoint`: the copy opens, holds exactly the writes acknowledged before the call (or,
//! with writers running, a prefix of them at least that long), survives a crash at every step
//! of its making as complete or absent, and refuses targets it must not write into.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::{CrashMode, FaultFs, FaultOp};
use riptide::tier::{DirObjectStore, ObjectStore};
use riptide::{Db, Error, Options, ReadOptions, WriteOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod common;

use common::{scan, small_on as small, Model};

/// Random puts and deletes on tables `a` and `b`, with flushes and compactions now and then,
/// so the data lies in every level and in the memtables.
fn load(db: &Db, models: &mut [Model; 2], seed: u64, ops: usize) {
    let tables = [db.table("a").unwrap(), db.table("b").unwrap()];
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..ops {
        let which = rng.random_range(0..2);
        let k = format!("key{:05}", rng.random_range(0..3000)).into_bytes();
        if rng.random_bool(0.2) {
            tables[which].delete(&k).unwrap();
            models[which].remove(&k);
        } else {
            let v = vec![rng.random::<u8>(); rng.random_range(1..200)];
            tables[which].put(&k, &v).unwrap();
            models[which].insert(k, v);
        }
        if i % 5000 == 4999 {
            tables[which].flush().unwrap();
        }
    }
}

fn check(db: &Db, models: &[Model; 2], what: &str) {
    for (name, model) in ["a", "b"].iter().zip(models) {
        let got = scan(&db.table(name).unwrap());
        assert!(
            &got == model,
            "{what}: table {name} has {} rows, expected {}",
            got.len(),
            model.len()
        );
    }
}

/// The checkpoint holds every write made before it and none made after, in every table, and
/// opens as a database of its own.
#[test]
fn checkpoint_holds_the_writes_before_it_and_none_after() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let copy = dir.path().join("copy");
    let db = Db::open(&live, small(Arc::new(riptide::fs::PosixFs))).unwrap();
    db.create_table("a").unwrap();
    db.create_table("b").unwrap();
    let mut models = [Model::new(), Model::new()];
    load(&db, &mut models, 1, 30_000);
    db.wait_for_background_work().unwrap();
    // Some writes only in the memtables and the redo log.
    load(&db, &mut models, 2, 500);
    let info = db.checkpoint(&copy).unwrap();
    assert_eq!(info.tables, 3, "{info:?}");
    assert!(info.extents > 0 && info.redo_segments > 0, "{info:?}");
    let at_checkpoint = models.clone();
    load(&db, &mut models, 3, 10_000);
    db.wait_for_background_work().unwrap();

    let c = Db::open(&copy, Options::default()).unwrap();
    check(&c, &at_checkpoint, "checkpoint");
    // It is a database of its own: writes to it do not reach the live one.
    c.table("a").unwrap().put(b"only-in-copy", b"1").unwrap();
    c.close().unwrap();
    assert_eq!(db.table("a").unwrap().get(b"only-in-copy").unwrap(), None);
    check(&db, &models, "live");
    // A second checkpoint into the same directory is refused; into another it works.
    assert!(matches!(db.checkpoint(&copy), Err(Error::AlreadyExists(_))));
    db.checkpoint(dir.path().join("copy2")).unwrap();
    db.close().unwrap();
    let c = Db::open(dir.path().join("copy2"), Options::default()).unwrap();
    check(&c, &models, "second checkpoint");
    c.close().unwrap();
}

/// With a writer and background compactions running, a checkpoint holds a prefix of the
/// writer's sequence that includes every write acknowledged before the call.
#[test]
fn checkpoint_under_writes_is_a_prefix_with_every_acknowledged_write() {
    checkpoint_under_writes(false);
}

/// The same with durable commits: the newest redo segment is then zero-filled ahead of its
/// records and filled while the checkpoint copies it, so the copy must stop where the log was
/// synced (copying zeros that a later write fills behind the copy's position would leave a
/// hole of zeros between records: a checkpoint that does not open).
#[test]
fn checkpoint_under_durable_commits_is_a_prefix_with_every_acknowledged_write() {
    checkpoint_under_writes(true);
}

fn checkpoint_under_writes(sync: bool) {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let db = Db::open(&live, small(Arc::new(riptide::fs::PosixFs))).unwrap();
    let t = db.default_table();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (t, acked, stop) = (t.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let v = vec![(i % 251) as u8; 100];
                let opts = WriteOptions {
                    sync,
                    ..Default::default()
                };
                t.put_opt(&format!("k{i:08}").into_bytes(), &v, &opts).unwrap();
                i += 1;
                acked.store(i, Ordering::Release);
            }
        })
    };
    for round in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let before = acked.load(Ordering::Acquire);
        let path = dir.path().join(format!("copy{round}"));
        db.checkpoint(&path).unwrap();
        let c = Db::open(&path, Options::default()).unwrap();
        let rows = scan(&c.default_table());
        let n = rows.len() as u64;
        assert!(
            n >= before,
            "round {round}: {n} rows, {before} acknowledged before the call"
        );
        for (j, (k, v)) in rows.iter().enumerate() {
            assert_eq!(
                k,
                &format!("k{j:08}").into_bytes(),
                "round {round}: not a prefix at {j}"
            );
            assert_eq!(v, &vec![(j % 251) as u8; 100]);
        }
        c.close().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    db.close().unwrap();
}

/// A fault at each step of a checkpoint, then a power cut: the live database loses nothing,
/// and the checkpoint is complete (opens, holds the writes) or absent (does not open; the next
/// checkpoint into the directory succeeds).
#[test]
fn a_crash_at_every_step_leaves_the_checkpoint_complete_or_absent() {
    let ops = [
        FaultOp::Create,
        FaultOp::WriteAt,
        FaultOp::Append,
        FaultOp::SetLen,
        FaultOp::Sync,
        FaultOp::SyncDir,
        FaultOp::Rename,
    ];
    let (mut fired, mut complete, mut absent) = (0, 0, 0);
    for op in ops {
        for after in 0.. {
            let what = format!("{op:?} after {after}");
            let fs = FaultFs::new();
            let opts = || small(Arc::new(fs.clone()));
            let db = Db::open("/db", opts()).unwrap();
            db.create_table("a").unwrap();
            db.create_table("b").unwrap();
            let mut models = [Model::new(), Model::new()];
            load(&db, &mut models, after, 8000);
            // Everything so far durable (a sync write syncs the log before it).
            let sync = WriteOptions {
                sync: true,
                ..Default::default()
            };
            db.table("a").unwrap().put_opt(b"zz-synced", b"1", &sync).unwrap();
            models[0].insert(b"zz-synced".to_vec(), b"1".to_vec());
            fs.fail_after(op, Some("/ckpt"), after, libc::EIO);
            let result = db.checkpoint("/ckpt");
            let faulted = fs.faults_fired() > 0;
            db.abandon_for_test();
            fs.crash(CrashMode::KeepRandomPrefix { seed: after });
            fs.clear_faults();
            let live = Db::open("/db", opts()).unwrap_or_else(|e| panic!("{what}: live open: {e}"));
            check(&live, &models, &format!("{what}: live"));
            let no_create = || Options {
                create_if_missing: false,
                ..opts()
            };
            match Db::open("/ckpt", no_create()) {
                Ok(c) => {
                    check(&c, &models, &format!("{what}: checkpoint"));
                    c.close().unwrap();
                    complete += 1;
                }
                Err(Error::NotFound(_)) => {
                    assert!(faulted || result.is_err(), "{what}: a finished checkpoint is gone");
                    absent += 1;
                    // What the cut-short checkpoint left is cleared by the next one.
                    live.checkpoint("/ckpt")
                        .unwrap_or_else(|e| panic!("{what}: retry: {e}"));
                    let c = Db::open("/ckpt", no_create()).unwrap();
                    check(&c, &models, &format!("{what}: retried checkpoint"));
                    c.close().unwrap();
                }
                Err(e) => panic!("{what}: checkpoint open: {e}"),
            }
            live.close().unwrap();
            if !faulted {
                assert!(result.is_ok(), "{what}: {result:?}");
                break;
            }
            fired += 1;
            assert!(result.is_err(), "{what}: the fault fired but the checkpoint succeeded");
        }
    }
    assert!(
        fired >= 15 && complete >= ops.len() && absent >= 10,
        "fired {fired}, complete {complete}, absent {absent}"
    );
}

/// A directory with a database or with other files is refused and left as it was; leftovers of
/// a checkpoint cut short are cleared.
#[test]
fn checkpoint_refuses_databases_and_foreign_directories() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), Options::default()).unwrap();
    db.default_table().put(b"k", b"v").unwrap();
    assert!(matches!(
        db.checkpoint(dir.path().join("live")),
        Err(Error::AlreadyExists(_))
    ));
    let other = dir.path().join("home");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("thesis.tex"), b"x").unwrap();
    assert!(matches!(db.checkpoint(&other), Err(Error::NotADatabase(_))));
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
    assert!(matches!(db.checkpoint(""), Err(Error::InvalidOption { .. })));
    // Leftovers: a data file and a redo segment, no CATALOG.
    let cut = dir.path().join("cut");
    std::fs::create_dir_all(cut.join("data")).unwrap();
    std::fs::create_dir_all(cut.join("redo")).unwrap();
    std::fs::write(cut.join("data/000009.dat"), b"stale").unwrap();
    std::fs::write(cut.join("redo/000042.log"), b"stale").unwrap();
    db.checkpoint(&cut).unwrap();
    assert!(!cut.join("data/000009.dat").exists() && !cut.join("redo/000042.log").exists());
    let c = Db::open(&cut, Options::default()).unwrap();
    assert_eq!(c.default_table().get(b"k").unwrap(), Some(b"v".to_vec()));
    c.close().unwrap();
    db.close().unwrap();
}

/// Extents in the object tier are named, not copied, and pinned: after the live database
/// rewrote all of them (grace period 0), the checkpoint still reads every row through a
/// read-only open; a read-write open with the live database's store is refused; once the pin
/// is released the objects only the checkpoint named are deleted.
#[test]
fn object_tier_extents_are_pinned_until_the_checkpoint_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(DirObjectStore::new(
        Arc::new(riptide::fs::PosixFs),
        dir.path().join("bucket"),
    ));
    let opts = || Options {
        object_store: Some(store.clone()),
        l2_tier: riptide::tier::Tier::Object,
        object_delete_grace: std::time::Duration::ZERO,
        ..small(Arc::new(riptide::fs::PosixFs))
    };
    let db = Db::open(dir.path().join("live"), opts()).unwrap();
    db.create_table("a").unwrap();
    db.create_table("b").unwrap();
    let mut models = [Model::new(), Model::new()];
    load(&db, &mut models, 7, 20_000);
    for name in ["a", "b"] {
        db.table(name).unwrap().compact().unwrap();
    }
    load(&db, &mut models, 8, 300);
    assert!(db.stats().object_extents > 0);
    let copy = dir.path().join("copy");
    let info = db.checkpoint(&copy).unwrap();
    assert!(info.object_extents > 0, "{info:?}");
    let at_checkpoint = models.clone();
    let objects = |db: &Db| db.stats().object_tier.unwrap();
    assert_eq!(objects(&db).pinned_objects, info.object_extents);
    // Rewrite every object: the old ones leave the live metadata.
    load(&db, &mut models, 9, 20_000);
    for name in ["a", "b"] {
        db.table(name).unwrap().compact().unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while objects(&db).pending_deletes > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ro = Db::open_read_only(&copy, opts()).unwrap();
    check(&ro, &at_checkpoint, "checkpoint over pinned objects");
    ro.close().unwrap();
    match Db::open(&copy, opts()) {
        Err(Error::InvalidOption { option, .. }) => assert_eq!(option, "object_store"),
        other => panic!("read-write open of the checkpoint with the live store: {other:?}"),
    }
    let levels = riptide::inspect::levels(&riptide::fs::PosixFs, &dir.path().join("live"), None).unwrap();
    assert!(levels.contains("checkpoint pins: 1 checkpoint(s) keep"), "{levels}");
    // `inspect verify` tells the pinned objects from orphans.
    let report =
        riptide::inspect::verify_with_objects(&riptide::fs::PosixFs, &dir.path().join("live"), Some(store.as_ref()))
            .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report.notes.iter().any(|n| n.contains("pinned by a checkpoint")),
        "{:?}",
        report.notes
    );
    let before = store.list("ext/").unwrap().len();
    assert!(db.release_checkpoint(&copy).unwrap());
    assert!(!db.release_checkpoint(&copy).unwrap());
    assert_eq!(objects(&db).pinned_objects, 0);
    // The release queues the objects only the checkpoint named; each leaves the queue once
    // the collector deleted it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while objects(&db).pending_deletes > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(objects(&db).pending_deletes, 0, "released objects still queued");
    let after = store.list("ext/").unwrap().len();
    assert!(after < before, "released objects were not deleted: {before} -> {after}");
    check(&db, &models, "live after the release");
    // The released checkpoint no longer reads: a table whose extents the live database rewrote
    // meets a deleted object (a typed error); a table whose extents compaction reused may still
    // read, and then reads exactly what the checkpoint held.
    let ro = Db::open_read_only(&copy, opts()).unwrap();
    let mut failed = 0;
    for (name, model) in ["a", "b"].iter().zip(&at_checkpoint) {
        let read: riptide::Result<Vec<_>> = ro.table(name).unwrap().iter(&ReadOptions::default()).unwrap().collect();
        match read {
            Err(Error::ObjectStore { .. }) => failed += 1,
            Ok(rows) => assert!(
                &rows.into_iter().collect::<Model>() == model,
                "table {name} of the released checkpoint read wrong rows"
            ),
            Err(e) => panic!("table {name} of the released checkpoint: {e}"),
        }
    }
    assert!(failed > 0, "no table of the released checkpoint met a deleted object");
    ro.close().unwrap();
    db.close().unwrap();
}

/// A table created while a checkpoint copies has records in the copied redo log but no place
/// in the copied catalog: a table the copy creates later gets another id, so those rows never
/// reach it, not even when the copy replays its redo log after a crash.
#[test]
fn a_table_created_during_a_checkpoint_lends_no_rows_to_the_copy() {
    let fs = FaultFs::new();
    let db = Db::open("/db", small(Arc::new(fs.clone()))).unwrap();
    db.default_table().put(b"k", b"v").unwrap();
    db.flush().unwrap();
    // The checkpoint stops at its first fsync of a copied data file.
    let hold = fs.hold(FaultOp::Sync, Some("/ckpt"));
    let copier = {
        let db = db.clone();
        std::thread::spawn(move || db.checkpoint("/ckpt"))
    };
    assert!(fs.wait_held(hold, std::time::Duration::from_secs(20)));
    let late = db.create_table("late").unwrap();
    let sync = WriteOptions {
        sync: true,
        ..Default::default()
    };
    for i in 0..100u32 {
        late.put_opt(format!("late{i:03}").as_bytes(), b"x", &sync).unwrap();
    }
    fs.release_hold(hold);
    copier.join().unwrap().unwrap();
    drop(late);
    db.close().unwrap();

    let c = Db::open("/ckpt", small(Arc::new(fs.clone()))).unwrap();
    assert!(c.table("late").is_err());
    let fresh = c.create_table("fresh").unwrap();
    assert!(scan(&fresh).is_empty());
    drop(fresh);
    c.abandon_for_test();
    let c = Db::open("/ckpt", small(Arc::new(fs.clone()))).unwrap();
    let rows = scan(&c.table("fresh").unwrap());
    assert!(rows.is_empty(), "the new table holds {} rows of another", rows.len());
    assert_eq!(c.default_table().get(b"k").unwrap(), Some(b"v".to_vec()));
    c.close().unwrap();
}

/// Values that no codec shrinks, so extents fill with their bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Redo segments and extents over the copy's 1 MiB chunk are copied whole: a checkpoint of
/// 12 MiB in the redo log, then of the same rows flushed into extents, reads back every row.
/// On the disk's file system (extents copied in the kernel) and on `FaultFs` (which copies
/// nothing in the kernel, so extents go through the chunked copy too).
#[test]
fn files_larger_than_one_copy_chunk_are_copied_intact() {
    let dir = tempfile::tempdir().unwrap();
    let fault_fs = Options {
        fs: std::sync::Arc::new(FaultFs::new()),
        ..Options::default()
    };
    for (root, opts) in [
        (dir.path().to_path_buf(), Options::default()),
        ("/mem".into(), fault_fs),
    ] {
        let root: std::path::PathBuf = root;
        let db = Db::open(root.join("live"), opts.clone()).unwrap();
        let t = db.create_table("big").unwrap();
        let mut expected = Vec::new();
        for i in 0..24u64 {
            let mut batch = riptide::WriteBatch::new();
            for j in 0..64u64 {
                let key = format!("k{i:03}-{j:03}").into_bytes();
                let value = noise(i * 64 + j, 8 << 10);
                batch.put(&t, &key, &value).unwrap();
                expected.push((key, value));
            }
            db.write(batch, &Default::default()).unwrap();
        }
        let check = |copy: &std::path::Path| {
            let view = Db::open_read_only(copy, opts.clone()).unwrap();
            let rows: Vec<_> = view
                .table("big")
                .unwrap()
                .iter(&Default::default())
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            assert!(rows == expected, "{}: rows differ", copy.display());
        };
        let info = db.checkpoint(root.join("from-redo")).unwrap();
        assert!(info.bytes_copied > 8 << 20, "{info:?}");
        check(&root.join("from-redo"));
        db.flush().unwrap();
        let info = db.checkpoint(root.join("from-extents")).unwrap();
        assert!(info.extents >= 5, "{info:?}");
        check(&root.join("from-extents"));
        db.close().unwrap();
    }
}
