//! The SQL catalog: databases and table schemas, kept durably in the engine sub-table
//! `sql/catalog` and served to statements as an immutable, copy-on-write [`CatalogState`].
//!
//! Invariants:
//! - Records: `D\0<db>` → empty for a database; `T\0<db>\0<table>` → a [`TableSchema`]
//!   record; `N` → the next table id (varint). Every catalog change is one synchronous engine
//!   write batch, so it is durable and atomic.
//! - A table's engine sub-tables (`sql/<id>` and `sql/<id>/<index id>`) exist whenever its
//!   schema record does. They are created before the record and dropped after it, so a crash
//!   leaves at most orphan sub-tables, which [`Catalog::open`] drops; an index still being
//!   built (write-only) at a crash is dropped too (its `CREATE INDEX` never returned). On a
//!   replicated partition the new leader does the same before the first statement of its
//!   term ([`Catalog::repair_interrupted_ddl`]).
//! - DDL is serialized by one mutex. A statement pins the state it started with for its
//!   whole run ([`Catalog::begin_statement`]), and a transaction keeps the pin of its first
//!   statement until its commit (or rollback) has completed; a DDL that must know that no one
//!   still uses an older state (a new index that every writer must maintain, a dropped table)
//!   waits for the statements and transactions that began before its change
//!   (`Catalog::wait_for_older_statements`): a row written without the new index's entry is
//!   then visible (committed) when the index build scans.

use crate::sql::error::{SqlError, SqlResult};
use crate::sql::rowcodec::{put_varint, Reader};
use crate::sql::schema::{IndexState, TableSchema};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use riptide::{Db, ReadOptions, Table, WriteBatch, WriteOptions};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The engine sub-table of the catalog.
pub const CATALOG_TABLE: &str = "sql/catalog";

/// A table as statements use it: its schema and engine handles.
#[derive(Debug)]
pub struct TableHandle {
    /// The schema.
    pub schema: TableSchema,
    /// Rows.
    pub primary: Table,
    /// One engine table per entry of `schema.indexes`, in the same order.
    pub indexes: Vec<Table>,
    /// The largest AUTO_INCREMENT value (or hidden row id) handed out or seen; shared by every
    /// version of the table's handle.
    pub auto_inc: Arc<AtomicU64>,
}

impl TableHandle {
    /// Hands out the next AUTO_INCREMENT value (or hidden row id).
    pub fn next_auto_inc(&self) -> u64 {
        self.auto_inc.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records an explicitly inserted AUTO_INCREMENT value so later generated ones pass it.
    pub fn saw_auto_inc(&self, v: u64) {
        self.auto_inc.fetch_max(v, Ordering::Relaxed);
    }
}

/// One immutable view of the catalog.
#[derive(Debug, Default)]
pub struct CatalogState {
    /// Database names.
    pub databases: BTreeSet<String>,
    /// Tables by (database, name).
    pub tables: HashMap<(String, String), Arc<TableHandle>>,
}

impl CatalogState {
    /// A table, or 1146.
    pub fn table(&self, db: &str, name: &str) -> SqlResult<&Arc<TableHandle>> {
        self.tables
            .get(&(db.to_string(), name.to_string()))
            .ok_or_else(|| SqlError::no_such_table(db, name))
    }

    /// Tables of a database, sorted by name.
    pub fn tables_of(&self, db: &str) -> Vec<&Arc<TableHandle>> {
        let mut v: Vec<_> = self
            .tables
            .iter()
            .filter(|((d, _), _)| d == db)
            .map(|(_, t)| t)
            .collect();
        v.sort_by(|a, b| a.schema.name.cmp(&b.schema.name));
        v
    }
}

/// Counts of running statements by catalog epoch parity (see the module invariants).
#[derive(Debug, Default)]
struct Epochs {
    current: AtomicU64,
    running: [AtomicUsize; 2],
}

/// A pin on the catalog, held by a running statement and, from its first statement until
/// its commit or rollback has completed, by a transaction; dropping it unpins.
pub struct StatementPin {
    epochs: Arc<Epochs>,
    slot: usize,
    /// The catalog as of the statement's start.
    pub state: Arc<CatalogState>,
}

impl Drop for StatementPin {
    fn drop(&mut self) {
        self.epochs.running[self.slot].fetch_sub(1, Ordering::Release);
    }
}

/// The catalog.
pub struct Catalog {
    db: Db,
    meta: Table,
    state: ArcSwap<CatalogState>,
    ddl: Mutex<()>,
    epochs: Arc<Epochs>,
    next_table_id: AtomicU64,
    /// Told after each DDL published its change (a replica counts its catalog as loaded).
    publish_hook: std::sync::OnceLock<PublishHook>,
}

/// See [`Catalog::on_publish`].
pub type PublishHook = Box<dyn Fn() + Send + Sync>;

fn db_key(db: &str) -> Vec<u8> {
    let mut k = b"D\0".to_vec();
    k.extend_from_slice(db.as_bytes());
    k
}

fn table_key(db: &str, name: &str) -> Vec<u8> {
    let mut k = b"T\0".to_vec();
    k.extend_from_slice(db.as_bytes());
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

const NEXT_ID_KEY: &[u8] = b"N";

fn sync() -> WriteOptions {
    WriteOptions {
        sync: true,
        ..Default::default()
    }
}

/// Removes from `schema` (durably) the indexes still being built; returns how many.
fn drop_building_indexes(db: &Db, meta: &Table, schema: &mut TableSchema) -> SqlResult<usize> {
    let building = schema
        .indexes
        .iter()
        .filter(|i| i.state == IndexState::WriteOnly)
        .count();
    if building > 0 {
        schema.indexes.retain(|i| i.state == IndexState::Public);
        let mut b = WriteBatch::new();
        b.put(meta, &table_key(&schema.db, &schema.name), &schema.encode())?;
        db.write(b, &sync())?;
    }
    Ok(building)
}

/// The engine sub-tables of `schema`: its rows and each index.
fn engine_tables(schema: &TableSchema) -> impl Iterator<Item = String> + '_ {
    std::iter::once(schema.primary_table_name()).chain(schema.indexes.iter().map(|ix| schema.index_table_name(ix.id)))
}

/// Drops the SQL engine sub-tables not in `live`; returns how many.
fn drop_orphan_tables(db: &Db, live: &BTreeSet<String>) -> SqlResult<usize> {
    let mut dropped = 0;
    for name in db.tables() {
        if name.starts_with("sql/") && name != CATALOG_TABLE && !live.contains(&name) {
            db.drop_table(&name)?;
            dropped += 1;
        }
    }
    Ok(dropped)
}

impl Catalog {
    /// Loads the catalog from `db` (creating its sub-table on first use), dropping what a
    /// crash left half-made.
    ///
    /// A replicated database (`Db::is_replicated`) is a replica of a partition: each replica
    /// creates the (empty) catalog sub-table itself, its records arrive through the Raft log,
    /// and nothing is repaired at open (a follower may not write; half-made tables are left to
    /// the leader's next DDL). Call [`Catalog::reload`] when applied entries changed it.
    pub fn open(db: Db) -> SqlResult<Catalog> {
        let replicated = db.is_replicated();
        let meta = match db.table(CATALOG_TABLE) {
            Ok(t) => t,
            // The apply loop may create it meanwhile (a write to it arrived): then it exists.
            Err(riptide::Error::TableNotFound(_)) if replicated => match db.create_table_unreplicated(CATALOG_TABLE) {
                Err(riptide::Error::TableExists(_)) => db.table(CATALOG_TABLE)?,
                other => other?,
            },
            Err(riptide::Error::TableNotFound(_)) => db.create_table(CATALOG_TABLE)?,
            Err(e) => return Err(e.into()),
        };
        let records = read_records(&meta)?;
        let mut state = CatalogState {
            databases: records.databases,
            tables: HashMap::new(),
        };
        let mut next_id = records.next_id;
        let mut live_tables = BTreeSet::new();
        for mut schema in records.schemas {
            if !replicated {
                drop_building_indexes(&db, &meta, &mut schema)?;
            }
            live_tables.extend(engine_tables(&schema));
            next_id = next_id.max(schema.id + 1);
            let handle = open_handle(&db, schema, None)?;
            state
                .tables
                .insert((handle.schema.db.clone(), handle.schema.name.clone()), Arc::new(handle));
        }
        if !replicated {
            drop_orphan_tables(&db, &live_tables)?;
        }
        Ok(Catalog {
            db,
            meta,
            state: ArcSwap::from_pointee(state),
            ddl: Mutex::new(()),
            epochs: Arc::new(Epochs::default()),
            next_table_id: AtomicU64::new(next_id),
            publish_hook: std::sync::OnceLock::new(),
        })
    }

    /// Reads the catalog's records again and publishes them (a replica, after applied entries
    /// changed them). A table whose schema did not change keeps its handle; one that did
    /// keeps its AUTO_INCREMENT counter. Takes the DDL lock: never call it from a thread that
    /// a DDL statement may be waiting on.
    pub fn reload(&self) -> SqlResult<()> {
        let _ddl = self.ddl.lock();
        let records = read_records(&self.meta)?;
        let current = self.state();
        let mut state = CatalogState {
            databases: records.databases,
            tables: HashMap::new(),
        };
        let mut next_id = records.next_id;
        for schema in records.schemas {
            next_id = next_id.max(schema.id + 1);
            let key = (schema.db.clone(), schema.name.clone());
            let handle = match current.tables.get(&key) {
                Some(h) if h.schema == schema => h.clone(),
                Some(h) if h.schema.id == schema.id => {
                    Arc::new(open_handle(&self.db, schema, Some(h.auto_inc.clone()))?)
                }
                _ => Arc::new(open_handle(&self.db, schema, None)?),
            };
            state.tables.insert(key, handle);
        }
        self.next_table_id.fetch_max(next_id, Ordering::AcqRel);
        self.state.store(Arc::new(state));
        Ok(())
    }

    /// Drops what DDL interrupted by a failover left half-made: indexes still being built
    /// (write-only: their `CREATE INDEX` never returned) and engine sub-tables no schema names.
    /// For a replica that has just become the leader, before the first statement of its term
    /// (no DDL of this term can be under way then); its writes go through the Raft log, and
    /// the catalog is reloaded after them. Returns how many things it dropped.
    ///
    /// If a DDL statement of an earlier term still runs on this node (it holds the DDL lock),
    /// nothing is done: that statement ends its own work, and waiting for it could wait for
    /// the very statement calling this (an index build waits for older statements).
    pub fn repair_interrupted_ddl(&self) -> SqlResult<usize> {
        let repaired = {
            let Some(_ddl) = self.ddl.try_lock() else {
                return Ok(0);
            };
            let mut repaired = 0;
            let mut live_tables = BTreeSet::new();
            for mut schema in read_records(&self.meta)?.schemas {
                repaired += drop_building_indexes(&self.db, &self.meta, &mut schema)?;
                live_tables.extend(engine_tables(&schema));
            }
            repaired + drop_orphan_tables(&self.db, &live_tables)?
        };
        if repaired > 0 {
            self.reload()?;
        }
        Ok(repaired)
    }

    /// Raises every table's AUTO_INCREMENT counter to the largest value stored (a replica
    /// that has just become the leader: rows applied from the log did not move its counters).
    pub fn refresh_auto_increments(&self) -> SqlResult<()> {
        for handle in self.state().tables.values() {
            let mark = auto_inc_high_mark(&handle.schema, &handle.primary)?;
            handle.auto_inc.fetch_max(mark, Ordering::AcqRel);
        }
        Ok(())
    }

    /// The engine.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The current state (for statements that need no pin: SHOW, metadata).
    pub fn state(&self) -> Arc<CatalogState> {
        self.state.load_full()
    }

    /// Pins the catalog for one statement.
    pub fn begin_statement(&self) -> StatementPin {
        loop {
            let e = self.epochs.current.load(Ordering::Acquire);
            let slot = (e & 1) as usize;
            self.epochs.running[slot].fetch_add(1, Ordering::AcqRel);
            if self.epochs.current.load(Ordering::Acquire) == e {
                return StatementPin {
                    epochs: self.epochs.clone(),
                    slot,
                    state: self.state.load_full(),
                };
            }
            self.epochs.running[slot].fetch_sub(1, Ordering::Release);
        }
    }

    /// Waits until every statement that began before now has ended. Call with the DDL lock
    /// held, after publishing a new state, and never from inside a pinned statement.
    fn wait_for_older_statements(&self) {
        let old = self.epochs.current.fetch_add(1, Ordering::AcqRel);
        let slot = (old & 1) as usize;
        let mut nap = Duration::from_micros(50);
        while self.epochs.running[slot].load(Ordering::Acquire) != 0 {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// Takes the DDL lock.
    pub fn lock_ddl(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.ddl.lock()
    }

    /// Publishes `change` applied to a copy of the current state.
    fn publish(&self, change: impl FnOnce(&mut CatalogState)) {
        let cur = self.state.load_full();
        let mut next = CatalogState {
            databases: cur.databases.clone(),
            tables: cur.tables.clone(),
        };
        change(&mut next);
        self.state.store(Arc::new(next));
        if let Some(hook) = self.publish_hook.get() {
            hook();
        }
    }

    /// Calls `hook` after every DDL change is published (once set; set once). A replica's
    /// leader uses it: its DDL, under the DDL lock, publishes the records it just wrote
    /// through the log, so its catalog is then as loaded as the log.
    pub fn on_publish(&self, hook: PublishHook) {
        let _ = self.publish_hook.set(hook);
    }

    /// CREATE DATABASE (under the DDL lock).
    pub fn create_database(&self, name: &str, if_not_exists: bool) -> SqlResult<bool> {
        if self.state().databases.contains(name) {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(SqlError::database_exists(name))
            };
        }
        let mut b = WriteBatch::new();
        b.put(&self.meta, &db_key(name), b"")?;
        self.db.write(b, &sync())?;
        self.publish(|s| {
            s.databases.insert(name.to_string());
        });
        Ok(true)
    }

    /// DROP DATABASE (under the DDL lock): drops its tables, then the database.
    pub fn drop_database(&self, name: &str, if_exists: bool) -> SqlResult<usize> {
        let state = self.state();
        if !state.databases.contains(name) {
            return if if_exists {
                Ok(0)
            } else {
                Err(SqlError::no_such_database(name))
            };
        }
        let tables: Vec<String> = state.tables_of(name).iter().map(|t| t.schema.name.clone()).collect();
        for t in &tables {
            self.drop_table(name, t)?;
        }
        let mut b = WriteBatch::new();
        b.delete(&self.meta, &db_key(name))?;
        self.db.write(b, &sync())?;
        self.publish(|s| {
            s.databases.remove(name);
        });
        Ok(tables.len())
    }

    /// A fresh table id (durable before use).
    pub fn allocate_table_id(&self) -> SqlResult<u64> {
        let id = self.next_table_id.fetch_add(1, Ordering::AcqRel);
        let mut v = Vec::new();
        put_varint(&mut v, (id + 1) as u128);
        let mut b = WriteBatch::new();
        b.put(&self.meta, NEXT_ID_KEY, &v)?;
        self.db.write(b, &sync())?;
        Ok(id)
    }

    /// CREATE TABLE (under the DDL lock): `schema` has a fresh id from
    /// [`Catalog::allocate_table_id`].
    pub fn create_table(&self, schema: TableSchema) -> SqlResult<()> {
        self.db.create_table(&schema.primary_table_name())?;
        for ix in &schema.indexes {
            self.db.create_table(&schema.index_table_name(ix.id))?;
        }
        self.store_schema(&schema)?;
        let handle = open_handle(&self.db, schema, None)?;
        self.publish(|s| {
            s.tables
                .insert((handle.schema.db.clone(), handle.schema.name.clone()), Arc::new(handle));
        });
        Ok(())
    }

    fn store_schema(&self, schema: &TableSchema) -> SqlResult<()> {
        let mut b = WriteBatch::new();
        b.put(&self.meta, &table_key(&schema.db, &schema.name), &schema.encode())?;
        self.db.write(b, &sync())?;
        Ok(())
    }

    /// Replaces a table's schema (under the DDL lock): ALTER TABLE, CREATE INDEX states.
    /// Creates the sub-tables of new indexes first; with `wait`, returns only once no
    /// statement still uses the older schema.
    pub fn replace_schema(&self, schema: TableSchema, wait: bool) -> SqlResult<Arc<TableHandle>> {
        let state = self.state();
        let old = state.table(&schema.db, &schema.name)?.clone();
        for ix in &schema.indexes {
            if !old.schema.indexes.iter().any(|o| o.id == ix.id) {
                self.db.create_table(&schema.index_table_name(ix.id))?;
            }
        }
        self.store_schema(&schema)?;
        let dropped: Vec<String> = old
            .schema
            .indexes
            .iter()
            .filter(|o| !schema.indexes.iter().any(|i| i.id == o.id))
            .map(|o| old.schema.index_table_name(o.id))
            .collect();
        let handle = Arc::new(open_handle(&self.db, schema, Some(old.auto_inc.clone()))?);
        let h = handle.clone();
        self.publish(|s| {
            s.tables.insert((h.schema.db.clone(), h.schema.name.clone()), h);
        });
        if wait || !dropped.is_empty() {
            self.wait_for_older_statements();
        }
        for name in dropped {
            self.db.drop_table(&name)?;
        }
        Ok(handle)
    }

    /// DROP TABLE (under the DDL lock).
    pub fn drop_table(&self, db: &str, name: &str) -> SqlResult<()> {
        let old = self.state().table(db, name)?.clone();
        let mut b = WriteBatch::new();
        b.delete(&self.meta, &table_key(db, name))?;
        self.db.write(b, &sync())?;
        self.publish(|s| {
            s.tables.remove(&(db.to_string(), name.to_string()));
        });
        self.wait_for_older_statements();
        self.db.drop_table(&old.schema.primary_table_name())?;
        for ix in &old.schema.indexes {
            self.db.drop_table(&old.schema.index_table_name(ix.id))?;
        }
        Ok(())
    }
}

/// The catalog's records as stored.
struct Records {
    databases: BTreeSet<String>,
    schemas: Vec<TableSchema>,
    next_id: u64,
}

fn read_records(meta: &Table) -> SqlResult<Records> {
    let mut records = Records {
        databases: BTreeSet::new(),
        schemas: Vec::new(),
        next_id: 1,
    };
    for entry in meta.iter(&ReadOptions::default())? {
        let (k, v) = entry?;
        match k.first() {
            Some(b'D') => {
                records.databases.insert(String::from_utf8_lossy(&k[2..]).into_owned());
            }
            Some(b'T') => records.schemas.push(TableSchema::decode(&v)?),
            Some(b'N') => records.next_id = Reader::new(&v, "catalog").u64()?,
            _ => return Err(Reader::new(&k, "catalog key").corrupt("unknown record")),
        }
    }
    Ok(records)
}

/// Opens a table's engine handles and, for a new handle, finds its AUTO_INCREMENT high mark.
fn open_handle(db: &Db, schema: TableSchema, auto_inc: Option<Arc<AtomicU64>>) -> SqlResult<TableHandle> {
    let primary = db.table(&schema.primary_table_name())?;
    let indexes = schema
        .indexes
        .iter()
        .map(|ix| db.table(&schema.index_table_name(ix.id)))
        .collect::<Result<Vec<_>, _>>()?;
    let auto_inc = match auto_inc {
        Some(a) => a,
        None => Arc::new(AtomicU64::new(auto_inc_high_mark(&schema, &primary)?)),
    };
    Ok(TableHandle {
        schema,
        primary,
        indexes,
        auto_inc,
    })
}

/// The largest AUTO_INCREMENT value (or hidden row id) stored: the last primary key when the
/// column leads the primary key (or for a hidden row id), else a scan.
fn auto_inc_high_mark(schema: &TableSchema, primary: &Table) -> SqlResult<u64> {
    let as_u64 = |v: &crate::value::Value| match v {
        crate::value::Value::Int(i) => (*i).max(0) as u64,
        crate::value::Value::UInt(u) => *u,
        _ => 0,
    };
    let ai = schema.auto_increment_column();
    let mut row = vec![crate::value::Value::Null; schema.columns.len()];
    let leads_key = ai.is_some_and(|c| schema.primary.first() == Some(&c));
    if leads_key || (schema.primary.is_empty() && ai.is_none()) {
        let Some(last) = primary.iter(&ReadOptions::default())?.next_back() else {
            return Ok(0);
        };
        let (k, _) = last?;
        let row_id = schema.decode_primary_key(&k, &mut row)?;
        return Ok(match ai {
            Some(c) => as_u64(&row[c]),
            None => row_id.unwrap_or(0),
        });
    }
    if ai.is_none() && !schema.primary.is_empty() {
        return Ok(0);
    }
    // A hidden row id with an AUTO_INCREMENT column beside it, or an AUTO_INCREMENT column
    // that does not lead the key: one counter serves both, so take the largest of all.
    let mut high = 0;
    for entry in primary.iter(&ReadOptions::default())? {
        let (k, v) = entry?;
        let row_id = schema.decode_primary_key(&k, &mut row)?;
        crate::sql::rowcodec::decode_row_into(schema, &v, &mut row)?;
        high = high.max(row_id.unwrap_or(0));
        if let Some(c) = ai {
            high = high.max(as_u64(&row[c]));
        }
    }
    Ok(high)
}
