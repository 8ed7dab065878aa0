//! `S3Store` against a real S3-compatible server (moto, started by the test): the object-store
//! contract, error classification through the fault proxy, and the engine's object tier on it
//! (a model test, and each fault of issue 23 injected under a live database).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::tier::{ObjectErrorKind, ObjectStore, RetryPolicy, Tier};
use riptide::{Db, Error, Options, ReadOptions, Table};
use riptide_s3::fault_proxy::{Fault, FaultProxy};
use riptide_s3::moto::Moto;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn the_object_store_contract_holds_on_s3() {
    let moto = Moto::start().unwrap();
    let s = moto.store("contract").unwrap();
    assert_eq!(s.location(), "s3://riptide/contract");
    assert!(s.list("ext/").unwrap().is_empty());
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    s.put("ext/a", &data).unwrap();
    s.put("ext/b", b"small").unwrap();
    s.put("other/c", b"c").unwrap();
    assert_eq!(s.get("ext/a").unwrap(), data);
    assert_eq!(s.get_range("ext/a", 1000..1016).unwrap(), data[1000..1016].to_vec());
    assert_eq!(s.get("ext/missing").unwrap_err().kind, ObjectErrorKind::NotFound);
    let mut names: Vec<(String, u64)> = s.list("ext/").unwrap().into_iter().map(|o| (o.name, o.size)).collect();
    names.sort();
    assert_eq!(names, vec![("ext/a".to_string(), 100_000), ("ext/b".to_string(), 5)]);
    assert!(s.list("ext/").unwrap().iter().all(|o| o.last_modified.is_some()));
    // Another prefix of the same bucket is another namespace.
    assert!(moto.store("elsewhere").unwrap().list("ext/").unwrap().is_empty());
    s.delete("ext/a").unwrap();
    s.delete("ext/a").unwrap();
    assert_eq!(s.list("ext/").unwrap().len(), 1);
    assert_eq!(s.put("/abs", b"").unwrap_err().kind, ObjectErrorKind::Permanent);
    // Create-only puts (If-None-Match: *): the first wins, the second writes nothing.
    assert!(s.put_if_absent("OWNER", b"first").unwrap());
    assert!(!s.put_if_absent("OWNER", b"second").unwrap());
    assert_eq!(s.get("OWNER").unwrap(), b"first");
}

#[test]
fn faults_through_the_proxy_are_classified() {
    let moto = Moto::start().unwrap();
    let proxy = FaultProxy::start(moto.addr).unwrap();
    let s = moto
        .store_at(&proxy.endpoint(), "faults", Duration::from_millis(500))
        .unwrap();
    s.put("k", b"v").unwrap();
    for (fault, want) in [
        (Fault::Status(503, "SlowDown"), ObjectErrorKind::Transient),
        (Fault::Status(500, "InternalError"), ObjectErrorKind::Transient),
        (Fault::Reset, ObjectErrorKind::Transient),
        (Fault::Hang(Duration::from_secs(2)), ObjectErrorKind::Transient),
        (Fault::Status(403, "AccessDenied"), ObjectErrorKind::Permanent),
    ] {
        proxy.inject(Some("GET"), fault.clone(), 1);
        let err = s.get("k").unwrap_err();
        assert_eq!(err.kind, want, "{fault:?}: {err}");
        assert_eq!(s.get("k").unwrap(), b"v", "after {fault:?}");
    }
    proxy.inject(Some("PUT"), Fault::Status(503, "SlowDown"), 1);
    assert_eq!(s.put("k2", b"v").unwrap_err().kind, ObjectErrorKind::Transient);
    assert_eq!(
        s.get("k2").unwrap_err().kind,
        ObjectErrorKind::NotFound,
        "a refused put wrote nothing"
    );
    assert_eq!(proxy.injected(), 6);
}

fn key(i: u64) -> Vec<u8> {
    format!("acct/{i:08}").into_bytes()
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
    for (k, v) in model.iter().step_by(11) {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}

fn s3_options(store: Arc<dyn ObjectStore>, cache: u64) -> Options {
    Options {
        write_buffer_size: 256 << 10,
        object_store: Some(store),
        l2_tier: Tier::Object,
        extent_cache_size: cache,
        block_cache_size: 1 << 20,
        object_delete_grace: Duration::ZERO,
        object_retry: RetryPolicy {
            first_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(50),
            deadline: Duration::from_secs(3),
        },
        level0_layer_trigger: 2,
        level1_extents_trigger: 4,
        level1_dynamic_trigger: false,
        ..Default::default()
    }
}

/// Random puts, deletes and overwrites with background flushes and compactions pushing L2
/// into S3, explicit compactions, reopens with and without the extent cache; every read is
/// checked against a `BTreeMap`.
#[test]
fn model_test_with_l2_on_s3() {
    let moto = Moto::start().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(moto.store("model").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let seed = rand::random::<u64>();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for round in 0..4 {
        let cache = if round % 2 == 0 { 64 << 20 } else { 0 };
        let db = Db::open(dir.path(), s3_options(store.clone(), cache)).unwrap();
        let t = match db.table("accounts") {
            Ok(t) => t,
            Err(_) => db.create_table("accounts").unwrap(),
        };
        check(&t, &model);
        for _ in 0..6000 {
            let i = rng.random_range(0..5000u64);
            if rng.random_bool(0.1) {
                t.delete(&key(i)).unwrap();
                model.remove(&key(i));
            } else {
                let v = format!(
                    "balance {} round {round} {}",
                    rng.random::<u32>(),
                    "pad".repeat(rng.random_range(0..20))
                );
                t.put(&key(i), v.as_bytes()).unwrap();
                model.insert(key(i), v.into_bytes());
            }
        }
        if round % 2 == 1 {
            t.compact().unwrap();
        }
        check(&t, &model);
        let s = db.stats();
        if round > 0 {
            assert!(s.object_extents > 0, "L2 reached S3: {s:?}");
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), s3_options(store.clone(), 0)).unwrap();
    let t = db.table("accounts").unwrap();
    t.compact().unwrap();
    check(&t, &model);
    let live = db.stats().object_extents as usize;
    assert_eq!(
        store.list("ext/").unwrap().len(),
        live,
        "only live extents remain once deletions are due"
    );
    db.close().unwrap();
}

/// Each fault under a live database: throttling, 5xx, resets and timeouts on uploads are
/// retried and the compaction lands; uploads that keep failing leave the compaction undone
/// with a typed error and lose nothing; reads that keep failing return a typed error naming
/// the object and the database stays usable.
#[test]
fn a_live_database_rides_out_object_store_faults() {
    let moto = Moto::start().unwrap();
    let proxy = FaultProxy::start(moto.addr).unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(
        moto.store_at(&proxy.endpoint(), "faults", Duration::from_millis(500))
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let manual = |cache| Options {
        level0_layer_trigger: 1000,
        level0_extents_trigger: 1000,
        level1_extents_trigger: 1000,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        block_cache_size: 0,
        ..s3_options(store.clone(), cache)
    };
    let db = Db::open(dir.path(), manual(0)).unwrap();
    let t = db.create_table("orders").unwrap();
    let mut model = BTreeMap::new();
    let load = |t: &Table, gen: u32, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        for i in 0..3000u64 {
            let v = format!("order {i} gen {gen} {}", "x".repeat((i % 40) as usize));
            t.put(&key(i), v.as_bytes()).unwrap();
            model.insert(key(i), v.into_bytes());
        }
        t.flush().unwrap();
        t.compact_l0().unwrap();
    };
    load(&t, 1, &mut model);
    proxy.inject(Some("PUT"), Fault::Status(503, "SlowDown"), 2);
    proxy.inject(Some("PUT"), Fault::Status(500, "InternalError"), 1);
    proxy.inject(Some("PUT"), Fault::Reset, 1);
    proxy.inject(Some("PUT"), Fault::Hang(Duration::from_secs(1)), 1);
    t.compact_l1().unwrap();
    assert!(db.stats().object_extents > 0);
    assert!(db.stats().object_tier.unwrap().retries >= 5);
    check(&t, &model);

    load(&t, 2, &mut model);
    let before = db.stats().object_extents;
    proxy.inject(Some("PUT"), Fault::Status(503, "SlowDown"), 1_000_000);
    match t.compact_l1() {
        Err(Error::ObjectStore {
            op: "put",
            kind: ObjectErrorKind::Transient,
            object,
            ..
        }) => {
            assert!(object.starts_with("s3://riptide/faults/ext/"), "{object}")
        }
        other => panic!("expected a failed upload, got {other:?}"),
    }
    proxy.clear();
    assert_eq!(db.stats().object_extents, before);
    check(&t, &model);
    t.compact_l1().unwrap();
    check(&t, &model);

    proxy.inject(Some("GET"), Fault::Status(500, "InternalError"), 1_000_000);
    let err = model
        .keys()
        .find_map(|k| t.get(k).err())
        .expect("a read reaching S3 fails");
    assert!(
        matches!(&err, Error::ObjectStore { op: "get", object, .. } if object.contains("/ext/")),
        "{err}"
    );
    proxy.clear();
    check(&t, &model);
    db.close().unwrap();
}
