//! MySQL's XA statements (two-phase commit driven by a client or by `riptide router` as the
//! coordinator), parsed by hand: sqlparser-rs does not know them.
//!
//! ```text
//! XA {START|BEGIN} xid [JOIN|RESUME]     XA END xid [SUSPEND [FOR MIGRATE]]
//! XA PREPARE xid                          XA COMMIT xid [ONE PHASE]
//! XA ROLLBACK xid                         XA RECOVER [CONVERT XID]
//! xid: gtrid [, bqual [, formatID]]       (strings of at most 64 bytes, X'..' or 0x.. hex
//!                                          literals; formatID an integer, default 1)
//! ```
//!
//! Invariants:
//! - [`parse_xa`] answers `None` for any text that does not start with the keyword `XA`, so
//!   every other statement reaches the SQL parser unchanged; text that starts with it gets a
//!   statement or a 1064 naming what is wrong, never a panic.
//! - An [`Xid`]'s engine id ([`Xid::to_bytes`]) is injective and at most 134 bytes (within
//!   `riptide::MAX_XID_BYTES`); [`Xid::from_bytes`] inverts it.

use crate::sql::error::{SqlError, SqlResult};

/// Longest gtrid and bqual (MySQL's limits).
pub const MAX_XID_PART: usize = 64;

/// A global transaction branch id: MySQL's (formatID, gtrid, bqual).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    /// The format id (1 unless given).
    pub format_id: i32,
    /// The global transaction id.
    pub gtrid: Vec<u8>,
    /// The branch qualifier.
    pub bqual: Vec<u8>,
}

impl Xid {
    /// The engine's id: gtrid length, bqual length, format id (big-endian), gtrid, bqual.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.gtrid.len() + self.bqual.len());
        out.push(self.gtrid.len() as u8);
        out.push(self.bqual.len() as u8);
        out.extend_from_slice(&self.format_id.to_be_bytes());
        out.extend_from_slice(&self.gtrid);
        out.extend_from_slice(&self.bqual);
        out
    }

    /// The id [`Xid::to_bytes`] made, or `None` for bytes it cannot have made.
    pub fn from_bytes(b: &[u8]) -> Option<Xid> {
        let (&g, rest) = b.split_first()?;
        let (&q, rest) = rest.split_first()?;
        let (g, q) = (g as usize, q as usize);
        if rest.len() != 4 + g + q || g > MAX_XID_PART || q > MAX_XID_PART {
            return None;
        }
        Some(Xid {
            format_id: i32::from_be_bytes(rest[..4].try_into().ok()?),
            gtrid: rest[4..4 + g].to_vec(),
            bqual: rest[4 + g..].to_vec(),
        })
    }
}

impl std::fmt::Display for Xid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let part = |b: &[u8]| match std::str::from_utf8(b) {
            Ok(s) if s.chars().all(|c| !c.is_control() && c != '\'') => format!("'{s}'"),
            _ => format!("X'{}'", b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
        };
        write!(f, "{},{},{}", part(&self.gtrid), part(&self.bqual), self.format_id)
    }
}

/// One XA statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XaStatement {
    /// `XA START` / `XA BEGIN`.
    Start(Xid),
    /// `XA END`.
    End(Xid),
    /// `XA PREPARE`.
    Prepare(Xid),
    /// `XA COMMIT [ONE PHASE]`.
    Commit {
        /// The branch.
        xid: Xid,
        /// Commit an idle branch without preparing it.
        one_phase: bool,
    },
    /// `XA ROLLBACK`.
    Rollback(Xid),
    /// `XA RECOVER [CONVERT XID]`.
    Recover {
        /// `CONVERT XID`: the data column in hexadecimal.
        convert: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Bytes(Vec<u8>),
    Int(i64),
    Comma,
}

/// The XA statement `sql` holds, `None` when it does not start with the keyword `XA`.
pub fn parse_xa(sql: &str) -> Option<SqlResult<XaStatement>> {
    let text = sql.trim_start();
    let head = text.get(..2)?;
    if !head.eq_ignore_ascii_case("XA") || text[2..].chars().next().is_some_and(|c| !c.is_whitespace()) {
        return None;
    }
    Some(tokens(text.trim_end().trim_end_matches(';')).and_then(|t| statement(&t)))
}

fn syntax(what: &str) -> SqlError {
    SqlError::syntax(format!("{what} in an XA statement"))
}

fn tokens(text: &str) -> SqlResult<Vec<Token>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b',' {
            out.push(Token::Comma);
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let (bytes, next) = quoted(b, i)?;
            out.push(Token::Bytes(bytes));
            i = next;
        } else if (c == b'x' || c == b'X') && b.get(i + 1) == Some(&b'\'') {
            let end = b[i + 2..]
                .iter()
                .position(|&x| x == b'\'')
                .ok_or_else(|| syntax("an unterminated hex literal"))?;
            out.push(Token::Bytes(hex(&text[i + 2..i + 2 + end])?));
            i += end + 3;
        } else if c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
            let end = b[i + 2..]
                .iter()
                .position(|x| !x.is_ascii_hexdigit())
                .unwrap_or(b.len() - i - 2);
            out.push(Token::Bytes(hex(&text[i + 2..i + 2 + end])?));
            i += end + 2;
        } else if c.is_ascii_digit() || c == b'-' {
            let end = b[i + 1..]
                .iter()
                .position(|x| !x.is_ascii_digit())
                .unwrap_or(b.len() - i - 1);
            let n = text[i..i + 1 + end].parse().map_err(|_| syntax("a bad number"))?;
            out.push(Token::Int(n));
            i += end + 1;
        } else if c.is_ascii_alphabetic() {
            let end = b[i..]
                .iter()
                .position(|x| !x.is_ascii_alphanumeric() && *x != b'_')
                .unwrap_or(b.len() - i);
            out.push(Token::Word(text[i..i + end].to_ascii_uppercase()));
            i += end;
        } else {
            return Err(syntax(&format!("an unexpected character {:?}", c as char)));
        }
    }
    Ok(out)
}

/// The bytes of the string literal starting at `b[start]` (its quote), and the index after it.
fn quoted(b: &[u8], start: usize) -> SqlResult<(Vec<u8>, usize)> {
    let q = b[start];
    let mut out = Vec::new();
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            c if c == q && b.get(i + 1) == Some(&q) => {
                out.push(q);
                i += 2;
            }
            c if c == q => return Ok((out, i + 1)),
            b'\\' if i + 1 < b.len() => {
                // MySQL's escapes; `\%` and `\_` keep their backslash.
                match b[i + 1] {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'b' => out.push(8),
                    b'Z' => out.push(26),
                    b'0' => out.push(0),
                    c @ (b'%' | b'_') => out.extend_from_slice(&[b'\\', c]),
                    c => out.push(c),
                }
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err(syntax("an unterminated string"))
}

fn hex(digits: &str) -> SqlResult<Vec<u8>> {
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(syntax("a bad hex literal"));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(syntax("a hex literal of an odd number of digits"));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|_| syntax("a bad hex literal")))
        .collect()
}

fn statement(t: &[Token]) -> SqlResult<XaStatement> {
    let word = |i: usize| match t.get(i) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let verb = word(1).ok_or_else(|| syntax("no command after XA"))?;
    if verb == "RECOVER" {
        return match (word(2), word(3), t.len()) {
            (None, None, 2) => Ok(XaStatement::Recover { convert: false }),
            (Some("CONVERT"), Some("XID"), 4) => Ok(XaStatement::Recover { convert: true }),
            _ => Err(syntax("unexpected words after XA RECOVER")),
        };
    }
    let (xid, rest) = xid(&t[2..])?;
    let rest: Vec<&str> = rest
        .iter()
        .map(|tok| match tok {
            Token::Word(w) => Ok(w.as_str()),
            _ => Err(syntax("unexpected text after the xid")),
        })
        .collect::<SqlResult<_>>()?;
    let unsupported = |what: &str| {
        Err(SqlError::new(
            1398,
            "XAE05",
            format!("XAER_INVAL: Invalid arguments (or unsupported command): {what}"),
        ))
    };
    match (verb, rest.as_slice()) {
        ("START" | "BEGIN", []) => Ok(XaStatement::Start(xid)),
        ("START" | "BEGIN", ["JOIN" | "RESUME"]) => unsupported("XA START ... JOIN / RESUME"),
        ("END", []) => Ok(XaStatement::End(xid)),
        ("END", ["SUSPEND", ..]) => unsupported("XA END ... SUSPEND"),
        ("PREPARE", []) => Ok(XaStatement::Prepare(xid)),
        ("COMMIT", []) => Ok(XaStatement::Commit { xid, one_phase: false }),
        ("COMMIT", ["ONE", "PHASE"]) => Ok(XaStatement::Commit { xid, one_phase: true }),
        ("ROLLBACK", []) => Ok(XaStatement::Rollback(xid)),
        (verb, _) => Err(syntax(&format!("XA {verb} with these words"))),
    }
}

/// The xid at the start of `t`, and the tokens after it.
fn xid(t: &[Token]) -> SqlResult<(Xid, &[Token])> {
    let part = |tok: Option<&Token>, what: &str| match tok {
        Some(Token::Bytes(b)) if b.len() <= MAX_XID_PART => Ok(b.clone()),
        Some(Token::Bytes(_)) => Err(SqlError::new(
            1398,
            "XAE05",
            format!("XAER_INVAL: Invalid arguments: the {what} is longer than {MAX_XID_PART} bytes"),
        )),
        _ => Err(syntax(&format!("no {what}"))),
    };
    let gtrid = part(t.first(), "gtrid")?;
    if gtrid.is_empty() {
        return Err(syntax("an empty gtrid"));
    }
    let mut xid = Xid {
        format_id: 1,
        gtrid,
        bqual: Vec::new(),
    };
    let mut i = 1;
    if t.get(i) == Some(&Token::Comma) {
        xid.bqual = part(t.get(i + 1), "bqual")?;
        i += 2;
        if t.get(i) == Some(&Token::Comma) {
            xid.format_id = match t.get(i + 1) {
                Some(Token::Int(n)) => i32::try_from(*n).map_err(|_| syntax("a formatID out of range"))?,
                _ => return Err(syntax("no formatID")),
            };
            i += 2;
        }
    }
    Ok((xid, &t[i..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(g: &str, b: &str, f: i32) -> Xid {
        Xid {
            format_id: f,
            gtrid: g.as_bytes().to_vec(),
            bqual: b.as_bytes().to_vec(),
        }
    }

    #[test]
    fn statements_parse_and_others_are_left_alone() {
        assert_eq!(parse_xa("SELECT 1"), None);
        assert_eq!(parse_xa("xact"), None);
        assert_eq!(
            parse_xa("  xa start 'g1'").unwrap().unwrap(),
            XaStatement::Start(x("g1", "", 1))
        );
        assert_eq!(
            parse_xa("XA BEGIN 'g', 'b', 7;").unwrap().unwrap(),
            XaStatement::Start(x("g", "b", 7))
        );
        assert_eq!(
            parse_xa("XA END X'6162'").unwrap().unwrap(),
            XaStatement::End(x("ab", "", 1))
        );
        assert_eq!(
            parse_xa("XA PREPARE 0x6162,'q'").unwrap().unwrap(),
            XaStatement::Prepare(x("ab", "q", 1))
        );
        assert_eq!(
            parse_xa("XA COMMIT 'it''s' ONE PHASE").unwrap().unwrap(),
            XaStatement::Commit {
                xid: x("it's", "", 1),
                one_phase: true
            }
        );
        assert_eq!(
            parse_xa("XA ROLLBACK \"g\", '', -1").unwrap().unwrap(),
            XaStatement::Rollback(x("g", "", -1))
        );
        assert_eq!(
            parse_xa("XA RECOVER").unwrap().unwrap(),
            XaStatement::Recover { convert: false }
        );
        assert_eq!(
            parse_xa("XA RECOVER CONVERT XID").unwrap().unwrap(),
            XaStatement::Recover { convert: true }
        );
        assert_eq!(
            parse_xa(r"XA END 'a\rb\Z\%\_\q'").unwrap().unwrap(),
            XaStatement::End(Xid {
                format_id: 1,
                gtrid: b"a\rb\x1a\\%\\_q".to_vec(),
                bqual: Vec::new()
            })
        );
    }

    #[test]
    fn bad_statements_get_errors() {
        for bad in [
            "XA",
            "XA START",
            "XA START ''",
            "XA START 'g' extra",
            "XA STOP 'g'",
            "XA COMMIT 'g' ONE",
            "XA START 'g',",
            "XA START 'g','b',",
            "XA START 'g','b',99999999999",
            "XA START 'unterminated",
            "XA START X'abc'",
            "XA START 'g' @",
            "XA RECOVER 'g'",
        ] {
            let e = parse_xa(bad).expect(bad).expect_err(bad);
            assert!(e.code == 1064 || e.code == 1398, "{bad}: {}", e.message);
        }
        let long = format!("XA START '{}'", "a".repeat(65));
        assert_eq!(parse_xa(&long).unwrap().unwrap_err().code, 1398);
        assert_eq!(parse_xa("XA START 'g' JOIN").unwrap().unwrap_err().code, 1398);
    }

    #[test]
    fn no_text_makes_the_parser_panic() {
        // Every short string over an alphabet of XA's tokens and awkward characters.
        let pieces = [
            "XA", " ", "START", "'", "\"", "\\", ",", "X'", "0x", "é", "a", "1", "-", ";", "ONE", "PHASE",
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let mut text = String::from("XA ");
            for _ in 0..(seed % 9) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push_str(pieces[(seed % pieces.len() as u64) as usize]);
            }
            let _ = parse_xa(&text);
        }
        assert!(parse_xa("XA START X'aé0'").unwrap().is_err());
    }

    #[test]
    fn engine_ids_round_trip_and_differ() {
        let ids = [
            x("a", "", 1),
            x("", "a", 1),
            x("a", "b", 1),
            x("ab", "", 1),
            x("a", "b", 2),
        ];
        let bytes: Vec<_> = ids.iter().map(Xid::to_bytes).collect();
        for (id, b) in ids.iter().zip(&bytes) {
            assert_eq!(Xid::from_bytes(b).as_ref(), Some(id));
            assert!(b.len() <= riptide::MAX_XID_BYTES);
        }
        let mut sorted = bytes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), bytes.len());
        assert_eq!(Xid::from_bytes(b"\x05\x00"), None);
        assert_eq!(x("g", "b", 3).to_string(), "'g','b',3");
    }
}
