//! Frozen format fixtures: small databases written by an earlier build, committed under
//! `tests/fixtures/`, that every later build must still open and read exactly (as LevelDB's
//! and lsm-tree's fixture tests do). A change that breaks old databases fails here.
//!
//! What is frozen (`tests/fixtures/README.md` lists every file):
//!
//! - `db-v6/`: a closed database with four tables (`default`, `users`, `orders`, `empty`; a
//!   fifth, `scratch`, was dropped), LZ4 in L0 and L1 and zstd in L2, compressed and
//!   uncompressed data blocks, bloom filters and block hash indexes; `orders` has its own
//!   options in the catalog (zstd everywhere, 2 KiB blocks); table `users` has data in L0, L1
//!   and L2 at once, and every table has writes that live only in the redo log (the database
//!   was closed without a flush). Its metadata is a CHECKPOINT plus a slog with transactions
//!   after it (including a table drop). Its zstd extents store their blocks without hash index
//!   or region checksums and their index blocks compressed, each data block as a key stream
//!   and a value stream (trailer type 4).
//! - `db-v6-plain/`: the same workload without compression, bloom filters or hash indexes.
//! - `db-v5/`, `db-v5-plain/`, `db-v4/`, `db-v4-plain/`: the same two, written by the builds
//!   that wrote extent v5 (zstd blocks as one frame, type 2) and v4.
//! - `db-v5-dict/`: extent v5 with a zstd dictionary: one table of JSON-like rows compacted into
//!   a zstd L2 with `zstd_dictionary_bytes` (type-3 blocks, dictionary block, hash indexes
//!   rebuilt on read); its own small workload (`doc`, `run_dict_workload`). `db-v6-dict/`: the
//!   same as extent v6 writes it (type-5 blocks: streams compressed with the dictionary).
//! - `db-redo-v2/`: redo v2: a database copied while open after 400 durable commits (no flush),
//!   as a power cut leaves it: one segment whose records are followed by the zero-filled space
//!   kept ahead of durable commits (`run_durable_workload`).
//! - `db-v1/`, `db-v2/`, `db-v3/`, `db-v3-plain/`: the same workload written by the builds
//!   that wrote extent v1, v2 and v3 (catalog v1); this build reads those versions (and v4) but
//!   cannot write them, so these are never regenerated here (the README names the generator and
//!   the commands).
//! - `corrupt/<case>/`: one file each, laid over a copy of `db-v3/` with one flipped byte in a
//!   checksummed region (CATALOG, CURRENT, checkpoint, slog, redo segment, an extent's data
//!   block, one data-file header copy); `corrupt/extent-v1/`, `corrupt/extent-v2/`,
//!   `corrupt/extent-v4/`, `corrupt/extent-v5/` and `corrupt/extent-v6/` flip a byte of a data
//!   block of a v1 / v2 / v4 (zstd) / v5 (zstd) / v6 (zstd streams) extent, laid over `db-v1/` /
//!   `db-v2/` / `db-v4/` / `db-v5/` / `db-v6/`.
//!
//! Format versions covered: catalog v1 and v2, redo v1 and v2, data file v1, meta v1 (CURRENT, slog,
//! checkpoint) and extent v1 to v6. For the old extent versions the test also checks that
//! `inspect` reports them, and that compacting every table with this build (which writes only
//! v6 extents, copying, recompressing or decoding old blocks) keeps every key and value exact.
//!
//! Data files (`data/NNNNNN.dat`) are 2 MiB slots, mostly zeros; they are stored as
//! `NNNNNN.dat.sparse` (the non-zero byte ranges, lossless; layout in `Sparse` below) and
//! rebuilt byte for byte in the temporary copy. The data-file header's informational creation
//! time is set to a fixed value (and its CRC recomputed) so that regeneration is byte-stable.
//!
//! The expected contents are not read from the fixtures: [`workload`] is the deterministic list
//! of operations the generator ran, and [`Model`] replays it in memory (values, LSNs, the level
//! each version landed in).
//!
//! Regenerate (only when a NEW format version is added, as new fixture directories next to the
//! old ones; never to make a failing test pass — a failure means old databases no longer open):
//!
//! ```text
//! cargo test -p riptide --test format_fixtures -- --ignored regenerate
//! ```

use riptide::{inspect, Compression, Db, Error, Options, ReadOptions, RecoveryMode, TableOptions};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

// ---------------------------------------------------------------------------------------------
// The workload and its model.
// ---------------------------------------------------------------------------------------------

/// One operation of the workload. `Close` closes the database (with `flush_on_close`) and
/// reopens it, so the final redo segment holds only the writes after it.
#[derive(Clone, Debug)]
enum Step {
    Create(&'static str),
    Drop(&'static str),
    Put(&'static str, Vec<u8>, Vec<u8>),
    Del(&'static str, Vec<u8>),
    Flush(&'static str),
    /// `Table::compact`: everything down to L2.
    Compact(&'static str),
    /// `Table::compact_l0`: L0 into L1.
    CompactL0(&'static str),
    Reopen,
}

/// Tables that exist at the end, sorted (as `Db::tables` lists them).
const FINAL_TABLES: [&str; 4] = ["default", "empty", "orders", "users"];

/// Flushes of `default` that push the slog past `slog_checkpoint_bytes` (4 KiB), so that a
/// checkpoint is written and later transactions land in the live slog.
const TICKS: usize = 24;

fn user(i: usize) -> Vec<u8> {
    format!("user{i:03}").into_bytes()
}

fn order(i: usize) -> Vec<u8> {
    format!("order{i:03}").into_bytes()
}

/// A compressible value (repeated pattern: its data blocks are stored with LZ4).
fn soft(i: usize, gen: u32) -> Vec<u8> {
    format!("u{i}-g{gen}-{}", "abcd".repeat(10)).into_bytes()
}

/// An incompressible printable value (xorshift letters: its data blocks are stored as is).
fn hard(i: usize, gen: u32) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64) << 8 | u64::from(gen));
    (0..40)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[(x % 62) as usize]
        })
        .collect()
}

/// The operations the generator ran, in order. Within one flush interval each key is written
/// at most once, so every level holds exactly one known version per key.
fn workload() -> Vec<Step> {
    use Step::*;
    let mut s = vec![Create("users"), Create("orders"), Create("scratch"), Create("empty")];
    // Phase A: the base data, compacted to L2.
    for i in 0..120 {
        s.push(Put("users", user(i), soft(i, 1)));
    }
    for i in 0..90 {
        s.push(Put("orders", order(i), hard(i, 1)));
    }
    for i in 0..10 {
        s.push(Put("default", format!("config/{i}").into_bytes(), hard(i, 7)));
    }
    s.extend([Compact("users"), Compact("orders"), Compact("default")]);
    // Phase B: overwrites and tombstones over L2, moved to L1.
    for i in (0..120).step_by(3) {
        s.push(Put("users", user(i), soft(i, 2)));
    }
    for i in (1..120).step_by(9) {
        s.push(Del("users", user(i)));
    }
    for i in (0..90).step_by(4) {
        s.push(Put("orders", order(i), hard(i, 2)));
    }
    for i in (2..90).step_by(8) {
        s.push(Del("orders", order(i)));
    }
    s.extend([Flush("users"), CompactL0("users"), Flush("orders"), CompactL0("orders")]);
    // Phase C: a table that is dropped later, and enough flushes of `default` (one L0 layer
    // each) to write a checkpoint.
    for i in 0..20 {
        s.push(Put("scratch", format!("s{i:02}").into_bytes(), soft(i, 3)));
    }
    s.push(Flush("scratch"));
    for r in 0..TICKS {
        s.push(Put("default", format!("tick/{r:02}").into_bytes(), hard(r, 4)));
        s.push(Flush("default"));
    }
    // Phase D: an L0 layer of `users` over its L1 and L2, and the drop, in the live slog.
    for i in 120..140 {
        s.push(Put("users", user(i), soft(i, 3)));
    }
    for i in (2..60).step_by(3) {
        s.push(Put("users", user(i), soft(i, 3)));
    }
    for i in (62..120).step_by(6) {
        s.push(Del("users", user(i)));
    }
    s.extend([Flush("users"), Drop("scratch"), Reopen]);
    // Phase E: writes that live only in the redo log.
    for i in (0..30).step_by(7) {
        s.push(Put("users", user(i), soft(i, 4)));
    }
    for i in (90..120).step_by(11) {
        s.push(Del("users", user(i)));
    }
    for i in (1..90).step_by(20) {
        s.push(Put("orders", order(i), hard(i, 3)));
    }
    s.push(Put("default", b"config/3".to_vec(), b"redo-only".to_vec()));
    s.push(Del("default", b"config/4".to_vec()));
    s
}

/// One version: user key, LSN, value (`None` = tombstone).
type Row = (Vec<u8>, u64, Option<Vec<u8>>);

#[derive(Default, Clone, Debug)]
struct TableModel {
    mem: Vec<Row>,
    /// L0 layers, oldest first.
    l0: Vec<Vec<Row>>,
    l1: Vec<Row>,
    l2: Vec<Row>,
}

/// Sorts rows in internal-key order: user key ascending, LSN descending.
fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    rows
}

/// The newest version of each key (tombstones kept unless `purge`).
fn newest(rows: Vec<Row>, purge: bool) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for r in sorted(rows) {
        if out.last().is_some_and(|l| l.0 == r.0) {
            continue;
        }
        out.push(r);
    }
    if purge {
        out.retain(|r| r.2.is_some());
    }
    out
}

impl TableModel {
    fn all_rows(&self) -> Vec<Row> {
        let mut v = self.mem.clone();
        v.extend(self.l0.iter().flatten().cloned());
        v.extend(self.l1.iter().cloned());
        v.extend(self.l2.iter().cloned());
        v
    }

    /// The visible key/value pairs.
    fn visible(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        newest(self.all_rows(), true)
            .into_iter()
            .map(|(k, _, v)| (k, v.unwrap()))
            .collect()
    }

    /// Every user key ever written (to probe absent ones too).
    fn keys(&self) -> Vec<Vec<u8>> {
        newest(self.all_rows(), false).into_iter().map(|r| r.0).collect()
    }
}

/// The in-memory replay of [`workload`]: what every level and the redo log hold at the end.
#[derive(Default, Debug)]
struct Model {
    tables: BTreeMap<&'static str, TableModel>,
    lsn: u64,
    /// Redo records written since the last reopen (one per single write).
    redo_records: u64,
    first_redo_lsn: u64,
}

impl Model {
    fn run(steps: &[Step]) -> Model {
        let mut m = Model::default();
        m.tables.insert("default", TableModel::default());
        for s in steps {
            m.apply(s);
        }
        m
    }

    fn apply(&mut self, s: &Step) {
        match s {
            Step::Create(n) => {
                self.tables.insert(n, TableModel::default());
            }
            Step::Drop(n) => {
                self.tables.remove(n);
            }
            Step::Put(n, k, v) => self.write(n, k, Some(v.clone())),
            Step::Del(n, k) => self.write(n, k, None),
            Step::Flush(n) => {
                let t = self.tables.get_mut(n).unwrap();
                if !t.mem.is_empty() {
                    let layer = sorted(std::mem::take(&mut t.mem));
                    t.l0.push(layer);
                }
            }
            Step::Compact(n) => {
                let t = self.tables.get_mut(n).unwrap();
                let rows = t.all_rows();
                *t = TableModel {
                    l2: newest(rows, true),
                    ..Default::default()
                };
            }
            Step::CompactL0(n) => {
                let t = self.tables.get_mut(n).unwrap();
                let mut rows: Vec<Row> = t.l0.drain(..).flatten().collect();
                rows.append(&mut t.l1);
                // Tombstones stay: L2 below may hold older versions.
                t.l1 = newest(rows, false);
            }
            Step::Reopen => {
                for t in self.tables.values_mut() {
                    if !t.mem.is_empty() {
                        let layer = sorted(std::mem::take(&mut t.mem));
                        t.l0.push(layer);
                    }
                }
                self.redo_records = 0;
                self.first_redo_lsn = 0;
            }
        }
    }

    fn write(&mut self, n: &str, k: &[u8], v: Option<Vec<u8>>) {
        self.lsn += 1;
        if self.redo_records == 0 {
            self.first_redo_lsn = self.lsn;
        }
        self.redo_records += 1;
        let lsn = self.lsn;
        self.tables.get_mut(n).unwrap().mem.push((k.to_vec(), lsn, v));
    }
}

// ---------------------------------------------------------------------------------------------
// Options of the fixture databases.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Variant {
    dir: &'static str,
    /// The extent format version every extent of the fixture has.
    extent_version: u64,
    /// Codec per level.
    compression: [Compression; 3],
    bloom_bits_per_key: u32,
    block_hash_index: bool,
    /// Table `orders` is created with [`orders_options`] (catalog v2).
    table_options: bool,
}

const ZSTD1: Compression = Compression::Zstd { level: 1 };

/// The extent format version this build writes (compacted fixtures hold only these).
const WRITTEN_EXTENT_VERSION: u64 = 6;

/// The fixtures this build writes ([`regenerate`]; it refuses to overwrite fixtures of another
/// extent version).
const VARIANTS: [Variant; 2] = [
    Variant {
        dir: "db-v6",
        extent_version: 6,
        compression: [Compression::Lz4, Compression::Lz4, ZSTD1],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: true,
    },
    Variant {
        dir: "db-v6-plain",
        extent_version: 6,
        compression: [Compression::None; 3],
        bloom_bits_per_key: 0,
        block_hash_index: false,
        table_options: false,
    },
];

/// The options `orders` is created with in `db-v4` (zstd in every level, small blocks, no
/// row cache); persisted in the catalog.
fn orders_options() -> TableOptions {
    TableOptions {
        compression_per_level: Some([ZSTD1; 3]),
        block_size: Some(2048),
        row_cache: Some(false),
        ..Default::default()
    }
}

/// Fixtures written by older builds, with the same [`workload`] (`tests/fixtures/README.md`
/// names the commit and command of each). Never regenerated here: this build cannot write
/// these extent versions.
const OLD_VARIANTS: [Variant; 8] = [
    Variant {
        dir: "db-v1",
        extent_version: 1,
        compression: [Compression::Lz4; 3],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: false,
    },
    Variant {
        dir: "db-v2",
        extent_version: 2,
        compression: [Compression::Lz4; 3],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: false,
    },
    Variant {
        dir: "db-v3",
        extent_version: 3,
        compression: [Compression::Lz4; 3],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: false,
    },
    Variant {
        dir: "db-v3-plain",
        extent_version: 3,
        compression: [Compression::None; 3],
        bloom_bits_per_key: 0,
        block_hash_index: false,
        table_options: false,
    },
    Variant {
        dir: "db-v4",
        extent_version: 4,
        compression: [Compression::Lz4, Compression::Lz4, ZSTD1],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: true,
    },
    Variant {
        dir: "db-v4-plain",
        extent_version: 4,
        compression: [Compression::None; 3],
        bloom_bits_per_key: 0,
        block_hash_index: false,
        table_options: false,
    },
    Variant {
        dir: "db-v5",
        extent_version: 5,
        compression: [Compression::Lz4, Compression::Lz4, ZSTD1],
        bloom_bits_per_key: 10,
        block_hash_index: true,
        table_options: true,
    },
    Variant {
        dir: "db-v5-plain",
        extent_version: 5,
        compression: [Compression::None; 3],
        bloom_bits_per_key: 0,
        block_hash_index: false,
        table_options: false,
    },
];

/// The variant the corrupt copies are laid over (`db-v3`).
const CORRUPT_BASE: Variant = OLD_VARIANTS[2];

/// Small buffers and blocks (several data blocks and restart points per extent), no background
/// compaction (every move between levels is an explicit step), a checkpoint after 4 KiB of slog,
/// no block cache (every read goes to the file).
fn options(v: Variant) -> Options {
    Options {
        write_buffer_size: 64 << 10,
        redo_segment_size: 64 << 10,
        block_size: 1 << 10,
        block_restart_interval: 4,
        compression_per_level: v.compression,
        bloom_bits_per_key: v.bloom_bits_per_key,
        block_hash_index: v.block_hash_index,
        block_cache_size: 0,
        max_flushes: 1,
        max_compactions: 1,
        compaction_units: 1,
        level0_slowdown_layers: 1000,
        level0_stop_layers: 1000,
        level0_layer_trigger: 1000,
        level0_extents_trigger: 1000,
        level1_extents_trigger: 1000,
        level1_dynamic_trigger: false,
        slog_checkpoint_bytes: 4 << 10,
        flush_on_close: false,
        // No hole punching (the 64 kept slots are never exceeded): punches race with the
        // background flushes' allocations, which would make the generator's bytes vary.
        used_slots_per_kept_slot: 0,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Sparse data files, CRC32C, copying.
// ---------------------------------------------------------------------------------------------

/// `NNNNNN.dat.sparse`: `magic "RPTSPARS" ‖ u64 file length ‖ u64 chunk count ‖ chunk*` with
/// `chunk = u64 offset ‖ u64 length ‖ bytes`; every byte outside the chunks is zero.
const SPARSE_MAGIC: &[u8; 8] = b"RPTSPARS";

/// Zero runs at least this long are left out of a sparse file.
const SPARSE_GAP: usize = 256;

fn sparse_encode(data: &[u8]) -> Vec<u8> {
    let mut chunks: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i] == 0 {
            i += 1;
            continue;
        }
        let start = i;
        let mut zeros = 0;
        while i < data.len() && zeros < SPARSE_GAP {
            zeros = if data[i] == 0 { zeros + 1 } else { 0 };
            i += 1;
        }
        chunks.push((start, i - zeros));
    }
    let mut out = SPARSE_MAGIC.to_vec();
    out.extend((data.len() as u64).to_le_bytes());
    out.extend((chunks.len() as u64).to_le_bytes());
    for (s, e) in chunks {
        out.extend((s as u64).to_le_bytes());
        out.extend(((e - s) as u64).to_le_bytes());
        out.extend(&data[s..e]);
    }
    out
}

fn sparse_decode(src: &[u8]) -> Vec<u8> {
    let u64_at = |o: usize| u64::from_le_bytes(src[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&src[..8], SPARSE_MAGIC, "not a sparse fixture file");
    let mut out = vec![0u8; u64_at(8)];
    let mut pos = 24;
    for _ in 0..u64_at(16) {
        let (off, len) = (u64_at(pos), u64_at(pos + 8));
        out[off..off + len].copy_from_slice(&src[pos + 16..pos + 16 + len]);
        pos += 16 + len;
    }
    assert_eq!(pos, src.len(), "trailing bytes in a sparse fixture file");
    out
}

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn masked_crc(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Copies a fixture tree to `dst`, expanding `*.sparse` files.
fn materialize(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let path = e.path();
        if path.is_dir() {
            materialize(&path, &dst.join(&name));
        } else if let Some(real) = name.strip_suffix(".sparse") {
            // Written sparse: a data file is many 2 MiB slots of mostly zeros.
            let data = sparse_decode(&fs::read(&path).unwrap());
            let file = fs::File::create(dst.join(real)).unwrap();
            file.set_len(data.len() as u64).unwrap();
            for (i, page) in data.chunks(4096).enumerate() {
                if page.iter().any(|&b| b != 0) {
                    file.write_all_at(page, (i * 4096) as u64).unwrap();
                }
            }
            file.sync_all().unwrap();
        } else {
            fs::write(dst.join(&name), fs::read(&path).unwrap()).unwrap();
        }
    }
}

/// A writable copy of fixture database `name`, with the files of `corrupt/<case>` laid over it.
fn fixture_copy(name: &str, case: Option<&str>) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    materialize(&fixtures_dir().join(name), tmp.path());
    if let Some(case) = case {
        materialize(&fixtures_dir().join("corrupt").join(case), tmp.path());
    }
    tmp
}

// ---------------------------------------------------------------------------------------------
// The generator.
// ---------------------------------------------------------------------------------------------

fn run_workload(dir: &Path, v: Variant) {
    let mut db = Db::open(dir, options(v)).unwrap();
    for s in workload() {
        match s {
            Step::Create(n) => {
                if v.table_options && n == "orders" {
                    db.create_table_with(n, orders_options()).unwrap();
                } else {
                    db.create_table(n).unwrap();
                }
            }
            Step::Drop(n) => db.drop_table(n).unwrap(),
            Step::Put(n, k, val) => db.table(n).unwrap().put(&k, &val).unwrap(),
            Step::Del(n, k) => db.table(n).unwrap().delete(&k).unwrap(),
            Step::Flush(n) => db.table(n).unwrap().flush().unwrap(),
            Step::Compact(n) => db.table(n).unwrap().compact().unwrap(),
            Step::CompactL0(n) => db.table(n).unwrap().compact_l0().unwrap(),
            Step::Reopen => {
                assert_eq!(db.stats().checkpoints, 1, "the workload must write one checkpoint");
                // Background hole punching done, so the files' bytes do not depend on timing.
                db.wait_for_background_work().unwrap();
                db.close().unwrap();
                let opts = Options {
                    flush_on_close: true,
                    ..options(v)
                };
                Db::open(dir, opts).unwrap().close().unwrap();
                db = Db::open(dir, options(v)).unwrap();
            }
        }
    }
    assert!(db.background_error().is_none());
    db.wait_for_background_work().unwrap();
    db.close().unwrap();
}

/// Data-file header copies (offsets) and the creation-time field inside each.
const HEADER_COPIES: [usize; 2] = [0, 16384];
const HEADER_CRC_AT: usize = 4092;
const CREATED_AT: usize = 28;

/// Sets the informational creation time of both header copies to a fixed value.
fn normalize_data_file(data: &mut [u8]) {
    for at in HEADER_COPIES {
        let h = &mut data[at..at + 4096];
        assert_eq!(&h[..8], b"RPTDATAF");
        let stored = u32::from_le_bytes(h[HEADER_CRC_AT..].try_into().unwrap());
        assert_eq!(stored, masked_crc(&h[..HEADER_CRC_AT]), "header CRC (test's CRC32C)");
        h[CREATED_AT..CREATED_AT + 8].copy_from_slice(&1_700_000_000_000_000u64.to_le_bytes());
        let crc = masked_crc(&h[..HEADER_CRC_AT]);
        h[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Copies a database directory into fixture form (no LOCK; data files sparse and normalized).
fn freeze(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    let mut names: Vec<_> = fs::read_dir(src).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for name in names {
        let name = name.into_string().unwrap();
        let path = src.join(&name);
        if path.is_dir() {
            freeze(&path, &dst.join(&name));
        } else if name == "LOCK" || name == "WRITER" {
            // WRITER: a random mark each read-write open writes anew (views).
            continue;
        } else if name.ends_with(".dat") {
            let mut data = fs::read(&path).unwrap();
            normalize_data_file(&mut data);
            fs::write(dst.join(format!("{name}.sparse")), sparse_encode(&data)).unwrap();
        } else {
            fs::copy(&path, dst.join(&name)).unwrap();
        }
    }
}

fn read_tree(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>, base: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            read_tree(&p, out, base);
        } else {
            out.insert(p.strip_prefix(base).unwrap().to_path_buf(), fs::read(&p).unwrap());
        }
    }
}

/// The only file whose name starts with `prefix` in `dir`.
fn only_file(dir: &Path, prefix: &str) -> PathBuf {
    let v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    assert_eq!(v.len(), 1, "{prefix}* in {}: {v:?}", dir.display());
    v[0].clone()
}

/// Writes `corrupt/<case>/<rel>` = the fixture file `rel` of `db-v3` with byte `at` inverted.
fn write_corrupt(case: &str, rel: &Path, at: usize) {
    write_corrupt_of("db-v3", case, rel, at);
}

/// Writes `corrupt/<case>/<rel>` = the fixture file `rel` of fixture `db` with byte `at`
/// inverted.
fn write_corrupt_of(db: &str, case: &str, rel: &Path, at: usize) {
    let base = fixtures_dir().join(db);
    let sparse = rel.extension().is_some_and(|e| e == "dat");
    let src_rel = if sparse {
        PathBuf::from(format!("{}.sparse", rel.display()))
    } else {
        rel.to_path_buf()
    };
    let raw = fs::read(base.join(&src_rel)).unwrap();
    let mut data = if sparse { sparse_decode(&raw) } else { raw };
    data[at] ^= 0xff;
    let out = fixtures_dir().join("corrupt").join(case).join(&src_rel);
    fs::create_dir_all(out.parent().unwrap()).unwrap();
    fs::write(out, if sparse { sparse_encode(&data) } else { data }).unwrap();
}

/// Offset of the payload of the first record of type `kind` (byte 12 of a record header) in a
/// file of `24-byte header ‖ payload` records after a `header`-byte file header.
fn first_payload(data: &[u8], header: usize, kind: u8) -> usize {
    let mut off = header;
    while off + 24 <= data.len() {
        let len = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        if data[off + 12] == kind && len > 0 {
            return off + 24;
        }
        off += 24 + len;
    }
    panic!("no record of type {kind}");
}

/// Runs `generate` into a fresh directory twice, asserts both runs froze to the same bytes, and
/// writes them as fixture `name` (replacing it).
fn write_fixture(name: &str, generate: impl Fn(&Path)) {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let tmp = tempfile::tempdir().unwrap();
        generate(tmp.path());
        let frozen = tempfile::tempdir().unwrap();
        freeze(tmp.path(), frozen.path());
        let mut files = BTreeMap::new();
        read_tree(frozen.path(), &mut files, frozen.path());
        runs.push(files);
    }
    for (rel, bytes) in &runs[0] {
        let other = runs[1]
            .get(rel)
            .unwrap_or_else(|| panic!("{name}: {rel:?} only in run 1"));
        let at = bytes.iter().zip(other).position(|(a, b)| a != b);
        assert!(
            at.is_none() && bytes.len() == other.len(),
            "{name}: two runs of the generator differ in {rel:?} at byte {at:?} (lengths {} and {})",
            bytes.len(),
            other.len()
        );
    }
    assert_eq!(runs[0].len(), runs[1].len(), "{name}: two runs of the generator differ");
    let dst = fixtures_dir().join(name);
    let _ = fs::remove_dir_all(&dst);
    for (rel, bytes) in &runs[0] {
        fs::create_dir_all(dst.join(rel).parent().unwrap()).unwrap();
        fs::write(dst.join(rel), bytes).unwrap();
    }
}

/// Writes every fixture from scratch. Run only when adding a format version (see the header).
#[test]
#[ignore = "writes tests/fixtures; run by hand only when adding a new format version"]
fn regenerate() {
    for v in VARIANTS {
        assert_eq!(
            v.extent_version, WRITTEN_EXTENT_VERSION,
            "{} holds extent v{}, and this build writes v{WRITTEN_EXTENT_VERSION}: move it to \
             OLD_VARIANTS and add variants for the new version instead of overwriting it",
            v.dir, v.extent_version
        );
    }
    let root = fixtures_dir();
    for v in VARIANTS {
        write_fixture(v.dir, |dir| run_workload(dir, v));
    }

    // db-v6's first L2 extent of `users` holds zstd stream blocks: one flipped byte in block 0.
    // (`corrupt/extent-v4` and `corrupt/extent-v5`, over db-v4 and db-v5, were written by the
    // builds that wrote those extent versions.)
    let _ = fs::remove_dir_all(root.join("corrupt").join("extent-v6"));
    let (file, at) = users_l2_block0_byte(VARIANTS[0].dir);
    write_corrupt_of(VARIANTS[0].dir, "extent-v6", &file, at);

    // Corrupt copies of files of db-v3, one flipped byte each.
    // (Only the cases written here: `extent-v1` and `extent-v2` come from the old fixtures.)
    for case in [
        "catalog",
        "current",
        "checkpoint",
        "slog",
        "redo",
        "extent",
        "data-header",
    ] {
        let _ = fs::remove_dir_all(root.join("corrupt").join(case));
    }
    let db = root.join("db-v3");
    let rel = |p: PathBuf| p.strip_prefix(&db).unwrap().to_path_buf();
    // CATALOG: the first byte of the first table name (`default`).
    write_corrupt("catalog", Path::new("CATALOG"), 26);
    // CURRENT: the checkpoint number.
    write_corrupt("current", Path::new("meta/CURRENT"), 16);
    // Checkpoint: a byte inside the payload of its first ENTRIES record.
    let ckpt = only_file(&db.join("meta"), "CHECKPOINT-");
    let at = first_payload(&fs::read(&ckpt).unwrap(), 48, 2) + 3;
    write_corrupt("checkpoint", &rel(ckpt), at);
    // Slog: a byte inside the payload of its first ENTRIES record (a committed transaction).
    let slog = only_file(&db.join("meta"), "SLOG-");
    let at = first_payload(&fs::read(&slog).unwrap(), 32, 2) + 3;
    write_corrupt("slog", &rel(slog), at);
    // Redo: a byte inside the payload of the first record (more records follow it).
    let seg = only_file(&db.join("redo"), "");
    let at = first_payload(&fs::read(&seg).unwrap(), 32, 1) + 3;
    write_corrupt("redo", &rel(seg), at);
    // Extent: a byte inside data block 0 of the first L2 extent of `users`; data-file header
    // copy A: a byte of its magic (copy B alone must do).
    let tmp = fixture_copy("db-v3", None);
    let ext = extents_by_level(tmp.path())["users"][2][0].clone();
    let regions = inspect::extent_regions(&*inspect::posix(), tmp.path(), &ext).unwrap();
    let (_, path, off, len) = regions.iter().find(|r| r.0 == "data block 0").unwrap();
    let file = PathBuf::from("data").join(path.file_name().unwrap());
    write_corrupt("extent", &file, (*off + *len / 2) as usize);
    write_corrupt("data-header", &file, 1);
}

/// The byte inside data block 0 of the first L2 extent of `users` in fixture `db`.
fn users_l2_block0_byte(db: &str) -> (PathBuf, usize) {
    let tmp = fixture_copy(db, None);
    let ext = extents_by_level(tmp.path())["users"][2][0].clone();
    let regions = inspect::extent_regions(&*inspect::posix(), tmp.path(), &ext).unwrap();
    let (_, path, off, len) = regions.iter().find(|r| r.0 == "data block 0").unwrap();
    let file = PathBuf::from("data").join(path.file_name().unwrap());
    (file, (*off + *len / 2) as usize)
}

/// Writes `corrupt/extent-v1/` and `corrupt/extent-v2/`: one inverted byte in data block 0 of
/// the first L2 extent of `users` in `db-v1` / `db-v2` (the old fixtures themselves are never
/// rewritten: this build cannot write their extent versions).
#[test]
#[ignore = "writes tests/fixtures/corrupt/extent-v{1,2}; run by hand only"]
fn regenerate_old_corrupt() {
    // db-v3's own damaged extent is the `extent` case, written with the other cases.
    for v in &OLD_VARIANTS[..2] {
        let case = format!("extent-v{}", v.extent_version);
        let _ = fs::remove_dir_all(fixtures_dir().join("corrupt").join(&case));
        let (file, at) = users_l2_block0_byte(v.dir);
        write_corrupt_of(v.dir, &case, &file, at);
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the fixtures.
// ---------------------------------------------------------------------------------------------

/// `inspect::levels` parsed: table name -> level -> extent ids (`file.slot`).
fn extents_by_level(db: &Path) -> BTreeMap<String, [Vec<String>; 3]> {
    let text = inspect::levels(&*inspect::posix(), db, None).unwrap();
    let mut out: BTreeMap<String, [Vec<String>; 3]> = BTreeMap::new();
    let (mut table, mut level) = (String::new(), 0usize);
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = line.strip_prefix("table ") {
            table = rest.split(' ').next().unwrap().to_string();
            out.entry(table.clone()).or_default();
        } else if let Some(rest) = t.strip_prefix('L').filter(|_| line.starts_with("  L")) {
            level = rest[..1].parse().unwrap();
        } else if let Some(rest) = t.strip_prefix("extent ") {
            let id = rest.split(' ').next().unwrap().to_string();
            out.get_mut(&table).unwrap()[level].push(id);
        }
    }
    out
}

/// Parses `'text'` (the form inspect prints printable keys and values in).
fn unquote(s: &str) -> Vec<u8> {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or_else(|| panic!("not a quoted printable string: {s}"))
        .as_bytes()
        .to_vec()
}

/// Integer properties (`name: value` lines of its properties dump) and rows of one extent,
/// from `inspect::extent`.
fn extent_rows(db: &Path, id: &str) -> (BTreeMap<String, u64>, Vec<Row>) {
    let text = inspect::extent(&*inspect::posix(), db, id, usize::MAX).unwrap();
    let props: BTreeMap<String, u64> = text
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().trim_end_matches(',').split_once(": ")?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect();
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.contains(" => ")) {
        let (ikey, value) = line.trim().split_once(" => ").unwrap();
        let mut parts = ikey.rsplitn(3, ' ');
        let kind = parts.next().unwrap();
        let lsn: u64 = parts.next().unwrap().strip_prefix('@').unwrap().parse().unwrap();
        let key = unquote(parts.next().unwrap());
        let value = match kind {
            "Put" => Some(unquote(value)),
            "Delete" => None,
            k => panic!("unknown kind {k}"),
        };
        rows.push((key, lsn, value));
    }
    (props, rows)
}

/// Key/value pairs in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn scan(db: &Db, table: &str) -> Result<Pairs, Error> {
    db.table(table)?.iter(&ReadOptions::default())?.collect()
}

/// Opens a pristine copy of fixture `v` and checks every byte of data it should hold.
fn check_fixture(v: Variant) {
    let model = Model::run(&workload());
    let tmp = fixture_copy(v.dir, None);
    let dir = tmp.path();
    let fs_ = inspect::posix();

    // Offline views first: nothing has been rewritten by an open yet.
    let report = inspect::verify(&*fs_, dir).unwrap();
    assert!(report.ok(), "{}: verify: {:?}", v.dir, report.problems);
    let by_level = extents_by_level(dir);
    let names: Vec<&str> = by_level.keys().map(String::as_str).collect();
    assert_eq!(names, FINAL_TABLES, "{}: tables in CATALOG", v.dir);
    let mut extents = 0;
    let (mut blocks, mut lz4_blocks) = (0, 0);
    for (name, t) in &model.tables {
        let levels = &by_level[*name];
        let want: [Vec<Row>; 3] = [
            sorted(t.l0.iter().flatten().cloned().collect()),
            t.l1.clone(),
            t.l2.clone(),
        ];
        for (level, ids) in levels.iter().enumerate() {
            let mut got = Vec::new();
            for id in ids {
                let (props, rows) = extent_rows(dir, id);
                assert_eq!(
                    props["format_version"], v.extent_version,
                    "{}: extent {id} format version",
                    v.dir
                );
                assert_eq!(props["entries"], rows.len() as u64, "{}: extent {id}", v.dir);
                let bloom = u64::from(v.bloom_bits_per_key);
                assert_eq!(props["bloom_bits_per_key"], bloom, "{}: extent {id}", v.dir);
                assert_eq!(props["filter_size"] > 0, bloom > 0, "{}: extent {id}", v.dir);
                blocks += props["data_blocks"];
                lz4_blocks += props["compressed_blocks"];
                got.extend(rows);
                extents += 1;
            }
            // From the build that zeroes LSNs in L2 on, a merged Put older than every snapshot
            // may carry LSN 0 there: it stands for the model's version of the same key and value.
            if level == 2 {
                for row in &mut got {
                    if row.1 == 0 {
                        if let Some(w) = want[2].iter().find(|w| w.0 == row.0 && w.2 == row.2) {
                            row.1 = w.1;
                        }
                    }
                }
            }
            assert_eq!(sorted(got), want[level], "{}: table {name} L{level} rows", v.dir);
        }
    }
    assert_eq!(report.extents, extents, "{}: extents verified", v.dir);
    // db-v3 and db-v4 hold compressed blocks (`users`) and stored ones (`orders`,
    // `default`); plain none.
    if v.compression[0] == Compression::None {
        assert_eq!(lz4_blocks, 0, "{}", v.dir);
    } else {
        assert!(
            0 < lz4_blocks && lz4_blocks < blocks,
            "{}: {lz4_blocks}/{blocks}",
            v.dir
        );
    }
    // From v4 on each extent records the codec of its level (of its table's options).
    if v.extent_version >= 4 {
        for (name, levels) in &by_level {
            for (level, ids) in levels.iter().enumerate() {
                let codec = if v.table_options && name == "orders" {
                    ZSTD1
                } else {
                    v.compression[level]
                };
                let want = match codec {
                    Compression::None => 0,
                    Compression::Lz4 => 1,
                    // One frame per block before v6, key and value streams from v6.
                    Compression::Zstd { .. } if v.extent_version >= 6 => 4,
                    Compression::Zstd { .. } => 2,
                };
                for id in ids {
                    let (props, _) = extent_rows(dir, id);
                    assert_eq!(props["compression"], want, "{}: {name} L{level} extent {id}", v.dir);
                }
            }
        }
        let text = inspect::levels(&*fs_, dir, Some("orders")).unwrap();
        assert_eq!(
            text.contains("option compression_per_level = zstd:1,zstd:1,zstd:1"),
            v.table_options,
            "{text}"
        );
    }
    // Every level of `users` holds data.
    assert!(
        by_level["users"].iter().all(|l| !l.is_empty()),
        "{}: {by_level:?}",
        v.dir
    );
    // The redo log: one segment holding exactly the writes after the reopen.
    assert_eq!(report.redo_records, model.redo_records, "{}: redo records", v.dir);
    let redo = inspect::redo(&*fs_, dir).unwrap();
    assert_eq!(redo.lines().count(), 1, "{}: {redo}", v.dir);
    let range = format!(
        "{} records, {} ops, LSN {}..{}",
        model.redo_records, model.redo_records, model.first_redo_lsn, model.lsn
    );
    assert!(
        redo.contains(&range) && !redo.contains("damage"),
        "{}: {redo}\nwant {range}",
        v.dir
    );
    // The metadata: a checkpoint and a slog with transactions after it.
    let slog = inspect::slog(&*fs_, dir).unwrap();
    let first = slog.lines().next().unwrap();
    let nums: Vec<u64> = first.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(first.starts_with("CURRENT: checkpoint") && nums.len() == 2, "{slog}");
    assert!(nums[0] > 0 && nums[1] >= nums[0], "{}: {first}", v.dir);
    assert!(
        slog.lines().count() > 3,
        "{}: the slog holds transactions:\n{slog}",
        v.dir
    );
    assert!(dir.join(format!("meta/CHECKPOINT-{:06}", nums[0])).exists());
    assert!(dir.join(format!("meta/SLOG-{:06}", nums[1])).exists());

    // Now open it (recovery replays the redo log) and read everything.
    let db = Db::open(dir, options(v)).unwrap();
    assert_eq!(db.tables(), FINAL_TABLES, "{}: Db::tables", v.dir);
    assert!(matches!(db.table("scratch"), Err(Error::TableNotFound(_))));
    for (name, t) in &model.tables {
        let want = t.visible();
        let pairs: Pairs = want.clone().into_iter().collect();
        assert_eq!(scan(&db, name).unwrap(), pairs, "{}: table {name} scan", v.dir);
        let table = db.table(name).unwrap();
        let mut back: Pairs = table
            .iter(&ReadOptions::default())
            .unwrap()
            .rev()
            .collect::<Result<_, _>>()
            .unwrap();
        back.reverse();
        assert_eq!(back, pairs, "{}: table {name} reverse scan", v.dir);
        for k in t.keys() {
            assert_eq!(
                table.get(&k).unwrap(),
                want.get(&k).cloned(),
                "{}: {name} get {k:?}",
                v.dir
            );
        }
        let info = table.level_info();
        let l0: Vec<usize> = t.l0.iter().map(Vec::len).collect();
        assert_eq!(info.l0_layers.len(), l0.len(), "{}: {name} L0 layers", v.dir);
        let entries = [l0.iter().sum::<usize>(), t.l1.len(), t.l2.len()].map(|n| n as u64);
        assert_eq!(info.entries, entries, "{}: {name} entries per level", v.dir);
    }
    db.close().unwrap();
}

#[test]
fn db_v6_reads_exactly() {
    check_fixture(VARIANTS[0]);
}

#[test]
fn db_v6_plain_reads_exactly() {
    check_fixture(VARIANTS[1]);
}

#[test]
fn db_v6_keeps_table_options() {
    check_table_options(VARIANTS[0]);
}

#[test]
fn db_v5_reads_exactly() {
    check_fixture(OLD_VARIANTS[6]);
}

#[test]
fn db_v5_plain_reads_exactly() {
    check_fixture(OLD_VARIANTS[7]);
}

#[test]
fn db_v5_keeps_table_options() {
    check_table_options(OLD_VARIANTS[6]);
}

/// db-v5's zstd L2 holds one-frame blocks (codec 2): into this build's L2 (codec 4) they are
/// recompressed as two streams.
#[test]
fn db_v5_compacts_to_current_exactly() {
    check_compacted(OLD_VARIANTS[6]);
}

#[test]
fn db_v4_reads_exactly() {
    check_fixture(OLD_VARIANTS[4]);
}

#[test]
fn db_v4_plain_reads_exactly() {
    check_fixture(OLD_VARIANTS[5]);
}

#[test]
fn db_v4_keeps_table_options() {
    check_table_options(OLD_VARIANTS[4]);
}

/// Fixture `v`'s table `orders` has its own options, `users` none.
fn check_table_options(v: Variant) {
    let tmp = fixture_copy(v.dir, None);
    let db = Db::open(tmp.path(), options(v)).unwrap();
    assert_eq!(db.table("orders").unwrap().options(), &orders_options());
    assert!(db.table("users").unwrap().options().is_default());
    db.close().unwrap();
}

#[test]
fn db_v1_reads_exactly() {
    check_fixture(OLD_VARIANTS[0]);
}

#[test]
fn db_v2_reads_exactly() {
    check_fixture(OLD_VARIANTS[1]);
}

#[test]
fn db_v3_reads_exactly() {
    check_fixture(OLD_VARIANTS[2]);
}

#[test]
fn db_v3_plain_reads_exactly() {
    check_fixture(OLD_VARIANTS[3]);
}

#[test]
fn db_v1_compacts_to_current_exactly() {
    check_compacted(OLD_VARIANTS[0]);
}

#[test]
fn db_v2_compacts_to_current_exactly() {
    check_compacted(OLD_VARIANTS[1]);
}

/// With this build's default codecs: L2 is zstd, so the old LZ4 blocks copied into L2 are
/// recompressed.
#[test]
fn db_v3_compacts_to_current_exactly() {
    check_compacted(Variant {
        compression: riptide::DEFAULT_COMPRESSION_PER_LEVEL,
        ..OLD_VARIANTS[2]
    });
}

/// Opens a copy of old fixture `v`, compacts every table with this build (old blocks are
/// copied, recompressed or rewritten into current extents), and checks the contents are still
/// exact, before and after a reopen, that every extent left is of the current version and
/// that verify finds no problem.
fn check_compacted(v: Variant) {
    let model = Model::run(&workload());
    let tmp = fixture_copy(v.dir, None);
    let dir = tmp.path();
    let assert_exact = |db: &Db, when: &str| {
        assert_eq!(db.tables(), FINAL_TABLES, "{} {when}: Db::tables", v.dir);
        for (name, t) in &model.tables {
            let want = t.visible();
            let pairs: Pairs = want.clone().into_iter().collect();
            assert_eq!(scan(db, name).unwrap(), pairs, "{} {when}: table {name} scan", v.dir);
            let table = db.table(name).unwrap();
            for k in t.keys() {
                let got = table.get(&k).unwrap();
                assert_eq!(got, want.get(&k).cloned(), "{} {when}: {name} get {k:?}", v.dir);
            }
        }
    };

    // Half-way first: `users`' L0 into its (old) L1, so a compaction output mixes new rows with
    // blocks of old extents; then everything to L2.
    let db = Db::open(dir, options(v)).unwrap();
    db.table("users").unwrap().compact_l0().unwrap();
    assert_exact(&db, "after compact_l0");
    for name in FINAL_TABLES {
        db.table(name).unwrap().compact().unwrap();
    }
    assert_exact(&db, "after compact");
    for (name, t) in &model.tables {
        let info = db.table(name).unwrap().level_info();
        let live = t.visible().len() as u64;
        assert_eq!(info.entries, [0, 0, live], "{}: {name} entries per level", v.dir);
    }
    // The old extents are LZ4; into a zstd L2 their blocks are merged, not copied or
    // re-linked (so their rows get LSN 0 there).
    let l2 = db.stats().levels[2];
    if matches!(v.compression[2], Compression::Zstd { .. }) {
        assert!(l2.lsns_zeroed > 0 && l2.blocks_reused == 0, "{}: {l2:?}", v.dir);
    }
    db.close().unwrap();

    // Offline: only current extents are left, and they verify.
    let report = inspect::verify(&*inspect::posix(), dir).unwrap();
    assert!(report.ok(), "{}: verify after compaction: {:?}", v.dir, report.problems);
    let mut extents = 0;
    for (name, levels) in extents_by_level(dir) {
        for id in levels.iter().flatten() {
            let (props, _) = extent_rows(dir, id);
            assert_eq!(
                props["format_version"], WRITTEN_EXTENT_VERSION,
                "{}: {name} extent {id}",
                v.dir
            );
            extents += 1;
        }
    }
    assert!(extents > 0 && report.extents == extents, "{}: {extents} extents", v.dir);

    let db = Db::open(dir, options(v)).unwrap();
    assert_exact(&db, "after reopen");
    db.close().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Corrupt copies.
// ---------------------------------------------------------------------------------------------

/// Opens `db-v3` with `corrupt/<case>` laid over it in `mode`.
fn open_corrupt(case: &str, mode: RecoveryMode) -> (tempfile::TempDir, Result<Db, Error>) {
    let tmp = fixture_copy(CORRUPT_BASE.dir, Some(case));
    let opts = Options {
        recovery_mode: mode,
        ..options(CORRUPT_BASE)
    };
    let db = Db::open(tmp.path(), opts);
    (tmp, db)
}

/// Asserts `r` is `Error::Corruption` in file `file` (relative to the database) at `offset`.
fn assert_corruption<T: std::fmt::Debug>(r: Result<T, Error>, db: &Path, file: &str, offset: u64) {
    match r {
        Err(Error::Corruption {
            path,
            offset: o,
            reason,
        }) => {
            assert_eq!(path, db.join(file), "corruption reported in the wrong file: {reason}");
            assert_eq!(o, offset, "corruption in {file} at the wrong offset: {reason}");
        }
        other => panic!("want Error::Corruption in {file} at {offset}, got {other:?}"),
    }
}

/// The model of the fixture without the writes that live only in the redo log.
fn model_before_redo() -> Model {
    let steps = workload();
    let reopen = steps.iter().position(|s| matches!(s, Step::Reopen)).unwrap();
    Model::run(&steps[..=reopen])
}

/// Every table of `db` reads exactly as `model` says.
fn assert_reads(db: &Db, model: &Model) {
    for (name, t) in &model.tables {
        let want: Pairs = t.visible().into_iter().collect();
        assert_eq!(scan(db, name).unwrap(), want, "table {name}");
    }
}

#[test]
fn corrupt_catalog_fails_open() {
    for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::PointInTime] {
        let (tmp, db) = open_corrupt("catalog", mode);
        assert_corruption(db, tmp.path(), "CATALOG", CATALOG_CRC_AT);
    }
}

#[test]
fn corrupt_current_fails_open() {
    let (tmp, db) = open_corrupt("current", RecoveryMode::default());
    assert_corruption(db, tmp.path(), "meta/CURRENT", CURRENT_CRC_AT);
}

#[test]
fn corrupt_checkpoint_fails_open() {
    for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::PointInTime] {
        let (tmp, db) = open_corrupt("checkpoint", mode);
        assert_corruption(db, tmp.path(), "meta/CHECKPOINT-000003", CHECKPOINT_DAMAGED_RECORD);
    }
}

#[test]
fn corrupt_slog_fails_open() {
    for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::PointInTime] {
        let (tmp, db) = open_corrupt("slog", mode);
        assert_corruption(db, tmp.path(), "meta/SLOG-000005", SLOG_DAMAGED_RECORD);
    }
}

#[test]
fn corrupt_redo_fails_open_or_recovers_a_prefix() {
    // Damage in a record followed by others is never a torn tail.
    for mode in [RecoveryMode::TolerateCorruptedTail, RecoveryMode::AbsoluteConsistency] {
        let (tmp, db) = open_corrupt("redo", mode);
        assert_corruption(db, tmp.path(), "redo/000001.log", REDO_DAMAGED_RECORD);
    }
    // PointInTime keeps the records before the damage: here none of the redo-only writes.
    let (_tmp, db) = open_corrupt("redo", RecoveryMode::PointInTime);
    let db = db.unwrap();
    assert_reads(&db, &model_before_redo());
    db.close().unwrap();
}

#[test]
fn corrupt_extent_block_is_reported_never_returned() {
    check_corrupt_extent(CORRUPT_BASE, "extent", EXTENT_DAMAGED_BLOCK);
}

/// A damaged zstd block (db-v4's L2) is a corruption error, never wrong data.
#[test]
fn corrupt_v4_zstd_extent_block_is_reported_never_returned() {
    check_corrupt_zstd_extent(OLD_VARIANTS[4], "extent-v4");
}

/// The same in db-v5 (blocks stored without hash index, compressed index block).
#[test]
fn corrupt_v5_zstd_extent_block_is_reported_never_returned() {
    check_corrupt_zstd_extent(OLD_VARIANTS[6], "extent-v5");
}

/// The same in db-v6 (blocks stored as a key stream and a value stream).
#[test]
fn corrupt_v6_zstd_extent_block_is_reported_never_returned() {
    check_corrupt_zstd_extent(VARIANTS[0], "extent-v6");
}

/// `corrupt/<case>` flips a byte in data block 0 of `users`' first L2 extent in fixture `v`.
fn check_corrupt_zstd_extent(v: Variant, case: &str) {
    let tmp = fixture_copy(v.dir, None);
    let ext = extents_by_level(tmp.path())["users"][2][0].clone();
    let regions = inspect::extent_regions(&*inspect::posix(), tmp.path(), &ext).unwrap();
    let (_, _, block0, _) = regions.iter().find(|r| r.0 == "data block 0").unwrap();
    check_corrupt_extent(v, case, *block0);
}

#[test]
fn corrupt_v1_extent_block_is_reported_never_returned() {
    check_corrupt_extent(OLD_VARIANTS[0], "extent-v1", EXTENT_DAMAGED_BLOCK);
}

#[test]
fn corrupt_v2_extent_block_is_reported_never_returned() {
    check_corrupt_extent(OLD_VARIANTS[1], "extent-v2", EXTENT_DAMAGED_BLOCK);
}

/// Fixture `v` with `corrupt/<case>` (one inverted byte in data block 0 of the `users` L2
/// extent, which starts at `block`): verify names the block, every read of the other tables
/// is exact, reads of `users` return the right data or `Error::Corruption` at the block.
fn check_corrupt_extent(v: Variant, case: &str, block: u64) {
    let model = Model::run(&workload());
    let tmp = fixture_copy(v.dir, Some(case));
    let report = inspect::verify(&*inspect::posix(), tmp.path()).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains(&format!("at offset {block}")),
        "{:?}",
        report.problems
    );

    let db = Db::open(tmp.path(), options(v)).unwrap();
    let check = |r: Result<Pairs, Error>| assert_corruption(r, tmp.path(), "data/000001.dat", block);
    // Tables whose extents are intact read exactly.
    for name in ["default", "orders", "empty"] {
        let want: Pairs = model.tables[name].visible().into_iter().collect();
        assert_eq!(scan(&db, name).unwrap(), want, "table {name}");
    }
    // `users`: the scan stops with the corruption, after a correct prefix.
    let users = &model.tables["users"];
    let want = users.visible();
    let mut it = db.table("users").unwrap().iter(&ReadOptions::default()).unwrap();
    let mut seen = Vec::new();
    let err = loop {
        match it.next() {
            Some(Ok(kv)) => seen.push(kv),
            Some(Err(e)) => break Err(e),
            None => break Ok(Vec::new()),
        }
    };
    check(err);
    let pairs: Pairs = want.clone().into_iter().collect();
    assert_eq!(
        seen[..],
        pairs[..seen.len()],
        "the scan returned wrong data before the error"
    );
    // Point reads: the right value or the corruption, never a wrong value; some must fail.
    let table = db.table("users").unwrap();
    let mut failed = 0;
    for k in users.keys() {
        match table.get(&k) {
            Ok(got) => assert_eq!(got, want.get(&k).cloned(), "{}: get {k:?}", v.dir),
            Err(e) => {
                check(Err(e));
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "no point read touched the damaged block");
    db.close().unwrap();
}

#[test]
fn corrupt_data_header_copy_is_survived() {
    // One damaged header copy: the other is enough (format.md, "Data file header").
    let (tmp, db) = open_corrupt("data-header", RecoveryMode::default());
    let db = db.unwrap();
    assert_reads(&db, &Model::run(&workload()));
    db.close().unwrap();
    let report = inspect::verify(&*inspect::posix(), tmp.path()).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].contains("000001.dat"), "{:?}", report.problems);
}

/// Where each corrupt copy's damage must be reported (offsets in the fixture files, frozen
/// with them; format.md says which structure each error names).
/// CATALOG: its CRC field (the file is 71 bytes; the CRC is the last 4).
const CATALOG_CRC_AT: u64 = 67;
/// CURRENT: the file (36 bytes, one CRC).
const CURRENT_CRC_AT: u64 = 0;
/// Checkpoint: its first record, right after the 48-byte header.
const CHECKPOINT_DAMAGED_RECORD: u64 = 48;
/// Slog: the ENTRIES record after the BEGIN record (32-byte header + 24-byte BEGIN).
const SLOG_DAMAGED_RECORD: u64 = 56;
/// Redo segment: its first record, right after the 32-byte segment header.
const REDO_DAMAGED_RECORD: u64 = 32;
/// Extent 1.2 (the L2 extent of `users`): data block 0 starts at slot 2, 2 x 2 MiB.
const EXTENT_DAMAGED_BLOCK: u64 = 2 * (2 << 20);

// ---------------------------------------------------------------------------------------------
// `db-v5-dict`: an extent v5 database whose L2 extents hold a zstd dictionary (type-3 blocks).
// ---------------------------------------------------------------------------------------------

/// Rows of table `docs` in `db-v5-dict`: JSON-like values sharing their field names, so the
/// table's compaction keeps the dictionary it trains.
fn doc(i: usize) -> (Vec<u8>, Vec<u8>) {
    const CITIES: [&str; 5] = ["Hangzhou", "Shanghai", "Beijing", "Shenzhen", "Chengdu"];
    const STATES: [&str; 4] = ["paid", "shipped", "delivered", "refunded"];
    let v = format!(
        "{{\"order_id\":{},\"user\":\"user{}\",\"city\":\"{}\",\"status\":\"{}\",\"sku\":\"SKU-{:06}\"}}",
        1_000_000 + i,
        (i * 7919) % 10_000,
        CITIES[(i * 31) % CITIES.len()],
        STATES[(i * 17) % STATES.len()],
        (i * 104_729) % 100_000,
    );
    (format!("doc{i:05}").into_bytes(), v.into_bytes())
}

const DOCS: usize = 3000;

/// Options of `db-v5-dict`: the fixtures' options (zstd level 1 in L2) with 1 KiB
/// dictionaries and a memtable that holds every row.
fn dict_options() -> Options {
    Options {
        zstd_dictionary_bytes: 1024,
        // Every row in one memtable, flushed by an explicit step: no background flush whose
        // timing would move extents between runs of the generator.
        write_buffer_size: 4 << 20,
        ..options(VARIANTS[0])
    }
}

/// Writes `db-v5-dict` into `dir`: table `docs` filled and compacted into L2, closed.
fn run_dict_workload(dir: &Path) {
    let db = Db::open(dir, dict_options()).unwrap();
    let t = db.create_table("docs").unwrap();
    for i in 0..DOCS {
        let (k, v) = doc(i);
        t.put(&k, &v).unwrap();
    }
    t.flush().unwrap();
    t.compact().unwrap();
    assert!(
        matches!(t.level_info().zstd_dictionary, riptide::DictionaryStatus::InUse { .. }),
        "{:?}",
        t.level_info().zstd_dictionary
    );
    db.wait_for_background_work().unwrap();
    db.close().unwrap();
}

/// Writes `tests/fixtures/db-v6-dict` (`db-v5-dict` was written so by the build that wrote
/// extent v5). Run only to add a fixture of a new extent version (see the header).
#[test]
#[ignore = "writes tests/fixtures/db-v6-dict; run by hand only when adding it"]
fn regenerate_dict() {
    write_fixture("db-v6-dict", run_dict_workload);
}

/// `db-v5-dict`: its L2 extents are v5 with type-3 blocks (one frame with the dictionary).
#[test]
fn db_v5_dict_reads_exactly_and_keeps_its_dictionary() {
    check_dict_fixture("db-v5-dict", 5, 3);
}

/// `db-v6-dict`: its L2 extents are v6 with type-5 blocks (key and value streams, both with
/// the dictionary).
#[test]
fn db_v6_dict_reads_exactly_and_keeps_its_dictionary() {
    check_dict_fixture("db-v6-dict", 6, 5);
}

/// Fixture `dir` reads exactly; its L2 extents are extent `version` of codec `codec` with a
/// dictionary block; a compaction after the reopen takes the same dictionary back from them
/// (blocks of the current codec are then copied, not recompressed).
fn check_dict_fixture(dir: &str, version: u64, codec: u64) {
    let tmp = fixture_copy(dir, None);
    let want: Pairs = (0..DOCS).map(doc).collect();
    let l2 = extents_by_level(tmp.path())["docs"][2].clone();
    assert!(!l2.is_empty());
    for id in &l2 {
        // Properties only (the rows' values are too long for `extent_rows`' parser).
        let text = inspect::extent(&*inspect::posix(), tmp.path(), id, 0).unwrap();
        for want in [
            format!("format_version: {version},"),
            format!("compression: {codec},"),
            "hash_index_on_read: true,".into(),
            "zstd dictionary: ".into(),
        ] {
            assert!(text.contains(&want), "extent {id} lacks {want:?}:\n{text}");
        }
    }
    assert!(inspect::verify(&*inspect::posix(), tmp.path()).unwrap().ok());
    let db = Db::open(tmp.path(), dict_options()).unwrap();
    assert_eq!(scan(&db, "docs").unwrap(), want);
    let t = db.table("docs").unwrap();
    for i in (0..DOCS).step_by(97) {
        assert_eq!(t.get(&doc(i).0).unwrap(), Some(doc(i).1));
    }
    // One new row and a full compaction: the dictionary comes from the fixture's extents, so
    // no block of this build's codec (5) is recompressed; blocks of an older one (3: one
    // frame) are merged into L2 (rows rewritten) as streams with the same dictionary.
    t.put(b"doc99999", b"{}").unwrap();
    t.compact().unwrap();
    let status = t.level_info().zstd_dictionary;
    let riptide::DictionaryStatus::InUse { id, .. } = status else {
        panic!("{dir}: no dictionary after the compaction: {status:?}");
    };
    let l2 = db.stats().levels[2];
    if codec == 5 {
        assert_eq!(l2.blocks_recompressed, 0, "{dir}: {l2:?}");
    }
    db.close().unwrap();
    let after = extents_by_level(tmp.path())["docs"][2].clone();
    for ext in &after {
        let text = inspect::extent(&*inspect::posix(), tmp.path(), ext, 0).unwrap();
        assert!(
            text.contains("compression: 5,"),
            "{dir}: extent {ext} after the compaction:\n{text}"
        );
        assert!(
            text.contains(&format!("{id:016x}")),
            "{dir}: extent {ext} lost dictionary {id:016x}:\n{text}"
        );
    }
    // Read without any dictionary option, the extents still decode.
    let db = Db::open(tmp.path(), options(VARIANTS[0])).unwrap();
    let mut want = want;
    want.push((b"doc99999".to_vec(), b"{}".to_vec()));
    assert_eq!(scan(&db, "docs").unwrap(), want);
    db.close().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Redo v2: a segment zero-filled ahead of durable commits, as a crash leaves it.
// ---------------------------------------------------------------------------------------------

/// Rows of `db-redo-v2`: durable single-row commits, most to `default`, every 7th a delete.
const DURABLE_COMMITS: usize = 400;

fn durable_row(i: usize) -> (Vec<u8>, Vec<u8>) {
    (
        format!("durable/{i:04}").into_bytes(),
        format!("value {i} {}", "r".repeat(i % 37)).into_bytes(),
    )
}

/// What `db-redo-v2` holds after replay: puts of [`durable_row`], each 7th key then deleted.
fn durable_rows() -> Pairs {
    (0..DURABLE_COMMITS).filter(|i| i % 7 != 6).map(durable_row).collect()
}

/// Opens a database, commits [`DURABLE_COMMITS`] rows with `sync` (and deletes every 7th), then
/// copies its directory while it is still open, as a power cut would leave it: the redo
/// segment ends in the zero-filled space ahead of its records.
fn run_durable_workload(dir: &Path) {
    let live = tempfile::tempdir().unwrap();
    let opts = Options {
        flush_on_close: false,
        ..Options::default()
    };
    let db = Db::open(live.path(), opts).unwrap();
    let t = db.default_table();
    let sync = riptide::WriteOptions {
        sync: true,
        ..Default::default()
    };
    for i in 0..DURABLE_COMMITS {
        let (k, v) = durable_row(i);
        t.put_opt(&k, &v, &sync).unwrap();
        if i % 7 == 6 {
            t.delete_opt(&k, &sync).unwrap();
        }
    }
    copy_tree(live.path(), dir);
    db.close().unwrap();
}

fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if e.path().is_dir() {
            copy_tree(&e.path(), &dst.join(&name));
        } else if name != "LOCK" && name != "WRITER" {
            fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
}

/// Writes `tests/fixtures/db-redo-v2`. Run only to add it (see the header).
#[test]
#[ignore = "writes tests/fixtures/db-redo-v2; run by hand only when adding it"]
fn regenerate_redo_v2() {
    write_fixture("db-redo-v2", run_durable_workload);
}

/// `db-redo-v2` replays every durable commit from a v2 segment that ends in zeros, in every
/// recovery mode, and the open cuts the zeros.
#[test]
fn db_redo_v2_replays_its_zero_filled_segment() {
    for mode in [
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::TolerateCorruptedTail,
        RecoveryMode::PointInTime,
    ] {
        let tmp = fixture_copy("db-redo-v2", None);
        let seg = only_file(&tmp.path().join("redo"), "");
        let data = fs::read(&seg).unwrap();
        assert_eq!(u32::from_le_bytes(data[8..12].try_into().unwrap()), 2, "redo v2");
        assert_eq!(*data.last().unwrap(), 0, "the segment ends in zero-filled space");
        assert!(data.len() >= 1 << 20, "{} bytes", data.len());
        let opts = Options {
            recovery_mode: mode,
            ..Options::default()
        };
        let db = Db::open(tmp.path(), opts).unwrap();
        assert_eq!(scan(&db, "default").unwrap(), durable_rows(), "{mode:?}");
        db.close().unwrap();
        let db = Db::open(tmp.path(), Options::default()).unwrap();
        assert_eq!(scan(&db, "default").unwrap(), durable_rows(), "{mode:?}, reopened");
        db.close().unwrap();
    }
}
