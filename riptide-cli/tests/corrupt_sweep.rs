//! `riptide stress --corrupt_sweep`: flipped bytes in every file kind are detected or harmless,
//! never wrong data; and the sweep's check bites (a database it cannot trust is refused).

mod common;

use common::{stress, text};

/// The summary row of one kind: `[injected, open, read, verify, silent, tail cut, failed]`.
fn row(out: &str, kind: &str) -> Vec<u64> {
    let line = out
        .lines()
        .find(|l| l.starts_with(kind) && l[kind.len()..].starts_with("  "))
        .unwrap_or_else(|| panic!("no row for {kind}:\n{out}"));
    line[kind.len()..]
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

#[test]
fn a_sweep_over_every_file_kind_serves_no_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = stress(&db, &["--corrupt_sweep=100", "--keys=400", "--tables=2", "--seed=7"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("DONE 100 rounds"), "{out}");
    assert!(
        !out.contains("warning: no"),
        "a file kind is missing from the built database:\n{out}"
    );
    let kinds = [
        "CATALOG",
        "CURRENT",
        "checkpoint",
        "slog",
        "redo log",
        "redo log, last 1 KiB",
        "data-file header",
        "extent data block",
        "extent index/filter/props",
        "extent footer",
        "data-file unused bytes",
    ];
    let mut total = 0;
    for kind in kinds {
        let r = row(&out, kind);
        assert_eq!(r.len(), 7, "{kind}: {r:?}");
        assert!(
            r[0] == 9 || r[0] == 10,
            "{kind}: every kind gets its share of 100 rounds: {r:?}"
        );
        assert_eq!(
            r[0],
            r[1..6].iter().sum::<u64>(),
            "{kind}: every round classified: {r:?}"
        );
        assert_eq!(r[6], 0, "{kind}: wrong data");
        total += r[0];
    }
    assert_eq!(total, 100);
    // Checksummed bytes: every damage is noticed, never silent.
    for kind in &kinds[..10] {
        let r = row(&out, kind);
        assert_eq!(r[4], 0, "{kind}: damage nothing noticed: {r:?}\n{out}");
    }
    // Files read in full at open, and extents read in full by the scans: a typed error.
    for kind in [
        "CATALOG",
        "CURRENT",
        "checkpoint",
        "slog",
        "extent data block",
        "extent index/filter/props",
        "extent footer",
    ] {
        let r = row(&out, kind);
        assert_eq!(
            r[1] + r[2],
            r[0],
            "{kind}: damage not reported by an error: {r:?}\n{out}"
        );
    }
    // Unused bytes are never read: harmless.
    let r = row(&out, "data-file unused bytes");
    assert_eq!(r[4], r[0], "unused bytes: {r:?}");
    // The same database is refused a second time (the sweep builds a fresh one).
    let again = stress(&db, &["--corrupt_sweep=1", "--keys=400", "--tables=2"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
}
