//! [`Worker`]: one thread of a stress run. It owns the keys `n % threads == th` of every table,
//! picks operations by the mix and checks every read against the expected state.
//!
//! Invariant: every write goes through [`Worker::write`], which marks its keys pending (and
//! records a write of several keys as one atomic group) before the write and committed after
//! the acknowledgement, so the expected state never claims a write the database was not asked
//! for.

use super::args::{StressArgs, OPS};
use super::expected::DELETED;
use super::expected::{Expected, GroupKey};
use super::history::History;
use super::{key, parse_value, shown, value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, ReadOptions, Table, WriteBatch, WriteOptions};
use std::collections::VecDeque;

pub(super) struct Worker<'a> {
    pub(super) a: &'a StressArgs,
    pub(super) th: u32,
    pub(super) rng: StdRng,
    pub(super) recent: VecDeque<String>,
    pub(super) db: &'a Db,
    pub(super) tables: &'a [Table],
    pub(super) exp: &'a Expected,
    /// Power-cut mode: the clock and log of writes.
    pub(super) hist: Option<&'a History>,
    /// Operations started, by kind (`OPS`).
    pub(super) counts: [u64; 10],
}

impl<'a> Worker<'a> {
    pub(super) fn new(
        a: &'a StressArgs,
        th: u32,
        seed: u64,
        db: &'a Db,
        tables: &'a [Table],
        exp: &'a Expected,
        hist: Option<&'a History>,
    ) -> Worker<'a> {
        Worker {
            a,
            th,
            rng: StdRng::seed_from_u64(seed.wrapping_add(u64::from(th).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
            recent: VecDeque::new(),
            db,
            tables,
            exp,
            hist,
            counts: [0; 10],
        }
    }

    /// Performs one write of `keys` (each `(table, key, new state)`; empty for a scratch-table
    /// fill, which `scratch` names by generation) through `f`, keeping the expected state (and
    /// in power-cut mode the history) in step: pending before, committed after the
    /// acknowledgement.
    pub(super) fn write(
        &mut self,
        keys: &[(u32, u32, u32)],
        scratch: Option<u32>,
        what: String,
        f: impl FnOnce() -> riptide::Result<()>,
    ) -> Result<(), String> {
        let group: Vec<GroupKey> = keys
            .iter()
            .map(|&(table, key, new)| GroupKey {
                table,
                key,
                old: self.exp.get(table, key).0,
                new,
            })
            .collect();
        self.log(what.clone());
        if group.len() > 1 {
            self.exp.set_group(self.th, &group)?;
        }
        for k in &group {
            self.exp.begin(k.table, k.key, k.new)?;
        }
        let stamped = self.hist.map(|h| (h, h.stamp()));
        let r = f();
        if let Some((h, start)) = stamped {
            let ack = r.is_ok().then(|| h.stamp());
            h.record(self.th, start, ack, group.clone(), scratch, what.clone());
        }
        r.map_err(|e| format!("{what} failed: {e}"))?;
        for k in &group {
            self.exp.commit(k.table, k.key)?;
        }
        if group.len() > 1 {
            self.exp.clear_group(self.th)?;
        }
        Ok(())
    }

    pub(super) fn log(&mut self, op: String) {
        if self.recent.len() == 32 {
            self.recent.pop_front();
        }
        self.recent.push_back(op);
    }

    /// A key this thread owns.
    /// A key this thread owns (`step` runs only for threads that own at least one).
    pub(super) fn own_key(&mut self) -> u32 {
        let per = (self.a.keys - self.th - 1) / self.a.threads + 1;
        self.th + self.rng.random_range(0..per) * self.a.threads
    }

    pub(super) fn wopts(&self) -> WriteOptions {
        WriteOptions {
            sync: self.a.sync,
            ..Default::default()
        }
    }

    pub(super) fn step(&mut self, mix: &[u32; 10]) -> Result<(), String> {
        if self.th >= self.a.keys {
            return Ok(()); // more threads than keys: this one owns nothing
        }
        let total: u32 = mix.iter().sum();
        let mut r = self.rng.random_range(0..total);
        let op = mix.iter().position(|&w| {
            if r < w {
                true
            } else {
                r -= w;
                false
            }
        });
        let t = self.rng.random_range(0..self.a.tables);
        self.counts[op.unwrap_or(0)] += 1;
        match op.unwrap_or(0) {
            0 | 1 => {
                let n = self.own_key();
                let delete = op == Some(1);
                let v = self.exp.next(t, n, delete);
                let (tab, val, wo) = (&self.tables[t as usize], value(t, n, v, self.a), self.wopts());
                let what = format!("{} s{t} k{n} -> {v:#x}", if delete { "delete" } else { "put" });
                self.write(&[(t, n, v)], None, what, || {
                    if delete {
                        tab.delete_opt(&key(n), &wo)
                    } else {
                        tab.put_opt(&key(n), &val, &wo)
                    }
                })
            }
            2 => {
                let mut b = WriteBatch::new();
                let mut keys = Vec::new();
                for _ in 0..self.rng.random_range(2..=6) {
                    let t = self.rng.random_range(0..self.a.tables);
                    let n = self.own_key();
                    if keys.iter().any(|&(t2, n2, _)| (t2, n2) == (t, n)) {
                        continue;
                    }
                    let v = self.exp.next(t, n, self.rng.random_bool(0.2));
                    let tab = &self.tables[t as usize];
                    if v & DELETED != 0 {
                        b.delete(tab, &key(n))
                    } else {
                        b.put(tab, &key(n), &value(t, n, v, self.a))
                    }
                    .map_err(|e| format!("batch: {e}"))?;
                    keys.push((t, n, v));
                }
                let (db, wo) = (self.db, self.wopts());
                self.write(&keys, None, format!("batch {}", fmt_keys(&keys)), || db.write(b, &wo))
            }
            3 => {
                let n = self.own_key();
                self.log(format!("get s{t} k{n}"));
                self.check_key(t, n, None)
            }
            4 => {
                let start = self.rng.random_range(0..self.a.keys);
                let end = start.saturating_add(64).min(self.a.keys);
                self.log(format!("scan s{t} k{start}..k{end}"));
                let opts = ReadOptions {
                    lower_bound: Some(key(start)),
                    upper_bound: Some(key(end)),
                    ..Default::default()
                };
                let mut seen = vec![None; (end - start) as usize];
                for item in self.tables[t as usize].iter(&opts).map_err(|e| e.to_string())? {
                    let (k, v) = item.map_err(|e| format!("scan failed: {e}"))?;
                    let n: u32 = std::str::from_utf8(&k[1..])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .filter(|n| (start..end).contains(n))
                        .ok_or_else(|| format!("scan returned {k:?} outside its bounds"))?;
                    seen[(n - start) as usize] = Some(parse_value(t, n, &v)?);
                }
                for n in start..end {
                    if n % self.a.threads == self.th {
                        let want = shown(self.exp.get(t, n).0);
                        if seen[(n - start) as usize] != want {
                            return Err(format!(
                                "scan: s{t} k{n} is {:?}, expected {want:?}",
                                seen[(n - start) as usize]
                            ));
                        }
                    }
                }
                Ok(())
            }
            5 => {
                let snap = self.db.snapshot();
                let keys: Vec<u32> = (0..4).map(|_| self.own_key()).collect();
                let before: Vec<Option<u32>> = keys.iter().map(|&n| shown(self.exp.get(t, n).0)).collect();
                self.log(format!("snapshot check s{t} {keys:?}"));
                for &n in &keys {
                    let v = self.exp.next(t, n, false);
                    let (tab, val, wo) = (&self.tables[t as usize], value(t, n, v, self.a), self.wopts());
                    self.write(&[(t, n, v)], None, format!("put s{t} k{n} -> {v:#x}"), || {
                        tab.put_opt(&key(n), &val, &wo)
                    })?;
                }
                for (&n, want) in keys.iter().zip(before) {
                    self.check_key(t, n, Some((&snap, want)))?;
                }
                Ok(())
            }
            6 => {
                self.log(format!("flush s{t}"));
                self.tables[t as usize]
                    .flush()
                    .map_err(|e| format!("flush failed: {e}"))
            }
            8 => self.txn_step(),
            9 => self.scratch_step(),
            _ => {
                let lo = self.rng.random_range(0..self.a.keys);
                let hi = lo.saturating_add(self.a.keys / 10).min(self.a.keys - 1);
                self.log(format!("compact_range s{t} k{lo}..=k{hi}"));
                self.tables[t as usize]
                    .compact_range(Some(&key(lo)), Some(&key(hi)))
                    .map_err(|e| format!("compact_range failed: {e}"))
            }
        }
    }

    /// A point read of an own key equals the expected state (or, at a snapshot, `want`).
    pub(super) fn check_key(
        &self,
        t: u32,
        n: u32,
        at: Option<(&riptide::Snapshot, Option<u32>)>,
    ) -> Result<(), String> {
        let opts = ReadOptions {
            snapshot: at.map(|(s, _)| s.clone()),
            ..Default::default()
        };
        let got = self.tables[t as usize]
            .get_opt(&key(n), &opts)
            .map_err(|e| format!("get failed: {e}"))?
            .map(|v| parse_value(t, n, &v))
            .transpose()?;
        let want = match at {
            Some((_, w)) => w,
            None => shown(self.exp.get(t, n).0),
        };
        if got != want {
            return Err(format!(
                "{}s{t} k{n} is {got:?}, expected {want:?}",
                if at.is_some() { "at a snapshot, " } else { "" }
            ));
        }
        Ok(())
    }
}

/// `put 12, delete 3, ...`: operations by kind.
pub(super) fn fmt_counts(counts: &[u64; 10]) -> String {
    let parts: Vec<String> = OPS.iter().zip(counts).map(|(o, n)| format!("{o} {n}")).collect();
    parts.join(", ")
}

/// `s{t} k{n}={version:#x}` for each key of a write.
pub(super) fn fmt_keys(keys: &[(u32, u32, u32)]) -> String {
    let parts: Vec<String> = keys.iter().map(|(t, n, v)| format!("s{t} k{n}={v:#x}")).collect();
    parts.join(", ")
}
