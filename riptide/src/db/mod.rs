//! [`Db`]: one database instance: its sub-tables, reads, writes, snapshots and close. The
//! rest of the instance lives beside this file, one concern per file: recovery (`open.rs`),
//! tables and DDL (`table.rs`), background work (`background.rs`, `workers.rs`), statistics
//! (`stats.rs`) and `destroy.rs`.
//!
//! Invariants:
//! - One `Db` instance per directory (a `LOCK` file held for the instance's lifetime).
//! - A sub-table ([`Table`]) is one LSM-tree ([`TableInner`]); all sub-tables share the redo
//!   log, the write pipeline, the extent space, the slog and the caches, so a [`WriteBatch`]
//!   across tables commits atomically.
//! - Metadata changes go through [`DbInner::commit_meta`]: one fsynced slog transaction, then
//!   the plain [`MetaState`] used for checkpoints is updated, under one mutex.
//! - Close waits for in-flight writes, stops the background workers, flushes every memtable
//!   (with [`Options::flush_on_close`]; always the memtables holding writes made without the
//!   redo log) and deletes the redo segments that are no longer needed. A clean close never
//!   loses an acknowledged write.

mod background;
mod backup;
mod checkpoint;
mod destroy;
mod open;
mod replicated;
mod stats;
mod table;
mod workers;

pub use checkpoint::CheckpointInfo;
pub use stats::{DbStats, DictionaryStatus, LevelInfo, LevelStats};
pub use table::Table;

use crate::cache::RowCache;
use crate::catalog::{Catalog, DEFAULT_TABLE};
use crate::contention::LockContention;
use crate::error::{Error, Result};
use crate::extent_store::ExtentStore;
use crate::fs::{FileLock, FileSystem};
use crate::key::Lsn;
use crate::meta::edit::{MetaState, SlogEntry};
use crate::meta::slog::Slog;
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::redo::SegmentList;
use crate::replication::{ReplicatedWrites, Replicator};
use crate::row_lock::TxnShared;
use crate::snapshot::{Snapshot, SnapshotList};
use crate::subtable::TableInner;
use crate::write::batch::WriteBatch;
use crate::write::completion::{Completion, WriteHandle};
use crate::write::pipeline::{OnPlaced, Pipeline, WriteStats, Writer};
use crate::write::stall::{StallHost, WriteStall};
use parking_lot::{Mutex, RwLock};
use replicated::{replicate, Route};
use stats::{BackgroundCounters, LevelCounters};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use table::TableFactory;
use workers::Workers;

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// Refuses an empty database path, before anything on disk is touched (`open`, `destroy`).
fn check_path(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::InvalidOption {
            option: "path",
            reason: "the database path is empty".into(),
        });
    }
    Ok(())
}

/// Takes the `LOCK` of the database at `path`: [`Error::Locked`] while another instance (in
/// this process or another) holds it.
fn lock_database(fs: &dyn FileSystem, path: &Path) -> Result<Box<dyn FileLock>> {
    let lock_path = path.join("LOCK");
    fs.lock(&lock_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked(path.to_path_buf())
        } else {
            Error::io("lock", &lock_path, e)
        }
    })
}

/// The tables of an instance, by name and by id, and the catalog that names them.
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

pub(crate) struct DbInner {
    id: u64,
    path: PathBuf,
    opts: Options,
    registry: RwLock<Registry>,
    /// Serializes table DDL.
    ddl: Mutex<()>,
    pub(crate) pipeline: Arc<Pipeline>,
    snapshots: Arc<SnapshotList>,
    stall: WriteStall,
    lock: Mutex<Option<Box<dyn FileLock>>>,
    store: Arc<ExtentStore>,
    row_cache: Arc<RowCache>,
    /// Builds the sub-tables of this instance.
    tables: TableFactory,
    meta: Mutex<MetaLog>,
    redo_dir: PathBuf,
    redo_segments: Arc<SegmentList>,
    /// Flush and compaction queues and threads.
    workers: Workers,
    /// Per output level (L0, L1, L2): compaction counters.
    level_counters: [LevelCounters; 3],
    /// Transactions: the row-lock table and counters (for the transaction layer above).
    pub(crate) txns: Arc<TxnShared>,
    /// The last background error (cleared by the next successful flush).
    bg_error: Mutex<Option<Error>>,
    counters: BackgroundCounters,
    /// The object tier's threads (the collector, which deletes retired objects, and the
    /// prefetcher), if there is a tier.
    object_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Per sub-table: the version a compaction that left the shape unchanged installed. The
    /// picker does not run again on that version (a job that changes nothing would repeat
    /// forever, restarted by every round that frees slots).
    futile_versions: Mutex<HashMap<u32, u64>>,
    /// Opened with [`Db::open_read_only`]: no writes, no background work, nothing written to
    /// the directory (its file system is a [`crate::fs::ReadOnlyFs`]).
    read_only: bool,
    /// Serializes changes of the checkpoint pins (`PINS`).
    pins_lock: Mutex<()>,
    /// The replication layer that takes over writes and DDL, once installed.
    replicator: std::sync::OnceLock<Arc<dyn Replicator>>,
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
    pub(crate) inner: Arc<DbHandle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.inner.path).finish()
    }
}

impl Db {
    /// Closes the database: refuses new writes, waits for in-flight ones, stops background
    /// work, flushes every memtable (with [`Options::flush_on_close`]) and deletes redo
    /// segments that are no longer needed. Other clones of this `Db` and their tables see
    /// [`Error::Closed`] afterwards. Dropping the last handle without `close` does the same,
    /// ignoring errors.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }

    /// Stops the instance as a crash would: no flush, no I/O at all; in-flight writes and
    /// flushes finish first, then the `LOCK` is released. For crash tests, with
    /// [`crate::fs::FaultFs::crash`]: what an acknowledged but unsynced write leaves behind is
    /// then exactly what a power cut would. Not for production use: writes made without
    /// `sync` may be lost, as in a crash.
    pub fn abandon_for_test(self) {
        if let Some(log) = self.inner.pipeline.close() {
            drop(log);
        }
        self.inner.workers.stop();
        self.inner.stop_object_threads();
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

    /// Applies `batch` atomically and returns once it has committed (and, with
    /// `opts.sync`, is durable).
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.write_by(batch, opts, Route::Replicated)
    }

    /// Writes `batch` by `route` and waits for it.
    fn write_by(&self, batch: WriteBatch, opts: &WriteOptions, route: Route) -> Result<()> {
        match self.inner.enqueue(batch, opts, false, None, route)? {
            Some(c) => {
                let result = c.wait();
                self.inner.pipeline.note_wake(&c);
                result
            }
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
        match self.inner.enqueue(batch, opts, true, None, Route::Replicated) {
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

    /// Reads several keys, possibly of different tables, at one consistent snapshot. With an
    /// object tier the keys are read on up to 16 threads, so reads that wait on the object
    /// store overlap (each is one ranged GET of tens of milliseconds); without one, in order
    /// on the caller's thread.
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
        // Plain slices: the reads may run on other threads (`K` need not be `Sync`).
        let tables: Vec<&Table> = keys.iter().map(|(t, _)| *t).collect();
        let user_keys: Vec<&[u8]> = keys.iter().map(|(_, k)| k.as_ref()).collect();
        let read = |i: usize| -> Result<Option<Vec<u8>>> {
            let t = tables[i];
            if t.inner.db_id != self.inner.id {
                return Err(Error::ForeignTable { what: "multi_get" });
            }
            t.check_live()?;
            t.inner
                .get_with(&views[i], user_keys[i], lsn, registered.is_none(), |v| v.to_vec())
        };
        if self.inner.store.objects.is_none() || keys.len() < 2 {
            return (0..keys.len()).map(read).collect();
        }
        // With an object tier a read may wait on a GET of tens of milliseconds: the keys are
        // spread over threads so those requests overlap (seed 003), each key read once.
        let n = keys.len();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = n.min(MULTI_GET_THREADS);
        let done: Vec<(usize, Result<Option<Vec<u8>>>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if i >= n {
                                return mine;
                            }
                            mine.push((i, read(i)));
                        }
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
        });
        let mut results: Vec<Option<Result<Option<Vec<u8>>>>> = (0..n).map(|_| None).collect();
        for (i, r) in done {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| {
                // Only a reader thread that panicked leaves a key without an answer.
                r.unwrap_or_else(|| {
                    Err(Error::io(
                        "multi_get",
                        Path::new("<reader thread>"),
                        std::io::Error::other("a reader thread panicked"),
                    ))
                })
            })
            .collect()
    }

    /// Counters of the write path (groups, writes per group, fsyncs, stall time).
    pub fn write_stats(&self) -> WriteStats {
        self.inner.pipeline.stats()
    }

    /// The last error of a background flush, if the most recent attempt failed.
    pub fn background_error(&self) -> Option<Error> {
        self.inner.bg_error.lock().clone()
    }

    /// Flushes the memtables of every table to L0 and waits for it.
    pub fn flush(&self) -> Result<()> {
        for t in self.inner.all_tables() {
            self.inner.flush_table_now(&t)?;
        }
        Ok(())
    }

    /// Waits until the background workers are idle: no table has an immutable memtable, no
    /// flush is queued and no flush or compaction is running. Returns the background error if
    /// flushes keep failing.
    pub fn wait_for_background_work(&self) -> Result<()> {
        if self.inner.read_only {
            // No background work; replayed immutable memtables stay in memory.
            return self.inner.check_open();
        }
        loop {
            self.inner.check_open()?;
            let busy = self.inner.workers.is_busy() || {
                let reg = self.inner.registry.read();
                reg.by_id.values().any(|t| t.immutable_count() > 0)
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

/// Hooks for transactions (the `txn` module, which also holds `Db::begin`).
impl Db {
    /// The instance's id and transaction state; [`Error::Closed`] once closed.
    pub(crate) fn txn_context(&self) -> Result<(u64, Arc<TxnShared>)> {
        self.inner.check_open()?;
        Ok((self.inner.id, self.inner.txns.clone()))
    }

    /// The newest LSN readers may see.
    pub(crate) fn visible_lsn(&self) -> Lsn {
        self.inner.pipeline.visible_lsn()
    }

    /// Queues `batch` with a hook run once it is placed (see `DbInner::enqueue`); for the
    /// transaction layer's early lock release. `None` when there is nothing to write.
    pub(crate) fn write_placed(
        &self,
        batch: WriteBatch,
        opts: &WriteOptions,
        asynchronous: bool,
        on_placed: Option<OnPlaced>,
    ) -> Result<Option<Arc<Completion>>> {
        self.inner
            .enqueue(batch, opts, asynchronous, on_placed, Route::Replicated)
    }

    /// Counts a timed writer's wake-up after its completion (the commit-time split).
    pub(crate) fn note_wake(&self, completion: &Completion) {
        self.inner.pipeline.note_wake(completion);
    }

    /// Waits until every write up to `lsn` is visible (so logged, and durable as it asked),
    /// or fails with the error that poisoned the pipeline. For a transaction that read a
    /// version still being committed and writes nothing itself.
    pub(crate) fn wait_visible(&self, lsn: Lsn) -> Result<()> {
        // Rare (a read-only transaction that read a version of a commit in flight): the
        // commit is usually done within a few scheduling slices.
        self.inner.pipeline.wait_visible(lsn, 63, Duration::from_micros(50))
    }

    /// How often each of the engine's hot mutexes was found taken, and how long threads
    /// waited for it, since open: the write pipeline's and the row-lock manager's. Shows a
    /// serial section even where throughput hides it.
    pub fn lock_contention(&self) -> Vec<LockContention> {
        let mut report = crate::contention::empty_report();
        self.inner.pipeline.contention().add_to(&mut report);
        self.inner.txns.locks.contention().add_to(&mut report);
        report
    }
}

impl DbInner {
    fn check_open(&self) -> Result<()> {
        if self.pipeline.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// [`Error::ReadOnly`] for an instance opened read-only.
    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.path.clone()));
        }
        Ok(())
    }

    /// The LSN of the user's snapshot, if the read has one.
    fn registered_lsn(&self, opts: &ReadOptions) -> Result<Option<Lsn>> {
        self.check_open()?;
        match &opts.snapshot {
            Some(s) if s.db_id() != self.id => Err(Error::ForeignTable { what: "snapshot" }),
            Some(s) => Ok(Some(s.lsn())),
            None => Ok(None),
        }
    }

    /// Validates and queues a batch; `None` when there is nothing to do.
    ///
    /// `on_placed` runs once the batch has its place in the log and its versions are in their
    /// memtables (before its log write is known to have succeeded); it is dropped without
    /// running if the write fails before that, or if there is nothing to write.
    pub(crate) fn enqueue(
        &self,
        batch: WriteBatch,
        opts: &WriteOptions,
        asynchronous: bool,
        on_placed: Option<OnPlaced>,
        route: Route,
    ) -> Result<Option<Arc<Completion>>> {
        opts.validate()?;
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(None);
        }
        if batch.db_id != Some(self.id) {
            return Err(Error::ForeignTable { what: "write batch" });
        }
        for t in &batch.tables {
            if t.is_dropped() {
                return Err(Error::TableDropped(t.name.clone()));
            }
        }
        if let (Route::Replicated, Some(replicator)) = (route, self.replicator.get()) {
            return Ok(Some(replicate(
                replicator.as_ref(),
                ReplicatedWrites::from_batch(&batch, opts.replication_fence),
                on_placed,
            )));
        }
        if let Some(started) = self.stall.wait(self, &batch.tables, opts.no_slowdown)? {
            self.pipeline.add_stall(started);
        }
        let queued_at = crate::write::pipeline::sampled_write_clock();
        let completion = self.pipeline.new_completion(queued_at.is_some() && !asynchronous);
        self.pipeline.submit(Writer {
            batch,
            sync: opts.sync,
            disable_wal: opts.disable_wal,
            asynchronous,
            completion: completion.clone(),
            on_placed,
            queued_at,
        });
        Ok(Some(completion))
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
            self.counters
                .checkpoints
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    fn table_by_id(&self, id: u32) -> Option<Arc<TableInner>> {
        self.registry.read().by_id.get(&id).cloned()
    }

    /// Every live table (a copy of the list: no lock is held while the caller works on them).
    fn all_tables(&self) -> Vec<Arc<TableInner>> {
        self.registry.read().by_id.values().cloned().collect()
    }

    /// Closes the instance (once; later calls return `Ok`): see the module header.
    fn shutdown(&self) -> Result<()> {
        let Some(mut log) = self.pipeline.close() else {
            return Ok(());
        };
        self.workers.stop();
        // Nothing deletes objects once the instance starts to close (whatever path it takes
        // below); what falls due later is found by the next open.
        self.stop_object_threads();
        if self.pipeline.poison_error().is_none() {
            // Flushes below need every logged write durable first (see `flush`).
            if let Err(e) = log.sync() {
                self.lock.lock().take();
                return Err(e);
            }
            self.pipeline.mark_synced_at_close(log.synced_end());
        }
        let result = if self.pipeline.poison_error().is_some() || self.read_only {
            // Nothing more may be written after a failed write; reopen recovers. A read-only
            // instance writes nothing.
            Ok(())
        } else {
            // With `flush_on_close` every table is flushed; without it only the tables whose
            // memtables hold writes made without the redo log (nothing else would keep them).
            let flush_all = self.opts.flush_on_close;
            let tables: Vec<Arc<TableInner>> = self
                .all_tables()
                .into_iter()
                .filter(|t| flush_all || t.current().memtables().any(|m| m.has_unlogged_writes()))
                .collect();
            let flushed = tables.iter().try_for_each(|t| {
                self.seal_active(t);
                self.flush_all_immutables(t)
            });
            match flushed {
                Ok(()) if flush_all => {
                    // Nothing reuses the kept slots before the next open: at rest the database
                    // takes the size of its extents.
                    self.punch_free_slots_keeping(0);
                    self.reclaim_space();
                    log.close(self.needed_lsn())
                }
                Ok(()) => log.close(0),
                Err(e) => {
                    let _ = log.close(0);
                    Err(e)
                }
            }
        };
        self.lock.lock().take();
        result
    }

    /// Stops the object tier's threads and waits for them (objects whose grace period has not
    /// passed stay in the store; the next open finds them).
    fn stop_object_threads(&self) {
        if let Some(tier) = &self.store.objects {
            tier.stop_threads();
        }
        let threads = std::mem::take(&mut *self.object_threads.lock());
        for h in threads {
            let _ = h.join();
        }
    }
}

impl StallHost for DbInner {
    fn check_open(&self) -> Result<()> {
        DbInner::check_open(self)
    }

    fn background_error(&self) -> Option<Error> {
        self.bg_error.lock().clone()
    }
}

/// Most threads one `multi_get` spreads its keys over when the database has an object tier.
const MULTI_GET_THREADS: usize = 16;

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
        if crate::write::completion::in_completion_callback() {
            // Dropped by a completion callback: the pipeline thread running it (the log-flush
            // thread, or a leader driving the log) may be the one that must flush the writes
            // in flight, which the shutdown waits for. It shuts down on a thread of its own.
            let inner = self.0.clone();
            let spawned = std::thread::Builder::new()
                .name("riptide-shutdown".into())
                .spawn(move || {
                    let _ = inner.shutdown();
                });
            if spawned.is_ok() {
                return;
            }
        }
        let _ = self.0.shutdown();
    }
}
