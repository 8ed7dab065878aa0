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
//! - Recovery never replays a record whose CRCs fail; see [`RecoveryMode`] for what it does then.

pub(crate) mod record;

use crate::coding::{crc_tail_ok, seal_crc_tail, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};
use crate::key::Lsn;
use crate::options::RecoveryMode;
use record::{decode_ops, Op};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Current redo format version.
pub(crate) const REDO_FORMAT_VERSION: u32 = 1;
const SEGMENT_MAGIC: &[u8; 8] = b"RPTREDO\0";
/// Size of a segment header.
pub(crate) const SEGMENT_HEADER_SIZE: usize = 32;
/// The segment replaces all older segments.
const FLAG_SUPERSEDES: u32 = 1;

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

fn parse_segment_name(name: &str) -> Option<u64> {
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

/// Creates a segment (header written and fsynced, directory entry fsynced).
fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    flags: u32,
    tmp: bool,
) -> Result<(PathBuf, Box<dyn WritableFile>)> {
    let mut path = segment_path(dir, number);
    if tmp {
        path.set_extension("log.tmp");
    }
    let mut file = fs.create(&path).map_err(|e| Error::io("create", &path, e))?;
    file.append(&encode_segment_header(number, flags))
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

/// The open redo log: the segment new records are appended to.
pub(crate) struct RedoLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    number: u64,
    path: PathBuf,
    file: Box<dyn WritableFile>,
    /// Bytes appended since the last fsync.
    unsynced: bool,
    /// Offset up to which writeback of the segment was started
    /// ([`WritableFile::start_writeback`], every [`WRITEBACK_BYTES`]).
    written_back: u64,
    /// Highest LSN appended so far (to this or an older segment).
    max_lsn: Lsn,
    segments: Arc<SegmentList>,
}

impl RedoLog {
    /// Starts a new segment numbered `number`; `older` lists the segments recovery found
    /// (number and highest LSN up to it), oldest first.
    pub(crate) fn create(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        number: u64,
        segment_size: u64,
        older: Vec<(u64, Lsn)>,
    ) -> Result<Self> {
        let (path, file) = create_segment(fs.as_ref(), &dir, number, 0, false)?;
        let max_lsn = older.last().map_or(0, |s| s.1);
        Ok(RedoLog {
            fs,
            dir,
            segment_size,
            number,
            path,
            file,
            unsynced: false,
            written_back: 0,
            max_lsn,
            segments: Arc::new(SegmentList {
                closed: parking_lot::Mutex::new(older),
                holds: Default::default(),
            }),
        })
    }

    /// The list of closed segments (for retiring them after flushes).
    pub(crate) fn segments(&self) -> Arc<SegmentList> {
        self.segments.clone()
    }

    /// Appends encoded records with one write call; `last_lsn` is the highest LSN in them.
    pub(crate) fn append(&mut self, data: &[u8], last_lsn: Lsn) -> Result<()> {
        self.file.append(data).map_err(|e| Error::io("write", &self.path, e))?;
        self.unsynced = true;
        let len = self.file.len();
        if len - self.written_back >= WRITEBACK_BYTES {
            self.file.start_writeback(self.written_back, len - self.written_back);
            self.written_back = len;
        }
        self.max_lsn = self.max_lsn.max(last_lsn);
        Ok(())
    }

    /// Makes every appended byte durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))?;
            self.unsynced = false;
            // Everything is on disk: the next writeback hint starts here, not over clean pages.
            self.written_back = self.file.len();
        }
        Ok(())
    }

    /// Rolls to a new segment if the current one is full (the old one is fsynced first).
    pub(crate) fn maybe_roll(&mut self) -> Result<()> {
        if self.file.len() < self.segment_size {
            return Ok(());
        }
        self.sync()?;
        let (path, file) = create_segment(self.fs.as_ref(), &self.dir, self.number + 1, 0, false)?;
        self.segments.closed.lock().push((self.number, self.max_lsn));
        self.number += 1;
        self.path = path;
        self.file = file;
        self.written_back = 0;
        Ok(())
    }

    /// Closes the log after a clean shutdown: syncs it and, when every LSN up to `needed - 1`
    /// is in extents, deletes every closed segment below `needed`.
    pub(crate) fn close(mut self, needed: Lsn) -> Result<()> {
        self.sync()?;
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
        self.sync()?;
        let number = self.number + 1;
        let (tmp_path, mut file) = create_segment(self.fs.as_ref(), &self.dir, number, FLAG_SUPERSEDES, true)?;
        fill(&mut |records: &[u8]| file.append(records).map_err(|e| Error::io("write", &tmp_path, e)))?;
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

/// What recovery found.
#[derive(Debug, Default, Clone)]
pub(crate) struct RecoveryReport {
    /// Highest LSN replayed (0 if none).
    pub(crate) max_lsn: Lsn,
    /// Number for the next segment to create.
    pub(crate) next_segment: u64,
    /// Records replayed.
    pub(crate) records: u64,
    /// Ops replayed.
    pub(crate) ops: u64,
    /// `(segment path, offset)` where a torn tail or (point-in-time) damage was cut off.
    pub(crate) truncated_at: Option<(PathBuf, u64)>,
    /// Segments kept on disk, oldest first, each with the highest LSN up to it.
    pub(crate) segments: Vec<(u64, Lsn)>,
}

/// Outcome of scanning one segment.
enum ScanEnd {
    Clean,
    /// Damage at `offset`: `torn` says whether it looks like an interrupted final write.
    Damaged {
        offset: u64,
        torn: bool,
        reason: String,
    },
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Scans records of one segment, calling `apply` for each op of each good record.
fn scan_segment(
    path: &Path,
    data: &[u8],
    last_lsn: &mut Lsn,
    report: &mut RecoveryReport,
    apply: &mut dyn FnMut(&Op<'_>) -> Result<()>,
) -> Result<ScanEnd> {
    let mut off = SEGMENT_HEADER_SIZE;
    loop {
        let rest = &data[off..];
        if rest.is_empty() {
            return Ok(ScanEnd::Clean);
        }
        let damaged = |torn: bool, reason: &str| {
            Ok(ScanEnd::Damaged {
                offset: off as u64,
                torn,
                reason: reason.to_string(),
            })
        };
        if rest.len() < RECORD_HEADER_SIZE {
            // A prefix of a header: the final append was cut short.
            return damaged(true, "incomplete record header");
        }
        let Some(header) = RecordHeader::decode(rest) else {
            // Zeros to the end are a write that never reached the disk; anything else is damage.
            return damaged(all_zero(rest), "record header checksum mismatch");
        };
        let end = RECORD_HEADER_SIZE + header.payload_len as usize;
        if rest.len() < end {
            return damaged(true, "record extends past the end of the segment");
        }
        let payload = &rest[RECORD_HEADER_SIZE..end];
        if crc32c::crc32c(payload) != header.payload_crc {
            // Only the very last record may be torn.
            return damaged(
                rest.len() == end || all_zero(&rest[end..]),
                "record payload checksum mismatch",
            );
        }
        let ops = match decode_ops(&header, payload) {
            Ok(ops) => ops,
            Err(at) => {
                return Err(Error::corruption(
                    path,
                    (off + RECORD_HEADER_SIZE + at) as u64,
                    "malformed op in a record whose checksum matches",
                ))
            }
        };
        if header.record_type == record::RECORD_GROUP && header.first_lsn <= *last_lsn && !ops.is_empty() {
            return Err(Error::corruption(
                path,
                off as u64,
                format!("LSN {} does not follow {}", header.first_lsn, last_lsn),
            ));
        }
        for op in &ops {
            apply(op)?;
            *last_lsn = (*last_lsn).max(op.lsn);
        }
        report.records += 1;
        report.ops += ops.len() as u64;
        off += end;
    }
}

/// Replays the redo log in `dir` through `apply`, repairing or refusing damage per `mode`.
/// Creates `dir` if missing. Leaves no `.tmp` segment behind.
pub(crate) fn recover(
    fs: &dyn FileSystem,
    dir: &Path,
    mode: RecoveryMode,
    apply: &mut dyn FnMut(&Op<'_>) -> Result<()>,
) -> Result<RecoveryReport> {
    fs.create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
    for name in fs.list_dir(dir).map_err(|e| Error::io("list", dir, e))? {
        if name.ends_with(".log.tmp") {
            let p = dir.join(&name);
            fs.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
        }
    }
    let numbers = list_segments(fs, dir)?;
    let mut report = RecoveryReport {
        next_segment: numbers.last().map_or(1, |n| n + 1),
        ..Default::default()
    };
    // Read headers to find the newest superseding segment.
    let mut segments = Vec::with_capacity(numbers.len());
    for &n in &numbers {
        let path = segment_path(dir, n);
        let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let data = file.read_all().map_err(|e| Error::io("read", &path, e))?;
        segments.push((n, path, data));
    }
    // Pass 1: segment headers. The newest superseding segment makes older ones obsolete; in
    // point-in-time mode a damaged header ends the log there.
    let count = segments.len();
    let mut start = 0;
    let mut end = count;
    let mut superseding = vec![false; count];
    for (i, (n, path, data)) in segments.iter().enumerate() {
        let is_last = i + 1 == count;
        if data.len() < SEGMENT_HEADER_SIZE && is_last && mode != RecoveryMode::AbsoluteConsistency {
            continue; // creation cut short; removed below
        }
        let header = decode_segment_header(path, data).and_then(|(number, flags)| {
            if number == *n {
                Ok(flags)
            } else {
                Err(Error::corruption(path, 16, format!("header says segment {number}")))
            }
        });
        match header {
            Ok(flags) if flags & FLAG_SUPERSEDES != 0 => {
                start = i;
                superseding[i] = true;
            }
            Ok(_) => {}
            Err(e) if mode == RecoveryMode::PointInTime && e.is_corruption() => {
                report.truncated_at = Some((path.clone(), 0));
                end = i;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    // Pass 2: replay segments[start..end].
    let mut last_lsn = 0;
    let mut cut = (end < count).then_some(end);
    let mut newest_replayed: Option<(&Path, u64)> = None;
    for i in start..end {
        let (_, path, data) = &segments[i];
        let is_last = i + 1 == count;
        if data.len() < SEGMENT_HEADER_SIZE {
            // Only reachable for the newest segment (see pass 1): its creation was cut short.
            fs.remove_file(path).map_err(|e| Error::io("remove", path, e))?;
            fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
            report.truncated_at = Some((path.clone(), 0));
            continue;
        }
        newest_replayed = Some((path, data.len() as u64));
        if let ScanEnd::Damaged { offset, torn, reason } = scan_segment(path, data, &mut last_lsn, &mut report, apply)?
        {
            let tolerate = match mode {
                // A superseding segment was fsynced before it got its name: it cannot be torn.
                RecoveryMode::TolerateCorruptedTail => torn && is_last && !superseding[i],
                RecoveryMode::AbsoluteConsistency => false,
                RecoveryMode::PointInTime => true,
            };
            if !tolerate {
                return Err(Error::corruption(path, offset, reason));
            }
            newest_replayed = Some((path, offset));
            report.truncated_at = Some((path.clone(), offset));
            if !is_last {
                report.segments.push((segments[i].0, last_lsn));
                cut = Some(i + 1);
                break;
            }
        }
        report.segments.push((segments[i].0, last_lsn));
    }
    // Point-in-time: everything after the damage is dropped.
    if let Some(c) = cut {
        for (_, later, _) in &segments[c..] {
            fs.remove_file(later).map_err(|e| Error::io("remove", later, e))?;
        }
    }
    // What was replayed is now visible to readers, so it must be durable before new writes
    // follow it: a killed process may have left bytes in the page cache that were never
    // fsynced. `truncate` cuts a torn tail and makes the length and data durable.
    if let Some((path, len)) = newest_replayed {
        fs.truncate(path, len).map_err(|e| Error::io("truncate", path, e))?;
    }
    fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
    if start > 0 {
        remove_segments_below(fs, dir, segments[start].0)?;
    }
    report.max_lsn = last_lsn;
    Ok(report)
}

/// What a read-only scan of one segment found (for `riptide inspect`).
#[derive(Debug, Clone)]
pub(crate) struct SegmentDump {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    /// Flags from the header, or the header's damage.
    pub(crate) header: std::result::Result<u32, String>,
    pub(crate) records: u64,
    pub(crate) ops: u64,
    /// LSN range of the ops (0, 0 when none).
    pub(crate) lsns: (Lsn, Lsn),
    /// Where damage starts, whether it looks like a torn write, and why.
    pub(crate) damage: Option<(u64, bool, String)>,
}

/// Scans every segment in `dir` without changing anything.
pub(crate) fn dump(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<SegmentDump>> {
    let mut out = Vec::new();
    if !fs.exists(dir) {
        return Ok(out);
    }
    for n in list_segments(fs, dir)? {
        let path = segment_path(dir, n);
        let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let data = file.read_all().map_err(|e| Error::io("read", &path, e))?;
        let mut d = SegmentDump {
            path: path.clone(),
            bytes: data.len() as u64,
            header: decode_segment_header(&path, &data)
                .map(|(_, flags)| flags)
                .map_err(|e| e.to_string()),
            records: 0,
            ops: 0,
            lsns: (0, 0),
            damage: None,
        };
        if d.header.is_ok() {
            let mut report = RecoveryReport::default();
            let mut last = 0;
            let mut first: Option<Lsn> = None;
            let end = scan_segment(&path, &data, &mut last, &mut report, &mut |op| {
                first.get_or_insert(op.lsn);
                Ok(())
            });
            match end {
                Ok(ScanEnd::Clean) => {}
                Ok(ScanEnd::Damaged { offset, torn, reason }) => d.damage = Some((offset, torn, reason)),
                Err(e) => d.damage = Some((0, false, e.to_string())),
            }
            d.records = report.records;
            d.ops = report.ops;
            d.lsns = (first.unwrap_or(0), last);
        }
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
