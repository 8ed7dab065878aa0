//! How the rows of a SELECT that reads several partitions combine, decided from its parse and
//! the table's columns, and the query each partition runs for it.
//!
//! Invariants:
//! - Rows are only concatenated when the query has no ORDER BY, LIMIT, DISTINCT or aggregate;
//!   otherwise the router combines them ([`Combine`]) or refuses the query. It combines only
//!   what it can do exactly as the server would, and refuses the rest: an aggregate other than
//!   COUNT, SUM of an integer or DECIMAL column, MIN or MAX of a column (or one inside an
//!   expression), GROUP BY (which the server refuses too), HAVING, an ORDER BY term that is not
//!   a plain column or an aggregate in the output (computed outputs are typed as text by the
//!   server, so the router could not sort them as it does), DISTINCT over anything but plain
//!   non-DOUBLE columns, a LIMIT that is not a literal.
//! - ORDER BY names resolve as the server resolves them: a table column first, an output alias
//!   only when no table column has that name.
//! - Each partition runs the client's own text, with `LIMIT off, n` turned into `LIMIT 0,
//!   off+n` in place (the two numbers replaced where they stand, nothing else re-printed), so
//!   the rows the combination keeps are among those it receives.

use super::placement::TableKey;
use crate::sql::types::TypeKind;
use sqlparser::ast::{self, Expr, SelectItem, SetExpr, Spanned};

/// An aggregate the router can combine from per-partition values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// COUNT: added.
    Count,
    /// SUM of an exact column: added (NULL where every partition had NULL).
    Sum,
    /// MIN: the least.
    Min,
    /// MAX: the greatest.
    Max,
}

/// How per-partition rows become the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combine {
    /// Per output column: `None`, a plain column (part of the DISTINCT key when grouped);
    /// `Some`, an aggregate.
    pub columns: Vec<Option<Agg>>,
    /// Rows with equal plain columns become one (DISTINCT, or aggregates alone).
    pub grouped: bool,
    /// Output columns to sort by, and whether descending.
    pub order: Vec<(usize, bool)>,
    /// OFFSET and row count.
    pub limit: Option<(u64, u64)>,
}

/// What a SELECT over several partitions needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// The rows one after the other.
    Concat,
    /// Combined as described, from what each partition answers to the query given (`None`:
    /// the client's own text).
    Combine(Combine, Option<String>),
    /// Not combinable by the router: why.
    Unsupported(String),
}

/// Aggregate functions the server knows.
const AGGREGATES: [&str; 12] = [
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "GROUP_CONCAT",
    "BIT_AND",
    "BIT_OR",
    "BIT_XOR",
    "STD",
    "STDDEV",
    "VARIANCE",
];

/// True when `text` calls an aggregate function (judged on the text, which can only err
/// towards refusing).
fn calls_aggregate(text: &str) -> bool {
    let t = text.to_ascii_uppercase();
    AGGREGATES.iter().any(|a| {
        t.match_indices(*a).any(|(i, _)| {
            let before = t[..i].chars().next_back();
            let after = t[i + a.len()..].trim_start();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '`') && after.starts_with('(')
        })
    })
}

/// The table column an expression names (`c`, `t.c`), if it is just that.
fn column_of(e: &Expr, table: Option<&TableKey>) -> Option<usize> {
    let name = match e {
        Expr::Identifier(i) => &i.value,
        Expr::CompoundIdentifier(parts) if parts.len() <= 3 => &parts.last()?.value,
        Expr::Nested(inner) => return column_of(inner, table),
        _ => return None,
    };
    table?.columns.iter().position(|c| c.eq_ignore_ascii_case(name))
}

/// What an output column is, for combining.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// A table column (its position).
    Column(usize),
    /// A combinable aggregate.
    Aggregate(Agg),
    /// Anything else (no aggregate in it): typed as text by the server.
    Computed,
}

fn output(e: &Expr, table: Option<&TableKey>) -> Result<Output, String> {
    if !calls_aggregate(&e.to_string()) {
        return Ok(column_of(e, table).map_or(Output::Computed, Output::Column));
    }
    let refuse = || Err(format!("the aggregate {e}"));
    let Expr::Function(f) = e else {
        return refuse();
    };
    let ast::FunctionArguments::List(list) = &f.args else {
        return refuse();
    };
    let distinct = list.duplicate_treatment == Some(ast::DuplicateTreatment::Distinct);
    if distinct || f.filter.is_some() || f.over.is_some() || !f.within_group.is_empty() {
        return refuse();
    }
    // The argument: `*` (COUNT only) or one plain column.
    let arg = match list.args.as_slice() {
        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)] => None,
        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a))] => Some(a),
        _ => return refuse(),
    };
    let column = arg.and_then(|a| column_of(a, table));
    let kind = column.and_then(|c| table.and_then(|t| t.types.get(c).copied().flatten()));
    let exact = matches!(
        kind,
        Some(
            TypeKind::TinyInt
                | TypeKind::SmallInt
                | TypeKind::MediumInt
                | TypeKind::Int
                | TypeKind::BigInt
                | TypeKind::Decimal
        )
    );
    match f.name.to_string().to_ascii_uppercase().as_str() {
        "COUNT" if arg.is_none() || column.is_some() => Ok(Output::Aggregate(Agg::Count)),
        "SUM" if exact => Ok(Output::Aggregate(Agg::Sum)),
        "MIN" if column.is_some() => Ok(Output::Aggregate(Agg::Min)),
        "MAX" if column.is_some() => Ok(Output::Aggregate(Agg::Max)),
        _ => refuse(),
    }
}

/// A literal row count or offset.
fn count(e: &Expr) -> Option<u64> {
    match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// The merge a SELECT over several partitions needs. `text` is the statement as the client
/// sent it (`None` for a prepared statement, which is not re-written); `table` the table's
/// columns when the router knows them.
pub fn plan(q: &ast::Query, text: Option<&str>, table: Option<&TableKey>) -> Merge {
    match plan_combine(q, text, table) {
        Ok(None) => Merge::Concat,
        Ok(Some((c, sent))) => Merge::Combine(c, sent),
        Err(why) => Merge::Unsupported(why),
    }
}

type Planned = Option<(Combine, Option<String>)>;

fn plan_combine(q: &ast::Query, text: Option<&str>, table: Option<&TableKey>) -> Result<Planned, String> {
    let SetExpr::Select(s) = q.body.as_ref() else {
        return Err("a set operation".into());
    };
    if q.fetch.is_some() || q.with.is_some() {
        return Err("FETCH or WITH".into());
    }
    if s.having.is_some() {
        return Err("HAVING".into());
    }
    if !matches!(&s.group_by, ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty()) {
        return Err("GROUP BY".into());
    }
    let distinct = match &s.distinct {
        None => false,
        Some(ast::Distinct::Distinct) => true,
        Some(_) => return Err("DISTINCT ON".into()),
    };
    let mut outputs: Vec<(String, Option<String>, Output)> = Vec::new();
    let mut wildcard = false;
    for item in &s.projection {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            _ => {
                wildcard = true;
                continue;
            }
        };
        outputs.push((e.to_string(), alias, output(e, table)?));
    }
    let aggregates = outputs.iter().any(|o| matches!(o.2, Output::Aggregate(_)));
    if q.order_by.is_none() && q.limit_clause.is_none() && !distinct && !aggregates {
        return Ok(None);
    }
    if wildcard {
        return Err("* with ORDER BY, LIMIT, DISTINCT or aggregates".into());
    }
    if aggregates && outputs.iter().any(|o| !matches!(o.2, Output::Aggregate(_))) {
        return Err("columns beside aggregates without GROUP BY".into());
    }
    if distinct {
        if aggregates {
            return Err("DISTINCT with aggregates".into());
        }
        let plain = |o: &Output| match o {
            Output::Column(c) => table
                .and_then(|t| t.types.get(*c).copied().flatten())
                .is_some_and(|k| k != TypeKind::Double),
            _ => false,
        };
        if let Some(o) = outputs.iter().find(|o| !plain(&o.2)) {
            return Err(format!(
                "DISTINCT over {}, which is not a plain column the router can compare",
                o.0
            ));
        }
    }
    let mut order = Vec::new();
    if let Some(ob) = &q.order_by {
        let ast::OrderByKind::Expressions(list) = &ob.kind else {
            return Err("ORDER BY ALL".into());
        };
        for o in list {
            if o.options.nulls_first.is_some() || o.with_fill.is_some() {
                return Err("NULLS FIRST/LAST or WITH FILL".into());
            }
            let at = order_position(&o.expr, &outputs, table)
                .ok_or_else(|| format!("ORDER BY {}, which is not a column or aggregate of the output", o.expr))?;
            let desc = match o.options.sort {
                None | Some(ast::OrderBySort::Asc) => false,
                Some(ast::OrderBySort::Desc) => true,
                Some(ast::OrderBySort::Using(_)) => return Err("ORDER BY ... USING".into()),
            };
            order.push((at, desc));
        }
    }
    let (limit, sent) = match &q.limit_clause {
        None => (None, None),
        Some(ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if !limit_by.is_empty() {
                return Err("LIMIT BY".into());
            }
            let Some(limit) = limit else {
                return Err("OFFSET without LIMIT".into());
            };
            let n = count(limit).ok_or("a LIMIT that is not a number")?;
            match offset {
                None => (Some((0, n)), None),
                Some(o) => {
                    let off = count(&o.value).ok_or("an OFFSET that is not a number")?;
                    (Some((off, n)), Some(widened(text, limit, &o.value, off, n)?))
                }
            }
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
            let off = count(offset).ok_or("an OFFSET that is not a number")?;
            let n = count(limit).ok_or("a LIMIT that is not a number")?;
            (Some((off, n)), Some(widened(text, limit, offset, off, n)?))
        }
    };
    let columns = outputs
        .iter()
        .map(|o| match o.2 {
            Output::Aggregate(a) => Some(a),
            _ => None,
        })
        .collect();
    Ok(Some((
        Combine {
            columns,
            grouped: distinct || aggregates,
            order,
            limit,
        },
        sent,
    )))
}

/// Which output an ORDER BY term sorts by, as the server resolves it: a position; a table
/// column (which must be an output); an alias of the output only when no table column has that
/// name; or an output's exact expression. Only plain columns and aggregates qualify: the
/// server types computed outputs as text, so the router could not sort them as it does.
fn order_position(e: &Expr, outputs: &[(String, Option<String>, Output)], table: Option<&TableKey>) -> Option<usize> {
    let at = if let Some(n) = count(e) {
        usize::try_from(n).ok()?.checked_sub(1).filter(|&i| i < outputs.len())?
    } else if let Some(c) = column_of(e, table) {
        outputs.iter().position(|o| o.2 == Output::Column(c))?
    } else if let (Expr::Identifier(name), Some(_)) = (e, table) {
        outputs
            .iter()
            .position(|o| o.1.as_deref() == Some(name.value.as_str()))?
    } else {
        let text = e.to_string();
        outputs.iter().position(|o| o.0 == text)?
    };
    (outputs[at].2 != Output::Computed).then_some(at)
}

/// The client's text with `LIMIT off, n` (or `LIMIT n OFFSET off`) made `LIMIT 0, off+n`: the
/// two numbers replaced where they stand, so nothing else in the statement is re-printed.
fn widened(text: Option<&str>, limit: &Expr, offset: &Expr, off: u64, n: u64) -> Result<String, String> {
    let refuse = || "an OFFSET the router cannot rewrite (a prepared statement, or text it cannot find)".to_string();
    let text = crate::sql::parse::expand_executable_comments(text.ok_or_else(refuse)?).into_owned();
    let span_of = |e: &Expr| -> Option<(usize, usize)> {
        let span = e.span();
        let a = super::prepared::byte_offset(&text, span.start)?;
        let b = super::prepared::byte_offset(&text, span.end)?;
        (a < b && text.get(a..b)?.bytes().all(|c| c.is_ascii_digit())).then_some((a, b))
    };
    let (l, o) = (span_of(limit).ok_or_else(refuse)?, span_of(offset).ok_or_else(refuse)?);
    let mut edits = [(l, off.saturating_add(n)), (o, 0)];
    edits.sort_by_key(|((a, _), _)| std::cmp::Reverse(*a));
    let mut out = text;
    for ((a, b), v) in edits {
        out.replace_range(a..b, &v.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(sql: &str) -> ast::Statement {
        crate::sql::parse::parse(sql).unwrap().remove(0)
    }

    fn table() -> TableKey {
        TableKey::from_create(&stmt(
            "CREATE TABLE t (id INT PRIMARY KEY, k INT, c VARCHAR(20), d DOUBLE, m DECIMAL(9,2))",
        ))
        .unwrap()
    }

    fn plan_of(sql: &str) -> Merge {
        let ast::Statement::Query(q) = stmt(sql) else {
            unreachable!()
        };
        plan(&q, Some(sql), Some(&table()))
    }

    #[test]
    fn plain_reads_concatenate() {
        assert_eq!(plan_of("SELECT c FROM t WHERE k = 1"), Merge::Concat);
        assert_eq!(plan_of("SELECT *, k + 1 FROM t"), Merge::Concat);
    }

    #[test]
    fn combinations_and_what_partitions_run() {
        let sql = "SELECT c, k FROM t WHERE c = 'C:\\\\temp' ORDER BY k DESC, 1 LIMIT 5, 10";
        let Merge::Combine(c, sent) = plan_of(sql) else {
            panic!()
        };
        assert_eq!(c.order, vec![(1, true), (0, false)]);
        assert_eq!(c.limit, Some((5, 10)));
        assert!(!c.grouped);
        // Only the two numbers change; the backslashes stay as the client wrote them.
        assert_eq!(
            sent.as_deref(),
            Some("SELECT c, k FROM t WHERE c = 'C:\\\\temp' ORDER BY k DESC, 1 LIMIT 0, 15")
        );
        let sql = "SELECT c FROM t ORDER BY c\nLIMIT 3 OFFSET 7";
        let Merge::Combine(_, sent) = plan_of(sql) else {
            panic!()
        };
        assert_eq!(sent.as_deref(), Some("SELECT c FROM t ORDER BY c\nLIMIT 10 OFFSET 0"));
        let Merge::Combine(c, sent) = plan_of("SELECT c FROM t ORDER BY c LIMIT 4") else {
            panic!()
        };
        assert_eq!((c.limit, sent), (Some((0, 4)), None));
        let Merge::Combine(c, _) = plan_of("SELECT DISTINCT c FROM t ORDER BY c") else {
            panic!()
        };
        assert!(c.grouped);
        let Merge::Combine(c, _) = plan_of("SELECT COUNT(*), SUM(k), MIN(c), MAX(t.m), SUM(m) FROM t") else {
            panic!()
        };
        assert_eq!(
            c.columns,
            vec![
                Some(Agg::Count),
                Some(Agg::Sum),
                Some(Agg::Min),
                Some(Agg::Max),
                Some(Agg::Sum)
            ]
        );
        // An alias sorts only when no table column has its name; a column name wins.
        let Merge::Combine(c, _) = plan_of("SELECT k AS x, c FROM t ORDER BY x") else {
            panic!()
        };
        assert_eq!(c.order, vec![(0, false)]);
        let Merge::Combine(c, _) = plan_of("SELECT k AS c, c FROM t ORDER BY c") else {
            panic!()
        };
        assert_eq!(c.order, vec![(1, false)]);
    }

    #[test]
    fn what_the_router_could_get_wrong_is_refused() {
        for sql in [
            "SELECT c FROM t ORDER BY k",
            "SELECT c AS k FROM t ORDER BY k",
            "SELECT k AS X FROM t ORDER BY x",
            "SELECT -k AS n FROM t ORDER BY n",
            "SELECT k + 0 FROM t ORDER BY 1",
            "SELECT CONCAT(c, 'a') FROM t ORDER BY CONCAT(c, 'A')",
            "SELECT AVG(k) FROM t",
            "SELECT SUM(d) FROM t",
            "SELECT SUM(k + 1) FROM t",
            "SELECT MAX(k + 0) FROM t",
            "SELECT COUNT(DISTINCT k) FROM t",
            "SELECT COUNT(*) + 0 FROM t",
            "SELECT IFNULL(SUM(k), 0) FROM t",
            "SELECT c, COUNT(*) FROM t",
            "SELECT k, COUNT(*) FROM t GROUP BY k",
            "SELECT COUNT(*) FROM t HAVING COUNT(*) > 1",
            "SELECT * FROM t ORDER BY c",
            "SELECT c FROM t LIMIT ?",
            "SELECT c FROM t ORDER BY 3",
            "SELECT c FROM t ORDER BY c NULLS FIRST",
            "SELECT DISTINCT COUNT(*) FROM t",
            "SELECT DISTINCT d FROM t",
            "SELECT DISTINCT k + 1 FROM t",
            "SELECT c FROM t UNION SELECT c FROM u",
        ] {
            assert!(matches!(plan_of(sql), Merge::Unsupported(_)), "{sql}");
        }
        // A prepared statement's text is not rewritten: an OFFSET is refused.
        let ast::Statement::Query(q) = stmt("SELECT c FROM t ORDER BY c LIMIT 2, 3") else {
            unreachable!()
        };
        assert!(matches!(plan(&q, None, Some(&table())), Merge::Unsupported(_)));
        // Without the table's columns no name can be resolved.
        let ast::Statement::Query(q) = stmt("SELECT c FROM t ORDER BY c") else {
            unreachable!()
        };
        assert!(matches!(
            plan(&q, Some("SELECT c FROM t ORDER BY c"), None),
            Merge::Unsupported(_)
        ));
    }
}
