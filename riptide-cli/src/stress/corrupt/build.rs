//! Step 1 of the sweep: a fresh database with data in every file kind, and its exact
//! expected content.
//!
//! Invariant: the expected content is exactly what was acknowledged, per table and key (the
//! version or absent), with the writes left only in the redo log kept in order, so a round can
//! tell a lost tail from a wrong value.

use super::super::args::StressArgs;
use super::super::{key, value};
use super::*;

pub(super) fn sweep_options(fs: Option<&FaultFs>) -> Options {
    let mut o = Options {
        write_buffer_size: 64 << 10,
        block_size: 2 << 10,
        slog_checkpoint_bytes: 4 << 10,
        level0_layer_trigger: 3,
        level0_extents_trigger: 4,
        level1_extents_trigger: 4,
        level1_dynamic_trigger: false,
        redo_segment_size: 1 << 20,
        extents_per_file: 6,
        flush_on_close: false,
        // Every read of a round goes to the damaged bytes.
        block_cache_size: 0,
        ..Default::default()
    };
    if let Some(fs) = fs {
        o.fs = Arc::new(fs.clone());
    }
    o
}

pub(super) fn table_name(t: u32) -> String {
    format!("s{t}")
}

pub(super) fn write_key(t: &Table, n: u32, tab: u32, ver: Option<u32>, a: &StressArgs) -> Result<(), String> {
    match ver {
        Some(v) => t.put(&key(n), &value(tab, n, v, a)),
        None => t.delete(&key(n)),
    }
    .map_err(|e| format!("build: write: {e}"))
}

/// Builds the database; returns the expected content and the redo tail's write groups.
pub(super) fn build(a: &StressArgs, rng: &mut StdRng) -> Result<(State, Vec<Group>), String> {
    fn err(what: &'static str) -> impl Fn(Error) -> String {
        move |e| format!("build: {what}: {e}")
    }
    if let Some(p) = a.db.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("creating {}: {e}", p.display()))?;
    }
    let db = Db::open(&a.db, sweep_options(None)).map_err(err("open"))?;
    let tables: Vec<Table> = (0..a.tables)
        .map(|t| db.create_table(&table_name(t)))
        .collect::<Result<_, _>>()
        .map_err(err("create table"))?;
    let mut state: State = vec![vec![None; a.keys as usize]; a.tables as usize];
    let mut version = vec![vec![0u32; a.keys as usize]; a.tables as usize];
    let mut next = |t: u32, n: u32, delete: bool, state: &mut State| -> Option<u32> {
        version[t as usize][n as usize] += 1;
        let v = (!delete).then_some(version[t as usize][n as usize]);
        state[t as usize][n as usize] = v;
        v
    };
    for (ti, t) in tables.iter().enumerate() {
        let tab = ti as u32;
        // Everything, compacted to L2.
        for n in 0..a.keys {
            let v = next(tab, n, false, &mut state);
            write_key(t, n, tab, v, a)?;
        }
        t.compact().map_err(err("compact"))?;
        // A third overwritten or deleted, merged into L1.
        for n in 0..a.keys {
            if rng.random_bool(0.33) {
                let v = next(tab, n, rng.random_bool(0.2), &mut state);
                write_key(t, n, tab, v, a)?;
            }
        }
        t.flush().map_err(err("flush"))?;
        t.compact_l0().map_err(err("compact_l0"))?;
        // A fifth again, left in L0.
        for n in 0..a.keys {
            if rng.random_bool(0.2) {
                let v = next(tab, n, rng.random_bool(0.2), &mut state);
                write_key(t, n, tab, v, a)?;
            }
        }
        t.flush().map_err(err("flush"))?;
    }
    // A checkpoint, and a slog holding transactions after it: flush single writes until both
    // exist (each flush commits one slog transaction; past 4 KiB of them the metadata is
    // checkpointed and the slog starts empty).
    let meta_files = |db: &Path| -> (bool, u64) {
        let mut checkpoint = false;
        let mut slog = 0;
        for e in std::fs::read_dir(db.join("meta")).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            checkpoint |= name.starts_with("CHECKPOINT-");
            if name.starts_with("SLOG-") {
                slog = slog.max(e.metadata().map_or(0, |m| m.len()));
            }
        }
        (checkpoint, slog)
    };
    for _ in 0..500 {
        let (checkpoint, slog) = meta_files(&a.db);
        if checkpoint && slog > 32 {
            break;
        }
        let tab = rng.random_range(0..a.tables);
        let n = rng.random_range(0..a.keys);
        let v = next(tab, n, false, &mut state);
        write_key(&tables[tab as usize], n, tab, v, a)?;
        tables[tab as usize].flush().map_err(err("flush"))?;
    }
    db.wait_for_background_work().map_err(err("background work"))?;
    // The redo tail: single writes and multi-table batches, never flushed.
    let mut tail: Vec<Group> = Vec::new();
    for i in 0..200u32.min(a.keys) {
        let ops = if i % 5 == 4 { 3 } else { 1 };
        let mut group: Group = Vec::new();
        let mut batch = WriteBatch::new();
        for _ in 0..ops {
            let tab = rng.random_range(0..a.tables);
            let n = rng.random_range(0..a.keys);
            if group.iter().any(|g| (g.0, g.1) == (tab, n)) {
                continue;
            }
            let before = state[tab as usize][n as usize];
            let v = next(tab, n, rng.random_bool(0.2), &mut state);
            let t = &tables[tab as usize];
            match v {
                Some(v) => batch.put(t, &key(n), &value(tab, n, v, a)),
                None => batch.delete(t, &key(n)),
            }
            .map_err(err("batch"))?;
            group.push((tab, n, before, v));
        }
        db.write(batch, &Default::default()).map_err(err("write"))?;
        tail.push(group);
    }
    let mut levels = [0usize; 3];
    for t in &tables {
        let info = t.level_info();
        for (l, n) in info.extents.iter().enumerate() {
            levels[l] += n;
        }
    }
    println!(
        "extents per level: L0 {}, L1 {}, L2 {}",
        levels[0], levels[1], levels[2]
    );
    drop(tables);
    db.close().map_err(err("close"))?;
    Ok((state, tail))
}

// ---------------------------------------------------------------------------------------------
// Files and regions
