//! A cluster of `riptide serve` replicas of one partition for the fault tests, and its
//! nemesis: kill -9 (and restart), SIGSTOP/SIGCONT, and network partitions.
//!
//! Node `i` listens for Raft at `127.0.0.(10+i)` and its peers reach it through a TCP proxy
//! in this process at the same address (the address in the membership). A node's outgoing
//! connections leave from its own address, so each proxy knows which node a connection comes
//! from, and a partition is a set of refused (and cut) links.

#![allow(dead_code)]

use crate::serve_common::Server;
use riptide_server::client::Client;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

fn node_ip(id: u64) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + id as u8)
}

fn node_of(ip: IpAddr) -> Option<u64> {
    match ip {
        IpAddr::V4(v4) if v4.octets()[..3] == [127, 0, 0] && v4.octets()[3] > 10 => {
            Some(u64::from(v4.octets()[3] - 10))
        }
        _ => None,
    }
}

/// A proxy in front of one node's Raft listener.
struct Proxy {
    addr: SocketAddr,
    /// Nodes whose connections are refused.
    blocked: Arc<Mutex<HashSet<u64>>>,
    /// Open links by id: the source node and both streams, to cut them. A link leaves the map
    /// when its pipes end, so a long run does not run out of descriptors.
    links: Links,
    stop: Arc<AtomicBool>,
}

type Links = Arc<Mutex<HashMap<u64, (u64, TcpStream, TcpStream)>>>;

impl Proxy {
    fn start(ip: Ipv4Addr, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = Proxy {
            addr,
            blocked: Arc::default(),
            links: Arc::default(),
            stop: Arc::default(),
        };
        let (blocked, links, stop) = (proxy.blocked.clone(), proxy.links.clone(), proxy.stop.clone());
        thread::spawn(move || {
            let mut next_id = 0u64;
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(inbound) = conn else {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                };
                // A connection from outside the cluster (`riptide cluster` run by a test) is
                // source 0, which no partition blocks.
                let Ok(peer) = inbound.peer_addr() else {
                    continue;
                };
                let src = node_of(peer.ip()).unwrap_or(0);
                if blocked.lock().unwrap().contains(&src) {
                    continue;
                }
                let Ok(outbound) = TcpStream::connect_timeout(&target, Duration::from_secs(1)) else {
                    continue;
                };
                let _ = outbound.set_nodelay(true);
                let _ = inbound.set_nodelay(true);
                let clones = (|| {
                    Some((
                        inbound.try_clone().ok()?,
                        outbound.try_clone().ok()?,
                        inbound.try_clone().ok()?,
                        outbound.try_clone().ok()?,
                    ))
                })();
                let Some((in_cut, out_cut, in_copy, out_copy)) = clones else {
                    continue;
                };
                next_id += 1;
                links.lock().unwrap().insert(next_id, (src, in_cut, out_cut));
                pipe(in_copy, out_copy, next_id, links.clone());
                pipe(outbound, inbound, next_id, links.clone());
            }
        });
        proxy
    }

    /// Refuses (and cuts) connections from `src`.
    fn block(&self, src: u64) {
        self.blocked.lock().unwrap().insert(src);
        for (s, a, b) in self.links.lock().unwrap().values() {
            if *s == src {
                let _ = a.shutdown(Shutdown::Both);
                let _ = b.shutdown(Shutdown::Both);
            }
        }
    }

    fn heal(&self) {
        self.blocked.lock().unwrap().clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        for (_, a, b) in self.links.lock().unwrap().values() {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` into `to` until either end closes, then closes both and forgets link `id`.
fn pipe(mut from: TcpStream, mut to: TcpStream, id: u64, links: Links) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        links.lock().unwrap().remove(&id);
    });
}

/// One replica process.
pub struct Node {
    pub id: u64,
    dir: PathBuf,
    raft_listen: SocketAddr,
    server: Option<Server>,
    /// Its MySQL port (of the running process).
    pub port: u16,
    pub paused: bool,
}

/// What the nemesis did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    KillLeader,
    /// Kills the leader with SIGKILL and starts it again at once: back before its followers
    /// stand, it leads its old term again (openraft restores it), with entries of its previous
    /// run in its log that it has not applied.
    RestartLeader,
    KillFollower,
    PartitionLeader,
    Pause,
}

/// A cluster of replicas.
pub struct Cluster {
    _root: tempfile::TempDir,
    secret: PathBuf,
    pub nodes: Vec<Node>,
    proxies: Vec<Proxy>,
    members: String,
    election_timeout_ms: u64,
    /// More `riptide serve` flags for every node.
    extra_flags: Vec<String>,
    /// MySQL ports of the live (running, not paused) nodes, for client threads.
    pub ports: Arc<Mutex<Vec<u16>>>,
}

/// How long clients wait for any answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(4);

impl Cluster {
    /// Starts `n` replicas (node 1 .. n) that form one group, with `create-database sbtest`.
    pub fn start(n: u64, election_timeout_ms: u64) -> Cluster {
        Cluster::start_with(n, election_timeout_ms, &[])
    }

    /// [`Cluster::start`], every node with the `extra` flags too.
    pub fn start_with(n: u64, election_timeout_ms: u64, extra: &[&str]) -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("secret");
        std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
        let mut nodes = Vec::new();
        let mut proxies = Vec::new();
        for id in 1..=n {
            let ip = node_ip(id);
            // Held until the proxy has its own port, so the two differ.
            let reserved = TcpListener::bind((ip, 0)).unwrap();
            let raft_listen = reserved.local_addr().unwrap();
            proxies.push(Proxy::start(ip, raft_listen));
            drop(reserved);
            nodes.push(Node {
                id,
                dir: root.path().join(format!("node{id}")),
                raft_listen,
                server: None,
                port: 0,
                paused: false,
            });
        }
        let members: Vec<String> = proxies
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}={}", i + 1, p.addr))
            .collect();
        let mut cluster = Cluster {
            _root: root,
            secret,
            nodes,
            proxies,
            members: members.join(","),
            election_timeout_ms,
            extra_flags: extra.iter().map(|f| f.to_string()).collect(),
            ports: Arc::default(),
        };
        for i in 0..cluster.nodes.len() {
            cluster.launch(i);
        }
        cluster
    }

    fn launch(&mut self, i: usize) {
        let node = &self.nodes[i];
        let (id, raft, timeout) = (
            node.id.to_string(),
            node.raft_listen.to_string(),
            self.election_timeout_ms.to_string(),
        );
        let flags = [
            "--node-id",
            &id,
            "--raft-listen",
            &raft,
            "--cluster-secret-file",
            self.secret.to_str().unwrap(),
            "--bootstrap",
            &self.members,
            "--election-timeout-ms",
            &timeout,
        ];
        let mut flags = flags.to_vec();
        flags.extend(self.extra_flags.iter().map(String::as_str));
        let server = Server::start_with(&node.dir, true, &flags);
        let node = &mut self.nodes[i];
        node.port = server.port;
        node.server = Some(server);
        node.paused = false;
        self.publish_ports();
    }

    fn publish_ports(&self) {
        *self.ports.lock().unwrap() = self.live_ports();
    }

    /// MySQL ports of the nodes that run and are not paused.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.server.is_some() && !n.paused)
            .map(|n| n.port)
            .collect()
    }

    /// The index of the node that leads now, if one answers as leader.
    pub fn leader(&self) -> Option<usize> {
        let port = leader_port(&self.live_ports())?;
        self.nodes.iter().position(|n| n.port == port)
    }

    /// Waits (at most 30 s) for a leader.
    pub fn wait_for_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            assert!(Instant::now() < deadline, "no leader within 30 s");
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills node `i` with SIGKILL; returns it and the instant of the kill.
    pub fn kill(&mut self, i: usize) -> (usize, Instant) {
        self.nodes[i].server.take().unwrap().kill9();
        let at = Instant::now();
        self.publish_ports();
        (i, at)
    }

    /// Starts node `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        self.launch(i);
    }

    /// Runs one fault for about `hold`, then undoes it (restart, heal, resume).
    pub fn inject(&mut self, fault: Fault, hold: Duration, pick: usize) -> Option<String> {
        let leader = self.leader()?;
        let n = self.nodes.len();
        let target = match fault {
            Fault::KillLeader | Fault::RestartLeader | Fault::PartitionLeader => leader,
            Fault::KillFollower => (leader + 1 + pick % (n - 1)) % n,
            Fault::Pause => pick % n,
        };
        let id = self.nodes[target].id;
        match fault {
            Fault::KillLeader | Fault::KillFollower => {
                self.nodes[target].server.take().unwrap().kill9();
                self.publish_ports();
                thread::sleep(hold);
                self.launch(target);
            }
            Fault::RestartLeader => {
                self.nodes[target].server.take().unwrap().kill9();
                self.launch(target);
                thread::sleep(hold);
            }
            Fault::PartitionLeader => {
                self.isolate(target);
                thread::sleep(hold);
                self.heal();
            }
            Fault::Pause => {
                let pid = self.nodes[target].server.as_ref().unwrap().pid();
                self.nodes[target].paused = true;
                self.publish_ports();
                // SAFETY: kill(2) on our own child, which has not been reaped.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                thread::sleep(hold);
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                self.nodes[target].paused = false;
                self.publish_ports();
            }
        }
        Some(format!("{fault:?} node {id}"))
    }

    /// Moves the leadership to node `i` (`riptide cluster transfer-leader`).
    pub fn transfer_leader(&self, i: usize) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_riptide"))
            .args(["cluster", "transfer-leader", "--node"])
            .arg(self.nodes[i].raft_listen.to_string())
            .args(["--to", &self.nodes[i].id.to_string(), "--cluster-secret-file"])
            .arg(&self.secret)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "transfer-leader: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Cuts node `i` off from every peer, both ways, until [`Cluster::heal`].
    pub fn isolate(&self, i: usize) {
        let id = self.nodes[i].id;
        for (j, p) in self.proxies.iter().enumerate() {
            if j == i {
                for other in self.nodes.iter().map(|n| n.id).filter(|&o| o != id) {
                    p.block(other);
                }
            } else {
                p.block(id);
            }
        }
    }

    /// Ends every partition.
    pub fn heal(&self) {
        for p in &self.proxies {
            p.heal();
        }
    }

    /// Stops every node (SIGTERM, exit status 0).
    pub fn stop(mut self) {
        for n in self.nodes.iter_mut() {
            if let Some(s) = n.server.take() {
                s.stop();
            }
        }
    }
}

/// A client of the node at `port`, every wait bounded by [`CLIENT_TIMEOUT`].
pub fn connect(port: u16) -> Option<Client> {
    Client::connect_within(("127.0.0.1", port), "root", "", None, CLIENT_TIMEOUT).ok()
}

/// The port of the node that leads now: a gated statement there reaches the table check
/// (1146, 1049 or success) instead of 1290.
pub fn leader_port(ports: &[u16]) -> Option<u16> {
    for &port in ports {
        let Some(mut c) = connect(port) else { continue };
        match c.query("DELETE FROM sbtest.no_such_table WHERE 1 = 0") {
            Ok(_) => return Some(port),
            Err(e) if matches!(e.code(), Some(1146) | Some(1049)) => return Some(port),
            Err(_) => {}
        }
    }
    None
}

/// Waits (at most 30 s) for a node among `ports` that leads; its port.
pub fn wait_for_leader_port(ports: &[u16]) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = leader_port(ports) {
            return p;
        }
        assert!(Instant::now() < deadline, "no leader within 30 s");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `sql` on the leader among the live `ports`, retrying (at most 30 s) while there is
/// none, the database does not exist yet, or leadership moves.
pub fn on_leader(ports: &Mutex<Vec<u16>>, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut unknown = false;
    loop {
        let live = ports.lock().unwrap().clone();
        let port = wait_for_leader_port(&live);
        if let Some(mut c) = connect(port) {
            match c.query(sql) {
                Ok(_) => return,
                // An earlier try whose outcome was unknown did create the table or the rows.
                Err(e) if unknown && matches!(e.code(), Some(1050) | Some(1062)) => return,
                Err(e) if matches!(e.code(), Some(1290) | Some(1049)) => {}
                // Outcome unknown (1180, or no answer): try again, and accept "already there".
                Err(e) if matches!(e.code(), Some(1180) | None) => unknown = true,
                Err(e) => panic!("{sql} on the leader: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "{sql}: no leader took it within 30 s");
        thread::sleep(Duration::from_millis(50));
    }
}
