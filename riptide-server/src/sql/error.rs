//! SQL errors as MySQL reports them: a numeric code, a five-character SQLSTATE and a message.
//!
//! Invariant: every error a client can see goes through [`SqlError`], so each has a MySQL code
//! that clients and sysbench understand (1213 and 1205 are retried by sysbench; see
//! `docs/server.md`). Engine errors map in [`SqlError::from_engine`].

use std::fmt;

/// An error with MySQL's code and SQLSTATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// MySQL error code (ER_*).
    pub code: u16,
    /// SQLSTATE, five characters.
    pub state: &'static str,
    /// The message.
    pub message: String,
    /// The transaction was rolled back by this error (deadlock, conflict, lock wait timeout).
    pub rolled_back: bool,
    /// A statement tried without waiting for row locks found one held: only the statement was
    /// undone, and it should run again allowed to wait (never sent to a client).
    pub would_block: bool,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERROR {} ({}): {}", self.code, self.state, self.message)
    }
}

impl std::error::Error for SqlError {}

/// Quotes at most 64 bytes of user text for a message.
fn quote(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() <= 64 {
        return s.into_owned();
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

impl SqlError {
    /// An error with `code`, `state` and `message`.
    pub fn new(code: u16, state: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            state,
            message: message.into(),
            rolled_back: false,
            would_block: false,
        }
    }

    /// 1064: a syntax error.
    pub fn syntax(message: impl fmt::Display) -> SqlError {
        SqlError::new(
            1064,
            "42000",
            format!("You have an error in your SQL syntax: {message}"),
        )
    }

    /// 1235: a construct outside the supported subset, named.
    pub fn unsupported(what: impl fmt::Display) -> SqlError {
        SqlError::new(
            1235,
            "42000",
            format!("This version of Riptide doesn't yet support '{what}'"),
        )
    }

    /// 1146: unknown table.
    pub fn no_such_table(db: &str, table: &str) -> SqlError {
        SqlError::new(1146, "42S02", format!("Table '{db}.{table}' doesn't exist"))
    }

    /// 1050: table exists.
    pub fn table_exists(table: &str) -> SqlError {
        SqlError::new(1050, "42S01", format!("Table '{table}' already exists"))
    }

    /// 1049: unknown database.
    pub fn no_such_database(db: &str) -> SqlError {
        SqlError::new(1049, "42000", format!("Unknown database '{db}'"))
    }

    /// 1007: database exists.
    pub fn database_exists(db: &str) -> SqlError {
        SqlError::new(1007, "HY000", format!("Can't create database '{db}'; database exists"))
    }

    /// 1046: no database selected.
    pub fn no_database() -> SqlError {
        SqlError::new(1046, "3D000", "No database selected")
    }

    /// 1054: unknown column.
    pub fn no_such_column(column: &str, context: &str) -> SqlError {
        SqlError::new(1054, "42S22", format!("Unknown column '{column}' in '{context}'"))
    }

    /// 1060: duplicate column name.
    pub fn duplicate_column(column: &str) -> SqlError {
        SqlError::new(1060, "42S21", format!("Duplicate column name '{column}'"))
    }

    /// 1061: duplicate index name.
    pub fn duplicate_index(name: &str) -> SqlError {
        SqlError::new(1061, "42000", format!("Duplicate key name '{name}'"))
    }

    /// 1062: duplicate key.
    pub fn duplicate_key(entry: &str, key: &str) -> SqlError {
        SqlError::new(
            1062,
            "23000",
            format!("Duplicate entry '{}' for key '{key}'", quote(entry.as_bytes())),
        )
    }

    /// 1048: NULL into a NOT NULL column.
    pub fn null_not_allowed(column: &str) -> SqlError {
        SqlError::new(1048, "23000", format!("Column '{column}' cannot be null"))
    }

    /// 1364: no value and no default for a NOT NULL column.
    pub fn no_default(column: &str) -> SqlError {
        SqlError::new(1364, "HY000", format!("Field '{column}' doesn't have a default value"))
    }

    /// 1136: the number of values does not match the columns.
    pub fn value_count(row: usize) -> SqlError {
        SqlError::new(
            1136,
            "21S01",
            format!("Column count doesn't match value count at row {row}"),
        )
    }

    /// 1264: a number out of the column's range.
    pub fn out_of_range(column: &str) -> SqlError {
        SqlError::new(
            1264,
            "22003",
            format!("Out of range value for column '{column}' at row 1"),
        )
    }

    /// 1406: a string longer than the column.
    pub fn data_too_long(column: &str) -> SqlError {
        SqlError::new(1406, "22001", format!("Data too long for column '{column}' at row 1"))
    }

    /// 1366: a value the column's type cannot read.
    pub fn bad_value(what: &str, value: &[u8], column: &str) -> SqlError {
        SqlError::new(
            1366,
            "HY000",
            format!(
                "Incorrect {what} value: '{}' for column '{column}' at row 1",
                quote(value)
            ),
        )
    }

    /// 1210: wrong arguments (prepared statement parameters).
    pub fn wrong_arguments(what: &str) -> SqlError {
        SqlError::new(1210, "HY000", format!("Incorrect arguments to {what}"))
    }

    /// 1243: unknown prepared statement.
    pub fn unknown_statement(id: u32) -> SqlError {
        SqlError::new(
            1243,
            "HY000",
            format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_execute"),
        )
    }

    /// 1193: unknown system variable.
    pub fn unknown_variable(name: &str) -> SqlError {
        SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'"))
    }

    /// 1231: a variable cannot be set to this value.
    pub fn wrong_variable_value(name: &str, value: &str) -> SqlError {
        SqlError::new(
            1231,
            "42000",
            format!(
                "Variable '{name}' can't be set to the value of '{}'",
                quote(value.as_bytes())
            ),
        )
    }

    /// 1105: anything else.
    pub fn other(message: impl Into<String>) -> SqlError {
        SqlError::new(1105, "HY000", message)
    }

    /// Maps an engine error. Conflicts, deadlocks and lock timeouts are marked as having
    /// rolled back the transaction (the session rolls it back before replying).
    pub fn from_engine(e: riptide::Error) -> SqlError {
        use riptide::Error as E;
        let (code, state, message, rolled_back) = match &e {
            E::WriteConflict { .. } => (
                1213,
                "40001",
                format!("Deadlock found when trying to get lock; try restarting transaction ({e})"),
                true,
            ),
            E::Deadlock { .. } => (
                1213,
                "40001",
                format!("Deadlock found when trying to get lock; try restarting transaction ({e})"),
                true,
            ),
            E::LockTimeout { .. } => (
                1205,
                "HY000",
                format!("Lock wait timeout exceeded; try restarting transaction ({e})"),
                true,
            ),
            E::TableNotFound(_) | E::TableDropped(_) => (1146, "42S02", format!("Table doesn't exist ({e})"), false),
            E::KeyTooLarge { .. } => (1071, "42000", format!("Specified key was too long ({e})"), false),
            E::TxnTooLarge { .. } => (1197, "HY000", format!("Transaction too large ({e})"), false),
            E::Closed => (1053, "08S01", "Server shutdown in progress".to_string(), true),
            // MySQL's answer on a read-only replica, which proxies and drivers recognize.
            E::NotLeader { .. } => (
                1290,
                "HY000",
                format!(
                    "The MySQL server is running with the --read-only option so it cannot execute this statement ({e})"
                ),
                true,
            ),
            E::Replication(_) => (1180, "HY000", format!("Got error during COMMIT ({e})"), true),
            E::UnknownXid(_) => (1397, "XAE04", format!("XAER_NOTA: Unknown XID ({e})"), false),
            E::DuplicateXid(_) => (1440, "XAE08", format!("XAER_DUPID: The XID already exists ({e})"), true),
            _ => (1030, "HY000", format!("Got error from storage engine: {e}"), false),
        };
        SqlError {
            code,
            state,
            message,
            rolled_back,
            would_block: false,
        }
    }
}

impl From<riptide::Error> for SqlError {
    fn from(e: riptide::Error) -> Self {
        SqlError::from_engine(e)
    }
}

/// Result of SQL work.
pub type SqlResult<T> = Result<T, SqlError>;
