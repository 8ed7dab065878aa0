//! Hash indexes rebuilt on read. Extents of zstd levels store their data blocks without the
//! hash index (about 4 bytes per key that compress poorly) and without region checksums (a
//! compressed block is always read whole, so they would serve nothing); the reader rebuilds
//! the index once a block is decoded, before the block cache keeps it, so a cached block
//! answers point lookups exactly as one stored with its index (properties tag 19,
//! `docs/format.md`).
//!
//! Invariants:
//! - The rebuilt block is byte for byte what [`super::BlockBuilder`] writes with a hash index
//!   and without region checksums for the same entries and restart points.
//! - A block that already has a hash index or region checksums, or more restart points than a
//!   hash index can name, is returned unchanged; a malformed one is a corruption error, never a
//!   panic.

use std::path::Path;

use super::builder::hash_buckets;
use super::iter::decode_entry;
use super::{BlockLayout, HASH_INDEX_FLAG, MAX_HASHED_RESTARTS, REGION_CRC_FLAG};
use crate::coding::get_u32;
use crate::error::{Error, Result};
use crate::extent::filter::filter_hash;

/// `data` (decoded block contents) with a hash index, as described in the module docs. Errors
/// name `path` and `offset` (the stored block's absolute offset).
pub(crate) fn with_hash_index(data: Vec<u8>, path: &Path, offset: u64) -> Result<Vec<u8>> {
    let layout = BlockLayout::of(&data, path, offset)?;
    let footer = get_u32(&data, data.len() - 4).unwrap_or(0);
    if footer & (HASH_INDEX_FLAG | REGION_CRC_FLAG) != 0 || layout.num_restarts > MAX_HASHED_RESTARTS {
        return Ok(data);
    }
    let bad = |why: String| Error::corruption(path, offset, why);
    let restarts: Vec<usize> = (0..layout.num_restarts)
        .map(|i| get_u32(&data, layout.restarts_offset + 4 * i).unwrap_or(0) as usize)
        .collect();
    // (user-key hash, restart region of the key's first entry), as the builder records them.
    let mut hashed: Vec<(u64, u8)> = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut prev_user: Option<Vec<u8>> = None;
    let (mut p, mut region) = (0, 0);
    while p < layout.entries_end {
        let (shared, non_shared, value_len, key_start) = decode_entry(&data, p, layout.entries_end)
            .ok_or_else(|| bad(format!("malformed entry at block offset {p}")))?;
        while region + 1 < restarts.len() && restarts[region + 1] <= p {
            region += 1;
        }
        if shared > key.len() {
            return Err(bad(format!(
                "entry at block offset {p} shares more than its previous key"
            )));
        }
        key.truncate(shared);
        key.extend_from_slice(&data[key_start..key_start + non_shared]);
        let Some(user_len) = key.len().checked_sub(8) else {
            return Err(bad(format!("entry at block offset {p} is not an internal key")));
        };
        // Whole user keys compared: a restart entry shares nothing with its predecessor even
        // when both are versions of one user key.
        let user = &key[..user_len];
        if prev_user.as_deref() != Some(user) {
            hashed.push((filter_hash(user), region as u8));
            let prev = prev_user.get_or_insert_with(Vec::new);
            prev.clear();
            prev.extend_from_slice(user);
        }
        p = key_start + non_shared + value_len;
    }
    let buckets = hash_buckets(&hashed);
    let mut out = Vec::with_capacity(data.len() + buckets.len() + 2);
    out.extend_from_slice(&data[..layout.entries_end]);
    out.extend_from_slice(&buckets);
    out.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
    out.extend_from_slice(&data[layout.restarts_offset..layout.restarts_offset + 4 * layout.num_restarts]);
    out.extend_from_slice(&(footer | HASH_INDEX_FLAG).to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent::block::BlockBuilder;
    use crate::key::{encode_internal_key, ValueKind};
    use rand::{Rng, SeedableRng};

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

    #[test]
    fn a_rebuilt_index_equals_the_one_the_builder_writes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for round in 0..200 {
            let e = entries(&mut rng, [1, 2, 5, 40, 300][round % 5]);
            let interval = [1, 2, 4, 16][round % 4];
            let with = block(&e, interval, true);
            let without = block(&e, interval, false);
            let rebuilt = with_hash_index(without.clone(), Path::new("x"), 0).unwrap();
            if footer_of(&with) & HASH_INDEX_FLAG == 0 {
                // Too many restart points for an index: nothing to rebuild.
                assert_eq!(rebuilt, without);
            } else {
                assert_eq!(rebuilt, with, "round {round}");
            }
            // A block that has its index already is returned as it is.
            assert_eq!(with_hash_index(with.clone(), Path::new("x"), 0).unwrap(), with);
        }
    }

    fn footer_of(b: &[u8]) -> u32 {
        get_u32(b, b.len() - 4).unwrap()
    }

    #[test]
    fn damaged_blocks_are_errors_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let e = entries(&mut rng, 60);
        let good = block(&e, 4, false);
        for i in 0..good.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= flip;
                let _ = with_hash_index(bad, Path::new("x"), 0);
            }
        }
        for n in 0..good.len() {
            let _ = with_hash_index(good[..n].to_vec(), Path::new("x"), 0);
        }
    }
}
