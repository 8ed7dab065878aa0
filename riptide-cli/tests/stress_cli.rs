//! `riptide stress` end to end: a run verifies against its expected state, the blackbox crash
//! mode recovers after SIGKILLs (with transactions and table create/drop in the mix), the
//! power-cut mode recovers a prefix, and a tampered expected state is caught (the check bites).
//! The whitebox crash-point walk is in `stress_whitebox.rs` (needs `--features failpoints`).

mod common;

use common::{stress, text};
use std::path::Path;

#[test]
fn a_run_verifies_and_the_next_one_starts_from_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let args = ["--duration=2", "--keys=500", "--tables=2", "--threads=3"];
    let o = stress(&db, &args);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("VERIFIED 1000 keys (0 in-flight writes resolved)"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("DONE "), "{}", text(&o));
    // A second run reopens the same database and expected state.
    let o = stress(&db, &args);
    assert!(o.status.success(), "{}", text(&o));
    // Shape mismatch is refused.
    let o = stress(&db, &["--duration=1", "--keys=400", "--tables=2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("made for 2 tables x 500 keys"), "{}", text(&o));
}

#[test]
fn crash_rounds_recover_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for sync in ["false", "true"] {
        let o = stress(
            &db,
            &[
                "--duration=10",
                "--keys=1000",
                "--crash_rounds=6",
                "--kill_min_ms=50",
                "--kill_max_ms=600",
                &format!("--sync={sync}"),
            ],
        );
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        let done = out
            .lines()
            .find(|l| l.starts_with("DONE 6 rounds"))
            .unwrap_or_else(|| panic!("{out}"));
        // Every killed child had verified the state it recovered before writing more.
        assert!(done.contains("recoveries verified"), "{done}");
    }
}

/// Deleting only the database directory leaves `<db>.expected`; the next run starts over
/// instead of reporting every key written by the earlier run as lost.
#[test]
fn a_missing_database_resets_a_leftover_expected_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let args = ["--duration=1", "--keys=200", "--tables=1", "--threads=2"];
    let o = stress(&db, &args);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&db).unwrap();
    assert!(dir.path().join("db.expected").exists());
    let o = stress(&db, &args);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("removed the expected state left by an earlier run"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("VERIFIED 200 keys"), "{}", text(&o));
}

#[test]
fn a_wrong_expected_state_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let args = ["--duration=1", "--keys=200", "--tables=1", "--threads=2"];
    assert!(stress(&db, &args).status.success());
    // Claim a newer version than the database holds for the first written key.
    let p = dir.path().join("db.expected");
    let mut b = std::fs::read(&p).unwrap();
    let slot = (32..b.len())
        .step_by(8)
        .find(|&i| {
            let c = u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
            c != 0 && c & (1 << 31) == 0
        })
        .expect("some key was written");
    let c = u32::from_le_bytes(b[slot..slot + 4].try_into().unwrap());
    b[slot..slot + 4].copy_from_slice(&(c + 1).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let o = stress(&db, &args);
    // A failed verification is a runtime failure: exit status 1 (2 is for usage errors).
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(&format!("expected Some({})", c + 1)), "{}", text(&o));
}

/// The number after `label ` in a `DONE` line (`txn 12` -> 12).
fn count(line: &str, label: &str) -> u64 {
    line.split(&format!("{label} "))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} count in {line}"))
}

#[test]
fn transactions_and_table_ddl_survive_kills() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // Mostly transactions and scratch-table steps.
    let mix = "--mix=10,5,5,10,2,2,1,1,40,15";
    let o = stress(
        &db,
        &[
            "--duration=10",
            "--keys=400",
            "--threads=3",
            "--crash_rounds=6",
            "--kill_min_ms=100",
            "--kill_max_ms=700",
            mix,
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("DONE 6 rounds"), "{out}");
    // The final clean run did both kinds of operation and verified.
    let o = stress(&db, &["--duration=2", "--keys=400", "--threads=3", mix]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let done = out
        .lines()
        .find(|l| l.starts_with("DONE "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(count(done, "txn") > 0 && count(done, "table_ddl") > 0, "{done}");
}

#[test]
fn power_cuts_recover_a_prefix() {
    for sync in ["false", "true"] {
        let o = stress(
            Path::new("/in-memory/db"),
            &[
                "--power_cuts=30",
                "--keys=300",
                "--threads=3",
                "--cut_min_ms=5",
                "--cut_max_ms=150",
                &format!("--sync={sync}"),
            ],
        );
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        let done = out
            .lines()
            .find(|l| l.starts_with("DONE 30 power cuts"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(count(done, "txn") > 0 && count(done, "table_ddl") > 0, "{done}");
        let acked: u64 = done
            .split(" writes acknowledged")
            .next()
            .and_then(|h| h.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{done}"));
        assert!(acked > 100, "{done}");
        if sync == "true" {
            assert!(done.contains(" 0 acknowledged unsynced writes lost"), "{done}");
        }
    }
}

#[test]
fn modes_are_exclusive_and_whitebox_needs_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = stress(&db, &["--power_cuts=1", "--crash_rounds=1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    if !riptide::failpoint::ENABLED {
        let o = stress(&db, &["--crash_points=all"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("--features failpoints"), "{}", text(&o));
    }
}
