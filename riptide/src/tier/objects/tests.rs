use super::*;
use crate::fs::PosixFs;
use crate::tier::{DirObjectStore, FaultyObjectStore, ObjectOp};
use std::path::Path;

fn quick() -> RetryPolicy {
    RetryPolicy {
        first_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        deadline: Duration::from_millis(50),
    }
}

pub(super) fn tier(root: &Path, cache_bytes: u64) -> (Arc<ObjectTier>, Arc<FaultyObjectStore>) {
    let fs: Arc<dyn crate::fs::FileSystem> = Arc::new(PosixFs);
    let store = Arc::new(FaultyObjectStore::new(Arc::new(DirObjectStore::new(
        fs.clone(),
        root.join("bucket"),
    ))));
    let cache = ExtentCache::open(fs, &root.join("cache"), cache_bytes, &HashMap::new()).unwrap();
    (
        Arc::new(ObjectTier::new(store.clone(), quick(), Duration::ZERO, cache)),
        store,
    )
}

#[test]
fn object_names_round_trip_and_refuse_strangers() {
    let id = ExtentId(OBJECT_ID_BIT | 0x1234);
    assert_eq!(object_name(id), "ext/8000000000001234");
    assert_eq!(parse_object_name(&object_name(id)), Some(id));
    for bad in [
        "ext/0000000000001234",
        "ext/123",
        "ext/zzzzzzzzzzzzzzzz",
        "other/8000000000001234",
        "ext/README",
    ] {
        assert_eq!(parse_object_name(bad), None, "{bad}");
    }
}

#[test]
fn reads_map_onto_the_object_without_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, store) = tier(dir.path(), 0);
    let id = tier.allocate();
    assert!(id.is_object());
    let valid: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let footer = vec![0xAB; FOOTER_SIZE];
    tier.upload(id, &valid, &footer).unwrap();
    assert_eq!(
        store.get(&object_name(id)).unwrap().len(),
        1000 + FOOTER_SIZE,
        "the gap is not stored"
    );
    let f = tier.file(id, 1000, 1);
    assert_eq!(f.len().unwrap(), EXTENT_SIZE);
    let mut b = [0u8; 10];
    f.read_at(&mut b, 990).unwrap();
    assert_eq!(b.to_vec(), valid[990..].to_vec());
    let mut foot = vec![0u8; FOOTER_SIZE];
    f.read_at(&mut foot, EXTENT_SIZE - FOOTER_SIZE as u64).unwrap();
    assert_eq!(foot, footer);
    // Into the gap, across it, past the end: refused.
    for at in [995, 5000, EXTENT_SIZE - FOOTER_SIZE as u64 - 1, EXTENT_SIZE - 4] {
        assert_eq!(
            f.read_at(&mut b, at).unwrap_err().kind(),
            io::ErrorKind::InvalidInput,
            "{at}"
        );
    }
    assert_eq!(tier.stats().range_reads, 2);

    // A missing object is a typed error naming it, through the reader's `Error::io`.
    let missing = tier.allocate();
    let err = tier.file(missing, 1000, 1).read_at(&mut b, 0).unwrap_err();
    match Error::io("read", "ignored", err) {
        Error::ObjectStore {
            op: "get",
            object,
            kind: ObjectErrorKind::NotFound,
            ..
        } => {
            assert!(object.ends_with(&object_name(missing)), "{object}")
        }
        other => panic!("{other}"),
    }
}

#[test]
fn whole_reads_fill_the_cache_and_check_the_length() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, store) = tier(dir.path(), 1 << 20);
    let id = tier.allocate();
    tier.upload(id, &[7; 500], &[9; FOOTER_SIZE]).unwrap();
    assert_eq!(tier.stats().cache_extents, 1, "uploads are cached");
    tier.cache.remove(id.0);
    tier.fetch_whole(id, 500).unwrap();
    let gets = store.requests(ObjectOp::Get);
    let mut b = [0u8; 4];
    tier.file(id, 500, 1).read_at(&mut b, 100).unwrap();
    assert_eq!(b, [7; 4]);
    assert_eq!(store.requests(ObjectOp::Get), gets, "served from the cache");
    assert_eq!(tier.stats().cache_hits, 1);
    // Metadata saying another length than the object's: a permanent error, nothing cached.
    tier.cache.remove(id.0);
    match tier.fetch_whole(id, 499) {
        Err(Error::ObjectStore {
            kind: ObjectErrorKind::Permanent,
            message,
            ..
        }) => assert!(message.contains("metadata says")),
        other => panic!("{other:?}"),
    }
    assert_eq!(tier.stats().cache_extents, 0);
}

#[test]
fn an_extent_read_by_range_often_is_fetched_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, store) = tier(dir.path(), 1 << 20);
    let id = tier.allocate();
    tier.upload(id, &[7; 500], &[9; FOOTER_SIZE]).unwrap();
    tier.cache.remove(id.0);
    let f = tier.file(id, 500, 1);
    let mut b = [0u8; 4];
    for _ in 0..WHOLE_AFTER_RANGED_READS {
        f.read_at(&mut b, 0).unwrap();
    }
    assert_eq!(tier.stats().range_reads, u64::from(WHOLE_AFTER_RANGED_READS));
    assert_eq!(tier.stats().whole_reads, 0);
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(tier.stats().whole_reads, 1, "the next miss reads it whole");
    let gets = store.requests(ObjectOp::Get);
    for _ in 0..20 {
        f.read_at(&mut b, 100).unwrap();
    }
    assert_eq!(store.requests(ObjectOp::Get), gets, "then reads are local");
}

#[test]
fn the_deletion_queue_retries_failed_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, store) = tier(dir.path(), 0);
    let (a, b) = (tier.allocate(), tier.allocate());
    tier.upload(a, &[1; 10], &[0; FOOTER_SIZE]).unwrap();
    tier.upload(b, &[1; 10], &[0; FOOTER_SIZE]).unwrap();
    store.fail_always(ObjectOp::Delete, ObjectErrorKind::Transient, "503");
    tier.discard(a);
    tier.retire(b);
    assert_eq!(tier.delete_due(), 0);
    assert_eq!(tier.stats().pending_deletes, 2, "failed deletes stay queued");
    assert_eq!(store.list("ext/").unwrap().len(), 2);
    store.clear();
    // Requeued a second later.
    assert_eq!(tier.delete_due(), 0);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(tier.delete_due(), 2);
    assert!(store.list("ext/").unwrap().is_empty());
    assert_eq!(tier.stats().objects_deleted, 2);
}

#[test]
fn orphans_are_queued_and_live_objects_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, store) = tier(dir.path(), 0);
    let ids: Vec<ExtentId> = (0..4).map(|_| tier.allocate()).collect();
    for id in &ids {
        tier.upload(*id, &[1; 10], &[0; FOOTER_SIZE]).unwrap();
    }
    store.put("ext/notes.txt", b"kept").unwrap();
    let live: HashMap<u64, u64> = ids[..2].iter().map(|i| (i.0, 10 + FOOTER_SIZE as u64)).collect();
    assert_eq!(tier.reclaim_orphans(&live).unwrap(), 2);
    assert_eq!(tier.reclaim_orphans(&live).unwrap(), 0, "already queued");
    assert_eq!(tier.delete_due(), 2);
    let mut left: Vec<String> = store.list("").unwrap().into_iter().map(|o| o.name).collect();
    left.sort();
    let mut want = vec![object_name(ids[0]), object_name(ids[1]), "ext/notes.txt".to_string()];
    want.sort();
    assert_eq!(left, want);
    // An unreachable store: a typed error, nothing queued.
    store.fail_always(ObjectOp::List, ObjectErrorKind::Transient, "connection refused");
    assert!(matches!(
        tier.reclaim_orphans(&HashMap::new()),
        Err(Error::ObjectStore { op: "list", .. })
    ));
}
