//! The table catalog: which sub-tables exist, by id and name, and each one's options.
//!
//! Invariants:
//! - Table ids are never reused: `next_id` only grows, so redo records of a dropped table can
//!   never be replayed into a newer table of the same name.
//! - The `CATALOG` file is replaced atomically (write `CATALOG.tmp`, fsync, rename, fsync the
//!   directory) and checksummed; a damaged catalog fails the open, it is never guessed at.
//! - Table 0 is the default table and always exists.

use crate::coding::{crc_tail_ok, get_u16, get_u32, put_u16, put_u32, seal_crc_tail};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::table_options::TableOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Current catalog format version. Version 2 added each table's options (a u32 length and
/// [`TableOptions`]' encoding after its name); this build reads versions 1 and 2.
pub(crate) const CATALOG_FORMAT_VERSION: u32 = 2;
const CATALOG_MAGIC: &[u8; 8] = b"RPTCATLG";
/// Name of the default table.
pub const DEFAULT_TABLE: &str = "default";
/// Longest table name, in bytes.
pub const MAX_TABLE_NAME: usize = 255;

/// The set of tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Catalog {
    /// `(id, name)`, sorted by id.
    pub(crate) tables: Vec<(u32, String)>,
    pub(crate) next_id: u32,
    /// Options of the tables that set any (by id; absent = all defaults).
    pub(crate) options: BTreeMap<u32, TableOptions>,
}

/// The temporary file a new `CATALOG` is written to before its rename.
pub(crate) fn catalog_tmp_path(db: &Path) -> PathBuf {
    db.join("CATALOG.tmp")
}

pub(crate) fn catalog_path(db: &Path) -> PathBuf {
    db.join("CATALOG")
}

impl Catalog {
    /// A fresh catalog with only the default table.
    pub(crate) fn new() -> Self {
        Catalog {
            tables: vec![(0, DEFAULT_TABLE.to_string())],
            next_id: 1,
            options: BTreeMap::new(),
        }
    }

    /// This catalog with `next_id` raised to at least `next_id`.
    pub(crate) fn with_next_id(mut self, next_id: u32) -> Self {
        self.next_id = self.next_id.max(next_id);
        self
    }

    /// The options of table `id` (defaults if it set none).
    pub(crate) fn options_of(&self, id: u32) -> TableOptions {
        self.options.get(&id).cloned().unwrap_or_default()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(CATALOG_MAGIC);
        put_u32(&mut out, CATALOG_FORMAT_VERSION);
        put_u32(&mut out, self.tables.len() as u32);
        put_u32(&mut out, self.next_id);
        for (id, name) in &self.tables {
            put_u32(&mut out, *id);
            put_u16(&mut out, name.len() as u16);
            out.extend_from_slice(name.as_bytes());
            let opts = self.options.get(id).map(TableOptions::encode).unwrap_or_default();
            put_u32(&mut out, opts.len() as u32);
            out.extend_from_slice(&opts);
        }
        put_u32(&mut out, 0);
        seal_crc_tail(&mut out);
        out
    }

    pub(crate) fn decode(path: &Path, data: &[u8]) -> Result<Self> {
        let bad = |off: usize, why: &str| Error::corruption(path, off as u64, why.to_string());
        if data.len() < 24 {
            return Err(bad(0, "catalog shorter than its header"));
        }
        let body = &data[..data.len() - 4];
        if !crc_tail_ok(data) {
            return Err(bad(body.len(), "catalog checksum mismatch"));
        }
        if &body[..8] != CATALOG_MAGIC {
            return Err(bad(0, "bad catalog magic"));
        }
        let u32_at = |off: usize| get_u32(body, off).ok_or_else(|| bad(off, "truncated catalog"));
        let version = u32_at(8)?;
        if version > CATALOG_FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: version,
                supported: CATALOG_FORMAT_VERSION,
            });
        }
        if version == 0 {
            return Err(bad(8, "catalog format version 0"));
        }
        let count = u32_at(12)? as usize;
        let next_id = u32_at(16)?;
        let mut off = 20;
        let mut tables = Vec::with_capacity(count.min(1 << 16));
        let mut options = BTreeMap::new();
        for _ in 0..count {
            let id = u32_at(off)?;
            let len = get_u16(body, off + 4).ok_or_else(|| bad(off, "truncated catalog"))? as usize;
            let name = body
                .get(off + 6..off + 6 + len)
                .ok_or_else(|| bad(off, "truncated catalog"))?;
            let name = String::from_utf8(name.to_vec()).map_err(|_| bad(off, "table name is not UTF-8"))?;
            // Writers keep the entries sorted by id, ids unique and names unique, non-empty
            // and at most MAX_TABLE_NAME bytes: anything else would open two tables as one.
            if tables.last().is_some_and(|(prev, _): &(u32, String)| *prev >= id) {
                return Err(bad(off, "table ids are not strictly increasing"));
            }
            if name.is_empty() || name.len() > MAX_TABLE_NAME || tables.iter().any(|(_, n)| *n == name) {
                return Err(bad(off, "empty, overlong or duplicate table name"));
            }
            tables.push((id, name));
            off += 6 + len;
            if version >= 2 {
                let olen = u32_at(off)? as usize;
                let bytes = body
                    .get(off + 4..(off + 4).saturating_add(olen))
                    .ok_or_else(|| bad(off, "truncated table options"))?;
                let o = TableOptions::decode(bytes).map_err(|why| bad(off, &format!("table {id}: {why}")))?;
                if !o.is_default() {
                    options.insert(id, o);
                }
                off += 4 + olen;
            }
        }
        if off != body.len() {
            return Err(bad(off, "trailing bytes in catalog"));
        }
        if !tables.iter().any(|(id, name)| *id == 0 && name == DEFAULT_TABLE) {
            return Err(bad(20, "the default table is missing"));
        }
        if tables.iter().any(|(id, _)| *id >= next_id) {
            return Err(bad(16, "a table id is not below the next table id"));
        }
        Ok(Catalog {
            tables,
            next_id,
            options,
        })
    }

    /// Reads the catalog of the database at `db`; `None` if there is none.
    pub(crate) fn load(fs: &dyn FileSystem, db: &Path) -> Result<Option<Self>> {
        let path = catalog_path(db);
        if !fs.exists(&path) {
            return Ok(None);
        }
        let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let data = file.read_all().map_err(|e| Error::io("read", &path, e))?;
        Self::decode(&path, &data).map(Some)
    }

    /// Durably replaces the catalog of the database at `db`.
    pub(crate) fn store(&self, fs: &dyn FileSystem, db: &Path) -> Result<()> {
        let path = catalog_path(db);
        let tmp = catalog_tmp_path(db);
        let mut file = fs.create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        file.append(&self.encode()).map_err(|e| Error::io("write", &tmp, e))?;
        file.sync_data().map_err(|e| Error::io("fsync", &tmp, e))?;
        drop(file);
        fs.rename(&tmp, &path).map_err(|e| Error::io("rename", &tmp, e))?;
        fs.sync_dir(db).map_err(|e| Error::io("fsync dir", db, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_without_the_default_table_is_corrupt() {
        let c = Catalog {
            tables: vec![(1, "t".into())],
            next_id: 2,
            options: BTreeMap::new(),
        };
        assert!(Catalog::decode(Path::new("CATALOG"), &c.encode())
            .unwrap_err()
            .is_corruption());
        let reused = Catalog {
            tables: vec![(0, DEFAULT_TABLE.into()), (5, "t".into())],
            next_id: 3,
            options: BTreeMap::new(),
        };
        assert!(Catalog::decode(Path::new("CATALOG"), &reused.encode())
            .unwrap_err()
            .is_corruption());
    }

    /// Found by the `small_file` fuzz target (catalog, with fixed CRC): a checksummed catalog
    /// of version 0, or with duplicate or unsorted ids or duplicate names, was accepted.
    #[test]
    fn impossible_catalogs_with_valid_checksums_are_corrupt() {
        let p = Path::new("CATALOG");
        let mut v0 = Catalog::new().encode();
        v0[8..12].copy_from_slice(&0u32.to_le_bytes());
        crate::coding::seal_crc_tail(&mut v0);
        assert!(Catalog::decode(p, &v0).unwrap_err().is_corruption());
        for tables in [
            vec![(0, DEFAULT_TABLE.into()), (2, "a".into()), (2, "b".into())],
            vec![(0, DEFAULT_TABLE.into()), (3, "a".into()), (2, "b".into())],
            vec![(0, DEFAULT_TABLE.into()), (1, "a".into()), (2, "a".into())],
            vec![(0, DEFAULT_TABLE.into()), (1, String::new())],
            vec![(0, DEFAULT_TABLE.into()), (1, "x".repeat(MAX_TABLE_NAME + 1))],
        ] {
            let c = Catalog {
                tables,
                next_id: 9,
                options: BTreeMap::new(),
            };
            assert!(Catalog::decode(p, &c.encode()).unwrap_err().is_corruption(), "{c:?}");
        }
    }

    #[test]
    fn round_trips_and_rejects_every_flipped_byte() {
        let mut c = Catalog::new();
        c.tables.push((3, "orders".into()));
        c.tables.push((7, "ÿ-utf8".into()));
        c.next_id = 8;
        c.options.insert(
            7,
            TableOptions {
                block_size: Some(4096),
                compression_per_level: Some([crate::Compression::Zstd { level: 9 }; 3]),
                ..Default::default()
            },
        );
        let enc = c.encode();
        let p = Path::new("CATALOG");
        assert_eq!(Catalog::decode(p, &enc).unwrap(), c);
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x01;
            assert!(Catalog::decode(p, &bad).unwrap_err().is_corruption(), "byte {i}");
        }
        assert!(Catalog::decode(p, &enc[..10]).unwrap_err().is_corruption());
    }

    /// Catalogs written before table options (version 1) still open, every table with
    /// default options.
    #[test]
    fn version_1_catalogs_open_with_default_options() {
        let mut v1 = Vec::new();
        v1.extend_from_slice(CATALOG_MAGIC);
        put_u32(&mut v1, 1);
        put_u32(&mut v1, 2);
        put_u32(&mut v1, 5);
        for (id, name) in [(0u32, DEFAULT_TABLE), (4, "users")] {
            put_u32(&mut v1, id);
            put_u16(&mut v1, name.len() as u16);
            v1.extend_from_slice(name.as_bytes());
        }
        put_u32(&mut v1, 0);
        seal_crc_tail(&mut v1);
        let c = Catalog::decode(Path::new("CATALOG"), &v1).unwrap();
        assert_eq!(c.tables, vec![(0, DEFAULT_TABLE.to_string()), (4, "users".to_string())]);
        assert!(c.options.is_empty());
        assert_eq!(c.options_of(4), TableOptions::default());
    }
}
