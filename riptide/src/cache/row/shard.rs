//! One shard's table: a slab of [`Slot`]s, an open-addressing index over them, and CLOCK
//! eviction. It knows nothing of locks or admission rules: the caller holds the shard's lock and
//! decides what to insert (see the parent module's invariants).
//!
//! Invariants:
//! - The index is at most half full, uses linear probing and deletes by backward shift (no
//!   tombstones); every live slot has exactly one index entry, whose low bits are the slot number
//!   + 1 and high bits the low 32 bits of the row's hash.
//! - `usage` is the sum of the live slots' charges and `len` their number; free slot numbers are
//!   in `free`.
//! - The slab grows by doubling from `SLAB_FIRST_ROWS`, never past `max_rows`
//!   (`capacity / ROW_OVERHEAD`); the index holds at most four entries per row of its peak count.

use super::row_hash;
use super::slot::{Slot, SLAB_FIRST_ROWS};
use std::sync::atomic::Ordering;

/// An index entry: the low 32 bits of the row's hash above, slot number + 1 below (0 = empty).
#[inline]
pub(super) fn index_entry(hash: u64, slot: u32) -> u64 {
    (hash << 32) | (slot as u64 + 1)
}

/// One shard's rows: a slab of slots and an open-addressing index over them (linear probing,
/// at most half full, deletion by backward shift, so no tombstones). An index entry carries the
/// low 32 bits of its row's hash, which give its home position and filter the probe, so a miss
/// usually reads one index line and a hit one index line plus the slot's line.
pub(super) struct Inner {
    pub(super) seed: u64,
    /// Most rows the shard can hold (`capacity / ROW_OVERHEAD`): the slab's largest size.
    pub(super) max_rows: usize,
    pub(super) index: Vec<u64>,
    pub(super) slots: Vec<Option<Slot>>,
    pub(super) free: Vec<u32>,
    /// CLOCK hand (index into `slots`).
    pub(super) hand: usize,
    pub(super) usage: usize,
    pub(super) len: usize,
}

impl Inner {
    pub(super) fn new(seed: u64, max_rows: usize) -> Self {
        Self {
            seed,
            max_rows,
            index: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            usage: 0,
            len: 0,
        }
    }

    #[inline]
    pub(super) fn slot(&self, i: u32) -> &Slot {
        self.slots[i as usize].as_ref().expect("index points at a live slot")
    }

    #[inline]
    pub(super) fn find(&self, hash: u64, table: u32, key: &[u8]) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let tag = hash as u32;
        let mut p = hash as usize & mask;
        loop {
            let e = self.index[p];
            if e == 0 {
                return None;
            }
            if (e >> 32) as u32 == tag {
                let i = (e as u32).wrapping_sub(1);
                let s = self.slot(i);
                if s.table == table && s.key() == key {
                    return Some(i);
                }
            }
            p = (p + 1) & mask;
        }
    }

    /// Places `entry` at the first empty position from its home (the index has room).
    pub(super) fn place(index: &mut [u64], entry: u64) {
        let mask = index.len() - 1;
        let mut p = (entry >> 32) as usize & mask;
        while index[p] != 0 {
            p = (p + 1) & mask;
        }
        index[p] = entry;
    }

    /// Unlinks slot `i` (whose row hashes to `hash`) from the index and frees it.
    pub(super) fn remove(&mut self, i: u32, hash: u64) -> Slot {
        let mask = self.index.len() - 1;
        let want = index_entry(hash, i);
        let mut hole = hash as usize & mask;
        while self.index[hole] != want {
            // A live slot is always indexed; never spin under the write lock if that broke.
            assert!(self.index[hole] != 0, "row cache: slot {i} missing from the index");
            hole = (hole + 1) & mask;
        }
        // Backward shift: move later entries of the cluster into the hole when that keeps them
        // reachable from their home (their home is not cyclically inside (hole, q]).
        let mut q = (hole + 1) & mask;
        loop {
            let e = self.index[q];
            if e == 0 {
                break;
            }
            let home = (e >> 32) as usize & mask;
            if q.wrapping_sub(home) & mask >= q.wrapping_sub(hole) & mask {
                self.index[hole] = e;
                hole = q;
            }
            q = (q + 1) & mask;
        }
        self.index[hole] = 0;
        let s = self.slots[i as usize].take().expect("remove of a live slot");
        self.free.push(i);
        self.usage -= s.charge();
        self.len -= 1;
        s
    }

    /// Unlinks and frees slot `i`, recomputing its hash.
    pub(super) fn remove_slot(&mut self, i: u32) -> Slot {
        let s = self.slot(i);
        let hash = row_hash(self.seed, s.table, s.key());
        self.remove(i, hash)
    }

    /// Links a new slot for a row hashing to `hash` (its key must not be present).
    pub(super) fn link(&mut self, s: Slot, hash: u64) {
        if (self.len + 1) * 2 > self.index.len() {
            let mut index = vec![0u64; (self.index.len() * 2).max(64)];
            for &e in self.index.iter().filter(|&&e| e != 0) {
                Self::place(&mut index, e);
            }
            self.index = index;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() == self.slots.capacity() {
                    // The slab grows as the shard fills (doubling, from 1,024 rows) but never
                    // past `max_rows`: eviction keeps len <= max_rows. A huge capacity costs
                    // nothing until rows arrive.
                    let room = self.max_rows.max(1).saturating_sub(self.slots.capacity());
                    let grow = self.slots.capacity().max(SLAB_FIRST_ROWS).min(room).max(1);
                    self.slots.reserve_exact(grow);
                    self.free
                        .reserve_exact(self.slots.capacity().saturating_sub(self.free.capacity()));
                }
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        Self::place(&mut self.index, index_entry(hash, i));
        self.usage += s.charge();
        self.len += 1;
        self.slots[i as usize] = Some(s);
    }

    /// CLOCK: evicts until `need` more bytes fit in `capacity`; returns the number evicted.
    pub(super) fn evict_for(&mut self, need: usize, capacity: usize) -> u64 {
        let mut evicted = 0;
        while self.usage + need > capacity && self.len > 0 {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let i = self.hand;
            self.hand += 1;
            let Some(s) = &self.slots[i] else { continue };
            if s.referenced.load(Ordering::Relaxed) {
                s.referenced.store(false, Ordering::Relaxed);
                continue;
            }
            self.remove_slot(i as u32);
            evicted += 1;
        }
        evicted
    }
}
