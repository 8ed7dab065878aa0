//! The newest entries of a partition's Raft log, in memory: every entry appended and not yet
//! written to the engine (openraft reads an entry as soon as `append` returns, before it is
//! durable), and the most recent written ones up to a byte budget, so that the leader's
//! replication and the state machine read recent entries without touching the engine.
//!
//! Invariants:
//! - The cached indexes are contiguous (appends extend the top, truncations cut the top,
//!   purges and trims cut the bottom), and when any entry is cached the top one is the log's
//!   last entry.
//! - An entry leaves the cache by a trim only once the write that stored it in the engine has
//!   returned (its `written` mark is set for exactly that log id), so the union of the cache
//!   and the engine never has a hole.
//! - Entries from a truncated index on may still be in the engine until the writer has run
//!   the truncation: [`LogCache::truncated_from`] names the lowest such index, and readers
//!   ignore engine entries from it on.

use crate::types::TypeConfig;
use openraft::{Entry, LogId};
use parking_lot::Mutex;
use std::collections::BTreeMap;

type NodeId = u64;

/// Written entries kept for readers, at most (unwritten ones are always kept).
pub(super) const CACHE_BUDGET_BYTES: usize = 8 << 20;

struct Cached {
    entry: Entry<TypeConfig>,
    bytes: usize,
    written: bool,
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<u64, Cached>,
    bytes: usize,
    /// The lowest index truncated whose truncation the writer has not yet run, with the
    /// number of such truncations pending.
    truncated_from: Option<u64>,
    truncations_pending: usize,
}

/// See the module header.
#[derive(Default)]
pub(super) struct LogCache {
    inner: Mutex<Inner>,
}

impl LogCache {
    /// Adds appended entries (each with its encoded size), replacing any at the same index.
    pub(super) fn insert(&self, entries: Vec<(Entry<TypeConfig>, usize)>) {
        let mut inner = self.inner.lock();
        for (entry, bytes) in entries {
            inner.bytes += bytes;
            let index = entry.log_id.index;
            let cached = Cached {
                entry,
                bytes,
                written: false,
            };
            if let Some(old) = inner.entries.insert(index, cached) {
                inner.bytes -= old.bytes;
            }
        }
    }

    /// The engine holds these entries now: they may be trimmed. (A log id written again at
    /// its index after a truncation would be marked by the older write too; Raft never writes
    /// the same log id twice with other contents, so the engine then holds the same entry.)
    pub(super) fn mark_written(&self, ids: &[LogId<NodeId>]) {
        let mut inner = self.inner.lock();
        for id in ids {
            if let Some(c) = inner.entries.get_mut(&id.index) {
                if c.entry.log_id == *id {
                    c.written = true;
                }
            }
        }
        while inner.bytes > CACHE_BUDGET_BYTES {
            let Some(first) = inner.entries.first_entry() else {
                break;
            };
            if !first.get().written {
                break;
            }
            let bytes = first.remove().bytes;
            inner.bytes -= bytes;
        }
    }

    /// Drops the entries from `index` on; until [`LogCache::truncation_done`], readers ignore
    /// engine entries from there on.
    pub(super) fn truncate_from(&self, index: u64) {
        let mut inner = self.inner.lock();
        let cut = inner.entries.split_off(&index);
        inner.bytes -= cut.values().map(|c| c.bytes).sum::<usize>();
        inner.truncated_from = Some(inner.truncated_from.map_or(index, |t| t.min(index)));
        inner.truncations_pending += 1;
    }

    /// The writer ran one truncation; once none is pending, the engine is exact again.
    pub(super) fn truncation_done(&self) {
        let mut inner = self.inner.lock();
        inner.truncations_pending = inner.truncations_pending.saturating_sub(1);
        if inner.truncations_pending == 0 {
            inner.truncated_from = None;
        }
    }

    /// Drops the entries up to `index` (inclusive).
    pub(super) fn purge_upto(&self, index: u64) {
        let mut inner = self.inner.lock();
        let kept = match index.checked_add(1) {
            Some(next) => inner.entries.split_off(&next),
            None => BTreeMap::new(),
        };
        let dropped = std::mem::replace(&mut inner.entries, kept);
        inner.bytes -= dropped.values().map(|c| c.bytes).sum::<usize>();
    }

    /// The cached entries from `from` through `to` (inclusive), the lowest cached index (none
    /// when the cache is empty) and the index from which the engine's entries are truncated.
    pub(super) fn read(&self, from: u64, to: u64) -> CachedRead {
        let inner = self.inner.lock();
        let entries = if from <= to {
            inner.entries.range(from..=to).map(|(_, c)| c.entry.clone()).collect()
        } else {
            Vec::new()
        };
        CachedRead {
            entries,
            lowest: inner.entries.keys().next().copied(),
            truncated_from: inner.truncated_from,
        }
    }
}

/// What [`LogCache::read`] found.
pub(super) struct CachedRead {
    pub(super) entries: Vec<Entry<TypeConfig>>,
    pub(super) lowest: Option<u64>,
    pub(super) truncated_from: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::log_id;
    use openraft::EntryPayload;

    fn entry(term: u64, index: u64) -> (Entry<TypeConfig>, usize) {
        (
            Entry {
                log_id: log_id(term, 1, index),
                payload: EntryPayload::Blank,
            },
            CACHE_BUDGET_BYTES / 4,
        )
    }

    fn indexes(read: &CachedRead) -> Vec<u64> {
        read.entries.iter().map(|e| e.log_id.index).collect()
    }

    #[test]
    fn only_written_entries_are_trimmed_and_only_for_the_id_written() {
        let cache = LogCache::default();
        cache.insert((1..=6).map(|i| entry(1, i)).collect());
        // Over budget, but nothing written: everything stays.
        assert_eq!(indexes(&cache.read(1, 10)), vec![1, 2, 3, 4, 5, 6]);
        // Entry 2 is replaced (a new term) before the write of the old one returns: the old
        // write's mark does not cover the new entry.
        cache.truncate_from(2);
        cache.insert((2..=6).map(|i| entry(2, i)).collect());
        cache.mark_written(&[log_id(1, 1, 1), log_id(1, 1, 2), log_id(1, 1, 3)]);
        let read = cache.read(1, 10);
        assert_eq!(
            indexes(&read),
            vec![2, 3, 4, 5, 6],
            "entry 1 trimmed, the rest unwritten"
        );
        assert_eq!(read.lowest, Some(2));
        assert_eq!(read.truncated_from, Some(2));
        cache.truncation_done();
        assert_eq!(cache.read(1, 1).truncated_from, None);
        cache.mark_written(&(2..=6).map(|i| log_id(2, 1, i)).collect::<Vec<_>>());
        // Trimmed down to the budget (4 entries of a quarter each).
        assert_eq!(indexes(&cache.read(1, 10)), vec![3, 4, 5, 6]);
    }

    #[test]
    fn purges_and_truncations_cut_the_ends() {
        let cache = LogCache::default();
        cache.insert((1..=3).map(|i| (entry(1, i).0, 10)).collect());
        cache.purge_upto(1);
        cache.truncate_from(3);
        let read = cache.read(0, u64::MAX);
        assert_eq!(indexes(&read), vec![2]);
        assert_eq!(read.lowest, Some(2));
        cache.purge_upto(u64::MAX);
        assert_eq!(cache.read(0, u64::MAX).lowest, None);
        assert!(cache.read(5, 4).entries.is_empty());
    }
}
