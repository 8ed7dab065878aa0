//! The write path's counters and their public snapshot, [`WriteStats`].
//!
//! Invariant: counters only grow (relaxed atomics); a snapshot is not one atomic cut.

use super::Pipeline;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the write path.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) groups: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) ops: AtomicU64,
    pub(super) log_writes: AtomicU64,
    pub(super) fsyncs: AtomicU64,
    pub(super) synced_writes: AtomicU64,
    pub(super) bytes_logged: AtomicU64,
    pub(super) stall_micros: AtomicU64,
}

/// A snapshot of the write path's counters ([`crate::Db::write_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Commit groups formed.
    pub groups: u64,
    /// Write calls (batches) committed or failed.
    pub writes: u64,
    /// Puts and deletes in those batches.
    pub ops: u64,
    /// Write calls to the redo log.
    pub log_writes: u64,
    /// `fdatasync` calls on the redo log.
    pub fsyncs: u64,
    /// Writes made durable by those fsyncs (so `synced_writes / fsyncs` is writes per fsync).
    pub synced_writes: u64,
    /// Bytes appended to the redo log.
    pub bytes_logged: u64,
    /// Time writers spent stalled (slowed down or stopped), in microseconds.
    pub stall_micros: u64,
}

impl WriteStats {
    /// Average writes per commit group.
    pub fn writes_per_group(&self) -> f64 {
        self.writes as f64 / self.groups.max(1) as f64
    }

    /// Average writes made durable per fsync.
    pub fn writes_per_fsync(&self) -> f64 {
        self.synced_writes as f64 / self.fsyncs.max(1) as f64
    }
}

impl Pipeline {
    /// Counters so far.
    pub(crate) fn stats(&self) -> WriteStats {
        let c = &self.counters;
        WriteStats {
            groups: c.groups.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            ops: c.ops.load(Ordering::Relaxed),
            log_writes: c.log_writes.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            synced_writes: c.synced_writes.load(Ordering::Relaxed),
            bytes_logged: c.bytes_logged.load(Ordering::Relaxed),
            stall_micros: c.stall_micros.load(Ordering::Relaxed),
        }
    }
}
