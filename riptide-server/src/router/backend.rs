//! [`Backend`]: the router's connection to one partition replica (a `riptide serve`), over
//! the MySQL protocol on tokio: log in with mysql_native_password, send a text query, read its
//! whole reply (OK, ERR, or a text result set) as raw payloads the router relays or merges.
//!
//! Prepared statements go through too: [`Backend::prepare`] and [`Backend::execute`] (binary
//! result rows are relayed as they come).
//!
//! Invariants:
//! - It speaks the 4.1 protocol with classic EOF packets (what `riptide serve` offers), so a
//!   reply relayed to a client that logged in to the router has the framing that client
//!   negotiated with the router.
//! - Every length from the replica is bounds-checked; a reply over [`MAX_REPLY_BYTES`] or one
//!   this reader does not understand is [`BackendError::Protocol`] and the connection is not
//!   used again (its stream position is unknown). Connecting, each read and each write fail
//!   after the timeout the backend was opened with.

use crate::protocol::packet::{read_packet, write_packet, PayloadReader, ReadOutcome};
use crate::protocol::{capability as cap, ProtocolError};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The largest reply the router buffers from one replica (a bigger result set is refused).
pub const MAX_REPLY_BYTES: usize = 256 << 20;

/// Why talking to a replica failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The connection failed or timed out.
    #[error("I/O with {addr}: {source}")]
    Io {
        /// The replica.
        addr: SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
    /// The replica sent something this reader cannot use.
    #[error("protocol with {addr}: {message}")]
    Protocol {
        /// The replica.
        addr: SocketAddr,
        /// What was wrong.
        message: String,
    },
    /// The replica refused the login.
    #[error("login to {addr} refused: {message}")]
    Login {
        /// The replica.
        addr: SocketAddr,
        /// Its error code (1045: access denied; 1049: no such database, which a follower that
        /// has not applied the database's creation yet also answers).
        code: u16,
        /// Its error message.
        message: String,
    },
}

/// An ERR packet's fields.
pub use crate::protocol::resultset::ErrPacket as ServerError;

/// A query's whole reply, as raw payloads (no packet headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An OK packet.
    Ok(Vec<u8>),
    /// An ERR packet (also when a result set ended with one).
    Err(ServerError, Vec<u8>),
    /// A text result set.
    Rows(ResultSet),
}

/// A text result set's payloads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultSet {
    /// The column count packet.
    pub header: Vec<u8>,
    /// One definition per column.
    pub columns: Vec<Vec<u8>>,
    /// The EOF after the definitions.
    pub columns_eof: Vec<u8>,
    /// One payload per row.
    pub rows: Vec<Vec<u8>>,
    /// The closing EOF.
    pub eof: Vec<u8>,
}

impl Reply {
    /// The server status flags of an OK, or of a result set's closing EOF (0 for ERR).
    pub fn status(&self) -> u16 {
        match self {
            Reply::Ok(p) => ok_status(p).unwrap_or(0),
            Reply::Rows(rs) => eof_status(&rs.eof),
            Reply::Err(..) => 0,
        }
    }
}

/// An OK payload's status flags.
pub fn ok_status(payload: &[u8]) -> Option<u16> {
    let mut r = PayloadReader::new(payload);
    r.u8().ok()?;
    r.lenenc_int().ok()?;
    r.lenenc_int().ok()?;
    r.u16().ok()
}

/// Where an OK payload's status flags start.
pub fn ok_status_at(payload: &[u8]) -> Option<usize> {
    let mut r = PayloadReader::new(payload);
    r.u8().ok()?;
    r.lenenc_int().ok()?;
    r.lenenc_int().ok()?;
    Some(r.position())
}

/// An OK payload's affected rows and last insert id.
pub fn ok_counts(payload: &[u8]) -> Option<(u64, u64)> {
    let mut r = PayloadReader::new(payload);
    r.u8().ok()?;
    Some((r.lenenc_int().ok()?, r.lenenc_int().ok()?))
}

/// A classic EOF payload's status flags (0 when too short).
pub fn eof_status(payload: &[u8]) -> u16 {
    if payload.len() >= 5 {
        u16::from_le_bytes([payload[3], payload[4]])
    } else {
        0
    }
}

fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xFE) && payload.len() < 9
}

/// A statement prepared on a replica: its id there, and the reply to COM_STMT_PREPARE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The replica's statement id.
    pub id: u32,
    /// Parameters.
    pub params: u16,
    /// The PREPARE_OK payload, then its parameter and column definitions and their EOFs.
    pub payloads: Vec<Vec<u8>>,
}

/// One logged-in connection to a replica.
pub struct Backend {
    addr: SocketAddr,
    stream: BufReader<TcpStream>,
    seq: u8,
    out: Vec<u8>,
    timeout: Duration,
    /// The router's statement ids prepared on this connection, with the replica's id.
    pub statements: std::collections::HashMap<u32, u32>,
    /// Which of its partition's replicas this connection reaches (set by the router).
    pub replica: usize,
}

impl Backend {
    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn io(&self, source: std::io::Error) -> BackendError {
        BackendError::Io {
            addr: self.addr,
            source,
        }
    }

    fn protocol(&self, message: impl Into<String>) -> BackendError {
        BackendError::Protocol {
            addr: self.addr,
            message: message.into(),
        }
    }

    fn protocol_error(&self, e: ProtocolError) -> BackendError {
        match e {
            ProtocolError::Io(source) => self.io(source),
            other => self.protocol(other.to_string()),
        }
    }

    /// Connects to `addr` and logs in as `user`, in database `db` when given; `found_rows`
    /// asks for CLIENT_FOUND_ROWS (UPDATE counts matched rows, not changed ones), as the
    /// router's client did.
    pub async fn connect(
        addr: SocketAddr,
        user: &str,
        password: &str,
        db: Option<&str>,
        found_rows: bool,
        timeout: Duration,
    ) -> Result<Backend, BackendError> {
        let io = |source| BackendError::Io { addr, source };
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io(std::io::ErrorKind::TimedOut.into()))?
            .map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let mut b = Backend {
            addr,
            stream: BufReader::with_capacity(16 * 1024, stream),
            seq: 0,
            out: Vec::with_capacity(1024),
            timeout,
            statements: std::collections::HashMap::new(),
            replica: 0,
        };
        let greeting = b.read_payload().await?;
        if greeting.first() == Some(&0xFF) {
            let e = ServerError::parse(&greeting);
            return Err(BackendError::Login {
                addr,
                code: e.code,
                message: e.message,
            });
        }
        let scramble = crate::protocol::handshake::greeting_scramble(&greeting)
            .map_err(|e| b.protocol(format!("greeting: {e}")))?;
        let extra = if found_rows { cap::CLIENT_FOUND_ROWS } else { 0 };
        let p = crate::protocol::handshake::client_handshake_response(user, password, &scramble, db, extra);
        b.write_payload(&p).await?;
        let reply = b.read_payload().await?;
        match reply.first() {
            Some(0x00) => Ok(b),
            Some(0xFF) => {
                let e = ServerError::parse(&reply);
                Err(BackendError::Login {
                    addr,
                    code: e.code,
                    message: e.message,
                })
            }
            _ => Err(b.protocol("unexpected reply to the login")),
        }
    }

    /// True when the replica closed this idle connection (or sent something unasked): it must
    /// not carry a statement, which would then look lost after it was sent.
    pub fn is_closed(&mut self) -> bool {
        if !self.stream.buffer().is_empty() {
            return true;
        }
        let mut probe = [0u8; 1];
        match self.stream.get_ref().try_read(&mut probe) {
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            Ok(_) => true,
        }
    }

    async fn write_payload(&mut self, payload: &[u8]) -> Result<(), BackendError> {
        self.out.clear();
        write_packet(&mut self.out, &mut self.seq, payload);
        let write = self.stream.get_mut().write_all(&self.out);
        match tokio::time::timeout(self.timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.io(e)),
            Err(_) => Err(self.io(std::io::ErrorKind::TimedOut.into())),
        }
    }

    async fn read_payload(&mut self) -> Result<Vec<u8>, BackendError> {
        let mut payload = Vec::new();
        let read = read_packet(&mut self.stream, &mut self.seq, MAX_REPLY_BYTES, &mut payload);
        match tokio::time::timeout(self.timeout, read).await {
            Err(_) => Err(self.io(std::io::ErrorKind::TimedOut.into())),
            Ok(Err(e)) => Err(self.protocol_error(e)),
            Ok(Ok(ReadOutcome::Packet)) => Ok(payload),
            Ok(Ok(ReadOutcome::Eof)) => Err(self.io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(Ok(ReadOutcome::TooLarge(n))) => Err(self.protocol(format!("a packet of {n} bytes"))),
        }
    }

    /// Runs one text query and reads its whole reply.
    pub async fn query(&mut self, sql: &str) -> Result<Reply, BackendError> {
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(crate::protocol::command::COM_QUERY);
        p.extend_from_slice(sql.as_bytes());
        self.seq = 0;
        self.write_payload(&p).await?;
        self.read_reply().await
    }

    /// Prepares `sql` (COM_STMT_PREPARE): the statement, or the replica's ERR.
    pub async fn prepare(&mut self, sql: &str) -> Result<Result<Prepared, Reply>, BackendError> {
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(crate::protocol::command::COM_STMT_PREPARE);
        p.extend_from_slice(sql.as_bytes());
        self.seq = 0;
        self.write_payload(&p).await?;
        let first = self.read_payload().await?;
        match first.first() {
            Some(0x00) if first.len() >= 12 => {}
            Some(0xFF) => return Ok(Err(Reply::Err(ServerError::parse(&first), first))),
            _ => return Err(self.protocol("unexpected reply to COM_STMT_PREPARE")),
        }
        let id = u32::from_le_bytes([first[1], first[2], first[3], first[4]]);
        let columns = u16::from_le_bytes([first[5], first[6]]);
        let params = u16::from_le_bytes([first[7], first[8]]);
        let mut payloads = vec![first];
        for count in [params, columns] {
            if count > 0 {
                for _ in 0..=count {
                    payloads.push(self.read_payload().await?); // definitions, then EOF
                }
                if !is_eof(payloads.last().expect("read above")) {
                    return Err(self.protocol("no EOF after the prepared statement's definitions"));
                }
            }
        }
        Ok(Ok(Prepared { id, params, payloads }))
    }

    /// Runs a prepared statement: `payload` is COM_STMT_EXECUTE's (after the command byte).
    pub async fn execute(&mut self, payload: &[u8]) -> Result<Reply, BackendError> {
        let mut p = Vec::with_capacity(payload.len() + 1);
        p.push(crate::protocol::command::COM_STMT_EXECUTE);
        p.extend_from_slice(payload);
        self.seq = 0;
        self.write_payload(&p).await?;
        self.read_reply().await
    }

    /// Closes a prepared statement (COM_STMT_CLOSE has no reply).
    pub async fn close_statement(&mut self, id: u32) -> Result<(), BackendError> {
        let mut p = vec![crate::protocol::command::COM_STMT_CLOSE];
        p.extend_from_slice(&id.to_le_bytes());
        self.seq = 0;
        self.write_payload(&p).await
    }

    async fn read_reply(&mut self) -> Result<Reply, BackendError> {
        let first = self.read_payload().await?;
        let reply = match first.first() {
            Some(0x00) => Reply::Ok(first),
            Some(0xFF) => Reply::Err(ServerError::parse(&first), first),
            Some(0xFB) => return Err(self.protocol("LOCAL INFILE is not relayed")),
            Some(_) => self.read_result_set(first).await?,
            None => return Err(self.protocol("an empty reply")),
        };
        if reply.status() & crate::protocol::status::SERVER_MORE_RESULTS_EXISTS != 0 {
            return Err(self.protocol("several result sets in one reply"));
        }
        Ok(reply)
    }

    async fn read_result_set(&mut self, header: Vec<u8>) -> Result<Reply, BackendError> {
        let count = PayloadReader::new(&header)
            .lenenc_int()
            .map_err(|e| self.protocol(format!("column count: {e}")))?;
        if count == 0 || count > 4096 {
            return Err(self.protocol(format!("a result set of {count} columns")));
        }
        let mut rs = ResultSet {
            header,
            ..ResultSet::default()
        };
        let mut bytes = 0usize;
        for _ in 0..count {
            let c = self.read_payload().await?;
            bytes += c.len();
            rs.columns.push(c);
        }
        rs.columns_eof = self.read_payload().await?;
        if !is_eof(&rs.columns_eof) {
            return Err(self.protocol("no EOF after the column definitions"));
        }
        loop {
            let p = self.read_payload().await?;
            if is_eof(&p) {
                rs.eof = p;
                return Ok(Reply::Rows(rs));
            }
            if p.first() == Some(&0xFF) {
                return Ok(Reply::Err(ServerError::parse(&p), p));
            }
            bytes += p.len();
            if bytes > MAX_REPLY_BYTES {
                return Err(self.protocol(format!("a result set over {MAX_REPLY_BYTES} bytes")));
            }
            rs.rows.push(p);
        }
    }
}
