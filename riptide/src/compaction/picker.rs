//! The compaction picker: scores candidate tasks from a sub-table's shape and picks the best
//! one scoring at least 1 (X-Engine's rule-based priorities, seed 000 §3.3.3).
//!
//! Scores (`L` = L0 layers, `N0/N1/N2` = extents per level, `T*` = triggers):
//! - delete-triggered: 200 when a flush saw a delete-heavy memtable (runs a minor compaction if
//!   L0 has data, else a major one);
//! - intra-L0: `L / T_layer` (merges L0 layers into one, without touching L1);
//! - minor (L0 → L1): `N0 / T0`;
//! - major (L1 → L2): `N1 / T1'`, where `T1' = max(T1, ceil(sqrt(2 · T0 · N2 · w)))` when the
//!   L1 trigger is dynamic (the default; [`Triggers::level1_target`]), else `T1`; `w` is 1, or
//!   [`OBJECT_L2_WEIGHT`] when the table's L2 is on the object tier (seed 003: a slower tier
//!   weighs more against frequent majors);
//! - self-major (L2 → L2): 1 when some L2 extents are delete-heavy with nothing pinning their
//!   deletes, or runs of sparse L2 extents can be packed (it runs only when nothing else is
//!   due).
//!
//! Ties go to the kind earlier in that list, so the paper's order (deletes, intra-L0, minor,
//! major, self-major) emerges when several kinds are due. Deliberate deviation from X-Engine's
//! code (xengine_as_built §10): intra-L0 tests the *layer* count against the layer trigger and
//! minor tests the *extent* count against the extent trigger.

/// What the picker sees of a sub-table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Extents per L0 layer, newest first.
    pub(crate) l0_layers: Vec<usize>,
    pub(crate) n1: usize,
    pub(crate) n2: usize,
    /// L2 extents a self-major compaction would purge: delete-heavy, and no live snapshot
    /// older than their newest version (`compaction::purgeable`).
    pub(crate) l2_delete_heavy: usize,
    /// L2 extents in runs of sparse extents worth packing (`compaction::packable`).
    pub(crate) l2_sparse: usize,
    /// A flush wrote a delete-heavy memtable since the last delete-triggered compaction.
    pub(crate) delete_triggered: bool,
    /// New L2 extents go to the object tier.
    pub(crate) l2_object: bool,
}

/// How much more a major compaction weighs when L2 is on the object tier: every L2 byte it
/// rewrites is a slower upload (seed 003 measured compactions into OSS about 25 % slower, and
/// raises the weight of L2 in X-Engine's major score). Scaling the L2 term by 2 lets L1 grow
/// about 1.4 times larger before a major, so fewer, larger majors rewrite L2.
pub(crate) const OBJECT_L2_WEIGHT: f64 = 2.0;

impl Shape {
    /// The weight of L2 in the major trigger.
    pub(crate) fn l2_weight(&self) -> f64 {
        if self.l2_object {
            OBJECT_L2_WEIGHT
        } else {
            1.0
        }
    }
}

/// Triggers, from the options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Triggers {
    pub(crate) level0_layers: usize,
    pub(crate) level0_extents: usize,
    pub(crate) level1_extents: usize,
    /// `level1_extents` grows with L2 ([`Triggers::level1_target`]).
    pub(crate) level1_dynamic: bool,
}

impl Triggers {
    pub(crate) fn from_options(opts: &crate::options::Options) -> Triggers {
        Triggers {
            level0_layers: opts.level0_layer_trigger,
            level0_extents: opts.level0_extents_trigger,
            level1_extents: opts.level1_extents_trigger,
            level1_dynamic: opts.level1_dynamic_trigger,
        }
    }

    /// L1 extents at which a major compaction is due when L2 holds `n2` extents.
    ///
    /// Dynamic: `max(level1_extents, ceil(sqrt(2 · level0_extents · n2)))`. Minor compactions
    /// merge batches of about `T0 = level0_extents` extents into L1; while L1 grows to `S1` they
    /// write about `S1 / (2 · T0)` bytes per byte flushed, and the major compaction that then
    /// merges L1 into L2 (`S2` extents, on keys spread over L2) writes about `S2 / S1`. The sum
    /// is least at `S1 = sqrt(2 · T0 · S2)`, so write amplification grows with the square root
    /// of the database instead of linearly (`docs/compaction.md`, "The L1 trigger").
    ///
    /// `weight` scales the L2 term (1, or [`OBJECT_L2_WEIGHT`] for an object-tier L2).
    pub(crate) fn level1_target(&self, n2: usize, weight: f64) -> usize {
        let floor = self.level1_extents.max(1);
        if !self.level1_dynamic {
            return floor;
        }
        let product = 2.0 * self.level0_extents.max(1) as f64 * n2 as f64 * weight;
        floor.max(product.sqrt().ceil() as usize)
    }
}

/// Kinds of compaction tasks, in priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TaskKind {
    /// Delete-triggered: a minor compaction (or a major one when L0 is empty) run first.
    Delete,
    /// L0 layers → one L0 layer.
    IntraL0,
    /// L0 + overlapping L1 → L1.
    Minor,
    /// L1 + overlapping L2 → L2.
    Major,
    /// Delete-heavy L2 extents rewritten within L2.
    MajorSelf,
}

/// A scored candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) kind: TaskKind,
    pub(crate) score: f64,
}

/// Every candidate task for `shape`, best first.
pub(crate) fn candidates(shape: &Shape, t: &Triggers) -> Vec<Candidate> {
    let layers = shape.l0_layers.len();
    let n0: usize = shape.l0_layers.iter().sum();
    let mut out = Vec::new();
    if shape.delete_triggered && (n0 > 0 || shape.n1 > 0) {
        out.push(Candidate {
            kind: TaskKind::Delete,
            score: 200.0,
        });
    }
    if layers >= 2 {
        out.push(Candidate {
            kind: TaskKind::IntraL0,
            score: layers as f64 / t.level0_layers.max(1) as f64,
        });
    }
    if n0 > 0 {
        out.push(Candidate {
            kind: TaskKind::Minor,
            score: n0 as f64 / t.level0_extents.max(1) as f64,
        });
    }
    if shape.n1 > 0 {
        out.push(Candidate {
            kind: TaskKind::Major,
            score: shape.n1 as f64 / t.level1_target(shape.n2, shape.l2_weight()) as f64,
        });
    }
    if shape.l2_delete_heavy > 0 || shape.l2_sparse > 0 {
        out.push(Candidate {
            kind: TaskKind::MajorSelf,
            score: 1.0,
        });
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.kind.cmp(&b.kind)));
    out
}

/// A flush needs at least this many entries before its deletes can trigger a compaction.
const DELETE_TRIGGER_MIN_ENTRIES: u64 = 1000;

/// True when a flush that wrote `entries` versions, `deletes` of them tombstones, asks for a
/// delete-triggered compaction ([`Shape::delete_triggered`]): at least
/// [`DELETE_TRIGGER_MIN_ENTRIES`] entries and at least `DELETE_HEAVY_PERCENT` % deletes.
pub(crate) fn flush_triggers_delete_compaction(entries: u64, deletes: u64) -> bool {
    entries >= DELETE_TRIGGER_MIN_ENTRIES && deletes * 100 >= entries * super::DELETE_HEAVY_PERCENT
}

/// The task to run now: the best candidate scoring at least 1.
pub(crate) fn pick(shape: &Shape, t: &Triggers) -> Option<TaskKind> {
    candidates(shape, t)
        .into_iter()
        .find(|c| c.score >= 1.0)
        .map(|c| c.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Triggers = Triggers {
        level0_layers: 4,
        level0_extents: 16,
        level1_extents: 32,
        level1_dynamic: false,
    };

    /// `T` with the L1 trigger growing with L2 (the default in `Options`).
    const DYNAMIC: Triggers = Triggers {
        level1_dynamic: true,
        ..T
    };

    /// Parses a fixture shape: `L0=1,2,1 L1=10 L2=40 L2del=3 deletes`.
    fn shape(s: &str) -> Shape {
        let mut sh = Shape::default();
        for part in s.split_whitespace() {
            match part.split_once('=') {
                Some(("L0", v)) => sh.l0_layers = v.split(',').map(|n| n.parse().unwrap()).collect(),
                Some(("L1", v)) => sh.n1 = v.parse().unwrap(),
                Some(("L2", v)) => sh.n2 = v.parse().unwrap(),
                Some(("L2del", v)) => sh.l2_delete_heavy = v.parse().unwrap(),
                Some(("L2sparse", v)) => sh.l2_sparse = v.parse().unwrap(),
                None if part == "deletes" => sh.delete_triggered = true,
                _ => panic!("bad fixture part {part}"),
            }
        }
        sh
    }

    #[test]
    fn delete_heavy_flushes_trigger_a_compaction() {
        assert!(!flush_triggers_delete_compaction(999, 999), "too few entries");
        assert!(flush_triggers_delete_compaction(1000, 300));
        assert!(!flush_triggers_delete_compaction(1000, 299));
        assert!(flush_triggers_delete_compaction(10_000, 10_000));
    }

    /// "This LSM shape → this task", one line each (like Pebble's picker tests).
    #[test]
    fn fixtures() {
        let cases: &[(&str, Option<TaskKind>)] = &[
            ("", None),
            ("L0=1", None),
            ("L0=1,1,1", None),
            // Four layers reach the layer trigger: merge them within L0.
            ("L0=1,1,1,1", Some(TaskKind::IntraL0)),
            ("L0=1,1,1,1 L1=30 L2=100", Some(TaskKind::IntraL0)),
            // One big L0 layer (after intra-L0 merges) reaching the extent trigger: minor.
            ("L0=16", Some(TaskKind::Minor)),
            ("L0=20 L1=5", Some(TaskKind::Minor)),
            // Layers and extents both due: the higher pressure wins.
            ("L0=10,10,10,10", Some(TaskKind::Minor)),
            // Equal pressure: intra-L0 before minor (the paper's order).
            ("L0=4,4,4,4", Some(TaskKind::IntraL0)),
            // L1 over its trigger.
            ("L0=1 L1=32", Some(TaskKind::Major)),
            ("L1=64 L2=500", Some(TaskKind::Major)),
            ("L1=31", None),
            // L0 pressure beats L1 pressure of the same ratio.
            ("L0=1,1,1,1 L1=32", Some(TaskKind::IntraL0)),
            // Delete-heavy flushes jump the queue.
            ("L0=1 deletes", Some(TaskKind::Delete)),
            ("L1=3 deletes", Some(TaskKind::Delete)),
            ("L2=10 deletes", None),
            ("L0=1,1,1,1,1,1,1,1 L1=40 deletes", Some(TaskKind::Delete)),
            // Self-major only when nothing else is due.
            ("L2=50 L2del=2", Some(TaskKind::MajorSelf)),
            ("L0=1,1,1,1 L2=50 L2del=2", Some(TaskKind::IntraL0)),
            ("L1=10 L2=50 L2del=2", Some(TaskKind::MajorSelf)),
            // Runs of sparse L2 extents worth packing, too.
            ("L2=50 L2sparse=6", Some(TaskKind::MajorSelf)),
            ("L0=1,1,1,1 L2=50 L2sparse=6", Some(TaskKind::IntraL0)),
        ];
        for (s, want) in cases {
            assert_eq!(
                pick(&shape(s), &T),
                *want,
                "shape `{s}`: {:?}",
                candidates(&shape(s), &T)
            );
        }
    }

    /// The dynamic L1 trigger: `max(32, ceil(sqrt(2 · 16 · N2)))`, so 32 up to N2 = 32 and
    /// 64 at N2 = 128, 320 at N2 = 3200.
    #[test]
    fn dynamic_level1_trigger_grows_with_level2() {
        let targets: Vec<usize> = [0, 10, 32, 33, 128, 3200]
            .iter()
            .map(|&n2| DYNAMIC.level1_target(n2, 1.0))
            .collect();
        assert_eq!(targets, vec![32, 32, 32, 33, 64, 320]);
        // The static trigger ignores L2.
        assert_eq!(T.level1_target(3200, 1.0), 32);
        // An object-tier L2 weighs twice: L1 grows sqrt(2) times larger first.
        assert_eq!(DYNAMIC.level1_target(3200, OBJECT_L2_WEIGHT), 453);
        let object = |s: &str| Shape {
            l2_object: true,
            ..shape(s)
        };
        assert_eq!(pick(&shape("L1=400 L2=3200"), &DYNAMIC), Some(TaskKind::Major));
        assert_eq!(pick(&object("L1=400 L2=3200"), &DYNAMIC), None);
        assert_eq!(pick(&object("L1=453 L2=3200"), &DYNAMIC), Some(TaskKind::Major));
        let cases: &[(&str, Option<TaskKind>)] = &[
            // A small L2 leaves the trigger at its floor.
            ("L1=32 L2=20", Some(TaskKind::Major)),
            ("L1=31 L2=20", None),
            // A large L2 lets L1 grow before a major compaction rewrites it.
            ("L1=63 L2=128", None),
            ("L1=64 L2=128", Some(TaskKind::Major)),
            ("L1=300 L2=3200", None),
            ("L1=320 L2=3200", Some(TaskKind::Major)),
            // L0 pressure is unchanged by it.
            ("L0=16 L1=300 L2=3200", Some(TaskKind::Minor)),
        ];
        for (s, want) in cases {
            assert_eq!(
                pick(&shape(s), &DYNAMIC),
                *want,
                "shape `{s}`: {:?}",
                candidates(&shape(s), &DYNAMIC)
            );
        }
        // The same large shapes under the static trigger are due at once.
        assert_eq!(pick(&shape("L1=63 L2=128"), &T), Some(TaskKind::Major));
    }

    #[test]
    fn candidates_are_sorted_best_first() {
        let c = candidates(&shape("L0=8,8 L1=64 L2=10 L2del=1 deletes"), &T);
        let kinds: Vec<TaskKind> = c.iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            vec![
                TaskKind::Delete,
                TaskKind::Major,
                TaskKind::Minor,
                TaskKind::MajorSelf,
                TaskKind::IntraL0
            ]
        );
    }
}
