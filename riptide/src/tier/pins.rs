//! Checkpoint pins: the object-tier extents that checkpoints of a database name, kept in
//! `<db>/PINS` so the database never deletes an object a checkpoint can still read.
//!
//! A checkpoint ([`crate::Db::checkpoint`]) copies local extents but only names object-tier
//! extents; once the live database's own metadata drops such an extent, the pin is what keeps
//! the object. [`crate::Db::release_checkpoint`] removes a checkpoint's pin, and the objects
//! no metadata and no other pin names become orphans, reclaimed after the grace period.
//!
//! Invariants:
//! - The file is replaced atomically (temporary file, fdatasync, rename, directory fsync) and
//!   checksummed; a damaged file is [`Error::Corruption`], a missing one means no pins.
//! - A checkpoint's pin is durable before the checkpoint's own `CATALOG` is written, so a
//!   complete checkpoint is always pinned; a pin whose checkpoint was cut short only keeps
//!   objects longer, until released.
//!
//! Format (pins v1, little-endian): `"RPTPINS\0"` ‖ version u32 (1) ‖ entry count u32 ‖
//! entries ‖ masked CRC32C of everything before it (u32). An entry: path length u32 ‖ the
//! checkpoint's path (UTF-8) ‖ id count u32 ‖ that many extent ids (u64, bit 63 set).

use crate::coding::{crc_tail_ok, seal_crc_tail};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// The pins file in the database directory.
pub(crate) const PINS_FILE: &str = "PINS";
const MAGIC: &[u8; 8] = b"RPTPINS\0";
const VERSION: u32 = 1;

/// Checkpoint path -> the object-tier extent ids it names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pins {
    pub(crate) entries: BTreeMap<String, Vec<u64>>,
}

impl Pins {
    /// Every pinned id.
    pub(crate) fn ids(&self) -> HashSet<u64> {
        self.entries.values().flatten().copied().collect()
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (path, ids) in &self.entries {
            b.extend_from_slice(&(path.len() as u32).to_le_bytes());
            b.extend_from_slice(path.as_bytes());
            b.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for id in ids {
                b.extend_from_slice(&id.to_le_bytes());
            }
        }
        b.extend_from_slice(&[0; 4]);
        seal_crc_tail(&mut b);
        b
    }

    fn decode(path: &Path, b: &[u8]) -> Result<Pins> {
        let bad = |reason: &str| Error::corruption(path, 0, reason);
        if b.len() < 20 || &b[..8] != MAGIC || !crc_tail_ok(b) {
            return Err(bad("damaged checkpoint pins"));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version > VERSION {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: version,
                supported: VERSION,
            });
        }
        let body = &b[..b.len() - 4];
        let mut pos = 12;
        let u32_at = |pos: &mut usize| -> Result<u32> {
            let v = body
                .get(*pos..*pos + 4)
                .ok_or_else(|| bad("checkpoint pins end early"))?;
            *pos += 4;
            Ok(u32::from_le_bytes(v.try_into().expect("4 bytes")))
        };
        let count = u32_at(&mut pos)?;
        let mut entries = BTreeMap::new();
        for _ in 0..count {
            let len = u32_at(&mut pos)? as usize;
            let name = body
                .get(pos..pos + len)
                .and_then(|s| std::str::from_utf8(s).ok())
                .ok_or_else(|| bad("bad checkpoint path in pins"))?;
            pos += len;
            let n = u32_at(&mut pos)? as usize;
            let raw = body
                .get(pos..pos + n * 8)
                .ok_or_else(|| bad("checkpoint pins end early"))?;
            pos += n * 8;
            let ids = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            entries.insert(name.to_string(), ids);
        }
        if pos != body.len() {
            return Err(bad("trailing bytes in checkpoint pins"));
        }
        Ok(Pins { entries })
    }

    /// The pins of the database at `db` (none if it has no `PINS` file).
    pub(crate) fn load(fs: &dyn FileSystem, db: &Path) -> Result<Pins> {
        let path = db.join(PINS_FILE);
        if !fs.exists(&path) {
            return Ok(Pins::default());
        }
        let f = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let bytes = f.read_all().map_err(|e| Error::io("read", &path, e))?;
        Self::decode(&path, &bytes)
    }

    /// Durably replaces the pins of the database at `db`.
    pub(crate) fn store(&self, fs: &dyn FileSystem, db: &Path) -> Result<()> {
        let path = db.join(PINS_FILE);
        let tmp = db.join(format!("{PINS_FILE}.tmp"));
        let written = (|| {
            let mut f = fs.create(&tmp)?;
            f.append(&self.encode())?;
            f.sync_data()?;
            drop(f);
            fs.rename(&tmp, &path)?;
            fs.sync_dir(db)
        })();
        written.map_err(|e| Error::io("write", &path, e))
    }
}

/// What the object tier knows of the pins: the pinned extents, and those of them that fell
/// due for deletion while pinned (kept: deleted once no pin names them).
#[derive(Debug, Default)]
pub(crate) struct PinSet {
    pinned: HashSet<u64>,
    kept: HashSet<u64>,
}

impl PinSet {
    /// Replaces the pinned set; returns the kept extents no pin names any more.
    pub(crate) fn replace(&mut self, ids: HashSet<u64>) -> Vec<u64> {
        let released: Vec<u64> = self.kept.iter().filter(|id| !ids.contains(id)).copied().collect();
        for id in &released {
            self.kept.remove(id);
        }
        self.pinned = ids;
        released
    }

    /// True (and `id` is remembered as kept) if a pin names `id`.
    pub(crate) fn keep_if_pinned(&mut self, id: u64) -> bool {
        let pinned = self.pinned.contains(&id);
        if pinned {
            self.kept.insert(id);
        }
        pinned
    }

    /// True if a pin names `id`.
    pub(crate) fn is_pinned(&self, id: u64) -> bool {
        self.pinned.contains(&id)
    }

    /// Number of pinned extents.
    pub(crate) fn len(&self) -> usize {
        self.pinned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FaultFs;

    #[test]
    fn pins_round_trip_and_every_damage_is_detected() {
        let fs = FaultFs::new();
        let db = Path::new("/db");
        fs.create_dir_all(db).unwrap();
        assert_eq!(Pins::load(&fs, db).unwrap(), Pins::default());
        let mut pins = Pins::default();
        pins.entries.insert("/backups/a".into(), vec![1 << 63 | 5, 1 << 63 | 9]);
        pins.entries.insert("/backups/b".into(), vec![]);
        pins.store(&fs, db).unwrap();
        assert_eq!(Pins::load(&fs, db).unwrap(), pins);
        assert_eq!(pins.ids().len(), 2);
        let good = fs.read_file(&db.join(PINS_FILE)).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            fs.write_file(&db.join(PINS_FILE), bad);
            assert!(Pins::load(&fs, db).is_err(), "flip at {i} not detected");
        }
        fs.write_file(&db.join(PINS_FILE), good[..good.len() - 1].to_vec());
        assert!(Pins::load(&fs, db).is_err());
    }
}
