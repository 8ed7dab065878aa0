//! [`Benchmark`]: the benchmarks and meta operations `--benchmarks` names, with the
//! properties the driver needs (fresh database, meta operation, writes, histogram word), and
//! [`parse_benchmarks`].
//!
//! Invariant: [`Benchmark::ALL`] lists every variant once, in the help text's order, and
//! [`Benchmark::name`] / [`Benchmark::from_name`] round-trip; a meta operation neither writes
//! nor needs a fresh database.

use crate::bench::error::BenchError;

/// One benchmark of `--benchmarks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Benchmark {
    FillSeq,
    FillRandom,
    Overwrite,
    ReadRandom,
    MultiReadRandom,
    ReadSeq,
    ReadReverse,
    SeekRandom,
    ReadWhileWriting,
    DeleteRandom,
    Flush,
    Compact,
    WaitForCompaction,
    Stats,
    LevelStats,
    CompactReuse,
    XBench,
    Tsunami,
    HotKeySnapshot,
}

impl Benchmark {
    /// Every benchmark, in the order of the help text.
    pub const ALL: [Benchmark; 19] = [
        Benchmark::FillSeq,
        Benchmark::FillRandom,
        Benchmark::Overwrite,
        Benchmark::ReadRandom,
        Benchmark::MultiReadRandom,
        Benchmark::ReadSeq,
        Benchmark::ReadReverse,
        Benchmark::SeekRandom,
        Benchmark::ReadWhileWriting,
        Benchmark::DeleteRandom,
        Benchmark::Flush,
        Benchmark::Compact,
        Benchmark::WaitForCompaction,
        Benchmark::Stats,
        Benchmark::LevelStats,
        Benchmark::CompactReuse,
        Benchmark::XBench,
        Benchmark::Tsunami,
        Benchmark::HotKeySnapshot,
    ];

    /// The db_bench name.
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::FillSeq => "fillseq",
            Benchmark::FillRandom => "fillrandom",
            Benchmark::Overwrite => "overwrite",
            Benchmark::ReadRandom => "readrandom",
            Benchmark::MultiReadRandom => "multireadrandom",
            Benchmark::ReadSeq => "readseq",
            Benchmark::ReadReverse => "readreverse",
            Benchmark::SeekRandom => "seekrandom",
            Benchmark::ReadWhileWriting => "readwhilewriting",
            Benchmark::DeleteRandom => "deleterandom",
            Benchmark::Flush => "flush",
            Benchmark::Compact => "compact",
            Benchmark::WaitForCompaction => "waitforcompaction",
            Benchmark::Stats => "stats",
            Benchmark::LevelStats => "levelstats",
            Benchmark::CompactReuse => "compact_reuse",
            Benchmark::XBench => "xbench",
            Benchmark::Tsunami => "tsunami",
            Benchmark::HotKeySnapshot => "hotkeysnapshot",
        }
    }

    /// Looks a benchmark up by its db_bench name.
    pub fn from_name(name: &str) -> Option<Benchmark> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// db_bench's `fresh_db`: the benchmark starts from an empty database.
    pub fn fresh_db(self) -> bool {
        matches!(self, Benchmark::FillSeq | Benchmark::FillRandom)
    }

    /// A meta operation (db_bench's "Meta operations"): one call on the calling thread, no
    /// benchmark threads.
    pub fn is_meta(self) -> bool {
        matches!(
            self,
            Benchmark::Flush
                | Benchmark::Compact
                | Benchmark::WaitForCompaction
                | Benchmark::Stats
                | Benchmark::LevelStats
        )
    }

    /// True if the benchmark writes (and so gets a "Write path:" line).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Benchmark::FillSeq
                | Benchmark::FillRandom
                | Benchmark::Overwrite
                | Benchmark::ReadWhileWriting
                | Benchmark::DeleteRandom
                | Benchmark::XBench
                | Benchmark::Tsunami
        )
    }

    /// The operation word of db_bench's "Microseconds per <op>:" histogram header.
    pub fn op_name(self) -> &'static str {
        match self {
            Benchmark::FillSeq | Benchmark::FillRandom | Benchmark::Overwrite => "write",
            Benchmark::DeleteRandom => "delete",
            Benchmark::SeekRandom => "seek",
            Benchmark::ReadRandom
            | Benchmark::MultiReadRandom
            | Benchmark::ReadSeq
            | Benchmark::ReadReverse
            | Benchmark::ReadWhileWriting
            | Benchmark::HotKeySnapshot => "read",
            Benchmark::Flush
            | Benchmark::Compact
            | Benchmark::WaitForCompaction
            | Benchmark::Stats
            | Benchmark::LevelStats
            | Benchmark::CompactReuse => "op",
            Benchmark::XBench | Benchmark::Tsunami => "transaction",
        }
    }
}

/// Parses a `--benchmarks` list; empty entries are ignored (as db_bench does).
pub fn parse_benchmarks(list: &str) -> Result<Vec<Benchmark>, BenchError> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match Benchmark::from_name(name) {
            Some(b) => out.push(b),
            None => {
                let known: Vec<&str> = Benchmark::ALL.iter().map(|b| b.name()).collect();
                return Err(BenchError::Usage(format!(
                    "--benchmarks: unknown benchmark `{name}` (known: {})",
                    known.join(", ")
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(BenchError::Usage("--benchmarks: no benchmark given".into()));
    }
    Ok(out)
}
