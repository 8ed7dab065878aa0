//! Riptide's cluster layer (issue 24, seed 004's X-DB): a table's partitions replicated by
//! Raft, through openraft 0.9, over Riptide engines.
//!
//! Built so far: one replicated partition (no router over several yet). A partition is one
//! Riptide database (its own directory, redo log and extents: partitions share nothing), which
//! holds, next to the partition's tables:
//! - the Raft log and vote, in the sub-tables [`LOG_TABLE`] and [`RAFT_META_TABLE`]
//!   ([`log_store`]): appended, truncated and purged with synced writes, so nothing is
//!   acknowledged to the leader before it is durable;
//! - the state machine's applied log id and membership, in [`STATE_TABLE`], written in the
//!   same atomic batch as each applied write set ([`state_machine`]), so a crash never leaves
//!   data applied without its index or the other way round.
//!
//! Around it: the node-to-node transport ([`transport`]: Raft RPCs and administration over
//! TCP, after a handshake in which both ends prove they hold the cluster's shared secret); the
//! engine's replicator ([`replicator`]), through which every write of the database goes
//! through the group; a node assembled from these ([`node`]); and a linearizability checker
//! for the fault tests ([`linearizability`]).
//!
//! Invariants:
//! - Names starting with [`RESERVED_PREFIX`] or [`XA_PREFIX`] belong to the cluster layer; a
//!   write set may not touch them, and snapshots carry every table but the first kind.
//! - Every on-disk value is a postcard encoding of an openraft or [`types`] value, behind a
//!   one-byte format version ([`codec`]); a value that does not decode is an error, never
//!   skipped.

// openraft's storage traits return its `StorageError` (over 200 bytes); the helpers that feed
// them return it too rather than boxing and unboxing at every call.
#![allow(clippy::result_large_err)]

pub mod codec;
mod engine;
pub mod inflight;
pub mod linearizability;
pub mod log_store;
pub mod node;
pub mod proposer;
pub mod read_index;
pub mod replicator;
pub mod snapshot;
pub mod state_machine;
pub mod transport;
pub mod types;

pub use log_store::LogStore;
pub use node::{NodeConfig, NodeError, PartitionNode};
pub use replicator::RaftReplicator;
pub use state_machine::{is_prepared, lock_prepared_rows, prepared_write_sets};
pub use state_machine::{SnapshotError, StateMachine};
/// Cluster administration (`riptide cluster`), carried by the transport.
pub use transport::admin;
pub use types::{Applied, TypeConfig, WriteOp, WriteSet};

/// Table names starting with this belong to the cluster layer.
pub const RESERVED_PREFIX: &str = "__raft.";
/// The Raft log: key = index (8 bytes, big-endian), value = the encoded entry.
pub const LOG_TABLE: &str = "__raft.log";
/// The vote and the last purged log id.
pub const RAFT_META_TABLE: &str = "__raft.meta";
/// The state machine's applied log id and membership.
pub const STATE_TABLE: &str = "__raft.state";
/// Names starting with this belong to the cluster layer's two-phase commit; a write set may
/// not touch them, and snapshots carry them (unlike [`RESERVED_PREFIX`]'s).
pub const XA_PREFIX: &str = "__xa.";
/// Prepared transactions: key = transaction id, value = the encoded [`WriteSet`] of its
/// writes (puts and deletes only).
pub const PREPARED_TABLE: &str = "__xa.prepared";

/// The log store and state machine of the partition database `db`, for a Raft node.
pub fn open_partition(db: &riptide::Db) -> Result<(LogStore, StateMachine), SnapshotError> {
    let log = LogStore::open(db)?;
    let sm = StateMachine::open(db)?.with_log_store(log.clone());
    Ok((log, sm))
}
