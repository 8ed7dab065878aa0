//! Flush, levels, compaction, caches and their failure modes, through the public API.
//!
//! Each test checks something that would break if the engine lost, resurrected or misread
//! data once it left the memtables: reads after flush and reopen, redo segments deleted once
//! flushed, snapshot versions kept across compaction, tombstones purged only at the bottom, the
//! row cache never serving a stale row while flushes race with updates, and I/O errors (ENOSPC,
//! EIO) during flush and slog commits failing cleanly without losing acknowledged writes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::{FaultFs, FaultOp};
use riptide::{Db, Error, Options, ReadOptions, Table, WriteOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

fn opts(fs: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        block_size: 4 << 10,
        level0_layer_trigger: 100,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        immutable_slowdown_trigger: 1000,
        immutable_stop_trigger: 1000,
        ..Default::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.resize(100 + (i % 50) as usize, b'x');
    v
}

fn scan(t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    t.iter(&ReadOptions::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn check(t: &Table, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got = scan(t);
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len(), "scan length");
    assert!(got == want, "scan differs from the model");
    let back: Vec<_> = t
        .iter(&ReadOptions::default())
        .unwrap()
        .rev()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert!(back.into_iter().rev().eq(want.into_iter()), "reverse scan differs");
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(
            t.get(k).unwrap().as_ref(),
            Some(v),
            "get {:?}",
            String::from_utf8_lossy(k)
        );
    }
}

fn redo_segments(fs: &FaultFs, db: &Path) -> usize {
    use riptide::fs::FileSystem;
    fs.list_dir(&db.join("redo"))
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".log"))
        .count()
}

#[test]
fn flushed_data_reads_back_before_and_after_reopen() {
    let fs = FaultFs::new();
    let path = Path::new("/db");
    let db = Db::open(path, opts(&fs)).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    for round in 0..3 {
        for i in 0..2000u64 {
            let k = key((i * 7919) % 3000);
            if i % 11 == 0 {
                t.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = value(i, round);
                t.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        t.flush().unwrap();
        let info = t.level_info();
        assert_eq!(info.immutable_memtables, 0);
        assert!(info.extents[0] > 0, "flush wrote no L0 extent: {info:?}");
        check(&t, &model);
    }
    assert!(db.stats().flushes >= 3);
    db.close().unwrap();
    let db = Db::open(path, opts(&fs)).unwrap();
    let t = db.default_table();
    assert!(t.level_info().extents[0] > 0);
    check(&t, &model);
    // After a drop without close (no flush at close), the redo log brings back the rest.
    for i in 0..500u64 {
        let v = value(i, 99);
        t.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    drop(t);
    db.abandon_for_test();
    let db = Db::open(path, opts(&fs)).unwrap();
    check(&db.default_table(), &model);
}

#[test]
fn flush_deletes_redo_segments_no_table_needs() {
    let fs = FaultFs::new();
    let path = Path::new("/db");
    let o = Options {
        redo_segment_size: 64 << 10,
        ..opts(&fs)
    };
    let db = Db::open(path, o.clone()).unwrap();
    let a = db.default_table();
    let b = db.create_table("b").unwrap();
    b.put(b"only", b"one").unwrap();
    for i in 0..3000u64 {
        a.put(&key(i), &value(i, 0)).unwrap();
    }
    let before = redo_segments(&fs, path);
    assert!(before > 3, "expected several redo segments, got {before}");
    a.flush().unwrap();
    // Table b's single write sits in the oldest segment: nothing may be deleted yet.
    assert_eq!(redo_segments(&fs, path), before);
    b.flush().unwrap();
    assert!(
        redo_segments(&fs, path) <= 2,
        "segments left: {}",
        redo_segments(&fs, path)
    );
    assert!(db.stats().redo_segments_deleted > 0);
    db.abandon_for_test();
    let db = Db::open(path, o).unwrap();
    assert_eq!(db.table("b").unwrap().get(b"only").unwrap(), Some(b"one".to_vec()));
    assert_eq!(db.default_table().get(&key(2999)).unwrap(), Some(value(2999, 0)));
}

#[test]
fn compaction_moves_data_down_and_keeps_what_snapshots_see() {
    let fs = FaultFs::new();
    let path = Path::new("/db");
    let db = Db::open(path, opts(&fs)).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        t.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    t.flush().unwrap();
    let snap = db.snapshot();
    let old = model.clone();
    for i in (0..3000u64).step_by(3) {
        t.put(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    for i in (1..3000u64).step_by(5) {
        t.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    t.compact().unwrap();
    let info = t.level_info();
    assert_eq!(info.extents[0], 0, "L0 must be empty after a full compaction: {info:?}");
    assert!(info.extents[2] > 0, "L2 must hold the data: {info:?}");
    check(&t, &model);
    // The snapshot still sees the old state, versions and deleted keys included.
    let at = ReadOptions {
        snapshot: Some(snap.clone()),
        ..Default::default()
    };
    let seen: BTreeMap<Vec<u8>, Vec<u8>> = t.iter(&at).unwrap().map(|r| r.unwrap()).collect();
    assert!(seen == old, "snapshot view changed by compaction");
    for i in (0..3000u64).step_by(97) {
        assert_eq!(t.get_opt(&key(i), &at).unwrap(), Some(value(i, 0)));
    }
    let with_snapshot = t.level_info().entries[2];
    // Once the snapshot is gone, a compaction drops the old versions and the tombstones.
    drop(at);
    drop(snap);
    t.compact().unwrap();
    let info = t.level_info();
    assert_eq!(info.entries[2], model.len() as u64, "only live rows remain: {info:?}");
    assert!(with_snapshot > info.entries[2]);
    check(&t, &model);
    db.wait_for_background_work().unwrap();
    let stats = db.stats();
    assert!(stats.compactions >= 2 && stats.extents_freed > 0, "{stats:?}");
    // Every slot in use belongs to an extent of the current metadata.
    let live: usize = t.level_info().extents.iter().sum();
    assert_eq!(stats.space_used_slots as usize, live, "{stats:?}");
    db.close().unwrap();
    let db = Db::open(path, opts(&fs)).unwrap();
    check(&db.default_table(), &model);
}

/// Freed extents keep their disk blocks up to `free_slots_kept` and one per 16 used slots; a
/// background worker punches the holes beyond it, also after a compaction run on the caller's
/// thread. Slots punched or kept are reused, and no live extent is ever punched. At rest the
/// data files occupy little more than the live extents.
#[test]
fn freed_slots_beyond_the_reserve_are_punched_in_the_background() {
    for keep in [0u32, 2, 100_000] {
        let fs = FaultFs::new();
        let path = Path::new("/db");
        let o = Options {
            free_slots_kept: keep,
            ..opts(&fs)
        };
        let db = Db::open(path, o.clone()).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        let fill = |round: u64, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
            for i in 0..3000u64 {
                t.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
        };
        fill(0, &mut model);
        t.compact().unwrap();
        // Another table's extents after these, so freed slots are not a file tail (which
        // shrinking cuts instead).
        let other = db.create_table("other").unwrap();
        for i in 0..3000u64 {
            other.put(&key(i), &value(i, 9)).unwrap();
        }
        other.flush().unwrap();
        for round in 1..4u64 {
            fill(round, &mut model);
            // Each full compaction rewrites every extent and frees the old ones.
            t.compact().unwrap();
        }
        // Fewer rows than before: the last compaction frees more slots than it fills.
        for i in (0..3000u64).filter(|i| i % 4 != 0) {
            t.delete(&key(i)).unwrap();
            model.remove(&key(i));
        }
        t.compact().unwrap();
        db.wait_for_background_work().unwrap();
        let stats = db.stats();
        assert!(stats.extents_freed > 4, "keep {keep}: {stats:?}");
        let reserve = u64::from(keep).min(stats.space_used_slots / 16);
        assert!(stats.space_unpunched_slots <= reserve, "keep {keep}: {stats:?}");
        assert!(stats.space_punched_slots > 0, "keep {keep}: {stats:?}");
        check(&t, &model);
        db.close().unwrap();
        let db = Db::open(path, o).unwrap();
        check(&db.default_table(), &model);
        // At rest the data files hold the live extents' pages (valid bytes rounded up to 4 KiB
        // pages plus a footer page each), the header pages and the reserve, nothing more:
        // these extents are tiny (a few KiB), so pages, not the reserve, dominate here. (After
        // the background work the reopen may start, so that the counters are one quiet cut.)
        db.wait_for_background_work().unwrap();
        let stats = db.stats();
        let bound = stats.live_extent_bytes
            + stats.space_used_slots * 8192
            + stats.space_files * 8192
            + stats.space_unpunched_slots * (2 << 20);
        let on_disk = stats.space_allocated_bytes.unwrap();
        assert!(
            on_disk <= bound,
            "keep {keep}: {on_disk} bytes on disk, bound {bound}: {stats:?}"
        );
        assert!(stats.space_amplification().unwrap() >= 1.0);
    }
}

#[test]
fn automatic_compaction_bounds_l0() {
    let fs = FaultFs::new();
    let path = Path::new("/db");
    let o = Options {
        level0_layer_trigger: 3,
        level0_extents_trigger: 2,
        level1_extents_trigger: 1,
        level1_dynamic_trigger: false,
        ..opts(&fs)
    };
    let db = Db::open(path, o).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(5);
    for round in 0..12u64 {
        for _ in 0..800 {
            let i = rng.random_range(0..5000u64);
            t.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        t.flush().unwrap();
        db.wait_for_background_work().unwrap();
        assert!(t.level_info().l0_layers.len() < 3, "{:?}", t.level_info());
    }
    let info = t.level_info();
    assert!(info.extents[2] > 0, "{info:?}");
    check(&t, &model);
}

/// A database with a 1 MiB row cache and triggers that keep compactions running.
fn open_with_row_cache(fs: &FaultFs) -> Db {
    let o = Options {
        row_cache_size: 1 << 20,
        level0_layer_trigger: 6,
        level0_extents_trigger: 4,
        ..opts(fs)
    };
    Db::open(Path::new("/db"), o).unwrap()
}

/// Lets `handles` run for `d`, then sets `stop` and joins them (a panic in one fails the test).
fn stop_after(d: Duration, stop: &AtomicBool, handles: Vec<std::thread::JoinHandle<()>>) {
    std::thread::sleep(d);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
}

/// A thread that flushes `t` every 2 ms until `stop`.
fn spawn_flusher(t: &Table, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (t, stop) = (t.clone(), stop.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            t.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    })
}

#[test]
fn row_cache_never_serves_a_stale_row() {
    // Writers update a few hot keys with increasing counters while flushes and compactions
    // run; readers check that the value they read never goes backwards for a key (reads at
    // the latest LSN are linearizable) and that snapshot reads stay put.
    let fs = FaultFs::new();
    let db = open_with_row_cache(&fs);
    let t = db.default_table();
    const HOT: u64 = 8;
    for k in 0..HOT {
        t.put(&key(k), &0u64.to_be_bytes()).unwrap();
    }
    t.flush().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let written: Arc<Vec<AtomicU64>> = Arc::new((0..HOT).map(|_| AtomicU64::new(0)).collect());
    let mut handles = Vec::new();
    {
        let (t, stop, written) = (t.clone(), stop.clone(), written.clone());
        handles.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let filler = vec![7u8; 2000];
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // Mostly filler, so memtables switch and flush often and hot rows are read
                // from the levels (through the row cache) most of the time.
                if n.is_multiple_of(64) {
                    let k = (n / 64) % HOT;
                    t.put(&key(k), &n.to_be_bytes()).unwrap();
                    written[k as usize].store(n, Ordering::Release);
                }
                t.put(format!("fill{}", n % 512).as_bytes(), &filler).unwrap();
            }
        }));
    }
    handles.push(spawn_flusher(&t, &stop));
    for r in 0..2 {
        let (t, db, stop, written) = (t.clone(), db.clone(), stop.clone(), written.clone());
        handles.push(std::thread::spawn(move || {
            let mut last = [0u64; HOT as usize];
            let mut i = r;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let k = i % HOT;
                let floor = written[k as usize].load(Ordering::Acquire);
                let v = t.get(&key(k)).unwrap().expect("hot key exists");
                let n = u64::from_be_bytes(v[..8].try_into().unwrap());
                assert!(
                    n >= floor,
                    "key {k}: read {n} after {floor} was acknowledged (stale row)"
                );
                assert!(
                    n >= last[k as usize],
                    "key {k}: went back from {} to {n}",
                    last[k as usize]
                );
                last[k as usize] = n;
                if i % 50 == 0 {
                    let snap = db.snapshot();
                    let at = ReadOptions {
                        snapshot: Some(snap),
                        ..Default::default()
                    };
                    let a = t.get_opt(&key(k), &at).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(300));
                    let b = t.get_opt(&key(k), &at).unwrap();
                    assert_eq!(a, b, "snapshot read changed");
                }
            }
        }));
    }
    stop_after(Duration::from_millis(1500), &stop, handles);
    let stats = db.stats();
    assert!(stats.flushes > 5, "{stats:?}");
    // A deterministic phase that must go through the row cache: each flush moves the newest
    // version to L0 while the cached row still holds the previous one.
    db.wait_for_background_work().unwrap();
    let hits_before = db.stats().caches.row_cache.hits;
    for round in 0..50u64 {
        let k = key(round % HOT);
        let v = (1_000_000 + round).to_be_bytes();
        t.put(&k, &v).unwrap();
        t.flush().unwrap();
        assert_eq!(t.get(&k).unwrap().as_deref(), Some(&v[..]), "round {round}: first read");
        assert_eq!(
            t.get(&k).unwrap().as_deref(),
            Some(&v[..]),
            "round {round}: cached read"
        );
    }
    let hits = db.stats().caches.row_cache.hits - hits_before;
    assert!(hits >= 25, "the row cache served only {hits} of 100 reads");
}

#[test]
fn row_cache_never_serves_a_stale_absence() {
    // The row cache also remembers keys that no level holds. A writer inserts new keys in
    // order while flushes run; readers probe keys around the insert frontier (so absences get
    // cached just before the key arrives) and every key acknowledged before the read began
    // must be found.
    let fs = FaultFs::new();
    let db = open_with_row_cache(&fs);
    let t = db.default_table();
    t.put(b"seed", b"x").unwrap();
    t.flush().unwrap();

    // Deterministic: the second lookup of an absent key is a row-cache hit; a put and a flush
    // of that key make it visible (from the memtable, then from the flushed layer).
    let hits = || db.stats().caches.row_cache.hits;
    assert_eq!(t.get(b"absent").unwrap(), None);
    let before = hits();
    assert_eq!(t.get(b"absent").unwrap(), None);
    assert_eq!(
        hits(),
        before + 1,
        "a repeated absent lookup is served by the row cache"
    );
    t.put(b"absent", b"now").unwrap();
    assert_eq!(t.get(b"absent").unwrap().as_deref(), Some(&b"now"[..]));
    t.flush().unwrap();
    assert_eq!(t.get(b"absent").unwrap().as_deref(), Some(&b"now"[..]));
    db.wait_for_background_work().unwrap();
    assert_eq!(t.get(b"absent").unwrap().as_deref(), Some(&b"now"[..]));

    let stop = Arc::new(AtomicBool::new(false));
    let frontier = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    {
        let (t, stop, frontier) = (t.clone(), stop.clone(), frontier.clone());
        handles.push(std::thread::spawn(move || {
            let filler = vec![7u8; 2000];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                t.put(&key(n), &n.to_be_bytes()).unwrap();
                n += 1;
                frontier.store(n, Ordering::Release);
                // Filler makes memtables switch and flush often.
                t.put(format!("fill{}", n % 256).as_bytes(), &filler).unwrap();
            }
        }));
    }
    handles.push(spawn_flusher(&t, &stop));
    for r in 0..2u64 {
        let (t, stop, frontier) = (t.clone(), stop.clone(), frontier.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(r);
            while !stop.load(Ordering::Relaxed) {
                let acked = frontier.load(Ordering::Acquire);
                // Mostly just ahead of the frontier (absent now, present soon: the absence
                // gets cached), sometimes anywhere behind it (keys flushed since).
                let k = if rng.random_bool(0.75) || acked == 0 {
                    (acked + rng.random_range(0..4u64)).saturating_sub(2)
                } else {
                    rng.random_range(0..acked)
                };
                let got = t.get(&key(k)).unwrap();
                if k < acked {
                    assert_eq!(
                        got.as_deref(),
                        Some(&k.to_be_bytes()[..]),
                        "key {k} acknowledged (frontier {acked}) but read as absent"
                    );
                }
            }
        }));
    }
    stop_after(Duration::from_millis(1500), &stop, handles);
    let stats = db.stats();
    assert!(stats.flushes > 5, "{stats:?}");
    assert!(frontier.load(Ordering::Relaxed) > 1000);
}

#[test]
fn flush_io_errors_fail_cleanly_and_lose_nothing() {
    for (op, errno, filter) in [
        (FaultOp::WriteAt, ENOSPC, "data"),
        (FaultOp::WriteAt, EIO, "data"),
        (FaultOp::Sync, EIO, "data"),
        (FaultOp::Create, ENOSPC, "data"),
        (FaultOp::Append, ENOSPC, "meta"),
        (FaultOp::Sync, EIO, "meta"),
    ] {
        let fs = FaultFs::new();
        let path = Path::new("/db");
        let db = Db::open(path, opts(&fs)).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        let sync = WriteOptions {
            sync: true,
            ..Default::default()
        };
        for i in 0..100u64 {
            t.put_opt(&key(i), &value(i, 0), &sync).unwrap();
            model.insert(key(i), value(i, 0));
        }
        fs.fail_always(op, Some(filter), errno);
        let err = t.flush().expect_err("flush must fail");
        assert!(matches!(err, Error::Io { .. } | Error::Poisoned(_)), "{op:?}: {err}");
        assert!(db.background_error().is_some());
        // Still readable from the memtables; still writable.
        check(&t, &model);
        for i in 100..150u64 {
            t.put_opt(&key(i), &value(i, 0), &sync).unwrap();
            model.insert(key(i), value(i, 0));
        }
        fs.clear_faults();
        // Data-file errors leave the instance working: a retry succeeds. A slog error
        // poisons the metadata log (like a failed redo fsync), and reopen recovers.
        if filter == "data" {
            t.flush().unwrap();
            check(&t, &model);
        }
        drop(t);
        db.abandon_for_test();
        let db = Db::open(path, opts(&fs)).unwrap();
        check(&db.default_table(), &model);
        let t = db.default_table();
        t.flush().unwrap();
        check(&t, &model);
        db.close().unwrap();
    }
}

#[test]
fn power_cut_during_flushes_keeps_synced_writes() {
    use riptide::fs::CrashMode;
    for seed in 0..6u64 {
        let fs = FaultFs::new();
        let path = Path::new("/db");
        let o = Options {
            level0_layer_trigger: 2,
            slog_checkpoint_bytes: 4 << 10,
            ..opts(&fs)
        };
        let db = Db::open(path, o.clone()).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let sync = WriteOptions {
            sync: true,
            ..Default::default()
        };
        for n in 0..1500u64 {
            let i = rng.random_range(0..800u64);
            t.put_opt(&key(i), &value(i, n), &sync).unwrap();
            model.insert(key(i), value(i, n));
        }
        drop(t);
        db.abandon_for_test();
        fs.crash(if seed % 2 == 0 {
            CrashMode::DropUnsynced
        } else {
            CrashMode::KeepRandomPrefix { seed }
        });
        let db = Db::open(path, o).unwrap();
        check(&db.default_table(), &model);
        // Recovery may hand the replayed memtables to a flush worker; a flush in flight owns
        // slots that no level names yet, so compare only once the workers are idle.
        db.wait_for_background_work().unwrap();
        let stats = db.stats();
        let live: usize = db.default_table().level_info().extents.iter().sum();
        assert_eq!(
            stats.space_used_slots as usize, live,
            "seed {seed}: slots leaked: {stats:?}"
        );
    }
}

/// Keys with shared prefixes, 0x00 and 0xff bytes and the empty key, spread over many small
/// blocks and extents and all levels: every seek and seek_for_prev must match a BTreeMap.
#[test]
fn seeks_over_levels_match_a_sorted_map() {
    let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], b"a".to_vec(), b"ab".to_vec(), vec![0xff]];
    let mut rng = StdRng::seed_from_u64(3);
    const ALPHABET: [u8; 5] = [0, 1, b'a', 0xfe, 0xff];
    while keys.len() < 400 {
        let len = rng.random_range(1..=10);
        let k: Vec<u8> = (0..len).map(|_| ALPHABET[rng.random_range(0..5)]).collect();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let fs = FaultFs::new();
    let db = Db::open(
        "/db",
        Options {
            block_size: 1 << 10,
            ..opts(&fs)
        },
    )
    .unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    for (phase, chunk) in keys.chunks(100).enumerate() {
        for (i, k) in chunk.iter().enumerate() {
            let v = vec![b'v'; 20 + i % 40];
            t.put(k, &v).unwrap();
            model.insert(k.clone(), v);
        }
        match phase {
            0 => t.compact().unwrap(),
            1 => {
                t.flush().unwrap();
                t.compact_l0().unwrap();
            }
            2 => t.flush().unwrap(),
            _ => {}
        }
    }
    let info = t.level_info();
    assert!(
        info.extents[0] > 0 && info.extents[1] > 0 && info.extents[2] > 0,
        "{info:?}"
    );
    let mut probes = keys.clone();
    for k in &keys {
        let mut a = k.clone();
        a.push(0);
        probes.push(a);
        let mut b = k.clone();
        if let Some(x) = b.last_mut() {
            *x = x.wrapping_add(1);
        }
        probes.push(b);
    }
    let mut it = t.raw_iter(&ReadOptions::default()).unwrap();
    for p in &probes {
        it.seek(p);
        let want = model.range(p.clone()..).next().map(|(k, _)| k.clone());
        assert_eq!(it.valid().then(|| it.key().to_vec()), want, "seek {p:?}");
        it.seek_for_prev(p);
        let want = model.range(..=p.clone()).next_back().map(|(k, _)| k.clone());
        assert_eq!(it.valid().then(|| it.key().to_vec()), want, "seek_for_prev {p:?}");
        if it.valid() {
            it.next();
            let want = model
                .range((std::ops::Bound::Excluded(p.clone()), std::ops::Bound::Unbounded))
                .next();
            assert_eq!(
                it.valid().then(|| it.key().to_vec()),
                want.map(|(k, _)| k.clone()),
                "next after {p:?}"
            );
        }
    }
    check(&t, &model);
}

/// A snapshot taken early keeps seeing exactly its versions while the data under it is
/// overwritten, deleted and compacted many times (every compaction kind, reuse on).
#[test]
fn a_long_lived_snapshot_survives_many_compactions() {
    let fs = FaultFs::new();
    let o = Options {
        level0_layer_trigger: 2,
        level0_extents_trigger: 2,
        level1_extents_trigger: 2,
        level1_dynamic_trigger: false,
        ..opts(&fs)
    };
    let db = Db::open("/db", o).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    for i in 0..2000u64 {
        t.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    let snap = db.snapshot();
    let frozen = model.clone();
    let at = ReadOptions {
        snapshot: Some(snap.clone()),
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(11);
    for round in 1..=12u64 {
        for _ in 0..600 {
            let i = rng.random_range(0..2500u64);
            if rng.random_bool(0.3) {
                t.delete(&key(i)).unwrap();
                model.remove(&key(i));
            } else {
                t.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
        }
        match round % 4 {
            0 => t.compact().unwrap(),
            1 => t.compact_range(Some(&key(500)), Some(&key(1500))).unwrap(),
            2 => t.compact_l0().unwrap(),
            _ => t.flush().unwrap(),
        }
        let seen: BTreeMap<Vec<u8>, Vec<u8>> = t.iter(&at).unwrap().map(|r| r.unwrap()).collect();
        assert!(seen == frozen, "round {round}: the snapshot's view changed");
        for i in (0..2000u64).step_by(37) {
            assert_eq!(t.get_opt(&key(i), &at).unwrap(), Some(value(i, 0)), "round {round}");
        }
        check(&t, &model);
    }
    let stats = db.stats();
    assert!(stats.compactions >= 8, "{stats:?}");
}

#[test]
fn compact_range_purges_only_inside_the_range() {
    let fs = FaultFs::new();
    let db = Db::open("/db", opts(&fs)).unwrap();
    let t = db.default_table();
    for i in 0..3000u64 {
        t.put(&key(i), &value(i, 0)).unwrap();
    }
    t.compact().unwrap();
    for i in 0..3000u64 {
        t.delete(&key(i)).unwrap();
    }
    t.flush().unwrap();
    let before = t.level_info();
    t.compact_range(Some(&key(1000)), Some(&key(1999))).unwrap();
    let after = t.level_info();
    let total = |i: &riptide::LevelInfo| i.entries.iter().sum::<u64>();
    assert!(total(&after) < total(&before), "{before:?} -> {after:?}");
    assert_eq!(t.iter(&ReadOptions::default()).unwrap().count(), 0);
    t.compact().unwrap();
    assert_eq!(total(&t.level_info()), 0, "a full compaction purges every tombstone");
}

/// Self-major compactions rewrite delete-heavy L2 extents only when that purges something: a
/// snapshot that pins the tombstones must not make the picker rewrite the same extents over
/// and over; once it is gone, one round purges them.
#[test]
fn self_major_waits_for_snapshots_that_pin_its_deletes() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    let t = db.default_table();
    for i in 0..2000 {
        t.put(&key(i), &value(i, 0)).unwrap();
    }
    let snap = db.snapshot();
    for i in (0..2000).filter(|i| i % 2 == 0) {
        t.delete(&key(i)).unwrap();
    }
    // To L2, keeping the puts the snapshot sees and the tombstones above them: every L2
    // extent is about half deletes.
    t.compact().unwrap();
    let info = t.level_info();
    assert_eq!(info.entries[2], 3000, "{info:?}");
    let l2_compactions = |db: &Db| db.stats().levels[2].compactions;
    let before = l2_compactions(&db);
    // A flush queues the table for the picker; nothing is due but the delete-heavy extents,
    // which the snapshot pins.
    t.put(b"zz-1", b"x").unwrap();
    t.flush().unwrap();
    db.wait_for_background_work().unwrap();
    assert_eq!(l2_compactions(&db), before, "rewrote L2 extents a snapshot pins");
    assert_eq!(t.level_info().entries[2], 3000);
    drop(snap);
    t.put(b"zz-2", b"x").unwrap();
    t.flush().unwrap();
    db.wait_for_background_work().unwrap();
    assert!(
        l2_compactions(&db) > before,
        "self-major did not run once the snapshot was gone"
    );
    assert_eq!(t.level_info().entries[2], 1000, "{:?}", t.level_info());
    let model: BTreeMap<Vec<u8>, Vec<u8>> = (0..2000)
        .filter(|i| i % 2 == 1)
        .map(|i| (key(i), value(i, 0)))
        .chain([(b"zz-1".to_vec(), b"x".to_vec()), (b"zz-2".to_vec(), b"x".to_vec())])
        .collect();
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}

/// A self-major compaction rewrites delete-heavy L2 extents on both sides of one it leaves
/// alone: its output must not reach across the untouched extent (it did: the merged output of
/// the two sides became one extent overlapping the middle one, and the install failed).
#[test]
fn self_major_output_stops_at_extents_it_skips() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    let t = db.default_table();
    let k = |range: char, i: u64| format!("{range}{i:04}").into_bytes();
    let mut snaps = Vec::new();
    for range in ['a', 'b', 'c'] {
        for i in 0..100 {
            t.put(&k(range, i), &value(i, 0)).unwrap();
        }
        if range != 'b' {
            // The snapshot keeps the puts under the tombstones: one third of the entries are
            // deletes, so the extent is delete-heavy.
            snaps.push(db.snapshot());
            for i in 0..50 {
                t.delete(&k(range, i)).unwrap();
            }
        }
        t.flush().unwrap();
        t.compact_l0().unwrap();
        t.compact_l1().unwrap();
    }
    let info = t.level_info();
    assert_eq!((info.extents, info.entries[2]), ([0, 0, 3], 400), "{info:?}");
    drop(snaps);
    // A flush queues the table for the picker: only the self-major compaction is due.
    t.put(b"z", b"1").unwrap();
    t.flush().unwrap();
    db.wait_for_background_work().unwrap();
    let info = t.level_info();
    assert_eq!(info.extents[2], 3, "{info:?}");
    assert_eq!(info.entries[2], 200, "the deletes were purged: {info:?}");
    let model: BTreeMap<Vec<u8>, Vec<u8>> = ['a', 'b', 'c']
        .into_iter()
        .flat_map(|r| {
            (0..100)
                .filter(move |&i| r == 'b' || i >= 50)
                .map(move |i| (k(r, i), value(i, 0)))
        })
        .chain([(b"z".to_vec(), b"1".to_vec())])
        .collect();
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}

/// A major compaction whose L1 inputs lie on both sides of an L2 extent neither overlaps
/// leaves that extent in place, and its merged outputs end before it.
#[test]
fn major_output_stops_at_l2_extents_it_leaves_in_place() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    let t = db.default_table();
    let k = |range: char, i: u64| format!("{range}{i:04}").into_bytes();
    let mut model = BTreeMap::new();
    let mut write = |range: char, round: u64| {
        for i in 0..100 {
            t.put(&k(range, i), &value(i, round)).unwrap();
            model.insert(k(range, i), value(i, round));
        }
        t.flush().unwrap();
        t.compact_l0().unwrap();
    };
    for range in ['a', 'b', 'c'] {
        write(range, 0);
        t.compact_l1().unwrap();
    }
    // New versions of a and c, each its own L1 extent; b is only in L2.
    write('a', 1);
    write('c', 1);
    assert_eq!(t.level_info().extents, [0, 2, 3]);
    t.compact_l1().unwrap();
    let info = t.level_info();
    assert_eq!((info.extents, info.entries[2]), ([0, 0, 3], 300), "{info:?}");
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}

/// Runs of sparse L2 extents are packed by a self-major compaction once L2 has enough
/// extents, copying their blocks (no decode); the contents do not change.
#[test]
fn self_major_packs_runs_of_sparse_extents() {
    self_major_packs_with(|_| {});
}

/// The same with tasks of one extent's worth on three units: small extents share a task, so
/// the packing makes fewer extents (counted by extents, each task rewrote its one sparse
/// extent, and the picker packed the same extents again forever).
#[test]
fn self_major_packs_with_one_extent_tasks_on_several_units() {
    self_major_packs_with(|o| {
        o.compaction_units = 3;
        o.compaction_task_extents = 1;
    });
}

fn self_major_packs_with(tweak: impl FnOnce(&mut Options)) {
    let fs = FaultFs::new();
    let mut o = opts(&fs);
    tweak(&mut o);
    let db = Db::open(Path::new("/db"), o).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    // 20 key ranges, each moved down on its own: 20 small L2 extents side by side.
    for r in 0..20u64 {
        for i in 0..50 {
            let k = format!("r{r:02}-{i:03}").into_bytes();
            t.put(&k, &value(i, r)).unwrap();
            model.insert(k, value(i, r));
        }
        t.flush().unwrap();
        t.compact_l0().unwrap();
        t.compact_l1().unwrap();
    }
    // After each flush the picker runs; once L2 holds 16 small extents they are packed into
    // one (the last few ranges arrive after that).
    t.put(b"zz", b"1").unwrap();
    model.insert(b"zz".to_vec(), b"1".to_vec());
    t.flush().unwrap();
    db.wait_for_background_work().unwrap();
    let info = t.level_info();
    assert!(info.extents[2] <= 5, "{info:?}");
    assert_eq!(info.entries[2], 1000);
    // compact_l1 only re-links these extents; copied blocks come from the packing.
    assert!(
        db.stats().levels[2].blocks_reused > 0,
        "blocks were decoded, not copied"
    );
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}

/// `{range}{i:04}`: keys of one range sort together, ranges in letter order.
fn range_key(range: char, i: u64) -> Vec<u8> {
    format!("{range}{i:04}").into_bytes()
}

/// Writes keys 0..100 of each range (version 0), flushing and compacting each range down to
/// L2 on its own, so each range is one L2 extent.
fn load_l2_ranges(t: &Table, ranges: &[char], model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
    for &range in ranges {
        for i in 0..100 {
            t.put(&range_key(range, i), &value(i, 0)).unwrap();
            model.insert(range_key(range, i), value(i, 0));
        }
        t.flush().unwrap();
        t.compact_l0().unwrap();
        t.compact_l1().unwrap();
    }
}

/// An L1 extent whose rows skip a whole L2 extent is split at the L2 boundaries before the
/// major compaction, which then leaves the skipped L2 extent untouched (no block of it copied
/// or merged); without the split the major would rewrite all three L2 extents.
#[test]
fn split_lets_the_major_leave_skipped_l2_extents_alone() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    let t = db.default_table();
    let k = range_key;
    let mut model = BTreeMap::new();
    load_l2_ranges(&t, &['a', 'b', 'c'], &mut model);
    // New versions of a and c in one flush: one L1 extent spanning a..c with no row in b.
    for range in ['a', 'c'] {
        for i in 0..100 {
            t.put(&k(range, i), &value(i, 1)).unwrap();
            model.insert(k(range, i), value(i, 1));
        }
    }
    t.flush().unwrap();
    t.compact_l0().unwrap();
    assert_eq!(t.level_info().extents, [0, 1, 3]);
    let before = db.stats().levels;
    t.compact_l1().unwrap();
    let after = db.stats().levels;
    assert_eq!(after[1].compactions, before[1].compactions + 1, "one split into L1");
    assert_eq!(after[2].compactions, before[2].compactions + 1, "one major into L2");
    // The major merged a' with a and c' with c; b was neither merged nor copied.
    // Inputs: the two L1 pieces and the three L2 extents in their range (b stays in place).
    assert_eq!(after[2].input_extents - before[2].input_extents, 5, "{after:?}");
    assert_eq!(
        after[2].blocks_reused, before[2].blocks_reused,
        "blocks of b were copied"
    );
    assert_eq!(t.level_info().extents, [0, 0, 3]);
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}

/// Seed 000 Fig. 8's third case inside one extent: a few hot keys, spread over the range of a
/// dense L2 extent, are merged with only the L2 blocks they fall in; every other L2 block is
/// copied verbatim, and hot keys between blocks are written between the copies. The result
/// reads back like the model, at the latest state and at a snapshot taken between versions,
/// and matches the same operations run with data reuse off.
#[test]
fn sparse_keys_merge_only_the_blocks_they_fall_in() {
    let run = |reuse: bool| {
        let fs = FaultFs::new();
        let db = Db::open(
            Path::new("/db"),
            Options {
                compaction_reuse: reuse,
                ..opts(&fs)
            },
        )
        .unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        // One dense L2 extent: 8,000 keys in ~200 blocks of 4 KiB.
        for i in 0..8_000u64 {
            t.put(&key(i * 10), &value(i, 0)).unwrap();
            model.insert(key(i * 10), value(i, 0));
        }
        t.flush().unwrap();
        t.compact().unwrap();
        assert_eq!(t.level_info().extents, [0, 0, 1]);
        // Hot keys: updates of existing rows, new rows between existing ones (in the gaps
        // between blocks too), one delete, three versions each, a snapshot after the first.
        let hot: Vec<u64> = (0..30u64).map(|i| i * 2_663 % 80_000).collect();
        let mut at_snapshot = model.clone();
        let mut snap = None;
        for round in 1..=3u64 {
            for &h in &hot {
                t.put(&key(h), &value(h, round)).unwrap();
                model.insert(key(h), value(h, round));
            }
            t.delete(&key(40_000)).unwrap();
            model.remove(&key(40_000));
            if round == 1 {
                at_snapshot = model.clone();
                snap = Some(db.snapshot());
            }
        }
        t.flush().unwrap();
        let before = db.stats().levels[2];
        t.compact_l0().unwrap();
        t.compact_l1().unwrap();
        let after = db.stats().levels[2];
        check(&t, &model);
        let snap = snap.unwrap();
        let old: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter(&ReadOptions {
                snapshot: Some(snap.clone()),
                ..Default::default()
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = at_snapshot.into_iter().collect();
        assert!(old == want, "snapshot view changed");
        drop(snap);
        let scan_all = scan(&t);
        drop(t);
        db.close().unwrap();
        (
            scan_all,
            after.blocks_reused - before.blocks_reused,
            after.blocks_merged - before.blocks_merged,
        )
    };
    let (with_reuse, copied, merged) = run(true);
    let (without, copied_off, _) = run(false);
    assert!(with_reuse == without, "reuse changed what a scan returns");
    assert_eq!(copied_off, 0);
    // 31 hot keys fall in at most 31 of the ~200 dense blocks (plus the hot run's own blocks).
    assert!(copied >= 150, "copied {copied}, merged {merged}");
    assert!(merged <= 40, "copied {copied}, merged {merged}");
}

/// A dense run whose blocks often split a user key's versions (two versions per key kept by a
/// snapshot) merged with a few sparse keys: output extents are cut only between user keys, so
/// the install accepts the level and every version stays readable. (A dense unit of several
/// blocks was once copied block by block; an extent cut between two of them split a user key
/// across extents, which the crash-point test caught as "extents overlap".)
#[test]
fn sparse_merge_never_splits_a_user_key_across_extents() {
    let fs = FaultFs::new();
    // One codec in every level: copied blocks keep their bytes (none is recompressed).
    let o = Options {
        compression_per_level: [riptide::Compression::Lz4; 3],
        ..opts(&fs)
    };
    let db = Db::open(Path::new("/db"), o).unwrap();
    let t = db.default_table();
    // Incompressible, so the blocks and extents hold what the sizes say.
    let random = |seed: u64, len: usize| {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>()
    };
    let mut model = BTreeMap::new();
    let mut snapshot = None;
    let mut at_snapshot = BTreeMap::new();
    for round in 0..2u64 {
        for i in 0..8_000u64 {
            let v = random(i << 8 | round, 300 + (i * 37 % 200) as usize);
            t.put(&key(i * 10), &v).unwrap();
            model.insert(key(i * 10), v);
        }
        if round == 0 {
            snapshot = Some(db.snapshot());
            at_snapshot = model.clone();
        }
    }
    t.flush().unwrap();
    t.compact().unwrap();
    let l2_extents = t.level_info().extents[2];
    assert!(l2_extents >= 4, "{:?}", t.level_info());
    // One bulky hot key early in each L2 extent's range, so each output overflows its extent.
    for j in 0..8u64 {
        let h = j * 10_000 + 15;
        let v = random(1 << 40 | h, 3_000);
        t.put(&key(h), &v).unwrap();
        model.insert(key(h), v);
    }
    t.flush().unwrap();
    let before = db.stats().levels[2];
    t.compact_l0().unwrap();
    t.compact_l1().unwrap();
    let after = db.stats().levels[2];
    assert!(
        after.blocks_reused > before.blocks_reused,
        "no block was copied: {after:?}"
    );
    // Every extent is of the current format with the same bloom bits and codec: copies take
    // index entries and filter lines as they are.
    assert_eq!(after.blocks_reused_decoded, 0, "{after:?}");
    assert_eq!(t.level_info().extents[..2], [0, 0]);
    check(&t, &model);
    let got: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter(&ReadOptions {
            snapshot: snapshot.clone(),
            ..Default::default()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        got == at_snapshot.into_iter().collect::<Vec<_>>(),
        "the snapshot's view changed"
    );
    drop(snapshot);
    drop(t);
    db.close().unwrap();
    // The level survives a reopen (recovery checks the levels for overlaps again).
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    check(&db.default_table(), &model);
    db.close().unwrap();
}

/// With a block cache far smaller than the data, point lookups read most blocks partially
/// (tail and one restart region) and cache only some of the blocks they miss; every answer is
/// the model's. With `partial_block_reads` off every miss reads and caches the whole block.
#[test]
fn partial_block_reads_serve_point_lookups_when_the_block_cache_is_full() {
    for partial in [true, false] {
        let fs = FaultFs::new();
        let o = Options {
            block_cache_size: 64 << 10,
            partial_block_reads: partial,
            compression_per_level: [riptide::Compression::None; 3],
            ..opts(&fs)
        };
        let db = Db::open(Path::new("/db"), o).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..3u64 {
            for _ in 0..4000 {
                let i = rng.random_range(0..20_000u64);
                t.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
            t.flush().unwrap();
        }
        t.compact().unwrap();
        let before = db.stats().caches;
        for _ in 0..20_000 {
            let i = rng.random_range(0..20_000u64);
            assert_eq!(
                t.get(&key(i)).unwrap(),
                model.get(&key(i)).cloned(),
                "key {i}, partial {partial}"
            );
        }
        let after = db.stats().caches;
        let misses = after.block_cache.misses - before.block_cache.misses;
        let inserts = after.block_cache.inserts - before.block_cache.inserts;
        let partials = after.partial_block_reads - before.partial_block_reads;
        assert!(misses > 1000, "partial {partial}: only {misses} misses");
        if partial {
            assert!(partials * 2 > misses, "{partials} partial reads of {misses} misses");
            assert!(inserts * 3 < misses, "{inserts} inserts for {misses} misses");
        } else {
            assert_eq!(partials, 0);
            assert_eq!(inserts, misses);
        }
    }
}

/// With the dynamic L1 trigger (the default) L1 may grow with L2 before a major compaction
/// runs: `max(level1_extents_trigger, ceil(sqrt(2 · level0_extents_trigger · N2)))`, here
/// `max(1, ceil(sqrt(2 · N2)))` ≥ 4 behind an L2 of 8 or more extents. The same L1 extent
/// goes down at once with the static trigger of 1.
#[test]
fn level1_trigger_grows_with_level2() {
    for dynamic in [true, false] {
        let fs = FaultFs::new();
        let o = Options {
            level0_extents_trigger: 1,
            level1_extents_trigger: 1,
            level1_dynamic_trigger: dynamic,
            // Uncompressed, so the values below fill 8 or more extents.
            compression_per_level: [riptide::Compression::None; 3],
            ..opts(&fs)
        };
        let db = Db::open("/db", o).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        for i in 0..150_000u64 {
            t.put(&key(i), &value(i, 0)).unwrap();
            model.insert(key(i), value(i, 0));
        }
        t.compact().unwrap();
        db.wait_for_background_work().unwrap();
        let info = t.level_info();
        assert!(
            info.extents[2] >= 8,
            "dynamic={dynamic}: L2 too small for the test: {info:?}"
        );
        assert_eq!(info.extents[0] + info.extents[1], 0, "dynamic={dynamic}: {info:?}");
        // A few updates spread over the key range: one flush, one minor compaction, one L1
        // extent.
        for i in [10u64, 70_000, 140_000] {
            t.put(&key(i), &value(i, 1)).unwrap();
            model.insert(key(i), value(i, 1));
        }
        t.flush().unwrap();
        db.wait_for_background_work().unwrap();
        let info = t.level_info();
        assert_eq!(
            info.extents[0], 0,
            "dynamic={dynamic}: the minor compaction ran: {info:?}"
        );
        let want_l1 = usize::from(dynamic);
        assert_eq!(
            info.extents[1], want_l1,
            "dynamic={dynamic}: L1 after the minor compaction: {info:?}"
        );
        check(&t, &model);
        db.close().unwrap();
    }
}

/// A split cuts an L1 extent only where a skipped L2 extent starts: rows reaching L2 extents
/// a, c, d and e but skipping b give two pieces (a's rows; c to e's rows), not one per L2
/// extent, and the major then leaves b alone.
#[test]
fn split_cuts_only_at_skipped_l2_extents() {
    let fs = FaultFs::new();
    let db = Db::open(Path::new("/db"), opts(&fs)).unwrap();
    let t = db.default_table();
    let k = range_key;
    let mut model = BTreeMap::new();
    load_l2_ranges(&t, &['a', 'b', 'c', 'd', 'e'], &mut model);
    assert_eq!(t.level_info().extents, [0, 0, 5]);
    // A few new versions in a, c, d and e (none in b): one L1 extent spanning a..e.
    for range in ['a', 'c', 'd', 'e'] {
        for i in [3u64, 50, 97] {
            t.put(&k(range, i), &value(i, 1)).unwrap();
            model.insert(k(range, i), value(i, 1));
        }
    }
    t.flush().unwrap();
    t.compact_l0().unwrap();
    assert_eq!(t.level_info().extents, [0, 1, 5]);
    let before = db.stats().levels;
    t.compact_l1().unwrap();
    let after = db.stats().levels;
    assert_eq!(after[1].compactions, before[1].compactions + 1, "one split into L1");
    // The major's inputs: the split's two pieces and the five L2 extents in their range (b
    // among them, alone in its closed range, so left in place). Cutting at every L2 extent
    // inside the range (b, c and d) made three pieces: eight inputs.
    assert_eq!(after[2].input_extents - before[2].input_extents, 7, "{after:?}");
    assert_eq!(
        after[2].extents_reused - before[2].extents_reused,
        0,
        "nothing overlapping nothing was re-linked: {after:?}"
    );
    // a merged with its piece; b in place; c, d and e merged with the other piece into one
    // extent (their rows fit one, and no fence keeps them apart).
    assert_eq!(t.level_info().extents, [0, 0, 3]);
    check(&t, &model);
    drop(t);
    db.close().unwrap();
}
