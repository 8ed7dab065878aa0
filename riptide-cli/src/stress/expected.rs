//! The expected state of a stress run, kept in a file beside the database (db_stress's
//! `expected_state`), so that after any crash the tool knows what must be there; or only in
//! memory ([`Expected::in_memory`], for the power-cut mode, whose file system is in memory too).
//!
//! File layout (format version 2): a 32-byte header (magic `RTSTRESS`, format version, tables,
//! keys per table, the owner token (u64; 0 in files written before it existed), CRC32C of the
//! first 28 bytes); then one 8-byte slot per
//! (table, key), little-endian `committed: u32` then `pending: u32`; then [`MAX_THREADS`] group
//! records of [`GROUP_BYTES`] (`count: u32`, 4 reserved bytes, [`MAX_GROUP`] entries of
//! `table, key, old, new`, each u32); then [`MAX_THREADS`] scratch slots of 8 bytes
//! (`generation: u32`, `state: u32`).
//!
//! A state word is 0 for "never written", otherwise a per-key version number (bits 0..31) with
//! bit 31 set when that version is a delete. Invariants:
//! - a key is written only by the thread that owns it (`key % threads`), so its slot has one
//!   writer; so have a thread's group record and scratch slot;
//! - a write of several keys at once (a batch, a transaction's commit) first records them with
//!   their old and new states in its thread's group record, then marks each pending; after the
//!   acknowledgement each key is committed and then the group is cleared. So after a crash a
//!   non-empty group names one atomic write that may have been in flight: the database must
//!   show all of its new states or none;
//! - before a write the slot gets `pending = new`, after the acknowledgement
//!   `committed = new, pending = 0` (positional writes, no fsync: a killed process's page-cache
//!   writes survive, which is what the blackbox crash mode needs);
//! - after a crash the database must hold `committed`, or `pending` when it is not 0 (the one
//!   write per key that may have been in flight);
//! - [`Expected::next`] never hands out a version number twice within one process (it counts
//!   from the highest committed, pending or issued one), so a lost write's version cannot be
//!   confused with a later write's;
//! - the owner token, random and never 0 in a new file, is also stored in the database the file
//!   describes (`owner.rs`): a database whose token differs is not the one this file is about.

use super::error::StressError;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

const MAGIC: &[u8; 8] = b"RTSTRESS";
const VERSION: u32 = 2;
const HEADER: u64 = 32;
/// Bit of a state word marking a delete.
pub const DELETED: u32 = 1 << 31;
/// Most threads a run may use (group records and scratch slots exist for each).
pub const MAX_THREADS: u32 = 1024;
/// Most keys of one atomic write that the group record can hold.
pub const MAX_GROUP: usize = 8;
const GROUP_BYTES: u64 = 8 + 16 * MAX_GROUP as u64;

/// One key of an atomic write: table, key, state before, state written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupKey {
    pub table: u32,
    pub key: u32,
    pub old: u32,
    pub new: u32,
}

/// States of a thread's scratch table (see `ops.rs`), with the generation they belong to.
pub mod scratch {
    /// No scratch table (or dropped).
    pub const NONE: u32 = 0;
    /// `create_table` in flight.
    pub const CREATING: u32 = 1;
    /// Created, empty.
    pub const EMPTY: u32 = 2;
    /// The fill batch in flight.
    pub const FILLING: u32 = 3;
    /// Filled with the generation's rows.
    pub const FULL: u32 = 4;
    /// `drop_table` in flight.
    pub const DROPPING: u32 = 5;
}

/// The expected state: in memory (atomics) and, unless in memory only, mirrored to its file.
#[derive(Debug)]
pub struct Expected {
    file: Option<File>,
    pub tables: u32,
    pub keys: u32,
    /// The owner token of the header (0: none; always 0 in memory).
    token: u64,
    slots: Vec<AtomicU64>,
    /// Highest version number handed out per key (this process only).
    issued: Vec<AtomicU32>,
    groups: Vec<Mutex<Vec<GroupKey>>>,
    scratch: Vec<AtomicU64>,
}

fn pack(committed: u32, pending: u32) -> u64 {
    u64::from(committed) | (u64::from(pending) << 32)
}

/// Locks `m`, taking the data even if a panicking thread poisoned it.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Expected {
    /// Opens `path`, creating it for `tables` x `keys` slots (and a new owner token) if missing;
    /// an existing file must have the same shape and a valid header, else a usage error (the
    /// flags or `--db` do not fit it).
    pub fn open(path: &Path, tables: u32, keys: u32) -> Result<Expected, StressError> {
        let io = |what: &str, e: std::io::Error| StressError::Failed(format!("{what} {}: {e}", path.display()));
        let exists = path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("opening", e))?;
        let n = tables as usize * keys as usize;
        let total = HEADER + 8 * n as u64 + (GROUP_BYTES + 8) * u64::from(MAX_THREADS);
        if !exists {
            let mut h = Vec::with_capacity(HEADER as usize);
            h.extend_from_slice(MAGIC);
            h.extend_from_slice(&VERSION.to_le_bytes());
            h.extend_from_slice(&tables.to_le_bytes());
            h.extend_from_slice(&keys.to_le_bytes());
            h.extend_from_slice(&(rand::random::<u64>() | 1).to_le_bytes());
            let crc = crc32c_of(&h);
            h.extend_from_slice(&crc.to_le_bytes());
            file.write_all_at(&h, 0).map_err(|e| io("writing", e))?;
            file.set_len(total).map_err(|e| io("sizing", e))?;
        }
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| io("reading", e))?;
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        if &h[..8] != MAGIC || crc32c_of(&h[..28]) != word(28) {
            return Err(StressError::Usage(format!(
                "{}: not a stress expected-state file (or damaged)",
                path.display()
            )));
        }
        if word(8) != VERSION {
            return Err(StressError::Usage(format!(
                "{}: expected-state format {}, this riptide writes {VERSION}; use a new --db",
                path.display(),
                word(8)
            )));
        }
        if (word(12), word(16)) != (tables, keys) {
            return Err(StressError::Usage(format!(
                "{}: made for {} tables x {} keys, not {tables} x {keys}; use the same --tables and --keys or a new --db",
                path.display(),
                word(12),
                word(16)
            )));
        }
        let mut raw = vec![0u8; (total - HEADER) as usize];
        file.read_exact_at(&mut raw, HEADER).map_err(|e| io("reading", e))?;
        let (slot_bytes, rest) = raw.split_at(8 * n);
        let (group_bytes, scratch_bytes) = rest.split_at((GROUP_BYTES * u64::from(MAX_THREADS)) as usize);
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let mut e = Expected::in_memory(tables, keys);
        e.slots = slot_bytes
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect();
        e.issued = e
            .slots
            .iter()
            .map(|s| {
                let v = s.load(Ordering::Relaxed);
                AtomicU32::new((v as u32 & !DELETED).max((v >> 32) as u32 & !DELETED))
            })
            .collect();
        for (g, rec) in e.groups.iter().zip(group_bytes.chunks_exact(GROUP_BYTES as usize)) {
            let count = (u32_at(rec, 0) as usize).min(MAX_GROUP);
            *lock(g) = (0..count)
                .map(|i| {
                    let o = 8 + 16 * i;
                    GroupKey {
                        table: u32_at(rec, o),
                        key: u32_at(rec, o + 4),
                        old: u32_at(rec, o + 8),
                        new: u32_at(rec, o + 12),
                    }
                })
                .filter(|k| k.table < tables && k.key < keys)
                .collect();
        }
        e.scratch = scratch_bytes
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect();
        e.token = u64::from_le_bytes(h[20..28].try_into().expect("8 bytes"));
        e.file = Some(file);
        Ok(e)
    }

    /// An expected state kept only in memory, every key never written.
    pub fn in_memory(tables: u32, keys: u32) -> Expected {
        let n = tables as usize * keys as usize;
        Expected {
            file: None,
            token: 0,
            tables,
            keys,
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            issued: (0..n).map(|_| AtomicU32::new(0)).collect(),
            groups: (0..MAX_THREADS).map(|_| Mutex::new(Vec::new())).collect(),
            scratch: (0..MAX_THREADS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn index(&self, table: u32, key: u32) -> usize {
        table as usize * self.keys as usize + key as usize
    }

    fn mirror(&self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        match &self.file {
            Some(f) => f
                .write_all_at(bytes, offset)
                .map_err(|e| format!("writing the expected state: {e}")),
            None => Ok(()),
        }
    }

    fn groups_offset(&self) -> u64 {
        HEADER + 8 * self.slots.len() as u64
    }

    /// `(committed, pending)` of a key.
    pub fn get(&self, table: u32, key: u32) -> (u32, u32) {
        let v = self.slots[self.index(table, key)].load(Ordering::Acquire);
        (v as u32, (v >> 32) as u32)
    }

    fn set(&self, table: u32, key: u32, committed: u32, pending: u32) -> Result<(), String> {
        let i = self.index(table, key);
        let v = pack(committed, pending);
        self.slots[i].store(v, Ordering::Release);
        self.mirror(HEADER + 8 * i as u64, &v.to_le_bytes())
    }

    /// The state word for the next write of a key (`delete` sets the delete bit): a version
    /// number never handed out before in this process.
    pub fn next(&self, table: u32, key: u32, delete: bool) -> u32 {
        let i = self.index(table, key);
        let (c, p) = self.get(table, key);
        let hi = self.issued[i]
            .load(Ordering::Acquire)
            .max(c & !DELETED)
            .max(p & !DELETED);
        let v = next_version(hi);
        self.issued[i].store(v, Ordering::Release);
        v | if delete { DELETED } else { 0 }
    }

    /// Marks `new` as in flight for a key (before the write).
    pub fn begin(&self, table: u32, key: u32, new: u32) -> Result<(), String> {
        let (c, _) = self.get(table, key);
        self.set(table, key, c, new)
    }

    /// The in-flight write of a key was acknowledged.
    pub fn commit(&self, table: u32, key: u32) -> Result<(), String> {
        let (c, p) = self.get(table, key);
        self.set(table, key, if p != 0 { p } else { c }, 0)
    }

    /// After a crash: the database showed `seen` for a key with a pending write.
    pub fn resolve(&self, table: u32, key: u32, seen: u32) -> Result<(), String> {
        self.set(table, key, seen, 0)
    }

    /// Records the keys of an atomic write of thread `th` (before any is marked pending).
    pub fn set_group(&self, th: u32, keys: &[GroupKey]) -> Result<(), String> {
        if keys.len() > MAX_GROUP || th >= MAX_THREADS {
            return Err(format!("a group of {} keys for thread {th} does not fit", keys.len()));
        }
        let mut b = Vec::with_capacity(GROUP_BYTES as usize);
        b.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0u8; 4]);
        for k in keys {
            for w in [k.table, k.key, k.old, k.new] {
                b.extend_from_slice(&w.to_le_bytes());
            }
        }
        // Entries first, the count last: a torn record is never read as a longer group.
        let off = self.groups_offset() + GROUP_BYTES * u64::from(th);
        self.mirror(off + 8, &b[8..])?;
        self.mirror(off, &b[..8])?;
        *lock(&self.groups[th as usize]) = keys.to_vec();
        Ok(())
    }

    /// The atomic write thread `th` had in flight (empty if none).
    pub fn group(&self, th: u32) -> Vec<GroupKey> {
        lock(&self.groups[th as usize]).clone()
    }

    /// Clears thread `th`'s group record (after its keys were committed or resolved).
    pub fn clear_group(&self, th: u32) -> Result<(), String> {
        lock(&self.groups[th as usize]).clear();
        self.mirror(self.groups_offset() + GROUP_BYTES * u64::from(th), &[0u8; 4])
    }

    /// Clears every thread's non-empty group record.
    pub fn clear_groups(&self) -> Result<(), String> {
        for th in 0..MAX_THREADS {
            if !self.group(th).is_empty() {
                self.clear_group(th)?;
            }
        }
        Ok(())
    }

    /// The owner token of the file's header (0: none).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Makes `token` the owner token, in memory and in the file's header.
    pub fn set_token(&mut self, token: u64) -> Result<(), String> {
        self.token = token;
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0)
            .map_err(|e| format!("reading the expected state: {e}"))?;
        h[20..28].copy_from_slice(&token.to_le_bytes());
        let crc = crc32c_of(&h[..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        file.write_all_at(&h, 0)
            .map_err(|e| format!("writing the expected state: {e}"))
    }

    /// True if no write was ever recorded: every key never written, no group, no scratch table.
    pub fn is_untouched(&self) -> bool {
        self.slots.iter().all(|s| s.load(Ordering::Acquire) == 0)
            && self.groups.iter().all(|g| lock(g).is_empty())
            && self.scratch.iter().all(|s| s.load(Ordering::Acquire) == 0)
    }

    /// `(generation, state)` of thread `th`'s scratch table.
    pub fn scratch(&self, th: u32) -> (u32, u32) {
        let v = self.scratch[th as usize].load(Ordering::Acquire);
        (v as u32, (v >> 32) as u32)
    }

    /// Sets thread `th`'s scratch table state.
    pub fn set_scratch(&self, th: u32, generation: u32, state: u32) -> Result<(), String> {
        let v = pack(generation, state);
        self.scratch[th as usize].store(v, Ordering::Release);
        let off = self.groups_offset() + GROUP_BYTES * u64::from(MAX_THREADS) + 8 * u64::from(th);
        self.mirror(off, &v.to_le_bytes())
    }
}

/// The version after `state` (deletes and puts share one counter per key; 0 is skipped, it
/// means "never written").
pub fn next_version(state: u32) -> u32 {
    (((state & !DELETED) + 1) & !DELETED).max(1)
}

fn crc32c_of(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_reopen_and_shape_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("expected");
        let e = Expected::open(&p, 2, 10).unwrap();
        e.begin(1, 7, 5).unwrap();
        assert_eq!(e.get(1, 7), (0, 5));
        drop(e);
        let e = Expected::open(&p, 2, 10).unwrap();
        assert_eq!(e.get(1, 7), (0, 5));
        e.commit(1, 7).unwrap();
        e.begin(0, 0, 3 | DELETED).unwrap();
        e.resolve(0, 0, 0).unwrap();
        drop(e);
        let e = Expected::open(&p, 2, 10).unwrap();
        assert_eq!((e.get(1, 7), e.get(0, 0)), ((5, 0), (0, 0)));
        let g = [GroupKey {
            table: 1,
            key: 2,
            old: 0,
            new: 4 | DELETED,
        }];
        e.set_group(3, &g).unwrap();
        e.set_scratch(5, 9, scratch::FILLING).unwrap();
        // A version is never handed out twice, even after a pending one was resolved away.
        assert_eq!(e.next(1, 7, false), 6);
        assert_eq!(e.next(1, 7, true), 7 | DELETED);
        drop(e);
        let e = Expected::open(&p, 2, 10).unwrap();
        assert_eq!((e.group(3), e.group(2)), (g.to_vec(), vec![]));
        assert_eq!(e.scratch(5), (9, scratch::FILLING));
        e.clear_group(3).unwrap();
        drop(e);
        let e = Expected::open(&p, 2, 10).unwrap();
        assert!(e.group(3).is_empty());
        assert!(Expected::open(&p, 3, 10)
            .unwrap_err()
            .to_string()
            .contains("made for 2 tables x 10 keys"));
        std::fs::write(&p, b"garbage that is long enough to be a header....").unwrap();
        assert!(Expected::open(&p, 2, 10).is_err());
    }

    #[test]
    fn crc_is_crc32c() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c_of(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn versions_wrap_below_the_delete_bit() {
        assert_eq!(next_version(0), 1);
        assert_eq!(next_version(7 | DELETED), 8);
        assert_eq!(next_version(DELETED - 1), 1);
    }
}
