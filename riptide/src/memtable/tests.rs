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
