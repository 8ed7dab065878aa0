//! `riptide serve` driven by stock clients: the MariaDB `mysql` client and sysbench 1.0.20
//! (both installed by `scripts/setup.sh`), on loopback, against the real binary.
//!
//! Each test starts its own server on a free port (`--listen 127.0.0.1:0`, the bound address
//! is read from the server's first line) and stops it with SIGTERM, which must end it with
//! exit status 0 after closing the database.

mod serve_common;

use serve_common::Server;
use std::process::Command;

#[test]
fn the_mysql_client_creates_writes_reads_and_gets_mysql_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), false);
    let (ok, out, err) = s.mysql(
        Some("sbtest"),
        "CREATE TABLE t (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT 0, c VARCHAR(20), PRIMARY KEY (id), KEY k1 (k));
         INSERT INTO t (k, c) VALUES (5, 'a'), (3, 'b'), (5, 'it\\'s');
         UPDATE t SET k = k + 1 WHERE id = 2;
         SELECT id, k, c FROM t WHERE k BETWEEN 4 AND 6 ORDER BY id DESC;
         SELECT COUNT(*), SUM(k) FROM t;",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "3\t5\tit's\n2\t4\tb\n1\t5\ta\n3\t14\n");
    let (ok, _, err) = s.mysql(Some("sbtest"), "INSERT INTO t VALUES (1, 1, 'dup')");
    assert!(!ok);
    assert!(err.contains("ERROR 1062 (23000)"), "{err}");
    let (ok, _, err) = s.mysql(Some("sbtest"), "SELECT * FROM nope");
    assert!(!ok && err.contains("ERROR 1146 (42S02)"), "{err}");
    let (ok, _, err) = s.mysql(Some("sbtest"), "SELECT t.id FROM t JOIN t AS u ON t.id = u.id");
    assert!(!ok && err.contains("ERROR 1235"), "{err}");
    let (ok, _, err) = s.mysql(Some("sbtest"), "SELEC 1");
    assert!(!ok && err.contains("ERROR 1064"), "{err}");
    // A transaction rolled back leaves nothing; the data survives a clean restart.
    let (ok, out, err) = s.mysql(
        Some("sbtest"),
        "BEGIN; DELETE FROM t; ROLLBACK; SELECT COUNT(*) FROM t;",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "3\n");
    s.stop();
    let s = Server::start(dir.path(), false);
    let (ok, out, err) = s.mysql(
        Some("sbtest"),
        "INSERT INTO t (k) VALUES (9); SELECT id, k FROM t WHERE k = 9;",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "4\t9\n", "AUTO_INCREMENT continues after a restart");
    s.stop();
}

#[test]
fn a_wrong_password_and_an_unknown_user_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), false);
    for args in [["-u", "root", "-pwrong"], ["-u", "nobody", "-p"]] {
        let out = Command::new("mysql")
            .args(["-h", "127.0.0.1", "--batch"])
            .arg(format!("-P{}", s.port))
            .args(&args[..if args[2] == "-p" { 2 } else { 3 }])
            .args(["-e", "SELECT 1"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("ERROR 1045 (28000)"), "{err}");
    }
    // The server still serves others.
    assert!(s.mysql(None, "SELECT 1").0);
    s.stop();
}

/// The bytes of local extents that `riptide inspect levels` reports.
fn local_extent_bytes(dir: &std::path::Path) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .args(["inspect", "levels", "--db"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let line = text
        .lines()
        .find(|l| l.starts_with("tiers: local "))
        .expect("a tiers line");
    line.split(", ")
        .nth(1)
        .and_then(|b| b.split(' ').next())
        .map_or_else(|| panic!("unexpected tiers line {line:?}"), |b| b.parse().unwrap())
}

/// The engine flags of `riptide serve` reach the engine: the same rows take less than half the
/// bytes with zstd on every level than with no compression, and an object store named on the
/// command line is claimed (its `OWNER` object written) at start. A refused value is a usage
/// error (exit status 2) that names the flag.
#[test]
fn engine_flags_set_the_codecs_and_the_object_store() {
    let rows: Vec<String> = (0..2000)
        .map(|i| format!("({i}, '{}')", "order shipped to warehouse ".repeat(15)))
        .collect();
    let load = format!(
        "CREATE TABLE t (id INT NOT NULL, c TEXT, PRIMARY KEY (id)); INSERT INTO t VALUES {};",
        rows.join(",")
    );
    let mut bytes = Vec::new();
    for codecs in ["none,none,none", "zstd,zstd,zstd"] {
        let dir = tempfile::tempdir().unwrap();
        let bucket = dir.path().join("bucket");
        let store = format!("dir:{}", bucket.display());
        let data = dir.path().join("data");
        let s = Server::start_with(
            &data,
            false,
            &[
                "--compression-per-level",
                codecs,
                "--write-buffer-size",
                "65536",
                "--object_store",
                &store,
            ],
        );
        let (ok, err) = s.mysql_script("sbtest", &load);
        assert!(ok, "{err}");
        s.stop();
        assert!(bucket.join("OWNER").exists(), "the object store was not claimed");
        bytes.push(local_extent_bytes(&data));
    }
    assert!(
        bytes[1] * 2 < bytes[0],
        "none {} bytes, zstd {} bytes",
        bytes[0],
        bytes[1]
    );
    for (flag, value) in [
        ("--compression-per-level", "zstd,brotli,none"),
        ("--compression-per-level", "lz4,lz4"),
        ("--zstd-dictionary-bytes", "5"),
        ("--write-buffer-size", "10"),
        ("--l2_tier", "tape"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_riptide"))
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0", flag, value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        let named = flag.trim_start_matches("--").replace('-', "_");
        assert!(err.contains(&named) || err.contains(flag), "{flag} {value}: {err}");
        assert!(
            !dir.path().join("CATALOG").exists(),
            "{flag} {value}: a database was created"
        );
    }
}

/// A replica (`--node-id`) with an object tier is refused before anything is opened: its Raft
/// snapshots could not carry object-tier extents to another node.
#[test]
fn a_replica_with_an_object_tier_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a cluster secret of 32 bytes....\n").unwrap();
    let store = format!("dir:{}", dir.path().join("bucket").display());
    let data = dir.path().join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--node-id",
            "1",
            "--raft-listen",
            "127.0.0.1:0",
        ])
        .arg("--cluster-secret-file")
        .arg(&secret)
        .args(["--object_store", &store])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot have an object tier"), "{err}");
    assert!(!data.join("CATALOG").exists(), "a database was created");
}

/// Runs one sysbench phase; panics with sysbench's output unless it succeeded.
fn sysbench(port: u16, script: &str, phase: &str, extra: &[&str]) -> String {
    let out = Command::new("sysbench")
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            "--mysql-user=root",
            "--mysql-password=",
            "--mysql-db=sbtest",
            "--table-size=500",
            "--time=0",
            "--events=200",
            "--threads=4",
        ])
        .arg(format!("--mysql-port={port}"))
        .args(extra)
        .arg(script)
        .arg(phase)
        .output()
        .expect("run sysbench (scripts/setup.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "sysbench {script} {phase} {extra:?} failed:\n{text}"
    );
    assert!(!text.contains("FATAL"), "sysbench {script} {phase}:\n{text}");
    text
}

#[test]
fn stock_sysbench_runs_every_bundled_oltp_script_with_and_without_prepared_statements() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), false);
    let scripts = [
        "oltp_point_select",
        "oltp_read_only",
        "oltp_read_write",
        "oltp_write_only",
        "oltp_update_index",
        "oltp_update_non_index",
        "oltp_insert",
        "oltp_delete",
        "select_random_points",
        "select_random_ranges",
        "bulk_insert",
    ];
    for ps in ["--db-ps-mode=auto", "--db-ps-mode=disable"] {
        for script in scripts {
            let tables = if script.starts_with("select_random") {
                "--tables=1"
            } else {
                "--tables=2"
            };
            sysbench(s.port, script, "prepare", &[tables, ps]);
            let out = sysbench(s.port, script, "run", &[tables, ps]);
            // Only the errors sysbench retries (1213, 1205) may appear; any other aborts the run.
            assert!(out.contains("ignored errors:"), "{out}");
            sysbench(s.port, script, "cleanup", &[tables, ps]);
        }
    }
    let (ok, out, err) = s.mysql(Some("sbtest"), "SHOW TABLES");
    assert!(ok, "{err}");
    assert_eq!(out, "", "cleanup dropped every table");
    s.stop();
}
