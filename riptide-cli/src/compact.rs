//! `riptide compact`: a full manual compaction of a closed database (RocksDB's `ldb compact`):
//! every table (or the ones named) is compacted into its bottom level, so the data takes the
//! bottom level's codec and the database its size at rest; prints the size before and after.
//! `--compression-per-level` and `--zstd-dictionary-bytes` set what the compaction writes (for
//! tables without their own options), e.g. to compare codecs on the same data.

use crate::backup::open_with;
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
    pub codecs: CodecArgs,
    #[command(flatten)]
    pub objects: ObjectArgs,
}

/// The codec flags of the commands that write extents (`compact`, `serve`), for tables
/// without their own options.
#[derive(Args, Debug)]
pub struct CodecArgs {
    /// Codecs per level: `L0,L1,L2`, each none, lz4, zstd or zstd:LEVEL (default: the
    /// database defaults, lz4,lz4,zstd:3)
    #[arg(long, value_name = "L0,L1,L2")]
    pub compression_per_level: Option<String>,
    /// Largest zstd dictionary trained per table for its zstd levels (0 = none; 256..=65536)
    #[arg(long, default_value_t = 0)]
    pub zstd_dictionary_bytes: usize,
}

impl CodecArgs {
    /// Sets the codec fields of `opts` from the flags.
    pub fn apply(&self, opts: &mut riptide::Options) -> Result<(), String> {
        opts.zstd_dictionary_bytes = self.zstd_dictionary_bytes;
        if let Some(list) = &self.compression_per_level {
            opts.compression_per_level = parse_codecs(list)?;
        }
        Ok(())
    }
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

/// Parses `L0,L1,L2` codecs (`--compression-per-level`).
fn parse_codecs(list: &str) -> Result<[riptide::Compression; 3], String> {
    let codecs = list
        .split(',')
        .map(|c| riptide::Compression::parse(c).map_err(|e| format!("--compression-per-level: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    codecs
        .try_into()
        .map_err(|v: Vec<_>| format!("--compression-per-level needs 3 codecs (L0,L1,L2), got {}", v.len()))
}

/// Runs `riptide compact`.
pub fn run(args: &CompactArgs) -> Result<(), String> {
    let mut base = riptide::Options::default();
    args.codecs.apply(&mut base)?;
    let db = open_with(&args.db, &args.objects, base)?;
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
