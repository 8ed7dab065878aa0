//! [`ExtentBuilder`]: turns a sorted stream of internal-key entries into the bytes of one extent.
//!
//! Invariants:
//! - Entries are strictly increasing in internal-key order; a key out of order or malformed is
//!   refused with `Error::InvalidOption` and leaves the builder unchanged.
//! - [`ExtentBuilder::estimated_size`] and [`ExtentBuilder::estimated_size_after`] are upper
//!   bounds of the finished extent's `valid + FOOTER_SIZE` bytes (finished blocks are counted as
//!   stored, the open block uncompressed), so a caller that keeps them within [`EXTENT_SIZE`] gets
//!   a one-slot extent.
//! - The builder allocates per block, not per entry (apart from the filter's one u64 per
//!   distinct user key of the open block).
//! - Format 3 (the default): each index entry carries the block's user-key count and raw sizes,
//!   and the filter is per block. A block copied from a format-3 extent with a compatible filter
//!   is taken with its index entry and filter lines as they are (its checksum is verified, its
//!   entries are not decoded); blocks of older extents are decoded once to compute them.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use super::block::BlockBuilder;
use super::filter::{build_filter, filter_block_size, hash64, BlockFilterBuilder};
use super::format::{
    check_block, compress_lz4, decompress_lz4, encode_index, props_size_bound, trailer, ExtentProperties, Footer,
    Handle, IndexEntry, BLOCK_STATS_VERSION, EXTENT_FORMAT_VERSION, FOOTER_SIZE, TRAILER_SIZE,
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
    pub index: Vec<IndexEntry>,
}

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

/// A data block read verbatim for reuse by compaction: its index entry and stored bytes
/// (`contents ‖ trailer`, checksum verified), plus where it came from for errors.
#[derive(Clone, Debug)]
pub(crate) struct RawBlock {
    /// The block's index entry in its source extent.
    pub entry: IndexEntry,
    /// Contents and trailer exactly as stored.
    pub stored: Vec<u8>,
    /// Source file.
    pub path: Arc<Path>,
    /// Absolute offset of the block in the source file.
    pub file_offset: u64,
}

/// What a decoded copied block adds to the extent being built beyond its index entry (whose
/// rows, deletes and LSN range it was checked against).
struct AdoptedBlock {
    key_bytes: u64,
    value_bytes: u64,
    /// User keys the block starts (not continuing the previous block's last one).
    users: u64,
    /// All user keys in the block (counting one continued from the previous block).
    block_users: u32,
    /// The hashes the builder's filter takes: of the block's user keys for a per-block filter,
    /// of the ones it starts for an extent-wide one (empty without a filter).
    hashes: Vec<u64>,
    compressed: bool,
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
    /// Compression output buffer.
    scratch: Vec<u8>,
    /// Format version written (older versions only in tests of the readers' compatibility).
    version: u32,
    /// Blocks taken from other extents that had to be decoded (older source format or a
    /// filter whose lines do not fit).
    decoded_copies: u32,
}

/// Checks a data block copied from another extent (`stored` = contents ‖ trailer) against its
/// index entry `e`: trailer CRC, contents size, a known compression type. Returns the
/// contents and their compression.
fn check_stored<'a>(stored: &'a [u8], e: &IndexEntry) -> Result<(&'a [u8], Compression), String> {
    let (contents, ctype) = check_block(stored)?;
    if contents.len() != e.size as usize {
        return Err(format!(
            "reused block is {} bytes, index says {}",
            contents.len(),
            e.size
        ));
    }
    let compression = Compression::from_u8(ctype).ok_or_else(|| format!("unknown block compression type {ctype}"))?;
    Ok((contents, compression))
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        option,
        reason: reason.into(),
    }
}

impl ExtentBuilder {
    /// A builder; out-of-range options are clamped (see [`ExtentOptions::validate`]).
    pub fn new(opts: ExtentOptions) -> Self {
        Self::with_buffer(opts, Vec::new())
    }

    /// Like [`Self::new`], building into `buf` (cleared; its capacity is kept and raised to one
    /// slot). Flushes and compactions pass the buffer of the extent they just wrote, so a run of
    /// extents neither reallocates nor touches fresh memory for each one.
    pub fn with_buffer(opts: ExtentOptions, mut buf: Vec<u8>) -> Self {
        let opts = opts.sanitized();
        let filter = BlockFilterBuilder::new(opts.bloom_bits_per_key);
        buf.clear();
        buf.reserve(EXTENT_SIZE as usize);
        ExtentBuilder {
            block: BlockBuilder::with_hash_index(opts.restart_interval, opts.hash_index),
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
    pub fn entries(&self) -> u64 {
        self.props.entries
    }

    /// The last internal key added (empty before the first).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
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

    /// Appends a data block of another extent verbatim (compaction block reuse). Its keys must
    /// all sort after the last key added. The block is decoded once to check it against its
    /// index entry and to feed the filter; it is not re-encoded or recompressed.
    pub fn add_raw_block(&mut self, raw: &RawBlock) -> Result<()> {
        let (_, _, starts_user) = self.check_next(&raw.entry.first_key)?;
        // Close the open block so the reused one keeps its own boundaries.
        self.flush_block()?;
        let start = self.out.len();
        self.out.extend_from_slice(&raw.stored);
        self.adopt_raw(start, &raw.entry, starts_user, &raw.path, raw.file_offset)
    }

    /// Like [`Self::add_raw_block`] for data block `i` of `reader`, read from `file` straight
    /// into the extent being built (no intermediate buffer; the checksum is checked once, here).
    /// A block of a format-3 extent whose filter this builder can take lines from (or with no
    /// filter wanted) is not decoded: its index entry and filter lines are copied.
    pub fn copy_block(&mut self, reader: &ExtentReader, file: &dyn ReadableFile, i: usize) -> Result<()> {
        let e = reader.entry(i)?;
        // Whether the block's first user key differs from the last one added (else the block
        // continues that user key).
        let (_, _, starts_user) = self.check_next(&e.first_key)?;
        self.flush_block()?;
        let start = self.out.len();
        let at = reader.base() + e.offset;
        if let Err(err) = append_exact_at(file, reader.path(), &mut self.out, e.stored_size() as usize, at) {
            self.out.truncate(start);
            return Err(err);
        }
        if self.can_copy_stats(reader) {
            self.adopt_verbatim(start, e, starts_user, reader, i)
        } else {
            self.adopt_raw(start, e, starts_user, reader.path(), at)
        }
    }

    /// True if a block of `reader` can be taken without decoding it: this builder writes
    /// format 3, the source's index entries carry block stats, and either no filter is built
    /// or the source has a per-block filter of the same bits per key (so its lines are what
    /// this builder would compute).
    fn can_copy_stats(&self, reader: &ExtentReader) -> bool {
        self.per_block()
            && reader.format_version() >= BLOCK_STATS_VERSION
            && (self.opts.bloom_bits_per_key == 0
                || (reader.props().bloom_bits_per_key == self.opts.bloom_bits_per_key
                    && reader
                        .filter()
                        .is_some_and(|f| f.is_per_block() && f.probes() == self.filter.probes())))
    }

    /// Takes the stored block at `out[start..]`, data block `i` of `reader` (format 3, index
    /// entry `e`), as this extent's next one: checks its checksum and size, then copies its
    /// index entry and filter lines. On error the bytes are removed again and nothing is
    /// recorded.
    fn adopt_verbatim(
        &mut self,
        start: usize,
        e: &IndexEntry,
        starts_user: bool,
        reader: &ExtentReader,
        i: usize,
    ) -> Result<()> {
        let file_offset = reader.base() + e.offset;
        let compressed = match check_stored(&self.out[start..], e) {
            Ok((_, compression)) => compression == Compression::Lz4,
            Err(reason) => {
                self.out.truncate(start);
                return Err(Error::corruption(reader.path(), file_offset, reason));
            }
        };
        if self.opts.bloom_bits_per_key > 0 {
            let copied = reader.filter().is_some_and(|f| self.filter.copy_block(f, i));
            if !copied {
                self.out.truncate(start);
                return Err(Error::corruption(
                    reader.path(),
                    file_offset,
                    format!("block {i} has no filter lines to reuse"),
                ));
            }
        }
        // A first user key continuing the previous block's last one is counted there.
        let new_users = u64::from(e.users).saturating_sub(u64::from(!starts_user));
        let sizes = (u64::from(e.key_bytes), u64::from(e.value_bytes));
        let entry = IndexEntry {
            offset: start as u64,
            ..e.clone()
        };
        self.push_copied(entry, compressed, new_users, sizes);
        Ok(())
    }

    /// Records a copied block's index entry (at its new offset) and adds it to the properties:
    /// its rows, deletes and LSN range from the entry, `new_users` user keys not continuing the
    /// previous block, and its raw key and value bytes.
    fn push_copied(&mut self, entry: IndexEntry, compressed: bool, new_users: u64, (keys, values): (u64, u64)) {
        if compressed {
            self.props.compressed_blocks += 1;
        }
        if self.props.entries == 0 {
            self.props.smallest = entry.first_key.clone();
        }
        self.props.entries += u64::from(entry.rows);
        self.props.deletes += u64::from(entry.deletes);
        self.props.user_keys += new_users;
        self.props.min_lsn = self.props.min_lsn.min(entry.min_lsn);
        self.props.max_lsn = self.props.max_lsn.max(entry.max_lsn);
        self.props.raw_key_bytes += keys;
        self.props.raw_value_bytes += values;
        self.last_key.clone_from(&entry.last_key);
        self.index_bytes += entry.encoded_len(self.version);
        self.index.push(entry);
    }

    /// Takes the stored block (contents ‖ trailer) at `out[start..]`, copied from another
    /// extent where index entry `e` describes it, as this extent's next data block: checks its
    /// checksum and its contents against `e`, feeds the filter and records its index entry. On
    /// error the bytes are removed again and nothing is recorded.
    fn adopt_raw(
        &mut self,
        start: usize,
        e: &IndexEntry,
        starts_user: bool,
        path: &Path,
        file_offset: u64,
    ) -> Result<()> {
        let b = match self.check_raw(start, e, starts_user, path, file_offset) {
            Ok(b) => b,
            Err(err) => {
                self.out.truncate(start);
                return Err(err);
            }
        };
        let sizes = (u32::try_from(b.key_bytes), u32::try_from(b.value_bytes));
        let (Ok(key_bytes), Ok(value_bytes)) = sizes else {
            self.out.truncate(start);
            return Err(Error::corruption(path, file_offset, "reused block holds over 4 GiB"));
        };
        self.decoded_copies += 1;
        let per_block = self.per_block();
        let entry = IndexEntry {
            offset: start as u64,
            users: if per_block { b.block_users } else { 0 },
            key_bytes: if per_block { key_bytes } else { 0 },
            value_bytes: if per_block { value_bytes } else { 0 },
            ..e.clone()
        };
        // `check_raw` found the block's rows, deletes and LSN range equal to the entry's.
        self.push_copied(entry, b.compressed, b.users, (b.key_bytes, b.value_bytes));
        if self.opts.bloom_bits_per_key > 0 {
            if per_block {
                self.filter.add_block(&b.hashes);
            } else {
                self.hashes.extend_from_slice(&b.hashes);
            }
        }
        Ok(())
    }

    /// The checks of [`Self::adopt_raw`], returning what the block adds to the extent.
    fn check_raw(
        &self,
        start: usize,
        e: &IndexEntry,
        starts_user: bool,
        path: &Path,
        file_offset: u64,
    ) -> Result<AdoptedBlock> {
        let corrupt = |reason: String| Error::corruption(path, file_offset, reason);
        let (contents, compression) = check_stored(&self.out[start..], e).map_err(corrupt)?;
        let decoded;
        let data: &[u8] = match compression {
            Compression::None => contents,
            Compression::Lz4 => {
                decoded = decompress_lz4(contents).map_err(corrupt)?;
                &decoded
            }
        };
        let (mut rows, mut deletes, mut min_lsn, mut max_lsn) = (0u32, 0u32, Lsn::MAX, 0);
        let (mut key_bytes, mut value_bytes) = (0u64, 0u64);
        let (mut users, mut block_users) = (0u64, 0u32);
        let mut hashes = Vec::new();
        let mut first = true;
        let bloom = self.opts.bloom_bits_per_key > 0;
        let per_block = self.per_block();
        // `scan_entries` checks the keys' order within the block; `check_next` above checked
        // the first one against what the builder holds (and gave `starts_user`).
        let block_last = scan_entries(data, path, file_offset, |k, value_len, new_user| {
            let Some((user, lsn, kind)) = decode_internal_key(k) else {
                return Err(corrupt("reused block holds a malformed internal key".into()));
            };
            // The block's first user key may continue the previous block's.
            let (new_user, in_block_new) = if first {
                if k != &e.first_key[..] {
                    return Err(corrupt("reused block's first key differs from its index entry".into()));
                }
                (starts_user, true)
            } else {
                (new_user, new_user)
            };
            users += u64::from(new_user);
            block_users += u32::from(in_block_new);
            if bloom && (if per_block { in_block_new } else { new_user }) {
                hashes.push(hash64(user));
            }
            rows += 1;
            deletes += u32::from(kind == ValueKind::Delete);
            key_bytes += k.len() as u64;
            value_bytes += value_len as u64;
            min_lsn = min_lsn.min(lsn);
            max_lsn = max_lsn.max(lsn);
            first = false;
            Ok(())
        })?;
        // Index entries of format 3 also carry the block's user-key count and raw sizes.
        let stats_differ = e.users != 0
            && (e.users != block_users
                || u64::from(e.key_bytes) != key_bytes
                || u64::from(e.value_bytes) != value_bytes);
        if first
            || block_last != e.last_key
            || rows != e.rows
            || deletes != e.deletes
            || min_lsn != e.min_lsn
            || max_lsn != e.max_lsn
            || stats_differ
        {
            return Err(corrupt("reused block's contents differ from its index entry".into()));
        }
        Ok(AdoptedBlock {
            key_bytes,
            value_bytes,
            users,
            block_users,
            hashes,
            compressed: compression == Compression::Lz4,
        })
    }

    /// Closes the open data block (if any): compresses it when that pays, appends it with its
    /// trailer and records its index entry.
    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let raw = self.block.finish();
        let offset = self.out.len() as u64;
        let (stored, ctype): (&[u8], Compression) =
            if self.opts.compression == Compression::Lz4 && compress_lz4(raw, &mut self.scratch) {
                (&self.scratch, Compression::Lz4)
            } else {
                (raw, Compression::None)
            };
        let size = u32::try_from(stored.len()).map_err(|_| invalid("value", "data block exceeds 4 GiB"))?;
        let sizes = (u32::try_from(self.blk_key_bytes), u32::try_from(self.blk_value_bytes));
        let (Ok(key_bytes), Ok(value_bytes)) = sizes else {
            return Err(invalid("value", "data block holds over 4 GiB of keys or values"));
        };
        self.out.extend_from_slice(stored);
        self.out.extend_from_slice(&trailer(stored, ctype as u8));
        if ctype == Compression::Lz4 {
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

    /// Upper bound of the filter block with its trailer if finished now.
    fn filter_bound(&self) -> usize {
        if self.opts.bloom_bits_per_key == 0 {
            0
        } else if self.per_block() {
            let size = if self.block.is_empty() {
                self.filter.size()
            } else {
                self.filter.size_after_block(self.blk_hashes.len())
            };
            size + TRAILER_SIZE
        } else {
            filter_block_size(self.hashes.len(), self.opts.bloom_bits_per_key) + TRAILER_SIZE
        }
    }

    /// Upper bound of how much [`Self::filter_bound`] grows with one more entry.
    fn filter_growth_bound(&self) -> usize {
        if self.opts.bloom_bits_per_key == 0 {
            0
        } else if self.per_block() {
            // One more line in the open block, or a new block of one line and its end.
            64 + 4
        } else {
            let keys = self.hashes.len();
            let bits = self.opts.bloom_bits_per_key;
            filter_block_size(keys + 1, bits) - filter_block_size(keys, bits)
        }
    }

    /// Bytes the finished extent would need (`valid` + footer) if finished now; an upper bound.
    pub fn estimated_size(&self) -> usize {
        let mut data = self.out.len();
        let mut index = self.index_bytes + 4 + TRAILER_SIZE;
        if !self.block.is_empty() {
            data += self.block.size_estimate() + TRAILER_SIZE;
            index += IndexEntry::encoded_len_bound(self.blk_first.len(), self.last_key.len());
        }
        let props = props_size_bound(self.props.smallest.len(), self.last_key.len()) + TRAILER_SIZE;
        data + index + self.filter_bound() + props + FOOTER_SIZE
    }

    /// Upper bound of [`Self::estimated_size`] after adding an entry with these lengths next.
    pub fn estimated_size_after(&self, ikey_len: usize, value_len: usize) -> usize {
        let filter_growth = self.filter_growth_bound();
        // New entry (≤ 15 header bytes), a possible restart point with its region checksum,
        // and if it opens a new block: that block's tail checksum, footer and trailer and its
        // index entry; props keys may grow.
        self.estimated_size()
            + 15
            + ikey_len
            + value_len
            + 8
            + 8
            + TRAILER_SIZE
            + IndexEntry::encoded_len_bound(ikey_len, ikey_len)
            + filter_growth
            + 2 * ikey_len
    }

    /// Upper bound of [`Self::estimated_size`] after adding entries with these (internal key,
    /// value) lengths next, in one go (e.g. the versions of one user key). Counts every entry's
    /// bytes and filter bits, and the cost of each block the entries may open.
    pub fn estimated_size_after_entries(&self, lens: impl IntoIterator<Item = (usize, usize)>) -> usize {
        let (mut bytes, mut keys, mut max_key) = (0usize, 0usize, 0usize);
        for (k, v) in lens {
            // Entry header, a restart point and its region checksum.
            bytes += 15 + k + v + 8;
            keys += 1;
            max_key = max_key.max(k);
        }
        if keys == 0 {
            return self.estimated_size();
        }
        // A block closes once 90 % full, so the entries open at most this many blocks (one
        // right away, then one per 90 % of a block).
        let block = (self.opts.block_size * 9 / 10).max(1);
        let blocks = 2 + bytes / block;
        let per_block = 8 + 8 + TRAILER_SIZE + IndexEntry::encoded_len_bound(max_key, max_key) + 64 + 4;
        let filter = keys * (self.opts.bloom_bits_per_key as usize).div_ceil(8) + 64;
        self.estimated_size() + bytes + blocks * per_block + filter + 2 * max_key
    }

    /// Upper bound of [`Self::estimated_size`] after [`Self::copy_block`] of data block `i` of
    /// `reader`: the block, its index entry, its filter lines and the properties' keys.
    pub fn estimated_size_after_copy(&self, reader: &ExtentReader, i: usize) -> Result<usize> {
        let e = reader.entry(i)?;
        let bits = self.opts.bloom_bits_per_key as usize;
        let filter = if bits == 0 {
            0
        } else if self.can_copy_stats(reader) {
            reader.filter().and_then(|f| f.block_line_count(i)).unwrap_or(0) * 64 + 4
        } else {
            // Decoded: at most one filter key per entry.
            (e.rows as usize * bits).div_ceil(512) * 64 + 64 + 4
        };
        let key = e.first_key.len().max(e.last_key.len());
        Ok(self.estimated_size()
            + e.stored_size() as usize
            + IndexEntry::encoded_len_bound(e.first_key.len(), e.last_key.len())
            + filter
            + 2 * key)
    }

    fn append_meta_block(&mut self, contents: &[u8]) -> Result<Handle> {
        let offset = self.out.len() as u64;
        let size = u32::try_from(contents.len()).map_err(|_| invalid("extent", "meta block exceeds 4 GiB"))?;
        self.out.extend_from_slice(contents);
        self.out.extend_from_slice(&trailer(contents, Compression::None as u8));
        Ok(Handle { offset, size })
    }

    /// Finishes the extent. An extent needs at least one entry.
    pub fn finish(mut self) -> Result<BuiltExtent> {
        if self.is_empty() {
            return Err(invalid("extent", "an extent needs at least one entry"));
        }
        self.flush_block()?;
        let data_size = self.out.len() as u64;
        let index_block = encode_index(&self.index, self.version);
        let index = self.append_meta_block(&index_block)?;
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
        let blocks = u32::try_from(self.index.len()).map_err(|_| invalid("extent", "too many data blocks"))?;
        let mut props = std::mem::take(&mut self.props);
        props.format_version = self.version;
        props.largest = self.last_key.clone();
        props.data_blocks = blocks;
        props.data_size = data_size;
        props.index_size = index.size;
        props.filter_size = filter.size;
        props.bloom_bits_per_key = bits;
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
            index: self.index,
        })
    }
}
