//! DDL: CREATE/DROP DATABASE and TABLE, CREATE INDEX with an online build, ALTER TABLE ADD
//! COLUMN as a new schema version.
//!
//! Invariants:
//! - every DDL runs under the catalog's DDL lock;
//! - CREATE INDEX: the index is first added write-only and published, then the build waits
//!   for every statement and transaction that began under the old schema (a transaction
//!   holds its catalog pin until its commit has completed); from then on every writer
//!   maintains the index, and every row written without it is committed. The build then walks the rows, locking each (read committed, so it
//!   reads the newest committed version and waits for any writer still holding the row) and
//!   writing its entry. A row a transaction changed before the index existed is therefore
//!   seen after that transaction ends. The index turns public only when the walk is done; a
//!   duplicate found on a UNIQUE index drops the index and fails the statement;
//! - ADD COLUMN never rewrites a row: rows keep the schema version they were written with
//!   and are upgraded when read.

use crate::sql::catalog::Catalog;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::exec::rows::decode_row;
use crate::sql::plan::CreateTablePlan;
use crate::sql::schema::{ColumnDef, IndexDef, IndexState, TableSchema};
use crate::value::Value;
use riptide::{Isolation, ReadOptions, TxnOptions};

/// Rows per transaction of an index build.
const BUILD_BATCH: usize = 1000;

/// CREATE TABLE; false when it existed and IF NOT EXISTS was given.
pub fn create_table(cat: &Catalog, p: &CreateTablePlan) -> SqlResult<bool> {
    let _ddl = cat.lock_ddl();
    let state = cat.state();
    if !state.databases.contains(&p.db) {
        return Err(SqlError::no_such_database(&p.db));
    }
    if state.table(&p.db, &p.name).is_ok() {
        return if p.if_not_exists {
            Ok(false)
        } else {
            Err(SqlError::table_exists(&p.name))
        };
    }
    let id = cat.allocate_table_id()?;
    let indexes = p
        .indexes
        .iter()
        .enumerate()
        .map(|(i, (name, columns, unique))| IndexDef {
            id: i as u32 + 1,
            name: name.clone(),
            columns: columns.clone(),
            unique: *unique,
            state: IndexState::Public,
        })
        .collect::<Vec<_>>();
    let schema = TableSchema {
        id,
        db: p.db.clone(),
        name: p.name.clone(),
        columns: p.columns.clone(),
        primary: p.primary.clone(),
        next_index_id: indexes.len() as u32 + 1,
        indexes,
        version: 0,
        version_columns: vec![p.columns.len() as u32],
    };
    cat.create_table(schema)?;
    Ok(true)
}

/// DROP TABLE; the number dropped.
pub fn drop_tables(cat: &Catalog, tables: &[(String, String)], if_exists: bool) -> SqlResult<usize> {
    let _ddl = cat.lock_ddl();
    let state = cat.state();
    for (db, t) in tables {
        if state.table(db, t).is_err() && !if_exists {
            return Err(SqlError::new(1051, "42S02", format!("Unknown table '{db}.{t}'")));
        }
    }
    let mut n = 0;
    for (db, t) in tables {
        if state.table(db, t).is_ok() {
            cat.drop_table(db, t)?;
            n += 1;
        }
    }
    Ok(n)
}

/// ALTER TABLE ADD COLUMN.
pub fn add_column(cat: &Catalog, db: &str, table: &str, mut column: ColumnDef) -> SqlResult<()> {
    let _ddl = cat.lock_ddl();
    let mut schema = cat.state().table(db, table)?.schema.clone();
    if schema.column(&column.name).is_some() {
        return Err(SqlError::duplicate_column(&column.name));
    }
    if column.default.is_none() {
        // Existing rows need a value: NULL, or the type's implicit default for NOT NULL.
        column.default = Some(if column.nullable {
            Value::Null
        } else if column.ty.is_text() || column.ty.kind == crate::sql::types::TypeKind::Blob {
            Value::str("")
        } else if column.ty.kind == crate::sql::types::TypeKind::DateTime {
            Value::str("0000-00-00 00:00:00")
        } else {
            Value::Int(0)
        });
        column.default = Some(
            column
                .ty
                .coerce(column.default.take().unwrap_or(Value::Null), &column.name)?,
        );
    }
    schema.columns.push(column);
    schema.version += 1;
    schema.version_columns.push(schema.columns.len() as u32);
    cat.replace_schema(schema, false)?;
    Ok(())
}

/// CREATE INDEX (online build, see the module invariants).
pub fn create_index(
    cat: &Catalog,
    db: &str,
    table: &str,
    name: &str,
    columns: &[String],
    unique: bool,
) -> SqlResult<()> {
    let _ddl = cat.lock_ddl();
    let mut schema = cat.state().table(db, table)?.schema.clone();
    if name.eq_ignore_ascii_case("PRIMARY") || schema.indexes.iter().any(|i| i.name.eq_ignore_ascii_case(name)) {
        return Err(SqlError::duplicate_index(name));
    }
    let cols = columns
        .iter()
        .map(|c| {
            schema
                .column(c)
                .ok_or_else(|| SqlError::new(1072, "42000", format!("Key column '{c}' doesn't exist in table")))
        })
        .collect::<SqlResult<Vec<_>>>()?;
    let id = schema.next_index_id;
    schema.next_index_id += 1;
    schema.indexes.push(IndexDef {
        id,
        name: name.to_string(),
        columns: cols,
        unique,
        state: IndexState::WriteOnly,
    });
    let handle = cat.replace_schema(schema.clone(), true)?;
    let pos = handle.schema.indexes.len() - 1;
    let built = build_index(cat, &handle, pos);
    if let Err(e) = built {
        schema.indexes.pop();
        cat.replace_schema(schema, true)?;
        return Err(e);
    }
    schema.indexes[pos].state = IndexState::Public;
    cat.replace_schema(schema, false)?;
    Ok(())
}

fn build_index(cat: &Catalog, h: &crate::sql::catalog::TableHandle, pos: usize) -> SqlResult<()> {
    let ix = &h.schema.indexes[pos];
    let table = &h.indexes[pos];
    // The build waits for writers that hold rows it reaches; it must not give up on a busy
    // row after the default 5 s.
    let opts = TxnOptions {
        isolation: Isolation::ReadCommitted,
        lock_timeout: std::time::Duration::from_secs(3600),
        ..Default::default()
    };
    let mut last: Option<Vec<u8>> = None;
    loop {
        // Keys of the next batch, read without locks, then each locked and re-read.
        let lower = last.as_ref().map(|k| {
            let mut k = k.clone();
            k.push(0);
            k
        });
        let keys: Vec<Vec<u8>> = h
            .primary
            .iter(&ReadOptions {
                lower_bound: lower,
                ..Default::default()
            })?
            .take(BUILD_BATCH)
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        if keys.is_empty() {
            return Ok(());
        }
        let mut txn = cat.db().begin(opts.clone())?;
        for pk in &keys {
            let Some(v) = txn.get_for_update(&h.primary, pk)? else {
                continue;
            };
            let row = decode_row(h, pk, &v)?;
            let (k, val) = h.schema.index_entry(ix, &row, pk);
            if ix.unique && ix.columns.iter().all(|&c| !row[c].is_null()) {
                if let Some(owner) = txn.get_for_update(table, &k)? {
                    if &owner != pk {
                        let text = crate::sql::exec::write::key_text(&ix.columns, &row);
                        return Err(SqlError::duplicate_key(&text, &ix.name));
                    }
                }
            }
            txn.put(table, &k, &val)?;
        }
        txn.commit()?;
        last = keys.last().cloned();
    }
}
