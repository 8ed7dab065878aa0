//! The manifest of one backup (backup manifest v1): which small files and which extents make
//! up the database it restores. A text file, one item per line, so an operator can read it;
//! its last line is a checksum of every byte before it.
//!
//! ```text
//! riptide-backup 1
//! id 3
//! file CATALOG 412 1a2b3c4d                 path, size, masked CRC32C (hex)
//! file meta/CHECKPOINT-000002 9120 5e6f7a8b
//! datafile 1 14680064                       data file number, its length (slots are holes)
//! extent 0000000100000003 1 1834512 9f...   extent id (hex), slots, valid bytes, content key
//! end 3c4d5e6f                              masked CRC32C of everything above
//! ```
//!
//! A file's bytes are the object `backups/<id>/files/<path>`; a data file's line names its
//! header, stored as the file `data/<number>.dat`. An extent's bytes (`valid ‖ footer`) are the
//! object `extents/<key>`, where the key is the XXH3-128 of those bytes: a backup uploads only
//! the extents no earlier backup uploaded.

use crate::coding::masked_crc32c;
use crate::error::{Error, Result};

/// The version this build writes and the newest it reads.
pub(crate) const MANIFEST_VERSION: u32 = 1;
const HEADER: &str = "riptide-backup";

/// A small file of the backed-up database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileEntry {
    /// Relative to the database directory, `/`-separated.
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) crc: u32,
}

/// An extent of the backed-up database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExtentEntry {
    pub(crate) id: u64,
    pub(crate) slots: u32,
    pub(crate) data_size: u64,
    /// 32 hex digits: the XXH3-128 of `valid ‖ footer`.
    pub(crate) key: String,
}

/// One backup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) id: u64,
    pub(crate) files: Vec<FileEntry>,
    /// Data file number -> length.
    pub(crate) data_files: Vec<(u32, u64)>,
    pub(crate) extents: Vec<ExtentEntry>,
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut s = format!("{HEADER} {MANIFEST_VERSION}\nid {}\n", self.id);
        for f in &self.files {
            s += &format!("file {} {} {:08x}\n", f.path, f.size, f.crc);
        }
        for (n, len) in &self.data_files {
            s += &format!("datafile {n} {len}\n");
        }
        for e in &self.extents {
            s += &format!("extent {:016x} {} {} {}\n", e.id, e.slots, e.data_size, e.key);
        }
        let crc = masked_crc32c(s.as_bytes());
        s += &format!("end {crc:08x}\n");
        s.into_bytes()
    }

    /// Parses a manifest; `name` is the object it came from, for errors.
    pub(crate) fn decode(name: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad =
            |line: usize, reason: &str| Error::corruption(name, line as u64, format!("backup manifest: {reason}"));
        let text = std::str::from_utf8(bytes).map_err(|_| bad(0, "not UTF-8"))?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad(0, "too short"))?;
        let (body, last) = text.split_at(body_end);
        let crc = last
            .strip_prefix("end ")
            .and_then(|c| u32::from_str_radix(c.trim_end(), 16).ok())
            .ok_or_else(|| bad(0, "no end line"))?;
        if crc != masked_crc32c(body.as_bytes()) || !last.ends_with('\n') {
            return Err(bad(0, "checksum mismatch"));
        }
        let mut m = Manifest::default();
        for (i, line) in body.lines().enumerate() {
            let w: Vec<&str> = line.split(' ').collect();
            let num = |s: &str| s.parse::<u64>().map_err(|_| bad(i, "bad number"));
            let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad(i, "bad hex number"));
            match w.as_slice() {
                [HEADER, v] if i == 0 => {
                    let v = num(v)?;
                    if v > u64::from(MANIFEST_VERSION) {
                        return Err(Error::UnsupportedFormat {
                            path: name.into(),
                            found: v as u32,
                            supported: MANIFEST_VERSION,
                        });
                    }
                }
                _ if i == 0 => return Err(bad(i, "not a backup manifest")),
                ["id", id] => m.id = num(id)?,
                ["file", path, size, crc] => m.files.push(FileEntry {
                    path: check_path(path).ok_or_else(|| bad(i, "bad file path"))?,
                    size: num(size)?,
                    crc: u32::try_from(hex(crc)?).map_err(|_| bad(i, "bad checksum"))?,
                }),
                ["datafile", n, len] => m
                    .data_files
                    .push((u32::try_from(num(n)?).map_err(|_| bad(i, "bad data file"))?, num(len)?)),
                ["extent", id, slots, size, key] if key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    m.extents.push(ExtentEntry {
                        id: hex(id)?,
                        slots: u32::try_from(num(slots)?).map_err(|_| bad(i, "bad slot count"))?,
                        data_size: num(size)?,
                        key: key.to_string(),
                    })
                }
                _ => return Err(bad(i, "unknown line")),
            }
        }
        Ok(m)
    }
}

/// `path` if it is a relative path of plain components (no `..`, no empty part).
fn check_path(path: &str) -> Option<String> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
    ok.then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            id: 7,
            files: vec![FileEntry {
                path: "meta/CURRENT".into(),
                size: 36,
                crc: 0xdead_beef,
            }],
            data_files: vec![(1, 8 << 20)],
            extents: vec![ExtentEntry {
                id: 1 << 32 | 3,
                slots: 1,
                data_size: 12345,
                key: "0123456789abcdef0123456789abcdef".into(),
            }],
        }
    }

    #[test]
    fn manifests_round_trip_and_damage_is_corruption() {
        let m = sample();
        let bytes = m.encode();
        assert_eq!(Manifest::decode("m", &bytes).unwrap(), m);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(Manifest::decode("m", &bad).is_err(), "flip at {i} undetected");
        }
        assert!(Manifest::decode("m", &bytes[..bytes.len() - 2]).is_err());
        assert!(Manifest::decode("m", b"").is_err());
    }

    #[test]
    fn paths_that_leave_the_directory_are_refused() {
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            assert!(check_path(bad).is_none(), "{bad}");
        }
        assert_eq!(check_path("redo/000001.log").as_deref(), Some("redo/000001.log"));
    }
}
