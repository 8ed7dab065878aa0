//! Record framing of slog and checkpoint files: record kinds, framed records (the
//! [`crate::coding::RecordHeader`] plus payload), the slog file header, and cutting a slog image
//! into records with torn-tail detection.
//!
//! Invariants:
//! - Every record is `header (24 bytes) ‖ payload`, with a header CRC and a payload CRC; an
//!   entry never spans records.
//! - A slog image is `header ‖ record*`. An invalid record with no valid record anywhere after
//!   it is a torn tail (reported, for the caller to drop); an invalid record followed by a valid
//!   one, a complete record with a bad checksum, or a damaged header followed by non-zero bytes
//!   is [`crate::Error::Corruption`]: damage at rest, never a torn write.
//! - Framing never trusts a length before the header CRC has matched and never panics on
//!   arbitrary bytes.

use super::current::{check_fixed_header, META_FORMAT_VERSION};
use super::edit::{corrupt, put_entry, SlogEntry};
pub(super) use crate::coding::Framed;
use crate::coding::{frame_record, get_u32, get_u64, seal_crc_tail, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::Result;
use std::io;
use std::path::Path;

const SLOG_MAGIC: &[u8; 8] = b"RPTSLOG\0";
/// Size of a slog file header.
pub(crate) const SLOG_HEADER_SIZE: usize = 32;
/// Entries are packed into records of about this many payload bytes (an entry never spans
/// records; a bigger entry gets a record of its own).
pub(crate) const RECORD_TARGET: usize = 1 << 20;

/// Slog record: a transaction starts (empty payload).
pub(crate) const REC_BEGIN: u8 = 1;
/// Slog and checkpoint record: a sequence of encoded entries.
pub(crate) const REC_ENTRIES: u8 = 2;
/// Slog record: the transaction commits (payload: u64 entry count).
pub(crate) const REC_COMMIT: u8 = 3;
/// Checkpoint record: the trailer.
pub(crate) const REC_END: u8 = 4;

/// Appends one framed record. Fails (nothing appended) if the payload exceeds 4 GiB - 1.
pub(crate) fn encode_record(out: &mut Vec<u8>, kind: u8, seq: u64, payload: &[u8]) -> io::Result<()> {
    let payload_len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "metadata record payload exceeds 4 GiB"))?;
    let h = RecordHeader {
        payload_crc: crc32c::crc32c(payload),
        payload_len,
        record_type: kind,
        first_lsn: seq,
    };
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(payload);
    Ok(())
}

/// Encodes `entries` as ENTRIES records of about [`RECORD_TARGET`] bytes, calling `emit` with
/// each finished payload.
pub(crate) fn pack_entries<'a>(
    entries: impl IntoIterator<Item = &'a SlogEntry>,
    emit: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut payload = Vec::new();
    let mut one = Vec::new();
    for e in entries {
        one.clear();
        put_entry(&mut one, e);
        if !payload.is_empty() && payload.len() + one.len() > RECORD_TARGET {
            emit(&payload)?;
            payload.clear();
        }
        payload.extend_from_slice(&one);
    }
    if !payload.is_empty() {
        emit(&payload)?;
    }
    Ok(())
}

pub(super) fn encode_slog_header(number: u64) -> [u8; SLOG_HEADER_SIZE] {
    let mut h = [0u8; SLOG_HEADER_SIZE];
    h[0..8].copy_from_slice(SLOG_MAGIC);
    h[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    seal_crc_tail(&mut h);
    h
}

/// Checks a slog header; returns `(number, version)`.
pub(crate) fn decode_slog_header(path: &Path, data: &[u8]) -> Result<(u64, u32)> {
    check_fixed_header(path, data, SLOG_HEADER_SIZE, SLOG_MAGIC, "slog header")?;
    if get_u32(data, 12).unwrap_or(0) != 0 || get_u32(data, 24).unwrap_or(0) != 0 {
        return Err(corrupt(path, 12, "slog header: reserved bytes are not zero"));
    }
    Ok((get_u64(data, 16).unwrap_or(0), get_u32(data, 8).unwrap_or(0)))
}

/// The first complete, CRC-valid record starting at or after `from`, if any.
fn find_valid_record(data: &[u8], from: usize) -> Option<usize> {
    (from..data.len().saturating_sub(RECORD_HEADER_SIZE - 1)).find(|&p| frame_record(data, p).is_ok())
}

/// A torn tail: its offset and why the record there is invalid.
pub(super) type TornTail = (usize, &'static str);

/// Frames every record of a slog image after its header. Returns the records and, if the file
/// ends in a torn tail, where and why. Damage followed by a valid record is corruption.
pub(super) fn frame_slog(path: &Path, data: &[u8]) -> Result<(Vec<Framed>, Option<TornTail>)> {
    let mut out = Vec::new();
    let mut off = SLOG_HEADER_SIZE;
    while off < data.len() {
        match frame_record(data, off) {
            Ok(r) => {
                off = r.end;
                out.push(r);
            }
            Err(reason) => {
                // A torn append leaves a prefix of what was written: a short header, or a
                // valid header whose payload runs past the end of the file. A complete record
                // with a bad checksum, or a damaged header followed by non-zero bytes, is
                // damage at rest, never a torn write: refusing it keeps a committed flush from
                // silently disappearing (its redo segments may already be deleted).
                let rest = &data[off..];
                let header = RecordHeader::decode(rest);
                let complete = header.is_some_and(|h| rest.len() >= RECORD_HEADER_SIZE + h.payload_len as usize);
                let garbage_header =
                    header.is_none() && rest.len() >= RECORD_HEADER_SIZE && rest.iter().any(|&b| b != 0);
                if complete || garbage_header {
                    return Err(corrupt(path, off as u64, format!("{reason} in a complete record")));
                }
                // A header whose CRC matches has a trustworthy length: look for valid records
                // only after the record. Otherwise from the next byte on.
                let from = match header {
                    Some(h) => off.saturating_add(RECORD_HEADER_SIZE + h.payload_len as usize),
                    None => off + 1,
                };
                if let Some(p) = find_valid_record(data, from) {
                    return Err(corrupt(
                        path,
                        off as u64,
                        format!("{reason}, and a valid record follows at offset {p}"),
                    ));
                }
                return Ok((out, Some((off, reason))));
            }
        }
    }
    Ok((out, None))
}
