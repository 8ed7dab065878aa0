//! Bound statements: what the executor runs, with every name resolved against one catalog
//! state. Produced by `bind`; parameters are `Expr::Param(n)` in textual order.
//!
//! Invariant: an [`Access`] path finds a superset of the rows its statement's filter keeps;
//! the executor always re-applies the whole filter, so a path only has to be complete, not
//! exact.

use crate::protocol::ColumnInfo;
use crate::sql::catalog::TableHandle;
use crate::sql::expr::Expr;
use crate::sql::schema::ColumnDef;
use riptide::Isolation;
use std::sync::Arc;

/// One bound of a key range.
#[derive(Debug, Clone)]
pub struct Bound {
    /// A constant expression (literal or parameter).
    pub value: Expr,
    /// Whether the bound itself is in the range.
    pub inclusive: bool,
}

/// A range of a key (primary or index): equal values for a prefix of its columns, then an
/// optional range on the next column.
#[derive(Debug, Clone)]
pub struct KeyRange {
    /// Values of the first key columns.
    pub eq: Vec<Expr>,
    /// Lower bound on the next column.
    pub lo: Option<Bound>,
    /// Upper bound on the next column.
    pub hi: Option<Bound>,
}

/// How a statement finds its rows.
#[derive(Debug, Clone)]
pub enum Access {
    /// No table (`SELECT 1`).
    NoTable,
    /// Ranges of the primary key (`index: None`) or of a secondary index.
    Key {
        /// `None` for the primary key, else the position in `schema.indexes`.
        index: Option<usize>,
        /// The ranges, each read in key order.
        ranges: Vec<KeyRange>,
    },
    /// Every row.
    Scan,
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    /// COUNT(*) (`arg` None) or COUNT(e).
    Count,
    /// SUM(e).
    Sum,
    /// MIN(e).
    Min,
    /// MAX(e).
    Max,
    /// AVG(e).
    Avg,
}

/// One aggregate of a projection.
#[derive(Debug, Clone)]
pub struct Aggregate {
    /// The function.
    pub func: AggFunc,
    /// Its argument (`None`: COUNT(*)).
    pub arg: Option<Expr>,
    /// DISTINCT argument values only.
    pub distinct: bool,
}

/// A bound SELECT.
#[derive(Debug, Clone)]
pub struct SelectPlan {
    /// The table, if any.
    pub table: Option<Arc<TableHandle>>,
    /// How rows are found.
    pub access: Access,
    /// WHERE.
    pub filter: Option<Expr>,
    /// Output expressions.
    pub projection: Vec<Expr>,
    /// Output column metadata.
    pub columns: Vec<ColumnInfo>,
    /// Aggregates referenced by `projection` (`Expr::Agg`); non-empty makes one group.
    pub aggregates: Vec<Aggregate>,
    /// SELECT DISTINCT.
    pub distinct: bool,
    /// ORDER BY: expressions over the source row, descending flag.
    pub order_by: Vec<(Expr, bool)>,
    /// LIMIT.
    pub limit: Option<Expr>,
    /// OFFSET.
    pub offset: Option<Expr>,
    /// FOR UPDATE / LOCK IN SHARE MODE: lock the rows read.
    pub for_update: bool,
    /// Columns of the table that the statement reads (to tell covering index reads).
    pub needed: Vec<usize>,
}

/// A bound INSERT / REPLACE.
#[derive(Debug, Clone)]
pub struct InsertPlan {
    /// The table.
    pub table: Arc<TableHandle>,
    /// Target column of each value position.
    pub columns: Vec<usize>,
    /// Rows of value expressions.
    pub rows: Vec<Vec<Expr>>,
    /// INSERT IGNORE: skip rows with a duplicate key.
    pub ignore: bool,
    /// REPLACE: delete a row with a duplicate key first.
    pub replace: bool,
    /// ON DUPLICATE KEY UPDATE assignments (column, expression over the old row).
    pub on_duplicate: Vec<(usize, Expr)>,
}

/// A bound UPDATE or DELETE.
#[derive(Debug, Clone)]
pub struct ModifyPlan {
    /// The table.
    pub table: Arc<TableHandle>,
    /// How rows are found.
    pub access: Access,
    /// WHERE.
    pub filter: Option<Expr>,
    /// UPDATE's assignments (column, expression over the old row); empty for DELETE.
    pub assignments: Vec<(usize, Expr)>,
    /// LIMIT.
    pub limit: Option<Expr>,
    /// DELETE (else UPDATE).
    pub delete: bool,
}

/// SHOW and DESCRIBE.
#[derive(Debug, Clone)]
pub enum ShowPlan {
    /// `SHOW DATABASES [LIKE]`.
    Databases(Option<String>),
    /// `SHOW TABLES [FROM db] [LIKE]`.
    Tables(String, Option<String>),
    /// SHOW CREATE TABLE.
    CreateTable(Arc<TableHandle>),
    /// DESCRIBE / SHOW COLUMNS.
    Columns(Arc<TableHandle>),
    /// `SHOW [SESSION|GLOBAL] VARIABLES [LIKE]`.
    Variables(Option<String>),
    /// SHOW WARNINGS / ERRORS: always empty.
    Warnings,
    /// `SHOW [GLOBAL] STATUS [LIKE]`: engine counters.
    Status(Option<String>),
    /// SHOW ENGINES.
    Engines,
}

/// One `SET` assignment.
#[derive(Debug, Clone)]
pub enum SetItem {
    /// `SET autocommit = e`.
    Autocommit(Expr),
    /// `SET [SESSION] TRANSACTION ISOLATION LEVEL ...` (next transactions of the session).
    Isolation(Isolation),
    /// `SET [SESSION] transaction_isolation = 'READ-COMMITTED'` etc.
    IsolationName(Expr),
    /// A variable this server accepts and ignores (`SET NAMES`, `sql_mode`, ...).
    Ignored,
}

/// A bound statement.
#[derive(Debug, Clone)]
pub enum Plan {
    /// SELECT.
    Select(SelectPlan),
    /// INSERT / REPLACE.
    Insert(InsertPlan),
    /// UPDATE / DELETE.
    Modify(ModifyPlan),
    /// BEGIN / START TRANSACTION.
    Begin,
    /// COMMIT.
    Commit,
    /// ROLLBACK.
    Rollback,
    /// SET.
    Set(Vec<SetItem>),
    /// USE db.
    Use(String),
    /// CREATE DATABASE.
    CreateDatabase {
        /// Name.
        name: String,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// DROP DATABASE.
    DropDatabase {
        /// Name.
        name: String,
        /// IF EXISTS.
        if_exists: bool,
    },
    /// CREATE TABLE.
    CreateTable(Box<CreateTablePlan>),
    /// DROP TABLE.
    DropTable {
        /// (db, table) pairs.
        tables: Vec<(String, String)>,
        /// IF EXISTS.
        if_exists: bool,
    },
    /// CREATE INDEX / ALTER TABLE ADD INDEX.
    CreateIndex {
        /// The table's database.
        db: String,
        /// The table.
        table: String,
        /// Index name.
        name: String,
        /// Column names.
        columns: Vec<String>,
        /// UNIQUE.
        unique: bool,
    },
    /// ALTER TABLE ADD COLUMN.
    AddColumn {
        /// The table's database.
        db: String,
        /// The table.
        table: String,
        /// The new column.
        column: ColumnDef,
    },
    /// SHOW / DESCRIBE.
    Show(ShowPlan),
    /// A statement accepted and ignored (ANALYZE TABLE, FLUSH, ...).
    Nothing,
}

/// CREATE TABLE, before ids are assigned.
#[derive(Debug, Clone)]
pub struct CreateTablePlan {
    /// Database.
    pub db: String,
    /// Name.
    pub name: String,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// Columns.
    pub columns: Vec<ColumnDef>,
    /// Primary key columns (empty: hidden row id).
    pub primary: Vec<usize>,
    /// Secondary indexes: (name, columns, unique).
    pub indexes: Vec<(String, Vec<usize>, bool)>,
}
