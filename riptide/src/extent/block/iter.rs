//! Iterating one decoded data block: seeks (hash index; else the restart heads, then binary
//! search over the remaining restart points), forward and backward steps, and the entry
//! decoder they share.
//!
//! Invariants:
//! - Every entry is bounds-checked as it is decoded; any inconsistency becomes a sticky
//!   corruption status (then `valid() == false`), never a panic or an out-of-bounds read.
//! - [`BlockIter`] allocates nothing per entry: the current key lives in one reusable buffer and
//!   the value is a slice of the block.

use std::cmp::Ordering;
use std::sync::Arc;

use super::Block;
use crate::coding::get_varint32;
use crate::error::{Error, Result};
use crate::extent::{cmp_ikey, prefetch, prefetch_range};

/// Most restart points a seek prefetches before its binary search (more would only queue).
const SEEK_PREFETCH_RESTARTS: usize = 64;

/// Decodes the entry header at `p`: (shared, non_shared, value_len, key_start). Checks that the
/// key delta and the value lie before `limit`.
#[inline]
pub(in crate::extent) fn decode_entry(data: &[u8], p: usize, limit: usize) -> Option<(usize, usize, usize, usize)> {
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
        // First level: the restart heads, integers in a few cache lines, leave only the
        // restarts whose head equals the target's (usually none or one) to decode.
        (left, right) = block.narrow_by_heads(target, left, right);
        // The binary search's probes are dependent cache misses: start loading the first line
        // of every candidate restart entry at once (a 16 KiB block has about 30) so they overlap.
        if right - left < SEEK_PREFETCH_RESTARTS {
            for i in left..=right {
                prefetch(data, block.restart_point(i));
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
        prefetch_range(&block.data, self.next, end.min(self.limit), 16);
    }

    /// Positions at the first entry >= `target` *if* the target's user key is in the block;
    /// otherwise the iterator may end anywhere past the key or be invalid (for point lookups,
    /// which only accept an entry with the target's user key). Uses the hash index when the
    /// block has one.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn seek_point(&mut self, target: &[u8]) {
        let user = &target[..target.len().saturating_sub(8)];
        self.seek_point_hashed(target, crate::extent::filter_hash(user));
    }

    /// `seek_point` given `hash`, the [`filter_hash`](crate::extent::filter_hash) of the target's
    /// user key (the bloom filters' hash, so one hash serves a whole lookup).
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
