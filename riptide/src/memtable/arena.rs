//! A concurrent bump allocator for one memtable.
//!
//! Invariants:
//! - Memory handed out is never moved or freed until the `Arena` is dropped, so raw pointers
//!   into it stay valid for the arena's lifetime.
//! - Every allocation is 8-byte aligned and zero-initialised.
//! - Small allocations of one thread come from its shard's chunk; a chunk, like any
//!   allocation, lies inside one block.
//! - [`Arena::memory_usage`] is exact: the sum of the sizes of all blocks obtained from the
//!   global allocator (block waste included), which is what the memtable charges against
//!   `write_buffer_size`.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Size of a regular arena block, unless the memtable is small (see [`Arena::with_block_size`]).
pub(crate) const BLOCK_SIZE: usize = 1 << 20;
/// Smallest block size.
pub(crate) const MIN_BLOCK_SIZE: usize = 4 << 10;
/// Shards small allocations are spread over, by thread.
const SHARDS: usize = 8;

/// A run of free bytes: the rest of a block, or a shard's chunk of one.
struct Bump {
    ptr: *mut u8,
    len: usize,
}

impl Bump {
    const EMPTY: Bump = Bump {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// `size` bytes from the front, if there are that many.
    fn take(&mut self, size: usize) -> Option<*mut u8> {
        if self.len < size {
            return None;
        }
        let ptr = self.ptr;
        // SAFETY: `len >= size`, so `ptr + size` stays inside (or one past the end of) the run,
        // which lies inside one block.
        self.ptr = unsafe { ptr.add(size) };
        self.len -= size;
        Some(ptr)
    }
}

struct ArenaState {
    /// Every block, kept only to own (and eventually free) the memory.
    blocks: Vec<Box<[u64]>>,
    /// The free part of the current block.
    free: Bump,
}

/// Bump allocator; see the module header.
///
/// Small allocations come from one of [`SHARDS`] per-thread chunks (a thread always uses the
/// same shard), refilled from the current block, so threads inserting in parallel do not all
/// take one mutex twice per version (RocksDB's `ConcurrentArena` does the same).
pub(crate) struct Arena {
    state: Mutex<ArenaState>,
    shards: [CachePadded<Mutex<Bump>>; SHARDS],
    usage: AtomicUsize,
    /// Regular block size; allocations over a quarter of it get a block of their own (limits
    /// waste at block ends).
    block_size: usize,
    /// Bytes a shard takes from the current block at a time: an eighth of a block.
    chunk: usize,
}

// SAFETY: every `Bump` points into a block owned by the same `ArenaState` and is only read or
// advanced under its mutex; the blocks are heap memory with no thread affinity.
unsafe impl Send for Arena {}
// SAFETY: all mutation goes through the mutexes or atomics (see `Send` above).
unsafe impl Sync for Arena {}

impl Arena {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_block_size(BLOCK_SIZE)
    }

    /// An arena whose regular blocks are `block_size` bytes (clamped to 4 KiB ..= 1 MiB), so a
    /// small memtable is not charged a whole 1 MiB block for its first entry.
    pub(crate) fn with_block_size(block_size: usize) -> Self {
        let block_size = block_size.clamp(MIN_BLOCK_SIZE, BLOCK_SIZE).next_multiple_of(8);
        Arena {
            block_size,
            chunk: (block_size / 8).next_multiple_of(8),
            state: Mutex::new(ArenaState {
                blocks: Vec::new(),
                free: Bump::EMPTY,
            }),
            shards: std::array::from_fn(|_| CachePadded::new(Mutex::new(Bump::EMPTY))),
            usage: AtomicUsize::new(0),
        }
    }

    /// Exact bytes obtained from the global allocator.
    pub(crate) fn memory_usage(&self) -> usize {
        self.usage.load(Ordering::Relaxed)
    }

    /// Returns `size` bytes, 8-byte aligned and zeroed, valid until the arena is dropped.
    pub(crate) fn alloc(&self, size: usize) -> *mut u8 {
        let size = size.max(1).next_multiple_of(8);
        if size > self.chunk / 4 {
            return self.alloc_from_block(size);
        }
        let mut shard = self.shards[crate::thread_index::thread_index() % SHARDS].lock();
        if let Some(ptr) = shard.take(size) {
            return ptr;
        }
        // The rest of the old chunk (fewer than `size` bytes) stays unused.
        *shard = Bump {
            ptr: self.alloc_from_block(self.chunk),
            len: self.chunk,
        };
        shard.take(size).unwrap_or_else(|| self.alloc_from_block(size))
    }

    /// `size` bytes from the current block (a new one when it is short), or a block of its own
    /// for an allocation over a quarter of a block.
    fn alloc_from_block(&self, size: usize) -> *mut u8 {
        let mut state = self.state.lock();
        if size > self.block_size / 4 {
            return Self::new_block(&mut state, &self.usage, size);
        }
        if let Some(ptr) = state.free.take(size) {
            return ptr;
        }
        let ptr = Self::new_block(&mut state, &self.usage, self.block_size);
        state.free = Bump {
            // SAFETY: `size <= block_size / 4`, so this stays inside the new block.
            ptr: unsafe { ptr.add(size) },
            len: self.block_size - size,
        };
        ptr
    }

    fn new_block(state: &mut ArenaState, usage: &AtomicUsize, size: usize) -> *mut u8 {
        let words = size.div_ceil(8);
        let mut block = vec![0u64; words].into_boxed_slice();
        let ptr = block.as_mut_ptr().cast::<u8>();
        state.blocks.push(block);
        usage.fetch_add(words * 8 + std::mem::size_of::<Box<[u64]>>(), Ordering::Relaxed);
        ptr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_accounted() {
        let arena = Arena::new();
        assert_eq!(arena.memory_usage(), 0);
        let mut ptrs = Vec::new();
        for i in 1..2000usize {
            let p = arena.alloc(i % 100 + 1);
            assert_eq!(p as usize % 8, 0);
            // SAFETY: `p` is a fresh allocation of at least `i % 100 + 1` bytes.
            unsafe { std::ptr::write_bytes(p, (i % 251) as u8, i % 100 + 1) };
            ptrs.push((p, i));
        }
        for (p, i) in ptrs {
            // SAFETY: as above; no other allocation overlaps it, so the bytes are still ours.
            let s = unsafe { std::slice::from_raw_parts(p, i % 100 + 1) };
            assert!(s.iter().all(|&b| b == (i % 251) as u8));
        }
        assert!(arena.memory_usage() >= BLOCK_SIZE);
        let before = arena.memory_usage();
        arena.alloc(BLOCK_SIZE / 4 + 1);
        assert!(arena.memory_usage() > before + BLOCK_SIZE / 4);
    }

    #[test]
    fn small_arenas_use_small_blocks() {
        let arena = Arena::with_block_size(64 << 10);
        arena.alloc(100);
        assert_eq!(arena.memory_usage(), (64 << 10) + std::mem::size_of::<Box<[u64]>>());
        let tiny = Arena::with_block_size(1);
        tiny.alloc(8);
        assert_eq!(tiny.memory_usage(), MIN_BLOCK_SIZE + std::mem::size_of::<Box<[u64]>>());
    }

    #[test]
    fn concurrent_allocations_do_not_overlap() {
        // More threads than shards (two share each), sizes from 8 bytes to over a chunk's
        // quarter (their own path) and over a block's quarter (a block of their own), and
        // enough of them that every shard refills its chunk many times.
        let arena = Arena::new();
        let threads = 2 * SHARDS as u8;
        std::thread::scope(|s| {
            for t in 0..threads {
                let arena = &arena;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..6000usize {
                        let size = match i % 500 {
                            0 => BLOCK_SIZE / 4 + 8,
                            1 => BLOCK_SIZE / 32 + 8,
                            _ => 8 + (i * 7 + t as usize) % 300,
                        };
                        let p = arena.alloc(size);
                        assert_eq!(p as usize % 8, 0);
                        // SAFETY: fresh allocation of `size` bytes owned by this thread.
                        unsafe { std::ptr::write_bytes(p, t, size) };
                        mine.push((p as usize, size));
                    }
                    for (p, size) in mine {
                        // SAFETY: allocations are never reused, so ours still holds `t`.
                        let s = unsafe { std::slice::from_raw_parts(p as *const u8, size) };
                        assert!(s.iter().all(|&b| b == t));
                    }
                });
            }
        });
        assert!(arena.memory_usage() >= threads as usize * 6000 * 8);
    }
}
