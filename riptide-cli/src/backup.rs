//! `riptide checkpoint` and `riptide backup create|list|verify|restore`: the engine's
//! [`riptide::Db::checkpoint`] and [`riptide::backup::BackupEngine`] from the command line.
//!
//! Invariants: a backup store is named like an object store (`s3://BUCKET[/PREFIX]` with
//! credentials from the environment, or `dir:PATH`); a database is opened with the object-tier
//! flags it needs and closed before the command exits; every failure is a message and exit
//! status 1, a bad flag exit status 2.

use crate::objects::{open_store, ObjectArgs, StoreFlags};
use clap::{Args, Subcommand};
use riptide::backup::{BackupEngine, RestoreOptions};
use riptide::{Db, Options};
use std::path::PathBuf;

/// Flags of `riptide checkpoint`.
#[derive(Args, Debug)]
#[command(rename_all = "snake_case")]
pub struct CheckpointArgs {
    /// The database to copy (opened for the copy; no other instance may have it open)
    #[arg(long)]
    pub db: PathBuf,
    /// Directory of the checkpoint (must not hold a database)
    #[arg(long)]
    pub to: PathBuf,
    /// Instead of making a checkpoint, release the pin an earlier checkpoint into --to made
    /// on the database's object-tier extents (they are deleted once nothing else names them)
    #[arg(long)]
    pub release: bool,
    #[command(flatten)]
    pub objects: ObjectArgs,
}

/// `riptide backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    #[command(subcommand)]
    pub command: BackupCommand,
}

/// Where the backups are.
#[derive(Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct BackupStoreArgs {
    /// The backup store: s3://BUCKET[/PREFIX] (credentials from the environment) or dir:PATH
    #[arg(long, value_name = "URL")]
    pub backups: String,
    /// Endpoint of an S3-compatible service holding the backups
    #[arg(long, value_name = "URL")]
    pub backup_endpoint: Option<String>,
    /// Extent uploads (create) or downloads (verify, restore) run at once
    #[arg(long, value_name = "N", default_value_t = riptide::backup::DEFAULT_PARALLEL_REQUESTS as u16,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel_requests: u16,
    /// Milliseconds added to every backup-store request through a loopback proxy (benchmarks
    /// of a remote store against a local S3 server; needs --backup_endpoint=http://...)
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub backup_latency_ms: u64,
}

/// `riptide backup` subcommands.
#[derive(Subcommand, Debug)]
#[command(rename_all = "snake_case")]
pub enum BackupCommand {
    /// Makes a new backup of a database (incremental: only extents not yet in the store)
    Create {
        /// The database (opened for the backup)
        #[arg(long)]
        db: PathBuf,
        #[command(flatten)]
        store: BackupStoreArgs,
        #[command(flatten)]
        objects: ObjectArgs,
    },
    /// Lists the backups in a store
    List {
        #[command(flatten)]
        store: BackupStoreArgs,
    },
    /// Reads and checks every byte of a backup
    Verify {
        #[command(flatten)]
        store: BackupStoreArgs,
        /// The backup's number
        #[arg(long)]
        id: u64,
    },
    /// Restores a backup into a new database directory
    Restore {
        #[command(flatten)]
        store: BackupStoreArgs,
        /// The backup's number
        #[arg(long)]
        id: u64,
        /// The new database's directory (must not hold a database)
        #[arg(long)]
        db: PathBuf,
        /// Where the restored database's object-tier extents go (s3://... or dir:...), if the
        /// backup has any
        #[arg(long, value_name = "URL")]
        restore_object_store: Option<String>,
    },
}

/// The backup store's flags.
const BACKUP_FLAGS: StoreFlags = StoreFlags {
    store: "--backups",
    endpoint: "--backup_endpoint",
    latency: "--backup_latency_ms",
};

/// The store a restore puts object-tier extents into.
const RESTORE_FLAGS: StoreFlags = StoreFlags {
    store: "--restore_object_store",
    endpoint: "--restore_object_store",
    latency: "--restore_object_store",
};

fn engine(s: &BackupStoreArgs) -> Result<BackupEngine, String> {
    let store = open_store(
        &s.backups,
        s.backup_endpoint.as_deref(),
        s.backup_latency_ms,
        &BACKUP_FLAGS,
    )?;
    Ok(BackupEngine::new(store).with_parallel_requests(usize::from(s.parallel_requests)))
}

pub(crate) fn open(db: &PathBuf, objects: &ObjectArgs) -> Result<Db, String> {
    open_with(db, objects, Options::default())
}

/// [`open`] with `base` options (the object-store flags and `create_if_missing: false` are set
/// on top of them).
pub(crate) fn open_with(db: &PathBuf, objects: &ObjectArgs, base: Options) -> Result<Db, String> {
    let mut opts = Options {
        create_if_missing: false,
        ..base
    };
    objects.apply(&mut opts)?;
    Db::open(db, opts).map_err(|e| format!("opening {}: {e}", db.display()))
}

/// Runs `riptide checkpoint`.
pub fn checkpoint(args: &CheckpointArgs) -> Result<(), String> {
    let db = open(&args.db, &args.objects)?;
    if args.release {
        let released = db.release_checkpoint(&args.to);
        let closed = db.close();
        let released = released.map_err(|e| format!("releasing {}: {e}", args.to.display()))?;
        closed.map_err(|e| format!("closing: {e}"))?;
        println!(
            "checkpoint {}: {}",
            args.to.display(),
            if released { "released" } else { "had no pin" }
        );
        return Ok(());
    }
    let made = db.checkpoint(&args.to);
    let closed = db.close();
    let info = made.map_err(|e| format!("checkpoint into {}: {e}", args.to.display()))?;
    closed.map_err(|e| format!("closing: {e}"))?;
    println!(
        "checkpoint {}: {} tables, {} extents copied, {} object-tier extents pinned, {} redo segments, {} bytes in {:.3} s",
        args.to.display(),
        info.tables,
        info.extents,
        info.object_extents,
        info.redo_segments,
        info.bytes_copied,
        info.micros as f64 / 1e6
    );
    Ok(())
}

/// Runs `riptide backup ...`.
pub fn backup(args: &BackupArgs) -> Result<(), String> {
    match &args.command {
        BackupCommand::Create { db, store, objects } => {
            let engine = engine(store)?;
            let db = open(db, objects)?;
            let started = std::time::Instant::now();
            let made = db.backup(&engine);
            let closed = db.close();
            let info = made.map_err(|e| format!("backup into {}: {e}", engine.location()))?;
            closed.map_err(|e| format!("closing: {e}"))?;
            println!(
                "backup {} in {}: {} extents ({} bytes), {} uploaded, {} files, {} bytes uploaded in {:.3} s",
                info.id,
                engine.location(),
                info.extents,
                info.extent_bytes,
                info.extents_uploaded,
                info.files,
                info.bytes_uploaded,
                started.elapsed().as_secs_f64()
            );
        }
        BackupCommand::List { store } => {
            let engine = engine(store)?;
            let list = engine.list().map_err(|e| e.to_string())?;
            println!("{:>6} {:>8} {:>14} {:>6}", "id", "extents", "extent_bytes", "files");
            for b in list {
                println!("{:>6} {:>8} {:>14} {:>6}", b.id, b.extents, b.extent_bytes, b.files);
            }
        }
        BackupCommand::Verify { store, id } => {
            let engine = engine(store)?;
            let r = engine.verify(*id).map_err(|e| format!("backup {id}: {e}"))?;
            println!(
                "backup {id}: OK ({} files, {} extents, {} bytes checked)",
                r.files, r.extents, r.bytes
            );
        }
        BackupCommand::Restore {
            store,
            id,
            db,
            restore_object_store,
        } => {
            let engine = engine(store)?;
            let opts = RestoreOptions {
                object_store: match restore_object_store {
                    Some(url) => Some(open_store(url, None, 0, &RESTORE_FLAGS)?),
                    None => None,
                },
                ..Default::default()
            };
            engine
                .restore(*id, db, &opts)
                .map_err(|e| format!("restoring backup {id} into {}: {e}", db.display()))?;
            println!("backup {id} restored into {}", db.display());
        }
    }
    Ok(())
}
