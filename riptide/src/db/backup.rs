//! [`Db::backup`]: a new backup in a [`BackupEngine`]'s store, from the same consistent cut as
//! a checkpoint (`checkpoint.rs`): the extents no earlier backup uploaded, the small files
//! (catalog, one meta checkpoint of the cut, the redo segments, data file headers), then the
//! manifest, create-only, under a number claimed first. See `crate::backup` for the layout and
//! invariants.

use super::checkpoint::{data_header_len, Capture};
use super::{Db, DbInner};
use crate::backup::manifest::{ExtentEntry, FileEntry, Manifest};
use crate::backup::{content_key, extent_object, file_object, manifest_name, BackupEngine, BackupInfo};
use crate::coding::masked_crc32c;
use crate::error::{Error, Result};
use crate::extent::FOOTER_SIZE;
use crate::fs::{FaultFs, FileSystem};
use crate::meta::edit::MetaState;
use crate::meta::slog::Slog;
use crate::redo::{redo_dir, segment_names};
use crate::space::{data_file_name, ExtentId, DATA_DIR, EXTENT_SIZE};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

impl Db {
    /// Makes a new backup of the database in `engine`'s store, holding every write
    /// acknowledged before the call (as [`Db::checkpoint`] does); writes go on meanwhile.
    /// Incremental: an extent already in the store (by the hash of its bytes) is not uploaded
    /// again. Object-tier extents are read from the tier and backed up like local ones, so a
    /// backup does not depend on the database's object store.
    ///
    /// Errors: [`Error::ObjectStore`] when the backup store fails (retried first); the
    /// backup is then absent (no manifest) and the next one reuses what was uploaded.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use riptide::backup::{BackupEngine, RestoreOptions};
    /// use riptide::tier::DirObjectStore;
    /// use riptide::{fs::PosixFs, Db, Options};
    /// use std::sync::Arc;
    /// let db = Db::open(dir.path().join("db"), Options::default())?;
    /// db.default_table().put(b"k", b"v")?;
    /// let engine = BackupEngine::new(Arc::new(DirObjectStore::new(Arc::new(PosixFs), dir.path().join("backups"))));
    /// let info = db.backup(&engine)?;
    /// engine.verify(info.id)?;
    /// engine.restore(info.id, &dir.path().join("restored"), &RestoreOptions::default())?;
    /// let restored = Db::open(dir.path().join("restored"), Options::default())?;
    /// assert_eq!(restored.default_table().get(b"k")?, Some(b"v".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn backup(&self, engine: &BackupEngine) -> Result<BackupInfo> {
        self.inner.backup(engine)
    }
}

impl DbInner {
    fn backup(&self, engine: &BackupEngine) -> Result<BackupInfo> {
        self.check_open()?;
        let id = engine.claim_id()?;
        let existing = engine.extent_keys()?;
        let cut = self.capture();
        // Every write acknowledged so far is in the redo segments backed up below.
        let synced_end = self.pipeline.sync_log()?;
        let mut info = BackupInfo {
            id,
            ..Default::default()
        };
        let mut manifest = Manifest {
            id,
            ..Default::default()
        };
        self.backup_extents(engine, &cut, &existing, &mut manifest, &mut info)?;
        let fs = self.opts.fs.as_ref();
        let mut upload = |path: String, bytes: Vec<u8>| -> Result<()> {
            let name = file_object(id, &path);
            engine.request("put", &name, || engine.store().put(&name, &bytes))?;
            info.bytes_uploaded += bytes.len() as u64;
            info.files += 1;
            manifest.files.push(FileEntry {
                path,
                size: bytes.len() as u64,
                crc: masked_crc32c(&bytes),
            });
            Ok(())
        };
        for (name, bytes) in meta_files(cut.tables.clone())? {
            upload(format!("meta/{name}"), bytes)?;
        }
        let redo = redo_dir(&self.path);
        for name in segment_names(fs, &redo)? {
            let path = redo.join(&name);
            let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
            let file_len = file.len().map_err(|e| Error::io("stat", &path, e))?;
            let Some(len) = synced_end.copy_len(&name, file_len) else {
                continue;
            };
            let mut bytes = Vec::new();
            file.read_exact_into(&mut bytes, len as usize, 0)
                .map_err(|e| Error::io("read", &path, e))?;
            upload(format!("redo/{name}"), bytes)?;
        }
        let files: HashSet<u32> = manifest
            .extents
            .iter()
            .map(|e| ExtentId(e.id))
            .filter(|e| !e.is_object())
            .map(ExtentId::file)
            .collect();
        let mut files: Vec<u32> = files.into_iter().collect();
        files.sort_unstable();
        for n in files {
            let path = self.path.join(DATA_DIR).join(data_file_name(n));
            let f = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
            let len = f.len().map_err(|e| Error::io("stat", &path, e))?;
            let mut header = Vec::new();
            f.read_exact_into(&mut header, data_header_len().min(len) as usize, 0)
                .map_err(|e| Error::io("read", &path, e))?;
            upload(format!("{DATA_DIR}/{}", data_file_name(n)), header)?;
            manifest.data_files.push((n, len));
        }
        // After the redo log, with the next table id of now (see `next_table_id`).
        let catalog = cut.catalog.clone().with_next_id(self.next_table_id());
        upload("CATALOG".into(), catalog.encode())?;
        drop(cut);
        let name = manifest_name(id);
        let bytes = manifest.encode();
        if !engine.request("put", &name, || engine.store().put_if_absent(&name, &bytes))? {
            return Err(Error::AlreadyExists(format!("{}/{name}", engine.location()).into()));
        }
        Ok(info)
    }

    /// Uploads the extents of `cut` that the store lacks and lists every one in `manifest`.
    fn backup_extents(
        &self,
        engine: &BackupEngine,
        cut: &Capture<'_>,
        existing: &HashSet<String>,
        manifest: &mut Manifest,
        info: &mut BackupInfo,
    ) -> Result<()> {
        let mut seen = HashSet::new();
        let mut uploaded_now = HashSet::new();
        let mut extents = cut.versions.iter().flat_map(|v| v.levels.all_extents());
        // Read and hashed here, in order; uploaded by `engine.parallel_requests` threads.
        let uploads = std::iter::from_fn(|| {
            for e in extents.by_ref() {
                if !seen.insert(e.id.0) {
                    continue;
                }
                let bytes = match self.read_extent(e) {
                    Ok(b) => b,
                    Err(err) => return Some(Err(err)),
                };
                let key = content_key(&bytes);
                info.extents += 1;
                info.extent_bytes += bytes.len() as u64;
                manifest.extents.push(ExtentEntry {
                    id: e.id.0,
                    slots: e.meta.slots,
                    data_size: e.meta.data_size,
                    key: key.clone(),
                });
                if !existing.contains(&key) && uploaded_now.insert(key.clone()) {
                    info.extents_uploaded += 1;
                    info.bytes_uploaded += bytes.len() as u64;
                    return Some(Ok((extent_object(&key), bytes)));
                }
            }
            None
        });
        engine.for_each_job(uploads, |(name, bytes)| {
            engine.request("put", &name, || engine.store().put(&name, &bytes))
        })
    }

    /// An extent's `valid ‖ footer` bytes (an object-tier extent is read whole once, into the
    /// extent cache).
    fn read_extent(&self, e: &crate::extent_store::LiveExtent) -> Result<Vec<u8>> {
        self.store.scanning(e);
        let (file, path, base) = self.store.locate(e)?;
        let size = e.meta.data_size;
        let mut bytes = Vec::with_capacity((size + FOOTER_SIZE as u64) as usize);
        let end = base + u64::from(e.meta.slots) * EXTENT_SIZE;
        file.read_exact_into(&mut bytes, size as usize, base)
            .and_then(|()| file.read_exact_into(&mut bytes, FOOTER_SIZE, end - FOOTER_SIZE as u64))
            .map_err(|err| Error::io("read", &path, err))?;
        Ok(bytes)
    }
}

/// The metadata files of one meta checkpoint of `tables` (written in memory): name -> bytes.
fn meta_files(tables: BTreeMap<u32, crate::meta::edit::TableMeta>) -> Result<Vec<(String, Vec<u8>)>> {
    let fs = Arc::new(FaultFs::new());
    let root = Path::new("/backup");
    let (mut slog, _) = Slog::open(fs.clone(), root)?;
    slog.checkpoint(&MetaState::from_tables(tables)?)?;
    drop(slog);
    let dir = root.join("meta");
    let mut out = Vec::new();
    for name in fs.list_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
        out.push((name.clone(), read_whole(fs.as_ref(), &dir.join(&name))?));
    }
    out.sort();
    Ok(out)
}

fn read_whole(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    fs.open_read(path)
        .and_then(|f| f.read_all())
        .map_err(|e| Error::io("read", path, e))
}
