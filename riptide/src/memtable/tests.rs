//! Unit tests of the multi-version skiplist, including concurrent inserts and readers, which
//! exercise every `unsafe` block of `mod.rs` and `arena.rs`.

use super::*;
use std::collections::BTreeMap;
use std::sync::Arc;

fn put(m: &Memtable, k: &[u8], lsn: Lsn, v: &[u8]) {
    m.insert(k, lsn, ValueKind::Put, v);
}

#[test]
fn get_returns_newest_visible_version() {
    let m = Memtable::new();
    assert!(m.is_empty());
    put(&m, b"k", 5, b"v5");
    put(&m, b"k", 9, b"v9");
    put(&m, b"k", 7, b"v7"); // out of order: chain must stay sorted
    m.insert(b"k", 11, ValueKind::Delete, b"");
    assert_eq!(m.get(b"k", 4), Lookup::NotFound);
    assert_eq!(m.get(b"k", 5), Lookup::Value(b"v5"));
    assert_eq!(m.get(b"k", 8), Lookup::Value(b"v7"));
    assert_eq!(m.get(b"k", 10), Lookup::Value(b"v9"));
    assert_eq!(m.get(b"k", 11), Lookup::Deleted);
    assert_eq!(m.get(b"j", 100), Lookup::NotFound);
    assert_eq!(m.get(b"kk", 100), Lookup::NotFound);
    assert_eq!(m.entries(), 4);
    assert_eq!((m.min_lsn(), m.max_lsn()), (5, 11));
}

#[test]
fn cursor_walks_both_ways_and_seeks() {
    let m = Arc::new(Memtable::new());
    for (i, k) in [b"d", b"b", b"f", b"a", b"c"].iter().enumerate() {
        put(&m, *k, i as Lsn + 1, *k);
    }
    let mut c = m.cursor();
    c.seek_to_first();
    let mut fwd = Vec::new();
    while c.valid() {
        fwd.push(c.key().to_vec());
        c.next();
    }
    assert_eq!(
        fwd,
        vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
            b"d".to_vec(),
            b"f".to_vec()
        ]
    );
    c.seek_to_last();
    let mut back = Vec::new();
    while c.valid() {
        back.push(c.key().to_vec());
        c.prev();
    }
    fwd.reverse();
    assert_eq!(back, fwd);
    c.seek(b"e");
    assert_eq!(c.key(), b"f");
    c.seek_for_prev(b"e");
    assert_eq!(c.key(), b"d");
    c.seek_for_prev(b"d");
    assert_eq!(c.key(), b"d");
    c.seek_for_prev(b"0");
    assert!(!c.valid());
    c.seek(b"g");
    assert!(!c.valid());
}

#[test]
fn hot_key_updates_do_not_add_nodes() {
    let m = Arc::new(Memtable::new());
    for lsn in 1..=10_000 {
        put(&m, b"hot", lsn, b"x");
    }
    put(&m, b"cold", 10_001, b"y");
    let mut c = m.cursor();
    c.seek_to_first();
    let mut n = 0;
    while c.valid() {
        n += 1;
        c.next();
    }
    assert_eq!(n, 2);
    assert_eq!(m.get(b"hot", 5_000), Lookup::Value(b"x"));
}

#[test]
fn memory_usage_grows_with_data() {
    let m = Memtable::new();
    let base = m.memory_usage();
    for i in 0u32..50_000 {
        put(&m, &i.to_be_bytes(), i as Lsn + 1, &[7u8; 100]);
    }
    // At least the payload bytes must be charged.
    assert!(m.memory_usage() >= base + 50_000 * 104);
    // A large value gets its own block and is charged in full.
    let before = m.memory_usage();
    put(&m, b"big", 60_000, &vec![1u8; 1 << 20]);
    assert!(m.memory_usage() >= before + (1 << 20));
}

#[test]
fn concurrent_inserts_match_a_model() {
    let m = Arc::new(Memtable::new());
    let threads = 4u64;
    let per = 5_000u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let m = m.clone();
            s.spawn(move || {
                for i in 0..per {
                    // Overlapping key space so threads race on the same keys.
                    let key = ((i * 7 + t) % 3_000).to_be_bytes();
                    let lsn = i * threads + t + 1;
                    put(&m, &key, lsn, &lsn.to_le_bytes());
                }
            });
        }
        // A reader running alongside must always see sorted, distinct keys.
        let m2 = m.clone();
        s.spawn(move || {
            for _ in 0..50 {
                let mut c = m2.cursor();
                c.seek_to_first();
                let mut last: Option<Vec<u8>> = None;
                while c.valid() {
                    let k = c.key().to_vec();
                    if let Some(l) = &last {
                        assert!(l < &k, "keys out of order or duplicated");
                    }
                    last = Some(k);
                    c.next();
                }
            }
        });
    });
    let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for t in 0..threads {
        for i in 0..per {
            let key = ((i * 7 + t) % 3_000).to_be_bytes().to_vec();
            let lsn = i * threads + t + 1;
            let e = model.entry(key).or_insert(0);
            *e = (*e).max(lsn);
        }
    }
    assert_eq!(m.entries(), threads * per);
    let mut c = m.cursor();
    c.seek_to_first();
    let mut seen = 0;
    while c.valid() {
        let want = model[c.key()];
        assert_eq!(c.lookup(u64::MAX), Lookup::Value(&want.to_le_bytes()[..]));
        seen += 1;
        c.next();
    }
    assert_eq!(seen, model.len());
}

// --- The per-key version index (versions.rs) ---

/// The value stored for a version: its LSN, so a read says which version it found.
fn lsn_value(lsn: Lsn) -> [u8; 8] {
    lsn.to_le_bytes()
}

/// What the oracle says `get(key, snapshot)` must return.
fn oracle_lookup(versions: Option<&BTreeMap<Lsn, ValueKind>>, snapshot: Lsn) -> Option<(Lsn, ValueKind)> {
    versions?.range(..=snapshot).next_back().map(|(&l, &k)| (l, k))
}

/// Checks every read of `keys` at `snapshots`, and each chain's full walk, against the oracle.
fn check_against_oracle(m: &Arc<Memtable>, oracle: &BTreeMap<Vec<u8>, BTreeMap<Lsn, ValueKind>>, snapshots: &[Lsn]) {
    for (key, versions) in oracle {
        for &snap in snapshots {
            let want = match oracle_lookup(Some(versions), snap) {
                None => None,
                Some((_, ValueKind::Delete)) => Some(None),
                Some((l, ValueKind::Put)) => Some(Some(l)),
            };
            assert_eq!(m.get(key, snap).to_owned_lsn(), want, "key {key:?} at {snap}");
        }
        let mut c = m.cursor();
        c.seek(key);
        assert_eq!(c.key(), &key[..]);
        for &snap in snapshots {
            assert_eq!(
                c.version(snap).map(|(l, k, _)| (l, k)),
                oracle_lookup(Some(versions), snap)
            );
        }
        // Level 0 is the whole chain, newest first.
        let mut walked = Vec::new();
        c.for_each_version(|l, k, _| {
            walked.push((l, k));
            true
        });
        let want: Vec<(Lsn, ValueKind)> = versions.iter().rev().map(|(&l, &k)| (l, k)).collect();
        assert_eq!(walked, want);
        // Each level of the index is a sub-list of the one below.
        let lengths = c.level_lengths();
        assert_eq!(lengths[0], versions.len());
        assert!(lengths.windows(2).all(|w| w[0] >= w[1]), "{lengths:?}");
    }
}

impl Lookup<'_> {
    /// Values here are LSNs; compare by that (a test helper so oracles need no lifetimes).
    fn to_owned_lsn(&self) -> Option<Option<Lsn>> {
        match self {
            Lookup::NotFound => None,
            Lookup::Deleted => Some(None),
            Lookup::Value(v) => Some(Some(Lsn::from_le_bytes((*v).try_into().expect("8-byte value")))),
        }
    }
}

mod version_index {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Versions of a few keys inserted in random LSN order; reads at random snapshots
        /// match a BTreeMap oracle.
        #[test]
        fn reads_at_any_snapshot_match_a_model(
            ops in proptest::collection::vec((0u8..3, any::<bool>()), 1..400),
            order_seed in any::<u64>(),
            snapshots in proptest::collection::vec(0u64..450, 1..40),
        ) {
            // LSNs 1..=n, dealt to the ops, then inserted in a seeded random order.
            let mut lsns: Vec<Lsn> = (1..=ops.len() as Lsn).collect();
            let mut x = order_seed | 1;
            for i in (1..lsns.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                lsns.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let m = Arc::new(Memtable::new());
            let mut oracle: BTreeMap<Vec<u8>, BTreeMap<Lsn, ValueKind>> = BTreeMap::new();
            for (&(key, delete), &lsn) in ops.iter().zip(&lsns) {
                let key = vec![b'k', key];
                let kind = if delete { ValueKind::Delete } else { ValueKind::Put };
                m.insert(&key, lsn, kind, &lsn_value(lsn));
                oracle.entry(key).or_default().insert(lsn, kind);
            }
            let mut snaps = snapshots;
            snaps.extend([0, u64::MAX]);
            check_against_oracle(&m, &oracle, &snaps);
            prop_assert_eq!(m.get(b"k\x03", u64::MAX), Lookup::NotFound);
        }
    }

    /// Several threads insert versions of the same few keys in interleaved, partly reversed LSN
    /// order while readers check that no read returns a version newer than its snapshot; then
    /// every read at every snapshot matches the oracle.
    #[test]
    fn concurrent_out_of_order_inserts_match_a_model() {
        let m = Arc::new(Memtable::new());
        let threads = 4u64;
        let per = 3_000u64;
        let keys = 3u64;
        // Thread t inserts LSNs t+1, t+1+threads, ... : ascending in even threads, descending in
        // odd ones, so versions arrive both at the newest end and deep in the chain.
        let lsns_of = |t: u64| -> Vec<Lsn> {
            let mut v: Vec<Lsn> = (0..per).map(|i| i * threads + t + 1).collect();
            if t % 2 == 1 {
                v.reverse();
            }
            v
        };
        let key_of = |lsn: Lsn| vec![b'h', (lsn % keys) as u8];
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let writers: Vec<_> = (0..threads)
                .map(|t| {
                    let m = m.clone();
                    s.spawn(move || {
                        for lsn in lsns_of(t) {
                            let kind = if lsn % 7 == 0 {
                                ValueKind::Delete
                            } else {
                                ValueKind::Put
                            };
                            m.insert(&key_of(lsn), lsn, kind, &lsn_value(lsn));
                        }
                    })
                })
                .collect();
            for r in 0..2u64 {
                let (m, done) = (m.clone(), &done);
                s.spawn(move || {
                    let mut snap = r * 997;
                    while !done.load(Ordering::Acquire) {
                        snap = (snap * 31 + 17) % (threads * per + 10);
                        for k in 0..keys {
                            let key = vec![b'h', k as u8];
                            if let Some(Some(l)) = m.get(&key, snap).to_owned_lsn() {
                                assert!(l <= snap, "read at {snap} saw {l}");
                                assert_eq!(l % keys, k);
                            }
                        }
                    }
                });
            }
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Release);
        });
        let mut oracle: BTreeMap<Vec<u8>, BTreeMap<Lsn, ValueKind>> = BTreeMap::new();
        for t in 0..threads {
            for lsn in lsns_of(t) {
                let kind = if lsn % 7 == 0 {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                oracle.entry(key_of(lsn)).or_default().insert(lsn, kind);
            }
        }
        assert_eq!(m.entries(), threads * per);
        let snaps: Vec<Lsn> = (0..threads * per + 5).step_by(7).chain([u64::MAX]).collect();
        check_against_oracle(&m, &oracle, &snaps);
    }

    /// 400K versions of one key: the oldest is still found (correctness only; the bench
    /// `riptide bench --benchmarks=hotkeysnapshot` times it), and the index has upper levels.
    #[test]
    fn oldest_of_400k_versions_is_found() {
        let m = Arc::new(Memtable::new());
        let n = 400_000u64;
        for lsn in 1..=n {
            m.insert(b"hot", lsn, ValueKind::Put, &lsn_value(lsn));
        }
        assert_eq!(m.get(b"hot", 1).to_owned_lsn(), Some(Some(1)));
        assert_eq!(m.get(b"hot", 0), Lookup::NotFound);
        assert_eq!(m.get(b"hot", n / 2).to_owned_lsn(), Some(Some(n / 2)));
        assert_eq!(m.get(b"hot", u64::MAX).to_owned_lsn(), Some(Some(n)));
        let mut c = m.cursor();
        c.seek(b"hot");
        assert_eq!(c.version(1).map(|(l, _, _)| l), Some(1));
        let lengths = c.level_lengths();
        assert_eq!(lengths[0], n as usize);
        // With one in four versions promoted per level, 400K versions reach level 5 surely.
        assert!(lengths[5] > 0, "{lengths:?}");
        assert!(lengths[1] < lengths[0] / 2, "{lengths:?}");
    }
}

/// A key's first version never gets express lanes: 1,000 keys written once each allocate no
/// upper-heads block (with random heights one in four would), and a second version of each
/// still may.
#[test]
fn first_versions_get_no_upper_levels() {
    let m = Arc::new(Memtable::new());
    let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| format!("key{i:05}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        m.insert(k, i as Lsn + 1, ValueKind::Put, b"v");
    }
    let mut c = m.cursor();
    for k in &keys {
        c.seek(k);
        assert_eq!(c.level_lengths(), vec![1], "{k:?}");
    }
    for (i, k) in keys.iter().enumerate() {
        m.insert(k, 2000 + i as Lsn, ValueKind::Put, b"w");
    }
    let tall = keys
        .iter()
        .filter(|k| {
            c.seek(k);
            c.level_lengths().len() > 1
        })
        .count();
    assert!(
        (100..500).contains(&tall),
        "{tall} of 1000 second versions were taller than 1"
    );
    assert_eq!(m.get(&keys[7], u64::MAX), Lookup::Value(b"w"));
    assert_eq!(m.get(&keys[7], 8), Lookup::Value(b"v"));
}

/// The skiplist's cache prefetch is a hint only: null, dangling and unmapped addresses are all
/// fine (every search also runs it on real nodes, in the tests above).
#[test]
fn prefetch_never_faults() {
    super::prefetch(std::ptr::null::<u8>());
    super::prefetch(std::ptr::without_provenance::<u8>(usize::MAX & !63));
    let m = Memtable::new();
    m.insert(b"k", 1, ValueKind::Put, b"v");
    assert_eq!(m.get(b"k", 1), Lookup::Value(b"v"));
}
