//! Commit: the transaction's batch goes through the write pipeline; its row locks are
//! released once the batch is placed in the log (early lock release) or, with
//! `early_lock_release` off, once it is visible; a commit with nothing to write waits for the
//! commits it read under a lock. The rules and why they keep acknowledgements in order:
//! `docs/transactions.md`, *Early lock release*.
//!
//! Invariants:
//! - Locks taken by a committing transaction are owned by a [`HeldLocks`] from then on, and
//!   released exactly once: by its drop, whether its hook ran or was dropped unrun.
//! - A transaction is counted committed or rolled back exactly once.

use super::{Txn, TxnMode};
use crate::error::Result;
use crate::row_lock::{TxnId, TxnShared};
use crate::write::batch::WriteBatch;
use crate::write::completion::{Completion, WriteHandle};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Txn {
    /// Optimistic validation (if any), then the commit batch.
    pub(super) fn prepare_commit(&mut self) -> Result<WriteBatch> {
        if self.opts.mode == TxnMode::Optimistic {
            self.validate()?;
        }
        self.buffer.to_batch()
    }

    /// Commits: writes every buffered write as one atomic batch through the write pipeline,
    /// releases the locks as soon as the batch is placed in the log (early lock release, see
    /// the module header), and returns once it is visible (and durable with
    /// `write_options.sync`). Optimistic: validates first and fails with
    /// [`crate::Error::WriteConflict`], writing nothing, if a tracked key changed. On any error the
    /// transaction is rolled back.
    pub fn commit(mut self) -> Result<()> {
        let batch = self.prepare_commit()?;
        let result = if batch.is_empty() {
            self.commit_without_writes()
        } else {
            // Replicated: every lock waits for the write to settle (see `crate::replication`).
            let early_release = self.opts.early_lock_release || self.db.is_replicated();
            let (early, late) = self.take_locks().split(early_release);
            let result = match self.db.write_placed(batch, &self.opts.write_options, false, early) {
                Ok(Some(completion)) => {
                    let result = completion.wait();
                    self.db.note_wake(&completion);
                    result
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let (Ok(()), Some(held)) = (&result, late) {
                held.release_committed();
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
        self.take_locks().release_committed();
        Ok(())
    }

    /// Moves the locks out of the transaction, to be released when the commit is placed.
    pub(super) fn take_locks(&mut self) -> HeldLocks {
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
        // Replicated: every lock waits for the write to settle (see `crate::replication`).
        let early_release = self.opts.early_lock_release || self.db.is_replicated();
        let (early, late) = self.take_locks().split(early_release);
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
                held.release_committed();
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
}

/// A committing transaction's row locks. They are released when this is dropped: right after
/// the commit batch is placed (the pipeline runs the hook from [`HeldLocks::into_hook`]), or
/// when the write fails before that (the hook is dropped without running).
pub(super) struct HeldLocks {
    shared: Arc<TxnShared>,
    id: TxnId,
    locks: Vec<(u32, Vec<u8>)>,
    since: Option<Instant>,
}

impl HeldLocks {
    /// The owner and its rows, taken out: no longer released by this value's drop.
    pub(super) fn into_parts(mut self) -> (TxnId, Vec<(u32, Vec<u8>)>) {
        (self.id, std::mem::take(&mut self.locks))
    }

    /// The commit is placed (or, without early lock release, visible): counts the hold time of
    /// a committed writer and releases the locks.
    fn release_committed(mut self) {
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
            (Some(Box::new(move || self.release_committed())), None)
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
