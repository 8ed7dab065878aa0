//! Block cache: decoded data/index blocks keyed by (extent, offset), capacity in bytes.
//!
//! Invariants:
//! - Values are `Arc<V>`; a block handed out by [`BlockCache::get`] stays valid (pinned) for as long as
//!   the caller holds the `Arc`, even if the cache evicts or removes it meanwhile. Memory of evicted but
//!   pinned blocks is not counted in `usage`.
//! - Each entry is charged the caller's `charge` (at least 1). Usage stays <= capacity + one entry.
//! - The backend is sharded (quick_cache, S3-FIFO-like policy); the shard count is chosen from the
//!   capacity so each shard holds at least [`MIN_SHARD_BYTES`]. quick_cache silently refuses an entry
//!   heavier than 97% of one shard; with this rule a 16 KiB block always fits (even a 1 MiB cache has
//!   two 512 KiB shards, and a cache smaller than that is a single shard).
//! - [`BlockKey::extent`] must not be reused for different contents while entries for it may be cached:
//!   use a never-reused cache id (e.g. extent id with a reuse generation), or remove the extent's
//!   blocks when it is freed (`BlockCache::remove_extent`, built for tests only until a caller needs
//!   it).

use super::{pow2_floor, CacheStats, Counters, FastBuildHasher};
use quick_cache::sync::Cache;
use quick_cache::{Lifecycle, OptionsBuilder, Weighter};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Smallest shard the block cache creates (unless the whole cache is smaller).
pub(crate) const MIN_SHARD_BYTES: usize = 512 << 10;
/// Most shards the block cache creates.
pub(crate) const MAX_SHARDS: usize = 128;
/// Block size assumed when estimating the number of entries (only sizes quick_cache's ghost table).
const TYPICAL_BLOCK: usize = 4 << 10;

/// Cache key of a block: the extent's cache id and the block's byte offset in the extent.
#[derive(Clone, Copy, Hash, Eq, PartialEq, Debug)]
pub(crate) struct BlockKey {
    /// Cache id of the extent (never reused for other contents; see the module docs).
    pub extent: u64,
    /// Byte offset of the block inside the extent.
    pub offset: u64,
}

/// Storage behind [`BlockCache`], so the policy can change (e.g. a home-grown CLOCK cache) without
/// touching callers. Implementations are internally synchronized.
pub(crate) trait BlockCacheBackend<V>: Send + Sync {
    /// Looks up a block and marks it recently used.
    fn get(&self, key: &BlockKey) -> Option<Arc<V>>;
    /// Inserts or overwrites a block charged `charge` bytes; may evict others, may refuse silently.
    fn insert(&self, key: BlockKey, value: Arc<V>, charge: usize);
    /// Removes a block; returns whether it was cached.
    fn remove(&self, key: &BlockKey) -> bool;
    /// Whether a block is cached, without marking it used.
    fn contains(&self, key: &BlockKey) -> bool;
    /// Removes every block of one extent (O(cache size): for rare use).
    #[cfg(test)]
    fn remove_extent(&self, extent: u64);
    /// Charged bytes currently resident.
    fn usage(&self) -> usize;
    /// Capacity in bytes.
    fn capacity(&self) -> usize;
    /// Resident entries.
    fn len(&self) -> usize;
    /// Entries evicted (or refused for size) so far.
    fn evictions(&self) -> u64;
}

/// A cached value with its charge.
struct Charged<V> {
    value: Arc<V>,
    charge: u64,
}

impl<V> Clone for Charged<V> {
    fn clone(&self) -> Self {
        Self {
            value: self.value.clone(),
            charge: self.charge,
        }
    }
}

#[derive(Clone, Copy)]
struct ChargeWeighter;

impl<V> Weighter<BlockKey, Charged<V>> for ChargeWeighter {
    #[inline]
    fn weight(&self, _key: &BlockKey, val: &Charged<V>) -> u64 {
        val.charge
    }
}

/// quick_cache lifecycle that only counts evictions (and size refusals).
pub(crate) struct EvictCounter<K, V> {
    count: Arc<AtomicU64>,
    _p: PhantomData<fn(K, V)>,
}

impl<K, V> EvictCounter<K, V> {
    pub(crate) fn new() -> Self {
        Self {
            count: Arc::new(AtomicU64::new(0)),
            _p: PhantomData,
        }
    }
    pub(crate) fn get(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl<K, V> Clone for EvictCounter<K, V> {
    fn clone(&self) -> Self {
        Self {
            count: self.count.clone(),
            _p: PhantomData,
        }
    }
}

impl<K, V> Lifecycle<K, V> for EvictCounter<K, V> {
    type RequestState = ();
    #[inline]
    fn begin_request(&self) -> Self::RequestState {}
    #[inline]
    fn on_evict(&self, _state: &mut Self::RequestState, _key: K, _val: V) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

type QuickBlocks<V> = Cache<BlockKey, Charged<V>, ChargeWeighter, FastBuildHasher, EvictCounter<BlockKey, Charged<V>>>;

/// The default backend: a sharded quick_cache with a byte weighter.
pub(crate) struct QuickCacheBackend<V> {
    cache: QuickBlocks<V>,
    lifecycle: EvictCounter<BlockKey, Charged<V>>,
    capacity: usize,
}

/// Number of shards for a cache of `capacity_bytes`: a power of two in `1..=MAX_SHARDS` with each
/// shard holding at least `MIN_SHARD_BYTES` (or one shard for small caches).
pub(crate) fn block_shards(capacity_bytes: usize) -> usize {
    pow2_floor(capacity_bytes / MIN_SHARD_BYTES).clamp(1, MAX_SHARDS)
}

impl<V: Send + Sync + 'static> QuickCacheBackend<V> {
    /// A backend of `capacity_bytes` (> 0).
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        let capacity_bytes = capacity_bytes.max(1);
        let shards = block_shards(capacity_bytes);
        // quick_cache halves the shard count until each shard expects >= 32 items; our estimate
        // keeps >= 128 per shard, so it keeps our count.
        let items = (capacity_bytes / TYPICAL_BLOCK).max(32);
        let opts = OptionsBuilder::new()
            .shards(shards)
            .estimated_items_capacity(items)
            .weight_capacity(capacity_bytes as u64)
            .build()
            .expect("all options set");
        let lifecycle = EvictCounter::new();
        let cache = Cache::with_options(opts, ChargeWeighter, FastBuildHasher::new(), lifecycle.clone());
        Self {
            cache,
            lifecycle,
            capacity: capacity_bytes,
        }
    }

    /// Number of shards actually in use.
    #[cfg(test)]
    pub(crate) fn num_shards(&self) -> usize {
        self.cache.num_shards()
    }

    /// Capacity of one shard in bytes.
    #[cfg(test)]
    pub(crate) fn shard_capacity(&self) -> u64 {
        self.cache.shard_capacity()
    }
}

impl<V: Send + Sync + 'static> BlockCacheBackend<V> for QuickCacheBackend<V> {
    #[inline]
    fn get(&self, key: &BlockKey) -> Option<Arc<V>> {
        self.cache.get(key).map(|c| c.value)
    }
    fn insert(&self, key: BlockKey, value: Arc<V>, charge: usize) {
        // Zero-weight entries are never evicted by quick_cache: charge at least 1.
        let charge = (charge as u64).max(1);
        self.cache.insert(key, Charged { value, charge });
    }
    fn remove(&self, key: &BlockKey) -> bool {
        self.cache.remove(key).is_some()
    }
    fn contains(&self, key: &BlockKey) -> bool {
        self.cache.contains_key(key)
    }
    #[cfg(test)]
    fn remove_extent(&self, extent: u64) {
        self.cache.retain(|k, _| k.extent != extent);
    }
    fn usage(&self) -> usize {
        self.cache.weight() as usize
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn len(&self) -> usize {
        self.cache.len()
    }
    fn evictions(&self) -> u64 {
        self.lifecycle.get()
    }
}

/// The backend of a disabled (capacity 0) cache: holds nothing.
struct Disabled;

impl<V> BlockCacheBackend<V> for Disabled {
    fn get(&self, _key: &BlockKey) -> Option<Arc<V>> {
        None
    }
    fn insert(&self, _key: BlockKey, _value: Arc<V>, _charge: usize) {}
    fn remove(&self, _key: &BlockKey) -> bool {
        false
    }
    fn contains(&self, _key: &BlockKey) -> bool {
        false
    }
    #[cfg(test)]
    fn remove_extent(&self, _extent: u64) {}
    fn usage(&self) -> usize {
        0
    }
    fn capacity(&self) -> usize {
        0
    }
    fn len(&self) -> usize {
        0
    }
    fn evictions(&self) -> u64 {
        0
    }
}

/// The block cache. Generic over the block type so it does not depend on the extent module.
pub(crate) struct BlockCache<V> {
    backend: Box<dyn BlockCacheBackend<V>>,
    counters: Counters,
}

impl<V: Send + Sync + 'static> BlockCache<V> {
    /// A cache of `capacity_bytes` on the default backend; 0 disables it.
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        if capacity_bytes == 0 {
            Self::with_backend(Box::new(Disabled))
        } else {
            Self::with_backend(Box::new(QuickCacheBackend::new(capacity_bytes)))
        }
    }

    /// A cache over a custom backend.
    pub(crate) fn with_backend(backend: Box<dyn BlockCacheBackend<V>>) -> Self {
        Self {
            backend,
            counters: Counters::default(),
        }
    }

    /// Whether the cache can hold anything.
    pub(crate) fn enabled(&self) -> bool {
        self.backend.capacity() != 0
    }

    /// Looks up a block (counts a hit or a miss).
    #[inline]
    pub(crate) fn get(&self, key: &BlockKey) -> Option<Arc<V>> {
        let r = self.backend.get(key);
        if r.is_some() {
            self.counters.hit();
        } else {
            self.counters.miss();
        }
        r
    }

    /// Counts a hit served without a lookup (a swizzled reference to a cached block).
    #[inline]
    pub(crate) fn count_hit(&self) {
        self.counters.hit();
    }

    /// Looks a block up only so the cache's policy sees it used (counts nothing).
    pub(crate) fn touch(&self, key: &BlockKey) {
        let _ = self.backend.get(key);
    }

    /// Inserts (or overwrites) a block charged `charge` bytes. A block heavier than a shard is
    /// refused silently (counted as an eviction).
    pub(crate) fn insert(&self, key: BlockKey, value: Arc<V>, charge: usize) {
        if !self.enabled() {
            return;
        }
        self.counters.insert();
        self.backend.insert(key, value, charge);
    }

    /// Incremental replacement (used by compaction): if `old` is cached, inserts `new` in its place and
    /// removes `old`; returns whether `old` was cached. If `old` is not cached nothing changes.
    #[cfg(test)]
    pub(crate) fn replace(&self, old: &BlockKey, new: BlockKey, value: Arc<V>, charge: usize) -> bool {
        if !self.backend.remove(old) {
            return false;
        }
        self.counters.insert();
        self.backend.insert(new, value, charge);
        true
    }

    /// Bytes in use (sums the shards: not for every lookup).
    pub(crate) fn usage(&self) -> usize {
        self.backend.usage()
    }

    /// Capacity in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.backend.capacity()
    }

    /// Whether a block is cached (does not count as a hit or miss, does not mark it used).
    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.backend.contains(key)
    }

    /// Removes a block if cached (readers holding it keep their `Arc`).
    pub(crate) fn remove(&self, key: &BlockKey) {
        self.backend.remove(key);
    }

    /// Alias of [`Self::remove`] in RocksDB's vocabulary.
    #[cfg(test)]
    pub(crate) fn erase(&self, key: &BlockKey) {
        self.backend.remove(key);
    }

    /// Removes every block of `extent` (walks the whole cache; for freed extents whose cache id could
    /// be reused).
    #[cfg(test)]
    pub(crate) fn remove_extent(&self, extent: u64) {
        self.backend.remove_extent(extent);
    }

    /// Counters and occupancy.
    pub(crate) fn stats(&self) -> CacheStats {
        let mut s = CacheStats {
            evictions: 0,
            usage: self.backend.usage() as u64,
            capacity: self.backend.capacity() as u64,
            entries: self.backend.len() as u64,
            ..Default::default()
        };
        self.counters.fill(&mut s);
        s.evictions += self.backend.evictions();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn key(extent: u64, offset: u64) -> BlockKey {
        BlockKey { extent, offset }
    }

    #[test]
    fn shard_count_from_capacity() {
        assert_eq!(block_shards(0), 1);
        assert_eq!(block_shards(64 << 10), 1);
        assert_eq!(block_shards(1 << 20), 2);
        assert_eq!(block_shards(8 << 20), 16);
        assert_eq!(block_shards(512 << 20), MAX_SHARDS);
        for cap in [64usize << 10, 1 << 20, 3 << 20, 8 << 20, 100 << 20] {
            let b = QuickCacheBackend::<u32>::new(cap);
            assert_eq!(b.num_shards(), block_shards(cap), "cap {cap}");
            // A 16 KiB block must be admissible (quick_cache refuses > 97% of a shard).
            assert!(b.shard_capacity() * 97 / 100 >= 16 << 10, "cap {cap}");
        }
    }

    #[test]
    fn basic_get_insert_remove_and_counters() {
        let c = BlockCache::<Vec<u8>>::new(1 << 20);
        assert!(c.get(&key(1, 0)).is_none());
        c.insert(key(1, 0), Arc::new(vec![1; 100]), 100);
        c.insert(key(1, 4096), Arc::new(vec![2; 100]), 100);
        assert_eq!(c.get(&key(1, 0)).unwrap()[0], 1);
        assert_eq!(c.get(&key(1, 4096)).unwrap()[0], 2);
        assert!(c.contains(&key(1, 0)));
        assert!(!c.contains(&key(2, 0)));
        c.remove(&key(1, 0));
        assert!(!c.contains(&key(1, 0)));
        c.erase(&key(1, 4096));
        assert!(c.get(&key(1, 4096)).is_none());
        let s = c.stats();
        assert_eq!(s.hits, 2);
        assert_eq!(s.misses, 2);
        assert_eq!(s.inserts, 2);
        assert_eq!(s.usage, 0);
        assert_eq!(s.entries, 0);
        assert_eq!(s.capacity, 1 << 20);
    }

    #[test]
    fn small_cache_still_caches_16k_blocks() {
        let c = BlockCache::<Vec<u8>>::new(1 << 20);
        for i in 0..8 {
            c.insert(key(7, i * 16384), Arc::new(vec![0; 16384]), 16384);
        }
        for i in 0..8 {
            assert!(c.get(&key(7, i * 16384)).is_some(), "block {i} refused");
        }
        let tiny = BlockCache::<Vec<u8>>::new(64 << 10);
        tiny.insert(key(1, 0), Arc::new(vec![0; 16384]), 16384);
        assert!(tiny.get(&key(1, 0)).is_some());
    }

    #[test]
    fn capacity_respected_and_evictions_counted() {
        let cap = 1 << 20;
        let c = BlockCache::<Vec<u8>>::new(cap);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut max_charge = 0;
        for i in 0..2000u64 {
            let charge = rng.random_range(1000..20000usize);
            max_charge = max_charge.max(charge);
            c.insert(key(i % 13, i), Arc::new(Vec::new()), charge);
            let s = c.stats();
            assert!(s.usage as usize <= cap + max_charge, "usage {} at {i}", s.usage);
        }
        let s = c.stats();
        assert!(s.evictions > 0);
        assert!(s.entries > 10, "cache kept only {} entries", s.entries);
        assert!(s.usage as usize >= cap / 2, "usage {}", s.usage);
    }

    #[test]
    fn pinned_block_valid_after_eviction_and_removal() {
        let c = BlockCache::<Vec<u8>>::new(64 << 10);
        c.insert(key(1, 0), Arc::new(vec![0xAB; 16384]), 16384);
        let pinned = c.get(&key(1, 0)).unwrap();
        c.remove(&key(1, 0));
        // Flood the cache so everything else gets evicted too.
        for i in 1..100 {
            c.insert(key(2, i), Arc::new(vec![0; 8192]), 8192);
        }
        assert!(c.get(&key(1, 0)).is_none());
        assert!(pinned.iter().all(|&b| b == 0xAB));
        assert_eq!(Arc::strong_count(&pinned), 1);
    }

    #[test]
    fn replace_semantics() {
        let c = BlockCache::<u64>::new(1 << 20);
        // Old not cached: nothing happens.
        assert!(!c.replace(&key(1, 0), key(9, 0), Arc::new(9), 100));
        assert!(!c.contains(&key(9, 0)));
        // Old cached: new takes its place.
        c.insert(key(1, 0), Arc::new(1), 100);
        assert!(c.replace(&key(1, 0), key(9, 0), Arc::new(9), 120));
        assert!(!c.contains(&key(1, 0)));
        assert_eq!(*c.get(&key(9, 0)).unwrap(), 9);
        assert_eq!(c.stats().usage, 120);
        // Replacing onto the same key overwrites.
        assert!(c.replace(&key(9, 0), key(9, 0), Arc::new(10), 50));
        assert_eq!(*c.get(&key(9, 0)).unwrap(), 10);
        assert_eq!(c.stats().usage, 50);
    }

    #[test]
    fn remove_extent_drops_only_that_extent() {
        let c = BlockCache::<u64>::new(1 << 20);
        for e in 0..4 {
            for o in 0..10 {
                c.insert(key(e, o), Arc::new(e), 10);
            }
        }
        c.remove_extent(2);
        for e in 0..4 {
            for o in 0..10 {
                assert_eq!(c.contains(&key(e, o)), e != 2);
            }
        }
    }

    #[test]
    fn disabled_cache() {
        let c = BlockCache::<u64>::new(0);
        assert!(!c.enabled());
        c.insert(key(1, 0), Arc::new(1), 10);
        assert!(c.get(&key(1, 0)).is_none());
        assert!(!c.replace(&key(1, 0), key(2, 0), Arc::new(2), 10));
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.inserts, s.usage, s.capacity), (0, 1, 0, 0, 0));
    }

    #[test]
    fn zero_charge_is_still_evictable() {
        let c = BlockCache::<u64>::new(64 << 10);
        for i in 0..200_000u64 {
            c.insert(key(0, i), Arc::new(i), 0);
        }
        let s = c.stats();
        assert!(s.entries <= 64 << 10, "entries {}", s.entries);
    }

    #[test]
    fn concurrent_readers_and_writers() {
        let c = Arc::new(BlockCache::<(u64, u64)>::new(2 << 20));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                    for _ in 0..20_000 {
                        let k = key(rng.random_range(0..8), rng.random_range(0..512));
                        match c.get(&k) {
                            Some(v) => assert_eq!(*v, (k.extent, k.offset)),
                            None => c.insert(k, Arc::new((k.extent, k.offset)), 4096),
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let s = c.stats();
        assert_eq!(s.hits + s.misses, 80_000);
        assert!(s.usage <= (2 << 20) + 4096);
    }
}
