//! The replication layer's entry points of [`Db`] (see [`crate::replication`]): installing a
//! replicator, the `*_unreplicated` writes that bypass it, and the hand-over of a batch or a
//! DDL op to it.
//!
//! Invariant: with a replicator installed, a write reaches this database's pipeline only
//! through [`Route::Local`] (the replication layer's own writes and its applies).

use super::Db;
use crate::error::{Error, Result};
use crate::options::WriteOptions;
use crate::replication::{Phase, ReplicatedWrites, Replicator};
use crate::write::batch::WriteBatch;
use crate::write::completion::Completion;
use crate::write::pipeline::OnPlaced;
use std::sync::Arc;

/// Whether a write goes to the replicator, when one is installed, or straight to this
/// database's pipeline (the replication layer's own writes and applies).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Route {
    Replicated,
    Local,
}

/// Hands `writes` to `replicator`; the completion finishes with its answer. The placement hook
/// (a commit's lock release) runs when the write is settled: before an `Ok` answer, or, after
/// an early "unknown" answer, once the replicator knows (see `ReplicationDone`).
pub(super) fn replicate(
    replicator: &dyn Replicator,
    writes: ReplicatedWrites,
    on_placed: Option<OnPlaced>,
) -> Arc<Completion> {
    let completion = Completion::new();
    replicator.replicate(
        writes,
        crate::replication::ReplicationDone::new(completion.clone(), on_placed),
    );
    completion
}

/// The replication layer's entry points (see [`crate::replication`]).
impl Db {
    /// Installs the replication layer: from now on writes, commits and table DDL go through
    /// it. Once per instance ([`Error::InvalidOption`] for a second one).
    pub fn set_replicator(&self, replicator: Arc<dyn Replicator>) -> Result<()> {
        self.inner.check_open()?;
        self.inner.replicator.set(replicator).map_err(|_| Error::InvalidOption {
            option: "replicator",
            reason: "a replicator is already installed".into(),
        })
    }

    /// True once a replicator is installed.
    pub fn is_replicated(&self) -> bool {
        self.inner.replicator.get().is_some()
    }

    /// [`Db::write`] straight to this database's pipeline, past any replicator: for the
    /// replication layer's own state and for applying replicated writes.
    pub fn write_unreplicated(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.write_by(batch, opts, Route::Local)
    }

    /// Hands `batch` to the replicator as step `phase` of a commit, with `hook` run once it is
    /// settled as applied, and waits for the answer.
    pub(crate) fn replicate_phase(
        &self,
        batch: &crate::WriteBatch,
        opts: &WriteOptions,
        phase: Phase,
        hook: Option<crate::write::pipeline::OnPlaced>,
    ) -> Result<()> {
        opts.validate()?;
        let replicator = self.inner.replicator.get().ok_or_else(|| Error::InvalidOption {
            option: "replicator",
            reason: "no replicator is installed".into(),
        })?;
        let mut writes = ReplicatedWrites::from_batch(batch, opts.replication_fence);
        writes.phase = phase;
        replicate(replicator.as_ref(), writes, hook).wait()
    }

    /// Hands one DDL op to the replicator and waits for its outcome.
    pub(crate) fn replicate_ddl(&self, op: crate::replication::ReplicatedOp) -> Result<()> {
        let replicator = self.inner.replicator.get().ok_or_else(|| Error::InvalidOption {
            option: "replicator",
            reason: "no replicator is installed".into(),
        })?;
        let writes = ReplicatedWrites {
            ops: vec![op],
            ..Default::default()
        };
        replicate(replicator.as_ref(), writes, None).wait()
    }
}
