//! [`FaultFs`]: an in-memory [`FileSystem`](super::FileSystem) that injects I/O errors and
//! simulates power loss, for tests.
//!
//! This file holds the public face: [`FaultOp`], [`CrashMode`] and the [`FaultFs`] handle. The
//! rooms behind it, each with its own invariants:
//! - `node`: one file's content with its undo log of unsynced changes, and what a crash leaves
//!   of it;
//! - `state`: the shared state behind the one mutex (two namespaces, directories, faults, locks,
//!   epoch, counters) and the fault-injection rule every operation goes through;
//! - `control`: the test-facing controls (register faults, crash, peek and poke files,
//!   counters);
//! - `namespace`: the [`FileSystem`](super::FileSystem) operations on paths;
//! - `handles`: the open-file and lock handles.
//!
//! Invariants (across the rooms):
//! - Durability follows the [`FileSystem`](super::FileSystem) contract exactly: file data is
//!   durable after the handle's `sync_data`, directory entries after `sync_dir` on the parent;
//!   a crash keeps only what was durable (plus, under [`CrashMode::KeepRandomPrefix`], an
//!   in-order prefix of the later changes of each file; under
//!   [`CrashMode::KeepRandomSectors`], any subset of the sectors of its unsynced overwrites).
//! - Fault injection happens first in every operation that has a [`FaultOp`], before any other
//!   check, and a fault that fires changes nothing.
//! - All state lives behind one `parking_lot::Mutex`; node mutexes are only ever taken while
//!   holding it (lock order: state, then node), so every method is thread-safe and atomic.

mod control;
mod handles;
mod namespace;
mod node;
mod state;
#[cfg(test)]
mod tests;

use parking_lot::Mutex;
use state::State;
use std::sync::Arc;

/// An operation that can be made to fail with [`FaultFs::fail_after`] / [`FaultFs::fail_always`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`FileSystem::create`](super::FileSystem::create), and
    /// [`FileSystem::open_rw`](super::FileSystem::open_rw) with `create` set.
    Create,
    /// [`FileSystem::open_read`](super::FileSystem::open_read), and
    /// [`FileSystem::open_rw`](super::FileSystem::open_rw) without `create`.
    OpenRead,
    /// [`WritableFile::append`](super::WritableFile::append); the path is the one the file was
    /// created under.
    Append,
    /// [`WritableFile::sync_data`](super::WritableFile::sync_data) and
    /// [`RandomRwFile::sync_data`](super::RandomRwFile::sync_data); the path is the one the
    /// file was created or opened under.
    Sync,
    /// [`RandomRwFile::write_at`](super::RandomRwFile::write_at); the path is the one the file was
    /// opened under.
    WriteAt,
    /// [`RandomRwFile::set_len`](super::RandomRwFile::set_len); the path is the one the file was
    /// opened under.
    SetLen,
    /// [`FileSystem::rename`](super::FileSystem::rename); a path filter matches if either the
    /// source or the target matches.
    Rename,
    /// [`FileSystem::remove_file`](super::FileSystem::remove_file).
    Remove,
    /// [`FileSystem::truncate`](super::FileSystem::truncate).
    Truncate,
    /// [`FileSystem::sync_dir`](super::FileSystem::sync_dir); the path is the directory.
    SyncDir,
    /// [`FileSystem::list_dir`](super::FileSystem::list_dir); the path is the directory.
    ListDir,
    /// [`FileSystem::lock`](super::FileSystem::lock).
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
    /// Like DropUnsynced, but of every unsynced positional write (`write_at`) each 512-byte
    /// sector inside the file's synced length survives or not at random: a power cut during
    /// writeback, where the device persisted any subset of the pages in flight, so later bytes
    /// may survive where earlier ones did not. Appends and length changes are dropped.
    KeepRandomSectors {
        /// Seed of the random generator choosing the sectors; the same seed on the same state
        /// gives the same result.
        seed: u64,
    },
}

/// An in-memory, fault-injecting, crash-simulating [`FileSystem`](super::FileSystem) for tests.
///
/// Clones share the same state, so a test can keep one clone to inject faults and crash while
/// the engine uses another through `Arc<dyn FileSystem>`.
#[derive(Clone, Debug, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}
