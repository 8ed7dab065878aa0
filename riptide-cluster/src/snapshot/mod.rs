//! Snapshots by checkpoint: a partition's snapshot is an archive ([`archive`]) of an engine
//! checkpoint, kept as a file in the partition's `raft-snapshots/` directory
//! ([`SnapshotDir`]) and read or written by openraft through [`SnapshotFile`].
//!
//! The directory holds (`<seq>` is unique within the directory):
//! - `snap-<seq>.rsnap`: whole archives, written durably; the newest not ahead of the applied
//!   state is the current snapshot, the others are deleted when a newer one is kept;
//! - `incoming-<seq>.part`: an archive being received from the leader (synced before the log
//!   is purged on its behalf, see `LogStore::purge`);
//! - `build-<seq>/` and `install-<seq>/`: a checkpoint being packed, or an archive unpacked
//!   for an install, and `snap-<seq>.rsnap.tmp`, an archive being packed; scratch, deleted
//!   when done and at every open.
//!
//! Invariants:
//! - A name this module did not make is never deleted.
//! - Snapshots are caches of the partition's state, except one received archive between the
//!   purge of the log on its behalf and the end of its install: that one is synced and kept
//!   until the install is done.

pub mod archive;

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// What a partition's snapshots did since its node started (for `/metrics`).
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Snapshots built.
    pub built: AtomicU64,
    /// Snapshots installed (received, or resumed at open).
    pub installed: AtomicU64,
    /// Microseconds the last build took (checkpoint and archive).
    pub last_build_micros: AtomicU64,
    /// Microseconds the last install took (unpack and rows).
    pub last_install_micros: AtomicU64,
    /// Bytes of the last archive built or installed.
    pub last_archive_bytes: AtomicU64,
}

impl SnapshotStats {
    /// Counts a build (`installed` false) or an install of an archive of `bytes` that took
    /// `started.elapsed()`.
    pub fn record(&self, installed: bool, started: std::time::Instant, bytes: u64) {
        let micros = started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        let (count, time) = if installed {
            (&self.installed, &self.last_install_micros)
        } else {
            (&self.built, &self.last_build_micros)
        };
        count.fetch_add(1, Ordering::Relaxed);
        time.store(micros, Ordering::Relaxed);
        self.last_archive_bytes.store(bytes, Ordering::Relaxed);
    }
}

/// The directory, inside the partition's database directory, that holds its snapshots.
pub const SNAPSHOT_DIR: &str = "raft-snapshots";

/// A snapshot's bytes as openraft reads and writes them: an open archive file, with its path
/// (an install needs the file, not only its bytes). A reception cut short (openraft dropped
/// its stream for another) is deleted when dropped; one received whole (openraft shuts the
/// stream down when its last chunk is in) is kept from then on, for the install queued behind
/// it and the purge of the log that openraft runs without waiting for that install. The next
/// open deletes a reception nothing needs.
#[derive(Debug)]
pub struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
    remove_on_drop: bool,
}

impl Drop for SnapshotFile {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Best effort: a reception left behind is deleted at the next open.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl SnapshotFile {
    /// Opens the archive at `path` for reading.
    pub async fn open(path: PathBuf) -> io::Result<Self> {
        let file = tokio::fs::File::open(&path).await?;
        Ok(SnapshotFile {
            file,
            path,
            remove_on_drop: false,
        })
    }

    /// Creates `path` (which must not exist) for receiving an archive.
    pub async fn create(path: PathBuf) -> io::Result<Self> {
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await?;
        Ok(SnapshotFile {
            file,
            path,
            remove_on_drop: true,
        })
    }

    /// Where the archive is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the file and returns its path; a reception is then no longer deleted on drop
    /// (the caller owns the file).
    pub fn take_path(mut self) -> PathBuf {
        self.keep();
        std::mem::take(&mut self.path)
    }

    /// From now on the file is not deleted on drop (an install is taking it).
    pub fn keep(&mut self) {
        self.remove_on_drop = false;
    }

    /// Finishes pending writes and syncs the file.
    pub async fn sync(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.file.flush().await?;
        self.file.sync_all().await
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().file).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.file).poll_shutdown(cx);
        if let Poll::Ready(Ok(())) = done {
            this.keep(); // received whole
        }
        done
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.get_mut().file).start_seek(position)
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.get_mut().file).poll_complete(cx)
    }
}

/// Syncs every archive being received in snapshot directory `dir` (and the kept archives,
/// which a reception is renamed to), then `dir`: called before the log is purged past the
/// applied state, which openraft does for a received snapshot while the state machine installs
/// it, so that the archive survives any crash the purge survives and the next open installs
/// it. A missing directory has nothing to sync.
pub fn sync_received(dir: &Path) -> io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for (kind, _, path) in list(dir)? {
        if matches!(kind, Kind::Incoming | Kind::Archive) {
            // Renamed (synced before) or deleted since the listing: nothing to sync.
            match std::fs::File::open(path).and_then(|f| f.sync_all()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Every name of this module's in snapshot directory `dir` (none if it is missing): its kind,
/// sequence number and path, oldest first.
fn list(dir: &Path) -> io::Result<Vec<(Kind, u64, PathBuf)>> {
    let mut out = Vec::new();
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in listing {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        for kind in [
            Kind::Archive,
            Kind::ArchiveTmp,
            Kind::Incoming,
            Kind::Build,
            Kind::Install,
        ] {
            if let Some(seq) = kind.parse(&name) {
                out.push((kind, seq, entry.path()));
            }
        }
    }
    out.sort_by_key(|(_, seq, _)| *seq);
    Ok(out)
}

/// The kinds of names in a snapshot directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `snap-<seq>.rsnap`: a whole archive.
    Archive,
    /// `snap-<seq>.rsnap.tmp`: an archive being packed (renamed to its name when whole).
    ArchiveTmp,
    /// `incoming-<seq>.part`: an archive being received.
    Incoming,
    /// `build-<seq>`: a checkpoint being packed.
    Build,
    /// `install-<seq>`: an archive unpacked for an install.
    Install,
}

impl Kind {
    fn affixes(self) -> (&'static str, &'static str) {
        match self {
            Kind::Archive => ("snap-", ".rsnap"),
            Kind::ArchiveTmp => ("snap-", ".rsnap.tmp"),
            Kind::Incoming => ("incoming-", ".part"),
            Kind::Build => ("build-", ""),
            Kind::Install => ("install-", ""),
        }
    }

    /// The sequence number `name` carries as a name of this kind.
    pub(crate) fn parse(self, name: &str) -> Option<u64> {
        let (prefix, suffix) = self.affixes();
        name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
    }
}

/// One partition's snapshot directory.
#[derive(Debug)]
pub struct SnapshotDir {
    dir: PathBuf,
    next_seq: AtomicU64,
}

impl SnapshotDir {
    /// The snapshot directory of the database at `db_path`, with the scratch of an earlier
    /// run deleted. The directory is made by the first [`SnapshotDir::fresh`] (a partition
    /// that never snapshots has none).
    pub fn open(db_path: &Path) -> io::Result<Self> {
        let this = SnapshotDir {
            dir: db_path.join(SNAPSHOT_DIR),
            next_seq: AtomicU64::new(0),
        };
        let mut max = 0;
        for (kind, seq, path) in this.entries()? {
            max = max.max(seq);
            if matches!(kind, Kind::Build | Kind::Install | Kind::ArchiveTmp) {
                SnapshotDir::remove(&path)?;
            }
        }
        this.next_seq.store(max + 1, Ordering::Relaxed);
        Ok(this)
    }

    /// Where the snapshots are.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A new, unused path of `kind` (the directory is created if missing, durably).
    pub fn fresh(&self, kind: Kind) -> io::Result<PathBuf> {
        if !self.dir.is_dir() {
            std::fs::create_dir_all(&self.dir)?;
            archive::sync_parent(&self.dir)?;
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (prefix, suffix) = kind.affixes();
        Ok(self.dir.join(format!("{prefix}{seq}{suffix}")))
    }

    /// Every name of this module's in the directory: its kind, sequence number and path,
    /// oldest first.
    pub fn entries(&self) -> io::Result<Vec<(Kind, u64, PathBuf)>> {
        list(&self.dir)
    }

    /// The paths of `kind`, oldest first.
    pub fn paths(&self, kind: Kind) -> io::Result<Vec<PathBuf>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, _, p)| p)
            .collect())
    }

    /// Deletes `path`, a file or directory of this module's; a missing one is not an error.
    pub fn remove(path: &Path) -> io::Result<()> {
        let result = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        match result {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_fresh_and_scratch_is_cleared_on_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::open(tmp.path()).unwrap();
        assert!(!dir.path().exists(), "made only when first needed");
        assert!(dir.entries().unwrap().is_empty());
        let a = dir.fresh(Kind::Archive).unwrap();
        let b = dir.fresh(Kind::Build).unwrap();
        assert_ne!(a.file_name(), b.file_name());
        std::fs::write(&a, b"x").unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("f"), b"y").unwrap();
        let foreign = dir.path().join("notes.txt");
        std::fs::write(&foreign, b"mine").unwrap();
        let reopened = SnapshotDir::open(tmp.path()).unwrap();
        assert!(a.exists() && !b.exists() && foreign.exists());
        assert_eq!(reopened.paths(Kind::Archive).unwrap(), std::slice::from_ref(&a));
        let next = reopened.fresh(Kind::Incoming).unwrap();
        // Past every name seen at the open, the deleted scratch directory included.
        assert_eq!(
            Kind::Incoming.parse(next.file_name().unwrap().to_str().unwrap()),
            Some(3)
        );
        SnapshotDir::remove(&a).unwrap();
        SnapshotDir::remove(&a).unwrap();
        assert!(reopened.paths(Kind::Archive).unwrap().is_empty());
    }
}
