//! The resolver of cross-partition transactions (every router runs one, `super::twophase`
//! describes the protocol): it finishes the router branches that a coordinator left prepared,
//! by the decision row of their home partition, recording an abort first when there is none,
//! and deletes the commit rows of transactions whose branches all committed. It also creates
//! the decision tables.
//!
//! Invariants:
//! - A branch is finished only once it has stayed prepared longer than
//!   `RouterConfig::xa_resolve_after` and its router is not coordinating it; its outcome is
//!   the home's decision row, and an abort row is inserted only where no row exists (the
//!   insert waits for a live coordinator's guard row and fails with 1062 behind its decision).
//! - It reads and writes through connections of its own to each partition's leader; a
//!   partition it cannot reach is tried again on the next round.
//! - Abort rows and guard rows are never deleted here; a commit row only once its coordinator
//!   committed every branch.

use super::backend::{Backend, Reply};
use super::merge::text_values;
use super::session::READ_ONLY;
use super::twophase::{DECISIONS, FORMAT_ID};
use super::RouterShared;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CREATE_DB: &str = "CREATE DATABASE IF NOT EXISTS riptide_xa";
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS riptide_xa.decisions \
     (gtrid VARCHAR(96) NOT NULL PRIMARY KEY, outcome CHAR(1) NOT NULL)";

/// Creates the decision table on every partition (once per router process).
pub(super) async fn ensure_decision_tables(shared: &Arc<RouterShared>) -> Result<(), String> {
    shared
        .decision_tables
        .get_or_try_init(|| async {
            for p in 0..shared.partitions.len() {
                let mut conn = leader_connection(shared, p).await?;
                for sql in [CREATE_DB, CREATE_TABLE] {
                    match conn.query(sql).await {
                        Ok(Reply::Ok(_)) => {}
                        Ok(Reply::Err(e, _)) => return Err(format!("partition {p}: {sql}: {}", e.message)),
                        Ok(Reply::Rows(_)) => {}
                        Err(e) => return Err(format!("partition {p}: {e}")),
                    }
                }
            }
            Ok(())
        })
        .await
        .map(|_| ())
}

/// A connection of the router's own to partition `p`'s leader (found by asking each replica
/// in turn until one answers a gated statement), within the leader wait.
async fn leader_connection(shared: &RouterShared, p: usize) -> Result<Backend, String> {
    let part = &shared.partitions[p];
    let (user, password) = shared.config.users.first().cloned().unwrap_or_default();
    let deadline = Instant::now() + shared.config.leader_wait;
    let mut at = part.leader_hint();
    loop {
        let addr = part.replicas[at];
        let why = match Backend::connect(addr, &user, &password, None, false, shared.config.backend_timeout).await {
            Ok(mut b) => match b.query("XA RECOVER").await {
                Ok(Reply::Err(e, _)) if e.code == READ_ONLY => format!("{addr} does not lead"),
                Ok(_) => {
                    b.replica = at;
                    return Ok(b);
                }
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(format!("partition {p}: no leader reached ({why})"));
        }
        part.not_leader(at);
        at = (at + 1) % part.replicas.len();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The resolver: every `every`, finishes the router branches that stayed prepared longer than
/// the configured time, on every partition (see the module header). Runs until `stop`.
pub(super) async fn resolve_loop(shared: Arc<RouterShared>, every: Duration) {
    let mut stop = shared.stop.subscribe();
    let mut seen: HashMap<(usize, String, String), Instant> = HashMap::new();
    let mut conns: Vec<Option<Backend>> = (0..shared.partitions.len()).map(|_| None).collect();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        forget_decisions(&shared, &mut conns).await;
        let mut live = Vec::new();
        for p in 0..shared.partitions.len() {
            match prepared_branches(&shared, &mut conns, p).await {
                Ok(branches) => {
                    for (gtrid, bqual) in branches {
                        let key = (p, gtrid, bqual);
                        let first = *seen.entry(key.clone()).or_insert_with(Instant::now);
                        // A transaction this router is still coordinating is not the resolver's.
                        let mine = shared.coordinating.lock().contains(&key.1);
                        if !mine && first.elapsed() >= shared.config.xa_resolve_after {
                            if let Err(m) = resolve(&shared, &mut conns, p, &key.1, &key.2).await {
                                tracing::warn!("resolving {}: {m}", key.1);
                            }
                        }
                        live.push(key);
                    }
                }
                Err(m) => {
                    conns[p] = None;
                    tracing::debug!("XA RECOVER on partition {p}: {m}");
                    // Keep what was seen there: its clock goes on.
                    live.extend(seen.keys().filter(|k| k.0 == p).cloned());
                }
            }
        }
        seen.retain(|k, _| live.contains(k));
    }
}

/// Most decision rows deleted by one statement.
const FORGET_BATCH: usize = 256;
/// Most finished transactions whose decision rows wait for deletion (beyond it the oldest are
/// left in place: a few bytes each).
const FORGET_BACKLOG: usize = 100_000;

/// Deletes the decision rows of transactions whose branches all committed, in batches per home
/// partition; rows whose deletion failed are tried again next time.
async fn forget_decisions(shared: &RouterShared, conns: &mut [Option<Backend>]) {
    let finished = std::mem::take(&mut *shared.finished.lock());
    if finished.is_empty() {
        return;
    }
    let mut retry = Vec::new();
    for home in 0..shared.partitions.len() {
        let gtrids: Vec<&String> = finished.iter().filter(|(h, _)| *h == home).map(|(_, g)| g).collect();
        let mut failed = false;
        for chunk in gtrids.chunks(FORGET_BATCH) {
            // After a failure the home's other rows wait for the next round, unasked.
            if !failed {
                let list: Vec<String> = chunk.iter().map(|g| format!("'{g}'")).collect();
                let sql = format!("DELETE FROM {DECISIONS} WHERE gtrid IN ({})", list.join(", "));
                failed = !matches!(query(shared, conns, home, &sql).await, Ok(Reply::Ok(_)));
            }
            if failed {
                retry.extend(chunk.iter().map(|g| (home, (*g).clone())));
            }
        }
    }
    let mut queue = shared.finished.lock();
    queue.extend(retry);
    if queue.len() > FORGET_BACKLOG {
        let excess = queue.len() - FORGET_BACKLOG;
        queue.drain(..excess);
    }
}

/// The router's prepared branches on partition `p`: (gtrid, bqual).
async fn prepared_branches(
    shared: &RouterShared,
    conns: &mut [Option<Backend>],
    p: usize,
) -> Result<Vec<(String, String)>, String> {
    let rows = match query(shared, conns, p, "XA RECOVER").await? {
        Reply::Rows(rs) => rs.rows,
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for r in rows {
        let v = text_values(&r)?;
        let num = |i: usize| v.get(i).cloned().flatten().and_then(|s| s.parse::<usize>().ok());
        let (Some(format), Some(glen), Some(data)) = (num(0), num(1), v.get(3).cloned().flatten()) else {
            continue;
        };
        if format != FORMAT_ID as usize || glen > data.len() || !data.is_char_boundary(glen) {
            continue;
        }
        out.push((data[..glen].to_string(), data[glen..].to_string()));
    }
    Ok(out)
}

/// One statement on the resolver's connection to partition `p`'s leader.
async fn query(shared: &RouterShared, conns: &mut [Option<Backend>], p: usize, sql: &str) -> Result<Reply, String> {
    if conns[p].as_mut().is_none_or(|b| b.is_closed()) {
        conns[p] = Some(leader_connection(shared, p).await?);
    }
    let b = conns[p].as_mut().expect("connected above");
    match b.query(sql).await {
        Ok(Reply::Err(e, _)) if e.code == READ_ONLY => {
            conns[p] = None;
            Err(format!("partition {p}: not the leader"))
        }
        Ok(reply) => Ok(reply),
        Err(e) => {
            conns[p] = None;
            Err(e.to_string())
        }
    }
}

/// Finishes branch (`gtrid`, `bqual`) prepared on partition `p` by its home's decision,
/// recording an abort first when there is none.
async fn resolve(
    shared: &RouterShared,
    conns: &mut [Option<Backend>],
    p: usize,
    gtrid: &str,
    bqual: &str,
) -> Result<(), String> {
    let home: usize = gtrid
        .rsplit_once("-h")
        .and_then(|(_, h)| h.parse().ok())
        .filter(|&h| h < shared.partitions.len())
        .ok_or_else(|| format!("no home partition in {gtrid:?}"))?;
    if gtrid.contains('\'') || bqual.contains('\'') {
        return Err("a quote in a router xid".into());
    }
    let read = format!("SELECT outcome FROM {DECISIONS} WHERE gtrid = '{gtrid}'");
    let mut outcome = decision(query(shared, conns, home, &read).await?)?;
    if outcome.is_none() {
        let abort = format!("INSERT INTO {DECISIONS} (gtrid, outcome) VALUES ('{gtrid}', 'A')");
        match query(shared, conns, home, &abort).await? {
            Reply::Ok(_) => outcome = Some("A".into()),
            Reply::Err(e, _) if e.code == 1062 => outcome = decision(query(shared, conns, home, &read).await?)?,
            Reply::Err(e, _) => return Err(e.message),
            Reply::Rows(_) => return Err("rows for an INSERT".into()),
        }
    }
    let verb = match outcome.as_deref() {
        Some("C") => "COMMIT",
        Some("A") => "ROLLBACK",
        // A guard row committed without its decision: the home committed outside the
        // protocol. Nothing can make that whole; the branch is not applied.
        Some("P") => {
            tracing::error!("{gtrid}: its home committed without a decision; rolling back its branch on partition {p}");
            "ROLLBACK"
        }
        other => return Err(format!("decision {other:?}")),
    };
    let finish = format!("XA {verb} '{gtrid}','{bqual}',{FORMAT_ID}");
    match query(shared, conns, p, &finish).await? {
        Reply::Ok(_) => Ok(()),
        Reply::Err(e, _) if e.code == 1397 => Ok(()), // finished meanwhile
        Reply::Err(e, _) => Err(e.message),
        Reply::Rows(_) => Err("rows for XA".into()),
    }
}

/// The outcome a decision read found, if any.
fn decision(reply: Reply) -> Result<Option<String>, String> {
    match reply {
        Reply::Rows(rs) => Ok(rs
            .rows
            .first()
            .map(|r| text_values(r))
            .transpose()?
            .and_then(|v| v.into_iter().next().flatten())),
        Reply::Err(e, _) if e.code == 1146 || e.code == 1049 => Ok(None),
        Reply::Err(e, _) => Err(e.message),
        Reply::Ok(_) => Ok(None),
    }
}
