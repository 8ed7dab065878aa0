//! SELECT: filter, aggregate, DISTINCT, ORDER BY, LIMIT/OFFSET over the rows an access path
//! finds.
//!
//! Invariants: the whole WHERE is applied to every candidate row; with FOR UPDATE each kept
//! row is locked and the filter re-checked on the locked (newest) version; without ORDER BY,
//! aggregates or DISTINCT the walk stops once OFFSET + LIMIT rows are out.

use crate::sql::catalog::TableHandle;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::exec::rows::{candidates, decode_row, Reader};
use crate::sql::expr::{compare, truth, Ctx, Expr};
use crate::sql::plan::{AggFunc, Aggregate, SelectPlan};
use crate::sql::rowcodec::put_tagged;
use crate::sql::types::to_f64;
use crate::value::{Decimal, Value};
use std::cmp::Ordering;
use std::collections::HashSet;

/// Evaluates a LIMIT or OFFSET.
pub fn count_of(e: &Option<Expr>, params: &[Value], what: &str) -> SqlResult<Option<u64>> {
    let Some(e) = e else { return Ok(None) };
    let v = e.eval_const(params)?;
    match v {
        Value::Int(i) if i >= 0 => Ok(Some(i as u64)),
        Value::UInt(u) => Ok(Some(u)),
        _ => Err(SqlError::wrong_arguments(what)),
    }
}

/// Whether `row` passes `filter`.
pub fn passes(filter: &Option<Expr>, row: &[Value], params: &[Value]) -> SqlResult<bool> {
    match filter {
        None => Ok(true),
        Some(f) => Ok(truth(&f.eval(&Ctx { row, params, aggs: &[] })?) == Some(true)),
    }
}

/// Running state of one aggregate.
struct Acc {
    count: u64,
    sum: Option<Value>,
    best: Option<Value>,
    seen: Option<HashSet<Vec<u8>>>,
}

fn add(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Decimal(x), Value::Decimal(y)) if x.scale == y.scale => match x.mantissa.checked_add(y.mantissa) {
            Some(m) => Value::Decimal(Decimal {
                mantissa: m,
                scale: x.scale,
            }),
            None => Value::Double(x.to_f64() + y.to_f64()),
        },
        (Value::Double(_), _) | (_, Value::Double(_)) | (Value::Bytes(_), _) | (_, Value::Bytes(_)) => {
            Value::Double(to_f64(a).unwrap_or(0.0) + to_f64(b).unwrap_or(0.0))
        }
        _ => {
            let d = |v: &Value| v.as_decimal().unwrap_or(Decimal::integer(0));
            let (x, y) = (d(a), d(b));
            let s = x.scale.max(y.scale);
            match (x.rescale(s), y.rescale(s)) {
                (Some(x), Some(y)) => match x.mantissa.checked_add(y.mantissa) {
                    Some(m) => Value::Decimal(Decimal { mantissa: m, scale: s }),
                    None => Value::Double(x.to_f64() + y.to_f64()),
                },
                _ => Value::Double(x.to_f64() + y.to_f64()),
            }
        }
    }
}

impl Acc {
    fn new(a: &Aggregate) -> Acc {
        Acc {
            count: 0,
            sum: None,
            best: None,
            seen: a.distinct.then(HashSet::new),
        }
    }

    fn feed(&mut self, a: &Aggregate, ctx: &Ctx<'_>) -> SqlResult<()> {
        let v = match &a.arg {
            None => Value::Int(1),
            Some(e) => e.eval(ctx)?,
        };
        if v.is_null() {
            return Ok(());
        }
        if let Some(seen) = &mut self.seen {
            let mut k = Vec::new();
            put_tagged(&mut k, &v);
            if !seen.insert(k) {
                return Ok(());
            }
        }
        self.count += 1;
        match a.func {
            AggFunc::Count => {}
            AggFunc::Sum | AggFunc::Avg => {
                self.sum = Some(match &self.sum {
                    None => add(&Value::Int(0), &v),
                    Some(s) => add(s, &v),
                })
            }
            AggFunc::Min | AggFunc::Max => {
                let better = match &self.best {
                    None => true,
                    Some(b) => {
                        let o = compare(&v, b);
                        (a.func == AggFunc::Min && o == Ordering::Less)
                            || (a.func == AggFunc::Max && o == Ordering::Greater)
                    }
                };
                if better {
                    self.best = Some(v);
                }
            }
        }
        Ok(())
    }

    fn finish(self, a: &Aggregate) -> Value {
        match a.func {
            AggFunc::Count => Value::Int(self.count as i64),
            AggFunc::Sum => self.sum.unwrap_or(Value::Null),
            AggFunc::Avg => match self.sum {
                None => Value::Null,
                Some(Value::Double(d)) => Value::Double(d / self.count as f64),
                Some(s) => {
                    let d = match s {
                        Value::Decimal(d) => d,
                        other => Decimal::parse(&String::from_utf8_lossy(&other.to_text().unwrap_or_default()))
                            .unwrap_or(Decimal { mantissa: 0, scale: 0 }),
                    };
                    let scaled = d.rescale(d.scale + 4).unwrap_or(d);
                    Value::Decimal(Decimal {
                        mantissa: scaled.mantissa / self.count.max(1) as i128,
                        scale: scaled.scale,
                    })
                }
            },
            AggFunc::Min | AggFunc::Max => self.best.unwrap_or(Value::Null),
        }
    }
}

/// Runs a SELECT.
pub fn run(p: &SelectPlan, reader: &mut Reader<'_>, params: &[Value]) -> SqlResult<Vec<Vec<Value>>> {
    let limit = count_of(&p.limit, params, "LIMIT")?;
    let offset = count_of(&p.offset, params, "OFFSET")?.unwrap_or(0);
    let streaming = p.order_by.is_empty() && p.aggregates.is_empty() && !p.distinct;
    let mut accs: Vec<Acc> = p.aggregates.iter().map(Acc::new).collect();
    // (sort keys, output row)
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    let mut skipped = 0u64;
    let mut keep = |row: &[Value], out: &mut Vec<(Vec<Value>, Vec<Value>)>, accs: &mut Vec<Acc>| -> SqlResult<bool> {
        let ctx = Ctx { row, params, aggs: &[] };
        if !p.aggregates.is_empty() {
            for (acc, a) in accs.iter_mut().zip(&p.aggregates) {
                acc.feed(a, &ctx)?;
            }
            return Ok(true);
        }
        if streaming && skipped < offset {
            skipped += 1;
            return Ok(true);
        }
        let projected = p
            .projection
            .iter()
            .map(|e| e.eval(&ctx))
            .collect::<SqlResult<Vec<_>>>()?;
        let keys = p
            .order_by
            .iter()
            .map(|(e, _)| e.eval(&ctx))
            .collect::<SqlResult<Vec<_>>>()?;
        out.push((keys, projected));
        Ok(!(streaming && limit.is_some_and(|l| out.len() as u64 >= l)))
    };
    match &p.table {
        None => {
            if p.filter.is_none() || passes(&p.filter, &[], params)? {
                keep(&[], &mut out, &mut accs)?;
            }
        }
        Some(h) => {
            if limit != Some(0) || !p.aggregates.is_empty() {
                walk(p, h, reader, params, &mut |row| keep(row, &mut out, &mut accs))?;
            }
        }
    }
    if !p.aggregates.is_empty() {
        let aggs: Vec<Value> = accs
            .into_iter()
            .zip(&p.aggregates)
            .map(|(acc, a)| acc.finish(a))
            .collect();
        let ctx = Ctx {
            row: &[],
            params,
            aggs: &aggs,
        };
        let row = p
            .projection
            .iter()
            .map(|e| e.eval(&ctx))
            .collect::<SqlResult<Vec<_>>>()?;
        return Ok(if offset == 0 && limit != Some(0) {
            vec![row]
        } else {
            Vec::new()
        });
    }
    if !p.order_by.is_empty() {
        out.sort_by(|(a, _), (b, _)| {
            for (i, (_, desc)) in p.order_by.iter().enumerate() {
                let o = match (a[i].is_null(), b[i].is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    _ => compare(&a[i], &b[i]),
                };
                let o = if *desc { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
    }
    let mut rows: Vec<Vec<Value>> = out.into_iter().map(|(_, r)| r).collect();
    if p.distinct {
        let mut seen = HashSet::new();
        rows.retain(|r| {
            let mut k = Vec::new();
            r.iter().for_each(|v| put_tagged(&mut k, v));
            seen.insert(k)
        });
    }
    if !streaming {
        let start = (offset as usize).min(rows.len());
        rows.drain(..start);
        if let Some(l) = limit {
            rows.truncate(l as usize);
        }
    }
    Ok(rows)
}

/// Walks the rows of a table-backed SELECT that pass its filter (locking them for FOR
/// UPDATE) and hands each to `f` until it returns false.
fn walk(
    p: &SelectPlan,
    h: &TableHandle,
    reader: &mut Reader<'_>,
    params: &[Value],
    f: &mut dyn FnMut(&[Value]) -> SqlResult<bool>,
) -> SqlResult<()> {
    if !p.for_update {
        return candidates(reader, h, &p.access, params, &p.needed, &mut |_, row| {
            if passes(&p.filter, &row, params)? {
                f(&row)
            } else {
                Ok(true)
            }
        });
    }
    let Reader::Txn(txn) = reader else {
        return Err(SqlError::other("FOR UPDATE outside a transaction"));
    };
    for pk in super::write::locking_candidates(txn, h, &p.access, &p.filter, params)? {
        if let Some(v) = txn.get_for_update(&h.primary, &pk)? {
            let row = decode_row(h, &pk, &v)?;
            if passes(&p.filter, &row, params)? && !f(&row)? {
                break;
            }
        }
    }
    Ok(())
}
