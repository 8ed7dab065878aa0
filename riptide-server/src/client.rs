//! A minimal blocking MySQL client: connect with mysql_native_password, run text queries and
//! prepared statements (COM_STMT_PREPARE/EXECUTE), read OK, ERR and result sets (binary rows
//! returned as text). For tests, crash checks and tools that talk to
//! `riptide serve` (or any MySQL server) without a client library.
//!
//! Invariants: it speaks only the 4.1 protocol with classic EOF packets (what the server
//! offers); every length from the server is bounds-checked; a server error is
//! [`ClientError::Server`] with its code, never a panic.

use crate::protocol::packet::PayloadReader;
use crate::protocol::ProtocolError;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// What a query returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryResult {
    /// An OK packet.
    Ok {
        /// Affected rows.
        affected: u64,
        /// LAST_INSERT_ID.
        last_insert_id: u64,
    },
    /// A text result set: column names and rows (`None` for NULL).
    Rows {
        /// Column names.
        columns: Vec<String>,
        /// Rows of text values.
        rows: Vec<Vec<Option<String>>>,
    },
}

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent something this client cannot read.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server answered with an ERR packet.
    #[error("ERROR {code} ({state}): {message}")]
    Server {
        /// MySQL error code.
        code: u16,
        /// SQLSTATE.
        state: String,
        /// Message.
        message: String,
    },
}

impl From<ProtocolError> for ClientError {
    fn from(e: ProtocolError) -> Self {
        ClientError::Protocol(e.to_string())
    }
}

impl ClientError {
    /// The server's error code, if this is a server error.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A connection.
pub struct Client {
    stream: TcpStream,
    seq: u8,
}

fn server_error(payload: &[u8]) -> ClientError {
    let e = crate::protocol::resultset::ErrPacket::parse(payload);
    ClientError::Server {
        code: e.code,
        state: e.state,
        message: e.message,
    }
}

impl Client {
    /// Connects and logs in; `db` is the database to use, if any.
    pub fn connect(
        addr: impl ToSocketAddrs,
        user: &str,
        password: &str,
        db: Option<&str>,
    ) -> Result<Client, ClientError> {
        Client::connect_within(addr, user, password, db, Duration::from_secs(120))
    }

    /// [`Client::connect`] where connecting, each read and each write fail after `timeout`
    /// (a server that is stopped or cut off answers nothing).
    pub fn connect_within(
        addr: impl ToSocketAddrs,
        user: &str,
        password: &str,
        db: Option<&str>,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| ClientError::Protocol("no address to connect to".into()))?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut c = Client { stream, seq: 0 };
        let greeting = c.read_packet()?;
        if greeting.first() == Some(&0xFF) {
            return Err(server_error(&greeting));
        }
        let scramble = crate::protocol::handshake::greeting_scramble(&greeting)?;
        let p = crate::protocol::handshake::client_handshake_response(user, password, &scramble, db, 0);
        c.write_packet(&p)?;
        let reply = c.read_packet()?;
        match reply.first() {
            Some(0x00) => Ok(c),
            Some(0xFF) => Err(server_error(&reply)),
            _ => Err(ClientError::Protocol("unexpected reply to the handshake".into())),
        }
    }

    /// The underlying stream (for tests that then send raw bytes).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    fn write_packet(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mut out = Vec::with_capacity(payload.len() + 4);
        crate::protocol::packet::write_packet(&mut out, &mut self.seq, payload);
        self.stream.write_all(&out)?;
        Ok(())
    }

    fn read_packet(&mut self) -> Result<Vec<u8>, ClientError> {
        let mut payload = Vec::new();
        loop {
            let mut head = [0u8; 4];
            self.stream.read_exact(&mut head)?;
            let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
            self.seq = head[3].wrapping_add(1);
            let start = payload.len();
            payload.resize(start + len, 0);
            self.stream.read_exact(&mut payload[start..])?;
            if len < 0xFF_FFFF {
                return Ok(payload);
            }
        }
    }

    /// Runs a text query.
    pub fn query(&mut self, sql: &str) -> Result<QueryResult, ClientError> {
        self.seq = 0;
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(0x03);
        p.extend_from_slice(sql.as_bytes());
        self.write_packet(&p)?;
        self.read_reply(false)
    }

    /// Reads a query's or an execute's reply: OK, ERR, or a result set whose rows are text
    /// (`binary` false) or binary-protocol rows, turned into text.
    fn read_reply(&mut self, binary: bool) -> Result<QueryResult, ClientError> {
        let first = self.read_packet()?;
        match first.first() {
            Some(0x00) => {
                let mut r = PayloadReader::new(&first[1..]);
                Ok(QueryResult::Ok {
                    affected: r.lenenc_int()?,
                    last_insert_id: r.lenenc_int()?,
                })
            }
            Some(0xFF) => Err(server_error(&first)),
            Some(_) => {
                let ncols = PayloadReader::new(&first).lenenc_int()? as usize;
                let mut columns = Vec::with_capacity(ncols.min(4096));
                let mut types = Vec::with_capacity(ncols.min(4096));
                for _ in 0..ncols {
                    let def = self.read_packet()?;
                    let mut r = PayloadReader::new(&def);
                    for _ in 0..4 {
                        r.lenenc_bytes()?; // catalog, schema, table, org_table
                    }
                    columns.push(String::from_utf8_lossy(r.lenenc_bytes()?).into_owned());
                    r.lenenc_bytes()?; // org_name
                    r.lenenc_int()?; // length of the fixed fields
                    r.u16()?; // charset
                    r.u32()?; // column length
                    let t = r.u8()?;
                    let flags = r.u16()?;
                    types.push((t, flags & 0x20 != 0));
                }
                self.read_packet()?; // EOF
                let mut rows = Vec::new();
                loop {
                    let row = self.read_packet()?;
                    match row.first() {
                        Some(0xFE) if row.len() < 9 => break,
                        Some(0xFF) => return Err(server_error(&row)),
                        _ => {}
                    }
                    rows.push(if binary {
                        binary_row(&row, &types)?
                    } else {
                        text_row(&row, ncols)?
                    });
                }
                Ok(QueryResult::Rows { columns, rows })
            }
            None => Err(ClientError::Protocol("empty reply".into())),
        }
    }

    /// Runs a query that returns rows; their text values.
    pub fn rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, ClientError> {
        match self.query(sql)? {
            QueryResult::Rows { rows, .. } => Ok(rows),
            QueryResult::Ok { .. } => Ok(Vec::new()),
        }
    }

    /// Prepares `sql` (COM_STMT_PREPARE): the statement's id and parameter count.
    pub fn prepare(&mut self, sql: &str) -> Result<(u32, u16), ClientError> {
        self.seq = 0;
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(0x16);
        p.extend_from_slice(sql.as_bytes());
        self.write_packet(&p)?;
        let first = self.read_packet()?;
        match first.first() {
            Some(0xFF) => return Err(server_error(&first)),
            Some(0x00) if first.len() >= 12 => {}
            _ => return Err(ClientError::Protocol("unexpected reply to COM_STMT_PREPARE".into())),
        }
        let mut r = PayloadReader::new(&first[1..]);
        let id = r.u32()?;
        let columns = r.u16()?;
        let params = r.u16()?;
        for count in [params, columns] {
            if count > 0 {
                for _ in 0..=count {
                    self.read_packet()?; // definitions, then EOF
                }
            }
        }
        Ok((id, params))
    }

    /// Runs prepared statement `id` with `params` (sent with their types every time); the
    /// binary result rows are returned as text, as [`Client::query`] returns them (integers in
    /// decimal, doubles in Rust's shortest form, temporal values as MySQL prints them).
    pub fn execute(&mut self, id: u32, params: &[Param]) -> Result<QueryResult, ClientError> {
        self.seq = 0;
        let mut p = vec![0x17];
        p.extend_from_slice(&id.to_le_bytes());
        p.push(0); // no cursor
        p.extend_from_slice(&1u32.to_le_bytes());
        if !params.is_empty() {
            let mut bitmap = vec![0u8; params.len().div_ceil(8)];
            for (i, v) in params.iter().enumerate() {
                if matches!(v, Param::Null) {
                    bitmap[i / 8] |= 1 << (i % 8);
                }
            }
            p.extend_from_slice(&bitmap);
            p.push(1);
            for v in params {
                p.extend_from_slice(match v {
                    Param::Null => &[0x06, 0],
                    Param::Int(_) => &[0x08, 0],
                    Param::Text(_) => &[0xFD, 0],
                });
            }
            for v in params {
                match v {
                    Param::Null => {}
                    Param::Int(i) => p.extend_from_slice(&i.to_le_bytes()),
                    Param::Text(t) => crate::protocol::write_lenenc_bytes(&mut p, t.as_bytes()),
                }
            }
        }
        self.write_packet(&p)?;
        self.read_reply(true)
    }

    /// Sends COM_QUIT.
    pub fn quit(mut self) -> Result<(), ClientError> {
        self.seq = 0;
        self.write_packet(&[0x01])?;
        Ok(())
    }
}

/// A parameter of [`Client::execute`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// NULL.
    Null,
    /// A BIGINT.
    Int(i64),
    /// A string.
    Text(String),
}

/// A text-protocol row's `ncols` values (`None` for NULL).
fn text_row(row: &[u8], ncols: usize) -> Result<Vec<Option<String>>, ClientError> {
    let mut r = PayloadReader::new(row);
    let mut vals = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        if r.peek() == Some(0xFB) {
            r.u8()?;
            vals.push(None);
        } else {
            vals.push(Some(String::from_utf8_lossy(r.lenenc_bytes()?).into_owned()));
        }
    }
    Ok(vals)
}

/// A binary-protocol row's values as text; `types` are the columns' (type byte, unsigned).
fn binary_row(row: &[u8], types: &[(u8, bool)]) -> Result<Vec<Option<String>>, ClientError> {
    let mut r = PayloadReader::new(row);
    r.u8()?; // 0x00 header
    let bitmap = r.bytes((types.len() + 7 + 2) / 8)?.to_vec();
    let mut out = Vec::with_capacity(types.len());
    for (i, &(t, unsigned)) in types.iter().enumerate() {
        let bit = i + 2;
        if bitmap[bit / 8] & (1 << (bit % 8)) != 0 {
            out.push(None);
            continue;
        }
        let v = match t {
            0x01 => {
                let b = r.u8()?;
                if unsigned {
                    b.to_string()
                } else {
                    (b as i8).to_string()
                }
            }
            0x02 | 0x0d => {
                let v = r.u16()?;
                if unsigned {
                    v.to_string()
                } else {
                    (v as i16).to_string()
                }
            }
            0x03 | 0x09 => {
                let v = r.u32()?;
                if unsigned {
                    v.to_string()
                } else {
                    (v as i32).to_string()
                }
            }
            0x08 => {
                let v = r.u64()?;
                if unsigned {
                    v.to_string()
                } else {
                    (v as i64).to_string()
                }
            }
            0x04 => f32::from_le_bytes(r.array()?).to_string(),
            0x05 => f64::from_le_bytes(r.array()?).to_string(),
            0x07 | 0x0a | 0x0c => {
                let n = r.u8()? as usize;
                let b = r.bytes(n)?;
                let (y, mo, d) = match b {
                    [y0, y1, mo, d, ..] => (u16::from_le_bytes([*y0, *y1]), *mo, *d),
                    _ => (0, 0, 0),
                };
                let (h, mi, s) = match b {
                    [_, _, _, _, h, mi, s, ..] => (*h, *mi, *s),
                    _ => (0, 0, 0),
                };
                if t == 0x0a {
                    format!("{y:04}-{mo:02}-{d:02}")
                } else {
                    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
                }
            }
            _ => String::from_utf8_lossy(r.lenenc_bytes()?).into_owned(),
        };
        out.push(Some(v));
    }
    Ok(out)
}
