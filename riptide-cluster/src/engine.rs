//! Helpers for calling the (synchronous) Riptide engine from openraft's async storage
//! traits: tables created on first use, synced writes, and blocking calls moved off the
//! runtime's worker threads.
//!
//! Invariant: a call handed to [`blocking`] runs to completion on tokio's blocking pool; its
//! result (or the failure of the task) is what the caller awaits.

use openraft::{AnyError, StorageError, StorageIOError};
use riptide::{Db, Table, WriteOptions};

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
