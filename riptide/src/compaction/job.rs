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
//! 5. Closed ranges are batched into tasks for the compaction units; a range larger than a task
//!    is cut into pieces between its block groups ([`Piece`]), each with its own outputs, and
//!    only its first piece removes the range's extents from the metadata.
//!
//! Exceptions that keep deletes purgeable: when the output is the bottom of the key range
//! (`purge`), extents and blocks holding tombstones are never reused; they are merged. With
//! reuse off, every block is merged (the metamorphic test compares both modes).
//!
//! Invariants: the entry stream handed to the builder is exactly the merge of the inputs with
//! the GC rule applied per user key (a user key's versions are always inside one block group:
//! groups are closed ranges of user keys), so reuse changes how bytes are produced, never what
//! a reader sees.

use super::gc_versions_into;
use super::merge::{ChainedBlocks, EntrySource, MergingEntries};
use crate::error::Result;
use crate::extent::{BuiltExtent, ExtentBuilder, ExtentOptions, EXTENT_SIZE};
use crate::extent_store::{user_part, ExtentStore, LiveExtent, OpenExtent};
use crate::key::{compare_internal_keys, Lsn};
use crate::space::ExtentId;
use std::cmp::Ordering;
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
    /// Rewrite every input, even one alone in its closed range: no extent is left in place or
    /// re-linked (manual compactions, self-major; blocks may still be copied when `reuse`).
    pub(crate) force: bool,
    /// Sorted user keys no output extent may reach across: the smallest keys of output-level
    /// extents between the inputs that are not inputs, and for a split the smallest keys of the
    /// L2 extents the split extents' rows skip.
    pub(crate) fences: Vec<Vec<u8>>,
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
    pub(crate) tasks: u64,
    /// Tasks a unit failed or rejected, run again on the CPU path.
    pub(crate) tasks_retried: u64,
    /// Closed ranges too large for one task, cut between block groups into several tasks.
    pub(crate) ranges_split: u64,
    pub(crate) input_extents: u64,
    pub(crate) extents_reused: u64,
    pub(crate) blocks_reused: u64,
    /// Of `blocks_reused`, blocks decoded to compute their index entry and filter lines
    /// (copied from an extent older than format 3, or with other bloom bits per key).
    pub(crate) blocks_reused_decoded: u64,
    pub(crate) blocks_merged: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) entries_in: u64,
    pub(crate) entries_out: u64,
}

impl JobStats {
    fn add(&mut self, o: &JobStats) {
        self.extents_reused += o.extents_reused;
        self.blocks_reused += o.blocks_reused;
        self.blocks_reused_decoded += o.blocks_reused_decoded;
        self.blocks_merged += o.blocks_merged;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.entries_in += o.entries_in;
        self.entries_out += o.entries_out;
    }
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
    /// The run (level, layer) the block belongs to: blocks of one run never overlap.
    run: (u8, u64),
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

/// The output side of a job: one extent builder at a time, cut only between user keys, and
/// at every fence (an output extent never reaches across one).
struct Output<'a> {
    store: &'a ExtentStore,
    opts: ExtentOptions,
    builder: ExtentBuilder,
    /// The byte buffer of the last extent written, for the next builder.
    spare: Vec<u8>,
    written: &'a mut Vec<(ExtentId, BuiltExtent)>,
    /// The plan's fences (sorted user keys).
    fences: &'a [Vec<u8>],
    /// Fences at or below the last key added.
    passed: usize,
}

impl Output<'_> {
    /// Called before adding user key `key` (keys come in increasing order): closes the current
    /// extent if a fence lies between the previous key and `key`.
    fn cross_fences(&mut self, key: &[u8]) -> Result<()> {
        // Keys only grow: walk on from the fences already passed (one compare per key in the
        // usual case, not a binary search).
        let mut i = self.passed;
        while self.fences.get(i).is_some_and(|f| f.as_slice() <= key) {
            i += 1;
        }
        if i > self.passed {
            self.passed = i;
            self.close()?;
        }
        Ok(())
    }

    /// True if a fence lies in `(lo, hi]`: a block spanning those keys cannot be copied whole.
    fn fence_within(&self, lo: &[u8], hi: &[u8]) -> bool {
        let i = self.fences.partition_point(|f| f.as_slice() <= lo);
        self.fences.get(i).is_some_and(|f| f.as_slice() <= hi)
    }

    /// Finishes the current extent, if any, and writes it into fresh slots.
    fn close(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let next = ExtentBuilder::with_buffer(self.opts.clone(), std::mem::take(&mut self.spare));
        let full = std::mem::replace(&mut self.builder, next);
        let built = full.finish()?;
        let id = self.store.space.allocate(built.slots)?;
        // Registered before the write so a failure frees the slots too.
        self.written.push((id, built));
        let (id, built) = self.written.last_mut().expect("just pushed");
        self.store
            .space
            .write_extent(*id, built.slots, &built.valid, &built.footer)?;
        // On disk now (the job syncs before installing): keep only the metadata, so a job's
        // memory is two extents' worth however much it writes. The bytes' buffer builds the
        // extent after next.
        self.spare = std::mem::take(&mut built.valid);
        Ok(())
    }

    /// Starts a new extent first if `bytes` more would overflow this one.
    fn make_room(&mut self, bytes: usize) -> Result<()> {
        if !self.builder.is_empty() && self.builder.estimated_size() + bytes > EXTENT_SIZE as usize {
            self.close()?;
        }
        Ok(())
    }
}

/// How a job is split and run (seed 002's offload design with CPU units as the backend).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Units {
    /// Unit threads running tasks in parallel (1 = the job thread runs every task itself).
    pub(crate) units: usize,
    /// Most input extents per task (tasks never split a closed range).
    pub(crate) task_extents: usize,
    /// Tasks whose inputs are prefetched (read-ahead hints) ahead of the units.
    pub(crate) prefetch: usize,
    /// Test hook: a unit rejects every n-th task it is given (0 = never), which hands the task
    /// back to the job thread's CPU path.
    pub(crate) reject_every: u64,
    /// Test hook: the size of the pieces a closed range larger than a task is cut into, in
    /// input bytes (0 = automatic).
    pub(crate) piece_bytes: u64,
}

type Group = Vec<(u8, u64, Arc<LiveExtent>)>;

/// The smallest piece a closed range is cut into, in extents' worth of input blocks.
const MIN_PIECE_EXTENTS: u64 = 16;

/// Part of a task: a closed range, whole or (when it is larger than a task) only the blocks of
/// it inside `chunk`. A chunk's bounds are the ends of consecutive runs of block groups, and
/// block groups are closed ranges of user keys, so the pieces of one closed range are
/// independent: every block lies inside exactly one piece, no user key spans two, and their
/// outputs never overlap.
struct Piece {
    group: Group,
    chunk: Option<Chunk>,
}

/// The user-key bounds of a piece of a closed range.
struct Chunk {
    lo: Vec<u8>,
    hi: Vec<u8>,
    /// The range's first piece: the one that takes its input extents out of the metadata.
    first: bool,
}

impl Chunk {
    /// Whether a block or extent spanning the user keys `[lo, hi]` reaches into this piece.
    fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        hi >= self.lo.as_slice() && lo <= self.hi.as_slice()
    }
}

impl Piece {
    /// Whether this piece takes the range's input extents out of the metadata (exactly one
    /// piece of a range does).
    fn consumes(&self) -> bool {
        self.chunk.as_ref().is_none_or(|c| c.first)
    }
}

/// The outcome of one task: outputs and moves of its closed ranges.
#[derive(Default)]
struct TaskResult {
    written: Vec<(ExtentId, BuiltExtent)>,
    moved: Vec<(u8, u64, Arc<LiveExtent>)>,
    consumed: Vec<(u8, u64, Arc<LiveExtent>)>,
    hot: Vec<HotBlock>,
    stats: JobStats,
}

/// Runs `plan`: groups the inputs into closed ranges, batches them into tasks, runs the tasks
/// on compaction units (decode → merge → encode, each task with its own output extents), and
/// collects the results in key order. A task a unit fails or rejects is run again by this
/// thread (the CPU path). Outputs are written, not yet synced.
pub(crate) fn run(
    store: &Arc<ExtentStore>,
    plan: &Plan,
    opts: ExtentOptions,
    snapshots: &[Lsn],
    units: Units,
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
    let mut tasks: Vec<Vec<Piece>> = Vec::new();
    let mut size = usize::MAX;
    let task_extents = units.task_extents.max(1);
    for g in groups {
        // A closed range larger than a task is cut between its block groups, so several units
        // can work on it (with one unit there is nothing to share, and cuts only cost extents).
        if units.units > 1 && g.len() > task_extents {
            let pieces = split_range(store, &g, units, task_extents as u64)?;
            if pieces.len() > 1 {
                result.stats.ranges_split += 1;
                tasks.extend(pieces.into_iter().map(|p| vec![p]));
                size = usize::MAX;
                continue;
            }
        }
        if size >= task_extents {
            tasks.push(Vec::new());
            size = 0;
        }
        size += g.len();
        tasks
            .last_mut()
            .expect("pushed above")
            .push(Piece { group: g, chunk: None });
    }
    let prefetch = |task: &[Piece]| {
        for piece in task {
            for (_, _, e) in &piece.group {
                // A piece of a range reads only the extents reaching into its keys.
                if let Some(c) = &piece.chunk {
                    if !c.overlaps(user_part(&e.meta.smallest), user_part(&e.meta.largest)) {
                        continue;
                    }
                }
                if let Ok((file, _, base)) = store.space.locate(e.id) {
                    file.prefetch(base, e.meta.data_size);
                }
            }
        }
    };
    let cpu = |task: &[Piece]| run_task(store, plan, &opts, snapshots, task);
    let mut outcomes: Vec<Option<Result<TaskResult>>> = (0..tasks.len()).map(|_| None).collect();
    if units.units <= 1 || tasks.len() <= 1 {
        for (i, task) in tasks.iter().enumerate() {
            if let Some(next) = tasks.get(i + 1) {
                prefetch(next);
            }
            outcomes[i] = Some(cpu(task));
        }
    } else {
        // The task queue (bounded: units.units * 2 in flight) and the result queue.
        let (task_tx, task_rx) = std::sync::mpsc::sync_channel::<usize>(units.units * 2);
        let task_rx = std::sync::Mutex::new(task_rx);
        let (res_tx, res_rx) = std::sync::mpsc::channel::<(usize, Option<Result<TaskResult>>)>();
        std::thread::scope(|scope| {
            for _ in 0..units.units {
                let (task_rx, res_tx, tasks) = (&task_rx, res_tx.clone(), &tasks);
                let cpu = &cpu;
                scope.spawn(move || {
                    let mut given = 0u64;
                    loop {
                        let next = task_rx.lock().map(|rx| rx.recv());
                        let Ok(Ok(i)) = next else { return };
                        given += 1;
                        let rejected = units.reject_every > 0 && given.is_multiple_of(units.reject_every);
                        let outcome = if rejected { None } else { Some(cpu(&tasks[i])) };
                        if res_tx.send((i, outcome)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(res_tx);
            // Inputs of the next `prefetch` tasks are read ahead while units work.
            for t in tasks.iter().take(units.prefetch) {
                prefetch(t);
            }
            for i in 0..tasks.len() {
                if let Some(t) = tasks.get(i + units.prefetch) {
                    prefetch(t);
                }
                if task_tx.send(i).is_err() {
                    break;
                }
            }
            drop(task_tx);
            for (i, outcome) in res_rx {
                outcomes[i] = outcome.map(|o| match o {
                    // A unit failure hands the task back to the CPU path.
                    Err(_) => {
                        result.stats.tasks_retried += 1;
                        cpu(&tasks[i])
                    }
                    ok => ok,
                });
            }
        });
    }
    // Tasks a unit rejected run here; collect everything in key order.
    let mut first_err = None;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let outcome = match outcome {
            Some(o) => o,
            None => {
                result.stats.tasks_retried += 1;
                cpu(&tasks[i])
            }
        };
        match outcome {
            Ok(r) => {
                let base = result.written.len();
                result.written.extend(r.written);
                result.moved.extend(r.moved);
                result.consumed.extend(r.consumed);
                result.hot.extend(r.hot.into_iter().map(|h| match h {
                    HotBlock::Copied { old, output, first_key } => HotBlock::Copied {
                        old,
                        output: output + base,
                        first_key,
                    },
                    merged => merged,
                }));
                result.stats.add(&r.stats);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    result.stats.tasks += tasks.len() as u64;
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs one task (a batch of closed ranges) with its own output extents. On error, frees the
/// extents it wrote.
fn run_task(
    store: &Arc<ExtentStore>,
    plan: &Plan,
    opts: &ExtentOptions,
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
                if plan.reuse && !purge && !plan.force {
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
                store.space.free(*id, b.slots);
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
        merge_blocks(store, snapshots, plan.bottom, &bgroup, out, result)?;
    }
    Ok(())
}

/// The open readers of a closed range's extents.
fn open_group(store: &ExtentStore, group: &[(u8, u64, Arc<LiveExtent>)]) -> Result<Vec<Arc<OpenExtent>>> {
    group.iter().map(|(_, _, e)| store.open(e).cloned()).collect()
}

/// The data blocks of a closed range's extents (from their indexes, nothing read), grouped
/// into closed ranges of user keys, in key order; with a `chunk`, only the blocks inside it
/// (which are whole block groups of the range, see [`Piece`]).
fn block_groups<'a>(
    group: &'a [(u8, u64, Arc<LiveExtent>)],
    opens: &'a [Arc<OpenExtent>],
    chunk: Option<&Chunk>,
) -> Vec<Vec<BlockRef<'a>>> {
    let mut blocks: Vec<BlockRef<'a>> = Vec::new();
    for ((level, layer, e), open) in group.iter().zip(opens) {
        if chunk.is_some_and(|c| !c.overlaps(user_part(&e.meta.smallest), user_part(&e.meta.largest))) {
            continue;
        }
        for (i, ie) in open.reader.index().iter().enumerate() {
            let (lo, hi) = (user_part(&ie.first_key), user_part(&ie.last_key));
            if chunk.is_some_and(|c| !c.overlaps(lo, hi)) {
                continue;
            }
            blocks.push(BlockRef {
                run: (*level, *layer),
                open,
                extent: e,
                index: i,
                lo,
                hi,
            });
        }
    }
    closed_ranges(blocks, |b| (b.lo, b.hi))
}

/// Cuts a closed range into pieces between its block groups (a single piece when it has one
/// block group or is small: the caller then keeps the range whole). A piece holds at most `task_extents` extents' worth of input
/// bytes (a task) and about a quarter of an even share per unit, so units finishing early find
/// more work, but no less than [`MIN_PIECE_EXTENTS`] extents' worth (when a task allows that
/// much), as every piece ends in a partly filled output extent.
fn split_range(store: &ExtentStore, group: &Group, units: Units, task_extents: u64) -> Result<Vec<Piece>> {
    let opens = open_group(store, group)?;
    let bgroups = block_groups(group, &opens, None);
    let block_bytes = |bgroup: &[BlockRef<'_>]| {
        bgroup
            .iter()
            .map(|b| u64::from(b.open.reader.index()[b.index].size))
            .sum::<u64>()
    };
    let total: u64 = bgroups.iter().map(|g| block_bytes(g)).sum();
    let target = match units.piece_bytes {
        0 => (total / (units.units as u64 * 4).max(1))
            .max(MIN_PIECE_EXTENTS.min(task_extents) * EXTENT_SIZE)
            .min(task_extents * EXTENT_SIZE),
        n => n,
    };
    let mut pieces = Vec::new();
    let mut bytes = 0u64;
    let mut lo: Option<&[u8]> = None;
    let mut hi: &[u8] = &[];
    for (i, bgroup) in bgroups.iter().enumerate() {
        let group_lo = bgroup.iter().map(|b| b.lo).min().unwrap_or_default();
        lo.get_or_insert(group_lo);
        hi = bgroup.iter().map(|b| b.hi).max().unwrap_or_default().max(hi);
        bytes += block_bytes(bgroup);
        if bytes >= target || i + 1 == bgroups.len() {
            pieces.push(Piece {
                group: group.clone(),
                chunk: Some(Chunk {
                    lo: lo.take().unwrap_or_default().to_vec(),
                    hi: hi.to_vec(),
                    first: pieces.is_empty(),
                }),
            });
            (bytes, hi) = (0, &[]);
        }
    }
    Ok(pieces)
}

/// True if block `b` may be copied whole: it holds no tombstone that this job must purge and
/// no fence cuts it.
fn copyable(plan: &Plan, out: &Output<'_>, b: &BlockRef<'_>) -> bool {
    let purge = plan.bottom && b.open.reader.index()[b.index].deletes > 0;
    !purge && !out.fence_within(b.lo, b.hi)
}

/// Copies block `b` verbatim into the output (no decompression, no re-encoding).
fn copy_block(store: &ExtentStore, b: &BlockRef<'_>, out: &mut Output<'_>, result: &mut TaskResult) -> Result<()> {
    let entry = &b.open.reader.index()[b.index];
    out.cross_fences(b.lo)?;
    let stored = entry.stored_size();
    let after = out.builder.estimated_size_after_copy(&b.open.reader, b.index)?;
    out.make_room(after - out.builder.estimated_size())?;
    let decoded = out.builder.decoded_copies();
    out.builder.copy_block(&b.open.reader, b.open.file.as_ref(), b.index)?;
    result.stats.blocks_reused_decoded += u64::from(out.builder.decoded_copies() - decoded);
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
fn is_cached(store: &ExtentStore, b: &BlockRef<'_>) -> bool {
    store.blocks.contains(&crate::cache::BlockKey {
        extent: b.extent.cache_id,
        offset: b.open.reader.index()[b.index].offset,
    })
}

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
struct SparseSplit<'g, 'a> {
    dense: Vec<Vec<&'g BlockRef<'a>>>,
    /// The other runs' blocks, per run, in key order.
    sparse: Vec<Vec<&'g BlockRef<'a>>>,
}

impl<'g, 'a> SparseSplit<'g, 'a> {
    fn of(group: &'g [BlockRef<'a>]) -> Option<Self> {
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
fn merge_sparse(
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
    let mut emit = Emitter::new(snapshots, plan.bottom);
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
    /// Keys and values of the current user key's versions, newest first, back to back.
    buf: Vec<u8>,
    /// Per version: (start in `buf`, key length, value length).
    spans: Vec<(usize, usize, usize)>,
    /// Indexes into `spans` of the versions that survive (reused per user key).
    kept: Vec<usize>,
}

impl<'s> Emitter<'s> {
    fn new(snapshots: &'s [Lsn], bottom: bool) -> Self {
        Emitter {
            snapshots,
            bottom,
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
        for &i in &self.kept {
            let (s, kl, vl) = spans[i];
            out.builder.add(&buf[s..s + kl], &buf[s + kl..s + kl + vl])?;
            result.stats.entries_out += 1;
        }
        self.buf.clear();
        self.spans.clear();
        Ok(())
    }
}

/// Decodes and merges overlapping blocks, applying the GC rule per user key.
fn merge_blocks(
    store: &ExtentStore,
    snapshots: &[Lsn],
    bottom: bool,
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
    let mut emit = Emitter::new(snapshots, bottom);
    while let Some((k, v)) = merged.peek() {
        emit.push(k, v, out, result)?;
        merged.pop()?;
    }
    emit.finish(out, result)?;
    result.stats.bytes_read += merged.sources.iter().map(|s| s.bytes_read).sum::<u64>();
    Ok(())
}
