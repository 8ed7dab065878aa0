//! [`RaftReplicator`]: the engine's [`Replicator`] for a partition whose writes go through
//! its Raft group. A write set is checked and fenced here, then proposed by the node's
//! [`Proposer`] (alone, or grouped with the sets of other transactions into one entry); the
//! engine's handle completes when openraft answers, which it does for a committed entry once
//! the local state machine has applied it.
//!
//! Invariants (what each outcome means to the client):
//! - `Ok`: the write set is in a majority's log and applied here.
//! - [`riptide::Error::NotLeader`]: the write did not commit and never will: this node did not
//!   believe it led, or the write's fence named another term, so it proposed nothing; or the
//!   write was committed under another term than its fence and every replica refused it.
//! - [`riptide::Error::Replication`]: anything after the proposal but success, `ForwardToLeader`
//!   included (an entry truncated from this log may have been committed by another leader),
//!   and no answer within the write timeout: the outcome is unknown. The write's locks are
//!   held until openraft answers (settled), however late, or until a snapshot installed here
//!   overtakes the write's entry, which openraft then never answers ([`InflightWrites`]).
//! - Every proposed write set but table DDL carries a fence: the writer's (the term of its
//!   reads) or else the term it is proposed in, so an entry that ends up committed under
//!   another term is refused everywhere, and settling a write by the term it was proposed in
//!   is safe.

use crate::inflight::InflightWrites;
use crate::proposer::{Proposal, Proposer};
use crate::types::{TypeConfig, WriteOp, WriteSet};
use openraft::Raft;
use parking_lot::Mutex;
use riptide::replication::{Phase, ReplicatedWrites, ReplicationDone, Replicator};
use std::sync::Arc;
use std::time::Duration;

type NodeId = u64;

/// Writes (and read barriers) refused for a while on this node: during `transfer-leader`, so
/// that no append from the old leader renews the followers' leader leases and the target can
/// win its election. Ends by itself after the time given, if nobody ends it before.
#[derive(Default, Debug)]
pub struct WritePause {
    until: Mutex<Option<std::time::Instant>>,
}

impl WritePause {
    /// Refuses writes from now for `at_most` (or until [`WritePause::resume`]).
    pub fn pause(&self, at_most: Duration) {
        *self.until.lock() = Some(std::time::Instant::now() + at_most);
    }

    /// Takes writes again.
    pub fn resume(&self) {
        *self.until.lock() = None;
    }

    /// True while writes are refused.
    pub fn is_paused(&self) -> bool {
        self.until.lock().is_some_and(|t| std::time::Instant::now() < t)
    }

    /// The refusal of a write or read barrier while paused: definite (nothing was proposed).
    pub fn refusal() -> riptide::Error {
        riptide::Error::NotLeader {
            leader: Some("the leadership is moving to another node (transfer-leader); try again".into()),
        }
    }
}

/// Proposes the engine's writes to a Raft group.
pub struct RaftReplicator {
    raft: Raft<TypeConfig>,
    proposer: Proposer,
    pause: Arc<WritePause>,
}

impl RaftReplicator {
    /// Proposes through `raft`, on `runtime`; a write not answered within `write_timeout`
    /// fails with an unknown outcome. `inflight` is shared with the node's state machine
    /// ([`crate::StateMachine::with_inflight_writes`]). `appends` follows the node's log
    /// store ([`crate::LogStore::appends`]), which paces the grouping of write sets (see
    /// [`crate::proposer`]).
    pub fn new(
        raft: Raft<TypeConfig>,
        runtime: tokio::runtime::Handle,
        write_timeout: Duration,
        inflight: Arc<InflightWrites>,
        appends: Option<tokio::sync::watch::Receiver<u64>>,
    ) -> Self {
        let proposer = Proposer::start(raft.clone(), &runtime, write_timeout, inflight, appends);
        RaftReplicator {
            raft,
            proposer,
            pause: Arc::default(),
        }
    }

    /// What the replicator's proposer did so far (entries and the write sets in them).
    pub fn proposer_stats(&self) -> Arc<crate::proposer::ProposerStats> {
        self.proposer.stats()
    }

    /// The same replicator, refusing writes while `pause` says so.
    pub fn with_write_pause(mut self, pause: Arc<WritePause>) -> Self {
        self.pause = pause;
        self
    }
}

impl Replicator for RaftReplicator {
    fn replicate(&self, writes: ReplicatedWrites, done: ReplicationDone) {
        if self.pause.is_paused() {
            return done.settle(Err(WritePause::refusal()));
        }
        // Only a node that believes it leads proposes; any other refuses before the entry can
        // reach a log, so its refusal is definite.
        let (me, leader, leader_addr, term) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let addr = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()));
            (m.id, m.current_leader, addr, m.current_term)
        };
        if leader != Some(me) {
            return done.settle(Err(not_leader(leader, leader_addr.as_deref())));
        }
        // The writer's fence (the term of its reads), or the term it is proposed in: committed
        // under any other term, the set is refused on every replica. Table DDL stays alone in
        // its set (every replica's rule), unfenced unless its writer fenced it.
        let mut set = WriteSet {
            ops: writes.ops.into_iter().map(WriteOp::from).collect(),
        };
        match writes.phase {
            Phase::OnePhase => {}
            Phase::Prepare(xid) => set.ops.push(WriteOp::Prepare { xid }),
            Phase::CommitPrepared(xid) => set.ops.push(WriteOp::CommitPrepared { xid }),
            Phase::RollbackPrepared(xid) => set.ops.push(WriteOp::RollbackPrepared { xid }),
        }
        let own = (!set.ops.iter().any(WriteOp::is_ddl)).then_some(term);
        if let Some(term) = writes.fence.or(own) {
            set.ops.push(WriteOp::Fence { term });
        }
        if let Err(reason) = set.validate() {
            return done.settle(Err(riptide::Error::InvalidOption {
                option: "write set",
                reason,
            }));
        }
        // Fenced to an earlier term: it would be refused once committed; refuse it now.
        if let Some(reason) = set.fenced_out(term) {
            return done.settle(Err(crate::proposer::fenced(&reason)));
        }
        self.proposer.propose(Proposal { set, term, done });
    }
}

/// [`riptide::Error::NotLeader`], naming the leader (and its Raft address) when known.
pub(crate) fn not_leader(leader: Option<NodeId>, addr: Option<&str>) -> riptide::Error {
    riptide::Error::NotLeader {
        leader: leader.map(|id| match addr {
            Some(addr) => format!("the leader is node {id} at {addr}"),
            None => format!("the leader is node {id}"),
        }),
    }
}
