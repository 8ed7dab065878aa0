//! The file-system trait every byte of Riptide goes through.
//!
//! Invariants:
//! - The engine never touches `std::fs` directly; it holds an `Arc<dyn FileSystem>` from
//!   [`crate::Options::fs`]. (The one exception is [`crate::Db::destroy`], which deletes a
//!   closed database's POSIX directory.) This is what lets tests inject faults ([`FaultFs`]) and, later,
//!   put a level on object storage.
//! - Durability is explicit: data appended to a [`WritableFile`] is durable only after
//!   [`WritableFile::sync_data`]; bytes written and lengths set through a [`RandomRwFile`] are
//!   durable only after [`RandomRwFile::sync_data`]; a new, renamed or removed directory entry is
//!   durable only after
//!   [`FileSystem::sync_dir`] on its parent. [`FaultFs`] simulates exactly this contract on a crash.
//! - Methods return `std::io::Error`; the engine wraps them into [`crate::Error::Io`] with the
//!   operation and path.

mod fault;
mod posix;
mod read_only;

pub use fault::{CrashMode, FaultFs, FaultOp};
pub use posix::PosixFs;
pub use read_only::ReadOnlyFs;

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A file open for appending.
pub trait WritableFile: Send {
    /// Appends `data` at the end of the file (one `write` call where the OS allows).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Current length of the file in bytes, including unsynced appends.
    fn len(&self) -> u64;
    /// Starts writing `len` appended bytes at `offset` to the device without waiting for them
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux), so a later [`WritableFile::sync_data`]
    /// has little left to do. Only a hint: it makes nothing durable and never fails. Default:
    /// nothing.
    fn start_writeback(&mut self, _offset: u64, _len: u64) {}
    /// True when the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file open for positional reads.
#[allow(clippy::len_without_is_empty)]
pub trait ReadableFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Length of the file in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Hints that `len` bytes at `offset` will be read soon (read-ahead; `posix_fadvise
    /// WILLNEED` on POSIX). Never fails: it is only a hint. Default: nothing.
    fn prefetch(&self, _offset: u64, _len: u64) {}

    /// Appends exactly `len` bytes read at `offset` to `buf`. On an error (`UnexpectedEof` if the
    /// file ends first) `buf` holds the bytes read so far. The default zero-fills the new bytes
    /// and calls [`Self::read_at`]; a file system may read into uninitialized memory instead.
    fn read_exact_into(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<()> {
        let start = buf.len();
        buf.resize(start + len, 0);
        let mut done = 0;
        while done < len {
            match self.read_at(&mut buf[start + done..], offset + done as u64) {
                Ok(0) => {
                    buf.truncate(start + done);
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    buf.truncate(start + done);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Reads the whole file into memory.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = self.len()?;
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let n = self.read_at(&mut buf[done..], done as u64)?;
            if n == 0 {
                buf.truncate(done);
                break;
            }
            done += n;
        }
        Ok(buf)
    }
}

/// A file open for positional reads and writes (data files of 2 MiB extents).
///
/// Every method takes `&self`: one handle is shared by concurrent readers and writers, which
/// must write disjoint ranges. An `Arc<dyn RandomRwFile>` upcasts to `Arc<dyn ReadableFile>`.
pub trait RandomRwFile: ReadableFile {
    /// Writes all of `data` at `offset`, growing the file (zero-filled gap) if needed.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every write so far (data and length) durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Cuts or extends (zero-filled) the file to `len`; durable after the next
    /// [`RandomRwFile::sync_data`].
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Gives the disk blocks of `len` bytes at `offset` back to the file system, keeping the
    /// file's length (the range then reads as zeros). A hint: `Ok` even where unsupported.
    /// Default: nothing.
    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    /// Starts writing the dirty pages of `len` bytes at `offset` to the device without waiting
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux), as
    /// [`WritableFile::start_writeback`] does for appended files: disk writes then overlap the
    /// work that follows instead of piling up for the next [`RandomRwFile::sync_data`]. Only a
    /// hint: it makes nothing durable and never fails. Default: nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) {}
}

/// An exclusive lock on a file, released when dropped.
pub trait FileLock: Send + Sync + Debug {}

/// The operations Riptide needs from a file system.
pub trait FileSystem: Send + Sync + Debug {
    /// Creates a directory and its parents if missing.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (not full paths), in no particular order.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// True if a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Creates a new file, truncating any existing one, open for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Opens an existing file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn ReadableFile>>;
    /// Opens `path` for positional reads and writes, creating it (empty) if `create` and
    /// missing. Never truncates. A created file's directory entry is durable only after
    /// [`FileSystem::sync_dir`] on its parent, as with [`FileSystem::create`].
    fn open_rw(&self, path: &Path, create: bool) -> io::Result<Arc<dyn RandomRwFile>>;
    /// Atomically renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Cuts a file to `len` bytes and makes the new length durable.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (creating it), failing with
    /// `io::ErrorKind::WouldBlock` if another holder has it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// Bytes of disk the file at `path` occupies (its allocated blocks: less than its length
    /// where it has holes); `None` where the file system cannot tell. Default: `None`.
    fn allocated_bytes(&self, _path: &Path) -> io::Result<Option<u64>> {
        Ok(None)
    }
    /// Copies each `(offset, len)` range of the file at `src` to the same offset of the
    /// existing file at `dst` inside the file system (`copy_file_range(2)`: a reflink where
    /// the file system shares blocks, an in-kernel copy elsewhere). Returns `Ok(false)`, having
    /// copied nothing, where the file system cannot; the caller then copies by reads and
    /// writes. Not durable until `dst` is synced. Default: `Ok(false)`.
    fn copy_ranges(&self, _src: &Path, _dst: &Path, _ranges: &[(u64, u64)]) -> io::Result<bool> {
        Ok(false)
    }
}
