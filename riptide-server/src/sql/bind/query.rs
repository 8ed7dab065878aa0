//! Binding of SELECT, INSERT, UPDATE and DELETE.
//!
//! Invariant: a bound plan names only columns of its one table and constants; joins,
//! subqueries, GROUP BY and the like are 1235 errors that name the construct.

use crate::protocol::{ColumnInfo, FieldType};
use crate::sql::access;
use crate::sql::bind::expr::{truncate, ExprBinder};
use crate::sql::bind::Bound;
use crate::sql::catalog::{CatalogState, TableHandle};
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::expr::Expr;
use crate::sql::plan::{Access, AggFunc, InsertPlan, ModifyPlan, Plan, SelectPlan};
use crate::sql::session_vars::SessionView;
use crate::value::Value;
use sqlparser::ast::{self, SelectItem, SetExpr, TableFactor};
use std::sync::Arc;

/// Resolves `[db.]table` against the session's database.
pub fn table_name(name: &ast::ObjectName, session: &SessionView) -> SqlResult<(String, String)> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(|i| i.value.clone()).unwrap_or_else(|| p.to_string()))
        .collect();
    match parts.as_slice() {
        [t] => Ok((session.db.clone().ok_or_else(SqlError::no_database)?, t.clone())),
        [d, t] => Ok((d.clone(), t.clone())),
        _ => Err(SqlError::syntax(format!("bad table name {name}"))),
    }
}

fn single_table(
    from: &[ast::TableWithJoins],
    state: &CatalogState,
    session: &SessionView,
) -> SqlResult<(Arc<TableHandle>, Option<String>)> {
    let [twj] = from else {
        return Err(SqlError::unsupported("a query over several tables"));
    };
    if !twj.joins.is_empty() {
        return Err(SqlError::unsupported("JOIN"));
    }
    match &twj.relation {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => {
            let (db, t) = table_name(name, session)?;
            let handle = state.table(&db, &t)?.clone();
            Ok((handle, alias.as_ref().map(|a| a.name.value.clone())))
        }
        TableFactor::Derived { .. } => Err(SqlError::unsupported("a derived table (subquery in FROM)")),
        other => Err(SqlError::unsupported(truncate(&other.to_string()))),
    }
}

/// Column metadata of a projection expression.
fn column_info(
    e: &Expr,
    name: String,
    handle: Option<&TableHandle>,
    plan_aggs: &[crate::sql::plan::Aggregate],
) -> ColumnInfo {
    let mut info = ColumnInfo {
        schema: String::new(),
        table: String::new(),
        name,
        field_type: FieldType::VarString,
        length: 255 * 4,
        flags: 0,
        decimals: 31,
        charset: 45,
    };
    let number = |info: &mut ColumnInfo, ft: FieldType, len: u32| {
        info.field_type = ft;
        info.length = len;
        info.charset = 63;
        info.flags |= 128 /* BINARY */;
        info.decimals = 0;
    };
    match e {
        Expr::Col(c) => {
            if let Some(h) = handle {
                let col = &h.schema.columns[*c];
                info.schema = h.schema.db.clone();
                info.table = h.schema.name.clone();
                info.field_type = col.ty.field_type();
                info.length = col.ty.display_length();
                info.decimals = col.ty.scale;
                if !col.nullable {
                    info.flags |= 1;
                }
                if h.schema.primary.contains(c) {
                    info.flags |= 2;
                }
                if col.ty.unsigned {
                    info.flags |= 32;
                }
                if col.auto_increment {
                    info.flags |= 512;
                }
                if !col.ty.is_text() {
                    info.charset = 63;
                    info.flags |= 128;
                }
                if col.ty.kind == crate::sql::types::TypeKind::Blob {
                    info.flags |= 16;
                }
            }
        }
        Expr::Agg(i) => match plan_aggs.get(*i).map(|a| a.func) {
            Some(AggFunc::Count) => {
                number(&mut info, FieldType::LongLong, 21);
                info.flags |= 1;
            }
            Some(AggFunc::Sum) | Some(AggFunc::Avg) => {
                number(&mut info, FieldType::NewDecimal, 33);
                info.decimals = if plan_aggs[*i].func == AggFunc::Avg { 4 } else { 0 };
            }
            _ => {
                if let Some(Expr::Col(c)) = plan_aggs[*i].arg.as_ref() {
                    info = column_info(&Expr::Col(*c), info.name.clone(), handle, plan_aggs);
                    info.flags &= !1;
                }
            }
        },
        Expr::Lit(Value::Int(_)) | Expr::Lit(Value::UInt(_)) => number(&mut info, FieldType::LongLong, 21),
        Expr::Lit(Value::Double(_)) => number(&mut info, FieldType::Double, 22),
        Expr::Lit(Value::Decimal(d)) => {
            number(&mut info, FieldType::NewDecimal, d.digits() + 2);
            info.decimals = d.scale;
        }
        Expr::Lit(Value::DateTime(_)) => number(&mut info, FieldType::DateTime, 19),
        Expr::Lit(Value::Null) => number(&mut info, FieldType::Null, 0),
        _ => {}
    }
    info
}

/// Column metadata of column `c` of a table (COM_FIELD_LIST).
pub fn column_info_of(h: &TableHandle, c: usize) -> ColumnInfo {
    column_info(&Expr::Col(c), h.schema.columns[c].name.clone(), Some(h), &[])
}

/// Binds a SELECT.
pub fn select(q: &ast::Query, state: &CatalogState, session: &SessionView) -> SqlResult<Bound> {
    if q.with.is_some() {
        return Err(SqlError::unsupported("WITH"));
    }
    let SetExpr::Select(s) = q.body.as_ref() else {
        return Err(SqlError::unsupported(truncate(&q.body.to_string())));
    };
    let table = if s.from.is_empty() {
        None
    } else {
        Some(single_table(&s.from, state, session)?)
    };
    let handle = table.as_ref().map(|(h, _)| h.clone());
    let mut b = ExprBinder::new(handle.as_ref().map(|h| &h.schema), session);
    b.alias = table.as_ref().and_then(|(_, a)| a.clone());
    if !matches!(&s.group_by, ast::GroupByExpr::Expressions(v, m) if v.is_empty() && m.is_empty()) {
        return Err(SqlError::unsupported("GROUP BY"));
    }
    if s.having.is_some() {
        return Err(SqlError::unsupported("HAVING"));
    }
    b.aggregates = Some(Vec::new());
    let mut projection = Vec::new();
    let mut names = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                projection.push(b.bind(e)?);
                names.push(match e {
                    ast::Expr::Identifier(id) => id.value.clone(),
                    ast::Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()).unwrap_or_default(),
                    other => other.to_string(),
                });
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                projection.push(b.bind(expr)?);
                names.push(alias.value.clone());
            }
            SelectItem::ExprWithAliases { .. } => {
                return Err(SqlError::unsupported("several aliases for one expression"))
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                let h = handle
                    .as_ref()
                    .ok_or_else(|| SqlError::new(1096, "HY000", "No tables used"))?;
                for (i, c) in h.schema.columns.iter().enumerate() {
                    projection.push(Expr::Col(i));
                    names.push(c.name.clone());
                }
            }
        }
    }
    let aggregates = b.aggregates.take().unwrap_or_default();
    if !aggregates.is_empty()
        && projection.iter().any(|e| {
            let mut cols = Vec::new();
            e.columns(&mut cols);
            !cols.is_empty()
        })
    {
        return Err(SqlError::unsupported("columns beside aggregates without GROUP BY"));
    }
    let filter = s.selection.as_ref().map(|w| b.bind(w)).transpose()?;
    let mut order_by = Vec::new();
    if let Some(ob) = &q.order_by {
        let ast::OrderByKind::Expressions(list) = &ob.kind else {
            return Err(SqlError::unsupported("ORDER BY ALL"));
        };
        for o in list {
            // ORDER BY n (a position) or an alias of the projection.
            let e = match &o.expr {
                ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(..)) => {
                    let n: usize = v.value.to_string().parse().unwrap_or(0);
                    projection
                        .get(n.wrapping_sub(1))
                        .cloned()
                        .ok_or_else(|| SqlError::no_such_column(&n.to_string(), "order clause"))?
                }
                ast::Expr::Identifier(id)
                    if names.iter().any(|n| n == &id.value)
                        && handle.as_ref().is_none_or(|h| h.schema.column(&id.value).is_none()) =>
                {
                    projection[names.iter().position(|n| n == &id.value).expect("checked")].clone()
                }
                other => b.bind(other)?,
            };
            order_by.push((e, matches!(o.options.sort, Some(ast::OrderBySort::Desc))));
        }
    }
    let (limit, offset) = match &q.limit_clause {
        None => (None, None),
        Some(ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if !limit_by.is_empty() {
                return Err(SqlError::unsupported("LIMIT BY"));
            }
            (
                limit.as_ref().map(|l| b.bind(l)).transpose()?,
                offset.as_ref().map(|o| b.bind(&o.value)).transpose()?,
            )
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => (Some(b.bind(limit)?), Some(b.bind(offset)?)),
    };
    let for_update = !q.locks.is_empty();
    let distinct = match &s.distinct {
        None => false,
        Some(ast::Distinct::Distinct) => true,
        Some(_) => return Err(SqlError::unsupported("DISTINCT ON")),
    };
    let mut needed = Vec::new();
    for e in projection
        .iter()
        .chain(filter.iter())
        .chain(order_by.iter().map(|(e, _)| e))
    {
        e.columns(&mut needed);
    }
    for a in &aggregates {
        if let Some(e) = &a.arg {
            e.columns(&mut needed);
        }
    }
    needed.sort_unstable();
    needed.dedup();
    let columns = projection
        .iter()
        .zip(names)
        .map(|(e, n)| column_info(e, n, handle.as_deref(), &aggregates))
        .collect();
    let rank = b.param_order();
    let mut plan = SelectPlan {
        table: handle.clone(),
        access: Access::NoTable,
        filter,
        projection,
        columns,
        aggregates,
        distinct,
        order_by,
        limit,
        offset,
        for_update,
        needed,
    };
    crate::sql::bind::renumber_select(&mut plan, &rank);
    if let Some(h) = &plan.table {
        plan.access = access::choose(&h.schema, plan.filter.as_ref());
    }
    Ok(Bound {
        params: rank.len(),
        plan: Plan::Select(plan),
    })
}

/// Binds an INSERT or REPLACE.
pub fn insert(ins: &ast::Insert, state: &CatalogState, session: &SessionView) -> SqlResult<Bound> {
    let ast::TableObject::TableName(name) = &ins.table else {
        return Err(SqlError::unsupported("INSERT INTO TABLE FUNCTION"));
    };
    let (db, t) = table_name(name, session)?;
    let handle = state.table(&db, &t)?.clone();
    let schema = &handle.schema;
    let columns: Vec<usize> = if ins.columns.is_empty() {
        (0..schema.columns.len()).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let n = c.to_string();
                schema
                    .column(&n)
                    .ok_or_else(|| SqlError::no_such_column(&n, "field list"))
            })
            .collect::<SqlResult<_>>()?
    };
    let mut b = ExprBinder::new(None, session);
    let mut rows = Vec::new();
    if !ins.assignments.is_empty() {
        return Err(SqlError::unsupported("INSERT ... SET"));
    }
    let source = ins
        .source
        .as_ref()
        .ok_or_else(|| SqlError::syntax("INSERT without VALUES"))?;
    let SetExpr::Values(values) = source.body.as_ref() else {
        return Err(SqlError::unsupported("INSERT ... SELECT"));
    };
    for (i, row) in values.rows.iter().enumerate() {
        if row.content.len() != columns.len() {
            return Err(SqlError::value_count(i + 1));
        }
        rows.push(row.content.iter().map(|e| b.bind(e)).collect::<SqlResult<Vec<_>>>()?);
    }
    let mut on_duplicate = Vec::new();
    if let Some(on) = &ins.on {
        let ast::OnInsert::DuplicateKeyUpdate(assignments) = on else {
            return Err(SqlError::unsupported("ON CONFLICT"));
        };
        let mut ub = ExprBinder::new(Some(schema), session);
        ub.params = std::mem::take(&mut b.params);
        for a in assignments {
            on_duplicate.push(assignment(&mut ub, a, schema)?);
        }
        b.params = ub.params;
    }
    let rank = b.param_order();
    for row in &mut rows {
        row.iter_mut().for_each(|e| crate::sql::bind::expr::renumber(e, &rank));
    }
    for (_, e) in &mut on_duplicate {
        crate::sql::bind::expr::renumber(e, &rank);
    }
    Ok(Bound {
        params: rank.len(),
        plan: Plan::Insert(InsertPlan {
            table: handle,
            columns,
            rows,
            ignore: ins.ignore,
            replace: ins.replace_into,
            on_duplicate,
        }),
    })
}

fn assignment(
    b: &mut ExprBinder<'_>,
    a: &ast::Assignment,
    schema: &crate::sql::schema::TableSchema,
) -> SqlResult<(usize, Expr)> {
    let name = match &a.target {
        ast::AssignmentTarget::ColumnName(n) => n.0.last().map(|p| p.to_string()).unwrap_or_default(),
        ast::AssignmentTarget::Tuple(_) => return Err(SqlError::unsupported("tuple assignment")),
    };
    let col = schema
        .column(&name)
        .ok_or_else(|| SqlError::no_such_column(&name, "field list"))?;
    Ok((col, b.bind(&a.value)?))
}

/// Binds an UPDATE.
pub fn update(u: &ast::Update, state: &CatalogState, session: &SessionView) -> SqlResult<Bound> {
    if u.from.is_some() {
        return Err(SqlError::unsupported("UPDATE ... FROM"));
    }
    if !u.order_by.is_empty() {
        return Err(SqlError::unsupported("UPDATE ... ORDER BY"));
    }
    let (handle, alias) = single_table(std::slice::from_ref(&u.table), state, session)?;
    let mut b = ExprBinder::new(Some(&handle.schema), session);
    b.alias = alias;
    let assignments = u
        .assignments
        .iter()
        .map(|a| assignment(&mut b, a, &handle.schema))
        .collect::<SqlResult<Vec<_>>>()?;
    let filter = u.selection.as_ref().map(|w| b.bind(w)).transpose()?;
    let limit = u.limit.as_ref().map(|l| b.bind(l)).transpose()?;
    modify(handle.clone(), b, filter, assignments, limit, false)
}

/// Binds a DELETE.
pub fn delete(d: &ast::Delete, state: &CatalogState, session: &SessionView) -> SqlResult<Bound> {
    if !d.tables.is_empty() || d.using.is_some() {
        return Err(SqlError::unsupported("multi-table DELETE"));
    }
    if !d.order_by.is_empty() {
        return Err(SqlError::unsupported("DELETE ... ORDER BY"));
    }
    let from = match &d.from {
        ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
    };
    let (handle, alias) = single_table(from, state, session)?;
    let mut b = ExprBinder::new(Some(&handle.schema), session);
    b.alias = alias;
    let filter = d.selection.as_ref().map(|w| b.bind(w)).transpose()?;
    let limit = d.limit.as_ref().map(|l| b.bind(l)).transpose()?;
    modify(handle.clone(), b, filter, Vec::new(), limit, true)
}

fn modify(
    table: Arc<TableHandle>,
    b: ExprBinder<'_>,
    mut filter: Option<Expr>,
    mut assignments: Vec<(usize, Expr)>,
    mut limit: Option<Expr>,
    delete: bool,
) -> SqlResult<Bound> {
    let rank = b.param_order();
    use crate::sql::bind::expr::renumber;
    filter.iter_mut().for_each(|e| renumber(e, &rank));
    limit.iter_mut().for_each(|e| renumber(e, &rank));
    assignments.iter_mut().for_each(|(_, e)| renumber(e, &rank));
    let access = access::choose(&table.schema, filter.as_ref());
    Ok(Bound {
        params: rank.len(),
        plan: Plan::Modify(ModifyPlan {
            table,
            access,
            filter,
            assignments,
            limit,
            delete,
        }),
    })
}
