//! A `riptide router` process for the router tests.

#![allow(dead_code)]

use riptide_server::client::Client;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `riptide router`, killed when dropped.
pub struct Router {
    child: Child,
    /// Its MySQL port on 127.0.0.1.
    pub port: u16,
}

impl Router {
    /// A router over `partitions` (each a list of replica ports), waiting up to 15 s for a
    /// partition's leader.
    pub fn start(partitions: &[Vec<u16>]) -> Router {
        Router::start_with(partitions, &[], &[])
    }

    /// [`Router::start`] with more flags and environment variables.
    pub fn start_with(partitions: &[Vec<u16>], extra: &[&str], env: &[(&str, &str)]) -> Router {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_riptide"));
        cmd.args(["router", "--listen", "127.0.0.1:0", "--leader-wait-ms", "15000"]);
        for p in partitions {
            let list: Vec<String> = p.iter().map(|port| format!("127.0.0.1:{port}")).collect();
            cmd.args(["--partition", &list.join(",")]);
        }
        cmd.args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn riptide router");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("riptide router: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Router { child, port }
    }

    /// A client in database `sbtest`, once the partitions have it (each creates it at start,
    /// a replicated one through its first leader).
    pub fn client(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let port = ("127.0.0.1", self.port);
            match Client::connect_within(port, "root", "", Some("sbtest"), Duration::from_secs(30)) {
                Ok(c) => return c,
                Err(e) if e.code() == Some(1049) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("connect to the router: {e}"),
            }
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
