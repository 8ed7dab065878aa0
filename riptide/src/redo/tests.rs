//! Unit tests of the redo log: records written with [`RedoLog`] and [`encode_record`] are
//! recovered exactly and in LSN order, across segment rolls; a torn tail of the newest segment is
//! cut off (and the file really truncated) while any other damage (a flipped byte in a header, a
//! payload or an older segment, a damaged segment header, an LSN going backward, a malformed op)
//! is an [`Error::Corruption`] naming the file and offset, never silently replayed; the three
//! [`RecoveryMode`]s; zeros after the last record; superseding rewrite segments
//! ([`RedoLog::rewrite_and_retire`]), also when the rewrite fails half-way and the machine
//! crashes; leftover `.log.tmp` files; and newer format versions ([`Error::UnsupportedFormat`]).

use super::record::{put_op, put_rewrite_op, RECORD_GROUP, RECORD_REWRITE};
use super::*;
use crate::fs::{CrashMode, FaultFs, FaultOp, PosixFs};
use crate::key::ValueKind;
use std::collections::BTreeMap;

/// The redo directory used with [`FaultFs`].
fn dir() -> PathBuf {
    PathBuf::from("/db/redo")
}

fn seg(n: u64) -> PathBuf {
    segment_path(&dir(), n)
}

/// A fresh [`FaultFs`] with the redo directory, and the same file system as the engine holds it.
fn new_fs() -> (FaultFs, Arc<dyn FileSystem>) {
    let fs = FaultFs::new();
    fs.create_dir_all(&dir()).unwrap();
    let arc: Arc<dyn FileSystem> = Arc::new(fs.clone());
    (fs, arc)
}

/// A [`FaultFs`] holding exactly `files` (all durable).
fn fs_with(files: &[(PathBuf, Vec<u8>)]) -> FaultFs {
    let fs = FaultFs::new();
    fs.create_dir_all(&dir()).unwrap();
    for (p, data) in files {
        fs.write_file(p, data.clone());
    }
    fs
}

/// Every file of the redo directory with its bytes, sorted by name.
fn files(fs: &FaultFs) -> Vec<(PathBuf, Vec<u8>)> {
    let mut names = fs.list_dir(&dir()).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let p = dir().join(&n);
            let data = fs.read_file(&p).unwrap();
            (p, data)
        })
        .collect()
}

fn names(fs: &FaultFs) -> Vec<String> {
    let mut names = fs.list_dir(&dir()).unwrap();
    names.sort();
    names
}

/// Replaces the bytes of `path` in `files`.
fn set_file(files: &mut [(PathBuf, Vec<u8>)], path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let entry = files.iter_mut().find(|(p, _)| p == path).expect("no such file");
    f(&mut entry.1);
}

fn key(lsn: Lsn) -> Vec<u8> {
    format!("k{lsn:06}").into_bytes()
}

fn value(lsn: Lsn, pad: usize) -> Vec<u8> {
    let mut v = format!("v{lsn}-").into_bytes();
    v.resize(v.len() + pad, b'.');
    v
}

/// One replayed op, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    lsn: Lsn,
    kind: ValueKind,
    table: u32,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The ops of a group record of `n` ops from `first_lsn`: puts of `key(lsn)` in table 1, except
/// that every 5th op is a delete in table 2 and every 7th a put of an empty value.
fn group_ops(first_lsn: Lsn, n: u64, pad: usize) -> Vec<Rec> {
    (first_lsn..first_lsn + n)
        .map(|lsn| {
            if lsn % 5 == 0 {
                Rec {
                    lsn,
                    kind: ValueKind::Delete,
                    table: 2,
                    key: key(lsn),
                    value: Vec::new(),
                }
            } else {
                let value = if lsn % 7 == 0 { Vec::new() } else { value(lsn, pad) };
                Rec {
                    lsn,
                    kind: ValueKind::Put,
                    table: 1,
                    key: key(lsn),
                    value,
                }
            }
        })
        .collect()
}

/// A whole encoded group record holding `ops` (their LSNs must be consecutive).
fn group_record(ops: &[Rec]) -> Vec<u8> {
    let mut payload = Vec::new();
    for op in ops {
        put_op(&mut payload, op.kind, op.table, &op.key, &op.value);
    }
    let mut out = Vec::new();
    encode_record(&mut out, RECORD_GROUP, ops[0].lsn, &payload, crc32c::crc32c(&payload));
    out
}

/// A whole encoded rewrite record holding `ops` (any LSNs).
fn rewrite_record(ops: &[Rec]) -> Vec<u8> {
    let mut payload = Vec::new();
    for op in ops {
        put_rewrite_op(&mut payload, op.lsn, op.kind, op.table, &op.key, &op.value);
    }
    let mut out = Vec::new();
    encode_record(&mut out, RECORD_REWRITE, 0, &payload, crc32c::crc32c(&payload));
    out
}

/// Where a record went.
#[derive(Debug, Clone)]
struct Pos {
    seg: u64,
    off: u64,
    end: u64,
    ops: Vec<Rec>,
}

/// Writes group records of `sizes[i]` ops each (LSNs from `first_lsn` on) the way the write
/// pipeline does (append, sync, roll when full), into a log whose first segment is `number`.
/// Returns the open log and where each record went.
fn write_log(
    fs: &Arc<dyn FileSystem>,
    number: u64,
    segment_size: u64,
    first_lsn: Lsn,
    sizes: &[u64],
    pad: usize,
) -> (RedoLog, Vec<Pos>) {
    let mut log = RedoLog::create(fs.clone(), dir(), number, segment_size, Vec::new()).unwrap();
    let mut out = Vec::new();
    let mut lsn = first_lsn;
    for (i, &n) in sizes.iter().enumerate() {
        if i > 0 {
            log.maybe_roll().unwrap();
        }
        let ops = group_ops(lsn, n, pad);
        lsn += n;
        let rec = group_record(&ops);
        let off = log.len();
        log.append(&rec, 0).unwrap();
        log.sync().unwrap();
        out.push(Pos {
            seg: log.number,
            off,
            end: off + rec.len() as u64,
            ops,
        });
    }
    (log, out)
}

/// Recovers `fs`'s redo log in `mode`; returns the outcome and every op applied, in order.
fn replay(fs: &FaultFs, mode: RecoveryMode) -> (Result<RecoveryReport>, Vec<Rec>) {
    replay_dyn(fs, &dir(), mode)
}

fn replay_dyn(fs: &dyn FileSystem, dir: &Path, mode: RecoveryMode) -> (Result<RecoveryReport>, Vec<Rec>) {
    let mut got = Vec::new();
    let res = recover(fs, dir, mode, &mut |op| {
        got.push(Rec {
            lsn: op.lsn,
            kind: op.kind,
            table: op.table,
            key: op.key.to_vec(),
            value: op.value.to_vec(),
        });
        Ok(())
    });
    (res, got)
}

fn ops_of(pos: &[Pos]) -> Vec<Rec> {
    pos.iter().flat_map(|p| p.ops.iter().cloned()).collect()
}

fn lsns(recs: &[Rec]) -> Vec<Lsn> {
    recs.iter().map(|r| r.lsn).collect()
}

/// Asserts `res` is a corruption of `path` at `offset`.
#[track_caller]
fn assert_corruption(res: &Result<RecoveryReport>, path: &Path, offset: u64) {
    match res {
        Err(Error::Corruption { path: p, offset: o, .. }) if p == path && *o == offset => {}
        other => panic!("expected corruption of {} at {offset}, got {other:?}", path.display()),
    }
}

/// Sizes giving several segments of 300 bytes whose records are the given number of ops.
fn many_sizes(n: usize) -> Vec<u64> {
    (0..n).map(|i| 1 + (i as u64 * 7) % 4).collect()
}

#[test]
fn recover_creates_a_missing_directory_and_finds_nothing() {
    let fs = FaultFs::new();
    let (res, got) = replay(&fs, RecoveryMode::default());
    let report = res.unwrap();
    assert!(got.is_empty());
    assert_eq!(
        (report.max_lsn, report.next_segment, report.records, report.ops),
        (0, 1, 0, 0)
    );
    assert!(report.truncated_at.is_none());
    assert!(fs.exists(&dir()));
}

#[test]
fn records_round_trip_in_order() {
    let (fs, afs) = new_fs();
    let sizes = [1, 3, 2, 10, 1, 4, 7, 1, 1, 2];
    let (log, pos) = write_log(&afs, 1, 64 << 20, 1, &sizes, 3);
    drop(log);
    let before = files(&fs);
    assert_eq!(before.len(), 1, "one segment expected");
    for mode in [
        RecoveryMode::TolerateCorruptedTail,
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::PointInTime,
    ] {
        let (res, got) = replay(&fs, mode);
        let report = res.unwrap();
        assert_eq!(got, ops_of(&pos), "{mode:?}");
        assert_eq!(report.records, sizes.len() as u64);
        assert_eq!(report.ops, sizes.iter().sum::<u64>());
        assert_eq!(report.max_lsn, sizes.iter().sum::<u64>());
        assert_eq!(report.next_segment, 2);
        assert!(report.truncated_at.is_none());
        assert_eq!(files(&fs), before, "a clean recovery changes no byte");
    }
    // Deletes and empty values made it through.
    assert!(ops_of(&pos).iter().any(|r| r.kind == ValueKind::Delete));
    assert!(ops_of(&pos)
        .iter()
        .any(|r| r.kind == ValueKind::Put && r.value.is_empty()));
}

#[test]
fn segments_roll_and_replay_in_order() {
    let (fs, afs) = new_fs();
    let sizes = many_sizes(60);
    let (log, pos) = write_log(&afs, 1, 300, 1, &sizes, 20);
    let last = log.number;
    drop(log);
    assert!(last >= 5, "expected several segments, got {last}");
    let expected: Vec<String> = (1..=last).map(|n| format!("{n:06}.log")).collect();
    assert_eq!(names(&fs), expected);
    for n in 1..last {
        let data = fs.read_file(&seg(n)).unwrap();
        assert!(
            data.len() >= 300,
            "segment {n} rolled before it was full: {} bytes",
            data.len()
        );
        assert_eq!(decode_segment_header(&seg(n), &data).unwrap(), (n, FLAG_PREALLOCATED));
        // Records never straddle segments.
        assert!(pos.iter().filter(|p| p.seg == n).all(|p| p.end <= data.len() as u64));
    }
    let (res, got) = replay(&fs, RecoveryMode::default());
    let report = res.unwrap();
    assert_eq!(got, ops_of(&pos));
    let want: Vec<Lsn> = (1..=sizes.iter().sum::<u64>()).collect();
    assert_eq!(lsns(&got), want, "LSNs replayed in order across segments");
    assert_eq!(report.next_segment, last + 1);
    assert_eq!(report.records, sizes.len() as u64);
}

#[test]
fn roll_makes_the_old_segment_durable() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 300, Vec::new()).unwrap();
    let mut written: Vec<(u64, Vec<Rec>)> = Vec::new();
    let mut lsn = 1;
    for i in 0..30u64 {
        let ops = group_ops(lsn, 1 + i % 3, 30);
        lsn += ops.len() as u64;
        log.append(&group_record(&ops), 0).unwrap(); // never synced explicitly
        written.push((log.number, ops));
        log.maybe_roll().unwrap();
    }
    let last = log.number;
    assert!(last >= 3);
    drop(log);
    fs.crash(CrashMode::DropUnsynced);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap();
    let want: Vec<Rec> = written
        .iter()
        .filter(|(s, _)| *s < last)
        .flat_map(|(_, ops)| ops.iter().cloned())
        .collect();
    assert_eq!(got, want, "every record of a rolled segment survives power loss");
}

/// Without syncs, the log hands its bytes to the device every WRITEBACK_BYTES, in contiguous
/// ranges from the segment's start (so the fsync at a roll has little left); after a sync the
/// hints start from the synced end.
#[test]
fn appends_start_writeback_every_writeback_bytes() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let chunk = vec![0u8; 100_000];
    for _ in 0..35 {
        log.append(&chunk, 1).unwrap();
    }
    let hints = fs.writebacks();
    let appended = log.len();
    assert_eq!(hints.len() as u64, appended / WRITEBACK_BYTES, "{hints:?}");
    let mut next = 0;
    for (path, off, len) in &hints {
        assert_eq!(path, &log.path);
        assert_eq!(*off, next, "contiguous");
        assert!(*len >= WRITEBACK_BYTES && *len < WRITEBACK_BYTES + 100_000, "{len}");
        next = off + len;
    }
    // After an fsync the next hint starts where the sync left off: no hint over clean pages.
    log.sync().unwrap();
    let synced_at = log.len();
    for _ in 0..11 {
        log.append(&chunk, 1).unwrap();
    }
    let after = &fs.writebacks()[hints.len()..];
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].1, synced_at, "{after:?}");
}

/// Torn tail: the newest segment cut at every byte inside its last record.
#[test]
fn torn_tail_is_truncated_at_every_offset() {
    let (fs, afs) = new_fs();
    let sizes = many_sizes(25);
    let (log, pos) = write_log(&afs, 1, 300, 1, &sizes, 20);
    let last_seg = log.number;
    drop(log);
    let last = pos.last().unwrap().clone();
    assert_eq!(last.seg, last_seg);
    assert!(last_seg > 1);
    let original = files(&fs);
    let keep = &pos[..pos.len() - 1];
    for cut in last.off + 1..last.end {
        let mut damaged = original.clone();
        set_file(&mut damaged, &seg(last_seg), |d| d.truncate(cut as usize));
        for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::PointInTime] {
            let fs = fs_with(&damaged);
            let (res, got) = replay(&fs, mode);
            let report = res.unwrap_or_else(|e| panic!("cut {cut} {mode:?}: {e}"));
            assert_eq!(got, ops_of(keep), "cut {cut} {mode:?}");
            assert_eq!(report.truncated_at, Some((seg(last_seg), last.off)), "cut {cut}");
            assert_eq!(report.max_lsn, keep.last().unwrap().ops.last().unwrap().lsn);
            assert_eq!(
                fs.read_file(&seg(last_seg)).unwrap().len() as u64,
                last.off,
                "cut {cut}: the torn record must be cut off the file"
            );
            // The truncation is durable, and the log can go on in a new segment.
            fs.crash(CrashMode::DropUnsynced);
            let afs: Arc<dyn FileSystem> = Arc::new(fs.clone());
            let next_lsn = report.max_lsn + 1;
            let (log, more) = write_log(&afs, report.next_segment, 300, next_lsn, &[2, 1], 5);
            drop(log);
            let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
            let report2 = res.unwrap_or_else(|e| panic!("cut {cut}: log continued after truncation: {e}"));
            assert!(report2.truncated_at.is_none());
            let mut want = ops_of(keep);
            want.extend(ops_of(&more));
            assert_eq!(got, want, "cut {cut}");
        }
        let fs = fs_with(&damaged);
        let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
        assert_corruption(&res, &seg(last_seg), last.off);
        assert!(lsns(&got).iter().all(|&l| l < last.ops[0].lsn));
        assert_eq!(
            fs.read_file(&seg(last_seg)).unwrap().len() as u64,
            cut,
            "absolute mode repairs nothing"
        );
    }
}

#[test]
fn torn_tail_is_truncated_on_a_real_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("redo");
    let fs: Arc<dyn FileSystem> = Arc::new(PosixFs);
    fs.create_dir_all(&dir).unwrap();
    let mut log = RedoLog::create(fs.clone(), dir.clone(), 1, 64 << 20, Vec::new()).unwrap();
    let mut ends = Vec::new();
    let mut all = Vec::new();
    for i in 0..5 {
        let ops = group_ops(1 + i * 2, 2, 100);
        log.append(&group_record(&ops), 0).unwrap();
        log.sync().unwrap();
        ends.push(log.len());
        all.extend(ops);
    }
    drop(log);
    let path = segment_path(&dir, 1);
    let set_len = |len: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len)
            .unwrap()
    };
    set_len(ends[4] - 50);
    let (res, got) = replay_dyn(fs.as_ref(), &dir, RecoveryMode::default());
    assert_eq!(res.unwrap().truncated_at, Some((path.clone(), ends[3])));
    assert_eq!(got, all[..8]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), ends[3]);
    // Zeros after the last record (of a preallocated segment) are its clean end, cut too.
    set_len(ends[3] + 4096);
    let (res, got) = replay_dyn(fs.as_ref(), &dir, RecoveryMode::default());
    assert_eq!(res.unwrap().truncated_at, None);
    assert_eq!(got, all[..8]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), ends[3]);
}

/// A flipped byte anywhere in a record that is not the newest segment's last one.
#[test]
fn flipped_byte_in_a_middle_record_is_corruption() {
    let (fs, afs) = new_fs();
    let sizes = many_sizes(25);
    let (log, pos) = write_log(&afs, 1, 300, 1, &sizes, 20);
    let last_seg = log.number;
    drop(log);
    let original = files(&fs);
    // A middle record of the first segment, one of the newest segment, and the last record of an
    // older segment (which, were it in the newest segment, would look like a torn tail).
    let in_first = pos.iter().position(|p| p.seg == 1).unwrap() + 1;
    let in_last = pos.iter().position(|p| p.seg == last_seg).unwrap();
    assert!(in_last + 1 < pos.len(), "need a record after it in the newest segment");
    let end_of_older = pos.iter().rposition(|p| p.seg == last_seg - 1).unwrap();
    for target in [in_first, in_last, end_of_older] {
        let p = &pos[target];
        for at in p.off..p.end {
            for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::AbsoluteConsistency] {
                let mut damaged = original.clone();
                set_file(&mut damaged, &seg(p.seg), |d| d[at as usize] ^= 0x20);
                let fs = fs_with(&damaged);
                let (res, got) = replay(&fs, mode);
                assert_corruption(&res, &seg(p.seg), p.off);
                assert!(
                    lsns(&got).iter().all(|&l| l < p.ops[0].lsn),
                    "record {target}, byte {at}: ops of or after the damaged record were replayed"
                );
                assert_eq!(files(&fs), damaged, "a refused recovery must not change the log");
            }
        }
    }
}

#[test]
fn torn_tail_in_an_older_segment_is_corruption() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(25), 20);
    drop(log);
    let last_of_first = pos.iter().rposition(|p| p.seg == 1).unwrap();
    let p = &pos[last_of_first];
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(1), |d| d.truncate(p.end as usize - 3));
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(1), p.off);
}

#[test]
fn damage_to_the_newest_segments_last_record() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 64 << 20, 1, &[2, 3, 4], 40);
    drop(log);
    let last = pos[2].clone();
    // A damaged header is not a torn write: corruption, in a version 1 segment and in a v2
    // one (a flipped bit is no lost sector: see `preallocate` for those).
    for at in last.off..last.off + RECORD_HEADER_SIZE as u64 {
        for v1 in [false, true] {
            let mut damaged = files(&fs);
            set_file(&mut damaged, &seg(1), |d| {
                if v1 {
                    preallocate::as_version_1(d);
                }
                d[at as usize] ^= 0x01;
            });
            let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
            assert_corruption(&res, &seg(1), last.off);
        }
    }
    // A payload checksum failure of the very last record is taken as a torn write.
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(1), |d| d[last.end as usize - 1] ^= 0x01);
    let fs2 = fs_with(&damaged);
    let (res, got) = replay(&fs2, RecoveryMode::default());
    assert_eq!(res.unwrap().truncated_at, Some((seg(1), last.off)));
    assert_eq!(got, ops_of(&pos[..2]));
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::AbsoluteConsistency);
    assert_corruption(&res, &seg(1), last.off);
}

#[test]
fn zeros_after_the_last_record_are_its_end() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(20), 20);
    let last_seg = log.number;
    drop(log);
    let end = pos.last().unwrap().end;
    assert_eq!(fs.read_file(&seg(last_seg)).unwrap().len() as u64, end);
    for zeros in [1usize, 23, 24, 25, 100, 4096] {
        let mut damaged = files(&fs);
        set_file(&mut damaged, &seg(last_seg), |d| d.resize(d.len() + zeros, 0));
        let fs = fs_with(&damaged);
        let (res, got) = replay(&fs, RecoveryMode::default());
        let report = res.unwrap_or_else(|e| panic!("{zeros} zeros: {e}"));
        assert_eq!(got, ops_of(&pos), "{zeros} zeros");
        assert_eq!(
            report.truncated_at, None,
            "zeros are the clean end of a preallocated segment"
        );
        assert_eq!(fs.read_file(&seg(last_seg)).unwrap().len() as u64, end);
    }
    // Zeros followed by a good record are a hole, not a tail.
    let extra = group_record(&group_ops(1000, 2, 5));
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(last_seg), |d| {
        d.resize(d.len() + 64, 0);
        d.extend_from_slice(&extra);
    });
    let (res, got) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(last_seg), end);
    assert!(lsns(&got).iter().all(|&l| l < 1000));
    // Zeros at the end of an older segment are damage too.
    let mut damaged = files(&fs);
    let end1 = pos.iter().filter(|p| p.seg == 1).map(|p| p.end).max().unwrap();
    set_file(&mut damaged, &seg(1), |d| d.resize(d.len() + 30, 0));
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(1), end1);
}

#[test]
fn short_newest_segment_is_a_cut_creation() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(12), 20);
    let last = log.number;
    drop(log);
    for len in [0usize, 1, 16, SEGMENT_HEADER_SIZE - 1] {
        let mut damaged = files(&fs);
        damaged.push((seg(last + 1), encode_segment_header(last + 1, 0)[..len].to_vec()));
        let fs = fs_with(&damaged);
        let (res, got) = replay(&fs, RecoveryMode::default());
        let report = res.unwrap_or_else(|e| panic!("len {len}: {e}"));
        assert_eq!(got, ops_of(&pos));
        assert_eq!(report.truncated_at, Some((seg(last + 1), 0)));
        assert!(!fs.exists(&seg(last + 1)), "the cut segment is removed");
        assert!(report.next_segment > last + 1, "its number is not reused");
        let (res, _) = replay(&fs_with(&damaged), RecoveryMode::AbsoluteConsistency);
        assert_corruption(&res, &seg(last + 1), 0);
    }
    // A short segment that is not the newest is corruption.
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(2), |d| d.truncate(10));
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(2), 0);
}

#[test]
fn point_in_time_stops_at_the_first_damage_and_drops_later_segments() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(40), 20);
    let last = log.number;
    drop(log);
    assert!(last >= 4);
    let k = pos.iter().position(|p| p.seg == 2).unwrap() + 1;
    let p = pos[k].clone();
    assert_eq!(p.seg, 2);
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(2), |d| {
        d[p.off as usize + RECORD_HEADER_SIZE + 2] ^= 0xff
    });
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(2), p.off);

    let fs = fs_with(&damaged);
    let (res, got) = replay(&fs, RecoveryMode::PointInTime);
    let report = res.unwrap();
    assert_eq!(got, ops_of(&pos[..k]), "exactly the records before the damage");
    assert_eq!(report.truncated_at, Some((seg(2), p.off)));
    assert_eq!(report.max_lsn, p.ops[0].lsn - 1);
    assert_eq!(names(&fs), ["000001.log", "000002.log"], "later segments are deleted");
    assert_eq!(fs.read_file(&seg(2)).unwrap().len() as u64, p.off);
    // The repair is durable and the log goes on from there.
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), ["000001.log", "000002.log"], "deletions are durable");
    let afs: Arc<dyn FileSystem> = Arc::new(fs.clone());
    assert!(report.next_segment > 2);
    let (log, more) = write_log(&afs, report.next_segment, 300, report.max_lsn + 1, &[3], 5);
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap();
    let mut want = ops_of(&pos[..k]);
    want.extend(ops_of(&more));
    assert_eq!(got, want);
}

#[test]
fn point_in_time_stops_at_a_damaged_segment_header() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(40), 20);
    drop(log);
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(3), |d| d[5] ^= 0x01);
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(3), 0);
    let fs = fs_with(&damaged);
    let (res, got) = replay(&fs, RecoveryMode::PointInTime);
    let report = res.unwrap_or_else(|e| panic!("point-in-time must recover the prefix before segment 3: {e}"));
    let before: Vec<Pos> = pos.iter().filter(|p| p.seg < 3).cloned().collect();
    assert_eq!(got, ops_of(&before));
    assert_eq!(names(&fs), ["000001.log", "000002.log"]);
    assert!(report.truncated_at.is_some());
}

/// Live data: `(table, key)` -> `(lsn, value)` of the newest put.
type Live = BTreeMap<(u32, Vec<u8>), (Lsn, Vec<u8>)>;

/// Live data of `ops` replayed in LSN order.
fn live(ops: &[Rec]) -> Live {
    let mut m = BTreeMap::new();
    let mut sorted = ops.to_vec();
    sorted.sort_by_key(|r| r.lsn);
    for r in sorted {
        match r.kind {
            ValueKind::Put => {
                m.insert((r.table, r.key), (r.lsn, r.value));
            }
            ValueKind::Delete => {
                m.remove(&(r.table, r.key));
            }
        }
    }
    m
}

fn live_as_rewrite(m: &Live) -> Vec<Rec> {
    m.iter()
        .map(|((table, key), (lsn, value))| Rec {
            lsn: *lsn,
            kind: ValueKind::Put,
            table: *table,
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// Writes a multi-segment log whose keys are overwritten and deleted, so its live data is
/// smaller than its history.
fn log_with_history(afs: &Arc<dyn FileSystem>) -> (RedoLog, Vec<Rec>) {
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 300, Vec::new()).unwrap();
    let mut all = Vec::new();
    let mut lsn = 1;
    for i in 0..40u64 {
        let ops: Vec<Rec> = (0..3)
            .map(|j| {
                let k = format!("key{}", (i * 3 + j) % 17).into_bytes();
                let rec = Rec {
                    lsn: lsn + j,
                    kind: if (i + j) % 9 == 0 {
                        ValueKind::Delete
                    } else {
                        ValueKind::Put
                    },
                    table: 1 + (j as u32 % 2),
                    key: k,
                    value: Vec::new(),
                };
                Rec {
                    value: if rec.kind == ValueKind::Put {
                        value(lsn + j, 10)
                    } else {
                        Vec::new()
                    },
                    ..rec
                }
            })
            .collect();
        lsn += 3;
        log.append(&group_record(&ops), 0).unwrap();
        log.sync().unwrap();
        log.maybe_roll().unwrap();
        all.extend(ops);
    }
    (log, all)
}

/// Rewrites `log` into a superseding segment holding `recs` as rewrite records of at most 4 ops.
fn rewrite(log: RedoLog, recs: &[Rec]) -> Result<()> {
    log.rewrite_and_retire(&mut |emit| {
        for chunk in recs.chunks(4) {
            emit(&rewrite_record(chunk))?;
        }
        Ok(())
    })
}

#[test]
fn rewrite_supersedes_and_removes_older_segments() {
    let (fs, afs) = new_fs();
    let (log, history) = log_with_history(&afs);
    let last = log.number;
    assert!(last >= 3);
    let want = live(&history);
    let rewritten = live_as_rewrite(&want);
    rewrite(log, &rewritten).unwrap();
    assert_eq!(
        names(&fs),
        [format!("{:06}.log", last + 1)],
        "older segments and the .tmp are gone"
    );
    // Durably so.
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), [format!("{:06}.log", last + 1)]);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    let report = res.unwrap();
    assert_eq!(got, rewritten, "only the rewrite records are replayed");
    assert_eq!(live(&got), want);
    assert_eq!(report.max_lsn, rewritten.iter().map(|r| r.lsn).max().unwrap());
    assert_eq!(report.next_segment, last + 2);
    // New group records after the rewrite segment follow on.
    let (log, more) = write_log(&afs, report.next_segment, 300, report.max_lsn + 1, &[2, 2], 5);
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap();
    let mut all = rewritten.clone();
    all.extend(ops_of(&more));
    assert_eq!(got, all);
}

#[test]
fn superseding_segment_makes_leftover_older_segments_obsolete() {
    let (fs, afs) = new_fs();
    let (log, history) = log_with_history(&afs);
    let last = log.number;
    let want = live(&history);
    let rewritten = live_as_rewrite(&want);
    // The removal of the older segments fails and then the power goes: they come back.
    fs.fail_after(FaultOp::Remove, Some("redo"), 1, libc::EIO);
    let err = rewrite(log, &rewritten).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    fs.crash(CrashMode::DropUnsynced);
    let mut expected_names: Vec<String> = (1..=last + 1).map(|n| format!("{n:06}.log")).collect();
    assert_eq!(names(&fs), expected_names);
    // Damage in an obsolete segment's records does not matter: it is never replayed.
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(2), |d| {
        let at = d.len() - 5;
        d[at] ^= 0xff;
    });
    let fs = fs_with(&damaged);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap();
    assert_eq!(got, rewritten);
    expected_names.drain(..last as usize);
    assert_eq!(names(&fs), expected_names, "obsolete segments are removed by recovery");
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), expected_names, "durably");
}

/// A superseding segment is complete and fsynced before it gets its final name, so damage to
/// its last record cannot be a torn write: it must be refused, not truncated away (after a clean
/// close the superseding segment is the newest one and holds all the live data).
#[test]
fn damaged_superseding_segment_is_corruption_not_a_torn_tail() {
    let (fs, afs) = new_fs();
    let (log, history) = log_with_history(&afs);
    let number = log.number + 1;
    let rewritten = live_as_rewrite(&live(&history));
    rewrite(log, &rewritten).unwrap();
    let chunks: Vec<&[Rec]> = rewritten.chunks(4).collect();
    let last_off = SEGMENT_HEADER_SIZE
        + chunks[..chunks.len() - 1]
            .iter()
            .map(|c| rewrite_record(c).len())
            .sum::<usize>();
    let clean = files(&fs);
    let len = clean[0].1.len();
    assert_eq!(clean[0].0, seg(number));
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let damages: [(&str, Damage); 3] = [
        (
            "payload byte flipped",
            Box::new(move |d: &mut Vec<u8>| d[len - 3] ^= 0x08),
        ),
        ("cut short", Box::new(move |d: &mut Vec<u8>| d.truncate(len - 3))),
        ("zeroed end", Box::new(move |d: &mut Vec<u8>| d[len - 8..].fill(0))),
    ];
    for (what, damage) in &damages {
        let mut damaged = clean.clone();
        set_file(&mut damaged, &seg(number), |d| damage(d));
        let fs = fs_with(&damaged);
        let (res, _) = replay(&fs, RecoveryMode::TolerateCorruptedTail);
        assert!(
            matches!(&res, Err(Error::Corruption { path, offset, .. }) if *path == seg(number) && *offset == last_off as u64),
            "{what}: expected corruption of the superseding segment at {last_off}, got {res:?}"
        );
        // Point-in-time keeps the records before the damage.
        let (res, got) = replay(&fs_with(&damaged), RecoveryMode::PointInTime);
        res.unwrap();
        assert_eq!(got, rewritten[..(chunks.len() - 1) * 4], "{what}");
    }
}

/// What a recovery replayed must survive a power cut right after it: the bytes may have come
/// from the OS cache (unsynced writes of a process that crashed), and new records will be
/// written after them.
#[test]
fn recovered_records_are_durable() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let mut all = Vec::new();
    for i in 0..5 {
        let ops = group_ops(1 + 2 * i, 2, 10);
        log.append(&group_record(&ops), 0).unwrap(); // a process crash before any fsync
        all.extend(ops);
    }
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::default());
    let report = res.unwrap();
    assert_eq!(got, all);
    // The engine goes on with a new segment; then the power goes.
    let (log, more) = write_log(&afs, report.next_segment, 64 << 20, report.max_lsn + 1, &[1], 0);
    drop(log);
    fs.crash(CrashMode::DropUnsynced);
    let (res, got) = replay(&fs, RecoveryMode::default());
    res.unwrap();
    all.extend(ops_of(&more));
    assert_eq!(
        lsns(&got),
        lsns(&all),
        "records replayed once were lost by a later power cut, leaving a hole"
    );
}

/// A rewrite that fails at any file-system step, then power loss: recovery finds the same live
/// data (from the old segments or from the rewrite), and no `.tmp`.
#[test]
fn failed_rewrite_then_crash_keeps_the_data() {
    let ops = [
        FaultOp::Create,
        FaultOp::WriteAt,
        FaultOp::SetLen,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
        FaultOp::Remove,
    ];
    let mut fired = 0;
    for op in ops {
        for after in 0..4 {
            for crash in [false, true] {
                let (fs, afs) = new_fs();
                let (log, history) = log_with_history(&afs);
                let want = live(&history);
                let before = fs.faults_fired();
                fs.fail_after(op, Some("redo"), after, libc::ENOSPC);
                let res = rewrite(log, &live_as_rewrite(&want));
                if fs.faults_fired() > before {
                    fired += 1;
                    let e = res.expect_err("an injected fault must fail the rewrite");
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{op:?} {after}: {e}");
                } else {
                    res.unwrap();
                }
                fs.clear_faults();
                if crash {
                    fs.crash(CrashMode::DropUnsynced);
                }
                let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
                res.unwrap_or_else(|e| panic!("{op:?} after {after} crash {crash}: {e}"));
                assert_eq!(live(&got), want, "{op:?} after {after} crash {crash}");
                assert!(
                    names(&fs).iter().all(|n| !n.ends_with(".tmp")),
                    "{op:?} after {after}: {:?}",
                    names(&fs)
                );
            }
        }
    }
    assert!(fired >= 12, "faults fired only {fired} times");
}

#[test]
fn leftover_tmp_segment_is_removed() {
    let (fs, afs) = new_fs();
    let (log, pos) = write_log(&afs, 1, 300, 1, &many_sizes(10), 20);
    let last = log.number;
    drop(log);
    let tmp = dir().join(format!("{:06}.log.tmp", last + 7));
    fs.write_file(&tmp, b"half a rewrite, garbage".to_vec());
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    let report = res.unwrap();
    assert!(!fs.exists(&tmp));
    assert_eq!(got, ops_of(&pos));
    assert_eq!(report.next_segment, last + 1);
}

#[test]
fn lsn_going_backward_is_corruption() {
    // (first LSNs of the records, index of the offending one)
    let cases: [(&[Lsn], usize); 4] = [
        (&[1, 4, 4], 2),    // the same LSN again
        (&[1, 4, 2], 2),    // backward, inside the previous record's range
        (&[1, 4, 7, 1], 3), // the first record repeated
        (&[10, 13, 12], 2), // overlapping the previous record
    ];
    for (firsts, bad) in cases {
        let (fs, afs) = new_fs();
        let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
        let mut offs = Vec::new();
        for &f in firsts {
            offs.push(log.len());
            log.append(&group_record(&group_ops(f, 3, 5)), 0).unwrap();
        }
        // A good record after it, so the bad one is not the tail.
        log.append(&group_record(&group_ops(100, 1, 5)), 0).unwrap();
        log.sync().unwrap();
        drop(log);
        for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::AbsoluteConsistency] {
            let (res, got) = replay(&fs, mode);
            assert_corruption(&res, &seg(1), offs[bad]);
            assert_eq!(got.len(), bad * 3, "{firsts:?} {mode:?}");
        }
    }
    // Across segments.
    let (fs, afs) = new_fs();
    let (log, _) = write_log(&afs, 1, 300, 50, &many_sizes(10), 20);
    let next = log.number + 1;
    drop(log);
    let (log, _) = write_log(&afs, next, 300, 10, &[2], 5);
    drop(log);
    let (res, _) = replay(&fs, RecoveryMode::default());
    assert_corruption(&res, &seg(next), SEGMENT_HEADER_SIZE as u64);
    // A gap (LSNs used by writes that skipped the log) is fine.
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    log.append(&group_record(&group_ops(1, 2, 5)), 0).unwrap();
    log.append(&group_record(&group_ops(9, 2, 5)), 0).unwrap();
    log.sync().unwrap();
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    assert_eq!(res.unwrap().max_lsn, 10);
    assert_eq!(lsns(&got), [1, 2, 9, 10]);
}

#[test]
fn segment_header_damage_is_corruption() {
    let (fs, afs) = new_fs();
    let (log, _) = write_log(&afs, 1, 300, 1, &many_sizes(20), 20);
    let last = log.number;
    drop(log);
    // Bytes 0..28: magic, version, flags, number and the header CRC.
    for n in [1, last] {
        for at in 0..28 {
            for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::AbsoluteConsistency] {
                let mut damaged = files(&fs);
                set_file(&mut damaged, &seg(n), |d| d[at] ^= 0x04);
                let fs = fs_with(&damaged);
                let (res, got) = replay(&fs, mode);
                assert_corruption(&res, &seg(n), 0);
                assert!(
                    got.is_empty(),
                    "segment {n} byte {at}: headers are all checked before any replay"
                );
                assert_eq!(files(&fs), damaged);
            }
        }
    }
    // A valid header that names another segment: a file copied or renamed by hand.
    let mut damaged = files(&fs);
    let first = damaged[0].1.clone();
    set_file(&mut damaged, &seg(2), |d| *d = first);
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(2), 16);
    // A valid header with the wrong magic.
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(1), |d| {
        d[0..8].copy_from_slice(b"NOTREDO\0");
        let crc = crate::coding::mask_crc(crc32c::crc32c(&d[0..24]));
        d[24..28].copy_from_slice(&crc.to_le_bytes());
    });
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::default());
    assert_corruption(&res, &seg(1), 0);
}

#[test]
fn newer_format_version_is_unsupported() {
    let (fs, afs) = new_fs();
    let (log, _) = write_log(&afs, 1, 300, 1, &many_sizes(20), 20);
    let last = log.number;
    drop(log);
    for n in [1, last] {
        let mut newer = files(&fs);
        set_file(&mut newer, &seg(n), |d| {
            d[8..12].copy_from_slice(&(REDO_FORMAT_VERSION + 1).to_le_bytes());
            let crc = crate::coding::mask_crc(crc32c::crc32c(&d[0..24]));
            d[24..28].copy_from_slice(&crc.to_le_bytes());
        });
        for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::PointInTime] {
            let fs = fs_with(&newer);
            let (res, got) = replay(&fs, mode);
            match res {
                Err(Error::UnsupportedFormat { path, found, supported }) => {
                    assert_eq!(
                        (path, found, supported),
                        (seg(n), REDO_FORMAT_VERSION + 1, REDO_FORMAT_VERSION)
                    );
                }
                other => panic!("segment {n} {mode:?}: expected UnsupportedFormat, got {other:?}"),
            }
            assert!(got.is_empty());
            assert_eq!(files(&fs), newer, "nothing of a newer log is changed");
        }
    }
}

#[test]
fn malformed_record_with_valid_checksums_is_corruption() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    log.append(&group_record(&group_ops(1, 2, 5)), 0).unwrap();
    let bad_at = log.len();
    // An op whose key length runs past the payload.
    let mut payload = Vec::new();
    put_op(&mut payload, ValueKind::Put, 1, b"ok", b"fine");
    let op2 = payload.len();
    payload.extend_from_slice(&[1, 1, 50, b'x']);
    let mut rec = Vec::new();
    encode_record(&mut rec, RECORD_GROUP, 3, &payload, crc32c::crc32c(&payload));
    log.append(&rec, 0).unwrap();
    log.append(&group_record(&group_ops(5, 1, 5)), 0).unwrap();
    log.sync().unwrap();
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::default());
    assert_corruption(&res, &seg(1), bad_at + (RECORD_HEADER_SIZE + op2) as u64);
    assert_eq!(lsns(&got), [1, 2], "no op of the malformed record is applied");

    // An unknown record type.
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    log.append(&group_record(&group_ops(1, 2, 5)), 0).unwrap();
    let bad_at = log.len();
    let mut rec = Vec::new();
    let payload = group_record(&group_ops(3, 1, 5))[RECORD_HEADER_SIZE..].to_vec();
    encode_record(&mut rec, 9, 3, &payload, crc32c::crc32c(&payload));
    log.append(&rec, 0).unwrap();
    log.append(&group_record(&group_ops(5, 1, 5)), 0).unwrap();
    log.sync().unwrap();
    drop(log);
    let (res, got) = replay(&fs, RecoveryMode::default());
    assert_corruption(&res, &seg(1), bad_at + RECORD_HEADER_SIZE as u64);
    assert_eq!(lsns(&got), [1, 2]);
}

#[test]
fn retire_deletes_only_segments_wholly_below_the_needed_lsn() {
    let afs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = afs.clone();
    fs.create_dir_all(&dir()).unwrap();
    let mut log = RedoLog::create(fs.clone(), dir(), 1, 64, Vec::new()).unwrap();
    let segments = log.segments();
    // Each append fills the segment (size 64), so every maybe_roll starts a new one.
    for first in [1u64, 3, 5] {
        let ops = group_ops(first, 2, 5);
        log.append(&group_record(&ops), first + 1).unwrap();
        log.maybe_roll().unwrap();
    }
    assert_eq!(segments.len(), 3);
    // Segment 1 holds LSNs 1..=2, segment 2 up to 4, segment 3 up to 6.
    assert_eq!(segments.retire(fs.as_ref(), &dir(), 4).unwrap(), 1);
    assert_eq!(segments.retire(fs.as_ref(), &dir(), 4).unwrap(), 0);
    assert!(!fs.exists(&dir().join("000001.log")));
    assert!(fs.exists(&dir().join("000002.log")));
    assert_eq!(segments.retire(fs.as_ref(), &dir(), 100).unwrap(), 2);
    assert!(fs.exists(&dir().join("000004.log")), "the open segment stays");
    log.sync().unwrap();
    // Recovery reports what is left, with the LSN bound of each segment.
    let report = recover(fs.as_ref(), &dir(), RecoveryMode::default(), &mut |_| Ok(())).unwrap();
    assert_eq!(report.segments, vec![(4, 0)]);
}

mod preallocate;
