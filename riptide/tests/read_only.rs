//! `Db::open_read_only`: reads what `Db::open` would recover (including writes only in the
//! redo log), refuses every write with `Error::ReadOnly`, and changes no byte of the directory
//! or of the object store.

use riptide::fs::PosixFs;
use riptide::tier::{DirObjectStore, ObjectStore, Tier};
use riptide::{Db, Error, Options, Table, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Every file under `dir` (but `LOCK`) with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap() != "LOCK" {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

mod common;

use common::{scan, small};

fn fill(t: &Table, n: u32, round: u8) {
    for i in 0..n {
        t.put(format!("k{i:06}").as_bytes(), &[round; 64]).unwrap();
    }
}

fn assert_read_only<T: std::fmt::Debug>(r: riptide::Result<T>, what: &str) {
    assert!(matches!(r, Err(Error::ReadOnly(_))), "{what}: {r:?}");
}

/// A database left by a crash (writes only in its redo log) opens read-only with every write,
/// refuses writes of every kind, and its files stay byte for byte as they were; a read-write
/// open afterwards recovers the same.
#[test]
fn read_only_open_recovers_in_memory_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, small()).unwrap();
    let t = db.default_table();
    fill(&t, 20_000, 1);
    db.wait_for_background_work().unwrap();
    fill(&t, 3_000, 2);
    let sync = WriteOptions {
        sync: true,
        ..Default::default()
    };
    t.put_opt(b"last", b"synced", &sync).unwrap();
    let expected = scan(&t);
    drop(t);
    db.abandon_for_test();
    let before = files(&path);

    let ro = Db::open_read_only(&path, small()).unwrap();
    let t = ro.default_table();
    assert_eq!(scan(&t), expected);
    assert_eq!(t.get(b"k000005").unwrap(), Some(vec![2; 64]));
    assert_eq!(t.get(b"k019999").unwrap(), Some(vec![1; 64]));
    assert_read_only(t.put(b"x", b"y"), "put");
    assert_read_only(t.delete(b"k000001"), "delete");
    assert_read_only(t.flush(), "flush");
    assert_read_only(t.compact(), "compact");
    assert_read_only(t.compact_l0(), "compact_l0");
    assert_read_only(ro.create_table("other"), "create_table");
    assert_read_only(ro.checkpoint(dir.path().join("copy")), "checkpoint");
    assert!(!dir.path().join("copy").exists());
    let mut txn = ro.begin(riptide::TxnOptions::default()).unwrap();
    txn.put(&t, b"t", b"1").unwrap();
    assert_read_only(txn.commit(), "transaction commit");
    ro.wait_for_background_work().unwrap();
    // A read-write instance cannot open it meanwhile.
    assert!(matches!(Db::open(&path, small()), Err(Error::Locked(_))));
    drop(t);
    ro.close().unwrap();
    assert!(files(&path) == before, "the read-only instance changed the directory");

    let db = Db::open(&path, small()).unwrap();
    assert_eq!(scan(&db.default_table()), expected);
    db.close().unwrap();
    // No database: NotFound, and nothing is created.
    assert!(matches!(
        Db::open_read_only(dir.path().join("none"), small()),
        Err(Error::NotFound(_))
    ));
    assert!(!dir.path().join("none").join("CATALOG").exists());
}

/// A checkpoint opens read-only; a database with L2 in the object tier opens read-only and
/// reads its objects without claiming the store or deleting anything from it.
#[test]
fn read_only_open_of_a_checkpoint_and_of_an_object_tier() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), small()).unwrap();
    fill(&db.default_table(), 10_000, 3);
    db.checkpoint(dir.path().join("copy")).unwrap();
    fill(&db.default_table(), 10_000, 4);
    let ro = Db::open_read_only(dir.path().join("copy"), small()).unwrap();
    assert_eq!(ro.default_table().get(b"k000001").unwrap(), Some(vec![3; 64]));
    ro.close().unwrap();
    db.close().unwrap();

    let bucket = dir.path().join("bucket");
    let store = Arc::new(DirObjectStore::new(Arc::new(PosixFs), &bucket));
    let opts = || Options {
        object_store: Some(store.clone()),
        l2_tier: Tier::Object,
        ..small()
    };
    let path = dir.path().join("tiered");
    let db = Db::open(&path, opts()).unwrap();
    let t = db.default_table();
    fill(&t, 20_000, 5);
    t.compact().unwrap();
    assert!(db.stats().object_extents > 0);
    let expected = scan(&t);
    drop(t);
    db.close().unwrap();
    let objects_before = store.list("").unwrap();
    // A cold cache: the reads go to the store.
    std::fs::remove_dir_all(path.join("extent-cache")).unwrap();
    let files_before = files(&path);
    // A store without OWNER would be claimed by a read-write open; read-only leaves it so.
    store.delete("OWNER").unwrap();
    let ro = Db::open_read_only(&path, opts()).unwrap();
    assert_eq!(scan(&ro.default_table()), expected);
    assert!(ro
        .stats()
        .object_tier
        .is_some_and(|s| s.range_reads + s.whole_reads > 0 && s.objects_written == 0 && s.objects_deleted == 0));
    ro.close().unwrap();
    let mut objects_after = store.list("").unwrap();
    objects_after.retain(|o| o.name != "OWNER");
    let mut objects_before = objects_before;
    objects_before.retain(|o| o.name != "OWNER");
    assert_eq!(objects_after, objects_before);
    assert!(!store.list("").unwrap().iter().any(|o| o.name == "OWNER"));
    assert!(
        files(&path) == files_before,
        "the read-only instance changed the directory"
    );
}
