//! `riptide stress --crash_points`: the tool walks crash points of the engine
//! (`riptide::failpoint::POINTS`), aborting a child at each, recovering and verifying. Built only
//! with `--features failpoints` (scripts/test.sh runs it).
//!
//! To stay within CI's time it walks the points that a short run reaches: flush, intra-L0
//! compaction, the manual range compactions and checkpoints, before and after each commit; and
//! requires every one of them to fire. The long run in docs/RELIABILITY.md walks them all.

mod common;

use common::{stress, text};

/// The engine's crash points a short run reaches.
fn points() -> Vec<&'static str> {
    riptide::failpoint::POINTS
        .iter()
        .copied()
        .filter(|p| {
            p.starts_with("flush.") || p.contains("intra_l0") || p.contains("_range") || p.starts_with("checkpoint.")
        })
        .collect()
}

#[test]
fn the_tool_walks_the_crash_points() {
    let points = points();
    assert_eq!(points.len(), 10, "{points:?}");
    let dir = tempfile::tempdir().unwrap();
    let o = stress(
        dir.path(),
        &[
            &format!("--crash_points={}", points.join(",")),
            "--duration=15",
            "--keys=500",
            "--threads=3",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for p in &points {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{p}@")) && l.contains(": aborted there; recovered and verified")),
            "{p} did not fire, recover and verify:\n{out}"
        );
    }
    assert!(
        out.contains(&format!("DONE {n} crash points: {n} fired", n = points.len())),
        "{out}"
    );
}
