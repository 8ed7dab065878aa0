//! Parsing: MySQL's executable comments, then sqlparser-rs with its MySQL dialect.
//!
//! Invariant: `/*! ... */` and `/*!NNNNN ... */` comments outside string literals are
//! replaced by their contents (MySQL runs them); every other byte reaches the parser
//! unchanged. A parse error is 1064 with the parser's message.

use crate::sql::error::{SqlError, SqlResult};
use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

/// Replaces executable comments by their contents.
pub fn expand_executable_comments(sql: &str) -> std::borrow::Cow<'_, str> {
    if !sql.contains("/*!") {
        return std::borrow::Cow::Borrowed(sql);
    }
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut quote: Option<u8> = None;
    let mut in_exec_comment = false;
    let mut start = 0;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) => {
                if c == b'\\' && q != b'`' {
                    i += 2;
                    continue;
                }
                if c == q {
                    quote = None;
                }
            }
            None => {
                if c == b'\'' || c == b'"' || c == b'`' {
                    quote = Some(c);
                } else if b[i..].starts_with(b"/*!") {
                    out.push_str(&sql[start..i]);
                    i += 3;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    start = i;
                    in_exec_comment = true;
                    continue;
                } else if in_exec_comment && b[i..].starts_with(b"*/") {
                    out.push_str(&sql[start..i]);
                    out.push(' ');
                    i += 2;
                    start = i;
                    in_exec_comment = false;
                    continue;
                }
            }
        }
        i += 1;
    }
    out.push_str(&sql[start.min(sql.len())..]);
    std::borrow::Cow::Owned(out)
}

/// Parses one or more statements.
pub fn parse(sql: &str) -> SqlResult<Vec<Statement>> {
    let sql = expand_executable_comments(sql);
    Parser::parse_sql(&MySqlDialect {}, &sql).map_err(|e| SqlError::syntax(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_comments_run_and_strings_are_left_alone() {
        assert_eq!(
            expand_executable_comments("CREATE TABLE t (a INT) /*! ENGINE = innodb */ "),
            "CREATE TABLE t (a INT)  ENGINE = innodb   "
        );
        assert_eq!(
            expand_executable_comments("/*!40101 SET NAMES utf8 */"),
            " SET NAMES utf8  "
        );
        assert_eq!(expand_executable_comments("SELECT '/*!x*/'"), "SELECT '/*!x*/'");
        assert_eq!(expand_executable_comments("SELECT 'it\\'s /*!'"), "SELECT 'it\\'s /*!'");
        assert!(parse(
            "CREATE TABLE sbtest1(id INTEGER NOT NULL AUTO_INCREMENT, PRIMARY KEY (id)) /*! ENGINE = innodb */ "
        )
        .is_ok());
        assert_eq!(parse("SELEC 1").unwrap_err().code, 1064);
    }
}
