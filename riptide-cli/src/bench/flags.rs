//! Command-line flags of `riptide bench` (db_bench spelling, `--flag=value`) and their
//! validation into a [`Config`].
//!
//! Flag semantics follow RocksDB's db_bench 7.8: `--reads`/`--writes`/`--deletes` are per-thread
//! op counts where a negative value means `--num`; booleans accept 0/1/true/false (bare `--sync`
//! means true). Anything out of range is a [`BenchError::Usage`] naming the flag, checked before
//! the database directory is touched.

use super::engine::{Compression, EngineKind};
use super::error::BenchError;
use super::keys::DEFAULT_COMPRESSION_RATIO;
use clap::Args;
use riptide::{Options, MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use std::path::PathBuf;
use std::time::Duration;

/// Benchmarks run when `--benchmarks` is not given (the README's "main job").
pub const DEFAULT_BENCHMARKS: &str = "fillseq,fillrandom,overwrite,readrandom,readseq,seekrandom";

/// `--reads` of the default workload (`riptide bench` with no flags at all): keeps the run short;
/// 1,000,000 random reads and seeks per read benchmark would dominate it.
pub const DEFAULT_WORKLOAD_READS: i64 = 100_000;

/// Seed used when `--seed=0` (the default): db_bench would pick the clock; we stay reproducible.
pub const DEFAULT_SEED: u64 = 1;

/// Default database directory of the default engine (the repository's `.gitignore` ignores
/// `/bench-data/`); other engines default to `./bench-data/<engine>`.
pub const DEFAULT_DB: &str = "./bench-data/riptide";

/// db_bench's default `--cache_size` (8 MiB).
pub const DEFAULT_CACHE_SIZE: i64 = 8 << 20;

/// Default `--block_size`: 16 KiB, the block size of Riptide's extents.
pub const DEFAULT_BLOCK_SIZE: i64 = 16 << 10;

/// Default `--bloom_bits` (bits per key of every engine's bloom filters).
pub const DEFAULT_BLOOM_BITS: i64 = 10;

/// The directory `--db` defaults to for `engine`.
pub fn default_db(engine: EngineKind) -> PathBuf {
    match engine {
        EngineKind::Riptide => PathBuf::from(DEFAULT_DB),
        other => PathBuf::from(format!("./bench-data/{}", other.name())),
    }
}

const AFTER_HELP: &str = "\
Benchmarks (run in the order given, on one database directory):
  fillseq           write keys 0..writes in order, per thread (fresh database)
  fillrandom        write random keys in [0,num), with replacement (fresh database)
  overwrite         like fillrandom, on the existing data
  readrandom        point reads of random keys; reports \"(X of Y found)\"
  multireadrandom   batches of --batch_size random keys read with one multi-get each
  readseq           forward scan of up to --reads entries per thread
  readreverse       backward scan of up to --reads entries per thread
  seekrandom        seek to random keys, read the entry there; \"(X of Y found)\" counts exact hits
  readwhilewriting  --threads readers doing readrandom + 1 writer doing random puts until the
                    readers finish; reports the readers, then the writer on its own line
  deleterandom      delete random keys in [0,num)
Meta operations (one call each, timed; no threads):
  flush             flush every memtable to data files and wait (MB/s = bytes the flush wrote,
                    where the engine tells)
  compact           compact the whole database to its last level and wait (RocksDB:
                    CompactRange over everything, bottommost level ForceOptimized, as db_bench)
  waitforcompaction wait until no flush or compaction is running or pending
  stats             print the engine's statistics (RocksDB: \"rocksdb.stats\")
  levelstats        print files/extents and bytes per level (RocksDB: \"rocksdb.levelstats\")
Riptide's own:
  compact_reuse     seed 000 Fig. 16: per --distinct_pct value, on a wiped database, write
                    10*num random records and compact them to the last level, then num records
                    of which that percentage are distinct keys (the rest ~10 versions each of
                    hot keys) and flush; time the engine merging the two runs (riptide: minor +
                    major with data reuse; rocksdb: CompactRange, default bottommost policy);
                    --reuse_layout=appended puts the distinct keys above the large run's and
                    takes the hot keys from it
  xbench            seed 000's e-commerce mix over transactions (riptide, rocksdb TransactionDB):
                    on a pristine database first loads records 0..num (seed: --key_size=12
                    --value_size=500), then each thread runs transactions of --txn_queries
                    queries drawn from --mix=P:R:U:I (point lookup, range lookup of --range_size
                    entries, update = get_for_update + put, insert = get_for_update + put of a new
                    key) for --duration seconds or --reads transactions; conflicts are rolled back
                    and retried; reports QPS, TPS and latency percentiles per query kind
  tsunami           the same transactions offered open-loop at --tsunami_base_tps, then
                    --tsunami_factor times that for the middle of --tsunami_phases=B,S,A seconds;
                    writes a per-second CSV (tps, qps, P50, P99) and an SVG plot to --tsunami_out

As in db_bench: fillseq and fillrandom start from an empty database (they are skipped with
--use_existing_db=1); keys are the 8-byte big-endian key number padded with '0' bytes to
--key_size; per-thread RNG seed = --seed + the number of benchmark threads started so far in this
process (1 for the first), using db_bench's mt19937-64, so --seed=N draws the same keys as
`db_bench --seed=N`; --zipf=THETA makes every random key Zipfian (YCSB's generator, scattered);
--read_random_exp_range=R skews the keys of readrandom, multireadrandom and
readwhilewriting's readers exactly as db_bench does (not seekrandom, like db_bench); values are
db_bench's (--compression_ratio); with --duration>0 the random-key benchmarks run that long and
ignore op counts (fillseq, readseq and readreverse ignore it); micros/op is per thread
(threads / throughput), ops/sec is the aggregate. Unlike db_bench, \"(X of Y found)\" sums all
reader threads. A flag given twice takes its last value, as in db_bench.

Engines (--engine): riptide (default); rocksdb and fjall when built with the cargo features
bench-rocksdb / bench-fjall. Every engine runs the same key/value generator, thread model and
histograms; the run prints the engine's options (\"Engine options:\") before the first benchmark.
--cache_size, --block_size, --bloom_bits and --compression_type set every engine's block cache,
data blocks, bloom filters and block compression; --row_cache_size a row cache (riptide, rocksdb).

After each write benchmark a \"Write path:\" line gives the engine's own write-path counters over
that benchmark (commit groups, writes per group, log writes, fsyncs, writes per fsync, stall
time; riptide only). The run ends with the engine's statistics (riptide: flushes, compactions,
write amplification, cache hit ratios), the database's size on disk before and after closing
(allocated blocks, like du) and the process's peak RSS (VmHWM).

Example: riptide bench --benchmarks=fillrandom,flush,waitforcompaction,readrandom,stats \\
             --num=1000000 --key_size=16 --value_size=10 --cache_size=67108864 --read_random_exp_range=10";

/// `riptide bench` flags.
#[derive(Args, Debug, Clone)]
#[command(
    about = "Run db_bench-compatible benchmarks against Riptide (or RocksDB / fjall, see --engine)",
    long_about = "Run db_bench-compatible benchmarks against a Riptide database, or with --engine=rocksdb|fjall \
                  (cargo features bench-rocksdb / bench-fjall) the same workloads against RocksDB or fjall.\n\n\
                  Flags use db_bench's names and `--flag=value` form, and the result lines have db_bench 7.8's \
                  format, so scripts written for RocksDB's db_bench work unchanged. With no flags it runs \
                  fillseq,fillrandom,overwrite,readrandom,readseq,seekrandom over 1,000,000 keys in \
                  ./bench-data/riptide.",
    after_help = AFTER_HELP,
    args_override_self = true
)]
pub struct BenchFlags {
    /// Comma-separated benchmarks to run, in order (see the list below)
    #[arg(long, value_name = "LIST", default_value = DEFAULT_BENCHMARKS)]
    pub benchmarks: String,

    /// Number of keys in the key space (and default op count)
    #[arg(long, value_name = "N", default_value_t = 1_000_000, allow_negative_numbers = true)]
    pub num: i64,

    /// Read ops per thread; negative means --num
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub reads: i64,

    /// Write ops per thread for write benchmarks; negative means --num
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub writes: i64,

    /// Delete ops per thread for deleterandom; negative means --num
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub deletes: i64,

    /// Number of concurrent benchmark threads
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true)]
    pub threads: i64,

    /// Key size in bytes (at least 8: the key number is 8 bytes big-endian)
    #[arg(
        long = "key_size",
        alias = "key-size",
        value_name = "BYTES",
        default_value_t = 16,
        allow_negative_numbers = true
    )]
    pub key_size: i64,

    /// Value size in bytes
    #[arg(
        long = "value_size",
        alias = "value-size",
        value_name = "BYTES",
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub value_size: i64,

    /// fdatasync the redo log before acknowledging each write (0/1)
    #[arg(long, value_name = "0|1", default_value = "0", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "1")]
    pub sync: bool,

    /// Skip the redo log (writes are lost on a crash) (0/1)
    #[arg(long = "disable_wal", alias = "disable-wal", value_name = "0|1", default_value = "0",
          value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "1")]
    pub disable_wal: bool,

    /// Collect the engine's statistics where that costs time (rocksdb: Options::enable_statistics,
    /// for cache hit ratios and flush/compaction bytes); riptide always counts (0/1)
    #[arg(long, value_name = "0|1", default_value = "0", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "1")]
    pub statistics: bool,

    /// Print a latency histogram (microseconds per op) after each benchmark (0/1)
    #[arg(long, value_name = "0|1", default_value = "0", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "1")]
    pub histogram: bool,

    /// Database directory [default: ./bench-data/<engine>]
    #[arg(long, value_name = "DIR")]
    pub db: Option<PathBuf>,

    /// Storage engine: riptide, rocksdb or fjall (the last two need the bench-rocksdb /
    /// bench-fjall cargo features)
    #[arg(long, value_name = "NAME", default_value = "riptide")]
    pub engine: String,

    /// Block cache size in bytes (every engine; 0 = none)
    #[arg(
        long = "cache_size",
        alias = "cache-size",
        value_name = "BYTES",
        default_value_t = DEFAULT_CACHE_SIZE,
        allow_negative_numbers = true
    )]
    pub cache_size: i64,

    /// Data block size in bytes, before compression
    #[arg(
        long = "block_size",
        alias = "block-size",
        value_name = "BYTES",
        default_value_t = DEFAULT_BLOCK_SIZE,
        allow_negative_numbers = true
    )]
    pub block_size: i64,

    /// Entries between restart points in data blocks (db_bench's --block_restart_interval)
    #[arg(
        long = "block_restart_interval",
        value_name = "N",
        default_value_t = 16,
        allow_negative_numbers = true
    )]
    pub block_restart_interval: i64,

    /// Bloom filter bits per key; 0 = no filter
    #[arg(
        long = "bloom_bits",
        alias = "bloom-bits",
        value_name = "N",
        default_value_t = DEFAULT_BLOOM_BITS,
        allow_negative_numbers = true
    )]
    pub bloom_bits: i64,

    /// Block compression: none, lz4 or zstd (rocksdb only)
    #[arg(
        long = "compression_type",
        alias = "compression-type",
        value_name = "NAME",
        default_value = "none"
    )]
    pub compression_type: String,

    /// Row cache size in bytes (riptide, rocksdb); 0 = none
    #[arg(
        long = "row_cache_size",
        alias = "row-cache-size",
        value_name = "BYTES",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub row_cache_size: i64,

    /// Skew of readrandom/multireadrandom keys: key = num * exp(-u * R) scattered, u uniform in
    /// [0,1) (db_bench's formula); 0 = uniform
    #[arg(
        long = "read_random_exp_range",
        alias = "read-random-exp-range",
        value_name = "R",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub read_random_exp_range: f64,

    /// Zipfian keys with this theta (0 < theta < 1, YCSB uses 0.99) for every benchmark that
    /// draws random keys (reads, seeks, fills, overwrites, deletes); 0 = off
    #[arg(
        long = "zipf",
        value_name = "THETA",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub zipf: f64,

    /// compact_reuse: percentages of distinct keys in the small run, one round each (the
    /// rest are versions of hot keys); e.g. 70,90,99
    #[arg(
        long = "distinct_pct",
        alias = "distinct-pct",
        value_name = "PCT[,PCT...]",
        default_value = "90"
    )]
    pub distinct_pct: String,

    /// compact_reuse: where the small run's keys fall. `uniform`: distinct keys and hot keys
    /// are new uniformly random keys (the seed's text read literally); `appended`: distinct
    /// keys are new keys above every key of the large run (inserts, as of new orders) and hot
    /// keys are records of the large run (updates of existing rows)
    #[arg(
        long = "reuse_layout",
        alias = "reuse-layout",
        value_name = "uniform|appended",
        default_value = "uniform"
    )]
    pub reuse_layout: String,

    /// xbench/tsunami: query mix point:range:update:insert (seed 000: 80:11:6:3 read-heavy,
    /// 42:10:32:16 Singles' Day)
    #[arg(long = "mix", value_name = "P:R:U:I", default_value = "42:10:32:16")]
    pub mix: String,

    /// xbench/tsunami: entries a range lookup reads
    #[arg(
        long = "range_size",
        value_name = "N",
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub range_size: i64,

    /// xbench/tsunami: queries per transaction
    #[arg(
        long = "txn_queries",
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub txn_queries: i64,

    /// xbench/tsunami: isolation of the transactions, si (snapshot) or rc (read committed)
    #[arg(long = "isolation", value_name = "si|rc", default_value = "si")]
    pub isolation: String,

    /// xbench/tsunami: row-lock wait limit of every engine, milliseconds
    #[arg(
        long = "lock_timeout_ms",
        value_name = "MS",
        default_value_t = 1000,
        allow_negative_numbers = true
    )]
    pub lock_timeout_ms: i64,

    /// tsunami: offered transactions per second before and after the spike
    #[arg(
        long = "tsunami_base_tps",
        value_name = "TPS",
        default_value_t = 400.0,
        allow_negative_numbers = true
    )]
    pub tsunami_base_tps: f64,

    /// tsunami: the spike's offered rate over the base rate
    #[arg(
        long = "tsunami_factor",
        value_name = "X",
        default_value_t = 100.0,
        allow_negative_numbers = true
    )]
    pub tsunami_factor: f64,

    /// tsunami: seconds before, during and after the spike
    #[arg(long = "tsunami_phases", value_name = "B,S,A", default_value = "10,20,10")]
    pub tsunami_phases: String,

    /// tsunami: output prefix of the per-second CSV and the SVG plot [default:
    /// ./bench-data/tsunami-<engine>]
    #[arg(long = "tsunami_out", value_name = "PREFIX")]
    pub tsunami_out: Option<PathBuf>,

    /// Values compress to about this fraction of their size (db_bench's generator)
    #[arg(
        long = "compression_ratio",
        alias = "compression-ratio",
        value_name = "FRACTION",
        default_value_t = DEFAULT_COMPRESSION_RATIO,
        allow_negative_numbers = true
    )]
    pub compression_ratio: f64,

    /// Background flush threads (riptide: max_flushes; rocksdb: max_background_flushes);
    /// negative = the engine's default [default: -1]
    #[arg(
        long = "max_background_flushes",
        alias = "max-background-flushes",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_background_flushes: Option<i64>,

    /// Background compaction threads (riptide: max_compactions; rocksdb:
    /// max_background_compactions); negative = the engine's default [default: -1]
    #[arg(
        long = "max_background_compactions",
        alias = "max-background-compactions",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_background_compactions: Option<i64>,

    /// Threads one compaction job uses (riptide: compaction_units; rocksdb:
    /// max_subcompactions) [default: the engine's, riptide 2, rocksdb 1]
    #[arg(long = "subcompactions", value_name = "N", allow_negative_numbers = true)]
    pub subcompactions: Option<i64>,

    /// L0 files that trigger a compaction (rocksdb: L0 -> L1; riptide: L0 layers that trigger an
    /// intra-L0 merge) [default: 4]
    #[arg(
        long = "level0_file_num_compaction_trigger",
        alias = "level0-file-num-compaction-trigger",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub level0_file_num_compaction_trigger: Option<i64>,

    /// L0 files (riptide: L0 layers) at which writes slow down [default: 20]
    #[arg(
        long = "level0_slowdown_writes_trigger",
        alias = "level0-slowdown-writes-trigger",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub level0_slowdown_writes_trigger: Option<i64>,

    /// L0 files (riptide: L0 layers) at which writes stop until compaction catches up [default: 36]
    #[arg(
        long = "level0_stop_writes_trigger",
        alias = "level0-stop-writes-trigger",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub level0_stop_writes_trigger: Option<i64>,

    /// RocksDB's max_write_buffer_number (memtables, active + immutable) [default: 2]
    #[arg(
        long = "max_write_buffer_number",
        alias = "max-write-buffer-number",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_write_buffer_number: Option<i64>,

    /// After the last benchmark, write every entry (a full forward scan) to FILE as
    /// `hex(key) hex(value)` lines, after checking that a backward scan and point reads agree
    #[arg(long = "dump_file", alias = "dump-file", value_name = "FILE")]
    pub dump_file: Option<PathBuf>,

    /// Reuse the database in --db; with 0 the directory is wiped first (0/1)
    #[arg(long = "use_existing_db", alias = "use-existing-db", value_name = "0|1", default_value = "0",
          value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "1")]
    pub use_existing_db: bool,

    /// Seconds to run each random-key benchmark for; 0 = use the op counts
    #[arg(long, value_name = "SECONDS", default_value_t = 0, allow_negative_numbers = true)]
    pub duration: i64,

    /// RNG seed base; 0 = the fixed default 1
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true)]
    pub seed: i64,

    /// Writes each thread keeps in flight via Db::write_async (riptide only); 0 = synchronous writes
    #[arg(
        long = "async_commit_depth",
        alias = "async-commit-depth",
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub async_commit_depth: i64,

    /// Memtable size in bytes [default: Riptide's, 64 MiB]
    #[arg(
        long = "write_buffer_size",
        alias = "write-buffer-size",
        value_name = "BYTES",
        allow_negative_numbers = true
    )]
    pub write_buffer_size: Option<i64>,

    /// Number of write task queues (riptide only) [default: Riptide's, 4]
    #[arg(
        long = "write_queues",
        alias = "write-queues",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub write_queues: Option<i64>,

    /// Riptide only: L0 extents at which a minor compaction merges L0 into L1 [default: 96]
    #[arg(
        long = "level0_extents_trigger",
        alias = "level0-extents-trigger",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub level0_extents_trigger: Option<i64>,

    /// Riptide only: L1 extents at which a major compaction merges L1 into L2 [default: 128]
    #[arg(
        long = "level1_extents_trigger",
        alias = "level1-extents-trigger",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub level1_extents_trigger: Option<i64>,

    /// Riptide only: the L1 trigger grows with L2, to
    /// max(level1_extents_trigger, sqrt(2 x level0_extents_trigger x L2 extents)) [default: true]
    #[arg(
        long = "level1_dynamic_trigger",
        alias = "level1-dynamic-trigger",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub level1_dynamic_trigger: Option<bool>,

    /// Riptide only: once the block cache is full, point lookups that miss it read only the
    /// block's tail and the key's restart region, and a random one miss in 8 caches the block
    /// [default: true]
    #[arg(
        long = "partial_block_reads",
        alias = "partial-block-reads",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub partial_block_reads: Option<bool>,

    /// Puts (or deletes) per WriteBatch in write benchmarks
    #[arg(
        long = "batch_size",
        alias = "batch-size",
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub batch_size: i64,

    /// Print the aggregate throughput to stderr every N seconds; 0 = never
    #[arg(
        long = "stats_interval_seconds",
        alias = "stats-interval-seconds",
        value_name = "SECONDS",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub stats_interval_seconds: i64,
}

impl BenchFlags {
    /// Turns the all-defaults flags into the default workload (the README's main job): the
    /// default benchmarks over 1,000,000 keys of 16+100 bytes, with [`DEFAULT_WORKLOAD_READS`]
    /// reads per read benchmark so the whole run stays well under a minute on 2 cores.
    pub fn apply_default_workload(&mut self) {
        self.reads = DEFAULT_WORKLOAD_READS;
    }
}

/// Parses a db_bench boolean: 0/1/true/false (also yes/no/on/off), case-insensitive.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("expected 0, 1, true or false, got `{s}`")),
    }
}

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
}

impl Benchmark {
    /// Every benchmark, in the order of the help text.
    pub const ALL: [Benchmark; 18] = [
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
            | Benchmark::ReadWhileWriting => "read",
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

/// Validated settings of one `riptide bench` run.
#[derive(Debug, Clone)]
pub struct Config {
    pub benchmarks: Vec<Benchmark>,
    pub num: u64,
    pub reads: u64,
    pub writes: u64,
    pub deletes: u64,
    pub threads: usize,
    pub key_size: usize,
    pub value_size: usize,
    pub sync: bool,
    pub disable_wal: bool,
    pub histogram: bool,
    /// `--statistics` (RocksDB's statistics object).
    #[cfg_attr(not(feature = "bench-rocksdb"), allow(dead_code))]
    pub statistics: bool,
    pub db: PathBuf,
    pub use_existing_db: bool,
    /// `None` = run by op counts.
    pub duration: Option<Duration>,
    /// The effective seed base (never 0).
    pub seed: u64,
    /// True when `--seed=0` was replaced by [`DEFAULT_SEED`].
    pub seed_defaulted: bool,
    pub async_commit_depth: usize,
    pub batch_size: usize,
    pub stats_interval: Option<Duration>,
    /// The engine under test.
    pub engine: EngineKind,
    /// Block cache bytes (`--cache_size`; for Riptide also in [`Config::options`], as are the
    /// other engine settings below).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub cache_size: usize,
    /// Data block bytes.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub block_size: usize,
    /// Bloom filter bits per key; 0 = none.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub bloom_bits: u32,
    /// Entries between restart points in data blocks.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub block_restart_interval: usize,
    /// Block compression.
    pub compression: Compression,
    /// Row cache bytes; 0 = none.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub row_cache_size: usize,
    /// `--read_random_exp_range` (0 = uniform keys).
    pub read_random_exp_range: f64,
    /// `--zipf` (precomputed), if given.
    pub zipf: Option<super::keys::Zipf>,
    /// `--compression_ratio` of the generated values.
    pub compression_ratio: f64,
    /// compact_reuse's `--distinct_pct` rounds (each in 1..=100).
    pub distinct_pcts: Vec<u32>,
    /// compact_reuse's `--reuse_layout`.
    pub reuse_layout: super::compact_reuse::Layout,
    /// xbench's and tsunami's settings.
    pub xbench: super::xbench::XbenchConfig,
    /// `--max_background_flushes` if given (not negative).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub max_background_flushes: Option<usize>,
    /// `--subcompactions` if given.
    #[cfg_attr(not(feature = "bench-rocksdb"), allow(dead_code))]
    pub subcompactions: Option<usize>,
    /// `--max_background_compactions` if given (not negative).
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub max_background_compactions: Option<usize>,
    /// `--level0_file_num_compaction_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_compaction_trigger: Option<usize>,
    /// `--level0_slowdown_writes_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_slowdown_trigger: Option<usize>,
    /// `--level0_stop_writes_trigger` if given.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub level0_stop_trigger: Option<usize>,
    /// `--max_write_buffer_number` if given (RocksDB).
    pub max_write_buffer_number: Option<usize>,
    /// True if `--write_queues` was given (a Riptide-only option).
    pub write_queues_given: bool,
    /// Riptide-only flags that were given (the peers refuse them), by name.
    pub riptide_only_given: Vec<&'static str>,
    /// `--dump_file`.
    pub dump_file: Option<PathBuf>,
    /// Riptide's options (already validated; the peers take their memtable size from here). For
    /// `--engine=riptide` they also carry the mapped flags: block size, bloom bits, compression,
    /// block cache (`--cache_size`), row cache, flush threads and L0 triggers.
    pub options: Options,
    /// The run is the default workload (`riptide bench` with no flags); only shown in the header.
    pub default_workload: bool,
}

/// Most benchmark threads accepted.
pub const MAX_THREADS: i64 = 4096;

fn in_range(flag: &str, v: i64, lo: i64, hi: i64, why: &str) -> Result<i64, BenchError> {
    if v < lo || v > hi {
        return Err(BenchError::Usage(format!("--{flag}={v}: {why}")));
    }
    Ok(v)
}

impl Config {
    /// Checks every flag and builds the run's settings.
    pub fn from_flags(f: &BenchFlags) -> Result<Config, BenchError> {
        let benchmarks = parse_benchmarks(&f.benchmarks)?;
        let num = in_range("num", f.num, 1, i64::MAX, "must be at least 1")? as u64;
        let per_thread = |v: i64| if v < 0 { num } else { v as u64 };
        let threads = in_range("threads", f.threads, 1, MAX_THREADS, "must be in 1..=4096")? as usize;
        let key_size = in_range(
            "key_size",
            f.key_size,
            8,
            MAX_KEY_SIZE as i64,
            "must be in 8..=65536 (keys start with the 8-byte big-endian key number)",
        )? as usize;
        let value_size = in_range(
            "value_size",
            f.value_size,
            0,
            MAX_VALUE_SIZE as i64,
            "must be in 0..=64 MiB",
        )? as usize;
        let duration = in_range("duration", f.duration, 0, i64::MAX, "must not be negative")? as u64;
        let async_commit_depth = in_range(
            "async_commit_depth",
            f.async_commit_depth,
            0,
            1 << 20,
            "must be in 0..=1048576",
        )? as usize;
        let batch_size = in_range("batch_size", f.batch_size, 1, 1 << 24, "must be at least 1")? as usize;
        // Same bound as riptide's WriteBatch: key + value + 21 bytes of encoding per op.
        let batch_bytes = batch_size as u128 * (key_size + value_size + 21) as u128;
        if batch_bytes > MAX_BATCH_SIZE as u128 {
            return Err(BenchError::Usage(format!(
                "--batch_size={batch_size}: a batch of {batch_bytes} bytes exceeds riptide's limit of {MAX_BATCH_SIZE} bytes"
            )));
        }
        let stats_interval = in_range(
            "stats_interval_seconds",
            f.stats_interval_seconds,
            0,
            i64::MAX,
            "must not be negative",
        )? as u64;
        let (seed, seed_defaulted) = match f.seed {
            0 => (DEFAULT_SEED, true),
            s => (s as u64, false),
        };
        let engine = EngineKind::from_name(&f.engine)?;
        let cache_size = in_range("cache_size", f.cache_size, 0, i64::MAX, "must not be negative")? as usize;
        let block_size = in_range(
            "block_size",
            f.block_size,
            1 << 10,
            1 << 20,
            "must be in 1024..=1048576",
        )? as usize;
        let bloom_bits = in_range("bloom_bits", f.bloom_bits, 0, 64, "must be in 0..=64")? as u32;
        let block_restart_interval = in_range(
            "block_restart_interval",
            f.block_restart_interval,
            1,
            128,
            "must be in 1..=128",
        )? as usize;
        let compression = Compression::from_name(&f.compression_type)?;
        let row_cache_size =
            in_range("row_cache_size", f.row_cache_size, 0, i64::MAX, "must not be negative")? as usize;
        let read_random_exp_range = f.read_random_exp_range;
        if !read_random_exp_range.is_finite() || read_random_exp_range < 0.0 {
            return Err(BenchError::Usage(format!(
                "--read_random_exp_range={read_random_exp_range}: must be a finite number >= 0 (0 = uniform keys)"
            )));
        }
        let distinct_pcts = f
            .distinct_pct
            .split(',')
            .map(|p| match p.trim().parse::<u32>() {
                Ok(n) if (1..=100).contains(&n) => Ok(n),
                _ => Err(BenchError::Usage(format!(
                    "--distinct_pct={}: expected percentages in 1..=100 separated by commas",
                    f.distinct_pct
                ))),
            })
            .collect::<Result<Vec<u32>, BenchError>>()?;
        let reuse_layout = super::compact_reuse::Layout::from_name(&f.reuse_layout)?;
        let xbench = xbench_config(f)?;
        if engine == EngineKind::Fjall
            && benchmarks
                .iter()
                .any(|b| matches!(b, Benchmark::XBench | Benchmark::Tsunami))
        {
            return Err(BenchError::Usage(
                "xbench and tsunami run transactions: the fjall adapter has none (use --engine=riptide or rocksdb)"
                    .into(),
            ));
        }
        let zipf = if f.zipf == 0.0 {
            None
        } else if !(f.zipf > 0.0 && f.zipf < 1.0) {
            return Err(BenchError::Usage(format!(
                "--zipf={}: theta must be in (0, 1), e.g. 0.99 (0 = off)",
                f.zipf
            )));
        } else if read_random_exp_range != 0.0 {
            return Err(BenchError::Usage(
                "--zipf and --read_random_exp_range both skew the keys; give one".into(),
            ));
        } else if num > 1 << 28 {
            return Err(BenchError::Usage(format!(
                "--zipf with --num={num}: at most 2^28 keys (the generator sums num terms at start)"
            )));
        } else {
            Some(super::keys::Zipf::new(num, f.zipf))
        };
        let compression_ratio = f.compression_ratio;
        if !(0.0..=1.0).contains(&compression_ratio) {
            return Err(BenchError::Usage(format!(
                "--compression_ratio={compression_ratio}: must be in 0..=1"
            )));
        }
        let max_background_flushes = match f.max_background_flushes {
            Some(v) if v >= 0 => Some(in_range(
                "max_background_flushes",
                v,
                1,
                64,
                "must be in 1..=64 (or negative for the engine's default)",
            )? as usize),
            _ => None,
        };
        let max_background_compactions = match f.max_background_compactions {
            Some(v) if v >= 0 => Some(in_range(
                "max_background_compactions",
                v,
                1,
                64,
                "must be in 1..=64 (or negative for the engine's default)",
            )? as usize),
            _ => None,
        };
        let subcompactions = f
            .subcompactions
            .map(|v| in_range("subcompactions", v, 1, 64, "must be in 1..=64").map(|v| v as usize))
            .transpose()?;
        let trigger = |flag: &str, v: Option<i64>| -> Result<Option<usize>, BenchError> {
            v.map(|v| in_range(flag, v, 1, 1 << 20, "must be in 1..=1048576").map(|v| v as usize))
                .transpose()
        };
        let level0_compaction_trigger = trigger(
            "level0_file_num_compaction_trigger",
            f.level0_file_num_compaction_trigger,
        )?;
        let level0_slowdown_trigger = trigger("level0_slowdown_writes_trigger", f.level0_slowdown_writes_trigger)?;
        let level0_stop_trigger = trigger("level0_stop_writes_trigger", f.level0_stop_writes_trigger)?;
        let max_write_buffer_number = match f.max_write_buffer_number {
            Some(v) => Some(in_range("max_write_buffer_number", v, 2, 1024, "must be in 2..=1024")? as usize),
            None => None,
        };
        let defaults = Options::default();
        let write_buffer_size = match f.write_buffer_size {
            Some(v) => in_range("write_buffer_size", v, 1, i64::MAX, "must be positive")? as usize,
            None => defaults.write_buffer_size,
        };
        let write_queues = match f.write_queues {
            Some(v) => in_range("write_queues", v, 1, 256, "must be in 1..=256")? as usize,
            None => defaults.write_queues,
        };
        let mut options = Options {
            write_buffer_size,
            write_queues,
            ..defaults
        };
        if engine == EngineKind::Riptide {
            // db_bench's flags onto Riptide's options (the peers map them in their adapters).
            options.block_size = block_size;
            options.block_restart_interval = block_restart_interval;
            options.bloom_bits_per_key = bloom_bits;
            options.compression = match compression {
                Compression::None => riptide::Compression::None,
                // Zstd is refused by the Riptide adapter's check below.
                Compression::Lz4 | Compression::Zstd => riptide::Compression::Lz4,
            };
            options.block_cache_size = cache_size;
            options.row_cache_size = row_cache_size;
            if let Some(n) = max_background_flushes {
                options.max_flushes = n;
            }
            if let Some(n) = max_background_compactions {
                options.max_compactions = n;
            }
            if let Some(n) = subcompactions {
                options.compaction_units = n;
            }
            if let Some(n) = level0_compaction_trigger {
                options.level0_layer_trigger = n;
            }
            if let Some(n) = trigger("level0_extents_trigger", f.level0_extents_trigger)? {
                options.level0_extents_trigger = n;
            }
            if let Some(n) = trigger("level1_extents_trigger", f.level1_extents_trigger)? {
                options.level1_extents_trigger = n;
            }
            if let Some(on) = f.partial_block_reads {
                options.partial_block_reads = on;
            }
            if let Some(on) = f.level1_dynamic_trigger {
                options.level1_dynamic_trigger = on;
            }
            if let Some(n) = level0_slowdown_trigger {
                options.level0_slowdown_layers = n;
            }
            if let Some(n) = level0_stop_trigger {
                options.level0_stop_layers = n;
            }
        }
        options.validate().map_err(|e| match e {
            riptide::Error::InvalidOption { option, reason } => {
                BenchError::Usage(format!("--{}: {reason}", flag_of_option(option)))
            }
            other => BenchError::Usage(other.to_string()),
        })?;
        let cfg = Config {
            benchmarks,
            num,
            reads: per_thread(f.reads),
            writes: per_thread(f.writes),
            deletes: per_thread(f.deletes),
            threads,
            key_size,
            value_size,
            sync: f.sync,
            disable_wal: f.disable_wal,
            histogram: f.histogram,
            statistics: f.statistics,
            db: f.db.clone().unwrap_or_else(|| default_db(engine)),
            use_existing_db: f.use_existing_db,
            duration: (duration > 0).then(|| Duration::from_secs(duration)),
            seed,
            seed_defaulted,
            async_commit_depth,
            batch_size,
            stats_interval: (stats_interval > 0).then(|| Duration::from_secs(stats_interval)),
            engine,
            cache_size,
            block_size,
            bloom_bits,
            block_restart_interval,
            compression,
            row_cache_size,
            read_random_exp_range,
            zipf,
            compression_ratio,
            distinct_pcts,
            reuse_layout,
            xbench,
            max_background_flushes,
            max_background_compactions,
            subcompactions,
            level0_compaction_trigger,
            level0_slowdown_trigger,
            level0_stop_trigger,
            max_write_buffer_number,
            write_queues_given: f.write_queues.is_some(),
            riptide_only_given: [
                ("level0_extents_trigger", f.level0_extents_trigger.is_some()),
                ("level1_extents_trigger", f.level1_extents_trigger.is_some()),
                ("partial_block_reads", f.partial_block_reads.is_some()),
                ("level1_dynamic_trigger", f.level1_dynamic_trigger.is_some()),
            ]
            .into_iter()
            .filter_map(|(n, given)| given.then_some(n))
            .collect(),
            dump_file: f.dump_file.clone(),
            options,
            default_workload: false,
        };
        // Flags the chosen engine cannot honour are refused here, before the directory is touched.
        super::engine::check(&cfg)?;
        Ok(cfg)
    }
}

/// Checks xbench's and tsunami's flags.
fn xbench_config(f: &BenchFlags) -> Result<super::xbench::XbenchConfig, BenchError> {
    use super::xbench::{engine::XIsolation, tsunami::TsunamiConfig, Mix, XbenchConfig};
    let range_size = in_range("range_size", f.range_size, 1, 1 << 20, "must be in 1..=1048576")? as usize;
    let txn_queries = in_range("txn_queries", f.txn_queries, 1, 10_000, "must be in 1..=10000")? as usize;
    let lock_timeout_ms = in_range(
        "lock_timeout_ms",
        f.lock_timeout_ms,
        0,
        3_600_000,
        "must be in 0..=3600000 (an hour)",
    )?;
    let rate_ok = |v: f64| v.is_finite() && v > 0.0;
    if !rate_ok(f.tsunami_base_tps) || f.tsunami_base_tps > 1e8 {
        return Err(BenchError::Usage(format!(
            "--tsunami_base_tps={}: must be above 0 and at most 1e8",
            f.tsunami_base_tps
        )));
    }
    if !rate_ok(f.tsunami_factor) || f.tsunami_base_tps * f.tsunami_factor > 1e8 {
        return Err(BenchError::Usage(format!(
            "--tsunami_factor={}: must be above 0, with base x factor at most 1e8 transactions per second",
            f.tsunami_factor
        )));
    }
    let phases: Vec<u64> = f
        .tsunami_phases
        .split(',')
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .ok()
        .filter(|p: &Vec<u64>| p.len() == 3 && p.iter().all(|&s| s <= 86_400) && p[1] > 0)
        .ok_or_else(|| {
            BenchError::Usage(format!(
                "--tsunami_phases={}: expected BEFORE,SPIKE,AFTER in seconds (each at most 86400, SPIKE above 0)",
                f.tsunami_phases
            ))
        })?;
    Ok(XbenchConfig {
        mix: Mix::parse(&f.mix)?,
        range_size,
        txn_queries,
        isolation: XIsolation::from_name(&f.isolation)?,
        lock_timeout: Duration::from_millis(lock_timeout_ms as u64),
        tsunami: TsunamiConfig {
            base_tps: f.tsunami_base_tps,
            factor: f.tsunami_factor,
            phases: [phases[0], phases[1], phases[2]],
            out: f.tsunami_out.clone(),
        },
    })
}

/// The `riptide bench` flag that sets Riptide option `option` (for error messages).
fn flag_of_option(option: &str) -> &str {
    match option {
        "bloom_bits_per_key" => "bloom_bits",
        "block_cache_size" => "cache_size",
        "max_flushes" => "max_background_flushes",
        "max_compactions" => "max_background_compactions",
        "level0_layer_trigger" => "level0_file_num_compaction_trigger",
        "level0_slowdown_layers" => "level0_slowdown_writes_trigger",
        "level0_stop_layers" => "level0_stop_writes_trigger",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        flags: BenchFlags,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        let w =
            Wrap::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_flags(&w.flags).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_db_bench_and_riptide() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.benchmarks.len(), 6);
        assert_eq!(c.benchmarks[0], Benchmark::FillSeq);
        assert_eq!(
            (c.num, c.reads, c.writes, c.deletes),
            (1_000_000, 1_000_000, 1_000_000, 1_000_000)
        );
        assert_eq!((c.threads, c.key_size, c.value_size, c.batch_size), (1, 16, 100, 1));
        assert!(!c.sync && !c.disable_wal && !c.histogram && !c.use_existing_db);
        assert_eq!(c.duration, None);
        assert_eq!((c.seed, c.seed_defaulted), (DEFAULT_SEED, true));
        assert_eq!(c.db, PathBuf::from(DEFAULT_DB));
        assert_eq!(c.options.write_buffer_size, Options::default().write_buffer_size);
        assert_eq!(c.options.write_queues, Options::default().write_queues);
    }

    #[test]
    fn db_bench_spelling_and_booleans() {
        let c = parse(&[
            "--benchmarks=readrandom,,fillseq",
            "--num=50",
            "--reads=7",
            "--writes=-1",
            "--threads=3",
            "--key_size=8",
            "--value_size=0",
            "--sync=true",
            "--disable_wal=0",
            "--histogram",
            "--duration=2",
            "--seed=9",
            "--async_commit_depth=16",
            "--write_buffer_size=1048576",
            "--write_queues=2",
            "--batch_size=4",
            "--use_existing_db=1",
        ])
        .unwrap();
        assert_eq!(c.benchmarks, vec![Benchmark::ReadRandom, Benchmark::FillSeq]);
        assert_eq!((c.num, c.reads, c.writes, c.threads), (50, 7, 50, 3));
        assert!(c.sync && !c.disable_wal && c.histogram && c.use_existing_db);
        assert_eq!(c.duration, Some(Duration::from_secs(2)));
        assert_eq!((c.seed, c.seed_defaulted), (9, false));
        assert_eq!((c.async_commit_depth, c.batch_size), (16, 4));
        assert_eq!((c.options.write_buffer_size, c.options.write_queues), (1 << 20, 2));
        // Space-separated values work for non-boolean flags too.
        assert_eq!(parse(&["--num", "12"]).unwrap().num, 12);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        for (args, needle) in [
            (&["--key_size=4"][..], "--key_size=4"),
            (&["--num=0"], "--num=0"),
            (&["--threads=0"], "--threads=0"),
            (&["--batch_size=0"], "--batch_size=0"),
            (&["--duration=-1"], "--duration=-1"),
            (&["--benchmarks=fillseq,nope"], "unknown benchmark `nope`"),
            (&["--benchmarks=,"], "no benchmark"),
            (&["--write_buffer_size=1000"], "write_buffer_size"),
            (&["--write_queues=0"], "--write_queues=0"),
            (&["--sync=maybe"], "expected 0, 1, true or false"),
            (&["--value_size=100000000"], "--value_size"),
            (
                &["--batch_size=16000000", "--value_size=100"],
                "exceeds riptide's limit",
            ),
            (&["--no_such_flag=1"], "no_such_flag"),
        ] {
            let err = parse(args).expect_err(needle);
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn default_workload_only_shortens_reads() {
        let w = Wrap::try_parse_from(["bench"]).unwrap();
        let mut flags = w.flags.clone();
        flags.apply_default_workload();
        let c = Config::from_flags(&flags).unwrap();
        assert_eq!(
            (c.num, c.reads, c.writes, c.value_size),
            (1_000_000, DEFAULT_WORKLOAD_READS as u64, 1_000_000, 100)
        );
        assert_eq!(c.benchmarks, parse_benchmarks(DEFAULT_BENCHMARKS).unwrap());
    }

    #[test]
    fn db_bench_flags_map_onto_riptide_options() {
        let c = parse(&[
            "--cache_size=1048576",
            "--row_cache_size=4096",
            "--bloom_bits=7",
            "--block_size=4096",
            "--compression_type=lz4",
            "--max_background_flushes=3",
            "--max_background_compactions=5",
            "--level0_file_num_compaction_trigger=2",
            "--level0_slowdown_writes_trigger=5",
            "--level0_stop_writes_trigger=9",
            "--read_random_exp_range=2.5",
            "--compression_ratio=0.25",
            "--statistics",
        ])
        .unwrap();
        let o = &c.options;
        assert_eq!(
            (o.block_cache_size, o.row_cache_size, o.bloom_bits_per_key, o.block_size),
            (1 << 20, 4096, 7, 4096)
        );
        assert_eq!(o.compression, riptide::Compression::Lz4);
        assert_eq!(
            (
                o.max_flushes,
                o.level0_layer_trigger,
                o.level0_slowdown_layers,
                o.level0_stop_layers
            ),
            (3, 2, 5, 9)
        );
        assert_eq!(o.max_compactions, 5);
        assert_eq!((c.read_random_exp_range, c.compression_ratio), (2.5, 0.25));
        assert!(c.statistics);
        // Defaults: db_bench's 8 MiB block cache and no compression (not Riptide's own 256 MiB
        // and lz4), no row cache, Riptide's flush threads and triggers.
        let d = parse(&[]).unwrap();
        let (o, r) = (&d.options, Options::default());
        assert_eq!((o.block_cache_size, o.row_cache_size), (8 << 20, 0));
        assert_eq!(o.compression, riptide::Compression::None);
        assert_eq!((o.bloom_bits_per_key, o.block_size), (10, 16 << 10));
        assert_eq!(
            (o.max_flushes, o.level0_layer_trigger),
            (r.max_flushes, r.level0_layer_trigger)
        );
        assert_eq!((d.read_random_exp_range, d.compression_ratio), (0.0, 0.5));
        // db_bench's -1: the engine's default.
        assert_eq!(
            parse(&["--max_background_flushes=-1"]).unwrap().max_background_flushes,
            None
        );
    }

    #[test]
    fn bool_parser() {
        for t in ["1", "true", "TRUE", "yes", "on"] {
            assert_eq!(parse_bool(t), Ok(true));
        }
        for f in ["0", "false", "False", "no", "off"] {
            assert_eq!(parse_bool(f), Ok(false));
        }
        assert!(parse_bool("2").is_err());
    }

    #[test]
    fn benchmark_names_round_trip() {
        for b in Benchmark::ALL {
            assert_eq!(Benchmark::from_name(b.name()), Some(b));
            assert!(!(b.is_meta() && (b.writes() || b.fresh_db())), "{b:?}");
        }
        assert!(Benchmark::Flush.is_meta() && Benchmark::LevelStats.is_meta() && !Benchmark::ReadRandom.is_meta());
        assert!(Benchmark::FillSeq.fresh_db() && Benchmark::FillRandom.fresh_db() && !Benchmark::Overwrite.fresh_db());
    }
}
