//! The state behind the one [`FaultFs`](super::FaultFs) mutex, and the rule every operation
//! goes through: fault injection first.
//!
//! Invariants:
//! - There are two namespaces mapping paths to nodes: `current` (what every operation sees now)
//!   and `durable` (what a crash leaves). `create`, `rename`, `remove_file` and the file created
//!   by `lock` change only `current`; `sync_dir(d)` makes the durable children of `d` exactly the
//!   current children of `d`. Both namespaces may share a node.
//! - Directories are a plain set and are always durable: `create_dir_all` creates them
//!   durably, nothing removes them, and a crash leaves them alone (a deliberate simplification).
//!   A path without a parent (`""`, `/`) is always an existing directory. Paths are compared
//!   component-wise after dropping `.` components ([`norm`]); `..` is not resolved.
//! - Every handle remembers the epoch it was opened in; a crash bumps the epoch, and any call
//!   on a handle from an older epoch fails with `ErrorKind::Other` ("file handle from before
//!   crash"), touching nothing ([`State::check_epoch`]).
//! - Fault injection ([`State::run`]) happens first in every operation that has a [`FaultOp`],
//!   before any other check: a fault that fires returns `io::Error::from_raw_os_error(errno)`
//!   and changes nothing (a failing append or `write_at` writes no byte, a failing `set_len`
//!   keeps the length). A one-shot fault counts down only on matching calls that then
//!   *succeed*; it fires on the first matching call once its count is zero and is then removed.
//!   `read_at`, the `len`s, `exists` and `create_dir_all` never inject faults.

use super::node::NodeRef;
use super::FaultOp;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub(super) struct Fault {
    pub(super) op: FaultOp,
    pub(super) path_contains: Option<String>,
    /// Matching successful calls still to let through (one-shot faults only).
    pub(super) remaining: u64,
    pub(super) errno: i32,
    /// Fires on every matching call until cleared.
    pub(super) always: bool,
}

impl Fault {
    pub(super) fn matches(&self, op: FaultOp, paths: &[&Path]) -> bool {
        self.op == op
            && match &self.path_contains {
                None => true,
                Some(s) => paths.iter().any(|p| p.to_string_lossy().contains(s.as_str())),
            }
    }
}

/// An operation made to block until the test releases it ([`FaultFs::hold`](super::FaultFs::hold)).
#[derive(Debug)]
pub(super) struct Hold {
    pub(super) id: u64,
    pub(super) op: FaultOp,
    pub(super) path_contains: Option<String>,
    /// Operations that arrived at it so far.
    pub(super) arrived: u64,
}

/// Everything behind the [`FaultFs`] mutex.
#[derive(Default)]
pub(super) struct State {
    /// The namespace visible now.
    pub(super) current: BTreeMap<PathBuf, NodeRef>,
    /// The namespace a crash leaves.
    pub(super) durable: BTreeMap<PathBuf, NodeRef>,
    /// Existing directories (always durable).
    pub(super) dirs: BTreeSet<PathBuf>,
    pub(super) faults: Vec<Fault>,
    /// Operations blocked until released, and where they (and `wait_held`) sleep.
    pub(super) holds: Vec<Hold>,
    pub(super) next_hold: u64,
    pub(super) hold_cond: std::sync::Arc<parking_lot::Condvar>,
    /// Held locks: path to the token of the handle holding it.
    pub(super) locks: HashMap<PathBuf, u64>,
    pub(super) next_lock_token: u64,
    /// Bumped by every crash; handles from an older epoch are dead.
    pub(super) epoch: u64,
    pub(super) faults_fired: u64,
    pub(super) syncs: u64,
    /// start_writeback hints: (path, offset, len), in call order.
    pub(super) writebacks: Vec<(PathBuf, u64, u64)>,
    /// punch_hole calls: (path, offset, len), in call order.
    pub(super) punches: Vec<(PathBuf, u64, u64)>,
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
    /// Blocks the calling operation while a hold matches it; the state mutex is released while
    /// it sleeps, so every other operation goes on.
    pub(super) fn wait_at_holds(st: &mut parking_lot::MutexGuard<'_, State>, op: FaultOp, paths: &[&Path]) {
        let mut counted = Vec::new();
        loop {
            let matching = st.holds.iter_mut().find(|h| {
                h.op == op
                    && match &h.path_contains {
                        None => true,
                        Some(s) => paths.iter().any(|p| p.to_string_lossy().contains(s.as_str())),
                    }
            });
            let Some(hold) = matching else { return };
            if !counted.contains(&hold.id) {
                counted.push(hold.id);
                hold.arrived += 1;
            }
            let cond = st.hold_cond.clone();
            cond.notify_all();
            cond.wait(st);
        }
    }

    /// Fires the first registered fault for `op` on `paths` that is due, if any.
    pub(super) fn inject(&mut self, op: FaultOp, paths: &[&Path]) -> io::Result<()> {
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
    pub(super) fn succeeded(&mut self, op: FaultOp, paths: &[&Path]) {
        for f in &mut self.faults {
            if !f.always && f.matches(op, paths) {
                f.remaining = f.remaining.saturating_sub(1);
            }
        }
    }

    /// Runs `body` as operation `op` on `paths`: fault injection first, then the body; the call
    /// counts against one-shot faults only if the body succeeds.
    pub(super) fn run<T>(
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

    pub(super) fn check_epoch(&self, epoch: u64) -> io::Result<()> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(io::Error::other("file handle from before crash"))
        }
    }

    pub(super) fn is_dir(&self, path: &Path) -> bool {
        path.parent().is_none() || self.dirs.contains(path)
    }

    /// Fails unless `path` can name a new file: its parent is an existing directory and `path`
    /// itself is not a directory.
    pub(super) fn check_new_file(&self, path: &Path) -> io::Result<()> {
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

    pub(super) fn file(&self, path: &Path) -> io::Result<&NodeRef> {
        match self.current.get(path) {
            Some(node) => Ok(node),
            None if self.is_dir(path) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None => Err(not_found(path)),
        }
    }

    pub(super) fn check_dir(&self, path: &Path) -> io::Result<()> {
        if self.is_dir(path) {
            Ok(())
        } else if self.current.contains_key(path) {
            Err(io::Error::from_raw_os_error(libc::ENOTDIR))
        } else {
            Err(not_found(path))
        }
    }

    /// Adds `path` and all its ancestors to the directory set.
    pub(super) fn add_dirs(&mut self, path: &Path) {
        for dir in path.ancestors().filter(|d| d.parent().is_some()) {
            self.dirs.insert(dir.to_path_buf());
        }
    }
}

pub(super) fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// The canonical form used as a map key: components re-joined, `.` components dropped.
pub(super) fn norm(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

/// Paths in `map` whose parent is exactly `dir`.
pub(super) fn children<'a>(
    map: &'a BTreeMap<PathBuf, NodeRef>,
    dir: &'a Path,
) -> impl Iterator<Item = (&'a PathBuf, &'a NodeRef)> + 'a {
    // Component-wise ordering keeps everything under `dir` contiguous from `dir` on.
    map.range(dir.to_path_buf()..)
        .take_while(move |(p, _)| p.starts_with(dir))
        .filter(move |(p, _)| p.parent() == Some(dir))
}
