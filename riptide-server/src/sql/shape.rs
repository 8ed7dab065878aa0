//! Statement shapes: a text query with its literals taken out, so that a query whose shape the
//! server has parsed before skips the parser.
//!
//! Clients that do not prepare (sysbench's `oltp_insert`, `--db-ps-mode=disable`, most ORMs'
//! INSERTs) send the same statement again and again with other values. The parser costs
//! 9–13 µs for sysbench's 250-byte INSERT, a sixth of the server's CPU for it. A query is
//! scanned once (well under a microsecond): each plain integer and plain single-quoted string
//! becomes `?` and its value is kept, in text order. The shape's parsed statement is cached
//! server-wide, and the query runs as that statement with the values as its parameters, as the
//! prepared form of the same statement would.
//!
//! Invariants:
//! - the literals taken out bind to the same values through `?` as in place: integers below
//!   2^63 (`number`, the binder's own conversion: `Value::Int`), and single-quoted strings
//!   without a backslash or a doubled quote (`Value::Bytes` of the text between the quotes).
//!   Anything the scanner is unsure of (comments, `?` anywhere, `"`, `@`, escapes, adjacent strings,
//!   introducers such as `_utf8'x'` or `X'ff'`, decimals, exponents, larger integers,
//!   identifiers that begin with digits) leaves the whole query to the parser;
//! - a shape is used only where a parameter means what the literal meant: INSERT ... VALUES,
//!   UPDATE and DELETE without ORDER BY or LIMIT, and SELECT whose `?` are all in its WHERE
//!   clause (a literal in a select list names its column; `ORDER BY 1` is a position);
//! - only parsed statements are cached, never plans: each execution binds against the catalog
//!   of that moment, as a prepared statement does. A shape that fails to parse or is not used is
//!   remembered as such and costs one scan per query after that.

use crate::sql::bind::expr::number;
use crate::sql::error::SqlResult;
use crate::sql::parse::parse;
use crate::value::Value;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use sqlparser::ast::{SetExpr, Statement};
use std::sync::Arc;

/// The longest shape cached, in bytes (a multi-row INSERT of a few thousand rows).
const MAX_SHAPE_LEN: usize = 16 << 10;

/// What a text query parses to.
pub enum Parsed {
    /// A cached shape's statement and the query's literals, its parameters.
    Shaped(Arc<Statement>, Vec<Value>),
    /// The parser's statements for the query as sent.
    Full(Vec<Statement>),
}

/// Charges a cached shape about what its text and parsed statement take.
#[derive(Clone)]
struct ShapeWeighter;

impl Weighter<String, Option<Arc<Statement>>> for ShapeWeighter {
    fn weight(&self, key: &String, _val: &Option<Arc<Statement>>) -> u64 {
        // A parsed statement takes roughly ten times its text.
        256 + 11 * key.len() as u64
    }
}

/// The server-wide cache of parsed shapes (`None`: a shape not to use).
pub struct ShapeCache {
    shapes: Cache<String, Option<Arc<Statement>>, ShapeWeighter>,
}

impl ShapeCache {
    /// A cache charged up to `bytes` (estimated).
    pub fn new(bytes: u64) -> ShapeCache {
        ShapeCache {
            shapes: Cache::with_weighter(1024, bytes, ShapeWeighter),
        }
    }

    /// Parses a text query: from its cached shape where it has one, else with the parser.
    pub fn parse(&self, sql: &str) -> SqlResult<Parsed> {
        let Some((shape, values)) = shape_of(sql) else {
            return parse(sql).map(Parsed::Full);
        };
        if let Some(cached) = self.shapes.get(shape.as_str()) {
            return Ok(match cached {
                Some(stmt) => Parsed::Shaped(stmt, values),
                None => Parsed::Full(parse(sql)?),
            });
        }
        let usable = parse(&shape)
            .ok()
            .and_then(|mut stmts| (stmts.len() == 1).then(|| stmts.pop().expect("one")))
            .filter(|stmt| params_mean_literals(stmt, values.len()))
            .map(Arc::new);
        self.shapes.insert(shape, usable.clone());
        match usable {
            Some(stmt) => Ok(Parsed::Shaped(stmt, values)),
            None => parse(sql).map(Parsed::Full),
        }
    }
}

/// Whether every one of the shape's `count` parameters stands where a literal and a parameter
/// bind alike: all of them are counted in the clauses listed (a `?` in any other clause, one
/// the binder reads differently or ignores, leaves the count short). The shape holds no quoted
/// text with a `?` in it (the scanner refuses those), so a `?` printed is a parameter.
fn params_mean_literals(stmt: &Statement, count: usize) -> bool {
    let params_in = |text: String| text.matches('?').count();
    let params_in_expr = |e: &Option<sqlparser::ast::Expr>| e.as_ref().map_or(0, |e| params_in(e.to_string()));
    match stmt {
        Statement::Insert(i) => {
            let Some(source) = i.source.as_ref() else {
                return false;
            };
            matches!(source.body.as_ref(), SetExpr::Values(_))
                && params_in(source.body.to_string()) + i.on.as_ref().map_or(0, |on| params_in(on.to_string())) == count
        }
        Statement::Update(u) => {
            u.order_by.is_empty()
                && u.limit.is_none()
                && u.assignments
                    .iter()
                    .map(|a| params_in(a.value.to_string()))
                    .sum::<usize>()
                    + params_in_expr(&u.selection)
                    == count
        }
        Statement::Delete(d) => d.order_by.is_empty() && d.limit.is_none() && params_in_expr(&d.selection) == count,
        Statement::Query(q) => match q.body.as_ref() {
            SetExpr::Select(s) => params_in_expr(&s.selection) == count,
            _ => false,
        },
        _ => false,
    }
}

/// Whether `b` may be part of an identifier or number next to a literal.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'.' || b >= 0x80
}

/// The shape of a query (its literals replaced by `?`) and the literals' values, or `None`
/// where the query is not an INSERT, UPDATE, DELETE or SELECT the scanner is sure of.
pub fn shape_of(sql: &str) -> Option<(String, Vec<Value>)> {
    let start = sql.trim_start();
    let verb = start.get(..6)?;
    if !["INSERT", "UPDATE", "DELETE", "SELECT"]
        .iter()
        .any(|v| verb.eq_ignore_ascii_case(v))
    {
        return None;
    }
    let b = sql.as_bytes();
    let mut shape = String::with_capacity(sql.len().min(MAX_SHAPE_LEN));
    let mut values = Vec::new();
    // Where the text not yet copied begins; whether the last token was a string literal.
    let (mut copied, mut last_was_string) = (0, false);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' => {
                let prev = i.checked_sub(1).map(|p| b[p]);
                if last_was_string || prev.is_some_and(is_word_byte) {
                    return None;
                }
                let close = i + 1 + b[i + 1..].iter().position(|&x| x == b'\'')?;
                let text = &b[i + 1..close];
                if text.contains(&b'\\') || b.get(close + 1) == Some(&b'\'') {
                    return None;
                }
                shape.push_str(&sql[copied..i]);
                shape.push('?');
                values.push(Value::Bytes(text.to_vec()));
                i = close + 1;
                copied = i;
                last_was_string = true;
                continue;
            }
            b'`' => {
                let close = i + 1 + b[i + 1..].iter().position(|&x| x == b'`')?;
                if b[i + 1..close].contains(&b'?') {
                    return None; // a `?` printed must be a parameter (`params_mean_literals`)
                }
                i = close;
            }
            b'0'..=b'9' => {
                if i > 0 && is_word_byte(b[i - 1]) {
                    // Part of a name (`sbtest3`): skip the rest of the word.
                    while i < b.len() && is_word_byte(b[i]) {
                        i += 1;
                    }
                    last_was_string = false;
                    continue;
                }
                let end = i + b[i..].iter().position(|x| !x.is_ascii_digit()).unwrap_or(b.len() - i);
                if b.get(end).is_some_and(|&x| is_word_byte(x)) {
                    return None;
                }
                let Ok(Value::Int(n)) = number(&sql[i..end]) else {
                    return None;
                };
                shape.push_str(&sql[copied..i]);
                shape.push('?');
                values.push(Value::Int(n));
                i = end;
                copied = i;
                last_was_string = false;
                continue;
            }
            b'"' | b'?' | b'@' | b'#' | b'\\' => return None,
            b'/' if b.get(i + 1) == Some(&b'*') => return None,
            b'-' if b.get(i + 1) == Some(&b'-') => return None,
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            last_was_string = false;
        }
        i += 1;
    }
    shape.push_str(&sql[copied..]);
    (shape.len() <= MAX_SHAPE_LEN).then_some((shape, values))
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
