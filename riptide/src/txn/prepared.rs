//! Two-phase commit on a replicated database: a transaction is *prepared* under an id (its
//! write set made durable by the replication layer and applied to no table), then committed or
//! rolled back by that id, from any session of the leader, after a coordinator decided. This is
//! the participant's side of cross-partition transactions (`docs/cluster.md`); the write sets
//! themselves are kept by the replication layer ([`crate::replication::Phase`]).
//!
//! Invariants:
//! - Only a replicated database prepares; elsewhere [`Txn::prepare`] fails and the transaction
//!   rolls back.
//! - A prepared transaction's row locks stay held from its prepare until its decision settles:
//!   a prepare that settles as applied moves them to its id (`row_lock::PreparedLocks`); one that fails for good releases them (nothing was prepared); one whose outcome
//!   is unknown keeps them until it settles either way.
//! - A decision releases the id's locks only once it is settled as applied; a refused or
//!   unknown decision leaves them held (the transaction is still prepared, or may be).
//! - An id holds at most one set of locks; locks taken for an id again (after a failover, from
//!   the stored write set: [`Db::lock_prepared`]) join its set.

use super::commit::HeldLocks;
use super::Txn;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::replication::Phase;
use crate::row_lock::LockError;
use crate::Table;
use crate::WriteOptions;
use std::sync::atomic::Ordering;
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
    /// row locks stay held until [`Db::commit_prepared`] or [`Db::rollback_prepared`] of the
    /// same id settles. Blocks until the prepare's outcome is known.
    ///
    /// Errors: [`Error::InvalidOption`] on a database without a replicator or for an empty or
    /// over-long id (the transaction rolls back); the replication layer's
    /// [`Error::NotLeader`] (nothing prepared: the transaction rolled back) or
    /// [`Error::Replication`] (unknown: the id may be prepared; its locks stay held until the
    /// replication layer knows).
    pub fn prepare(mut self, xid: &[u8]) -> Result<()> {
        check_xid(xid)?;
        if !self.db.is_replicated() {
            return Err(Error::InvalidOption {
                option: "prepare",
                reason: "a transaction is prepared only on a replicated database".into(),
            });
        }
        let batch = self.prepare_commit()?;
        let held = self.take_locks();
        let id = xid.to_vec();
        // Run when the prepare is settled as applied: the locks now belong to the id. Dropped
        // unrun (refused, or the layer stopped): the locks are released with it.
        let keep: crate::write::pipeline::OnPlaced = Box::new(move || {
            let shared = held.shared().clone();
            let (owner, rows) = held.into_parts();
            shared.prepared.keep(&shared.locks, id, owner, rows);
        });
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

impl Db {
    /// Commits the transaction prepared under `xid` (two-phase commit's decision): its stored
    /// writes are applied on every replica and its locks released. Any session of the leader
    /// may decide. Errors: [`Error::UnknownXid`] when nothing is prepared under `xid`;
    /// [`Error::NotLeader`] and [`Error::Replication`] as for any replicated write (the
    /// transaction stays prepared, or may).
    pub fn commit_prepared(&self, xid: &[u8], opts: &WriteOptions) -> Result<()> {
        self.decide_prepared(Phase::CommitPrepared(xid.to_vec()), xid, opts)
    }

    /// Rolls back the transaction prepared under `xid`: its stored writes are forgotten on
    /// every replica and its locks released. Errors as [`Db::commit_prepared`].
    pub fn rollback_prepared(&self, xid: &[u8], opts: &WriteOptions) -> Result<()> {
        self.decide_prepared(Phase::RollbackPrepared(xid.to_vec()), xid, opts)
    }

    fn decide_prepared(&self, phase: Phase, xid: &[u8], opts: &WriteOptions) -> Result<()> {
        check_xid(xid)?;
        let (_, shared) = self.txn_context()?;
        let id = xid.to_vec();
        let release: crate::write::pipeline::OnPlaced = Box::new(move || shared.prepared.release(&shared.locks, &id));
        let empty = crate::WriteBatch::new();
        self.replicate_phase(&empty, opts, phase, Some(release))
    }

    /// Locks `rows` for the transaction prepared under `xid`, waiting up to `timeout` for any
    /// other holder: what a new leader does for each write set stored prepared, before it
    /// serves writes, so that the prepared rows stay locked across a failover. Locks the id
    /// already holds are kept; all of them are released by its decision.
    ///
    /// Errors: [`Error::LockTimeout`] or [`Error::Deadlock`] (the locks taken by this call are
    /// released), [`Error::Closed`].
    pub fn lock_prepared(&self, xid: &[u8], rows: &[(Table, Vec<u8>)], timeout: Duration) -> Result<()> {
        check_xid(xid)?;
        let (db_id, shared) = self.txn_context()?;
        // The id's own owner when it holds locks already (they count as taken), else a new one.
        let owner = match shared.prepared.owner_of(xid) {
            Some(owner) => owner,
            None => shared.next_id.fetch_add(1, Ordering::Relaxed) + 1,
        };
        let mut held = HeldLocks::new(shared.clone(), owner);
        for (table, key) in rows {
            if table.db_id() != db_id {
                return Err(Error::ForeignTable { what: "table" });
            }
            let id = table.inner().id;
            match shared.locks.acquire(owner, id, key, timeout, true) {
                Ok(true) => held.push(id, key.clone()),
                Ok(false) => {}
                // `held` releases what this call took as it drops.
                Err(LockError::Timeout(waited)) => {
                    return Err(Error::LockTimeout {
                        table: table.name().to_string(),
                        key: key.clone(),
                        waited,
                    })
                }
                Err(LockError::Deadlock) => {
                    return Err(Error::Deadlock {
                        txn: owner,
                        table: table.name().to_string(),
                        key: key.clone(),
                    })
                }
            }
        }
        let (owner, rows) = held.into_parts();
        shared.prepared.keep(&shared.locks, xid.to_vec(), owner, rows);
        Ok(())
    }

    /// The ids whose prepared transactions hold row locks here, sorted.
    pub fn prepared_lock_ids(&self) -> Vec<Vec<u8>> {
        self.txn_context().map(|(_, s)| s.prepared.ids()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
