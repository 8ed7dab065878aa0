//! Helpers shared by the cluster tests.

use openraft::Raft;
use riptide_cluster::{TypeConfig, WriteOp, WriteSet};
use std::time::Duration;

/// A write set putting `key` (big-endian) into table `kv`.
pub fn put(key: u32) -> WriteSet {
    WriteSet {
        ops: vec![WriteOp::Put {
            table: "kv".into(),
            key: key.to_be_bytes().to_vec(),
            value: format!("v{key}").into_bytes(),
        }],
    }
}

/// Waits (at most 20 s) until `raft` applied at least `index`.
pub async fn applied(raft: &Raft<TypeConfig>, index: u64) {
    raft.wait(Some(Duration::from_secs(20)))
        .metrics(|m| m.last_applied.map(|l| l.index) >= Some(index), "applied")
        .await
        .unwrap();
}
