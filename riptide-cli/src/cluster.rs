//! `riptide cluster`: administration of a replicated partition's nodes (status, forming the
//! group, adding and removing members, moving the leadership), over the nodes' own
//! authenticated Raft transport (`riptide_cluster::admin`).

use clap::{Args, Subcommand};
use riptide_cluster::admin::{call, AdminError, AdminReply, AdminRequest, NodeStatus};
use riptide_cluster::transport::ClusterAuth;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one admin call may take (adding a node waits for it to catch up).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Administer the nodes of a replicated partition (docs/cluster.md)
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    /// A node's Raft address (`--raft-listen` of `riptide serve`).
    #[arg(long, global = true)]
    node: Option<String>,
    /// The file holding the cluster's shared secret.
    #[arg(long, global = true)]
    cluster_secret_file: Option<PathBuf>,
    /// The cluster's name.
    #[arg(long, global = true, default_value = "riptide")]
    cluster_name: String,
    #[command(flatten)]
    tls: TlsArgs,
}

/// TLS between nodes (and from `riptide cluster`): all three files, or none (docs/cluster.md).
#[derive(Args, Debug, Default)]
pub struct TlsArgs {
    /// This node's certificate chain (PEM), issued by the cluster's CA; it must name the
    /// node's Raft address (an IP address SAN, or a DNS SAN for a host name).
    #[arg(long, global = true)]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, global = true)]
    tls_key: Option<PathBuf>,
    /// The cluster's CA certificate(s) (PEM): a peer must present a certificate it issued.
    #[arg(long, global = true)]
    tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// `auth` with TLS when the three files are named; an error when only some are.
    pub fn apply(&self, auth: ClusterAuth) -> Result<ClusterAuth, String> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (None, None, None) => Ok(auth),
            (Some(cert), Some(key), Some(ca)) => {
                let tls =
                    riptide_cluster::transport::NodeTls::from_pem_files(cert, key, ca).map_err(|e| e.to_string())?;
                Ok(auth.with_tls(tls))
            }
            _ => Err("--tls-cert, --tls-key and --tls-ca go together".into()),
        }
    }

    /// True when any TLS file is named.
    pub fn any(&self) -> bool {
        self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_ca.is_some()
    }
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// The node's role, term, leader, log indexes, members and, on the leader, each follower's lag
    Status,
    /// Forms the group with these members if the node's log is empty (`1=addr,2=addr,...`)
    Init {
        #[arg(long)]
        members: String,
    },
    /// Adds a node (started without --bootstrap) as a voter, once it has caught up
    AddNode {
        #[arg(long)]
        id: u64,
        /// Its Raft address.
        #[arg(long)]
        addr: String,
    },
    /// Removes a node from the voters
    RemoveNode {
        #[arg(long)]
        id: u64,
    },
    /// Moves the leadership to node `to` (it stands for election)
    TransferLeader {
        #[arg(long)]
        to: u64,
    },
}

/// Errors of `riptide cluster`.
#[derive(Debug)]
pub enum ClusterCliError {
    /// Exit status 2.
    Usage(String),
    /// Exit status 1.
    Failed(String),
}

impl ClusterCliError {
    /// The process exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClusterCliError::Usage(_) => 2,
            ClusterCliError::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for ClusterCliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterCliError::Usage(m) | ClusterCliError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<AdminError> for ClusterCliError {
    fn from(e: AdminError) -> Self {
        ClusterCliError::Failed(e.to_string())
    }
}

/// The cluster's credentials from a secret file (trailing newlines ignored).
pub fn read_auth(name: &str, path: &Path) -> Result<ClusterAuth, String> {
    let mut secret = std::fs::read(path).map_err(|e| format!("--cluster-secret-file {}: {e}", path.display()))?;
    while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        secret.pop();
    }
    ClusterAuth::new(name, &secret).map_err(|e| format!("--cluster-secret-file: {e}"))
}

/// `1=addr,2=addr` → members (ids from 1, addresses that parse, no id twice).
pub fn parse_members(list: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut members = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not id=address"))?;
        let id: u64 = id
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| format!("{id:?} is not a node id (1, 2, ...)"))?;
        addr.parse::<std::net::SocketAddr>()
            .map_err(|e| format!("{addr:?}: {e}"))?;
        if members.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is named twice"));
        }
    }
    if members.is_empty() {
        return Err("no member named".into());
    }
    Ok(members)
}

fn print_status(s: &NodeStatus) {
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    println!(
        "node {}: {}, term {}, leader {}, last log {}, applied {}, purged {}",
        s.id,
        s.state,
        s.term,
        opt(s.leader),
        opt(s.last_log_index),
        opt(s.applied_index),
        opt(s.purged_index)
    );
    let list = |m: &BTreeMap<u64, String>| {
        if m.is_empty() {
            "-".to_string()
        } else {
            m.iter()
                .map(|(id, a)| format!("{id}={a}"))
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    println!("  voters: {}", list(&s.voters));
    println!("  learners: {}", list(&s.learners));
    let last = s.last_log_index.unwrap_or(0);
    for (id, matched) in s.matched.iter().filter(|(id, _)| **id != s.id) {
        println!(
            "  follower {id}: matched {}, lag {}",
            opt(*matched),
            last.saturating_sub(matched.unwrap_or(0))
        );
    }
}

/// Sends `request` to `addr`; a membership change answered "not the leader" is sent once more
/// to the leader it names.
async fn call_leader(addr: &str, auth: &ClusterAuth, request: AdminRequest) -> Result<AdminReply, ClusterCliError> {
    match call(addr, auth, request.clone(), CALL_TIMEOUT).await {
        Err(AdminError::NotLeader {
            leader_addr: Some(leader),
            ..
        }) if leader != addr => {
            eprintln!("riptide cluster: {addr} does not lead; asking the leader at {leader}");
            Ok(call(&leader, auth, request, CALL_TIMEOUT).await?)
        }
        other => Ok(other?),
    }
}

async fn status_of(addr: &str, auth: &ClusterAuth) -> Result<NodeStatus, ClusterCliError> {
    match call(addr, auth, AdminRequest::Status, CALL_TIMEOUT).await? {
        AdminReply::Status(s) => Ok(s),
        other => Err(ClusterCliError::Failed(format!("{addr} answered {other:?}"))),
    }
}

async fn execute(args: &ClusterArgs, addr: &str, auth: &ClusterAuth) -> Result<(), ClusterCliError> {
    match &args.command {
        ClusterCommand::Status => print_status(&status_of(addr, auth).await?),
        ClusterCommand::Init { members } => {
            let members = parse_members(members).map_err(|e| ClusterCliError::Usage(format!("--members: {e}")))?;
            match call(addr, auth, AdminRequest::Initialize(members), CALL_TIMEOUT).await? {
                AdminReply::Initialized(true) => println!("the group is formed"),
                _ => println!("the node's log is not empty: the group was formed before; nothing changed"),
            }
        }
        ClusterCommand::AddNode { id, addr: node_addr } => {
            if *id == 0 {
                return Err(ClusterCliError::Usage("--id starts at 1".into()));
            }
            node_addr
                .parse::<std::net::SocketAddr>()
                .map_err(|e| ClusterCliError::Usage(format!("--addr {node_addr:?}: {e}")))?;
            let request = AdminRequest::AddNode {
                id: *id,
                addr: node_addr.clone(),
            };
            call_leader(addr, auth, request).await?;
            println!("node {id} is a voter");
        }
        ClusterCommand::RemoveNode { id } => {
            call_leader(addr, auth, AdminRequest::RemoveNode { id: *id }).await?;
            println!("node {id} is no longer a member");
        }
        ClusterCommand::TransferLeader { to } => {
            let status = status_of(addr, auth).await?;
            let target = status
                .voters
                .get(to)
                .ok_or_else(|| ClusterCliError::Failed(format!("node {to} is not a voter of {addr}'s group")))?
                .clone();
            if status.leader == Some(*to) {
                println!("node {to} leads already");
                return Ok(());
            }
            // openraft 0.9 has no leadership transfer. The other voters stop standing for
            // election; the leader refuses writes and read barriers (clients get 1290 and try
            // again) and stops its heartbeats, so no append renews the followers' leases; once
            // they run out the target stands (again) until it wins. Each of these undoes
            // itself within 15 s if this command goes away.
            let old_leader = status.leader.and_then(|l| status.voters.get(&l).cloned());
            let bystanders: Vec<String> = status
                .voters
                .iter()
                .filter(|(id, _)| **id != *to)
                .map(|(_, a)| a.clone())
                .collect();
            for voter in &bystanders {
                // Best effort: a voter that is down does not stand either.
                let _ = call(voter, auth, AdminRequest::Elections(false), CALL_TIMEOUT).await;
            }
            if let Some(l) = &old_leader {
                call(l, auth, AdminRequest::PauseWrites(true), CALL_TIMEOUT).await?;
                // The target cannot win while its log lacks an entry the others hold: with
                // writes paused, let it catch up to the leader's log first (best effort, 5 s;
                // under load it may lag when the pause begins).
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    let (leader_log, target_log) = (status_of(l, auth).await?, status_of(&target, auth).await?);
                    if target_log.last_log_index >= leader_log.last_log_index {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                call(l, auth, AdminRequest::Heartbeats(false), CALL_TIMEOUT).await?;
            }
            let outcome = async {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    call(&target, auth, AdminRequest::Elect, CALL_TIMEOUT).await?;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let s = status_of(&target, auth).await?;
                    if s.leader == Some(*to) {
                        return Ok(s.term);
                    }
                    if Instant::now() > deadline {
                        return Err(ClusterCliError::Failed(format!(
                            "node {to} stood for election for 10 s without winning (leader: {:?})",
                            s.leader
                        )));
                    }
                }
            }
            .await;
            if let Some(l) = &old_leader {
                for request in [AdminRequest::Heartbeats(true), AdminRequest::PauseWrites(false)] {
                    if let Err(e) = call(l, auth, request.clone(), CALL_TIMEOUT).await {
                        eprintln!("riptide cluster: undoing {request:?} at {l} failed: {e}");
                    }
                }
            }
            for voter in &bystanders {
                if let Err(e) = call(voter, auth, AdminRequest::Elections(true), CALL_TIMEOUT).await {
                    eprintln!("riptide cluster: turning elections back on at {voter} failed: {e}");
                }
            }
            println!("node {to} leads (term {})", outcome?);
        }
    }
    Ok(())
}

/// Runs one `riptide cluster` command.
pub fn run(args: &ClusterArgs) -> Result<(), ClusterCliError> {
    let addr = args
        .node
        .as_deref()
        .ok_or_else(|| ClusterCliError::Usage("--node (a node's Raft address) is required".into()))?;
    let path = args
        .cluster_secret_file
        .as_ref()
        .ok_or_else(|| ClusterCliError::Usage("--cluster-secret-file is required".into()))?;
    let auth = read_auth(&args.cluster_name, path).map_err(ClusterCliError::Usage)?;
    let auth = args.tls.apply(auth).map_err(ClusterCliError::Usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterCliError::Failed(format!("runtime: {e}")))?;
    rt.block_on(execute(args, addr, &auth))
}
