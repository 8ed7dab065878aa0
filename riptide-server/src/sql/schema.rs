//! A table's schema: columns, primary key, secondary indexes and schema versions, with its
//! catalog record encoding and the key layouts of its sub-tables.
//!
//! Invariants:
//! - `version_columns[v]` is the number of columns of schema version `v`; it never decreases
//!   (columns are only appended) and the last entry is `columns.len()`;
//! - primary-key columns are NOT NULL and never change; a table without a declared primary key
//!   has an empty `primary` and a hidden 8-byte row id as its key;
//! - index ids are unique within the table and never reused, so an index's sub-table name
//!   (`sql/<table id>/<index id>`) is never reused either;
//! - a secondary index key is the index columns' memcomparable encoding followed by the
//!   primary key's; a UNIQUE index key whose columns hold no NULL omits the primary key and
//!   stores it as the value instead (so a second row with the same values is found by a point
//!   read).

use crate::sql::error::SqlResult;
use crate::sql::keycodec;
use crate::sql::rowcodec::{get_tagged, put_bytes, put_tagged, put_varint, Reader};
use crate::sql::types::{ColumnType, TypeKind};
use crate::value::Value;

/// Catalog record format of a table schema.
pub const SCHEMA_FORMAT: u8 = 1;

/// One column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// Name, as declared.
    pub name: String,
    /// Type.
    pub ty: ColumnType,
    /// NULL allowed.
    pub nullable: bool,
    /// DEFAULT: `None` when the column has none.
    pub default: Option<Value>,
    /// AUTO_INCREMENT.
    pub auto_increment: bool,
}

/// Build state of a secondary index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexState {
    /// Maintained by every write and used by reads.
    Public,
    /// Being built by `CREATE INDEX`: maintained by every write, not yet used by reads.
    WriteOnly,
}

/// One secondary index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// Id within the table (names its sub-table).
    pub id: u32,
    /// Name.
    pub name: String,
    /// Column positions, in key order.
    pub columns: Vec<usize>,
    /// UNIQUE.
    pub unique: bool,
    /// Build state.
    pub state: IndexState,
}

/// A table's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    /// Table id (names its sub-tables), unique in the server and never reused.
    pub id: u64,
    /// Database name.
    pub db: String,
    /// Table name.
    pub name: String,
    /// Columns, in order.
    pub columns: Vec<ColumnDef>,
    /// Primary-key column positions; empty for a hidden row id.
    pub primary: Vec<usize>,
    /// Secondary indexes.
    pub indexes: Vec<IndexDef>,
    /// Current schema version (index into `version_columns`).
    pub version: u32,
    /// Columns of each schema version.
    pub version_columns: Vec<u32>,
    /// The next index id.
    pub next_index_id: u32,
}

impl TableSchema {
    /// Position of a column by name (case-insensitive, as MySQL's column names are).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// Columns of schema version `v`.
    pub fn columns_at_version(&self, v: u32) -> Option<usize> {
        self.version_columns.get(v as usize).map(|&n| n as usize)
    }

    /// Positions among the first `ncols` columns that are stored in the row value (all but
    /// the primary-key columns).
    pub fn stored_columns(&self, ncols: usize) -> impl Iterator<Item = usize> + '_ {
        (0..ncols).filter(move |c| !self.primary.contains(c))
    }

    /// The AUTO_INCREMENT column, if any.
    pub fn auto_increment_column(&self) -> Option<usize> {
        self.columns.iter().position(|c| c.auto_increment)
    }

    /// The engine sub-table holding the rows.
    pub fn primary_table_name(&self) -> String {
        format!("sql/{}", self.id)
    }

    /// The engine sub-table of index `id`.
    pub fn index_table_name(&self, id: u32) -> String {
        format!("sql/{}/{}", self.id, id)
    }

    /// The primary key of `row` (coerced values), or of the hidden row id.
    pub fn primary_key(&self, row: &[Value], row_id: Option<u64>) -> Vec<u8> {
        let mut key = Vec::with_capacity(16);
        if self.primary.is_empty() {
            key.extend_from_slice(&row_id.unwrap_or(0).to_be_bytes());
        } else {
            for &c in &self.primary {
                keycodec::encode(&mut key, &row[c], &self.columns[c].ty, false);
            }
        }
        key
    }

    /// Fills the primary-key columns of `row` from a primary key; returns the hidden row id
    /// for a table without a declared primary key.
    pub fn decode_primary_key(&self, key: &[u8], row: &mut [Value]) -> SqlResult<Option<u64>> {
        if self.primary.is_empty() {
            let r = Reader::new(key, "row id");
            let id: [u8; 8] = key.try_into().map_err(|_| r.corrupt("row id length"))?;
            return Ok(Some(u64::from_be_bytes(id)));
        }
        let mut s = key;
        for &c in &self.primary {
            row[c] = keycodec::decode(&mut s, &self.columns[c].ty, false)?;
        }
        if !s.is_empty() {
            return Err(Reader::new(key, "primary key").corrupt("trailing bytes"));
        }
        Ok(None)
    }

    /// The key and value of `row`'s entry in index `ix`; `pk` is the row's primary key.
    pub fn index_entry(&self, ix: &IndexDef, row: &[Value], pk: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut key = Vec::with_capacity(pk.len() + 16);
        let mut any_null = false;
        for &c in &ix.columns {
            any_null |= row[c].is_null();
            keycodec::encode(&mut key, &row[c], &self.columns[c].ty, self.columns[c].nullable);
        }
        if ix.unique && !any_null {
            (key, pk.to_vec())
        } else {
            key.extend_from_slice(pk);
            (key, Vec::new())
        }
    }

    /// Decodes an index entry: fills the index columns of `row` and returns the primary key.
    pub fn decode_index_entry(&self, ix: &IndexDef, key: &[u8], value: &[u8], row: &mut [Value]) -> SqlResult<Vec<u8>> {
        let mut s = key;
        let mut any_null = false;
        for &c in &ix.columns {
            row[c] = keycodec::decode(&mut s, &self.columns[c].ty, self.columns[c].nullable)?;
            any_null |= row[c].is_null();
        }
        let pk = if ix.unique && !any_null { value } else { s };
        if !self.primary.is_empty() {
            self.decode_primary_key(pk, row)?;
        }
        Ok(pk.to_vec())
    }

    /// The catalog record of this schema.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![SCHEMA_FORMAT];
        put_varint(&mut out, self.id as u128);
        put_bytes(&mut out, self.db.as_bytes());
        put_bytes(&mut out, self.name.as_bytes());
        put_varint(&mut out, self.columns.len() as u128);
        for c in &self.columns {
            put_bytes(&mut out, c.name.as_bytes());
            out.push(type_code(c.ty.kind));
            out.push(c.ty.unsigned as u8);
            put_varint(&mut out, c.ty.length as u128);
            out.push(c.ty.scale);
            out.push(c.nullable as u8 | (c.auto_increment as u8) << 1 | (c.default.is_some() as u8) << 2);
            if let Some(d) = &c.default {
                put_tagged(&mut out, d);
            }
        }
        put_varint(&mut out, self.primary.len() as u128);
        for &p in &self.primary {
            put_varint(&mut out, p as u128);
        }
        put_varint(&mut out, self.indexes.len() as u128);
        for ix in &self.indexes {
            put_varint(&mut out, ix.id as u128);
            put_bytes(&mut out, ix.name.as_bytes());
            out.push(ix.unique as u8 | ((ix.state == IndexState::WriteOnly) as u8) << 1);
            put_varint(&mut out, ix.columns.len() as u128);
            for &c in &ix.columns {
                put_varint(&mut out, c as u128);
            }
        }
        put_varint(&mut out, self.version as u128);
        put_varint(&mut out, self.version_columns.len() as u128);
        for &n in &self.version_columns {
            put_varint(&mut out, n as u128);
        }
        put_varint(&mut out, self.next_index_id as u128);
        out
    }

    /// Decodes a catalog record, checking the invariants above.
    pub fn decode(bytes: &[u8]) -> SqlResult<TableSchema> {
        let mut r = Reader::new(bytes, "table schema");
        if r.u8()? != SCHEMA_FORMAT {
            return Err(r.corrupt("schema format"));
        }
        let id = r.u64()?;
        let db = r.string()?;
        let name = r.string()?;
        let ncols = r.u32()? as usize;
        let mut columns = Vec::with_capacity(ncols.min(4096));
        for _ in 0..ncols {
            let cname = r.string()?;
            let kind = type_kind(r.u8()?).ok_or_else(|| r.corrupt("column type"))?;
            let unsigned = r.u8()? != 0;
            let length = r.u32()?;
            let scale = r.u8()?;
            let flags = r.u8()?;
            let default = if flags & 4 != 0 {
                Some(get_tagged(&mut r)?)
            } else {
                None
            };
            columns.push(ColumnDef {
                name: cname,
                ty: ColumnType {
                    kind,
                    unsigned,
                    length,
                    scale,
                },
                nullable: flags & 1 != 0,
                auto_increment: flags & 2 != 0,
                default,
            });
        }
        let col = |r: &mut Reader<'_>| -> SqlResult<usize> {
            let c = r.u32()? as usize;
            if c >= ncols {
                return Err(r.corrupt("column position"));
            }
            Ok(c)
        };
        let npk = r.u32()? as usize;
        let mut primary = Vec::new();
        for _ in 0..npk.min(ncols + 1) {
            primary.push(col(&mut r)?);
        }
        let nix = r.u32()? as usize;
        let mut indexes = Vec::new();
        for _ in 0..nix.min(4096) {
            let ixid = r.u32()?;
            let iname = r.string()?;
            let flags = r.u8()?;
            let n = r.u32()? as usize;
            let mut cols = Vec::new();
            for _ in 0..n.min(ncols + 1) {
                cols.push(col(&mut r)?);
            }
            indexes.push(IndexDef {
                id: ixid,
                name: iname,
                columns: cols,
                unique: flags & 1 != 0,
                state: if flags & 2 != 0 {
                    IndexState::WriteOnly
                } else {
                    IndexState::Public
                },
            });
        }
        let version = r.u32()?;
        let nver = r.u32()? as usize;
        let mut version_columns = Vec::new();
        for _ in 0..nver.min(1 << 16) {
            version_columns.push(r.u32()?);
        }
        let next_index_id = r.u32()?;
        let ok = version_columns.last() == Some(&(ncols as u32))
            && version as usize + 1 == version_columns.len()
            && version_columns.windows(2).all(|w| w[0] <= w[1])
            && primary.iter().all(|&p| !columns[p].nullable)
            && r.rest.is_empty();
        if !ok {
            return Err(r.corrupt("inconsistent schema"));
        }
        Ok(TableSchema {
            id,
            db,
            name,
            columns,
            primary,
            indexes,
            version,
            version_columns,
            next_index_id,
        })
    }
}

fn type_code(k: TypeKind) -> u8 {
    match k {
        TypeKind::TinyInt => 1,
        TypeKind::SmallInt => 2,
        TypeKind::MediumInt => 3,
        TypeKind::Int => 4,
        TypeKind::BigInt => 5,
        TypeKind::Double => 6,
        TypeKind::Decimal => 7,
        TypeKind::Char => 8,
        TypeKind::VarChar => 9,
        TypeKind::Text => 10,
        TypeKind::Blob => 11,
        TypeKind::DateTime => 12,
    }
}

fn type_kind(c: u8) -> Option<TypeKind> {
    Some(match c {
        1 => TypeKind::TinyInt,
        2 => TypeKind::SmallInt,
        3 => TypeKind::MediumInt,
        4 => TypeKind::Int,
        5 => TypeKind::BigInt,
        6 => TypeKind::Double,
        7 => TypeKind::Decimal,
        8 => TypeKind::Char,
        9 => TypeKind::VarChar,
        10 => TypeKind::Text,
        11 => TypeKind::Blob,
        12 => TypeKind::DateTime,
        _ => return None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sql::rowcodec::{decode_row_into, encode_row};

    /// sysbench's table: id INT PK AUTO_INCREMENT, k INT, c CHAR(120), pad CHAR(60), KEY k_1(k).
    pub(crate) fn sbtest() -> TableSchema {
        let col = |name: &str, kind, length, default: Option<Value>| ColumnDef {
            name: name.into(),
            ty: ColumnType {
                length,
                ..ColumnType::new(kind)
            },
            nullable: false,
            default,
            auto_increment: name == "id",
        };
        TableSchema {
            id: 7,
            db: "sbtest".into(),
            name: "sbtest1".into(),
            columns: vec![
                col("id", TypeKind::Int, 0, None),
                col("k", TypeKind::Int, 0, Some(Value::Int(0))),
                col("c", TypeKind::Char, 120, Some(Value::str(""))),
                col("pad", TypeKind::Char, 60, Some(Value::str(""))),
            ],
            primary: vec![0],
            indexes: vec![IndexDef {
                id: 1,
                name: "k_1".into(),
                columns: vec![1],
                unique: false,
                state: IndexState::Public,
            }],
            version: 0,
            version_columns: vec![4],
            next_index_id: 2,
        }
    }

    #[test]
    fn schema_records_round_trip_and_reject_damage() {
        let s = sbtest();
        let bytes = s.encode();
        assert_eq!(TableSchema::decode(&bytes).unwrap(), s);
        for cut in 0..bytes.len() {
            assert!(TableSchema::decode(&bytes[..cut]).is_err(), "prefix {cut} decoded");
        }
    }

    #[test]
    fn rows_round_trip_with_the_key_outside_the_value() {
        let s = sbtest();
        let row = vec![Value::Int(42), Value::Int(-5), Value::str("c-value"), Value::str("")];
        let pk = s.primary_key(&row, None);
        let value = encode_row(&s, &row);
        let mut back = vec![Value::Null; 4];
        s.decode_primary_key(&pk, &mut back).unwrap();
        decode_row_into(&s, &value, &mut back).unwrap();
        assert_eq!(back, row);
        let (ik, iv) = s.index_entry(&s.indexes[0], &row, &pk);
        let mut from_index = vec![Value::Null; 4];
        assert_eq!(
            s.decode_index_entry(&s.indexes[0], &ik, &iv, &mut from_index).unwrap(),
            pk
        );
        assert_eq!(&from_index[..2], &row[..2]);
    }

    #[test]
    fn an_old_row_reads_under_a_newer_schema_with_the_new_columns_defaults() {
        let old = sbtest();
        let row = vec![Value::Int(1), Value::Int(2), Value::str("c"), Value::str("p")];
        let value = encode_row(&old, &row);
        let mut new = old.clone();
        new.columns.push(ColumnDef {
            name: "added".into(),
            ty: ColumnType::new(TypeKind::BigInt),
            nullable: true,
            default: Some(Value::Int(99)),
            auto_increment: false,
        });
        new.version = 1;
        new.version_columns.push(5);
        let mut back = vec![Value::Null; 5];
        decode_row_into(&new, &value, &mut back).unwrap();
        assert_eq!(
            back[1..],
            [Value::Int(2), Value::str("c"), Value::str("p"), Value::Int(99)]
        );
        for cut in 0..value.len() {
            assert!(decode_row_into(&new, &value[..cut], &mut back).is_err());
        }
    }
}
