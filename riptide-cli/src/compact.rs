//! `riptide compact`: a full manual compaction of a closed database (RocksDB's `ldb compact`):
//! every table (or the ones named) is compacted into its bottom level, so the data takes the
//! bottom level's codec and the database its size at rest; prints the size before and after.

use crate::backup::open;
use crate::objects::ObjectArgs;
use clap::Args;
use riptide::Db;
use std::path::PathBuf;
use std::time::Instant;

/// `riptide compact`.
#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The database (opened for the compaction; no other instance may have it open)
    #[arg(long)]
    pub db: PathBuf,
    /// Compact only this table (repeatable); default: every table
    #[arg(long = "table")]
    pub tables: Vec<String>,
    #[command(flatten)]
    pub objects: ObjectArgs,
}

/// One line of sizes: live extents and bytes allocated on disk.
fn sizes(db: &Db) -> String {
    let s = db.stats();
    format!(
        "live extents {} bytes, on disk {}",
        s.live_extent_bytes,
        s.space_allocated_bytes
            .map_or_else(|| "unknown".to_string(), |b| format!("{b} bytes"))
    )
}

/// Runs `riptide compact`.
pub fn run(args: &CompactArgs) -> Result<(), String> {
    let db = open(&args.db, &args.objects)?;
    let names = if args.tables.is_empty() {
        db.tables()
    } else {
        args.tables.clone()
    };
    println!("before: {}", sizes(&db));
    let started = Instant::now();
    let compacted = names.iter().try_for_each(|name| {
        let table = db.table(name).map_err(|e| format!("table {name}: {e}"))?;
        table.compact().map_err(|e| format!("compacting table {name}: {e}"))
    });
    if compacted.is_ok() {
        println!(
            "after:  {} ({} tables compacted in {:.3} s)",
            sizes(&db),
            names.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let closed = db.close();
    compacted?;
    closed.map_err(|e| format!("closing: {e}"))
}
