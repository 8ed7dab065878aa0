//! Command-line flags of `riptide bench` (db_bench spelling, `--flag=value`): the clap
//! struct [`BenchFlags`], its defaults and help text. Validation into a [`Config`] is in
//! `config.rs`; the parsed choices live beside it.
//!
//! Flag semantics follow RocksDB's db_bench 7.8: `--reads`/`--writes`/`--deletes` are per-thread
//! op counts where a negative value means `--num`; booleans accept 0/1/true/false (bare `--sync`
//! means true). Anything out of range is a `BenchError::Usage` naming the flag, checked before
//! the database directory is touched.
//!
//! Layering: this module is the bottom of `bench/` with [`super::error`] and [`super::keys`]; it
//! imports nothing else of `bench/`. Every type a flag parses into is defined here (the engine
//! choice in `engine_choice.rs`, the benchmark list in `benchmark.rs`, the settings of
//! compact_reuse, xbench and tsunami in `workload_settings.rs`), and the modules that consume
//! them import them from here, never the other way round.

mod benchmark;
mod config;
mod engine_choice;
mod workload_settings;

pub use benchmark::Benchmark;
pub use config::Config;
#[cfg(any(test, feature = "bench-rocksdb", feature = "bench-fjall"))]
pub use engine_choice::Compression;
pub use engine_choice::EngineKind;
#[cfg(test)]
pub use workload_settings::Mix;
pub use workload_settings::{Layout, TsunamiConfig, XIsolation, XbenchConfig};

use super::keys::DEFAULT_COMPRESSION_RATIO;
use clap::Args;
use std::path::PathBuf;

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
  hotkeysnapshot    write one key, take a snapshot, write --num newer versions of that key, then
                    time min(--reads, 10000) reads of it at the snapshot (riptide only)
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

    /// Database directory [default: ./bench-data/riptide, or ./bench-data/<engine> for another
    /// --engine; `riptide inspect` defaults to ./bench-data/riptide too]
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

    /// Index inside data blocks (db_bench's --data_block_index_type): 0 = binary search only,
    /// 1 = binary search and a hash index; default: each engine's own (riptide 1, rocksdb 0)
    #[arg(long = "data_block_index_type", value_name = "0|1")]
    pub data_block_index_type: Option<i64>,

    /// Bloom filter bits per key; 0 = no filter
    #[arg(
        long = "bloom_bits",
        alias = "bloom-bits",
        value_name = "N",
        default_value_t = DEFAULT_BLOOM_BITS,
        allow_negative_numbers = true
    )]
    pub bloom_bits: i64,

    /// Block compression: none, lz4 or zstd (riptide: L0 and L1; rocksdb: every level but the
    /// bottommost)
    #[arg(
        long = "compression_type",
        alias = "compression-type",
        value_name = "NAME",
        default_value = "none"
    )]
    pub compression_type: String,

    /// Block compression of the bottommost level (riptide: L2): none, lz4 or zstd; default:
    /// --compression_type
    #[arg(
        long = "bottommost_compression_type",
        alias = "bottommost-compression-type",
        value_name = "NAME"
    )]
    pub bottommost_compression_type: Option<String>,

    /// zstd level (riptide, rocksdb)
    #[arg(
        long = "compression_level",
        alias = "compression-level",
        value_name = "N",
        default_value_t = riptide::DEFAULT_ZSTD_LEVEL as i64,
        allow_negative_numbers = true
    )]
    pub compression_level: i64,

    /// Largest zstd dictionary trained for zstd levels, in bytes; 0 = none (riptide:
    /// zstd_dictionary_bytes per table; rocksdb: max_dict_bytes with 100x as many training
    /// bytes)
    #[arg(
        long = "compression_max_dict_bytes",
        alias = "compression-max-dict-bytes",
        value_name = "BYTES",
        default_value_t = 0
    )]
    pub compression_max_dict_bytes: i64,

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

    /// xbench/tsunami on Riptide: release a transaction's row locks once its commit is placed
    /// in the log, before its fsync (early lock release); false holds them until visible
    #[arg(long = "early_lock_release", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub early_lock_release: bool,

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

    /// tsunami: seconds after the last phase that the run may go on draining its backlog (0 =
    /// until every scheduled transaction has committed); transactions not started by then are
    /// reported as left over
    #[arg(long = "tsunami_drain_limit", value_name = "SECONDS", default_value_t = 0)]
    pub tsunami_drain_limit: u64,

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

    /// Riptide only: open extents keep weak references to their cached blocks, so reads of a
    /// cached block skip the block cache lookup (pointer swizzling) [default: true]
    #[arg(
        long = "block_swizzling",
        alias = "block-swizzling",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub block_swizzling: Option<bool>,

    /// Riptide only: most waiting followers a commit group's leader invites to insert their
    /// own batches into the memtables in parallel (X-Engine's stage 3); 0 turns it off
    /// [default: the machine's cores minus one]
    #[arg(
        long = "parallel_insert_helpers",
        alias = "parallel-insert-helpers",
        value_name = "N"
    )]
    pub parallel_insert_helpers: Option<usize>,

    /// Riptide only: how long a writer waiting for its commit polls before it sleeps
    /// [default: 50]
    #[arg(
        long = "write_wait_spin_micros",
        alias = "write-wait-spin-micros",
        value_name = "MICROS"
    )]
    pub write_wait_spin_micros: Option<u64>,

    /// Riptide only: a writer polling for its commit sleeps once the CPU proves contended
    /// (three slow yields) [default: false]
    #[arg(
        long = "write_wait_adaptive",
        alias = "write-wait-adaptive",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub write_wait_adaptive: Option<bool>,

    /// Riptide only: most groups of a flush round the log driver commits itself; a larger
    /// round's commit goes to one of its waiting writers [default: no limit]
    #[arg(long = "driver_commit_groups", alias = "driver-commit-groups", value_name = "N")]
    pub driver_commit_groups: Option<usize>,

    /// Riptide only: how long a writer watches a taken write-pipeline mutex before it blocks;
    /// 0 blocks at once [default: 10000 on 8 cores or more, else 0]
    #[arg(
        long = "write_lock_spin_nanos",
        alias = "write-lock-spin-nanos",
        value_name = "NANOS"
    )]
    pub write_lock_spin_nanos: Option<u64>,

    /// Riptide only: zero-fill the redo log ahead of durable commits so their fdatasync
    /// writes no file-size change [default: true]
    #[arg(
        long = "redo_preallocate",
        alias = "redo-preallocate",
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub redo_preallocate: Option<bool>,

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

    /// The object tier (riptide): --object_store, --object_endpoint, --l2_tier, ...
    #[command(flatten)]
    pub objects: crate::objects::ObjectArgs,
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
