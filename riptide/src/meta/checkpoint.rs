//! Checkpoint files: a full dump of a [`MetaState`] (see `docs/format.md`, "Checkpoint").
//!
//! Invariants:
//! - A checkpoint is `header ‖ ENTRIES records ‖ END record`. Its content is a sequence of
//!   [`SlogEntry::Edit`]s that, applied in order to the empty state, rebuild the state exactly;
//!   loading applies them, so every [`MetaState`] invariant is re-checked on load.
//! - Tables are written in id order; a table's extents in (level, layer, in-layer) order, cut
//!   into edits of about [`RECORD_TARGET`] bytes; the first edit of a table carries its
//!   `flushed_lsn` and `next_layer`. Neither writing nor reading needs memory beyond the state
//!   and one record.
//! - A checkpoint is complete and fdatasynced before CURRENT names it, so it cannot be torn:
//!   any CRC failure, short read, wrong record index, missing trailer, count mismatch or
//!   trailing byte is [`Error::Corruption`] naming the file and offset.

use super::current::{check_fixed_header, META_FORMAT_VERSION};
use super::edit::{corrupt, decode_entries, put_entry, ExtentMeta, MetaState, SlogEntry, TableEdit};
use super::framing::{encode_record, RECORD_TARGET, REC_END, REC_ENTRIES};
use crate::coding::{get_u64, put_u64, seal_crc_tail, RecordHeader, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, ReadableFile, WritableFile};
use std::path::Path;

const CHECKPOINT_MAGIC: &[u8; 8] = b"RPTCKPT\0";
/// Size of a checkpoint header.
pub(crate) const CHECKPOINT_HEADER_SIZE: usize = 48;
/// Size of the END record's payload.
const END_PAYLOAD_SIZE: usize = 24;

/// The fixed header of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointHeader {
    pub(crate) number: u64,
    pub(crate) tables: u64,
    pub(crate) extents: u64,
}

impl CheckpointHeader {
    fn encode(&self) -> [u8; CHECKPOINT_HEADER_SIZE] {
        let mut h = [0u8; CHECKPOINT_HEADER_SIZE];
        h[0..8].copy_from_slice(CHECKPOINT_MAGIC);
        h[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&self.number.to_le_bytes());
        h[24..32].copy_from_slice(&self.tables.to_le_bytes());
        h[32..40].copy_from_slice(&self.extents.to_le_bytes());
        seal_crc_tail(&mut h);
        h
    }

    fn decode(path: &Path, h: &[u8]) -> Result<Self> {
        check_fixed_header(path, h, CHECKPOINT_HEADER_SIZE, CHECKPOINT_MAGIC, "checkpoint header")?;
        let u64_at = |o: usize| get_u64(h, o).unwrap_or(0);
        if h[12..16] != [0; 4] || h[40..44] != [0; 4] {
            return Err(corrupt(path, 12, "checkpoint header: reserved bytes are not zero"));
        }
        Ok(CheckpointHeader {
            number: u64_at(16),
            tables: u64_at(24),
            extents: u64_at(32),
        })
    }
}

/// Packs entries into ENTRIES records and appends them.
struct RecordWriter<'a> {
    file: &'a mut dyn WritableFile,
    path: &'a Path,
    payload: Vec<u8>,
    one: Vec<u8>,
    buf: Vec<u8>,
    /// Index of the next record.
    seq: u64,
    entries: u64,
}

impl RecordWriter<'_> {
    fn add(&mut self, e: &SlogEntry) -> Result<()> {
        self.one.clear();
        put_entry(&mut self.one, e);
        if !self.payload.is_empty() && self.payload.len() + self.one.len() > RECORD_TARGET {
            self.flush()?;
        }
        self.payload.extend_from_slice(&self.one);
        self.entries += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.payload.is_empty() {
            return Ok(());
        }
        let payload = std::mem::take(&mut self.payload);
        self.emit(REC_ENTRIES, &payload)?;
        self.payload = payload;
        self.payload.clear();
        Ok(())
    }

    fn emit(&mut self, kind: u8, payload: &[u8]) -> Result<()> {
        self.buf.clear();
        encode_record(&mut self.buf, kind, self.seq, payload).map_err(|e| Error::io("encode", self.path, e))?;
        self.file
            .append(&self.buf)
            .map_err(|e| Error::io("write", self.path, e))?;
        self.seq += 1;
        Ok(())
    }
}

/// Writes `state` as checkpoint `number` at `path` and fdatasyncs it. The caller fsyncs the
/// directory.
pub(crate) fn write_checkpoint(fs: &dyn FileSystem, path: &Path, number: u64, state: &MetaState) -> Result<()> {
    let mut file = fs.create(path).map_err(|e| Error::io("create", path, e))?;
    let header = CheckpointHeader {
        number,
        tables: state.tables.len() as u64,
        extents: state.extent_count() as u64,
    };
    file.append(&header.encode()).map_err(|e| Error::io("write", path, e))?;
    let mut w = RecordWriter {
        file: file.as_mut(),
        path,
        payload: Vec::new(),
        one: Vec::new(),
        buf: Vec::new(),
        seq: 0,
        entries: 0,
    };
    for (&table, tm) in &state.tables {
        let mut first = true;
        let mut chunk: Vec<(u8, u64, ExtentMeta)> = Vec::new();
        let mut chunk_bytes = 0;
        let emit_chunk = |w: &mut RecordWriter<'_>, chunk: Vec<(u8, u64, ExtentMeta)>, first: bool| {
            w.add(&SlogEntry::Edit(TableEdit {
                table,
                removed: Vec::new(),
                added: chunk,
                flushed_lsn: first.then_some(tm.flushed_lsn),
                next_layer: first.then_some(tm.next_layer),
            }))
        };
        for (level, layer, e) in tm.extents() {
            chunk_bytes += e.smallest.len() + e.largest.len() + 64;
            chunk.push((level, layer, e.clone()));
            if chunk_bytes >= RECORD_TARGET {
                emit_chunk(&mut w, std::mem::take(&mut chunk), first)?;
                first = false;
                chunk_bytes = 0;
            }
        }
        if first || !chunk.is_empty() {
            emit_chunk(&mut w, chunk, first)?;
        }
    }
    w.flush()?;
    let mut end = Vec::with_capacity(END_PAYLOAD_SIZE);
    put_u64(&mut end, header.tables);
    put_u64(&mut end, header.extents);
    put_u64(&mut end, w.entries);
    w.emit(REC_END, &end)?;
    file.sync_data().map_err(|e| Error::io("fsync", path, e))
}

/// Reads exactly `buf.len()` bytes at `offset`; a short read is corruption (the file ends).
fn read_exact(file: &dyn ReadableFile, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file
            .read_at(&mut buf[done..], offset + done as u64)
            .map_err(|e| Error::io("read", path, e))?;
        if n == 0 {
            return Err(corrupt(path, offset, "checkpoint ends inside a record"));
        }
        done += n;
    }
    Ok(())
}

/// Reads and checks a whole checkpoint file: its number and the state.
pub(crate) fn load_checkpoint(fs: &dyn FileSystem, path: &Path) -> Result<(u64, MetaState)> {
    let file = fs.open_read(path).map_err(|e| Error::io("open", path, e))?;
    let len = file.len().map_err(|e| Error::io("stat", path, e))?;
    if len < CHECKPOINT_HEADER_SIZE as u64 {
        return Err(corrupt(path, 0, "checkpoint is shorter than its header"));
    }
    let mut h = [0u8; CHECKPOINT_HEADER_SIZE];
    read_exact(file.as_ref(), path, &mut h, 0)?;
    let header = CheckpointHeader::decode(path, &h)?;
    let mut state = MetaState::default();
    let mut off = CHECKPOINT_HEADER_SIZE as u64;
    let mut seq = 0u64;
    let mut entries = 0u64;
    let mut payload = Vec::new();
    loop {
        if len - off < RECORD_HEADER_SIZE as u64 {
            return Err(corrupt(path, off, "checkpoint ends without its END record"));
        }
        let mut rh = [0u8; RECORD_HEADER_SIZE];
        read_exact(file.as_ref(), path, &mut rh, off)?;
        let rec = RecordHeader::decode(&rh).ok_or_else(|| corrupt(path, off, "record header checksum mismatch"))?;
        if !RecordHeader::reserved_ok(&rh) {
            return Err(corrupt(path, off + 13, "record header: reserved bytes are not zero"));
        }
        let body = off + RECORD_HEADER_SIZE as u64;
        let end = body + u64::from(rec.payload_len);
        if end > len {
            return Err(corrupt(path, off, "record extends past the end of the checkpoint"));
        }
        payload.resize(rec.payload_len as usize, 0);
        read_exact(file.as_ref(), path, &mut payload, body)?;
        if crc32c::crc32c(&payload) != rec.payload_crc {
            return Err(corrupt(path, off, "record payload checksum mismatch"));
        }
        // The header's sequence field is the record's index in the file.
        if rec.first_lsn != seq {
            return Err(corrupt(
                path,
                off,
                format!("record {} where record {seq} belongs", rec.first_lsn),
            ));
        }
        match rec.record_type {
            REC_ENTRIES => {
                let list = decode_entries(&payload).map_err(|at| {
                    corrupt(
                        path,
                        body + at as u64,
                        "malformed entry in a record whose checksum matches",
                    )
                })?;
                for e in &list {
                    if !matches!(e, SlogEntry::Edit(ed) if ed.removed.is_empty()) {
                        return Err(corrupt(path, off, "a checkpoint entry that is not a pure addition"));
                    }
                    state
                        .try_apply(e)
                        .map_err(|why| corrupt(path, off, format!("checkpoint entry does not apply: {why}")))?;
                }
                entries += list.len() as u64;
            }
            REC_END => {
                if payload.len() != END_PAYLOAD_SIZE {
                    return Err(corrupt(path, off, "END record of the wrong size"));
                }
                let at = |o: usize| get_u64(&payload, o).unwrap_or(0);
                let (tables, extents, n) = (at(0), at(8), at(16));
                if (tables, extents) != (header.tables, header.extents) || n != entries {
                    return Err(corrupt(
                        path,
                        off,
                        format!(
                            "END record counts ({tables} tables, {extents} extents, {n} entries) do not match \
                             the header ({} tables, {} extents) and the file ({entries} entries)",
                            header.tables, header.extents
                        ),
                    ));
                }
                if state.tables.len() as u64 != tables || state.extent_count() as u64 != extents {
                    return Err(corrupt(
                        path,
                        off,
                        format!(
                            "checkpoint holds {} tables and {} extents, its counts say {tables} and {extents}",
                            state.tables.len(),
                            state.extent_count()
                        ),
                    ));
                }
                if end != len {
                    return Err(corrupt(path, end, "bytes after the END record"));
                }
                return Ok((header.number, state));
            }
            k => return Err(corrupt(path, off, format!("unknown checkpoint record type {k}"))),
        }
        off = end;
        seq += 1;
    }
}

/// Reads a checkpoint file (for inspection): every record checked, the state rebuilt.
#[cfg(test)]
pub(crate) fn read_checkpoint(fs: &dyn FileSystem, path: &Path) -> Result<MetaState> {
    load_checkpoint(fs, path).map(|(_, state)| state)
}
