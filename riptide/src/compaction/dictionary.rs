//! The zstd dictionary of a compaction's output: the sub-table's own, found in its extents or
//! trained on sampled blocks of the compaction's inputs (`extent::dictionary::train`).
//!
//! Invariants:
//! - A sub-table compresses with one dictionary for as long as it is open
//!   (`TableInner::dictionary`), so blocks move verbatim between its extents; after a reopen it
//!   takes the dictionary back from an extent of the output level before it trains anew.
//! - Choosing reads blocks through the readers only (no block cache traffic) and never fails a
//!   compaction for the dictionary's sake: a sample that cannot be read is skipped.

use std::path::Path;
use std::sync::Arc;

use super::job::Plan;
use crate::extent::dictionary::{train, BlockDict, DictChoice, Trained};
use crate::extent::{Block, BlockBuilder, BlockIter, Compression, ExtentOptions};
use crate::extent_store::ExtentStore;
use crate::key::{decode_internal_key, encode_internal_key};
use crate::subtable::TableInner;
use crate::version::LevelSet;

/// Output-level extents looked at for an existing dictionary before training.
const EXTENTS_SEARCHED: usize = 16;
/// Sample bytes read from the inputs per dictionary byte: half trains, half judges.
const SAMPLE_BYTES_PER_DICT_BYTE: usize = 200;

/// The dictionary a compaction of `t` into a level built with `opts` compresses with, given
/// `max_bytes` (0 = none) and the compaction's `plan` over `levels`.
pub(crate) fn choose(
    store: &ExtentStore,
    t: &TableInner,
    levels: &LevelSet,
    plan: &Plan,
    opts: &ExtentOptions,
    max_bytes: usize,
) -> Option<Arc<BlockDict>> {
    if max_bytes == 0 || opts.compression != Compression::Zstd {
        return None;
    }
    let level = opts.compression_level;
    let mut choice = t.dictionary.lock();
    match &*choice {
        DictChoice::Use(d) => return Some(d.clone()),
        DictChoice::Declined { .. } => return None,
        DictChoice::Undecided => {}
    }
    if let Some(d) = existing(store, levels, usize::from(plan.out_level)) {
        *choice = DictChoice::Use(d.clone());
        return Some(d);
    }
    let mut samples = sample_blocks(store, plan, max_bytes * SAMPLE_BYTES_PER_DICT_BYTE, opts.block_size);
    if plan.zeroes_lsns() {
        // The output's rows will mostly carry LSN 0: train and judge on blocks like those.
        samples = samples.iter().filter_map(|b| with_lsns_zeroed(b, opts)).collect();
    }
    let slices: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
    match train(&slices, max_bytes, level) {
        Trained::Dict(d) => {
            let d = Arc::new(d);
            *choice = DictChoice::Use(d.clone());
            Some(d)
        }
        Trained::NotWorthIt { plain, with_dict } => {
            *choice = DictChoice::Declined { plain, with_dict };
            None
        }
        Trained::TooFewSamples => None,
    }
}

/// The dictionary of one of the first extents of output level `out_level`, if one has any.
fn existing(store: &ExtentStore, levels: &LevelSet, out_level: usize) -> Option<Arc<BlockDict>> {
    let layer = match out_level {
        0 => return None,
        n => levels.sorted.get(n - 1)?,
    };
    layer
        .extents
        .iter()
        .take(EXTENTS_SEARCHED)
        .find_map(|e| store.open(e).ok()?.reader.dictionary().cloned())
}

/// `block` re-encoded with every LSN 0 (kinds kept), as a bottom-level merge writes rows older
/// than every snapshot; `None` if it does not decode.
fn with_lsns_zeroed(block: &[u8], opts: &ExtentOptions) -> Option<Vec<u8>> {
    let decoded = Block::new(block.to_vec(), Arc::from(Path::new("sample")), 0).ok()?;
    let mut it = BlockIter::new(Arc::new(decoded));
    it.seek_to_first();
    let mut out = BlockBuilder::with_hash_index(opts.restart_interval, opts.hash_index);
    let (mut prev, mut key) = (Vec::new(), Vec::new());
    while it.valid() {
        let (user, _, kind) = decode_internal_key(it.key())?;
        key.clear();
        encode_internal_key(&mut key, user, 0, kind);
        // Versions of one user key collapse to one row once their LSNs are equal.
        if key != prev {
            out.add(&prev, &key, it.value());
            std::mem::swap(&mut prev, &mut key);
        }
        it.next();
    }
    it.status().ok()?;
    (!out.is_empty()).then(|| out.finish().to_vec())
}

/// Decoded data blocks (of about `block_size` bytes each) spread evenly over the plan's
/// inputs, about `budget` bytes in all.
fn sample_blocks(store: &ExtentStore, plan: &Plan, budget: usize, block_size: usize) -> Vec<Vec<u8>> {
    let inputs: Vec<_> = plan.runs.iter().flat_map(|r| r.extents.iter()).collect();
    let blocks: u64 = inputs.iter().map(|e| u64::from(e.meta.blocks)).sum();
    if blocks == 0 {
        return Vec::new();
    }
    // Every `stride`-th block of the inputs, taken in order.
    let wanted = (budget / block_size.max(1)).max(1) as u64;
    let stride = (blocks / wanted).max(1);
    let mut out = Vec::new();
    let mut taken = 0usize;
    let mut n = 0u64;
    for e in inputs {
        let Ok(open) = store.open(e) else { continue };
        for i in 0..open.reader.index().len() {
            n += 1;
            if !n.is_multiple_of(stride) {
                continue;
            }
            if let Ok(b) = open.reader.read_block(open.file.as_ref(), i) {
                taken += b.data().len();
                out.push(b.data().to_vec());
            }
            if taken >= budget {
                return out;
            }
        }
    }
    out
}
