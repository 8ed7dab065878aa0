//! Column types: what a column accepts ([`ColumnType::coerce`]), how it is shown to clients
//! ([`ColumnType::field_type`]) and printed in `SHOW CREATE TABLE`.
//!
//! Invariants: a value that passed `coerce` fits its column: integers within the type's range,
//! strings within the declared length in characters, decimals within precision and scale,
//! CHAR without trailing spaces (MySQL strips them on store). Strict mode only: a value that
//! does not fit is an error (1264, 1406, 1366), never silently truncated.

use crate::protocol::FieldType;
use crate::sql::error::SqlError;
use crate::value::{DateTime, Decimal, Value};

/// The kinds of column type this server stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeKind {
    /// TINYINT (1 byte).
    TinyInt,
    /// SMALLINT (2 bytes).
    SmallInt,
    /// MEDIUMINT (3 bytes).
    MediumInt,
    /// INT / INTEGER (4 bytes).
    Int,
    /// BIGINT (8 bytes).
    BigInt,
    /// DOUBLE / FLOAT / REAL (stored as a double).
    Double,
    /// DECIMAL(precision, scale).
    Decimal,
    /// CHAR(n): trailing spaces stripped.
    Char,
    /// VARCHAR(n).
    VarChar,
    /// TEXT (up to 64 KiB; MEDIUMTEXT/LONGTEXT raise the limit).
    Text,
    /// BLOB (bytes; the same limits as TEXT).
    Blob,
    /// DATETIME.
    DateTime,
}

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnType {
    /// The kind.
    pub kind: TypeKind,
    /// Integers: UNSIGNED.
    pub unsigned: bool,
    /// CHAR/VARCHAR: length in characters; TEXT/BLOB: length in bytes; DECIMAL: precision.
    pub length: u32,
    /// DECIMAL: scale.
    pub scale: u8,
}

impl ColumnType {
    /// A type of `kind` with no length.
    pub fn new(kind: TypeKind) -> ColumnType {
        ColumnType {
            kind,
            unsigned: false,
            length: 0,
            scale: 0,
        }
    }

    /// True for the integer kinds.
    pub fn is_integer(&self) -> bool {
        matches!(
            self.kind,
            TypeKind::TinyInt | TypeKind::SmallInt | TypeKind::MediumInt | TypeKind::Int | TypeKind::BigInt
        )
    }

    /// True for CHAR, VARCHAR and TEXT.
    pub fn is_text(&self) -> bool {
        matches!(self.kind, TypeKind::Char | TypeKind::VarChar | TypeKind::Text)
    }

    /// The integer range of an integer type.
    fn int_range(&self) -> (i128, i128) {
        let bits = match self.kind {
            TypeKind::TinyInt => 8,
            TypeKind::SmallInt => 16,
            TypeKind::MediumInt => 24,
            TypeKind::Int => 32,
            _ => 64,
        };
        if self.unsigned {
            (0, (1i128 << bits) - 1)
        } else {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        }
    }

    /// Converts `v` into this type's canonical value for storage (MySQL's strict mode);
    /// `column` names the column in errors.
    pub fn coerce(&self, v: Value, column: &str) -> Result<Value, SqlError> {
        if v.is_null() {
            return Ok(Value::Null);
        }
        let out_of_range = || SqlError::out_of_range(column);
        match self.kind {
            TypeKind::TinyInt | TypeKind::SmallInt | TypeKind::MediumInt | TypeKind::Int | TypeKind::BigInt => {
                let n: i128 = match v {
                    Value::Int(i) => i as i128,
                    Value::UInt(u) => u as i128,
                    Value::Double(d) => {
                        let r = d.round();
                        if !r.is_finite() || r.abs() > 1.8e19 {
                            return Err(out_of_range());
                        }
                        r as i128
                    }
                    Value::Decimal(d) => d.rescale(0).ok_or_else(out_of_range)?.mantissa,
                    Value::Bytes(b) => parse_int_text(&b).ok_or_else(|| SqlError::bad_value("integer", &b, column))?,
                    Value::DateTime(_) => return Err(SqlError::bad_value("integer", b"datetime", column)),
                    Value::Null => unreachable!("handled above"),
                };
                let (lo, hi) = self.int_range();
                if n < lo || n > hi {
                    return Err(out_of_range());
                }
                Ok(if n > i64::MAX as i128 {
                    Value::UInt(n as u64)
                } else {
                    Value::Int(n as i64)
                })
            }
            TypeKind::Double => Ok(Value::Double(
                to_f64(&v).ok_or_else(|| SqlError::bad_value("double", &text_of(&v), column))?,
            )),
            TypeKind::Decimal => {
                let d = match &v {
                    Value::Int(_) | Value::UInt(_) => v.as_decimal().expect("an integer"),
                    Value::Double(f) => {
                        Decimal::parse(&format!("{:.*}", self.scale as usize, f)).ok_or_else(out_of_range)?
                    }
                    Value::Decimal(d) => *d,
                    Value::Bytes(b) => std::str::from_utf8(b)
                        .ok()
                        .and_then(Decimal::parse)
                        .ok_or_else(|| SqlError::bad_value("decimal", b, column))?,
                    _ => return Err(SqlError::bad_value("decimal", &text_of(&v), column)),
                };
                let d = d.rescale(self.scale).ok_or_else(out_of_range)?;
                if d.digits() > self.length.max(1) {
                    return Err(out_of_range());
                }
                Ok(Value::Decimal(d))
            }
            TypeKind::Char | TypeKind::VarChar | TypeKind::Text | TypeKind::Blob => {
                let mut b = text_of(&v);
                if self.kind != TypeKind::Blob && std::str::from_utf8(&b).is_err() {
                    return Err(SqlError::bad_value("string", &b, column));
                }
                if self.kind == TypeKind::Char {
                    while b.last() == Some(&b' ') {
                        b.pop();
                    }
                }
                let len = match self.kind {
                    TypeKind::Char | TypeKind::VarChar => {
                        std::str::from_utf8(&b).map(|s| s.chars().count()).unwrap_or(b.len())
                    }
                    _ => b.len(),
                };
                if len > self.length as usize {
                    return Err(SqlError::data_too_long(column));
                }
                Ok(Value::Bytes(b))
            }
            TypeKind::DateTime => match v {
                Value::DateTime(d) => Ok(Value::DateTime(d)),
                Value::Bytes(b) => std::str::from_utf8(&b)
                    .ok()
                    .and_then(DateTime::parse)
                    .map(Value::DateTime)
                    .ok_or_else(|| SqlError::bad_value("datetime", &b, column)),
                other => Err(SqlError::bad_value("datetime", &text_of(&other), column)),
            },
        }
    }

    /// The protocol type of the column in result sets.
    pub fn field_type(&self) -> FieldType {
        match self.kind {
            TypeKind::TinyInt => FieldType::Tiny,
            TypeKind::SmallInt => FieldType::Short,
            TypeKind::MediumInt => FieldType::Int24,
            TypeKind::Int => FieldType::Long,
            TypeKind::BigInt => FieldType::LongLong,
            TypeKind::Double => FieldType::Double,
            TypeKind::Decimal => FieldType::NewDecimal,
            TypeKind::Char => FieldType::String,
            TypeKind::VarChar => FieldType::VarString,
            TypeKind::Text | TypeKind::Blob => FieldType::Blob,
            TypeKind::DateTime => FieldType::DateTime,
        }
    }

    /// Display length for column metadata (as MySQL reports it for utf8mb4: 4 bytes per char).
    pub fn display_length(&self) -> u32 {
        match self.kind {
            TypeKind::TinyInt => 4,
            TypeKind::SmallInt => 6,
            TypeKind::MediumInt => 9,
            TypeKind::Int => 11,
            TypeKind::BigInt => 20,
            TypeKind::Double => 22,
            TypeKind::Decimal => self.length + 2,
            TypeKind::Char | TypeKind::VarChar => self.length.saturating_mul(4),
            TypeKind::Text | TypeKind::Blob => self.length,
            TypeKind::DateTime => 19,
        }
    }

    /// The type as `SHOW CREATE TABLE` prints it.
    pub fn sql(&self) -> String {
        let base = match self.kind {
            TypeKind::TinyInt => "tinyint".to_string(),
            TypeKind::SmallInt => "smallint".to_string(),
            TypeKind::MediumInt => "mediumint".to_string(),
            TypeKind::Int => "int".to_string(),
            TypeKind::BigInt => "bigint".to_string(),
            TypeKind::Double => "double".to_string(),
            TypeKind::Decimal => format!("decimal({},{})", self.length, self.scale),
            TypeKind::Char => format!("char({})", self.length),
            TypeKind::VarChar => format!("varchar({})", self.length),
            TypeKind::Text => match self.length {
                0..=65535 => "text".to_string(),
                65536..=16777215 => "mediumtext".to_string(),
                _ => "longtext".to_string(),
            },
            TypeKind::Blob => match self.length {
                0..=65535 => "blob".to_string(),
                65536..=16777215 => "mediumblob".to_string(),
                _ => "longblob".to_string(),
            },
            TypeKind::DateTime => "datetime".to_string(),
        };
        if self.unsigned {
            format!("{base} unsigned")
        } else {
            base
        }
    }
}

/// The bytes of a value as text (for string columns and messages).
pub fn text_of(v: &Value) -> Vec<u8> {
    v.to_text().unwrap_or_default()
}

/// Integer text as MySQL reads it for an integer column: optional sign, digits, surrounding
/// spaces; a decimal point rounds.
fn parse_int_text(b: &[u8]) -> Option<i128> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if let Ok(n) = s.parse::<i128>() {
        return Some(n);
    }
    Decimal::parse(s).and_then(|d| d.rescale(0)).map(|d| d.mantissa)
}

/// A value as a double, when it is a number or numeric text.
pub fn to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        Value::Double(d) => Some(*d),
        Value::Decimal(d) => Some(d.to_f64()),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(kind: TypeKind, length: u32) -> ColumnType {
        ColumnType {
            length,
            ..ColumnType::new(kind)
        }
    }

    #[test]
    fn integers_are_range_checked_per_width_and_sign() {
        let int = ty(TypeKind::Int, 0);
        assert_eq!(int.coerce(Value::Int(5), "k").unwrap(), Value::Int(5));
        assert_eq!(int.coerce(Value::str(" 42 "), "k").unwrap(), Value::Int(42));
        assert_eq!(int.coerce(Value::str("0"), "k").unwrap(), Value::Int(0));
        assert_eq!(int.coerce(Value::Int(1 << 31), "k").unwrap_err().code, 1264);
        let tiny_u = ColumnType {
            unsigned: true,
            ..ty(TypeKind::TinyInt, 0)
        };
        assert_eq!(tiny_u.coerce(Value::Int(-1), "k").unwrap_err().code, 1264);
        assert_eq!(tiny_u.coerce(Value::Int(255), "k").unwrap(), Value::Int(255));
        let big_u = ColumnType {
            unsigned: true,
            ..ty(TypeKind::BigInt, 0)
        };
        assert_eq!(big_u.coerce(Value::UInt(u64::MAX), "k").unwrap(), Value::UInt(u64::MAX));
        assert_eq!(int.coerce(Value::str("abc"), "k").unwrap_err().code, 1366);
    }

    #[test]
    fn strings_are_checked_in_characters_and_char_drops_trailing_spaces() {
        let c = ty(TypeKind::Char, 3);
        assert_eq!(c.coerce(Value::str("ab  "), "c").unwrap(), Value::str("ab"));
        assert_eq!(c.coerce(Value::str("äöü"), "c").unwrap(), Value::str("äöü"));
        assert_eq!(c.coerce(Value::str("abcd"), "c").unwrap_err().code, 1406);
        assert_eq!(c.coerce(Value::Int(12), "c").unwrap(), Value::str("12"));
        assert_eq!(c.coerce(Value::Bytes(vec![0xff]), "c").unwrap_err().code, 1366);
    }

    #[test]
    fn decimals_round_to_scale_and_check_precision() {
        let d = ColumnType {
            scale: 2,
            ..ty(TypeKind::Decimal, 5)
        };
        assert_eq!(
            d.coerce(Value::str("1.005"), "d").unwrap(),
            Value::Decimal(Decimal {
                mantissa: 101,
                scale: 2
            })
        );
        assert_eq!(d.coerce(Value::Int(999), "d").unwrap().to_text().unwrap(), b"999.00");
        assert_eq!(d.coerce(Value::Int(1000), "d").unwrap_err().code, 1264);
    }
}
