//! The extent's bloom filter over user keys: a cache-local ("blocked") bloom filter, one 64-bit
//! hash per key, all probes of a key inside one 512-bit cache line (the layout of RocksDB's
//! `FastLocalBloom`), so a negative lookup costs one cache miss.
//!
//! ```text
//! filter block = bits[64 * num_lines] ‖ num_probes u8 ‖ filter kind u8 (= 1)
//! ```
//!
//! Invariants:
//! - `hash64` is part of the on-disk format (a reader must compute the same bits); it is
//!   defined below and in `docs/format.md` and must never change for filter kind 1.
//! - No false negatives: every key added is reported as possibly present.
//! - Parsing checks the length and the trailing bytes; a malformed filter is corruption.

use super::MAX_BLOOM_BITS_PER_KEY;

/// Filter kind byte of the only filter this build writes and reads.
pub(crate) const FILTER_KIND_LOCAL_BLOOM: u8 = 1;

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

/// Number of 64-byte lines for `keys` keys.
fn num_lines(keys: usize, bits_per_key: u32) -> usize {
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

/// Builds a filter block from user-key hashes.
pub(crate) fn build_filter(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let bits_per_key = bits_per_key.clamp(1, MAX_BLOOM_BITS_PER_KEY);
    let lines = num_lines(hashes.len(), bits_per_key);
    let probes = num_probes(bits_per_key);
    let mut out = vec![0u8; lines * 64 + 2];
    for &h in hashes {
        let base = line_of(h, lines) * 64;
        let mut x = (h >> 32) as u32;
        for _ in 0..probes {
            let bit = (x >> (32 - 9)) as usize;
            out[base + (bit >> 3)] |= 1 << (bit & 7);
            x = x.wrapping_mul(0x9e37_79b9);
        }
    }
    out[lines * 64] = probes;
    out[lines * 64 + 1] = FILTER_KIND_LOCAL_BLOOM;
    out
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
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("lines", &self.lines)
            .field("probes", &self.probes)
            .finish()
    }
}

impl Filter {
    /// Parses a filter block; `Err(reason)` if malformed.
    pub(crate) fn parse(block: &[u8]) -> Result<Filter, String> {
        let n = block.len();
        if n < 66 || !(n - 2).is_multiple_of(64) {
            return Err(format!("filter block has a bad length {n}"));
        }
        let probes = block[n - 2];
        let kind = block[n - 1];
        if kind != FILTER_KIND_LOCAL_BLOOM {
            return Err(format!("unknown filter kind {kind}"));
        }
        if probes == 0 || probes > 24 {
            return Err(format!("filter has a bad probe count {probes}"));
        }
        let bits = block[..n - 2]
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
        })
    }

    /// False only if the key with this [`filter_hash`] was certainly not added.
    #[inline]
    pub(crate) fn may_contain_hash(&self, h: u64) -> bool {
        let Some(Line(line)) = self.bits.get(line_of(h, self.lines)) else {
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
    pub(crate) fn prefetch(&self, h: u64) {
        if let Some(Line(line)) = self.bits.get(line_of(h, self.lines)) {
            super::prefetch(line, 0);
        }
    }

    /// Memory held by the filter.
    pub(crate) fn size(&self) -> usize {
        self.bits.capacity() * std::mem::size_of::<Line>()
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
        let f = Filter::parse(&build_filter(&hashes, 10)).unwrap();
        for i in 0..n {
            assert!(f.may_contain_hash(hash64(&key(i))), "false negative for key {i}");
        }
        let probes = 200_000u64;
        let fp = (n..n + probes).filter(|&i| f.may_contain_hash(hash64(&key(i)))).count();
        let rate = fp as f64 / probes as f64;
        assert!(rate < 0.02, "false-positive rate {rate}");
        assert!(rate > 0.002, "implausibly low false-positive rate {rate}");
    }

    #[test]
    fn tiny_and_empty_filters() {
        let f = Filter::parse(&build_filter(&[], 10)).unwrap();
        assert!(!f.may_contain_hash(hash64(b"x")), "an empty filter has no bits set");
        let h = hash64(b"only");
        let f = Filter::parse(&build_filter(&[h], 1)).unwrap();
        assert!(f.may_contain_hash(h));
    }

    #[test]
    fn malformed_filters_are_rejected() {
        assert!(Filter::parse(&[]).is_err());
        assert!(Filter::parse(&[0; 65]).is_err());
        let mut good = build_filter(&[1, 2, 3], 10);
        assert!(Filter::parse(&good).is_ok());
        let n = good.len();
        good[n - 1] = 2;
        assert!(Filter::parse(&good).is_err());
        good[n - 1] = 1;
        good[n - 2] = 0;
        assert!(Filter::parse(&good).is_err());
        good[n - 2] = 25;
        assert!(Filter::parse(&good).is_err());
    }
}
