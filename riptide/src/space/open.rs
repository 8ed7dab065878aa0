//! Data files on disk: opening and validating them at [`ExtentSpace::open`], and creating new
//! ones durably.
//!
//! Invariants:
//! - A data file is registered only once it is durable: its header copies are written to
//!   `NNNNNN.dat.tmp`, fdatasynced, the file is renamed to `NNNNNN.dat` and the directory is
//!   fsynced. So a `.dat` file never holds a torn header from its creation; `.tmp` files are
//!   leftovers and are deleted at open, and so is a `.dat` file that cannot hold an extent
//!   (shorter than a header, or no longer than slot 0 with all-zero header copies).
//! - Any other damaged header is a typed error; no field of a header is trusted before its
//!   CRC matched, and the file number in the header must match the name.
//! - Opening frees nothing and allows no allocation: that waits for recovery.

use super::file::{file_name, parse_name, read_full, slots_in, DataFile, Inner};
use super::header::{FileHeader, HeaderCopy, HEADER_COPY_OFFSETS, HEADER_SIZE};
use super::{ExtentSpace, SpaceOptions, DATA_DIR, EXTENT_SIZE};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

impl ExtentSpace {
    /// Opens or creates `<db>/data`. Existing files: headers are validated (magic, version,
    /// CRC32C, sizes, file number matches the name; either copy may be the valid one).
    /// Leftovers of a crash during file creation (`.dat.tmp` files, and `.dat` files that are
    /// shorter than a header or have only blank header copies and no extent slot) are deleted;
    /// any other damaged header is [`Error::Corruption`] (or [`Error::UnsupportedFormat`]).
    /// Nothing is free until [`ExtentSpace::finish_recovery`].
    pub(crate) fn open(fs: Arc<dyn FileSystem>, db: &Path, opts: SpaceOptions) -> Result<ExtentSpace> {
        if opts.extents_per_file < 2 {
            return Err(Error::InvalidOption {
                option: "extents_per_file",
                reason: format!("{} leaves no slot for an extent (minimum 2)", opts.extents_per_file),
            });
        }
        let dir = db.join(DATA_DIR);
        if !fs.exists(&dir) {
            fs.create_dir_all(&dir).map_err(|e| Error::io("create_dir", &dir, e))?;
            fs.sync_dir(db).map_err(|e| Error::io("sync_dir", db, e))?;
        }
        let mut names = fs.list_dir(&dir).map_err(|e| Error::io("list_dir", &dir, e))?;
        names.sort();
        let mut files = BTreeMap::new();
        let mut max_number = 0u32;
        let mut removed = false;
        for name in &names {
            let path = dir.join(name);
            if let Some(n) = parse_name(name, ".dat.tmp") {
                max_number = max_number.max(n);
                fs.remove_file(&path).map_err(|e| Error::io("remove", &path, e))?;
                removed = true;
            } else if let Some(n) = parse_name(name, ".dat") {
                max_number = max_number.max(n);
                match Self::open_file(fs.as_ref(), &path, n)? {
                    Some(file) => {
                        files.insert(n, file);
                    }
                    None => {
                        fs.remove_file(&path).map_err(|e| Error::io("remove", &path, e))?;
                        removed = true;
                    }
                }
            }
        }
        if removed {
            fs.sync_dir(&dir).map_err(|e| Error::io("sync_dir", &dir, e))?;
        }
        let next_file = max_number
            .checked_add(1)
            .ok_or_else(|| Error::corruption(&dir, 0, "data file numbers exhausted"))?;
        Ok(ExtentSpace {
            fs,
            dir,
            opts,
            readers_listing: Mutex::new(()),
            lease: Mutex::new(None),
            inner: Mutex::new(Inner {
                files,
                recovered: false,
                next_file,
                holds: Vec::new(),
            }),
        })
    }

    /// Opens and validates one data file; `None` if it is a creation leftover to delete.
    pub(super) fn open_file(fs: &dyn FileSystem, path: &Path, number: u32) -> Result<Option<DataFile>> {
        let handle = fs.open_rw(path, false).map_err(|e| Error::io("open", path, e))?;
        let len = handle.len().map_err(|e| Error::io("stat", path, e))?;
        if len < HEADER_SIZE as u64 {
            return Ok(None);
        }
        let mut damage = None;
        let mut header = None;
        for at in HEADER_COPY_OFFSETS {
            if len < at + HEADER_SIZE as u64 {
                continue; // never written: counts as blank
            }
            let mut buf = vec![0u8; HEADER_SIZE];
            let n = read_full(handle.as_ref(), &mut buf, at).map_err(|e| Error::io("read", path, e))?;
            match FileHeader::decode(path, at, &buf[..n]) {
                HeaderCopy::Valid(h) => {
                    header = Some((h, at));
                    break;
                }
                HeaderCopy::Blank => {}
                HeaderCopy::Damaged(e) => {
                    damage.get_or_insert(e);
                }
            }
        }
        let Some((h, at)) = header else {
            return match damage {
                Some(e) => Err(e),
                None if len <= EXTENT_SIZE => Ok(None),
                None => Err(Error::corruption(
                    path,
                    0,
                    format!("data file of {len} bytes has blank header copies"),
                )),
            };
        };
        if h.file_number != number {
            return Err(Error::corruption(
                path,
                at + 20,
                format!("header names data file {}, not {number}", h.file_number),
            ));
        }
        if h.slots_per_file < 2 {
            return Err(Error::corruption(
                path,
                at + 24,
                format!("{} slots per file leaves no extent slot", h.slots_per_file),
            ));
        }
        Ok(Some(DataFile {
            path: path.to_path_buf(),
            handle,
            max_slots: h.slots_per_file,
            len,
            len_slots: slots_in(len, h.slots_per_file),
            used: BTreeMap::new(),
            free: BTreeSet::new(),
            unpunched: BTreeSet::new(),
            stale_gaps: BTreeSet::new(),
            held: BTreeSet::new(),
        }))
    }

    /// Creates data file `number` durably (header copies in a `.tmp` file, fdatasync, rename,
    /// directory fsync). On error the `.tmp` file is removed best-effort and nothing is kept.
    pub(super) fn create_file(&self, number: u32, max_slots: u32) -> Result<DataFile> {
        let path = self.file_path(number);
        let tmp = self.dir.join(format!("{}.tmp", file_name(number)));
        let header = FileHeader {
            file_number: number,
            slots_per_file: max_slots,
            created_micros: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        }
        .encode();
        let handle = self.fs.open_rw(&tmp, true).map_err(|e| Error::io("create", &tmp, e))?;
        let steps = || -> Result<()> {
            for at in HEADER_COPY_OFFSETS {
                handle.write_at(&header, at).map_err(|e| Error::io("write", &tmp, e))?;
            }
            handle.set_len(EXTENT_SIZE).map_err(|e| Error::io("set_len", &tmp, e))?;
            handle.sync_data().map_err(|e| Error::io("fsync", &tmp, e))?;
            self.fs.rename(&tmp, &path).map_err(|e| Error::io("rename", &tmp, e))?;
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("sync_dir", &self.dir, e))
        };
        if let Err(e) = steps() {
            // If the rename happened, `path` may stay behind (not durable): a valid, empty data
            // file the next attempt replaces, or that a later open finds holding no extent.
            let _ = self.fs.remove_file(&tmp);
            return Err(e);
        }
        Ok(DataFile {
            path,
            handle,
            max_slots,
            len: EXTENT_SIZE,
            len_slots: 1,
            used: BTreeMap::new(),
            free: (1..max_slots).collect(),
            unpunched: BTreeSet::new(),
            stale_gaps: BTreeSet::new(),
            held: BTreeSet::new(),
        })
    }
}
