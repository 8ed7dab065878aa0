//! The write stall: protects memory when flushes or compactions fall behind (X-Engine's
//! "flood discharge"). Before a batch enters the pipeline, each table it touches is checked:
//! past a slowdown threshold the write is delayed once by `slowdown_delay_micros`; past a stop
//! threshold it waits until background work brings the table back under it.
//!
//! Invariants:
//! - Thresholds: immutable memtables, L0 layers, and bytes pending compaction (all of L0 plus
//!   L1 beyond its trigger). A byte threshold of 0 means "no limit" (as in RocksDB).
//! - A stopped writer sleeps on [`WriteStall::wait`]'s condition variable and is woken by
//!   [`WriteStall::wake`] after every flush, compaction and table drop; it also re-checks at
//!   least every 50 ms, so a missed wake costs latency, never progress.
//! - A stopped writer whose table cannot flush (a background error while immutable memtables
//!   are at their stop threshold) gets that error instead of waiting forever; a dropped table
//!   and a closed database end the wait too.

use crate::compaction::picker::{Triggers, OBJECT_L2_WEIGHT};
use crate::error::{Error, Result};
use crate::extent::EXTENT_SIZE;
use crate::options::Options;
use crate::subtable::TableInner;
use crate::tier::Tier;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far a table is behind: what the stall thresholds are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pressure {
    pub(crate) immutables: usize,
    pub(crate) l0_layers: usize,
    pub(crate) pending_bytes: u64,
}

impl Pressure {
    /// The pressure on `t` now; L1 counts beyond the compaction trigger `triggers` sets for
    /// the table's L2.
    /// `l2_weight`: the table's weight of L2 in the major trigger (as the picker's).
    pub(crate) fn of(t: &TableInner, triggers: &Triggers, l2_weight: f64) -> Pressure {
        t.with_current(|view| {
            let l1_target = triggers.level1_target(view.levels.sorted[1].extents.len(), l2_weight) as u64;
            Pressure {
                immutables: view.immutables.len(),
                l0_layers: view.levels.l0.len(),
                pending_bytes: view
                    .levels
                    .pending_compaction_bytes(l1_target.saturating_mul(EXTENT_SIZE)),
            }
        })
    }
}

/// The stall thresholds, from the options.
#[derive(Debug, Clone, Copy)]
struct Limits {
    immutable_slowdown: usize,
    immutable_stop: usize,
    l0_slowdown: usize,
    l0_stop: usize,
    pending_slowdown_bytes: u64,
    pending_stop_bytes: u64,
    delay: Duration,
}

/// 0 = no limit.
fn byte_limit(bytes: u64) -> u64 {
    if bytes == 0 {
        u64::MAX
    } else {
        bytes
    }
}

impl Limits {
    /// Why a write slows down at `p`, if it does.
    fn slowdown(&self, p: &Pressure) -> Option<&'static str> {
        if p.immutables >= self.immutable_slowdown {
            Some("too many immutable memtables")
        } else if p.l0_layers >= self.l0_slowdown {
            Some("too many L0 layers")
        } else if p.pending_bytes >= self.pending_slowdown_bytes {
            Some("too many bytes pending compaction")
        } else {
            None
        }
    }

    fn stop(&self, p: &Pressure) -> bool {
        p.immutables >= self.immutable_stop || p.l0_layers >= self.l0_stop || p.pending_bytes >= self.pending_stop_bytes
    }
}

/// What a stalled writer asks of its database.
pub(crate) trait StallHost {
    /// [`Error::Closed`] once the database is closing.
    fn check_open(&self) -> Result<()>;
    /// The last background error, if the most recent flush or compaction failed.
    fn background_error(&self) -> Option<Error>;
}

/// The write stall of one database instance.
pub(crate) struct WriteStall {
    limits: Limits,
    triggers: Triggers,
    /// Where L2 lives for tables that do not say (`Options::l2_tier`).
    l2_tier: Tier,
    lock: Mutex<()>,
    cond: Condvar,
}

impl WriteStall {
    pub(crate) fn new(opts: &Options) -> WriteStall {
        WriteStall {
            limits: Limits {
                immutable_slowdown: opts.immutable_slowdown_trigger,
                immutable_stop: opts.immutable_stop_trigger,
                l0_slowdown: opts.level0_slowdown_layers,
                l0_stop: opts.level0_stop_layers,
                pending_slowdown_bytes: byte_limit(opts.pending_compaction_slowdown_bytes),
                pending_stop_bytes: byte_limit(opts.pending_compaction_stop_bytes),
                delay: Duration::from_micros(opts.slowdown_delay_micros),
            },
            triggers: Triggers::from_options(opts),
            l2_tier: opts.l2_tier,
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    /// Delays or stops a write to `tables` while one of them is under pressure. With
    /// `no_slowdown`, fails with [`Error::WouldStall`] instead of waiting. Returns when the
    /// stall began, if the write was held at all.
    pub(crate) fn wait(
        &self,
        host: &dyn StallHost,
        tables: &[Arc<TableInner>],
        no_slowdown: bool,
    ) -> Result<Option<Instant>> {
        let mut started: Option<Instant> = None;
        for t in tables {
            loop {
                let object = t.options.l2_tier.unwrap_or(self.l2_tier) == Tier::Object;
                let weight = if object { OBJECT_L2_WEIGHT } else { 1.0 };
                let p = Pressure::of(t, &self.triggers, weight);
                let Some(why) = self.limits.slowdown(&p) else { break };
                if t.is_dropped() {
                    break;
                }
                if no_slowdown {
                    return Err(Error::WouldStall(why));
                }
                host.check_open()?;
                started.get_or_insert_with(Instant::now);
                if !self.limits.stop(&p) {
                    std::thread::sleep(self.limits.delay);
                    break;
                }
                if let Some(e) = host.background_error() {
                    if p.immutables >= self.limits.immutable_stop {
                        return Err(e);
                    }
                }
                let mut g = self.lock.lock();
                self.cond.wait_for(&mut g, Duration::from_millis(50));
            }
        }
        Ok(started)
    }

    /// Wakes stopped writers to look again (after a flush, a compaction or a table drop).
    pub(crate) fn wake(&self) {
        let _g = self.lock.lock();
        self.cond.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(pending_slowdown: u64, pending_stop: u64) -> Limits {
        Limits {
            immutable_slowdown: 2,
            immutable_stop: 4,
            l0_slowdown: 3,
            l0_stop: 6,
            pending_slowdown_bytes: byte_limit(pending_slowdown),
            pending_stop_bytes: byte_limit(pending_stop),
            delay: Duration::ZERO,
        }
    }

    fn pressure(immutables: usize, l0_layers: usize, pending_bytes: u64) -> Pressure {
        Pressure {
            immutables,
            l0_layers,
            pending_bytes,
        }
    }

    #[test]
    fn thresholds_slow_down_then_stop() {
        let l = limits(100, 200);
        assert_eq!(l.slowdown(&pressure(1, 2, 99)), None);
        assert_eq!(l.slowdown(&pressure(2, 0, 0)), Some("too many immutable memtables"));
        assert_eq!(l.slowdown(&pressure(0, 3, 0)), Some("too many L0 layers"));
        assert_eq!(
            l.slowdown(&pressure(0, 0, 100)),
            Some("too many bytes pending compaction")
        );
        assert!(!l.stop(&pressure(3, 5, 199)));
        assert!(l.stop(&pressure(4, 0, 0)) && l.stop(&pressure(0, 6, 0)) && l.stop(&pressure(0, 0, 200)));
    }

    #[test]
    fn zero_byte_thresholds_mean_no_limit() {
        let l = limits(0, 0);
        assert_eq!(l.slowdown(&pressure(0, 0, u64::MAX - 1)), None);
        assert!(!l.stop(&pressure(0, 0, u64::MAX - 1)));
    }
}
