//! [`ReadOnlyFs`]: a file system that never changes the one below it, for
//! [`crate::Db::open_read_only`].
//!
//! Reads come from the base file system; everything an open writes (a new slog and `CURRENT`,
//! a new redo segment, a cut torn tail, deletions of leftovers) goes to an in-memory layer
//! that shadows the base and is lost when the instance closes.
//!
//! Invariants:
//! - No call writes, renames, truncates or deletes anything in the base. The one exception is
//!   [`FileSystem::lock`], which takes the base's lock (creating the `LOCK` file if missing),
//!   so that no read-write instance changes the files while they are read.
//! - A path is in the memory layer, or deleted (a *whiteout*), or read from the base; a file
//!   of the base that is renamed or truncated is first copied into the memory layer whole, and
//!   so are the files of a directory given to [`ReadOnlyFs::shadow_dir`], whose base files
//!   stop showing through.
//! - A base file opened for positional writes ([`FileSystem::open_rw`]) refuses writes and
//!   length changes (`PermissionDenied`); its syncs and hints do nothing.

use super::{FaultFs, FileLock, FileSystem, RandomRwFile, ReadableFile, WritableFile};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A read-only view of a file system with an in-memory layer for writes (see the module docs).
#[derive(Debug)]
pub struct ReadOnlyFs {
    base: Arc<dyn FileSystem>,
    mem: FaultFs,
    whiteouts: Mutex<HashSet<PathBuf>>,
    /// Directories whose base files were copied into the memory layer whole: the base's
    /// files there no longer show through.
    shadowed: Mutex<HashSet<PathBuf>>,
}

impl ReadOnlyFs {
    /// A read-only view of `base`.
    pub fn new(base: Arc<dyn FileSystem>) -> Self {
        ReadOnlyFs {
            base,
            mem: FaultFs::new(),
            whiteouts: Mutex::new(HashSet::new()),
            shadowed: Mutex::new(HashSet::new()),
        }
    }

    fn whited_out(&self, path: &Path) -> bool {
        self.whiteouts.lock().contains(path) || path.parent().is_some_and(|d| self.shadowed.lock().contains(d))
    }

    /// Copies every file of the base's directory `dir` into the memory layer and hides the
    /// base's directory from then on, so later reads see its files as they are now whatever
    /// another process does to them (a view of a live database copies its redo log). A file
    /// that vanishes during the copy is an error (`NotFound`); a missing directory copies
    /// nothing.
    pub fn shadow_dir(&self, dir: &Path) -> io::Result<()> {
        let names = match self.base.list_dir(dir) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        for name in &names {
            let path = dir.join(name);
            let data = self.base.open_read(&path)?.read_all()?;
            self.mem_parent(&path)?;
            self.mem.write_file(&path, data);
        }
        self.mem.create_dir_all(dir)?;
        self.shadowed.lock().insert(dir.to_path_buf());
        Ok(())
    }

    /// True if `path` is a file of the base that shows through (not shadowed, not deleted).
    fn in_base(&self, path: &Path) -> bool {
        !self.mem.exists(path) && !self.whited_out(path) && self.base.exists(path)
    }

    fn mem_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) => self.mem.create_dir_all(p),
            None => Ok(()),
        }
    }

    /// Copies a base file into the memory layer (before it is renamed or cut).
    fn copy_up(&self, path: &Path) -> io::Result<()> {
        if self.in_base(path) {
            let data = self.base.open_read(path)?.read_all()?;
            self.mem_parent(path)?;
            self.mem.write_file(path, data);
        }
        Ok(())
    }
}

impl FileSystem for ReadOnlyFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.mem.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let base = self.base.list_dir(path);
        let mem = self.mem.list_dir(path);
        if let (Err(e), Err(_)) = (&base, &mem) {
            return Err(io::Error::new(e.kind(), e.to_string()));
        }
        let mut names = BTreeSet::new();
        for name in base.unwrap_or_default() {
            if !self.whited_out(&path.join(&name)) {
                names.insert(name);
            }
        }
        names.extend(mem.unwrap_or_default());
        Ok(names.into_iter().collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.mem.exists(path) || (!self.whited_out(path) && self.base.exists(path))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.mem_parent(path)?;
        let file = self.mem.create(path)?;
        self.whiteouts.lock().remove(path);
        Ok(file)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn ReadableFile>> {
        if self.mem.exists(path) {
            self.mem.open_read(path)
        } else if self.whited_out(path) {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was deleted", path.display()),
            ))
        } else {
            self.base.open_read(path)
        }
    }

    fn open_rw(&self, path: &Path, create: bool) -> io::Result<Arc<dyn RandomRwFile>> {
        if self.mem.exists(path) {
            return self.mem.open_rw(path, false);
        }
        if self.in_base(path) {
            let file = self.base.open_read(path)?;
            return Ok(Arc::new(ReadOnlyFile {
                file,
                path: path.to_path_buf(),
            }));
        }
        if !create {
            return Err(io::Error::new(io::ErrorKind::NotFound, path.display().to_string()));
        }
        self.mem_parent(path)?;
        let file = self.mem.open_rw(path, true)?;
        self.whiteouts.lock().remove(path);
        Ok(file)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let from_base = self.in_base(from);
        self.copy_up(from)?;
        self.mem_parent(to)?;
        self.mem.rename(from, to)?;
        let mut whiteouts = self.whiteouts.lock();
        if from_base {
            whiteouts.insert(from.to_path_buf());
        }
        whiteouts.remove(to);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        if self.mem.exists(path) {
            self.mem.remove_file(path)?;
            if self.base.exists(path) {
                self.whiteouts.lock().insert(path.to_path_buf());
            }
            Ok(())
        } else if self.in_base(path) {
            self.whiteouts.lock().insert(path.to_path_buf());
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, path.display().to_string()))
        }
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.copy_up(path)?;
        self.mem.truncate(path, len)
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.base.lock(path)
    }

    fn allocated_bytes(&self, path: &Path) -> io::Result<Option<u64>> {
        if self.in_base(path) {
            self.base.allocated_bytes(path)
        } else {
            Ok(None)
        }
    }
}

/// A base file opened for positional writes through [`ReadOnlyFs`]: reads go through, writes
/// are refused.
struct ReadOnlyFile {
    file: Box<dyn ReadableFile>,
    path: PathBuf,
}

impl ReadOnlyFile {
    fn refused(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is opened read-only", self.path.display()),
        )
    }
}

impl std::fmt::Debug for ReadOnlyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadOnlyFile({})", self.path.display())
    }
}

impl ReadableFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.file.prefetch(offset, len)
    }

    fn read_exact_into(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<()> {
        self.file.read_exact_into(buf, len, offset)
    }
}

impl RandomRwFile for ReadOnlyFile {
    fn write_at(&self, _data: &[u8], _offset: u64) -> io::Result<()> {
        Err(self.refused())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(self.refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (FaultFs, ReadOnlyFs) {
        let base = FaultFs::new();
        base.write_file(Path::new("/db/a"), b"base-a".to_vec());
        base.write_file(Path::new("/db/b"), b"base-b".to_vec());
        let ro = ReadOnlyFs::new(Arc::new(base.clone()));
        (base, ro)
    }

    fn read(fs: &dyn FileSystem, p: &str) -> Vec<u8> {
        fs.open_read(Path::new(p)).unwrap().read_all().unwrap()
    }

    #[test]
    fn writes_renames_and_deletes_stay_in_memory() {
        let (base, ro) = setup();
        let p = Path::new;
        let mut f = ro.create(p("/db/new")).unwrap();
        f.append(b"fresh").unwrap();
        f.sync_data().unwrap();
        drop(f);
        ro.rename(p("/db/new"), p("/db/a")).unwrap();
        ro.remove_file(p("/db/b")).unwrap();
        ro.truncate(p("/db/a"), 2).unwrap();
        assert_eq!(read(&ro, "/db/a"), b"fr");
        assert!(!ro.exists(p("/db/b")) && !ro.exists(p("/db/new")));
        assert!(ro.open_read(p("/db/b")).is_err());
        assert_eq!(ro.list_dir(p("/db")).unwrap(), vec!["a".to_string()]);
        // The base is untouched.
        assert_eq!(base.read_file(p("/db/a")).unwrap(), b"base-a");
        assert_eq!(base.read_file(p("/db/b")).unwrap(), b"base-b");
        assert!(!base.exists(p("/db/new")));
        // A deleted base file can be created again, in memory.
        ro.create(p("/db/b")).unwrap().append(b"again").unwrap();
        assert_eq!(read(&ro, "/db/b"), b"again");
        assert_eq!(base.read_file(p("/db/b")).unwrap(), b"base-b");
    }

    #[test]
    fn base_files_opened_for_writes_refuse_them() {
        let (base, ro) = setup();
        let f = ro.open_rw(Path::new("/db/a"), false).unwrap();
        let mut buf = Vec::new();
        f.read_exact_into(&mut buf, 6, 0).unwrap();
        assert_eq!(buf, b"base-a");
        assert_eq!(f.write_at(b"x", 0).unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(f.set_len(1).unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        f.sync_data().unwrap();
        f.punch_hole(0, 6).unwrap();
        assert_eq!(base.read_file(Path::new("/db/a")).unwrap(), b"base-a");
        // A file created through the view is writable, in memory.
        let g = ro.open_rw(Path::new("/db/data/1.dat"), true).unwrap();
        g.write_at(b"abc", 0).unwrap();
        assert!(!base.exists(Path::new("/db/data/1.dat")));
        assert!(ro.open_rw(Path::new("/db/missing"), false).is_err());
    }
}
