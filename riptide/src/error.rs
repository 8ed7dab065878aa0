//! The one error type of the engine.
//!
//! Invariant: every fallible public function returns [`Result`]; library code never panics on
//! I/O errors or bad input. Variants are stable enough to match on, and the enum is
//! `#[non_exhaustive]` so new kinds can be added without breaking callers.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::key::Lsn;

/// The most bytes of a refused table name that [`Error::InvalidTableName`] quotes.
pub const QUOTED_NAME_BYTES: usize = 64;

/// Result alias used throughout Riptide.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Riptide.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error (EIO, ENOSPC, ...), with the operation and file it hit.
    #[error("I/O error during {op} on {path:?}: {source}")]
    Io {
        /// What the engine was doing (`"write"`, `"fsync"`, `"open"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },
    /// On-disk data failed a checksum or is structurally invalid.
    #[error("corruption in {path:?} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged record or block.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// An option failed validation at open; `option` names it.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's field name in [`crate::Options`] or [`crate::WriteOptions`].
        option: &'static str,
        /// Why the value was refused.
        reason: String,
    },
    /// A key longer than [`crate::MAX_KEY_SIZE`].
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value longer than [`crate::MAX_VALUE_SIZE`].
    #[error("value of {len} bytes exceeds the maximum of {max} bytes")]
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A write batch larger than [`crate::MAX_BATCH_SIZE`] once encoded.
    #[error("write batch of {len} bytes exceeds the maximum of {max} bytes")]
    BatchTooLarge {
        /// The encoded size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The named table does not exist.
    #[error("table `{0}` does not exist")]
    TableNotFound(String),
    /// A table with this name already exists.
    #[error("table `{0}` already exists")]
    TableExists(String),
    /// A table name that is empty, too long, or the default table where that is not allowed.
    #[error("invalid table name `{name}`: {reason}")]
    InvalidTableName {
        /// The refused name: its first [`QUOTED_NAME_BYTES`] bytes, with `...` appended when
        /// it was longer.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The table handle refers to a table that has been dropped.
    #[error("table `{0}` has been dropped")]
    TableDropped(String),
    /// A batch, snapshot, multi-get or transaction of one database instance was used with a
    /// table or snapshot of another; `what` names which.
    #[error("{what} refers to a table or snapshot of another database")]
    ForeignTable {
        /// `"write batch"`, `"snapshot"`, `"multi_get"` or `"transaction"`.
        what: &'static str,
    },
    /// A previous write or fsync failed; the instance refuses writes until it is reopened.
    #[error("database is read-only after a failed write: {0}")]
    Poisoned(Arc<Error>),
    /// The database is closed.
    #[error("database is closed")]
    Closed,
    /// The instance was opened with [`crate::Db::open_read_only`]: it refuses writes, DDL,
    /// flushes, compactions and checkpoints.
    #[error("database at {0:?} is open read-only")]
    ReadOnly(PathBuf),
    /// A replicated database ([`crate::Db::set_replicator`]) refused a write because this
    /// replica does not lead its group; nothing was written. `leader` names the leader when
    /// the replica knows it.
    #[error("not the leader; {}", leader.as_deref().unwrap_or("no leader is known"))]
    NotLeader {
        /// The leader, as the replication layer names it.
        leader: Option<String>,
    },
    /// A replicated write's outcome is unknown: leadership changed or the replication layer
    /// stopped while it was in flight, so it may or may not commit.
    #[error("replication failed, outcome unknown: {0}")]
    Replication(String),
    /// A replicated database has no transaction prepared under this id
    /// ([`crate::Db::commit_prepared`], [`crate::Db::rollback_prepared`]): it was never
    /// prepared, or its decision was already applied. Nothing was written.
    #[error("no transaction is prepared under the id {0}")]
    UnknownXid(String),
    /// A transaction is prepared under this id already ([`crate::Txn::prepare`],
    /// [`crate::Db::lock_prepared`]); nothing was prepared or locked.
    #[error("a transaction is prepared under the id {0} already")]
    DuplicateXid(String),
    /// `WriteOptions::no_slowdown` was set and the write would have stalled.
    #[error("write would stall: {0}")]
    WouldStall(&'static str),
    /// The data directory is locked by another process or `Db` instance.
    #[error("database at {0:?} is locked by another instance")]
    Locked(PathBuf),
    /// The directory holds no database and `create_if_missing` is false.
    #[error("no database at {0:?} and create_if_missing is false")]
    NotFound(PathBuf),
    /// The path exists but does not hold a Riptide database (from [`crate::Db::destroy`]:
    /// it holds other files, so nothing was deleted).
    #[error("not a Riptide database: {0:?}")]
    NotADatabase(PathBuf),
    /// The directory already holds a database and `error_if_exists` is true.
    #[error("database at {0:?} already exists and error_if_exists is true")]
    AlreadyExists(PathBuf),
    /// A transaction waited longer than its `lock_timeout` for a row lock held by another
    /// transaction. The statement failed; the transaction is still open (roll it back or retry).
    #[error("row lock wait on table `{table}` timed out after {waited:?}")]
    LockTimeout {
        /// The table of the contended row.
        table: String,
        /// The contended key.
        key: Vec<u8>,
        /// How long the transaction waited.
        waited: Duration,
    },
    /// Waiting for a row lock would close a cycle in the wait-for graph: this transaction is
    /// the victim. Roll it back (releasing its locks) and retry.
    #[error("deadlock: transaction {txn} was chosen as the victim while locking a row of table `{table}`")]
    Deadlock {
        /// The victim's id ([`crate::Txn::id`]).
        txn: u64,
        /// The table of the row it asked for.
        table: String,
        /// The key it asked for.
        key: Vec<u8>,
    },
    /// A key the transaction writes (or, in optimistic mode, validates) was changed by another
    /// commit after the transaction's snapshot: first updater wins. Roll back and retry.
    #[error(
        "write conflict on table `{table}`: the key changed at LSN {found}, after the transaction's LSN {snapshot}"
    )]
    WriteConflict {
        /// The table of the key.
        table: String,
        /// The key.
        key: Vec<u8>,
        /// The LSN the transaction read the key at (its snapshot).
        snapshot: Lsn,
        /// The LSN of the newer committed version.
        found: Lsn,
    },
    /// A write would take the transaction past its size limit
    /// ([`crate::TxnOptions::max_bytes`] or [`crate::TxnOptions::max_keys`]); the write was
    /// refused and the transaction is unchanged.
    #[error("transaction too large: {what} would be {len}, the limit is {max}")]
    TxnTooLarge {
        /// `"bytes"` or `"keys"`.
        what: &'static str,
        /// The size the write would have reached.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `rollback_to_savepoint` or `pop_savepoint` without a savepoint.
    #[error("the transaction has no savepoint")]
    NoSavepoint,
    /// An object-store request failed for good (after retries, for transient errors); the
    /// database stays usable, and the operation may be tried again.
    #[error("object store {op} of {object} failed ({kind}): {message}")]
    ObjectStore {
        /// `"put"`, `"get"`, `"delete"`, `"list"`, or the read that needed the object.
        op: &'static str,
        /// The object (`s3://bucket/prefix/ext/...`).
        object: String,
        /// Whether it was missing, transient (retries ran out) or permanent.
        kind: ObjectErrorKind,
        /// What the store said.
        message: String,
    },
    /// A file was written by a newer, unknown format version.
    #[error("{path:?} has format version {found}; this build reads up to {supported}")]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// Version found on disk.
        found: u32,
        /// Newest version this build understands.
        supported: u32,
    },
}

impl Error {
    /// Wraps an `io::Error` with the operation and path it hit.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        // An object-tier read carries its own, already named error through `io::Error`.
        let mut source = source;
        if source.get_ref().is_some_and(|e| e.is::<ObjectReadError>()) {
            let kind = source.kind();
            source = match source.into_inner().map(|b| b.downcast::<ObjectReadError>()) {
                Some(Ok(inner)) => return inner.0,
                Some(Err(other)) => io::Error::new(kind, other),
                None => io::Error::from(kind),
            };
        }
        Error::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Builds a [`Error::InvalidTableName`], quoting at most the first
    /// [`QUOTED_NAME_BYTES`] bytes of `name` (cut at a character boundary, `...` appended).
    pub(crate) fn invalid_table_name(name: &str, reason: &'static str) -> Self {
        let mut end = name.len().min(QUOTED_NAME_BYTES);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let quoted = if end < name.len() {
            format!("{}...", &name[..end])
        } else {
            name.to_string()
        };
        Error::InvalidTableName { name: quoted, reason }
    }

    /// Builds a [`Error::Corruption`].
    pub(crate) fn corruption(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True for [`Error::Corruption`], also when wrapped in [`Error::Poisoned`].
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Corruption { .. } => true,
            Error::Poisoned(inner) => inner.is_corruption(),
            _ => false,
        }
    }

    /// True for the errors a transaction may succeed after by rolling back and retrying:
    /// [`Error::Deadlock`], [`Error::LockTimeout`] and [`Error::WriteConflict`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Deadlock { .. } | Error::LockTimeout { .. } | Error::WriteConflict { .. }
        )
    }

    /// The OS error number (`libc::EIO`, `libc::ENOSPC`, ...) behind an I/O error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Poisoned(inner) => inner.raw_os_error(),
            _ => None,
        }
    }
}

/// Why an object-store request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectErrorKind {
    /// The object does not exist.
    NotFound,
    /// Trying again may succeed: a timeout, a 5xx answer, throttling (503 SlowDown, 429), a
    /// connection reset or refused.
    Transient,
    /// Trying again will not help: refused credentials, a missing bucket, a malformed request,
    /// an answer of the wrong length.
    Permanent,
}

impl std::fmt::Display for ObjectErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjectErrorKind::NotFound => "not found",
            ObjectErrorKind::Transient => "transient",
            ObjectErrorKind::Permanent => "permanent",
        })
    }
}

/// An engine error carried through `io::Error` (an object-tier read goes through the
/// file-system read path); [`Error::io`] unwraps it again.
#[derive(Debug)]
pub(crate) struct ObjectReadError(pub(crate) Error);

impl std::fmt::Display for ObjectReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ObjectReadError {}
