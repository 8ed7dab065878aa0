//! Building and installing a partition's snapshots by engine checkpoint (the synchronous
//! halves; `mod.rs` drives them from openraft's traits).
//!
//! Invariants:
//! - A build takes a checkpoint of the partition database (a crash image: every apply before
//!   it, each whole) and reads the applied id and membership from the checkpoint itself, so
//!   the archive's meta is exactly the state its files hold.
//! - An install changes the partition's rows only after the archive was read whole and its
//!   checkpoint's state matched the meta openraft gave, and only under a durable marker
//!   (`installing` in the state table) naming the archive; the last write, synced, sets the
//!   applied id and membership and removes the marker. A crash in between leaves the marker,
//!   and the next open installs the same archive again before openraft reads the applied
//!   state, so a half-installed partition is never taken for the old or the new state.
//! - A build's checkpoint is never taken while an install is changing rows.
//! - After a crash that the log's purge for a received snapshot survived but the install did
//!   not, the next open installs that archive (the purge synced it first), so the applied
//!   state is never behind the purged log.

use super::LEGACY_SNAPSHOT_META_KEY;
use super::{read_state_of, sm_read_err, CurrentSnapshot, Membership, StateMachine, INSTALLING_KEY, MEMBERSHIP_KEY};
use crate::codec::{decode, encode, CodecError};
use crate::engine::{stored_last_purged, synced, table_or_create, APPLIED_KEY};
use crate::snapshot::archive::{self, ArchiveError};
use crate::snapshot::{Kind, SnapshotDir};
use crate::RESERVED_PREFIX;
use openraft::{BasicNode, LogId, SnapshotMeta, StorageError};
use riptide::{Db, Options, ReadOptions, Table, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

type NodeId = u64;
type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Bytes of rows an install writes per engine write (unsynced; the last write is synced).
const INSTALL_BATCH_BYTES: usize = 4 << 20;

/// Why a snapshot could not be built, installed or recovered.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The partition database, or the checkpoint opened as one, failed.
    #[error("snapshot: {0}")]
    Engine(#[from] riptide::Error),
    /// The archive could not be written or read whole.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A stored value did not decode.
    #[error("snapshot: {0}")]
    Codec(#[from] CodecError),
    /// The snapshot directory failed.
    #[error("snapshot directory: {0}")]
    Io(#[from] std::io::Error),
    /// The snapshot does not agree with itself, with openraft or with the partition.
    #[error("snapshot: {0}")]
    Invalid(String),
    /// The Raft log could not be read.
    #[error(transparent)]
    Log(#[from] StorageError<NodeId>),
}

impl From<SnapshotError> for StorageError<NodeId> {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::Log(e) => e,
            other => sm_read_err(other),
        }
    }
}

/// The durable record of an install under way.
#[derive(Serialize, Deserialize, Debug)]
struct InstallMarker {
    meta: Meta,
    /// The archive's file name in the snapshot directory.
    archive: String,
}

/// Writes a stream of puts and deletes in engine writes of about [`INSTALL_BATCH_BYTES`].
struct Batcher<'a> {
    db: &'a Db,
    batch: WriteBatch,
}

impl Batcher<'_> {
    fn add(&mut self, op: impl FnOnce(&mut WriteBatch) -> riptide::Result<()>) -> riptide::Result<()> {
        op(&mut self.batch)?;
        if self.batch.size_in_bytes() >= INSTALL_BATCH_BYTES {
            self.write(&WriteOptions::default())?;
        }
        Ok(())
    }

    fn write(&mut self, opts: &WriteOptions) -> riptide::Result<()> {
        #[cfg(test)]
        if let Some(left) = tests::CRASH_AFTER_WRITES.get() {
            if left == 0 {
                return Err(riptide::Error::Closed); // the test's crash
            }
            tests::CRASH_AFTER_WRITES.set(Some(left - 1));
        }
        self.db.write_unreplicated(std::mem::take(&mut self.batch), opts)
    }
}

impl StateMachine {
    /// Builds a snapshot: a checkpoint of the partition packed into a new archive.
    pub(super) fn build(&self, seq: u64) -> Result<CurrentSnapshot, SnapshotError> {
        let started = Instant::now();
        let scratch = self.snapshots.fresh(Kind::Build)?;
        let result = self.build_in(&scratch, seq);
        SnapshotDir::remove(&scratch)?;
        if let Ok(built) = &result {
            self.stats.record(false, started, file_len(&built.path));
        }
        result
    }

    fn build_in(&self, scratch: &Path, seq: u64) -> Result<CurrentSnapshot, SnapshotError> {
        let info = {
            let _no_install = self.install_lock.lock();
            // Flushed first, so the checkpoint carries the rows once, in extents, rather than
            // also in every redo segment not yet retired.
            self.db.flush()?;
            self.db.checkpoint(scratch)?
        };
        if info.object_extents > 0 {
            self.db.release_checkpoint(scratch)?;
            return Err(SnapshotError::Invalid(format!(
                "the partition has {} extents in the object tier, which a Raft snapshot cannot carry yet",
                info.object_extents
            )));
        }
        let (last_log_id, last_membership) = read_checkpoint_state(scratch)?;
        // Unique across nodes and restarts: openraft goes on writing a reception whose id
        // matches the stream it has open, so two different archives must never share one.
        let build = format!("{:x}-{seq}", self.instance);
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{}-{build}", id.leader_id.term, id.leader_id.node_id, id.index),
            None => format!("none-{build}"),
        };
        let meta = Meta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        let path = self.snapshots.fresh(Kind::Archive)?;
        archive::pack_to_file(scratch, &meta, &path)?;
        Ok(CurrentSnapshot { meta, path })
    }

    /// Installs the whole archive `src` (a received file, or any archive openraft handed
    /// over), whose meta must be `meta`: kept durably in the snapshot directory first, then
    /// installed. Returns the kept snapshot and the tables the install changed.
    pub(super) fn receive(&self, src: &Path, meta: &Meta) -> Result<(CurrentSnapshot, Vec<String>), SnapshotError> {
        let path = self.snapshots.fresh(Kind::Archive)?;
        let ours = src.parent() == Some(self.snapshots.path())
            && src
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| Kind::Incoming.parse(n).is_some());
        if ours {
            std::fs::rename(src, &path)?;
        } else {
            let tmp = self.snapshots.fresh(Kind::Incoming)?;
            std::fs::copy(src, &tmp)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
        }
        archive::sync_parent(&path)?;
        match self.install(&path, meta) {
            Ok(touched) => Ok((
                CurrentSnapshot {
                    meta: meta.clone(),
                    path,
                },
                touched,
            )),
            Err(e) => {
                // An archive that cannot be installed however often it is tried goes (unless an
                // install under its marker began); any other failure keeps it for the next
                // open, which deletes it if nothing needs it (openraft may purge the log for
                // it at any moment: it does not wait for the install).
                let hopeless = matches!(
                    e,
                    SnapshotError::Archive(ArchiveError::Corrupt(_)) | SnapshotError::Invalid(_)
                );
                if hopeless && matches!(self.state.get(INSTALLING_KEY), Ok(None)) {
                    let _ = SnapshotDir::remove(&path);
                }
                Err(e)
            }
        }
    }

    /// Installs the archive at `path` (durable in the snapshot directory), whose meta must be
    /// `meta`. Returns the tables it changed.
    fn install(&self, path: &Path, meta: &Meta) -> Result<Vec<String>, SnapshotError> {
        let started = Instant::now();
        let scratch = self.snapshots.fresh(Kind::Install)?;
        let result = self.install_from(path, meta, &scratch);
        SnapshotDir::remove(&scratch)?;
        if result.is_ok() {
            self.stats.record(true, started, file_len(path));
        }
        result
    }

    fn install_from(&self, path: &Path, meta: &Meta, scratch: &Path) -> Result<Vec<String>, SnapshotError> {
        let header = archive::unpack_file(path, scratch)?;
        if header.last_log_id != meta.last_log_id || header.last_membership != meta.last_membership {
            return Err(SnapshotError::Invalid(format!(
                "archive {} holds state up to {:?}, openraft installs {:?}",
                path.display(),
                header.last_log_id,
                meta.last_log_id
            )));
        }
        let source = Db::open_read_only(scratch, Options::default())?;
        let (applied, membership) = read_state_of(&source)?;
        if applied != meta.last_log_id || membership != meta.last_membership {
            return Err(SnapshotError::Invalid(format!(
                "the checkpoint in {} applied {applied:?}, its header says {:?}",
                path.display(),
                meta.last_log_id
            )));
        }
        let archive_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| SnapshotError::Invalid(format!("archive path {}", path.display())))?;
        let _no_build = self.install_lock.lock();
        let marker = InstallMarker {
            meta: meta.clone(),
            archive: archive_name.to_string(),
        };
        let mut batch = WriteBatch::new();
        batch.put(&self.state, INSTALLING_KEY, &encode(&marker)?)?;
        self.db.write_unreplicated(batch, &synced())?;

        let mut out = Batcher {
            db: &self.db,
            batch: WriteBatch::new(),
        };
        let mut touched = Vec::new();
        let read_now = ReadOptions {
            snapshot: Some(self.db.snapshot()),
            ..ReadOptions::default()
        };
        let source_tables: Vec<String> = source
            .tables()
            .into_iter()
            .filter(|name| !name.starts_with(RESERVED_PREFIX))
            .collect();
        for table in self.partition_tables()? {
            let name = table.name().to_string();
            touched.push(name.clone());
            if !source_tables.contains(&name) {
                // Dropped on the leader: dropped here too (durable on its own, and found gone
                // by an install resumed after a crash), as replaying its drop would.
                drop(table);
                match self.db.drop_table_unreplicated(&name) {
                    Ok(()) | Err(riptide::Error::TableNotFound(_)) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            for row in table.iter(&read_now)? {
                let (key, _) = row?;
                out.add(|b| b.delete(&table, &key))?;
            }
        }
        for name in source_tables {
            let from = source.table(&name)?;
            let to = table_or_create(&self.db, &name)?;
            touched.push(name);
            for row in from.iter(&ReadOptions::default())? {
                let (key, value) = row?;
                out.add(|b| b.put(&to, &key, &value))?;
            }
        }
        out.batch.put(&self.state, APPLIED_KEY, &encode(&meta.last_log_id)?)?;
        out.batch
            .put(&self.state, MEMBERSHIP_KEY, &encode(&meta.last_membership)?)?;
        out.batch.delete(&self.state, LEGACY_SNAPSHOT_META_KEY)?;
        out.batch.delete(&self.state, INSTALLING_KEY)?;
        // Closed first: a failure after the last write would report a done install as failed.
        source.close()?;
        out.write(&synced())?;
        touched.sort();
        touched.dedup();
        Ok(touched)
    }

    /// At open, before openraft reads anything: finishes an install a crash cut short, or
    /// installs the received archive that a purge of the log ran ahead of; then picks the
    /// current snapshot (the newest archive not ahead of the applied state) and deletes the
    /// other archives and abandoned receptions.
    pub(super) fn recover(&self) -> Result<(), SnapshotError> {
        if let Some(bytes) = self.state.get(INSTALLING_KEY)? {
            let marker: InstallMarker = decode(&bytes, "install marker")?;
            let path = self.snapshots.path().join(&marker.archive);
            self.install(&path, &marker.meta)?;
        } else {
            let (applied, _) = read_state_of(&self.db)?;
            let purged = stored_last_purged(&self.db)?;
            if purged > applied {
                self.install_covering(purged, applied)?;
            }
        }
        let (applied, _) = read_state_of(&self.db)?;
        let mut best: Option<CurrentSnapshot> = None;
        for path in self.snapshots.paths(Kind::Archive)? {
            match archive::read_file_meta(&path) {
                Ok(meta)
                    if meta.last_log_id <= applied
                        && best.as_ref().is_none_or(|b| meta.last_log_id >= b.meta.last_log_id) =>
                {
                    if let Some(old) = best.replace(CurrentSnapshot { meta, path }) {
                        SnapshotDir::remove(&old.path)?;
                    }
                }
                // Ahead of the applied state (received, never installed) or unreadable: a
                // cache entry to drop, never a state to serve.
                _ => SnapshotDir::remove(&path)?,
            }
        }
        for path in self.snapshots.paths(Kind::Incoming)? {
            SnapshotDir::remove(&path)?;
        }
        *self.current.lock() = best;
        Ok(())
    }

    /// Installs the newest archive on disk (kept or received) whose state reaches `purged`
    /// and that is whole: a reception cut short has an intact header, so a candidate whose
    /// archive is corrupt is deleted and the next one tried.
    fn install_covering(
        &self,
        purged: Option<LogId<NodeId>>,
        applied: Option<LogId<NodeId>>,
    ) -> Result<(), SnapshotError> {
        let mut candidates: Vec<(PathBuf, Meta)> = Vec::new();
        let mut refused = Vec::new();
        for (kind, _, path) in self.snapshots.entries()? {
            if matches!(kind, Kind::Archive | Kind::Incoming) {
                match archive::read_file_meta(&path) {
                    Ok(meta) if meta.last_log_id >= purged => candidates.push((path, meta)),
                    Ok(_) => {}
                    Err(e) => refused.push(format!("{}: {e}", path.display())),
                }
            }
        }
        candidates.sort_by_key(|(_, meta)| std::cmp::Reverse(meta.last_log_id));
        for (path, meta) in candidates {
            let kept = self.snapshots.fresh(Kind::Archive)?;
            std::fs::rename(&path, &kept)?;
            archive::sync_parent(&kept)?;
            match self.install(&kept, &meta) {
                Err(e @ (SnapshotError::Archive(ArchiveError::Corrupt(_)) | SnapshotError::Invalid(_))) => {
                    refused.push(format!("{}: {e}", kept.display()));
                    SnapshotDir::remove(&kept)?;
                }
                other => return other.map(drop),
            }
        }
        Err(SnapshotError::Invalid(format!(
            "the Raft log is purged up to {purged:?} but the partition applied only {applied:?}, \
             and no whole snapshot on disk covers it (refused: {})",
            if refused.is_empty() {
                "none".to_string()
            } else {
                refused.join("; ")
            }
        )))
    }

    /// The partition's tables (every table but the cluster layer's own), sorted by name.
    pub(super) fn partition_tables(&self) -> riptide::Result<Vec<Table>> {
        self.db
            .tables()
            .into_iter()
            .filter(|name| !name.starts_with(RESERVED_PREFIX))
            .map(|name| self.db.table(&name))
            .collect()
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The applied id and membership of the checkpoint in `dir`.
fn read_checkpoint_state(dir: &Path) -> Result<(Option<LogId<NodeId>>, Membership), SnapshotError> {
    let checkpoint = Db::open_read_only(dir, Options::default())?;
    let state = read_state_of(&checkpoint)?;
    checkpoint.close()?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{WriteOp, WriteSet};
    use openraft::{CommittedLeaderId, Entry, EntryPayload};
    use std::cell::Cell;

    thread_local! {
        /// Engine writes an install may still make on this thread before it fails, as if the
        /// process died there (`None`: no failure).
        pub(super) static CRASH_AFTER_WRITES: Cell<Option<usize>> = const { Cell::new(None) };
    }

    fn apply(sm: &StateMachine, index: u64, ops: Vec<WriteOp>) {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
            payload: EntryPayload::Normal(WriteSet { ops }),
        };
        sm.apply_entries(&[entry], &mut Vec::new()).unwrap();
    }

    fn put(table: &str, key: String, value: Vec<u8>) -> WriteOp {
        WriteOp::Put {
            table: table.into(),
            key: key.into_bytes(),
            value,
        }
    }

    fn rows(db: &Db, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        match db.table(table) {
            Ok(t) => t.iter(&ReadOptions::default()).unwrap().map(|r| r.unwrap()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// An install cut short after some of its writes (a crash) leaves its marker; the next
    /// open installs the same archive again, and the partition ends exactly as the leader's.
    #[test]
    fn an_install_cut_short_is_finished_at_the_next_open() {
        let tmp = tempfile::tempdir().unwrap();
        let leader_db = Db::open(tmp.path().join("leader"), Options::default()).unwrap();
        let leader = StateMachine::open(&leader_db).unwrap();
        // 12 MiB of rows: three install writes at least.
        for i in 0..24u64 {
            let ops = (0..64)
                .map(|j| put("big", format!("k{i:03}-{j:03}"), vec![i as u8; 8 << 10]))
                .collect();
            apply(&leader, i + 1, ops);
        }
        apply(&leader, 25, vec![put("small", "a".into(), b"1".to_vec())]);
        let built = leader.build(0).unwrap();
        assert_eq!(built.meta.last_log_id.map(|id| id.index), Some(25));

        let path = tmp.path().join("follower");
        let db = Db::open(&path, Options::default()).unwrap();
        let follower = StateMachine::open(&db).unwrap();
        apply(&follower, 1, vec![put("stale", "x".into(), b"old".to_vec())]);
        apply(&follower, 2, vec![put("big", "k000-000".into(), b"old".to_vec())]);
        CRASH_AFTER_WRITES.set(Some(2));
        let err = follower.receive(&built.path, &built.meta).unwrap_err();
        CRASH_AFTER_WRITES.set(None);
        assert!(matches!(err, SnapshotError::Engine(riptide::Error::Closed)), "{err}");
        // Half done: the stale table emptied, only part of the leader's rows there yet.
        assert!(rows(&db, "stale").is_empty());
        let partial = rows(&db, "big").len();
        assert!(partial > 0 && partial < 24 * 64, "{partial} rows after the cut");
        assert!(follower.state.get(INSTALLING_KEY).unwrap().is_some());
        drop(follower);
        db.close().unwrap();

        let db = Db::open(&path, Options::default()).unwrap();
        let follower = StateMachine::open(&db).unwrap();
        assert_eq!(rows(&db, "big"), rows(&leader_db, "big"));
        assert_eq!(rows(&db, "small"), rows(&leader_db, "small"));
        assert!(
            matches!(db.table("stale"), Err(riptide::Error::TableNotFound(_))),
            "a table the snapshot lacks is dropped"
        );
        assert_eq!(read_state_of(&db).unwrap(), read_state_of(&leader_db).unwrap());
        assert!(follower.state.get(INSTALLING_KEY).unwrap().is_none());
        let current = follower
            .current
            .lock()
            .clone()
            .expect("the installed snapshot is current");
        assert_eq!(current.meta, built.meta);
        assert!(current.path.starts_with(follower.snapshots.path()));
    }

    /// A build's checkpoint holds the applied id and the rows of the same moment, and the
    /// archive can be installed elsewhere whole.
    #[test]
    fn a_built_archive_installs_as_the_same_state() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Db::open(tmp.path().join("a"), Options::default()).unwrap();
        let sm = StateMachine::open(&db).unwrap();
        for i in 1..=5u64 {
            apply(&sm, i, vec![put("t", format!("k{i}"), vec![1; 10])]);
        }
        let built = sm.build(7).unwrap();
        let id = &built.meta.snapshot_id;
        assert!(
            id.starts_with("2-1-5-") && id.ends_with(&format!("{:x}-7", sm.instance)),
            "{id}"
        );
        apply(&sm, 6, vec![put("t", "k6".into(), vec![1; 10])]);
        let other = Db::open(tmp.path().join("b"), Options::default()).unwrap();
        let osm = StateMachine::open(&other).unwrap();
        let (_, touched) = osm.receive(&built.path, &built.meta).unwrap();
        assert_eq!(
            touched,
            ["default", "t"],
            "every partition table, the empty default one too"
        );
        assert_eq!(rows(&other, "t").len(), 5, "the snapshot's rows, not later ones");
        assert_eq!(crate::engine::stored_applied(&other).unwrap(), built.meta.last_log_id);
        assert!(built.path.exists(), "a foreign archive is copied, not moved");
    }
}
