//! Cluster administration over the nodes' own authenticated transport (`riptide cluster
//! status/init/add-node/remove-node/transfer-leader`): an [`AdminRequest`] frame after the
//! handshake, answered by the node's Raft with an [`AdminReply`] or an error text.
//!
//! Invariants:
//! - An administrator proves the cluster's secret exactly as a node does (it says node id 0,
//!   which no member may have); nothing is answered before.
//! - Membership changes go through openraft (joint consensus): adding a node first makes it a
//!   learner and waits until it has caught up, then makes it a voter; removing one is one
//!   change. On a node that does not lead, they fail with [`AdminError::NotLeader`], naming the
//!   leader, and change nothing.

use super::{read_frame, write_frame, ClusterAuth, Request, Response, TransportError};
use crate::types::TypeConfig;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

type NodeId = u64;

/// Heartbeats turned off by [`AdminRequest::Heartbeats`] come back on by themselves after this.
pub const HEARTBEATS_OFF_AT_MOST: Duration = Duration::from_secs(15);

/// What an administrator asks a node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum AdminRequest {
    /// The node's Raft figures and the membership it knows.
    Status,
    /// Form the group with these members (id → Raft address) if this node's log is empty.
    Initialize(BTreeMap<NodeId, String>),
    /// Add node `id` at `addr` as a voter (on the leader).
    AddNode { id: NodeId, addr: String },
    /// Remove node `id` from the voters (on the leader).
    RemoveNode { id: NodeId },
    /// Stand for election now (to move the leadership to this node).
    Elect,
    /// Turn this node's leader heartbeats on or off (off lets the followers' leader leases
    /// run out, so that another node can win an election: openraft 0.9 has no leadership
    /// transfer of its own); off for [`HEARTBEATS_OFF_AT_MOST`] at most.
    Heartbeats(bool),
    /// Refuse (true) or take again (false) writes and read barriers on this node, so that
    /// during a transfer no append renews the followers' leader leases; refused for
    /// [`HEARTBEATS_OFF_AT_MOST`] at most. (Appended: protocol version 1 reads as before.)
    PauseWrites(bool),
    /// Turn this node's elections on or off (off: a follower whose leader lease ran out does
    /// not stand, so that only the transfer's target does); off for
    /// [`HEARTBEATS_OFF_AT_MOST`] at most.
    Elections(bool),
}

/// One node's view of its group.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeStatus {
    pub id: NodeId,
    /// Leader, Follower, Candidate, Learner or Shutdown.
    pub state: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// Voters and their Raft addresses.
    pub voters: BTreeMap<NodeId, String>,
    /// Learners (catching up, not voting) and their addresses.
    pub learners: BTreeMap<NodeId, String>,
    /// On the leader: each follower's last matched index.
    pub matched: BTreeMap<NodeId, Option<u64>>,
}

/// A node's answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum AdminReply {
    Status(NodeStatus),
    /// `Initialize`: whether this call formed the group (false: it was already formed).
    Initialized(bool),
    /// A membership change or election request was carried out.
    Done,
}

/// Why an admin call failed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// Only the leader changes the membership; it is named when known.
    #[error("not the leader; {}", match (leader, leader_addr) {
        (Some(id), Some(addr)) => format!("the leader is node {id} at {addr}"),
        (Some(id), None) => format!("the leader is node {id}"),
        _ => "no leader is known".to_string(),
    })]
    NotLeader {
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// The request was refused or failed.
    #[error("{0}")]
    Failed(String),
    /// The node could not be reached or refused the handshake.
    #[error("transport: {0}")]
    Transport(String),
}

fn not_leader(e: &ClientWriteError<NodeId, BasicNode>) -> Option<AdminError> {
    match e {
        ClientWriteError::ForwardToLeader(f) => Some(AdminError::NotLeader {
            leader: f.leader_id,
            leader_addr: f.leader_node.as_ref().map(|n| n.addr.clone()),
        }),
        _ => None,
    }
}

fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> AdminError {
    match &e {
        RaftError::APIError(api) => not_leader(api).unwrap_or_else(|| AdminError::Failed(e.to_string())),
        RaftError::Fatal(_) => AdminError::Failed(e.to_string()),
    }
}

/// The status of `raft`'s node.
pub fn status(raft: &Raft<TypeConfig>) -> NodeStatus {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
    let mut voters = BTreeMap::new();
    let mut learners = BTreeMap::new();
    for (id, node) in membership.nodes() {
        if voter_ids.contains(id) {
            voters.insert(*id, node.addr.clone());
        } else {
            learners.insert(*id, node.addr.clone());
        }
    }
    NodeStatus {
        id: m.id,
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        applied_index: m.last_applied.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        voters,
        learners,
        matched: m
            .replication
            .map(|r| r.into_iter().map(|(id, l)| (id, l.map(|l| l.index))).collect())
            .unwrap_or_default(),
    }
}

/// Carries out `request` on this node.
pub async fn handle(
    raft: &Raft<TypeConfig>,
    pause: &crate::replicator::WritePause,
    request: AdminRequest,
) -> Result<AdminReply, AdminError> {
    match request {
        AdminRequest::Status => Ok(AdminReply::Status(status(raft))),
        AdminRequest::Initialize(members) => {
            if members.is_empty() || members.contains_key(&0) {
                return Err(AdminError::Failed("members must be named, with ids from 1".into()));
            }
            let nodes: BTreeMap<NodeId, BasicNode> =
                members.into_iter().map(|(id, a)| (id, BasicNode::new(a))).collect();
            match raft.initialize(nodes).await {
                Ok(()) => Ok(AdminReply::Initialized(true)),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(AdminReply::Initialized(false)),
                Err(e) => Err(AdminError::Failed(e.to_string())),
            }
        }
        AdminRequest::AddNode { id, addr } => {
            if id == 0 {
                return Err(AdminError::Failed("node ids start at 1".into()));
            }
            // A learner first, caught up (blocking), then a voter: the group never counts on
            // a member that has nothing yet.
            raft.add_learner(id, BasicNode::new(addr), true)
                .await
                .map_err(write_error)?;
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
                .map_err(write_error)?;
            Ok(AdminReply::Done)
        }
        AdminRequest::RemoveNode { id } => {
            raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
                .await
                .map_err(write_error)?;
            Ok(AdminReply::Done)
        }
        AdminRequest::Heartbeats(on) => {
            switch(raft, on, |raft, on| raft.runtime_config().heartbeat(on));
            Ok(AdminReply::Done)
        }
        AdminRequest::PauseWrites(on) => {
            if on {
                pause.pause(HEARTBEATS_OFF_AT_MOST);
            } else {
                pause.resume();
            }
            Ok(AdminReply::Done)
        }
        AdminRequest::Elections(on) => {
            switch(raft, on, |raft, on| raft.runtime_config().elect(on));
            Ok(AdminReply::Done)
        }
        AdminRequest::Elect => {
            raft.trigger()
                .elect()
                .await
                .map_err(|e| AdminError::Failed(e.to_string()))?;
            Ok(AdminReply::Done)
        }
    }
}

/// Turns a runtime switch of `raft` on or off with `set`; one turned off comes back on by
/// itself after [`HEARTBEATS_OFF_AT_MOST`], so it is never left off by an administrator that
/// went away mid-transfer.
fn switch(raft: &Raft<TypeConfig>, on: bool, set: fn(&Raft<TypeConfig>, bool)) {
    set(raft, on);
    if !on {
        let raft = raft.clone();
        tokio::spawn(async move {
            tokio::time::sleep(HEARTBEATS_OFF_AT_MOST).await;
            set(&raft, true);
        });
    }
}

/// Sends `request` to the node at `addr` as an administrator of `auth`'s cluster, waiting at
/// most `timeout` in all.
pub async fn call(
    addr: &str,
    auth: &ClusterAuth,
    request: AdminRequest,
    timeout: Duration,
) -> Result<AdminReply, AdminError> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        let mut stream = auth.open(tcp, addr, 0).await?;
        write_frame(&mut stream, &Request::Admin(request)).await?;
        read_frame::<Response>(&mut stream).await
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(AdminError::Transport(format!(
            "no answer from {addr} within {timeout:?}"
        ))),
        Ok(Err(e)) => Err(AdminError::Transport(format!("{addr}: {e}"))),
        Ok(Ok(Response::Admin(answer))) => answer,
        Ok(Ok(other)) => Err(AdminError::Transport(format!("{addr} answered {other:?}"))),
    }
}

impl From<TransportError> for AdminError {
    fn from(e: TransportError) -> Self {
        AdminError::Transport(e.to_string())
    }
}
