//! Finding rows: the executor's view of the engine (inside a transaction or at a statement
//! snapshot) and the walk of an access path.
//!
//! Invariants:
//! - [`candidates`] yields every row its access path covers, each once (several ranges of
//!   one statement may overlap; rows are deduplicated by primary key), and nothing that is
//!   not stored; callers still apply the filter.
//! - A bound value that cannot be coerced to its key column's type makes the walk a full
//!   scan: the filter decides, so no row is lost to a conversion.

use crate::sql::catalog::TableHandle;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::expr::{Ctx, Expr};
use crate::sql::keycodec::{self, prefix_successor};
use crate::sql::plan::{Access, Bound, KeyRange};
use crate::sql::rowcodec::decode_row_into;
use crate::value::Value;
use riptide::{DbIterator, ReadOptions, Snapshot, Table, Txn, TxnCursor};
use std::collections::HashSet;

/// A row visitor: `(primary key, row)`; returns false to stop the walk.
pub type RowVisitor<'a> = dyn FnMut(&[u8], Vec<Value>) -> SqlResult<bool> + 'a;

/// The byte bounds `[lower, upper)` of a key range.
type ByteRange = (Vec<u8>, Option<Vec<u8>>);

/// Where a statement reads.
pub enum Reader<'a> {
    /// Inside a transaction: its snapshot (or read committed) plus its own writes.
    Txn(&'a mut Txn),
    /// Outside a transaction: one snapshot for the statement.
    Snapshot(Snapshot),
    /// Outside a transaction, for a statement that reads one key: the newest visible
    /// version, with no snapshot to register (a single read is consistent by itself).
    Latest,
}

/// A positioned cursor of either kind.
pub enum Cursor {
    /// A transaction's cursor.
    Txn(TxnCursor),
    /// A plain engine cursor.
    Db(DbIterator),
}

impl Cursor {
    fn valid(&self) -> bool {
        match self {
            Cursor::Txn(c) => c.valid(),
            Cursor::Db(c) => c.valid(),
        }
    }
    fn key(&self) -> &[u8] {
        match self {
            Cursor::Txn(c) => c.key(),
            Cursor::Db(c) => c.key(),
        }
    }
    fn value(&self) -> &[u8] {
        match self {
            Cursor::Txn(c) => c.value(),
            Cursor::Db(c) => c.value(),
        }
    }
    fn next(&mut self) {
        match self {
            Cursor::Txn(c) => c.next(),
            Cursor::Db(c) => c.next(),
        }
    }
    fn start(&mut self) {
        match self {
            Cursor::Txn(c) => c.seek_to_first(),
            Cursor::Db(c) => c.seek_to_first(),
        }
    }
    fn status(&self) -> riptide::Result<()> {
        match self {
            Cursor::Txn(c) => c.status(),
            Cursor::Db(c) => c.status(),
        }
    }
}

impl Reader<'_> {
    /// Reads one key.
    pub fn get(&mut self, table: &Table, key: &[u8]) -> SqlResult<Option<Vec<u8>>> {
        Ok(match self {
            Reader::Txn(t) => t.get(table, key)?,
            Reader::Snapshot(s) => table.get_opt(
                key,
                &ReadOptions {
                    snapshot: Some(s.clone()),
                    ..Default::default()
                },
            )?,
            Reader::Latest => table.get(key)?,
        })
    }

    /// A cursor over `[lower, upper)` of `table`.
    pub fn cursor(&mut self, table: &Table, lower: Option<Vec<u8>>, upper: Option<Vec<u8>>) -> SqlResult<Cursor> {
        let mut c = match self {
            Reader::Txn(t) => Cursor::Txn(t.raw_iter(
                table,
                &ReadOptions {
                    lower_bound: lower,
                    upper_bound: upper,
                    ..Default::default()
                },
            )?),
            Reader::Snapshot(s) => Cursor::Db(table.raw_iter(&ReadOptions {
                snapshot: Some(s.clone()),
                lower_bound: lower,
                upper_bound: upper,
            })?),
            Reader::Latest => Cursor::Db(table.raw_iter(&ReadOptions {
                snapshot: None,
                lower_bound: lower,
                upper_bound: upper,
            })?),
        };
        c.start();
        Ok(c)
    }
}

/// Decodes a stored row (key and value) into one value per column.
pub fn decode_row(h: &TableHandle, pk: &[u8], value: &[u8]) -> SqlResult<Vec<Value>> {
    let mut row = vec![Value::Null; h.schema.columns.len()];
    h.schema.decode_primary_key(pk, &mut row)?;
    decode_row_into(&h.schema, value, &mut row)?;
    Ok(row)
}

/// The byte bounds `[lower, upper)` of one key range, or `None` when a bound value does not
/// convert to its column's type.
fn range_bounds(h: &TableHandle, cols: &[usize], r: &KeyRange, params: &[Value]) -> SqlResult<Option<ByteRange>> {
    let ctx = Ctx {
        row: &[],
        params,
        aggs: &[],
    };
    let schema = &h.schema;
    // Encodes a bound value as a key column; returns whether the stored value is exactly the
    // SQL value (an inexact one, like 2.5 for an INT column, can only bound inclusively), or
    // None when the value has no place in the key order (then the walk is a scan).
    let encode = |out: &mut Vec<u8>, col: usize, e: &Expr| -> SqlResult<Option<bool>> {
        let c = &schema.columns[col];
        let v = e.eval(&ctx)?;
        if v.is_null() {
            return Ok(None);
        }
        // A text column against a number compares as numbers ('01' = 1): no key order.
        if c.ty.is_text() && !matches!(v, Value::Bytes(_)) {
            return Ok(None);
        }
        match c.ty.coerce(v.clone(), &c.name) {
            Ok(stored) => {
                let exact = crate::sql::expr::compare(&v, &stored) == std::cmp::Ordering::Equal;
                keycodec::encode(out, &stored, &c.ty, c.nullable);
                Ok(Some(exact))
            }
            Err(_) => Ok(None),
        }
    };
    let mut prefix = Vec::new();
    for (i, e) in r.eq.iter().enumerate() {
        if encode(&mut prefix, cols[i], e)?.is_none() {
            return Ok(None);
        }
    }
    let next = cols.get(r.eq.len()).copied();
    let bound = |b: &Option<Bound>, lower: bool| -> SqlResult<Option<Option<Vec<u8>>>> {
        let (Some(b), Some(col)) = (b, next) else {
            return Ok(Some(None));
        };
        let mut k = prefix.clone();
        let Some(exact) = encode(&mut k, col, &b.value)? else {
            return Ok(None);
        };
        // Keys of the bound value itself all start with `k`. A rounded bound is made
        // inclusive: the range then holds a superset, which the filter trims.
        let inclusive = b.inclusive || !exact;
        Ok(Some(Some(match (lower, inclusive) {
            (true, true) | (false, false) => k,
            _ => match prefix_successor(&k) {
                Some(s) => s,
                None => return Ok(Some(None)),
            },
        })))
    };
    let Some(lo) = bound(&r.lo, true)? else { return Ok(None) };
    let Some(hi) = bound(&r.hi, false)? else {
        return Ok(None);
    };
    let lower = lo.unwrap_or_else(|| prefix.clone());
    let upper = match hi {
        Some(h) => Some(h),
        None if prefix.is_empty() => None,
        None => prefix_successor(&prefix),
    };
    Ok(Some((lower, upper)))
}

/// Calls `f(pk, row)` for every row the access path covers; `f` returns false to stop.
/// `needed` lists the columns the statement reads: an index that holds them all is read
/// without visiting the rows.
pub fn candidates(
    reader: &mut Reader<'_>,
    h: &TableHandle,
    access: &Access,
    params: &[Value],
    needed: &[usize],
    f: &mut RowVisitor<'_>,
) -> SqlResult<()> {
    let (index, ranges) = match access {
        Access::NoTable => return Ok(()),
        Access::Scan => return scan(reader, h, f),
        Access::Key { index, ranges } => (*index, ranges),
    };
    let cols: &[usize] = match index {
        None => &h.schema.primary,
        Some(i) => &h.schema.indexes[i].columns,
    };
    let mut bounds = Vec::with_capacity(ranges.len());
    for r in ranges {
        match range_bounds(h, cols, r, params)? {
            Some(b) => bounds.push((r.eq.len() == cols.len() && r.lo.is_none() && r.hi.is_none(), b)),
            None => return scan(reader, h, f),
        }
    }
    let mut seen: Option<HashSet<Vec<u8>>> = (ranges.len() > 1).then(HashSet::new);
    let mut fresh = |pk: &[u8]| seen.as_mut().is_none_or(|s| s.insert(pk.to_vec()));
    match index {
        None => {
            for (point, (lower, upper)) in bounds {
                if point {
                    if !fresh(&lower) {
                        continue;
                    }
                    if let Some(v) = reader.get(&h.primary, &lower)? {
                        if !f(&lower, decode_row(h, &lower, &v)?)? {
                            return Ok(());
                        }
                    }
                    continue;
                }
                let mut c = reader.cursor(&h.primary, Some(lower), upper)?;
                while c.valid() {
                    if fresh(c.key()) && !f(c.key(), decode_row(h, c.key(), c.value())?)? {
                        return Ok(());
                    }
                    c.next();
                }
                c.status()?;
            }
        }
        Some(i) => {
            let ix = &h.schema.indexes[i];
            let covering = needed
                .iter()
                .all(|c| ix.columns.contains(c) || h.schema.primary.contains(c));
            let table = &h.indexes[i];
            for (_, (lower, upper)) in bounds {
                let mut c = reader.cursor(table, Some(lower), upper)?;
                let mut batch = Vec::new();
                while c.valid() {
                    let mut row = vec![Value::Null; h.schema.columns.len()];
                    let pk = h.schema.decode_index_entry(ix, c.key(), c.value(), &mut row)?;
                    if fresh(&pk) {
                        batch.push((pk, row));
                    }
                    c.next();
                }
                c.status()?;
                for (pk, row) in batch {
                    let row = if covering {
                        row
                    } else {
                        match reader.get(&h.primary, &pk)? {
                            Some(v) => decode_row(h, &pk, &v)?,
                            // Read committed reads each key at its own moment: the row may
                            // have gone since the index was read.
                            None if !matches!(reader, Reader::Snapshot(_)) => continue,
                            // At one snapshot an index entry without its row is damage.
                            None => {
                                return Err(SqlError::new(
                                    1030,
                                    "HY000",
                                    format!(
                                        "Got error from storage engine: index {} of {}.{} has an entry without its row",
                                        ix.name, h.schema.db, h.schema.name
                                    ),
                                ))
                            }
                        }
                    };
                    if !f(&pk, row)? {
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every row of the table.
fn scan(reader: &mut Reader<'_>, h: &TableHandle, f: &mut RowVisitor<'_>) -> SqlResult<()> {
    let mut c = reader.cursor(&h.primary, None, None)?;
    while c.valid() {
        if !f(c.key(), decode_row(h, c.key(), c.value())?)? {
            return Ok(());
        }
        c.next();
    }
    c.status()?;
    Ok(())
}

/// The primary keys of an access path made only of full primary-key points (`id = ?`,
/// `id IN (...)`), computed without reading; `None` for any other path.
pub fn point_keys(h: &TableHandle, access: &Access, params: &[Value]) -> SqlResult<Option<Vec<Vec<u8>>>> {
    let Access::Key { index: None, ranges } = access else {
        return Ok(None);
    };
    let cols = &h.schema.primary;
    let mut keys = Vec::with_capacity(ranges.len());
    for r in ranges {
        if r.eq.len() != cols.len() || r.lo.is_some() || r.hi.is_some() {
            return Ok(None);
        }
        match range_bounds(h, cols, r, params)? {
            Some((k, _)) => {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            None => return Ok(None),
        }
    }
    Ok(Some(keys))
}
