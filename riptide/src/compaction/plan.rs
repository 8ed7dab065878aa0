//! Planning a compaction: which extents of which levels a compaction of each kind takes, where
//! its output goes, which keys no output extent may reach across (fences), and whether the
//! output is the bottom of its key range (so tombstones can be purged).
//!
//! Invariants:
//! - Inputs are whole runs or whole extents: a user key is never split between an input and a
//!   non-input of the same level.
//! - For compactions into L1 or L2, every output-level extent overlapping the inputs' range is
//!   an input too, so the output level stays one sorted run.
//! - `bottom` holds only if no level below the output holds a key of the inputs' range.

use super::job::{Plan, Run};
use super::{packable, purgeable, CompactionKind, KeyRange};
use crate::extent_store::{user_part, ExtentStore, LiveExtent};
use crate::key::{Lsn, ValueKind};
use crate::version::{Layer, LevelSet};
use std::sync::Arc;

/// Most L0 layers one intra-L0 compaction merges.
const MAX_INTRA_L0_LAYERS: usize = 16;

/// The inputs a compaction kind chose, before the output level's overlapping extents join.
#[derive(Default)]
struct Chosen {
    runs: Vec<Run>,
    out_level: u8,
    out_layer: u64,
    /// Rewrite every input without data reuse (manual compactions).
    force: bool,
    /// Rewrite every input, even one alone in its closed range (self-major, split).
    rewrite: bool,
    /// Cuts a split makes (starts of the L2 extents the chosen L1 extents skip).
    split_fences: Vec<Vec<u8>>,
}

impl Chosen {
    fn into(out_level: u8, runs: Vec<Run>) -> Chosen {
        Chosen {
            runs,
            out_level,
            ..Default::default()
        }
    }
}

fn run(level: u8, layer: u64, extents: Vec<Arc<LiveExtent>>) -> Run {
    Run { level, layer, extents }
}

/// The oldest L0 layers (up to [`MAX_INTRA_L0_LAYERS`]) into the oldest one's layer id.
fn intra_l0(levels: &LevelSet) -> Option<Chosen> {
    if levels.l0.len() < 2 {
        return None;
    }
    let take = levels.l0.len().min(MAX_INTRA_L0_LAYERS);
    let oldest = &levels.l0[levels.l0.len() - take..];
    let runs = oldest.iter().map(|l| run(0, l.id, l.extents.clone())).collect();
    Some(Chosen {
        out_layer: oldest.last()?.id,
        ..Chosen::into(0, runs)
    })
}

/// Every L0 layer into L1.
fn minor(levels: &LevelSet) -> Option<Chosen> {
    if levels.l0.is_empty() {
        return None;
    }
    let runs = levels.l0.iter().map(|l| run(0, l.id, l.extents.clone())).collect();
    Some(Chosen::into(1, runs))
}

/// All of L1 into L2.
fn major(levels: &LevelSet) -> Option<Chosen> {
    if levels.sorted[0].extents.is_empty() {
        return None;
    }
    Some(Chosen::into(2, vec![run(1, 0, levels.sorted[0].extents.clone())]))
}

/// Fewest L1 extents for which [`major_cold`] pushes only part of L1 down.
const MIN_COLD_WINDOW_L1: usize = 4;

/// The coldest contiguous half of L1 into L2 (seed 000 App. C: the coldest extents go down,
/// warm ones stay up): the window of `ceil(N1 / 2)` L1 extents with the least total
/// temperature, first such window on ties. A contiguous window keeps the L2 extents it pulls
/// in to its own key range. Small L1s go down whole.
fn major_cold(levels: &LevelSet) -> Option<Chosen> {
    let l1 = &levels.sorted[0].extents;
    if l1.len() < MIN_COLD_WINDOW_L1 {
        return major(levels);
    }
    let k = l1.len().div_ceil(2);
    let temps: Vec<u64> = l1.iter().map(|e| u64::from(e.temperature())).collect();
    let mut sum: u64 = temps[..k].iter().sum();
    let (mut best, mut best_sum) = (0, sum);
    for start in 1..=l1.len() - k {
        sum = sum + temps[start + k - 1] - temps[start - 1];
        if sum < best_sum {
            (best, best_sum) = (start, sum);
        }
    }
    Some(Chosen::into(2, vec![run(1, 0, l1[best..best + k].to_vec())]))
}

/// Delete-heavy L2 extents whose deletes can go, and runs of sparse ones worth packing: every
/// chosen extent is rewritten, copying the blocks that need no merge.
fn major_self(levels: &LevelSet, oldest_snapshot: Option<Lsn>) -> Option<Chosen> {
    let l2 = &levels.sorted[1].extents;
    let pack: Vec<u64> = packable(l2).iter().map(|e| e.meta.id).collect();
    let chosen: Vec<Arc<LiveExtent>> = l2
        .iter()
        .filter(|e| purgeable(&e.meta, oldest_snapshot) || pack.contains(&e.meta.id))
        .cloned()
        .collect();
    if chosen.is_empty() {
        return None;
    }
    Some(Chosen {
        rewrite: true,
        ..Chosen::into(2, vec![run(2, 0, chosen)])
    })
}

/// The L1 extents whose rows skip whole L2 extents, cut within L1 where those start.
fn split(store: &ExtentStore, levels: &LevelSet) -> Option<Chosen> {
    let l2 = &levels.sorted[1].extents;
    let mut chosen = Vec::new();
    let mut split_fences = Vec::new();
    for e in &levels.sorted[0].extents {
        let Some(cuts) = split_points(store, e, l2) else {
            continue;
        };
        split_fences.extend(cuts);
        chosen.push(e.clone());
    }
    if chosen.is_empty() {
        return None;
    }
    Some(Chosen {
        rewrite: true,
        split_fences,
        ..Chosen::into(1, vec![run(1, 0, chosen)])
    })
}

/// Every L2 extent rewritten (only while L1 is empty).
fn l2_rewrite(levels: &LevelSet) -> Option<Chosen> {
    if levels.sorted[1].extents.is_empty() || !levels.sorted[0].extents.is_empty() {
        return None;
    }
    Some(Chosen {
        force: true,
        ..Chosen::into(2, vec![run(2, 0, levels.sorted[1].extents.clone())])
    })
}

/// The L0 extents overlapping `range`, closed under overlap across L0 layers (so no older L0
/// version stays above a newer L1 one), into L1.
fn minor_range(levels: &LevelSet, range: &KeyRange) -> Option<Chosen> {
    let mut r = range.clone();
    loop {
        let mut changed = false;
        for e in levels.l0.iter().flat_map(|l| l.extents.iter()) {
            if r.overlaps(e) {
                changed |= r.widen(e);
            }
        }
        if !changed {
            break;
        }
    }
    let mut runs = Vec::new();
    for l in &levels.l0 {
        let extents: Vec<Arc<LiveExtent>> = l.extents.iter().filter(|e| r.overlaps(e)).cloned().collect();
        if !extents.is_empty() {
            runs.push(run(0, l.id, extents));
        }
    }
    if runs.is_empty() {
        return None;
    }
    Some(Chosen::into(1, runs))
}

/// The L1 and L2 extents overlapping `range`, all rewritten into L2.
fn major_range(levels: &LevelSet, range: &KeyRange) -> Option<Chosen> {
    let inside = |l: usize| -> Vec<Arc<LiveExtent>> {
        levels.sorted[l]
            .extents
            .iter()
            .filter(|e| range.overlaps(e))
            .cloned()
            .collect()
    };
    let (l1, l2) = (inside(0), inside(1));
    if l1.is_empty() && l2.is_empty() {
        return None;
    }
    let mut runs = vec![run(1, 0, l1)];
    if !l2.is_empty() {
        runs.push(run(2, 0, l2));
    }
    Some(Chosen {
        force: true,
        ..Chosen::into(2, runs)
    })
}

/// The plan of a compaction of `kind` on `levels`; `None` if there is nothing to do.
pub(super) fn plan(
    store: &ExtentStore,
    levels: &LevelSet,
    kind: CompactionKind,
    range: &KeyRange,
    reuse: bool,
    oldest_snapshot: Option<Lsn>,
) -> Option<Plan> {
    let Chosen {
        mut runs,
        out_level,
        out_layer,
        force,
        rewrite,
        split_fences,
    } = match kind {
        CompactionKind::IntraL0 => intra_l0(levels)?,
        CompactionKind::Minor => minor(levels)?,
        CompactionKind::Major => major(levels)?,
        CompactionKind::MajorCold => major_cold(levels)?,
        CompactionKind::MajorSelf => major_self(levels, oldest_snapshot)?,
        CompactionKind::Split => split(store, levels)?,
        CompactionKind::L2Rewrite => l2_rewrite(levels)?,
        CompactionKind::MinorRange => minor_range(levels, range)?,
        CompactionKind::MajorRange => major_range(levels, range)?,
    };
    let (lo, hi) = user_range(runs.iter().flat_map(|r| r.extents.iter()))?;
    if matches!(
        kind,
        CompactionKind::Minor
            | CompactionKind::Major
            | CompactionKind::MajorCold
            | CompactionKind::MinorRange
            | CompactionKind::MajorRange
    ) {
        let target = &levels.sorted[usize::from(out_level) - 1];
        let known: Vec<u64> = runs.iter().flat_map(|r| r.extents.iter().map(|e| e.meta.id)).collect();
        let extents: Vec<Arc<LiveExtent>> = overlapping(target, &lo, &hi)
            .into_iter()
            .filter(|e| !known.contains(&e.meta.id))
            .collect();
        if !extents.is_empty() {
            runs.push(run(out_level, 0, extents));
        }
    }
    // Bottom: nothing older lies below the range of *all* inputs (the overlapping extents of
    // the output level may reach beyond the upper inputs' range).
    let (lo, hi) = user_range(runs.iter().flat_map(|r| r.extents.iter()))?;
    let below = usize::from(out_level)..2;
    let bottom = below
        .into_iter()
        .all(|l| overlapping(&levels.sorted[l], &lo, &hi).is_empty());
    // Output-level extents inside the inputs' range that are not inputs (the L2 extents a
    // self-major compaction skips): no output extent may reach across one.
    let mut fences = if out_level == 0 {
        Vec::new()
    } else {
        let known: Vec<u64> = runs.iter().flat_map(|r| r.extents.iter().map(|e| e.meta.id)).collect();
        overlapping(&levels.sorted[usize::from(out_level) - 1], &lo, &hi)
            .iter()
            .filter(|e| !known.contains(&e.meta.id))
            .map(|e| user_part(&e.meta.smallest).to_vec())
            .collect::<Vec<_>>()
    };
    fences.extend(split_fences);
    fences.sort();
    fences.dedup();
    Some(Plan {
        runs,
        out_level,
        out_layer,
        bottom,
        reuse: reuse && !force,
        force: force || rewrite,
        fences,
    })
}

/// The user-key range `[lo, hi]` covered by `extents`.
fn user_range<'a>(extents: impl Iterator<Item = &'a Arc<LiveExtent>>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut range: Option<(&[u8], &[u8])> = None;
    for e in extents {
        let (lo, hi) = (user_part(&e.meta.smallest), user_part(&e.meta.largest));
        range = Some(match range {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }
    range.map(|(a, b)| (a.to_vec(), b.to_vec()))
}

/// The extents of `layer` whose user keys reach into `[lo, hi]`.
fn overlapping(layer: &Layer, lo: &[u8], hi: &[u8]) -> Vec<Arc<LiveExtent>> {
    layer
        .extents
        .iter()
        .filter(|e| user_part(&e.meta.smallest) <= hi && user_part(&e.meta.largest) >= lo)
        .cloned()
        .collect()
}

/// Where a split cuts L1 extent `e`: the smallest key of every L2 extent inside its key range
/// that the rows of `e` skip entirely (judged from the block index, reading only blocks that
/// straddle a whole L2 extent); `None` when it skips none, so a split would gain nothing.
fn split_points(store: &ExtentStore, e: &Arc<LiveExtent>, l2: &[Arc<LiveExtent>]) -> Option<Vec<Vec<u8>>> {
    let (lo, hi) = (user_part(&e.meta.smallest), user_part(&e.meta.largest));
    let inside: Vec<&Arc<LiveExtent>> = l2
        .iter()
        .filter(|x| user_part(&x.meta.smallest) > lo && user_part(&x.meta.largest) < hi)
        .collect();
    if inside.is_empty() {
        return None;
    }
    // An extent that cannot be opened is left to the major compaction, which reports it.
    let open = store.open(e).ok()?;
    let blocks = open.reader.index();
    // Whether a row of `e` has a user key in `[a, b]`: blocks whose first or last key falls
    // in the range do; a block straddling the whole range (a sparse block, seed 000 Fig. 8) is
    // read to see whether anything lies between; an unreadable one counts as overlapping.
    let has_row_in = |a: &[u8], b: &[u8]| {
        blocks.iter().enumerate().any(|(i, ie)| {
            let (first, last) = (user_part(&ie.first_key), user_part(&ie.last_key));
            if first > b || last < a {
                return false;
            }
            if (a..=b).contains(&first) || (a..=b).contains(&last) {
                return true;
            }
            let Ok(block) = store.block(e, open, i) else {
                return true;
            };
            let mut it = crate::extent::BlockIter::new(block);
            let mut target = Vec::new();
            crate::key::encode_internal_key(&mut target, a, crate::key::MAX_LSN, ValueKind::Put);
            it.seek(&target);
            !it.valid() || it.status().is_err() || user_part(it.key()) <= b
        })
    };
    // One cut where each skipped extent starts: the piece before it ends below its start, and
    // the piece that begins there holds only keys past its end, so it overlaps no piece. The
    // L2 extents the rows do reach are not cut around: the major merges them either way, and
    // every cut costs an extent.
    let cuts: Vec<Vec<u8>> = inside
        .iter()
        .filter(|x| !has_row_in(user_part(&x.meta.smallest), user_part(&x.meta.largest)))
        .map(|x| user_part(&x.meta.smallest).to_vec())
        .collect();
    (!cuts.is_empty()).then_some(cuts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::PosixFs;
    use crate::key::encode_internal_key;
    use crate::meta::edit::ExtentMeta;
    use crate::space::{ExtentSpace, SpaceOptions};

    fn ikey(user: &str, lsn: u64) -> Vec<u8> {
        let mut v = Vec::new();
        encode_internal_key(&mut v, user.as_bytes(), lsn, ValueKind::Put);
        v
    }

    /// A level of extents over `ranges` (user keys), ids from `first_id`.
    fn layer(store: &Arc<ExtentStore>, first_id: u64, ranges: &[(&str, &str)]) -> Arc<Layer> {
        let extents = ranges
            .iter()
            .enumerate()
            .map(|(i, (lo, hi))| {
                store.live(ExtentMeta {
                    id: first_id + i as u64,
                    slots: 1,
                    table: 0,
                    smallest: ikey(lo, 9),
                    largest: ikey(hi, 1),
                    min_lsn: 1,
                    max_lsn: 9,
                    entries: 10,
                    deletes: 0,
                    data_size: 100,
                    blocks: 1,
                })
            })
            .collect();
        Arc::new(Layer::new(0, extents))
    }

    #[test]
    fn the_coldest_half_of_l1_goes_down_with_only_its_l2() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn crate::fs::FileSystem> = Arc::new(PosixFs);
        let space = Arc::new(ExtentSpace::open(fs, dir.path(), SpaceOptions::default()).unwrap());
        let store = Arc::new(ExtentStore::new(space, 0, 16));
        let l1 = layer(
            &store,
            1,
            &[
                ("a", "a9"),
                ("b", "b9"),
                ("c", "c9"),
                ("d", "d9"),
                ("e", "e9"),
                ("f", "f9"),
            ],
        );
        let l2 = layer(
            &store,
            100,
            &[
                ("a0", "b5"),
                ("b6", "c5"),
                ("c6", "d5"),
                ("d6", "e5"),
                ("e6", "f5"),
                ("f6", "g"),
            ],
        );
        // Reads on a, b and f: the coldest window of three is c..e.
        for (i, reads) in [(0, 50), (1, 40), (5, 30), (2, 1)] {
            for _ in 0..reads * crate::extent_store::TEMPERATURE_SAMPLE {
                l1.extents[i].touch();
            }
        }
        let mut levels = LevelSet::empty();
        levels.sorted = [l1.clone(), l2.clone()];
        let p = plan(
            &store,
            &levels,
            CompactionKind::MajorCold,
            &KeyRange::default(),
            true,
            None,
        )
        .unwrap();
        let ids = |level: u8| -> Vec<u64> {
            p.runs
                .iter()
                .filter(|r| r.level == level)
                .flat_map(|r| r.extents.iter().map(|e| e.meta.id))
                .collect()
        };
        assert_eq!(ids(1), vec![3, 4, 5], "c, d, e: the coldest contiguous half");
        assert_eq!(
            ids(2),
            vec![101, 102, 103, 104],
            "only the L2 extents overlapping c..e9"
        );
        assert_eq!(p.out_level, 2);
        // A plain major takes all of L1; so does a cold one of a small L1.
        let all = plan(&store, &levels, CompactionKind::Major, &KeyRange::default(), true, None).unwrap();
        assert_eq!(all.runs.iter().find(|r| r.level == 1).unwrap().extents.len(), 6);
        levels.sorted = [layer(&store, 1, &[("a", "a9"), ("b", "b9")]), l2];
        let small = plan(
            &store,
            &levels,
            CompactionKind::MajorCold,
            &KeyRange::default(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(small.runs.iter().find(|r| r.level == 1).unwrap().extents.len(), 2);
        // Decay halves.
        let e = &l1.extents[0];
        let t = e.temperature();
        e.decay();
        assert_eq!(e.temperature(), t / 2);
    }
}
