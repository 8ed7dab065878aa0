//! The openraft type configuration of a Riptide partition and its application data: a
//! committed transaction's write set, named by table so that every replica applies it to its
//! own database (table ids differ between replicas; names do not).

use serde::{Deserialize, Serialize};

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
    /// Creates `table` (with the database's options) if it does not exist; alone in its set.
    CreateTable { table: String },
    /// Drops `table` if it exists; alone in its set.
    DropTable { table: String },
    /// Not a write: the set commits only in Raft term `term` (the term in which the writer's
    /// reads were confirmed); committed in any other, every replica refuses the whole set
    /// ([`FENCE_REFUSAL`]). Added after the other ops, so older logs decode unchanged.
    Fence { term: u64 },
    /// Not a write: two-phase commit's first step. The set's writes are stored under this
    /// transaction id ([`crate::PREPARED_TABLE`]) and applied to no table until a
    /// [`WriteOp::CommitPrepared`] of the same id. Refused when the id is prepared already.
    /// Added after the ops above (so are the next two).
    Prepare { xid: Vec<u8> },
    /// The decision to commit the transaction prepared under this id: its stored writes are
    /// applied and its record deleted, in one atomic write. Alone in its set (but a fence);
    /// refused ([`UNKNOWN_XID_REFUSAL`]) when nothing is prepared under the id.
    CommitPrepared { xid: Vec<u8> },
    /// The decision to roll back the transaction prepared under this id: its record is
    /// deleted. Alone in its set (but a fence); refused like [`WriteOp::CommitPrepared`].
    RollbackPrepared { xid: Vec<u8> },
    /// Not a write: the write sets of several transactions committed by one log entry (the
    /// leader's group commit across the Raft log), applied in order, each accepted or refused
    /// on its own as if it were the entry's set. Alone in its set; its sets hold only puts,
    /// deletes and a fence. Added after the ops above, so older logs decode unchanged.
    Group { sets: Vec<WriteSet> },
}

/// How a write set refused by its [`WriteOp::Fence`] is told apart (the start of
/// [`Applied::refused`]).
pub const FENCE_REFUSAL: &str = "fenced: proposed for term";

/// How a decision for an id with nothing prepared is told apart (the start of
/// [`Applied::refused`]).
pub const UNKNOWN_XID_REFUSAL: &str = "no transaction is prepared under";

/// How a prepare under an id that is prepared already is told apart (the start of
/// [`Applied::refused`]).
pub const XID_EXISTS_REFUSAL: &str = "a transaction is prepared already under";

impl WriteOp {
    /// The table the write goes to (none for a fence).
    pub fn table(&self) -> Option<&str> {
        match self {
            WriteOp::Put { table, .. }
            | WriteOp::Delete { table, .. }
            | WriteOp::CreateTable { table }
            | WriteOp::DropTable { table } => Some(table),
            WriteOp::Fence { .. }
            | WriteOp::Prepare { .. }
            | WriteOp::CommitPrepared { .. }
            | WriteOp::RollbackPrepared { .. }
            | WriteOp::Group { .. } => None,
        }
    }

    /// The two-phase commit step this op marks, if any.
    pub fn phase_xid(&self) -> Option<&[u8]> {
        match self {
            WriteOp::Prepare { xid } | WriteOp::CommitPrepared { xid } | WriteOp::RollbackPrepared { xid } => Some(xid),
            _ => None,
        }
    }

    pub(crate) fn is_ddl(&self) -> bool {
        matches!(self, WriteOp::CreateTable { .. } | WriteOp::DropTable { .. })
    }

    /// True for the ops a set in a [`WriteOp::Group`] may hold: puts, deletes and a fence.
    pub(crate) fn is_groupable(&self) -> bool {
        matches!(
            self,
            WriteOp::Put { .. } | WriteOp::Delete { .. } | WriteOp::Fence { .. }
        )
    }
}

impl From<riptide::replication::ReplicatedOp> for WriteOp {
    fn from(op: riptide::replication::ReplicatedOp) -> Self {
        use riptide::replication::ReplicatedOp as R;
        match op {
            R::Put { table, key, value } => WriteOp::Put { table, key, value },
            R::Delete { table, key } => WriteOp::Delete { table, key },
            R::CreateTable { name } => WriteOp::CreateTable { table: name },
            R::DropTable { name } => WriteOp::DropTable { table: name },
        }
    }
}

/// The writes of one committed transaction, applied atomically on every replica, in the
/// order of the Raft log (which is the leader's commit order).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteSet {
    pub ops: Vec<WriteOp>,
}

/// Largest write set, counting each op's table name, key, value and [`OP_OVERHEAD_BYTES`]: far
/// below the engine's batch limit (256 MiB), so an entry always fits one engine write, and
/// below the transport's frame limit.
pub const MAX_WRITE_SET_BYTES: usize = 64 << 20;

/// What [`WriteSet::validate`] counts for each op beyond its name, key and value: more than the
/// engine's own per-op encoding (a tag, a table id and varint lengths) and the set's postcard
/// encoding take.
pub const OP_OVERHEAD_BYTES: usize = 32;

impl WriteSet {
    /// The bytes the set weighs as [`WriteSet::validate`] counts them: each op's table name,
    /// key and value and [`OP_OVERHEAD_BYTES`] (at least its encoded size).
    pub fn weight(&self) -> usize {
        self.ops
            .iter()
            .map(|op| {
                let (table, key, value) = match op {
                    WriteOp::Group { sets } => (0, 0, sets.iter().map(WriteSet::weight).fold(0, usize::saturating_add)),
                    WriteOp::Put { table, key, value } => (table.len(), key.len(), value.len()),
                    WriteOp::Delete { table, key } => (table.len(), key.len(), 0),
                    other => (
                        other.table().map_or(0, str::len),
                        other.phase_xid().map_or(0, <[u8]>::len),
                        0,
                    ),
                };
                OP_OVERHEAD_BYTES + table + key + value
            })
            .fold(0usize, usize::saturating_add)
    }

    /// The sets of a group ([`WriteOp::Group`], alone in this set), if this set is one.
    pub fn group(&self) -> Option<&[WriteSet]> {
        match self.ops.as_slice() {
            [WriteOp::Group { sets }] => Some(sets),
            _ => None,
        }
    }

    /// Whether this set may go in a [`WriteOp::Group`]: it holds only puts, deletes and a
    /// fence.
    pub fn is_groupable(&self) -> bool {
        self.ops.iter().all(WriteOp::is_groupable)
    }

    /// Why a replica committing this set under `term` must refuse it: its fence names another
    /// term.
    pub fn fenced_out(&self, term: u64) -> Option<String> {
        self.ops.iter().find_map(|op| match op {
            WriteOp::Fence { term: fence } if *fence != term => {
                Some(format!("{FENCE_REFUSAL} {fence}, committed in term {term}"))
            }
            _ => None,
        })
    }

    /// Why no replica could apply this write set, if so: a table name that is empty, too long
    /// or the cluster layer's own, a key or value over the engine's limits, or a set over
    /// [`MAX_WRITE_SET_BYTES`]. A leader should check this before proposing (the server's
    /// cluster mode will); a set that fails it anyway is refused by every replica alike (see
    /// [`Applied::refused`]).
    /// A group is checked for its shape and its total weight only: each of its sets is
    /// checked on its own when it is applied.
    pub fn validate(&self) -> Result<(), String> {
        if self.ops.iter().any(|op| matches!(op, WriteOp::Group { .. })) {
            let Some(sets) = self.group() else {
                return Err("a group of write sets must be alone in its write set".into());
            };
            if !sets.iter().all(WriteSet::is_groupable) {
                return Err("a set in a group holds only puts, deletes and a fence".into());
            }
            let bytes = self.weight();
            if bytes > MAX_WRITE_SET_BYTES {
                return Err(format!("group of {bytes} bytes (at most {MAX_WRITE_SET_BYTES})"));
            }
            return Ok(());
        }
        if self.ops.len() > 1 && self.ops.iter().any(WriteOp::is_ddl) {
            return Err("a table creation or drop must be alone in its write set".into());
        }
        if self.ops.iter().filter(|op| matches!(op, WriteOp::Fence { .. })).count() > 1 {
            return Err("more than one fence in a write set".into());
        }
        let phases = self.ops.iter().filter(|op| op.phase_xid().is_some()).count();
        if phases > 1 {
            return Err("more than one two-phase commit step in a write set".into());
        }
        if let Some(xid) = self.ops.iter().find_map(WriteOp::phase_xid) {
            if xid.is_empty() || xid.len() > riptide::MAX_XID_BYTES {
                return Err(format!("transaction id of {} bytes", xid.len()));
            }
            if self.ops.iter().any(WriteOp::is_ddl) {
                return Err("a table creation or drop cannot be prepared".into());
            }
            let decision = self
                .ops
                .iter()
                .any(|op| matches!(op, WriteOp::CommitPrepared { .. } | WriteOp::RollbackPrepared { .. }));
            if decision && self.ops.iter().any(|op| op.table().is_some()) {
                return Err("a decision for a prepared transaction carries no writes".into());
            }
        }
        let mut bytes = 0usize;
        for op in &self.ops {
            let Some(table) = op.table() else {
                bytes = bytes.saturating_add(OP_OVERHEAD_BYTES);
                continue;
            };
            if table.is_empty() || table.len() > riptide::MAX_TABLE_NAME {
                return Err(format!("table name of {} bytes", table.len()));
            }
            if table.starts_with(crate::RESERVED_PREFIX) || table.starts_with(crate::XA_PREFIX) {
                return Err(format!("table {table:?} belongs to the cluster layer"));
            }
            if table == riptide::DEFAULT_TABLE && matches!(op, WriteOp::DropTable { .. }) {
                return Err("the default table cannot be dropped".into());
            }
            let (key, value) = match op {
                WriteOp::Put { key, value, .. } => (&key[..], value.len()),
                WriteOp::Delete { key, .. } => (&key[..], 0),
                _ => (&[][..], 0),
            };
            if key.len() > riptide::MAX_KEY_SIZE {
                return Err(format!(
                    "key of {} bytes (at most {})",
                    key.len(),
                    riptide::MAX_KEY_SIZE
                ));
            }
            if value > riptide::MAX_VALUE_SIZE {
                return Err(format!("value of {value} bytes (at most {})", riptide::MAX_VALUE_SIZE));
            }
            bytes = bytes.saturating_add(table.len() + key.len() + value + OP_OVERHEAD_BYTES);
        }
        if bytes > MAX_WRITE_SET_BYTES {
            return Err(format!("write set of {bytes} bytes (at most {MAX_WRITE_SET_BYTES})"));
        }
        Ok(())
    }
}

/// What applying an entry did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Writes applied (0 for blank and membership entries, and for a refused write set).
    pub writes: u32,
    /// Why the entry's write set was refused, on every replica alike (a committed entry must
    /// not stop the state machine: openraft treats an apply error as fatal).
    pub refused: Option<String>,
    /// For a group ([`WriteOp::Group`]) that was not refused as a whole: what applying each of
    /// its sets did, in order (`writes` is their sum). Empty for any other entry.
    pub sets: Vec<Applied>,
}

openraft::declare_raft_types!(
    /// A Riptide partition's Raft types: write sets in, [`Applied`] out, nodes named by u64,
    /// snapshots as archive files.
    pub TypeConfig:
        D = WriteSet,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::snapshot::SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);
