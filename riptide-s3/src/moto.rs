//! [`Moto`]: moto's S3 server (PyPI `moto[server]`), started on a free loopback port and
//! killed on drop, for tests and benchmark scripts of the object tier.
//!
//! Invariants: it runs the Python of the virtual environment `scripts/setup.sh` makes
//! (`target/venv`, or `RIPTIDE_MOTO_PYTHON`); a missing environment is an error that says how
//! to make it (tests unwrap it: never a skipped test). The server listens on 127.0.0.1 only and
//! starts with one bucket, `riptide`.

use crate::{S3Options, S3Store};
use riptide::tier::ObjectResult;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python of the virtual environment `scripts/setup.sh` makes (moto installed).
fn python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RIPTIDE_MOTO_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    if !p.exists() {
        return Err(format!(
            "{} is missing: run scripts/setup.sh (it installs moto[server] for the object tier's tests)",
            p.display()
        ));
    }
    Ok(p)
}

/// A running moto S3 server; killed on drop.
pub struct Moto {
    child: Child,
    /// The server's address.
    pub addr: SocketAddr,
}

impl Moto {
    /// Starts a server and creates bucket `riptide`.
    pub fn start() -> Result<Moto, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let child = Command::new(python()?)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start moto (run scripts/setup.sh): {e}"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut moto = Moto { child, addr };
        let start = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                return Err(format!("moto exited at start: {status}"));
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err("moto did not start within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        moto.create_bucket("riptide")?;
        Ok(moto)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates a bucket (moto accepts unsigned requests).
    pub fn create_bucket(&mut self, name: &str) -> Result<(), String> {
        let mut answer = String::new();
        TcpStream::connect(self.addr)
            .and_then(|mut c| {
                write!(
                    c,
                    "PUT /{name} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    self.addr
                )?;
                c.read_to_string(&mut answer)
            })
            .map_err(|e| format!("create bucket {name}: {e}"))?;
        if !answer.starts_with("HTTP/1.1 200") {
            return Err(format!("create bucket {name}: {}", answer.lines().next().unwrap_or("")));
        }
        Ok(())
    }

    /// A store on bucket `riptide` under `prefix`, through `endpoint` (this server or a
    /// [`crate::fault_proxy::FaultProxy`] in front of it), with moto's test credentials.
    pub fn store_at(&self, endpoint: &str, prefix: &str, request_timeout: Duration) -> ObjectResult<S3Store> {
        S3Store::new(S3Options {
            endpoint: Some(endpoint.to_string()),
            credentials: Some(("testing".into(), "testing".into())),
            request_timeout,
            ..S3Options::new(format!("s3://riptide/{prefix}"))
        })
    }

    /// A store on bucket `riptide` under `prefix`, straight to the server.
    pub fn store(&self, prefix: &str) -> ObjectResult<S3Store> {
        self.store_at(&self.endpoint(), prefix, Duration::from_secs(10))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
