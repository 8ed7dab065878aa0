//! Retrying object-store requests: exponential backoff with jitter, up to a deadline.
//!
//! Invariants:
//! - Only [`ObjectErrorKind::Transient`] errors are retried; `NotFound` and `Permanent` return
//!   at once.
//! - No retry starts after the deadline: the last attempt starts at most `deadline` after the
//!   first, and the error returned is the last attempt's.
//! - Backoff doubles from `first_backoff` up to `max_backoff`; each sleep is drawn uniformly from
//!   its upper half, so clients throttled together do not retry in lockstep.

use super::store::{ObjectErrorKind, ObjectResult};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// How the object tier retries transient object-store errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Wait before the first retry (default 50 ms).
    pub first_backoff: Duration,
    /// Longest wait between two attempts (default 2 s).
    pub max_backoff: Duration,
    /// No attempt starts later than this after the first (default 30 s); then the request
    /// fails with [`Error::ObjectStore`].
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            deadline: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Checks the policy (a zero backoff would spin).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.first_backoff.is_zero() || self.max_backoff < self.first_backoff {
            return Err(Error::InvalidOption {
                option: "object_retry",
                reason: format!(
                    "first_backoff must be > 0 and at most max_backoff, got {:?} and {:?}",
                    self.first_backoff, self.max_backoff
                ),
            });
        }
        Ok(())
    }

    /// Runs `attempt` until it succeeds, fails for good, or the deadline passes. Returns the
    /// outcome and the number of retries made.
    pub(crate) fn run<T>(&self, mut attempt: impl FnMut() -> ObjectResult<T>) -> (ObjectResult<T>, u32) {
        let start = Instant::now();
        let mut backoff = self.first_backoff;
        let mut retries = 0;
        loop {
            let err = match attempt() {
                Ok(v) => return (Ok(v), retries),
                Err(e) => e,
            };
            if err.kind != ObjectErrorKind::Transient {
                return (Err(err), retries);
            }
            let half = backoff / 2;
            let sleep = half + half.mul_f64(rand::random::<f64>());
            if start.elapsed() + sleep > self.deadline {
                return (Err(err), retries);
            }
            std::thread::sleep(sleep);
            retries += 1;
            backoff = (backoff * 2).min(self.max_backoff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::store::ObjectError;
    use std::cell::Cell;

    fn quick(deadline_ms: u64) -> RetryPolicy {
        RetryPolicy {
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            deadline: Duration::from_millis(deadline_ms),
        }
    }

    #[test]
    fn transient_errors_are_retried_until_success() {
        let calls = Cell::new(0);
        let (r, retries) = quick(5_000).run(|| {
            calls.set(calls.get() + 1);
            if calls.get() < 4 {
                Err(ObjectError::new(ObjectErrorKind::Transient, "503 SlowDown"))
            } else {
                Ok(7)
            }
        });
        assert_eq!(r, Ok(7));
        assert_eq!((calls.get(), retries), (4, 3));
    }

    #[test]
    fn other_errors_are_not_retried() {
        for kind in [ObjectErrorKind::NotFound, ObjectErrorKind::Permanent] {
            let calls = Cell::new(0);
            let (r, retries) = quick(5_000).run(|| -> ObjectResult<()> {
                calls.set(calls.get() + 1);
                Err(ObjectError::new(kind, "no"))
            });
            assert_eq!(r.unwrap_err().kind, kind);
            assert_eq!((calls.get(), retries), (1, 0));
        }
    }

    #[test]
    fn the_deadline_ends_retries() {
        let start = Instant::now();
        let (r, retries) =
            quick(30).run(|| -> ObjectResult<()> { Err(ObjectError::new(ObjectErrorKind::Transient, "timeout")) });
        assert_eq!(r.unwrap_err().kind, ObjectErrorKind::Transient);
        assert!(retries >= 3, "{retries}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn bad_policies_are_refused() {
        let mut p = RetryPolicy::default();
        assert!(p.validate().is_ok());
        p.first_backoff = Duration::ZERO;
        assert!(matches!(
            p.validate(),
            Err(Error::InvalidOption {
                option: "object_retry",
                ..
            })
        ));
        p.first_backoff = Duration::from_secs(5);
        assert!(p.validate().is_err());
    }
}
