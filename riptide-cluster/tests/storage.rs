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
        let log = LogStore::open(&db).expect("log store");
        let sm = StateMachine::open(&db).expect("state machine");
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

/// Appends with the log store's durable append (Raft's `append` without its callback).
async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    log.append_durably(entries).await.unwrap();
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
        append(&mut log, entries.clone()).await;
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
async fn write_sets_apply_atomically_and_never_touch_the_cluster_tables() {
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

    // A write set naming a cluster table is refused whole: nothing of it, nor its index, lands.
    let bad = WriteSet {
        ops: vec![put("t", "k3", "v3"), put(riptide_cluster::LOG_TABLE, "x", "y")],
    };
    assert!(sm.apply(vec![entry(1, 2, EntryPayload::Normal(bad))]).await.is_err());
    assert_eq!(db.table("t").unwrap().get(b"k3").unwrap(), None);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 1, 1)));
}
