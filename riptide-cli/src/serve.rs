//! `riptide serve`: the MySQL-protocol server (crate `riptide-server`) on a data directory.

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
    /// The user clients log in as (mysql_native_password).
    #[arg(long, default_value = "root")]
    user: String,
    /// That user's password (empty by default; also RIPTIDE_PASSWORD).
    #[arg(long, env = "RIPTIDE_PASSWORD", default_value = "", hide_env_values = true)]
    password: String,
    /// A file of more users, one `user:password` per line (`#` starts a comment).
    #[arg(long)]
    users_file: Option<PathBuf>,
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
    /// Databases to create at start when missing (repeatable).
    #[arg(long = "create-database")]
    create_databases: Vec<String>,
    /// Worker threads of the network runtime (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Errors of `riptide serve`.
#[derive(Debug)]
pub struct ServeError(pub String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn read_users(path: &PathBuf) -> Result<Vec<(String, String)>, ServeError> {
    let text = std::fs::read_to_string(path).map_err(|e| ServeError(format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (u, p) = line
            .split_once(':')
            .ok_or_else(|| ServeError(format!("{}:{}: expected user:password", path.display(), n + 1)))?;
        if u.is_empty() {
            return Err(ServeError(format!("{}:{}: empty user name", path.display(), n + 1)));
        }
        out.push((u.to_string(), p.to_string()));
    }
    Ok(out)
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
        return Err(ServeError(
            "--max-allowed-packet must be between 1024 and 1073741824".into(),
        ));
    }
    if args.user.is_empty() {
        return Err(ServeError("--user must not be empty (no anonymous access)".into()));
    }
    let mut users = vec![(args.user.clone(), args.password.clone())];
    if let Some(f) = &args.users_file {
        users.extend(read_users(f)?);
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    let config = ServerConfig {
        data_dir: args.data_dir.clone(),
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        users,
        max_allowed_packet: args.max_allowed_packet,
        session: SessionConfig {
            sync: args.sync == 1,
            lock_wait_timeout: Duration::from_secs(args.lock_wait_timeout),
        },
        create_databases: args.create_databases.clone(),
        engine: riptide::Options::default(),
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(t) = args.threads {
        if t == 0 || t > 1024 {
            return Err(ServeError("--threads must be between 1 and 1024".into()));
        }
        rt.worker_threads(t);
    }
    let rt = rt.build().map_err(|e| ServeError(format!("runtime: {e}")))?;
    rt.block_on(run_until_signal(config))
        .map_err(|e| ServeError(e.to_string()))
}
