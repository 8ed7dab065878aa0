//! Metamorphic test of compaction data reuse: the same random operation log runs on two
//! databases that differ only in `compaction_reuse`; at every check point both must return the
//! same scans, the same point reads and the same snapshot views. Reuse changes how compaction
//! produces bytes (re-linked extents, copied blocks), never what a reader sees.
//!
//! The log mixes sequential key runs (which make extents that overlap nothing, so they get
//! re-linked), random overwrites and deletes (overlapping blocks, merged), snapshots held
//! across compactions, explicit flushes and full compactions, with tiny triggers so every
//! compaction kind fires. `RIPTIDE_META_SEED=<n>` runs one seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::fs::FaultFs;
use riptide::{Db, Options, ReadOptions, Snapshot, Table};
use std::sync::Arc;

fn open(reuse: bool) -> Db {
    open_with(reuse, |_| {})
}

fn open_with(reuse: bool, tweak: impl FnOnce(&mut Options)) -> Db {
    let fs = FaultFs::new();
    let mut o = Options {
        fs: Arc::new(fs),
        write_buffer_size: 64 << 10,
        block_size: 1 << 10,
        level0_layer_trigger: 2,
        level0_extents_trigger: 3,
        level1_extents_trigger: 3,
        level1_dynamic_trigger: false,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        immutable_slowdown_trigger: 1000,
        immutable_stop_trigger: 1000,
        compaction_reuse: reuse,
        ..Default::default()
    };
    tweak(&mut o);
    Db::open("/db", o).unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:07}").into_bytes()
}

fn scan(t: &Table, snap: Option<&Snapshot>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let opts = ReadOptions {
        snapshot: snap.cloned(),
        ..Default::default()
    };
    t.iter(&opts).unwrap().collect::<Result<_, _>>().unwrap()
}

fn run_seed(seed: u64) -> (u64, u64) {
    run_pair(seed, [open(true), open(false)])
}

fn run_pair(seed: u64, dbs: [Db; 2]) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let tables: Vec<Table> = dbs.iter().map(|d| d.default_table()).collect();
    let mut snaps: Vec<[Snapshot; 2]> = Vec::new();
    let mut next_seq = 0u32;
    for step in 0..120 {
        match rng.random_range(0..100) {
            // A sequential run of fresh keys: its extents overlap nothing.
            0..30 => {
                let start = next_seq;
                next_seq += rng.random_range(200..1500);
                let len = rng.random_range(8..80);
                for i in start..next_seq {
                    let v = vec![(i % 251) as u8; len];
                    for t in &tables {
                        t.put(&key(i * 4), &v).unwrap();
                    }
                }
            }
            // Random overwrites and deletes among the keys written so far.
            30..60 => {
                for _ in 0..rng.random_range(10..400) {
                    let i = rng.random_range(0..next_seq.max(1)) * 4 + rng.random_range(0..2);
                    let del = rng.random_bool(0.3);
                    let v = vec![rng.random::<u8>(); rng.random_range(0..60)];
                    for t in &tables {
                        if del {
                            t.delete(&key(i)).unwrap();
                        } else {
                            t.put(&key(i), &v).unwrap();
                        }
                    }
                }
            }
            60..70 => tables.iter().for_each(|t| t.flush().unwrap()),
            70..75 => tables.iter().for_each(|t| t.compact().unwrap()),
            75..80 => tables.iter().for_each(|t| t.compact_l0().unwrap()),
            80..88 => {
                if snaps.len() < 3 {
                    snaps.push([dbs[0].snapshot(), dbs[1].snapshot()]);
                } else {
                    snaps.remove(rng.random_range(0..snaps.len()));
                }
            }
            _ => {
                for d in &dbs {
                    d.wait_for_background_work().unwrap();
                }
            }
        }
        if step % 4 == 3 {
            let a = scan(&tables[0], None);
            let b = scan(&tables[1], None);
            assert!(
                a == b,
                "seed {seed} step {step}: scans differ ({} vs {} rows)",
                a.len(),
                b.len()
            );
            for s in &snaps {
                let a = scan(&tables[0], Some(&s[0]));
                let b = scan(&tables[1], Some(&s[1]));
                assert!(a == b, "seed {seed} step {step}: snapshot scans differ");
            }
            for _ in 0..20 {
                let k = key(rng.random_range(0..next_seq.max(1) * 4));
                assert_eq!(
                    tables[0].get(&k).unwrap(),
                    tables[1].get(&k).unwrap(),
                    "seed {seed} step {step}"
                );
            }
        }
    }
    for d in &dbs {
        d.wait_for_background_work().unwrap();
    }
    assert!(
        scan(&tables[0], None) == scan(&tables[1], None),
        "seed {seed}: final scans differ"
    );
    let on = dbs[0].stats();
    let off = dbs[1].stats();
    let reused: u64 = on.levels.iter().map(|l| l.extents_reused + l.blocks_reused).sum();
    let reused_off: u64 = off.levels.iter().map(|l| l.extents_reused + l.blocks_reused).sum();
    assert_eq!(reused_off, 0, "seed {seed}: reuse happened with reuse off");
    let written_on: u64 = on.levels.iter().map(|l| l.bytes_written).sum();
    let written_off: u64 = off.levels.iter().map(|l| l.bytes_written).sum();
    (reused, written_off.saturating_sub(written_on))
}

#[test]
fn reuse_on_and_off_read_the_same() {
    let seeds: Vec<u64> = match std::env::var("RIPTIDE_META_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..8).collect(),
    };
    let mut reused = 0;
    let mut saved = 0;
    for seed in seeds {
        let (r, s) = run_seed(seed);
        reused += r;
        saved += s;
    }
    eprintln!("reused {reused} extents+blocks, {saved} bytes not rewritten");
    assert!(
        reused > 0,
        "no extent or block was ever reused: the test exercises nothing"
    );
    assert!(saved > 0, "reuse wrote no fewer bytes than rewriting");
}

/// Compaction units: many small tasks on several units (closed ranges larger than a task cut
/// into pieces between block groups), every second task rejected by its unit and run on the
/// CPU fallback path, against a single unit without reuse.
#[test]
fn units_and_the_fallback_path_read_the_same() {
    for seed in 100..103 {
        let units = open_with(true, |o| {
            o.compaction_units = 3;
            o.compaction_task_extents = 1;
            o.compaction_unit_reject_every = 2;
            o.compaction_piece_bytes = 64 << 10;
        });
        let plain = open_with(false, |o| o.compaction_units = 1);
        let probe = units.clone();
        run_pair(seed, [units, plain]);
        let s = probe.stats();
        let tasks: u64 = s.levels.iter().map(|l| l.tasks).sum();
        let retried: u64 = s.levels.iter().map(|l| l.tasks_retried).sum();
        let split: u64 = s.levels.iter().map(|l| l.ranges_split).sum();
        assert!(
            tasks > 10 && retried > 0 && split > 0,
            "seed {seed}: {tasks} tasks, {retried} retried, {split} closed ranges split"
        );
    }
}

/// A codec change at every level boundary (zstd, none, LZ4 in L0, L1, L2) with reuse: copied
/// blocks are recompressed and extents are never re-linked into a level of another codec;
/// against one codec everywhere without reuse, both read the same.
#[test]
fn codecs_per_level_read_the_same() {
    use riptide::Compression;
    for seed in 200..203 {
        let mixed = open_with(true, |o| {
            o.compression_per_level = [Compression::Zstd { level: 1 }, Compression::None, Compression::Lz4];
        });
        let plain = open_with(false, |o| o.compression_per_level = [Compression::None; 3]);
        let probe = mixed.clone();
        run_pair(seed, [mixed, plain]);
        let s = probe.stats();
        let recompressed: u64 = s.levels.iter().map(|l| l.blocks_recompressed).sum();
        assert!(recompressed > 0, "seed {seed}: no block recompressed: {:?}", s.levels);
    }
}

/// zstd dictionaries in L1 and L2 with reuse (blocks copied between extents of one dictionary,
/// recompressed into another codec), against no compression and no reuse: both read the same.
#[test]
fn zstd_dictionaries_read_the_same() {
    use riptide::{Compression, DictionaryStatus};
    let mut used = 0;
    for seed in 300..303 {
        let dict = open_with(true, |o| {
            o.compression_per_level = [
                Compression::Lz4,
                Compression::Zstd { level: 1 },
                Compression::Zstd { level: 3 },
            ];
            o.zstd_dictionary_bytes = 256;
        });
        let plain = open_with(false, |o| o.compression_per_level = [Compression::None; 3]);
        let probe = dict.clone();
        run_pair(seed, [dict, plain]);
        if matches!(
            probe.default_table().level_info().zstd_dictionary,
            DictionaryStatus::InUse { .. }
        ) {
            used += 1;
        }
    }
    // The rows share their keys' prefixes and repeat bytes: the dictionary pays in 1 KiB blocks.
    assert!(used > 0, "no seed trained a dictionary worth using");
}
