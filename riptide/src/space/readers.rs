//! Reader leases: a read-only view of a live database (`Db::open_read_only` while another
//! instance writes it) registers a lease, and the writer keeps the slots it frees out of reuse
//! while any lease that was live when it freed them still is, so a view never reads a slot
//! the writer has rewritten.
//!
//! A lease is a file `<db>/readers/<32 hex digits>.lease` on which the view holds an exclusive
//! lock (`FileSystem::lock`) for as long as it lives (until its last handle and iterator are
//! gone), and deletes then. The writer tries to lock each lease: a lease it can lock belongs
//! to a view that is gone, and it deletes it. A view that locks its lease checks that the file
//! is still there (a writer may have taken it for dead and deleted it between its creation
//! and the lock) and registers another if not.
//!
//! Invariants (with `alloc.rs`):
//! - A view registers its lease before it reads any metadata. An extent the view's metadata
//!   names is freed by the writer only after its metadata stopped naming it, so after the
//!   lease was registered: the listing made for that free sees the lease, and the slots are
//!   *held*: not free, so neither allocated, punched nor cut by a shrink, footer intact.
//! - Listing the leases and acting on the listing happen under `readers_listing`, so no
//!   listing made before a lease appeared is acted on after a later one saw it.
//! - Each batch of held slots ([`Hold`]) waits for the leases live when it was held, and goes
//!   back to `free` once none of them is live. Views that overlap in time do not keep older
//!   batches.
//! - A writer that opens while leases are live holds every free slot inside its files'
//!   lengths (a view may name extents the previous writer freed).
//! - When the readers directory cannot be listed, nothing is released, every free is held, and
//!   what is held then waits until a listing finds no lease at all.
//! - Only a writer's space lists leases (`SpaceOptions::watch_readers`): a read-only instance
//!   frees nothing it could reuse, and must not lock or delete other views' leases.

use super::file::Inner;
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

/// Tries at registering a lease before giving up.
const REGISTER_ATTEMPTS: usize = 8;

/// True for the names of lease files.
pub(crate) fn is_lease_file_name(name: &str) -> bool {
    name.strip_suffix(LEASE_SUFFIX)
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A view's registration with the writer (see the module header); deleted when dropped.
#[derive(Debug)]
pub(crate) struct ReaderLease {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    lock: Option<Box<dyn FileLock>>,
}

impl ReaderLease {
    /// Registers a lease in the database at `db` (on its real file system).
    pub(crate) fn register(fs: Arc<dyn FileSystem>, db: &Path) -> Result<ReaderLease> {
        let dir = db.join(READERS_DIR);
        fs.create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        for _ in 0..REGISTER_ATTEMPTS {
            let path = dir.join(format!("{:032x}{LEASE_SUFFIX}", rand::random::<u128>()));
            let lock = match fs.lock(&path) {
                Ok(lock) => lock,
                // A writer holds it for a moment, taking it for a dead view's: another name.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(Error::io("lock", &path, e)),
            };
            if fs.exists(&path) {
                return Ok(ReaderLease {
                    fs,
                    path,
                    lock: Some(lock),
                });
            }
            // Deleted by a writer between its creation and the lock: the lock is on nothing.
        }
        Err(Error::io(
            "lock",
            &dir,
            io::Error::other("no reader lease could be registered"),
        ))
    }
}

impl Drop for ReaderLease {
    fn drop(&mut self) {
        // Deleted while still locked, so the writer never takes a live lease for a dead one.
        let _ = self.fs.remove_file(&self.path);
        self.lock.take();
    }
}

/// The live leases as one listing saw them.
#[derive(Debug, Default)]
pub(crate) struct Readers {
    names: BTreeSet<String>,
    /// The directory could not be listed: any lease may be live.
    unlisted: bool,
}

impl Readers {
    /// True if a view may be open.
    pub(crate) fn any(&self) -> bool {
        self.unlisted || !self.names.is_empty()
    }
}

/// A batch of held slots: `(data file, slot)`, and the leases it waits for (`None`: the
/// listing failed, so it waits until no lease is live).
#[derive(Debug)]
pub(crate) struct Hold {
    slots: Vec<(u32, u32)>,
    leases: Option<BTreeSet<String>>,
}

impl Hold {
    /// True once none of the leases it waits for is among `live`.
    fn done(&self, live: &BTreeSet<String>) -> bool {
        match &self.leases {
            Some(leases) => leases.is_disjoint(live),
            None => live.is_empty(),
        }
    }
}

/// The live leases in the database at `db`; deletes the leases of views that are gone.
pub(crate) fn live_readers(fs: &dyn FileSystem, db: &Path) -> Readers {
    let dir = db.join(READERS_DIR);
    let names = match fs.list_dir(&dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Readers::default(),
        Err(_) => {
            return Readers {
                unlisted: true,
                ..Readers::default()
            }
        }
    };
    let mut live = Readers::default();
    for name in names.into_iter().filter(|n| is_lease_file_name(n)) {
        let path = dir.join(&name);
        match fs.lock(&path) {
            Ok(lock) => {
                // Its view is gone.
                let _ = fs.remove_file(&path);
                drop(lock);
            }
            Err(_) => {
                live.names.insert(name);
            }
        }
    }
    live
}

/// Adds held `slots` (already in their files' `held`) waiting for `readers`: to the last
/// batch when it waits for the same leases (so batches stay few while the same views are
/// open), else as a new batch.
pub(super) fn add_hold(inner: &mut Inner, readers: &Readers, slots: Vec<(u32, u32)>) {
    let leases = (!readers.unlisted).then(|| readers.names.clone());
    match inner.holds.last_mut() {
        Some(last) if last.leases == leases => last.slots.extend(slots),
        _ => inner.holds.push(Hold { slots, leases }),
    }
}

/// The writer's mark, `<db>/WRITER`: 16 random bytes and their masked CRC32C, written anew by
/// every read-write open before it touches the redo log, so a view can tell that the writer
/// it started reading is still the one writing. In the database directory, not `readers/`,
/// so that `readers/` exists only once a view has registered (a writer's frees find it
/// missing at once).
pub(crate) const WRITER_FILE: &str = "WRITER";

/// Writes a new writer mark (see [`WRITER_FILE`]); not synced: only live readers use it.
pub(crate) fn mark_writer(fs: &dyn FileSystem, db: &Path) -> Result<()> {
    let (tmp, path) = (db.join(format!("{WRITER_FILE}.tmp")), db.join(WRITER_FILE));
    let id: [u8; 16] = rand::random();
    let mut bytes = id.to_vec();
    bytes.extend_from_slice(&crate::coding::masked_crc32c(&id).to_le_bytes());
    (|| {
        let mut f = fs.create(&tmp)?;
        f.append(&bytes)?;
        drop(f);
        fs.rename(&tmp, &path)
    })()
    .map_err(|e| Error::io("write", &path, e))
}

/// The writer mark now (`None` where no writer of this build ever opened the database).
pub(crate) fn writer_mark(fs: &dyn FileSystem, db: &Path) -> Result<Option<[u8; 16]>> {
    let path = db.join(WRITER_FILE);
    let bytes = match fs.open_read(&path).and_then(|f| f.read_all()) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path, e)),
    };
    match bytes.split_first_chunk::<16>() {
        Some((id, crc)) if crc == crate::coding::masked_crc32c(id).to_le_bytes() => Ok(Some(*id)),
        _ => Err(Error::corruption(&path, 0, "damaged writer mark")),
    }
}

/// Gives back to `free` every batch none of whose leases is in `readers` (nothing when the
/// listing failed).
pub(super) fn release_holds(inner: &mut Inner, readers: &Readers) {
    if readers.unlisted || inner.holds.is_empty() {
        return;
    }
    let (done, waiting): (Vec<Hold>, Vec<Hold>) = std::mem::take(&mut inner.holds)
        .into_iter()
        .partition(|h| h.done(&readers.names));
    inner.holds = waiting;
    for (number, slot) in done.into_iter().flat_map(|h| h.slots) {
        if let Some(file) = inner.files.get_mut(&number) {
            if file.held.remove(&slot) {
                file.free.insert(slot);
                if slot < file.len_slots {
                    file.unpunched.insert(slot);
                }
            }
        }
    }
}

impl ExtentSpace {
    /// The live reader leases of this database (none for a space that does not watch them).
    pub(super) fn live_readers(&self) -> Readers {
        match self.dir.parent() {
            Some(db) if self.opts.watch_readers => live_readers(self.fs.as_ref(), db),
            _ => Readers::default(),
        }
    }

    /// Keeps a view's lease for as long as this space lives: until the last reader of its
    /// extents (an iterator included) is gone, not only until the view closes.
    pub(crate) fn keep_lease(&self, lease: ReaderLease) {
        *self.lease.lock() = Some(lease);
    }

    /// After recovery of a writer: if views are open, every free slot inside the files'
    /// lengths is held until they close (see the module header).
    pub(crate) fn hold_free_slots_for_readers(&self) {
        let _listing = self.readers_listing.lock();
        let readers = self.live_readers();
        if !readers.any() {
            return;
        }
        let mut inner = self.inner.lock();
        let mut slots = Vec::new();
        for (&number, file) in inner.files.iter_mut() {
            let inside: Vec<u32> = file.free.range(..file.len_slots).copied().collect();
            for s in inside {
                file.free.remove(&s);
                file.unpunched.remove(&s);
                file.held.insert(s);
                slots.push((number, s));
            }
        }
        add_hold(&mut inner, &readers, slots);
    }

    /// Gives back the batches of held slots whose views are all gone.
    pub(crate) fn release_held_slots(&self) {
        if !self.opts.watch_readers {
            return;
        }
        let _listing = self.readers_listing.lock();
        let readers = self.live_readers();
        release_holds(&mut self.inner.lock(), &readers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_hold_waits_for_its_own_leases_and_an_unlisted_one_for_all() {
        let hold = |leases| Hold {
            slots: Vec::new(),
            leases,
        };
        let listed = hold(Some(names(&["a", "b"])));
        assert!(!listed.done(&names(&["b", "c"])));
        assert!(listed.done(&names(&["c"])));
        assert!(listed.done(&names(&[])));
        let unlisted = hold(None);
        assert!(!unlisted.done(&names(&["c"])));
        assert!(unlisted.done(&names(&[])));
    }

    #[test]
    fn a_registered_lease_is_live_until_dropped_and_a_dead_one_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(PosixFs);
        assert!(!live_readers(fs.as_ref(), dir.path()).any());
        let lease = ReaderLease::register(fs.clone(), dir.path()).unwrap();
        let live = live_readers(fs.as_ref(), dir.path());
        assert_eq!(live.names.len(), 1);
        let dead = dir.path().join(READERS_DIR).join(format!("{:032x}.lease", 7));
        std::fs::write(&dead, b"").unwrap();
        assert_eq!(live_readers(fs.as_ref(), dir.path()).names.len(), 1);
        assert!(!dead.exists(), "a dead view's lease was kept");
        drop(lease);
        assert!(!live_readers(fs.as_ref(), dir.path()).any());
        assert_eq!(std::fs::read_dir(dir.path().join(READERS_DIR)).unwrap().count(), 0);
    }
}
