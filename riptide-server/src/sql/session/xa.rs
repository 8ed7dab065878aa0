//! A session's XA branch: MySQL's XA statements over the engine's prepared transactions
//! (`riptide::Txn::prepare`, `Db::commit_prepared`, `Db::rollback_prepared`).
//!
//! Invariants (MySQL's XA states):
//! - `XA START` opens a transaction as BEGIN does (it is refused inside an open transaction,
//!   1400) and the branch is ACTIVE: statements run in it, but none that would end it (BEGIN,
//!   COMMIT, ROLLBACK, DDL, `SET autocommit`): 1399.
//! - `XA END` makes it IDLE: no statement runs but `XA PREPARE`, `XA COMMIT ... ONE PHASE`
//!   and `XA ROLLBACK` of the same id (1399; another id: 1397).
//! - `XA PREPARE` hands the transaction to the engine as prepared: the session is then outside
//!   any transaction, and the branch is decided later by id, from any session of the leader
//!   (`XA COMMIT xid`, `XA ROLLBACK xid`), outside a transaction of its own.
//! - An error that rolls the transaction back (1213, 1205, a failed read barrier) leaves the
//!   branch ROLLBACK ONLY: every statement is refused (1399) until `XA ROLLBACK`, and `XA END`,
//!   `XA PREPARE` or `XA COMMIT ... ONE PHASE` end it with 1402, so no statement after the
//!   error runs outside the branch.
//! - `XA START` of an xid prepared already is refused (1440), and so is `XA COMMIT ... ONE
//!   PHASE` of a prepared xid (1399).
//! - A closed connection rolls back a branch that is not prepared; a prepared one stays.

use super::{Reply, Session};
use crate::protocol::ColumnInfo;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::exec::show::text_column;
use crate::sql::plan::{Plan, SetItem};
use crate::sql::session::Outcome;
use crate::sql::xa::{XaStatement, Xid};
use crate::value::Value;
use riptide::WriteOptions;

/// The session's open XA branch.
#[derive(Debug)]
pub(super) struct XaBranch {
    xid: Xid,
    /// After `XA END`.
    idle: bool,
    /// Its transaction was rolled back by an error: only `XA ROLLBACK` (or an end answering
    /// 1402) is left.
    pub(super) rollback_only: bool,
}

impl XaBranch {
    fn state(&self) -> &'static str {
        if self.rollback_only {
            "ROLLBACK ONLY"
        } else if self.idle {
            "IDLE"
        } else {
            "ACTIVE"
        }
    }

    /// Refuses a statement the branch's state does not allow (see the module header).
    pub(super) fn check(&self, plan: &Plan) -> SqlResult<()> {
        let ends_txn = match plan {
            Plan::Begin | Plan::Commit | Plan::Rollback => true,
            Plan::Set(items) => items.iter().any(|i| matches!(i, SetItem::Autocommit(_))),
            Plan::Select(_) | Plan::Insert(_) | Plan::Modify(_) | Plan::Use(_) | Plan::Show(_) | Plan::Nothing => false,
            _ => true, // DDL commits the open transaction
        };
        if self.idle || self.rollback_only || ends_txn {
            return Err(rmfail(self.state()));
        }
        Ok(())
    }
}

/// 1399: the command is not allowed in the branch's state.
fn rmfail(state: &str) -> SqlError {
    SqlError::new(
        1399,
        "XAE07",
        format!("XAER_RMFAIL: The command cannot be executed when global transaction is in the {state} state"),
    )
}

/// 1397: no such branch.
fn nota() -> SqlError {
    SqlError::new(1397, "XAE04", "XAER_NOTA: Unknown XID")
}

/// 1402: the branch was rolled back (an error did it); it is ended now.
fn rolled_back() -> SqlError {
    SqlError::new(1402, "XA100", "XA_RBROLLBACK: Transaction branch was rolled back")
}

/// 1440: the xid is prepared already.
fn duplicate() -> SqlError {
    SqlError::new(1440, "XAE08", "XAER_DUPID: The XID already exists")
}

/// 1400: a transaction that is not an XA branch is open.
fn outside() -> SqlError {
    SqlError::new(
        1400,
        "XAE09",
        "XAER_OUTSIDE: Some work is done outside global transaction",
    )
}

impl Session {
    /// Runs one XA statement. `XA PREPARE`, `XA COMMIT` and `XA ROLLBACK` of a prepared
    /// branch wait for the replication layer: call on a thread that may block.
    pub fn execute_xa(&mut self, stmt: &XaStatement) -> SqlResult<Reply> {
        // A branch an error rolled back: ended by the next XA statement that names it.
        if let Some(b) = self.xa.as_ref().filter(|b| b.rollback_only) {
            let named = match stmt {
                XaStatement::End(x) | XaStatement::Prepare(x) | XaStatement::Rollback(x) => Some(x),
                XaStatement::Commit { xid, .. } => Some(xid),
                XaStatement::Start(_) | XaStatement::Recover { .. } => None,
            };
            return match named {
                Some(x) if *x != b.xid => Err(nota()),
                Some(_) => {
                    self.xa = None;
                    match stmt {
                        XaStatement::Rollback(_) => Ok(Reply::ok(0)),
                        _ => Err(rolled_back()),
                    }
                }
                None if matches!(stmt, XaStatement::Recover { .. }) => self.recover(false),
                None => Err(rmfail(b.state())),
            };
        }
        let branch = self.xa.as_ref().map(|b| (b.xid.clone(), b.idle));
        match stmt {
            XaStatement::Start(xid) => {
                if let Some(b) = &self.xa {
                    return Err(rmfail(b.state()));
                }
                if self.txn.is_some() {
                    return Err(outside());
                }
                if self.is_prepared(xid)? {
                    return Err(duplicate());
                }
                let pin = self.catalog.begin_statement();
                self.txn = Some(self.begin_txn()?);
                self.txn_pin = Some(pin);
                self.xa = Some(XaBranch {
                    xid: xid.clone(),
                    idle: false,
                    rollback_only: false,
                });
                Ok(Reply::ok(0))
            }
            XaStatement::End(xid) => match &mut self.xa {
                Some(b) if b.xid != *xid => Err(nota()),
                Some(b) if b.idle => Err(rmfail("IDLE")),
                Some(b) => {
                    b.idle = true;
                    Ok(Reply::ok(0))
                }
                None => Err(rmfail("NON-EXISTING")),
            },
            XaStatement::Prepare(xid) => match branch {
                Some((open, _)) if open != *xid => Err(nota()),
                Some((_, false)) => Err(rmfail("ACTIVE")),
                Some((_, true)) if !self.catalog.db().is_replicated() => Err(SqlError::unsupported(
                    "XA PREPARE on a server that is not a replica of a partition (riptide serve --node-id)",
                )),
                Some((_, true)) => {
                    self.xa = None;
                    let pin = self.txn_pin.take();
                    let txn = self.txn.take().ok_or_else(nota)?;
                    let result = txn.prepare(&xid.to_bytes());
                    drop(pin);
                    result.map(|()| Reply::ok(0)).map_err(SqlError::from_engine)
                }
                None => Err(nota()),
            },
            XaStatement::Commit { xid, one_phase } => match branch {
                Some((open, _)) if open != *xid => Err(nota()),
                Some((_, true)) if *one_phase => {
                    self.xa = None;
                    Ok(Reply {
                        outcome: Reply::ok(0).outcome,
                        commit: self.commit_open(),
                    })
                }
                Some((_, idle)) => Err(rmfail(if idle { "IDLE" } else { "ACTIVE" })),
                None if self.txn.is_some() => Err(outside()),
                None if !self.catalog.db().is_replicated() => Err(nota()),
                None if *one_phase && self.is_prepared(xid)? => Err(rmfail("PREPARED")),
                None if *one_phase => Err(nota()),
                None => {
                    let db = self.catalog.db();
                    db.commit_prepared(&xid.to_bytes(), &self.decision_options())
                        .map_err(SqlError::from_engine)?;
                    Ok(Reply::ok(0))
                }
            },
            XaStatement::Rollback(xid) => match branch {
                Some((open, _)) if open != *xid => Err(nota()),
                Some((_, true)) => {
                    self.rollback_open();
                    self.xa = None;
                    Ok(Reply::ok(0))
                }
                Some((_, false)) => Err(rmfail("ACTIVE")),
                None if self.txn.is_some() => Err(outside()),
                None if !self.catalog.db().is_replicated() => Err(nota()),
                None => {
                    let db = self.catalog.db();
                    db.rollback_prepared(&xid.to_bytes(), &self.decision_options())
                        .map_err(SqlError::from_engine)?;
                    Ok(Reply::ok(0))
                }
            },
            XaStatement::Recover { convert } => self.recover(*convert),
        }
    }

    /// A decision depends on no read: durable as the server's commits, fenced to no term.
    fn decision_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.config.sync,
            ..Default::default()
        }
    }

    /// True when `xid` is prepared on this partition.
    fn is_prepared(&self, xid: &Xid) -> SqlResult<bool> {
        if !self.catalog.db().is_replicated() {
            return Ok(false);
        }
        riptide_cluster::is_prepared(self.catalog.db(), &xid.to_bytes()).map_err(SqlError::from_engine)
    }

    /// `XA RECOVER`: the prepared branches, as MySQL lists them (with `CONVERT XID`, the data
    /// in hexadecimal, `0x...`).
    fn recover(&self, convert: bool) -> SqlResult<Reply> {
        let prepared = riptide_cluster::prepared_write_sets(self.catalog.db()).map_err(SqlError::from_engine)?;
        let columns: Vec<ColumnInfo> = ["formatID", "gtrid_length", "bqual_length", "data"]
            .map(text_column)
            .to_vec();
        let rows = prepared
            .iter()
            .filter_map(|(id, _)| Xid::from_bytes(id))
            .map(|x| {
                let mut data = x.gtrid.clone();
                data.extend_from_slice(&x.bqual);
                if convert {
                    let hex: String = data.iter().map(|b| format!("{b:02X}")).collect();
                    data = format!("0x{hex}").into_bytes();
                }
                vec![
                    Value::Int(i64::from(x.format_id)),
                    Value::Int(x.gtrid.len() as i64),
                    Value::Int(x.bqual.len() as i64),
                    Value::Bytes(data),
                ]
            })
            .collect();
        Ok(Reply {
            outcome: Outcome::Rows { columns, rows },
            commit: None,
        })
    }
}
