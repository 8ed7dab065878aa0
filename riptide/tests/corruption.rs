//! Damage at rest: one flipped byte in each region of an extent (a data block, the index, the
//! bloom filter, the properties block, the footer), in a data-file header and in the slog.
//!
//! Every read that touches the damage must return `Error::Corruption` naming the file and an
//! offset inside the damaged region; no read may ever return a wrong value; reads that do not
//! touch it keep working; and `riptide inspect verify` must report it. The byte is restored
//! after each case and the database must read back intact.

use riptide::fs::FaultFs;
use riptide::{inspect, Db, Error, Options, ReadOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DB: &str = "/db";

fn opts(fs: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        block_size: 2 << 10,
        // Every read goes to the file: damage cannot hide behind a cached block.
        block_cache_size: 0,
        flush_on_close: true,
        ..Default::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "v".repeat((i % 40) as usize)).into_bytes()
}

/// A closed database whose data lives in L2 and L0 extents; returns the model.
fn build(fs: &FaultFs) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(DB, opts(fs)).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    for i in 0..3000 {
        t.put(&key(i), &value(i)).unwrap();
        model.insert(key(i), value(i));
    }
    t.compact().unwrap();
    for i in (0..3000).step_by(7) {
        t.put(&key(i), b"newer").unwrap();
        model.insert(key(i), b"newer".to_vec());
    }
    drop(t);
    db.close().unwrap();
    model
}

/// Reads every key with `get` and a full scan; returns how many reads failed. Panics on a
/// wrong value or an error other than corruption in `path` within `range`.
fn read_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, path: &Path, range: (u64, u64), what: &str) -> usize {
    let check_err = |e: &Error| match e {
        Error::Corruption { path: p, offset, .. } => {
            assert_eq!(p, path, "{what}: corruption names the wrong file: {e}");
            assert!(
                *offset >= range.0 && *offset < range.1,
                "{what}: offset {offset} outside the damaged region {range:?}: {e}"
            );
        }
        other => panic!("{what}: expected corruption, got {other:?}"),
    };
    let t = db.default_table();
    let mut failed = 0;
    for (k, v) in model {
        match t.get(k) {
            Ok(Some(got)) => assert_eq!(&got, v, "{what}: wrong value for {k:?}"),
            Ok(None) => panic!("{what}: key {k:?} missing"),
            Err(e) => {
                check_err(&e);
                failed += 1;
            }
        }
    }
    let mut scanned = 0;
    for item in t.iter(&ReadOptions::default()).unwrap() {
        match item {
            Ok((k, v)) => {
                assert_eq!(model.get(&k), Some(&v), "{what}: scan returned a wrong row");
                scanned += 1;
            }
            Err(e) => {
                check_err(&e);
                failed += 1;
                break;
            }
        }
    }
    if failed == 0 {
        assert_eq!(scanned, model.len(), "{what}: scan lost rows without an error");
    }
    failed
}

fn flip(fs: &FaultFs, path: &Path, at: u64) -> Vec<u8> {
    let original = fs.read_file(path).expect("file exists");
    let mut bad = original.clone();
    bad[at as usize] ^= 0x5a;
    fs.write_file(path, bad);
    original
}

#[test]
fn a_flipped_byte_in_any_extent_region_is_a_typed_error_and_inspect_finds_it() {
    let fs = FaultFs::new();
    let model = build(&fs);
    let db_path = Path::new(DB);
    let ids = inspect::extent_ids(&fs, db_path).unwrap();
    assert!(ids.len() >= 2, "want extents in several levels: {ids:?}");
    let mut cases = 0;
    for id in ids.iter().take(2) {
        let regions = inspect::extent_regions(&fs, db_path, id).unwrap();
        let names: Vec<&str> = regions.iter().map(|r| r.0.as_str()).collect();
        for want in ["data block 0", "index", "filter", "properties", "footer"] {
            assert!(names.contains(&want), "{id}: no {want} region in {names:?}");
        }
        for (name, path, off, len) in regions {
            if name.starts_with("data block") && name != "data block 0" {
                continue;
            }
            let what = format!("extent {id} {name}");
            let original = flip(&fs, &path, off + len / 2);
            let db = Db::open(DB, opts(&fs)).unwrap();
            let failed = read_all(&db, &model, &path, (off, off + len), &what);
            assert!(failed > 0, "{what}: no read noticed the damage");
            drop(db);
            let report = inspect::verify(&fs, db_path).unwrap();
            assert!(
                report.problems.iter().any(|p| p.contains(&*path.to_string_lossy())),
                "{what}: inspect verify missed it: {report:?}"
            );
            fs.write_file(&path, original);
            cases += 1;
        }
    }
    assert!(cases >= 10);
    // Restored: everything reads back and verifies clean.
    let db = Db::open(DB, opts(&fs)).unwrap();
    assert_eq!(read_all(&db, &model, Path::new("/none"), (0, 0), "restored"), 0);
    drop(db);
    assert!(inspect::verify(&fs, db_path).unwrap().ok());
}

#[test]
fn data_file_header_damage() {
    let fs = FaultFs::new();
    let model = build(&fs);
    let db_path = Path::new(DB);
    let file = PathBuf::from("/db/data/000001.dat");
    // One damaged copy: the other one serves, and verify reports the damaged one.
    let original = flip(&fs, &file, 100);
    let report = inspect::verify(&fs, db_path).unwrap();
    assert!(!report.ok(), "verify missed a damaged header copy");
    let db = Db::open(DB, opts(&fs)).unwrap();
    assert_eq!(read_all(&db, &model, &file, (0, 0), "one header copy"), 0);
    db.close().unwrap();
    // Both copies damaged: open refuses with a corruption error naming the file.
    let mut both = original.clone();
    both[100] ^= 0x5a;
    both[(16 << 10) + 100] ^= 0x5a;
    fs.write_file(&file, both);
    match Db::open(DB, opts(&fs)) {
        Err(Error::Corruption { path, .. }) => assert_eq!(path, file),
        other => panic!("expected corruption, got {other:?}"),
    }
    fs.write_file(&file, original);
    let db = Db::open(DB, opts(&fs)).unwrap();
    assert_eq!(read_all(&db, &model, &file, (0, 0), "restored"), 0);
}

#[test]
fn slog_damage_fails_the_open_and_inspect_finds_it() {
    let fs = FaultFs::new();
    let model = build(&fs);
    let db_path = Path::new(DB);
    use riptide::fs::FileSystem;
    let slog = fs
        .list_dir(&db_path.join("meta"))
        .unwrap()
        .into_iter()
        .find(|n| n.starts_with("SLOG-"))
        .map(|n| db_path.join("meta").join(n))
        .expect("a slog");
    let len = fs.read_file(&slog).unwrap().len() as u64;
    assert!(len > 100, "slog too short to damage: {len}");
    for at in [40, len / 2, len - 3] {
        let original = flip(&fs, &slog, at);
        match Db::open(DB, opts(&fs)) {
            Err(Error::Corruption { path, .. }) => assert_eq!(path, slog, "byte {at}"),
            Ok(_) => panic!("byte {at}: open accepted a damaged slog"),
            Err(e) => panic!("byte {at}: expected corruption, got {e}"),
        }
        let report = inspect::verify(&fs, db_path).unwrap();
        assert!(!report.ok(), "byte {at}: verify missed slog damage");
        fs.write_file(&slog, original);
    }
    let db = Db::open(DB, opts(&fs)).unwrap();
    assert_eq!(read_all(&db, &model, &slog, (0, 0), "restored"), 0);
}
