//! Memcomparable key encoding: the byte order of encoded keys is the SQL order of the values,
//! so a primary-key range or an `ORDER BY` on the key is a plain engine scan.
//!
//! Invariants (`docs/format.md`, *SQL keys*), per column, in key column order:
//! - a nullable column starts with a marker byte, 0x00 for NULL (sorts first) and 0x01 for a
//!   value; a NOT NULL column has no marker;
//! - integers: 8 bytes big-endian, signed ones with the sign bit flipped;
//! - DOUBLE: 8 bytes, IEEE bits with the sign bit flipped for positives and all bits flipped
//!   for negatives; -0 is stored as +0;
//! - DECIMAL: the mantissa at the column's scale, 16 bytes big-endian with the sign bit flipped;
//! - strings and blobs: each 0x00 byte becomes 0x00 0xFF, then the terminator 0x00 0x01, so no
//!   encoding is a prefix of another and byte order is kept (binary collation);
//! - DATETIME: its packed form (see [`pack_datetime`]), 8 bytes big-endian.
//!
//! Decoding is total: malformed input is an error, never a panic.

use crate::sql::error::{SqlError, SqlResult};
use crate::sql::types::{ColumnType, TypeKind};
use crate::value::{DateTime, Decimal, Value};

/// Appends the encoding of `v` (already coerced to `ty`) to `out`.
pub fn encode(out: &mut Vec<u8>, v: &Value, ty: &ColumnType, nullable: bool) {
    if nullable {
        if v.is_null() {
            out.push(0x00);
            return;
        }
        out.push(0x01);
    }
    match (ty.kind, v) {
        (_, Value::Int(i)) if ty.is_integer() && !ty.unsigned => {
            out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes())
        }
        (_, Value::Int(i)) if ty.is_integer() => out.extend_from_slice(&(*i as u64).to_be_bytes()),
        (_, Value::UInt(u)) if ty.is_integer() => out.extend_from_slice(&u.to_be_bytes()),
        (TypeKind::Double, Value::Double(d)) => {
            let d = if *d == 0.0 { 0.0f64 } else { *d };
            let bits = d.to_bits();
            let enc = if bits >> 63 == 1 { !bits } else { bits ^ (1 << 63) };
            out.extend_from_slice(&enc.to_be_bytes());
        }
        (TypeKind::Decimal, Value::Decimal(d)) => {
            let m = d.rescale(ty.scale).map(|d| d.mantissa).unwrap_or(d.mantissa);
            out.extend_from_slice(&((m as u128) ^ (1 << 127)).to_be_bytes());
        }
        (TypeKind::DateTime, Value::DateTime(d)) => out.extend_from_slice(&pack_datetime(d).to_be_bytes()),
        (_, Value::Bytes(b)) => {
            for &c in b {
                out.push(c);
                if c == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0x00, 0x01]);
        }
        // A value of another kind than the column (not coerced): encode its text as a string,
        // which keeps the encoding total; callers coerce first, so this is not reached.
        (_, other) => encode(
            out,
            &Value::Bytes(other.to_text().unwrap_or_default()),
            &ColumnType::new(TypeKind::Blob),
            false,
        ),
    }
}

/// Packs a DATETIME into a u64 that orders like the DATETIME.
pub fn pack_datetime(d: &DateTime) -> u64 {
    let ymd = (d.year as u64 * 13 + d.month as u64) * 32 + d.day as u64;
    let hms = (d.hour as u64 * 60 + d.minute as u64) * 60 + d.second as u64;
    (ymd * 86_400 + hms) * 1_000_000 + d.micro as u64
}

/// The inverse of [`pack_datetime`]; `None` for a value no DATETIME packs to.
pub fn unpack_datetime(p: u64) -> Option<DateTime> {
    let micro = (p % 1_000_000) as u32;
    let secs = p / 1_000_000;
    let hms = secs % 86_400;
    let ymd = secs / 86_400;
    let day = (ymd % 32) as u8;
    let ym = ymd / 32;
    let month = (ym % 13) as u8;
    let year = u16::try_from(ym / 13).ok()?;
    DateTime::new(
        year,
        month,
        day,
        (hms / 3600) as u8,
        (hms / 60 % 60) as u8,
        (hms % 60) as u8,
        micro,
    )
}

fn corrupt(what: &str) -> SqlError {
    SqlError::new(
        1030,
        "HY000",
        format!("Got error from storage engine: corrupt key ({what})"),
    )
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> SqlResult<&'a [u8]> {
    if input.len() < n {
        return Err(corrupt("truncated"));
    }
    let (a, b) = input.split_at(n);
    *input = b;
    Ok(a)
}

fn take8(input: &mut &[u8]) -> SqlResult<[u8; 8]> {
    let mut a = [0u8; 8];
    a.copy_from_slice(take(input, 8)?);
    Ok(a)
}

/// Decodes one column from the front of `input`, advancing it.
pub fn decode(input: &mut &[u8], ty: &ColumnType, nullable: bool) -> SqlResult<Value> {
    if nullable {
        match take(input, 1)?[0] {
            0x00 => return Ok(Value::Null),
            0x01 => {}
            _ => return Err(corrupt("null marker")),
        }
    }
    Ok(match ty.kind {
        _ if ty.is_integer() => {
            let raw = u64::from_be_bytes(take8(input)?);
            if ty.unsigned {
                if raw > i64::MAX as u64 {
                    Value::UInt(raw)
                } else {
                    Value::Int(raw as i64)
                }
            } else {
                Value::Int((raw ^ (1 << 63)) as i64)
            }
        }
        TypeKind::Double => {
            let enc = u64::from_be_bytes(take8(input)?);
            let bits = if enc >> 63 == 1 { enc ^ (1 << 63) } else { !enc };
            Value::Double(f64::from_bits(bits))
        }
        TypeKind::Decimal => {
            let mut a = [0u8; 16];
            a.copy_from_slice(take(input, 16)?);
            Value::Decimal(Decimal {
                mantissa: (u128::from_be_bytes(a) ^ (1 << 127)) as i128,
                scale: ty.scale,
            })
        }
        TypeKind::DateTime => {
            Value::DateTime(unpack_datetime(u64::from_be_bytes(take8(input)?)).ok_or_else(|| corrupt("datetime"))?)
        }
        _ => {
            let mut out = Vec::new();
            loop {
                let c = take(input, 1)?[0];
                if c != 0 {
                    out.push(c);
                    continue;
                }
                match take(input, 1)?[0] {
                    0xFF => out.push(0),
                    0x01 => break,
                    _ => return Err(corrupt("string escape")),
                }
            }
            Value::Bytes(out)
        }
    })
}

/// The smallest key greater than every key that starts with `prefix` (for an exclusive upper
/// bound), or `None` when there is none (all 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn int(unsigned: bool) -> ColumnType {
        ColumnType {
            unsigned,
            ..ColumnType::new(TypeKind::BigInt)
        }
    }

    fn enc(v: &Value, ty: &ColumnType, nullable: bool) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, v, ty, nullable);
        out
    }

    fn roundtrip(v: &Value, ty: &ColumnType, nullable: bool) {
        let e = enc(v, ty, nullable);
        let mut s = &e[..];
        assert_eq!(&decode(&mut s, ty, nullable).unwrap(), v);
        assert!(s.is_empty());
    }

    proptest! {
        #[test]
        fn signed_integers_order_and_round_trip(a: i64, b: i64) {
            let t = int(false);
            prop_assert_eq!(enc(&Value::Int(a), &t, false).cmp(&enc(&Value::Int(b), &t, false)), a.cmp(&b));
            roundtrip(&Value::Int(a), &t, true);
        }

        #[test]
        fn strings_order_and_round_trip(a: Vec<u8>, b: Vec<u8>) {
            let t = ColumnType::new(TypeKind::VarChar);
            prop_assert_eq!(enc(&Value::Bytes(a.clone()), &t, false).cmp(&enc(&Value::Bytes(b.clone()), &t, false)), a.cmp(&b));
            roundtrip(&Value::Bytes(a), &t, false);
        }

        #[test]
        fn composite_keys_order_like_tuples(a: (Vec<u8>, i64), b: (Vec<u8>, i64)) {
            let s = ColumnType::new(TypeKind::VarChar);
            let i = int(false);
            let key = |(x, y): &(Vec<u8>, i64)| {
                let mut out = Vec::new();
                encode(&mut out, &Value::Bytes(x.clone()), &s, false);
                encode(&mut out, &Value::Int(*y), &i, false);
                out
            };
            prop_assert_eq!(key(&a).cmp(&key(&b)), a.cmp(&b));
        }

        #[test]
        fn doubles_order(a in -1e300f64..1e300, b in -1e300f64..1e300) {
            let t = ColumnType::new(TypeKind::Double);
            prop_assert_eq!(enc(&Value::Double(a), &t, false).cmp(&enc(&Value::Double(b), &t, false)), a.partial_cmp(&b).unwrap());
        }

        #[test]
        fn decimals_order(a in -10_000_000i128..10_000_000, b in -10_000_000i128..10_000_000) {
            let t = ColumnType { length: 10, scale: 2, ..ColumnType::new(TypeKind::Decimal) };
            let d = |m| Value::Decimal(Decimal { mantissa: m, scale: 2 });
            prop_assert_eq!(enc(&d(a), &t, false).cmp(&enc(&d(b), &t, false)), a.cmp(&b));
            roundtrip(&d(a), &t, false);
        }

        #[test]
        fn garbage_never_panics(bytes: Vec<u8>) {
            for t in [int(false), ColumnType::new(TypeKind::VarChar), ColumnType::new(TypeKind::DateTime), ColumnType::new(TypeKind::Decimal)] {
                let mut s = &bytes[..];
                let _ = decode(&mut s, &t, true);
            }
        }
    }

    #[test]
    fn nulls_sort_first_and_unsigned_keeps_its_range() {
        let t = int(true);
        assert!(enc(&Value::Null, &t, true) < enc(&Value::Int(0), &t, true));
        roundtrip(&Value::UInt(u64::MAX), &t, false);
        assert!(enc(&Value::Int(5), &t, false) < enc(&Value::UInt(u64::MAX), &t, false));
    }

    #[test]
    fn datetimes_order_and_round_trip() {
        let t = ColumnType::new(TypeKind::DateTime);
        let a = DateTime::parse("2023-12-31 23:59:59.999999").unwrap();
        let b = DateTime::parse("2024-01-01 00:00:00").unwrap();
        assert!(enc(&Value::DateTime(a), &t, false) < enc(&Value::DateTime(b), &t, false));
        roundtrip(&Value::DateTime(a), &t, false);
        roundtrip(
            &Value::DateTime(DateTime::parse("0000-00-00 00:00:00").unwrap()),
            &t,
            false,
        );
    }

    #[test]
    fn prefix_successor_bounds_every_extension() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
    }
}
