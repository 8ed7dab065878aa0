//! [`Db`]: open, close, sub-tables, reads, writes, snapshots and the background flush workers
//! of one database instance.
//!
//! Invariants:
//! - One `Db` instance per directory (a `LOCK` file held for the instance's lifetime).
//! - A sub-table ([`Table`]) is one LSM-tree ([`TableInner`]); all sub-tables share the redo
//!   log, the write pipeline, the extent space, the slog and the caches, so a [`WriteBatch`]
//!   across tables commits atomically.
//! - Open recovers in X-Engine's order: catalog, extent-space headers, checkpoint + slog
//!   (committed transactions only), extent ownership rebuilt from that metadata, then the redo
//!   log from each sub-table's recovery point (its last flush's seal LSN).
//! - Metadata changes go through [`DbInner::commit_meta`]: one fsynced slog transaction, then
//!   the plain [`MetaState`] used for checkpoints is updated, under one mutex.
//! - Close waits for in-flight writes, stops the flush workers, flushes every memtable (with
//!   [`Options::flush_on_close`]) and deletes the redo segments that are no longer needed.

mod destroy;

use crate::cache::RowCache;
use crate::catalog::{Catalog, DEFAULT_TABLE, MAX_TABLE_NAME};
use crate::compaction::picker::{pick, Shape, TaskKind, Triggers};
use crate::compaction::{compact, packable, purgeable, CompactionKind, JobStats, KeyRange, DELETE_HEAVY_PERCENT};
use crate::error::{Error, Result};
use crate::extent::ExtentOptions;
use crate::extent_store::{CacheCounters, ExtentStore};
use crate::flush::{flush_oldest, FlushContext};
use crate::fs::FileLock;
use crate::iter::{DbIterator, Iter};
use crate::key::Lsn;
use crate::meta::edit::{MetaState, SlogEntry};
use crate::meta::slog::Slog;
use crate::meta::version::LevelSet;
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::redo::{self, RedoLog, SegmentList};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::space::{ExtentSpace, SpaceOptions};
use crate::subtable::{TableInner, TableState};
use crate::write::batch::WriteBatch;
use crate::write::completion::{Completion, WriteHandle};
use crate::write::pipeline::{Pipeline, PipelineConfig, WriteStats, Writer};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

struct Registry {
    catalog: Catalog,
    by_name: HashMap<String, Arc<TableInner>>,
    by_id: HashMap<u32, Arc<TableInner>>,
}

/// The slog and the plain metadata it describes.
struct MetaLog {
    slog: Slog,
    state: MetaState,
}

/// Tables waiting for a background worker (one queue for flushes, one for compactions).
#[derive(Default)]
struct JobQueue {
    state: Mutex<JobQueueState>,
    cond: Condvar,
}

#[derive(Default)]
struct JobQueueState {
    pending: VecDeque<u32>,
    /// Jobs (flushes and the compactions they trigger) being run by workers.
    running: usize,
    shutdown: bool,
}

impl JobQueue {
    fn push(&self, table: u32) {
        let mut s = self.state.lock();
        if !s.pending.contains(&table) {
            s.pending.push_back(table);
        }
        self.cond.notify_one();
    }
}

/// Counters of background work.
#[derive(Debug, Default)]
struct BackgroundCounters {
    flushes: AtomicU64,
    flush_extents: AtomicU64,
    flush_bytes: AtomicU64,
    flush_micros: AtomicU64,
    flush_errors: AtomicU64,
    redo_segments_deleted: AtomicU64,
    checkpoints: AtomicU64,
    compactions: AtomicU64,
    compaction_bytes_read: AtomicU64,
    compaction_bytes_written: AtomicU64,
    compaction_micros: AtomicU64,
    compaction_errors: AtomicU64,
    space_released: AtomicU64,
    space_shrink_errors: AtomicU64,
    space_punched_slots: AtomicU64,
}

/// Compaction counters of one output level.
#[derive(Debug, Default)]
struct LevelCounters {
    compactions: AtomicU64,
    tasks: AtomicU64,
    tasks_retried: AtomicU64,
    ranges_split: AtomicU64,
    micros: AtomicU64,
    input_extents: AtomicU64,
    extents_reused: AtomicU64,
    blocks_reused: AtomicU64,
    blocks_reused_decoded: AtomicU64,
    blocks_merged: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl LevelCounters {
    fn add(&self, _kind: CompactionKind, s: &JobStats, micros: u64) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.tasks.fetch_add(s.tasks, Ordering::Relaxed);
        self.tasks_retried.fetch_add(s.tasks_retried, Ordering::Relaxed);
        self.ranges_split.fetch_add(s.ranges_split, Ordering::Relaxed);
        self.micros.fetch_add(micros, Ordering::Relaxed);
        self.input_extents.fetch_add(s.input_extents, Ordering::Relaxed);
        self.extents_reused.fetch_add(s.extents_reused, Ordering::Relaxed);
        self.blocks_reused.fetch_add(s.blocks_reused, Ordering::Relaxed);
        self.blocks_reused_decoded
            .fetch_add(s.blocks_reused_decoded, Ordering::Relaxed);
        self.blocks_merged.fetch_add(s.blocks_merged, Ordering::Relaxed);
        self.bytes_read.fetch_add(s.bytes_read, Ordering::Relaxed);
        self.bytes_written.fetch_add(s.bytes_written, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LevelStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LevelStats {
            compactions: l(&self.compactions),
            tasks: l(&self.tasks),
            tasks_retried: l(&self.tasks_retried),
            ranges_split: l(&self.ranges_split),
            micros: l(&self.micros),
            input_extents: l(&self.input_extents),
            extents_reused: l(&self.extents_reused),
            blocks_reused: l(&self.blocks_reused),
            blocks_reused_decoded: l(&self.blocks_reused_decoded),
            blocks_merged: l(&self.blocks_merged),
            bytes_read: l(&self.bytes_read),
            bytes_written: l(&self.bytes_written),
        }
    }
}

/// Compaction statistics of one output level (like RocksDB's compaction stats), summed over
/// all sub-tables since open ([`DbStats::levels`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Compactions that wrote into this level.
    pub compactions: u64,
    /// Tasks those compactions were split into (run by compaction units).
    pub tasks: u64,
    /// Tasks a unit failed or rejected that the job thread ran again (CPU fallback).
    pub tasks_retried: u64,
    /// Closed ranges larger than a task that were cut between block groups into several
    /// tasks, so units could share them.
    pub ranges_split: u64,
    /// Time they took, in microseconds.
    pub micros: u64,
    /// Input extents they considered.
    pub input_extents: u64,
    /// Input extents re-linked into this level without being read or written.
    pub extents_reused: u64,
    /// Data blocks copied verbatim (not re-encoded).
    pub blocks_reused: u64,
    /// Of those, blocks decoded once to compute their index entry and filter lines: blocks of
    /// extents written before format 3 (or with other bloom bits per key). 0 once a database's
    /// extents are all format 3; the others are copied without being decoded.
    pub blocks_reused_decoded: u64,
    /// Data blocks decoded and merged.
    pub blocks_merged: u64,
    /// Bytes of input blocks read.
    pub bytes_read: u64,
    /// Bytes of extents written.
    pub bytes_written: u64,
}

impl LevelStats {
    /// Share of input extents re-linked (0 when there were none).
    pub fn extent_reuse_ratio(&self) -> f64 {
        if self.input_extents == 0 {
            0.0
        } else {
            self.extents_reused as f64 / self.input_extents as f64
        }
    }

    /// Share of the blocks in overlapping extents that were copied rather than merged.
    pub fn block_reuse_ratio(&self) -> f64 {
        let total = self.blocks_reused + self.blocks_merged;
        if total == 0 {
            0.0
        } else {
            self.blocks_reused as f64 / total as f64
        }
    }
}

/// Statistics of flushes, extents and caches ([`Db::stats`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DbStats {
    /// Memtables flushed to L0 since open.
    pub flushes: u64,
    /// Extents written by flushes.
    pub flush_extents: u64,
    /// Bytes written by flushes.
    pub flush_bytes: u64,
    /// Time spent in flushes, in microseconds.
    pub flush_micros: u64,
    /// Flushes that failed (and were retried).
    pub flush_errors: u64,
    /// Redo segments deleted because every table had flushed their contents.
    pub redo_segments_deleted: u64,
    /// Metadata checkpoints written.
    pub checkpoints: u64,
    /// Compactions run since open.
    pub compactions: u64,
    /// Bytes of input extents read by compactions.
    pub compaction_bytes_read: u64,
    /// Bytes of extents written by compactions.
    pub compaction_bytes_written: u64,
    /// Time spent in compactions, in microseconds.
    pub compaction_micros: u64,
    /// Compactions that failed.
    pub compaction_errors: u64,
    /// Bytes of data files given back to the file system (free tails cut, empty files deleted).
    pub space_released_bytes: u64,
    /// Extents freed (unreachable from any metadata snapshot).
    pub extents_freed: u64,
    /// Data files, slots in use and free slots of the extent space.
    pub space_files: u64,
    /// Slots (2 MiB) holding extents.
    pub space_used_slots: u64,
    /// Free slots inside data files.
    pub space_free_slots: u64,
    /// Free slots that still hold their disk blocks (at most about
    /// [`Options::free_slots_kept`] once the background thread has caught up).
    pub space_unpunched_slots: u64,
    /// Free slots whose disk blocks were given back to the file system (hole punching).
    pub space_punched_slots: u64,
    /// Compaction statistics per output level (L0: intra-L0, L1: minor, L2: major, self-major
    /// and manual rewrites).
    pub levels: [LevelStats; 3],
    /// Cache counters.
    pub caches: CacheCounters,
}

/// The shape of one sub-table's levels ([`Table::level_info`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelInfo {
    /// L0 layers, newest first: extents per layer.
    pub l0_layers: Vec<usize>,
    /// Extents per level (L0, L1, L2).
    pub extents: [usize; 3],
    /// Valid bytes per level.
    pub bytes: [u64; 3],
    /// Entries (versions) per level.
    pub entries: [u64; 3],
    /// Immutable memtables waiting for a flush.
    pub immutable_memtables: usize,
    /// The table's recovery point: writes at or below this LSN are in extents.
    pub flushed_lsn: Lsn,
}

pub(crate) struct DbInner {
    id: u64,
    path: PathBuf,
    opts: Options,
    registry: RwLock<Registry>,
    ddl: Mutex<()>,
    pub(crate) pipeline: Arc<Pipeline>,
    snapshots: Arc<SnapshotList>,
    stall_lock: Mutex<()>,
    stall_cond: Condvar,
    lock: Mutex<Option<Box<dyn FileLock>>>,
    store: Arc<ExtentStore>,
    row_cache: Arc<RowCache>,
    meta: Mutex<MetaLog>,
    redo_dir: PathBuf,
    redo_segments: Arc<SegmentList>,
    flush_queue: Arc<JobQueue>,
    compaction_queue: Arc<JobQueue>,
    /// Flush and compaction worker threads.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Per output level (L0, L1, L2): compaction counters.
    level_counters: [LevelCounters; 3],
    /// Transactions: the row-lock table and counters (`crate::txn`).
    txns: Arc<crate::txn::TxnShared>,
    /// The last background error (cleared by the next successful flush).
    bg_error: Mutex<Option<Error>>,
    counters: BackgroundCounters,
}

/// An open database. Cheap to clone (all clones share one instance) and safe to share
/// between threads.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use riptide::{Db, Options};
/// let db = Db::open(dir.path(), Options::default())?;
/// let users = db.create_table("users")?;
/// users.put(b"alice", b"42")?;
/// assert_eq!(users.get(b"alice")?, Some(b"42".to_vec()));
/// db.close()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Db {
    inner: Arc<DbHandle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.inner.path).finish()
    }
}

/// A handle to one sub-table (one LSM-tree). Cheap to clone.
#[derive(Clone)]
pub struct Table {
    db: Arc<DbHandle>,
    inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.inner.name).finish()
    }
}

fn validate_table_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidTableName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_TABLE_NAME {
        return bad("longer than 255 bytes");
    }
    Ok(())
}

impl Db {
    /// Opens (or creates, with `create_if_missing`) the database in directory `path`:
    /// recovers its metadata and extents, then replays its redo log.
    ///
    /// Errors: [`Error::InvalidOption`] for a bad option, [`Error::Locked`] if another instance
    /// has it open, [`Error::Corruption`] for damage recovery may not repair (see
    /// [`crate::RecoveryMode`]), [`Error::Io`] for I/O failures.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let path = path.as_ref().to_path_buf();
        let fs = opts.fs.clone();
        let exists = fs.exists(&crate::catalog::catalog_path(&path));
        if !exists && !opts.create_if_missing {
            return Err(Error::NotFound(path));
        }
        if exists && opts.error_if_exists {
            return Err(Error::AlreadyExists(path));
        }
        fs.create_dir_all(&path).map_err(|e| Error::io("mkdir", &path, e))?;
        let lock_path = path.join("LOCK");
        let lock = fs.lock(&lock_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked(path.clone())
            } else {
                Error::io("lock", &lock_path, e)
            }
        })?;
        let catalog = match Catalog::load(fs.as_ref(), &path)? {
            Some(c) => c,
            None => {
                let c = Catalog::new();
                c.store(fs.as_ref(), &path)?;
                c
            }
        };
        let tmp = path.join("CATALOG.tmp");
        if fs.exists(&tmp) {
            fs.remove_file(&tmp).map_err(|e| Error::io("remove", &tmp, e))?;
        }
        // Metadata: extent space, checkpoint + slog, ownership of extents.
        let space = Arc::new(ExtentSpace::open(
            fs.clone(),
            &path,
            SpaceOptions {
                extents_per_file: opts.extents_per_file,
            },
        )?);
        let (slog, recovered) = Slog::open(fs.clone(), &path)?;
        let mut state = recovered.state;
        let store = Arc::new(
            ExtentStore::new(space.clone(), opts.block_cache_size, opts.table_cache_size)
                .with_partial_reads(opts.partial_block_reads),
        );
        let row_cache = Arc::new(RowCache::new(opts.row_cache_size, 4 << 10));
        let flush_queue = Arc::new(JobQueue::default());
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let mut tables: HashMap<u32, Arc<TableInner>> = HashMap::new();
        let mut floor_lsn: Lsn = 0;
        for (tid, name) in &catalog.tables {
            let meta = state.tables.get(tid).cloned().unwrap_or_default();
            for e in meta.levels.iter().flat_map(|l| l.values()).flatten() {
                space.reference(crate::space::ExtentId(e.id), e.slots)?;
                floor_lsn = floor_lsn.max(e.max_lsn);
            }
            floor_lsn = floor_lsn.max(meta.flushed_lsn);
            let levels = LevelSet::from_meta(&store, &meta);
            let queue = flush_queue.clone();
            tables.insert(
                *tid,
                Arc::new(TableInner::new(
                    *tid,
                    name.clone(),
                    id,
                    opts.write_buffer_size,
                    levels,
                    TableState {
                        flushed_lsn: meta.flushed_lsn,
                        next_layer: meta.next_layer.max(1),
                    },
                    store.clone(),
                    row_cache.clone(),
                    Arc::new(move |t| queue.push(t)),
                )),
            );
        }
        let _space_report = space.finish_recovery(&crate::extent_store::looks_like_footer)?;
        let mut meta_log = MetaLog {
            slog,
            state: MetaState::default(),
        };
        // Metadata of tables dropped from the catalog (a crash between the two updates).
        let orphans: Vec<u32> = state
            .tables
            .keys()
            .filter(|t| !tables.contains_key(t))
            .copied()
            .collect();
        if !orphans.is_empty() {
            let entries: Vec<SlogEntry> = orphans.iter().map(|t| SlogEntry::DropTable(*t)).collect();
            meta_log.slog.commit(&entries)?;
            for e in &entries {
                state.apply(e)?;
            }
        }
        meta_log.state = state;
        // Redo: replay what each table has not flushed.
        let redo_dir = redo::redo_dir(&path);
        let flushed: HashMap<u32, Lsn> = tables
            .iter()
            .map(|(id, t)| (*id, t.change.lock().flushed_lsn))
            .collect();
        let report = redo::recover(fs.as_ref(), &redo_dir, opts.recovery_mode, &mut |op| {
            if let Some(t) = tables.get(&op.table) {
                if op.lsn > flushed[&op.table] {
                    t.memtable_for_write(op.lsn).insert(op.key, op.lsn, op.kind, op.value);
                }
            }
            Ok(())
        })?;
        let log = RedoLog::create(
            fs.clone(),
            redo_dir.clone(),
            report.next_segment,
            opts.redo_segment_size,
            report.segments.clone(),
        )?;
        let redo_segments = log.segments();
        let cfg = PipelineConfig {
            queues: opts.write_queues,
            max_group_size: opts.max_group_size,
            max_group_bytes: opts.max_group_bytes,
        };
        let by_name = tables.values().map(|t| (t.name.clone(), t.clone())).collect();
        let inner = Arc::new(DbInner {
            id,
            path,
            registry: RwLock::new(Registry {
                catalog,
                by_name,
                by_id: tables.clone(),
            }),
            ddl: Mutex::new(()),
            pipeline: Pipeline::start(cfg, log, report.max_lsn.max(floor_lsn))?,
            snapshots: Arc::new(SnapshotList::default()),
            stall_lock: Mutex::new(()),
            stall_cond: Condvar::new(),
            lock: Mutex::new(Some(lock)),
            store,
            row_cache,
            meta: Mutex::new(meta_log),
            redo_dir,
            redo_segments,
            flush_queue,
            compaction_queue: Arc::new(JobQueue::default()),
            workers: Mutex::new(Vec::new()),
            level_counters: Default::default(),
            txns: Default::default(),
            bg_error: Mutex::new(None),
            counters: BackgroundCounters::default(),
            opts,
        });
        // Replay may have left immutable memtables; and segments may be retirable already.
        for t in tables.values() {
            if t.immutable_count() > 0 {
                inner.flush_queue.push(t.id);
            }
        }
        inner.start_workers()?;
        Ok(Db {
            inner: Arc::new(DbHandle(inner)),
        })
    }

    /// Closes the database: refuses new writes, waits for in-flight ones, stops background
    /// work, flushes every memtable (with [`Options::flush_on_close`]) and deletes redo
    /// segments that are no longer needed. Other clones of this `Db` and their tables see
    /// [`Error::Closed`] afterwards. Dropping the last handle without `close` does the same,
    /// ignoring errors.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }

    /// Stops the instance as a crash would: no flush, no I/O at all; in-flight writes and
    /// flushes finish first. For crash tests (with [`crate::fs::FaultFs::crash`]).
    #[doc(hidden)]
    pub fn abandon_for_test(self) {
        if let Some(log) = self.inner.pipeline.close() {
            drop(log);
        }
        self.inner.stop_workers();
        self.inner.lock.lock().take();
    }

    /// The directory of this database.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The default table, which always exists.
    pub fn default_table(&self) -> Table {
        self.table(DEFAULT_TABLE)
            .unwrap_or_else(|_| unreachable!("the default table cannot be dropped"))
    }

    /// The table named `name`; [`Error::TableNotFound`] if there is none.
    pub fn table(&self, name: &str) -> Result<Table> {
        let reg = self.inner.registry.read();
        let inner = reg
            .by_name
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        Ok(Table {
            db: self.inner.clone(),
            inner: inner.clone(),
        })
    }

    /// Names of all tables, sorted.
    pub fn tables(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.registry.read().by_name.keys().cloned().collect();
        names.sort();
        names
    }

    /// Creates a sub-table (durably) and returns it.
    ///
    /// Errors: [`Error::TableExists`], [`Error::InvalidTableName`], [`Error::Io`].
    pub fn create_table(&self, name: &str) -> Result<Table> {
        validate_table_name(name)?;
        self.inner.check_open()?;
        let _ddl = self.inner.ddl.lock();
        let mut catalog = {
            let reg = self.inner.registry.read();
            if reg.by_name.contains_key(name) {
                return Err(Error::TableExists(name.to_string()));
            }
            reg.catalog.clone()
        };
        let id = catalog.next_id;
        catalog.next_id += 1;
        catalog.tables.push((id, name.to_string()));
        catalog.store(self.inner.opts.fs.as_ref(), &self.inner.path)?;
        let queue = self.inner.flush_queue.clone();
        let inner = Arc::new(TableInner::new(
            id,
            name.to_string(),
            self.inner.id,
            self.inner.opts.write_buffer_size,
            LevelSet::empty(),
            TableState {
                flushed_lsn: 0,
                next_layer: 1,
            },
            self.inner.store.clone(),
            self.inner.row_cache.clone(),
            Arc::new(move |t| queue.push(t)),
        ));
        let mut reg = self.inner.registry.write();
        reg.catalog = catalog;
        reg.by_name.insert(name.to_string(), inner.clone());
        reg.by_id.insert(id, inner.clone());
        Ok(Table {
            db: self.inner.clone(),
            inner,
        })
    }

    /// Drops a sub-table and all its data (durably); its extents are freed once no reader
    /// holds them. Handles to it then fail with [`Error::TableDropped`]. The default table
    /// cannot be dropped.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        if name == DEFAULT_TABLE {
            return Err(Error::InvalidTableName {
                name: name.to_string(),
                reason: "the default table cannot be dropped",
            });
        }
        self.inner.check_open()?;
        let _ddl = self.inner.ddl.lock();
        let (mut catalog, table) = {
            let reg = self.inner.registry.read();
            let t = reg
                .by_name
                .get(name)
                .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
            (reg.catalog.clone(), t.clone())
        };
        // No flush of the table may commit after its metadata is dropped.
        let _no_flush = table.flush_lock.lock();
        let _no_compaction = table.compaction_lock.lock();
        catalog.tables.retain(|(tid, _)| *tid != table.id);
        catalog.store(self.inner.opts.fs.as_ref(), &self.inner.path)?;
        {
            let mut reg = self.inner.registry.write();
            reg.catalog = catalog;
            reg.by_name.remove(name);
            reg.by_id.remove(&table.id);
        }
        table.dropped.store(true, Ordering::Release);
        let dropped_meta = self.inner.commit_meta(vec![SlogEntry::DropTable(table.id)]);
        {
            let _g = table.change.lock();
            let cur = table.current();
            for e in cur.levels.all_extents() {
                e.mark_obsolete();
            }
            table.publish(crate::meta::version::MetaSnapshot {
                active: cur.active.clone(),
                immutables: Vec::new(),
                levels: Arc::new(LevelSet::empty()),
                version: cur.version + 1,
                gc_horizon: cur.gc_horizon,
            });
        }
        self.inner.row_cache.erase_table(table.id);
        // Writers stalled on this table's memtables can go on (and fail).
        let _g = self.inner.stall_lock.lock();
        self.inner.stall_cond.notify_all();
        dropped_meta
    }

    /// Applies `batch` atomically and returns once it has committed (and, with
    /// `opts.sync`, is durable).
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        match self.inner.enqueue(batch, opts, false)? {
            Some(c) => c.wait(),
            None => Ok(()),
        }
    }

    /// Queues `batch` and returns at once with a handle that completes when the batch commits
    /// (and, with `opts.sync`, is durable). If this thread becomes the leader of its write
    /// group it first drives the group through the log stages, as in X-Engine; it never waits
    /// for its own commit. Writers stalled by too many immutable memtables or L0 layers still
    /// wait here (unless `opts.no_slowdown`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// let mut handles = Vec::new();
    /// for i in 0..8u8 {
    ///     let mut b = riptide::WriteBatch::new();
    ///     b.put(&t, &[i], b"v")?;
    ///     handles.push(db.write_async(b, &riptide::WriteOptions { sync: true, ..Default::default() }));
    /// }
    /// for h in handles {
    ///     h.wait()?;
    /// }
    /// assert_eq!(t.get(&[7])?, Some(b"v".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_async(&self, batch: WriteBatch, opts: &WriteOptions) -> WriteHandle {
        match self.inner.enqueue(batch, opts, true) {
            Ok(Some(completion)) => WriteHandle { completion },
            Ok(None) => {
                let completion = Completion::new();
                completion.complete(Ok(()));
                WriteHandle { completion }
            }
            Err(e) => WriteHandle::failed(e),
        }
    }

    /// A snapshot of the latest committed state of every table.
    pub fn snapshot(&self) -> Snapshot {
        let pipeline = self.inner.pipeline.clone();
        self.inner.snapshots.acquire(self.inner.id, || pipeline.visible_lsn())
    }

    /// Reads several keys, possibly of different tables, at one consistent snapshot.
    pub fn multi_get<K: AsRef<[u8]>>(&self, opts: &ReadOptions, keys: &[(&Table, K)]) -> Vec<Result<Option<Vec<u8>>>> {
        let registered = match self.inner.registered_lsn(opts) {
            Ok(s) => s,
            Err(e) => return keys.iter().map(|_| Err(e.clone())).collect(),
        };
        // One LSN for all tables; retry while a flush raced with an unregistered read.
        let (lsn, views) = loop {
            let lsn = registered.unwrap_or_else(|| self.inner.pipeline.visible_lsn());
            let views: Vec<_> = keys.iter().map(|(t, _)| t.inner.current()).collect();
            if registered.is_some() || views.iter().all(|v| lsn >= v.gc_horizon) {
                break (lsn, views);
            }
        };
        keys.iter()
            .zip(views)
            .map(|((t, k), view)| {
                if t.inner.db_id != self.inner.id {
                    return Err(Error::ForeignTable);
                }
                t.check_live()?;
                t.inner
                    .get_with(&view, k.as_ref(), lsn, registered.is_none(), |v| v.to_vec())
            })
            .collect()
    }

    /// Counters of the write path (groups, writes per group, fsyncs, stall time).
    pub fn write_stats(&self) -> WriteStats {
        self.inner.pipeline.stats()
    }

    /// Counters of flushes, the extent space and the caches.
    pub fn stats(&self) -> DbStats {
        let c = &self.inner.counters;
        let space = self.inner.store.space.stats();
        DbStats {
            flushes: c.flushes.load(Ordering::Relaxed),
            flush_extents: c.flush_extents.load(Ordering::Relaxed),
            flush_bytes: c.flush_bytes.load(Ordering::Relaxed),
            flush_micros: c.flush_micros.load(Ordering::Relaxed),
            flush_errors: c.flush_errors.load(Ordering::Relaxed),
            redo_segments_deleted: c.redo_segments_deleted.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            compaction_bytes_read: c.compaction_bytes_read.load(Ordering::Relaxed),
            compaction_bytes_written: c.compaction_bytes_written.load(Ordering::Relaxed),
            compaction_micros: c.compaction_micros.load(Ordering::Relaxed),
            compaction_errors: c.compaction_errors.load(Ordering::Relaxed),
            space_released_bytes: c.space_released.load(Ordering::Relaxed),
            extents_freed: self.inner.store.freed.load(Ordering::Relaxed),
            space_files: space.files as u64,
            space_used_slots: space.used_slots,
            space_free_slots: space.free_slots,
            space_unpunched_slots: space.unpunched_slots,
            space_punched_slots: c.space_punched_slots.load(Ordering::Relaxed),
            levels: [
                self.inner.level_counters[0].snapshot(),
                self.inner.level_counters[1].snapshot(),
                self.inner.level_counters[2].snapshot(),
            ],
            caches: CacheCounters {
                block_cache: self.inner.store.blocks.stats(),
                table_cache: self.inner.store.readers.stats(),
                row_cache: self.inner.row_cache.stats(),
                partial_block_reads: self.inner.store.partial_block_reads.get(),
            },
        }
    }

    /// The last error of a background flush, if the most recent attempt failed.
    pub fn background_error(&self) -> Option<Error> {
        self.inner.bg_error.lock().clone()
    }

    /// Flushes the memtables of every table to L0 and waits for it.
    pub fn flush(&self) -> Result<()> {
        let tables: Vec<Arc<TableInner>> = self.inner.registry.read().by_id.values().cloned().collect();
        for t in tables {
            self.inner.flush_table_now(&t)?;
        }
        Ok(())
    }

    /// Waits until the background workers are idle: no table has an immutable memtable, no
    /// flush is queued and no flush or compaction is running. Returns the background error if
    /// flushes keep failing.
    pub fn wait_for_background_work(&self) -> Result<()> {
        loop {
            self.inner.check_open()?;
            let busy = {
                let queued = [&self.inner.flush_queue, &self.inner.compaction_queue].iter().any(|q| {
                    let s = q.state.lock();
                    !s.pending.is_empty() || s.running > 0
                });
                let reg = self.inner.registry.read();
                queued || reg.by_id.values().any(|t| t.immutable_count() > 0)
            };
            if !busy {
                return Ok(());
            }
            if let Some(e) = self.inner.bg_error.lock().clone() {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Total bytes held by the memtables of all tables.
    pub fn memtable_usage(&self) -> usize {
        let reg = self.inner.registry.read();
        reg.by_name
            .values()
            .map(|t| t.current().memtables().map(|m| m.memory_usage()).sum::<usize>())
            .sum()
    }

    /// The LSN of the oldest live snapshot, if any.
    pub fn oldest_snapshot(&self) -> Option<Lsn> {
        self.inner.snapshots.oldest()
    }
}

/// Hooks for transactions (`crate::txn`, which also holds `Db::begin`).
impl Db {
    /// The instance's id and transaction state; [`Error::Closed`] once closed.
    pub(crate) fn txn_context(&self) -> Result<(u64, Arc<crate::txn::TxnShared>)> {
        self.inner.check_open()?;
        Ok((self.inner.id, self.inner.txns.clone()))
    }

    /// The newest LSN readers may see.
    pub(crate) fn visible_lsn(&self) -> Lsn {
        self.inner.pipeline.visible_lsn()
    }
}

impl DbInner {
    fn check_open(&self) -> Result<()> {
        if self.pipeline.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The LSN of the user's snapshot, if the read has one.
    fn registered_lsn(&self, opts: &ReadOptions) -> Result<Option<Lsn>> {
        self.check_open()?;
        match &opts.snapshot {
            Some(s) if s.db_id() != self.id => Err(Error::ForeignTable),
            Some(s) => Ok(Some(s.lsn())),
            None => Ok(None),
        }
    }

    /// Validates and queues a batch; `None` when there is nothing to do.
    fn enqueue(&self, batch: WriteBatch, opts: &WriteOptions, asynchronous: bool) -> Result<Option<Arc<Completion>>> {
        if batch.is_empty() {
            return Ok(None);
        }
        if batch.db_id != Some(self.id) {
            return Err(Error::ForeignTable);
        }
        for t in &batch.tables {
            if t.is_dropped() {
                return Err(Error::TableDropped(t.name.clone()));
            }
        }
        self.stall(&batch, opts)?;
        let completion = Completion::new();
        self.pipeline.submit(Writer {
            batch,
            sync: opts.sync && !opts.disable_wal,
            disable_wal: opts.disable_wal,
            asynchronous,
            completion: completion.clone(),
        });
        Ok(Some(completion))
    }

    /// Write stall: slow down, then stop, while a touched table has too many immutable
    /// memtables or L0 layers. A stopped writer whose table cannot flush (a background error)
    /// gets that error instead of waiting forever.
    fn stall(&self, batch: &WriteBatch, opts: &WriteOptions) -> Result<()> {
        let mut started: Option<Instant> = None;
        let triggers = self.triggers();
        for t in &batch.tables {
            loop {
                let (imm, l0, pending) = t.pressure(&triggers);
                let o = &self.opts;
                let slow = imm >= o.immutable_slowdown_trigger
                    || l0 >= o.level0_slowdown_layers
                    || pending >= o.pending_compaction_slowdown_bytes;
                if !slow || t.is_dropped() {
                    break;
                }
                if opts.no_slowdown {
                    return Err(Error::WouldStall(if imm >= o.immutable_slowdown_trigger {
                        "too many immutable memtables"
                    } else if l0 >= o.level0_slowdown_layers {
                        "too many L0 layers"
                    } else {
                        "too many bytes pending compaction"
                    }));
                }
                self.check_open()?;
                started.get_or_insert_with(Instant::now);
                let stop = imm >= o.immutable_stop_trigger
                    || l0 >= o.level0_stop_layers
                    || pending >= o.pending_compaction_stop_bytes;
                if !stop {
                    std::thread::sleep(Duration::from_micros(self.opts.slowdown_delay_micros));
                    break;
                }
                if let Some(e) = self.bg_error.lock().clone() {
                    if imm >= self.opts.immutable_stop_trigger {
                        return Err(e);
                    }
                }
                let mut g = self.stall_lock.lock();
                self.stall_cond.wait_for(&mut g, Duration::from_millis(50));
            }
        }
        if let Some(s) = started {
            self.pipeline.add_stall(s);
        }
        Ok(())
    }

    /// Commits one slog transaction and applies it to the plain metadata; checkpoints when
    /// the slog has grown past `slog_checkpoint_bytes`.
    pub(crate) fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()> {
        let mut meta = self.meta.lock();
        meta.slog.commit(&entries)?;
        for e in &entries {
            meta.state.apply(e)?;
        }
        if meta.slog.bytes_since_checkpoint() >= self.opts.slog_checkpoint_bytes {
            let MetaLog { slog, state } = &mut *meta;
            slog.checkpoint(state)?;
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn table_by_id(&self, id: u32) -> Option<Arc<TableInner>> {
        self.registry.read().by_id.get(&id).cloned()
    }

    /// Switches the table's active memtable (if it holds anything) and flushes every
    /// immutable memtable, in this thread.
    fn flush_table_now(&self, t: &Arc<TableInner>) -> Result<()> {
        self.check_open()?;
        // Under the stage-1 lock no group is binding memtables, so every LSN allocated so far
        // is at or below the seal.
        self.pipeline.at_seal_point(|last| {
            let _g = t.change.lock();
            let view = t.current();
            if !view.active.is_empty() {
                t.switch_memtable(&view, last);
            }
        });
        self.flush_all_immutables(t)
    }

    fn flush_all_immutables(&self, t: &Arc<TableInner>) -> Result<()> {
        loop {
            if t.is_dropped() {
                return Ok(());
            }
            let started = Instant::now();
            match flush_oldest(self, t) {
                Ok(None) => return Ok(()),
                Ok(Some(o)) => {
                    let c = &self.counters;
                    c.flushes.fetch_add(1, Ordering::Relaxed);
                    c.flush_extents.fetch_add(o.extents, Ordering::Relaxed);
                    c.flush_bytes.fetch_add(o.bytes, Ordering::Relaxed);
                    c.flush_micros
                        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    *self.bg_error.lock() = None;
                    {
                        let _g = self.stall_lock.lock();
                        self.stall_cond.notify_all();
                    }
                    if o.entries >= 1000 && o.deletes * 100 >= o.entries * DELETE_HEAVY_PERCENT {
                        t.delete_triggered.store(true, Ordering::Release);
                    }
                    self.retire_redo()?;
                    self.compaction_queue.push(t.id);
                }
                Err(e) => {
                    self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
                    *self.bg_error.lock() = Some(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// The picker's view of a table.
    fn shape(&self, t: &TableInner) -> Shape {
        let view = t.current();
        Shape {
            l0_layers: view.levels.l0.iter().map(|l| l.extents.len()).collect(),
            n1: view.levels.sorted[0].extents.len(),
            n2: view.levels.sorted[1].extents.len(),
            l2_delete_heavy: {
                let oldest_snapshot = self.snapshots.gc_view(|| 0).1.first().copied();
                view.levels.sorted[1]
                    .extents
                    .iter()
                    .filter(|e| purgeable(&e.meta, oldest_snapshot))
                    .count()
            },
            l2_sparse: packable(&view.levels.sorted[1].extents).len(),
            delete_triggered: t.delete_triggered.load(Ordering::Acquire),
        }
    }

    fn triggers(&self) -> Triggers {
        Triggers {
            level0_layers: self.opts.level0_layer_trigger,
            level0_extents: self.opts.level0_extents_trigger,
            level1_extents: self.opts.level1_extents_trigger,
            level1_dynamic: self.opts.level1_dynamic_trigger,
        }
    }

    /// Runs the compactions the picker asks for, best first, until none scores 1 or more.
    fn compact_until_idle(&self, t: &Arc<TableInner>) -> Result<()> {
        // A bound on the loop: each job changes the shape; a job that finds nothing to do ends it.
        for _ in 0..64 {
            if t.is_dropped() || self.pipeline.is_closed() {
                return Ok(());
            }
            let shape = self.shape(t);
            let Some(task) = pick(&shape, &self.triggers()) else {
                return Ok(());
            };
            let kind = match task {
                TaskKind::Delete => {
                    t.delete_triggered.store(false, Ordering::Release);
                    if shape.l0_layers.is_empty() {
                        CompactionKind::Major
                    } else {
                        CompactionKind::Minor
                    }
                }
                TaskKind::IntraL0 => CompactionKind::IntraL0,
                TaskKind::Minor => CompactionKind::Minor,
                TaskKind::Major => {
                    // X-Engine's split: first cut L1 extents whose rows skip whole L2
                    // extents, so the major below leaves those L2 extents untouched.
                    self.run_compaction(t, CompactionKind::Split)?;
                    CompactionKind::Major
                }
                TaskKind::MajorSelf => CompactionKind::MajorSelf,
            };
            if !self.run_compaction(t, kind)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Runs one compaction; false if there was nothing to do.
    fn run_compaction(&self, t: &Arc<TableInner>, kind: CompactionKind) -> Result<bool> {
        self.run_compaction_in(t, kind, &KeyRange::default())
    }

    fn run_compaction_in(&self, t: &Arc<TableInner>, kind: CompactionKind, range: &KeyRange) -> Result<bool> {
        let started = Instant::now();
        match compact(self, t, kind, range) {
            Ok(Some(o)) => {
                let micros = started.elapsed().as_micros() as u64;
                let c = &self.counters;
                c.compactions.fetch_add(1, Ordering::Relaxed);
                c.compaction_bytes_read.fetch_add(o.bytes_read, Ordering::Relaxed);
                c.compaction_bytes_written.fetch_add(o.bytes_written, Ordering::Relaxed);
                c.compaction_micros.fetch_add(micros, Ordering::Relaxed);
                // Statistics go to the output level.
                let level = match kind {
                    CompactionKind::IntraL0 => 0,
                    CompactionKind::Minor | CompactionKind::MinorRange | CompactionKind::Split => 1,
                    CompactionKind::Major
                    | CompactionKind::MajorSelf
                    | CompactionKind::L2Rewrite
                    | CompactionKind::MajorRange => 2,
                };
                self.level_counters[level].add(kind, &o, micros);
                {
                    let _g = self.stall_lock.lock();
                    self.stall_cond.notify_all();
                }
                self.reclaim_space();
                // Freed slots beyond the reserve get their holes punched by a worker, not by
                // this thread (which may be a user's, in a manual compaction).
                if self.store.space.unpunched_slots() > u64::from(self.opts.free_slots_kept) {
                    self.compaction_queue.push(t.id);
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.counters.compaction_errors.fetch_add(1, Ordering::Relaxed);
                *self.bg_error.lock() = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Gives the disk blocks of free slots beyond [`Options::free_slots_kept`] back to the file
    /// system. Compaction workers (and close) only: punching a few hundred holes takes tens of
    /// milliseconds, which must not delay a flush or a user's call.
    fn punch_free_slots(&self) {
        let n = self.store.space.punch_free_slots(u64::from(self.opts.free_slots_kept));
        self.counters.space_punched_slots.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives the free tails of data files back to the file system (and deletes data files
    /// that hold no extent). A failure is counted, not fatal: the space is reclaimed later.
    fn reclaim_space(&self) {
        match self.store.space.shrink() {
            Ok(bytes) => {
                self.counters.space_released.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.space_shrink_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Deletes redo segments whose every record is in extents or belongs to a dropped table.
    fn retire_redo(&self) -> Result<()> {
        let needed = self.needed_lsn();
        let n = self
            .redo_segments
            .retire(self.opts.fs.as_ref(), &self.redo_dir, needed)?;
        self.counters
            .redo_segments_deleted
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The oldest LSN recovery may still need: the oldest version in any memtable, or the
    /// next LSN to commit (writes in flight are above the visible LSN).
    fn needed_lsn(&self) -> Lsn {
        let mut needed = self.pipeline.visible_lsn() + 1;
        let reg = self.registry.read();
        for t in reg.by_id.values() {
            for m in t.current().memtables() {
                needed = needed.min(m.min_lsn());
            }
        }
        needed
    }

    fn start_workers(self: &Arc<Self>) -> Result<()> {
        let mut threads = self.workers.lock();
        let kinds = (0..self.opts.max_flushes)
            .map(|i| (WorkerKind::Flush, i))
            .chain((0..self.opts.max_compactions).map(|i| (WorkerKind::Compaction, i)));
        for (kind, i) in kinds {
            let weak: Weak<DbInner> = Arc::downgrade(self);
            let queue = match kind {
                WorkerKind::Flush => self.flush_queue.clone(),
                WorkerKind::Compaction => self.compaction_queue.clone(),
            };
            let name = match kind {
                WorkerKind::Flush => format!("riptide-flush-{i}"),
                WorkerKind::Compaction => format!("riptide-compact-{i}"),
            };
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker(weak, queue, kind))
                .map_err(|e| Error::io("spawn background thread", "", e))?;
            threads.push(handle);
        }
        Ok(())
    }

    fn stop_workers(&self) {
        for q in [&self.flush_queue, &self.compaction_queue] {
            let mut s = q.state.lock();
            s.shutdown = true;
            q.cond.notify_all();
        }
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.workers.lock());
        for h in threads {
            if h.thread().id() != std::thread::current().id() {
                // Workers never panic on their own; a join error means one already died.
                let _ = h.join();
            }
        }
    }

    fn shutdown(&self) -> Result<()> {
        let Some(mut log) = self.pipeline.close() else {
            return Ok(());
        };
        self.stop_workers();
        if self.pipeline.poison_error().is_none() {
            // Flushes below need every logged write durable first (see `flush`).
            if let Err(e) = log.sync() {
                self.lock.lock().take();
                return Err(e);
            }
            self.pipeline.mark_synced_at_close();
        }
        let result = if self.pipeline.poison_error().is_some() {
            // Nothing more may be written after a failed write; reopen recovers.
            Ok(())
        } else if self.opts.flush_on_close {
            let tables: Vec<Arc<TableInner>> = self.registry.read().by_id.values().cloned().collect();
            let flushed = tables.iter().try_for_each(|t| {
                self.pipeline.at_seal_point(|last| {
                    let _g = t.change.lock();
                    let view = t.current();
                    if !view.active.is_empty() {
                        t.switch_memtable(&view, last);
                    }
                });
                self.flush_all_immutables(t)
            });
            match flushed {
                Ok(()) => {
                    self.punch_free_slots();
                    self.reclaim_space();
                    log.close(self.needed_lsn())
                }
                Err(e) => {
                    let _ = log.close(0);
                    Err(e)
                }
            }
        } else {
            log.close(0)
        };
        self.lock.lock().take();
        result
    }
}

impl FlushContext for DbInner {
    fn wait_visible(&self, lsn: Lsn) -> Result<()> {
        loop {
            if self.pipeline.visible_lsn() >= lsn {
                return Ok(());
            }
            if let Some(e) = self.pipeline.poison_error() {
                return Err(Error::Poisoned(Arc::new(e)));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn gc_view(&self) -> (Lsn, Vec<Lsn>) {
        self.snapshots.gc_view(|| self.pipeline.visible_lsn())
    }

    fn sync_redo(&self) -> Result<()> {
        self.pipeline.sync_log()
    }

    fn commit_meta(&self, entries: Vec<SlogEntry>) -> Result<()> {
        DbInner::commit_meta(self, entries)
    }

    fn compaction_reuse(&self) -> bool {
        self.opts.compaction_reuse
    }

    fn compaction_units(&self) -> crate::compaction::Units {
        crate::compaction::Units {
            units: self.opts.compaction_units,
            task_extents: self.opts.compaction_task_extents,
            prefetch: self.opts.compaction_prefetch,
            reject_every: self.opts.compaction_unit_reject_every,
            piece_bytes: self.opts.compaction_piece_bytes,
        }
    }

    fn extent_options(&self) -> ExtentOptions {
        ExtentOptions {
            block_size: self.opts.block_size,
            restart_interval: self.opts.block_restart_interval,
            hash_index: self.opts.block_hash_index,
            bloom_bits_per_key: self.opts.bloom_bits_per_key,
            compression: match self.opts.compression {
                crate::options::Compression::None => crate::extent::Compression::None,
                crate::options::Compression::Lz4 => crate::extent::Compression::Lz4,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerKind {
    Flush,
    Compaction,
}

/// A background worker: takes tables off its queue and flushes their immutable memtables
/// (which queues them for compaction) or runs the compactions the picker asks for. Holds the
/// instance only weakly between jobs, so dropping the last `Db` shuts it down.
fn worker(db: Weak<DbInner>, queue: Arc<JobQueue>, kind: WorkerKind) {
    loop {
        let table = {
            let mut s = queue.state.lock();
            loop {
                if s.shutdown {
                    return;
                }
                if let Some(t) = s.pending.pop_front() {
                    s.running += 1;
                    break t;
                }
                queue.cond.wait(&mut s);
            }
        };
        let done = |queue: &JobQueue| queue.state.lock().running -= 1;
        let Some(db) = db.upgrade() else {
            done(&queue);
            return;
        };
        let Some(t) = db.table_by_id(table) else {
            done(&queue);
            continue;
        };
        let failed = match kind {
            WorkerKind::Flush => db.flush_all_immutables(&t).is_err(),
            WorkerKind::Compaction => db.compact_until_idle(&t).is_err(),
        };
        // Compactions free extents; flush workers stay free for the next memtable.
        if matches!(kind, WorkerKind::Compaction) {
            db.punch_free_slots();
        }
        drop(db);
        if failed {
            // Retry later: the error is in `bg_error` and stalled writers see it.
            std::thread::sleep(Duration::from_millis(100));
            queue.push(table);
        }
        done(&queue);
    }
}

/// What user handles ([`Db`], [`Table`]) hold: the instance shuts down when the last one
/// drops, even while a background worker still holds the instance itself.
pub(crate) struct DbHandle(Arc<DbInner>);

impl std::ops::Deref for DbHandle {
    type Target = DbInner;
    fn deref(&self) -> &DbInner {
        &self.0
    }
}

impl Drop for DbHandle {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

impl Table {
    pub(crate) fn db_id(&self) -> u64 {
        self.inner.db_id
    }

    pub(crate) fn inner(&self) -> &Arc<TableInner> {
        &self.inner
    }

    fn check_live(&self) -> Result<()> {
        if self.inner.is_dropped() {
            return Err(Error::TableDropped(self.inner.name.clone()));
        }
        Ok(())
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets `key` to `value` with default [`WriteOptions`] (not synced).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    /// Sets `key` to `value` with the given options.
    pub fn put_opt(&self, key: &[u8], value: &[u8], opts: &WriteOptions) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(self, key, value)?;
        Db { inner: self.db.clone() }.write(batch, opts)
    }

    /// Deletes `key` with default [`WriteOptions`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    /// Deletes `key` with the given options.
    pub fn delete_opt(&self, key: &[u8], opts: &WriteOptions) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.delete(self, key)?;
        Db { inner: self.db.clone() }.write(batch, opts)
    }

    /// The value of `key` in the latest committed state, or `None`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_opt(key, &ReadOptions::default())
    }

    /// The value of `key` at `opts.snapshot` (or the latest committed state).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// t.put(b"k", b"old")?;
    /// let snap = db.snapshot();
    /// t.put(b"k", b"new")?;
    /// let at_snap = riptide::ReadOptions { snapshot: Some(snap), ..Default::default() };
    /// assert_eq!(t.get_opt(b"k", &at_snap)?, Some(b"old".to_vec()));
    /// assert_eq!(t.get(b"k")?, Some(b"new".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_opt(&self, key: &[u8], opts: &ReadOptions) -> Result<Option<Vec<u8>>> {
        self.get_with_opt(key, opts, |v| v.to_vec())
    }

    /// Like [`Table::get_opt`], but hands the value to `read` in place instead of copying it
    /// (RocksDB's `PinnableSlice`): `read` runs while the memtable, block or cached row holding
    /// the value is pinned, so keep it short.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// t.put(b"k", b"hello")?;
    /// assert_eq!(t.get_with_opt(b"k", &Default::default(), |v| v.len())?, Some(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_with_opt<R>(&self, key: &[u8], opts: &ReadOptions, read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let registered = self.db.registered_lsn(opts)?;
        self.check_live()?;
        self.inner.with_pinned(
            registered,
            || self.db.pipeline.visible_lsn(),
            |lsn, view| self.inner.get_with(view, key, lsn, registered.is_none(), read),
        )
    }

    /// Flushes this table's memtables to a new L0 layer and waits for it.
    pub fn flush(&self) -> Result<()> {
        self.check_live()?;
        self.db.flush_table_now(&self.inner)
    }

    /// Compacts the whole table down to the last level: flushes the memtables, merges L0 into
    /// L1, then L1 into L2 (or, if L1 is empty, rewrites L2), dropping versions no snapshot can
    /// see and tombstones with nothing below them. Waits for it.
    pub fn compact(&self) -> Result<()> {
        self.check_live()?;
        self.db.flush_table_now(&self.inner)?;
        self.db.run_compaction(&self.inner, CompactionKind::Minor)?;
        self.db.run_compaction(&self.inner, CompactionKind::Major)?;
        self.db.run_compaction(&self.inner, CompactionKind::L2Rewrite)?;
        Ok(())
    }

    /// Compacts the user keys in `[start, end]` (inclusive; `None` = unbounded) down to L2:
    /// flushes the memtables, merges the L0 extents overlapping the range (and every L0 extent
    /// overlapping those) into L1, then rewrites the L1 and L2 extents overlapping it into L2,
    /// dropping versions no snapshot needs and purgeable tombstones. Waits for it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// t.put(b"a1", b"x")?;
    /// t.delete(b"a1")?;
    /// t.compact_range(Some(b"a"), Some(b"b"))?;
    /// assert_eq!(t.get(b"a1")?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compact_range(&self, start: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.check_live()?;
        self.db.flush_table_now(&self.inner)?;
        let range = KeyRange {
            lo: start.map(<[u8]>::to_vec),
            hi: end.map(<[u8]>::to_vec),
        };
        self.db
            .run_compaction_in(&self.inner, CompactionKind::MinorRange, &range)?;
        self.db
            .run_compaction_in(&self.inner, CompactionKind::MajorRange, &range)?;
        Ok(())
    }

    /// Merges L0 into L1 only (a minor compaction), keeping L2 as it is. Waits for it.
    pub fn compact_l0(&self) -> Result<()> {
        self.check_live()?;
        self.db.run_compaction(&self.inner, CompactionKind::Minor)?;
        Ok(())
    }

    /// Merges L1 into L2 (a major compaction, with data reuse when
    /// [`Options::compaction_reuse`] is on): the L2 extents no L1 extent overlaps stay as they
    /// are, and L1 extents whose rows skip whole L2 extents are first split where those L2
    /// extents start, so those stay too. Waits for it. `compact_l0` then `compact_l1` is what background compaction does to
    /// move a flushed run to the bottom; [`Table::compact`] also rewrites all of L2.
    pub fn compact_l1(&self) -> Result<()> {
        self.check_live()?;
        self.db.run_compaction(&self.inner, CompactionKind::Split)?;
        self.db.run_compaction(&self.inner, CompactionKind::Major)?;
        Ok(())
    }

    /// The shape of this table's levels.
    pub fn level_info(&self) -> LevelInfo {
        let view = self.inner.current();
        let mut info = LevelInfo {
            l0_layers: view.levels.l0.iter().map(|l| l.extents.len()).collect(),
            immutable_memtables: view.immutables.len(),
            flushed_lsn: self.inner.change.lock().flushed_lsn,
            ..Default::default()
        };
        for (i, layers) in [
            view.levels.l0.iter().collect::<Vec<_>>(),
            vec![&view.levels.sorted[0]],
            vec![&view.levels.sorted[1]],
        ]
        .iter()
        .enumerate()
        {
            for l in layers {
                info.extents[i] += l.extents.len();
                info.bytes[i] += l.bytes();
                info.entries[i] += l.extents.iter().map(|e| e.meta.entries).sum::<u64>();
            }
        }
        info
    }

    /// A Rust iterator over `(key, value)` pairs in key order, within `opts`' bounds and at
    /// its snapshot. It is double-ended: `.rev()` walks backward.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// for k in [b"a", b"b", b"c", b"d"] {
    ///     t.put(k, b"v")?;
    /// }
    /// let opts = riptide::ReadOptions {
    ///     lower_bound: Some(b"b".to_vec()),
    ///     upper_bound: Some(b"d".to_vec()),
    ///     ..Default::default()
    /// };
    /// let keys: Vec<Vec<u8>> = t.iter(&opts)?.map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// let back: Vec<Vec<u8>> = t.iter(&opts)?.rev().map(|r| r.unwrap().0).collect();
    /// assert_eq!(back, vec![b"c".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn iter(&self, opts: &ReadOptions) -> Result<Iter> {
        Ok(Iter::new(self.raw_iter(opts)?))
    }

    /// A positioned cursor (like RocksDB's `Iterator`): `seek`, `seek_for_prev`, `next`, `prev`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
    /// let t = db.default_table();
    /// for k in [b"a", b"c", b"e"] {
    ///     t.put(k, b"v")?;
    /// }
    /// let mut it = t.raw_iter(&Default::default())?;
    /// it.seek(b"b");
    /// assert_eq!(it.key(), b"c");
    /// it.seek_for_prev(b"d");
    /// assert_eq!(it.key(), b"c");
    /// it.prev();
    /// assert_eq!(it.key(), b"a");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn raw_iter(&self, opts: &ReadOptions) -> Result<DbIterator> {
        let registered = self.db.registered_lsn(opts)?;
        self.check_live()?;
        let (lsn, view) = self.inner.pin(registered, || self.db.pipeline.visible_lsn());
        let mut it = DbIterator::new(
            view,
            self.inner.store.clone(),
            lsn,
            opts.lower_bound.clone(),
            opts.upper_bound.clone(),
        );
        it.pin_snapshot(opts.snapshot.clone());
        Ok(it)
    }
}
