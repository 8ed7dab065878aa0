//! [`Completion`] and [`WriteHandle`]: how a writer learns that its batch committed.
//!
//! Invariants: a completion is completed exactly once; a callback runs exactly once, either on
//! the thread that completes the write or, if registered after completion, on the registering
//! thread.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

type Callback = Box<dyn FnOnce(Result<()>) + Send>;

#[derive(Default)]
struct State {
    result: Option<Result<()>>,
    callback: Option<Callback>,
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
        let callback = {
            let mut st = self.state.lock();
            if st.result.is_some() {
                return;
            }
            let cb = st.callback.take();
            st.result = Some(result.clone());
            self.cond.notify_all();
            cb
        };
        if let Some(cb) = callback {
            cb(result);
        }
    }

    /// Blocks until completed.
    pub(crate) fn wait(&self) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = &st.result {
                return r.clone();
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
