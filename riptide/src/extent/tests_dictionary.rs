//! Extents with a zstd dictionary (format 5 on: type-3 blocks; format 6: type-5 stream blocks):
//! round trips, block reuse between extents of the same and of different dictionaries, and
//! damage to the dictionary block.

use std::sync::{Arc, OnceLock};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::dictionary::{train, BlockDict, Trained};
use super::tests::{build, check_extent, file_with, ikey, path, Entries, MemFile, BASE};
use super::*;
use crate::key::ValueKind;

/// JSON-like rows: field names and enumerations shared, ids random enough to matter.
fn structured_entries(n: usize, first: usize) -> Entries {
    let cities = ["Hangzhou", "Shanghai", "Beijing", "Shenzhen", "Chengdu"];
    let states = ["paid", "shipped", "delivered", "refunded"];
    (first..first + n)
        .map(|i| {
            let v = format!(
                "{{\"order_id\":{},\"user\":\"user{}\",\"city\":\"{}\",\"status\":\"{}\",\"sku\":\"SKU-{:06}\"}}",
                1_000_000 + i,
                (i * 7919) % 10_000,
                cities[(i * 31) % cities.len()],
                states[(i * 17) % states.len()],
                (i * 104_729) % 100_000,
            );
            (
                ikey(format!("order{i:08}").as_bytes(), 1 + i as u64, ValueKind::Put),
                v.into_bytes(),
            )
        })
        .collect()
}

/// Decoded 4 KiB blocks of structured rows to train on.
fn samples(first: usize) -> Vec<Vec<u8>> {
    let entries = structured_entries(6000, first);
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for (k, v) in &entries {
        cur.extend_from_slice(k);
        cur.extend_from_slice(v);
        if cur.len() >= 4096 {
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

fn trained(first: usize) -> Arc<BlockDict> {
    let s = samples(first);
    let slices: Vec<&[u8]> = s.iter().map(Vec::as_slice).collect();
    match train(&slices, 4096, 3) {
        Trained::Dict(d) => Arc::new(d),
        other => panic!("structured rows should train a dictionary: {other:?}"),
    }
}

/// A dictionary shared by the extent tests (trained once).
pub(super) fn test_dict() -> Arc<BlockDict> {
    static DICT: OnceLock<Arc<BlockDict>> = OnceLock::new();
    DICT.get_or_init(|| trained(0)).clone()
}

fn opts_with(dict: Option<Arc<BlockDict>>) -> ExtentOptions {
    ExtentOptions {
        block_size: 4096,
        compression: Compression::Zstd,
        dictionary: dict,
        ..Default::default()
    }
}

fn open(file: &MemFile, built: &BuiltExtent) -> ExtentReader {
    ExtentReader::open(file, &path(), BASE, built.slots).unwrap()
}

#[test]
fn a_dictionary_extent_round_trips_and_is_smaller() {
    let entries = structured_entries(3000, 100_000);
    let dict = test_dict();
    let with = build(&entries, opts_with(Some(dict.clone())));
    let without = build(&entries, opts_with(None));
    assert_eq!(with.props.compression, Compression::ZstdSplitDict as u8);
    assert_eq!(with.props.format_version, 6);
    let h = with.props.dictionary.expect("a dictionary block");
    assert_eq!(h.size as usize, dict.bytes().len());
    assert_eq!(without.props.dictionary, None);
    assert_eq!(without.props.compression, Compression::ZstdSplit as u8);
    // The data blocks shrink by more than the dictionary's own copy.
    let data = |b: &BuiltExtent| b.props.data_size;
    assert!(
        data(&with) + u64::from(h.size) < data(&without),
        "with a dictionary {} + {} bytes, without {}",
        data(&with),
        h.size,
        data(&without)
    );
    let file = file_with(&with);
    let r = open(&file, &with);
    assert_eq!(r.dictionary().map(|d| d.id()), Some(dict.id()));
    let mut rng = StdRng::seed_from_u64(5);
    check_extent(&entries, &with, &opts_with(Some(dict)), &mut rng);
}

#[test]
fn other_codecs_ignore_the_dictionary() {
    let entries = structured_entries(500, 0);
    for compression in [Compression::None, Compression::Lz4] {
        let built = build(
            &entries,
            ExtentOptions {
                compression,
                ..opts_with(Some(test_dict()))
            },
        );
        assert_eq!(built.props.dictionary, None, "{compression:?}");
        assert_eq!(built.props.compression, compression as u8);
    }
}

#[test]
fn blocks_move_verbatim_only_between_extents_of_one_dictionary() {
    let (d1, d2) = (test_dict(), trained(50_000));
    assert_ne!(d1.id(), d2.id());
    let src_entries = structured_entries(2000, 0);
    let src = build(&src_entries, opts_with(Some(d1.clone())));
    let sfile = file_with(&src);
    let sr = open(&sfile, &src);
    for (dict, verbatim) in [(Some(d1.clone()), true), (Some(d2.clone()), false), (None, false)] {
        let mut b = ExtentBuilder::new(opts_with(dict.clone()));
        assert_eq!(b.recompresses(&sr), !verbatim);
        for i in 0..sr.index().len() {
            if verbatim {
                b.copy_block(&sr, &sfile, i).unwrap();
            } else {
                let raw = b.recompressed_block(&sr, &sfile, i).unwrap();
                b.add_raw_block(&raw).unwrap();
            }
        }
        let out = b.finish().unwrap();
        let ofile = file_with(&out);
        let or = open(&ofile, &out);
        assert_eq!(or.dictionary().map(|d| d.id()), dict.as_ref().map(|d| d.id()));
        if verbatim {
            // Copied byte for byte: the same stored blocks.
            assert_eq!(
                &out.valid[..src.props.data_size as usize],
                &src.valid[..src.props.data_size as usize]
            );
        }
        let v = verify_extent(&ofile, &path(), BASE, out.slots).unwrap();
        let mut it_rows = 0;
        for i in 0..v.index().len() {
            let block = Arc::new(v.read_block(&ofile, i).unwrap());
            let mut it = BlockIter::new(block);
            it.seek_to_first();
            while it.valid() {
                assert_eq!(it.key(), &src_entries[it_rows].0[..]);
                assert_eq!(it.value(), &src_entries[it_rows].1[..]);
                it_rows += 1;
                it.next();
            }
        }
        assert_eq!(it_rows, src_entries.len());
    }
}

#[test]
fn a_damaged_dictionary_block_is_a_corruption_error() {
    let entries = structured_entries(1000, 0);
    let built = build(&entries, opts_with(Some(test_dict())));
    let h = built.props.dictionary.unwrap();
    for at in [
        h.offset,
        h.offset + u64::from(h.size) / 2,
        h.offset + u64::from(h.size) - 1,
    ] {
        let mut file = file_with(&built);
        file.0[(BASE + at) as usize] ^= 0x10;
        match ExtentReader::open(&file, &path(), BASE, built.slots) {
            Err(crate::Error::Corruption { offset, .. }) => assert_eq!(offset, BASE + h.offset),
            other => panic!("flip at {at}: {other:?}"),
        }
    }
}

#[test]
fn a_dictionary_block_without_its_dictionary_is_refused() {
    let entries = structured_entries(1000, 0);
    let built = build(&entries, opts_with(Some(test_dict())));
    let file = file_with(&built);
    let r = open(&file, &built);
    let raw = r.read_raw_block(&file, 0).unwrap();
    let contents = &raw.stored[..raw.entry.size as usize];
    let ctype = Compression::from_u8(raw.stored[raw.entry.size as usize]).unwrap();
    assert_eq!(ctype, Compression::ZstdSplitDict);
    assert!(codec::decompress(ctype, contents, None)
        .unwrap_err()
        .contains("dictionary"));
    // With another dictionary it is an error or other bytes, never a panic.
    let other = trained(70_000);
    if let Ok(v) = codec::decompress(ctype, contents, Some(&other)) {
        assert_ne!(v, r.read_block(&file, 0).unwrap().data());
    }
}

/// Every data block of a zstd extent is stored as streams: type 5 with a dictionary, type 4
/// without.
#[test]
fn every_zstd_data_block_is_stored_as_streams() {
    let entries = structured_entries(2000, 0);
    for (dict, want) in [
        (Some(test_dict()), Compression::ZstdSplitDict),
        (None, Compression::ZstdSplit),
    ] {
        let built = build(&entries, opts_with(dict));
        let file = file_with(&built);
        let r = open(&file, &built);
        assert!(r.index().len() > 10);
        for i in 0..r.index().len() {
            let raw = r.read_raw_block(&file, i).unwrap();
            let ctype = Compression::from_u8(raw.stored[raw.entry.size as usize]);
            assert_eq!(ctype, Some(want), "block {i}");
        }
    }
}

/// A block of a dictionary extent is never appended verbatim to an extent with another
/// dictionary or none: `copy_block` and `add_raw_block` refuse it (callers recompress).
#[test]
fn dictionary_blocks_are_refused_by_extents_of_another_dictionary() {
    let (d1, d2) = (test_dict(), trained(50_000));
    let src = build(&structured_entries(2000, 0), opts_with(Some(d1)));
    let sfile = file_with(&src);
    let sr = open(&sfile, &src);
    for dict in [Some(d2), None] {
        let mut b = ExtentBuilder::new(opts_with(dict.clone()));
        let copied = b.copy_block(&sr, &sfile, 0);
        assert!(matches!(copied, Err(crate::Error::InvalidOption { .. })), "{copied:?}");
        let raw = sr.read_raw_block(&sfile, 0).unwrap();
        let added = b.add_raw_block(&raw);
        assert!(matches!(added, Err(crate::Error::InvalidOption { .. })), "{added:?}");
    }
}
