//! Bad input against an in-process server: malformed and truncated packets, oversized
//! packets, connection floods, statements outside the subset, bad logins and a failing
//! statement inside a transaction. Each case gets an ERR packet or a closed connection, the
//! server keeps serving other clients, and nothing acknowledged is lost.

mod common;

use riptide_server::client::{Client, QueryResult};
use riptide_server::server::{start, RunningServer, ServerConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const MAX_PACKET: usize = 1 << 20;
/// Rows inserted into `d.t` before any bad input.
const ROWS: usize = 50;

fn config(dir: &std::path::Path) -> ServerConfig {
    common::config(dir, MAX_PACKET)
}

/// Starts a server with `d.t (id, k, c)` holding rows 1..=ROWS.
async fn server_with_rows(dir: &std::path::Path) -> RunningServer {
    let server = start(config(dir)).await.unwrap();
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut c = login(addr);
        c.query("CREATE TABLE t (id INT PRIMARY KEY, k INT, c VARCHAR(20), KEY k1(k))")
            .unwrap();
        let values: Vec<String> = (1..=ROWS).map(|i| format!("({i}, {}, 'row{i}')", i % 7)).collect();
        assert_eq!(
            c.query(&format!("INSERT INTO t VALUES {}", values.join(", "))).unwrap(),
            QueryResult::Ok {
                affected: ROWS as u64,
                last_insert_id: 0
            }
        );
    })
    .await
    .unwrap();
    server
}

fn login(addr: SocketAddr) -> Client {
    Client::connect(addr, "app", "s3cret", Some("d")).unwrap()
}

fn one_value(c: &mut Client, sql: &str) -> Option<String> {
    let rows = c.rows(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    assert_eq!(rows[0].len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone()
}

/// A fresh client on the same server sees exactly the rows inserted before.
fn assert_intact(addr: SocketAddr) {
    let mut c = login(addr);
    assert_eq!(one_value(&mut c, "SELECT COUNT(*) FROM t"), Some(ROWS.to_string()));
    assert_eq!(one_value(&mut c, "SELECT c FROM t WHERE id = 7"), Some("row7".into()));
    c.quit().unwrap();
}

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    out.push(seq);
    out.extend_from_slice(payload);
    out
}

/// Reads one packet: (sequence id, payload).
fn read_raw(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).unwrap();
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    (head[3], p)
}

/// Reads one packet that must be an ERR; its code and message.
fn read_err(s: &mut TcpStream) -> (u16, String) {
    let (_, p) = read_raw(s);
    assert_eq!(p.first(), Some(&0xFF), "expected ERR, got {p:?}");
    let code = u16::from_le_bytes([p[1], p[2]]);
    let msg = if p.get(3) == Some(&b'#') { &p[9..] } else { &p[3..] };
    (code, String::from_utf8_lossy(msg).into_owned())
}

/// The server closes the connection without sending anything more.
fn assert_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected the connection closed, got {:?}", &buf[..n]),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            ) => {}
        Err(e) => panic!("expected the connection closed, got {e}"),
    }
}

fn expect_code(r: Result<QueryResult, riptide_server::client::ClientError>, code: u16) -> String {
    match r {
        Err(riptide_server::client::ClientError::Server { code: c, message, .. }) => {
            assert_eq!(c, code, "{message}");
            message
        }
        other => panic!("expected error {code}, got {other:?}"),
    }
}

/// Prepares `sql` on a raw stream (after a login); the statement id and parameter count.
fn prepare_raw(s: &mut TcpStream, sql: &str) -> (u32, u16) {
    let mut p = vec![0x16];
    p.extend_from_slice(sql.as_bytes());
    s.write_all(&frame(0, &p)).unwrap();
    let (_, ok) = read_raw(s);
    assert_eq!(ok[0], 0, "prepare failed: {ok:?}");
    let sid = u32::from_le_bytes(ok[1..5].try_into().unwrap());
    let ncols = u16::from_le_bytes([ok[5], ok[6]]);
    let nparams = u16::from_le_bytes([ok[7], ok[8]]);
    for n in [nparams, ncols] {
        if n > 0 {
            for _ in 0..n {
                read_raw(s);
            }
            let (_, eof) = read_raw(s);
            assert_eq!(eof[0], 0xFE);
        }
    }
    (sid, nparams)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_truncated_packets() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rows(dir.path()).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        // A header announcing 100 bytes, 10 sent, then the client stops writing: closed.
        let mut c = login(addr);
        let s = c.stream();
        let mut p = frame(0, &[0x03; 100]);
        p.truncate(4 + 10);
        s.write_all(&p).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_closed(s);
        assert_intact(addr);

        // An empty command packet: closed, no ERR (conn.rs closes on any Malformed command).
        let mut c = login(addr);
        c.stream().write_all(&frame(0, &[])).unwrap();
        assert_closed(c.stream());
        assert_intact(addr);

        // COM_STMT_EXECUTE for an unknown statement: ERR 1243, the connection goes on.
        let mut c = login(addr);
        c.stream()
            .write_all(&frame(0, &[0x17, 99, 0, 0, 0, 0, 1, 0, 0, 0]))
            .unwrap();
        let (code, msg) = read_err(c.stream());
        assert_eq!(code, 1243, "{msg}");
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        assert_intact(addr);

        // COM_STMT_EXECUTE with a truncated body: ERR 1835, the connection goes on, and the
        // parameter types of the failed execute were not saved.
        let mut c = login(addr);
        let (sid, nparams) = prepare_raw(c.stream(), "SELECT c FROM t WHERE id = ?");
        assert_eq!(nparams, 1);
        let mut exec = vec![0x17];
        exec.extend_from_slice(&sid.to_le_bytes());
        exec.extend_from_slice(&[0, 1, 0, 0, 0]); // flags, iteration count
        exec.extend_from_slice(&[0, 1, 8, 0]); // NULL bitmap, new types: LONGLONG, no value
        c.stream().write_all(&frame(0, &exec)).unwrap();
        let (code, msg) = read_err(c.stream());
        assert_eq!(code, 1835, "{msg}");
        assert!(msg.starts_with("Malformed communication packet"), "{msg}");
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        exec.truncate(1 + 4 + 5 + 1);
        exec.push(0); // types not sent: none saved
        c.stream().write_all(&frame(0, &exec)).unwrap();
        let (code, msg) = read_err(c.stream());
        assert_eq!(code, 1835, "{msg}");
        assert!(msg.contains("parameter types not sent"), "{msg}");
        // The statement still executes with a whole body: id 7 → 'row7' (binary rows).
        let mut exec = vec![0x17];
        exec.extend_from_slice(&sid.to_le_bytes());
        exec.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 8, 0]);
        exec.extend_from_slice(&7u64.to_le_bytes());
        c.stream().write_all(&frame(0, &exec)).unwrap();
        let (_, head) = read_raw(c.stream());
        assert_eq!(head, vec![1], "one column");
        read_raw(c.stream()); // column definition
        assert_eq!(read_raw(c.stream()).1[0], 0xFE);
        let (_, row) = read_raw(c.stream());
        assert_eq!(row, b"\x00\x00\x04row7".to_vec());
        assert_eq!(read_raw(c.stream()).1[0], 0xFE);
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        assert_intact(addr);

        // A wrong sequence id: closed.
        let mut c = login(addr);
        c.stream().write_all(&frame(5, b"\x03SELECT 1")).unwrap();
        assert_closed(c.stream());
        assert_intact(addr);

        // An unknown command byte: ERR 1047, the connection goes on.
        let mut c = login(addr);
        for byte in [0x09u8, 0x20, 0xEE] {
            c.stream().write_all(&frame(0, &[byte, 1, 2, 3])).unwrap();
            let (code, msg) = read_err(c.stream());
            assert_eq!(code, 1047, "{msg}");
            assert_eq!(msg, format!("Unknown command {byte:#04x}"));
        }
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        assert_intact(addr);

        // Garbage instead of a handshake response, well framed: ERR 1043, then closed.
        let mut s = TcpStream::connect(addr).unwrap();
        let (seq, greeting) = read_raw(&mut s);
        assert_eq!((seq, greeting[0]), (0, 10));
        s.write_all(&frame(1, b"\x00\x00garbage")).unwrap();
        let (code, msg) = read_err(&mut s);
        assert_eq!((code, msg.as_str()), (1043, "Bad handshake"));
        assert_closed(&mut s);
        // ... and not framed at all (an HTTP request): closed without a reply.
        let mut s = TcpStream::connect(addr).unwrap();
        read_raw(&mut s);
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_closed(&mut s);
        // ... and a truncated response: ERR 1043.
        let mut s = TcpStream::connect(addr).unwrap();
        read_raw(&mut s);
        s.write_all(&frame(1, &[0x0f, 0xa2, 0, 0, 0, 0])).unwrap();
        let (code, _) = read_err(&mut s);
        assert_eq!(code, 1043);
        assert_closed(&mut s);
        assert_intact(addr);
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_over_max_allowed_packet_gets_1153_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rows(dir.path()).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut c = login(addr);
        let big = format!("INSERT INTO t VALUES (1000, 1, '{}')", "x".repeat(2 << 20));
        assert!(big.len() > MAX_PACKET * 2);
        let msg = expect_code(c.query(&big), 1153);
        assert_eq!(msg, "Got a packet bigger than 'max_allowed_packet' bytes");
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        assert_eq!(
            c.rows("SELECT id FROM t WHERE id = 1000").unwrap(),
            Vec::<Vec<_>>::new()
        );
        // Just under the limit is accepted (and too long for the column: an SQL error).
        let fits = format!("INSERT INTO t VALUES (1001, 1, '{}')", "y".repeat(MAX_PACKET - 100));
        let r = c.query(&fits);
        assert!(r.as_ref().err().and_then(|e| e.code()) != Some(1153), "{r:?}");
        assert_eq!(one_value(&mut c, "SELECT 2"), Some("2".into()));
        assert_intact(addr);
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

fn metrics_body(metrics: SocketAddr) -> String {
    let mut s = TcpStream::connect(metrics).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_dropped_connections() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 2_500;
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rows(dir.path()).await;
    let addr = server.addr;
    let metrics = server.metrics_addr.unwrap();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        let mut s = TcpStream::connect(addr).unwrap();
                        match (t + i) % 3 {
                            0 => {}
                            1 => {
                                let mut b = [0u8; 4];
                                let _ = s.read_exact(&mut b);
                            }
                            _ => {
                                let mut b = [0u8; 4];
                                let _ = s.read_exact(&mut b);
                                // half a handshake response: a header for 64 bytes, 8 sent
                                let mut p = frame(1, &[0x0f; 64]);
                                p.truncate(12);
                                let _ = s.write_all(&p);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let elapsed = started.elapsed();
        eprintln!("{} connections opened and dropped in {elapsed:?}", THREADS * PER_THREAD);
        assert_intact(addr);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let body = metrics_body(metrics);
            if body.lines().any(|l| l == "riptide_connections 0") {
                let total = body
                    .lines()
                    .find_map(|l| l.strip_prefix("riptide_connections_total "))
                    .and_then(|v| v.parse::<u64>().ok());
                // the setup's login, the flood and assert_intact's login
                assert!(total >= Some((THREADS * PER_THREAD + 2) as u64), "{body}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "connections never dropped back to 0:\n{body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_outside_the_subset_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rows(dir.path()).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut c = login(addr);
        let unsupported = |what: &str| format!("This version of Riptide doesn't yet support '{what}'");
        let cases = [
            (
                "SELECT a.id FROM t a JOIN t b ON a.id = b.id",
                1235,
                unsupported("JOIN"),
            ),
            ("SELECT k, COUNT(*) FROM t GROUP BY k", 1235, unsupported("GROUP BY")),
            ("WITH x AS (SELECT 1) SELECT * FROM x", 1235, unsupported("WITH")),
            ("INSERT INTO t SELECT * FROM t", 1235, unsupported("INSERT ... SELECT")),
            (
                "SELECT * FROM (SELECT 1) x",
                1235,
                unsupported("a derived table (subquery in FROM)"),
            ),
            (
                "SELEKT 1",
                1064,
                "You have an error in your SQL syntax: sql parser error: Expected: an SQL statement, \
                 found: SELEKT at Line: 1, Column: 1"
                    .to_string(),
            ),
        ];
        for (sql, code, expected) in cases {
            let msg = expect_code(c.query(sql), code);
            assert_eq!(msg, expected, "{sql}");
            assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()), "after {sql}");
        }
        assert_eq!(one_value(&mut c, "SELECT COUNT(*) FROM t"), Some(ROWS.to_string()));
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_logins_get_1045() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path())).await.unwrap();
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let refused = |user: &str, password: &str| match Client::connect(addr, user, password, None) {
            Err(riptide_server::client::ClientError::Server { code, message, .. }) => (code, message),
            Err(e) => panic!("{user}/{password}: {e}"),
            Ok(_) => panic!("{user}/{password}: logged in"),
        };
        for (user, password, using) in [
            ("app", "wrong", "YES"),
            ("app", "", "NO"),
            ("app", "s3cret ", "YES"),
            ("root", "x", "YES"),
            ("nobody", "s3cret", "YES"),
            ("nobody", "", "NO"),
            ("", "", "NO"),
            ("", "s3cret", "YES"),
        ] {
            let (code, message) = refused(user, password);
            assert_eq!(code, 1045, "{user}/{password}: {message}");
            assert_eq!(
                message,
                format!("Access denied for user '{user}'@'localhost' (using password: {using})")
            );
        }
        let mut c = Client::connect(addr, "app", "s3cret", None).unwrap();
        assert_eq!(one_value(&mut c, "SELECT 1"), Some("1".into()));
        let mut r = Client::connect(addr, "root", "", Some("d")).unwrap();
        assert_eq!(one_value(&mut r, "SELECT 2"), Some("2".into()));
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_multi_row_insert_is_atomic_inside_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rows(dir.path()).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut c = login(addr);
        c.query("BEGIN").unwrap();
        assert_eq!(
            c.query("INSERT INTO t VALUES (101, 1, 'a')").unwrap(),
            QueryResult::Ok {
                affected: 1,
                last_insert_id: 0
            }
        );
        let msg = expect_code(
            c.query("INSERT INTO t VALUES (102, 1, 'b'), (103, 1, 'c'), (5, 1, 'dup'), (104, 1, 'd')"),
            1062,
        );
        assert!(msg.contains("Duplicate entry '5'"), "{msg}");
        let ids = |c: &mut Client| -> Vec<String> {
            c.rows("SELECT id FROM t WHERE id > 100 OR c = 'dup' ORDER BY id")
                .unwrap()
                .into_iter()
                .map(|r| r[0].clone().unwrap())
                .collect()
        };
        assert_eq!(
            ids(&mut c),
            vec!["101".to_string()],
            "the earlier statement stays, the failed one is gone"
        );
        assert_eq!(one_value(&mut c, "SELECT c FROM t WHERE id = 5"), Some("row5".into()));
        // Another connection sees nothing uncommitted.
        let mut other = login(addr);
        assert_eq!(ids(&mut other), Vec::<String>::new());
        c.query("ROLLBACK").unwrap();
        assert_eq!(ids(&mut c), Vec::<String>::new());
        assert_eq!(ids(&mut other), Vec::<String>::new());
        assert_intact(addr);

        // The same without a transaction: the statement leaves nothing.
        let msg = expect_code(
            c.query("INSERT INTO t VALUES (201, 1, 'e'), (202, 1, 'f'), (6, 1, 'dup')"),
            1062,
        );
        assert!(msg.contains("Duplicate entry '6'"), "{msg}");
        assert_eq!(ids(&mut c), Vec::<String>::new());
        assert_intact(addr);
    })
    .await
    .unwrap();
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
