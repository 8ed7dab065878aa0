//! Numbers of the MySQL client/server protocol: capability flags, command bytes, column
//! types and flags, server status flags, character sets, error codes and their SQLSTATEs.
//!
//! Invariants: every value here is the one the protocol documentation gives; nothing here
//! allocates or does I/O. [`FieldType::try_from`] accepts exactly the type bytes a client may
//! send in COM_STMT_EXECUTE and rejects every other byte.

use super::ProtocolError;

/// Capability flags (`CLIENT_*`), exchanged in the greeting and the handshake response.
pub mod capability {
    /// New, more secure passwords (set by every client; a server that clears it is MariaDB).
    pub const CLIENT_LONG_PASSWORD: u32 = 1;
    /// Affected rows count the rows found (matched), not the rows changed.
    pub const CLIENT_FOUND_ROWS: u32 = 1 << 1;
    /// All column flags are sent.
    pub const CLIENT_LONG_FLAG: u32 = 1 << 2;
    /// A database name may be given in the handshake response.
    pub const CLIENT_CONNECT_WITH_DB: u32 = 1 << 3;
    /// `db.table.column` is not allowed.
    pub const CLIENT_NO_SCHEMA: u32 = 1 << 4;
    /// The compressed protocol (not offered).
    pub const CLIENT_COMPRESS: u32 = 1 << 5;
    /// ODBC client (unused).
    pub const CLIENT_ODBC: u32 = 1 << 6;
    /// LOAD DATA LOCAL (not offered).
    pub const CLIENT_LOCAL_FILES: u32 = 1 << 7;
    /// The parser ignores spaces before `(`.
    pub const CLIENT_IGNORE_SPACE: u32 = 1 << 8;
    /// The 4.1 protocol (required by this server).
    pub const CLIENT_PROTOCOL_41: u32 = 1 << 9;
    /// Interactive client (wait timeout).
    pub const CLIENT_INTERACTIVE: u32 = 1 << 10;
    /// TLS (not offered).
    pub const CLIENT_SSL: u32 = 1 << 11;
    /// Do not raise SIGPIPE (client side only).
    pub const CLIENT_IGNORE_SIGPIPE: u32 = 1 << 12;
    /// The status flags in OK and EOF packets carry transaction state.
    pub const CLIENT_TRANSACTIONS: u32 = 1 << 13;
    /// Old flag for the 4.1 protocol.
    pub const CLIENT_RESERVED: u32 = 1 << 14;
    /// 4.1 authentication: a length-prefixed auth response (`CLIENT_RESERVED2`).
    pub const CLIENT_SECURE_CONNECTION: u32 = 1 << 15;
    /// Several statements in one COM_QUERY (not offered).
    pub const CLIENT_MULTI_STATEMENTS: u32 = 1 << 16;
    /// Several result sets for one COM_QUERY.
    pub const CLIENT_MULTI_RESULTS: u32 = 1 << 17;
    /// Several result sets for one COM_STMT_EXECUTE.
    pub const CLIENT_PS_MULTI_RESULTS: u32 = 1 << 18;
    /// Authentication plugins are named in the handshake.
    pub const CLIENT_PLUGIN_AUTH: u32 = 1 << 19;
    /// Connection attributes follow the handshake response.
    pub const CLIENT_CONNECT_ATTRS: u32 = 1 << 20;
    /// The auth response is length-encoded (may exceed 255 bytes).
    pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
    /// The client can handle expired passwords.
    pub const CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS: u32 = 1 << 22;
    /// Session state tracking in OK packets (not offered).
    pub const CLIENT_SESSION_TRACK: u32 = 1 << 23;
    /// OK packets replace EOF packets (not offered).
    pub const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
    /// Result set metadata may be omitted (not offered).
    pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u32 = 1 << 25;
    /// zstd compression (not offered).
    pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u32 = 1 << 26;
    /// Query attributes in COM_QUERY and COM_STMT_EXECUTE (not offered).
    pub const CLIENT_QUERY_ATTRIBUTES: u32 = 1 << 27;
    /// Multi-factor authentication (not offered).
    pub const CLIENT_MULTI_FACTOR_AUTHENTICATION: u32 = 1 << 28;
    /// Verify the server's TLS certificate (client side only).
    pub const CLIENT_SSL_VERIFY_SERVER_CERT: u32 = 1 << 30;
    /// Keep client options after a failed connect (client side only).
    pub const CLIENT_REMEMBER_OPTIONS: u32 = 1 << 31;

    /// What this server offers in its greeting. Not SSL, COMPRESS, MULTI_STATEMENTS,
    /// SESSION_TRACK or DEPRECATE_EOF: result sets end with EOF packets.
    pub const SERVER_CAPABILITIES: u32 = CLIENT_LONG_PASSWORD
        | CLIENT_FOUND_ROWS
        | CLIENT_LONG_FLAG
        | CLIENT_CONNECT_WITH_DB
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_MULTI_RESULTS
        | CLIENT_PS_MULTI_RESULTS
        | CLIENT_PLUGIN_AUTH
        | CLIENT_CONNECT_ATTRS
        | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
}

/// Command bytes: the first byte of every packet a client sends after the handshake.
pub mod command {
    /// Internal server state; never sent by clients.
    pub const COM_SLEEP: u8 = 0x00;
    /// Close the connection.
    pub const COM_QUIT: u8 = 0x01;
    /// Change the default database.
    pub const COM_INIT_DB: u8 = 0x02;
    /// A text-protocol query.
    pub const COM_QUERY: u8 = 0x03;
    /// The columns of a table (deprecated).
    pub const COM_FIELD_LIST: u8 = 0x04;
    /// Server statistics string.
    pub const COM_STATISTICS: u8 = 0x09;
    /// Check the connection.
    pub const COM_PING: u8 = 0x0e;
    /// Re-authenticate as another user.
    pub const COM_CHANGE_USER: u8 = 0x11;
    /// Prepare a statement.
    pub const COM_STMT_PREPARE: u8 = 0x16;
    /// Execute a prepared statement.
    pub const COM_STMT_EXECUTE: u8 = 0x17;
    /// Send a piece of a parameter's value ahead of COM_STMT_EXECUTE.
    pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
    /// Deallocate a prepared statement (no reply).
    pub const COM_STMT_CLOSE: u8 = 0x19;
    /// Drop a statement's long data and cursor.
    pub const COM_STMT_RESET: u8 = 0x1a;
    /// Set a connection option (multi statements on/off).
    pub const COM_SET_OPTION: u8 = 0x1b;
    /// Fetch rows from a cursor.
    pub const COM_STMT_FETCH: u8 = 0x1c;
    /// Reset the session state without re-authenticating.
    pub const COM_RESET_CONNECTION: u8 = 0x1f;
}

/// Column definition flags (`*_FLAG`).
pub mod column_flag {
    /// The column cannot be NULL.
    pub const NOT_NULL: u16 = 1;
    /// Part of the primary key.
    pub const PRI_KEY: u16 = 2;
    /// Part of a unique key.
    pub const UNIQUE_KEY: u16 = 4;
    /// Part of a non-unique key.
    pub const MULTIPLE_KEY: u16 = 8;
    /// A BLOB or TEXT column.
    pub const BLOB: u16 = 16;
    /// An unsigned number.
    pub const UNSIGNED: u16 = 32;
    /// ZEROFILL.
    pub const ZEROFILL: u16 = 64;
    /// Binary collation (numbers, dates, blobs).
    pub const BINARY: u16 = 128;
    /// An ENUM.
    pub const ENUM: u16 = 256;
    /// AUTO_INCREMENT.
    pub const AUTO_INCREMENT: u16 = 512;
    /// A TIMESTAMP.
    pub const TIMESTAMP: u16 = 1024;
    /// A SET.
    pub const SET: u16 = 2048;
    /// No default value.
    pub const NO_DEFAULT_VALUE: u16 = 4096;
    /// ON UPDATE NOW().
    pub const ON_UPDATE_NOW: u16 = 8192;
    /// A numeric column.
    pub const NUM: u16 = 32768;
}

/// Server status flags (`SERVER_*`) in OK and EOF packets.
pub mod status {
    /// A transaction is open.
    pub const SERVER_STATUS_IN_TRANS: u16 = 1;
    /// Autocommit is on.
    pub const SERVER_STATUS_AUTOCOMMIT: u16 = 2;
    /// Another result set follows.
    pub const SERVER_MORE_RESULTS_EXISTS: u16 = 8;
    /// The query used no good index.
    pub const SERVER_QUERY_NO_GOOD_INDEX_USED: u16 = 16;
    /// The query used no index.
    pub const SERVER_QUERY_NO_INDEX_USED: u16 = 32;
    /// A read-only cursor is open.
    pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 64;
    /// The cursor's last row was sent.
    pub const SERVER_STATUS_LAST_ROW_SENT: u16 = 128;
    /// The current database was dropped.
    pub const SERVER_STATUS_DB_DROPPED: u16 = 256;
    /// NO_BACKSLASH_ESCAPES sql_mode is on.
    pub const SERVER_STATUS_NO_BACKSLASH_ESCAPES: u16 = 512;
    /// A prepared statement's metadata changed.
    pub const SERVER_STATUS_METADATA_CHANGED: u16 = 1024;
    /// The query was slow.
    pub const SERVER_QUERY_WAS_SLOW: u16 = 2048;
    /// The result set holds OUT parameters.
    pub const SERVER_PS_OUT_PARAMS: u16 = 4096;
    /// A read-only transaction is open.
    pub const SERVER_STATUS_IN_TRANS_READONLY: u16 = 8192;
    /// Session state changed (with SESSION_TRACK).
    pub const SERVER_SESSION_STATE_CHANGED: u16 = 16384;
}

/// Character set / collation ids.
pub mod charset {
    /// `utf8mb4_general_ci`: the server's default, announced in the greeting.
    pub const UTF8MB4_GENERAL_CI: u16 = 45;
    /// `binary`: numbers, dates and blobs.
    pub const BINARY: u16 = 63;
    /// `utf8mb4_0900_ai_ci` (MySQL 8's default collation).
    pub const UTF8MB4_0900_AI_CI: u16 = 255;
}

/// Error codes (`ER_*`); [`sqlstate`](error::sqlstate) gives each one's SQLSTATE.
pub mod error {
    /// Can't create database; database exists.
    pub const ER_DB_CREATE_EXISTS: u16 = 1007;
    /// Can't drop database; database doesn't exist.
    pub const ER_DB_DROP_EXISTS: u16 = 1008;
    /// Got error from the storage engine.
    pub const ER_GET_ERRNO: u16 = 1030;
    /// Too many connections.
    pub const ER_CON_COUNT_ERROR: u16 = 1040;
    /// Bad handshake.
    pub const ER_HANDSHAKE_ERROR: u16 = 1043;
    /// Access denied for user.
    pub const ER_ACCESS_DENIED_ERROR: u16 = 1045;
    /// No database selected.
    pub const ER_NO_DB_ERROR: u16 = 1046;
    /// Unknown command.
    pub const ER_UNKNOWN_COM_ERROR: u16 = 1047;
    /// Column cannot be null.
    pub const ER_BAD_NULL_ERROR: u16 = 1048;
    /// Unknown database.
    pub const ER_BAD_DB_ERROR: u16 = 1049;
    /// Table already exists.
    pub const ER_TABLE_EXISTS_ERROR: u16 = 1050;
    /// Unknown table (DROP TABLE).
    pub const ER_BAD_TABLE_ERROR: u16 = 1051;
    /// Column is ambiguous.
    pub const ER_NON_UNIQ_ERROR: u16 = 1052;
    /// Server shutdown in progress.
    pub const ER_SERVER_SHUTDOWN: u16 = 1053;
    /// Unknown column.
    pub const ER_BAD_FIELD_ERROR: u16 = 1054;
    /// Duplicate column name.
    pub const ER_DUP_FIELDNAME: u16 = 1060;
    /// Duplicate key name.
    pub const ER_DUP_KEYNAME: u16 = 1061;
    /// Duplicate entry for key.
    pub const ER_DUP_ENTRY: u16 = 1062;
    /// SQL syntax error.
    pub const ER_PARSE_ERROR: u16 = 1064;
    /// Query was empty.
    pub const ER_EMPTY_QUERY: u16 = 1065;
    /// Multiple primary keys defined.
    pub const ER_MULTIPLE_PRI_KEY: u16 = 1068;
    /// Unknown error.
    pub const ER_UNKNOWN_ERROR: u16 = 1105;
    /// Unknown table in a multi-table statement.
    pub const ER_UNKNOWN_TABLE: u16 = 1109;
    /// Column count doesn't match value count.
    pub const ER_WRONG_VALUE_COUNT_ON_ROW: u16 = 1136;
    /// Table doesn't exist.
    pub const ER_NO_SUCH_TABLE: u16 = 1146;
    /// Syntax error.
    pub const ER_SYNTAX_ERROR: u16 = 1149;
    /// Got a packet bigger than max_allowed_packet.
    pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
    /// Got packets out of order.
    pub const ER_NET_PACKETS_OUT_OF_ORDER: u16 = 1156;
    /// Error during commit.
    pub const ER_ERROR_DURING_COMMIT: u16 = 1180;
    /// Unknown system variable.
    pub const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
    /// Lock wait timeout exceeded.
    pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// Incorrect arguments.
    pub const ER_WRONG_ARGUMENTS: u16 = 1210;
    /// Deadlock found; try restarting the transaction.
    pub const ER_LOCK_DEADLOCK: u16 = 1213;
    /// This version doesn't yet support the feature.
    pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
    /// Unknown prepared statement handler.
    pub const ER_UNKNOWN_STMT_HANDLER: u16 = 1243;
    /// Out of range value for column.
    pub const ER_WARN_DATA_OUT_OF_RANGE: u16 = 1264;
    /// Truncated incorrect value.
    pub const ER_TRUNCATED_WRONG_VALUE: u16 = 1292;
    /// The command is not supported in the prepared statement protocol.
    pub const ER_UNSUPPORTED_PS: u16 = 1295;
    /// Query execution was interrupted.
    pub const ER_QUERY_INTERRUPTED: u16 = 1317;
    /// Division by zero.
    pub const ER_DIVISION_BY_ZERO: u16 = 1365;
    /// Incorrect value for column.
    pub const ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: u16 = 1366;
    /// Data too long for column.
    pub const ER_DATA_TOO_LONG: u16 = 1406;
    /// Too many prepared statements.
    pub const ER_MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;
    /// Value out of range.
    pub const ER_DATA_OUT_OF_RANGE: u16 = 1690;
    /// Statement not allowed in a read-only transaction.
    pub const ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: u16 = 1792;
    /// Maximum statement execution time exceeded.
    pub const ER_QUERY_TIMEOUT: u16 = 3024;

    /// The SQLSTATE of an error code (`HY000` for codes this module does not list).
    pub fn sqlstate(code: u16) -> &'static str {
        match code {
            ER_ACCESS_DENIED_ERROR => "28000",
            ER_NO_DB_ERROR => "3D000",
            ER_CON_COUNT_ERROR => "08004",
            ER_HANDSHAKE_ERROR
            | ER_UNKNOWN_COM_ERROR
            | ER_SERVER_SHUTDOWN
            | ER_NET_PACKET_TOO_LARGE
            | ER_NET_PACKETS_OUT_OF_ORDER => "08S01",
            ER_BAD_NULL_ERROR | ER_NON_UNIQ_ERROR | ER_DUP_ENTRY => "23000",
            ER_BAD_DB_ERROR
            | ER_DUP_KEYNAME
            | ER_PARSE_ERROR
            | ER_EMPTY_QUERY
            | ER_MULTIPLE_PRI_KEY
            | ER_SYNTAX_ERROR
            | ER_NOT_SUPPORTED_YET
            | ER_MAX_PREPARED_STMT_COUNT_REACHED => "42000",
            ER_TABLE_EXISTS_ERROR => "42S01",
            ER_BAD_TABLE_ERROR | ER_UNKNOWN_TABLE | ER_NO_SUCH_TABLE => "42S02",
            ER_BAD_FIELD_ERROR => "42S22",
            ER_DUP_FIELDNAME => "42S21",
            ER_WRONG_VALUE_COUNT_ON_ROW => "21S01",
            ER_LOCK_DEADLOCK => "40001",
            ER_WARN_DATA_OUT_OF_RANGE | ER_DATA_OUT_OF_RANGE => "22003",
            ER_TRUNCATED_WRONG_VALUE => "22007",
            ER_DIVISION_BY_ZERO => "22012",
            ER_DATA_TOO_LONG => "22001",
            ER_QUERY_INTERRUPTED => "70100",
            ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION => "25006",
            _ => "HY000",
        }
    }
}

/// A column or parameter type (`MYSQL_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FieldType {
    /// DECIMAL (old; parameters only).
    Decimal = 0,
    /// TINYINT: 1 byte in the binary protocol.
    Tiny = 1,
    /// SMALLINT: 2 bytes.
    Short = 2,
    /// INT: 4 bytes.
    Long = 3,
    /// FLOAT: 4-byte IEEE 754.
    Float = 4,
    /// DOUBLE: 8-byte IEEE 754.
    Double = 5,
    /// The NULL type: no bytes.
    Null = 6,
    /// TIMESTAMP: like DATETIME on the wire.
    Timestamp = 7,
    /// BIGINT: 8 bytes.
    LongLong = 8,
    /// MEDIUMINT: 4 bytes on the wire.
    Int24 = 9,
    /// DATE.
    Date = 10,
    /// TIME.
    Time = 11,
    /// DATETIME.
    DateTime = 12,
    /// YEAR: 2 bytes.
    Year = 13,
    /// VARCHAR (as a parameter type).
    VarChar = 15,
    /// BIT (parameters only).
    Bit = 16,
    /// JSON (parameters only).
    Json = 245,
    /// DECIMAL: a length-encoded decimal string.
    NewDecimal = 246,
    /// ENUM (parameters only).
    Enum = 247,
    /// SET (parameters only).
    Set = 248,
    /// TINYBLOB (parameters only).
    TinyBlob = 249,
    /// MEDIUMBLOB (parameters only).
    MediumBlob = 250,
    /// LONGBLOB (parameters only).
    LongBlob = 251,
    /// BLOB and TEXT.
    Blob = 252,
    /// VARCHAR and VARBINARY.
    VarString = 253,
    /// CHAR and BINARY.
    String = 254,
    /// GEOMETRY (parameters only).
    Geometry = 255,
}

impl FieldType {
    /// True for types whose binary-protocol value is a length-encoded string.
    pub fn is_string_like(self) -> bool {
        use FieldType::*;
        matches!(
            self,
            Decimal
                | NewDecimal
                | VarChar
                | Bit
                | Json
                | Enum
                | Set
                | TinyBlob
                | MediumBlob
                | LongBlob
                | Blob
                | VarString
                | String
                | Geometry
        )
    }
}

impl TryFrom<u8> for FieldType {
    type Error = ProtocolError;

    /// The type of a type byte; `Malformed` for a byte that names no wire type.
    fn try_from(b: u8) -> Result<FieldType, ProtocolError> {
        use FieldType::*;
        Ok(match b {
            0 => Decimal,
            1 => Tiny,
            2 => Short,
            3 => Long,
            4 => Float,
            5 => Double,
            6 => Null,
            7 => Timestamp,
            8 => LongLong,
            9 => Int24,
            10 => Date,
            11 => Time,
            12 => DateTime,
            13 => Year,
            15 => VarChar,
            16 => Bit,
            245 => Json,
            246 => NewDecimal,
            247 => Enum,
            248 => Set,
            249 => TinyBlob,
            250 => MediumBlob,
            251 => LongBlob,
            252 => Blob,
            253 => VarString,
            254 => String,
            255 => Geometry,
            _ => return Err(super::malformed(format!("unknown field type {b}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_types_round_trip_and_unknown_bytes_fail() {
        let mut known = 0;
        for b in 0..=255u8 {
            if let Ok(t) = FieldType::try_from(b) {
                assert_eq!(t as u8, b);
                known += 1;
            }
        }
        assert_eq!(known, 27);
        assert!(FieldType::try_from(14).is_err());
        assert!(FieldType::try_from(17).is_err());
        assert!(FieldType::try_from(244).is_err());
    }

    #[test]
    fn capabilities_and_states() {
        use capability::*;
        for off in [
            CLIENT_SSL,
            CLIENT_COMPRESS,
            CLIENT_DEPRECATE_EOF,
            CLIENT_MULTI_STATEMENTS,
            CLIENT_SESSION_TRACK,
        ] {
            assert_eq!(SERVER_CAPABILITIES & off, 0);
        }
        assert_eq!(
            SERVER_CAPABILITIES & CLIENT_LONG_PASSWORD,
            1,
            "MariaDB-extension byte stays 0"
        );
        assert_eq!(error::sqlstate(error::ER_ACCESS_DENIED_ERROR), "28000");
        assert_eq!(error::sqlstate(error::ER_NET_PACKET_TOO_LARGE), "08S01");
        assert_eq!(error::sqlstate(9999), "HY000");
    }
}
