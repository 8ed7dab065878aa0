//! Keys, values and random numbers exactly as db_bench makes them.
//!
//! - [`KeyBuf`]: db_bench's `GenerateKeyFromInt` without prefixes: the key number as 8 bytes
//!   big-endian, then `'0'` (0x30) bytes up to the key size. Byte order = numeric order.
//! - [`Mt64`]: `std::mt19937_64`, the generator behind db_bench's `Random64`, so a given seed
//!   draws the same key sequence as db_bench.
//! - [`KeyDist`]: db_bench's `GetRandomKey`: `rand % num`, or with `--read_random_exp_range=r`
//!   the skewed `(floor(num * exp(-u * r)) * 0x5bd1e995) % num` for u uniform in [0, 1), computed
//!   precisely enough to pick the same key as db_bench's `long double` arithmetic.
//! - [`ValueSource`]: db_bench's `RandomGenerator`: a buffer of at least 1 MiB built from
//!   LevelDB's `Random(301)` in 100-byte pieces, each compressible to `--compression_ratio` of its
//!   size (a random printable prefix, repeated), sliced round-robin, so making a value costs
//!   nothing. The bytes are db_bench 7.8's, byte for byte.

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

/// How random benchmarks that go through db_bench's `GetRandomKey` (readrandom,
/// multireadrandom, readwhilewriting's readers) turn a random number into a key number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyDist {
    num: u64,
    exp_range: f64,
    zipf: Option<Zipf>,
}

/// `--zipf=THETA`: YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases") over `num` items, item `i` drawn with probability proportional to
/// `1 / (i + 1)^theta`, then scattered over the key space like db_bench's skew
/// (`(i * 0x5bd1e995) % num`), so hot keys are not neighbours. `0 < theta < 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zipf {
    num: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    /// Precomputes `zeta(num, theta)` (one pass over `num` terms; done once per run).
    pub fn new(num: u64, theta: f64) -> Zipf {
        let zeta = |n: u64| (1..=n).map(|i| (i as f64).powf(-theta)).sum::<f64>();
        let zetan = zeta(num);
        let zeta2 = zeta(2.min(num));
        let alpha = 1.0 / (1.0 - theta);
        let eta = if num <= 1 {
            0.0
        } else {
            (1.0 - (2.0 / num as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Zipf {
            num,
            theta,
            zetan,
            alpha,
            eta,
        }
    }

    /// The theta it was built with.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The item (0 = hottest) for the random number `r`.
    #[inline]
    pub fn item(&self, r: u64) -> u64 {
        let u = (r >> 11) as f64 * f64::powi(2.0, -53);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.num - 1);
        }
        ((self.num as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.num - 1)
    }
}

impl KeyDist {
    /// Keys in `[0, num)`; `exp_range` is `--read_random_exp_range` (0 = uniform; validated to be
    /// finite and not negative).
    pub fn new(num: u64, exp_range: f64) -> KeyDist {
        KeyDist {
            num,
            exp_range,
            zipf: None,
        }
    }

    /// The same, drawing Zipfian keys instead when `zipf` is set (`--zipf`).
    pub fn with_zipf(mut self, zipf: Option<Zipf>) -> KeyDist {
        self.zipf = zipf;
        self
    }

    /// db_bench's `GetRandomKey` for the random number `r`:
    /// - `exp_range == 0`: `r % num`;
    /// - otherwise: with `u = (r mod 2^62) / 2^62`, `k = floor(num * exp(-u * exp_range))`, the key
    ///   is `(k * 0x5bd1e995 mod 2^64) % num`: key numbers close to `k = 0` are the hot ones, and
    ///   the multiplication scatters them over the key space.
    ///
    /// db_bench computes `k` in x87 `long double`; this computes it in double-double arithmetic
    /// (about 106 bits), so it picks the same key except when `num * exp(...)` is within about
    /// `num * 2^-63` of an integer: never seen in 5,000,000 draws each for `num` up to 10^9
    /// (checked against a C++ `long double` build of the same code), where plain `f64` already
    /// differs about once in 10^5 draws at `num = 10^12`.
    #[inline]
    pub fn key(&self, r: u64) -> u64 {
        if let Some(z) = &self.zipf {
            return z.item(r).wrapping_mul(0x5bd1_e995) % self.num;
        }
        if self.exp_range == 0.0 {
            return r % self.num;
        }
        let k = exp_scaled_floor(r & ((1 << 62) - 1), self.exp_range, self.num);
        k.wrapping_mul(0x5bd1_e995) % self.num
    }
}

/// `floor(num * exp(-(a / 2^62) * range))` for `a < 2^62`, `range >= 0`.
///
/// Plain `f64` first: its result is within `v * (x + 2) * 2^-52` of the exact value (`x` the
/// exponent: the rounding of `a` and of `a * range` each add `x * 2^-53`, `exp` one ulp, the
/// product with `num` half an ulp), so when `v` is at least four times that far from both
/// neighbouring integers its floor is the exact floor, which is also what db_bench's `long
/// double` gives. Otherwise (about one draw in 10^4 at `num = 10^7`) the double-double path
/// decides. The f64 path is what keeps the skewed benchmarks' key generator from costing more
/// per read than a row-cache hit.
#[inline]
fn exp_scaled_floor(a: u64, range: f64, num: u64) -> u64 {
    let x = a as f64 * f64::powi(2.0, -62) * range;
    let v = (-x).exp() * num as f64;
    let f = v.floor();
    let err = v * (x + 2.0) * f64::powi(2.0, -50);
    if v - f > err && f + 1.0 - v > err {
        return f as u64;
    }
    exp_scaled_floor_dd(a, range, num)
}

/// [`exp_scaled_floor`] in double-double (about 106 bits).
#[cold]
fn exp_scaled_floor_dd(a: u64, range: f64, num: u64) -> u64 {
    let scale = f64::powi(2.0, -62);
    // a = hi + lo exactly (51 + 11 bits), then times 2^-62, exact.
    let hi = (a & !0x7ff) as f64 * scale;
    let lo = (a & 0x7ff) as f64 * scale;
    let t = two_prod(hi, range).add(two_prod(lo, range));
    let v = exp_dd(Dd { hi: -t.hi, lo: -t.lo }).mul_f64(num as f64);
    let mut f = v.hi.floor();
    if f == v.hi && v.lo < 0.0 {
        f -= 1.0;
    }
    // Saturating cast: exp(x) <= 1 for x <= 0, so this is at most `num`.
    f as u64
}

/// A double-double number `hi + lo` with `|lo| <= ulp(hi) / 2`.
#[derive(Debug, Clone, Copy)]
struct Dd {
    hi: f64,
    lo: f64,
}

#[inline]
fn two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let bb = s - a;
    Dd {
        hi: s,
        lo: (a - (s - bb)) + (b - bb),
    }
}

#[inline]
fn quick_two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    Dd { hi: s, lo: b - (s - a) }
}

#[inline]
fn two_prod(a: f64, b: f64) -> Dd {
    let p = a * b;
    Dd {
        hi: p,
        lo: a.mul_add(b, -p),
    }
}

impl Dd {
    #[inline]
    fn add(self, o: Dd) -> Dd {
        let s = two_sum(self.hi, o.hi);
        let t = two_sum(self.lo, o.lo);
        let s = quick_two_sum(s.hi, s.lo + t.hi);
        quick_two_sum(s.hi, s.lo + t.lo)
    }

    #[inline]
    fn mul(self, o: Dd) -> Dd {
        let p = two_prod(self.hi, o.hi);
        quick_two_sum(p.hi, p.lo + (self.hi * o.lo + self.lo * o.hi))
    }

    #[inline]
    fn mul_f64(self, b: f64) -> Dd {
        let p = two_prod(self.hi, b);
        quick_two_sum(p.hi, p.lo + self.lo * b)
    }

    #[inline]
    fn div_f64(self, b: f64) -> Dd {
        let q = self.hi / b;
        let p = two_prod(q, b);
        quick_two_sum(q, (self.hi - p.hi - p.lo + self.lo) / b)
    }

    /// Times a power of two (exact unless it underflows).
    #[inline]
    fn scale(self, f: f64) -> Dd {
        Dd {
            hi: self.hi * f,
            lo: self.lo * f,
        }
    }
}

/// ln 2 in double-double.
const LN2: Dd = Dd {
    hi: std::f64::consts::LN_2,
    lo: 2.319_046_813_846_299_6e-17,
};

/// `exp(x)` for `x <= 0` in double-double: `x = k ln2 + r`, `exp(r / 1024) - 1` by its Taylor
/// series, squared back ten times as `(1 + e)^2 - 1 = 2e + e^2`, times `2^k`.
fn exp_dd(x: Dd) -> Dd {
    let k = (x.hi / LN2.hi).round();
    if k < -1100.0 {
        return Dd { hi: 0.0, lo: 0.0 };
    }
    let r = x.add(LN2.mul_f64(-k));
    let s = r.scale(1.0 / 1024.0);
    let mut term = s;
    let mut e = s;
    for i in 2..=12 {
        term = term.mul(s).div_f64(f64::from(i));
        e = e.add(term);
    }
    for _ in 0..10 {
        e = e.scale(2.0).add(e.mul(e));
    }
    let k = k as i32;
    Dd { hi: 1.0, lo: 0.0 }
        .add(e)
        .scale(f64::powi(2.0, k / 2))
        .scale(f64::powi(2.0, k - k / 2))
}

/// Smallest value buffer (db_bench's `RandomGenerator` uses 1 MiB).
pub const VALUE_BUFFER_BYTES: usize = 1 << 20;

/// db_bench's default `--compression_ratio`.
pub const DEFAULT_COMPRESSION_RATIO: f64 = 0.5;

/// LevelDB's `Random` (Park-Miller, multiplier 16807 modulo 2^31 - 1), which db_bench's
/// `RandomGenerator` uses with seed 301.
#[derive(Debug, Clone)]
pub struct LevelDbRandom {
    seed: u32,
}

impl LevelDbRandom {
    const M: u32 = 2_147_483_647;

    /// Seeded like `rocksdb::Random(s)`.
    pub fn new(s: u32) -> LevelDbRandom {
        let s = s & Self::M;
        LevelDbRandom {
            seed: if s == 0 { 1 } else { s },
        }
    }

    /// The next number in `[1, 2^31 - 2]`.
    pub fn next_u32(&mut self) -> u32 {
        let product = u64::from(self.seed) * 16807;
        let mut seed = ((product >> 31) + (product & u64::from(Self::M))) as u32;
        if seed > Self::M {
            seed -= Self::M;
        }
        self.seed = seed;
        seed
    }

    /// `Next() % n`.
    pub fn uniform(&mut self, n: u32) -> u32 {
        self.next_u32() % n
    }
}

/// db_bench's `test::CompressibleString(rnd, ratio, 100)`: `max(1, floor(100 * ratio))` random
/// printable bytes (`' ' + Uniform(95)`), repeated to 100 bytes.
fn compressible_piece(rnd: &mut LevelDbRandom, ratio: f64, out: &mut Vec<u8>) {
    const LEN: usize = 100;
    let raw = ((LEN as f64 * ratio) as i64).max(1) as usize;
    let raw_data: Vec<u8> = (0..raw).map(|_| b' ' + rnd.uniform(95) as u8).collect();
    let start = out.len();
    while out.len() - start < LEN {
        out.extend_from_slice(&raw_data);
    }
    out.truncate(start + LEN);
}

/// Shared pre-generated value bytes; each thread slices them through its own [`ValueCursor`].
#[derive(Debug, Clone)]
pub struct ValueSource {
    data: Arc<[u8]>,
    value_size: usize,
}

impl ValueSource {
    /// db_bench's `RandomGenerator` for `--value_size` and `--compression_ratio`: at least 1 MiB
    /// (and at least one value) of 100-byte pieces from `Random(301)`, each compressible to
    /// `compression_ratio` of its size. The same bytes on every run and every engine.
    pub fn new(value_size: usize, compression_ratio: f64) -> ValueSource {
        let len = VALUE_BUFFER_BYTES.max(value_size);
        let mut rnd = LevelDbRandom::new(301);
        let mut data = Vec::with_capacity(len + 100);
        while data.len() < len {
            compressible_piece(&mut rnd, compression_ratio, &mut data);
        }
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
#[derive(Debug, Clone)]
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
        let src = ValueSource::new(300_000, DEFAULT_COMPRESSION_RATIO);
        let mut c = src.cursor(0);
        let first = c.next_value().to_vec();
        assert_eq!(first.len(), 300_000);
        for _ in 0..2 {
            assert_eq!(c.next_value().len(), 300_000);
        }
        // 4 values do not fit in 1 MiB: the 4th wraps to the start.
        assert_eq!(c.next_value(), &first[..]);
        let big = ValueSource::new(3 << 20, 0.5);
        assert_eq!(big.cursor(5).next_value().len(), 3 << 20);
        assert_eq!(ValueSource::new(0, 0.5).cursor(0).next_value(), b"");
    }

    #[test]
    fn values_are_db_bench_78s_bytes() {
        // The first value of `db_bench --benchmarks=fillseq --value_size=120` (RocksDB 7.8.3,
        // default --compression_ratio=0.5), read back with `ldb scan --value_hex`: 50 random
        // printable bytes, repeated, then the next piece.
        let hex = "5E7B56687A22212F25774D5A3B276120462F52455A4A34547740254E587879323F2E417256435A3242365B6A6E55642934\
                   205E7B56687A22212F25774D5A3B276120462F52455A4A34547740254E587879323F2E417256435A3242365B6A6E5564\
                   293420624F7B5C5E61543F566D322E246865633B7E324C";
        let want: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let src = ValueSource::new(120, DEFAULT_COMPRESSION_RATIO);
        assert_eq!(&src.cursor(0).next_value()[..want.len()], &want[..]);
        // Ratio 1: no repetition within a piece; ratio 0: one byte repeated.
        let v = ValueSource::new(100, 0.0).cursor(0).next_value().to_vec();
        assert!(v.iter().all(|&b| b == v[0]));
        let v = ValueSource::new(100, 1.0).cursor(0).next_value().to_vec();
        assert_ne!(v[..50], v[50..]);
        assert!(v.iter().all(|b| (b' '..=b'~').contains(b)));
    }

    #[test]
    fn leveldb_random_is_park_miller() {
        let mut r = LevelDbRandom::new(301);
        // 301 * 16807 = 5058907; the sequence stays in [1, 2^31 - 2].
        assert_eq!(r.next_u32(), 5_058_907);
        for _ in 0..100_000 {
            let v = r.next_u32();
            assert!((1..LevelDbRandom::M).contains(&v));
        }
        assert_eq!(LevelDbRandom::new(0).next_u32(), 16807);
    }

    #[test]
    fn uniform_keys_are_the_plain_modulus() {
        let d = KeyDist::new(1000, 0.0);
        assert_eq!(d.key(123_456_789), 789);
        assert_eq!(d.key(u64::MAX), u64::MAX % 1000);
    }

    #[test]
    fn skewed_keys_match_db_bench_long_double() {
        // (random number, key) pairs from db_bench's GetRandomKey compiled with g++ on x86-64
        // (long double = x87 80-bit), mt19937_64 seeded with 42, num = 10^7, range = 10.
        let d = KeyDist::new(10_000_000, 10.0);
        for (r, key) in [
            (13_930_160_852_258_120_406u64, 4_631_333u64),
            (11_788_048_577_503_494_824, 4_372_403),
            (13_874_630_024_467_741_450, 8_313_331),
            (2_513_787_319_205_155_662, 2_766_748),
            (16_662_371_453_428_439_381, 5_141_273),
            (1_735_254_072_534_978_428, 4_326_354),
        ] {
            assert_eq!(d.key(r), key, "r = {r}");
        }
        // The same stream checked against the C++ build by the keys it draws.
        let mut rng = Mt64::new(42);
        assert_eq!(d.key(rng.next_u64()), 4_631_333);
        // Where plain f64 arithmetic picks another key (num = 10^12, range = 10).
        let d = KeyDist::new(1_000_000_000_000, 10.0);
        for (r, key) in [
            (726_286_714_923_287_779u64, 198_647_553_207u64),
            (617_996_744_970_215_691, 399_578_605_911),
            (9_278_333_496_984_500_593, 26_207_288_850),
        ] {
            assert_eq!(d.key(r), key, "r = {r}");
        }
        // u = 0 gives exp(0) = 1: k = num, key 0.
        assert_eq!(KeyDist::new(777, 3.0).key(0), 0);
        assert_eq!(KeyDist::new(777, 3.0).key(1 << 62), 0);
    }

    #[test]
    fn f64_fast_path_agrees_with_double_double() {
        // Random draws, and draws steered next to integer boundaries where the guard must fall
        // back: every result must equal the double-double one.
        let mut rng = Mt64::new(7);
        let mut fell_back = 0;
        for num in [10u64, 1000, 10_000_000, 1_000_000_000_000] {
            for range in [0.5, 10.0, 30.0] {
                for _ in 0..200_000 {
                    let a = rng.next_u64() & ((1 << 62) - 1);
                    assert_eq!(
                        exp_scaled_floor(a, range, num),
                        exp_scaled_floor_dd(a, range, num),
                        "a={a} range={range} num={num}"
                    );
                }
                // a such that num * exp(-a/2^62 * range) is (nearly) the integer k.
                for k in [1u64, 2, 3, 7, num / 3 + 1, num / 2] {
                    if k == 0 || k >= num {
                        continue;
                    }
                    let a0 = ((num as f64 / k as f64).ln() / range * f64::powi(2.0, 62)) as u64;
                    // Only exponents the key generator can draw (u < 1).
                    if a0 >= 1 << 62 {
                        continue;
                    }
                    for d in 0..64u64 {
                        for a in [a0.saturating_sub(d), a0 + d] {
                            let a = a.min((1 << 62) - 1);
                            let x = a as f64 * f64::powi(2.0, -62) * range;
                            let v = (-x).exp() * num as f64;
                            if (v - v.round()).abs() <= v * (x + 2.0) * f64::powi(2.0, -50) {
                                fell_back += 1;
                            }
                            assert_eq!(
                                exp_scaled_floor(a, range, num),
                                exp_scaled_floor_dd(a, range, num),
                                "a={a} range={range} num={num}"
                            );
                        }
                    }
                }
            }
        }
        assert!(fell_back > 0, "the boundary draws never reached the double-double path");
    }

    #[test]
    fn zipf_frequencies_follow_the_power_law() {
        // 1000 items, theta 0.99: item 0 should get 1/zeta of the draws, item 1 that / 2^0.99,
        // item 9 that / 10^0.99; the hottest 10 % of items most of them.
        let z = Zipf::new(1000, 0.99);
        let mut rng = Mt64::new(3);
        let n = 400_000;
        let mut counts = vec![0u64; 1000];
        for _ in 0..n {
            counts[z.item(rng.next_u64()) as usize] += 1;
        }
        let p0 = 1.0 / z.zetan;
        for (i, want) in [(0usize, p0), (1, p0 / 2f64.powf(0.99)), (9, p0 / 10f64.powf(0.99))] {
            let got = counts[i] as f64 / n as f64;
            assert!((got - want).abs() < want * 0.05 + 0.001, "item {i}: {got} vs {want}");
        }
        let top: u64 = counts[..100].iter().sum();
        assert!(top as f64 > 0.6 * n as f64, "top 10% got {top}");
        // Scattered keys stay in range.
        let d = KeyDist::new(1000, 0.0).with_zipf(Some(z));
        assert!((0..10_000).all(|r| d.key(rng.next_u64().wrapping_add(r)) < 1000));
        assert_eq!(Zipf::new(1, 0.5).item(u64::MAX), 0);
    }

    #[test]
    fn skew_concentrates_reads() {
        // With range 10, P(k < x) = 1 - ln(num / x) / 10: 30% of the draws fall on the 5% of
        // the key numbers below num / 20. 100,000 draws over 10^6 keys hit about half as many
        // distinct keys as uniform draws do.
        let mut rng = Mt64::new(1);
        let skew = KeyDist::new(1_000_000, 10.0);
        let uni = KeyDist::new(1_000_000, 0.0);
        let (mut a, mut b) = (std::collections::HashSet::new(), std::collections::HashSet::new());
        for _ in 0..100_000 {
            let r = rng.next_u64();
            a.insert(skew.key(r));
            b.insert(uni.key(r));
        }
        assert!(a.len() * 3 < b.len() * 2, "skewed {} vs uniform {}", a.len(), b.len());
        assert!(a.iter().all(|&k| k < 1_000_000));
    }
}
