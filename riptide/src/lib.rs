//! # Riptide
//!
//! A tiered LSM-tree storage engine for write-heavy OLTP, after Alibaba's X-Engine.
//!
//! This crate is the embedded engine: a durable, concurrent key-value store with sub-tables
//! (one LSM-tree each, one shared redo log), atomic multi-table write batches, snapshots and
//! bidirectional iterators, and transactions ([`Db::begin`]). Writes go through X-Engine's
//! four-stage pipeline (log buffering, log flushing, parallel memtable insertion, commit) with
//! group commit and asynchronous commits, into multi-version memtables; flushes write them into
//! 2 MiB extents of 16 KiB blocks, and compactions merge extents down three levels, reusing
//! what does not overlap.
//!
//! ```
//! use riptide::{Db, Options, WriteBatch, WriteOptions};
//!
//! # let dir = tempfile::tempdir()?;
//! let db = Db::open(dir.path(), Options::default())?;
//! let accounts = db.create_table("accounts")?;
//! let ledger = db.create_table("ledger")?;
//!
//! // An atomic, durable transfer across two sub-tables.
//! let mut batch = WriteBatch::new();
//! batch.put(&accounts, b"alice", b"90")?;
//! batch.put(&accounts, b"bob", b"110")?;
//! batch.put(&ledger, b"0001", b"alice->bob 10")?;
//! db.write(batch, &WriteOptions { sync: true, ..Default::default() })?;
//!
//! assert_eq!(accounts.get(b"bob")?, Some(b"110".to_vec()));
//! let all: Vec<_> = accounts.iter(&Default::default())?.collect::<Result<_, _>>()?;
//! assert_eq!(all.len(), 2);
//! db.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! How it works inside: `docs/` in the repository (`format.md` for every on-disk byte).
//!
//! # Supported API
//! Besides the items re-exported at the crate root, three modules are public and supported:
//! - [`fs`]: the file-system trait every byte goes through ([`Options::fs`]), its POSIX
//!   implementation, and [`fs::FaultFs`], a fault-injecting file system for your own crash
//!   and I/O-error tests (like RocksDB's `FaultInjectionTestFS`).
//! - [`inspect`]: offline, read-only views of a database directory (levels, extents, slog,
//!   redo log, checksum verification); the library behind `riptide inspect`.
//! - [`backup`]: incremental, verifiable backups in an object store or a directory
//!   ([`Db::backup`], [`backup::BackupEngine`]); [`Db::checkpoint`] makes a local copy, and
//!   [`Db::open_read_only`] reads either without writing.
//! - [`failpoint`]: the names of the engine's crash points, for whitebox crash drivers such as
//!   `riptide stress --crash_points` (the points fire only with the `failpoints` feature).
#![warn(missing_docs)]

pub mod backup;
mod cache;
mod catalog;
mod coding;
mod compaction;
mod contention;
mod db;
mod error;
mod extent;
mod extent_store;
pub mod failpoint;
mod flush;
pub mod fs;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
mod iter;
mod key;
mod memtable;
mod meta;
mod options;
mod read;
mod redo;
pub mod replication;
mod row_lock;
mod snapshot;
mod space;
mod subtable;
mod table_options;
mod thread_index;
pub mod tier;
mod txn;
mod version;
mod write;

/// Number of levels of every sub-table's LSM-tree (L0, L1, L2).
pub(crate) const LEVELS: usize = 3;

pub use cache::CacheStats;
pub use catalog::{DEFAULT_TABLE, MAX_TABLE_NAME};
pub use contention::{LockClass, LockContention};
pub use db::{CheckpointInfo, Db, DbStats, DictionaryStatus, LevelInfo, LevelStats, Table};
pub use error::{Error, Result, QUOTED_NAME_BYTES};
pub use extent_store::CacheCounters;
pub use iter::{DbIterator, Iter};
pub use key::{Lsn, MAX_LSN};
pub use options::{
    Compression, Options, ReadOptions, RecoveryMode, WriteOptions, DEFAULT_COMPRESSION_PER_LEVEL, MAX_BATCH_SIZE,
    MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
pub use snapshot::Snapshot;
pub use table_options::{TableOptions, DEFAULT_ZSTD_LEVEL};
pub use txn::{Isolation, Txn, TxnCursor, TxnIter, TxnMode, TxnOptions, TxnStats, MAX_XID_BYTES};
pub use write::batch::WriteBatch;
pub use write::completion::WriteHandle;
pub use write::pipeline::WriteStats;
