//! The transaction and table create/drop operations of `riptide stress`, and the check of the
//! scratch tables after a crash.
//!
//! Transactions: 2..=[`MAX_GROUP`] of the thread's own keys across the main tables, each put or
//! deleted, in a transaction of random isolation and mode. Before the end the thread checks that
//! the transaction reads its own writes and that the table does not show them yet. A quarter of
//! them roll back: then every key must still show its committed state, and the expected state
//! never marked anything pending. The others commit through [`Worker::write`], which records
//! them as one atomic group: after a crash all of their keys or none show the new versions.
//!
//! Scratch tables keep the main oracle simple: thread `th` owns table `x{th}` and walks it
//! through create -> fill (one batch of [`SCRATCH_ROWS`] rows naming the generation) -> drop,
//! one step per operation, recording each step's state in the expected state before (the
//! in-flight state) and after (the settled one). Invariants checked after any crash:
//! - a table whose `create_table` returned exists; one whose `drop_table` returned is gone, and
//!   a new table of the same name never shows an earlier generation's rows;
//! - a fill is atomic: the table holds no rows or exactly the generation's rows;
//! - a settled fill is there (unless a power cut may lose it: `sync=false`, acknowledged since
//!   the last recovery, which the power-cut mode then checks against the write order).

use super::expected::{scratch, Expected, DELETED, MAX_GROUP, MAX_THREADS};
use super::worker::{fmt_keys, Worker};
use super::{key, parse_value, shown, value};
use rand::Rng;
use riptide::{Db, Error, Isolation, ReadOptions, TxnMode, TxnOptions, WriteBatch};
use std::time::Duration;

/// Rows of a filled scratch table.
pub const SCRATCH_ROWS: u32 = 16;

/// What a scratch table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Absent,
    Empty,
    /// Exactly the rows of this generation.
    Full(u32),
}

/// The name of thread `th`'s scratch table.
pub fn scratch_name(th: u32) -> String {
    format!("x{th}")
}

fn scratch_row(generation: u32, i: u32) -> (Vec<u8>, Vec<u8>) {
    (
        format!("x{i:04}").into_bytes(),
        format!("{generation}/{i}/scratch-row").into_bytes(),
    )
}

/// Reads thread `th`'s scratch table; a partial fill or rows of another generation are errors.
pub fn scratch_seen(db: &Db, th: u32) -> Result<Seen, String> {
    let t = match db.table(&scratch_name(th)) {
        Ok(t) => t,
        Err(Error::TableNotFound(_)) => return Ok(Seen::Absent),
        Err(e) => return Err(format!("opening {}: {e}", scratch_name(th))),
    };
    let rows: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter(&ReadOptions::default())
        .map_err(|e| format!("scanning {}: {e}", scratch_name(th)))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("scanning {}: {e}", scratch_name(th)))?;
    if rows.is_empty() {
        return Ok(Seen::Empty);
    }
    let generation = std::str::from_utf8(&rows[0].1)
        .ok()
        .and_then(|s| s.split('/').next())
        .and_then(|g| g.parse::<u32>().ok())
        .ok_or_else(|| format!("{}: unreadable row {:?}", scratch_name(th), rows[0]))?;
    let want: Vec<(Vec<u8>, Vec<u8>)> = (0..SCRATCH_ROWS).map(|i| scratch_row(generation, i)).collect();
    if rows != want {
        return Err(format!(
            "{}: {} rows, not the {SCRATCH_ROWS} rows of generation {generation} (a torn fill or mixed generations)",
            scratch_name(th),
            rows.len()
        ));
    }
    Ok(Seen::Full(generation))
}

/// Whether a scratch table in `state` of `generation` may show `seen` after a crash;
/// `fill_may_be_lost`: the generation's acknowledged fill may legitimately be lost (power cut
/// with `sync=false`, acknowledged since the last recovery).
pub fn scratch_allowed(generation: u32, state: u32, seen: Seen, fill_may_be_lost: bool) -> bool {
    let full = seen == Seen::Full(generation);
    match state {
        scratch::NONE => seen == Seen::Absent,
        scratch::CREATING => matches!(seen, Seen::Absent | Seen::Empty),
        scratch::EMPTY => seen == Seen::Empty,
        scratch::FILLING => full || seen == Seen::Empty,
        scratch::FULL => full || (fill_may_be_lost && seen == Seen::Empty),
        scratch::DROPPING => full || seen == Seen::Absent || (fill_may_be_lost && seen == Seen::Empty),
        _ => false,
    }
}

/// Checks every scratch table after a recovery against the expected state and settles each
/// in-flight step to what the database shows. `fill_may_be_lost(th, generation)` as in
/// [`scratch_allowed`] (`None`: never). Also refuses tables that are neither main nor scratch
/// tables. Returns `(thread, generation, seen)` for every thread with a scratch history.
pub fn verify_scratch(
    db: &Db,
    exp: &Expected,
    fill_may_be_lost: Option<&dyn Fn(u32, u32) -> bool>,
) -> Result<Vec<(u32, u32, Seen)>, String> {
    let mut threads: Vec<u32> = (0..MAX_THREADS).filter(|&th| exp.scratch(th) != (0, 0)).collect();
    for name in db.tables() {
        let main = name == riptide::DEFAULT_TABLE
            || name
                .strip_prefix('s')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n < exp.tables);
        if main {
            continue;
        }
        match name.strip_prefix('x').and_then(|n| n.parse::<u32>().ok()) {
            Some(th) if th < MAX_THREADS && scratch_name(th) == name => threads.push(th),
            _ => return Err(format!("unexpected table {name:?} after recovery")),
        }
    }
    threads.sort_unstable();
    threads.dedup();
    let mut out = Vec::new();
    for th in threads {
        let (generation, state) = exp.scratch(th);
        let seen = scratch_seen(db, th)?;
        let lossy = fill_may_be_lost.is_some_and(|f| f(th, generation));
        if !scratch_allowed(generation, state, seen, lossy) {
            return Err(format!(
                "scratch table {} shows {seen:?}, but its expected state is {} of generation {generation}",
                scratch_name(th),
                state_name(state)
            ));
        }
        let settled = match seen {
            Seen::Absent => scratch::NONE,
            Seen::Empty => scratch::EMPTY,
            Seen::Full(_) => scratch::FULL,
        };
        exp.set_scratch(th, generation, settled)?;
        out.push((th, generation, seen));
    }
    Ok(out)
}

fn state_name(state: u32) -> &'static str {
    match state {
        scratch::NONE => "none (dropped)",
        scratch::CREATING => "create in flight",
        scratch::EMPTY => "created, empty",
        scratch::FILLING => "fill in flight",
        scratch::FULL => "filled",
        scratch::DROPPING => "drop in flight",
        _ => "invalid",
    }
}

impl Worker<'_> {
    /// A transaction over several of the thread's keys, committed or rolled back.
    pub(super) fn txn_step(&mut self) -> Result<(), String> {
        let mut keys: Vec<(u32, u32, u32)> = Vec::new();
        for _ in 0..self.rng.random_range(2..=MAX_GROUP) {
            let t = self.rng.random_range(0..self.a.tables);
            let n = self.own_key();
            if !keys.iter().any(|&(t2, n2, _)| (t2, n2) == (t, n)) {
                let delete = self.rng.random_bool(0.25);
                keys.push((t, n, self.exp.next(t, n, delete)));
            }
        }
        let isolation = if self.rng.random_bool(0.5) {
            Isolation::Snapshot
        } else {
            Isolation::ReadCommitted
        };
        let mode = if self.rng.random_bool(0.5) {
            TxnMode::Pessimistic
        } else {
            TxnMode::Optimistic
        };
        let desc = format!("txn {isolation:?}/{mode:?} {}", fmt_keys(&keys));
        self.log(format!("{desc} begin"));
        let mut txn = self
            .db
            .begin(TxnOptions {
                isolation,
                mode,
                lock_timeout: Duration::from_secs(30),
                write_options: self.wopts(),
                ..Default::default()
            })
            .map_err(|e| format!("begin failed: {e}"))?;
        for &(t, n, v) in &keys {
            let tab = &self.tables[t as usize];
            if v & DELETED != 0 {
                txn.delete(tab, &key(n))
            } else {
                txn.put(tab, &key(n), &value(t, n, v, self.a))
            }
            .map_err(|e| format!("{desc}: write of s{t} k{n} failed: {e}"))?;
        }
        // Reads its own writes; the table does not show them before the commit.
        let (t0, n0, v0) = keys[0];
        let inside = txn
            .get(&self.tables[t0 as usize], &key(n0))
            .map_err(|e| format!("{desc}: get failed: {e}"))?
            .map(|v| parse_value(t0, n0, &v))
            .transpose()?;
        if inside != shown(v0) {
            return Err(format!(
                "{desc}: reads s{t0} k{n0} as {inside:?}, its own write is {:?}",
                shown(v0)
            ));
        }
        self.check_key(t0, n0, None)
            .map_err(|e| format!("{desc}: before the commit: {e}"))?;
        if self.rng.random_bool(0.25) {
            self.log(format!("{desc} rollback"));
            txn.rollback();
            for &(t, n, _) in &keys {
                self.check_key(t, n, None)
                    .map_err(|e| format!("{desc}: after the rollback: {e}"))?;
            }
            return Ok(());
        }
        self.write(&keys, None, format!("{desc} commit"), move || txn.commit())
    }

    /// One step of the thread's scratch table: create, fill, or check and drop.
    pub(super) fn scratch_step(&mut self) -> Result<(), String> {
        let (generation, state) = self.exp.scratch(self.th);
        let name = scratch_name(self.th);
        match state {
            scratch::NONE => {
                let g = generation.wrapping_add(1).max(1);
                self.log(format!("create_table {name} (generation {g})"));
                self.exp.set_scratch(self.th, g, scratch::CREATING)?;
                self.db
                    .create_table(&name)
                    .map_err(|e| format!("create_table {name} failed: {e}"))?;
                self.exp.set_scratch(self.th, g, scratch::EMPTY)
            }
            scratch::EMPTY => {
                let seen = scratch_seen(self.db, self.th)?;
                if seen != Seen::Empty {
                    return Err(format!("{name} was created empty but shows {seen:?}"));
                }
                let t = self.db.table(&name).map_err(|e| format!("{name}: {e}"))?;
                let mut b = WriteBatch::new();
                for i in 0..SCRATCH_ROWS {
                    let (k, v) = scratch_row(generation, i);
                    b.put(&t, &k, &v).map_err(|e| format!("fill batch: {e}"))?;
                }
                self.exp.set_scratch(self.th, generation, scratch::FILLING)?;
                let (db, wo) = (self.db, self.wopts());
                self.write(
                    &[],
                    Some(generation),
                    format!("fill {name} (generation {generation})"),
                    || db.write(b, &wo),
                )?;
                self.exp.set_scratch(self.th, generation, scratch::FULL)
            }
            scratch::FULL => {
                let seen = scratch_seen(self.db, self.th)?;
                if seen != Seen::Full(generation) {
                    return Err(format!(
                        "{name} was filled with generation {generation} but shows {seen:?}"
                    ));
                }
                self.log(format!("drop_table {name} (generation {generation})"));
                self.exp.set_scratch(self.th, generation, scratch::DROPPING)?;
                self.db
                    .drop_table(&name)
                    .map_err(|e| format!("drop_table {name} failed: {e}"))?;
                self.exp.set_scratch(self.th, generation, scratch::NONE)?;
                match self.db.table(&name) {
                    Err(Error::TableNotFound(_)) => Ok(()),
                    other => Err(format!("{name} was dropped but opening it gives {other:?}")),
                }
            }
            _ => Err(format!(
                "{name} is still {} (generation {generation}); recovery should have settled it",
                state_name(state)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_outcomes() {
        use scratch::*;
        let g = 3;
        // Settled states allow exactly one outcome.
        assert!(scratch_allowed(g, NONE, Seen::Absent, false));
        assert!(!scratch_allowed(g, NONE, Seen::Empty, false));
        assert!(!scratch_allowed(g, NONE, Seen::Full(g), false));
        assert!(scratch_allowed(g, EMPTY, Seen::Empty, false));
        assert!(!scratch_allowed(g, EMPTY, Seen::Absent, false));
        assert!(!scratch_allowed(g, EMPTY, Seen::Full(g - 1), false));
        assert!(scratch_allowed(g, FULL, Seen::Full(g), false));
        assert!(!scratch_allowed(g, FULL, Seen::Empty, false));
        assert!(scratch_allowed(g, FULL, Seen::Empty, true));
        assert!(!scratch_allowed(g, FULL, Seen::Full(g - 1), true));
        // In-flight steps allow before or after.
        assert!(scratch_allowed(g, CREATING, Seen::Absent, false));
        assert!(scratch_allowed(g, CREATING, Seen::Empty, false));
        assert!(!scratch_allowed(g, CREATING, Seen::Full(g - 1), false));
        assert!(scratch_allowed(g, FILLING, Seen::Empty, false));
        assert!(!scratch_allowed(g, FILLING, Seen::Absent, false));
        assert!(scratch_allowed(g, DROPPING, Seen::Absent, false));
        assert!(scratch_allowed(g, DROPPING, Seen::Full(g), false));
        assert!(!scratch_allowed(g, DROPPING, Seen::Empty, false));
    }
}
