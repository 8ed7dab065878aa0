//! Combining the replies of a read that ran on several partitions: rows one after the other,
//! or one row of COUNT/SUM aggregates added column by column, exactly (integers and
//! fixed-point decimals as the server prints them; anything else is refused, never rounded).

use super::backend::ResultSet;
use crate::protocol::packet::{write_lenenc_bytes, PayloadReader};

/// A text row's values (`None` for NULL).
pub(super) fn text_values(row: &[u8]) -> Result<Vec<Option<String>>, String> {
    let mut r = PayloadReader::new(row);
    let mut out = Vec::new();
    while !r.is_empty() {
        if r.peek() == Some(0xFB) {
            let _ = r.u8();
            out.push(None);
        } else {
            let b = r.lenenc_bytes().map_err(|e| e.to_string())?;
            out.push(Some(String::from_utf8_lossy(b).into_owned()));
        }
    }
    Ok(out)
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

/// One row of COUNT/SUM aggregates per partition, summed column by column.
pub(super) fn sum(replies: Vec<ResultSet>) -> Result<ResultSet, String> {
    let mut totals: Option<Vec<Option<Decimal>>> = None;
    let mut last = ResultSet::default();
    for rs in replies {
        let [row] = rs.rows.as_slice() else {
            return Err(format!(
                "an aggregate that returned {} rows on a partition",
                rs.rows.len()
            ));
        };
        let values = text_values(row)?;
        let parsed: Vec<Option<Decimal>> = values
            .iter()
            .map(|v| v.as_deref().map(Decimal::parse).transpose())
            .collect::<Result<_, _>>()?;
        totals = Some(match totals {
            None => parsed,
            Some(t) => t
                .into_iter()
                .zip(parsed)
                .map(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => a.add(&b).map(Some),
                    (a, b) => Ok(a.or(b)),
                })
                .collect::<Result<_, _>>()?,
        });
        last = rs;
    }
    let mut row = Vec::new();
    for v in totals.unwrap_or_default() {
        match v {
            Some(d) => write_lenenc_bytes(&mut row, d.to_string().as_bytes()),
            None => row.push(0xFB),
        }
    }
    last.rows = vec![row];
    Ok(last)
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
    }
}
