//! Cross-partition transactions: the router as the coordinator of a two-phase commit over the
//! partitions' XA branches (`docs/cluster.md`, "Cross-partition transactions").
//!
//! A transaction's first partition is its *home*: it runs there as a plain transaction (BEGIN
//! as before). Before its first statement on another partition, the home transaction inserts
//! its guard row `riptide_xa.decisions(gtrid, 'P')`; the statement then opens an XA branch
//! there (`XA START 'gtrid','<partition>'`) on the session's connection to that partition. At
//! COMMIT with branches open:
//! 1. every branch is ended and prepared (`XA END`, `XA PREPARE`): its writes are durable on
//!    its partition's replicas and its rows locked, across failovers;
//! 2. the home transaction turns its guard row into the decision, `'P'` → `'C'` (exactly one
//!    row must change: if the home transaction was lost, its guard row went with it and nothing
//!    commits), and commits: that commit is the transaction's commit point;
//! 3. every branch is committed by its xid (`XA COMMIT`); the decision row is deleted later, in
//!    batches, by the router's resolver task.
//!
//! The branches of one transaction are prepared at once, and committed at once, each on its
//! own connection.
//!
//! Invariants:
//! - A branch is opened only on a partition that can prepare (`@@riptide_xa_prepare`, asked on
//!   a connection of the router's own); elsewhere the statement is refused (1235) and the
//!   transaction goes on.
//! - A home or branch connection that is lost is never silently reopened: the transaction is
//!   rolled back. Branches exist only while the home transaction is open (`pinned`).
//! - Until the home commit, any failure rolls the whole transaction back (home and branches)
//!   and the client is told so; after it, the transaction is committed, and a branch not yet
//!   committed is left prepared for the resolver.
//! - The resolver (`super::resolver`, every router runs one) finishes a branch that stays
//!   prepared longer than `RouterConfig::xa_resolve_after`: by the decision row of its
//!   home, or, when there is none, by inserting `'A'` (abort) under the same key first. The
//!   row's primary key serializes that insert with the coordinator's guard row (the insert
//!   waits for the home transaction's row lock): whichever commits first decides, and the
//!   loser sees the other's row (1062). Abort rows are never deleted (a coordinator delayed
//!   past the resolver must still find one); commit rows are deleted by the resolver task once
//!   their coordinator committed every branch.
//! - A gtrid names its router process and home partition: `rtx-<router nonce>-<n>-h<home>`.
//!   A router's resolver leaves alone the transactions the router itself is still
//!   coordinating.

use super::backend::{Backend, Reply};
use super::merge::text_values;
use super::session::{refuse, Answer, Request, RouterSession, READ_ONLY, ROUTER_ERROR};
use crate::protocol::status;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The XA format id of the router's branches ("RT").
pub(super) const FORMAT_ID: i32 = 0x5254;
/// Where each partition keeps the decisions of the transactions it is home to.
pub(super) const DECISIONS: &str = "riptide_xa.decisions";
/// What a partition can do, as a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prepares {
    Unknown = 0,
    Yes = 1,
    No = 2,
}

/// Errors after which the participant has rolled its transaction back.
fn rolled_back(code: u16) -> bool {
    matches!(code, 1213 | 1205 | READ_ONLY | 1180 | 1053 | ROUTER_ERROR)
}

fn xid(gtrid: &str, p: usize) -> String {
    format!("'{gtrid}','{p}',{FORMAT_ID}")
}

impl RouterSession {
    /// Sends a statement of the open transaction to partition `p`, which is not its home: in
    /// `p`'s branch, opened first if needed.
    pub(super) async fn send_in_branch(&mut self, p: usize, req: Request<'_>) -> Answer {
        if !self.branches.contains(&p) {
            if let Err(answer) = self.open_branch(p).await {
                return answer;
            }
        }
        // (A lost branch connection is not reopened: `backend` refuses, and the send fails.)
        match self.send_once(p, req, false).await {
            Ok(reply) => {
                if let Reply::Err(e, _) = &reply {
                    if rolled_back(e.code) {
                        // The branch is gone: so is the transaction.
                        self.abort_all().await;
                    }
                } else if reply.status() & status::SERVER_STATUS_IN_TRANS == 0 {
                    self.abort_all().await;
                    return Answer::Error(
                        ROUTER_ERROR,
                        "HY000",
                        format!("partition {p} ended its branch of the transaction; the transaction is rolled back"),
                    );
                }
                Answer::Reply(reply)
            }
            Err(e) => {
                self.backends[p] = None;
                self.abort_all().await;
                Answer::Error(
                    ROUTER_ERROR,
                    "HY000",
                    format!("partition {p}: {}; the transaction is rolled back", e.message()),
                )
            }
        }
    }

    /// A branch's connection is gone: the transaction is rolled back.
    async fn branch_lost(&mut self, p: usize) -> Answer {
        self.backends[p] = None;
        self.abort_all().await;
        Answer::Error(
            ROUTER_ERROR,
            "HY000",
            format!("partition {p}: the connection holding the transaction's branch was lost; the transaction is rolled back"),
        )
    }

    /// Sends a session statement (SET, USE: no rows) to partition `p`, which is not the open
    /// transaction's home, on its connection as it is: no branch is opened for it.
    pub(super) async fn send_outside(&mut self, p: usize, req: Request<'_>) -> Answer {
        if self.branches.contains(&p) && self.backends[p].as_mut().is_none_or(|b| b.is_closed()) {
            return self.branch_lost(p).await;
        }
        match self.send_once(p, req, false).await {
            Ok(reply) => Answer::Reply(reply),
            Err(e) => {
                if self.branches.contains(&p) {
                    return self.branch_lost(p).await;
                }
                self.backends[p] = None;
                Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {}", e.message()))
            }
        }
    }

    /// Whether every partition of `targets` but the home can be a participant (asked once per
    /// partition and router); a refusal to send if not.
    pub(super) async fn check_participants(&mut self, targets: impl Iterator<Item = usize>) -> Result<(), Answer> {
        for p in targets {
            if Some(p) != self.pinned && !self.branches.contains(&p) && !self.can_prepare(p).await? {
                return Err(refuse(format!(
                    "a transaction over several partitions where partition {p} is a single server \
                     (cross-partition transactions need replicated partitions)"
                )));
            }
        }
        Ok(())
    }

    /// Whether partition `p` can prepare XA branches, asked on a connection of the router's
    /// own (autocommit on, no session state: a SELECT on the session's connection would open a
    /// transaction there with autocommit off); any replica answers (no table).
    async fn can_prepare(&mut self, p: usize) -> Result<bool, Answer> {
        let part = &self.shared.partitions[p];
        match part.prepares.load(Ordering::Relaxed) {
            x if x == Prepares::Yes as u8 => return Ok(true),
            x if x == Prepares::No as u8 => return Ok(false),
            _ => {}
        }
        let (user, password) = self.shared.config.users.first().cloned().unwrap_or_default();
        let timeout = self.shared.config.backend_timeout;
        let mut asked = Err("no replica".to_string());
        for k in 0..part.replicas.len() {
            let addr = part.replicas[(part.leader_hint() + k) % part.replicas.len()];
            asked = match Backend::connect(addr, &user, &password, None, false, timeout).await {
                Ok(mut b) => b.query("SELECT @@riptide_xa_prepare").await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if asked.is_ok() {
                break;
            }
        }
        let flag = match asked {
            Ok(Reply::Rows(rs)) => {
                let v = rs
                    .rows
                    .first()
                    .and_then(|r| text_values(r).ok())
                    .and_then(|v| v.into_iter().next().flatten());
                if v.as_deref() == Some("1") {
                    Prepares::Yes
                } else {
                    Prepares::No
                }
            }
            // A server that does not know the variable cannot prepare.
            Ok(Reply::Err(e, _)) if e.code == 1193 => Prepares::No,
            Ok(Reply::Err(e, _)) => {
                return Err(Answer::Error(
                    ROUTER_ERROR,
                    "HY000",
                    format!("partition {p}: {}", e.message),
                ))
            }
            Ok(Reply::Ok(_)) => Prepares::No,
            Err(m) => return Err(Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {m}"))),
        };
        self.shared.partitions[p].prepares.store(flag as u8, Ordering::Relaxed);
        Ok(flag == Prepares::Yes)
    }

    /// Opens the transaction's branch on partition `p`: the decision tables made sure of and,
    /// for the first branch, the guard row written in the home transaction first.
    async fn open_branch(&mut self, p: usize) -> Result<(), Answer> {
        self.check_participants(std::iter::once(p)).await?;
        super::resolver::ensure_decision_tables(&self.shared)
            .await
            .map_err(|m| Answer::Error(ROUTER_ERROR, "HY000", format!("cross-partition transactions: {m}")))?;
        let Some(home) = self.pinned else {
            return Err(Answer::Error(
                ROUTER_ERROR,
                "HY000",
                "no home transaction is open".into(),
            ));
        };
        let gtrid = match &self.gtrid {
            Some(g) => g.clone(),
            None => {
                let n = self.shared.next_gtrid.fetch_add(1, Ordering::Relaxed);
                let g = format!("rtx-{:016x}-{n}-h{home}", self.shared.nonce);
                let guard = format!("INSERT INTO {DECISIONS} (gtrid, outcome) VALUES ('{g}', 'P')");
                // (Boxed: `send` reaches this function for a statement on another partition.)
                match Box::pin(self.send(home, Request::Query(&guard), super::send::Kind::Write)).await {
                    Answer::Reply(Reply::Ok(_)) => {}
                    other => return Err(other),
                }
                self.shared.coordinating.lock().insert(g.clone());
                self.gtrid = Some(g.clone());
                g
            }
        };
        // Nothing of the transaction is on `p` yet: a refusal by a follower is tried elsewhere.
        let deadline = Instant::now() + self.shared.config.leader_wait;
        loop {
            let start = format!("XA START {}", xid(&gtrid, p));
            match self.send_once(p, Request::Query(&start), false).await {
                Ok(Reply::Ok(_)) => {
                    self.branches.push(p);
                    return Ok(());
                }
                Ok(Reply::Err(e, _)) if e.code == READ_ONLY && Instant::now() < deadline => {
                    if let Some(b) = &self.backends[p] {
                        self.shared.partitions[p].not_leader(b.replica);
                    }
                    self.backends[p] = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(reply) => return Err(Answer::Reply(reply)),
                Err(e) if Instant::now() < deadline && e.not_sent() => {
                    self.backends[p] = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => {
                    self.backends[p] = None;
                    return Err(Answer::Error(
                        ROUTER_ERROR,
                        "HY000",
                        format!("partition {p}: {}", e.message()),
                    ));
                }
            }
        }
    }

    /// Runs `statements(p)`, in order, on the connection of each branch `p` of `branches`, all
    /// branches at once; the first failure, if any (the connections that failed are dropped,
    /// the others come back to the session).
    async fn on_branches(
        &mut self,
        branches: &[usize],
        tolerated: &[u16],
        statements: impl Fn(usize) -> Vec<String>,
    ) -> Result<(), (u16, String)> {
        let mut first_err = None;
        let mut running = tokio::task::JoinSet::new();
        for &p in branches {
            match self.backends[p].take().and_then(|mut b| (!b.is_closed()).then_some(b)) {
                Some(mut b) => {
                    let sqls = statements(p);
                    running.spawn(async move {
                        let mut result = Ok(());
                        for sql in &sqls {
                            result = branch_query(&mut b, p, sql).await;
                            if result.is_err() {
                                break;
                            }
                        }
                        (p, b, result)
                    });
                }
                _ => {
                    first_err.get_or_insert((ROUTER_ERROR, format!("partition {p}: the branch's connection is gone")));
                }
            }
        }
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok((p, b, Ok(()))) => self.backends[p] = Some(b),
                Ok((p, b, Err((code, _, false)))) if tolerated.contains(&code) => self.backends[p] = Some(b),
                Ok((p, b, Err((code, message, lost)))) => {
                    if !lost {
                        self.backends[p] = Some(b);
                    }
                    first_err.get_or_insert((code, message));
                }
                Err(e) => {
                    first_err.get_or_insert((ROUTER_ERROR, format!("a branch's task failed: {e}")));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Forgets the open transaction's gtrid (it is no longer this router's to coordinate).
    fn take_gtrid(&mut self) -> Option<String> {
        let g = self.gtrid.take()?;
        self.shared.coordinating.lock().remove(&g);
        Some(g)
    }

    /// One statement on a branch's connection; `Err` with the reason unless it answered OK.
    async fn on_branch(&mut self, p: usize, sql: &str) -> Result<(), (u16, String)> {
        if self.backends[p].as_mut().is_none_or(|b| b.is_closed()) {
            return Err((ROUTER_ERROR, format!("partition {p}: the branch's connection is gone")));
        }
        let backend = self.backends[p].as_mut().expect("checked above");
        match backend.query(sql).await {
            Ok(Reply::Ok(_)) => Ok(()),
            Ok(Reply::Err(e, _)) => Err((e.code, format!("partition {p}: {}", e.message))),
            Ok(Reply::Rows(_)) => Err((ROUTER_ERROR, format!("partition {p}: rows for {sql}"))),
            Err(e) => {
                self.backends[p] = None;
                Err((ROUTER_ERROR, format!("partition {p}: {e}")))
            }
        }
    }

    /// Rolls back the home transaction and every branch (best effort: a branch that cannot
    /// be reached is rolled back by its partition when the connection goes, or, prepared, by
    /// the resolver), and forgets them.
    pub(super) async fn abort_all(&mut self) {
        let gtrid = self.take_gtrid();
        let branches = std::mem::take(&mut self.branches);
        if let Some(g) = gtrid {
            for p in branches {
                let x = xid(&g, p);
                let _ = self.on_branch(p, &format!("XA END {x}")).await;
                if self.on_branch(p, &format!("XA ROLLBACK {x}")).await.is_err() {
                    // The branch's state there is not known: a new connection starts clean.
                    self.backends[p] = None;
                }
            }
        }
        if let Some(home) = self.pinned.take() {
            if let Some(b) = self.backends[home].as_mut() {
                if !matches!(b.query("ROLLBACK").await, Ok(Reply::Ok(_))) {
                    self.backends[home] = None;
                }
            }
        }
        self.pending_begin = None;
    }

    /// ROLLBACK of a transaction with branches.
    pub(super) async fn rollback_distributed(&mut self) -> Answer {
        self.abort_all().await;
        Answer::Ok
    }

    /// COMMIT of a transaction with branches (see the module header).
    pub(super) async fn commit_distributed(&mut self) -> Answer {
        let (Some(home), Some(gtrid)) = (self.pinned, self.gtrid.clone()) else {
            return Answer::Error(ROUTER_ERROR, "HY000", "no distributed transaction is open".into());
        };
        // 1. Prepare every branch, all at once.
        let branches = self.branches.clone();
        let prepared = self
            .on_branches(&branches, &[], |p| {
                let x = xid(&gtrid, p);
                vec![format!("XA END {x}"), format!("XA PREPARE {x}")]
            })
            .await;
        if let Err((code, message)) = prepared {
            self.abort_all().await;
            return failed(code, format!("a participant did not prepare ({message})"));
        }
        crash_point("after-prepare");
        // 2. The decision, committed with the home transaction: the commit point. Its guard
        // row must still be there (one row changed), or the home transaction was lost.
        let decide = format!("UPDATE {DECISIONS} SET outcome = 'C' WHERE gtrid = '{gtrid}' AND outcome = 'P'");
        let decided = self.send(home, Request::Query(&decide), super::send::Kind::Write).await;
        let changed = match &decided {
            Answer::Reply(Reply::Ok(p)) => super::backend::ok_counts(p).map(|(affected, _)| affected),
            _ => None,
        };
        if changed != Some(1) {
            self.abort_all().await;
            return match decided {
                Answer::Reply(Reply::Ok(_)) => {
                    failed(ROUTER_ERROR, "the home transaction was lost before its commit".into())
                }
                Answer::Reply(Reply::Err(e, _)) => failed(e.code, e.message),
                Answer::Error(code, _, m) => failed(code, m),
                _ => failed(ROUTER_ERROR, "the decision was not recorded".into()),
            };
        }
        // The branches are out of `send`'s reach while the COMMIT goes: an unknown outcome must
        // leave them prepared for the resolver, not roll them back.
        // (The gtrid too: the COMMIT's reply ends the home transaction, which `send` would
        // otherwise take for an accident. It stays in `coordinating` meanwhile.)
        let prepared = std::mem::take(&mut self.branches);
        let held = self.gtrid.take();
        let committed = self
            .send(home, Request::Query("COMMIT"), super::send::Kind::Final)
            .await;
        self.gtrid = held;
        match &committed {
            Answer::Reply(Reply::Ok(_)) => {}
            Answer::Reply(Reply::Err(e, _)) if matches!(e.code, 1213 | 1205 | READ_ONLY) => {
                // Not committed (the home rolled back): the branches go too.
                let (code, message) = (e.code, e.message.clone());
                self.branches = prepared;
                self.pinned = Some(home);
                self.abort_all().await;
                return failed(code, message);
            }
            _ => {
                // Outcome unknown: the branches stay prepared; the resolver reads the decision.
                self.take_gtrid();
                self.pinned = None;
                return committed;
            }
        }
        crash_point("after-commit");
        // 3. Finish the branches, all at once; one left prepared is finished by the resolver,
        // which also deletes the decision row once every branch committed.
        // (1397: the branch is no longer prepared there, so a resolver committed it already.)
        let finished = self
            .on_branches(&prepared, &[1397], |p| vec![format!("XA COMMIT {}", xid(&gtrid, p))])
            .await;
        self.take_gtrid();
        match finished {
            Ok(()) => self.shared.finished.lock().push((home, gtrid)),
            Err((_, m)) => tracing::warn!("{gtrid}: {m}; the resolver will commit it"),
        }
        committed
    }
}

/// One statement on a branch's connection `b` (of partition `p`); `Err` with the reason unless
/// it answered OK, and whether the connection was lost.
async fn branch_query(b: &mut Backend, p: usize, sql: &str) -> Result<(), (u16, String, bool)> {
    match b.query(sql).await {
        Ok(Reply::Ok(_)) => Ok(()),
        Ok(Reply::Err(e, _)) => Err((e.code, format!("partition {p}: {}", e.message), false)),
        Ok(Reply::Rows(_)) => Err((ROUTER_ERROR, format!("partition {p}: rows for {sql}"), false)),
        Err(e) => Err((ROUTER_ERROR, format!("partition {p}: {e}"), true)),
    }
}

/// The error a client hears when the transaction did not commit.
fn failed(code: u16, message: String) -> Answer {
    let code = if matches!(code, 1213 | 1205) {
        code
    } else {
        ROUTER_ERROR
    };
    let state = if code == 1213 { "40001" } else { "HY000" };
    Answer::Error(code, state, format!("{message}; the transaction is rolled back"))
}

/// A test hook: `RIPTIDE_ROUTER_CRASH_AT=<point>` ends the router process at that point of a
/// cross-partition commit (`after-prepare`, `after-commit`), as a crash would.
fn crash_point(point: &str) {
    if std::env::var("RIPTIDE_ROUTER_CRASH_AT").is_ok_and(|v| v == point) {
        std::process::abort();
    }
}
