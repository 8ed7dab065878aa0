//! [`DirObjectStore`]: an object store in a directory, through the engine's file-system trait
//! (tests, and an object tier on a mounted network file system).
//!
//! Invariants:
//! - Object `a/b` is the file `<root>/a/b`. A put writes a temporary file beside it, syncs it,
//!   renames it over the name and syncs the directory, so an object is never seen half written
//!   and is durable when `put` returns.
//! - Temporary files (`*.tmp-put`) and conditional puts' lock files (`*.lock-put`) are never
//!   listed as objects.
//! - I/O errors map to [`ObjectErrorKind::NotFound`] (`ENOENT`), [`ObjectErrorKind::Transient`]
//!   (interrupted, timed out, would block) or [`ObjectErrorKind::Permanent`] (the rest).

use super::store::{check_name, ObjectError, ObjectErrorKind, ObjectInfo, ObjectResult, ObjectStore};
use crate::fs::FileSystem;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Suffix of a put's temporary file.
const TMP_SUFFIX: &str = ".tmp-put";
/// Suffix of the lock file of a conditional put.
const LOCK_SUFFIX: &str = ".lock-put";

/// An object store whose objects are files under a directory.
#[derive(Debug, Clone)]
pub struct DirObjectStore {
    fs: Arc<dyn FileSystem>,
    root: PathBuf,
}

fn map_err(what: &str, name: &str, e: io::Error) -> ObjectError {
    let kind = match e.kind() {
        io::ErrorKind::NotFound => ObjectErrorKind::NotFound,
        io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ObjectErrorKind::Transient,
        _ => ObjectErrorKind::Permanent,
    };
    ObjectError::new(kind, format!("{what} {name}: {e}"))
}

impl DirObjectStore {
    /// A store under `root` (created on the first put).
    pub fn new(fs: Arc<dyn FileSystem>, root: impl Into<PathBuf>) -> Self {
        DirObjectStore { fs, root: root.into() }
    }

    fn path(&self, name: &str) -> ObjectResult<PathBuf> {
        check_name(name)?;
        Ok(self.root.join(name))
    }

    fn list_into(&self, dir: &Path, rel: &str, prefix: &str, out: &mut Vec<ObjectInfo>) -> ObjectResult<()> {
        let entries = match self.fs.list_dir(dir) {
            Ok(v) => v,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(map_err("list", rel, e)),
        };
        for entry in entries {
            let name = if rel.is_empty() {
                entry.clone()
            } else {
                format!("{rel}/{entry}")
            };
            // Only descend where the prefix can still match.
            if !(name.starts_with(prefix) || prefix.starts_with(&name))
                || name.ends_with(TMP_SUFFIX)
                || name.ends_with(LOCK_SUFFIX)
            {
                continue;
            }
            let path = dir.join(&entry);
            // A directory lists; a file does not (ENOTDIR).
            if self.fs.list_dir(&path).is_ok() {
                self.list_into(&path, &name, prefix, out)?;
            } else if name.starts_with(prefix) {
                let size = match self.fs.open_read(&path).and_then(|f| f.len()) {
                    Ok(n) => n,
                    // Deleted since the listing.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(map_err("list", &name, e)),
                };
                out.push(ObjectInfo {
                    name,
                    size,
                    last_modified: None,
                });
            }
        }
        Ok(())
    }
}

impl ObjectStore for DirObjectStore {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn put(&self, name: &str, data: &[u8]) -> ObjectResult<()> {
        let path = self.path(name)?;
        let parent = path.parent().unwrap_or(&self.root).to_path_buf();
        self.fs.create_dir_all(&parent).map_err(|e| map_err("put", name, e))?;
        let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
        let written = (|| {
            let mut f = self.fs.create(&tmp)?;
            f.append(data)?;
            f.sync_data()?;
            drop(f);
            self.fs.rename(&tmp, &path)?;
            self.fs.sync_dir(&parent)
        })();
        if written.is_err() {
            let _ = self.fs.remove_file(&tmp);
        }
        written.map_err(|e| map_err("put", name, e))
    }

    /// Atomic through an advisory lock (`<root>/<name>.lock`, `flock`) held across the check
    /// and the write, for every writer going through a `DirObjectStore`.
    fn put_if_absent(&self, name: &str, data: &[u8]) -> ObjectResult<bool> {
        let path = self.path(name)?;
        let parent = path.parent().unwrap_or(&self.root).to_path_buf();
        self.fs.create_dir_all(&parent).map_err(|e| map_err("put", name, e))?;
        let lock_path = PathBuf::from(format!("{}{LOCK_SUFFIX}", path.display()));
        let _lock = loop {
            match self.fs.lock(&lock_path) {
                Ok(l) => break l,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => return Err(map_err("lock", name, e)),
            }
        };
        if self.fs.exists(&path) {
            return Ok(false);
        }
        self.put(name, data).map(|()| true)
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> ObjectResult<Vec<u8>> {
        let path = self.path(name)?;
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|_| ObjectError::new(ObjectErrorKind::Permanent, "range too large"))?;
        let f = self.fs.open_read(&path).map_err(|e| map_err("get", name, e))?;
        let mut buf = Vec::new();
        f.read_exact_into(&mut buf, len, range.start)
            .map_err(|e| map_err("get", name, e))?;
        Ok(buf)
    }

    fn get(&self, name: &str) -> ObjectResult<Vec<u8>> {
        let path = self.path(name)?;
        let f = self.fs.open_read(&path).map_err(|e| map_err("get", name, e))?;
        f.read_all().map_err(|e| map_err("get", name, e))
    }

    fn delete(&self, name: &str) -> ObjectResult<()> {
        let path = self.path(name)?;
        match self.fs.remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(map_err("delete", name, e)),
        }
    }

    fn list(&self, prefix: &str) -> ObjectResult<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        self.list_into(&self.root, "", prefix, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;

    #[test]
    fn put_get_range_list_delete() {
        let dir = tempfile::tempdir().unwrap();
        let s = DirObjectStore::new(Arc::new(PosixFs), dir.path().join("objects"));
        assert!(s.list("").unwrap().is_empty());
        s.put("ext/a", b"hello world").unwrap();
        s.put("ext/b", b"xy").unwrap();
        s.put("other", b"z").unwrap();
        assert_eq!(s.get("ext/a").unwrap(), b"hello world");
        assert_eq!(s.get_range("ext/a", 6..11).unwrap(), b"world");
        assert_eq!(
            s.get_range("ext/a", 6..12).unwrap_err().kind,
            ObjectErrorKind::Permanent
        );
        assert_eq!(s.get("ext/c").unwrap_err().kind, ObjectErrorKind::NotFound);
        let mut names: Vec<_> = s.list("ext/").unwrap().into_iter().map(|o| (o.name, o.size)).collect();
        names.sort();
        assert_eq!(names, vec![("ext/a".to_string(), 11), ("ext/b".to_string(), 2)]);
        assert_eq!(s.list("").unwrap().len(), 3);
        s.delete("ext/a").unwrap();
        s.delete("ext/a").unwrap();
        assert_eq!(s.list("ext/").unwrap().len(), 1);
        assert!(s.put_if_absent("ext/c", b"first").unwrap());
        assert!(!s.put_if_absent("ext/c", b"second").unwrap());
        assert_eq!(s.get("ext/c").unwrap(), b"first", "a conditional put never overwrites");
        assert_eq!(s.list("ext/").unwrap().len(), 2, "lock files are not objects");
        assert_eq!(s.put("../x", b"").unwrap_err().kind, ObjectErrorKind::Permanent);
    }
}
