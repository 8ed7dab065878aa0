//! Backups (`Db::backup`, `BackupEngine`): a restore gives exactly the writes acknowledged
//! before its backup; later backups upload only new extents; `verify` and `restore` find every
//! damaged byte; a backup cut short by store failures is absent; object-tier extents are backed
//! up and restored into another store.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::backup::{BackupEngine, RestoreOptions};
use riptide::fs::PosixFs;
use riptide::tier::{DirObjectStore, FaultyObjectStore, ObjectErrorKind, ObjectOp, ObjectStore, Tier};
use riptide::{Db, Error, Options, Table};
use std::path::Path;
use std::sync::Arc;

mod common;

use common::{scan, small, Model};

fn load(t: &Table, model: &mut Model, seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..ops {
        let k = format!("key{:05}", rng.random_range(0..4000)).into_bytes();
        if rng.random_bool(0.15) {
            t.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = vec![rng.random::<u8>(); rng.random_range(1..150)];
            t.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
}

fn dir_store(path: &Path) -> Arc<DirObjectStore> {
    Arc::new(DirObjectStore::new(Arc::new(PosixFs), path))
}

fn restored(engine: &BackupEngine, id: u64, dir: &Path, opts: Options) -> Model {
    engine.restore(id, dir, &RestoreOptions::default()).unwrap();
    let db = Db::open(dir, opts).unwrap();
    let m = scan(&db.default_table());
    db.close().unwrap();
    m
}

#[test]
fn backups_restore_exactly_and_upload_only_new_extents() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), small()).unwrap();
    let t = db.default_table();
    let engine = BackupEngine::new(dir_store(&dir.path().join("backups")));
    let mut model = Model::new();
    load(&t, &mut model, 1, 40_000);
    db.wait_for_background_work().unwrap();
    load(&t, &mut model, 2, 300); // some only in the memtable and the redo log
    let first = db.backup(&engine).unwrap();
    assert_eq!(first.id, 1);
    assert!(
        first.extents > 0 && first.extents_uploaded == first.extents,
        "{first:?}"
    );
    let at_first = model.clone();
    // Many more rows, compacted, then a few writes in one corner: most extents stay as
    // they were.
    let mut rng = StdRng::seed_from_u64(9);
    for i in 0..60_000u32 {
        let v: Vec<u8> = (0..120).map(|_| rng.random()).collect();
        let k = format!("row{i:06}").into_bytes();
        t.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    t.compact().unwrap();
    let third = db.backup(&engine).unwrap();
    for i in 0..50u32 {
        let (k, v) = (format!("row{i:06}").into_bytes(), b"changed".to_vec());
        t.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    // Down to L2 through the merges that leave the L2 extents they do not overlap alone.
    t.flush().unwrap();
    t.compact_l0().unwrap();
    t.compact_l1().unwrap();
    let second = db.backup(&engine).unwrap();
    assert_eq!((third.id, second.id), (2, 3));
    assert!(second.extents >= 4, "{second:?}");
    assert!(
        second.extents_uploaded <= second.extents / 2,
        "not incremental: {second:?}"
    );
    assert_eq!(
        engine.list().unwrap().iter().map(|b| b.id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for id in [1, 2, 3] {
        let report = engine.verify(id).unwrap();
        assert!(report.extents > 0 && report.files > 0, "{report:?}");
    }
    assert!(restored(&engine, 1, &dir.path().join("r1"), small()) == at_first);
    assert!(restored(&engine, 3, &dir.path().join("r3"), small()) == model);
    // A directory with a database is refused.
    assert!(matches!(
        engine.restore(1, &dir.path().join("r1"), &RestoreOptions::default()),
        Err(Error::AlreadyExists(_))
    ));
    drop(t);
    db.close().unwrap();
}

/// A flipped byte in an extent, a file or a manifest of the backup is found by `verify` and
/// stops `restore` before it writes a CATALOG.
#[test]
fn damage_in_a_backup_is_found_by_verify_and_restore() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), small()).unwrap();
    let mut model = Model::new();
    load(&db.default_table(), &mut model, 4, 20_000);
    db.wait_for_background_work().unwrap();
    let root = dir.path().join("backups");
    let engine = BackupEngine::new(dir_store(&root));
    let id = db.backup(&engine).unwrap().id;
    db.close().unwrap();
    let flip = |p: &Path, at: usize| {
        let mut b = std::fs::read(p).unwrap();
        let at = at.min(b.len() - 1);
        b[at] ^= 0x20;
        std::fs::write(p, b).unwrap();
    };
    let first = |sub: &str| {
        let mut names: Vec<_> = std::fs::read_dir(root.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        names.remove(0)
    };
    let extent = first("extents");
    let catalog = root.join(format!("backups/{id:06}/files/CATALOG"));
    let manifest = root.join(format!("backups/{id:06}/MANIFEST"));
    for (i, (victim, at)) in [(extent, 100usize), (catalog, 10), (manifest, 20)]
        .into_iter()
        .enumerate()
    {
        let good = std::fs::read(&victim).unwrap();
        flip(&victim, at);
        // Extents are read by parallel requests by default, and one at a time here.
        for (n, engine) in [engine.clone(), engine.clone().with_parallel_requests(1)]
            .iter()
            .enumerate()
        {
            match engine.verify(id) {
                Err(Error::Corruption { .. }) => {}
                other => panic!("{victim:?}: verify gave {other:?}"),
            }
            let target = dir.path().join(format!("r{i}-{n}"));
            assert!(matches!(
                engine.restore(id, &target, &RestoreOptions::default()),
                Err(Error::Corruption { .. })
            ));
            assert!(!target.join("CATALOG").exists());
        }
        std::fs::write(&victim, good).unwrap();
    }
    engine.verify(id).unwrap();
    assert!(restored(&engine, id, &dir.path().join("ok"), small()) == model);
}

/// Store failures during a backup leave no backup (no manifest); the next one succeeds.
#[test]
fn a_backup_cut_short_by_store_failures_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), small()).unwrap();
    let mut model = Model::new();
    load(&db.default_table(), &mut model, 5, 20_000);
    let faulty = Arc::new(FaultyObjectStore::new(dir_store(&dir.path().join("backups"))));
    let engine = BackupEngine::new(faulty.clone());
    // Every upload refused: nothing is a backup.
    faulty.fail_always(ObjectOp::Put, ObjectErrorKind::Permanent, "injected");
    assert!(matches!(db.backup(&engine), Err(Error::ObjectStore { .. })));
    assert!(engine.list().unwrap().is_empty());
    faulty.clear();
    // The store fails at every later write in turn (an extent, a file, the manifest):
    // never a backup.
    db.wait_for_background_work().unwrap();
    let total = {
        let counter = Arc::new(FailAfter::new(dir_store(&dir.path().join("count")), u64::MAX));
        db.backup(&BackupEngine::new(counter.clone())).unwrap();
        counter.writes()
    };
    assert!(total > 5, "{total} writes");
    for n in [1, 2, total / 2, total - 1] {
        let store = Arc::new(FailAfter::new(dir_store(&dir.path().join(format!("cut{n}"))), n));
        let engine = BackupEngine::new(store.clone());
        assert!(
            matches!(db.backup(&engine), Err(Error::ObjectStore { .. })),
            "failing at write {n}"
        );
        assert!(engine.list().unwrap().is_empty(), "failing at write {n}");
        // What the cut-short backup uploaded is reused: the next one completes.
        store.heal();
        let b = db.backup(&engine).unwrap();
        engine.verify(b.id).unwrap();
    }
    // Transient failures are retried.
    faulty.fail_next(ObjectOp::Put, 2, ObjectErrorKind::Transient, "503 SlowDown");
    let info = db.backup(&engine).unwrap();
    engine.verify(info.id).unwrap();
    assert!(restored(&engine, info.id, &dir.path().join("r"), small()) == model);
    db.close().unwrap();
}

/// Object-tier extents are read from the tier, backed up like local ones and restored into
/// the store the restore names; without one the restore is refused.
#[test]
fn object_tier_extents_are_backed_up_and_restored_into_another_store() {
    let dir = tempfile::tempdir().unwrap();
    let live_store = dir_store(&dir.path().join("live-bucket"));
    let tiered = |store: Arc<DirObjectStore>| Options {
        object_store: Some(store),
        l2_tier: Tier::Object,
        ..small()
    };
    let db = Db::open(dir.path().join("db"), tiered(live_store.clone())).unwrap();
    let t = db.default_table();
    let mut model = Model::new();
    load(&t, &mut model, 6, 30_000);
    t.compact().unwrap();
    load(&t, &mut model, 7, 200);
    assert!(db.stats().object_extents > 0);
    let engine = BackupEngine::new(dir_store(&dir.path().join("backups")));
    let info = db.backup(&engine).unwrap();
    drop(t);
    db.close().unwrap();
    engine.verify(info.id).unwrap();
    assert!(matches!(
        engine.restore(info.id, &dir.path().join("r"), &RestoreOptions::default()),
        Err(Error::InvalidOption { .. })
    ));
    let new_store = dir_store(&dir.path().join("new-bucket"));
    let opts = RestoreOptions {
        object_store: Some(new_store.clone()),
        ..Default::default()
    };
    engine.restore(info.id, &dir.path().join("r"), &opts).unwrap();
    assert!(!new_store.list("ext/").unwrap().is_empty());
    let r = Db::open(dir.path().join("r"), tiered(new_store)).unwrap();
    assert!(scan(&r.default_table()) == model);
    r.close().unwrap();
}

/// A store whose writes fail (permanently) from the `n`-th on, until healed; counts writes.
#[derive(Debug)]
struct FailAfter {
    inner: Arc<DirObjectStore>,
    fail_from: std::sync::atomic::AtomicU64,
    writes: std::sync::atomic::AtomicU64,
}

impl FailAfter {
    fn new(inner: Arc<DirObjectStore>, n: u64) -> Self {
        FailAfter {
            inner,
            fail_from: n.into(),
            writes: 0.into(),
        }
    }

    fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn heal(&self) {
        self.fail_from.store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
    }

    fn write(&self) -> riptide::tier::ObjectResult<()> {
        let n = self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n >= self.fail_from.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(riptide::tier::ObjectError::new(ObjectErrorKind::Permanent, "injected"));
        }
        Ok(())
    }
}

impl ObjectStore for FailAfter {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn put(&self, name: &str, data: &[u8]) -> riptide::tier::ObjectResult<()> {
        self.write()?;
        self.inner.put(name, data)
    }
    fn put_if_absent(&self, name: &str, data: &[u8]) -> riptide::tier::ObjectResult<bool> {
        self.write()?;
        self.inner.put_if_absent(name, data)
    }
    fn get_range(&self, name: &str, range: std::ops::Range<u64>) -> riptide::tier::ObjectResult<Vec<u8>> {
        self.inner.get_range(name, range)
    }
    fn get(&self, name: &str) -> riptide::tier::ObjectResult<Vec<u8>> {
        self.inner.get(name)
    }
    fn delete(&self, name: &str) -> riptide::tier::ObjectResult<()> {
        self.inner.delete(name)
    }
    fn list(&self, prefix: &str) -> riptide::tier::ObjectResult<Vec<riptide::tier::ObjectInfo>> {
        self.inner.list(prefix)
    }
}
