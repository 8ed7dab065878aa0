//! Two-phase commit on a replicated database: a transaction is *prepared* under an id (its
//! write set made durable by the replication layer and applied to no table), then committed or
//! rolled back by that id, from any session of the leader, after a coordinator decided. This is
//! the participant's side of cross-partition transactions (`docs/cluster.md`); the write sets
//! themselves are kept by the replication layer ([`crate::replication::Phase`]).
//!
//! Invariants:
//! - Only a replicated database prepares; elsewhere [`Txn::prepare`] fails and the transaction
//!   rolls back.
//! - A prepare registers its transaction's row locks under its id (`row_lock::PreparedLocks`)
//!   before it is proposed, so the id's decision, which can only be applied after the prepare,
//!   always finds them. A prepare that fails for good releases them (nothing was prepared); one
//!   whose outcome is unknown keeps them until it settles.
//! - An id's locks are released when its decision is *applied* on this replica (the
//!   replication layer calls [`Db::release_prepared`] once the decision's rows are written),
//!   whoever proposed it and however its proposer heard the outcome; so an id decided while
//!   another node led releases its locks here too.
//! - An id holds at most one set of locks: a second prepare of an id this replica holds, and
//!   locking an id's rows again ([`Db::lock_prepared`]), are refused ([`Error::DuplicateXid`]).

use super::Txn;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::replication::Phase;
use crate::row_lock::TxnShared;
use crate::Table;
use crate::WriteOptions;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
fn check_xid(xid: &[u8]) -> Result<()> {
    if xid.is_empty() || xid.len() > MAX_XID_BYTES {
        return Err(Error::InvalidOption {
            option: "xid",
            reason: format!("{} bytes (1 ..= {MAX_XID_BYTES})", xid.len()),
        });
    }
    Ok(())
}

/// The longest transaction id (MySQL's XA ids: 64-byte gtrid and bqual, and a format id).
pub const MAX_XID_BYTES: usize = 140;

impl Txn {
    /// Prepares the transaction under `xid` (two-phase commit's first step, on a replicated
    /// database): its writes are made durable on the replicas and applied to no table; its
    /// row locks stay held until the decision of the same id ([`Db::commit_prepared`],
    /// [`Db::rollback_prepared`]) is applied. Blocks until the prepare's outcome is known.
    ///
    /// Errors: [`Error::InvalidOption`] on a database without a replicator or for an empty or
    /// over-long id, [`Error::DuplicateXid`] for an id prepared already (the transaction rolls
    /// back); the replication layer's [`Error::NotLeader`] (nothing prepared: the transaction
    /// rolled back) or [`Error::Replication`] (unknown: the id may be prepared; its locks stay
    /// held until the replication layer knows).
    pub fn prepare(mut self, xid: &[u8]) -> Result<()> {
        check_xid(xid)?;
        if !self.db.is_replicated() {
            return Err(Error::InvalidOption {
                option: "prepare",
                reason: "a transaction is prepared only on a replicated database".into(),
            });
        }
        let batch = self.prepare_commit()?;
        let (owner, rows) = self.take_locks().into_parts();
        let shared = self.shared.clone();
        if let Err(rows) = shared.prepared.register(xid.to_vec(), owner, rows) {
            shared.locks.release_all(owner, rows);
            return Err(duplicate(xid));
        }
        // Dropped unrun (the prepare failed for good, or the layer stopped): the id's locks
        // go, unless its decision took them already. Run (applied): they stay the id's.
        let guard = FailedPrepare {
            shared,
            xid: xid.to_vec(),
            owner: Some(owner),
        };
        let keep: crate::write::pipeline::OnPlaced = Box::new(move || guard.disarm());
        let result = self.db.replicate_phase(
            &batch,
            &self.opts.write_options,
            Phase::Prepare(xid.to_vec()),
            Some(keep),
        );
        if result.is_ok() {
            self.committed = true;
            self.shared.committed.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

/// Releases a prepare's locks when dropped armed: the prepare did not happen.
struct FailedPrepare {
    shared: Arc<TxnShared>,
    xid: Vec<u8>,
    /// The locks' owner; `None` once the prepare is applied.
    owner: Option<u64>,
}

impl FailedPrepare {
    /// The prepare is applied: the locks stay the id's.
    fn disarm(mut self) {
        self.owner = None;
    }
}

impl Drop for FailedPrepare {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            self.shared.prepared.release(&self.shared.locks, &self.xid, Some(owner));
        }
    }
}

fn duplicate(xid: &[u8]) -> Error {
    Error::DuplicateXid(String::from_utf8_lossy(xid).into_owned())
}

impl Db {
    /// Commits the transaction prepared under `xid` (two-phase commit's decision): its stored
    /// writes are applied on every replica, and its locks released as that happens. Any
    /// session of the leader may decide. Errors: [`Error::UnknownXid`] when nothing is
    /// prepared under `xid`; [`Error::NotLeader`] and [`Error::Replication`] as for any
    /// replicated write (the transaction stays prepared, or may).
    pub fn commit_prepared(&self, xid: &[u8], opts: &WriteOptions) -> Result<()> {
        check_xid(xid)?;
        self.replicate_phase(
            &crate::WriteBatch::new(),
            opts,
            Phase::CommitPrepared(xid.to_vec()),
            None,
        )
    }

    /// Rolls back the transaction prepared under `xid`: its stored writes are forgotten on
    /// every replica and its locks released. Errors as [`Db::commit_prepared`].
    pub fn rollback_prepared(&self, xid: &[u8], opts: &WriteOptions) -> Result<()> {
        check_xid(xid)?;
        self.replicate_phase(
            &crate::WriteBatch::new(),
            opts,
            Phase::RollbackPrepared(xid.to_vec()),
            None,
        )
    }

    /// Releases the row locks this replica holds for the transaction prepared under `xid`, if
    /// any: for the replication layer, once the id's decision is applied here (its rows
    /// written and visible), on every replica.
    pub fn release_prepared(&self, xid: &[u8]) {
        if let Ok((_, shared)) = self.txn_context() {
            shared.prepared.release(&shared.locks, xid, None);
        }
    }

    /// Locks `rows` for the transaction prepared under `xid`, waiting up to `timeout` for any
    /// other holder: what a new leader does for each write set stored prepared, before it
    /// serves writes, so that the prepared rows stay locked across a failover. The caller
    /// checks afterwards that the id is still undecided (and calls [`Db::release_prepared`]
    /// if not): a decision applied meanwhile may have found nothing to release.
    ///
    /// Errors: [`Error::DuplicateXid`] when `xid` holds locks here already; [`Error::LockTimeout`]
    /// or [`Error::Deadlock`] (the locks taken by this call are released), [`Error::Closed`].
    pub fn lock_prepared(&self, xid: &[u8], rows: &[(Table, Vec<u8>)], timeout: Duration) -> Result<()> {
        check_xid(xid)?;
        let (db_id, shared) = self.txn_context()?;
        if shared.prepared.ids().binary_search(&xid.to_vec()).is_ok() {
            return Err(duplicate(xid));
        }
        let owner = shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut taken: Vec<(u32, Vec<u8>)> = Vec::with_capacity(rows.len());
        let fail = |taken: Vec<(u32, Vec<u8>)>, e: Error| {
            shared.locks.release_all(owner, taken);
            Err(e)
        };
        for (table, key) in rows {
            if table.db_id() != db_id {
                return fail(taken, Error::ForeignTable { what: "table" });
            }
            let id = table.inner().id;
            match shared.locks.acquire(owner, id, key, timeout, true) {
                Ok(true) => taken.push((id, key.clone())),
                Ok(false) => {}
                // What this call took is released.
                Err(e) => return fail(taken, super::claim::lock_error(e, owner, table, key)),
            }
        }
        if let Err(taken) = shared.prepared.register(xid.to_vec(), owner, taken) {
            shared.locks.release_all(owner, taken);
            return Err(duplicate(xid));
        }
        Ok(())
    }

    /// The ids whose prepared transactions hold row locks here, sorted.
    pub fn prepared_lock_ids(&self) -> Vec<Vec<u8>> {
        self.txn_context().map(|(_, s)| s.prepared.ids()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
