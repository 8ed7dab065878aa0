//! Data blocks: LevelDB-style prefix-compressed entries with restart points.
//!
//! ```text
//! entry    = varint32 shared ‖ varint32 non_shared ‖ varint32 value_len ‖ key[shared..] ‖ value
//! block    = entry* ‖ tail
//! tail     = [hash index] ‖ fixed32 restart[num_restarts]
//!            ‖ [fixed32 region_crc[num_restarts] ‖ fixed32 tail_crc] ‖ fixed32 footer
//! footer   = num_restarts | (1 << 31 if the hash index is present)
//!                         | (1 << 30 if region checksums are present)
//! hash index = u8 bucket[num_buckets] ‖ fixed16 num_buckets
//! bucket   = restart index of the first entry of a user key hashing there; 255 empty, 254 several
//! region_crc[i] = masked CRC32C of restart region i (from restart[i] to the next restart
//!                 point, or to the end of the entries)
//! tail_crc = masked CRC32C of the tail before tail_crc, then of the footer
//! ```
//!
//! The hash index (RocksDB's `kDataBlockBinaryAndHash`) lets a point lookup jump to the restart
//! region of its user key instead of binary-searching the restart points; an empty bucket proves
//! the key is absent from the block. Blocks with more than 253 restart points have none.
//!
//! Region checksums (extent format 2) let a point lookup of a block that is not cached read and
//! verify only the block's tail and one restart region instead of the whole block
//! ([`super::point`]). The block trailer's CRC still covers the whole block for every full read.
//!
//! Invariants:
//! - An entry at a restart point has `shared == 0`; restart offsets are increasing and the first
//!   is 0. A block has at least one restart point.
//! - [`Block::new`] checks only the restart array's bounds; [`BlockIter`] checks every entry as
//!   it decodes it and turns any inconsistency into a sticky corruption status (then
//!   `valid() == false`). Nothing here panics or reads out of bounds on arbitrary bytes.
//! - [`BlockIter`] allocates nothing per entry: the current key lives in one reusable buffer and
//!   the value is a slice of the block.

mod builder;
mod iter;
mod rehash;
pub(crate) mod streams;
#[cfg(test)]
mod tests;

pub(crate) use builder::{common_prefix, BlockBuilder};
pub(super) use iter::decode_entry;
pub(crate) use iter::BlockIter;

use std::cmp::Ordering;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rehash::LazyIndex;

use crate::coding::{get_u32, mask_crc};
use crate::error::{Error, Result};

/// Bucket value: no user key hashes here.
pub(super) const BUCKET_EMPTY: u8 = 255;
/// Bucket value: several restart regions hold keys hashing here.
pub(super) const BUCKET_COLLISION: u8 = 254;
/// Most restart points a block with a hash index may have.
const MAX_HASHED_RESTARTS: usize = 253;

/// The hash-index bucket of a user key with [`super::filter_hash`] `hash` among `n` buckets.
#[inline]
pub(super) fn bucket_of(hash: u64, n: usize) -> usize {
    (((hash >> 32) * n as u64) >> 32) as usize
}
/// Buckets per distinct user key. RocksDB's default is 4/3 (util ratio 0.75); then about half
/// the lookups land in a bucket shared by another restart region and fall back to the binary
/// search. Four buckets per key (about 1 byte of index per 8 bytes of 16-byte-key entries)
/// measured 15-25 % more warm point reads on 10M keys for 8 % more space.
const BUCKETS_PER_KEY: usize = 4;
/// Flag in the block footer: a hash index precedes the restart array.
pub(crate) const HASH_INDEX_FLAG: u32 = 1 << 31;
/// Flag in the block footer: region checksums and a tail checksum follow the restart array.
pub(crate) const REGION_CRC_FLAG: u32 = 1 << 30;
/// Bytes a block's tail takes after its restart array: per restart point a region checksum
/// (counted by the caller), then the tail checksum and the footer.
const TAIL_FIXED: usize = 8;

/// Restart count in a block footer (without the flags).
#[inline]
pub(super) fn footer_restarts(footer: u32) -> usize {
    (footer & !(HASH_INDEX_FLAG | REGION_CRC_FLAG)) as usize
}

/// The stored (masked) checksum of one restart region's bytes.
#[inline]
pub(super) fn region_crc(region: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(region))
}

/// The stored (masked) tail checksum: the tail up to the checksum, then the 4 footer bytes.
#[inline]
pub(super) fn tail_crc(tail: &[u8], footer: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(tail), footer))
}

/// A decoded (uncompressed, checksum-verified) data block. Owns its bytes.
pub(crate) struct Block {
    data: Vec<u8>,
    /// Offset of the restart array.
    restarts_offset: usize,
    /// End of the entries (the hash index or the restart array follows).
    entries_end: usize,
    /// Offset and count of the hash index buckets (count 0: none).
    buckets: (usize, usize),
    num_restarts: usize,
    /// The two-level search's first level (seed 001's cache-friendly in-block search): per
    /// restart point, the first 8 bytes of its user key as a big-endian integer, zero-padded
    /// (`packed::user_prefix`), in one dense array, so a seek compares integers in a few cache
    /// lines and decodes only the restart keys whose head equals the target's. Built by the
    /// block's first seek (point lookups answered by the hash index and sequential scans never
    /// need them). `None` if a restart entry is malformed or the heads are out of order (the
    /// seek then probes exactly as without heads).
    heads: OnceLock<Option<Box<[u64]>>>,
    /// A hash index built in memory once the block is hot, for a block stored without one
    /// (`rehash.rs`); `None` for blocks with a stored index or that cannot have one.
    lazy: Option<Box<LazyIndex>>,
    /// File the block came from, for errors.
    path: Arc<Path>,
    /// Absolute file offset of the stored block, for errors.
    offset: u64,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("len", &self.data.len())
            .field("num_restarts", &self.num_restarts)
            .field("path", &self.path)
            .field("offset", &self.offset)
            .finish()
    }
}

/// Where a decoded block's regions lie (checked against the block's size).
struct BlockLayout {
    restarts_offset: usize,
    entries_end: usize,
    buckets: (usize, usize),
    num_restarts: usize,
}

impl BlockLayout {
    fn of(data: &[u8], path: &Path, offset: u64) -> Result<BlockLayout> {
        let n = data.len();
        let footer = match n.checked_sub(4).and_then(|p| get_u32(data, p)) {
            Some(v) => v,
            None => {
                return Err(Error::corruption(
                    path,
                    offset,
                    "data block shorter than its restart count",
                ))
            }
        };
        let num_restarts = footer_restarts(footer);
        // Bytes after the restart array, and per restart point.
        let (after, per_restart) = if footer & REGION_CRC_FLAG != 0 {
            (TAIL_FIXED, 8)
        } else {
            (4, 4)
        };
        let max_restarts = n.saturating_sub(after) / per_restart;
        if num_restarts == 0 || num_restarts > max_restarts {
            return Err(Error::corruption(
                path,
                offset,
                format!("data block has a bad restart count {num_restarts} (block is {n} bytes)"),
            ));
        }
        let restarts_offset = n - after - per_restart * num_restarts;
        if get_u32(data, restarts_offset) != Some(0) {
            return Err(Error::corruption(
                path,
                offset,
                "data block's first restart point is not 0",
            ));
        }
        let (entries_end, buckets) = if footer & HASH_INDEX_FLAG != 0 {
            let bad = |why: &str| Error::corruption(path, offset, format!("data block hash index: {why}"));
            if num_restarts > MAX_HASHED_RESTARTS {
                return Err(bad("more restart points than a hash index can name"));
            }
            let count_at = restarts_offset
                .checked_sub(2)
                .ok_or_else(|| bad("no room for its size"))?;
            let count = u16::from_le_bytes([data[count_at], data[count_at + 1]]) as usize;
            let start = count_at
                .checked_sub(count)
                .ok_or_else(|| bad("buckets before the block start"))?;
            if count == 0 {
                return Err(bad("zero buckets"));
            }
            (start, (start, count))
        } else {
            (restarts_offset, (0, 0))
        };
        Ok(BlockLayout {
            restarts_offset,
            entries_end,
            buckets,
            num_restarts,
        })
    }
}

/// Walks every entry of decoded block contents `data` in order without building a [`Block`]
/// (compaction's block copy: it needs each key once, not an iterator). Calls `f(key,
/// value_len, new_user)` per entry, `new_user` false when the entry's user key (the internal
/// key without its 8-byte trailer) equals the previous entry's. Checks that keys are internal
/// keys in strictly increasing order (user keys ascending, a user key's sequence numbers
/// descending) from the prefix compression alone, without comparing whole keys. Returns the
/// last key. Errors name `path` and `offset`.
pub(crate) fn scan_entries(
    data: &[u8],
    path: &Path,
    offset: u64,
    mut f: impl FnMut(&[u8], usize, bool) -> Result<()>,
) -> Result<Vec<u8>> {
    let limit = BlockLayout::of(data, path, offset)?.entries_end;
    let mut key: Vec<u8> = Vec::with_capacity(64);
    let mut p = 0;
    let mut first = true;
    while p < limit {
        let bad = |why: String| Error::corruption(path, offset, why);
        let (shared, non_shared, value_len, key_start) =
            decode_entry(data, p, limit).ok_or_else(|| bad(format!("malformed entry at block offset {p}")))?;
        let new_len = shared + non_shared;
        if shared > key.len() || new_len < 8 {
            return Err(bad(format!(
                "entry at block offset {p} shares {shared} of a {}-byte previous key and is {new_len} bytes",
                key.len()
            )));
        }
        let suffix = &data[key_start..key_start + non_shared];
        let tag = |k: &[u8]| u64::from_le_bytes(k[k.len() - 8..].try_into().expect("8 bytes"));
        // Versus the previous key (the keys agree on `shared` bytes): is the user key new, and
        // the previous key's tag if not.
        let (new_user, old_tag) = if first {
            (true, 0)
        } else {
            let (old_user, new_user_len) = (key.len() - 8, new_len - 8);
            let order = if shared <= old_user && shared <= new_user_len {
                user_order(&key[shared..old_user], &suffix[..new_user_len - shared])
            } else {
                // One user key ends inside the shared prefix: the shorter one sorts first.
                old_user.cmp(&new_user_len)
            };
            match order {
                Ordering::Less => (true, 0),
                Ordering::Equal => (false, tag(&key)),
                Ordering::Greater => return Err(bad(format!("entry at block offset {p}: keys out of order"))),
            }
        };
        key.truncate(shared);
        key.extend_from_slice(suffix);
        // Versions of one user key: tags strictly descending (newest first).
        if !new_user && tag(&key) >= old_tag {
            return Err(bad(format!(
                "entry at block offset {p}: versions of a key out of order"
            )));
        }
        f(&key, value_len, new_user)?;
        first = false;
        p = key_start + non_shared + value_len;
    }
    Ok(key)
}

/// Orders two user keys that share a prefix, given what follows it in each: `old` the rest of
/// the previous user key, `new` the rest of this one (Less = the previous key sorts first).
#[inline]
fn user_order(old: &[u8], new: &[u8]) -> Ordering {
    match (old.first(), new.first()) {
        // Different at the first byte after the prefix: by far the usual case.
        (Some(a), Some(b)) if a != b => a.cmp(b),
        _ => old.cmp(new),
    }
}

impl Block {
    /// Wraps decoded block contents, checking the restart array's bounds. `path` and `offset`
    /// (absolute offset of the stored block) are used in errors.
    pub(crate) fn new(data: Vec<u8>, path: Arc<Path>, offset: u64) -> Result<Block> {
        let l = BlockLayout::of(&data, &path, offset)?;
        Ok(Block {
            data,
            restarts_offset: l.restarts_offset,
            entries_end: l.entries_end,
            buckets: l.buckets,
            num_restarts: l.num_restarts,
            heads: OnceLock::new(),
            lazy: None,
            path,
            offset,
        })
    }

    /// [`Self::new`] for a block of an extent whose blocks may lack their stored hash index:
    /// one is built in memory once the block has served a few point lookups (`rehash.rs`).
    /// `users` is the block's distinct user keys (its index entry's), which size the index for
    /// the cache's charge before it exists.
    pub(crate) fn new_lazy_index(data: Vec<u8>, path: Arc<Path>, offset: u64, users: u32) -> Result<Block> {
        let mut b = Block::new(data, path, offset)?;
        b.lazy = LazyIndex::for_block(&b.data, &b.layout(), users as usize);
        Ok(b)
    }

    /// The block's layout, as `Block::new` found it.
    fn layout(&self) -> BlockLayout {
        BlockLayout {
            restarts_offset: self.restarts_offset,
            entries_end: self.entries_end,
            buckets: self.buckets,
            num_restarts: self.num_restarts,
        }
    }

    /// The restart heads (see `heads`), built on first use.
    #[inline]
    fn heads(&self) -> Option<&[u64]> {
        self.heads.get_or_init(|| self.restart_heads()).as_deref()
    }

    /// The heads of the restart keys (see `heads`), or `None` if a restart entry is malformed
    /// or the heads are out of order (a damaged block: the search then probes as before).
    fn restart_heads(&self) -> Option<Box<[u64]>> {
        let heads: Box<[u64]> = (0..self.num_restarts)
            .map(|i| {
                let p = self.restart_point(i);
                let (shared, non_shared, _, key_start) = decode_entry(&self.data, p, self.entries_end)?;
                let key = self.data.get(key_start..key_start + non_shared)?;
                if shared != 0 {
                    return None;
                }
                super::packed::user_prefix(key)
            })
            .collect::<Option<_>>()?;
        heads.windows(2).all(|w| w[0] <= w[1]).then_some(heads)
    }

    /// Narrows a seek's restart range `left ..= right`, where `left` is 0 or a restart whose key
    /// is below the target, to the restarts whose head equals the target's (plus the last
    /// one below it): the answer, the last restart with a key below the target (or `left`),
    /// lies in the returned range. Unchanged without heads.
    #[inline]
    fn narrow_by_heads(&self, target: &[u8], left: usize, right: usize) -> (usize, usize) {
        let (Some(heads), Some(t)) = (self.heads(), super::packed::user_prefix(target)) else {
            return (left, right);
        };
        let Some(range) = heads.get(left..=right) else {
            return (left, right);
        };
        // Heads below the target's belong to keys below it; heads above it, to keys above it.
        let below = range.partition_point(|&h| h < t);
        let equal = super::packed::run_end(range, below, t) - below;
        let new_left = left + below.saturating_sub(1);
        let new_right = (left + below + equal).saturating_sub(1).max(new_left);
        (new_left, new_right)
    }

    /// Checks the region checksums and the tail checksum, if the block has them (for
    /// verification: a whole-block read relies on the trailer's CRC alone).
    pub(crate) fn check_region_crcs(&self) -> std::result::Result<(), String> {
        let n = self.data.len();
        let footer = get_u32(&self.data, n - 4).unwrap_or(0);
        if footer & REGION_CRC_FLAG == 0 {
            return Ok(());
        }
        let r = self.num_restarts;
        let crcs = self.restarts_offset + 4 * r;
        for i in 0..r {
            let start = self.restart_point(i);
            let end = if i + 1 < r {
                self.restart_point(i + 1)
            } else {
                self.entries_end
            };
            let Some(region) = self.data.get(start..end) else {
                return Err(format!("restart region {i} spans {start}..{end}, outside the entries"));
            };
            if get_u32(&self.data, crcs + 4 * i) != Some(region_crc(region)) {
                return Err(format!("restart region {i} checksum mismatch"));
            }
        }
        let tail = tail_crc(&self.data[self.entries_end..n - 8], &self.data[n - 4..]);
        if get_u32(&self.data, n - 8) != Some(tail) {
            return Err("block tail checksum mismatch".into());
        }
        Ok(())
    }

    /// Bytes charged for this block in a cache (its restart heads and lazy hash index
    /// included, built or not).
    pub fn size(&self) -> usize {
        let lazy = self.lazy.as_ref().map_or(0, |l| l.charge());
        self.data.capacity() + std::mem::size_of::<Self>() + 8 * self.num_restarts + lazy
    }

    /// The decoded block contents.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Absolute file offset of the stored block.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The restart region a point lookup of the user key with [`super::filter_hash`] `hash`
    /// should scan: `Some(Some(r))` restart `r`; `Some(None)` the key is not in this block;
    /// `None` no hash index or a collision (binary-search instead).
    #[inline]
    fn hashed_restart(&self, hash: u64) -> Option<Option<usize>> {
        let (start, n) = self.buckets;
        let buckets: &[u8] = if n > 0 {
            self.data.get(start..start + n)?
        } else {
            self.lazy
                .as_ref()?
                .buckets(|| rehash::build_buckets(&self.data, &self.layout()))?
        };
        // The restart array is read right after the bucket: start loading it now so the two
        // cache misses overlap.
        let restarts_end = self.restarts_offset + 4 * self.num_restarts;
        super::prefetch_range(&self.data, self.restarts_offset, restarts_end, 4);
        let b = bucket_of(hash, buckets.len());
        match buckets.get(b).copied().unwrap_or(BUCKET_COLLISION) {
            BUCKET_EMPTY => Some(None),
            BUCKET_COLLISION => None,
            r if (r as usize) < self.num_restarts => Some(Some(r as usize)),
            _ => None, // out of range: damage; the binary search checks everything
        }
    }

    /// Offset of restart point `i` (`i < num_restarts`), unchecked against the entry area.
    #[inline]
    fn restart_point(&self, i: usize) -> usize {
        get_u32(&self.data, self.restarts_offset + 4 * i).unwrap_or(u32::MAX) as usize
    }
}
