//! Bound expressions and their evaluation with MySQL's semantics: three-valued logic,
//! numeric comparison when either side is a number, byte-wise comparison of strings (binary
//! collation), integer arithmetic that fails on overflow instead of wrapping.
//!
//! Invariant: evaluation never panics; a type or overflow problem is an [`SqlError`].

use crate::sql::error::{SqlError, SqlResult};
use crate::sql::types::to_f64;
use crate::value::{format_double, Decimal, Value};
use std::cmp::Ordering;

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (a double result; division by zero is NULL)
    Div,
    /// `DIV`
    IntDiv,
    /// `%` / `MOD`
    Mod,
    /// `=`
    Eq,
    /// `<>` / `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `<=>`
    NullSafeEq,
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `XOR`
    Xor,
}

/// Scalar functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// CONCAT(...)
    Concat,
    /// LENGTH(s) in bytes
    Length,
    /// CHAR_LENGTH(s)
    CharLength,
    /// UPPER(s)
    Upper,
    /// LOWER(s)
    Lower,
    /// ABS(n)
    Abs,
    /// COALESCE(...)
    Coalesce,
    /// IFNULL(a, b)
    IfNull,
    /// IF(cond, a, b)
    If,
}

/// A bound expression over one table's row.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Lit(Value),
    /// The n-th `?` of the statement (textual order).
    Param(usize),
    /// Column n of the row.
    Col(usize),
    /// The n-th aggregate's result (projections of aggregate queries only).
    Agg(usize),
    /// Unary minus.
    Neg(Box<Expr>),
    /// NOT.
    Not(Box<Expr>),
    /// A binary operation.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `e IS [NOT] NULL`.
    IsNull(Box<Expr>, bool),
    /// `e [NOT] BETWEEN lo AND hi`.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `e [NOT] IN (list)`.
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `e [NOT] LIKE pattern`.
    Like(Box<Expr>, Box<Expr>, bool),
    /// A scalar function.
    Func(Func, Vec<Expr>),
}

/// What an expression reads: the row, the parameters and aggregate results.
pub struct Ctx<'a> {
    /// The current row (empty without a table).
    pub row: &'a [Value],
    /// The statement's parameters.
    pub params: &'a [Value],
    /// Aggregate results.
    pub aggs: &'a [Value],
}

/// Truth of a value: NULL is `None`.
pub fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Null => None,
        Value::Int(i) => Some(*i != 0),
        Value::UInt(u) => Some(*u != 0),
        Value::Double(d) => Some(*d != 0.0),
        Value::Decimal(d) => Some(d.mantissa != 0),
        Value::Bytes(_) => Some(to_f64(v).unwrap_or(0.0) != 0.0),
        Value::DateTime(_) => Some(true),
    }
}

fn bool_value(b: Option<bool>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => Value::Int(b as i64),
    }
}

fn is_number(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::UInt(_) | Value::Double(_) | Value::Decimal(_))
}

/// MySQL comparison of two non-NULL values.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::UInt(x), Value::UInt(y)) => x.cmp(y),
        (Value::Int(x), Value::UInt(y)) => (*x as i128).cmp(&(*y as i128)),
        (Value::UInt(x), Value::Int(y)) => (*x as i128).cmp(&(*y as i128)),
        (Value::Decimal(x), Value::Decimal(y)) => {
            let s = x.scale.max(y.scale);
            match (x.rescale(s), y.rescale(s)) {
                (Some(x), Some(y)) => x.mantissa.cmp(&y.mantissa),
                _ => x.to_f64().total_cmp(&y.to_f64()),
            }
        }
        (Value::Bytes(x), Value::Bytes(y)) => x.cmp(y),
        (Value::DateTime(x), Value::DateTime(y)) => x.cmp(y),
        (Value::DateTime(x), Value::Bytes(y)) => x.to_string().into_bytes().cmp(y),
        (Value::Bytes(x), Value::DateTime(y)) => x.cmp(&y.to_string().into_bytes()),
        _ if is_number(a) || is_number(b) => {
            let x = to_f64(a).unwrap_or(0.0);
            let y = to_f64(b).unwrap_or(0.0);
            x.total_cmp(&y)
        }
        _ => a.to_text().cmp(&b.to_text()),
    }
}

fn overflow(op: &str) -> SqlError {
    SqlError::new(1690, "22003", format!("BIGINT value is out of range in '{op}'"))
}

fn arith(op: BinOp, a: Value, b: Value) -> SqlResult<Value> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    let as_int = |v: &Value| -> Option<i128> {
        match v {
            Value::Int(i) => Some(*i as i128),
            Value::UInt(u) => Some(*u as i128),
            Value::Bytes(b) => std::str::from_utf8(b)
                .ok()?
                .trim()
                .parse::<i64>()
                .ok()
                .map(|i| i as i128),
            _ => None,
        }
    };
    if op == BinOp::Div {
        let (x, y) = (to_f64(&a).unwrap_or(0.0), to_f64(&b).unwrap_or(0.0));
        return Ok(if y == 0.0 { Value::Null } else { Value::Double(x / y) });
    }
    let unsigned = matches!(a, Value::UInt(_)) || matches!(b, Value::UInt(_));
    if let (Some(x), Some(y)) = (as_int(&a), as_int(&b)) {
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x.checked_mul(y).ok_or_else(|| overflow("*"))?,
            BinOp::IntDiv | BinOp::Mod if y == 0 => return Ok(Value::Null),
            BinOp::IntDiv => x / y,
            BinOp::Mod => x % y,
            _ => unreachable!("arith called with a non-arithmetic operator"),
        };
        // MySQL: the result is unsigned when an operand is, and must fit its type.
        return if unsigned {
            u64::try_from(r).map(Value::UInt).map_err(|_| overflow("arithmetic"))
        } else {
            i64::try_from(r).map(Value::Int).map_err(|_| overflow("arithmetic"))
        };
    }
    if let (Value::Decimal(_) | Value::Int(_) | Value::UInt(_), Value::Decimal(_) | Value::Int(_) | Value::UInt(_)) =
        (&a, &b)
    {
        let dec = |v: &Value| v.as_decimal().expect("matched above");
        let (x, y) = (dec(&a), dec(&b));
        let s = x.scale.max(y.scale);
        if let (Some(x), Some(y)) = (x.rescale(s), y.rescale(s)) {
            let r = match op {
                BinOp::Add => x.mantissa.checked_add(y.mantissa),
                BinOp::Sub => x.mantissa.checked_sub(y.mantissa),
                BinOp::Mul => {
                    return x
                        .mantissa
                        .checked_mul(y.mantissa)
                        .map(|m| {
                            Value::Decimal(Decimal {
                                mantissa: m,
                                scale: s * 2,
                            })
                        })
                        .ok_or_else(|| overflow("*"));
                }
                _ => None,
            };
            if let Some(m) = r {
                return Ok(Value::Decimal(Decimal { mantissa: m, scale: s }));
            }
        }
    }
    let (x, y) = (to_f64(&a).unwrap_or(0.0), to_f64(&b).unwrap_or(0.0));
    Ok(Value::Double(match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::IntDiv | BinOp::Mod if y == 0.0 => return Ok(Value::Null),
        BinOp::IntDiv => return Ok(Value::Int((x / y).trunc() as i64)),
        BinOp::Mod => x % y,
        _ => unreachable!("arith called with a non-arithmetic operator"),
    }))
}

/// SQL LIKE with `%` and `_` and backslash escapes, over bytes.
pub fn like(s: &[u8], p: &[u8]) -> bool {
    let (mut si, mut pi) = (0, 0);
    let (mut star_p, mut star_s) = (None, 0);
    while si < s.len() {
        let (pc, esc) = match p.get(pi) {
            Some(b'\\') if pi + 1 < p.len() => (Some(p[pi + 1]), true),
            c => (c.copied(), false),
        };
        match pc {
            Some(b'%') if !esc => {
                star_p = Some(pi + 1);
                star_s = si;
                pi += 1;
                continue;
            }
            Some(b'_') if !esc => {
                si += 1;
                pi += 1;
                continue;
            }
            Some(c) if c == s[si] => {
                si += 1;
                pi += if esc { 2 } else { 1 };
                continue;
            }
            _ => {}
        }
        match star_p {
            Some(sp) => {
                star_s += 1;
                si = star_s;
                pi = sp;
            }
            None => return false,
        }
    }
    while p.get(pi) == Some(&b'%') {
        pi += 1;
    }
    pi == p.len()
}

impl Expr {
    /// Evaluates the expression.
    pub fn eval(&self, ctx: &Ctx<'_>) -> SqlResult<Value> {
        Ok(match self {
            Expr::Lit(v) => v.clone(),
            Expr::Param(i) => ctx
                .params
                .get(*i)
                .cloned()
                .ok_or_else(|| SqlError::wrong_arguments("mysqld_stmt_execute"))?,
            Expr::Col(i) => ctx.row.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Agg(i) => ctx.aggs.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Neg(e) => match e.eval(ctx)? {
                Value::Null => Value::Null,
                Value::Int(i) => i.checked_neg().map(Value::Int).ok_or_else(|| overflow("-"))?,
                Value::UInt(u) => Value::Int(i64::try_from(-(u as i128)).map_err(|_| overflow("-"))?),
                Value::Decimal(d) => Value::Decimal(Decimal {
                    mantissa: -d.mantissa,
                    scale: d.scale,
                }),
                other => Value::Double(-to_f64(&other).unwrap_or(0.0)),
            },
            Expr::Not(e) => bool_value(truth(&e.eval(ctx)?).map(|b| !b)),
            Expr::Bin(op, a, b) => match op {
                BinOp::And => {
                    let x = truth(&a.eval(ctx)?);
                    if x == Some(false) {
                        return Ok(Value::Int(0));
                    }
                    let y = truth(&b.eval(ctx)?);
                    bool_value(match (x, y) {
                        (_, Some(false)) => Some(false),
                        (Some(true), Some(true)) => Some(true),
                        _ => None,
                    })
                }
                BinOp::Or => {
                    let x = truth(&a.eval(ctx)?);
                    if x == Some(true) {
                        return Ok(Value::Int(1));
                    }
                    let y = truth(&b.eval(ctx)?);
                    bool_value(match (x, y) {
                        (_, Some(true)) => Some(true),
                        (Some(false), Some(false)) => Some(false),
                        _ => None,
                    })
                }
                BinOp::Xor => {
                    let (x, y) = (truth(&a.eval(ctx)?), truth(&b.eval(ctx)?));
                    bool_value(x.zip(y).map(|(x, y)| x != y))
                }
                BinOp::Eq | BinOp::NotEq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq => {
                    let (x, y) = (a.eval(ctx)?, b.eval(ctx)?);
                    if x.is_null() || y.is_null() {
                        return Ok(Value::Null);
                    }
                    let o = compare(&x, &y);
                    bool_value(Some(match op {
                        BinOp::Eq => o == Ordering::Equal,
                        BinOp::NotEq => o != Ordering::Equal,
                        BinOp::Lt => o == Ordering::Less,
                        BinOp::LtEq => o != Ordering::Greater,
                        BinOp::Gt => o == Ordering::Greater,
                        _ => o != Ordering::Less,
                    }))
                }
                BinOp::NullSafeEq => {
                    let (x, y) = (a.eval(ctx)?, b.eval(ctx)?);
                    Value::Int(match (x.is_null(), y.is_null()) {
                        (true, true) => 1,
                        (false, false) => (compare(&x, &y) == Ordering::Equal) as i64,
                        _ => 0,
                    })
                }
                _ => arith(*op, a.eval(ctx)?, b.eval(ctx)?)?,
            },
            Expr::IsNull(e, negated) => Value::Int((e.eval(ctx)?.is_null() != *negated) as i64),
            Expr::Between(e, lo, hi, negated) => {
                let (v, l, h) = (e.eval(ctx)?, lo.eval(ctx)?, hi.eval(ctx)?);
                if v.is_null() || l.is_null() || h.is_null() {
                    return Ok(Value::Null);
                }
                let inside = compare(&v, &l) != Ordering::Less && compare(&v, &h) != Ordering::Greater;
                Value::Int((inside != *negated) as i64)
            }
            Expr::InList(e, list, negated) => {
                let v = e.eval(ctx)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    let x = item.eval(ctx)?;
                    if x.is_null() {
                        saw_null = true;
                    } else if compare(&v, &x) == Ordering::Equal {
                        return Ok(Value::Int(!*negated as i64));
                    }
                }
                if saw_null {
                    Value::Null
                } else {
                    Value::Int(*negated as i64)
                }
            }
            Expr::Like(e, p, negated) => {
                let (v, p) = (e.eval(ctx)?, p.eval(ctx)?);
                match (v.to_text(), p.to_text()) {
                    (Some(v), Some(p)) => Value::Int((like(&v, &p) != *negated) as i64),
                    _ => Value::Null,
                }
            }
            Expr::Func(f, args) => eval_func(*f, args, ctx)?,
        })
    }

    /// Evaluates an expression that reads no row (a constant or parameter).
    pub fn eval_const(&self, params: &[Value]) -> SqlResult<Value> {
        self.eval(&Ctx {
            row: &[],
            params,
            aggs: &[],
        })
    }

    /// True when the expression reads no row column (constants, parameters).
    pub fn is_constant(&self) -> bool {
        match self {
            Expr::Lit(_) | Expr::Param(_) => true,
            Expr::Col(_) | Expr::Agg(_) => false,
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) => e.is_constant(),
            Expr::Bin(_, a, b) | Expr::Like(a, b, _) => a.is_constant() && b.is_constant(),
            Expr::Between(a, b, c, _) => a.is_constant() && b.is_constant() && c.is_constant(),
            Expr::InList(e, l, _) => e.is_constant() && l.iter().all(Expr::is_constant),
            Expr::Func(_, args) => args.iter().all(Expr::is_constant),
        }
    }

    /// Adds the columns the expression reads to `out`.
    pub fn columns(&self, out: &mut Vec<usize>) {
        match self {
            Expr::Col(c) => out.push(*c),
            Expr::Lit(_) | Expr::Param(_) | Expr::Agg(_) => {}
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) => e.columns(out),
            Expr::Bin(_, a, b) | Expr::Like(a, b, _) => {
                a.columns(out);
                b.columns(out);
            }
            Expr::Between(a, b, c, _) => {
                a.columns(out);
                b.columns(out);
                c.columns(out);
            }
            Expr::InList(e, l, _) => {
                e.columns(out);
                l.iter().for_each(|x| x.columns(out));
            }
            Expr::Func(_, args) => args.iter().for_each(|x| x.columns(out)),
        }
    }
}

fn eval_func(f: Func, args: &[Expr], ctx: &Ctx<'_>) -> SqlResult<Value> {
    let vals = args.iter().map(|a| a.eval(ctx)).collect::<SqlResult<Vec<_>>>()?;
    let first = vals.first().cloned().unwrap_or(Value::Null);
    Ok(match f {
        Func::Concat => {
            let mut out = Vec::new();
            for v in &vals {
                match v.to_text() {
                    Some(t) => out.extend_from_slice(&t),
                    None => return Ok(Value::Null),
                }
            }
            Value::Bytes(out)
        }
        Func::Length => first.to_text().map_or(Value::Null, |t| Value::Int(t.len() as i64)),
        Func::CharLength => first.to_text().map_or(Value::Null, |t| {
            Value::Int(String::from_utf8_lossy(&t).chars().count() as i64)
        }),
        Func::Upper => first.to_text().map_or(Value::Null, |t| {
            Value::Bytes(String::from_utf8_lossy(&t).to_uppercase().into_bytes())
        }),
        Func::Lower => first.to_text().map_or(Value::Null, |t| {
            Value::Bytes(String::from_utf8_lossy(&t).to_lowercase().into_bytes())
        }),
        Func::Abs => match first {
            Value::Null => Value::Null,
            Value::Int(i) => i.checked_abs().map(Value::Int).ok_or_else(|| overflow("abs"))?,
            Value::UInt(u) => Value::UInt(u),
            Value::Decimal(d) => Value::Decimal(Decimal {
                mantissa: d.mantissa.abs(),
                scale: d.scale,
            }),
            other => Value::Double(to_f64(&other).unwrap_or(0.0).abs()),
        },
        Func::Coalesce | Func::IfNull => vals.into_iter().find(|v| !v.is_null()).unwrap_or(Value::Null),
        Func::If => {
            if truth(&first) == Some(true) {
                vals.get(1).cloned().unwrap_or(Value::Null)
            } else {
                vals.get(2).cloned().unwrap_or(Value::Null)
            }
        }
    })
}

/// A value's text for messages (NULL as `NULL`).
pub fn display(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Double(d) => format_double(*d),
        other => String::from_utf8_lossy(&other.to_text().unwrap_or_default()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(e: &Expr) -> Value {
        e.eval(&Ctx {
            row: &[Value::Int(5), Value::str("abc"), Value::Null],
            params: &[Value::Int(7)],
            aggs: &[],
        })
        .unwrap()
    }

    fn lit(v: i64) -> Box<Expr> {
        Box::new(Expr::Lit(Value::Int(v)))
    }

    #[test]
    fn three_valued_logic_and_comparisons() {
        let null_eq = Expr::Bin(BinOp::Eq, Box::new(Expr::Col(2)), lit(1));
        assert_eq!(ev(&null_eq), Value::Null);
        assert_eq!(
            ev(&Expr::Bin(BinOp::Or, Box::new(null_eq.clone()), lit(1))),
            Value::Int(1)
        );
        assert_eq!(
            ev(&Expr::Bin(BinOp::And, Box::new(null_eq.clone()), lit(0))),
            Value::Int(0)
        );
        assert_eq!(ev(&Expr::Not(Box::new(null_eq))), Value::Null);
        // A number against numeric text compares as numbers.
        let e = Expr::Bin(
            BinOp::Eq,
            Box::new(Expr::Col(0)),
            Box::new(Expr::Lit(Value::str("5.0"))),
        );
        assert_eq!(ev(&e), Value::Int(1));
        let between = Expr::Between(Box::new(Expr::Col(0)), lit(5), Box::new(Expr::Param(0)), false);
        assert_eq!(ev(&between), Value::Int(1));
        let in_list = Expr::InList(
            Box::new(Expr::Col(0)),
            vec![Expr::Lit(Value::Null), Expr::Lit(Value::Int(4))],
            false,
        );
        assert_eq!(ev(&in_list), Value::Null);
    }

    #[test]
    fn arithmetic_checks_overflow_and_divides_by_zero_to_null() {
        assert_eq!(
            ev(&Expr::Bin(BinOp::Add, Box::new(Expr::Col(0)), lit(1))),
            Value::Int(6)
        );
        assert_eq!(ev(&Expr::Bin(BinOp::Div, lit(1), lit(0))), Value::Null);
        let e = Expr::Bin(BinOp::Mul, lit(i64::MAX), lit(2));
        assert!(e
            .eval(&Ctx {
                row: &[],
                params: &[],
                aggs: &[]
            })
            .is_err());
        let signed_overflow = Expr::Bin(BinOp::Add, lit(i64::MAX), lit(1));
        assert!(signed_overflow
            .eval(&Ctx {
                row: &[],
                params: &[],
                aggs: &[]
            })
            .is_err());
        let unsigned = Expr::Bin(BinOp::Add, Box::new(Expr::Lit(Value::UInt(1 << 63))), lit(1));
        assert_eq!(ev(&unsigned), Value::UInt((1 << 63) + 1));
    }

    #[test]
    fn like_matches_wildcards_and_escapes() {
        assert!(like(b"abc", b"a%"));
        assert!(like(b"abc", b"_b_"));
        assert!(like(b"abc", b"%c"));
        assert!(!like(b"abc", b"a_"));
        assert!(like(b"a%c", b"a\\%c"));
        assert!(!like(b"abc", b"a\\%c"));
        assert!(like(b"", b"%"));
    }
}
