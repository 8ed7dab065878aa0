//! `riptide router`: the MySQL-protocol router over a partitioned database (crate
//! `riptide-server`, module `router`; docs/cluster.md, "Partitions and the router").

use crate::serve::{ServeError, UserArgs};
use clap::Args;
use riptide_server::router::{run_until_signal, RouterConfig};
use std::net::SocketAddr;
use std::time::Duration;

/// Route MySQL clients' statements to the partitions that hold their rows.
#[derive(Args, Debug)]
pub struct RouterArgs {
    /// Address for MySQL clients; loopback unless another address is named.
    #[arg(long, default_value = "127.0.0.1:3306")]
    listen: SocketAddr,
    /// One partition's replicas (their `riptide serve --listen` addresses), comma-separated;
    /// repeated once per partition, in partition order. The order and count place rows and must
    /// never change for a database.
    #[arg(long = "partition", required = true)]
    partitions: Vec<String>,
    /// Users (the router logs in to the partitions as the client's user, with its password).
    #[command(flatten)]
    users: UserArgs,
    /// How long a statement waits for a partition to have a leader, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    leader_wait_ms: u64,
    /// How long a branch of a cross-partition transaction may stay prepared before this
    /// router's resolver finishes it by the decision of its home partition (aborting it if its
    /// coordinator recorded none), in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    xa_resolve_after_ms: u64,
    /// Worker threads of the network runtime (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Parses `a,b,c` into socket addresses.
fn replicas(list: &str) -> Result<Vec<SocketAddr>, String> {
    let addrs = list
        .split(',')
        .map(|a| a.trim().parse::<SocketAddr>().map_err(|e| format!("{a:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.is_empty() || addrs.len() > 16 {
        return Err(format!("{list:?}: 1 to 16 replicas"));
    }
    Ok(addrs)
}

/// Runs the router until SIGTERM/SIGINT.
pub fn run(args: &RouterArgs) -> Result<(), ServeError> {
    // SAFETY: setting a signal disposition before the runtime's threads exist (as `serve`).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    if !(1..=600_000).contains(&args.leader_wait_ms) {
        return Err(ServeError::Usage("--leader-wait-ms must be 1..=600000".into()));
    }
    if !(100..=86_400_000).contains(&args.xa_resolve_after_ms) {
        return Err(ServeError::Usage("--xa-resolve-after-ms must be 100..=86400000".into()));
    }
    let users = args.users.users()?;
    crate::serve::init_logging();
    let partitions = args
        .partitions
        .iter()
        .map(|p| replicas(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServeError::Usage(format!("--partition {e}")))?;
    let mut config = RouterConfig::new(args.listen, users, partitions);
    config.leader_wait = Duration::from_millis(args.leader_wait_ms);
    config.xa_resolve_after = Duration::from_millis(args.xa_resolve_after_ms);
    crate::serve::network_runtime(args.threads)?
        .block_on(run_until_signal(config))
        .map_err(|e| ServeError::Runtime(e.to_string()))
}
