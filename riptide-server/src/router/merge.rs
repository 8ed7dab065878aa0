//! Combining the replies of a read that ran on several partitions ([`super::merge_plan`] says
//! how): rows one after the other, or grouped (COUNT and SUM added exactly, as integers and
//! fixed-point decimals; a partial sum the router cannot add exactly is refused, never
//! rounded; MIN and MAX compared), sorted as MySQL sorts (NULL first, numeric columns by
//! value, others by bytes, the server's collation being binary) and limited.

use super::backend::{ResultSet, MAX_REPLY_BYTES};
use super::merge_plan::{Agg, Combine};
use crate::protocol::packet::{write_lenenc_bytes, PayloadReader};
use std::cmp::Ordering;
use std::collections::HashMap;

/// A text row's values as bytes (`None` for NULL).
pub(super) fn row_values(row: &[u8]) -> Result<Vec<Option<Vec<u8>>>, String> {
    let mut r = PayloadReader::new(row);
    let mut out = Vec::new();
    while !r.is_empty() {
        if r.peek() == Some(0xFB) {
            let _ = r.u8();
            out.push(None);
        } else {
            out.push(Some(r.lenenc_bytes().map_err(|e| e.to_string())?.to_vec()));
        }
    }
    Ok(out)
}

/// A text row's values as strings (`None` for NULL; invalid UTF-8 replaced).
pub(super) fn text_values(row: &[u8]) -> Result<Vec<Option<String>>, String> {
    Ok(row_values(row)?
        .into_iter()
        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
        .collect())
}

/// A value as a number's text, if it is one.
fn number(v: &[u8]) -> Option<&str> {
    std::str::from_utf8(v).ok()
}

pub(super) fn concat(replies: Vec<ResultSet>) -> ResultSet {
    let mut it = replies.into_iter();
    let mut out = it.next().unwrap_or_default();
    for rs in it {
        out.rows.extend(rs.rows);
        out.eof = rs.eof;
    }
    out
}

/// The field type byte of a column definition (text-protocol result set), if readable.
fn field_type(def: &[u8]) -> Option<u8> {
    let mut r = PayloadReader::new(def);
    for _ in 0..6 {
        r.lenenc_bytes().ok()?; // catalog, schema, table, org_table, name, org_name
    }
    r.lenenc_int().ok()?;
    r.u16().ok()?; // charset
    r.u32().ok()?; // length
    r.u8().ok()
}

/// Numeric MySQL field types (compared as numbers, not as text).
fn is_numeric(t: Option<u8>) -> bool {
    matches!(t, Some(0x00..=0x05 | 0x08 | 0x09 | 0x0d | 0xf6))
}

/// MySQL's order of two values of a column: NULL first, numbers by value, the rest by bytes
/// (the server's collation is binary).
fn compare(a: &Option<Vec<u8>>, b: &Option<Vec<u8>>, numeric: bool) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) if numeric => match (number(x), number(y)) {
            (Some(tx), Some(ty)) => match (Decimal::parse(tx), Decimal::parse(ty)) {
                (Ok(dx), Ok(dy)) => dx.cmp_value(&dy),
                _ => match (tx.parse::<f64>(), ty.parse::<f64>()) {
                    (Ok(fx), Ok(fy)) => fx.total_cmp(&fy),
                    _ => x.cmp(y),
                },
            },
            _ => x.cmp(y),
        },
        (Some(x), Some(y)) => x.cmp(y),
    }
}

/// Folds `value` into `acc` for aggregate `agg` (NULLs are ignored, as SQL's aggregates do).
fn fold(agg: Agg, acc: &mut Option<Vec<u8>>, value: Option<Vec<u8>>, numeric: bool) -> Result<(), String> {
    let Some(v) = value else { return Ok(()) };
    let Some(current) = acc.as_ref() else {
        *acc = Some(v);
        return Ok(());
    };
    let exact = |b: &[u8]| Decimal::parse(number(b).ok_or("a partial aggregate that is not a number")?);
    *acc = Some(match agg {
        Agg::Count | Agg::Sum => exact(current)?.add(&exact(&v)?)?.to_string().into_bytes(),
        Agg::Min if compare(&Some(v.clone()), acc, numeric) == Ordering::Less => v,
        Agg::Max if compare(&Some(v.clone()), acc, numeric) == Ordering::Greater => v,
        Agg::Min | Agg::Max => return Ok(()),
    });
    Ok(())
}

/// Combines per-partition rows as `c` says: grouped (aggregates folded, equal keys merged),
/// sorted, limited. Rows are text-protocol rows.
pub(super) fn combine(replies: Vec<ResultSet>, c: &Combine) -> Result<ResultSet, String> {
    let mut replies = replies.into_iter();
    let mut out = replies.next().unwrap_or_default();
    let first_rows = std::mem::take(&mut out.rows);
    let numeric: Vec<bool> = out.columns.iter().map(|d| is_numeric(field_type(d))).collect();
    if numeric.len() != c.columns.len() {
        return Err(format!(
            "{} columns where the query names {}",
            numeric.len(),
            c.columns.len()
        ));
    }
    let mut rows: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
    let mut groups: HashMap<Vec<Option<Vec<u8>>>, usize> = HashMap::new();
    // What the decoded rows (and group keys) hold, bounded like a relayed reply.
    let mut held = 0usize;
    let mut add = |payload: Vec<u8>| -> Result<(), String> {
        let row = row_values(&payload)?;
        if row.len() != c.columns.len() {
            return Err("a row of another width".into());
        }
        held += (payload.len() + 32 * (row.len() + 1)) * if c.grouped { 2 } else { 1 };
        if held > MAX_REPLY_BYTES {
            return Err(format!("rows over {MAX_REPLY_BYTES} bytes to combine"));
        }
        if !c.grouped {
            rows.push(row);
            return Ok(());
        }
        let key: Vec<Option<Vec<u8>>> = row
            .iter()
            .zip(&c.columns)
            .filter(|(_, agg)| agg.is_none())
            .map(|(v, _)| v.clone())
            .collect();
        match groups.get(&key) {
            None => {
                groups.insert(key, rows.len());
                rows.push(row);
            }
            Some(&at) => {
                for (i, v) in row.into_iter().enumerate() {
                    if let Some(agg) = c.columns[i] {
                        fold(agg, &mut rows[at][i], v, numeric[i])?;
                    }
                }
            }
        }
        Ok(())
    };
    for r in first_rows {
        add(r)?;
    }
    for rs in replies {
        for r in rs.rows {
            add(r)?;
        }
        out.eof = rs.eof;
    }
    if !c.order.is_empty() {
        rows.sort_by(|a, b| {
            c.order
                .iter()
                .map(|&(i, desc)| {
                    let o = compare(&a[i], &b[i], numeric[i]);
                    if desc {
                        o.reverse()
                    } else {
                        o
                    }
                })
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        });
    }
    if let Some((off, n)) = c.limit {
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        rows = rows.into_iter().skip(off).take(n).collect();
    }
    out.rows = rows
        .into_iter()
        .map(|row| {
            let mut p = Vec::new();
            for v in row {
                match v {
                    Some(b) => write_lenenc_bytes(&mut p, &b),
                    None => p.push(0xFB),
                }
            }
            p
        })
        .collect();
    Ok(out)
}

/// An exact decimal (integers and fixed-point text as MySQL prints SUM and COUNT).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    units: i128,
    scale: u32,
}

impl Decimal {
    fn parse(s: &str) -> Result<Decimal, String> {
        let bad = || format!("a partial aggregate {s:?} the router cannot add exactly");
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 30
        {
            return Err(bad());
        }
        let units: i128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
        Ok(Decimal {
            units: if neg { -units } else { units },
            scale: frac.len() as u32,
        })
    }

    /// Compares by value (`1.50` = `1.5`).
    fn cmp_value(&self, other: &Decimal) -> Ordering {
        let scale = self.scale.max(other.scale);
        let up = |d: &Decimal| 10i128.checked_pow(scale - d.scale).and_then(|m| d.units.checked_mul(m));
        match (up(self), up(other)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => (self.units as f64 / 10f64.powi(self.scale as i32))
                .total_cmp(&(other.units as f64 / 10f64.powi(other.scale as i32))),
        }
    }

    fn add(&self, other: &Decimal) -> Result<Decimal, String> {
        let scale = self.scale.max(other.scale);
        let up = |d: &Decimal| d.units.checked_mul(10i128.checked_pow(scale - d.scale)?);
        let overflow = || "a sum too large for the router".to_string();
        let units = up(self)
            .ok_or_else(overflow)?
            .checked_add(up(other).ok_or_else(overflow)?)
            .ok_or_else(overflow)?;
        Ok(Decimal { units, scale })
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.units);
        }
        let sign = if self.units < 0 { "-" } else { "" };
        let abs = self.units.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = format!("{abs:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_add_exactly() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        assert_eq!(d("12").add(&d("30")).unwrap().to_string(), "42");
        assert_eq!(d("1.50").add(&d("-0.025")).unwrap().to_string(), "1.475");
        assert_eq!(d("-3.5").add(&d("1")).unwrap().to_string(), "-2.5");
        assert_eq!(d("0.001").add(&d("0")).unwrap().to_string(), "0.001");
        for bad in ["1e5", "", "abc", "1.2.3", "--1"] {
            assert!(Decimal::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(d("1.50").cmp_value(&d("1.5")), Ordering::Equal);
        assert_eq!(d("-2").cmp_value(&d("1.5")), Ordering::Less);
    }

    fn column(name: &str, field_type: u8) -> Vec<u8> {
        let mut p = Vec::new();
        for s in ["def", "", "", "", name, name] {
            write_lenenc_bytes(&mut p, s.as_bytes());
        }
        p.push(0x0c);
        p.extend_from_slice(&45u16.to_le_bytes());
        p.extend_from_slice(&20u32.to_le_bytes());
        p.extend_from_slice(&[field_type, 0, 0, 0, 0, 0]);
        p
    }

    fn rows(values: &[&[Option<&str>]]) -> Vec<Vec<u8>> {
        values
            .iter()
            .map(|r| {
                let mut p = Vec::new();
                for v in r.iter() {
                    match v {
                        Some(s) => write_lenenc_bytes(&mut p, s.as_bytes()),
                        None => p.push(0xFB),
                    }
                }
                p
            })
            .collect()
    }

    fn partition(values: &[&[Option<&str>]]) -> ResultSet {
        ResultSet {
            header: vec![3],
            columns: vec![column("k", 0x03), column("n", 0x08), column("c", 0xfd)],
            columns_eof: vec![0xFE, 0, 0, 2, 0],
            rows: rows(values),
            eof: vec![0xFE, 0, 0, 2, 0],
        }
    }

    fn texts(rs: &ResultSet) -> Vec<Vec<Option<String>>> {
        rs.rows.iter().map(|r| text_values(r).unwrap()).collect()
    }

    #[test]
    fn bytes_survive_and_numbers_sort_by_value() {
        let blob = |v: &[u8]| {
            let mut p = Vec::new();
            write_lenenc_bytes(&mut p, v);
            p
        };
        let mut a = partition(&[]);
        a.columns = vec![column("v", 0xfc)];
        a.rows = vec![blob(&[0xFF]), blob(&[0xFE])];
        let mut b = a.clone();
        b.rows = vec![blob(&[0xFF, 0x00])];
        let plan = Combine {
            columns: vec![None],
            grouped: true,
            order: vec![(0, false)],
            limit: None,
        };
        let out = combine(vec![a, b], &plan).unwrap();
        let got: Vec<Vec<u8>> = out
            .rows
            .iter()
            .map(|r| row_values(r).unwrap()[0].clone().unwrap())
            .collect();
        assert_eq!(got, vec![vec![0xFE], vec![0xFF], vec![0xFF, 0x00]]);
        // Negative and decimal values by value; ties broken by the second key; NULL partial
        // sums do not replace others.
        let mut x = partition(&[
            &[Some("-10"), Some("2"), Some("a")],
            &[Some("-2"), Some("1"), Some("b")],
        ]);
        x.columns[0] = column("k", 0xf6);
        let mut y = partition(&[
            &[Some("-9.5"), Some("1"), Some("c")],
            &[Some("-2"), Some("0"), Some("d")],
        ]);
        y.columns[0] = column("k", 0xf6);
        let plan = Combine {
            columns: vec![None, None, None],
            grouped: false,
            order: vec![(0, false), (1, false)],
            limit: None,
        };
        let out = combine(vec![x, y], &plan).unwrap();
        let cs: Vec<String> = texts(&out).into_iter().map(|r| r[2].clone().unwrap()).collect();
        assert_eq!(cs, ["a", "c", "d", "b"]);
        let sums = Combine {
            columns: vec![Some(Agg::Sum), Some(Agg::Count), Some(Agg::Min)],
            grouped: true,
            order: vec![],
            limit: None,
        };
        let p = partition(&[&[None, Some("0"), None]]);
        let q = partition(&[&[Some("7"), Some("2"), Some("q")]]);
        let out = combine(vec![q, p], &sums).unwrap();
        assert_eq!(
            texts(&out),
            vec![vec![Some("7".into()), Some("2".into()), Some("q".into())]]
        );
    }

    #[test]
    fn groups_fold_and_sort_as_mysql_does() {
        let a = partition(&[
            &[Some("10"), Some("2"), Some("b")],
            &[Some("9"), Some("1"), Some("z")],
            &[None, Some("1"), None],
        ]);
        let b = partition(&[
            &[Some("10"), Some("3"), Some("a")],
            &[Some("100"), Some("1"), Some("c")],
        ]);
        // A combination with a group key beside aggregates (the planner makes none today: GROUP
        // BY is refused) still folds groups, sorts and limits as MySQL would.
        let plan = Combine {
            columns: vec![None, Some(Agg::Count), Some(Agg::Max)],
            grouped: true,
            order: vec![(0, true)],
            limit: Some((1, 2)),
        };
        let out = combine(vec![a.clone(), b.clone()], &plan).unwrap();
        let s = |v: &str| Some(v.to_string());
        // 100 > 10 > 9 > NULL numerically; skip 100, keep 10 (5 rows, max "b") and 9.
        assert_eq!(
            texts(&out),
            vec![vec![s("10"), s("5"), s("b")], vec![s("9"), s("1"), s("z")]]
        );
        // Sorting without grouping: NULL first ascending; by bytes for a text column.
        let plan = Combine {
            columns: vec![None, None, None],
            grouped: false,
            order: vec![(2, false)],
            limit: None,
        };
        let out = combine(vec![a, b], &plan).unwrap();
        let cs: Vec<Option<String>> = texts(&out).into_iter().map(|r| r[2].clone()).collect();
        assert_eq!(cs, vec![None, s("a"), s("b"), s("c"), s("z")]);
        // Partial sums that are not exact numbers are refused.
        let plan = Combine {
            columns: vec![Some(Agg::Sum), Some(Agg::Count), Some(Agg::Min)],
            grouped: true,
            order: vec![],
            limit: None,
        };
        let x = partition(&[&[Some("1.5e3"), Some("1"), Some("a")]]);
        let y = partition(&[&[Some("2"), Some("1"), Some("b")]]);
        assert!(combine(vec![x, y], &plan).is_err());
    }
}
