//! A client session: current database, autocommit, isolation, the open transaction, and the
//! execution of one statement with MySQL's transaction rules.
//!
//! Invariants:
//! - every statement is atomic: it runs under a savepoint of the transaction and a failed
//!   statement leaves the transaction as it was before it;
//! - a deadlock, write conflict or lock wait timeout (1213, 1205) rolls the whole transaction
//!   back before the error is returned (sysbench retries the transaction);
//! - with autocommit on and no BEGIN, a writing statement is its own transaction; its commit
//!   is returned unfinished ([`Reply::commit`]) and the reply is sent only once the commit is
//!   durable (`--sync`) and visible: a connection never holds a thread while it waits;
//! - BEGIN inside a transaction and any DDL commit the open transaction first (MySQL's
//!   implicit commit).

use crate::protocol::ColumnInfo;
use crate::sql::bind::{bind, Bound};
use crate::sql::catalog::{Catalog, StatementPin};
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::exec::{ddl, rows::Reader, select, show, write};
use crate::sql::expr::truth;
use crate::sql::plan::{Access, Plan, SetItem};
use crate::sql::session_vars::SessionView;
use crate::value::Value;
use riptide::{Isolation, Txn, TxnOptions, WriteHandle, WriteOptions};
use sqlparser::ast::Statement;
use std::sync::Arc;
use std::time::Duration;

mod xa;

/// Server-wide settings a session uses.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Commits wait for fsync.
    pub sync: bool,
    /// Row lock wait timeout.
    pub lock_wait_timeout: Duration,
    /// Under REPEATABLE READ, UPDATE, DELETE, INSERT's key checks and `SELECT ... FOR UPDATE`
    /// read the newest committed version of each row under its lock (InnoDB's "current
    /// read") instead of failing with 1213 on a row changed after the snapshot (snapshot
    /// isolation's first-updater-wins). Plain SELECTs read the snapshot either way.
    pub current_reads: bool,
}

/// What a statement produced.
pub enum Outcome {
    /// An OK packet.
    Ok {
        /// Affected rows (as the client's FOUND_ROWS flag asks).
        affected: u64,
        /// LAST_INSERT_ID of this statement (0 if none).
        last_insert_id: u64,
        /// Info text (`Rows matched: ...`).
        info: String,
    },
    /// A result set.
    Rows {
        /// Columns.
        columns: Vec<ColumnInfo>,
        /// Rows.
        rows: Vec<Vec<Value>>,
    },
}

/// Where a statement's commit stands.
pub enum CommitState {
    /// Made asynchronously: the engine's handle to wait on.
    Started(WriteHandle),
    /// Made on the session's thread ([`Session::inline_commit`]): its outcome and how long
    /// the commit took.
    Done(riptide::Result<()>, Duration),
}

/// A commit under way: the reply waits for it.
pub struct PendingCommit {
    /// The commit.
    pub state: CommitState,
    /// The transaction wrote something (its commit goes through the replicator, on a replica):
    /// false for a commit that only ends a transaction that read.
    pub writes: bool,
    /// The transaction's catalog pin: drop it only once the commit has completed, so that a
    /// DDL waiting for older transactions sees their rows committed.
    pub pin: Option<StatementPin>,
}

impl PendingCommit {
    /// Blocks until the commit is durable and visible, then unpins.
    pub fn wait(self) -> riptide::Result<()> {
        match self.state {
            CommitState::Started(handle) => handle.wait(),
            CommitState::Done(outcome, _) => outcome,
        }
    }
}

/// A statement's reply, maybe waiting for a commit.
pub struct Reply {
    /// The outcome to send.
    pub outcome: Outcome,
    /// A commit to wait for before sending it.
    pub commit: Option<PendingCommit>,
}

impl Outcome {
    /// An OK with `affected` rows and nothing else.
    pub fn ok(affected: u64) -> Outcome {
        Outcome::Ok {
            affected,
            last_insert_id: 0,
            info: String::new(),
        }
    }
}

impl Reply {
    fn ok(affected: u64) -> Reply {
        Reply {
            outcome: Outcome::ok(affected),
            commit: None,
        }
    }
}

/// One client session.
pub struct Session {
    catalog: Arc<Catalog>,
    config: SessionConfig,
    /// What binding sees.
    pub view: SessionView,
    txn: Option<Txn>,
    /// The open transaction's catalog pin (taken by its first statement).
    txn_pin: Option<StatementPin>,
    /// The client asked for FOUND_ROWS (affected = matched rows on UPDATE).
    pub found_rows: bool,
    /// The statement running now may not wait for row locks ([`Session::execute_nowait`]).
    nowait: bool,
    /// A commit made by the next statements is made on this thread, waiting for its log write
    /// (the caller allows it to block: see `server::conn`), instead of asynchronously.
    pub inline_commit: bool,
    /// On a replica: the Raft term in which the running statement's reads were confirmed; a
    /// transaction begun now commits only in that term (`WriteOptions::replication_fence`).
    pub replication_fence: Option<u64>,
    /// The open XA branch (`XA START`), if the open transaction is one.
    xa: Option<xa::XaBranch>,
}

impl Session {
    /// A new session.
    pub fn new(catalog: Arc<Catalog>, config: SessionConfig, view: SessionView) -> Session {
        Session {
            catalog,
            config,
            view,
            txn: None,
            txn_pin: None,
            found_rows: false,
            nowait: false,
            inline_commit: false,
            replication_fence: None,
            xa: None,
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// True inside a transaction.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// True inside a snapshot-isolation transaction: its unlocked reads see the database as of
    /// its snapshot, taken when it began.
    pub fn in_snapshot_transaction(&self) -> bool {
        self.txn.as_ref().is_some_and(|t| t.snapshot_lsn().is_some())
    }

    fn begin_txn(&self) -> SqlResult<Txn> {
        self.begin_txn_as(self.view.isolation)
    }

    /// A transaction of this session. A statement that is its own transaction (autocommit)
    /// runs read committed: it reads the newest committed rows and locks what it changes, as
    /// a single statement does under MySQL's REPEATABLE READ, and it registers no snapshot.
    fn begin_txn_as(&self, isolation: Isolation) -> SqlResult<Txn> {
        Ok(self.catalog.db().begin(TxnOptions {
            isolation,
            lock_timeout: self.config.lock_wait_timeout,
            write_options: WriteOptions {
                sync: self.config.sync,
                replication_fence: self.replication_fence,
                ..Default::default()
            },
            ..Default::default()
        })?)
    }

    /// Commits the open transaction, if any; the handle to wait for.
    fn commit_open(&mut self) -> Option<PendingCommit> {
        let pin = self.txn_pin.take();
        let inline = self.inline_commit;
        self.txn.take().map(|t| PendingCommit {
            writes: !t.is_empty(),
            state: if inline {
                let started = std::time::Instant::now();
                CommitState::Done(t.commit(), started.elapsed())
            } else {
                CommitState::Started(t.commit_async())
            },
            pin,
        })
    }

    /// Keeps a statement's pin as its transaction's when the statement opened the transaction.
    fn keep_pin(&mut self, pin: StatementPin) {
        if self.txn.is_some() && self.txn_pin.is_none() {
            self.txn_pin = Some(pin);
        }
    }

    /// Rolls back the open transaction, if any. An open XA branch stays, ROLLBACK ONLY, until
    /// the client ends it (`sql/session/xa.rs`), so that no statement after the error runs
    /// outside it.
    pub fn rollback_open(&mut self) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
        self.txn_pin = None;
        if let Some(b) = &mut self.xa {
            b.rollback_only = true;
        }
    }

    /// Binds a statement (for PREPARE: its parameter count and result columns).
    pub fn bind(&self, stmt: &Statement) -> SqlResult<Bound> {
        let pin = self.catalog.begin_statement();
        bind(stmt, &pin.state, &self.view)
    }

    /// Executes a statement without waiting for any row lock: when one is held by another
    /// transaction the statement is undone and the error has `would_block` set, and the
    /// caller runs it again with [`Session::execute`] where waiting is allowed (a server runs
    /// the first on its network thread and only the second on a thread that may block).
    pub fn execute_nowait(&mut self, stmt: &Statement, params: &[Value]) -> SqlResult<Reply> {
        self.nowait = true;
        let r = self.execute(stmt, params);
        self.nowait = false;
        r
    }

    /// Executes one parsed statement with `params` for its `?`s.
    pub fn execute(&mut self, stmt: &Statement, params: &[Value]) -> SqlResult<Reply> {
        self.view.now = now();
        let catalog = self.catalog.clone();
        let pin = catalog.begin_statement();
        let bound = bind(stmt, &pin.state, &self.view)?;
        if bound.params != params.len() {
            return Err(SqlError::wrong_arguments("mysqld_stmt_execute"));
        }
        let plan = bound.plan;
        if let Some(branch) = &self.xa {
            branch.check(&plan)?;
        }
        match plan {
            Plan::Select(p) => {
                let columns = p.columns.clone();
                let autocommit_only = self.txn.is_none() && self.view.autocommit;
                if autocommit_only && !p.for_update {
                    let single_point = matches!(&p.access, Access::Key { index: None, ranges }
                        if ranges.len() == 1 && p.table.as_ref().is_some_and(|h| ranges[0].eq.len() == h.schema.primary.len()));
                    let mut reader = if single_point {
                        Reader::Latest
                    } else {
                        Reader::Snapshot(self.catalog.db().snapshot())
                    };
                    let rows = select::run(&p, &mut reader, params)?;
                    return Ok(Reply {
                        outcome: Outcome::Rows { columns, rows },
                        commit: None,
                    });
                }
                let rows = self.in_txn(p.for_update, |txn| select::run(&p, &mut Reader::Txn(txn), params));
                self.keep_pin(pin);
                let rows = rows?;
                let commit = if autocommit_only { self.commit_open() } else { None };
                Ok(Reply {
                    outcome: Outcome::Rows { columns, rows },
                    commit,
                })
            }
            Plan::Insert(p) => {
                let autocommit_only = self.txn.is_none() && self.view.autocommit;
                let r = self.in_txn(true, |txn| write::insert(txn, &p, params));
                self.keep_pin(pin);
                let r = r?;
                if let Some(id) = r.first_id {
                    self.view.last_insert_id = id;
                }
                let commit = if autocommit_only { self.commit_open() } else { None };
                Ok(Reply {
                    outcome: Outcome::Ok {
                        affected: r.affected,
                        last_insert_id: r.first_id.unwrap_or(0),
                        info: if p.rows.len() > 1 {
                            format!("Records: {}  Duplicates: 0  Warnings: 0", p.rows.len())
                        } else {
                            String::new()
                        },
                    },
                    commit,
                })
            }
            Plan::Modify(p) => {
                let autocommit_only = self.txn.is_none() && self.view.autocommit;
                let r = self.in_txn(true, |txn| write::modify(txn, &p, params));
                self.keep_pin(pin);
                let r = r?;
                let commit = if autocommit_only { self.commit_open() } else { None };
                let affected = if self.found_rows && !p.delete {
                    r.matched
                } else {
                    r.changed
                };
                Ok(Reply {
                    outcome: Outcome::Ok {
                        affected,
                        last_insert_id: 0,
                        info: if p.delete {
                            String::new()
                        } else {
                            format!("Rows matched: {}  Changed: {}  Warnings: 0", r.matched, r.changed)
                        },
                    },
                    commit,
                })
            }
            Plan::Begin => {
                let commit = self.commit_open();
                self.txn = Some(self.begin_txn()?);
                self.txn_pin = Some(pin);
                Ok(Reply {
                    outcome: Reply::ok(0).outcome,
                    commit,
                })
            }
            Plan::Commit => Ok(Reply {
                outcome: Reply::ok(0).outcome,
                commit: self.commit_open(),
            }),
            Plan::Rollback => {
                self.rollback_open();
                Ok(Reply::ok(0))
            }
            Plan::Set(items) => {
                let mut commit = None;
                for item in items {
                    match item {
                        SetItem::Autocommit(e) => {
                            let v = e.eval_const(params)?;
                            let on = match &v {
                                Value::Bytes(b) if b.eq_ignore_ascii_case(b"on") => true,
                                Value::Bytes(b) if b.eq_ignore_ascii_case(b"off") => false,
                                other => match truth(other) {
                                    Some(b) => b,
                                    None => return Err(SqlError::wrong_variable_value("autocommit", "NULL")),
                                },
                            };
                            if on && !self.view.autocommit {
                                // Turning autocommit on commits the open transaction.
                                commit = self.commit_open();
                            }
                            self.view.autocommit = on;
                        }
                        SetItem::Isolation(i) => self.view.isolation = i,
                        SetItem::IsolationName(e) => {
                            let v = e.eval_const(params)?;
                            let name = String::from_utf8_lossy(&v.to_text().unwrap_or_default())
                                .to_ascii_uppercase()
                                .replace(' ', "-");
                            self.view.isolation = match name.as_str() {
                                "READ-COMMITTED" => Isolation::ReadCommitted,
                                "REPEATABLE-READ" => Isolation::Snapshot,
                                _ => return Err(SqlError::wrong_variable_value("transaction_isolation", &name)),
                            };
                        }
                        SetItem::Ignored => {}
                    }
                }
                Ok(Reply {
                    outcome: Reply::ok(0).outcome,
                    commit,
                })
            }
            Plan::Use(db) => {
                self.view.db = Some(db);
                Ok(Reply::ok(0))
            }
            Plan::Show(s) => {
                let (columns, rows) = show::run(&s, &self.catalog, &self.view);
                Ok(Reply {
                    outcome: Outcome::Rows { columns, rows },
                    commit: None,
                })
            }
            Plan::Nothing => Ok(Reply::ok(0)),
            ddl_plan => {
                drop(pin);
                self.ddl(ddl_plan)
            }
        }
    }

    fn ddl(&mut self, plan: Plan) -> SqlResult<Reply> {
        // DDL commits the open transaction first and waits for it.
        if let Some(p) = self.commit_open() {
            p.wait()?;
        }
        let cat = self.catalog.clone();
        let affected = match plan {
            Plan::CreateDatabase { name, if_not_exists } => {
                let _ddl = cat.lock_ddl();
                cat.create_database(&name, if_not_exists)? as u64
            }
            Plan::DropDatabase { name, if_exists } => {
                let _ddl = cat.lock_ddl();
                let n = cat.drop_database(&name, if_exists)?;
                if self.view.db.as_deref() == Some(name.as_str()) {
                    self.view.db = None;
                }
                n as u64
            }
            Plan::CreateTable(p) => {
                ddl::create_table(&cat, &p)?;
                0
            }
            Plan::DropTable { tables, if_exists } => {
                ddl::drop_tables(&cat, &tables, if_exists)?;
                0
            }
            Plan::CreateIndex {
                db,
                table,
                name,
                columns,
                unique,
            } => {
                ddl::create_index(&cat, &db, &table, &name, &columns, unique)?;
                0
            }
            Plan::AddColumn { db, table, column } => {
                ddl::add_column(&cat, &db, &table, column)?;
                0
            }
            _ => return Err(SqlError::other("not a DDL statement")),
        };
        Ok(Reply::ok(affected))
    }

    /// Runs `f` inside the session's transaction (opening one if needed) under a savepoint;
    /// on error undoes the statement, or the whole transaction for 1213/1205. A `locking`
    /// statement (a write, `FOR UPDATE`) makes current reads where the session's config says.
    fn in_txn<T>(&mut self, locking: bool, f: impl FnOnce(&mut Txn) -> SqlResult<T>) -> SqlResult<T> {
        let opened_here = self.txn.is_none();
        if opened_here {
            let isolation = if self.view.autocommit {
                Isolation::ReadCommitted
            } else {
                self.view.isolation
            };
            self.txn = Some(self.begin_txn_as(isolation)?);
        }
        let nowait = self.nowait;
        let txn = self.txn.as_mut().expect("opened above");
        txn.set_lock_timeout(if nowait {
            Duration::ZERO
        } else {
            self.config.lock_wait_timeout
        });
        txn.set_current_reads(locking && self.config.current_reads);
        txn.set_savepoint();
        match f(txn) {
            Ok(v) => {
                txn.pop_savepoint()?;
                Ok(v)
            }
            Err(mut e) => {
                if nowait && e.code == 1205 {
                    // Only this statement is undone; it runs again allowed to wait.
                    e.rolled_back = false;
                    e.would_block = true;
                }
                if e.rolled_back || (opened_here && self.view.autocommit) {
                    self.rollback_open();
                } else if let Some(t) = self.txn.as_mut() {
                    t.rollback_to_savepoint()?;
                }
                Err(e)
            }
        }
    }
}

/// The current time as a DATETIME (UTC).
fn now() -> crate::value::DateTime {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + (m <= 2) as i64) as u16;
    crate::value::DateTime::new(y, m, d, (rem / 3600) as u8, (rem / 60 % 60) as u8, (rem % 60) as u8, 0)
        .unwrap_or(crate::value::DateTime::new(1970, 1, 1, 0, 0, 0, 0).expect("valid"))
}
