//! Entry streams for compaction: every entry of one data block ([`BlockEntries`]) and the
//! merge of several streams in internal-key order ([`MergingEntries`]).

use crate::error::Result;
use crate::extent::{Block, BlockIter};
use crate::key::compare_internal_keys;
use std::cmp::Ordering;
use std::sync::Arc;

/// A sorted stream of (internal key, value) entries.
pub(crate) trait EntrySource {
    /// Moves to the next entry (the first one on the first call); false at the end.
    fn advance(&mut self) -> Result<bool>;
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
}

/// Every entry of one decoded data block.
pub(crate) struct BlockEntries {
    iter: BlockIter,
    started: bool,
}

impl BlockEntries {
    pub(crate) fn new(block: Arc<Block>) -> Self {
        BlockEntries {
            iter: BlockIter::new(block),
            started: false,
        }
    }
}

impl EntrySource for BlockEntries {
    fn advance(&mut self) -> Result<bool> {
        if self.started {
            self.iter.next();
        } else {
            self.iter.seek_to_first();
            self.started = true;
        }
        self.iter.status()?;
        Ok(self.iter.valid())
    }

    fn key(&self) -> &[u8] {
        self.iter.key()
    }

    fn value(&self) -> &[u8] {
        self.iter.value()
    }
}

/// The merge of several streams by internal key (a linear scan over the few sources).
pub(crate) struct MergingEntries<S: EntrySource> {
    pub(crate) sources: Vec<S>,
    live: Vec<bool>,
}

impl<S: EntrySource> MergingEntries<S> {
    pub(crate) fn new(mut sources: Vec<S>) -> Result<Self> {
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
