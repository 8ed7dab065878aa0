//! The MySQL client/server protocol, server side, on tokio streams.
//!
//! Written from the protocol documentation ("Client/Server Protocol"): the 4.1 protocol only,
//! `mysql_native_password` authentication (with an auth switch for clients that start with
//! another plugin), no TLS, no compression, no multi-statements, and EOF packets (not
//! `CLIENT_DEPRECATE_EOF`) at the end of column definitions and rows.
//!
//! Modules: [`constants`] (numbers), [`packet`] (framing and length-encoded values),
//! [`connection`] ([`Connection`] and the [`Command`]s it reads), [`handshake`] (greeting,
//! handshake response, authentication), [`resultset`] (OK/ERR/EOF, column definitions, text
//! and binary rows), [`stmt`] (COM_STMT_EXECUTE decoding).
//!
//! Invariants of the whole module:
//! - no unsafe code; no input can make it panic: every read of a payload is bounds-checked
//!   and every length from the wire is checked against the bytes present before it is used
//!   to slice or to allocate;
//! - no payload over the connection's `max_allowed_packet` is buffered;
//! - sequence ids are checked on every packet read and continue on every packet written;
//! - a [`Connection`] buffers what it writes until [`Connection::flush`], which writes it
//!   in one `write_all`;
//! - after an error other than [`ProtocolError::PacketTooLarge`] (and, from
//!   [`Connection::read_command`], [`ProtocolError::Malformed`] for a bad command body) the
//!   stream may be out of step with the client: the caller should close the connection.

pub mod connection;
pub mod constants;
pub mod handshake;
pub mod packet;
pub mod resultset;
pub mod stmt;

#[cfg(test)]
mod test_util;

pub use connection::{Command, Connection};
pub use constants::{capability, charset, column_flag, command, error, status, FieldType};
pub use handshake::{native_password_stage2, native_password_token, Authenticator, HandshakeInfo};
pub use packet::{read_lenenc_int, write_lenenc_bytes, write_lenenc_int, PayloadReader, MAX_PAYLOAD};
pub use resultset::{ColumnInfo, OkInfo};
pub use stmt::{decode_execute, execute_stmt_id, ExecuteRequest, ParamType};

/// What can go wrong speaking the protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The stream failed or ended inside a packet (`UnexpectedEof`).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The client sent bytes that do not follow the protocol.
    #[error("malformed packet: {0}")]
    Malformed(String),
    /// A command's payload was over `max_allowed_packet`: it was read and dropped, ERR 1153
    /// was sent, and the connection can read the next command.
    #[error("packet of {len} bytes is bigger than max_allowed_packet ({max})")]
    PacketTooLarge {
        /// The payload's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Authentication failed (ERR 1045 was sent).
    #[error("access denied for user '{user}'")]
    AccessDenied {
        /// The user name the client gave.
        user: String,
    },
    /// The client asked for something this server does not offer (TLS); an ERR was sent.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// A `Malformed` error.
pub(crate) fn malformed(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::Malformed(msg.into())
}
