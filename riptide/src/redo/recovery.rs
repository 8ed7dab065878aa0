//! Recovery of the redo log: replaying its segments in order, and what damage means.
//!
//! Invariants:
//! - No record whose CRCs fail is ever replayed; what happens at damage depends on
//!   [`RecoveryMode`] (see `docs/format.md`, "Recovery").
//! - In a [`FLAG_PREALLOCATED`] segment, zeros from a record boundary to the end of the file
//!   are the clean end, but only in the newest segment (older ones were cut to their records
//!   before the next was created); in any segment a header cut short by the end of the file
//!   (or, preallocated, followed only by zeros) is a torn write.
//! - Replayed records are made durable (the newest segment is truncated to its records and
//!   fsynced) before recovery returns, since readers see them from then on.

use super::record::{self, decode_ops, Op};
use super::{
    decode_segment_header, list_segments, remove_segments_below, segment_path, FLAG_PREALLOCATED, FLAG_SUPERSEDES,
    SEGMENT_HEADER_SIZE,
};
use crate::coding::{frame_record, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::Lsn;
use crate::options::RecoveryMode;
use std::path::{Path, PathBuf};

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
    /// The records end at `end`: the end of the file, or (in a [`FLAG_PREALLOCATED`]
    /// segment, with `zero_tail`) where only zeros follow.
    Clean { end: u64, zero_tail: bool },
    /// Damage at `offset`: `torn` says whether it looks like an interrupted final write.
    Damaged { offset: u64, torn: bool, reason: String },
}

pub(super) fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// The unit a device writes whole or not at all (what a power cut can lose of an overwrite).
const SECTOR: usize = 512;
/// Fewest zero bytes (to the end of a sector) that look like a lost sector rather than data.
const MIN_LOST_ZEROS: usize = 8;

/// Whether damage at `damage` in a [`FLAG_PREALLOCATED`] segment is a hole a power cut left in
/// bytes that were never synced. Records there overwrite zero-filled space, and a device
/// persists any subset of the sectors in flight, so a lost sector reads as zeros while later
/// records may have survived. It is one if (a) the damaged bytes show a lost sector, before the
/// next record with good checksums: zeros from the damage to the end of its sector, or at least
/// [`MIN_LOST_ZEROS`] zeros from a later sector boundary to that sector's end; and (b) no later
/// good record proves the damaged bytes synced: none was written when the log was already
/// synced past them ([`record::synced_at_least`]). Looks for records at every byte offset after
/// `damage` outside good records and runs of zeros.
fn unsynced_hole(data: &[u8], damage: usize) -> bool {
    let mut p = damage + 1;
    let mut region_end = data.len();
    while p + RECORD_HEADER_SIZE <= data.len() {
        if data[p..p + RECORD_HEADER_SIZE].iter().all(|&b| b == 0) {
            // A header may start with zeros, up to 23 of them, before the next non-zero byte.
            let Some(n) = data[p..].iter().position(|&b| b != 0) else {
                break;
            };
            p = (p + 1).max((p + n).saturating_sub(RECORD_HEADER_SIZE - 1));
            continue;
        }
        if let Ok(r) = frame_record(data, p) {
            if record::synced_at_least(&data[p..], p as u64).is_some_and(|s| s > damage as u64) {
                return false;
            }
            region_end = region_end.min(p);
            p = r.end;
            continue;
        }
        p += 1;
    }
    let mut from = damage;
    while from < region_end {
        let sector_end = (from / SECTOR + 1) * SECTOR;
        if sector_end <= region_end
            // At the damaged record's own start any zeros to the sector's end count: a header
            // straddling a sector boundary may keep only a few bytes in the lost sector.
            && (sector_end - from >= MIN_LOST_ZEROS || from == damage)
            && data[from..sector_end].iter().all(|&b| b == 0)
        {
            return true;
        }
        from = sector_end;
    }
    false
}

/// Scans records of one segment, calling `apply` for each op of each good record;
/// `preallocated` when its header has [`FLAG_PREALLOCATED`].
fn scan_segment(
    path: &Path,
    data: &[u8],
    preallocated: bool,
    last_lsn: &mut Lsn,
    report: &mut RecoveryReport,
    apply: &mut dyn FnMut(&Op<'_>) -> Result<()>,
) -> Result<ScanEnd> {
    let mut off = SEGMENT_HEADER_SIZE;
    loop {
        let rest = &data[off..];
        if rest.is_empty() {
            return Ok(ScanEnd::Clean {
                end: off as u64,
                zero_tail: false,
            });
        }
        let zero_tail = || {
            Ok(ScanEnd::Clean {
                end: off as u64,
                zero_tail: true,
            })
        };
        let damaged = |torn: bool, reason: &str| {
            // Overwrites of zero-filled space reach the disk in any order: a lost sector
            // followed by good records is a torn write too, unless one proves it synced.
            let torn = torn || (preallocated && unsynced_hole(data, off));
            Ok(ScanEnd::Damaged {
                offset: off as u64,
                torn,
                reason: reason.to_string(),
            })
        };
        if rest.len() < RECORD_HEADER_SIZE {
            if preallocated && all_zero(rest) {
                return zero_tail();
            }
            // A prefix of a header: the final append was cut short.
            return damaged(true, "incomplete record header");
        }
        let Some(header) = RecordHeader::decode(rest) else {
            if preallocated && all_zero(rest) {
                return zero_tail();
            }
            if preallocated && all_zero(&rest[RECORD_HEADER_SIZE..]) {
                // A prefix of a header written into the zeros: the final write was cut short.
                return damaged(true, "incomplete record header");
            }
            // Zeros to the end are a write that never reached the disk; anything else is damage.
            return damaged(all_zero(rest), "record header checksum mismatch");
        };
        let Some(end) = usize::try_from(header.payload_len)
            .ok()
            .and_then(|n| n.checked_add(RECORD_HEADER_SIZE))
        else {
            return damaged(true, "record extends past the end of the segment");
        };
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
    let mut flags_of = vec![0u32; count];
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
            Ok(flags) => {
                flags_of[i] = flags;
                if flags & FLAG_SUPERSEDES != 0 {
                    start = i;
                }
            }
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
        let preallocated = flags_of[i] & FLAG_PREALLOCATED != 0;
        let scanned = match scan_segment(path, data, preallocated, &mut last_lsn, &mut report, apply)? {
            // A rolled segment was cut to its records before the next one was created.
            ScanEnd::Clean { end, zero_tail: true } if !is_last => ScanEnd::Damaged {
                offset: end,
                torn: false,
                reason: "zeros after the last record of an older segment".to_string(),
            },
            other => other,
        };
        match scanned {
            ScanEnd::Clean { end, .. } => newest_replayed = Some((path, end)),
            ScanEnd::Damaged { offset, torn, reason } => {
                let tolerate = match mode {
                    // A superseding segment was fsynced before it got its name: it cannot be torn.
                    RecoveryMode::TolerateCorruptedTail => torn && is_last && flags_of[i] & FLAG_SUPERSEDES == 0,
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
    /// Where damage starts, whether it is a torn tail recovery cuts (only ever in the newest
    /// segment), and why.
    pub(crate) damage: Option<(u64, bool, String)>,
    /// Where the records of a segment that ends in zero-filled space end.
    pub(crate) zeros_from: Option<u64>,
}

/// Scans every segment in `dir` without changing anything.
pub(crate) fn dump(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<SegmentDump>> {
    let mut out = Vec::new();
    if !fs.exists(dir) {
        return Ok(out);
    }
    let numbers = list_segments(fs, dir)?;
    for (i, &n) in numbers.iter().enumerate() {
        let is_last = i + 1 == numbers.len();
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
            zeros_from: None,
        };
        if d.header.is_ok() {
            let mut report = RecoveryReport::default();
            let mut last = 0;
            let mut first: Option<Lsn> = None;
            let preallocated = d.header.as_ref().is_ok_and(|f| f & FLAG_PREALLOCATED != 0);
            let end = scan_segment(&path, &data, preallocated, &mut last, &mut report, &mut |op| {
                first.get_or_insert(op.lsn);
                Ok(())
            });
            // As recovery judges it: only the newest segment may end torn or in zeros.
            match end {
                Ok(ScanEnd::Clean { zero_tail: false, .. }) => {}
                Ok(ScanEnd::Clean { end, zero_tail: true }) if is_last => d.zeros_from = Some(end),
                Ok(ScanEnd::Clean { end, .. }) => {
                    d.damage = Some((end, false, "zeros after the last record of an older segment".into()))
                }
                Ok(ScanEnd::Damaged { offset, torn, reason }) => {
                    let superseding = d.header.as_ref().is_ok_and(|f| f & FLAG_SUPERSEDES != 0);
                    d.damage = Some((offset, torn && is_last && !superseding, reason))
                }
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
