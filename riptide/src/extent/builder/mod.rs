//! [`ExtentBuilder`]: turns a sorted stream of internal-key entries into the bytes of one extent.
//!
//! Invariants:
//! - Entries are strictly increasing in internal-key order; a key out of order or malformed is
//!   refused with `Error::InvalidOption` and leaves the builder unchanged.
//! - [`ExtentBuilder::estimated_size`] and `ExtentBuilder::estimated_size_after` are upper
//!   bounds of the finished extent's `valid + FOOTER_SIZE` bytes (finished blocks are counted as
//!   stored, the open block uncompressed), so a caller that keeps them within [`EXTENT_SIZE`] gets
//!   a one-slot extent.
//! - The builder allocates per block, not per entry (apart from the filter's one u64 per
//!   distinct user key of the open block).
//! - Format 3 (the default): each index entry carries the block's user-key count and raw sizes,
//!   and the filter is per block. A block copied from a format-3 extent with a compatible filter
//!   is taken with its index entry and filter lines as they are (its checksum is verified, its
//!   entries are not decoded); blocks of older extents are decoded once to compute them.

mod estimate;
mod reuse;

pub(crate) use reuse::RawBlock;

use std::cmp::Ordering;

use super::block::BlockBuilder;
use super::codec::BlockCompressor;
use super::dictionary::BlockDict;
use super::filter::{build_filter, filter_block_size, hash64, BlockFilterBuilder};
use super::format::{
    check_block, encode_index, props_size_bound, trailer, ExtentProperties, Footer, Handle, IndexEntry,
    BLOCK_STATS_VERSION, EXTENT_FORMAT_VERSION, FOOTER_SIZE, TRAILER_SIZE,
};
use super::reader::{append_exact_at, ExtentReader};
use super::scan_entries;
use super::{Compression, ExtentOptions, EXTENT_SIZE};
use crate::error::{Error, Result};
use crate::fs::ReadableFile;
use crate::key::{compare_internal_keys, decode_internal_key, Lsn, ValueKind};

/// Largest key + value of one entry (keeps every block size within u32).
const MAX_ENTRY_SIZE: usize = (u32::MAX / 2) as usize;

/// A finished extent, ready to be written: `valid` at the extent start, `footer` so that it ends
/// exactly at `start + slots * EXTENT_SIZE`.
#[derive(Clone, Debug)]
pub(crate) struct BuiltExtent {
    /// Data blocks, index, filter and properties, with trailers. Emptied once written to its
    /// slots (compaction jobs keep many built extents until their install).
    pub valid: Vec<u8>,
    /// Length of `valid` as built (the extent's data size).
    pub data_size: u64,
    /// The footer ([`FOOTER_SIZE`] bytes).
    pub footer: Vec<u8>,
    /// 2 MiB slots the extent occupies.
    pub slots: u32,
    /// Its properties (as stored).
    pub props: ExtentProperties,
    /// Number of data blocks.
    pub blocks: u32,
    /// The index entries (as stored), e.g. to build a reader without reading them back.
    #[cfg(test)]
    pub index: Vec<IndexEntry>,
}

#[cfg(test)]
impl BuiltExtent {
    /// The whole extent image: `valid`, zeros, `footer` (`slots * EXTENT_SIZE` bytes).
    pub(crate) fn image(&self) -> Vec<u8> {
        let total = self.slots as usize * EXTENT_SIZE as usize;
        let mut img = Vec::with_capacity(total);
        img.extend_from_slice(&self.valid);
        img.resize(total - FOOTER_SIZE, 0);
        img.extend_from_slice(&self.footer);
        img
    }
}

/// Builds one extent in memory.
pub(crate) struct ExtentBuilder {
    opts: ExtentOptions,
    /// Finished data blocks with trailers.
    out: Vec<u8>,
    block: BlockBuilder,
    /// First key and stats of the open block.
    blk_first: Vec<u8>,
    blk_rows: u32,
    blk_deletes: u32,
    blk_min_lsn: Lsn,
    blk_max_lsn: Lsn,
    /// User keys in the open block (counting one continued from the previous block).
    blk_users: u32,
    blk_key_bytes: u64,
    blk_value_bytes: u64,
    /// Filter hashes of the open block's user keys (format 3 with a filter).
    blk_hashes: Vec<u64>,
    index: Vec<IndexEntry>,
    /// Encoded size of `index`.
    index_bytes: usize,
    /// The per-block filter of the finished blocks (format 3 with a filter).
    filter: BlockFilterBuilder,
    /// Filter hashes of the distinct user keys (formats 1 and 2 with a filter).
    hashes: Vec<u64>,
    /// Last internal key added (empty before the first).
    last_key: Vec<u8>,
    /// Running totals (`largest`, sizes and block counts are filled in by `finish`).
    props: ExtentProperties,
    /// Compresses data blocks (keeps a zstd context between blocks).
    compressor: BlockCompressor,
    /// The zstd dictionary stored in the extent, when the compressor uses one (type-3 blocks).
    dictionary: Option<std::sync::Arc<BlockDict>>,
    /// Compression output buffer.
    scratch: Vec<u8>,
    /// Format version written (older versions only in tests of the readers' compatibility).
    version: u32,
    /// Blocks taken from other extents that had to be decoded (older source format or a
    /// filter whose lines do not fit).
    decoded_copies: u32,
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        option,
        reason: reason.into(),
    }
}

impl ExtentBuilder {
    /// A builder; out-of-range options are clamped (see `ExtentOptions::validate`).
    pub fn new(opts: ExtentOptions) -> Self {
        Self::with_buffer(opts, Vec::new())
    }

    /// Like [`Self::new`], building into `buf` (cleared; its capacity is kept and raised to one
    /// slot). Flushes and compactions pass the buffer of the extent they just wrote, so a run of
    /// extents neither reallocates nor touches fresh memory for each one.
    pub fn with_buffer(opts: ExtentOptions, mut buf: Vec<u8>) -> Self {
        let opts = opts.sanitized();
        let compressor = BlockCompressor::new(opts.compression, opts.compression_level, opts.dictionary.as_deref());
        let dictionary = opts.dictionary.clone().filter(|_| compressor.dict_id().is_some());
        // zstd blocks are always read whole: region checksums would serve nothing, and the
        // hash index (about 4 bytes per key that compress poorly) is built in memory for hot
        // cached blocks instead (`block/rehash.rs`).
        let zstd = compressor.kind().is_zstd();
        let mut block = BlockBuilder::with_hash_index(opts.restart_interval, opts.hash_index && !zstd);
        block.region_crcs = !zstd;
        let filter = BlockFilterBuilder::new(opts.bloom_bits_per_key);
        buf.clear();
        buf.reserve(EXTENT_SIZE as usize);
        ExtentBuilder {
            block,
            opts,
            out: buf,
            blk_first: Vec::new(),
            blk_rows: 0,
            blk_deletes: 0,
            blk_min_lsn: Lsn::MAX,
            blk_max_lsn: 0,
            blk_users: 0,
            blk_key_bytes: 0,
            blk_value_bytes: 0,
            blk_hashes: Vec::new(),
            index: Vec::new(),
            index_bytes: 0,
            filter,
            hashes: Vec::new(),
            last_key: Vec::new(),
            props: ExtentProperties {
                min_lsn: Lsn::MAX,
                ..Default::default()
            },
            compressor,
            dictionary,
            scratch: Vec::new(),
            version: EXTENT_FORMAT_VERSION,
            decoded_copies: 0,
        }
    }

    /// A builder of extent format 1 (data blocks without region checksums), for tests that
    /// read what older builds wrote.
    #[cfg(test)]
    pub(crate) fn new_v1(opts: ExtentOptions) -> Self {
        let mut b = Self::new(opts);
        b.version = 1;
        b.block.region_crcs = false;
        b
    }

    /// True when writing format 3 or later (block stats in the index, per-block filter).
    fn per_block(&self) -> bool {
        self.version >= BLOCK_STATS_VERSION
    }

    /// Blocks added from other extents that were decoded to compute their index entry and
    /// filter (the others were copied with their index entry and filter lines).
    pub fn decoded_copies(&self) -> u32 {
        self.decoded_copies
    }

    /// True before the first entry.
    pub fn is_empty(&self) -> bool {
        self.props.entries == 0
    }

    /// Entries added so far.
    #[cfg(test)]
    pub fn entries(&self) -> u64 {
        self.props.entries
    }

    /// Checks an entry against the last key (one comparison of the user keys); returns its
    /// LSN, its kind and whether its user key differs from the last entry's.
    fn check_next(&self, ikey: &[u8]) -> Result<(Lsn, ValueKind, bool)> {
        let Some((user, lsn, kind)) = decode_internal_key(ikey) else {
            return Err(invalid(
                "ikey",
                format!("malformed internal key of {} bytes", ikey.len()),
            ));
        };
        if self.is_empty() {
            return Ok((lsn, kind, true));
        }
        let new_user = match self.last_key.len().checked_sub(8) {
            Some(n) => match self.last_key[..n].cmp(user) {
                Ordering::Less => Some(true),
                // Versions of one user key: the newer (larger tag) first.
                Ordering::Equal => (compare_internal_keys(&self.last_key, ikey) == Ordering::Less).then_some(false),
                Ordering::Greater => None,
            },
            None => Some(true),
        };
        new_user
            .map(|new| (lsn, kind, new))
            .ok_or_else(|| invalid("ikey", "internal keys must be added in strictly increasing order"))
    }

    /// Counts a user key: `new_user` if it differs from the previous entry's, `opens_block` if
    /// it is the first in its block.
    fn note_user_key(&mut self, user: &[u8], new_user: bool, opens_block: bool) {
        let in_block_new = new_user || opens_block;
        self.props.user_keys += u64::from(new_user);
        self.blk_users += u32::from(in_block_new);
        if self.opts.bloom_bits_per_key > 0 {
            if self.per_block() {
                if in_block_new {
                    self.blk_hashes.push(hash64(user));
                }
            } else if new_user {
                self.hashes.push(hash64(user));
            }
        }
    }

    /// Adds one entry; internal keys must be strictly increasing.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let (lsn, kind, new_user) = self.check_next(ikey)?;
        if ikey.len() + value.len() > MAX_ENTRY_SIZE {
            return Err(invalid(
                "value",
                format!("entry of {} bytes is too large", ikey.len() + value.len()),
            ));
        }
        if !self.block.is_empty() {
            let bs = self.opts.block_size;
            let cur = self.block.size_estimate();
            // Cut at the target size, or early when the entry would overflow a block that is
            // already 90 % full (RocksDB's block_size_deviation = 10).
            if cur >= bs || (self.block.size_after(ikey.len(), value.len()) > bs && cur * 10 > bs * 9) {
                self.flush_block()?;
            }
        }
        let user = &ikey[..ikey.len() - 8];
        let opens_block = self.block.is_empty();
        if opens_block {
            self.blk_first.clear();
            self.blk_first.extend_from_slice(ikey);
            self.blk_rows = 0;
            self.blk_deletes = 0;
            self.blk_min_lsn = Lsn::MAX;
            self.blk_max_lsn = 0;
            self.blk_users = 0;
            self.blk_key_bytes = 0;
            self.blk_value_bytes = 0;
            self.blk_hashes.clear();
        }
        self.note_user_key(user, new_user, opens_block);
        self.block.add(&self.last_key, ikey, value);
        let is_delete = kind == ValueKind::Delete;
        self.blk_rows += 1;
        self.blk_deletes += u32::from(is_delete);
        self.blk_min_lsn = self.blk_min_lsn.min(lsn);
        self.blk_max_lsn = self.blk_max_lsn.max(lsn);
        self.blk_key_bytes += ikey.len() as u64;
        self.blk_value_bytes += value.len() as u64;
        if self.props.entries == 0 {
            self.props.smallest = ikey.to_vec();
        }
        self.props.entries += 1;
        self.props.deletes += u64::from(is_delete);
        self.props.min_lsn = self.props.min_lsn.min(lsn);
        self.props.max_lsn = self.props.max_lsn.max(lsn);
        self.props.raw_key_bytes += ikey.len() as u64;
        self.props.raw_value_bytes += value.len() as u64;
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        Ok(())
    }

    /// Closes the open data block (if any): compresses it when that pays, appends it with its
    /// trailer and records its index entry.
    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let raw = self.block.finish();
        let offset = self.out.len() as u64;
        let ctype = self.compressor.compress(raw, &mut self.scratch);
        let stored: &[u8] = if ctype == Compression::None { raw } else { &self.scratch };
        let size = u32::try_from(stored.len()).map_err(|_| invalid("value", "data block exceeds 4 GiB"))?;
        let sizes = (u32::try_from(self.blk_key_bytes), u32::try_from(self.blk_value_bytes));
        let (Ok(key_bytes), Ok(value_bytes)) = sizes else {
            return Err(invalid("value", "data block holds over 4 GiB of keys or values"));
        };
        self.out.extend_from_slice(stored);
        self.out.extend_from_slice(&trailer(stored, ctype as u8));
        if ctype != Compression::None {
            self.props.compressed_blocks += 1;
        }
        let entry = IndexEntry {
            first_key: std::mem::take(&mut self.blk_first),
            last_key: self.last_key.clone(),
            offset,
            size,
            rows: self.blk_rows,
            deletes: self.blk_deletes,
            min_lsn: self.blk_min_lsn,
            max_lsn: self.blk_max_lsn,
            users: if self.per_block() { self.blk_users } else { 0 },
            key_bytes: if self.per_block() { key_bytes } else { 0 },
            value_bytes: if self.per_block() { value_bytes } else { 0 },
        };
        self.index_bytes += entry.encoded_len(self.version);
        self.index.push(entry);
        if self.per_block() && self.opts.bloom_bits_per_key > 0 {
            self.filter.add_block(&self.blk_hashes);
        }
        self.blk_hashes.clear();
        self.block.reset();
        Ok(())
    }

    fn append_meta_block(&mut self, contents: &[u8]) -> Result<Handle> {
        self.append_block_of_type(contents, Compression::None)
    }

    fn append_block_of_type(&mut self, contents: &[u8], ctype: Compression) -> Result<Handle> {
        let offset = self.out.len() as u64;
        let size = u32::try_from(contents.len()).map_err(|_| invalid("extent", "meta block exceeds 4 GiB"))?;
        self.out.extend_from_slice(contents);
        self.out.extend_from_slice(&trailer(contents, ctype as u8));
        Ok(Handle { offset, size })
    }

    /// Appends the index block: in an extent of zstd data blocks (format 5 on) compressed with
    /// plain zstd when that saves 12.5 % (its keys share much), else as is.
    fn append_index_block(&mut self, contents: &[u8]) -> Result<Handle> {
        let zstd = self.compressor.kind().is_zstd();
        if zstd && self.version >= super::format::DICTIONARY_VERSION {
            let mut c = BlockCompressor::plain_zstd(self.opts.compression_level);
            let mut stored = Vec::new();
            if c.compress(contents, &mut stored) == Compression::Zstd {
                return self.append_block_of_type(&stored, Compression::Zstd);
            }
        }
        self.append_meta_block(contents)
    }

    /// Finishes the extent. An extent needs at least one entry.
    pub fn finish(mut self) -> Result<BuiltExtent> {
        if self.is_empty() {
            return Err(invalid("extent", "an extent needs at least one entry"));
        }
        self.flush_block()?;
        let data_size = self.out.len() as u64;
        let index_block = encode_index(&self.index, self.version);
        let index = self.append_index_block(&index_block)?;
        let bits = self.opts.bloom_bits_per_key;
        let filter = if bits > 0 {
            let f = if self.per_block() {
                self.filter.finish()
            } else {
                build_filter(&self.hashes, bits)
            };
            self.append_meta_block(&f)?
        } else {
            Handle {
                offset: self.out.len() as u64,
                size: 0,
            }
        };
        let dictionary = match self.dictionary.take() {
            Some(d) => Some(self.append_meta_block(d.bytes())?),
            None => None,
        };
        let blocks = u32::try_from(self.index.len()).map_err(|_| invalid("extent", "too many data blocks"))?;
        let mut props = std::mem::take(&mut self.props);
        props.format_version = self.version;
        props.compression = self.compressor.kind() as u8;
        props.largest = self.last_key.clone();
        props.data_blocks = blocks;
        props.data_size = data_size;
        props.index_size = index.size;
        props.filter_size = filter.size;
        props.bloom_bits_per_key = bits;
        props.dictionary = dictionary;
        props.hash_index_on_read = self.opts.hash_index && self.version >= super::format::DICTIONARY_VERSION;
        let props_block = props.encode();
        let props_handle = self.append_meta_block(&props_block)?;
        let valid_size = self.out.len() as u64;
        let slots = u32::try_from((valid_size + FOOTER_SIZE as u64).div_ceil(EXTENT_SIZE))
            .map_err(|_| invalid("extent", "extent too large"))?;
        let footer = Footer {
            version: self.version,
            slots,
            valid_size,
            index,
            filter,
            props: props_handle,
        }
        .encode()
        .to_vec();
        Ok(BuiltExtent {
            data_size: valid_size,
            valid: self.out,
            footer,
            slots,
            props,
            blocks,
            #[cfg(test)]
            index: self.index,
        })
    }
}
