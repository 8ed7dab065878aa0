//! The partition storage against openraft's own storage test suite, and what the suite does
//! not check: that the log, the vote and the applied state survive a reopen of the database,
//! and that write sets reach the partition's tables (and never the cluster layer's own).

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{log_id, StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote};
use riptide_cluster::{LogStore, StateMachine, TypeConfig, WriteOp, WriteSet};
use std::sync::Arc;

/// A fresh partition database per test of the suite; the guard keeps its directory.
struct FreshPartition;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Arc<tempfile::TempDir>> for FreshPartition {
    async fn build(&self) -> Result<(Arc<tempfile::TempDir>, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = riptide::Db::open(dir.path(), riptide::Options::default()).expect("open partition database");
        let (log, sm) = riptide_cluster::open_partition(&db).expect("partition storage");
        Ok((Arc::new(dir), log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(FreshPartition) {
        panic!("openraft's storage suite failed: {e}");
    }
}

fn entry(term: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload,
    }
}

fn put(table: &str, key: &str, value: &str) -> WriteOp {
    WriteOp::Put {
        table: table.into(),
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn log_vote_and_applied_state_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = riptide::Db::open(dir.path(), riptide::Options::default()).unwrap();
        let mut log = LogStore::open(&db).unwrap();
        let mut sm = StateMachine::open(&db).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        let entries: Vec<_> = (1..=6)
            .map(|i| {
                let set = WriteSet {
                    ops: vec![put("accounts", &format!("a{i}"), &format!("{}", i * 10))],
                };
                entry(3, i, EntryPayload::Normal(set))
            })
            .collect();
        log.append_durably(entries.clone()).await.unwrap();
        let replies = sm.apply(entries[..4].to_vec()).await.unwrap();
        assert_eq!(replies.iter().map(|r| r.writes).collect::<Vec<_>>(), [1, 1, 1, 1]);
        sm.build_snapshot().await.unwrap();
        log.purge(log_id(3, 1, 2)).await.unwrap();
        log.truncate(log_id(3, 1, 6)).await.unwrap();
        db.close().unwrap();
    }
    let db = riptide::Db::open(dir.path(), riptide::Options::default()).unwrap();
    let mut log = LogStore::open(&db).unwrap();
    let mut sm = StateMachine::open(&db).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(3, 1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(3, 1, 5)));
    let kept: Vec<u64> = log
        .try_get_log_entries(0..)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(kept, [3, 4, 5]);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(3, 1, 4)));
    let accounts = db.table("accounts").unwrap();
    assert_eq!(accounts.get(b"a4").unwrap(), Some(b"40".to_vec()));
    assert_eq!(accounts.get(b"a5").unwrap(), None, "entry 5 was never applied");
}

#[tokio::test(flavor = "multi_thread")]
async fn write_sets_apply_atomically_and_unappliable_ones_are_refused_alike() {
    let dir = tempfile::tempdir().unwrap();
    let db = riptide::Db::open(dir.path(), riptide::Options::default()).unwrap();
    let mut sm = StateMachine::open(&db).unwrap();
    let set = WriteSet {
        ops: vec![
            put("t", "k1", "v1"),
            put("u", "k2", "v2"),
            WriteOp::Delete {
                table: "t".into(),
                key: b"k1".to_vec(),
            },
        ],
    };
    let replies = sm.apply(vec![entry(1, 1, EntryPayload::Normal(set))]).await.unwrap();
    assert_eq!(replies[0].writes, 3);
    assert_eq!(
        db.table("t").unwrap().get(b"k1").unwrap(),
        None,
        "the later delete wins"
    );
    assert_eq!(db.table("u").unwrap().get(b"k2").unwrap(), Some(b"v2".to_vec()));

    // Write sets no replica could apply are refused whole, the same way everywhere: nothing of
    // them lands, but their index does (a failing apply would stop every replica for good).
    let refused = [
        vec![put("t", "k3", "v3"), put(riptide_cluster::LOG_TABLE, "x", "y")],
        vec![put("t", "k3", "v3"), put("", "x", "y")],
        vec![
            put("t", "k3", "v3"),
            WriteOp::Put {
                table: "t".into(),
                key: vec![7; riptide::MAX_KEY_SIZE + 1],
                value: vec![],
            },
        ],
    ];
    for (i, ops) in refused.into_iter().enumerate() {
        let index = 2 + i as u64;
        let replies = sm
            .apply(vec![entry(1, index, EntryPayload::Normal(WriteSet { ops }))])
            .await
            .unwrap();
        assert_eq!(replies[0].writes, 0);
        assert!(replies[0].refused.is_some(), "set {i} was not refused");
        assert_eq!(db.table("t").unwrap().get(b"k3").unwrap(), None);
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(1, 1, index)));
    }
    assert!(db.table("").is_err());

    // A set fenced to one term is refused, whole and alike, when committed in another (its
    // writes were computed from reads confirmed in its term), and applied in its own.
    let fenced = |term: u64| WriteSet {
        ops: vec![put("t", "k4", "v4"), WriteOp::Fence { term }],
    };
    let replies = sm
        .apply(vec![entry(3, 10, EntryPayload::Normal(fenced(2)))])
        .await
        .unwrap();
    let reason = replies[0]
        .refused
        .clone()
        .expect("a set fenced to term 2 applied in term 3");
    assert!(reason.starts_with(riptide_cluster::types::FENCE_REFUSAL), "{reason}");
    assert_eq!(db.table("t").unwrap().get(b"k4").unwrap(), None);
    let replies = sm
        .apply(vec![entry(3, 11, EntryPayload::Normal(fenced(3)))])
        .await
        .unwrap();
    assert_eq!((replies[0].writes, replies[0].refused.clone()), (1, None));
    assert_eq!(db.table("t").unwrap().get(b"k4").unwrap(), Some(b"v4".to_vec()));
    let two = WriteSet {
        ops: vec![WriteOp::Fence { term: 3 }, WriteOp::Fence { term: 3 }],
    };
    assert!(two.validate().is_err());
}

/// A power cut (the engine's fault-injecting file system drops every unsynced byte) keeps the
/// vote and every appended entry (both synced), and leaves the applied state consistent: the
/// partition's rows are exactly those of the entries up to the applied id, so replaying from
/// there restores the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_power_cut_keeps_the_synced_log_and_vote_and_whole_applies() {
    use riptide::fs::{CrashMode, FaultFs};
    let fs = FaultFs::new();
    let opts = riptide::Options {
        fs: Arc::new(fs.clone()),
        ..Default::default()
    };
    let path = std::path::Path::new("/partition");
    let entries: Vec<_> = (1..=6)
        .map(|i| {
            let set = WriteSet {
                ops: vec![put("accounts", &format!("a{i}"), "x")],
            };
            entry(5, i, EntryPayload::Normal(set))
        })
        .collect();
    {
        let db = riptide::Db::open(path, opts.clone()).unwrap();
        let mut log = LogStore::open(&db).unwrap();
        let mut sm = StateMachine::open(&db).unwrap();
        log.save_vote(&Vote::new(5, 2)).await.unwrap();
        log.append_durably(entries.clone()).await.unwrap();
        sm.apply(entries[..4].to_vec()).await.unwrap(); // not synced: may be lost, but whole
        db.abandon_for_test();
    }
    fs.crash(CrashMode::DropUnsynced);
    let db = riptide::Db::open(path, opts).unwrap();
    let mut log = LogStore::open(&db).unwrap();
    let mut sm = StateMachine::open(&db).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(5, 2)));
    assert_eq!(log.try_get_log_entries(1..=6).await.unwrap(), entries);
    let rows = |db: &riptide::Db| -> Vec<Vec<u8>> {
        db.table("accounts")
            .map(|t| t.iter(&Default::default()).unwrap().map(|r| r.unwrap().0).collect())
            .unwrap_or_default()
    };
    let (applied, _) = sm.applied_state().await.unwrap();
    let done = applied.map_or(0, |id| id.index);
    assert!(done <= 4);
    let expected = |upto: u64| -> Vec<Vec<u8>> { (1..=upto).map(|i| format!("a{i}").into_bytes()).collect() };
    assert_eq!(rows(&db), expected(done), "rows disagree with applied id {done}");
    sm.apply(entries[done as usize..4].to_vec()).await.unwrap();
    assert_eq!(rows(&db), expected(4));
}
