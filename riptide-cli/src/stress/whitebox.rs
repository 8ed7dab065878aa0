//! Whitebox crash mode of `riptide stress` (`--crash_points=all|<point>,...`): for each named
//! crash point of the engine (`riptide::failpoint::POINTS`, so the list cannot drift), a child
//! `riptide stress` runs the workload on a fresh database with tiny memtables and triggers and
//! `RIPTIDE_CRASH_AT=<point>@<n>` (n drawn from 1..=3), so it aborts the n-th time any thread
//! passes the point. The driver then requires:
//! - that the child died by `abort()` right after printing `CRASHPOINT <point>` (or, if the
//!   point was not reached within `--duration`, that it finished cleanly and verified: the point
//!   is then reported as not fired, not counted as covered);
//! - that a second child, without the crash point, recovers the database and verifies it
//!   against the expected state (resolving the writes in flight at the abort), runs the
//!   workload for a second and verifies again;
//! - that `inspect verify` finds nothing wrong in the files afterwards.
//!
//! The crash points exist only in a binary built with the `failpoints` feature; without it the
//! mode refuses to run rather than report points that could not fire.

use super::args::StressArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// The points `spec` names: `all`, or a comma-separated list of names from `POINTS`.
fn parse_points(spec: &str) -> Result<Vec<&'static str>, String> {
    let all = riptide::failpoint::POINTS;
    if spec.trim() == "all" {
        return Ok(all.to_vec());
    }
    spec.split(',')
        .map(|p| {
            all.iter().copied().find(|&q| q == p.trim()).ok_or_else(|| {
                format!(
                    "--crash_points: no crash point {:?}; the points are: all, {}",
                    p.trim(),
                    all.join(", ")
                )
            })
        })
        .collect()
}

/// The workload that reaches `point` soonest: the tool's own range compactions push everything
/// to L2 at once, so the background compaction points (all but the `*_range` ones) are walked
/// with the `compact` weight at 0; self-major compactions also want deletes (4x the weight).
/// Other points keep `mix` (already validated; 8 or 10 weights, `compact` is the 8th).
fn mix_for(point: &str, mix: &str) -> String {
    let mut w: Vec<u32> = mix.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    if point.starts_with("compaction.") && !point.contains("_range") && w.len() >= 8 {
        w[7] = 0;
        if point.contains("major_self") {
            w[1] = w[1].saturating_mul(4).max(10);
        }
    }
    let parts: Vec<String> = w.iter().map(u32::to_string).collect();
    parts.join(",")
}

/// Runs one child `riptide stress` on `db`; returns its status and its stdout and stderr lines.
fn child(
    a: &StressArgs,
    db: &Path,
    seed: u64,
    duration: u64,
    crash_at: Option<&str>,
) -> Result<(ExitStatus, Vec<String>), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = super::child_command(&exe, a, db, seed, duration);
    cmd.arg("--tiny").env_remove("RIPTIDE_CRASH_AT");
    if let Some(p) = crash_at {
        cmd.env("RIPTIDE_CRASH_AT", p);
    }
    let out = cmd.output().map_err(|e| format!("starting the child: {e}"))?;
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::to_string)
        .collect();
    Ok((out.status, lines))
}

/// Walks the crash points; returns whether every point that fired recovered and verified.
/// Empties a crash point's directory `dir` (its database `db` and `db.expected`): the database
/// through `Db::destroy`, so one that another process has open is refused, not deleted; files
/// that stress did not write stay, and so does `dir` then.
fn clear(dir: &Path, db: &Path) -> Result<(), String> {
    riptide::Db::destroy(db).map_err(|e| format!("clearing {}: {e}", db.display()))?;
    let exp = super::owner::expected_path(db);
    for r in [std::fs::remove_file(&exp), std::fs::remove_dir(dir)] {
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("clearing {}: {e}", dir.display())),
        }
    }
    Ok(())
}

pub fn run(a: &StressArgs, spec: &str, seed: u64) -> Result<bool, String> {
    // A binary without the crash points was refused by `args::validate`.
    let points = parse_points(spec)?;
    let mut rng = StdRng::seed_from_u64(seed);
    println!(
        "riptide stress: whitebox mode, seed {seed}, {} crash points, each child up to {} s, base directory {}",
        points.len(),
        a.duration,
        a.db.display()
    );
    let (mut fired, mut not_fired, mut resolved) = (Vec::new(), Vec::new(), 0u64);
    for point in points {
        let dir = a.db.join(point);
        let db = dir.join("db");
        clear(&dir, &db)?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let a = &StressArgs {
            mix: mix_for(point, &a.mix),
            ..a.clone()
        };
        let nth: u32 = rng.random_range(1..=3);
        let (s1, s2): (u64, u64) = (rng.random(), rng.random());
        let target = format!("{point}@{nth}");
        let failed = |what: &str, status: ExitStatus, lines: &[String]| {
            eprintln!(
                "riptide stress: FAILED (seed {seed}) at crash point {target} (child seed {s1}, recovery seed {s2}): \
                 {what} ({status}); the child's output:\n{}",
                lines.join("\n")
            );
        };
        let (status, lines) = child(a, &db, s1, a.duration, Some(&target))?;
        let crashed = lines.iter().find_map(|l| l.strip_prefix("CRASHPOINT "));
        let finished = lines.iter().any(|l| l.starts_with("DONE "));
        match crashed {
            None if finished && status.success() => {
                println!("{target}: not reached within {} s (the run verified)", a.duration);
                not_fired.push(point);
                continue;
            }
            Some(p) if p == point && status.signal() == Some(libc::SIGABRT) => {}
            _ => {
                failed("the child did not abort at the crash point", status, &lines);
                return Ok(false);
            }
        }
        let (status, lines) = child(a, &db, s2, 1, None)?;
        let verified = lines.iter().find(|l| l.starts_with("VERIFIED "));
        if !status.success() || verified.is_none() || !lines.iter().any(|l| l.starts_with("DONE ")) {
            failed("recovery did not verify", status, &lines);
            return Ok(false);
        }
        let n = verified
            .and_then(|l| l.split(" keys (").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        resolved += n;
        let report = riptide::inspect::verify(riptide::inspect::posix().as_ref(), &db)
            .map_err(|e| format!("inspect verify {}: {e}", db.display()))?;
        if !report.ok() {
            failed(&format!("inspect verify: {:?}", report.problems), status, &lines);
            return Ok(false);
        }
        println!("{target}: aborted there; recovered and verified ({n} in-flight writes resolved)");
        fired.push(point);
        let _ = clear(&dir, &db);
    }
    println!(
        "DONE {} crash points: {} fired, recovered and verified; {} not reached{}; {resolved} in-flight writes resolved; 0 failures",
        fired.len() + not_fired.len(),
        fired.len(),
        not_fired.len(),
        if not_fired.is_empty() {
            String::new()
        } else {
            format!(" ({})", not_fired.join(", "))
        }
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_compaction_points_run_without_range_compactions() {
        let mix = "40,10,15,20,5,5,1,1,5,1";
        assert_eq!(mix_for("flush.before_commit", mix), mix);
        assert_eq!(mix_for("compaction.minor_range.after_commit", mix), mix);
        assert_eq!(
            mix_for("compaction.major.before_commit", mix),
            "40,10,15,20,5,5,1,0,5,1"
        );
        assert_eq!(
            mix_for("compaction.major_self.after_commit", mix),
            "40,40,15,20,5,5,1,0,5,1"
        );
        assert_eq!(
            mix_for("compaction.split.after_commit", "40,0,15,20,5,5,1,3"),
            "40,0,15,20,5,5,1,0"
        );
    }

    #[test]
    fn points_come_from_the_engine() {
        assert_eq!(parse_points("all").unwrap(), riptide::failpoint::POINTS.to_vec());
        assert_eq!(
            parse_points("flush.before_commit, checkpoint.after_current").unwrap(),
            vec!["flush.before_commit", "checkpoint.after_current"]
        );
        assert!(parse_points("flush.nowhere")
            .unwrap_err()
            .contains("flush.before_commit"));
    }
}
