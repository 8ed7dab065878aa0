//! Fault injection on a whole [`Db`] through [`FaultFs`]: EIO and ENOSPC on redo-log appends,
//! fsyncs and segment rolls poison the instance (the failing write returns `Error::Poisoned`
//! wrapping the `Error::Io` with its errno, later writes are refused, reads keep returning every
//! acknowledged write, `close` works) and a reopen, also after a power cut, recovers every
//! acknowledged (respectively synced) write; faults on CATALOG writes during DDL, in the redo
//! rewrite at close, and while opening; power loss with unsynced writes leaves a prefix without
//! holes, also when it follows a process crash and a reopen; torn tails over many seeds never fail
//! the open; a fault at any redo I/O step followed by a torn crash still recovers; a flipped byte
//! in a closed database's redo log is `Error::Corruption` (and `RecoveryMode::PointInTime` opens a
//! prefix); bad input and bad options give typed errors and write nothing.

use riptide::fs::{CrashMode, FaultFs, FaultOp, FileSystem};
use riptide::{
    Db, Error, Options, ReadOptions, RecoveryMode, Table, WriteBatch, WriteOptions, MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DB: &str = "/db";

fn db_path() -> &'static Path {
    Path::new(DB)
}

fn opts(fs: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        ..Default::default()
    }
}

/// Options with 64 KiB redo segments, so a few hundred KiB of writes roll several times.
fn small_segments(fs: &FaultFs) -> Options {
    Options {
        redo_segment_size: 64 << 10,
        ..opts(fs)
    }
}

fn synced(sync: bool) -> WriteOptions {
    WriteOptions {
        sync,
        ..Default::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// The value of key `i`: its index, padded to `pad` bytes.
fn val(i: u64, pad: usize) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(v.len().max(pad), b'#');
    v
}

fn index_of_val(v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).unwrap();
    s.split(':').next().unwrap().parse().unwrap()
}

fn index_of_key(k: &[u8]) -> u64 {
    std::str::from_utf8(&k[3..]).unwrap().parse().unwrap()
}

/// Every pair of a table at the latest state.
fn dump(t: &Table) -> BTreeMap<Vec<u8>, Vec<u8>> {
    t.iter(&ReadOptions::default()).unwrap().map(|r| r.unwrap()).collect()
}

/// One batch writing key `i` with value `val(i, pad)` into every table of `tables`.
fn batch(tables: &[&Table], i: u64, pad: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    for t in tables {
        b.put(t, &key(i), &val(i, pad)).unwrap();
    }
    b
}

/// Asserts `e` is `Poisoned(Io)` on a redo file with OS error `errno`.
#[track_caller]
fn assert_poisoned_io(e: &Error, errno: i32) {
    match e {
        Error::Poisoned(inner) => match inner.as_ref() {
            Error::Io { path, .. } => {
                assert!(
                    path.to_string_lossy().contains("redo"),
                    "I/O error not on the redo log: {e}"
                )
            }
            other => panic!("expected Poisoned(Io), got Poisoned({other:?})"),
        },
        other => panic!("expected Poisoned(Io), got {other:?}"),
    }
    assert_eq!(e.raw_os_error(), Some(errno), "{e}");
}

/// Asserts a write was refused because the instance is poisoned.
#[track_caller]
fn assert_refused(r: riptide::Result<()>, errno: i32) {
    match r {
        Err(e @ Error::Poisoned(_)) => assert_eq!(e.raw_os_error(), Some(errno), "{e}"),
        other => panic!("a write after a failed write must be refused, got {other:?}"),
    }
}

/// Asserts that, in every table, exactly the keys of `0..m` for one `m` are present, each with
/// its own index as value; returns `m`.
#[track_caller]
fn assert_prefix(tables: &[&Table], what: &str) -> u64 {
    let mut m = None;
    for t in tables {
        let d = dump(t);
        let idx: Vec<u64> = d.keys().map(|k| index_of_key(k)).collect();
        let n = idx.len() as u64;
        assert_eq!(idx, (0..n).collect::<Vec<_>>(), "{what}: table {} has a hole", t.name());
        for (k, v) in &d {
            assert_eq!(index_of_key(k), index_of_val(v), "{what}: wrong value");
        }
        match m {
            None => m = Some(n),
            Some(m) => assert_eq!(m, n, "{what}: a batch was applied to only some tables"),
        }
    }
    m.unwrap_or(0)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    /// `close()`, clear the faults, reopen.
    CloseReopen,
    /// Abandon the instance, cut the power (unsynced bytes lost), clear the faults, reopen.
    Crash,
}

/// A failed redo append or fsync poisons the instance; acknowledged writes stay readable and
/// come back after a reopen or a crash.
#[test]
fn redo_append_and_fsync_failures_poison_and_lose_no_acknowledged_write() {
    for op in [FaultOp::WriteAt, FaultOp::Sync] {
        for errno in [libc::EIO, libc::ENOSPC] {
            for ending in [Ending::CloseReopen, Ending::Crash] {
                let what = format!("{op:?} errno {errno} {ending:?}");
                let fs = FaultFs::new();
                let db = Db::open(DB, opts(&fs)).unwrap();
                let t = db.create_table("t").unwrap();
                let d = db.default_table();
                // Acknowledged writes: every third one unsynced.
                let mut synced_upto = 0;
                for i in 0..60 {
                    let sync = i % 3 != 0;
                    db.write(batch(&[&t, &d], i, 40), &synced(sync)).unwrap();
                    if sync {
                        synced_upto = i + 1;
                    }
                }
                fs.fail_after(op, Some("redo/"), 0, errno);
                let err = db.write(batch(&[&t, &d], 60, 40), &synced(true)).unwrap_err();
                assert_poisoned_io(&err, errno);
                assert_eq!(fs.faults_fired(), 1, "{what}");
                // Every later write is refused by the engine (the one-shot fault is gone).
                assert_refused(db.write(batch(&[&t], 61, 40), &synced(true)), errno);
                assert_refused(db.write(batch(&[&d], 62, 40), &synced(false)), errno);
                assert_refused(t.put(&key(63), b"x"), errno);
                assert_refused(d.delete(&key(1)), errno);
                assert_refused(db.write_async(batch(&[&t, &d], 64, 40), &synced(true)).wait(), errno);
                let no_wal = WriteOptions {
                    disable_wal: true,
                    ..Default::default()
                };
                assert_refused(db.write(batch(&[&t], 65, 40), &no_wal), errno);
                assert_eq!(
                    fs.faults_fired(),
                    1,
                    "{what}: later writes must not reach the file system"
                );
                // Reads still work and show exactly the acknowledged writes.
                assert_eq!(assert_prefix(&[&t, &d], &what), 60, "{what}");
                assert_eq!(t.get(&key(59)).unwrap(), Some(val(59, 40)));
                assert_eq!(
                    t.get(&key(60)).unwrap(),
                    None,
                    "{what}: the failed write is not visible"
                );
                let snap = db.snapshot();
                let got = db.multi_get(
                    &ReadOptions {
                        snapshot: Some(snap),
                        ..Default::default()
                    },
                    &[(&t, key(0)), (&d, key(59))],
                );
                assert_eq!(got[0].as_ref().unwrap(), &Some(val(0, 40)));
                assert_eq!(got[1].as_ref().unwrap(), &Some(val(59, 40)));
                drop((t, d));
                let must_have = match ending {
                    Ending::CloseReopen => {
                        db.close()
                            .unwrap_or_else(|e| panic!("{what}: close of a poisoned db failed: {e}"));
                        60
                    }
                    Ending::Crash => {
                        db.abandon_for_test();
                        fs.crash(CrashMode::DropUnsynced);
                        synced_upto
                    }
                };
                fs.clear_faults();
                let db = Db::open(DB, opts(&fs)).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
                let t = db.table("t").unwrap();
                let d = db.default_table();
                let m = assert_prefix(&[&t, &d], &what);
                // The failed write may or may not be there (its bytes may have reached the log),
                // but nothing after it, and every acknowledged (synced, for a crash) write is.
                assert!(
                    (must_have..=61).contains(&m),
                    "{what}: recovered 0..{m}, need 0..{must_have}"
                );
                // The reopened instance takes writes again, durably. (Closed cleanly before the
                // power cut: a crash right after a reopen is tested on its own below.)
                db.write(batch(&[&t, &d], m, 40), &synced(true)).unwrap();
                drop((t, d));
                db.close().unwrap();
                fs.crash(CrashMode::DropUnsynced);
                let db = Db::open(DB, opts(&fs)).unwrap();
                let t = db.table("t").unwrap();
                assert_eq!(assert_prefix(&[&t, &db.default_table()], &what), m + 1);
                db.close().unwrap();
            }
        }
    }
}

/// Several threads write until a fault fires under them: each sees its writes refused from
/// then on, and every acknowledged write of every thread survives.
#[test]
fn concurrent_writers_all_see_the_poisoning() {
    for (op, after) in [(FaultOp::WriteAt, 37), (FaultOp::Sync, 23), (FaultOp::WriteAt, 0)] {
        let fs = FaultFs::new();
        let db = Db::open(DB, opts(&fs)).unwrap();
        let t = db.create_table("t").unwrap();
        fs.fail_after(op, Some("redo/"), after, libc::EIO);
        let acked: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|th| {
                    let (db, t) = (db.clone(), t.clone());
                    s.spawn(move || {
                        let mut acked = Vec::new();
                        for n in 0..10_000u64 {
                            let i = th * 1_000_000 + n;
                            let res = if n % 2 == 0 {
                                db.write(batch(&[&t], i, 20), &synced(true))
                            } else {
                                db.write_async(batch(&[&t], i, 20), &synced(n % 3 != 0)).wait()
                            };
                            match res {
                                Ok(()) => acked.push(i),
                                Err(e) => {
                                    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                                    assert!(matches!(e, Error::Poisoned(_)), "{e:?}");
                                    for j in 1..=5 {
                                        assert_refused(
                                            db.write(batch(&[&t], i + j, 20), &synced(j % 2 == 0)),
                                            libc::EIO,
                                        );
                                    }
                                    return acked;
                                }
                            }
                        }
                        panic!("the fault never fired");
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(fs.faults_fired(), 1);
        let all: BTreeSet<u64> = acked.iter().flatten().copied().collect();
        let check = |t: &Table, what: &str| {
            let present: BTreeSet<u64> = dump(t).keys().map(|k| index_of_key(k)).collect();
            let missing: Vec<_> = all.difference(&present).collect();
            assert!(
                missing.is_empty(),
                "{op:?} {after} {what}: acknowledged writes missing: {missing:?}"
            );
        };
        check(&t, "before close");
        drop(t);
        db.close().unwrap();
        fs.clear_faults();
        let db = Db::open(DB, opts(&fs)).unwrap();
        check(&db.table("t").unwrap(), "after reopen");
        db.close().unwrap();
    }
}

/// Faults while the redo log rolls to a new segment (creating it, writing or syncing its
/// header, syncing the directory).
#[test]
fn segment_roll_failure_poisons_and_loses_no_acknowledged_write() {
    let cases = [
        (FaultOp::Create, "000002.log"),
        (FaultOp::SetLen, "000002.log"),
        (FaultOp::WriteAt, "000002.log"),
        (FaultOp::Sync, "000002.log"),
        (FaultOp::SyncDir, "redo"),
    ];
    for (op, filter) in cases {
        for ending in [Ending::CloseReopen, Ending::Crash] {
            let what = format!("{op:?} on {filter} {ending:?}");
            let fs = FaultFs::new();
            let db = Db::open(DB, small_segments(&fs)).unwrap();
            let t = db.create_table("t").unwrap();
            assert!(fs.exists(Path::new("/db/redo/000001.log")));
            fs.fail_after(op, Some(filter), 0, libc::ENOSPC);
            let mut failed_at = None;
            let mut synced_upto = 0;
            for i in 0..400u64 {
                let sync = i % 4 != 3;
                match db.write(batch(&[&t], i, 1000), &synced(sync)) {
                    Ok(()) if sync => synced_upto = i + 1,
                    Ok(()) => {}
                    Err(e) => {
                        assert_poisoned_io(&e, libc::ENOSPC);
                        failed_at = Some(i);
                        break;
                    }
                }
            }
            let failed_at = failed_at.unwrap_or_else(|| panic!("{what}: no write failed"));
            // The roll happens once the first segment holds 64 KiB.
            assert!((60..70).contains(&failed_at), "{what}: failed at write {failed_at}");
            assert_refused(db.write(batch(&[&t], failed_at + 1, 10), &synced(true)), libc::ENOSPC);
            assert_eq!(fs.faults_fired(), 1);
            assert_eq!(assert_prefix(&[&t], &what), failed_at);
            drop(t);
            let must_have = match ending {
                Ending::CloseReopen => {
                    db.close().unwrap();
                    failed_at
                }
                Ending::Crash => {
                    db.abandon_for_test();
                    fs.crash(CrashMode::DropUnsynced);
                    synced_upto
                }
            };
            fs.clear_faults();
            let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: {e}"));
            let t = db.table("t").unwrap();
            let m = assert_prefix(&[&t], &what);
            assert!(
                (must_have..=failed_at + 1).contains(&m),
                "{what}: recovered 0..{m}, need 0..{must_have}"
            );
            // Rolling works again after the reopen. (Closed cleanly before the power cut: a
            // crash right after a reopen is `unsynced_segment_header_replayed_at_open_...` below.)
            for i in m..m + 100 {
                db.write(batch(&[&t], i, 1000), &synced(true)).unwrap();
            }
            drop(t);
            db.close().unwrap();
            fs.crash(CrashMode::DropUnsynced);
            let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(assert_prefix(&[&db.table("t").unwrap()], &what), m + 100);
        }
    }
}

/// A process crash leaves unsynced writes in the OS cache, so the reopen replays them and
/// readers see them. A synced write after that, then a power cut, must not leave a hole (the
/// synced write there, the older writes it followed gone): the open has to make durable what it
/// replayed.
#[test]
fn unsynced_bytes_replayed_at_open_are_made_durable() {
    let fs = FaultFs::new();
    let db = Db::open(DB, opts(&fs)).unwrap();
    let t = db.default_table();
    for i in 0..10 {
        db.write(batch(&[&t], i, 0), &synced(false)).unwrap();
    }
    drop(t);
    db.abandon_for_test(); // the process dies; the OS still has the unsynced bytes
    let db = Db::open(DB, opts(&fs)).unwrap();
    let t = db.default_table();
    assert_eq!(assert_prefix(&[&t], "after the process crash"), 10);
    db.write(batch(&[&t], 10, 0), &synced(true)).unwrap();
    drop(t);
    db.abandon_for_test();
    fs.crash(CrashMode::DropUnsynced);
    let db = Db::open(DB, opts(&fs)).unwrap();
    assert_eq!(assert_prefix(&[&db.default_table()], "after the power cut"), 11);
}

/// The same for a segment header: the fsync of a new segment's header fails (the instance is
/// poisoned and closed), the reopen takes the unsynced header as a good empty segment and
/// creates the next segment after it, which makes the first one's directory entry durable but
/// not its header. After a power cut it is a short segment that is not the newest one.
#[test]
fn unsynced_segment_header_replayed_at_open_survives_a_power_cut() {
    let fs = FaultFs::new();
    let db = Db::open(DB, small_segments(&fs)).unwrap();
    let t = db.default_table();
    fs.fail_after(FaultOp::Sync, Some("000002.log"), 0, libc::EIO);
    let mut n = 0;
    while db.write(batch(&[&t], n, 1000), &synced(true)).is_ok() {
        n += 1;
    }
    drop(t);
    db.close().unwrap();
    fs.clear_faults();
    let db = Db::open(DB, small_segments(&fs)).unwrap();
    let t = db.default_table();
    let m = assert_prefix(&[&t], "reopen");
    db.write(batch(&[&t], m, 10), &synced(true)).unwrap();
    drop(t);
    db.abandon_for_test();
    fs.crash(CrashMode::DropUnsynced);
    let db =
        Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("the power cut made the database unopenable: {e}"));
    assert_eq!(assert_prefix(&[&db.default_table()], "after the power cut"), m + 1);
}

/// Faults on the CATALOG while creating or dropping a table.
#[test]
fn catalog_failures_during_ddl_are_typed_errors_and_leave_the_db_usable() {
    let ops = [
        (FaultOp::Create, Some("CATALOG")),
        (FaultOp::Append, Some("CATALOG")),
        (FaultOp::Sync, Some("CATALOG")),
        (FaultOp::Rename, Some("CATALOG")),
        (FaultOp::SyncDir, None),
    ];
    for (op, filter) in ops {
        for ending in [Ending::CloseReopen, Ending::Crash] {
            let what = format!("{op:?} {ending:?}");
            let fs = FaultFs::new();
            let db = Db::open(DB, opts(&fs)).unwrap();
            let d = db.default_table();
            d.put_opt(b"before", b"1", &synced(true)).unwrap();
            fs.fail_after(op, filter, 0, libc::ENOSPC);
            match db.create_table("t") {
                Err(e @ Error::Io { .. }) => assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{what}"),
                other => panic!("{what}: expected Io, got {other:?}"),
            }
            assert_eq!(fs.faults_fired(), 1);
            assert_eq!(db.tables(), ["default"], "{what}");
            assert!(matches!(db.table("t"), Err(Error::TableNotFound(_))), "{what}");
            // The instance is not poisoned by a DDL failure.
            d.put_opt(b"after", b"2", &synced(true)).unwrap();
            assert_eq!(d.get(b"before").unwrap(), Some(b"1".to_vec()));
            match ending {
                Ending::CloseReopen => {
                    drop(d);
                    db.close().unwrap();
                }
                Ending::Crash => {
                    drop(d);
                    db.abandon_for_test();
                    fs.crash(CrashMode::DropUnsynced);
                }
            }
            fs.clear_faults();
            let db = Db::open(DB, opts(&fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            assert!(
                !fs.exists(Path::new("/db/CATALOG.tmp")),
                "{what}: CATALOG.tmp left behind"
            );
            let tables = db.tables();
            if op == FaultOp::SyncDir && ending == Ending::CloseReopen {
                // The rename happened but was not made durable: either outcome is allowed, and a
                // table that made it is empty.
                if let Ok(t) = db.table("t") {
                    assert!(dump(&t).is_empty());
                }
            } else {
                assert_eq!(tables, ["default"], "{what}: a failed create_table left a table");
            }
            let d = db.default_table();
            assert_eq!(d.get(b"before").unwrap(), Some(b"1".to_vec()), "{what}");
            assert_eq!(d.get(b"after").unwrap(), Some(b"2".to_vec()), "{what}");
            // DDL works again, durably, and table ids are not confused.
            let t = match db.create_table("t") {
                Ok(t) => t,
                Err(Error::TableExists(_)) => db.table("t").unwrap(),
                Err(e) => panic!("{what}: {e}"),
            };
            let u = db.create_table("u").unwrap();
            t.put_opt(b"tk", b"tv", &synced(true)).unwrap();
            u.put_opt(b"uk", b"uv", &synced(true)).unwrap();
            drop((t, u, d));
            db.abandon_for_test();
            fs.crash(CrashMode::DropUnsynced);
            let db = Db::open(DB, opts(&fs)).unwrap();
            assert_eq!(db.tables(), ["default", "t", "u"], "{what}");
            let (t, u) = (db.table("t").unwrap(), db.table("u").unwrap());
            assert_eq!(dump(&t), BTreeMap::from([(b"tk".to_vec(), b"tv".to_vec())]), "{what}");
            assert_eq!(dump(&u), BTreeMap::from([(b"uk".to_vec(), b"uv".to_vec())]), "{what}");

            // A failed drop_table leaves the table in place and usable.
            fs.fail_after(op, filter, 0, libc::EIO);
            let e = db.drop_table("u").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}");
            assert!(db.tables().contains(&"u".to_string()));
            u.put_opt(b"uk2", b"uv2", &synced(true)).unwrap();
            assert_eq!(u.get(b"uk").unwrap(), Some(b"uv".to_vec()));
            fs.clear_faults();
            drop((t, u));
            db.close().unwrap();
            let db = Db::open(DB, opts(&fs)).unwrap();
            if !(op == FaultOp::SyncDir) {
                assert_eq!(db.tables(), ["default", "t", "u"], "{what}");
                assert_eq!(dump(&db.table("u").unwrap()).len(), 2);
            }
            db.close().unwrap();
        }
    }
}

/// A fault at any step of a clean close (the redo sync, the flush of every memtable into
/// extents and its slog commit, the deletion of redo segments): `close` reports it (with its
/// errno), and a reopen, also after a power cut, has every write (the log was synced before
/// the flush began, unless that very sync is what failed).
#[test]
fn close_failure_loses_nothing() {
    let cases = [
        (FaultOp::Sync, "redo"),
        (FaultOp::Remove, "redo"),
        (FaultOp::SyncDir, "redo"),
        (FaultOp::Create, "data"),
        (FaultOp::WriteAt, "data"),
        (FaultOp::Sync, "data"),
        (FaultOp::Append, "meta"),
        (FaultOp::Sync, "meta"),
    ];
    let mut fired = 0;
    for (op, filter) in cases {
        for after in 0..3 {
            for ending in [Ending::CloseReopen, Ending::Crash] {
                let what = format!("{op:?} on {filter} after {after} {ending:?}");
                let fs = FaultFs::new();
                let db = Db::open(DB, small_segments(&fs)).unwrap();
                let t = db.create_table("t").unwrap();
                let synced_upto = write_sequence(&db, &[&t], 0..500, 300);
                drop(t);
                let before = fs.faults_fired();
                fs.fail_after(op, Some(filter), after, libc::EIO);
                let res = db.close();
                let log_sync_failed = op == FaultOp::Sync && filter == "redo" && after == 0;
                if fs.faults_fired() > before {
                    fired += 1;
                    let e = res.expect_err(&what);
                    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}");
                } else {
                    res.unwrap_or_else(|e| panic!("{what}: {e}"));
                }
                fs.clear_faults();
                if ending == Ending::Crash {
                    fs.crash(CrashMode::DropUnsynced);
                }
                let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                let m = assert_prefix(&[&db.table("t").unwrap()], &what);
                if log_sync_failed && ending == Ending::Crash {
                    assert!(m >= synced_upto, "{what}: recovered 0..{m}, synced 0..{synced_upto}");
                } else {
                    assert_eq!(m, 500, "{what}");
                }
                db.close().unwrap();
            }
        }
    }
    assert!(fired >= 20, "faults fired only {fired} times");
}

/// An I/O error while opening (locking, reading the catalog, listing, reading or repairing the
/// log, creating the new segment) fails the open with a typed error, changes nothing that
/// matters, and a retry succeeds with all the data.
#[test]
fn open_failures_are_clean_and_retryable() {
    let cases = [
        (FaultOp::Lock, None),
        (FaultOp::OpenRead, Some("CATALOG")),
        (FaultOp::ListDir, Some("redo")),
        (FaultOp::OpenRead, Some("redo/")),
        (FaultOp::Truncate, Some("redo/")),
        (FaultOp::Create, Some("redo/")),
        (FaultOp::WriteAt, Some("redo/")),
        (FaultOp::Sync, Some("redo/")),
        (FaultOp::SyncDir, Some("redo")),
    ];
    for (op, filter) in cases {
        let what = format!("{op:?} on {filter:?}");
        let fs = FaultFs::new();
        let db = Db::open(DB, small_segments(&fs)).unwrap();
        let t = db.create_table("t").unwrap();
        write_sequence(&db, &[&t], 0..300, 300);
        drop(t);
        db.abandon_for_test();
        // A torn tail, so the open has a repair to do.
        let records = redo_records(&fs);
        let (path, off, end) = records.last().unwrap().clone();
        let mut data = fs.read_file(&path).unwrap();
        data.truncate((off + end) / 2);
        fs.write_file(&path, data);
        fs.fail_after(op, filter, 0, libc::EIO);
        match Db::open(DB, small_segments(&fs)) {
            Err(e @ Error::Io { .. }) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
            other => panic!("{what}: expected an I/O error, got {other:?}"),
        }
        assert_eq!(fs.faults_fired(), 1, "{what}");
        fs.clear_faults();
        let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: retry: {e}"));
        assert_eq!(assert_prefix(&[&db.table("t").unwrap()], &what), 299, "{what}");
        db.close().unwrap();
    }
}

/// A dropped table's redo records are never replayed into a later table of the same name.
#[test]
fn dropped_table_data_does_not_come_back_after_a_crash() {
    let fs = FaultFs::new();
    let db = Db::open(DB, opts(&fs)).unwrap();
    let t = db.create_table("t").unwrap();
    for i in 0..20 {
        t.put_opt(&key(i), b"old", &synced(true)).unwrap();
    }
    drop(t);
    db.drop_table("t").unwrap();
    let t = db.create_table("t").unwrap();
    t.put_opt(&key(100), b"new", &synced(true)).unwrap();
    drop(t);
    db.abandon_for_test();
    fs.crash(CrashMode::DropUnsynced);
    let db = Db::open(DB, opts(&fs)).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(dump(&t), BTreeMap::from([(key(100), b"new".to_vec())]));
}

/// Writes keys `0..n` in separate unsynced batches (every 97th synced) into `tables`, returns
/// how many leading writes were synced.
fn write_sequence(db: &Db, tables: &[&Table], range: std::ops::Range<u64>, pad: usize) -> u64 {
    let mut synced_upto = range.start;
    for i in range {
        let sync = i % 97 == 96;
        db.write(batch(tables, i, pad), &synced(sync)).unwrap();
        if sync {
            synced_upto = i + 1;
        }
    }
    synced_upto
}

/// Power loss after unsynced writes: what comes back is a prefix of the writes, without holes.
#[test]
fn power_loss_with_unsynced_writes_leaves_a_prefix_without_holes() {
    let modes =
        std::iter::once(CrashMode::DropUnsynced).chain((0..40).map(|seed| CrashMode::KeepRandomPrefix { seed }));
    let mut lengths = BTreeSet::new();
    for mode in modes {
        let what = format!("{mode:?}");
        let fs = FaultFs::new();
        let db = Db::open(DB, small_segments(&fs)).unwrap();
        let t = db.create_table("t").unwrap();
        let synced_upto = write_sequence(&db, &[&t], 0..1500, 100);
        drop(t);
        db.abandon_for_test();
        fs.crash(mode);
        let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let t = db.table("t").unwrap();
        let m = assert_prefix(&[&t], &what);
        assert!(
            m >= synced_upto && m <= 1500,
            "{what}: recovered 0..{m}, synced 0..{synced_upto}"
        );
        lengths.insert(m);
        // And again, on top of the recovered (possibly truncated) log.
        let synced2 = write_sequence(&db, &[&t], m..m + 700, 100);
        drop(t);
        db.abandon_for_test();
        fs.crash(mode);
        let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: second open: {e}"));
        let m2 = assert_prefix(&[&db.table("t").unwrap()], &what);
        assert!(
            m2 >= synced2.max(m) && m2 <= m + 700,
            "{what}: second crash recovered 0..{m2}"
        );
    }
    assert!(
        lengths.len() > 10,
        "torn crashes should keep different prefixes: {lengths:?}"
    );
}

/// Torn crashes over many seeds with concurrent multi-table writers: the open never fails,
/// synced writes are all there, batches are all-or-nothing, and each writer's writes form a
/// prefix.
#[test]
fn torn_crashes_over_many_seeds_never_fail_the_open() {
    for seed in 0..60u64 {
        let fs = FaultFs::new();
        let db = Db::open(DB, small_segments(&fs)).unwrap();
        db.create_table("a").unwrap();
        db.create_table("b").unwrap();
        db.close().unwrap();
        let mut synced_by_thread = [0u64; 3];
        let mut next_by_thread = [0u64; 3];
        for cycle in 0..3 {
            let what = format!("seed {seed} cycle {cycle}");
            let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let (a, b) = (db.table("a").unwrap(), db.table("b").unwrap());
            // Check what the previous crash left.
            let starts = check_threads(&[&a, &b], &synced_by_thread, &next_by_thread, &what);
            let results: Vec<(u64, u64)> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..3u64)
                    .map(|th| {
                        let (db, a, b) = (db.clone(), a.clone(), b.clone());
                        let start = starts[th as usize];
                        s.spawn(move || {
                            let mut synced_upto = start;
                            let n = 150 + (seed * 7 + th * 13) % 100;
                            for i in start..start + n {
                                let id = th * 1_000_000 + i;
                                let sync = (i + seed) % 11 == 0;
                                db.write(batch(&[&a, &b], id, 150), &synced(sync)).unwrap();
                                if sync {
                                    synced_upto = i + 1;
                                }
                            }
                            (synced_upto, start + n)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (th, (s, n)) in results.into_iter().enumerate() {
                synced_by_thread[th] = s;
                next_by_thread[th] = n;
            }
            drop((a, b));
            db.abandon_for_test();
            fs.crash(CrashMode::KeepRandomPrefix {
                seed: seed * 10 + cycle,
            });
        }
        let what = format!("seed {seed} final");
        let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let (a, b) = (db.table("a").unwrap(), db.table("b").unwrap());
        check_threads(&[&a, &b], &synced_by_thread, &next_by_thread, &what);
    }
}

/// Per writer thread `th` (ids `th * 1_000_000 + i`): the ids present in every table are
/// `0..m_th`, identical across tables, with `synced[th] <= m_th <= next[th]`. Returns the `m_th`.
#[track_caller]
fn check_threads(tables: &[&Table], synced: &[u64; 3], next: &[u64; 3], what: &str) -> [u64; 3] {
    let mut out = [0u64; 3];
    let mut first: Option<BTreeSet<u64>> = None;
    for t in tables {
        let d = dump(t);
        for (k, v) in &d {
            assert_eq!(index_of_key(k), index_of_val(v), "{what}: wrong value");
        }
        let ids: BTreeSet<u64> = d.keys().map(|k| index_of_key(k)).collect();
        match &first {
            None => first = Some(ids),
            Some(f) => assert_eq!(f, &ids, "{what}: a batch was applied to only one table"),
        }
    }
    let ids = first.unwrap();
    for th in 0..3u64 {
        let mine: Vec<u64> = ids
            .iter()
            .filter(|&&id| id / 1_000_000 == th)
            .map(|&id| id % 1_000_000)
            .collect();
        let m = mine.len() as u64;
        assert_eq!(mine, (0..m).collect::<Vec<_>>(), "{what}: writer {th} has a hole");
        let th = th as usize;
        assert!(
            m >= synced[th],
            "{what}: writer {th} lost synced writes: has 0..{m}, synced 0..{}",
            synced[th]
        );
        assert!(m <= next[th], "{what}: writer {th} has writes it never made");
        out[th] = m;
    }
    out
}

/// A fault at one redo I/O step (a write, an fsync, a segment creation or cut, a directory sync),
/// then a torn power cut: the open succeeds and every synced acknowledged write is there.
#[test]
fn fault_then_torn_crash_at_every_redo_step() {
    let cases = [
        (
            FaultOp::WriteAt,
            "redo/",
            &[0u64, 1, 2, 5, 20, 63, 64, 65, 66, 150, 299][..],
        ),
        (FaultOp::Sync, "redo/", &[0, 1, 2, 10, 40, 100, 150][..]),
        (FaultOp::Create, "redo/", &[0, 1, 2, 3][..]),
        (FaultOp::SetLen, "redo/", &[0, 1, 2, 3][..]),
        (FaultOp::SyncDir, "redo", &[0, 1, 2, 3][..]),
    ];
    let mut fired = 0;
    for (op, filter, afters) in cases {
        for &after in afters {
            let what = format!("{op:?} after {after}");
            let fs = FaultFs::new();
            let db = Db::open(DB, small_segments(&fs)).unwrap();
            let t = db.create_table("t").unwrap();
            fs.fail_after(op, Some(filter), after, libc::EIO);
            let mut synced_upto = 0;
            let mut written = 0;
            for i in 0..300u64 {
                let sync = i % 2 == 0;
                match db.write(batch(&[&t], i, 700), &synced(sync)) {
                    Ok(()) => {
                        written = i + 1;
                        if sync {
                            synced_upto = i + 1;
                        }
                    }
                    Err(e) => {
                        assert_poisoned_io(&e, libc::EIO);
                        fired += 1;
                        break;
                    }
                }
            }
            drop(t);
            db.abandon_for_test();
            fs.crash(CrashMode::KeepRandomPrefix { seed: after });
            fs.clear_faults();
            let db = Db::open(DB, small_segments(&fs)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let m = assert_prefix(&[&db.table("t").unwrap()], &what);
            assert!(
                m >= synced_upto && m <= written + 1,
                "{what}: recovered 0..{m}, synced 0..{synced_upto}"
            );
            db.close().unwrap();
        }
    }
    assert!(fired >= 20, "faults fired only {fired} times");
}

/// `(segment path, record offset, record end)` of every record of the redo log, in log order.
/// Format: a 32-byte segment header, then records of a 24-byte header (payload length as a
/// little-endian u32 at bytes 8..12) and the payload, then (format v2, newest segment) zeros
/// to the end of the file.
fn redo_records(fs: &FaultFs) -> Vec<(PathBuf, usize, usize)> {
    let dir = Path::new("/db/redo");
    let mut names: Vec<String> = fs.list_dir(dir).unwrap();
    names.retain(|n| n.ends_with(".log"));
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let path = dir.join(n);
        let data = fs.read_file(&path).unwrap();
        let mut off = 32;
        while off + 24 <= data.len() {
            if data[off..].iter().all(|&b| b == 0) {
                break; // the zero-filled space ahead of the records
            }
            let len = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
            out.push((path.clone(), off, off + 24 + len));
            off += 24 + len;
        }
        assert!(
            off == data.len() || data[off..].iter().all(|&b| b == 0),
            "{} does not parse",
            path.display()
        );
    }
    out
}

fn flip(fs: &FaultFs, path: &Path, at: usize) {
    let mut data = fs.read_file(path).unwrap();
    data[at] ^= 0x40;
    fs.write_file(path, data);
}

fn open_mode(fs: &FaultFs, mode: RecoveryMode) -> riptide::Result<Db> {
    Db::open(
        DB,
        Options {
            recovery_mode: mode,
            ..small_segments(fs)
        },
    )
}

/// A flipped byte in the middle of a closed database's redo log (group records over several
/// segments, no rewrite at close): the default open refuses it, point-in-time opens a prefix.
#[test]
fn flipped_byte_in_a_closed_logs_middle_is_corruption() {
    let fs = FaultFs::new();
    let no_rewrite = Options {
        flush_on_close: false,
        ..small_segments(&fs)
    };
    let db = Db::open(DB, no_rewrite.clone()).unwrap();
    let t = db.create_table("t").unwrap();
    write_sequence(&db, &[&t], 0..200, 300);
    drop(t);
    db.close().unwrap();
    let db = Db::open(DB, no_rewrite.clone()).unwrap();
    let t = db.table("t").unwrap();
    write_sequence(&db, &[&t], 200..400, 300);
    drop(t);
    db.close().unwrap();
    let records = redo_records(&fs);
    // One record per write: a single writer forms groups of one.
    assert_eq!(records.len(), 400);
    let segments: BTreeSet<&PathBuf> = records.iter().map(|r| &r.0).collect();
    assert!(segments.len() >= 3, "expected several segments");
    let clean: Vec<(PathBuf, Vec<u8>)> = segments
        .iter()
        .map(|p| ((*p).clone(), fs.read_file(p).unwrap()))
        .collect();
    let redo = Path::new("/db/redo");
    // Bytes in a header and in a payload of records of the first segment, the middle, and
    // the last segment (not its last record).
    for (k, delta) in [(3usize, 5usize), (150, 30), (211, 2), (300, 200), (398, 24 + 100)] {
        // Back to the closed log: the previous round's repair and rewrite undone.
        for name in fs.list_dir(redo).unwrap() {
            fs.remove_file(&redo.join(name)).unwrap();
        }
        for (path, data) in &clean {
            fs.write_file(path, data.clone());
        }
        let (path, off, end) = records[k].clone();
        assert!(off + delta < end);
        flip(&fs, &path, off + delta);
        for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::AbsoluteConsistency] {
            match open_mode(&fs, mode) {
                Err(e) => assert!(e.is_corruption(), "record {k} {mode:?}: expected corruption, got {e:?}"),
                Ok(_) => panic!("record {k} {mode:?}: opened a log with a flipped byte"),
            }
        }
        let db = open_mode(&fs, RecoveryMode::PointInTime).unwrap_or_else(|e| panic!("record {k}: {e}"));
        let t = db.table("t").unwrap();
        assert_eq!(assert_prefix(&[&t], "point in time"), k as u64, "record {k}");
        // The repaired database is normal from then on.
        t.put_opt(&key(k as u64), &val(k as u64, 3), &synced(true)).unwrap();
        drop(t);
        db.close().unwrap();
        let db = open_mode(&fs, RecoveryMode::AbsoluteConsistency).unwrap();
        assert_eq!(assert_prefix(&[&db.table("t").unwrap()], "reopen"), k as u64 + 1);
        drop(db);
    }
}

#[test]
fn oversized_keys_and_values_are_refused_and_write_nothing() {
    let fs = FaultFs::new();
    let db = Db::open(DB, opts(&fs)).unwrap();
    let t = db.create_table("t").unwrap();
    t.put_opt(b"a", b"1", &synced(true)).unwrap();
    let redo_len = |fs: &FaultFs| redo_records(fs).len();
    let (stats, records) = (db.write_stats(), redo_len(&fs));

    let big_key = vec![b'k'; MAX_KEY_SIZE + 1];
    let big_value = vec![b'v'; MAX_VALUE_SIZE + 1];
    match t.put(&big_key, b"v") {
        Err(Error::KeyTooLarge { len, max }) => assert_eq!((len, max), (MAX_KEY_SIZE + 1, MAX_KEY_SIZE)),
        other => panic!("expected KeyTooLarge, got {other:?}"),
    }
    match t.put(b"k", &big_value) {
        Err(Error::ValueTooLarge { len, max }) => assert_eq!((len, max), (MAX_VALUE_SIZE + 1, MAX_VALUE_SIZE)),
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    let mut b = WriteBatch::new();
    b.put(&t, b"ok", b"fine").unwrap();
    assert!(matches!(b.put(&t, &big_key, b"v"), Err(Error::KeyTooLarge { .. })));
    assert!(matches!(b.put(&t, b"k2", &big_value), Err(Error::ValueTooLarge { .. })));
    assert!(matches!(b.delete(&t, &big_key), Err(Error::KeyTooLarge { .. })));
    assert_eq!(b.len(), 1, "a refused op leaves the batch unchanged");
    let size = b.size_in_bytes();
    assert!(size < 64, "batch grew to {size} bytes");
    assert_eq!(db.write_stats(), stats, "nothing reached the write path");
    assert_eq!(redo_len(&fs), records, "nothing reached the redo log");
    db.write(b, &synced(true)).unwrap();
    // A key of exactly the maximum size is fine.
    let max_key = vec![b'm'; MAX_KEY_SIZE];
    t.put_opt(&max_key, b"max", &synced(true)).unwrap();
    drop(t);
    db.close().unwrap();
    let db = Db::open(DB, opts(&fs)).unwrap();
    let got = dump(&db.table("t").unwrap());
    let want = BTreeMap::from([
        (b"a".to_vec(), b"1".to_vec()),
        (b"ok".to_vec(), b"fine".to_vec()),
        (max_key, b"max".to_vec()),
    ]);
    assert_eq!(got, want);
}

#[test]
fn bad_options_are_named_and_create_nothing() {
    let fs = FaultFs::new();
    let cases: Vec<(Options, &str)> = vec![
        (
            Options {
                write_queues: 0,
                ..opts(&fs)
            },
            "write_queues",
        ),
        (
            Options {
                redo_segment_size: 4096,
                ..opts(&fs)
            },
            "redo_segment_size",
        ),
        (
            Options {
                write_buffer_size: 1,
                ..opts(&fs)
            },
            "write_buffer_size",
        ),
        (
            Options {
                max_group_size: 0,
                ..opts(&fs)
            },
            "max_group_size",
        ),
        (
            Options {
                immutable_slowdown_trigger: 99,
                ..opts(&fs)
            },
            "immutable_slowdown_trigger",
        ),
    ];
    for (o, name) in cases {
        match Db::open(DB, o) {
            Err(Error::InvalidOption { option, .. }) => assert_eq!(option, name),
            other => panic!("{name}: expected InvalidOption, got {other:?}"),
        }
        assert!(!fs.exists(db_path()), "{name}: a refused open created the directory");
    }
}

#[test]
fn second_open_of_a_directory_is_locked() {
    // On the real file system and on FaultFs.
    let tmp = tempfile::tempdir().unwrap();
    let posix = Options::default();
    let fs = FaultFs::new();
    for (path, o) in [(tmp.path().to_path_buf(), posix), (PathBuf::from(DB), opts(&fs))] {
        let db = Db::open(&path, o.clone()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        match Db::open(&path, o.clone()) {
            Err(Error::Locked(p)) => assert_eq!(p, path),
            other => panic!("expected Locked, got {other:?}"),
        }
        // The refused open did no harm.
        assert_eq!(db.default_table().get(b"k").unwrap(), Some(b"v".to_vec()));
        db.close().unwrap();
        let db = Db::open(&path, o).unwrap();
        assert_eq!(db.default_table().get(b"k").unwrap(), Some(b"v".to_vec()));
    }
}

#[test]
fn missing_database_without_create_if_missing_is_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Options {
        create_if_missing: false,
        ..Default::default()
    };
    match Db::open(tmp.path(), o.clone()) {
        Err(Error::NotFound(p)) => assert_eq!(p, tmp.path()),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the refused open wrote files"
    );
    let missing = tmp.path().join("nope");
    assert!(matches!(Db::open(&missing, o.clone()), Err(Error::NotFound(_))));
    assert!(!missing.exists());
    Db::open(tmp.path(), Options::default()).unwrap().close().unwrap();
    Db::open(tmp.path(), o).unwrap().close().unwrap();
    let exclusive = Options {
        error_if_exists: true,
        ..Default::default()
    };
    assert!(matches!(Db::open(tmp.path(), exclusive), Err(Error::AlreadyExists(_))));
}

/// A clean close cuts the newest segment's zero-filled space off its records; when that fails
/// the close reports it, and the next open (or one after a power cut) still finds every write.
#[test]
fn a_failed_cut_of_the_zero_filled_space_at_close_loses_nothing() {
    for crash in [false, true] {
        let fs = FaultFs::new();
        let options = Options {
            flush_on_close: false,
            ..opts(&fs)
        };
        let db = Db::open(DB, options.clone()).unwrap();
        let t = db.create_table("t").unwrap();
        for i in 0..50 {
            db.write(batch(&[&t], i, 100), &synced(true)).unwrap();
        }
        let seg = Path::new("/db/redo/000001.log");
        assert!(fs.read_file(seg).unwrap().len() > 1 << 19, "zero-filled ahead");
        fs.fail_after(FaultOp::SetLen, Some("redo/"), 0, libc::EIO);
        drop(t);
        let e = db.close().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        assert_eq!(fs.faults_fired(), 1);
        fs.clear_faults();
        if crash {
            fs.crash(CrashMode::DropUnsynced);
        }
        let db = Db::open(DB, options).unwrap();
        assert_eq!(assert_prefix(&[&db.table("t").unwrap()], "reopen"), 50, "crash {crash}");
        db.close().unwrap();
        assert!(
            fs.read_file(Path::new("/db/redo/000002.log")).unwrap().len() < 4096,
            "cut at close"
        );
    }
}
