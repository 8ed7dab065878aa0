//! The life of slots after recovery: allocating extents, freeing them, punching the holes of
//! free slots beyond a reserve, and shrinking files.
//!
//! Invariants:
//! - Every change to `used`, `free` and `unpunched` happens under the one mutex, so
//!   [`ExtentSpace::allocate`] never returns a slot in use, even with concurrent callers, and
//!   never one whose hole is being punched (those slots are out of `free` meanwhile).
//! - A failed operation changes no bookkeeping: allocation takes slots only after the file
//!   growth (`set_len`) or file creation it needs has succeeded, so an I/O error neither leaks
//!   slots nor hands one out twice.
//! - Freeing does no I/O but listing the reader leases (outside the mutex) and zeroing the
//!   footer: a freed slot keeps its disk blocks (`unpunched`), so the extent written there next
//!   overwrites allocated blocks. While read-only views are open, freed slots are held instead
//!   (`readers.rs`), footers untouched.
//!   [`ExtentSpace::punch_free_slots`] punches outside the mutex.
//! - A file only ever grows to cover allocated slots, and shrinks only past its last used
//!   slot; shrink deletes only files without extents and keeps at least one file.

use super::{misuse, ExtentId, ExtentSpace, EXTENT_SIZE, FOOTER_PROBE_LEN};
use crate::error::{Error, Result};
use crate::fs::RandomRwFile;
use std::sync::Arc;

impl ExtentSpace {
    /// Allocates `slots` consecutive free slots: in the lowest-numbered file with room, at the
    /// lowest slot. Grows that file (`set_len`, no sync) or creates a new, durable data file when
    /// needed; an extent longer than a file of `extents_per_file` gets a file of its own size.
    /// On error nothing is taken.
    pub(crate) fn allocate(&self, slots: u32) -> Result<ExtentId> {
        let mut inner = self.inner.lock();
        if !inner.recovered {
            return Err(misuse(
                "allocate",
                &self.dir,
                "allocation before recovery finished".into(),
            ));
        }
        if slots == 0 {
            return Err(misuse("allocate", &self.dir, "allocation of 0 slots".into()));
        }
        let found = inner
            .files
            .iter()
            .find_map(|(&number, file)| file.find_free(slots).map(|slot| (number, slot)));
        let (number, slot) = match found {
            Some(found) => found,
            None => {
                let max_slots = slots
                    .checked_add(1)
                    .ok_or_else(|| misuse("allocate", &self.dir, format!("extent of {slots} slots")))?
                    .max(self.opts.extents_per_file);
                let number = inner.next_file;
                if number >= super::MAX_DATA_FILE_NUMBER {
                    return Err(Error::corruption(&self.dir, 0, "data file numbers exhausted"));
                }
                let file = self.create_file(number, max_slots)?;
                inner.next_file = number
                    .checked_add(1)
                    .ok_or_else(|| Error::corruption(&self.dir, 0, "data file numbers exhausted"))?;
                inner.files.insert(number, file);
                (number, 1)
            }
        };
        let Some(file) = inner.files.get_mut(&number) else {
            return Err(misuse(
                "allocate",
                &self.file_path(number),
                format!("data file {number} vanished"),
            ));
        };
        let end = slot + slots;
        if end > file.len_slots {
            if let Err(e) = file.set_len(u64::from(end) * EXTENT_SIZE) {
                return Err(Error::io("set_len", &file.path, e));
            }
        }
        let mut stale = false;
        for s in slot..end {
            file.free.remove(&s);
            stale |= file.unpunched.remove(&s);
        }
        if stale {
            file.stale_gaps.insert(slot);
        }
        file.used.insert(slot, slots);
        Ok(ExtentId::new(number, slot))
    }

    /// Returns an extent's slots to the free list; the caller guarantees no metadata can reach
    /// it any more. Its footer region is zeroed best-effort (no sync), before the slots become
    /// free, so a stale footer is rarely mistaken for a leak later. The slots keep their disk
    /// blocks for the next extent written there; [`Self::punch_free_slots`] gives back those
    /// beyond a reserve. A call that does not name an allocated extent of `slots` slots is
    /// ignored.
    pub(crate) fn free(&self, id: ExtentId, slots: u32) {
        // The leases are listed before the space's mutex (file-system calls), and the listing
        // is acted on before another can be made (`readers.rs`).
        let _listing = self.readers_listing.lock();
        let readers = self.live_readers();
        let mut inner = self.inner.lock();
        super::readers::release_holds(&mut inner, &readers);
        let recovered = inner.recovered;
        let Some(file) = inner.files.get_mut(&id.file()) else {
            return;
        };
        if file.used.get(&id.slot()) != Some(&slots) {
            return;
        }
        let end = id.slot() + slots;
        let held = recovered && readers.any();
        // A held extent keeps its footer: a view may still open it.
        if end <= file.len_slots && !held {
            let at = u64::from(end) * EXTENT_SIZE - FOOTER_PROBE_LEN as u64;
            let _ = file.handle.write_at(&[0u8; FOOTER_PROBE_LEN], at);
        }
        file.used.remove(&id.slot());
        file.stale_gaps.remove(&id.slot());
        if held {
            // A read-only view may still read the extent: no reuse until it is gone.
            file.held.extend(id.slot()..end);
            let number = id.file();
            super::readers::add_hold(&mut inner, &readers, (id.slot()..end).map(|s| (number, s)).collect());
        } else if recovered {
            file.free.extend(id.slot()..end);
            let within = end.min(file.len_slots);
            file.unpunched.extend(id.slot()..within);
        }
    }

    /// Gives the disk blocks of free slots back to the file system (hole punching, a hint) until
    /// at most `keep` free slots hold blocks; returns the slots punched. The highest slots go
    /// first: allocation reuses the lowest, and [`Self::shrink`] cuts the tails. The slots leave
    /// the free list while their holes are punched, outside the mutex, so allocation and frees
    /// never wait for the file system.
    pub(crate) fn punch_free_slots(&self, keep: u64) -> u64 {
        // (file, handle, first slot, slots) of runs of consecutive slots.
        let mut runs: Vec<(u32, Arc<dyn RandomRwFile>, u32, u32)> = Vec::new();
        {
            let mut inner = self.inner.lock();
            let total = inner.unpunched_slots();
            let mut excess = total.saturating_sub(keep);
            for (&number, file) in inner.files.iter_mut().rev() {
                while excess > 0 {
                    let Some(slot) = file.unpunched.pop_last() else { break };
                    file.free.remove(&slot);
                    excess -= 1;
                    match runs.last_mut() {
                        Some((n, _, first, len)) if *n == number && *first == slot + 1 => {
                            *first = slot;
                            *len += 1;
                        }
                        _ => runs.push((number, file.handle.clone(), slot, 1)),
                    }
                }
            }
        }
        let mut punched = 0;
        for (_, handle, first, len) in &runs {
            let _ = handle.punch_hole(u64::from(*first) * EXTENT_SIZE, u64::from(*len) * EXTENT_SIZE);
            punched += u64::from(*len);
        }
        let mut inner = self.inner.lock();
        for (number, _, first, len) in runs {
            // A file deleted meanwhile (shrink deletes files without extents) takes its slots.
            if let Some(file) = inner.files.get_mut(&number) {
                file.free.extend(first..first + len);
            }
        }
        punched
    }

    /// Space reclamation: cuts each file after its last used slot (never below the header slot)
    /// and deletes files that hold no extent, keeping at least one file. New lengths are
    /// fdatasynced and deletions made durable. Returns the bytes released. Extents are not moved.
    pub(crate) fn shrink(&self) -> Result<u64> {
        let mut inner = self.inner.lock();
        if !inner.recovered {
            return Err(misuse("shrink", &self.dir, "shrink before recovery finished".into()));
        }
        let mut released = 0;
        for file in inner.files.values_mut() {
            let target = u64::from(file.kept_end()) * EXTENT_SIZE;
            if file.len > target {
                let old = file.len;
                if let Err(e) = file.set_len(target) {
                    return Err(Error::io("set_len", &file.path, e));
                }
                released += old - target;
                file.handle.sync_data().map_err(|e| Error::io("fsync", &file.path, e))?;
            }
        }
        let mut empty: Vec<u32> = inner
            .files
            .iter()
            .filter(|(_, f)| f.used.is_empty() && f.held.is_empty())
            .map(|(&n, _)| n)
            .collect();
        if empty.len() == inner.files.len() {
            empty.retain(|&n| Some(n) != inner.files.keys().next().copied());
        }
        if empty.is_empty() {
            return Ok(released);
        }
        for n in empty {
            if let Some(file) = inner.files.get(&n) {
                self.fs
                    .remove_file(&file.path)
                    .map_err(|e| Error::io("remove", &file.path, e))?;
                released += file.len;
                inner.files.remove(&n);
            }
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("sync_dir", &self.dir, e))?;
        Ok(released)
    }
}
