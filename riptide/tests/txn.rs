//! Transactions: isolation guarantees (and the anomalies each level allows), row locks,
//! deadlocks, optimistic validation, savepoints, size limits, asynchronous commit.
//!
//! Each test states the guarantee it checks; each fails if that guarantee breaks (see the
//! report in docs/transactions.md, "Tests").

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, Error, Isolation, Options, ReadOptions, Table, Txn, TxnMode, TxnOptions, WriteOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn open() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    (dir, db)
}

fn si() -> TxnOptions {
    TxnOptions::default()
}

fn rc() -> TxnOptions {
    TxnOptions {
        isolation: Isolation::ReadCommitted,
        ..Default::default()
    }
}

fn occ(isolation: Isolation) -> TxnOptions {
    TxnOptions {
        isolation,
        mode: TxnMode::Optimistic,
        ..Default::default()
    }
}

fn num(v: Option<Vec<u8>>) -> i64 {
    v.map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap())
}

fn keys_of(it: impl Iterator<Item = riptide::Result<(Vec<u8>, Vec<u8>)>>) -> Vec<Vec<u8>> {
    it.map(|r| r.unwrap().0).collect()
}

#[test]
fn no_dirty_reads_at_either_level() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    t.put(b"k", b"old").unwrap();
    for writer_opts in [si(), rc()] {
        let mut w = db.begin(writer_opts).unwrap();
        w.put(&t, b"k", b"dirty").unwrap();
        w.put(&t, b"new", b"dirty").unwrap();
        w.delete(&t, b"gone").unwrap();
        assert_eq!(w.get(&t, b"k").unwrap(), Some(b"dirty".to_vec()));
        for reader_opts in [si(), rc()] {
            let mut r = db.begin(reader_opts).unwrap();
            assert_eq!(r.get(&t, b"k").unwrap(), Some(b"old".to_vec()));
            assert_eq!(r.get(&t, b"new").unwrap(), None);
            assert_eq!(
                keys_of(r.iter(&t, &ReadOptions::default()).unwrap()),
                vec![b"k".to_vec()]
            );
        }
        assert_eq!(t.get(b"k").unwrap(), Some(b"old".to_vec()));
        assert_eq!(t.get(b"new").unwrap(), None);
        w.rollback();
        assert_eq!(t.get(b"k").unwrap(), Some(b"old".to_vec()));
        assert_eq!(t.get(b"new").unwrap(), None);
    }
}

#[test]
fn snapshot_isolation_prevents_non_repeatable_reads_read_committed_allows_them() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    t.put(b"k", b"1").unwrap();
    let mut s = db.begin(si()).unwrap();
    let mut r = db.begin(rc()).unwrap();
    assert_eq!(s.get(&t, b"k").unwrap(), Some(b"1".to_vec()));
    assert_eq!(r.get(&t, b"k").unwrap(), Some(b"1".to_vec()));
    let mut w = db.begin(si()).unwrap();
    w.put(&t, b"k", b"2").unwrap();
    w.put(&t, b"k2", b"2").unwrap();
    w.commit().unwrap();
    // Snapshot isolation: the same read, the same answer (point reads, multi_get, iterators).
    assert_eq!(s.get(&t, b"k").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.multi_get(&[(&t, b"k2")])[0].as_ref().unwrap(), &None);
    assert_eq!(
        keys_of(s.iter(&t, &ReadOptions::default()).unwrap()),
        vec![b"k".to_vec()]
    );
    // Read committed: each read sees the latest commit.
    assert_eq!(r.get(&t, b"k").unwrap(), Some(b"2".to_vec()));
    assert_eq!(r.multi_get(&[(&t, b"k2")])[0].as_ref().unwrap(), &Some(b"2".to_vec()));
    assert_eq!(
        keys_of(r.iter(&t, &ReadOptions::default()).unwrap()),
        vec![b"k".to_vec(), b"k2".to_vec()]
    );
}

/// Snapshot isolation with current reads on (InnoDB's rule for UPDATE and DELETE under
/// REPEATABLE READ): a locking read of a key changed after the snapshot returns the newest
/// committed version instead of a conflict, a write over it succeeds, plain reads still read
/// the snapshot, and turning current reads off brings the conflict check back.
#[test]
fn current_reads_lock_the_newest_version_instead_of_conflicting() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    t.put(b"row", b"0").unwrap();
    t.put(b"index", b"0").unwrap();
    t.put(b"later", b"0").unwrap();
    let mut a = db.begin(si()).unwrap();
    assert_eq!(a.get(&t, b"row").unwrap(), Some(b"0".to_vec())); // pins the snapshot
    for k in [&b"row"[..], b"index", b"later"] {
        t.put(k, b"1").unwrap(); // committed after a's snapshot
    }
    a.set_current_reads(true);
    assert_eq!(a.get_for_update(&t, b"row").unwrap(), Some(b"1".to_vec()));
    a.put(&t, b"row", b"2").unwrap();
    a.delete(&t, b"index").unwrap();
    assert_eq!(
        a.get(&t, b"later").unwrap(),
        Some(b"0".to_vec()),
        "plain reads stay at the snapshot"
    );
    a.set_current_reads(false);
    assert!(matches!(a.put(&t, b"later", b"2"), Err(Error::WriteConflict { .. })));
    // A key locked through a current read past the snapshot conflicts once they are off: its
    // snapshot value must not be read or written over under the lock.
    assert!(matches!(a.get_for_update(&t, b"row"), Err(Error::WriteConflict { .. })));
    assert!(matches!(a.put(&t, b"index", b"3"), Err(Error::WriteConflict { .. })));
    a.set_current_reads(true);
    a.commit().unwrap();
    assert_eq!(t.get(b"row").unwrap(), Some(b"2".to_vec()));
    assert_eq!(t.get(b"index").unwrap(), None);
    assert_eq!(t.get(b"later").unwrap(), Some(b"1".to_vec()));

    // Increments through current reads lose none, from many threads on one hot key.
    t.put(b"hot", b"0").unwrap();
    let (threads, per_thread) = (4, 50);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    let mut x = db.begin(si()).unwrap();
                    let _ = x.get(&t, b"row").unwrap(); // an unlocked read fixes the snapshot
                    std::thread::yield_now();
                    x.set_current_reads(true);
                    let v = num(x.get_for_update(&t, b"hot").unwrap());
                    x.put(&t, b"hot", (v + 1).to_string().as_bytes()).unwrap();
                    x.commit().unwrap();
                }
            });
        }
    });
    assert_eq!(num(t.get(b"hot").unwrap()), threads * per_thread);
}

/// Snapshot isolation, pessimistic: writing a key committed by someone else after our
/// snapshot is a write conflict (first updater wins), also when the newer version was flushed
/// to L0 or compacted to the last level, and also on later attempts.
#[test]
fn snapshot_isolation_first_updater_wins() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    for place in ["memtable", "l0", "l2"] {
        let k = format!("k-{place}").into_bytes();
        t.put(&k, b"0").unwrap();
        let mut a = db.begin(si()).unwrap();
        assert_eq!(a.get(&t, &k).unwrap(), Some(b"0".to_vec()));
        t.put(&k, b"1").unwrap(); // a non-transactional commit after a's snapshot
        match place {
            "l0" => t.flush().unwrap(),
            "l2" => t.compact().unwrap(),
            _ => {}
        }
        for attempt in 0..2 {
            match a.put(&t, &k, b"2") {
                Err(Error::WriteConflict { snapshot, found, .. }) => assert!(found > snapshot),
                other => panic!("{place}, attempt {attempt}: expected a write conflict, got {other:?}"),
            }
            assert!(matches!(a.get_for_update(&t, &k), Err(Error::WriteConflict { .. })));
        }
        // Other keys are fine; the conflicting write was not buffered.
        a.put(&t, b"other", b"x").unwrap();
        a.commit().unwrap();
        assert_eq!(t.get(&k).unwrap(), Some(b"1".to_vec()));
    }
    // Read committed writes over the newer version (no snapshot to conflict with).
    t.put(b"rc", b"0").unwrap();
    let mut r = db.begin(rc()).unwrap();
    assert_eq!(r.get(&t, b"rc").unwrap(), Some(b"0".to_vec()));
    t.put(b"rc", b"1").unwrap();
    r.put(&t, b"rc", b"2").unwrap();
    r.commit().unwrap();
    assert_eq!(t.get(b"rc").unwrap(), Some(b"2".to_vec()));
    assert!(db.txn_stats().conflicts >= 12);
}

/// N threads increment one counter, retrying on conflicts, deadlocks and timeouts; the final
/// value must be exactly the number of successful commits.
fn increment_counter(opts: TxnOptions, for_update: bool) {
    let (_d, db) = open();
    let t = db.create_table("c").unwrap();
    const THREADS: usize = 6;
    const INCREMENTS: usize = 40;
    let retries = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let (db, t, opts, retries) = (db.clone(), t.clone(), opts.clone(), retries.clone());
            s.spawn(move || {
                for _ in 0..INCREMENTS {
                    // Bounds, so a broken build fails instead of spinning or waiting forever.
                    for attempt in 0.. {
                        assert!(attempt < 20_000, "no progress after {attempt} retries");
                        assert!(started.elapsed() < Duration::from_secs(60), "no progress in 60 s");
                        let outcome = (|| -> riptide::Result<()> {
                            let mut txn = db.begin(opts.clone())?;
                            let v = if for_update {
                                txn.get_for_update(&t, b"counter")?
                            } else {
                                txn.get(&t, b"counter")?
                            };
                            std::thread::yield_now(); // widen the race window
                            txn.put(&t, b"counter", (num(v) + 1).to_string().as_bytes())?;
                            // Half the threads commit asynchronously (locks released on the
                            // pipeline thread once the batch is visible).
                            if th % 2 == 0 {
                                txn.commit()
                            } else {
                                txn.commit_async().wait()
                            }
                        })();
                        match outcome {
                            Ok(()) => break,
                            Err(e) if e.is_retryable() => {
                                retries.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(num(t.get(b"counter").unwrap()), (THREADS * INCREMENTS) as i64);
    let stats = db.txn_stats();
    assert_eq!(stats.committed, (THREADS * INCREMENTS) as u64);
    assert_eq!(stats.locked_rows, 0, "every lock released");
}

#[test]
fn lost_updates_prevented_snapshot_isolation_plain_get() {
    increment_counter(si(), false);
}

#[test]
fn lost_updates_prevented_snapshot_isolation_get_for_update() {
    increment_counter(si(), true);
}

#[test]
fn lost_updates_prevented_read_committed_get_for_update() {
    increment_counter(rc(), true);
}

#[test]
fn lost_updates_prevented_optimistic() {
    increment_counter(occ(Isolation::Snapshot), false);
    increment_counter(occ(Isolation::ReadCommitted), true);
}

/// Write skew: two transactions each read both accounts, see enough money, and withdraw from
/// different accounts. Snapshot isolation allows it (documented); optimistic mode with
/// `validate_reads` does not, nor does reading with `get_for_update`.
#[test]
fn write_skew_allowed_under_snapshot_isolation() {
    let (_d, db) = open();
    let t = db.create_table("acct").unwrap();
    type Read<'a> = &'a dyn Fn(&mut Txn, &[u8]) -> riptide::Result<Option<Vec<u8>>>;
    let withdraw = |txn: &mut Txn, from: &[u8], read: Read<'_>| {
        let x = num(read(txn, b"x")?);
        let y = num(read(txn, b"y")?);
        assert!(x + y >= 100);
        let cur = if from == b"x" { x } else { y };
        txn.put(&t, from, (cur - 100).to_string().as_bytes())
    };
    let plain = |txn: &mut Txn, k: &[u8]| txn.get(&t, k);
    let for_update = |txn: &mut Txn, k: &[u8]| txn.get_for_update(&t, k);

    // Snapshot isolation: both commit, the invariant x + y >= 0 breaks.
    t.put(b"x", b"50").unwrap();
    t.put(b"y", b"50").unwrap();
    let mut a = db.begin(si()).unwrap();
    let mut b = db.begin(si()).unwrap();
    withdraw(&mut a, b"x", &plain).unwrap();
    withdraw(&mut b, b"y", &plain).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(num(t.get(b"x").unwrap()) + num(t.get(b"y").unwrap()), -100);

    // Optimistic with validate_reads: the second commit fails and writes nothing.
    t.put(b"x", b"50").unwrap();
    t.put(b"y", b"50").unwrap();
    let opts = TxnOptions {
        validate_reads: true,
        ..occ(Isolation::Snapshot)
    };
    let mut a = db.begin(opts.clone()).unwrap();
    let mut b = db.begin(opts).unwrap();
    withdraw(&mut a, b"x", &plain).unwrap();
    withdraw(&mut b, b"y", &plain).unwrap();
    a.commit().unwrap();
    assert!(matches!(b.commit(), Err(Error::WriteConflict { .. })));
    assert_eq!(num(t.get(b"x").unwrap()) + num(t.get(b"y").unwrap()), 0);

    // Pessimistic with get_for_update: the second reader waits for the first and then sees
    // its write-conflict (or times out while the first is open).
    t.put(b"x", b"50").unwrap();
    t.put(b"y", b"50").unwrap();
    let mut a = db.begin(si()).unwrap();
    let mut b = db
        .begin(TxnOptions {
            lock_timeout: Duration::from_millis(50),
            ..si()
        })
        .unwrap();
    withdraw(&mut a, b"x", &for_update).unwrap();
    assert!(matches!(
        withdraw(&mut b, b"y", &for_update),
        Err(Error::LockTimeout { .. })
    ));
    a.commit().unwrap();
    // b has read nothing unlocked: its snapshot moves past a's commit and it sees the
    // withdrawal, so it would not withdraw again.
    assert_eq!(num(b.get_for_update(&t, b"x").unwrap()), -50);
    drop(b);
    assert_eq!(num(t.get(b"x").unwrap()) + num(t.get(b"y").unwrap()), 0);

    // The same after an unlocked read has fixed b's snapshot: a write conflict.
    t.put(b"x", b"50").unwrap();
    let mut a = db.begin(si()).unwrap();
    let mut b = db.begin(si()).unwrap();
    assert_eq!(num(b.get(&t, b"y").unwrap()), 50);
    withdraw(&mut a, b"x", &for_update).unwrap();
    a.commit().unwrap();
    assert!(matches!(
        withdraw(&mut b, b"y", &for_update),
        Err(Error::WriteConflict { .. })
    ));
    drop(b);
    assert_eq!(num(t.get(b"x").unwrap()) + num(t.get(b"y").unwrap()), 0);
}

#[test]
fn read_your_own_writes_in_get_multi_get_and_iterators() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let u = db.create_table("u").unwrap();
    for k in [b"a", b"c", b"e", b"g"] {
        t.put(k, b"base").unwrap();
    }
    u.put(b"c", b"other-table").unwrap();
    for opts in [si(), rc(), occ(Isolation::Snapshot)] {
        let mut txn = db.begin(opts).unwrap();
        txn.put(&t, b"b", b"mine").unwrap();
        txn.put(&t, b"c", b"mine").unwrap();
        txn.delete(&t, b"e").unwrap();
        txn.put(&t, b"h", b"mine").unwrap();
        txn.delete(&t, b"zz").unwrap(); // deleting a missing key
        assert_eq!(txn.get(&t, b"c").unwrap(), Some(b"mine".to_vec()));
        assert_eq!(txn.get(&t, b"e").unwrap(), None);
        assert_eq!(txn.get(&u, b"c").unwrap(), Some(b"other-table".to_vec()));
        assert_eq!(txn.get_for_update(&t, b"b").unwrap(), Some(b"mine".to_vec()));
        let got = txn.multi_get(&[(&t, &b"a"[..]), (&t, b"b"), (&t, b"e"), (&u, b"c"), (&u, b"b")]);
        let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                Some(b"base".to_vec()),
                Some(b"mine".to_vec()),
                None,
                Some(b"other-table".to_vec()),
                None
            ]
        );
        let all: Vec<(Vec<u8>, Vec<u8>)> = txn
            .iter(&t, &ReadOptions::default())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let expect: Vec<(Vec<u8>, Vec<u8>)> = [
            (&b"a"[..], &b"base"[..]),
            (b"b", b"mine"),
            (b"c", b"mine"),
            (b"g", b"base"),
            (b"h", b"mine"),
        ]
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
        assert_eq!(all, expect);
        let back: Vec<_> = txn
            .iter(&t, &ReadOptions::default())
            .unwrap()
            .rev()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, expect.iter().rev().cloned().collect::<Vec<_>>());
        let bounded = ReadOptions {
            lower_bound: Some(b"b".to_vec()),
            upper_bound: Some(b"h".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            keys_of(txn.iter(&t, &bounded).unwrap()),
            vec![b"b".to_vec(), b"c".to_vec(), b"g".to_vec()]
        );
        let mut c = txn.raw_iter(&t, &bounded).unwrap();
        c.seek(b"d");
        assert_eq!(c.key(), b"g"); // e is deleted in the transaction
        c.prev();
        assert_eq!((c.key(), c.value()), (&b"c"[..], &b"mine"[..]));
        c.seek_for_prev(b"zzz");
        assert_eq!(c.key(), b"g");
        c.next();
        assert!(!c.valid());
        c.status().unwrap();
        // Nothing is visible outside before commit; everything after.
        assert_eq!(t.get(b"b").unwrap(), None);
        txn.rollback();
    }
}

/// The transaction cursor against a model (a BTreeMap of the merged view) under random
/// operations: seeks, steps in both directions, bounds; base data in memtables and extents.
#[test]
fn iterator_matches_model_under_random_operations() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let key = |i: u32| format!("k{i:03}").into_bytes();
    let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for round in 0..6 {
        for _ in 0..40 {
            let k = key(rng.random_range(0..120));
            if rng.random_bool(0.2) {
                t.delete(&k).unwrap();
                committed.remove(&k);
            } else {
                let v = format!("c{round}-{}", rng.random::<u16>()).into_bytes();
                t.put(&k, &v).unwrap();
                committed.insert(k, v);
            }
        }
        if round % 2 == 1 {
            t.flush().unwrap();
        }
        let mut txn = db.begin(si()).unwrap();
        let mut view = committed.clone();
        for _ in 0..30 {
            let k = key(rng.random_range(0..120));
            if rng.random_bool(0.3) {
                txn.delete(&t, &k).unwrap();
                view.remove(&k);
            } else {
                let v = format!("t{round}-{}", rng.random::<u16>()).into_bytes();
                txn.put(&t, &k, &v).unwrap();
                view.insert(k, v);
            }
        }
        for _ in 0..20 {
            let lo = rng.random_bool(0.5).then(|| key(rng.random_range(0..120)));
            let hi = rng.random_bool(0.5).then(|| key(rng.random_range(0..120)));
            let opts = ReadOptions {
                lower_bound: lo.clone(),
                upper_bound: hi.clone(),
                ..Default::default()
            };
            let inb = |k: &[u8]| {
                lo.as_ref().is_none_or(|l| k >= l.as_slice()) && hi.as_ref().is_none_or(|h| k < h.as_slice())
            };
            let model: Vec<(&Vec<u8>, &Vec<u8>)> = view.iter().filter(|(k, _)| inb(k)).collect();
            let mut c = txn.raw_iter(&t, &opts).unwrap();
            // Position: index into `model` (None = invalid).
            let mut pos: Option<usize> = None;
            for _ in 0..40 {
                match rng.random_range(0..6) {
                    0 => {
                        c.seek_to_first();
                        pos = (!model.is_empty()).then_some(0);
                    }
                    1 => {
                        c.seek_to_last();
                        pos = model.len().checked_sub(1);
                    }
                    2 => {
                        let target = key(rng.random_range(0..120));
                        c.seek(&target);
                        let i = model.partition_point(|(k, _)| k.as_slice() < target.as_slice());
                        pos = (i < model.len()).then_some(i);
                    }
                    3 => {
                        let target = key(rng.random_range(0..120));
                        c.seek_for_prev(&target);
                        let i = model.partition_point(|(k, _)| k.as_slice() <= target.as_slice());
                        pos = i.checked_sub(1);
                    }
                    4 => {
                        c.next();
                        pos = pos.and_then(|p| (p + 1 < model.len()).then_some(p + 1));
                    }
                    _ => {
                        c.prev();
                        pos = pos.and_then(|p| p.checked_sub(1));
                    }
                }
                c.status().unwrap();
                match pos {
                    None => assert!(!c.valid(), "round {round}: cursor valid at {:?}", c.key()),
                    Some(p) => {
                        assert!(c.valid(), "round {round}: expected {:?}", model[p].0);
                        assert_eq!((c.key(), c.value()), (model[p].0.as_slice(), model[p].1.as_slice()));
                    }
                }
            }
            let fwd: Vec<(Vec<u8>, Vec<u8>)> = txn.iter(&t, &opts).unwrap().map(Result::unwrap).collect();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| ((*k).clone(), (*v).clone())).collect();
            assert_eq!(fwd, want);
            // Front and back meeting in the middle.
            let mut it = txn.iter(&t, &opts).unwrap();
            let mut front = Vec::new();
            let mut back = Vec::new();
            loop {
                let from_front = rng.random_bool(0.5);
                let step = if from_front { it.next() } else { it.next_back() };
                let Some(r) = step else { break };
                if from_front {
                    front.push(r.unwrap().0);
                } else {
                    back.push(r.unwrap().0);
                }
            }
            front.extend(back.into_iter().rev());
            let want_keys: Vec<Vec<u8>> = model.iter().map(|(k, _)| (*k).clone()).collect();
            assert_eq!(front, want_keys);
        }
        txn.commit().unwrap();
        committed = view;
        let after: BTreeMap<Vec<u8>, Vec<u8>> = t.iter(&ReadOptions::default()).unwrap().map(Result::unwrap).collect();
        assert_eq!(after, committed);
    }
}

#[test]
fn savepoints_nest_and_roll_back_exactly() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    t.put(b"base", b"0").unwrap();
    let mut txn = db.begin(si()).unwrap();
    assert!(matches!(txn.rollback_to_savepoint(), Err(Error::NoSavepoint)));
    txn.put(&t, b"a", b"1").unwrap();
    let size_1 = (txn.len(), txn.size_in_bytes());
    txn.set_savepoint();
    txn.put(&t, b"a", b"2").unwrap();
    txn.put(&t, b"b", b"2").unwrap();
    txn.delete(&t, b"base").unwrap();
    txn.set_savepoint();
    txn.put(&t, b"c", b"3").unwrap();
    txn.put(&t, b"a", b"3").unwrap();
    assert_eq!(txn.savepoints(), 2);
    txn.rollback_to_savepoint().unwrap();
    assert_eq!(txn.get(&t, b"a").unwrap(), Some(b"2".to_vec()));
    assert_eq!(txn.get(&t, b"c").unwrap(), None);
    assert_eq!(txn.get(&t, b"base").unwrap(), None);
    txn.rollback_to_savepoint().unwrap();
    assert_eq!(txn.get(&t, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(txn.get(&t, b"b").unwrap(), None);
    assert_eq!(txn.get(&t, b"base").unwrap(), Some(b"0".to_vec()));
    assert_eq!((txn.len(), txn.size_in_bytes()), size_1);
    // pop keeps the writes; the outer savepoint still undoes them.
    txn.set_savepoint();
    txn.put(&t, b"x", b"1").unwrap();
    txn.set_savepoint();
    txn.put(&t, b"y", b"1").unwrap();
    txn.put(&t, b"a", b"9").unwrap();
    txn.pop_savepoint().unwrap();
    assert_eq!(txn.get(&t, b"y").unwrap(), Some(b"1".to_vec()));
    txn.rollback_to_savepoint().unwrap();
    assert_eq!(txn.get(&t, b"x").unwrap(), None);
    assert_eq!(txn.get(&t, b"y").unwrap(), None);
    assert_eq!(txn.get(&t, b"a").unwrap(), Some(b"1".to_vec()));
    assert!(matches!(txn.pop_savepoint(), Err(Error::NoSavepoint)));
    txn.commit().unwrap();
    let all: Vec<_> = t.iter(&ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    assert_eq!(
        all,
        vec![(b"a".to_vec(), b"1".to_vec()), (b"base".to_vec(), b"0".to_vec())]
    );
}

/// `n` transactions in a cycle: txn i locks key i, then key i+1 (mod n). Exactly one is the
/// deadlock victim; after it rolls back, the others commit.
fn deadlock_cycle(n: usize) {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let barrier = Arc::new(Barrier::new(n));
    let victims = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for i in 0..n {
            let (db, t, barrier, victims) = (db.clone(), t.clone(), barrier.clone(), victims.clone());
            s.spawn(move || {
                // Read committed: once the victim is gone the others commit one after the other
                // (under snapshot isolation the later ones would see write conflicts).
                let mut txn = db
                    .begin(TxnOptions {
                        lock_timeout: Duration::from_secs(20),
                        ..rc()
                    })
                    .unwrap();
                txn.put(&t, format!("k{i}").as_bytes(), b"first").unwrap();
                barrier.wait();
                match txn.put(&t, format!("k{}", (i + 1) % n).as_bytes(), b"second") {
                    Ok(()) => txn.commit().unwrap(),
                    Err(Error::Deadlock { txn: id, .. }) => {
                        assert_eq!(id, txn.id());
                        victims.fetch_add(1, Ordering::SeqCst);
                        txn.rollback();
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
            });
        }
    });
    assert_eq!(victims.load(Ordering::SeqCst), 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "resolved by detection, not timeout"
    );
    assert_eq!(db.txn_stats().deadlocks, 1);
    assert_eq!(db.txn_stats().committed, n as u64 - 1);
    assert_eq!(db.txn_stats().locked_rows, 0);
}

#[test]
fn deadlock_of_two_transactions_has_one_victim() {
    deadlock_cycle(2);
}

#[test]
fn deadlock_of_three_transactions_has_one_victim() {
    deadlock_cycle(3);
}

#[test]
fn lock_timeout_then_success_after_release() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let mut holder = db.begin(si()).unwrap();
    holder.get_for_update(&t, b"k").unwrap();
    let mut waiter = db
        .begin(TxnOptions {
            lock_timeout: Duration::from_millis(100),
            ..si()
        })
        .unwrap();
    let t0 = Instant::now();
    match waiter.put(&t, b"k", b"w") {
        Err(Error::LockTimeout { waited, key, .. }) => {
            assert!(waited >= Duration::from_millis(100));
            assert_eq!(key, b"k");
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    assert!(t0.elapsed() >= Duration::from_millis(100));
    // A zero timeout fails at once.
    let mut nowait = db
        .begin(TxnOptions {
            lock_timeout: Duration::ZERO,
            ..si()
        })
        .unwrap();
    assert!(matches!(nowait.delete(&t, b"k"), Err(Error::LockTimeout { .. })));
    // The holder's rollback (by drop) releases the lock.
    drop(holder);
    waiter.put(&t, b"k", b"w").unwrap();
    waiter.commit().unwrap();
    assert_eq!(t.get(b"k").unwrap(), Some(b"w".to_vec()));
    // A waiter blocked on a lock proceeds as soon as the holder commits.
    let mut holder = db.begin(si()).unwrap();
    holder.put(&t, b"k", b"h").unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut w = db.begin(rc()).unwrap();
            let seen = w.get_for_update(&t, b"k").unwrap();
            w.commit().unwrap();
            seen
        });
        std::thread::sleep(Duration::from_millis(50));
        holder.commit().unwrap();
        // Read committed after the lock: sees the holder's commit.
        assert_eq!(h.join().unwrap(), Some(b"h".to_vec()));
    });
    assert!(db.txn_stats().lock_timeouts >= 2);
}

#[test]
fn optimistic_conflict_writes_nothing() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let u = db.create_table("u").unwrap();
    t.put(b"k", b"0").unwrap();
    for isolation in [Isolation::Snapshot, Isolation::ReadCommitted] {
        let mut a = db.begin(occ(isolation)).unwrap();
        let mut b = db.begin(occ(isolation)).unwrap();
        a.put(&t, b"k", b"a").unwrap();
        a.put(&u, b"side", b"a").unwrap();
        // No locks while running: b writes the same key without waiting.
        b.put(&t, b"k", b"b").unwrap();
        b.commit().unwrap();
        match a.commit() {
            Err(Error::WriteConflict { table, key, .. }) => {
                assert_eq!(table, "t");
                assert_eq!(key, b"k");
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert_eq!(t.get(b"k").unwrap(), Some(b"b".to_vec()));
        assert_eq!(u.get(b"side").unwrap(), None, "nothing of the failed commit is written");
    }
    // Disjoint keys: both commit.
    let mut a = db.begin(occ(Isolation::Snapshot)).unwrap();
    let mut b = db.begin(occ(Isolation::Snapshot)).unwrap();
    a.put(&t, b"x", b"a").unwrap();
    b.put(&t, b"y", b"b").unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    // Without validate_reads, a key only read is not validated.
    let mut a = db.begin(occ(Isolation::Snapshot)).unwrap();
    assert_eq!(a.get(&t, b"x").unwrap(), Some(b"a".to_vec()));
    t.put(b"x", b"changed").unwrap();
    a.put(&t, b"z", b"a").unwrap();
    a.commit().unwrap();
    // get_for_update is validated.
    let mut a = db.begin(occ(Isolation::Snapshot)).unwrap();
    a.get_for_update(&t, b"x").unwrap();
    t.put(b"x", b"changed again").unwrap();
    a.put(&t, b"z", b"b").unwrap();
    assert!(matches!(a.commit_async().wait(), Err(Error::WriteConflict { .. })));
    assert_eq!(t.get(b"z").unwrap(), Some(b"a".to_vec()));
}

#[test]
fn size_limits_refuse_the_write_and_keep_the_transaction() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let mut txn = db.begin(TxnOptions { max_keys: 3, ..si() }).unwrap();
    for k in [b"a", b"b", b"c"] {
        txn.put(&t, k, b"v").unwrap();
    }
    txn.put(&t, b"a", b"overwrite is not a new key").unwrap();
    match txn.put(&t, b"d", b"v") {
        Err(Error::TxnTooLarge {
            what: "keys",
            len: 4,
            max: 3,
        }) => {}
        other => panic!("expected TxnTooLarge, got {other:?}"),
    }
    // The refused write took no lock.
    let mut other = db
        .begin(TxnOptions {
            lock_timeout: Duration::ZERO,
            ..si()
        })
        .unwrap();
    other.put(&t, b"d", b"other").unwrap();
    other.commit().unwrap();
    txn.commit().unwrap();
    assert_eq!(t.get(b"c").unwrap(), Some(b"v".to_vec()));
    assert_eq!(t.get(b"d").unwrap(), Some(b"other".to_vec()));

    let mut txn = db.begin(TxnOptions { max_bytes: 100, ..si() }).unwrap();
    txn.put(&t, b"k1", &[7; 50]).unwrap();
    let before = txn.size_in_bytes();
    assert_eq!(before, 2 + 50 + 21);
    assert!(matches!(
        txn.put(&t, b"k2", &[7; 10]),
        Err(Error::TxnTooLarge { what: "bytes", .. })
    ));
    assert_eq!(txn.size_in_bytes(), before);
    assert_eq!(txn.get(&t, b"k2").unwrap(), None);
    // Shrinking an entry is fine.
    txn.put(&t, b"k1", b"small").unwrap();
    txn.put(&t, b"k2", &[7; 10]).unwrap();
    txn.commit().unwrap();
    assert!(matches!(
        db.begin(TxnOptions {
            max_bytes: usize::MAX,
            ..si()
        }),
        Err(Error::InvalidOption {
            option: "max_bytes",
            ..
        })
    ));
}

#[test]
fn drop_rolls_back_and_releases_locks() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    {
        let mut txn = db.begin(si()).unwrap();
        txn.put(&t, b"k", b"lost").unwrap();
        txn.get_for_update(&t, b"j").unwrap();
        assert_eq!(db.txn_stats().locked_rows, 2);
    }
    assert_eq!(db.txn_stats().locked_rows, 0);
    assert_eq!(t.get(b"k").unwrap(), None);
    let mut txn = db
        .begin(TxnOptions {
            lock_timeout: Duration::ZERO,
            ..si()
        })
        .unwrap();
    txn.put(&t, b"k", b"kept").unwrap();
    txn.put(&t, b"j", b"kept").unwrap();
    txn.commit().unwrap();
    assert_eq!(t.get(b"k").unwrap(), Some(b"kept".to_vec()));
    let s = db.txn_stats();
    assert_eq!((s.begun, s.committed, s.rolled_back), (2, 1, 1));
}

#[test]
fn commit_async_calls_back_when_durable_and_then_releases_locks() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    let mut txn = db
        .begin(TxnOptions {
            write_options: WriteOptions {
                sync: true,
                ..Default::default()
            },
            ..si()
        })
        .unwrap();
    txn.put(&t, b"k", b"v").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t2 = t.clone();
    txn.commit_async().on_complete(move |r| {
        // Visible by the time the callback runs.
        tx.send((r.is_ok(), t2.get(b"k").unwrap())).unwrap();
    });
    let (ok, seen) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(ok);
    assert_eq!(seen, Some(b"v".to_vec()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while db.txn_stats().locked_rows != 0 {
        assert!(Instant::now() < deadline, "locks not released after the async commit");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(db.txn_stats().committed, 1);
}

/// Thousands of transactions open at once, from a few threads (no thread per transaction),
/// committed asynchronously.
#[test]
fn thousands_of_concurrent_transactions() {
    let (_d, db) = open();
    let t = db.create_table("t").unwrap();
    const PER_THREAD: usize = 1500;
    std::thread::scope(|s| {
        for th in 0..4 {
            let (db, t) = (db.clone(), t.clone());
            s.spawn(move || {
                let mut open: Vec<Txn> = Vec::with_capacity(PER_THREAD);
                for i in 0..PER_THREAD {
                    let mut txn = db
                        .begin(if i % 2 == 0 { si() } else { occ(Isolation::Snapshot) })
                        .unwrap();
                    txn.put(&t, format!("{th}-{i:05}").as_bytes(), b"v").unwrap();
                    // Everyone also reads a shared hot key.
                    txn.get(&t, b"hot").unwrap();
                    open.push(txn);
                }
                let handles: Vec<_> = open.into_iter().map(Txn::commit_async).collect();
                for h in handles {
                    h.wait().unwrap();
                }
            });
        }
    });
    assert_eq!(t.iter(&ReadOptions::default()).unwrap().count(), 4 * PER_THREAD);
    assert_eq!(db.txn_stats().committed, 4 * PER_THREAD as u64);
    assert_eq!(db.txn_stats().locked_rows, 0);
}

#[test]
fn a_transaction_spans_tables_atomically_and_rejects_foreign_tables() {
    let (_d, db) = open();
    let a = db.create_table("a").unwrap();
    let b = db.create_table("b").unwrap();
    let (_d2, other) = open();
    let foreign: Table = other.default_table();
    let mut txn = db.begin(si()).unwrap();
    txn.put(&a, b"k", b"1").unwrap();
    txn.put(&b, b"k", b"2").unwrap();
    assert!(matches!(
        txn.put(&foreign, b"k", b"x"),
        Err(Error::ForeignTable { what: "transaction" })
    ));
    assert!(matches!(
        txn.get(&foreign, b"k"),
        Err(Error::ForeignTable { what: "transaction" })
    ));
    let snap = db.snapshot();
    txn.commit().unwrap();
    let at = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    assert_eq!(
        (a.get_opt(b"k", &at).unwrap(), b.get_opt(b"k", &at).unwrap()),
        (None, None)
    );
    assert_eq!(
        (a.get(b"k").unwrap(), b.get(b"k").unwrap()),
        (Some(b"1".to_vec()), Some(b"2".to_vec()))
    );
}

/// `get_for_update` under snapshot isolation reads the value with the same lookup that checks
/// for conflicts: it must return exactly what `get` returns, for values and tombstones in the
/// memtable, in flushed extents, and for keys that never existed, and still see the
/// transaction's own writes.
#[test]
fn get_for_update_reads_what_get_reads_from_memtables_and_levels() {
    let (_d, db) = open();
    let t = db.default_table();
    t.put(b"flushed", b"on disk").unwrap();
    t.put(b"flushed-then-deleted", b"x").unwrap();
    t.put(b"rewritten", b"old").unwrap();
    db.flush().unwrap();
    t.delete(b"flushed-then-deleted").unwrap();
    t.put(b"rewritten", b"new").unwrap();
    t.put(b"in-memory", b"fresh").unwrap();
    t.put(b"deleted-in-memory", b"y").unwrap();
    t.delete(b"deleted-in-memory").unwrap();
    db.flush().unwrap();
    t.put(b"newest", b"mem").unwrap();
    let keys: [&[u8]; 7] = [
        b"flushed",
        b"flushed-then-deleted",
        b"rewritten",
        b"in-memory",
        b"deleted-in-memory",
        b"newest",
        b"never",
    ];
    for opts in [si(), rc()] {
        let mut reader = db.begin(opts.clone()).unwrap();
        let mut updater = db.begin(opts).unwrap();
        for k in keys {
            let expected = reader.get(&t, k).unwrap();
            assert_eq!(
                updater.get_for_update(&t, k).unwrap(),
                expected,
                "{}",
                String::from_utf8_lossy(k)
            );
            // Locked now: a second call reads again, and sees the transaction's own write.
            assert_eq!(updater.get_for_update(&t, k).unwrap(), expected);
            updater.put(&t, k, b"mine").unwrap();
            assert_eq!(updater.get_for_update(&t, k).unwrap(), Some(b"mine".to_vec()));
        }
        updater.rollback();
    }
    assert_eq!(t.get(b"rewritten").unwrap(), Some(b"new".to_vec()));
    assert_eq!(t.get(b"flushed-then-deleted").unwrap(), None);
}

/// An optimistic read-committed transaction tracks a key at the visible LSN; another writer
/// changes it, and a full compaction into L2 runs while no other snapshot is live. The change
/// must keep its LSN there (L2's LSN zeroing stops at the transaction's pin), so the commit
/// still sees the conflict: no lost update.
#[test]
fn optimistic_read_committed_sees_a_change_compacted_into_l2() {
    let (_dir, db) = open();
    let t = db.default_table();
    t.put(b"k", b"1").unwrap();
    t.flush().unwrap();
    t.compact().unwrap();
    let mut txn = db.begin(occ(Isolation::ReadCommitted)).unwrap();
    assert_eq!(txn.get_for_update(&t, b"k").unwrap().as_deref(), Some(&b"1"[..]));
    // Another writer, then everything down to L2 (the old version is dropped there).
    t.put(b"k", b"2").unwrap();
    t.flush().unwrap();
    t.compact().unwrap();
    assert_eq!(db.stats().levels[2].lsns_zeroed, 1, "only the first compaction zeroes");
    txn.put(&t, b"k", b"from txn").unwrap();
    assert!(matches!(txn.commit(), Err(Error::WriteConflict { .. })));
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"2"[..]));
}
