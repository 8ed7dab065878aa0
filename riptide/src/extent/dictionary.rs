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
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use super::codec::BlockCompressor;
use super::{Compression, EXTENT_SIZE};

/// Smallest dictionary accepted (zstd's trainer needs some room; smaller is not worth a block).
pub(crate) const MIN_DICT_BYTES: usize = 256;
/// Largest dictionary accepted (a dictionary is copied into every extent that uses it).
pub(crate) const MAX_DICT_BYTES: usize = 64 << 10;
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

/// A sub-table's dictionary state, kept by its compactions (`crate::compaction::dictionary`).
#[derive(Debug, Default)]
pub(crate) enum DictChoice {
    /// Not known yet: look in the extents, else train on the next compaction's inputs.
    #[default]
    Undecided,
    /// Compactions into zstd levels compress with this one.
    Use(Arc<BlockDict>),
    /// Training found no gain: the judged samples took `plain` bytes without a dictionary and
    /// `with_dict` with it. Not tried again until the database is reopened.
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
    // on those very samples.
    if samples.len() < 8 || total < 8 * max_bytes {
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
    let Ok(bytes) = zstd::dict::from_samples(&train_on, max_bytes) else {
        return Trained::TooFewSamples;
    };
    let Ok(dict) = BlockDict::from_bytes(&bytes) else {
        return Trained::TooFewSamples;
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
    use rand::{Rng, SeedableRng};

    /// Blocks of JSON-like rows: shared field names and enumerations, random ids.
    pub(crate) fn structured_blocks(n: usize, block: usize, seed: u64) -> Vec<Vec<u8>> {
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
        assert_eq!(c.kind(), Compression::ZstdDict);
        let mut out = Vec::new();
        for b in &blocks[..20] {
            assert_eq!(c.compress(b, &mut out), Compression::ZstdDict);
            assert_eq!(&decompress(Compression::ZstdDict, &out, Some(&dict)).unwrap(), b);
            assert!(decompress(Compression::ZstdDict, &out, None).is_err());
        }
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
