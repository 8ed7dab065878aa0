//! Framing: packets, sequence ids, length-encoded integers and strings.
//!
//! A packet is a 3-byte little-endian payload length, a 1-byte sequence id and the payload.
//! A payload of [`MAX_PAYLOAD`] (0xFFFFFF) bytes continues in the next packet; a shorter one
//! (possibly empty) ends the logical payload. Invariants:
//! - reading never trusts a length: it checks it against the bytes present ([`PayloadReader`])
//!   or reads only the bytes that arrive ([`read_packet`] grows its buffer as data comes, up
//!   to `max` bytes), so a lying header costs at most what the peer really sends;
//! - a payload over `max` is never buffered: its bytes are read and dropped through a bounded
//!   buffer, and [`read_packet`] reports [`ReadOutcome::TooLarge`], leaving the stream at the
//!   next packet boundary;
//! - every packet's sequence id is checked: the next one after a packet with id `n` is
//!   `n + 1` (mod 256), in both directions;
//! - writes go to a `Vec<u8>`; a payload of `MAX_PAYLOAD` bytes or more is split, and a
//!   payload that is an exact multiple of `MAX_PAYLOAD` gets an empty last packet.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

use super::{malformed, ProtocolError};

/// The largest payload of one packet; a packet this long is continued by the next one.
pub const MAX_PAYLOAD: usize = 0xFF_FFFF;

/// What [`read_packet`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The stream ended cleanly before a packet.
    Eof,
    /// A whole logical payload is in the buffer.
    Packet,
    /// The payload (of this many bytes) was over the limit: read and dropped.
    TooLarge(usize),
}

/// Reads one logical payload (joining continuation packets) into `payload`, checking each
/// packet's sequence id against `*seq` and advancing it. A payload over `max` bytes is read
/// and dropped ([`ReadOutcome::TooLarge`]). EOF inside a packet is `Io(UnexpectedEof)`.
pub async fn read_packet<R: AsyncBufRead + Unpin>(
    r: &mut R,
    seq: &mut u8,
    max: usize,
    payload: &mut Vec<u8>,
) -> Result<ReadOutcome, ProtocolError> {
    if payload.capacity() > 1 << 20 {
        *payload = Vec::new(); // don't keep a big command's buffer for the connection's life
    }
    payload.clear();
    if r.fill_buf().await?.is_empty() {
        return Ok(ReadOutcome::Eof);
    }
    let mut total = 0usize;
    let mut too_large = false;
    loop {
        let mut header = [0u8; 4];
        r.read_exact(&mut header).await?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        if header[3] != *seq {
            return Err(malformed(format!(
                "packets out of order (sequence id {}, expected {})",
                header[3], *seq
            )));
        }
        *seq = seq.wrapping_add(1);
        total = total.saturating_add(len);
        if !too_large && total > max {
            too_large = true;
            payload.clear();
        }
        let want = len as u64;
        let got = if too_large {
            tokio::io::copy_buf(&mut (&mut *r).take(want), &mut tokio::io::sink()).await?
        } else {
            (&mut *r).take(want).read_to_end(payload).await? as u64
        };
        if got != want {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "early eof").into());
        }
        if len < MAX_PAYLOAD {
            break;
        }
    }
    Ok(if too_large {
        ReadOutcome::TooLarge(total)
    } else {
        ReadOutcome::Packet
    })
}

/// Appends `payload` to `out` as one logical packet (split as needed), advancing `*seq`.
pub fn write_packet(out: &mut Vec<u8>, seq: &mut u8, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PAYLOAD);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(*seq);
        *seq = seq.wrapping_add(1);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        if n < MAX_PAYLOAD {
            break;
        }
    }
}

/// Starts a packet in place: reserves its header and returns where it starts, for
/// [`finish_packet`]. The payload is appended to `out` in between.
pub fn begin_packet(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    start
}

/// Ends the packet begun at `start`: fills in its header, or splits it when it is
/// [`MAX_PAYLOAD`] bytes or more; advances `*seq`.
pub fn finish_packet(out: &mut Vec<u8>, start: usize, seq: &mut u8) {
    let len = out.len() - start - 4;
    if len < MAX_PAYLOAD {
        out[start..start + 3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
        out[start + 3] = *seq;
        *seq = seq.wrapping_add(1);
    } else {
        let payload = out.split_off(start + 4);
        out.truncate(start);
        write_packet(out, seq, &payload);
    }
}

/// Appends a length-encoded integer.
pub fn write_lenenc_int(out: &mut Vec<u8>, v: u64) {
    if v < 251 {
        out.push(v as u8);
    } else if v < 1 << 16 {
        out.push(0xFC);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v < 1 << 24 {
        out.push(0xFD);
        out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
    } else {
        out.push(0xFE);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends a length-encoded string.
pub fn write_lenenc_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_lenenc_int(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Reads a length-encoded integer from the start of `buf`: `(value, bytes used)`. `0xFB`
/// (NULL), `0xFF` and a truncated integer are `Malformed`.
pub fn read_lenenc_int(buf: &[u8]) -> Result<(u64, usize), ProtocolError> {
    let mut r = PayloadReader::new(buf);
    let v = r.lenenc_int()?;
    Ok((v, r.position()))
}

/// A bounds-checked cursor over a payload: every read checks that its bytes are there and
/// returns `Malformed` (never panics) when they are not.
#[derive(Debug, Clone)]
pub struct PayloadReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> PayloadReader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        PayloadReader { buf, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if n > self.remaining() {
            return Err(malformed(format!(
                "need {n} bytes at offset {}, have {}",
                self.pos,
                self.remaining()
            )));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// The next byte, without consuming it.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, ProtocolError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length-encoded integer (`0xFB` and `0xFF` are `Malformed`).
    pub fn lenenc_int(&mut self) -> Result<u64, ProtocolError> {
        match self.u8()? {
            b @ 0..=250 => Ok(b as u64),
            0xFC => Ok(self.u16()? as u64),
            0xFD => {
                let b = self.array::<3>()?;
                Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]) as u64)
            }
            0xFE => self.u64(),
            b => Err(malformed(format!("invalid length-encoded integer prefix {b:#04x}"))),
        }
    }

    /// A length-encoded string; its length is checked against the bytes left.
    pub fn lenenc_bytes(&mut self) -> Result<&'a [u8], ProtocolError> {
        let n = self.lenenc_int()?;
        let n = usize::try_from(n).map_err(|_| malformed("length-encoded string too long"))?;
        self.bytes(n)
    }

    /// A NUL-terminated string (the NUL is consumed, not returned); `Malformed` if no NUL.
    pub fn nul_bytes(&mut self) -> Result<&'a [u8], ProtocolError> {
        let rest = &self.buf[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| malformed("missing NUL terminator"))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    /// A NUL-terminated string, or the rest of the payload when there is no NUL.
    pub fn nul_or_rest(&mut self) -> &'a [u8] {
        self.nul_bytes().unwrap_or_else(|_| self.rest())
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, BufReader};

    async fn read_all(bytes: Vec<u8>, max: usize) -> (Vec<Result<(ReadOutcome, Vec<u8>), String>>, u8) {
        let mut r = BufReader::new(std::io::Cursor::new(bytes));
        let mut seq = 0;
        let mut out = Vec::new();
        let mut payload = Vec::new();
        loop {
            match read_packet(&mut r, &mut seq, max, &mut payload).await {
                Ok(ReadOutcome::Eof) => break,
                Ok(o) => out.push(Ok((o, payload.clone()))),
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        (out, seq)
    }

    #[tokio::test]
    async fn round_trips_at_the_split_boundaries() {
        for len in [
            0,
            1,
            250,
            MAX_PAYLOAD - 1,
            MAX_PAYLOAD,
            MAX_PAYLOAD + 1,
            2 * MAX_PAYLOAD,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut wire = Vec::new();
            let mut seq = 0;
            write_packet(&mut wire, &mut seq, &payload);
            let packets = len / MAX_PAYLOAD + 1;
            assert_eq!(wire.len(), len + 4 * packets, "len {len}");
            assert_eq!(seq as usize, packets);
            if len % MAX_PAYLOAD == 0 {
                assert_eq!(&wire[wire.len() - 4..], &[0, 0, 0, seq - 1], "empty last packet");
            }
            // begin/finish must produce the same bytes
            let mut wire2 = vec![9u8];
            let mut seq2 = 0;
            let start = begin_packet(&mut wire2);
            wire2.extend_from_slice(&payload);
            finish_packet(&mut wire2, start, &mut seq2);
            assert_eq!(&wire2[1..], &wire[..]);
            let (got, rseq) = read_all(wire, usize::MAX).await;
            assert_eq!(got.len(), 1);
            let (o, p) = got[0].as_ref().unwrap();
            assert_eq!(*o, ReadOutcome::Packet);
            assert!(p == &payload, "len {len}");
            assert_eq!(rseq, seq);
        }
    }

    #[tokio::test]
    async fn empty_continuation_is_read() {
        // 0xFFFFFF bytes then an empty packet: one logical payload of 0xFFFFFF bytes, then a
        // second, separate packet.
        let mut wire = Vec::new();
        let mut seq = 0;
        write_packet(&mut wire, &mut seq, &vec![7u8; MAX_PAYLOAD]);
        write_packet(&mut wire, &mut seq, b"next");
        let (got, _) = read_all(wire, usize::MAX).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap().1.len(), MAX_PAYLOAD);
        assert_eq!(got[1].as_ref().unwrap().1, b"next");
    }

    #[tokio::test]
    async fn out_of_order_and_truncation() {
        let (got, _) = read_all(vec![1, 0, 0, 5, b'x'], 100).await;
        assert!(got[0].as_ref().unwrap_err().contains("packets out of order"));
        for wire in [
            vec![1u8],
            vec![1, 0, 0],
            vec![3, 0, 0, 0, b'a'],
            vec![0xff, 0xff, 0xff, 0, 1, 2],
        ] {
            let (got, _) = read_all(wire, usize::MAX).await;
            assert!(got[0].as_ref().unwrap_err().contains("early eof"), "{got:?}");
        }
        // continuation with a wrong sequence id
        let mut wire = vec![0xff, 0xff, 0xff, 0];
        wire.extend(std::iter::repeat_n(0u8, MAX_PAYLOAD));
        wire.extend([0, 0, 0, 7]);
        let (got, _) = read_all(wire, usize::MAX).await;
        assert!(got[0].as_ref().unwrap_err().contains("out of order"));
    }

    #[tokio::test]
    async fn oversized_payloads_are_skipped_to_the_next_packet() {
        let mut wire = Vec::new();
        let mut seq = 0;
        write_packet(&mut wire, &mut seq, &[1u8; 100]);
        let mut seq = 0;
        write_packet(&mut wire, &mut seq, &vec![2u8; MAX_PAYLOAD + 10]); // over in the 1st packet
        let mut seq = 0;
        write_packet(&mut wire, &mut seq, b"ok");
        let (got, _) = {
            // read each command with seq reset to 0, as read_command does
            let mut r = BufReader::new(std::io::Cursor::new(wire));
            let mut payload = Vec::new();
            let mut out = Vec::new();
            loop {
                let mut seq = 0;
                match read_packet(&mut r, &mut seq, 50, &mut payload).await.unwrap() {
                    ReadOutcome::Eof => break,
                    o => out.push((o, payload.clone())),
                }
            }
            (out, ())
        };
        assert_eq!(got[0].0, ReadOutcome::TooLarge(100));
        assert_eq!(got[1].0, ReadOutcome::TooLarge(MAX_PAYLOAD + 10));
        assert_eq!(got[2], (ReadOutcome::Packet, b"ok".to_vec()));
        // limit crossed only in the continuation packet
        let mut wire = Vec::new();
        let mut seq = 0;
        write_packet(&mut wire, &mut seq, &vec![3u8; MAX_PAYLOAD + 5]);
        let (got, seq) = read_all(wire, MAX_PAYLOAD + 1).await;
        assert_eq!(got[0].as_ref().unwrap().0, ReadOutcome::TooLarge(MAX_PAYLOAD + 5));
        assert_eq!(seq, 2);
    }

    #[tokio::test]
    async fn reads_from_a_duplex_stream_in_pieces() {
        let (mut client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            let mut wire = Vec::new();
            let mut seq = 0;
            write_packet(&mut wire, &mut seq, &[5u8; 1000]);
            client.write_all(&wire).await.unwrap();
        });
        let mut r = BufReader::new(server);
        let mut payload = Vec::new();
        let mut seq = 0;
        assert_eq!(
            read_packet(&mut r, &mut seq, 1 << 20, &mut payload).await.unwrap(),
            ReadOutcome::Packet
        );
        assert_eq!(payload, vec![5u8; 1000]);
        writer.await.unwrap();
        assert_eq!(
            read_packet(&mut r, &mut seq, 1 << 20, &mut payload).await.unwrap(),
            ReadOutcome::Eof
        );
    }

    #[test]
    fn lenenc_round_trip_and_bounds() {
        for v in [0u64, 250, 251, 0xFFFF, 0x10000, 0xFF_FFFF, 0x100_0000, u64::MAX] {
            let mut b = Vec::new();
            write_lenenc_int(&mut b, v);
            let want_len = match v {
                0..=250 => 1,
                251..=0xFFFF => 3,
                0x10000..=0xFF_FFFF => 4,
                _ => 9,
            };
            assert_eq!(b.len(), want_len);
            assert_eq!(read_lenenc_int(&b).unwrap(), (v, want_len));
            for cut in 0..b.len() {
                assert!(read_lenenc_int(&b[..cut]).is_err());
            }
        }
        assert!(read_lenenc_int(&[0xFB]).is_err());
        assert!(read_lenenc_int(&[0xFF]).is_err());
        let mut r = PayloadReader::new(&[0xFE, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1]);
        assert!(r.lenenc_bytes().is_err(), "huge length must not slice or allocate");
        let mut r = PayloadReader::new(b"ab\0cd");
        assert_eq!(r.nul_bytes().unwrap(), b"ab");
        assert!(r.clone().nul_bytes().is_err());
        assert_eq!(r.nul_or_rest(), b"cd");
        assert!(r.is_empty() && r.u8().is_err());
    }
}
