//! Row cache: the newest on-disk version of hot rows, keyed by (sub-table id, user key).
//!
//! A sharded hash table with CLOCK eviction per shard. Each shard is a slab of 64-byte slots (key and
//! value bytes, lsn, CLOCK reference bit) plus an open-addressing index of 8-byte entries (32 hash bits
//! and a slot number). A slot holds key ‖ value inline when they fit in [`INLINE_ROW`] bytes (one heap
//! allocation otherwise), so a hit on a small row reads one index line and one slot line, no other
//! memory (a miss usually reads one index line). A lookup hashes the borrowed key once, takes the
//! shard's read lock, probes the index and compares bytes: no allocation, O(1). The reference bit is
//! an atomic set under the read lock (only if clear, so hot entries cause no writes).
//!
//! Invariants (what the read path relies on):
//! - Every mutation of a key ([`RowCache::insert_if`], [`RowCache::replace_if_present`],
//!   [`RowCache::erase`], eviction) happens under its shard's write lock, so they are atomic w.r.t. each
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

use super::{hash_bytes, pow2_floor, random_seed, CacheStats, Counters};
use crossbeam_utils::CachePadded;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Default largest row (key + value bytes) the row cache admits (X-Engine's `MAX_ROW_SIZE`).
#[cfg(test)]
pub(crate) const DEFAULT_MAX_ROW_SIZE: usize = 4096;
/// Bytes charged per entry besides a large row's heap bytes: its 64-byte slot, up to four 8-byte
/// index entries and a 4-byte free-list entry. Every row is charged at least this much, so a shard
/// holds at most `capacity / ROW_OVERHEAD` rows; its slab and free list grow as rows arrive (doubling,
/// never past that many), and its index holds at most four entries per row of its peak count, so a
/// shard's memory stays within its capacity (plus a 64-entry minimum index, and twice the slab for
/// a moment while it grows).
pub(crate) const ROW_OVERHEAD: usize = 100;
/// Rows a shard's slab first makes room for.
const SLAB_FIRST_ROWS: usize = 1024;
/// Bytes charged for a heap allocation's header.
const HEAP_OVERHEAD: usize = 16;

/// The bytes an entry of `size` key + value bytes occupies: an inline row only its slot and index
/// share; a larger one also its heap allocation.
pub(crate) fn row_charge(size: usize) -> usize {
    if size <= INLINE_ROW {
        ROW_OVERHEAD
    } else {
        ROW_OVERHEAD + HEAP_OVERHEAD + size
    }
}
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

/// Rows whose key and value together fit in this many bytes are stored inside their slot.
pub(crate) const INLINE_ROW: usize = 44;

/// A row's key ‖ value bytes: inside the slot when small, else in one heap allocation.
enum RowBytes {
    Inline {
        len: u8,
        key_len: u8,
        buf: [u8; INLINE_ROW],
    },
    Heap {
        key_len: u32,
        buf: Box<[u8]>,
    },
}

impl RowBytes {
    fn new(key: &[u8], value: &[u8]) -> RowBytes {
        let len = key.len() + value.len();
        if len <= INLINE_ROW {
            let mut buf = [0u8; INLINE_ROW];
            buf[..key.len()].copy_from_slice(key);
            buf[key.len()..len].copy_from_slice(value);
            RowBytes::Inline {
                len: len as u8,
                key_len: key.len() as u8,
                buf,
            }
        } else {
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(key);
            v.extend_from_slice(value);
            RowBytes::Heap {
                key_len: key.len() as u32,
                buf: v.into_boxed_slice(),
            }
        }
    }

    /// (key ‖ value, key length).
    #[inline]
    fn parts(&self) -> (&[u8], usize) {
        match self {
            RowBytes::Inline { len, key_len, buf } => (&buf[..*len as usize], *key_len as usize),
            RowBytes::Heap { key_len, buf } => (buf, *key_len as usize),
        }
    }
}

/// One cached row, one cache line: a hit reads the index line and this line, no other memory.
#[repr(C, align(64))]
struct Slot {
    lsn: u64,
    table: u32,
    referenced: AtomicBool,
    /// False for a cached tombstone (then `bytes` is only the key).
    has_value: bool,
    bytes: RowBytes,
}

const _: () = assert!(std::mem::size_of::<Option<Slot>>() == 64);

impl Slot {
    #[inline]
    fn key(&self) -> &[u8] {
        let (b, k) = self.bytes.parts();
        b.get(..k).unwrap_or_default()
    }

    #[inline]
    fn value(&self) -> Option<&[u8]> {
        if self.has_value {
            let (b, k) = self.bytes.parts();
            b.get(k..)
        } else {
            None
        }
    }

    fn charge(&self) -> usize {
        row_charge(self.bytes.parts().0.len())
    }
}

/// The hash of a row's (table, key): bits 32.. pick the shard, the low 32 bits its index position.
#[inline]
fn row_hash(seed: u64, table: u32, key: &[u8]) -> u64 {
    hash_bytes(seed ^ (table as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), key)
}

/// An index entry: the low 32 bits of the row's hash above, slot number + 1 below (0 = empty).
#[inline]
fn index_entry(hash: u64, slot: u32) -> u64 {
    (hash << 32) | (slot as u64 + 1)
}

/// One shard's rows: a slab of slots and an open-addressing index over them (linear probing,
/// at most half full, deletion by backward shift, so no tombstones). An index entry carries the
/// low 32 bits of its row's hash, which give its home position and filter the probe, so a miss
/// usually reads one index line and a hit one index line plus the slot's line.
struct Inner {
    seed: u64,
    /// Most rows the shard can hold (`capacity / ROW_OVERHEAD`): the slab's largest size.
    max_rows: usize,
    index: Vec<u64>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// CLOCK hand (index into `slots`).
    hand: usize,
    usage: usize,
    len: usize,
}

impl Inner {
    fn new(seed: u64, max_rows: usize) -> Self {
        Self {
            seed,
            max_rows,
            index: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            usage: 0,
            len: 0,
        }
    }

    #[inline]
    fn slot(&self, i: u32) -> &Slot {
        self.slots[i as usize].as_ref().expect("index points at a live slot")
    }

    #[inline]
    fn find(&self, hash: u64, table: u32, key: &[u8]) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let tag = hash as u32;
        let mut p = hash as usize & mask;
        loop {
            let e = self.index[p];
            if e == 0 {
                return None;
            }
            if (e >> 32) as u32 == tag {
                let i = (e as u32).wrapping_sub(1);
                let s = self.slot(i);
                if s.table == table && s.key() == key {
                    return Some(i);
                }
            }
            p = (p + 1) & mask;
        }
    }

    /// Places `entry` at the first empty position from its home (the index has room).
    fn place(index: &mut [u64], entry: u64) {
        let mask = index.len() - 1;
        let mut p = (entry >> 32) as usize & mask;
        while index[p] != 0 {
            p = (p + 1) & mask;
        }
        index[p] = entry;
    }

    /// Unlinks slot `i` (whose row hashes to `hash`) from the index and frees it.
    fn remove(&mut self, i: u32, hash: u64) -> Slot {
        let mask = self.index.len() - 1;
        let want = index_entry(hash, i);
        let mut hole = hash as usize & mask;
        while self.index[hole] != want {
            // A live slot is always indexed; never spin under the write lock if that broke.
            assert!(self.index[hole] != 0, "row cache: slot {i} missing from the index");
            hole = (hole + 1) & mask;
        }
        // Backward shift: move later entries of the cluster into the hole when that keeps them
        // reachable from their home (their home is not cyclically inside (hole, q]).
        let mut q = (hole + 1) & mask;
        loop {
            let e = self.index[q];
            if e == 0 {
                break;
            }
            let home = (e >> 32) as usize & mask;
            if q.wrapping_sub(home) & mask >= q.wrapping_sub(hole) & mask {
                self.index[hole] = e;
                hole = q;
            }
            q = (q + 1) & mask;
        }
        self.index[hole] = 0;
        let s = self.slots[i as usize].take().expect("remove of a live slot");
        self.free.push(i);
        self.usage -= s.charge();
        self.len -= 1;
        s
    }

    /// Unlinks and frees slot `i`, recomputing its hash.
    fn remove_slot(&mut self, i: u32) -> Slot {
        let s = self.slot(i);
        let hash = row_hash(self.seed, s.table, s.key());
        self.remove(i, hash)
    }

    /// Links a new slot for a row hashing to `hash` (its key must not be present).
    fn link(&mut self, s: Slot, hash: u64) {
        if (self.len + 1) * 2 > self.index.len() {
            let mut index = vec![0u64; (self.index.len() * 2).max(64)];
            for &e in self.index.iter().filter(|&&e| e != 0) {
                Self::place(&mut index, e);
            }
            self.index = index;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() == self.slots.capacity() {
                    // The slab grows as the shard fills (doubling, from 1,024 rows) but never
                    // past `max_rows`: eviction keeps len <= max_rows. A huge capacity costs
                    // nothing until rows arrive.
                    let room = self.max_rows.max(1).saturating_sub(self.slots.capacity());
                    let grow = self.slots.capacity().max(SLAB_FIRST_ROWS).min(room).max(1);
                    self.slots.reserve_exact(grow);
                    self.free
                        .reserve_exact(self.slots.capacity().saturating_sub(self.free.capacity()));
                }
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        Self::place(&mut self.index, index_entry(hash, i));
        self.usage += s.charge();
        self.len += 1;
        self.slots[i as usize] = Some(s);
    }

    /// CLOCK: evicts until `need` more bytes fit in `capacity`; returns the number evicted.
    fn evict_for(&mut self, need: usize, capacity: usize) -> u64 {
        let mut evicted = 0;
        while self.usage + need > capacity && self.len > 0 {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let i = self.hand;
            self.hand += 1;
            let Some(s) = &self.slots[i] else { continue };
            if s.referenced.load(Ordering::Relaxed) {
                s.referenced.store(false, Ordering::Relaxed);
                continue;
            }
            self.remove_slot(i as u32);
            evicted += 1;
        }
        evicted
    }
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
    #[inline]
    pub(crate) fn get(&self, table: u32, key: &[u8]) -> Option<RowEntry> {
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
        let e = RowEntry {
            lsn: s.lsn,
            value: s.value().map(Arc::from),
        };
        drop(g);
        self.counters.hit();
        Some(e)
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
            // absence (LSN 0) of a key just written may have been read once (insert-if-absent):
            // it keeps its own bit.
            let referenced = old.lsn != 0 || old.referenced.load(Ordering::Relaxed);
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
