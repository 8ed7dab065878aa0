//! A data block's bytes as two streams, keys and values, for codecs that compress each stream
//! on its own (trailer type 4, `docs/format.md`): a general-purpose compressor models the entry
//! headers and key deltas (small, repetitive) and the values (long, of another alphabet) far
//! better apart than interleaved.
//!
//! ```text
//! keys   = (varint32 shared ‖ varint32 non_shared ‖ varint32 value_len ‖ key[shared..])* ‖ tail
//! values = value*
//! ```
//!
//! Each key-stream entry is the block's entry without its value; the block's tail (hash index,
//! restarts, checksums, footer) follows the last entry unchanged. Joining puts each value back
//! after its entry header, which restores the block byte for byte.
//!
//! Invariants:
//! - [`split`] accepts only what [`super::BlockLayout`] accepts as a block and whose entries
//!   decode exactly up to the tail; anything else is `None` (the caller stores the block
//!   another way), so `join(split(b)) == b` for every block it splits.
//! - [`join`] takes arbitrary bytes and returns `Err(reason)`, never panics, never reads out of
//!   bounds, and returns exactly `raw_len` bytes or an error; it allocates at most `raw_len`.

use std::path::Path;

use super::iter::decode_entry;
use super::BlockLayout;
use crate::coding::get_varint32;

/// Splits block `raw` into `keys` and `values` (both cleared first). Returns the entry count,
/// or `None` if `raw` is not a well-formed block.
pub(crate) fn split(raw: &[u8], keys: &mut Vec<u8>, values: &mut Vec<u8>) -> Option<u32> {
    keys.clear();
    values.clear();
    let limit = BlockLayout::of(raw, Path::new(""), 0).ok()?.entries_end;
    let mut p = 0;
    let mut entries = 0u32;
    while p < limit {
        let (_, non_shared, value_len, key_start) = decode_entry(raw, p, limit)?;
        let value_start = key_start + non_shared;
        keys.extend_from_slice(&raw[p..value_start]);
        values.extend_from_slice(&raw[value_start..value_start + value_len]);
        p = value_start + value_len;
        entries = entries.checked_add(1)?;
    }
    keys.extend_from_slice(&raw[limit..]);
    Some(entries)
}

/// Rebuilds the block of `raw_len` bytes from its `entries` key-stream entries (then the tail)
/// in `keys` and their values in `values`.
pub(crate) fn join(keys: &[u8], values: &[u8], entries: u32, raw_len: usize) -> Result<Vec<u8>, String> {
    if keys.len().checked_add(values.len()) != Some(raw_len) {
        return Err(format!(
            "block streams of {} and {} bytes do not make {raw_len}",
            keys.len(),
            values.len()
        ));
    }
    let mut out = Vec::with_capacity(raw_len);
    let (mut k, mut v) = (0usize, 0usize);
    for i in 0..entries {
        let bad = || format!("key stream entry {i} at offset {k} is malformed");
        let mut pos = k;
        get_varint32(keys, &mut pos).ok_or_else(bad)?;
        let non_shared = get_varint32(keys, &mut pos).ok_or_else(bad)? as usize;
        let value_len = get_varint32(keys, &mut pos).ok_or_else(bad)? as usize;
        let key_end = pos
            .checked_add(non_shared)
            .filter(|&e| e <= keys.len())
            .ok_or_else(bad)?;
        let value_end = v
            .checked_add(value_len)
            .filter(|&e| e <= values.len())
            .ok_or_else(|| format!("value of entry {i} runs past the value stream"))?;
        out.extend_from_slice(&keys[k..key_end]);
        out.extend_from_slice(&values[v..value_end]);
        (k, v) = (key_end, value_end);
    }
    if v != values.len() {
        return Err(format!("{} value bytes left after {entries} entries", values.len() - v));
    }
    out.extend_from_slice(&keys[k..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::BlockBuilder;
    use super::*;

    fn block(n: usize, hash_index: bool, region_crcs: bool, value: impl Fn(usize) -> Vec<u8>) -> Vec<u8> {
        let mut b = BlockBuilder::with_hash_index(16, hash_index);
        b.region_crcs = region_crcs;
        let mut prev = Vec::new();
        for i in 0..n {
            let mut key = format!("key{i:08}").into_bytes();
            key.extend_from_slice(&((i as u64) << 8 | 1).to_le_bytes());
            b.add(&prev, &key, &value(i));
            prev = key;
        }
        b.finish().to_vec()
    }

    #[test]
    fn every_block_layout_splits_and_joins_back_exactly() {
        for (hash, crcs) in [(false, false), (true, false), (false, true), (true, true)] {
            for n in [1, 15, 16, 17, 300] {
                // Values of every length, tombstones (empty) included, first and last.
                let raw = block(n, hash, crcs, |i| vec![b'a' + (i % 26) as u8; (i * 7) % 40]);
                let (mut keys, mut values) = (Vec::new(), Vec::new());
                let entries = split(&raw, &mut keys, &mut values).unwrap();
                assert_eq!(entries as usize, n);
                assert_eq!(keys.len() + values.len(), raw.len());
                assert_eq!(values.len(), (0..n).map(|i| (i * 7) % 40).sum::<usize>());
                assert_eq!(join(&keys, &values, entries, raw.len()).unwrap(), raw);
            }
        }
    }

    #[test]
    fn what_is_not_a_block_does_not_split() {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        assert_eq!(split(b"", &mut keys, &mut values), None);
        assert_eq!(split(&[7u8; 100], &mut keys, &mut values), None);
        // A block whose entry at its second restart point claims a value running into the
        // tail (restarts 0 and 16, then the footer).
        let mut raw = block(20, false, false, |_| b"value".to_vec());
        assert!(split(&raw, &mut keys, &mut values).is_some());
        let n = raw.len();
        let second = u32::from_le_bytes(raw[n - 8..n - 4].try_into().unwrap()) as usize;
        assert_eq!(raw[second + 2], 5, "value length of entry 16");
        raw[second + 2] = 0x7f;
        assert_eq!(split(&raw, &mut keys, &mut values), None);
    }

    #[test]
    fn damaged_streams_are_errors_never_panics() {
        let raw = block(40, true, false, |i| vec![b'v'; i % 9]);
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        let entries = split(&raw, &mut keys, &mut values).unwrap();
        for i in 0..keys.len() {
            let mut bad = keys.clone();
            bad[i] ^= 0x81;
            if let Ok(out) = join(&bad, &values, entries, raw.len()) {
                assert_eq!(out.len(), raw.len());
            }
        }
        // Truncated key streams, the total adjusted so that only parsing can find it: cut
        // inside the entries, an error; cut inside the tail, other bytes (the CRC's job).
        let tail = raw.len() - BlockLayout::of(&raw, Path::new(""), 0).unwrap().entries_end;
        for n in 0..keys.len() {
            let got = join(&keys[..n], &values, entries, n + values.len());
            if n < keys.len() - tail {
                assert!(got.is_err(), "{n}");
            } else {
                assert_ne!(got.unwrap(), raw, "{n}");
            }
        }
        // Too few entries leave values unused; too many can only read the tail as entries
        // without values (the stored count is under the block's CRC).
        for e in [0, entries - 1] {
            assert!(join(&keys, &values, e, raw.len()).is_err(), "{e} entries");
        }
        for e in [entries + 1, u32::MAX] {
            if let Ok(out) = join(&keys, &values, e, raw.len()) {
                assert_eq!(out.len(), raw.len());
            }
        }
        assert!(join(&keys, &values[1..], entries, raw.len() - 1).is_err());
        assert!(join(&keys, &values, entries, usize::MAX).is_err());
    }
}
