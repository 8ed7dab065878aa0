//! Two-phase commit in the state machine: a write set marked [`WriteOp::Prepare`] is stored
//! under its transaction id in [`PREPARED_TABLE`] instead of being applied; the decision
//! ([`WriteOp::CommitPrepared`], [`WriteOp::RollbackPrepared`]) applies the stored writes (or
//! not) and deletes the record, in one atomic write with the entry's index.
//!
//! Invariants:
//! - An id has at most one record; a prepare under an id with a record, and a decision for an
//!   id without one, are refused identically on every replica (only their index is applied).
//! - A step reads the records as the entries before it left them: the entries gathered before
//!   it in the same apply call are written first.
//! - Records live in a table that snapshots carry, so a member that catches up by snapshot
//!   knows what is prepared.
//! - A decision releases the id's row locks on every replica once its batch is written
//!   (`Db::release_prepared`; only a leader, or a node that led, holds any): whoever
//!   proposed it, however its proposer heard the outcome.

use super::{PendingApply, StateMachine};
use crate::codec::{decode, encode};
use crate::engine::table_or_create;
use crate::types::{Applied, WriteOp, WriteSet, UNKNOWN_XID_REFUSAL, XID_EXISTS_REFUSAL};
use crate::PREPARED_TABLE;
use openraft::{LogId, StorageError};
use riptide::{Db, ReadOptions};

type NodeId = u64;

/// Every prepared transaction of partition database `db`: its id and its writes, by id.
/// A record that does not decode is [`riptide::Error::Corruption`].
pub fn prepared_write_sets(db: &Db) -> riptide::Result<Vec<(Vec<u8>, WriteSet)>> {
    let table = match db.table(PREPARED_TABLE) {
        Ok(t) => t,
        Err(riptide::Error::TableNotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for row in table.iter(&ReadOptions::default())? {
        let (xid, bytes) = row?;
        let set = decode(&bytes, "prepared write set").map_err(|e| corrupt(db, e.0))?;
        out.push((xid, set));
    }
    Ok(out)
}

/// True when partition database `db` holds a prepared transaction under `xid`.
pub fn is_prepared(db: &Db, xid: &[u8]) -> riptide::Result<bool> {
    match db.table(PREPARED_TABLE) {
        Ok(t) => Ok(t.get(xid)?.is_some()),
        Err(riptide::Error::TableNotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Locks, in partition database `db`, the rows of every prepared transaction whose id holds no
/// locks here yet, waiting up to `timeout` for each: what a new leader does before it serves
/// writes, since the locks of the leader that prepared them went with it. Returns how many ids
/// it locked. A row of a table this replica does not have is not locked (the decision creates
/// the table).
pub fn lock_prepared_rows(db: &Db, timeout: std::time::Duration) -> riptide::Result<usize> {
    let held = db.prepared_lock_ids();
    let mut locked = 0;
    for (xid, set) in prepared_write_sets(db)? {
        if held.binary_search(&xid).is_ok() {
            continue;
        }
        let mut rows = Vec::with_capacity(set.ops.len());
        for op in &set.ops {
            let (WriteOp::Put { table, key, .. } | WriteOp::Delete { table, key }) = op else {
                continue;
            };
            match db.table(table) {
                Ok(t) => rows.push((t, key.clone())),
                Err(riptide::Error::TableNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        match db.lock_prepared(&xid, &rows, timeout) {
            Ok(()) => locked += 1,
            Err(riptide::Error::DuplicateXid(_)) => continue, // locked meanwhile
            Err(e) => return Err(e),
        }
        // A decision applied while the rows were being locked found nothing to release.
        let table = db.table(PREPARED_TABLE)?;
        if table.get(&xid)?.is_none() {
            db.release_prepared(&xid);
            locked -= 1;
        }
    }
    Ok(locked)
}

fn corrupt(db: &Db, reason: String) -> riptide::Error {
    riptide::Error::Corruption {
        path: db.path().to_path_buf(),
        offset: 0,
        reason,
    }
}

/// An id as a refusal shows it.
fn show(xid: &[u8]) -> String {
    String::from_utf8_lossy(xid).into_owned()
}

impl StateMachine {
    /// Adds the two-phase commit step of `set` (validated: exactly one step, a decision carries
    /// no writes) to `pending`, or refuses it.
    pub(super) fn apply_phase(
        &self,
        log_id: LogId<NodeId>,
        set: &WriteSet,
        pending: &mut PendingApply,
        touched: &mut Vec<String>,
    ) -> Result<Applied, StorageError<NodeId>> {
        let err = |e: &dyn std::error::Error| super::apply_error(log_id, e);
        // The records as the entries before this one left them.
        self.write_pending(pending)?;
        let records = table_or_create(&self.db, PREPARED_TABLE).map_err(|e| err(&e))?;
        let mut applied = Applied::default();
        for op in &set.ops {
            match op {
                WriteOp::Prepare { xid } => {
                    if records.get(xid).map_err(|e| err(&e))?.is_some() {
                        applied.refused = Some(format!("{XID_EXISTS_REFUSAL} {:?}", show(xid)));
                        return Ok(applied);
                    }
                    let writes = WriteSet {
                        ops: set
                            .ops
                            .iter()
                            .filter(|op| matches!(op, WriteOp::Put { .. } | WriteOp::Delete { .. }))
                            .cloned()
                            .collect(),
                    };
                    applied.writes = writes.ops.len() as u32;
                    let bytes = encode(&writes).map_err(|e| err(&e))?;
                    pending.batch.put(&records, xid, &bytes).map_err(|e| err(&e))?;
                }
                WriteOp::CommitPrepared { xid } | WriteOp::RollbackPrepared { xid } => {
                    let Some(bytes) = records.get(xid).map_err(|e| err(&e))? else {
                        applied.refused = Some(format!("{UNKNOWN_XID_REFUSAL} {:?}", show(xid)));
                        return Ok(applied);
                    };
                    if matches!(op, WriteOp::CommitPrepared { .. }) {
                        let writes: WriteSet =
                            decode(&bytes, "prepared write set").map_err(|e| err(&corrupt(&self.db, e.0)))?;
                        for w in &writes.ops {
                            let (WriteOp::Put { table, key, .. } | WriteOp::Delete { table, key }) = w else {
                                continue;
                            };
                            // A table dropped since the prepare takes none of its rows (every
                            // replica has the same tables at this entry).
                            let t = match self.db.table(table) {
                                Ok(t) => t,
                                Err(riptide::Error::TableNotFound(_)) => continue,
                                Err(e) => return Err(err(&e)),
                            };
                            match w {
                                WriteOp::Put { value, .. } => pending.batch.put(&t, key, value),
                                _ => pending.batch.delete(&t, key),
                            }
                            .map_err(|e| err(&e))?;
                            touched.push(table.clone());
                            applied.writes += 1;
                        }
                    }
                    pending.batch.delete(&records, xid).map_err(|e| err(&e))?;
                    pending.decided.push(xid.clone());
                }
                _ => {}
            }
        }
        Ok(applied)
    }
}
