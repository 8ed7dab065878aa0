//! `riptide inspect`: look inside a database directory without opening it (like RocksDB's
//! `ldb` and `sst_dump`). Nothing here writes; run it on a closed database or a copy.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Inspect a database directory: levels, extents, slog, redo log; verify every checksum.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The database directory.
    #[arg(long, default_value = "./riptide-data")]
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
    /// Exits with status 1 if anything is damaged.
    Verify,
}

/// Runs the inspection; `Ok(false)` when `verify` found damage.
pub fn run(args: &InspectArgs) -> Result<bool, riptide::Error> {
    let fs = riptide::inspect::posix();
    let db = &args.db;
    match &args.what {
        What::Levels { table } => print!("{}", riptide::inspect::levels(fs.as_ref(), db, table.as_deref())?),
        What::Extent { id, rows } => print!("{}", riptide::inspect::extent(fs.as_ref(), db, id, *rows)?),
        What::Slog => print!("{}", riptide::inspect::slog(fs.as_ref(), db)?),
        What::Redo => print!("{}", riptide::inspect::redo(fs.as_ref(), db)?),
        What::Verify => {
            let r = riptide::inspect::verify(fs.as_ref(), db)?;
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
