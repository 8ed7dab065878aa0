//! SQL values as the server carries them between the wire, the executor and the row codecs.
//!
//! Invariants: a [`Decimal`] is `mantissa × 10^-scale` with `scale ≤ MAX_DECIMAL_SCALE`; a
//! [`DateTime`] holds a valid calendar date and time (checked by [`DateTime::new`]). Strings
//! and blobs are both [`Value::Bytes`]: the column type says which one a value is.

use std::cmp::Ordering;
use std::fmt;

/// Largest scale (digits after the point) of a DECIMAL, as in MySQL.
pub const MAX_DECIMAL_SCALE: u8 = 30;
/// Largest precision (digits in all) of a DECIMAL this server stores: what fits an `i128`.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// One SQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A signed integer (TINYINT..BIGINT, and integer literals).
    Int(i64),
    /// An unsigned integer (BIGINT UNSIGNED and literals above `i64::MAX`).
    UInt(u64),
    /// A DOUBLE (and FLOAT).
    Double(f64),
    /// A DECIMAL.
    Decimal(Decimal),
    /// CHAR, VARCHAR, TEXT, BLOB and string literals: bytes (UTF-8 for text columns).
    Bytes(Vec<u8>),
    /// A DATETIME.
    DateTime(DateTime),
}

impl Value {
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A string value.
    pub fn str(s: &str) -> Value {
        Value::Bytes(s.as_bytes().to_vec())
    }

    /// A string value from an owned string.
    pub fn from_string(s: String) -> Value {
        Value::Bytes(s.into_bytes())
    }

    /// An integer or DECIMAL as a DECIMAL; `None` for any other value.
    pub fn as_decimal(&self) -> Option<Decimal> {
        match self {
            Value::Int(i) => Some(Decimal::integer(*i as i128)),
            Value::UInt(u) => Some(Decimal::integer(*u as i128)),
            Value::Decimal(d) => Some(*d),
            _ => None,
        }
    }

    /// The value in MySQL's text protocol (`None` for NULL): integers in decimal, DOUBLE in
    /// the shortest form that reads back the same, DECIMAL with exactly its scale, DATETIME as
    /// `YYYY-MM-DD HH:MM:SS[.ffffff]`.
    pub fn to_text(&self) -> Option<Vec<u8>> {
        match self {
            Value::Null => None,
            Value::Int(v) => Some(v.to_string().into_bytes()),
            Value::UInt(v) => Some(v.to_string().into_bytes()),
            Value::Double(v) => Some(format_double(*v).into_bytes()),
            Value::Decimal(d) => Some(d.to_string().into_bytes()),
            Value::Bytes(b) => Some(b.clone()),
            Value::DateTime(d) => Some(d.to_string().into_bytes()),
        }
    }
}

/// A DOUBLE as MySQL prints it: integral values without a point, others in Rust's shortest
/// round-trip form.
pub fn format_double(v: f64) -> String {
    if v.is_finite() && v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A fixed-point decimal: `mantissa × 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    /// The digits as an integer.
    pub mantissa: i128,
    /// Digits after the point, at most [`MAX_DECIMAL_SCALE`].
    pub scale: u8,
}

impl Decimal {
    /// An integer as a DECIMAL of scale 0.
    pub fn integer(mantissa: i128) -> Decimal {
        Decimal { mantissa, scale: 0 }
    }

    /// Parses `[-+]digits[.digits]` (no exponent). `None` on anything else or overflow.
    pub fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (neg, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let (int, frac) = match body.split_once('.') {
            Some((i, f)) => (i, f),
            None => (body, ""),
        };
        if (int.is_empty() && frac.is_empty()) || frac.len() > MAX_DECIMAL_SCALE as usize {
            return None;
        }
        let mut m: i128 = 0;
        for c in int.bytes().chain(frac.bytes()) {
            if !c.is_ascii_digit() {
                return None;
            }
            m = m.checked_mul(10)?.checked_add((c - b'0') as i128)?;
        }
        Some(Decimal {
            mantissa: if neg { -m } else { m },
            scale: frac.len() as u8,
        })
    }

    /// The same number with `scale` digits after the point, rounding half away from zero;
    /// `None` on overflow.
    pub fn rescale(self, scale: u8) -> Option<Decimal> {
        let scale = scale.min(MAX_DECIMAL_SCALE);
        let mantissa = match scale.cmp(&self.scale) {
            Ordering::Equal => self.mantissa,
            Ordering::Greater => self
                .mantissa
                .checked_mul(10i128.checked_pow((scale - self.scale) as u32)?)?,
            Ordering::Less => {
                let div = 10i128.checked_pow((self.scale - scale) as u32)?;
                let q = self.mantissa / div;
                let r = self.mantissa % div;
                if r.abs() * 2 >= div {
                    q + self.mantissa.signum()
                } else {
                    q
                }
            }
        };
        Some(Decimal { mantissa, scale })
    }

    /// The value as a double (may lose precision).
    pub fn to_f64(self) -> f64 {
        self.mantissa as f64 / 10f64.powi(self.scale as i32)
    }

    /// Number of digits of the mantissa (its precision), at least 1.
    pub fn digits(self) -> u32 {
        let mut m = self.mantissa.unsigned_abs();
        let mut n = 1;
        while m >= 10 {
            m /= 10;
            n += 1;
        }
        n
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.mantissa < 0;
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = if digits.len() <= scale {
            format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits)
        } else {
            digits
        };
        let (int, frac) = padded.split_at(padded.len() - scale);
        if neg {
            f.write_str("-")?;
        }
        f.write_str(int)?;
        if scale > 0 {
            write!(f, ".{frac}")?;
        }
        Ok(())
    }
}

/// A DATETIME: a calendar date and a time of day with microseconds, no time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DateTime {
    /// 0..=9999.
    pub year: u16,
    /// 1..=12 (0 only in the zero date `0000-00-00 00:00:00`).
    pub month: u8,
    /// 1..=31, checked against the month (0 only in the zero date).
    pub day: u8,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=59.
    pub second: u8,
    /// 0..=999_999.
    pub micro: u32,
}

impl DateTime {
    /// A checked DATETIME; `None` when a field is out of range. The zero date (all fields 0)
    /// is allowed, as MySQL allows it.
    pub fn new(year: u16, month: u8, day: u8, hour: u8, minute: u8, second: u8, micro: u32) -> Option<DateTime> {
        let d = DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micro,
        };
        let zero_date = year == 0 && month == 0 && day == 0;
        let date_ok =
            zero_date || (year <= 9999 && (1..=12).contains(&month) && day >= 1 && day <= days_in(year, month));
        (date_ok && hour < 24 && minute < 60 && second < 60 && micro < 1_000_000).then_some(d)
    }

    /// Parses `YYYY-MM-DD[ HH:MM:SS[.f{1,6}]]` (a `T` may separate date and time).
    pub fn parse(s: &str) -> Option<DateTime> {
        let s = s.trim();
        let (date, time) = match s.find([' ', 'T']) {
            Some(i) => (&s[..i], s[i + 1..].trim_start()),
            None => (s, ""),
        };
        let mut dp = date.split('-');
        let year = num(dp.next()?, 4)?;
        let month = num(dp.next()?, 2)?;
        let day = num(dp.next()?, 2)?;
        if dp.next().is_some() {
            return None;
        }
        let (mut hour, mut minute, mut second, mut micro) = (0, 0, 0, 0);
        if !time.is_empty() {
            let (hms, frac) = match time.split_once('.') {
                Some((a, b)) => (a, Some(b)),
                None => (time, None),
            };
            let mut tp = hms.split(':');
            hour = num(tp.next()?, 2)?;
            minute = num(tp.next()?, 2)?;
            second = num(tp.next()?, 2)?;
            if tp.next().is_some() {
                return None;
            }
            if let Some(f) = frac {
                if f.is_empty() || f.len() > 6 || !f.bytes().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                micro = f.parse::<u32>().ok()? * 10u32.pow(6 - f.len() as u32);
            }
        }
        DateTime::new(
            year as u16,
            month as u8,
            day as u8,
            hour as u8,
            minute as u8,
            second as u8,
            micro,
        )
    }
}

fn num(s: &str, max_len: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_len || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn days_in(year: u16, month: u8) -> u8 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => 29,
        2 => 28,
        _ => 31,
    }
}

impl fmt::Display for DateTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )?;
        if self.micro != 0 {
            write!(f, ".{:06}", self.micro)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_print_and_rescale() {
        let d = Decimal::parse("-12.50").unwrap();
        assert_eq!((d.mantissa, d.scale), (-1250, 2));
        assert_eq!(d.to_string(), "-12.50");
        assert_eq!(Decimal::parse("0.05").unwrap().to_string(), "0.05");
        assert_eq!(Decimal::parse("7").unwrap().rescale(2).unwrap().to_string(), "7.00");
        assert_eq!(Decimal::parse("2.345").unwrap().rescale(2).unwrap().to_string(), "2.35");
        assert_eq!(
            Decimal::parse("-2.345").unwrap().rescale(2).unwrap().to_string(),
            "-2.35"
        );
        assert!(Decimal::parse("1e5").is_none());
        assert!(Decimal::parse("").is_none());
        assert!(Decimal::parse("-").is_none());
        assert!(Decimal::parse(&"9".repeat(40)).is_none());
    }

    #[test]
    fn datetimes_parse_check_and_print() {
        let d = DateTime::parse("2024-02-29 23:59:58.5").unwrap();
        assert_eq!(d.micro, 500_000);
        assert_eq!(d.to_string(), "2024-02-29 23:59:58.500000");
        assert_eq!(
            DateTime::parse("2023-01-02").unwrap().to_string(),
            "2023-01-02 00:00:00"
        );
        assert!(DateTime::parse("2023-02-29 00:00:00").is_none());
        assert!(DateTime::parse("2023-13-01").is_none());
        assert!(DateTime::parse("2023-01-01 24:00:00").is_none());
        assert!(DateTime::parse("0000-00-00 00:00:00").is_some());
        assert!(DateTime::parse("x").is_none());
    }

    #[test]
    fn doubles_print_like_mysql() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(0.1), "0.1");
        assert_eq!(format_double(-2.5), "-2.5");
    }
}
