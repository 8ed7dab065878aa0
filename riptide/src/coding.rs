//! Byte encodings shared by every on-disk format (redo log, catalog, space file headers, slog,
//! checkpoints, extents; see `docs/format.md`): masked CRC32C, LEB128 varints, fixed-width
//! little-endian integers and the 24-byte record header.
//!
//! Invariants:
//! - CRCs are stored masked (LevelDB's rotate-and-add), so a CRC over bytes that contain CRCs
//!   does not degenerate. [`mask_crc`] and [`unmask_crc`] are exact inverses.
//! - Integers are little-endian; varints are LEB128 of at most 10 bytes (5 for
//!   [`get_varint32`]). Every decoder is bounds-checked: truncated, overlong or out-of-range
//!   input gives `None`, never a panic or a silently wrapped value.
//! - A record header is 24 bytes: `masked header crc (over bytes 4..24) ‖ masked payload crc ‖
//!   u32 payload length ‖ u8 type ‖ 3 reserved zero bytes ‖ u64 sequence`. Its own CRC is
//!   checked before its length is trusted. What the type and sequence mean belongs to the
//!   format that frames records with it (redo, slog, checkpoint).

// ---- masked CRC32C ----------------------------------------------------------------------------

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a CRC for storage.
#[inline]
pub(crate) fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask_crc`].
#[inline]
pub(crate) fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC32C of `data`, as stored.
#[inline]
pub(crate) fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Writes the masked CRC32C of all but the last 4 bytes of `buf` into those 4 bytes (the
/// sealed fixed headers of CURRENT, slog, checkpoint and space files, and the catalog).
/// `buf` must be at least 4 bytes long.
pub(crate) fn seal_crc_tail(buf: &mut [u8]) {
    let n = buf.len() - 4;
    let crc = masked_crc32c(&buf[..n]);
    buf[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Whether the last 4 bytes of `buf` hold the masked CRC32C of the bytes before them (false if
/// `buf` is shorter than 4 bytes).
pub(crate) fn crc_tail_ok(buf: &[u8]) -> bool {
    let Some(n) = buf.len().checked_sub(4) else {
        return false;
    };
    get_u32(buf, n).map(unmask_crc) == Some(crc32c::crc32c(&buf[..n]))
}

// ---- varints ----------------------------------------------------------------------------------

/// Appends a LEB128 varint (at most 10 bytes).
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded length of a varint.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a LEB128 varint of at most 10 bytes at `*pos`, advancing it; `None` if truncated or
/// longer than 64 bits.
#[inline]
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Reads a varint that must fit in 32 bits (at most 5 bytes) at `*pos`, advancing it; `None`
/// if truncated or larger.
#[inline]
pub(crate) fn get_varint32(buf: &[u8], pos: &mut usize) -> Option<u32> {
    let mut v = 0u32;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 28 && b > 0x0f {
            return None;
        }
        v |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

// ---- fixed-width little-endian integers -------------------------------------------------------

/// Appends a little-endian u16.
#[inline]
pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a little-endian u32.
#[inline]
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a little-endian u64.
#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian u16 at `pos` (bounds-checked).
#[inline]
pub(crate) fn get_u16(buf: &[u8], pos: usize) -> Option<u16> {
    let b = buf.get(pos..pos.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

/// Reads a little-endian u32 at `pos` (bounds-checked).
#[inline]
pub(crate) fn get_u32(buf: &[u8], pos: usize) -> Option<u32> {
    let b = buf.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a little-endian u64 at `pos` (bounds-checked).
#[inline]
pub(crate) fn get_u64(buf: &[u8], pos: usize) -> Option<u64> {
    let b = buf.get(pos..pos.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

// ---- record header ----------------------------------------------------------------------------

/// Size of a record header (redo, slog and checkpoint records).
pub(crate) const RECORD_HEADER_SIZE: usize = 24;

/// A decoded record header.
///
/// The field names are the redo log's (the first user of this layout); in the slog
/// `record_type` is the record kind (`REC_*`) and `first_lsn` the transaction id, in a
/// checkpoint the record kind and the record's index in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    /// CRC32C of the payload (unmasked).
    pub(crate) payload_crc: u32,
    pub(crate) payload_len: u32,
    pub(crate) record_type: u8,
    /// The header's 64-bit sequence field (see the type's documentation).
    pub(crate) first_lsn: u64,
}

impl RecordHeader {
    /// Encodes the header, computing the header CRC; the reserved bytes are zero.
    pub(crate) fn encode(&self) -> [u8; RECORD_HEADER_SIZE] {
        let mut h = [0u8; RECORD_HEADER_SIZE];
        h[4..8].copy_from_slice(&mask_crc(self.payload_crc).to_le_bytes());
        h[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        h[12] = self.record_type;
        h[16..24].copy_from_slice(&self.first_lsn.to_le_bytes());
        Self::reseal(&mut h);
        h
    }

    /// Recomputes the header CRC of the encoded header at the start of `h` (after a change to
    /// its bytes 4..24). Does nothing if `h` is shorter than a header.
    pub(crate) fn reseal(h: &mut [u8]) {
        if let Some(h) = h.get_mut(..RECORD_HEADER_SIZE) {
            let crc = masked_crc32c(&h[4..]);
            h[0..4].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Decodes and verifies a header; `None` if its CRC does not match or `h` is short. The
    /// reserved bytes are not checked here (see [`RecordHeader::reserved_ok`]).
    pub(crate) fn decode(h: &[u8]) -> Option<Self> {
        let h = h.get(..RECORD_HEADER_SIZE)?;
        if unmask_crc(get_u32(h, 0)?) != crc32c::crc32c(&h[4..]) {
            return None;
        }
        Some(RecordHeader {
            payload_crc: unmask_crc(get_u32(h, 4)?),
            payload_len: get_u32(h, 8)?,
            record_type: h[12],
            first_lsn: get_u64(h, 16)?,
        })
    }

    /// Whether the reserved bytes 13..16 of an encoded header are zero.
    pub(crate) fn reserved_ok(h: &[u8]) -> bool {
        h.get(13..16) == Some(&[0, 0, 0][..])
    }
}

/// One complete record with good checksums, as found by [`frame_record`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Framed {
    pub(crate) offset: usize,
    pub(crate) header: RecordHeader,
    /// Offset just past its payload.
    pub(crate) end: usize,
}

/// Reads one complete record with good header and payload CRCs at `off` in `data`, or says
/// why there is none.
pub(crate) fn frame_record(data: &[u8], off: usize) -> std::result::Result<Framed, &'static str> {
    let rest = data.get(off..).unwrap_or(&[]);
    if rest.len() < RECORD_HEADER_SIZE {
        return Err("incomplete record header");
    }
    let header = RecordHeader::decode(rest).ok_or("record header checksum mismatch")?;
    let end = usize::try_from(header.payload_len)
        .ok()
        .and_then(|n| n.checked_add(RECORD_HEADER_SIZE))
        .filter(|&end| end <= rest.len())
        .ok_or("record extends past the end of the file")?;
    if crc32c::crc32c(&rest[RECORD_HEADER_SIZE..end]) != header.payload_crc {
        return Err("record payload checksum mismatch");
    }
    Ok(Framed {
        offset: off,
        header,
        end: off + end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_mask_known_vectors() {
        // crc32c("123456789") is the standard check value.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(mask_crc(0), MASK_DELTA);
        assert_eq!(mask_crc(0x0000_8000), 1u32.wrapping_add(MASK_DELTA));
        assert_eq!(mask_crc(0xe306_9283), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(unmask_crc(0xc78a_b0e5), 0xe306_9283);
        for c in [0, 1, 0xffff_ffff, 0xdead_beef, 0xe306_9283, MASK_DELTA] {
            assert_eq!(unmask_crc(mask_crc(c)), c);
            assert_ne!(mask_crc(c), c, "masking changes {c:#x}");
        }
    }

    #[test]
    fn crc_tail_seals_and_detects_damage() {
        let mut b = *b"some header bytes\0\0\0\0";
        assert!(!crc_tail_ok(&b));
        seal_crc_tail(&mut b);
        assert!(crc_tail_ok(&b));
        assert_eq!(get_u32(&b, b.len() - 4), Some(masked_crc32c(&b[..b.len() - 4])));
        for i in 0..b.len() {
            let mut bad = b;
            bad[i] ^= 0x01;
            assert!(!crc_tail_ok(&bad), "flip at byte {i} not detected");
        }
        assert!(!crc_tail_ok(&b[..3]));
    }

    #[test]
    fn varints_round_trip_with_their_length() {
        let values = [
            0,
            1,
            0x7f,
            0x80,
            300,
            0x3fff,
            0x4000,
            u64::from(u32::MAX),
            1 << 56,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &values {
            let before = buf.len();
            put_varint(&mut buf, v);
            assert_eq!(buf.len() - before, varint_len(v), "length of {v:#x}");
        }
        let mut pos = 0;
        for &v in &values {
            assert_eq!(get_varint(&buf, &mut pos), Some(v));
        }
        assert_eq!(pos, buf.len());
        assert_eq!(get_varint(&buf, &mut pos), None, "end of buffer");
        assert_eq!(varint_len(u64::MAX), 10);

        let mut buf = Vec::new();
        for v in [0u32, 127, 128, 1 << 21, u32::MAX] {
            put_varint(&mut buf, u64::from(v));
        }
        let mut pos = 0;
        for v in [0u32, 127, 128, 1 << 21, u32::MAX] {
            assert_eq!(get_varint32(&buf, &mut pos), Some(v));
        }
    }

    #[test]
    fn varints_reject_truncation_and_overflow() {
        let mut enc = Vec::new();
        put_varint(&mut enc, u64::MAX);
        for cut in 0..enc.len() {
            let mut pos = 0;
            assert_eq!(get_varint(&enc[..cut], &mut pos), None, "cut at {cut}");
        }
        // Eleven continuation bytes, or a tenth byte carrying bits past 64.
        let mut pos = 0;
        assert_eq!(get_varint(&[0x80; 11], &mut pos), None);
        let mut over = vec![0xff; 9];
        over.push(0x02);
        let mut pos = 0;
        assert_eq!(get_varint(&over, &mut pos), None);
        // 32-bit varints: 2^32 and a sixth byte are out of range.
        let mut big = Vec::new();
        put_varint(&mut big, u64::from(u32::MAX) + 1);
        let mut pos = 0;
        assert_eq!(get_varint32(&big, &mut pos), None);
        let mut pos = 0;
        assert_eq!(get_varint32(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut pos), None);
        let mut pos = 0;
        assert_eq!(get_varint32(&[0x80, 0x80], &mut pos), None);
    }

    #[test]
    fn fixed_width_integers_round_trip_and_check_bounds() {
        let mut b = Vec::new();
        put_u16(&mut b, 0xbeef);
        put_u32(&mut b, 0xdead_beef);
        put_u64(&mut b, 0x0102_0304_0506_0708);
        assert_eq!(b[..2], [0xef, 0xbe], "little-endian");
        assert_eq!(get_u16(&b, 0), Some(0xbeef));
        assert_eq!(get_u32(&b, 2), Some(0xdead_beef));
        assert_eq!(get_u64(&b, 6), Some(0x0102_0304_0506_0708));
        assert_eq!(get_u16(&b, b.len() - 1), None);
        assert_eq!(get_u32(&b, b.len() - 3), None);
        assert_eq!(get_u64(&b, b.len() - 7), None);
        assert_eq!(get_u32(&b, usize::MAX - 1), None, "no overflow computing the end");
        assert_eq!(get_u64(&b, usize::MAX), None);
    }

    #[test]
    fn record_header_round_trips_and_detects_damage() {
        let h = RecordHeader {
            payload_crc: 0xdead_beef,
            payload_len: 1234,
            record_type: 3,
            first_lsn: 42,
        };
        let enc = h.encode();
        assert_eq!(RecordHeader::decode(&enc), Some(h));
        assert!(RecordHeader::reserved_ok(&enc));
        assert_eq!(
            get_u32(&enc, 4),
            Some(mask_crc(0xdead_beef)),
            "payload CRC stored masked"
        );
        assert_eq!(get_u32(&enc, 8), Some(1234));
        assert_eq!(enc[12], 3);
        assert_eq!(get_u64(&enc, 16), Some(42));
        for i in 0..RECORD_HEADER_SIZE {
            let mut bad = enc;
            bad[i] ^= 0x10;
            assert_eq!(RecordHeader::decode(&bad), None, "flip at byte {i} not detected");
        }
        for cut in 0..RECORD_HEADER_SIZE {
            assert_eq!(RecordHeader::decode(&enc[..cut]), None, "cut at {cut}");
        }
        let mut reserved = enc;
        reserved[14] = 1;
        assert!(!RecordHeader::reserved_ok(&reserved));
        assert!(!RecordHeader::reserved_ok(&enc[..15]));
    }
}
