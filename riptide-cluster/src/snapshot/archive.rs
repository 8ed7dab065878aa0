//! The snapshot archive: the files of an engine checkpoint in one byte stream, with the
//! snapshot's meta in front, as openraft sends a snapshot to a lagging node (`docs/format.md`,
//! "Raft snapshot archive").
//!
//! Layout (version 1; integers little-endian):
//! - header: `RTSNAP` ‖ u16 version ‖ u32 meta length ‖ meta (the [`crate::codec`] encoding of
//!   openraft's `SnapshotMeta`) ‖ u32 CRC-32C of everything before it;
//! - records, each ending in the CRC-32C of its own bytes from the tag on:
//!   - `1` directory: u16 name length ‖ name;
//!   - `2` file: u16 name length ‖ name ‖ u64 length;
//!   - `3` data of the last file: u64 offset ‖ u32 length ‖ bytes;
//!   - `0` end: u32 number of files (nothing may follow).
//!
//! Invariants:
//! - Names are relative paths of normal components joined by `/`; a name with a `.` or `..`
//!   component, a root, an empty component, a NUL or over [`MAX_NAME`] bytes is refused, so
//!   unpacking never writes outside its target directory.
//! - Data records of a file are in increasing, non-overlapping offset order and end within the
//!   file's length; the ranges between them are zeros (holes: a checkpoint's data files are
//!   sparse, and zero blocks of [`BLOCK`] bytes are left out when packing).
//! - A reader accepts an archive only whole: a bad CRC, an unknown tag or version, a
//!   truncated stream or bytes after the end record are errors ([`ArchiveError`]), never a
//!   partial directory reported as complete.

use crate::codec::{decode, encode};
use openraft::{BasicNode, SnapshotMeta};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

type Meta = SnapshotMeta<u64, BasicNode>;

const MAGIC: &[u8; 6] = b"RTSNAP";
/// The archive format this build writes and reads.
pub const ARCHIVE_VERSION: u16 = 1;
/// Bytes per data record at most; zero blocks of this size are left out.
pub const BLOCK: usize = 64 << 10;
/// The longest name a record may carry.
pub const MAX_NAME: usize = 4096;
/// The largest meta a header may claim (membership of a few nodes is far below it).
const MAX_META: u32 = 1 << 20;

const TAG_END: u8 = 0;
const TAG_DIR: u8 = 1;
const TAG_FILE: u8 = 2;
const TAG_DATA: u8 = 3;

/// Why an archive could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The file system failed.
    #[error("snapshot archive: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a whole, intact archive of a version this build reads.
    #[error("snapshot archive is corrupt: {0}")]
    Corrupt(String),
}

fn corrupt(what: impl Into<String>) -> ArchiveError {
    ArchiveError::Corrupt(what.into())
}

/// Writes the archive of directory `src` (every file and directory under it), with `meta` in
/// its header, to `out`. Returns the number of files.
pub fn pack(src: &Path, meta: &Meta, out: &mut impl Write) -> Result<u64, ArchiveError> {
    let meta_bytes = encode(meta).map_err(|e| corrupt(e.0))?;
    let mut header = Vec::with_capacity(16 + meta_bytes.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&ARCHIVE_VERSION.to_le_bytes());
    header.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    header.extend_from_slice(&meta_bytes);
    header.extend_from_slice(&crc32c::crc32c(&header).to_le_bytes());
    out.write_all(&header)?;
    let mut files = 0;
    pack_dir(src, "", out, &mut files)?;
    let mut end = vec![TAG_END];
    end.extend_from_slice(&(files as u32).to_le_bytes());
    write_record(out, end)?;
    Ok(files)
}

fn write_record(out: &mut impl Write, mut record: Vec<u8>) -> Result<(), ArchiveError> {
    let crc = crc32c::crc32c(&record);
    record.extend_from_slice(&crc.to_le_bytes());
    out.write_all(&record)?;
    Ok(())
}

fn named_record(tag: u8, name: &str) -> Result<Vec<u8>, ArchiveError> {
    if name.len() > MAX_NAME {
        return Err(corrupt(format!("name of {} bytes", name.len())));
    }
    let mut record = vec![tag];
    record.extend_from_slice(&(name.len() as u16).to_le_bytes());
    record.extend_from_slice(name.as_bytes());
    Ok(record)
}

fn pack_dir(dir: &Path, prefix: &str, out: &mut impl Write, files: &mut u64) -> Result<(), ArchiveError> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry
            .file_name()
            .into_string()
            .map_err(|n| corrupt(format!("file name {n:?} is not UTF-8")))?;
        let full = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry.file_type()?;
        if kind.is_dir() {
            write_record(out, named_record(TAG_DIR, &full)?)?;
            pack_dir(&entry.path(), &full, out, files)?;
        } else if kind.is_file() {
            pack_file(&entry.path(), &full, out)?;
            *files += 1;
        } else {
            return Err(corrupt(format!("{full} is neither a file nor a directory")));
        }
    }
    Ok(())
}

fn pack_file(path: &Path, name: &str, out: &mut impl Write) -> Result<(), ArchiveError> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut record = named_record(TAG_FILE, name)?;
    record.extend_from_slice(&len.to_le_bytes());
    write_record(out, record)?;
    let mut block = vec![0u8; BLOCK];
    let mut offset = 0u64;
    while offset < len {
        let n = (len - offset).min(BLOCK as u64) as usize;
        file.read_exact(&mut block[..n])?;
        if block[..n].iter().any(|&b| b != 0) {
            let mut record = Vec::with_capacity(n + 17);
            record.push(TAG_DATA);
            record.extend_from_slice(&offset.to_le_bytes());
            record.extend_from_slice(&(n as u32).to_le_bytes());
            record.extend_from_slice(&block[..n]);
            write_record(out, record)?;
        }
        offset += n as u64;
    }
    Ok(())
}

/// Writes the archive of `src` to the file `dest`, durably: through `dest`'s name plus `.tmp`,
/// synced, then renamed, and the directory synced.
pub fn pack_to_file(src: &Path, meta: &Meta, dest: &Path) -> Result<u64, ArchiveError> {
    let tmp = tmp_name(dest);
    let written = (|| -> Result<u64, ArchiveError> {
        let mut out = BufWriter::new(File::create(&tmp)?);
        let files = pack(src, meta, &mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, dest)?;
        Ok(files)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp); // else deleted at the next open
    }
    let files = written?;
    sync_parent(dest)?;
    Ok(files)
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Syncs the directory holding `path`, so a rename or creation in it is durable.
pub fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Reads an archive's header: the snapshot meta it carries.
pub fn read_meta(input: &mut impl Read) -> Result<Meta, ArchiveError> {
    let mut fixed = [0u8; 12];
    read_exactly(input, &mut fixed, "header")?;
    if &fixed[..6] != MAGIC {
        return Err(corrupt("not a snapshot archive (bad magic)"));
    }
    let version = u16::from_le_bytes([fixed[6], fixed[7]]);
    if version != ARCHIVE_VERSION {
        return Err(corrupt(format!(
            "archive version {version}; this build reads {ARCHIVE_VERSION}"
        )));
    }
    let meta_len = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    if meta_len > MAX_META {
        return Err(corrupt(format!("meta of {meta_len} bytes")));
    }
    let mut meta = vec![0u8; meta_len as usize];
    read_exactly(input, &mut meta, "meta")?;
    let mut crc = [0u8; 4];
    read_exactly(input, &mut crc, "header checksum")?;
    let mut crc_state = crc32c::crc32c(&fixed);
    crc_state = crc32c::crc32c_append(crc_state, &meta);
    if crc_state != u32::from_le_bytes(crc) {
        return Err(corrupt("header checksum mismatch"));
    }
    decode(&meta, "snapshot meta").map_err(|e| corrupt(e.0))
}

/// Reads the header of the archive in file `path`.
pub fn read_file_meta(path: &Path) -> Result<Meta, ArchiveError> {
    read_meta(&mut BufReader::new(File::open(path)?))
}

fn read_exactly(input: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), ArchiveError> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => corrupt(format!("truncated in its {what}")),
        _ => ArchiveError::Io(e),
    })
}

/// A record's bytes read so far, for its checksum.
struct RecordReader<'a, R: Read> {
    input: &'a mut R,
    bytes: Vec<u8>,
}

impl<R: Read> RecordReader<'_, R> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], ArchiveError> {
        let start = self.bytes.len();
        self.bytes.resize(start + n, 0);
        read_exactly(self.input, &mut self.bytes[start..], what)?;
        Ok(&self.bytes[start..])
    }

    fn u16(&mut self, what: &str) -> Result<u16, ArchiveError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self, what: &str) -> Result<u32, ArchiveError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ArchiveError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }

    fn name(&mut self) -> Result<String, ArchiveError> {
        let len = self.u16("name length")? as usize;
        if len > MAX_NAME {
            return Err(corrupt(format!("name of {len} bytes")));
        }
        let name = String::from_utf8(self.take(len, "name")?.to_vec()).map_err(|_| corrupt("name is not UTF-8"))?;
        check_name(&name)?;
        Ok(name)
    }

    /// Checks the record's trailing checksum (its bytes stay readable).
    fn finish(&mut self) -> Result<(), ArchiveError> {
        let expected = crc32c::crc32c(&self.bytes);
        let mut crc = [0u8; 4];
        read_exactly(self.input, &mut crc, "record checksum")?;
        if u32::from_le_bytes(crc) != expected {
            return Err(corrupt("record checksum mismatch"));
        }
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), ArchiveError> {
    let normal = name
        .split('/')
        .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'));
    if normal {
        Ok(())
    } else {
        Err(corrupt(format!("name {name:?} is not a relative path")))
    }
}

/// The file being written while its data records are read.
struct OpenFile {
    file: File,
    name: String,
    len: u64,
    /// Where the next data record may start.
    next: u64,
}

/// Checks the archive read from `input` whole and writes its files under `dest` (created; it
/// must not exist). Returns the meta of its header. Nothing is synced: the caller keeps the
/// archive, from which the directory can be unpacked again.
pub fn unpack(input: &mut impl Read, dest: &Path) -> Result<Meta, ArchiveError> {
    let meta = read_meta(input)?;
    std::fs::create_dir(dest)?;
    let mut current: Option<OpenFile> = None;
    let mut files = 0u64;
    loop {
        let mut tag = [0u8; 1];
        read_exactly(input, &mut tag, "record tag")?;
        let mut record = RecordReader {
            input,
            bytes: vec![tag[0]],
        };
        match tag[0] {
            TAG_DIR => {
                let name = record.name()?;
                record.finish()?;
                std::fs::create_dir(dest.join(&name))?;
            }
            TAG_FILE => {
                let name = record.name()?;
                let len = record.u64("file length")?;
                record.finish()?;
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dest.join(&name))?;
                file.set_len(len)?;
                files += 1;
                current = Some(OpenFile {
                    file,
                    name,
                    len,
                    next: 0,
                });
            }
            TAG_DATA => {
                let offset = record.u64("data offset")?;
                let len = record.u32("data length")? as usize;
                if len > BLOCK {
                    return Err(corrupt(format!("data record of {len} bytes")));
                }
                let Some(open) = current.as_mut() else {
                    return Err(corrupt("data before any file"));
                };
                let end = offset.checked_add(len as u64);
                if offset < open.next || end.is_none_or(|end| end > open.len) {
                    return Err(corrupt(format!(
                        "data at {offset}+{len} out of order or beyond {} ({} bytes)",
                        open.name, open.len
                    )));
                }
                record.take(len, "data")?;
                record.finish()?;
                let data_start = record.bytes.len() - len;
                open.file.write_all_at(&record.bytes[data_start..], offset)?;
                open.next = offset + len as u64;
            }
            TAG_END => {
                let count = record.u32("file count")?;
                record.finish()?;
                if u64::from(count) != files {
                    return Err(corrupt(format!(
                        "end record counts {count} files, the archive has {files}"
                    )));
                }
                let mut extra = [0u8; 1];
                if input.read(&mut extra)? != 0 {
                    return Err(corrupt("bytes after the end record"));
                }
                return Ok(meta);
            }
            other => return Err(corrupt(format!("unknown record tag {other}"))),
        }
    }
}

/// Unpacks the archive in file `path` under `dest` (see [`unpack`]).
pub fn unpack_file(path: &Path, dest: &Path) -> Result<Meta, ArchiveError> {
    unpack(&mut BufReader::with_capacity(1 << 20, File::open(path)?), dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    fn meta() -> Meta {
        Meta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), 42)),
            last_membership: StoredMembership::default(),
            snapshot_id: "3-1-42-0".into(),
        }
    }

    /// A directory with a nested directory, an empty file, a small file and a sparse file.
    fn sample(dir: &Path) {
        std::fs::create_dir_all(dir.join("data/empty_dir")).unwrap();
        std::fs::write(dir.join("CATALOG"), b"catalog bytes").unwrap();
        std::fs::write(dir.join("data/empty"), b"").unwrap();
        let sparse = File::create(dir.join("data/000001.dat")).unwrap();
        sparse.set_len(10 * BLOCK as u64 + 7).unwrap();
        sparse.write_all_at(b"middle", 3 * BLOCK as u64 + 5).unwrap();
        sparse.write_all_at(b"tail!!!", 10 * BLOCK as u64).unwrap();
    }

    fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let rel = e.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                if e.file_type().unwrap().is_dir() {
                    out.push((rel + "/", Vec::new()));
                    stack.push(e.path());
                } else {
                    out.push((rel, std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_directory_round_trips_and_holes_are_not_stored() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        sample(&src);
        let mut bytes = Vec::new();
        assert_eq!(pack(&src, &meta(), &mut bytes).unwrap(), 3);
        assert!(
            bytes.len() < 2 * BLOCK + 1024,
            "zero blocks are left out: {} bytes",
            bytes.len()
        );
        assert_eq!(read_meta(&mut bytes.as_slice()).unwrap(), meta());
        let dest = tmp.path().join("dest");
        assert_eq!(unpack(&mut bytes.as_slice(), &dest).unwrap(), meta());
        assert_eq!(tree(&dest), tree(&src));

        let file = tmp.path().join("a.snap");
        pack_to_file(&src, &meta(), &file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
        assert_eq!(read_file_meta(&file).unwrap(), meta());
        assert!(!tmp_name(&file).exists());
    }

    #[test]
    fn every_damaged_or_cut_archive_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        sample(&src);
        let mut bytes = Vec::new();
        pack(&src, &meta(), &mut bytes).unwrap();
        let step = (bytes.len() / 97).max(1);
        for (n, at) in (0..bytes.len()).step_by(step).enumerate() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            let dest = tmp.path().join(format!("flip{n}"));
            assert!(unpack(&mut flipped.as_slice(), &dest).is_err(), "flip at {at} accepted");
            let dest = tmp.path().join(format!("cut{n}"));
            assert!(unpack(&mut &bytes[..at], &dest).is_err(), "cut at {at} accepted");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(unpack(&mut longer.as_slice(), &tmp.path().join("longer")).is_err());
    }

    #[test]
    fn names_that_leave_the_target_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/",
            "./a",
            "a/./b",
            "a/.",
            "a\0b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["CATALOG", "data/000001.dat", "a/b/c"] {
            check_name(good).unwrap();
        }
        // A well-formed archive (checksums right) naming a path outside its target.
        let mut bytes = Vec::new();
        let meta_bytes = encode(&meta()).unwrap();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&ARCHIVE_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&meta_bytes);
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let mut record = named_record(TAG_FILE, "../escaped").unwrap();
        record.extend_from_slice(&0u64.to_le_bytes());
        write_record(&mut bytes, record).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let err = unpack(&mut bytes.as_slice(), &tmp.path().join("dest")).unwrap_err();
        assert!(err.to_string().contains("not a relative path"), "{err}");
        assert!(!tmp.path().join("escaped").exists());
    }
}
