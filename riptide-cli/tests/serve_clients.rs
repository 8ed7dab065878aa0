//! `riptide serve` driven by client programs as people use them: a PyMySQL script (installed
//! with pip into the test's own virtual environment, cached under `target/test-venv`) and an
//! interactive-style `mysql` session reading its commands from stdin.

mod serve_common;

use serve_common::Server;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The PyMySQL release the test installs.
const PYMYSQL: &str = "PyMySQL==1.1.1";

fn text(out: &std::process::Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A virtual environment with PyMySQL, under `target/test-venv` (reused when it already imports
/// pymysql). Panics, with pip's output, when PyPI cannot be reached: the test does not skip.
fn pymysql_venv() -> PathBuf {
    // CARGO_TARGET_TMPDIR is `<target>/tmp`.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .to_path_buf();
    let venv = target.join("test-venv");
    let python = venv.join("bin/python");
    let imports = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "import pymysql; assert pymysql.VERSION[:3] == (1, 1, 1), pymysql.VERSION",
            ])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if imports(&python) {
        return venv;
    }
    // A venv's scripts name its own path, so it is made in place; a run that dies halfway
    // leaves one that does not import pymysql, which the next run makes again.
    let _ = std::fs::remove_dir_all(&venv);
    let out = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .expect("run python3 -m venv (python3 with the venv module is needed)");
    assert!(
        out.status.success(),
        "python3 -m venv {}:\n{}",
        venv.display(),
        text(&out)
    );
    let out = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", PYMYSQL])
        .output()
        .expect("run pip");
    assert!(
        out.status.success(),
        "pip install {PYMYSQL} failed (is PyPI reachable? this test needs it and does not skip):\n{}",
        text(&out)
    );
    assert!(
        imports(&python),
        "{} cannot import pymysql after pip install",
        python.display()
    );
    venv
}

const PY_SCRIPT: &str = r#"
import sys
import pymysql

port = int(sys.argv[1])
conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database="sbtest")
assert conn.get_autocommit() is False, "PyMySQL's default is autocommit off"
cur = conn.cursor()

cur.execute("CREATE TABLE py (id INT PRIMARY KEY, s VARCHAR(40), n INT NOT NULL DEFAULT 0, KEY n1 (n))")
assert cur.execute("INSERT INTO py (id, s, n) VALUES (%s, %s, %s)", (1, "it's", 10)) == 1
rows = [(2, 'say "hi"', 20), (3, "back\\slash", 30), (4, None, 40), (5, "h\u00e9llo \u2713", 50)]
assert cur.executemany("INSERT INTO py (id, s, n) VALUES (%s, %s, %s)", rows) == 4
conn.commit()

# A second connection sees the committed rows, not an uncommitted one.
other = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database="sbtest", autocommit=True)
ocur = other.cursor()
cur.execute("INSERT INTO py (id, s) VALUES (%s, %s)", (6, "uncommitted"))
ocur.execute("SELECT COUNT(*) FROM py")
assert ocur.fetchone() == (5,), "a second connection must see exactly the 5 committed rows"
conn.rollback()
cur.execute("SELECT COUNT(*) FROM py WHERE id = %s", (6,))
assert cur.fetchone() == (0,), "the rolled-back insert is gone"

# Read back with parameters: types and every string byte-exact.
cur.execute("SELECT id, s, n FROM py WHERE id >= %s AND n <= %s ORDER BY id", (1, 50))
got = cur.fetchall()
want = ((1, "it's", 10),) + tuple(rows)
assert got == want, got
cur.execute("SELECT s FROM py WHERE s = %s", ("it's",))
assert cur.fetchall() == (("it's",),)
cur.execute("UPDATE py SET n = n + %s WHERE id IN (%s, %s)", (1, 2, 3))
assert cur.rowcount == 2, cur.rowcount
conn.commit()
cur.execute("SELECT SUM(n) FROM py")
assert int(cur.fetchone()[0]) == 152

# A duplicate key is IntegrityError 1062; the transaction goes on afterwards.
try:
    cur.execute("INSERT INTO py (id, s) VALUES (%s, %s)", (1, "dup"))
except pymysql.err.IntegrityError as e:
    assert e.args[0] == 1062, e.args
else:
    raise AssertionError("a duplicate primary key must raise IntegrityError")
conn.rollback()

cur.execute("SELECT @@version_comment")
(comment,) = cur.fetchone()
assert isinstance(comment, str) and comment, comment
cur.execute("SELECT DATABASE()")
assert cur.fetchone() == ("sbtest",)

cur.execute("DROP TABLE py")
conn.commit()
other.close()
conn.close()
print("OK", comment)
"#;

#[test]
fn a_pymysql_script_uses_parameters_transactions_and_gets_error_1062() {
    let venv = pymysql_venv();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("check.py");
    std::fs::write(&script, PY_SCRIPT).unwrap();
    let s = Server::start(&dir.path().join("data"), false);
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(s.port.to_string())
        .output()
        .expect("run the PyMySQL script");
    assert!(out.status.success(), "the PyMySQL script failed:\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("OK "), "{}", text(&out));
    s.stop();
}

#[test]
fn an_interactive_mysql_session_creates_inserts_selects_updates_commits_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), false);
    // Commands as a person types them, one per line; no -e, no --batch. stdin is not a tty, so
    // the client prints tab-separated output with headers; --force goes on after the error.
    let session = "use sbtest
CREATE TABLE s (id INT PRIMARY KEY, name VARCHAR(20), n INT NOT NULL DEFAULT 0);
INSERT INTO s VALUES (1, 'one', 10), (2, 'two', 20);
SELECT id, name, n FROM s ORDER BY id;
UPDATE s SET n = n + 1 WHERE id = 2;
BEGIN;
INSERT INTO s (id, name) VALUES (3, 'three');
COMMIT;
BEGIN;
DELETE FROM s;
ROLLBACK;
INSERT INTO s VALUES (1, 'dup', 0);
SELECT id, name, n FROM s ORDER BY id;
SELECT COUNT(*) FROM s WHERE n > 0;
";
    let mut child = Command::new("mysql")
        .args(["-h", "127.0.0.1", "-u", "root", "--force"])
        .arg(format!("-P{}", s.port))
        .arg("sbtest")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mysql (scripts/setup.sh installs mariadb-client)");
    child.stdin.take().unwrap().write_all(session.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // The exit status after an error under --force differs between clients (MariaDB's is 0):
    // the error text is what counts.
    assert!(
        stderr.contains("ERROR 1062 (23000) at line 12"),
        "the duplicate insert (line 12) must fail with 1062:\n{}",
        text(&out)
    );
    assert_eq!(stderr.matches("ERROR").count(), 1, "one error only:\n{}", text(&out));
    assert_eq!(
        stdout,
        "id\tname\tn\n1\tone\t10\n2\ttwo\t20\n\
         id\tname\tn\n1\tone\t10\n2\ttwo\t21\n3\tthree\t0\n\
         COUNT(*)\n2\n",
        "{}",
        text(&out)
    );
    s.stop();
}
