//! The extent's bloom filters over user keys: cache-local ("blocked") bloom filters, one 64-bit
//! hash per key, all probes of a key inside one 512-bit cache line (the layout of RocksDB's
//! `FastLocalBloom`), so a negative lookup costs one cache miss.
//!
//! ```text
//! kind 1 (formats 1, 2): bits[64 * lines] ‖ probes u8 ‖ kind u8 (= 1)
//!   one filter over the extent's distinct user keys
//! kind 2 (format 3):     bits[64 * lines] ‖ fixed32 end_line[blocks] ‖ fixed32 blocks ‖
//!                        probes u8 ‖ kind u8 (= 2)
//!   data block i owns lines end_line[i-1]..end_line[i] (from 0 for i = 0): a filter over the
//!   user keys in that block, sized for them
//! ```
//!
//! Kind 2 lets a compaction copy a block's lines along with the block instead of hashing its
//! keys again; a lookup picks the block with the index first, then probes that block's lines.
//!
//! Invariants:
//! - `hash64` is part of the on-disk format (a reader must compute the same bits); it is
//!   defined below and in `docs/format.md` and must never change for filter kinds 1 and 2.
//! - No false negatives: every key added is reported as possibly present (for kind 2: by the
//!   filter of every block that holds a version of it).
//! - Lines are only copied between kind-2 filters with the same probe count (the bits a key
//!   sets depend on nothing else).
//! - Parsing checks the length and the trailing bytes; a malformed filter is corruption.

use super::MAX_BLOOM_BITS_PER_KEY;

/// Filter kind byte of the extent-wide filter (extent formats 1 and 2).
pub(crate) const FILTER_KIND_LOCAL_BLOOM: u8 = 1;
/// Filter kind byte of the per-block filter (extent format 3).
pub(crate) const FILTER_KIND_BLOCK_BLOOM: u8 = 2;

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// The 64-bit hash of the filter (xxHash64-style mixing, one lane): stable, part of the format.
///
/// ```text
/// h = P5 + len
/// for each full 8-byte little-endian word w: h ^= rotl(w * P2, 31) * P1; h = rotl(h, 27) * P1 + P4
/// if 1..7 bytes remain, zero-pad them into a word w: h ^= rotl(w * P5, 11) * P1; h = rotl(h, 23) * P2 + P3
/// h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32
/// ```
#[inline]
pub(crate) fn hash64(data: &[u8]) -> u64 {
    let mut h = P5.wrapping_add(data.len() as u64);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        let w = u64::from_le_bytes(a);
        h ^= w.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1);
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut a = [0u8; 8];
        a[..rem.len()].copy_from_slice(rem);
        let w = u64::from_le_bytes(a);
        h ^= w.wrapping_mul(P5).rotate_left(11).wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^= h >> 32;
    h
}

/// The filter hash of a user key; compute it once and probe many extents with
/// [`super::ExtentReader::may_contain_hash`].
#[inline]
pub(crate) fn filter_hash(user_key: &[u8]) -> u64 {
    hash64(user_key)
}

/// Number of probes for a bits-per-key setting (RocksDB's choice for its local bloom, which
/// minimizes the false-positive rate for 512-bit lines).
pub(crate) fn num_probes(bits_per_key: u32) -> u8 {
    let millibits = bits_per_key.saturating_mul(1000);
    match millibits {
        0..=2080 => 1,
        2081..=3580 => 2,
        3581..=5100 => 3,
        5101..=6640 => 4,
        6641..=8300 => 5,
        8301..=10070 => 6,
        10071..=11720 => 7,
        11721..=14001 => 8,
        14002..=16050 => 9,
        16051..=18300 => 10,
        18301..=22001 => 11,
        22002..=25501 => 12,
        25502..=50000 => ((millibits - 1) / 2000 - 1) as u8,
        _ => 24,
    }
}

/// Number of 64-byte lines for `keys` keys (at least one).
pub(crate) fn num_lines(keys: usize, bits_per_key: u32) -> usize {
    (keys.saturating_mul(bits_per_key as usize)).div_ceil(512).max(1)
}

/// Size of the filter block (without trailer) for `keys` keys.
pub(crate) fn filter_block_size(keys: usize, bits_per_key: u32) -> usize {
    num_lines(keys, bits_per_key) * 64 + 2
}

/// Bit positions of a hash: the line, then `probes` bits inside it.
#[inline]
fn line_of(h: u64, lines: usize) -> usize {
    // FastRange32 over the low 32 bits.
    (((h as u32) as u64 * lines as u64) >> 32) as usize
}

/// Sets the bits of hash `h` in `bits` (whole 64-byte lines).
fn set_bits(bits: &mut [u8], probes: u8, h: u64) {
    let lines = bits.len() / 64;
    let base = line_of(h, lines) * 64;
    let mut x = (h >> 32) as u32;
    for _ in 0..probes {
        let bit = (x >> (32 - 9)) as usize;
        bits[base + (bit >> 3)] |= 1 << (bit & 7);
        x = x.wrapping_mul(0x9e37_79b9);
    }
}

/// Builds an extent-wide filter block (kind 1) from user-key hashes.
pub(crate) fn build_filter(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let bits_per_key = bits_per_key.clamp(1, MAX_BLOOM_BITS_PER_KEY);
    let lines = num_lines(hashes.len(), bits_per_key);
    let probes = num_probes(bits_per_key);
    let mut out = vec![0u8; lines * 64 + 2];
    for &h in hashes {
        set_bits(&mut out[..lines * 64], probes, h);
    }
    out[lines * 64] = probes;
    out[lines * 64 + 1] = FILTER_KIND_LOCAL_BLOOM;
    out
}

/// Builds a per-block filter block (kind 2), one data block at a time.
#[derive(Debug)]
pub(crate) struct BlockFilterBuilder {
    bits: Vec<u8>,
    ends: Vec<u32>,
    bits_per_key: u32,
    probes: u8,
    /// Bits the blocks hashed so far were given beyond (negative: short of) `bits_per_key` per
    /// key; the next block's line count evens it out (kept within one line either way).
    carry_bits: i64,
}

impl BlockFilterBuilder {
    pub(crate) fn new(bits_per_key: u32) -> Self {
        let bits_per_key = bits_per_key.clamp(1, MAX_BLOOM_BITS_PER_KEY);
        BlockFilterBuilder {
            bits: Vec::new(),
            ends: Vec::new(),
            bits_per_key,
            probes: num_probes(bits_per_key),
            carry_bits: 0,
        }
    }

    /// Lines for the next block of `keys` user keys: its `bits_per_key` share rounded to the
    /// nearest line, at least one, with the rounding carried to the next block, so an extent's
    /// filter takes `bits_per_key` bits per key on average instead of a part line more per
    /// block (at 10 bits and 16 KiB blocks of 100-byte rows: 11.4 bits per key).
    fn lines_for(&mut self, keys: usize) -> usize {
        let want = keys as i64 * i64::from(self.bits_per_key) - self.carry_bits;
        let lines = ((want + 256) / 512).max(1);
        self.carry_bits = (lines * 512 - want).clamp(-512, 512);
        lines as usize
    }

    /// Adds the next data block's filter, over the hashes of its user keys.
    pub(crate) fn add_block(&mut self, hashes: &[u64]) {
        let start = self.bits.len();
        let lines = self.lines_for(hashes.len());
        self.bits.resize(start + lines * 64, 0);
        for &h in hashes {
            set_bits(&mut self.bits[start..], self.probes, h);
        }
        self.ends.push((self.bits.len() / 64) as u32);
    }

    /// Adds the next data block's filter by copying block `block`'s lines of `from`; false
    /// (nothing added) if `from` is not a per-block filter with this builder's probe count.
    pub(crate) fn copy_block(&mut self, from: &Filter, block: usize) -> bool {
        let Some(lines) = from.block_lines(block).filter(|_| from.probes == self.probes) else {
            return false;
        };
        for l in lines {
            self.bits.extend_from_slice(&l.0);
        }
        self.ends.push((self.bits.len() / 64) as u32);
        true
    }

    /// Probes per key.
    pub(crate) fn probes(&self) -> u8 {
        self.probes
    }

    /// Size of the filter block finished now.
    pub(crate) fn size(&self) -> usize {
        self.bits.len() + 4 * self.ends.len() + 6
    }

    /// Upper bound of [`Self::size`] after adding a block of `keys` user keys (the carried
    /// rounding may add one line to the block's own share).
    pub(crate) fn size_after_block(&self, keys: usize) -> usize {
        self.size() + (num_lines(keys, self.bits_per_key) + 1) * 64 + 4
    }

    /// The filter block contents.
    pub(crate) fn finish(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size());
        out.extend_from_slice(&self.bits);
        for e in &self.ends {
            out.extend_from_slice(&e.to_le_bytes());
        }
        out.extend_from_slice(&(self.ends.len() as u32).to_le_bytes());
        out.push(self.probes);
        out.push(FILTER_KIND_BLOCK_BLOOM);
        out
    }
}

/// One 512-bit filter line, aligned so that a probe touches exactly one CPU cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A parsed filter block.
#[derive(Clone)]
pub(crate) struct Filter {
    bits: Vec<Line>,
    lines: usize,
    probes: u8,
    /// Kind 2: each data block's end line (exclusive); empty for kind 1.
    block_ends: Vec<u32>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("lines", &self.lines)
            .field("probes", &self.probes)
            .field("per_block", &self.is_per_block())
            .finish()
    }
}

impl Filter {
    /// Parses a filter block of an extent with `blocks` data blocks; `Err(reason)` if
    /// malformed.
    pub(crate) fn parse(block: &[u8], blocks: usize) -> Result<Filter, String> {
        let n = block.len();
        if n < 2 {
            return Err(format!("filter block has a bad length {n}"));
        }
        let probes = block[n - 2];
        let kind = block[n - 1];
        if probes == 0 || probes > 24 {
            return Err(format!("filter has a bad probe count {probes}"));
        }
        let (bits_len, block_ends) = match kind {
            FILTER_KIND_LOCAL_BLOOM => (n - 2, Vec::new()),
            FILTER_KIND_BLOCK_BLOOM => {
                let count_at = n
                    .checked_sub(6)
                    .ok_or_else(|| format!("filter block has a bad length {n}"))?;
                let mut c = [0u8; 4];
                c.copy_from_slice(&block[count_at..count_at + 4]);
                let count = u32::from_le_bytes(c) as usize;
                if count != blocks {
                    return Err(format!("filter covers {count} blocks, the extent has {blocks}"));
                }
                let ends_at = count
                    .checked_mul(4)
                    .and_then(|b| count_at.checked_sub(b))
                    .ok_or_else(|| format!("filter block of {n} bytes cannot hold {count} block ends"))?;
                let ends: Vec<u32> = block[ends_at..count_at]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let mut prev = 0u32;
                for (i, &e) in ends.iter().enumerate() {
                    if e <= prev {
                        return Err(format!("filter of block {i} ends at line {e}, before it starts"));
                    }
                    prev = e;
                }
                if ends_at % 64 != 0
                    || ends
                        .last()
                        .is_some_and(|&e| (e as usize).checked_mul(64) != Some(ends_at))
                {
                    return Err(format!(
                        "filter lines ({ends_at} bytes) disagree with the last block's end line {prev}"
                    ));
                }
                (ends_at, ends)
            }
            _ => return Err(format!("unknown filter kind {kind}")),
        };
        if bits_len < 64 || !bits_len.is_multiple_of(64) {
            return Err(format!("filter block has a bad length {n}"));
        }
        let bits = block[..bits_len]
            .chunks_exact(64)
            .map(|c| {
                let mut l = Line([0; 64]);
                l.0.copy_from_slice(c);
                l
            })
            .collect::<Vec<_>>();
        Ok(Filter {
            lines: bits.len(),
            bits,
            probes,
            block_ends,
        })
    }

    /// Probes per key.
    pub(crate) fn probes(&self) -> u8 {
        self.probes
    }

    /// True for a per-block filter (kind 2).
    pub(crate) fn is_per_block(&self) -> bool {
        !self.block_ends.is_empty()
    }

    /// The lines of data block `block` (kind 2; `None` for kind 1 or out of range).
    fn block_lines(&self, block: usize) -> Option<&[Line]> {
        let end = *self.block_ends.get(block)? as usize;
        let start = if block == 0 {
            0
        } else {
            self.block_ends[block - 1] as usize
        };
        self.bits.get(start..end)
    }

    /// Number of lines of data block `block` (kind 2; `None` for kind 1 or out of range).
    pub(crate) fn block_line_count(&self, block: usize) -> Option<usize> {
        self.block_lines(block).map(<[Line]>::len)
    }

    /// The line a probe of hash `h` in data block `block` reads (kind 1 ignores the block).
    #[inline]
    fn line(&self, block: usize, h: u64) -> Option<&Line> {
        if self.block_ends.is_empty() {
            return self.bits.get(line_of(h, self.lines));
        }
        let lines = self.block_lines(block)?;
        lines.get(line_of(h, lines.len()))
    }

    /// False only if the user key with this [`filter_hash`] is certainly not in data block
    /// `block` (kind 2) or not in the extent at all (kind 1).
    #[inline]
    pub(crate) fn may_contain_hash(&self, block: usize, h: u64) -> bool {
        let Some(Line(line)) = self.line(block, h) else {
            return true;
        };
        let mut x = (h >> 32) as u32;
        for _ in 0..self.probes {
            let bit = (x >> (32 - 9)) as usize;
            if line[bit >> 3] & (1 << (bit & 7)) == 0 {
                return false;
            }
            x = x.wrapping_mul(0x9e37_79b9);
        }
        true
    }

    /// Starts loading the line [`Self::may_contain_hash`] will read for `h` into the CPU cache.
    #[inline]
    pub(crate) fn prefetch(&self, block: usize, h: u64) {
        if let Some(Line(line)) = self.line(block, h) {
            super::prefetch(line, 0);
        }
    }

    /// Memory held by the filter.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.bits.capacity() * std::mem::size_of::<Line>() + self.block_ends.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable() {
        // Pinned values: the hash is part of the on-disk format.
        let pinned: Vec<u64> = [&b""[..], b"a", b"abcdefgh", b"abcdefghi", b"hello, world"]
            .iter()
            .map(|k| hash64(k))
            .collect();
        assert_eq!(
            pinned,
            vec![
                0xef46_db37_51d8_e999,
                0x2723_6889_ac5d_fad7,
                0x3ad3_5177_5b46_34b7,
                0x65fe_d5f9_a312_f07d,
                0x8b7d_7d7c_b21f_516e
            ]
        );
        assert_ne!(hash64(b"a"), hash64(b"a\0"));
        assert_ne!(hash64(b""), hash64(b"\0"));
        assert_ne!(hash64(b"abcdefgh"), hash64(b"abcdefgh\0"));
    }

    #[test]
    fn probes_follow_bits_per_key() {
        assert_eq!(num_probes(1), 1);
        assert_eq!(num_probes(10), 6);
        assert_eq!(num_probes(16), 9);
        assert_eq!(num_probes(30), 13);
        assert_eq!(num_probes(64), 24);
    }

    fn key(i: u64) -> Vec<u8> {
        format!("user{i:016}").into_bytes()
    }

    #[test]
    fn false_positive_rate_near_one_percent_at_ten_bits() {
        let n = 100_000u64;
        let hashes: Vec<u64> = (0..n).map(|i| hash64(&key(i))).collect();
        let f = Filter::parse(&build_filter(&hashes, 10), 1).unwrap();
        for i in 0..n {
            assert!(f.may_contain_hash(0, hash64(&key(i))), "false negative for key {i}");
        }
        let probes = 200_000u64;
        let fp = (n..n + probes)
            .filter(|&i| f.may_contain_hash(0, hash64(&key(i))))
            .count();
        let rate = fp as f64 / probes as f64;
        assert!(rate < 0.02, "false-positive rate {rate}");
        assert!(rate > 0.002, "implausibly low false-positive rate {rate}");
    }

    #[test]
    fn tiny_and_empty_filters() {
        let f = Filter::parse(&build_filter(&[], 10), 1).unwrap();
        assert!(!f.may_contain_hash(0, hash64(b"x")), "an empty filter has no bits set");
        let h = hash64(b"only");
        let f = Filter::parse(&build_filter(&[h], 1), 1).unwrap();
        assert!(f.may_contain_hash(0, h));
    }

    #[test]
    fn malformed_filters_are_rejected() {
        assert!(Filter::parse(&[], 1).is_err());
        assert!(Filter::parse(&[0; 65], 1).is_err());
        let mut good = build_filter(&[1, 2, 3], 10);
        assert!(Filter::parse(&good, 1).is_ok());
        let n = good.len();
        good[n - 1] = 3;
        assert!(Filter::parse(&good, 1).is_err());
        good[n - 1] = FILTER_KIND_BLOCK_BLOOM;
        assert!(Filter::parse(&good, 1).is_err(), "kind 2 needs block ends");
        good[n - 1] = 1;
        good[n - 2] = 0;
        assert!(Filter::parse(&good, 1).is_err());
        good[n - 2] = 25;
        assert!(Filter::parse(&good, 1).is_err());
    }

    /// Hashes of `n` keys starting at `from`.
    fn hashes(from: u64, n: u64) -> Vec<u64> {
        (from..from + n).map(|i| hash64(&key(i))).collect()
    }

    #[test]
    fn per_block_filters_answer_for_their_block_only() {
        let mut b = BlockFilterBuilder::new(10);
        let sizes = [400u64, 1, 37, 0, 1000];
        let mut from = 0;
        for &n in &sizes {
            b.add_block(&hashes(from, n));
            from += n;
        }
        let enc = b.finish();
        assert_eq!(enc.len(), b.size());
        let f = Filter::parse(&enc, sizes.len()).unwrap();
        assert!(f.is_per_block());
        let mut from = 0;
        let mut fp = 0;
        for (blk, &n) in sizes.iter().enumerate() {
            for i in from..from + n {
                assert!(
                    f.may_contain_hash(blk, hash64(&key(i))),
                    "false negative: key {i} block {blk}"
                );
            }
            // Keys of other blocks are mostly rejected by this block's filter.
            fp += (0..from)
                .chain(from + n..2000)
                .filter(|&i| f.may_contain_hash(blk, hash64(&key(i))))
                .count();
            from += n;
        }
        assert!(fp < 2000 * sizes.len() / 20, "{fp} false positives");
        // A block out of range is not ruled out.
        assert!(f.may_contain_hash(sizes.len(), 42));
        // The same filter parsed for another block count is malformed.
        assert!(Filter::parse(&enc, sizes.len() + 1).is_err());
    }

    #[test]
    fn per_block_false_positive_rate_near_one_percent_at_ten_bits() {
        let mut b = BlockFilterBuilder::new(10);
        for blk in 0..100 {
            b.add_block(&hashes(blk * 400, 400));
        }
        let f = Filter::parse(&b.finish(), 100).unwrap();
        let probes = 100_000u64;
        let fp = (0..probes)
            .filter(|&i| f.may_contain_hash((i % 100) as usize, hash64(&key(1_000_000 + i))))
            .count();
        let rate = fp as f64 / probes as f64;
        assert!(rate < 0.02 && rate > 0.002, "false-positive rate {rate}");
    }

    #[test]
    fn copied_block_lines_keep_their_keys() {
        let mut src = BlockFilterBuilder::new(10);
        src.add_block(&hashes(0, 300));
        src.add_block(&hashes(300, 50));
        let src = Filter::parse(&src.finish(), 2).unwrap();
        let mut b = BlockFilterBuilder::new(10);
        b.add_block(&hashes(1000, 10));
        assert!(b.copy_block(&src, 1));
        assert!(b.copy_block(&src, 0));
        assert!(!b.copy_block(&src, 2), "out of range");
        let f = Filter::parse(&b.finish(), 3).unwrap();
        for i in 300..350 {
            assert!(f.may_contain_hash(1, hash64(&key(i))));
        }
        for i in 0..300 {
            assert!(f.may_contain_hash(2, hash64(&key(i))));
        }
        // Another probe count, or an extent-wide filter, cannot lend its lines.
        let mut other = BlockFilterBuilder::new(20);
        assert!(!other.copy_block(&src, 0));
        let wide = Filter::parse(&build_filter(&hashes(0, 10), 10), 1).unwrap();
        assert!(!BlockFilterBuilder::new(10).copy_block(&wide, 0));
    }

    #[test]
    fn malformed_per_block_filters_are_rejected() {
        let mut b = BlockFilterBuilder::new(10);
        b.add_block(&hashes(0, 100));
        b.add_block(&hashes(100, 100));
        let good = b.finish();
        assert!(Filter::parse(&good, 2).is_ok());
        let n = good.len();
        let set = |at: usize, v: u32| {
            let mut g = good.clone();
            g[at..at + 4].copy_from_slice(&v.to_le_bytes());
            g
        };
        // block count
        assert!(Filter::parse(&set(n - 6, 3), 3).is_err());
        assert!(Filter::parse(&set(n - 6, u32::MAX), u32::MAX as usize).is_err());
        // end lines: not increasing, past the bits, zero
        let last_end = n - 10;
        let first_end = n - 14;
        assert!(Filter::parse(&set(first_end, 0), 2).is_err());
        assert!(Filter::parse(&set(first_end, 100), 2).is_err());
        assert!(Filter::parse(&set(last_end, 1000), 2).is_err());
        for len in 0..n {
            let _ = Filter::parse(&good[..len], 2);
        }
    }
}
