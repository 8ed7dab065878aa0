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

use super::backend::{Backend, BackendError, Reply, ResultSet};
use super::placement::{merge_of, place, target_table, Merge, Placement, TableKey};
use super::RouterShared;
use crate::protocol::packet::{write_lenenc_bytes, PayloadReader};
use crate::protocol::{status, Connection, OkInfo};
use sqlparser::ast::Statement;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

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
}

impl RouterSession {
    pub(super) fn new(shared: Arc<RouterShared>, user: String, db: Option<String>) -> RouterSession {
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

    /// Closes every partition connection and forgets the session's state (the replicas roll
    /// back what was open).
    pub(super) fn reset(&mut self) {
        self.backends.iter_mut().for_each(|b| *b = None);
        self.settings.clear();
        self.pinned = None;
        self.pending_begin = None;
        self.autocommit = true;
    }

    /// Runs one statement (its text and its parse).
    pub(super) async fn run(&mut self, text: &str, stmt: &Statement) -> Answer {
        match stmt {
            Statement::StartTransaction { .. } => {
                if let Some(p) = self.pinned {
                    // BEGIN commits an open transaction first, as MySQL does.
                    let reply = self.send(p, "COMMIT", Kind::Final).await;
                    if !matches!(reply, Answer::Reply(Reply::Ok(_))) {
                        return reply;
                    }
                }
                self.pending_begin = Some(text.to_string());
                Answer::Ok
            }
            Statement::Commit { .. } | Statement::Rollback { .. } => match self.pinned {
                Some(p) => self.send(p, text, Kind::Final).await,
                None => {
                    self.pending_begin = None;
                    Answer::Ok
                }
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
                Some(name) => self.table_statement(text, other, name).await,
                // No table (SELECT 1, SHOW ...): any partition answers; the transaction's one
                // when there is one.
                None => self.send(self.pinned.unwrap_or(0), text, Kind::Plain).await,
            },
        }
    }

    /// COM_INIT_DB / USE: checked by one partition, then sent to every open one.
    pub(super) async fn use_db(&mut self, text: &str, db: Option<String>) -> Answer {
        let first = self.pinned.unwrap_or(0);
        let mut answer = self.send(first, text, Kind::Plain).await;
        // A follower that has not applied the database's creation yet does not know it: ask
        // the other replicas before saying it does not exist.
        let replicas = self.shared.partitions[first].replicas.len();
        let mut asked = 1;
        while self.pinned.is_none()
            && asked < replicas
            && matches!(&answer, Answer::Reply(Reply::Err(e, _)) if e.code == 1049)
        {
            self.backends[first] = None;
            let part = &self.shared.partitions[first];
            part.not_leader(part.leader_hint());
            answer = self.send(first, text, Kind::Plain).await;
            asked += 1;
        }
        if !matches!(answer, Answer::Reply(Reply::Ok(_))) {
            return answer;
        }
        for p in 0..self.backends.len() {
            if p != first && self.backends[p].is_some() {
                let other = self.send(p, text, Kind::Plain).await;
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
        let first = self.pinned.unwrap_or(0);
        let answer = self.send(first, text, Kind::Plain).await;
        if !matches!(answer, Answer::Reply(Reply::Ok(_))) {
            return answer;
        }
        for p in 0..self.backends.len() {
            if p != first && self.backends[p].is_some() {
                let other = self.send(p, text, Kind::Plain).await;
                if !matches!(other, Answer::Reply(Reply::Ok(_))) {
                    self.backends[p] = None;
                }
            }
        }
        // Replayed on connections opened later; bounded, since a client may SET forever.
        if self.settings.len() < 256 {
            self.settings.push(text.to_string());
        }
        answer
    }

    async fn ddl(&mut self, text: &str) -> Answer {
        if self.pinned.is_some() || self.pending_begin.is_some() {
            return refuse("DDL inside a transaction through the router (COMMIT first)");
        }
        let n = self.backends.len();
        let mut last = Answer::Ok;
        for p in 0..n {
            let answer = self.send(p, text, Kind::Final).await;
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
        let sql = format!("SHOW CREATE TABLE {}.{}", quote(db), quote(table));
        let from = self.pinned.unwrap_or(0);
        let rows = match self.send(from, &sql, Kind::Plain).await {
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
            self.shared.remember_schema(db, table, k.clone());
        }
        Ok(key)
    }

    async fn table_statement(&mut self, text: &str, stmt: &Statement, name: &sqlparser::ast::ObjectName) -> Answer {
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
            return self.send(p, text, if write { Kind::Write } else { Kind::Read }).await;
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
        if let Merge::Unsupported(what) = &merge {
            return refuse(format!(
                "{what} over several partitions (the router does not combine it yet)"
            ));
        }
        let mut replies = Vec::with_capacity(targets.len());
        for p in targets {
            match self.send(p, text, Kind::Read).await {
                Answer::Reply(Reply::Rows(rs)) => replies.push(rs),
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

    /// The open connection to partition `p`'s leader (as far as known), opened if needed.
    async fn backend(&mut self, p: usize) -> Result<&mut Backend, BackendError> {
        if self.backends[p].is_none() {
            let part = &self.shared.partitions[p];
            let at = part.leader_hint();
            let addr = part.replicas[at];
            let timeout = self.shared.config.backend_timeout;
            let opened = Backend::connect(addr, &self.user, &self.password, self.db.as_deref(), timeout).await;
            let mut b = match opened {
                Ok(b) => b,
                Err(e) => {
                    part.not_leader(at);
                    return Err(e);
                }
            };
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
            self.backends[p] = Some(b);
        }
        Ok(self.backends[p].as_mut().expect("opened above"))
    }

    /// Sends `text` to partition `p` (after a held BEGIN), finding its leader: see the
    /// module's invariants for when it is sent again.
    async fn send(&mut self, p: usize, text: &str, kind: Kind) -> Answer {
        let write = matches!(kind, Kind::Write | Kind::Final);
        if self.pinned.is_some_and(|q| q != p) {
            return refuse("a statement on another partition than the open transaction's (cross-partition transactions do not exist yet)");
        }
        let deadline = Instant::now() + self.shared.config.leader_wait;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let in_txn = self.pinned == Some(p);
            let outcome = self.send_once(p, text, matches!(kind, Kind::Read | Kind::Write)).await;
            let retry = match &outcome {
                Ok(Reply::Err(e, _)) if e.code == READ_ONLY && !in_txn => true,
                Err(SendError::NotSent(_)) => true,
                Err(SendError::Lost(_)) => !write && !in_txn,
                _ => false,
            };
            if retry && Instant::now() < deadline {
                self.backends[p] = None;
                if let Ok(Reply::Err(..)) = outcome {
                    let part = &self.shared.partitions[p];
                    part.not_leader(part.leader_hint());
                }
                // A new leader is elected within an election timeout; try each replica quickly,
                // then back off.
                let pause = if attempt as usize <= self.shared.partitions[p].replicas.len() {
                    Duration::from_millis(5)
                } else {
                    Duration::from_millis(50)
                };
                tokio::time::sleep(pause).await;
                continue;
            }
            return match outcome {
                Ok(reply) => {
                    let s = reply.status();
                    if !matches!(reply, Reply::Err(..)) {
                        self.pinned = if s & status::SERVER_STATUS_IN_TRANS != 0 {
                            Some(p)
                        } else {
                            None
                        };
                        self.autocommit = s & status::SERVER_STATUS_AUTOCOMMIT != 0;
                    }
                    Answer::Reply(reply)
                }
                Err(e) => {
                    self.backends[p] = None;
                    let was_txn = in_txn;
                    if was_txn {
                        self.pinned = None;
                    }
                    let (what, message) = match e {
                        SendError::Refused(m) => ("login refused", m),
                        SendError::NotSent(m) => ("no leader reached", m),
                        SendError::Lost(m) if write || was_txn => (
                            "connection to the partition's leader lost during the statement: its outcome is unknown",
                            m,
                        ),
                        SendError::Lost(m) => ("connection to the partition's leader lost", m),
                    };
                    let txn = if was_txn {
                        "; the open transaction is rolled back"
                    } else {
                        ""
                    };
                    Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {what}{txn} ({message})"))
                }
            };
        }
    }

    /// One try: a held BEGIN, then the statement.
    async fn send_once(&mut self, p: usize, text: &str, opens: bool) -> Result<Reply, SendError> {
        let begin = if opens && self.pinned.is_none() {
            self.pending_begin.clone()
        } else {
            None
        };
        let backend = self.backend(p).await.map_err(|e| match e {
            BackendError::Login { code: 1045, .. } => SendError::Refused(e.to_string()),
            e => SendError::NotSent(e.to_string()),
        })?;
        if let Some(begin) = begin {
            match backend.query(&begin).await {
                Ok(Reply::Ok(_)) => {
                    self.pending_begin = None;
                    self.pinned = Some(p);
                }
                Ok(other) => return Ok(other),
                Err(e) => return Err(SendError::NotSent(e.to_string())),
            }
        }
        let backend = self.backends[p].as_mut().expect("opened above");
        backend.query(text).await.map_err(|e| SendError::Lost(e.to_string()))
    }
}

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
    /// Nothing reached a leader.
    NotSent(String),
    /// The statement was sent and the connection failed before its reply.
    Lost(String),
}

fn use_name(u: &sqlparser::ast::Use) -> String {
    let s = u.to_string();
    s.trim_start_matches("USE ").trim_matches('`').to_string()
}

fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

/// A text row's values (`None` for NULL).
pub(super) fn text_values(row: &[u8]) -> Result<Vec<Option<String>>, String> {
    let mut r = PayloadReader::new(row);
    let mut out = Vec::new();
    while !r.is_empty() {
        if r.peek() == Some(0xFB) {
            let _ = r.u8();
            out.push(None);
        } else {
            let b = r.lenenc_bytes().map_err(|e| e.to_string())?;
            out.push(Some(String::from_utf8_lossy(b).into_owned()));
        }
    }
    Ok(out)
}

fn concat(replies: Vec<ResultSet>) -> ResultSet {
    let mut it = replies.into_iter();
    let mut out = it.next().unwrap_or_default();
    for rs in it {
        out.rows.extend(rs.rows);
        out.eof = rs.eof;
    }
    out
}

/// One row of COUNT/SUM aggregates per partition, summed column by column.
fn sum(replies: Vec<ResultSet>) -> Result<ResultSet, String> {
    let mut totals: Option<Vec<Option<Decimal>>> = None;
    let mut last = ResultSet::default();
    for rs in replies {
        let [row] = rs.rows.as_slice() else {
            return Err(format!(
                "an aggregate that returned {} rows on a partition",
                rs.rows.len()
            ));
        };
        let values = text_values(row)?;
        let parsed: Vec<Option<Decimal>> = values
            .iter()
            .map(|v| v.as_deref().map(Decimal::parse).transpose())
            .collect::<Result<_, _>>()?;
        totals = Some(match totals {
            None => parsed,
            Some(t) => t
                .into_iter()
                .zip(parsed)
                .map(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => a.add(&b).map(Some),
                    (a, b) => Ok(a.or(b)),
                })
                .collect::<Result<_, _>>()?,
        });
        last = rs;
    }
    let mut row = Vec::new();
    for v in totals.unwrap_or_default() {
        match v {
            Some(d) => write_lenenc_bytes(&mut row, d.to_string().as_bytes()),
            None => row.push(0xFB),
        }
    }
    last.rows = vec![row];
    Ok(last)
}

/// An exact decimal (integers and fixed-point text as MySQL prints SUM and COUNT).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    units: i128,
    scale: u32,
}

impl Decimal {
    fn parse(s: &str) -> Result<Decimal, String> {
        let bad = || format!("a partial aggregate {s:?} the router cannot add exactly");
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 30
        {
            return Err(bad());
        }
        let units: i128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
        Ok(Decimal {
            units: if neg { -units } else { units },
            scale: frac.len() as u32,
        })
    }

    fn add(&self, other: &Decimal) -> Result<Decimal, String> {
        let scale = self.scale.max(other.scale);
        let up = |d: &Decimal| d.units.checked_mul(10i128.checked_pow(scale - d.scale)?);
        let overflow = || "a sum too large for the router".to_string();
        let units = up(self)
            .ok_or_else(overflow)?
            .checked_add(up(other).ok_or_else(overflow)?)
            .ok_or_else(overflow)?;
        Ok(Decimal { units, scale })
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.units);
        }
        let sign = if self.units < 0 { "-" } else { "" };
        let abs = self.units.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = format!("{abs:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
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
        Answer::Reply(Reply::Ok(p)) | Answer::Reply(Reply::Err(_, p)) => conn.write_payload(&p),
        Answer::Reply(Reply::Rows(rs)) => {
            conn.write_payload(&rs.header);
            for c in &rs.columns {
                conn.write_payload(c);
            }
            conn.write_payload(&rs.columns_eof);
            for r in &rs.rows {
                conn.write_payload(r);
            }
            conn.write_payload(&rs.eof);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_add_exactly() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        assert_eq!(d("12").add(&d("30")).unwrap().to_string(), "42");
        assert_eq!(d("1.50").add(&d("-0.025")).unwrap().to_string(), "1.475");
        assert_eq!(d("-3.5").add(&d("1")).unwrap().to_string(), "-2.5");
        assert_eq!(d("0.001").add(&d("0")).unwrap().to_string(), "0.001");
        for bad in ["1e5", "", "abc", "1.2.3", "--1"] {
            assert!(Decimal::parse(bad).is_err(), "{bad}");
        }
    }
}
