//! [`Connection`]: one client's stream, its read buffer, its write buffer and its sequence
//! id; and [`Command`], what [`Connection::read_command`] returns.
//!
//! Invariants: reads go through one `BufReader` and one reusable payload buffer; writes are
//! appended to `out` and leave only through [`Connection::flush`] (one `write_all`), which
//! [`Connection::read_command`] also calls first when anything is pending, so a reply is
//! never left unsent while the server waits for the client. Each command starts a new
//! sequence (the client's first packet has id 0) and the reply continues it.
//!
//! A command over `max_allowed_packet` is read and dropped, ERR 1153 is sent and
//! `Err(PacketTooLarge)` returned; unlike MySQL, which closes the connection after 1153, the
//! connection stays usable and the next `read_command` reads the next command.
//! `read_command` is not cancel-safe: if a timeout drops it midway, close the connection.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::constants::{command as cmd, error, status};
use super::packet::{read_packet, PayloadReader, ReadOutcome};
use super::{malformed, ProtocolError};

/// A command from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// COM_QUERY: the SQL text.
    Query(Vec<u8>),
    /// COM_INIT_DB: the database name.
    InitDb(Vec<u8>),
    /// COM_PING.
    Ping,
    /// COM_QUIT: the client is closing the connection (no reply).
    Quit,
    /// COM_FIELD_LIST: a table's columns (deprecated, still sent by `mysql` for completion).
    FieldList {
        /// The table name.
        table: Vec<u8>,
        /// A `LIKE` pattern for column names (often empty).
        wildcard: Vec<u8>,
    },
    /// COM_STMT_PREPARE: the SQL text.
    StmtPrepare(Vec<u8>),
    /// COM_STMT_EXECUTE: the whole payload after the command byte; see
    /// [`super::stmt::decode_execute`].
    StmtExecute(Vec<u8>),
    /// COM_STMT_CLOSE (no reply).
    StmtClose(u32),
    /// COM_STMT_RESET.
    StmtReset(u32),
    /// COM_STMT_SEND_LONG_DATA (no reply): a piece of a parameter's value, to append.
    StmtSendLongData {
        /// The statement.
        stmt_id: u32,
        /// The parameter's index, from 0.
        param: u16,
        /// The piece.
        data: Vec<u8>,
    },
    /// COM_RESET_CONNECTION.
    ResetConnection,
    /// Any other command byte (reply ERR 1047 unknown command).
    Other(u8),
}

impl Command {
    /// Parses a command payload (command byte first). An empty payload, or one too short for
    /// its command, is `Malformed`.
    pub fn parse(payload: &[u8]) -> Result<Command, ProtocolError> {
        let mut r = PayloadReader::new(payload);
        let code = r.u8().map_err(|_| malformed("empty command packet"))?;
        Ok(match code {
            cmd::COM_QUERY => Command::Query(r.rest().to_vec()),
            cmd::COM_INIT_DB => Command::InitDb(r.rest().to_vec()),
            cmd::COM_PING => Command::Ping,
            cmd::COM_QUIT => Command::Quit,
            cmd::COM_FIELD_LIST => {
                let table = r.nul_bytes()?.to_vec();
                Command::FieldList {
                    table,
                    wildcard: r.rest().to_vec(),
                }
            }
            cmd::COM_STMT_PREPARE => Command::StmtPrepare(r.rest().to_vec()),
            cmd::COM_STMT_EXECUTE => Command::StmtExecute(r.rest().to_vec()),
            cmd::COM_STMT_CLOSE => Command::StmtClose(r.u32()?),
            cmd::COM_STMT_RESET => Command::StmtReset(r.u32()?),
            cmd::COM_STMT_SEND_LONG_DATA => Command::StmtSendLongData {
                stmt_id: r.u32()?,
                param: r.u16()?,
                data: r.rest().to_vec(),
            },
            cmd::COM_RESET_CONNECTION => Command::ResetConnection,
            other => Command::Other(other),
        })
    }
}

/// One client connection: see the module documentation.
#[derive(Debug)]
pub struct Connection<S> {
    pub(super) stream: BufReader<S>,
    pub(super) out: Vec<u8>,
    pub(super) payload: Vec<u8>,
    pub(super) seq: u8,
    pub(super) max_allowed_packet: usize,
    /// The status of the last OK/EOF written (for the EOF of a COM_FIELD_LIST reply).
    pub(super) last_status: u16,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection<S> {
    /// A connection over `stream` that refuses commands over `max_allowed_packet` bytes.
    pub fn new(stream: S, max_allowed_packet: usize) -> Self {
        Connection {
            stream: BufReader::with_capacity(16 * 1024, stream),
            out: Vec::with_capacity(16 * 1024),
            payload: Vec::new(),
            seq: 0,
            max_allowed_packet,
            last_status: status::SERVER_STATUS_AUTOCOMMIT,
        }
    }

    /// Reads the next command: `Ok(None)` when the client closed the stream cleanly between
    /// commands. Flushes pending output first. A command over `max_allowed_packet` is
    /// dropped, answered with ERR 1153 and returned as `Err(PacketTooLarge)`; the next call
    /// reads the next command.
    pub async fn read_command(&mut self) -> Result<Option<Command>, ProtocolError> {
        if !self.out.is_empty() {
            self.flush().await?;
        }
        self.seq = 0;
        match read_packet(
            &mut self.stream,
            &mut self.seq,
            self.max_allowed_packet,
            &mut self.payload,
        )
        .await?
        {
            ReadOutcome::Eof => Ok(None),
            ReadOutcome::Packet => Command::parse(&self.payload).map(Some),
            ReadOutcome::TooLarge(len) => Err(self.refuse_too_large(len).await),
        }
    }

    /// Answers a dropped oversized payload with ERR 1153; the error to return.
    pub(super) async fn refuse_too_large(&mut self, len: usize) -> ProtocolError {
        self.write_err(
            error::ER_NET_PACKET_TOO_LARGE,
            error::sqlstate(error::ER_NET_PACKET_TOO_LARGE),
            "Got a packet bigger than 'max_allowed_packet' bytes",
        );
        if let Err(e) = self.flush().await {
            return e;
        }
        ProtocolError::PacketTooLarge {
            len,
            max: self.max_allowed_packet,
        }
    }

    /// Writes everything buffered in one `write_all`, then flushes the stream.
    pub async fn flush(&mut self) -> Result<(), ProtocolError> {
        if !self.out.is_empty() {
            self.stream.get_mut().write_all(&self.out).await?;
            self.out.clear();
            if self.out.capacity() > 4 << 20 {
                self.out = Vec::with_capacity(16 * 1024); // a big result set's buffer goes
            }
        }
        self.stream.get_mut().flush().await?;
        Ok(())
    }

    /// The limit on a command's payload.
    pub fn max_allowed_packet(&self) -> usize {
        self.max_allowed_packet
    }

    /// Changes the limit on a command's payload (for the next command on).
    pub fn set_max_allowed_packet(&mut self, max: usize) {
        self.max_allowed_packet = max;
    }

    /// Bytes written but not yet flushed.
    pub fn pending_output(&self) -> usize {
        self.out.len()
    }

    /// The stream.
    pub fn get_ref(&self) -> &S {
        self.stream.get_ref()
    }

    /// The stream (bytes already buffered for reading are lost if it is read directly).
    pub fn into_inner(self) -> S {
        self.stream.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_util::{mem_conn, packet, parse_packets, written};
    use proptest::prelude::*;

    #[test]
    fn parses_commands() {
        assert_eq!(
            Command::parse(b"\x03select 1").unwrap(),
            Command::Query(b"select 1".to_vec())
        );
        assert_eq!(Command::parse(b"\x02db").unwrap(), Command::InitDb(b"db".to_vec()));
        assert_eq!(Command::parse(b"\x0e").unwrap(), Command::Ping);
        assert_eq!(Command::parse(b"\x01").unwrap(), Command::Quit);
        assert_eq!(Command::parse(b"\x1f").unwrap(), Command::ResetConnection);
        assert_eq!(Command::parse(b"\x11abc").unwrap(), Command::Other(0x11));
        assert_eq!(
            Command::parse(b"\x04t1\0c%").unwrap(),
            Command::FieldList {
                table: b"t1".to_vec(),
                wildcard: b"c%".to_vec()
            }
        );
        assert!(Command::parse(b"\x04t1").is_err());
        assert_eq!(Command::parse(b"\x19\x07\0\0\0").unwrap(), Command::StmtClose(7));
        assert_eq!(Command::parse(b"\x1a\x07\0\0\0").unwrap(), Command::StmtReset(7));
        assert!(Command::parse(b"\x19\x07\0\0").is_err());
        assert_eq!(
            Command::parse(b"\x18\x02\0\0\0\x01\0data").unwrap(),
            Command::StmtSendLongData {
                stmt_id: 2,
                param: 1,
                data: b"data".to_vec()
            }
        );
        assert!(Command::parse(b"\x18\x02\0\0\0\x01").is_err());
        assert_eq!(
            Command::parse(b"\x17\x01\0\0\0").unwrap(),
            Command::StmtExecute(vec![1, 0, 0, 0])
        );
        assert_eq!(
            Command::parse(b"\x16sel").unwrap(),
            Command::StmtPrepare(b"sel".to_vec())
        );
        assert!(Command::parse(b"")
            .unwrap_err()
            .to_string()
            .starts_with("malformed packet: "));
    }

    #[tokio::test]
    async fn reads_commands_and_resets_the_sequence() {
        let mut input = packet(0, b"\x03select 1");
        input.extend(packet(0, b"\x0e"));
        let mut conn = mem_conn(input, 1024);
        assert_eq!(
            conn.read_command().await.unwrap(),
            Some(Command::Query(b"select 1".to_vec()))
        );
        conn.write_eof(2);
        assert_eq!(conn.read_command().await.unwrap(), Some(Command::Ping));
        conn.write_eof(2);
        conn.flush().await.unwrap();
        assert_eq!(conn.read_command().await.unwrap(), None);
        let out = parse_packets(written(&conn));
        assert_eq!(
            out.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![1, 1],
            "replies continue at 1"
        );
    }

    #[tokio::test]
    async fn empty_packet_and_eof_inside_a_packet() {
        let mut conn = mem_conn(packet(0, b""), 1024);
        assert!(matches!(conn.read_command().await, Err(ProtocolError::Malformed(_))));
        let mut conn = mem_conn(vec![9, 0, 0, 0, 3, b's'], 1024);
        match conn.read_command().await {
            Err(ProtocolError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        let mut conn = mem_conn(vec![9, 0], 1024);
        assert!(matches!(conn.read_command().await, Err(ProtocolError::Io(_))));
        let mut conn = mem_conn(packet(3, b"\x0e"), 1024);
        let e = conn.read_command().await.unwrap_err();
        assert!(e.to_string().contains("packets out of order"), "{e}");
    }

    #[tokio::test]
    async fn oversized_command_gets_1153_and_the_next_command_is_read() {
        let mut big = vec![3u8];
        big.extend(vec![b'x'; 5000]);
        let mut input = packet(0, &big);
        input.extend(packet(0, b"\x03select 2"));
        let mut conn = mem_conn(input, 1000);
        match conn.read_command().await {
            Err(ProtocolError::PacketTooLarge { len, max }) => assert_eq!((len, max), (5001, 1000)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            conn.read_command().await.unwrap(),
            Some(Command::Query(b"select 2".to_vec()))
        );
        let out = parse_packets(written(&conn));
        assert_eq!(out.len(), 1);
        let (seq, err) = &out[0];
        assert_eq!(*seq, 1);
        assert_eq!(&err[..9], b"\xff\x81\x04#08S01");
        assert_eq!(&err[9..], b"Got a packet bigger than 'max_allowed_packet' bytes");
    }

    #[tokio::test]
    async fn oversized_command_over_a_duplex_stream() {
        use tokio::io::AsyncReadExt;
        let (mut client, server) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let mut conn = Connection::new(server, 64 * 1024);
            let first = conn.read_command().await;
            assert!(matches!(first, Err(ProtocolError::PacketTooLarge { .. })));
            let second = conn.read_command().await.unwrap();
            conn.write_eof(2);
            conn.flush().await.unwrap();
            second
        });
        let mut big = vec![3u8];
        big.extend(vec![b'y'; 300_000]);
        let mut wire = packet(0, &big);
        wire.extend(packet(0, b"\x0e"));
        client.write_all(&wire).await.unwrap();
        let mut reply = [0u8; 64 + 4 + 5];
        client.read_exact(&mut reply[..4]).await.unwrap();
        let len = reply[0] as usize;
        client.read_exact(&mut reply[4..4 + len]).await.unwrap();
        assert_eq!(reply[4], 0xff);
        let mut eof = [0u8; 9];
        client.read_exact(&mut eof).await.unwrap();
        assert_eq!(eof, [5, 0, 0, 1, 0xfe, 0, 0, 2, 0]);
        assert_eq!(server.await.unwrap(), Some(Command::Ping));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_read_command(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 0..5),
            framed in any::<bool>(),
        ) {
            // raw garbage, or well-framed packets with random payloads (then garbage)
            let mut input = Vec::new();
            if framed {
                for p in &payloads {
                    input.extend(packet(0, p));
                }
            }
            input.extend(bytes);
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let mut conn = mem_conn(input, 64);
                for _ in 0..100 {
                    match conn.read_command().await {
                        Ok(Some(_)) | Err(ProtocolError::PacketTooLarge { .. }) => {}
                        Ok(None) | Err(_) => break,
                    }
                }
            });
        }
    }
}
