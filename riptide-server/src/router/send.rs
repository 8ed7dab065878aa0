//! How a router session reaches a partition: the connection to the replica believed to lead
//! (opened, and its session state replayed, when needed), and [`RouterSession::send`], which
//! sends a statement there and, when it provably did nothing, to the next replica.
//!
//! Invariants (the module [`super::session`] states what they serve):
//! - A statement is sent again only after a 1290 outside a transaction on that partition, a
//!   connection that could not be opened (a replica that lacks the session's database is asked
//!   once each), or a lost read outside a transaction; never a write or a COMMIT once sent.
//! - A BEGIN sent in a try whose statement is sent again is held again; a transaction that a
//!   lost connection ended is ended here too, and the client hears which way.
//! - The shared leader hint moves on from the replica that refused or failed, not from
//!   wherever it points meanwhile.

use super::backend::{Backend, BackendError, Reply};
use super::session::{Answer, Request, RouterSession, READ_ONLY, ROUTER_ERROR};
use crate::protocol::status;
use std::time::{Duration, Instant};

impl RouterSession {
    /// The open connection to partition `p`'s leader (as far as known), opened if needed; one
    /// whose replica closed it while idle (a restarted or killed node) is opened again, unless
    /// it held the open transaction (its home or a branch): that transaction is gone, and a new
    /// connection would run what follows outside it.
    pub(super) async fn backend(&mut self, p: usize) -> Result<&mut Backend, BackendError> {
        if self.backends[p].as_mut().is_some_and(|b| b.is_closed()) {
            self.backends[p] = None;
        }
        if self.backends[p].is_none() && (self.pinned == Some(p) || self.branches.contains(&p)) {
            let part = &self.shared.partitions[p];
            return Err(BackendError::Protocol {
                addr: part.replicas[part.leader_hint()],
                message: "the connection holding the open transaction was lost".into(),
            });
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
    pub(super) async fn open_backend(&self, p: usize, at: usize) -> Result<Backend, BackendError> {
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
    pub(super) async fn send(&mut self, p: usize, req: Request<'_>, kind: Kind) -> Answer {
        let write = matches!(kind, Kind::Write | Kind::Final);
        if self.pinned.is_some_and(|q| q != p) {
            return match kind {
                // Rows of another partition than the transaction's home: in its XA branch.
                Kind::Read | Kind::Write => self.send_in_branch(p, req).await,
                // A session statement (SET, USE) for another open connection: no branch.
                Kind::Plain | Kind::Final => self.send_outside(p, req).await,
            };
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
                Err(SendError::NotSent(_, false)) => !in_txn,
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
            if in_txn && self.gtrid.is_some() {
                // The home's transaction ended by an error: so did the distributed one.
                let ended = match &outcome {
                    Ok(Reply::Err(e, _)) => matches!(e.code, 1213 | 1205 | READ_ONLY | 1180 | 1053),
                    // A reply that says the home's transaction is over (it ended by itself).
                    Ok(reply) => reply.status() & status::SERVER_STATUS_IN_TRANS == 0,
                    Err(_) => true,
                };
                if ended {
                    self.abort_all().await;
                    if let Ok(reply) = &outcome {
                        if !matches!(reply, Reply::Err(..)) {
                            return Answer::Error(
                                ROUTER_ERROR,
                                "HY000",
                                format!("partition {p} ended the transaction's home unexpectedly; the transaction is rolled back"),
                            );
                        }
                    }
                }
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
    pub(super) async fn send_once(&mut self, p: usize, req: Request<'_>, opens: bool) -> Result<Reply, SendError> {
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
}

/// What a statement sent to a partition is, for when it may be sent again and whether it
/// opens a held transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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

pub(super) enum SendError {
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

impl SendError {
    /// The reason, as a client reads it.
    pub(super) fn message(&self) -> String {
        match self {
            SendError::Refused(m) => format!("login refused ({m})"),
            SendError::NotSent(m, _) => format!("no leader reached ({m})"),
            SendError::Lost(m) => format!("connection lost ({m})"),
            SendError::Failed(m) => format!("the reply could not be relayed ({m})"),
        }
    }

    /// Nothing reached a replica: sending again is safe.
    pub(super) fn not_sent(&self) -> bool {
        matches!(self, SendError::NotSent(..))
    }
}
