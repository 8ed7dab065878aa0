//! The server: opens the database and catalog, accepts connections (one tokio task each),
//! serves metrics, and shuts down cleanly on SIGTERM/SIGINT.
//!
//! Invariants:
//! - it listens only where told (loopback by default);
//! - shutdown stops accepting, tells every connection to stop at its next command boundary,
//!   waits for them (bounded), then closes the database, which flushes it; commits already
//!   acknowledged were durable before their OK was sent (`--sync`, the default);
//! - users are fixed at start; an unknown user or a wrong password is refused (1045).

pub mod conn;
pub(crate) mod listen;
pub mod metrics;
pub(crate) mod replica;

use crate::protocol::{native_password_stage2, Authenticator};
use crate::sql::catalog::Catalog;
use crate::sql::session::SessionConfig;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Database directory.
    pub data_dir: PathBuf,
    /// Address for MySQL clients.
    pub listen: SocketAddr,
    /// Address for Prometheus metrics, if any.
    pub metrics_listen: Option<SocketAddr>,
    /// Users: name → password.
    pub users: Vec<(String, String)>,
    /// Largest packet accepted (MySQL's max_allowed_packet).
    pub max_allowed_packet: usize,
    /// Session settings (sync commits, lock wait timeout).
    pub session: SessionConfig,
    /// Databases created at start when missing.
    pub create_databases: Vec<String>,
    /// Engine options.
    pub engine: riptide::Options,
    /// Run as one replica of a replicated partition (`None`: a single node).
    pub cluster: Option<ClusterSetup>,
}

/// How a server runs as a replica of a partition (`riptide serve --node-id ...`).
#[derive(Debug, Clone)]
pub struct ClusterSetup {
    /// The Raft node's identity, address, secret and timings.
    pub node: riptide_cluster::NodeConfig,
    /// Members (id → Raft address) to form the group with when this node's log is empty.
    pub bootstrap: Option<std::collections::BTreeMap<u64, String>>,
    /// A follower serves reads at its applied index instead of refusing them.
    pub follower_reads: bool,
}

/// The users, by name, with their stage-2 password hashes.
pub struct Users(HashMap<String, Option<[u8; 20]>>);

impl Users {
    /// Users from name/password pairs.
    pub fn new(pairs: &[(String, String)]) -> Users {
        Users(
            pairs
                .iter()
                .map(|(u, p)| (u.clone(), native_password_stage2(p.as_bytes())))
                .collect(),
        )
    }
}

impl Authenticator for Users {
    fn lookup(&self, user: &str) -> Option<Option<[u8; 20]>> {
        self.0.get(user).copied()
    }
}

/// What the cache of parsed text-query shapes may take (estimated bytes).
const SHAPE_CACHE_BYTES: u64 = 16 << 20;

/// What every connection shares.
pub struct ServerShared {
    /// The configuration.
    pub config: ServerConfig,
    /// The catalog (and through it the engine).
    pub catalog: Arc<Catalog>,
    /// The users.
    pub users: Arc<Users>,
    /// Counters.
    pub metrics: metrics::Metrics,
    /// Open connections.
    pub connections: AtomicU64,
    /// Commits started and not yet answered (`conn`: a commit is made inline only when none is).
    pub commits_in_flight: AtomicU64,
    /// Flips to true when the server stops.
    pub stop: tokio::sync::watch::Sender<bool>,
    /// This replica's Raft node and catalog follower, in cluster mode.
    pub cluster: Option<Arc<replica::Replica>>,
    /// Parsed shapes of text queries (`crate::sql::shape`).
    pub shapes: crate::sql::shape::ShapeCache,
}

/// Errors starting or stopping the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The engine failed to open or close.
    #[error("database: {0}")]
    Engine(#[from] riptide::Error),
    /// The catalog could not be loaded.
    #[error("catalog: {0}")]
    Catalog(#[from] crate::sql::error::SqlError),
    /// Binding or accepting failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The Raft node could not start.
    #[error("cluster: {0}")]
    Cluster(#[from] riptide_cluster::NodeError),
    /// The configuration asks for what this build cannot do.
    #[error("configuration: {0}")]
    Config(&'static str),
}

/// Why a replica (`--node-id`) may not have an object tier.
pub const REPLICA_OBJECT_TIER: &str = "--object_store with --node-id: a replicated partition \
    cannot have an object tier yet (its Raft snapshots are checkpoints, which cannot carry \
    object-tier extents to another node)";

/// A started server: its addresses, and the handle that stops it.
pub struct RunningServer {
    /// Where MySQL clients connect.
    pub addr: SocketAddr,
    /// Where metrics are served.
    pub metrics_addr: Option<SocketAddr>,
    shared: Arc<ServerShared>,
    accept: tokio::task::JoinHandle<()>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
}

/// Opens the database and binds the listeners.
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
    if config.cluster.is_some() && config.engine.object_store.is_some() {
        return Err(ServerError::Config(REPLICA_OBJECT_TIER));
    }
    let db = tokio::task::block_in_place(|| riptide::Db::open(&config.data_dir, config.engine.clone()))?;
    let (catalog, cluster) = match &config.cluster {
        None => {
            let catalog = Arc::new(tokio::task::block_in_place(|| Catalog::open(db))?);
            for name in &config.create_databases {
                let _ddl = catalog.lock_ddl();
                catalog.create_database(name, true)?;
            }
            (catalog, None)
        }
        Some(setup) => {
            let (catalog, replica) = replica::start(db, setup).await?;
            replica::create_databases(&catalog, &replica, config.create_databases.clone());
            (catalog, Some(replica))
        }
    };
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let metrics_listener = match config.metrics_listen {
        Some(a) => Some(TcpListener::bind(a).await?),
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    let (stop, _) = tokio::sync::watch::channel(false);
    let shared = Arc::new(ServerShared {
        users: Arc::new(Users::new(&config.users)),
        config,
        catalog,
        metrics: metrics::Metrics::default(),
        connections: AtomicU64::new(0),
        commits_in_flight: AtomicU64::new(0),
        stop,
        cluster,
        shapes: crate::sql::shape::ShapeCache::new(SHAPE_CACHE_BYTES),
    });
    let s = shared.clone();
    let accept = listen::spawn_accept_loop(listener, shared.stop.subscribe(), move |stream, id| {
        s.connections.fetch_add(1, Ordering::Relaxed);
        s.metrics.connections_total.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(conn::serve_connection(stream, s.clone(), id));
    });
    let metrics_task = metrics_listener.map(|l| {
        let s = shared.clone();
        tokio::spawn(serve_metrics(l, s))
    });
    Ok(RunningServer {
        addr,
        metrics_addr,
        shared,
        accept,
        metrics_task,
    })
}

/// Answers every HTTP request on the metrics port with the Prometheus text.
async fn serve_metrics(listener: TcpListener, s: Arc<ServerShared>) {
    let mut stop = s.stop.subscribe();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => break,
        };
        let Ok((mut stream, _)) = accepted else { continue };
        let s = s.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            // Read the request head (bounded); the path does not matter.
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
            let mut body = s.metrics.render(s.connections.load(Ordering::Relaxed), s.catalog.db());
            if let Some(replica) = &s.cluster {
                replica::render_metrics(&mut body, &replica.node);
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}

impl RunningServer {
    /// Stops the server: no new connections, open ones end at their next command, then the
    /// database is closed.
    pub async fn shutdown(self, grace: Duration) -> Result<(), ServerError> {
        let _ = self.shared.stop.send(true);
        let _ = self.accept.await;
        if let Some(m) = self.metrics_task {
            let _ = m.await;
        }
        listen::drain(&self.shared.connections, grace).await;
        if let Some(replica) = &self.shared.cluster {
            replica.node.shutdown().await;
        }
        let db = self.shared.catalog.db().clone();
        tokio::task::block_in_place(|| db.close())?;
        Ok(())
    }
}

/// Runs the server until SIGTERM or SIGINT; prints the listening address first.
pub async fn run_until_signal(config: ServerConfig) -> Result<(), ServerError> {
    use std::io::Write as _;
    let server = start(config).await?;
    // Printing must not fail the server when nobody reads its stdout any more.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "riptide serve: listening on {}", server.addr);
    if let Some(m) = server.metrics_addr {
        let _ = writeln!(out, "riptide serve: metrics on http://{m}/metrics");
    }
    let _ = out.flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    let _ = writeln!(std::io::stdout(), "riptide serve: shutting down");
    server.shutdown(Duration::from_secs(10)).await
}
