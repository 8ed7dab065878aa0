//! Pointer swizzling of cached blocks (seed 001; `Options::block_swizzling`): reads through an
//! open extent's weak reference to a cached block return what the block cache would, count as
//! block cache hits, skip the lookup, and stop working once the block is evicted (the memory
//! is not kept: the next read misses and reads the block again).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use riptide::{Db, Options};

const KEYS: u64 = 20_000;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let mut v = format!("value-of-{i}-").into_bytes();
    v.resize(200, b'a' + (i % 26) as u8);
    v
}

/// Loads `KEYS` rows into a flushed table, then reads every key `passes` times in a random
/// order, checking each value; returns the database's cache counters.
fn read_back(swizzling: bool, block_cache_size: usize, passes: usize) -> riptide::CacheCounters {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            block_swizzling: swizzling,
            block_cache_size,
            partial_block_reads: false,
            ..Default::default()
        },
    )
    .unwrap();
    let t = db.default_table();
    for i in 0..KEYS {
        t.put(&key(i), &value(i)).unwrap();
    }
    db.flush().unwrap();
    let mut order: Vec<u64> = (0..KEYS).collect();
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..passes {
        order.shuffle(&mut rng);
        for &i in &order {
            assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)), "key {i}");
        }
    }
    let caches = db.stats().caches;
    db.close().unwrap();
    caches
}

#[test]
fn reads_of_cached_blocks_skip_the_lookup_and_count_as_hits() {
    let on = read_back(true, 64 << 20, 3);
    let off = read_back(false, 64 << 20, 3);
    // Every block fits: after the first read of a block, every read of it is swizzled.
    assert!(on.swizzled_block_hits > 0, "{on:?}");
    assert_eq!(off.swizzled_block_hits, 0, "{off:?}");
    // Same reads, same hits and misses: a swizzled hit is a block cache hit.
    assert_eq!(
        on.block_cache.hits + on.block_cache.misses,
        off.block_cache.hits + off.block_cache.misses
    );
    assert_eq!(on.block_cache.misses, off.block_cache.misses);
    assert!(on.swizzled_block_hits <= on.block_cache.hits);
}

#[test]
fn an_evicted_block_is_read_again_not_served_from_its_reference() {
    // About 4.4 MB of blocks through a 256 KiB cache: blocks are evicted all the time.
    let small = read_back(true, 256 << 10, 2);
    assert!(small.block_cache.evictions > 0, "{small:?}");
    assert!(
        small.block_cache.usage <= small.block_cache.capacity + (16 << 10),
        "{small:?}"
    );
    // Most reads miss: a reference that outlived its block's eviction would have answered
    // them instead. (With the whole table cached, almost every read is a hit; see above.)
    assert!(small.block_cache.misses > small.block_cache.hits, "{small:?}");
    let big = read_back(true, 64 << 20, 2);
    assert!(
        big.block_cache.misses < small.block_cache.misses / 4,
        "{big:?} vs {small:?}"
    );
}
