//! Test helpers: in-memory connections and a hand-written client side of the framing.
//!
//! Invariants: test-only (`#[cfg(test)]`); the helpers build and parse packets by hand, not
//! with the code under test, so the tests check the real bytes.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::Connection;

/// A stream that reads from a byte vector and collects what is written.
pub(crate) type MemStream = tokio::io::Join<std::io::Cursor<Vec<u8>>, Vec<u8>>;

/// A connection that reads `input` and records its output.
pub(crate) fn mem_conn(input: Vec<u8>, max: usize) -> Connection<MemStream> {
    Connection::new(tokio::io::join(std::io::Cursor::new(input), Vec::new()), max)
}

/// What a [`mem_conn`] connection wrote (flushed).
pub(crate) fn written(conn: &Connection<MemStream>) -> &[u8] {
    conn.get_ref().writer()
}

/// One packet (payload under 16 MiB) with the given sequence id.
pub(crate) fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 0xFF_FFFF);
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

/// Splits bytes into `(sequence id, payload)` packets; panics on a truncated packet.
pub(crate) fn parse_packets(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]) as usize;
        out.push((bytes[3], bytes[4..4 + len].to_vec()));
        bytes = &bytes[4 + len..];
    }
    out
}

/// Reads one packet from a stream.
pub(crate) async fn read_pkt<R: AsyncRead + Unpin>(r: &mut R) -> (u8, Vec<u8>) {
    let mut h = [0u8; 4];
    r.read_exact(&mut h).await.unwrap();
    let mut p = vec![0u8; u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize];
    r.read_exact(&mut p).await.unwrap();
    (h[3], p)
}

/// Writes one packet to a stream.
pub(crate) async fn write_pkt<W: AsyncWrite + Unpin>(w: &mut W, seq: u8, payload: &[u8]) {
    w.write_all(&packet(seq, payload)).await.unwrap();
}
