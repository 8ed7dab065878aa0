//! Row values as stored in a table's primary sub-table, and the small byte helpers the
//! catalog's records share with them.
//!
//! Row layout (`docs/format.md`, *SQL rows*), format byte 1:
//! `[1][schema version: varint][null bitmap][values]`, where the columns are those of that
//! schema version (the first `n` columns of the table; `ALTER TABLE ADD COLUMN` appends) minus
//! the primary-key columns, which live in the key. The bitmap has one bit per such column
//! (LSB first), set for NULL; NULLs have no value bytes. Values: integers as zigzag varints
//! (unsigned ones as plain varints), DOUBLE as 8 bytes little-endian, DECIMAL as the zigzag
//! varint of its mantissa at the column's scale, strings and blobs as a varint length and the
//! bytes, DATETIME as the varint of its packed form.
//!
//! Invariant: a row written under an older schema version decodes under the current one: the
//! columns added since take their defaults (seed 000 §3.1.1: no rewrite on ADD COLUMN).
//! Decoding is total: malformed bytes are an error, never a panic.

use crate::sql::error::{SqlError, SqlResult};
use crate::sql::keycodec::{pack_datetime, unpack_datetime};
use crate::sql::schema::TableSchema;
use crate::sql::types::{ColumnType, TypeKind};
use crate::value::{Decimal, Value};

/// Row format byte.
pub const ROW_FORMAT: u8 = 1;

/// Appends an unsigned LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u128);
    out.extend_from_slice(b);
}

fn zigzag(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

fn unzigzag(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

/// A reader over stored bytes; every method fails cleanly on truncated or bad input.
pub struct Reader<'a> {
    /// What is left to read.
    pub rest: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`; `what` names the record in errors.
    pub fn new(bytes: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { rest: bytes, what }
    }

    /// A corruption error naming the record.
    pub fn corrupt(&self, detail: &str) -> SqlError {
        SqlError::new(
            1030,
            "HY000",
            format!("Got error from storage engine: corrupt {} ({detail})", self.what),
        )
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> SqlResult<u8> {
        let (&b, rest) = self.rest.split_first().ok_or_else(|| self.corrupt("truncated"))?;
        self.rest = rest;
        Ok(b)
    }

    /// Reads `n` bytes.
    pub fn take(&mut self, n: usize) -> SqlResult<&'a [u8]> {
        if self.rest.len() < n {
            return Err(self.corrupt("truncated"));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    /// Reads a varint of at most 128 bits.
    pub fn varint(&mut self) -> SqlResult<u128> {
        let mut v: u128 = 0;
        for shift in (0..128).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7F) as u128) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt("varint too long"))
    }

    /// Reads a varint that must fit `u64`.
    pub fn u64(&mut self) -> SqlResult<u64> {
        u64::try_from(self.varint()?).map_err(|_| self.corrupt("varint overflow"))
    }

    /// Reads a varint that must fit `u32`.
    pub fn u32(&mut self) -> SqlResult<u32> {
        u32::try_from(self.varint()?).map_err(|_| self.corrupt("varint overflow"))
    }

    /// Reads a length-prefixed byte string.
    pub fn bytes(&mut self) -> SqlResult<&'a [u8]> {
        let n = usize::try_from(self.varint()?).map_err(|_| self.corrupt("length"))?;
        self.take(n)
    }

    /// Reads a length-prefixed UTF-8 string.
    pub fn string(&mut self) -> SqlResult<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.corrupt("utf-8"))
    }
}

/// Appends the untagged encoding of `v` for a column of type `ty` (`v` already coerced).
pub fn put_value(out: &mut Vec<u8>, v: &Value, ty: &ColumnType) {
    match v {
        Value::Null => {}
        Value::Int(i) if ty.is_integer() && ty.unsigned => put_varint(out, *i as u64 as u128),
        Value::Int(i) if ty.is_integer() => put_varint(out, zigzag(*i as i128)),
        Value::UInt(u) if ty.is_integer() => put_varint(out, *u as u128),
        Value::Double(d) if ty.kind == TypeKind::Double => out.extend_from_slice(&d.to_le_bytes()),
        Value::Decimal(d) if ty.kind == TypeKind::Decimal => {
            put_varint(out, zigzag(d.rescale(ty.scale).unwrap_or(*d).mantissa))
        }
        Value::DateTime(d) if ty.kind == TypeKind::DateTime => put_varint(out, pack_datetime(d) as u128),
        Value::Bytes(b) => put_bytes(out, b),
        other => put_bytes(out, &other.to_text().unwrap_or_default()),
    }
}

/// Reads one untagged value of type `ty`.
pub fn get_value(r: &mut Reader<'_>, ty: &ColumnType) -> SqlResult<Value> {
    Ok(match ty.kind {
        _ if ty.is_integer() && ty.unsigned => {
            let u = r.u64()?;
            if u > i64::MAX as u64 {
                Value::UInt(u)
            } else {
                Value::Int(u as i64)
            }
        }
        _ if ty.is_integer() => {
            let v = unzigzag(r.varint()?);
            Value::Int(i64::try_from(v).map_err(|_| r.corrupt("integer overflow"))?)
        }
        TypeKind::Double => {
            let mut a = [0u8; 8];
            a.copy_from_slice(r.take(8)?);
            Value::Double(f64::from_le_bytes(a))
        }
        TypeKind::Decimal => Value::Decimal(Decimal {
            mantissa: unzigzag(r.varint()?),
            scale: ty.scale,
        }),
        TypeKind::DateTime => Value::DateTime(unpack_datetime(r.u64()?).ok_or_else(|| r.corrupt("datetime"))?),
        _ => Value::Bytes(r.bytes()?.to_vec()),
    })
}

/// Tags of self-describing values (column defaults in the catalog).
const TAG_NULL: u8 = 0;
const TAG_INT: u8 = 1;
const TAG_UINT: u8 = 2;
const TAG_DOUBLE: u8 = 3;
const TAG_DECIMAL: u8 = 4;
const TAG_BYTES: u8 = 5;
const TAG_DATETIME: u8 = 6;

/// Appends a self-describing value (tag byte, then the value).
pub fn put_tagged(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(TAG_NULL),
        Value::Int(i) => {
            out.push(TAG_INT);
            put_varint(out, zigzag(*i as i128));
        }
        Value::UInt(u) => {
            out.push(TAG_UINT);
            put_varint(out, *u as u128);
        }
        Value::Double(d) => {
            out.push(TAG_DOUBLE);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Value::Decimal(d) => {
            out.push(TAG_DECIMAL);
            out.push(d.scale);
            put_varint(out, zigzag(d.mantissa));
        }
        Value::Bytes(b) => {
            out.push(TAG_BYTES);
            put_bytes(out, b);
        }
        Value::DateTime(d) => {
            out.push(TAG_DATETIME);
            put_varint(out, pack_datetime(d) as u128);
        }
    }
}

/// Reads a self-describing value.
pub fn get_tagged(r: &mut Reader<'_>) -> SqlResult<Value> {
    Ok(match r.u8()? {
        TAG_NULL => Value::Null,
        TAG_INT => Value::Int(i64::try_from(unzigzag(r.varint()?)).map_err(|_| r.corrupt("integer"))?),
        TAG_UINT => Value::UInt(r.u64()?),
        TAG_DOUBLE => {
            let mut a = [0u8; 8];
            a.copy_from_slice(r.take(8)?);
            Value::Double(f64::from_le_bytes(a))
        }
        TAG_DECIMAL => {
            let scale = r.u8()?;
            Value::Decimal(Decimal {
                scale,
                mantissa: unzigzag(r.varint()?),
            })
        }
        TAG_BYTES => Value::Bytes(r.bytes()?.to_vec()),
        TAG_DATETIME => Value::DateTime(unpack_datetime(r.u64()?).ok_or_else(|| r.corrupt("datetime"))?),
        _ => return Err(r.corrupt("value tag")),
    })
}

/// Encodes the non-key columns of `row` (a full row of the current schema) as a row value.
pub fn encode_row(schema: &TableSchema, row: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + row.len() * 8);
    out.push(ROW_FORMAT);
    put_varint(&mut out, schema.version as u128);
    let stored: Vec<usize> = schema.stored_columns(schema.columns.len()).collect();
    let bitmap_at = out.len();
    out.resize(bitmap_at + stored.len().div_ceil(8), 0);
    for (i, &c) in stored.iter().enumerate() {
        if row[c].is_null() {
            out[bitmap_at + i / 8] |= 1 << (i % 8);
        } else {
            put_value(&mut out, &row[c], &schema.columns[c].ty);
        }
    }
    out
}

/// Fills the non-key columns of `row` (which has one slot per column of the current schema)
/// from a stored row value, upgrading a row of an older schema version with defaults.
pub fn decode_row_into(schema: &TableSchema, bytes: &[u8], row: &mut [Value]) -> SqlResult<()> {
    let mut r = Reader::new(bytes, "row");
    if r.u8()? != ROW_FORMAT {
        return Err(r.corrupt("row format"));
    }
    let version = r.u32()?;
    let ncols = schema
        .columns_at_version(version)
        .ok_or_else(|| r.corrupt("schema version"))?;
    let stored: Vec<usize> = schema.stored_columns(ncols).collect();
    let bitmap = r.take(stored.len().div_ceil(8))?;
    for (i, &c) in stored.iter().enumerate() {
        row[c] = if bitmap[i / 8] & (1 << (i % 8)) != 0 {
            Value::Null
        } else {
            get_value(&mut r, &schema.columns[c].ty)?
        };
    }
    if !r.rest.is_empty() {
        return Err(r.corrupt("trailing bytes"));
    }
    for (slot, col) in row.iter_mut().zip(&schema.columns).skip(ncols) {
        *slot = col.default.clone().unwrap_or(Value::Null);
    }
    Ok(())
}
