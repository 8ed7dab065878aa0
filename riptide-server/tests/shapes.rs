//! Text queries through their cached shapes (`sql::shape`) answer exactly as through the
//! parser: a randomized differential test runs the same statements on two databases, one
//! parsing every query, the other through a `ShapeCache`, and compares every outcome (rows,
//! column definitions, affected rows, LAST_INSERT_ID, error codes) and the final tables.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide_server::sql::catalog::Catalog;
use riptide_server::sql::error::SqlError;
use riptide_server::sql::parse::parse;
use riptide_server::sql::session::{Outcome, Session, SessionConfig};
use riptide_server::sql::session_vars::{SessionView, SERVER_VERSION};
use riptide_server::sql::shape::{Parsed, ShapeCache};
use riptide_server::value::{DateTime, Value};
use std::sync::Arc;
use std::time::Duration;

fn session(cat: &Arc<Catalog>) -> Session {
    let view = SessionView {
        db: None,
        user: "root".into(),
        connection_id: 1,
        last_insert_id: 0,
        autocommit: true,
        isolation: riptide::Isolation::Snapshot,
        now: DateTime::new(2024, 1, 1, 0, 0, 0, 0).unwrap(),
        version: SERVER_VERSION.into(),
        max_allowed_packet: 1 << 26,
        lock_wait_timeout: 5,
    };
    let config = SessionConfig {
        sync: false,
        lock_wait_timeout: Duration::from_secs(5),
        current_reads: false,
    };
    Session::new(cat.clone(), config, view)
}

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

fn execute(s: &mut Session, stmt: &sqlparser::ast::Statement, params: &[Value]) -> Result<Outcome, SqlError> {
    let reply = s.execute(stmt, params)?;
    if let Some(h) = reply.commit {
        h.wait()?;
    }
    Ok(reply.outcome)
}

/// Through the parser.
fn run_parsed(s: &mut Session, sql: &str) -> String {
    describe(parse(sql).and_then(|stmts| execute(s, &stmts[0], &[])))
}

/// Through the shape cache; also says whether the query was shaped.
fn run_shaped(s: &mut Session, shapes: &ShapeCache, sql: &str) -> (String, bool) {
    match shapes.parse(sql) {
        Ok(Parsed::Shaped(stmt, values)) => (describe(execute(s, &stmt, &values)), true),
        Ok(Parsed::Full(stmts)) => (describe(execute(s, &stmts[0], &[])), false),
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
    let open = |p: &std::path::Path| {
        let db = riptide::Db::open(p, riptide::Options::default()).expect("open db");
        let cat = Arc::new(Catalog::open(db.clone()).expect("open catalog"));
        (db, cat)
    };
    let ((db_a, cat_a), (db_b, cat_b)) = (open(dir_a.path()), open(dir_b.path()));
    let (mut a, mut b) = (session(&cat_a), session(&cat_b));
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
