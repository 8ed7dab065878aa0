//! Block reuse: appending a data block of another extent to the extent being built without
//! re-encoding it (compaction with data reuse), verbatim when its format allows, decoded once
//! otherwise. A block of an extent written with another codec is recompressed first
//! ([`ExtentBuilder::recompressed_block`]): its entries are not re-encoded, but its bytes are
//! stored as this builder's codec stores them.
//!
//! Invariants:
//! - A reused block's keys sort after everything added so far; its stored bytes are checked
//!   (trailer CRC, size, compression type) against its index entry before they are taken.
//! - A block from a format-3 extent with a compatible filter is taken with its index entry and
//!   filter lines as they are (its entries are not decoded); any other block is decoded once to
//!   check its rows, deletes and LSN range and to compute its statistics and filter hashes.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::extent::codec::decompress;

/// A data block read for reuse by compaction: its index entry and stored bytes (`contents ‖
/// trailer`, checksum verified), plus where it came from for errors. Read verbatim
/// ([`ExtentReader::read_raw_block`]) or recompressed ([`ExtentBuilder::recompressed_block`];
/// then the entry's size is the new one).
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
    /// The id of the zstd dictionary `stored` needs if it is a type-3 block (its source
    /// extent's, or this builder's once recompressed).
    pub dict_id: Option<u64>,
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

/// The trailer type of a stored block (`contents ‖ trailer`), if it has one.
fn stored_type(stored: &[u8]) -> Option<Compression> {
    let at = stored.len().checked_sub(TRAILER_SIZE)?;
    Compression::from_u8(*stored.get(at)?)
}

fn foreign_dictionary() -> Error {
    Error::InvalidOption {
        option: "block",
        reason: "a block compressed with another zstd dictionary cannot be copied verbatim; recompress it".into(),
    }
}

impl ExtentBuilder {
    /// True if blocks of `reader` are stored with another codec (or another zstd dictionary)
    /// than this builder's, so that [`Self::copy_block`] would keep the source's codec: a
    /// compaction recompresses them ([`Self::recompressed_block`]) instead.
    pub fn recompresses(&self, reader: &ExtentReader) -> bool {
        reader.props().compression != self.compressor.kind() as u8
            || reader.dictionary().map(|d| d.id()) != self.compressor.dict_id()
    }

    /// Reads data block `i` of `reader` (checksum verified) and stores its contents with this
    /// builder's codec (raw if that does not save 12.5 %), for [`Self::add_raw_block`]. Its
    /// entries are neither decoded nor re-encoded here.
    pub fn recompressed_block(&mut self, reader: &ExtentReader, file: &dyn ReadableFile, i: usize) -> Result<RawBlock> {
        let raw = reader.read_raw_block(file, i)?;
        let corrupt = |reason: String| Error::corruption(&*raw.path, raw.file_offset, reason);
        let (contents, ctype) = check_stored(&raw.stored, &raw.entry).map_err(corrupt)?;
        let plain = decompress(ctype, contents, reader.dictionary().map(|d| &**d)).map_err(corrupt)?;
        let kind = self.compressor.compress(&plain, &mut self.scratch);
        let body: &[u8] = if kind == Compression::None {
            &plain
        } else {
            &self.scratch
        };
        let size = u32::try_from(body.len()).map_err(|_| corrupt("recompressed block exceeds 4 GiB".into()))?;
        let mut stored = Vec::with_capacity(body.len() + TRAILER_SIZE);
        stored.extend_from_slice(body);
        stored.extend_from_slice(&trailer(body, kind as u8));
        Ok(RawBlock {
            entry: IndexEntry { size, ..raw.entry },
            stored,
            path: raw.path,
            file_offset: raw.file_offset,
            dict_id: self.compressor.dict_id(),
        })
    }

    /// Appends a data block of another extent (compaction block reuse), as read by
    /// [`ExtentReader::read_raw_block`] or [`Self::recompressed_block`]. Its keys must all
    /// sort after the last key added. The block is decoded once to check it against its index
    /// entry and to feed the filter; it is not re-encoded.
    pub fn add_raw_block(&mut self, raw: &RawBlock) -> Result<()> {
        if stored_type(&raw.stored).is_some_and(Compression::needs_dict) && raw.dict_id != self.compressor.dict_id() {
            return Err(foreign_dictionary());
        }
        let (_, _, starts_user) = self.check_next(&raw.entry.first_key)?;
        // Close the open block so the reused one keeps its own boundaries.
        self.flush_block()?;
        let start = self.out.len();
        self.out.extend_from_slice(&raw.stored);
        self.adopt_raw(start, &raw.entry, starts_user, &raw.path, raw.file_offset)
    }

    /// Like `Self::add_raw_block` for data block `i` of `reader`, read from `file` straight
    /// into the extent being built (no intermediate buffer; the checksum is checked once, here).
    /// A block of a format-3 extent whose filter this builder can take lines from (or with no
    /// filter wanted) is not decoded: its index entry and filter lines are copied.
    pub fn copy_block(&mut self, reader: &ExtentReader, file: &dyn ReadableFile, i: usize) -> Result<()> {
        // Type-3 and type-5 blocks decode only with their own dictionary (callers recompress them first,
        // `Self::recompresses`); refuse rather than write an extent that cannot be read.
        if Compression::from_u8(reader.props().compression).is_some_and(Compression::needs_dict)
            && reader.dictionary().map(|d| d.id()) != self.compressor.dict_id()
        {
            return Err(foreign_dictionary());
        }
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
    pub(super) fn can_copy_stats(&self, reader: &ExtentReader) -> bool {
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
            Ok((_, compression)) => compression != Compression::None,
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
            codec => {
                // A type-3 block is only copied between extents with the same dictionary
                // (`recompresses`), which is this builder's.
                decoded = decompress(codec, contents, self.dictionary.as_deref()).map_err(corrupt)?;
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
            compressed: compression != Compression::None,
        })
    }
}
