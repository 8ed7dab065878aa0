//! The live metadata log (slog): commits mini-transactions of [`SlogEntry`]s, opens (recovering
//! through [`super::replay`]) and checkpoints (see `docs/format.md`). The files it writes are
//! described in [`super::current`] (CURRENT) and [`super::framing`] (records).
//!
//! Invariants:
//! - A slog file is never modified in place: it is only appended to. Open does not append to the
//!   recovered slog; it copies the committed prefix into a fresh `SLOG-(s+1)` and switches
//!   CURRENT to it. So only the newest transaction of the live slog can be incomplete, and a
//!   torn or uncommitted tail is never followed by newer records.
//! - [`Slog::commit`] returns only once the transaction is fdatasynced. After any I/O error
//!   the [`Slog`] is poisoned: every later call returns that error; reopening recovers.
//! - A checkpoint switches CURRENT only once the new checkpoint and the new empty slog are
//!   durable; the old pair is deleted only after.

use super::checkpoint::write_checkpoint;
use super::current::{checkpoint_path, meta_dir, parse_number, read_file, slog_path, Current};
use super::edit::{corrupt, MetaState, SlogEntry};
use super::framing::{
    encode_record, encode_slog_header, pack_entries, REC_BEGIN, REC_COMMIT, REC_ENTRIES, SLOG_HEADER_SIZE,
};
use super::replay::{recover_state, RecoveredState};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Encodes one whole mini-transaction.
fn encode_txn(path: &Path, txn: u64, entries: &[SlogEntry]) -> Result<Vec<u8>> {
    let enc = |e| Error::io("encode", path, e);
    let mut out = Vec::new();
    encode_record(&mut out, REC_BEGIN, txn, &[]).map_err(enc)?;
    pack_entries(entries, &mut |payload| {
        encode_record(&mut out, REC_ENTRIES, txn, payload).map_err(enc)
    })?;
    encode_record(&mut out, REC_COMMIT, txn, &(entries.len() as u64).to_le_bytes()).map_err(enc)?;
    Ok(out)
}

/// The open metadata log.
pub(crate) struct Slog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    current: Current,
    /// Path of the live slog file.
    path: PathBuf,
    file: Box<dyn WritableFile>,
    next_txn: u64,
    bytes_since_checkpoint: u64,
    /// The first I/O error; every later commit/checkpoint returns it.
    poisoned: Option<Error>,
}

/// What [`Slog::open`] recovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlogRecovery {
    /// The metadata: the checkpoint plus every committed transaction.
    pub state: MetaState,
    /// The checkpoint number loaded (0 = none).
    pub checkpoint: u64,
    /// The slog number replayed (the live slog after open is a new one; see
    /// `Slog::slog_number`).
    pub slog: u64,
    /// Committed transactions replayed from the slog.
    pub replayed_txns: u64,
    /// Bytes at the end of the replayed slog not carried over: a torn tail and/or records of a
    /// transaction without COMMIT.
    pub truncated_tail_bytes: u64,
}

impl std::fmt::Debug for Slog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slog")
            .field("dir", &self.dir)
            .field("current", &self.current)
            .field("next_txn", &self.next_txn)
            .field("bytes_since_checkpoint", &self.bytes_since_checkpoint)
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

/// Creates a slog file holding its header and then `records` (already framed), fdatasynced.
/// The caller fsyncs the directory.
fn create_slog(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    records: &[u8],
) -> Result<(PathBuf, Box<dyn WritableFile>)> {
    let path = slog_path(dir, number);
    let mut f = fs.create(&path).map_err(|e| Error::io("create", &path, e))?;
    let mut buf = Vec::with_capacity(SLOG_HEADER_SIZE + records.len());
    buf.extend_from_slice(&encode_slog_header(number));
    buf.extend_from_slice(records);
    f.append(&buf).map_err(|e| Error::io("write", &path, e))?;
    f.sync_data().map_err(|e| Error::io("fsync", &path, e))?;
    Ok((path, f))
}

/// Removes every metadata file of `dir` that `cur` does not name (older or abandoned
/// checkpoints and slogs, `CURRENT.tmp`). Files with other names are left alone.
fn remove_leftovers(fs: &dyn FileSystem, dir: &Path, cur: Current) -> Result<()> {
    let mut removed = false;
    for name in fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        let stale = name == "CURRENT.tmp"
            || parse_number(&name, "SLOG-").is_some_and(|n| n != cur.slog)
            || parse_number(&name, "CHECKPOINT-").is_some_and(|n| n != cur.checkpoint);
        if stale {
            let p = dir.join(&name);
            fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            removed = true;
        }
    }
    if removed {
        fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
    }
    Ok(())
}

impl Slog {
    /// Opens (creating if missing: a CURRENT pointing at checkpoint 0 and an empty
    /// SLOG-000001) and recovers: the checkpoint, then the committed transactions of the slog.
    ///
    /// The committed prefix of the slog is then copied into a new slog `SLOG-(s+1)` (the file
    /// system offers no append to an existing file, and this drops any torn or uncommitted tail
    /// for good), CURRENT is switched to it, and every metadata file CURRENT does not name
    /// (older checkpoints and slogs, temp files) is deleted.
    pub fn open(fs: Arc<dyn FileSystem>, db: &Path) -> Result<(Slog, SlogRecovery)> {
        let dir = meta_dir(db);
        fs.create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        let cur_path = dir.join("CURRENT");
        let cur = if fs.exists(&cur_path) {
            Current::decode(&cur_path, &read_file(fs.as_ref(), &cur_path)?)?
        } else {
            Self::initialize(fs.as_ref(), &dir)?
        };

        let RecoveredState {
            state, data, replay, ..
        } = recover_state(fs.as_ref(), &dir, cur)?;

        // Carry the committed prefix over into a fresh slog and switch CURRENT to it.
        let next = Current {
            checkpoint: cur.checkpoint,
            slog: cur.slog + 1,
        };
        let committed = &data[SLOG_HEADER_SIZE..replay.committed_end];
        let (path, file) = create_slog(fs.as_ref(), &dir, next.slog, committed)?;
        fs.sync_dir(&dir).map_err(|e| Error::io("fsync dir", &dir, e))?;
        next.store(fs.as_ref(), &dir)?;
        remove_leftovers(fs.as_ref(), &dir, next)?;

        let recovery = SlogRecovery {
            state,
            checkpoint: cur.checkpoint,
            slog: cur.slog,
            replayed_txns: replay.txns,
            truncated_tail_bytes: (data.len() - replay.committed_end) as u64,
        };
        let slog = Slog {
            fs,
            dir,
            current: next,
            path,
            file,
            next_txn: replay.last_txn + 1,
            bytes_since_checkpoint: committed.len() as u64,
            poisoned: None,
        };
        Ok((slog, recovery))
    }

    /// Creates the metadata of a new database: an empty SLOG-000001 and CURRENT `(0, 1)`.
    /// Refuses if metadata files exist without CURRENT (CURRENT is never removed once written,
    /// so that is damage, not a new database) — except what an interrupted initialization
    /// leaves: `CURRENT.tmp` and a SLOG-000001 holding no record.
    fn initialize(fs: &dyn FileSystem, dir: &Path) -> Result<Current> {
        for name in fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let p = dir.join(&name);
            let suspicious = if name == "SLOG-000001" {
                let len = fs
                    .open_read(&p)
                    .and_then(|f| f.len())
                    .map_err(|e| Error::io("stat", &p, e))?;
                len > SLOG_HEADER_SIZE as u64
            } else {
                parse_number(&name, "SLOG-").is_some() || parse_number(&name, "CHECKPOINT-").is_some()
            };
            if suspicious {
                return Err(corrupt(
                    &dir.join("CURRENT"),
                    0,
                    format!("CURRENT is missing but {name} exists"),
                ));
            }
        }
        let cur = Current { checkpoint: 0, slog: 1 };
        create_slog(fs, dir, cur.slog, &[])?;
        fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
        cur.store(fs, dir)?;
        Ok(cur)
    }

    fn check_poison(&self) -> Result<()> {
        match &self.poisoned {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.poisoned = Some(e.clone());
        }
        r
    }

    /// One mini-transaction: encode BEGIN, entries, COMMIT, append with one write, fdatasync.
    /// Returns only when durable. An empty `entries` writes nothing. After any I/O error the
    /// Slog is poisoned: every later commit/checkpoint returns the same error (the caller then
    /// stops changing metadata; reopening recovers). A failed commit may or may not be found
    /// by recovery, like any write whose fsync failed.
    pub fn commit(&mut self, entries: &[SlogEntry]) -> Result<()> {
        self.check_poison()?;
        if entries.is_empty() {
            return Ok(());
        }
        // An entry too large to encode is refused before anything is written (no poisoning).
        let buf = encode_txn(&self.path, self.next_txn, entries)?;
        let r = self
            .file
            .append(&buf)
            .map_err(|e| Error::io("write", &self.path, e))
            .and_then(|()| self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e)));
        self.poison(r)?;
        self.next_txn += 1;
        self.bytes_since_checkpoint += buf.len() as u64;
        Ok(())
    }

    /// Bytes of transactions in the live slog, i.e. appended since the last checkpoint (the
    /// engine checkpoints when this passes a threshold).
    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.bytes_since_checkpoint
    }

    /// The live pair: (checkpoint number, slog number).
    #[cfg(test)]
    pub(crate) fn numbers(&self) -> (u64, u64) {
        (self.current.checkpoint, self.current.slog)
    }

    /// Number of the live slog file.
    #[cfg(test)]
    pub(crate) fn slog_number(&self) -> u64 {
        self.current.slog
    }

    /// The metadata directory.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes CHECKPOINT-k (k = live slog number + 1) from `state` and fdatasyncs it, starts an
    /// empty SLOG-k (fdatasync), fsyncs the directory, switches CURRENT to `(k, k)` atomically,
    /// then deletes the old checkpoint and slog. `state` must equal the result of everything
    /// committed so far (the caller's job; its invariants are checked, and a state that breaks
    /// them is refused without writing or poisoning). A crash at any point leaves either the
    /// old pair or the new pair readable. Any I/O error poisons the Slog.
    pub fn checkpoint(&mut self, state: &MetaState) -> Result<()> {
        self.check_poison()?;
        state.validate()?;
        let r = self.checkpoint_inner(state);
        self.poison(r)
    }

    fn checkpoint_inner(&mut self, state: &MetaState) -> Result<()> {
        let fs = self.fs.clone();
        let dir = self.dir.clone();
        let k = self.current.slog + 1;
        write_checkpoint(fs.as_ref(), &checkpoint_path(&dir, k), k, state)?;
        let (path, file) = create_slog(fs.as_ref(), &dir, k, &[])?;
        fs.sync_dir(&dir).map_err(|e| Error::io("fsync dir", &dir, e))?;
        let next = Current { checkpoint: k, slog: k };
        crate::failpoint::hit("checkpoint", "", "before_current");
        next.store(fs.as_ref(), &dir)?;
        crate::failpoint::hit("checkpoint", "", "after_current");
        // The new pair is live from here on: switch to it before cleaning up.
        let old = std::mem::replace(&mut self.current, next);
        self.path = path;
        self.file = file;
        self.bytes_since_checkpoint = 0;
        if old.checkpoint > 0 {
            let p = checkpoint_path(&dir, old.checkpoint);
            fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
        }
        let p = slog_path(&dir, old.slog);
        fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
        fs.sync_dir(&dir).map_err(|e| Error::io("fsync dir", &dir, e))
    }
}
