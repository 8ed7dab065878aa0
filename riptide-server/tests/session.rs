//! Integration tests of the SQL layer driven through `Session` without a network: sysbench's
//! statement shapes, a randomized oracle against a `BTreeMap` model, restart, ALTER TABLE,
//! error codes, transactions, current reads, SHOW statements, and text queries through cached
//! shapes against the parser.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide_server::sql::catalog::Catalog;
use riptide_server::sql::error::SqlError;
use riptide_server::sql::parse::parse;
use riptide_server::sql::session::{Outcome, Session, SessionConfig};
use riptide_server::sql::session_vars::{SessionView, SERVER_VERSION, VERSION_COMMENT};
use riptide_server::sql::shape::{Parsed, ShapeCache};
use riptide_server::value::{DateTime, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn open(path: &Path) -> (riptide::Db, Arc<Catalog>) {
    let db = riptide::Db::open(path, riptide::Options::default()).expect("open db");
    let cat = Arc::new(Catalog::open(db.clone()).expect("open catalog"));
    (db, cat)
}

fn session(cat: &Arc<Catalog>, id: u32) -> Session {
    session_with(cat, id, false)
}

/// A session whose locking reads are current reads (`--locking-reads latest`) or not.
fn session_with(cat: &Arc<Catalog>, id: u32, current_reads: bool) -> Session {
    let view = SessionView {
        db: None,
        user: "root".into(),
        connection_id: id,
        last_insert_id: 0,
        autocommit: true,
        isolation: riptide::Isolation::Snapshot,
        now: DateTime::new(2024, 1, 1, 0, 0, 0, 0).unwrap(),
        version: SERVER_VERSION.into(),
        max_allowed_packet: 1 << 26,
        lock_wait_timeout: 5,
        xa_prepare: false,
    };
    Session::new(
        cat.clone(),
        SessionConfig {
            sync: false,
            lock_wait_timeout: Duration::from_secs(5),
            current_reads,
        },
        view,
    )
}

/// Closes a database whose sessions and catalog were dropped by the caller.
fn close(db: riptide::Db, cat: Arc<Catalog>) {
    assert_eq!(Arc::strong_count(&cat), 1, "a session still holds the catalog");
    drop(cat);
    db.close().expect("close db");
}

/// Executes one statement with parameters and waits for its commit.
fn qp(s: &mut Session, sql: &str, params: &[Value]) -> Result<Outcome, SqlError> {
    let stmts = parse(sql)?;
    assert_eq!(stmts.len(), 1, "one statement expected: {sql}");
    let reply = s.execute(&stmts[0], params)?;
    if let Some(h) = reply.commit {
        h.wait()?;
    }
    Ok(reply.outcome)
}

/// Executes one statement without parameters and waits for its commit.
fn q(s: &mut Session, sql: &str) -> Result<Outcome, SqlError> {
    qp(s, sql, &[])
}

/// Executes a statement that must succeed.
fn ok(s: &mut Session, sql: &str) {
    if let Err(e) = q(s, sql) {
        panic!("{sql}: {e}");
    }
}

/// Affected rows of a statement that must succeed with an OK packet.
fn affected(s: &mut Session, sql: &str, params: &[Value]) -> u64 {
    match qp(s, sql, params) {
        Ok(Outcome::Ok { affected, .. }) => affected,
        Ok(Outcome::Rows { .. }) => panic!("{sql}: a result set, not OK"),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// The rows of a query that must succeed.
fn rows(s: &mut Session, sql: &str, params: &[Value]) -> Vec<Vec<Value>> {
    match qp(s, sql, params) {
        Ok(Outcome::Rows { rows, .. }) => rows,
        Ok(Outcome::Ok { .. }) => panic!("{sql}: an OK packet, not rows"),
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn text(v: &Value) -> String {
    match v.to_text() {
        None => "NULL".to_string(),
        Some(b) => String::from_utf8(b).expect("utf-8"),
    }
}

/// The rows of a query in MySQL's text protocol form (`NULL` for NULL).
fn trows(s: &mut Session, sql: &str, params: &[Value]) -> Vec<Vec<String>> {
    rows(s, sql, params)
        .iter()
        .map(|r| r.iter().map(text).collect())
        .collect()
}

/// The error code of a statement that must fail.
fn code(s: &mut Session, sql: &str, params: &[Value]) -> u16 {
    match qp(s, sql, params) {
        Ok(_) => panic!("{sql}: succeeded, an error was expected"),
        Err(e) => e.code,
    }
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn st(v: &str) -> Value {
    Value::str(v)
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. sysbench shapes
// ---------------------------------------------------------------------------------------------

const SBTEST_DDL: &str = "CREATE TABLE sbtest1(\n  id INTEGER NOT NULL AUTO_INCREMENT,\n  k INTEGER DEFAULT '0' NOT NULL,\n  c CHAR(120) DEFAULT '' NOT NULL,\n  pad CHAR(60) DEFAULT '' NOT NULL,\n  PRIMARY KEY (id)\n) /*! ENGINE = innodb */ ";

type SbModel = BTreeMap<i64, (i64, String, String)>;

fn sb_full(s: &mut Session) -> Vec<Vec<String>> {
    trows(s, "SELECT id, k, c, pad FROM sbtest1", &[])
}

fn sb_model_rows(m: &SbModel) -> Vec<Vec<String>> {
    m.iter()
        .map(|(id, (k, c, pad))| vec![id.to_string(), k.to_string(), c.clone(), pad.clone()])
        .collect()
}

#[test]
fn sysbench_statement_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    let mut rng = StdRng::seed_from_u64(0x5b7e57);

    assert_eq!(affected(&mut s, "CREATE DATABASE sbtest", &[]), 1);
    ok(&mut s, "USE sbtest");
    ok(&mut s, SBTEST_DDL);

    // A small pool of c values so that DISTINCT has duplicates to remove.
    let pool: Vec<String> = (0..25)
        .map(|n| format!("{:011}-{:011}-{n:02}", rng.random_range(0..1_000_000_000u64), n * 7))
        .collect();
    const N: i64 = 120;
    let mut model = SbModel::new();
    let mut values = Vec::new();
    for id in 1..=N {
        let k = rng.random_range(1..=40i64);
        let c = pool[rng.random_range(0..pool.len())].clone();
        let pad = format!("{:011}-pad", rng.random_range(0..1_000_000u64));
        values.push(format!("({k}, '{c}', '{pad}')"));
        model.insert(id, (k, c, pad));
    }
    let insert = format!("INSERT INTO sbtest1 (k, c, pad) VALUES {}", values.join(","));
    match q(&mut s, &insert).unwrap() {
        Outcome::Ok {
            affected,
            last_insert_id,
            ..
        } => {
            assert_eq!(affected, N as u64);
            assert_eq!(last_insert_id, 1);
        }
        Outcome::Rows { .. } => panic!("rows from INSERT"),
    }
    ok(&mut s, "CREATE INDEX k_1 ON sbtest1(k)");
    assert_eq!(sb_full(&mut s), sb_model_rows(&model), "ids 1..N generated");

    // Point selects.
    for _ in 0..20 {
        let id = rng.random_range(0..=N + 2);
        let want: Vec<Vec<String>> = model.get(&id).map(|r| vec![r.1.clone()]).into_iter().collect();
        assert_eq!(
            trows(&mut s, "SELECT c FROM sbtest1 WHERE id=?", &[i(id)]),
            want,
            "id {id}"
        );
    }
    // Ranges, sums, ORDER BY, DISTINCT.
    for _ in 0..10 {
        let a = rng.random_range(1..=N);
        let b = a + rng.random_range(0..30);
        let range: Vec<&(i64, String, String)> = model.range(a..=b).map(|(_, r)| r).collect();
        let want: Vec<Vec<String>> = range.iter().map(|r| vec![r.1.clone()]).collect();
        assert_eq!(
            trows(&mut s, "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?", &[i(a), i(b)]),
            want
        );
        let sum: i64 = range.iter().map(|r| r.0).sum();
        assert_eq!(
            trows(
                &mut s,
                "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?",
                &[i(a), i(b)]
            ),
            vec![vec![sum.to_string()]]
        );
        let mut sorted: Vec<String> = range.iter().map(|r| r.1.clone()).collect();
        sorted.sort();
        assert_eq!(
            trows(
                &mut s,
                "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
                &[i(a), i(b)]
            ),
            sorted.iter().map(|c| vec![c.clone()]).collect::<Vec<_>>()
        );
        sorted.dedup();
        assert_eq!(
            trows(
                &mut s,
                "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
                &[i(a), i(b)]
            ),
            sorted.iter().map(|c| vec![c.clone()]).collect::<Vec<_>>()
        );
    }
    // Index updates and non-index updates.
    for _ in 0..15 {
        let id = rng.random_range(1..=N);
        assert_eq!(affected(&mut s, "UPDATE sbtest1 SET k=k+1 WHERE id=?", &[i(id)]), 1);
        model.get_mut(&id).unwrap().0 += 1;
        let id = rng.random_range(1..=N);
        let c = format!("{:011}-updated", rng.random_range(0..1_000_000u64));
        assert_eq!(
            affected(&mut s, "UPDATE sbtest1 SET c=? WHERE id=?", &[st(&c), i(id)]),
            1
        );
        model.get_mut(&id).unwrap().1 = c;
    }
    assert_eq!(affected(&mut s, "UPDATE sbtest1 SET k=k+1 WHERE id=?", &[i(N + 50)]), 0);
    // DELETE + re-INSERT of the same id inside one transaction.
    for _ in 0..5 {
        let id = rng.random_range(1..=N);
        let k = rng.random_range(1..=40i64);
        let c = format!("{:011}-reinserted", rng.random_range(0..1_000_000u64));
        let pad = "pad-reinserted".to_string();
        ok(&mut s, "BEGIN");
        assert_eq!(affected(&mut s, "DELETE FROM sbtest1 WHERE id=?", &[i(id)]), 1);
        assert_eq!(
            affected(
                &mut s,
                "INSERT INTO sbtest1 (id, k, c, pad) VALUES (?, ?, ?, ?)",
                &[i(id), i(k), st(&c), st(&pad)]
            ),
            1
        );
        ok(&mut s, "COMMIT");
        assert!(!s.in_transaction());
        model.insert(id, (k, c, pad));
    }
    // INSERT with id 0 generates a new id.
    match qp(
        &mut s,
        "INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, ?, ?, ?)",
        &[i(7), st("zero-id"), st("zero-pad")],
    )
    .unwrap()
    {
        Outcome::Ok {
            affected,
            last_insert_id,
            ..
        } => {
            assert_eq!(affected, 1);
            assert_eq!(last_insert_id, (N + 1) as u64);
        }
        Outcome::Rows { .. } => panic!("rows from INSERT"),
    }
    model.insert(N + 1, (7, "zero-id".into(), "zero-pad".into()));
    assert_eq!(
        trows(&mut s, "SELECT LAST_INSERT_ID()", &[]),
        vec![vec![(N + 1).to_string()]]
    );
    // k IN (...) through the secondary index.
    for _ in 0..5 {
        let ks: Vec<i64> = (0..6).map(|_| rng.random_range(0..=42i64)).collect();
        let sql = format!(
            "SELECT id, k, c, pad FROM sbtest1 WHERE k IN ({})",
            vec!["?"; ks.len()].join(", ")
        );
        let params: Vec<Value> = ks.iter().map(|&k| i(k)).collect();
        let mut got = trows(&mut s, &sql, &params);
        got.sort_by_key(|r| r[0].parse::<i64>().unwrap());
        let want: Vec<Vec<String>> = sb_model_rows(&model)
            .into_iter()
            .filter(|r| ks.contains(&r[1].parse().unwrap()))
            .collect();
        assert_eq!(got, want, "k IN {ks:?}");
    }
    // Overlapping OR'ed ranges must not count a row twice.
    for (a, b, c, d) in [(5, 20, 10, 30), (1, 40, 1, 40), (10, 15, 15, 16), (30, 35, 1, 31)] {
        let want = model
            .values()
            .filter(|r| (a..=b).contains(&r.0) || (c..=d).contains(&r.0))
            .count();
        assert_eq!(
            trows(
                &mut s,
                "SELECT count(k) FROM sbtest1 WHERE k BETWEEN ? AND ? OR k BETWEEN ? AND ?",
                &[i(a), i(b), i(c), i(d)]
            ),
            vec![vec![want.to_string()]],
            "k in [{a},{b}] or [{c},{d}]"
        );
    }
    assert_eq!(sb_full(&mut s), sb_model_rows(&model));
    drop(s);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 2. Randomized oracle
// ---------------------------------------------------------------------------------------------

/// id -> (k, u)
type Model = BTreeMap<i64, (i64, Option<i64>)>;

fn u_owner(m: &Model, u: Option<i64>) -> Option<i64> {
    let u = u?;
    m.iter().find(|(_, r)| r.1 == Some(u)).map(|(&id, _)| id)
}

fn opt(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Int)
}

fn model_rows<'a>(it: impl Iterator<Item = (&'a i64, &'a (i64, Option<i64>))>) -> Vec<Vec<String>> {
    it.map(|(id, (k, u))| {
        vec![
            id.to_string(),
            k.to_string(),
            u.map_or("NULL".to_string(), |u| u.to_string()),
        ]
    })
    .collect()
}

fn sorted_rows(s: &mut Session, sql: &str, params: &[Value]) -> Vec<Vec<String>> {
    let mut r = trows(s, sql, params);
    r.sort_by_key(|r| r[0].parse::<i64>().unwrap());
    r
}

fn check_oracle(s: &mut Session, m: &Model, rng: &mut StdRng, step: usize) {
    assert_eq!(
        trows(s, "SELECT id, k, u FROM t", &[]),
        model_rows(m.iter()),
        "full scan after op {step}"
    );
    for _ in 0..5 {
        let k = rng.random_range(0..22i64);
        assert_eq!(
            sorted_rows(s, "SELECT id, k, u FROM t WHERE k = ?", &[i(k)]),
            model_rows(m.iter().filter(|r| r.1 .0 == k)),
            "k = {k} after op {step}"
        );
        let a = rng.random_range(0..22i64);
        let b = a + rng.random_range(0..6i64);
        assert_eq!(
            sorted_rows(s, "SELECT id, k, u FROM t WHERE k BETWEEN ? AND ?", &[i(a), i(b)]),
            model_rows(m.iter().filter(|r| (a..=b).contains(&r.1 .0))),
            "k between {a} and {b} after op {step}"
        );
        let u = rng.random_range(0..40i64);
        assert_eq!(
            sorted_rows(s, "SELECT id, k, u FROM t WHERE u = ?", &[i(u)]),
            model_rows(m.iter().filter(|r| r.1 .1 == Some(u))),
            "u = {u} after op {step}"
        );
    }
}

/// Runs one random write on `s` and applies it to `m`.
fn random_op(s: &mut Session, m: &mut Model, rng: &mut StdRng, step: usize) {
    let id = rng.random_range(1..50i64);
    let k = rng.random_range(0..20i64);
    let u = if rng.random_bool(0.2) {
        None
    } else {
        Some(rng.random_range(0..40i64))
    };
    let ctx = format!("op {step}: id={id} k={k} u={u:?}");
    match rng.random_range(0..8) {
        0 => {
            let r = qp(s, "INSERT INTO t (id, k, u) VALUES (?, ?, ?)", &[i(id), i(k), opt(u)]);
            if m.contains_key(&id) || u_owner(m, u).is_some() {
                assert_eq!(r.err().map(|e| e.code), Some(1062), "INSERT {ctx}");
            } else {
                assert!(r.is_ok(), "INSERT {ctx}: {:?}", r.err());
                m.insert(id, (k, u));
            }
        }
        1 => {
            let want = if m.contains_key(&id) || u_owner(m, u).is_some() {
                0
            } else {
                m.insert(id, (k, u));
                1
            };
            assert_eq!(
                affected(
                    s,
                    "INSERT IGNORE INTO t (id, k, u) VALUES (?, ?, ?)",
                    &[i(id), i(k), opt(u)]
                ),
                want,
                "INSERT IGNORE {ctx}"
            );
        }
        2 => {
            let mut want = 1;
            if m.remove(&id).is_some() {
                want += 1;
            }
            if let Some(o) = u_owner(m, u) {
                m.remove(&o);
                want += 1;
            }
            m.insert(id, (k, u));
            assert_eq!(
                affected(s, "REPLACE INTO t (id, k, u) VALUES (?, ?, ?)", &[i(id), i(k), opt(u)]),
                want,
                "REPLACE {ctx}"
            );
        }
        3 => {
            let want = match m.get_mut(&id) {
                Some(r) if r.0 != k => {
                    r.0 = k;
                    1
                }
                _ => 0,
            };
            assert_eq!(
                affected(s, "UPDATE t SET k = ? WHERE id = ?", &[i(k), i(id)]),
                want,
                "UPDATE k {ctx}"
            );
        }
        4 => {
            let r = qp(s, "UPDATE t SET u = ? WHERE id = ?", &[opt(u), i(id)]);
            let owner = u_owner(m, u);
            match m.get_mut(&id) {
                None => assert!(matches!(r, Ok(Outcome::Ok { affected: 0, .. })), "UPDATE u {ctx}"),
                Some(_) if owner.is_some_and(|o| o != id) => {
                    assert_eq!(r.err().map(|e| e.code), Some(1062), "UPDATE u {ctx}")
                }
                Some(row) => {
                    let want = (row.1 != u) as u64;
                    row.1 = u;
                    match r {
                        Ok(Outcome::Ok { affected, .. }) => assert_eq!(affected, want, "UPDATE u {ctx}"),
                        Ok(_) => panic!("rows"),
                        Err(e) => panic!("UPDATE u {ctx}: {e}"),
                    }
                }
            }
        }
        5 => {
            let want = m.remove(&id).is_some() as u64;
            assert_eq!(
                affected(s, "DELETE FROM t WHERE id = ?", &[i(id)]),
                want,
                "DELETE {ctx}"
            );
        }
        6 => {
            // A range update of the indexed column, through that index.
            let hi = k + rng.random_range(0..3i64);
            let mut want = 0;
            for r in m.values_mut() {
                if (k..=hi).contains(&r.0) {
                    r.0 += 5;
                    want += 1;
                }
            }
            assert_eq!(
                affected(s, "UPDATE t SET k = k + 5 WHERE k BETWEEN ? AND ?", &[i(k), i(hi)]),
                want,
                "range UPDATE {ctx} hi={hi}"
            );
            // Keep k in a bounded domain.
            let over: Vec<i64> = m.iter().filter(|r| r.1 .0 >= 20).map(|(&id, _)| id).collect();
            let want = over.len() as u64;
            for id in over {
                m.get_mut(&id).unwrap().0 -= 20;
            }
            assert_eq!(
                affected(s, "UPDATE t SET k = k - 20 WHERE k >= 20", &[]),
                want,
                "wrap {ctx}"
            );
        }
        _ => {
            let want = m.iter().filter(|r| r.1 .0 == k).count() as u64;
            m.retain(|_, r| r.0 != k);
            assert_eq!(
                affected(s, "DELETE FROM t WHERE k = ?", &[i(k)]),
                want,
                "DELETE by k {ctx}"
            );
        }
    }
}

#[test]
fn randomized_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    let mut rng = StdRng::seed_from_u64(20240101);
    ok(&mut s, "CREATE DATABASE d");
    ok(&mut s, "USE d");
    ok(
        &mut s,
        "CREATE TABLE t (id INT NOT NULL, k INT NOT NULL, u INT, PRIMARY KEY (id))",
    );
    ok(&mut s, "CREATE INDEX kx ON t(k)");
    ok(&mut s, "CREATE UNIQUE INDEX ux ON t(u)");

    let mut committed = Model::new();
    let mut step = 0;
    let mut next_check = 100;
    while step < 2000 {
        if rng.random_bool(0.3) {
            // An explicit transaction of a few statements.
            let mut work = committed.clone();
            ok(&mut s, "BEGIN");
            for _ in 0..rng.random_range(1..6) {
                random_op(&mut s, &mut work, &mut rng, step);
                assert!(s.in_transaction(), "op {step} ended the transaction");
                step += 1;
            }
            if rng.random_bool(0.7) {
                ok(&mut s, "COMMIT");
                committed = work;
            } else {
                ok(&mut s, "ROLLBACK");
            }
            assert!(!s.in_transaction());
        } else {
            random_op(&mut s, &mut committed, &mut rng, step);
            assert!(!s.in_transaction());
            step += 1;
        }
        if step >= next_check {
            check_oracle(&mut s, &committed, &mut rng, step);
            next_check += 100;
        }
    }
    check_oracle(&mut s, &committed, &mut rng, step);

    // Statement atomicity inside an open transaction: a duplicate u fails alone.
    let used_u = (0..100).find(|u| u_owner(&committed, Some(*u)).is_some());
    let used_u = used_u.expect("some u in use");
    let free_id = (1000..).find(|id| !committed.contains_key(id)).unwrap();
    ok(&mut s, "BEGIN");
    assert_eq!(
        affected(&mut s, "INSERT INTO t (id, k, u) VALUES (?, 3, NULL)", &[i(free_id)]),
        1
    );
    assert_eq!(
        code(
            &mut s,
            "INSERT INTO t (id, k, u) VALUES (?, 4, ?)",
            &[i(free_id + 1), i(used_u)]
        ),
        1062
    );
    assert_eq!(
        code(&mut s, "UPDATE t SET u = ? WHERE id = ?", &[i(used_u), i(free_id)]),
        1062
    );
    assert!(s.in_transaction(), "a duplicate key does not end the transaction");
    ok(&mut s, "COMMIT");
    committed.insert(free_id, (3, None));
    check_oracle(&mut s, &committed, &mut rng, step);
    drop(s);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 3. Restart
// ---------------------------------------------------------------------------------------------

#[test]
fn restart_keeps_schemas_rows_indexes_and_auto_increment() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    ok(&mut s, "CREATE DATABASE r");
    ok(&mut s, "USE r");
    ok(&mut s, SBTEST_DDL);
    ok(
        &mut s,
        "CREATE TABLE other (a BIGINT NOT NULL, b VARCHAR(20) DEFAULT 'x', PRIMARY KEY (a), UNIQUE KEY ub (b))",
    );
    for n in 1..=30 {
        ok(
            &mut s,
            &format!("INSERT INTO sbtest1 (k, c, pad) VALUES ({}, 'c{n}', 'p{n}')", n % 7),
        );
    }
    ok(
        &mut s,
        "INSERT INTO sbtest1 (id, k, c, pad) VALUES (500, 3, 'c500', 'p500')",
    );
    ok(&mut s, "CREATE INDEX k_1 ON sbtest1(k)");
    ok(
        &mut s,
        "INSERT INTO other (a, b) VALUES (1, 'one'), (2, NULL), (3, 'three')",
    );
    ok(&mut s, "INSERT INTO other (a) VALUES (4)");
    let create1 = trows(&mut s, "SHOW CREATE TABLE sbtest1", &[]);
    let create2 = trows(&mut s, "SHOW CREATE TABLE other", &[]);
    let all1 = trows(&mut s, "SELECT id, k, c, pad FROM sbtest1", &[]);
    let all2 = trows(&mut s, "SELECT a, b FROM other", &[]);
    let k3 = sorted_rows(&mut s, "SELECT id, c FROM sbtest1 WHERE k = 3", &[]);
    assert_eq!(k3.len(), 5, "k=3: ids 3,10,17,24 and 500");
    assert_eq!(all1.len(), 31);
    assert_eq!(all2.len(), 4);
    drop(s);
    close(db, cat);

    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 2);
    ok(&mut s, "USE r");
    assert_eq!(trows(&mut s, "SHOW CREATE TABLE sbtest1", &[]), create1);
    assert_eq!(trows(&mut s, "SHOW CREATE TABLE other", &[]), create2);
    assert_eq!(trows(&mut s, "SELECT id, k, c, pad FROM sbtest1", &[]), all1);
    assert_eq!(trows(&mut s, "SELECT a, b FROM other", &[]), all2);
    assert_eq!(sorted_rows(&mut s, "SELECT id, c FROM sbtest1 WHERE k = 3", &[]), k3);
    assert_eq!(
        trows(&mut s, "SELECT b FROM other WHERE b = 'three'", &[]),
        vec![strs(&["three"])]
    );
    assert_eq!(code(&mut s, "INSERT INTO other (a, b) VALUES (9, 'one')", &[]), 1062);
    match q(&mut s, "INSERT INTO sbtest1 (k, c, pad) VALUES (1, 'after', 'restart')").unwrap() {
        Outcome::Ok { last_insert_id, .. } => assert_eq!(last_insert_id, 501),
        Outcome::Rows { .. } => panic!("rows"),
    }
    assert_eq!(
        trows(&mut s, "SELECT id, c FROM sbtest1 WHERE id > 499", &[]),
        vec![strs(&["500", "c500"]), strs(&["501", "after"])]
    );
    drop(s);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 4. ALTER TABLE ADD COLUMN
// ---------------------------------------------------------------------------------------------

#[test]
fn add_column_with_default() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    ok(&mut s, "CREATE DATABASE a");
    ok(&mut s, "USE a");
    ok(
        &mut s,
        "CREATE TABLE t (id INT NOT NULL, name VARCHAR(10) NOT NULL, PRIMARY KEY (id))",
    );
    ok(
        &mut s,
        "INSERT INTO t (id, name) VALUES (1, 'one'), (2, 'two'), (3, 'three')",
    );
    ok(&mut s, "ALTER TABLE t ADD COLUMN x INT DEFAULT 7");
    assert_eq!(
        trows(&mut s, "SELECT id, name, x FROM t", &[]),
        vec![
            strs(&["1", "one", "7"]),
            strs(&["2", "two", "7"]),
            strs(&["3", "three", "7"])
        ]
    );
    ok(&mut s, "INSERT INTO t (id, name, x) VALUES (4, 'four', 40)");
    ok(&mut s, "INSERT INTO t (id, name) VALUES (5, 'five')");
    ok(&mut s, "INSERT INTO t (id, name, x) VALUES (6, 'six', NULL)");
    assert_eq!(affected(&mut s, "UPDATE t SET x = 20 WHERE id = 2", &[]), 1);
    assert_eq!(affected(&mut s, "UPDATE t SET name = 'uno' WHERE id = 1", &[]), 1);
    let want = vec![
        strs(&["1", "uno", "7"]),
        strs(&["2", "two", "20"]),
        strs(&["3", "three", "7"]),
        strs(&["4", "four", "40"]),
        strs(&["5", "five", "7"]),
        strs(&["6", "six", "NULL"]),
    ];
    assert_eq!(trows(&mut s, "SELECT id, name, x FROM t", &[]), want);
    assert_eq!(
        trows(&mut s, "SELECT id FROM t WHERE x = 7", &[]),
        vec![strs(&["1"]), strs(&["3"]), strs(&["5"])]
    );
    let describe = trows(&mut s, "DESCRIBE t", &[]);
    assert_eq!(describe[2], strs(&["x", "int", "YES", "", "7", ""]));
    drop(s);
    close(db, cat);

    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 2);
    ok(&mut s, "USE a");
    assert_eq!(trows(&mut s, "SELECT id, name, x FROM t", &[]), want);
    assert_eq!(trows(&mut s, "DESCRIBE t", &[]), describe);
    assert_eq!(affected(&mut s, "UPDATE t SET name = 'tres' WHERE id = 3", &[]), 1);
    assert_eq!(
        trows(&mut s, "SELECT id, name, x FROM t WHERE id = 3", &[]),
        vec![strs(&["3", "tres", "7"])]
    );
    drop(s);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 5. Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn errors_have_mysql_codes_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    assert_eq!(code(&mut s, "SELECT * FROM t", &[]), 1046);
    ok(&mut s, "CREATE DATABASE e");
    ok(&mut s, "USE e");
    ok(
        &mut s,
        "CREATE TABLE t (id INT NOT NULL, k INT NOT NULL, c CHAR(5) NOT NULL DEFAULT '', PRIMARY KEY (id))",
    );
    ok(&mut s, "INSERT INTO t (id, k, c) VALUES (1, 10, 'a'), (2, 20, 'bb')");
    let before = trows(&mut s, "SELECT id, k, c FROM t", &[]);
    assert_eq!(before, vec![strs(&["1", "10", "a"]), strs(&["2", "20", "bb"])]);

    let cases: &[(&str, u16)] = &[
        ("INSERT INTO t (id, k) VALUES (1, 5)", 1062),
        ("INSERT INTO t (id, k) VALUES (3, 5), (1, 5)", 1062),
        ("UPDATE t SET id = 2 WHERE id = 1", 1062),
        ("SELECT * FROM nope", 1146),
        ("INSERT INTO nope (id) VALUES (1)", 1146),
        ("SELECT nope FROM t", 1054),
        ("UPDATE t SET nope = 1 WHERE id = 1", 1054),
        ("INSERT INTO t (id, nope) VALUES (3, 1)", 1054),
        ("INSERT INTO t (id, k) VALUES (3, NULL)", 1048),
        ("UPDATE t SET k = NULL WHERE id = 1", 1048),
        ("SELEC 1", 1064),
        ("INSERT INTO t (id, k) VALUES (3", 1064),
        ("SELECT t.id FROM t JOIN t AS u ON t.id = u.id", 1235),
        ("SELECT k, COUNT(*) FROM t GROUP BY k", 1235),
        ("USE nodb", 1049),
        ("INSERT INTO t (id, k, c) VALUES (3, 1, 'abcdef')", 1406),
        ("UPDATE t SET c = 'abcdefgh' WHERE id = 1", 1406),
        ("INSERT INTO t (id, k) VALUES (3, 2147483648)", 1264),
        ("INSERT INTO t (id, k) VALUES (3, -2147483649)", 1264),
        ("UPDATE t SET k = 99999999999 WHERE id = 2", 1264),
    ];
    for &(sql, want) in cases {
        assert_eq!(code(&mut s, sql, &[]), want, "{sql}");
        assert!(!s.in_transaction(), "{sql}");
        assert_eq!(trows(&mut s, "SELECT id, k, c FROM t", &[]), before, "after {sql}");
        assert_eq!(
            trows(&mut s, "SELECT DATABASE()", &[]),
            vec![strs(&["e"])],
            "after {sql}"
        );
    }
    // The same errors inside a transaction undo only the failed statement.
    ok(&mut s, "BEGIN");
    assert_eq!(affected(&mut s, "INSERT INTO t (id, k) VALUES (3, 30)", &[]), 1);
    for &(sql, want) in cases {
        assert_eq!(code(&mut s, sql, &[]), want, "{sql} in a transaction");
        assert!(s.in_transaction(), "{sql}");
    }
    ok(&mut s, "COMMIT");
    let mut after = before.clone();
    after.push(strs(&["3", "30", ""]));
    assert_eq!(trows(&mut s, "SELECT id, k, c FROM t", &[]), after);
    // Boundary values that fit are accepted.
    ok(
        &mut s,
        "INSERT INTO t (id, k, c) VALUES (4, 2147483647, 'abcde'), (5, -2147483648, '')",
    );
    assert_eq!(
        trows(&mut s, "SELECT k, c FROM t WHERE id >= 4", &[]),
        vec![strs(&["2147483647", "abcde"]), strs(&["-2147483648", ""])]
    );
    drop(s);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 6. Transactions
// ---------------------------------------------------------------------------------------------

fn k_of(s: &mut Session, id: i64) -> Vec<Vec<String>> {
    trows(s, "SELECT k FROM t WHERE id = ?", &[i(id)])
}

#[test]
fn transactions_isolation_and_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut a = session(&cat, 1);
    let mut b = session(&cat, 2);
    ok(&mut a, "CREATE DATABASE x");
    ok(&mut a, "USE x");
    ok(&mut b, "USE x");
    ok(
        &mut a,
        "CREATE TABLE t (id INT NOT NULL, k INT NOT NULL, PRIMARY KEY (id))",
    );
    ok(&mut a, "INSERT INTO t (id, k) VALUES (1, 1), (2, 2), (3, 3)");
    let one = |v: &str| vec![vec![v.to_string()]];

    // BEGIN; UPDATE; ROLLBACK.
    ok(&mut a, "BEGIN");
    assert_eq!(affected(&mut a, "UPDATE t SET k = 100 WHERE id = 1", &[]), 1);
    assert_eq!(k_of(&mut a, 1), one("100"), "a transaction sees its own write");
    assert_eq!(k_of(&mut b, 1), one("1"), "another session does not see it");
    ok(&mut a, "ROLLBACK");
    assert!(!a.in_transaction());
    assert_eq!(k_of(&mut a, 1), one("1"));
    assert_eq!(k_of(&mut b, 1), one("1"));

    // SET autocommit=0: a write opens a transaction, COMMIT publishes it.
    ok(&mut a, "SET autocommit=0");
    assert_eq!(affected(&mut a, "UPDATE t SET k = 20 WHERE id = 2", &[]), 1);
    assert!(a.in_transaction());
    assert_eq!(k_of(&mut b, 2), one("2"));
    ok(&mut a, "COMMIT");
    assert!(!a.in_transaction());
    assert_eq!(k_of(&mut b, 2), one("20"));
    // Without COMMIT, ROLLBACK discards it.
    assert_eq!(affected(&mut a, "UPDATE t SET k = 21 WHERE id = 2", &[]), 1);
    ok(&mut a, "ROLLBACK");
    assert_eq!(k_of(&mut b, 2), one("20"));
    assert_eq!(k_of(&mut a, 2), one("20"));
    ok(&mut a, "ROLLBACK");
    ok(&mut a, "SET autocommit=1");
    assert!(!a.in_transaction());

    // BEGIN inside an open transaction commits the first one.
    ok(&mut a, "BEGIN");
    assert_eq!(affected(&mut a, "UPDATE t SET k = 30 WHERE id = 3", &[]), 1);
    ok(&mut a, "BEGIN");
    assert!(a.in_transaction());
    assert_eq!(k_of(&mut b, 3), one("30"));
    ok(&mut a, "ROLLBACK");
    assert_eq!(k_of(&mut a, 3), one("30"));

    // Repeatable read: A's snapshot is pinned by its first read.
    ok(&mut a, "BEGIN");
    assert_eq!(k_of(&mut a, 1), one("1"));
    assert_eq!(affected(&mut b, "UPDATE t SET k = 111 WHERE id = 1", &[]), 1);
    assert_eq!(k_of(&mut a, 1), one("1"), "repeatable read");
    // Write conflict: A updates the row B changed after A's snapshot.
    assert_eq!(code(&mut a, "UPDATE t SET k = 222 WHERE id = 1", &[]), 1213);
    assert!(!a.in_transaction(), "1213 rolls the transaction back");
    assert_eq!(k_of(&mut a, 1), one("111"));
    assert_eq!(k_of(&mut b, 1), one("111"));

    // The rolled-back transaction's earlier writes are gone too.
    ok(&mut a, "BEGIN");
    assert_eq!(affected(&mut a, "UPDATE t SET k = 33 WHERE id = 3", &[]), 1);
    assert_eq!(k_of(&mut a, 1), one("111"));
    assert_eq!(affected(&mut b, "UPDATE t SET k = 112 WHERE id = 1", &[]), 1);
    assert_eq!(code(&mut a, "UPDATE t SET k = 223 WHERE id = 1", &[]), 1213);
    assert!(!a.in_transaction());
    assert_eq!(k_of(&mut a, 3), one("30"));
    assert_eq!(k_of(&mut b, 1), one("112"));
    // A retried transaction succeeds.
    ok(&mut a, "BEGIN");
    assert_eq!(affected(&mut a, "UPDATE t SET k = k + 1 WHERE id = 1", &[]), 1);
    ok(&mut a, "COMMIT");
    assert_eq!(k_of(&mut b, 1), one("113"));
    drop(a);
    drop(b);
    close(db, cat);
}

// ---------------------------------------------------------------------------------------------
// 7. SHOW / DESCRIBE / variables
// ---------------------------------------------------------------------------------------------

#[test]
fn show_describe_and_variables() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    assert_eq!(trows(&mut s, "SELECT DATABASE()", &[]), vec![strs(&["NULL"])]);
    assert_eq!(
        trows(&mut s, "SELECT @@version_comment", &[]),
        vec![vec![VERSION_COMMENT.to_string()]]
    );
    ok(&mut s, "CREATE DATABASE sh");
    ok(&mut s, "CREATE DATABASE other");
    let dbs: BTreeSet<String> = trows(&mut s, "SHOW DATABASES", &[])
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(dbs.contains("information_schema"));
    assert!(dbs.contains("sh") && dbs.contains("other"), "{dbs:?}");
    ok(&mut s, "USE sh");
    assert_eq!(trows(&mut s, "SELECT DATABASE()", &[]), vec![strs(&["sh"])]);
    assert_eq!(trows(&mut s, "SHOW TABLES", &[]), Vec::<Vec<String>>::new());
    ok(&mut s, SBTEST_DDL);
    ok(&mut s, "CREATE INDEX k_1 ON sbtest1(k)");
    ok(
        &mut s,
        "CREATE TABLE misc (a BIGINT NOT NULL, b VARCHAR(30) DEFAULT 'it''s', d DOUBLE, e DECIMAL(10,2) DEFAULT '1.50', \
         f DATETIME, g TEXT, PRIMARY KEY (a), UNIQUE KEY ub (b))",
    );
    let mut tables: Vec<String> = trows(&mut s, "SHOW TABLES", &[])
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    tables.sort();
    assert_eq!(tables, strs(&["misc", "sbtest1"]));
    match q(&mut s, "SHOW TABLES").unwrap() {
        Outcome::Rows { columns, .. } => assert_eq!(columns[0].name, "Tables_in_sh"),
        Outcome::Ok { .. } => panic!("ok"),
    }

    let describe = trows(&mut s, "DESCRIBE sbtest1", &[]);
    assert_eq!(
        describe,
        vec![
            strs(&["id", "int", "NO", "PRI", "NULL", "auto_increment"]),
            strs(&["k", "int", "NO", "MUL", "0", ""]),
            strs(&["c", "char(120)", "NO", "", "", ""]),
            strs(&["pad", "char(60)", "NO", "", "", ""]),
        ]
    );
    for table in ["sbtest1", "misc"] {
        let create = trows(&mut s, &format!("SHOW CREATE TABLE {table}"), &[]);
        assert_eq!(create.len(), 1);
        assert_eq!(create[0][0], table);
        let text = &create[0][1];
        let prefix = format!("CREATE TABLE `{table}` (");
        assert!(text.starts_with(&prefix), "{text}");
        let copy = format!("{table}_copy");
        let again = text.replacen(&prefix, &format!("CREATE TABLE `{copy}` ("), 1);
        ok(&mut s, &again);
        assert_eq!(
            trows(&mut s, &format!("DESCRIBE {copy}"), &[]),
            trows(&mut s, &format!("DESCRIBE {table}"), &[]),
            "{text}"
        );
        assert_eq!(
            trows(&mut s, &format!("SHOW CREATE TABLE {copy}"), &[])[0][1],
            again,
            "the copy prints the same text"
        );
    }
    // The copy of `misc` enforces its unique key and defaults.
    ok(&mut s, "INSERT INTO misc_copy (a) VALUES (1)");
    assert_eq!(
        trows(&mut s, "SELECT a, b, d, e, f, g FROM misc_copy", &[]),
        vec![strs(&["1", "it's", "NULL", "1.50", "NULL", "NULL"])]
    );
    assert_eq!(code(&mut s, "INSERT INTO misc_copy (a) VALUES (2)", &[]), 1062);
    drop(s);
    close(db, cat);
}

/// Two sessions using a fresh database `d`.
fn two_sessions_in_d(cat: &Arc<Catalog>) -> (Session, Session) {
    let mut a = session(cat, 1);
    let mut b = session(cat, 2);
    ok(&mut a, "CREATE DATABASE d");
    ok(&mut a, "USE d");
    ok(&mut b, "USE d");
    (a, b)
}

/// A statement tried without waiting finds the row locked: only that statement is undone
/// (the transaction's earlier write stays), and run again allowed to wait it completes once
/// the holder commits, on the holder's newest value.
#[test]
fn a_nowait_attempt_undoes_only_its_statement_and_the_blocking_retry_sees_the_holders_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, cat) = open(dir.path());
    let (mut a, mut b) = two_sessions_in_d(&cat);
    ok(&mut a, "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL)");
    ok(&mut a, "INSERT INTO t VALUES (1, 10), (2, 20)");
    ok(&mut a, "BEGIN");
    ok(&mut a, "UPDATE t SET k = k + 1 WHERE id = 1");
    ok(&mut b, "BEGIN");
    ok(&mut b, "UPDATE t SET k = k + 100 WHERE id = 2");
    let stmt = parse("UPDATE t SET k = k + 5 WHERE id = 1").unwrap().remove(0);
    let err = b.execute_nowait(&stmt, &[]).err().expect("row 1 is locked by a");
    assert!(err.would_block, "{err}");
    assert!(b.in_transaction(), "only the statement was undone");
    let committer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        ok(&mut a, "COMMIT");
    });
    // Allowed to wait: blocks until a commits, then updates a's value.
    let reply = b.execute(&stmt, &[]).expect("the blocking retry succeeds");
    assert!(reply.commit.is_none());
    committer.join().unwrap();
    ok(&mut b, "COMMIT");
    assert_eq!(
        trows(&mut b, "SELECT id, k FROM t ORDER BY id", &[]),
        vec![strs(&["1", "16"]), strs(&["2", "120"])]
    );
}

/// Review findings, each a regression test: REPLACE against two unique conflicts, ON DUPLICATE
/// KEY UPDATE on a unique conflict, rounded and cross-type range bounds.
#[test]
fn replace_upsert_and_range_bounds_keep_indexes_and_answers_right() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    ok(&mut s, "CREATE DATABASE d");
    ok(&mut s, "USE d");
    ok(
        &mut s,
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, UNIQUE KEY ua (a), UNIQUE KEY ub (b))",
    );
    ok(&mut s, "INSERT INTO t VALUES (1, 10, 20), (2, 11, 21)");
    // Row 3 conflicts with row 1 on a and with row 2 on b: both go (MySQL: 3 affected).
    assert_eq!(affected(&mut s, "REPLACE INTO t VALUES (3, 10, 21)", &[]), 3);
    assert_eq!(
        trows(&mut s, "SELECT id, a, b FROM t", &[]),
        vec![strs(&["3", "10", "21"])]
    );
    assert_eq!(trows(&mut s, "SELECT id FROM t WHERE b = 21", &[]), vec![strs(&["3"])]);
    assert!(trows(&mut s, "SELECT id FROM t WHERE a = 11", &[]).is_empty());
    ok(&mut s, "DELETE FROM t WHERE id = 3");
    assert!(trows(&mut s, "SELECT id FROM t WHERE b = 21", &[]).is_empty());

    ok(
        &mut s,
        "CREATE TABLE u (id INT PRIMARY KEY, v INT, n INT NOT NULL, UNIQUE KEY uv (v))",
    );
    ok(&mut s, "INSERT INTO u VALUES (1, 5, 0)");
    assert_eq!(
        affected(
            &mut s,
            "INSERT INTO u VALUES (2, 5, 0) ON DUPLICATE KEY UPDATE n = n + 1",
            &[]
        ),
        2
    );
    assert_eq!(
        trows(&mut s, "SELECT id, v, n FROM u", &[]),
        vec![strs(&["1", "5", "1"])]
    );

    ok(
        &mut s,
        "CREATE TABLE r (id INT PRIMARY KEY, k INT NOT NULL, c VARCHAR(10), KEY kk (k), KEY kc (c))",
    );
    ok(&mut s, "INSERT INTO r VALUES (1, 2, '01'), (2, 3, 'x'), (3, 4, '1')");
    assert_eq!(
        trows(&mut s, "SELECT id FROM r WHERE k > 2.5 ORDER BY id", &[]),
        vec![strs(&["2"]), strs(&["3"])]
    );
    assert_eq!(trows(&mut s, "SELECT id FROM r WHERE k < 2.4", &[]), vec![strs(&["1"])]);
    assert_eq!(
        trows(&mut s, "SELECT id FROM r WHERE id > 1.5 AND id < 2.5", &[]),
        vec![strs(&["2"])]
    );
    // A text column against a number compares as numbers: '01' and '1' are both 1.
    assert_eq!(
        trows(&mut s, "SELECT id FROM r WHERE c = 1 ORDER BY id", &[]),
        vec![strs(&["1"]), strs(&["3"])]
    );
}

/// A row a transaction inserted before CREATE INDEX began, and committed while the build
/// waits, is in the index.
#[test]
fn create_index_waits_for_transactions_that_began_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, cat) = open(dir.path());
    let (mut a, mut b) = two_sessions_in_d(&cat);
    ok(&mut a, "CREATE TABLE t (id INT PRIMARY KEY, c VARCHAR(10))");
    ok(&mut a, "INSERT INTO t VALUES (1, 'a')");
    ok(&mut a, "BEGIN");
    ok(&mut a, "INSERT INTO t VALUES (5, 'x')");
    let builder = std::thread::spawn(move || {
        ok(&mut b, "CREATE INDEX ic ON t (c)");
        b
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !builder.is_finished(),
        "CREATE INDEX must wait for the open transaction"
    );
    ok(&mut a, "COMMIT");
    let mut b = builder.join().unwrap();
    assert_eq!(trows(&mut b, "SELECT id FROM t WHERE c = 'x'", &[]), vec![strs(&["5"])]);
    assert_eq!(trows(&mut b, "SELECT id FROM t WHERE c = 'a'", &[]), vec![strs(&["1"])]);
}

/// What a DDL statement interrupted by a failover leaves on a replicated partition (an index
/// still write-only, an engine sub-table no schema names) is dropped by
/// `Catalog::repair_interrupted_ddl`, which a new leader runs before the first statement of
/// its term; the same index can then be created again.
#[test]
fn interrupted_ddl_is_repaired_and_the_index_can_be_made_again() {
    use riptide_server::sql::schema::{IndexDef, IndexState};
    let dir = tempfile::tempdir().unwrap();
    let (db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    ok(&mut s, "CREATE DATABASE app");
    ok(&mut s, "CREATE TABLE app.t (id INT PRIMARY KEY, k INT)");
    ok(&mut s, "INSERT INTO app.t VALUES (1, 10), (2, 20)");
    assert_eq!(cat.repair_interrupted_ddl().unwrap(), 0, "nothing to repair");

    // A CREATE INDEX cut short after publishing its write-only index, and a CREATE TABLE cut
    // short after making its engine sub-table.
    let mut schema = cat.state().table("app", "t").unwrap().schema.clone();
    let id = schema.next_index_id;
    schema.next_index_id += 1;
    schema.indexes.push(IndexDef {
        id,
        name: "k_idx".into(),
        columns: vec![1],
        unique: false,
        state: IndexState::WriteOnly,
    });
    let index_table = schema.index_table_name(id);
    cat.replace_schema(schema, false).unwrap();
    assert!(db.table(&index_table).is_ok());
    db.create_table("sql/999999").unwrap();

    // The index, its sub-table and the orphan go.
    assert_eq!(cat.repair_interrupted_ddl().unwrap(), 3);
    assert!(cat.state().table("app", "t").unwrap().schema.indexes.is_empty());
    assert!(db.table(&index_table).is_err() && db.table("sql/999999").is_err());
    ok(&mut s, "CREATE INDEX k_idx ON app.t (k)");
    assert_eq!(
        rows(&mut s, "SELECT id FROM app.t WHERE k = 20", &[]),
        vec![vec![Value::Int(2)]]
    );
    // A DDL statement running on this node (holding the DDL lock) is left to finish its own
    // work: nothing is repaired meanwhile.
    let held = cat.lock_ddl();
    assert_eq!(cat.repair_interrupted_ddl().unwrap(), 0);
    drop(held);
    drop(s);
    close(db, cat);
}

/// REPEATABLE READ with current reads (`--locking-reads latest`, InnoDB's rule): after a
/// SELECT fixed the snapshot and another session changed the row, UPDATE and DELETE work on
/// the newest version (no 1213) and keep the secondary index in step, while plain SELECTs in
/// the transaction still read the snapshot. Without current reads the same UPDATE is 1213.
#[test]
fn current_reads_update_the_newest_row_where_snapshot_isolation_conflicts() {
    for current in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, cat) = open(dir.path());
        let mut a = session_with(&cat, 1, current);
        let mut b = session_with(&cat, 2, current);
        ok(&mut a, "CREATE DATABASE d");
        ok(&mut a, "USE d");
        ok(&mut b, "USE d");
        ok(
            &mut a,
            "CREATE TABLE t (id INT NOT NULL, k INT NOT NULL, c CHAR(10), PRIMARY KEY (id), KEY k_idx (k))",
        );
        ok(
            &mut a,
            "INSERT INTO t (id, k, c) VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')",
        );
        ok(&mut a, "BEGIN");
        assert_eq!(trows(&mut a, "SELECT k FROM t WHERE id = 1", &[]), vec![strs(&["10"])]);
        ok(&mut b, "UPDATE t SET k = k + 1 WHERE id = 1");
        ok(&mut b, "UPDATE t SET c = 'z' WHERE id = 2");
        if !current {
            assert_eq!(code(&mut a, "UPDATE t SET k = k + 1 WHERE id = 1", &[]), 1213);
            assert!(!a.in_transaction(), "1213 rolls the transaction back");
            drop((a, b));
            close(db, cat);
            continue;
        }
        assert_eq!(affected(&mut a, "UPDATE t SET k = k + 1 WHERE id = 1", &[]), 1);
        assert_eq!(trows(&mut a, "SELECT k FROM t WHERE id = 1", &[]), vec![strs(&["12"])]);
        assert_eq!(
            trows(&mut a, "SELECT c FROM t WHERE id = 2", &[]),
            vec![strs(&["b"])],
            "a plain read stays at the snapshot"
        );
        assert_eq!(affected(&mut a, "DELETE FROM t WHERE id = 2", &[]), 1);
        ok(&mut a, "INSERT INTO t (id, k, c) VALUES (2, 22, 'n')");
        assert_eq!(
            trows(&mut a, "SELECT c FROM t WHERE id = 2 FOR UPDATE", &[]),
            vec![strs(&["n"])]
        );
        ok(&mut a, "COMMIT");
        for s in [&mut a, &mut b] {
            assert_eq!(
                trows(s, "SELECT id, k, c FROM t ORDER BY id", &[]),
                vec![
                    strs(&["1", "12", "a"]),
                    strs(&["2", "22", "n"]),
                    strs(&["3", "30", "c"])
                ]
            );
            // The index agrees with the rows: every k is found through it, old ones are gone.
            for (k, n) in [
                ("10", "0"),
                ("11", "0"),
                ("12", "1"),
                ("20", "0"),
                ("22", "1"),
                ("30", "1"),
            ] {
                let sql = format!("SELECT COUNT(*) FROM t WHERE k = {k}");
                assert_eq!(trows(s, &sql, &[]), vec![strs(&[n])], "{sql}");
            }
        }
        drop((a, b));
        close(db, cat);
    }
}

// ---------------------------------------------------------------------------------------------
// Text queries through their cached shapes (`sql::shape`) answer exactly as through the
// parser: a randomized differential test runs the same statements on two databases, one
// parsing every query, the other through a `ShapeCache`, and compares every outcome (rows,
// column definitions, affected rows, LAST_INSERT_ID, error codes) and the final tables.
// ---------------------------------------------------------------------------------------------

/// An outcome in a comparable form.
fn describe(r: Result<Outcome, SqlError>) -> String {
    match r {
        Ok(Outcome::Ok {
            affected,
            last_insert_id,
            info,
        }) => format!("ok {affected} {last_insert_id} {info}"),
        Ok(Outcome::Rows { columns, rows }) => format!("rows {columns:?} {rows:?}"),
        Err(e) => format!("error {}", e.code),
    }
}

fn execute_shaped_or_not(
    s: &mut Session,
    stmt: &sqlparser::ast::Statement,
    params: &[Value],
) -> Result<Outcome, SqlError> {
    let reply = s.execute(stmt, params)?;
    if let Some(h) = reply.commit {
        h.wait()?;
    }
    Ok(reply.outcome)
}

/// Through the parser.
fn run_parsed(s: &mut Session, sql: &str) -> String {
    describe(parse(sql).and_then(|stmts| execute_shaped_or_not(s, &stmts[0], &[])))
}

/// Through the shape cache; also says whether the query was shaped.
fn run_shaped(s: &mut Session, shapes: &ShapeCache, sql: &str) -> (String, bool) {
    match shapes.parse(sql) {
        Ok(Parsed::Shaped(stmt, values)) => (describe(execute_shaped_or_not(s, &stmt, &values)), true),
        Ok(Parsed::Full(stmts)) => (describe(execute_shaped_or_not(s, &stmts[0], &[])), false),
        Err(e) => (describe(Err(e)), false),
    }
}

/// A literal of some kind, as SQL text.
fn literal(rng: &mut StdRng) -> String {
    match rng.random_range(0..12) {
        0 => "0".into(),
        1 => rng.random_range(1..50).to_string(),
        2 => format!("-{}", rng.random_range(1..50)),
        3 => format!("{}", i64::MAX - rng.random_range(0..2)),
        4 => "NULL".into(),
        5 => format!("'{}'", rng.random_range(0..50)),
        6 => format!("'-{}'", rng.random_range(1..50)),
        7 => format!("{}.{}", rng.random_range(0..50), rng.random_range(0..100)),
        8 => [
            "''",
            "'a, b'",
            "'(?)'",
            "'-- x'",
            "'# y'",
            "'\"q\"'",
            "'é€'",
            "'/* c */'",
        ][rng.random_range(0..8)]
        .into(),
        9 => "'it''s'".into(),
        10 => format!("'v{}'", rng.random_range(0..20)),
        _ => format!("{} + {}", rng.random_range(0..9), rng.random_range(0..9)),
    }
}

fn statement(rng: &mut StdRng) -> String {
    let kind = rng.random_range(0..9);
    let limit = rng.random_range(0..3);
    let mut l = || literal(rng);
    match kind {
        0 | 1 => format!("INSERT INTO t (id, k, c) VALUES ({}, {}, {})", l(), l(), l()),
        2 => format!(
            "INSERT INTO t (k, c, d) VALUES ({}, {}, {}), ({}, {}, {})",
            l(),
            l(),
            l(),
            l(),
            l(),
            l()
        ),
        3 => format!("UPDATE t SET k = k + {}, c = {} WHERE id = {}", l(), l(), l()),
        4 => format!("UPDATE t SET d = {} WHERE k BETWEEN {} AND {}", l(), l(), l()),
        5 => format!("DELETE FROM t WHERE id IN ({}, {})", l(), l()),
        6 => format!("SELECT id, k, c, d FROM t WHERE k > {} ORDER BY id", l()),
        7 => format!("SELECT COUNT(*), SUM(k) FROM t WHERE c = {} OR id = {}", l(), l()),
        _ => format!("SELECT {} FROM t WHERE id = {} LIMIT {}", l(), l(), limit),
    }
}

#[test]
fn shaped_text_queries_answer_as_parsed_ones() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ((db_a, cat_a), (db_b, cat_b)) = (open(dir_a.path()), open(dir_b.path()));
    let (mut a, mut b) = (session(&cat_a, 1), session(&cat_b, 1));
    let shapes = ShapeCache::new(1 << 20);
    let ddl = [
        "CREATE DATABASE d",
        "USE d",
        "CREATE TABLE t (id BIGINT NOT NULL AUTO_INCREMENT, k INT, c VARCHAR(20), d DECIMAL(10,2), \
         PRIMARY KEY (id), KEY k_idx (k))",
    ];
    for sql in ddl {
        assert_eq!(run_parsed(&mut a, sql), run_parsed(&mut b, sql), "{sql}");
    }
    let mut rng = StdRng::seed_from_u64(0x5ba9e);
    let mut shaped = 0;
    let steps = 3000;
    for step in 0..steps {
        let sql = statement(&mut rng);
        let expected = run_parsed(&mut a, &sql);
        let (got, was_shaped) = run_shaped(&mut b, &shapes, &sql);
        assert_eq!(got, expected, "step {step}: {sql}");
        shaped += was_shaped as usize;
    }
    // Most queries must go through a shape, or this test checks nothing.
    assert!(shaped > steps / 3, "only {shaped} of {steps} queries were shaped");
    let all = "SELECT id, k, c, d FROM t ORDER BY id";
    let (got, _) = run_shaped(&mut b, &shapes, all);
    assert_eq!(got, run_parsed(&mut a, all));
    assert!(got.len() > 100, "the table is nearly empty: {got}");
    drop((a, b, cat_a, cat_b));
    db_a.close().unwrap();
    db_b.close().unwrap();
}

/// Runs an XA statement, waiting for a commit it makes.
fn xa(s: &mut Session, sql: &str) -> Result<(), SqlError> {
    let stmt = riptide_server::sql::xa::parse_xa(sql).expect("an XA statement")?;
    let reply = s.execute_xa(&stmt)?;
    if let Some(h) = reply.commit {
        h.wait().map_err(SqlError::from_engine)?;
    }
    Ok(())
}

#[test]
fn xa_branches_on_a_server_that_is_not_a_replica_commit_in_one_phase_only() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, cat) = open(dir.path());
    let mut s = session(&cat, 1);
    ok(&mut s, "CREATE DATABASE d");
    ok(&mut s, "USE d");
    ok(&mut s, "CREATE TABLE t (id INT PRIMARY KEY, v INT)");
    xa(&mut s, "XA START 'a'").unwrap();
    ok(&mut s, "INSERT INTO t VALUES (1, 1)");
    assert_eq!(
        q(&mut s, "CREATE TABLE u (id INT PRIMARY KEY)").err().unwrap().code,
        1399
    );
    assert_eq!(xa(&mut s, "XA START 'b'").unwrap_err().code, 1399);
    xa(&mut s, "XA END 'a'").unwrap();
    assert_eq!(xa(&mut s, "XA END 'a'").unwrap_err().code, 1399);
    // Nothing could decide a prepared branch later on a single server: refused, and the
    // branch is still idle (rolled back or committed in one phase).
    assert_eq!(xa(&mut s, "XA PREPARE 'a'").unwrap_err().code, 1235);
    assert_eq!(xa(&mut s, "XA COMMIT 'a'").unwrap_err().code, 1399);
    xa(&mut s, "XA COMMIT 'a' ONE PHASE").unwrap();
    let mut other = session(&cat, 2);
    ok(&mut other, "USE d");
    assert_eq!(
        trows(&mut other, "SELECT v FROM t WHERE id = 1", &[]),
        vec![strs(&["1"])]
    );
    xa(&mut s, "XA START 'c'").unwrap();
    ok(&mut s, "INSERT INTO t VALUES (2, 2)");
    xa(&mut s, "XA END 'c'").unwrap();
    xa(&mut s, "XA ROLLBACK 'c'").unwrap();
    assert_eq!(trows(&mut other, "SELECT COUNT(*) FROM t", &[]), vec![strs(&["1"])]);
    // Outside a branch: decisions by id find nothing prepared here.
    assert_eq!(xa(&mut s, "XA COMMIT 'zz'").unwrap_err().code, 1397);
    assert_eq!(xa(&mut s, "XA ROLLBACK 'zz'").unwrap_err().code, 1397);
    ok(&mut s, "BEGIN");
    assert_eq!(xa(&mut s, "XA START 'd'").unwrap_err().code, 1400);
    assert_eq!(xa(&mut s, "XA ROLLBACK 'd'").unwrap_err().code, 1400);
}
