//! Tests of the zero-filled space ahead of durable commits (format v2, `FLAG_PREALLOCATED`):
//! a segment with durable commits is zero-filled ahead of its appends and replays cleanly from
//! a zero tail; without durable commits (or with preallocation off) nothing is zero-filled; a
//! rolled or closed segment is cut to its records, so zeros at the end of an older segment
//! stay damage; a version 1 segment still treats zeros as a torn tail; a crash at any point
//! (torn positional writes, or any subset of the sectors in flight) keeps every synced record
//! and replays a prefix; and damage to synced bytes is still corruption when a later record
//! proves they were synced.

use super::*;
use crate::redo::dump;
use crate::redo::record::synced_at_least;
use rand::{Rng, SeedableRng};

/// Appends group records of `sizes[i]` ops (LSNs from 1) through the log, each followed by a
/// commit's sync; returns the ops written.
fn commit_all(log: &mut RedoLog, sizes: &[u64], pad: usize) -> Vec<Rec> {
    let mut all = Vec::new();
    let mut lsn = 1;
    for &n in sizes {
        let ops = group_ops(lsn, n, pad);
        lsn += n;
        log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
        log.maybe_roll().unwrap();
        all.extend(ops);
    }
    all
}

/// Rewrites a segment header as format version 1 without flags (a segment of an older build).
pub(super) fn as_version_1(d: &mut [u8]) {
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
    let mut log = RedoLog::create_with(afs.clone(), dir(), 1, 64 << 20, Vec::new(), false).unwrap();
    commit_all(&mut log, &many_sizes(50), 100);
    let data = fs.read_file(&seg(1)).unwrap();
    assert_eq!(data.len() as u64, log.len());
    assert_eq!(
        decode_segment_header(&seg(1), &data).unwrap(),
        (1, 0),
        "no PREALLOCATED flag"
    );
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
        log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
        ends.insert(log.number, log.len());
        log.maybe_roll().unwrap();
    }
    // The first commit in a segment turns zero-filling on; the next append fills ahead.
    for _ in 0..2 {
        let ops = group_ops(lsn, 20, 500);
        lsn += 20;
        log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
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
    let newest = fs.read_file(&seg(4)).unwrap().len() as u64;
    assert!(newest > log.len(), "the newest is zero-filled ahead");
    assert!(newest <= 256 << 10, "but not past the segment size: {newest}");
    // `riptide inspect` sees the zeros as the newest segment's end, not as damage.
    let dumps = dump(&fs, &dir()).unwrap();
    assert_eq!(dumps.len(), 4);
    assert!(dumps.iter().all(|d| d.damage.is_none()), "{dumps:?}");
    assert_eq!(dumps[3].zeros_from, Some(log.len()));
    assert!(dumps[..3].iter().all(|d| d.zeros_from.is_none()));
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
    // So are stray bytes after it: no record after them proves they were ever synced.
    set_file(&mut damaged, &seg(1), |d| d[end + 4000] = 1);
    let (res, got) = replay(&fs_with(&damaged), RecoveryMode::TolerateCorruptedTail);
    assert_eq!(res.unwrap().truncated_at, Some((seg(1), end as u64)));
    assert_eq!(got, want);
}

/// Random commits, flush syncs and unsynced appends across rolls, then a crash that keeps a
/// random prefix of the unsynced writes (torn ones included): recovery never fails in the
/// default mode, replays a prefix of what was appended, and keeps everything synced.
#[test]
fn a_crash_anywhere_keeps_every_synced_record() {
    for seed in 0..300u64 {
        let (fs, afs) = new_fs();
        let (log, appended, synced) = random_history(&afs, seed, 96 << 10);
        drop(log);
        fs.crash(CrashMode::KeepRandomPrefix { seed });
        recover_after_crash(&fs, seed, &appended, synced);
    }
}

/// Recovers in the default mode after a crash: it must succeed, replay a prefix of `appended`
/// holding at least the `synced` first ops, and leave a log that the strictest mode replays
/// the same. Returns the first recovery's report.
fn recover_after_crash(fs: &FaultFs, seed: u64, appended: &[Rec], synced: usize) -> RecoveryReport {
    let (res, got) = replay(fs, RecoveryMode::TolerateCorruptedTail);
    let report = res.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert!(
        got.len() >= synced,
        "seed {seed}: {} replayed, {synced} synced",
        got.len()
    );
    assert_eq!(got[..], appended[..got.len()], "seed {seed}");
    let (res, again) = replay(fs, RecoveryMode::AbsoluteConsistency);
    res.unwrap_or_else(|e| panic!("seed {seed}, second recovery: {e}"));
    assert_eq!(again, got, "seed {seed}");
    report
}

/// Records appended (one to three per write) and synced at random; returns the log, every op
/// appended and how many of them were synced.
fn random_history(afs: &Arc<dyn FileSystem>, seed: u64, segment_size: u64) -> (RedoLog, Vec<Rec>, usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut log = RedoLog::create(afs.clone(), dir(), 1, segment_size, Vec::new()).unwrap();
    let mut appended: Vec<Rec> = Vec::new();
    let mut synced = 0;
    let mut lsn = 1;
    for _ in 0..rng.random_range(1..120) {
        // One write of one to three records, as a flush round of several groups.
        let mut buf = Vec::new();
        for _ in 0..rng.random_range(1..4) {
            let n = rng.random_range(1..8);
            let ops = group_ops(lsn, n, rng.random_range(0..1500));
            lsn += n;
            buf.extend(group_record(&ops));
            appended.extend(ops);
        }
        log.append_records(&mut buf, lsn - 1).unwrap();
        match rng.random_range(0..4) {
            0 | 1 => log.sync_for_commit().unwrap(),
            2 => log.sync().unwrap(),
            _ => continue,
        }
        synced = appended.len();
        log.maybe_roll().unwrap();
    }
    (log, appended, synced)
}

/// A power cut that keeps any subset of the sectors of the unsynced writes (later records
/// whole where earlier ones lost a sector): recovery in the default mode never calls it
/// corruption, replays a prefix of what was appended, and keeps everything synced.
#[test]
fn a_power_cut_with_holes_in_the_unsynced_writes_keeps_every_synced_record() {
    let mut holes = 0;
    for seed in 0..400u64 {
        let (fs, afs) = new_fs();
        let (log, appended, synced) = random_history(&afs, seed, 256 << 10);
        drop(log);
        fs.crash(CrashMode::KeepRandomSectors { seed });
        if recover_after_crash(&fs, seed, &appended, synced).truncated_at.is_some() {
            holes += 1;
        }
    }
    assert!(holes > 20, "only {holes} crashes left damage to cut");
}

/// In the newest preallocated segment: a lost sector (zeros) in records written after the last
/// sync, with good records after it, is a torn tail; the same in records that a later record
/// proves synced is corruption; and a flipped byte (no lost sector) is corruption anywhere but
/// in the very last record's payload.
#[test]
fn lost_sectors_are_torn_only_where_nothing_proves_them_synced() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
    let mut lsn = 1;
    let mut starts = Vec::new();
    let mut all = Vec::new();
    for i in 0..40 {
        let ops = group_ops(lsn, 3, 400);
        lsn += 3;
        starts.push((log.len() as usize, all.len()));
        log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
        all.extend(ops);
        // The last eight records go in without a sync, as a crash would find them.
        if i < 32 {
            log.sync_for_commit().unwrap();
        }
    }
    let end = log.len() as usize;
    drop(log);
    let clean = files(&fs);
    // The sector holding byte `at` as it was synced: zeros after the synced end.
    let synced_end = starts[32].0;
    let lose_sector = |d: &mut Vec<u8>, at: usize| {
        let sector = at / 512 * 512;
        let from = sector.max(synced_end);
        d[from..sector + 512].fill(0);
    };
    let replay_with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut damaged = clean.clone();
        set_file(&mut damaged, &seg(1), |d| f(d));
        let fs = fs_with(&damaged);
        replay(&fs, RecoveryMode::TolerateCorruptedTail)
    };
    for k in [32usize, 34, 38] {
        for at in [starts[k].0, starts[k].0 + 30, starts[k].0 + 300] {
            let (res, got) = replay_with(&|d| lose_sector(d, at));
            let cut = res.unwrap_or_else(|e| panic!("record {k}, sector at {at}: {e}"));
            // The cut is at the first record whose bytes the lost sector took.
            let from = (at / 512 * 512).max(synced_end);
            let first = starts.iter().rposition(|&(s, _)| s <= from).unwrap();
            assert_eq!(
                cut.truncated_at,
                Some((seg(1), starts[first].0 as u64)),
                "record {k} at {at}"
            );
            assert_eq!(got, all[..starts[first].1]);
        }
    }
    // Zeros in synced records, looking just like a lost sector: a later record proves them
    // synced.
    for k in [3usize, 20, 30] {
        let at = starts[k].0 + 40;
        let (res, _) = replay_with(&|d| d[at..(at / 512 + 1) * 512].fill(0));
        assert_corruption(&res, &seg(1), starts[k].0 as u64);
    }
    for k in [3usize, 31, 32, 38] {
        let (res, _) = replay_with(&|d| d[starts[k].0 + 50] ^= 0x40);
        assert_corruption(&res, &seg(1), starts[k].0 as u64);
    }
    let (res, got) = replay_with(&|d| d[end - 1] ^= 0x40);
    assert_eq!(res.unwrap().truncated_at, Some((seg(1), starts[39].0 as u64)));
    assert_eq!(got, all[..starts[39].1]);
}

/// Stamping keeps each header valid and records a synced end no later than the true one and
/// less than one unit earlier; a distance beyond 24 bits of units is "unknown".
#[test]
fn stamped_distances_bound_the_synced_end() {
    let mut records = Vec::new();
    for first in [1u64, 4, 9] {
        records.extend(group_record(&group_ops(first, 3, 700)));
    }
    for (offset, synced) in [(32u64, 32u64), (5000, 4999), (5000, 4488), (5000, 100), (1 << 40, 0)] {
        let mut stamped = records.clone();
        record::stamp_unsynced_distance(&mut stamped, offset, synced);
        let mut at = 0usize;
        while at < stamped.len() {
            let h = RecordHeader::decode(&stamped[at..]).expect("the header stays valid");
            let start = offset + at as u64;
            match synced_at_least(&stamped[at..], start) {
                Some(s) => assert!(
                    s <= synced && s + record::UNSYNCED_UNIT > synced,
                    "{offset} {synced}: {s}"
                ),
                None => assert!(start - synced > u64::from(record::UNSYNCED_UNKNOWN) * record::UNSYNCED_UNIT),
            }
            at += RECORD_HEADER_SIZE + h.payload_len as usize;
        }
        assert_eq!(at, stamped.len());
    }
}

/// `dump` (what `riptide inspect` shows) judges damage as recovery does: zeros after the last
/// record of an older segment, and a torn-looking end of an older segment, are damage.
#[test]
fn inspect_judges_older_segments_as_recovery_does() {
    let (fs, afs) = new_fs();
    let mut log = RedoLog::create(afs.clone(), dir(), 1, 256 << 10, Vec::new()).unwrap();
    let mut lsn = 1;
    while log.number < 2 {
        let ops = group_ops(lsn, 20, 500);
        lsn += 20;
        log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
        log.sync_for_commit().unwrap();
        log.maybe_roll().unwrap();
    }
    drop(log);
    let end1 = fs.read_file(&seg(1)).unwrap().len() as u64;
    let torn_record = group_record(&group_ops(900, 2, 50))[..30].to_vec();
    for (what, tail) in [("zeros", vec![0u8; 4096]), ("a torn record", torn_record)] {
        let mut damaged = files(&fs);
        set_file(&mut damaged, &seg(1), |d| d.extend_from_slice(&tail));
        let fs = fs_with(&damaged);
        let d = &dump(&fs, &dir()).unwrap()[0];
        let (at, torn, _) = d.damage.clone().unwrap_or_else(|| panic!("{what}: no damage in {d:?}"));
        assert_eq!((at, torn), (end1, false), "{what}");
        assert!(replay(&fs, RecoveryMode::TolerateCorruptedTail).0.is_err(), "{what}");
    }
}

/// A lost sector that held only the first few bytes of a record's header (the header straddles
/// a sector boundary; the next sector, with the rest of the header and the payload, survived,
/// and so did later records): a torn tail, however few those bytes.
#[test]
fn a_lost_sector_holding_a_few_bytes_of_a_header_is_a_torn_tail() {
    for z in [1usize, 4, 7, 12, 23] {
        let (fs, afs) = new_fs();
        let mut log = RedoLog::create(afs.clone(), dir(), 1, 64 << 20, Vec::new()).unwrap();
        let mut lsn = 1;
        let mut all = Vec::new();
        for _ in 0..3 {
            let ops = group_ops(lsn, 3, 100);
            lsn += 3;
            log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
            all.extend(ops);
            log.sync_for_commit().unwrap();
        }
        // A synced filler that leaves the next record starting `z` bytes before a sector's end.
        let filler = (0..2000)
            .map(|pad| group_ops(lsn, 2, pad))
            .find(|ops| (log.len() as usize + group_record(ops).len()) % 512 == 512 - z)
            .expect("a padding that lands there");
        lsn += 2;
        log.append_records(&mut group_record(&filler), lsn - 1).unwrap();
        all.extend(filler);
        log.sync_for_commit().unwrap();
        let (synced_end, synced_ops) = (log.len() as usize, all.len());
        for _ in 0..4 {
            let ops = group_ops(lsn, 3, 300);
            lsn += 3;
            log.append_records(&mut group_record(&ops), lsn - 1).unwrap();
            all.extend(ops);
        }
        drop(log);
        let mut image = files(&fs);
        set_file(&mut image, &seg(1), |d| d[synced_end..synced_end + z].fill(0));
        let (res, got) = replay(&fs_with(&image), RecoveryMode::TolerateCorruptedTail);
        let report = res.unwrap_or_else(|e| panic!("{z} bytes: {e}"));
        assert_eq!(report.truncated_at, Some((seg(1), synced_end as u64)), "{z} bytes");
        assert_eq!(got, all[..synced_ops], "{z} bytes");
    }
}
