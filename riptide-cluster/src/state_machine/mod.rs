//! The state machine of one partition (openraft's `RaftStateMachine`): committed write sets
//! applied to the partition's database, and snapshots of its tables.
//!
//! Invariants:
//! - Each entry is applied in one atomic write: its write set, its log id as the applied one
//!   and, for a membership entry, the new membership ([`STATE_TABLE`]). A crash keeps each
//!   entry whole or not at all, and in log order, so replaying the log from the applied id
//!   redoes exactly what was lost.
//! - Applying never fails on a write set: one that the engine would refuse is refused by
//!   `WriteSet::validate` on every replica alike, as is one whose fence names another term
//!   than its entry's (`WriteSet::fenced_out`), and only its index is applied (openraft stops a
//!   node whose apply fails, and every replica would stop on the same entry).
//!   Applies are not synced (the Raft log is); building a snapshot syncs them first, since the
//!   log may then be purged up to the snapshot.
//! - A snapshot is read at one engine snapshot: its rows, applied id and membership agree.
//!   Installing one replaces every partition table's rows, the applied id and the membership
//!   in one synced write.
//! - Write sets never touch a table whose name starts with [`RESERVED_PREFIX`].
//! - A table creation or drop (alone in its write set) is durable on its own, before the
//!   entry's index is applied, and idempotent: replayed after a crash it finds its work done.
//! - The apply listener hears the tables an apply changed once they are visible, and must not
//!   wait for anything the apply loop holds.
//!
//! Snapshots are, for now, the partition's rows in one encoded value held in memory (openraft
//! rebuilds one at startup if the log was purged); issue 24 asks for the engine's checkpoint
//! instead. A build never replaces a newer snapshot installed meanwhile.

use crate::codec::{decode, encode};
use crate::engine::{blocking, synced, table_or_create};
use crate::types::{Applied, TypeConfig, WriteOp};
use crate::{RESERVED_PREFIX, STATE_TABLE};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;
use riptide::{Db, ReadOptions, Table, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type NodeId = u64;
type Membership = StoredMembership<NodeId, BasicNode>;
const APPLIED_KEY: &[u8] = b"applied";
const MEMBERSHIP_KEY: &[u8] = b"membership";
const SNAPSHOT_META_KEY: &[u8] = b"snapshot_meta";

/// The rows of every partition table, as a snapshot carries them.
#[derive(Serialize, Deserialize, Debug, Default)]
struct SnapshotBody {
    tables: Vec<TableRows>,
}

#[derive(Serialize, Deserialize, Debug)]
struct TableRows {
    name: String,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// One partition's state machine; cheap to clone (clones share the database and the current
/// snapshot).
#[derive(Clone)]
pub struct StateMachine {
    db: Db,
    state: Table,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    /// Makes snapshot ids unique within this process.
    builds: Arc<AtomicU64>,
    /// Told the tables each apply (or snapshot install) changed.
    listener: Option<ApplyListener>,
}

/// Called, on a blocking thread, with the names of the tables that applied entries (or an
/// installed snapshot) changed, once they are visible; it must not wait for the Raft node (a
/// server refreshes its SQL catalog from it, on another thread).
pub type ApplyListener = Arc<dyn Fn(&[String]) + Send + Sync>;

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine").field("db", &self.db.path()).finish()
    }
}

fn sm_read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_state_machine(AnyError::new(&e)).into()
}

fn sm_write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_state_machine(AnyError::new(&e)).into()
}

fn snapshot_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_snapshot(None, AnyError::new(&e)).into()
}

/// A write set named a reserved table.
#[derive(Debug)]
struct ReservedTable(String);

impl std::fmt::Display for ReservedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a write set may not write table {:?}: the cluster layer's own",
            self.0
        )
    }
}

impl std::error::Error for ReservedTable {}

impl StateMachine {
    /// The state machine of the partition database `db`, creating its table on first use.
    pub fn open(db: &Db) -> riptide::Result<Self> {
        Ok(StateMachine {
            db: db.clone(),
            state: table_or_create(db, STATE_TABLE)?,
            current: Arc::new(Mutex::new(None)),
            builds: Arc::new(AtomicU64::new(0)),
            listener: None,
        })
    }

    /// The same state machine, telling `listener` what each apply changed.
    pub fn with_apply_listener(mut self, listener: ApplyListener) -> Self {
        self.listener = Some(listener);
        self
    }

    fn read_state(&self, opts: &ReadOptions) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let applied = match self.state.get_opt(APPLIED_KEY, opts).map_err(sm_read_err)? {
            Some(v) => decode(&v, "applied log id").map_err(sm_read_err)?,
            None => None,
        };
        let membership = match self.state.get_opt(MEMBERSHIP_KEY, opts).map_err(sm_read_err)? {
            Some(v) => decode(&v, "membership").map_err(sm_read_err)?,
            None => Membership::default(),
        };
        Ok((applied, membership))
    }

    /// Applies one entry in one engine write: its write set (unless refused), its log id as the
    /// applied one and, for a membership entry, the new membership. A write set the engine
    /// would refuse is refused here first, identically on every replica, and only its index is
    /// applied; only an engine failure is an error.
    fn apply_entry(
        &self,
        entry: &Entry<TypeConfig>,
        touched: &mut Vec<String>,
    ) -> Result<Applied, StorageError<NodeId>> {
        let apply_err = |e: &dyn std::error::Error| -> StorageError<NodeId> {
            StorageIOError::<NodeId>::apply(entry.log_id, AnyError::error(e.to_string())).into()
        };
        let mut batch = WriteBatch::new();
        let mut applied = Applied::default();
        match &entry.payload {
            EntryPayload::Blank => {}
            EntryPayload::Normal(set) => match set
                .validate()
                .and_then(|()| set.fenced_out(entry.log_id.leader_id.term).map_or(Ok(()), Err))
            {
                Err(reason) => applied.refused = Some(reason),
                Ok(()) => {
                    for op in &set.ops {
                        let Some(table_name) = op.table() else {
                            continue; // a fence: checked above
                        };
                        touched.push(table_name.to_string());
                        match op {
                            WriteOp::Put { table, key, value } => {
                                let table = table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                                batch.put(&table, key, value).map_err(|e| apply_err(&e))?;
                            }
                            WriteOp::Delete { table, key } => {
                                let table = table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                                batch.delete(&table, key).map_err(|e| apply_err(&e))?;
                            }
                            // Durable on their own (the engine's DDL is), before the index
                            // below; replayed after a crash they find their work done.
                            WriteOp::CreateTable { table } => {
                                table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                            }
                            WriteOp::DropTable { table } => match self.db.drop_table_unreplicated(table) {
                                Ok(()) | Err(riptide::Error::TableNotFound(_)) => {}
                                Err(e) => return Err(apply_err(&e)),
                            },
                            WriteOp::Fence { .. } => {}
                        }
                        applied.writes += 1;
                    }
                }
            },
            EntryPayload::Membership(m) => {
                let stored = Membership::new(Some(entry.log_id), m.clone());
                let bytes = encode(&stored).map_err(|e| apply_err(&e))?;
                batch
                    .put(&self.state, MEMBERSHIP_KEY, &bytes)
                    .map_err(|e| apply_err(&e))?;
            }
        }
        let bytes = encode(&Some(entry.log_id)).map_err(|e| apply_err(&e))?;
        batch.put(&self.state, APPLIED_KEY, &bytes).map_err(|e| apply_err(&e))?;
        self.db
            .write_unreplicated(batch, &WriteOptions::default())
            .map_err(|e| apply_err(&e))?;
        Ok(applied)
    }

    /// Makes `stored` the current snapshot unless a newer one is (a build that read the engine
    /// before an install finished must not replace the installed snapshot).
    fn keep_if_newer(&self, stored: &StoredSnapshot) {
        let mut current = self.current.lock();
        let newer = match &*current {
            Some(c) => stored.meta.last_log_id >= c.meta.last_log_id,
            None => true,
        };
        if newer {
            *current = Some(stored.clone());
        }
    }

    /// The partition's tables (every table but the cluster layer's own), sorted by name.
    fn partition_tables(&self) -> riptide::Result<Vec<Table>> {
        self.db
            .tables()
            .into_iter()
            .filter(|name| !name.starts_with(RESERVED_PREFIX))
            .map(|name| self.db.table(&name))
            .collect()
    }

    /// The partition's rows at `opts`' snapshot.
    fn read_rows(&self, opts: &ReadOptions) -> riptide::Result<SnapshotBody> {
        let mut body = SnapshotBody::default();
        for table in self.partition_tables()? {
            let rows = table.iter(opts)?.collect::<riptide::Result<Vec<_>>>()?;
            body.tables.push(TableRows {
                name: table.name().to_string(),
                rows,
            });
        }
        Ok(body)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let this = self.clone();
        let stored = blocking(move || -> Result<StoredSnapshot, StorageError<NodeId>> {
            let opts = ReadOptions {
                snapshot: Some(this.db.snapshot()),
                ..ReadOptions::default()
            };
            let (last_log_id, last_membership) = this.read_state(&opts)?;
            let body = this.read_rows(&opts).map_err(snapshot_err)?;
            let data = encode(&body).map_err(snapshot_err)?;
            let build = this.builds.fetch_add(1, Ordering::Relaxed);
            let snapshot_id = match last_log_id {
                Some(id) => format!("{}-{}-{}-{build}", id.leader_id.term, id.leader_id.node_id, id.index),
                None => format!("none-{build}"),
            };
            let meta = SnapshotMeta {
                last_log_id,
                last_membership,
                snapshot_id,
            };
            // Synced: every apply before it reaches the disk with it, since the log may now be
            // purged up to `last_log_id`.
            let mut batch = WriteBatch::new();
            let meta_bytes = encode(&meta).map_err(sm_write_err)?;
            batch
                .put(&this.state, SNAPSHOT_META_KEY, &meta_bytes)
                .map_err(sm_write_err)?;
            this.db.write_unreplicated(batch, &synced()).map_err(sm_write_err)?;
            Ok(StoredSnapshot { meta, data })
        })
        .await??;
        self.keep_if_newer(&stored);
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        self.read_state(&ReadOptions::default())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let this = self.clone();
        blocking(move || {
            let mut touched = Vec::new();
            let results = entries.iter().map(|e| this.apply_entry(e, &mut touched)).collect();
            if let (Some(listener), false) = (&this.listener, touched.is_empty()) {
                touched.sort();
                touched.dedup();
                listener(&touched);
            }
            results
        })
        .await?
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let body: SnapshotBody = decode(&data, "snapshot").map_err(snapshot_err)?;
        let this = self.clone();
        let meta_copy = meta.clone();
        blocking(move || -> Result<(), StorageError<NodeId>> {
            let mut batch = WriteBatch::new();
            // Every row of the partition goes, then the snapshot's rows come, in one write.
            for table in this.partition_tables().map_err(sm_read_err)? {
                for row in table.iter(&ReadOptions::default()).map_err(sm_read_err)? {
                    let (key, _) = row.map_err(sm_read_err)?;
                    batch.delete(&table, &key).map_err(sm_write_err)?;
                }
            }
            for t in &body.tables {
                if t.name.starts_with(RESERVED_PREFIX) {
                    return Err(snapshot_err(ReservedTable(t.name.clone())));
                }
                let table = table_or_create(&this.db, &t.name).map_err(sm_write_err)?;
                for (k, v) in &t.rows {
                    batch.put(&table, k, v).map_err(sm_write_err)?;
                }
            }
            let applied = encode(&meta_copy.last_log_id).map_err(sm_write_err)?;
            batch.put(&this.state, APPLIED_KEY, &applied).map_err(sm_write_err)?;
            let membership = encode(&meta_copy.last_membership).map_err(sm_write_err)?;
            batch
                .put(&this.state, MEMBERSHIP_KEY, &membership)
                .map_err(sm_write_err)?;
            let meta_bytes = encode(&meta_copy).map_err(sm_write_err)?;
            batch
                .put(&this.state, SNAPSHOT_META_KEY, &meta_bytes)
                .map_err(sm_write_err)?;
            this.db.write_unreplicated(batch, &synced()).map_err(sm_write_err)?;
            if let Some(listener) = &this.listener {
                listener(&body.tables.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
            }
            Ok(())
        })
        .await??;
        self.keep_if_newer(&StoredSnapshot {
            meta: meta.clone(),
            data,
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.current.lock().clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
