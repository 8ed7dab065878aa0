//! Two-phase commit's participant side on a replicated partition (three nodes on loopback):
//! a prepared transaction's writes are stored on every replica and applied to no table; its
//! rows stay locked on the leader; the decision (commit or rollback, from any session) applies
//! them or not everywhere; a decision for an unknown id and a second prepare of an id are
//! refused alike on every replica; after the leader stops, the new leader finds the prepared
//! write set in its own tables, locks its rows again and commits it.

use riptide::{Db, Error, Table, TxnOptions, WriteOptions};
use riptide_cluster::{lock_prepared_rows, prepared_write_sets, WriteOp};
use std::time::Duration;
mod replicas;
use replicas::{blocking, caught_up, leader, three};

/// True when a transaction can lock `key` of `t` at once.
fn lockable(db: &Db, t: &Table, key: &[u8]) -> bool {
    let mut txn = db.begin(TxnOptions::default()).unwrap();
    txn.set_lock_timeout(Duration::ZERO);
    match txn.get_for_update(t, key) {
        Ok(_) => true,
        Err(Error::LockTimeout { .. }) => false,
        Err(e) => panic!("{e}"),
    }
}

fn ids(db: &Db) -> Vec<Vec<u8>> {
    prepared_write_sets(db)
        .unwrap()
        .into_iter()
        .map(|(xid, _)| xid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_transactions_are_stored_everywhere_decided_once_and_survive_the_leader() {
    let (replicas, _) = three("xa-test").await;
    let l = leader(&replicas, None).await;

    let db = replicas[&l].db.clone();
    blocking(move || {
        let t = db.create_table("accounts").unwrap();
        t.put(b"alice", b"100").unwrap();
        t.put(b"bob", b"0").unwrap();
        // The two-phase commit's own table is not the users'.
        assert!(matches!(
            db.create_table("__xa.prepared"),
            Err(Error::InvalidOption { .. })
        ));

        // x1 moves 30 from alice to bob; prepared, it changes no table yet.
        let mut txn = db.begin(TxnOptions::default()).unwrap();
        txn.put(&t, b"alice", b"70").unwrap();
        txn.put(&t, b"bob", b"30").unwrap();
        txn.prepare(b"x1").unwrap();
        assert_eq!(t.get(b"alice").unwrap(), Some(b"100".to_vec()));
        assert!(!lockable(&db, &t, b"alice") && !lockable(&db, &t, b"bob"));
        assert!(lockable(&db, &t, b"carol"));

        // A second prepare under the same id is refused and holds nothing.
        let mut txn = db.begin(TxnOptions::default()).unwrap();
        txn.put(&t, b"carol", b"5").unwrap();
        assert!(matches!(txn.prepare(b"x1"), Err(Error::DuplicateXid(_))));
        assert!(lockable(&db, &t, b"carol"));

        // x2 is rolled back: nothing of it stays.
        let mut txn = db.begin(TxnOptions::default()).unwrap();
        txn.put(&t, b"carol", b"5").unwrap();
        txn.prepare(b"x2").unwrap();
        db.rollback_prepared(b"x2", &WriteOptions::default()).unwrap();
        assert!(lockable(&db, &t, b"carol"));
        assert_eq!(t.get(b"carol").unwrap(), None);
        assert!(matches!(
            db.commit_prepared(b"x2", &WriteOptions::default()),
            Err(Error::UnknownXid(_))
        ));
        assert_eq!(ids(&db), vec![b"x1".to_vec()]);
    })
    .await;

    // Every replica stores x1 and applied none of it.
    caught_up(&replicas, l, None).await;
    for r in replicas.values() {
        let sets = prepared_write_sets(&r.db).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].0, b"x1".to_vec());
        assert_eq!(
            sets[0].1.ops,
            vec![
                WriteOp::Put {
                    table: "accounts".into(),
                    key: b"alice".to_vec(),
                    value: b"70".to_vec()
                },
                WriteOp::Put {
                    table: "accounts".into(),
                    key: b"bob".to_vec(),
                    value: b"30".to_vec()
                },
            ]
        );
        assert_eq!(
            r.db.table("accounts").unwrap().get(b"bob").unwrap(),
            Some(b"0".to_vec())
        );
    }

    // The leader stops before the decision. The new leader finds x1 in its own tables and
    // locks its rows again (what a server does before it serves writes), then commits it.
    replicas[&l].node.shutdown().await;
    let l2 = leader(&replicas, Some(l)).await;
    let db2 = replicas[&l2].db.clone();
    blocking(move || {
        let t = db2.table("accounts").unwrap();
        assert_eq!(lock_prepared_rows(&db2, Duration::from_secs(5)).unwrap(), 1);
        // Once locked, an id is not locked again.
        assert_eq!(lock_prepared_rows(&db2, Duration::from_secs(5)).unwrap(), 0);
        assert_eq!(db2.prepared_lock_ids(), vec![b"x1".to_vec()]);
        // A prepare of a stored id from a node that holds no locks for it is refused by the
        // replicas (the first writes of the term may meet the old term: retried).
        db2.release_prepared(b"x1");
        let mut refused = false;
        for _ in 0..200 {
            let mut txn = db2.begin(TxnOptions::default()).unwrap();
            txn.put(&t, b"dave", b"1").unwrap();
            match txn.prepare(b"x1") {
                Err(Error::DuplicateXid(_)) => {
                    refused = true;
                    break;
                }
                Err(Error::NotLeader { .. }) | Err(Error::Replication(_)) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                other => panic!("a second prepare of a stored id: {other:?}"),
            }
        }
        assert!(refused);
        assert!(lockable(&db2, &t, b"dave"));
        assert_eq!(lock_prepared_rows(&db2, Duration::from_secs(5)).unwrap(), 1);

        // A table dropped between a prepare and its commit does not come back.
        let temp = db2.create_table("temp").unwrap();
        let mut txn = db2.begin(TxnOptions::default()).unwrap();
        txn.put(&temp, b"k", b"v").unwrap();
        txn.prepare(b"x3").unwrap();
        db2.drop_table("temp").unwrap();
        db2.commit_prepared(b"x3", &WriteOptions::default()).unwrap();
        assert!(matches!(db2.table("temp"), Err(Error::TableNotFound(_))));
        assert!(!lockable(&db2, &t, b"alice"));
        // The first decision may meet the old leader's term; retry until one is answered.
        let mut decided = false;
        for _ in 0..200 {
            match db2.commit_prepared(b"x1", &WriteOptions::default()) {
                Ok(()) => {
                    decided = true;
                    break;
                }
                Err(Error::NotLeader { .. }) | Err(Error::Replication(_)) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                // An earlier try of unknown outcome committed it.
                Err(Error::UnknownXid(_)) => {
                    decided = true;
                    break;
                }
                Err(e) => panic!("commit after failover: {e}"),
            }
        }
        assert!(decided, "the new leader never decided");
        assert!(lockable(&db2, &t, b"alice"));
        assert!(db2.prepared_lock_ids().is_empty());
    })
    .await;
    caught_up(&replicas, l2, Some(l)).await;
    for (id, r) in &replicas {
        if *id == l {
            continue;
        }
        let t = r.db.table("accounts").unwrap();
        assert_eq!(t.get(b"alice").unwrap(), Some(b"70".to_vec()));
        assert_eq!(t.get(b"bob").unwrap(), Some(b"30".to_vec()));
        assert!(ids(&r.db).is_empty());
    }
    for r in replicas.values() {
        r.node.shutdown().await;
    }
}
