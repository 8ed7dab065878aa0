//! Executing one compaction with data reuse (seed 000 §3.3, Fig. 8; xengine_as_built §7).
//!
//! 1. The input extents (every run: L0 layers, the L1 or L2 run) are grouped into **closed
//!    ranges**: maximal sets of extents whose user-key ranges overlap, transitively.
//! 2. A range of one extent overlaps nothing: it is **re-linked** into the output position by
//!    metadata alone (no read, no write). An output-level extent alone in its range is simply
//!    left where it is.
//! 3. In a range of several extents, the same grouping runs over their data blocks, using each
//!    block's first and last key from the index. A block alone in its group is **copied
//!    verbatim** (stored bytes and trailer, no decompression). Blocks that overlap are decoded
//!    and merged row by row, which is where old versions and tombstones are dropped.
//! 4. The output builder is closed before every re-linked extent, so outputs never overlap it.
//!
//! Exceptions that keep deletes purgeable: when the output is the bottom of the key range
//! (`purge`), extents and blocks holding tombstones are never reused; they are merged. With
//! reuse off, every block is merged (the metamorphic test compares both modes).
//!
//! Invariants: the entry stream handed to the builder is exactly the merge of the inputs with
//! the GC rule applied per user key (a user key's versions are always inside one block group:
//! groups are closed ranges of user keys), so reuse changes how bytes are produced, never what
//! a reader sees.

use super::gc_versions;
use super::merge::{BlockEntries, MergingEntries};
use crate::error::Result;
use crate::extent::{BuiltExtent, ExtentBuilder, ExtentOptions, EXTENT_SIZE};
use crate::extent_store::{user_part, ExtentStore, LiveExtent, OpenExtent};
use crate::key::Lsn;
use crate::space::ExtentId;
use std::sync::Arc;

/// One input run: a layer of some level.
pub(crate) struct Run {
    pub(crate) level: u8,
    pub(crate) layer: u64,
    pub(crate) extents: Vec<Arc<LiveExtent>>,
}

/// What to compact and where to.
pub(crate) struct Plan {
    /// Newest first.
    pub(crate) runs: Vec<Run>,
    pub(crate) out_level: u8,
    pub(crate) out_layer: u64,
    /// Nothing older lies below the key range of all inputs: tombstones can go.
    pub(crate) bottom: bool,
    /// Data reuse (extent re-link, block copy) allowed.
    pub(crate) reuse: bool,
    /// Rewrite every input, even an output-level extent that overlaps nothing (manual full
    /// compaction).
    pub(crate) force: bool,
}

/// What a job produced and did.
#[derive(Default)]
pub(crate) struct JobResult {
    /// New extents written (ids allocated, data synced by the caller).
    pub(crate) written: Vec<(ExtentId, BuiltExtent)>,
    /// Extents re-linked into the output position: (level, layer) they came from.
    pub(crate) moved: Vec<(u8, u64, Arc<LiveExtent>)>,
    /// Input extents consumed (to remove from metadata).
    pub(crate) consumed: Vec<(u8, u64, Arc<LiveExtent>)>,
    /// Cached input blocks whose rows now live in output blocks: for incremental cache
    /// replacement after install. `Copied`: same bytes at a new place; `Merged`: a user-key
    /// range whose output blocks should be loaded.
    pub(crate) hot: Vec<HotBlock>,
    pub(crate) stats: JobStats,
}

/// Counters of one job (reported per job and summed per level).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JobStats {
    pub(crate) input_extents: u64,
    pub(crate) extents_reused: u64,
    pub(crate) blocks_reused: u64,
    pub(crate) blocks_merged: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) entries_in: u64,
    pub(crate) entries_out: u64,
}

/// A cached input block whose rows moved.
pub(crate) enum HotBlock {
    /// Copied verbatim: (old cache id, old offset) → the block starting with `first_key` in
    /// output `output` (an index into `written`).
    Copied {
        old: (u64, u64),
        output: usize,
        first_key: Vec<u8>,
    },
    /// Merged: the output blocks covering `[lo, hi]` (user keys) replace cached inputs.
    Merged { lo: Vec<u8>, hi: Vec<u8> },
}

/// One input data block.
struct BlockRef<'a> {
    open: &'a OpenExtent,
    extent: &'a LiveExtent,
    index: usize,
    lo: &'a [u8],
    hi: &'a [u8],
}

/// Groups items into closed ranges of overlapping `[lo, hi]` user-key ranges, in key order.
fn closed_ranges<T>(mut items: Vec<T>, range: impl Fn(&T) -> (&[u8], &[u8])) -> Vec<Vec<T>> {
    items.sort_by(|a, b| range(a).0.cmp(range(b).0));
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut hi: Vec<u8> = Vec::new();
    for item in items {
        let (lo, h) = range(&item);
        let (lo, h) = (lo.to_vec(), h.to_vec());
        match groups.last_mut() {
            Some(g) if lo.as_slice() <= hi.as_slice() => {
                g.push(item);
                if h > hi {
                    hi = h;
                }
            }
            _ => {
                groups.push(vec![item]);
                hi = h;
            }
        }
    }
    groups
}

/// The output side of a job: one extent builder at a time, cut only between user keys.
struct Output<'a> {
    store: &'a ExtentStore,
    opts: ExtentOptions,
    builder: ExtentBuilder,
    written: &'a mut Vec<(ExtentId, BuiltExtent)>,
}

impl Output<'_> {
    /// Finishes the current extent, if any, and writes it into fresh slots.
    fn close(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.builder, ExtentBuilder::new(self.opts.clone()));
        let built = full.finish()?;
        let id = self.store.space.allocate(built.slots)?;
        // Registered before the write so a failure frees the slots too.
        self.written.push((id, built));
        let (id, built) = self.written.last().expect("just pushed");
        self.store
            .space
            .write_extent(*id, built.slots, &built.valid, &built.footer)
    }

    /// Starts a new extent first if `bytes` more would overflow this one.
    fn make_room(&mut self, bytes: usize) -> Result<()> {
        if !self.builder.is_empty() && self.builder.estimated_size() + bytes > EXTENT_SIZE as usize {
            self.close()?;
        }
        Ok(())
    }
}

/// Runs `plan`: groups, re-links, copies and merges; writes the outputs (not yet synced).
pub(crate) fn run(
    store: &Arc<ExtentStore>,
    plan: &Plan,
    opts: ExtentOptions,
    snapshots: &[Lsn],
    result: &mut JobResult,
) -> Result<()> {
    let mut all: Vec<(u8, u64, Arc<LiveExtent>)> = Vec::new();
    for r in &plan.runs {
        for e in &r.extents {
            all.push((r.level, r.layer, e.clone()));
        }
    }
    result.stats.input_extents = all.len() as u64;
    let groups = closed_ranges(all, |(_, _, e)| {
        (user_part(&e.meta.smallest), user_part(&e.meta.largest))
    });
    let mut written = std::mem::take(&mut result.written);
    let mut out = Output {
        store,
        builder: ExtentBuilder::new(opts.clone()),
        opts,
        written: &mut written,
    };
    let outcome = (|| -> Result<()> {
        for group in groups {
            if group.len() == 1 {
                let (level, layer, e) = &group[0];
                let stays = *level == plan.out_level && *layer == plan.out_layer;
                let purge = plan.bottom && e.meta.deletes > 0;
                if stays && !purge && !plan.force {
                    continue; // an output-level extent that overlaps nothing: untouched
                }
                if plan.reuse && !purge {
                    out.close()?;
                    result.stats.extents_reused += 1;
                    result.moved.push((*level, *layer, e.clone()));
                    continue;
                }
            }
            merge_group(store, plan, snapshots, &group, &mut out, result)?;
            result.consumed.extend(group);
        }
        out.close()
    })();
    result.written = written;
    outcome
}

/// Processes one closed range of several extents (or one that cannot be re-linked) at block
/// granularity.
fn merge_group(
    store: &ExtentStore,
    plan: &Plan,
    snapshots: &[Lsn],
    group: &[(u8, u64, Arc<LiveExtent>)],
    out: &mut Output<'_>,
    result: &mut JobResult,
) -> Result<()> {
    let opens: Vec<Arc<OpenExtent>> = group.iter().map(|(_, _, e)| store.open(e)).collect::<Result<_>>()?;
    let mut blocks: Vec<BlockRef<'_>> = Vec::new();
    for ((_, _, e), open) in group.iter().zip(&opens) {
        for (i, ie) in open.reader.index().iter().enumerate() {
            blocks.push(BlockRef {
                open,
                extent: e,
                index: i,
                lo: user_part(&ie.first_key),
                hi: user_part(&ie.last_key),
            });
        }
    }
    for bgroup in closed_ranges(blocks, |b| (b.lo, b.hi)) {
        if bgroup.len() == 1 && plan.reuse {
            let b = &bgroup[0];
            let entry = &b.open.reader.index()[b.index];
            if !(plan.bottom && entry.deletes > 0) {
                let raw = b.open.reader.read_raw_block(b.open.file.as_ref(), b.index)?;
                out.make_room(raw.stored.len() + entry.first_key.len() + entry.last_key.len() + 64)?;
                out.builder.add_raw_block(&raw)?;
                let old = (b.extent.cache_id, entry.offset);
                if store.blocks.contains(&crate::cache::BlockKey {
                    extent: old.0,
                    offset: old.1,
                }) {
                    result.hot.push(HotBlock::Copied {
                        old,
                        output: out.written.len(),
                        first_key: entry.first_key.clone(),
                    });
                }
                result.stats.blocks_reused += 1;
                result.stats.bytes_read += raw.stored.len() as u64;
                result.stats.entries_in += u64::from(entry.rows);
                result.stats.entries_out += u64::from(entry.rows);
                continue;
            }
        }
        merge_blocks(store, snapshots, plan.bottom, &bgroup, out, result)?;
    }
    Ok(())
}

/// Decodes and merges overlapping blocks, applying the GC rule per user key.
fn merge_blocks(
    store: &ExtentStore,
    snapshots: &[Lsn],
    bottom: bool,
    blocks: &[BlockRef<'_>],
    out: &mut Output<'_>,
    result: &mut JobResult,
) -> Result<()> {
    let mut sources = Vec::with_capacity(blocks.len());
    let mut cached = false;
    for b in blocks {
        let entry = &b.open.reader.index()[b.index];
        cached |= store.blocks.contains(&crate::cache::BlockKey {
            extent: b.extent.cache_id,
            offset: entry.offset,
        });
        let block = b.open.reader.read_block(b.open.file.as_ref(), b.index)?;
        result.stats.bytes_read += u64::from(entry.size);
        sources.push(BlockEntries::new(Arc::new(block)));
    }
    result.stats.blocks_merged += blocks.len() as u64;
    if cached {
        let lo = blocks.iter().map(|b| b.lo).min().unwrap_or_default().to_vec();
        let hi = blocks.iter().map(|b| b.hi).max().unwrap_or_default().to_vec();
        result.hot.push(HotBlock::Merged { lo, hi });
    }
    let mut merged = MergingEntries::new(sources)?;
    let mut versions: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    loop {
        let next = merged.next_entry()?;
        let same_key = match (&next, versions.first()) {
            (Some((k, _)), Some((first, _))) => user_part(k) == user_part(first),
            _ => false,
        };
        if !same_key && !versions.is_empty() {
            let kept = gc_versions(&versions, snapshots, bottom);
            let size: usize = kept
                .iter()
                .map(|&i| versions[i].0.len() + versions[i].1.len() + 16)
                .sum();
            out.make_room(size)?;
            for i in kept {
                out.builder.add(&versions[i].0, &versions[i].1)?;
                result.stats.entries_out += 1;
            }
            versions.clear();
        }
        match next {
            Some(entry) => {
                result.stats.entries_in += 1;
                versions.push(entry);
            }
            None => break,
        }
    }
    Ok(())
}
