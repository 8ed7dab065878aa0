//! Codecs and per-table options: how a sub-table's extents are built at each level, and its
//! encoding in the catalog (see `docs/format.md`, CATALOG v2).
//!
//! Invariants:
//! - A [`TableOptions`] field left `None` follows the database's [`crate::Options`]; a set
//!   field overrides it for that table only, and persists in the catalog with the table.
//! - Every value accepted by [`TableOptions::validate`] (run by `create_table_with` and when
//!   the catalog is read) is one the extent builder takes as is: no clamp, no panic.
//! - The encoding is a list of `(varint tag ‖ varint len ‖ value)` fields in tag order; a
//!   reader skips tags it does not know, so a later field never breaks an older database.

use crate::coding::{get_varint, get_varint32, put_varint};
use crate::error::{Error, Result};
use crate::LEVELS;

/// How data blocks of extents are compressed. A block is stored compressed only if that saves
/// at least 12.5%; the block cache holds blocks uncompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is.
    None,
    /// LZ4 (block format), fast to decompress.
    Lz4,
    /// zstd at `level` (1 ..= 22, or negative for zstd's fast levels down to -7): about 30 %
    /// smaller than LZ4 at level 3, and slower to compress and to decompress.
    Zstd {
        /// zstd compression level.
        level: i32,
    },
}

/// zstd level when a codec is named without one (`"zstd"`), as RocksDB's default.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Default codec per level: LZ4 in L0 and L1 (hot data, decompressed often), zstd level 3 in
/// L2 (most of the data, read least).
pub const DEFAULT_COMPRESSION_PER_LEVEL: [Compression; LEVELS] = [
    Compression::Lz4,
    Compression::Lz4,
    Compression::Zstd {
        level: DEFAULT_ZSTD_LEVEL,
    },
];

/// zstd levels accepted (its fast levels go further down, but gain nothing over LZ4 there).
const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -7..=22;

impl Compression {
    /// Parses `none`, `lz4`, `zstd` or `zstd:LEVEL` (case-insensitive).
    pub fn parse(s: &str) -> Result<Compression> {
        let bad = |why: String| Error::InvalidOption {
            option: "compression",
            reason: why,
        };
        let lower = s.trim().to_ascii_lowercase();
        let c = match lower.as_str() {
            "none" | "no" => Compression::None,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd {
                level: DEFAULT_ZSTD_LEVEL,
            },
            other => match other.strip_prefix("zstd:") {
                Some(level) => Compression::Zstd {
                    level: level
                        .parse()
                        .map_err(|_| bad(format!("zstd level {level:?} is not a number")))?,
                },
                None => return Err(bad(format!("{s:?} is not none, lz4, zstd or zstd:LEVEL"))),
            },
        };
        c.validate("compression")?;
        Ok(c)
    }

    /// Checks the codec's parameters; `option` names the option in the error.
    pub fn validate(&self, option: &'static str) -> Result<()> {
        if let Compression::Zstd { level } = self {
            if !ZSTD_LEVELS.contains(level) {
                return Err(Error::InvalidOption {
                    option,
                    reason: format!(
                        "zstd level {level} is outside {} ..= {}",
                        ZSTD_LEVELS.start(),
                        ZSTD_LEVELS.end()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The codec as [`Self::parse`] reads it (`zstd:3`).
    pub fn name(&self) -> String {
        match self {
            Compression::None => "none".into(),
            Compression::Lz4 => "lz4".into(),
            Compression::Zstd { level } => format!("zstd:{level}"),
        }
    }

    /// Encoding in the catalog: a type byte (0 none, 1 LZ4, 2 zstd) and a zigzag level.
    fn encode(&self, out: &mut Vec<u8>) {
        let (kind, level) = match self {
            Compression::None => (0u64, 0i32),
            Compression::Lz4 => (1, 0),
            Compression::Zstd { level } => (2, *level),
        };
        put_varint(out, kind);
        put_varint(out, zigzag(level));
    }

    fn decode(buf: &[u8], pos: &mut usize) -> Option<Compression> {
        let kind = get_varint(buf, pos)?;
        let level = unzigzag(get_varint(buf, pos)?)?;
        match kind {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd { level }),
            _ => None,
        }
    }
}

fn zigzag(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

fn unzigzag(v: u64) -> Option<i32> {
    let v = u32::try_from(v).ok()?;
    Some(((v >> 1) as i32) ^ -((v & 1) as i32))
}

/// Where a level's extents live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Data files on the local file system ([`crate::Options::fs`]).
    #[default]
    Local = 0,
    /// Objects in [`crate::Options::object_store`].
    Object = 1,
}

impl Tier {
    /// `"local"` or `"object"`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Local => "local",
            Tier::Object => "object",
        }
    }

    /// Parses [`Tier::name`].
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "local" => Some(Tier::Local),
            "object" => Some(Tier::Object),
            _ => None,
        }
    }
}

/// Options of one sub-table, given to [`crate::Db::create_table_with`] and kept in the catalog.
/// A field left `None` follows the database's [`crate::Options`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// Codec per level (L0, L1, L2); see [`crate::Options::compression_per_level`].
    pub compression_per_level: Option<[Compression; LEVELS]>,
    /// Target size of a data block before compression; see [`crate::Options::block_size`].
    pub block_size: Option<usize>,
    /// Bloom filter bits per key; see [`crate::Options::bloom_bits_per_key`].
    pub bloom_bits_per_key: Option<u32>,
    /// Whether the table's reads use the row cache (when the database has one). Default: on.
    pub row_cache: Option<bool>,
    /// Where the table's L2 extents written from now on live; see
    /// [`crate::Options::l2_tier`].
    pub l2_tier: Option<Tier>,
    /// Largest zstd dictionary the table's compactions train (0 = none); see
    /// [`crate::Options::zstd_dictionary_bytes`].
    pub zstd_dictionary_bytes: Option<usize>,
}

/// Smallest zstd dictionary (zstd's trainer needs some room; smaller is not worth a block).
pub(crate) const MIN_ZSTD_DICTIONARY_BYTES: usize = 256;
/// Largest zstd dictionary (one is copied into every extent that uses it).
pub(crate) const MAX_ZSTD_DICTIONARY_BYTES: usize = 64 << 10;

/// Checks a `zstd_dictionary_bytes` value: 0, or within the sizes a dictionary may have.
pub(crate) fn validate_dictionary_bytes(n: usize) -> Result<()> {
    let (min, max) = (MIN_ZSTD_DICTIONARY_BYTES, MAX_ZSTD_DICTIONARY_BYTES);
    if n != 0 && !(min..=max).contains(&n) {
        return Err(Error::InvalidOption {
            option: "zstd_dictionary_bytes",
            reason: format!("{n} is neither 0 nor within {min} ..= {max}"),
        });
    }
    Ok(())
}

// Field tags of the catalog encoding (stable).
const T_COMPRESSION: u64 = 1;
const T_BLOCK_SIZE: u64 = 2;
const T_BLOOM_BITS: u64 = 3;
const T_ROW_CACHE: u64 = 4;
const T_L2_TIER: u64 = 5;
const T_ZSTD_DICTIONARY_BYTES: u64 = 6;

impl TableOptions {
    /// Checks every set field against the same ranges as [`crate::Options::validate`].
    pub fn validate(&self) -> Result<()> {
        if let Some(levels) = &self.compression_per_level {
            for c in levels {
                c.validate("compression_per_level")?;
            }
        }
        if let Some(b) = self.block_size {
            if !(1 << 10..=1 << 20).contains(&b) {
                return Err(Error::InvalidOption {
                    option: "block_size",
                    reason: format!("{b} is outside 1 KiB ..= 1 MiB"),
                });
            }
        }
        if let Some(n) = self.zstd_dictionary_bytes {
            validate_dictionary_bytes(n)?;
        }
        if let Some(bits) = self.bloom_bits_per_key {
            if bits > 32 {
                return Err(Error::InvalidOption {
                    option: "bloom_bits_per_key",
                    reason: format!("{bits} is above 32"),
                });
            }
        }
        Ok(())
    }

    /// True if no field is set (the table follows the database's options entirely).
    pub fn is_default(&self) -> bool {
        *self == TableOptions::default()
    }

    /// One line per set field, `name = value` (for `riptide inspect`); empty if none is set.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(levels) = &self.compression_per_level {
            let names: Vec<String> = levels.iter().map(Compression::name).collect();
            out.push(format!("compression_per_level = {}", names.join(",")));
        }
        if let Some(b) = self.block_size {
            out.push(format!("block_size = {b}"));
        }
        if let Some(b) = self.bloom_bits_per_key {
            out.push(format!("bloom_bits_per_key = {b}"));
        }
        if let Some(r) = self.row_cache {
            out.push(format!("row_cache = {}", if r { "on" } else { "off" }));
        }
        if let Some(t) = self.l2_tier {
            out.push(format!("l2_tier = {}", t.name()));
        }
        if let Some(n) = self.zstd_dictionary_bytes {
            out.push(format!("zstd_dictionary_bytes = {n}"));
        }
        out
    }

    /// The catalog encoding: set fields only, in tag order.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut field = |tag: u64, value: &[u8]| {
            put_varint(&mut out, tag);
            put_varint(&mut out, value.len() as u64);
            out.extend_from_slice(value);
        };
        if let Some(levels) = &self.compression_per_level {
            let mut v = Vec::new();
            for c in levels {
                c.encode(&mut v);
            }
            field(T_COMPRESSION, &v);
        }
        let num = |v: u64| {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            b
        };
        if let Some(b) = self.block_size {
            field(T_BLOCK_SIZE, &num(b as u64));
        }
        if let Some(b) = self.bloom_bits_per_key {
            field(T_BLOOM_BITS, &num(u64::from(b)));
        }
        if let Some(r) = self.row_cache {
            field(T_ROW_CACHE, &num(u64::from(r)));
        }
        if let Some(t) = self.l2_tier {
            field(T_L2_TIER, &num(t as u64));
        }
        if let Some(n) = self.zstd_dictionary_bytes {
            field(T_ZSTD_DICTIONARY_BYTES, &num(n as u64));
        }
        out
    }

    /// Decodes [`Self::encode`]'s bytes; `Err(reason)` on anything malformed or out of range.
    /// Unknown tags are skipped.
    pub(crate) fn decode(buf: &[u8]) -> std::result::Result<TableOptions, String> {
        let mut o = TableOptions::default();
        let mut pos = 0;
        let mut last_tag = 0;
        while pos < buf.len() {
            let tag = get_varint(buf, &mut pos).ok_or("malformed table option tag")?;
            let len = get_varint32(buf, &mut pos).ok_or("malformed table option length")? as usize;
            if tag <= last_tag {
                return Err(format!("table option tag {tag} out of order"));
            }
            last_tag = tag;
            let value = buf
                .get(pos..pos.saturating_add(len))
                .ok_or_else(|| format!("table option {tag} runs past its record"))?;
            pos += len;
            let num = || -> std::result::Result<u64, String> {
                let mut p = 0;
                match get_varint(value, &mut p) {
                    Some(v) if p == value.len() => Ok(v),
                    _ => Err(format!("malformed value of table option {tag}")),
                }
            };
            match tag {
                T_COMPRESSION => {
                    let mut p = 0;
                    let mut levels = [Compression::None; LEVELS];
                    for l in &mut levels {
                        *l = Compression::decode(value, &mut p).ok_or("malformed codec in table options")?;
                    }
                    if p != value.len() {
                        return Err("trailing bytes after the table's codecs".into());
                    }
                    o.compression_per_level = Some(levels);
                }
                T_BLOCK_SIZE => o.block_size = Some(usize::try_from(num()?).map_err(|_| "block size too large")?),
                T_BLOOM_BITS => o.bloom_bits_per_key = Some(u32::try_from(num()?).map_err(|_| "bloom bits too large")?),
                T_ROW_CACHE => {
                    o.row_cache = Some(match num()? {
                        0 => false,
                        1 => true,
                        v => return Err(format!("row cache flag {v}")),
                    })
                }
                T_L2_TIER => {
                    o.l2_tier = Some(match num()? {
                        0 => Tier::Local,
                        1 => Tier::Object,
                        v => return Err(format!("L2 tier {v}")),
                    })
                }
                T_ZSTD_DICTIONARY_BYTES => {
                    o.zstd_dictionary_bytes = Some(usize::try_from(num()?).map_err(|_| "dictionary size too large")?)
                }
                _ => {}
            }
        }
        o.validate().map_err(|e| e.to_string())?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codecs_parse_and_name_round_trip() {
        for s in ["none", "lz4", "zstd:3", "zstd:-7", "zstd:22", "zstd:1"] {
            assert_eq!(Compression::parse(s).unwrap().name(), s);
        }
        assert_eq!(Compression::parse("ZSTD").unwrap(), Compression::Zstd { level: 3 });
        for bad in ["zstd:23", "zstd:-8", "zstd:x", "snappy", ""] {
            assert!(
                matches!(Compression::parse(bad), Err(Error::InvalidOption { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn table_options_round_trip_and_skip_unknown_tags() {
        let all = TableOptions {
            compression_per_level: Some([
                Compression::None,
                Compression::Zstd { level: -3 },
                Compression::Zstd { level: 19 },
            ]),
            block_size: Some(4096),
            bloom_bits_per_key: Some(0),
            row_cache: Some(false),
            l2_tier: Some(Tier::Object),
            zstd_dictionary_bytes: Some(16 << 10),
        };
        for o in [all.clone(), TableOptions::default()] {
            assert_eq!(TableOptions::decode(&o.encode()).unwrap(), o);
        }
        assert!(TableOptions::default().encode().is_empty());
        // A field from a later version (tag 9) is skipped.
        let mut later = all.encode();
        later.extend_from_slice(&[9, 2, 0xAA, 0xBB]);
        assert_eq!(TableOptions::decode(&later).unwrap(), all);
    }

    #[test]
    fn malformed_or_out_of_range_table_options_are_errors() {
        let good = TableOptions {
            block_size: Some(4096),
            row_cache: Some(true),
            ..Default::default()
        }
        .encode();
        for n in 0..good.len() {
            let _ = TableOptions::decode(&good[..n]);
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                let _ = TableOptions::decode(&bad);
            }
        }
        let huge_block = TableOptions {
            block_size: Some(64 << 20),
            ..Default::default()
        }
        .encode();
        assert!(TableOptions::decode(&huge_block).is_err());
        let zstd_99 = TableOptions {
            compression_per_level: Some([Compression::Zstd { level: 99 }; 3]),
            ..Default::default()
        }
        .encode();
        assert!(TableOptions::decode(&zstd_99).is_err());
        // Out-of-order tags.
        let mut swapped = TableOptions {
            bloom_bits_per_key: Some(3),
            ..Default::default()
        }
        .encode();
        swapped.extend_from_slice(&[T_BLOCK_SIZE as u8, 2, 0x80, 0x20]);
        assert!(TableOptions::decode(&swapped).is_err());
    }
}
