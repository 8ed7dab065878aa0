//! `riptide stress --crash_points`: the tool walks crash points of the engine
//! (`riptide::failpoint::POINTS`), aborting a child at each, recovering and verifying. Built only
//! with `--features failpoints` (scripts/test.sh runs it).
//!
//! To stay within CI's time it walks the points that a short run reaches: flush, intra-L0
//! compaction, the manual range compactions and checkpoints, before and after each commit; and
//! requires every one of them to fire. The long run in docs/RELIABILITY.md walks them all.

use std::process::Command;

const POINTS: [&str; 10] = [
    "flush.before_commit",
    "flush.after_commit",
    "compaction.intra_l0.before_commit",
    "compaction.intra_l0.after_commit",
    "compaction.minor_range.before_commit",
    "compaction.minor_range.after_commit",
    "compaction.major_range.before_commit",
    "compaction.major_range.after_commit",
    "checkpoint.before_current",
    "checkpoint.after_current",
];

#[test]
fn the_tool_walks_the_crash_points() {
    for p in POINTS {
        assert!(
            riptide::failpoint::POINTS.contains(&p),
            "{p} is no longer a crash point"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("stress")
        .arg(format!("--db={}", dir.path().display()))
        .arg(format!("--crash_points={}", POINTS.join(",")))
        .args(["--duration=15", "--keys=500", "--threads=3"])
        .output()
        .expect("run riptide stress");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    for p in POINTS {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{p}@")) && l.contains(": aborted there; recovered and verified")),
            "{p} did not fire, recover and verify:\n{out}"
        );
    }
    assert!(
        out.contains(&format!("DONE {n} crash points: {n} fired", n = POINTS.len())),
        "{out}"
    );
}
