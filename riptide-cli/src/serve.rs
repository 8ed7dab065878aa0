//! `riptide serve`: the MySQL-protocol server (crate `riptide-server`) on a data directory.

use crate::compact::CodecArgs;
use crate::objects::ObjectArgs;
use clap::Args;
use riptide_server::server::{run_until_signal, ServerConfig};
use riptide_server::sql::session::SessionConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Serve the database over the MySQL protocol (sysbench, the mysql client, PyMySQL).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Database directory (created if missing).
    #[arg(long, default_value = "./riptide-data")]
    data_dir: PathBuf,
    /// Address for MySQL clients; loopback unless another address is named.
    #[arg(long, default_value = "127.0.0.1:3306")]
    listen: SocketAddr,
    /// Address for Prometheus metrics (HTTP, /metrics); off when not given.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    users: UserArgs,
    /// Largest packet accepted from a client, in bytes (MySQL's max_allowed_packet).
    #[arg(long, default_value_t = 64 << 20)]
    max_allowed_packet: usize,
    /// 1: a commit is acknowledged only once its redo log is fsynced (as InnoDB's
    /// innodb_flush_log_at_trx_commit=1); 0: once written.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    sync: u8,
    /// Row lock wait timeout in seconds (innodb_lock_wait_timeout).
    #[arg(long, default_value_t = 50)]
    lock_wait_timeout: u64,
    /// What UPDATE, DELETE, INSERT's key checks and SELECT ... FOR UPDATE read under
    /// REPEATABLE READ: `snapshot` (snapshot isolation: a row changed after the transaction's
    /// snapshot fails with 1213, first updater wins) or `latest` (InnoDB's rule: the newest
    /// committed version, under the row lock). Plain SELECTs read the snapshot either way.
    #[arg(long, value_enum, default_value_t = LockingReads::Snapshot)]
    locking_reads: LockingReads,
    /// Databases to create at start when missing (repeatable).
    #[arg(long = "create-database")]
    create_databases: Vec<String>,
    /// Worker threads of the network runtime (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    codecs: CodecArgs,
    /// Bytes of the engine's block cache (default: the engine's, 256 MiB)
    #[arg(long)]
    block_cache_size: Option<usize>,
    /// Bytes of one memtable before it is frozen and flushed (default: the engine's, 64 MiB)
    #[arg(long)]
    write_buffer_size: Option<usize>,
    #[command(flatten)]
    objects: ObjectArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// What locking reads see under REPEATABLE READ (`--locking-reads`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockingReads {
    /// The transaction's snapshot; a newer version is a write conflict (1213).
    Snapshot,
    /// The newest committed version (InnoDB's current read).
    Latest,
}

/// The users clients log in as (`riptide serve` and `riptide router`).
#[derive(Args, Debug)]
pub struct UserArgs {
    /// The user clients log in as (mysql_native_password).
    #[arg(long, default_value = "root")]
    user: String,
    /// That user's password (empty by default; also RIPTIDE_PASSWORD).
    #[arg(long, env = "RIPTIDE_PASSWORD", default_value = "", hide_env_values = true)]
    password: String,
    /// A file of more users, one `user:password` per line (`#` starts a comment).
    #[arg(long)]
    users_file: Option<PathBuf>,
}

impl UserArgs {
    /// Every user and password the flags name; refused when `--user` is empty.
    pub(crate) fn users(&self) -> Result<Vec<(String, String)>, ServeError> {
        if self.user.is_empty() {
            return Err(ServeError::Usage(
                "--user must not be empty (no anonymous access)".into(),
            ));
        }
        let mut users = vec![(self.user.clone(), self.password.clone())];
        if let Some(f) = &self.users_file {
            users.extend(read_users(f)?);
        }
        Ok(users)
    }
}

/// Running as one replica of a partition replicated by Raft (docs/cluster.md).
#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// This node's id in its Raft group (1, 2, ...): runs the server as a replica.
    #[arg(long)]
    node_id: Option<u64>,
    /// Address for the other replicas' Raft traffic (loopback unless another is named).
    #[arg(long, default_value = "127.0.0.1:4306")]
    raft_listen: SocketAddr,
    /// The cluster's name; a peer of another cluster is refused.
    #[arg(long, default_value = "riptide")]
    cluster_name: String,
    /// A file holding the cluster's shared secret (16 bytes at least; trailing newline
    /// ignored); every node of the cluster has the same.
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// The group's first members: `1=127.0.0.1:4306,2=127.0.0.1:4307,3=127.0.0.1:4308`. The
    /// member with the smallest id forms the group when its log is empty; give the same list
    /// to every first member. Later members join with `riptide cluster add-node`.
    #[arg(long)]
    bootstrap: Option<String>,
    /// A follower serves plain SELECTs from its applied state (possibly stale) instead of
    /// refusing them with error 1290.
    #[arg(long)]
    follower_reads: bool,
    /// Leader heartbeat interval, in milliseconds.
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Election timeout, in milliseconds: a follower that hears no leader for a random time
    /// between this and twice this stands for election.
    #[arg(long, default_value_t = 300)]
    election_timeout_ms: u64,
    /// Entries after which a replica snapshots its partition (an engine checkpoint, kept as
    /// a file) and purges its Raft log up to it; 1..=1000000000.
    #[arg(long, default_value_t = riptide_cluster::node::DEFAULT_SNAPSHOT_EVERY)]
    raft_snapshot_every: u64,
    #[command(flatten)]
    tls: crate::cluster::TlsArgs,
}

/// The replica's setup from the flags, or `None` without `--node-id`.
fn cluster_setup(args: &ClusterArgs) -> Result<Option<riptide_server::server::ClusterSetup>, ServeError> {
    let Some(id) = args.node_id else {
        if args.bootstrap.is_some() || args.cluster_secret_file.is_some() || args.follower_reads || args.tls.any() {
            return Err(ServeError::Usage(
                "--bootstrap, --cluster-secret-file, --follower-reads and --tls-* need --node-id".into(),
            ));
        }
        return Ok(None);
    };
    if id == 0 {
        return Err(ServeError::Usage("--node-id starts at 1".into()));
    }
    let path = args
        .cluster_secret_file
        .as_ref()
        .ok_or_else(|| ServeError::Usage("--node-id needs --cluster-secret-file".into()))?;
    let auth = crate::cluster::read_auth(&args.cluster_name, path).map_err(ServeError::Usage)?;
    let auth = args.tls.apply(auth).map_err(ServeError::Usage)?;
    if !(10..=60_000).contains(&args.heartbeat_ms) || !(50..=600_000).contains(&args.election_timeout_ms) {
        return Err(ServeError::Usage(
            "--heartbeat-ms must be 10..=60000 and --election-timeout-ms 50..=600000".into(),
        ));
    }
    if !(1..=1_000_000_000).contains(&args.raft_snapshot_every) {
        return Err(ServeError::Usage("--raft-snapshot-every must be 1..=1000000000".into()));
    }
    if args.heartbeat_ms >= args.election_timeout_ms {
        return Err(ServeError::Usage(
            "--heartbeat-ms must be below --election-timeout-ms".into(),
        ));
    }
    let mut node = riptide_cluster::NodeConfig::new(id, args.raft_listen, auth);
    node.heartbeat = Duration::from_millis(args.heartbeat_ms);
    node.election_timeout = (
        Duration::from_millis(args.election_timeout_ms),
        Duration::from_millis(args.election_timeout_ms * 2),
    );
    node.snapshot_every = args.raft_snapshot_every;
    let bootstrap = args
        .bootstrap
        .as_deref()
        .map(crate::cluster::parse_members)
        .transpose()
        .map_err(|e| ServeError::Usage(format!("--bootstrap: {e}")))?;
    if let Some(members) = &bootstrap {
        if !members.contains_key(&id) {
            return Err(ServeError::Usage(format!("--bootstrap does not name this node ({id})")));
        }
    }
    Ok(Some(riptide_server::server::ClusterSetup {
        node,
        bootstrap,
        follower_reads: args.follower_reads,
    }))
}

/// Errors of `riptide serve`.
#[derive(Debug)]
pub enum ServeError {
    /// A flag value refused (exit status 2, as clap's own usage errors).
    Usage(String),
    /// The server could not start or failed while running (exit status 1).
    Runtime(String),
}

impl ServeError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Usage(_) => 2,
            ServeError::Runtime(_) => 1,
        }
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Usage(m) | ServeError::Runtime(m) => f.write_str(m),
        }
    }
}

fn read_users(path: &PathBuf) -> Result<Vec<(String, String)>, ServeError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ServeError::Usage(format!("--users-file {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (u, p) = line
            .split_once(':')
            .ok_or_else(|| ServeError::Usage(format!("{}:{}: expected user:password", path.display(), n + 1)))?;
        if u.is_empty() {
            return Err(ServeError::Usage(format!(
                "{}:{}: empty user name",
                path.display(),
                n + 1
            )));
        }
        out.push((u.to_string(), p.to_string()));
    }
    Ok(out)
}

/// The engine's options from the flags, checked as the engine will check them at open.
fn engine_options(args: &ServeArgs) -> Result<riptide::Options, ServeError> {
    let defaults = riptide::Options::default();
    let mut opts = riptide::Options {
        block_cache_size: args.block_cache_size.unwrap_or(defaults.block_cache_size),
        write_buffer_size: args.write_buffer_size.unwrap_or(defaults.write_buffer_size),
        ..defaults
    };
    args.codecs.apply(&mut opts).map_err(ServeError::Usage)?;
    args.objects.apply(&mut opts).map_err(ServeError::Usage)?;
    opts.validate().map_err(|e| ServeError::Usage(e.to_string()))?;
    Ok(opts)
}

/// Runs the server until SIGTERM/SIGINT.
pub fn run(args: &ServeArgs) -> Result<(), ServeError> {
    // A server must outlive its clients: a write to a socket (or a stdout) whose reader is gone
    // is an error to handle, not a signal that ends the process (main sets SIGPIPE to SIG_DFL
    // for `riptide bench | head`).
    // SAFETY: setting a signal disposition before the runtime's threads exist.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    if args.max_allowed_packet < 1024 || args.max_allowed_packet > 1 << 30 {
        return Err(ServeError::Usage(
            "--max-allowed-packet must be between 1024 and 1073741824".into(),
        ));
    }
    let users = args.users.users()?;
    init_logging();
    let config = ServerConfig {
        data_dir: args.data_dir.clone(),
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        users,
        max_allowed_packet: args.max_allowed_packet,
        session: SessionConfig {
            sync: args.sync == 1,
            lock_wait_timeout: Duration::from_secs(args.lock_wait_timeout),
            current_reads: args.locking_reads == LockingReads::Latest,
        },
        create_databases: args.create_databases.clone(),
        engine: engine_options(args)?,
        cluster: cluster_setup(&args.cluster)?,
    };
    if config.cluster.is_some() && config.engine.object_store.is_some() {
        return Err(ServeError::Usage(riptide_server::server::REPLICA_OBJECT_TIER.into()));
    }
    network_runtime(args.threads)?
        .block_on(run_until_signal(config))
        .map_err(|e| ServeError::Runtime(e.to_string()))
}

/// Logs to stderr at INFO (openraft's narration of elections at WARN), for `riptide serve` and
/// `riptide router`.
pub(crate) fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // openraft narrates every election and startup at INFO; its warnings are enough here.
    let filter = tracing_subscriber::filter::Targets::new()
        .with_default(tracing_subscriber::filter::LevelFilter::INFO)
        .with_target("openraft", tracing_subscriber::filter::LevelFilter::WARN);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(filter)
        .try_init();
}

/// The network runtime of `riptide serve` and `riptide router`: `threads` workers (`--threads`,
/// 1 to 1024), or one per core.
pub(crate) fn network_runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime, ServeError> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(t) = threads {
        if t == 0 || t > 1024 {
            return Err(ServeError::Usage("--threads must be between 1 and 1024".into()));
        }
        rt.worker_threads(t);
    }
    rt.build().map_err(|e| ServeError::Runtime(format!("runtime: {e}")))
}
