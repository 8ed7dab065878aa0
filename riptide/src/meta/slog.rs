//! The metadata log (slog): mini-transactions of [`SlogEntry`]s, the `CURRENT` pointer, and
//! recovery (see `docs/format.md`).
//!
//! Invariants:
//! - `meta/CURRENT` names the live pair `(CHECKPOINT-c, SLOG-s)` (c = 0: no checkpoint, the
//!   empty state). It is replaced only by write `CURRENT.tmp`, fdatasync, rename, fsync of the
//!   directory, and it only ever names files that are already complete, fdatasynced and whose
//!   directory entries were fsynced. So after a crash, CURRENT names either the old or the new
//!   pair, and both files of that pair are readable.
//! - A slog file is never modified in place: it is only appended to. Open does not append to the
//!   recovered slog; it copies the committed prefix into a fresh `SLOG-(s+1)` and switches
//!   CURRENT to it. So only the newest transaction of the live slog can be incomplete, and a
//!   torn or uncommitted tail is never followed by newer records.
//! - A transaction is `BEGIN, ENTRIES*, COMMIT`, every record framed with a header CRC and a
//!   payload CRC; only transactions whose COMMIT is present and valid are applied. An invalid
//!   record with no valid record anywhere after it is a torn tail (dropped); an invalid record
//!   followed by a valid one is [`Error::Corruption`]. A CRC-valid record that breaks the
//!   transaction structure is corruption too.
//! - [`Slog::commit`] returns only once the transaction is fdatasynced. After any I/O error
//!   the [`Slog`] is poisoned: every later call returns that error; reopening recovers.
//! - File numbers only grow: checkpoint and slog numbers come from one counter (`s + 1`).

use super::checkpoint::{load_checkpoint, write_checkpoint};
use super::edit::{corrupt, decode_entries, put_entry, MetaState, SlogEntry};
use crate::coding::{crc_tail_ok, get_u32, get_u64, seal_crc_tail, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Current format version of CURRENT, slog files and checkpoint files.
pub(crate) const META_FORMAT_VERSION: u32 = 1;

const CURRENT_MAGIC: &[u8; 8] = b"RPTMCUR\0";
const SLOG_MAGIC: &[u8; 8] = b"RPTSLOG\0";
/// Size of the CURRENT file.
pub(crate) const CURRENT_SIZE: usize = 36;
/// Size of a slog file header.
pub(crate) const SLOG_HEADER_SIZE: usize = 32;
/// Entries are packed into records of about this many payload bytes (an entry never spans
/// records; a bigger entry gets a record of its own).
pub(crate) const RECORD_TARGET: usize = 1 << 20;

/// Slog record: a transaction starts (empty payload).
pub(crate) const REC_BEGIN: u8 = 1;
/// Slog and checkpoint record: a sequence of encoded entries.
pub(crate) const REC_ENTRIES: u8 = 2;
/// Slog record: the transaction commits (payload: u64 entry count).
pub(crate) const REC_COMMIT: u8 = 3;
/// Checkpoint record: the trailer.
pub(crate) const REC_END: u8 = 4;

/// The metadata directory of the database at `db`.
pub(crate) fn meta_dir(db: &Path) -> PathBuf {
    db.join("meta")
}

pub(crate) fn slog_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("SLOG-{n:06}"))
}

pub(crate) fn checkpoint_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("CHECKPOINT-{n:06}"))
}

fn parse_number(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Checks a fixed header: length, CRC (last 4 bytes, over the rest), magic, version.
pub(crate) fn check_fixed_header(path: &Path, h: &[u8], size: usize, magic: &[u8; 8], what: &str) -> Result<()> {
    if h.len() < size {
        return Err(corrupt(path, 0, format!("{what} is shorter than {size} bytes")));
    }
    let h = &h[..size];
    if !crc_tail_ok(h) {
        return Err(corrupt(path, 0, format!("{what} checksum mismatch")));
    }
    if &h[0..8] != magic {
        return Err(corrupt(path, 0, format!("{what}: bad magic")));
    }
    let version = get_u32(h, 8).unwrap_or(0);
    if version > META_FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: version,
            supported: META_FORMAT_VERSION,
        });
    }
    if version == 0 {
        return Err(corrupt(path, 8, format!("{what}: format version 0")));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// CURRENT

/// The live pair named by CURRENT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    /// Checkpoint number; 0 = none (the empty state).
    pub(crate) checkpoint: u64,
    /// Slog number (>= 1, >= checkpoint).
    pub(crate) slog: u64,
}

impl Current {
    pub(crate) fn encode(&self) -> [u8; CURRENT_SIZE] {
        let mut h = [0u8; CURRENT_SIZE];
        h[0..8].copy_from_slice(CURRENT_MAGIC);
        h[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&self.checkpoint.to_le_bytes());
        h[24..32].copy_from_slice(&self.slog.to_le_bytes());
        seal_crc_tail(&mut h);
        h
    }

    pub(crate) fn decode(path: &Path, data: &[u8]) -> Result<Self> {
        if data.len() != CURRENT_SIZE {
            return Err(corrupt(
                path,
                0,
                format!("CURRENT is {} bytes, expected {CURRENT_SIZE}", data.len()),
            ));
        }
        check_fixed_header(path, data, CURRENT_SIZE, CURRENT_MAGIC, "CURRENT")?;
        if get_u32(data, 12).unwrap_or(0) != 0 {
            return Err(corrupt(path, 12, "CURRENT: reserved bytes are not zero"));
        }
        let cur = Current {
            checkpoint: get_u64(data, 16).unwrap_or(0),
            slog: get_u64(data, 24).unwrap_or(0),
        };
        if cur.slog == 0 || cur.slog < cur.checkpoint {
            return Err(corrupt(
                path,
                16,
                format!("CURRENT names checkpoint {} with slog {}", cur.checkpoint, cur.slog),
            ));
        }
        Ok(cur)
    }

    /// Durably replaces `dir/CURRENT`: write the temp file, fdatasync, rename, fsync `dir`.
    fn store(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
        let tmp = dir.join("CURRENT.tmp");
        let path = dir.join("CURRENT");
        let mut f = fs.create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        f.append(&self.encode()).map_err(|e| Error::io("write", &tmp, e))?;
        f.sync_data().map_err(|e| Error::io("fsync", &tmp, e))?;
        drop(f);
        fs.rename(&tmp, &path).map_err(|e| Error::io("rename", &tmp, e))?;
        fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))
    }
}

// ---------------------------------------------------------------------------------------------
// Records

/// Appends one framed record. Fails (nothing appended) if the payload exceeds 4 GiB - 1.
pub(crate) fn encode_record(out: &mut Vec<u8>, kind: u8, seq: u64, payload: &[u8]) -> io::Result<()> {
    let payload_len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "metadata record payload exceeds 4 GiB"))?;
    let h = RecordHeader {
        payload_crc: crc32c::crc32c(payload),
        payload_len,
        record_type: kind,
        first_lsn: seq,
    };
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(payload);
    Ok(())
}

/// Encodes `entries` as ENTRIES records of about [`RECORD_TARGET`] bytes, calling `emit` with
/// each finished payload.
pub(crate) fn pack_entries<'a>(
    entries: impl IntoIterator<Item = &'a SlogEntry>,
    emit: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut payload = Vec::new();
    let mut one = Vec::new();
    for e in entries {
        one.clear();
        put_entry(&mut one, e);
        if !payload.is_empty() && payload.len() + one.len() > RECORD_TARGET {
            emit(&payload)?;
            payload.clear();
        }
        payload.extend_from_slice(&one);
    }
    if !payload.is_empty() {
        emit(&payload)?;
    }
    Ok(())
}

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

fn encode_slog_header(number: u64) -> [u8; SLOG_HEADER_SIZE] {
    let mut h = [0u8; SLOG_HEADER_SIZE];
    h[0..8].copy_from_slice(SLOG_MAGIC);
    h[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&number.to_le_bytes());
    seal_crc_tail(&mut h);
    h
}

/// Checks a slog header; returns `(number, version)`.
pub(crate) fn decode_slog_header(path: &Path, data: &[u8]) -> Result<(u64, u32)> {
    check_fixed_header(path, data, SLOG_HEADER_SIZE, SLOG_MAGIC, "slog header")?;
    if get_u32(data, 12).unwrap_or(0) != 0 || get_u32(data, 24).unwrap_or(0) != 0 {
        return Err(corrupt(path, 12, "slog header: reserved bytes are not zero"));
    }
    Ok((get_u64(data, 16).unwrap_or(0), get_u32(data, 8).unwrap_or(0)))
}

/// A framed record found in a slog image.
#[derive(Clone, Copy, Debug)]
struct Framed {
    offset: usize,
    header: RecordHeader,
    end: usize,
}

/// Tries to read one complete, CRC-valid record at `off`.
fn try_record(data: &[u8], off: usize) -> std::result::Result<Framed, &'static str> {
    let rest = data.get(off..).unwrap_or(&[]);
    if rest.len() < RECORD_HEADER_SIZE {
        return Err("incomplete record header");
    }
    let header = RecordHeader::decode(rest).ok_or("record header checksum mismatch")?;
    let end = RECORD_HEADER_SIZE + header.payload_len as usize;
    if rest.len() < end {
        return Err("record extends past the end of the file");
    }
    if crc32c::crc32c(&rest[RECORD_HEADER_SIZE..end]) != header.payload_crc {
        return Err("record payload checksum mismatch");
    }
    Ok(Framed {
        offset: off,
        header,
        end: off + end,
    })
}

/// The first complete, CRC-valid record starting at or after `from`, if any.
fn find_valid_record(data: &[u8], from: usize) -> Option<usize> {
    (from..data.len().saturating_sub(RECORD_HEADER_SIZE - 1)).find(|&p| try_record(data, p).is_ok())
}

/// A torn tail: its offset and why the record there is invalid.
type TornTail = (usize, &'static str);

/// Frames every record of a slog image after its header. Returns the records and, if the file
/// ends in a torn tail, where and why. Damage followed by a valid record is corruption.
fn frame_slog(path: &Path, data: &[u8]) -> Result<(Vec<Framed>, Option<TornTail>)> {
    let mut out = Vec::new();
    let mut off = SLOG_HEADER_SIZE;
    while off < data.len() {
        match try_record(data, off) {
            Ok(r) => {
                off = r.end;
                out.push(r);
            }
            Err(reason) => {
                // A torn append leaves a prefix of what was written: a short header, or a
                // valid header whose payload runs past the end of the file. A complete record
                // with a bad checksum, or a damaged header followed by non-zero bytes, is
                // damage at rest, never a torn write: refusing it keeps a committed flush from
                // silently disappearing (its redo segments may already be deleted).
                let rest = &data[off..];
                let header = RecordHeader::decode(rest);
                let complete = header.is_some_and(|h| rest.len() >= RECORD_HEADER_SIZE + h.payload_len as usize);
                let garbage_header =
                    header.is_none() && rest.len() >= RECORD_HEADER_SIZE && rest.iter().any(|&b| b != 0);
                if complete || garbage_header {
                    return Err(corrupt(path, off as u64, format!("{reason} in a complete record")));
                }
                // A header whose CRC matches has a trustworthy length: look for valid records
                // only after the record. Otherwise from the next byte on.
                let from = match header {
                    Some(h) => off.saturating_add(RECORD_HEADER_SIZE + h.payload_len as usize),
                    None => off + 1,
                };
                if let Some(p) = find_valid_record(data, from) {
                    return Err(corrupt(
                        path,
                        off as u64,
                        format!("{reason}, and a valid record follows at offset {p}"),
                    ));
                }
                return Ok((out, Some((off, reason))));
            }
        }
    }
    Ok((out, None))
}

/// One record of a slog file, decoded but not applied (for inspection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlogRecordView {
    /// The file header (offset 0).
    Header {
        /// The slog number it carries.
        number: u64,
        /// Its format version.
        version: u32,
    },
    /// A transaction starts.
    Begin {
        /// Transaction id.
        txn: u64,
    },
    /// Entries of a transaction.
    Entries {
        /// Transaction id.
        txn: u64,
        /// The decoded entries.
        entries: Vec<SlogEntry>,
    },
    /// A transaction commits.
    Commit {
        /// Transaction id.
        txn: u64,
        /// Number of entries the transaction holds.
        entries: u64,
    },
    /// A torn tail: `len` bytes from this offset to the end of the file that do not form a
    /// valid record (recovery drops them).
    TornTail {
        /// Bytes in the tail.
        len: u64,
        /// Why the first record there is invalid.
        reason: String,
    },
}

/// Decodes a CRC-valid slog record.
fn view_record(path: &Path, data: &[u8], r: &Framed) -> Result<SlogRecordView> {
    let hdr = &data[r.offset..r.offset + RECORD_HEADER_SIZE];
    let payload = &data[r.offset + RECORD_HEADER_SIZE..r.end];
    let bad = |off: usize, why: String| corrupt(path, off as u64, why);
    if !RecordHeader::reserved_ok(hdr) {
        return Err(bad(r.offset + 13, "record header: reserved bytes are not zero".into()));
    }
    // The header's sequence field is the transaction id.
    let txn = r.header.first_lsn;
    match r.header.record_type {
        REC_BEGIN if payload.is_empty() => Ok(SlogRecordView::Begin { txn }),
        REC_ENTRIES => match decode_entries(payload) {
            Ok(entries) => Ok(SlogRecordView::Entries { txn, entries }),
            Err(at) => Err(bad(
                r.offset + RECORD_HEADER_SIZE + at,
                "malformed entry in a record whose checksum matches".into(),
            )),
        },
        REC_COMMIT if payload.len() == 8 => Ok(SlogRecordView::Commit {
            txn,
            entries: get_u64(payload, 0).unwrap_or(0),
        }),
        REC_BEGIN | REC_COMMIT => Err(bad(
            r.offset,
            format!(
                "record type {} with a {}-byte payload",
                r.header.record_type,
                payload.len()
            ),
        )),
        k => Err(bad(r.offset, format!("unknown slog record type {k}"))),
    }
}

/// Decodes every record of a slog file, with offsets, without applying anything. A torn tail
/// ends the list as [`SlogRecordView::TornTail`]; damage in the middle is an error.
pub(crate) fn dump_slog(fs: &dyn FileSystem, path: &Path) -> Result<Vec<(u64, SlogRecordView)>> {
    let data = read_file(fs, path)?;
    let (number, version) = decode_slog_header(path, &data)?;
    let mut out = vec![(0, SlogRecordView::Header { number, version })];
    let (records, tail) = frame_slog(path, &data)?;
    for r in &records {
        out.push((r.offset as u64, view_record(path, &data, r)?));
    }
    if let Some((off, reason)) = tail {
        out.push((
            off as u64,
            SlogRecordView::TornTail {
                len: (data.len() - off) as u64,
                reason: reason.to_string(),
            },
        ));
    }
    Ok(out)
}

fn read_file(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    let f = fs.open_read(path).map_err(|e| Error::io("open", path, e))?;
    f.read_all().map_err(|e| Error::io("read", path, e))
}

/// The metadata named by `cur`, rebuilt without writing anything: the checkpoint, then the
/// committed transactions of the slog (used by `Slog::open` and by the inspect tool).
pub(crate) struct RecoveredState {
    pub(crate) state: MetaState,
    /// The slog image that was replayed, and its path.
    pub(crate) data: Vec<u8>,
    pub(crate) path: PathBuf,
    pub(crate) replay: Replay,
}

/// Loads the checkpoint and replays the slog that `cur` names, read-only.
pub(crate) fn recover_state(fs: &dyn FileSystem, dir: &Path, cur: Current) -> Result<RecoveredState> {
    let named_missing = |p: &Path| -> Result<()> {
        if fs.exists(p) {
            Ok(())
        } else {
            Err(corrupt(p, 0, "named by CURRENT but missing"))
        }
    };
    let mut state = if cur.checkpoint > 0 {
        let p = checkpoint_path(dir, cur.checkpoint);
        named_missing(&p)?;
        let (number, state) = load_checkpoint(fs, &p)?;
        if number != cur.checkpoint {
            return Err(corrupt(&p, 16, format!("checkpoint header says number {number}")));
        }
        state
    } else {
        MetaState::default()
    };
    let path = slog_path(dir, cur.slog);
    named_missing(&path)?;
    let data = read_file(fs, &path)?;
    let (number, _) = decode_slog_header(&path, &data)?;
    if number != cur.slog {
        return Err(corrupt(&path, 16, format!("slog header says number {number}")));
    }
    let replay = replay_slog(&path, &data, &mut state)?;
    Ok(RecoveredState {
        state,
        data,
        path,
        replay,
    })
}

/// What replaying one slog image found.
pub(crate) struct Replay {
    /// End offset of the last committed transaction (the header size if none).
    pub(crate) committed_end: usize,
    pub(crate) txns: u64,
    last_txn: u64,
}

/// Replays the committed transactions of a slog image into `state`.
pub(crate) fn replay_slog(path: &Path, data: &[u8], state: &mut MetaState) -> Result<Replay> {
    let (records, _tail) = frame_slog(path, data)?;
    let mut out = Replay {
        committed_end: SLOG_HEADER_SIZE,
        txns: 0,
        last_txn: 0,
    };
    // The open transaction: (id, buffered entries).
    let mut open: Option<(u64, Vec<SlogEntry>)> = None;
    for r in &records {
        let at = r.offset as u64;
        match view_record(path, data, r)? {
            SlogRecordView::Begin { txn } => {
                if let Some((t, _)) = &open {
                    return Err(corrupt(path, at, format!("BEGIN of txn {txn} while txn {t} is open")));
                }
                if txn <= out.last_txn {
                    return Err(corrupt(
                        path,
                        at,
                        format!("txn id {txn} does not follow {}", out.last_txn),
                    ));
                }
                open = Some((txn, Vec::new()));
            }
            SlogRecordView::Entries { txn, entries } => match &mut open {
                Some((t, buf)) if *t == txn => buf.extend(entries),
                _ => return Err(corrupt(path, at, format!("entries of txn {txn}, which is not open"))),
            },
            SlogRecordView::Commit { txn, entries } => {
                let Some((t, buf)) = open.take() else {
                    return Err(corrupt(path, at, format!("COMMIT of txn {txn}, which is not open")));
                };
                if t != txn {
                    return Err(corrupt(path, at, format!("COMMIT of txn {txn} while txn {t} is open")));
                }
                if buf.len() as u64 != entries {
                    return Err(corrupt(
                        path,
                        at,
                        format!("txn {txn} commits {entries} entries but holds {}", buf.len()),
                    ));
                }
                for e in &buf {
                    state
                        .try_apply(e)
                        .map_err(|why| corrupt(path, at, format!("txn {txn} does not apply: {why}")))?;
                }
                out.committed_end = r.end;
                out.txns += 1;
                out.last_txn = txn;
            }
            SlogRecordView::Header { .. } | SlogRecordView::TornTail { .. } => {}
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The live slog

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
    /// [`Slog::slog_number`]).
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
    pub(crate) fn numbers(&self) -> (u64, u64) {
        (self.current.checkpoint, self.current.slog)
    }

    /// Number of the live slog file.
    pub(crate) fn slog_number(&self) -> u64 {
        self.current.slog
    }

    /// The metadata directory.
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
