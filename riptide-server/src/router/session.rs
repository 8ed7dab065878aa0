//! One client connection to the router: each statement is sent to the leader of the
//! partition(s) that hold its rows, over a connection per partition that lives as long as the
//! client's, and the replies are relayed (or combined, for a read of several partitions).
//!
//! Invariants:
//! - A transaction lives on one partition: the router holds a client's BEGIN until the first
//!   statement that names a partition, opens the transaction there, and from then on (while that
//!   replica reports the transaction open, `SERVER_STATUS_IN_TRANS`) refuses any statement
//!   that needs another partition with 1235, leaving the transaction as it was. Cross-partition
//!   transactions (two-phase commit) do not exist yet.
//! - A write is sent to one partition or refused: a write whose rows the router cannot place
//!   on a single partition (no key, keys on several partitions) gets 1235 and changes nothing.
//! - A statement is sent again to another replica only when it provably did nothing: the
//!   replica answered 1290 (a follower, or a leader that lost its majority: both refuse before
//!   executing) outside a transaction on it, or the connection could not be opened. A
//!   connection lost after a write was sent is reported as such (outcome unknown), never
//!   retried; a read outside a transaction is retried.
//! - DDL goes to every partition in order, outside transactions; the first failure stops it and
//!   says which partitions have the change.
//! - Session settings (SET) are sent to every open partition connection and replayed, in
//!   order, on each one opened later; the current database likewise.

use super::backend::{Backend, BackendError, Reply};
use super::merge::{concat, sum, text_values};
use super::placement::{merge_of, place, target_table, Merge, Placement, TableKey};
use super::prepared::RouterStatement;
use super::RouterShared;

use crate::protocol::{status, Connection, OkInfo};
use sqlparser::ast::Statement;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// What the router counts for each buffered row beyond its bytes (its vector).
const ROW_OVERHEAD_BYTES: usize = 32;

/// MySQL's "not supported yet".
const NOT_SUPPORTED: u16 = 1235;
/// MySQL's read-only error: what a follower (or a leader without its majority) answers.
const READ_ONLY: u16 = 1290;
/// An error the router reports of its own (a partition unreachable, an unknown outcome).
const ROUTER_ERROR: u16 = 1105;

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

fn refuse(message: impl Into<String>) -> Answer {
    Answer::Error(NOT_SUPPORTED, "42000", message.into())
}

/// A client's state at the router.
pub(super) struct RouterSession {
    shared: Arc<RouterShared>,
    user: String,
    password: String,
    db: Option<String>,
    backends: Vec<Option<Backend>>,
    settings: Vec<String>,
    /// The partition whose replica holds this client's open transaction.
    pinned: Option<usize>,
    /// A BEGIN not yet sent (no statement named a partition since).
    pending_begin: Option<String>,
    autocommit: bool,
    statements: HashMap<u32, RouterStatement>,
    next_statement: u32,
    /// The client asked for CLIENT_FOUND_ROWS; so does every partition connection.
    found_rows: bool,
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
                    let reply = self.send(p, Request::Query("COMMIT"), Kind::Final).await;
                    if !matches!(reply, Answer::Reply(Reply::Ok(_))) {
                        return reply;
                    }
                }
                self.pending_begin = Some(text.to_string());
                Answer::Ok
            }
            Statement::Commit { chain: false, .. }
            | Statement::Rollback {
                chain: false,
                savepoint: None,
            } => match self.pinned {
                Some(p) => self.send(p, Request::Query(text), Kind::Final).await,
                None => self.end_unpinned(text).await,
            },
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
        for p in 0..self.backends.len() {
            if p != first && self.backends[p].is_some() {
                let other = self.send(p, Request::Query(text), Kind::Plain).await;
                if !matches!(other, Answer::Reply(Reply::Ok(_))) {
                    self.backends[p] = None;
                }
            }
        }
        self.db = db.or_else(|| {
            crate::sql::parse::parse(text).ok().and_then(|s| match s.first() {
                Some(Statement::Use(u)) => Some(use_name(u)),
                _ => None,
            })
        });
        answer
    }

    async fn set(&mut self, text: &str) -> Answer {
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
        for p in 0..self.backends.len() {
            if p != first && self.backends[p].is_some() {
                let other = self.send(p, Request::Query(text), Kind::Plain).await;
                if !matches!(other, Answer::Reply(Reply::Ok(_))) {
                    self.backends[p] = None;
                }
            }
        }
        // Replayed, in order, on connections opened later. A statement sent again moves to the
        // end: replaying the list still leaves each variable as its last assignment left it.
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
        let placement = match key {
            Some(k) => match place(stmt, &k, n) {
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
                "a write to rows of several partitions (cross-partition transactions do not exist yet; split it by key)",
            );
        }
        if self.pinned.is_some() || self.pending_begin.is_some() || !self.autocommit {
            return refuse(
                "a read of several partitions inside a transaction (cross-partition transactions do not exist yet)",
            );
        }
        let Statement::Query(q) = stmt else {
            return refuse("this statement across partitions");
        };
        let merge = merge_of(q);
        if merge == Merge::Sum && matches!(req, Request::Execute { .. }) {
            return refuse(
                "COUNT or SUM over several partitions in a prepared statement (the router adds text rows only)",
            );
        }
        if let Merge::Unsupported(what) = &merge {
            return refuse(format!(
                "{what} over several partitions (the router does not combine it yet)"
            ));
        }
        let mut replies = Vec::with_capacity(targets.len());
        let mut bytes = 0usize;
        for p in targets {
            match self.send(p, req, Kind::Read).await {
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
        match merge {
            Merge::Concat => Answer::Reply(Reply::Rows(concat(replies))),
            Merge::Sum => match sum(replies) {
                Ok(rs) => Answer::Reply(Reply::Rows(rs)),
                Err(why) => refuse(why),
            },
            Merge::Unsupported(_) => unreachable!("refused above"),
        }
    }

    /// The open connection to partition `p`'s leader (as far as known), opened if needed; one
    /// whose replica closed it while idle (a restarted or killed node) is opened again.
    async fn backend(&mut self, p: usize) -> Result<&mut Backend, BackendError> {
        if self.backends[p].as_mut().is_some_and(|b| b.is_closed()) {
            self.backends[p] = None;
        }
        if self.backends[p].is_none() {
            let at = self.shared.partitions[p].leader_hint();
            let b = self.open_backend(p, at).await?;
            self.backends[p] = Some(b);
        }
        Ok(self.backends[p].as_mut().expect("opened above"))
    }

    /// A new connection to replica `at` of partition `p`, in the session's database, with its
    /// settings replayed.
    async fn open_backend(&self, p: usize, at: usize) -> Result<Backend, BackendError> {
        let part = &self.shared.partitions[p];
        let addr = part.replicas[at];
        let timeout = self.shared.config.backend_timeout;
        let opened = Backend::connect(
            addr,
            &self.user,
            &self.password,
            self.db.as_deref(),
            self.found_rows,
            timeout,
        )
        .await;
        let mut b = match opened {
            Ok(b) => b,
            Err(e) => {
                if matches!(e, BackendError::Io { .. }) {
                    part.not_leader(at);
                }
                return Err(e);
            }
        };
        b.replica = at;
        for s in &self.settings {
            match b.query(s).await {
                Ok(Reply::Err(e, _)) => {
                    return Err(BackendError::Protocol {
                        addr,
                        message: format!("replaying {s:?}: {}", e.message),
                    })
                }
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        Ok(b)
    }

    /// Sends a statement to partition `p` (after a held BEGIN), finding its leader: see the
    /// module's invariants for when it is sent again.
    async fn send(&mut self, p: usize, req: Request<'_>, kind: Kind) -> Answer {
        let write = matches!(kind, Kind::Write | Kind::Final);
        if self.pinned.is_some_and(|q| q != p) {
            return refuse("a statement on another partition than the open transaction's (cross-partition transactions do not exist yet)");
        }
        let replicas = self.shared.partitions[p].replicas.len();
        let deadline = Instant::now() + self.shared.config.leader_wait;
        let mut attempt = 0usize;
        let mut missing_db = 0usize;
        loop {
            attempt += 1;
            let (was_pinned, held) = (self.pinned, self.pending_begin.clone());
            // Only a transaction open before this try has work in it; one this try began holds
            // nothing but its BEGIN, which is held again if the statement is sent again.
            let in_txn = was_pinned == Some(p);
            let outcome = self.send_once(p, req, matches!(kind, Kind::Read | Kind::Write)).await;
            if let Err(SendError::NotSent(_, true)) = &outcome {
                missing_db += 1;
            }
            let retry = match &outcome {
                Ok(Reply::Err(e, _)) => e.code == READ_ONLY && !in_txn,
                // A follower that lacks the session's database (not applied yet): each replica
                // is asked once.
                Err(SendError::NotSent(_, true)) => missing_db < replicas,
                Err(SendError::NotSent(_, false)) => true,
                Err(SendError::Lost(_)) => !write && !in_txn,
                Err(SendError::Refused(_) | SendError::Failed(_)) => false,
                Ok(_) => false,
            };
            let began = !in_txn && self.pinned == Some(p);
            if retry && Instant::now() < deadline {
                if let (Ok(Reply::Err(..)), Some(b)) = (&outcome, &self.backends[p]) {
                    self.shared.partitions[p].not_leader(b.replica);
                }
                self.backends[p] = None;
                if !in_txn {
                    self.pinned = was_pinned;
                    self.pending_begin = held;
                }
                // A new leader is elected within an election timeout; try each replica quickly,
                // then back off.
                let pause = if attempt <= replicas { 5 } else { 50 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                continue;
            }
            return match outcome {
                Ok(reply) => {
                    if let Reply::Err(e, _) = &reply {
                        if e.code == READ_ONLY && began {
                            // Refused after this try's BEGIN: nothing ran; the BEGIN is held
                            // again and the refusing connection dropped.
                            self.backends[p] = None;
                            self.pinned = was_pinned;
                            self.pending_begin = held;
                        } else if !self.autocommit && matches!(kind, Kind::Read | Kind::Write) && self.pinned.is_none()
                        {
                            // With autocommit off the replica opened a transaction even for a
                            // statement that failed; it holds whatever that statement locked.
                            self.pinned = Some(p);
                        }
                    } else {
                        let s = reply.status();
                        self.pinned = (s & status::SERVER_STATUS_IN_TRANS != 0).then_some(p);
                        self.autocommit = s & status::SERVER_STATUS_AUTOCOMMIT != 0;
                    }
                    Answer::Reply(reply)
                }
                Err(e) => {
                    self.backends[p] = None;
                    let txn = in_txn || began;
                    if txn {
                        self.pinned = None;
                        self.pending_begin = None;
                    }
                    let message = match e {
                        SendError::Refused(m) => format!("login refused ({m})"),
                        SendError::NotSent(m, _) => format!("no leader reached ({m})"),
                        SendError::Failed(m) => format!(
                            "the replica's reply could not be relayed ({m}){}",
                            if txn { "; the open transaction is rolled back" } else { "" }
                        ),
                        // The replica rolls back a transaction whose connection is gone, unless
                        // the lost statement was its COMMIT.
                        SendError::Lost(m) if txn && kind == Kind::Final => format!(
                            "connection to the leader lost during the statement that ends the transaction: whether it committed is unknown ({m})"
                        ),
                        SendError::Lost(m) if txn => format!(
                            "connection to the leader lost during the statement; the open transaction is rolled back ({m})"
                        ),
                        SendError::Lost(m) if write => format!(
                            "connection to the leader lost during the statement: whether it took effect is unknown ({m})"
                        ),
                        SendError::Lost(m) => format!("connection to the leader lost ({m})"),
                    };
                    Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {message}"))
                }
            };
        }
    }

    /// One try: a held BEGIN, then the statement (prepared on this replica first, for an
    /// execute).
    async fn send_once(&mut self, p: usize, req: Request<'_>, opens: bool) -> Result<Reply, SendError> {
        let begin = if opens && self.pinned.is_none() {
            self.pending_begin.clone()
        } else {
            None
        };
        let sql = match req {
            Request::Execute { id, .. } => Some(
                self.statements
                    .get(&id)
                    .ok_or_else(|| SendError::Failed("no such statement".into()))?
                    .sql
                    .clone(),
            ),
            Request::Query(_) => None,
        };
        let backend = self.backend(p).await.map_err(|e| match e {
            BackendError::Login { code: 1045, .. } => SendError::Refused(e.to_string()),
            BackendError::Login { code: 1049, .. } => SendError::NotSent(e.to_string(), true),
            BackendError::Login { .. } => SendError::Refused(e.to_string()),
            e => SendError::NotSent(e.to_string(), false),
        })?;
        if let (Request::Execute { id, .. }, Some(sql)) = (req, sql) {
            if !backend.statements.contains_key(&id) {
                match backend.prepare(&sql).await {
                    Ok(Ok(prepared)) => {
                        backend.statements.insert(id, prepared.id);
                    }
                    Ok(Err(reply)) => return Ok(reply),
                    Err(e) => return Err(SendError::NotSent(e.to_string(), false)),
                }
            }
        }
        if let Some(begin) = begin {
            match backend.query(&begin).await {
                Ok(Reply::Ok(_)) => {
                    self.pending_begin = None;
                    self.pinned = Some(p);
                }
                Ok(other) => return Ok(other),
                Err(e) => return Err(SendError::NotSent(e.to_string(), false)),
            }
        }
        let backend = self.backends[p].as_mut().expect("opened above");
        let sent = match req {
            Request::Query(text) => backend.query(text).await,
            Request::Execute { id, payload } => {
                let on_replica = backend.statements[&id];
                let stmt = self
                    .statements
                    .get(&id)
                    .ok_or_else(|| SendError::Failed("no such statement".into()))?;
                let rewritten = stmt.rewrite(payload, on_replica).map_err(SendError::Failed)?;
                backend.execute(&rewritten).await
            }
        };
        sent.map_err(|e| match e {
            BackendError::Protocol { .. } => SendError::Failed(e.to_string()),
            e => SendError::Lost(e.to_string()),
        })
    }

    /// COM_STMT_PREPARE: checked and described by one replica (the transaction's partition,
    /// or the first), its reply relayed under the router's statement id.
    pub(super) async fn prepare(&mut self, sql: &str) -> Answer {
        if self.statements.len() >= MAX_STATEMENTS {
            return Answer::Error(1461, "42000", format!("more than {MAX_STATEMENTS} prepared statements"));
        }
        let p = self.pinned.unwrap_or(0);
        let deadline = Instant::now() + self.shared.config.leader_wait;
        let prepared = loop {
            let outcome = match self.backend(p).await {
                Ok(b) => b.prepare(sql).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(Ok(prepared)) => break prepared,
                Ok(Err(reply)) => return Answer::Reply(reply),
                Err(e) if Instant::now() < deadline && !matches!(e, BackendError::Login { code: 1045, .. }) => {
                    self.backends[p] = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => {
                    self.backends[p] = None;
                    return Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {e}"));
                }
            }
        };
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        let id = self.next_statement;
        if let Some(b) = self.backends[p].as_mut() {
            b.statements.insert(id, prepared.id);
        }
        self.statements.insert(
            id,
            RouterStatement {
                sql: sql.to_string(),
                params: usize::from(prepared.params),
                types: Vec::new(),
                long_data: Default::default(),
            },
        );
        let mut payloads = prepared.payloads;
        payloads[0][1..5].copy_from_slice(&id.to_le_bytes());
        Answer::Payloads(payloads)
    }

    /// COM_STMT_EXECUTE: the parameters bound into the text to place it, then executed as a
    /// prepared statement where it belongs.
    pub(super) async fn execute(&mut self, payload: &[u8]) -> Answer {
        let Ok(id) = crate::protocol::execute_stmt_id(payload) else {
            return Answer::Error(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute".into());
        };
        let Some(stmt) = self.statements.get_mut(&id) else {
            return Answer::Error(
                1243,
                "HY000",
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_execute"),
            );
        };
        if !stmt.long_data.is_empty() {
            return refuse("COM_STMT_SEND_LONG_DATA through the router");
        }
        let bound = stmt
            .decode(payload)
            .and_then(|params| super::prepared::bind_text(&stmt.sql, &params));
        let text = match bound {
            Ok(t) => t,
            Err(e) => {
                return Answer::Error(
                    1210,
                    "HY000",
                    format!("Incorrect arguments to mysqld_stmt_execute: {e}"),
                )
            }
        };
        let parsed = match crate::sql::parse::parse(&text) {
            Ok(mut s) if s.len() == 1 => s.remove(0),
            Ok(_) => return Answer::Error(1064, "42000", "not one statement".into()),
            Err(e) => return Answer::Error(e.code, e.state, e.message),
        };
        self.run(&text, Request::Execute { id, payload }, &parsed).await
    }

    /// COM_STMT_CLOSE: forgotten here and on every replica that prepared it.
    pub(super) async fn close_statement(&mut self, id: u32) {
        if self.statements.remove(&id).is_none() {
            return;
        }
        for slot in self.backends.iter_mut() {
            let close = match slot.as_mut() {
                Some(b) => match b.statements.remove(&id) {
                    Some(on_replica) => b.close_statement(on_replica).await.is_err(),
                    None => false,
                },
                None => false,
            };
            if close {
                *slot = None;
            }
        }
    }

    /// COM_STMT_SEND_LONG_DATA: kept (an execute that needs it is refused).
    pub(super) fn long_data(&mut self, id: u32, param: u16, data: &[u8]) {
        if let Some(s) = self.statements.get_mut(&id) {
            if usize::from(param) < s.params {
                s.long_data.entry(param).or_default().extend_from_slice(data);
            }
        }
    }

    /// COM_STMT_RESET: long data dropped.
    pub(super) fn reset_statement(&mut self, id: u32) -> Answer {
        match self.statements.get_mut(&id) {
            Some(s) => {
                s.long_data.clear();
                Answer::Ok
            }
            None => Answer::Error(
                1243,
                "HY000",
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_reset"),
            ),
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

/// Prepared statements one client may hold (MySQL's max_prepared_stmt_count is per server).
const MAX_STATEMENTS: usize = 16_382;

/// What a statement sent to a partition is, for when it may be sent again and whether it
/// opens a held transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Reads rows: opens a held BEGIN; sent again when its connection is lost outside a
    /// transaction.
    Read,
    /// Writes rows: opens a held BEGIN; never sent again once sent.
    Write,
    /// Reads no rows (SET, USE, SHOW, SELECT without a table): leaves a held BEGIN held.
    Plain,
    /// Ends a transaction or changes the schema (COMMIT, ROLLBACK, DDL): never sent again
    /// once sent.
    Final,
}

enum SendError {
    /// The partition refused this client's login: no replica will take it.
    Refused(String),
    /// Nothing reached a leader (true: the replica lacked the session's database).
    NotSent(String, bool),
    /// The statement was sent and the connection failed before its reply.
    Lost(String),
    /// The replica's reply cannot be relayed (too large, not understood): the connection is
    /// dropped; sending again would fail the same way.
    Failed(String),
}

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
