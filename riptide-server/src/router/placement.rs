//! Where a row lives, and which partitions a statement needs: the router's placement of rows by
//! a hash of their primary key, and the classification of a parsed statement against it.
//!
//! Invariants:
//! - Placement version 1: a row's partition is [`partition_of`] its primary key, FNV-1a (64
//!   bits) over the key's canonical encoding (per column: an integer as `b'i'` then its value as
//!   16 big-endian bytes of an i128; anything else as `b's'`, a 4-byte big-endian length and
//!   its bytes), modulo the partition count. It never changes for a given count: data placed by
//!   one router is found by every other. `'5'` and `5` name the same integer key.
//! - A statement is placed on one partition only when every row it can touch has a key that
//!   the statement names by literal equality (`pk = 5`, `pk IN (...)`, an INSERT's values);
//!   anything the router cannot prove is [`Placement::All`] (a read fans out) or refused (a
//!   write), never guessed.

use crate::sql::types::TypeKind;
use sqlparser::ast::{self, BinaryOperator, Expr, SetExpr, Statement, TableFactor, UnaryOperator};
use std::collections::BTreeSet;

/// How the router compares a key column's values: as the server stores them
/// (`ColumnType::coerce`), or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// An integer column (TINYINT ... BIGINT, signed or not).
    Int,
    /// VARCHAR, TEXT, BLOB: the string literal's exact bytes.
    Bytes,
    /// CHAR: the bytes without trailing spaces (the server strips them).
    Char,
    /// DOUBLE, DECIMAL, DATETIME ...: the server normalises these (`1.5` = `1.50`), so the
    /// router places no row by them (reads fan out, writes are refused).
    Unplaceable,
}

/// What the router knows of a table: its columns in order and its primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableKey {
    /// Column names, lower-cased, in table order.
    pub columns: Vec<String>,
    /// Their types as the server maps them (`None`: a type it does not know).
    pub types: Vec<Option<TypeKind>>,
    /// The primary key: column positions and how each compares.
    pub primary: Vec<(usize, KeyKind)>,
    /// The AUTO_INCREMENT column, if any (an INSERT of 0 or NULL there has its value made by
    /// the partition, so the router cannot place it).
    pub auto_increment: Option<usize>,
    /// A UNIQUE key besides the primary key: each partition could enforce it only over its own
    /// rows, so the router refuses writes to the table.
    pub other_unique: bool,
}

impl TableKey {
    /// Reads a table's key from its `CREATE TABLE` statement (`SHOW CREATE TABLE`'s text).
    pub fn from_create(stmt: &Statement) -> Result<TableKey, String> {
        let Statement::CreateTable(ct) = stmt else {
            return Err("not a CREATE TABLE statement".into());
        };
        let columns: Vec<String> = ct.columns.iter().map(|c| c.name.value.to_ascii_lowercase()).collect();
        let kind = |i: usize| match crate::sql::bind::ddl::column_type(&ct.columns[i].data_type).map(|t| t.kind) {
            Ok(TypeKind::TinyInt | TypeKind::SmallInt | TypeKind::MediumInt | TypeKind::Int | TypeKind::BigInt) => {
                KeyKind::Int
            }
            Ok(TypeKind::VarChar | TypeKind::Text | TypeKind::Blob) => KeyKind::Bytes,
            Ok(TypeKind::Char) => KeyKind::Char,
            _ => KeyKind::Unplaceable,
        };
        let position = |name: &str| {
            columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(name))
                .ok_or_else(|| format!("key column {name} is not a column"))
        };
        let mut primary = Vec::new();
        for (i, c) in ct.columns.iter().enumerate() {
            if c.options
                .iter()
                .any(|o| matches!(o.option, ast::ColumnOption::PrimaryKey(_)))
            {
                primary.push((i, kind(i)));
            }
        }
        for con in &ct.constraints {
            if let ast::TableConstraint::PrimaryKey(p) = con {
                for c in &p.columns {
                    let Expr::Identifier(id) = &c.column.expr else {
                        return Err("a primary key on an expression".into());
                    };
                    let i = position(&id.value)?;
                    primary.push((i, kind(i)));
                }
            }
        }
        if primary.is_empty() {
            return Err("the table has no primary key".into());
        }
        let auto_increment = ct.columns.iter().position(|c| {
            c.options.iter().any(|o| match &o.option {
                ast::ColumnOption::DialectSpecific(tokens) => tokens
                    .iter()
                    .any(|t| t.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")),
                _ => false,
            })
        });
        let other_unique = ct.columns.iter().any(|c| {
            c.options
                .iter()
                .any(|o| matches!(o.option, ast::ColumnOption::Unique(_)))
        }) || ct
            .constraints
            .iter()
            .any(|c| matches!(c, ast::TableConstraint::Unique(_)));
        let types = ct
            .columns
            .iter()
            .map(|c| crate::sql::bind::ddl::column_type(&c.data_type).ok().map(|t| t.kind))
            .collect();
        Ok(TableKey {
            columns,
            types,
            primary,
            auto_increment,
            other_unique,
        })
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.eq_ignore_ascii_case(name))
    }

    fn key_column(&self, name: &str) -> Option<(usize, KeyKind)> {
        let i = self.column(name)?;
        self.primary
            .iter()
            .position(|(c, _)| *c == i)
            .map(|k| (k, self.primary[k].1))
    }
}

/// One key column's value, canonical.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyValue {
    /// An integer.
    Int(i128),
    /// Bytes.
    Bytes(Vec<u8>),
}

/// The partition (of `partitions`) that holds the row whose primary key is `key`.
pub fn partition_of(key: &[KeyValue], partitions: usize) -> usize {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    for v in key {
        match v {
            KeyValue::Int(i) => {
                feed(b"i");
                feed(&i.to_be_bytes());
            }
            KeyValue::Bytes(b) => {
                feed(b"s");
                feed(&(b.len() as u32).to_be_bytes());
                feed(b);
            }
        }
    }
    (h % partitions.max(1) as u64) as usize
}

/// A literal's value as a key column of `kind`, if the router can tell it exactly.
fn literal(e: &Expr, kind: KeyKind) -> Option<KeyValue> {
    match e {
        Expr::Nested(inner) => literal(inner, kind),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr, kind)? {
            KeyValue::Int(i) if kind == KeyKind::Int => i.checked_neg().map(KeyValue::Int),
            _ => None,
        },
        Expr::Value(v) => {
            let text = match &v.value {
                ast::Value::Number(n, _) => n.as_str(),
                ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.as_str(),
                _ => return None,
            };
            let string = !matches!(v.value, ast::Value::Number(..));
            match kind {
                KeyKind::Int => text.trim().parse::<i128>().ok().map(KeyValue::Int),
                KeyKind::Bytes if string => Some(KeyValue::Bytes(text.as_bytes().to_vec())),
                KeyKind::Char if string => Some(KeyValue::Bytes(text.trim_end_matches(' ').as_bytes().to_vec())),
                KeyKind::Bytes | KeyKind::Char | KeyKind::Unplaceable => None,
            }
        }
        _ => None,
    }
}

/// Where a statement's rows are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// These partitions (one or more) hold every row the statement can touch.
    Some(BTreeSet<usize>),
    /// The router cannot narrow it: every partition.
    All,
}

/// The table a statement names (`[db.]table`, `db` defaulting to the session's), if it is a
/// single-table SELECT, INSERT, REPLACE, UPDATE or DELETE.
pub fn target_table(stmt: &Statement) -> Option<&ast::ObjectName> {
    fn single(from: &[ast::TableWithJoins]) -> Option<&ast::ObjectName> {
        match from {
            [t] if t.joins.is_empty() => match &t.relation {
                TableFactor::Table { name, args: None, .. } => Some(name),
                _ => None,
            },
            _ => None,
        }
    }
    match stmt {
        Statement::Query(q) => match q.body.as_ref() {
            SetExpr::Select(s) => single(&s.from),
            _ => None,
        },
        Statement::Insert(i) => match &i.table {
            ast::TableObject::TableName(name) => Some(name),
            _ => None,
        },
        Statement::Update(u) => single(std::slice::from_ref(&u.table)),
        Statement::Delete(d) => match &d.from {
            ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => single(f),
        },
        _ => None,
    }
}

/// The partitions a WHERE clause confines a statement to: a top-level conjunct that names
/// every primary key column by equality (or a single-column key by IN).
fn where_placement(selection: Option<&Expr>, key: &TableKey, partitions: usize) -> Placement {
    let Some(selection) = selection else {
        return Placement::All;
    };
    let mut conjuncts = Vec::new();
    flatten_and(selection, &mut conjuncts);
    let mut values: Vec<Option<KeyValue>> = vec![None; key.primary.len()];
    for c in &conjuncts {
        match c {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let (col, lit) = match (column_name(left), column_name(right)) {
                    (Some(col), None) => (col, right),
                    (None, Some(col)) => (col, left),
                    _ => continue,
                };
                if let Some((k, kind)) = key.key_column(col) {
                    if let Some(v) = literal(lit, kind) {
                        values[k] = Some(v);
                    }
                }
            }
            Expr::InList {
                expr,
                list,
                negated: false,
            } if key.primary.len() == 1 => {
                let Some((_, kind)) = column_name(expr).and_then(|c| key.key_column(c)) else {
                    continue;
                };
                let vals: Option<Vec<KeyValue>> = list.iter().map(|e| literal(e, kind)).collect();
                if let Some(vals) = vals {
                    return Placement::Some(
                        vals.iter()
                            .map(|v| partition_of(std::slice::from_ref(v), partitions))
                            .collect(),
                    );
                }
            }
            _ => {}
        }
    }
    match values.into_iter().collect::<Option<Vec<_>>>() {
        Some(key) => Placement::Some(BTreeSet::from([partition_of(&key, partitions)])),
        None => Placement::All,
    }
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        Expr::Nested(inner) => flatten_and(inner, out),
        other => out.push(other),
    }
}

fn column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Identifier(i) => Some(&i.value),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.as_str()),
        Expr::Nested(inner) => column_name(inner),
        _ => None,
    }
}

/// Why a write cannot be placed on one partition.
pub type Refusal = String;

/// The partitions an INSERT's rows go to; refused when a row's key is not given by literals.
fn insert_placement(ins: &ast::Insert, key: &TableKey, partitions: usize) -> Result<Placement, Refusal> {
    if key.other_unique {
        return Err("a write to a table with a UNIQUE key besides its primary key (no partition can enforce it over the others' rows)".into());
    }
    let positions: Vec<usize> = if ins.columns.is_empty() {
        (0..key.columns.len()).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let name =
                    c.0.last()
                        .and_then(|p| p.as_ident())
                        .map(|i| i.value.clone())
                        .unwrap_or_default();
                key.column(&name).ok_or_else(|| format!("unknown column {c}"))
            })
            .collect::<Result<_, _>>()?
    };
    if positions.iter().enumerate().any(|(i, p)| positions[..i].contains(p)) {
        return Err("an INSERT that names a column twice".into());
    }
    let source = ins.source.as_ref().ok_or("an INSERT without VALUES")?;
    let SetExpr::Values(values) = source.body.as_ref() else {
        return Err("INSERT ... SELECT through the router".into());
    };
    if let Some(ast::OnInsert::DuplicateKeyUpdate(assignments)) = &ins.on {
        refuse_key_assignments(assignments, key)?;
    }
    let mut set = BTreeSet::new();
    for row in &values.rows {
        let mut key_values = Vec::with_capacity(key.primary.len());
        for (col, kind) in &key.primary {
            let at = positions.iter().position(|p| p == col).ok_or_else(|| {
                format!(
                    "an INSERT that does not give primary key column {} (the router places rows by their key; AUTO_INCREMENT keys cannot be placed)",
                    key.columns[*col]
                )
            })?;
            let e = row.content.get(at).ok_or("a row with fewer values than columns")?;
            let v = literal(e, *kind).ok_or_else(|| format!("a primary key value that is not a literal: {e}"))?;
            if key.auto_increment == Some(*col) && v == KeyValue::Int(0) {
                return Err(
                    "an AUTO_INCREMENT key of 0 (its value is made by the partition, so the router cannot place it)"
                        .into(),
                );
            }
            key_values.push(v);
        }
        set.insert(partition_of(&key_values, partitions));
    }
    Ok(Placement::Some(set))
}

/// Refuses assignments to a primary key column: they could move a row to another partition.
fn refuse_key_assignments(assignments: &[ast::Assignment], key: &TableKey) -> Result<(), Refusal> {
    for a in assignments {
        let name = match &a.target {
            ast::AssignmentTarget::ColumnName(n) => n.0.last().and_then(|p| p.as_ident()).map(|i| i.value.clone()),
            ast::AssignmentTarget::Tuple(_) => None,
        };
        if name.is_none_or(|n| key.key_column(&n).is_some()) {
            return Err("a change of a primary key column (it could move the row to another partition)".into());
        }
    }
    Ok(())
}

/// Where a table statement's rows are. `Err` for a write the router cannot place.
pub fn place(stmt: &Statement, key: &TableKey, partitions: usize) -> Result<Placement, Refusal> {
    match stmt {
        Statement::Query(q) => Ok(match q.body.as_ref() {
            SetExpr::Select(s) => where_placement(s.selection.as_ref(), key, partitions),
            _ => Placement::All,
        }),
        Statement::Insert(ins) => insert_placement(ins, key, partitions),
        Statement::Update(u) => {
            if key.other_unique {
                return Err("a write to a table with a UNIQUE key besides its primary key (no partition can enforce it over the others' rows)".into());
            }
            refuse_key_assignments(&u.assignments, key)?;
            Ok(where_placement(u.selection.as_ref(), key, partitions))
        }
        Statement::Delete(d) => Ok(where_placement(d.selection.as_ref(), key, partitions)),
        _ => Ok(Placement::All),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(sql: &str) -> Statement {
        crate::sql::parse::parse(sql).unwrap().remove(0)
    }

    fn key() -> TableKey {
        TableKey::from_create(&stmt(
            "CREATE TABLE t (id INT NOT NULL, k INT, c CHAR(10), PRIMARY KEY (id))",
        ))
        .unwrap()
    }

    fn one(p: usize) -> Placement {
        Placement::Some(BTreeSet::from([p]))
    }

    #[test]
    fn placement_is_stable_and_spreads_keys() {
        // Frozen: placement version 1 must never move a row.
        let frozen: Vec<usize> = (0..8).map(|i| partition_of(&[KeyValue::Int(i)], 3)).collect();
        assert_eq!(frozen, [2, 0, 1, 2, 1, 2, 0, 1]); // also computed by an independent FNV-1a
        assert_eq!(partition_of(&[KeyValue::Bytes(b"abc".to_vec())], 7), 5);
        let mut counts = [0usize; 3];
        for i in 0..30_000 {
            counts[partition_of(&[KeyValue::Int(i)], 3)] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn equality_on_the_key_places_a_statement() {
        let k = key();
        let p5 = one(partition_of(&[KeyValue::Int(5)], 3));
        for sql in [
            "SELECT c FROM t WHERE id = 5",
            "SELECT c FROM t WHERE 5 = id AND k > 3",
            "SELECT c FROM t WHERE id = '5'",
            "SELECT c FROM t WHERE (t.id = 5)",
            "UPDATE t SET k = k + 1 WHERE id = 5",
            "DELETE FROM t WHERE id = 5",
            "INSERT INTO t (id, k, c) VALUES (5, 1, 'x')",
            "INSERT INTO t VALUES (5, 1, 'x')",
            "REPLACE INTO t (k, id) VALUES (1, 5)",
        ] {
            assert_eq!(place(&stmt(sql), &k, 3), Ok(p5.clone()), "{sql}");
        }
        let neg = one(partition_of(&[KeyValue::Int(-7)], 3));
        assert_eq!(place(&stmt("SELECT 1 FROM t WHERE id = -7"), &k, 3), Ok(neg));
    }

    #[test]
    fn what_cannot_be_proved_fans_out_or_is_refused() {
        let k = key();
        for sql in [
            "SELECT c FROM t",
            "SELECT c FROM t WHERE id BETWEEN 1 AND 100",
            "SELECT c FROM t WHERE id = 5 OR id = 6",
            "SELECT c FROM t WHERE id = k",
            "SELECT c FROM t WHERE k = 5",
            "UPDATE t SET k = 1 WHERE k = 5",
            "DELETE FROM t",
        ] {
            assert_eq!(place(&stmt(sql), &k, 3), Ok(Placement::All), "{sql}");
        }
        for sql in [
            "INSERT INTO t (k, c) VALUES (1, 'x')",
            "INSERT INTO t (id, k) VALUES (1 + 1, 2)",
            "INSERT INTO t (id, k) SELECT id, k FROM t",
            "UPDATE t SET id = 6 WHERE id = 5",
            "UPDATE t SET `ID` = 6 WHERE id = 5",
            "INSERT INTO t VALUES (5, 1, 'x') ON DUPLICATE KEY UPDATE id = 7",
        ] {
            assert!(place(&stmt(sql), &k, 3).is_err(), "{sql}");
        }
        let ids: BTreeSet<usize> = (0..20).map(|i| partition_of(&[KeyValue::Int(i)], 3)).collect();
        let list = (0..20).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        assert_eq!(
            place(&stmt(&format!("SELECT c FROM t WHERE id IN ({list})")), &k, 3),
            Ok(Placement::Some(ids.clone()))
        );
        let rows = (0..20).map(|i| format!("({i}, 0, 'x')")).collect::<Vec<_>>().join(",");
        assert_eq!(
            place(&stmt(&format!("INSERT INTO t VALUES {rows}")), &k, 3),
            Ok(Placement::Some(ids))
        );
    }

    #[test]
    fn composite_and_string_keys() {
        let k = TableKey::from_create(&stmt(
            "CREATE TABLE o (region VARCHAR(8), n BIGINT UNSIGNED, v INT, PRIMARY KEY (region, n))",
        ))
        .unwrap();
        assert_eq!(k.primary, vec![(0, KeyKind::Bytes), (1, KeyKind::Int)]);
        let p = one(partition_of(&[KeyValue::Bytes(b"eu".to_vec()), KeyValue::Int(9)], 4));
        assert_eq!(
            place(&stmt("SELECT v FROM o WHERE n = 9 AND region = 'eu'"), &k, 4),
            Ok(p.clone())
        );
        assert_eq!(place(&stmt("INSERT INTO o VALUES ('eu', 9, 1)"), &k, 4), Ok(p));
        // Half a key is no key.
        assert_eq!(
            place(&stmt("SELECT v FROM o WHERE region = 'eu'"), &k, 4),
            Ok(Placement::All)
        );
        assert!(TableKey::from_create(&stmt("CREATE TABLE n (a INT)")).is_err());
        let inline = TableKey::from_create(&stmt("CREATE TABLE i (a INT PRIMARY KEY, b INT)")).unwrap();
        assert_eq!(inline.primary, vec![(0, KeyKind::Int)]);
        // A key the partition makes cannot be placed by the router.
        let auto = TableKey::from_create(&stmt("CREATE TABLE a (id INT AUTO_INCREMENT PRIMARY KEY, b INT)")).unwrap();
        assert_eq!(auto.auto_increment, Some(0));
        assert!(place(&stmt("INSERT INTO a VALUES (0, 1)"), &auto, 3).is_err());
        assert!(place(&stmt("INSERT INTO a VALUES (NULL, 1)"), &auto, 3).is_err());
        assert!(place(&stmt("INSERT INTO a (b) VALUES (1)"), &auto, 3).is_err());
        assert!(place(
            &stmt("INSERT INTO a VALUES (3, 1) ON DUPLICATE KEY UPDATE b = b + 1"),
            &auto,
            3
        )
        .is_ok());
        // Keys placed as the server stores them, or not at all.
        let ch = TableKey::from_create(&stmt("CREATE TABLE c (id CHAR(4) PRIMARY KEY, b INT)")).unwrap();
        assert_eq!(
            place(&stmt("INSERT INTO c VALUES ('ab  ', 1)"), &ch, 5),
            place(&stmt("INSERT INTO c VALUES ('ab', 1)"), &ch, 5)
        );
        let dec = TableKey::from_create(&stmt("CREATE TABLE d (id DECIMAL(5,2) PRIMARY KEY, b INT)")).unwrap();
        assert!(place(&stmt("INSERT INTO d VALUES ('1.5', 1)"), &dec, 3).is_err());
        assert_eq!(
            place(&stmt("SELECT b FROM d WHERE id = '1.50'"), &dec, 3),
            Ok(Placement::All)
        );
        let uniq = TableKey::from_create(&stmt(
            "CREATE TABLE u (id INT PRIMARY KEY, e VARCHAR(9), UNIQUE KEY (e))",
        ))
        .unwrap();
        assert!(place(&stmt("INSERT INTO u VALUES (1, 'x')"), &uniq, 3).is_err());
        assert!(place(&stmt("UPDATE u SET e = 'y' WHERE id = 1"), &uniq, 3).is_err());
        assert!(place(&stmt("SELECT e FROM u WHERE id = 1"), &uniq, 3).is_ok());
        assert!(place(&stmt("INSERT INTO i (a, b, a) VALUES (5, 0, 6)"), &inline, 3).is_err());
        let huge = format!("SELECT b FROM i WHERE a = -'{}'", i128::MIN);
        assert_eq!(place(&stmt(&huge), &inline, 3), Ok(Placement::All));
    }
}
