//! The state machine of one partition (openraft's `RaftStateMachine`): committed write sets
//! applied to the partition's database, and snapshots by engine checkpoint (`snapshots.rs`).
//!
//! Invariants:
//! - The entries of one apply call go in as few atomic writes as their sizes and DDL allow,
//!   each holding whole entries (write sets, any new membership) and the last one's log id as
//!   the applied one ([`STATE_TABLE`]). A crash keeps each entry whole or not at all, and in
//!   log order, so replaying the log from the applied id redoes exactly what was lost.
//! - Applying never fails on a write set: one that the engine would refuse is refused by
//!   `WriteSet::validate` on every replica alike, as is one whose fence names another term
//!   than its entry's (`WriteSet::fenced_out`), and only its index is applied (openraft stops a
//!   node whose apply fails, and every replica would stop on the same entry).
//!   Applies are not synced (the Raft log is); building a snapshot syncs them first (the
//!   checkpoint syncs the redo log), since the log may then be purged up to the snapshot.
//! - A snapshot is an archive of an engine checkpoint, with the applied id and membership read
//!   from that checkpoint: its rows, applied id and membership agree. It is a file in the
//!   partition's `raft-snapshots/` directory, so neither a build nor a transfer holds the
//!   partition in memory, and the current snapshot survives a restart.
//! - Installing one replaces the partition's tables and rows (a table the snapshot lacks is
//!   dropped), the applied id and the membership under a durable marker, resumed at the next
//!   open after a crash (`snapshots.rs`).
//! - Write sets never touch a table whose name starts with [`crate::RESERVED_PREFIX`].
//! - A table creation or drop (alone in its write set) is durable on its own, before the
//!   entry's index is applied, and idempotent: replayed after a crash it finds its work done.
//! - The apply listener hears the tables an apply changed once they are visible, and must not
//!   wait for anything the apply loop holds.
//! - A build never replaces a newer snapshot installed meanwhile.

mod prepared;
mod snapshots;

pub use prepared::{is_prepared, lock_prepared_rows, prepared_write_sets};

pub use snapshots::SnapshotError;

use crate::codec::encode;
use crate::engine::{blocking, stored, stored_applied, table_or_create, APPLIED_KEY};
use crate::inflight::InflightWrites;
use crate::snapshot::{Kind, SnapshotDir, SnapshotFile, SnapshotStats};
use crate::types::{Applied, TypeConfig, WriteOp, WriteSet};
use crate::STATE_TABLE;
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;
use riptide::{Db, Table, WriteBatch, WriteOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type NodeId = u64;
type Membership = StoredMembership<NodeId, BasicNode>;
const MEMBERSHIP_KEY: &[u8] = b"membership";
/// Where an install under way records itself (see [`snapshots`]).
const INSTALLING_KEY: &[u8] = b"installing";
/// Written by builds before snapshots were checkpoints; deleted by the next install.
const LEGACY_SNAPSHOT_META_KEY: &[u8] = b"snapshot_meta";

/// Bytes of entries gathered into one engine write at most (entries are at most 64 MiB each;
/// the engine takes up to 256 MiB).
const APPLY_BATCH_BYTES: usize = 32 << 20;

/// Entries applied but not yet written: their rows, and the last one's log id.
#[derive(Default)]
struct PendingApply {
    batch: WriteBatch,
    last: Option<LogId<NodeId>>,
    /// Prepared transactions decided by these entries: their row locks go once the batch is
    /// written.
    decided: Vec<Vec<u8>>,
}

/// The current snapshot: its meta and its archive.
#[derive(Clone, Debug)]
struct CurrentSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    path: PathBuf,
}

/// One partition's state machine; cheap to clone (clones share the database and the current
/// snapshot).
#[derive(Clone)]
pub struct StateMachine {
    db: Db,
    state: Table,
    snapshots: Arc<SnapshotDir>,
    current: Arc<Mutex<Option<CurrentSnapshot>>>,
    /// Held by an install while it changes rows, and by a build while it takes its checkpoint.
    install_lock: Arc<Mutex<()>>,
    /// Makes snapshot ids unique within this process.
    builds: Arc<AtomicU64>,
    /// Makes snapshot ids unique across processes and nodes: the open's time in nanoseconds
    /// mixed with the process id.
    instance: u64,
    /// Told the tables each apply (or snapshot install) changed.
    listener: Option<ApplyListener>,
    /// Builds and installs so far.
    stats: Arc<SnapshotStats>,
    /// This node's proposals not answered yet: an install settles those it overtook.
    inflight: Option<Arc<InflightWrites>>,
    /// The partition's log store (its unwritten entries are in its cache): an install reads
    /// which terms the log holds after the snapshot from it.
    log: Option<crate::LogStore>,
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

/// The error of a failed apply of the entry `log_id` (openraft stops the node on it).
fn apply_error(log_id: LogId<NodeId>, e: &dyn std::error::Error) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::apply(log_id, AnyError::error(e.to_string())).into()
}

fn sm_read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_state_machine(AnyError::new(&e)).into()
}

fn snapshot_io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_snapshot(None, AnyError::new(&e)).into()
}

/// The applied id and membership stored in database `db` (none before its first apply).
fn read_state_of(db: &Db) -> Result<(Option<LogId<NodeId>>, Membership), SnapshotError> {
    let membership = stored(db, STATE_TABLE, MEMBERSHIP_KEY, "membership")?;
    Ok((stored_applied(db)?, membership.unwrap_or_default()))
}

/// A number that differs between opens: nanoseconds since the epoch, mixed with the process id.
fn instance_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

impl StateMachine {
    /// The state machine of the partition database `db`, creating its table on first use.
    /// Before anything else it finishes what a crash cut short: an install (resumed from its
    /// archive) or a received snapshot the log was purged for (installed); then it picks the
    /// current snapshot from the partition's `raft-snapshots/` directory.
    pub fn open(db: &Db) -> Result<Self, SnapshotError> {
        let sm = StateMachine {
            db: db.clone(),
            state: table_or_create(db, STATE_TABLE)?,
            snapshots: Arc::new(SnapshotDir::open(db.path())?),
            current: Arc::new(Mutex::new(None)),
            install_lock: Arc::new(Mutex::new(())),
            builds: Arc::new(AtomicU64::new(0)),
            instance: instance_nonce(),
            listener: None,
            stats: Arc::default(),
            inflight: None,
            log: None,
        };
        sm.recover()?;
        Ok(sm)
    }

    /// What this partition's snapshots did since the open (shared: the figures go on moving
    /// once openraft owns the state machine).
    pub fn snapshot_stats(&self) -> Arc<SnapshotStats> {
        self.stats.clone()
    }

    /// The same state machine, settling after each snapshot install the writes of `inflight`
    /// (the node's replicator's) whose log entries the snapshot overtook.
    pub fn with_inflight_writes(mut self, inflight: Arc<InflightWrites>) -> Self {
        self.inflight = Some(inflight);
        self
    }

    /// The same state machine, reading the log through `log` (the log store openraft appends
    /// to) instead of the stored tables alone.
    pub fn with_log_store(mut self, log: crate::LogStore) -> Self {
        self.log = Some(log);
        self
    }

    /// The same state machine, telling `listener` what each apply changed.
    pub fn with_apply_listener(mut self, listener: ApplyListener) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Applies `entries` (in log order) in as few engine writes as their sizes and DDL allow:
    /// each write holds whole entries and the last one's log id as the applied id, so a crash
    /// keeps a prefix of them, each whole.
    fn apply_entries(
        &self,
        entries: &[Entry<TypeConfig>],
        touched: &mut Vec<String>,
    ) -> Result<Vec<Applied>, StorageError<NodeId>> {
        let mut pending = PendingApply::default();
        let mut results = Vec::with_capacity(entries.len());
        for entry in entries {
            results.push(self.apply_entry(entry, &mut pending, touched)?);
            if pending.batch.size_in_bytes() >= APPLY_BATCH_BYTES {
                self.write_pending(&mut pending)?;
            }
        }
        self.write_pending(&mut pending)?;
        Ok(results)
    }

    /// Writes the entries gathered in `pending`, with the last one's log id as the applied one.
    fn write_pending(&self, pending: &mut PendingApply) -> Result<(), StorageError<NodeId>> {
        let Some(last) = pending.last.take() else {
            return Ok(());
        };
        let apply_err = |e: &dyn std::error::Error| apply_error(last, e);
        let mut batch = std::mem::take(&mut pending.batch);
        let bytes = encode(&Some(last)).map_err(|e| apply_err(&e))?;
        batch.put(&self.state, APPLIED_KEY, &bytes).map_err(|e| apply_err(&e))?;
        self.db
            .write_unreplicated(batch, &WriteOptions::default())
            .map_err(|e| apply_err(&e))?;
        // The decisions' rows are visible: the next holder of a prepared row reads them.
        for xid in pending.decided.drain(..) {
            self.db.release_prepared(&xid);
        }
        Ok(())
    }

    /// Adds one entry to `pending`: its write set (unless refused), or each set of its group
    /// ([`WriteOp::Group`], each accepted or refused on its own), its log id as the last one
    /// and, for a membership entry, the new membership. A write set the engine would refuse is
    /// refused here first, identically on every replica, and only its index is applied; only
    /// an engine failure is an error. A table creation or drop writes the entries before it
    /// first, then runs (durable on its own).
    fn apply_entry(
        &self,
        entry: &Entry<TypeConfig>,
        pending: &mut PendingApply,
        touched: &mut Vec<String>,
    ) -> Result<Applied, StorageError<NodeId>> {
        let mut applied = Applied::default();
        match &entry.payload {
            EntryPayload::Blank => {}
            EntryPayload::Normal(set) => match set.group() {
                Some(sets) => match set.validate() {
                    Err(reason) => applied.refused = Some(reason),
                    Ok(()) => {
                        for member in sets {
                            let one = self.apply_set(entry.log_id, member, pending, touched)?;
                            applied.writes = applied.writes.saturating_add(one.writes);
                            applied.sets.push(one);
                        }
                    }
                },
                None => applied = self.apply_set(entry.log_id, set, pending, touched)?,
            },
            EntryPayload::Membership(m) => {
                let stored = Membership::new(Some(entry.log_id), m.clone());
                let bytes = encode(&stored).map_err(|e| apply_error(entry.log_id, &e))?;
                pending
                    .batch
                    .put(&self.state, MEMBERSHIP_KEY, &bytes)
                    .map_err(|e| apply_error(entry.log_id, &e))?;
            }
        }
        pending.last = Some(entry.log_id);
        Ok(applied)
    }

    /// Adds one write set of the entry `log_id` to `pending`, unless it is refused (it does
    /// not validate, or its fence names another term than the entry's).
    fn apply_set(
        &self,
        log_id: LogId<NodeId>,
        set: &WriteSet,
        pending: &mut PendingApply,
        touched: &mut Vec<String>,
    ) -> Result<Applied, StorageError<NodeId>> {
        let apply_err = |e: &dyn std::error::Error| apply_error(log_id, e);
        let mut applied = Applied::default();
        match set
            .validate()
            .and_then(|()| set.fenced_out(log_id.leader_id.term).map_or(Ok(()), Err))
        {
            Err(reason) => applied.refused = Some(reason),
            Ok(()) if set.ops.iter().any(|op| op.phase_xid().is_some()) => {
                applied = self.apply_phase(log_id, set, pending, touched)?;
            }
            Ok(()) => {
                for op in &set.ops {
                    let Some(table_name) = op.table() else {
                        continue; // a fence: checked above
                    };
                    touched.push(table_name.to_string());
                    match op {
                        WriteOp::Put { table, key, value } => {
                            let table = table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                            pending.batch.put(&table, key, value).map_err(|e| apply_err(&e))?;
                        }
                        WriteOp::Delete { table, key } => {
                            let table = table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                            pending.batch.delete(&table, key).map_err(|e| apply_err(&e))?;
                        }
                        // Durable on their own (the engine's DDL is), after the entries before
                        // them and before this entry's index; replayed after a crash they find
                        // their work done. (Never in a group: see `WriteSet::validate`.)
                        WriteOp::CreateTable { table } => {
                            self.write_pending(pending)?;
                            table_or_create(&self.db, table).map_err(|e| apply_err(&e))?;
                        }
                        WriteOp::DropTable { table } => {
                            self.write_pending(pending)?;
                            match self.db.drop_table_unreplicated(table) {
                                Ok(()) | Err(riptide::Error::TableNotFound(_)) => {}
                                Err(e) => return Err(apply_err(&e)),
                            }
                        }
                        WriteOp::Fence { .. }
                        | WriteOp::Prepare { .. }
                        | WriteOp::CommitPrepared { .. }
                        | WriteOp::RollbackPrepared { .. }
                        | WriteOp::Group { .. } => {}
                    }
                    applied.writes += 1;
                }
            }
        }
        Ok(applied)
    }

    /// Makes `new` the current snapshot unless a newer one is (a build that took its
    /// checkpoint before an install finished must not replace the installed snapshot), and
    /// deletes the archive that is not kept. A reader holding the deleted file open keeps
    /// reading it.
    fn keep_if_newer(&self, new: CurrentSnapshot) {
        let mut current = self.current.lock();
        let newer = current
            .as_ref()
            .is_none_or(|c| new.meta.last_log_id >= c.meta.last_log_id);
        let dropped = if newer { current.replace(new) } else { Some(new) };
        drop(current);
        if let Some(old) = dropped {
            // Best effort: an archive left behind is deleted at the next open.
            let _ = SnapshotDir::remove(&old.path);
        }
    }

    /// The current snapshot, opened for reading.
    async fn open_current(&self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        // A newer snapshot may replace (and delete) the one read here before it is opened.
        for _ in 0..3 {
            let Some(current) = self.current.lock().clone() else {
                return Ok(None);
            };
            match SnapshotFile::open(current.path.clone()).await {
                Ok(file) => {
                    return Ok(Some(Snapshot {
                        meta: current.meta,
                        snapshot: Box::new(file),
                    }))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(snapshot_io_err(e)),
            }
        }
        Err(snapshot_io_err(SnapshotError::Invalid(
            "the current snapshot kept being replaced while it was opened".into(),
        )))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let this = self.clone();
        let seq = self.builds.fetch_add(1, Ordering::Relaxed);
        blocking(move || this.build(seq).map(|built| this.keep_if_newer(built))).await??;
        // The current snapshot: the one just built, or a newer one installed meanwhile.
        self.open_current()
            .await?
            .ok_or_else(|| snapshot_io_err(SnapshotError::Invalid("no snapshot after a build".into())))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        Ok(read_state_of(&self.db)?)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        if let (Some(inflight), Some(first)) = (&self.inflight, entries.first()) {
            inflight.settle_applied_before(first.log_id.index);
        }
        let this = self.clone();
        blocking(move || {
            let mut touched = Vec::new();
            let results = this.apply_entries(&entries, &mut touched);
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

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError<NodeId>> {
        let path = self.snapshots.fresh(Kind::Incoming).map_err(snapshot_io_err)?;
        Ok(Box::new(SnapshotFile::create(path).await.map_err(snapshot_io_err)?))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotFile>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut file = *snapshot;
        file.keep(); // before anything can fail: the log may be purged for it
        file.sync().await.map_err(snapshot_io_err)?;
        let src = file.take_path();
        let this = self.clone();
        let meta = meta.clone();
        blocking(move || -> Result<(), SnapshotError> {
            let (kept, touched) = this.receive(&src, &meta)?;
            if let Some(listener) = &this.listener {
                listener(&touched);
            }
            if let (Some(inflight), Some(last)) = (&this.inflight, meta.last_log_id) {
                if !inflight.is_empty() {
                    let live = match &this.log {
                        Some(log) => log.terms_after(last.index)?,
                        None => crate::LogStore::open(&this.db)?.terms_after(last.index)?,
                    };
                    inflight.settle_overtaken(&live);
                }
            }
            this.keep_if_newer(kept);
            Ok(())
        })
        .await??;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        self.open_current().await
    }
}
