//! Entry streams for compaction: every entry of one data block ([`BlockEntries`]) and the
//! merge of several streams in internal-key order ([`MergingEntries`]).

use crate::error::Result;
use crate::extent::{Block, BlockIter};
use crate::extent_store::OpenExtent;
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

/// Every entry of a run's blocks in order, read one block at a time (a closed range of
/// blocks can hold thousands of blocks per run: they are neither all read up front nor merged
/// as separate streams).
pub(crate) struct ChainedBlocks<'a> {
    blocks: Vec<(&'a OpenExtent, usize)>,
    next: usize,
    current: Option<BlockEntries>,
    /// Stored bytes of the blocks read so far.
    pub(crate) bytes_read: u64,
}

impl<'a> ChainedBlocks<'a> {
    /// `blocks` must be in key order and from one run (so they do not overlap).
    pub(crate) fn new(blocks: Vec<(&'a OpenExtent, usize)>) -> Self {
        ChainedBlocks {
            blocks,
            next: 0,
            current: None,
            bytes_read: 0,
        }
    }
}

impl EntrySource for ChainedBlocks<'_> {
    fn advance(&mut self) -> Result<bool> {
        loop {
            if let Some(c) = &mut self.current {
                if c.advance()? {
                    return Ok(true);
                }
            }
            let Some(&(open, i)) = self.blocks.get(self.next) else {
                self.current = None;
                return Ok(false);
            };
            self.next += 1;
            let block = open.reader.read_block(open.file.as_ref(), i)?;
            self.bytes_read += u64::from(open.reader.index()[i].size);
            self.current = Some(BlockEntries::new(Arc::new(block)));
        }
    }

    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.key())
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.value())
    }
}

/// The merge of several streams by internal key (a linear scan over the few sources: one per
/// input run). Entries are read in place ([`MergingEntries::peek`]) and stepped over
/// ([`MergingEntries::pop`]); nothing is copied.
pub(crate) struct MergingEntries<S: EntrySource> {
    pub(crate) sources: Vec<S>,
    live: Vec<bool>,
    /// The source holding the smallest current entry.
    best: Option<usize>,
}

impl<S: EntrySource> MergingEntries<S> {
    pub(crate) fn new(mut sources: Vec<S>) -> Result<Self> {
        let mut live = Vec::with_capacity(sources.len());
        for s in &mut sources {
            live.push(s.advance()?);
        }
        let mut m = MergingEntries {
            sources,
            live,
            best: None,
        };
        m.pick();
        Ok(m)
    }

    fn pick(&mut self) {
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
        self.best = best;
    }

    /// The smallest current entry (internal key, value), or `None` at the end.
    pub(crate) fn peek(&self) -> Option<(&[u8], &[u8])> {
        self.best.map(|b| (self.sources[b].key(), self.sources[b].value()))
    }

    /// Steps past the entry [`MergingEntries::peek`] shows.
    pub(crate) fn pop(&mut self) -> Result<()> {
        if let Some(b) = self.best {
            self.live[b] = self.sources[b].advance()?;
            self.pick();
        }
        Ok(())
    }
}
