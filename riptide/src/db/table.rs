//! [`Table`]: the handle to one sub-table, its reads, writes and manual flushes and
//! compactions; and the table DDL of [`Db`] (create and drop).
//!
//! Invariants:
//! - DDL is serialized by the instance's DDL mutex and durable before it returns: the
//!   `CATALOG` is rewritten first, then the registry changes in memory.
//! - A dropped table's handles fail with [`Error::TableDropped`]; no flush or compaction of it
//!   commits after its metadata is dropped (both locks are held across the drop).
//! - A table name is 1 to `MAX_TABLE_NAME` bytes; errors quote at most 64 bytes of it.

use super::workers::JobQueue;
use super::{Db, DbHandle};
use crate::cache::RowCache;
use crate::catalog::{DEFAULT_TABLE, MAX_TABLE_NAME};
use crate::compaction::{CompactionKind, KeyRange};
use crate::error::{Error, Result};
use crate::extent_store::ExtentStore;
use crate::iter::{DbIterator, Iter};
use crate::meta::edit::SlogEntry;
use crate::options::{ReadOptions, WriteOptions};
use crate::replication::ReplicatedOp;
use crate::subtable::{TableInner, TableState};
use crate::table_options::TableOptions;
use crate::version::{LevelSet, MetaSnapshot};
use crate::write::batch::WriteBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A handle to one sub-table (one LSM-tree). Cheap to clone.
#[derive(Clone)]
pub struct Table {
    pub(super) db: Arc<DbHandle>,
    pub(super) inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.inner.name).finish()
    }
}

fn validate_table_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_table_name(name, "empty"));
    }
    if name.len() > MAX_TABLE_NAME {
        return Err(Error::invalid_table_name(name, "longer than 255 bytes"));
    }
    Ok(())
}

/// What every sub-table of an instance shares: builds their [`TableInner`]s (at open and at
/// `create_table`).
pub(super) struct TableFactory {
    pub(super) db_id: u64,
    pub(super) write_buffer_size: usize,
    pub(super) store: Arc<ExtentStore>,
    pub(super) row_cache: Arc<RowCache>,
    /// Where a table goes when one of its memtables becomes immutable.
    pub(super) flush_queue: Arc<JobQueue>,
}

impl TableFactory {
    pub(super) fn build(
        &self,
        id: u32,
        name: &str,
        options: TableOptions,
        levels: LevelSet,
        state: TableState,
    ) -> Arc<TableInner> {
        let queue = self.flush_queue.clone();
        Arc::new(TableInner::new(
            id,
            name.to_string(),
            self.db_id,
            self.write_buffer_size,
            levels,
            state,
            self.store.clone(),
            self.row_cache.clone(),
            options,
            Arc::new(move |t| queue.push(t)),
        ))
    }
}

impl Db {
    /// Creates a sub-table (durably) with the database's options and returns it.
    ///
    /// Errors: [`Error::TableExists`], [`Error::InvalidTableName`], [`Error::Io`].
    pub fn create_table(&self, name: &str) -> Result<Table> {
        self.create_table_with(name, TableOptions::default())
    }

    /// Creates a sub-table (durably) with its own options, kept in the catalog (shown by
    /// `riptide inspect`), and returns it.
    ///
    /// Errors: [`Error::TableExists`], [`Error::InvalidTableName`], [`Error::InvalidOption`],
    /// [`Error::Io`].
    ///
    /// With a replicator installed ([`Db::set_replicator`]) the creation is replicated (and
    /// only default options can be): it returns once this replica has applied it.
    pub fn create_table_with(&self, name: &str, options: TableOptions) -> Result<Table> {
        if self.is_replicated() {
            validate_table_name(name)?;
            if !options.is_default() {
                return Err(Error::InvalidOption {
                    option: "table options",
                    reason: "a replicated database creates tables with the database's options".into(),
                });
            }
            self.inner.check_open()?;
            self.inner.check_writable()?;
            if self.table(name).is_ok() {
                return Err(Error::TableExists(name.to_string()));
            }
            self.replicate_ddl(ReplicatedOp::CreateTable { name: name.to_string() })?;
            return self.table(name);
        }
        self.create_table_local(name, options)
    }

    /// [`Db::create_table`] on this database alone, past any replicator: for the replication
    /// layer (its own tables, and applying a replicated creation).
    pub fn create_table_unreplicated(&self, name: &str) -> Result<Table> {
        self.create_table_local(name, TableOptions::default())
    }

    fn create_table_local(&self, name: &str, options: TableOptions) -> Result<Table> {
        validate_table_name(name)?;
        options.validate()?;
        if options.l2_tier == Some(crate::tier::Tier::Object) && self.inner.opts.object_store.is_none() {
            return Err(Error::InvalidOption {
                option: "l2_tier",
                reason: format!("table `{name}` wants L2 in the object tier; the database has no object store"),
            });
        }
        self.inner.check_open()?;
        self.inner.check_writable()?;
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
        if !options.is_default() {
            catalog.options.insert(id, options.clone());
        }
        catalog.store(self.inner.opts.fs.as_ref(), &self.inner.path)?;
        let state = TableState {
            flushed_lsn: 0,
            next_layer: 1,
        };
        let inner = self.inner.tables.build(id, name, options, LevelSet::empty(), state);
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
    ///
    /// With a replicator installed the drop is replicated; it returns once this replica has
    /// applied it.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        if name == DEFAULT_TABLE {
            return Err(Error::invalid_table_name(name, "the default table cannot be dropped"));
        }
        if self.is_replicated() {
            self.inner.check_open()?;
            self.inner.check_writable()?;
            self.table(name)?;
            return self.replicate_ddl(ReplicatedOp::DropTable { name: name.to_string() });
        }
        self.drop_table_local(name)
    }

    /// [`Db::drop_table`] on this database alone, past any replicator (see
    /// [`Db::create_table_unreplicated`]).
    pub fn drop_table_unreplicated(&self, name: &str) -> Result<()> {
        if name == DEFAULT_TABLE {
            return Err(Error::invalid_table_name(name, "the default table cannot be dropped"));
        }
        self.drop_table_local(name)
    }

    fn drop_table_local(&self, name: &str) -> Result<()> {
        self.inner.check_open()?;
        self.inner.check_writable()?;
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
        catalog.options.remove(&table.id);
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
            table.publish(MetaSnapshot {
                active: cur.active.clone(),
                immutables: Vec::new(),
                levels: Arc::new(LevelSet::empty()),
                version: cur.version + 1,
                gc_horizon: cur.gc_horizon,
            });
        }
        self.inner.row_cache.erase_table(table.id);
        // Writers stalled on this table's memtables can go on (and fail).
        self.inner.stall.wake();
        dropped_meta
    }
}

impl Table {
    pub(crate) fn db_id(&self) -> u64 {
        self.inner.db_id
    }

    pub(crate) fn inner(&self) -> &Arc<TableInner> {
        &self.inner
    }

    pub(super) fn check_live(&self) -> Result<()> {
        if self.inner.is_dropped() {
            return Err(Error::TableDropped(self.inner.name.clone()));
        }
        Ok(())
    }

    /// The table's own options, as given to [`Db::create_table_with`] (fields left `None`
    /// follow the database's options).
    pub fn options(&self) -> &TableOptions {
        &self.inner.options
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
    /// [`crate::Options::compaction_reuse`] is on): the L2 extents no L1 extent overlaps stay as they
    /// are, and L1 extents whose rows skip whole L2 extents are first split where those L2
    /// extents start, so those stay too. Waits for it. `compact_l0` then `compact_l1` is what background compaction does to
    /// move a flushed run to the bottom; [`Table::compact`] also rewrites all of L2.
    pub fn compact_l1(&self) -> Result<()> {
        self.check_live()?;
        self.db.run_compaction(&self.inner, CompactionKind::Split)?;
        self.db.run_compaction(&self.inner, CompactionKind::Major)?;
        Ok(())
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
