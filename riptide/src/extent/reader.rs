//! [`ExtentReader`]: opens an extent through a [`ReadableFile`] and reads its blocks.
//!
//! Invariants:
//! - `open` does exactly two reads: the footer, then one read covering the contiguous index,
//!   filter and properties blocks. Everything is verified before the reader exists: footer CRC,
//!   magic, version and slot count; each meta block's trailer CRC; the index entries' structure
//!   (contiguous handles from offset 0 up to the index block, keys increasing across blocks,
//!   sane stats); and the properties agreeing with the index.
//! - `read_block` verifies the block's CRC before decompressing or decoding it.
//! - Errors name the file and an absolute file offset inside the damaged block or footer.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::block::{Block, BlockIter};
#[cfg(any(test, feature = "fuzzing"))]
use super::builder::BuiltExtent;
use super::builder::RawBlock;
use super::codec::decompress;
use super::dictionary::BlockDict;
use super::filter::{hash64, Filter};
use super::format::{
    check_block, decode_index, index_contents, ExtentProperties, Footer, FooterError, Handle, IndexEntry,
    BLOCK_STATS_VERSION, DICTIONARY_VERSION, EXTENT_FORMAT_VERSION, FOOTER_SIZE, TRAILER_SIZE,
};
use super::point::{PointRead, PointScratch};
use super::{Compression, PackedKeys, EXTENT_SIZE};
use crate::error::{Error, Result};
use crate::fs::ReadableFile;
use crate::key::{compare_internal_keys, decode_internal_key, Lsn, ValueKind};

/// Reads exactly `len` bytes at `offset` ([`ReadableFile::read_exact_into`]); a short file is
/// corruption at the offset where it ends.
fn read_exact_at(file: &dyn ReadableFile, path: &Path, len: usize, offset: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    append_exact_at(file, path, &mut buf, len, offset)?;
    Ok(buf)
}

/// Appends exactly `len` bytes of `file` at `offset` to `buf`; a file that ends first is
/// corruption (an extent's bytes all lie before the end of its file).
pub(super) fn append_exact_at(
    file: &dyn ReadableFile,
    path: &Path,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> Result<()> {
    let start = buf.len();
    file.read_exact_into(buf, len, offset).map_err(|err| {
        let end = offset + (buf.len() - start) as u64;
        if err.kind() == io::ErrorKind::UnexpectedEof {
            Error::corruption(
                path,
                end,
                format!("file ends at {end} inside an extent (needed {len} bytes at {offset})"),
            )
        } else {
            Error::io("read", path, err)
        }
    })
}

/// An open extent: parsed footer, index, filter and properties. `Send + Sync`; reads go through
/// a file the caller passes in (so the table cache decides who owns file handles).
pub(crate) struct ExtentReader {
    path: Arc<Path>,
    base: u64,
    slots: u32,
    footer: Footer,
    index: Vec<IndexEntry>,
    /// The index's last keys packed together, so the search of [`Self::find_block`] touches
    /// few cache lines.
    last_keys: PackedKeys,
    /// Each block's offset (as in the index) in a small dense array: a point lookup reads it
    /// instead of the large index entry (one cache miss fewer).
    block_offsets: Vec<u64>,
    filter: Option<Filter>,
    props: ExtentProperties,
    /// The zstd dictionary of the extent's type-3 blocks (format 5 on).
    dictionary: Option<Arc<BlockDict>>,
}

impl std::fmt::Debug for ExtentReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtentReader")
            .field("path", &self.path)
            .field("base", &self.base)
            .field("slots", &self.slots)
            .field("blocks", &self.index.len())
            .field("entries", &self.props.entries)
            .field("filter", &self.filter)
            .finish()
    }
}

/// Absolute offset of the end of an extent, checked.
fn extent_end(path: &Path, base: u64, slots: u32) -> Result<u64> {
    if slots == 0 {
        return Err(Error::InvalidOption {
            option: "slots",
            reason: format!("an extent has at least one slot ({path:?} at {base})"),
        });
    }
    base.checked_add(u64::from(slots) * EXTENT_SIZE)
        .ok_or_else(|| Error::InvalidOption {
            option: "base",
            reason: format!("extent at {base} with {slots} slots overflows the file offset range"),
        })
}

impl ExtentReader {
    /// Reads and verifies the footer (at `base + slots * EXTENT_SIZE - FOOTER_SIZE`), then the
    /// index, filter and properties blocks in one read.
    pub fn open(file: &dyn ReadableFile, path: &Path, base: u64, slots: u32) -> Result<ExtentReader> {
        let path: Arc<Path> = Arc::from(path);
        let footer_off = extent_end(&path, base, slots)? - FOOTER_SIZE as u64;
        let fbuf = read_exact_at(file, &path, FOOTER_SIZE, footer_off)?;
        let footer = parse_footer(&path, footer_off, &fbuf, slots)?;
        let meta_start = footer.index.offset;
        let meta_len = (footer.valid_size - meta_start) as usize;
        let meta = read_exact_at(file, &path, meta_len, base + meta_start)?;
        Self::from_parts(path, base, slots, footer, &meta)
    }

    /// A reader for an extent just built (no I/O), e.g. to install it in the table cache right
    /// after writing it at `base` of `path`. Verifies exactly what [`Self::open`] does.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn from_built(built: &BuiltExtent, path: &Path, base: u64) -> Result<ExtentReader> {
        let path: Arc<Path> = Arc::from(path);
        let footer_off = extent_end(&path, base, built.slots)? - FOOTER_SIZE as u64;
        let footer = parse_footer(&path, footer_off, &built.footer, built.slots)?;
        let meta = built
            .valid
            .get(footer.index.offset as usize..footer.valid_size as usize)
            .ok_or_else(|| Error::corruption(&*path, footer_off, "footer's valid size exceeds the built extent"))?;
        Self::from_parts(path, base, built.slots, footer, meta)
    }

    /// Verifies and parses the meta blocks (`meta` starts at the index block).
    fn from_parts(path: Arc<Path>, base: u64, slots: u32, footer: Footer, meta: &[u8]) -> Result<ExtentReader> {
        let meta_start = footer.index.offset;
        let block = |h: Handle| -> Result<&[u8]> {
            let at = base + h.offset;
            let lo = (h.offset - meta_start) as usize;
            let hi = lo + h.size as usize + TRAILER_SIZE;
            let stored = meta
                .get(lo..hi)
                .ok_or_else(|| Error::corruption(&*path, at, "meta block lies outside the extent's meta area"))?;
            let (contents, ctype) = check_block(stored).map_err(|r| Error::corruption(&*path, at, r))?;
            if ctype != Compression::None as u8 {
                return Err(Error::corruption(
                    &*path,
                    at,
                    format!("meta block has compression type {ctype}"),
                ));
            }
            Ok(contents)
        };
        let index_at = base + footer.index.offset;
        let index_stored = meta
            .get(..footer.index.size as usize + TRAILER_SIZE)
            .ok_or_else(|| Error::corruption(&*path, index_at, "index block lies outside the extent's meta area"))?;
        let index_contents = index_contents(index_stored, footer.version, u64::from(slots) * EXTENT_SIZE)
            .map_err(|r| Error::corruption(&*path, index_at, r))?;
        let index =
            decode_index(&index_contents, footer.version).map_err(|r| Error::corruption(&*path, index_at, r))?;
        check_index(&index, footer.index.offset, footer.version).map_err(|r| Error::corruption(&*path, index_at, r))?;
        let filter = if footer.filter.size > 0 {
            let at = base + footer.filter.offset;
            let f = Filter::parse(block(footer.filter)?, index.len()).map_err(|r| Error::corruption(&*path, at, r))?;
            if f.is_per_block() != (footer.version >= BLOCK_STATS_VERSION) {
                return Err(Error::corruption(
                    &*path,
                    at,
                    format!("filter kind does not match extent format {}", footer.version),
                ));
            }
            Some(f)
        } else {
            None
        };
        let props_at = base + footer.props.offset;
        let props =
            ExtentProperties::decode(block(footer.props)?).map_err(|r| Error::corruption(&*path, props_at, r))?;
        check_props(&props, &index, &footer).map_err(|r| Error::corruption(&*path, props_at, r))?;
        let filter_end = if footer.filter.size > 0 {
            footer.filter.end()
        } else {
            footer.filter.offset
        };
        let gap = footer.props.offset - filter_end;
        if props.dictionary.map_or(0, |h| h.end().saturating_sub(h.offset)) != gap
            || props.dictionary.is_some_and(|h| h.offset != filter_end)
        {
            return Err(Error::corruption(
                &*path,
                props_at,
                format!(
                    "dictionary block {:?} does not fill the {gap} bytes between filter and properties",
                    props.dictionary
                ),
            ));
        }
        let dictionary = match props.dictionary {
            Some(h) => {
                let at = base + h.offset;
                Some(BlockDict::shared(block(h)?).map_err(|r| Error::corruption(&*path, at, r))?)
            }
            None => None,
        };
        let last_keys = PackedKeys::new(index.iter().map(|e| e.last_key.as_slice()));
        let block_offsets = index.iter().map(|e| e.offset).collect();
        Ok(ExtentReader {
            path,
            base,
            slots,
            footer,
            index,
            last_keys,
            block_offsets,
            filter,
            props,
            dictionary,
        })
    }

    /// The zstd dictionary the extent's type-3 blocks were compressed with, if any.
    pub(crate) fn dictionary(&self) -> Option<&Arc<BlockDict>> {
        self.dictionary.as_ref()
    }

    /// False only if no version of `user_key` is in this extent (bloom filter); true when the
    /// extent has no filter. Finds the block first when the filter is per block.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        let mut first = Vec::with_capacity(user_key.len() + 8);
        crate::key::encode_internal_key(&mut first, user_key, crate::key::MAX_LSN, ValueKind::Put);
        // The first block whose last key is at or after the user key's newest possible
        // version holds its newest version, if the extent has one.
        self.find_block(&first)
            .is_some_and(|b| self.block_may_contain(b, hash64(user_key)))
    }

    /// False only if the user key with this [`super::filter_hash`] is certainly not in data
    /// block `block` (per-block filter) or not in the extent (extent-wide filter of formats 1
    /// and 2); true without a filter. A point lookup asks about the block
    /// [`Self::find_block`] gives for its seek key: if the key has a version visible there,
    /// the first one is in that block.
    #[inline]
    pub fn block_may_contain(&self, block: usize, hash: u64) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain_hash(block, hash))
    }

    /// Starts loading the filter line [`Self::block_may_contain`] will read for `block` and
    /// `hash` into the CPU cache (nothing without a filter).
    #[inline]
    pub fn prefetch_filter(&self, block: usize, hash: u64) {
        if let Some(f) = &self.filter {
            f.prefetch(block, hash);
        }
    }

    /// The extent's format version (from its footer).
    pub fn format_version(&self) -> u32 {
        self.footer.version
    }

    /// The parsed filter, if the extent has one.
    pub(crate) fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// Offset (relative to the extent start) of data block `i`, as in its index entry; `None`
    /// if out of range. Reads a small dense array rather than the index entry.
    #[inline]
    pub fn block_offset(&self, i: usize) -> Option<u64> {
        self.block_offsets.get(i).copied()
    }

    /// True if the extent has a bloom filter.
    #[cfg(test)]
    pub fn has_filter(&self) -> bool {
        self.filter.is_some()
    }

    /// The index: one entry per data block, in key order.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// The extent's properties.
    pub fn props(&self) -> &ExtentProperties {
        &self.props
    }

    /// Index of the first block whose last key is `>= ikey` (internal-key order), or `None` if
    /// `ikey` is past the extent's largest key.
    #[inline]
    pub fn find_block(&self, ikey: &[u8]) -> Option<usize> {
        let i = self.last_keys.lower_bound(ikey);
        (i < self.last_keys.len()).then_some(i)
    }

    pub(super) fn entry(&self, i: usize) -> Result<&IndexEntry> {
        self.index.get(i).ok_or_else(|| Error::InvalidOption {
            option: "block",
            reason: format!(
                "block {i} out of range: {:?} has {} blocks",
                self.path,
                self.index.len()
            ),
        })
    }

    /// Absolute file offset of block `i` (`None` if out of range).
    /// Offset (relative to the extent start) and stored length (trailer included) of the
    /// index, filter, dictionary and properties blocks, for inspection tools.
    pub fn meta_regions(&self) -> Vec<(&'static str, (u64, u64))> {
        let f = &self.footer;
        let mut out = vec![("index", (f.index.offset, u64::from(f.index.size) + TRAILER_SIZE as u64))];
        if f.filter.size > 0 {
            out.push((
                "filter",
                (f.filter.offset, u64::from(f.filter.size) + TRAILER_SIZE as u64),
            ));
        }
        if let Some(d) = self.props.dictionary {
            out.push(("dictionary", (d.offset, u64::from(d.size) + TRAILER_SIZE as u64)));
        }
        out.push((
            "properties",
            (f.props.offset, u64::from(f.props.size) + TRAILER_SIZE as u64),
        ));
        out
    }

    pub fn block_file_offset(&self, i: usize) -> Option<u64> {
        self.index.get(i).map(|e| self.base + e.offset)
    }

    /// Reads block `i`'s stored bytes (`contents ‖ trailer`) and verifies the CRC.
    fn read_stored(&self, file: &dyn ReadableFile, e: &IndexEntry) -> Result<(Vec<u8>, u8)> {
        let at = self.base + e.offset;
        let buf = read_exact_at(file, &self.path, e.size as usize + TRAILER_SIZE, at)?;
        let ctype = check_block(&buf).map_err(|r| Error::corruption(&*self.path, at, r))?.1;
        Ok((buf, ctype))
    }

    /// Point lookup of `seek` (user key hash `hash`) in data block `i` reading only the block's
    /// tail and one restart region ([`super::point`]); [`PointRead::NeedFull`] when that cannot
    /// answer (then read the block).
    pub fn point_read(
        &self,
        file: &dyn ReadableFile,
        i: usize,
        seek: &[u8],
        hash: u64,
        scratch: &mut PointScratch,
    ) -> Result<PointRead> {
        let e = self.entry(i)?;
        // v1 extents have no region checksums, nor do the blocks of zstd extents (v5, even those
        // stored raw); in an extent whose blocks are mostly compressed the first read would
        // mostly be wasted.
        let zstd = Compression::from_u8(self.props.compression).is_some_and(Compression::is_zstd);
        if self.footer.version < 2
            || (zstd && self.props.hash_index_on_read)
            || self.props.compressed_blocks.saturating_mul(2) > self.props.data_blocks
        {
            return Ok(PointRead::NeedFull);
        }
        super::point::read_point(file, &self.path, self.base + e.offset, e.size, seek, hash, scratch)
    }

    /// Reads, verifies (CRC) and decompresses data block `i`.
    pub fn read_block(&self, file: &dyn ReadableFile, i: usize) -> Result<Block> {
        let e = self.entry(i)?;
        let at = self.base + e.offset;
        let (mut buf, ctype) = self.read_stored(file, e)?;
        let data = match Compression::from_u8(ctype) {
            Some(Compression::None) => {
                buf.truncate(e.size as usize);
                buf
            }
            Some(codec) => decompress(codec, &buf[..e.size as usize], self.dictionary.as_deref())
                .map_err(|r| Error::corruption(&*self.path, at, r))?,
            None => {
                return Err(Error::corruption(
                    &*self.path,
                    at,
                    format!("unknown block compression type {ctype}"),
                ))
            }
        };
        if self.props.hash_index_on_read {
            return Block::new_lazy_index(data, self.path.clone(), at, e.users);
        }
        Block::new(data, self.path.clone(), at)
    }

    /// Reads data block `i` verbatim (CRC verified, not decoded) for reuse by compaction
    /// (`super::ExtentBuilder::add_raw_block`; a compaction that keeps the codec uses
    /// [`super::ExtentBuilder::copy_block`], which reads into the output directly).
    pub fn read_raw_block(&self, file: &dyn ReadableFile, i: usize) -> Result<RawBlock> {
        let e = self.entry(i)?;
        let (stored, _) = self.read_stored(file, e)?;
        Ok(RawBlock {
            dict_id: self.dictionary.as_ref().map(|d| d.id()),
            entry: e.clone(),
            stored,
            path: self.path.clone(),
            file_offset: self.base + e.offset,
        })
    }

    /// Absolute file offset of the extent's start.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// 2 MiB slots the extent occupies.
    #[cfg(test)]
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The data file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written at the extent start (data, index, filter, properties).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn valid_size(&self) -> u64 {
        self.footer.valid_size
    }

    /// Memory held by the reader (for a table cache charge).
    #[cfg(test)]
    pub fn memory_size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.filter.as_ref().map_or(0, Filter::size)
            + self
                .index
                .iter()
                .map(|e| std::mem::size_of::<IndexEntry>() + e.first_key.capacity() + e.last_key.capacity())
                .sum::<usize>()
            + self.last_keys.memory_size()
            + self.block_offsets.capacity() * std::mem::size_of::<u64>()
            + self.props.smallest.capacity()
            + self.props.largest.capacity()
    }
}

/// Decodes and checks the footer against the expected slot count.
fn parse_footer(path: &Path, footer_off: u64, f: &[u8], slots: u32) -> Result<Footer> {
    let corrupt = |r: String| Error::corruption(path, footer_off, r);
    let footer = match Footer::decode(f) {
        Ok(f) => f,
        Err(FooterError::Magic(m)) => return Err(corrupt(format!("bad extent footer magic {m:#018x}"))),
        Err(FooterError::Checksum) => return Err(corrupt("extent footer checksum mismatch".into())),
        Err(FooterError::Version(v)) if v > EXTENT_FORMAT_VERSION => {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: v,
                supported: EXTENT_FORMAT_VERSION,
            })
        }
        Err(FooterError::Version(v)) => return Err(corrupt(format!("unknown extent format version {v}"))),
    };
    if footer.slots != slots {
        return Err(corrupt(format!("footer says {} slots, expected {slots}", footer.slots)));
    }
    let (idx, flt, props) = (footer.index, footer.filter, footer.props);
    let room = u64::from(slots) * EXTENT_SIZE - FOOTER_SIZE as u64;
    if footer.valid_size > room {
        return Err(corrupt(format!(
            "valid size {} exceeds the extent's {room} bytes",
            footer.valid_size
        )));
    }
    let filter_end = if flt.size > 0 { flt.end() } else { flt.offset };
    // From format 5 a dictionary block may lie between the filter and the properties (the
    // properties locate it; `from_parts` checks that it fills the gap exactly).
    let gap_ok = if footer.version >= DICTIONARY_VERSION {
        filter_end <= props.offset
    } else {
        filter_end == props.offset
    };
    if idx.offset == 0 || idx.size < 4 || idx.end() != flt.offset || !gap_ok || props.end() != footer.valid_size {
        return Err(corrupt(format!(
            "inconsistent footer handles: index {idx:?}, filter {flt:?}, properties {props:?}, valid size {}",
            footer.valid_size
        )));
    }
    Ok(footer)
}

/// Structural checks of the index beyond its encoding.
fn check_index(index: &[IndexEntry], data_end: u64, version: u32) -> Result<(), String> {
    let mut expect = 0u64;
    for (i, e) in index.iter().enumerate() {
        if e.offset != expect {
            return Err(format!(
                "index entry {i}: block at {} where {expect} was expected",
                e.offset
            ));
        }
        expect = e.offset + e.stored_size();
        if e.rows == 0 || e.deletes > e.rows || e.min_lsn > e.max_lsn {
            return Err(format!(
                "index entry {i}: bad stats (rows {}, deletes {})",
                e.rows, e.deletes
            ));
        }
        if version >= BLOCK_STATS_VERSION
            && (e.users == 0 || e.users > e.rows || u64::from(e.key_bytes) < 8 * u64::from(e.rows))
        {
            return Err(format!(
                "index entry {i}: bad stats (rows {}, user keys {}, key bytes {})",
                e.rows, e.users, e.key_bytes
            ));
        }
        if decode_internal_key(&e.first_key).is_none() || decode_internal_key(&e.last_key).is_none() {
            return Err(format!("index entry {i}: malformed internal key"));
        }
        if compare_internal_keys(&e.first_key, &e.last_key) == std::cmp::Ordering::Greater {
            return Err(format!("index entry {i}: first key after last key"));
        }
        if i > 0 && compare_internal_keys(&index[i - 1].last_key, &e.first_key) != std::cmp::Ordering::Less {
            return Err(format!("index entry {i}: keys overlap the previous block"));
        }
    }
    if index.is_empty() {
        return Err("index has no entries".into());
    }
    if expect != data_end {
        return Err(format!("data blocks end at {expect}, index block starts at {data_end}"));
    }
    Ok(())
}

/// The properties must agree with the index and footer.
fn check_props(p: &ExtentProperties, index: &[IndexEntry], footer: &Footer) -> Result<(), String> {
    let rows: u64 = index.iter().map(|e| u64::from(e.rows)).sum();
    let deletes: u64 = index.iter().map(|e| u64::from(e.deletes)).sum();
    let min_lsn = index.iter().map(|e| e.min_lsn).min().unwrap_or(0);
    let max_lsn = index.iter().map(|e| e.max_lsn).max().unwrap_or(0);
    let first = index.first().map(|e| &e.first_key[..]).unwrap_or_default();
    let last = index.last().map(|e| &e.last_key[..]).unwrap_or_default();
    let checks: [(&str, bool); 13] = [
        ("format version", p.format_version == footer.version),
        ("data block count", p.data_blocks as usize == index.len()),
        ("entries", p.entries == rows),
        ("deletes", p.deletes == deletes),
        ("min LSN", p.min_lsn == min_lsn),
        ("max LSN", p.max_lsn == max_lsn),
        ("smallest key", p.smallest == first),
        ("largest key", p.largest == last),
        ("data size", p.data_size == footer.index.offset),
        ("index size", p.index_size == footer.index.size),
        ("filter size", p.filter_size == footer.filter.size),
        ("bloom bits", (p.bloom_bits_per_key == 0) == (footer.filter.size == 0)),
        (
            "dictionary",
            Compression::from_u8(p.compression).is_some_and(Compression::needs_dict) == p.dictionary.is_some()
                && (p.dictionary.is_none() || footer.version >= DICTIONARY_VERSION),
        ),
    ];
    for (what, ok) in checks {
        if !ok {
            return Err(format!("properties disagree with the index/footer: {what}"));
        }
    }
    if p.user_keys > p.entries || p.compressed_blocks > p.data_blocks || p.raw_key_bytes < 8 * p.entries {
        return Err("properties hold impossible counts".into());
    }
    if footer.version >= BLOCK_STATS_VERSION {
        let users: u64 = index.iter().map(|e| u64::from(e.users)).sum();
        let key_bytes: u64 = index.iter().map(|e| u64::from(e.key_bytes)).sum();
        let value_bytes: u64 = index.iter().map(|e| u64::from(e.value_bytes)).sum();
        if p.user_keys > users || p.user_keys == 0 || p.raw_key_bytes != key_bytes || p.raw_value_bytes != value_bytes {
            return Err("properties disagree with the index: user keys or raw sizes".into());
        }
    }
    Ok(())
}

/// Verifies every checksum and structure of an extent (footer, meta blocks, every data block,
/// every entry against its index entry), as an inspect tool would. Returns the open reader.
pub(crate) fn verify_extent(file: &dyn ReadableFile, path: &Path, base: u64, slots: u32) -> Result<ExtentReader> {
    let reader = ExtentReader::open(file, path, base, slots)?;
    let mut prev_last: Option<Vec<u8>> = None;
    let (mut key_bytes, mut value_bytes) = (0u64, 0u64);
    for (i, e) in reader.index.iter().enumerate() {
        let block = Arc::new(reader.read_block(file, i)?);
        let at = block.offset();
        let corrupt = |r: String| Error::corruption(path, at, format!("data block {i}: {r}"));
        block.check_region_crcs().map_err(corrupt)?;
        let mut it = BlockIter::new(block);
        it.seek_to_first();
        let (mut rows, mut deletes, mut min_lsn, mut max_lsn) = (0u32, 0u32, Lsn::MAX, 0);
        let (mut users, mut blk_key_bytes, mut blk_value_bytes) = (0u32, 0u64, 0u64);
        let mut prev: Option<Vec<u8>> = prev_last.take();
        let mut first = true;
        while it.valid() {
            let k = it.key();
            let Some((user, lsn, kind)) = decode_internal_key(k) else {
                return Err(corrupt("malformed internal key".into()));
            };
            let same_user = !first
                && prev
                    .as_deref()
                    .is_some_and(|p| p.len() >= 8 && &p[..p.len() - 8] == user);
            if !same_user {
                users = users.saturating_add(1);
                if !reader.block_may_contain(i, hash64(user)) {
                    return Err(corrupt("the bloom filter does not hold a user key of the block".into()));
                }
            }
            if first && k != &e.first_key[..] {
                return Err(corrupt("first key differs from the index".into()));
            }
            if let Some(p) = &prev {
                if compare_internal_keys(p, k) != std::cmp::Ordering::Less {
                    return Err(corrupt("keys out of order".into()));
                }
            }
            first = false;
            rows = rows.saturating_add(1);
            deletes += u32::from(kind == ValueKind::Delete);
            min_lsn = min_lsn.min(lsn);
            max_lsn = max_lsn.max(lsn);
            blk_key_bytes += k.len() as u64;
            blk_value_bytes += it.value().len() as u64;
            let p = prev.get_or_insert_with(Vec::new);
            p.clear();
            p.extend_from_slice(k);
            it.next();
        }
        it.status()?;
        if prev.as_deref() != Some(&e.last_key[..]) {
            return Err(corrupt("last key differs from the index".into()));
        }
        if rows != e.rows || deletes != e.deletes || min_lsn != e.min_lsn || max_lsn != e.max_lsn {
            return Err(corrupt(format!(
                "stats differ from the index: rows {rows}/{}, deletes {deletes}/{}, LSNs {min_lsn}..{max_lsn} / {}..{}",
                e.rows, e.deletes, e.min_lsn, e.max_lsn
            )));
        }
        if reader.footer.version >= BLOCK_STATS_VERSION
            && (users != e.users
                || blk_key_bytes != u64::from(e.key_bytes)
                || blk_value_bytes != u64::from(e.value_bytes))
        {
            return Err(corrupt(format!(
                "user keys or raw sizes differ from the index: users {users}/{}, key bytes {blk_key_bytes}/{}, value bytes {blk_value_bytes}/{}",
                e.users, e.key_bytes, e.value_bytes
            )));
        }
        key_bytes += blk_key_bytes;
        value_bytes += blk_value_bytes;
        prev_last = prev;
    }
    let p = &reader.props;
    if p.raw_key_bytes != key_bytes || p.raw_value_bytes != value_bytes {
        return Err(Error::corruption(
            path,
            base + reader.footer.props.offset,
            "properties' raw key/value sizes differ from the data blocks",
        ));
    }
    Ok(reader)
}
