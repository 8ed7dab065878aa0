//! The gate between a snapshot being installed and the log being purged behind it.
//!
//! openraft purges a follower's log up to a snapshot as soon as it accepts the snapshot, while
//! the state machine installs it in another task. A crash between the two would leave the log
//! purged in front of an older applied state, with the entries in between gone from both. The
//! log store of a partition opened with [`crate::open_partition`] therefore waits, before it
//! purges, for an install that began (a snapshot being received) to end.
//!
//! Invariants: `begin` is called when a snapshot starts arriving, `end` when its install ended
//! (installed durably, or failed); a purge waits while one is pending, but never longer than
//! [`MAX_WAIT`] (a transfer the leader abandoned leaves the gate pending until the next one).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Longest a purge waits for a pending install.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Shared by the log store and the state machine of one partition.
#[derive(Clone, Default, Debug)]
pub struct InstallGate {
    pending: Arc<Mutex<Option<Instant>>>,
    ended: Arc<Notify>,
}

impl InstallGate {
    /// A snapshot started arriving.
    pub(crate) fn begin(&self) {
        *self.pending.lock() = Some(Instant::now());
    }

    /// The install of the snapshot ended (durably installed, or failed).
    pub(crate) fn end(&self) {
        *self.pending.lock() = None;
        self.ended.notify_waiters();
    }

    /// True while an install is pending.
    pub fn pending(&self) -> bool {
        self.pending.lock().is_some()
    }

    /// Waits until no install is pending, or [`MAX_WAIT`] passed.
    pub(crate) async fn wait_for_install(&self) {
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so an `end` between the look and the wait is not missed.
            ended.as_mut().enable();
            if !self.pending() {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }
}
