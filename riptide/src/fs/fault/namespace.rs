//! The [`FileSystem`] operations of [`FaultFs`] on paths: directories, creating, opening,
//! renaming, removing, truncating, syncing directories and locking.
//!
//! Invariants:
//! - Every path is normalized ([`norm`]) before anything else, and every operation with a
//!   [`FaultOp`] runs its body through [`State::run`](super::state::State::run), so a fired
//!   fault changes nothing.
//! - `create`, `rename`, `remove_file` and `lock`'s file change only the `current` namespace;
//!   `sync_dir(d)` copies `d`'s current children to the durable namespace. `open_rw` with
//!   `create` adds a directory entry exactly like `create`, but never replaces or truncates an
//!   existing file. `truncate` is durable at once.

use super::handles::{FaultLock, FaultReadable, FaultRw, FaultWritable};
use super::node::{new_node, NodeRef};
use super::state::{children, norm, not_found};
use super::{FaultFs, FaultOp};
use crate::fs::{FileLock, FileSystem, RandomRwFile, ReadableFile, WritableFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

    /// A model of a sparse file: the 4 KiB pages of the file that are not all zeros (punched
    /// holes and never-written gaps read as zeros).
    fn allocated_bytes(&self, path: &Path) -> io::Result<Option<u64>> {
        let path = norm(path);
        let st = self.state.lock();
        let node = st
            .current
            .get(&path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file", path.display())))?;
        let n = node.lock();
        let pages = n.data.chunks(4096).filter(|p| p.iter().any(|b| *b != 0)).count();
        Ok(Some(pages as u64 * 4096))
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
