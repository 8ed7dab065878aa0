//! Row cache: the newest on-disk version of hot rows, keyed by (sub-table id, user key).
//!
//! A sharded hash table with CLOCK eviction per shard. Each shard is a slab of 64-byte slots (key and
//! value bytes, lsn, CLOCK reference bit) plus an open-addressing index of 8-byte entries (32 hash bits
//! and a slot number). A slot holds key ‖ value inline when they fit in
//! [`INLINE_ROW`](slot::INLINE_ROW) bytes (one heap allocation otherwise), so a hit on a small row
//! reads one index line and one slot line, no other memory (a miss usually reads one index line). A lookup hashes the borrowed key once, takes the
//! shard's read lock, probes the index and compares bytes: no allocation, O(1). The reference bit is
//! an atomic set under the read lock (only if clear, so hot entries cause no writes).
//!
//! Rooms: `slot` (one row in one cache line, and its charge), `shard` (one shard's slab, index
//! and CLOCK eviction); this file holds the sharded cache and its admission rules.
//!
//! Invariants (what the read path relies on):
//! - Every mutation of a key ([`RowCache::insert_if`], [`RowCache::replace_if_present`],
//!   `RowCache::erase`, eviction) happens under its shard's write lock, so they are atomic w.r.t. each
//!   other and to lookups.
//! - `insert_if` admits an entry only if `still_valid()` returns true *under the shard lock* and no cached
//!   entry for the key has a higher lsn. The caller's guard checks its table's metadata version: a flush
//!   bumps the version before calling `replace_if_present`, so a reader that read disk before the flush
//!   either inserts before the replace (which then overwrites it) or is refused.
//! - `replace_if_present` never inserts a key that is absent and never lowers a cached lsn.
//! - A cached entry never has lsn below a version the cache was told about for that key; anything that
//!   cannot be cached as the newest version (row larger than `max_row_size`) removes the older entry.
//! - Rows with `key.len() + value.len() > max_row_size` are never cached. Each entry is charged
//!   [`row_charge`] bytes (what it occupies: its slot, its share of the index, and a large row's heap
//!   allocation); a shard's usage stays <= its capacity.
//! - Capacity 0 disables the cache (no shards).

mod shard;
mod slot;

use super::{hash_bytes, pow2_floor, random_seed, CacheStats, Counters};
use crossbeam_utils::CachePadded;
use parking_lot::RwLock;
use shard::Inner;
#[cfg(test)]
use slot::INLINE_ROW;
use slot::{row_charge, RowBytes, Slot, ROW_OVERHEAD};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Default largest row (key + value bytes) the row cache admits (X-Engine's `MAX_ROW_SIZE`).
#[cfg(test)]
pub(crate) const DEFAULT_MAX_ROW_SIZE: usize = 4096;
/// Most shards a row cache creates.
const MAX_ROW_SHARDS: usize = 256;
/// Each shard should hold at least this many rows of the largest admissible size.
const MIN_MAX_ROWS_PER_SHARD: usize = 32;

/// A cached row version: the newest version of the key on disk when it was cached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowEntry {
    /// LSN of the version.
    pub lsn: u64,
    /// The value; `None` means the key is deleted (a cached tombstone).
    pub value: Option<Arc<[u8]>>,
}

impl RowEntry {
    fn value_len(&self) -> usize {
        self.value.as_ref().map_or(0, |v| v.len())
    }
}
/// The hash of a row's (table, key): bits 32.. pick the shard, the low 32 bits its index position.
#[inline]
fn row_hash(seed: u64, table: u32, key: &[u8]) -> u64 {
    hash_bytes(seed ^ (table as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), key)
}

struct Shard {
    inner: RwLock<Inner>,
    capacity: usize,
}

/// The row cache. See the module docs for its invariants.
pub(crate) struct RowCache {
    shards: Box<[CachePadded<Shard>]>,
    shard_mask: u64,
    seed: u64,
    max_row_size: usize,
    capacity: usize,
    counters: Counters,
}

/// Number of shards for a row cache: a power of two in `1..=MAX_ROW_SHARDS`, each shard large enough
/// for `MIN_MAX_ROWS_PER_SHARD` rows of the largest admissible size (one shard for small caches).
fn row_shards(capacity_bytes: usize, max_row_size: usize) -> usize {
    let per_shard = MIN_MAX_ROWS_PER_SHARD.saturating_mul(row_charge(max_row_size));
    pow2_floor(capacity_bytes / per_shard.max(1)).clamp(1, MAX_ROW_SHARDS)
}

impl RowCache {
    /// A row cache of `capacity_bytes` (0 disables it) admitting rows of at most `max_row_size` bytes
    /// (key + value; X-Engine's choice is 4096, `DEFAULT_MAX_ROW_SIZE`).
    pub(crate) fn new(capacity_bytes: usize, max_row_size: usize) -> Self {
        let n = if capacity_bytes == 0 {
            0
        } else {
            row_shards(capacity_bytes, max_row_size)
        };
        let per = capacity_bytes.checked_div(n).unwrap_or(0);
        let seed = random_seed();
        let shards = (0..n)
            .map(|_| {
                CachePadded::new(Shard {
                    inner: RwLock::new(Inner::new(seed, per / ROW_OVERHEAD)),
                    capacity: per,
                })
            })
            .collect::<Box<[_]>>();
        Self {
            shards,
            shard_mask: n.saturating_sub(1) as u64,
            seed,
            max_row_size,
            capacity: per * n,
            counters: Counters::default(),
        }
    }

    /// Whether the cache can hold anything.
    pub(crate) fn enabled(&self) -> bool {
        !self.shards.is_empty()
    }

    /// Number of shards (0 when disabled).
    #[cfg(test)]
    pub(crate) fn num_shards(&self) -> usize {
        self.shards.len()
    }

    #[inline]
    fn hash(&self, table: u32, key: &[u8]) -> u64 {
        row_hash(self.seed, table, key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        // Bits 32.. pick the shard; the shard's index uses the low 32 bits.
        &self.shards[((hash >> 32) & self.shard_mask) as usize]
    }

    /// Runs `f` on the cached entry for the key under the shard's read lock (marks it used, counts a hit
    /// or a miss). Lets the caller copy the value without touching the `Arc`'s reference count.
    #[inline]
    pub(crate) fn get_with<T>(&self, table: u32, key: &[u8], f: impl FnOnce(u64, Option<&[u8]>) -> T) -> Option<T> {
        if self.shards.is_empty() {
            self.counters.miss();
            return None;
        }
        let hash = self.hash(table, key);
        let g = self.shard(hash).inner.read();
        let Some(i) = g.find(hash, table, key) else {
            drop(g);
            self.counters.miss();
            return None;
        };
        let s = g.slot(i);
        if !s.referenced.load(Ordering::Relaxed) {
            s.referenced.store(true, Ordering::Relaxed);
        }
        let r = f(s.lsn, s.value());
        drop(g);
        self.counters.hit();
        Some(r)
    }

    /// Lookup; the caller decides whether the entry's lsn is usable for its snapshot.
    #[cfg(test)]
    pub(crate) fn get(&self, table: u32, key: &[u8]) -> Option<RowEntry> {
        self.get_with(table, key, |lsn, value| RowEntry {
            lsn,
            value: value.map(Arc::from),
        })
    }

    /// Inserts `entry` as the cached version of the key, only if `still_valid()` returns true when
    /// evaluated under the shard lock and no cached entry has a higher lsn (an equal lsn is overwritten).
    /// Returns whether the entry is now cached. Rows over `max_row_size` are never cached; such an insert
    /// removes a cached entry with a lower lsn instead.
    pub(crate) fn insert_if(
        &self,
        table: u32,
        key: &[u8],
        entry: RowEntry,
        still_valid: impl FnOnce() -> bool,
    ) -> bool {
        if self.shards.is_empty() {
            return false;
        }
        let hash = self.hash(table, key);
        let shard = self.shard(hash);
        let size = key.len() + entry.value_len();
        let charge = row_charge(size);
        if size > self.max_row_size || charge > shard.capacity {
            self.drop_older(shard, hash, table, key, entry.lsn);
            return false;
        }
        // Copy the row outside the lock.
        let bytes = RowBytes::new(key, entry.value.as_deref().unwrap_or_default());
        let has_value = entry.value.is_some();
        let mut referenced = false;
        let (evicted, old) = {
            let mut g = shard.inner.write();
            let existing = g.find(hash, table, key);
            if let Some(i) = existing {
                if g.slot(i).lsn > entry.lsn {
                    return false;
                }
            }
            if !still_valid() {
                return false;
            }
            let old = existing.map(|i| {
                let s = g.remove(i, hash);
                referenced = s.referenced.load(Ordering::Relaxed);
                s
            });
            let evicted = g.evict_for(charge, shard.capacity);
            g.link(
                Slot {
                    lsn: entry.lsn,
                    table,
                    referenced: AtomicBool::new(referenced),
                    has_value,
                    bytes,
                },
                hash,
            );
            (evicted, old)
        };
        drop(old);
        self.counters.insert();
        self.counters.evict(evicted);
        true
    }

    /// After a flush wrote `entry` as the newest version of the key: replaces a cached entry (if present
    /// and not newer) by it; never inserts an absent key. If `entry` is too large to cache, the older
    /// cached entry is removed.
    pub(crate) fn replace_if_present(&self, table: u32, key: &[u8], entry: RowEntry) {
        if self.shards.is_empty() {
            return;
        }
        let hash = self.hash(table, key);
        let shard = self.shard(hash);
        // Most flushed keys are not cached: check under the read lock first. Absent at this instant is a
        // valid linearization point (an insert racing with us is refused by the caller's version guard).
        if shard.inner.read().find(hash, table, key).is_none() {
            return;
        }
        let size = key.len() + entry.value_len();
        let charge = row_charge(size);
        if size > self.max_row_size || charge > shard.capacity {
            self.drop_older(shard, hash, table, key, entry.lsn);
            return;
        }
        let bytes = RowBytes::new(key, entry.value.as_deref().unwrap_or_default());
        let (evicted, old) = {
            let mut g = shard.inner.write();
            let Some(i) = g.find(hash, table, key) else { return };
            if g.slot(i).lsn > entry.lsn {
                return;
            }
            let old = g.remove(i, hash);
            // A cached row was read, so it is hot: keep it through the next CLOCK sweep. A cached
            // absence (LSN 0, no value) of a key just written may have been read once
            // (insert-if-absent): it keeps its own bit. (A row of L2 may have LSN 0 too: LSN
            // zeroing; it has a value.)
            let referenced = old.has_value || old.lsn != 0 || old.referenced.load(Ordering::Relaxed);
            let evicted = g.evict_for(charge, shard.capacity);
            g.link(
                Slot {
                    lsn: entry.lsn,
                    table,
                    referenced: AtomicBool::new(referenced),
                    has_value: entry.value.is_some(),
                    bytes,
                },
                hash,
            );
            (evicted, old)
        };
        drop(old);
        self.counters.insert();
        self.counters.evict(evicted);
    }

    /// Removes the cached entry for the key if its lsn is below `lsn`.
    fn drop_older(&self, shard: &Shard, hash: u64, table: u32, key: &[u8], lsn: u64) {
        if shard.inner.read().find(hash, table, key).is_none() {
            return;
        }
        let old = {
            let mut g = shard.inner.write();
            match g.find(hash, table, key) {
                Some(i) if g.slot(i).lsn < lsn => Some(g.remove(i, hash)),
                _ => None,
            }
        };
        drop(old);
    }

    /// Removes the cached entry for the key, if any.
    #[cfg(test)]
    pub(crate) fn erase(&self, table: u32, key: &[u8]) {
        if self.shards.is_empty() {
            return;
        }
        let hash = self.hash(table, key);
        let shard = self.shard(hash);
        if shard.inner.read().find(hash, table, key).is_none() {
            return;
        }
        let old = {
            let mut g = shard.inner.write();
            g.find(hash, table, key).map(|i| g.remove(i, hash))
        };
        drop(old);
    }

    /// Removes every cached row of `table` (walks the whole cache; for dropped tables).
    pub(crate) fn erase_table(&self, table: u32) {
        for shard in self.shards.iter() {
            let mut g = shard.inner.write();
            for i in 0..g.slots.len() {
                if matches!(&g.slots[i], Some(s) if s.table == table) {
                    g.remove_slot(i as u32);
                }
            }
        }
    }

    /// Counters and occupancy (usage and capacity in bytes).
    pub(crate) fn stats(&self) -> CacheStats {
        let mut s = CacheStats {
            capacity: self.capacity as u64,
            ..Default::default()
        };
        for shard in self.shards.iter() {
            let g = shard.inner.read();
            s.usage += g.usage as u64;
            s.entries += g.len as u64;
        }
        self.counters.fill(&mut s);
        s
    }
}

#[cfg(test)]
mod tests;
