//! Binding: from a parsed statement (sqlparser's AST) to a [`Plan`] against one catalog
//! state and session.
//!
//! Invariant: binding has no side effects; the same statement binds to the same plan for
//! the same catalog state and session, so a prepared statement can rebind at each execute.

pub mod ddl;
pub mod expr;
pub mod query;

use crate::sql::catalog::CatalogState;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::plan::{Plan, SelectPlan};
use crate::sql::session_vars::SessionView;
use expr::renumber;
use sqlparser::ast::Statement;

/// A bound statement and its parameter count.
#[derive(Debug, Clone)]
pub struct Bound {
    /// The plan.
    pub plan: Plan,
    /// Number of `?` parameters.
    pub params: usize,
}

impl Bound {
    fn of(plan: Plan) -> Bound {
        Bound { plan, params: 0 }
    }
}

/// Renumbers every parameter of a SELECT plan (before its access path is chosen).
pub fn renumber_select(p: &mut SelectPlan, rank: &[usize]) {
    p.filter.iter_mut().for_each(|e| renumber(e, rank));
    p.projection.iter_mut().for_each(|e| renumber(e, rank));
    p.order_by.iter_mut().for_each(|(e, _)| renumber(e, rank));
    p.limit.iter_mut().for_each(|e| renumber(e, rank));
    p.offset.iter_mut().for_each(|e| renumber(e, rank));
    for a in &mut p.aggregates {
        a.arg.iter_mut().for_each(|e| renumber(e, rank));
    }
}

/// Binds one statement.
pub fn bind(stmt: &Statement, state: &CatalogState, session: &SessionView) -> SqlResult<Bound> {
    match stmt {
        Statement::Query(q) => query::select(q, state, session),
        Statement::Insert(i) => query::insert(i, state, session),
        Statement::Update(u) => query::update(u, state, session),
        Statement::Delete(d) => query::delete(d, state, session),
        Statement::StartTransaction { .. } => Ok(Bound::of(Plan::Begin)),
        Statement::Commit { chain: false, .. } => Ok(Bound::of(Plan::Commit)),
        Statement::Rollback {
            chain: false,
            savepoint: None,
        } => Ok(Bound::of(Plan::Rollback)),
        Statement::Rollback { savepoint: Some(_), .. } => Err(SqlError::unsupported("ROLLBACK TO SAVEPOINT")),
        Statement::Commit { .. } | Statement::Rollback { .. } => Err(SqlError::unsupported("AND CHAIN")),
        Statement::Set(s) => ddl::set(s, session).map(Bound::of),
        Statement::Use(u) => ddl::use_db(u, state).map(Bound::of),
        _ => ddl::bind(stmt, state, session).map(Bound::of),
    }
}
