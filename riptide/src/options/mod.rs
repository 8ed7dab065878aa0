//! Options of a database instance, of writes and of reads, with defaults and validation.
//!
//! Invariant: [`Options::validate`] runs at [`crate::Db::open`]; an out-of-range value is an
//! [`Error::InvalidOption`] naming the field, never a panic or a silent clamp later.

use crate::error::{Error, Result};
use crate::fs::{FileSystem, PosixFs};
pub use crate::table_options::{Compression, DEFAULT_COMPRESSION_PER_LEVEL};
use crate::tier::{ObjectStore, RetryPolicy, Tier};
use crate::Snapshot;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Largest user key accepted, in bytes (64 KiB).
pub const MAX_KEY_SIZE: usize = 64 << 10;
/// Largest value accepted, in bytes (64 MiB).
pub const MAX_VALUE_SIZE: usize = 64 << 20;
/// Largest write batch accepted, encoded, in bytes (256 MiB).
pub const MAX_BATCH_SIZE: usize = 256 << 20;

/// How recovery treats damage in the redo log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Default. A torn last record of the newest segment (a write cut short by a crash) is
    /// truncated; any other damage is a [`Error::Corruption`] and the open fails.
    #[default]
    TolerateCorruptedTail,
    /// Any damage, even a torn tail, fails the open.
    AbsoluteConsistency,
    /// Recover up to the first damaged record anywhere and drop everything after it (later
    /// segments too). The result is a consistent prefix; writes after the damage are lost.
    PointInTime,
}

/// Options of a database instance. Build with `Options::default()` and struct update syntax.
#[derive(Clone)]
pub struct Options {
    /// File system every byte goes through. Default: [`PosixFs`].
    pub fs: Arc<dyn FileSystem>,
    /// Create the directory and an empty database if none exists. Default: true.
    pub create_if_missing: bool,
    /// Fail if a database already exists. Default: false.
    pub error_if_exists: bool,
    /// Size at which a sub-table's active memtable becomes immutable and a new one takes writes.
    /// Default: 64 MiB. Range: 64 KiB ..= 16 GiB.
    pub write_buffer_size: usize,
    /// Immutable memtables per sub-table at which each write group is delayed by
    /// `slowdown_delay_micros`. Default: 12.
    pub immutable_slowdown_trigger: usize,
    /// Immutable memtables per sub-table at which writers stop until flushes bring the count
    /// down. Default: 16.
    pub immutable_stop_trigger: usize,
    /// Delay added to each write group while slowed down. Default: 1000 µs.
    pub slowdown_delay_micros: u64,
    /// Number of write task queues; a writer joins queue `thread % write_queues`. Default: 4.
    pub write_queues: usize,
    /// Most writes in one commit group. Default: 128.
    pub max_group_size: usize,
    /// Most bytes of batches in one commit group (the first batch is always taken). Default: 4 MiB.
    pub max_group_bytes: usize,
    /// Parallel memtable insertion (X-Engine's stage 3): a commit group's leader invites up
    /// to this many of its waiting followers to insert their own batches while it inserts the
    /// rest; a follower not scheduled in time costs nothing (the leader inserts its batch).
    /// 0: the leader inserts the whole group. Default: the machine's cores minus one, at most
    /// 63. Range: 0 ..= 1024.
    pub parallel_insert_helpers: usize,
    /// How long a writer waiting for its commit polls (yielding the CPU between looks) before
    /// it sleeps: a commit that lands meanwhile costs neither a futex sleep nor a wake-up, and
    /// the poller's core does not go idle. 0: sleep at once. Default: 50 µs (2 cores, 64
    /// threads of zipf xbench: +22 % transactions/s against 0, medians of 3). Range: 0 ..=
    /// 10,000 µs.
    pub write_wait_spin_micros: u64,
    /// A writer polling for its commit stops polling and sleeps once the CPU proves
    /// contended (three of its yields each gave its core to another thread for 3 µs or more),
    /// as RocksDB's adaptive yield does. Default: false (16 cores, fillrandom at 64 threads:
    /// 0.81x the writes/s of polling to the end of the budget, one run; see
    /// docs/write-path.md).
    pub write_wait_adaptive: bool,
    /// The log driver commits the groups of a flush round itself (stage 4: advance the
    /// visible LSN, complete and wake their writers) when they are at most this many; a larger
    /// round's commit is handed to one of its waiting writers, so the driver starts the next
    /// log write at once. 0: hand every round over (when one of its writers waits). Default:
    /// `usize::MAX`, the driver commits every round (16 cores: handing over rounds of more
    /// than 4 groups cost xbench zipf 10–15 %, one run each; see docs/write-path.md).
    pub driver_commit_groups: usize,
    /// How long a writer that finds one of the write pipeline's short-held mutexes taken
    /// (its write queue, the log buffer of stage 1, the log driver's, the commit window)
    /// watches it before it blocks, and how long a commit group's leader watches its queue's
    /// previous group in stage 1 before it sleeps: a section of a few hundred nanoseconds
    /// then passes to a running thread instead of one a futex must wake. 0: block at once.
    /// Default: 10,000 ns on a machine with 8 cores or more, else 0 (16 cores: fillrandom at
    /// 4 / 16 / 64 threads 1.07 / 1.10 / 1.04x and zipf xbench at 16 / 64 threads 1.09 /
    /// 1.25x with 2,000 ns against 0; 10,000 ns against 2,000: fillrandom 1.04 / 1.04x at 4 /
    /// 16 threads, xbench 1.10x at 64; 2 cores, where the holder is often not running: 2,000 ns against 0
    /// gave fillrandom 0.90–1.04x and xbench 0.94–0.98x). Range: 0 ..= 100,000 ns.
    pub write_lock_spin_nanos: u64,
    /// Size at which the redo log rolls over to a new segment. Default: 64 MiB. Min: 64 KiB.
    pub redo_segment_size: u64,
    /// Once a commit waits for durability (`WriteOptions::sync`), zero-fill the redo segment
    /// 0.5–2 MiB ahead of its appends, so each commit's fdatasync writes its records only instead
    /// of also journaling the file's new length (as InnoDB's preallocated log files do). Off for
    /// a file system that allocates on every overwrite anyway (copy-on-write: btrfs, ZFS).
    /// Default: true.
    pub redo_preallocate: bool,
    /// How recovery treats redo-log damage. Default: [`RecoveryMode::TolerateCorruptedTail`].
    pub recovery_mode: RecoveryMode,
    /// At a clean close, flush every memtable to L0 and delete the redo segments, so the next
    /// open replays nothing. When false, close only syncs the redo log. Default: true.
    pub flush_on_close: bool,
    /// Background threads flushing immutable memtables to L0 (X-Engine's flush workers).
    /// Default: 2. Range: 1 ..= 64.
    pub max_flushes: usize,
    /// Target size of a data block inside an extent, before compression. Default: 16 KiB.
    /// Range: 1 KiB ..= 1 MiB.
    pub block_size: usize,
    /// Compression of the data blocks of extents in each level (L0, L1, L2). A compaction
    /// into a level whose codec differs from its inputs' recompresses the blocks it copies
    /// (`LevelStats::blocks_recompressed`; into L2 it merges them). Default:
    /// [`DEFAULT_COMPRESSION_PER_LEVEL`] (LZ4, LZ4, zstd level 3). Tables may override it
    /// ([`crate::TableOptions`]).
    pub compression_per_level: [Compression; crate::LEVELS],
    /// Largest zstd dictionary a sub-table's compactions train for its zstd levels, in bytes
    /// (0 = none). A dictionary is trained once per sub-table from sampled blocks of a
    /// compaction's inputs, kept only if on those samples it saves more than its own copy in
    /// each extent costs, and stored in every extent that uses it; after a restart the
    /// sub-table takes it back from its extents. It pays for rows with shared structure
    /// (JSON-like values, repeated strings), most with small blocks. Default: 0. Range: 0 or
    /// 256 ..= 65536. Tables may override it ([`crate::TableOptions`]).
    pub zstd_dictionary_bytes: usize,
    /// Entries between restart points in a data block (a seek binary-searches the restart
    /// points, then decodes at most this many entries). Default: 16. Range: 1 ..= 128.
    pub block_restart_interval: usize,
    /// Data blocks carry a hash index of their user keys, so a point lookup jumps to its
    /// restart region instead of binary-searching the block (RocksDB's
    /// `kDataBlockBinaryAndHash`; about 1 byte per key). Default: true.
    pub block_hash_index: bool,
    /// Bits per key of the bloom filters over user keys (one per data block, stored with the
    /// extent); 0 = no filter.
    /// Default: 10 (about 1% false positives). Range: 0 ..= 32.
    pub bloom_bits_per_key: u32,
    /// Once the block cache is (15/16) full, a point lookup that misses it reads only the
    /// block's tail and the key's restart region (each checked by its own CRC32C) instead of the
    /// whole block, and only a random one miss in 8 caches the whole block. Off: every miss
    /// reads and caches the whole block (RocksDB's behaviour). Default: true.
    pub partial_block_reads: bool,
    /// Pointer swizzling (seed 001): an open extent keeps a weak reference to each of its
    /// blocks in the block cache, so a read of a cached block skips the cache's hash lookup and
    /// lock; an evicted block is freed as without it. Default: true.
    pub block_swizzling: bool,
    /// Capacity of the block cache (decoded data blocks, shared by all sub-tables), in bytes.
    /// 0 disables it. Default: 256 MiB.
    pub block_cache_size: usize,
    /// Open extent readers (index and filter in memory) kept by the table cache. Default: 8192.
    /// Min: 16.
    pub table_cache_size: usize,
    /// Capacity of the row cache (latest versions of hot records, any level, and keys found
    /// absent from every level), in bytes; each row is charged about 100 bytes plus the heap
    /// bytes of rows over 44 bytes. 0 disables it. Like the other caches it allocates as it
    /// fills, so a capacity costs nothing until rows arrive. Default: 0 (off, like RocksDB's
    /// `row_cache`).
    pub row_cache_size: usize,
    /// L0 layers of a sub-table at which each write group is delayed by
    /// `slowdown_delay_micros`. Default: 20.
    pub level0_slowdown_layers: usize,
    /// L0 layers of a sub-table at which writers stop until compaction drains L0. Default: 36.
    pub level0_stop_layers: usize,
    /// L0 layers of a sub-table at which an intra-L0 compaction merges them into one layer.
    /// Default: 8 (X-Engine's MySQL handler's default), so that with the default memtables
    /// (64 MiB: at least about 14 extents per flush) the minor compaction's trigger comes first
    /// and intra-L0 merges only runs of small flushes; an intra-L0 merge of layers that the next
    /// minor compaction takes anyway writes their bytes twice.
    pub level0_layer_trigger: usize,
    /// L0 extents of a sub-table at which a minor compaction merges L0 into L1. Default: 96
    /// (192 MiB).
    pub level0_extents_trigger: usize,
    /// L1 extents of a sub-table at which a major compaction merges L1 into L2. Default: 128
    /// (256 MiB). With `level1_dynamic_trigger` this is the smallest trigger.
    pub level1_extents_trigger: usize,
    /// The L1 trigger grows with L2: a major compaction is due at
    /// `max(level1_extents_trigger, ceil(sqrt(2 * level0_extents_trigger * L2 extents)))` L1
    /// extents, the L1 size that minimises the bytes minor plus major compactions write per
    /// byte flushed (`docs/compaction.md`, "The L1 trigger"). Without it a major compaction
    /// rewrites all of a large L2 for every `level1_extents_trigger` extents of L1, so write
    /// amplification grows with the database. Like X-Engine's `dynamic_trigger_adjust` and
    /// RocksDB's `level_compaction_dynamic_level_bytes`. The price is space: the larger L1
    /// holds versions not yet merged into L2 (`docs/PERFORMANCE.md`: after a 10-minute
    /// fill, write amplification 5.73 against 7.13 and 17 % more disk). Default: true.
    pub level1_dynamic_trigger: bool,
    /// Bytes pending compaction in a sub-table (all of L0 plus L1 beyond its trigger) at which
    /// each write group is delayed; 0 means no limit (as in RocksDB). Default: 8 GiB.
    pub pending_compaction_slowdown_bytes: u64,
    /// Bytes pending compaction at which writers stop until compaction catches up; 0 means no
    /// limit (as in RocksDB). Default: 32 GiB.
    pub pending_compaction_stop_bytes: u64,
    /// Compactions re-link extents and copy data blocks that overlap nothing instead of
    /// rewriting them (X-Engine's data reuse). Default: true.
    pub compaction_reuse: bool,
    /// Compaction units per job: threads that run a job's tasks (decode, merge, encode) in
    /// parallel. Default: 2. Range: 1 ..= 64.
    pub compaction_units: usize,
    /// Most input per compaction task, in extents' worth of data (2 MiB each): small extents
    /// share a task, so their rows are packed into full output extents. A group of more
    /// overlapping extents than this is cut between its block groups into pieces that units
    /// run in parallel (when `compaction_units > 1`); smaller groups are never split.
    /// Default: 32. Min: 1.
    pub compaction_task_extents: usize,
    /// Compaction tasks whose inputs are read ahead (read-ahead hints) while units work.
    /// Default: 2.
    pub compaction_prefetch: usize,
    /// Test hook: every n-th task a unit is given is rejected and run on the job thread instead
    /// (the CPU fallback path). 0 = never.
    #[doc(hidden)]
    pub compaction_unit_reject_every: u64,
    /// Test hook: closed ranges larger than a task are cut into pieces of about this many
    /// input bytes (0 = the automatic size, at least 16 extents' worth).
    #[doc(hidden)]
    pub compaction_piece_bytes: u64,
    /// Compaction threads; jobs of different sub-tables run in parallel up to this many, one
    /// job per sub-table at a time. Default: 1. Range: 1 ..= 64.
    pub max_compactions: usize,
    /// Slog bytes after which the metadata is checkpointed and the slog restarted.
    /// Default: 16 MiB. Min: 4 KiB.
    pub slog_checkpoint_bytes: u64,
    /// Slots of 2 MiB per data file (one holds the file header). Default: 5120 (10 GiB).
    /// Range: 2 ..= 65536.
    pub extents_per_file: u32,
    /// Free 2 MiB slots that keep their disk blocks, so the extents written there next overwrite
    /// them instead of allocating blocks again: at most this many, and at most one for every
    /// `used_slots_per_kept_slot` slots of live extents. The disk blocks of freed slots beyond
    /// that are given back to the file system (hole punching) by a background thread, never by
    /// the thread that frees them. Default: 64 (128 MiB). Range: 0 ..= 1,048,576.
    pub free_slots_kept: u32,
    /// Slots of live extents per free slot kept with its disk blocks (see `free_slots_kept`),
    /// so that a database's size on disk follows its data: with 16, the kept slots add at most
    /// about 6 % to the extents at rest. 0: no such limit (only `free_slots_kept`).
    /// Default: 16.
    pub used_slots_per_kept_slot: u32,
    /// The object store of the object tier (seed 003): S3 through the `riptide-s3` crate, a
    /// directory ([`crate::tier::DirObjectStore`]), or your own. Its credentials come from
    /// the store's own configuration (the environment, a profile), never from the database
    /// directory. Required when `l2_tier` is [`Tier::Object`] or the database already has
    /// extents in the object tier. Default: none.
    pub object_store: Option<Arc<dyn ObjectStore>>,
    /// Where L2 extents written from now on live; tables may override it
    /// ([`crate::TableOptions::l2_tier`]). L0 and L1 are always local. Default:
    /// [`Tier::Local`].
    pub l2_tier: Tier,
    /// Bytes of local disk (in `<db>/extent-cache/`) that cache whole object-tier extents,
    /// least recently used evicted first; scans and compactions read whole extents into it,
    /// and new extents are cached as they are uploaded. 0 = no cache: every read of an
    /// object-tier block is a ranged GET. Default: 1 GiB.
    pub extent_cache_size: u64,
    /// How long an object-tier extent that no metadata names any more stays in the store
    /// before it is deleted (readers elsewhere, such as a read-only open of the same store,
    /// may still be reading it). Default: 5 minutes.
    pub object_delete_grace: Duration,
    /// How object-store requests that fail transiently are retried. Default:
    /// [`RetryPolicy::default`].
    pub object_retry: RetryPolicy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fs: Arc::new(PosixFs),
            create_if_missing: true,
            error_if_exists: false,
            write_buffer_size: 64 << 20,
            immutable_slowdown_trigger: 12,
            immutable_stop_trigger: 16,
            slowdown_delay_micros: 1000,
            write_queues: 4,
            max_group_size: 128,
            max_group_bytes: 4 << 20,
            parallel_insert_helpers: std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 64) - 1,
            write_wait_spin_micros: 50,
            write_wait_adaptive: false,
            driver_commit_groups: usize::MAX,
            write_lock_spin_nanos: default_write_lock_spin_nanos(),
            redo_segment_size: 64 << 20,
            redo_preallocate: true,
            recovery_mode: RecoveryMode::default(),
            flush_on_close: true,
            max_flushes: 2,
            block_size: 16 << 10,
            block_restart_interval: 16,
            block_hash_index: true,
            partial_block_reads: true,
            block_swizzling: true,
            bloom_bits_per_key: 10,
            compression_per_level: DEFAULT_COMPRESSION_PER_LEVEL,
            zstd_dictionary_bytes: 0,
            block_cache_size: 256 << 20,
            table_cache_size: 8192,
            row_cache_size: 0,
            level0_slowdown_layers: 20,
            level0_stop_layers: 36,
            level0_layer_trigger: 8,
            level0_extents_trigger: 96,
            level1_extents_trigger: 128,
            level1_dynamic_trigger: true,
            pending_compaction_slowdown_bytes: 8 << 30,
            pending_compaction_stop_bytes: 32 << 30,
            compaction_reuse: true,
            max_compactions: 1,
            compaction_units: 2,
            compaction_task_extents: 32,
            compaction_prefetch: 2,
            compaction_unit_reject_every: 0,
            compaction_piece_bytes: 0,
            slog_checkpoint_bytes: 16 << 20,
            extents_per_file: 5120,
            free_slots_kept: 64,
            used_slots_per_kept_slot: 16,
            object_store: None,
            l2_tier: Tier::Local,
            extent_cache_size: 1 << 30,
            object_delete_grace: Duration::from_secs(300),
            object_retry: RetryPolicy::default(),
        }
    }
}

/// `lz4,lz4,zstd:3`: codecs as [`Compression::parse`] reads them, comma-separated.
fn codec_names(codecs: &[Compression]) -> String {
    codecs.iter().map(Compression::name).collect::<Vec<_>>().join(",")
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("fs", &self.fs)
            .field("create_if_missing", &self.create_if_missing)
            .field("error_if_exists", &self.error_if_exists)
            .field("write_buffer_size", &self.write_buffer_size)
            .field("immutable_slowdown_trigger", &self.immutable_slowdown_trigger)
            .field("immutable_stop_trigger", &self.immutable_stop_trigger)
            .field("slowdown_delay_micros", &self.slowdown_delay_micros)
            .field("write_queues", &self.write_queues)
            .field("max_group_size", &self.max_group_size)
            .field("max_group_bytes", &self.max_group_bytes)
            .field("parallel_insert_helpers", &self.parallel_insert_helpers)
            .field("write_wait_spin_micros", &self.write_wait_spin_micros)
            .field("write_wait_adaptive", &self.write_wait_adaptive)
            .field("driver_commit_groups", &self.driver_commit_groups)
            .field("write_lock_spin_nanos", &self.write_lock_spin_nanos)
            .field("redo_segment_size", &self.redo_segment_size)
            .field("redo_preallocate", &self.redo_preallocate)
            .field("recovery_mode", &self.recovery_mode)
            .field("flush_on_close", &self.flush_on_close)
            .field("max_flushes", &self.max_flushes)
            .field("block_size", &self.block_size)
            .field("block_restart_interval", &self.block_restart_interval)
            .field("block_hash_index", &self.block_hash_index)
            .field("partial_block_reads", &self.partial_block_reads)
            .field("block_swizzling", &self.block_swizzling)
            .field("bloom_bits_per_key", &self.bloom_bits_per_key)
            .field(
                "compression_per_level",
                &format_args!("{}", codec_names(&self.compression_per_level)),
            )
            .field("zstd_dictionary_bytes", &self.zstd_dictionary_bytes)
            .field("block_cache_size", &self.block_cache_size)
            .field("table_cache_size", &self.table_cache_size)
            .field("row_cache_size", &self.row_cache_size)
            .field("level0_slowdown_layers", &self.level0_slowdown_layers)
            .field("level0_stop_layers", &self.level0_stop_layers)
            .field("level0_layer_trigger", &self.level0_layer_trigger)
            .field("level0_extents_trigger", &self.level0_extents_trigger)
            .field("level1_extents_trigger", &self.level1_extents_trigger)
            .field("level1_dynamic_trigger", &self.level1_dynamic_trigger)
            .field(
                "pending_compaction_slowdown_bytes",
                &self.pending_compaction_slowdown_bytes,
            )
            .field("pending_compaction_stop_bytes", &self.pending_compaction_stop_bytes)
            .field("compaction_reuse", &self.compaction_reuse)
            .field("max_compactions", &self.max_compactions)
            .field("compaction_units", &self.compaction_units)
            .field("compaction_task_extents", &self.compaction_task_extents)
            .field("compaction_prefetch", &self.compaction_prefetch)
            .field("slog_checkpoint_bytes", &self.slog_checkpoint_bytes)
            .field("extents_per_file", &self.extents_per_file)
            .field("free_slots_kept", &self.free_slots_kept)
            .field("used_slots_per_kept_slot", &self.used_slots_per_kept_slot)
            .field("object_store", &self.object_store.as_ref().map(|s| s.location()))
            .field("l2_tier", &self.l2_tier)
            .field("extent_cache_size", &self.extent_cache_size)
            .field("object_delete_grace", &self.object_delete_grace)
            .field(
                "object_retry",
                &format_args!(
                    "backoff {:?}..{:?} deadline {:?}",
                    self.object_retry.first_backoff, self.object_retry.max_backoff, self.object_retry.deadline
                ),
            )
            .finish()
    }
}

/// Cores from which [`Options::write_lock_spin_nanos`] spins by default: below it a spinner
/// mostly watches a holder that is not running.
const SPIN_FROM_CORES: usize = 8;

/// [`Options::write_lock_spin_nanos`]'s default on this machine.
fn default_write_lock_spin_nanos() -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores >= SPIN_FROM_CORES {
        10_000
    } else {
        0
    }
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        option,
        reason: reason.into(),
    }
}

impl Options {
    /// Checks every option; the first bad one is returned as [`Error::InvalidOption`].
    pub fn validate(&self) -> Result<()> {
        if self.l2_tier == Tier::Object && self.object_store.is_none() {
            return Err(invalid("l2_tier", "L2 in the object tier needs Options::object_store"));
        }
        self.object_retry.validate()?;
        if !(64 << 10..=16 << 30).contains(&self.write_buffer_size) {
            return Err(invalid(
                "write_buffer_size",
                format!("{} is outside 64 KiB ..= 16 GiB", self.write_buffer_size),
            ));
        }
        if self.immutable_stop_trigger == 0 {
            return Err(invalid("immutable_stop_trigger", "must be at least 1"));
        }
        if self.immutable_slowdown_trigger > self.immutable_stop_trigger {
            return Err(invalid(
                "immutable_slowdown_trigger",
                format!(
                    "{} exceeds immutable_stop_trigger {}",
                    self.immutable_slowdown_trigger, self.immutable_stop_trigger
                ),
            ));
        }
        if self.slowdown_delay_micros > 1_000_000 {
            return Err(invalid("slowdown_delay_micros", "must be at most 1 s"));
        }
        if !(1..=256).contains(&self.write_queues) {
            return Err(invalid(
                "write_queues",
                format!("{} is outside 1 ..= 256", self.write_queues),
            ));
        }
        if self.parallel_insert_helpers > 1024 {
            return Err(invalid(
                "parallel_insert_helpers",
                format!("{} is over 1024", self.parallel_insert_helpers),
            ));
        }
        if self.write_wait_spin_micros > 10_000 {
            return Err(invalid(
                "write_wait_spin_micros",
                format!("{} is over 10,000 µs", self.write_wait_spin_micros),
            ));
        }
        if self.write_lock_spin_nanos > 100_000 {
            return Err(invalid(
                "write_lock_spin_nanos",
                format!("{} is over 100,000 ns", self.write_lock_spin_nanos),
            ));
        }
        if self.max_group_size == 0 {
            return Err(invalid("max_group_size", "must be at least 1"));
        }
        if self.max_group_bytes == 0 {
            return Err(invalid("max_group_bytes", "must be at least 1"));
        }
        if self.redo_segment_size < 64 << 10 {
            return Err(invalid("redo_segment_size", "must be at least 64 KiB"));
        }
        if !(1..=64).contains(&self.max_flushes) {
            return Err(invalid(
                "max_flushes",
                format!("{} is outside 1 ..= 64", self.max_flushes),
            ));
        }
        if !(1 << 10..=1 << 20).contains(&self.block_size) {
            return Err(invalid(
                "block_size",
                format!("{} is outside 1 KiB ..= 1 MiB", self.block_size),
            ));
        }
        if !(1..=128).contains(&self.block_restart_interval) {
            return Err(invalid(
                "block_restart_interval",
                format!("{} is outside 1 ..= 128", self.block_restart_interval),
            ));
        }
        if self.bloom_bits_per_key > 32 {
            return Err(invalid("bloom_bits_per_key", "must be at most 32"));
        }
        if self.table_cache_size < 16 {
            return Err(invalid("table_cache_size", "must be at least 16"));
        }
        if self.level0_stop_layers == 0 {
            return Err(invalid("level0_stop_layers", "must be at least 1"));
        }
        if self.level0_slowdown_layers > self.level0_stop_layers {
            return Err(invalid(
                "level0_slowdown_layers",
                format!(
                    "{} exceeds level0_stop_layers {}",
                    self.level0_slowdown_layers, self.level0_stop_layers
                ),
            ));
        }
        if self.level0_layer_trigger == 0 {
            return Err(invalid("level0_layer_trigger", "must be at least 1"));
        }
        if self.level0_extents_trigger == 0 {
            return Err(invalid("level0_extents_trigger", "must be at least 1"));
        }
        if self.level1_extents_trigger == 0 {
            return Err(invalid("level1_extents_trigger", "must be at least 1"));
        }
        // 0 means no limit, so only two limits can be out of order.
        if self.pending_compaction_stop_bytes != 0
            && self.pending_compaction_slowdown_bytes > self.pending_compaction_stop_bytes
        {
            return Err(invalid(
                "pending_compaction_slowdown_bytes",
                "exceeds pending_compaction_stop_bytes",
            ));
        }
        if !(1..=64).contains(&self.compaction_units) {
            return Err(invalid(
                "compaction_units",
                format!("{} is outside 1 ..= 64", self.compaction_units),
            ));
        }
        if self.compaction_task_extents == 0 {
            return Err(invalid("compaction_task_extents", "must be at least 1"));
        }
        if !(1..=64).contains(&self.max_compactions) {
            return Err(invalid(
                "max_compactions",
                format!("{} is outside 1 ..= 64", self.max_compactions),
            ));
        }
        if self.slog_checkpoint_bytes < 4 << 10 {
            return Err(invalid("slog_checkpoint_bytes", "must be at least 4 KiB"));
        }
        if !(2..=65536).contains(&self.extents_per_file) {
            return Err(invalid(
                "extents_per_file",
                format!("{} is outside 2 ..= 65536", self.extents_per_file),
            ));
        }
        crate::table_options::validate_dictionary_bytes(self.zstd_dictionary_bytes)?;
        for c in &self.compression_per_level {
            c.validate("compression_per_level")?;
        }
        if self.free_slots_kept > 1 << 20 {
            return Err(invalid(
                "free_slots_kept",
                format!("{} is above 1,048,576", self.free_slots_kept),
            ));
        }
        Ok(())
    }
}

/// Options of one write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `fdatasync` the redo log before acknowledging. With `sync`, an acknowledged write
    /// survives power loss; without it, it survives a process crash. Default: false.
    pub sync: bool,
    /// Skip the redo log: the write is lost on any crash (like RocksDB's `disableWAL`), but
    /// a clean close flushes the memtables holding it, whatever `Options::flush_on_close`
    /// says. Refused together with `sync`. Default: false.
    pub disable_wal: bool,
    /// Fail with [`Error::WouldStall`] instead of waiting when writes are stalled. Default: false.
    pub no_slowdown: bool,
    /// On a replicated database: handed to the replicator with the writes
    /// (`ReplicatedWrites::fence` of the replication module). The Raft replicator refuses to commit
    /// them in any other term than this one (the term in which the writer's reads were
    /// confirmed). Ignored by a database without a replicator. Default: none.
    pub replication_fence: Option<u64>,
}

impl WriteOptions {
    /// Checks the combination: `sync` with `disable_wal` is refused (there is no log to sync),
    /// as in RocksDB.
    pub fn validate(&self) -> Result<()> {
        if self.sync && self.disable_wal {
            return Err(invalid(
                "sync",
                "cannot be combined with disable_wal (there is no log to sync)",
            ));
        }
        Ok(())
    }
}

/// Options of a read or an iterator.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Read at this snapshot instead of the latest committed state.
    pub snapshot: Option<Snapshot>,
    /// Iterators: smallest key returned (inclusive).
    pub lower_bound: Option<Vec<u8>>,
    /// Iterators: keys must be strictly smaller than this (exclusive).
    pub upper_bound: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests;
