//! A partition leader's read index: openraft's `ensure_linearizable`, and what it leaves out
//! for a leader that restarted without losing its term.
//!
//! openraft 0.9 restores a node whose stored vote is its own committed one as the leader of
//! that same term at once (`Engine::startup`), with no new blank entry. Its read index is then
//! the larger of its term's first entry and the commit index it knows, and both can be below
//! entries that its previous run appended in the term (committed, and even acknowledged, or
//! not yet). Those entries are applied later, under transactions of the new run that locked
//! and read their rows before: such a transaction then writes a value computed without the
//! entry's, and the entry's write is lost (the fault tests' bank saw money appear). An entry
//! the new run proposes itself is safe: it was made under its writer's row locks, after the
//! reads it depends on.
//!
//! Invariants:
//! - [`RestartFloor`] names a (term, index) only when the vote stored at start was this node's
//!   committed vote, the index being the last one its log held then; a node that starts as a
//!   follower has none (a later election appends a blank entry past its whole log).
//! - [`read_index`] succeeds only once this node confirmed with a majority that it leads in
//!   some term, and applied every entry committed before the call (openraft's read log id)
//!   and, when that term is the floor's, every entry up to the floor. Once the floor is
//!   applied, or leadership is confirmed in a later term, the floor is cleared for good (terms
//!   only grow). Every wait is bounded: openraft's own `ensure_linearizable` waits for the apply
//!   without a limit.
//! - A node restored as leader proposes an empty write set at start ([`crate::PartitionNode`]):
//!   a crash between saving its vote and logging its term's blank entry leaves openraft
//!   waiting for a blank entry it never proposes, and the read log id (that entry's index)
//!   could never be applied.

use crate::{LogStore, TypeConfig};
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{LogId, Raft, StorageError};
use parking_lot::Mutex;
use std::time::Duration;

type NodeId = u64;

/// The entries a leader restarted in its own term must apply before it answers a read (see
/// the module header).
#[derive(Debug, Default)]
pub struct RestartFloor {
    /// (term, last log index at start); `None` once cleared or when not restarted as leader.
    floor: Mutex<Option<(u64, u64)>>,
}

impl RestartFloor {
    /// The floor of node `id` starting over `log` (read before the Raft node starts).
    pub async fn of(log: &LogStore, id: NodeId) -> Result<Self, StorageError<NodeId>> {
        let mut log = log.clone();
        let vote = log.read_vote().await?;
        let last = log.get_log_state().await?.last_log_id;
        let floor = match (vote, last) {
            (Some(v), Some(last)) if v.committed && v.leader_id.node_id == id => Some((v.leader_id.term, last.index)),
            _ => None,
        };
        Ok(RestartFloor {
            floor: Mutex::new(floor),
        })
    }

    /// The floor now, if any: (term, index).
    pub fn get(&self) -> Option<(u64, u64)> {
        *self.floor.lock()
    }

    fn clear(&self) {
        *self.floor.lock() = None;
    }
}

/// Leadership checks tried before a leader that hears too few followers in time gives up:
/// openraft allows each check one heartbeat interval, which a follower busy with a large
/// append or a slow `fdatasync` can miss without being gone.
const LEADERSHIP_CHECK_TRIES: usize = 5;

/// Returns once a read of this replica's engine is linearizable and can be locked on (see the
/// module header), waiting at most `apply_wait` for the apply. Errors are the engine's:
/// [`riptide::Error::NotLeader`] when this node does not lead or lost its majority,
/// [`riptide::Error::Replication`] when the entries to read after were not applied in time.
pub async fn read_index(raft: &Raft<TypeConfig>, floor: &RestartFloor, apply_wait: Duration) -> riptide::Result<()> {
    // The read log id is the larger of the leader's first entry of its term and the commit
    // index, so its term is the term in which the leadership was confirmed (not the current
    // term, which may have moved on since).
    let Some(read) = leadership_check(raft).await? else {
        return Ok(()); // an empty log: nothing to apply
    };
    let confirmed_term = read.leader_id.term;
    let (target, in_floor_term) = match floor.get() {
        Some((term, index)) if term == confirmed_term => (read.index.max(index), true),
        // Leading a later term: that term's blank entry lies past the whole log at start.
        Some(_) => {
            floor.clear();
            (read.index, false)
        }
        None => (read.index, false),
    };
    // Returns at once when the index is applied already.
    if let Err(e) = raft
        .wait(Some(apply_wait))
        .applied_index_at_least(Some(target), "read index")
        .await
    {
        return Err(riptide::Error::Replication(format!(
            "this leader has not applied its log up to index {target} ({e}; after a restart in term \
             {confirmed_term}, it applies the entries its log held first); try again"
        )));
    }
    if in_floor_term {
        floor.clear();
    }
    Ok(())
}

/// One leadership check: openraft's read log id, confirmed with a majority (tried again while
/// too few followers answered in time), its errors as the engine's.
async fn leadership_check(raft: &Raft<TypeConfig>) -> riptide::Result<Option<LogId<NodeId>>> {
    let mut tries = 1;
    let answer = loop {
        match raft.get_read_log_id().await {
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) if tries < LEADERSHIP_CHECK_TRIES => {
                tries += 1;
            }
            other => break other,
        }
    };
    match answer {
        Ok((read, _applied)) => Ok(read),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => Err(crate::replicator::not_leader(
            f.leader_id,
            f.leader_node.as_ref().map(|n| n.addr.as_str()),
        )),
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => Err(riptide::Error::NotLeader {
            leader: Some(format!("this node lost its majority ({q})")),
        }),
        Err(e) => Err(riptide::Error::Replication(e.to_string())),
    }
}
