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

impl Manifest {
    /// Checks what the checksum cannot (a manifest may be written by hand): that it is backup
    /// `id`'s, and that every extent fits where it goes: at least one slot, its bytes within
    /// them, a local extent past its data file's header slot, inside the file's length, and
    /// overlapping no other extent.
    pub(crate) fn check(&self, name: &str, id: u64) -> Result<()> {
        let bad = |reason: String| Error::corruption(name, 0, format!("backup manifest: {reason}"));
        if self.id != id {
            return Err(bad(format!("it is backup {}'s, not {id}'s", self.id)));
        }
        let footer = crate::extent::FOOTER_SIZE as u64;
        let slot_size = crate::space::EXTENT_SIZE;
        let lens: std::collections::HashMap<u32, u64> = self.data_files.iter().copied().collect();
        let mut local: Vec<(u32, u64, u64)> = Vec::new();
        for e in &self.extents {
            let span = u64::from(e.slots).checked_mul(slot_size);
            let fits = e
                .data_size
                .checked_add(footer)
                .zip(span)
                .is_some_and(|(need, span)| need <= span);
            if e.slots == 0 || !fits {
                return Err(bad(format!("extent {:016x} does not fit its {} slots", e.id, e.slots)));
            }
            let ext = crate::space::ExtentId(e.id);
            if ext.is_object() {
                continue;
            }
            let start = u64::from(ext.slot()) * slot_size;
            let end = start + u64::from(e.slots) * slot_size;
            let len = lens.get(&ext.file()).copied();
            if ext.slot() == 0 || len.is_none_or(|len| end > len) {
                return Err(bad(format!("extent {:016x} lies outside its data file", e.id)));
            }
            local.push((ext.file(), start, end));
        }
        local.sort_unstable();
        if local.windows(2).any(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2) {
            return Err(bad("two extents overlap".into()));
        }
        Ok(())
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
    fn manifests_naming_impossible_places_are_refused() {
        let m = sample();
        m.check("m", 7).unwrap();
        assert!(m.check("m", 8).is_err(), "another backup's manifest");
        let with = |f: &dyn Fn(&mut Manifest)| {
            let mut m = sample();
            f(&mut m);
            m.check("m", 7)
        };
        assert!(with(&|m| m.extents[0].slots = 0).is_err());
        assert!(with(&|m| m.extents[0].data_size = u64::MAX).is_err());
        assert!(
            with(&|m| m.extents[0].data_size = 2 << 20).is_err(),
            "no room for the footer"
        );
        assert!(with(&|m| m.extents[0].id = 1 << 32).is_err(), "slot 0 is the header");
        assert!(
            with(&|m| m.extents[0].id = 1 << 32 | 4).is_err(),
            "past the file's length"
        );
        assert!(with(&|m| m.extents[0].id = 2 << 32 | 1).is_err(), "no such data file");
        assert!(
            with(&|m| {
                let mut e = m.extents[0].clone();
                e.key = "f".repeat(32);
                e.slots = 2;
                e.id = 1 << 32 | 2;
                m.extents.push(e);
            })
            .is_err(),
            "overlap"
        );
        with(&|m| m.extents[0].id = 1 << 63 | 12345).unwrap();
    }

    #[test]
    fn paths_that_leave_the_directory_are_refused() {
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            assert!(check_path(bad).is_none(), "{bad}");
        }
        assert_eq!(check_path("redo/000001.log").as_deref(), Some("redo/000001.log"));
    }
}
