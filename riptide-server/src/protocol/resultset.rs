//! Replies: OK, ERR and EOF packets, column definitions, result sets in the text protocol
//! (COM_QUERY) and the binary protocol (COM_STMT_EXECUTE), and the COM_STMT_PREPARE reply.
//!
//! Invariants: every writer appends whole packets to the connection's output buffer with the
//! next sequence ids, and never panics, whatever the values: a row shorter than the columns
//! is padded with NULLs, a longer one is cut; a binary value of the wrong kind for its
//! column is converted (numbers saturate to the column's range, text that does not parse
//! reads as 0 or the zero date). Column definitions are the 4.1 form; result sets end
//! their column definitions and their rows with EOF packets (no `CLIENT_DEPRECATE_EOF`).

use std::io::Write as _;

use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::Connection;
use super::constants::{charset, column_flag as flag, FieldType};
use super::packet::{begin_packet, finish_packet, write_lenenc_bytes, write_lenenc_int};
use crate::value::{format_double, DateTime, Value};

/// An ERR packet's fields, as a client reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrPacket {
    /// MySQL error code.
    pub code: u16,
    /// SQLSTATE (5 characters, or empty when the packet had none).
    pub state: String,
    /// The message.
    pub message: String,
}

impl ErrPacket {
    /// Parses an ERR payload (0xFF first); what is missing reads as 0 or empty.
    pub fn parse(payload: &[u8]) -> ErrPacket {
        let mut r = super::packet::PayloadReader::new(payload);
        let _ = r.u8();
        let code = r.u16().unwrap_or(0);
        let rest = r.rest();
        let (state, msg) = if rest.first() == Some(&b'#') && rest.len() >= 6 {
            (String::from_utf8_lossy(&rest[1..6]).into_owned(), &rest[6..])
        } else {
            (String::new(), rest)
        };
        ErrPacket {
            code,
            state,
            message: String::from_utf8_lossy(msg).into_owned(),
        }
    }
}

/// One column of a result set (or a parameter of a prepared statement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// The database.
    pub schema: String,
    /// The table (also sent as the original table).
    pub table: String,
    /// The column's name or alias (also sent as the original name).
    pub name: String,
    /// The type.
    pub field_type: FieldType,
    /// The display length.
    pub length: u32,
    /// [`super::column_flag`] bits.
    pub flags: u16,
    /// Digits after the point (31 for "not fixed", as for DOUBLE).
    pub decimals: u8,
    /// The character set / collation id ([`super::charset`]).
    pub charset: u16,
}

impl ColumnInfo {
    /// A column with no schema or table and the usual length, flags, decimals and charset
    /// for its type: numbers, dates and blobs binary, text utf8mb4.
    pub fn new(name: &str, field_type: FieldType) -> ColumnInfo {
        let (length, flags, decimals, cs) = {
            use FieldType::*;
            match field_type {
                Tiny => (4, flag::NUM, 0, charset::BINARY),
                Short | Year => (6, flag::NUM, 0, charset::BINARY),
                Int24 => (9, flag::NUM, 0, charset::BINARY),
                Long => (11, flag::NUM, 0, charset::BINARY),
                LongLong => (20, flag::NUM, 0, charset::BINARY),
                Float => (12, flag::NUM, 31, charset::BINARY),
                Double => (22, flag::NUM, 31, charset::BINARY),
                Decimal | NewDecimal => (65, flag::NUM, 0, charset::BINARY),
                Date => (10, 0, 0, charset::BINARY),
                Time => (10, 0, 0, charset::BINARY),
                DateTime | Timestamp => (19, 0, 0, charset::BINARY),
                Null => (0, 0, 0, charset::BINARY),
                Blob | TinyBlob | MediumBlob | LongBlob => (65_535, flag::BLOB, 0, charset::UTF8MB4_GENERAL_CI),
                Geometry | Bit => (0, 0, 0, charset::BINARY),
                _ => (1020, 0, 0, charset::UTF8MB4_GENERAL_CI),
            }
        };
        let binary = if cs == charset::BINARY { flag::BINARY } else { 0 };
        ColumnInfo {
            schema: String::new(),
            table: String::new(),
            name: name.to_string(),
            field_type,
            length,
            flags: flags | binary,
            decimals,
            charset: cs,
        }
    }
}

/// The fields of an OK packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OkInfo {
    /// Rows changed (or found, with `CLIENT_FOUND_ROWS`).
    pub affected_rows: u64,
    /// The AUTO_INCREMENT value generated, or 0.
    pub last_insert_id: u64,
    /// [`super::status`] flags.
    pub status: u16,
    /// Warnings.
    pub warnings: u16,
    /// Human-readable info (`Rows matched: 1  Changed: 1  Warnings: 0`), may be empty.
    pub info: String,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection<S> {
    /// Writes an OK packet (4.1 form).
    pub fn write_ok(&mut self, ok: &OkInfo) {
        let p = begin_packet(&mut self.out);
        self.out.push(0x00);
        write_lenenc_int(&mut self.out, ok.affected_rows);
        write_lenenc_int(&mut self.out, ok.last_insert_id);
        self.out.extend_from_slice(&ok.status.to_le_bytes());
        self.out.extend_from_slice(&ok.warnings.to_le_bytes());
        // MySQL's server and both client libraries (libmysqlclient, Connector/C) put the
        // info as a length-encoded string, whatever the protocol pages say.
        if !ok.info.is_empty() {
            write_lenenc_bytes(&mut self.out, ok.info.as_bytes());
        }
        finish_packet(&mut self.out, p, &mut self.seq);
        self.last_status = ok.status;
    }

    /// Writes an ERR packet. A `sqlstate` that is not 5 ASCII characters is sent as `HY000`;
    /// the message is cut to 512 bytes (at a character boundary).
    pub fn write_err(&mut self, code: u16, sqlstate: &str, message: &str) {
        let state = if sqlstate.len() == 5 && sqlstate.bytes().all(|b| b.is_ascii_alphanumeric()) {
            sqlstate
        } else {
            "HY000"
        };
        let mut end = message.len().min(512);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let p = begin_packet(&mut self.out);
        self.out.push(0xFF);
        self.out.extend_from_slice(&code.to_le_bytes());
        self.out.push(b'#');
        self.out.extend_from_slice(state.as_bytes());
        self.out.extend_from_slice(&message.as_bytes()[..end]);
        finish_packet(&mut self.out, p, &mut self.seq);
    }

    /// Writes `payload` as one packet as it is (a reply relayed from another server).
    pub fn write_payload(&mut self, payload: &[u8]) {
        super::packet::write_packet(&mut self.out, &mut self.seq, payload);
    }

    /// Writes an EOF packet (no warnings).
    pub fn write_eof(&mut self, status: u16) {
        let p = begin_packet(&mut self.out);
        self.out.extend_from_slice(&[0xFE, 0, 0]);
        self.out.extend_from_slice(&status.to_le_bytes());
        finish_packet(&mut self.out, p, &mut self.seq);
        self.last_status = status;
    }

    fn write_columns(&mut self, columns: &[ColumnInfo], status: u16) {
        let p = begin_packet(&mut self.out);
        write_lenenc_int(&mut self.out, columns.len() as u64);
        finish_packet(&mut self.out, p, &mut self.seq);
        for c in columns {
            self.write_column_def(c, false);
        }
        self.write_eof(status);
    }

    fn write_column_def(&mut self, c: &ColumnInfo, field_list: bool) {
        let p = begin_packet(&mut self.out);
        let out = &mut self.out;
        write_lenenc_bytes(out, b"def");
        write_lenenc_bytes(out, c.schema.as_bytes());
        write_lenenc_bytes(out, c.table.as_bytes());
        write_lenenc_bytes(out, c.table.as_bytes());
        write_lenenc_bytes(out, c.name.as_bytes());
        write_lenenc_bytes(out, c.name.as_bytes());
        out.push(0x0C);
        out.extend_from_slice(&c.charset.to_le_bytes());
        out.extend_from_slice(&c.length.to_le_bytes());
        out.push(c.field_type as u8);
        out.extend_from_slice(&c.flags.to_le_bytes());
        out.extend_from_slice(&[c.decimals, 0, 0]);
        if field_list {
            out.push(0xFB); // no default value
        }
        finish_packet(&mut self.out, p, &mut self.seq);
    }

    /// Writes a text-protocol result set: column count, definitions, EOF, rows, EOF with
    /// `status`. With no columns (not a result set) it writes an OK with `status` instead.
    pub fn write_text_resultset(&mut self, columns: &[ColumnInfo], rows: &[Vec<Value>], status: u16) {
        if columns.is_empty() {
            return self.write_ok(&OkInfo {
                status,
                ..OkInfo::default()
            });
        }
        self.write_columns(columns, status);
        for row in rows {
            let p = begin_packet(&mut self.out);
            for i in 0..columns.len() {
                write_text_value(&mut self.out, row.get(i).unwrap_or(&Value::Null));
            }
            finish_packet(&mut self.out, p, &mut self.seq);
        }
        self.write_eof(status);
    }

    /// Writes a binary-protocol result set: values encoded per their column's type. With no
    /// columns it writes an OK with `status` instead.
    pub fn write_binary_resultset(&mut self, columns: &[ColumnInfo], rows: &[Vec<Value>], status: u16) {
        if columns.is_empty() {
            return self.write_ok(&OkInfo {
                status,
                ..OkInfo::default()
            });
        }
        self.write_columns(columns, status);
        let bitmap_len = (columns.len() + 7 + 2) / 8;
        for row in rows {
            let p = begin_packet(&mut self.out);
            self.out.push(0x00);
            let bitmap = self.out.len();
            self.out.resize(bitmap + bitmap_len, 0);
            for (i, c) in columns.iter().enumerate() {
                let v = row.get(i).unwrap_or(&Value::Null);
                if v.is_null() || c.field_type == FieldType::Null {
                    self.out[bitmap + (i + 2) / 8] |= 1 << ((i + 2) % 8);
                } else {
                    write_binary_value(&mut self.out, c, v);
                }
            }
            finish_packet(&mut self.out, p, &mut self.seq);
        }
        self.write_eof(status);
    }

    /// Writes the COM_STMT_PREPARE reply: the statement's id and counts, then `params`
    /// parameter definitions (VAR_STRING, named `?`) and an EOF if there are any, then the
    /// column definitions and an EOF if there are any.
    pub fn write_prepare_ok(&mut self, stmt_id: u32, params: u16, columns: &[ColumnInfo]) {
        let p = begin_packet(&mut self.out);
        self.out.push(0x00);
        self.out.extend_from_slice(&stmt_id.to_le_bytes());
        self.out
            .extend_from_slice(&(columns.len().min(u16::MAX as usize) as u16).to_le_bytes());
        self.out.extend_from_slice(&params.to_le_bytes());
        self.out.extend_from_slice(&[0, 0, 0]); // filler, warnings
        finish_packet(&mut self.out, p, &mut self.seq);
        let status = self.last_status;
        if params > 0 {
            let mut param = ColumnInfo::new("?", FieldType::VarString);
            (param.length, param.charset, param.flags) = (0, charset::BINARY, flag::BINARY);
            for _ in 0..params {
                self.write_column_def(&param, false);
            }
            self.write_eof(status);
        }
        if !columns.is_empty() {
            for c in columns.iter().take(u16::MAX as usize) {
                self.write_column_def(c, false);
            }
            self.write_eof(status);
        }
    }

    /// Writes the COM_FIELD_LIST reply: the column definitions (default value NULL), then an
    /// EOF with the last status sent.
    pub fn write_column_definitions_for_field_list(&mut self, columns: &[ColumnInfo]) {
        for c in columns {
            self.write_column_def(c, true);
        }
        self.write_eof(self.last_status);
    }
}

/// Appends a value as a text-protocol field (NULL is `0xFB`).
fn write_text_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(0xFB),
        Value::Bytes(b) => write_lenenc_bytes(out, b),
        Value::Int(i) => write_short_text(out, format_args!("{i}")),
        Value::UInt(u) => write_short_text(out, format_args!("{u}")),
        other => write_lenenc_bytes(out, &other.to_text().unwrap_or_default()),
    }
}

/// Appends a text under 251 bytes (an integer) with its one-byte length, without allocating.
fn write_short_text(out: &mut Vec<u8>, text: std::fmt::Arguments) {
    let at = out.len();
    out.push(0);
    let _ = out.write_fmt(text); // writing to a Vec cannot fail
    out[at] = (out.len() - at - 1) as u8;
}

/// A value as an integer, for the integer column types: saturating, 0 for unparsable text.
fn to_i128(v: &Value) -> i128 {
    match v {
        Value::Null => 0,
        Value::Int(i) => *i as i128,
        Value::UInt(u) => *u as i128,
        Value::Double(d) => d.round() as i128,
        Value::Decimal(d) => d.rescale(0).map_or(d.to_f64().round() as i128, |d| d.mantissa),
        Value::Bytes(b) => {
            let s = std::str::from_utf8(b).unwrap_or("").trim();
            s.parse::<i128>()
                .unwrap_or_else(|_| s.parse::<f64>().map_or(0, |d| d.round() as i128))
        }
        Value::DateTime(d) => datetime_number(d) as i128,
    }
}

/// A value as a double, for FLOAT and DOUBLE columns.
fn to_f64(v: &Value) -> f64 {
    match v {
        Value::Null => 0.0,
        Value::Int(i) => *i as f64,
        Value::UInt(u) => *u as f64,
        Value::Double(d) => *d,
        Value::Decimal(d) => d.to_f64(),
        Value::Bytes(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0),
        Value::DateTime(d) => datetime_number(d) as f64,
    }
}

/// `YYYYMMDDhhmmss`, as MySQL reads a DATETIME as a number.
fn datetime_number(d: &DateTime) -> u64 {
    let date = d.year as u64 * 10_000 + d.month as u64 * 100 + d.day as u64;
    date * 1_000_000 + d.hour as u64 * 10_000 + d.minute as u64 * 100 + d.second as u64
}

/// Appends a non-NULL value in the binary protocol's form for its column's type.
fn write_binary_value(out: &mut Vec<u8>, c: &ColumnInfo, v: &Value) {
    use FieldType::*;
    let unsigned = c.flags & flag::UNSIGNED != 0;
    let int = |out: &mut Vec<u8>, bytes: usize| {
        let bits = 8 * bytes as u32;
        let (lo, hi) = if unsigned {
            (0, (1i128 << bits) - 1)
        } else {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        };
        out.extend_from_slice(&(to_i128(v).clamp(lo, hi) as u64).to_le_bytes()[..bytes]);
    };
    match c.field_type {
        Tiny => int(out, 1),
        Short | Year => int(out, 2),
        Long | Int24 => int(out, 4),
        LongLong => int(out, 8),
        Float => out.extend_from_slice(&(to_f64(v) as f32).to_le_bytes()),
        Double => out.extend_from_slice(&to_f64(v).to_le_bytes()),
        Date | DateTime | Timestamp => {
            let d = match v {
                Value::DateTime(d) => Some(*d),
                Value::Bytes(b) => std::str::from_utf8(b).ok().and_then(crate::value::DateTime::parse),
                _ => None,
            };
            write_binary_datetime(out, d, c.field_type == Date);
        }
        Time => write_binary_time(out, v),
        Null => {}
        _ => match v {
            Value::Bytes(b) => write_lenenc_bytes(out, b),
            Value::Double(d) if c.field_type == NewDecimal || c.field_type == Decimal => {
                write_lenenc_bytes(out, format_double(*d).as_bytes())
            }
            other => write_text_value(out, other),
        },
    }
}

/// The binary DATE/DATETIME form: a length (0, 4, 7 or 11) and that many bytes.
fn write_binary_datetime(out: &mut Vec<u8>, d: Option<DateTime>, date_only: bool) {
    let Some(d) = d else { return out.push(0) };
    let has_time = !date_only && (d.hour, d.minute, d.second, d.micro) != (0, 0, 0, 0);
    let len = match () {
        _ if !has_time && (d.year, d.month, d.day) == (0, 0, 0) => 0,
        _ if !has_time => 4,
        _ if d.micro == 0 => 7,
        _ => 11,
    };
    out.push(len);
    if len >= 4 {
        out.extend_from_slice(&d.year.to_le_bytes());
        out.extend_from_slice(&[d.month, d.day]);
    }
    if len >= 7 {
        out.extend_from_slice(&[d.hour, d.minute, d.second]);
    }
    if len == 11 {
        out.extend_from_slice(&d.micro.to_le_bytes());
    }
}

/// The binary TIME form (length 0, 8 or 12) of a `[-]H+:MM:SS[.f]` string or a DATETIME's
/// time; anything else is `00:00:00`.
fn write_binary_time(out: &mut Vec<u8>, v: &Value) {
    let (neg, hours, min, sec, micro) = match v {
        Value::DateTime(d) => (false, d.hour as u32, d.minute, d.second, d.micro),
        Value::Bytes(b) => std::str::from_utf8(b).ok().and_then(parse_time).unwrap_or_default(),
        _ => Default::default(),
    };
    if (hours, min, sec, micro) == (0, 0, 0, 0) {
        return out.push(0);
    }
    out.push(if micro == 0 { 8 } else { 12 });
    out.push(neg as u8);
    out.extend_from_slice(&(hours / 24).to_le_bytes());
    out.extend_from_slice(&[(hours % 24) as u8, min, sec]);
    if micro != 0 {
        out.extend_from_slice(&micro.to_le_bytes());
    }
}

fn parse_time(s: &str) -> Option<(bool, u32, u8, u8, u32)> {
    let s = s.trim();
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let (hms, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut it = hms.split(':');
    let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
    let digits = |x: &str| !x.is_empty() && x.len() <= 6 && x.bytes().all(|b| b.is_ascii_digit());
    if it.next().is_some() || !digits(h) || !digits(m) || !digits(sec) || !(frac.is_empty() || digits(frac)) {
        return None;
    }
    let (m, sec): (u8, u8) = (m.parse().ok()?, sec.parse().ok()?);
    let micro = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()? * 10u32.pow(6 - frac.len() as u32)
    };
    (m < 60 && sec < 60).then_some((neg, h.parse().ok()?, m, sec, micro))
}

#[cfg(test)]
#[path = "resultset_tests.rs"]
mod tests;
