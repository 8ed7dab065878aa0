//! Transactions: MVCC reads at a snapshot, a write buffer that reaches the engine only at commit
//! as one atomic [`WriteBatch`], and either pessimistic row locks (two-phase locking with
//! deadlock detection) or optimistic validation at commit. How it works inside:
//! `docs/transactions.md`.
//!
//! Invariants:
//! - Nothing a transaction writes is visible to others before its commit batch is visible; the
//!   batch goes through the write pipeline like any [`WriteBatch`] (atomic, all-or-nothing
//!   after a crash).
//! - Pessimistic: every key the transaction writes or reads for update is exclusively locked
//!   (by the row-lock manager, module `row_lock`) before it is buffered or read, and stays
//!   locked until the commit batch is placed (or the transaction rolls back). Under snapshot
//!   isolation, a key is only buffered after its newest version was checked to be at or below
//!   the snapshot, while holding its lock; a key whose check failed is checked again on every
//!   later use.
//! - Optimistic: no lock while running; at commit every tracked key is locked (in key order, so
//!   optimistic commits never deadlock each other), checked, and kept locked until the batch is
//!   placed; so a later committer's check sees this commit's versions.
//! - Early lock release: a committing transaction's locks are released once its batch is
//!   *placed* — its LSNs allocated in log order and its versions in their memtables — without
//!   waiting for its log write and fsync. The next holder of such a row sees the new version
//!   in its locked reads (conflict checks, read-committed `get_for_update`). Acknowledgements
//!   keep their order: a dependant that writes commits at a higher LSN, and the pipeline
//!   acknowledges no LSN before every lower one is durable (a failed log write fails every
//!   later group); a dependant that writes nothing waits, at commit, until the newest version
//!   it read under a lock is visible, or fails with the error that stopped it.
//! - Otherwise locks are released only when the transaction ends (rollback, drop or a failed
//!   commit).
//! - A transaction is driven by the caller's thread; there is no thread per transaction.

mod buffer;
mod iter;
mod optimistic;

use crate::db::Db;
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::options::{ReadOptions, WriteOptions, MAX_BATCH_SIZE};
use crate::row_lock::{LockError, TxnId, TxnShared};
use crate::snapshot::Snapshot;
use crate::write::batch::WriteBatch;
use crate::write::completion::{Completion, WriteHandle};
use crate::Table;
use buffer::{Limits, WriteBuffer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use iter::{TxnCursor, TxnIter};

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

impl Db {
    /// Begins a transaction. It reads at a snapshot taken now (snapshot isolation) or at the
    /// latest committed state (read committed), buffers its writes, and writes them at
    /// [`Txn::commit`] as one atomic batch. Dropping it without committing rolls it back.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let accounts = db.create_table("accounts")?;
    /// accounts.put(b"alice", b"100")?;
    /// accounts.put(b"bob", b"0")?;
    ///
    /// let mut txn = db.begin(riptide::TxnOptions::default())?;
    /// let alice: u64 = String::from_utf8(txn.get_for_update(&accounts, b"alice")?.unwrap())?.parse()?;
    /// txn.put(&accounts, b"alice", (alice - 30).to_string().as_bytes())?;
    /// txn.put(&accounts, b"bob", b"30")?;
    /// assert_eq!(accounts.get(b"bob")?, Some(b"0".to_vec())); // not visible before commit
    /// txn.commit()?;
    /// assert_eq!(accounts.get(b"alice")?, Some(b"70".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Errors: [`Error::InvalidOption`] for a bad option, [`Error::Closed`].
    pub fn begin(&self, opts: TxnOptions) -> Result<Txn> {
        if opts.max_bytes > MAX_BATCH_SIZE {
            return Err(Error::InvalidOption {
                option: "max_bytes",
                reason: format!("at most MAX_BATCH_SIZE ({MAX_BATCH_SIZE})"),
            });
        }
        if opts.max_keys > u32::MAX as usize {
            return Err(Error::InvalidOption {
                option: "max_keys",
                reason: format!("at most {}", u32::MAX),
            });
        }
        let (db_id, shared) = self.txn_context()?;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        shared.begun.fetch_add(1, Ordering::Relaxed);
        let snapshot = match opts.isolation {
            Isolation::Snapshot => Some(self.snapshot()),
            Isolation::ReadCommitted => None,
        };
        Ok(Txn {
            db: self.clone(),
            db_id,
            shared,
            id,
            read_opts: ReadOptions {
                snapshot: snapshot.clone(),
                ..Default::default()
            },
            snapshot,
            opts,
            buffer: WriteBuffer::default(),
            locks: Vec::new(),
            first_lock_at: None,
            depends_on: 0,
            snapshot_pinned: AtomicBool::new(false),
            unchecked: Vec::new(),
            tracked: HashMap::new(),
            tables: HashMap::new(),
            committed: false,
        })
    }

    /// Counters of transactions and row locks since open.
    pub fn txn_stats(&self) -> TxnStats {
        let Ok((_, s)) = self.txn_context() else {
            return TxnStats::default();
        };
        let l = s.locks.counters();
        TxnStats {
            begun: s.begun.load(Ordering::Relaxed),
            committed: s.committed.load(Ordering::Relaxed),
            rolled_back: s.rolled_back.load(Ordering::Relaxed),
            conflicts: s.conflicts.load(Ordering::Relaxed),
            snapshot_advances: s.snapshot_advances.load(Ordering::Relaxed),
            lock_waits: l.waits,
            lock_timeouts: l.timeouts,
            deadlocks: l.deadlocks,
            locked_rows: s.locks.entries() as u64,
            lock_wait_nanos: l.wait_nanos,
            lock_holders: s.lock_holders.load(Ordering::Relaxed),
            lock_hold_nanos: s.lock_hold_nanos.load(Ordering::Relaxed),
        }
    }
}

/// A transaction ([`Db::begin`]). Use it from one thread at a time (it is `Send`); end it with
/// [`Txn::commit`], [`Txn::commit_async`] or [`Txn::rollback`]; dropping it rolls it back.
///
/// After a [`Error::Deadlock`], [`Error::LockTimeout`] or [`Error::WriteConflict`] (see
/// [`Error::is_retryable`]) the failed call changed nothing and the transaction is still open;
/// the usual reaction is to roll back and retry the whole transaction.
pub struct Txn {
    db: Db,
    db_id: u64,
    shared: Arc<TxnShared>,
    id: TxnId,
    opts: TxnOptions,
    snapshot: Option<Snapshot>,
    /// Reads at the snapshot (snapshot isolation) or the latest state (read committed).
    read_opts: ReadOptions,
    buffer: WriteBuffer,
    /// Rows this transaction holds locks on.
    locks: Vec<(u32, Vec<u8>)>,
    /// When its first lock was granted (for the lock hold time).
    first_lock_at: Option<Instant>,
    /// The newest LSN it read under a lock (read committed `get_for_update`), which may belong
    /// to a commit still in flight; its own commit is acknowledged only after that LSN is.
    depends_on: Lsn,
    /// Snapshot isolation: an unlocked read was made at the snapshot, so it may no longer move
    /// (see `Txn::advance_snapshot`).
    snapshot_pinned: AtomicBool,
    /// Pessimistic, snapshot isolation: locked rows whose conflict check failed.
    unchecked: Vec<(u32, Vec<u8>)>,
    /// Optimistic: keys to validate at commit, with the LSN they were first used at.
    tracked: HashMap<(u32, Vec<u8>), Lsn>,
    /// Every table the transaction touched, by id.
    tables: HashMap<u32, Table>,
    committed: bool,
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("isolation", &self.opts.isolation)
            .field("mode", &self.opts.mode)
            .field("snapshot", &self.snapshot.as_ref().map(Snapshot::lsn))
            .field("keys", &self.buffer.keys())
            .field("locks", &self.locks.len())
            .finish()
    }
}

impl Txn {
    /// This transaction's id (unique within the process).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The LSN of the snapshot it reads at (snapshot isolation), or `None` (read committed).
    pub fn snapshot_lsn(&self) -> Option<Lsn> {
        self.snapshot.as_ref().map(Snapshot::lsn)
    }

    /// Distinct keys written so far.
    pub fn len(&self) -> usize {
        self.buffer.keys()
    }

    /// True if nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buffer.keys() == 0
    }

    /// Size of the commit batch so far, in bytes (what [`TxnOptions::max_bytes`] limits).
    pub fn size_in_bytes(&self) -> usize {
        self.buffer.bytes()
    }

    fn check_table(&mut self, table: &Table) -> Result<u32> {
        if table.db_id() != self.db_id {
            return Err(Error::ForeignTable { what: "transaction" });
        }
        let inner = table.inner();
        if inner.is_dropped() {
            return Err(Error::TableDropped(inner.name.clone()));
        }
        self.tables.entry(inner.id).or_insert_with(|| table.clone());
        Ok(inner.id)
    }

    /// The LSN a read or write of a key is consistent with: the snapshot, or (read committed)
    /// the latest visible LSN, taken before the read.
    fn read_lsn(&self) -> Lsn {
        match &self.snapshot {
            Some(s) => s.lsn(),
            None => self.db.visible_lsn(),
        }
    }

    /// Optimistic: remembers `key` for validation at commit (with the oldest LSN it was used at).
    fn track(&mut self, table: u32, key: &[u8]) {
        if self.opts.mode == TxnMode::Optimistic {
            let lsn = self.read_lsn();
            self.tracked.entry((table, key.to_vec())).or_insert(lsn);
        }
    }

    /// Locks `key` for this transaction, mapping lock errors to typed errors.
    fn lock(&mut self, table: &Table, id: u32, key: &[u8]) -> Result<bool> {
        match self
            .shared
            .locks
            .acquire(self.id, id, key, self.opts.lock_timeout, self.opts.deadlock_detect)
        {
            Ok(new) => {
                if new {
                    self.locks.push((id, key.to_vec()));
                    self.first_lock_at.get_or_insert_with(Instant::now);
                }
                Ok(new)
            }
            Err(LockError::Timeout(waited)) => Err(Error::LockTimeout {
                table: table.name().to_string(),
                key: key.to_vec(),
                waited,
            }),
            Err(LockError::Deadlock) => Err(Error::Deadlock {
                txn: self.id,
                table: table.name().to_string(),
                key: key.to_vec(),
            }),
        }
    }

    /// [`Error::WriteConflict`] if `key` has a version newer than `since`.
    fn check_unchanged(&self, table: &Table, key: &[u8], since: Lsn) -> Result<()> {
        self.check_unchanged_read(table, key, since, false).map(|_| ())
    }

    /// [`Txn::check_unchanged`], also returning the key's value at the snapshot when
    /// `with_value` (the checked version is the newest, so it is the one the snapshot sees).
    fn check_unchanged_read(&self, table: &Table, key: &[u8], since: Lsn, with_value: bool) -> Result<Option<Vec<u8>>> {
        match self.newest_version_after(table, key, since, with_value)? {
            Ok(value) => Ok(value),
            Err(found) => Err(self.conflict(table, key, since, found)),
        }
    }

    /// `Ok(value at the snapshot)` if `key` has no version newer than `since`, else
    /// `Err(LSN of the newest version)` once that version is visible: a version whose commit is
    /// still being logged (its locks were released early) is waited for, so that a retry's new
    /// snapshot sees it instead of conflicting with it again.
    fn newest_version_after(
        &self,
        table: &Table,
        key: &[u8],
        since: Lsn,
        with_value: bool,
    ) -> Result<std::result::Result<Option<Vec<u8>>, Lsn>> {
        match table.inner().latest_version(key, with_value)? {
            Some((found, _)) if found > since => {
                if found > self.db.visible_lsn() {
                    self.db.wait_visible(found)?;
                }
                Ok(Err(found))
            }
            Some((_, value)) => Ok(Ok(value)),
            None => Ok(Ok(None)),
        }
    }

    fn conflict(&self, table: &Table, key: &[u8], snapshot: Lsn, found: Lsn) -> Error {
        self.shared.conflicts.fetch_add(1, Ordering::Relaxed);
        Error::WriteConflict {
            table: table.name().to_string(),
            key: key.to_vec(),
            snapshot,
            found,
        }
    }

    /// Snapshot isolation, pessimistic: moves the snapshot to now. Only while no unlocked read
    /// was made: every read so far was of a row this transaction holds locked, whose newest
    /// version it checked to be at or below the old snapshot and which no one else could
    /// change since, so it reads the same at the new one. The transaction then is as if it
    /// had begun now.
    fn advance_snapshot(&mut self) -> Option<Lsn> {
        if self.snapshot_pinned.load(Ordering::Relaxed) || self.snapshot.is_none() {
            return None;
        }
        let snapshot = self.db.snapshot();
        let lsn = snapshot.lsn();
        self.read_opts.snapshot = Some(snapshot.clone());
        self.snapshot = Some(snapshot);
        self.shared.snapshot_advances.fetch_add(1, Ordering::Relaxed);
        Some(lsn)
    }

    /// Fixes the snapshot: an unlocked read is about to be made at it.
    fn pin_snapshot(&self) {
        self.snapshot_pinned.store(true, Ordering::Relaxed);
    }

    /// Pessimistic: lock `key` and, under snapshot isolation, check it was not changed after
    /// the snapshot. Optimistic: track it for validation at commit. With `want_value`, returns
    /// `Some(committed value at the snapshot)` when the check read it (so the caller need not
    /// read again), `None` when it did not.
    fn claim(&mut self, table: &Table, id: u32, key: &[u8], want_value: bool) -> Result<Option<Option<Vec<u8>>>> {
        if self.opts.mode == TxnMode::Optimistic {
            self.track(id, key);
            return Ok(None);
        }
        let new = self.lock(table, id, key)?;
        let Some(snap) = self.snapshot_lsn() else {
            if !want_value {
                return Ok(None);
            }
            // Read committed: the newest version of the row we now hold, even one whose commit
            // is still being logged (its locks were released early); we commit after it.
            let latest = table.inner().latest_version(key, true)?;
            return Ok(Some(latest.and_then(|(lsn, value)| {
                self.depends_on = self.depends_on.max(lsn);
                value
            })));
        };
        let recheck = !new && self.unchecked.iter().any(|(t, k)| *t == id && k == key);
        if new || recheck {
            let mut checked = self.newest_version_after(table, key, snap, want_value)?;
            let mut snap = snap;
            if checked.is_err() {
                // Changed after a snapshot nothing has read yet: move the snapshot past the
                // change rather than fail (the version is visible by now).
                if let Some(now) = self.advance_snapshot() {
                    snap = now;
                    checked = self.newest_version_after(table, key, snap, want_value)?;
                }
            }
            let checked = checked.map_err(|found| self.conflict(table, key, snap, found));
            match checked {
                Ok(value) => {
                    if recheck {
                        self.unchecked.retain(|(t, k)| !(*t == id && k == key));
                    }
                    return Ok(want_value.then_some(value));
                }
                Err(e) => {
                    if new {
                        self.unchecked.push((id, key.to_vec()));
                    }
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    fn read(&self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        table.get_opt(key, &self.read_opts)
    }

    /// The value of `key` as this transaction sees it: its own write if it wrote the key, else
    /// the committed value at its snapshot (or, read committed, the latest committed value).
    pub fn get(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let id = self.check_table(table)?;
        if let Some(v) = self.buffer.get(id, key) {
            return Ok(v.clone());
        }
        self.pin_snapshot();
        if self.opts.validate_reads {
            self.track(id, key);
        }
        self.read(table, key)
    }

    /// Like [`Txn::get`], but first locks the key (pessimistic) or tracks it for validation
    /// (optimistic), so no other transaction can change it before this one ends. Under snapshot
    /// isolation, fails with [`Error::WriteConflict`] if the key changed after the snapshot.
    pub fn get_for_update(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let id = self.check_table(table)?;
        let checked = self.claim(table, id, key, true)?;
        if let Some(v) = self.buffer.get(id, key) {
            return Ok(v.clone());
        }
        match checked {
            Some(value) => Ok(value),
            None => self.read(table, key),
        }
    }

    /// Reads several keys, possibly of different tables, at one consistent view, each seeing
    /// this transaction's own writes.
    pub fn multi_get<K: AsRef<[u8]>>(&mut self, keys: &[(&Table, K)]) -> Vec<Result<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Result<Option<Vec<u8>>>>> = Vec::with_capacity(keys.len());
        let mut rest: Vec<(usize, &Table, &[u8])> = Vec::new();
        for (i, (table, key)) in keys.iter().enumerate() {
            let key = key.as_ref();
            match self.check_table(table) {
                Err(e) => out.push(Some(Err(e))),
                Ok(id) => match self.buffer.get(id, key) {
                    Some(v) => out.push(Some(Ok(v.clone()))),
                    None => {
                        if self.opts.validate_reads {
                            self.track(id, key);
                        }
                        out.push(None);
                        rest.push((i, table, key));
                    }
                },
            }
        }
        if !rest.is_empty() {
            self.pin_snapshot();
            let read: Vec<(&Table, &[u8])> = rest.iter().map(|(_, t, k)| (*t, *k)).collect();
            let got = self.db.multi_get(&self.read_opts, &read);
            for ((i, _, _), r) in rest.into_iter().zip(got) {
                out[i] = Some(r);
            }
        }
        out.into_iter().map(|r| r.unwrap_or(Err(Error::Closed))).collect()
    }

    fn limits(&self) -> Limits {
        Limits {
            max_bytes: self.opts.max_bytes,
            max_keys: self.opts.max_keys,
        }
    }

    fn write(&mut self, table: &Table, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        crate::write::batch::check_kv_sizes(key, value.unwrap_or_default())?;
        let id = self.check_table(table)?;
        let value = value.map(<[u8]>::to_vec);
        // Refuse an oversized write before taking a lock for it.
        self.buffer.check(table, key, &value, self.limits())?;
        self.claim(table, id, key, false)?;
        let limits = self.limits();
        self.buffer.write(table, key, value, limits)
    }

    /// Sets `key` to `value` in `table` when the transaction commits. Pessimistic: locks the
    /// key first (may fail with [`Error::LockTimeout`], [`Error::Deadlock`], or under snapshot
    /// isolation [`Error::WriteConflict`]). Fails with [`Error::TxnTooLarge`] past the size
    /// limits.
    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(table, key, Some(value))
    }

    /// Deletes `key` from `table` when the transaction commits; errors as [`Txn::put`].
    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<()> {
        self.write(table, key, None)
    }

    fn cursor(&self, table: &Table, opts: &ReadOptions, snapshot: &Option<Snapshot>) -> Result<TxnCursor> {
        let read = ReadOptions {
            snapshot: snapshot.clone(),
            lower_bound: opts.lower_bound.clone(),
            upper_bound: opts.upper_bound.clone(),
        };
        let base = table.raw_iter(&read)?;
        let delta = self.buffer.range(
            table.inner().id,
            opts.lower_bound.as_deref(),
            opts.upper_bound.as_deref(),
        );
        Ok(TxnCursor::new(base, delta))
    }

    fn iter_snapshot(&self, table: &Table, opts: &ReadOptions) -> Result<Option<Snapshot>> {
        if table.db_id() != self.db_id {
            return Err(Error::ForeignTable { what: "transaction" });
        }
        if opts.snapshot.is_some() {
            return Err(Error::InvalidOption {
                option: "snapshot",
                reason: "a transaction's iterator reads at the transaction's own view".into(),
            });
        }
        self.pin_snapshot();
        Ok(Some(match &self.snapshot {
            Some(s) => s.clone(),
            // Read committed: one statement, one view.
            None => self.db.snapshot(),
        }))
    }

    /// A positioned cursor over `table` within `opts`' bounds, showing the transaction's own
    /// writes (as of now) over its snapshot (read committed: the latest committed state as of
    /// now). `opts.snapshot` must be `None`. Keys read through iterators are not locked or
    /// validated (no protection against phantoms).
    pub fn raw_iter(&self, table: &Table, opts: &ReadOptions) -> Result<TxnCursor> {
        let snapshot = self.iter_snapshot(table, opts)?;
        self.cursor(table, opts, &snapshot)
    }

    /// A Rust iterator over `(key, value)` pairs, as [`Txn::raw_iter`] sees them; double-ended.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// t.put(b"a", b"1")?;
    /// t.put(b"b", b"2")?;
    /// let mut txn = db.begin(Default::default())?;
    /// txn.delete(&t, b"a")?;
    /// txn.put(&t, b"c", b"3")?;
    /// let keys: Vec<Vec<u8>> = txn.iter(&t, &Default::default())?.map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn iter(&self, table: &Table, opts: &ReadOptions) -> Result<TxnIter> {
        let snapshot = self.iter_snapshot(table, opts)?;
        Ok(TxnIter::new(
            self.cursor(table, opts, &snapshot)?,
            self.cursor(table, opts, &snapshot)?,
        ))
    }

    /// Marks the current state of the write buffer; [`Txn::rollback_to_savepoint`] returns to
    /// it. Savepoints nest. Locks taken after a savepoint are kept when rolling back to it.
    pub fn set_savepoint(&mut self) {
        self.buffer.set_savepoint();
    }

    /// Undoes every write since the newest savepoint and removes that savepoint;
    /// [`Error::NoSavepoint`] if there is none.
    pub fn rollback_to_savepoint(&mut self) -> Result<()> {
        self.buffer.rollback_to_savepoint()
    }

    /// Removes the newest savepoint and keeps the writes made since it;
    /// [`Error::NoSavepoint`] if there is none.
    pub fn pop_savepoint(&mut self) -> Result<()> {
        self.buffer.pop_savepoint()
    }

    /// Savepoints currently set.
    pub fn savepoints(&self) -> usize {
        self.buffer.savepoints()
    }

    /// Optimistic validation (if any), then the commit batch.
    fn prepare_commit(&mut self) -> Result<WriteBatch> {
        if self.opts.mode == TxnMode::Optimistic {
            self.validate()?;
        }
        self.buffer.to_batch()
    }

    /// Commits: writes every buffered write as one atomic batch through the write pipeline,
    /// releases the locks as soon as the batch is placed in the log (early lock release, see
    /// the module header), and returns once it is visible (and durable with
    /// `write_options.sync`). Optimistic: validates first and fails with
    /// [`Error::WriteConflict`], writing nothing, if a tracked key changed. On any error the
    /// transaction is rolled back.
    pub fn commit(mut self) -> Result<()> {
        let batch = self.prepare_commit()?;
        let result = if batch.is_empty() {
            self.commit_without_writes()
        } else {
            let (early, late) = self.take_locks().split(self.opts.early_lock_release);
            let result = match self.db.write_placed(batch, &self.opts.write_options, false, early) {
                Ok(Some(completion)) => completion.wait(),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let (Ok(()), Some(held)) = (&result, late) {
                held.placed();
            }
            result
        };
        if result.is_ok() {
            self.committed = true;
            self.shared.committed.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// A commit with nothing to write: waits for the commits it read under a lock, then
    /// releases its locks (by drop).
    fn commit_without_writes(&mut self) -> Result<()> {
        if self.depends_on > self.db.visible_lsn() {
            self.db.wait_visible(self.depends_on)?;
        }
        self.take_locks().placed();
        Ok(())
    }

    /// Moves the locks out of the transaction, to be released when the commit is placed.
    fn take_locks(&mut self) -> HeldLocks {
        HeldLocks {
            shared: self.shared.clone(),
            id: self.id,
            locks: std::mem::take(&mut self.locks),
            since: self.first_lock_at.take(),
        }
    }

    /// Commits asynchronously: validates (optimistic), queues the batch and returns a handle
    /// that completes when the batch is visible (and durable with `write_options.sync`); the
    /// locks are released once the batch is placed in the log (early lock release), on the
    /// pipeline thread that places it. Errors (including validation failures) are reported
    /// through the handle. A transaction that writes nothing but read, under a lock, a version
    /// whose commit is still in flight waits for that commit here.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// let mut txn = db.begin(Default::default())?;
    /// txn.put(&t, b"k", b"v")?;
    /// let handle = txn.commit_async();
    /// handle.on_complete(|r| assert!(r.is_ok()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn commit_async(mut self) -> WriteHandle {
        let batch = match self.prepare_commit() {
            Ok(b) => b,
            Err(e) => return WriteHandle::failed(e),
        };
        if batch.is_empty() {
            if let Err(e) = self.commit_without_writes() {
                return WriteHandle::failed(e);
            }
            self.committed = true;
            self.shared.committed.fetch_add(1, Ordering::Relaxed);
            let completion = Completion::new();
            completion.complete(Ok(()));
            return WriteHandle { completion };
        }
        let (early, late) = self.take_locks().split(self.opts.early_lock_release);
        let shared = self.shared.clone();
        // Counted when the outcome is known; drop must not count a rollback meanwhile.
        self.committed = true;
        let completion = match self.db.write_placed(batch, &self.opts.write_options, true, early) {
            Ok(Some(c)) => c,
            Ok(None) => {
                let c = Completion::new();
                c.complete(Ok(()));
                c
            }
            Err(e) => {
                shared.rolled_back.fetch_add(1, Ordering::Relaxed);
                return WriteHandle::failed(e);
            }
        };
        let user = Completion::new();
        let done = user.clone();
        WriteHandle { completion }.on_complete(move |result| {
            if let (Ok(()), Some(held)) = (&result, late) {
                held.placed();
            }
            let counter = if result.is_ok() {
                &shared.committed
            } else {
                &shared.rolled_back
            };
            counter.fetch_add(1, Ordering::Relaxed);
            done.complete(result);
        });
        WriteHandle { completion: user }
    }

    /// Discards every buffered write and releases the locks (as dropping does).
    pub fn rollback(self) {
        drop(self);
    }
}

/// A committing transaction's row locks. They are released when this is dropped: right after
/// the commit batch is placed (the pipeline runs the hook from [`HeldLocks::into_hook`]), or
/// when the write fails before that (the hook is dropped without running).
struct HeldLocks {
    shared: Arc<TxnShared>,
    id: TxnId,
    locks: Vec<(u32, Vec<u8>)>,
    since: Option<Instant>,
}

impl HeldLocks {
    /// The commit is placed: counts the hold time and releases the locks.
    fn placed(mut self) {
        if let Some(since) = self.since.take() {
            self.shared.lock_holders.fetch_add(1, Ordering::Relaxed);
            self.shared
                .lock_hold_nanos
                .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// With early lock release, the hook that releases the locks when the batch is placed;
    /// without, the locks themselves, for the caller to release once the batch is visible.
    fn split(self, early: bool) -> (Option<crate::write::pipeline::OnPlaced>, Option<HeldLocks>) {
        if early {
            (Some(Box::new(move || self.placed())), None)
        } else {
            (None, Some(self))
        }
    }
}

impl Drop for HeldLocks {
    fn drop(&mut self) {
        if !self.locks.is_empty() {
            self.shared.locks.release_all(self.id, std::mem::take(&mut self.locks));
        }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.locks.is_empty() {
            self.shared.locks.release_all(self.id, std::mem::take(&mut self.locks));
        }
        if !self.committed {
            self.shared.rolled_back.fetch_add(1, Ordering::Relaxed);
        }
    }
}
