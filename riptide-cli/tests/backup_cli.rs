//! `riptide checkpoint` and `riptide backup create|list|verify|restore` from the command line:
//! the copies open with the data, a damaged backup fails `verify` with exit status 1, and bad
//! flags are usage errors.

use riptide::{Db, Options};
use std::path::Path;
use std::process::{Command, Output};

fn riptide(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .args(args)
        .output()
        .expect("run riptide")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn get(db: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let db = Db::open(db, Options::default()).unwrap();
    let v = db.default_table().get(key).unwrap();
    db.close().unwrap();
    v
}

#[test]
fn checkpoint_and_backups_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let db = Db::open(&live, Options::default()).unwrap();
    for i in 0..5000u32 {
        db.default_table()
            .put(format!("k{i:05}").as_bytes(), &i.to_le_bytes().repeat(20))
            .unwrap();
    }
    db.flush().unwrap();
    db.default_table().put(b"last", b"in the redo log").unwrap();
    db.close().unwrap();
    let p = |x: &Path| x.display().to_string();

    let copy = dir.path().join("copy");
    let o = riptide(&[
        "checkpoint",
        &format!("--db={}", p(&live)),
        &format!("--to={}", p(&copy)),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("extents copied"), "{}", text(&o));
    assert_eq!(get(&copy, b"last").as_deref(), Some(&b"in the redo log"[..]));

    let store = format!("--backups=dir:{}", p(&dir.path().join("backups")));
    let o = riptide(&["backup", "create", &format!("--db={}", p(&live)), &store]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).starts_with("backup 1 in "), "{}", text(&o));
    let o = riptide(&["backup", "create", &format!("--db={}", p(&live)), &store]);
    assert!(
        text(&o).contains(" 0 uploaded"),
        "second backup not incremental: {}",
        text(&o)
    );
    let o = riptide(&["backup", "list", &store]);
    assert!(o.status.success() && text(&o).lines().count() == 3, "{}", text(&o));
    let o = riptide(&["backup", "verify", &store, "--id=2"]);
    assert!(o.status.success() && text(&o).contains("OK"), "{}", text(&o));
    let restored = dir.path().join("restored");
    let o = riptide(&["backup", "restore", &store, "--id=1", &format!("--db={}", p(&restored))]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(get(&restored, b"k00042"), Some(42u32.to_le_bytes().repeat(20)));

    // Damage: verify fails with exit status 1 and names the problem.
    let ext_dir = dir.path().join("backups/extents");
    let victim = std::fs::read_dir(&ext_dir).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[50] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let o = riptide(&["backup", "verify", &store, "--id=1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("corrupt") || text(&o).contains("does not match"),
        "{}",
        text(&o)
    );

    // Usage errors exit 2; a missing backup exits 1.
    assert_eq!(riptide(&["backup", "verify", &store]).status.code(), Some(2));
    assert_eq!(riptide(&["backup", "list", "--backups=ftp://x"]).status.code(), Some(1));
    assert_eq!(riptide(&["backup", "verify", &store, "--id=9"]).status.code(), Some(1));
}

/// `riptide compact` moves every table into its bottom level (zstd there by default: the
/// database shrinks), keeps every key, and fails with status 1 on an unknown table.
#[test]
fn compact_moves_every_table_to_its_bottom_level() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::open(&path, Options::default()).unwrap();
    let other = db.create_table("other").unwrap();
    for i in 0..20_000u32 {
        let v = format!("value {i:08} {}", "x".repeat(60));
        db.default_table()
            .put(format!("k{i:06}").as_bytes(), v.as_bytes())
            .unwrap();
        other.put(format!("o{i:06}").as_bytes(), v.as_bytes()).unwrap();
    }
    drop(other);
    db.close().unwrap();
    let levels = |p: &Path| {
        let db = Db::open(p, Options::default()).unwrap();
        let per_table: Vec<(usize, usize)> = db
            .tables()
            .iter()
            .map(|t| {
                let s = db.table(t).unwrap().level_info().extents;
                (s[0] + s[1], s[2])
            })
            .collect();
        db.close().unwrap();
        per_table
    };
    assert!(
        levels(&path).iter().all(|&(upper, _)| upper > 0),
        "the fill left data above L2"
    );
    let out = riptide(&["compact", "--db", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("2 tables compacted"), "{}", text(&out));
    assert!(
        levels(&path).iter().all(|&(upper, bottom)| upper == 0 && bottom > 0),
        "{:?}",
        levels(&path)
    );
    assert_eq!(
        get(&path, b"k019999").unwrap(),
        format!("value {:08} {}", 19_999, "x".repeat(60)).into_bytes()
    );
    let out = riptide(&["compact", "--db", path.to_str().unwrap(), "--table", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("nosuch"), "{}", text(&out));
    // Other codecs for the compaction: every extent is rewritten with them (raw L2 takes more
    // bytes than zstd), and the rows stay exact.
    let live = |args: &[&str]| -> u64 {
        let mut all = vec!["compact", "--db", path.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = riptide(&all);
        assert!(out.status.success(), "{}", text(&out));
        let t = text(&out);
        let after = t
            .lines()
            .find(|l| l.starts_with("after:"))
            .unwrap_or_else(|| panic!("{t}"));
        after.split_whitespace().nth(3).unwrap().parse().unwrap()
    };
    let zstd = live(&[]);
    let raw = live(&["--compression-per-level", "lz4,lz4,none"]);
    assert!(raw > zstd * 3 / 2, "raw L2 {raw} bytes, zstd {zstd}");
    let dict = live(&[
        "--compression-per-level",
        "lz4,lz4,zstd:3",
        "--zstd-dictionary-bytes",
        "4096",
    ]);
    assert!(dict < raw, "zstd with a dictionary {dict} bytes, raw {raw}");
    assert_eq!(
        get(&path, b"k000123").unwrap(),
        format!("value {:08} {}", 123, "x".repeat(60)).into_bytes()
    );
    for bad in [
        &["--compression-per-level", "lz4,zstd"][..],
        &["--zstd-dictionary-bytes", "7"],
    ] {
        let mut all = vec!["compact", "--db", path.to_str().unwrap()];
        all.extend_from_slice(bad);
        let out = riptide(&all);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {}", text(&out));
    }
}
