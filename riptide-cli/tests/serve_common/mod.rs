//! A `riptide serve` child process for the server's integration tests (`serve*.rs`): started on
//! a free loopback port read from its first stdout line, stopped by SIGTERM (which must end it
//! with status 0) or killed with SIGKILL.

// Each test binary uses a part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `riptide serve`.
pub struct Server {
    child: Child,
    /// Its MySQL port on 127.0.0.1.
    pub port: u16,
}

impl Server {
    /// Starts `riptide serve` on `dir` with database `sbtest`; `sync` asks for durable commits.
    pub fn start(dir: &Path, sync: bool) -> Server {
        Server::start_with(dir, sync, &[])
    }

    /// [`Server::start`] with more flags.
    pub fn start_with(dir: &Path, sync: bool, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_riptide"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--create-database",
                "sbtest",
                "--sync",
            ])
            .arg(if sync { "1" } else { "0" })
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn riptide serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the first line");
        let addr = line
            .trim()
            .strip_prefix("riptide serve: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?} (did the server fail to start or recover?)"));
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Server { child, port }
    }

    /// Runs SQL through the `mysql` client in batch mode; returns (success, stdout, stderr).
    pub fn mysql(&self, db: Option<&str>, sql: &str) -> (bool, String, String) {
        let mut cmd = Command::new("mysql");
        cmd.args(["-h", "127.0.0.1", "-u", "root", "--batch", "--skip-column-names"])
            .arg(format!("-P{}", self.port))
            .args(["-e", sql]);
        if let Some(db) = db {
            cmd.arg(db);
        }
        let out = cmd
            .output()
            .expect("run mysql (scripts/setup.sh installs mariadb-client)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs a long SQL script (over the 128 KiB an argument may hold) through the `mysql`
    /// client's standard input; returns (success, stderr).
    pub fn mysql_script(&self, db: &str, sql: &str) -> (bool, String) {
        use std::io::Write;
        let mut child = Command::new("mysql")
            .args(["-h", "127.0.0.1", "-u", "root", "--batch", db])
            .arg(format!("-P{}", self.port))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run mysql (scripts/setup.sh installs mariadb-client)");
        child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// kill -9, then reap.
    pub fn kill9(mut self) {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 riptide serve");
        self.child.wait().expect("wait for the killed server");
    }

    /// SIGTERM; the server must exit with status 0 within 30 s.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "riptide serve exited with {status} after SIGTERM");
                return;
            }
            assert!(Instant::now() < deadline, "riptide serve did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free when asked (another process may take it before it is used).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
