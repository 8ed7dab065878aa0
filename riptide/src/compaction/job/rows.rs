//! Row-level merging of overlapping blocks: the decode → merge → encode path of a
//! compaction, with X-Engine's GC rule applied per user key, and the sparse split that copies
//! the dense run's blocks between the few keys of sparse runs (seed 000 Fig. 8, third case).
//!
//! Invariants:
//! - The entries emitted for a block group are exactly the merge of its blocks with the GC rule
//!   applied per user key, whether blocks are merged or copied between sparse keys.
//! - LSN zeroing (RocksDB's bottommost rule): written into the last level with nothing below,
//!   a user key's only surviving version, a Put at or below the oldest snapshot (every
//!   snapshot and every later read sees it, and no older version remains), is written with
//!   LSN 0. Every reader sees the same value as before; the 8-byte tags of such rows are then
//!   all alike and compress to almost nothing. Copied blocks keep their LSNs.

use super::super::gc_versions_into;
use super::super::merge::{ChainedBlocks, EntrySource, MergingEntries};
use super::output::Output;
use super::ranges::BlockRef;
use super::task::{copy_block, copyable, is_cached};
use super::{HotBlock, Plan, TaskResult};
use crate::error::Result;
use crate::extent_store::{user_part, ExtentStore};
use crate::key::{compare_internal_keys, decode_internal_key, encode_internal_key, Lsn, ValueKind};
use std::cmp::Ordering;

/// `blocks` grouped by input run, in order of first appearance (a run's blocks keep their
/// order; blocks of one run never overlap).
fn by_run<'g, 'a>(blocks: impl IntoIterator<Item = &'g BlockRef<'a>>) -> Vec<Vec<&'g BlockRef<'a>>> {
    let mut runs: Vec<Vec<&'g BlockRef<'a>>> = Vec::new();
    for b in blocks {
        match runs.iter_mut().find(|list| list[0].run == b.run) {
            Some(list) => list.push(b),
            None => runs.push(vec![b]),
        }
    }
    runs
}

/// One entry stream over `blocks` (of one run, in key order), read a block at a time.
fn chain<'a>(blocks: &[&BlockRef<'a>]) -> ChainedBlocks<'a> {
    ChainedBlocks::new(blocks.iter().map(|b| (b.open, b.index)).collect())
}

/// A group of overlapping blocks in which one run (the *dense* run, typically the output
/// level) has more blocks than all other runs together, so the others are sparse across it
/// (seed 000 Fig. 8's third case: a block whose keys fall on both sides of another input's
/// block). The dense run's blocks are cut into *units*, consecutive blocks that share no user
/// key with their neighbours.
pub(super) struct SparseSplit<'g, 'a> {
    dense: Vec<Vec<&'g BlockRef<'a>>>,
    /// The other runs' blocks, per run, in key order.
    sparse: Vec<Vec<&'g BlockRef<'a>>>,
}

impl<'g, 'a> SparseSplit<'g, 'a> {
    pub(super) fn of(group: &'g [BlockRef<'a>]) -> Option<Self> {
        let mut runs = by_run(group);
        let (dense_at, _) = runs.iter().enumerate().max_by_key(|(_, l)| l.len())?;
        let dense_blocks = runs.remove(dense_at);
        let sparse_count: usize = runs.iter().map(Vec::len).sum();
        let mut dense: Vec<Vec<&'g BlockRef<'a>>> = Vec::new();
        for b in dense_blocks {
            match dense.last_mut() {
                // A user key's versions may straddle two blocks of a run: keep them together.
                Some(unit) if unit.last().is_some_and(|p| p.hi >= b.lo) => unit.push(b),
                _ => dense.push(vec![b]),
            }
        }
        if dense.len() < 2 || sparse_count >= dense.len() {
            return None;
        }
        Some(SparseSplit { dense, sparse: runs })
    }
}

/// Merges a [`SparseSplit`] group: the sparse runs are decoded and streamed; a dense unit that
/// no sparse key falls inside is copied verbatim, one that some do is merged with exactly
/// those entries, and sparse keys between units are written between them. Produces the same
/// entries as [`merge_blocks`] over the whole group.
pub(super) fn merge_sparse(
    store: &ExtentStore,
    plan: &Plan,
    snapshots: &[Lsn],
    split: SparseSplit<'_, '_>,
    out: &mut Output<'_>,
    result: &mut TaskResult,
) -> Result<()> {
    let sparse_cached = split.sparse.iter().flatten().any(|b| is_cached(store, b));
    let sources: Vec<ChainedBlocks<'_>> = split.sparse.iter().map(|run| chain(run)).collect();
    result.stats.blocks_merged += split.sparse.iter().map(|r| r.len() as u64).sum::<u64>();
    let mut sparse = MergingEntries::new(sources)?;
    let mut emit = Emitter::new(snapshots, plan);
    for unit in &split.dense {
        let (lo, hi) = (unit[0].lo, unit[unit.len() - 1].hi);
        // Sparse keys below the unit go out first.
        while let Some((k, v)) = sparse.peek().filter(|(k, _)| user_part(k) < lo) {
            emit.push(k, v, out, result)?;
            sparse.pop()?;
        }
        let inside = sparse.peek().is_some_and(|(k, _)| user_part(k) <= hi);
        // Only a unit of one block is copied: an output extent may be cut between any two
        // copied blocks, and the blocks of a larger unit share a user key, which must not
        // span two extents.
        if !inside && unit.len() == 1 && copyable(plan, out, unit[0]) {
            emit.finish(out, result)?;
            copy_block(store, unit[0], out, result)?;
            continue;
        }
        // Merge the unit with the sparse entries inside its range.
        if sparse_cached || unit.iter().any(|b| is_cached(store, b)) {
            result.hot.push(HotBlock::Merged {
                lo: lo.to_vec(),
                hi: hi.to_vec(),
            });
        }
        result.stats.blocks_merged += unit.len() as u64;
        let mut dense = chain(unit);
        let mut dense_live = dense.advance()?;
        loop {
            // The smaller of the unit's next entry and the next sparse entry inside the unit.
            match sparse.peek().filter(|(k, _)| user_part(k) <= hi) {
                Some((k, v)) if !dense_live || compare_internal_keys(k, dense.key()) == Ordering::Less => {
                    emit.push(k, v, out, result)?;
                    sparse.pop()?;
                }
                _ if dense_live => {
                    emit.push(dense.key(), dense.value(), out, result)?;
                    dense_live = dense.advance()?;
                }
                _ => break,
            }
        }
        result.stats.bytes_read += dense.bytes_read;
    }
    while let Some((k, v)) = sparse.peek() {
        emit.push(k, v, out, result)?;
        sparse.pop()?;
    }
    emit.finish(out, result)?;
    result.stats.bytes_read += sparse.sources.iter().map(|s| s.bytes_read).sum::<u64>();
    Ok(())
}

/// Takes merged entries in internal-key order and writes each user key's surviving versions
/// (the GC rule) to the output. The current user key's versions are kept in one reused buffer
/// (entries are not copied into allocations of their own).
struct Emitter<'s> {
    snapshots: &'s [Lsn],
    bottom: bool,
    /// Output into the last level with nothing below: lone old Puts are written with LSN 0.
    zero_lsns: bool,
    /// The internal key of a row written with LSN 0.
    zeroed: Vec<u8>,
    /// Keys and values of the current user key's versions, newest first, back to back.
    buf: Vec<u8>,
    /// Per version: (start in `buf`, key length, value length).
    spans: Vec<(usize, usize, usize)>,
    /// Indexes into `spans` of the versions that survive (reused per user key).
    kept: Vec<usize>,
}

impl<'s> Emitter<'s> {
    fn new(snapshots: &'s [Lsn], plan: &Plan) -> Self {
        Emitter {
            snapshots,
            bottom: plan.bottom,
            zero_lsns: plan.zeroes_lsns(),
            zeroed: Vec::new(),
            buf: Vec::with_capacity(256),
            spans: Vec::with_capacity(4),
            kept: Vec::with_capacity(4),
        }
    }

    fn push(&mut self, key: &[u8], value: &[u8], out: &mut Output<'_>, result: &mut TaskResult) -> Result<()> {
        let same_key = self
            .spans
            .first()
            .is_some_and(|&(start, klen, _)| user_part(&self.buf[start..start + klen]) == user_part(key));
        if !same_key {
            self.finish(out, result)?;
        }
        result.stats.entries_in += 1;
        let start = self.buf.len();
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value);
        self.spans.push((start, key.len(), value.len()));
        Ok(())
    }

    /// Writes the current user key's surviving versions.
    fn finish(&mut self, out: &mut Output<'_>, result: &mut TaskResult) -> Result<()> {
        let Some(&(start, klen, _)) = self.spans.first() else {
            return Ok(());
        };
        let (buf, spans) = (&self.buf, &self.spans);
        let key = |i: usize| {
            let (s, kl, _) = spans[i];
            &buf[s..s + kl]
        };
        gc_versions_into(spans.len(), key, self.snapshots, self.bottom, &mut self.kept);
        if !self.kept.is_empty() {
            out.cross_fences(user_part(&buf[start..start + klen]))?;
        }
        let lens = self.kept.iter().map(|&i| (spans[i].1, spans[i].2));
        let size = out.builder.estimated_size_after_entries(lens) - out.builder.estimated_size();
        out.make_room(size)?;
        let oldest_snapshot = self.snapshots.first().copied().unwrap_or(Lsn::MAX);
        for &i in &self.kept {
            let (s, kl, vl) = spans[i];
            let (ikey, value) = (&buf[s..s + kl], &buf[s + kl..s + kl + vl]);
            match decode_internal_key(ikey) {
                Some((user, lsn, ValueKind::Put))
                    if self.zero_lsns && self.kept.len() == 1 && lsn != 0 && lsn <= oldest_snapshot =>
                {
                    self.zeroed.clear();
                    encode_internal_key(&mut self.zeroed, user, 0, ValueKind::Put);
                    out.builder.add(&self.zeroed, value)?;
                    result.stats.lsns_zeroed += 1;
                }
                _ => out.builder.add(ikey, value)?,
            }
            result.stats.entries_out += 1;
        }
        self.buf.clear();
        self.spans.clear();
        Ok(())
    }
}

/// Decodes and merges overlapping blocks, applying the GC rule per user key.
pub(super) fn merge_blocks(
    store: &ExtentStore,
    snapshots: &[Lsn],
    plan: &Plan,
    blocks: &[BlockRef<'_>],
    out: &mut Output<'_>,
    result: &mut TaskResult,
) -> Result<()> {
    // One stream per input run: a run's blocks are disjoint and (from the sweep) in key order.
    let sources: Vec<ChainedBlocks<'_>> = by_run(blocks).iter().map(|run| chain(run)).collect();
    result.stats.blocks_merged += blocks.len() as u64;
    if blocks.iter().any(|b| is_cached(store, b)) {
        let lo = blocks.iter().map(|b| b.lo).min().unwrap_or_default().to_vec();
        let hi = blocks.iter().map(|b| b.hi).max().unwrap_or_default().to_vec();
        result.hot.push(HotBlock::Merged { lo, hi });
    }
    let mut merged = MergingEntries::new(sources)?;
    let mut emit = Emitter::new(snapshots, plan);
    while let Some((k, v)) = merged.peek() {
        emit.push(k, v, out, result)?;
        merged.pop()?;
    }
    emit.finish(out, result)?;
    result.stats.bytes_read += merged.sources.iter().map(|s| s.bytes_read).sum::<u64>();
    Ok(())
}
