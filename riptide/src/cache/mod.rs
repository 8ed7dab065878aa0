//! The three caches of the read path (X-Engine §3.1.2; `xengine_as_built.md` §5).
//!
//! - [`BlockCache`] (`block.rs`): data and index blocks keyed by [`BlockKey`] (extent, offset), capacity
//!   in bytes, sharded, backed by `quick_cache` behind the [`BlockCacheBackend`] trait. Entries are
//!   `Arc<V>`: a block handed out stays valid while a reader holds it, even after it was evicted.
//!   X-Engine's incremental replacement for compaction (`BlockCache::replace`) is built for tests only
//!   until compaction uses it.
//! - [`TableCache`] (`table.rs`): open extent readers keyed by extent id, capacity in entries; concurrent
//!   misses on one id open the reader once.
//! - [`RowCache`] (`row.rs`): the newest on-disk version of hot rows, keyed by (sub-table id, user key),
//!   a home-grown sharded hash table with CLOCK eviction whose conditional operations
//!   ([`RowCache::insert_if`], [`RowCache::replace_if_present`]) are atomic per key.
//!
//! Invariants shared by all three:
//! - Capacity 0 disables a cache: lookups miss, inserts do nothing. No cache ever fails an operation
//!   or blocks on I/O; a refused insert only costs a later miss.
//! - Usage never exceeds capacity by more than one entry (per shard, shards share nothing).
//! - Counters (hits, misses, inserts, evictions) are striped per thread so the hot read path does not
//!   bounce one cache line between cores; [`CacheStats`] sums them (a snapshot, not atomic as a whole).

mod block;
mod row;
mod table;

pub(crate) use block::{BlockCache, BlockKey};
pub(crate) use row::{RowCache, RowEntry};
pub(crate) use table::TableCache;

use crossbeam_utils::CachePadded;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A point-in-time view of one cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Entries admitted (including ones that replaced an entry for the same key).
    pub inserts: u64,
    /// Entries dropped to make room, plus inserts refused for size (when the backend reports them).
    pub evictions: u64,
    /// Current charge in the cache's unit (bytes; entries for the table cache).
    pub usage: u64,
    /// Configured capacity in the same unit.
    pub capacity: u64,
    /// Number of resident entries.
    pub entries: u64,
}

// ---------------------------------------------------------------------------------------------
// Striped counters
// ---------------------------------------------------------------------------------------------

const STRIPES: usize = 16;

/// This thread's stripe index.
#[inline]
fn stripe() -> usize {
    crate::thread_index::thread_index() % STRIPES
}

#[derive(Default)]
struct Stripe {
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
}

/// Hit/miss/insert/eviction counters striped by thread (16 cache-line-padded stripes).
pub(crate) struct Counters {
    stripes: Box<[CachePadded<Stripe>]>,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| CachePadded::new(Stripe::default())).collect(),
        }
    }
}

impl Counters {
    #[inline]
    fn here(&self) -> &Stripe {
        &self.stripes[stripe()]
    }
    #[inline]
    pub(crate) fn hit(&self) {
        self.here().hits.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn miss(&self) {
        self.here().misses.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn insert(&self) {
        self.here().inserts.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn evict(&self, n: u64) {
        if n != 0 {
            self.here().evictions.fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Sums the stripes into `stats` (hits, misses, inserts, evictions).
    pub(crate) fn fill(&self, stats: &mut CacheStats) {
        for s in self.stripes.iter() {
            stats.hits += s.hits.load(Ordering::Relaxed);
            stats.misses += s.misses.load(Ordering::Relaxed);
            stats.inserts += s.inserts.load(Ordering::Relaxed);
            stats.evictions += s.evictions.load(Ordering::Relaxed);
        }
    }
}

/// One event counter striped by thread like [`Counters`] (for counters of the read path).
pub(crate) struct StripedCounter {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl Default for StripedCounter {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
        }
    }
}

impl StripedCounter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.stripes[stripe()].fetch_add(n, Ordering::Relaxed);
    }
    /// The sum of the stripes (a snapshot, not atomic as a whole).
    pub(crate) fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

// ---------------------------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------------------------

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xA076_1D64_78BD_642F;
const K2: u64 = 0xE703_7ED1_A0B4_28DB;

/// 64x64 -> 128-bit multiply, folded by xor (the mixing step of wyhash and foldhash).
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Fast keyed hash of a byte string (not cryptographic; seeds are random per cache, which makes
/// crafted collisions impractical). Processes 16 bytes per multiply.
#[inline]
pub(crate) fn hash_bytes(seed: u64, b: &[u8]) -> u64 {
    let len = b.len();
    let mut h = seed ^ (len as u64).wrapping_mul(K0);
    let mut i = 0;
    while i + 16 <= len {
        h = fold_mul(read_u64(b, i) ^ h ^ K1, read_u64(b, i + 8) ^ K2);
        i += 16;
    }
    let rest = len - i;
    let (lo, hi) = if rest >= 8 {
        (read_u64(b, i), read_u64(b, len - 8))
    } else if rest >= 4 {
        let a = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as u64;
        let z = u32::from_le_bytes([b[len - 4], b[len - 3], b[len - 2], b[len - 1]]) as u64;
        (a, z)
    } else if rest > 0 {
        // 1..=3 bytes: first, middle, last.
        let v = (b[i] as u64) | ((b[i + rest / 2] as u64) << 8) | ((b[len - 1] as u64) << 16);
        (v, 0)
    } else {
        (0, 0)
    };
    fold_mul(fold_mul(lo ^ h ^ K2, hi ^ K0) ^ K1, K0 ^ len as u64)
}

/// Mixes one word into a hash state.
#[inline(always)]
fn mix_u64(h: u64, x: u64) -> u64 {
    fold_mul(h ^ x ^ K1, K2)
}

/// A fresh random seed (std's per-process random keys, perturbed by a counter).
pub(crate) fn random_seed() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// `BuildHasher` for the fast hash, seeded per instance.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastBuildHasher {
    seed: u64,
}

impl FastBuildHasher {
    pub(crate) fn new() -> Self {
        Self { seed: random_seed() }
    }
}

impl BuildHasher for FastBuildHasher {
    type Hasher = FastHasher;
    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher { h: self.seed }
    }
}

/// Streaming state of [`FastBuildHasher`]. Word writes (the common case for integer keys) cost one
/// multiply each.
pub(crate) struct FastHasher {
    h: u64,
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.h = hash_bytes(self.h, bytes);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.h = mix_u64(self.h, i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.h = mix_u64(self.h, i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.h = mix_u64(self.h, i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.h = mix_u64(self.h, i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.h = mix_u64(self.h, i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        fold_mul(self.h, K0)
    }
}

/// Largest power of two <= `x` (1 for 0).
pub(crate) fn pow2_floor(x: usize) -> usize {
    if x <= 1 {
        1
    } else {
        1usize << (usize::BITS - 1 - x.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn hash_bytes_all_lengths_differ_and_are_deterministic() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut seen = HashSet::new();
        for len in 0..=data.len() {
            let h = hash_bytes(42, &data[..len]);
            assert_eq!(h, hash_bytes(42, &data[..len]));
            assert!(seen.insert(h), "collision at len {len}");
        }
        assert_ne!(hash_bytes(1, b"abc"), hash_bytes(2, b"abc"));
    }

    #[test]
    fn hash_bytes_single_bit_flips_change_hash() {
        for len in [1usize, 3, 4, 7, 8, 9, 15, 16, 17, 31, 33, 64] {
            let base: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let h0 = hash_bytes(7, &base);
            let mut seen = HashSet::new();
            seen.insert(h0);
            for i in 0..len {
                for bit in 0..8 {
                    let mut b = base.clone();
                    b[i] ^= 1 << bit;
                    assert!(seen.insert(hash_bytes(7, &b)), "len {len} byte {i} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn hash_bytes_spreads_low_and_high_bits() {
        // Sequential integer keys must fill 64 buckets by low bits and by high bits roughly evenly.
        let mut low = [0u32; 64];
        let mut high = [0u32; 64];
        for i in 0..64_000u64 {
            let h = hash_bytes(9, &i.to_be_bytes());
            low[(h & 63) as usize] += 1;
            high[(h >> 58) as usize] += 1;
        }
        for c in low.iter().chain(high.iter()) {
            assert!((800..1200).contains(c), "bucket count {c}");
        }
    }

    #[test]
    fn fast_hasher_words() {
        let b = FastBuildHasher { seed: 3 };
        let h = |a: u64, c: u64| {
            let mut s = b.build_hasher();
            s.write_u64(a);
            s.write_u64(c);
            s.finish()
        };
        assert_eq!(h(1, 2), h(1, 2));
        assert_ne!(h(1, 2), h(2, 1));
        assert_ne!(h(0, 0), h(0, 1));
    }

    #[test]
    fn counters_sum_over_threads() {
        let c = std::sync::Arc::new(Counters::default());
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.hit();
                        c.miss();
                        c.insert();
                        c.evict(2);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let mut s = CacheStats::default();
        c.fill(&mut s);
        assert_eq!((s.hits, s.misses, s.inserts, s.evictions), (8000, 8000, 8000, 16000));
    }

    #[test]
    fn pow2_floor_values() {
        assert_eq!(pow2_floor(0), 1);
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(2), 2);
        assert_eq!(pow2_floor(3), 2);
        assert_eq!(pow2_floor(1023), 512);
        assert_eq!(pow2_floor(1024), 1024);
    }
}
