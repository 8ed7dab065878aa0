//! The zstd dictionary of a compaction's output: the sub-table's own, found in its extents or
//! trained on sampled blocks of the compaction's inputs (`extent::dictionary::train`).
//!
//! Invariants:
//! - A sub-table compresses with one dictionary for as long as it is open
//!   (`TableInner::dictionary`), so blocks move verbatim between its extents; after a reopen it
//!   takes the dictionary back from an extent of the output level before it trains anew.
//! - Choosing reads blocks through the readers only (no block cache traffic) and never fails a
//!   compaction for the dictionary's sake: a sample that cannot be read is skipped.

use std::sync::Arc;

use super::job::Plan;
use crate::extent::dictionary::{as_zstd_block, train, BlockDict, DictChoice, Trained};
use crate::extent::{Compression, ExtentOptions};
use crate::extent_store::ExtentStore;
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
    match &*t.dictionary.lock() {
        DictChoice::Use(d) => return Some(d.clone()),
        DictChoice::Declined { .. } => return None,
        DictChoice::Undecided => {}
    }
    // Decided without the lock held (readers of the table's stats take it; the table's
    // compaction lock already keeps other compactions of the table out).
    let decided = decide(store, levels, plan, opts, level, max_bytes)?;
    let mut choice = t.dictionary.lock();
    *choice = decided;
    match &*choice {
        DictChoice::Use(d) => Some(d.clone()),
        _ => None,
    }
}

/// A dictionary found in the output level's extents, or trained and judged on the plan's
/// inputs; `None` when the samples are too few to judge.
fn decide(
    store: &ExtentStore,
    levels: &LevelSet,
    plan: &Plan,
    opts: &ExtentOptions,
    level: i32,
    max_bytes: usize,
) -> Option<DictChoice> {
    if let Some(d) = existing(store, levels, plan) {
        return Some(DictChoice::Use(d));
    }
    // Train and judge on blocks as the output will store them: re-encoded as zstd blocks are
    // (no hash index, no region checksums) and, into the bottom level, with LSN 0.
    let samples: Vec<Vec<u8>> = sample_blocks(store, plan, max_bytes * SAMPLE_BYTES_PER_DICT_BYTE, opts.block_size)
        .iter()
        .filter_map(|b| as_zstd_block(b, opts.restart_interval, plan.zeroes_lsns()))
        .collect();
    let slices: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
    match train(&slices, max_bytes, level) {
        Trained::Dict(d) => Some(DictChoice::Use(Arc::new(d))),
        Trained::NotWorthIt { plain, with_dict } => Some(DictChoice::Declined { plain, with_dict }),
        Trained::TooFewSamples => None,
    }
}

/// The dictionary of an extent of the output level: first among the plan's own inputs from
/// that level (the extents compactions wrote most recently), then among the level's first
/// extents.
fn existing(store: &ExtentStore, levels: &LevelSet, plan: &Plan) -> Option<Arc<BlockDict>> {
    let out_level = usize::from(plan.out_level);
    let inputs = plan
        .runs
        .iter()
        .filter(|r| usize::from(r.level) == out_level)
        .flat_map(|r| r.extents.iter());
    let layer = match out_level {
        0 => None,
        n => levels.sorted.get(n - 1),
    };
    let others = layer.into_iter().flat_map(|l| l.extents.iter());
    inputs
        .chain(others)
        .take(EXTENTS_SEARCHED)
        .find_map(|e| store.open(e).ok()?.reader.dictionary().cloned())
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
