//! The power-cut oracle's record of writes: a global clock every write stamps just before it is
//! submitted and just after it is acknowledged, and each thread's writes in order
//! (`powercut.rs` checks a recovered database against it).
//!
//! Invariant: stamps come from one atomic counter (sequentially consistent), so `a.ack < b.start`
//! means write `a` was acknowledged before `b` was submitted, in real time.

use super::expected::{lock, GroupKey};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A write as the power-cut oracle saw it.
#[derive(Debug, Clone)]
pub struct WriteRec {
    pub th: u32,
    /// Clock stamp just before the write was submitted.
    pub start: u64,
    /// Clock stamp just after it was acknowledged; `None` if it failed or never returned
    /// (in flight at the cut).
    pub ack: Option<u64>,
    /// Its keys with their old and new states (empty for a scratch fill).
    pub keys: Vec<GroupKey>,
    /// A fill of the writer's scratch table: the generation.
    pub scratch: Option<u32>,
    /// What it was, for failure reports.
    pub what: String,
}

impl std::fmt::Display for WriteRec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[thread {} start {} ack ", self.th, self.start)?;
        match self.ack {
            Some(a) => write!(f, "{a}")?,
            None => write!(f, "none")?,
        }
        write!(f, "] {}", self.what)
    }
}

/// The clock and the log of writes since the last recovery.
#[derive(Debug)]
pub struct History {
    clock: AtomicU64,
    recs: Vec<Mutex<Vec<WriteRec>>>,
}

impl History {
    pub fn new(threads: u32) -> History {
        History {
            clock: AtomicU64::new(1),
            recs: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// A clock stamp, unique and increasing in real time.
    pub fn stamp(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    pub fn record(
        &self,
        th: u32,
        start: u64,
        ack: Option<u64>,
        keys: Vec<GroupKey>,
        scratch: Option<u32>,
        what: String,
    ) {
        lock(&self.recs[th as usize]).push(WriteRec {
            th,
            start,
            ack,
            keys,
            scratch,
            what,
        });
    }

    /// Every write, each thread's in its order.
    pub fn take(&self) -> Vec<WriteRec> {
        self.recs.iter().flat_map(|r| std::mem::take(&mut *lock(r))).collect()
    }
}
