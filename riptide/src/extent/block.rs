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

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use super::cmp_ikey;
use crate::coding::{get_u32, get_varint32, mask_crc, put_varint};
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

/// Builds one data block.
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    /// Entries since the last restart point.
    counter: usize,
    restart_interval: usize,
    entries: usize,
    /// Hash index: (user-key hash, restart index) of each user key's first entry.
    hash_index: bool,
    hashed: Vec<(u64, u8)>,
    /// Write region checksums (extent format 2; off only to write format 1 in tests).
    pub(super) region_crcs: bool,
}

impl BlockBuilder {
    pub(crate) fn new(restart_interval: usize) -> Self {
        Self::with_hash_index(restart_interval, false)
    }

    /// A builder that appends a hash index for point lookups (when the block has at most 253
    /// restart points).
    pub(crate) fn with_hash_index(restart_interval: usize, hash_index: bool) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            entries: 0,
            hash_index,
            hashed: Vec::new(),
            region_crcs: true,
        }
    }

    fn num_buckets(&self) -> usize {
        (self.hashed.len() * BUCKETS_PER_KEY).clamp(1, u16::MAX as usize)
    }

    fn hash_index_size(&self) -> usize {
        if self.hash_index && self.restarts.len() <= MAX_HASHED_RESTARTS {
            self.num_buckets() + 2
        } else {
            0
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// Size of the block if finished now.
    pub(crate) fn size_estimate(&self) -> usize {
        self.buf.len() + 8 * self.restarts.len() + TAIL_FIXED + self.hash_index_size()
    }

    /// Upper bound of [`Self::size_estimate`] after adding an entry with these lengths.
    pub(crate) fn size_after(&self, key_len: usize, value_len: usize) -> usize {
        self.size_estimate() + 15 + key_len + value_len + 8 + 2
    }

    /// Appends an entry. `prev_key` is the previously added key (ignored at a restart point);
    /// the caller guarantees ordering and that lengths fit in 32 bits.
    pub(crate) fn add(&mut self, prev_key: &[u8], key: &[u8], value: &[u8]) {
        let mut shared = 0;
        if self.counter >= self.restart_interval {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        } else if self.entries > 0 {
            shared = common_prefix(prev_key, key);
        }
        if self.hash_index {
            let user = &key[..key.len().saturating_sub(8)];
            let prev_user = &prev_key[..prev_key.len().saturating_sub(8)];
            if self.entries == 0 || user != prev_user {
                let restart = (self.restarts.len() - 1).min(MAX_HASHED_RESTARTS) as u8;
                self.hashed.push((super::filter::filter_hash(user), restart));
            }
        }
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.counter += 1;
        self.entries += 1;
    }

    /// Appends the restart array and returns the finished block; call [`Self::reset`] before
    /// reusing the builder.
    pub(crate) fn finish(&mut self) -> &[u8] {
        let entries_end = self.buf.len();
        let mut footer = self.restarts.len() as u32;
        if self.region_crcs {
            footer |= REGION_CRC_FLAG;
        }
        if self.hash_index_size() > 0 {
            let n = self.num_buckets();
            let mut buckets = vec![BUCKET_EMPTY; n];
            for &(h, r) in &self.hashed {
                let b = &mut buckets[bucket_of(h, n)];
                *b = match *b {
                    BUCKET_EMPTY => r,
                    same if same == r => r,
                    _ => BUCKET_COLLISION,
                };
            }
            self.buf.extend_from_slice(&buckets);
            self.buf.extend_from_slice(&(n as u16).to_le_bytes());
            footer |= HASH_INDEX_FLAG;
        }
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        let footer = footer.to_le_bytes();
        if self.region_crcs {
            for (i, &start) in self.restarts.iter().enumerate() {
                let end = self.restarts.get(i + 1).map_or(entries_end, |&e| e as usize);
                let crc = region_crc(&self.buf[start as usize..end]);
                self.buf.extend_from_slice(&crc.to_le_bytes());
            }
            let tail = tail_crc(&self.buf[entries_end..], &footer);
            self.buf.extend_from_slice(&tail.to_le_bytes());
        }
        self.buf.extend_from_slice(&footer);
        &self.buf
    }

    pub(crate) fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.entries = 0;
        self.hashed.clear();
    }
}

/// Length of the common prefix of two byte strings.
#[inline]
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]))
            ^ u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
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
            path,
            offset,
        })
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

    /// Bytes charged for this block in a cache.
    pub fn size(&self) -> usize {
        self.data.capacity() + std::mem::size_of::<Self>()
    }

    /// The decoded block contents.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Number of restart points.
    pub(crate) fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Absolute file offset of the stored block.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// File the block came from.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The restart region a point lookup of the user key with [`super::filter_hash`] `hash`
    /// should scan: `Some(Some(r))` restart `r`; `Some(None)` the key is not in this block;
    /// `None` no hash index or a collision (binary-search instead).
    #[inline]
    fn hashed_restart(&self, hash: u64) -> Option<Option<usize>> {
        let (start, n) = self.buckets;
        if n == 0 {
            return None;
        }
        // The restart array is read right after the bucket: start loading it now so the two
        // cache misses overlap.
        let restarts_end = self.restarts_offset + 4 * self.num_restarts;
        super::prefetch_range(&self.data, self.restarts_offset, restarts_end, 4);
        let b = bucket_of(hash, n);
        match self.data.get(start + b).copied().unwrap_or(BUCKET_COLLISION) {
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

/// Most restart points a seek prefetches before its binary search (more would only queue).
const SEEK_PREFETCH_RESTARTS: usize = 64;

/// Decodes the entry header at `p`: (shared, non_shared, value_len, key_start). Checks that the
/// key delta and the value lie before `limit`.
#[inline]
pub(super) fn decode_entry(data: &[u8], p: usize, limit: usize) -> Option<(usize, usize, usize, usize)> {
    let d = data.get(p..limit)?;
    if d.len() < 3 {
        return None;
    }
    let (shared, non_shared, value_len, hdr) = if (d[0] | d[1] | d[2]) < 0x80 {
        (d[0] as usize, d[1] as usize, d[2] as usize, 3)
    } else {
        let mut pos = 0;
        let s = get_varint32(d, &mut pos)? as usize;
        let n = get_varint32(d, &mut pos)? as usize;
        let v = get_varint32(d, &mut pos)? as usize;
        (s, n, v, pos)
    };
    let end = hdr.checked_add(non_shared)?.checked_add(value_len)?;
    if end > d.len() {
        return None;
    }
    Some((shared, non_shared, value_len, p + hdr))
}

/// An iterator over one block's entries. Owns an `Arc<Block>`.
pub(crate) struct BlockIter {
    block: Arc<Block>,
    /// End of the entry area (= restart array offset).
    limit: usize,
    /// Offset of the current entry; `limit` when not valid.
    current: usize,
    /// Offset just past the current entry.
    next: usize,
    /// Restart region that contains `current`.
    restart_index: usize,
    key: Vec<u8>,
    value_start: usize,
    value_len: usize,
    corruption: Option<String>,
}

impl BlockIter {
    /// An iterator positioned nowhere (not valid); call a seek first.
    pub fn new(block: Arc<Block>) -> Self {
        let limit = block.entries_end;
        BlockIter {
            block,
            limit,
            current: limit,
            next: limit,
            restart_index: 0,
            key: Vec::new(),
            value_start: 0,
            value_len: 0,
            corruption: None,
        }
    }

    /// Repoints this iterator at another block (not valid until a seek), keeping its key
    /// buffer: lets a caller reuse one iterator for many point lookups without allocating.
    pub fn reset(&mut self, block: Arc<Block>) {
        self.limit = block.entries_end;
        self.block = block;
        self.corruption = None;
        self.invalidate();
    }

    /// The block this iterator reads.
    pub(crate) fn block(&self) -> &Arc<Block> {
        &self.block
    }

    /// True when positioned at an entry.
    #[inline]
    pub fn valid(&self) -> bool {
        self.current < self.limit
    }

    /// Current internal key (empty when not valid).
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Current value (empty when not valid).
    #[inline]
    pub fn value(&self) -> &[u8] {
        self.block
            .data
            .get(self.value_start..self.value_start + self.value_len)
            .unwrap_or(&[])
    }

    /// `Err(Corruption)` if decoding hit a malformed entry or restart point.
    pub fn status(&self) -> Result<()> {
        match &self.corruption {
            None => Ok(()),
            Some(reason) => Err(Error::corruption(&*self.block.path, self.block.offset, reason.clone())),
        }
    }

    fn invalidate(&mut self) {
        self.current = self.limit;
        self.next = self.limit;
        self.restart_index = 0;
        self.key.clear();
        self.value_start = 0;
        self.value_len = 0;
    }

    fn corrupt(&mut self, reason: String) {
        if self.corruption.is_none() {
            self.corruption = Some(reason);
        }
        self.invalidate();
    }

    /// Positions before restart point `i` (not valid until [`Self::parse_next`]).
    fn seek_to_restart_point(&mut self, i: usize) -> bool {
        let p = self.block.restart_point(i);
        if p >= self.limit {
            self.corrupt(format!(
                "restart point {i} at offset {p} is past the entries (end {})",
                self.limit
            ));
            return false;
        }
        self.key.clear();
        self.restart_index = i;
        self.next = p;
        true
    }

    /// Decodes the entry at `self.next`; false at the end or on corruption. Does not maintain
    /// `restart_index` (see [`Self::parse_next`]).
    #[inline(always)]
    fn parse_entry(&mut self) -> bool {
        let p = self.next;
        if p >= self.limit {
            self.invalidate();
            return false;
        }
        let block = &*self.block;
        let Some((shared, non_shared, value_len, key_start)) = decode_entry(&block.data, p, self.limit) else {
            self.entry_corrupt(p, None);
            return false;
        };
        if shared > self.key.len() {
            self.entry_corrupt(p, Some(shared));
            return false;
        }
        self.key.truncate(shared);
        self.key
            .extend_from_slice(&block.data[key_start..key_start + non_shared]);
        self.current = p;
        self.value_start = key_start + non_shared;
        self.value_len = value_len;
        self.next = self.value_start + value_len;
        true
    }

    #[cold]
    #[inline(never)]
    fn entry_corrupt(&mut self, p: usize, shared: Option<usize>) {
        let reason = match shared {
            None => format!("malformed entry at block offset {p}"),
            Some(s) => format!(
                "entry at block offset {p} shares {s} bytes with a {}-byte previous key",
                self.key.len()
            ),
        };
        self.corrupt(reason);
    }

    /// Advances `restart_index` to the restart region containing `current`.
    #[inline]
    fn sync_restart_index(&mut self) {
        let block = &*self.block;
        while self.restart_index + 1 < block.num_restarts && block.restart_point(self.restart_index + 1) <= self.current
        {
            self.restart_index += 1;
        }
    }

    /// Decodes the entry at `self.next` and keeps `restart_index` current.
    #[inline]
    fn parse_next(&mut self) -> bool {
        if !self.parse_entry() {
            return false;
        }
        self.sync_restart_index();
        true
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        if self.is_corrupt() {
            return;
        }
        if self.seek_to_restart_point(0) {
            self.parse_next();
        }
    }

    /// Positions at the last entry.
    pub fn seek_to_last(&mut self) {
        if self.is_corrupt() || !self.seek_to_restart_point(self.block.num_restarts - 1) {
            return;
        }
        while self.parse_next() && self.next < self.limit {}
    }

    /// Advances to the next entry (not valid past the last one).
    pub fn next(&mut self) {
        if !self.valid() {
            return;
        }
        self.parse_next();
    }

    /// Steps back to the previous entry (not valid before the first one): rescans forward from
    /// the restart point before the current entry, as LevelDB does.
    pub fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        let original = self.current;
        while self.block.restart_point(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return;
            }
            self.restart_index -= 1;
        }
        if !self.seek_to_restart_point(self.restart_index) {
            return;
        }
        loop {
            if !self.parse_next() {
                if self.corruption.is_none() {
                    self.corrupt(format!("entries do not lead back to block offset {original}"));
                }
                return;
            }
            match self.next.cmp(&original) {
                Ordering::Less => continue,
                Ordering::Equal => return,
                Ordering::Greater => {
                    self.corrupt(format!("entries do not lead back to block offset {original}"));
                    return;
                }
            }
        }
    }

    /// Positions at the first entry whose key is `>= target` (internal-key order); not valid if
    /// there is none. Binary search over the restart points, then a linear scan.
    pub fn seek(&mut self, target: &[u8]) {
        if self.is_corrupt() {
            return;
        }
        let block = &*self.block;
        let data = &block.data[..];
        let mut left = 0usize;
        let mut right = block.num_restarts - 1;
        // Narrow with the current position when it is usable (common for forward seeks).
        if self.current < self.limit {
            match cmp_ikey(&self.key, target) {
                Ordering::Less => left = self.restart_index,
                Ordering::Equal => return,
                Ordering::Greater => right = self.restart_index,
            }
        }
        // The binary search's probes are dependent cache misses: start loading the first line
        // of every candidate restart entry at once (a 16 KiB block has about 30) so they overlap.
        if right - left < SEEK_PREFETCH_RESTARTS {
            for i in left..=right {
                super::prefetch(data, block.restart_point(i));
            }
        }
        while left < right {
            let mid = left + (right - left).div_ceil(2);
            let p = block.restart_point(mid);
            let Some((shared, non_shared, _, key_start)) = decode_entry(data, p, self.limit) else {
                self.corrupt(format!("malformed entry at restart point {mid} (block offset {p})"));
                return;
            };
            if shared != 0 {
                self.corrupt(format!(
                    "entry at restart point {mid} (block offset {p}) has a shared prefix"
                ));
                return;
            }
            let key = &data[key_start..key_start + non_shared];
            if cmp_ikey(key, target) == Ordering::Less {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        if !self.seek_to_restart_point(left) {
            return;
        }
        self.prefetch_region(left);
        while self.parse_entry() {
            if cmp_ikey(&self.key, target) != Ordering::Less {
                self.sync_restart_index();
                return;
            }
        }
    }

    /// Starts loading restart region `r` (positioned at its start) whole, since it is scanned
    /// from its start, rather than one cache miss after the other as the scan advances.
    #[inline]
    fn prefetch_region(&self, r: usize) {
        let block = &*self.block;
        let end = if r + 1 < block.num_restarts {
            block.restart_point(r + 1)
        } else {
            self.limit
        };
        super::prefetch_range(&block.data, self.next, end.min(self.limit), 16);
    }

    /// Positions at the first entry >= `target` *if* the target's user key is in the block;
    /// otherwise the iterator may end anywhere past the key or be invalid (for point lookups,
    /// which only accept an entry with the target's user key). Uses the hash index when the
    /// block has one.
    pub fn seek_point(&mut self, target: &[u8]) {
        let user = &target[..target.len().saturating_sub(8)];
        self.seek_point_hashed(target, super::filter_hash(user));
    }

    /// [`Self::seek_point`] given `hash`, the [`super::filter_hash`] of the target's user key
    /// (the bloom filters' hash, so one hash serves a whole lookup).
    pub fn seek_point_hashed(&mut self, target: &[u8], hash: u64) {
        if self.is_corrupt() {
            return;
        }
        match self.block.hashed_restart(hash) {
            None => self.seek(target),
            Some(None) => self.invalidate(),
            Some(Some(r)) => {
                if !self.seek_to_restart_point(r) {
                    return;
                }
                self.prefetch_region(r);
                while self.parse_entry() {
                    if cmp_ikey(&self.key, target) != Ordering::Less {
                        self.sync_restart_index();
                        return;
                    }
                }
            }
        }
    }

    /// A corrupt iterator stays corrupt and not valid: every positioning call is a no-op.
    #[inline]
    fn is_corrupt(&mut self) -> bool {
        if self.corruption.is_some() {
            self.invalidate();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{compare_internal_keys, encode_internal_key, ValueKind};
    use rand::{Rng, SeedableRng};

    fn ikey(user: &[u8], lsn: u64) -> Vec<u8> {
        let mut v = Vec::new();
        encode_internal_key(&mut v, user, lsn, ValueKind::Put);
        v
    }

    fn mem_path() -> Arc<Path> {
        Arc::from(Path::new("<memory>"))
    }

    fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
        build_with(entries, interval, false)
    }

    fn build_hashed(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
        build_with(entries, interval, true)
    }

    fn build_with(entries: &[(Vec<u8>, Vec<u8>)], interval: usize, hash_index: bool) -> Arc<Block> {
        let mut b = BlockBuilder::with_hash_index(interval, hash_index);
        let mut prev: Vec<u8> = Vec::new();
        for (k, v) in entries {
            b.add(&prev, k, v);
            prev.clone_from(k);
        }
        let est = b.size_estimate();
        let data = b.finish().to_vec();
        assert_eq!(est, data.len());
        Arc::new(Block::new(data, mem_path(), 0).unwrap())
    }

    fn sorted_entries(rng: &mut impl Rng, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = rng.random_range(0..12);
                let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
                ikey(&user, rng.random_range(0..1000))
            })
            .collect();
        keys.sort_by(|a, b| compare_internal_keys(a, b));
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let vlen = rng.random_range(0..20);
                let v = (0..vlen).map(|_| rng.random()).collect();
                (k, v)
            })
            .collect()
    }

    /// `scan_entries` sees exactly what a `BlockIter` sees, and flags a new user key exactly
    /// where the user part changes, across restart points and prefix-related keys.
    #[test]
    fn scan_entries_matches_the_iterator() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(78);
        for round in 0..300 {
            let n = rng.random_range(1..400);
            let entries = sorted_entries(&mut rng, n);
            let block = build_with(&entries, [1, 2, 4, 16][round % 4], round % 2 == 0);
            let mut seen: Vec<(Vec<u8>, usize, bool)> = Vec::new();
            let last = scan_entries(block.data(), &mem_path(), 0, |k, vlen, new_user| {
                seen.push((k.to_vec(), vlen, new_user));
                Ok(())
            })
            .unwrap();
            assert_eq!(seen.len(), entries.len());
            assert_eq!(last, entries.last().unwrap().0);
            for (i, ((k, vlen, new_user), (ek, ev))) in seen.iter().zip(&entries).enumerate() {
                assert_eq!(k, ek);
                assert_eq!(*vlen, ev.len());
                let expect_new = i == 0 || entries[i - 1].0[..entries[i - 1].0.len() - 8] != ek[..ek.len() - 8];
                assert_eq!(*new_user, expect_new, "round {round} entry {i}");
            }
        }
    }

    /// A block whose entries are out of internal-key order is refused by `scan_entries`,
    /// whichever way the order breaks.
    #[test]
    fn scan_entries_refuses_out_of_order_keys() {
        let cases: Vec<Vec<Vec<u8>>> = vec![
            vec![ikey(b"b", 1), ikey(b"a", 1)],
            vec![ikey(b"ab", 1), ikey(b"a", 1)],
            vec![ikey(b"abc", 1), ikey(b"abb", 1)],
            vec![ikey(b"a", 1), ikey(b"a", 2)],
            vec![ikey(b"a", 5), ikey(b"a", 5)],
            vec![ikey(b"", 3), ikey(b"", 3)],
        ];
        for keys in cases {
            for interval in [1, 16] {
                let mut b = BlockBuilder::with_hash_index(interval, false);
                let mut prev: Vec<u8> = Vec::new();
                for k in &keys {
                    b.add(&prev, k, b"v");
                    prev.clone_from(k);
                }
                let data = b.finish().to_vec();
                let err = scan_entries(&data, &mem_path(), 7, |_, _, _| Ok(())).unwrap_err();
                assert!(err.is_corruption(), "{keys:?}: {err}");
            }
        }
    }

    /// Point lookups through the hash index agree with the binary search: for a present user
    /// key they land on the first entry >= the target; for an absent one they never return an
    /// entry of that user key. Both block shapes (with and without an index) iterate the same.
    #[test]
    fn hash_index_point_lookups_match_binary_search() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(77);
        for round in 0..200 {
            let n = rng.random_range(1..600);
            let entries = sorted_entries(&mut rng, n);
            let interval = [1, 4, 16][round % 3];
            let plain = build(&entries, interval);
            let hashed = build_hashed(&entries, interval);
            assert!(hashed.buckets.1 > 0 || hashed.num_restarts > MAX_HASHED_RESTARTS);
            let mut a = BlockIter::new(plain);
            let mut b = BlockIter::new(hashed.clone());
            a.seek_to_first();
            b.seek_to_first();
            while a.valid() {
                assert!(b.valid() && a.key() == b.key() && a.value() == b.value());
                a.next();
                b.next();
            }
            assert!(!b.valid());
            for _ in 0..200 {
                let len = rng.random_range(0..12);
                let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
                let target = ikey(&user, rng.random_range(0..1100));
                a.seek(&target);
                b.seek_point(&target);
                let user_of = |k: &[u8]| k[..k.len() - 8].to_vec();
                let present = a.valid() && user_of(a.key()) == user;
                if present {
                    assert!(b.valid(), "round {round}: {user:?} lost");
                    assert_eq!(a.key(), b.key(), "round {round}");
                    assert_eq!(a.value(), b.value(), "round {round}");
                } else if b.valid() {
                    assert_ne!(user_of(b.key()), user, "round {round}: found an absent version");
                }
                assert!(b.status().is_ok());
            }
        }
    }

    #[test]
    fn damaged_hash_index_is_corruption_not_a_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let entries = sorted_entries(&mut rng, 200);
        let block = build_hashed(&entries, 16);
        let good = block.data().to_vec();
        let n = good.len();
        // A bucket count pointing before the block start.
        let mut bad = good.clone();
        let count_at = block.restarts_offset - 2;
        bad[count_at..count_at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        if (u16::MAX as usize) > count_at {
            assert!(Block::new(bad, mem_path(), 0).is_err());
        }
        // Any byte flipped in the buckets: lookups stay safe (never out of bounds).
        for i in block.buckets.0..block.buckets.0 + block.buckets.1 {
            let mut bad = good.clone();
            bad[i] = rng.random();
            let blk = Arc::new(Block::new(bad, mem_path(), 0).unwrap());
            let mut it = BlockIter::new(blk);
            for (k, _) in entries.iter().take(20) {
                it.seek_point(k);
            }
        }
        assert_eq!(n, good.len());
    }

    #[test]
    fn common_prefix_works() {
        assert_eq!(common_prefix(b"", b"abc"), 0);
        assert_eq!(common_prefix(b"abcdefghijk", b"abcdefghijx"), 10);
        assert_eq!(common_prefix(b"abcdefgh", b"abcdefgh"), 8);
        assert_eq!(common_prefix(b"abcdefgh", b"abcdefghi"), 8);
        assert_eq!(common_prefix(b"xbc", b"abc"), 0);
        assert_eq!(common_prefix(b"abcdefgx", b"abcdefgh"), 7);
    }

    #[test]
    fn exhaustive_seek_next_prev_against_vec() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for &interval in &[1usize, 2, 3, 16] {
            for &n in &[1usize, 2, 5, 17, 100, 300] {
                let entries = sorted_entries(&mut rng, n);
                let block = build(&entries, interval);
                let mut it = BlockIter::new(block.clone());
                assert!(!it.valid());
                // forward
                it.seek_to_first();
                for (k, v) in &entries {
                    assert!(it.valid());
                    assert_eq!(it.key(), &k[..]);
                    assert_eq!(it.value(), &v[..]);
                    it.next();
                }
                assert!(!it.valid());
                it.status().unwrap();
                // backward
                it.seek_to_last();
                for (k, v) in entries.iter().rev() {
                    assert!(it.valid());
                    assert_eq!(it.key(), &k[..]);
                    assert_eq!(it.value(), &v[..]);
                    it.prev();
                }
                assert!(!it.valid());
                // seek to every key, and to keys between
                for (i, (k, _)) in entries.iter().enumerate() {
                    it.seek(k);
                    assert_eq!(it.key(), &k[..]);
                    // prev then next returns to it
                    it.prev();
                    if i == 0 {
                        assert!(!it.valid());
                    } else {
                        assert_eq!(it.key(), &entries[i - 1].0[..]);
                        it.next();
                        assert_eq!(it.key(), &k[..]);
                    }
                }
                for _ in 0..200 {
                    let len = rng.random_range(0..12);
                    let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
                    let t = ikey(&user, rng.random_range(0..1000));
                    let want = entries.partition_point(|(k, _)| compare_internal_keys(k, &t) == Ordering::Less);
                    // from an unpositioned iterator and from a random position
                    let mut fresh = BlockIter::new(block.clone());
                    fresh.seek(&t);
                    if rng.random_bool(0.5) {
                        let j = rng.random_range(0..entries.len());
                        it.seek(&entries[j].0);
                    }
                    it.seek(&t);
                    for i in [&fresh, &it] {
                        if want == entries.len() {
                            assert!(!i.valid());
                        } else {
                            assert_eq!(i.key(), &entries[want].0[..]);
                            assert_eq!(i.value(), &entries[want].1[..]);
                        }
                    }
                }
                it.status().unwrap();
            }
        }
    }

    #[test]
    fn long_keys_and_values_use_multibyte_varints() {
        let big_key = ikey(&vec![b'k'; 70_000], 5);
        let entries = vec![
            (ikey(b"a", 1), vec![]),
            (big_key.clone(), vec![7u8; 300]),
            (ikey(&[b'k'; 70_001], 9), vec![1u8; 200_000]),
        ];
        let block = build(&entries, 16);
        let mut it = BlockIter::new(block);
        it.seek(&big_key);
        assert_eq!(it.key(), &big_key[..]);
        assert_eq!(it.value().len(), 300);
        it.next();
        assert_eq!(it.value().len(), 200_000);
        it.prev();
        it.prev();
        assert_eq!(it.key(), &entries[0].0[..]);
    }

    #[test]
    fn bad_restart_counts_are_corruption() {
        for data in [vec![], vec![1, 0, 0], vec![0, 0, 0, 0], vec![5, 0, 0, 0], vec![0; 7]] {
            let e = Block::new(data, mem_path(), 42).unwrap_err();
            assert!(e.is_corruption());
        }
    }

    #[test]
    fn garbage_blocks_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(99);
        let good = build(&sorted_entries(&mut rng, 60), 4).data().to_vec();
        for round in 0..3000 {
            let data: Vec<u8> = if round % 2 == 0 {
                // a valid block with a few bytes damaged
                let mut d = good.clone();
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..d.len());
                    d[i] = rng.random();
                }
                d
            } else {
                let len = rng.random_range(0..200);
                let mut d: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                if len >= 4 && rng.random_bool(0.7) {
                    // a plausible restart count
                    let n = rng.random_range(1..=((len - 4) / 4).max(1)) as u32;
                    d[len - 4..].copy_from_slice(&n.to_le_bytes());
                }
                d
            };
            let Ok(block) = Block::new(data, mem_path(), 0) else {
                continue;
            };
            let block = Arc::new(block);
            let mut it = BlockIter::new(block);
            it.seek_to_first();
            let mut steps = 0;
            while it.valid() && steps < 10_000 {
                let _ = (it.key(), it.value());
                it.next();
                steps += 1;
            }
            it.seek_to_last();
            steps = 0;
            while it.valid() && steps < 10_000 {
                it.prev();
                steps += 1;
            }
            for _ in 0..5 {
                let t = ikey(&[rng.random::<u8>(); 3], rng.random_range(0..100));
                it.seek(&t);
                if it.valid() {
                    it.next();
                    it.prev();
                }
            }
            if let Err(e) = it.status() {
                assert!(e.is_corruption());
            }
        }
    }

    #[test]
    fn corruption_is_reported_and_sticky() {
        // an entry whose shared length exceeds the (empty) previous key
        let mut data = vec![5u8, 1, 0, b'x'];
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&1u32.to_le_bytes());
        let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 1234).unwrap()));
        it.seek_to_first();
        assert!(!it.valid());
        match it.status().unwrap_err() {
            Error::Corruption { offset, .. } => assert_eq!(offset, 1234),
            e => panic!("unexpected {e:?}"),
        }
        it.seek(b"anything");
        assert!(!it.valid());
        assert!(it.status().is_err());
        it.seek_to_last();
        assert!(!it.valid());
        // an entry that runs past the end
        let mut data = vec![0u8, 10, 0, b'x'];
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&1u32.to_le_bytes());
        let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 0).unwrap()));
        it.seek_to_last();
        assert!(!it.valid());
        assert!(it.status().is_err());
        // a restart point past the entries
        let mut data = vec![0u8, 1, 0, b'x'];
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&100u32.to_le_bytes());
        data.extend_from_slice(&2u32.to_le_bytes());
        let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 0).unwrap()));
        it.seek_to_last();
        assert!(!it.valid());
        assert!(it.status().is_err());
    }
}
