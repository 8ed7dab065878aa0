//! The connection phase: the v10 greeting, the client's HandshakeResponse41, an auth switch
//! to `mysql_native_password` when the client started with another plugin, and the
//! password check.
//!
//! Invariants:
//! - the scramble is 20 fresh random bytes, none 0 or `$`, used for the greeting and for any
//!   auth switch of the same connection;
//! - the server never holds a password, only its stage-2 hash `SHA1(SHA1(password))`; a
//!   token is checked by recovering `SHA1(password)` from it and hashing that, compared in
//!   constant time;
//! - a response is parsed with bounds checks only ([`parse_handshake_response`] never panics);
//!   pre-4.1 clients and TLS requests are refused with an ERR packet;
//! - on failure the ERR packet (1045 for a bad user or password, 1043 for a bad handshake) is
//!   written and flushed before the error is returned; on success nothing is written after
//!   the response: the caller sends OK (or ERR 1049 for an unknown database) and flushes.

use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::Connection;
use super::constants::{capability as cap, charset, error, status};
use super::packet::{read_packet, write_packet, PayloadReader, ReadOutcome};
use super::{malformed, ProtocolError};

/// The only authentication plugin this server speaks.
pub const NATIVE_PASSWORD_PLUGIN: &str = "mysql_native_password";

/// The largest handshake response read (connection attributes included).
const MAX_HANDSHAKE_RESPONSE: usize = 1 << 20;

/// What the handshake learned about the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeInfo {
    /// The authenticated user.
    pub user: String,
    /// The database the client asked for (not checked: the caller checks it).
    pub database: Option<String>,
    /// The negotiated capabilities: the client's flags that the server offered.
    pub capabilities: u32,
    /// The client's character set / collation id.
    pub charset: u16,
    /// The client's max packet size.
    pub max_packet: u32,
    /// The `_client_name` connection attribute, if sent.
    pub client_name: Option<String>,
}

/// Looks up users' password hashes.
pub trait Authenticator: Send + Sync {
    /// The user's stage-2 hash `SHA1(SHA1(password))`: `Some(None)` for a user with an empty
    /// password, `None` for an unknown user.
    fn lookup(&self, user: &str) -> Option<Option<[u8; 20]>>;
}

/// `SHA1(SHA1(password))`, what the server stores; `None` for an empty password.
pub fn native_password_stage2(password: &[u8]) -> Option<[u8; 20]> {
    (!password.is_empty()).then(|| sha1(&[&sha1(&[password])]))
}

/// The `mysql_native_password` token a client sends:
/// `SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password)))`; empty for an empty password.
pub fn native_password_token(password: &[u8], scramble: &[u8; 20]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = sha1(&[password]);
    let mask = sha1(&[scramble, &sha1(&[&stage1])]);
    stage1.iter().zip(mask).map(|(a, b)| a ^ b).collect()
}

fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// True when `token` proves knowledge of the password whose stage-2 hash is `stage2`.
fn verify_native(stage2: &[u8; 20], scramble: &[u8; 20], token: &[u8]) -> bool {
    if token.len() != 20 {
        return false;
    }
    let mask = sha1(&[scramble, stage2]);
    let mut stage1 = [0u8; 20];
    for i in 0..20 {
        stage1[i] = token[i] ^ mask[i];
    }
    let candidate = sha1(&[&stage1]);
    candidate.iter().zip(stage2).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// A fresh scramble: 20 random bytes in 1..=127, none `$`.
fn new_scramble() -> [u8; 20] {
    let mut s = [0u8; 20];
    for b in &mut s {
        *b = loop {
            let c: u8 = rand::random_range(1..=127);
            if c != b'$' {
                break c;
            }
        };
    }
    s
}

/// The v10 greeting's payload.
pub fn greeting_payload(connection_id: u32, server_version: &str, scramble: &[u8; 20]) -> Vec<u8> {
    let version = server_version.as_bytes();
    let version = &version[..version.iter().position(|&b| b == 0).unwrap_or(version.len())];
    let caps = cap::SERVER_CAPABILITIES;
    let mut p = Vec::with_capacity(80 + version.len());
    p.push(10);
    p.extend_from_slice(version);
    p.push(0);
    p.extend_from_slice(&connection_id.to_le_bytes());
    p.extend_from_slice(&scramble[..8]);
    p.push(0);
    p.extend_from_slice(&(caps as u16).to_le_bytes());
    p.push(charset::UTF8MB4_GENERAL_CI as u8);
    p.extend_from_slice(&status::SERVER_STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    p.push(21); // auth plugin data length: 20 bytes and a NUL
    p.extend_from_slice(&[0; 10]); // reserved (MariaDB's extended capabilities stay 0)
    p.extend_from_slice(&scramble[8..]);
    p.push(0);
    p.extend_from_slice(NATIVE_PASSWORD_PLUGIN.as_bytes());
    p.push(0);
    p
}

/// The client's side of the connection phase: the 20-byte scramble of a protocol-10
/// greeting (bounds-checked).
pub fn greeting_scramble(greeting: &[u8]) -> Result<[u8; 20], ProtocolError> {
    let mut r = PayloadReader::new(greeting);
    if r.u8()? != 10 {
        return Err(malformed("not protocol version 10"));
    }
    r.nul_bytes()?; // server version
    r.u32()?; // connection id
    let part1 = r.bytes(8)?;
    let mut scramble = [0u8; 20];
    scramble[..8].copy_from_slice(part1);
    r.bytes(1 + 2 + 3 + 2 + 1 + 10)?; // filler, capabilities, charset, status, auth length, reserved
    scramble[8..].copy_from_slice(r.bytes(12)?);
    Ok(scramble)
}

/// The client's side of the connection phase: a HandshakeResponse41 logging in as `user` with
/// mysql_native_password, in database `db` when given, with `extra` capabilities.
pub fn client_handshake_response(
    user: &str,
    password: &str,
    scramble: &[u8; 20],
    db: Option<&str>,
    extra: u32,
) -> Vec<u8> {
    let token = if password.is_empty() {
        Vec::new()
    } else {
        native_password_token(password.as_bytes(), scramble)
    };
    let mut caps = cap::CLIENT_LONG_PASSWORD
        | cap::CLIENT_PROTOCOL_41
        | cap::CLIENT_SECURE_CONNECTION
        | cap::CLIENT_TRANSACTIONS
        | cap::CLIENT_PLUGIN_AUTH
        | cap::CLIENT_MULTI_RESULTS
        | extra;
    if db.is_some() {
        caps |= cap::CLIENT_CONNECT_WITH_DB;
    }
    let mut p = Vec::with_capacity(128 + user.len());
    p.extend_from_slice(&caps.to_le_bytes());
    p.extend_from_slice(&(64u32 << 20).to_le_bytes());
    p.push(45); // utf8mb4
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    p.push(token.len() as u8);
    p.extend_from_slice(&token);
    if let Some(db) = db {
        p.extend_from_slice(db.as_bytes());
        p.push(0);
    }
    p.extend_from_slice(b"mysql_native_password\0");
    p
}

/// A parsed HandshakeResponse41.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeResponse {
    /// The client's capability flags, as sent.
    pub capabilities: u32,
    /// The client's max packet size.
    pub max_packet: u32,
    /// The client's character set.
    pub charset: u8,
    /// The user name.
    pub user: Vec<u8>,
    /// The auth response (a token for the client's plugin).
    pub auth_response: Vec<u8>,
    /// The database, if given and not empty.
    pub database: Option<Vec<u8>>,
    /// The client's auth plugin, if named.
    pub auth_plugin: Option<Vec<u8>>,
    /// The `_client_name` connection attribute.
    pub client_name: Option<Vec<u8>>,
}

/// Parses a HandshakeResponse41; the fields are laid out per the client's own flags.
/// `Malformed` for a pre-4.1 client or a truncated response, `Unsupported` for a TLS request.
pub fn parse_handshake_response(payload: &[u8]) -> Result<HandshakeResponse, ProtocolError> {
    let mut r = PayloadReader::new(payload);
    let low = r.u16()? as u32;
    if low & cap::CLIENT_PROTOCOL_41 == 0 {
        return Err(malformed("pre-4.1 clients are not supported"));
    }
    let caps = low | (r.u16()? as u32) << 16;
    if caps & cap::CLIENT_SSL != 0 {
        return Err(ProtocolError::Unsupported("TLS is not supported by this server".into()));
    }
    let max_packet = r.u32()?;
    let charset = r.u8()?;
    r.bytes(23)?;
    let user = r.nul_bytes()?.to_vec();
    let auth_response = if caps & cap::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        r.lenenc_bytes()?
    } else if caps & cap::CLIENT_SECURE_CONNECTION != 0 {
        let n = r.u8()? as usize;
        r.bytes(n)?
    } else {
        r.nul_or_rest()
    }
    .to_vec();
    let mut database = None;
    if caps & cap::CLIENT_CONNECT_WITH_DB != 0 && !r.is_empty() {
        database = Some(r.nul_or_rest().to_vec()).filter(|d| !d.is_empty());
    }
    let mut auth_plugin = None;
    if caps & cap::CLIENT_PLUGIN_AUTH != 0 && !r.is_empty() {
        auth_plugin = Some(r.nul_or_rest().to_vec()).filter(|p| !p.is_empty());
    }
    let mut client_name = None;
    if caps & cap::CLIENT_CONNECT_ATTRS != 0 && !r.is_empty() {
        let mut attrs = PayloadReader::new(r.lenenc_bytes()?);
        while !attrs.is_empty() {
            let key = attrs.lenenc_bytes()?;
            let value = attrs.lenenc_bytes()?;
            if key == b"_client_name" {
                client_name = Some(value.to_vec());
            }
        }
    }
    Ok(HandshakeResponse {
        capabilities: caps,
        max_packet,
        charset,
        user,
        auth_response,
        database,
        auth_plugin,
        client_name,
    })
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection<S> {
    /// Runs the connection phase (see the module documentation). On success the caller
    /// writes the final OK (or an ERR) and flushes.
    pub async fn handshake(
        &mut self,
        connection_id: u32,
        server_version: &str,
        auth: &dyn Authenticator,
    ) -> Result<HandshakeInfo, ProtocolError> {
        let scramble = new_scramble();
        self.seq = 0;
        write_packet(
            &mut self.out,
            &mut self.seq,
            &greeting_payload(connection_id, server_version, &scramble),
        );
        self.flush().await?;
        self.read_auth_packet().await?;
        let resp = match parse_handshake_response(&self.payload) {
            Ok(resp) => resp,
            Err(e) => return Err(self.bad_handshake(e).await),
        };
        let user = match String::from_utf8(resp.user) {
            Ok(u) => u,
            Err(_) => return Err(self.bad_handshake(malformed("user name is not UTF-8")).await),
        };
        let utf8 = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
        let info = HandshakeInfo {
            database: utf8(resp.database),
            capabilities: resp.capabilities & cap::SERVER_CAPABILITIES,
            charset: resp.charset as u16,
            max_packet: resp.max_packet,
            client_name: utf8(resp.client_name),
            user,
        };
        let mut token = resp.auth_response;
        let plugin = resp.auth_plugin.as_deref().unwrap_or(NATIVE_PASSWORD_PLUGIN.as_bytes());
        if plugin != NATIVE_PASSWORD_PLUGIN.as_bytes() && !token.is_empty() {
            let mut switch = vec![0xFE];
            switch.extend_from_slice(NATIVE_PASSWORD_PLUGIN.as_bytes());
            switch.push(0);
            switch.extend_from_slice(&scramble);
            switch.push(0);
            write_packet(&mut self.out, &mut self.seq, &switch);
            self.flush().await?;
            self.read_auth_packet().await?;
            token = self.payload.clone();
        }
        let granted = match auth.lookup(&info.user) {
            None => {
                // the same work as for a known user, so timing does not tell users apart
                std::hint::black_box(verify_native(&[0; 20], &scramble, &token));
                false
            }
            Some(None) => token.is_empty(),
            Some(Some(stage2)) => verify_native(&stage2, &scramble, &token),
        };
        if !granted {
            let msg = format!(
                "Access denied for user '{}'@'localhost' (using password: {})",
                info.user,
                if token.is_empty() { "NO" } else { "YES" }
            );
            self.write_err(error::ER_ACCESS_DENIED_ERROR, "28000", &msg);
            self.flush().await?;
            return Err(ProtocolError::AccessDenied { user: info.user });
        }
        Ok(info)
    }

    /// Reads a connection-phase packet into the payload buffer (continuing the sequence).
    async fn read_auth_packet(&mut self) -> Result<(), ProtocolError> {
        let max = self.max_allowed_packet.clamp(64 * 1024, MAX_HANDSHAKE_RESPONSE);
        match read_packet(&mut self.stream, &mut self.seq, max, &mut self.payload).await? {
            ReadOutcome::Packet => Ok(()),
            ReadOutcome::Eof => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "early eof").into()),
            ReadOutcome::TooLarge(len) => Err(self.refuse_too_large(len).await),
        }
    }

    /// Sends ERR 1043 (bad handshake) and returns `e`.
    async fn bad_handshake(&mut self, e: ProtocolError) -> ProtocolError {
        let msg = match &e {
            ProtocolError::Unsupported(what) => format!("Bad handshake: {what}"),
            _ => "Bad handshake".to_string(),
        };
        self.write_err(error::ER_HANDSHAKE_ERROR, "08S01", &msg);
        match self.flush().await {
            Ok(()) => e,
            Err(io) => io,
        }
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
