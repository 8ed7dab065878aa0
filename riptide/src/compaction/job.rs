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
use super::merge::{ChainedBlocks, MergingEntries};
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
    /// Rewrite every input, even one alone in its closed range: no extent is left in place or
    /// re-linked (manual compactions, self-major; blocks may still be copied when `reuse`).
    pub(crate) force: bool,
    /// Sorted user keys no output extent may reach across: the smallest keys of output-level
    /// extents between the inputs that are not inputs, and for a split the smallest keys of the
    /// L2 extents in the inputs' range.
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
    pub(crate) input_extents: u64,
    pub(crate) extents_reused: u64,
    pub(crate) blocks_reused: u64,
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
        let i = self.fences.partition_point(|f| f.as_slice() <= key);
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
        let full = std::mem::replace(&mut self.builder, ExtentBuilder::new(self.opts.clone()));
        let built = full.finish()?;
        let id = self.store.space.allocate(built.slots)?;
        // Registered before the write so a failure frees the slots too.
        self.written.push((id, built));
        let (id, built) = self.written.last_mut().expect("just pushed");
        self.store
            .space
            .write_extent(*id, built.slots, &built.valid, &built.footer)?;
        // On disk now (the job syncs before installing): keep only the metadata, so a job's
        // memory is one extent's worth however much it writes.
        built.valid = Vec::new();
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
}

type Group = Vec<(u8, u64, Arc<LiveExtent>)>;

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
    let mut tasks: Vec<Vec<Group>> = Vec::new();
    let mut size = usize::MAX;
    for g in groups {
        if size >= units.task_extents.max(1) {
            tasks.push(Vec::new());
            size = 0;
        }
        size += g.len();
        tasks.last_mut().expect("pushed above").push(g);
    }
    let prefetch = |task: &[Group]| {
        for (_, _, e) in task.iter().flatten() {
            if let Ok((file, _, base)) = store.space.locate(e.id) {
                file.prefetch(base, e.meta.data_size);
            }
        }
    };
    let cpu = |task: &[Group]| run_task(store, plan, &opts, snapshots, task);
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
    task: &[Group],
) -> Result<TaskResult> {
    let mut result = TaskResult::default();
    let mut written = Vec::new();
    let mut out = Output {
        store,
        builder: ExtentBuilder::new(opts.clone()),
        opts: opts.clone(),
        written: &mut written,
        fences: &plan.fences,
        passed: 0,
    };
    let outcome = (|| -> Result<()> {
        for group in task {
            let lo = group
                .iter()
                .map(|(_, _, e)| user_part(&e.meta.smallest))
                .min()
                .unwrap_or_default();
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
            merge_group(store, plan, snapshots, group, &mut out, &mut result)?;
            result.consumed.extend(group.iter().cloned());
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
    out: &mut Output<'_>,
    result: &mut TaskResult,
) -> Result<()> {
    let opens: Vec<Arc<OpenExtent>> = group
        .iter()
        .map(|(_, _, e)| store.open(e).cloned())
        .collect::<Result<_>>()?;
    let mut blocks: Vec<BlockRef<'_>> = Vec::new();
    for ((level, layer, e), open) in group.iter().zip(&opens) {
        for (i, ie) in open.reader.index().iter().enumerate() {
            blocks.push(BlockRef {
                run: (*level, *layer),
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
            // A block with a fence inside is merged (cut row by row), never copied whole.
            let purge = plan.bottom && entry.deletes > 0;
            if !purge && !out.fence_within(b.lo, b.hi) {
                out.cross_fences(b.lo)?;
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
    result: &mut TaskResult,
) -> Result<()> {
    // One stream per input run: a run's blocks are disjoint and (from the sweep) in key order.
    type RunBlocks<'b> = ((u8, u64), Vec<(&'b OpenExtent, usize)>);
    let mut runs: Vec<RunBlocks<'_>> = Vec::new();
    let mut cached = false;
    for b in blocks {
        let entry = &b.open.reader.index()[b.index];
        cached |= store.blocks.contains(&crate::cache::BlockKey {
            extent: b.extent.cache_id,
            offset: entry.offset,
        });
        match runs.iter_mut().find(|(r, _)| *r == b.run) {
            Some((_, list)) => list.push((b.open, b.index)),
            None => runs.push((b.run, vec![(b.open, b.index)])),
        }
    }
    let sources: Vec<ChainedBlocks<'_>> = runs.into_iter().map(|(_, list)| ChainedBlocks::new(list)).collect();
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
            if !kept.is_empty() {
                out.cross_fences(user_part(&versions[0].0))?;
            }
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
    result.stats.bytes_read += merged.sources.iter().map(|s| s.bytes_read).sum::<u64>();
    Ok(())
}
