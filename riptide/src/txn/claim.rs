//! How a transaction claims a key before it writes or reads it for update: a row lock
//! (pessimistic) or tracking for validation (optimistic), and, under snapshot isolation, the
//! check that the key did not change after the snapshot — or, while no unlocked read fixed the
//! snapshot, moving the snapshot past the change.
//!
//! Invariants (see also `txn`'s header):
//! - A key is checked only while this transaction holds its lock, so the newest version seen
//!   stays the newest until the transaction ends (except for non-transactional writers).
//! - A conflict with a version whose commit is still being logged is reported only once that
//!   version is visible, so a retry's new snapshot sees it.
//! - The snapshot moves only while `snapshot_pinned` is false: every read so far was of a row
//!   this transaction holds locked and checked, which reads the same at the new snapshot.
//! - With current reads on, a claim is checked against nothing: it reads (if asked) the newest
//!   version under the lock, as read committed does, and the commit depends on that version.

use super::{Txn, TxnMode};
use crate::error::{Error, Result};
use crate::key::Lsn;
use crate::row_lock::{LockError, TxnId};
use crate::Table;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Txn {
    /// Optimistic: remembers `key` for validation at commit (with the oldest LSN it was used at).
    /// Read committed has no snapshot, so the first tracked key takes one (`gc_pin`) before
    /// reading the LSN: compaction never writes a version newer than a live snapshot with
    /// LSN 0 (the bottom level's LSN zeroing), so a change after a tracked LSN keeps an LSN
    /// the check at commit can see.
    pub(super) fn track(&mut self, table: u32, key: &[u8]) {
        if self.opts.mode == TxnMode::Optimistic {
            if self.snapshot.is_none() && self.gc_pin.is_none() {
                self.gc_pin = Some(self.db.snapshot());
            }
            let lsn = self.read_lsn();
            self.tracked.entry((table, key.to_vec())).or_insert(lsn);
        }
    }

    /// Locks `key` for this transaction, mapping lock errors to typed errors.
    pub(super) fn lock(&mut self, table: &Table, id: u32, key: &[u8]) -> Result<bool> {
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
            Err(e) => Err(lock_error(e, self.id, table, key)),
        }
    }

    /// [`crate::Error::WriteConflict`] if `key` has a version newer than `since`.
    pub(super) fn check_unchanged(&self, table: &Table, key: &[u8], since: Lsn) -> Result<()> {
        match self.newest_version_after(table, key, since, false)? {
            Ok(_) => Ok(()),
            Err(found) => Err(self.conflict(table, key, since, found)),
        }
    }

    /// `Ok(value at the snapshot)` if `key` has no version newer than `since`, else
    /// `Err(LSN of the newest version)` once that version is visible: a version whose commit is
    /// still being logged (its locks were released early) is waited for, so that a retry's new
    /// snapshot sees it instead of conflicting with it again.
    pub(super) fn newest_version_after(
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

    pub(super) fn conflict(&self, table: &Table, key: &[u8], snapshot: Lsn, found: Lsn) -> Error {
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
    pub(super) fn advance_snapshot(&mut self) -> Option<Lsn> {
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
    pub(super) fn pin_snapshot(&self) {
        self.snapshot_pinned.store(true, Ordering::Relaxed);
    }

    /// Pessimistic: lock `key` and, under snapshot isolation, check it was not changed after
    /// the snapshot. Optimistic: track it for validation at commit. With `want_value`, returns
    /// `Some(committed value at the snapshot)` when the check read it (so the caller need not
    /// read again), `None` when it did not.
    pub(super) fn claim(
        &mut self,
        table: &Table,
        id: u32,
        key: &[u8],
        want_value: bool,
    ) -> Result<Option<Option<Vec<u8>>>> {
        if self.opts.mode == TxnMode::Optimistic {
            self.track(id, key);
            return Ok(None);
        }
        let new = self.lock(table, id, key)?;
        let snapshot = self.snapshot_lsn();
        if snapshot.is_none() || self.current_reads {
            // A current read under a snapshot reads the version too when it claims the key,
            // to remember one newer than the snapshot: once current reads are off, that key is
            // checked (and conflicts) like any other the snapshot cannot see.
            let remember = new && snapshot.is_some();
            if !want_value && !remember {
                return Ok(None);
            }
            // Read committed or a current read: the newest version of the row we now hold, even
            // one whose commit is still being logged (its locks were released early); we commit
            // after it.
            let latest = table.inner().latest_version(key, want_value)?;
            let value = latest.and_then(|(lsn, value)| {
                self.depends_on = self.depends_on.max(lsn);
                if remember && snapshot.is_some_and(|snap| lsn > snap) {
                    self.unchecked.push((id, key.to_vec()));
                }
                value
            });
            return Ok(want_value.then_some(value));
        }
        let snap = snapshot.expect("checked above");
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
}

/// The typed error of a lock not granted to owner `txn` on `key` of `table`.
pub(super) fn lock_error(e: LockError, txn: TxnId, table: &Table, key: &[u8]) -> Error {
    match e {
        LockError::Timeout(waited) => Error::LockTimeout {
            table: table.name().to_string(),
            key: key.to_vec(),
            waited,
        },
        LockError::Deadlock => Error::Deadlock {
            txn,
            table: table.name().to_string(),
            key: key.to_vec(),
        },
    }
}
