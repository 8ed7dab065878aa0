//! [`Db::open`]: recovery, in X-Engine's order.
//!
//! 1. Validate the options and the path, before touching anything on disk.
//! 2. Take the `LOCK` (one instance per directory), load or create the `CATALOG`.
//! 3. Metadata: the extent space's file headers, then the checkpoint and the committed
//!    transactions of the slog; every extent the metadata names is marked in use.
//!    With an object store, the object tier opens (its extent cache keeps the files of live
//!    extents); recovery reads no object data. Without one, metadata naming object-tier
//!    extents fails the open.
//! 4. Claim the object store (its `OWNER` object names this database's `IDENTITY`; another
//!    database's store fails the open), then queue for deletion the extent objects no
//!    metadata and no checkpoint pin (`PINS`) names (best effort; the collector starts last).
//!    A read-only open ([`Db::open_read_only`]) skips this step and step 7, and writes
//!    nothing (its file system keeps what recovery writes in memory).
//! 5. Drop the metadata of tables the catalog no longer names (a crash between the two
//!    updates of a drop).
//! 6. Replay the redo log into memtables from each table's recovery point (its last flush's
//!    seal LSN); the pipeline starts after the highest LSN seen in the log or in extents.
//! 7. Start the background workers, with every table that replay left immutable memtables in
//!    already queued for a flush.

use super::stats::BackgroundCounters;
use super::table::TableFactory;
use super::workers::Workers;
use super::{check_path, lock_database, Db, DbHandle, DbInner, MetaLog, Registry, NEXT_DB_ID};
use crate::cache::RowCache;
use crate::catalog::{catalog_path, catalog_tmp_path, Catalog};
use crate::error::{Error, Result};
use crate::extent::FOOTER_SIZE;
use crate::extent_store::{looks_like_footer, ExtentStore};
use crate::fs::{FileSystem, ReadOnlyFs};
use crate::key::Lsn;
use crate::meta::edit::{MetaState, SlogEntry};
use crate::meta::slog::Slog;
use crate::options::Options;
use crate::redo::{self, RedoLog};
use crate::snapshot::SnapshotList;
use crate::space::readers::{self, ReaderLease};
use crate::space::{ExtentId, ExtentSpace, SpaceOptions};
use crate::subtable::{TableInner, TableState};
use crate::tier::pins::Pins;
use crate::tier::{owner, ExtentCache, ObjectTier, Tier, EXTENT_CACHE_DIR};
use crate::version::LevelSet;
use crate::write::pipeline::{Pipeline, PipelineConfig};
use crate::write::stall::WriteStall;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Db {
    /// Opens (or creates, with `create_if_missing`) the database in directory `path`:
    /// recovers its metadata and extents, then replays its redo log.
    ///
    /// Errors: [`Error::InvalidOption`] for a bad option or an empty `path`, [`Error::Locked`]
    /// if another instance has it open, [`Error::Corruption`] for damage recovery may not
    /// repair (see [`crate::RecoveryMode`]), [`Error::Io`] for I/O failures.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Self::open_instance(path.as_ref(), opts, None)
    }

    /// Opens the database in directory `path` for reads only: a checkpoint
    /// ([`Db::checkpoint`]), a restored backup, a closed database, or a *view* of a database
    /// another instance has open for writes (seed 003's read-only nodes). Recovery runs as in
    /// [`Db::open`] (the redo log is replayed into memtables), but what it would write (a new
    /// metadata log, a new redo segment) stays in memory, no background work runs, and writes,
    /// DDL, flushes, compactions and checkpoints fail with [`Error::ReadOnly`]. With an object
    /// store, the store is not claimed and no object is deleted; extents fetched from it are
    /// cached in memory (up to `extent_cache_size`).
    ///
    /// The directory's `LOCK` is taken if it is free (and created if missing), so no
    /// read-write instance changes the files meanwhile. If another instance holds it, the open
    /// is a **view**: it registers a lease in `<db>/readers/` (the one file it writes there,
    /// deleted once the view and every table handle or iterator taken from it are gone), and
    /// holds a prefix of that instance's writes: every write made
    /// before the open (acknowledged or only written to the redo log), none after. While the
    /// view is open the writer keeps the extents it frees out of reuse, so every read of the
    /// view is served; objects in the object tier stay for the writer's
    /// `object_delete_grace`, after which a view still naming them gets
    /// [`Error::ObjectStore`]. Open a new view to see newer writes. An open that meets the
    /// writer's changes half done is retried (a few times, then its error is returned).
    ///
    /// Errors: as [`Db::open`]; [`Error::NotFound`] where there is no database.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use riptide::{Db, Error, Options};
    /// let db = Db::open(dir.path(), Options::default())?;
    /// db.default_table().put(b"k", b"v")?;
    /// let view = Db::open_read_only(dir.path(), Options::default())?;
    /// db.default_table().put(b"k", b"w")?;
    /// assert_eq!(view.default_table().get(b"k")?, Some(b"v".to_vec()));
    /// assert!(matches!(view.default_table().put(b"k", b"x"), Err(Error::ReadOnly(_))));
    /// view.close()?;
    /// db.close()?;
    /// let ro = Db::open_read_only(dir.path(), Options::default())?;
    /// assert_eq!(ro.default_table().get(b"k")?, Some(b"w".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let path = path.as_ref();
        let base = opts.fs.clone();
        let mut lease = None;
        let mut attempt = 1;
        loop {
            // Each attempt on a fresh memory layer: a failed one's recovery wrote into its own.
            let ro = Arc::new(ReadOnlyFs::new(base.clone()));
            let attempt_opts = Options {
                fs: ro.clone(),
                create_if_missing: false,
                error_if_exists: false,
                ..opts.clone()
            };
            let how = ReadOnly {
                fs: &ro,
                base: &base,
                lease: &mut lease,
            };
            match Self::open_instance(path, attempt_opts, Some(how)) {
                Err(e) if lease.is_some() && attempt < VIEW_OPEN_ATTEMPTS && raced_with_a_writer(&e) => {
                    std::thread::sleep(std::time::Duration::from_millis(10 * attempt));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn open_instance(path: &Path, opts: Options, mut read_only_open: Option<ReadOnly<'_>>) -> Result<Db> {
        let read_only = read_only_open.is_some();
        let path = path.to_path_buf();
        check_path(&path)?;
        opts.validate()?;
        let fs = opts.fs.clone();
        let exists = fs.exists(&catalog_path(&path));
        if !exists && !opts.create_if_missing {
            return Err(Error::NotFound(path));
        }
        if exists && opts.error_if_exists {
            return Err(Error::AlreadyExists(path));
        }
        fs.create_dir_all(&path).map_err(|e| Error::io("mkdir", &path, e))?;
        // A read-only open of a database another instance holds is a view of it (see
        // `open_read_only`): lease first, then the oldest redo segment, then the metadata.
        let (lock, view) = match (lock_database(fs.as_ref(), &path), read_only_open.as_mut()) {
            (Ok(lock), None) => {
                // Before this writer touches the redo log (see `readers::mark_writer`).
                readers::mark_writer(fs.as_ref(), &path)?;
                (Some(lock), None)
            }
            (Ok(lock), Some(_)) => (Some(lock), None),
            (Err(Error::Locked(_)), Some(ro)) => {
                if ro.lease.is_none() {
                    *ro.lease = Some(ReaderLease::register(ro.base.clone(), &path)?);
                }
                let writer = readers::writer_mark(ro.base.as_ref(), &path)?;
                let oldest = redo::segment_names(ro.base.as_ref(), &redo::redo_dir(&path))?
                    .into_iter()
                    .next();
                (None, Some(ViewStart { writer, oldest }))
            }
            (Err(e), _) => return Err(e),
        };
        let catalog = match Catalog::load(fs.as_ref(), &path)? {
            Some(c) => c,
            None => {
                let c = Catalog::new();
                c.store(fs.as_ref(), &path)?;
                c
            }
        };
        let tmp = catalog_tmp_path(&path);
        if fs.exists(&tmp) {
            fs.remove_file(&tmp).map_err(|e| Error::io("remove", &tmp, e))?;
        }
        // Metadata: extent space, checkpoint + slog, ownership of extents.
        let space = Arc::new(ExtentSpace::open(
            fs.clone(),
            &path,
            SpaceOptions {
                extents_per_file: opts.extents_per_file,
                // A writer holds the slots it frees for views; a read-only instance frees none.
                watch_readers: !read_only,
            },
        )?);
        let (slog, recovered) = Slog::open(fs.clone(), &path)?;
        if let (Some(start), Some(ro)) = (&view, read_only_open.as_ref()) {
            view_redo(ro.fs, ro.base.as_ref(), &path, &catalog, start)?;
        }
        let mut state = recovered.state;
        // Object-tier extents of the tables the catalog names (a table dropped from the catalog
        // but not yet from the metadata loses its metadata below: its objects are orphans).
        // Id -> object size (`data_size` + footer).
        let object_extents: HashMap<u64, u64> = state
            .tables
            .iter()
            .filter(|(tid, _)| catalog.tables.iter().any(|(id, _)| id == *tid))
            .flat_map(|(_, tm)| tm.extents().map(|(_, _, e)| e))
            .filter(|e| ExtentId(e.id).is_object())
            .map(|e| (e.id, e.data_size + FOOTER_SIZE as u64))
            .collect();
        let objects = open_object_tier(&path, &opts, &object_extents, view.is_some())?;
        if objects.is_none() {
            if let Some((tid, _)) = catalog.options.iter().find(|(_, o)| o.l2_tier == Some(Tier::Object)) {
                return Err(Error::InvalidOption {
                    option: "object_store",
                    reason: format!(
                        "table {tid} keeps L2 in the object tier; open the database with Options::object_store"
                    ),
                });
            }
        }
        let factory = TableFactory {
            db_id: NEXT_DB_ID.fetch_add(1, Ordering::Relaxed),
            write_buffer_size: opts.write_buffer_size,
            store: Arc::new(
                ExtentStore::new(space.clone(), opts.block_cache_size, opts.table_cache_size)
                    .with_partial_reads(opts.partial_block_reads)
                    .with_swizzling(opts.block_swizzling)
                    .with_objects(objects.clone()),
            ),
            row_cache: Arc::new(RowCache::new(opts.row_cache_size, 4 << 10)),
            flush_queue: Default::default(),
        };
        let mut tables: HashMap<u32, Arc<TableInner>> = HashMap::new();
        let mut floor_lsn: Lsn = 0;
        for (tid, name) in &catalog.tables {
            let meta = state.tables.get(tid).cloned().unwrap_or_default();
            for e in meta.levels.iter().flat_map(|l| l.values()).flatten() {
                if !ExtentId(e.id).is_object() {
                    space.reference(ExtentId(e.id), e.slots)?;
                }
                floor_lsn = floor_lsn.max(e.max_lsn);
            }
            floor_lsn = floor_lsn.max(meta.flushed_lsn);
            let levels = LevelSet::from_meta(&factory.store, &meta);
            let table_state = TableState {
                flushed_lsn: meta.flushed_lsn,
                next_layer: meta.next_layer.max(1),
            };
            tables.insert(
                *tid,
                factory.build(*tid, name, catalog.options_of(*tid), levels, table_state),
            );
        }
        space.finish_recovery(&looks_like_footer)?;
        if !read_only {
            // Views of the previous instance may name extents its metadata no longer does.
            space.hold_free_slots_for_readers();
        }
        if let Some(tier) = objects.as_ref().filter(|_| !read_only) {
            // Objects no metadata names: crashed uploads, deletions cut short by a close or a
            // crash. They are only queued here; the collector, started once the open can no
            // longer fail, deletes them. Only in a store this database owns (another's fails
            // the open). An unreachable store does not stop the open (recovery reads no object
            // data); the next open tries again.
            tier.set_pinned(Pins::load(fs.as_ref(), &path)?.ids());
            let identity = owner::load_or_create_identity(fs.as_ref(), &path)?;
            if tier.claim(&identity)? {
                let _ = tier.reclaim_orphans(&object_extents);
            }
        }
        // Metadata of tables dropped from the catalog (a crash between the two updates).
        let orphans: Vec<SlogEntry> = state
            .tables
            .keys()
            .filter(|t| !tables.contains_key(t))
            .map(|t| SlogEntry::DropTable(*t))
            .collect();
        let mut meta_log = MetaLog {
            slog,
            state: MetaState::default(),
        };
        if !orphans.is_empty() {
            meta_log.slog.commit(&orphans)?;
            for e in &orphans {
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
        let log = RedoLog::create_with(
            fs.clone(),
            redo_dir.clone(),
            report.next_segment,
            opts.redo_segment_size,
            report.segments.clone(),
            opts.redo_preallocate,
        )?;
        let redo_segments = log.segments();
        let cfg = PipelineConfig {
            queues: opts.write_queues,
            max_group_size: opts.max_group_size,
            max_group_bytes: opts.max_group_bytes,
            parallel_insert_helpers: opts.parallel_insert_helpers,
            write_wait_spin: std::time::Duration::from_micros(opts.write_wait_spin_micros),
            write_wait_adaptive: opts.write_wait_adaptive,
            driver_commit_groups: opts.driver_commit_groups,
            write_lock_spin: std::time::Duration::from_nanos(opts.write_lock_spin_nanos),
        };
        let by_name = tables.values().map(|t| (t.name.clone(), t.clone())).collect();
        let workers = Workers::new(factory.flush_queue.clone());
        let inner = Arc::new(DbInner {
            id: factory.db_id,
            path,
            registry: RwLock::new(Registry {
                catalog,
                by_name,
                by_id: tables.clone(),
            }),
            ddl: Mutex::new(()),
            pipeline: Pipeline::start(cfg, log, report.max_lsn.max(floor_lsn))?,
            snapshots: Arc::new(SnapshotList::default()),
            stall: WriteStall::new(&opts),
            lock: Mutex::new(lock),
            store: factory.store.clone(),
            row_cache: factory.row_cache.clone(),
            tables: factory,
            meta: Mutex::new(meta_log),
            redo_dir,
            redo_segments,
            workers,
            level_counters: Default::default(),
            txns: Default::default(),
            bg_error: Mutex::new(None),
            counters: BackgroundCounters::default(),
            object_threads: Mutex::new(Vec::new()),
            futile_versions: Mutex::new(Default::default()),
            read_only,
            pins_lock: Mutex::new(()),
            replicator: std::sync::OnceLock::new(),
            opts,
        });
        if let Some(lease) = read_only_open.and_then(|ro| ro.lease.take()) {
            // Kept until the last reader of the view's extents is gone (see `keep_lease`).
            space.keep_lease(lease);
        }
        if read_only {
            return Ok(Db {
                inner: Arc::new(DbHandle(inner)),
            });
        }
        // Replay may have left immutable memtables.
        for t in tables.values() {
            if t.immutable_count() > 0 {
                inner.workers.flushes.push(t.id);
            }
        }
        inner.workers.start(&inner)?;
        if let Some(tier) = &objects {
            match tier.start_threads() {
                Ok(h) => *inner.object_threads.lock() = h,
                Err(e) => {
                    let _ = inner.shutdown();
                    return Err(e);
                }
            }
        }
        Ok(Db {
            inner: Arc::new(DbHandle(inner)),
        })
    }
}

/// The object tier of the database at `path`, if `opts` configures an object store; an error
/// if the metadata names `object_extents` extents in the object tier and none is configured.
fn open_object_tier(
    path: &Path,
    opts: &Options,
    object_extents: &HashMap<u64, u64>,
    view: bool,
) -> Result<Option<Arc<ObjectTier>>> {
    let Some(store) = &opts.object_store else {
        if !object_extents.is_empty() {
            return Err(Error::InvalidOption {
                option: "object_store",
                reason: format!(
                    "the database has {} extents in the object tier; open it with Options::object_store",
                    object_extents.len()
                ),
            });
        }
        return Ok(None);
    };
    // A view keeps its cache apart from the writer's, which changes under it (in memory: a
    // read-only open writes nothing to the directory).
    let cache_dir = path.join(if view { VIEW_EXTENT_CACHE_DIR } else { EXTENT_CACHE_DIR });
    let cache = ExtentCache::open(opts.fs.clone(), &cache_dir, opts.extent_cache_size, object_extents)?;
    Ok(Some(Arc::new(ObjectTier::new(
        store.clone(),
        opts.object_retry,
        opts.object_delete_grace,
        cache,
    ))))
}

/// What a view saw before it read the metadata: the writer's mark and the oldest redo
/// segment.
struct ViewStart {
    writer: Option<[u8; 16]>,
    oldest: Option<String>,
}

/// How [`Db::open_read_only`] opens: its memory layer, the file system below it, and the
/// reader lease of a view (kept across attempts, moved into the instance when one succeeds).
struct ReadOnly<'a> {
    fs: &'a ReadOnlyFs,
    base: &'a Arc<dyn FileSystem>,
    lease: &'a mut Option<ReaderLease>,
}

/// Opens of a view tried before the error of the last one is returned.
const VIEW_OPEN_ATTEMPTS: u64 = 8;

/// Where a view's object-tier extent cache lives (in memory, never on disk).
const VIEW_EXTENT_CACHE_DIR: &str = "extent-cache-view";

/// A view's redo log, after its metadata was read: the redo directory is copied into the
/// memory layer whole and must still hold `oldest`, the oldest segment listed before the
/// metadata was read (with none listed then, numbering starts again at segment 1: the copy
/// must start there). The writer deletes a segment only after the metadata covers its
/// records, and oldest first, so the copy holds every record the metadata does not cover.
/// Then the catalog must still be the one read before the metadata: no table was created or
/// dropped before the copy ended, so every table the copied records name is in the view.
fn view_redo(ro: &ReadOnlyFs, base: &dyn FileSystem, path: &Path, catalog: &Catalog, start: &ViewStart) -> Result<()> {
    let dir = redo::redo_dir(path);
    ro.shadow_dir(&dir).map_err(|e| Error::io("copy", &dir, e))?;
    // The same writer throughout: another would have numbered its segments anew.
    if readers::writer_mark(base, path)? != start.writer {
        return Err(Error::corruption(
            path,
            0,
            "another writer opened the database while a view of it opened",
        ));
    }
    let copied = redo::segment_names(ro, &dir)?;
    let covered = match start.oldest.as_deref() {
        Some(o) => copied.iter().any(|c| c == o),
        None => copied.first().is_none_or(|c| redo::parse_segment_name(c) == Some(1)),
    };
    if !covered {
        return Err(Error::corruption(
            &dir,
            0,
            "redo segments were deleted while a view of the database opened",
        ));
    }
    if Catalog::load(ro, path)?.as_ref() != Some(catalog) {
        return Err(Error::corruption(
            catalog_path(path),
            0,
            "the catalog changed while a view of the database opened",
        ));
    }
    Ok(())
}

/// True for the errors a view's open can meet when the writer changes files as it reads
/// them; not for those that say the open cannot succeed.
fn raced_with_a_writer(e: &Error) -> bool {
    !matches!(
        e,
        Error::NotFound(_) | Error::NotADatabase(_) | Error::InvalidOption { .. } | Error::Closed
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;

    /// A view's last check refuses a writer mark that changed, an oldest segment that is gone,
    /// and a catalog that changed; it accepts what it saw at its start.
    #[test]
    fn a_view_refuses_another_writer_a_gap_in_the_redo_log_and_a_new_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let db = Db::open(path, Options::default()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        let base: Arc<dyn FileSystem> = Arc::new(PosixFs);
        let catalog = Catalog::load(base.as_ref(), path).unwrap().unwrap();
        let start = || ViewStart {
            writer: readers::writer_mark(base.as_ref(), path).unwrap(),
            oldest: redo::segment_names(base.as_ref(), &redo::redo_dir(path))
                .unwrap()
                .into_iter()
                .next(),
        };
        let check = |start: &ViewStart| view_redo(&ReadOnlyFs::new(base.clone()), base.as_ref(), path, &catalog, start);
        assert!(start().writer.is_some() && start().oldest.is_some());
        check(&start()).unwrap();
        let other_writer = ViewStart {
            writer: Some([7; 16]),
            ..start()
        };
        assert!(matches!(check(&other_writer), Err(Error::Corruption { .. })));
        let deleted_oldest = ViewStart {
            oldest: Some("000000.log".into()),
            ..start()
        };
        assert!(matches!(check(&deleted_oldest), Err(Error::Corruption { .. })));
        db.create_table("new").unwrap();
        assert!(matches!(check(&start()), Err(Error::Corruption { .. })));
        db.close().unwrap();
    }
}
