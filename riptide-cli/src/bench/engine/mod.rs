//! The storage engines `riptide bench` can drive, behind one adapter trait, [`BenchEngine`].
//!
//! Every benchmark (`workload.rs`) is written once, generic over [`BenchEngine`], so the
//! same key/value generator, thread model and histograms run on every engine; an engine only
//! supplies batches, point reads, cursors and its own figures. The benchmark code is
//! monomorphised per engine (no dynamic dispatch in the hot loops).
//!
//! Engines: [`riptide`] always; `rocksdb` (RocksDB built from source in release mode by the
//! `rocksdb` crate) behind the cargo feature `bench-rocksdb`; `fjall` behind `bench-fjall`.
//!
//! Rules every adapter keeps:
//! - The write mode (`--sync`, `--disable_wal`) is fixed at [`BenchEngine::open`] and applies to
//!   every [`BenchEngine::write`].
//! - A flag an engine cannot honour is refused by [`BenchEngine::check`] (called from
//!   the driver right after [`Config::from_flags`], before the directory is touched), never ignored: only Riptide has
//!   asynchronous commits (`--async_commit_depth`) and write queues (`--write_queues`); fjall has
//!   no row cache and no flush-thread or L0-trigger settings.
//! - db_bench's meta operations (`flush`, `compact`, `waitforcompaction`, `stats`,
//!   `levelstats`) are adapter methods; each engine does what its own API offers and says so.
//! - Options mirroring Riptide's are set and listed by [`BenchEngine::describe`]; deliberate
//!   differences are in docs/PERFORMANCE.md, section "Peer engines".

pub mod riptide;

#[cfg(feature = "bench-fjall")]
pub mod fjall;
#[cfg(feature = "bench-rocksdb")]
pub mod rocksdb;

pub use super::error::EngineError;
#[cfg(any(test, feature = "bench-rocksdb", feature = "bench-fjall"))]
pub use super::flags::Compression;
pub use super::flags::EngineKind;

use super::error::BenchError;
use super::flags::Config;
use super::keys::{KeyBuf, ValueCursor};

/// What an engine says about itself at the start of a run.
#[derive(Debug, Clone)]
pub struct Description {
    /// Engine name and version, with how it was built.
    pub version: String,
    /// One `(setting, value)` per line of the "Engine options:" block. The settings that mirror
    /// each other use the same names on every engine.
    pub options: Vec<(&'static str, String)>,
}

/// A read view fixed at the moment it was taken (a snapshot), for `hotkeysnapshot`.
pub trait SnapshotReader {
    /// Reads `key` as of the snapshot: the length of its value, or `None` if absent.
    fn get_len(&self, key: &[u8]) -> Result<Option<usize>, EngineError>;
}

/// A position in an engine's key space (its iterator), as RocksDB's raw iterator.
///
/// `key` and `value` may only be called while `valid`. `next` and `prev` work from any valid
/// position; when the cursor runs off either end it becomes invalid. An error makes it invalid
/// and is reported by `status`.
pub trait Cursor {
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the last entry.
    fn seek_to_last(&mut self);
    /// Positions at the first entry with a key at or after `target`.
    fn seek(&mut self, target: &[u8]);
    /// Moves to the next entry.
    fn next(&mut self);
    /// Moves to the previous entry.
    fn prev(&mut self);
    /// True if positioned at an entry.
    fn valid(&self) -> bool;
    /// The current key.
    fn key(&self) -> &[u8];
    /// The current value.
    fn value(&self) -> &[u8];
    /// The error that stopped the cursor, if any.
    fn status(&self) -> Result<(), EngineError>;
}

/// An engine whose writers can stop for good (Riptide: while background flushes keep failing,
/// full memtables stay full). The runner's watchdog asks it whether writes are stuck and, if so,
/// shuts the writers down.
pub trait WriteStopWatch {
    /// Writes committed so far (progress marker).
    fn committed_writes(&self) -> u64;
    /// If the writers can never resume, why (without the benchmark name).
    fn stopped_for_good(&self, cfg: &Config) -> Option<String>;
    /// Makes stalled writers fail soon (Riptide: closes the database).
    fn abort_writers(&self);
}

/// What the bench knows about the run, for the engines' statistics.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunTotals {
    /// Key + value bytes of the puts this run made since the database was (re)opened: the
    /// denominator of write amplification.
    pub user_bytes_written: u64,
}

/// The adapter every benchmark runs through. One value of it is the open database, shared by
/// all benchmark threads.
pub trait BenchEngine: Send + Sync + Sized {
    /// A write batch being built.
    type Batch: Send;
    /// An asynchronous write not yet waited for (engines without asynchronous commits use
    /// [`std::convert::Infallible`]).
    type Pending: Send;
    /// A cursor over the benchmark's key space.
    type Cursor<'a>: Cursor
    where
        Self: 'a;

    /// Refuses the flags this engine cannot honour (called before the directory is touched).
    fn check(cfg: &Config) -> Result<(), BenchError>;

    /// Opens (creating if needed) the database in `cfg.db` with the options mirroring Riptide's
    /// and the write mode of `--sync` / `--disable_wal`.
    fn open(cfg: &Config) -> Result<Self, BenchError>;

    /// The engine's version and effective options, printed at the start of the run.
    fn describe(&self, cfg: &Config) -> Description;

    /// An empty batch for `ops` operations.
    fn new_batch(&self, ops: usize) -> Self::Batch;

    /// Adds a put to `batch`.
    fn put(&self, batch: &mut Self::Batch, key: &[u8], value: &[u8]) -> Result<(), EngineError>;

    /// Adds a delete to `batch`.
    fn delete(&self, batch: &mut Self::Batch, key: &[u8]) -> Result<(), EngineError>;

    /// Applies `batch` atomically in the run's write mode; returns once it is committed (and,
    /// with `--sync`, durable).
    fn write(&self, batch: Self::Batch) -> Result<(), EngineError>;

    /// Submits `batch` and returns at once with a handle for [`BenchEngine::wait`]. Only engines
    /// whose [`BenchEngine::check`] accepts `--async_commit_depth` are ever asked.
    fn write_async(&self, batch: Self::Batch) -> Result<Self::Pending, EngineError>;

    /// Waits until an asynchronous write is committed (and, with `--sync`, durable).
    fn wait(&self, pending: Self::Pending) -> Result<(), EngineError>;

    /// Point read of `key` at the latest state: `read` sees the value if there is one.
    fn get<R>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, EngineError>;

    /// Reads `keys` at the latest state with the engine's multi-get (one consistent view where
    /// the engine has one); returns each value's length, `None` where the key is absent.
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<usize>>, EngineError>;

    /// A fresh cursor seeing the latest committed state (unpositioned).
    fn cursor(&self) -> Result<Self::Cursor<'_>, EngineError>;

    /// db_bench's `flush`: writes every memtable to data files and waits for it. Returns the
    /// bytes the flush wrote to data files, if the engine can tell.
    fn flush(&self) -> Result<Option<u64>, EngineError>;

    /// db_bench's `compact`: compacts everything down to the last level and waits. Returns the
    /// bytes written to data files meanwhile (flush and compaction output), if the engine can
    /// tell.
    fn compact(&self) -> Result<Option<u64>, EngineError>;

    /// compact_reuse's timed step: merges everything flushed down into the last level the way
    /// the engine's own compactions would (no forced rewrite of last-level data nothing
    /// overlaps). Returns the bytes written to data files, if the engine can tell, and a line
    /// on what the merge did (riptide: extents re-linked, blocks copied and merged per level).
    fn compact_merge(&self) -> Result<(Option<u64>, Option<String>), EngineError>;

    /// db_bench's `waitforcompaction`: returns once no flush or compaction is running or due.
    fn wait_for_background_work(&self) -> Result<(), EngineError>;

    /// db_bench's `stats`: the engine's statistics as text (RocksDB: "rocksdb.stats").
    fn stats_report(&self, totals: &RunTotals) -> Result<String, EngineError>;

    /// db_bench's `levelstats`: data files and bytes per level (RocksDB: "rocksdb.levelstats").
    fn level_stats_report(&self) -> Result<String, EngineError>;

    /// Closes the database cleanly.
    fn close(self) -> Result<(), EngineError>;

    /// Write-path counters (commit groups, fsyncs, the commit-time split), row-lock and
    /// mutex-contention counters, for the lines after each write benchmark; `None` = the engine
    /// has no such lines.
    fn profile(&self) -> Option<crate::bench::profile::Profile> {
        None
    }

    /// Engine-specific lines printed once at the end of the run, before closing.
    fn end_of_run_stats(&self, _totals: &RunTotals) -> Vec<String> {
        Vec::new()
    }

    /// The write-stop watchdog's view of the engine, if its writers can stop for good.
    fn write_stop_watch(&self) -> Option<&dyn WriteStopWatch> {
        None
    }

    /// A short state summary (levels, memtables) for `--stats_interval_seconds` lines; `None`
    /// = nothing to add.
    fn interval_status(&self) -> Option<String> {
        None
    }

    /// A snapshot of the current state for `hotkeysnapshot`; `None` = the adapter has none
    /// (the benchmark is then skipped).
    fn snapshot_reader(&self) -> Option<Box<dyn SnapshotReader + '_>> {
        None
    }
}

/// A ratio `hits / (hits + misses)` as a percentage, or "-" without lookups.
pub fn hit_ratio(hits: u64, misses: u64) -> String {
    match hits + misses {
        0 => "-".to_string(),
        n => format!("{:.1}%", 100.0 * hits as f64 / n as f64),
    }
}

/// Megabytes (2^20 bytes, the MB of db_bench's MB/s and of RocksDB's stats) with one decimal.
pub fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_048_576.0)
}

/// `bytes` over `micros` in MB/s (MB = 2^20 bytes), or "-" for no time.
pub fn mb_per_sec(bytes: u64, micros: u64) -> String {
    if micros == 0 {
        "-".to_string()
    } else {
        format!("{:.1} MB/s", bytes as f64 / 1_048_576.0 / (micros as f64 / 1e6))
    }
}

/// Refuses the Riptide-only flags for a peer engine.
#[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
pub fn refuse_riptide_only_flags(cfg: &Config) -> Result<(), BenchError> {
    let engine = cfg.engine.name();
    if cfg.async_commit_depth > 0 {
        return Err(BenchError::Usage(format!(
            "--async_commit_depth={}: the {engine} engine has no asynchronous commit (it would run synchronously); \
             only --engine=riptide supports it",
            cfg.async_commit_depth
        )));
    }
    if cfg.write_queues_given {
        return Err(BenchError::Usage(format!(
            "--write_queues: a Riptide option; the {engine} engine has no write task queues"
        )));
    }
    if let Some(flag) = cfg.riptide_only_given.first() {
        return Err(BenchError::Usage(format!(
            "--{flag}: a Riptide option (its L0/L1 extent triggers); the {engine} engine has no equivalent"
        )));
    }
    Ok(())
}

/// Checks the flags against the chosen engine (see [`BenchEngine::check`]).
pub fn check(cfg: &Config) -> Result<(), BenchError> {
    match cfg.engine {
        EngineKind::Riptide => riptide::RiptideEngine::check(cfg),
        #[cfg(feature = "bench-rocksdb")]
        EngineKind::RocksDb => rocksdb::RocksDbEngine::check(cfg),
        #[cfg(feature = "bench-fjall")]
        EngineKind::Fjall => fjall::FjallEngine::check(cfg),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// The error for an engine this binary lacks (normally caught by [`EngineKind::from_name`]).
pub fn not_built(kind: EngineKind) -> BenchError {
    BenchError::Usage(format!(
        "--engine={}: not built into this binary (cargo feature {})",
        kind.name(),
        kind.feature().unwrap_or("?")
    ))
}

/// A size in bytes for the options block: `8388608 (8.0 MiB)`, `8589934592 (8.0 GiB)`.
pub fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{n} ({:.1} GiB)", n as f64 / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{n} ({:.1} MiB)", n as f64 / 1_048_576.0)
    } else if n >= 1 << 10 {
        format!("{n} ({:.1} KiB)", n as f64 / 1024.0)
    } else {
        format!("{n}")
    }
}

/// The WAL / sync lines shared by the engines' descriptions.
pub fn durability_options(cfg: &Config, wal_name: &str, sync_how: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "wal",
            if cfg.disable_wal {
                format!("off (--disable_wal=1; {wal_name} skipped)")
            } else {
                format!("on ({wal_name})")
            },
        ),
        (
            "sync",
            if cfg.sync {
                format!("1 (every write waits for {sync_how})")
            } else {
                "0 (written to the OS page cache, no fsync)".to_string()
            },
        ),
    ]
}

/// Write batch size of the bulk loads ([`load`]).
pub const LOAD_BATCH: usize = 1000;

/// Writes `n` records with key numbers from `next_key` in batches of [`LOAD_BATCH`].
pub fn load<E: BenchEngine>(
    db: &E,
    n: u64,
    key: &mut KeyBuf,
    vals: &mut ValueCursor<'_>,
    mut next_key: impl FnMut() -> u64,
) -> Result<(), EngineError> {
    let mut left = n;
    while left > 0 {
        let ops = left.min(LOAD_BATCH as u64) as usize;
        let mut batch = db.new_batch(ops);
        for _ in 0..ops {
            db.put(&mut batch, key.set(next_key()), vals.next_value())?;
        }
        db.write(batch)?;
        left -= ops as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_round_trip_and_missing_ones_say_how_to_build() {
        assert_eq!(EngineKind::from_name("riptide").unwrap(), EngineKind::Riptide);
        assert!(EngineKind::from_name("leveldb")
            .unwrap_err()
            .to_string()
            .contains("unknown engine"));
        for kind in [EngineKind::RocksDb, EngineKind::Fjall] {
            match EngineKind::from_name(kind.name()) {
                Ok(k) => assert!(k.compiled_in() && k == kind),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(kind.feature().unwrap()) && msg.contains("cargo build"),
                        "{msg}"
                    );
                }
            }
        }
    }

    #[test]
    fn compression_names() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            assert_eq!(Compression::from_name(c.name()).unwrap(), c);
        }
        assert!(Compression::from_name("snappy").is_err());
        assert_eq!(Compression::None.db_bench_name(), "NoCompression");
    }

    /// Opens engine `E` on a temporary directory with default flags plus `args`.
    fn open<E: BenchEngine>(engine: &str, dir: &std::path::Path, args: &[&str]) -> (E, Config) {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            flags: crate::bench::flags::BenchFlags,
        }
        let db = format!("--db={}", dir.display());
        let engine = format!("--engine={engine}");
        let argv = ["bench", &engine, &db].into_iter().chain(args.iter().copied());
        let cfg = Config::from_flags(&Wrap::try_parse_from(argv).unwrap().flags).unwrap();
        (E::open(&cfg).unwrap(), cfg)
    }

    /// What every adapter must do: batches of puts and deletes, point reads, and a cursor that
    /// seeks, walks both ways and turns around.
    fn conformance<E: BenchEngine>(engine: &str) {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = open::<E>(engine, dir.path(), &[]);
        let mut b = db.new_batch(6);
        for k in [&b"k1"[..], b"k2", b"k3", b"k4", b"k5"] {
            db.put(&mut b, k, &[k[1], b'v']).unwrap();
        }
        db.delete(&mut b, b"k3").unwrap();
        db.write(b).unwrap();
        let mut b = db.new_batch(1);
        db.put(&mut b, b"k2", b"new").unwrap();
        db.write(b).unwrap();
        assert_eq!(
            db.get(b"k2", <[u8]>::to_vec).unwrap(),
            Some(b"new".to_vec()),
            "{engine}"
        );
        assert_eq!(db.get(b"k3", <[u8]>::to_vec).unwrap(), None, "{engine}");
        assert_eq!(db.get(b"k1", <[u8]>::len).unwrap(), Some(2), "{engine}");
        assert_eq!(
            db.multi_get(&[b"k1", b"k3", b"k2", b"zz"]).unwrap(),
            vec![Some(2), None, Some(3), None],
            "{engine}"
        );

        let mut c = db.cursor().unwrap();
        let at = |c: &E::Cursor<'_>| c.valid().then(|| (c.key().to_vec(), c.value().to_vec()));
        let kv = |k: &[u8], v: &[u8]| Some((k.to_vec(), v.to_vec()));
        c.seek_to_first();
        assert_eq!(at(&c), kv(b"k1", b"1v"), "{engine}");
        c.next();
        assert_eq!(at(&c), kv(b"k2", b"new"), "{engine}");
        c.next();
        assert_eq!(at(&c), kv(b"k4", b"4v"), "{engine}: deleted k3 is skipped");
        c.prev();
        assert_eq!(at(&c), kv(b"k2", b"new"), "{engine}: turn around");
        c.prev();
        c.prev();
        assert!(!c.valid(), "{engine}: ran off the front");
        c.seek_to_last();
        assert_eq!(at(&c), kv(b"k5", b"5v"), "{engine}");
        c.prev();
        assert_eq!(at(&c), kv(b"k4", b"4v"), "{engine}");
        c.next();
        assert_eq!(at(&c), kv(b"k5", b"5v"), "{engine}: turn around");
        c.next();
        assert!(!c.valid(), "{engine}: ran off the back");
        c.seek(b"k3");
        assert_eq!(at(&c), kv(b"k4", b"4v"), "{engine}: seek lands on the next key");
        c.seek(b"k9");
        assert!(!c.valid(), "{engine}");
        c.status().unwrap();
        drop(c);
        // The meta operations work and keep the contents.
        db.flush().unwrap();
        db.wait_for_background_work().unwrap();
        db.compact().unwrap();
        db.wait_for_background_work().unwrap();
        assert!(!db.stats_report(&RunTotals::default()).unwrap().is_empty(), "{engine}");
        assert!(!db.level_stats_report().unwrap().is_empty(), "{engine}");
        assert_eq!(
            db.get(b"k2", <[u8]>::to_vec).unwrap(),
            Some(b"new".to_vec()),
            "{engine}"
        );
        assert_eq!(db.get(b"k3", <[u8]>::to_vec).unwrap(), None, "{engine}");
        db.close().unwrap();
        // Reopened, everything is still there.
        let (db, _) = open::<E>(engine, dir.path(), &["--use_existing_db=1"]);
        assert_eq!(
            db.get(b"k2", <[u8]>::to_vec).unwrap(),
            Some(b"new".to_vec()),
            "{engine}"
        );
        assert_eq!(db.get(b"k3", <[u8]>::to_vec).unwrap(), None, "{engine}");
        db.close().unwrap();
    }

    #[test]
    fn riptide_adapter_conforms() {
        conformance::<riptide::RiptideEngine>("riptide");
    }

    #[cfg(feature = "bench-rocksdb")]
    #[test]
    fn rocksdb_adapter_conforms() {
        conformance::<rocksdb::RocksDbEngine>("rocksdb");
    }

    #[cfg(feature = "bench-fjall")]
    #[test]
    fn fjall_adapter_conforms() {
        conformance::<fjall::FjallEngine>("fjall");
    }

    #[test]
    fn byte_sizes_read_well() {
        assert_eq!(bytes(8 << 20), "8388608 (8.0 MiB)");
        assert_eq!(bytes(16384), "16384 (16.0 KiB)");
        assert_eq!(bytes(100), "100");
        assert_eq!(bytes(8 << 30), "8589934592 (8.0 GiB)");
    }
}
