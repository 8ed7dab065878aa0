//! The in-memory levels of one sub-table ([`LevelSet`]) and its [`MetaSnapshot`]: memtables
//! plus levels, published copy-on-write.
//!
//! Invariants:
//! - A `LevelSet` is immutable once built. A change (flush, compaction) builds a new one that
//!   shares every untouched [`Layer`] and every untouched [`LiveExtent`] with the old one.
//! - L0 holds layers newest first (descending layer id); extents inside a layer do not overlap
//!   and are sorted by smallest key. L1 and L2 are one layer each (id 0).
//! - No user key spans two extents of one layer (the builders cut extents only between user
//!   keys), so a point lookup reads at most one extent per layer.
//! - An extent removed by a change is marked obsolete only after the new `LevelSet` is built;
//!   its slots are freed when the last `LevelSet` holding it drops.

use crate::error::{Error, Result};
use crate::extent::PackedKeys;
use crate::extent_store::{ExtentStore, LiveExtent};
use crate::key::{compare_internal_keys, Lsn};
use crate::memtable::Memtable;
use crate::meta::edit::{TableEdit, TableMeta};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(crate) use crate::LEVELS;

/// One sorted run of non-overlapping extents.
#[derive(Debug)]
pub(crate) struct Layer {
    pub(crate) id: u64,
    pub(crate) extents: Vec<Arc<LiveExtent>>,
    /// The extents' largest keys packed together, so [`Self::find`] searches small dense
    /// arrays instead of chasing a pointer per step.
    largest: PackedKeys,
}

impl Layer {
    /// A layer of `extents`, which must be sorted and disjoint.
    pub(crate) fn new(id: u64, extents: Vec<Arc<LiveExtent>>) -> Layer {
        let largest = PackedKeys::new(extents.iter().map(|e| e.meta.largest.as_slice()));
        Layer { id, extents, largest }
    }

    fn sort(extents: &mut [Arc<LiveExtent>]) {
        extents.sort_by(|a, b| compare_internal_keys(&a.meta.smallest, &b.meta.smallest));
    }

    /// Index of the only extent that can hold `seek` (an internal key): the first whose
    /// largest key is >= `seek`.
    pub(crate) fn find(&self, seek: &[u8]) -> Option<usize> {
        let i = self.largest.lower_bound(seek);
        (i < self.extents.len()).then_some(i)
    }

    /// Total valid bytes of the layer's extents.
    pub(crate) fn bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.meta.data_size).sum()
    }
}

/// The extents of one sub-table by level.
#[derive(Debug)]
pub(crate) struct LevelSet {
    /// L0 layers, newest (highest id) first.
    pub(crate) l0: Vec<Arc<Layer>>,
    /// L1 and L2 (index 0 = L1).
    pub(crate) sorted: [Arc<Layer>; 2],
    /// Highest LSN of any version in any extent (0 when empty).
    pub(crate) max_lsn: Lsn,
    /// Valid bytes per level (for write stalls on pending compaction bytes).
    pub(crate) level_bytes: [u64; LEVELS],
}

impl LevelSet {
    pub(crate) fn empty() -> Self {
        LevelSet {
            l0: Vec::new(),
            sorted: [Arc::new(Layer::new(0, Vec::new())), Arc::new(Layer::new(0, Vec::new()))],
            max_lsn: 0,
            level_bytes: [0; LEVELS],
        }
    }

    /// Recomputes the derived fields (`max_lsn`, `level_bytes`).
    fn finish(&mut self) {
        self.max_lsn = self.all_extents().map(|e| e.meta.max_lsn).max().unwrap_or(0);
        self.level_bytes = [
            self.l0.iter().map(|l| l.bytes()).sum(),
            self.sorted[0].bytes(),
            self.sorted[1].bytes(),
        ];
    }

    /// Bytes compaction still has to move: all of L0, and L1 beyond `l1_target` bytes.
    pub(crate) fn pending_compaction_bytes(&self, l1_target: u64) -> u64 {
        self.level_bytes[0] + self.level_bytes[1].saturating_sub(l1_target)
    }

    /// Builds the level set of a recovered table.
    pub(crate) fn from_meta(store: &Arc<ExtentStore>, table: &TableMeta) -> Self {
        let mut set = LevelSet::empty();
        for (level, layers) in table.levels.iter().enumerate() {
            for (&id, metas) in layers {
                let mut extents: Vec<Arc<LiveExtent>> = metas.iter().map(|m| store.live(m.clone())).collect();
                Layer::sort(&mut extents);
                let layer = Arc::new(Layer::new(id, extents));
                if level == 0 {
                    set.l0.push(layer);
                } else {
                    set.sorted[level - 1] = layer;
                }
            }
        }
        set.l0.sort_by_key(|l| std::cmp::Reverse(l.id));
        set.finish();
        set
    }

    /// Every layer in read order: L0 newest first, then L1, then L2.
    pub(crate) fn layers(&self) -> impl Iterator<Item = &Arc<Layer>> {
        self.l0.iter().chain(self.sorted.iter())
    }

    /// Every extent of every level.
    pub(crate) fn all_extents(&self) -> impl Iterator<Item = &Arc<LiveExtent>> {
        self.layers().flat_map(|l| l.extents.iter())
    }

    /// Applies `edit` copy-on-write: returns the new set and the extents it dropped (to be
    /// marked obsolete once the new set is installed). `added` extents whose id is also in
    /// `removed` are moves (data reuse) and keep their `LiveExtent`.
    pub(crate) fn apply(&self, store: &Arc<ExtentStore>, edit: &TableEdit) -> Result<(LevelSet, Vec<Arc<LiveExtent>>)> {
        let bad = |reason: String| Error::Corruption {
            path: "<metadata>".into(),
            offset: 0,
            reason,
        };
        // Working copy: (level, layer id) -> extents.
        let mut layers: BTreeMap<(u8, u64), Vec<Arc<LiveExtent>>> = BTreeMap::new();
        for l in &self.l0 {
            layers.insert((0, l.id), l.extents.clone());
        }
        for (i, l) in self.sorted.iter().enumerate() {
            layers.insert((i as u8 + 1, 0), l.extents.clone());
        }
        let mut touched: Vec<(u8, u64)> = Vec::new();
        let mut removed: HashMap<u64, Arc<LiveExtent>> = HashMap::new();
        for &(level, layer, id) in &edit.removed {
            let v = layers
                .get_mut(&(level, layer))
                .ok_or_else(|| bad(format!("edit removes from missing layer L{level}/{layer}")))?;
            let pos = v
                .iter()
                .position(|e| e.meta.id == id)
                .ok_or_else(|| bad(format!("edit removes extent {id:#x} not in L{level}/{layer}")))?;
            removed.insert(id, v.remove(pos));
            touched.push((level, layer));
        }
        for (level, layer, meta) in &edit.added {
            if usize::from(*level) >= LEVELS || (*level > 0 && *layer != 0) {
                return Err(bad(format!("edit adds to invalid layer L{level}/{layer}")));
            }
            let live = match removed.remove(&meta.id) {
                Some(moved) => moved,
                None => store.live(meta.clone()),
            };
            layers.entry((*level, *layer)).or_default().push(live);
            touched.push((*level, *layer));
        }
        let mut next = LevelSet::empty();
        for ((level, layer), mut extents) in layers {
            let shared = if level == 0 {
                self.l0.iter().find(|l| l.id == layer).cloned()
            } else {
                Some(self.sorted[usize::from(level) - 1].clone())
            };
            let arc = match shared {
                Some(old) if !touched.contains(&(level, layer)) => old,
                _ => {
                    Layer::sort(&mut extents);
                    check_disjoint(&extents).map_err(|r| bad(format!("L{level}/{layer}: {r}")))?;
                    Arc::new(Layer::new(layer, extents))
                }
            };
            if level == 0 {
                if !arc.extents.is_empty() {
                    next.l0.push(arc);
                }
            } else {
                next.sorted[usize::from(level) - 1] = arc;
            }
        }
        next.l0.sort_by_key(|l| std::cmp::Reverse(l.id));
        next.finish();
        Ok((next, removed.into_values().collect()))
    }
}

/// Checks that sorted extents do not overlap in user keys.
fn check_disjoint(extents: &[Arc<LiveExtent>]) -> std::result::Result<(), String> {
    for w in extents.windows(2) {
        let a = crate::extent_store::user_part(&w[0].meta.largest);
        let b = crate::extent_store::user_part(&w[1].meta.smallest);
        if a >= b {
            return Err(format!("extents {} and {} overlap", w[0].id, w[1].id));
        }
    }
    Ok(())
}

/// What a reader of one sub-table pins: its memtables and its levels, consistent with each
/// other. Published copy-on-write; readers hold an `Arc` without taking a lock.
pub(crate) struct MetaSnapshot {
    /// The memtable taking writes.
    pub(crate) active: Arc<Memtable>,
    /// Immutable memtables, newest first (the last one is flushed next).
    pub(crate) immutables: Vec<Arc<Memtable>>,
    /// Extents by level.
    pub(crate) levels: Arc<LevelSet>,
    /// Bumped whenever `levels` changes (guards row-cache inserts against racing flushes).
    pub(crate) version: u64,
    /// Flushes dropped versions that no reader at an LSN >= this can see; a read whose LSN is
    /// not a registered snapshot must use an LSN >= this (see `TableInner::pin`).
    pub(crate) gc_horizon: Lsn,
}

impl MetaSnapshot {
    /// All memtables, newest first.
    pub(crate) fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.immutables.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;
    use crate::key::{encode_internal_key, ValueKind};
    use crate::meta::edit::ExtentMeta;
    use crate::space::{ExtentSpace, SpaceOptions};
    use std::cmp::Ordering;

    fn ikey(user: &[u8], lsn: u64) -> Vec<u8> {
        let mut v = Vec::new();
        encode_internal_key(&mut v, user, lsn, ValueKind::Put);
        v
    }

    #[test]
    fn layer_find_matches_a_search_over_the_extents() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn crate::fs::FileSystem> = Arc::new(PosixFs);
        let space = Arc::new(ExtentSpace::open(fs, dir.path(), SpaceOptions::default()).unwrap());
        let store = Arc::new(ExtentStore::new(space, 0, 16));
        // Extents with user keys of different lengths (one a prefix of the next) and several
        // versions of one key split across two extents' boundaries.
        let bounds: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (ikey(b"a", 5), ikey(b"ab", 3)),
            (ikey(b"abc", 9), ikey(b"abc", 7)),
            (ikey(b"abc", 6), ikey(b"b", 1)),
            (ikey(b"ba", 4), ikey(b"bzzzzzzzzzzzzzzzzzzz", 2)),
            (ikey(b"c", 8), ikey(b"d", 8)),
        ];
        let extents: Vec<Arc<LiveExtent>> = bounds
            .iter()
            .enumerate()
            .map(|(i, (lo, hi))| {
                store.live(ExtentMeta {
                    id: i as u64 + 1,
                    slots: 1,
                    table: 0,
                    smallest: lo.clone(),
                    largest: hi.clone(),
                    min_lsn: 1,
                    max_lsn: 9,
                    entries: 1,
                    deletes: 0,
                    data_size: 1,
                    blocks: 1,
                })
            })
            .collect();
        let layer = Layer::new(7, extents.clone());
        let users: [&[u8]; 12] = [
            b"",
            b"a",
            b"aa",
            b"ab",
            b"abb",
            b"abc",
            b"abcd",
            b"b",
            b"ba",
            b"bzzzzzzzzzzzzzzzzzzz",
            b"c",
            b"zz",
        ];
        for user in users {
            for lsn in [0, 1, 2, 5, 6, 7, 8, 9, 100] {
                let seek = ikey(user, lsn);
                let want = extents.partition_point(|e| compare_internal_keys(&e.meta.largest, &seek) == Ordering::Less);
                let want = (want < extents.len()).then_some(want);
                assert_eq!(layer.find(&seek), want, "user {user:?} lsn {lsn}");
            }
        }
        assert_eq!(Layer::new(0, Vec::new()).find(&ikey(b"a", 1)), None);
    }
}
