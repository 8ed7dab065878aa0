//! [`PackedKeys`]: a sorted list of internal keys packed in one buffer, with a dense array of
//! 8-byte key prefixes so a lower-bound search is mostly a branch-free search over integers.
//!
//! Invariants:
//! - Keys are pushed in non-decreasing internal-key order ([`super::cmp_ikey`]).
//! - `prefixes[i]` is [`user_prefix`] of key `i`: the first 8 bytes of its user key, big-endian,
//!   zero-padded. For well-formed keys, `user_prefix(a) < user_prefix(b)` implies `a < b`, so
//!   prefixes are non-decreasing and only keys with the target's prefix need a full comparison.
//!   If any key (or the target) is shorter than 8 bytes (malformed), the search compares full
//!   keys only.

use std::cmp::Ordering;

use super::cmp_ikey;

/// The first 8 bytes of `ikey`'s user key as a big-endian integer, zero-padded; `None` if the
/// key is shorter than 8 bytes (malformed).
#[inline]
pub(super) fn user_prefix(ikey: &[u8]) -> Option<u64> {
    let user = &ikey[..ikey.len().checked_sub(8)?];
    let mut b = [0u8; 8];
    let n = user.len().min(8);
    b[..n].copy_from_slice(&user[..n]);
    Some(u64::from_be_bytes(b))
}

/// Keys with the target's prefix looked at one by one before a binary search finds the end of
/// their run.
const EQUAL_PREFIX_SCAN: usize = 4;

/// The end of the run of `p`s starting at `from` in the non-decreasing `sorted` (`from` if
/// there is none). The run usually ends at once, on the cache line the search for `from` ended
/// on, so it is scanned; a binary search over the whole rest for its end, as this once was,
/// cost as much as the search for `from` (a third of a warm point lookup's CPU went to these
/// searches). Past [`EQUAL_PREFIX_SCAN`] equal values a binary search takes over.
#[inline]
pub(super) fn run_end(sorted: &[u64], from: usize, p: u64) -> usize {
    let mut end = from;
    while end < sorted.len() && sorted[end] == p {
        end += 1;
        if end - from == EQUAL_PREFIX_SCAN {
            return from + sorted[from..].partition_point(|&x| x == p);
        }
    }
    end
}

/// Sorted internal keys, packed; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct PackedKeys {
    bytes: Vec<u8>,
    /// `ends[i]` ends key `i` in `bytes`.
    ends: Vec<usize>,
    prefixes: Vec<u64>,
    /// Every key is at least 8 bytes long (the prefix search is usable).
    well_formed: bool,
}

impl PackedKeys {
    /// Packs `keys`, which must be sorted (internal-key order).
    pub(crate) fn new<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]> + Clone) -> PackedKeys {
        let total = keys.clone().map(<[u8]>::len).sum();
        let mut p = PackedKeys {
            bytes: Vec::with_capacity(total),
            ends: Vec::with_capacity(keys.len()),
            prefixes: Vec::with_capacity(keys.len()),
            well_formed: true,
        };
        for k in keys {
            p.bytes.extend_from_slice(k);
            p.ends.push(p.bytes.len());
            match user_prefix(k) {
                Some(x) => p.prefixes.push(x),
                None => {
                    p.well_formed = false;
                    p.prefixes.push(0);
                }
            }
        }
        p
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Key `i` (empty if out of range).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.ends.get(i - 1).copied().unwrap_or(0)
        };
        let end = self.ends.get(i).copied().unwrap_or(0);
        self.bytes.get(start..end).unwrap_or_default()
    }

    /// Index of the first key `>= target` (internal-key order); `len()` if none.
    #[inline]
    pub(crate) fn lower_bound(&self, target: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        if self.well_formed {
            if let Some(p) = user_prefix(target) {
                // Keys with a smaller prefix are smaller, keys with a larger one larger: only
                // the run with the target's prefix (usually at most one key) needs comparing.
                lo = self.prefixes.partition_point(|&x| x < p);
                hi = run_end(&self.prefixes, lo, p);
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cmp_ikey(self.get(mid), target) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Heap bytes held.
    #[cfg(test)]
    pub(crate) fn memory_size(&self) -> usize {
        self.bytes.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.prefixes.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{compare_internal_keys, encode_internal_key, ValueKind};
    use rand::{Rng, SeedableRng};

    fn ikey(user: &[u8], lsn: u64) -> Vec<u8> {
        let mut v = Vec::new();
        encode_internal_key(&mut v, user, lsn, ValueKind::Put);
        v
    }

    fn check(keys: &[Vec<u8>], targets: &[Vec<u8>]) {
        let p = PackedKeys::new(keys.iter().map(Vec::as_slice));
        assert_eq!(p.len(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(p.get(i), &k[..]);
        }
        for t in targets {
            let want = keys.partition_point(|k| compare_internal_keys(k, t) == Ordering::Less);
            assert_eq!(p.lower_bound(t), want, "target {t:?}");
        }
    }

    #[test]
    fn run_end_finds_the_end_of_short_and_long_runs() {
        for run in 0..12usize {
            let mut v = vec![1u64, 1, 2];
            v.extend(std::iter::repeat_n(5, run));
            v.extend([6, 6, 9]);
            assert_eq!(run_end(&v, 3, 5), 3 + run, "run of {run}");
            assert_eq!(run_end(&v, v.len(), 5), v.len());
        }
        assert_eq!(run_end(&[7, 7, 7, 7, 7, 7], 0, 7), 6);
        assert_eq!(run_end(&[], 0, 7), 0);
    }

    #[test]
    fn long_runs_of_one_prefix_are_searched_whole() {
        // 0, 3, 4, 5 and 40 keys share one 8-byte prefix (the run scan, its end, the binary
        // search that takes over), between keys of smaller and larger prefixes.
        for run in [0usize, 3, 4, 5, 40] {
            let mut keys = vec![ikey(b"aaaaaaa", 1)];
            for i in 0..run {
                keys.push(ikey(format!("prefix00{i:03}").as_bytes(), 1));
            }
            keys.push(ikey(b"zzzzzzzzz", 1));
            let mut targets = keys.clone();
            targets.push(ikey(b"prefix00", 9));
            targets.push(ikey(b"prefix00zz", 9));
            targets.push(ikey(b"prefix00002", 0));
            check(&keys, &targets);
        }
    }

    #[test]
    fn lower_bound_matches_a_plain_search() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..200 {
            // Short alphabets and lengths around 8 make shared prefixes, prefix keys and
            // several versions of one user key common.
            let mut users: Vec<Vec<u8>> = (0..rng.random_range(0..40))
                .map(|_| (0..rng.random_range(0..13)).map(|_| rng.random_range(0..3u8)).collect())
                .collect();
            users.sort();
            users.dedup();
            let mut keys = Vec::new();
            for u in &users {
                let mut lsns: Vec<u64> = (0..rng.random_range(1..4)).map(|_| rng.random_range(0..50)).collect();
                lsns.sort_unstable_by(|a, b| b.cmp(a));
                lsns.dedup();
                keys.extend(lsns.into_iter().map(|l| ikey(u, l)));
            }
            let mut targets: Vec<Vec<u8>> = keys.clone();
            for _ in 0..50 {
                let u: Vec<u8> = (0..rng.random_range(0..13)).map(|_| rng.random_range(0..3u8)).collect();
                targets.push(ikey(&u, rng.random_range(0..50)));
            }
            if round % 10 == 0 {
                // Malformed targets (shorter than 8 bytes) take the full-comparison path.
                targets.push(vec![1, 2, 3]);
                targets.push(Vec::new());
            }
            check(&keys, &targets);
        }
    }

    #[test]
    fn malformed_keys_fall_back_to_full_comparisons() {
        let mut keys = vec![
            vec![0u8],
            vec![5u8, 5],
            ikey(b"a", 3),
            ikey(b"abcdefghij", 1),
            ikey(b"b", 9),
        ];
        keys.sort_by(|a, b| compare_internal_keys(a, b));
        let targets = vec![
            vec![],
            vec![0u8],
            vec![3u8],
            ikey(b"", 1),
            ikey(b"abcdefgh", 1),
            ikey(b"c", 1),
        ];
        check(&keys, &targets);
        check(&[], &targets);
    }
}
