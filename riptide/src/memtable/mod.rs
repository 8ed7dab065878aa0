//! The multi-version memtable: a concurrent, insert-only skiplist of distinct user keys, each
//! key node holding its versions newest first (X-Engine, seed 000 Fig. 7), indexed by LSN so a
//! read at an old snapshot skips newer versions in O(log v) steps ([`versions`]).
//!
//! Invariants:
//! - A user key appears in at most one node (a racing insert of the same key joins the
//!   existing node; the loser's node is left unreachable in the arena).
//! - A node's version chain is sorted by LSN, newest first, and never shrinks; updating one hot
//!   key lengthens only its own chain, never the search path of other keys. The chain is itself
//!   a skiplist by LSN (`versions.rs`), so finding the version of a snapshot among v versions of
//!   a key takes O(log v) steps and inserting one O(1) expected at the newest end.
//! - Nodes and versions live in the memtable's [`Arena`] and are immutable once published
//!   except for their atomic links. Publication is a `Release` CAS; readers load links with
//!   `Acquire`, so a reader that reaches a node or version sees it fully initialised.
//! - Reads take no lock. Writers take no lock either, except the arena's short bump mutexes
//!   (their thread's shard; the shared block's when a shard refills or for a large version).
//! - Readers must filter versions by their snapshot LSN: versions newer than the visible LSN can
//!   be present while their write group is still being inserted.
//! - Nothing is freed until the whole memtable drops (O(1) free, exact accounting).

mod arena;
mod versions;

use crate::key::{Lsn, ValueKind};
use arena::Arena;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::cmp::Ordering as CmpOrdering;
use std::mem::{align_of, offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use versions::{Version, VersionChain, MAX_VERSION_HEIGHT};

const MAX_HEIGHT: usize = 12;
/// One in `BRANCHING` nodes of height h also gets height h + 1.
const BRANCHING: u32 = 4;

/// A key node: header, then `height` tower links, then the key bytes.
#[repr(C)]
struct Node {
    /// Newest version first, indexed by LSN.
    versions: VersionChain,
    key_len: u32,
    height: u32,
    /// The first link; links `1..height` follow it in the same allocation.
    tower: [AtomicPtr<Node>; 1],
}

impl Node {
    fn alloc_size(height: usize, key_len: usize) -> usize {
        offset_of!(Node, tower) + height * size_of::<AtomicPtr<Node>>() + key_len
    }

    /// Link `level` of the tower.
    ///
    /// # Safety
    /// `node` must point to a node allocated with height > `level`.
    unsafe fn link<'a>(node: *const Node, level: usize) -> &'a AtomicPtr<Node> {
        // SAFETY: the caller guarantees the tower has more than `level` entries, all inside the
        // node's arena allocation; `node` carries provenance over that whole allocation.
        unsafe {
            &*node
                .cast::<u8>()
                .add(offset_of!(Node, tower))
                .cast::<AtomicPtr<Node>>()
                .add(level)
        }
    }

    /// The node's user key.
    ///
    /// # Safety
    /// `node` must be a published, non-head node of a live memtable.
    unsafe fn key<'a>(node: *const Node) -> &'a [u8] {
        // SAFETY: the key bytes follow the tower inside the node's allocation and were written
        // before the node was published.
        unsafe {
            let height = (*node).height as usize;
            let start = node
                .cast::<u8>()
                .add(offset_of!(Node, tower) + height * size_of::<AtomicPtr<Node>>());
            std::slice::from_raw_parts(start, (*node).key_len as usize)
        }
    }
}

/// While a search compares `x`'s successor at `level` (usually a cache miss in a large
/// memtable), starts loading the node it would compare next if it descends: `x`'s successor
/// one level down. The two misses then overlap instead of following each other; an unneeded
/// load (the search advances instead) costs only memory bandwidth.
#[inline(always)]
fn prefetch_descent(x: *const Node, level: usize) {
    if level == 0 {
        return;
    }
    // SAFETY: the callers' `x` is the head or a published node of height > `level`, so it has
    // a link at `level - 1`.
    let below = unsafe { Node::link(x, level - 1) }.load(Ordering::Relaxed);
    prefetch(below);
}

/// Asks the CPU to start loading the cache line at `p` into its caches: a hint that never
/// faults, whatever the address (null included); nothing on other architectures.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` only hints the cache; it reads nothing architecturally and cannot
    // fault on any address, so no pointer validity is required.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What a memtable knows about a key at a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup<'a> {
    /// The newest visible version is a value.
    Value(&'a [u8]),
    /// The newest visible version is a tombstone.
    Deleted,
    /// No visible version here; look in older memtables (and later, levels).
    NotFound,
}

/// The multi-version skiplist memtable; see the module header.
pub(crate) struct Memtable {
    arena: Arena,
    head: *const Node,
    /// Read by every search, written only when a taller node arrives.
    max_height: AtomicUsize,
    /// Written once per inserted batch: on a cache line of its own, away from `max_height`.
    counts: CachePadded<Counts>,
    /// Last LSN that may be inserted here, set when the memtable becomes immutable
    /// (u64::MAX while it takes writes).
    sealed_lsn: AtomicU64,
    /// Holds a write made without the redo log (`WriteOptions::disable_wal`): only a flush
    /// keeps it across a close.
    unlogged: AtomicBool,
}

/// What a memtable counts of its versions.
struct Counts {
    entries: AtomicU64,
    /// Oldest LSN inserted (u64::MAX while empty).
    min_lsn: AtomicU64,
    /// Newest LSN inserted.
    max_lsn: AtomicU64,
}

// SAFETY: the raw pointers point into `arena`, which the memtable owns and never frees before
// drop. Shared mutation happens only through atomics (links, counters) and the arena's mutex;
// node and version payloads are written before publication and never after.
unsafe impl Send for Memtable {}
// SAFETY: see `Send`.
unsafe impl Sync for Memtable {}

thread_local! {
    static HEIGHT_RNG: Cell<u64> = const { Cell::new(0) };
}

/// A random tower height in 1 ..= `max`: P(height > h) = BRANCHING^-h.
fn random_height(max: usize) -> usize {
    HEIGHT_RNG.with(|cell| {
        let mut x = cell.get();
        if x == 0 {
            // Seed from the address of a stack value and the thread id hash: cheap and distinct.
            let local = 0u8;
            x = (&local as *const u8 as u64) ^ 0x9E37_79B9_7F4A_7C15;
        }
        let mut height = 1;
        loop {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            if height < max && ((r >> 32) as u32).is_multiple_of(BRANCHING) {
                height += 1;
            } else {
                break;
            }
        }
        cell.set(x);
        height
    })
}

impl Memtable {
    /// An empty memtable with 1 MiB arena blocks.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_arena_block(arena::BLOCK_SIZE)
    }

    /// An empty memtable meant to hold about `write_buffer_size` bytes: its arena blocks are a
    /// sixteenth of that (4 KiB ..= 1 MiB), so block granularity never makes it look full early.
    pub(crate) fn for_write_buffer(write_buffer_size: usize) -> Self {
        Self::with_arena_block(write_buffer_size / 16)
    }

    fn with_arena_block(block_size: usize) -> Self {
        let arena = Arena::with_block_size(block_size);
        let head = arena.alloc(Node::alloc_size(MAX_HEIGHT, 0)).cast::<Node>();
        debug_assert_eq!(head as usize % align_of::<Node>(), 0);
        // SAFETY: `head` is a fresh, zeroed, aligned allocation large enough for a node of
        // MAX_HEIGHT; zeroed atomics are null pointers, so only the scalars need writing.
        unsafe {
            ptr::addr_of_mut!((*head).height).write(MAX_HEIGHT as u32);
            ptr::addr_of_mut!((*head).key_len).write(0);
        }
        Memtable {
            arena,
            head,
            max_height: AtomicUsize::new(1),
            counts: CachePadded::new(Counts {
                entries: AtomicU64::new(0),
                min_lsn: AtomicU64::new(u64::MAX),
                max_lsn: AtomicU64::new(0),
            }),
            sealed_lsn: AtomicU64::new(u64::MAX),
            unlogged: AtomicBool::new(false),
        }
    }

    /// Records that a write without the redo log was inserted (before it is acknowledged).
    pub(crate) fn mark_unlogged(&self) {
        if !self.unlogged.load(Ordering::Relaxed) {
            self.unlogged.store(true, Ordering::Release);
        }
    }

    /// True if a write without the redo log was inserted here.
    pub(crate) fn has_unlogged_writes(&self) -> bool {
        self.unlogged.load(Ordering::Acquire)
    }

    /// Marks the memtable immutable: no write with an LSN above `last_lsn` will be bound to it.
    pub(crate) fn seal(&self, last_lsn: Lsn) {
        self.sealed_lsn.store(last_lsn, Ordering::Release);
    }

    /// The last LSN that may be in this memtable, once sealed.
    pub(crate) fn sealed_lsn(&self) -> Option<Lsn> {
        match self.sealed_lsn.load(Ordering::Acquire) {
            u64::MAX => None,
            l => Some(l),
        }
    }

    /// Exact bytes of memory this memtable holds.
    pub(crate) fn memory_usage(&self) -> usize {
        self.arena.memory_usage()
    }

    /// Number of versions inserted.
    pub(crate) fn entries(&self) -> u64 {
        self.counts.entries.load(Ordering::Relaxed)
    }

    /// True if nothing was ever inserted.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries() == 0
    }

    /// Newest LSN inserted so far (0 while empty).
    #[cfg(test)]
    pub(crate) fn max_lsn(&self) -> Lsn {
        self.counts.max_lsn.load(Ordering::Relaxed)
    }

    /// Oldest LSN inserted so far (`u64::MAX` while empty).
    pub(crate) fn min_lsn(&self) -> Lsn {
        self.counts.min_lsn.load(Ordering::Relaxed)
    }

    /// `node.key` compared with `key`; the head and null (end) are handled by callers.
    ///
    /// # Safety
    /// `node` must be a published non-head node of this memtable.
    unsafe fn cmp_node(node: *const Node, key: &[u8]) -> CmpOrdering {
        // SAFETY: forwarded from the caller.
        crate::extent::cmp_bytes(unsafe { Node::key(node) }, key)
    }

    /// Finds, for every level, the last node with key < `key` (`prev`) and its successor
    /// (`next`, key >= `key` or null). Returns the level-0 successor.
    fn find_splice(&self, key: &[u8], prev: &mut [*const Node; MAX_HEIGHT], next: &mut [*const Node; MAX_HEIGHT]) {
        let mut x = self.head;
        let top = self.max_height.load(Ordering::Acquire);
        // As in `find_ge`: the successor found one level up is known to be >= `key`.
        let mut known_ge: *const Node = ptr::null();
        for level in (0..MAX_HEIGHT).rev() {
            if level >= top {
                prev[level] = self.head;
                next[level] = ptr::null();
                continue;
            }
            loop {
                // SAFETY: `x` is the head or a published node reached through links at a level
                // it has (levels only point to nodes at least that tall).
                let n = unsafe { Node::link(x, level) }.load(Ordering::Acquire);
                prefetch_descent(x, level);
                // SAFETY: `n` is a published non-head node when non-null.
                if !n.is_null() && !ptr::eq(n, known_ge) && unsafe { Self::cmp_node(n, key) } == CmpOrdering::Less {
                    x = n;
                } else {
                    prev[level] = x;
                    next[level] = n;
                    known_ge = n;
                    break;
                }
            }
        }
    }

    /// First node with key >= `key`, or null.
    fn find_ge(&self, key: &[u8]) -> *const Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        // The node last found to be >= `key`: met again one level down, it need not be
        // compared again (RocksDB's InlineSkipList does the same).
        let mut known_ge: *const Node = ptr::null();
        loop {
            // SAFETY: as in `find_splice`.
            let n = unsafe { Node::link(x, level) }.load(Ordering::Acquire);
            prefetch_descent(x, level);
            // SAFETY: as in `find_splice`.
            if !n.is_null() && !ptr::eq(n, known_ge) && unsafe { Self::cmp_node(n, key) } == CmpOrdering::Less {
                x = n;
            } else if level == 0 {
                return n;
            } else {
                known_ge = n;
                level -= 1;
            }
        }
    }

    /// Last node with key < `key` (or the last node at all when `key` is `None`); null if none.
    fn find_lt(&self, key: Option<&[u8]>) -> *const Node {
        let mut x = self.head;
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        loop {
            // SAFETY: as in `find_splice`.
            let n = unsafe { Node::link(x, level) }.load(Ordering::Acquire);
            let advance = !n.is_null()
                && match key {
                    // SAFETY: as in `find_splice`.
                    Some(k) => (unsafe { Self::cmp_node(n, k) }) == CmpOrdering::Less,
                    None => true,
                };
            if advance {
                x = n;
            } else if level == 0 {
                return if x == self.head { ptr::null() } else { x };
            } else {
                level -= 1;
            }
        }
    }

    /// Links `v` into `node`'s version chain at its LSN (see `versions.rs`).
    fn insert_version(&self, node: *const Node, v: *mut Version) {
        // SAFETY: `node` is a published node of this memtable, or our own unpublished one;
        // either way it lives as long as the arena.
        unsafe { (*node).versions.insert(&self.arena, v) }
    }

    /// Inserts a version of `key` and counts it. Safe to call from many threads at once.
    pub(crate) fn insert(&self, key: &[u8], lsn: Lsn, kind: ValueKind, value: &[u8]) {
        self.note_inserted(1, lsn, lsn);
        self.insert_uncounted(key, lsn, kind, value);
    }

    /// Counts `n` versions with LSNs in `min ..= max` inserted by [`Self::insert_uncounted`]
    /// (the write pipeline counts once per batch, not per version: these are shared cache
    /// lines). Must happen before the batch is placed (before any locked read may need the
    /// memtable's LSN range); snapshot reads never need it earlier, since the versions sit
    /// above the visible LSN until their group commits.
    pub(crate) fn note_inserted(&self, n: u64, min: Lsn, max: Lsn) {
        let c = &self.counts;
        c.entries.fetch_add(n, Ordering::Relaxed);
        if min < c.min_lsn.load(Ordering::Relaxed) {
            c.min_lsn.fetch_min(min, Ordering::Relaxed);
        }
        if max > c.max_lsn.load(Ordering::Relaxed) {
            c.max_lsn.fetch_max(max, Ordering::Relaxed);
        }
    }

    /// Inserts a version of `key` without counting it (see [`Self::note_inserted`]).
    pub(crate) fn insert_uncounted(&self, key: &[u8], lsn: Lsn, kind: ValueKind, value: &[u8]) {
        let mut prev = [ptr::null(); MAX_HEIGHT];
        let mut next = [ptr::null(); MAX_HEIGHT];
        self.find_splice(key, &mut prev, &mut next);
        // SAFETY: `next[0]` is null or a published node.
        if !next[0].is_null() && unsafe { Self::cmp_node(next[0], key) } == CmpOrdering::Equal {
            let version = Version::alloc(&self.arena, lsn, kind, value, random_height(MAX_VERSION_HEIGHT));
            self.insert_version(next[0], version);
            return;
        }
        // The first version of a key gets height 1: a chain's express lanes only pay once it
        // has many versions, and a taller first version would cost the key an upper-heads block
        // (96 bytes) one time in four even if it is never written again.
        let version = Version::alloc(&self.arena, lsn, kind, value, 1);

        let height = random_height(MAX_HEIGHT);
        let node = self.arena.alloc(Node::alloc_size(height, key.len())).cast::<Node>();
        // SAFETY: fresh, zeroed, aligned allocation sized for `height` links and the key.
        unsafe {
            ptr::addr_of_mut!((*node).key_len).write(key.len() as u32);
            ptr::addr_of_mut!((*node).height).write(height as u32);
            let key_dst = node
                .cast::<u8>()
                .add(offset_of!(Node, tower) + height * size_of::<AtomicPtr<Node>>());
            ptr::copy_nonoverlapping(key.as_ptr(), key_dst, key.len());
        }
        // The node is not published yet: this only links the version (and, if it is taller
        // than 1, the chain's upper heads) into our own node.
        self.insert_version(node, version);
        if height > self.max_height.load(Ordering::Relaxed) {
            self.max_height.fetch_max(height, Ordering::AcqRel);
        }

        // Level 0 decides whether our node or a racing node for the same key wins.
        loop {
            // SAFETY: `node` has height >= 1 and is not yet published.
            unsafe { Node::link(node, 0) }.store(next[0] as *mut Node, Ordering::Relaxed);
            // SAFETY: `prev[0]` is the head or a published node (height >= 1).
            let won = unsafe { Node::link(prev[0], 0) }
                .compare_exchange(next[0] as *mut Node, node, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if won {
                break;
            }
            self.refresh_level(key, 0, &mut prev, &mut next);
            // SAFETY: `next[0]` is null or published.
            if !next[0].is_null() && unsafe { Self::cmp_node(next[0], key) } == CmpOrdering::Equal {
                // Someone inserted the same key first: our node stays unlinked (arena waste)
                // and still points at the version, which nobody reads through it; link the
                // version into the winner's chain (insert rewrites every link it publishes).
                self.insert_version(next[0], version);
                return;
            }
        }
        for level in 1..height {
            loop {
                // SAFETY: `node` has height > level; `prev[level]` is the head or a node of
                // height > level.
                let ok = unsafe {
                    Node::link(node, level).store(next[level] as *mut Node, Ordering::Relaxed);
                    Node::link(prev[level], level)
                        .compare_exchange(next[level] as *mut Node, node, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                };
                if ok {
                    break;
                }
                self.refresh_level(key, level, &mut prev, &mut next);
            }
        }
    }

    /// Recomputes `prev[level]` / `next[level]` after a failed CAS, walking forward from the old
    /// `prev[level]` (keys only ever get inserted, so the splice can only move right).
    fn refresh_level(
        &self,
        key: &[u8],
        level: usize,
        prev: &mut [*const Node; MAX_HEIGHT],
        next: &mut [*const Node; MAX_HEIGHT],
    ) {
        let mut x = prev[level];
        loop {
            // SAFETY: `x` is the head or a published node of height > level.
            let n = unsafe { Node::link(x, level) }.load(Ordering::Acquire);
            // SAFETY: published node when non-null.
            if !n.is_null() && unsafe { Self::cmp_node(n, key) } == CmpOrdering::Less {
                x = n;
            } else {
                prev[level] = x;
                next[level] = n;
                return;
            }
        }
    }

    /// The newest version of `key` with LSN <= `snapshot`.
    pub(crate) fn get(&self, key: &[u8], snapshot: Lsn) -> Lookup<'_> {
        let node = self.find_ge(key);
        // SAFETY: published node when non-null.
        if node.is_null() || unsafe { Self::cmp_node(node, key) } != CmpOrdering::Equal {
            return Lookup::NotFound;
        }
        to_lookup(visible_version(node, snapshot))
    }

    /// A cursor over this memtable's keys; starts unpositioned.
    pub(crate) fn cursor(self: &std::sync::Arc<Self>) -> MemtableCursor {
        MemtableCursor {
            mem: self.clone(),
            node: ptr::null(),
        }
    }
}

/// The newest version of `node` with LSN <= `snapshot`: (LSN, kind, value), in O(log v).
fn visible_version<'a>(node: *const Node, snapshot: Lsn) -> Option<(Lsn, ValueKind, &'a [u8])> {
    // SAFETY: `node` is a published node of a memtable its caller keeps alive for 'a.
    unsafe { (*node).versions.visible(snapshot) }
}

fn to_lookup(found: Option<(Lsn, ValueKind, &[u8])>) -> Lookup<'_> {
    match found {
        Some((_, ValueKind::Put, v)) => Lookup::Value(v),
        Some((_, ValueKind::Delete, _)) => Lookup::Deleted,
        None => Lookup::NotFound,
    }
}

/// A position in a memtable, by user key. Holds the memtable alive.
pub(crate) struct MemtableCursor {
    mem: std::sync::Arc<Memtable>,
    /// Current node, or null when not positioned.
    node: *const Node,
}

// SAFETY: the cursor only holds a pointer into the memtable it keeps alive via `Arc`; the
// memtable itself is Send + Sync.
unsafe impl Send for MemtableCursor {}

impl MemtableCursor {
    /// True when positioned on a key.
    pub(crate) fn valid(&self) -> bool {
        !self.node.is_null()
    }

    /// The current user key. Panics-free: returns an empty slice when not valid.
    pub(crate) fn key(&self) -> &[u8] {
        if self.node.is_null() {
            return &[];
        }
        // SAFETY: `node` is a published node of `self.mem`, which is alive.
        unsafe { Node::key(self.node) }
    }

    /// The newest version of the current key visible at `snapshot`.
    #[cfg(test)]
    pub(crate) fn lookup(&self, snapshot: Lsn) -> Lookup<'_> {
        to_lookup(self.version(snapshot))
    }

    /// Versions of the current key linked at each level of its index (level 0 = all).
    #[cfg(test)]
    pub(crate) fn level_lengths(&self) -> Vec<usize> {
        assert!(!self.node.is_null());
        // SAFETY: `node` is a published node of `self.mem`, which the cursor keeps alive.
        unsafe { (*self.node).versions.level_lengths() }
    }

    /// Calls `f` for every version of the current key, newest first, until it returns false.
    /// Includes versions newer than the visible LSN; flush calls this only after every write
    /// bound to the memtable has committed.
    pub(crate) fn for_each_version<'a>(&'a self, f: impl FnMut(Lsn, ValueKind, &'a [u8]) -> bool) {
        if self.node.is_null() {
            return;
        }
        // SAFETY: `node` is a published node of `self.mem`, which the cursor keeps alive.
        unsafe { (*self.node).versions.for_each(f) }
    }

    /// The newest version of the current key visible at `snapshot`: (LSN, kind, value).
    pub(crate) fn version(&self, snapshot: Lsn) -> Option<(Lsn, ValueKind, &[u8])> {
        if self.node.is_null() {
            return None;
        }
        visible_version(self.node, snapshot)
    }

    /// Positions on the first key >= `key`.
    pub(crate) fn seek(&mut self, key: &[u8]) {
        self.node = self.mem.find_ge(key);
    }

    /// Positions on the last key <= `key`.
    pub(crate) fn seek_for_prev(&mut self, key: &[u8]) {
        let ge = self.mem.find_ge(key);
        // SAFETY: published node when non-null.
        if !ge.is_null() && unsafe { Memtable::cmp_node(ge, key) } == CmpOrdering::Equal {
            self.node = ge;
        } else {
            self.node = self.mem.find_lt(Some(key));
        }
    }

    /// Positions on the first key.
    pub(crate) fn seek_to_first(&mut self) {
        // SAFETY: the head has MAX_HEIGHT links.
        self.node = unsafe { Node::link(self.mem.head, 0) }.load(Ordering::Acquire);
    }

    /// Positions on the last key.
    pub(crate) fn seek_to_last(&mut self) {
        self.node = self.mem.find_lt(None);
    }

    /// Moves to the next key (invalid past the end).
    pub(crate) fn next(&mut self) {
        if !self.node.is_null() {
            // SAFETY: published node, height >= 1.
            self.node = unsafe { Node::link(self.node, 0) }.load(Ordering::Acquire);
        }
    }

    /// Moves to the previous key (invalid before the start).
    pub(crate) fn prev(&mut self) {
        if !self.node.is_null() {
            // SAFETY: published node of a live memtable.
            let key = unsafe { Node::key(self.node) };
            self.node = self.mem.find_lt(Some(key));
        }
    }
}

#[cfg(test)]
mod tests;
