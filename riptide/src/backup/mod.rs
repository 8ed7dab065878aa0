//! Backups to an object store or a directory ([`BackupEngine`]), as RocksDB's `BackupEngine`
//! makes them: incremental, verifiable, restorable into a new database directory.
//!
//! A backup is made by [`crate::Db::backup`] from the same consistent cut as a checkpoint
//! (`db/checkpoint.rs`). Layout in the backup store (any [`ObjectStore`]; a directory is a
//! [`crate::tier::DirObjectStore`]):
//!
//! ```text
//! extents/<key>                 an extent's valid bytes ‖ footer; key = XXH3-128 of them
//! backups/000003/files/<path>   the small files: CATALOG, meta/*, redo/*, data file headers
//! backups/000003/MANIFEST       what backup 3 holds (manifest.rs); written last
//! ```
//!
//! Invariants:
//! - A backup exists once its `MANIFEST` does: it is written last, create-only, after every
//!   object it names. A backup cut short leaves objects no manifest names (its files, and
//!   extents later backups may reuse); nothing reads them.
//! - An extent whose key is already in the store is not uploaded again (incremental); the key
//!   is a hash of the extent's bytes, so equal keys mean equal bytes.
//! - [`BackupEngine::verify`] and [`BackupEngine::restore`] check every byte: file CRCs,
//!   extent keys (hashes) and lengths, and (verify) each extent's own checksums against its
//!   metadata. A mismatch is [`Error::Corruption`] naming the object.
//! - A restore writes the `CATALOG` last, so a restore cut short is not a database.

pub(crate) mod manifest;
mod parallel;
mod restore;

use crate::error::{Error, Result};
use crate::tier::{ObjectError, ObjectStore, RetryPolicy};
use manifest::Manifest;
pub use restore::RestoreOptions;
use std::sync::Arc;

/// What one backup holds (from its manifest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupInfo {
    /// The backup's number (1, 2, ...).
    pub id: u64,
    /// Extents in the backup.
    pub extents: u64,
    /// Bytes of those extents.
    pub extent_bytes: u64,
    /// Extents this backup uploaded (the rest were in the store already).
    pub extents_uploaded: u64,
    /// Bytes uploaded (extents and files).
    pub bytes_uploaded: u64,
    /// Small files (catalog, metadata, redo log, data file headers).
    pub files: u64,
}

/// What [`BackupEngine::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Files checked (each against its CRC).
    pub files: u64,
    /// Extents checked (key, length, their own checksums, their metadata).
    pub extents: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// Backups in one object store (see the module docs).
#[derive(Debug, Clone)]
pub struct BackupEngine {
    store: Arc<dyn ObjectStore>,
    retry: RetryPolicy,
    parallel_requests: usize,
}

/// Extent requests a [`BackupEngine`] keeps in flight by default.
pub const DEFAULT_PARALLEL_REQUESTS: usize = 8;

impl BackupEngine {
    /// An engine keeping its backups in `store` (a bucket and prefix, or a directory).
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        BackupEngine {
            store,
            retry: RetryPolicy::default(),
            parallel_requests: DEFAULT_PARALLEL_REQUESTS,
        }
    }

    /// How many extent uploads (backup) or downloads (verify, restore) run at once: 1 runs
    /// them one after another on the calling thread (0 counts as 1). Default
    /// [`DEFAULT_PARALLEL_REQUESTS`]; each holds one extent (up to 2 MiB) in memory. An object
    /// store far away serves many requests at once much faster than one after another.
    pub fn with_parallel_requests(mut self, n: usize) -> Self {
        self.parallel_requests = n.max(1);
        self
    }

    /// Where the backups are, for messages.
    pub fn location(&self) -> String {
        self.store.location()
    }

    /// Runs `work` on each of `jobs` with this engine's parallel requests (`parallel.rs`).
    pub(crate) fn for_each_job<T: Send>(
        &self,
        jobs: impl Iterator<Item = Result<T>>,
        work: impl Fn(T) -> Result<()> + Sync,
    ) -> Result<()> {
        parallel::for_each_job(self.parallel_requests, jobs, work)
    }

    /// Runs one request on object `name` with retries; a final failure names the object.
    pub(crate) fn request<T>(
        &self,
        op: &'static str,
        name: &str,
        f: impl FnMut() -> std::result::Result<T, ObjectError>,
    ) -> Result<T> {
        self.retry.run(f).0.map_err(|e| Error::ObjectStore {
            op,
            object: format!("{}/{name}", self.store.location().trim_end_matches('/')),
            kind: e.kind,
            message: e.message,
        })
    }

    pub(crate) fn store(&self) -> &dyn ObjectStore {
        self.store.as_ref()
    }

    /// The keys of every extent in the store.
    pub(crate) fn extent_keys(&self) -> Result<std::collections::HashSet<String>> {
        let listed = self.request("list", "extents/", || self.store.list("extents/"))?;
        Ok(listed
            .into_iter()
            .filter_map(|o| o.name.strip_prefix("extents/").map(str::to_string))
            .collect())
    }

    /// The numbers of the backups with a manifest, ascending.
    fn ids(&self) -> Result<Vec<u64>> {
        let listed = self.request("list", "backups/", || self.store.list("backups/"))?;
        let mut ids: Vec<u64> = listed
            .iter()
            .filter_map(|o| o.name.strip_prefix("backups/")?.strip_suffix("/MANIFEST")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Takes a number for a new backup: one past every number in use (by a backup or by an
    /// attempt cut short), claimed create-only (`backups/<id>/CLAIM`), so two backups running
    /// at once never write under the same number.
    pub(crate) fn claim_id(&self) -> Result<u64> {
        let listed = self.request("list", "backups/", || self.store.list("backups/"))?;
        let mut id = listed
            .iter()
            .filter_map(|o| o.name.strip_prefix("backups/")?.split('/').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        for _ in 0..1000 {
            id = id
                .checked_add(1)
                .ok_or_else(|| Error::corruption("backups/", 0, "backup numbers exhausted"))?;
            let name = claim_name(id);
            if self.request("put", &name, || self.store.put_if_absent(&name, b""))? {
                return Ok(id);
            }
        }
        Err(Error::AlreadyExists(format!("{}/backups", self.location()).into()))
    }

    pub(crate) fn manifest(&self, id: u64) -> Result<Manifest> {
        let name = manifest_name(id);
        let bytes = self.request("get", &name, || self.store.get(&name))?;
        let m = Manifest::decode(&name, &bytes)?;
        m.check(&name, id)?;
        Ok(m)
    }

    /// Every backup, oldest first.
    pub fn list(&self) -> Result<Vec<BackupInfo>> {
        self.ids()?
            .into_iter()
            .map(|id| {
                let m = self.manifest(id)?;
                Ok(BackupInfo {
                    id,
                    extents: m.extents.len() as u64,
                    extent_bytes: m
                        .extents
                        .iter()
                        .map(|e| e.data_size.saturating_add(FOOTER))
                        .fold(0, u64::saturating_add),
                    files: m.files.len() as u64,
                    ..Default::default()
                })
            })
            .collect()
    }

    /// Reads every object backup `id` names and checks it: each file against its CRC, each
    /// extent against its key and length and against its own checksums and its metadata (as
    /// `riptide inspect verify` checks a database's extents).
    pub fn verify(&self, id: u64) -> Result<VerifyReport> {
        restore::verify(self, id)
    }

    /// Restores backup `id` into directory `dir`, which must hold no database: the files,
    /// then each extent in its data file and slot (object-tier extents into
    /// `opts.object_store`), each checked as it is read, then the `CATALOG`. Open the result
    /// with [`crate::Db::open`].
    pub fn restore(&self, id: u64, dir: &std::path::Path, opts: &RestoreOptions) -> Result<()> {
        restore::restore(self, id, dir, opts)
    }
}

/// An extent's footer length.
const FOOTER: u64 = crate::extent::FOOTER_SIZE as u64;

pub(crate) fn manifest_name(id: u64) -> String {
    format!("backups/{id:06}/MANIFEST")
}

fn claim_name(id: u64) -> String {
    format!("backups/{id:06}/CLAIM")
}

pub(crate) fn file_object(id: u64, path: &str) -> String {
    format!("backups/{id:06}/files/{path}")
}

pub(crate) fn extent_object(key: &str) -> String {
    format!("extents/{key}")
}

/// The content key of an extent's `valid ‖ footer` bytes.
pub(crate) fn content_key(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}
