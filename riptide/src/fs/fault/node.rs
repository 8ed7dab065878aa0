//! One [`FaultFs`](super::FaultFs) file: its content, its undo log of unsynced changes, and
//! what a crash leaves of it.
//!
//! Invariants:
//! - Every file is a node holding `data`, `synced_len` and `undo`, an undo log of the positional
//!   changes since the last sync. Let `base_len` be the length `data` had before the first undo
//!   entry (`data.len()` when the log is empty); then `synced_len <= base_len` at all times.
//!   The node's durable content is `data` with every undo entry rolled back (newest first), cut
//!   to `synced_len`.
//! - Appends (of a `WritableFile`) only grow `data`; they are logged as an undo entry only when
//!   the log is not empty (a file that is only ever appended to keeps an empty log, and behaves
//!   exactly as plain append-only bookkeeping). `write_at` and `set_len` (of a `RandomRwFile`)
//!   always push an undo entry `(offset, previous bytes, previous length)` before changing
//!   `data`; `previous bytes` covers only the overwritten or cut range inside the old length, so
//!   rolling back is `data.resize(previous length)` then copying the previous bytes back.
//! - `sync` (either handle's `sync_data`) sets `synced_len = data.len()` and clears the undo
//!   log. `truncate` resizes `data` (zero-filling when growing, like `set_len`) and then syncs,
//!   like `set_len` plus `fsync`.
//! - A crash image under [`CrashMode::KeepRandomPrefix`](super::CrashMode::KeepRandomPrefix)
//!   keeps a random number `k` of the logged changes, in order (rolling back only the rest);
//!   when `k = 0`, and for every node without a log, it also keeps a random byte prefix of the
//!   unsynced appended bytes. When the first change not kept is a `write_at` (and, for `k = 0`,
//!   every unsynced appended byte was kept), a random byte prefix of that write is kept too: a
//!   torn positional write. So a crashed file always holds its synced content plus possibly
//!   an in-order prefix of the later changes. A node without a log draws exactly as it did
//!   before undo logs existed.
//! - Under [`CrashMode::KeepRandomSectors`](super::CrashMode::KeepRandomSectors) the image is
//!   the synced content, cut to the synced length, in which every [`SECTOR`] an unsynced
//!   `write_at` touched holds, at random, its synced content or its whole content after one
//!   of those writes: a device persists any subset of the sectors in flight when the power
//!   goes, each as some writeback found it, so later bytes can survive where earlier ones did
//!   not (but never half of a sector). Appends and length changes are dropped.

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

/// One file's content.
pub(super) struct Node {
    /// Everything written so far (what readers see).
    pub(super) data: Vec<u8>,
    /// How many leading bytes of `data`, after rolling back `undo`, survive a crash.
    pub(super) synced_len: usize,
    /// Unsynced positional changes (and appends after the first of them), oldest first.
    pub(super) undo: Vec<Undo>,
}

/// How to roll back one unsynced change.
pub(super) struct Undo {
    /// Where `prev` goes back.
    pub(super) offset: usize,
    /// The bytes the change overwrote or cut off, within the old length only.
    pub(super) prev: Vec<u8>,
    /// The length before the change.
    pub(super) prev_len: usize,
    /// For a `write_at`, the range it wrote (what a torn write keeps a prefix of).
    pub(super) written: Option<(usize, usize)>,
}

impl Undo {
    pub(super) fn roll_back(&self, data: &mut Vec<u8>) {
        data.resize(self.prev_len, 0);
        data[self.offset..self.offset + self.prev.len()].copy_from_slice(&self.prev);
    }
}

impl Node {
    /// Logs that the bytes `[offset, end)` and the length are about to change.
    pub(super) fn log(&mut self, offset: usize, end: usize) {
        let old = self.data.len();
        let start = offset.min(old);
        let stop = end.clamp(start, old);
        let prev = self.data[start..stop].to_vec();
        self.undo.push(Undo {
            offset: start,
            prev,
            prev_len: old,
            written: None,
        });
    }

    pub(super) fn append(&mut self, data: &[u8]) {
        if !self.undo.is_empty() {
            let len = self.data.len();
            self.log(len, len);
        }
        self.data.extend_from_slice(data);
    }

    pub(super) fn write_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "offset too large");
        let offset = usize::try_from(offset).map_err(|_| too_large())?;
        let end = offset.checked_add(data.len()).ok_or_else(too_large)?;
        self.log(offset, end);
        if let Some(u) = self.undo.last_mut() {
            u.written = Some((offset, end));
        }
        if end > self.data.len() {
            self.data.resize(end, 0);
        }
        self.data[offset..end].copy_from_slice(data);
        Ok(())
    }

    pub(super) fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        self.log(len, usize::MAX);
        self.data.resize(len, 0);
        Ok(())
    }

    /// Everything so far becomes durable.
    pub(super) fn sync(&mut self) {
        self.synced_len = self.data.len();
        self.undo.clear();
    }

    /// What a crash leaves of this node under
    /// [`CrashMode::KeepRandomSectors`](super::CrashMode::KeepRandomSectors).
    pub(super) fn crash_image_sectors(&self, rng: &mut StdRng) -> Vec<u8> {
        let mut data = self.data.clone();
        // Per sector an unsynced write touched: its content after each such write, newest first.
        let mut versions: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
        for u in self.undo.iter().rev() {
            if let Some((offset, end)) = u.written {
                for sector in offset / SECTOR..end.div_ceil(SECTOR) {
                    let range = sector * SECTOR..((sector + 1) * SECTOR).min(data.len());
                    versions.entry(sector).or_default().push(data[range].to_vec());
                }
            }
            u.roll_back(&mut data);
        }
        data.truncate(self.synced_len);
        // Each sector inside the synced length: as synced, or as some write left it.
        for (sector, mut newest_first) in versions {
            newest_first.reverse();
            let pick = rng.random_range(0..=newest_first.len());
            let at = sector * SECTOR;
            if pick > 0 && at < data.len() {
                let bytes = &newest_first[pick - 1];
                let n = bytes.len().min(data.len() - at);
                data[at..at + n].copy_from_slice(&bytes[..n]);
            }
        }
        data
    }

    /// What a crash leaves of this node; `rng` is `Some` under [`CrashMode::KeepRandomPrefix`].
    pub(super) fn crash_image(&self, mut rng: Option<&mut StdRng>) -> Vec<u8> {
        let mut data = self.data.clone();
        let mut kept_changes = 0;
        if let Some(rng) = rng.as_deref_mut() {
            if !self.undo.is_empty() {
                kept_changes = rng.random_range(0..=self.undo.len());
            }
        }
        let mut torn: Option<(usize, Vec<u8>)> = None;
        for (i, u) in self.undo.iter().enumerate().skip(kept_changes).rev() {
            if let (true, Some(rng), Some((offset, end))) = (i == kept_changes, rng.as_deref_mut(), u.written) {
                // `data` is the file right after this write: keep a prefix of what it wrote.
                let cut = rng.random_range(0..=end - offset);
                torn = Some((offset, data[offset..offset + cut].to_vec()));
            }
            u.roll_back(&mut data);
        }
        let before_torn_write = data.len();
        if kept_changes == 0 {
            // `data` is back at `base_len`: the synced bytes plus unsynced appends.
            let unsynced = data.len() - self.synced_len;
            let mut keep = self.synced_len;
            if let Some(rng) = rng {
                if unsynced > 0 {
                    keep += rng.random_range(0..=unsynced);
                }
            }
            data.truncate(keep);
        }
        if let Some((offset, bytes)) = torn.filter(|(_, b)| !b.is_empty() && data.len() == before_torn_write) {
            let end = offset + bytes.len();
            if end > data.len() {
                data.resize(end, 0);
            }
            data[offset..end].copy_from_slice(&bytes);
        }
        data
    }
}

/// The unit a device persists whole (or not at all) under
/// [`CrashMode::KeepRandomSectors`](super::CrashMode::KeepRandomSectors).
pub(super) const SECTOR: usize = 512;

pub(super) type NodeRef = Arc<Mutex<Node>>;

pub(super) fn new_node(data: Vec<u8>) -> NodeRef {
    Arc::new(Mutex::new(Node {
        synced_len: data.len(),
        data,
        undo: Vec::new(),
    }))
}
