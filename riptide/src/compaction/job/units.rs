//! Running a job's tasks: on the job thread, or on `units` scoped threads fed through a
//! bounded queue (seed 002's offload design, with CPU threads as the units), reading the
//! inputs of the next tasks ahead.
//!
//! Invariants:
//! - Every task runs exactly once to completion on some thread: a task a unit fails or rejects
//!   (the `reject_every` test hook) is run again on the job thread (the CPU path), and counted
//!   in `tasks_retried`.
//! - Outcomes come back indexed by task, so the caller collects them in key order whatever
//!   order the units finish in.

use super::ranges::Piece;
use super::{JobResult, TaskResult, Units};
use crate::error::Result;
use crate::extent_store::{user_part, ExtentStore};

/// One task's outcome: `None` when a unit rejected it (the caller runs it on the CPU path).
pub(super) type Outcome = Option<Result<TaskResult>>;

/// Hints the OS to read the inputs of `task` ahead (only the extents reaching into a piece).
fn prefetch(store: &ExtentStore, task: &[Piece]) {
    for piece in task {
        for (_, _, e) in &piece.group {
            if let Some(c) = &piece.chunk {
                if !c.overlaps(user_part(&e.meta.smallest), user_part(&e.meta.largest)) {
                    continue;
                }
            }
            if let Ok((file, _, base)) = store.locate(e) {
                file.prefetch(base, e.meta.data_size);
            }
        }
    }
}

/// Runs every task with `cpu`, on the units when there are several units and tasks.
pub(super) fn run_tasks(
    store: &ExtentStore,
    tasks: &[Vec<Piece>],
    units: Units,
    cpu: &(dyn Fn(&[Piece]) -> Result<TaskResult> + Sync),
    result: &mut JobResult,
) -> Vec<Outcome> {
    let mut outcomes: Vec<Outcome> = (0..tasks.len()).map(|_| None).collect();
    if units.units <= 1 || tasks.len() <= 1 {
        for (i, task) in tasks.iter().enumerate() {
            if let Some(next) = tasks.get(i + 1) {
                prefetch(store, next);
            }
            outcomes[i] = Some(cpu(task));
        }
        return outcomes;
    }
    // The task queue (bounded: units.units * 2 in flight) and the result queue.
    let (task_tx, task_rx) = std::sync::mpsc::sync_channel::<usize>(units.units * 2);
    let task_rx = std::sync::Mutex::new(task_rx);
    let (res_tx, res_rx) = std::sync::mpsc::channel::<(usize, Option<Result<TaskResult>>)>();
    std::thread::scope(|scope| {
        for _ in 0..units.units {
            let (task_rx, res_tx, tasks) = (&task_rx, res_tx.clone(), &tasks);
            let cpu = &cpu;
            scope.spawn(move || {
                let mut given = 0u64;
                loop {
                    let next = task_rx.lock().map(|rx| rx.recv());
                    let Ok(Ok(i)) = next else { return };
                    given += 1;
                    let rejected = units.reject_every > 0 && given.is_multiple_of(units.reject_every);
                    let outcome = if rejected { None } else { Some(cpu(&tasks[i])) };
                    if res_tx.send((i, outcome)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        // Inputs of the next `prefetch` tasks are read ahead while units work.
        for t in tasks.iter().take(units.prefetch) {
            prefetch(store, t);
        }
        for i in 0..tasks.len() {
            if let Some(t) = tasks.get(i + units.prefetch) {
                prefetch(store, t);
            }
            if task_tx.send(i).is_err() {
                break;
            }
        }
        drop(task_tx);
        for (i, outcome) in res_rx {
            outcomes[i] = outcome.map(|o| match o {
                // A unit failure hands the task back to the CPU path.
                Err(_) => {
                    result.stats.tasks_retried += 1;
                    cpu(&tasks[i])
                }
                ok => ok,
            });
        }
    });
    outcomes
}
