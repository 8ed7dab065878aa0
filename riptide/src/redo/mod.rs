//! The redo log: one per instance, segmented, CRC32C per record.
//!
//! Invariants:
//! - Segments are `redo/NNNNNN.log`, numbered upward; records in segment order are in LSN order.
//! - Only the newest segment can have an incomplete tail: before a new segment is created the
//!   old one is fsynced, and a new segment's header and directory entry are fsynced before any
//!   record goes in.
//! - A segment whose header has `FLAG_SUPERSEDES` (written at a clean close with the live data)
//!   makes every older segment obsolete; it appears under its final name only after it was
//!   written in full and fsynced (write `.tmp`, fsync, rename, fsync the directory).
//! - Recovery never replays a record whose CRCs fail; see
//!   [`RecoveryMode`](crate::options::RecoveryMode) for what it does then (`recovery.rs`).
//! - Once a durable commit was asked for in a segment, appends zero-fill the file ahead of
//!   themselves ([`PREALLOCATE_BYTES`] at a time), so the fdatasync of a commit writes data
//!   only: the file's length, and so its metadata, changes once per chunk instead of once per
//!   commit. In a segment with [`FLAG_PREALLOCATED`] (format v2) zeros from a record boundary
//!   to the end of the file are its clean end; a rolled or closed segment is cut to its records
//!   first, so only the newest segment can end in zeros. Each record the pipeline appends
//!   carries how far the synced end lay behind it ([`RedoLog::append_records`]), so recovery
//!   can tell damage in never-synced bytes (a torn tail, even with good records after it)
//!   from damage in synced ones.

pub(crate) mod record;
mod recovery;

#[cfg(test)]
use recovery::{all_zero, RecoveryReport};
pub(crate) use recovery::{dump, recover};

use crate::coding::{crc_tail_ok, seal_crc_tail};
#[cfg(test)]
use crate::coding::{RecordHeader, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, RandomRwFile};
use crate::key::Lsn;
#[cfg(test)]
use crate::options::RecoveryMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Current redo format version (2: [`FLAG_PREALLOCATED`] segments; version 1 segments still
/// replay).
pub(crate) const REDO_FORMAT_VERSION: u32 = 2;
const SEGMENT_MAGIC: &[u8; 8] = b"RPTREDO\0";
/// Size of a segment header.
pub(crate) const SEGMENT_HEADER_SIZE: usize = 32;
/// The segment replaces all older segments.
const FLAG_SUPERSEDES: u32 = 1;
/// The segment may end in zeros after its last record (space zero-filled ahead of appends):
/// from a record boundary, all-zero bytes to the end of the file are its clean end.
const FLAG_PREALLOCATED: u32 = 2;
/// How far ahead of its appends a segment with durable commits is zero-filled.
pub(crate) const PREALLOCATE_BYTES: u64 = 1 << 20;

/// Directory of the redo log inside the database directory.
pub(crate) fn redo_dir(db: &Path) -> PathBuf {
    db.join("redo")
}

pub(crate) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

/// True for the name of a redo segment (`NNNNNN.log`), for tools that delete a database.
pub(crate) fn is_segment_name(name: &str) -> bool {
    parse_segment_name(name).is_some()
}

/// The names of the redo segments in `dir`, oldest first (for copies of the log).
pub(crate) fn segment_names(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<(u64, String)> = fs
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, e))?
        .into_iter()
        .filter_map(|n| Some((parse_segment_name(&n)?, n)))
        .collect();
    names.sort();
    Ok(names.into_iter().map(|(_, n)| n).collect())
}

/// The number of a segment named `name`, if it names one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() < 6 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

fn encode_segment_header(number: u64, flags: u32) -> [u8; SEGMENT_HEADER_SIZE] {
    let mut h = [0u8; SEGMENT_HEADER_SIZE];
    h[0..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&REDO_FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&flags.to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    seal_crc_tail(&mut h[..28]);
    h
}

/// Parses a segment header: `(number, flags)`.
fn decode_segment_header(path: &Path, data: &[u8]) -> Result<(u64, u32)> {
    let bad = |reason: &str| Error::corruption(path, 0, format!("segment header: {reason}"));
    let h = data
        .get(..SEGMENT_HEADER_SIZE)
        .ok_or_else(|| bad("file shorter than the header"))?;
    if !crc_tail_ok(&h[..28]) {
        return Err(bad("checksum mismatch"));
    }
    if &h[0..8] != SEGMENT_MAGIC {
        return Err(bad("bad magic"));
    }
    let version = u32::from_le_bytes(h[8..12].try_into().map_err(|_| bad("short"))?);
    if version > REDO_FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: version,
            supported: REDO_FORMAT_VERSION,
        });
    }
    if h[28..32] != [0; 4] {
        return Err(bad("reserved bytes are not zero"));
    }
    let flags = u32::from_le_bytes(h[12..16].try_into().map_err(|_| bad("short"))?);
    let number = u64::from_le_bytes(h[16..24].try_into().map_err(|_| bad("short"))?);
    Ok((number, flags))
}

/// Header flags of a segment the log appends to: [`FLAG_PREALLOCATED`] when it may zero-fill.
fn segment_flags(preallocation: bool) -> u32 {
    if preallocation {
        FLAG_PREALLOCATED
    } else {
        0
    }
}

/// Creates a segment (header written and fsynced, directory entry fsynced).
fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    flags: u32,
    tmp: bool,
) -> Result<(PathBuf, Arc<dyn RandomRwFile>)> {
    let mut path = segment_path(dir, number);
    if tmp {
        path.set_extension("log.tmp");
    }
    let file = fs.open_rw(&path, true).map_err(|e| Error::io("create", &path, e))?;
    // A leftover file of this name (a creation cut short) starts over.
    file.set_len(0).map_err(|e| Error::io("set_len", &path, e))?;
    file.write_at(&encode_segment_header(number, flags), 0)
        .map_err(|e| Error::io("write", &path, e))?;
    file.sync_data().map_err(|e| Error::io("fsync", &path, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
    Ok((path, file))
}

/// Encodes a whole record (header and payload) into `out`.
#[cfg(test)]
pub(crate) fn encode_record(out: &mut Vec<u8>, record_type: u8, first_lsn: Lsn, payload: &[u8], payload_crc: u32) {
    let header = RecordHeader {
        payload_crc,
        payload_len: payload.len() as u32,
        record_type,
        first_lsn,
    };
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
}

/// Where a rewrite emits encoded records.
#[cfg(test)]
pub(crate) type RecordSink<'a> = dyn FnMut(&[u8]) -> Result<()> + 'a;

/// The closed segments of the log (all but the one being appended to), each with the highest
/// LSN it or an older segment holds. Shared between the writer (which adds a segment when it
/// rolls) and flush (which deletes segments no sub-table needs any more).
#[derive(Debug, Default)]
pub(crate) struct SegmentList {
    closed: parking_lot::Mutex<Vec<(u64, Lsn)>>,
    /// Live [`RetireHold`]s: while any is held, no segment is deleted.
    holds: std::sync::atomic::AtomicUsize,
}

/// Keeps every redo segment on disk while held (a checkpoint copies them).
pub(crate) struct RetireHold<'a>(&'a SegmentList);

impl Drop for RetireHold<'_> {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl SegmentList {
    /// Stops [`SegmentList::retire`] from deleting anything until the hold is dropped.
    pub(crate) fn hold(&self) -> RetireHold<'_> {
        // Under the list's lock, so a retire already deleting finishes before the hold counts.
        let _closed = self.closed.lock();
        self.holds.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        RetireHold(self)
    }

    /// Deletes every closed segment whose LSNs are all below `needed` (oldest first, so what
    /// remains is always a suffix of the log), then fsyncs the directory. Returns how many.
    /// Deletes nothing while a [`RetireHold`] is held (the next retire catches up).
    pub(crate) fn retire(&self, fs: &dyn FileSystem, dir: &Path, needed: Lsn) -> Result<usize> {
        let mut closed = self.closed.lock();
        if self.holds.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Ok(0);
        }
        let n = closed.iter().take_while(|(_, max)| *max < needed).count();
        for (number, _) in &closed[..n] {
            let p = segment_path(dir, *number);
            if fs.exists(&p) {
                fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            }
        }
        if n > 0 {
            closed.drain(..n);
            fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
        }
        Ok(n)
    }

    /// Number of closed segments still on disk.
    pub(crate) fn len(&self) -> usize {
        self.closed.lock().len()
    }
}

/// Without `sync`, appended log bytes are handed to the device in the background every this
/// many bytes (RocksDB's `wal_bytes_per_sync`), so the fsync that closes a full segment when the
/// log rolls, on the write path, has at most this much left to write instead of the whole
/// segment (a 64 MiB segment took tens to hundreds of milliseconds, stalling every writer).
pub(crate) const WRITEBACK_BYTES: u64 = 1 << 20;

/// Where the records of the log ended at a sync: a copy of the log (checkpoint, backup)
/// takes older segments whole, this segment up to `len`, and no newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncedEnd {
    pub(crate) segment: u64,
    pub(crate) len: u64,
}

impl SyncedEnd {
    /// How many bytes of the segment file `name` (of `file_len` bytes) a copy takes, `None`
    /// for a segment begun after the sync.
    pub(crate) fn copy_len(self, name: &str, file_len: u64) -> Option<u64> {
        match parse_segment_name(name)?.cmp(&self.segment) {
            std::cmp::Ordering::Less => Some(file_len),
            std::cmp::Ordering::Equal => Some(file_len.min(self.len)),
            std::cmp::Ordering::Greater => None,
        }
    }
}

/// The open redo log: the segment new records are appended to.
pub(crate) struct RedoLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    number: u64,
    path: PathBuf,
    file: Arc<dyn RandomRwFile>,
    /// End of the segment's header and records: where the next append goes.
    len: u64,
    /// The file's length: `len` plus the zeros written ahead of it (never less than `len`).
    file_len: u64,
    /// Zero-filling ahead is allowed (`Options::redo_preallocate`).
    preallocation: bool,
    /// A durable commit was asked for since this segment began: appends zero-fill ahead.
    preallocate: bool,
    /// End of the segment's bytes at its last fsync (what a crash cannot take); below `len`
    /// while appended bytes wait for one.
    synced_len: u64,
    /// Offset up to which writeback of the segment was started
    /// ([`RandomRwFile::start_writeback`], every [`WRITEBACK_BYTES`]).
    written_back: u64,
    /// Highest LSN appended so far (to this or an older segment).
    max_lsn: Lsn,
    segments: Arc<SegmentList>,
}

impl RedoLog {
    /// Starts a new segment numbered `number`, zero-filling ahead of durable commits; `older`
    /// lists the segments recovery found (number and highest LSN up to it), oldest first.
    #[cfg(test)]
    pub(crate) fn create(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        number: u64,
        segment_size: u64,
        older: Vec<(u64, Lsn)>,
    ) -> Result<Self> {
        Self::create_with(fs, dir, number, segment_size, older, true)
    }

    /// [`RedoLog::create`], with zero-filling ahead allowed or not (`Options::redo_preallocate`;
    /// without it segments carry no [`FLAG_PREALLOCATED`]).
    pub(crate) fn create_with(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        number: u64,
        segment_size: u64,
        older: Vec<(u64, Lsn)>,
        preallocation: bool,
    ) -> Result<Self> {
        let (path, file) = create_segment(fs.as_ref(), &dir, number, segment_flags(preallocation), false)?;
        let max_lsn = older.last().map_or(0, |s| s.1);
        Ok(RedoLog {
            fs,
            dir,
            segment_size,
            number,
            path,
            file,
            len: SEGMENT_HEADER_SIZE as u64,
            file_len: SEGMENT_HEADER_SIZE as u64,
            preallocation,
            preallocate: false,
            synced_len: SEGMENT_HEADER_SIZE as u64,
            written_back: 0,
            max_lsn,
            segments: Arc::new(SegmentList {
                closed: parking_lot::Mutex::new(older),
                holds: Default::default(),
            }),
        })
    }

    /// Where the open segment's records end (call after [`RedoLog::sync`]).
    pub(crate) fn synced_end(&self) -> SyncedEnd {
        SyncedEnd {
            segment: self.number,
            len: self.len,
        }
    }

    /// Bytes of header and records in the open segment.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The list of closed segments (for retiring them after flushes).
    pub(crate) fn segments(&self) -> Arc<SegmentList> {
        self.segments.clone()
    }

    /// Appends whole encoded records (the write pipeline's groups) with one write call, each
    /// stamped with how far the synced end lies behind it (see `record.rs`); `last_lsn` is
    /// the highest LSN in them.
    pub(crate) fn append_records(&mut self, records: &mut [u8], last_lsn: Lsn) -> Result<()> {
        record::stamp_unsynced_distance(records, self.len, self.synced_len);
        self.append(records, last_lsn)
    }

    /// Appends encoded bytes with one write call; `last_lsn` is the highest LSN in them. Writes
    /// no unsynced distance (records appended here claim the log synced up to them): the
    /// pipeline goes through [`RedoLog::append_records`]; tests write raw bytes here.
    fn append(&mut self, data: &[u8], last_lsn: Lsn) -> Result<()> {
        let end = self.len + data.len() as u64;
        if self.preallocate && self.file_len < end + PREALLOCATE_BYTES / 2 {
            self.zero_fill_ahead(end)?;
        }
        self.file
            .write_at(data, self.len)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.len = end;
        self.file_len = self.file_len.max(end);
        if end - self.written_back >= WRITEBACK_BYTES {
            self.file.start_writeback(self.written_back, end - self.written_back);
            self.written_back = end;
        }
        self.max_lsn = self.max_lsn.max(last_lsn);
        Ok(())
    }

    /// Writes zeros from the file's end (or `end`, where the next append stops) to a chunk
    /// boundary at least [`PREALLOCATE_BYTES`] past `end` (at most to the segment's size, where
    /// it rolls), and starts their writeback beyond the pages the next appends fill, so that
    /// the commit that syncs them has only the new length left to write.
    fn zero_fill_ahead(&mut self, end: u64) -> Result<()> {
        let from = self.file_len.max(end);
        let to =
            (end.next_multiple_of(PREALLOCATE_BYTES) + PREALLOCATE_BYTES).min(self.segment_size.next_multiple_of(4096));
        if to <= from {
            return Ok(());
        }
        let zeros = vec![0u8; (to - from) as usize];
        self.file
            .write_at(&zeros, from)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.file_len = to;
        let hint_from = (end + (64 << 10)).next_multiple_of(4096).max(from);
        if hint_from < to {
            self.file.start_writeback(hint_from, to - hint_from);
        }
        Ok(())
    }

    /// Makes every appended byte durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.synced_len < self.len {
            self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))?;
            self.synced_len = self.len;
            // Everything is on disk: the next writeback hint starts here, not over clean pages.
            self.written_back = self.len;
        }
        Ok(())
    }

    /// Makes every appended byte durable for a commit that waits for it, and from then on
    /// zero-fills the segment ahead of its appends (see the module header).
    pub(crate) fn sync_for_commit(&mut self) -> Result<()> {
        self.preallocate = self.preallocation;
        self.sync()
    }

    /// Syncs the segment and cuts the zeros written ahead of its records (durably), so that
    /// it ends at its last record once it is no longer the newest.
    fn seal(&mut self) -> Result<()> {
        self.sync()?;
        if self.file_len > self.len {
            self.file
                .set_len(self.len)
                .map_err(|e| Error::io("set_len", &self.path, e))?;
            self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))?;
            self.file_len = self.len;
        }
        Ok(())
    }

    /// Rolls to a new segment if the current one is full (the old one is sealed first).
    pub(crate) fn maybe_roll(&mut self) -> Result<()> {
        if self.len < self.segment_size {
            return Ok(());
        }
        self.seal()?;
        let flags = segment_flags(self.preallocation);
        let (path, file) = create_segment(self.fs.as_ref(), &self.dir, self.number + 1, flags, false)?;
        self.segments.closed.lock().push((self.number, self.max_lsn));
        self.number += 1;
        self.path = path;
        self.file = file;
        self.len = SEGMENT_HEADER_SIZE as u64;
        self.file_len = self.len;
        self.synced_len = self.len;
        self.preallocate = false;
        self.written_back = 0;
        Ok(())
    }

    /// Closes the log after a clean shutdown: syncs it and, when every LSN up to `needed - 1`
    /// is in extents, deletes every closed segment below `needed`.
    pub(crate) fn close(mut self, needed: Lsn) -> Result<()> {
        self.seal()?;
        self.segments.retire(self.fs.as_ref(), &self.dir, needed)?;
        if self.max_lsn < needed && self.segments.len() == 0 {
            // Everything is in extents: the open segment is not needed either.
            drop(self.file);
            self.fs
                .remove_file(&self.path)
                .map_err(|e| Error::io("remove", &self.path, e))?;
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("fsync dir", &self.dir, e))?;
        }
        Ok(())
    }

    /// Writes a new segment that supersedes every older one, filled by `fill` (which emits
    /// encoded rewrite records), then deletes the older ones. Consumes the log: used at close.
    #[cfg(test)]
    pub(crate) fn rewrite_and_retire(mut self, fill: &mut dyn FnMut(&mut RecordSink<'_>) -> Result<()>) -> Result<()> {
        self.seal()?;
        let number = self.number + 1;
        let (tmp_path, file) = create_segment(self.fs.as_ref(), &self.dir, number, FLAG_SUPERSEDES, true)?;
        let mut at = SEGMENT_HEADER_SIZE as u64;
        fill(&mut |records: &[u8]| {
            file.write_at(records, at)
                .map_err(|e| Error::io("write", &tmp_path, e))?;
            at += records.len() as u64;
            Ok(())
        })?;
        file.sync_data().map_err(|e| Error::io("fsync", &tmp_path, e))?;
        drop(file);
        let final_path = segment_path(&self.dir, number);
        self.fs
            .rename(&tmp_path, &final_path)
            .map_err(|e| Error::io("rename", &tmp_path, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("fsync dir", &self.dir, e))?;
        remove_segments_below(self.fs.as_ref(), &self.dir, number)
    }
}

fn list_segments(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<u64>> {
    let names = fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    let mut numbers: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    numbers.sort_unstable();
    Ok(numbers)
}

fn remove_segments_below(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    let mut removed = false;
    for n in list_segments(fs, dir)? {
        if n < number {
            let p = segment_path(dir, n);
            fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            removed = true;
        }
    }
    if removed {
        fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
