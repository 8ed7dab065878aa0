//! The test-facing controls of [`FaultFs`]: registering faults, simulating a crash, reading
//! and overwriting files behind the engine's back, and the counters tests assert on.
//!
//! Invariants:
//! - No control injects a fault or counts against one.
//! - `crash` replaces every surviving node by a fresh copy holding only its crash image (see
//!   `node`), sets `current = durable`, releases every lock and bumps the epoch; registered
//!   faults and the counters survive it. Old nodes stay with the (now dead) handles.
//! - `write_file` leaves the file fully synced and its directory entry durable, keeping the
//!   identity of an existing file.

use super::node::{new_node, Node, NodeRef};
use super::state::{norm, Fault, Hold};
use super::{CrashMode, FaultFs, FaultOp};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// Makes every matching operation block, before fault injection, until
    /// [`FaultFs::release_hold`]: for tests that need another thread to act while, say, an
    /// fsync is in progress. Only [`FaultOp::Sync`] can be held. `path_contains` as for
    /// [`FaultFs::fail_after`]. Returns the hold's id.
    pub fn hold(&self, op: FaultOp, path_contains: Option<&str>) -> u64 {
        let mut st = self.state.lock();
        st.next_hold += 1;
        let id = st.next_hold;
        st.holds.push(Hold {
            id,
            op,
            path_contains: path_contains.map(str::to_owned),
            arrived: 0,
        });
        id
    }

    /// Waits up to `timeout` until an operation is blocked at hold `id`; true if one is.
    pub fn wait_held(&self, id: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock();
        loop {
            match st.holds.iter().find(|h| h.id == id) {
                Some(h) if h.arrived > 0 => return true,
                Some(_) => {}
                None => return false,
            }
            let cond = st.hold_cond.clone();
            if cond.wait_until(&mut st, deadline).timed_out() {
                return st.holds.iter().any(|h| h.id == id && h.arrived > 0);
            }
        }
    }

    /// Removes hold `id`; the operations blocked at it go on (and may then meet a fault).
    pub fn release_hold(&self, id: u64) {
        let mut st = self.state.lock();
        st.holds.retain(|h| h.id != id);
        st.hold_cond.notify_all();
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
        let sectors = matches!(mode, CrashMode::KeepRandomSectors { .. });
        let mut rng = match mode {
            CrashMode::DropUnsynced => None,
            CrashMode::KeepRandomPrefix { seed } | CrashMode::KeepRandomSectors { seed } => {
                Some(StdRng::seed_from_u64(seed))
            }
        };
        // Old nodes stay with the (now dead) handles; survivors get fresh copies, deduplicated
        // so a node durable under two names stays one node. BTreeMap order keeps the random
        // choices deterministic.
        let mut fresh: HashMap<*const Mutex<Node>, NodeRef> = HashMap::new();
        let mut durable = BTreeMap::new();
        for (path, node) in &st.durable {
            let copy = fresh
                .entry(Arc::as_ptr(node))
                .or_insert_with(|| {
                    let node = node.lock();
                    new_node(match rng.as_mut() {
                        Some(rng) if sectors => node.crash_image_sectors(rng),
                        rng => node.crash_image(rng),
                    })
                })
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
