//! Tests of [`FaultFs`](super::FaultFs): durability per the contract, crash modes, fault
//! injection, handles across crashes, and concurrency.

use super::*;
use crate::fs::{FileSystem, RandomRwFile, ReadableFile};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// A FaultFs with directory `/db`.
fn setup() -> FaultFs {
    let fs = FaultFs::new();
    fs.create_dir_all(p("/db")).unwrap();
    fs
}

fn names(fs: &FaultFs, dir: &str) -> Vec<String> {
    let mut v = fs.list_dir(p(dir)).unwrap();
    v.sort();
    v
}

fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

#[test]
fn unsynced_appends_vanish_synced_stay() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    f.append(b"hello ").unwrap();
    f.sync_data().unwrap();
    f.append(b"world").unwrap();
    assert_eq!(f.len(), 11);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"hello world");
    assert_eq!(fs.syncs(), 1);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"hello ");
    let r = fs.open_read(p("/db/a")).unwrap();
    assert_eq!(r.read_all().unwrap(), b"hello ");
    assert_eq!(r.len().unwrap(), 6);
}

#[test]
fn created_file_without_dir_sync_vanishes() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    f.append(b"data").unwrap();
    f.sync_data().unwrap();
    let mut g = fs.create(p("/db/b")).unwrap();
    assert!(fs.exists(p("/db/a")));
    assert_eq!(names(&fs, "/db"), ["a", "b"]);
    // Only `b` gets its entry synced, and then only before its data.
    fs.sync_dir(p("/db")).unwrap();
    fs.remove_file(p("/db/a")).unwrap();
    fs.create(p("/db/c")).unwrap();
    g.append(b"lost").unwrap();
    fs.crash(CrashMode::DropUnsynced);
    // `a`'s removal was never synced, so it is back, with its synced data.
    assert_eq!(names(&fs, "/db"), ["a", "b"]);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"data");
    assert_eq!(fs.read_file(p("/db/b")).unwrap(), b"");
    assert!(!fs.exists(p("/db/c")));
    assert!(fs.exists(p("/db")));
}

#[test]
fn created_file_without_any_dir_sync_vanishes() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    f.append(b"data").unwrap();
    f.sync_data().unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert!(!fs.exists(p("/db/a")));
    assert!(fs.read_file(p("/db/a")).is_none());
    assert_eq!(fs.open_read(p("/db/a")).err().unwrap().kind(), io::ErrorKind::NotFound);
    assert!(names(&fs, "/db").is_empty());
}

#[test]
fn remove_sticks_after_dir_sync() {
    let fs = setup();
    fs.write_file(p("/db/a"), b"x".to_vec());
    fs.remove_file(p("/db/a")).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert!(!fs.exists(p("/db/a")));
}

#[test]
fn rename_reverted_without_dir_sync() {
    let fs = setup();
    fs.write_file(p("/db/tmp"), b"new".to_vec());
    fs.write_file(p("/db/CURRENT"), b"old".to_vec());
    fs.rename(p("/db/tmp"), p("/db/CURRENT")).unwrap();
    assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"new");
    assert!(!fs.exists(p("/db/tmp")));
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"old");
    assert_eq!(fs.read_file(p("/db/tmp")).unwrap(), b"new");
}

#[test]
fn rename_sticks_with_dir_sync() {
    let fs = setup();
    fs.write_file(p("/db/tmp"), b"new".to_vec());
    fs.write_file(p("/db/CURRENT"), b"old".to_vec());
    fs.rename(p("/db/tmp"), p("/db/CURRENT")).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"new");
    assert!(!fs.exists(p("/db/tmp")));
    assert_eq!(names(&fs, "/db"), ["CURRENT"]);
}

#[test]
fn sync_dir_only_affects_its_own_children() {
    let fs = setup();
    fs.create_dir_all(p("/db/sub")).unwrap();
    fs.create(p("/db/a")).unwrap();
    fs.create(p("/db/sub/b")).unwrap();
    fs.sync_dir(p("/db/sub")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert!(!fs.exists(p("/db/a")));
    assert!(fs.exists(p("/db/sub/b")));
    assert_eq!(names(&fs, "/db"), ["sub"]);
}

#[test]
fn create_replaces_with_a_fresh_node() {
    let fs = setup();
    fs.write_file(p("/db/a"), b"old".to_vec());
    let r = fs.open_read(p("/db/a")).unwrap();
    let mut f = fs.create(p("/db/a")).unwrap();
    f.append(b"new!").unwrap();
    f.sync_data().unwrap();
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"new!");
    assert_eq!(r.read_all().unwrap(), b"old");
    // The replacement was not dir-synced: the old file survives.
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"old");
}

#[test]
fn keep_random_prefix_keeps_between_synced_and_full() {
    let mut kept = BTreeSet::new();
    for seed in 0..64 {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        f.append(b"0123456789").unwrap();
        f.sync_data().unwrap();
        f.append(b"abcdefghijklmnopqrst").unwrap();
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        let data = fs.read_file(p("/db/a")).unwrap();
        assert!((10..=30).contains(&data.len()), "len {}", data.len());
        assert_eq!(&data[..], &b"0123456789abcdefghijklmnopqrst"[..data.len()]);
        kept.insert(data.len());
        // Whatever survived is now synced: a second crash keeps it all.
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), data);
    }
    assert!(kept.len() > 5, "prefix lengths not random: {kept:?}");
}

#[test]
fn keep_random_prefix_is_deterministic() {
    let run = |seed| {
        let fs = setup();
        for name in ["a", "b", "c"] {
            let path = PathBuf::from("/db").join(name);
            let mut f = fs.create(&path).unwrap();
            f.append(&[7u8; 1000]).unwrap();
        }
        fs.sync_dir(p("/db")).unwrap();
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        ["a", "b", "c"].map(|n| fs.read_file(&Path::new("/db").join(n)).unwrap().len())
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(1), run(2));
}

#[test]
fn truncate_makes_length_durable() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    f.append(b"0123456789").unwrap();
    fs.truncate(p("/db/a"), 4).unwrap();
    assert_eq!(f.len(), 4);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"0123");
    fs.truncate(p("/db/a"), 6).unwrap();
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"0123\0\0");
}

#[test]
fn fail_after_fires_once_on_the_right_call() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    fs.fail_after(FaultOp::Append, None, 2, libc::EIO);
    f.append(b"1").unwrap();
    f.append(b"2").unwrap();
    let e = f.append(b"3").unwrap_err();
    assert_eq!(errno(&e), Some(libc::EIO));
    assert_eq!(fs.faults_fired(), 1);
    // The failed append wrote nothing.
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"12");
    assert_eq!(f.len(), 2);
    for _ in 0..10 {
        f.append(b"x").unwrap();
    }
    assert_eq!(fs.faults_fired(), 1);
}

#[test]
fn fail_after_zero_fires_on_next_call_and_changes_nothing() {
    let fs = setup();
    fs.write_file(p("/db/a"), b"x".to_vec());
    fs.fail_after(FaultOp::Rename, None, 0, libc::ENOSPC);
    let e = fs.rename(p("/db/a"), p("/db/b")).unwrap_err();
    assert_eq!(errno(&e), Some(libc::ENOSPC));
    assert!(fs.exists(p("/db/a")));
    assert!(!fs.exists(p("/db/b")));
    fs.rename(p("/db/a"), p("/db/b")).unwrap();
    assert!(fs.exists(p("/db/b")));
}

#[test]
fn fail_after_counts_only_successful_calls_of_its_op() {
    let fs = setup();
    fs.fail_after(FaultOp::Remove, None, 1, libc::EIO);
    // Genuine failures and other ops do not count.
    assert_eq!(
        fs.remove_file(p("/db/missing")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    fs.write_file(p("/db/a"), vec![]);
    fs.write_file(p("/db/b"), vec![]);
    fs.rename(p("/db/a"), p("/db/c")).unwrap();
    fs.remove_file(p("/db/c")).unwrap();
    assert_eq!(errno(&fs.remove_file(p("/db/b")).unwrap_err()), Some(libc::EIO));
    fs.remove_file(p("/db/b")).unwrap();
    assert_eq!(fs.faults_fired(), 1);
}

#[test]
fn fail_always_fires_until_cleared() {
    let fs = setup();
    let mut f = fs.create(p("/db/a")).unwrap();
    f.append(b"abc").unwrap();
    fs.fail_always(FaultOp::Sync, None, libc::EIO);
    for i in 1..=5 {
        assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EIO));
        assert_eq!(fs.faults_fired(), i);
    }
    assert_eq!(fs.syncs(), 0);
    fs.sync_dir(p("/db")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"");
    let mut f = fs.create(p("/db/a")).unwrap();
    assert!(f.sync_data().is_err(), "faults survive a crash");
    fs.clear_faults();
    f.sync_data().unwrap();
    assert_eq!(fs.syncs(), 1);
    assert_eq!(fs.faults_fired(), 6);
}

#[test]
fn path_filter_selects_ops() {
    let fs = setup();
    fs.fail_always(FaultOp::Create, Some(".sst"), libc::ENOSPC);
    fs.fail_after(FaultOp::SyncDir, Some("/other"), 0, libc::EIO);
    fs.create(p("/db/000001.log")).unwrap();
    assert_eq!(
        errno(&fs.create(p("/db/000002.sst")).err().unwrap()),
        Some(libc::ENOSPC)
    );
    assert!(!fs.exists(p("/db/000002.sst")));
    fs.sync_dir(p("/db")).unwrap();
    fs.create_dir_all(p("/other")).unwrap();
    assert!(fs.sync_dir(p("/other")).is_err());
    fs.sync_dir(p("/other")).unwrap();
    assert_eq!(fs.faults_fired(), 2);
    // Handle ops filter on the handle's path; rename on either path.
    let mut log = fs.create(p("/db/000003.log")).unwrap();
    fs.fail_always(FaultOp::Append, Some("000004"), libc::EIO);
    fs.fail_always(FaultOp::Rename, Some("MANIFEST"), libc::EIO);
    log.append(b"ok").unwrap();
    assert!(fs.rename(p("/db/000003.log"), p("/db/MANIFEST-1")).is_err());
    fs.rename(p("/db/000003.log"), p("/db/000004.log")).unwrap();
    log.append(b"still ok").unwrap();
}

#[test]
fn handles_from_before_crash_are_dead() {
    let fs = setup();
    fs.write_file(p("/db/a"), b"abc".to_vec());
    let mut w = fs.create(p("/db/b")).unwrap();
    let r = fs.open_read(p("/db/a")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    let check = |e: io::Error| {
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert_eq!(e.to_string(), "file handle from before crash");
    };
    check(w.append(b"x").unwrap_err());
    check(w.sync_data().unwrap_err());
    check(r.read_at(&mut [0u8; 3], 0).unwrap_err());
    check(r.len().unwrap_err());
    assert_eq!(fs.faults_fired(), 0);
    // New handles work.
    let r = fs.open_read(p("/db/a")).unwrap();
    assert_eq!(r.read_all().unwrap(), b"abc");
}

#[test]
fn removed_open_file_stays_readable() {
    let fs = setup();
    fs.write_file(p("/db/a"), b"abcdef".to_vec());
    let r = fs.open_read(p("/db/a")).unwrap();
    fs.remove_file(p("/db/a")).unwrap();
    assert!(!fs.exists(p("/db/a")));
    let mut buf = [0u8; 4];
    assert_eq!(r.read_at(&mut buf, 4).unwrap(), 2);
    assert_eq!(&buf[..2], b"ef");
    assert_eq!(r.read_at(&mut buf, 6).unwrap(), 0);
    assert_eq!(r.read_at(&mut buf, 100).unwrap(), 0);
    assert_eq!(r.read_all().unwrap(), b"abcdef");
}

#[test]
fn lock_conflict_and_release() {
    let fs = setup();
    let l1 = fs.lock(p("/db/LOCK")).unwrap();
    assert!(fs.exists(p("/db/LOCK")));
    let e = fs.lock(p("/db/LOCK")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    let other = fs.lock(p("/db/LOCK2")).unwrap();
    drop(l1);
    let l2 = fs.lock(p("/db/LOCK")).unwrap();
    drop(other);
    // A crash releases locks; the stale handle's drop must not free the new holder's lock.
    fs.crash(CrashMode::DropUnsynced);
    let l3 = fs.lock(p("/db/LOCK")).unwrap();
    drop(l2);
    assert_eq!(fs.lock(p("/db/LOCK")).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    drop(l3);
    fs.lock(p("/db/LOCK")).unwrap();
    assert!(format!("{fs:?}").contains("FaultFs"));
}

#[test]
fn missing_directories() {
    let fs = setup();
    assert_eq!(fs.create(p("/nope/a")).err().unwrap().kind(), io::ErrorKind::NotFound);
    assert_eq!(fs.list_dir(p("/nope")).unwrap_err().kind(), io::ErrorKind::NotFound);
    assert_eq!(fs.lock(p("/nope/LOCK")).unwrap_err().kind(), io::ErrorKind::NotFound);
    fs.write_file(p("/db/a"), vec![]);
    assert!(fs.rename(p("/db/a"), p("/nope/a")).is_err());
    assert!(fs.exists(p("/db/a")));
    assert!(fs.create_dir_all(p("/db/a/b")).is_err());
    // Directories created by create_dir_all are durable; paths are normalized.
    fs.create_dir_all(p("/x/y/z")).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert!(fs.exists(p("/x/y/")));
    assert_eq!(names(&fs, "/x/./y"), ["z"]);
    assert_eq!(names(&fs, "/"), ["db", "x"]);
    fs.create(p("/x/y/./f")).unwrap();
    assert!(fs.exists(p("/x/y/f")));
}

#[test]
fn write_file_is_durable_and_in_place() {
    let fs = FaultFs::new();
    fs.write_file(p("/d/e/f"), b"one".to_vec());
    let r = fs.open_read(p("/d/e/f")).unwrap();
    fs.write_file(p("/d/e/f"), b"two!".to_vec());
    assert_eq!(r.read_all().unwrap(), b"two!");
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/d/e/f")).unwrap(), b"two!");
    assert!(fs.exists(p("/d/e")));
}

/// A synced, dir-synced rw file `/db/d` holding `content`.
fn rw_setup(content: &[u8]) -> (FaultFs, Arc<dyn RandomRwFile>) {
    let fs = setup();
    let f = fs.open_rw(p("/db/d"), true).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    f.write_at(content, 0).unwrap();
    f.sync_data().unwrap();
    (fs, f)
}

#[test]
fn rw_unsynced_write_at_vanishes_synced_stays() {
    let (fs, f) = rw_setup(b"0123456789");
    f.write_at(b"ab", 2).unwrap();
    f.sync_data().unwrap();
    f.write_at(b"XY", 5).unwrap();
    f.write_at(b"tail", 12).unwrap();
    assert_eq!(f.read_all().unwrap(), b"01ab4XY789\0\0tail");
    assert_eq!(f.len().unwrap(), 16);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"01ab456789");
    let g = fs.open_rw(p("/db/d"), false).unwrap();
    assert_eq!(g.read_all().unwrap(), b"01ab456789");
    // Overwrites of overwrites roll back to the synced bytes too.
    g.write_at(b"AAAA", 0).unwrap();
    g.write_at(b"BB", 1).unwrap();
    g.write_at(b"C", 20).unwrap();
    g.write_at(b"DDD", 8).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"01ab456789");
}

#[test]
fn rw_set_len_durable_only_after_sync() {
    let (fs, f) = rw_setup(b"0123456789");
    f.set_len(4).unwrap();
    assert_eq!(f.read_all().unwrap(), b"0123");
    f.set_len(6).unwrap();
    assert_eq!(f.read_all().unwrap(), b"0123\0\0");
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"0123456789");
    let f = fs.open_rw(p("/db/d"), false).unwrap();
    f.set_len(3).unwrap();
    f.sync_data().unwrap();
    f.set_len(8).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"012");
    let f = fs.open_rw(p("/db/d"), false).unwrap();
    f.set_len(5).unwrap();
    f.sync_data().unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"012\0\0");
}

#[test]
fn rw_keep_random_prefix_keeps_changes_in_order() {
    // Each change is a whole step of a sequence; a crash must leave exactly one step's state,
    // or the state before a write with a prefix of that write (a torn write).
    let steps: Vec<Vec<u8>> = {
        let mut v = vec![b"0123456789".to_vec()];
        let mut cur = v[0].clone();
        for (i, change) in [(2usize, &b"ab"[..]), (12, b"xyz"), (0, b"Q"), (5, b"-")]
            .iter()
            .enumerate()
        {
            let end = change.0 + change.1.len();
            if end > cur.len() {
                cur.resize(end, 0);
            }
            cur[change.0..end].copy_from_slice(change.1);
            v.push(cur.clone());
            if i == 1 {
                cur.truncate(7);
                v.push(cur.clone());
            }
        }
        v
    };
    // (state before the write, offset, bytes) of each write_at.
    let writes = [
        (0usize, 2usize, &b"ab"[..]),
        (1, 12, b"xyz"),
        (3, 0, b"Q"),
        (4, 5, b"-"),
    ];
    let torn: Vec<Vec<u8>> = writes
        .iter()
        .flat_map(|&(before, offset, bytes)| {
            let steps = &steps;
            (1..bytes.len()).map(move |cut| {
                let mut img = steps[before].clone();
                if offset + cut > img.len() {
                    img.resize(offset + cut, 0);
                }
                img[offset..offset + cut].copy_from_slice(&bytes[..cut]);
                img
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut torn_seen = 0;
    for seed in 0..256 {
        let (fs, f) = rw_setup(&steps[0]);
        f.write_at(b"ab", 2).unwrap();
        f.write_at(b"xyz", 12).unwrap();
        f.set_len(7).unwrap();
        f.write_at(b"Q", 0).unwrap();
        f.write_at(b"-", 5).unwrap();
        assert_eq!(&f.read_all().unwrap(), steps.last().unwrap());
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        let data = fs.read_file(p("/db/d")).unwrap();
        match steps.iter().position(|s| *s == data) {
            Some(step) => {
                seen.insert(step);
            }
            None => {
                assert!(torn.contains(&data), "not a prefix of the changes: {data:?}");
                torn_seen += 1;
            }
        }
        // What survived is synced now.
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), data);
    }
    assert_eq!(seen.len(), steps.len(), "not every prefix was chosen: {seen:?}");
    assert!(torn_seen > 0, "no torn write was chosen");
}

#[test]
fn rw_keep_random_prefix_is_deterministic() {
    let run = |seed| {
        let fs = setup();
        let files: Vec<_> = (0..4)
            .map(|i| fs.open_rw(&PathBuf::from(format!("/db/{i}")), true).unwrap())
            .collect();
        fs.sync_dir(p("/db")).unwrap();
        for (i, f) in files.iter().enumerate() {
            for j in 0..20u64 {
                f.write_at(&[j as u8 + 1; 3], j * 3 + i as u64).unwrap();
            }
        }
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        (0..4)
            .map(|i| fs.read_file(&PathBuf::from(format!("/db/{i}"))).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(1), run(2));
}

#[test]
fn rw_mixed_with_appends() {
    let fs = setup();
    let mut w = fs.create(p("/db/m")).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    w.append(b"abc").unwrap();
    w.sync_data().unwrap();
    w.append(b"def").unwrap();
    let f = fs.open_rw(p("/db/m"), false).unwrap();
    f.write_at(b"X", 0).unwrap();
    w.append(b"ghi").unwrap();
    assert_eq!(f.read_all().unwrap(), b"Xbcdefghi");
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/m")).unwrap(), b"abc");
    for seed in 0..32 {
        let fs = setup();
        let mut w = fs.create(p("/db/m")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        w.append(b"abc").unwrap();
        w.sync_data().unwrap();
        w.append(b"def").unwrap();
        let f = fs.open_rw(p("/db/m"), false).unwrap();
        f.write_at(b"X", 0).unwrap();
        w.append(b"ghi").unwrap();
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        let data = fs.read_file(p("/db/m")).unwrap();
        let ok = [&b"Xbcdef"[..], b"Xbcdefghi"].contains(&&data[..]) || b"abcdef".starts_with(&data) && data.len() >= 3;
        assert!(ok, "seed {seed}: {:?}", String::from_utf8_lossy(&data));
    }
}

#[test]
fn rw_open_create_and_dir_entries() {
    let fs = setup();
    assert_eq!(
        fs.open_rw(p("/db/x"), false).err().unwrap().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(errno(&fs.open_rw(p("/db"), true).err().unwrap()), Some(libc::EISDIR));
    assert_eq!(
        fs.open_rw(p("/nope/x"), true).err().unwrap().kind(),
        io::ErrorKind::NotFound
    );
    let f = fs.open_rw(p("/db/x"), true).unwrap();
    assert!(fs.exists(p("/db/x")));
    f.write_at(b"data", 0).unwrap();
    f.sync_data().unwrap();
    // Reopening (with or without create) never truncates and shares the node.
    let g = fs.open_rw(p("/db/x"), true).unwrap();
    assert_eq!(g.read_all().unwrap(), b"data");
    g.write_at(b"D", 0).unwrap();
    assert_eq!(f.read_all().unwrap(), b"Data");
    // Not dir-synced: the file vanishes in a crash, synced data or not.
    fs.crash(CrashMode::DropUnsynced);
    assert!(!fs.exists(p("/db/x")));
    let f = fs.open_rw(p("/db/x"), true).unwrap();
    fs.sync_dir(p("/db")).unwrap();
    f.write_at(b"kept", 0).unwrap();
    f.sync_data().unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/x")).unwrap(), b"kept");
    // The rw handle upcasts to a readable file.
    let f = fs.open_rw(p("/db/x"), false).unwrap();
    let r: Arc<dyn ReadableFile> = f.clone();
    let by_ref: &dyn ReadableFile = &*f;
    assert_eq!(r.read_all().unwrap(), b"kept");
    assert_eq!(by_ref.len().unwrap(), 4);
    // truncate makes everything durable, including earlier positional writes.
    f.write_at(b"KE", 0).unwrap();
    fs.truncate(p("/db/x"), 3).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/x")).unwrap(), b"KEp");
}

#[test]
fn rw_handles_from_before_crash_are_dead() {
    let (fs, f) = rw_setup(b"abc");
    fs.crash(CrashMode::DropUnsynced);
    for e in [
        f.write_at(b"x", 0).unwrap_err(),
        f.set_len(0).unwrap_err(),
        f.sync_data().unwrap_err(),
        f.read_at(&mut [0u8; 2], 0).unwrap_err(),
        f.len().unwrap_err(),
    ] {
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert_eq!(e.to_string(), "file handle from before crash");
    }
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"abc");
    assert_eq!(fs.faults_fired(), 0);
}

#[test]
fn rw_faults_fire_and_change_nothing() {
    let (fs, f) = rw_setup(b"0123456789");
    fs.fail_after(FaultOp::WriteAt, Some("/db/d"), 1, libc::ENOSPC);
    f.write_at(b"a", 0).unwrap();
    assert_eq!(
        errno(&f.write_at(b"bbbbbbbbbbbbbbbb", 5).unwrap_err()),
        Some(libc::ENOSPC)
    );
    assert_eq!(f.read_all().unwrap(), b"a123456789");
    f.write_at(b"b", 1).unwrap();
    fs.fail_after(FaultOp::SetLen, None, 0, libc::EIO);
    assert_eq!(errno(&f.set_len(2).unwrap_err()), Some(libc::EIO));
    assert_eq!(f.len().unwrap(), 10);
    fs.fail_after(FaultOp::Sync, None, 0, libc::EIO);
    assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EIO));
    assert_eq!(fs.syncs(), 1);
    assert_eq!(fs.faults_fired(), 3);
    // The failed sync made nothing durable.
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"0123456789");
    // open_rw: Create with `create`, OpenRead without.
    fs.fail_after(FaultOp::Create, Some("new"), 0, libc::ENOSPC);
    fs.fail_after(FaultOp::OpenRead, Some("/db/d"), 0, libc::EIO);
    assert_eq!(
        errno(&fs.open_rw(p("/db/new"), true).err().unwrap()),
        Some(libc::ENOSPC)
    );
    assert!(!fs.exists(p("/db/new")));
    assert_eq!(errno(&fs.open_rw(p("/db/d"), false).err().unwrap()), Some(libc::EIO));
    fs.open_rw(p("/db/new"), true).unwrap();
    fs.open_rw(p("/db/d"), false).unwrap();
    assert_eq!(fs.faults_fired(), 5);
    // A failed set_len that would extend writes nothing either.
    let g = fs.open_rw(p("/db/d"), false).unwrap();
    fs.fail_always(FaultOp::SetLen, Some("/db/d"), libc::ENOSPC);
    assert!(g.set_len(1 << 20).is_err());
    assert_eq!(g.len().unwrap(), 10);
}

#[test]
fn rw_concurrent_write_at_from_threads() {
    let (fs, f) = rw_setup(b"");
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..64u64 {
                    f.write_at(&[t + 1; 16], (i * 8 + u64::from(t)) * 16).unwrap();
                    if i % 16 == 15 {
                        f.sync_data().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let check = |data: &[u8]| {
        assert_eq!(data.len(), 64 * 8 * 16);
        for (i, b) in data.iter().enumerate() {
            assert_eq!(usize::from(*b), (i / 16) % 8 + 1, "byte {i}");
        }
    };
    check(&f.read_all().unwrap());
    assert_eq!(fs.syncs(), 1 + 8 * 4);
    // Every thread synced after its last write, so everything survives.
    fs.crash(CrashMode::DropUnsynced);
    check(&fs.read_file(p("/db/d")).unwrap());
}

#[test]
fn clones_share_state_across_threads() {
    let fs = setup();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let fs: Arc<dyn FileSystem> = Arc::new(fs.clone());
            std::thread::spawn(move || {
                let path = PathBuf::from(format!("/db/{t}"));
                let mut f = fs.create(&path).unwrap();
                for i in 0..100u32 {
                    f.append(&i.to_le_bytes()).unwrap();
                    if i % 10 == 9 {
                        f.sync_data().unwrap();
                    }
                }
                f.append(b"tail").unwrap();
                fs.sync_dir(Path::new("/db")).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fs.syncs(), 80);
    fs.crash(CrashMode::DropUnsynced);
    for t in 0..8 {
        let data = fs.read_file(&PathBuf::from(format!("/db/{t}"))).unwrap();
        assert_eq!(data.len(), 400);
    }
}

/// `KeepRandomSectors`: each 512-byte sector an unsynced write touched is, at random, as
/// synced or as one of the writes left it (whole), independently of the other sectors; nothing
/// past the synced length survives.
#[test]
fn keep_random_sectors_keeps_whole_sector_versions_in_any_combination() {
    let zeros = vec![0u8; 2048];
    let sector = |f: &dyn Fn(usize) -> u8, from: usize| -> Vec<u8> { (from..from + 512).map(f).collect() };
    let s0 = [sector(&|_| 0, 0), sector(&|i| u8::from(i >= 100), 0)];
    let s1 = [
        sector(&|_| 0, 512),
        sector(&|i| u8::from(i < 700), 512),
        sector(
            &|i| {
                if i < 700 {
                    1
                } else if i < 1000 {
                    2
                } else {
                    0
                }
            },
            512,
        ),
    ];
    let s2 = [sector(&|_| 0, 1024), sector(&|i| if i >= 1500 { 3 } else { 0 }, 1024)];
    let mut seen = BTreeSet::new();
    for seed in 0..200 {
        let (fs, f) = rw_setup(&zeros);
        f.write_at(&[1u8; 600], 100).unwrap(); // sectors 0 and 1
        f.write_at(&[2u8; 300], 700).unwrap(); // sector 1
        f.write_at(&[3u8; 700], 1500).unwrap(); // sectors 2 and 3, and past the synced length
        fs.crash(CrashMode::KeepRandomSectors { seed });
        let data = fs.read_file(p("/db/d")).unwrap();
        assert_eq!(data.len(), 2048, "no growth survives");
        let v0 = s0
            .iter()
            .position(|s| s[..] == data[..512])
            .expect("sector 0: a whole version");
        let v1 = s1
            .iter()
            .position(|s| s[..] == data[512..1024])
            .expect("sector 1: a whole version");
        let v2 = s2
            .iter()
            .position(|s| s[..] == data[1024..1536])
            .expect("sector 2: a whole version");
        seen.insert((v0, v1, v2));
    }
    assert!(seen.len() >= 10, "too few combinations: {seen:?}");
}
