//! The object tier end to end, on a directory object store (and faults injected in front of
//! it): L2 extents become objects, reads and scans return the model's rows from them, old
//! objects are deleted after the grace period, orphans are reclaimed at open, and every
//! object-store fault is retried or surfaces as a typed error that loses nothing.

use riptide::fs::{FaultFs, PosixFs};
use riptide::tier::{DirObjectStore, FaultyObjectStore, ObjectErrorKind, ObjectOp, ObjectStore, RetryPolicy, Tier};
use riptide::{Db, Error, Options, ReadOptions, Table, TableOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        first_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        deadline: Duration::from_millis(200),
    }
}

fn opts(fs: &FaultFs, store: Arc<dyn ObjectStore>) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 256 << 10,
        object_store: Some(store),
        l2_tier: Tier::Object,
        object_delete_grace: Duration::ZERO,
        object_retry: quick_retry(),
        // Every move between levels is an explicit call.
        level0_layer_trigger: 1000,
        level0_extents_trigger: 1000,
        level1_extents_trigger: 1000,
        level1_dynamic_trigger: false,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        ..Default::default()
    }
}

fn dir_store(root: &Path) -> Arc<DirObjectStore> {
    Arc::new(DirObjectStore::new(Arc::new(PosixFs), root))
}

fn key(i: u64) -> Vec<u8> {
    format!("user/{i:08}").into_bytes()
}

fn value(i: u64, gen: u64) -> Vec<u8> {
    format!(
        "{{\"id\":{i},\"gen\":{gen},\"name\":\"user number {i}\",\"pad\":\"{}\"}}",
        "x".repeat((i % 50) as usize)
    )
    .into_bytes()
}

fn load(t: &Table, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, range: std::ops::Range<u64>, gen: u64) {
    for i in range {
        t.put(&key(i), &value(i, gen)).unwrap();
        model.insert(key(i), value(i, gen));
    }
}

fn check(t: &Table, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter(&ReadOptions::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(
        got == want,
        "scan differs from the model ({} vs {} rows)",
        got.len(),
        want.len()
    );
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]));
    }
    assert_eq!(t.get(b"user/absent").unwrap(), None);
}

/// Extent objects in the store.
fn objects(store: &dyn ObjectStore) -> usize {
    store.list("ext/").unwrap().len()
}

/// Waits (a few seconds at most) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

#[test]
fn l2_lives_in_the_object_tier_and_reads_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = dir_store(&dir.path().join("bucket"));
    let path = Path::new("/db");
    let mut model = BTreeMap::new();
    let db = Db::open(
        path,
        Options {
            extent_cache_size: 0,
            ..opts(&fs, store.clone())
        },
    )
    .unwrap();
    let t = db.create_table("users").unwrap();
    load(&t, &mut model, 0..6000, 1);
    t.flush().unwrap();
    t.compact().unwrap();
    let s = db.stats();
    assert!(s.object_extents > 0, "L2 extents are objects: {s:?}");
    // Objects the compaction replaced go asynchronously (grace period 0).
    eventually("only live objects remain", || {
        objects(store.as_ref()) as u64 == s.object_extents
    });
    assert_eq!(
        t.level_info().extents[2] as u64,
        s.object_extents,
        "every L2 extent is an object"
    );
    check(&t, &model);
    let tier = db.stats().object_tier.unwrap();
    assert!(
        tier.range_reads > 0,
        "with no extent cache, reads are ranged GETs: {tier:?}"
    );
    assert_eq!(tier.cache_hits, 0);

    // Overwrite half and compact again: the old objects go once no reader holds them.
    load(&t, &mut model, 0..3000, 2);
    t.flush().unwrap();
    t.compact().unwrap();
    check(&t, &model);
    let live = db.stats().object_extents as usize;
    eventually("the replaced objects are deleted", || objects(store.as_ref()) == live);
    assert!(db.stats().object_tier.unwrap().objects_deleted > 0);
    db.close().unwrap();

    // Recovery reads no object data; the reopened database reads from the same objects.
    let db = Db::open(path, opts(&fs, store.clone())).unwrap();
    let t = db.table("users").unwrap();
    check(&t, &model);
    let tier = db.stats().object_tier.unwrap();
    assert_eq!(tier.orphans_found, 0);
    db.close().unwrap();

    // Without the object store the database refuses to open, naming the option.
    let err = Db::open(
        path,
        Options {
            object_store: None,
            l2_tier: Tier::Local,
            ..opts(&fs, store.clone())
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidOption {
                option: "object_store",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn the_extent_cache_serves_scans_and_point_reads() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = dir_store(&dir.path().join("bucket"));
    let faulty = Arc::new(FaultyObjectStore::new(store));
    let path = Path::new("/db");
    let mut model = BTreeMap::new();
    // Written with no extent cache: nothing is cached locally.
    let db = Db::open(
        path,
        Options {
            extent_cache_size: 0,
            ..opts(&fs, faulty.clone())
        },
    )
    .unwrap();
    let t = db.create_table("users").unwrap();
    load(&t, &mut model, 0..6000, 1);
    t.flush().unwrap();
    t.compact().unwrap();
    db.close().unwrap();

    // Opened with a cache, cold: the scan reads each object whole once, then the point reads
    // are served locally.
    let db = Db::open(path, opts(&fs, faulty.clone())).unwrap();
    let t = db.table("users").unwrap();
    check(&t, &model);
    let tier = db.stats().object_tier.unwrap();
    assert!(
        tier.whole_reads > 0 && tier.cache_extents > 0 && tier.cache_hits > 0,
        "{tier:?}"
    );
    let gets = faulty.requests(ObjectOp::Get);
    for (k, v) in model.iter().step_by(3) {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]));
    }
    assert_eq!(
        faulty.requests(ObjectOp::Get),
        gets,
        "warm point reads never reach the store"
    );
    db.close().unwrap();
}

#[test]
fn transient_faults_are_retried_and_permanent_ones_leave_the_database_usable() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let faulty = Arc::new(FaultyObjectStore::new(dir_store(&dir.path().join("bucket"))));
    let path = Path::new("/db");
    let mut model = BTreeMap::new();
    let no_caches = |fs: &FaultFs| Options {
        extent_cache_size: 0,
        block_cache_size: 0,
        ..opts(fs, faulty.clone())
    };
    let db = Db::open(path, no_caches(&fs)).unwrap();
    let t = db.create_table("users").unwrap();
    load(&t, &mut model, 0..4000, 1);
    t.flush().unwrap();
    t.compact_l0().unwrap();

    // 503s and resets on the way: retried, the compaction succeeds.
    faulty.fail_next(ObjectOp::Put, 3, ObjectErrorKind::Transient, "503 SlowDown");
    faulty.lose_put_answers(1);
    t.compact_l1().unwrap();
    assert!(db.stats().object_extents > 0);
    let tier = db.stats().object_tier.unwrap();
    assert!(tier.retries >= 4, "{tier:?}");
    check(&t, &model);

    // Uploads fail for good: the compaction fails with a typed error naming an object, its
    // outputs are discarded, nothing acknowledged is lost, and a later compaction succeeds.
    load(&t, &mut model, 2000..5000, 2);
    t.flush().unwrap();
    t.compact_l0().unwrap();
    let before = db.stats().object_extents;
    faulty.fail_always(ObjectOp::Put, ObjectErrorKind::Permanent, "403 AccessDenied");
    let err = t.compact_l1().unwrap_err();
    match &err {
        Error::ObjectStore {
            op: "put",
            object,
            kind: ObjectErrorKind::Permanent,
            ..
        } => {
            assert!(object.contains("/ext/"), "{object}")
        }
        other => panic!("expected an object-store error, got {other}"),
    }
    assert_eq!(
        db.stats().object_extents,
        before,
        "the failed compaction changed nothing"
    );
    check(&t, &model);
    t.put(b"user/new", b"still writable").unwrap();
    model.insert(b"user/new".to_vec(), b"still writable".to_vec());
    faulty.clear();
    t.compact_l1().unwrap();
    check(&t, &model);

    // Reads that keep failing: a typed error naming the object; the next read works.
    faulty.fail_always(ObjectOp::Get, ObjectErrorKind::Transient, "timeout");
    let mut failed = None;
    for (k, _) in model.iter().step_by(101) {
        if let Err(e) = t.get(k) {
            failed = Some(e);
            break;
        }
    }
    match failed {
        Some(Error::ObjectStore {
            op,
            object,
            kind: ObjectErrorKind::Transient,
            ..
        }) => {
            assert!(object.contains("/ext/"), "{op} {object}")
        }
        other => panic!("expected a failed object read, got {other:?}"),
    }
    faulty.clear();
    check(&t, &model);
    db.close().unwrap();

    // An object no metadata names (an upload whose compaction never committed) is found at
    // the next open and deleted once due; the live ones stay.
    let stray = "ext/8000000000c0ffee";
    faulty.put(stray, b"an upload that never committed").unwrap();
    let db = Db::open(path, opts(&fs, faulty.clone())).unwrap();
    let live = db.stats().object_extents as usize;
    assert!(db.stats().object_tier.unwrap().orphans_found >= 1);
    eventually("orphans are deleted", || objects(faulty.as_ref()) == live);
    assert!(faulty.get(stray).is_err());
    check(&db.table("users").unwrap(), &model);
    db.close().unwrap();
}

#[test]
fn orphans_wait_for_the_grace_period_and_are_reclaimed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = dir_store(&dir.path().join("bucket"));
    let path = Path::new("/db");
    let mut model = BTreeMap::new();
    let long_grace = |fs: &FaultFs| Options {
        object_delete_grace: Duration::from_secs(3600),
        ..opts(fs, store.clone())
    };
    let db = Db::open(path, long_grace(&fs)).unwrap();
    let t = db.create_table("users").unwrap();
    load(&t, &mut model, 0..4000, 1);
    t.flush().unwrap();
    t.compact().unwrap();
    load(&t, &mut model, 0..4000, 2);
    t.flush().unwrap();
    t.compact().unwrap();
    let s = db.stats();
    let tier = s.object_tier.unwrap();
    assert!(tier.pending_deletes > 0, "{tier:?}");
    assert_eq!(
        objects(store.as_ref()) as u64,
        s.object_extents + tier.pending_deletes,
        "nothing deleted before its grace period"
    );
    assert_eq!(tier.objects_deleted, 0);
    let pending = tier.pending_deletes;
    db.close().unwrap();

    // A stray object that is not an extent is never touched.
    store.put("ext/README", b"not an extent").unwrap();
    let db = Db::open(path, opts(&fs, store.clone())).unwrap();
    let live = db.stats().object_extents as usize;
    assert_eq!(db.stats().object_tier.unwrap().orphans_found, pending);
    eventually("orphans are deleted", || objects(store.as_ref()) == live + 1);
    check(&db.table("users").unwrap(), &model);
    db.close().unwrap();
}

#[test]
fn a_table_chooses_its_l2_tier() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = dir_store(&dir.path().join("bucket"));
    let path = Path::new("/db");
    let db = Db::open(
        path,
        Options {
            l2_tier: Tier::Local,
            ..opts(&fs, store.clone())
        },
    )
    .unwrap();
    let cold = db
        .create_table_with(
            "cold",
            TableOptions {
                l2_tier: Some(Tier::Object),
                ..Default::default()
            },
        )
        .unwrap();
    let hot = db.create_table("hot").unwrap();
    let (mut m1, mut m2) = (BTreeMap::new(), BTreeMap::new());
    load(&cold, &mut m1, 0..3000, 1);
    load(&hot, &mut m2, 0..3000, 1);
    for t in [&cold, &hot] {
        t.flush().unwrap();
        t.compact().unwrap();
    }
    assert!(cold.level_info().extents[2] > 0);
    assert_eq!(db.stats().object_extents as usize, cold.level_info().extents[2]);
    assert!(hot.level_info().extents[2] > 0);
    let text = riptide::inspect::levels(&fs, path, Some("cold")).unwrap();
    assert!(text.contains("option l2_tier = object"), "{text}");
    check(&cold, &m1);
    check(&hot, &m2);
    db.close().unwrap();

    // Without an object store, a table cannot ask for it.
    let plain = Db::open(
        Path::new("/plain"),
        Options {
            fs: Arc::new(fs.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let err = plain
        .create_table_with(
            "cold",
            TableOptions {
                l2_tier: Some(Tier::Object),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "l2_tier", .. }), "{err}");
}

#[test]
fn a_store_owned_by_another_database_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = dir_store(&dir.path().join("bucket"));
    let db = Db::open(Path::new("/first"), opts(&fs, store.clone())).unwrap();
    let t = db.create_table("users").unwrap();
    let mut model = BTreeMap::new();
    load(&t, &mut model, 0..3000, 1);
    t.flush().unwrap();
    t.compact().unwrap();
    db.close().unwrap();
    // Counted once closed: nothing deletes objects any more.
    let live = objects(store.as_ref());
    assert!(live > 0);
    // Another database given the same bucket and prefix must not reclaim the first one's
    // objects as orphans: its open fails, naming the option, and deletes nothing.
    let err = Db::open(Path::new("/second"), opts(&fs, store.clone())).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidOption { option: "object_store", reason } if reason.contains("belongs to database")),
        "{err}"
    );
    assert_eq!(objects(store.as_ref()), live);
    let db = Db::open(Path::new("/first"), opts(&fs, store.clone())).unwrap();
    check(&db.table("users").unwrap(), &model);
    db.close().unwrap();
}

#[test]
fn scans_read_ahead_and_reads_warm_extents() {
    let (_dir, fs, store, model) = users_setup();
    let path = Path::new("/db");
    let plain = |o: Options| Options {
        compression_per_level: [riptide::Compression::None; 3],
        ..o
    };
    let db = Db::open(
        path,
        plain(Options {
            block_cache_size: 0,
            ..opts(&fs, store.clone())
        }),
    )
    .unwrap();
    let t = db.table("users").unwrap();
    // A full scan crosses every extent: the ones ahead are read in the background. With a
    // round trip of 10 ms, the read-ahead of the extent after next starts well before the
    // scan needs it, and the scan waits for it rather than reading the extent again.
    store.set_latency(Duration::from_millis(10));
    let gets = store.requests(ObjectOp::Get);
    check(&t, &model);
    let tier = db.stats().object_tier.unwrap();
    assert!(tier.prefetches > 0, "{tier:?}");
    assert_eq!(
        tier.whole_reads,
        db.stats().object_extents,
        "each extent read whole once: {tier:?}"
    );
    // Per extent: footer and index when it opens, its first block by range, then whole.
    assert!(store.requests(ObjectOp::Get) - gets <= 4 * db.stats().object_extents);
    store.set_latency(Duration::ZERO);
    assert_eq!(
        db.stats().hot_object_bytes,
        db.stats().object_extent_bytes,
        "the scan read them all"
    );
    db.close().unwrap();

    // Temperatures start cold at open. Point reads on the first keys warm their extent; the
    // rest stays cold.
    let db = Db::open(
        path,
        plain(Options {
            block_cache_size: 0,
            ..opts(&fs, store.clone())
        }),
    )
    .unwrap();
    let t = db.table("users").unwrap();
    assert_eq!(db.stats().hot_object_bytes, 0);
    for _ in 0..20 {
        for i in 0..300 {
            t.get(&key(i)).unwrap();
        }
    }
    let s = db.stats();
    assert!(s.hot_object_bytes > 0, "{s:?}");
    assert!(s.hot_object_bytes < s.object_extent_bytes, "{s:?}");
    // A full compaction rewrites every extent; the new ones take their inputs' temperature.
    let freed = s.extents_freed;
    t.compact().unwrap();
    let s = db.stats();
    assert!(s.extents_freed > freed, "the extents were rewritten: {s:?}");
    assert!(s.hot_object_bytes > 0, "rewriting did not cool the hot range: {s:?}");
    db.close().unwrap();
}

/// `multi_get` with an object tier reads its keys on several threads: keys in different
/// object-tier extents wait on their GETs at the same time (seed 003), and every answer is
/// the one `get` gives, in the order asked.
#[test]
fn multi_get_overlaps_its_object_reads() {
    let (_dir, fs, store, model) = users_setup();
    let path = Path::new("/db");
    let plain = |o: Options| Options {
        compression_per_level: [riptide::Compression::None; 3],
        extent_cache_size: 0,
        block_cache_size: 0,
        ..o
    };
    let db = Db::open(path, plain(opts(&fs, store.clone()))).unwrap();
    let t = db.table("users").unwrap();
    store.set_latency(Duration::from_millis(20));
    // Keys spread over every extent, some missing, asked out of order.
    let ids: Vec<u64> = (0..24u64)
        .map(|i| (i * 7_919) % 100_000)
        .chain([200_000, 300_001])
        .collect();
    let keys: Vec<(&Table, Vec<u8>)> = ids.iter().map(|&i| (&t, key(i))).collect();
    let got = db.multi_get(&ReadOptions::default(), &keys);
    store.set_latency(Duration::ZERO);
    assert!(
        store.max_in_flight(ObjectOp::Get) > 1,
        "the reads did not overlap: at most {} GET at once",
        store.max_in_flight(ObjectOp::Get)
    );
    for (i, r) in ids.iter().zip(got) {
        assert_eq!(r.unwrap(), model.get(&key(*i)).cloned(), "key {i}");
    }
    drop(t);
    db.close().unwrap();
}

/// A table's contents, key to value.
type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// A bucket in a temporary directory (kept alive by the first value) behind a faulty store,
/// and `users_in_objects` in it on a fresh `FaultFs`.
fn users_setup() -> (tempfile::TempDir, FaultFs, Arc<FaultyObjectStore>, Rows) {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let store = Arc::new(FaultyObjectStore::new(dir_store(&dir.path().join("bucket"))));
    let model = users_in_objects(&fs, store.clone());
    (dir, fs, store, model)
}

/// Table `users` at `/db` with rows 0..100,000, uncompressed (so they fill several extents) and
/// compacted into the object tier, with no extent cache; closed. Returns its contents.
fn users_in_objects(fs: &FaultFs, store: Arc<FaultyObjectStore>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let o = Options {
        compression_per_level: [riptide::Compression::None; 3],
        extent_cache_size: 0,
        ..opts(fs, store)
    };
    let db = Db::open(Path::new("/db"), o).unwrap();
    let t = db.create_table("users").unwrap();
    load(&t, &mut model, 0..100_000, 1);
    t.flush().unwrap();
    t.compact().unwrap();
    assert!(db.stats().object_extents >= 3, "{}", db.stats().object_extents);
    drop(t);
    db.close().unwrap();
    model
}
