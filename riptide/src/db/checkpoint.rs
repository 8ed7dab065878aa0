//! [`Db::checkpoint`]: an openable, consistent copy of a live database in another directory,
//! as RocksDB's `Checkpoint::CreateCheckpoint` makes one.
//!
//! What a checkpoint holds: the state a crash at the moment of the call would recover, that is
//! every write acknowledged before the call (the redo log is synced first). It is built as
//! such a crash image:
//! - the catalog and each table's metadata are captured under the DDL lock and each table's
//!   change lock, so each table's metadata is exactly its installed version; the versions are
//!   held until the copy ends, so no extent they name is freed (and its slots rewritten)
//!   meanwhile;
//! - the redo log is synced, and no segment is deleted until the copy ends
//!   ([`crate::redo::SegmentList::hold`]), so the copied segments hold every record above each
//!   captured table's flush point; recovery of the copy replays them as it would after a crash;
//! - local extents are copied to the same file and slot (their valid bytes and footer; the
//!   rest of a copied data file is a hole), so the metadata names them unchanged; data files
//!   of a live database are slot containers rewritten in place, which is why they cannot be
//!   hard-linked as RocksDB links its immutable SST files;
//! - the metadata is written as one meta checkpoint (`CHECKPOINT` + empty `SLOG` + `CURRENT`).
//!
//! Invariants:
//! - The target's `CATALOG` is written last, after every other file and directory is durable:
//!   a checkpoint cut short by a crash or an error has no `CATALOG`, so it does not open
//!   (without `create_if_missing`), and the next checkpoint into the same directory deletes
//!   what it left (Riptide's own names only; a directory with other files is refused).
//! - The target is locked (`LOCK`) while it is written.
//! - Nothing in the live database changes, except that redo segments are deleted later.
//! - Object-tier extents are not copied: the checkpoint names the same objects, pinned in the
//!   live database's `PINS` (`crate::tier::pins`) while the captured versions still hold them
//!   and before the checkpoint's `CATALOG` is written, so the live database never deletes an
//!   object a complete checkpoint names, until [`Db::release_checkpoint`].

use super::destroy::{is_own_entry, subdirs};
use super::{check_path, lock_database, Db, DbInner};
use crate::catalog::{catalog_path, catalog_tmp_path, Catalog};
use crate::error::{Error, Result};
use crate::extent::FOOTER_SIZE;
use crate::fs::{FileSystem, RandomRwFile, ReadableFile};
use crate::meta::edit::{MetaState, TableMeta};
use crate::meta::slog::Slog;
use crate::redo::{redo_dir, segment_names, RetireHold, SyncedEnd};
use crate::space::header::{HEADER_COPY_OFFSETS, HEADER_SIZE};
use crate::space::{data_file_name, ExtentId, DATA_DIR, EXTENT_SIZE};
use crate::tier::pins::Pins;
use crate::version::MetaSnapshot;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Bytes copied per read and write.
const COPY_CHUNK: usize = 1 << 20;

/// What [`Db::checkpoint`] made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Tables in the checkpoint.
    pub tables: u64,
    /// Local extents copied.
    pub extents: u64,
    /// Object-tier extents the checkpoint names (not copied; pinned in the live database
    /// until [`Db::release_checkpoint`]).
    pub object_extents: u64,
    /// Redo segments copied.
    pub redo_segments: u64,
    /// Bytes copied (extents, data file headers, redo segments).
    pub bytes_copied: u64,
    /// Time taken, in microseconds.
    pub micros: u64,
}

impl Db {
    /// Makes an openable, consistent copy of the database in directory `dir`, which must not
    /// hold a database (it is created if missing). The copy holds every write acknowledged
    /// before the call; writes go on meanwhile. Open it with [`Db::open`] (it is a database of
    /// its own from then on) or [`Db::open_read_only`].
    ///
    /// Errors: [`Error::AlreadyExists`] if `dir` holds a database, [`Error::NotADatabase`] if
    /// it holds files that are not Riptide's, [`Error::Locked`] if another instance has it
    /// open, [`Error::Io`]. After an error `dir` holds no `CATALOG`.
    ///
    /// Extents in the object tier are not copied: the checkpoint names the same objects, and
    /// this database pins them (`PINS`) so it never deletes them while the checkpoint may read
    /// them, until [`Db::release_checkpoint`]. Such a checkpoint opens read-only
    /// ([`Db::open_read_only`]) with the same object store; a read-write open with that store
    /// is refused, since the store belongs to this database.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use riptide::{Db, Options};
    /// let db = Db::open(dir.path().join("live"), Options::default())?;
    /// db.default_table().put(b"k", b"v")?;
    /// db.checkpoint(dir.path().join("copy"))?;
    /// db.default_table().put(b"k", b"later")?;
    /// let copy = Db::open(dir.path().join("copy"), Options::default())?;
    /// assert_eq!(copy.default_table().get(b"k")?, Some(b"v".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointInfo> {
        self.inner.checkpoint(dir.as_ref())
    }

    /// Releases the pin a checkpoint made on this database's object-tier extents (`dir` as
    /// given to [`Db::checkpoint`]): the objects that no metadata and no other checkpoint
    /// names are deleted after the grace period (those this instance kept for the pin at
    /// once, others at the next open). Call it when the checkpoint is no longer needed
    /// (deleting the checkpoint's directory does not release it). `Ok(false)` if `dir` has
    /// no pin (a checkpoint without object-tier extents has none).
    pub fn release_checkpoint(&self, dir: impl AsRef<Path>) -> Result<bool> {
        self.inner.release_checkpoint(dir.as_ref())
    }
}

/// A consistent cut of the database: the catalog and each table's metadata, with the versions
/// that keep their extents from being freed and a hold that keeps every redo segment on disk,
/// both until the cut is dropped.
pub(super) struct Capture<'a> {
    pub(super) catalog: Catalog,
    pub(super) tables: BTreeMap<u32, TableMeta>,
    pub(super) versions: Vec<Arc<MetaSnapshot>>,
    pub(super) redo_hold: RetireHold<'a>,
}

impl DbInner {
    /// The id the next table created will take. A copy's catalog carries it: a table created
    /// after the cut may have records in the copied redo log, which recovery of the copy skips
    /// (no table has its id there) and which must never reach a table the copy creates later.
    pub(super) fn next_table_id(&self) -> u32 {
        let _ddl = self.ddl.lock();
        self.registry.read().catalog.next_id
    }

    /// Captures the catalog and every table's installed metadata (see [`Capture`]).
    pub(super) fn capture(&self) -> Capture<'_> {
        // No redo segment is deleted from here until the cut is dropped.
        let redo_hold = self.redo_segments.hold();
        let _ddl = self.ddl.lock();
        let catalog = self.registry.read().catalog.clone();
        let mut tables = BTreeMap::new();
        let mut versions = Vec::new();
        for t in self.all_tables() {
            // A table's metadata and its installed version change together under its change
            // lock (flushes and compactions commit and publish under it).
            let _change = t.change.lock();
            versions.push(t.current());
            let meta: TableMeta = self.meta.lock().state.tables.get(&t.id).cloned().unwrap_or_default();
            tables.insert(t.id, meta);
        }
        Capture {
            catalog,
            tables,
            versions,
            redo_hold,
        }
    }

    fn checkpoint(&self, dir: &Path) -> Result<CheckpointInfo> {
        let started = Instant::now();
        check_path(dir)?;
        self.check_open()?;
        self.check_writable()?;
        let fs = self.opts.fs.clone();
        let _target_lock = prepare_target(fs.as_ref(), dir)?;
        let Capture {
            catalog,
            tables,
            versions: _versions,
            redo_hold: _redo_hold,
        } = self.capture();
        let objects: Vec<u64> = tables
            .values()
            .flat_map(|m| m.extents())
            .map(|(_, _, e)| e.id)
            .filter(|id| ExtentId(*id).is_object())
            .collect();
        let mut info = CheckpointInfo {
            tables: tables.len() as u64,
            object_extents: objects.len() as u64,
            ..Default::default()
        };
        // Pinned while the versions still hold the objects, durably before the CATALOG.
        let pin = pin_name(dir);
        if !objects.is_empty() {
            self.update_pins(|pins| {
                pins.entries.insert(pin.clone(), objects);
            })?;
        }
        let made = self.write_checkpoint(dir, catalog, tables, &mut info);
        if made.is_err() {
            // The CATALOG may be in place (its rename done, the directory sync failed): take it
            // back, and keep the pin if that fails too.
            let catalog = catalog_path(dir);
            let gone = !fs.exists(&catalog) || fs.remove_file(&catalog).is_ok();
            if gone && info.object_extents > 0 {
                // Best effort: a pin left behind only keeps objects until released.
                let _ = self.update_pins(|pins| {
                    pins.entries.remove(&pin);
                });
            }
        }
        made?;
        info.micros = started.elapsed().as_micros() as u64;
        Ok(info)
    }

    /// Steps after the capture: the copies, the metadata, then the `CATALOG`.
    fn write_checkpoint(
        &self,
        dir: &Path,
        catalog: Catalog,
        tables: BTreeMap<u32, TableMeta>,
        info: &mut CheckpointInfo,
    ) -> Result<()> {
        let fs = self.opts.fs.clone();
        // Every write acknowledged so far is in the redo files copied below.
        let synced_end = self.pipeline.sync_log()?;
        copy_extents(fs.as_ref(), &self.path, dir, &tables, info)?;
        copy_redo(fs.as_ref(), &self.path, dir, synced_end, info)?;
        let catalog = catalog.with_next_id(self.next_table_id());
        let state = MetaState::from_tables(tables)?;
        let (mut slog, _) = Slog::open(fs.clone(), dir)?;
        slog.checkpoint(&state)?;
        drop(slog);
        for d in [dir.join(DATA_DIR), redo_dir(dir), dir.to_path_buf()] {
            fs.sync_dir(&d).map_err(|e| Error::io("fsync dir", &d, e))?;
        }

        // Last: the CATALOG makes the checkpoint a database.
        catalog.store(fs.as_ref(), dir)
    }

    /// Changes the checkpoint pins (`PINS`) durably and hands the new set to the object tier.
    fn update_pins(&self, change: impl FnOnce(&mut Pins)) -> Result<()> {
        let _one_at_a_time = self.pins_lock.lock();
        let fs = self.opts.fs.as_ref();
        let mut pins = Pins::load(fs, &self.path)?;
        change(&mut pins);
        pins.store(fs, &self.path)?;
        if let Some(tier) = &self.store.objects {
            tier.set_pinned(pins.ids());
        }
        Ok(())
    }

    fn release_checkpoint(&self, dir: &Path) -> Result<bool> {
        self.check_open()?;
        self.check_writable()?;
        let pin = pin_name(dir);
        let mut found = false;
        if Pins::load(self.opts.fs.as_ref(), &self.path)?
            .entries
            .contains_key(&pin)
        {
            self.update_pins(|pins| found = pins.entries.remove(&pin).is_some())?;
        }
        Ok(found)
    }
}

/// How a checkpoint directory is named in `PINS`: its absolute path (made absolute against
/// the working directory, without resolving links, so it names the same directory after the
/// directory is gone).
fn pin_name(dir: &Path) -> String {
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// Makes `dir` ready for a checkpoint and locks it: refuses a database or a directory with
/// files that are not Riptide's, and deletes what an earlier checkpoint cut short left.
fn prepare_target(fs: &dyn FileSystem, dir: &Path) -> Result<Box<dyn crate::fs::FileLock>> {
    if fs.exists(&catalog_path(dir)) {
        return Err(Error::AlreadyExists(dir.to_path_buf()));
    }
    let list = |d: &Path| match fs.list_dir(d) {
        Ok(names) => Ok(names),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io("list", d, e)),
    };
    if !list(dir)?.iter().all(|n| is_own_entry(dir, n)) {
        return Err(Error::NotADatabase(dir.to_path_buf()));
    }
    fs.create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
    let lock = lock_database(fs, dir)?;
    // Checked again under the lock: another checkpoint may have finished meanwhile.
    if fs.exists(&catalog_path(dir)) {
        return Err(Error::AlreadyExists(dir.to_path_buf()));
    }
    let remove = |p: &Path| match fs.remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", p, e)),
    };
    for (sub, own) in subdirs(dir) {
        for name in list(&sub)?.iter().filter(|n| own(n)) {
            remove(&sub.join(name))?;
        }
    }
    remove(&catalog_tmp_path(dir))?;
    for sub in [dir.join(DATA_DIR), redo_dir(dir)] {
        fs.create_dir_all(&sub).map_err(|e| Error::io("mkdir", &sub, e))?;
    }
    Ok(lock)
}

/// Copies every local extent of `tables` from the database at `db` into the same file and
/// slot under `dir`, with each data file's header; each copied file keeps its source's length
/// (the slots not copied are holes) and is synced.
fn copy_extents(
    fs: &dyn FileSystem,
    db: &Path,
    dir: &Path,
    tables: &BTreeMap<u32, TableMeta>,
    info: &mut CheckpointInfo,
) -> Result<()> {
    // File number -> (start offset, valid length, slots) of each extent in it.
    let mut by_file: BTreeMap<u32, BTreeSet<(u64, u64, u32)>> = BTreeMap::new();
    for (_, _, e) in tables.values().flat_map(|m| m.extents()) {
        let id = ExtentId(e.id);
        if !id.is_object() {
            let start = u64::from(id.slot()) * EXTENT_SIZE;
            by_file
                .entry(id.file())
                .or_default()
                .insert((start, e.data_size, e.slots));
        }
    }
    let header_len = data_header_len();
    for (number, extents) in by_file {
        let src_path = db.join(DATA_DIR).join(data_file_name(number));
        let dst_path = dir.join(DATA_DIR).join(data_file_name(number));
        let src = fs.open_read(&src_path).map_err(|e| Error::io("open", &src_path, e))?;
        let len = src.len().map_err(|e| Error::io("stat", &src_path, e))?;
        let dst = fs
            .open_rw(&dst_path, true)
            .map_err(|e| Error::io("create", &dst_path, e))?;
        dst.set_len(len).map_err(|e| Error::io("truncate", &dst_path, e))?;
        let mut ranges = vec![(0, header_len.min(len))];
        for &(start, data_size, slots) in &extents {
            let end = start + u64::from(slots) * EXTENT_SIZE;
            ranges.extend([(start, data_size), (end - FOOTER_SIZE as u64, FOOTER_SIZE as u64)]);
        }
        // Inside the file system where it can (a reflink on one that shares blocks), else by
        // reads and writes.
        let in_kernel = fs
            .copy_ranges(&src_path, &dst_path, &ranges)
            .map_err(|e| Error::io("copy", &src_path, e))?;
        if !in_kernel {
            for &(offset, n) in &ranges {
                copy_range(src.as_ref(), &src_path, dst.as_ref(), &dst_path, offset, n)?;
            }
        }
        info.bytes_copied += ranges.iter().map(|(_, n)| n).sum::<u64>();
        info.extents += extents.len() as u64;
        dst.sync_data().map_err(|e| Error::io("fsync", &dst_path, e))?;
    }
    Ok(())
}

/// Bytes at the start of a data file that hold its header (both copies).
pub(super) fn data_header_len() -> u64 {
    HEADER_COPY_OFFSETS[1] + HEADER_SIZE as u64
}

/// Copies `n` bytes at `offset` of `src` to the same offset of `dst`.
fn copy_range(
    src: &dyn ReadableFile,
    src_path: &Path,
    dst: &dyn RandomRwFile,
    dst_path: &Path,
    offset: u64,
    n: u64,
) -> Result<()> {
    let mut buf = Vec::with_capacity(COPY_CHUNK);
    let mut done = 0u64;
    while done < n {
        let len = (n - done).min(COPY_CHUNK as u64) as usize;
        buf.clear(); // `read_exact_into` appends
        src.read_exact_into(&mut buf, len, offset + done)
            .map_err(|e| Error::io("read", src_path, e))?;
        dst.write_at(&buf, offset + done)
            .map_err(|e| Error::io("write", dst_path, e))?;
        done += len as u64;
    }
    Ok(())
}

/// Copies the redo segments of the database at `db` into `dir` up to where the log was
/// synced (`synced_end`; see [`SyncedEnd::copy_len`]), each synced.
fn copy_redo(
    fs: &dyn FileSystem,
    db: &Path,
    dir: &Path,
    synced_end: SyncedEnd,
    info: &mut CheckpointInfo,
) -> Result<()> {
    let src_dir = redo_dir(db);
    let dst_dir = redo_dir(dir);
    for name in segment_names(fs, &src_dir)? {
        let src_path = src_dir.join(&name);
        let dst_path = dst_dir.join(&name);
        let src = fs.open_read(&src_path).map_err(|e| Error::io("open", &src_path, e))?;
        let file_len = src.len().map_err(|e| Error::io("stat", &src_path, e))?;
        let Some(len) = synced_end.copy_len(&name, file_len) else {
            continue;
        };
        let mut dst = fs.create(&dst_path).map_err(|e| Error::io("create", &dst_path, e))?;
        let mut buf = Vec::with_capacity(COPY_CHUNK);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(COPY_CHUNK as u64) as usize;
            buf.clear(); // `read_exact_into` appends
            src.read_exact_into(&mut buf, n, done)
                .map_err(|e| Error::io("read", &src_path, e))?;
            dst.append(&buf).map_err(|e| Error::io("write", &dst_path, e))?;
            done += n as u64;
        }
        dst.sync_data().map_err(|e| Error::io("fsync", &dst_path, e))?;
        info.redo_segments += 1;
        info.bytes_copied += len;
    }
    Ok(())
}
