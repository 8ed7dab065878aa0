//! The handles [`FaultFs`](super::FaultFs) gives out: appendable, readable and read-write
//! files, and locks.
//!
//! Invariants:
//! - A file handle keeps its node, so a removed or renamed file stays readable and writable
//!   through it; fault path filters see the path the handle was opened under.
//! - Every call first checks the handle's epoch: after a crash the handle is dead and every
//!   call fails, touching nothing (`len` of a `WritableFile`, which cannot fail, reports the
//!   pre-crash length).
//! - `start_writeback` and `punch_hole` are recorded for tests and inject no fault; a punch
//!   zeroes the range inside the file like a write of zeros (durable after the next sync).
//! - A lock is released on drop unless a crash already released it (the token tells holders
//!   apart).

use super::node::NodeRef;
use super::state::State;
use super::FaultOp;
use crate::fs::{FileLock, RandomRwFile, ReadableFile, WritableFile};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A [`WritableFile`] of [`FaultFs`].
pub(super) struct FaultWritable {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) node: NodeRef,
    /// The path the file was created under (for fault path filters, even after a rename).
    pub(super) path: PathBuf,
    pub(super) epoch: u64,
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
        State::wait_at_holds(&mut st, FaultOp::Sync, &[&self.path]);
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
pub(super) struct FaultReadable {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) node: NodeRef,
    pub(super) epoch: u64,
}

impl ReadableFile for FaultReadable {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        node_read_at(&self.state, &self.node, self.epoch, buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        node_len(&self.state, &self.node, self.epoch)
    }
}

pub(super) fn node_read_at(
    state: &Mutex<State>,
    node: &NodeRef,
    epoch: u64,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    let st = state.lock();
    st.check_epoch(epoch)?;
    let n = node.lock();
    let start = usize::try_from(offset).map_or(n.data.len(), |o| o.min(n.data.len()));
    let count = buf.len().min(n.data.len() - start);
    buf[..count].copy_from_slice(&n.data[start..start + count]);
    Ok(count)
}

pub(super) fn node_len(state: &Mutex<State>, node: &NodeRef, epoch: u64) -> io::Result<u64> {
    let st = state.lock();
    st.check_epoch(epoch)?;
    let len = node.lock().data.len();
    Ok(len as u64)
}

/// A [`RandomRwFile`] of [`FaultFs`]. Like [`FaultReadable`] it keeps its node.
pub(super) struct FaultRw {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) node: NodeRef,
    /// The path the file was opened under (for fault path filters, even after a rename).
    pub(super) path: PathBuf,
    pub(super) epoch: u64,
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
        State::wait_at_holds(&mut st, FaultOp::Sync, &[&self.path]);
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
pub(super) struct FaultLock {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) path: PathBuf,
    /// Distinguishes this holder from a later one after a crash released the lock.
    pub(super) token: u64,
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
