//! A server that is one replica of a replicated partition (`riptide serve --node-id`): its
//! engine's writes go through the partition's Raft group (`riptide_cluster::PartitionNode`),
//! its SQL catalog follows the applied log, and statements are gated by Raft's read index.
//!
//! Invariants:
//! - A statement that reads or writes tables (SELECT ... FROM, INSERT, UPDATE, DELETE) runs
//!   only after [`before_statement`]: on the leader, a read index confirmed by a majority and
//!   applied here, so what it reads includes every write acknowledged before it began
//!   (linearizable); on a follower it is refused with MySQL's read-only error 1290, naming the
//!   leader, unless `--follower-reads` lets a plain SELECT read the follower's applied state (a
//!   consistent prefix of the log, possibly stale).
//! - The catalog is read again whenever applied entries change its sub-table, on its own
//!   thread: the apply listener only sends a signal, so an apply never waits for the DDL lock
//!   that a DDL statement on the leader holds while its write is being replicated.
//! - A replica that becomes leader raises its AUTO_INCREMENT counters to the largest stored
//!   values (`watch_leadership`, on the catalog thread): rows applied from the log did not move
//!   them. Until it has, an INSERT that generates a value may meet a duplicate key (1062),
//!   never overwrite a row.

use super::ServerError;
use crate::server::ClusterSetup;
use crate::sql::catalog::{Catalog, CATALOG_TABLE};
use crate::sql::error::SqlError;
use riptide_cluster::PartitionNode;
use sqlparser::ast::{SetExpr, Statement};
use std::fmt::Write as _;
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What the catalog thread is asked to do.
enum CatalogWork {
    /// Applied entries changed the catalog's records.
    Reload,
    /// This replica became the leader.
    RefreshAutoIncrements,
}

/// Starts the Raft node over `db`, forms the group if asked, and opens the catalog.
pub(super) async fn start(db: riptide::Db, setup: &ClusterSetup) -> Result<(Arc<Catalog>, Arc<PartitionNode>), ServerError> {
    let (work, pending) = mpsc::channel::<CatalogWork>();
    let signal = parking_lot::Mutex::new(work.clone());
    let listener: riptide_cluster::state_machine::ApplyListener = Arc::new(move |tables: &[String]| {
        if tables.iter().any(|t| t == CATALOG_TABLE) {
            let _ = signal.lock().send(CatalogWork::Reload);
        }
    });
    let node = Arc::new(PartitionNode::start(&db, setup.node.clone(), Some(listener)).await?);
    if let Some(members) = &setup.bootstrap {
        if node.bootstrap(members.clone()).await? {
            tracing::info!("formed the group with {} members", members.len());
        }
    }
    let catalog = Arc::new(tokio::task::block_in_place(|| Catalog::open(db))?);
    spawn_catalog_thread(Arc::downgrade(&catalog), pending)?;
    tokio::spawn(watch_leadership(node.clone(), work));
    Ok((catalog, node))
}

/// The thread that reloads the catalog; it ends with the catalog.
fn spawn_catalog_thread(catalog: Weak<Catalog>, pending: mpsc::Receiver<CatalogWork>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("catalog-follow".into())
        .spawn(move || loop {
            let first = match pending.recv_timeout(Duration::from_millis(500)) {
                Ok(w) => Some(w),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let Some(catalog) = catalog.upgrade() else { return };
            let Some(first) = first else { continue };
            let (mut reload, mut refresh) = (false, false);
            for w in std::iter::once(first).chain(pending.try_iter()) {
                match w {
                    CatalogWork::Reload => reload = true,
                    CatalogWork::RefreshAutoIncrements => refresh = true,
                }
            }
            if reload {
                if let Err(e) = catalog.reload() {
                    tracing::error!("reloading the catalog after an apply failed: {e}");
                }
            }
            if refresh {
                if let Err(e) = catalog.refresh_auto_increments() {
                    tracing::error!("raising AUTO_INCREMENT counters after an election failed: {e}");
                }
            }
        })
        .map(|_| ())
}

/// Asks for fresh AUTO_INCREMENT counters each time this node becomes the leader.
async fn watch_leadership(node: Arc<PartitionNode>, work: mpsc::Sender<CatalogWork>) {
    let mut metrics = node.raft().metrics();
    let mut leading = false;
    loop {
        let now = metrics.borrow_and_update().current_leader == Some(node.id());
        if now && !leading && work.send(CatalogWork::RefreshAutoIncrements).is_err() {
            return;
        }
        leading = now;
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Creates `names` once this replica leads (or sees them created by the leader it follows).
pub(super) fn create_databases(catalog: &Arc<Catalog>, node: &Arc<PartitionNode>, names: Vec<String>) {
    if names.is_empty() {
        return;
    }
    let (catalog, node) = (catalog.clone(), node.clone());
    tokio::spawn(async move {
        loop {
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !catalog.state().databases.contains(*n))
                .collect();
            if missing.is_empty() {
                return;
            }
            if node.is_leader() {
                for name in missing {
                    let result = tokio::task::block_in_place(|| {
                        let _ddl = catalog.lock_ddl();
                        catalog.create_database(name, true)
                    });
                    if let Err(e) = result {
                        tracing::warn!("creating database {name} failed (will retry): {e}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Gates a statement on a replica (see the module header).
pub(crate) async fn before_statement(node: &PartitionNode, follower_reads: bool, stmt: &Statement) -> Result<(), SqlError> {
    let reads_tables = match stmt {
        // `SELECT 1`, `SELECT @@version_comment`: no table, no gate (clients send these at
        // connect, to followers too).
        Statement::Query(q) if matches!(&*q.body, SetExpr::Select(s) if s.from.is_empty()) => false,
        Statement::Query(q) => {
            if follower_reads && q.locks.is_empty() && !node.is_leader() {
                return Ok(());
            }
            true
        }
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => true,
        _ => false,
    };
    if !reads_tables {
        return Ok(());
    }
    node.read_barrier().await.map_err(SqlError::from_engine)
}

/// Appends the node's Raft figures to the Prometheus text.
pub(super) fn render_metrics(out: &mut String, node: &PartitionNode) {
    let m = node.metrics();
    let id = m.id;
    let g = |out: &mut String, name: &str, help: &str, v: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{node=\"{id}\"}} {v}");
    };
    g(out, "riptide_raft_term", "current Raft term", m.current_term);
    g(out, "riptide_raft_leader", "the leader this node knows (0: none)", m.current_leader.unwrap_or(0));
    g(out, "riptide_raft_is_leader", "1 while this node leads", u64::from(m.current_leader == Some(id)));
    g(out, "riptide_raft_last_log_index", "last index in this node's log", m.last_log_index.unwrap_or(0));
    g(out, "riptide_raft_applied_index", "last index applied to the engine", m.last_applied.map_or(0, |l| l.index));
    g(out, "riptide_raft_purged_index", "last index purged from the log", m.purged.map_or(0, |l| l.index));
    if let Some(replication) = &m.replication {
        let last = m.last_log_index.unwrap_or(0);
        let _ = writeln!(
            out,
            "# HELP riptide_raft_replication_lag entries the leader has that a follower has not\n# TYPE riptide_raft_replication_lag gauge"
        );
        for (follower, matched) in replication {
            let lag = last.saturating_sub(matched.map_or(0, |l| l.index));
            let _ = writeln!(out, "riptide_raft_replication_lag{{node=\"{id}\",follower=\"{follower}\"}} {lag}");
        }
    }
    let t = node.transport().stats();
    let c = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# TYPE riptide_raft_peer_connections_total counter\nriptide_raft_peer_connections_total{{node=\"{id}\",outcome=\"accepted\"}} {}\nriptide_raft_peer_connections_total{{node=\"{id}\",outcome=\"refused\"}} {}\nriptide_raft_peer_connections_total{{node=\"{id}\",outcome=\"malformed\"}} {}",
        c(&t.accepted),
        c(&t.refused),
        c(&t.malformed)
    );
}
