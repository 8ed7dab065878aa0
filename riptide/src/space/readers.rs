//! Reader leases: a read-only view of a live database (`Db::open_read_only` while another
//! instance writes it) registers a lease, and the writer keeps the slots it frees out of reuse
//! while any lease that was live when it freed them still is, so a view never reads a slot
//! the writer has rewritten.
//!
//! A lease is a file `<db>/readers/<random>.lease` on which the view holds an exclusive lock
//! (`FileSystem::lock`) for as long as it is open. It is created under a temporary name,
//! locked, and only then renamed to its final name, so a lease the writer sees is locked until
//! its view closes or dies. The writer tries to lock each lease: a lease it can lock belongs
//! to a view that is gone, and it deletes it.
//!
//! Invariants (with `alloc.rs`):
//! - A view registers its lease before it reads any metadata. An extent the view's metadata
//!   names is freed by the writer only after its metadata stopped naming it, so after the lease
//!   was registered: the writer then sees the lease, and the slots go to `held`, not `free`.
//! - Held slots are neither allocated, punched nor cut by a shrink. They go back to `free`
//!   once none of the leases they were held for (`Inner::held_for`) is live.
//! - A writer that opens while leases are live holds every free slot inside its files'
//!   lengths (a view may name extents the previous writer freed).
//! - When the readers directory cannot be listed, every lease counts as live (the slots are
//!   held until a listing succeeds).

use super::ExtentSpace;
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory of reader leases in a database directory.
pub(crate) const READERS_DIR: &str = "readers";

const LEASE_SUFFIX: &str = ".lease";

/// The name standing for leases that could not be listed.
const UNLISTED: &str = "?";

/// True for the names of lease files and of leases being registered.
pub(crate) fn is_lease_file_name(name: &str) -> bool {
    let stem = name.strip_suffix(LEASE_SUFFIX).or_else(|| name.strip_suffix(".tmp"));
    stem.is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A view's registration with the writer (see the module header); deleted when dropped.
#[derive(Debug)]
pub(crate) struct ReaderLease {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    lock: Option<Box<dyn FileLock>>,
}

impl FileLock for ReaderLease {}

impl ReaderLease {
    /// Registers a lease in the database at `db` (on its real file system).
    pub(crate) fn register(fs: Arc<dyn FileSystem>, db: &Path) -> Result<ReaderLease> {
        let dir = db.join(READERS_DIR);
        fs.create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        let name = format!("{:032x}", rand::random::<u128>());
        let tmp = dir.join(format!("{name}.tmp"));
        let path = dir.join(format!("{name}{LEASE_SUFFIX}"));
        let lock = fs.lock(&tmp).map_err(|e| Error::io("lock", &tmp, e))?;
        if let Err(e) = fs.rename(&tmp, &path) {
            drop(lock);
            let _ = fs.remove_file(&tmp);
            return Err(Error::io("rename", &tmp, e));
        }
        Ok(ReaderLease {
            fs,
            path,
            lock: Some(lock),
        })
    }
}

impl Drop for ReaderLease {
    fn drop(&mut self) {
        // Deleted while still locked, so the writer never takes a live lease for a dead one.
        let _ = self.fs.remove_file(&self.path);
        self.lock.take();
    }
}

/// Names of the live leases in the database at `db`; deletes the leases of views that are
/// gone (and leftover temporary files of those).
pub(crate) fn live_readers(fs: &dyn FileSystem, db: &Path) -> BTreeSet<String> {
    let dir = db.join(READERS_DIR);
    let names = match fs.list_dir(&dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return BTreeSet::new(),
        Err(_) => return BTreeSet::from([UNLISTED.to_string()]),
    };
    let mut live = BTreeSet::new();
    for name in names {
        if !name.ends_with(LEASE_SUFFIX) {
            continue;
        }
        let path = dir.join(&name);
        match fs.lock(&path) {
            Ok(lock) => {
                // Its view is gone.
                let _ = fs.remove_file(&path);
                drop(lock);
            }
            Err(_) => {
                live.insert(name);
            }
        }
    }
    live
}

impl ExtentSpace {
    /// The live reader leases of this database.
    pub(super) fn live_readers(&self) -> BTreeSet<String> {
        match self.dir.parent() {
            Some(db) => live_readers(self.fs.as_ref(), db),
            None => BTreeSet::new(),
        }
    }

    /// After recovery of a writer: if views are open, every free slot inside the files'
    /// lengths is held until they close (see the module header).
    pub(crate) fn hold_free_slots_for_readers(&self) {
        let live = self.live_readers();
        if live.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        for file in inner.files.values_mut() {
            let inside: Vec<u32> = file.free.range(..file.len_slots).copied().collect();
            for s in inside {
                file.free.remove(&s);
                file.unpunched.remove(&s);
                file.held.insert(s);
            }
        }
        inner.held_for.extend(live);
    }

    /// Gives the held slots back to the free list if none of the leases they are held for is
    /// live now.
    pub(crate) fn release_held_slots(&self) {
        let live = self.live_readers();
        let mut inner = self.inner.lock();
        release_if_gone(&mut inner, &live);
    }
}

/// Gives every held slot back if no lease of `inner.held_for` is in `live`.
pub(super) fn release_if_gone(inner: &mut super::file::Inner, live: &BTreeSet<String>) {
    if inner.held_for.is_empty() || inner.held_for.iter().any(|l| live.contains(l)) {
        return;
    }
    inner.held_for.clear();
    for file in inner.files.values_mut() {
        let held = std::mem::take(&mut file.held);
        for s in held {
            file.free.insert(s);
            if s < file.len_slots {
                file.unpunched.insert(s);
            }
        }
    }
}
