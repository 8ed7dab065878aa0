//! Prepared transactions against a one-replica "cluster" that keeps prepared write sets in
//! memory, as the replication layer keeps them in its log and tables.

use crate::replication::{Phase, ReplicatedOp, ReplicatedWrites, ReplicationDone, Replicator};
use crate::{Db, Error, Isolation, Options, Table, TxnOptions, WriteBatch, WriteOptions};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Applies at once.
    Apply,
    /// Refuses every write: not the leader.
    Refuse,
    /// Answers "unknown" at once and keeps the write until `settle_held`.
    Hold,
}

struct OneReplica {
    db: Mutex<Option<Db>>,
    prepared: Mutex<HashMap<Vec<u8>, Vec<ReplicatedOp>>>,
    mode: Mutex<Mode>,
    held: Mutex<Vec<(ReplicatedWrites, ReplicationDone)>>,
}

impl OneReplica {
    fn apply(&self, writes: ReplicatedWrites) -> crate::Result<()> {
        let db = self.db.lock().clone().unwrap();
        let ops = match writes.phase {
            Phase::OnePhase => writes.ops,
            Phase::Prepare(xid) => {
                self.prepared.lock().insert(xid, writes.ops);
                return Ok(());
            }
            Phase::CommitPrepared(xid) => match self.prepared.lock().remove(&xid) {
                Some(ops) => {
                    let r = self.write(&db, ops);
                    // As the replication layer does once a decision is applied.
                    db.release_prepared(&xid);
                    return r;
                }
                None => return Err(Error::UnknownXid(String::from_utf8_lossy(&xid).into())),
            },
            Phase::RollbackPrepared(xid) => {
                return match self.prepared.lock().remove(&xid) {
                    Some(_) => {
                        db.release_prepared(&xid);
                        Ok(())
                    }
                    None => Err(Error::UnknownXid(String::from_utf8_lossy(&xid).into())),
                }
            }
        };
        self.write(&db, ops)
    }

    fn write(&self, db: &Db, ops: Vec<ReplicatedOp>) -> crate::Result<()> {
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                ReplicatedOp::Put { table, key, value } => batch.put(&db.table(&table)?, &key, &value)?,
                ReplicatedOp::Delete { table, key } => batch.delete(&db.table(&table)?, &key)?,
                ReplicatedOp::CreateTable { name } => drop(db.create_table_unreplicated(&name)?),
                ReplicatedOp::DropTable { name } => db.drop_table_unreplicated(&name)?,
            }
        }
        db.write_unreplicated(batch, &WriteOptions::default())
    }

    /// Applies the held writes; their writers hear nothing yet.
    fn apply_held(&self) -> Vec<ReplicationDone> {
        let held = std::mem::take(&mut *self.held.lock());
        held.into_iter()
            .map(|(writes, done)| {
                self.apply(writes).unwrap();
                done
            })
            .collect()
    }

    /// Settles the held writes as applied.
    fn settle_held(&self) {
        for done in self.apply_held() {
            done.settle(Ok(()));
        }
    }

    /// Settles the held writes as never to be applied.
    fn refuse_held(&self) {
        for (_, done) in std::mem::take(&mut *self.held.lock()) {
            done.settle(Err(Error::NotLeader { leader: None }));
        }
    }
}

impl Replicator for OneReplica {
    fn replicate(&self, writes: ReplicatedWrites, mut done: ReplicationDone) {
        match *self.mode.lock() {
            Mode::Apply => {
                let result = self.apply(writes);
                done.settle(result)
            }
            Mode::Refuse => done.settle(Err(Error::NotLeader { leader: None })),
            Mode::Hold => {
                done.answer(Err(Error::Replication("held".into())));
                self.held.lock().push((writes, done));
            }
        }
    }
}

fn open() -> (tempfile::TempDir, Db, Table, Arc<OneReplica>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let t = db.create_table("t").unwrap();
    let r = Arc::new(OneReplica {
        db: Mutex::new(Some(db.clone())),
        prepared: Mutex::new(HashMap::new()),
        mode: Mutex::new(Mode::Apply),
        held: Mutex::new(Vec::new()),
    });
    db.set_replicator(r.clone()).unwrap();
    (dir, db, t, r)
}

/// True when another transaction can lock `key` of `t` at once (it then rolls back).
fn lockable(db: &Db, t: &Table, key: &[u8]) -> bool {
    let mut txn = db.begin(TxnOptions::default()).unwrap();
    txn.set_lock_timeout(Duration::ZERO);
    let r = txn.get_for_update(t, key);
    match r {
        Ok(_) => true,
        Err(Error::LockTimeout { .. }) => false,
        Err(e) => panic!("{e}"),
    }
}

fn prepare_put(db: &Db, t: &Table, xid: &[u8], key: &[u8], value: &[u8]) -> crate::Result<()> {
    let mut txn = db.begin(TxnOptions::default()).unwrap();
    txn.put(t, key, value).unwrap();
    txn.prepare(xid)
}

#[test]
fn a_prepared_transaction_keeps_its_locks_until_its_commit_applies_it() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    assert_eq!(t.get(b"a").unwrap(), None, "prepared writes are applied to no table");
    assert!(!lockable(&db, &t, b"a"), "the prepared row stays locked");
    assert!(lockable(&db, &t, b"b"));
    assert_eq!(db.prepared_lock_ids(), vec![b"x1".to_vec()]);
    assert_eq!(r.prepared.lock().len(), 1);

    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert_eq!(t.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert!(lockable(&db, &t, b"a"));
    assert!(db.prepared_lock_ids().is_empty());
    // Decided once: a second decision finds nothing prepared.
    assert!(matches!(
        db.commit_prepared(b"x1", &WriteOptions::default()),
        Err(Error::UnknownXid(_))
    ));
    r.db.lock().take();
}

#[test]
fn a_rollback_forgets_the_writes_and_an_unknown_id_releases_nothing() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    prepare_put(&db, &t, b"x2", b"b", b"2").unwrap();
    assert!(matches!(
        db.rollback_prepared(b"nope", &WriteOptions::default()),
        Err(Error::UnknownXid(_))
    ));
    assert!(!lockable(&db, &t, b"a") && !lockable(&db, &t, b"b"));
    db.rollback_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert!(lockable(&db, &t, b"a"));
    assert!(!lockable(&db, &t, b"b"), "another id's locks stay");
    assert_eq!(t.get(b"a").unwrap(), None);
    db.commit_prepared(b"x2", &WriteOptions::default()).unwrap();
    assert_eq!(t.get(b"b").unwrap(), Some(b"2".to_vec()));
    r.db.lock().take();
}

#[test]
fn a_refused_decision_keeps_the_locks_and_a_refused_prepare_releases_them() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    *r.mode.lock() = Mode::Refuse;
    assert!(matches!(
        db.commit_prepared(b"x1", &WriteOptions::default()),
        Err(Error::NotLeader { .. })
    ));
    assert!(!lockable(&db, &t, b"a"), "still prepared: still locked");
    assert!(matches!(
        prepare_put(&db, &t, b"x2", b"b", b"2"),
        Err(Error::NotLeader { .. })
    ));
    assert!(lockable(&db, &t, b"b"), "nothing prepared: nothing locked");
    *r.mode.lock() = Mode::Apply;
    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert!(lockable(&db, &t, b"a"));
    r.db.lock().take();
}

#[test]
fn a_prepare_of_unknown_outcome_keeps_its_locks_until_it_settles() {
    let (_dir, db, t, r) = open();
    *r.mode.lock() = Mode::Hold;
    assert!(matches!(
        prepare_put(&db, &t, b"x1", b"a", b"1"),
        Err(Error::Replication(_))
    ));
    assert!(!lockable(&db, &t, b"a"), "it may still be prepared");
    assert_eq!(db.prepared_lock_ids(), vec![b"x1".to_vec()]);
    *r.mode.lock() = Mode::Apply;
    r.settle_held();
    assert!(!lockable(&db, &t, b"a"), "settled as prepared: the id keeps its locks");
    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert!(lockable(&db, &t, b"a"));
    assert_eq!(t.get(b"a").unwrap(), Some(b"1".to_vec()));

    // Unknown, then settled as never applied: the locks go.
    *r.mode.lock() = Mode::Hold;
    assert!(prepare_put(&db, &t, b"x2", b"b", b"2").is_err());
    assert!(!lockable(&db, &t, b"b"));
    r.refuse_held();
    assert!(lockable(&db, &t, b"b"));
    assert!(db.prepared_lock_ids().is_empty());
    r.db.lock().take();
}

#[test]
fn a_decision_applied_before_its_prepare_is_answered_releases_the_locks() {
    // The coordinator heard "unknown" for the prepare and decided; the decision was applied
    // before the prepare's answer reached this node.
    let (_dir, db, t, r) = open();
    *r.mode.lock() = Mode::Hold;
    assert!(prepare_put(&db, &t, b"x1", b"a", b"1").is_err());
    let unanswered = r.apply_held();
    *r.mode.lock() = Mode::Apply;
    db.rollback_prepared(b"x1", &WriteOptions::default()).unwrap();
    for done in unanswered {
        done.settle(Ok(()));
    }
    assert!(lockable(&db, &t, b"a"), "no lock outlives its id's decision");
    assert!(db.prepared_lock_ids().is_empty());
    r.db.lock().take();
}

#[test]
fn an_id_prepared_twice_or_locked_again_is_refused_and_takes_nothing() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    assert!(matches!(
        prepare_put(&db, &t, b"x1", b"d", b"4"),
        Err(Error::DuplicateXid(_))
    ));
    assert!(lockable(&db, &t, b"d"));
    assert_eq!(r.prepared.lock().len(), 1, "the second prepare was not proposed");
    let rows = vec![(t.clone(), b"c".to_vec())];
    assert!(matches!(
        db.lock_prepared(b"x1", &rows, Duration::ZERO),
        Err(Error::DuplicateXid(_))
    ));
    assert!(lockable(&db, &t, b"c"));
    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert!(lockable(&db, &t, b"a"));
    r.db.lock().take();
}

#[test]
fn rows_locked_again_after_a_failover_hold_until_the_decision_and_fail_whole() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    // As on a new leader: the locks are gone, the stored write set is not.
    db.release_prepared(b"x1");
    assert!(lockable(&db, &t, b"a"));
    let rows = vec![(t.clone(), b"a".to_vec()), (t.clone(), b"c".to_vec())];
    db.lock_prepared(b"x1", &rows, Duration::ZERO).unwrap();
    assert!(!lockable(&db, &t, b"a") && !lockable(&db, &t, b"c"));
    assert_eq!(db.prepared_lock_ids(), vec![b"x1".to_vec()]);

    // A row another transaction holds: nothing of this call stays locked.
    let mut other = db.begin(TxnOptions::default()).unwrap();
    other.put(&t, b"z", b"9").unwrap();
    let rows = vec![(t.clone(), b"y".to_vec()), (t.clone(), b"z".to_vec())];
    assert!(matches!(
        db.lock_prepared(b"x2", &rows, Duration::ZERO),
        Err(Error::LockTimeout { .. })
    ));
    assert!(lockable(&db, &t, b"y"));
    assert!(!db.prepared_lock_ids().contains(&b"x2".to_vec()));
    drop(other);

    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert!(
        lockable(&db, &t, b"a") && lockable(&db, &t, b"c"),
        "the decision releases the whole set"
    );
    assert_eq!(db.txn_stats().locked_rows, 0);
    r.db.lock().take();
}

#[test]
fn a_waiter_on_a_prepared_row_gets_it_after_the_decision_and_reads_its_write() {
    let (_dir, db, t, r) = open();
    prepare_put(&db, &t, b"x1", b"a", b"1").unwrap();
    let waiter = {
        let (db, t) = (db.clone(), t.clone());
        std::thread::spawn(move || {
            let mut txn = db
                .begin(TxnOptions {
                    isolation: Isolation::ReadCommitted,
                    ..Default::default()
                })
                .unwrap();
            txn.set_lock_timeout(Duration::from_secs(20));
            let seen = txn.get_for_update(&t, b"a").unwrap();
            txn.put(&t, b"a", b"2").unwrap();
            txn.commit().unwrap();
            seen
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished());
    db.commit_prepared(b"x1", &WriteOptions::default()).unwrap();
    assert_eq!(
        waiter.join().unwrap(),
        Some(b"1".to_vec()),
        "the waiter reads the prepared write"
    );
    assert_eq!(t.get(b"a").unwrap(), Some(b"2".to_vec()));
    r.db.lock().take();
}

#[test]
fn a_database_without_a_replicator_refuses_to_prepare() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let t = db.create_table("t").unwrap();
    assert!(matches!(
        prepare_put(&db, &t, b"x1", b"a", b"1"),
        Err(Error::InvalidOption { option: "prepare", .. })
    ));
    assert!(lockable(&db, &t, b"a"));
    assert!(matches!(
        db.commit_prepared(b"x1", &WriteOptions::default()),
        Err(Error::InvalidOption { .. })
    ));
    let mut txn = db.begin(TxnOptions::default()).unwrap();
    txn.put(&t, b"a", b"1").unwrap();
    assert!(matches!(
        txn.prepare(b""),
        Err(Error::InvalidOption { option: "xid", .. })
    ));
}
