//! Table cache: open extent readers keyed by extent id, capacity in entries.
//!
//! Invariants:
//! - Readers are `Arc<R>`: one handed out stays usable after eviction or [`TableCache::remove`].
//! - Concurrent misses on one id run the opener once: the first caller opens while the others wait for
//!   its result (quick_cache's placeholder). If the opener fails, the error goes to that caller only and
//!   one of the waiters tries again.
//! - [`TableCache::remove`] also cancels an open in progress (the opener's reader is returned to its
//!   caller but not cached), so after `remove(id)` returns, no reader opened before it stays cached.
//!   The caller frees an extent only when no version references it, so no new open can start after.

use super::block::EvictCounter;
use super::{CacheStats, Counters, FastBuildHasher};
use quick_cache::sync::{Cache, GuardResult};
use quick_cache::{OptionsBuilder, UnitWeighter};
use std::sync::Arc;

/// Shards requested from quick_cache (it lowers the count so each shard expects >= 32 entries).
const TABLE_SHARDS: usize = 64;

type QuickTables<R> = Cache<u64, Arc<R>, UnitWeighter, FastBuildHasher, EvictCounter<u64, Arc<R>>>;

/// Cache of open extent readers.
pub(crate) struct TableCache<R> {
    cache: Option<QuickTables<R>>,
    lifecycle: EvictCounter<u64, Arc<R>>,
    capacity: usize,
    counters: Counters,
}

impl<R: Send + Sync + 'static> TableCache<R> {
    /// A cache of up to `capacity` open readers; 0 disables it (every lookup opens).
    pub(crate) fn new(capacity: usize) -> Self {
        let lifecycle = EvictCounter::new();
        let cache = (capacity > 0).then(|| {
            let opts = OptionsBuilder::new()
                .shards(TABLE_SHARDS)
                .estimated_items_capacity(capacity)
                .weight_capacity(capacity as u64)
                .build()
                .expect("all options set");
            Cache::with_options(opts, UnitWeighter, FastBuildHasher::new(), lifecycle.clone())
        });
        Self {
            cache,
            lifecycle,
            capacity,
            counters: Counters::default(),
        }
    }

    /// The cached reader for `id`, if any.
    #[cfg(test)]
    pub(crate) fn get(&self, id: u64) -> Option<Arc<R>> {
        let r = self.cache.as_ref().and_then(|c| c.get(&id));
        if r.is_some() {
            self.counters.hit();
        } else {
            self.counters.miss();
        }
        r
    }

    /// Caches `reader` under `id` (overwriting).
    #[cfg(test)]
    pub(crate) fn insert(&self, id: u64, reader: Arc<R>) {
        if let Some(c) = &self.cache {
            self.counters.insert();
            c.insert(id, reader);
        }
    }

    /// The reader for `id`, opening it with `open` on a miss. Concurrent misses on the same id call
    /// `open` once; the others wait and share its reader.
    pub(crate) fn get_or_try_insert_with<E>(
        &self,
        id: u64,
        open: impl FnOnce() -> Result<Arc<R>, E>,
    ) -> Result<Arc<R>, E> {
        let Some(c) = &self.cache else {
            self.counters.miss();
            return open();
        };
        match c.get_value_or_guard(&id, None) {
            GuardResult::Value(v) => {
                self.counters.hit();
                Ok(v)
            }
            GuardResult::Guard(g) => {
                self.counters.miss();
                let r = open()?;
                if g.insert(r.clone()).is_ok() {
                    self.counters.insert();
                }
                Ok(r)
            }
            // Unreachable without a timeout; open without caching rather than panic.
            GuardResult::Timeout => {
                self.counters.miss();
                open()
            }
        }
    }

    /// Drops the reader for `id` (called when the extent is freed).
    pub(crate) fn remove(&self, id: u64) {
        if let Some(c) = &self.cache {
            c.remove(&id);
        }
    }

    /// Counters and occupancy (usage and capacity in entries).
    pub(crate) fn stats(&self) -> CacheStats {
        let len = self.cache.as_ref().map_or(0, |c| c.len()) as u64;
        let mut s = CacheStats {
            usage: len,
            entries: len,
            capacity: self.capacity as u64,
            evictions: self.lifecycle.get(),
            ..Default::default()
        };
        self.counters.fill(&mut s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn opens_once_and_caches() {
        let c = TableCache::<u64>::new(10);
        let opens = AtomicUsize::new(0);
        for _ in 0..5 {
            let r = c
                .get_or_try_insert_with::<()>(7, || {
                    opens.fetch_add(1, Ordering::SeqCst);
                    Ok(Arc::new(70))
                })
                .unwrap();
            assert_eq!(*r, 70);
        }
        assert_eq!(opens.load(Ordering::SeqCst), 1);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.inserts, s.entries), (4, 1, 1, 1));
        c.remove(7);
        assert!(c.get(7).is_none());
    }

    #[test]
    fn errors_are_not_cached() {
        let c = TableCache::<u64>::new(10);
        assert_eq!(c.get_or_try_insert_with(1, || Err("boom")), Err("boom"));
        assert!(c.get(1).is_none());
        assert_eq!(*c.get_or_try_insert_with::<&str>(1, || Ok(Arc::new(1))).unwrap(), 1);
    }

    #[test]
    fn concurrent_misses_open_once() {
        let c = Arc::new(TableCache::<u64>::new(100));
        let opens = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(8));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (c, opens, barrier) = (c.clone(), opens.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for id in 0..50u64 {
                        let r = c
                            .get_or_try_insert_with::<()>(id, || {
                                opens.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_micros(200));
                                Ok(Arc::new(id * 10))
                            })
                            .unwrap();
                        assert_eq!(*r, id * 10);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(opens.load(Ordering::SeqCst), 50);
    }

    #[test]
    fn capacity_in_entries_and_pinning() {
        let c = TableCache::<u64>::new(64);
        let first = c.get_or_try_insert_with::<()>(0, || Ok(Arc::new(0))).unwrap();
        for id in 1..1000u64 {
            c.insert(id, Arc::new(id));
        }
        let s = c.stats();
        assert!(s.entries <= 64 + 1, "entries {}", s.entries);
        assert!(s.evictions > 0);
        assert_eq!(*first, 0);
    }

    #[test]
    fn remove_during_open_is_not_cached() {
        let c = TableCache::<u64>::new(10);
        let r = c
            .get_or_try_insert_with::<()>(3, || {
                c.remove(3);
                Ok(Arc::new(3))
            })
            .unwrap();
        assert_eq!(*r, 3);
        assert!(c.get(3).is_none());
    }

    #[test]
    fn disabled_cache_always_opens() {
        let c = TableCache::<u64>::new(0);
        let opens = AtomicUsize::new(0);
        for _ in 0..3 {
            c.get_or_try_insert_with::<()>(1, || {
                opens.fetch_add(1, Ordering::SeqCst);
                Ok(Arc::new(1))
            })
            .unwrap();
        }
        c.insert(1, Arc::new(1));
        assert!(c.get(1).is_none());
        assert_eq!(opens.load(Ordering::SeqCst), 3);
    }
}
