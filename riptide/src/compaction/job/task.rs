//! One compaction task: a batch of closed ranges (or one piece of a large range) rewritten
//! into the task's own output extents. A range of one extent is re-linked or left in place; in
//! a larger range every block alone in its block group is copied verbatim, and overlapping
//! blocks are merged row by row (`rows.rs`).
//!
//! Invariants:
//! - A failed task frees every extent it wrote; the job then fails as a whole.
//! - A block holding tombstones the job must purge, or cut by a fence, is never copied.

use super::output::Output;
use super::ranges::{block_groups, open_group, BlockRef, Chunk, Piece};
use super::rows::{merge_blocks, merge_sparse, SparseSplit};
use super::{HotBlock, Plan, TaskResult};
use crate::error::Result;
use crate::extent::{ExtentBuilder, ExtentOptions};
use crate::extent_store::{user_part, ExtentStore, LiveExtent};
use crate::key::Lsn;
use crate::tier::Tier;
use std::sync::Arc;

/// Runs one task (a batch of closed ranges) with its own output extents. On error, frees the
/// extents it wrote.
pub(super) fn run_task(
    store: &Arc<ExtentStore>,
    plan: &Plan,
    opts: &ExtentOptions,
    tier: Tier,
    snapshots: &[Lsn],
    task: &[Piece],
) -> Result<TaskResult> {
    let mut result = TaskResult::default();
    let mut written = Vec::new();
    let mut out = Output {
        store,
        builder: ExtentBuilder::new(opts.clone()),
        spare: Vec::new(),
        opts: opts.clone(),
        written: &mut written,
        tier,
        fences: &plan.fences,
        passed: 0,
    };
    let outcome = (|| -> Result<()> {
        for piece in task {
            let group = &piece.group;
            let lo = match &piece.chunk {
                Some(c) => c.lo.as_slice(),
                None => group
                    .iter()
                    .map(|(_, _, e)| user_part(&e.meta.smallest))
                    .min()
                    .unwrap_or_default(),
            };
            out.cross_fences(lo)?;
            if group.len() == 1 {
                let (level, layer, e) = &group[0];
                let stays = *level == plan.out_level && *layer == plan.out_layer;
                let purge = plan.bottom && e.meta.deletes > 0;
                if stays && !purge && !plan.force {
                    // An output-level extent that overlaps nothing stays where it is, so the
                    // output extent so far must end before it.
                    out.close()?;
                    continue;
                }
                // An extent of another codec or tier than the output level's is copied block
                // by block (recompressed if need be), not re-linked.
                let same_tier = e.id.is_object() == (tier == Tier::Object);
                let same_codec = || -> Result<bool> { Ok(!out.builder.recompresses(&store.open(e)?.reader)) };
                if plan.reuse && !purge && !plan.force && same_tier && same_codec()? {
                    out.close()?;
                    result.stats.extents_reused += 1;
                    result.moved.push((*level, *layer, e.clone()));
                    continue;
                }
            }
            merge_group(
                store,
                plan,
                snapshots,
                group,
                piece.chunk.as_ref(),
                &mut out,
                &mut result,
            )?;
            if piece.consumes() {
                result.consumed.extend(group.iter().cloned());
            }
        }
        out.close()
    })();
    match outcome {
        Ok(()) => {
            result.written = written;
            Ok(result)
        }
        Err(e) => {
            for (id, b) in &written {
                store.discard(*id, b.slots);
            }
            Err(e)
        }
    }
}

/// Processes one closed range of several extents (or one that cannot be re-linked) at block
/// granularity.
fn merge_group(
    store: &ExtentStore,
    plan: &Plan,
    snapshots: &[Lsn],
    group: &[(u8, u64, Arc<LiveExtent>)],
    chunk: Option<&Chunk>,
    out: &mut Output<'_>,
    result: &mut TaskResult,
) -> Result<()> {
    let opens = open_group(store, group)?;
    for bgroup in block_groups(group, &opens, chunk) {
        if bgroup.len() == 1 && plan.reuse {
            let b = &bgroup[0];
            if copyable(plan, out, b) {
                copy_block(store, b, out, result)?;
                continue;
            }
        }
        if plan.reuse {
            if let Some(split) = SparseSplit::of(&bgroup) {
                merge_sparse(store, plan, snapshots, split, out, result)?;
                continue;
            }
        }
        merge_blocks(store, snapshots, plan, &bgroup, out, result)?;
    }
    Ok(())
}

/// True if block `b` may be copied whole: it holds no tombstone that this job must purge, no
/// fence cuts it, and it is not a block of another codec going into the last level (that one
/// is merged instead, so its rows get LSN 0 as they are re-encoded: decoding and encoding its
/// rows costs about what recompressing it would).
pub(super) fn copyable(plan: &Plan, out: &Output<'_>, b: &BlockRef<'_>) -> bool {
    let purge = plan.bottom && b.open.reader.index()[b.index].deletes > 0;
    let rezero = plan.zeroes_lsns() && out.builder.recompresses(&b.open.reader);
    !purge && !rezero && !out.fence_within(b.lo, b.hi)
}

/// Copies block `b` into the output without re-encoding its entries: verbatim, or
/// recompressed when its extent was written with another codec than the output's.
pub(super) fn copy_block(
    store: &ExtentStore,
    b: &BlockRef<'_>,
    out: &mut Output<'_>,
    result: &mut TaskResult,
) -> Result<()> {
    let entry = &b.open.reader.index()[b.index];
    out.cross_fences(b.lo)?;
    let stored = entry.stored_size();
    if out.builder.recompresses(&b.open.reader) {
        let raw = out
            .builder
            .recompressed_block(&b.open.reader, b.open.file.as_ref(), b.index)?;
        let after = out.builder.estimated_size_after_raw(&raw);
        out.make_room(after - out.builder.estimated_size())?;
        out.builder.add_raw_block(&raw)?;
        result.stats.blocks_recompressed += 1;
        result.stats.blocks_reused_decoded += 1;
    } else {
        let after = out.builder.estimated_size_after_copy(&b.open.reader, b.index)?;
        out.make_room(after - out.builder.estimated_size())?;
        let decoded = out.builder.decoded_copies();
        out.builder.copy_block(&b.open.reader, b.open.file.as_ref(), b.index)?;
        result.stats.blocks_reused_decoded += u64::from(out.builder.decoded_copies() - decoded);
    }
    if is_cached(store, b) {
        result.hot.push(HotBlock::Copied {
            old: (b.extent.cache_id, entry.offset),
            output: out.written.len(),
            first_key: entry.first_key.clone(),
        });
    }
    result.stats.blocks_reused += 1;
    result.stats.bytes_read += stored;
    result.stats.entries_in += u64::from(entry.rows);
    result.stats.entries_out += u64::from(entry.rows);
    Ok(())
}

/// True if block `b` is in the block cache.
pub(super) fn is_cached(store: &ExtentStore, b: &BlockRef<'_>) -> bool {
    store.blocks.contains(&crate::cache::BlockKey {
        extent: b.extent.cache_id,
        offset: b.open.reader.index()[b.index].offset,
    })
}
