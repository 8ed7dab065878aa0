//! Compression per level and per-table options, end to end: each level's extents are written
//! with its codec (the extents' properties say which), compaction into a level of another
//! codec recompresses what it copies and re-links nothing, zstd stores the same rows in fewer
//! bytes than LZ4, and a table's own options persist in the catalog and apply to it alone.

use riptide::fs::FaultFs;
use riptide::{inspect, Compression, Db, Error, Options, ReadOptions, Table, TableOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &FaultFs, codecs: [Compression; 3]) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 256 << 10,
        compression_per_level: codecs,
        // Every move between levels is an explicit call.
        level0_layer_trigger: 1000,
        level0_extents_trigger: 1000,
        level1_extents_trigger: 1000,
        level1_dynamic_trigger: false,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        ..Default::default()
    }
}

/// Rows that compress as real rows do: repeated field names, a few distinct words, numbers.
fn row(i: u64, gen: u64) -> Vec<u8> {
    const WORDS: [&str; 8] = ["pending", "shipped", "paid", "refund", "east", "west", "gold", "basic"];
    format!(
        "{{\"order\":{i},\"gen\":{gen},\"status\":\"{}\",\"region\":\"{}\",\"tier\":\"{}\",\"amount\":{}.{:02}}}",
        WORDS[(i % 4) as usize],
        WORDS[4 + (i % 2) as usize],
        WORDS[6 + (i / 7 % 2) as usize],
        i * 37 % 1000,
        i % 100
    )
    .into_bytes()
}

fn key(i: u64) -> Vec<u8> {
    format!("order/{i:08}").into_bytes()
}

fn check(t: &Table, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter(&ReadOptions::default())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(
        got == want,
        "scan differs from the model ({} vs {} rows)",
        got.len(),
        want.len()
    );
    for (k, v) in model.iter().step_by(13) {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}

/// The codec this build records for zstd extents without a dictionary (key and value streams;
/// extents before format 6 record 2, one zstd frame per block).
const ZSTD: u64 = 4;
/// The same with a dictionary (both streams compressed with it; 3, one frame, before format 6).
const ZSTD_DICT: u64 = 5;

/// The `compression` property (trailer type: 0 none, 1 LZ4, 4 zstd, 5 zstd with a dictionary)
/// of every extent of
/// `table` in `level`, from `riptide inspect`.
fn codecs_in(fs: &FaultFs, db: &Path, table: &str, level: usize) -> Vec<u64> {
    let text = inspect::levels(fs, db, Some(table)).unwrap();
    let mut in_level = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix('L') {
            in_level = rest.starts_with(&format!("{level}:"));
        }
        if in_level {
            if let Some(rest) = l.strip_prefix("extent ") {
                let id = rest.split_whitespace().next().unwrap();
                let props = inspect::extent(fs, db, id, 0).unwrap();
                let c = props
                    .lines()
                    .find_map(|p| p.trim().strip_prefix("compression: "))
                    .unwrap_or_else(|| panic!("{props}"));
                out.push(c.trim_end_matches(',').parse().unwrap());
            }
        }
    }
    out
}

/// Writes `n` rows (generation `gen`) into `t` and the model.
fn fill(t: &Table, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, range: std::ops::Range<u64>, gen: u64) {
    for i in range {
        let v = row(i, gen);
        t.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
}

#[test]
fn each_level_is_written_with_its_codec_and_compaction_recompresses() {
    let fs = FaultFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..20_000, 1);
    t.flush().unwrap();
    assert!(codecs_in(&fs, dir, "default", 0).iter().all(|c| *c == 1));
    t.compact_l0().unwrap();
    let l1 = codecs_in(&fs, dir, "default", 1);
    assert!(!l1.is_empty() && l1.iter().all(|c| *c == 1), "{l1:?}");
    // L1 into an empty L2: the LZ4 extents overlap nothing, yet are not re-linked into the
    // zstd level; their blocks are merged (not copied), so their rows get LSN 0 there.
    let before = db.stats().levels[2];
    t.compact_l1().unwrap();
    let after = db.stats().levels[2];
    assert_eq!(after.extents_reused, before.extents_reused, "{after:?}");
    assert_eq!(after.blocks_reused, before.blocks_reused, "{after:?}");
    assert_eq!(after.lsns_zeroed - before.lsns_zeroed, 20_000, "{after:?}");
    let l2 = codecs_in(&fs, dir, "default", 2);
    assert!(!l2.is_empty() && l2.iter().all(|c| *c == ZSTD), "{l2:?}");
    check(&t, &model);
    // Overwrites of every third row, down to L2 again: merged and copied blocks, all zstd.
    for i in (0..20_000).step_by(3) {
        let v = row(i, 2);
        t.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    t.compact().unwrap();
    assert!(codecs_in(&fs, dir, "default", 2).iter().all(|c| *c == ZSTD));
    check(&t, &model);
    db.close().unwrap();
    let db = Db::open(dir, opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)).unwrap();
    check(&db.default_table(), &model);
    // Reopened with other codecs: the old extents still read (each block says its codec).
    db.close().unwrap();
    let db = Db::open(dir, opts(&fs, [Compression::None; 3])).unwrap();
    check(&db.default_table(), &model);
    assert!(inspect::verify(&fs, dir).unwrap().ok());
}

/// Into a level that is not the last, blocks of another codec are copied recompressed (their
/// rows keep their LSNs), and the extents they came from are not re-linked.
#[test]
fn blocks_copied_into_a_level_of_another_codec_are_recompressed() {
    let fs = FaultFs::new();
    let dir = Path::new("/db");
    let codecs = [
        Compression::Lz4,
        Compression::Zstd { level: 1 },
        Compression::Zstd { level: 1 },
    ];
    let db = Db::open(dir, opts(&fs, codecs)).unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..20_000, 1);
    t.flush().unwrap();
    t.compact_l0().unwrap();
    let l1 = db.stats().levels[1];
    assert_eq!(l1.extents_reused, 0, "{l1:?}");
    assert!(
        l1.blocks_recompressed > 0 && l1.blocks_recompressed == l1.blocks_reused,
        "{l1:?}"
    );
    assert_eq!(l1.lsns_zeroed, 0, "{l1:?}");
    let codecs_l1 = codecs_in(&fs, dir, "default", 1);
    assert!(
        !codecs_l1.is_empty() && codecs_l1.iter().all(|c| *c == ZSTD),
        "{codecs_l1:?}"
    );
    check(&t, &model);
    // L1 into L2, same codec: re-linked as they are.
    t.compact_l1().unwrap();
    let l2 = db.stats().levels[2];
    assert!(l2.extents_reused > 0 && l2.blocks_recompressed == 0, "{l2:?}");
    check(&t, &model);
}

/// The same rows in L2 take fewer bytes with zstd than with LZ4, and fewer with LZ4 than raw.
#[test]
fn zstd_stores_the_same_rows_in_fewer_bytes_than_lz4() {
    let mut sizes = Vec::new();
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd { level: 3 }] {
        let fs = FaultFs::new();
        let db = Db::open(Path::new("/db"), opts(&fs, [codec; 3])).unwrap();
        let t = db.default_table();
        let mut model = BTreeMap::new();
        fill(&t, &mut model, 0..20_000, 1);
        t.compact().unwrap();
        check(&t, &model);
        sizes.push(t.level_info().bytes[2]);
    }
    assert!(sizes[1] < sizes[0] * 3 / 4, "LZ4 saves little: {sizes:?}");
    assert!(sizes[2] < sizes[1] * 9 / 10, "zstd saves little over LZ4: {sizes:?}");
}

#[test]
fn table_options_persist_and_apply_to_their_table_alone() {
    let fs = FaultFs::new();
    let dir = Path::new("/db");
    let base = Options {
        row_cache_size: 8 << 20,
        ..opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)
    };
    let db = Db::open(dir, base.clone()).unwrap();
    let own = TableOptions {
        compression_per_level: Some([Compression::Zstd { level: 1 }; 3]),
        block_size: Some(4096),
        bloom_bits_per_key: Some(0),
        row_cache: Some(false),
        l2_tier: None,
        zstd_dictionary_bytes: Some(8192),
    };
    let t = db.create_table_with("orders", own.clone()).unwrap();
    let u = db.create_table("users").unwrap();
    assert_eq!(t.options(), &own);
    assert!(u.options().is_default());
    // Out-of-range options are refused and leave no table behind.
    for bad in [
        TableOptions {
            block_size: Some(100),
            ..Default::default()
        },
        TableOptions {
            compression_per_level: Some([Compression::Zstd { level: 40 }; 3]),
            ..Default::default()
        },
        TableOptions {
            bloom_bits_per_key: Some(99),
            ..Default::default()
        },
    ] {
        assert!(matches!(
            db.create_table_with("bad", bad),
            Err(Error::InvalidOption { .. })
        ));
        assert!(db.table("bad").is_err());
    }
    let (mut mt, mut mu) = (BTreeMap::new(), BTreeMap::new());
    fill(&t, &mut mt, 0..5_000, 1);
    fill(&u, &mut mu, 0..5_000, 1);
    t.flush().unwrap();
    u.flush().unwrap();
    // `orders`' L0 is zstd (its own codecs), `users`' LZ4 (the database's).
    assert!(codecs_in(&fs, dir, "orders", 0).iter().all(|c| *c == ZSTD));
    assert!(codecs_in(&fs, dir, "users", 0).iter().all(|c| *c == 1));
    // Its blocks are 4 KiB, so it has about four times as many.
    let blocks = |name: &str| -> u64 {
        let text = inspect::levels(&fs, dir, Some(name)).unwrap();
        text.lines()
            .filter_map(|l| l.trim().strip_suffix(" blocks"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert!(
        blocks("orders") > 3 * blocks("users"),
        "{} vs {}",
        blocks("orders"),
        blocks("users")
    );
    // No row cache for `orders`: its reads neither fill nor hit it.
    let cache_inserts = || db.stats().caches.row_cache.inserts;
    let before = cache_inserts();
    for i in 0..200 {
        t.get(&key(i)).unwrap();
    }
    assert_eq!(cache_inserts(), before);
    for i in 0..200 {
        u.get(&key(i)).unwrap();
    }
    assert!(cache_inserts() > before);
    // `inspect` shows the table's own options.
    let text = inspect::levels(&fs, dir, Some("orders")).unwrap();
    assert!(
        text.contains("option compression_per_level = zstd:1,zstd:1,zstd:1"),
        "{text}"
    );
    assert!(text.contains("option row_cache = off"), "{text}");
    assert!(text.contains("option zstd_dictionary_bytes = 8192"), "{text}");
    db.close().unwrap();

    // The options survive a reopen; a dropped table's options go with it.
    let db = Db::open(dir, base.clone()).unwrap();
    assert_eq!(db.table("orders").unwrap().options(), &own);
    check(&db.table("orders").unwrap(), &mt);
    check(&db.table("users").unwrap(), &mu);
    db.drop_table("orders").unwrap();
    let again = db.create_table("orders").unwrap();
    assert!(again.options().is_default());
    db.close().unwrap();
    let db = Db::open(dir, base).unwrap();
    assert!(db.table("orders").unwrap().options().is_default());
    db.close().unwrap();
}

/// Merged into L2, a key's only version older than every snapshot is written with LSN 0 (its
/// tag then compresses to nothing); a version a snapshot must not see keeps its LSN, and every
/// read, at the snapshot or now, returns what it returned before.
#[test]
fn bottom_rows_older_than_every_snapshot_are_written_with_lsn_0() {
    let fs = FaultFs::new();
    let dir = Path::new("/db");
    let db = Db::open(
        dir,
        Options {
            compaction_reuse: false,
            ..opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)
        },
    )
    .unwrap();
    let t = db.default_table();
    let mut model = BTreeMap::new();
    fill(&t, &mut model, 0..4_000, 1);
    let snap = db.snapshot();
    let at_snap = model.clone();
    // Newer versions of every other key, and new keys, after the snapshot.
    for i in (0..4_000).step_by(2).chain(4_000..5_000) {
        let v = row(i, 2);
        t.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    t.compact().unwrap();
    let zeroed = db.stats().levels[2].lsns_zeroed;
    // The odd keys (one version, older than the snapshot) lose their LSN; the even keys keep
    // both versions with theirs, and the new keys (one version, newer than the snapshot) theirs.
    assert_eq!(zeroed, 2_000, "{:?}", db.stats().levels[2]);
    check(&t, &model);
    let read_at = |snap: &riptide::Snapshot| -> Vec<(Vec<u8>, Vec<u8>)> {
        t.iter(&ReadOptions {
            snapshot: Some(snap.clone()),
            ..Default::default()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let want: Vec<(Vec<u8>, Vec<u8>)> = at_snap.into_iter().collect();
    assert!(read_at(&snap) == want, "the snapshot's view changed");
    drop(snap);
    // Without the snapshot, the next full compaction zeroes every row.
    t.compact_range(None, None).unwrap();
    let ids = inspect::extent_ids(&fs, dir).unwrap();
    let mut rows = 0;
    for id in ids {
        let text = inspect::extent(&fs, dir, &id, usize::MAX).unwrap();
        for line in text.lines().filter(|l| l.contains(" => ")) {
            assert!(line.contains(" @0 Put"), "{line}");
            rows += 1;
        }
    }
    assert_eq!(rows, 5_000);
    check(&t, &model);
    db.close().unwrap();
    let db = Db::open(dir, opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)).unwrap();
    check(&db.default_table(), &model);
    // Writes after the reopen are newer than the zeroed rows.
    let t = db.default_table();
    t.put(&key(7), b"after").unwrap();
    assert_eq!(t.get(&key(7)).unwrap().as_deref(), Some(&b"after"[..]));
}

/// A table with `zstd_dictionary_bytes`: its first compaction into zstd trains a dictionary on
/// the table's rows (they share their field names), L2 extents store it and their blocks use it
/// (type 3), the data take fewer bytes than plain zstd, and after a reopen the table takes the
/// same dictionary back from its extents, so later compactions copy blocks verbatim.
#[test]
fn a_table_trains_a_zstd_dictionary_and_keeps_it_across_reopens() {
    let codecs = [Compression::Lz4, Compression::Lz4, Compression::Zstd { level: 3 }];
    let mut l2_bytes = Vec::new();
    for dict_bytes in [0usize, 4096] {
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        let open = |fs: &FaultFs| {
            Db::open(
                dir,
                Options {
                    zstd_dictionary_bytes: dict_bytes,
                    // Small blocks: where a dictionary pays most.
                    block_size: 4096,
                    ..opts(fs, codecs)
                },
            )
            .unwrap()
        };
        let db = open(&fs);
        let t = db.default_table();
        let mut model = BTreeMap::new();
        fill(&t, &mut model, 0..30_000, 1);
        t.compact().unwrap();
        check(&t, &model);
        let status = t.level_info().zstd_dictionary;
        let l2 = codecs_in(&fs, dir, "default", 2);
        if dict_bytes == 0 {
            assert_eq!(status, riptide::DictionaryStatus::None);
            assert!(l2.iter().all(|c| *c == ZSTD), "{l2:?}");
            l2_bytes.push(t.level_info().bytes[2]);
            continue;
        }
        let riptide::DictionaryStatus::InUse { id, bytes } = status else {
            panic!("no dictionary in use: {status:?}");
        };
        assert!(bytes <= 4096);
        assert!(!l2.is_empty() && l2.iter().all(|c| *c == ZSTD_DICT), "{l2:?}");
        l2_bytes.push(t.level_info().bytes[2]);
        // Reopen: the dictionary comes back from the extents, and the next compaction into L2
        // copies the untouched blocks verbatim (same dictionary) instead of recompressing.
        db.close().unwrap();
        let db = open(&fs);
        let t = db.default_table();
        check(&t, &model);
        for i in (0..30_000).step_by(50) {
            let v = row(i, 2);
            t.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        let before = db.stats().levels[2];
        t.compact().unwrap();
        let after = db.stats().levels[2];
        assert_eq!(
            t.level_info().zstd_dictionary,
            riptide::DictionaryStatus::InUse { id, bytes }
        );
        assert_eq!(after.blocks_recompressed, before.blocks_recompressed, "{after:?}");
        assert!(after.blocks_reused > before.blocks_reused, "{after:?}");
        check(&t, &model);
        assert!(inspect::verify(&fs, dir).unwrap().ok());
        // Reopened without dictionaries, the dictionary extents still read.
        db.close().unwrap();
        let db = Db::open(dir, opts(&fs, codecs)).unwrap();
        check(&db.default_table(), &model);
    }
    assert!(
        l2_bytes[1] < l2_bytes[0] * 95 / 100,
        "the dictionary saves under 5 %: {l2_bytes:?}"
    );
}

#[test]
fn bad_dictionary_sizes_are_refused() {
    for n in [1usize, 255, (64 << 10) + 1] {
        let fs = FaultFs::new();
        let o = Options {
            zstd_dictionary_bytes: n,
            ..opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)
        };
        assert!(
            matches!(Db::open(Path::new("/db"), o), Err(Error::InvalidOption { .. })),
            "{n}"
        );
        let db = Db::open(Path::new("/db"), opts(&fs, riptide::DEFAULT_COMPRESSION_PER_LEVEL)).unwrap();
        let t = TableOptions {
            zstd_dictionary_bytes: Some(n),
            ..Default::default()
        };
        assert!(matches!(db.create_table_with("t", t), Err(Error::InvalidOption { .. })));
    }
}
