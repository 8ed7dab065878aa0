//! The router (`riptide router`): any number of them accept MySQL clients and send each
//! statement to the leader of the partition that holds its rows (seed 004's X-DB router).
//! A partitioned database is N partitions, each a replicated group of `riptide serve`
//! processes (or one plain server); a table's rows are placed on them by a hash of their
//! primary key ([`placement`]). The router keeps no data: it knows each partition's replicas
//! (its configuration), which of them led last (learned from their answers), and tables'
//! primary keys (read with `SHOW CREATE TABLE`, cached for 10 s or until DDL passes through it).
//!
//! Invariants:
//! - Every partition sees every table: DDL goes to all of them, in order.
//! - A row is only ever written on the partition its key hashes to (placement version 1, for
//!   the configured partition count and order, which must therefore never change for a
//!   database), and a write statement goes to one partition or is refused; see the `session`
//!   module. A transaction may span partitions: it commits by two-phase commit, and every
//!   router resolves what crashed coordinators left prepared (`twophase`).
//! - It listens only where told; clients log in with the users it was given, and it logs in to
//!   the partitions as the same user with the same password.

pub mod backend;
mod merge;
pub mod merge_plan;
pub mod placement;
mod prepared;
mod resolver;
mod send;
mod session;
mod twophase;

use crate::protocol::{Command, Connection, ProtocolError};
use crate::server::listen::{drain, spawn_accept_loop};
use crate::server::Users;
use placement::TableKey;
use session::{write_answer, Answer, RouterSession};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// How long a table's key is trusted before it is read again.
const SCHEMA_TTL: Duration = Duration::from_secs(10);

/// The version the router announces to clients.
const ROUTER_VERSION: &str = "8.0.36-riptide-router";

/// How to run a router.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Address for MySQL clients.
    pub listen: SocketAddr,
    /// Users: name → password (the partitions must have the same).
    pub users: Vec<(String, String)>,
    /// Each partition's replicas (their MySQL addresses), in partition order.
    pub partitions: Vec<Vec<SocketAddr>>,
    /// Largest packet accepted from a client.
    pub max_allowed_packet: usize,
    /// Connecting to a replica, and each read and write, fail after this.
    pub backend_timeout: Duration,
    /// How long a statement waits for a partition to have a leader (an election).
    pub leader_wait: Duration,
    /// How long a cross-partition transaction's branch may stay prepared before the router's
    /// resolver finishes it by its home's decision (aborting it if there is none yet).
    pub xa_resolve_after: Duration,
}

impl RouterConfig {
    /// A router on `listen` over `partitions`, with default limits.
    pub fn new(listen: SocketAddr, users: Vec<(String, String)>, partitions: Vec<Vec<SocketAddr>>) -> Self {
        RouterConfig {
            listen,
            users,
            partitions,
            max_allowed_packet: 64 << 20,
            backend_timeout: Duration::from_secs(60),
            leader_wait: Duration::from_secs(10),
            xa_resolve_after: Duration::from_secs(10),
        }
    }
}

/// Why the router could not start.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The configuration is unusable.
    #[error("router configuration: {0}")]
    Config(String),
    /// Binding the listener failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
}

/// One partition as the router sees it.
pub(crate) struct Partition {
    pub(crate) replicas: Vec<SocketAddr>,
    /// The replica believed to lead.
    leader: AtomicUsize,
    /// Whether it can be a participant of a cross-partition transaction
    /// (`twophase::Prepares`, learned once).
    prepares: std::sync::atomic::AtomicU8,
}

impl Partition {
    fn leader_hint(&self) -> usize {
        self.leader.load(Ordering::Relaxed) % self.replicas.len()
    }

    /// Replica `at` did not lead (or could not be reached): the next one is tried, once, however
    /// many sessions found out at the same time.
    fn not_leader(&self, at: usize) {
        let _ = self
            .leader
            .compare_exchange(at, (at + 1) % self.replicas.len(), Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A table's database and name.
type TableName = (String, String);

/// What every router connection shares.
pub(crate) struct RouterShared {
    config: RouterConfig,
    users: Users,
    partitions: Vec<Partition>,
    /// Tables' keys, with when they were read.
    schemas: parking_lot::Mutex<HashMap<TableName, (Arc<TableKey>, std::time::Instant)>>,
    /// Bumped by every DDL through this router: a key read before it is not cached after it.
    schema_generation: AtomicU64,
    connections: AtomicU64,
    stop: tokio::sync::watch::Sender<bool>,
    /// Names this router process in the gtrids of its cross-partition transactions.
    nonce: u64,
    next_gtrid: AtomicU64,
    /// The decision tables exist on every partition (made sure of once).
    decision_tables: tokio::sync::OnceCell<()>,
    /// Transactions whose branches all committed: (home partition, gtrid), for the resolver
    /// task to delete their decision rows.
    finished: parking_lot::Mutex<Vec<(usize, String)>>,
    /// The gtrids of the transactions this router's sessions coordinate now (its resolver
    /// leaves them alone).
    coordinating: parking_lot::Mutex<std::collections::HashSet<String>>,
}

impl RouterShared {
    fn password_of(&self, user: &str) -> String {
        self.config
            .users
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    }

    /// A table's key read less than [`SCHEMA_TTL`] ago (DDL through another router is seen
    /// within that time).
    fn schema(&self, db: &str, table: &str) -> Option<Arc<TableKey>> {
        let s = self.schemas.lock();
        let (key, read) = s.get(&(db.to_string(), table.to_string()))?;
        (read.elapsed() < SCHEMA_TTL).then(|| key.clone())
    }

    fn schema_generation(&self) -> u64 {
        self.schema_generation.load(Ordering::Acquire)
    }

    /// Caches a key read when the generation was `generation`, unless DDL passed since.
    fn remember_schema(&self, db: &str, table: &str, key: Arc<TableKey>, generation: u64) {
        let mut s = self.schemas.lock();
        if self.schema_generation() != generation {
            return;
        }
        if s.len() > 100_000 {
            s.clear();
        }
        s.insert((db.to_string(), table.to_string()), (key, std::time::Instant::now()));
    }

    fn forget_schemas(&self) {
        let mut s = self.schemas.lock();
        self.schema_generation.fetch_add(1, Ordering::AcqRel);
        s.clear();
    }
}

/// A started router.
pub struct RunningRouter {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<RouterShared>,
    accept: tokio::task::JoinHandle<()>,
}

/// A number that differs between router processes: the time in nanoseconds mixed with the
/// process id.
fn process_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// Binds the listener and starts accepting clients (and the resolver of cross-partition
/// transactions its crashed peers left prepared).
pub async fn start(config: RouterConfig) -> Result<RunningRouter, RouterError> {
    if config.partitions.is_empty() || config.partitions.len() > 1024 {
        return Err(RouterError::Config(format!(
            "{} partitions (1 to 1024)",
            config.partitions.len()
        )));
    }
    if let Some(i) = config.partitions.iter().position(|p| p.is_empty()) {
        return Err(RouterError::Config(format!("partition {i} has no replicas")));
    }
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let (stop, _) = tokio::sync::watch::channel(false);
    let shared = Arc::new(RouterShared {
        users: Users::new(&config.users),
        partitions: config
            .partitions
            .iter()
            .map(|r| Partition {
                replicas: r.clone(),
                leader: AtomicUsize::new(0),
                prepares: std::sync::atomic::AtomicU8::new(twophase::Prepares::Unknown as u8),
            })
            .collect(),
        config,
        schemas: parking_lot::Mutex::new(HashMap::new()),
        schema_generation: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        stop,
        nonce: process_nonce(),
        next_gtrid: AtomicU64::new(0),
        decision_tables: tokio::sync::OnceCell::new(),
        finished: parking_lot::Mutex::new(Vec::new()),
        coordinating: parking_lot::Mutex::new(std::collections::HashSet::new()),
    });
    let every = (shared.config.xa_resolve_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    tokio::spawn(resolver::resolve_loop(shared.clone(), every));
    let s = shared.clone();
    let accept = spawn_accept_loop(listener, shared.stop.subscribe(), move |stream, id| {
        s.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(serve_client(stream, s.clone(), id));
    });
    Ok(RunningRouter { addr, shared, accept })
}

impl RunningRouter {
    /// Stops accepting; open clients end at their next command (bounded by `grace`).
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shared.stop.send(true);
        let _ = self.accept.await;
        drain(&self.shared.connections, grace).await;
    }
}

/// Runs a router until SIGTERM or SIGINT; prints the listening address first.
pub async fn run_until_signal(config: RouterConfig) -> Result<(), RouterError> {
    use std::io::Write as _;
    let router = start(config).await?;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "riptide router: listening on {}", router.addr);
    let _ = out.flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    router.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

async fn serve_client(stream: TcpStream, shared: Arc<RouterShared>, id: u32) {
    struct Open(Arc<RouterShared>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _open = Open(shared.clone());
    let _ = stream.set_nodelay(true);
    let mut conn = Connection::new(stream, shared.config.max_allowed_packet);
    let info = match conn.handshake(id, ROUTER_VERSION, &shared.users).await {
        Ok(i) => i,
        Err(e) => {
            tracing::debug!(connection = id, "router handshake failed: {e}");
            return;
        }
    };
    let found_rows = info.capabilities & crate::protocol::capability::CLIENT_FOUND_ROWS != 0;
    let mut session = RouterSession::new(shared.clone(), info.user.clone(), None, found_rows);
    if let Some(db) = info.database.filter(|d| !d.is_empty()) {
        let answer = session
            .use_db(&format!("USE `{}`", db.replace('`', "``")), Some(db))
            .await;
        if !matches!(answer, Answer::Reply(backend::Reply::Ok(_))) {
            write_answer(&mut conn, &session, answer);
            let _ = conn.flush().await;
            return;
        }
    }
    write_answer(&mut conn, &session, Answer::Ok);
    if conn.flush().await.is_err() {
        return;
    }
    let mut stop = shared.stop.subscribe();
    loop {
        let cmd = tokio::select! {
            c = conn.read_command() => c,
            _ = stop.changed() => break,
        };
        let cmd = match cmd {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(ProtocolError::PacketTooLarge { .. }) => continue,
            Err(e) => {
                tracing::debug!(connection = id, "router connection closed: {e}");
                break;
            }
        };
        let answer = match cmd {
            Command::Quit => break,
            Command::Ping => Answer::Ok,
            Command::Query(sql) => match std::str::from_utf8(&sql) {
                Err(_) => Answer::Error(1064, "42000", "the statement is not valid UTF-8".into()),
                Ok(text) => match crate::sql::parse::parse(text) {
                    Err(e) => Answer::Error(e.code, e.state, e.message),
                    Ok(stmts) if stmts.is_empty() => Answer::Error(1065, "42000", "Query was empty".into()),
                    Ok(stmts) if stmts.len() > 1 => Answer::Error(
                        1064,
                        "42000",
                        "several statements in one query (multi-statements are off)".into(),
                    ),
                    Ok(stmts) => session.run(text, session::Request::Query(text), &stmts[0]).await,
                },
            },
            Command::InitDb(db) => {
                let db = String::from_utf8_lossy(&db).into_owned();
                session
                    .use_db(&format!("USE `{}`", db.replace('`', "``")), Some(db))
                    .await
            }
            Command::ResetConnection => {
                session.reset();
                Answer::Ok
            }
            Command::StmtPrepare(sql) => match std::str::from_utf8(&sql) {
                Ok(text) => session.prepare(text).await,
                Err(_) => Answer::Error(1064, "42000", "the statement is not valid UTF-8".into()),
            },
            Command::StmtExecute(payload) => session.execute(&payload).await,
            Command::StmtClose(id) => {
                session.close_statement(id).await;
                continue;
            }
            Command::StmtSendLongData { stmt_id, param, data } => {
                session.long_data(stmt_id, param, &data);
                continue;
            }
            Command::StmtReset(id) => session.reset_statement(id),
            Command::FieldList { .. } | Command::Other(_) => {
                Answer::Error(1047, "08S01", "Unknown command (not routed)".into())
            }
        };
        write_answer(&mut conn, &session, answer);
    }
}
