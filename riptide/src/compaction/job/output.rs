//! The output side of one compaction task: one extent builder at a time, written into fresh
//! slots as it fills.
//!
//! Invariants:
//! - Extents are cut only between user keys, and at every fence of the plan: no output extent
//!   reaches across a fence (the key of an extent the job leaves in place).
//! - Every extent written is recorded in `written` before its bytes are written, so a failed
//!   task frees exactly the slots it took.
//! - Only the metadata of a written extent is kept; its byte buffer builds a later extent, so a
//!   task holds about two extents' worth of memory however much it writes.

use crate::error::Result;
use crate::extent::{BuiltExtent, ExtentBuilder, ExtentOptions, EXTENT_SIZE};
use crate::extent_store::ExtentStore;
use crate::space::ExtentId;
use crate::tier::Tier;

/// The output side of a job: one extent builder at a time, cut only between user keys, and
/// at every fence (an output extent never reaches across one).
pub(super) struct Output<'a> {
    pub(super) store: &'a ExtentStore,
    pub(super) opts: ExtentOptions,
    pub(super) builder: ExtentBuilder,
    /// The byte buffer of the last extent written, for the next builder.
    pub(super) spare: Vec<u8>,
    pub(super) written: &'a mut Vec<(ExtentId, BuiltExtent)>,
    /// Where the output extents go.
    pub(super) tier: Tier,
    /// The plan's fences (sorted user keys).
    pub(super) fences: &'a [Vec<u8>],
    /// Fences at or below the last key added.
    pub(super) passed: usize,
}

impl Output<'_> {
    /// Called before adding user key `key` (keys come in increasing order): closes the current
    /// extent if a fence lies between the previous key and `key`.
    pub(super) fn cross_fences(&mut self, key: &[u8]) -> Result<()> {
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
    pub(super) fn fence_within(&self, lo: &[u8], hi: &[u8]) -> bool {
        let i = self.fences.partition_point(|f| f.as_slice() <= lo);
        self.fences.get(i).is_some_and(|f| f.as_slice() <= hi)
    }

    /// Finishes the current extent, if any, and writes it into fresh slots.
    pub(super) fn close(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let next = ExtentBuilder::with_buffer(self.opts.clone(), std::mem::take(&mut self.spare));
        let full = std::mem::replace(&mut self.builder, next);
        let built = full.finish()?;
        let id = self.store.allocate(built.slots, self.tier)?;
        // Registered before the write so a failure frees the slots too.
        self.written.push((id, built));
        let (id, built) = self.written.last_mut().expect("just pushed");
        self.store.write_extent(*id, built.slots, &built.valid, &built.footer)?;
        // On disk now (the job syncs before installing): keep only the metadata, so a job's
        // memory is two extents' worth however much it writes. The bytes' buffer builds the
        // extent after next.
        self.spare = std::mem::take(&mut built.valid);
        Ok(())
    }

    /// Starts a new extent first if `bytes` more would overflow this one.
    pub(super) fn make_room(&mut self, bytes: usize) -> Result<()> {
        if !self.builder.is_empty() && self.builder.estimated_size() + bytes > EXTENT_SIZE as usize {
            self.close()?;
        }
        Ok(())
    }
}
