//! [`FaultProxy`]: an HTTP proxy on loopback that sits between an S3 client and an
//! S3-compatible server and injects, per request, what a real object store does on a bad day:
//! latency, 5xx answers, throttling (503 SlowDown), connection resets and requests that hang
//! past the client's timeout. For fault tests and for benchmarks with a realistic round trip.
//!
//! Invariants:
//! - Each client connection carries one request: the proxy forwards it upstream with
//!   `Connection: close`, relays the whole answer, and closes. (Clients reconnect; the proxy
//!   never has to find where an answer ends.)
//! - Faults are consumed in the order injected; a fault applies to the next request whose
//!   method matches (any method when none is given). A request with no fault pending is
//!   forwarded after the configured latency.
//! - Everything listens on and connects to loopback only.

use parking_lot::Mutex;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the proxy does to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and S3 error code (`503, "SlowDown"`, `500,
    /// "InternalError"`, `403, "AccessDenied"`) without forwarding.
    Status(u16, &'static str),
    /// Close the connection without answering (a reset).
    Reset,
    /// Hold the request this long without answering, then close (a timeout, when longer than
    /// the client's).
    Hang(Duration),
}

#[derive(Debug)]
struct Pending {
    method: Option<String>,
    fault: Fault,
    left: u64,
}

#[derive(Debug, Default)]
struct State {
    latency: Mutex<Duration>,
    pending: Mutex<Vec<Pending>>,
    requests: AtomicU64,
    injected: AtomicU64,
    stop: AtomicBool,
}

/// A fault-injecting HTTP proxy in front of an upstream server; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let st = state.clone();
        let thread = std::thread::Builder::new().name("fault-proxy".into()).spawn(move || {
            for conn in listener.incoming() {
                if st.stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                let _ = std::thread::Builder::new()
                    .name("fault-proxy-conn".into())
                    .spawn(move || {
                        let _ = serve(&st, conn, upstream);
                    });
            }
        })?;
        Ok(FaultProxy {
            addr,
            state,
            thread: Some(thread),
        })
    }

    /// The proxy's endpoint (`http://127.0.0.1:PORT`), for [`crate::S3Options::endpoint`].
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds `latency` before every forwarded request (and before every injected fault).
    pub fn set_latency(&self, latency: Duration) {
        *self.state.latency.lock() = latency;
    }

    /// The next `count` requests with HTTP `method` (`"PUT"`, `"GET"`, `"DELETE"`; `None` =
    /// any) get `fault`.
    pub fn inject(&self, method: Option<&str>, fault: Fault, count: u64) {
        self.state.pending.lock().push(Pending {
            method: method.map(str::to_string),
            fault,
            left: count,
        });
    }

    /// Drops every pending fault.
    pub fn clear(&self) {
        self.state.pending.lock().clear();
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.state.injected.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request: its head (up to and including the blank line) and body.
struct Request {
    method: String,
    head: Vec<u8>,
    body: Vec<u8>,
}

/// Reads one request from `conn`; `None` at a clean end of stream.
fn read_request(conn: &mut TcpStream) -> io::Result<Option<Request>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte)? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
        if head.len() > 64 << 10 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "request head too large"));
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let method = text.split_whitespace().next().unwrap_or("").to_string();
    let len = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    Ok(Some(Request { method, head, body }))
}

/// The head with any `Connection` header replaced by `Connection: close`.
fn closing_head(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    for (i, line) in text.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
        if i == 0 {
            out.push_str("Connection: close\r\n");
        }
    }
    out.push_str("\r\n");
    out.into_bytes()
}

fn take_fault(st: &State, method: &str) -> Option<Fault> {
    let mut pending = st.pending.lock();
    let at = pending
        .iter()
        .position(|p| p.left > 0 && p.method.as_deref().is_none_or(|m| m == method))?;
    let p = &mut pending[at];
    p.left -= 1;
    let fault = p.fault.clone();
    pending.retain(|p| p.left > 0);
    st.injected.fetch_add(1, Ordering::Relaxed);
    Some(fault)
}

fn reason(status: u16) -> &'static str {
    match status {
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Slow Down",
        _ => "Error",
    }
}

fn serve(st: &State, mut conn: TcpStream, upstream: SocketAddr) -> io::Result<()> {
    let Some(req) = read_request(&mut conn)? else {
        return Ok(());
    };
    st.requests.fetch_add(1, Ordering::Relaxed);
    let latency = *st.latency.lock();
    if !latency.is_zero() {
        std::thread::sleep(latency);
    }
    match take_fault(st, &req.method) {
        Some(Fault::Reset) => {
            let _ = conn.shutdown(Shutdown::Both);
            Ok(())
        }
        Some(Fault::Hang(d)) => {
            std::thread::sleep(d);
            let _ = conn.shutdown(Shutdown::Both);
            Ok(())
        }
        Some(Fault::Status(status, code)) => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the fault proxy</Message></Error>"
            );
            let answer = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                reason(status),
                body.len()
            );
            conn.write_all(answer.as_bytes())?;
            let _ = conn.shutdown(Shutdown::Both);
            Ok(())
        }
        None => {
            let mut up = TcpStream::connect(upstream)?;
            up.write_all(&closing_head(&req.head))?;
            up.write_all(&req.body)?;
            let mut answer = Vec::new();
            up.read_to_end(&mut answer)?;
            conn.write_all(&answer)?;
            let _ = conn.shutdown(Shutdown::Both);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_get_connection_close() {
        let head = b"GET /b/k HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n";
        let out = String::from_utf8(closing_head(head)).unwrap();
        assert_eq!(out, "GET /b/k HTTP/1.1\r\nConnection: close\r\nHost: x\r\n\r\n");
    }

    #[test]
    fn faults_match_methods_and_run_out() {
        let st = State::default();
        st.pending.lock().push(Pending {
            method: Some("PUT".into()),
            fault: Fault::Reset,
            left: 2,
        });
        assert_eq!(take_fault(&st, "GET"), None);
        assert_eq!(take_fault(&st, "PUT"), Some(Fault::Reset));
        assert_eq!(take_fault(&st, "PUT"), Some(Fault::Reset));
        assert_eq!(take_fault(&st, "PUT"), None);
        assert_eq!(st.injected.load(Ordering::Relaxed), 2);
    }
}
