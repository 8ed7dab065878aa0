//! `riptide inspect`: look inside a database directory without opening it (like RocksDB's
//! `ldb` and `sst_dump`). Nothing here writes; run it on a closed database or a copy.
//!
//! Invariants: a path that is not a directory holding a `CATALOG` (what `Db::open` looks for)
//! is refused up front with "not a Riptide database: PATH", whatever the subcommand; `--db`
//! may stand before or after the subcommand, and defaults to `riptide bench`'s directory.

use crate::bench::flags::DEFAULT_DB;
use clap::{Args, Subcommand};
use std::fmt;
use std::path::{Path, PathBuf};

/// Inspect a database directory: levels, extents, slog, redo log; verify every checksum.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The database directory, before or after the subcommand (the default is `riptide
    /// bench`'s)
    #[arg(long, global = true, value_name = "DIR", default_value = DEFAULT_DB)]
    pub db: PathBuf,
    #[command(subcommand)]
    pub what: What,
}

/// What to inspect.
#[derive(Subcommand, Debug)]
pub enum What {
    /// Each sub-table's levels, layers and extents from the current metadata.
    Levels {
        /// Only this table.
        #[arg(long)]
        table: Option<String>,
    },
    /// One extent: footer, properties, index entries and optionally rows.
    Extent {
        /// The extent id, FILE.SLOT (as `levels` prints it).
        id: String,
        /// Rows to print.
        #[arg(long, default_value_t = 0)]
        rows: usize,
    },
    /// The metadata log (slog) records and what CURRENT names.
    Slog,
    /// The redo-log segments: records, ops, LSN ranges, damage.
    Redo,
    /// Verify every checksum (catalog, metadata, data-file headers, extents, redo log).
    /// Exits with status 1 if anything is damaged. With --object_store, also every
    /// object-tier extent (read whole) and the extent objects no metadata names.
    Verify {
        /// The database's object store: s3://BUCKET[/PREFIX] or dir:PATH
        #[arg(long, value_name = "URL")]
        object_store: Option<String>,
        /// Endpoint of an S3-compatible service
        #[arg(long, value_name = "URL")]
        object_endpoint: Option<String>,
    },
}

/// Why an inspection could not run (`main` prints it and exits 1).
#[derive(Debug)]
pub enum InspectError {
    /// `--db` is not a directory holding a `CATALOG`.
    NotADatabase(PathBuf),
    /// The engine's inspection failed.
    Engine(riptide::Error),
    /// A bad flag (the object store).
    Usage(String),
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectError::NotADatabase(p) => write!(f, "not a Riptide database: {}", p.display()),
            InspectError::Engine(e) => write!(f, "{e}"),
            InspectError::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl From<riptide::Error> for InspectError {
    fn from(e: riptide::Error) -> Self {
        InspectError::Engine(e)
    }
}

/// True if `dir` is a Riptide database: a directory holding a `CATALOG` file.
pub fn is_database(dir: &Path) -> bool {
    dir.join("CATALOG").is_file()
}

/// Runs the inspection; `Ok(false)` when `verify` found damage.
pub fn run(args: &InspectArgs) -> Result<bool, InspectError> {
    let fs = riptide::inspect::posix();
    let db = &args.db;
    if !is_database(db) {
        return Err(InspectError::NotADatabase(db.clone()));
    }
    match &args.what {
        What::Levels { table } => print!("{}", riptide::inspect::levels(fs.as_ref(), db, table.as_deref())?),
        What::Extent { id, rows } => print!("{}", riptide::inspect::extent(fs.as_ref(), db, id, *rows)?),
        What::Slog => print!("{}", riptide::inspect::slog(fs.as_ref(), db)?),
        What::Redo => print!("{}", riptide::inspect::redo(fs.as_ref(), db)?),
        What::Verify {
            object_store,
            object_endpoint,
        } => {
            let objects = crate::objects::ObjectArgs {
                object_store: object_store.clone(),
                object_endpoint: object_endpoint.clone(),
                l2_tier: None,
                extent_cache_size: 0,
                object_delete_grace: 0,
                object_latency_ms: 0,
            };
            let store = objects.store().map_err(InspectError::Usage)?;
            let r = riptide::inspect::verify_with_objects(fs.as_ref(), db, store.as_deref())?;
            println!(
                "checked {} files, {} extents, {} redo records",
                r.files, r.extents, r.redo_records
            );
            for n in &r.notes {
                println!("note: {n}");
            }
            for p in &r.problems {
                println!("DAMAGED: {p}");
            }
            if r.ok() {
                println!("OK: no damage found");
            }
            return Ok(r.ok());
        }
    }
    Ok(true)
}
