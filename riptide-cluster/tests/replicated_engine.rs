//! The engine replicated through its Raft group (`PartitionNode`): three nodes on loopback,
//! each over its own database. Writes, transactions and table DDL made with the engine's own
//! API on the leader reach every replica; a follower refuses them; transactions on a hot row
//! serialize through their locks, which are held until the commit is applied; after the
//! leader stops, the new leader takes writes and reads see every acknowledged one.

use riptide::{Error, TxnOptions};
use std::time::Duration;
mod replicas;
use replicas::{blocking, caught_up, leader, three};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engine_writes_replicate_serialize_and_survive_the_leader() {
    let (replicas, members) = three("engine-test").await;
    // A second bootstrap changes nothing.
    let l = leader(&replicas, None).await;
    assert!(!replicas[&l].node.bootstrap(members).await.unwrap());

    // DDL and a transaction on the leader, with the engine's API.
    let db = replicas[&l].db.clone();
    blocking(move || {
        let t = db.create_table("accounts").unwrap();
        let mut txn = db.begin(TxnOptions::default()).unwrap();
        txn.put(&t, b"counter", &0u64.to_be_bytes()).unwrap();
        txn.put(&t, b"gone", b"x").unwrap();
        txn.commit().unwrap();
        t.delete(b"gone").unwrap();
        db.create_table("scratch").unwrap();
        db.drop_table("scratch").unwrap();
    })
    .await;

    // A transaction fenced to another term than the leader's is refused, definitely (its
    // reads were confirmed in a term that is over); fenced to the current one it commits.
    let term = replicas[&l].node.metrics().current_term;
    let db = replicas[&l].db.clone();
    blocking(move || {
        let t = db.table("accounts").unwrap();
        let fenced = |fence: u64| TxnOptions {
            write_options: riptide::WriteOptions {
                replication_fence: Some(fence),
                ..Default::default()
            },
            ..TxnOptions::default()
        };
        let mut txn = db.begin(fenced(term - 1)).unwrap();
        txn.put(&t, b"fenced", b"old").unwrap();
        match txn.commit() {
            Err(Error::NotLeader { leader: Some(why) }) => assert!(why.contains("term moved"), "{why}"),
            other => panic!("a write fenced to an earlier term: {other:?}"),
        }
        assert_eq!(t.get(b"fenced").unwrap(), None);
        let mut txn = db.begin(fenced(term)).unwrap();
        txn.put(&t, b"fenced", b"now").unwrap();
        txn.commit().unwrap();
        assert_eq!(t.get(b"fenced").unwrap(), Some(b"now".to_vec()));
    })
    .await;

    // A follower refuses writes, DDL and linearizable reads, and changes nothing.
    let f = *replicas.keys().find(|id| **id != l).unwrap();
    let fdb = replicas[&f].db.clone();
    caught_up(&replicas, l, None).await;
    blocking(move || {
        let t = fdb.table("accounts").unwrap();
        assert!(matches!(t.put(b"x", b"y"), Err(Error::NotLeader { leader: Some(_) })));
        assert!(matches!(fdb.create_table("nope"), Err(Error::NotLeader { .. })));
        assert_eq!(t.get(b"x").unwrap(), None);
    })
    .await;
    assert!(matches!(
        replicas[&f].node.read_barrier().await,
        Err(Error::NotLeader { .. })
    ));
    replicas[&l].node.read_barrier().await.unwrap();

    // 4 threads x 25 increments of one row: the locks hold until each commit is applied, so
    // none is lost (a lock released at proposal would let two read the same value).
    let mut workers = Vec::new();
    for _ in 0..4 {
        let db = replicas[&l].db.clone();
        workers.push(tokio::task::spawn_blocking(move || {
            let t = db.table("accounts").unwrap();
            let mut done = 0;
            while done < 25 {
                let mut txn = db.begin(TxnOptions::default()).unwrap();
                let v = txn.get_for_update(&t, b"counter").unwrap().unwrap();
                let n = u64::from_be_bytes(v.try_into().unwrap());
                txn.put(&t, b"counter", &(n + 1).to_be_bytes()).unwrap();
                match txn.commit() {
                    Ok(()) => done += 1,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => panic!("commit: {e}"),
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    caught_up(&replicas, l, None).await;
    for r in replicas.values() {
        let t = r.db.table("accounts").unwrap();
        assert_eq!(t.get(b"counter").unwrap(), Some(100u64.to_be_bytes().to_vec()));
        assert_eq!(t.get(b"gone").unwrap(), None);
        assert!(matches!(r.db.table("scratch"), Err(Error::TableNotFound(_))));
    }

    // The leader stops; the other two elect a new one, which takes writes.
    replicas[&l].node.shutdown().await;
    let l2 = leader(&replicas, Some(l)).await;
    let db2 = replicas[&l2].db.clone();
    let wrote = blocking(move || {
        let t = db2.table("accounts").unwrap();
        // The first writes may meet the old leader's term; retry until one is acknowledged.
        for _ in 0..200 {
            match t.put(b"after", b"failover") {
                Ok(()) => return true,
                Err(Error::NotLeader { .. }) | Err(Error::Replication(_)) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("write after failover: {e}"),
            }
        }
        false
    })
    .await;
    assert!(wrote, "the new leader never took a write");
    let t = replicas[&l2].db.table("accounts").unwrap();
    assert_eq!(t.get(b"counter").unwrap(), Some(100u64.to_be_bytes().to_vec()));
    for r in replicas.values() {
        r.node.shutdown().await;
    }
}

/// Many transactions committing at once on the leader share log entries (the proposer's group
/// commit across the Raft log): fewer entries than commits, every acknowledged write on every
/// replica, and a write fenced to an earlier term refused alone, without its neighbours.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_share_log_entries_and_each_keeps_its_own_outcome() {
    let (replicas, _) = three("group-test").await;
    let l = leader(&replicas, None).await;
    let db = replicas[&l].db.clone();
    blocking(move || db.create_table("groups").map(|_| ())).await.unwrap();
    replicas[&l].node.read_barrier().await.unwrap();
    let term = replicas[&l].node.metrics().current_term;
    let before = replicas[&l].node.metrics().last_log_index.unwrap_or(0);
    const WRITERS: u32 = 24;
    const COMMITS: u32 = 20;
    let mut workers = Vec::new();
    for w in 0..WRITERS {
        let db = replicas[&l].db.clone();
        workers.push(tokio::task::spawn_blocking(move || {
            let t = db.table("groups").unwrap();
            let options = |fence: u64| TxnOptions {
                write_options: riptide::WriteOptions {
                    replication_fence: Some(fence),
                    ..Default::default()
                },
                ..TxnOptions::default()
            };
            for c in 0..COMMITS {
                let key = format!("{w:03}-{c:03}");
                // Every fifth commit of odd writers is fenced to a term that is over.
                let stale = w % 2 == 1 && c % 5 == 0;
                let mut txn = db.begin(options(if stale { term - 1 } else { term })).unwrap();
                txn.put(&t, key.as_bytes(), b"v").unwrap();
                match (txn.commit(), stale) {
                    (Ok(()), false) => {}
                    (Err(Error::NotLeader { .. }), true) => {}
                    (other, stale) => panic!("commit {key} (stale: {stale}): {other:?}"),
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let entries = replicas[&l].node.metrics().last_log_index.unwrap_or(0) - before;
    let commits = u64::from(WRITERS * COMMITS - (WRITERS / 2) * (COMMITS / 5));
    assert!(
        entries < commits,
        "{commits} commits took {entries} log entries: none were grouped"
    );
    caught_up(&replicas, l, None).await;
    for r in replicas.values() {
        let t = r.db.table("groups").unwrap();
        for w in 0..WRITERS {
            for c in 0..COMMITS {
                let key = format!("{w:03}-{c:03}");
                let stale = w % 2 == 1 && c % 5 == 0;
                let want = (!stale).then(|| b"v".to_vec());
                assert_eq!(
                    t.get(key.as_bytes()).unwrap(),
                    want,
                    "key {key} on node {}",
                    r.node.id()
                );
            }
        }
    }
    for r in replicas.values() {
        r.node.shutdown().await;
    }
}
