//! The Raft log and vote of one partition, in sub-tables of the partition's database
//! (openraft's `RaftLogStorage`).
//!
//! `append` returns as soon as the entries are in memory (`cache`), as openraft's storage
//! trait asks, and the log's own thread (`writer`) makes them durable and then calls openraft
//! back. openraft 0.9's core still waits for that callback before it replicates or appends
//! again, so what this buys today is the readers': the leader's replication and the state
//! machine read recent entries from memory, without a blocking-pool hop. (A core that does not
//! wait, as in 0.10, would replicate during the leader's fsync and queue appends that then
//! share one.)
//!
//! Invariants:
//! - [`LOG_TABLE`] holds, keyed by index, the entries after the last purged log id that were
//!   appended and not truncated, once the writer has run every operation submitted; each
//!   change to it is synced before the writer reports it, so an entry is durable before
//!   openraft is told it is flushed. Truncations, purges and the vote are written by the same
//!   thread in submission order and awaited by their callers.
//! - The vote and the last purged log id ([`RAFT_META_TABLE`]) are written with sync too;
//!   purging writes the new purged id and deletes the entries up to it in one atomic batch.
//! - A purge beyond the applied state (openraft purges for a received snapshot while the state
//!   machine installs it) first syncs the archives being received, so the snapshot survives
//!   any crash the purge survives, and the next open installs it (`crate::snapshot`).
//! - Readers (`get_log_reader`) are clones sharing the cache and the tables: they see every
//!   entry appended before they read, written or not, and none truncated.
//! - [`LogStore::appends`] counts the core's appends once their entries are readable: the
//!   core takes no other client write until that append's callback (0.9).

mod cache;
mod writer;

use crate::codec::{decode, encode, index_key, key_index, CodecError};
use crate::engine::{blocking, stored_applied, stored_last_purged, synced, table_or_create, PURGED_KEY};
use crate::types::TypeConfig;
use crate::{LOG_TABLE, RAFT_META_TABLE};
use cache::LogCache;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, RaftLogReader, StorageError, StorageIOError, Vote};
use riptide::{Db, ReadOptions, Table, WriteBatch};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use writer::{Append, LogWriter};

type NodeId = u64;
const VOTE_KEY: &[u8] = b"vote";

/// Largest engine write of an append (the engine refuses batches over `riptide::MAX_BATCH_SIZE`).
pub const APPEND_CHUNK_BYTES: usize = 64 << 20;

/// One partition's Raft log store; cheap to clone (clones share the database, the cache of
/// recent entries and the writing thread).
#[derive(Clone)]
pub struct LogStore {
    db: Db,
    log: Table,
    meta: Table,
    cache: Arc<LogCache>,
    writer: LogWriter,
    /// Appends openraft's core has made so far (counted as it calls `append`): the leader's
    /// proposer waits for the core to take one entry before it groups the next
    /// ([`crate::proposer`]).
    appends: Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("db", &self.db.path()).finish()
    }
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_logs(AnyError::new(&e)).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_logs(AnyError::new(&e)).into()
}

impl LogStore {
    /// The log store of the partition database `db`, creating its tables on first use, with
    /// its writing thread.
    pub fn open(db: &Db) -> riptide::Result<Self> {
        let cache = Arc::new(LogCache::default());
        let writer = LogWriter::start(cache.clone())
            .map_err(|e| riptide::Error::Replication(format!("cannot start the Raft log writer: {e}")))?;
        Ok(LogStore {
            db: db.clone(),
            log: table_or_create(db, LOG_TABLE)?,
            meta: table_or_create(db, RAFT_META_TABLE)?,
            cache,
            writer,
            appends: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    /// Follows the number of appends openraft's core has made (each call of its `append`).
    pub fn appends(&self) -> tokio::sync::watch::Receiver<u64> {
        self.appends.subscribe()
    }

    /// The value under `key` of the meta table, decoded; `err` names the kind of a failure.
    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        what: &str,
        err: impl Fn(AnyError) -> StorageIOError<NodeId>,
    ) -> Result<Option<T>, StorageError<NodeId>> {
        let value = self.meta.get(key).map_err(|e| err(AnyError::new(&e)))?;
        match value {
            None => Ok(None),
            Some(v) => decode(&v, what).map(Some).map_err(|e| err(AnyError::new(&e)).into()),
        }
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        stored_last_purged(&self.db).map_err(read_err)
    }

    /// The terms of the entries after index `after`, each with the index of its last entry.
    pub(crate) fn terms_after(&self, after: u64) -> Result<BTreeMap<u64, u64>, StorageError<NodeId>> {
        let mut terms = BTreeMap::new();
        let Some(from) = after.checked_add(1) else {
            return Ok(terms);
        };
        for entry in self.entries_between(from, u64::MAX)? {
            let last = terms.entry(entry.log_id.leader_id.term).or_insert(entry.log_id.index);
            *last = (*last).max(entry.log_id.index);
        }
        Ok(terms)
    }

    /// The keys of the log entries in `[from, to]` (inclusive), in index order.
    fn keys_between(&self, from: u64, to: u64) -> Result<Vec<[u8; 8]>, StorageError<NodeId>> {
        let opts = ReadOptions {
            lower_bound: Some(index_key(from).to_vec()),
            upper_bound: to.checked_add(1).map(|end| index_key(end).to_vec()),
            ..ReadOptions::default()
        };
        let mut keys = Vec::new();
        for row in self.log.iter(&opts).map_err(read_err)? {
            let (key, _) = row.map_err(read_err)?;
            keys.push(index_key(key_index(&key).map_err(read_err)?));
        }
        Ok(keys)
    }

    /// Appends `entries` (replacing any entry at the same index): readable when it returns,
    /// and durable once `done` is called (or `reply` answered). Entries go in engine writes
    /// of at most [`APPEND_CHUNK_BYTES`] (split between entries); the writer syncs the last
    /// one, which makes the earlier ones durable too (the redo log is one sequence).
    fn submit(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
        done: Option<LogFlushed<TypeConfig>>,
        reply: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut chunks = vec![WriteBatch::new()];
        let mut cached = Vec::new();
        let mut ids = Vec::new();
        let mut total = 0;
        for entry in entries {
            let bytes = encode(&entry).map_err(write_err)?;
            let full = chunks
                .last()
                .is_some_and(|c| !c.is_empty() && c.size_in_bytes() + bytes.len() > APPEND_CHUNK_BYTES);
            if full {
                chunks.push(WriteBatch::new());
            }
            if let Some(chunk) = chunks.last_mut() {
                chunk
                    .put(&self.log, &index_key(entry.log_id.index), &bytes)
                    .map_err(write_err)?;
            }
            total += bytes.len();
            ids.push(entry.log_id);
            cached.push((entry, bytes.len()));
        }
        self.cache.insert(cached);
        self.writer.append(Append {
            db: self.db.clone(),
            chunks,
            ids,
            bytes: total,
            done,
            reply,
        });
        Ok(())
    }

    /// Appends `entries` (replacing any entry at the same index) and waits until they are
    /// durable: what Raft's `append` and its callback do together.
    pub async fn append_durably(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
    ) -> Result<(), StorageError<NodeId>> {
        let (reply, durable) = tokio::sync::oneshot::channel();
        self.submit(entries, None, Some(reply))?;
        match durable.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(write_err(riptide::Error::Replication(e))),
            Err(_) => Err(write_err(riptide::Error::Replication(
                "the Raft log writer has stopped".into(),
            ))),
        }
    }

    /// The entries whose index is in `range`, in index order: from the cache alone when it
    /// holds them (the leader's replication and the state machine read recent entries), else
    /// with the engine's below it, read on the blocking pool.
    async fn entries_in(
        &self,
        range: (Bound<u64>, Bound<u64>),
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let Some((from, to)) = inclusive(range) else {
            return Ok(Vec::new());
        };
        let cached = self.cache.read(from, to);
        if cached.lowest.is_some_and(|lowest| lowest <= from) {
            return Ok(cached.entries);
        }
        let this = self.clone();
        blocking(move || this.entries_between(from, to)).await?
    }

    /// The entries from `from` through `to` (inclusive): the engine's below the cache (none
    /// from a truncated index on, whose deletion may still be queued), then the cache's.
    fn entries_between(&self, from: u64, to: u64) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let cached = self.cache.read(from, to);
        // The engine's entries stop below the cache and below a pending truncation.
        let cut = [cached.lowest, cached.truncated_from].into_iter().flatten().min();
        let end = match cut {
            Some(cut) if cut <= to => Bound::Excluded(cut),
            _ => Bound::Included(to),
        };
        let mut entries = self.read_entries((Bound::Included(from), end))?;
        entries.extend(cached.entries);
        Ok(entries)
    }

    /// The engine's entries whose index is in `range`, in index order.
    fn read_entries(&self, range: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let from = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let opts = ReadOptions {
            lower_bound: Some(index_key(from).to_vec()),
            ..ReadOptions::default()
        };
        let mut entries = Vec::new();
        for row in self.log.iter(&opts).map_err(read_err)? {
            let (key, value) = row.map_err(read_err)?;
            let index = key_index(&key).map_err(read_err)?;
            if !range.contains(&index) {
                break;
            }
            let entry: Entry<TypeConfig> = decode(&value, "log entry").map_err(read_err)?;
            if entry.log_id.index != index {
                return Err(read_err(CodecError(format!(
                    "log entry under index {index} holds index {}",
                    entry.log_id.index
                ))));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The last purged log id and the last log id (the last purged one if no entry is left).
    fn log_state(&self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let last_purged_log_id = self.last_purged()?;
        let last = match self.log.iter(&ReadOptions::default()).map_err(read_err)?.next_back() {
            Some(row) => {
                let (_, value) = row.map_err(read_err)?;
                let entry: Entry<TypeConfig> = decode(&value, "log entry").map_err(read_err)?;
                Some(entry.log_id)
            }
            None => None,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.or(last_purged_log_id),
        })
    }

    /// Deletes the entries from `log_id` on, with one synced write.
    fn truncate_from(&self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut batch = WriteBatch::new();
        for key in self.keys_between(log_id.index, u64::MAX)? {
            batch.delete(&self.log, &key).map_err(write_err)?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.db.write_unreplicated(batch, &synced()).map_err(write_err)
    }

    /// Records `log_id` as purged and deletes the entries up to it, in one synced write.
    fn purge_upto(&self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        if let Some(purged) = self.last_purged()? {
            if purged >= log_id {
                return Ok(()); // purged that far already
            }
        }
        if stored_applied(&self.db).map_err(write_err)? < Some(log_id) {
            crate::snapshot::sync_received(&self.db.path().join(crate::snapshot::SNAPSHOT_DIR)).map_err(write_err)?;
        }
        let mut batch = WriteBatch::new();
        let bytes = encode(&log_id).map_err(write_err)?;
        batch.put(&self.meta, PURGED_KEY, &bytes).map_err(write_err)?;
        for key in self.keys_between(0, log_id.index)? {
            batch.delete(&self.log, &key).map_err(write_err)?;
        }
        self.db.write_unreplicated(batch, &synced()).map_err(write_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        self.entries_in(bounds).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        // Once the writer has run everything queued, the engine holds the whole log.
        self.writer.run(|| Ok(())).await?;
        let this = self.clone();
        blocking(move || this.log_state()).await?
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut batch = WriteBatch::new();
        let bytes = encode(vote).map_err(|e| StorageIOError::<NodeId>::write_vote(AnyError::new(&e)))?;
        batch
            .put(&self.meta, VOTE_KEY, &bytes)
            .map_err(|e| StorageIOError::<NodeId>::write_vote(AnyError::new(&e)))?;
        let db = self.db.clone();
        self.writer
            .run(move || {
                db.write_unreplicated(batch, &synced())
                    .map_err(|e| StorageIOError::<NodeId>::write_vote(AnyError::new(&e)).into())
            })
            .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.read_meta(VOTE_KEY, "vote", StorageIOError::read_vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let result = self.submit(entries, Some(callback), None);
        self.appends.send_modify(|n| *n += 1);
        result
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.cache.truncate_from(log_id.index);
        let this = self.clone();
        self.writer
            .run(move || {
                let result = this.truncate_from(log_id);
                // Failed, the engine may still hold the truncated entries: the mark stays
                // (openraft stops the node on a storage error anyway).
                if result.is_ok() {
                    this.cache.truncation_done();
                }
                result
            })
            .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.cache.purge_upto(log_id.index);
        let this = self.clone();
        self.writer.run(move || this.purge_upto(log_id)).await
    }
}

/// `range` as inclusive bounds; none when it is empty.
fn inclusive(range: (Bound<u64>, Bound<u64>)) -> Option<(u64, u64)> {
    let from = match range.0 {
        Bound::Included(i) => i,
        Bound::Excluded(i) => i.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let to = match range.1 {
        Bound::Included(i) => i,
        Bound::Excluded(i) => i.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (from <= to).then_some((from, to))
}
