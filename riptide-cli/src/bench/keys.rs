//! Keys, values and random numbers exactly as db_bench makes them.
//!
//! - [`KeyBuf`]: db_bench's `GenerateKeyFromInt` without prefixes: the key number as 8 bytes
//!   big-endian, then `'0'` (0x30) bytes up to the key size. Byte order = numeric order.
//! - [`Mt64`]: `std::mt19937_64`, the generator behind db_bench's `Random64`, so a given seed
//!   draws the same key sequence as db_bench.
//! - [`ValueSource`]: db_bench's `RandomGenerator`: a buffer of at least 1 MiB of seeded random
//!   bytes, pre-filled once and sliced round-robin, so making a value costs nothing. Riptide has
//!   no compression, so the bytes are plain random (db_bench's are 50% compressible).

use std::sync::Arc;

/// A reusable key of `key_size` bytes (`key_size >= 8`).
#[derive(Debug, Clone)]
pub struct KeyBuf {
    buf: Vec<u8>,
}

impl KeyBuf {
    /// A key buffer with the constant `'0'` padding already in place.
    pub fn new(key_size: usize) -> KeyBuf {
        assert!(key_size >= 8, "key_size is validated to be >= 8");
        KeyBuf {
            buf: vec![b'0'; key_size],
        }
    }

    /// Sets the key to key number `k` and returns it.
    pub fn set(&mut self, k: u64) -> &[u8] {
        self.buf[..8].copy_from_slice(&k.to_be_bytes());
        &self.buf
    }

    /// The current key.
    pub fn get(&self) -> &[u8] {
        &self.buf
    }
}

const NN: usize = 312;
const MM: usize = 156;
const MATRIX_A: u64 = 0xB502_6F5A_A966_19E9;
const UPPER_MASK: u64 = 0xFFFF_FFFF_8000_0000;
const LOWER_MASK: u64 = 0x7FFF_FFFF;

/// The 64-bit Mersenne Twister (`std::mt19937_64`).
#[derive(Clone)]
pub struct Mt64 {
    mt: Box<[u64; NN]>,
    index: usize,
}

impl std::fmt::Debug for Mt64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt64")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Mt64 {
    /// Seeded like `std::mt19937_64(seed)`.
    pub fn new(seed: u64) -> Mt64 {
        let mut mt = Box::new([0u64; NN]);
        mt[0] = seed;
        for i in 1..NN {
            mt[i] = 6_364_136_223_846_793_005u64
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 62))
                .wrapping_add(i as u64);
        }
        Mt64 { mt, index: NN }
    }

    fn refill(&mut self) {
        for i in 0..NN {
            let x = (self.mt[i] & UPPER_MASK) | (self.mt[(i + 1) % NN] & LOWER_MASK);
            let mut xa = x >> 1;
            if x & 1 != 0 {
                xa ^= MATRIX_A;
            }
            self.mt[i] = self.mt[(i + MM) % NN] ^ xa;
        }
        self.index = 0;
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        if self.index >= NN {
            self.refill();
        }
        let mut x = self.mt[self.index];
        self.index += 1;
        x ^= (x >> 29) & 0x5555_5555_5555_5555;
        x ^= (x << 17) & 0x71D6_7FFF_EDA6_0000;
        x ^= (x << 37) & 0xFFF7_EEE0_0000_0000;
        x ^= x >> 43;
        x
    }
}

/// Smallest value buffer (db_bench's `RandomGenerator` uses 1 MiB).
pub const VALUE_BUFFER_BYTES: usize = 1 << 20;

/// Shared pre-generated value bytes; each thread slices them through its own [`ValueCursor`].
#[derive(Debug, Clone)]
pub struct ValueSource {
    data: Arc<[u8]>,
    value_size: usize,
}

impl ValueSource {
    /// At least 1 MiB (and at least one value) of random bytes from `seed`.
    pub fn new(seed: u64, value_size: usize) -> ValueSource {
        let len = VALUE_BUFFER_BYTES.max(value_size);
        let mut rng = Mt64::new(seed ^ 0x5249_5054_4944_4556); // "RIPTIDEV"
        let mut data = Vec::with_capacity(len + 8);
        while data.len() < len {
            data.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        data.truncate(len);
        ValueSource {
            data: data.into(),
            value_size,
        }
    }

    /// A cursor starting at `offset` (threads start at different places).
    pub fn cursor(&self, offset: usize) -> ValueCursor<'_> {
        ValueCursor {
            data: &self.data,
            value_size: self.value_size,
            pos: offset % self.data.len(),
        }
    }
}

/// Hands out consecutive `value_size` slices of a [`ValueSource`], wrapping around.
#[derive(Debug)]
pub struct ValueCursor<'a> {
    data: &'a [u8],
    value_size: usize,
    pos: usize,
}

impl<'a> ValueCursor<'a> {
    /// The next value.
    #[inline]
    pub fn next_value(&mut self) -> &'a [u8] {
        if self.pos + self.value_size > self.data.len() {
            self.pos = 0;
        }
        let v = &self.data[self.pos..self.pos + self.value_size];
        self.pos += self.value_size;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_64_matches_the_standard() {
        // C++11 [rand.predef]: the 10000th output of a default-constructed mt19937_64 (seed 5489).
        let mut rng = Mt64::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = rng.next_u64();
        }
        assert_eq!(last, 9_981_545_732_273_789_042);
        // First output for seed 5489, as in every reference implementation.
        assert_eq!(Mt64::new(5489).next_u64(), 14_514_284_786_278_117_030);
    }

    #[test]
    fn keys_are_big_endian_then_ascii_zero_padding() {
        let mut k = KeyBuf::new(16);
        assert_eq!(k.set(0x0102), b"\0\0\0\0\0\0\x01\x0200000000");
        assert_eq!(KeyBuf::new(8).set(u64::MAX), &[0xff; 8]);
        // Byte order equals numeric order, so readseq sees keys 0, 1, 2, ...
        let a = KeyBuf::new(20).set(255).to_vec();
        let b = KeyBuf::new(20).set(256).to_vec();
        assert!(a < b);
        assert_eq!(k.get().len(), 16);
    }

    #[test]
    fn values_have_the_right_size_and_wrap() {
        let src = ValueSource::new(1, 300_000);
        let mut c = src.cursor(0);
        let first = c.next_value().to_vec();
        assert_eq!(first.len(), 300_000);
        for _ in 0..2 {
            assert_eq!(c.next_value().len(), 300_000);
        }
        // 4 values do not fit in 1 MiB: the 4th wraps to the start.
        assert_eq!(c.next_value(), &first[..]);
        let big = ValueSource::new(1, 3 << 20);
        assert_eq!(big.cursor(5).next_value().len(), 3 << 20);
        assert_eq!(ValueSource::new(1, 0).cursor(0).next_value(), b"");
        // Seeded: the same seed gives the same bytes.
        assert_eq!(
            ValueSource::new(7, 8).cursor(0).next_value(),
            ValueSource::new(7, 8).cursor(0).next_value()
        );
    }
}
