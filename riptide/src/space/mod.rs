//! The extent space: data files cut into 2 MiB slots, and which slots hold live extents
//! (see `docs/format.md`).
//!
//! Data files live in `<db>/data/` as `NNNNNN.dat` (six or more digits, numbered from 1). Slot 0
//! of every file holds the file header (two copies); slots `1..slots_per_file` hold extents. An
//! extent is `slots >= 1` consecutive slots of one file and is named by its first slot
//! ([`ExtentId`]).
//!
//! The rooms, each with its own invariants:
//! - `file`: one data file's slot bookkeeping (`used`, `free`, `unpunched`, length), all of it
//!   behind the one mutex, and data-file names;
//! - `header`: the data-file header copies in slot 0;
//! - `open`: opening and validating data files, and creating new ones durably;
//! - `recovery`: metadata names the live extents, then every other slot becomes free;
//! - `alloc`: allocating, freeing, hole punching and shrinking after recovery;
//! - `access`: writing, syncing and locating extent bytes;
//! - `readers`: leases of read-only views of a live database, and the slots held for them.
//!
//! Invariants (across the rooms):
//! - Metadata is the single source of truth for ownership. After [`ExtentSpace::open`] nothing is
//!   free and nothing can be allocated; recovery names every live extent with
//!   [`ExtentSpace::reference`], and [`ExtentSpace::finish_recovery`] frees every other slot.
//!   Bytes found in a free slot (an old footer) never make it used.
//! - Per file, `used` (first slot -> slot count) holds pairwise disjoint extents inside
//!   `1..len_slots`, and after recovery `free` plus the slots [`ExtentSpace::punch_free_slots`]
//!   is punching at the moment plus the slots held for read-only views (`readers`) is exactly
//!   the complement of `used` in `1..max_slots`. Every
//!   change to them happens under the one mutex.
//! - A failed operation changes no bookkeeping.
//! - A file's length is always a whole number of slots as written by this module (growth and
//!   shrinking use `set_len` to slot boundaries).
//! - Extent bytes are written outside the mutex: the caller owns an allocated extent, and shrink
//!   never cuts or deletes a used slot.

mod access;
mod alloc;
mod file;
pub(crate) mod header;
mod open;
pub(crate) mod readers;
mod recovery;
#[cfg(test)]
mod tests;

use crate::error::Error;
use crate::fs::FileSystem;
pub(crate) use file::{file_name as data_file_name, is_data_file_name};
use file::{file_name, Inner};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Size of one slot, and of a (one-slot) extent.
pub(crate) const EXTENT_SIZE: u64 = 2 << 20;
/// Bytes at the end of a slot that [`ExtentSpace::finish_recovery`] shows the footer check and
/// [`ExtentSpace::free`] zeroes.
pub(crate) const FOOTER_PROBE_LEN: usize = 64;
/// Name of the data directory inside the database directory.
pub(crate) const DATA_DIR: &str = "data";

/// Extent ids with this bit set name extents in the object tier (module `tier`): one object
/// each, no data file or slot. Data files are numbered below [`MAX_DATA_FILE_NUMBER`], so a
/// local extent's id never has it.
pub(crate) const OBJECT_ID_BIT: u64 = 1 << 63;
/// Data-file numbers stay below this (2^31).
pub(crate) const MAX_DATA_FILE_NUMBER: u32 = 1 << 31;

/// An extent's name: data-file number in the high 32 bits, first slot in the low 32 bits; or,
/// with [`OBJECT_ID_BIT`] set, a random number naming an object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub(crate) struct ExtentId(pub u64);

impl ExtentId {
    /// True if the extent lives in the object tier.
    pub(crate) fn is_object(self) -> bool {
        self.0 & OBJECT_ID_BIT != 0
    }

    /// The extent starting at `slot` of file `file`.
    pub(crate) fn new(file: u32, slot: u32) -> Self {
        ExtentId(u64::from(file) << 32 | u64::from(slot))
    }

    /// The data-file number.
    pub(crate) fn file(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The first slot.
    pub(crate) fn slot(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for ExtentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_object() {
            write!(f, "object {:016x}", self.0)
        } else {
            write!(f, "{}.{}", self.file(), self.slot())
        }
    }
}

/// Options of the extent space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpaceOptions {
    /// Slots per new data file, header slot included (default 5120: 10 GiB files). At least 2.
    pub extents_per_file: u32,
    /// Hold freed slots for read-only views (`readers`): a writer's space. Default false.
    pub watch_readers: bool,
}

impl Default for SpaceOptions {
    fn default() -> Self {
        SpaceOptions {
            extents_per_file: 5120,
            watch_readers: false,
        }
    }
}

/// What [`ExtentSpace::finish_recovery`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecoveryReport {
    /// Data files.
    pub files: usize,
    /// Slots of referenced extents.
    pub used_slots: u64,
    /// Extent slots inside the files' lengths that nobody references (now free).
    pub free_slots: u64,
    /// Free slots whose last [`FOOTER_PROBE_LEN`] bytes look like an extent footer: leftovers of
    /// crashed flushes or stale freed extents. They are free like any other.
    pub unowned_with_data: Vec<ExtentId>,
}

/// A snapshot of the space's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SpaceStats {
    /// Data files.
    pub files: usize,
    /// Extent slots inside the files' current lengths (header slots not counted).
    pub total_slots: u64,
    /// Slots of live extents.
    pub used_slots: u64,
    /// Slots inside the files' lengths held for read-only views (`readers`).
    pub held_slots: u64,
    /// `total_slots - used_slots - held_slots`.
    pub free_slots: u64,
    /// Free slots that may still hold disk blocks (kept for reuse, or not yet punched).
    pub unpunched_slots: u64,
    /// Sum of the data files' lengths.
    pub file_bytes: u64,
}

/// The data files and their slot bookkeeping. `Send + Sync`; every method takes `&self`.
pub(crate) struct ExtentSpace {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    opts: SpaceOptions,
    inner: Mutex<Inner>,
    /// Serializes listing the reader leases with acting on the listing (`readers`): taken
    /// before `inner`, never after.
    readers_listing: Mutex<()>,
    /// A view's reader lease (`readers`), dropped with the space.
    lease: Mutex<Option<readers::ReaderLease>>,
}

impl fmt::Debug for ExtentSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtentSpace")
            .field("dir", &self.dir)
            .field("opts", &self.opts)
            .field("stats", &self.stats())
            .finish()
    }
}

/// An error for a call the caller should not have made (a bug, not bad bytes).
fn misuse(op: &'static str, path: &Path, why: String) -> Error {
    Error::io(op, path, io::Error::new(io::ErrorKind::InvalidInput, why))
}

impl ExtentSpace {
    fn file_path(&self, number: u32) -> PathBuf {
        self.dir.join(file_name(number))
    }

    fn stats_of(inner: &Inner) -> SpaceStats {
        let mut s = SpaceStats {
            files: inner.files.len(),
            ..SpaceStats::default()
        };
        for f in inner.files.values() {
            s.total_slots += u64::from(f.len_slots - 1);
            s.used_slots += f.used_slots();
            s.held_slots += f.held.range(..f.len_slots).count() as u64;
            s.file_bytes += f.len;
        }
        s.free_slots = s.total_slots - s.used_slots - s.held_slots;
        s.unpunched_slots = inner.unpunched_slots();
        s
    }

    /// Free slots that may still hold disk blocks ([`SpaceStats::unpunched_slots`], without
    /// walking the extents).
    pub(crate) fn unpunched_slots(&self) -> u64 {
        self.inner.lock().unpunched_slots()
    }

    /// Counters of the current bookkeeping.
    pub(crate) fn stats(&self) -> SpaceStats {
        Self::stats_of(&self.inner.lock())
    }

    /// Bytes of disk the data files occupy (their allocated blocks, holes excluded); `None`
    /// where the file system cannot tell. Stats the files outside the lock.
    pub(crate) fn allocated_bytes(&self) -> Option<u64> {
        let paths: Vec<PathBuf> = self.inner.lock().files.values().map(|f| f.path.clone()).collect();
        let mut total = 0u64;
        for p in paths {
            match self.fs.allocated_bytes(&p) {
                Ok(Some(bytes)) => total = total.saturating_add(bytes),
                // Deleted since the list was taken (shrinking drops empty files).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                _ => return None,
            }
        }
        Some(total)
    }

    /// How many free slots may keep their disk blocks for reuse: at most `max`, and at most one
    /// for every `per_used` slots of live extents (none below that; 0 = no such limit), so that
    /// an idle database occupies little more than its extents.
    pub(crate) fn slots_to_keep(&self, max: u64, per_used: u64) -> u64 {
        if per_used == 0 {
            return max;
        }
        let used = Self::stats_of(&self.inner.lock()).used_slots;
        max.min(used / per_used)
    }

    /// `(number, path)` of every data file, by number.
    #[cfg(test)]
    pub(crate) fn data_files(&self) -> Vec<(u32, PathBuf)> {
        let inner = self.inner.lock();
        inner.files.iter().map(|(&n, f)| (n, f.path.clone())).collect()
    }
}
