//! SHOW and DESCRIBE: result sets built from the catalog, the session and the engine's
//! counters. Every column is a string column, as MySQL sends them.
//!
//! Invariant: `SHOW CREATE TABLE` prints a statement that this server parses back to the
//! same schema (the round trip is tested).

use crate::protocol::{ColumnInfo, FieldType};
use crate::sql::catalog::{Catalog, TableHandle};
use crate::sql::expr::{display, like};
use crate::sql::plan::ShowPlan;
use crate::sql::session_vars::{system_variable, SessionView, VARIABLES};
use crate::value::Value;

/// A string result column.
pub fn text_column(name: &str) -> ColumnInfo {
    ColumnInfo {
        schema: String::new(),
        table: String::new(),
        name: name.to_string(),
        field_type: FieldType::VarString,
        length: 256,
        flags: 0,
        decimals: 0,
        charset: 45,
    }
}

fn matches(name: &str, pattern: &Option<String>) -> bool {
    pattern
        .as_ref()
        .is_none_or(|p| like(name.to_ascii_lowercase().as_bytes(), p.to_ascii_lowercase().as_bytes()))
}

fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// `SHOW CREATE TABLE` text.
pub fn create_table_sql(h: &TableHandle) -> String {
    let s = &h.schema;
    let mut lines = Vec::new();
    for c in &s.columns {
        let mut l = format!("  {} {}", quote_ident(&c.name), c.ty.sql());
        if !c.nullable {
            l.push_str(" NOT NULL");
        }
        if c.auto_increment {
            l.push_str(" AUTO_INCREMENT");
        } else if let Some(d) = &c.default {
            match d {
                Value::Null => l.push_str(" DEFAULT NULL"),
                Value::Bytes(b) => l.push_str(&format!(
                    " DEFAULT '{}'",
                    String::from_utf8_lossy(b).replace('\\', "\\\\").replace('\'', "\\'")
                )),
                other => l.push_str(&format!(" DEFAULT '{}'", display(other))),
            }
        }
        lines.push(l);
    }
    let cols = |cs: &[usize]| {
        cs.iter()
            .map(|&c| quote_ident(&s.columns[c].name))
            .collect::<Vec<_>>()
            .join(",")
    };
    if !s.primary.is_empty() {
        lines.push(format!("  PRIMARY KEY ({})", cols(&s.primary)));
    }
    for ix in &s.indexes {
        let kind = if ix.unique { "UNIQUE KEY" } else { "KEY" };
        lines.push(format!("  {kind} {} ({})", quote_ident(&ix.name), cols(&ix.columns)));
    }
    format!(
        "CREATE TABLE {} (\n{}\n) ENGINE=Riptide",
        quote_ident(&s.name),
        lines.join(",\n")
    )
}

/// Runs a SHOW; returns columns and rows.
pub fn run(p: &ShowPlan, cat: &Catalog, session: &SessionView) -> (Vec<ColumnInfo>, Vec<Vec<Value>>) {
    let state = cat.state();
    match p {
        ShowPlan::Databases(pat) => {
            let mut rows: Vec<Vec<Value>> = vec![vec![Value::str("information_schema")]];
            rows.extend(
                state
                    .databases
                    .iter()
                    .filter(|d| matches(d, pat))
                    .map(|d| vec![Value::str(d)]),
            );
            (vec![text_column("Database")], rows)
        }
        ShowPlan::Tables(db, pat) => (
            vec![text_column(&format!("Tables_in_{db}"))],
            state
                .tables_of(db)
                .iter()
                .filter(|t| matches(&t.schema.name, pat))
                .map(|t| vec![Value::str(&t.schema.name)])
                .collect(),
        ),
        ShowPlan::CreateTable(h) => (
            vec![text_column("Table"), text_column("Create Table")],
            vec![vec![
                Value::str(&h.schema.name),
                Value::from_string(create_table_sql(h)),
            ]],
        ),
        ShowPlan::Columns(h) => {
            let cols = ["Field", "Type", "Null", "Key", "Default", "Extra"]
                .map(text_column)
                .to_vec();
            let s = &h.schema;
            let rows = s
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let key = if s.primary.contains(&i) {
                        "PRI"
                    } else if s.indexes.iter().any(|ix| ix.columns.first() == Some(&i) && ix.unique) {
                        "UNI"
                    } else if s.indexes.iter().any(|ix| ix.columns.first() == Some(&i)) {
                        "MUL"
                    } else {
                        ""
                    };
                    vec![
                        Value::str(&c.name),
                        Value::from_string(c.ty.sql()),
                        Value::str(if c.nullable { "YES" } else { "NO" }),
                        Value::str(key),
                        c.default.clone().unwrap_or(Value::Null),
                        Value::str(if c.auto_increment { "auto_increment" } else { "" }),
                    ]
                })
                .collect();
            (cols, rows)
        }
        ShowPlan::Variables(pat) => (
            vec![text_column("Variable_name"), text_column("Value")],
            VARIABLES
                .iter()
                .filter(|v| matches(v, pat))
                .filter_map(|v| system_variable(v, session).map(|x| vec![Value::str(v), x]))
                .collect(),
        ),
        ShowPlan::Warnings => (["Level", "Code", "Message"].map(text_column).to_vec(), Vec::new()),
        ShowPlan::Engines => (
            ["Engine", "Support", "Comment", "Transactions", "XA", "Savepoints"]
                .map(text_column)
                .to_vec(),
            vec![[
                "Riptide",
                "DEFAULT",
                "X-Engine-style tiered LSM-tree",
                "YES",
                "NO",
                "YES",
            ]
            .map(Value::str)
            .to_vec()],
        ),
        ShowPlan::Status(pat) => {
            let stats = cat.db().stats();
            let txn = cat.db().txn_stats();
            let all = [
                ("Riptide_memtable_bytes", cat.db().memtable_usage() as u64),
                ("Riptide_flushes", stats.flushes),
                ("Riptide_compactions", stats.compactions),
                ("Riptide_txn_committed", txn.committed),
                ("Riptide_txn_rolled_back", txn.rolled_back),
                ("Riptide_txn_conflicts", txn.conflicts),
                ("Riptide_lock_waits", txn.lock_waits),
                ("Riptide_deadlocks", txn.deadlocks),
            ];
            (
                vec![text_column("Variable_name"), text_column("Value")],
                all.iter()
                    .filter(|(n, _)| matches(n, pat))
                    .map(|(n, v)| vec![Value::str(n), Value::from_string(v.to_string())])
                    .collect(),
            )
        }
    }
}
