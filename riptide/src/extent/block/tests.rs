use super::*;
use crate::key::{compare_internal_keys, encode_internal_key, ValueKind};
use rand::{Rng, SeedableRng};

fn ikey(user: &[u8], lsn: u64) -> Vec<u8> {
    let mut v = Vec::new();
    encode_internal_key(&mut v, user, lsn, ValueKind::Put);
    v
}

fn mem_path() -> Arc<Path> {
    Arc::from(Path::new("<memory>"))
}

fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
    build_with(entries, interval, false)
}

fn build_hashed(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
    build_with(entries, interval, true)
}

fn build_with(entries: &[(Vec<u8>, Vec<u8>)], interval: usize, hash_index: bool) -> Arc<Block> {
    let mut b = BlockBuilder::with_hash_index(interval, hash_index);
    let mut prev: Vec<u8> = Vec::new();
    for (k, v) in entries {
        b.add(&prev, k, v);
        prev.clone_from(k);
    }
    let est = b.size_estimate();
    let data = b.finish().to_vec();
    assert_eq!(est, data.len());
    Arc::new(Block::new(data, mem_path(), 0).unwrap())
}

fn sorted_entries(rng: &mut impl Rng, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut keys: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let len = rng.random_range(0..12);
            let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
            ikey(&user, rng.random_range(0..1000))
        })
        .collect();
    keys.sort_by(|a, b| compare_internal_keys(a, b));
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let vlen = rng.random_range(0..20);
            let v = (0..vlen).map(|_| rng.random()).collect();
            (k, v)
        })
        .collect()
}

/// `scan_entries` sees exactly what a `BlockIter` sees, and flags a new user key exactly
/// where the user part changes, across restart points and prefix-related keys.
#[test]
fn scan_entries_matches_the_iterator() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(78);
    for round in 0..300 {
        let n = rng.random_range(1..400);
        let entries = sorted_entries(&mut rng, n);
        let block = build_with(&entries, [1, 2, 4, 16][round % 4], round % 2 == 0);
        let mut seen: Vec<(Vec<u8>, usize, bool)> = Vec::new();
        let last = scan_entries(block.data(), &mem_path(), 0, |k, vlen, new_user| {
            seen.push((k.to_vec(), vlen, new_user));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), entries.len());
        assert_eq!(last, entries.last().unwrap().0);
        for (i, ((k, vlen, new_user), (ek, ev))) in seen.iter().zip(&entries).enumerate() {
            assert_eq!(k, ek);
            assert_eq!(*vlen, ev.len());
            let expect_new = i == 0 || entries[i - 1].0[..entries[i - 1].0.len() - 8] != ek[..ek.len() - 8];
            assert_eq!(*new_user, expect_new, "round {round} entry {i}");
        }
    }
}

/// A block whose entries are out of internal-key order is refused by `scan_entries`,
/// whichever way the order breaks.
#[test]
fn scan_entries_refuses_out_of_order_keys() {
    let cases: Vec<Vec<Vec<u8>>> = vec![
        vec![ikey(b"b", 1), ikey(b"a", 1)],
        vec![ikey(b"ab", 1), ikey(b"a", 1)],
        vec![ikey(b"abc", 1), ikey(b"abb", 1)],
        vec![ikey(b"a", 1), ikey(b"a", 2)],
        vec![ikey(b"a", 5), ikey(b"a", 5)],
        vec![ikey(b"", 3), ikey(b"", 3)],
    ];
    for keys in cases {
        for interval in [1, 16] {
            let mut b = BlockBuilder::with_hash_index(interval, false);
            let mut prev: Vec<u8> = Vec::new();
            for k in &keys {
                b.add(&prev, k, b"v");
                prev.clone_from(k);
            }
            let data = b.finish().to_vec();
            let err = scan_entries(&data, &mem_path(), 7, |_, _, _| Ok(())).unwrap_err();
            assert!(err.is_corruption(), "{keys:?}: {err}");
        }
    }
}

/// Point lookups through the hash index agree with the binary search: for a present user
/// key they land on the first entry >= the target; for an absent one they never return an
/// entry of that user key. Both block shapes (with and without an index) iterate the same.
#[test]
fn hash_index_point_lookups_match_binary_search() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    for round in 0..200 {
        let n = rng.random_range(1..600);
        let entries = sorted_entries(&mut rng, n);
        let interval = [1, 4, 16][round % 3];
        let plain = build(&entries, interval);
        let hashed = build_hashed(&entries, interval);
        assert!(hashed.buckets.1 > 0 || hashed.num_restarts > MAX_HASHED_RESTARTS);
        let mut a = BlockIter::new(plain);
        let mut b = BlockIter::new(hashed.clone());
        a.seek_to_first();
        b.seek_to_first();
        while a.valid() {
            assert!(b.valid() && a.key() == b.key() && a.value() == b.value());
            a.next();
            b.next();
        }
        assert!(!b.valid());
        for _ in 0..200 {
            let len = rng.random_range(0..12);
            let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
            let target = ikey(&user, rng.random_range(0..1100));
            a.seek(&target);
            b.seek_point(&target);
            let user_of = |k: &[u8]| k[..k.len() - 8].to_vec();
            let present = a.valid() && user_of(a.key()) == user;
            if present {
                assert!(b.valid(), "round {round}: {user:?} lost");
                assert_eq!(a.key(), b.key(), "round {round}");
                assert_eq!(a.value(), b.value(), "round {round}");
            } else if b.valid() {
                assert_ne!(user_of(b.key()), user, "round {round}: found an absent version");
            }
            assert!(b.status().is_ok());
        }
    }
}

#[test]
fn damaged_hash_index_is_corruption_not_a_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let entries = sorted_entries(&mut rng, 200);
    let block = build_hashed(&entries, 16);
    let good = block.data().to_vec();
    let n = good.len();
    // A bucket count pointing before the block start.
    let mut bad = good.clone();
    let count_at = block.restarts_offset - 2;
    bad[count_at..count_at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
    if (u16::MAX as usize) > count_at {
        assert!(Block::new(bad, mem_path(), 0).is_err());
    }
    // Any byte flipped in the buckets: lookups stay safe (never out of bounds).
    for i in block.buckets.0..block.buckets.0 + block.buckets.1 {
        let mut bad = good.clone();
        bad[i] = rng.random();
        let blk = Arc::new(Block::new(bad, mem_path(), 0).unwrap());
        let mut it = BlockIter::new(blk);
        for (k, _) in entries.iter().take(20) {
            it.seek_point(k);
        }
    }
    assert_eq!(n, good.len());
}

#[test]
fn common_prefix_works() {
    assert_eq!(common_prefix(b"", b"abc"), 0);
    assert_eq!(common_prefix(b"abcdefghijk", b"abcdefghijx"), 10);
    assert_eq!(common_prefix(b"abcdefgh", b"abcdefgh"), 8);
    assert_eq!(common_prefix(b"abcdefgh", b"abcdefghi"), 8);
    assert_eq!(common_prefix(b"xbc", b"abc"), 0);
    assert_eq!(common_prefix(b"abcdefgx", b"abcdefgh"), 7);
}

#[test]
fn exhaustive_seek_next_prev_against_vec() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for &interval in &[1usize, 2, 3, 16] {
        for &n in &[1usize, 2, 5, 17, 100, 300] {
            let entries = sorted_entries(&mut rng, n);
            let block = build(&entries, interval);
            let mut it = BlockIter::new(block.clone());
            assert!(!it.valid());
            // forward
            it.seek_to_first();
            for (k, v) in &entries {
                assert!(it.valid());
                assert_eq!(it.key(), &k[..]);
                assert_eq!(it.value(), &v[..]);
                it.next();
            }
            assert!(!it.valid());
            it.status().unwrap();
            // backward
            it.seek_to_last();
            for (k, v) in entries.iter().rev() {
                assert!(it.valid());
                assert_eq!(it.key(), &k[..]);
                assert_eq!(it.value(), &v[..]);
                it.prev();
            }
            assert!(!it.valid());
            // seek to every key, and to keys between
            for (i, (k, _)) in entries.iter().enumerate() {
                it.seek(k);
                assert_eq!(it.key(), &k[..]);
                // prev then next returns to it
                it.prev();
                if i == 0 {
                    assert!(!it.valid());
                } else {
                    assert_eq!(it.key(), &entries[i - 1].0[..]);
                    it.next();
                    assert_eq!(it.key(), &k[..]);
                }
            }
            for _ in 0..200 {
                let len = rng.random_range(0..12);
                let user: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
                let t = ikey(&user, rng.random_range(0..1000));
                let want = entries.partition_point(|(k, _)| compare_internal_keys(k, &t) == Ordering::Less);
                // from an unpositioned iterator and from a random position
                let mut fresh = BlockIter::new(block.clone());
                fresh.seek(&t);
                if rng.random_bool(0.5) {
                    let j = rng.random_range(0..entries.len());
                    it.seek(&entries[j].0);
                }
                it.seek(&t);
                for i in [&fresh, &it] {
                    if want == entries.len() {
                        assert!(!i.valid());
                    } else {
                        assert_eq!(i.key(), &entries[want].0[..]);
                        assert_eq!(i.value(), &entries[want].1[..]);
                    }
                }
            }
            it.status().unwrap();
        }
    }
}

#[test]
fn long_keys_and_values_use_multibyte_varints() {
    let big_key = ikey(&vec![b'k'; 70_000], 5);
    let entries = vec![
        (ikey(b"a", 1), vec![]),
        (big_key.clone(), vec![7u8; 300]),
        (ikey(&[b'k'; 70_001], 9), vec![1u8; 200_000]),
    ];
    let block = build(&entries, 16);
    let mut it = BlockIter::new(block);
    it.seek(&big_key);
    assert_eq!(it.key(), &big_key[..]);
    assert_eq!(it.value().len(), 300);
    it.next();
    assert_eq!(it.value().len(), 200_000);
    it.prev();
    it.prev();
    assert_eq!(it.key(), &entries[0].0[..]);
}

#[test]
fn bad_restart_counts_are_corruption() {
    for data in [vec![], vec![1, 0, 0], vec![0, 0, 0, 0], vec![5, 0, 0, 0], vec![0; 7]] {
        let e = Block::new(data, mem_path(), 42).unwrap_err();
        assert!(e.is_corruption());
    }
}

#[test]
fn garbage_blocks_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let good = build(&sorted_entries(&mut rng, 60), 4).data().to_vec();
    for round in 0..3000 {
        let data: Vec<u8> = if round % 2 == 0 {
            // a valid block with a few bytes damaged
            let mut d = good.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..d.len());
                d[i] = rng.random();
            }
            d
        } else {
            let len = rng.random_range(0..200);
            let mut d: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if len >= 4 && rng.random_bool(0.7) {
                // a plausible restart count
                let n = rng.random_range(1..=((len - 4) / 4).max(1)) as u32;
                d[len - 4..].copy_from_slice(&n.to_le_bytes());
            }
            d
        };
        let Ok(block) = Block::new(data, mem_path(), 0) else {
            continue;
        };
        let block = Arc::new(block);
        let mut it = BlockIter::new(block);
        it.seek_to_first();
        let mut steps = 0;
        while it.valid() && steps < 10_000 {
            let _ = (it.key(), it.value());
            it.next();
            steps += 1;
        }
        it.seek_to_last();
        steps = 0;
        while it.valid() && steps < 10_000 {
            it.prev();
            steps += 1;
        }
        for _ in 0..5 {
            let t = ikey(&[rng.random::<u8>(); 3], rng.random_range(0..100));
            it.seek(&t);
            if it.valid() {
                it.next();
                it.prev();
            }
        }
        if let Err(e) = it.status() {
            assert!(e.is_corruption());
        }
    }
}

#[test]
fn corruption_is_reported_and_sticky() {
    // an entry whose shared length exceeds the (empty) previous key
    let mut data = vec![5u8, 1, 0, b'x'];
    data.extend_from_slice(&0u32.to_le_bytes());
    data.extend_from_slice(&1u32.to_le_bytes());
    let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 1234).unwrap()));
    it.seek_to_first();
    assert!(!it.valid());
    match it.status().unwrap_err() {
        Error::Corruption { offset, .. } => assert_eq!(offset, 1234),
        e => panic!("unexpected {e:?}"),
    }
    it.seek(b"anything");
    assert!(!it.valid());
    assert!(it.status().is_err());
    it.seek_to_last();
    assert!(!it.valid());
    // an entry that runs past the end
    let mut data = vec![0u8, 10, 0, b'x'];
    data.extend_from_slice(&0u32.to_le_bytes());
    data.extend_from_slice(&1u32.to_le_bytes());
    let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 0).unwrap()));
    it.seek_to_last();
    assert!(!it.valid());
    assert!(it.status().is_err());
    // a restart point past the entries
    let mut data = vec![0u8, 1, 0, b'x'];
    data.extend_from_slice(&0u32.to_le_bytes());
    data.extend_from_slice(&100u32.to_le_bytes());
    data.extend_from_slice(&2u32.to_le_bytes());
    let mut it = BlockIter::new(Arc::new(Block::new(data, mem_path(), 0).unwrap()));
    it.seek_to_last();
    assert!(!it.valid());
    assert!(it.status().is_err());
}

/// The restart heads' first level must not change any seek's answer where heads are equal or
/// ambiguous: user keys sharing their first 8 bytes across several restart regions, keys
/// shorter than 8 bytes, and keys that differ only by trailing zero bytes (which pad equally).
#[test]
fn seeks_with_equal_restart_heads_match_a_vec() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    let prefixes: [&[u8]; 5] = [b"", b"ab", b"ab\0", b"order:00", b"order:01"];
    for &interval in &[1usize, 2, 4, 16] {
        for round in 0..20 {
            let mut keys: Vec<Vec<u8>> = (0..200)
                .map(|_| {
                    let mut user = prefixes[rng.random_range(0..prefixes.len())].to_vec();
                    for _ in 0..rng.random_range(0..4) {
                        user.push(*[0u8, b'a', b'z'].get(rng.random_range(0..3)).unwrap_or(&0));
                    }
                    ikey(&user, rng.random_range(0..50))
                })
                .collect();
            keys.sort_by(|a, b| compare_internal_keys(a, b));
            keys.dedup();
            let entries: Vec<(Vec<u8>, Vec<u8>)> = keys.into_iter().map(|k| (k, vec![round as u8])).collect();
            let block = build(&entries, interval);
            let heads = block.heads().expect("a well-formed block has heads");
            assert_eq!(heads.len(), block.num_restarts);
            assert!(heads.windows(2).all(|w| w[0] <= w[1]), "heads are sorted");
            let mut it = BlockIter::new(block.clone());
            for _ in 0..300 {
                let mut user = prefixes[rng.random_range(0..prefixes.len())].to_vec();
                for _ in 0..rng.random_range(0..4) {
                    user.push(*[0u8, b'a', b'm', b'z'].get(rng.random_range(0..4)).unwrap_or(&0));
                }
                let t = ikey(&user, rng.random_range(0..60));
                let want = entries.partition_point(|(k, _)| compare_internal_keys(k, &t) == Ordering::Less);
                let mut fresh = BlockIter::new(block.clone());
                fresh.seek(&t);
                it.seek(&t);
                for i in [&fresh, &it] {
                    if want == entries.len() {
                        assert!(!i.valid(), "interval {interval}: seek past the end");
                    } else {
                        assert_eq!(i.key(), &entries[want].0[..], "interval {interval}");
                    }
                }
            }
            it.status().unwrap();
        }
    }
}

/// A block whose restart keys are out of order (damaged, yet every entry decodes) gets no
/// heads, so a seek probes exactly as it did without them; a sorted one gets them.
#[test]
fn out_of_order_restart_keys_get_no_heads() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for round in 0..50 {
        let mut entries = sorted_entries(&mut rng, 60);
        let sorted = build(&entries, 2);
        assert!(sorted.heads().is_some() || entries.iter().any(|(k, _)| k.len() < 8));
        // Move a late key to the front: the first restart's head is now too high.
        let moved = entries.remove(entries.len() - 1 - round % 5);
        entries.insert(0, moved);
        let damaged = build(&entries, 2);
        let heads_sorted = damaged.heads().map(|h| h.windows(2).all(|w| w[0] <= w[1]));
        assert_ne!(heads_sorted, Some(false), "round {round}: unsorted heads kept");
    }
    // The reviewer's case: restart keys aaaaaaaaX, aaaaaaaaY, AAAAAAAA (interval 2).
    let entries: Vec<(Vec<u8>, Vec<u8>)> = [
        &b"aaaaaaaaX"[..],
        b"aaaaaaaaX1",
        b"aaaaaaaaY",
        b"aaaaaaaaZZ",
        b"AAAAAAAA",
    ]
    .iter()
    .map(|u| (ikey(u, 1), b"v".to_vec()))
    .collect();
    let block = build(&entries, 2);
    assert!(block.heads().is_none());
    let mut it = BlockIter::new(block);
    it.seek(&ikey(b"aaaaaaaaZ", 1));
    assert!(
        !it.valid(),
        "the search without heads ends past the last restart region"
    );
}
