//! A small number per thread, for spreading threads over stripes, shards and queues (striped
//! counters, the write queues, the memtable arena's shards, the snapshot list's stripes).
//!
//! Invariants: a thread's number never changes; numbers are handed out in order of first use,
//! so threads that each take `number % n` spread evenly over `n` slots.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static NUMBER: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// This thread's number (assigned on first use).
#[inline]
pub(crate) fn thread_index() -> usize {
    NUMBER.with(|n| {
        if n.get() == usize::MAX {
            n.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        n.get()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_number_and_threads_get_distinct_ones() {
        let mine = thread_index();
        assert_eq!(thread_index(), mine);
        let others: Vec<usize> = (0..8)
            .map(|_| std::thread::spawn(thread_index).join().unwrap())
            .collect();
        let mut all = others.clone();
        all.push(mine);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 9, "{others:?} and {mine}");
    }
}
