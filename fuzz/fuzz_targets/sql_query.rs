//! Fuzz target `sql_query`: SQL text (UTF-8, at most 4 KiB) parsed with
//! `riptide_server::sql::parse::parse` (or, starting with `XA`, `sql::xa::parse_xa`), then each
//! statement bound and executed through a
//! `Session` against a small database shared by the process (`d.t` with a few rows, recreated
//! when an input drops it). SQL errors are fine; any panic, abort, overflow or out-of-memory
//! is a bug.
#![no_main]

use riptide_server::sql::catalog::Catalog;
use riptide_server::sql::parse::parse;
use riptide_server::sql::session::{Session, SessionConfig};
use riptide_server::sql::session_vars::{SessionView, SERVER_VERSION};
use riptide_server::value::{DateTime, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const MAX_INPUT: usize = 4096;
const MAX_STATEMENTS: usize = 8;
const SETUP: &[&str] = &[
    "CREATE DATABASE IF NOT EXISTS d",
    "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, k INT, c VARCHAR(20), KEY k1(k))",
    "INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 10, NULL), (4, NULL, 'dd')",
];

fn catalog() -> &'static Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("riptide-fuzz-sql-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the database directory");
        let db = riptide::Db::open(&dir, riptide::Options::default()).expect("open db");
        Arc::new(Catalog::open(db).expect("open catalog"))
    })
}

fn session() -> Session {
    let view = SessionView {
        db: None,
        user: "root".into(),
        connection_id: 1,
        last_insert_id: 0,
        autocommit: true,
        isolation: riptide::Isolation::Snapshot,
        now: DateTime::new(2024, 1, 1, 0, 0, 0, 0).expect("valid"),
        version: SERVER_VERSION.into(),
        max_allowed_packet: 1 << 20,
        lock_wait_timeout: 1,
        xa_prepare: false,
    };
    Session::new(
        catalog().clone(),
        SessionConfig {
            sync: false,
            lock_wait_timeout: Duration::from_secs(1),
            current_reads: false,
        },
        view,
    )
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    // An XA statement (parsed by hand, not by sqlparser) runs alone in a fresh session.
    if let Some(xa) = riptide_server::sql::xa::parse_xa(text) {
        if let Ok(xa) = xa {
            let _ = session().execute_xa(&xa);
        }
        return;
    }
    let Ok(stmts) = parse(text) else { return };
    // (Re)creates d.t when missing (first input, or an input dropped it).
    let setup: Vec<_> = if catalog().state().table("d", "t").is_err() {
        SETUP.iter().flat_map(|sql| parse(sql).expect("setup parses")).collect()
    } else {
        Vec::new()
    };
    let mut s = session();
    // Runs one statement to its end (waiting for its commit); errors are ignored.
    let run = |s: &mut Session, stmt| {
        let params = match s.bind(stmt) {
            Ok(b) => vec![Value::Int(1); b.params.min(64)],
            Err(_) => Vec::new(),
        };
        if let Ok(reply) = s.execute(stmt, &params) {
            if let Some(h) = reply.commit {
                let _ = h.wait();
            }
        }
    };
    for stmt in &setup {
        run(&mut s, stmt);
    }
    s.view.db = Some("d".into());
    for stmt in stmts.iter().take(MAX_STATEMENTS) {
        run(&mut s, stmt);
    }
    s.rollback_open();
});
