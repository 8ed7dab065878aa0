//! Size estimates of the extent being built: upper bounds of its finished size now, after more
//! entries, or after a copied block, which callers use to keep an extent within one slot.
//!
//! Invariants:
//! - Every estimate is an upper bound of the finished extent's `valid + FOOTER_SIZE` bytes:
//!   finished blocks count as stored, the open block uncompressed, the index, filter and
//!   properties at their worst case.

use super::*;

impl ExtentBuilder {
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
    #[cfg(test)]
    fn filter_growth_bound(&self) -> usize {
        if self.opts.bloom_bits_per_key == 0 {
            0
        } else if self.per_block() {
            // One more line in the open block, or a new block of one line (plus the line the
            // carried rounding may add) and its end.
            2 * 64 + 4
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
        data + index + self.filter_bound() + self.dictionary_bound() + props + FOOTER_SIZE
    }

    /// Bytes the dictionary block takes (with its trailer), 0 without a dictionary.
    fn dictionary_bound(&self) -> usize {
        self.dictionary.as_ref().map_or(0, |d| d.bytes().len() + TRAILER_SIZE)
    }

    /// Upper bound of [`Self::estimated_size`] after adding an entry with these lengths next.
    #[cfg(test)]
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
        let lines = if self.opts.bloom_bits_per_key > 0 && self.can_copy_stats(reader) {
            Some(reader.filter().and_then(|f| f.block_line_count(i)).unwrap_or(0))
        } else {
            None
        };
        Ok(self.size_after_block(e, e.stored_size() as usize, lines))
    }

    /// Upper bound of [`Self::estimated_size`] after [`Self::add_raw_block`] of `raw`: the
    /// block as stored there, its index entry, filter lines for every entry (it is decoded) and
    /// the properties' keys.
    pub fn estimated_size_after_raw(&self, raw: &RawBlock) -> usize {
        self.size_after_block(&raw.entry, raw.stored.len(), None)
    }

    /// [`Self::estimated_size`] plus a block of `stored` bytes described by `e`: its index
    /// entry, its filter (`filter_lines` copied lines, or `None`: decoded, at most one filter
    /// key per entry) and the properties' keys.
    fn size_after_block(&self, e: &IndexEntry, stored: usize, filter_lines: Option<usize>) -> usize {
        let bits = self.opts.bloom_bits_per_key as usize;
        let filter = match filter_lines {
            _ if bits == 0 => 0,
            Some(lines) => lines * 64 + 4,
            None => (e.rows as usize * bits).div_ceil(512) * 64 + 64 + 4,
        };
        let key = e.first_key.len().max(e.last_key.len());
        self.estimated_size()
            + stored
            + IndexEntry::encoded_len_bound(e.first_key.len(), e.last_key.len())
            + filter
            + 2 * key
    }
}
