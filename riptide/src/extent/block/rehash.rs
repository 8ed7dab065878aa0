//! Hash indexes rebuilt in memory. Extents of zstd levels store their data blocks without the
//! hash index (about 4 bytes per key that compress poorly) and without region checksums (a
//! compressed block is always read whole, so they would serve nothing). A decoded block of such
//! an extent (properties tag 19, `docs/format.md`) carries a [`LazyIndex`]: its first point
//! lookups binary-search, and once it has served [`BUILD_AFTER_LOOKUPS`] of them (it stays in
//! the block cache and is hot) the index is built beside it, so a hot cached block answers
//! point lookups as one stored with its index does, while a block read once (a cache miss) costs
//! no more than before.
//!
//! Invariants:
//! - The built buckets are byte for byte what [`super::BlockBuilder`] stores for the same
//!   entries and restart points.
//! - A block with a stored hash index, region checksums, or more restart points than a hash
//!   index can name gets no lazy index; a block whose entries do not decode gets none either
//!   (its lookups binary-search, and the iterator reports the damage).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::builder::{hash_buckets, num_buckets};
use super::iter::decode_entry;
use super::{BlockLayout, HASH_INDEX_FLAG, MAX_HASHED_RESTARTS, REGION_CRC_FLAG};
use crate::coding::get_u32;
use crate::extent::filter::filter_hash;

/// Point lookups a block serves by binary search before its index is built (a build costs
/// about as much as decompressing a third of the block; a lookup saved, a fraction of that).
pub(super) const BUILD_AFTER_LOOKUPS: u32 = 8;

/// A hash index built on demand for a block stored without one.
#[derive(Debug, Default)]
pub(super) struct LazyIndex {
    lookups: AtomicU32,
    buckets: OnceLock<Option<Box<[u8]>>>,
    /// Bytes the built buckets take (from the block's user-key count), charged to the cache
    /// from the start.
    charge: usize,
}

impl LazyIndex {
    /// A lazy index for decoded block `data` with `layout` and `users` distinct user keys, if
    /// it is one that can have one.
    pub(super) fn for_block(data: &[u8], layout: &BlockLayout, users: usize) -> Option<Box<LazyIndex>> {
        let footer = get_u32(data, data.len().checked_sub(4)?)?;
        let eligible = footer & (HASH_INDEX_FLAG | REGION_CRC_FLAG) == 0 && layout.num_restarts <= MAX_HASHED_RESTARTS;
        eligible.then(|| {
            Box::new(LazyIndex {
                charge: num_buckets(users) + std::mem::size_of::<LazyIndex>(),
                ..Default::default()
            })
        })
    }

    /// Bytes to charge for it in a cache, built or not.
    pub(super) fn charge(&self) -> usize {
        self.charge
    }

    /// The buckets, once built; counts the lookup and builds them with `build` when it is
    /// due. `None`: binary-search this time.
    #[inline]
    pub(super) fn buckets(&self, build: impl FnOnce() -> Option<Box<[u8]>>) -> Option<&[u8]> {
        if let Some(b) = self.buckets.get() {
            return b.as_deref();
        }
        if self.lookups.fetch_add(1, Ordering::Relaxed) + 1 < BUILD_AFTER_LOOKUPS {
            return None;
        }
        self.buckets.get_or_init(build).as_deref()
    }
}

/// The hash index buckets of decoded block `data`, as the builder would have stored them;
/// `None` if an entry does not decode.
pub(super) fn build_buckets(data: &[u8], layout: &BlockLayout) -> Option<Box<[u8]>> {
    let restarts: Vec<usize> = (0..layout.num_restarts)
        .map(|i| get_u32(data, layout.restarts_offset + 4 * i).map(|r| r as usize))
        .collect::<Option<_>>()?;
    // (user-key hash, restart region of the key's first entry), as the builder records them.
    let mut hashed: Vec<(u64, u8)> = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut prev_user: Option<Vec<u8>> = None;
    let (mut p, mut region) = (0, 0);
    while p < layout.entries_end {
        let (shared, non_shared, value_len, key_start) = decode_entry(data, p, layout.entries_end)?;
        while region + 1 < restarts.len() && restarts[region + 1] <= p {
            region += 1;
        }
        if shared > key.len() {
            return None;
        }
        key.truncate(shared);
        key.extend_from_slice(data.get(key_start..key_start + non_shared)?);
        let user = &key[..key.len().checked_sub(8)?];
        // Whole user keys compared: a restart entry shares nothing with its predecessor even
        // when both are versions of one user key.
        if prev_user.as_deref() != Some(user) {
            hashed.push((filter_hash(user), region as u8));
            let prev = prev_user.get_or_insert_with(Vec::new);
            prev.clear();
            prev.extend_from_slice(user);
        }
        p = key_start + non_shared + value_len;
    }
    Some(hash_buckets(&hashed).into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent::block::BlockBuilder;
    use crate::key::{encode_internal_key, ValueKind};
    use rand::{Rng, SeedableRng};
    use std::path::Path;

    /// Sorted internal keys: user keys of varied lengths sharing prefixes, some with several
    /// versions.
    fn entries(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut users: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = rng.random_range(1..12);
                (0..len).map(|_| b"abc"[rng.random_range(0..3)]).collect()
            })
            .collect();
        users.sort();
        users.dedup();
        let mut out = Vec::new();
        let mut lsn = 1_000_000u64;
        for u in users {
            for _ in 0..rng.random_range(1..4) {
                let mut k = Vec::new();
                encode_internal_key(&mut k, &u, lsn, ValueKind::Put);
                lsn -= 1;
                out.push((k, vec![b'v'; rng.random_range(0..20)]));
            }
        }
        out
    }

    fn block(entries: &[(Vec<u8>, Vec<u8>)], interval: usize, hash_index: bool) -> Vec<u8> {
        let mut b = BlockBuilder::with_hash_index(interval, hash_index);
        b.region_crcs = false;
        let mut prev: &[u8] = &[];
        for (k, v) in entries {
            b.add(prev, k, v);
            prev = k;
        }
        b.finish().to_vec()
    }

    fn layout(b: &[u8]) -> BlockLayout {
        BlockLayout::of(b, Path::new("x"), 0).unwrap()
    }

    #[test]
    fn built_buckets_equal_the_ones_the_builder_stores() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for round in 0..200 {
            let e = entries(&mut rng, [1, 2, 5, 40, 300][round % 5]);
            let interval = [1, 2, 4, 16][round % 4];
            let with = block(&e, interval, true);
            let without = block(&e, interval, false);
            let lazy = LazyIndex::for_block(&without, &layout(&without), e.len());
            if footer_of(&with) & HASH_INDEX_FLAG == 0 {
                // Too many restart points for an index: none, lazy or stored.
                assert!(lazy.is_none(), "round {round}");
                continue;
            }
            let lazy = lazy.expect("an eligible block");
            let l = layout(&without);
            for _ in 1..BUILD_AFTER_LOOKUPS {
                assert!(lazy.buckets(|| build_buckets(&without, &l)).is_none());
            }
            let built = lazy
                .buckets(|| build_buckets(&without, &l))
                .expect("built at the due lookup")
                .to_vec();
            let lw = layout(&with);
            assert_eq!(
                &built[..],
                &with[lw.buckets.0..lw.buckets.0 + lw.buckets.1],
                "round {round}"
            );
            // A block with a stored index gets no lazy one.
            assert!(LazyIndex::for_block(&with, &lw, e.len()).is_none());
        }
    }

    #[test]
    fn point_lookups_find_the_same_rows_before_and_after_the_build() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let e = entries(&mut rng, 200);
        let data = block(&e, 16, false);
        let b = std::sync::Arc::new(
            crate::extent::Block::new_lazy_index(data, std::sync::Arc::from(Path::new("x")), 0, e.len() as u32)
                .unwrap(),
        );
        for round in 0..3 {
            for (k, v) in &e {
                let mut it = crate::extent::BlockIter::new(b.clone());
                it.seek_point(k);
                assert!(it.valid(), "round {round}");
                assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
            }
            // Absent keys: an empty bucket or a binary search both find nothing equal.
            let mut absent = Vec::new();
            encode_internal_key(&mut absent, b"zzzzzzzzzzzzzz", 5, ValueKind::Put);
            let mut it = crate::extent::BlockIter::new(b.clone());
            it.seek_point(&absent);
            assert!(!it.valid() || it.key() != &absent[..]);
        }
    }

    fn footer_of(b: &[u8]) -> u32 {
        get_u32(b, b.len() - 4).unwrap()
    }

    #[test]
    fn damaged_blocks_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let e = entries(&mut rng, 60);
        let good = block(&e, 4, false);
        let mut damaged: Vec<Vec<u8>> = Vec::new();
        for i in 0..good.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= flip;
                damaged.push(bad);
            }
        }
        damaged.extend((0..good.len()).map(|n| good[..n].to_vec()));
        for bad in damaged {
            if let Ok(l) = BlockLayout::of(&bad, Path::new("x"), 0) {
                let _ = build_buckets(&bad, &l);
            }
        }
    }
}
