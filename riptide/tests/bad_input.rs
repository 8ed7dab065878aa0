//! Bad input a new user can give the engine: extreme option values, contradictory write
//! options, an empty path, handles of another instance, absurd table names. Each gets a clear
//! typed error (or works), never a hang, a panic, an abort, or a lost acknowledged write.

use riptide::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it does not finish within `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: still running after {secs} s (hung)"))
}

/// Opens with `opts`, writes, reads, flushes and closes. `Ok` if everything worked; the open
/// error if the options were refused.
fn exercise(opts: Options) -> Result<(), Error> {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts)?;
    let t = db.default_table();
    for i in 0..200u32 {
        t.put(format!("key{i:05}").as_bytes(), &[b'v'; 100]).unwrap();
    }
    assert_eq!(t.get(b"key00007").unwrap(), Some(vec![b'v'; 100]));
    db.flush().unwrap();
    assert_eq!(t.get(b"key00199").unwrap(), Some(vec![b'v'; 100]));
    assert_eq!(t.iter(&ReadOptions::default()).unwrap().count(), 200);
    db.close().unwrap();
    Ok(())
}

#[test]
fn zero_pending_compaction_bytes_mean_no_limit() {
    // Was: the first put blocked forever (every write "stopped" at 0 bytes pending).
    let opts = Options {
        pending_compaction_slowdown_bytes: 0,
        pending_compaction_stop_bytes: 0,
        ..Options::default()
    };
    within(30, "put with pending_compaction_stop_bytes = 0", move || exercise(opts)).unwrap();
    let stop_only = Options {
        pending_compaction_stop_bytes: 0,
        ..Options::default()
    };
    within(30, "put with only the stop limit off", move || exercise(stop_only)).unwrap();
}

/// Every size and count option at its largest value: refused with `InvalidOption`, or works.
/// Never an abort (an allocation of the whole capacity up front), a panic or a hang.
#[test]
fn no_option_value_aborts_the_process() {
    type Set = fn(&mut Options);
    let cases: Vec<(&str, Set)> = vec![
        ("row_cache_size", |o| o.row_cache_size = usize::MAX),
        ("block_cache_size", |o| o.block_cache_size = usize::MAX),
        ("table_cache_size", |o| o.table_cache_size = usize::MAX),
        ("write_buffer_size", |o| o.write_buffer_size = usize::MAX),
        ("max_group_size", |o| o.max_group_size = usize::MAX),
        ("max_group_bytes", |o| o.max_group_bytes = usize::MAX),
        ("redo_segment_size", |o| o.redo_segment_size = u64::MAX),
        ("write_queues", |o| o.write_queues = usize::MAX),
        ("parallel_insert_helpers", |o| o.parallel_insert_helpers = usize::MAX),
        ("write_wait_spin_micros", |o| o.write_wait_spin_micros = u64::MAX),
        ("write_lock_spin_nanos", |o| o.write_lock_spin_nanos = u64::MAX),
        ("max_flushes", |o| o.max_flushes = usize::MAX),
        ("max_compactions", |o| o.max_compactions = usize::MAX),
        ("compaction_units", |o| o.compaction_units = usize::MAX),
        ("compaction_task_extents", |o| o.compaction_task_extents = usize::MAX),
        ("compaction_prefetch", |o| o.compaction_prefetch = usize::MAX),
        ("compaction_piece_bytes", |o| o.compaction_piece_bytes = u64::MAX),
        ("compaction_unit_reject_every", |o| {
            o.compaction_unit_reject_every = u64::MAX
        }),
        ("slog_checkpoint_bytes", |o| o.slog_checkpoint_bytes = u64::MAX),
        ("extents_per_file", |o| o.extents_per_file = u32::MAX),
        ("free_slots_kept", |o| o.free_slots_kept = u32::MAX),
        ("used_slots_per_kept_slot", |o| o.used_slots_per_kept_slot = u32::MAX),
        ("block_size", |o| o.block_size = usize::MAX),
        ("block_restart_interval", |o| o.block_restart_interval = usize::MAX),
        ("bloom_bits_per_key", |o| o.bloom_bits_per_key = u32::MAX),
        ("compression_per_level", |o| {
            o.compression_per_level = [riptide::Compression::Zstd { level: i32::MAX }; 3]
        }),
        ("compression_per_level", |o| {
            o.compression_per_level[2] = riptide::Compression::Zstd { level: i32::MIN }
        }),
        ("slowdown_delay_micros", |o| o.slowdown_delay_micros = u64::MAX),
        ("immutable_slowdown_trigger", |o| {
            o.immutable_slowdown_trigger = usize::MAX;
            o.immutable_stop_trigger = usize::MAX;
        }),
        ("level0_slowdown_layers", |o| {
            o.level0_slowdown_layers = usize::MAX;
            o.level0_stop_layers = usize::MAX;
        }),
        ("level0_layer_trigger", |o| o.level0_layer_trigger = usize::MAX),
        ("level0_extents_trigger", |o| o.level0_extents_trigger = usize::MAX),
        ("level1_extents_trigger", |o| o.level1_extents_trigger = usize::MAX),
        ("pending_compaction_stop_bytes", |o| {
            o.pending_compaction_slowdown_bytes = u64::MAX;
            o.pending_compaction_stop_bytes = u64::MAX;
        }),
    ];
    for (name, set) in cases {
        let mut opts = Options::default();
        set(&mut opts);
        match within(60, name, move || exercise(opts)) {
            Ok(()) => {}
            Err(Error::InvalidOption { option, .. }) => assert!(!option.is_empty(), "{name}"),
            Err(e) => panic!("{name} at its maximum: {e}"),
        }
    }
}

#[test]
fn sync_without_a_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let t = db.default_table();
    let contradictory = WriteOptions {
        sync: true,
        disable_wal: true,
        ..Default::default()
    };
    let e = t.put_opt(b"k", b"v", &contradictory).unwrap_err();
    assert!(matches!(e, Error::InvalidOption { option: "sync", .. }), "{e}");
    let mut batch = WriteBatch::new();
    batch.put(&t, b"k", b"v").unwrap();
    assert!(matches!(
        db.write_async(batch, &contradictory).wait(),
        Err(Error::InvalidOption { option: "sync", .. })
    ));
    assert_eq!(t.get(b"k").unwrap(), None, "a refused write changes nothing");
}

#[test]
fn a_clean_close_keeps_writes_made_without_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        flush_on_close: false,
        ..Options::default()
    };
    let no_wal = WriteOptions {
        disable_wal: true,
        ..Default::default()
    };
    let db = Db::open(dir.path(), opts()).unwrap();
    let users = db.create_table("users").unwrap();
    let logged = db.create_table("logged").unwrap();
    for i in 0..100u32 {
        users.put_opt(format!("u{i}").as_bytes(), b"no-wal", &no_wal).unwrap();
        logged.put(format!("l{i}").as_bytes(), b"wal").unwrap();
    }
    // A WAL-less write into a memtable that already holds logged writes, then one that
    // becomes immutable before close.
    logged.put_opt(b"l-unlogged", b"no-wal", &no_wal).unwrap();
    db.close().unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    let users = db.table("users").unwrap();
    let logged = db.table("logged").unwrap();
    for i in 0..100u32 {
        assert_eq!(
            users.get(format!("u{i}").as_bytes()).unwrap(),
            Some(b"no-wal".to_vec()),
            "u{i}"
        );
        assert_eq!(
            logged.get(format!("l{i}").as_bytes()).unwrap(),
            Some(b"wal".to_vec()),
            "l{i}"
        );
    }
    assert_eq!(logged.get(b"l-unlogged").unwrap(), Some(b"no-wal".to_vec()));
    db.close().unwrap();
}

#[test]
fn an_empty_path_is_refused_before_anything_is_written() {
    let e = Db::open("", Options::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidOption { option: "path", .. }), "{e}");
    let e = Db::destroy("").unwrap_err();
    assert!(matches!(e, Error::InvalidOption { option: "path", .. }), "{e}");
}

#[test]
fn foreign_handles_name_what_was_foreign() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db_a = Db::open(a.path(), Options::default()).unwrap();
    let db_b = Db::open(b.path(), Options::default()).unwrap();
    let t_a = db_a.default_table();
    let t_b = db_b.default_table();

    let mut batch = WriteBatch::new();
    batch.put(&t_a, b"k", b"v").unwrap();
    let e = batch.put(&t_b, b"k", b"v").unwrap_err();
    assert!(matches!(e, Error::ForeignTable { what: "write batch" }), "{e}");
    assert!(e.to_string().contains("write batch"), "{e}");
    let mut batch = WriteBatch::new();
    batch.put(&t_a, b"k", b"v").unwrap();
    let e = db_b.write(batch, &WriteOptions::default()).unwrap_err();
    assert!(matches!(e, Error::ForeignTable { what: "write batch" }), "{e}");

    let at_a = ReadOptions {
        snapshot: Some(db_a.snapshot()),
        ..Default::default()
    };
    let e = t_b.get_opt(b"k", &at_a).unwrap_err();
    assert!(matches!(e, Error::ForeignTable { what: "snapshot" }), "{e}");
    assert!(e.to_string().contains("snapshot"), "{e}");

    let got = db_b.multi_get(&ReadOptions::default(), &[(&t_b, b"k"), (&t_a, b"k")]);
    assert!(got[0].as_ref().unwrap().is_none());
    assert!(
        matches!(&got[1], Err(Error::ForeignTable { what: "multi_get" })),
        "{:?}",
        got[1]
    );

    let mut txn = db_b.begin(Default::default()).unwrap();
    let e = txn.put(&t_a, b"k", b"v").unwrap_err();
    assert!(matches!(e, Error::ForeignTable { what: "transaction" }), "{e}");
    assert!(e.to_string().contains("transaction"), "{e}");
}

#[test]
fn table_name_errors_quote_at_most_64_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let long = "n".repeat(1 << 20);
    match db.create_table(&long).unwrap_err() {
        Error::InvalidTableName { name, reason } => {
            assert_eq!(name, format!("{}...", "n".repeat(riptide::QUOTED_NAME_BYTES)));
            assert_eq!(reason, "longer than 255 bytes");
        }
        e => panic!("{e}"),
    }
    let e = db.create_table(&long).unwrap_err().to_string();
    assert!(e.len() < 200, "the message quotes the whole name: {} bytes", e.len());
    // A cut never splits a character.
    let wide = "é".repeat(200);
    match db.create_table(&wide).unwrap_err() {
        Error::InvalidTableName { name, .. } => {
            assert!(
                name.ends_with("...") && name.len() <= riptide::QUOTED_NAME_BYTES + 3,
                "{name}"
            );
        }
        e => panic!("{e}"),
    }
    // Short names are quoted whole.
    match db.drop_table("default").unwrap_err() {
        Error::InvalidTableName { name, .. } => assert_eq!(name, "default"),
        e => panic!("{e}"),
    }
}
