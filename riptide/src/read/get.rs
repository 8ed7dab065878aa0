//! Point lookups in the levels: L0 layers newest first, then L1, then L2.
//!
//! Per layer: a binary search over the extents' largest keys picks the one candidate extent,
//! its user-key range may rule it out, then the block index picks the one block and the bloom
//! filter (that block's, in format 3 extents) may rule it out; the block is read through the
//! block cache (or, when the cache is full, often only the block's
//! tail and the key's restart region: [`ExtentStore::point_block`]). The first layer holding a
//! version of the key visible at the snapshot decides (newer layers hold newer versions).

use crate::error::{Error, Result};
use crate::extent::{filter_hash, BlockIter, PointRead};
use crate::extent_store::ExtentStore;
use crate::key::{decode_internal_key, Lsn, ValueKind};
use crate::version::LevelSet;

/// Layers whose bloom filter line a lookup prefetches before walking them.
const PREFETCH_LAYERS: usize = 8;

/// The internal key that sorts just before every version of `user_key` with LSN <= `snapshot`.
pub(crate) fn seek_key(out: &mut Vec<u8>, user_key: &[u8], snapshot: Lsn) {
    out.clear();
    out.extend_from_slice(user_key);
    out.extend_from_slice(&((snapshot << 8) | 0xff).to_le_bytes());
}

/// The newest version of `user_key` with LSN <= `snapshot` in `levels`, if any, handed to
/// `found` as (LSN, kind, value) while its block is pinned.
pub(crate) fn get_from_levels<R>(
    store: &ExtentStore,
    levels: &LevelSet,
    user_key: &[u8],
    snapshot: Lsn,
    found: impl FnOnce(Lsn, ValueKind, &[u8]) -> R,
) -> Result<Option<R>> {
    let mut found = Some(found);
    // The seek key lives on the stack for keys up to 120 bytes (no allocation per lookup).
    let mut stack = [0u8; 128];
    let heap: Vec<u8>;
    let n = user_key.len() + 8;
    let seek: &[u8] = if n <= stack.len() {
        stack[..user_key.len()].copy_from_slice(user_key);
        stack[user_key.len()..n].copy_from_slice(&((snapshot << 8) | 0xff).to_le_bytes());
        &stack[..n]
    } else {
        let mut v = Vec::with_capacity(n);
        seek_key(&mut v, user_key, snapshot);
        heap = v;
        &heap
    };
    // One hash serves every bloom filter and every block's hash index.
    let hash = filter_hash(user_key);
    // Start loading the filter line of the first few layers' candidate blocks at once, so
    // their cache misses overlap instead of queueing one layer after the other. Only extents
    // already open (no I/O here); the walk below does the real work in order and reuses the
    // (extent, block) found here.
    let mut candidates = [(None, None); PREFETCH_LAYERS];
    for (layer, c) in levels.layers().zip(candidates.iter_mut()) {
        c.0 = layer.find(seek);
        if let Some(i) = c.0 {
            // An extent the walk will skip by its key range gets no index search here.
            if !layer.extents[i].user_range_contains(user_key) {
                continue;
            }
            if let Some(open) = store.open_if_ready(&layer.extents[i]) {
                c.1 = open.reader.find_block(seek);
                if let Some(b) = c.1 {
                    open.reader.prefetch_filter(b, hash);
                }
            }
        }
    }
    for (n, layer) in levels.layers().enumerate() {
        let (candidate, block) = match candidates.get(n) {
            Some(&c) => c,
            None => (layer.find(seek), None),
        };
        let Some(i) = candidate else {
            continue;
        };
        let extent = &layer.extents[i];
        if !extent.user_range_contains(user_key) || extent.meta.min_lsn > snapshot {
            continue;
        }
        let open = store.open(extent)?;
        let Some(b) = block.or_else(|| open.reader.find_block(seek)) else {
            continue;
        };
        if !open.reader.block_may_contain(b, hash) {
            continue;
        }
        let partial = store.point_block(extent, open, b, seek, hash, |read, scratch| match read {
            PointRead::Found => match decode_internal_key(scratch.key()) {
                Some((uk, lsn, kind)) if uk == user_key => Ok(Some((lsn, kind, scratch.value()))),
                Some(_) => Ok(None),
                // The block's file offset only for the error: looking it up costs the lookup a
                // cache miss (an index entry) on every block it visits.
                None => Err(Error::corruption(
                    open.reader.path(),
                    open.reader.block_file_offset(b).unwrap_or(0),
                    "malformed internal key in a verified restart region",
                )),
            }
            .map(|hit| hit.map(|(lsn, kind, value)| found.take().map(|f| f(lsn, kind, value)))),
            _ => Ok(None),
        })?;
        let block = match partial {
            Ok(None) => continue,
            Ok(Some(r)) => return Ok(r),
            Err(block) => block,
        };
        let mut it = BlockIter::new(block);
        it.seek_point_hashed(seek, hash);
        it.status()?;
        if !it.valid() {
            continue;
        }
        let Some((uk, lsn, kind)) = decode_internal_key(it.key()) else {
            return Err(Error::corruption(
                open.reader.path(),
                it.block().offset(),
                "malformed internal key in a block whose checksum matches",
            ));
        };
        if uk == user_key {
            return Ok(found.take().map(|f| f(lsn, kind, it.value())));
        }
    }
    Ok(None)
}
