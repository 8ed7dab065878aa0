//! Encodings of the extent's fixed structures: block trailer, footer, index entries and the
//! properties block (see `docs/format.md`).
//!
//! Invariants:
//! - Every decoder takes arbitrary bytes and returns `Err(reason)` (turned into
//!   `Error::Corruption` by the reader, which knows the path and offset) instead of panicking.
//! - Index entries and properties are self-delimiting; a decoder never trusts a length beyond
//!   its buffer and rejects trailing bytes.

use crate::coding::{get_u32, get_u64, get_varint, get_varint32, mask_crc, put_varint, unmask_crc, varint_len};
use crate::key::Lsn;

/// Format version of extents written by this build (footer and properties). Version 2 added
/// region checksums to data blocks (a flag in each block's footer says whether a block has
/// them); version 3 added each block's user-key count and raw sizes to its index entry and
/// replaced the extent-wide bloom filter by one filter per data block (filter kind 2), so a
/// compaction copies a block, its index entry and its filter lines without decoding it; version
/// 4 added zstd data blocks (trailer type 2) and the properties' codec tag (17); version 5
/// added a zstd dictionary block after the filter (properties tag 18 locates it) and data
/// blocks compressed with it (trailer type 3); version 6 added zstd data blocks stored as a
/// key stream and a value stream (trailer type 4). This build reads versions 1 to 6.
pub(crate) const EXTENT_FORMAT_VERSION: u32 = 6;
/// First format version that may hold a dictionary block.
pub(crate) const DICTIONARY_VERSION: u32 = 5;
/// First format version whose index entries carry `users`, `key_bytes` and `value_bytes` and
/// whose filter (if any) is per block.
pub(crate) const BLOCK_STATS_VERSION: u32 = 3;
/// Oldest extent format version this build reads.
pub(crate) const MIN_EXTENT_FORMAT_VERSION: u32 = 1;

/// Footer magic: the bytes `RPTEXTNT` read as a little-endian u64.
pub(crate) const EXTENT_MAGIC: u64 = u64::from_le_bytes(*b"RPTEXTNT");

/// Size of the footer at the very end of an extent.
pub(crate) const FOOTER_SIZE: usize = 64;

/// Size of a block trailer: compression type u8 ‖ masked CRC32C u32.
pub(crate) const TRAILER_SIZE: usize = 5;

/// Masked CRC32C of `contents ‖ type`, as stored in a trailer.
#[inline]
pub(crate) fn block_crc(contents: &[u8], ctype: u8) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(contents), &[ctype]))
}

/// The trailer of a block.
pub(crate) fn trailer(contents: &[u8], ctype: u8) -> [u8; TRAILER_SIZE] {
    let crc = block_crc(contents, ctype).to_le_bytes();
    [ctype, crc[0], crc[1], crc[2], crc[3]]
}

/// Verifies a stored block (`contents ‖ trailer`) and returns (contents, type byte).
pub(crate) fn check_block(stored: &[u8]) -> Result<(&[u8], u8), String> {
    let Some(n) = stored.len().checked_sub(TRAILER_SIZE) else {
        return Err(format!("block of {} bytes is shorter than its trailer", stored.len()));
    };
    let (contents, t) = stored.split_at(n);
    let ctype = t[0];
    let stored_crc = get_u32(t, 1).unwrap_or(0);
    let actual = block_crc(contents, ctype);
    if actual != stored_crc {
        return Err(format!(
            "block checksum mismatch (stored {:#010x}, computed {:#010x})",
            unmask_crc(stored_crc),
            unmask_crc(actual)
        ));
    }
    Ok((contents, ctype))
}

/// Location of a block inside an extent: offset relative to the extent start and size of the
/// contents (without trailer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Handle {
    pub offset: u64,
    pub size: u32,
}

impl Handle {
    /// Offset just past the block's trailer.
    pub(crate) fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.size) + TRAILER_SIZE as u64)
    }
}

/// The decoded footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Footer {
    pub version: u32,
    pub slots: u32,
    /// Bytes written at the extent start (data, index, filter, properties, with trailers).
    pub valid_size: u64,
    pub index: Handle,
    /// `size == 0`: no filter block (and no trailer for it).
    pub filter: Handle,
    pub props: Handle,
}

/// Why a footer did not decode.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FooterError {
    Magic(u64),
    Checksum,
    Version(u32),
}

impl Footer {
    pub(crate) fn encode(&self) -> [u8; FOOTER_SIZE] {
        let mut f = [0u8; FOOTER_SIZE];
        f[0..8].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
        f[8..12].copy_from_slice(&self.version.to_le_bytes());
        f[12..16].copy_from_slice(&self.slots.to_le_bytes());
        f[16..24].copy_from_slice(&self.valid_size.to_le_bytes());
        for (i, h) in [self.index, self.filter, self.props].iter().enumerate() {
            let at = 24 + 12 * i;
            f[at..at + 8].copy_from_slice(&h.offset.to_le_bytes());
            f[at + 8..at + 12].copy_from_slice(&h.size.to_le_bytes());
        }
        let crc = mask_crc(crc32c::crc32c(&f[..60]));
        f[60..64].copy_from_slice(&crc.to_le_bytes());
        f
    }

    /// Decodes a footer: magic, then CRC, then version (a footer with a valid CRC but a newer
    /// version is reported as such, not as damage).
    pub(crate) fn decode(f: &[u8]) -> Result<Footer, FooterError> {
        let magic = get_u64(f, 0).ok_or(FooterError::Checksum)?;
        if f.len() != FOOTER_SIZE {
            return Err(FooterError::Checksum);
        }
        if magic != EXTENT_MAGIC {
            return Err(FooterError::Magic(magic));
        }
        let stored = get_u32(f, 60).ok_or(FooterError::Checksum)?;
        if unmask_crc(stored) != crc32c::crc32c(&f[..60]) {
            return Err(FooterError::Checksum);
        }
        let r32 = |at| get_u32(f, at).unwrap_or(0);
        let r64 = |at| get_u64(f, at).unwrap_or(0);
        let version = r32(8);
        if !(MIN_EXTENT_FORMAT_VERSION..=EXTENT_FORMAT_VERSION).contains(&version) {
            return Err(FooterError::Version(version));
        }
        let h = |i: usize| Handle {
            offset: r64(24 + 12 * i),
            size: r32(32 + 12 * i),
        };
        Ok(Footer {
            version,
            slots: r32(12),
            valid_size: r64(16),
            index: h(0),
            filter: h(1),
            props: h(2),
        })
    }
}

/// One index entry: everything known about a data block without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// First internal key in the block.
    pub first_key: Vec<u8>,
    /// Last internal key in the block.
    pub last_key: Vec<u8>,
    /// Offset of the block relative to the extent start.
    pub offset: u64,
    /// Stored size of the block's contents (compressed if so), without the trailer.
    pub size: u32,
    /// Entries in the block.
    pub rows: u32,
    /// Entries of kind Delete.
    pub deletes: u32,
    /// Smallest LSN in the block.
    pub min_lsn: Lsn,
    /// Largest LSN in the block.
    pub max_lsn: Lsn,
    /// Distinct user keys in the block, counting one that continues from the previous block
    /// (= keys in the block's filter). 0 in extents older than [`BLOCK_STATS_VERSION`].
    pub users: u32,
    /// Sum of the block's internal-key lengths (0 in older extents).
    pub key_bytes: u32,
    /// Sum of the block's value lengths (0 in older extents).
    pub value_bytes: u32,
}

impl IndexEntry {
    /// Bytes the block occupies in the extent, trailer included.
    pub(crate) fn stored_size(&self) -> u64 {
        u64::from(self.size) + TRAILER_SIZE as u64
    }

    /// Upper bound of the encoded size of an entry with these key lengths (any version).
    pub(crate) fn encoded_len_bound(first_len: usize, last_len: usize) -> usize {
        first_len + last_len + 5 * 3 + 10 + 5 * 3 + 10 * 2 + 5 * 3
    }

    /// Appends the encoding for extent format `version`:
    /// `varint first_len ‖ first ‖ varint shared ‖ varint suffix_len ‖ last[shared..] ‖
    ///  varint offset ‖ varint size ‖ varint rows ‖ varint deletes ‖ varint min_lsn ‖
    ///  varint (max_lsn - min_lsn)`, then from version 3 on
    ///  `‖ varint users ‖ varint key_bytes ‖ varint value_bytes`.
    pub(crate) fn encode_to(&self, out: &mut Vec<u8>, version: u32) {
        let shared = super::block::common_prefix(&self.first_key, &self.last_key);
        put_varint(out, self.first_key.len() as u64);
        out.extend_from_slice(&self.first_key);
        put_varint(out, shared as u64);
        put_varint(out, (self.last_key.len() - shared) as u64);
        out.extend_from_slice(&self.last_key[shared..]);
        put_varint(out, self.offset);
        put_varint(out, u64::from(self.size));
        put_varint(out, u64::from(self.rows));
        put_varint(out, u64::from(self.deletes));
        put_varint(out, self.min_lsn);
        put_varint(out, self.max_lsn.wrapping_sub(self.min_lsn));
        if version >= BLOCK_STATS_VERSION {
            put_varint(out, u64::from(self.users));
            put_varint(out, u64::from(self.key_bytes));
            put_varint(out, u64::from(self.value_bytes));
        }
    }

    /// Exact encoded size for extent format `version`.
    pub(crate) fn encoded_len(&self, version: u32) -> usize {
        let shared = super::block::common_prefix(&self.first_key, &self.last_key);
        varint_len(self.first_key.len() as u64)
            + self.first_key.len()
            + varint_len(shared as u64)
            + varint_len((self.last_key.len() - shared) as u64)
            + (self.last_key.len() - shared)
            + varint_len(self.offset)
            + varint_len(u64::from(self.size))
            + varint_len(u64::from(self.rows))
            + varint_len(u64::from(self.deletes))
            + varint_len(self.min_lsn)
            + varint_len(self.max_lsn.wrapping_sub(self.min_lsn))
            + if version >= BLOCK_STATS_VERSION {
                varint_len(u64::from(self.users))
                    + varint_len(u64::from(self.key_bytes))
                    + varint_len(u64::from(self.value_bytes))
            } else {
                0
            }
    }

    /// Decodes one entry of extent format `version` at `*pos`.
    fn decode(buf: &[u8], pos: &mut usize, version: u32) -> Option<IndexEntry> {
        let first_len = get_varint32(buf, pos)? as usize;
        let first_key = take(buf, pos, first_len)?.to_vec();
        let shared = get_varint32(buf, pos)? as usize;
        let suffix_len = get_varint32(buf, pos)? as usize;
        let prefix = first_key.get(..shared)?;
        let suffix = take(buf, pos, suffix_len)?;
        let mut last_key = Vec::with_capacity(shared + suffix_len);
        last_key.extend_from_slice(prefix);
        last_key.extend_from_slice(suffix);
        let offset = get_varint(buf, pos)?;
        let size = get_varint32(buf, pos)?;
        let rows = get_varint32(buf, pos)?;
        let deletes = get_varint32(buf, pos)?;
        let min_lsn = get_varint(buf, pos)?;
        let max_lsn = min_lsn.checked_add(get_varint(buf, pos)?)?;
        let (users, key_bytes, value_bytes) = if version >= BLOCK_STATS_VERSION {
            (
                get_varint32(buf, pos)?,
                get_varint32(buf, pos)?,
                get_varint32(buf, pos)?,
            )
        } else {
            (0, 0, 0)
        };
        Some(IndexEntry {
            first_key,
            last_key,
            offset,
            size,
            rows,
            deletes,
            min_lsn,
            max_lsn,
            users,
            key_bytes,
            value_bytes,
        })
    }
}

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: usize) -> Option<&'a [u8]> {
    let end = pos.checked_add(len)?;
    let s = buf.get(*pos..end)?;
    *pos = end;
    Some(s)
}

/// Encodes the index block contents of extent format `version`: `entry* ‖ fixed32 count`.
pub(crate) fn encode_index(entries: &[IndexEntry], version: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|e| e.encoded_len(version)).sum::<usize>() + 4);
    for e in entries {
        e.encode_to(&mut out, version);
    }
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out
}

/// The contents of a stored index block (`contents ‖ trailer`; its CRC is checked here): as
/// stored, or decompressed when an extent of format 5 on stored it zstd-compressed (type 2; any
/// other type is an error). A length prefix above `max_len` (the extent's size: the index was
/// built to fit it) is refused before anything is allocated.
pub(crate) fn index_contents(stored: &[u8], version: u32, max_len: u64) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use super::Compression;
    let (contents, ctype) = check_block(stored)?;
    match Compression::from_u8(ctype) {
        Some(Compression::None) => Ok(std::borrow::Cow::Borrowed(contents)),
        Some(Compression::Zstd) if version >= DICTIONARY_VERSION => {
            let mut pos = 0;
            let raw_len = get_varint32(contents, &mut pos).unwrap_or(u32::MAX);
            if u64::from(raw_len) > max_len {
                return Err(format!("index block claims {raw_len} bytes, more than its extent"));
            }
            super::codec::decompress(Compression::Zstd, contents, None)
                .map(std::borrow::Cow::Owned)
                .map_err(|r| format!("index block: {r}"))
        }
        _ => Err(format!("index block has compression type {ctype}")),
    }
}

/// Decodes the index block contents of extent format `version`.
pub(crate) fn decode_index(buf: &[u8], version: u32) -> Result<Vec<IndexEntry>, String> {
    let Some(body_len) = buf.len().checked_sub(4) else {
        return Err("index block shorter than its entry count".into());
    };
    let count = get_u32(buf, body_len).unwrap_or(0) as usize;
    let body = &buf[..body_len];
    // Every entry takes at least 11 bytes: bound the allocation by what the buffer can hold.
    if count > body.len() / 11 + 1 {
        return Err(format!("index block claims {count} entries in {} bytes", body.len()));
    }
    let mut entries = Vec::with_capacity(count);
    let mut pos = 0;
    for i in 0..count {
        match IndexEntry::decode(body, &mut pos, version) {
            Some(e) => entries.push(e),
            None => return Err(format!("malformed index entry {i} at index offset {pos}")),
        }
    }
    if pos != body.len() {
        return Err(format!(
            "{} trailing bytes after {count} index entries",
            body.len() - pos
        ));
    }
    Ok(entries)
}

/// Statistics of a whole extent, stored in its properties block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExtentProperties {
    /// Format version the extent was written with.
    pub format_version: u32,
    /// Entries (all kinds).
    pub entries: u64,
    /// Entries of kind Delete.
    pub deletes: u64,
    /// Distinct user keys (= keys in the bloom filter of format 1 and 2 extents; from format 3
    /// on, the per-block filters together hold the sum of the index entries' `users`).
    pub user_keys: u64,
    /// Data blocks.
    pub data_blocks: u32,
    /// Data blocks stored compressed.
    pub compressed_blocks: u32,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest LSN.
    pub min_lsn: Lsn,
    /// Largest LSN.
    pub max_lsn: Lsn,
    /// Sum of internal-key lengths (user key + 8).
    pub raw_key_bytes: u64,
    /// Sum of value lengths.
    pub raw_value_bytes: u64,
    /// Bytes of all data blocks with their trailers (= offset of the index block).
    pub data_size: u64,
    /// Index block contents size (without trailer).
    pub index_size: u32,
    /// Filter block contents size (without trailer); 0 = no filter.
    pub filter_size: u32,
    /// Bloom bits per key the filter was built with (0 = no filter).
    pub bloom_bits_per_key: u32,
    /// The codec the extent's data blocks were compressed with (a trailer type byte; blocks
    /// that would not shrink are stored raw whatever it says). Extents before format 4 do not
    /// record it: LZ4 if any block is compressed, else none.
    pub compression: u8,
    /// The zstd dictionary block (format 5 on), when the data blocks use one (type 3).
    pub dictionary: Option<Handle>,
    /// Readers give every data block stored without a hash index one once it is decoded
    /// (format 5 on; zstd extents store their blocks without it).
    pub hash_index_on_read: bool,
}

// Property tags (stable; unknown tags are skipped by readers).
const P_FORMAT_VERSION: u32 = 1;
const P_ENTRIES: u32 = 2;
const P_DELETES: u32 = 3;
const P_DATA_BLOCKS: u32 = 4;
const P_SMALLEST: u32 = 5;
const P_LARGEST: u32 = 6;
const P_MIN_LSN: u32 = 7;
const P_MAX_LSN: u32 = 8;
const P_RAW_KEY_BYTES: u32 = 9;
const P_RAW_VALUE_BYTES: u32 = 10;
const P_USER_KEYS: u32 = 11;
const P_COMPRESSED_BLOCKS: u32 = 12;
const P_DATA_SIZE: u32 = 13;
const P_INDEX_SIZE: u32 = 14;
const P_FILTER_SIZE: u32 = 15;
const P_BLOOM_BITS: u32 = 16;
/// Tags a v1 reader requires.
const P_MAX_REQUIRED: u32 = 16;
/// Codec of the data blocks (format 4 on; optional).
const P_COMPRESSION: u32 = 17;
/// The dictionary block: `varint offset ‖ varint size` (format 5 on; only with a dictionary).
const P_DICTIONARY: u32 = 18;
/// Blocks without a stored hash index get one on read: int 1 (format 5 on; absent = 0).
const P_HASH_INDEX_ON_READ: u32 = 19;
/// Largest tag this build knows; larger ones are skipped.
const P_MAX_KNOWN: u32 = 19;

/// Upper bound of the properties block size (without trailer) for these key lengths.
pub(crate) fn props_size_bound(smallest_len: usize, largest_len: usize) -> usize {
    // The dictionary handle's two varints take up to 15 bytes, 5 more than a number's.
    P_MAX_KNOWN as usize * (1 + 1 + 10) + smallest_len + largest_len + 2 * 4 + 5
}

impl ExtentProperties {
    /// Encodes the properties block: `(varint tag ‖ varint len ‖ value[len])*` in tag order;
    /// integers are varints inside their value, keys are raw bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(props_size_bound(self.smallest.len(), self.largest.len()));
        let num = |out: &mut Vec<u8>, tag: u32, v: u64| {
            put_varint(out, u64::from(tag));
            put_varint(out, varint_len(v) as u64);
            put_varint(out, v);
        };
        let bytes = |out: &mut Vec<u8>, tag: u32, v: &[u8]| {
            put_varint(out, u64::from(tag));
            put_varint(out, v.len() as u64);
            out.extend_from_slice(v);
        };
        num(&mut out, P_FORMAT_VERSION, u64::from(self.format_version));
        num(&mut out, P_ENTRIES, self.entries);
        num(&mut out, P_DELETES, self.deletes);
        num(&mut out, P_DATA_BLOCKS, u64::from(self.data_blocks));
        bytes(&mut out, P_SMALLEST, &self.smallest);
        bytes(&mut out, P_LARGEST, &self.largest);
        num(&mut out, P_MIN_LSN, self.min_lsn);
        num(&mut out, P_MAX_LSN, self.max_lsn);
        num(&mut out, P_RAW_KEY_BYTES, self.raw_key_bytes);
        num(&mut out, P_RAW_VALUE_BYTES, self.raw_value_bytes);
        num(&mut out, P_USER_KEYS, self.user_keys);
        num(&mut out, P_COMPRESSED_BLOCKS, u64::from(self.compressed_blocks));
        num(&mut out, P_DATA_SIZE, self.data_size);
        num(&mut out, P_INDEX_SIZE, u64::from(self.index_size));
        num(&mut out, P_FILTER_SIZE, u64::from(self.filter_size));
        num(&mut out, P_BLOOM_BITS, u64::from(self.bloom_bits_per_key));
        if self.format_version >= 4 {
            num(&mut out, P_COMPRESSION, u64::from(self.compression));
        }
        if let Some(h) = self.dictionary {
            let mut v = Vec::with_capacity(15);
            put_varint(&mut v, h.offset);
            put_varint(&mut v, u64::from(h.size));
            bytes(&mut out, P_DICTIONARY, &v);
        }
        if self.hash_index_on_read {
            num(&mut out, P_HASH_INDEX_ON_READ, 1);
        }
        out
    }

    /// Decodes a properties block. Every tag 1..=16 must appear exactly once, 17 to 19 at most once;
    /// larger tags are skipped (added by later versions).
    pub(crate) fn decode(buf: &[u8]) -> Result<ExtentProperties, String> {
        let mut p = ExtentProperties::default();
        let mut seen = 0u64;
        let mut pos = 0;
        while pos < buf.len() {
            let at = pos;
            let tag = get_varint32(buf, &mut pos).ok_or_else(|| format!("malformed property tag at {at}"))?;
            let len = get_varint32(buf, &mut pos).ok_or_else(|| format!("malformed property length at {at}"))?;
            let value = take(buf, &mut pos, len as usize)
                .ok_or_else(|| format!("property {tag} at {at} runs past the block"))?;
            if tag == 0 || tag > P_MAX_KNOWN {
                if tag == 0 {
                    return Err(format!("property tag 0 at {at}"));
                }
                continue;
            }
            if seen & (1 << tag) != 0 {
                return Err(format!("property {tag} appears twice"));
            }
            seen |= 1 << tag;
            let num = || -> Result<u64, String> {
                let mut vp = 0;
                match get_varint(value, &mut vp) {
                    Some(v) if vp == value.len() => Ok(v),
                    _ => Err(format!("malformed value of property {tag} at {at}")),
                }
            };
            let num32 = || -> Result<u32, String> {
                u32::try_from(num()?).map_err(|_| format!("property {tag} at {at} exceeds 32 bits"))
            };
            match tag {
                P_FORMAT_VERSION => p.format_version = num32()?,
                P_ENTRIES => p.entries = num()?,
                P_DELETES => p.deletes = num()?,
                P_DATA_BLOCKS => p.data_blocks = num32()?,
                P_SMALLEST => p.smallest = value.to_vec(),
                P_LARGEST => p.largest = value.to_vec(),
                P_MIN_LSN => p.min_lsn = num()?,
                P_MAX_LSN => p.max_lsn = num()?,
                P_RAW_KEY_BYTES => p.raw_key_bytes = num()?,
                P_RAW_VALUE_BYTES => p.raw_value_bytes = num()?,
                P_USER_KEYS => p.user_keys = num()?,
                P_COMPRESSED_BLOCKS => p.compressed_blocks = num32()?,
                P_DATA_SIZE => p.data_size = num()?,
                P_INDEX_SIZE => p.index_size = num32()?,
                P_FILTER_SIZE => p.filter_size = num32()?,
                P_BLOOM_BITS => p.bloom_bits_per_key = num32()?,
                P_COMPRESSION => {
                    p.compression = u8::try_from(num()?)
                        .ok()
                        .filter(|c| super::Compression::from_u8(*c).is_some())
                        .ok_or_else(|| format!("unknown codec in property {tag} at {at}"))?
                }
                P_HASH_INDEX_ON_READ => {
                    p.hash_index_on_read = match num()? {
                        0 => false,
                        1 => true,
                        v => return Err(format!("property {tag} at {at} is {v}, not 0 or 1")),
                    }
                }
                P_DICTIONARY => {
                    let mut vp = 0;
                    let offset = get_varint(value, &mut vp);
                    let size = get_varint32(value, &mut vp);
                    match (offset, size) {
                        (Some(offset), Some(size)) if vp == value.len() => p.dictionary = Some(Handle { offset, size }),
                        _ => return Err(format!("malformed value of property {tag} at {at}")),
                    }
                }
                _ => {}
            }
        }
        let all = ((1u64 << (P_MAX_REQUIRED + 1)) - 1) & !1;
        if seen & all != all {
            let missing: Vec<u32> = (1..=P_MAX_REQUIRED).filter(|t| seen & (1 << t) == 0).collect();
            return Err(format!("properties block lacks tags {missing:?}"));
        }
        if seen & (1 << P_COMPRESSION) == 0 {
            p.compression = if p.compressed_blocks > 0 {
                super::Compression::Lz4 as u8
            } else {
                super::Compression::None as u8
            };
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trips_and_detects_every_flip() {
        let f = Footer {
            version: EXTENT_FORMAT_VERSION,
            slots: 3,
            valid_size: 5_000_000,
            index: Handle {
                offset: 4_000_000,
                size: 1000,
            },
            filter: Handle {
                offset: 4_001_005,
                size: 642,
            },
            props: Handle {
                offset: 4_001_652,
                size: 300,
            },
        };
        let enc = f.encode();
        assert_eq!(Footer::decode(&enc), Ok(f));
        for i in 0..FOOTER_SIZE {
            for bit in 0..8 {
                let mut bad = enc;
                bad[i] ^= 1 << bit;
                assert!(
                    Footer::decode(&bad).is_err(),
                    "flip of bit {bit} in byte {i} not detected"
                );
            }
        }
        assert_eq!(Footer::decode(&[0u8; FOOTER_SIZE]), Err(FooterError::Magic(0)));
        assert!(Footer::decode(&enc[..10]).is_err());
        let older = Footer { version: 1, ..f }.encode();
        assert_eq!(Footer::decode(&older).map(|f| f.version), Ok(1));
        let newer = Footer { version: 7, ..f }.encode();
        assert_eq!(Footer::decode(&newer), Err(FooterError::Version(7)));
    }

    #[test]
    fn trailer_detects_flips() {
        let contents = b"some block contents".to_vec();
        let mut stored = contents.clone();
        stored.extend_from_slice(&trailer(&contents, 1));
        assert_eq!(check_block(&stored).unwrap(), (&contents[..], 1));
        for i in 0..stored.len() {
            let mut bad = stored.clone();
            bad[i] ^= 0x40;
            assert!(check_block(&bad).is_err());
        }
        assert!(check_block(&stored[..3]).is_err());
    }

    fn entry(i: u64) -> IndexEntry {
        IndexEntry {
            first_key: format!("key{i:05}aaaaaaaa").into_bytes(),
            last_key: format!("key{i:05}zzzzzzzz").into_bytes(),
            offset: i * 16_000,
            size: 15_995,
            rows: 100 + i as u32,
            deletes: i as u32,
            min_lsn: 1000 * i,
            max_lsn: 1000 * i + 999,
            users: 40 + i as u32,
            key_bytes: 24 * (100 + i as u32),
            value_bytes: 70_000 + i as u32,
        }
    }

    #[test]
    fn index_of_older_formats_has_no_block_stats() {
        let entries: Vec<_> = (0..5).map(entry).collect();
        for v in [1, 2] {
            let enc = encode_index(&entries, v);
            assert!(enc.len() < encode_index(&entries, 3).len());
            let back = decode_index(&enc, v).unwrap();
            for (b, e) in back.iter().zip(&entries) {
                assert_eq!((b.users, b.key_bytes, b.value_bytes), (0, 0, 0));
                assert_eq!(
                    (&b.first_key, &b.last_key, b.rows, b.max_lsn),
                    (&e.first_key, &e.last_key, e.rows, e.max_lsn)
                );
            }
            // A reader that expects the other version sees malformed entries.
            assert!(decode_index(&enc, 3).is_err());
            assert!(decode_index(&encode_index(&entries, 3), v).is_err());
        }
    }

    #[test]
    fn index_round_trips_and_rejects_garbage() {
        let v = EXTENT_FORMAT_VERSION;
        let entries: Vec<_> = (0..50).map(entry).collect();
        let enc = encode_index(&entries, v);
        assert_eq!(enc.len(), entries.iter().map(|e| e.encoded_len(v)).sum::<usize>() + 4);
        for e in &entries {
            assert!(e.encoded_len(v) <= IndexEntry::encoded_len_bound(e.first_key.len(), e.last_key.len()));
        }
        assert_eq!(decode_index(&enc, v).unwrap(), entries);
        assert!(decode_index(&enc[..3], v).is_err());
        assert!(decode_index(&enc[1..], v).is_err());
        let mut more = enc.clone();
        let n = more.len();
        more[n - 4..].copy_from_slice(&51u32.to_le_bytes());
        assert!(decode_index(&more, v).is_err());
        more[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_index(&more, v).is_err());
        more[n - 4..].copy_from_slice(&49u32.to_le_bytes());
        assert!(decode_index(&more, v).is_err());
        // random garbage never panics
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..2000 {
            let mut g = enc.clone();
            for _ in 0..3 {
                let i = rng.random_range(0..g.len());
                g[i] = rng.random();
            }
            let _ = decode_index(&g, v);
            let len = rng.random_range(0..100);
            let r: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let _ = decode_index(&r, v);
            let _ = ExtentProperties::decode(&r);
        }
    }

    #[test]
    fn properties_round_trip_and_skip_unknown_tags() {
        let p = ExtentProperties {
            format_version: 1,
            entries: 12345,
            deletes: 45,
            user_keys: 12000,
            data_blocks: 17,
            compressed_blocks: 16,
            smallest: b"aaaa\x01\0\0\0\0\0\0\0".to_vec(),
            largest: b"zzzz\x01\0\0\0\0\0\0\0".to_vec(),
            min_lsn: 7,
            max_lsn: 1 << 55,
            raw_key_bytes: 1 << 40,
            raw_value_bytes: 99,
            data_size: 2_000_000,
            index_size: 3000,
            filter_size: 15_000,
            bloom_bits_per_key: 10,
            // Not encoded before format 4: derived from `compressed_blocks`.
            compression: 1,
            dictionary: None,
            hash_index_on_read: false,
        };
        let mut enc = p.encode();
        assert!(enc.len() <= props_size_bound(p.smallest.len(), p.largest.len()));
        assert_eq!(ExtentProperties::decode(&enc).unwrap(), p);
        // a later version's tag is skipped
        put_varint(&mut enc, 40);
        put_varint(&mut enc, 3);
        enc.extend_from_slice(b"new");
        assert_eq!(ExtentProperties::decode(&enc).unwrap(), p);
        // a missing, duplicated or truncated tag is rejected
        let full = p.encode();
        assert!(ExtentProperties::decode(&full[..full.len() - 3]).is_err());
        let mut dup = full.clone();
        dup.extend_from_slice(&full[..3]);
        assert!(ExtentProperties::decode(&dup).is_err());
        assert!(ExtentProperties::decode(&[]).is_err());
        // Format 4 records the codec, even one no block shrank with.
        let v4 = ExtentProperties {
            format_version: 4,
            compressed_blocks: 0,
            compression: 2,
            ..p.clone()
        };
        assert_eq!(ExtentProperties::decode(&v4.encode()).unwrap(), v4);
        let unknown = ExtentProperties {
            compression: 9,
            ..v4.clone()
        };
        assert!(ExtentProperties::decode(&unknown.encode())
            .unwrap_err()
            .contains("codec"));
        // Format 5 may locate a dictionary block; a malformed handle is refused.
        let v5 = ExtentProperties {
            format_version: 5,
            compression: 3,
            dictionary: Some(Handle {
                offset: u64::from(u32::MAX) + 7,
                size: u32::MAX,
            }),
            hash_index_on_read: true,
            ..v4.clone()
        };
        let enc5 = v5.encode();
        assert!(enc5.len() <= props_size_bound(v5.smallest.len(), v5.largest.len()));
        assert_eq!(ExtentProperties::decode(&enc5).unwrap(), v5);
        let mut bad = v4.encode();
        put_varint(&mut bad, u64::from(P_DICTIONARY));
        put_varint(&mut bad, 1);
        bad.push(0x80);
        assert!(ExtentProperties::decode(&bad).unwrap_err().contains("malformed"));
    }
}
