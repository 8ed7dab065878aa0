//! The leader's group commit across the Raft log: the write sets that transactions commit
//! while openraft's core is busy go into the log as one entry ([`WriteOp::Group`]), made
//! durable by one sync of the leader's log and one of each follower's.
//!
//! openraft 0.9's core takes client writes one at a time and, for each, appends its entry and
//! waits until the append is durable before it takes the next. Proposed one entry per
//! transaction, commits were bound to one leader fsync each, however many clients waited. So
//! one task here proposes for the node: it sends an entry, waits until the core has begun to
//! append it ([`crate::LogStore::appends`]), and meanwhile the write sets that arrive queue up
//! to form the next entry, which then waits in the core's channel during that append.
//!
//! Invariants:
//! - Write sets are proposed in the order they arrived, each exactly once; only consecutive
//!   sets proposed in the same term and holding only puts, deletes and a fence are grouped
//!   (table DDL and two-phase commit steps go alone, as before).
//! - A group keeps each set whole, with its own fence: every replica accepts or refuses each
//!   set on its own, as if it were an entry, and each writer hears its own set's outcome.
//! - Each set is registered in [`InflightWrites`] with the term it was proposed in, so a
//!   snapshot that overtakes the entry settles it like any other write.
//! - The wait for the core never blocks a proposal for long: it ends when the entry's answer
//!   comes (a refusal comes before any append) or after `CORE_WAIT` (20 ms).

use crate::inflight::InflightWrites;
use crate::types::{Applied, TypeConfig, WriteOp, WriteSet};
use openraft::Raft;
use riptide::replication::ReplicationDone;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Bytes of write sets grouped into one entry at most (a set above it goes alone): the
/// transport cuts appends at 1 MiB, so a group stays within one append message.
const GROUP_BYTES: usize = 512 << 10;
/// Write sets in one group at most.
const GROUP_SETS: usize = 1024;
/// How long the proposer waits for the core to take an entry before it proposes the next
/// one anyway.
const CORE_WAIT: Duration = Duration::from_millis(20);

/// What the proposer did since the node started (for `/metrics`).
#[derive(Debug, Default)]
pub struct ProposerStats {
    /// Entries proposed (a group or a lone set each).
    pub entries: AtomicU64,
    /// Write sets proposed in them.
    pub write_sets: AtomicU64,
}

/// One write set to propose: fenced and validated, with the term it is proposed in and the
/// writer's completion.
pub struct Proposal {
    pub set: WriteSet,
    pub term: u64,
    pub done: ReplicationDone,
}

/// The handle through which the replicator hands write sets to the proposing task.
pub struct Proposer {
    queue: mpsc::UnboundedSender<Proposal>,
    stats: Arc<ProposerStats>,
}

impl Proposer {
    /// Starts the proposing task on `runtime`. `appends` follows the log store's appends
    /// ([`crate::LogStore::appends`]); without it, the task proposes each entry as soon as
    /// the one before is handed over, and groups only what queued meanwhile. A write not
    /// answered within `write_timeout` hears an unknown outcome, and keeps its locks until
    /// openraft answers (see the replicator's module header for what each outcome means).
    pub fn start(
        raft: Raft<TypeConfig>,
        runtime: &tokio::runtime::Handle,
        write_timeout: Duration,
        inflight: Arc<InflightWrites>,
        appends: Option<watch::Receiver<u64>>,
    ) -> Proposer {
        let (queue, arrivals) = mpsc::unbounded_channel();
        let stats = Arc::new(ProposerStats::default());
        let task = ProposerTask {
            raft,
            write_timeout,
            inflight,
            appends,
            stats: stats.clone(),
        };
        runtime.spawn(task.run(arrivals));
        Proposer { queue, stats }
    }

    /// What the proposer did so far.
    pub fn stats(&self) -> Arc<ProposerStats> {
        self.stats.clone()
    }

    /// Queues `proposal`; if the task has stopped (the node is shutting down), it is refused
    /// at once: nothing was proposed.
    pub fn propose(&self, proposal: Proposal) {
        if let Err(unsent) = self.queue.send(proposal) {
            unsent.0.done.settle(Err(riptide::Error::NotLeader {
                leader: Some("this node's Raft proposer has stopped".into()),
            }));
        }
    }
}

struct ProposerTask {
    raft: Raft<TypeConfig>,
    write_timeout: Duration,
    inflight: Arc<InflightWrites>,
    appends: Option<watch::Receiver<u64>>,
    stats: Arc<ProposerStats>,
}

impl ProposerTask {
    async fn run(mut self, mut arrivals: mpsc::UnboundedReceiver<Proposal>) {
        let mut next: Option<Proposal> = None;
        loop {
            let first = match next.take() {
                Some(p) => p,
                None => match arrivals.recv().await {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut group = vec![first];
            if group[0].set.is_groupable() {
                let mut bytes = group[0].set.weight();
                while group.len() < GROUP_SETS {
                    let Ok(p) = arrivals.try_recv() else { break };
                    let weight = p.set.weight();
                    if p.term != group[0].term || !p.set.is_groupable() || bytes.saturating_add(weight) > GROUP_BYTES {
                        next = Some(p);
                        break;
                    }
                    bytes += weight;
                    group.push(p);
                }
            }
            let seen = self.appends.as_mut().map(|a| *a.borrow_and_update());
            let Some(answered) = self.send(group).await else {
                continue;
            };
            // The core takes the entry once it has made the one before durable: what arrives
            // until then forms the next entry.
            if let (Some(appends), Some(seen)) = (self.appends.as_mut(), seen) {
                tokio::select! {
                    _ = appends.wait_for(|n| *n > seen) => {}
                    _ = answered => {}
                    _ = tokio::time::sleep(CORE_WAIT) => {}
                }
            }
        }
    }

    /// Proposes `group` as one entry (a lone set as itself) and spawns the task that answers
    /// its writers; the receiver hears when that task is done. None when the entry could not
    /// be handed to openraft (its writers are answered).
    async fn send(&self, group: Vec<Proposal>) -> Option<oneshot::Receiver<()>> {
        let term = group[0].term;
        self.stats.entries.fetch_add(1, Ordering::Relaxed);
        self.stats.write_sets.fetch_add(group.len() as u64, Ordering::Relaxed);
        let mut sets = Vec::with_capacity(group.len());
        let mut dones = Vec::with_capacity(group.len());
        for p in group {
            sets.push(p.set);
            dones.push(p.done);
        }
        // Registered before the proposal, all under one lock: a snapshot install that
        // overtakes the entry finds all of them (or, if it came first, none).
        let ids = self.inflight.add_all(term, dones);
        let reply = match self.raft.client_write_ff(entry_of(sets)).await {
            Ok(reply) => reply,
            Err(e) => {
                settle_all(&self.inflight, &ids, &Err(e.to_string()));
                return None;
            }
        };
        let (finished, answered) = oneshot::channel();
        let (inflight, timeout, waiting) = (self.inflight.clone(), self.write_timeout, ids.clone());
        let task = tokio::spawn(async move {
            tokio::pin!(reply);
            let answer = tokio::select! {
                answer = &mut reply => answer,
                _ = tokio::time::sleep(timeout) => {
                    // The writers hear "unknown" now; each keeps its locks until openraft says
                    // how the entry ended (or a snapshot overtakes it).
                    for &id in &waiting {
                        inflight.answer(id, Err(riptide::Error::Replication(format!(
                            "no answer from the Raft group within {timeout:?}; the outcome is unknown"
                        ))));
                    }
                    reply.await
                }
            };
            let answer = match answer {
                Ok(Ok(response)) => Ok(response.data),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the Raft node stopped before it answered".to_string()),
            };
            settle_all(&inflight, &waiting, &answer);
            let _ = finished.send(());
        });
        // One task answers every set of the entry: a snapshot that overtakes the entry settles
        // them all at once (they share its term), aborting it.
        self.inflight.set_task_all(&ids, task.abort_handle());
        Some(answered)
    }
}

/// Settles each write of `ids` (one entry's, in order: one id for a lone set) not settled
/// already with its set's part of `answer`.
fn settle_all(inflight: &InflightWrites, ids: &[u64], answer: &Result<Applied, String>) {
    let lone = ids.len() == 1;
    for (index, &id) in ids.iter().enumerate() {
        if let Some(done) = inflight.take(id) {
            let result = answer
                .as_ref()
                .map(|reply| member_result(reply, index, lone))
                .map_err(String::clone);
            done.settle(outcome(result));
        }
    }
}

/// What one writer of an entry hears: its own set's result out of the entry's.
fn member_result(reply: &Applied, index: usize, lone: bool) -> Applied {
    if lone || reply.refused.is_some() {
        return reply.clone();
    }
    reply.sets.get(index).cloned().unwrap_or_else(|| Applied {
        refused: Some(format!("the entry's answer holds no result for its set {index}")),
        ..Applied::default()
    })
}

/// A group's entry: its sets as one [`WriteOp::Group`], or a lone set as itself.
fn entry_of(mut sets: Vec<WriteSet>) -> WriteSet {
    if sets.len() == 1 {
        return sets.pop().unwrap_or_default();
    }
    WriteSet {
        ops: vec![WriteOp::Group { sets }],
    }
}

/// The definite refusal of a write fenced to another term.
pub(crate) fn fenced(reason: &str) -> riptide::Error {
    riptide::Error::NotLeader {
        leader: Some(format!("the leader's term moved since this write's reads ({reason})")),
    }
}

/// The engine's view of openraft's answer for one write set: what applying it did, or why
/// openraft gave no such answer (what each outcome means: the replicator's module header).
fn outcome(answer: Result<Applied, String>) -> riptide::Result<()> {
    match answer {
        Ok(reply) => match reply.refused {
            None => Ok(()),
            // Committed in another term than its fence: refused on every replica, so it was
            // definitely not applied, as a write a follower refuses.
            Some(reason) if reason.starts_with(crate::types::FENCE_REFUSAL) => Err(fenced(&reason)),
            // A decision for an id with nothing prepared (never prepared, or decided already).
            Some(reason) if reason.starts_with(crate::types::UNKNOWN_XID_REFUSAL) => {
                Err(riptide::Error::UnknownXid(reason))
            }
            Some(reason) if reason.starts_with(crate::types::XID_EXISTS_REFUSAL) => {
                Err(riptide::Error::DuplicateXid(reason))
            }
            // Validated above, so only a replica disagreeing with this build's limits gets here.
            Some(reason) => Err(riptide::Error::InvalidOption {
                option: "write set",
                reason: format!("refused by every replica: {reason}"),
            }),
        },
        // Proposed as leader, then answered "forward to the leader": the entry was never
        // appended (leadership moved first) or was truncated from this log, and a truncated
        // entry may still have been committed by another leader (one that received it, or one
        // whose snapshot covers it). Unknown, not refused.
        Err(e) => Err(riptide::Error::Replication(e)),
    }
}
