//! One client connection: handshake, then a loop of commands, each answered in full before
//! the next is read.
//!
//! Invariants:
//! - a statement that may wait for a row lock or for DDL runs under `block_in_place`, so a
//!   lock wait never stalls the other connections of its worker thread;
//! - a commit is awaited asynchronously (the engine's `on_complete` callback), so a waiting
//!   commit holds no thread, except while no other commit is in flight: then an autocommit
//!   write makes its commit on its worker thread, which writes the log and fsyncs itself
//!   (the engine's synchronous leader) instead of waking the log-flush thread and being woken
//!   back (two thread wake-ups, 70–90 µs of a 1-client commit on the 2-core VM); the other
//!   workers serve the other connections meanwhile;
//! - no client input ends the process: malformed packets close this connection only, SQL
//!   errors are ERR packets, and the session's open transaction is rolled back when the
//!   connection ends.

use crate::protocol::{self, capability, status, Command, Connection, OkInfo, ProtocolError};
use crate::server::replica::TxnGate;
use crate::server::ServerShared;
use crate::sql::error::SqlError;
use crate::sql::parse::parse;
use crate::sql::session::{CommitState, Outcome, Reply, Session};
use crate::sql::session_vars::{SessionView, SERVER_VERSION};
use crate::sql::shape::Parsed;
use crate::sql::xa::XaStatement;
use crate::value::Value;
use sqlparser::ast::Statement;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpStream;

/// A prepared statement of a connection.
struct Prepared {
    stmt: Arc<Statement>,
    params: usize,
    types: Vec<protocol::ParamType>,
    long_data: HashMap<u16, Vec<u8>>,
}

/// Whether a statement may wait.
enum Blocking {
    /// Never waits.
    Never,
    /// Waits only for row locks.
    OnRowLocks,
    /// May wait for other things too (DDL: the DDL lock, running statements, a commit).
    Always,
}

fn may_block(stmt: &Statement) -> Blocking {
    let blocks = match stmt {
        Statement::Query(q) if !q.locks.is_empty() => return Blocking::OnRowLocks,
        Statement::Query(_) => false,
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => return Blocking::OnRowLocks,
        Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Set(_)
        | Statement::Use(_)
        | Statement::ShowTables { .. }
        | Statement::ShowDatabases { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowCreate { .. }
        | Statement::ExplainTable { .. } => false,
        // DDL: takes the DDL lock, may wait for statements and for an implicit commit.
        _ => true,
    };
    if blocks {
        Blocking::Always
    } else {
        Blocking::Never
    }
}

fn status_of(s: &Session) -> u16 {
    let mut st = 0;
    if s.view.autocommit {
        st |= status::SERVER_STATUS_AUTOCOMMIT;
    }
    if s.in_transaction() {
        st |= status::SERVER_STATUS_IN_TRANS;
    }
    st
}

/// Runs a statement, gated on a replica ([`TxnGate`]), and waits for its commit without holding
/// a thread.
async fn run(
    session: &mut Session,
    stmt: &Statement,
    params: &[Value],
    shared: &ServerShared,
    gate: &mut TxnGate,
) -> Result<Outcome, SqlError> {
    let in_snapshot_txn = session.in_snapshot_transaction();
    let gated = match &shared.cluster {
        Some(replica) => replica.before_statement(&shared.catalog, stmt, gate, session).await,
        None => Ok(()),
    };
    // A transaction this statement begins commits only in the term its reads were confirmed
    // in: its own barrier's, or the leader's (for an autocommit write that skipped it).
    session.replication_fence = Some(gate.fence_term).filter(|&t| t != 0);
    let result = match gated {
        Ok(()) => {
            let (result, committed_writes) = execute_and_commit(session, stmt, params, shared).await;
            match (&shared.cluster, gate.write_skipped_in) {
                // An autocommit write that skipped its barrier and committed nothing answers
                // from what it read: only once the term is confirmed (see replica.rs).
                (Some(replica), term) if term != 0 && !committed_writes => {
                    match replica.confirm_write(&shared.catalog, term).await {
                        Ok(()) => result,
                        Err(e) => Err(e),
                    }
                }
                _ => result,
            }
        }
        Err(e) => {
            // The statement did not run; the error (1290, 1213, 1180) tells the client its
            // transaction is rolled back, so it is.
            session.rollback_open();
            Err(e)
        }
    };
    let begins = matches!(stmt, Statement::StartTransaction { .. });
    gate.after_statement(in_snapshot_txn, session.in_snapshot_transaction(), begins);
    result
}

/// Runs an XA statement (`crate::sql::xa`): on a replica it is gated as the statement it acts
/// like (BEGIN for XA START; a locking read for XA RECOVER, which a follower must not answer;
/// ROLLBACK for XA ROLLBACK and COMMIT for XA PREPARE and XA COMMIT; XA END only changes the
/// branch's state), then it runs on a thread that may block (a prepare or a decision waits for
/// the Raft group).
async fn run_xa(
    session: &mut Session,
    stmt: &XaStatement,
    shared: &ServerShared,
    gate: &mut TxnGate,
) -> Result<Outcome, SqlError> {
    let in_snapshot_txn = session.in_snapshot_transaction();
    let like = match stmt {
        XaStatement::End(_) => None,
        XaStatement::Start(_) => Some("BEGIN"),
        XaStatement::Recover { .. } => Some("SELECT 1 FROM prepared FOR UPDATE"),
        XaStatement::Rollback(_) => Some("ROLLBACK"),
        XaStatement::Prepare(_) | XaStatement::Commit { .. } => Some("COMMIT"),
    };
    let gated = match (&shared.cluster, like) {
        (Some(replica), Some(sql)) => {
            let like = parse(sql)?
                .pop()
                .ok_or_else(|| SqlError::other("no stand-in statement"))?;
            gate.stand_in = true;
            let gated = replica.before_statement(&shared.catalog, &like, gate, session).await;
            gate.stand_in = false;
            gated
        }
        _ => Ok(()),
    };
    session.replication_fence = Some(gate.fence_term).filter(|&t| t != 0);
    let result = match gated {
        Ok(()) => match tokio::task::block_in_place(|| session.execute_xa(stmt)) {
            Ok(reply) => wait_for_commit(reply, shared).await,
            Err(e) => Err(e),
        },
        Err(e) => {
            session.rollback_open();
            Err(e)
        }
    };
    let begins = matches!(stmt, XaStatement::Start(_)) && result.is_ok();
    gate.after_statement(in_snapshot_txn, session.in_snapshot_transaction(), begins);
    result
}

/// Executes the statement and waits for its commit, if it made one; also says whether a
/// commit with writes was made (whatever its outcome).
async fn execute_and_commit(
    session: &mut Session,
    stmt: &Statement,
    params: &[Value],
    shared: &ServerShared,
) -> (Result<Outcome, SqlError>, bool) {
    let executed = if commits_inline(session, stmt, shared) {
        shared.commits_in_flight.fetch_add(1, Ordering::Relaxed);
        session.inline_commit = true;
        // On this worker thread: a lock wait moves to `block_in_place` as below, but the log
        // write and fsync do not (moving the worker's core to another thread costs more
        // wake-ups than the commit saves, and no other commit is waiting for this thread).
        let r = match session.execute_nowait(stmt, params) {
            Err(e) if e.would_block => tokio::task::block_in_place(|| session.execute(stmt, params)),
            other => other,
        };
        session.inline_commit = false;
        shared.commits_in_flight.fetch_sub(1, Ordering::Relaxed);
        r
    } else {
        execute_async_commit(session, stmt, params)
    };
    let reply: Reply = match executed {
        Ok(r) => r,
        Err(e) => return (Err(e), false),
    };
    let writes = reply.commit.as_ref().is_some_and(|p| p.writes);
    (wait_for_commit(reply, shared).await, writes)
}

/// Whether the statement is an autocommit write and no other commit is in flight, so that it
/// may make its commit on this thread (a stand-alone server on a multi-thread runtime; a
/// replica's commits wait for the Raft majority and always go asynchronously). Not COMMIT:
/// made inline, the commit of sysbench's oltp_read_write transaction took 1.8 ms longer with
/// one client (288–315 against 600–638 tps), not yet understood.
fn commits_inline(session: &Session, stmt: &Statement, shared: &ServerShared) -> bool {
    let commits = match stmt {
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
            session.view.autocommit && !session.in_transaction()
        }
        _ => false,
    };
    commits
        && shared.cluster.is_none()
        && shared.commits_in_flight.load(Ordering::Relaxed) == 0
        && tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
}

/// Executes a statement whose commit, if it makes one, is asynchronous.
fn execute_async_commit(session: &mut Session, stmt: &Statement, params: &[Value]) -> Result<Reply, SqlError> {
    match may_block(stmt) {
        Blocking::Never => session.execute(stmt, params),
        // Row locks are free almost always: try on this thread without waiting, and only a
        // statement that found one held moves to a thread that may block.
        Blocking::OnRowLocks => match session.execute_nowait(stmt, params) {
            Err(e) if e.would_block => tokio::task::block_in_place(|| session.execute(stmt, params)),
            other => other,
        },
        Blocking::Always => tokio::task::block_in_place(|| session.execute(stmt, params)),
    }
}

/// Waits for a reply's commit, if it made one.
async fn wait_for_commit(reply: Reply, shared: &ServerShared) -> Result<Outcome, SqlError> {
    if let Some(pending) = reply.commit {
        let started = std::time::Instant::now();
        // The transaction's catalog pin goes when this function returns, after the commit.
        let (state, _pin) = (pending.state, pending.pin);
        let outcome = match state {
            CommitState::Done(outcome, took) => {
                shared.metrics.commit(took);
                Ok(outcome)
            }
            CommitState::Started(handle) => {
                shared.commits_in_flight.fetch_add(1, Ordering::Relaxed);
                let (tx, rx) = tokio::sync::oneshot::channel();
                handle.on_complete(move |r| {
                    let _ = tx.send(r);
                });
                let outcome = rx.await;
                shared.commits_in_flight.fetch_sub(1, Ordering::Relaxed);
                shared.metrics.commit(started.elapsed());
                outcome
            }
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let mut e = SqlError::from_engine(e);
                e.rolled_back = true;
                return Err(e);
            }
            Err(_) => return Err(SqlError::other("commit outcome lost")),
        }
    }
    Ok(reply.outcome)
}

fn write_outcome<S>(
    conn: &mut Connection<S>,
    session: &Session,
    out: Result<Outcome, SqlError>,
    binary: bool,
    shared: &ServerShared,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    let st = status_of(session);
    match out {
        Ok(Outcome::Ok {
            affected,
            last_insert_id,
            info,
        }) => conn.write_ok(&OkInfo {
            affected_rows: affected,
            last_insert_id,
            status: st,
            warnings: 0,
            info,
        }),
        Ok(Outcome::Rows { columns, rows }) => {
            if binary {
                conn.write_binary_resultset(&columns, &rows, st)
            } else {
                conn.write_text_resultset(&columns, &rows, st)
            }
        }
        Err(e) => {
            shared.metrics.error(e.code);
            conn.write_err(e.code, e.state, &e.message)
        }
    }
}

/// Serves one connection until the client quits, the stream fails, or the server stops.
pub async fn serve_connection(stream: TcpStream, shared: Arc<ServerShared>, id: u32) {
    /// Counts the connection out however the task ends.
    struct Open(Arc<ServerShared>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _open = Open(shared.clone());
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    if let Err(e) = stream.set_nodelay(true) {
        tracing::warn!(connection = id, %peer, "set_nodelay failed: {e}");
    }
    let mut conn = Connection::new(stream, shared.config.max_allowed_packet);
    let info = match conn.handshake(id, SERVER_VERSION, shared.users.as_ref()).await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(connection = id, %peer, "handshake failed: {e}");
            return;
        }
    };
    let view = SessionView {
        db: None,
        user: info.user.clone(),
        connection_id: id,
        last_insert_id: 0,
        autocommit: true,
        isolation: riptide::Isolation::Snapshot,
        now: crate::value::DateTime::new(1970, 1, 1, 0, 0, 0, 0).expect("valid"),
        version: SERVER_VERSION.to_string(),
        max_allowed_packet: shared.config.max_allowed_packet,
        lock_wait_timeout: shared.config.session.lock_wait_timeout.as_secs(),
        xa_prepare: shared.catalog.db().is_replicated(),
    };
    let mut session = Session::new(shared.catalog.clone(), shared.config.session.clone(), view);
    session.found_rows = info.capabilities & capability::CLIENT_FOUND_ROWS != 0;
    if let Some(db) = info.database.filter(|d| !d.is_empty()) {
        if !shared.catalog.state().databases.contains(&db) {
            let e = SqlError::no_such_database(&db);
            conn.write_err(e.code, e.state, &e.message);
            let _ = conn.flush().await;
            return;
        }
        session.view.db = Some(db);
    }
    conn.write_ok(&OkInfo {
        affected_rows: 0,
        last_insert_id: 0,
        status: status_of(&session),
        warnings: 0,
        info: String::new(),
    });
    if let Err(e) = conn.flush().await {
        tracing::warn!(connection = id, %peer, "write failed: {e}");
        return;
    }
    let mut prepared: HashMap<u32, Prepared> = HashMap::new();
    // Where this connection's transaction stands with the replica's read gate.
    let mut gate = TxnGate::default();
    let mut next_stmt: u32 = 1;
    let mut stop = shared.stop.subscribe();
    loop {
        let cmd = tokio::select! {
            c = conn.read_command() => c,
            _ = stop.changed() => break,
        };
        let cmd = match cmd {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(ProtocolError::PacketTooLarge { len, max }) => {
                tracing::warn!(connection = id, %peer, "packet of {len} bytes over max_allowed_packet {max}: refused");
                shared.metrics.error(1153);
                continue;
            }
            Err(e) => {
                tracing::warn!(connection = id, %peer, "connection closed: {e}");
                break;
            }
        };
        match cmd {
            Command::Quit => break,
            Command::Ping => conn.write_ok(&OkInfo {
                affected_rows: 0,
                last_insert_id: 0,
                status: status_of(&session),
                warnings: 0,
                info: String::new(),
            }),
            Command::Query(sql) => {
                let started = std::time::Instant::now();
                let out = match std::str::from_utf8(&sql) {
                    Err(_) => Err(SqlError::syntax("the statement is not valid UTF-8")),
                    Ok(text) => match crate::sql::xa::parse_xa(text) {
                        Some(Err(e)) => Err(e),
                        Some(Ok(xa)) => run_xa(&mut session, &xa, &shared, &mut gate).await,
                        None => match shared.shapes.parse(text) {
                            Err(e) => Err(e),
                            Ok(Parsed::Shaped(stmt, literals)) => {
                                shared.metrics.statement(&stmt);
                                run(&mut session, &stmt, &literals, &shared, &mut gate).await
                            }
                            Ok(Parsed::Full(stmts)) if stmts.is_empty() => {
                                Err(SqlError::new(1065, "42000", "Query was empty"))
                            }
                            Ok(Parsed::Full(stmts)) if stmts.len() > 1 => Err(SqlError::syntax(
                                "several statements in one query (multi-statements are off)",
                            )),
                            Ok(Parsed::Full(stmts)) => {
                                shared.metrics.statement(&stmts[0]);
                                run(&mut session, &stmts[0], &[], &shared, &mut gate).await
                            }
                        },
                    },
                };
                shared.metrics.latency(started.elapsed());
                write_outcome(&mut conn, &session, out, false, &shared);
            }
            Command::InitDb(db) => {
                let db = String::from_utf8_lossy(&db).into_owned();
                if shared.catalog.state().databases.contains(&db) {
                    session.view.db = Some(db);
                    write_outcome(&mut conn, &session, Ok(Outcome::ok(0)), false, &shared);
                } else {
                    write_outcome(
                        &mut conn,
                        &session,
                        Err(SqlError::no_such_database(&db)),
                        false,
                        &shared,
                    );
                }
            }
            Command::FieldList { table, .. } => {
                let name = String::from_utf8_lossy(&table).into_owned();
                let state = shared.catalog.state();
                match session.view.db.as_deref().map(|d| state.table(d, &name)) {
                    Some(Ok(h)) => {
                        let cols: Vec<_> = (0..h.schema.columns.len())
                            .map(|c| crate::sql::bind::query::column_info_of(h, c))
                            .collect();
                        conn.write_column_definitions_for_field_list(&cols);
                    }
                    Some(Err(e)) => write_outcome(&mut conn, &session, Err(e), false, &shared),
                    None => write_outcome(&mut conn, &session, Err(SqlError::no_database()), false, &shared),
                }
            }
            Command::StmtPrepare(sql) => {
                let res = std::str::from_utf8(&sql)
                    .map_err(|_| SqlError::syntax("the statement is not valid UTF-8"))
                    .and_then(|text| match crate::sql::xa::parse_xa(text) {
                        Some(_) => Err(SqlError::new(
                            1295,
                            "HY000",
                            "This command is not supported in the prepared statement protocol yet",
                        )),
                        None => parse(text),
                    })
                    .and_then(|mut stmts| {
                        if stmts.len() != 1 {
                            return Err(SqlError::syntax("PREPARE takes exactly one statement"));
                        }
                        let stmt = stmts.pop().expect("one statement");
                        let bound = session.bind(&stmt)?;
                        let columns = match &bound.plan {
                            crate::sql::plan::Plan::Select(p) => p.columns.clone(),
                            _ => Vec::new(),
                        };
                        Ok((stmt, bound.params, columns))
                    });
                match res {
                    Ok((stmt, params, columns)) if params <= u16::MAX as usize => {
                        let sid = next_stmt;
                        next_stmt = next_stmt.wrapping_add(1).max(1);
                        prepared.insert(
                            sid,
                            Prepared {
                                stmt: Arc::new(stmt),
                                params,
                                types: Vec::new(),
                                long_data: HashMap::new(),
                            },
                        );
                        conn.write_prepare_ok(sid, params as u16, &columns);
                    }
                    Ok(_) => write_outcome(
                        &mut conn,
                        &session,
                        Err(SqlError::new(
                            1390,
                            "HY000",
                            "Prepared statement contains too many placeholders",
                        )),
                        false,
                        &shared,
                    ),
                    Err(e) => write_outcome(&mut conn, &session, Err(e), false, &shared),
                }
            }
            Command::StmtExecute(payload) => {
                let started = std::time::Instant::now();
                let out = match protocol::execute_stmt_id(&payload) {
                    Err(e) => Err(SqlError::new(
                        1835,
                        "HY000",
                        format!("Malformed communication packet: {e}"),
                    )),
                    Ok(sid) => match prepared.get_mut(&sid) {
                        None => Err(SqlError::unknown_statement(sid)),
                        Some(p) => match protocol::decode_execute(&payload, p.params, &mut p.types, &mut p.long_data) {
                            Err(e) => Err(SqlError::new(
                                1835,
                                "HY000",
                                format!("Malformed communication packet: {e}"),
                            )),
                            Ok(req) => {
                                let stmt = p.stmt.clone();
                                shared.metrics.statement(&stmt);
                                run(&mut session, &stmt, &req.params, &shared, &mut gate).await
                            }
                        },
                    },
                };
                shared.metrics.latency(started.elapsed());
                write_outcome(&mut conn, &session, out, true, &shared);
            }
            Command::StmtClose(sid) => {
                prepared.remove(&sid);
                continue; // no reply
            }
            Command::StmtSendLongData { stmt_id, param, data } => {
                if let Some(p) = prepared.get_mut(&stmt_id) {
                    let buf = p.long_data.entry(param).or_default();
                    if buf.len() + data.len() <= shared.config.max_allowed_packet {
                        buf.extend_from_slice(&data);
                    }
                }
                continue; // no reply
            }
            Command::StmtReset(sid) => {
                let out = match prepared.get_mut(&sid) {
                    Some(p) => {
                        p.long_data.clear();
                        Ok(Outcome::ok(0))
                    }
                    None => Err(SqlError::unknown_statement(sid)),
                };
                write_outcome(&mut conn, &session, out, false, &shared);
            }
            Command::ResetConnection => {
                session.rollback_open();
                gate = TxnGate::default();
                prepared.clear();
                session.view.autocommit = true;
                session.view.last_insert_id = 0;
                write_outcome(&mut conn, &session, Ok(Outcome::ok(0)), false, &shared);
            }
            Command::Other(code) => {
                write_outcome(
                    &mut conn,
                    &session,
                    Err(SqlError::new(1047, "08S01", format!("Unknown command {code:#04x}"))),
                    false,
                    &shared,
                );
            }
        }
        if let Err(e) = conn.flush().await {
            tracing::warn!(connection = id, %peer, "write failed: {e}");
            break;
        }
    }
    session.rollback_open();
}
