//! Bounded parallel requests for backups, verifies and restores: one thread produces jobs in
//! order (reading and hashing extents, or listing a manifest), up to `workers` threads run
//! them (object-store requests, which spend most of their time waiting on the network).
//!
//! Invariants:
//! - At most `workers` jobs are queued and at most `workers` run, so memory stays bounded (a
//!   job holds one extent, at most 2 MiB plus its footer).
//! - The first error, of the producer or of a job, is returned; after it the producer yields
//!   no more jobs and workers take no new one. Jobs already running finish (a request that has
//!   started cannot be taken back), so every effect of a failed run is one a retry tolerates.
//! - With one worker, jobs run on the calling thread, in order, with no thread started.
//! - A job that panics stops the producer as an error does (the producer never blocks on a
//!   queue nobody drains), and the panic reaches the caller when the workers are joined.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, TrySendError};
use std::time::Duration;

/// How long the producer waits before it tries a full queue again.
const QUEUE_FULL_NAP: Duration = Duration::from_micros(200);

/// Sets the flag when dropped during a panic.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// Runs `work` on every job `jobs` yields, on up to `workers` threads (see the module
/// invariants). Returns the first error.
pub(crate) fn for_each_job<T: Send>(
    workers: usize,
    jobs: impl Iterator<Item = Result<T>>,
    work: impl Fn(T) -> Result<()> + Sync,
) -> Result<()> {
    if workers <= 1 {
        for job in jobs {
            work(job?)?;
        }
        return Ok(());
    }
    let (tx, rx) = sync_channel::<T>(workers);
    let rx = Mutex::new(rx);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let fail = |e: Error| {
        failed.store(true, Ordering::Release);
        first_error.lock().get_or_insert(e);
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                // A panicking job stops the producer (see the module invariants).
                let _stop_on_panic = StopOnPanic(&failed);
                loop {
                    // The receiver's lock is held only to take a job, not while running it.
                    let job = rx.lock().recv();
                    let Ok(job) = job else { return };
                    if failed.load(Ordering::Acquire) {
                        continue; // drain: the producer stops soon
                    }
                    if let Err(e) = work(job) {
                        fail(e);
                    }
                }
            });
        }
        'produce: for job in jobs {
            let mut job = match job {
                Ok(job) => job,
                Err(e) => {
                    fail(e);
                    break;
                }
            };
            // A full queue is waited out in short naps, so that a failure (or a panic) of the
            // workers is seen even when none of them takes jobs any more.
            loop {
                if failed.load(Ordering::Acquire) {
                    break 'produce;
                }
                match tx.try_send(job) {
                    Ok(()) => break,
                    Err(TrySendError::Full(back)) => {
                        job = back;
                        std::thread::sleep(QUEUE_FULL_NAP);
                    }
                    Err(TrySendError::Disconnected(_)) => break 'produce,
                }
            }
        }
        drop(tx);
    });
    match first_error.into_inner() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn every_job_runs_once_and_at_most_workers_run_at_a_time() {
        for workers in [1, 2, 8] {
            let done = Mutex::new(HashSet::new());
            let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            for_each_job(workers, (0..100).map(Ok), |i| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
                running.fetch_sub(1, Ordering::SeqCst);
                assert!(done.lock().insert(i), "job {i} ran twice");
                Ok(())
            })
            .unwrap();
            assert_eq!(done.lock().len(), 100);
            assert!(most.load(Ordering::SeqCst) <= workers);
            if workers > 1 {
                assert!(most.load(Ordering::SeqCst) > 1, "{workers} workers never overlapped");
            }
        }
    }

    #[test]
    fn the_first_error_stops_the_producer_and_is_returned() {
        for workers in [1, 4] {
            let produced = AtomicUsize::new(0);
            let jobs = (0..1000).map(|i| {
                produced.fetch_add(1, Ordering::SeqCst);
                Ok(i)
            });
            let err = for_each_job(workers, jobs, |i| {
                if i == 10 {
                    return Err(Error::Closed);
                }
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            })
            .unwrap_err();
            assert!(matches!(err, Error::Closed), "{err}");
            // The producer stopped long before the end (every other job takes a millisecond).
            assert!(produced.load(Ordering::SeqCst) < 1000, "{workers}");
        }
        let jobs = (0..100).map(|i| if i == 5 { Err(Error::Closed) } else { Ok(i) });
        let ran = AtomicUsize::new(0);
        let err = for_each_job(4, jobs, |_| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(err, Error::Closed));
        assert!(ran.load(Ordering::SeqCst) <= 5, "a job after the producer's error ran");
    }

    #[test]
    fn a_panicking_job_stops_the_producer_and_the_panic_reaches_the_caller() {
        let produced = AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let jobs = (0..100_000).map(|i| {
                produced.fetch_add(1, Ordering::SeqCst);
                Ok(i)
            });
            for_each_job(2, jobs, |_| -> Result<()> { panic!("injected") })
        }));
        assert!(outcome.is_err(), "the panic was swallowed");
        assert!(produced.load(Ordering::SeqCst) < 100_000);
    }
}
