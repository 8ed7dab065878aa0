//! [`LevelCursor`]: a cursor by user key over one sorted run of extents (an L0 layer, L1 or L2)
//! at one snapshot, for the merging iterator.
//!
//! Invariants:
//! - When valid, the cursor is on user key `key` and `version` is the newest version of it
//!   with LSN <= the snapshot (None if every version is newer).
//! - Forward mode: the underlying entry position is the first entry of the *next* user key
//!   (or the end). Backward mode: it is the last entry of the *previous* user key (or before
//!   the start). `next` is only called in forward mode and `prev` in backward mode (the merging
//!   iterator re-seeks on a change of direction).
//! - The first I/O or corruption error makes the cursor invalid and is kept in `error`.
//! - A seek reads one block; stepping on into the next block of the same extent tells the
//!   store the extent is being scanned (an object-tier extent is then read whole).

use crate::error::{Error, Result};
use crate::extent::BlockIter;
use crate::extent_store::{ExtentStore, LiveExtent, OpenExtent};
use crate::key::{decode_internal_key, Lsn, ValueKind};
use crate::version::Layer;
use std::sync::Arc;

/// Position of the underlying entry iterator.
struct Position {
    extent: usize,
    open: Arc<OpenExtent>,
    block: usize,
    iter: BlockIter,
}

/// A cursor over one layer; see the module header.
pub(crate) struct LevelCursor {
    store: Arc<ExtentStore>,
    layer: Arc<Layer>,
    snapshot: Lsn,
    pos: Option<Position>,
    valid: bool,
    key: Vec<u8>,
    version: Option<(Lsn, ValueKind)>,
    value: Vec<u8>,
    error: Option<Error>,
    /// The extent the store was last told is being scanned (`usize::MAX`: none), so it is
    /// told once per extent.
    scanning: std::cell::Cell<usize>,
}

impl LevelCursor {
    pub(crate) fn new(store: Arc<ExtentStore>, layer: Arc<Layer>, snapshot: Lsn) -> Self {
        LevelCursor {
            store,
            layer,
            snapshot,
            pos: None,
            valid: false,
            key: Vec::new(),
            version: None,
            value: Vec::new(),
            error: None,
            scanning: std::cell::Cell::new(usize::MAX),
        }
    }

    /// Tells the store, once per extent, that extent `i` is being scanned.
    fn note_scanning(&self, i: usize) {
        if self.scanning.get() != i {
            self.scanning.set(i);
            self.store.scanning(self.extent(i));
        }
    }

    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    pub(crate) fn key(&self) -> &[u8] {
        if self.valid {
            &self.key
        } else {
            &[]
        }
    }

    /// The newest version of the current key visible at the snapshot.
    pub(crate) fn version(&self) -> Option<(Lsn, ValueKind, &[u8])> {
        if !self.valid {
            return None;
        }
        self.version.map(|(l, k)| (l, k, self.value.as_slice()))
    }

    pub(crate) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
        self.valid = false;
        self.pos = None;
    }

    fn extent(&self, i: usize) -> &Arc<LiveExtent> {
        &self.layer.extents[i]
    }

    /// Opens block `block` of extent `extent` (an iterator not yet positioned).
    fn load(&self, extent: usize, block: usize, open: Option<Arc<OpenExtent>>) -> Result<Position> {
        let e = self.extent(extent);
        let open = match open {
            Some(o) => o,
            None => self.store.open(e)?.clone(),
        };
        let b = self.store.block(e, &open, block)?;
        Ok(Position {
            extent,
            open,
            block,
            iter: BlockIter::new(b),
        })
    }

    /// Underlying position on the first entry of extent `extent`, or the first entry after it.
    fn first_from(&self, mut extent: usize) -> Result<Option<Position>> {
        while extent < self.layer.extents.len() {
            let open = self.store.open(self.extent(extent))?;
            if !open.reader.index().is_empty() {
                let mut p = self.load(extent, 0, Some(open.clone()))?;
                p.iter.seek_to_first();
                p.iter.status()?;
                if p.iter.valid() {
                    return Ok(Some(p));
                }
            }
            extent += 1;
        }
        Ok(None)
    }

    /// Underlying position on the last entry of extent `extent` (exclusive upper: `extent` is
    /// one past the extent to start from), or the last entry before it.
    fn last_before(&self, mut extent: usize) -> Result<Option<Position>> {
        while extent > 0 {
            extent -= 1;
            let open = self.store.open(self.extent(extent))?;
            let blocks = open.reader.index().len();
            if blocks > 0 {
                let mut p = self.load(extent, blocks - 1, Some(open.clone()))?;
                p.iter.seek_to_last();
                p.iter.status()?;
                if p.iter.valid() {
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }

    /// Advances the underlying position by one entry, crossing blocks and extents.
    fn step_forward(&self, mut p: Position) -> Result<Option<Position>> {
        p.iter.next();
        p.iter.status()?;
        if p.iter.valid() {
            return Ok(Some(p));
        }
        let mut block = p.block + 1;
        if block < p.open.reader.index().len() {
            // A cursor reading on from one block to the next is scanning: an object-tier
            // extent is read whole into the extent cache (seed 003), not block by block.
            self.note_scanning(p.extent);
        }
        while block < p.open.reader.index().len() {
            let mut q = self.load(p.extent, block, Some(p.open.clone()))?;
            q.iter.seek_to_first();
            q.iter.status()?;
            if q.iter.valid() {
                return Ok(Some(q));
            }
            block += 1;
        }
        // Crossing into the next extent: the one after it is read ahead.
        if let Some(next) = self.layer.extents.get(p.extent + 2) {
            self.store.prefetch_ahead(next);
        }
        self.first_from(p.extent + 1)
    }

    /// Moves the underlying position back by one entry, crossing blocks and extents.
    fn step_backward(&self, mut p: Position) -> Result<Option<Position>> {
        p.iter.prev();
        p.iter.status()?;
        if p.iter.valid() {
            return Ok(Some(p));
        }
        let mut block = p.block;
        if block > 0 {
            self.note_scanning(p.extent);
        }
        while block > 0 {
            block -= 1;
            let mut q = self.load(p.extent, block, Some(p.open.clone()))?;
            q.iter.seek_to_last();
            q.iter.status()?;
            if q.iter.valid() {
                return Ok(Some(q));
            }
        }
        self.last_before(p.extent)
    }

    /// Underlying position on the first entry >= `target` (an internal key).
    fn seek_entry(&self, target: &[u8]) -> Result<Option<Position>> {
        let Some(extent) = self.layer.find(target) else {
            return Ok(None);
        };
        let open = self.store.open(self.extent(extent))?;
        let Some(block) = open.reader.find_block(target) else {
            return self.first_from(extent + 1);
        };
        let mut p = self.load(extent, block, Some(open.clone()))?;
        p.iter.seek(target);
        p.iter.status()?;
        if p.iter.valid() {
            return Ok(Some(p));
        }
        // The index said this block's last key is >= target; be robust anyway.
        let last = p.open.reader.index().len() - 1;
        p.iter.seek_to_last();
        if p.block == last {
            return self.first_from(extent + 1);
        }
        self.step_forward(p)
    }

    fn decode<'a>(&self, p: &'a Position) -> Result<(&'a [u8], Lsn, ValueKind)> {
        decode_internal_key(p.iter.key()).ok_or_else(|| {
            Error::corruption(
                p.open.reader.path(),
                p.open.reader.index()[p.block].offset,
                "malformed internal key in a block whose checksum matches",
            )
        })
    }

    /// From an underlying position on the first entry of a user key, loads that key and moves
    /// the position to the first entry of the next key.
    fn settle_forward(&mut self, pos: Option<Position>) {
        self.settle(pos, true);
    }

    /// From an underlying position on the last entry of a user key, loads that key and moves
    /// the position to the last entry of the previous key.
    fn settle_backward(&mut self, pos: Option<Position>) {
        self.settle(pos, false);
    }

    /// Loads the user key at `pos` and the newest version of it visible at the snapshot, then
    /// moves past all its entries (forward: entries come newest first; backward: oldest first,
    /// so the last visible one seen is the newest).
    fn settle(&mut self, pos: Option<Position>, forward: bool) {
        let result = (|| -> Result<Option<Position>> {
            let Some(mut p) = pos else {
                self.valid = false;
                return Ok(None);
            };
            let (uk, _, _) = self.decode(&p)?;
            self.key.clear();
            self.key.extend_from_slice(uk);
            self.version = None;
            loop {
                let (uk, lsn, kind) = self.decode(&p)?;
                if uk != self.key.as_slice() {
                    break;
                }
                if lsn <= self.snapshot && (!forward || self.version.is_none()) {
                    self.version = Some((lsn, kind));
                    self.value.clear();
                    self.value.extend_from_slice(p.iter.value());
                }
                let next = if forward {
                    self.step_forward(p)?
                } else {
                    self.step_backward(p)?
                };
                match next {
                    Some(q) => p = q,
                    None => {
                        self.valid = true;
                        return Ok(None);
                    }
                }
            }
            self.valid = true;
            Ok(Some(p))
        })();
        match result {
            Ok(p) => self.pos = p,
            Err(e) => self.fail(e),
        }
    }

    /// Positions on the first user key >= `user_key`.
    pub(crate) fn seek(&mut self, user_key: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let mut target = Vec::with_capacity(user_key.len() + 8);
        target.extend_from_slice(user_key);
        target.extend_from_slice(&u64::MAX.to_le_bytes());
        match self.seek_entry(&target) {
            Ok(p) => self.settle_forward(p),
            Err(e) => self.fail(e),
        }
    }

    /// Positions on the last user key <= `user_key`.
    pub(crate) fn seek_for_prev(&mut self, user_key: &[u8]) {
        if self.error.is_some() {
            return;
        }
        // The last possible internal key of `user_key` has tag 0.
        let mut target = Vec::with_capacity(user_key.len() + 8);
        target.extend_from_slice(user_key);
        target.extend_from_slice(&0u64.to_le_bytes());
        let result = (|| -> Result<Option<Position>> {
            match self.seek_entry(&target)? {
                None => self.last_before(self.layer.extents.len()),
                Some(p) => {
                    if crate::key::compare_internal_keys(p.iter.key(), &target) == std::cmp::Ordering::Greater {
                        self.step_backward(p)
                    } else {
                        Ok(Some(p))
                    }
                }
            }
        })();
        match result {
            Ok(p) => self.settle_backward(p),
            Err(e) => self.fail(e),
        }
    }

    pub(crate) fn seek_to_first(&mut self) {
        if self.error.is_some() {
            return;
        }
        match self.first_from(0) {
            Ok(p) => self.settle_forward(p),
            Err(e) => self.fail(e),
        }
    }

    pub(crate) fn seek_to_last(&mut self) {
        if self.error.is_some() {
            return;
        }
        match self.last_before(self.layer.extents.len()) {
            Ok(p) => self.settle_backward(p),
            Err(e) => self.fail(e),
        }
    }

    /// Next user key (forward mode only).
    pub(crate) fn next(&mut self) {
        if !self.valid {
            return;
        }
        let p = self.pos.take();
        self.settle_forward(p);
    }

    /// Previous user key (backward mode only).
    pub(crate) fn prev(&mut self) {
        if !self.valid {
            return;
        }
        let p = self.pos.take();
        self.settle_backward(p);
    }
}
