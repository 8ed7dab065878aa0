//! A concurrent bump allocator for one memtable.
//!
//! Invariants:
//! - Memory handed out is never moved or freed until the `Arena` is dropped, so raw pointers
//!   into it stay valid for the arena's lifetime.
//! - Every allocation is 8-byte aligned and zero-initialised.
//! - [`Arena::memory_usage`] is exact: the sum of the sizes of all blocks obtained from the
//!   global allocator (block waste included), which is what the memtable charges against
//!   `write_buffer_size`.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Size of a regular arena block, unless the memtable is small (see [`Arena::with_block_size`]).
pub(crate) const BLOCK_SIZE: usize = 1 << 20;
/// Smallest block size.
pub(crate) const MIN_BLOCK_SIZE: usize = 4 << 10;

struct ArenaState {
    /// Every block, kept only to own (and eventually free) the memory.
    blocks: Vec<Box<[u64]>>,
    /// Start of the free part of the current block.
    free_ptr: *mut u8,
    /// Bytes left in the current block.
    free_len: usize,
}

/// Bump allocator; see the module header.
pub(crate) struct Arena {
    state: Mutex<ArenaState>,
    usage: AtomicUsize,
    /// Regular block size; allocations over a quarter of it get a block of their own (limits
    /// waste at block ends).
    block_size: usize,
}

// SAFETY: `free_ptr` points into a block owned by the same `ArenaState` and is only read or
// advanced under the mutex; the blocks are heap memory with no thread affinity.
unsafe impl Send for Arena {}
// SAFETY: all mutation goes through the mutex or atomics (see `Send` above).
unsafe impl Sync for Arena {}

impl Arena {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_block_size(BLOCK_SIZE)
    }

    /// An arena whose regular blocks are `block_size` bytes (clamped to 4 KiB ..= 1 MiB), so a
    /// small memtable is not charged a whole 1 MiB block for its first entry.
    pub(crate) fn with_block_size(block_size: usize) -> Self {
        Arena {
            block_size: block_size.clamp(MIN_BLOCK_SIZE, BLOCK_SIZE).next_multiple_of(8),
            state: Mutex::new(ArenaState {
                blocks: Vec::new(),
                free_ptr: std::ptr::null_mut(),
                free_len: 0,
            }),
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
        if size > self.block_size / 4 {
            let mut state = self.state.lock();
            return Self::new_block(&mut state, &self.usage, size);
        }
        let mut state = self.state.lock();
        if state.free_len < size {
            let ptr = Self::new_block(&mut state, &self.usage, self.block_size);
            state.free_ptr = ptr;
            state.free_len = self.block_size;
        }
        let ptr = state.free_ptr;
        // SAFETY: `free_len >= size`, so `ptr + size` stays inside (or one past the end of)
        // the current block.
        state.free_ptr = unsafe { ptr.add(size) };
        state.free_len -= size;
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
        let arena = Arena::new();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let arena = &arena;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..5000 {
                        let p = arena.alloc(24);
                        // SAFETY: fresh 24-byte allocation owned by this thread.
                        unsafe { std::ptr::write_bytes(p, t, 24) };
                        mine.push(p as usize);
                    }
                    for p in mine {
                        // SAFETY: allocations are never reused, so ours still holds `t`.
                        let s = unsafe { std::slice::from_raw_parts(p as *const u8, 24) };
                        assert!(s.iter().all(|&b| b == t));
                    }
                });
            }
        });
    }
}
