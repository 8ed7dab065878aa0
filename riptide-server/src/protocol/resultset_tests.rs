//! Unit tests of `resultset.rs` (a separate file to keep both short): expected bytes are
//! written by hand from the protocol documentation.

use super::*;
use crate::protocol::status::SERVER_STATUS_AUTOCOMMIT as AC;
use crate::protocol::test_util::{mem_conn, parse_packets, written, MemStream};
use crate::value::Decimal as Dec;

fn conn() -> Connection<MemStream> {
    let mut c = mem_conn(Vec::new(), 1024);
    c.seq = 1; // as after a command
    c
}

async fn output(mut c: Connection<MemStream>) -> Vec<(u8, Vec<u8>)> {
    c.flush().await.unwrap();
    parse_packets(written(&c))
}

fn col(ft: FieldType, flags: u16) -> ColumnInfo {
    let mut c = ColumnInfo::new("c", ft);
    c.flags |= flags;
    c
}

/// The value bytes of a one-column binary row holding `v` (after the header and bitmap).
async fn binary_value(ft: FieldType, flags: u16, v: Value) -> Vec<u8> {
    let mut c = conn();
    c.write_binary_resultset(&[col(ft, flags)], &[vec![v]], AC);
    let pk = output(c).await;
    assert_eq!(pk.len(), 5);
    let row = &pk[3].1;
    assert_eq!(row[0], 0);
    row[2..].to_vec()
}

#[tokio::test]
async fn text_resultset_bytes() {
    let mut c = conn();
    let column = ColumnInfo {
        schema: "db".into(),
        table: "t".into(),
        name: "a".into(),
        field_type: FieldType::Long,
        length: 11,
        flags: flag::NUM | flag::BINARY,
        decimals: 0,
        charset: charset::BINARY,
    };
    c.write_text_resultset(&[column], &[vec![Value::Int(1)], vec![Value::Null]], AC);
    c.flush().await.unwrap();
    let mut want = vec![1, 0, 0, 1, 1];
    want.extend([
        0x1c, 0, 0, 2, 3, b'd', b'e', b'f', 2, b'd', b'b', 1, b't', 1, b't', 1, b'a', 1, b'a',
    ]);
    want.extend([0x0c, 0x3f, 0, 11, 0, 0, 0, 3, 0x80, 0x80, 0, 0, 0]);
    want.extend([5, 0, 0, 3, 0xfe, 0, 0, 2, 0]);
    want.extend([2, 0, 0, 4, 1, b'1']);
    want.extend([1, 0, 0, 5, 0xfb]);
    want.extend([5, 0, 0, 6, 0xfe, 0, 0, 2, 0]);
    assert_eq!(written(&c), &want[..]);
}

#[tokio::test]
async fn text_values_and_short_rows() {
    let mut c = conn();
    let cols = [
        col(FieldType::VarString, 0),
        col(FieldType::Double, 0),
        col(FieldType::LongLong, 0),
    ];
    let rows = vec![
        vec![Value::str("x"), Value::Double(2.5), Value::UInt(u64::MAX)],
        vec![Value::Int(-7)],
    ];
    c.write_text_resultset(&cols, &rows, AC);
    let pk = output(c).await;
    assert_eq!(pk.len(), 1 + 3 + 1 + 2 + 1);
    assert_eq!(pk[5].1, b"\x01x\x032.5\x1418446744073709551615");
    assert_eq!(pk[6].1, b"\x02-7\xfb\xfb");
}

#[tokio::test]
async fn ok_err_eof_bytes() {
    let mut c = conn();
    c.write_ok(&OkInfo {
        affected_rows: 1,
        last_insert_id: 300,
        status: 3,
        warnings: 1,
        info: "x".into(),
    });
    c.write_ok(&OkInfo::default());
    c.write_err(1062, "23000", "dup");
    c.write_err(1, "bad", &format!("a{}", "é".repeat(300)));
    c.write_eof(0x22);
    let pk = output(c).await;
    assert_eq!(pk[0], (1, vec![0, 1, 0xfc, 0x2c, 1, 3, 0, 1, 0, 1, b'x']));
    assert_eq!(pk[1], (2, vec![0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(pk[2].1, b"\xff\x26\x04#23000dup");
    assert_eq!(&pk[3].1[..9], b"\xff\x01\x00#HY000");
    assert_eq!(pk[3].1.len(), 9 + 511, "cut at a character boundary");
    assert!(std::str::from_utf8(&pk[3].1[9..]).is_ok());
    assert_eq!(pk[4], (5, vec![0xfe, 0, 0, 0x22, 0]));
}

#[tokio::test]
async fn binary_integers_saturate_to_the_column() {
    use FieldType::*;
    let u = flag::UNSIGNED;
    assert_eq!(binary_value(Tiny, 0, Value::Int(-1)).await, [0xff]);
    assert_eq!(binary_value(Tiny, 0, Value::Int(300)).await, [0x7f]);
    assert_eq!(binary_value(Tiny, u, Value::Int(300)).await, [0xff]);
    assert_eq!(binary_value(Tiny, u, Value::Int(-5)).await, [0]);
    assert_eq!(binary_value(Short, 0, Value::Int(0x1234)).await, [0x34, 0x12]);
    assert_eq!(binary_value(Year, u, Value::Int(2024)).await, [0xe8, 0x07]);
    assert_eq!(binary_value(Long, 0, Value::Int(-2)).await, [0xfe, 0xff, 0xff, 0xff]);
    assert_eq!(binary_value(Int24, 0, Value::Int(1)).await, [1, 0, 0, 0]);
    assert_eq!(binary_value(LongLong, u, Value::UInt(u64::MAX)).await, [0xff; 8]);
    assert_eq!(
        binary_value(LongLong, 0, Value::UInt(u64::MAX)).await,
        i64::MAX.to_le_bytes()
    );
    assert_eq!(
        binary_value(LongLong, 0, Value::Int(i64::MIN)).await,
        i64::MIN.to_le_bytes()
    );
    assert_eq!(binary_value(LongLong, 0, Value::str(" 42 ")).await, 42i64.to_le_bytes());
    assert_eq!(binary_value(LongLong, 0, Value::str("2.5")).await, 3i64.to_le_bytes());
    assert_eq!(binary_value(LongLong, 0, Value::str("zz")).await, 0i64.to_le_bytes());
    assert_eq!(binary_value(Long, 0, Value::Double(-2.5)).await, (-3i32).to_le_bytes());
    assert_eq!(binary_value(Long, 0, Value::Double(f64::NAN)).await, [0; 4]);
    let d = Dec::parse("7.5").unwrap();
    assert_eq!(binary_value(Long, 0, Value::Decimal(d)).await, 8i32.to_le_bytes());
}

#[tokio::test]
async fn binary_floats_strings_and_decimals() {
    use FieldType::*;
    assert_eq!(binary_value(Float, 0, Value::Double(1.5)).await, 1.5f32.to_le_bytes());
    assert_eq!(binary_value(Double, 0, Value::Int(3)).await, 3.0f64.to_le_bytes());
    assert_eq!(binary_value(Double, 0, Value::str("0.25")).await, 0.25f64.to_le_bytes());
    let d = Dec::parse("12.50").unwrap();
    assert_eq!(binary_value(NewDecimal, 0, Value::Decimal(d)).await, b"\x0512.50");
    assert_eq!(binary_value(NewDecimal, 0, Value::Double(0.5)).await, b"\x030.5");
    assert_eq!(binary_value(VarString, 0, Value::str("hi")).await, b"\x02hi");
    assert_eq!(binary_value(String, 0, Value::Int(7)).await, b"\x017");
    assert_eq!(binary_value(VarChar, 0, Value::UInt(8)).await, b"\x018");
    let long = vec![b'z'; 300];
    let mut want = vec![0xfc, 0x2c, 0x01];
    want.extend(&long);
    assert_eq!(binary_value(Blob, 0, Value::Bytes(long)).await, want);
}

#[tokio::test]
async fn binary_dates_and_times() {
    use FieldType::*;
    let dt = |s: &str| Value::DateTime(crate::value::DateTime::parse(s).unwrap());
    assert_eq!(
        binary_value(DateTime, 0, dt("2024-02-29 23:59:58.5")).await,
        [11, 0xe8, 7, 2, 29, 23, 59, 58, 0x20, 0xa1, 0x07, 0]
    );
    assert_eq!(
        binary_value(Date, 0, dt("2024-02-29 23:59:58.5")).await,
        [4, 0xe8, 7, 2, 29]
    );
    assert_eq!(binary_value(DateTime, 0, dt("2023-01-02")).await, [4, 0xe7, 7, 1, 2]);
    assert_eq!(binary_value(DateTime, 0, dt("0000-00-00 00:00:00")).await, [0]);
    assert_eq!(
        binary_value(Timestamp, 0, Value::str("2023-01-02 03:04:05")).await,
        [7, 0xe7, 7, 1, 2, 3, 4, 5]
    );
    assert_eq!(binary_value(DateTime, 0, Value::str("garbage")).await, [0]);
    assert_eq!(binary_value(DateTime, 0, Value::Int(5)).await, [0]);
    assert_eq!(
        binary_value(Time, 0, Value::str("-25:01:02")).await,
        [8, 1, 1, 0, 0, 0, 1, 1, 2]
    );
    assert_eq!(
        binary_value(Time, 0, Value::str("1:02:03.5")).await,
        [12, 0, 0, 0, 0, 0, 1, 2, 3, 0x20, 0xa1, 0x07, 0]
    );
    assert_eq!(binary_value(Time, 0, Value::str("00:00:00")).await, [0]);
    assert_eq!(binary_value(Time, 0, Value::str("1:99:00")).await, [0]);
    assert_eq!(
        binary_value(Time, 0, dt("2023-01-02 10:11:12")).await,
        [8, 0, 0, 0, 0, 0, 10, 11, 12]
    );
}

#[tokio::test]
async fn binary_null_bitmap() {
    let mut c = conn();
    let cols: Vec<ColumnInfo> = (0..7).map(|_| col(FieldType::Tiny, 0)).collect();
    let mut row: Vec<Value> = (0..7).map(Value::Int).collect();
    row[1] = Value::Null;
    row[6] = Value::Null;
    c.write_binary_resultset(&cols, &[row, vec![Value::Int(9)]], AC);
    let mut null_type = conn();
    null_type.write_binary_resultset(&[col(FieldType::Null, 0)], &[vec![Value::Int(1)]], AC);
    let pk = output(c).await;
    assert_eq!(pk.len(), 1 + 7 + 1 + 2 + 1);
    assert_eq!(pk[9].1, [0, 0x08, 0x01, 0, 2, 3, 4, 5]);
    assert_eq!(pk[10].1, [0, 0xf8, 0x01, 9], "a short row is padded with NULLs");
    assert_eq!(output(null_type).await[3].1, [0, 0x04]);
}

#[tokio::test]
async fn prepare_ok_and_field_list() {
    let mut c = conn();
    c.write_prepare_ok(7, 2, &[col(FieldType::Long, 0)]);
    c.write_eof(3);
    c.write_column_definitions_for_field_list(&[col(FieldType::VarString, 0)]);
    c.write_prepare_ok(8, 0, &[]);
    c.write_text_resultset(&[], &[], AC);
    let pk = output(c).await;
    assert_eq!(pk.len(), 1 + 2 + 1 + 1 + 1 + 1 + 2 + 1 + 1);
    assert_eq!(pk[0], (1, vec![0, 7, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0]));
    let seqs: Vec<u8> = pk.iter().map(|p| p.0).collect();
    assert_eq!(seqs, (1..=11).collect::<Vec<u8>>());
    assert_eq!(&pk[1].1[..7], b"\x03def\0\0\0", "parameter: no schema or table");
    assert_eq!(pk[1].1[pk[1].1.len() - 6], FieldType::VarString as u8);
    assert_eq!(pk[3].1[0], 0xfe);
    assert_eq!(pk[5].1[0], 0xfe);
    assert_eq!(*pk[7].1.last().unwrap(), 0xfb, "field list: default value NULL");
    assert_eq!(pk[8].1, [0xfe, 0, 0, 3, 0], "field list EOF takes the last status");
    assert_eq!(pk[9].1, [0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(pk[10].1[0], 0, "no columns: an OK");
}
