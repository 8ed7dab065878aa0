//! Reading a backup back: [`verify`] checks every object a backup names, [`restore`] writes
//! the database it describes into a new directory (see the module docs of `backup`).

use super::manifest::Manifest;
use super::{content_key, extent_object, file_object, BackupEngine, VerifyReport, FOOTER};
use crate::catalog::{catalog_path, Catalog};
use crate::coding::masked_crc32c;
use crate::error::{Error, Result};
use crate::fs::{FaultFs, FileSystem, PosixFs, RandomRwFile};
use crate::meta::edit::ExtentMeta;
use crate::meta::slog::Slog;
use crate::space::{ExtentId, EXTENT_SIZE};
use crate::tier::objects::{object_name, ImageFile};
use crate::tier::ObjectStore;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Where [`BackupEngine::restore`] writes.
#[derive(Debug, Clone)]
pub struct RestoreOptions {
    /// The file system of the target directory. Default: the operating system's.
    pub fs: Arc<dyn FileSystem>,
    /// Where object-tier extents of the backup go (as `ext/<id>`, the restored database's
    /// own object tier: open it with this store). Required if the backup has any.
    pub object_store: Option<Arc<dyn ObjectStore>>,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            fs: Arc::new(PosixFs),
            object_store: None,
        }
    }
}

/// A file of backup `id`, checked against its manifest entry.
fn get_file(engine: &BackupEngine, id: u64, path: &str, size: u64, crc: u32) -> Result<Vec<u8>> {
    let name = file_object(id, path);
    let bytes = engine.request("get", &name, || engine.store().get(&name))?;
    if bytes.len() as u64 != size || masked_crc32c(&bytes) != crc {
        return Err(Error::corruption(name, 0, "backup file does not match its manifest"));
    }
    Ok(bytes)
}

/// An extent of the backup (`valid ‖ footer`), checked against its key and length.
fn get_extent(engine: &BackupEngine, key: &str, data_size: u64) -> Result<Vec<u8>> {
    let name = extent_object(key);
    let bytes = engine.request("get", &name, || engine.store().get(&name))?;
    if Some(bytes.len() as u64) != data_size.checked_add(FOOTER) || content_key(&bytes) != key {
        return Err(Error::corruption(name, 0, "backup extent does not match its key"));
    }
    Ok(bytes)
}

/// The extent metadata of the backup's metadata files (recovered in memory).
fn extent_metas(engine: &BackupEngine, m: &Manifest) -> Result<HashMap<u64, ExtentMeta>> {
    let fs = FaultFs::new();
    let root = Path::new("/backup");
    for f in m.files.iter().filter(|f| f.path.starts_with("meta/")) {
        fs.write_file(&root.join(&f.path), get_file(engine, m.id, &f.path, f.size, f.crc)?);
    }
    let (_, recovered) = Slog::open(Arc::new(fs), root)?;
    Ok(recovered
        .state
        .tables
        .values()
        .flat_map(|t| t.extents().map(|(_, _, e)| (e.id, e.clone())))
        .collect())
}

pub(super) fn verify(engine: &BackupEngine, id: u64) -> Result<VerifyReport> {
    let m = engine.manifest(id)?;
    let mut report = VerifyReport::default();
    for f in &m.files {
        get_file(engine, id, &f.path, f.size, f.crc)?;
        report.files += 1;
        report.bytes += f.size;
    }
    let metas = extent_metas(engine, &m)?;
    if metas.len() != m.extents.len() {
        return Err(Error::corruption(
            super::manifest_name(id),
            0,
            format!(
                "the manifest lists {} extents, the metadata {}",
                m.extents.len(),
                metas.len()
            ),
        ));
    }
    engine.for_each_job(m.extents.iter().map(Ok), |e| {
        let name = extent_object(&e.key);
        let meta = metas
            .get(&e.id)
            .ok_or_else(|| Error::corruption(&name, 0, format!("extent {:016x} is not in the metadata", e.id)))?;
        let bytes = get_extent(engine, &e.key, e.data_size)?;
        let image = ImageFile::new(bytes, e.data_size, e.slots);
        match meta.verify_bytes(&image, Path::new(&name), 0) {
            Ok(None) => Ok(()),
            Ok(Some(problem)) | Err(problem) => Err(Error::corruption(&name, 0, problem)),
        }
    })?;
    report.extents += m.extents.len() as u64;
    report.bytes += m.extents.iter().map(|e| e.data_size + FOOTER).sum::<u64>();
    Ok(report)
}

/// Maps an I/O error of `op` on `p` to the engine's error.
fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(op, p, e)
}

pub(super) fn restore(engine: &BackupEngine, id: u64, dir: &Path, opts: &RestoreOptions) -> Result<()> {
    let fs = opts.fs.as_ref();
    if fs.exists(&catalog_path(dir)) {
        return Err(Error::AlreadyExists(dir.to_path_buf()));
    }
    if fs.list_dir(dir).is_ok_and(|names| !names.is_empty()) {
        return Err(Error::NotADatabase(dir.to_path_buf()));
    }
    let m = engine.manifest(id)?;
    if m.extents.iter().any(|e| ExtentId(e.id).is_object()) && opts.object_store.is_none() {
        return Err(Error::InvalidOption {
            option: "object_store",
            reason: format!("backup {id} has extents in the object tier; restore them into an object store"),
        });
    }
    let mut data_files: HashMap<u32, Arc<dyn RandomRwFile>> = HashMap::new();
    let data_file_number =
        |path: &str| -> Option<u32> { path.strip_prefix("data/")?.strip_suffix(".dat")?.parse().ok() };
    let mut catalog = None;
    for f in &m.files {
        let bytes = get_file(engine, id, &f.path, f.size, f.crc)?;
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            fs.create_dir_all(parent).map_err(io("mkdir", parent))?;
        }
        if f.path == "CATALOG" {
            catalog = Some(bytes);
        } else if let Some(n) = data_file_number(&f.path) {
            let file = fs.open_rw(&path, true).map_err(io("create", &path))?;
            file.write_at(&bytes, 0).map_err(io("write", &path))?;
            data_files.insert(n, file);
        } else {
            let mut file = fs.create(&path).map_err(io("create", &path))?;
            file.append(&bytes).map_err(io("write", &path))?;
            file.sync_data().map_err(io("fsync", &path))?;
        }
    }
    for &(n, len) in &m.data_files {
        let file = data_files
            .get(&n)
            .ok_or_else(|| Error::corruption(super::manifest_name(id), 0, format!("no header for data file {n}")))?;
        file.set_len(len).map_err(io("truncate", dir))?;
    }
    engine.for_each_job(m.extents.iter().map(Ok), |e| {
        let bytes = get_extent(engine, &e.key, e.data_size)?;
        let ext = ExtentId(e.id);
        if ext.is_object() {
            let store = opts.object_store.as_ref().expect("checked above");
            let name = object_name(ext);
            return engine.request("put", &name, || store.put(&name, &bytes));
        }
        let file = data_files.get(&ext.file()).ok_or_else(|| {
            Error::corruption(
                super::manifest_name(id),
                0,
                format!("extent {:016x} in a data file without header", e.id),
            )
        })?;
        let start = u64::from(ext.slot()) * EXTENT_SIZE;
        let (valid, footer) = bytes.split_at(e.data_size as usize);
        file.write_at(valid, start).map_err(io("write", dir))?;
        file.write_at(footer, start + u64::from(e.slots) * EXTENT_SIZE - FOOTER)
            .map_err(io("write", dir))
    })?;
    for file in data_files.values() {
        file.sync_data().map_err(io("fsync", dir))?;
    }
    for d in ["data", "redo", "meta", ""] {
        let p = dir.join(d);
        if fs.exists(&p) {
            fs.sync_dir(&p).map_err(io("fsync dir", &p))?;
        }
    }
    // Last: the CATALOG makes the directory a database.
    let catalog = catalog.ok_or_else(|| Error::corruption(super::manifest_name(id), 0, "no CATALOG in the backup"))?;
    Catalog::decode(Path::new(&file_object(id, "CATALOG")), &catalog)?.store(fs, dir)
}
