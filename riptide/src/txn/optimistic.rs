//! Commit-time validation of optimistic transactions (X-DB's OCC, seed 004 §2.2.3).
//!
//! Invariants:
//! - Every key an optimistic transaction wrote, read for update, or (with `validate_reads`)
//!   read is *tracked* with the LSN it was first used at (the snapshot under snapshot
//!   isolation; the visible LSN of that moment under read committed).
//! - At commit, the tracked keys are locked in (table, key) order — the same global order for
//!   every optimistic commit, so they never deadlock each other — and only then checked: the
//!   newest version of each must be at or below its tracked LSN. The locks stay held until the
//!   commit batch is visible, so a commit validating after this one sees this one's versions
//!   (validation and write are atomic with respect to other transactional commits), and a
//!   conflict leaves nothing written.
//! - A read-only snapshot-isolation transaction needs no validation: its reads are one snapshot.

use super::{Isolation, Txn};
use crate::error::Result;
use crate::key::Lsn;

impl Txn {
    /// Locks and checks every tracked key; see the module header.
    pub(super) fn validate(&mut self) -> Result<()> {
        if self.buffer.keys() == 0 && self.opts.isolation == Isolation::Snapshot {
            return Ok(());
        }
        let mut keys: Vec<(u32, Vec<u8>, Lsn)> =
            self.tracked.iter().map(|((t, k), lsn)| (*t, k.clone(), *lsn)).collect();
        keys.sort_unstable();
        for (id, key, _) in &keys {
            let Some(table) = self.tables.get(id).cloned() else {
                continue;
            };
            self.lock(&table, *id, key)?;
        }
        for (id, key, since) in &keys {
            let Some(table) = self.tables.get(id) else {
                continue;
            };
            self.check_unchanged(table, key, *since)?;
        }
        Ok(())
    }
}
