//! Entry streams for compaction: every entry of a sorted run of extents ([`RunEntries`]) and
//! the merge of several runs in internal-key order ([`MergingEntries`]).
//!
//! Compaction reads blocks straight from the extent (not through the block cache), so a large
//! merge does not evict the read path's hot blocks.

use crate::error::Result;
use crate::extent::BlockIter;
use crate::extent_store::{ExtentStore, LiveExtent, OpenExtent};
use crate::key::compare_internal_keys;
use std::cmp::Ordering;
use std::sync::Arc;

/// Every entry of a sorted run of extents, in order.
pub(crate) struct RunEntries {
    store: Arc<ExtentStore>,
    extents: Vec<Arc<LiveExtent>>,
    next_extent: usize,
    open: Option<Arc<OpenExtent>>,
    next_block: usize,
    iter: Option<BlockIter>,
}

impl RunEntries {
    pub(crate) fn new(store: Arc<ExtentStore>, extents: Vec<Arc<LiveExtent>>) -> Self {
        RunEntries {
            store,
            extents,
            next_extent: 0,
            open: None,
            next_block: 0,
            iter: None,
        }
    }

    /// Moves to the next entry (the first one on the first call); false at the end.
    fn advance(&mut self) -> Result<bool> {
        if let Some(it) = &mut self.iter {
            it.next();
            it.status()?;
            if it.valid() {
                return Ok(true);
            }
        }
        loop {
            if let Some(open) = &self.open {
                if self.next_block < open.reader.index().len() {
                    let block = open.reader.read_block(open.file.as_ref(), self.next_block)?;
                    self.next_block += 1;
                    let mut it = BlockIter::new(Arc::new(block));
                    it.seek_to_first();
                    it.status()?;
                    let valid = it.valid();
                    self.iter = Some(it);
                    if valid {
                        return Ok(true);
                    }
                    continue;
                }
            }
            if self.next_extent >= self.extents.len() {
                self.iter = None;
                return Ok(false);
            }
            let e = &self.extents[self.next_extent];
            self.next_extent += 1;
            self.open = Some(self.store.open(e)?);
            self.next_block = 0;
        }
    }

    fn key(&self) -> &[u8] {
        self.iter.as_ref().map_or(&[], |it| it.key())
    }

    fn value(&self) -> &[u8] {
        self.iter.as_ref().map_or(&[], |it| it.value())
    }
}

/// The merge of several runs by internal key (a linear scan over the few sources).
pub(crate) struct MergingEntries {
    sources: Vec<RunEntries>,
    live: Vec<bool>,
}

impl MergingEntries {
    pub(crate) fn new(mut sources: Vec<RunEntries>) -> Result<Self> {
        let mut live = Vec::with_capacity(sources.len());
        for s in &mut sources {
            live.push(s.advance()?);
        }
        Ok(MergingEntries { sources, live })
    }

    /// The next entry (internal key, value), or `None` at the end.
    pub(crate) fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut best: Option<usize> = None;
        for (i, s) in self.sources.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) if compare_internal_keys(s.key(), self.sources[b].key()) == Ordering::Less => Some(i),
                keep => keep,
            };
        }
        let Some(b) = best else {
            return Ok(None);
        };
        let entry = (self.sources[b].key().to_vec(), self.sources[b].value().to_vec());
        self.live[b] = self.sources[b].advance()?;
        Ok(Some(entry))
    }
}
