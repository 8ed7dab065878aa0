//! Access path choice: which key ranges of the primary key or a secondary index hold every
//! row a WHERE clause can keep.
//!
//! Invariant (the one `plan::Access` states): the ranges found cover every row for which the
//! filter can be true; the executor re-applies the filter. Only conjuncts of the form
//! `col = c`, `col IN (c, ...)`, `col BETWEEN c AND c`, `col <op> c` (either side) and ORs of
//! those on one column are used, where each `c` is a literal or parameter.
//! The primary key wins when it has a condition on its first column; otherwise the first
//! public index that has one; otherwise a scan.

use crate::sql::expr::{BinOp, Expr};
use crate::sql::plan::{Access, Bound, KeyRange};
use crate::sql::schema::{IndexState, TableSchema};

/// The most point ranges one IN-list product may make before the path falls back to the
/// leading column alone.
const MAX_POINTS: usize = 4096;

/// What a set of conjuncts says about one column.
#[derive(Debug, Clone)]
enum ColumnCond {
    /// One of these values.
    Points(Vec<Expr>),
    /// Any of these ranges.
    Ranges(Vec<(Option<Bound>, Option<Bound>)>),
}

fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    if let Expr::Bin(BinOp::And, a, b) = e {
        conjuncts(a, out);
        conjuncts(b, out);
    } else {
        out.push(e);
    }
}

fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::LtEq => BinOp::GtEq,
        BinOp::Gt => BinOp::Lt,
        BinOp::GtEq => BinOp::LtEq,
        o => o,
    }
}

/// The condition `e` puts on column `col`, if it is one of the supported forms.
fn cond_of(e: &Expr, col: usize) -> Option<ColumnCond> {
    let is_col = |x: &Expr| matches!(x, Expr::Col(c) if *c == col);
    let bound = |v: &Expr, inclusive| {
        Some(Bound {
            value: v.clone(),
            inclusive,
        })
    };
    match e {
        Expr::Bin(op @ (BinOp::Eq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq), a, b) => {
            let (op, v) = if is_col(a) && b.is_constant() {
                (*op, &**b)
            } else if is_col(b) && a.is_constant() {
                (flip(*op), &**a)
            } else {
                return None;
            };
            Some(match op {
                BinOp::Eq => ColumnCond::Points(vec![v.clone()]),
                BinOp::Lt => ColumnCond::Ranges(vec![(None, bound(v, false))]),
                BinOp::LtEq => ColumnCond::Ranges(vec![(None, bound(v, true))]),
                BinOp::Gt => ColumnCond::Ranges(vec![(bound(v, false), None)]),
                _ => ColumnCond::Ranges(vec![(bound(v, true), None)]),
            })
        }
        Expr::Between(x, lo, hi, false) if is_col(x) && lo.is_constant() && hi.is_constant() => {
            Some(ColumnCond::Ranges(vec![(bound(lo, true), bound(hi, true))]))
        }
        Expr::InList(x, list, false) if is_col(x) && list.iter().all(Expr::is_constant) => {
            Some(ColumnCond::Points(list.clone()))
        }
        Expr::Bin(BinOp::Or, a, b) => {
            let (ca, cb) = (cond_of(a, col)?, cond_of(b, col)?);
            let ranges = |c: ColumnCond| match c {
                ColumnCond::Points(p) => p
                    .into_iter()
                    .map(|v| (bound(&v, true), bound(&v, true)))
                    .collect::<Vec<_>>(),
                ColumnCond::Ranges(r) => r,
            };
            match (ca, cb) {
                (ColumnCond::Points(mut x), ColumnCond::Points(y)) => {
                    x.extend(y);
                    Some(ColumnCond::Points(x))
                }
                (x, y) => {
                    let mut r = ranges(x);
                    r.extend(ranges(y));
                    Some(ColumnCond::Ranges(r))
                }
            }
        }
        _ => None,
    }
}

/// The strongest condition the conjuncts put on `col`: points beat ranges; two one-sided
/// ranges combine into one.
fn column_cond(parts: &[&Expr], col: usize) -> Option<ColumnCond> {
    let mut best: Option<ColumnCond> = None;
    for p in parts {
        let Some(c) = cond_of(p, col) else { continue };
        best = Some(match (best, c) {
            (Some(ColumnCond::Points(x)), _) => ColumnCond::Points(x),
            (_, ColumnCond::Points(x)) => ColumnCond::Points(x),
            (Some(ColumnCond::Ranges(a)), ColumnCond::Ranges(b)) if a.len() == 1 && b.len() == 1 => {
                let (alo, ahi) = a.into_iter().next().expect("one range");
                let (blo, bhi) = b.into_iter().next().expect("one range");
                // Both bounds are constants but their values are not known yet: keep one of
                // each side (either is a superset of the intersection).
                ColumnCond::Ranges(vec![(alo.or(blo), ahi.or(bhi))])
            }
            (Some(ColumnCond::Ranges(a)), _) => ColumnCond::Ranges(a),
            (None, c) => c,
        });
    }
    best
}

/// The ranges of a key with columns `cols` implied by the conjuncts, if its first column has
/// a condition.
fn key_ranges(parts: &[&Expr], cols: &[usize]) -> Option<Vec<KeyRange>> {
    let mut prefixes: Vec<Vec<Expr>> = vec![Vec::new()];
    for &c in cols {
        match column_cond(parts, c) {
            Some(ColumnCond::Points(points)) if prefixes.len() * points.len() <= MAX_POINTS => {
                prefixes = prefixes
                    .iter()
                    .flat_map(|p| {
                        points.iter().map(move |v| {
                            let mut p = p.clone();
                            p.push(v.clone());
                            p
                        })
                    })
                    .collect();
            }
            Some(ColumnCond::Ranges(ranges)) => {
                let out = prefixes
                    .iter()
                    .flat_map(|p| {
                        ranges.iter().map(move |(lo, hi)| KeyRange {
                            eq: p.clone(),
                            lo: lo.clone(),
                            hi: hi.clone(),
                        })
                    })
                    .collect();
                return Some(out);
            }
            _ => break,
        }
    }
    if prefixes.len() == 1 && prefixes[0].is_empty() {
        return None;
    }
    Some(
        prefixes
            .into_iter()
            .map(|eq| KeyRange { eq, lo: None, hi: None })
            .collect(),
    )
}

/// Chooses the access path for `filter` over `schema`.
pub fn choose(schema: &TableSchema, filter: Option<&Expr>) -> Access {
    let Some(filter) = filter else { return Access::Scan };
    let mut parts = Vec::new();
    conjuncts(filter, &mut parts);
    if !schema.primary.is_empty() {
        if let Some(ranges) = key_ranges(&parts, &schema.primary) {
            return Access::Key { index: None, ranges };
        }
    }
    for (i, ix) in schema.indexes.iter().enumerate() {
        if ix.state != IndexState::Public {
            continue;
        }
        if let Some(ranges) = key_ranges(&parts, &ix.columns) {
            return Access::Key { index: Some(i), ranges };
        }
    }
    Access::Scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::schema::tests::sbtest;
    use crate::value::Value;

    fn lit(v: i64) -> Box<Expr> {
        Box::new(Expr::Lit(Value::Int(v)))
    }

    #[test]
    fn primary_points_ranges_and_index_ranges_are_found() {
        let s = sbtest();
        let eq = Expr::Bin(BinOp::Eq, Box::new(Expr::Col(0)), Box::new(Expr::Param(0)));
        match choose(&s, Some(&eq)) {
            Access::Key { index: None, ranges } => assert_eq!(ranges.len(), 1),
            other => panic!("{other:?}"),
        }
        let between = Expr::Between(Box::new(Expr::Col(0)), lit(1), lit(100), false);
        let both = Expr::Bin(
            BinOp::And,
            Box::new(between),
            Box::new(Expr::Bin(BinOp::Gt, Box::new(Expr::Col(1)), lit(3))),
        );
        match choose(&s, Some(&both)) {
            Access::Key { index: None, ranges } => assert!(ranges[0].lo.is_some() && ranges[0].hi.is_some()),
            other => panic!("{other:?}"),
        }
        let ored = Expr::Bin(
            BinOp::Or,
            Box::new(Expr::Between(Box::new(Expr::Col(1)), lit(1), lit(5), false)),
            Box::new(Expr::Between(Box::new(Expr::Col(1)), lit(10), lit(15), false)),
        );
        match choose(&s, Some(&ored)) {
            Access::Key { index: Some(0), ranges } => assert_eq!(ranges.len(), 2),
            other => panic!("{other:?}"),
        }
        // An OR across columns has no key path.
        let mixed = Expr::Bin(
            BinOp::Or,
            Box::new(Expr::Bin(BinOp::Eq, Box::new(Expr::Col(0)), lit(1))),
            Box::new(Expr::Bin(BinOp::Eq, Box::new(Expr::Col(1)), lit(1))),
        );
        assert!(matches!(choose(&s, Some(&mixed)), Access::Scan));
        let not_eq = Expr::Bin(BinOp::NotEq, Box::new(Expr::Col(0)), lit(1));
        assert!(matches!(choose(&s, Some(&not_eq)), Access::Scan));
    }
}
