//! Transactions: MVCC reads at a snapshot, a write buffer that reaches the engine only at commit
//! as one atomic [`crate::WriteBatch`], and either pessimistic row locks (two-phase locking with
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
//!   later use. While current reads are on ([`Txn::set_current_reads`]) a claimed key is not
//!   checked: its locked read returns the newest committed version instead (MySQL's "current
//!   read"), and the commit is ordered after that version as under read committed.
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
mod claim;
mod commit;
mod iter;
mod optimistic;
mod options;
mod prepared;

use crate::db::Db;
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::options::{ReadOptions, MAX_BATCH_SIZE};
use crate::row_lock::{TxnId, TxnShared};
use crate::snapshot::Snapshot;
use crate::Table;
use buffer::{Limits, WriteBuffer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use iter::{TxnCursor, TxnIter};
pub use options::{Isolation, TxnMode, TxnOptions, TxnStats};
pub use prepared::MAX_XID_BYTES;

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
            current_reads: false,
            tracked: HashMap::new(),
            gc_pin: None,
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
    /// Pessimistic: locking reads and writes read the newest committed version instead of
    /// checking against the snapshot ([`Txn::set_current_reads`]).
    current_reads: bool,
    /// Optimistic: keys to validate at commit, with the LSN they were first used at.
    tracked: HashMap<(u32, Vec<u8>), Lsn>,
    /// Optimistic read committed: a snapshot held from the first tracked key on, at or below
    /// every tracked LSN, so that no later version of a tracked key loses its LSN to
    /// compaction's LSN zeroing before the commit checks it.
    gc_pin: Option<Snapshot>,
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

    /// Changes how long later lock requests of this transaction wait
    /// ([`TxnOptions::lock_timeout`]); zero makes them fail at once with
    /// [`Error::LockTimeout`] (a "nowait" attempt, counted as a timeout) instead of waiting.
    /// Locks already held are kept.
    pub fn set_lock_timeout(&mut self, timeout: std::time::Duration) {
        self.opts.lock_timeout = timeout;
    }

    /// Turns current reads on or off for the calls that follow (pessimistic transactions; off
    /// at begin). While on, [`Txn::get_for_update`], [`Txn::put`] and [`Txn::delete`] lock the
    /// key and do not check it against the snapshot: a locking read returns the newest committed
    /// version, even one newer than the snapshot, and a write of a key changed after the
    /// snapshot is no [`Error::WriteConflict`]. This is InnoDB's rule for UPDATE, DELETE and
    /// `SELECT ... FOR UPDATE` under REPEATABLE READ (a "current read"); plain reads
    /// ([`Txn::get`], iterators) still read the snapshot. The commit is acknowledged only after
    /// every version read this way is. A key claimed this way whose newest version is newer
    /// than the snapshot is a write conflict again if it is claimed after current reads are
    /// turned off (its snapshot value must not be read or written over under the lock). Under
    /// read committed it changes nothing.
    pub fn set_current_reads(&mut self, on: bool) {
        self.current_reads = on;
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

    /// Discards every buffered write and releases the locks (as dropping does).
    pub fn rollback(self) {
        drop(self);
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
