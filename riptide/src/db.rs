//! [`Db`]: open, close, sub-tables, reads, writes and snapshots of one database instance.
//!
//! Invariants:
//! - One `Db` instance per directory (a `LOCK` file held for the instance's lifetime).
//! - A sub-table ([`Table`]) has its own memtables; all sub-tables share the redo log and the
//!   write pipeline, so a [`WriteBatch`] across tables commits atomically.
//! - Reads load the visible LSN *before* the memtable set, so every version at or below that
//!   LSN is in a memtable the read looks at.
//! - Open recovers the catalog, then replays the redo log; close waits for in-flight writes,
//!   syncs the log and (by default) rewrites the live data into one fresh segment.

use crate::catalog::{Catalog, DEFAULT_TABLE, MAX_TABLE_NAME};
use crate::error::{Error, Result};
use crate::fs::FileLock;
use crate::iter::{DbIterator, Iter};
use crate::key::{Lsn, ValueKind};
use crate::memtable::{Lookup, Memtable};
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::redo::record::{put_rewrite_op, RECORD_REWRITE};
use crate::redo::{self, encode_record, RedoLog};
use crate::write::batch::WriteBatch;
use crate::write::completion::{Completion, WriteHandle};
use crate::write::pipeline::{Pipeline, PipelineConfig, WriteStats, Writer};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// The memtables of a sub-table: the active one and the immutable ones, newest first.
pub(crate) struct MemtableSet {
    pub(crate) active: Arc<Memtable>,
    pub(crate) immutables: Vec<Arc<Memtable>>,
}

impl MemtableSet {
    /// All memtables, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.immutables.iter())
    }
}

/// The shared state of one sub-table.
pub(crate) struct TableInner {
    pub(crate) id: u32,
    pub(crate) name: String,
    db_id: u64,
    write_buffer_size: usize,
    mems: RwLock<Arc<MemtableSet>>,
    dropped: AtomicBool,
}

impl TableInner {
    fn new(id: u32, name: String, db_id: u64, write_buffer_size: usize) -> Self {
        TableInner {
            id,
            name,
            db_id,
            write_buffer_size,
            mems: RwLock::new(Arc::new(MemtableSet {
                active: Arc::new(Memtable::for_write_buffer(write_buffer_size)),
                immutables: Vec::new(),
            })),
            dropped: AtomicBool::new(false),
        }
    }

    /// The current memtable set (a cheap `Arc` clone).
    pub(crate) fn memtables(&self) -> Arc<MemtableSet> {
        self.mems.read().clone()
    }

    /// The active memtable, switching to a new one first if it reached `write_buffer_size`.
    /// Called in pipeline stage 1 (under the log-buffer lock), which orders switches with LSNs.
    pub(crate) fn memtable_for_write(&self) -> Arc<Memtable> {
        let write_buffer_size = self.write_buffer_size;
        {
            let set = self.mems.read();
            if set.active.memory_usage() < write_buffer_size {
                return set.active.clone();
            }
        }
        let mut set = self.mems.write();
        if set.active.memory_usage() >= write_buffer_size {
            let mut immutables = Vec::with_capacity(set.immutables.len() + 1);
            immutables.push(set.active.clone());
            immutables.extend(set.immutables.iter().cloned());
            *set = Arc::new(MemtableSet {
                active: Arc::new(Memtable::for_write_buffer(write_buffer_size)),
                immutables,
            });
        }
        set.active.clone()
    }

    fn immutable_count(&self) -> usize {
        self.mems.read().immutables.len()
    }

    fn get(&self, key: &[u8], snapshot: Lsn) -> Option<Vec<u8>> {
        let set = self.memtables();
        for mem in set.newest_first() {
            if mem.min_lsn() > snapshot {
                continue;
            }
            match mem.get(key, snapshot) {
                Lookup::Value(v) => return Some(v.to_vec()),
                Lookup::Deleted => return None,
                Lookup::NotFound => {}
            }
        }
        None
    }
}

/// Live snapshots, counted per LSN (compaction will keep versions they can see).
#[derive(Default)]
pub(crate) struct SnapshotList {
    counts: Mutex<BTreeMap<Lsn, usize>>,
}

impl SnapshotList {
    fn acquire(&self, lsn: Lsn) {
        *self.counts.lock().entry(lsn).or_insert(0) += 1;
    }

    fn release(&self, lsn: Lsn) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&lsn) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&lsn);
            }
        }
    }

    /// The oldest live snapshot's LSN.
    pub(crate) fn oldest(&self) -> Option<Lsn> {
        self.counts.lock().keys().next().copied()
    }
}

struct SnapshotInner {
    lsn: Lsn,
    db_id: u64,
    list: Arc<SnapshotList>,
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        self.list.release(self.lsn);
    }
}

/// A consistent point-in-time view of every table of a database ([`Db::snapshot`]).
///
/// Cheap to clone; the view stays readable until the last clone drops.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<SnapshotInner>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("lsn", &self.inner.lsn).finish()
    }
}

impl Snapshot {
    /// The LSN this snapshot reads at: it sees every write with a smaller or equal LSN.
    pub fn lsn(&self) -> Lsn {
        self.inner.lsn
    }
}

struct Registry {
    catalog: Catalog,
    by_name: HashMap<String, Arc<TableInner>>,
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
    inner: Arc<DbInner>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.inner.path).finish()
    }
}

/// A handle to one sub-table (one LSM-tree). Cheap to clone.
#[derive(Clone)]
pub struct Table {
    db: Arc<DbInner>,
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
    /// Opens (or creates, with `create_if_missing`) the database in directory `path`, replaying
    /// its redo log.
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
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let tables: HashMap<u32, Arc<TableInner>> = catalog
            .tables
            .iter()
            .map(|(tid, name)| {
                (
                    *tid,
                    Arc::new(TableInner::new(*tid, name.clone(), id, opts.write_buffer_size)),
                )
            })
            .collect();
        let redo_dir = redo::redo_dir(&path);
        let report = redo::recover(fs.as_ref(), &redo_dir, opts.recovery_mode, &mut |op| {
            if let Some(t) = tables.get(&op.table) {
                t.memtable_for_write().insert(op.key, op.lsn, op.kind, op.value);
            }
            Ok(())
        })?;
        let log = RedoLog::create(fs.clone(), redo_dir, report.next_segment, opts.redo_segment_size)?;
        let cfg = PipelineConfig {
            queues: opts.write_queues,
            max_group_size: opts.max_group_size,
            max_group_bytes: opts.max_group_bytes,
        };
        let by_name = tables.values().map(|t| (t.name.clone(), t.clone())).collect();
        let inner = DbInner {
            id,
            path,
            registry: RwLock::new(Registry { catalog, by_name }),
            ddl: Mutex::new(()),
            pipeline: Pipeline::start(cfg, log, report.max_lsn)?,
            snapshots: Arc::new(SnapshotList::default()),
            stall_lock: Mutex::new(()),
            stall_cond: Condvar::new(),
            lock: Mutex::new(Some(lock)),
            opts,
        };
        Ok(Db { inner: Arc::new(inner) })
    }

    /// Closes the database: refuses new writes, waits for in-flight ones, makes the redo log
    /// durable and (with [`Options::rewrite_redo_on_close`]) rewrites the live data into one
    /// fresh redo segment, deleting the older ones. Other clones of this `Db` and their tables
    /// see [`Error::Closed`] afterwards. Dropping the last handle without `close` does the same,
    /// ignoring errors.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }

    /// Stops the instance as a crash would: no flush, no rewrite, no I/O at all; in-flight
    /// writes finish first. For crash tests (with [`crate::fs::FaultFs::crash`]).
    #[doc(hidden)]
    pub fn abandon_for_test(self) {
        if let Some(log) = self.inner.pipeline.close() {
            drop(log);
        }
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
        let inner = Arc::new(TableInner::new(
            id,
            name.to_string(),
            self.inner.id,
            self.inner.opts.write_buffer_size,
        ));
        let mut reg = self.inner.registry.write();
        reg.catalog = catalog;
        reg.by_name.insert(name.to_string(), inner.clone());
        Ok(Table {
            db: self.inner.clone(),
            inner,
        })
    }

    /// Drops a sub-table and all its data (durably). Handles to it then fail with
    /// [`Error::TableDropped`]. The default table cannot be dropped.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        if name == DEFAULT_TABLE {
            return Err(Error::InvalidTableName {
                name: name.to_string(),
                reason: "the default table cannot be dropped",
            });
        }
        self.inner.check_open()?;
        let _ddl = self.inner.ddl.lock();
        let (mut catalog, id) = {
            let reg = self.inner.registry.read();
            let t = reg
                .by_name
                .get(name)
                .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
            (reg.catalog.clone(), t.id)
        };
        catalog.tables.retain(|(tid, _)| *tid != id);
        catalog.store(self.inner.opts.fs.as_ref(), &self.inner.path)?;
        let mut reg = self.inner.registry.write();
        reg.catalog = catalog;
        if let Some(t) = reg.by_name.remove(name) {
            t.dropped.store(true, Ordering::Release);
        }
        drop(reg);
        // Writers stalled on this table's memtables can go on (and fail).
        let _g = self.inner.stall_lock.lock();
        self.inner.stall_cond.notify_all();
        Ok(())
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
    /// for its own commit. Writers stalled by too many immutable memtables still wait here
    /// (unless `opts.no_slowdown`).
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
        let lsn = self.inner.pipeline.visible_lsn();
        self.inner.snapshots.acquire(lsn);
        Snapshot {
            inner: Arc::new(SnapshotInner {
                lsn,
                db_id: self.inner.id,
                list: self.inner.snapshots.clone(),
            }),
        }
    }

    /// Reads several keys, possibly of different tables, at one consistent snapshot.
    pub fn multi_get<K: AsRef<[u8]>>(&self, opts: &ReadOptions, keys: &[(&Table, K)]) -> Vec<Result<Option<Vec<u8>>>> {
        let snapshot = match self.inner.read_lsn(opts) {
            Ok(s) => s,
            Err(e) => return keys.iter().map(|_| Err(e.clone())).collect(),
        };
        keys.iter()
            .map(|(t, k)| {
                if t.inner.db_id != self.inner.id {
                    return Err(Error::ForeignTable);
                }
                t.check_live()?;
                Ok(t.inner.get(k.as_ref(), snapshot))
            })
            .collect()
    }

    /// Counters of the write path (groups, writes per group, fsyncs, stall time).
    pub fn write_stats(&self) -> WriteStats {
        self.inner.pipeline.stats()
    }

    /// Total bytes held by the memtables of all tables.
    pub fn memtable_usage(&self) -> usize {
        let reg = self.inner.registry.read();
        reg.by_name
            .values()
            .map(|t| t.memtables().newest_first().map(|m| m.memory_usage()).sum::<usize>())
            .sum()
    }

    /// The LSN of the oldest live snapshot, if any.
    pub fn oldest_snapshot(&self) -> Option<Lsn> {
        self.inner.snapshots.oldest()
    }
}

impl DbInner {
    fn check_open(&self) -> Result<()> {
        if self.pipeline.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn read_lsn(&self, opts: &ReadOptions) -> Result<Lsn> {
        self.check_open()?;
        match &opts.snapshot {
            Some(s) if s.inner.db_id != self.id => Err(Error::ForeignTable),
            Some(s) => Ok(s.lsn()),
            None => Ok(self.pipeline.visible_lsn()),
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
            if t.dropped.load(Ordering::Acquire) {
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

    /// Write stall: slow down, then stop, while a touched table has too many immutable memtables.
    fn stall(&self, batch: &WriteBatch, opts: &WriteOptions) -> Result<()> {
        let mut started: Option<Instant> = None;
        for t in &batch.tables {
            loop {
                let n = t.immutable_count();
                if n < self.opts.immutable_slowdown_trigger || t.dropped.load(Ordering::Acquire) {
                    break;
                }
                if opts.no_slowdown {
                    return Err(Error::WouldStall("too many immutable memtables"));
                }
                self.check_open()?;
                started.get_or_insert_with(Instant::now);
                if n < self.opts.immutable_stop_trigger {
                    std::thread::sleep(Duration::from_micros(self.opts.slowdown_delay_micros));
                    break;
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

    fn shutdown(&self) -> Result<()> {
        let Some(mut log) = self.pipeline.close() else {
            return Ok(());
        };
        let result = if self.pipeline.poison_error().is_some() {
            // Nothing more may be written after a failed write; reopen recovers.
            Ok(())
        } else if self.opts.rewrite_redo_on_close {
            self.rewrite_redo(log)
        } else {
            log.sync()
        };
        self.lock.lock().take();
        result
    }

    /// Writes the newest visible version of every live key of every table as rewrite records
    /// into a fresh segment that supersedes the older ones.
    fn rewrite_redo(&self, log: RedoLog) -> Result<()> {
        const CHUNK: usize = 1 << 20;
        let snapshot = self.pipeline.visible_lsn();
        let tables: Vec<Arc<TableInner>> = self.registry.read().by_name.values().cloned().collect();
        log.rewrite_and_retire(&mut |emit| {
            let mut payload = Vec::with_capacity(CHUNK + 1024);
            let mut record = Vec::with_capacity(CHUNK + 1024);
            let mut flush = |payload: &mut Vec<u8>, emit: &mut dyn FnMut(&[u8]) -> Result<()>| -> Result<()> {
                if payload.is_empty() {
                    return Ok(());
                }
                record.clear();
                encode_record(&mut record, RECORD_REWRITE, 0, payload, crc32c::crc32c(payload));
                payload.clear();
                emit(&record)
            };
            for t in &tables {
                let mut it = DbIterator::new(t.memtables(), snapshot, None, None);
                it.seek_to_first();
                while it.valid() {
                    put_rewrite_op(&mut payload, it.lsn(), ValueKind::Put, t.id, it.key(), it.value());
                    if payload.len() >= CHUNK {
                        flush(&mut payload, emit)?;
                    }
                    it.next();
                }
            }
            flush(&mut payload, emit)
        })
    }
}

impl Drop for DbInner {
    fn drop(&mut self) {
        let _ = self.shutdown();
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
        if self.inner.dropped.load(Ordering::Acquire) {
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
        let snapshot = self.db.read_lsn(opts)?;
        self.check_live()?;
        Ok(self.inner.get(key, snapshot))
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
        let snapshot = self.db.read_lsn(opts)?;
        self.check_live()?;
        let mut it = DbIterator::new(
            self.inner.memtables(),
            snapshot,
            opts.lower_bound.clone(),
            opts.upper_bound.clone(),
        );
        it.pin_snapshot(opts.snapshot.clone());
        Ok(it)
    }
}
