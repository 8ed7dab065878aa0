//! Redo record and op encoding (see `docs/format.md`, "Redo log").
//!
//! The framing itself (CRC masking, varints, the 24-byte record header) is
//! [`crate::coding`]'s; this module gives it the redo log's meaning.
//!
//! Invariants:
//! - A record is `header (24 bytes) ‖ payload`; the header carries its own CRC32C (so a damaged
//!   length is detected before it is trusted) and the payload's CRC32C. Its type is
//!   [`RECORD_GROUP`] or [`RECORD_REWRITE`], its sequence field the group's first LSN.
//! - Ops are self-delimiting; decoding never trusts a length beyond the payload and never
//!   panics on arbitrary bytes.
//! - In a v2 segment, header bytes 13..16 of a write-group record hold how far the
//!   log's synced end lay behind the record's start when it was written, in [`UNSYNCED_UNIT`]s
//!   rounded up ([`UNSYNCED_UNKNOWN`] when too far to say); recovery uses it to tell damage in
//!   bytes that were never synced from damage in bytes that were.

use crate::coding::{get_varint, put_varint, RecordHeader, RECORD_HEADER_SIZE};
use crate::key::{Lsn, ValueKind, MAX_LSN};

/// Record type: a write group; op `i` has LSN `first_lsn + i`.
pub(crate) const RECORD_GROUP: u8 = 1;
/// Record type: rewritten live data; every op carries its own LSN.
pub(crate) const RECORD_REWRITE: u8 = 2;

/// The unit of a record's unsynced distance (header bytes 13..16).
pub(crate) const UNSYNCED_UNIT: u64 = 16;
/// An unsynced distance too large for 24 bits: nothing is known about the synced end.
pub(crate) const UNSYNCED_UNKNOWN: u32 = 0xFF_FFFF;

/// Writes into each record of `records` (whole encoded records, the first at file offset
/// `offset`) how far behind its start the synced end `synced` lies, and re-seals its header.
pub(crate) fn stamp_unsynced_distance(records: &mut [u8], offset: u64, synced: u64) {
    let mut at = 0usize;
    while let Some(h) = records.get_mut(at..at + RECORD_HEADER_SIZE) {
        let distance = (offset + at as u64).saturating_sub(synced).div_ceil(UNSYNCED_UNIT);
        let units = u32::try_from(distance)
            .unwrap_or(UNSYNCED_UNKNOWN)
            .min(UNSYNCED_UNKNOWN);
        h[13..16].copy_from_slice(&units.to_le_bytes()[..3]);
        RecordHeader::reseal(h);
        let payload_len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        at += RECORD_HEADER_SIZE + payload_len;
    }
    debug_assert_eq!(at, records.len(), "whole records only");
}

/// The least file offset the log was synced to when the record whose header `h` starts at
/// `offset` was written (`None` if its distance is unknown).
pub(crate) fn synced_at_least(h: &[u8], offset: u64) -> Option<u64> {
    let units = u32::from_le_bytes([*h.get(13)?, *h.get(14)?, *h.get(15)?, 0]);
    (units != UNSYNCED_UNKNOWN).then(|| offset.saturating_sub(u64::from(units) * UNSYNCED_UNIT))
}

/// Appends one op in the group encoding: `kind ‖ varint table ‖ varint klen ‖ key ‖ [varint vlen ‖ value]`.
pub(crate) fn put_op(out: &mut Vec<u8>, kind: ValueKind, table: u32, key: &[u8], value: &[u8]) {
    out.push(kind as u8);
    put_varint(out, u64::from(table));
    put_varint(out, key.len() as u64);
    out.extend_from_slice(key);
    if kind == ValueKind::Put {
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

/// Appends one op in the rewrite encoding: `varint lsn ‖ op`.
#[cfg(test)]
pub(crate) fn put_rewrite_op(out: &mut Vec<u8>, lsn: Lsn, kind: ValueKind, table: u32, key: &[u8], value: &[u8]) {
    put_varint(out, lsn);
    put_op(out, kind, table, key, value);
}

/// One decoded op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Op<'a> {
    pub(crate) lsn: Lsn,
    pub(crate) kind: ValueKind,
    pub(crate) table: u32,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: u64) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    let end = pos.checked_add(len)?;
    let s = buf.get(*pos..end)?;
    *pos = end;
    Some(s)
}

/// Decodes one group-encoded op at `*pos` (LSN filled in by the caller).
pub(crate) fn get_op<'a>(buf: &'a [u8], pos: &mut usize, lsn: Lsn) -> Option<Op<'a>> {
    let kind = ValueKind::from_u8(*buf.get(*pos)?)?;
    *pos += 1;
    let table = u32::try_from(get_varint(buf, pos)?).ok()?;
    let klen = get_varint(buf, pos)?;
    let key = take(buf, pos, klen)?;
    let value: &[u8] = if kind == ValueKind::Put {
        let vlen = get_varint(buf, pos)?;
        take(buf, pos, vlen)?
    } else {
        &[]
    };
    Some(Op {
        lsn,
        kind,
        table,
        key,
        value,
    })
}

/// Decodes every op of a record payload. `Err(offset)` gives the payload offset of the first
/// malformed op.
pub(crate) fn decode_ops<'a>(header: &RecordHeader, payload: &'a [u8]) -> Result<Vec<Op<'a>>, usize> {
    let mut ops = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let start = pos;
        // LSNs are 56 bits (an internal key keeps `lsn << 8 | kind`): a larger one, or a group
        // whose LSNs would run past that, is malformed (never an overflow).
        let op = match header.record_type {
            RECORD_GROUP => header
                .first_lsn
                .checked_add(ops.len() as u64)
                .filter(|&lsn| lsn <= MAX_LSN)
                .and_then(|lsn| get_op(payload, &mut pos, lsn)),
            RECORD_REWRITE => get_varint(payload, &mut pos)
                .filter(|&lsn| lsn <= MAX_LSN)
                .and_then(|lsn| get_op(payload, &mut pos, lsn)),
            _ => None,
        };
        match op {
            Some(op) => ops.push(op),
            None => return Err(start),
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coding::RECORD_HEADER_SIZE;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = RecordHeader {
            payload_crc: 0xdead_beef,
            payload_len: 1234,
            record_type: RECORD_GROUP,
            first_lsn: 42,
        };
        let enc = h.encode();
        assert_eq!(RecordHeader::decode(&enc), Some(h));
        for i in 0..RECORD_HEADER_SIZE {
            let mut bad = enc;
            bad[i] ^= 0x10;
            assert_eq!(RecordHeader::decode(&bad), None, "flip at byte {i} not detected");
        }
        assert_eq!(RecordHeader::decode(&enc[..10]), None);
    }

    #[test]
    fn ops_round_trip() {
        let mut p = Vec::new();
        put_op(&mut p, ValueKind::Put, 3, b"key", b"value");
        put_op(&mut p, ValueKind::Delete, 70_000, b"gone", b"ignored");
        let h = RecordHeader {
            payload_crc: 0,
            payload_len: p.len() as u32,
            record_type: RECORD_GROUP,
            first_lsn: 10,
        };
        let ops = decode_ops(&h, &p).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(
            (ops[0].lsn, ops[0].table, ops[0].key, ops[0].value),
            (10, 3, &b"key"[..], &b"value"[..])
        );
        assert_eq!(
            (ops[1].lsn, ops[1].kind, ops[1].table, ops[1].key),
            (11, ValueKind::Delete, 70_000, &b"gone"[..])
        );

        let mut r = Vec::new();
        put_rewrite_op(&mut r, 99, ValueKind::Put, 0, b"a", b"b");
        put_rewrite_op(&mut r, 7, ValueKind::Put, 1, b"c", b"");
        let h = RecordHeader {
            record_type: RECORD_REWRITE,
            ..h
        };
        let ops = decode_ops(&h, &r).unwrap();
        assert_eq!((ops[0].lsn, ops[1].lsn, ops[1].table), (99, 7, 1));
    }

    /// Found by the `redo` fuzz target (fixed CRCs): a group record whose first LSN is near
    /// `u64::MAX` overflowed computing its ops' LSNs (a panic with overflow checks); LSNs past
    /// 56 bits would also have been packed into internal keys with their top bits lost.
    #[test]
    fn lsns_past_56_bits_are_malformed_not_an_overflow() {
        let mut p = Vec::new();
        put_op(&mut p, ValueKind::Put, 0, b"a", b"b");
        put_op(&mut p, ValueKind::Put, 0, b"c", b"d");
        for first_lsn in [u64::MAX, MAX_LSN, MAX_LSN + 1, 1 << 60] {
            let h = RecordHeader {
                payload_crc: 0,
                payload_len: p.len() as u32,
                record_type: RECORD_GROUP,
                first_lsn,
            };
            assert!(decode_ops(&h, &p).is_err(), "first LSN {first_lsn:#x}");
        }
        let h = RecordHeader {
            payload_crc: 0,
            payload_len: p.len() as u32,
            record_type: RECORD_GROUP,
            first_lsn: MAX_LSN - 1,
        };
        assert_eq!(decode_ops(&h, &p).unwrap()[1].lsn, MAX_LSN);
        let mut r = Vec::new();
        put_rewrite_op(&mut r, MAX_LSN + 1, ValueKind::Put, 0, b"a", b"b");
        let h = RecordHeader {
            record_type: RECORD_REWRITE,
            ..h
        };
        assert!(decode_ops(&h, &r).is_err());
    }

    #[test]
    fn truncated_or_garbage_payloads_are_errors_not_panics() {
        let mut p = Vec::new();
        put_op(&mut p, ValueKind::Put, 1, b"key", b"value");
        let h = RecordHeader {
            payload_crc: 0,
            payload_len: 0,
            record_type: RECORD_GROUP,
            first_lsn: 1,
        };
        for cut in 1..p.len() {
            assert!(decode_ops(&h, &p[..cut]).is_err(), "cut at {cut}");
        }
        let garbage = [0xffu8; 32];
        assert!(decode_ops(&h, &garbage).is_err());
        let mut pos = 0;
        assert_eq!(get_varint(&[0x80; 11], &mut pos), None);
    }
}
