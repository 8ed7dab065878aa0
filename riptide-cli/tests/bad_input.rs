//! Bad input to the `riptide` command, end to end: a database open in another process is never
//! wiped, `inspect` says so when its directory holds no database, `--db` goes before or after
//! `inspect`'s subcommand, `inspect` and `bench` share one default directory, usage errors
//! exit 2 and runtime errors 1 in every subcommand, and `stress` refuses a database it did not
//! create unless told `--reuse`.

mod common;

use common::{stress, text};
use std::path::Path;
use std::process::{Command, Output};

fn riptide(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .args(args)
        .output()
        .expect("run riptide")
}

fn riptide_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run riptide")
}

/// A closed Riptide database at `path` holding `n` keys in the default table.
fn make_db(path: &Path, n: u32) {
    let db = riptide::Db::open(path, riptide::Options::default()).unwrap();
    for i in 0..n {
        db.default_table()
            .put(format!("key{i:04}").as_bytes(), b"value")
            .unwrap();
    }
    db.close().unwrap();
}

/// Opens the database at `path` that this process just closed. Other tests of this binary spawn
/// child processes all the time, and a child holds a copy of every open file descriptor (the
/// holder's `LOCK` among them) between its fork and its exec, so the flock may outlive our
/// close by that moment: retry `Locked` for up to 5 s.
fn reopen_after_close(path: &std::path::Path) -> riptide::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match riptide::Db::open(path, riptide::Options::default()) {
            Err(riptide::Error::Locked(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r.unwrap(),
        }
    }
}

#[test]
fn bench_refuses_a_database_open_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let holder = riptide::Db::open(&path, riptide::Options::default()).unwrap();
    for i in 0..100u32 {
        holder
            .default_table()
            .put(format!("key{i:04}").as_bytes(), b"held")
            .unwrap();
    }
    let d = format!("--db={}", path.display());
    for extra in [&[][..], &["--benchmarks=compact_reuse", "--distinct_pct=50"]] {
        let mut args = vec!["bench", d.as_str(), "--benchmarks=fillrandom", "--num=1000"];
        args.extend_from_slice(extra);
        let o = riptide(&args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&path.display().to_string()) && err.contains("open in another"),
            "{err}"
        );
    }
    // The holder lost nothing: its writes are readable, and after a clean close and reopen.
    let more = |db: &riptide::Db, v: &[u8]| {
        for i in 0..100u32 {
            assert_eq!(
                db.default_table()
                    .get(format!("key{i:04}").as_bytes())
                    .unwrap()
                    .as_deref(),
                Some(v)
            );
        }
    };
    holder.default_table().put(b"after", b"bench").unwrap();
    more(&holder, b"held");
    holder.close().unwrap();
    let db = reopen_after_close(&path);
    more(&db, b"held");
    assert_eq!(
        db.default_table().get(b"after").unwrap().as_deref(),
        Some(&b"bench"[..])
    );
    db.close().unwrap();
}

#[test]
fn inspect_says_not_a_database_for_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a database").unwrap();
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"x").unwrap();
    for path in [&missing, &empty, &file, &foreign] {
        let d = format!("--db={}", path.display());
        for what in [&["levels"][..], &["extent", "1.0"], &["slog"], &["redo"], &["verify"]] {
            let mut args = vec!["inspect", d.as_str()];
            args.extend_from_slice(what);
            let o = riptide(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
            assert!(
                err.contains(&format!("not a Riptide database: {}", path.display())),
                "{args:?}: {err}"
            );
            assert!(!String::from_utf8_lossy(&o.stdout).contains("DAMAGED"), "{args:?}");
        }
    }
    assert!(!missing.exists() && std::fs::read_dir(&empty).unwrap().next().is_none());
}

#[test]
fn inspect_takes_db_before_or_after_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    make_db(&path, 10);
    let d = format!("--db={}", path.display());
    for what in ["levels", "slog", "verify"] {
        let before = riptide(&["inspect", &d, what]);
        let after = riptide(&["inspect", what, &d]);
        assert!(before.status.success(), "{what}: {}", text(&before));
        assert!(after.status.success(), "{what}: {}", text(&after));
        assert_eq!(before.stdout, after.stdout, "{what}");
    }
}

#[test]
fn inspect_and_bench_share_the_default_database() {
    let dir = tempfile::tempdir().unwrap();
    let o = riptide_in(dir.path(), &["bench", "--benchmarks=fillseq", "--num=100"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = riptide_in(dir.path(), &["inspect", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("OK: no damage found"), "{}", text(&o));
    for cmd in ["bench", "inspect"] {
        let o = riptide(&[cmd, "--help"]);
        assert!(o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("./bench-data/riptide"),
            "{cmd} --help: {}",
            text(&o)
        );
    }
}

#[test]
fn usage_errors_exit_2_and_runtime_errors_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let d = format!("--db={}", db.display());
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let f = format!("--db={}", file.display());
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"x").unwrap();
    let g = format!("--db={}", foreign.display());
    for (args, code) in [
        // clap's own parse errors
        (&["bench", d.as_str(), "--bogus=1"][..], 2),
        (&["stress", d.as_str(), "--bogus=1"], 2),
        (&["inspect", d.as_str(), "bogus"], 2),
        // the tool's validation after parsing
        (&["bench", d.as_str(), "--num=0"], 2),
        (&["bench", d.as_str(), "--benchmarks=nope"], 2),
        (&["bench", d.as_str(), "--engine=nope"], 2),
        (&["stress", d.as_str(), "--threads=0"], 2),
        (&["stress", d.as_str(), "--mix=1,2"], 2),
        (&["stress", d.as_str(), "--power_cuts=1", "--crash_rounds=1"], 2),
        // runtime failures
        (&["bench", f.as_str(), "--benchmarks=fillseq", "--num=10"], 1),
        (&["bench", g.as_str(), "--benchmarks=fillseq", "--num=10"], 1),
        (&["stress", f.as_str(), "--duration=1", "--keys=100"], 1),
        (&["inspect", f.as_str(), "levels"], 1),
    ] {
        let o = riptide(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{args:?}: {}", text(&o));
    }
    assert!(!db.exists());
}

#[test]
fn stress_refuses_a_database_it_did_not_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let expected = dir.path().join("db.expected");
    make_db(&path, 20);
    let args = ["--duration=1", "--keys=200", "--tables=1", "--threads=2"];
    let o = stress(&path, &args);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&path.display().to_string()) && err.contains("--reuse"),
        "{err}"
    );
    assert!(!expected.exists(), "a refused run leaves no expected state");
    // Told to, it runs on it and keeps the foreign data; then the database is its own.
    let mut reuse = args.to_vec();
    reuse.push("--reuse");
    let o = stress(&path, &reuse);
    assert!(o.status.success(), "{}", text(&o));
    let o = stress(&path, &args);
    assert!(o.status.success(), "{}", text(&o));
    let db = riptide::Db::open(&path, riptide::Options::default()).unwrap();
    assert_eq!(
        db.default_table().get(b"key0007").unwrap().as_deref(),
        Some(&b"value"[..])
    );
    db.close().unwrap();

    // An expected state made for another database does not belong to this one.
    let other = dir.path().join("other");
    assert!(stress(&other, &args).status.success());
    std::fs::copy(dir.path().join("other.expected"), &expected).unwrap();
    let o = stress(&path, &args);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not belong"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_failed_stress_open_leaves_no_expected_state() {
    let dir = tempfile::tempdir().unwrap();
    // --db names a file: the open fails.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let o = stress(&file, &["--duration=1", "--keys=100"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!dir.path().join("file.expected").exists());
    // A database open elsewhere: refused, and still no expected state.
    let path = dir.path().join("db");
    let holder = riptide::Db::open(&path, riptide::Options::default()).unwrap();
    let o = stress(&path, &["--duration=1", "--keys=100", "--reuse"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!dir.path().join("db.expected").exists());
    holder.close().unwrap();
}
