//! zstd dictionaries for data blocks: a sub-table's trained dictionary, stored in every extent
//! whose blocks use it (extent format 5; trailer type 3, see `docs/format.md`).
//!
//! A 16 KiB block gives zstd little history to match its first rows against; a dictionary
//! trained on the table's own blocks supplies it. It pays where rows share structure (field
//! names, enumerations, common prefixes) and blocks are small, and costs where rows are random:
//! measured on 16 KiB blocks, JSON-like rows shrank 3.7 % and rows of random digits grew
//! 1.2 %. So [`train`] keeps a dictionary only when, on the sampled blocks, it saves more than
//! its own copy in each extent costs.
//!
//! Invariants:
//! - A [`BlockDict`]'s `id` is the XXH3-64 of its bytes: two extents share a dictionary exactly
//!   when their ids are equal, and only then may a type-3 block move between them verbatim.
//! - Frames carry no dictionary id (the extent names its dictionary), no checksum (the block
//!   trailer's CRC covers the stored bytes) and no content size (the length prefix gives it).

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use xxhash_rust::xxh3::xxh3_64;

use super::block::{streams, Block, BlockBuilder, BlockIter};
use super::codec::BlockCompressor;
use super::{Compression, EXTENT_SIZE};
use crate::key::{decode_internal_key, encode_internal_key};

/// Smallest dictionary accepted (zstd's trainer needs some room; smaller is not worth a block).
pub(crate) const MIN_DICT_BYTES: usize = crate::table_options::MIN_ZSTD_DICTIONARY_BYTES;
/// Largest dictionary accepted (a dictionary is copied into every extent that uses it).
pub(crate) const MAX_DICT_BYTES: usize = crate::table_options::MAX_ZSTD_DICTIONARY_BYTES;
/// Sample bytes per dictionary byte the trainer is given at most (zstd suggests about 100).
const SAMPLE_BYTES_PER_DICT_BYTE: usize = 100;

/// A zstd dictionary, digested for decompression.
pub(crate) struct BlockDict {
    id: u64,
    bytes: Box<[u8]>,
    ddict: zstd::zstd_safe::DDict<'static>,
}

impl fmt::Debug for BlockDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockDict")
            .field("id", &format_args!("{:016x}", self.id))
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl BlockDict {
    /// A dictionary from its stored bytes (a dictionary block's contents, already
    /// CRC-checked); `Err(reason)` if zstd refuses them or the size is out of range.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<BlockDict, String> {
        if !(MIN_DICT_BYTES..=MAX_DICT_BYTES).contains(&bytes.len()) {
            return Err(format!(
                "zstd dictionary of {} bytes is outside {MIN_DICT_BYTES}..={MAX_DICT_BYTES}",
                bytes.len()
            ));
        }
        let ddict = zstd::zstd_safe::DDict::try_create(bytes).ok_or("zstd refuses the dictionary")?;
        Ok(BlockDict {
            id: xxh3_64(bytes),
            bytes: bytes.into(),
            ddict,
        })
    }

    /// [`Self::from_bytes`], shared: every extent of a sub-table stores the same dictionary, so
    /// open extents with equal bytes share one digested copy (about 27 KiB of tables plus the
    /// bytes) instead of holding one each.
    pub(crate) fn shared(bytes: &[u8]) -> Result<Arc<BlockDict>, String> {
        static OPEN: Mutex<Vec<Weak<BlockDict>>> = Mutex::new(Vec::new());
        let id = xxh3_64(bytes);
        let mut open = OPEN.lock();
        open.retain(|w| w.strong_count() > 0);
        if let Some(d) = open
            .iter()
            .filter_map(Weak::upgrade)
            .find(|d| d.id == id && *d.bytes == *bytes)
        {
            return Ok(d);
        }
        let d = Arc::new(BlockDict::from_bytes(bytes)?);
        open.push(Arc::downgrade(&d));
        Ok(d)
    }

    /// The dictionary's identity (XXH3-64 of its bytes).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The dictionary's bytes, as stored in an extent.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The digested form for decompression.
    pub(crate) fn ddict(&self) -> &zstd::zstd_safe::DDict<'static> {
        &self.ddict
    }
}

/// Decoded block contents `block` re-encoded as an extent of a zstd level stores them: no hash
/// index and no region checksums, restart points every `restart_interval` entries, and with
/// `zero_lsns` every LSN 0 (kinds kept; versions of a user key then collapse to the newest), as
/// a bottom-level merge writes rows older than every snapshot. `None` if it does not decode.
pub(crate) fn as_zstd_block(block: &[u8], restart_interval: usize, zero_lsns: bool) -> Option<Vec<u8>> {
    let decoded = Block::new(block.to_vec(), Arc::from(Path::new("sample")), 0).ok()?;
    let mut it = BlockIter::new(Arc::new(decoded));
    it.seek_to_first();
    let mut out = BlockBuilder::with_hash_index(restart_interval, false);
    out.region_crcs = false;
    let (mut prev, mut key) = (Vec::new(), Vec::new());
    while it.valid() {
        let (user, lsn, kind) = decode_internal_key(it.key())?;
        key.clear();
        encode_internal_key(&mut key, user, if zero_lsns { 0 } else { lsn }, kind);
        if key != prev {
            out.add(&prev, &key, it.value());
            std::mem::swap(&mut prev, &mut key);
        }
        it.next();
    }
    it.status().ok()?;
    (!out.is_empty()).then(|| out.finish().to_vec())
}

/// A sub-table's dictionary state, kept by its compactions (which choose it).
#[derive(Debug, Default)]
pub(crate) enum DictChoice {
    /// Not known yet: look in the extents, else train on the next compaction's inputs.
    #[default]
    Undecided,
    /// Compactions into zstd levels compress with this one.
    Use(Arc<BlockDict>),
    /// Training found no gain: the judged samples took `plain` bytes without a dictionary and
    /// `with_dict` with it (both 0: zstd could not train one). Not tried again until the
    /// database is reopened.
    Declined {
        /// Stored bytes of the judged samples without a dictionary.
        plain: u64,
        /// Stored bytes of the judged samples with the trained dictionary.
        with_dict: u64,
    },
}

/// What [`train`] found.
#[derive(Debug)]
pub(crate) enum Trained {
    /// Too few sample bytes to judge (try again with more data).
    TooFewSamples,
    /// A dictionary would not pay for its copy in each extent on these samples.
    NotWorthIt {
        /// Stored bytes of the samples without a dictionary.
        plain: u64,
        /// Stored bytes of the samples with the trained dictionary.
        with_dict: u64,
    },
    /// A dictionary worth using.
    Dict(BlockDict),
}

/// Trains a dictionary of at most `max_bytes` on `samples` (decoded data blocks of the table)
/// for zstd level `level`, then compresses every sample with and without it. The dictionary is
/// kept only if, scaled to a full extent of compressed data, it saves more than its own size
/// (plus 1 % of the extent, so a marginal gain does not trade block reuse with extents of the
/// old codec for nothing).
pub(crate) fn train(samples: &[&[u8]], max_bytes: usize, level: i32) -> Trained {
    let max_bytes = max_bytes.clamp(MIN_DICT_BYTES, MAX_DICT_BYTES);
    let total: usize = samples.iter().map(|s| s.len()).sum();
    // Too little data trains a dictionary of the samples themselves, which then looks great
    // on those very samples (and zstd's trainer wants several samples to train on).
    if samples.len() < 16 || total < 16 * max_bytes {
        return Trained::TooFewSamples;
    }
    // Train on every other sample and judge on the rest, so the judgement is not on the
    // training data.
    let (mut train_on, mut judge_on) = (Vec::new(), Vec::new());
    for (i, s) in samples.iter().enumerate() {
        if i % 2 == 0 {
            train_on.push(*s);
        } else {
            judge_on.push(*s);
        }
    }
    let budget = max_bytes * SAMPLE_BYTES_PER_DICT_BYTE;
    let mut taken = 0;
    train_on.retain(|s| {
        taken += s.len();
        taken <= budget
    });
    // Enough samples, yet zstd cannot train on them: nothing to gain, and not worth trying
    // again on every compaction.
    let failed = Trained::NotWorthIt { plain: 0, with_dict: 0 };
    // Blocks are stored as their key and value streams (types 4 and 5): train on those.
    let streams = as_streams(&train_on);
    let Ok(bytes) = zstd::dict::from_samples(&streams, max_bytes) else {
        return failed;
    };
    let Ok(dict) = BlockDict::from_bytes(&bytes) else {
        return failed;
    };
    let (plain, with_dict) = compressed_sizes(&judge_on, level, &dict);
    // Per extent of compressed data, the dictionary saves `EXTENT_SIZE * (1 - with/plain)`
    // and costs its own bytes.
    let saved_per_extent = EXTENT_SIZE as f64 * (1.0 - with_dict as f64 / plain.max(1) as f64);
    let cost_per_extent = dict.bytes().len() as f64 + EXTENT_SIZE as f64 / 100.0;
    if saved_per_extent > cost_per_extent {
        Trained::Dict(dict)
    } else {
        Trained::NotWorthIt { plain, with_dict }
    }
}

/// Each sample's key stream and value stream (`block::streams`), or the sample itself where it
/// is not a block; empty streams are left out.
fn as_streams(samples: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    for s in samples {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        if streams::split(s, &mut keys, &mut values).is_some() {
            out.extend([keys, values].into_iter().filter(|v| !v.is_empty()));
        } else {
            out.push(s.to_vec());
        }
    }
    out
}

/// Stored bytes of `samples` compressed one by one at `level`, without and with `dict` (a
/// block that would not shrink 12.5 % counts raw, as the builder stores it).
fn compressed_sizes(samples: &[&[u8]], level: i32, dict: &BlockDict) -> (u64, u64) {
    let mut plain = BlockCompressor::new(Compression::Zstd, level, None);
    let mut with = BlockCompressor::new(Compression::Zstd, level, Some(dict));
    let mut out = Vec::new();
    let mut stored = |c: &mut BlockCompressor, s: &[u8]| -> u64 {
        match c.compress(s, &mut out) {
            Compression::None => s.len() as u64,
            _ => out.len() as u64,
        }
    };
    let (mut a, mut b) = (0, 0);
    for s in samples {
        a += stored(&mut plain, s);
        b += stored(&mut with, s);
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent::codec::decompress;
    use crate::extent::tests::ikey;
    use rand::{Rng, SeedableRng};

    /// Blocks of JSON-like rows: shared field names and enumerations, random ids.
    fn structured_blocks(n: usize, block: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cities = ["Hangzhou", "Shanghai", "Beijing", "Shenzhen", "Chengdu"];
        let states = ["paid", "shipped", "delivered", "refunded"];
        let mut out = Vec::new();
        let mut cur = Vec::new();
        let mut i = 0u64;
        while out.len() < n {
            let row = format!(
                "{{\"order_id\":{},\"user\":\"user{}\",\"city\":\"{}\",\"status\":\"{}\",\"amount\":{}.{:02},\"sku\":\"SKU-{:06}\"}}",
                1_000_000 + i,
                rng.random_range(0..10_000),
                cities[rng.random_range(0..cities.len())],
                states[rng.random_range(0..states.len())],
                rng.random_range(1..500),
                rng.random_range(0..100),
                rng.random_range(0..100_000),
            );
            cur.extend_from_slice(&(i as u32).to_be_bytes());
            cur.extend_from_slice(row.as_bytes());
            i += 1;
            if cur.len() >= block {
                out.push(std::mem::take(&mut cur));
            }
        }
        out
    }

    /// Blocks whose first half is random bytes and second half a block-local repetition of
    /// it: zstd halves each block on its own, and nothing is shared between blocks for a
    /// dictionary to supply.
    fn self_similar_blocks(n: usize, block: usize) -> Vec<Vec<u8>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        (0..n)
            .map(|_| {
                let mut b: Vec<u8> = (0..block / 2).map(|_| rng.random::<u8>()).collect();
                b.extend_from_within(..);
                b
            })
            .collect()
    }

    #[test]
    fn a_dictionary_is_kept_for_structured_rows_in_small_blocks() {
        let blocks = structured_blocks(200, 4 << 10, 1);
        let samples: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
        let Trained::Dict(dict) = train(&samples, 8 << 10, 3) else {
            panic!("structured 4 KiB blocks should get a dictionary");
        };
        assert!(dict.bytes().len() <= 8 << 10);
        assert_eq!(dict.id(), xxh3_64(dict.bytes()));
        // Round trip through a compressor that uses it; without it the frame does not decode.
        let mut c = BlockCompressor::new(Compression::Zstd, 3, Some(&dict));
        assert_eq!(c.kind(), Compression::ZstdSplitDict);
        let mut out = Vec::new();
        for b in &blocks[..20] {
            assert_eq!(c.compress(b, &mut out), Compression::ZstdDict);
            assert_eq!(&decompress(Compression::ZstdDict, &out, Some(&dict)).unwrap(), b);
            assert!(decompress(Compression::ZstdDict, &out, None).is_err());
        }
    }

    #[test]
    fn training_samples_are_the_blocks_streams() {
        let mut b = BlockBuilder::with_hash_index(16, false);
        let mut prev = Vec::new();
        for i in 0..50u64 {
            let key = ikey(format!("key{i:04}").as_bytes(), i + 1, crate::key::ValueKind::Put);
            b.add(&prev, &key, format!("value {i}").as_bytes());
            prev = key;
        }
        let block = b.finish().to_vec();
        let other = b"not a block".to_vec();
        let out = as_streams(&[&block, &other]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].len() + out[1].len(), block.len());
        assert!(out[1].starts_with(b"value 0value 1"));
        assert_eq!(out[2], other);
    }

    #[test]
    fn blocks_sharing_nothing_get_no_dictionary() {
        let blocks = self_similar_blocks(200, 16 << 10);
        let samples: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
        match train(&samples, 16 << 10, 3) {
            Trained::NotWorthIt { plain, with_dict } => {
                // Compressed to about half, with or without the dictionary.
                assert!(plain < 100 * (16 << 10) * 6 / 10, "{plain}");
                assert!(with_dict * 100 > plain * 99, "{with_dict} vs {plain}");
            }
            Trained::TooFewSamples => {}
            Trained::Dict(d) => panic!("blocks sharing nothing got a dictionary: {d:?}"),
        }
    }

    #[test]
    fn too_few_samples_are_not_judged() {
        let blocks = structured_blocks(4, 4 << 10, 2);
        let samples: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
        assert!(matches!(train(&samples, 8 << 10, 3), Trained::TooFewSamples));
    }

    #[test]
    fn open_extents_share_one_copy_of_a_dictionary() {
        let raw: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 253) as u8).collect();
        let a = BlockDict::shared(&raw).unwrap();
        let b = BlockDict::shared(&raw).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let mut other = raw.clone();
        other[0] ^= 1;
        let c = BlockDict::shared(&other).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        // Once every holder is gone, the next one digests it afresh.
        let id = a.id();
        drop((a, b));
        assert_eq!(BlockDict::shared(&raw).unwrap().id(), id);
    }

    #[test]
    fn stored_dictionaries_are_checked() {
        assert!(BlockDict::from_bytes(&[0u8; 16]).is_err());
        assert!(BlockDict::from_bytes(&vec![7u8; MAX_DICT_BYTES + 1]).is_err());
        // Any bytes in range make a raw-content dictionary: zstd takes them, and the frames
        // compressed with it decode with it.
        let raw: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let d = BlockDict::from_bytes(&raw).unwrap();
        assert_eq!(d.bytes(), &raw[..]);
    }
}
