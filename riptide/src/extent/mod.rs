//! The extent file format: one immutable, sorted run of internal-key entries (see
//! `docs/format.md`).
//!
//! An extent occupies `slots` consecutive 2 MiB slots ([`EXTENT_SIZE`]) of a data file (normally
//! one; an extent holding a huge value may need more). Layout, offsets relative to the extent
//! start:
//!
//! ```text
//! [data block 0 | trailer] ... [data block N-1 | trailer]
//! [index block | trailer] [filter block | trailer] [dictionary block | trailer]
//! [properties block | trailer]                                                  <- `valid` bytes
//! ... gap (never read) ...
//! [footer (FOOTER_SIZE bytes)]                                                  <- ends at slots * 2 MiB
//! ```
//!
//! This module is pure and in memory: [`ExtentBuilder`] produces the bytes ([`BuiltExtent`]), the
//! caller writes them; [`ExtentReader`] reads through [`crate::fs::ReadableFile`].
//!
//! Invariants:
//! - Every stored byte except the gap is covered by a CRC32C: each block by its 5-byte trailer
//!   (`type ‖ masked crc32c(contents ‖ type)`), the footer by its own CRC.
//! - Entries are strictly increasing in internal-key order ([`crate::key::compare_internal_keys`]);
//!   the builder refuses anything else. An extent holds at least one entry.
//! - The index holds, per data block, its first and last internal key, handle, row and delete
//!   counts and LSN range, so compaction can reuse a block without decoding it.
//! - Decoding never panics and never reads out of bounds on arbitrary bytes: damage is reported as
//!   [`crate::Error::Corruption`] with the file path and the absolute offset of the damaged
//!   block or footer.

mod block;
mod builder;
pub(crate) mod codec;
pub(crate) mod dictionary;
mod filter;
pub(crate) mod format;
mod packed;
mod point;
mod reader;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dictionary;

pub(crate) use block::{scan_entries, Block, BlockIter};
pub(crate) use builder::{BuiltExtent, ExtentBuilder};
pub(crate) use filter::filter_hash;
pub(crate) use format::{EXTENT_MAGIC, FOOTER_SIZE};
pub(crate) use packed::PackedKeys;
pub(crate) use point::{PointRead, PointScratch};
pub(crate) use reader::{verify_extent, ExtentReader};

use std::cmp::Ordering;

use crate::coding::get_u64;
#[cfg(test)]
use crate::error::{Error, Result};
use crate::key::compare_internal_keys;

/// Size of one extent slot in a data file (2 MiB).
pub(crate) const EXTENT_SIZE: u64 = 2 << 20;

/// Largest allowed `block_size` option (data blocks with one huge entry may still be larger).
pub(crate) const MAX_BLOCK_SIZE: usize = 1 << 20;

/// Largest allowed `bloom_bits_per_key` option.
pub(crate) const MAX_BLOOM_BITS_PER_KEY: u32 = 64;

/// How a block's contents are stored (the trailer's type byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Compression {
    /// Stored as is.
    None = 0,
    /// LZ4 block format (lz4_flex), prefixed by the varint32 uncompressed length. A data block
    /// is stored compressed only when that saves at least 12.5 %.
    Lz4 = 1,
    /// A zstd frame (any level), prefixed by the varint32 uncompressed length (extent format 4
    /// on).
    Zstd = 2,
    /// As `Zstd`, compressed with the dictionary stored in the block's extent (extent format 5
    /// on; [`dictionary`]).
    ZstdDict = 3,
    /// A data block as two zstd frames, its key stream then its value stream
    /// (`block::streams`), behind `varint32 raw_len ‖ varint32 entries ‖ varint32 keys_len ‖
    /// varint32 keys_stored_len` (extent format 6 on; [`codec`]).
    ZstdSplit = 4,
    /// As `ZstdSplit`, both frames compressed with the dictionary stored in the block's extent
    /// (extent format 6 on).
    ZstdSplitDict = 5,
}

impl Compression {
    /// Decodes a trailer type byte.
    pub(crate) fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            3 => Some(Compression::ZstdDict),
            4 => Some(Compression::ZstdSplit),
            5 => Some(Compression::ZstdSplitDict),
            _ => None,
        }
    }

    /// True for the zstd types (2 to 5): blocks always read whole, stored without hash index
    /// or region checksums in format 5 on.
    pub(crate) fn is_zstd(self) -> bool {
        matches!(
            self,
            Compression::Zstd | Compression::ZstdDict | Compression::ZstdSplit | Compression::ZstdSplitDict
        )
    }

    /// True for the types that decode only with their extent's dictionary (3 and 5).
    pub(crate) fn needs_dict(self) -> bool {
        matches!(self, Compression::ZstdDict | Compression::ZstdSplitDict)
    }
}

/// Options of one extent build.
#[derive(Clone, Debug)]
pub(crate) struct ExtentOptions {
    /// Target size of an uncompressed data block (default 16 KiB). A block is cut before an
    /// entry that would push it past this size once it is at least 90 % full; a single entry
    /// larger than this gets a block of its own.
    pub block_size: usize,
    /// Entries between restart points in a data block (default 16; 0 is treated as 1).
    pub restart_interval: usize,
    /// Bloom filter bits per distinct user key (default 10, about 1 % false positives); 0 = no
    /// filter block.
    pub bloom_bits_per_key: u32,
    /// Compression of data blocks (default LZ4; index, filter and properties are never
    /// compressed).
    pub compression: Compression,
    /// zstd level (default 3); other codecs ignore it.
    pub compression_level: i32,
    /// Data blocks carry a hash index of their user keys for point lookups (default true).
    pub hash_index: bool,
    /// With zstd: the dictionary blocks are compressed with (stored in the extent; type-3
    /// blocks). Other codecs ignore it.
    pub dictionary: Option<std::sync::Arc<dictionary::BlockDict>>,
}

impl Default for ExtentOptions {
    fn default() -> Self {
        ExtentOptions {
            block_size: 16 << 10,
            restart_interval: 16,
            bloom_bits_per_key: 10,
            compression: Compression::Lz4,
            compression_level: crate::table_options::DEFAULT_ZSTD_LEVEL,
            hash_index: true,
            dictionary: None,
        }
    }
}

impl ExtentOptions {
    /// Checks the options; the builder clamps out-of-range values, this reports them.
    #[cfg(test)]
    pub(crate) fn validate(&self) -> Result<()> {
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(Error::InvalidOption {
                option: "block_size",
                reason: format!("must be in 1..={MAX_BLOCK_SIZE}, got {}", self.block_size),
            });
        }
        if self.restart_interval == 0 || self.restart_interval > u16::MAX as usize {
            return Err(Error::InvalidOption {
                option: "block_restart_interval",
                reason: format!("must be in 1..=65535, got {}", self.restart_interval),
            });
        }
        if self.bloom_bits_per_key > MAX_BLOOM_BITS_PER_KEY {
            return Err(Error::InvalidOption {
                option: "bloom_bits_per_key",
                reason: format!(
                    "must be at most {MAX_BLOOM_BITS_PER_KEY}, got {}",
                    self.bloom_bits_per_key
                ),
            });
        }
        Ok(())
    }

    /// The options with every field clamped into its valid range.
    fn sanitized(mut self) -> Self {
        self.block_size = self.block_size.clamp(1, MAX_BLOCK_SIZE);
        self.restart_interval = self.restart_interval.clamp(1, u16::MAX as usize);
        self.bloom_bits_per_key = self.bloom_bits_per_key.min(MAX_BLOOM_BITS_PER_KEY);
        self
    }
}

// ---- little helpers shared by the submodules (byte encodings live in `crate::coding`) ----

/// Asks the CPU to start loading the cache line holding `bytes[at]` (no effect if `at` is out
/// of bounds, or on targets without a prefetch instruction). Point lookups issue these for
/// memory they are about to read, so independent cache misses overlap instead of queueing.
#[inline(always)]
pub(crate) fn prefetch(bytes: &[u8], at: usize) {
    if at >= bytes.len() {
        return;
    }
    let p = bytes.as_ptr().wrapping_add(at);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and has no effect the program can
    // observe other than timing; `p` points inside `bytes` anyway (checked above).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] for every cache line of `bytes[start..end]` (clamped to `bytes`), at most
/// `max_lines` lines.
#[inline]
pub(crate) fn prefetch_range(bytes: &[u8], start: usize, end: usize, max_lines: usize) {
    const LINE: usize = 64;
    let end = end
        .min(bytes.len())
        .min(start.saturating_add(max_lines.saturating_mul(LINE)));
    // Step from the line boundary at or below `start` so each line is touched once.
    let mut at = start & !(LINE - 1);
    while at < end {
        prefetch(bytes, at.max(start));
        at += LINE;
    }
}

/// Internal-key order, identical to [`crate::key::compare_internal_keys`] (user key ascending,
/// then tag descending; keys shorter than 8 bytes as there) but with the user-key comparison
/// inlined, which is markedly faster than a `memcmp` call for the short keys of the read path.
#[inline]
pub(crate) fn cmp_ikey(a: &[u8], b: &[u8]) -> Ordering {
    match (a.len().checked_sub(8), b.len().checked_sub(8)) {
        (Some(sa), Some(sb)) => match cmp_bytes(&a[..sa], &b[..sb]) {
            Ordering::Equal => {
                let ta = get_u64(a, sa).unwrap_or(0);
                let tb = get_u64(b, sb).unwrap_or(0);
                tb.cmp(&ta)
            }
            o => o,
        },
        _ => compare_internal_keys(a, b),
    }
}

/// Bytewise comparison; 8 bytes at a time for short slices, `memcmp` for long ones.
#[inline]
pub(crate) fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n > 64 {
        return a.cmp(b);
    }
    let mut i = 0;
    while i + 8 <= n {
        let mut x = [0u8; 8];
        let mut y = [0u8; 8];
        x.copy_from_slice(&a[i..i + 8]);
        y.copy_from_slice(&b[i..i + 8]);
        let (x, y) = (u64::from_be_bytes(x), u64::from_be_bytes(y));
        if x != y {
            return x.cmp(&y);
        }
        i += 8;
    }
    while i < n {
        if a[i] != b[i] {
            return a[i].cmp(&b[i]);
        }
        i += 1;
    }
    a.len().cmp(&b.len())
}
