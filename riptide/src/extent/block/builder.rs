//! Building one data block: prefix-compressed entries, restart points, the optional hash index,
//! region checksums and the footer, in the layout described in [`super`].
//!
//! Invariants:
//! - Keys are added in strictly increasing internal-key order (the extent builder checks); an
//!   entry at a restart point stores its whole key (`shared == 0`).
//! - A finished block always has at least one restart point, and its tail is exactly what
//!   [`super::Block::new`] and the point-read path expect (flags in the footer say which optional
//!   parts are present).

use super::{
    bucket_of, region_crc, tail_crc, BUCKETS_PER_KEY, BUCKET_COLLISION, BUCKET_EMPTY, HASH_INDEX_FLAG,
    MAX_HASHED_RESTARTS, REGION_CRC_FLAG, TAIL_FIXED,
};
use crate::coding::put_varint;
use crate::extent::filter::filter_hash;

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
    pub(in crate::extent) region_crcs: bool,
}

impl BlockBuilder {
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
        num_buckets(self.hashed.len())
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
                self.hashed.push((filter_hash(user), restart));
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
            let buckets = hash_buckets(&self.hashed);
            self.buf.extend_from_slice(&buckets);
            self.buf.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
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

/// Buckets of a hash index over `keys` distinct user keys.
pub(super) fn num_buckets(keys: usize) -> usize {
    (keys * BUCKETS_PER_KEY).clamp(1, u16::MAX as usize)
}

/// The hash index's buckets for `hashed` = (user-key hash, restart index of the key's first
/// entry), one per distinct user key in block order.
pub(super) fn hash_buckets(hashed: &[(u64, u8)]) -> Vec<u8> {
    let n = num_buckets(hashed.len());
    let mut buckets = vec![BUCKET_EMPTY; n];
    for &(h, r) in hashed {
        let b = &mut buckets[bucket_of(h, n)];
        *b = match *b {
            BUCKET_EMPTY => r,
            same if same == r => r,
            _ => BUCKET_COLLISION,
        };
    }
    buckets
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
