//! Partial block reads for point lookups: read and verify a block's tail (hash index, restart
//! array, region checksums) and then the one restart region the hash index names, instead of
//! the whole block.
//!
//! A point lookup that misses the block cache otherwise copies a whole block (about 16 KiB) out
//! of the OS page cache and checksums all of it to look at one restart region of about 16
//! entries. With region checksums (extent format 2, see [`super::block`]) it reads the tail
//! (about 2 KiB for 16-byte keys) and the region (a few hundred bytes).
//!
//! Invariants:
//! - Nothing is interpreted before its checksum matched: the tail is checked against the tail
//!   checksum (which also covers the footer that locates the tail), the region against its
//!   region checksum from the verified tail. A mismatch is `Error::Corruption` naming the file
//!   and the offset of the damaged bytes.
//! - Whenever the partial read cannot answer on its own (no hash index or region checksums,
//!   compressed block, a bucket shared by several regions or naming no valid region, a key whose
//!   versions continue past the region, a tail larger than the first read, a region larger than
//!   [`MAX_REGION_READ`]), it says [`PointRead::NeedFull`] and the caller reads the whole block.
//!   It never guesses. Its buffers stay below `TAIL_WINDOW + MAX_REGION_READ` bytes.
//! - The found entry is the first entry of the region whose internal key is `>= seek`: what
//!   [`super::BlockIter::seek_point_hashed`] finds in the whole block.

use std::cmp::Ordering;
use std::ops::Range;
use std::path::Path;

use super::block::{
    bucket_of, decode_entry, footer_restarts, region_crc, tail_crc, BUCKET_COLLISION, BUCKET_EMPTY, HASH_INDEX_FLAG,
    REGION_CRC_FLAG,
};
use super::format::TRAILER_SIZE;
use super::reader::append_exact_at;
use super::{cmp_ikey, Compression};
use crate::coding::get_u32;
use crate::error::{Error, Result};
use crate::fs::ReadableFile;

/// Bytes read from a block's end on the first read: the tail of a 16 KiB block of short rows
/// (four hash buckets per key, two 4-byte words per restart point) fits with room to spare.
pub(crate) const TAIL_WINDOW: usize = 4096;

/// Largest restart region read on its own; a larger one (huge entries) means a whole-block read.
pub(crate) const MAX_REGION_READ: usize = 64 << 10;

/// What a partial read of one block found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PointRead {
    /// The hash index proves the user key is not in the block.
    Absent,
    /// The first entry `>= seek` of the key's region: its key is [`PointScratch::key`], its
    /// value [`PointScratch::value`].
    Found,
    /// The partial read cannot answer; read the whole block.
    NeedFull,
}

/// Reusable buffers of partial reads (one per thread in the read path).
#[derive(Default)]
pub(crate) struct PointScratch {
    buf: Vec<u8>,
    key: Vec<u8>,
    value: Range<usize>,
}

impl PointScratch {
    /// Key of the entry of the last [`PointRead::Found`].
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Value of the entry of the last [`PointRead::Found`].
    pub(crate) fn value(&self) -> &[u8] {
        self.buf.get(self.value.clone()).unwrap_or(&[])
    }
}

/// Looks up `seek` (an internal seek key of the user key with filter hash `hash`) in the stored
/// block at absolute file offset `at` whose contents are `size` bytes (trailer excluded).
pub(crate) fn read_point(
    file: &dyn ReadableFile,
    path: &Path,
    at: u64,
    size: u32,
    seek: &[u8],
    hash: u64,
    scratch: &mut PointScratch,
) -> Result<PointRead> {
    let size = size as usize;
    // The window ends with the trailer, whose type byte says whether the block is compressed.
    let window = size.min(TAIL_WINDOW);
    let win_start = size - window;
    let buf = &mut scratch.buf;
    buf.clear();
    append_exact_at(file, path, buf, window + TRAILER_SIZE, at + win_start as u64)?;
    if buf[window] != Compression::None as u8 {
        return Ok(PointRead::NeedFull);
    }
    let w = &buf[..window];
    // Offsets below are block offsets; `w[o - win_start]` is block byte `o`.
    let Some(footer) = get_u32(w, window.wrapping_sub(4)) else {
        return Ok(PointRead::NeedFull);
    };
    if footer & REGION_CRC_FLAG == 0 || footer & HASH_INDEX_FLAG == 0 {
        return Ok(PointRead::NeedFull);
    }
    let corrupt = |off: usize, why: String| Error::corruption(path, at + off as u64, why);
    let restarts = footer_restarts(footer);
    // restart[R] ‖ region_crc[R] ‖ tail_crc ‖ footer
    let Some(restarts_at) = restarts
        .checked_mul(8)
        .and_then(|r| r.checked_add(8))
        .and_then(|r| size.checked_sub(r))
        .filter(|&o| o >= win_start + 2 && restarts > 0)
    else {
        return Ok(PointRead::NeedFull); // larger than the window, or a damaged footer: full read
    };
    let rel = |o: usize| o - win_start;
    let n = u16::from_le_bytes([w[rel(restarts_at) - 2], w[rel(restarts_at) - 1]]) as usize;
    let Some(tail_start) = (restarts_at - 2).checked_sub(n).filter(|&t| t >= win_start && n > 0) else {
        return Ok(PointRead::NeedFull);
    };
    let stored = get_u32(w, window - 8).unwrap_or(0);
    if tail_crc(&w[rel(tail_start)..window - 8], &w[window - 4..]) != stored {
        return Err(corrupt(
            tail_start,
            format!("data block tail checksum mismatch (block of {size} bytes at {at})"),
        ));
    }
    // The tail is verified: the hash index and the restart array can be trusted.
    let bucket = w[rel(tail_start) + bucket_of(hash, n)];
    let r = match bucket {
        BUCKET_EMPTY => return Ok(PointRead::Absent),
        BUCKET_COLLISION => return Ok(PointRead::NeedFull),
        r if (r as usize) < restarts => r as usize,
        _ => return Ok(PointRead::NeedFull),
    };
    let word = |o: usize| get_u32(w, rel(o)).unwrap_or(0) as usize;
    let start = word(restarts_at + 4 * r);
    let end = if r + 1 < restarts {
        word(restarts_at + 4 * (r + 1))
    } else {
        tail_start
    };
    let stored_region_crc = get_u32(w, rel(restarts_at + 4 * restarts + 4 * r)).unwrap_or(0);
    if start >= end || end > tail_start {
        return Err(corrupt(
            restarts_at,
            format!("restart region {r} spans {start}..{end} in a block whose entries end at {tail_start}"),
        ));
    }
    // The region: inside the window already, or one more read after it (unless it is so large
    // that reading the whole block costs about the same; the scratch stays small).
    let region = if start >= win_start {
        rel(start)..rel(end)
    } else if end - start > MAX_REGION_READ {
        return Ok(PointRead::NeedFull);
    } else {
        let from = buf.len();
        append_exact_at(file, path, buf, end - start, at + start as u64)?;
        from..buf.len()
    };
    if region_crc(&buf[region.clone()]) != stored_region_crc {
        return Err(corrupt(
            start,
            format!(
                "data block restart region {r} checksum mismatch ({} bytes)",
                end - start
            ),
        ));
    }
    // Scan the region for the first entry >= seek.
    let data = &buf[..region.end];
    let key = &mut scratch.key;
    key.clear();
    let mut p = region.start;
    while p < region.end {
        let Some((shared, non_shared, value_len, key_start)) = decode_entry(data, p, region.end) else {
            return Err(corrupt(
                start + (p - region.start),
                "malformed entry in a verified restart region".into(),
            ));
        };
        if shared > key.len() {
            return Err(corrupt(
                start + (p - region.start),
                format!("entry shares {shared} bytes with a {}-byte previous key", key.len()),
            ));
        }
        key.truncate(shared);
        key.extend_from_slice(&data[key_start..key_start + non_shared]);
        let value_start = key_start + non_shared;
        if cmp_ikey(key, seek) != Ordering::Less {
            scratch.value = value_start..value_start + value_len;
            return Ok(PointRead::Found);
        }
        p = value_start + value_len;
    }
    // Every entry of the region sorts before `seek`: the answer lies in a later region.
    Ok(PointRead::NeedFull)
}
