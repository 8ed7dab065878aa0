//! A server that is one replica of a replicated partition (`riptide serve --node-id`): its
//! engine's writes go through the partition's Raft group (`riptide_cluster::PartitionNode`),
//! its SQL catalog follows the applied log, and statements are gated by Raft's read index.
//!
//! Invariants:
//! - A statement that reads or writes tables (SELECT ... FROM, INSERT, UPDATE, DELETE) runs
//!   only after [`Replica::before_statement`]: on the leader, a read index confirmed by a
//!   majority and applied here, so what it reads includes every write acknowledged before it
//!   began (linearizable); on a follower it is refused with MySQL's read-only error 1290,
//!   naming the leader, unless `--follower-reads` lets a plain SELECT read the follower's
//!   applied state (a consistent prefix of the log, possibly stale).
//! - Except inside a snapshot-isolation transaction whose snapshot was taken in the current
//!   term, after a read barrier confirmed it (the barrier of the statement that opened it, or
//!   for a BEGIN on a leader that has confirmed this term, an earlier one): there the leader
//!   runs those statements without a barrier of their own, and the next statement that may
//!   commit the transaction (COMMIT, BEGIN, DDL, SET: anything but ROLLBACK and those
//!   statements) runs a barrier first and fails, rolling the transaction back, unless that
//!   barrier confirms the same term. A confirmed term means no other node led meanwhile, so
//!   every write acknowledged meanwhile was this node's and applied here before its answer: a
//!   transaction that commits read what a barrier per statement would have let it read. One
//!   that does not commit (its COMMIT fails, ROLLBACK, a closed connection) may have read stale
//!   rows, locking reads included. A plain COMMIT that commits writes takes no barrier: its
//!   write set is fenced to the snapshot's term (below), and committed in that term it proves
//!   the same (no leader of a later term can have acknowledged a write before it was
//!   proposed: the majority that elected that leader would have refused it). A COMMIT that
//!   commits no write confirms the term after it ran and answers only then.
//! - An autocommit INSERT, UPDATE or DELETE runs without a barrier on a leader whose own
//!   barrier already confirmed the current term (every earlier term's entries are then
//!   applied here): what it reads under its row locks holds every write acknowledged in this
//!   term (all this node's, applied before their locks were free), and its write is fenced to
//!   that term (below). One that commits no write (no row matched, a duplicate key) answered
//!   from its reads alone, so it takes a barrier after it ran and answers only if that barrier
//!   confirms the same term.
//! - Every transaction a statement begins is fenced to the term in which its reads were
//!   confirmed (its own barrier's, or the leader's for a skipped autocommit write): its write
//!   set carries the term, and committed in any other term (a leader deposed and elected again
//!   while the statement waited on a lock) it is refused on every replica and the client hears
//!   1290 (not applied). Without the fence such a write could overwrite a write that another
//!   leader acknowledged meanwhile.
//! - A statement that opens a transaction (autocommit off) is gated even when it reads no
//!   table (`SELECT 1`), since it takes the transaction's snapshot.
//! - The catalog is read again whenever applied entries change its sub-table, on its own
//!   thread: the apply listener only counts and signals, so an apply never waits for the DDL
//!   lock that a DDL statement on the leader holds while its write is being replicated.
//! - After the read barrier, a gated statement also waits until the catalog thread has loaded
//!   every catalog change the applied log holds, so it never runs against an older schema
//!   (DDL statements are gated too, and BEGIN, whose snapshot must follow the read index). A
//!   statement that skips its barrier (below) needs no catch-up: in the same term only this
//!   leader's own DDL changes the catalog, and its publish marks the catalog loaded.
//! - A leader raises its AUTO_INCREMENT counters to the largest stored values once per term,
//!   before any statement of that term runs past its read barrier (the stored rows are then
//!   complete): rows applied from the log did not move them.
//! - On the leader, a DDL statement brings the catalog up to the log itself (it holds the DDL
//!   lock the catalog thread would need): its publish marks the catalog loaded.
//! - A gate that fails leaves the statement unrun; the connection rolls its open transaction
//!   back (the error says so).

use super::ServerError;
use crate::server::ClusterSetup;
use crate::sql::catalog::{Catalog, CATALOG_TABLE};
use crate::sql::error::SqlError;
use crate::sql::session::Session;
use riptide_cluster::PartitionNode;
use sqlparser::ast::{SetExpr, Statement};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A replica: its Raft node and what keeps its SQL catalog in step with the applied log.
pub struct Replica {
    /// The Raft node.
    pub node: Arc<PartitionNode>,
    follower_reads: bool,
    /// Applies that changed the catalog's records (counted before the apply returns).
    catalog_applies: Arc<AtomicU64>,
    /// The number of such applies the loaded catalog includes.
    catalog_loaded: Arc<AtomicU64>,
    /// The term in which this node last raised its AUTO_INCREMENT counters (0: never): a
    /// statement that passed the read barrier in another term raises them first.
    counters_term: AtomicU64,
    /// The latest term in which a read barrier of this node confirmed its leadership (0:
    /// none): every entry of earlier terms is applied here.
    barrier_term: AtomicU64,
    refresh_lock: tokio::sync::Mutex<()>,
}

/// Starts the Raft node over `db`, forms the group if asked, and opens the catalog.
pub(super) async fn start(db: riptide::Db, setup: &ClusterSetup) -> Result<(Arc<Catalog>, Arc<Replica>), ServerError> {
    let (signal, pending) = mpsc::channel::<()>();
    let signal = parking_lot::Mutex::new(signal);
    let catalog_applies = Arc::new(AtomicU64::new(0));
    let applies = catalog_applies.clone();
    let listener: riptide_cluster::state_machine::ApplyListener = Arc::new(move |tables: &[String]| {
        if tables.iter().any(|t| t == CATALOG_TABLE) {
            applies.fetch_add(1, Ordering::AcqRel);
            let _ = signal.lock().send(());
        }
    });
    let node = Arc::new(PartitionNode::start(&db, setup.node.clone(), Some(listener)).await?);
    if let Some(members) = &setup.bootstrap {
        if node.bootstrap(members.clone()).await? {
            tracing::info!("formed the group with {} members", members.len());
        }
    }
    // Counted before the open reads the records: the open includes at least those applies.
    let loaded_at_open = catalog_applies.load(Ordering::Acquire);
    let catalog = Arc::new(tokio::task::block_in_place(|| Catalog::open(db))?);
    let replica = Arc::new(Replica {
        node: node.clone(),
        follower_reads: setup.follower_reads,
        catalog_applies: catalog_applies.clone(),
        catalog_loaded: Arc::new(AtomicU64::new(loaded_at_open)),
        counters_term: AtomicU64::new(0),
        barrier_term: AtomicU64::new(0),
        refresh_lock: tokio::sync::Mutex::new(()),
    });
    let (applies, loaded) = (catalog_applies.clone(), replica.catalog_loaded.clone());
    // The leader's DDL holds the DDL lock while its records go through the log, so the catalog
    // thread cannot reload meanwhile; the DDL's own publish brings the catalog up to the log.
    catalog.on_publish(Box::new(move || {
        loaded.fetch_max(applies.load(Ordering::Acquire), Ordering::AcqRel);
    }));
    spawn_catalog_thread(
        Arc::downgrade(&catalog),
        pending,
        catalog_applies,
        replica.catalog_loaded.clone(),
    )?;
    Ok((catalog, replica))
}

/// The thread that reloads the catalog after applies changed it; it ends with the catalog.
fn spawn_catalog_thread(
    catalog: Weak<Catalog>,
    pending: mpsc::Receiver<()>,
    applies: Arc<AtomicU64>,
    loaded: Arc<AtomicU64>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("catalog-follow".into())
        .spawn(move || loop {
            let signalled = match pending.recv_timeout(Duration::from_millis(500)) {
                Ok(()) => true,
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let Some(catalog) = catalog.upgrade() else { return };
            // Unsignalled ticks retry a reload that failed (or was overtaken).
            if !signalled && loaded.load(Ordering::Acquire) >= applies.load(Ordering::Acquire) {
                continue;
            }
            while pending.try_recv().is_ok() {}
            // Every apply counted by now is visible: the reload below includes it.
            let target = applies.load(Ordering::Acquire);
            match catalog.reload() {
                Ok(()) => {
                    loaded.fetch_max(target, Ordering::AcqRel);
                }
                Err(e) => tracing::error!("reloading the catalog after an apply failed: {e}"),
            }
        })
        .map(|_| ())
}

/// Creates `names` once this replica leads (or sees them created by the leader it follows).
/// On the leader it first takes the read barrier with the catalog's catch-up, as a CREATE
/// DATABASE statement does: a node that has just come to lead may not yet have applied the
/// catalog records of earlier terms, and what it creates must be decided on the whole catalog.
pub(super) fn create_databases(catalog: &Arc<Catalog>, replica: &Arc<Replica>, names: Vec<String>) {
    if names.is_empty() {
        return;
    }
    let (catalog, replica) = (catalog.clone(), replica.clone());
    tokio::spawn(async move {
        let missing = |catalog: &Catalog| -> Vec<String> {
            let state = catalog.state();
            names
                .iter()
                .filter(|n| !state.databases.contains(*n))
                .cloned()
                .collect()
        };
        loop {
            if missing(&catalog).is_empty() {
                return;
            }
            if replica.node.is_leader() {
                match replica.barrier_and_catch_up(&catalog).await {
                    Ok(()) => create_now(&catalog, &missing(&catalog)),
                    Err(e) => tracing::debug!("no read barrier for creating databases yet (will retry): {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Creates each of `names` (if not there) under the DDL lock; a failure is logged, and the
/// caller tries again.
fn create_now(catalog: &Catalog, names: &[String]) {
    for name in names {
        let result = tokio::task::block_in_place(|| {
            let _ddl = catalog.lock_ddl();
            catalog.create_database(name, true)
        });
        if let Err(e) = result {
            tracing::warn!("creating database {name} failed (will retry): {e}");
        }
    }
}

/// A follower read (`--follower-reads`) runs without a barrier. A transaction it opens
/// (autocommit off, or BEGIN) is fenced to no term (`u64::MAX`, which no leader reaches):
/// should this node lead before the transaction ends, its writes are refused instead of
/// committing what it read as a follower (its COMMIT takes no barrier: nothing was skipped).
fn follower_read(gate: &mut TxnGate) -> Result<(), SqlError> {
    gate.fence_term = u64::MAX;
    Ok(())
}

/// How long a gated statement waits for the catalog thread to load what the log applied.
const CATALOG_CATCH_UP: Duration = Duration::from_secs(10);
/// How long a new leader waits for each prepared transaction's rows before its first statement
/// of the term fails (and the next one tries again).
const PREPARED_RELOCK_WAIT: Duration = Duration::from_secs(5);

/// What one connection's open snapshot transaction has been through the gate. A connection
/// keeps one, hands it to [`Replica::before_statement`] before each statement and to
/// [`TxnGate::after_statement`] after it.
#[derive(Debug, Default)]
pub(crate) struct TxnGate {
    /// The term confirmed by this statement's read barrier (0: it took none, or the term moved
    /// while it ran).
    statement_term: u64,
    /// The term confirmed by the barrier of the statement that opened the open snapshot
    /// transaction, taken before its snapshot (0: none, so its statements are gated one by one).
    snapshot_term: u64,
    /// A statement of the open transaction skipped its barrier: the statement that may end
    /// the transaction confirms the term first.
    skipped: bool,
    /// This statement skipped its barrier in this term and commits by itself (an autocommit
    /// write, or a plain COMMIT of a transaction whose statements skipped theirs; 0: neither):
    /// unless it committed writes (fenced to this term), it confirms the term before it answers.
    pub(crate) write_skipped_in: u64,
    /// The term a transaction this statement begins is fenced to (0: none, no gate ran): the
    /// term in which its reads were confirmed, read before its barrier (which may end after
    /// the term moved on: then its writes are refused rather than committed in another term).
    pub(crate) fence_term: u64,
    /// This statement opens a snapshot transaction without a barrier of its own (BEGIN on a
    /// leader that confirmed this term before): the transaction's statements skip theirs too,
    /// and the statement that ends it confirms the term.
    opened_unconfirmed: bool,
    /// The statement gated is a stand-in for an XA statement (`conn::run_xa`): its COMMIT is
    /// a prepare or a decision, which confirms the term by a barrier.
    pub(crate) stand_in: bool,
}

impl TxnGate {
    /// Records what the statement did to the session's transaction: `was` and `now` say
    /// whether a snapshot transaction was open before and after it, `begins` that it was
    /// BEGIN (which commits an open transaction and opens another).
    pub(crate) fn after_statement(&mut self, was: bool, now: bool, begins: bool) {
        if !now {
            self.snapshot_term = 0;
            self.skipped = false;
        } else if !was || begins {
            // The statement opened the transaction after its own barrier (or without one).
            self.snapshot_term = self.statement_term;
            self.skipped = self.opened_unconfirmed;
        }
    }
}

impl Replica {
    /// Gates a statement (see the module header). An error means the statement did not run.
    pub(crate) async fn before_statement(
        &self,
        catalog: &Catalog,
        stmt: &Statement,
        gate: &mut TxnGate,
        session: &Session,
    ) -> Result<(), SqlError> {
        gate.statement_term = 0;
        gate.write_skipped_in = 0;
        gate.fence_term = 0;
        gate.opened_unconfirmed = false;
        let in_snapshot_txn = session.in_snapshot_transaction();
        let (leader, term) = {
            let m = self.node.raft().metrics();
            let m = m.borrow();
            (m.current_leader == Some(m.id), m.current_term)
        };
        let plain = matches!(
            stmt,
            Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
        );
        // Inside a snapshot transaction whose snapshot followed a read barrier of this term,
        // the leader runs plain statements without one: they read the snapshot, or (locking
        // reads, writes) the newest local rows, which hold every write acknowledged in this
        // term, all made by this node. The statement that may commit the transaction confirms
        // the term.
        if in_snapshot_txn && leader && plain && gate.snapshot_term != 0 && gate.snapshot_term == term {
            gate.skipped = true;
            return Ok(());
        }
        // An autocommit INSERT, UPDATE or DELETE on a leader that has confirmed this term (so
        // every earlier term's entries are applied here, and this term's AUTO_INCREMENT
        // counters raised) runs without a barrier: what it reads under its row locks holds
        // every write acknowledged in this term, all made by this node and applied before the
        // locks were free, and its write commits only if this node still leads when a majority
        // has it. One that commits no write answers from what it read, so it confirms the term
        // first ([`Replica::confirm_write`]).
        let autocommit_write = !session.in_transaction()
            && session.view.autocommit
            && matches!(stmt, Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_));
        if autocommit_write
            && leader
            && self.barrier_term.load(Ordering::Acquire) == term
            && self.counters_term.load(Ordering::Acquire) == term
        {
            gate.write_skipped_in = term;
            gate.fence_term = term;
            return Ok(());
        }
        // BEGIN with no transaction open, on a leader that has confirmed this term (as for
        // autocommit writes above): its snapshot holds every write acknowledged in this term,
        // all this node's. Whether another node led meanwhile is settled when the transaction
        // ends: by the statement that may commit it (below), as for any skipped barrier.
        let term_confirmed = leader
            && self.barrier_term.load(Ordering::Acquire) == term
            && self.counters_term.load(Ordering::Acquire) == term;
        if matches!(stmt, Statement::StartTransaction { .. }) && !session.in_transaction() && term_confirmed {
            gate.statement_term = term;
            gate.opened_unconfirmed = true;
            gate.fence_term = term;
            return Ok(());
        }
        // COMMIT, BEGIN, DDL, SET: each may commit the open transaction. ROLLBACK need not.
        let confirm = in_snapshot_txn && gate.skipped && !matches!(stmt, Statement::Rollback { .. });
        if confirm && gate.snapshot_term != term {
            return Err(term_moved());
        }
        // A plain COMMIT that commits writes needs no barrier: its write set is fenced to the
        // snapshot's term (the transaction began in it), and a write committed in that term
        // proves that no other node led before it was proposed, after every read of the
        // transaction (a majority that elected another leader would have refused it; an entry
        // of this term that a later leader commits keeps this term, but no later leader's log
        // holds it if an earlier one had acknowledged a write). One that commits no write
        // confirms the term after it ran, as an autocommit write does ([`Replica::confirm_write`]).
        if confirm && !gate.stand_in && matches!(stmt, Statement::Commit { chain: false, .. }) {
            gate.write_skipped_in = term;
            return Ok(());
        }
        // A statement that opens a transaction (autocommit off) takes its snapshot: it follows
        // a barrier even when it reads no table.
        let opens_txn = !session.in_transaction() && !session.view.autocommit;
        let gated = confirm
            || match stmt {
                // `SELECT 1`, `SELECT @@version_comment`: no table, no gate (clients send these
                // at connect, to followers too).
                Statement::Query(q) if !opens_txn && matches!(&*q.body, SetExpr::Select(s) if s.from.is_empty()) => {
                    false
                }
                Statement::Query(q) if self.follower_reads && q.locks.is_empty() && !leader => {
                    return follower_read(gate)
                }
                // A transaction's snapshot is taken at BEGIN: it must follow the read index too.
                Statement::StartTransaction { .. } if self.follower_reads && !leader => return follower_read(gate),
                Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => true,
                Statement::StartTransaction { .. } => true,
                // DDL reads and writes the catalog: it must see every applied change of it.
                Statement::CreateTable(_)
                | Statement::CreateIndex(_)
                | Statement::CreateDatabase { .. }
                | Statement::CreateSchema { .. }
                | Statement::Drop { .. }
                | Statement::AlterTable { .. } => true,
                _ => false,
            };
        if !gated {
            return Ok(());
        }
        let result = self.barrier_and_catch_up(catalog).await;
        if result.is_ok() {
            gate.fence_term = term;
        }
        // The barrier confirmed `term` only if this node still led in it when the barrier
        // ended (terms only grow).
        let confirmed = result.is_ok() && self.term() == term;
        if confirmed {
            gate.statement_term = term;
            gate.skipped = false;
            self.barrier_term.fetch_max(term, Ordering::AcqRel);
        } else if confirm && result.is_ok() {
            return Err(term_moved());
        }
        result
    }

    /// After an autocommit write, or a COMMIT, that skipped its barrier in `term` ([`TxnGate`]'s
    /// `write_skipped_in`) and committed no write (no row matched, a duplicate key, a failed
    /// statement, a transaction that only read): its answer came from this node's rows, so a
    /// barrier must confirm that the node still leads in `term`. An error means the answer
    /// must not be given; the statement changed nothing.
    pub(crate) async fn confirm_write(&self, catalog: &Catalog, term: u64) -> Result<(), SqlError> {
        self.barrier_and_catch_up(catalog).await?;
        if self.term() != term {
            return Err(term_moved());
        }
        Ok(())
    }

    /// This node's current Raft term.
    fn term(&self) -> u64 {
        self.node.raft().metrics().borrow().current_term
    }

    /// The read barrier, then the catalog's catch-up with what it covers and, once per term,
    /// the AUTO_INCREMENT counters.
    async fn barrier_and_catch_up(&self, catalog: &Catalog) -> Result<(), SqlError> {
        self.node.read_barrier().await.map_err(SqlError::from_engine)?;
        // The applies the read index covers may have changed the catalog: wait until the
        // catalog thread has loaded them.
        let want = self.catalog_applies.load(Ordering::Acquire);
        let deadline = tokio::time::Instant::now() + CATALOG_CATCH_UP;
        while self.catalog_loaded.load(Ordering::Acquire) < want {
            if tokio::time::Instant::now() > deadline {
                return Err(SqlError::from_engine(riptide::Error::Replication(
                    "the SQL catalog did not catch up with the applied log in time".into(),
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The barrier proved leadership in this term, and every entry of earlier terms is
        // applied: the stored rows are complete. No statement of a new term generates a value
        // before the counters are raised to them.
        let term = self.term();
        if self.counters_term.load(Ordering::Acquire) != term {
            let _one = self.refresh_lock.lock().await;
            if self.counters_term.load(Ordering::Acquire) != term {
                // What a DDL statement of an earlier term left half-made (its leader lost the
                // leadership mid-way) is dropped before any statement of this term runs.
                tokio::task::block_in_place(|| catalog.repair_interrupted_ddl())?;
                tokio::task::block_in_place(|| catalog.refresh_auto_increments())?;
                // Transactions prepared for two-phase commit under an earlier leader keep their
                // rows locked here until their decision (their old leader's locks are gone).
                tokio::task::block_in_place(|| riptide_cluster::lock_prepared_rows(catalog.db(), PREPARED_RELOCK_WAIT))
                    .map_err(SqlError::from_engine)?;
                self.counters_term.store(term, Ordering::Release);
            }
        }
        Ok(())
    }
}

/// The error of a transaction whose statements skipped their read barriers in a term that
/// ended before its commit: a deadlock-style error, so clients retry it (as Galera's
/// certification failures do).
fn term_moved() -> SqlError {
    SqlError::new(
        1213,
        "40001",
        "the leader's term changed during this transaction, so its reads may be stale; it was \
         rolled back: try restarting transaction",
    )
}

/// Appends the node's Raft figures to the Prometheus text.
pub(super) fn render_metrics(out: &mut String, node: &PartitionNode) {
    let m = node.metrics();
    let id = m.id;
    let g = |out: &mut String, name: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{node=\"{id}\"}} {v}"
        );
    };
    g(out, "riptide_raft_term", "current Raft term", m.current_term);
    g(
        out,
        "riptide_raft_leader",
        "the leader this node knows (0: none)",
        m.current_leader.unwrap_or(0),
    );
    g(
        out,
        "riptide_raft_is_leader",
        "1 while this node leads",
        u64::from(m.current_leader == Some(id)),
    );
    g(
        out,
        "riptide_raft_last_log_index",
        "last index in this node's log",
        m.last_log_index.unwrap_or(0),
    );
    g(
        out,
        "riptide_raft_applied_index",
        "last index applied to the engine",
        m.last_applied.map_or(0, |l| l.index),
    );
    g(
        out,
        "riptide_raft_purged_index",
        "last index purged from the log",
        m.purged.map_or(0, |l| l.index),
    );
    g(
        out,
        "riptide_raft_snapshot_index",
        "last index the current snapshot holds (0: none)",
        m.snapshot.map_or(0, |l| l.index),
    );
    let s = node.snapshot_stats();
    let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# HELP riptide_raft_snapshots_total snapshots built and installed since the start
# TYPE riptide_raft_snapshots_total counter
riptide_raft_snapshots_total{{node=\"{id}\",kind=\"built\"}} {}
riptide_raft_snapshots_total{{node=\"{id}\",kind=\"installed\"}} {}",
        load(&s.built),
        load(&s.installed)
    );
    let _ = writeln!(
        out,
        "# HELP riptide_raft_snapshot_last_seconds how long the last build or install took
# TYPE riptide_raft_snapshot_last_seconds gauge
riptide_raft_snapshot_last_seconds{{node=\"{id}\",kind=\"built\"}} {}
riptide_raft_snapshot_last_seconds{{node=\"{id}\",kind=\"installed\"}} {}",
        load(&s.last_build_micros) as f64 / 1e6,
        load(&s.last_install_micros) as f64 / 1e6
    );
    let p = node.proposer_stats();
    let _ = writeln!(
        out,
        "# HELP riptide_raft_proposed_total entries this node proposed as leader, and the write sets in them (several transactions share an entry: group commit)
# TYPE riptide_raft_proposed_total counter
riptide_raft_proposed_total{{node=\"{id}\",kind=\"entries\"}} {}
riptide_raft_proposed_total{{node=\"{id}\",kind=\"write_sets\"}} {}",
        load(&p.entries),
        load(&p.write_sets)
    );
    g(
        out,
        "riptide_raft_snapshot_archive_bytes",
        "bytes of the last snapshot archive built or installed",
        load(&s.last_archive_bytes),
    );
    if let Some(replication) = &m.replication {
        let last = m.last_log_index.unwrap_or(0);
        let _ = writeln!(
            out,
            "# HELP riptide_raft_replication_lag entries the leader has that a follower has not\n# TYPE riptide_raft_replication_lag gauge"
        );
        for (follower, matched) in replication {
            let lag = last.saturating_sub(matched.map_or(0, |l| l.index));
            let _ = writeln!(
                out,
                "riptide_raft_replication_lag{{node=\"{id}\",follower=\"{follower}\"}} {lag}"
            );
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
