//! Decoding slog records into typed views without applying them: the per-record step of
//! replay, and the whole-file dump of the inspect tool.
//!
//! Invariants:
//! - A view is only made of a CRC-valid framed record; a CRC-valid record whose reserved bytes
//!   are not zero, whose kind is unknown, whose payload size does not fit its kind, or whose
//!   entries do not decode is [`crate::Error::Corruption`] at its offset.
//! - Dumping reads and writes nothing but the one file; damage in the middle of the file is an
//!   error, a torn tail is the last view.

use super::current::read_file;
use super::edit::{corrupt, decode_entries, SlogEntry};
use super::framing::{decode_slog_header, frame_slog, Framed, REC_BEGIN, REC_COMMIT, REC_ENTRIES};
use crate::coding::{get_u64, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::Result;
use crate::fs::FileSystem;
use std::path::Path;

/// One record of a slog file, decoded but not applied (for inspection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlogRecordView {
    /// The file header (offset 0).
    Header {
        /// The slog number it carries.
        number: u64,
        /// Its format version.
        version: u32,
    },
    /// A transaction starts.
    Begin {
        /// Transaction id.
        txn: u64,
    },
    /// Entries of a transaction.
    Entries {
        /// Transaction id.
        txn: u64,
        /// The decoded entries.
        entries: Vec<SlogEntry>,
    },
    /// A transaction commits.
    Commit {
        /// Transaction id.
        txn: u64,
        /// Number of entries the transaction holds.
        entries: u64,
    },
    /// A torn tail: `len` bytes from this offset to the end of the file that do not form a
    /// valid record (recovery drops them).
    TornTail {
        /// Bytes in the tail.
        len: u64,
        /// Why the first record there is invalid.
        reason: String,
    },
}

/// Decodes a CRC-valid slog record.
pub(super) fn view_record(path: &Path, data: &[u8], r: &Framed) -> Result<SlogRecordView> {
    let hdr = &data[r.offset..r.offset + RECORD_HEADER_SIZE];
    let payload = &data[r.offset + RECORD_HEADER_SIZE..r.end];
    let bad = |off: usize, why: String| corrupt(path, off as u64, why);
    if !RecordHeader::reserved_ok(hdr) {
        return Err(bad(r.offset + 13, "record header: reserved bytes are not zero".into()));
    }
    // The header's sequence field is the transaction id.
    let txn = r.header.first_lsn;
    match r.header.record_type {
        REC_BEGIN if payload.is_empty() => Ok(SlogRecordView::Begin { txn }),
        REC_ENTRIES => match decode_entries(payload) {
            Ok(entries) => Ok(SlogRecordView::Entries { txn, entries }),
            Err(at) => Err(bad(
                r.offset + RECORD_HEADER_SIZE + at,
                "malformed entry in a record whose checksum matches".into(),
            )),
        },
        REC_COMMIT if payload.len() == 8 => Ok(SlogRecordView::Commit {
            txn,
            entries: get_u64(payload, 0).unwrap_or(0),
        }),
        REC_BEGIN | REC_COMMIT => Err(bad(
            r.offset,
            format!(
                "record type {} with a {}-byte payload",
                r.header.record_type,
                payload.len()
            ),
        )),
        k => Err(bad(r.offset, format!("unknown slog record type {k}"))),
    }
}

/// Decodes every record of a slog file, with offsets, without applying anything. A torn tail
/// ends the list as [`SlogRecordView::TornTail`]; damage in the middle is an error.
pub(crate) fn dump_slog(fs: &dyn FileSystem, path: &Path) -> Result<Vec<(u64, SlogRecordView)>> {
    let data = read_file(fs, path)?;
    let (number, version) = decode_slog_header(path, &data)?;
    let mut out = vec![(0, SlogRecordView::Header { number, version })];
    let (records, tail) = frame_slog(path, &data)?;
    for r in &records {
        out.push((r.offset as u64, view_record(path, &data, r)?));
    }
    if let Some((off, reason)) = tail {
        out.push((
            off as u64,
            SlogRecordView::TornTail {
                len: (data.len() - off) as u64,
                reason: reason.to_string(),
            },
        ));
    }
    Ok(out)
}
