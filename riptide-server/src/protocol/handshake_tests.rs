//! Unit tests of `handshake.rs`: a client written here, byte by byte, logs in over an
//! in-memory duplex stream.

use std::collections::HashMap;

use proptest::prelude::*;
use tokio::io::DuplexStream;

use super::*;
use crate::protocol::resultset::OkInfo;
use crate::protocol::test_util::{mem_conn, packet, read_pkt, write_pkt};

struct Users(HashMap<&'static str, Option<[u8; 20]>>);

impl Authenticator for Users {
    fn lookup(&self, user: &str) -> Option<Option<[u8; 20]>> {
        self.0.get(user).copied()
    }
}

fn users() -> Users {
    Users(HashMap::from([
        ("alice", native_password_stage2(b"s3cret")),
        ("guest", native_password_stage2(b"")),
    ]))
}

const CLIENT_CAPS: u32 = cap::CLIENT_LONG_PASSWORD
    | cap::CLIENT_PROTOCOL_41
    | cap::CLIENT_SECURE_CONNECTION
    | cap::CLIENT_PLUGIN_AUTH
    | cap::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
    | cap::CLIENT_CONNECT_ATTRS
    | cap::CLIENT_CONNECT_WITH_DB
    | cap::CLIENT_TRANSACTIONS
    | cap::CLIENT_MULTI_STATEMENTS;

/// A HandshakeResponse41 laid out per `caps`.
fn response(caps: u32, user: &str, token: &[u8], db: Option<&str>, plugin: &str, attrs: &[(&str, &str)]) -> Vec<u8> {
    let mut p = caps.to_le_bytes().to_vec();
    p.extend(16_777_216u32.to_le_bytes());
    p.push(45);
    p.extend([0; 23]);
    p.extend(user.as_bytes());
    p.push(0);
    if caps & cap::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 && token.len() >= 251 {
        p.push(0xFC);
        p.extend((token.len() as u16).to_le_bytes());
        p.extend(token);
    } else if caps & (cap::CLIENT_SECURE_CONNECTION | cap::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA) != 0 {
        p.push(token.len() as u8);
        p.extend(token);
    } else {
        p.extend(token);
        p.push(0);
    }
    if caps & cap::CLIENT_CONNECT_WITH_DB != 0 {
        p.extend(db.unwrap_or("").as_bytes());
        p.push(0);
    }
    if caps & cap::CLIENT_PLUGIN_AUTH != 0 {
        p.extend(plugin.as_bytes());
        p.push(0);
    }
    if caps & cap::CLIENT_CONNECT_ATTRS != 0 {
        let mut a = Vec::new();
        for (k, v) in attrs {
            a.push(k.len() as u8);
            a.extend(k.as_bytes());
            a.push(v.len() as u8);
            a.extend(v.as_bytes());
        }
        p.push(a.len() as u8);
        p.extend(a);
    }
    p
}

/// Runs the server side: handshake, then OK on success.
fn server(stream: DuplexStream) -> tokio::task::JoinHandle<Result<HandshakeInfo, ProtocolError>> {
    tokio::spawn(async move {
        let mut conn = Connection::new(stream, 1 << 20);
        let info = conn.handshake(42, "8.0.36-riptide", &users()).await?;
        conn.write_ok(&OkInfo::default());
        conn.flush().await?;
        Ok(info)
    })
}

/// Reads the greeting, checks it, returns the scramble.
async fn read_greeting(c: &mut DuplexStream) -> [u8; 20] {
    let (seq, g) = read_pkt(c).await;
    assert_eq!(seq, 0);
    assert_eq!(g[0], 10);
    let mut r = PayloadReader::new(&g[1..]);
    assert_eq!(r.nul_bytes().unwrap(), b"8.0.36-riptide");
    assert_eq!(r.u32().unwrap(), 42);
    let mut scramble = [0u8; 20];
    scramble[..8].copy_from_slice(r.bytes(8).unwrap());
    assert_eq!(r.u8().unwrap(), 0);
    let low = r.u16().unwrap() as u32;
    assert_eq!((r.u8().unwrap(), r.u16().unwrap()), (45, 2));
    let caps = low | (r.u16().unwrap() as u32) << 16;
    assert_eq!(caps, cap::SERVER_CAPABILITIES);
    assert_eq!(r.u8().unwrap(), 21);
    assert_eq!(r.bytes(10).unwrap(), [0; 10]);
    scramble[8..].copy_from_slice(r.bytes(12).unwrap());
    assert_eq!(r.u8().unwrap(), 0);
    assert_eq!(r.nul_bytes().unwrap(), b"mysql_native_password");
    assert!(r.is_empty());
    assert!(scramble.iter().all(|&b| b != 0 && b != b'$'));
    scramble
}

/// Logs in with `password` (the native token computed from the greeting's scramble).
async fn login(user: &str, password: &[u8], caps: u32) -> (Vec<u8>, u8, Result<HandshakeInfo, ProtocolError>) {
    let (mut c, s) = tokio::io::duplex(4096);
    let srv = server(s);
    let scramble = read_greeting(&mut c).await;
    let token = native_password_token(password, &scramble);
    let attrs = [("_os", "linux"), ("_client_name", "libmysql"), ("program_name", "t")];
    let resp = response(caps, user, &token, Some("sbtest"), "mysql_native_password", &attrs);
    write_pkt(&mut c, 1, &resp).await;
    let (seq, reply) = read_pkt(&mut c).await;
    (reply, seq, srv.await.unwrap())
}

#[tokio::test]
async fn right_password_logs_in() {
    let (reply, seq, info) = login("alice", b"s3cret", CLIENT_CAPS).await;
    assert_eq!((reply[0], seq), (0, 2));
    let info = info.unwrap();
    assert_eq!(info.user, "alice");
    assert_eq!(info.database.as_deref(), Some("sbtest"));
    assert_eq!(info.client_name.as_deref(), Some("libmysql"));
    assert_eq!(info.capabilities, CLIENT_CAPS & !cap::CLIENT_MULTI_STATEMENTS);
    assert_eq!((info.charset, info.max_packet), (45, 16_777_216));
}

#[tokio::test]
async fn one_byte_auth_length_and_empty_password() {
    let caps = CLIENT_CAPS & !cap::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA & !cap::CLIENT_CONNECT_ATTRS;
    let (reply, _, info) = login("alice", b"s3cret", caps).await;
    assert_eq!(reply[0], 0);
    assert_eq!(info.unwrap().client_name, None);
    let (reply, _, info) = login("guest", b"", CLIENT_CAPS).await;
    assert_eq!(reply[0], 0);
    assert_eq!(info.unwrap().user, "guest");
}

#[tokio::test]
async fn wrong_password_and_unknown_user_get_1045() {
    for (user, pw, using) in [
        ("alice", &b"wrong"[..], "YES"),
        ("alice", b"", "NO"),
        ("guest", b"x", "YES"),
        ("mallory", b"", "NO"),
        ("mallory", b"s3cret", "YES"),
    ] {
        let (reply, seq, info) = login(user, pw, CLIENT_CAPS).await;
        assert_eq!(seq, 2);
        assert_eq!(&reply[..9], b"\xff\x15\x04#28000", "{user}");
        let msg = format!("Access denied for user '{user}'@'localhost' (using password: {using})");
        assert_eq!(std::str::from_utf8(&reply[9..]).unwrap(), msg);
        assert!(matches!(info, Err(ProtocolError::AccessDenied { user: u }) if u == user));
    }
}

#[tokio::test]
async fn auth_switch_from_caching_sha2() {
    let (mut c, s) = tokio::io::duplex(4096);
    let srv = server(s);
    let scramble = read_greeting(&mut c).await;
    let sha2_token = [7u8; 32];
    let resp = response(CLIENT_CAPS, "alice", &sha2_token, None, "caching_sha2_password", &[]);
    write_pkt(&mut c, 1, &resp).await;
    let (seq, switch) = read_pkt(&mut c).await;
    assert_eq!(seq, 2);
    let mut want = b"\xfemysql_native_password\0".to_vec();
    want.extend(scramble);
    want.push(0);
    assert_eq!(switch, want);
    write_pkt(&mut c, 3, &native_password_token(b"s3cret", &scramble)).await;
    let (seq, ok) = read_pkt(&mut c).await;
    assert_eq!((seq, ok[0]), (4, 0));
    let info = srv.await.unwrap().unwrap();
    assert_eq!(info.database, None);
}

#[tokio::test]
async fn auth_switch_with_a_wrong_password_is_denied() {
    let (mut c, s) = tokio::io::duplex(4096);
    let srv = server(s);
    let scramble = read_greeting(&mut c).await;
    write_pkt(
        &mut c,
        1,
        &response(CLIENT_CAPS, "alice", &[1; 32], None, "caching_sha2_password", &[]),
    )
    .await;
    read_pkt(&mut c).await;
    write_pkt(&mut c, 3, &native_password_token(b"nope", &scramble)).await;
    let (seq, err) = read_pkt(&mut c).await;
    assert_eq!((seq, err[0]), (4, 0xff));
    assert!(matches!(srv.await.unwrap(), Err(ProtocolError::AccessDenied { .. })));
}

#[tokio::test]
async fn pre_41_client_tls_request_and_bad_sequence_are_refused() {
    for (resp, seq) in [
        (vec![0x05, 0x00, 0, 0, 0, b'u', 0], 1), // HandshakeResponse320
        (
            [(CLIENT_CAPS | cap::CLIENT_SSL).to_le_bytes().to_vec(), vec![0; 28]].concat(),
            1,
        ),
    ] {
        let (mut c, s) = tokio::io::duplex(4096);
        let srv = server(s);
        read_greeting(&mut c).await;
        write_pkt(&mut c, seq, &resp).await;
        let (_, err) = read_pkt(&mut c).await;
        assert_eq!(&err[..9], b"\xff\x13\x04#08S01");
        let e = srv.await.unwrap().unwrap_err();
        assert!(
            matches!(e, ProtocolError::Malformed(_) | ProtocolError::Unsupported(_)),
            "{e}"
        );
    }
    let (mut c, s) = tokio::io::duplex(4096);
    let srv = server(s);
    read_greeting(&mut c).await;
    write_pkt(&mut c, 0, &response(CLIENT_CAPS, "alice", b"", None, "", &[])).await;
    assert!(srv.await.unwrap().unwrap_err().to_string().contains("out of order"));
    let (mut c, s) = tokio::io::duplex(4096);
    let srv = server(s);
    read_greeting(&mut c).await;
    drop(c);
    assert!(matches!(srv.await.unwrap(), Err(ProtocolError::Io(_))));
}

#[test]
fn native_password_math() {
    assert_eq!(native_password_stage2(b""), None);
    let stage2 = native_password_stage2(b"pw").unwrap();
    let scramble = [0x41u8; 20];
    let token = native_password_token(b"pw", &scramble);
    assert_eq!(token.len(), 20);
    assert!(verify_native(&stage2, &scramble, &token));
    assert!(!verify_native(&stage2, &[0x42; 20], &token));
    assert!(!verify_native(&stage2, &scramble, &token[..19]));
    // SHA1(SHA1("password")), as MySQL's PASSWORD('password') shows it
    let hex: String = native_password_stage2(b"password")
        .unwrap()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    assert_eq!(hex, "2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
}

#[test]
fn response_parsing_every_prefix() {
    let full = response(
        CLIENT_CAPS,
        "bob",
        &[9; 20],
        Some("db"),
        "mysql_native_password",
        &[("_client_name", "x")],
    );
    let parsed = parse_handshake_response(&full).unwrap();
    assert_eq!(parsed.user, b"bob");
    assert_eq!(parsed.auth_response, [9; 20]);
    assert_eq!(parsed.client_name.as_deref(), Some(&b"x"[..]));
    for cut in 0..full.len() {
        let _ = parse_handshake_response(&full[..cut]); // Err or a shorter response, no panic
    }
    assert!(parse_handshake_response(&full[..35]).is_err(), "no user name");
    let long = response(CLIENT_CAPS, "bob", &[3; 300], Some("db"), "x", &[]);
    let parsed = parse_handshake_response(&long).unwrap();
    assert_eq!(
        (parsed.auth_response.len(), parsed.auth_plugin.as_deref()),
        (300, Some(&b"x"[..]))
    );
    let old = response(cap::CLIENT_PROTOCOL_41, "bob", b"tok", None, "", &[]);
    let parsed = parse_handshake_response(&old).unwrap();
    assert_eq!(
        (parsed.auth_response, parsed.database, parsed.auth_plugin),
        (b"tok".to_vec(), None, None)
    );
    let mut bad_attrs = full.clone();
    let n = bad_attrs.len();
    bad_attrs[n - 2] = 5; // the value's length now points past the end
    assert!(parse_handshake_response(&bad_attrs).is_err());
}

proptest! {
    #[test]
    fn random_responses_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_handshake_response(&bytes);
        let mut with_header = CLIENT_CAPS.to_le_bytes().to_vec();
        with_header.extend([0; 28]);
        with_header.extend(&bytes);
        let _ = parse_handshake_response(&with_header);
        // the whole connection phase, over a stream holding the random response
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let r = rt.block_on(async {
            let mut conn = mem_conn(packet(1, &with_header), 1 << 20);
            conn.handshake(1, "v", &users()).await
        });
        prop_assert!(r.is_err() || r.unwrap().user == "guest");
    }
}
