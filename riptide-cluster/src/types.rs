//! The openraft type configuration of a Riptide partition and its application data: a
//! committed transaction's write set, named by table so that every replica applies it to its
//! own database (table ids differ between replicas; names do not).

use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// One write of a write set.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Sets `key` of `table` to `value`.
    Put {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Deletes `key` of `table`.
    Delete { table: String, key: Vec<u8> },
}

impl WriteOp {
    /// The table the write goes to.
    pub fn table(&self) -> &str {
        match self {
            WriteOp::Put { table, .. } | WriteOp::Delete { table, .. } => table,
        }
    }
}

/// The writes of one committed transaction, applied atomically on every replica, in the
/// order of the Raft log (which is the leader's commit order).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteSet {
    pub ops: Vec<WriteOp>,
}

/// What applying an entry did: the writes it applied (0 for blank and membership entries).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    pub writes: u32,
}

openraft::declare_raft_types!(
    /// A Riptide partition's Raft types: write sets in, [`Applied`] out, nodes named by u64,
    /// snapshots as bytes.
    pub TypeConfig:
        D = WriteSet,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);
