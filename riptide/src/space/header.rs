//! The data-file header (see `docs/format.md`, "Data file header").
//!
//! Invariants:
//! - A header copy is exactly [`HEADER_SIZE`] bytes; its last 4 bytes are the masked CRC32C of
//!   every byte before them (fields and zero padding alike), so no header byte goes unchecked.
//! - Two identical copies are written, at [`HEADER_COPY_OFFSETS`]; either valid copy is enough.
//! - Decoding never panics and never trusts a field before the CRC has matched: a copy is
//!   [`HeaderCopy::Blank`] (all zero: never written), [`HeaderCopy::Valid`], or
//!   [`HeaderCopy::Damaged`] with the typed error to report if no copy is valid.

use super::EXTENT_SIZE;
use crate::coding::{crc_tail_ok, get_u32, get_u64, seal_crc_tail};
use crate::error::Error;
use std::path::Path;

/// Size of one header copy.
pub(crate) const HEADER_SIZE: usize = 4096;
/// File offsets of the two header copies (both inside slot 0).
pub(crate) const HEADER_COPY_OFFSETS: [u64; 2] = [0, 16 << 10];
/// Current data-file format version.
pub(crate) const DATA_FORMAT_VERSION: u32 = 1;
/// First 8 bytes of a header copy.
pub(crate) const DATA_MAGIC: &[u8; 8] = b"RPTDATAF";
/// Offset of the CRC inside a copy.
const CRC_OFFSET: usize = HEADER_SIZE - 4;

/// The fields of a data-file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileHeader {
    /// The file's number (must match its name).
    pub(crate) file_number: u32,
    /// Slots this file may grow to, header slot included.
    pub(crate) slots_per_file: u32,
    /// Creation time, microseconds since the Unix epoch (informational).
    pub(crate) created_micros: u64,
}

/// What one header copy holds.
#[derive(Debug)]
pub(crate) enum HeaderCopy {
    /// A checksummed header of a known version.
    Valid(FileHeader),
    /// All zero bytes: the copy was never written.
    Blank,
    /// Anything else, with the error that describes it.
    Damaged(Error),
}

impl FileHeader {
    /// One header copy: fields, zero padding, masked CRC32C.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_SIZE];
        out[0..8].copy_from_slice(DATA_MAGIC);
        out[8..12].copy_from_slice(&DATA_FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        out[16..20].copy_from_slice(&(EXTENT_SIZE as u32).to_le_bytes());
        out[20..24].copy_from_slice(&self.file_number.to_le_bytes());
        out[24..28].copy_from_slice(&self.slots_per_file.to_le_bytes());
        out[28..36].copy_from_slice(&self.created_micros.to_le_bytes());
        seal_crc_tail(&mut out);
        out
    }

    /// Classifies one copy read from `path` at file offset `at`. Only the CRC, magic and
    /// version are checked here; the caller checks the fields against the file.
    pub(crate) fn decode(path: &Path, at: u64, buf: &[u8]) -> HeaderCopy {
        let bad = |off: usize, why: &str| HeaderCopy::Damaged(Error::corruption(path, at + off as u64, why));
        if buf.len() != HEADER_SIZE {
            return bad(0, "truncated data-file header");
        }
        if buf.iter().all(|&b| b == 0) {
            return HeaderCopy::Blank;
        }
        let u32_at = |off: usize| get_u32(buf, off).unwrap_or(0);
        if !crc_tail_ok(buf) {
            return bad(CRC_OFFSET, "data-file header checksum mismatch");
        }
        if &buf[0..8] != DATA_MAGIC {
            return bad(0, "bad data-file magic");
        }
        let version = u32_at(8);
        if version > DATA_FORMAT_VERSION {
            return HeaderCopy::Damaged(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: version,
                supported: DATA_FORMAT_VERSION,
            });
        }
        if version == 0 {
            return bad(8, "data-file format version 0");
        }
        HeaderCopy::Valid(FileHeader {
            file_number: u32_at(20),
            slots_per_file: u32_at(24),
            created_micros: get_u64(buf, 28).unwrap_or(0),
        })
        .check_sizes(path, at, u32_at(12), u32_at(16))
    }
}

impl HeaderCopy {
    /// A checksummed copy whose fixed sizes differ from this build's is corruption.
    fn check_sizes(self, path: &Path, at: u64, header_size: u32, extent_size: u32) -> HeaderCopy {
        let bad = |off: u64, why: String| HeaderCopy::Damaged(Error::corruption(path, at + off, why));
        if header_size as usize != HEADER_SIZE {
            return bad(
                12,
                format!("data-file header size {header_size}, expected {HEADER_SIZE}"),
            );
        }
        if u64::from(extent_size) != EXTENT_SIZE {
            return bad(
                16,
                format!("data-file extent size {extent_size}, expected {EXTENT_SIZE}"),
            );
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> FileHeader {
        FileHeader {
            file_number: 7,
            slots_per_file: 5120,
            created_micros: 1_700_000_000_000_000,
        }
    }

    #[test]
    fn round_trip() {
        let buf = header().encode();
        assert_eq!(buf.len(), HEADER_SIZE);
        match FileHeader::decode(Path::new("f"), 0, &buf) {
            HeaderCopy::Valid(h) => assert_eq!(h, header()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            FileHeader::decode(Path::new("f"), 0, &[0u8; HEADER_SIZE]),
            HeaderCopy::Blank
        ));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let buf = header().encode();
        for i in 0..HEADER_SIZE {
            for bit in [0x01u8, 0x80] {
                let mut b = buf.clone();
                b[i] ^= bit;
                match FileHeader::decode(Path::new("f"), 16384, &b) {
                    HeaderCopy::Damaged(e) => assert!(e.is_corruption(), "byte {i}: {e}"),
                    other => panic!("byte {i} flip not detected: {other:?}"),
                }
            }
        }
        assert!(matches!(
            FileHeader::decode(Path::new("f"), 0, &buf[..100]),
            HeaderCopy::Damaged(_)
        ));
    }

    #[test]
    fn newer_version_and_wrong_sizes_are_typed() {
        let reseal = |mut b: Vec<u8>| {
            seal_crc_tail(&mut b);
            b
        };
        let mut b = header().encode();
        b[8] = 2;
        match FileHeader::decode(Path::new("f"), 0, &reseal(b)) {
            HeaderCopy::Damaged(Error::UnsupportedFormat {
                found: 2, supported: 1, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        for (off, why) in [(8, "version 0"), (13, "header size"), (18, "extent size"), (0, "magic")] {
            let mut b = header().encode();
            b[off] = if off == 8 { 0 } else { b[off] ^ 0x10 };
            match FileHeader::decode(Path::new("f"), 0, &reseal(b)) {
                HeaderCopy::Damaged(e @ Error::Corruption { .. }) => assert!(e.to_string().contains(why), "{e}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
