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

mod output;
mod ranges;
mod rows;
mod task;
mod units;

use crate::error::Result;
use crate::extent::{BuiltExtent, ExtentOptions, EXTENT_SIZE};
use crate::extent_store::{user_part, ExtentStore, LiveExtent};
use crate::key::Lsn;
use crate::space::ExtentId;
use crate::tier::Tier;
use ranges::{closed_ranges, split_range, Piece};
use std::sync::Arc;
use task::run_task;

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

impl Plan {
    /// The output is the last level with nothing below: merged rows older than every snapshot
    /// are written with LSN 0 (`rows.rs`).
    pub(crate) fn zeroes_lsns(&self) -> bool {
        self.bottom && usize::from(self.out_level) == crate::version::LEVELS - 1
    }
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
    /// Of `blocks_reused`, blocks whose source extent was written with another codec than
    /// the output level's, recompressed (decompressed and compressed again, entries kept).
    pub(crate) blocks_recompressed: u64,
    pub(crate) blocks_merged: u64,
    /// Rows written into the last level with LSN 0 (see `rows.rs`).
    pub(crate) lsns_zeroed: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) entries_in: u64,
    pub(crate) entries_out: u64,
}

impl JobStats {
    pub(super) fn add(&mut self, o: &JobStats) {
        self.extents_reused += o.extents_reused;
        self.blocks_reused += o.blocks_reused;
        self.blocks_reused_decoded += o.blocks_reused_decoded;
        self.blocks_recompressed += o.blocks_recompressed;
        self.blocks_merged += o.blocks_merged;
        self.lsns_zeroed += o.lsns_zeroed;
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

/// How a job is split and run (seed 002's offload design with CPU units as the backend).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Units {
    /// Unit threads running tasks in parallel (1 = the job thread runs every task itself).
    pub(crate) units: usize,
    /// Most input per task, in extents' worth of data (tasks never split a closed range; a
    /// closed range of more extents than this is cut into pieces when there are several
    /// units).
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

/// The outcome of one task: outputs and moves of its closed ranges.
#[derive(Default)]
pub(super) struct TaskResult {
    pub(super) written: Vec<(ExtentId, BuiltExtent)>,
    pub(super) moved: Vec<(u8, u64, Arc<LiveExtent>)>,
    pub(super) consumed: Vec<(u8, u64, Arc<LiveExtent>)>,
    pub(super) hot: Vec<HotBlock>,
    pub(super) stats: JobStats,
}

/// Runs `plan`: groups the inputs into closed ranges, batches them into tasks, runs the tasks
/// on compaction units (decode → merge → encode, each task with its own output extents), and
/// collects the results in key order. A task a unit fails or rejects is run again by this
/// thread (the CPU path). Outputs are written, not yet synced.
pub(crate) fn run(
    store: &Arc<ExtentStore>,
    plan: &Plan,
    opts: ExtentOptions,
    tier: Tier,
    snapshots: &[Lsn],
    units: Units,
    result: &mut JobResult,
) -> Result<()> {
    let tasks = make_tasks(store, plan, units, result)?;
    let cpu = |task: &[Piece]| run_task(store, plan, &opts, tier, snapshots, task);
    let outcomes = units::run_tasks(store, &tasks, units, &cpu, result);
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

/// Groups the plan's inputs into closed ranges and batches them into tasks of about
/// `units.task_extents` extents' worth of input data; with several units, a range of more
/// extents than that is cut into pieces, one task each.
///
/// Batches close on data bytes, not on extent counts: every task writes its own output
/// extents, so a task of one sparse extent writes one sparse extent back. Counting extents
/// would make a self-major that packs sparse L2 extents with `task_extents = 1` rewrite them
/// one for one, find them still packable, and run again forever.
fn make_tasks(store: &ExtentStore, plan: &Plan, units: Units, result: &mut JobResult) -> Result<Vec<Vec<Piece>>> {
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
    let mut size = u64::MAX;
    let task_extents = units.task_extents.max(1);
    let task_bytes = (task_extents as u64).saturating_mul(EXTENT_SIZE);
    for g in groups {
        // A closed range larger than a task is cut between its block groups, so several units
        // can work on it (with one unit there is nothing to share, and cuts only cost extents).
        if units.units > 1 && g.len() > task_extents {
            let pieces = split_range(store, &g, units, task_extents as u64)?;
            if pieces.len() > 1 {
                result.stats.ranges_split += 1;
                tasks.extend(pieces.into_iter().map(|p| vec![p]));
                size = u64::MAX;
                continue;
            }
        }
        if size >= task_bytes {
            tasks.push(Vec::new());
            size = 0;
        }
        size = size.saturating_add(g.iter().map(|(_, _, e)| e.meta.data_size).sum());
        tasks
            .last_mut()
            .expect("pushed above")
            .push(Piece { group: g, chunk: None });
    }
    Ok(tasks)
}
