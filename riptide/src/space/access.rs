//! Reaching extent bytes: writing an allocated extent, syncing data files, and locating an
//! extent for reading.
//!
//! Invariants:
//! - Extent bytes are written outside the mutex: the caller owns an allocated extent (checked
//!   with its slot count), and shrink never cuts or deletes a used slot.
//! - A write stays inside the extent: `valid` at its start, the footer ending exactly at its
//!   end, and, in a slot allocated with its old disk blocks, a hole punched in the gap between
//!   them (when it is 64 KiB or more), so stale bytes of a reused slot do not stay on disk; it
//!   only starts writeback, it syncs nothing. [`ExtentSpace::sync`] fdatasyncs each
//!   file once.
//! - [`ExtentSpace::locate`] checks only that the slot can hold an extent, not that it is
//!   used: readers trust metadata.

use super::{misuse, ExtentId, ExtentSpace, EXTENT_SIZE};
use crate::error::{Error, Result};
use crate::fs::RandomRwFile;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// Page size the gap punch aligns to.
const GAP_PAGE: u64 = 4096;
/// Smallest gap worth a hole punch when an extent is written.
const MIN_GAP_PUNCH: u64 = 64 << 10;

impl ExtentSpace {
    /// The file, path and byte offset of a used extent of `slots` slots (for writing), and
    /// whether its gap may hold an older extent's bytes (then forgotten: the caller punches it).
    pub(super) fn used_extent(
        &self,
        op: &'static str,
        id: ExtentId,
        slots: u32,
    ) -> Result<(Arc<dyn RandomRwFile>, PathBuf, u64, bool)> {
        let mut inner = self.inner.lock();
        let file = inner
            .files
            .get_mut(&id.file())
            .filter(|f| f.used.get(&id.slot()) == Some(&slots));
        match file {
            Some(file) => Ok((
                file.handle.clone(),
                file.path.clone(),
                u64::from(id.slot()) * EXTENT_SIZE,
                file.stale_gaps.remove(&id.slot()),
            )),
            None => Err(misuse(
                op,
                &self.file_path(id.file()),
                format!("extent {id} of {slots} slots is not allocated"),
            )),
        }
    }

    /// Writes an extent's bytes: `valid` at its start and `footer` ending exactly at its end
    /// (`start + slots * EXTENT_SIZE`), then starts their writeback (not waiting for it). No
    /// sync. The extent must be allocated with `slots`.
    pub(crate) fn write_extent(&self, id: ExtentId, slots: u32, valid: &[u8], footer: &[u8]) -> Result<()> {
        let (handle, path, start, stale_gap) = self.used_extent("write", id, slots)?;
        let size = u64::from(slots) * EXTENT_SIZE;
        if valid.len() as u64 + footer.len() as u64 > size {
            return Err(misuse(
                "write",
                &path,
                format!(
                    "{} + {} bytes do not fit extent {id} of {slots} slots",
                    valid.len(),
                    footer.len()
                ),
            ));
        }
        handle
            .write_at(valid, start)
            .map_err(|e| Error::io("write", &path, e))?;
        handle
            .write_at(footer, start + size - footer.len() as u64)
            .map_err(|e| Error::io("write", &path, e))?;
        // A slot reused with its disk blocks (kept for reuse) still holds the old extent's
        // bytes in this extent's gap: give those back, so that a database's size on disk is
        // that of its extents. A gap of a few pages is left alone (full extents leave little);
        // a fresh or punched slot has nothing there.
        let gap_start = (valid.len() as u64).div_ceil(GAP_PAGE) * GAP_PAGE;
        let gap_end = (size - footer.len() as u64) / GAP_PAGE * GAP_PAGE;
        if stale_gap && gap_end.saturating_sub(gap_start) >= MIN_GAP_PUNCH {
            // A hint: a file system without hole punching keeps the bytes, which are never read.
            let _ = handle.punch_hole(start + gap_start, gap_end - gap_start);
        }
        // Queue the extent for the disk now: a flush or compaction writes many extents and
        // fdatasyncs once at the end, and without this the whole job's bytes would reach the
        // device only then (RocksDB's `bytes_per_sync`, per extent). The gap is never dirty.
        handle.start_writeback(start, size);
        Ok(())
    }

    /// fdatasyncs every data file holding one of `ids`, each once.
    pub(crate) fn sync(&self, ids: &[ExtentId]) -> Result<()> {
        let numbers: BTreeSet<u32> = ids.iter().map(|id| id.file()).collect();
        let handles = {
            let inner = self.inner.lock();
            numbers
                .iter()
                .map(|&n| match inner.files.get(&n) {
                    Some(f) => Ok((f.handle.clone(), f.path.clone())),
                    None => Err(misuse("fsync", &self.file_path(n), format!("no data file {n}"))),
                })
                .collect::<Result<Vec<_>>>()?
        };
        for (handle, path) in handles {
            handle.sync_data().map_err(|e| Error::io("fsync", &path, e))?;
        }
        Ok(())
    }

    /// The handle and path of an extent's file and the extent's byte offset. The handle reads
    /// (it upcasts to `Arc<dyn ReadableFile>`). [`Error::Corruption`] if the file is missing or
    /// the slot cannot hold an extent.
    pub(crate) fn locate(&self, id: ExtentId) -> Result<(Arc<dyn RandomRwFile>, PathBuf, u64)> {
        let inner = self.inner.lock();
        let offset = u64::from(id.slot()) * EXTENT_SIZE;
        match inner.files.get(&id.file()) {
            Some(f) if id.slot() >= 1 && id.slot() < f.max_slots => Ok((f.handle.clone(), f.path.clone(), offset)),
            Some(f) => Err(Error::corruption(
                &f.path,
                offset,
                format!("extent {id}: slot outside 1..{}", f.max_slots),
            )),
            None => Err(Error::corruption(
                self.file_path(id.file()),
                offset,
                format!("extent {id}: data file missing"),
            )),
        }
    }
}
