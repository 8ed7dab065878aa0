//! [`FaultFs`]: an in-memory [`FileSystem`] that injects I/O errors and simulates power loss,
//! for tests.
//!
//! Invariants:
//! - Every file is a node holding `data`, `synced_len` and `undo`, an undo log of the positional
//!   changes since the last sync. Let `base_len` be the length `data` had before the first undo
//!   entry (`data.len()` when the log is empty); then `synced_len <= base_len` at all times.
//!   The node's durable content is `data` with every undo entry rolled back (newest first), cut
//!   to `synced_len`.
//! - Appends (of a [`WritableFile`]) only grow `data`; they are logged as an undo entry only when
//!   the log is not empty (a file that is only ever appended to keeps an empty log, and behaves
//!   exactly as plain append-only bookkeeping). `write_at` and `set_len` (of a [`RandomRwFile`])
//!   always push an undo entry `(offset, previous bytes, previous length)` before changing
//!   `data`; `previous bytes` covers only the overwritten or cut range inside the old length, so
//!   rolling back is `data.resize(previous length)` then copying the previous bytes back.
//! - Either handle's `sync_data` sets `synced_len = data.len()` and clears the undo log.
//!   `truncate` resizes `data` (zero-filling when growing, like `set_len`) and makes the whole
//!   file durable (`synced_len = len`, log cleared), like `set_len` plus `fsync`.
//! - There are two namespaces mapping paths to nodes: `current` (what every operation sees now)
//!   and `durable` (what a crash leaves). `create`, `rename`, `remove_file` and the file created
//!   by `lock` change only `current`; `sync_dir(d)` makes the durable children of `d` exactly the
//!   current children of `d`. Both namespaces may share a node.
//! - Directories are a plain set and are always durable: `create_dir_all` creates them
//!   durably, nothing removes them, and a crash leaves them alone (a deliberate simplification).
//!   A path without a parent (`""`, `/`) is always an existing directory. Paths are compared
//!   component-wise after dropping `.` components; `..` is not resolved.
//! - `crash` replaces every surviving node by a fresh copy that holds only its durable content,
//!   sets `current = durable`, releases every lock and bumps the epoch. Under
//!   [`CrashMode::KeepRandomPrefix`] a node with an undo log keeps a random number `k` of its
//!   logged changes, in order (rolling back only the rest); when `k = 0`, and for every node
//!   without a log, it also keeps a random byte prefix of its unsynced appended bytes. So a
//!   crashed file always holds its synced content plus possibly an in-order prefix of the later
//!   changes. A node without a log draws exactly as it did before undo logs existed. Every handle remembers the
//!   epoch it was opened in, and any call on a handle from an older epoch fails with
//!   `ErrorKind::Other` ("file handle from before crash"), touching nothing.
//! - `open_rw` with `create` adds a directory entry exactly like `create` (in `current` only,
//!   durable after `sync_dir`), but never replaces or truncates an existing file.
//! - Fault injection happens first in every operation that has a [`FaultOp`], before any other
//!   check: a fault that fires returns `io::Error::from_raw_os_error(errno)` and changes nothing
//!   (a failing append or `write_at` writes no byte, a failing `set_len` keeps the length). A one-shot fault counts down only on matching calls that
//!   then *succeed*; it fires on the first matching call once its count is zero and is then
//!   removed. `read_at`, the `len`s, `exists` and `create_dir_all` never inject faults.
//! - All state lives behind one `parking_lot::Mutex`; node mutexes are only ever taken while
//!   holding it (lock order: state, then node), so every method is thread-safe and atomic.

use super::{FileLock, FileSystem, RandomRwFile, ReadableFile, WritableFile};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// An operation that can be made to fail with [`FaultFs::fail_after`] / [`FaultFs::fail_always`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`FileSystem::create`], and [`FileSystem::open_rw`] with `create` set.
    Create,
    /// [`FileSystem::open_read`], and [`FileSystem::open_rw`] without `create`.
    OpenRead,
    /// [`WritableFile::append`]; the path is the one the file was created under.
    Append,
    /// [`WritableFile::sync_data`] and [`RandomRwFile::sync_data`]; the path is the one the
    /// file was created or opened under.
    Sync,
    /// [`RandomRwFile::write_at`]; the path is the one the file was opened under.
    WriteAt,
    /// [`RandomRwFile::set_len`]; the path is the one the file was opened under.
    SetLen,
    /// [`FileSystem::rename`]; a path filter matches if either the source or the target matches.
    Rename,
    /// [`FileSystem::remove_file`].
    Remove,
    /// [`FileSystem::truncate`].
    Truncate,
    /// [`FileSystem::sync_dir`]; the path is the directory.
    SyncDir,
    /// [`FileSystem::list_dir`]; the path is the directory.
    ListDir,
    /// [`FileSystem::lock`].
    Lock,
}

/// What survives a [`FaultFs::crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Drop every byte appended, every positional write and every length change since the file's
    /// last sync_data, and every directory change since the directory's last sync_dir.
    DropUnsynced,
    /// Like DropUnsynced, but each file keeps a random prefix (chosen from `seed`) of its unsynced
    /// changes, in order: a random number of its unsynced positional writes and length changes,
    /// and a random byte prefix of its unsynced appends — simulates writes that reached the disk
    /// before the power went, and torn appends. Directory entries as in DropUnsynced.
    KeepRandomPrefix {
        /// Seed of the random generator choosing each file's kept prefix; the same seed on the
        /// same state gives the same result.
        seed: u64,
    },
}

/// An in-memory, fault-injecting, crash-simulating [`FileSystem`] for tests.
///
/// Clones share the same state, so a test can keep one clone to inject faults and crash while
/// the engine uses another through `Arc<dyn FileSystem>`.
#[derive(Clone, Debug, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

/// One file's content.
struct Node {
    /// Everything written so far (what readers see).
    data: Vec<u8>,
    /// How many leading bytes of `data`, after rolling back `undo`, survive a crash.
    synced_len: usize,
    /// Unsynced positional changes (and appends after the first of them), oldest first.
    undo: Vec<Undo>,
}

/// How to roll back one unsynced change.
struct Undo {
    /// Where `prev` goes back.
    offset: usize,
    /// The bytes the change overwrote or cut off, within the old length only.
    prev: Vec<u8>,
    /// The length before the change.
    prev_len: usize,
}

impl Undo {
    fn roll_back(&self, data: &mut Vec<u8>) {
        data.resize(self.prev_len, 0);
        data[self.offset..self.offset + self.prev.len()].copy_from_slice(&self.prev);
    }
}

impl Node {
    /// Logs that the bytes `[offset, end)` and the length are about to change.
    fn log(&mut self, offset: usize, end: usize) {
        let old = self.data.len();
        let start = offset.min(old);
        let stop = end.clamp(start, old);
        let prev = self.data[start..stop].to_vec();
        self.undo.push(Undo {
            offset: start,
            prev,
            prev_len: old,
        });
    }

    fn append(&mut self, data: &[u8]) {
        if !self.undo.is_empty() {
            let len = self.data.len();
            self.log(len, len);
        }
        self.data.extend_from_slice(data);
    }

    fn write_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "offset too large");
        let offset = usize::try_from(offset).map_err(|_| too_large())?;
        let end = offset.checked_add(data.len()).ok_or_else(too_large)?;
        self.log(offset, end);
        if end > self.data.len() {
            self.data.resize(end, 0);
        }
        self.data[offset..end].copy_from_slice(data);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        self.log(len, usize::MAX);
        self.data.resize(len, 0);
        Ok(())
    }

    /// Everything so far becomes durable.
    fn sync(&mut self) {
        self.synced_len = self.data.len();
        self.undo.clear();
    }

    /// What a crash leaves of this node; `rng` is `Some` under [`CrashMode::KeepRandomPrefix`].
    fn crash_image(&self, mut rng: Option<&mut StdRng>) -> Vec<u8> {
        let mut data = self.data.clone();
        let mut kept_changes = 0;
        if let Some(rng) = rng.as_deref_mut() {
            if !self.undo.is_empty() {
                kept_changes = rng.random_range(0..=self.undo.len());
            }
        }
        for u in self.undo[kept_changes..].iter().rev() {
            u.roll_back(&mut data);
        }
        if kept_changes == 0 {
            // `data` is back at `base_len`: the synced bytes plus unsynced appends.
            let unsynced = data.len() - self.synced_len;
            let mut keep = self.synced_len;
            if let Some(rng) = rng {
                if unsynced > 0 {
                    keep += rng.random_range(0..=unsynced);
                }
            }
            data.truncate(keep);
        }
        data
    }
}

type NodeRef = Arc<Mutex<Node>>;

fn new_node(data: Vec<u8>) -> NodeRef {
    Arc::new(Mutex::new(Node {
        synced_len: data.len(),
        data,
        undo: Vec::new(),
    }))
}

/// One registered fault.
#[derive(Debug)]
struct Fault {
    op: FaultOp,
    path_contains: Option<String>,
    /// Matching successful calls still to let through (one-shot faults only).
    remaining: u64,
    errno: i32,
    /// Fires on every matching call until cleared.
    always: bool,
}

impl Fault {
    fn matches(&self, op: FaultOp, paths: &[&Path]) -> bool {
        self.op == op
            && match &self.path_contains {
                None => true,
                Some(s) => paths.iter().any(|p| p.to_string_lossy().contains(s.as_str())),
            }
    }
}

/// Everything behind the [`FaultFs`] mutex.
#[derive(Default)]
struct State {
    /// The namespace visible now.
    current: BTreeMap<PathBuf, NodeRef>,
    /// The namespace a crash leaves.
    durable: BTreeMap<PathBuf, NodeRef>,
    /// Existing directories (always durable).
    dirs: BTreeSet<PathBuf>,
    faults: Vec<Fault>,
    /// Held locks: path to the token of the handle holding it.
    locks: HashMap<PathBuf, u64>,
    next_lock_token: u64,
    /// Bumped by every crash; handles from an older epoch are dead.
    epoch: u64,
    faults_fired: u64,
    syncs: u64,
    /// start_writeback hints: (path, offset, len), in call order.
    writebacks: Vec<(PathBuf, u64, u64)>,
    /// punch_hole calls: (path, offset, len), in call order.
    punches: Vec<(PathBuf, u64, u64)>,
}

impl fmt::Debug for State {
    // Compact on purpose: file contents can be large.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("files", &self.current.len())
            .field("durable_files", &self.durable.len())
            .field("dirs", &self.dirs.len())
            .field("faults", &self.faults)
            .field("locks", &self.locks.len())
            .field("epoch", &self.epoch)
            .field("faults_fired", &self.faults_fired)
            .field("syncs", &self.syncs)
            .finish()
    }
}

impl State {
    /// Fires the first registered fault for `op` on `paths` that is due, if any.
    fn inject(&mut self, op: FaultOp, paths: &[&Path]) -> io::Result<()> {
        let due = self
            .faults
            .iter()
            .position(|f| f.matches(op, paths) && (f.always || f.remaining == 0));
        if let Some(i) = due {
            let errno = self.faults[i].errno;
            if !self.faults[i].always {
                self.faults.remove(i);
            }
            self.faults_fired += 1;
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// Counts a successful call of `op` on `paths` against the one-shot faults.
    fn succeeded(&mut self, op: FaultOp, paths: &[&Path]) {
        for f in &mut self.faults {
            if !f.always && f.matches(op, paths) {
                f.remaining = f.remaining.saturating_sub(1);
            }
        }
    }

    /// Runs `body` as operation `op` on `paths`: fault injection first, then the body; the call
    /// counts against one-shot faults only if the body succeeds.
    fn run<T>(
        &mut self,
        op: FaultOp,
        paths: &[&Path],
        body: impl FnOnce(&mut State) -> io::Result<T>,
    ) -> io::Result<T> {
        self.inject(op, paths)?;
        let out = body(self)?;
        self.succeeded(op, paths);
        Ok(out)
    }

    fn check_epoch(&self, epoch: u64) -> io::Result<()> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(io::Error::other("file handle from before crash"))
        }
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.parent().is_none() || self.dirs.contains(path)
    }

    /// Fails unless `path` can name a new file: its parent is an existing directory and `path`
    /// itself is not a directory.
    fn check_new_file(&self, path: &Path) -> io::Result<()> {
        let Some(parent) = path.parent() else {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        };
        if !self.is_dir(parent) {
            return Err(not_found(parent));
        }
        if self.is_dir(path) {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        Ok(())
    }

    fn file(&self, path: &Path) -> io::Result<&NodeRef> {
        match self.current.get(path) {
            Some(node) => Ok(node),
            None if self.is_dir(path) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None => Err(not_found(path)),
        }
    }

    fn check_dir(&self, path: &Path) -> io::Result<()> {
        if self.is_dir(path) {
            Ok(())
        } else if self.current.contains_key(path) {
            Err(io::Error::from_raw_os_error(libc::ENOTDIR))
        } else {
            Err(not_found(path))
        }
    }

    /// Adds `path` and all its ancestors to the directory set.
    fn add_dirs(&mut self, path: &Path) {
        for dir in path.ancestors().filter(|d| d.parent().is_some()) {
            self.dirs.insert(dir.to_path_buf());
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// The canonical form used as a map key: components re-joined, `.` components dropped.
fn norm(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

/// Paths in `map` whose parent is exactly `dir`.
fn children<'a>(
    map: &'a BTreeMap<PathBuf, NodeRef>,
    dir: &'a Path,
) -> impl Iterator<Item = (&'a PathBuf, &'a NodeRef)> + 'a {
    // Component-wise ordering keeps everything under `dir` contiguous from `dir` on.
    map.range(dir.to_path_buf()..)
        .take_while(move |(p, _)| p.starts_with(dir))
        .filter(move |(p, _)| p.parent() == Some(dir))
}

impl FaultFs {
    /// An empty file system (only the root directory exists), with no faults registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the next matching operation fail with the given OS errno (libc::EIO, libc::ENOSPC
    /// ...), `after` matching successful calls from now (0 = the very next one). `path_contains`:
    /// only ops whose path contains this substring count (None = any path). One-shot: once fired
    /// it is removed.
    ///
    /// A matching call that fails for a genuine reason (e.g. `NotFound`) does not count.
    pub fn fail_after(&self, op: FaultOp, path_contains: Option<&str>, after: u64, errno: i32) {
        self.state.lock().faults.push(Fault {
            op,
            path_contains: path_contains.map(str::to_owned),
            remaining: after,
            errno,
            always: false,
        });
    }

    /// Like fail_after but every matching op fails from now on until clear_faults.
    pub fn fail_always(&self, op: FaultOp, path_contains: Option<&str>, errno: i32) {
        self.state.lock().faults.push(Fault {
            op,
            path_contains: path_contains.map(str::to_owned),
            remaining: 0,
            errno,
            always: true,
        });
    }

    /// Removes every registered fault (one-shot and permanent). [`FaultFs::faults_fired`] is kept.
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// How many injected faults have fired so far.
    pub fn faults_fired(&self) -> u64 {
        self.state.lock().faults_fired
    }

    /// Simulate power loss: apply CrashMode to all files and directories. Afterwards the FS holds
    /// only what would have survived. Open handles created before the crash must become dead:
    /// any later call on them returns an io::Error (ErrorKind::Other, "file handle from before
    /// crash"). Locks are released.
    ///
    /// Registered faults and the counters survive the crash.
    pub fn crash(&self, mode: CrashMode) {
        let mut st = self.state.lock();
        let mut rng = match mode {
            CrashMode::DropUnsynced => None,
            CrashMode::KeepRandomPrefix { seed } => Some(StdRng::seed_from_u64(seed)),
        };
        // Old nodes stay with the (now dead) handles; survivors get fresh copies, deduplicated
        // so a node durable under two names stays one node. BTreeMap order keeps the random
        // choices deterministic.
        let mut fresh: HashMap<*const Mutex<Node>, NodeRef> = HashMap::new();
        let mut durable = BTreeMap::new();
        for (path, node) in &st.durable {
            let copy = fresh
                .entry(Arc::as_ptr(node))
                .or_insert_with(|| new_node(node.lock().crash_image(rng.as_mut())))
                .clone();
            durable.insert(path.clone(), copy);
        }
        st.current = durable.clone();
        st.durable = durable;
        st.locks.clear();
        st.epoch += 1;
    }

    /// Raw bytes of a file as currently visible (for tests that corrupt files); `None` if there
    /// is no such file.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let path = norm(path);
        let st = self.state.lock();
        let data = st.current.get(&path)?.lock().data.clone();
        Some(data)
    }

    /// Overwrites the file's content (creating the file, and any missing parent directories, if
    /// needed), and marks it fully synced and its dir entry durable. An existing file keeps its
    /// identity, so open handles see the new content. Injects no fault.
    ///
    /// # Panics
    /// If `path` is a directory.
    pub fn write_file(&self, path: &Path, data: Vec<u8>) {
        let path = norm(path);
        let mut st = self.state.lock();
        assert!(
            !st.is_dir(&path),
            "FaultFs::write_file: {} is a directory",
            path.display()
        );
        let node = match st.current.get(&path) {
            Some(node) => {
                let mut n = node.lock();
                n.data = data;
                n.sync();
                drop(n);
                node.clone()
            }
            None => {
                if let Some(parent) = path.parent() {
                    st.add_dirs(parent);
                }
                let node = new_node(data);
                st.current.insert(path.clone(), node.clone());
                node
            }
        };
        st.durable.insert(path, node);
    }

    /// Number of sync_data calls that succeeded (for tests).
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// The `start_writeback` hints received, as (path, offset, len) in call order (for tests).
    /// A hint changes nothing durable: a crash still drops everything not synced.
    pub fn writebacks(&self) -> Vec<(PathBuf, u64, u64)> {
        self.state.lock().writebacks.clone()
    }

    /// The `punch_hole` calls received, as (path, offset, len) in call order (for tests).
    pub fn punches(&self) -> Vec<(PathBuf, u64, u64)> {
        self.state.lock().punches.clone()
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let path = norm(path);
        let mut st = self.state.lock();
        if path.ancestors().any(|a| st.current.contains_key(a)) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        st.add_dirs(&path);
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let path = norm(path);
        let mut st = self.state.lock();
        st.run(FaultOp::ListDir, &[&path], |st| {
            st.check_dir(&path)?;
            let dirs = st
                .dirs
                .range(path.clone()..)
                .take_while(|d| d.starts_with(&path))
                .filter(|d| d.parent() == Some(path.as_path()));
            let files = children(&st.current, &path).map(|(p, _)| p);
            Ok(dirs
                .chain(files)
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect())
        })
    }

    fn exists(&self, path: &Path) -> bool {
        let path = norm(path);
        let st = self.state.lock();
        st.current.contains_key(&path) || st.is_dir(&path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let path = norm(path);
        let mut st = self.state.lock();
        let node = st.run(FaultOp::Create, &[&path], |st| {
            st.check_new_file(&path)?;
            let node = new_node(Vec::new());
            st.current.insert(path.clone(), node.clone());
            Ok(node)
        })?;
        Ok(Box::new(FaultWritable {
            state: self.state.clone(),
            node,
            epoch: st.epoch,
            path,
        }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn ReadableFile>> {
        let path = norm(path);
        let mut st = self.state.lock();
        let node = st.run(FaultOp::OpenRead, &[&path], |st| Ok(st.file(&path)?.clone()))?;
        Ok(Box::new(FaultReadable {
            state: self.state.clone(),
            node,
            epoch: st.epoch,
        }))
    }

    fn open_rw(&self, path: &Path, create: bool) -> io::Result<Arc<dyn RandomRwFile>> {
        let path = norm(path);
        let mut st = self.state.lock();
        let op = if create { FaultOp::Create } else { FaultOp::OpenRead };
        let node = st.run(op, &[&path], |st| match st.current.get(&path) {
            Some(node) => Ok(node.clone()),
            None if !create => Err(st.file(&path).err().unwrap_or_else(|| not_found(&path))),
            None => {
                st.check_new_file(&path)?;
                let node = new_node(Vec::new());
                st.current.insert(path.clone(), node.clone());
                Ok(node)
            }
        })?;
        Ok(Arc::new(FaultRw {
            state: self.state.clone(),
            node,
            epoch: st.epoch,
            path,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from, to) = (norm(from), norm(to));
        let mut st = self.state.lock();
        st.run(FaultOp::Rename, &[&from, &to], |st| {
            let node = st.file(&from)?.clone();
            st.check_new_file(&to)?;
            if from != to {
                st.current.remove(&from);
                st.current.insert(to.clone(), node);
            }
            Ok(())
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let path = norm(path);
        let mut st = self.state.lock();
        st.run(FaultOp::Remove, &[&path], |st| {
            st.file(&path)?;
            st.current.remove(&path);
            Ok(())
        })
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let path = norm(path);
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        let mut st = self.state.lock();
        st.run(FaultOp::Truncate, &[&path], |st| {
            let mut n = st.file(&path)?.lock();
            n.data.resize(len, 0);
            n.sync();
            Ok(())
        })
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let path = norm(path);
        let mut st = self.state.lock();
        st.run(FaultOp::SyncDir, &[&path], |st| {
            st.check_dir(&path)?;
            let gone: Vec<PathBuf> = children(&st.durable, &path).map(|(p, _)| p.clone()).collect();
            for p in gone {
                st.durable.remove(&p);
            }
            let now: Vec<(PathBuf, NodeRef)> = children(&st.current, &path)
                .map(|(p, n)| (p.clone(), n.clone()))
                .collect();
            st.durable.extend(now);
            Ok(())
        })
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let path = norm(path);
        let mut st = self.state.lock();
        let token = st.run(FaultOp::Lock, &[&path], |st| {
            if !st.current.contains_key(&path) {
                st.check_new_file(&path)?;
                st.current.insert(path.clone(), new_node(Vec::new()));
            }
            if st.locks.contains_key(&path) {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{}: lock held by another handle", path.display()),
                ));
            }
            st.next_lock_token += 1;
            let token = st.next_lock_token;
            st.locks.insert(path.clone(), token);
            Ok(token)
        })?;
        Ok(Box::new(FaultLock {
            state: self.state.clone(),
            path,
            token,
        }))
    }
}

/// A [`WritableFile`] of [`FaultFs`].
struct FaultWritable {
    state: Arc<Mutex<State>>,
    node: NodeRef,
    /// The path the file was created under (for fault path filters, even after a rename).
    path: PathBuf,
    epoch: u64,
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        let node = &self.node;
        st.run(FaultOp::Append, &[&self.path], |_| {
            node.lock().append(data);
            Ok(())
        })
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        let node = &self.node;
        st.run(FaultOp::Sync, &[&self.path], |st| {
            node.lock().sync();
            st.syncs += 1;
            Ok(())
        })
    }

    /// The node's current length (for a handle from before a crash: the pre-crash length).
    fn len(&self) -> u64 {
        let _st = self.state.lock();
        self.node.lock().data.len() as u64
    }

    /// Recorded (see [`FaultFs::writebacks`]); nothing becomes durable.
    fn start_writeback(&mut self, offset: u64, len: u64) {
        self.state.lock().writebacks.push((self.path.clone(), offset, len));
    }
}

/// A [`ReadableFile`] of [`FaultFs`]. It keeps its node, so a removed file stays readable.
struct FaultReadable {
    state: Arc<Mutex<State>>,
    node: NodeRef,
    epoch: u64,
}

impl ReadableFile for FaultReadable {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        node_read_at(&self.state, &self.node, self.epoch, buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        node_len(&self.state, &self.node, self.epoch)
    }
}

fn node_read_at(state: &Mutex<State>, node: &NodeRef, epoch: u64, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let st = state.lock();
    st.check_epoch(epoch)?;
    let n = node.lock();
    let start = usize::try_from(offset).map_or(n.data.len(), |o| o.min(n.data.len()));
    let count = buf.len().min(n.data.len() - start);
    buf[..count].copy_from_slice(&n.data[start..start + count]);
    Ok(count)
}

fn node_len(state: &Mutex<State>, node: &NodeRef, epoch: u64) -> io::Result<u64> {
    let st = state.lock();
    st.check_epoch(epoch)?;
    let len = node.lock().data.len();
    Ok(len as u64)
}

/// A [`RandomRwFile`] of [`FaultFs`]. Like [`FaultReadable`] it keeps its node.
struct FaultRw {
    state: Arc<Mutex<State>>,
    node: NodeRef,
    /// The path the file was opened under (for fault path filters, even after a rename).
    path: PathBuf,
    epoch: u64,
}

impl ReadableFile for FaultRw {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        node_read_at(&self.state, &self.node, self.epoch, buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        node_len(&self.state, &self.node, self.epoch)
    }
}

impl RandomRwFile for FaultRw {
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        let node = &self.node;
        st.run(FaultOp::WriteAt, &[&self.path], |_| node.lock().write_at(data, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        let node = &self.node;
        st.run(FaultOp::Sync, &[&self.path], |st| {
            node.lock().sync();
            st.syncs += 1;
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        let node = &self.node;
        st.run(FaultOp::SetLen, &[&self.path], |_| node.lock().set_len(len))
    }

    /// Recorded (see [`FaultFs::writebacks`]); nothing becomes durable.
    fn start_writeback(&self, offset: u64, len: u64) {
        self.state.lock().writebacks.push((self.path.clone(), offset, len));
    }

    /// Recorded (see [`FaultFs::punches`]), then zeroes the part of the range inside the file,
    /// keeping its length: like a write of zeros, durable after the next sync. No fault rule
    /// applies (callers treat a punch as a hint), so counted faults land where they did.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_epoch(self.epoch)?;
        st.punches.push((self.path.clone(), offset, len));
        let mut n = self.node.lock();
        let end = offset.saturating_add(len).min(n.data.len() as u64);
        match end.checked_sub(offset) {
            Some(zeros) if zeros > 0 => n.write_at(&vec![0; zeros as usize], offset),
            _ => Ok(()),
        }
    }
}

/// A [`FileLock`] of [`FaultFs`]; dropping it releases the lock unless a crash already did.
struct FaultLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    /// Distinguishes this holder from a later one after a crash released the lock.
    token: u64,
}

impl fmt::Debug for FaultLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLock")
            .field("path", &self.path)
            .field("token", &self.token)
            .finish()
    }
}

impl FileLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.locks.get(&self.path) == Some(&self.token) {
            st.locks.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    /// A FaultFs with directory `/db`.
    fn setup() -> FaultFs {
        let fs = FaultFs::new();
        fs.create_dir_all(p("/db")).unwrap();
        fs
    }

    fn names(fs: &FaultFs, dir: &str) -> Vec<String> {
        let mut v = fs.list_dir(p(dir)).unwrap();
        v.sort();
        v
    }

    fn errno(e: &io::Error) -> Option<i32> {
        e.raw_os_error()
    }

    #[test]
    fn unsynced_appends_vanish_synced_stay() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        f.append(b"hello ").unwrap();
        f.sync_data().unwrap();
        f.append(b"world").unwrap();
        assert_eq!(f.len(), 11);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"hello world");
        assert_eq!(fs.syncs(), 1);
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"hello ");
        let r = fs.open_read(p("/db/a")).unwrap();
        assert_eq!(r.read_all().unwrap(), b"hello ");
        assert_eq!(r.len().unwrap(), 6);
    }

    #[test]
    fn created_file_without_dir_sync_vanishes() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        f.append(b"data").unwrap();
        f.sync_data().unwrap();
        let mut g = fs.create(p("/db/b")).unwrap();
        assert!(fs.exists(p("/db/a")));
        assert_eq!(names(&fs, "/db"), ["a", "b"]);
        // Only `b` gets its entry synced, and then only before its data.
        fs.sync_dir(p("/db")).unwrap();
        fs.remove_file(p("/db/a")).unwrap();
        fs.create(p("/db/c")).unwrap();
        g.append(b"lost").unwrap();
        fs.crash(CrashMode::DropUnsynced);
        // `a`'s removal was never synced, so it is back, with its synced data.
        assert_eq!(names(&fs, "/db"), ["a", "b"]);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"data");
        assert_eq!(fs.read_file(p("/db/b")).unwrap(), b"");
        assert!(!fs.exists(p("/db/c")));
        assert!(fs.exists(p("/db")));
    }

    #[test]
    fn created_file_without_any_dir_sync_vanishes() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        f.append(b"data").unwrap();
        f.sync_data().unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert!(!fs.exists(p("/db/a")));
        assert!(fs.read_file(p("/db/a")).is_none());
        assert_eq!(fs.open_read(p("/db/a")).err().unwrap().kind(), io::ErrorKind::NotFound);
        assert!(names(&fs, "/db").is_empty());
    }

    #[test]
    fn remove_sticks_after_dir_sync() {
        let fs = setup();
        fs.write_file(p("/db/a"), b"x".to_vec());
        fs.remove_file(p("/db/a")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert!(!fs.exists(p("/db/a")));
    }

    #[test]
    fn rename_reverted_without_dir_sync() {
        let fs = setup();
        fs.write_file(p("/db/tmp"), b"new".to_vec());
        fs.write_file(p("/db/CURRENT"), b"old".to_vec());
        fs.rename(p("/db/tmp"), p("/db/CURRENT")).unwrap();
        assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"new");
        assert!(!fs.exists(p("/db/tmp")));
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"old");
        assert_eq!(fs.read_file(p("/db/tmp")).unwrap(), b"new");
    }

    #[test]
    fn rename_sticks_with_dir_sync() {
        let fs = setup();
        fs.write_file(p("/db/tmp"), b"new".to_vec());
        fs.write_file(p("/db/CURRENT"), b"old".to_vec());
        fs.rename(p("/db/tmp"), p("/db/CURRENT")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/CURRENT")).unwrap(), b"new");
        assert!(!fs.exists(p("/db/tmp")));
        assert_eq!(names(&fs, "/db"), ["CURRENT"]);
    }

    #[test]
    fn sync_dir_only_affects_its_own_children() {
        let fs = setup();
        fs.create_dir_all(p("/db/sub")).unwrap();
        fs.create(p("/db/a")).unwrap();
        fs.create(p("/db/sub/b")).unwrap();
        fs.sync_dir(p("/db/sub")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert!(!fs.exists(p("/db/a")));
        assert!(fs.exists(p("/db/sub/b")));
        assert_eq!(names(&fs, "/db"), ["sub"]);
    }

    #[test]
    fn create_replaces_with_a_fresh_node() {
        let fs = setup();
        fs.write_file(p("/db/a"), b"old".to_vec());
        let r = fs.open_read(p("/db/a")).unwrap();
        let mut f = fs.create(p("/db/a")).unwrap();
        f.append(b"new!").unwrap();
        f.sync_data().unwrap();
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"new!");
        assert_eq!(r.read_all().unwrap(), b"old");
        // The replacement was not dir-synced: the old file survives.
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"old");
    }

    #[test]
    fn keep_random_prefix_keeps_between_synced_and_full() {
        let mut kept = BTreeSet::new();
        for seed in 0..64 {
            let fs = setup();
            let mut f = fs.create(p("/db/a")).unwrap();
            fs.sync_dir(p("/db")).unwrap();
            f.append(b"0123456789").unwrap();
            f.sync_data().unwrap();
            f.append(b"abcdefghijklmnopqrst").unwrap();
            fs.crash(CrashMode::KeepRandomPrefix { seed });
            let data = fs.read_file(p("/db/a")).unwrap();
            assert!((10..=30).contains(&data.len()), "len {}", data.len());
            assert_eq!(&data[..], &b"0123456789abcdefghijklmnopqrst"[..data.len()]);
            kept.insert(data.len());
            // Whatever survived is now synced: a second crash keeps it all.
            fs.crash(CrashMode::DropUnsynced);
            assert_eq!(fs.read_file(p("/db/a")).unwrap(), data);
        }
        assert!(kept.len() > 5, "prefix lengths not random: {kept:?}");
    }

    #[test]
    fn keep_random_prefix_is_deterministic() {
        let run = |seed| {
            let fs = setup();
            for name in ["a", "b", "c"] {
                let path = PathBuf::from("/db").join(name);
                let mut f = fs.create(&path).unwrap();
                f.append(&[7u8; 1000]).unwrap();
            }
            fs.sync_dir(p("/db")).unwrap();
            fs.crash(CrashMode::KeepRandomPrefix { seed });
            ["a", "b", "c"].map(|n| fs.read_file(&Path::new("/db").join(n)).unwrap().len())
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn truncate_makes_length_durable() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        f.append(b"0123456789").unwrap();
        fs.truncate(p("/db/a"), 4).unwrap();
        assert_eq!(f.len(), 4);
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"0123");
        fs.truncate(p("/db/a"), 6).unwrap();
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"0123\0\0");
    }

    #[test]
    fn fail_after_fires_once_on_the_right_call() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        fs.fail_after(FaultOp::Append, None, 2, libc::EIO);
        f.append(b"1").unwrap();
        f.append(b"2").unwrap();
        let e = f.append(b"3").unwrap_err();
        assert_eq!(errno(&e), Some(libc::EIO));
        assert_eq!(fs.faults_fired(), 1);
        // The failed append wrote nothing.
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"12");
        assert_eq!(f.len(), 2);
        for _ in 0..10 {
            f.append(b"x").unwrap();
        }
        assert_eq!(fs.faults_fired(), 1);
    }

    #[test]
    fn fail_after_zero_fires_on_next_call_and_changes_nothing() {
        let fs = setup();
        fs.write_file(p("/db/a"), b"x".to_vec());
        fs.fail_after(FaultOp::Rename, None, 0, libc::ENOSPC);
        let e = fs.rename(p("/db/a"), p("/db/b")).unwrap_err();
        assert_eq!(errno(&e), Some(libc::ENOSPC));
        assert!(fs.exists(p("/db/a")));
        assert!(!fs.exists(p("/db/b")));
        fs.rename(p("/db/a"), p("/db/b")).unwrap();
        assert!(fs.exists(p("/db/b")));
    }

    #[test]
    fn fail_after_counts_only_successful_calls_of_its_op() {
        let fs = setup();
        fs.fail_after(FaultOp::Remove, None, 1, libc::EIO);
        // Genuine failures and other ops do not count.
        assert_eq!(
            fs.remove_file(p("/db/missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        fs.write_file(p("/db/a"), vec![]);
        fs.write_file(p("/db/b"), vec![]);
        fs.rename(p("/db/a"), p("/db/c")).unwrap();
        fs.remove_file(p("/db/c")).unwrap();
        assert_eq!(errno(&fs.remove_file(p("/db/b")).unwrap_err()), Some(libc::EIO));
        fs.remove_file(p("/db/b")).unwrap();
        assert_eq!(fs.faults_fired(), 1);
    }

    #[test]
    fn fail_always_fires_until_cleared() {
        let fs = setup();
        let mut f = fs.create(p("/db/a")).unwrap();
        f.append(b"abc").unwrap();
        fs.fail_always(FaultOp::Sync, None, libc::EIO);
        for i in 1..=5 {
            assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EIO));
            assert_eq!(fs.faults_fired(), i);
        }
        assert_eq!(fs.syncs(), 0);
        fs.sync_dir(p("/db")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/a")).unwrap(), b"");
        let mut f = fs.create(p("/db/a")).unwrap();
        assert!(f.sync_data().is_err(), "faults survive a crash");
        fs.clear_faults();
        f.sync_data().unwrap();
        assert_eq!(fs.syncs(), 1);
        assert_eq!(fs.faults_fired(), 6);
    }

    #[test]
    fn path_filter_selects_ops() {
        let fs = setup();
        fs.fail_always(FaultOp::Create, Some(".sst"), libc::ENOSPC);
        fs.fail_after(FaultOp::SyncDir, Some("/other"), 0, libc::EIO);
        fs.create(p("/db/000001.log")).unwrap();
        assert_eq!(
            errno(&fs.create(p("/db/000002.sst")).err().unwrap()),
            Some(libc::ENOSPC)
        );
        assert!(!fs.exists(p("/db/000002.sst")));
        fs.sync_dir(p("/db")).unwrap();
        fs.create_dir_all(p("/other")).unwrap();
        assert!(fs.sync_dir(p("/other")).is_err());
        fs.sync_dir(p("/other")).unwrap();
        assert_eq!(fs.faults_fired(), 2);
        // Handle ops filter on the handle's path; rename on either path.
        let mut log = fs.create(p("/db/000003.log")).unwrap();
        fs.fail_always(FaultOp::Append, Some("000004"), libc::EIO);
        fs.fail_always(FaultOp::Rename, Some("MANIFEST"), libc::EIO);
        log.append(b"ok").unwrap();
        assert!(fs.rename(p("/db/000003.log"), p("/db/MANIFEST-1")).is_err());
        fs.rename(p("/db/000003.log"), p("/db/000004.log")).unwrap();
        log.append(b"still ok").unwrap();
    }

    #[test]
    fn handles_from_before_crash_are_dead() {
        let fs = setup();
        fs.write_file(p("/db/a"), b"abc".to_vec());
        let mut w = fs.create(p("/db/b")).unwrap();
        let r = fs.open_read(p("/db/a")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        let check = |e: io::Error| {
            assert_eq!(e.kind(), io::ErrorKind::Other);
            assert_eq!(e.to_string(), "file handle from before crash");
        };
        check(w.append(b"x").unwrap_err());
        check(w.sync_data().unwrap_err());
        check(r.read_at(&mut [0u8; 3], 0).unwrap_err());
        check(r.len().unwrap_err());
        assert_eq!(fs.faults_fired(), 0);
        // New handles work.
        let r = fs.open_read(p("/db/a")).unwrap();
        assert_eq!(r.read_all().unwrap(), b"abc");
    }

    #[test]
    fn removed_open_file_stays_readable() {
        let fs = setup();
        fs.write_file(p("/db/a"), b"abcdef".to_vec());
        let r = fs.open_read(p("/db/a")).unwrap();
        fs.remove_file(p("/db/a")).unwrap();
        assert!(!fs.exists(p("/db/a")));
        let mut buf = [0u8; 4];
        assert_eq!(r.read_at(&mut buf, 4).unwrap(), 2);
        assert_eq!(&buf[..2], b"ef");
        assert_eq!(r.read_at(&mut buf, 6).unwrap(), 0);
        assert_eq!(r.read_at(&mut buf, 100).unwrap(), 0);
        assert_eq!(r.read_all().unwrap(), b"abcdef");
    }

    #[test]
    fn lock_conflict_and_release() {
        let fs = setup();
        let l1 = fs.lock(p("/db/LOCK")).unwrap();
        assert!(fs.exists(p("/db/LOCK")));
        let e = fs.lock(p("/db/LOCK")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let other = fs.lock(p("/db/LOCK2")).unwrap();
        drop(l1);
        let l2 = fs.lock(p("/db/LOCK")).unwrap();
        drop(other);
        // A crash releases locks; the stale handle's drop must not free the new holder's lock.
        fs.crash(CrashMode::DropUnsynced);
        let l3 = fs.lock(p("/db/LOCK")).unwrap();
        drop(l2);
        assert_eq!(fs.lock(p("/db/LOCK")).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        drop(l3);
        fs.lock(p("/db/LOCK")).unwrap();
        assert!(format!("{fs:?}").contains("FaultFs"));
    }

    #[test]
    fn missing_directories() {
        let fs = setup();
        assert_eq!(fs.create(p("/nope/a")).err().unwrap().kind(), io::ErrorKind::NotFound);
        assert_eq!(fs.list_dir(p("/nope")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(fs.lock(p("/nope/LOCK")).unwrap_err().kind(), io::ErrorKind::NotFound);
        fs.write_file(p("/db/a"), vec![]);
        assert!(fs.rename(p("/db/a"), p("/nope/a")).is_err());
        assert!(fs.exists(p("/db/a")));
        assert!(fs.create_dir_all(p("/db/a/b")).is_err());
        // Directories created by create_dir_all are durable; paths are normalized.
        fs.create_dir_all(p("/x/y/z")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert!(fs.exists(p("/x/y/")));
        assert_eq!(names(&fs, "/x/./y"), ["z"]);
        assert_eq!(names(&fs, "/"), ["db", "x"]);
        fs.create(p("/x/y/./f")).unwrap();
        assert!(fs.exists(p("/x/y/f")));
    }

    #[test]
    fn write_file_is_durable_and_in_place() {
        let fs = FaultFs::new();
        fs.write_file(p("/d/e/f"), b"one".to_vec());
        let r = fs.open_read(p("/d/e/f")).unwrap();
        fs.write_file(p("/d/e/f"), b"two!".to_vec());
        assert_eq!(r.read_all().unwrap(), b"two!");
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/d/e/f")).unwrap(), b"two!");
        assert!(fs.exists(p("/d/e")));
    }

    /// A synced, dir-synced rw file `/db/d` holding `content`.
    fn rw_setup(content: &[u8]) -> (FaultFs, Arc<dyn RandomRwFile>) {
        let fs = setup();
        let f = fs.open_rw(p("/db/d"), true).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        f.write_at(content, 0).unwrap();
        f.sync_data().unwrap();
        (fs, f)
    }

    #[test]
    fn rw_unsynced_write_at_vanishes_synced_stays() {
        let (fs, f) = rw_setup(b"0123456789");
        f.write_at(b"ab", 2).unwrap();
        f.sync_data().unwrap();
        f.write_at(b"XY", 5).unwrap();
        f.write_at(b"tail", 12).unwrap();
        assert_eq!(f.read_all().unwrap(), b"01ab4XY789\0\0tail");
        assert_eq!(f.len().unwrap(), 16);
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"01ab456789");
        let g = fs.open_rw(p("/db/d"), false).unwrap();
        assert_eq!(g.read_all().unwrap(), b"01ab456789");
        // Overwrites of overwrites roll back to the synced bytes too.
        g.write_at(b"AAAA", 0).unwrap();
        g.write_at(b"BB", 1).unwrap();
        g.write_at(b"C", 20).unwrap();
        g.write_at(b"DDD", 8).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"01ab456789");
    }

    #[test]
    fn rw_set_len_durable_only_after_sync() {
        let (fs, f) = rw_setup(b"0123456789");
        f.set_len(4).unwrap();
        assert_eq!(f.read_all().unwrap(), b"0123");
        f.set_len(6).unwrap();
        assert_eq!(f.read_all().unwrap(), b"0123\0\0");
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"0123456789");
        let f = fs.open_rw(p("/db/d"), false).unwrap();
        f.set_len(3).unwrap();
        f.sync_data().unwrap();
        f.set_len(8).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"012");
        let f = fs.open_rw(p("/db/d"), false).unwrap();
        f.set_len(5).unwrap();
        f.sync_data().unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"012\0\0");
    }

    #[test]
    fn rw_keep_random_prefix_keeps_changes_in_order() {
        // Each change is a whole step of a sequence; a crash must leave exactly one step's state.
        let steps: Vec<Vec<u8>> = {
            let mut v = vec![b"0123456789".to_vec()];
            let mut cur = v[0].clone();
            for (i, change) in [(2usize, &b"ab"[..]), (12, b"xyz"), (0, b"Q"), (5, b"-")]
                .iter()
                .enumerate()
            {
                let end = change.0 + change.1.len();
                if end > cur.len() {
                    cur.resize(end, 0);
                }
                cur[change.0..end].copy_from_slice(change.1);
                v.push(cur.clone());
                if i == 1 {
                    cur.truncate(7);
                    v.push(cur.clone());
                }
            }
            v
        };
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let (fs, f) = rw_setup(&steps[0]);
            f.write_at(b"ab", 2).unwrap();
            f.write_at(b"xyz", 12).unwrap();
            f.set_len(7).unwrap();
            f.write_at(b"Q", 0).unwrap();
            f.write_at(b"-", 5).unwrap();
            assert_eq!(&f.read_all().unwrap(), steps.last().unwrap());
            fs.crash(CrashMode::KeepRandomPrefix { seed });
            let data = fs.read_file(p("/db/d")).unwrap();
            let step = steps
                .iter()
                .position(|s| *s == data)
                .expect("not a prefix of the changes");
            seen.insert(step);
            // What survived is synced now.
            fs.crash(CrashMode::DropUnsynced);
            assert_eq!(fs.read_file(p("/db/d")).unwrap(), data);
        }
        assert_eq!(seen.len(), steps.len(), "not every prefix was chosen: {seen:?}");
    }

    #[test]
    fn rw_keep_random_prefix_is_deterministic() {
        let run = |seed| {
            let fs = setup();
            let files: Vec<_> = (0..4)
                .map(|i| fs.open_rw(&PathBuf::from(format!("/db/{i}")), true).unwrap())
                .collect();
            fs.sync_dir(p("/db")).unwrap();
            for (i, f) in files.iter().enumerate() {
                for j in 0..20u64 {
                    f.write_at(&[j as u8 + 1; 3], j * 3 + i as u64).unwrap();
                }
            }
            fs.crash(CrashMode::KeepRandomPrefix { seed });
            (0..4)
                .map(|i| fs.read_file(&PathBuf::from(format!("/db/{i}"))).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn rw_mixed_with_appends() {
        let fs = setup();
        let mut w = fs.create(p("/db/m")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        w.append(b"abc").unwrap();
        w.sync_data().unwrap();
        w.append(b"def").unwrap();
        let f = fs.open_rw(p("/db/m"), false).unwrap();
        f.write_at(b"X", 0).unwrap();
        w.append(b"ghi").unwrap();
        assert_eq!(f.read_all().unwrap(), b"Xbcdefghi");
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/m")).unwrap(), b"abc");
        for seed in 0..32 {
            let fs = setup();
            let mut w = fs.create(p("/db/m")).unwrap();
            fs.sync_dir(p("/db")).unwrap();
            w.append(b"abc").unwrap();
            w.sync_data().unwrap();
            w.append(b"def").unwrap();
            let f = fs.open_rw(p("/db/m"), false).unwrap();
            f.write_at(b"X", 0).unwrap();
            w.append(b"ghi").unwrap();
            fs.crash(CrashMode::KeepRandomPrefix { seed });
            let data = fs.read_file(p("/db/m")).unwrap();
            let ok =
                [&b"Xbcdef"[..], b"Xbcdefghi"].contains(&&data[..]) || b"abcdef".starts_with(&data) && data.len() >= 3;
            assert!(ok, "seed {seed}: {:?}", String::from_utf8_lossy(&data));
        }
    }

    #[test]
    fn rw_open_create_and_dir_entries() {
        let fs = setup();
        assert_eq!(
            fs.open_rw(p("/db/x"), false).err().unwrap().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(errno(&fs.open_rw(p("/db"), true).err().unwrap()), Some(libc::EISDIR));
        assert_eq!(
            fs.open_rw(p("/nope/x"), true).err().unwrap().kind(),
            io::ErrorKind::NotFound
        );
        let f = fs.open_rw(p("/db/x"), true).unwrap();
        assert!(fs.exists(p("/db/x")));
        f.write_at(b"data", 0).unwrap();
        f.sync_data().unwrap();
        // Reopening (with or without create) never truncates and shares the node.
        let g = fs.open_rw(p("/db/x"), true).unwrap();
        assert_eq!(g.read_all().unwrap(), b"data");
        g.write_at(b"D", 0).unwrap();
        assert_eq!(f.read_all().unwrap(), b"Data");
        // Not dir-synced: the file vanishes in a crash, synced data or not.
        fs.crash(CrashMode::DropUnsynced);
        assert!(!fs.exists(p("/db/x")));
        let f = fs.open_rw(p("/db/x"), true).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        f.write_at(b"kept", 0).unwrap();
        f.sync_data().unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/x")).unwrap(), b"kept");
        // The rw handle upcasts to a readable file.
        let f = fs.open_rw(p("/db/x"), false).unwrap();
        let r: Arc<dyn ReadableFile> = f.clone();
        let by_ref: &dyn ReadableFile = &*f;
        assert_eq!(r.read_all().unwrap(), b"kept");
        assert_eq!(by_ref.len().unwrap(), 4);
        // truncate makes everything durable, including earlier positional writes.
        f.write_at(b"KE", 0).unwrap();
        fs.truncate(p("/db/x"), 3).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/x")).unwrap(), b"KEp");
    }

    #[test]
    fn rw_handles_from_before_crash_are_dead() {
        let (fs, f) = rw_setup(b"abc");
        fs.crash(CrashMode::DropUnsynced);
        for e in [
            f.write_at(b"x", 0).unwrap_err(),
            f.set_len(0).unwrap_err(),
            f.sync_data().unwrap_err(),
            f.read_at(&mut [0u8; 2], 0).unwrap_err(),
            f.len().unwrap_err(),
        ] {
            assert_eq!(e.kind(), io::ErrorKind::Other);
            assert_eq!(e.to_string(), "file handle from before crash");
        }
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"abc");
        assert_eq!(fs.faults_fired(), 0);
    }

    #[test]
    fn rw_faults_fire_and_change_nothing() {
        let (fs, f) = rw_setup(b"0123456789");
        fs.fail_after(FaultOp::WriteAt, Some("/db/d"), 1, libc::ENOSPC);
        f.write_at(b"a", 0).unwrap();
        assert_eq!(
            errno(&f.write_at(b"bbbbbbbbbbbbbbbb", 5).unwrap_err()),
            Some(libc::ENOSPC)
        );
        assert_eq!(f.read_all().unwrap(), b"a123456789");
        f.write_at(b"b", 1).unwrap();
        fs.fail_after(FaultOp::SetLen, None, 0, libc::EIO);
        assert_eq!(errno(&f.set_len(2).unwrap_err()), Some(libc::EIO));
        assert_eq!(f.len().unwrap(), 10);
        fs.fail_after(FaultOp::Sync, None, 0, libc::EIO);
        assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EIO));
        assert_eq!(fs.syncs(), 1);
        assert_eq!(fs.faults_fired(), 3);
        // The failed sync made nothing durable.
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(fs.read_file(p("/db/d")).unwrap(), b"0123456789");
        // open_rw: Create with `create`, OpenRead without.
        fs.fail_after(FaultOp::Create, Some("new"), 0, libc::ENOSPC);
        fs.fail_after(FaultOp::OpenRead, Some("/db/d"), 0, libc::EIO);
        assert_eq!(
            errno(&fs.open_rw(p("/db/new"), true).err().unwrap()),
            Some(libc::ENOSPC)
        );
        assert!(!fs.exists(p("/db/new")));
        assert_eq!(errno(&fs.open_rw(p("/db/d"), false).err().unwrap()), Some(libc::EIO));
        fs.open_rw(p("/db/new"), true).unwrap();
        fs.open_rw(p("/db/d"), false).unwrap();
        assert_eq!(fs.faults_fired(), 5);
        // A failed set_len that would extend writes nothing either.
        let g = fs.open_rw(p("/db/d"), false).unwrap();
        fs.fail_always(FaultOp::SetLen, Some("/db/d"), libc::ENOSPC);
        assert!(g.set_len(1 << 20).is_err());
        assert_eq!(g.len().unwrap(), 10);
    }

    #[test]
    fn rw_concurrent_write_at_from_threads() {
        let (fs, f) = rw_setup(b"");
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..64u64 {
                        f.write_at(&[t + 1; 16], (i * 8 + u64::from(t)) * 16).unwrap();
                        if i % 16 == 15 {
                            f.sync_data().unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let check = |data: &[u8]| {
            assert_eq!(data.len(), 64 * 8 * 16);
            for (i, b) in data.iter().enumerate() {
                assert_eq!(usize::from(*b), (i / 16) % 8 + 1, "byte {i}");
            }
        };
        check(&f.read_all().unwrap());
        assert_eq!(fs.syncs(), 1 + 8 * 4);
        // Every thread synced after its last write, so everything survives.
        fs.crash(CrashMode::DropUnsynced);
        check(&fs.read_file(p("/db/d")).unwrap());
    }

    #[test]
    fn clones_share_state_across_threads() {
        let fs = setup();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let fs: Arc<dyn FileSystem> = Arc::new(fs.clone());
                std::thread::spawn(move || {
                    let path = PathBuf::from(format!("/db/{t}"));
                    let mut f = fs.create(&path).unwrap();
                    for i in 0..100u32 {
                        f.append(&i.to_le_bytes()).unwrap();
                        if i % 10 == 9 {
                            f.sync_data().unwrap();
                        }
                    }
                    f.append(b"tail").unwrap();
                    fs.sync_dir(Path::new("/db")).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(fs.syncs(), 80);
        fs.crash(CrashMode::DropUnsynced);
        for t in 0..8 {
            let data = fs.read_file(&PathBuf::from(format!("/db/{t}"))).unwrap();
            assert_eq!(data.len(), 400);
        }
    }
}
