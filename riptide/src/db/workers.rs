//! Background threads: one queue of tables waiting for a flush and one for compactions, and
//! the worker threads that serve them.
//!
//! Invariants:
//! - A table is queued at most once per queue; `running` counts jobs taken off the queue and
//!   not finished, so "queue empty and nothing running" means the workers are idle.
//! - Workers hold the instance only weakly between jobs, so dropping the last `Db` handle shuts
//!   the instance down even while a worker is parked.
//! - A failed job is queued again after 100 ms; its error stays in the instance's background
//!   error, where stalled writers see it.

use super::DbInner;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Tables waiting for a background worker (one queue for flushes, one for compactions).
#[derive(Default)]
pub(super) struct JobQueue {
    state: Mutex<JobQueueState>,
    cond: Condvar,
}

#[derive(Default)]
struct JobQueueState {
    pending: VecDeque<u32>,
    /// Jobs (flushes and the compactions they trigger) being run by workers.
    running: usize,
    shutdown: bool,
}

impl JobQueue {
    /// Queues `table` unless it is queued already, and wakes a worker.
    pub(super) fn push(&self, table: u32) {
        let mut s = self.state.lock();
        if !s.pending.contains(&table) {
            s.pending.push_back(table);
        }
        self.cond.notify_one();
    }

    /// True while a table is queued or a job is running.
    pub(super) fn is_busy(&self) -> bool {
        let s = self.state.lock();
        !s.pending.is_empty() || s.running > 0
    }

    /// Makes every worker of this queue return.
    fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.cond.notify_all();
    }

    /// The next table to work on (counted as running), or `None` at shutdown.
    fn take(&self) -> Option<u32> {
        let mut s = self.state.lock();
        loop {
            if s.shutdown {
                return None;
            }
            if let Some(t) = s.pending.pop_front() {
                s.running += 1;
                return Some(t);
            }
            self.cond.wait(&mut s);
        }
    }

    fn done(&self) {
        self.state.lock().running -= 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerKind {
    Flush,
    Compaction,
}

/// The queues and threads of one instance.
pub(super) struct Workers {
    pub(super) flushes: Arc<JobQueue>,
    pub(super) compactions: Arc<JobQueue>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Workers {
    /// No threads yet; `flushes` is the queue tables already report their full memtables to.
    pub(super) fn new(flushes: Arc<JobQueue>) -> Workers {
        Workers {
            flushes,
            compactions: Default::default(),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// True while any flush or compaction is queued or running.
    pub(super) fn is_busy(&self) -> bool {
        self.flushes.is_busy() || self.compactions.is_busy()
    }

    /// Starts `max_flushes` flush threads and `max_compactions` compaction threads.
    pub(super) fn start(&self, db: &Arc<DbInner>) -> Result<()> {
        let mut threads = self.threads.lock();
        let kinds = (0..db.opts.max_flushes)
            .map(|i| (WorkerKind::Flush, i))
            .chain((0..db.opts.max_compactions).map(|i| (WorkerKind::Compaction, i)));
        for (kind, i) in kinds {
            let weak: Weak<DbInner> = Arc::downgrade(db);
            let (queue, name) = match kind {
                WorkerKind::Flush => (self.flushes.clone(), format!("riptide-flush-{i}")),
                WorkerKind::Compaction => (self.compactions.clone(), format!("riptide-compact-{i}")),
            };
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker(weak, queue, kind))
                .map_err(|e| Error::io("spawn background thread", "", e))?;
            threads.push(handle);
        }
        Ok(())
    }

    /// Stops every worker and waits for them (a job in progress finishes first).
    pub(super) fn stop(&self) {
        self.flushes.shut_down();
        self.compactions.shut_down();
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        for h in threads {
            if h.thread().id() != std::thread::current().id() {
                // Workers never panic on their own; a join error means one already died.
                let _ = h.join();
            }
        }
    }
}

/// A background worker: takes tables off its queue and flushes their immutable memtables
/// (which queues them for compaction) or runs the compactions the picker asks for.
fn worker(db: Weak<DbInner>, queue: Arc<JobQueue>, kind: WorkerKind) {
    while let Some(table) = queue.take() {
        let Some(db) = db.upgrade() else {
            queue.done();
            return;
        };
        let Some(t) = db.table_by_id(table) else {
            queue.done();
            continue;
        };
        let failed = match kind {
            WorkerKind::Flush => db.flush_all_immutables(&t).is_err(),
            WorkerKind::Compaction => db.compact_until_idle(&t).is_err(),
        };
        // Compactions free extents; flush workers stay free for the next memtable.
        if kind == WorkerKind::Compaction {
            db.punch_free_slots();
        }
        drop(db);
        if failed {
            // Retry later: the error is in the background error and stalled writers see it.
            std::thread::sleep(Duration::from_millis(100));
            queue.push(table);
        }
        queue.done();
    }
}
