//! The thread that makes one partition's Raft log durable. openraft's `append` returns once the
//! entries are readable (in [`super::cache::LogCache`]) and is told later, through its
//! callback, when they are durable; this thread writes them, and runs the log store's other
//! changes (truncations, purges, the vote) in the order they were submitted.
//!
//! Invariants:
//! - Operations run one at a time in submission order, so an append never lands after a
//!   later truncation or purge, and a truncation sees every entry appended before it.
//! - Consecutive appends waiting together are written back to back and the last of them is
//!   synced (the redo log is one sequence: that makes all of them durable); each callback
//!   runs only after that sync returned. So a flush is never reported after a hole. (openraft
//!   0.9's core waits for each append's callback, so only `append_durably` callers queue
//!   several.)
//! - After a failed write every later operation fails without writing: nothing reports a
//!   flush after a write that was lost (the engine refuses writes after a failed log write
//!   anyway).
//! - The thread ends when every [`LogWriter`] handle is dropped, after the operations queued.
//!   It holds the database only through the operations (an append carries a handle, a job
//!   captures one), so once the log store's last clone is gone no handle outlives the queue.

use crate::engine::synced;
use crate::types::TypeConfig;
use openraft::storage::LogFlushed;
use openraft::{AnyError, LogId, StorageError, StorageIOError};
use riptide::{Db, WriteBatch, WriteOptions};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use super::cache::LogCache;

type NodeId = u64;

/// Appends written back to back before one sync, at most (bytes).
const GROUP_BYTES: usize = 8 << 20;

/// Entries to make durable: their engine writes (the last is synced), their ids, and
/// openraft's callback.
pub(super) struct Append {
    pub(super) db: Db,
    pub(super) chunks: Vec<WriteBatch>,
    pub(super) ids: Vec<LogId<NodeId>>,
    pub(super) bytes: usize,
    pub(super) done: Option<LogFlushed<TypeConfig>>,
    /// Answered too once durable (for callers that wait, such as `append_durably`).
    pub(super) reply: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

type JobResult = Result<(), StorageError<NodeId>>;
type Job = Box<dyn FnOnce() -> JobResult + Send>;

enum Op {
    Append(Append),
    /// Any other change: run on this thread after everything submitted before it.
    Run(Job, tokio::sync::oneshot::Sender<JobResult>),
}

/// The handle that submits operations to a partition's log-writing thread; cheap to clone.
#[derive(Clone)]
pub(super) struct LogWriter {
    ops: Sender<Op>,
}

impl LogWriter {
    /// Starts the thread, which marks written entries in `cache`.
    pub(super) fn start(cache: Arc<LogCache>) -> std::io::Result<LogWriter> {
        let (ops, queue) = channel();
        std::thread::Builder::new()
            .name("raft-log".into())
            .spawn(move || run(&cache, &queue))?;
        Ok(LogWriter { ops })
    }

    /// Queues an append; its callback (and reply) is answered once it is durable.
    pub(super) fn append(&self, append: Append) {
        if let Err(unsent) = self.ops.send(Op::Append(append)) {
            if let Op::Append(a) = unsent.0 {
                answer(a, Err("the Raft log writer has stopped".into()));
            }
        }
    }

    /// Runs `job` after every operation queued before it, and returns its result.
    pub(super) async fn run(&self, job: impl FnOnce() -> JobResult + Send + 'static) -> JobResult {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.ops.send(Op::Run(Box::new(job), reply)).map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StorageError<NodeId> {
    failure("the Raft log writer has stopped")
}

fn failure(reason: &str) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_logs(AnyError::error(reason)).into()
}

/// Tells openraft (and a waiting caller) how an append ended.
fn answer(append: Append, result: Result<(), String>) {
    if let Some(done) = append.done {
        done.log_io_completed(result.clone().map_err(std::io::Error::other));
    }
    if let Some(reply) = append.reply {
        let _ = reply.send(result);
    }
}

fn run(cache: &LogCache, queue: &Receiver<Op>) {
    let mut failed: Option<String> = None;
    let mut next: Option<Op> = None;
    loop {
        let op = match next.take() {
            Some(op) => op,
            None => match queue.recv() {
                Ok(op) => op,
                Err(_) => return,
            },
        };
        match op {
            Op::Run(job, reply) => {
                let result = match &failed {
                    Some(e) => Err(failure(&format!("an earlier write of the Raft log failed: {e}"))),
                    None => job(),
                };
                if let Err(e) = &result {
                    failed.get_or_insert_with(|| e.to_string());
                }
                let _ = reply.send(result);
            }
            Op::Append(first) => {
                let mut bytes = first.bytes;
                let mut group = vec![first];
                while bytes < GROUP_BYTES {
                    match queue.try_recv() {
                        Ok(Op::Append(a)) => {
                            bytes += a.bytes;
                            group.push(a);
                        }
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let result = match &failed {
                    Some(e) => Err(e.clone()),
                    None => write_group(&mut group).map_err(|e| e.to_string()),
                };
                match &result {
                    Ok(()) => {
                        let ids: Vec<LogId<NodeId>> = group.iter().flat_map(|a| a.ids.iter().copied()).collect();
                        cache.mark_written(&ids);
                    }
                    Err(e) => {
                        failed.get_or_insert_with(|| e.clone());
                    }
                }
                for a in group {
                    answer(a, result.clone());
                }
            }
        }
    }
}

/// Writes every chunk of the group in order (all to the same database), syncing the last.
fn write_group(group: &mut [Append]) -> riptide::Result<()> {
    let Some(db) = group.first().map(|a| a.db.clone()) else {
        return Ok(());
    };
    // An empty batch would not be synced: leave it out (an append of no entries is durable
    // once everything before it is, which the groups before it made sure of).
    let chunks: Vec<WriteBatch> = group
        .iter_mut()
        .flat_map(|a| std::mem::take(&mut a.chunks))
        .filter(|c| !c.is_empty())
        .collect();
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let opts = if i + 1 == n { synced() } else { WriteOptions::default() };
        db.write_unreplicated(chunk, &opts)?;
    }
    Ok(())
}
