//! [`RaftReplicator`]: the engine's [`Replicator`] for a partition whose writes go through
//! its Raft group. A write set is proposed with `client_write`; the engine's handle completes
//! when openraft answers, which it does for a committed entry once the local state machine
//! has applied it.
//!
//! Invariants (what each outcome means to the client):
//! - `Ok`: the write set is in a majority's log and applied here.
//! - [`riptide::Error::NotLeader`]: it was never in this node's log, or was removed from it as
//!   a conflicting uncommitted entry (openraft answers `ForwardToLeader` in both cases only):
//!   it did not commit and never will.
//! - [`riptide::Error::Replication`]: anything else, including no answer within the write
//!   timeout: the outcome is unknown (the entry may still commit).

use crate::types::{TypeConfig, WriteOp, WriteSet};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use riptide::replication::{ReplicatedWrites, ReplicationDone, Replicator};
use std::time::Duration;

type NodeId = u64;

/// Proposes the engine's writes to a Raft group.
pub struct RaftReplicator {
    raft: Raft<TypeConfig>,
    runtime: tokio::runtime::Handle,
    write_timeout: Duration,
}

impl RaftReplicator {
    /// Proposes through `raft`, on `runtime`; a write not answered within `write_timeout`
    /// fails with an unknown outcome.
    pub fn new(raft: Raft<TypeConfig>, runtime: tokio::runtime::Handle, write_timeout: Duration) -> Self {
        RaftReplicator {
            raft,
            runtime,
            write_timeout,
        }
    }
}

impl Replicator for RaftReplicator {
    fn replicate(&self, writes: ReplicatedWrites, done: ReplicationDone) {
        let set = WriteSet {
            ops: writes.ops.into_iter().map(WriteOp::from).collect(),
        };
        if let Err(reason) = set.validate() {
            return done(Err(riptide::Error::InvalidOption {
                option: "write set",
                reason,
            }));
        }
        let raft = self.raft.clone();
        let timeout = self.write_timeout;
        self.runtime.spawn(async move {
            let outcome = match tokio::time::timeout(timeout, raft.client_write(set)).await {
                Ok(answer) => outcome(answer),
                Err(_) => Err(riptide::Error::Replication(format!(
                    "no answer from the Raft group within {timeout:?}"
                ))),
            };
            done(outcome);
        });
    }
}

type WriteAnswer = Result<
    openraft::raft::ClientWriteResponse<TypeConfig>,
    RaftError<NodeId, ClientWriteError<NodeId, openraft::BasicNode>>,
>;

/// The engine's view of openraft's answer (see the module header).
fn outcome(answer: WriteAnswer) -> riptide::Result<()> {
    match answer {
        Ok(reply) => match reply.data.refused {
            None => Ok(()),
            // Validated above, so only a replica disagreeing with this build's limits gets here.
            Some(reason) => Err(riptide::Error::InvalidOption {
                option: "write set",
                reason: format!("refused by every replica: {reason}"),
            }),
        },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(riptide::Error::NotLeader {
            leader: f.leader_id.map(|id| match f.leader_node {
                Some(node) => format!("the leader is node {id} at {}", node.addr),
                None => format!("the leader is node {id}"),
            }),
        }),
        Err(e) => Err(riptide::Error::Replication(e.to_string())),
    }
}
