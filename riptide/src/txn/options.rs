//! The public knobs and counters of transactions: [`Isolation`], [`TxnMode`], [`TxnOptions`]
//! and [`TxnStats`]. No logic beyond the defaults.

use crate::options::WriteOptions;
#[cfg(doc)]
use crate::{db::Db, error::Error};
use std::time::Duration;

/// Isolation level of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Snapshot isolation: every read sees the database as of `begin`, plus the transaction's
    /// own writes; writing a key that another transaction committed after `begin` fails with
    /// [`Error::WriteConflict`] (first updater wins). Allows write skew.
    ///
    /// Until the transaction makes its first unlocked read (`get`, `multi_get`, an iterator),
    /// its snapshot is not fixed: a pessimistic write or `get_for_update` that finds the row
    /// changed after the snapshot moves the snapshot to now instead of failing, as if the
    /// transaction had begun later ([`TxnStats::snapshot_advances`]); rows it read before
    /// are locked by it and read the same at the new snapshot.
    #[default]
    Snapshot,
    /// Read committed: each read sees the latest committed state (an iterator: as of its
    /// creation), plus the transaction's own writes. Allows non-repeatable reads and, for keys
    /// read without `get_for_update`, lost updates.
    ReadCommitted,
}

/// Concurrency control of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxnMode {
    /// Row locks taken on write and `get_for_update`, held until the end; conflicts surface
    /// while the transaction runs ([`Error::LockTimeout`], [`Error::Deadlock`],
    /// [`Error::WriteConflict`]).
    #[default]
    Pessimistic,
    /// No locks while running; `commit` validates that no written (or read-for-update, or with
    /// [`TxnOptions::validate_reads`], read) key changed since it was first used, and fails with
    /// [`Error::WriteConflict`] writing nothing if one did.
    Optimistic,
}

/// Options of one transaction ([`Db::begin`]). Build with `TxnOptions::default()` and struct
/// update syntax.
#[derive(Debug, Clone)]
pub struct TxnOptions {
    /// Isolation level. Default: [`Isolation::Snapshot`].
    pub isolation: Isolation,
    /// Pessimistic (row locks) or optimistic (validation at commit). Default: pessimistic.
    pub mode: TxnMode,
    /// How long to wait for a row lock held by another transaction before failing with
    /// [`Error::LockTimeout`]; zero fails at once. Default: 5 s.
    pub lock_timeout: Duration,
    /// Detect deadlocks when a lock wait would close a cycle of waiting transactions (the one
    /// closing it gets [`Error::Deadlock`]); when false, deadlocks end by lock timeout.
    /// Default: true.
    pub deadlock_detect: bool,
    /// Largest size of the commit batch in bytes (keys + values + 21 bytes per key); a write
    /// past it fails with [`Error::TxnTooLarge`]. Default: 32 MiB (X-Engine's limit); at most
    /// [`crate::MAX_BATCH_SIZE`].
    pub max_bytes: usize,
    /// Most distinct keys the transaction may write. Default: 1,000,000.
    pub max_keys: usize,
    /// Optimistic mode: also validate keys read with `get`/`multi_get` (not iterators) at
    /// commit, which rules out write skew among point reads. Default: false.
    pub validate_reads: bool,
    /// Release the row locks as soon as the commit batch is placed in the log, before its log
    /// write and fsync end (early lock release, `docs/transactions.md`); when false, hold them
    /// until the batch is visible, as before issue 21. Either way, no transaction that saw
    /// this one's writes is acknowledged before they are durable. Default: true.
    pub early_lock_release: bool,
    /// How the commit batch is written (`sync` for durability against power loss).
    pub write_options: WriteOptions,
}

impl Default for TxnOptions {
    fn default() -> Self {
        TxnOptions {
            isolation: Isolation::Snapshot,
            mode: TxnMode::Pessimistic,
            lock_timeout: Duration::from_secs(5),
            deadlock_detect: true,
            max_bytes: 32 << 20,
            max_keys: 1_000_000,
            validate_reads: false,
            early_lock_release: true,
            write_options: WriteOptions::default(),
        }
    }
}

/// Counters of transactions since open ([`Db::txn_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxnStats {
    /// Transactions begun.
    pub begun: u64,
    /// Transactions whose commit succeeded.
    pub committed: u64,
    /// Transactions rolled back (explicitly, by drop, or by a failed commit).
    pub rolled_back: u64,
    /// Write conflicts found (snapshot-isolation checks and optimistic validation).
    pub conflicts: u64,
    /// Snapshot-isolation transactions that moved their snapshot forward past a change of a
    /// row they locked instead of failing, because they had read nothing unlocked yet.
    pub snapshot_advances: u64,
    /// Lock requests that had to wait.
    pub lock_waits: u64,
    /// Lock waits that timed out.
    pub lock_timeouts: u64,
    /// Deadlock victims.
    pub deadlocks: u64,
    /// Rows locked or waited for right now.
    pub locked_rows: u64,
    /// Total time spent waiting for row locks, in nanoseconds.
    pub lock_wait_nanos: u64,
    /// Committed transactions that held row locks.
    pub lock_holders: u64,
    /// Their total lock hold time, from the first lock granted to the release, in nanoseconds
    /// (`lock_hold_nanos / lock_holders` is the average hold time of a committed writer).
    pub lock_hold_nanos: u64,
}
