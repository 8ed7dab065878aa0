//! Closed ranges and pieces: how a job's input extents (and, inside a closed range, their
//! data blocks) are grouped so that every group can be rewritten independently.
//!
//! Invariants:
//! - A closed range is a maximal set of items whose user-key ranges overlap, transitively; no
//!   user key lies in two closed ranges, so ranges never interact.
//! - A closed range larger than a task is cut only between its block groups, into [`Piece`]s
//!   whose chunks cover every block exactly once; exactly one piece of a range (the first)
//!   takes the range's extents out of the metadata.

use super::Units;
use crate::error::Result;
use crate::extent::EXTENT_SIZE;
use crate::extent_store::{user_part, ExtentStore, LiveExtent, OpenExtent};
use std::sync::Arc;

/// One input data block.
pub(super) struct BlockRef<'a> {
    /// The run (level, layer) the block belongs to: blocks of one run never overlap.
    pub(super) run: (u8, u64),
    pub(super) open: &'a OpenExtent,
    pub(super) extent: &'a LiveExtent,
    pub(super) index: usize,
    pub(super) lo: &'a [u8],
    pub(super) hi: &'a [u8],
}

/// Groups items into closed ranges of overlapping `[lo, hi]` user-key ranges, in key order.
pub(super) fn closed_ranges<T>(mut items: Vec<T>, range: impl Fn(&T) -> (&[u8], &[u8])) -> Vec<Vec<T>> {
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

pub(super) type Group = Vec<(u8, u64, Arc<LiveExtent>)>;

/// The smallest piece a closed range is cut into, in extents' worth of input blocks.
const MIN_PIECE_EXTENTS: u64 = 16;

/// Part of a task: a closed range, whole or (when it is larger than a task) only the blocks of
/// it inside `chunk`. A chunk's bounds are the ends of consecutive runs of block groups, and
/// block groups are closed ranges of user keys, so the pieces of one closed range are
/// independent: every block lies inside exactly one piece, no user key spans two, and their
/// outputs never overlap.
pub(super) struct Piece {
    pub(super) group: Group,
    pub(super) chunk: Option<Chunk>,
}

/// The user-key bounds of a piece of a closed range.
pub(super) struct Chunk {
    pub(super) lo: Vec<u8>,
    pub(super) hi: Vec<u8>,
    /// The range's first piece: the one that takes its input extents out of the metadata.
    pub(super) first: bool,
}

impl Chunk {
    /// Whether a block or extent spanning the user keys `[lo, hi]` reaches into this piece.
    pub(super) fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        hi >= self.lo.as_slice() && lo <= self.hi.as_slice()
    }
}

impl Piece {
    /// Whether this piece takes the range's input extents out of the metadata (exactly one
    /// piece of a range does).
    pub(super) fn consumes(&self) -> bool {
        self.chunk.as_ref().is_none_or(|c| c.first)
    }
}

/// The open readers of a closed range's extents.
pub(super) fn open_group(store: &ExtentStore, group: &[(u8, u64, Arc<LiveExtent>)]) -> Result<Vec<Arc<OpenExtent>>> {
    group.iter().map(|(_, _, e)| store.open(e).cloned()).collect()
}

/// The data blocks of a closed range's extents (from their indexes, nothing read), grouped
/// into closed ranges of user keys, in key order; with a `chunk`, only the blocks inside it
/// (which are whole block groups of the range, see [`Piece`]).
pub(super) fn block_groups<'a>(
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
pub(super) fn split_range(store: &ExtentStore, group: &Group, units: Units, task_extents: u64) -> Result<Vec<Piece>> {
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
