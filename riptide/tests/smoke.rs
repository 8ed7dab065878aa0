//! Quick end-to-end checks: reopen after close, after drop, and after a simulated power cut.

use riptide::fs::{CrashMode, FaultFs};
use riptide::{Db, Options, WriteOptions};
use std::sync::Arc;

#[test]
fn data_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let t = db.create_table("t").unwrap();
        for i in 0..1000u32 {
            t.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
        }
        t.delete(&5u32.to_be_bytes()).unwrap();
        db.close().unwrap();
    }
    for round in 0..3 {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let t = db.table("t").unwrap();
        assert_eq!(t.get(&5u32.to_be_bytes()).unwrap(), None, "round {round}");
        assert_eq!(t.get(&7u32.to_be_bytes()).unwrap(), Some(7u32.to_le_bytes().to_vec()));
        assert_eq!(
            t.iter(&Default::default()).unwrap().count(),
            999 + usize::from(round > 0)
        );
        t.put(b"round", &[round]).unwrap();
        drop(t);
        drop(db);
    }
    let segs = std::fs::read_dir(dir.path().join("redo")).unwrap().count();
    assert_eq!(segs, 0, "a clean close flushes everything and deletes the redo log");
    let data = std::fs::read_dir(dir.path().join("data")).unwrap().count();
    assert!(data >= 1, "the data lives in extents");
}

#[test]
fn synced_writes_survive_power_cut() {
    let fs = FaultFs::new();
    let opts = Options {
        fs: Arc::new(fs.clone()),
        ..Default::default()
    };
    let path = std::path::Path::new("/db");
    let db = Db::open(path, opts.clone()).unwrap();
    let t = db.default_table();
    let sync = WriteOptions {
        sync: true,
        ..Default::default()
    };
    for i in 0..100u32 {
        t.put_opt(&i.to_be_bytes(), b"durable", &sync).unwrap();
    }
    for i in 100..200u32 {
        t.put(&i.to_be_bytes(), b"maybe").unwrap();
    }
    db.abandon_for_test();
    fs.crash(CrashMode::DropUnsynced);
    let db = Db::open(path, opts).unwrap();
    let t = db.default_table();
    for i in 0..100u32 {
        assert_eq!(t.get(&i.to_be_bytes()).unwrap(), Some(b"durable".to_vec()));
    }
    assert_eq!(t.get(&150u32.to_be_bytes()).unwrap(), None);
}
