//! [`ExtentCache`]: a bounded cache of whole object-tier extents on local disk.
//!
//! Invariants:
//! - The cache holds whole object images (`valid ‖ footer`), one file per extent under its
//!   directory, named by extent id. Its files are a cache only: the directory is emptied when
//!   the database opens, and nothing else ever depends on a cached file existing.
//! - The bytes cached are never trusted more than the object's: every read through the extent
//!   reader checks each block's CRC as it would on the object.
//! - `used` is the sum of the cached files' sizes and stays at most `capacity` after every
//!   insert (the least recently used extents are evicted first). An image larger than the
//!   whole capacity is not cached. Capacity 0 turns the cache off.
//! - An evicted or removed extent's file is deleted; readers that already hold its handle keep
//!   reading it (POSIX keeps an unlinked file's data while it is open).

use crate::error::{Error, Result};
use crate::fs::{FileSystem, ReadableFile};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The cache's directory inside the database directory.
pub(crate) const EXTENT_CACHE_DIR: &str = "extent-cache";

/// True for the name of a cached extent's file (`<16 hex digits>.ext`).
pub(crate) fn is_cached_extent_name(name: &str) -> bool {
    name.strip_suffix(".ext")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

struct Cached {
    file: Arc<dyn ReadableFile>,
    path: PathBuf,
    size: u64,
    last_use: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Cached>,
    used: u64,
    tick: u64,
}

/// Whole object-tier extents cached on local disk, least recently used evicted first.
pub(crate) struct ExtentCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    capacity: u64,
    state: Mutex<State>,
    /// Reads served from a cached extent.
    pub(crate) hits: AtomicU64,
    /// Reads that found the extent not cached.
    pub(crate) misses: AtomicU64,
    /// Extents evicted to make room.
    pub(crate) evictions: AtomicU64,
}

impl std::fmt::Debug for ExtentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtentCache")
            .field("dir", &self.dir)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl ExtentCache {
    /// A cache in `dir` of at most `capacity` bytes; empties `dir` (or creates it).
    pub(crate) fn open(fs: Arc<dyn FileSystem>, dir: &Path, capacity: u64) -> Result<Self> {
        fs.create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
        for name in fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let path = dir.join(&name);
            fs.remove_file(&path).map_err(|e| Error::io("remove", &path, e))?;
        }
        Ok(ExtentCache {
            fs,
            dir: dir.to_path_buf(),
            capacity,
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
    }

    /// The cached image of extent `id`, if cached (counts a hit or a miss).
    pub(crate) fn get(&self, id: u64) -> Option<Arc<dyn ReadableFile>> {
        let mut st = self.state.lock();
        st.tick += 1;
        let tick = st.tick;
        match st.entries.get_mut(&id) {
            Some(c) => {
                c.last_use = tick;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(c.file.clone())
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// True if extent `id` is cached (no counting).
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.state.lock().entries.contains_key(&id)
    }

    /// Caches `image` as extent `id` and returns its file; `None` when the cache is off or the
    /// image is larger than the cache. An extent already cached keeps its file.
    pub(crate) fn insert(&self, id: u64, image: &[u8]) -> Result<Option<Arc<dyn ReadableFile>>> {
        let size = image.len() as u64;
        if size > self.capacity {
            return Ok(None);
        }
        if let Some(c) = self.state.lock().entries.get(&id) {
            return Ok(Some(c.file.clone()));
        }
        // Written outside the lock; a concurrent insert of the same id loses below.
        let path = self.dir.join(format!("{id:016x}.ext"));
        let file = (|| {
            let mut w = self.fs.create(&path)?;
            w.append(image)?;
            drop(w);
            self.fs.open_read(&path)
        })()
        .map_err(|e| Error::io("write", &path, e))?;
        let file: Arc<dyn ReadableFile> = Arc::from(file);
        let mut removed = Vec::new();
        let out = {
            let mut st = self.state.lock();
            if let Some(c) = st.entries.get(&id) {
                // Another thread cached it first: keep its file. (Ours has the same name and
                // bytes, so it is not deleted.)
                return Ok(Some(c.file.clone()));
            }
            while st.used + size > self.capacity {
                let Some((&victim, _)) = st.entries.iter().min_by_key(|(_, c)| c.last_use) else {
                    break;
                };
                if let Some(c) = st.entries.remove(&victim) {
                    st.used -= c.size;
                    removed.push(c.path);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
            }
            st.tick += 1;
            let last_use = st.tick;
            st.used += size;
            st.entries.insert(
                id,
                Cached {
                    file: file.clone(),
                    path,
                    size,
                    last_use,
                },
            );
            Some(file)
        };
        for p in removed {
            let _ = self.fs.remove_file(&p);
        }
        Ok(out)
    }

    /// Forgets extent `id` and deletes its file.
    pub(crate) fn remove(&self, id: u64) {
        let removed = {
            let mut st = self.state.lock();
            let c = st.entries.remove(&id);
            if let Some(c) = &c {
                st.used -= c.size;
            }
            c
        };
        if let Some(c) = removed {
            let _ = self.fs.remove_file(&c.path);
        }
    }

    /// `(extents, bytes)` cached.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.entries.len() as u64, st.used)
    }

    /// The capacity in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;

    #[test]
    fn least_recently_used_extents_are_evicted_and_files_follow() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(PosixFs);
        let path = dir.path().join("cache");
        fs.create_dir_all(&path).unwrap();
        fs.create(&path.join("leftover.ext")).unwrap();
        let c = ExtentCache::open(fs.clone(), &path, 100).unwrap();
        assert!(fs.list_dir(&path).unwrap().is_empty(), "leftovers are removed at open");
        assert!(c.insert(1, &[1; 40]).unwrap().is_some());
        assert!(c.insert(2, &[2; 40]).unwrap().is_some());
        assert!(c.get(1).is_some(), "1 is now more recent than 2");
        let f3 = c.insert(3, &[3; 40]).unwrap().unwrap();
        assert!(!c.contains(2) && c.contains(1) && c.contains(3));
        assert_eq!(c.usage(), (2, 80));
        assert_eq!(fs.list_dir(&path).unwrap().len(), 2);
        let mut b = [0u8; 4];
        f3.read_at(&mut b, 10).unwrap();
        assert_eq!(b, [3; 4]);
        assert!(c.insert(4, &[4; 101]).unwrap().is_none(), "larger than the cache");
        c.remove(1);
        assert_eq!(c.usage(), (1, 40));
        assert!(c.get(1).is_none());
        assert_eq!(
            (c.hits.load(Ordering::Relaxed), c.misses.load(Ordering::Relaxed)),
            (1, 1)
        );
        let off = ExtentCache::open(fs, &path, 0).unwrap();
        assert!(off.insert(5, &[5; 1]).unwrap().is_none());
    }
}
