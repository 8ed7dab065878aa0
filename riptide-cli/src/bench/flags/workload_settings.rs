//! The parsed settings of Riptide's own workloads: compact_reuse's [`Layout`]
//! (`--reuse_layout`), and xbench's and tsunami's [`XbenchConfig`] ([`Mix`], [`XIsolation`],
//! [`TsunamiConfig`]). They are defined here, at the bottom with the other flags, so that the
//! flags do not import the workloads that consume them (`compact_reuse.rs`, `xbench/`).
//!
//! Invariant: every value here was checked by `config.rs` (a [`Mix`] has a positive total).

use crate::bench::error::BenchError;
use std::path::PathBuf;
use std::time::Duration;

/// Where the small run's keys fall (`--reuse_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Distinct and hot keys are new uniformly random key numbers.
    Uniform,
    /// Distinct keys lie above the large run; hot keys are records of the large run.
    Appended,
}

impl Layout {
    /// Parses `--reuse_layout`.
    pub fn from_name(name: &str) -> Result<Layout, BenchError> {
        match name {
            "uniform" => Ok(Layout::Uniform),
            "appended" => Ok(Layout::Appended),
            _ => Err(BenchError::Usage(format!(
                "--reuse_layout={name}: expected uniform or appended"
            ))),
        }
    }

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Uniform => "uniform",
            Layout::Appended => "appended",
        }
    }
}

/// Isolation level of the benchmark's transactions (`--isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XIsolation {
    /// Snapshot isolation (MySQL's REPEATABLE READ on MyRocks and X-Engine).
    Snapshot,
    /// Read committed.
    ReadCommitted,
}

impl XIsolation {
    /// Parses `--isolation`.
    pub fn from_name(s: &str) -> Result<XIsolation, BenchError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "si" | "snapshot" | "rr" => Ok(XIsolation::Snapshot),
            "rc" | "read_committed" => Ok(XIsolation::ReadCommitted),
            _ => Err(BenchError::Usage(format!(
                "--isolation={s}: expected si (snapshot isolation) or rc (read committed)"
            ))),
        }
    }

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            XIsolation::Snapshot => "si",
            XIsolation::ReadCommitted => "rc",
        }
    }
}

/// tsunami's flags.
#[derive(Debug, Clone)]
pub struct TsunamiConfig {
    /// Offered transactions per second before and after the spike.
    pub base_tps: f64,
    /// The spike's rate over the base rate.
    pub factor: f64,
    /// Seconds before, during and after the spike.
    pub phases: [u64; 3],
    /// Output path prefix (`.csv` and `.svg` are appended); `None` = `./bench-data/tsunami-<engine>`.
    pub out: Option<PathBuf>,
    /// Seconds after the schedule's end that the run may go on draining its backlog; `None` =
    /// until every scheduled transaction has committed. Transactions not started by then are
    /// counted as left over, not run.
    pub drain_limit: Option<u64>,
}

/// `--mix=P:R:U:I`: weights of point lookups, range lookups, updates and inserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; 4],
    total: u32,
}

impl Mix {
    /// Parses `P:R:U:I` (non-negative integers, not all zero).
    pub fn parse(s: &str) -> Result<Mix, BenchError> {
        let bad = || {
            BenchError::Usage(format!(
                "--mix={s}: expected four weights point:range:update:insert, e.g. 80:11:6:3 or 42:10:32:16"
            ))
        };
        let parts: Vec<u32> = s
            .split(':')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let weights: [u32; 4] = parts.try_into().map_err(|_| bad())?;
        let total = weights
            .iter()
            .try_fold(0u32, |a, &w| a.checked_add(w))
            .ok_or_else(bad)?;
        if total == 0 {
            return Err(bad());
        }
        Ok(Mix { weights, total })
    }

    /// The query kind (index into xbench's `KINDS`) for random number `r`.
    #[inline]
    pub fn pick(&self, r: u64) -> usize {
        let mut x = (r % u64::from(self.total)) as u32;
        for (i, &w) in self.weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        unreachable!("x < total = sum of weights")
    }

    /// `P:R:U:I`.
    pub fn name(&self) -> String {
        let w = self.weights;
        format!("{}:{}:{}:{}", w[0], w[1], w[2], w[3])
    }
}

/// The flags of `xbench` and `tsunami`.
#[derive(Debug, Clone)]
pub struct XbenchConfig {
    /// `--mix`.
    pub mix: Mix,
    /// `--range_size`: entries a range lookup reads.
    pub range_size: usize,
    /// `--txn_queries`: queries per transaction.
    pub txn_queries: usize,
    /// `--isolation`.
    pub isolation: XIsolation,
    /// `--lock_timeout_ms`.
    pub lock_timeout: Duration,
    /// `--early_lock_release` (Riptide only).
    pub early_lock_release: bool,
    /// tsunami's schedule and output.
    pub tsunami: TsunamiConfig,
}
