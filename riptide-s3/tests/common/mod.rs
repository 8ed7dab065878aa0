//! Test harness: moto's S3 server, started and stopped by the test on a free loopback port.

#![allow(dead_code)]

use riptide_s3::{S3Options, S3Store};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python of the virtual environment `scripts/setup.sh` makes (moto installed).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RIPTIDE_MOTO_PYTHON") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup.sh (it installs moto[server] for these tests)",
        p.display()
    );
    p
}

/// A running moto S3 server; killed on drop.
pub struct Moto {
    child: Child,
    pub addr: SocketAddr,
}

impl Moto {
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(python())
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto (run scripts/setup.sh)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut moto = Moto { child, addr };
        let start = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto exited at start: {status}");
            }
            assert!(start.elapsed() < Duration::from_secs(30), "moto did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto.create_bucket("riptide");
        moto
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates a bucket (moto accepts unsigned requests).
    pub fn create_bucket(&mut self, name: &str) {
        let mut c = TcpStream::connect(self.addr).unwrap();
        write!(
            c,
            "PUT /{name} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
            "{answer}"
        );
    }

    /// A store on bucket `riptide` under `prefix`, through `endpoint` (moto or a proxy).
    pub fn store_at(&self, endpoint: &str, prefix: &str, request_timeout: Duration) -> S3Store {
        S3Store::new(S3Options {
            endpoint: Some(endpoint.to_string()),
            credentials: Some(("testing".into(), "testing".into())),
            request_timeout,
            ..S3Options::new(format!("s3://riptide/{prefix}"))
        })
        .unwrap()
    }

    pub fn store(&self, prefix: &str) -> S3Store {
        self.store_at(&self.endpoint(), prefix, Duration::from_secs(10))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
