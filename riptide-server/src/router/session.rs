//! One client connection to the router: each statement is sent to the leader of the
//! partition(s) that hold its rows, over a connection per partition that lives as long as the
//! client's, and the replies are relayed (or combined, for a read of several partitions).
//!
//! Invariants:
//! - A transaction's home is its first partition: the router holds a client's BEGIN until the
//!   first statement that names a partition and opens the transaction there (open while that
//!   replica reports it, `SERVER_STATUS_IN_TRANS`). A statement of the transaction on another
//!   partition runs in an XA branch there, and the COMMIT is a two-phase commit over them
//!   ([`super::twophase`]); a partition that cannot prepare (a single server) refuses the
//!   statement with 1235 and the transaction goes on.
//! - A write is sent to one partition or refused: a write whose rows the router cannot place
//!   on a single partition (no key, keys on several partitions) gets 1235 and changes nothing.
//! - A statement is sent again to another replica only when it provably did nothing (1290,
//!   which always means not applied, outside a transaction on that partition; no connection;
//!   a lost read outside a transaction): the rules are in [`super::send`]. A connection lost
//!   after a write was sent is reported as such (outcome unknown), never retried.
//! - DDL goes to every partition in order, outside transactions; the first failure stops it and
//!   says which partitions have the change.
//! - Session settings (SET) are sent to every open partition connection and replayed, in
//!   order, on each one opened later; the current database likewise.

use super::backend::{Backend, Reply};
use super::merge::{combine, concat, text_values};
use super::merge_plan::{plan, Merge};
use super::placement::{place, target_table, Placement, TableKey};
use super::prepared::RouterStatement;
use super::send::Kind;
use super::RouterShared;

use crate::protocol::{status, Connection, OkInfo};
use sqlparser::ast::Statement;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// What the router counts for each buffered row beyond its bytes (its vector).
pub(super) const ROW_OVERHEAD_BYTES: usize = 32;

/// MySQL's "not supported yet".
pub(super) const NOT_SUPPORTED: u16 = 1235;
/// MySQL's read-only error: what a follower (or a leader without its majority) answers.
pub(super) const READ_ONLY: u16 = 1290;
/// An error the router reports of its own (a partition unreachable, an unknown outcome).
pub(super) const ROUTER_ERROR: u16 = 1105;

/// What the router answers a statement with.
pub(super) enum Answer {
    /// A replica's reply, relayed.
    Reply(Reply),
    /// An OK of the router's own.
    Ok,
    /// An error of the router's own.
    Error(u16, &'static str, String),
    /// Payloads to relay as they are (a PREPARE_OK and its definitions).
    Payloads(Vec<Vec<u8>>),
}

pub(super) fn refuse(message: impl Into<String>) -> Answer {
    Answer::Error(NOT_SUPPORTED, "42000", message.into())
}

/// A client's state at the router.
pub(super) struct RouterSession {
    pub(super) shared: Arc<RouterShared>,
    pub(super) user: String,
    pub(super) password: String,
    pub(super) db: Option<String>,
    pub(super) backends: Vec<Option<Backend>>,
    pub(super) settings: Vec<String>,
    /// The partition whose replica holds this client's open transaction.
    pub(super) pinned: Option<usize>,
    /// A BEGIN not yet sent (no statement named a partition since).
    pub(super) pending_begin: Option<String>,
    /// Partitions other than the home where the open transaction has an XA branch.
    pub(super) branches: Vec<usize>,
    /// The open transaction's global id, once it has a branch.
    pub(super) gtrid: Option<String>,
    pub(super) autocommit: bool,
    pub(super) statements: HashMap<u32, RouterStatement>,
    pub(super) next_statement: u32,
    /// The client asked for CLIENT_FOUND_ROWS; so does every partition connection.
    pub(super) found_rows: bool,
}

impl Drop for RouterSession {
    fn drop(&mut self) {
        // A client gone mid-transaction: its partitions roll back what is not prepared, and
        // whatever is prepared is the resolver's now.
        if let Some(g) = self.gtrid.take() {
            self.shared.coordinating.lock().remove(&g);
        }
    }
}

impl RouterSession {
    pub(super) fn new(shared: Arc<RouterShared>, user: String, db: Option<String>, found_rows: bool) -> RouterSession {
        let password = shared.password_of(&user);
        let n = shared.partitions.len();
        RouterSession {
            shared,
            user,
            password,
            db,
            backends: (0..n).map(|_| None).collect(),
            settings: Vec::new(),
            pinned: None,
            pending_begin: None,
            branches: Vec::new(),
            gtrid: None,
            autocommit: true,
            statements: HashMap::new(),
            next_statement: 0,
            found_rows,
        }
    }

    /// The status flags of an answer the router gives itself.
    pub(super) fn status(&self) -> u16 {
        let mut s = 0;
        if self.pinned.is_some() || self.pending_begin.is_some() {
            s |= status::SERVER_STATUS_IN_TRANS;
        }
        if self.autocommit {
            s |= status::SERVER_STATUS_AUTOCOMMIT;
        }
        s
    }

    /// Sets the status flags (2 bytes at `at`) of a relayed OK or EOF to what the client's
    /// session is: a replica knows nothing of a BEGIN the router holds.
    fn fix_status(&self, payload: &mut [u8], at: Option<usize>) {
        let Some(at) = at.filter(|&a| a + 2 <= payload.len()) else {
            return;
        };
        if self.pending_begin.is_some() {
            let mut s = u16::from_le_bytes([payload[at], payload[at + 1]]);
            s |= status::SERVER_STATUS_IN_TRANS;
            payload[at..at + 2].copy_from_slice(&s.to_le_bytes());
        }
    }

    /// Closes every partition connection and forgets the session's state (the replicas roll
    /// back what was open).
    pub(super) fn reset(&mut self) {
        self.backends.iter_mut().for_each(|b| *b = None);
        self.settings.clear();
        self.pinned = None;
        self.pending_begin = None;
        self.branches.clear();
        if let Some(g) = self.gtrid.take() {
            self.shared.coordinating.lock().remove(&g);
        }
        self.autocommit = true;
        self.statements.clear();
    }

    /// Runs one statement: its text (parameters bound, for a prepared one), how to send it to a
    /// partition, and its parse.
    pub(super) async fn run(&mut self, text: &str, req: Request<'_>, stmt: &Statement) -> Answer {
        match stmt {
            Statement::StartTransaction { .. } => {
                if let Some(p) = self.pinned {
                    // BEGIN commits an open transaction first, as MySQL does.
                    let reply = if self.gtrid.is_none() {
                        self.send(p, Request::Query("COMMIT"), Kind::Final).await
                    } else {
                        self.commit_distributed().await
                    };
                    if !matches!(reply, Answer::Reply(Reply::Ok(_))) {
                        return reply;
                    }
                }
                self.pending_begin = Some(text.to_string());
                Answer::Ok
            }
            Statement::Commit { chain: false, .. } if self.gtrid.is_some() => self.commit_distributed().await,
            Statement::Rollback {
                chain: false,
                savepoint: None,
            } if self.gtrid.is_some() => self.rollback_distributed().await,
            Statement::Commit { chain: false, .. }
            | Statement::Rollback {
                chain: false,
                savepoint: None,
            } => match self.pinned {
                Some(p) => self.send(p, Request::Query(text), Kind::Final).await,
                None => self.end_unpinned(text).await,
            },
            Statement::Commit { .. } | Statement::Rollback { .. } if self.gtrid.is_some() => {
                refuse("AND CHAIN or a savepoint in a transaction over several partitions")
            }
            Statement::Commit { .. } | Statement::Rollback { .. } => match self.pinned {
                Some(p) => self.send(p, Request::Query(text), Kind::Final).await,
                None => refuse("AND CHAIN or a savepoint before the transaction reached a partition"),
            },
            Statement::Set(_) => self.set(text).await,
            Statement::Use(_) => self.use_db(text, None).await,
            Statement::CreateTable(_)
            | Statement::CreateIndex(_)
            | Statement::CreateDatabase { .. }
            | Statement::CreateSchema { .. }
            | Statement::Drop { .. }
            | Statement::AlterTable { .. }
            | Statement::Truncate { .. } => self.ddl(text).await,
            other => match target_table(other) {
                Some(name) => self.table_statement(req, other, name).await,
                // No table (SELECT 1, SHOW ...): any partition answers; the transaction's one
                // when there is one.
                None => self.send(self.pinned.unwrap_or(0), req, Kind::Plain).await,
            },
        }
    }

    /// COMMIT or ROLLBACK with no partition holding the transaction: a held BEGIN is dropped;
    /// with autocommit off, every open partition connection may hold one (a failed statement
    /// opens it too), so each is told.
    async fn end_unpinned(&mut self, text: &str) -> Answer {
        self.pending_begin = None;
        if self.autocommit {
            return Answer::Ok;
        }
        let mut answer = Answer::Ok;
        for p in 0..self.backends.len() {
            if self.backends[p].is_some() {
                let reply = self.send(p, Request::Query(text), Kind::Final).await;
                if matches!(answer, Answer::Ok) || !matches!(reply, Answer::Reply(Reply::Ok(_))) {
                    answer = reply;
                }
            }
        }
        answer
    }

    /// COM_INIT_DB / USE: checked by one partition, then sent to every open one.
    pub(super) async fn use_db(&mut self, text: &str, db: Option<String>) -> Answer {
        let first = self.pinned.unwrap_or(0);
        let mut answer = self.send(first, Request::Query(text), Kind::Plain).await;
        // A follower that has not applied the database's creation yet does not know it: the
        // other replicas are asked (on connections of their own, leaving the shared leader
        // hint alone) before the database is said not to exist.
        let part = &self.shared.partitions[first];
        let (replicas, hint) = (part.replicas.len(), part.leader_hint());
        for k in 1..replicas {
            if self.pinned.is_some() || !matches!(&answer, Answer::Reply(Reply::Err(e, _)) if e.code == 1049) {
                break;
            }
            if let Ok(mut b) = self.open_backend(first, (hint + k) % replicas).await {
                if let Ok(reply) = b.query(text).await {
                    if matches!(reply, Reply::Ok(_)) {
                        self.backends[first] = Some(b);
                    }
                    answer = Answer::Reply(reply);
                }
            }
        }
        if !matches!(answer, Answer::Reply(Reply::Ok(_))) {
            return answer;
        }
        self.send_to_other_open(first, text).await;
        self.db = db.or_else(|| {
            crate::sql::parse::parse(text).ok().and_then(|s| match s.first() {
                Some(Statement::Use(u)) => Some(use_name(u)),
                _ => None,
            })
        });
        answer
    }

    /// Sends a session statement (SET, USE) that partition `first` accepted to every other open
    /// partition connection; one that refuses it is closed (a new one replays the session).
    async fn send_to_other_open(&mut self, first: usize, text: &str) {
        for p in 0..self.backends.len() {
            if p != first && self.backends[p].is_some() {
                let other = self.send(p, Request::Query(text), Kind::Plain).await;
                if !matches!(other, Answer::Reply(Reply::Ok(_))) {
                    if self.branches.contains(&p) {
                        // The branch's session would differ from the client's: it goes, and the
                        // transaction with it.
                        self.abort_all().await;
                    }
                    self.backends[p] = None;
                }
            }
        }
    }

    async fn set(&mut self, text: &str) -> Answer {
        if self.gtrid.is_some() {
            return refuse("SET in a transaction over several partitions (COMMIT first)");
        }
        let known = self.settings.iter().any(|s| s == text);
        if !known && (self.settings.len() >= MAX_SETTINGS || text.len() > MAX_SETTING_BYTES) {
            return refuse(format!(
                "more than {MAX_SETTINGS} different SET statements, or one over {MAX_SETTING_BYTES} bytes, in one session through the router"
            ));
        }
        let was_autocommit = self.autocommit;
        let first = self.pinned.unwrap_or(0);
        let answer = self.send(first, Request::Query(text), Kind::Plain).await;
        if !matches!(answer, Answer::Reply(Reply::Ok(_))) {
            return answer;
        }
        if !was_autocommit && self.autocommit {
            // autocommit 0 -> 1 commits the open transaction, a held BEGIN included.
            self.pending_begin = None;
        }
        self.send_to_other_open(first, text).await;
        // Replayed, in order, on connections opened later. A statement sent again moves to the
        // end: replaying the list still leaves each variable as its last assignment left it (for
        // assignments of values; a SET that reads variables, as `SET @n = @n + 1`, replays once).
        self.settings.retain(|s| s != text);
        self.settings.push(text.to_string());
        answer
    }

    async fn ddl(&mut self, text: &str) -> Answer {
        if self.pinned.is_some() || self.pending_begin.is_some() {
            return refuse("DDL inside a transaction through the router (COMMIT first)");
        }
        let n = self.backends.len();
        let mut last = Answer::Ok;
        for p in 0..n {
            let answer = self.send(p, Request::Query(text), Kind::Final).await;
            match answer {
                Answer::Reply(Reply::Ok(_)) => last = answer,
                Answer::Reply(Reply::Err(e, _)) if p > 0 => {
                    last = Answer::Error(
                        e.code,
                        "HY000",
                        format!(
                            "partition {p} of {n}: {} (partitions before it have the change)",
                            e.message
                        ),
                    );
                    break;
                }
                Answer::Error(code, state, m) if p > 0 => {
                    last = Answer::Error(code, state, format!("{m} (partitions before {p} have the change)"));
                    break;
                }
                other => {
                    last = other;
                    break;
                }
            }
        }
        self.shared.forget_schemas();
        last
    }

    async fn table_key(&mut self, db: &str, table: &str) -> Result<Option<Arc<TableKey>>, Answer> {
        if let Some(k) = self.shared.schema(db, table) {
            return Ok(Some(k));
        }
        let generation = self.shared.schema_generation();
        let sql = format!("SHOW CREATE TABLE {}.{}", quote(db), quote(table));
        let from = self.pinned.unwrap_or(0);
        let rows = match self.send(from, Request::Query(&sql), Kind::Plain).await {
            Answer::Reply(Reply::Rows(rs)) => rs,
            Answer::Reply(Reply::Ok(_)) => {
                return Err(Answer::Error(
                    ROUTER_ERROR,
                    "HY000",
                    "SHOW CREATE TABLE returned no rows".into(),
                ))
            }
            other => return Err(other),
        };
        let create = rows
            .rows
            .first()
            .and_then(|r| text_values(r).ok())
            .and_then(|mut v| v.pop().flatten())
            .ok_or_else(|| Answer::Error(ROUTER_ERROR, "HY000", "SHOW CREATE TABLE: no statement".into()))?;
        let key = crate::sql::parse::parse(&create)
            .ok()
            .and_then(|s| s.into_iter().next())
            .and_then(|s| TableKey::from_create(&s).ok())
            .map(Arc::new);
        if let Some(k) = &key {
            self.shared.remember_schema(db, table, k.clone(), generation);
        }
        Ok(key)
    }

    async fn table_statement(
        &mut self,
        req: Request<'_>,
        stmt: &Statement,
        name: &sqlparser::ast::ObjectName,
    ) -> Answer {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| p.as_ident().map(|i| i.value.clone()).unwrap_or_else(|| p.to_string()))
            .collect();
        let (db, table) = match parts.as_slice() {
            [t] => match &self.db {
                Some(d) => (d.clone(), t.clone()),
                None => return Answer::Error(1046, "3D000", "No database selected".into()),
            },
            [d, t] => (d.clone(), t.clone()),
            _ => return Answer::Error(1064, "42000", format!("bad table name {name}")),
        };
        let write = !matches!(stmt, Statement::Query(_));
        let key = match self.table_key(&db, &table).await {
            Ok(k) => k,
            Err(answer) => return answer,
        };
        let n = self.backends.len();
        let placement = match &key {
            Some(k) => match place(stmt, k, n) {
                Ok(p) => p,
                Err(why) => return refuse(format!("{why} (a write must name its rows' partition)")),
            },
            None if write => return refuse("a write to a table without a primary key through the router"),
            None => Placement::All,
        };
        let targets: BTreeSet<usize> = match placement {
            Placement::Some(set) => set,
            Placement::All => (0..n).collect(),
        };
        if targets.len() == 1 {
            let p = *targets.first().expect("one target");
            return self.send(p, req, if write { Kind::Write } else { Kind::Read }).await;
        }
        if write {
            return refuse(
                "a write to rows of several partitions in one statement (split it by key; a transaction may write to several)",
            );
        }
        if self.pinned.is_some() || self.pending_begin.is_some() || !self.autocommit {
            // In a transaction: each partition reads in the transaction (its home or a branch).
            if let Err(answer) = self.check_participants(targets.iter().copied()).await {
                return answer;
            }
        }
        let Statement::Query(q) = stmt else {
            return refuse("this statement across partitions");
        };
        let text = match req {
            Request::Query(t) => Some(t),
            Request::Execute { .. } => None,
        };
        let (how, sent) = match plan(q, text, key.as_deref()) {
            Merge::Unsupported(what) => {
                return refuse(format!(
                    "{what} over several partitions (the router does not combine it yet)"
                ))
            }
            Merge::Concat => (None, None),
            Merge::Combine(how, sent) => (Some(how), sent),
        };
        if how.is_some() && matches!(req, Request::Execute { .. }) {
            return refuse(
                "ORDER BY, LIMIT, DISTINCT or aggregates over several partitions in a prepared statement (the router combines text rows only)",
            );
        }
        let per_partition = match &sent {
            Some(text) => Request::Query(text),
            None => req,
        };
        let mut replies = Vec::with_capacity(targets.len());
        let mut bytes = 0usize;
        for p in targets {
            match self.send(p, per_partition, Kind::Read).await {
                Answer::Reply(Reply::Rows(rs)) => {
                    bytes += rs.rows.iter().map(|r| r.len() + ROW_OVERHEAD_BYTES).sum::<usize>();
                    if bytes > super::backend::MAX_REPLY_BYTES {
                        return refuse(format!(
                            "a read of several partitions whose rows exceed {} bytes",
                            super::backend::MAX_REPLY_BYTES
                        ));
                    }
                    replies.push(rs)
                }
                other => return other,
            }
        }
        match how {
            None => Answer::Reply(Reply::Rows(concat(replies))),
            Some(how) => match combine(replies, &how) {
                Ok(rs) => Answer::Reply(Reply::Rows(rs)),
                Err(why) => refuse(why),
            },
        }
    }
}

/// How a statement reaches a partition.
#[derive(Debug, Clone, Copy)]
pub(super) enum Request<'a> {
    /// A text query (COM_QUERY).
    Query(&'a str),
    /// The router's prepared statement `id`, with the client's COM_STMT_EXECUTE payload.
    Execute { id: u32, payload: &'a [u8] },
}

/// Different SET statements one session may make (each is replayed on every new partition
/// connection), and the longest.
const MAX_SETTINGS: usize = 256;
const MAX_SETTING_BYTES: usize = 64 << 10;

fn use_name(u: &sqlparser::ast::Use) -> String {
    let s = u.to_string();
    s.trim_start_matches("USE ").trim_matches('`').to_string()
}

fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

/// Writes an answer to the client.
pub(super) fn write_answer<S: AsyncRead + AsyncWrite + Unpin + Send>(
    conn: &mut Connection<S>,
    session: &RouterSession,
    answer: Answer,
) {
    match answer {
        Answer::Ok => conn.write_ok(&OkInfo {
            status: session.status(),
            ..OkInfo::default()
        }),
        Answer::Error(code, state, message) => conn.write_err(code, state, &message),
        Answer::Payloads(payloads) => payloads.iter().for_each(|p| conn.write_payload(p)),
        Answer::Reply(Reply::Err(_, p)) => conn.write_payload(&p),
        Answer::Reply(Reply::Ok(mut p)) => {
            let at = super::backend::ok_status_at(&p);
            session.fix_status(&mut p, at);
            conn.write_payload(&p)
        }
        Answer::Reply(Reply::Rows(mut rs)) => {
            conn.write_payload(&rs.header);
            for c in &rs.columns {
                conn.write_payload(c);
            }
            conn.write_payload(&rs.columns_eof);
            for r in &rs.rows {
                conn.write_payload(r);
            }
            let at = (rs.eof.len() >= 5).then_some(3);
            session.fix_status(&mut rs.eof, at);
            conn.write_payload(&rs.eof);
        }
    }
}
