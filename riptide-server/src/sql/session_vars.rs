//! What a statement may ask of its session while it is bound: the current database, ids,
//! and the system variables clients read (`@@version_comment`, `@@autocommit`, ...).
//!
//! Invariant: every variable here has one fixed meaning; unknown names are 1193 errors, not
//! NULLs, so a client never acts on a made-up value.

use crate::value::{DateTime, Value};
use riptide::Isolation;

/// The server's version string (MySQL 5.7 protocol level, so clients use
/// mysql_native_password).
pub const SERVER_VERSION: &str = "5.7.99-Riptide";
/// `@@version_comment`.
pub const VERSION_COMMENT: &str = "Riptide (X-Engine-style LSM storage)";

/// A session as seen by the binder.
#[derive(Debug, Clone)]
pub struct SessionView {
    /// Current database.
    pub db: Option<String>,
    /// The logged-in user.
    pub user: String,
    /// Connection id.
    pub connection_id: u32,
    /// LAST_INSERT_ID().
    pub last_insert_id: u64,
    /// Autocommit on.
    pub autocommit: bool,
    /// Isolation of the session's next transactions.
    pub isolation: Isolation,
    /// The statement's start time (NOW()).
    pub now: DateTime,
    /// Server version.
    pub version: String,
    /// max_allowed_packet.
    pub max_allowed_packet: usize,
    /// Row lock wait timeout in seconds.
    pub lock_wait_timeout: u64,
    /// The server can prepare XA branches (it is a replica of a partition):
    /// `@@riptide_xa_prepare`, which `riptide router` asks before it makes a partition a
    /// participant of a cross-partition transaction.
    pub xa_prepare: bool,
}

/// The isolation level's MySQL name.
pub fn isolation_name(i: Isolation) -> &'static str {
    match i {
        Isolation::ReadCommitted => "READ-COMMITTED",
        _ => "REPEATABLE-READ",
    }
}

/// Names of the variables `SHOW VARIABLES` lists.
pub const VARIABLES: &[&str] = &[
    "autocommit",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "character_set_server",
    "collation_connection",
    "collation_server",
    "innodb_lock_wait_timeout",
    "interactive_timeout",
    "lower_case_table_names",
    "max_allowed_packet",
    "net_write_timeout",
    "sql_mode",
    "system_time_zone",
    "time_zone",
    "transaction_isolation",
    "tx_isolation",
    "version",
    "version_comment",
    "wait_timeout",
];

/// The value of a system variable, by name (case-insensitive).
pub fn system_variable(name: &str, s: &SessionView) -> Option<Value> {
    let n = name.to_ascii_lowercase();
    Some(match n.as_str() {
        "version_comment" => Value::str(VERSION_COMMENT),
        "version" => Value::str(&s.version),
        "autocommit" => Value::Int(s.autocommit as i64),
        "transaction_isolation" | "tx_isolation" => Value::str(isolation_name(s.isolation)),
        "max_allowed_packet" => Value::Int(s.max_allowed_packet as i64),
        "innodb_lock_wait_timeout" | "lock_wait_timeout" => Value::Int(s.lock_wait_timeout as i64),
        "character_set_client" | "character_set_connection" | "character_set_results" | "character_set_server" => {
            Value::str("utf8mb4")
        }
        "collation_connection" | "collation_server" => Value::str("utf8mb4_bin"),
        "sql_mode" => Value::str("STRICT_TRANS_TABLES"),
        "time_zone" => Value::str("SYSTEM"),
        "system_time_zone" => Value::str("UTC"),
        "lower_case_table_names" => Value::Int(0),
        "wait_timeout" | "interactive_timeout" => Value::Int(28800),
        "net_write_timeout" => Value::Int(60),
        "sql_auto_is_null" | "sql_safe_updates" => Value::Int(0),
        "session_track_schema" | "session_track_state_change" => Value::str("OFF"),
        "warning_count" | "error_count" => Value::Int(0),
        "license" => Value::str("Apache-2.0"),
        "storage_engine" | "default_storage_engine" => Value::str("Riptide"),
        "port" => Value::Int(3306),
        "read_only" | "transaction_read_only" | "tx_read_only" => Value::Int(0),
        "identity" | "last_insert_id" => Value::UInt(s.last_insert_id),
        "riptide_xa_prepare" => Value::Int(i64::from(s.xa_prepare)),
        _ => return None,
    })
}
