//! Stage 1, log buffering (one thread at a time, under the `log` mutex): a group gets its LSN
//! range and commit-window seq, binds each touched table's active memtable, appends its record
//! to the shared log buffer and enters the flush queue; after the lock it enters the commit
//! window.
//!
//! Invariants:
//! - LSNs are allocated in log-buffer order, so the redo log is in LSN order.
//! - A memtable holds exactly the LSNs bound to it here; a memtable switch happens only here
//!   (or at the seal point, under the same lock), so memtables of a table are ordered by LSN.
//! - A group without logged batches (`disable_wal`) skips stage 2; it still enters the commit
//!   window in LSN order.
//! - A group's commit-window seq is taken here, in LSN order, but the group enters the window
//!   after this lock is released (`Pipeline::register`): stage 1 never waits for the
//!   window's lock, which stage 4 holds while it commits (on 16 cores both locks were among
//!   the most waited for, and a leader waiting for the window held up every other leader).
//!   Nobody finishes a group before its own leader registered it, since that leader inserts
//!   it afterwards.

use super::commit::{EntryState, GroupProgress, GroupState, GroupWork, Phase, WindowEntry};
use super::stats::Counter;
use super::{Pipeline, Writer};
use crate::coding::RecordHeader;
use crate::contention::LockClass;
use crate::error::Error;
use crate::key::Lsn;
use crate::memtable::Memtable;
use crate::redo::record::RECORD_GROUP;
use crate::subtable::TableInner;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub(super) struct LogBuffer {
    pub(super) next_lsn: Lsn,
    /// The commit-window seq of the next group (groups take seqs in LSN order).
    pub(super) next_seq: u64,
    pub(super) buf: Vec<u8>,
    pub(super) sync_needed: bool,
    /// Writes with `sync` in `buf`.
    pub(super) sync_writes: u64,
    /// Groups whose bytes are in `buf`, in log order.
    pub(super) flush_queue: Vec<Arc<GroupState>>,
}

/// Outcome of stage 1.
pub(super) enum Buffered {
    /// The group has redo bytes and waits for a flush; its work is for stage 3.
    Logged(Arc<GroupState>, GroupWork),
    /// The group has no redo bytes (`disable_wal`): its window seq and work.
    Unlogged(u64, GroupWork),
}

/// Memtables bound to a group in stage 1, by table id.
pub(super) struct Bound(pub(super) Vec<(u32, Arc<Memtable>)>);

impl Bound {
    pub(super) fn get(&self, table: u32) -> Option<&Memtable> {
        self.0.iter().find(|(id, _)| *id == table).map(|(_, m)| m.as_ref())
    }
}

impl Pipeline {
    /// Stage 1. Appends the group to the log buffer (if it has logged batches) and enters it in
    /// the commit window.
    pub(super) fn buffer_group(
        &self,
        group: Vec<Writer>,
        wal_writers: usize,
        payload_crc: u32,
        payload_len: usize,
        leader_waits: bool,
        timed: bool,
    ) -> std::result::Result<Buffered, (Error, Vec<Writer>)> {
        // Counted before the lock: the stage-1 critical section stays as short as it can be.
        let sync_writes = group[..wal_writers].iter().filter(|w| w.sync).count() as u64;
        let leader_finishes = leader_waits && sync_writes > 0;
        let ops: u64 = group.iter().map(|w| u64::from(w.batch.count)).sum();
        let wal_ops: u64 = group[..wal_writers].iter().map(|w| u64::from(w.batch.count)).sum();
        let mut tables: Vec<&Arc<TableInner>> = Vec::new();
        for w in &group {
            for t in &w.batch.tables {
                if !tables.iter().any(|x| x.id == t.id) {
                    tables.push(t);
                }
            }
        }
        // Taken before the lock too: each table's active memtable (its reference count is a
        // cache line every inserting core writes), and the group's state. Under the lock a
        // memtable is only checked to be still the active one with room.
        let mut bound = Bound(tables.iter().map(|t| (t.id, t.active_memtable())).collect());
        let state = (wal_ops > 0).then(|| {
            Arc::new(GroupState {
                seq: AtomicU64::new(0),
                last_lsn: AtomicU64::new(0),
                leader_waits,
                leader_finishes,
                timed,
                flushed: AtomicBool::new(false),
                progress: Mutex::new(GroupProgress {
                    phase: Phase::Buffered,
                    flushed_at: None,
                    inserted: None,
                }),
                cond: Condvar::new(),
            })
        });
        let mut log = self.contention.lock(LockClass::LogBuffer, &self.log);
        // Only poison stops an accepted write; `close` waits for accepted writes to finish.
        if let Some(e) = self.poison_error() {
            return Err((Error::Poisoned(Arc::new(e)), group));
        }
        let first_lsn = log.next_lsn;
        log.next_lsn += ops;
        // A replaced reference may be the last of a flushed memtable: dropped after the lock.
        let mut stale = Vec::new();
        for (table, (_, mem)) in tables.iter().zip(bound.0.iter_mut()) {
            if !table.is_active_with_room(mem) {
                stale.push(std::mem::replace(mem, table.memtable_for_write(first_lsn)));
            }
        }
        if wal_ops > 0 {
            let header = RecordHeader {
                payload_crc,
                payload_len: payload_len as u32,
                record_type: RECORD_GROUP,
                first_lsn,
            };
            log.buf.extend_from_slice(&header.encode());
            for w in &group[..wal_writers] {
                log.buf.extend_from_slice(&w.batch.rep);
            }
            log.sync_writes += sync_writes;
            log.sync_needed |= sync_writes > 0;
        }
        let seq = log.next_seq;
        log.next_seq += 1;
        let last_lsn = first_lsn + ops - 1;
        let work = GroupWork {
            writers: group,
            bound,
            first_lsn,
        };
        let Some(state) = state else {
            drop(log);
            drop(stale);
            self.register(seq, last_lsn);
            self.counters.add(Counter::Ops, ops);
            return Ok(Buffered::Unlogged(seq, work));
        };
        // Relaxed: the driver reads them after taking this lock, the leader on this thread.
        state.seq.store(seq, Ordering::Relaxed);
        state.last_lsn.store(last_lsn, Ordering::Relaxed);
        log.flush_queue.push(state.clone());
        drop(log);
        drop(stale);
        self.register(seq, last_lsn);
        self.counters.add(Counter::Ops, ops);
        Ok(Buffered::Logged(state, work))
    }

    /// Enters group `seq`, whose last LSN is `last_lsn`, in the commit window, after stage 1
    /// released the log buffer. Groups may register out of seq order: a later one leaves
    /// pending slots for the earlier ones, which the window never passes.
    fn register(&self, seq: u64, last_lsn: Lsn) {
        let mut win = self.contention.lock(LockClass::CommitWindow, &self.window);
        let idx = (seq - win.front_seq) as usize;
        while win.entries.len() <= idx {
            win.entries.push_back(WindowEntry {
                last_lsn: 0,
                state: EntryState::Pending,
                completions: Vec::new(),
                ready_at: None,
            });
        }
        win.entries[idx].last_lsn = last_lsn;
    }
}
