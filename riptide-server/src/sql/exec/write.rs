//! INSERT, REPLACE, UPDATE and DELETE inside an engine transaction, with every secondary
//! index kept in step.
//!
//! Invariants:
//! - every row written is coerced to its schema (types, NOT NULL) before any byte is written;
//! - a row and all its index entries are written in the same transaction, so an index never
//!   disagrees with its rows after a commit or a crash; write-only indexes (being built) are
//!   maintained like public ones;
//! - a row is locked (`get_for_update`) before it is changed, and the filter is re-checked on
//!   the locked version; unique keys are locked before their uniqueness is trusted;
//! - a point statement (`WHERE id = ?`) locks its row without reading anything unlocked
//!   first, so under snapshot isolation its transaction's snapshot can still move (no
//!   needless conflict).

use crate::sql::catalog::TableHandle;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::exec::rows::{candidates, decode_row, point_keys, Reader};
use crate::sql::exec::select::{count_of, passes};
use crate::sql::expr::{display, Ctx, Expr};
use crate::sql::plan::{Access, InsertPlan, ModifyPlan};
use crate::sql::rowcodec::encode_row;
use crate::value::Value;
use riptide::Txn;

/// Primary keys of the rows a locking statement may touch: computed for a point path, else
/// found by an unlocked read (then locked and re-checked by the caller).
pub fn locking_candidates(
    txn: &mut Txn,
    h: &TableHandle,
    access: &Access,
    filter: &Option<Expr>,
    params: &[Value],
) -> SqlResult<Vec<Vec<u8>>> {
    if let Some(keys) = point_keys(h, access, params)? {
        return Ok(keys);
    }
    let mut pks = Vec::new();
    let needed: Vec<usize> = (0..h.schema.columns.len()).collect();
    candidates(&mut Reader::Txn(txn), h, access, params, &needed, &mut |pk, row| {
        if passes(filter, &row, params)? {
            pks.push(pk.to_vec());
        }
        Ok(true)
    })?;
    Ok(pks)
}

/// The key text of a duplicate-key message: the key columns' values joined by `-`.
pub fn key_text(cols: &[usize], row: &[Value]) -> String {
    cols.iter().map(|&c| display(&row[c])).collect::<Vec<_>>().join("-")
}

/// Coerces every column of a full row and checks NOT NULL.
fn check_row(h: &TableHandle, row: &mut [Value]) -> SqlResult<()> {
    for (c, col) in h.schema.columns.iter().enumerate() {
        let v = std::mem::replace(&mut row[c], Value::Null);
        let v = col.ty.coerce(v, &col.name)?;
        if v.is_null() && !col.nullable {
            return Err(SqlError::null_not_allowed(&col.name));
        }
        row[c] = v;
    }
    Ok(())
}

/// Deletes a row and its index entries.
fn delete_row(txn: &mut Txn, h: &TableHandle, pk: &[u8], row: &[Value]) -> SqlResult<()> {
    for (ix, table) in h.schema.indexes.iter().zip(&h.indexes) {
        let (k, _) = h.schema.index_entry(ix, row, pk);
        txn.delete(table, &k)?;
    }
    txn.delete(&h.primary, pk)?;
    Ok(())
}

/// The primary key of a row whose unique index entry conflicts with `row`'s, if any.
fn unique_conflict(txn: &mut Txn, h: &TableHandle, row: &[Value], pk: &[u8]) -> SqlResult<Option<(usize, Vec<u8>)>> {
    for (i, (ix, table)) in h.schema.indexes.iter().zip(&h.indexes).enumerate() {
        if !ix.unique || ix.columns.iter().any(|&c| row[c].is_null()) {
            continue;
        }
        let (k, _) = h.schema.index_entry(ix, row, pk);
        if let Some(owner) = txn.get_for_update(table, &k)? {
            if owner != pk {
                return Ok(Some((i, owner)));
            }
        }
    }
    Ok(None)
}

/// Writes a new row and its index entries (no conflict checks).
fn put_row(txn: &mut Txn, h: &TableHandle, pk: &[u8], row: &[Value]) -> SqlResult<()> {
    for (ix, table) in h.schema.indexes.iter().zip(&h.indexes) {
        let (k, v) = h.schema.index_entry(ix, row, pk);
        txn.put(table, &k, &v)?;
    }
    txn.put(&h.primary, pk, &encode_row(&h.schema, row))?;
    Ok(())
}

/// Result of INSERT: affected rows and the first generated AUTO_INCREMENT value.
pub struct InsertResult {
    /// Affected rows (MySQL's count: 1 per insert, 2 per replaced or updated duplicate).
    pub affected: u64,
    /// The first AUTO_INCREMENT value generated, if any.
    pub first_id: Option<u64>,
}

/// Runs an INSERT / REPLACE / INSERT IGNORE / ON DUPLICATE KEY UPDATE.
pub fn insert(txn: &mut Txn, p: &InsertPlan, params: &[Value]) -> SqlResult<InsertResult> {
    let h = &p.table;
    let schema = &h.schema;
    let ai = schema.auto_increment_column();
    let mut res = InsertResult {
        affected: 0,
        first_id: None,
    };
    for exprs in &p.rows {
        let ctx = Ctx {
            row: &[],
            params,
            aggs: &[],
        };
        let mut row = vec![Value::Null; schema.columns.len()];
        let mut given = vec![false; schema.columns.len()];
        for (&c, e) in p.columns.iter().zip(exprs) {
            row[c] = e.eval(&ctx)?;
            given[c] = true;
        }
        for (c, col) in schema.columns.iter().enumerate() {
            if given[c] || col.auto_increment {
                continue;
            }
            row[c] = match &col.default {
                Some(d) => d.clone(),
                None if col.nullable => Value::Null,
                None => return Err(SqlError::no_default(&col.name)),
            };
        }
        if let Some(c) = ai {
            let generate = matches!(row[c], Value::Null | Value::Int(0) | Value::UInt(0))
                || matches!(&row[c], Value::Bytes(b) if b.as_slice() == b"0");
            if generate {
                let id = h.next_auto_inc();
                row[c] = Value::UInt(id);
                res.first_id.get_or_insert(id);
            }
        }
        check_row(h, &mut row)?;
        if let Some(c) = ai {
            match row[c] {
                Value::Int(i) if i > 0 => h.saw_auto_inc(i as u64),
                Value::UInt(u) => h.saw_auto_inc(u),
                _ => {}
            }
        }
        let row_id = schema.primary.is_empty().then(|| h.next_auto_inc());
        let pk = schema.primary_key(&row, row_id);
        if let Some(old) = txn.get_for_update(&h.primary, &pk)? {
            let old_row = decode_row(h, &pk, &old)?;
            if p.ignore {
                continue;
            }
            if p.replace {
                delete_row(txn, h, &pk, &old_row)?;
                res.affected += 1;
            } else if !p.on_duplicate.is_empty() {
                res.affected += update_row(txn, h, &pk, old_row, &p.on_duplicate, params)? as u64 * 2;
                continue;
            } else {
                return Err(SqlError::duplicate_key(&key_text(&schema.primary, &row), "PRIMARY"));
            }
        }
        // Every unique index may name another row: REPLACE removes each of them (MySQL
        // deletes all rows that conflict), ON DUPLICATE KEY UPDATE updates the first.
        let mut skip = false;
        while let Some((i, owner)) = unique_conflict(txn, h, &row, &pk)? {
            if p.ignore {
                skip = true;
                break;
            }
            let owner_row = match txn.get_for_update(&h.primary, &owner)? {
                Some(v) => decode_row(h, &owner, &v)?,
                None => {
                    let ix = &schema.indexes[i];
                    return Err(SqlError::new(
                        1030,
                        "HY000",
                        format!(
                            "Got error from storage engine: unique index {} names a missing row",
                            ix.name
                        ),
                    ));
                }
            };
            if p.replace {
                delete_row(txn, h, &owner, &owner_row)?;
                res.affected += 1;
            } else if !p.on_duplicate.is_empty() {
                res.affected += update_row(txn, h, &owner, owner_row, &p.on_duplicate, params)? as u64 * 2;
                skip = true;
                break;
            } else {
                let ix = &schema.indexes[i];
                return Err(SqlError::duplicate_key(&key_text(&ix.columns, &row), &ix.name));
            }
        }
        if skip {
            continue;
        }
        put_row(txn, h, &pk, &row)?;
        res.affected += 1;
    }
    Ok(res)
}

/// Applies assignments to a locked row; returns whether it changed.
fn update_row(
    txn: &mut Txn,
    h: &TableHandle,
    pk: &[u8],
    old: Vec<Value>,
    assignments: &[(usize, Expr)],
    params: &[Value],
) -> SqlResult<bool> {
    let schema = &h.schema;
    let mut new = old.clone();
    for (c, e) in assignments {
        // MySQL evaluates single-table assignments left to right over the updated row.
        let v = e.eval(&Ctx {
            row: &new,
            params,
            aggs: &[],
        })?;
        new[*c] = v;
    }
    check_row(h, &mut new)?;
    if new == old {
        return Ok(false);
    }
    if let Some(c) = schema.auto_increment_column() {
        if let Value::Int(i) = new[c] {
            h.saw_auto_inc(i.max(0) as u64);
        }
    }
    let new_pk = if schema.primary.is_empty() {
        pk.to_vec()
    } else {
        schema.primary_key(&new, None)
    };
    if new_pk != pk {
        if txn.get_for_update(&h.primary, &new_pk)?.is_some() {
            return Err(SqlError::duplicate_key(&key_text(&schema.primary, &new), "PRIMARY"));
        }
        txn.delete(&h.primary, pk)?;
    }
    for (ix, table) in schema.indexes.iter().zip(&h.indexes) {
        let (ok, ov) = schema.index_entry(ix, &old, pk);
        let (nk, nv) = schema.index_entry(ix, &new, &new_pk);
        if ok == nk && ov == nv {
            continue;
        }
        if ok != nk {
            txn.delete(table, &ok)?;
            if ix.unique && ix.columns.iter().all(|&c| !new[c].is_null()) {
                if let Some(owner) = txn.get_for_update(table, &nk)? {
                    if owner != new_pk {
                        return Err(SqlError::duplicate_key(&key_text(&ix.columns, &new), &ix.name));
                    }
                }
            }
        }
        txn.put(table, &nk, &nv)?;
    }
    txn.put(&h.primary, &new_pk, &encode_row(schema, &new))?;
    Ok(true)
}

/// Result of UPDATE / DELETE.
pub struct ModifyResult {
    /// Rows that matched the WHERE.
    pub matched: u64,
    /// Rows changed (deleted rows for DELETE).
    pub changed: u64,
}

/// Runs an UPDATE or DELETE.
pub fn modify(txn: &mut Txn, p: &ModifyPlan, params: &[Value]) -> SqlResult<ModifyResult> {
    let h = &p.table;
    let limit = count_of(&p.limit, params, "LIMIT")?;
    let mut res = ModifyResult { matched: 0, changed: 0 };
    for pk in locking_candidates(txn, h, &p.access, &p.filter, params)? {
        if limit.is_some_and(|l| res.matched >= l) {
            break;
        }
        let Some(v) = txn.get_for_update(&h.primary, &pk)? else {
            continue;
        };
        let row = decode_row(h, &pk, &v)?;
        if !passes(&p.filter, &row, params)? {
            continue;
        }
        res.matched += 1;
        if p.delete {
            delete_row(txn, h, &pk, &row)?;
            res.changed += 1;
        } else if update_row(txn, h, &pk, row, &p.assignments, params)? {
            res.changed += 1;
        }
    }
    Ok(res)
}
