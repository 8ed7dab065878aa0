//! Binding of DDL, SET, USE and SHOW statements.
//!
//! Invariant: a CREATE TABLE plan is complete and consistent (known types, one primary key
//! of NOT NULL columns, index columns that exist, at most one AUTO_INCREMENT column that is
//! the first column of a key); defaults are coerced to their column's type here, so a bad
//! default fails the CREATE, not a later INSERT.

use crate::sql::bind::expr::{truncate, ExprBinder};
use crate::sql::bind::query::table_name;
use crate::sql::catalog::CatalogState;
use crate::sql::error::{SqlError, SqlResult};
use crate::sql::plan::{CreateTablePlan, Plan, SetItem, ShowPlan};
use crate::sql::schema::ColumnDef;
use crate::sql::session_vars::SessionView;
use crate::sql::types::{ColumnType, TypeKind};
use crate::value::{Value, MAX_DECIMAL_PRECISION, MAX_DECIMAL_SCALE};
use riptide::Isolation;
use sqlparser::ast::{
    self, ColumnOption, DataType, ExactNumberInfo, ObjectType, ShowStatementFilter, ShowStatementFilterPosition,
    Statement, TableConstraint,
};

fn ident_list(cols: &[ast::IndexColumn]) -> SqlResult<Vec<String>> {
    cols.iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(i) => Ok(i.value.clone()),
            other => Err(SqlError::unsupported(format!(
                "index on expression {}",
                truncate(&other.to_string())
            ))),
        })
        .collect()
}

fn char_len(l: &Option<ast::CharacterLength>, default: u64) -> SqlResult<u32> {
    match l {
        None => Ok(default as u32),
        Some(ast::CharacterLength::IntegerLength { length, .. }) if *length <= 65535 => Ok(*length as u32),
        Some(_) => Err(SqlError::new(1074, "42000", "Column length too big (max = 65535)")),
    }
}

/// The column type of a declared data type.
pub fn column_type(dt: &DataType) -> SqlResult<ColumnType> {
    use DataType as D;
    let int = |kind, unsigned| ColumnType {
        unsigned,
        ..ColumnType::new(kind)
    };
    Ok(match dt {
        D::TinyInt(_) | D::Bool | D::Boolean => int(TypeKind::TinyInt, false),
        D::TinyIntUnsigned(_) => int(TypeKind::TinyInt, true),
        D::SmallInt(_) => int(TypeKind::SmallInt, false),
        D::SmallIntUnsigned(_) => int(TypeKind::SmallInt, true),
        D::MediumInt(_) => int(TypeKind::MediumInt, false),
        D::MediumIntUnsigned(_) => int(TypeKind::MediumInt, true),
        D::Int(_) | D::Integer(_) => int(TypeKind::Int, false),
        D::IntUnsigned(_) | D::IntegerUnsigned(_) => int(TypeKind::Int, true),
        D::BigInt(_) => int(TypeKind::BigInt, false),
        D::BigIntUnsigned(_) => int(TypeKind::BigInt, true),
        D::Double(_) | D::DoublePrecision | D::Float(_) | D::Real | D::DoubleUnsigned(_) | D::FloatUnsigned(_) => {
            ColumnType::new(TypeKind::Double)
        }
        D::Decimal(info) | D::Numeric(info) | D::Dec(info) | D::DecimalUnsigned(info) => {
            let (p, s) = match info {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
            };
            if p == 0 || p > MAX_DECIMAL_PRECISION as u64 || s > MAX_DECIMAL_SCALE as u64 || s > p {
                return Err(SqlError::new(
                    1426,
                    "42000",
                    format!("Too-big precision or scale for DECIMAL({p},{s}); at most {MAX_DECIMAL_PRECISION} digits"),
                ));
            }
            ColumnType {
                length: p as u32,
                scale: s as u8,
                ..ColumnType::new(TypeKind::Decimal)
            }
        }
        D::Char(l) | D::Character(l) => ColumnType {
            length: char_len(l, 1)?.min(255),
            ..ColumnType::new(TypeKind::Char)
        },
        D::Varchar(l) | D::CharVarying(l) | D::CharacterVarying(l) | D::Nvarchar(l) => ColumnType {
            length: char_len(l, 255)?,
            ..ColumnType::new(TypeKind::VarChar)
        },
        D::Text | D::TinyText => ColumnType {
            length: 65535,
            ..ColumnType::new(TypeKind::Text)
        },
        D::MediumText => ColumnType {
            length: 16_777_215,
            ..ColumnType::new(TypeKind::Text)
        },
        D::LongText => ColumnType {
            length: riptide::MAX_VALUE_SIZE as u32,
            ..ColumnType::new(TypeKind::Text)
        },
        D::Blob(_) | D::TinyBlob | D::Binary(_) | D::Varbinary(_) => ColumnType {
            length: 65535,
            ..ColumnType::new(TypeKind::Blob)
        },
        D::MediumBlob => ColumnType {
            length: 16_777_215,
            ..ColumnType::new(TypeKind::Blob)
        },
        D::LongBlob => ColumnType {
            length: riptide::MAX_VALUE_SIZE as u32,
            ..ColumnType::new(TypeKind::Blob)
        },
        D::Datetime(_) | D::Timestamp(..) => ColumnType::new(TypeKind::DateTime),
        other => return Err(SqlError::unsupported(format!("column type {other}"))),
    })
}

/// A column definition, with its default coerced.
pub fn column_def(c: &ast::ColumnDef, session: &SessionView, pk: &mut bool, unique: &mut bool) -> SqlResult<ColumnDef> {
    let ty = column_type(&c.data_type)?;
    let name = c.name.value.clone();
    let mut nullable = true;
    let mut default = None;
    let mut auto_increment = false;
    for opt in &c.options {
        match &opt.option {
            ColumnOption::Null => nullable = true,
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Default(e) => {
                let mut b = ExprBinder::new(None, session);
                let v = b.bind(e)?;
                let crate::sql::expr::Expr::Lit(v) = v else {
                    return Err(SqlError::new(
                        1067,
                        "42000",
                        format!("Invalid default value for '{name}'"),
                    ));
                };
                default = Some(v);
            }
            ColumnOption::PrimaryKey(_) => *pk = true,
            ColumnOption::Unique(_) => *unique = true,
            ColumnOption::DialectSpecific(tokens)
                if tokens
                    .iter()
                    .any(|t| t.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")) =>
            {
                auto_increment = true
            }
            ColumnOption::Comment(_) | ColumnOption::CharacterSet(_) | ColumnOption::Collation(_) => {}
            other => return Err(SqlError::unsupported(format!("column option {other}"))),
        }
    }
    if *pk {
        nullable = false;
    }
    let default = match default {
        None => None,
        Some(Value::Null) if !nullable => {
            return Err(SqlError::new(
                1067,
                "42000",
                format!("Invalid default value for '{name}'"),
            ));
        }
        Some(v) => Some(
            ty.coerce(v, &name)
                .map_err(|_| SqlError::new(1067, "42000", format!("Invalid default value for '{name}'")))?,
        ),
    };
    if auto_increment && !ty.is_integer() {
        return Err(SqlError::new(
            1063,
            "42000",
            format!("Incorrect column specifier for column '{name}'"),
        ));
    }
    Ok(ColumnDef {
        name,
        ty,
        nullable,
        default,
        auto_increment,
    })
}

fn create_table(ct: &ast::CreateTable, state: &CatalogState, session: &SessionView) -> SqlResult<Plan> {
    if ct.query.is_some() || ct.like.is_some() {
        return Err(SqlError::unsupported("CREATE TABLE ... AS / LIKE"));
    }
    if ct.temporary {
        return Err(SqlError::unsupported("TEMPORARY tables"));
    }
    let (db, name) = table_name(&ct.name, session)?;
    if !state.databases.contains(&db) {
        return Err(SqlError::no_such_database(&db));
    }
    let mut columns: Vec<ColumnDef> = Vec::new();
    let mut primary: Vec<usize> = Vec::new();
    let mut indexes: Vec<(String, Vec<usize>, bool)> = Vec::new();
    for c in &ct.columns {
        let (mut pk, mut unique) = (false, false);
        let def = column_def(c, session, &mut pk, &mut unique)?;
        if columns.iter().any(|x| x.name.eq_ignore_ascii_case(&def.name)) {
            return Err(SqlError::duplicate_column(&def.name));
        }
        let pos = columns.len();
        if pk {
            if !primary.is_empty() {
                return Err(SqlError::new(1068, "42000", "Multiple primary key defined"));
            }
            primary.push(pos);
        }
        if unique {
            indexes.push((def.name.clone(), vec![pos], true));
        }
        columns.push(def);
    }
    if columns.is_empty() {
        return Err(SqlError::new(1113, "42000", "A table must have at least 1 column"));
    }
    let resolve = |names: Vec<String>| -> SqlResult<Vec<usize>> {
        names
            .iter()
            .map(|n| {
                columns
                    .iter()
                    .position(|c| c.name.eq_ignore_ascii_case(n))
                    .ok_or_else(|| SqlError::new(1072, "42000", format!("Key column '{n}' doesn't exist in table")))
            })
            .collect()
    };
    for con in &ct.constraints {
        match con {
            TableConstraint::PrimaryKey(p) => {
                if !primary.is_empty() {
                    return Err(SqlError::new(1068, "42000", "Multiple primary key defined"));
                }
                primary = resolve(ident_list(&p.columns)?)?;
            }
            TableConstraint::Unique(u) => {
                let cols = resolve(ident_list(&u.columns)?)?;
                let n = u
                    .name
                    .as_ref()
                    .or(u.index_name.as_ref())
                    .map(|i| i.value.clone())
                    .unwrap_or_else(|| columns[cols[0]].name.clone());
                indexes.push((n, cols, true));
            }
            TableConstraint::Index(ix) => {
                let cols = resolve(ident_list(&ix.columns)?)?;
                let n = ix
                    .name
                    .as_ref()
                    .map(|i| i.value.clone())
                    .unwrap_or_else(|| columns[cols[0]].name.clone());
                indexes.push((n, cols, false));
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "constraint {}",
                    truncate(&other.to_string())
                )))
            }
        }
    }
    for &p in &primary {
        columns[p].nullable = false;
    }
    let mut seen = std::collections::HashSet::new();
    for (n, cols, _) in &indexes {
        if !seen.insert(n.to_ascii_lowercase()) || n.eq_ignore_ascii_case("PRIMARY") {
            return Err(SqlError::duplicate_index(n));
        }
        let mut c = cols.clone();
        c.sort_unstable();
        c.dedup();
        if c.len() != cols.len() {
            return Err(SqlError::duplicate_column(&columns[cols[0]].name));
        }
    }
    let ai: Vec<usize> = (0..columns.len()).filter(|&i| columns[i].auto_increment).collect();
    if ai.len() > 1
        || ai
            .first()
            .is_some_and(|&c| primary.first() != Some(&c) && !indexes.iter().any(|(_, cols, _)| cols[0] == c))
    {
        return Err(SqlError::new(
            1075,
            "42000",
            "Incorrect table definition; there can be only one auto column and it must be defined as a key",
        ));
    }
    Ok(Plan::CreateTable(Box::new(CreateTablePlan {
        db,
        name,
        if_not_exists: ct.if_not_exists,
        columns,
        primary,
        indexes,
    })))
}

fn like_filter(f: &Option<ShowStatementFilterPosition>) -> SqlResult<Option<String>> {
    match f {
        None => Ok(None),
        Some(ShowStatementFilterPosition::Infix(ShowStatementFilter::Like(s)))
        | Some(ShowStatementFilterPosition::Suffix(ShowStatementFilter::Like(s))) => Ok(Some(s.clone())),
        Some(_) => Err(SqlError::unsupported("SHOW ... WHERE")),
    }
}

/// Binds a DDL or SHOW statement.
pub fn bind(stmt: &Statement, state: &CatalogState, session: &SessionView) -> SqlResult<Plan> {
    Ok(match stmt {
        Statement::CreateTable(ct) => create_table(ct, state, session)?,
        Statement::CreateDatabase {
            db_name, if_not_exists, ..
        }
        | Statement::CreateSchema {
            schema_name: ast::SchemaName::Simple(db_name),
            if_not_exists,
            ..
        } => Plan::CreateDatabase {
            name: db_name.to_string().trim_matches('`').to_string(),
            if_not_exists: *if_not_exists,
        },
        Statement::Drop {
            object_type,
            if_exists,
            names,
            ..
        } => match object_type {
            ObjectType::Table => Plan::DropTable {
                tables: names.iter().map(|n| table_name(n, session)).collect::<SqlResult<_>>()?,
                if_exists: *if_exists,
            },
            ObjectType::Database | ObjectType::Schema => {
                let [n] = names.as_slice() else {
                    return Err(SqlError::syntax("DROP DATABASE takes one name"));
                };
                Plan::DropDatabase {
                    name: n.to_string().trim_matches('`').to_string(),
                    if_exists: *if_exists,
                }
            }
            other => return Err(SqlError::unsupported(format!("DROP {other}"))),
        },
        Statement::CreateIndex(ci) => {
            let (db, table) = table_name(&ci.table_name, session)?;
            state.table(&db, &table)?;
            let columns = ident_list(&ci.columns)?;
            let name = ci
                .name
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_else(|| columns[0].clone());
            Plan::CreateIndex {
                db,
                table,
                name,
                columns,
                unique: ci.unique,
            }
        }
        Statement::AlterTable(at) => {
            let (db, table) = table_name(&at.name, session)?;
            state.table(&db, &table)?;
            let [op] = at.operations.as_slice() else {
                return Err(SqlError::unsupported("ALTER TABLE with several operations"));
            };
            match op {
                ast::AlterTableOperation::AddColumn {
                    column_def: c,
                    column_position: None,
                    ..
                } => {
                    let (mut pk, mut unique) = (false, false);
                    let column = column_def(c, session, &mut pk, &mut unique)?;
                    if pk || unique || column.auto_increment {
                        return Err(SqlError::unsupported(
                            "ALTER TABLE ADD COLUMN with a key or AUTO_INCREMENT",
                        ));
                    }
                    Plan::AddColumn { db, table, column }
                }
                ast::AlterTableOperation::AddColumn { .. } => {
                    return Err(SqlError::unsupported("ADD COLUMN ... FIRST/AFTER"))
                }
                ast::AlterTableOperation::AddConstraint { constraint, .. } => {
                    let (name, cols, unique) = match constraint {
                        TableConstraint::Index(ix) => (ix.name.as_ref().map(|i| i.value.clone()), &ix.columns, false),
                        TableConstraint::Unique(u) => (
                            u.name.as_ref().or(u.index_name.as_ref()).map(|i| i.value.clone()),
                            &u.columns,
                            true,
                        ),
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "ALTER TABLE ADD {}",
                                truncate(&other.to_string())
                            )))
                        }
                    };
                    let columns = ident_list(cols)?;
                    Plan::CreateIndex {
                        db,
                        table,
                        name: name.unwrap_or_else(|| columns[0].clone()),
                        columns,
                        unique,
                    }
                }
                other => {
                    return Err(SqlError::unsupported(format!(
                        "ALTER TABLE {}",
                        truncate(&other.to_string())
                    )))
                }
            }
        }
        Statement::ShowDatabases { show_options, .. } => {
            Plan::Show(ShowPlan::Databases(like_filter(&show_options.filter_position)?))
        }
        Statement::ShowTables { show_options, .. } => {
            let db = match show_options.show_in.as_ref().and_then(|i| i.parent_name.as_ref()) {
                Some(n) => n.to_string(),
                None => session.db.clone().ok_or_else(SqlError::no_database)?,
            };
            if !state.databases.contains(&db) {
                return Err(SqlError::no_such_database(&db));
            }
            Plan::Show(ShowPlan::Tables(db, like_filter(&show_options.filter_position)?))
        }
        Statement::ShowCreate {
            obj_type: ast::ShowCreateObject::Table,
            obj_name,
        } => {
            let (db, t) = table_name(obj_name, session)?;
            Plan::Show(ShowPlan::CreateTable(state.table(&db, &t)?.clone()))
        }
        Statement::ShowColumns { show_options, .. } => {
            let name = show_options
                .show_in
                .as_ref()
                .and_then(|i| i.parent_name.as_ref())
                .ok_or_else(|| SqlError::syntax("SHOW COLUMNS needs a table"))?;
            let (db, t) = table_name(name, session)?;
            Plan::Show(ShowPlan::Columns(state.table(&db, &t)?.clone()))
        }
        Statement::ExplainTable { table_name: n, .. } => {
            let (db, t) = table_name(n, session)?;
            Plan::Show(ShowPlan::Columns(state.table(&db, &t)?.clone()))
        }
        Statement::ShowVariables { filter, .. } => Plan::Show(ShowPlan::Variables(match filter {
            None => None,
            Some(ShowStatementFilter::Like(s)) => Some(s.clone()),
            Some(_) => return Err(SqlError::unsupported("SHOW VARIABLES WHERE")),
        })),
        Statement::ShowStatus { filter, .. } => Plan::Show(ShowPlan::Status(match filter {
            None => None,
            Some(ShowStatementFilter::Like(s)) => Some(s.clone()),
            Some(_) => return Err(SqlError::unsupported("SHOW STATUS WHERE")),
        })),
        Statement::Analyze(_) | Statement::Flush { .. } => Plan::Nothing,
        other => {
            let text = other.to_string();
            let upper = text.to_ascii_uppercase();
            if upper.starts_with("SHOW WARNINGS") || upper.starts_with("SHOW ERRORS") {
                Plan::Show(ShowPlan::Warnings)
            } else if upper.starts_with("SHOW ENGINES") {
                Plan::Show(ShowPlan::Engines)
            } else {
                return Err(SqlError::unsupported(truncate(&text)));
            }
        }
    })
}

fn isolation_of(level: &ast::TransactionIsolationLevel) -> SqlResult<Isolation> {
    use ast::TransactionIsolationLevel as L;
    match level {
        L::ReadCommitted => Ok(Isolation::ReadCommitted),
        L::RepeatableRead | L::Snapshot => Ok(Isolation::Snapshot),
        other => Err(SqlError::unsupported(format!("isolation level {other}"))),
    }
}

/// Binds a SET statement.
pub fn set(s: &ast::Set, session: &SessionView) -> SqlResult<Plan> {
    let one = |name: &str, value: &ast::Expr| -> SqlResult<SetItem> {
        let name = name.trim_start_matches("@@").to_ascii_lowercase();
        let name = name
            .strip_prefix("session.")
            .or_else(|| name.strip_prefix("local."))
            .unwrap_or(&name)
            .to_string();
        let mut b = ExprBinder::new(None, session);
        // `SET autocommit = ON`: a bare word is its name as a string.
        let bound = match value {
            ast::Expr::Identifier(id) => crate::sql::expr::Expr::Lit(Value::str(&id.value)),
            other => b.bind(other)?,
        };
        match name.as_str() {
            "autocommit" => Ok(SetItem::Autocommit(bound)),
            "transaction_isolation" | "tx_isolation" => Ok(SetItem::IsolationName(bound)),
            n if n.starts_with("global.") => Err(SqlError::new(
                1227,
                "42000",
                "Access denied; SET GLOBAL is not supported",
            )),
            n if crate::sql::session_vars::VARIABLES.contains(&n)
                || [
                    "sql_mode",
                    "names",
                    "character_set_results",
                    "sql_select_limit",
                    "net_read_timeout",
                    "foreign_key_checks",
                    "unique_checks",
                    "sql_log_bin",
                    "session_track_schema",
                    "time_zone",
                    "sql_auto_is_null",
                    "sql_safe_updates",
                    "tmp_table_size",
                    "max_heap_table_size",
                    "group_concat_max_len",
                    "max_execution_time",
                ]
                .contains(&n) =>
            {
                Ok(SetItem::Ignored)
            }
            n => Err(SqlError::unknown_variable(n)),
        }
    };
    Ok(Plan::Set(match s {
        ast::Set::SetNames { .. } | ast::Set::SetNamesDefault {} => vec![SetItem::Ignored],
        ast::Set::SingleAssignment { variable, values, .. } => {
            let [v] = values.as_slice() else {
                return Err(SqlError::syntax("SET takes one value"));
            };
            vec![one(&variable.to_string(), v)?]
        }
        ast::Set::MultipleAssignments { assignments } => assignments
            .iter()
            .map(|a| one(&a.name.to_string(), &a.value))
            .collect::<SqlResult<_>>()?,
        ast::Set::SetTransaction {
            modes, snapshot: None, ..
        } => {
            let mut out = Vec::new();
            for m in modes {
                match m {
                    ast::TransactionMode::IsolationLevel(l) => out.push(SetItem::Isolation(isolation_of(l)?)),
                    ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {}
                    other => return Err(SqlError::unsupported(format!("SET TRANSACTION {other}"))),
                }
            }
            out
        }
        ast::Set::SetTimeZone { .. } => vec![SetItem::Ignored],
        other => return Err(SqlError::unsupported(truncate(&other.to_string()))),
    }))
}

/// Binds USE.
pub fn use_db(u: &ast::Use, state: &CatalogState) -> SqlResult<Plan> {
    let name = match u {
        ast::Use::Object(n) | ast::Use::Database(n) | ast::Use::Schema(n) => {
            n.to_string().trim_matches('`').to_string()
        }
        _ => return Err(SqlError::unsupported("USE of this kind")),
    };
    if !state.databases.contains(&name) {
        return Err(SqlError::no_such_database(&name));
    }
    Ok(Plan::Use(name))
}
