//! [`FaultyObjectStore`]: wraps an object store and injects faults and latency, for tests of
//! the object tier (as [`crate::fs::FaultFs`] does for the file system).
//!
//! Invariants:
//! - A rule fails a request before it reaches the inner store, so a failed put writes nothing
//!   and a failed delete deletes nothing; except [`FaultyObjectStore::lose_put_answers`], which
//!   lets the put through and then reports it failed (an answer lost on the way back).
//! - Rules are checked in the order added; the first that matches fails the request and, if
//!   it has a count, uses up one of it.
//! - Every request is counted, failed or not.

use super::store::{ObjectError, ObjectErrorKind, ObjectInfo, ObjectResult, ObjectStore};
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A kind of object-store request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectOp {
    /// `put`.
    Put,
    /// `get` and `get_range`.
    Get,
    /// `delete`.
    Delete,
    /// `list`.
    List,
}

const OPS: [ObjectOp; 4] = [ObjectOp::Put, ObjectOp::Get, ObjectOp::Delete, ObjectOp::List];

/// The index of `op` in [`OPS`] (and in the per-kind counters).
fn slot(op: ObjectOp) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(0)
}

#[derive(Debug)]
struct Rule {
    op: ObjectOp,
    /// Failures left; `None` = every matching request fails.
    left: Option<u64>,
    error: ObjectError,
    /// The request reaches the inner store first (a put whose answer is lost).
    after: bool,
}

/// An object store that fails requests on command and may add latency to each.
#[derive(Debug)]
pub struct FaultyObjectStore {
    inner: Arc<dyn ObjectStore>,
    rules: Mutex<Vec<Rule>>,
    latency: Mutex<Duration>,
    requests: [AtomicU64; 4],
    failed: AtomicU64,
    /// Per kind: requests in progress now, and the most there ever were at once.
    in_flight: [AtomicU64; 4],
    max_in_flight: [AtomicU64; 4],
}

impl FaultyObjectStore {
    /// Wraps `inner`; no faults until asked.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyObjectStore {
            inner,
            rules: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            requests: Default::default(),
            failed: AtomicU64::new(0),
            in_flight: Default::default(),
            max_in_flight: Default::default(),
        }
    }

    /// The next `count` requests of kind `op` fail with `kind` (`message` says why).
    pub fn fail_next(&self, op: ObjectOp, count: u64, kind: ObjectErrorKind, message: &str) {
        self.push(op, Some(count), kind, message, false);
    }

    /// Every request of kind `op` fails with `kind` until [`Self::clear`].
    pub fn fail_always(&self, op: ObjectOp, kind: ObjectErrorKind, message: &str) {
        self.push(op, None, kind, message, false);
    }

    /// The next `count` puts are written but reported failed (transient): the caller cannot
    /// know the object exists.
    pub fn lose_put_answers(&self, count: u64) {
        self.push(
            ObjectOp::Put,
            Some(count),
            ObjectErrorKind::Transient,
            "connection reset",
            true,
        );
    }

    fn push(&self, op: ObjectOp, left: Option<u64>, kind: ObjectErrorKind, message: &str, after: bool) {
        self.rules.lock().push(Rule {
            op,
            left,
            error: ObjectError::new(kind, format!("injected: {message}")),
            after,
        });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    /// Adds `latency` to every request (a remote store's round trip).
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock() = latency;
    }

    /// Requests of kind `op` so far.
    pub fn requests(&self, op: ObjectOp) -> u64 {
        let i = slot(op);
        self.requests[i].load(Ordering::Relaxed)
    }

    /// The most requests of kind `op` that were in progress at once so far (with a latency
    /// set, requests that overlap in time count together).
    pub fn max_in_flight(&self, op: ObjectOp) -> u64 {
        let i = slot(op);
        self.max_in_flight[i].load(Ordering::Relaxed)
    }

    /// Requests failed by a rule so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Counts a request, sleeps the latency, and says whether (and when) it fails.
    fn check(&self, op: ObjectOp) -> Option<(ObjectError, bool)> {
        let i = slot(op);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
        let latency = *self.latency.lock();
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let mut rules = self.rules.lock();
        let at = rules.iter().position(|r| r.op == op && r.left != Some(0))?;
        let rule = &mut rules[at];
        if let Some(n) = rule.left.as_mut() {
            *n -= 1;
        }
        let out = (rule.error.clone(), rule.after);
        rules.retain(|r| r.left != Some(0));
        self.failed.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    fn run<T>(&self, op: ObjectOp, f: impl FnOnce() -> ObjectResult<T>) -> ObjectResult<T> {
        let k = slot(op);
        let now = self.in_flight[k].fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight[k].fetch_max(now, Ordering::AcqRel);
        let out = match self.check(op) {
            None => f(),
            Some((e, false)) => Err(e),
            Some((e, true)) => f().and(Err(e)),
        };
        self.in_flight[k].fetch_sub(1, Ordering::AcqRel);
        out
    }
}

impl ObjectStore for FaultyObjectStore {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn put(&self, name: &str, data: &[u8]) -> ObjectResult<()> {
        self.run(ObjectOp::Put, || self.inner.put(name, data))
    }

    fn put_if_absent(&self, name: &str, data: &[u8]) -> ObjectResult<bool> {
        self.run(ObjectOp::Put, || self.inner.put_if_absent(name, data))
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> ObjectResult<Vec<u8>> {
        self.run(ObjectOp::Get, || self.inner.get_range(name, range))
    }

    fn get(&self, name: &str) -> ObjectResult<Vec<u8>> {
        self.run(ObjectOp::Get, || self.inner.get(name))
    }

    fn delete(&self, name: &str) -> ObjectResult<()> {
        self.run(ObjectOp::Delete, || self.inner.delete(name))
    }

    fn list(&self, prefix: &str) -> ObjectResult<Vec<ObjectInfo>> {
        self.run(ObjectOp::List, || self.inner.list(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;
    use crate::tier::DirObjectStore;

    #[test]
    fn rules_fail_requests_in_order_and_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let s = FaultyObjectStore::new(Arc::new(DirObjectStore::new(Arc::new(PosixFs), dir.path())));
        s.fail_next(ObjectOp::Put, 2, ObjectErrorKind::Transient, "503 SlowDown");
        assert_eq!(s.put("a", b"1").unwrap_err().kind, ObjectErrorKind::Transient);
        assert_eq!(s.put("a", b"1").unwrap_err().kind, ObjectErrorKind::Transient);
        assert_eq!(
            s.get("a").unwrap_err().kind,
            ObjectErrorKind::NotFound,
            "failed puts write nothing"
        );
        s.put("a", b"1").unwrap();
        s.lose_put_answers(1);
        assert!(s.put("b", b"2").is_err());
        assert_eq!(s.get("b").unwrap(), b"2", "a lost answer still wrote the object");
        s.fail_always(ObjectOp::Get, ObjectErrorKind::Permanent, "403");
        assert!(s.get_range("a", 0..1).is_err());
        assert!(s.get("a").is_err());
        s.clear();
        assert_eq!(s.get("a").unwrap(), b"1");
        assert_eq!(
            (s.requests(ObjectOp::Put), s.requests(ObjectOp::Get), s.failed()),
            (4, 5, 5)
        );
    }
}
