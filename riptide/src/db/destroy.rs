//! [`Db::destroy`]: deletes a database's files, as RocksDB's `DestroyDB` does.
//!
//! Invariants:
//! - Nothing is deleted while another instance (this process or another) holds the
//!   database's `LOCK`: the lock is taken first, and released only after the last file is gone.
//! - Only files with Riptide's own names are deleted (`CATALOG`, `LOCK`, the `meta/`, `redo/`
//!   `data/` and `extent-cache/` files; not the objects of an object tier); any other file stays, and so does its directory.
//! - A directory without a `CATALOG` that holds anything but Riptide's names is not a
//!   database: [`Error::NotADatabase`], and nothing is deleted.

use super::{check_path, lock_database, Db};
use crate::catalog::{catalog_path, catalog_tmp_path};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, PosixFs};
use crate::meta::current::{is_meta_file_name, meta_dir};
use crate::redo::{is_segment_name, redo_dir};
use crate::space::readers::{is_lease_file_name, live_readers, READERS_DIR, WRITER_FILE};
use crate::space::{is_data_file_name, DATA_DIR};
use crate::tier::{is_cached_extent_name, EXTENT_CACHE_DIR};
use std::io;
use std::path::{Path, PathBuf};

/// Tells whether a file name is one Riptide writes in a given directory.
type OwnName = fn(&str) -> bool;

/// The directories Riptide writes inside a database directory, each with the rule that
/// recognises its files (owned by the module that writes them).
pub(super) fn subdirs(db: &Path) -> [(PathBuf, OwnName); 5] {
    [
        (db.join(READERS_DIR), is_lease_file_name),
        (meta_dir(db), is_meta_file_name),
        (redo_dir(db), is_segment_name),
        (db.join(DATA_DIR), is_data_file_name),
        (db.join(EXTENT_CACHE_DIR), is_cached_extent_name),
    ]
}

/// The entries Riptide writes in the database directory itself.
pub(super) fn is_own_entry(db: &Path, name: &str) -> bool {
    let own = |p: PathBuf| p.file_name().is_some_and(|n| n == name);
    name == "LOCK"
        || name == WRITER_FILE
        || name == format!("{WRITER_FILE}.tmp")
        || name == crate::tier::owner::IDENTITY_FILE
        || name == format!("{}.tmp", crate::tier::owner::IDENTITY_FILE)
        || name == crate::tier::pins::PINS_FILE
        || name == format!("{}.tmp", crate::tier::pins::PINS_FILE)
        || own(catalog_path(db))
        || own(catalog_tmp_path(db))
        || subdirs(db).into_iter().any(|(d, _)| own(d))
}

impl Db {
    /// Deletes the database at `path`: every file Riptide wrote there, then the directory if
    /// nothing else is left in it. Like RocksDB's `DestroyDB`, it takes the database's `LOCK`
    /// first, so it refuses with [`Error::Locked`] while any instance has the database open
    /// (a read-only view of it included),
    /// and it leaves files with other names in place. A missing `path` is not an error.
    ///
    /// Errors: [`Error::Locked`]; [`Error::NotADatabase`] when `path` is a file, or a
    /// directory without a `CATALOG` holding files of other names (nothing is deleted then);
    /// [`Error::Io`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("db");
    /// let db = riptide::Db::open(&path, riptide::Options::default())?;
    /// assert!(matches!(riptide::Db::destroy(&path), Err(riptide::Error::Locked(_))));
    /// db.close()?;
    /// riptide::Db::destroy(&path)?;
    /// assert!(!path.exists());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn destroy(path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        check_path(path)?;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        if !meta.is_dir() {
            return Err(Error::NotADatabase(path.to_path_buf()));
        }
        let fs = PosixFs;
        let list = |dir: &Path| match fs.list_dir(dir) {
            Ok(names) => Ok(names),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io("list", dir, e)),
        };
        let top = list(path)?;
        let has_catalog = fs.exists(&catalog_path(path));
        if !has_catalog && !top.iter().all(|n| is_own_entry(path, n)) {
            return Err(Error::NotADatabase(path.to_path_buf()));
        }
        let lock = lock_database(&fs, path)?;
        // A read-only view holds a lease, not the lock.
        if live_readers(&fs, path).any() {
            return Err(Error::Locked(path.to_path_buf()));
        }
        let remove = |p: &Path| match fs.remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", p, e)),
        };
        for (dir, own) in subdirs(path) {
            for name in list(&dir)?.iter().filter(|n| own(n)) {
                remove(&dir.join(name))?;
            }
            remove_dir_if_empty(&dir)?;
        }
        remove(&catalog_tmp_path(path))?;
        remove(&catalog_path(path))?;
        for name in [
            WRITER_FILE,
            crate::tier::owner::IDENTITY_FILE,
            crate::tier::pins::PINS_FILE,
        ] {
            remove(&path.join(name))?;
            remove(&path.join(format!("{name}.tmp")))?;
        }
        // The lock file goes last, while still held, then the directory if nothing is left.
        remove(&path.join("LOCK"))?;
        drop(lock);
        remove_dir_if_empty(path)
    }
}

/// Removes `dir` if it exists and is empty; a directory with other files stays.
fn remove_dir_if_empty(dir: &Path) -> Result<()> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty) => Ok(()),
        Err(e) => Err(Error::io("rmdir", dir, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Options;

    #[test]
    fn destroy_refuses_an_open_database_and_deletes_a_closed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = Db::open(&path, Options::default()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        db.flush().unwrap();
        assert!(matches!(Db::destroy(&path), Err(Error::Locked(_))));
        // The refused destroy deleted nothing: the instance still reads and writes.
        assert_eq!(db.default_table().get(b"k").unwrap(), Some(b"v".to_vec()));
        db.default_table().put(b"k2", b"v2").unwrap();
        db.close().unwrap();
        Db::destroy(&path).unwrap();
        assert!(
            !path.exists(),
            "left: {:?}",
            std::fs::read_dir(&path).unwrap().collect::<Vec<_>>()
        );
        // A missing path is not an error.
        Db::destroy(&path).unwrap();
    }

    #[test]
    fn destroy_leaves_foreign_files_and_refuses_non_databases() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        Db::open(&path, Options::default()).unwrap().close().unwrap();
        std::fs::write(path.join("notes.txt"), b"mine").unwrap();
        Db::destroy(&path).unwrap();
        assert_eq!(std::fs::read(path.join("notes.txt")).unwrap(), b"mine");
        assert!(!path.join("CATALOG").exists() && !path.join("meta").exists());

        // A directory of other files, and a plain file, are not databases.
        let other = dir.path().join("home");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("LOCK"), b"").unwrap();
        std::fs::write(other.join("thesis.tex"), b"x").unwrap();
        assert!(matches!(Db::destroy(&other), Err(Error::NotADatabase(_))));
        assert!(other.join("LOCK").exists() && other.join("thesis.tex").exists());
        assert!(matches!(
            Db::destroy(other.join("thesis.tex")),
            Err(Error::NotADatabase(_))
        ));
        // An empty directory goes.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        Db::destroy(&empty).unwrap();
        assert!(!empty.exists());
        assert!(matches!(Db::destroy(""), Err(Error::InvalidOption { .. })));
    }
}
