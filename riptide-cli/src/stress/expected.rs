//! The expected state of a stress run, kept in a file beside the database (db_stress's
//! `expected_state`), so that after any crash the tool knows what must be there.
//!
//! Layout: a 32-byte header (magic `RTSTRESS`, format version 1, tables, keys per table,
//! CRC32C of the first 28 bytes), then one 8-byte slot per (table, key), little-endian:
//! `committed: u32` then `pending: u32`.
//!
//! A state word is 0 for "never written", otherwise a per-key version number (bits 0..31) with
//! bit 31 set when that version is a delete. Invariants:
//! - a key is written only by the thread that owns it (`key % threads`), so its slot has one
//!   writer;
//! - before a write the slot gets `pending = new`, after the acknowledgement
//!   `committed = new, pending = 0` (positional writes, no fsync: a killed process's page-cache
//!   writes survive, which is what the blackbox crash mode needs);
//! - after a crash the database must hold `committed`, or `pending` when it is not 0 (the one
//!   write per key that may have been in flight).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: &[u8; 8] = b"RTSTRESS";
const VERSION: u32 = 1;
const HEADER: u64 = 32;
/// Bit of a state word marking a delete.
pub const DELETED: u32 = 1 << 31;

/// The expected state: in memory (atomics) and mirrored to its file.
#[derive(Debug)]
pub struct Expected {
    file: File,
    pub keys: u32,
    slots: Vec<AtomicU64>,
}

fn pack(committed: u32, pending: u32) -> u64 {
    u64::from(committed) | (u64::from(pending) << 32)
}

impl Expected {
    /// Opens `path`, creating it for `tables` x `keys` slots if missing; an existing file must
    /// have the same shape and a valid header.
    pub fn open(path: &Path, tables: u32, keys: u32) -> Result<Expected, String> {
        let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
        let exists = path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("opening", e))?;
        let n = tables as usize * keys as usize;
        if !exists {
            let mut h = Vec::with_capacity(HEADER as usize);
            h.extend_from_slice(MAGIC);
            h.extend_from_slice(&VERSION.to_le_bytes());
            h.extend_from_slice(&tables.to_le_bytes());
            h.extend_from_slice(&keys.to_le_bytes());
            h.extend_from_slice(&[0u8; 8]);
            let crc = crc32c_of(&h);
            h.extend_from_slice(&crc.to_le_bytes());
            file.write_all_at(&h, 0).map_err(|e| io("writing", e))?;
            file.set_len(HEADER + 8 * n as u64).map_err(|e| io("sizing", e))?;
        }
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| io("reading", e))?;
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        if &h[..8] != MAGIC || word(8) != VERSION || crc32c_of(&h[..28]) != word(28) {
            return Err(format!(
                "{}: not a stress expected-state file (or damaged)",
                path.display()
            ));
        }
        if (word(12), word(16)) != (tables, keys) {
            return Err(format!(
                "{}: made for {} tables x {} keys, not {tables} x {keys}; use the same --tables and --keys or a new --db",
                path.display(),
                word(12),
                word(16)
            ));
        }
        let mut raw = vec![0u8; 8 * n];
        file.read_exact_at(&mut raw, HEADER).map_err(|e| io("reading", e))?;
        let slots = raw
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect();
        Ok(Expected { file, keys, slots })
    }

    fn index(&self, table: u32, key: u32) -> usize {
        table as usize * self.keys as usize + key as usize
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
        self.file
            .write_all_at(&v.to_le_bytes(), HEADER + 8 * i as u64)
            .map_err(|e| format!("writing the expected state: {e}"))
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
        assert!(Expected::open(&p, 3, 10)
            .unwrap_err()
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
