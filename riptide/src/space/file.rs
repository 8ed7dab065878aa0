//! One data file's slot bookkeeping ([`DataFile`]), the bookkeeping of all of them behind the
//! space's mutex ([`Inner`]), and data-file names.
//!
//! Invariants:
//! - `used` (first slot -> slot count) holds pairwise disjoint extents inside `1..len_slots`;
//!   `unpunched` is a subset of `free` inside `len_slots`; `held` is disjoint from both `used`
//!   and `free`.
//! - `len` and `len_slots` change only through [`DataFile::set_len`], and only after the file
//!   system accepted the new length; slots cut off hold no blocks (they leave `unpunched`).
//! - `len_slots` is the whole slots inside `len`, capped at `max_slots`, never below 1 (the
//!   header slot).

use super::EXTENT_SIZE;
use crate::fs::RandomRwFile;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// One data file.
pub(super) struct DataFile {
    pub(super) path: PathBuf,
    pub(super) handle: Arc<dyn RandomRwFile>,
    /// Slots this file may grow to, header slot included (from its header).
    pub(super) max_slots: u32,
    /// Current length in bytes.
    pub(super) len: u64,
    /// Whole slots inside `len` (at least 1: the header slot).
    pub(super) len_slots: u32,
    /// Live extents: first slot -> slot count.
    pub(super) used: BTreeMap<u32, u32>,
    /// Free slots in `1..max_slots` (filled by `finish_recovery`).
    pub(super) free: BTreeSet<u32>,
    /// Free slots inside `len_slots` that may still hold disk blocks (freed without a hole
    /// punched since, or found free at recovery); a subset of `free`.
    pub(super) unpunched: BTreeSet<u32>,
    /// First slots of allocated extents that took a slot still holding disk blocks: their
    /// gap may hold an older extent's bytes until the write punches it (`access.rs`).
    pub(super) stale_gaps: BTreeSet<u32>,
    /// Slots freed (or found free at open) while read-only views were open: neither free nor
    /// used until those views are gone (`readers.rs`).
    pub(super) held: BTreeSet<u32>,
}

impl DataFile {
    pub(super) fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.handle.set_len(len)?;
        self.len = len;
        self.len_slots = slots_in(len, self.max_slots);
        // Cut slots hold no blocks.
        let len_slots = self.len_slots;
        self.unpunched.retain(|&s| s < len_slots);
        Ok(())
    }

    /// The lowest first slot of `n` consecutive free slots.
    pub(super) fn find_free(&self, n: u32) -> Option<u32> {
        let (mut start, mut run) = (0u32, 0u32);
        for &s in &self.free {
            if run > 0 && s == start + run {
                run += 1;
            } else {
                (start, run) = (s, 1);
            }
            if run == n {
                return Some(start);
            }
        }
        None
    }

    pub(super) fn used_slots(&self) -> u64 {
        self.used.values().map(|&n| u64::from(n)).sum()
    }

    /// End (exclusive) of the last used slot; 1 (the header slot) when empty.
    pub(super) fn used_end(&self) -> u32 {
        self.used.last_key_value().map_or(1, |(&s, &n)| s + n)
    }

    /// End (exclusive) of the last slot a shrink must keep: used or held.
    pub(super) fn kept_end(&self) -> u32 {
        self.used_end().max(self.held.last().map_or(1, |&s| s + 1))
    }
}

/// Whole slots inside `len`, capped at `max_slots`, at least the header slot.
pub(super) fn slots_in(len: u64, max_slots: u32) -> u32 {
    (len / EXTENT_SIZE).clamp(1, u64::from(max_slots)) as u32
}

/// Everything behind the mutex.
pub(super) struct Inner {
    pub(super) files: BTreeMap<u32, DataFile>,
    /// `finish_recovery` has run: free lists are valid and allocation is allowed.
    pub(super) recovered: bool,
    /// Number for the next new data file.
    pub(super) next_file: u32,
    /// Slots held for read-only views, each batch with the leases it waits for
    /// (`readers.rs`); their slots are in the files' `held`.
    pub(super) holds: Vec<super::readers::Hold>,
}

impl Inner {
    /// Free slots that may still hold disk blocks, over all files.
    pub(super) fn unpunched_slots(&self) -> u64 {
        self.files.values().map(|f| f.unpunched.len() as u64).sum()
    }
}

/// `NNNNNN.dat` -> Some(N) for six or more digits and N >= 1.
pub(super) fn parse_name(name: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Numbers from 2^31 on would collide with object-tier extent ids (`super::OBJECT_ID_BIT`).
    digits
        .parse()
        .ok()
        .filter(|n| (1..super::MAX_DATA_FILE_NUMBER).contains(n))
}

/// True for the name of a data file (`NNNNNN.dat`), for tools that delete a database.
pub(crate) fn is_data_file_name(name: &str) -> bool {
    parse_name(name, ".dat").is_some()
}

pub(crate) fn file_name(number: u32) -> String {
    format!("{number:06}.dat")
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(super) fn read_full(file: &dyn RandomRwFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}
