//! COM_STMT_EXECUTE decoding: statement id, flags, NULL bitmap, parameter types and values
//! in the binary protocol.
//!
//! Invariants: decoding is bounds-checked throughout (a truncated or lying payload is
//! `Malformed`, never a panic) and allocates only as values are found in the payload; it is
//! all-or-nothing: on error neither the statement's saved parameter types nor its long-data
//! buffers are changed, on success the types sent (if any) replace the saved ones and the
//! long-data buffers of the parameters that used them are consumed.

use std::collections::HashMap;

use super::constants::FieldType;
use super::packet::PayloadReader;
use super::{malformed, ProtocolError};
use crate::value::{DateTime, Decimal, Value};

/// A parameter's type as the client bound it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamType {
    /// The type byte ([`FieldType`] as `u8`).
    pub field_type: u8,
    /// The unsigned flag (0x80 in the flags byte).
    pub unsigned: bool,
}

/// A decoded COM_STMT_EXECUTE.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecuteRequest {
    /// The statement.
    pub stmt_id: u32,
    /// Cursor flags (0 = no cursor).
    pub flags: u8,
    /// The parameters' values, one per parameter.
    pub params: Vec<Value>,
}

/// The statement id of a COM_STMT_EXECUTE payload (after the command byte), so the caller
/// can find the statement and its parameter count before decoding the rest.
pub fn execute_stmt_id(payload: &[u8]) -> Result<u32, ProtocolError> {
    PayloadReader::new(payload).u32()
}

/// Decodes a COM_STMT_EXECUTE payload (after the command byte) for a statement with
/// `num_params` parameters. `types` are the statement's saved parameter types: replaced when
/// the client sends new ones (`new_params_bound` = 1), used as they are otherwise (and then
/// they must be `num_params` long). A parameter with a buffer in `long_data` (from
/// COM_STMT_SEND_LONG_DATA) takes it as its value, whatever the NULL bitmap says.
pub fn decode_execute(
    payload: &[u8],
    num_params: usize,
    types: &mut Vec<ParamType>,
    long_data: &mut HashMap<u16, Vec<u8>>,
) -> Result<ExecuteRequest, ProtocolError> {
    let mut r = PayloadReader::new(payload);
    let stmt_id = r.u32()?;
    let flags = r.u8()?;
    let _iteration_count = r.u32()?; // always 1 in practice; not checked
    if num_params == 0 {
        return Ok(ExecuteRequest {
            stmt_id,
            flags,
            params: Vec::new(),
        });
    }
    let null_bitmap = r.bytes(num_params.div_ceil(8))?;
    let new_types = if r.u8()? != 0 {
        let raw = r.bytes(
            num_params
                .checked_mul(2)
                .ok_or_else(|| malformed("too many parameters"))?,
        )?;
        let sent: Vec<ParamType> = raw
            .chunks_exact(2)
            .map(|t| ParamType {
                field_type: t[0],
                unsigned: t[1] & 0x80 != 0,
            })
            .collect();
        Some(sent)
    } else if types.len() != num_params {
        return Err(malformed(format!(
            "parameter types not sent (have {} for {num_params} parameters)",
            types.len()
        )));
    } else {
        None
    };
    let bound = new_types.as_deref().unwrap_or(types);
    let mut params = Vec::with_capacity(num_params.min(payload.len()));
    let mut long = Vec::new();
    for (i, t) in bound.iter().enumerate() {
        let field_type = FieldType::try_from(t.field_type)?;
        if u16::try_from(i).is_ok_and(|k| long_data.contains_key(&k)) {
            long.push((i, field_type));
            params.push(Value::Null);
        } else if null_bitmap[i / 8] & (1 << (i % 8)) != 0 {
            params.push(Value::Null);
        } else {
            params.push(decode_value(&mut r, field_type, t.unsigned)?);
        }
    }
    // Success: commit.
    if let Some(sent) = new_types {
        *types = sent;
    }
    for (i, field_type) in long {
        let data = long_data.remove(&(i as u16)).unwrap_or_default();
        params[i] = match field_type {
            FieldType::Decimal | FieldType::NewDecimal => decimal_or_bytes(&data),
            _ => Value::Bytes(data),
        };
    }
    Ok(ExecuteRequest { stmt_id, flags, params })
}

fn decimal_or_bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b).ok().and_then(Decimal::parse) {
        Some(d) => Value::Decimal(d),
        None => Value::Bytes(b.to_vec()),
    }
}

/// One parameter's value in the binary protocol.
fn decode_value(r: &mut PayloadReader<'_>, t: FieldType, unsigned: bool) -> Result<Value, ProtocolError> {
    use FieldType::*;
    Ok(match t {
        Null => Value::Null,
        Tiny => {
            let b = r.u8()?;
            Value::Int(if unsigned { b as i64 } else { b as i8 as i64 })
        }
        Short | Year => {
            let v = r.u16()?;
            Value::Int(if unsigned { v as i64 } else { v as i16 as i64 })
        }
        Long | Int24 => {
            let v = r.u32()?;
            Value::Int(if unsigned { v as i64 } else { v as i32 as i64 })
        }
        LongLong => {
            let v = r.u64()?;
            match i64::try_from(v) {
                Ok(i) if unsigned => Value::Int(i),
                Err(_) if unsigned => Value::UInt(v),
                _ => Value::Int(v as i64),
            }
        }
        Float => {
            let f = f32::from_le_bytes(r.array()?);
            // Through the float's shortest text, so 0.1f32 becomes 0.1, not 0.100000001490116.
            Value::Double(if f.is_finite() {
                f.to_string().parse().unwrap_or(f as f64)
            } else {
                f as f64
            })
        }
        Double => Value::Double(f64::from_le_bytes(r.array()?)),
        Date | DateTime | Timestamp => Value::DateTime(decode_datetime(r)?),
        Time => Value::Bytes(decode_time(r)?.into_bytes()),
        Decimal | NewDecimal => decimal_or_bytes(r.lenenc_bytes()?),
        VarChar | Bit | Json | Enum | Set | TinyBlob | MediumBlob | LongBlob | Blob | VarString | String | Geometry => {
            Value::Bytes(r.lenenc_bytes()?.to_vec())
        }
    })
}

/// The binary DATE/DATETIME form: a length (0, 4, 7 or 11) and the fields present.
fn decode_datetime(r: &mut PayloadReader<'_>) -> Result<DateTime, ProtocolError> {
    let len = r.u8()?;
    if !matches!(len, 0 | 4 | 7 | 11) {
        return Err(malformed(format!("DATETIME of length {len}")));
    }
    let (mut y, mut mo, mut d, mut h, mut mi, mut s, mut us) = (0, 0, 0, 0, 0, 0, 0);
    if len >= 4 {
        (y, mo, d) = (r.u16()?, r.u8()?, r.u8()?);
    }
    if len >= 7 {
        (h, mi, s) = (r.u8()?, r.u8()?, r.u8()?);
    }
    if len == 11 {
        us = r.u32()?;
    }
    DateTime::new(y, mo, d, h, mi, s, us).ok_or_else(|| {
        malformed(format!(
            "invalid DATETIME {y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}"
        ))
    })
}

/// The binary TIME form (length 0, 8 or 12) as text: `[-]HH:MM:SS[.ffffff]`.
fn decode_time(r: &mut PayloadReader<'_>) -> Result<std::string::String, ProtocolError> {
    let len = r.u8()?;
    let (mut neg, mut days, mut h, mut m, mut s, mut us) = (false, 0u32, 0u8, 0u8, 0u8, 0u32);
    match len {
        0 => {}
        8 | 12 => {
            (neg, days, h, m, s) = (r.u8()? != 0, r.u32()?, r.u8()?, r.u8()?, r.u8()?);
            if len == 12 {
                us = r.u32()?;
            }
        }
        _ => return Err(malformed(format!("TIME of length {len}"))),
    }
    if h >= 24 || m >= 60 || s >= 60 || us >= 1_000_000 {
        return Err(malformed("invalid TIME"));
    }
    let hours = days as u64 * 24 + h as u64;
    let sign = if neg { "-" } else { "" };
    let frac = if us != 0 {
        format!(".{us:06}")
    } else {
        std::string::String::new()
    };
    Ok(format!("{sign}{hours:02}:{m:02}:{s:02}{frac}"))
}

#[cfg(test)]
#[path = "stmt_tests.rs"]
mod tests;
