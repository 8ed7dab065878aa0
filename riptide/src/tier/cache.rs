//! [`ExtentCache`]: a bounded cache of whole object-tier extents on local disk.
//!
//! Invariants:
//! - The cache holds whole object images (`valid ‖ footer`), one file per extent under its
//!   directory, named by extent id. A file is written under a temporary name and renamed, so a
//!   cached file is always a whole image. Its files are a cache only: at open, the files of
//!   extents the metadata still names are kept (a restart stays warm, up to the capacity) and
//!   every other file is deleted; nothing ever depends on a cached file existing.
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

/// The extent id of a cached extent's file name (`<16 hex digits>.ext`).
fn cached_extent_id(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".ext")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// True for the name of a file the cache writes (a cached extent, or one being written:
/// `<16 hex digits>.ext.<8 hex digits>.tmp`).
pub(crate) fn is_cached_extent_name(name: &str) -> bool {
    let base = match name.strip_suffix(TMP_SUFFIX) {
        Some(t) => t.rsplit_once('.').map_or(t, |(b, _)| b),
        None => name,
    };
    cached_extent_id(base).is_some()
}

/// One direct hit in this many refreshes the extent's place in the eviction order.
pub(crate) const TOUCH_ONE_IN: u32 = 16;

/// Suffix of a file being written.
const TMP_SUFFIX: &str = ".tmp";

/// One cached extent's file (a sized type, so readers can hold weak references to it).
pub(crate) struct CachedImage(pub(crate) Box<dyn ReadableFile>);

struct Cached {
    file: Arc<CachedImage>,
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
    /// A cache in `dir` of at most `capacity` bytes (created if missing). Keeps the files of
    /// the extents in `live` (the metadata's object-tier extents, id -> object size) whose
    /// size is right, up to the capacity, and deletes every other file (a file cut short by a
    /// power cut among them).
    pub(crate) fn open(fs: Arc<dyn FileSystem>, dir: &Path, capacity: u64, live: &HashMap<u64, u64>) -> Result<Self> {
        fs.create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
        let mut state = State::default();
        for name in fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let path = dir.join(&name);
            let kept = cached_extent_id(&name).and_then(|id| {
                let want = *live.get(&id)?;
                let file = Arc::new(CachedImage(fs.open_read(&path).ok()?));
                let size = file.0.len().ok()?;
                (size == want && state.used + size <= capacity).then_some((id, file, size))
            });
            match kept {
                Some((id, file, size)) => {
                    state.tick += 1;
                    state.used += size;
                    let last_use = state.tick;
                    state.entries.insert(
                        id,
                        Cached {
                            file,
                            path,
                            size,
                            last_use,
                        },
                    );
                }
                None => fs.remove_file(&path).map_err(|e| Error::io("remove", &path, e))?,
            }
        }
        Ok(ExtentCache {
            fs,
            dir: dir.to_path_buf(),
            capacity,
            state: Mutex::new(state),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
    }

    /// The cached image of extent `id`, if cached (counts a hit or a miss).
    pub(crate) fn get(&self, id: u64) -> Option<Arc<CachedImage>> {
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

    /// Counts a hit on a cached extent a reader reached through its own reference (not
    /// through [`Self::get`]); one such hit in [`TOUCH_ONE_IN`] also refreshes the extent's
    /// place in the eviction order.
    pub(crate) fn hit_direct(&self, id: u64, nth: u32) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        if nth.is_multiple_of(TOUCH_ONE_IN) {
            let mut st = self.state.lock();
            st.tick += 1;
            let tick = st.tick;
            if let Some(c) = st.entries.get_mut(&id) {
                c.last_use = tick;
            }
        }
    }

    /// True if extent `id` is cached (no counting).
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.state.lock().entries.contains_key(&id)
    }

    /// Caches `image` as extent `id` and returns its file; `None` when the cache is off or the
    /// image is larger than the cache. An extent already cached keeps its file.
    pub(crate) fn insert(&self, id: u64, image: &[u8]) -> Result<Option<Arc<CachedImage>>> {
        let size = image.len() as u64;
        if size > self.capacity {
            return Ok(None);
        }
        if let Some(c) = self.state.lock().entries.get(&id) {
            return Ok(Some(c.file.clone()));
        }
        // Written outside the lock; a concurrent insert of the same id loses below.
        let path = self.dir.join(format!("{id:016x}.ext"));
        // A temporary name of its own: two threads caching one extent never write one file.
        let tmp = self
            .dir
            .join(format!("{id:016x}.ext.{:08x}{TMP_SUFFIX}", rand::random::<u32>()));
        let file = (|| {
            let mut w = self.fs.create(&tmp)?;
            w.append(image)?;
            drop(w);
            self.fs.rename(&tmp, &path)?;
            self.fs.open_read(&path)
        })()
        .map_err(|e| {
            let _ = self.fs.remove_file(&tmp);
            Error::io("write", &path, e)
        })?;
        let file = Arc::new(CachedImage(file));
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
        fs.create(&path.join("0000000000000009.ext.0badf00d.tmp")).unwrap();
        fs.create(&path.join("0000000000000008.ext")).unwrap();
        let none = HashMap::new();
        let c = ExtentCache::open(fs.clone(), &path, 100, &none).unwrap();
        assert!(
            fs.list_dir(&path).unwrap().is_empty(),
            "files of no live extent are removed at open"
        );
        assert!(c.insert(1, &[1; 40]).unwrap().is_some());
        assert!(c.insert(2, &[2; 40]).unwrap().is_some());
        assert!(c.get(1).is_some(), "1 is now more recent than 2");
        let f3 = c.insert(3, &[3; 40]).unwrap().unwrap();
        assert!(!c.contains(2) && c.contains(1) && c.contains(3));
        assert_eq!(c.usage(), (2, 80));
        assert_eq!(fs.list_dir(&path).unwrap().len(), 2);
        let mut b = [0u8; 4];
        f3.0.read_at(&mut b, 10).unwrap();
        assert_eq!(b, [3; 4]);
        assert!(c.insert(4, &[4; 101]).unwrap().is_none(), "larger than the cache");
        c.remove(1);
        assert_eq!(c.usage(), (1, 40));
        assert!(c.get(1).is_none());
        assert_eq!(
            (c.hits.load(Ordering::Relaxed), c.misses.load(Ordering::Relaxed)),
            (1, 1)
        );
        // A reopen keeps the live extents' files that fit, and deletes the rest.
        drop(c);
        let live: HashMap<u64, u64> = [(1, 40), (3, 40)].into_iter().collect();
        let again = ExtentCache::open(fs.clone(), &path, 100, &live).unwrap();
        assert_eq!(again.usage(), (1, 40));
        assert!(again.get(3).is_some() && again.get(1).is_none());
        assert_eq!(fs.list_dir(&path).unwrap().len(), 1);
        let off = ExtentCache::open(fs.clone(), &path, 0, &live).unwrap();
        assert!(off.insert(5, &[5; 1]).unwrap().is_none());
        assert_eq!(off.usage(), (0, 0), "nothing is kept past the capacity");
        drop(off);
        // A file of the wrong size (cut short by a power cut) is not kept.
        let c = ExtentCache::open(fs.clone(), &path, 100, &live).unwrap();
        c.insert(3, &[3; 40]).unwrap();
        drop(c);
        let short: HashMap<u64, u64> = [(3, 41)].into_iter().collect();
        let c = ExtentCache::open(fs.clone(), &path, 100, &short).unwrap();
        assert_eq!(c.usage(), (0, 0));
        assert!(fs.list_dir(&path).unwrap().is_empty());
        assert!(is_cached_extent_name("0000000000000009.ext.0badf00d.tmp"));
        assert!(is_cached_extent_name("0000000000000009.ext"));
        assert!(!is_cached_extent_name("README"));
    }
}
