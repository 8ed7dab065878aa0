//! Prepared statements at the router. The router cannot place `UPDATE t SET k = ? WHERE id = ?`
//! before it has the parameters, so it prepares a statement on a replica only to answer the
//! client's COM_STMT_PREPARE (the replica checks it and describes its parameters and columns),
//! and at each COM_STMT_EXECUTE it binds the parameters into the text to place the statement,
//! then executes it, as a prepared statement, on the partition that holds its rows.
//!
//! Invariants:
//! - The text bound for placement replaces exactly the `?` placeholders the server's own
//!   tokenizer sees (sqlparser's, MySQL dialect), in order, by literals of the values the
//!   server decoded from the same payload: placement sees the keys the replica will use.
//! - What a replica receives is the client's COM_STMT_EXECUTE with the replica's statement id
//!   and the parameter types always included (a client sends them only when they change, and
//!   this replica may not have seen the earlier execute that carried them).

use super::backend::BackendError;
use super::session::{refuse, Answer, Request, RouterSession, ROUTER_ERROR};
use crate::protocol::stmt::{decode_execute, ParamType};
use crate::value::Value;
use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A statement the client prepared through the router.
#[derive(Debug, Clone)]
pub(super) struct RouterStatement {
    /// Its text.
    pub sql: String,
    /// Its parameter count (as the replica that prepared it counted).
    pub params: usize,
    /// The parameter types the client bound last.
    pub types: Vec<ParamType>,
    /// Parameter values sent by COM_STMT_SEND_LONG_DATA, by parameter.
    pub long_data: HashMap<u16, Vec<u8>>,
}

/// A literal that the server parses back to `v` (as the key placement compares it).
fn literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Double(d) if d.is_finite() => format!("{d:e}"),
        Value::Double(_) => "NULL".into(),
        Value::Decimal(d) => d.to_string(),
        Value::DateTime(t) => format!("'{t}'"),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) if !s.contains('\\') => format!("'{}'", s.replace('\'', "''")),
            _ => {
                let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
                format!("X'{hex}'")
            }
        },
    }
}

/// The byte offset in `sql` of a tokenizer location (1-based line and character).
pub(super) fn byte_offset(sql: &str, at: sqlparser::tokenizer::Location) -> Option<usize> {
    let line = usize::try_from(at.line).ok()?.checked_sub(1)?;
    let col = usize::try_from(at.column).ok()?.checked_sub(1)?;
    let start = if line == 0 {
        0
    } else {
        sql.match_indices('\n').nth(line - 1)?.0 + 1
    };
    let line_text = sql[start..].split('\n').next().unwrap_or("");
    line_text
        .char_indices()
        .nth(col)
        .map(|(i, _)| start + i)
        // Just past the line's last character (where a token that ends the line ends).
        .or_else(|| (line_text.chars().count() == col).then_some(start + line_text.len()))
}

/// `sql` with each `?` placeholder replaced by its parameter's literal.
pub(super) fn bind_text(sql: &str, params: &[Value]) -> Result<String, String> {
    let sql = crate::sql::parse::expand_executable_comments(sql);
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, &sql)
        .tokenize_with_location()
        .map_err(|e| e.to_string())?;
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut copied = 0usize;
    let mut next = 0usize;
    for t in &tokens {
        if !matches!(&t.token, Token::Placeholder(p) if p == "?") {
            continue;
        }
        let at = byte_offset(&sql, t.span.start)
            .filter(|&i| sql[i..].starts_with('?'))
            .ok_or("a placeholder the router cannot find in the text")?;
        let value = params.get(next).ok_or("more placeholders than parameters")?;
        out.push_str(&sql[copied..at]);
        out.push_str(&literal(value));
        copied = at + 1;
        next += 1;
    }
    if next != params.len() {
        return Err(format!("{next} placeholders for {} parameters", params.len()));
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

impl RouterStatement {
    /// Decodes a COM_STMT_EXECUTE payload's parameters (saving the types it sends).
    pub(super) fn decode(&mut self, payload: &[u8]) -> Result<Vec<Value>, String> {
        decode_execute(payload, self.params, &mut self.types, &mut self.long_data)
            .map(|r| r.params)
            .map_err(|e| e.to_string())
    }

    /// The payload for a replica that prepared this statement as `backend_id` (after
    /// [`RouterStatement::decode`] saved the types).
    pub(super) fn rewrite(&self, payload: &[u8], backend_id: u32) -> Result<Vec<u8>, String> {
        let short = || "a truncated COM_STMT_EXECUTE".to_string();
        let mut out = Vec::with_capacity(payload.len() + 2 * self.params);
        out.extend_from_slice(&backend_id.to_le_bytes());
        let head = payload.get(4..9).ok_or_else(short)?; // flags, iteration count
        out.extend_from_slice(head);
        if self.params == 0 {
            return Ok(out);
        }
        let bitmap = self.params.div_ceil(8);
        out.extend_from_slice(payload.get(9..9 + bitmap).ok_or_else(short)?);
        let bound = *payload.get(9 + bitmap).ok_or_else(short)?;
        let mut values = 9 + bitmap + 1;
        if bound != 0 {
            values += 2 * self.params;
        }
        out.push(1);
        for t in &self.types {
            out.push(t.field_type);
            out.push(if t.unsigned { 0x80 } else { 0 });
        }
        out.extend_from_slice(payload.get(values..).ok_or_else(short)?);
        Ok(out)
    }
}

impl RouterSession {
    /// COM_STMT_PREPARE: checked and described by one replica (the transaction's partition,
    /// or the first), its reply relayed under the router's statement id.
    pub(super) async fn prepare(&mut self, sql: &str) -> Answer {
        if self.statements.len() >= MAX_STATEMENTS {
            return Answer::Error(1461, "42000", format!("more than {MAX_STATEMENTS} prepared statements"));
        }
        let p = self.pinned.unwrap_or(0);
        let deadline = Instant::now() + self.shared.config.leader_wait;
        let prepared = loop {
            let outcome = match self.backend(p).await {
                Ok(b) => b.prepare(sql).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(Ok(prepared)) => break prepared,
                Ok(Err(reply)) => return Answer::Reply(reply),
                Err(e) if Instant::now() < deadline && !matches!(e, BackendError::Login { code: 1045, .. }) => {
                    self.backends[p] = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => {
                    self.backends[p] = None;
                    return Answer::Error(ROUTER_ERROR, "HY000", format!("partition {p}: {e}"));
                }
            }
        };
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        let id = self.next_statement;
        if let Some(b) = self.backends[p].as_mut() {
            b.statements.insert(id, prepared.id);
        }
        self.statements.insert(
            id,
            RouterStatement {
                sql: sql.to_string(),
                params: usize::from(prepared.params),
                types: Vec::new(),
                long_data: Default::default(),
            },
        );
        let mut payloads = prepared.payloads;
        payloads[0][1..5].copy_from_slice(&id.to_le_bytes());
        Answer::Payloads(payloads)
    }

    /// COM_STMT_EXECUTE: the parameters bound into the text to place it, then executed as a
    /// prepared statement where it belongs.
    pub(super) async fn execute(&mut self, payload: &[u8]) -> Answer {
        let Ok(id) = crate::protocol::execute_stmt_id(payload) else {
            return Answer::Error(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute".into());
        };
        let Some(stmt) = self.statements.get_mut(&id) else {
            return Answer::Error(
                1243,
                "HY000",
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_execute"),
            );
        };
        if !stmt.long_data.is_empty() {
            return refuse("COM_STMT_SEND_LONG_DATA through the router");
        }
        let bound = stmt
            .decode(payload)
            .and_then(|params| super::prepared::bind_text(&stmt.sql, &params));
        let text = match bound {
            Ok(t) => t,
            Err(e) => {
                return Answer::Error(
                    1210,
                    "HY000",
                    format!("Incorrect arguments to mysqld_stmt_execute: {e}"),
                )
            }
        };
        let parsed = match crate::sql::parse::parse(&text) {
            Ok(mut s) if s.len() == 1 => s.remove(0),
            Ok(_) => return Answer::Error(1064, "42000", "not one statement".into()),
            Err(e) => return Answer::Error(e.code, e.state, e.message),
        };
        self.run(&text, Request::Execute { id, payload }, &parsed).await
    }

    /// COM_STMT_CLOSE: forgotten here and on every replica that prepared it.
    pub(super) async fn close_statement(&mut self, id: u32) {
        if self.statements.remove(&id).is_none() {
            return;
        }
        for slot in self.backends.iter_mut() {
            let close = match slot.as_mut() {
                Some(b) => match b.statements.remove(&id) {
                    Some(on_replica) => b.close_statement(on_replica).await.is_err(),
                    None => false,
                },
                None => false,
            };
            if close {
                *slot = None;
            }
        }
    }

    /// COM_STMT_SEND_LONG_DATA: kept (an execute that needs it is refused).
    pub(super) fn long_data(&mut self, id: u32, param: u16, data: &[u8]) {
        if let Some(s) = self.statements.get_mut(&id) {
            if usize::from(param) < s.params {
                s.long_data.entry(param).or_default().extend_from_slice(data);
            }
        }
    }

    /// COM_STMT_RESET: long data dropped.
    pub(super) fn reset_statement(&mut self, id: u32) -> Answer {
        match self.statements.get_mut(&id) {
            Some(s) => {
                s.long_data.clear();
                Answer::Ok
            }
            None => Answer::Error(
                1243,
                "HY000",
                format!("Unknown prepared statement handler ({id}) given to mysqld_stmt_reset"),
            ),
        }
    }
}

/// Prepared statements one client may hold (MySQL's max_prepared_stmt_count is per server).
const MAX_STATEMENTS: usize = 16_382;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::FieldType;

    #[test]
    fn placeholders_are_bound_where_the_tokenizer_sees_them() {
        let text = bind_text(
            "SELECT '?', `a?` FROM t -- ?\nWHERE id = ? AND c = ? /* ? */ AND d = ?",
            &[Value::Int(-5), Value::str("it's"), Value::Null],
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT '?', `a?` FROM t -- ?\nWHERE id = -5 AND c = 'it''s' /* ? */ AND d = NULL"
        );
        assert_eq!(
            bind_text(
                "INSERT INTO t VALUES (?, 'é', ?)",
                &[Value::UInt(u64::MAX), Value::Bytes(vec![0xff, b'\\'])]
            )
            .unwrap(),
            format!("INSERT INTO t VALUES ({}, 'é', X'FF5C')", u64::MAX)
        );
        assert!(bind_text("SELECT ?", &[]).is_err());
        assert!(bind_text("SELECT 1", &[Value::Int(1)]).is_err());
        // A bound literal parses back to the same key.
        let text = bind_text("SELECT 1 FROM t WHERE id = ?", &[Value::Double(2.5)]).unwrap();
        assert!(crate::sql::parse::parse(&text).is_ok(), "{text}");
    }

    #[test]
    fn an_execute_is_rewritten_with_its_types() {
        let mut stmt = RouterStatement {
            sql: "SELECT ? + ?".into(),
            params: 2,
            types: Vec::new(),
            long_data: HashMap::new(),
        };
        // First execute: types sent.
        let mut first = vec![7, 0, 0, 0, 0, 1, 0, 0, 0, 0b10, 1];
        first.extend_from_slice(&[FieldType::LongLong as u8, 0, FieldType::VarString as u8, 0]);
        first.extend_from_slice(&5i64.to_le_bytes());
        assert_eq!(stmt.decode(&first).unwrap(), vec![Value::Int(5), Value::Null]);
        let mut expected = vec![9, 0, 0, 0];
        expected.extend_from_slice(&first[4..]);
        assert_eq!(stmt.rewrite(&first, 9).unwrap(), expected);
        // Later execute: no types; the rewrite adds them.
        let mut later = vec![7, 0, 0, 0, 0, 1, 0, 0, 0, 0b10, 0];
        later.extend_from_slice(&6i64.to_le_bytes());
        assert_eq!(stmt.decode(&later).unwrap(), vec![Value::Int(6), Value::Null]);
        let rewritten = stmt.rewrite(&later, 9).unwrap();
        let mut expected = vec![9, 0, 0, 0, 0, 1, 0, 0, 0, 0b10, 1];
        expected.extend_from_slice(&[FieldType::LongLong as u8, 0, FieldType::VarString as u8, 0]);
        expected.extend_from_slice(&6i64.to_le_bytes());
        assert_eq!(rewritten, expected);
        assert!(stmt.rewrite(&later[..6], 9).is_err());
    }
}
