//! The versions of one key: a lock-free skiplist ordered by LSN, newest first, so that a read
//! at any snapshot finds its version in O(log v) steps for a key with v versions (issue 21,
//! item 4), where a plain chain made a read at an old snapshot walk every newer version.
//!
//! Level 0 is the full chain, newest first: [`VersionChain::for_each`] walks it, which is what
//! flush, iterators and `latest_version` observe. Each version but a key's first also gets a
//! random height (one in [`BRANCHING`] versions of height h reaches h + 1, as the key
//! skiplist; the memtable gives a new key's first version height 1, so a key written once
//! never allocates upper heads); levels 1.. are express lanes used only to find a position.
//!
//! Invariants:
//! - Every level is sorted by LSN, newest first (ties: LSNs of one key are distinct, one LSN
//!   per write op; equal LSNs would be kept, their mutual order unspecified).
//! - A version is linked at level l only after it was linked at every level below l, and links
//!   are never removed, so each level is a sub-list of the one below it and a search that
//!   descends from a version at level l continues from the same version at level l - 1.
//! - Level 0's head is [`VersionChain::head`]; the heads of levels 1.. live in an
//!   [`UpperHeads`] block that is allocated in the arena (and CAS-published) by the first
//!   insert of a version taller than 1. Until then every linked version has height 1. A racing
//!   loser's block stays unreachable in the arena.
//! - Versions are initialised before publication; every link is published with a `Release`
//!   CAS (`AcqRel`) and read with `Acquire`. Readers take no lock; writers take none either
//!   (the arena's bump mutex aside). Inserting at the newest end, the common case, costs one
//!   splice search that moves no step on any level: O(height), O(1) expected.
//! - Readers must filter by snapshot: versions newer than the visible LSN may be linked while
//!   their write group is still being inserted; [`VersionChain::visible`] skips them.
//! - Nothing here is freed before the arena (the memtable) drops.

use super::arena::Arena;
use crate::key::{Lsn, ValueKind};
use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Tallest version tower: 4^12 = 16M versions of one key before the top lane gets dense.
pub(super) const MAX_VERSION_HEIGHT: usize = 12;

/// A version of a key: header, then `height` links, then the value bytes. A version of height
/// 1 takes 24 bytes plus its value, as the plain chain did.
#[repr(C)]
pub(super) struct Version {
    lsn: Lsn,
    value_len: u32,
    kind: ValueKind,
    height: u8,
    /// Link 0 (the next older version); links `1..height` follow in the same allocation.
    tower: [AtomicPtr<Version>; 1],
}

impl Version {
    /// Allocates an unpublished version of `height` (1 ..= [`MAX_VERSION_HEIGHT`]) holding
    /// `value`, its links null.
    pub(super) fn alloc(arena: &Arena, lsn: Lsn, kind: ValueKind, value: &[u8], height: usize) -> *mut Version {
        debug_assert!((1..=MAX_VERSION_HEIGHT).contains(&height));
        let value_at = Self::value_offset(height);
        let v = arena.alloc(value_at + value.len()).cast::<Version>();
        // SAFETY: fresh, 8-aligned, zeroed allocation of header + links + value, not yet shared;
        // zeroed links are null pointers.
        unsafe {
            ptr::addr_of_mut!((*v).lsn).write(lsn);
            ptr::addr_of_mut!((*v).value_len).write(value.len() as u32);
            ptr::addr_of_mut!((*v).kind).write(kind);
            ptr::addr_of_mut!((*v).height).write(height as u8);
            ptr::copy_nonoverlapping(value.as_ptr(), v.cast::<u8>().add(value_at), value.len());
        }
        v
    }

    fn value_offset(height: usize) -> usize {
        offset_of!(Version, tower) + height * size_of::<AtomicPtr<Version>>()
    }

    /// Link `level` of the tower.
    ///
    /// # Safety
    /// `v` must point to a version allocated with height > `level`.
    unsafe fn link<'a>(v: *const Version, level: usize) -> &'a AtomicPtr<Version> {
        // SAFETY: the caller guarantees the tower has more than `level` links, all inside the
        // version's arena allocation; `v` carries provenance over that whole allocation.
        unsafe {
            &*v.cast::<u8>()
                .add(offset_of!(Version, tower))
                .cast::<AtomicPtr<Version>>()
                .add(level)
        }
    }

    /// (LSN, kind, value) of a version.
    ///
    /// # Safety
    /// `v` must be a published (or own, initialised) version of an arena that outlives `'a`.
    unsafe fn entry<'a>(v: *const Version) -> (Lsn, ValueKind, &'a [u8]) {
        // SAFETY: header and value bytes were written before publication and never change;
        // the value follows the tower inside the same allocation.
        unsafe {
            let value = std::slice::from_raw_parts(
                v.cast::<u8>().add(Self::value_offset((*v).height as usize)),
                (*v).value_len as usize,
            );
            ((*v).lsn, (*v).kind, value)
        }
    }
}

/// The heads of levels 1 .. [`MAX_VERSION_HEIGHT`] (entry `l - 1` heads level `l`), and the
/// height of the tallest version linked so far.
#[repr(C)]
struct UpperHeads {
    links: [AtomicPtr<Version>; MAX_VERSION_HEIGHT - 1],
    /// At most the height of the tallest linked version (raised after that version is linked
    /// at every level; zeroed = 0): searches start at this level, not at the top of the tower.
    /// A stale, lower value only makes a search start lower, which is still correct (every
    /// level is a sub-list of the one below it).
    height: AtomicUsize,
}

/// One key's versions; lives inside its key node (zeroed = empty). See the module header.
#[repr(C)]
pub(super) struct VersionChain {
    /// Head of level 0: the newest version.
    head: AtomicPtr<Version>,
    /// Heads of the upper levels; null until a version taller than 1 is inserted.
    upper: AtomicPtr<UpperHeads>,
}

impl VersionChain {
    /// Link `level` out of position `x` (null = the chain's head).
    ///
    /// # Safety
    /// `x` is null or a version of this chain linked at `level` (so its height > `level`);
    /// for `x` null and `level` > 0, `upper` is this chain's non-null heads block.
    unsafe fn link_from(&self, upper: *const UpperHeads, x: *const Version, level: usize) -> &AtomicPtr<Version> {
        if !x.is_null() {
            // SAFETY: forwarded from the caller.
            unsafe { Version::link(x, level) }
        } else if level == 0 {
            &self.head
        } else {
            // SAFETY: `upper` is a published, never-freed heads block (caller); entry
            // `level - 1` exists since `level < MAX_VERSION_HEIGHT`.
            unsafe { &(*upper).links[level - 1] }
        }
    }

    /// The number of levels a search from the head must look at: 1 without a heads block, else
    /// the tallest linked version's height (at least `at_least`).
    fn search_height(upper: *const UpperHeads, at_least: usize) -> usize {
        if upper.is_null() {
            return 1;
        }
        // SAFETY: a published, never-freed heads block.
        let linked = unsafe { (*upper).height.load(Ordering::Acquire) };
        linked.max(at_least).clamp(1, MAX_VERSION_HEIGHT)
    }

    /// The heads block, allocating and publishing it if there is none yet.
    fn upper_or_alloc(&self, arena: &Arena) -> *const UpperHeads {
        let cur = self.upper.load(Ordering::Acquire);
        if !cur.is_null() {
            return cur;
        }
        // Zeroed memory is a block of null links.
        let fresh = arena.alloc(size_of::<UpperHeads>()).cast::<UpperHeads>();
        match self
            .upper
            .compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => fresh,
            // A racing insert published its block first; ours stays unreachable in the arena.
            Err(theirs) => theirs,
        }
    }

    /// Links the unpublished version `v` (from [`Version::alloc`], owned by the caller) into the
    /// chain at its LSN. Safe to call from many threads at once.
    pub(super) fn insert(&self, arena: &Arena, v: *mut Version) {
        // SAFETY: `v` is initialised and not yet reachable by anyone else.
        let (lsn, height) = unsafe { ((*v).lsn, (*v).height as usize) };
        if height == 1 {
            // The common case (three versions in four): a version of height 1 that is the
            // newest goes in front of the head with one CAS, as in a plain chain; a lost race
            // or an older LSN takes the general path below.
            let cur = self.head.load(Ordering::Acquire);
            // SAFETY: `cur` is null or a published version; `v` is ours and has link 0.
            unsafe {
                if cur.is_null() || (*cur).lsn < lsn {
                    Version::link(v, 0).store(cur, Ordering::Relaxed);
                    if self
                        .head
                        .compare_exchange(cur, v, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return;
                    }
                }
            }
        }
        let upper = if height > 1 {
            self.upper_or_alloc(arena)
        } else {
            self.upper.load(Ordering::Acquire)
        };
        let top = Self::search_height(upper, height);
        // prev[l]: last version at level l with LSN > `lsn` (null = head); next[l]: its successor.
        let mut prev = [ptr::null::<Version>(); MAX_VERSION_HEIGHT];
        let mut next = [ptr::null_mut::<Version>(); MAX_VERSION_HEIGHT];
        let mut x: *const Version = ptr::null();
        for level in (0..top).rev() {
            // `x` was found at level + 1 (or is the head), so it is linked at `level` too.
            let (p, n) = self.walk(upper, x, level, lsn);
            prev[level] = p;
            next[level] = n;
            x = p;
        }
        for level in 0..height {
            loop {
                // SAFETY: `v` has height > level and is ours at this level (not yet linked
                // here); `prev[level]` is the head or a version linked at `level`, and
                // `upper` is non-null whenever level > 0 (height > 1 allocated it).
                let won = unsafe {
                    Version::link(v, level).store(next[level], Ordering::Relaxed);
                    self.link_from(upper, prev[level], level)
                        .compare_exchange(next[level], v, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                };
                if won {
                    break;
                }
                // A version was linked after prev[level]: versions are never unlinked, so our
                // position is still after prev[level].
                let (p, n) = self.walk(upper, prev[level], level, lsn);
                prev[level] = p;
                next[level] = n;
            }
        }
        if height > 1 {
            // SAFETY: `upper` is non-null for a version taller than 1 (allocated above).
            unsafe { (*upper).height.fetch_max(height, Ordering::AcqRel) };
        }
    }

    /// From position `x` at `level`, moves forward past every version with LSN > `lsn`;
    /// returns the last such position and its successor.
    fn walk(
        &self,
        upper: *const UpperHeads,
        mut x: *const Version,
        level: usize,
        lsn: Lsn,
    ) -> (*const Version, *mut Version) {
        loop {
            // SAFETY: `x` is the head or a version reached at `level` (height > level); for the
            // head at level > 0 `upper` is non-null (callers only go above level 0 with it).
            let n = unsafe { self.link_from(upper, x, level) }.load(Ordering::Acquire);
            // SAFETY: `n` is a published version when non-null.
            if !n.is_null() && unsafe { (*n).lsn } > lsn {
                x = n;
            } else {
                return (x, n);
            }
        }
    }

    /// The newest version with LSN <= `snapshot`: (LSN, kind, value).
    ///
    /// # Safety
    /// The chain must belong to a published node of a memtable that outlives `'a`.
    pub(super) unsafe fn visible<'a>(&self, snapshot: Lsn) -> Option<(Lsn, ValueKind, &'a [u8])> {
        let newest = self.head.load(Ordering::Acquire);
        if newest.is_null() {
            return None;
        }
        // Fast path, the common case: the newest version is visible.
        // SAFETY: published version of a live memtable (caller).
        if unsafe { (*newest).lsn } <= snapshot {
            // SAFETY: as above.
            return Some(unsafe { Version::entry(newest) });
        }
        let upper = self.upper.load(Ordering::Acquire);
        let top = Self::search_height(upper, 1);
        let mut x: *const Version = ptr::null();
        let mut found = ptr::null_mut();
        for level in (0..top).rev() {
            (x, found) = self.walk(upper, x, level, snapshot);
        }
        // SAFETY: `found` is null or a published version of a live memtable (caller).
        (!found.is_null()).then(|| unsafe { Version::entry(found) })
    }

    /// Calls `f` for every version, newest first (level 0), until it returns false.
    ///
    /// # Safety
    /// As [`VersionChain::visible`].
    pub(super) unsafe fn for_each<'a>(&self, mut f: impl FnMut(Lsn, ValueKind, &'a [u8]) -> bool) {
        let mut v = self.head.load(Ordering::Acquire);
        while !v.is_null() {
            // SAFETY: published versions of a live memtable (caller); link 0 always exists.
            unsafe {
                let (lsn, kind, value) = Version::entry(v);
                if !f(lsn, kind, value) {
                    return;
                }
                v = Version::link(v, 0).load(Ordering::Acquire);
            }
        }
    }

    /// Versions linked at each level (level 0 = all), for tests of the index's shape.
    #[cfg(test)]
    pub(super) fn level_lengths(&self) -> Vec<usize> {
        let upper = self.upper.load(Ordering::Acquire);
        let top = if upper.is_null() { 1 } else { MAX_VERSION_HEIGHT };
        (0..top)
            .map(|level| {
                let mut n = 0;
                let mut x: *const Version = ptr::null();
                loop {
                    // SAFETY: as in `walk`.
                    let next = unsafe { self.link_from(upper, x, level) }.load(Ordering::Acquire);
                    if next.is_null() {
                        return n;
                    }
                    n += 1;
                    x = next;
                }
            })
            .collect()
    }
}
