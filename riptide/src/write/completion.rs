//! [`Completion`] and [`WriteHandle`]: how a writer learns that its batch committed.
//!
//! Invariants: a completion is completed exactly once; a callback runs exactly once, either on
//! the thread that completes the write or, if registered after completion, on the registering
//! thread. An invitation runs at most once, on a thread waiting in [`Completion::wait`], and
//! never after completion (completing drops it; nothing depends on it running).

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

type Callback = Box<dyn FnOnce(Result<()>) + Send>;
/// Work a waiter is invited to do while it waits (inserting batches of its commit group).
pub(crate) type Invitation = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    result: Option<Result<()>>,
    callback: Option<Callback>,
    invitation: Option<Invitation>,
}

/// Shared between a writer and the pipeline.
#[derive(Default)]
pub(crate) struct Completion {
    state: Mutex<State>,
    cond: Condvar,
}

impl Completion {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records the outcome, wakes a waiter and runs the callback (outside the lock).
    pub(crate) fn complete(&self, result: Result<()>) {
        let (callback, _invitation) = {
            let mut st = self.state.lock();
            if st.result.is_some() {
                return;
            }
            let cb = st.callback.take();
            st.result = Some(result.clone());
            self.cond.notify_all();
            // Dropped outside the lock: it may hold the last reference to a commit group.
            (cb, st.invitation.take())
        };
        if let Some(cb) = callback {
            cb(result);
        }
    }

    /// Offers `work` to the thread waiting (or about to wait) on this completion, waking it.
    /// Returns false, dropping `work`, if the write already completed.
    pub(crate) fn invite(&self, work: Invitation) -> bool {
        let mut st = self.state.lock();
        if st.result.is_some() {
            return false;
        }
        st.invitation = Some(work);
        self.cond.notify_one();
        true
    }

    /// Blocks until completed, doing the work it is invited to meanwhile.
    pub(crate) fn wait(&self) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = &st.result {
                return r.clone();
            }
            if let Some(work) = st.invitation.take() {
                parking_lot::MutexGuard::unlocked(&mut st, work);
                continue;
            }
            self.cond.wait(&mut st);
        }
    }

    fn is_done(&self) -> bool {
        self.state.lock().result.is_some()
    }

    fn set_callback(&self, cb: Callback) {
        let done = {
            let mut st = self.state.lock();
            match &st.result {
                Some(r) => Some(r.clone()),
                None => {
                    st.callback = Some(cb);
                    return;
                }
            }
        };
        if let Some(r) = done {
            cb(r);
        }
    }
}

/// The handle of an asynchronous write ([`crate::Db::write_async`]).
///
/// The write is acknowledged (and, with `sync`, durable) when the handle completes. Dropping the
/// handle does not cancel the write.
pub struct WriteHandle {
    pub(crate) completion: Arc<Completion>,
}

impl std::fmt::Debug for WriteHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteHandle").field("done", &self.is_done()).finish()
    }
}

impl WriteHandle {
    /// Blocks until the batch has committed; returns its outcome.
    pub fn wait(self) -> Result<()> {
        self.completion.wait()
    }

    /// True once the batch has committed or failed.
    pub fn is_done(&self) -> bool {
        self.completion.is_done()
    }

    /// Runs `f` with the outcome when the batch commits (at once, on this thread, if it already
    /// has). `f` runs on a pipeline thread: keep it short and never block in it.
    pub fn on_complete(self, f: impl FnOnce(Result<()>) + Send + 'static) {
        self.completion.set_callback(Box::new(f));
    }

    /// A handle that is already failed (used when a write is refused before it is queued).
    pub(crate) fn failed(err: Error) -> Self {
        let completion = Completion::new();
        completion.complete(Err(err));
        WriteHandle { completion }
    }
}
