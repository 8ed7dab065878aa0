//! The hook through which a replication layer (the `riptide-cluster` crate) takes over a
//! database's writes: once a [`Replicator`] is installed ([`crate::Db::set_replicator`]), every
//! write batch, transaction commit, `create_table` and `drop_table` is handed to it instead of
//! the local write pipeline. The replicator makes the writes durable on a majority of replicas
//! and then applies them to every replica's database, this one included, through the
//! `*_unreplicated` entry points ([`crate::Db::write_unreplicated`],
//! [`crate::Db::create_table_unreplicated`], [`crate::Db::drop_table_unreplicated`]), which
//! are also how it keeps its own state (the Raft log) in the same database.
//!
//! Invariants:
//! - A replicated write is acknowledged (its handle completes with `Ok`) only when the
//!   replicator says so, which it does once the writes are applied here; a transaction's row
//!   locks are released only when the write is settled (applied, or known never to commit),
//!   so the next transaction on a locked row reads the applied value and the replicas' order
//!   of commits is the order of the replicator's log, even when the writer was told early
//!   that the outcome is unknown.
//! - A prepare ([`Phase::Prepare`]) registers its transaction's row locks under its id
//!   instead of releasing them; the replication layer releases them with
//!   [`crate::Db::release_prepared`] once the id's decision is applied (`txn/prepared.rs`).
//! - The engine names tables by name in [`ReplicatedOp`]: table ids are each replica's own.
//! - Nothing in this crate waits on the network: the replicator is called on the writer's
//!   thread and must return at once, reporting through [`ReplicationDone`] from its own
//!   threads.

use crate::error::Result;
use crate::write::batch::WriteBatch;
use crate::write::completion::Completion;
use crate::write::pipeline::OnPlaced;
use std::sync::Arc;

/// One replicated write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicatedOp {
    /// Sets `key` of `table` to `value`.
    Put {
        /// The table's name.
        table: String,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes `key` of `table`.
    Delete {
        /// The table's name.
        table: String,
        /// The key.
        key: Vec<u8>,
    },
    /// Creates the table `name` with default options (alone in its [`ReplicatedWrites`]).
    CreateTable {
        /// The table's name.
        name: String,
    },
    /// Drops the table `name` (alone in its [`ReplicatedWrites`]).
    DropTable {
        /// The table's name.
        name: String,
    },
}

/// The writes of one batch or commit, to be applied atomically on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicatedWrites {
    /// The writes, in the batch's order.
    pub ops: Vec<ReplicatedOp>,
    /// The writer's [`crate::WriteOptions::replication_fence`]: a replicator that can tell
    /// refuses to commit the writes under any other (Raft) term, so that writes computed from
    /// reads confirmed in one term never commit in another.
    pub fence: Option<u64>,
    /// Which step of a commit this is: one phase (the default), or a step of two-phase commit
    /// ([`crate::Txn::prepare`]).
    pub phase: Phase,
}

/// Which step of a commit a [`ReplicatedWrites`] is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Phase {
    /// The writes commit now, on every replica.
    #[default]
    OnePhase,
    /// Two-phase commit, first step: the writes are stored durably on every replica under
    /// this transaction id and applied to no table until the decision.
    Prepare(Vec<u8>),
    /// The decision for the prepared transaction of this id: apply its stored writes and
    /// forget it (`ops` is empty). Refused with [`crate::Error::UnknownXid`] when no
    /// transaction of this id is prepared.
    CommitPrepared(Vec<u8>),
    /// The decision for the prepared transaction of this id: forget its writes (`ops` is
    /// empty); refused like [`Phase::CommitPrepared`].
    RollbackPrepared(Vec<u8>),
}

/// How a replicator reports a write's outcome, in up to two steps:
/// - [`ReplicationDone::answer`] tells the writer: `Ok` once the write is durable on a
///   majority and applied to this database; [`crate::Error::NotLeader`] when it was not taken
///   (this replica does not lead, or the Raft layer refused it as fenced to another term: not applied, and never will be); [`crate::Error::Replication`] when
///   its outcome is not known (yet): it may still commit.
/// - [`ReplicationDone::settle`] says the write's fate is known for good (committed and
///   applied, or never to commit), and only then releases what it held: a transaction's row
///   locks, so that no later transaction on those rows can commit before an unsettled write
///   whose outcome the writer was told is unknown.
///
/// Dropped without either, it answers [`crate::Error::Replication`] and releases the locks (the
/// replication layer stopped).
pub struct ReplicationDone {
    completion: Option<Arc<Completion>>,
    on_placed: Option<OnPlaced>,
}

impl ReplicationDone {
    pub(crate) fn new(completion: Arc<Completion>, on_placed: Option<OnPlaced>) -> Self {
        ReplicationDone {
            completion: Some(completion),
            on_placed,
        }
    }

    /// Tells the writer `result` (at most once; later answers are ignored). On `Ok` the locks
    /// are released first, as the write is then settled.
    pub fn answer(&mut self, result: Result<()>) {
        if result.is_ok() {
            if let Some(hook) = self.on_placed.take() {
                hook();
            }
        }
        if let Some(c) = self.completion.take() {
            c.complete(result);
        }
    }

    /// The write's fate is known for good: answers the writer if not answered yet, and
    /// releases what the write held (before the answer, so that a writer told of a failure
    /// finds its rows free).
    pub fn settle(mut self, result: Result<()>) {
        if result.is_err() {
            drop(self.on_placed.take());
        }
        self.answer(result);
    }
}

impl Drop for ReplicationDone {
    fn drop(&mut self) {
        if let Some(c) = self.completion.take() {
            c.complete(Err(crate::Error::Replication(
                "the replication layer dropped the write".into(),
            )));
        }
        // `on_placed`, if still here, is dropped unrun: that releases the locks too.
    }
}

/// What a replication layer implements.
pub trait Replicator: Send + Sync + 'static {
    /// Takes `writes` over and reports through `done` (see [`ReplicationDone`]). Must not
    /// block: it runs on the thread of the writer (or of a transaction's commit).
    fn replicate(&self, writes: ReplicatedWrites, done: ReplicationDone);
}

impl ReplicatedWrites {
    /// The ops of `batch`, naming each table.
    pub(crate) fn from_batch(batch: &WriteBatch, fence: Option<u64>) -> ReplicatedWrites {
        let name_of = |id: u32| {
            batch
                .tables
                .iter()
                .find(|t| t.id == id)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        };
        let ops = batch
            .ops(0)
            .map(|op| {
                let table = name_of(op.table);
                match op.kind {
                    crate::key::ValueKind::Put => ReplicatedOp::Put {
                        table,
                        key: op.key.to_vec(),
                        value: op.value.to_vec(),
                    },
                    _ => ReplicatedOp::Delete {
                        table,
                        key: op.key.to_vec(),
                    },
                }
            })
            .collect();
        ReplicatedWrites {
            ops,
            fence,
            phase: Phase::OnePhase,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Error, Options, WriteOptions};
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// A replicator that applies locally at once (a one-replica "cluster"), or refuses.
    struct Loopback {
        db: Mutex<Option<Db>>,
        seen: Mutex<Vec<ReplicatedWrites>>,
        refuse: bool,
    }

    impl Replicator for Loopback {
        fn replicate(&self, writes: ReplicatedWrites, done: ReplicationDone) {
            self.seen.lock().push(writes.clone());
            if self.refuse {
                return done.settle(Err(Error::NotLeader {
                    leader: Some("node 2 at 127.0.0.1:1".into()),
                }));
            }
            let db = self.db.lock().clone().unwrap();
            let mut batch = WriteBatch::new();
            let mut result = Ok(());
            for op in writes.ops {
                result = match op {
                    ReplicatedOp::Put { table, key, value } => {
                        db.table(&table).and_then(|t| batch.put(&t, &key, &value))
                    }
                    ReplicatedOp::Delete { table, key } => db.table(&table).and_then(|t| batch.delete(&t, &key)),
                    ReplicatedOp::CreateTable { name } => db.create_table_unreplicated(&name).map(|_| ()),
                    ReplicatedOp::DropTable { name } => db.drop_table_unreplicated(&name),
                };
                if result.is_err() {
                    break;
                }
            }
            done.settle(result.and_then(|()| db.write_unreplicated(batch, &WriteOptions::default())));
        }
    }

    fn open(refuse: bool) -> (tempfile::TempDir, Db, Arc<Loopback>) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let r = Arc::new(Loopback {
            db: Mutex::new(Some(db.clone())),
            seen: Mutex::new(Vec::new()),
            refuse,
        });
        db.set_replicator(r.clone()).unwrap();
        (dir, db, r)
    }

    #[test]
    fn writes_tables_and_commits_go_through_the_replicator() {
        let (_dir, db, r) = open(false);
        let t = db.create_table("t").unwrap();
        t.put(b"a", b"1").unwrap();
        let mut txn = db.begin(Default::default()).unwrap();
        txn.put(&t, b"b", b"2").unwrap();
        txn.delete(&t, b"a").unwrap();
        txn.commit().unwrap();
        assert_eq!(t.get(b"a").unwrap(), None);
        assert_eq!(t.get(b"b").unwrap(), Some(b"2".to_vec()));
        db.drop_table("t").unwrap();
        assert!(matches!(db.table("t"), Err(Error::TableNotFound(_))));
        let seen = r.seen.lock();
        assert_eq!(seen[0].ops, vec![ReplicatedOp::CreateTable { name: "t".into() }]);
        assert_eq!(
            seen[1].ops,
            vec![ReplicatedOp::Put {
                table: "t".into(),
                key: b"a".to_vec(),
                value: b"1".to_vec()
            }]
        );
        assert_eq!(seen[2].ops.len(), 2);
        assert_eq!(seen[3].ops, vec![ReplicatedOp::DropTable { name: "t".into() }]);
        assert_eq!(seen.len(), 4);
        drop(seen);
        // A second replicator is refused.
        assert!(matches!(db.set_replicator(r.clone()), Err(Error::InvalidOption { .. })));
        r.db.lock().take();
    }

    #[test]
    fn a_refusing_replicator_fails_writes_and_releases_locks() {
        let (_dir, db, r) = open(true);
        let t = db.create_table_unreplicated("t").unwrap();
        assert!(matches!(t.put(b"a", b"1"), Err(Error::NotLeader { .. })));
        assert!(matches!(db.create_table("u"), Err(Error::NotLeader { .. })));
        let mut txn = db.begin(Default::default()).unwrap();
        txn.put(&t, b"a", b"1").unwrap();
        assert!(matches!(txn.commit(), Err(Error::NotLeader { .. })));
        // The row lock is free again: another transaction takes it at once.
        let mut txn = db.begin(Default::default()).unwrap();
        txn.set_lock_timeout(std::time::Duration::ZERO);
        txn.put(&t, b"a", b"2").unwrap();
        assert!(txn.commit_async().wait().is_err());
        assert_eq!(t.get(b"a").unwrap(), None);
        // The replication layer's own writes still go to the engine.
        let mut b = WriteBatch::new();
        b.put(&t, b"own", b"state").unwrap();
        db.write_unreplicated(b, &WriteOptions::default()).unwrap();
        assert_eq!(t.get(b"own").unwrap(), Some(b"state".to_vec()));
        r.db.lock().take();
    }
}
