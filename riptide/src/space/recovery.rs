//! Recovery of the slot bookkeeping: metadata names every live extent
//! ([`ExtentSpace::reference`]), then [`ExtentSpace::finish_recovery`] frees every other slot.
//!
//! Invariants:
//! - Metadata is the single source of truth for ownership: bytes found in a free slot (an old
//!   footer) never make it used; they are only reported.
//! - A referenced extent lies inside its file's extent slots (never slot 0) and overlaps no
//!   extent referenced before; otherwise the reference is [`Error::Corruption`] and changes
//!   nothing.
//! - Recovery finishes once; after it `free` is exactly the complement of `used` in
//!   `1..max_slots`, and every free slot inside a file's length counts as unpunched. An I/O error
//!   while probing leaves the space still recovering.

use super::file::read_full;
use super::{misuse, ExtentId, ExtentSpace, RecoveryReport, EXTENT_SIZE, FOOTER_PROBE_LEN};
use crate::error::{Error, Result};

impl ExtentSpace {
    /// Recovery: marks an extent named by metadata as used. [`Error::Corruption`] if its file is
    /// missing, it lies outside its file (or in slot 0), or it overlaps an extent referenced
    /// before. Only before [`ExtentSpace::finish_recovery`].
    pub(crate) fn reference(&self, id: ExtentId, slots: u32) -> Result<()> {
        let mut inner = self.inner.lock();
        let path = self.file_path(id.file());
        if inner.recovered {
            return Err(misuse(
                "reference",
                &path,
                format!("extent {id} referenced after recovery"),
            ));
        }
        let offset = u64::from(id.slot()) * EXTENT_SIZE;
        let Some(file) = inner.files.get_mut(&id.file()) else {
            return Err(Error::corruption(
                &path,
                offset,
                format!("extent {id}: data file missing"),
            ));
        };
        let end = u64::from(id.slot()) + u64::from(slots);
        if id.slot() == 0 || slots == 0 || end > u64::from(file.len_slots) {
            return Err(Error::corruption(
                &path,
                offset,
                format!(
                    "extent {id} of {slots} slots lies outside the file's extent slots 1..{}",
                    file.len_slots
                ),
            ));
        }
        let before = file.used.range(..=id.slot()).next_back();
        let after = file.used.range(id.slot()..).next();
        let clash = before
            .filter(|&(&s, &n)| u64::from(s) + u64::from(n) > u64::from(id.slot()))
            .or(after.filter(|&(&s, _)| u64::from(s) < end));
        if let Some((&s, &n)) = clash {
            return Err(Error::corruption(
                &path,
                offset,
                format!(
                    "extent {id} of {slots} slots overlaps extent {} of {n} slots",
                    ExtentId::new(id.file(), s)
                ),
            ));
        }
        file.used.insert(id.slot(), slots);
        Ok(())
    }

    /// Recovery done: every unreferenced slot becomes free. `looks_like_extent` sees the last
    /// [`FOOTER_PROBE_LEN`] bytes of each free slot inside the files; the slots it accepts are
    /// listed in the report (and are free all the same).
    pub(crate) fn finish_recovery(&self, looks_like_extent: &dyn Fn(&[u8]) -> bool) -> Result<RecoveryReport> {
        let mut inner = self.inner.lock();
        if inner.recovered {
            return Err(misuse("finish_recovery", &self.dir, "recovery already finished".into()));
        }
        let mut unowned = Vec::new();
        let mut probe = [0u8; FOOTER_PROBE_LEN];
        // Probe first, so an I/O error leaves the space still recovering.
        for (&number, file) in &inner.files {
            let mut used = file.used.iter().peekable();
            for slot in 1..file.len_slots {
                while used.next_if(|&(&s, &n)| s + n <= slot).is_some() {}
                if used.peek().is_some_and(|&(&s, _)| s <= slot) {
                    continue;
                }
                let at = (u64::from(slot) + 1) * EXTENT_SIZE - FOOTER_PROBE_LEN as u64;
                let n =
                    read_full(file.handle.as_ref(), &mut probe, at).map_err(|e| Error::io("read", &file.path, e))?;
                if n == FOOTER_PROBE_LEN && looks_like_extent(&probe) {
                    unowned.push(ExtentId::new(number, slot));
                }
            }
        }
        for file in inner.files.values_mut() {
            file.free = (1..file.max_slots).collect();
            for (&s, &n) in &file.used {
                for slot in s..s + n {
                    file.free.remove(&slot);
                }
            }
            // Whatever a crash left in them still occupies the disk until punched or reused.
            file.unpunched = file.free.range(..file.len_slots).copied().collect();
        }
        inner.recovered = true;
        let stats = Self::stats_of(&inner);
        Ok(RecoveryReport {
            files: stats.files,
            used_slots: stats.used_slots,
            free_slots: stats.free_slots,
            unowned_with_data: unowned,
        })
    }
}
