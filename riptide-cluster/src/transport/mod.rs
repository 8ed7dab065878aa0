//! Node-to-node transport of Raft RPCs over TCP (tokio): length-prefixed frames holding
//! postcard-encoded messages, after TLS where configured ([`tls`]) and a mutual handshake that
//! proves both ends know the cluster's secret ([`auth`]). [`server`] answers a node's RPCs;
//! [`client`] is the `RaftNetworkFactory` that sends them.
//!
//! Invariants:
//! - A frame is a 4-byte little-endian length, then that many bytes; a length over
//!   [`MAX_FRAME`] ([`MAX_HANDSHAKE_FRAME`] during the handshake) or a body that does not decode
//!   closes the connection with an error (no allocation of the announced size, no panic).
//! - No RPC is read or answered on a connection before its handshakes succeeded. Without TLS
//!   only the handshake is authenticated: frames after it are neither signed nor encrypted, so
//!   the transport keeps out nodes without the secret, not an attacker on the path. With TLS
//!   ([`tls`], mutual, the cluster's own CA) every byte is encrypted and authenticated, and a
//!   peer needs a certificate of the cluster's CA as well as the secret.

pub mod admin;
pub mod auth;
pub mod client;
pub mod server;
pub mod tls;

pub use auth::ClusterAuth;
pub use client::TcpNetwork;
pub use server::spawn_server;
pub use tls::NodeTls;

use crate::types::TypeConfig;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

type NodeId = u64;

/// Largest frame sent or accepted: a largest write set (`MAX_WRITE_SET_BYTES`) with its entry's
/// overhead fits; an append of several entries over it is split by openraft (the client answers
/// `PayloadTooLarge`).
pub const MAX_FRAME: usize = 128 << 20;

/// Largest frame of the handshake: read before the peer proved anything.
pub const MAX_HANDSHAKE_FRAME: usize = 4 << 10;

/// An RPC from a leader or candidate.
#[derive(Serialize, Deserialize, Debug)]
pub enum Request {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// From an administrator (`riptide cluster`), not a node.
    Admin(admin::AdminRequest),
}

/// The answer to a [`Request`] of the same kind.
#[derive(Serialize, Deserialize, Debug)]
pub enum Response {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Admin(Result<admin::AdminReply, admin::AdminError>),
}

/// A transport failure: I/O, a malformed or oversized frame, or a refused handshake.
#[derive(Debug)]
pub enum TransportError {
    Io(std::io::Error),
    Malformed(String),
    Refused(String),
    /// A message to send encodes to this many bytes, over [`MAX_FRAME`].
    TooLarge(usize),
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Io(e) => write!(f, "transport I/O: {e}"),
            TransportError::Malformed(m) => write!(f, "malformed frame: {m}"),
            TransportError::Refused(m) => write!(f, "refused: {m}"),
            TransportError::TooLarge(n) => write!(f, "a message of {n} bytes, over {MAX_FRAME}"),
        }
    }
}

impl std::error::Error for TransportError {}

impl From<std::io::Error> for TransportError {
    fn from(e: std::io::Error) -> Self {
        TransportError::Io(e)
    }
}

/// Writes `value` as one frame.
pub(crate) async fn write_frame<T: Serialize>(
    io: &mut (impl AsyncWrite + Unpin),
    value: &T,
) -> Result<(), TransportError> {
    let body = postcard::to_stdvec(value).map_err(|e| TransportError::Malformed(format!("encode: {e}")))?;
    if body.len() > MAX_FRAME {
        // Nothing was sent: the caller may split the message (an append of several entries).
        return Err(TransportError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    io.write_all(&frame).await?;
    io.flush().await?;
    Ok(())
}

/// Reads one frame and decodes it as a `T`.
pub(crate) async fn read_frame<T: DeserializeOwned>(io: &mut (impl AsyncRead + Unpin)) -> Result<T, TransportError> {
    read_frame_within(io, MAX_FRAME).await
}

/// Reads one frame of at most `max` bytes and decodes it as a `T`.
pub(crate) async fn read_frame_within<T: DeserializeOwned>(
    io: &mut (impl AsyncRead + Unpin),
    max: usize,
) -> Result<T, TransportError> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(TransportError::Malformed(format!(
            "frame of {len} bytes announced, over {max}"
        )));
    }
    let mut body = vec![0u8; len];
    io.read_exact(&mut body).await?;
    postcard::from_bytes(&body).map_err(|e| TransportError::Malformed(format!("undecodable frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_over_the_frame_limit_is_too_large_and_not_sent() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let huge = vec![7u8; MAX_FRAME + 1];
        assert!(matches!(write_frame(&mut a, &huge).await, Err(TransportError::TooLarge(n)) if n > MAX_FRAME));
        // Nothing reached the peer: the next frame is the first it reads.
        write_frame(&mut a, &5u32).await.unwrap();
        assert_eq!(read_frame::<u32>(&mut b).await.unwrap(), 5);
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_frames_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let vote = Request::Vote(VoteRequest::new(openraft::Vote::new(3, 1), None));
        write_frame(&mut a, &vote).await.unwrap();
        match read_frame::<Request>(&mut b).await.unwrap() {
            Request::Vote(v) => assert_eq!(v.vote, openraft::Vote::new(3, 1)),
            other => panic!("read back {other:?}"),
        }
        // Oversized announcement: refused before reading the body.
        a.write_all(&((MAX_FRAME as u32) + 1).to_le_bytes()).await.unwrap();
        assert!(matches!(
            read_frame::<Request>(&mut b).await,
            Err(TransportError::Malformed(_))
        ));
        // A body that is not a request.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&3u32.to_le_bytes()).await.unwrap();
        a.write_all(&[0xee, 0xee, 0xee]).await.unwrap();
        assert!(matches!(
            read_frame::<Request>(&mut b).await,
            Err(TransportError::Malformed(_))
        ));
        // A peer that hangs up mid-frame.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&100u32.to_le_bytes()).await.unwrap();
        a.write_all(&[1, 2, 3]).await.unwrap();
        drop(a);
        assert!(matches!(
            read_frame::<Request>(&mut b).await,
            Err(TransportError::Io(_))
        ));
    }
}
