//! The extent space: data files cut into 2 MiB slots, and which slots hold live extents
//! (see `docs/format.md`).
//!
//! Data files live in `<db>/data/` as `NNNNNN.dat` (six or more digits, numbered from 1). Slot 0
//! of every file holds the file header (two copies); slots `1..slots_per_file` hold extents. An
//! extent is `slots >= 1` consecutive slots of one file and is named by its first slot
//! ([`ExtentId`]).
//!
//! Invariants:
//! - Metadata is the single source of truth for ownership. After [`ExtentSpace::open`] nothing is
//!   free and nothing can be allocated; recovery names every live extent with
//!   [`ExtentSpace::reference`], and [`ExtentSpace::finish_recovery`] frees every other slot.
//!   Bytes found in a free slot (an old footer) never make it used.
//! - Per file, `used` (first slot -> slot count) holds pairwise disjoint extents inside
//!   `1..len_slots`, and after recovery `free` plus the slots [`ExtentSpace::punch_free_slots`]
//!   is punching at the moment is exactly the complement of `used` in `1..max_slots`. Every
//!   change to them happens under the one mutex, so [`ExtentSpace::allocate`] never returns a
//!   slot in use, even with concurrent callers, and never one whose hole is being punched.
//! - Freeing does no I/O but zeroing the footer: a freed slot keeps its disk blocks
//!   (`unpunched`, a subset of `free`), so the extent written there next overwrites allocated
//!   blocks instead of allocating new ones. [`ExtentSpace::punch_free_slots`] gives the blocks
//!   of all but a reserve of them back to the file system, outside the mutex, taking the slots
//!   out of `free` while it does.
//! - A failed operation changes no bookkeeping: allocation takes slots only after the file
//!   growth (`set_len`) or file creation it needs has succeeded, so an I/O error neither leaks
//!   slots nor hands one out twice.
//! - A data file is registered only once it is durable: its header copies are written to
//!   `NNNNNN.dat.tmp`, fdatasynced, the file is renamed to `NNNNNN.dat` and the directory is
//!   fsynced. So a `.dat` file never holds a torn header from its creation; `.tmp` files are
//!   leftovers and are deleted at open, and so is a `.dat` file that cannot hold an extent
//!   (shorter than a header, or no longer than slot 0 with all-zero header copies).
//! - A file's length is always a whole number of slots as written by this module (growth and
//!   shrinking use `set_len` to slot boundaries); a file only ever grows to cover allocated
//!   slots, and shrinks only past its last used slot.
//! - Extent bytes are written outside the mutex: the caller owns an allocated extent, and shrink
//!   never cuts or deletes a used slot.
// Accessors used by tests and tools.
#![allow(dead_code)]

pub(crate) mod header;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::fs::{FileSystem, RandomRwFile};
use header::{FileHeader, HeaderCopy, HEADER_COPY_OFFSETS, HEADER_SIZE};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Size of one slot, and of a (one-slot) extent.
pub(crate) const EXTENT_SIZE: u64 = 2 << 20;
/// Bytes at the end of a slot that [`ExtentSpace::finish_recovery`] shows the footer check and
/// [`ExtentSpace::free`] zeroes.
pub(crate) const FOOTER_PROBE_LEN: usize = 64;
/// Name of the data directory inside the database directory.
pub(crate) const DATA_DIR: &str = "data";

/// An extent's name: data-file number in the high 32 bits, first slot in the low 32 bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub(crate) struct ExtentId(pub u64);

impl ExtentId {
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
        write!(f, "{}.{}", self.file(), self.slot())
    }
}

/// Options of the extent space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpaceOptions {
    /// Slots per new data file, header slot included (default 5120: 10 GiB files). At least 2.
    pub extents_per_file: u32,
}

impl Default for SpaceOptions {
    fn default() -> Self {
        SpaceOptions { extents_per_file: 5120 }
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
    /// `total_slots - used_slots`.
    pub free_slots: u64,
    /// Free slots that may still hold disk blocks (kept for reuse, or not yet punched).
    pub unpunched_slots: u64,
    /// Sum of the data files' lengths.
    pub file_bytes: u64,
}

/// One data file.
struct DataFile {
    path: PathBuf,
    handle: Arc<dyn RandomRwFile>,
    /// Slots this file may grow to, header slot included (from its header).
    max_slots: u32,
    /// Current length in bytes.
    len: u64,
    /// Whole slots inside `len` (at least 1: the header slot).
    len_slots: u32,
    /// Live extents: first slot -> slot count.
    used: BTreeMap<u32, u32>,
    /// Free slots in `1..max_slots` (filled by `finish_recovery`).
    free: BTreeSet<u32>,
    /// Free slots inside `len_slots` that may still hold disk blocks (freed without a hole
    /// punched since, or found free at recovery); a subset of `free`.
    unpunched: BTreeSet<u32>,
}

impl DataFile {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.handle.set_len(len)?;
        self.len = len;
        self.len_slots = slots_in(len, self.max_slots);
        // Cut slots hold no blocks.
        let len_slots = self.len_slots;
        self.unpunched.retain(|&s| s < len_slots);
        Ok(())
    }

    /// The lowest first slot of `n` consecutive free slots.
    fn find_free(&self, n: u32) -> Option<u32> {
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

    fn used_slots(&self) -> u64 {
        self.used.values().map(|&n| u64::from(n)).sum()
    }

    /// End (exclusive) of the last used slot; 1 (the header slot) when empty.
    fn used_end(&self) -> u32 {
        self.used.last_key_value().map_or(1, |(&s, &n)| s + n)
    }
}

/// Whole slots inside `len`, capped at `max_slots`, at least the header slot.
fn slots_in(len: u64, max_slots: u32) -> u32 {
    (len / EXTENT_SIZE).clamp(1, u64::from(max_slots)) as u32
}

/// Everything behind the mutex.
struct Inner {
    files: BTreeMap<u32, DataFile>,
    /// `finish_recovery` has run: free lists are valid and allocation is allowed.
    recovered: bool,
    /// Number for the next new data file.
    next_file: u32,
}

impl Inner {
    /// Free slots that may still hold disk blocks, over all files.
    fn unpunched_slots(&self) -> u64 {
        self.files.values().map(|f| f.unpunched.len() as u64).sum()
    }
}

/// The data files and their slot bookkeeping. `Send + Sync`; every method takes `&self`.
pub(crate) struct ExtentSpace {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    opts: SpaceOptions,
    inner: Mutex<Inner>,
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

/// `NNNNNN.dat` -> Some(N) for six or more digits and N >= 1.
fn parse_name(name: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n >= 1)
}

fn file_name(number: u32) -> String {
    format!("{number:06}.dat")
}

/// An error for a call the caller should not have made (a bug, not bad bytes).
fn misuse(op: &'static str, path: &Path, why: String) -> Error {
    Error::io(op, path, io::Error::new(io::ErrorKind::InvalidInput, why))
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &dyn RandomRwFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
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
            inner: Mutex::new(Inner {
                files,
                recovered: false,
                next_file,
            }),
        })
    }

    /// Opens and validates one data file; `None` if it is a creation leftover to delete.
    fn open_file(fs: &dyn FileSystem, path: &Path, number: u32) -> Result<Option<DataFile>> {
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
        }))
    }

    fn file_path(&self, number: u32) -> PathBuf {
        self.dir.join(file_name(number))
    }

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
        for s in slot..end {
            file.free.remove(&s);
            file.unpunched.remove(&s);
        }
        file.used.insert(slot, slots);
        Ok(ExtentId::new(number, slot))
    }

    /// Creates data file `number` durably (header copies in a `.tmp` file, fdatasync, rename,
    /// directory fsync). On error the `.tmp` file is removed best-effort and nothing is kept.
    fn create_file(&self, number: u32, max_slots: u32) -> Result<DataFile> {
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
        })
    }

    /// The file, path and byte offset of a used extent of `slots` slots (for writing).
    fn used_extent(&self, op: &'static str, id: ExtentId, slots: u32) -> Result<(Arc<dyn RandomRwFile>, PathBuf, u64)> {
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

    /// Returns an extent's slots to the free list; the caller guarantees no metadata can reach
    /// it any more. Its footer region is zeroed best-effort (no sync), before the slots become
    /// free, so a stale footer is rarely mistaken for a leak later. The slots keep their disk
    /// blocks for the next extent written there; [`Self::punch_free_slots`] gives back those
    /// beyond a reserve. A call that does not name an allocated extent of `slots` slots is
    /// ignored.
    pub(crate) fn free(&self, id: ExtentId, slots: u32) {
        let mut inner = self.inner.lock();
        let recovered = inner.recovered;
        let Some(file) = inner.files.get_mut(&id.file()) else {
            return;
        };
        if file.used.get(&id.slot()) != Some(&slots) {
            return;
        }
        let end = id.slot() + slots;
        if end <= file.len_slots {
            let at = u64::from(end) * EXTENT_SIZE - FOOTER_PROBE_LEN as u64;
            let _ = file.handle.write_at(&[0u8; FOOTER_PROBE_LEN], at);
        }
        file.used.remove(&id.slot());
        if recovered {
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
            let target = u64::from(file.used_end()) * EXTENT_SIZE;
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
            .filter(|(_, f)| f.used.is_empty())
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

    fn stats_of(inner: &Inner) -> SpaceStats {
        let mut s = SpaceStats {
            files: inner.files.len(),
            ..SpaceStats::default()
        };
        for f in inner.files.values() {
            s.total_slots += u64::from(f.len_slots - 1);
            s.used_slots += f.used_slots();
            s.file_bytes += f.len;
        }
        s.free_slots = s.total_slots - s.used_slots;
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

    /// `(number, path)` of every data file, by number.
    pub(crate) fn data_files(&self) -> Vec<(u32, PathBuf)> {
        let inner = self.inner.lock();
        inner.files.iter().map(|(&n, f)| (n, f.path.clone())).collect()
    }
}
