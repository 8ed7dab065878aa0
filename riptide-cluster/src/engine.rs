//! Helpers for calling the (synchronous) Riptide engine from openraft's async storage
//! traits: tables created on first use, synced writes, blocking calls moved off the
//! runtime's worker threads, and the two stored log ids that each half of a partition's
//! storage reads from the other (the applied id, the last purged id).
//!
//! Invariant: a call handed to [`blocking`] runs to completion on tokio's blocking pool; its
//! result (or the failure of the task) is what the caller awaits.

use crate::codec::decode;
use crate::{RAFT_META_TABLE, STATE_TABLE};
use openraft::{AnyError, LogId, StorageError, StorageIOError};
use riptide::{Db, Table, WriteOptions};
use serde::de::DeserializeOwned;

type NodeId = u64;

/// The table named `name`, created (durably) if it does not exist.
pub(crate) fn table_or_create(db: &Db, name: &str) -> riptide::Result<Table> {
    match db.table(name) {
        Ok(t) => Ok(t),
        Err(riptide::Error::TableNotFound(_)) => match db.create_table_unreplicated(name) {
            Err(riptide::Error::TableExists(_)) => db.table(name),
            other => other,
        },
        Err(e) => Err(e),
    }
}

/// Options of a write that is durable (fdatasynced) when it returns.
pub(crate) fn synced() -> WriteOptions {
    WriteOptions {
        sync: true,
        ..WriteOptions::default()
    }
}

/// Runs a blocking engine call (a synced write waits for `fdatasync`) off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StorageError<NodeId>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageIOError::<NodeId>::write(AnyError::error(format!("storage task failed: {e}"))).into())
}

/// The key of the applied log id (`Option<LogId>`) in [`STATE_TABLE`]: the state machine's.
pub(crate) const APPLIED_KEY: &[u8] = b"applied";
/// The key of the last purged log id (`LogId`) in [`RAFT_META_TABLE`]: the log store's.
pub(crate) const PURGED_KEY: &[u8] = b"last_purged";

/// The value under `key` of table `table`, decoded; none when the table or the key is absent.
/// A value that does not decode is [`riptide::Error::Corruption`].
pub(crate) fn stored<T: DeserializeOwned>(db: &Db, table: &str, key: &[u8], what: &str) -> riptide::Result<Option<T>> {
    let table = match db.table(table) {
        Ok(t) => t,
        Err(riptide::Error::TableNotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    match table.get(key)? {
        None => Ok(None),
        Some(bytes) => decode(&bytes, what).map(Some).map_err(|e| riptide::Error::Corruption {
            path: db.path().to_path_buf(),
            offset: 0,
            reason: e.0,
        }),
    }
}

/// The applied log id stored in partition database `db` (read by the log store before a purge).
pub(crate) fn stored_applied(db: &Db) -> riptide::Result<Option<LogId<NodeId>>> {
    Ok(stored::<Option<LogId<NodeId>>>(db, STATE_TABLE, APPLIED_KEY, "applied log id")?.flatten())
}

/// The last purged log id stored in partition database `db` (read by the state machine at open).
pub(crate) fn stored_last_purged(db: &Db) -> riptide::Result<Option<LogId<NodeId>>> {
    stored(db, RAFT_META_TABLE, PURGED_KEY, "last purged log id")
}
