//! Extent tests: builder → reader round trips (random keys and values, empty values, 64 KiB keys,
//! multi-MiB values spanning several slots, many versions of one key across block boundaries),
//! exhaustive seek/next/prev against a sorted `Vec`, index and properties contents, size
//! estimates, the bloom filter's false-positive rate, block reuse, and corruption: a flipped
//! byte anywhere in the written bytes gives `Error::Corruption` naming the file and an offset
//! inside the damaged region, never wrong data or a panic.

use std::cmp::Ordering;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::filter::filter_hash;
use super::format::{ExtentProperties, Footer, Handle, IndexEntry, EXTENT_FORMAT_VERSION, TRAILER_SIZE};
use super::*;
use crate::coding::{get_u32, mask_crc};
use crate::fs::ReadableFile;
use crate::key::{compare_internal_keys, decode_internal_key, encode_internal_key, Lsn, ValueKind, MAX_LSN};

/// An in-memory file.
pub(super) struct MemFile(pub(super) Vec<u8>);

impl ReadableFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Ok(off) = usize::try_from(offset) else { return Ok(0) };
        if off >= self.0.len() {
            return Ok(0);
        }
        // Short reads on purpose, to exercise the read loop.
        let n = buf.len().min(self.0.len() - off).min(1 << 20);
        buf[..n].copy_from_slice(&self.0[off..off + n]);
        Ok(n)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

/// A file whose reads fail.
struct FailFile;

impl ReadableFile for FailFile {
    fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(0)
    }
}

pub(super) fn path() -> PathBuf {
    PathBuf::from("/db/data/000007.ext")
}

/// Extents are placed after a 2 MiB header slot, so offsets in errors must be absolute.
pub(super) const BASE: u64 = EXTENT_SIZE;

pub(super) fn file_with(built: &BuiltExtent) -> MemFile {
    let mut f = vec![0xAAu8; BASE as usize];
    f.extend_from_slice(&built.image());
    MemFile(f)
}

pub(super) fn ikey(user: &[u8], lsn: Lsn, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user.len() + 8);
    encode_internal_key(&mut v, user, lsn, kind);
    v
}

pub(super) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

pub(super) fn build(entries: &Entries, opts: ExtentOptions) -> BuiltExtent {
    let mut b = ExtentBuilder::new(opts);
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    let est = b.estimated_size();
    let built = b.finish().unwrap();
    assert!(
        est >= built.valid.len() + FOOTER_SIZE,
        "estimate {est} below actual {}",
        built.valid.len() + FOOTER_SIZE
    );
    assert_eq!(built.footer.len(), FOOTER_SIZE);
    assert_eq!(
        built.slots as u64,
        ((built.valid.len() + FOOTER_SIZE) as u64).div_ceil(EXTENT_SIZE)
    );
    built
}

/// Random sorted entries: user keys from a small alphabet (so many have several versions),
/// unique LSNs, ~10 % deletes, values of 0..max_value bytes (compressible half the time).
fn random_entries(rng: &mut StdRng, n: usize, max_value: usize) -> Entries {
    let mut v: Entries = (0..n)
        .map(|i| {
            let len = rng.random_range(1..10);
            let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'h')).collect();
            let kind = if rng.random_bool(0.1) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let vlen = if rng.random_bool(0.1) {
                0
            } else {
                rng.random_range(0..=max_value)
            };
            let value: Vec<u8> = if rng.random_bool(0.5) {
                (0..vlen).map(|j| b"abcd"[j % 4]).collect()
            } else {
                (0..vlen).map(|_| rng.random()).collect()
            };
            (ikey(&user, 1 + i as u64 * 3, kind), value)
        })
        .collect();
    v.sort_by(|a, b| compare_internal_keys(&a.0, &b.0));
    v
}

/// A two-level cursor over a whole extent, reading blocks directly.
struct Cursor<'a> {
    r: &'a ExtentReader,
    f: &'a dyn ReadableFile,
    blk: usize,
    it: Option<BlockIter>,
}

impl<'a> Cursor<'a> {
    fn new(r: &'a ExtentReader, f: &'a dyn ReadableFile) -> Self {
        Cursor { r, f, blk: 0, it: None }
    }
    fn load(&mut self, i: usize) -> &mut BlockIter {
        self.blk = i;
        self.it = Some(BlockIter::new(Arc::new(self.r.read_block(self.f, i).unwrap())));
        self.it.as_mut().unwrap()
    }
    fn valid(&self) -> bool {
        self.it.as_ref().is_some_and(|i| i.valid())
    }
    fn key(&self) -> &[u8] {
        self.it.as_ref().unwrap().key()
    }
    fn value(&self) -> &[u8] {
        self.it.as_ref().unwrap().value()
    }
    fn seek(&mut self, t: &[u8]) {
        match self.r.find_block(t) {
            None => self.it = None,
            Some(i) => {
                let it = self.load(i);
                it.seek(t);
                assert!(it.valid(), "find_block chose a block with no key >= target");
            }
        }
    }
    fn seek_to_first(&mut self) {
        self.load(0).seek_to_first();
    }
    fn seek_to_last(&mut self) {
        let n = self.r.index().len();
        self.load(n - 1).seek_to_last();
    }
    fn next(&mut self) {
        let it = self.it.as_mut().unwrap();
        it.next();
        it.status().unwrap();
        if !it.valid() && self.blk + 1 < self.r.index().len() {
            let b = self.blk + 1;
            self.load(b).seek_to_first();
        }
    }
    fn prev(&mut self) {
        let it = self.it.as_mut().unwrap();
        it.prev();
        it.status().unwrap();
        if !it.valid() && self.blk > 0 {
            let b = self.blk - 1;
            self.load(b).seek_to_last();
        }
    }
}

/// Checks everything a reader exposes against the entries the extent was built from.
pub(super) fn check_extent(entries: &Entries, built: &BuiltExtent, opts: &ExtentOptions, rng: &mut StdRng) {
    let file = file_with(built);
    let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
    assert_eq!(r.path(), path());
    assert_eq!(r.base(), BASE);
    assert_eq!(r.slots(), built.slots);
    assert_eq!(r.props(), &built.props);
    assert_eq!(r.index(), &built.index[..]);
    let v = verify_extent(&file, &path(), BASE, built.slots).unwrap();
    assert_eq!(v.index(), r.index());
    let fb = ExtentReader::from_built(built, &path(), BASE).unwrap();
    assert_eq!(fb.index(), r.index());
    assert_eq!(fb.props(), r.props());

    // Properties.
    let p = r.props();
    assert_eq!(p.format_version, EXTENT_FORMAT_VERSION);
    assert_eq!(p.entries, entries.len() as u64);
    let deletes = entries
        .iter()
        .filter(|(k, _)| decode_internal_key(k).unwrap().2 == ValueKind::Delete)
        .count();
    assert_eq!(p.deletes, deletes as u64);
    assert_eq!(p.data_blocks as usize, r.index().len());
    assert_eq!(p.smallest, entries[0].0);
    assert_eq!(p.largest, entries.last().unwrap().0);
    let lsns = entries.iter().map(|(k, _)| decode_internal_key(k).unwrap().1);
    assert_eq!(p.min_lsn, lsns.clone().min().unwrap());
    assert_eq!(p.max_lsn, lsns.max().unwrap());
    assert_eq!(
        p.raw_key_bytes,
        entries.iter().map(|(k, _)| k.len() as u64).sum::<u64>()
    );
    assert_eq!(
        p.raw_value_bytes,
        entries.iter().map(|(_, v)| v.len() as u64).sum::<u64>()
    );
    let mut users: Vec<&[u8]> = entries.iter().map(|(k, _)| &k[..k.len() - 8]).collect();
    users.dedup();
    assert_eq!(p.user_keys, users.len() as u64);
    assert_eq!(p.bloom_bits_per_key, opts.bloom_bits_per_key);
    assert_eq!(r.has_filter(), opts.bloom_bits_per_key > 0);
    if opts.compression == Compression::None {
        assert_eq!(p.compressed_blocks, 0);
    }

    // Index: blocks partition the entries in order, with exact stats.
    let mut at = 0usize;
    let mut offset = 0u64;
    for e in r.index() {
        let rows = &entries[at..at + e.rows as usize];
        assert_eq!(e.first_key, rows[0].0);
        assert_eq!(e.last_key, rows.last().unwrap().0);
        assert_eq!(e.offset, offset);
        offset += e.size as u64 + TRAILER_SIZE as u64;
        let dels = rows
            .iter()
            .filter(|(k, _)| decode_internal_key(k).unwrap().2 == ValueKind::Delete)
            .count();
        assert_eq!(e.deletes as usize, dels);
        let l = rows.iter().map(|(k, _)| decode_internal_key(k).unwrap().1);
        assert_eq!(e.min_lsn, l.clone().min().unwrap());
        assert_eq!(e.max_lsn, l.max().unwrap());
        // Format 3: the block's user keys (one continued from the previous block counts) and
        // raw sizes.
        let mut block_users: Vec<&[u8]> = rows.iter().map(|(k, _)| &k[..k.len() - 8]).collect();
        block_users.dedup();
        assert_eq!(e.users as usize, block_users.len());
        assert_eq!(e.key_bytes as usize, rows.iter().map(|(k, _)| k.len()).sum::<usize>());
        assert_eq!(e.value_bytes as usize, rows.iter().map(|(_, v)| v.len()).sum::<usize>());
        // Bloom: no false negatives, for each block's filter.
        let b = r.index().iter().position(|x| x == e).unwrap();
        for u in &block_users {
            assert!(r.block_may_contain(b, filter_hash(u)), "block {b} filter misses a key");
        }
        at += e.rows as usize;
    }
    assert_eq!(at, entries.len());

    // Bloom through the extent's own lookup of the block.
    for u in &users {
        assert!(r.may_contain(u));
    }

    // Full forward and backward scans.
    let mut c = Cursor::new(&r, &file);
    c.seek_to_first();
    for (k, v) in entries {
        assert!(c.valid());
        assert_eq!(c.key(), &k[..]);
        assert_eq!(c.value(), &v[..]);
        c.next();
    }
    assert!(!c.valid());
    c.seek_to_last();
    for (k, v) in entries.iter().rev() {
        assert!(c.valid());
        assert_eq!(c.key(), &k[..]);
        assert_eq!(c.value(), &v[..]);
        c.prev();
    }
    assert!(!c.valid());

    // Seeks to every key, and to random targets, then a few steps each way.
    let mut targets: Vec<Vec<u8>> = entries.iter().map(|(k, _)| k.clone()).collect();
    for _ in 0..entries.len().min(500) {
        let len = rng.random_range(0..10);
        let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'i')).collect();
        targets.push(ikey(
            &user,
            rng.random_range(0..entries.len() as u64 * 3 + 3),
            ValueKind::Put,
        ));
    }
    targets.push(ikey(b"", crate::MAX_LSN, ValueKind::Put));
    targets.push(ikey(b"zzzzzzzzzzz", 0, ValueKind::Delete));
    let step = (targets.len() / 2000).max(1);
    for t in targets.iter().step_by(step) {
        let want = entries.partition_point(|(k, _)| compare_internal_keys(k, t) == Ordering::Less);
        c.seek(t);
        if want == entries.len() {
            assert!(!c.valid());
            assert_eq!(r.find_block(t), None);
            continue;
        }
        assert!(c.valid());
        assert_eq!(c.key(), &entries[want].0[..]);
        assert_eq!(c.value(), &entries[want].1[..]);
        for (k, _) in entries.iter().skip(want + 1).take(2) {
            c.next();
            assert_eq!(c.key(), &k[..]);
        }
        c.seek(t);
        for (k, _) in entries[want.saturating_sub(2)..want].iter().rev() {
            c.prev();
            assert_eq!(c.key(), &k[..]);
        }
    }
}

fn random_opts(rng: &mut StdRng) -> ExtentOptions {
    ExtentOptions {
        block_size: [64, 256, 1024, 4096, 16 << 10][rng.random_range(0..5)],
        restart_interval: [1, 2, 3, 16, 32][rng.random_range(0..5)],
        bloom_bits_per_key: [0, 1, 10, 20][rng.random_range(0..4)],
        compression: [Compression::Lz4, Compression::None, Compression::Zstd][rng.random_range(0..3)],
        compression_level: rng.random_range(-3..=9),
        hash_index: rng.random_bool(0.5),
        // Used by zstd only; the others must ignore it.
        dictionary: rng.random_bool(0.4).then(super::tests_dictionary::test_dict),
    }
}

#[test]
fn random_round_trips() {
    let mut rng = StdRng::seed_from_u64(1);
    for round in 0..24 {
        let opts = if round == 0 {
            ExtentOptions::default()
        } else {
            random_opts(&mut rng)
        };
        opts.validate().unwrap();
        let n = [1usize, 2, 10, 300, 3000][round % 5];
        let entries = random_entries(&mut rng, n, 300);
        let built = build(&entries, opts.clone());
        assert_eq!(built.slots, 1);
        check_extent(&entries, &built, &opts, &mut rng);
    }
}

#[test]
fn full_extent_with_default_options() {
    // Fill one extent as the flush/compaction writer would: stop before exceeding 2 MiB.
    let mut rng = StdRng::seed_from_u64(2);
    let opts = ExtentOptions::default();
    let mut b = ExtentBuilder::new(opts.clone());
    let mut entries = Entries::new();
    let mut i = 0u64;
    loop {
        let k = ikey(format!("user{:012}", i * 7).as_bytes(), 1000 + i, ValueKind::Put);
        let v: Vec<u8> = (0..100).map(|j| if j % 3 == 0 { rng.random() } else { b'x' }).collect();
        if b.estimated_size_after(k.len(), v.len()) > EXTENT_SIZE as usize {
            break;
        }
        let before = b.estimated_size_after(k.len(), v.len());
        b.add(&k, &v).unwrap();
        assert!(b.estimated_size() <= before);
        entries.push((k, v));
        i += 1;
    }
    let built = b.finish().unwrap();
    assert_eq!(built.slots, 1);
    let used = built.valid.len() + FOOTER_SIZE;
    assert!(used <= EXTENT_SIZE as usize);
    assert!(used > EXTENT_SIZE as usize * 97 / 100, "extent only {used} bytes full");
    assert!(built.props.compressed_blocks > 0);
    // ~16 KiB uncompressed per block
    assert!(built.blocks > 100, "{} blocks", built.blocks);
    check_extent(&entries, &built, &opts, &mut rng);
}

#[test]
fn estimates_are_tight_upper_bounds_without_compression() {
    let mut rng = StdRng::seed_from_u64(3);
    let opts = ExtentOptions {
        compression: Compression::None,
        ..Default::default()
    };
    let entries = random_entries(&mut rng, 5000, 200);
    for n in [1, 2, 17, 100, 999, 5000] {
        let mut b = ExtentBuilder::new(opts.clone());
        for (k, v) in &entries[..n] {
            let after = b.estimated_size_after(k.len(), v.len());
            b.add(k, v).unwrap();
            assert!(b.estimated_size() <= after);
        }
        let est = b.estimated_size();
        let built = b.finish().unwrap();
        let actual = built.valid.len() + FOOTER_SIZE;
        assert!(est >= actual);
        assert!(est - actual < 1024, "estimate {est} vs actual {actual}");
    }
}

#[test]
fn empty_values_and_64k_keys() {
    let mut rng = StdRng::seed_from_u64(4);
    let mut entries = Entries::new();
    for i in 0..40u8 {
        let mut user = vec![b'k'; crate::MAX_KEY_SIZE];
        user[crate::MAX_KEY_SIZE - 1] = i;
        let kind = if i % 5 == 0 { ValueKind::Delete } else { ValueKind::Put };
        let value = if i % 2 == 0 { Vec::new() } else { vec![i; 10] };
        entries.push((ikey(&user, 100 - u64::from(i), kind), value));
    }
    for opts in [
        ExtentOptions::default(),
        ExtentOptions {
            compression: Compression::None,
            restart_interval: 1,
            ..Default::default()
        },
    ] {
        let built = build(&entries, opts.clone());
        // 40 × 64 KiB keys (plus index copies) exceed one slot without compression.
        check_extent(&entries, &built, &opts, &mut rng);
    }
}

#[test]
fn multi_mib_value_needs_several_slots() {
    let mut rng = StdRng::seed_from_u64(5);
    let big: Vec<u8> = (0..5 << 20).map(|_| rng.random()).collect();
    let entries: Entries = vec![
        (ikey(b"a", 10, ValueKind::Put), b"small".to_vec()),
        (ikey(b"b", 11, ValueKind::Put), big),
        (ikey(b"c", 12, ValueKind::Delete), Vec::new()),
    ];
    let opts = ExtentOptions::default();
    let mut b = ExtentBuilder::new(opts.clone());
    b.add(&entries[0].0, &entries[0].1).unwrap();
    assert!(b.estimated_size_after(entries[1].0.len(), entries[1].1.len()) > EXTENT_SIZE as usize);
    let built = build(&entries, opts.clone());
    assert_eq!(built.slots, 3);
    assert_eq!(built.image().len(), 3 * EXTENT_SIZE as usize);
    check_extent(&entries, &built, &opts, &mut rng);
    // The wrong slot count is refused.
    let file = file_with(&built);
    let e = ExtentReader::open(&file, &path(), BASE, 1).unwrap_err();
    assert!(e.is_corruption());
}

#[test]
fn versions_of_one_key_span_blocks() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut entries = Entries::new();
    entries.push((ikey(b"aaa", 5, ValueKind::Put), b"before".to_vec()));
    for lsn in (10..3010u64).rev() {
        let kind = if lsn % 7 == 0 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        entries.push((ikey(b"hot", lsn, kind), format!("value-{lsn}").repeat(5).into_bytes()));
    }
    entries.push((ikey(b"zzz", 1, ValueKind::Put), b"after".to_vec()));
    let opts = ExtentOptions {
        block_size: 4096,
        ..Default::default()
    };
    let built = build(&entries, opts.clone());
    assert!(built.blocks > 10);
    assert_eq!(built.props.user_keys, 3);
    check_extent(&entries, &built, &opts, &mut rng);

    // A snapshot read of "hot" at LSN s finds the newest version <= s, wherever it lies.
    let file = file_with(&built);
    let r = ExtentReader::open(&file, &path(), BASE, 1).unwrap();
    // Consecutive blocks share the user key at their boundary.
    let shared = r
        .index()
        .windows(2)
        .filter(|w| decode_internal_key(&w[0].last_key).unwrap().0 == decode_internal_key(&w[1].first_key).unwrap().0)
        .count();
    assert!(shared >= 8);
    for snap in [10u64, 11, 500, 1234, 3009, 5000] {
        let t = ikey(b"hot", snap, ValueKind::Put);
        let mut c = Cursor::new(&r, &file);
        c.seek(&t);
        let (user, lsn, _) = decode_internal_key(c.key()).unwrap();
        assert_eq!(user, b"hot");
        assert_eq!(lsn, snap.min(3009));
    }
    assert!(r.may_contain(b"hot"));
}

#[test]
fn bloom_false_positive_rate_in_an_extent() {
    let n = 100_000u64;
    let entries: Entries = (0..n)
        .map(|i| {
            (
                ikey(format!("key{:010}", i * 2).as_bytes(), i + 1, ValueKind::Put),
                Vec::new(),
            )
        })
        .collect();
    let built = build(&entries, ExtentOptions::default());
    let file = file_with(&built);
    let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
    for i in 0..n {
        assert!(r.may_contain(format!("key{:010}", i * 2).as_bytes()), "false negative");
    }
    let fp = (0..n)
        .filter(|i| r.may_contain(format!("key{:010}", i * 2 + 1).as_bytes()))
        .count();
    let rate = fp as f64 / n as f64;
    assert!(rate < 0.02, "false-positive rate {rate}");
    // The filter is ~10 bits per key, plus per block at most one line of rounding and its
    // end line.
    let blocks = u64::from(r.props().data_blocks);
    assert!((r.props().filter_size as u64) < n * 10 / 8 + blocks * (64 + 4) + 1024);

    let no_filter = build(
        &entries[..100].to_vec(),
        ExtentOptions {
            bloom_bits_per_key: 0,
            ..Default::default()
        },
    );
    assert_eq!(no_filter.props.filter_size, 0);
    let file = file_with(&no_filter);
    let r = ExtentReader::open(&file, &path(), BASE, 1).unwrap();
    assert!(!r.has_filter());
    assert!(r.may_contain(b"anything"));
}

#[test]
fn compression_only_when_it_pays() {
    let mut rng = StdRng::seed_from_u64(8);
    let compressible: Entries = (0..2000u64)
        .map(|i| {
            (
                ikey(format!("k{i:08}").as_bytes(), i + 1, ValueKind::Put),
                vec![b'z'; 200],
            )
        })
        .collect();
    let random: Entries = (0..2000u64)
        .map(|i| {
            (
                ikey(format!("k{i:08}").as_bytes(), i + 1, ValueKind::Put),
                (0..200).map(|_| rng.random()).collect(),
            )
        })
        .collect();
    let c = build(&compressible, ExtentOptions::default());
    assert_eq!(c.props.compressed_blocks, c.blocks);
    assert!(c.props.data_size < c.props.raw_value_bytes / 4);
    let u = build(&random, ExtentOptions::default());
    assert_eq!(u.props.compressed_blocks, 0);
    let opts = ExtentOptions {
        compression: Compression::None,
        ..Default::default()
    };
    let n = build(&compressible, opts.clone());
    assert_eq!(n.props.compressed_blocks, 0);
    check_extent(&compressible, &c, &ExtentOptions::default(), &mut rng);
    check_extent(&compressible, &n, &opts, &mut rng);
}

#[test]
fn builder_refuses_bad_input() {
    let mut b = ExtentBuilder::new(ExtentOptions::default());
    assert!(b.is_empty());
    assert!(matches!(b.add(b"short", b""), Err(Error::InvalidOption { .. })));
    let mut bad_kind = b"key".to_vec();
    bad_kind.extend_from_slice(&((5u64 << 8) | 9).to_le_bytes());
    assert!(matches!(b.add(&bad_kind, b""), Err(Error::InvalidOption { .. })));
    b.add(&ikey(b"b", 5, ValueKind::Put), b"v").unwrap();
    // equal, older-LSN-first, and smaller user keys are out of order
    for k in [
        ikey(b"b", 5, ValueKind::Put),
        ikey(b"b", 6, ValueKind::Put),
        ikey(b"a", 1, ValueKind::Put),
    ] {
        assert!(matches!(b.add(&k, b""), Err(Error::InvalidOption { .. })));
    }
    // the builder is unchanged by refused adds
    b.add(&ikey(b"b", 4, ValueKind::Delete), b"").unwrap();
    assert_eq!(b.entries(), 2);
    let built = b.finish().unwrap();
    assert_eq!(built.props.entries, 2);
    assert_eq!(built.props.deletes, 1);
    assert_eq!(built.props.user_keys, 1, "two versions of one user key");
    assert!(matches!(
        ExtentBuilder::new(ExtentOptions::default()).finish(),
        Err(Error::InvalidOption { .. })
    ));
    // options
    for bad in [
        ExtentOptions {
            block_size: 0,
            ..Default::default()
        },
        ExtentOptions {
            restart_interval: 0,
            ..Default::default()
        },
        ExtentOptions {
            bloom_bits_per_key: 1000,
            ..Default::default()
        },
    ] {
        assert!(bad.validate().is_err());
        // clamped, still usable
        let mut b = ExtentBuilder::new(bad);
        b.add(&ikey(b"x", 1, ValueKind::Put), b"y").unwrap();
        b.finish().unwrap();
    }
}

/// Which region of an extent a byte belongs to, with the region's absolute bounds.
fn regions(built: &BuiltExtent) -> Vec<(String, u64, u64)> {
    let f = Footer::decode(&built.footer).unwrap();
    let mut v: Vec<(String, u64, u64)> = built
        .index
        .iter()
        .enumerate()
        .map(|(i, e)| {
            (
                format!("data block {i}"),
                BASE + e.offset,
                BASE + e.offset + e.stored_size(),
            )
        })
        .collect();
    let h = |name: &str, h: Handle| (name.to_string(), BASE + h.offset, BASE + h.end());
    v.push(h("index", f.index));
    if f.filter.size > 0 {
        v.push(h("filter", f.filter));
    }
    v.push(h("properties", f.props));
    let end = BASE + built.slots as u64 * EXTENT_SIZE;
    v.push(("footer".into(), end - FOOTER_SIZE as u64, end));
    v
}

fn assert_corruption_in(e: Error, lo: u64, hi: u64, what: &str) {
    match e {
        Error::Corruption {
            path: p,
            offset,
            reason,
        } => {
            assert_eq!(p, path(), "{what}: {reason}");
            assert!(
                offset >= lo && offset < hi,
                "{what}: offset {offset} not in {lo}..{hi} ({reason})"
            );
        }
        e => panic!("{what}: expected corruption, got {e:?}"),
    }
}

#[test]
fn every_flipped_byte_is_caught_in_its_region() {
    let mut rng = StdRng::seed_from_u64(9);
    let entries = random_entries(&mut rng, 120, 40);
    let opts = ExtentOptions {
        block_size: 512,
        ..Default::default()
    };
    let built = build(&entries, opts);
    assert!(built.blocks >= 4);
    let good = file_with(&built);
    let regions = regions(&built);
    for (name, lo, hi) in &regions {
        for pos in *lo..*hi {
            for bit in [0x01u8, 0x80] {
                let mut f = MemFile(good.0.clone());
                f.0[pos as usize] ^= bit;
                let what = format!("{name} byte {}", pos - lo);
                let e = match verify_extent(&f, &path(), BASE, built.slots) {
                    Ok(_) => panic!("{what}: damage not detected"),
                    Err(e) => e,
                };
                assert_corruption_in(e, *lo, *hi, &what);
                if name.starts_with("data block") {
                    // open succeeds; reading that block fails, other blocks still read
                    let r = ExtentReader::open(&f, &path(), BASE, built.slots).unwrap();
                    let i: usize = name["data block ".len()..].parse().unwrap();
                    assert_corruption_in(r.read_block(&f, i).unwrap_err(), *lo, *hi, &what);
                    assert_corruption_in(r.read_raw_block(&f, i).unwrap_err(), *lo, *hi, &what);
                    let other = if i == 0 { 1 } else { 0 };
                    r.read_block(&f, other).unwrap();
                } else {
                    let e = ExtentReader::open(&f, &path(), BASE, built.slots).unwrap_err();
                    assert_corruption_in(e, *lo, *hi, &what);
                }
            }
        }
    }
    // The gap between the valid bytes and the footer is never read.
    let mut f = MemFile(good.0.clone());
    let gap = BASE as usize + built.valid.len();
    for b in &mut f.0[gap..gap + 1000] {
        *b = 0x5a;
    }
    verify_extent(&f, &path(), BASE, 1).unwrap();
}

#[test]
fn compressed_block_damage_is_caught() {
    let entries: Entries = (0..3000u64)
        .map(|i| {
            (
                ikey(format!("k{i:08}").as_bytes(), i + 1, ValueKind::Put),
                vec![b'q'; 100],
            )
        })
        .collect();
    let built = build(&entries, ExtentOptions::default());
    assert!(built.props.compressed_blocks > 0);
    let good = file_with(&built);
    let mut rng = StdRng::seed_from_u64(10);
    for (name, lo, hi) in regions(&built) {
        for _ in 0..20 {
            let pos = rng.random_range(lo..hi);
            let mut f = MemFile(good.0.clone());
            f.0[pos as usize] ^= 1 << rng.random_range(0..8);
            let e = verify_extent(&f, &path(), BASE, 1).unwrap_err();
            assert_corruption_in(e, lo, hi, &name);
        }
    }
}

#[test]
fn missing_truncated_or_foreign_extents() {
    let mut rng = StdRng::seed_from_u64(11);
    let entries = random_entries(&mut rng, 50, 20);
    let built = build(&entries, ExtentOptions::default());
    let good = file_with(&built);
    let footer_at = BASE + EXTENT_SIZE - FOOTER_SIZE as u64;
    // Nothing written there (zeros): bad magic at the footer.
    let zeros = MemFile(vec![0; 3 * EXTENT_SIZE as usize]);
    assert_corruption_in(
        ExtentReader::open(&zeros, &path(), BASE, 1).unwrap_err(),
        footer_at,
        footer_at + FOOTER_SIZE as u64,
        "zeros",
    );
    // A file that ends early.
    let short = MemFile(good.0[..good.0.len() - 10].to_vec());
    assert!(ExtentReader::open(&short, &path(), BASE, 1)
        .unwrap_err()
        .is_corruption());
    let short = MemFile(good.0[..BASE as usize + 100].to_vec());
    assert!(ExtentReader::open(&short, &path(), BASE, 1)
        .unwrap_err()
        .is_corruption());
    // An I/O error stays an I/O error.
    let e = ExtentReader::open(&FailFile, &path(), BASE, 1).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // Zero slots is a caller error.
    assert!(matches!(
        ExtentReader::open(&good, &path(), BASE, 0),
        Err(Error::InvalidOption { .. })
    ));
    // A newer format version (with a valid CRC) is reported as such.
    let mut f = Footer::decode(&built.footer).unwrap();
    f.version = EXTENT_FORMAT_VERSION + 1;
    let mut newer = MemFile(good.0.clone());
    newer.0[footer_at as usize..].copy_from_slice(&f.encode());
    assert!(matches!(
        ExtentReader::open(&newer, &path(), BASE, 1),
        Err(Error::UnsupportedFormat {
            found: 7,
            supported: 6,
            ..
        })
    ));
    // Footer handles that do not fit together (valid CRC) are corruption at the footer.
    let mut f = Footer::decode(&built.footer).unwrap();
    f.props.size += 1;
    let mut bad = MemFile(good.0.clone());
    bad.0[footer_at as usize..].copy_from_slice(&f.encode());
    assert_corruption_in(
        ExtentReader::open(&bad, &path(), BASE, 1).unwrap_err(),
        footer_at,
        footer_at + 64,
        "handles",
    );
    // Crafted footers with a valid CRC but absurd handles never panic.
    let mut rng = StdRng::seed_from_u64(13);
    let good_footer = Footer::decode(&built.footer).unwrap();
    for round in 0..2000 {
        let mut f = good_footer;
        let pick = |rng: &mut StdRng, v: u64| match rng.random_range(0..4) {
            0 => v,
            1 => rng.random(),
            2 => u64::MAX - rng.random_range(0..10),
            _ => v.wrapping_add(rng.random_range(0..8)).wrapping_sub(4),
        };
        f.valid_size = pick(&mut rng, f.valid_size);
        f.index.offset = pick(&mut rng, f.index.offset);
        f.index.size = pick(&mut rng, f.index.size as u64) as u32;
        f.filter.offset = pick(&mut rng, f.filter.offset);
        f.filter.size = pick(&mut rng, f.filter.size as u64) as u32;
        f.props.offset = pick(&mut rng, f.props.offset);
        f.props.size = pick(&mut rng, f.props.size as u64) as u32;
        if round % 3 == 0 {
            f.filter.size = 0;
        }
        let mut bad = MemFile(good.0.clone());
        bad.0[footer_at as usize..].copy_from_slice(&f.encode());
        if let Err(e) = ExtentReader::open(&bad, &path(), BASE, 1) {
            assert!(e.is_corruption(), "{e:?}");
        }
    }
    // Out-of-range block number.
    let r = ExtentReader::open(&good, &path(), BASE, 1).unwrap();
    assert!(matches!(r.read_block(&good, 1000), Err(Error::InvalidOption { .. })));
    assert_eq!(r.block_file_offset(0), Some(BASE));
    assert!(r.memory_size() > 0);
}

/// Copies of data blocks from a format 3 extent take the block's index entry and filter lines
/// as they are (no decode); the result is exactly what adding the entries would build, and
/// user keys that continue across copied blocks or from added entries are counted once.
#[test]
fn copied_format3_blocks_keep_their_index_entries_and_filter_lines() {
    let mut rng = StdRng::seed_from_u64(31);
    // Up to 40 versions per key: user keys continue across many block boundaries.
    let entries = versioned_entries(&mut rng, 600, 40, 30);
    let opts = ExtentOptions {
        block_size: 1024,
        ..Default::default()
    };
    let src = build(&entries, opts.clone());
    let sfile = file_with(&src);
    let sr = ExtentReader::open(&sfile, &path(), BASE, src.slots).unwrap();
    let n = sr.index().len();
    assert!(n > 20);
    let continued = (1..n)
        .filter(|&i| {
            let (a, b) = (&sr.index()[i - 1].last_key, &sr.index()[i].first_key);
            a[..a.len() - 8] == b[..b.len() - 8]
        })
        .count();
    assert!(continued > 3, "the test needs user keys that span blocks");

    // Every block copied: the same bytes as the source extent.
    let mut b = ExtentBuilder::new(opts.clone());
    for i in 0..n {
        b.copy_block(&sr, &sfile, i).unwrap();
    }
    assert_eq!(b.decoded_copies(), 0, "format 3 blocks are copied without decoding");
    let copy = b.finish().unwrap();
    assert_eq!(copy.props, src.props);
    assert_eq!(copy.valid, src.valid);
    assert_eq!(copy.footer, src.footer);

    // Added entries around copied blocks, one sharing the copied block's first user key.
    let mut b = ExtentBuilder::new(opts.clone());
    let mut expected = Entries::new();
    let mut row = 0usize;
    for i in 0..n {
        let e = &sr.index()[i];
        let rows = e.rows as usize;
        if i % 3 == 1 {
            // A newer version of the block's first user key, unless the previous block already
            // holds that user key (then no newer version could sort between them).
            let (user, lsn, _) = decode_internal_key(&e.first_key).unwrap();
            let prev_user = expected.last().map(|(k, _)| decode_internal_key(k).unwrap().0.to_vec());
            if prev_user.as_deref() != Some(user) && lsn < MAX_LSN {
                let k = ikey(user, lsn + 1_000_000, ValueKind::Put);
                b.add(&k, b"newer").unwrap();
                expected.push((k, b"newer".to_vec()));
            }
        }
        if i % 4 == 3 {
            // Re-add the block's entries one by one instead of copying it.
            for (k, v) in &entries[row..row + rows] {
                b.add(k, v).unwrap();
            }
        } else {
            b.copy_block(&sr, &sfile, i).unwrap();
        }
        expected.extend_from_slice(&entries[row..row + rows]);
        row += rows;
    }
    assert_eq!(b.decoded_copies(), 0);
    let mixed = b.finish().unwrap();
    let mfile = file_with(&mixed);
    let mr = verify_extent(&mfile, &path(), BASE, mixed.slots).unwrap();
    let mut users: Vec<&[u8]> = expected.iter().map(|(k, _)| &k[..k.len() - 8]).collect();
    users.dedup();
    assert_eq!(mr.props().user_keys, users.len() as u64);
    assert_eq!(mr.props().entries, expected.len() as u64);
    // As if every entry were added (block layout aside).
    let direct = build(&expected, opts.clone()).props;
    let stats = |p: &ExtentProperties| {
        (
            (p.entries, p.deletes, p.user_keys, p.min_lsn, p.max_lsn),
            (
                p.raw_key_bytes,
                p.raw_value_bytes,
                p.smallest.clone(),
                p.largest.clone(),
            ),
        )
    };
    assert_eq!(stats(mr.props()), stats(&direct));
    for u in &users {
        assert!(mr.may_contain(u));
    }
}

/// The bounds flushes and compactions cut extents by hold: after a copied block (taken as is
/// or decoded) or a group of versions, [`ExtentBuilder::estimated_size`] is at most what
/// `estimated_size_after_copy` / `estimated_size_after_entries` said before.
#[test]
fn size_bounds_hold_for_copied_blocks_and_version_groups() {
    let entries = versioned_entries(&mut StdRng::seed_from_u64(33), 400, 12, 300);
    for (src_bits, bits, compression) in [
        (10, 10, Compression::None),
        (20, 10, Compression::Lz4),
        (10, 0, Compression::None),
    ] {
        let opts = |bits| ExtentOptions {
            block_size: 1024,
            bloom_bits_per_key: bits,
            compression,
            ..Default::default()
        };
        let src = build(&entries, opts(src_bits));
        let sfile = file_with(&src);
        let sr = ExtentReader::open(&sfile, &path(), BASE, src.slots).unwrap();
        let mut b = ExtentBuilder::new(opts(bits));
        let mut row = 0usize;
        for i in 0..sr.index().len() {
            let rows = sr.index()[i].rows as usize;
            if i % 2 == 0 {
                let bound = b.estimated_size_after_copy(&sr, i).unwrap();
                b.copy_block(&sr, &sfile, i).unwrap();
                assert!(b.estimated_size() <= bound, "copy of block {i}");
            } else {
                let block = &entries[row..row + rows];
                for group in block.chunk_by(|x, y| x.0[..x.0.len() - 8] == y.0[..y.0.len() - 8]) {
                    let bound = b.estimated_size_after_entries(group.iter().map(|(k, v)| (k.len(), v.len())));
                    for (k, v) in group {
                        b.add(k, v).unwrap();
                    }
                    assert!(b.estimated_size() <= bound, "versions in block {i}");
                }
            }
            row += rows;
        }
        let est = b.estimated_size();
        let built = b.finish().unwrap();
        assert!(built.valid.len() + FOOTER_SIZE <= est);
    }
}

/// Blocks whose filter lines do not fit the builder's filter (another probe count, no filter,
/// or an older format) are decoded and get a filter of their own keys.
#[test]
fn copied_blocks_with_unfit_filters_are_decoded() {
    let entries = versioned_entries(&mut StdRng::seed_from_u64(32), 300, 8, 20);
    let opts = |bits| ExtentOptions {
        block_size: 1024,
        bloom_bits_per_key: bits,
        ..Default::default()
    };
    let cases: [(u32, u32, bool); 5] = [
        // (source bits, builder bits, decoded)
        (20, 10, true),
        // The same probe count, lines sized for other bits per key.
        (12, 14, true),
        (0, 10, true),
        (10, 0, false),
        (0, 0, false),
    ];
    for (src_bits, bits, decoded) in cases {
        let src = build(&entries, opts(src_bits));
        let sfile = file_with(&src);
        let sr = ExtentReader::open(&sfile, &path(), BASE, src.slots).unwrap();
        let mut b = ExtentBuilder::new(opts(bits));
        for i in 0..sr.index().len() {
            b.copy_block(&sr, &sfile, i).unwrap();
        }
        let n = sr.index().len() as u32;
        assert_eq!(
            b.decoded_copies(),
            if decoded { n } else { 0 },
            "bits {src_bits} -> {bits}"
        );
        let built = b.finish().unwrap();
        let direct = build(&entries, opts(bits));
        assert_eq!(built.valid, direct.valid, "bits {src_bits} -> {bits}");
        verify_extent(&file_with(&built), &path(), BASE, built.slots).unwrap();
    }
    // A format 1 source (index entries without block stats, one filter over the extent).
    let mut v1 = ExtentBuilder::new_v1(opts(10));
    for (k, v) in &entries {
        v1.add(k, v).unwrap();
    }
    let src = v1.finish().unwrap();
    let sfile = file_with(&src);
    let sr = ExtentReader::open(&sfile, &path(), BASE, src.slots).unwrap();
    assert_eq!(sr.format_version(), 1);
    for bits in [10, 0] {
        let mut b = ExtentBuilder::new(opts(bits));
        for i in 0..sr.index().len() {
            b.copy_block(&sr, &sfile, i).unwrap();
        }
        assert_eq!(b.decoded_copies() as usize, sr.index().len(), "v1 blocks are decoded");
        let built = b.finish().unwrap();
        assert_eq!(built.props.format_version, EXTENT_FORMAT_VERSION);
        let r = verify_extent(&file_with(&built), &path(), BASE, built.slots).unwrap();
        assert_eq!(r.props().user_keys, src.props.user_keys);
        assert!(r.index().iter().all(|e| e.users > 0 && e.key_bytes > 0));
    }
}

#[test]
fn raw_blocks_are_reused_verbatim() {
    let mut rng = StdRng::seed_from_u64(12);
    let src_entries: Entries = (0..2000u64)
        .map(|i| {
            let kind = if i % 9 == 0 { ValueKind::Delete } else { ValueKind::Put };
            (
                ikey(format!("m{i:06}").as_bytes(), 5000 + i, kind),
                format!("v{i}").repeat(20).into_bytes(),
            )
        })
        .collect();
    for compression in [Compression::Lz4, Compression::None] {
        let opts = ExtentOptions {
            block_size: 2048,
            compression,
            ..Default::default()
        };
        let src = build(&src_entries, opts.clone());
        let sfile = file_with(&src);
        let sr = ExtentReader::open(&sfile, &path(), BASE, 1).unwrap();
        assert!(sr.index().len() > 6);
        // New extent: a few fresh entries, then blocks 2..5 of the source verbatim, then more.
        let mut b = ExtentBuilder::new(opts.clone());
        let mut expected = Entries::new();
        for i in 0..10u64 {
            let e = (
                ikey(format!("a{i:03}").as_bytes(), i + 1, ValueKind::Put),
                vec![1u8; 30],
            );
            b.add(&e.0, &e.1).unwrap();
            expected.push(e);
        }
        let mut row = sr.index()[..2].iter().map(|e| e.rows as usize).sum::<usize>();
        for i in 2..5 {
            let raw = sr.read_raw_block(&sfile, i).unwrap();
            b.add_raw_block(&raw).unwrap();
            let rows = raw.entry.rows as usize;
            expected.extend_from_slice(&src_entries[row..row + rows]);
            row += rows;
        }
        // A block that does not sort after the last key is refused.
        let raw0 = sr.read_raw_block(&sfile, 0).unwrap();
        assert!(matches!(b.add_raw_block(&raw0), Err(Error::InvalidOption { .. })));
        // Damaged bytes are corruption naming the source.
        let mut damaged = sr.read_raw_block(&sfile, 6).unwrap();
        damaged.stored[3] ^= 1;
        assert!(b.add_raw_block(&damaged).unwrap_err().is_corruption());
        let mut lying = sr.read_raw_block(&sfile, 6).unwrap();
        lying.entry.rows += 1;
        assert!(b.add_raw_block(&lying).unwrap_err().is_corruption());
        // `copy_block` reads straight from the source file: a damaged byte there is corruption
        // and leaves the builder as it was; an intact block is taken like `add_raw_block` does.
        let mut damaged_file = file_with(&src);
        let at = (BASE + sr.index()[6].offset) as usize + 5;
        damaged_file.0[at] ^= 1;
        let size_before = b.estimated_size();
        assert!(b.copy_block(&sr, &damaged_file, 6).unwrap_err().is_corruption());
        assert_eq!(b.estimated_size(), size_before);
        assert!(matches!(b.copy_block(&sr, &sfile, 0), Err(Error::InvalidOption { .. })));
        for i in 6..8 {
            b.copy_block(&sr, &sfile, i).unwrap();
            let rows = sr.index()[i].rows as usize;
            let start: usize = sr.index()[..i].iter().map(|e| e.rows as usize).sum();
            expected.extend_from_slice(&src_entries[start..start + rows]);
        }
        for i in 0..10u64 {
            let e = (
                ikey(format!("z{i:03}").as_bytes(), i + 1, ValueKind::Delete),
                Vec::new(),
            );
            b.add(&e.0, &e.1).unwrap();
            expected.push(e);
        }
        let built = b.finish().unwrap();
        // The reused blocks are byte-identical.
        for i in (2..5).chain(6..8) {
            let se = &sr.index()[i];
            let de = built.index.iter().find(|e| e.first_key == se.first_key).unwrap();
            let s = &src.valid[se.offset as usize..(se.offset + se.stored_size()) as usize];
            let d = &built.valid[de.offset as usize..(de.offset + de.stored_size()) as usize];
            assert_eq!(s, d);
        }
        check_extent(&expected, &built, &opts, &mut rng);
    }
}

#[test]
fn readers_and_blocks_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ExtentReader>();
    assert_send_sync::<Block>();
    assert_send_sync::<BlockIter>();
    assert_send_sync::<ExtentProperties>();
    assert_send_sync::<IndexEntry>();
}

#[test]
fn constants() {
    assert_eq!(EXTENT_SIZE, 2 << 20);
    assert_eq!(FOOTER_SIZE, 64);
    assert_eq!(EXTENT_MAGIC.to_le_bytes(), *b"RPTEXTNT");
    assert_eq!(EXTENT_FORMAT_VERSION, 6);
    let _ = Path::new("");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Any set of entries round-trips through any options.
        #[test]
        fn any_entries_round_trip(
            raw in proptest::collection::btree_map(
                (proptest::collection::vec(0u8..4, 0..6), 0u64..50, any::<bool>()),
                proptest::collection::vec(any::<u8>(), 0..40),
                1..200,
            ),
            block_size in 32usize..2048,
            restart_interval in 1usize..8,
            bits in 0u32..16,
            lz4 in any::<bool>(),
        ) {
            let mut entries: Entries = raw
                .into_iter()
                .map(|((u, lsn, del), v)| {
                    let kind = if del { ValueKind::Delete } else { ValueKind::Put };
                    (ikey(&u, lsn, kind), v)
                })
                .collect();
            entries.sort_by(|a, b| compare_internal_keys(&a.0, &b.0));
            entries.dedup_by(|a, b| compare_internal_keys(&a.0, &b.0) == Ordering::Equal);
            let opts = ExtentOptions {
                block_size,
                restart_interval,
                bloom_bits_per_key: bits,
                compression: if lz4 { Compression::Lz4 } else { Compression::Zstd },
                compression_level: 1,
                hash_index: lz4,
                dictionary: None,
            };
            let built = build(&entries, opts.clone());
            let mut rng = StdRng::seed_from_u64(entries.len() as u64);
            check_extent(&entries, &built, &opts, &mut rng);
        }
    }
}

#[test]
fn fast_comparison_matches_compare_internal_keys() {
    let mut rng = StdRng::seed_from_u64(14);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for _ in 0..400 {
        let len = [0usize, 3, 7, 8, 9, 15, 16, 17, 24, 70, 80][rng.random_range(0..11)];
        let k: Vec<u8> = (0..len)
            .map(|_| [0u8, 1, 0x7f, 0x80, 0xff][rng.random_range(0..5)])
            .collect();
        keys.push(k);
    }
    // shared prefixes, tag-only differences
    let base = ikey(&[9u8; 70], 5, ValueKind::Put);
    keys.push(base.clone());
    keys.push(ikey(&[9u8; 70], 6, ValueKind::Put));
    keys.push(ikey(&[9u8; 70], 5, ValueKind::Delete));
    keys.push(ikey(&[9u8; 69], 5, ValueKind::Put));
    for a in &keys {
        for b in &keys {
            assert_eq!(cmp_ikey(a, b), compare_internal_keys(a, b), "{a:?} vs {b:?}");
        }
        assert_eq!(cmp_bytes(a, &base), a.cmp(&base));
    }
}

#[test]
fn prefetch_is_a_harmless_hint_for_any_position() {
    // Exercises the `unsafe` prefetch instruction: in bounds, at the ends, out of bounds and on
    // empty slices. Nothing may fault and the bytes must be unchanged.
    let bytes: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let before = bytes.clone();
    for at in [0, 1, 63, 64, 500, 999, 1000, 5000, usize::MAX] {
        prefetch(&bytes, at);
    }
    prefetch(&[], 0);
    prefetch(&bytes[..0], 3);
    for (start, end, lines) in [
        (0, 1000, 16),
        (10, 20, 1),
        (999, 5000, 4),
        (5000, 6000, 4),
        (500, 100, 4),
        (0, usize::MAX, 0),
        (usize::MAX - 10, usize::MAX, 2),
    ] {
        prefetch_range(&bytes, start, end, lines);
    }
    prefetch_range(&[], 0, 100, 8);
    assert_eq!(bytes, before);
}

// ---- Partial point reads (extent/point.rs) ----

/// The answer of a whole-block point lookup of `seek` in block `b`: the first entry `>= seek`
/// if it belongs to `user` (what `get_from_levels` would return), else `None`.
fn full_point(
    r: &ExtentReader,
    f: &dyn ReadableFile,
    b: usize,
    user: &[u8],
    seek: &[u8],
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut it = BlockIter::new(Arc::new(r.read_block(f, b).unwrap()));
    it.seek_point_hashed(seek, filter_hash(user));
    it.status().unwrap();
    if !it.valid() || decode_internal_key(it.key()).unwrap().0 != user {
        return None;
    }
    Some((it.key().to_vec(), it.value().to_vec()))
}

/// The seek key of a lookup of `user`'s newest version.
fn latest_seek(user: &[u8]) -> Vec<u8> {
    let mut seek = Vec::new();
    crate::read::seek_key(&mut seek, user, Lsn::MAX >> 8);
    seek
}

/// A point lookup's answer: the found entry (key, value) if it belongs to the sought user key.
type Answer = Option<(Vec<u8>, Vec<u8>)>;

/// A partial read's answer in the same terms; `Err(())` for NeedFull.
fn partial_point(
    r: &ExtentReader,
    f: &dyn ReadableFile,
    b: usize,
    user: &[u8],
    seek: &[u8],
    scratch: &mut PointScratch,
) -> Result<std::result::Result<Answer, ()>> {
    Ok(match r.point_read(f, b, seek, filter_hash(user), scratch)? {
        PointRead::NeedFull => Err(()),
        PointRead::Absent => Ok(None),
        PointRead::Found => {
            let uk = decode_internal_key(scratch.key()).unwrap().0;
            Ok((uk == user).then(|| (scratch.key().to_vec(), scratch.value().to_vec())))
        }
    })
}

/// Entries with `versions` versions per user key of 16-byte keys and values of up to
/// `max_value` bytes (all versions of a key adjacent, newest first).
fn versioned_entries(rng: &mut StdRng, keys: usize, versions: usize, max_value: usize) -> Entries {
    let mut v = Vec::new();
    let mut lsn = 1u64;
    for _ in 0..keys {
        let user = format!("{:016x}", rng.random::<u64>()).into_bytes();
        let n = rng.random_range(1..=versions);
        for _ in 0..n {
            let kind = if rng.random_bool(0.1) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let vlen = rng.random_range(0..=max_value);
            v.push((ikey(&user, lsn, kind), (0..vlen).map(|_| rng.random()).collect()));
            lsn += 1;
        }
    }
    v.sort_by(|a, b| compare_internal_keys(&a.0, &b.0));
    v
}

/// Partial reads give exactly the whole-block answer whenever they answer, for present keys at
/// every snapshot (including between versions) and for absent keys; and they do answer most
/// lookups of short rows (so the test cannot pass by always saying NeedFull).
#[test]
fn partial_point_reads_match_whole_block_reads() {
    for seed in 0..12u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let versions = [1, 1, 3, 40][seed as usize % 4];
        // 9000: single entries larger than the 4 KiB first read (regions read on their own).
        let max_value = [10, 9000, 200, 3000][seed as usize / 3 % 4];
        let entries = versioned_entries(&mut rng, 3000, versions, max_value);
        let opts = ExtentOptions {
            compression: Compression::None,
            restart_interval: rng.random_range(1..=32),
            ..ExtentOptions::default()
        };
        let built = build(&entries, opts);
        let file = file_with(&built);
        let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
        let mut scratch = PointScratch::default();
        let (mut answered, mut asked) = (0usize, 0usize);
        let mut check = |user: &[u8], snapshot: Lsn| {
            let mut seek = Vec::new();
            crate::read::seek_key(&mut seek, user, snapshot);
            let Some(b) = r.find_block(&seek) else { return };
            asked += 1;
            if let Ok(partial) = partial_point(&r, &file, b, user, &seek, &mut scratch).unwrap() {
                answered += 1;
                assert_eq!(
                    partial,
                    full_point(&r, &file, b, user, &seek),
                    "seed {seed}: {:?} at {snapshot}",
                    String::from_utf8_lossy(user)
                );
            }
        };
        for (k, _) in entries.iter().step_by(3) {
            let (user, lsn, _) = decode_internal_key(k).unwrap();
            let user = user.to_vec();
            for snapshot in [lsn, lsn.saturating_sub(1), lsn + 1, Lsn::MAX >> 8] {
                check(&user, snapshot);
            }
        }
        for _ in 0..2000 {
            let absent = format!("{:016x}", rng.random::<u64>()).into_bytes();
            check(&absent, Lsn::MAX >> 8);
        }
        if versions == 1 && max_value == 200 {
            assert!(
                answered * 2 > asked,
                "seed {seed}: only {answered} of {asked} answered partially"
            );
        }
        assert!(answered > 0, "seed {seed}: no lookup answered partially");
    }
}

/// Blocks written before format 2 (no region checksums), compressed blocks and blocks without
/// a hash index are never read partially.
#[test]
fn partial_reads_need_region_checksums_and_a_hash_index() {
    let mut rng = StdRng::seed_from_u64(7);
    // Compressible values, so LZ4 keeps every block compressed.
    let mut entries = versioned_entries(&mut rng, 2000, 1, 10);
    for (_, v) in &mut entries {
        *v = vec![b'z'; 40];
    }
    for (compression, hash_index) in [(Compression::Lz4, true), (Compression::None, false)] {
        let opts = ExtentOptions {
            compression,
            hash_index,
            ..ExtentOptions::default()
        };
        let built = build(&entries, opts);
        let file = file_with(&built);
        let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
        let mut scratch = PointScratch::default();
        for (k, _) in entries.iter().step_by(7) {
            let user = decode_internal_key(k).unwrap().0;
            let seek = latest_seek(user);
            let b = r.find_block(&seek).unwrap();
            let got = r.point_read(&file, b, &seek, filter_hash(user), &mut scratch).unwrap();
            assert_eq!(got, PointRead::NeedFull, "{compression:?} hash_index={hash_index}");
        }
    }
}

/// A flipped byte anywhere in a block's stored bytes: a partial read either returns the same
/// answer as on the intact block (it did not touch the byte) or a corruption error naming the
/// file and an offset inside the block; and every lookup whose tail or region holds the byte
/// reports it.
#[test]
fn partial_reads_detect_flipped_bytes() {
    let mut rng = StdRng::seed_from_u64(11);
    let entries = versioned_entries(&mut rng, 1500, 2, 12);
    let opts = ExtentOptions {
        compression: Compression::None,
        ..ExtentOptions::default()
    };
    let built = build(&entries, opts);
    let good = file_with(&built);
    let r = ExtentReader::open(&good, &path(), BASE, built.slots).unwrap();
    let b = 1; // a block in the middle of the extent
    let e = r.index()[b].clone();
    let (lo, hi) = (BASE + e.offset, BASE + e.offset + e.size as u64);
    // Lookups that land in block `b`, each with the intact answer.
    let mut scratch = PointScratch::default();
    let lookups: Vec<(Vec<u8>, Vec<u8>, _)> = entries
        .iter()
        .map(|(k, _)| decode_internal_key(k).unwrap().0.to_vec())
        .chain((0..300).map(|_| format!("{:016x}", rng.random::<u64>()).into_bytes()))
        .filter_map(|user| {
            let seek = latest_seek(&user);
            (r.find_block(&seek) == Some(b)).then_some((user, seek))
        })
        .map(|(user, seek)| {
            let ok = partial_point(&r, &good, b, &user, &seek, &mut scratch).unwrap();
            (user, seek, ok)
        })
        .collect();
    assert!(lookups.iter().filter(|l| l.2.is_ok()).count() > 20);
    let mut detected = 0;
    for pos in (lo..hi).step_by(7).chain([hi - 1, hi - 4, hi - 8]) {
        let mut bad = MemFile(good.0.clone());
        bad.0[pos as usize] ^= 0x10;
        for (user, seek, intact) in &lookups {
            match partial_point(&r, &bad, b, user, seek, &mut scratch) {
                Ok(got) => {
                    if got.is_ok() {
                        assert_eq!(&got, intact, "flip at {pos} changed an answer for {user:?}");
                    }
                }
                Err(e) => {
                    detected += 1;
                    assert_corruption_in(e, lo, hi, &format!("flip at {pos}"));
                }
            }
        }
        // A flip in the last words of the tail (region checksums, tail checksum, footer) never
        // lets a partial read answer: it is reported, or (a footer that no longer announces
        // region checksums) left to the whole-block read and its checksum.
        if pos >= hi - 16 {
            for (user, seek, _) in &lookups {
                let got = partial_point(&r, &bad, b, user, seek, &mut scratch);
                assert!(
                    !matches!(got, Ok(Ok(_))),
                    "tail flip at {pos} not detected for {user:?}"
                );
            }
        }
    }
    assert!(detected > 100, "only {detected} corrupt lookups detected");
}

/// A block whose trailer CRC matches but whose region checksum is wrong (a writer bug, not
/// media damage): whole-block reads cannot see it, `verify_extent` and partial reads do.
#[test]
fn verify_checks_region_checksums_under_a_valid_trailer() {
    let mut rng = StdRng::seed_from_u64(5);
    let entries = versioned_entries(&mut rng, 800, 1, 10);
    let opts = ExtentOptions {
        compression: Compression::None,
        ..ExtentOptions::default()
    };
    let built = build(&entries, opts);
    let mut file = file_with(&built);
    let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
    let e = r.index()[0].clone();
    let (start, size) = ((BASE + e.offset) as usize, e.size as usize);
    let block = r.read_block(&file, 0).unwrap();
    block.check_region_crcs().unwrap();
    // Region 0's checksum is the first word after the restart array: R restarts, R checksums,
    // tail checksum, footer.
    let restarts = (get_u32(block.data(), size - 4).unwrap() & 0x3fff_ffff) as usize;
    let crc0 = start + size - 8 - 4 * restarts;
    file.0[crc0] ^= 1;
    // Re-seal the tail and the whole block, as a buggy writer would have.
    let tail_start = start + tail_start_of(block.data());
    let tail = crc32c::crc32c_append(
        crc32c::crc32c(&file.0[tail_start..start + size - 8]),
        &file.0[start + size - 4..start + size],
    );
    file.0[start + size - 8..start + size - 4].copy_from_slice(&mask_crc(tail).to_le_bytes());
    let t = format::trailer(&file.0[start..start + size], 0);
    file.0[start + size..start + size + TRAILER_SIZE].copy_from_slice(&t);
    r.read_block(&file, 0).unwrap();
    let err = verify_extent(&file, &path(), BASE, built.slots).unwrap_err();
    assert!(err.to_string().contains("restart region 0 checksum mismatch"), "{err}");
    // A partial lookup of the block's first key reads region 0 and reports it.
    let user = decode_internal_key(&entries[0].0).unwrap().0;
    let seek = latest_seek(user);
    let mut scratch = PointScratch::default();
    match r.point_read(&file, 0, &seek, filter_hash(user), &mut scratch) {
        Err(e) => assert_corruption_in(e, start as u64, (start + size) as u64, "region 0"),
        Ok(PointRead::NeedFull) => {} // the key's bucket is shared: read whole, nothing returned
        Ok(other) => panic!("partial read answered {other:?} from a region with a bad checksum"),
    }
}

/// Offset of the tail (hash index, or else restart array) in decoded block contents.
fn tail_start_of(data: &[u8]) -> usize {
    let n = data.len();
    let footer = get_u32(data, n - 4).unwrap();
    let restarts = (footer & 0x3fff_ffff) as usize;
    let restarts_at = n - 8 - 8 * restarts;
    if footer & (1 << 31) != 0 {
        let buckets = u16::from_le_bytes([data[restarts_at - 2], data[restarts_at - 1]]) as usize;
        restarts_at - 2 - buckets
    } else {
        restarts_at
    }
}

/// Extents written by format 1 (no region checksums) open, verify and read as before; their
/// blocks are never read partially, also when compaction copied them verbatim into a format 2
/// extent beside new blocks that are.
#[test]
fn format_1_extents_and_their_copied_blocks_read_whole() {
    let mut rng = StdRng::seed_from_u64(21);
    let entries = versioned_entries(&mut rng, 3000, 2, 12);
    let opts = ExtentOptions {
        compression: Compression::None,
        ..ExtentOptions::default()
    };
    let mut b = ExtentBuilder::new_v1(opts.clone());
    for (k, v) in &entries {
        b.add(k, v).unwrap();
    }
    let old = b.finish().unwrap();
    let ofile = file_with(&old);
    let or = verify_extent(&ofile, &path(), BASE, old.slots).unwrap();
    assert_eq!(or.props().format_version, 1);
    let mut scratch = PointScratch::default();
    for (k, v) in entries.iter().step_by(5) {
        let user = decode_internal_key(k).unwrap().0;
        let seek = latest_seek(user);
        let blk = or.find_block(&seek).unwrap();
        assert_eq!(
            or.point_read(&ofile, blk, &seek, filter_hash(user), &mut scratch)
                .unwrap(),
            PointRead::NeedFull
        );
        let (fk, fv) = full_point(&or, &ofile, blk, user, &seek).unwrap();
        assert_eq!(decode_internal_key(&fk).unwrap().0, user);
        // The newest version of the key is this one or a newer one.
        if &fk == k {
            assert_eq!(&fv, v);
        }
    }
    // A format 2 extent: new blocks, then format 1 blocks copied verbatim.
    let mut b = ExtentBuilder::new(opts);
    let fresh = versioned_entries(&mut StdRng::seed_from_u64(22), 300, 1, 12)
        .into_iter()
        .map(|(k, v)| {
            let (u, lsn, kind) = decode_internal_key(&k).unwrap();
            (ikey(&[b"!", u].concat(), lsn, kind), v)
        })
        .collect::<Entries>();
    for (k, v) in &fresh {
        b.add(k, v).unwrap();
    }
    let copied = or.index().len().min(4);
    for i in 0..copied {
        b.add_raw_block(&or.read_raw_block(&ofile, i).unwrap()).unwrap();
    }
    let mixed = b.finish().unwrap();
    let mfile = file_with(&mixed);
    let mr = verify_extent(&mfile, &path(), BASE, mixed.slots).unwrap();
    let (mut partial, mut whole) = (0, 0);
    for (k, _) in fresh.iter().chain(&entries[..entries.len() / 10]) {
        let user = decode_internal_key(k).unwrap().0;
        let seek = latest_seek(user);
        let Some(blk) = mr.find_block(&seek) else { continue };
        match partial_point(&mr, &mfile, blk, user, &seek, &mut scratch).unwrap() {
            Ok(got) => {
                partial += 1;
                assert!(
                    blk < mr.index().len() - copied,
                    "a copied format 1 block was read partially"
                );
                assert_eq!(got, full_point(&mr, &mfile, blk, user, &seek));
            }
            Err(()) => whole += 1,
        }
    }
    assert!(partial > 50 && whole > 50, "partial {partial}, whole {whole}");
}

/// In an extent where only some blocks compress, a partial read of a compressed block sees
/// the trailer's type byte and asks for a whole read; the others answer as whole reads do.
#[test]
fn partial_reads_skip_compressed_blocks_of_a_mixed_extent() {
    let mut rng = StdRng::seed_from_u64(31);
    let mut entries = versioned_entries(&mut rng, 4000, 1, 0);
    let third = entries.len() / 3;
    for (i, (_, v)) in entries.iter_mut().enumerate() {
        *v = if i < third {
            vec![b'z'; 40]
        } else {
            (0..40).map(|_| rng.random()).collect()
        };
    }
    let built = build(
        &entries,
        ExtentOptions {
            compression: Compression::Lz4,
            ..ExtentOptions::default()
        },
    );
    let file = file_with(&built);
    let r = ExtentReader::open(&file, &path(), BASE, built.slots).unwrap();
    let p = r.props();
    assert!(
        p.compressed_blocks > 0 && p.compressed_blocks * 2 <= p.data_blocks,
        "{p:?}"
    );
    let mut scratch = PointScratch::default();
    let (mut compressed_seen, mut answered) = (0, 0);
    for (k, _) in entries.iter().step_by(3) {
        let user = decode_internal_key(k).unwrap().0;
        let seek = latest_seek(user);
        let blk = r.find_block(&seek).unwrap();
        let e = &r.index()[blk];
        let stored = &file.0[(BASE + e.offset) as usize..][..e.size as usize + TRAILER_SIZE];
        let got = partial_point(&r, &file, blk, user, &seek, &mut scratch).unwrap();
        if stored[e.size as usize] != Compression::None as u8 {
            compressed_seen += 1;
            assert_eq!(got, Err(()), "a compressed block answered partially");
        } else if let Ok(got) = got {
            answered += 1;
            assert_eq!(got, full_point(&r, &file, blk, user, &seek));
        }
    }
    assert!(
        compressed_seen > 50 && answered > 100,
        "{compressed_seen} compressed, {answered} answered"
    );
}
