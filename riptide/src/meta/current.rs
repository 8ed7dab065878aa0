//! The metadata directory's files and the `CURRENT` pointer: file names, the metadata format
//! version, the sealed fixed headers every metadata file starts with, and `CURRENT` itself.
//!
//! Invariants:
//! - `meta/CURRENT` names the live pair `(CHECKPOINT-c, SLOG-s)` (c = 0: no checkpoint, the
//!   empty state). It is replaced only by write `CURRENT.tmp`, fdatasync, rename, fsync of the
//!   directory, and it only ever names files that are already complete, fdatasynced and whose
//!   directory entries were fsynced. So after a crash, CURRENT names either the old or the new
//!   pair, and both files of that pair are readable.
//! - A fixed header (CURRENT, slog header, checkpoint header) ends in the masked CRC32C of its
//!   other bytes; its CRC is checked before its magic and version, and a version newer than
//!   [`META_FORMAT_VERSION`] is [`Error::UnsupportedFormat`], never guessed at.
//! - File numbers only grow: checkpoint and slog numbers come from one counter (`s + 1`).

use super::edit::corrupt;
use crate::coding::{crc_tail_ok, get_u32, get_u64, seal_crc_tail};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use std::path::{Path, PathBuf};

/// Current format version of CURRENT, slog files and checkpoint files. Version 2: extent ids
/// may name object-tier extents (bit 63 set; see `crate::space::OBJECT_ID_BIT`), which a
/// version-1 reader would take for a missing data file. Files of version 1 are still read.
pub(crate) const META_FORMAT_VERSION: u32 = 2;

const CURRENT_MAGIC: &[u8; 8] = b"RPTMCUR\0";
/// Size of the CURRENT file.
pub(crate) const CURRENT_SIZE: usize = 36;

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

/// True for the name of a file of the metadata directory (`CURRENT`, its temporary copy,
/// `SLOG-N`, `CHECKPOINT-N`), for tools that delete a database.
pub(crate) fn is_meta_file_name(name: &str) -> bool {
    matches!(name, "CURRENT" | "CURRENT.tmp")
        || parse_number(name, "SLOG-").is_some()
        || parse_number(name, "CHECKPOINT-").is_some()
}

pub(super) fn parse_number(name: &str, prefix: &str) -> Option<u64> {
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
    pub(super) fn store(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
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

pub(super) fn read_file(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    let f = fs.open_read(path).map_err(|e| Error::io("open", path, e))?;
    f.read_all().map_err(|e| Error::io("read", path, e))
}
