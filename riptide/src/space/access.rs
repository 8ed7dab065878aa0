//! Reaching extent bytes: writing an allocated extent, syncing data files, and locating an
//! extent for reading.
//!
//! Invariants:
//! - Extent bytes are written outside the mutex: the caller owns an allocated extent (checked
//!   with its slot count), and shrink never cuts or deletes a used slot.
//! - A write stays inside the extent: `valid` at its start, the footer ending exactly at its
//!   end; it only starts writeback, it syncs nothing. [`ExtentSpace::sync`] fdatasyncs each
//!   file once.
//! - [`ExtentSpace::locate`] checks only that the slot can hold an extent, not that it is
//!   used: readers trust metadata.

use super::{misuse, ExtentId, ExtentSpace, EXTENT_SIZE};
use crate::error::{Error, Result};
use crate::fs::RandomRwFile;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

impl ExtentSpace {
    /// The file, path and byte offset of a used extent of `slots` slots (for writing).
    pub(super) fn used_extent(
        &self,
        op: &'static str,
        id: ExtentId,
        slots: u32,
    ) -> Result<(Arc<dyn RandomRwFile>, PathBuf, u64)> {
        let inner = self.inner.lock();
        let file = inner
            .files
            .get(&id.file())
            .filter(|f| f.used.get(&id.slot()) == Some(&slots));
        match file {
            Some(file) => Ok((
                file.handle.clone(),
                file.path.clone(),
                u64::from(id.slot()) * EXTENT_SIZE,
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
        let (handle, path, start) = self.used_extent("write", id, slots)?;
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
