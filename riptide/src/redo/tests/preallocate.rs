//! Tests of the zero-filled space ahead of durable commits (format v2, `FLAG_PREALLOCATED`):
//! a segment with durable commits is zero-filled ahead of its appends and replays cleanly from
//! a zero tail; without durable commits (or with preallocation off) nothing is zero-filled; a
//! rolled or closed segment is cut to its records, so zeros at the end of an older segment
//! stay damage; a version 1 segment still treats zeros as a torn tail; and a crash at any
//! point (with torn positional writes) keeps every synced record and replays a prefix.

use super::*;
use rand::{Rng, SeedableRng};

/// Appends group records of `sizes[i]` ops (LSNs from 1) through the log, each followed by a
/// commit's sync; returns the ops written.
fn commit_all(log: &mut RedoLog, sizes: &[u64], pad: usize) -> Vec<Rec> {
    let mut all = Vec::new();
    let mut lsn = 1;
    for &n in sizes {
        let ops = group_ops(lsn, n, pad);
        lsn += n;
        log.append(&group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
        log.maybe_roll().unwrap();
        all.extend(ops);
    }
    all
}

/// Rewrites a segment header as format version 1 without flags (a segment of an older build).
fn as_version_1(d: &mut [u8]) {
    d[8..12].copy_from_slice(&1u32.to_le_bytes());
    d[12..16].copy_from_slice(&0u32.to_le_bytes());
    let crc = crate::coding::mask_crc(crc32c::crc32c(&d[0..24]));
    d[24..28].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn durable_commits_zero_fill_ahead_and_replay_from_the_zero_tail() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let want = commit_all(&mut log, &many_sizes(200), 40);
    let end = log.len();
    let on_disk = fs.read_file(&seg(1)).unwrap();
    assert!(
        on_disk.len() as u64 >= end + PREALLOCATE_BYTES / 2,
        "{} vs {end}",
        on_disk.len()
    );
    assert!((on_disk.len() as u64).is_multiple_of(PREALLOCATE_BYTES));
    assert!(all_zero(&on_disk[end as usize..]));
    drop(log);
    fs.crash(CrashMode::DropUnsynced);
    for mode in [
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::TolerateCorruptedTail,
        RecoveryMode::PointInTime,
    ] {
        let fs = fs_with(&files(&fs));
        let (res, got) = replay(&fs, mode);
        let report = res.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(got, want, "{mode:?}");
        assert_eq!(report.truncated_at, None, "a zero tail is not damage ({mode:?})");
        assert_eq!(
            fs.read_file(&seg(1)).unwrap().len() as u64,
            end,
            "recovery cuts the zeros"
        );
    }
}

#[test]
fn without_durable_commits_or_with_preallocation_off_nothing_is_zero_filled() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    for i in 0..50 {
        log.append(&group_record(&group_ops(1 + i * 3, 3, 100)), 0).unwrap();
        log.sync().unwrap(); // a flush's sync, not a commit's
    }
    assert_eq!(fs.read_file(&seg(1)).unwrap().len() as u64, log.len());
    drop(log);

    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new())
        .unwrap()
        .with_preallocation(false);
    commit_all(&mut log, &many_sizes(50), 100);
    assert_eq!(fs.read_file(&seg(1)).unwrap().len() as u64, log.len());
}

#[test]
fn a_rolled_or_closed_segment_ends_at_its_last_record() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 256 << 10, Vec::new()).unwrap();
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    let mut lsn = 1;
    while log.number < 4 {
        let ops = group_ops(lsn, 20, 500);
        lsn += 20;
        log.append(&group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
        ends.insert(log.number, log.len());
        log.maybe_roll().unwrap();
    }
    // The first commit in a segment turns zero-filling on; the next append fills ahead.
    for _ in 0..2 {
        let ops = group_ops(lsn, 20, 500);
        lsn += 20;
        log.append(&group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
    }
    ends.insert(log.number, log.len());
    for n in 1..4 {
        let data = fs.read_file(&seg(n)).unwrap();
        assert_eq!(
            data.len() as u64,
            ends[&n],
            "segment {n} was cut to its records at the roll"
        );
    }
    assert!(
        fs.read_file(&seg(4)).unwrap().len() as u64 > log.len(),
        "the newest is zero-filled ahead"
    );
    log.close(0).unwrap();
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(
        fs.read_file(&seg(4)).unwrap().len() as u64,
        ends[&4],
        "close cuts the zeros durably"
    );
    let (res, got) = replay(&fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap();
    assert_eq!(got.len() as u64, lsn - 1);
}

#[test]
fn zeros_in_a_version_1_segment_are_still_a_torn_tail() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let want = commit_all(&mut log, &many_sizes(30), 10);
    let end = log.len();
    drop(log);
    let mut old = files(&fs);
    set_file(&mut old, &seg(1), |d| as_version_1(d));
    let fs = fs_with(&old);
    let (res, got) = replay(&fs, RecoveryMode::TolerateCorruptedTail);
    assert_eq!(res.unwrap().truncated_at, Some((seg(1), end)));
    assert_eq!(got, want);
    let (res, _) = replay(&fs_with(&old), RecoveryMode::AbsoluteConsistency);
    assert_corruption(&res, &seg(1), end);
}

#[test]
fn a_bad_header_before_the_zeros_is_a_torn_write_not_a_clean_end() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let want = commit_all(&mut log, &many_sizes(30), 10);
    let end = log.len() as usize;
    drop(log);
    let mut damaged = files(&fs);
    set_file(&mut damaged, &seg(1), |d| d[end + 9] = 0x5a);
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::AbsoluteConsistency);
    assert_corruption(&res, &seg(1), end as u64);
    // The default mode cuts it: a header followed only by zeros is a torn write.
    let (res, got) = replay(&fs_with(&damaged), RecoveryMode::TolerateCorruptedTail);
    assert_eq!(res.unwrap().truncated_at, Some((seg(1), end as u64)));
    assert_eq!(got, want);
    // Non-zero bytes after it are damage, not a torn write.
    set_file(&mut damaged, &seg(1), |d| d[end + 4000] = 1);
    let (res, _) = replay(&fs_with(&damaged), RecoveryMode::TolerateCorruptedTail);
    assert_corruption(&res, &seg(1), end as u64);
}

/// Random commits, flush syncs and unsynced appends across rolls, then a crash that keeps a
/// random prefix of the unsynced writes (torn ones included): recovery never fails in the
/// default mode, replays a prefix of what was appended, and keeps everything synced.
#[test]
fn a_crash_anywhere_keeps_every_synced_record() {
    for seed in 0..300u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (fs, afs) = new_fs();
        let mut log = RedoLog::create(afs.clone(), dir(), 1, 96 << 10, Vec::new()).unwrap();
        let mut appended: Vec<Rec> = Vec::new();
        let mut synced = 0;
        let mut lsn = 1;
        for _ in 0..rng.random_range(1..120) {
            let n = rng.random_range(1..8);
            let ops = group_ops(lsn, n, rng.random_range(0..400));
            lsn += n;
            log.append(&group_record(&ops), lsn - 1).unwrap();
            appended.extend(ops);
            match rng.random_range(0..4) {
                0 | 1 => log.sync_for_commit().unwrap(),
                2 => log.sync().unwrap(),
                _ => continue,
            }
            synced = appended.len();
            log.maybe_roll().unwrap();
        }
        drop(log);
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        let (res, got) = replay(&fs, RecoveryMode::TolerateCorruptedTail);
        res.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            got.len() >= synced,
            "seed {seed}: {} replayed, {synced} synced",
            got.len()
        );
        assert_eq!(got[..], appended[..got.len()], "seed {seed}");
        // And the recovered log is clean: a second recovery agrees in the strictest mode.
        let (res, again) = replay(&fs, RecoveryMode::AbsoluteConsistency);
        res.unwrap_or_else(|e| panic!("seed {seed}, second recovery: {e}"));
        assert_eq!(again, got, "seed {seed}");
    }
}
