//! Unit tests of `stmt.rs`: COM_STMT_EXECUTE payloads written by hand.

use proptest::prelude::*;

use super::*;

const UNSIGNED: u8 = 0x80;

/// stmt_id 7, no cursor, iteration count 1, then `rest`.
fn payload(rest: &[u8]) -> Vec<u8> {
    let mut p = vec![7, 0, 0, 0, 0, 1, 0, 0, 0];
    p.extend_from_slice(rest);
    p
}

fn decode(p: &[u8], n: usize, types: &mut Vec<ParamType>) -> Result<Vec<Value>, ProtocolError> {
    decode_execute(p, n, types, &mut HashMap::new()).map(|e| e.params)
}

#[test]
fn types_bound_on_first_execute_are_reused() {
    let mut types = Vec::new();
    // 2 params: BIGINT UNSIGNED, VARCHAR; bitmap 0, bound 1
    let mut first = payload(&[0, 1, 8, UNSIGNED, 253, 0]);
    first.extend(u64::MAX.to_le_bytes());
    first.extend(b"\x03abc");
    let e = decode_execute(&first, 2, &mut types, &mut HashMap::new()).unwrap();
    assert_eq!((e.stmt_id, e.flags), (7, 0));
    assert_eq!(e.params, vec![Value::UInt(u64::MAX), Value::str("abc")]);
    assert_eq!(types.len(), 2);
    assert!(types[0].unsigned && !types[1].unsigned);
    // second execute: new_params_bound = 0, first param NULL
    let second = payload(&[0b01, 0, 2, b'x', b'y']);
    assert_eq!(
        decode(&second, 2, &mut types).unwrap(),
        vec![Value::Null, Value::str("xy")]
    );
    assert_eq!(execute_stmt_id(&second).unwrap(), 7);
    // types never sent: Malformed
    assert!(matches!(
        decode(&second, 2, &mut Vec::new()),
        Err(ProtocolError::Malformed(_))
    ));
    assert!(
        decode(&second, 3, &mut types).is_err(),
        "saved types of the wrong length"
    );
}

#[test]
fn integers_signed_and_unsigned() {
    let mut types = Vec::new();
    let mut p = payload(&[
        0, 1, 8, 0, 8, UNSIGNED, 8, UNSIGNED, 1, 0, 1, UNSIGNED, 2, 0, 3, 0, 13, 0,
    ]);
    for v in [-1i64, 5, i64::MIN] {
        p.extend(v.to_le_bytes());
    }
    p.extend([0xff, 0xff, 0xfe, 0xff, 0xfd, 0xff, 0xff, 0xff, 0xe8, 0x07]);
    let got = decode(&p, 8, &mut types).unwrap();
    let want = [-1, 5, i64::MIN, -1, 255, -2, -3, 2024].map(Value::Int);
    assert_eq!(got[..2], want[..2]);
    assert_eq!(got[2], Value::UInt(1 << 63), "unsigned above i64::MAX");
    assert_eq!(got[3..], want[3..]);
}

#[test]
fn floats_decimals_strings_dates_and_times() {
    let mut types = Vec::new();
    let tys = [4u8, 5, 246, 246, 0, 252, 245, 10, 12, 7, 12, 11, 11, 6, 15, 254, 255];
    let n = tys.len();
    let mut p = payload(&[0, 0, 0]);
    p.push(1);
    for t in tys {
        p.extend([t, 0]);
    }
    p.extend(0.1f32.to_le_bytes());
    p.extend((-2.5f64).to_le_bytes());
    p.extend(b"\x0512.50\x03abc\x011");
    p.extend(b"\x02\xff\x00\x02{}");
    p.extend([4, 0xe8, 7, 2, 29]);
    p.extend([7, 0xe7, 7, 1, 2, 3, 4, 5]);
    p.extend([0]);
    p.extend([11, 0xe8, 7, 2, 29, 23, 59, 58, 0x20, 0xa1, 0x07, 0]);
    p.extend([8, 1, 1, 0, 0, 0, 1, 2, 3]);
    p.extend([12, 0, 0, 0, 0, 0, 10, 11, 12, 5, 0, 0, 0]);
    p.extend(b"\x01v\x01s\x01g");
    let got = decode(&p, n, &mut types).unwrap();
    let dt = |s: &str| Value::DateTime(DateTime::parse(s).unwrap());
    assert_eq!(got[0], Value::Double(0.1), "FLOAT through its shortest text");
    assert_eq!(got[1], Value::Double(-2.5));
    assert_eq!(got[2], Value::Decimal(Decimal::parse("12.50").unwrap()));
    assert_eq!(got[3], Value::str("abc"), "a DECIMAL that does not parse stays bytes");
    assert_eq!(got[4], Value::Decimal(Decimal::parse("1").unwrap()));
    assert_eq!(got[5], Value::Bytes(vec![0xff, 0]));
    assert_eq!(got[6], Value::str("{}"));
    assert_eq!(got[7], dt("2024-02-29"));
    assert_eq!(got[8], dt("2023-01-02 03:04:05"));
    assert_eq!(got[9], dt("0000-00-00 00:00:00"));
    assert_eq!(got[10], dt("2024-02-29 23:59:58.5"));
    assert_eq!(got[11], Value::str("-25:02:03"));
    assert_eq!(got[12], Value::str("10:11:12.000005"));
    assert_eq!(got[13], Value::Null);
    assert_eq!(got[14..], [Value::str("v"), Value::str("s"), Value::str("g")]);
}

#[test]
fn invalid_values_and_types() {
    let one = |ty: u8, v: &[u8]| {
        let mut p = payload(&[0, 1, ty, 0]);
        p.extend(v);
        decode(&p, 1, &mut Vec::new())
    };
    assert!(one(12, &[4, 0xe7, 7, 2, 30]).is_err(), "Feb 30");
    assert!(one(12, &[5, 0xe7, 7, 2, 3, 4]).is_err(), "length 5");
    assert!(one(12, &[7, 0xe7, 7, 2, 3, 24, 0, 0]).is_err(), "hour 24");
    assert!(one(11, &[8, 0, 0, 0, 0, 0, 1, 60, 0]).is_err(), "minute 60");
    assert!(one(11, &[3, 0, 0, 0]).is_err());
    assert!(one(100, &[]).is_err(), "unknown type");
    assert!(
        one(253, &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err(),
        "huge length"
    );
    assert!(one(253, &[0xfb]).is_err());
    assert_eq!(one(6, &[]).unwrap(), [Value::Null]);
}

#[test]
fn long_data_replaces_the_payload_value() {
    let mut types = Vec::new();
    let mut long = HashMap::from([
        (1u16, b"long text".to_vec()),
        (2, b"3.25".to_vec()),
        (9, b"other".to_vec()),
    ]);
    // 3 params: INT, BLOB (long data), DECIMAL (long data, NULL bit set: long data wins)
    let mut p = payload(&[0b100, 1, 3, 0, 252, 0, 246, 0]);
    p.extend(5i32.to_le_bytes());
    let e = decode_execute(&p, 3, &mut types, &mut long).unwrap();
    assert_eq!(
        e.params,
        vec![
            Value::Int(5),
            Value::str("long text"),
            Value::Decimal(Decimal::parse("3.25").unwrap())
        ]
    );
    assert_eq!(long.len(), 1, "used buffers are consumed, others kept");
    // without the long data the BLOB must be in the payload: truncated
    assert!(decode_execute(&p, 3, &mut types, &mut long).is_err());
}

#[test]
fn every_truncation_is_an_error_and_changes_nothing() {
    let mut p = payload(&[0, 1, 8, 0, 253, 0, 12, 0, 5, 0, 11, 0, 246, 0, 252, 0]);
    p.extend(1i64.to_le_bytes());
    p.extend(b"\x02ab");
    p.extend([7, 0xe7, 7, 1, 2, 3, 4, 5]);
    p.extend(1.0f64.to_le_bytes());
    p.extend([8, 0, 0, 0, 0, 0, 1, 2, 3]);
    p.extend(b"\x011");
    let n = 7;
    let saved = vec![
        ParamType {
            field_type: 3,
            unsigned: false
        };
        n
    ];
    let mut long = HashMap::from([(6u16, b"blob".to_vec())]);
    for cut in 0..p.len() {
        let mut types = saved.clone();
        let r = decode_execute(&p[..cut], n, &mut types, &mut long);
        assert!(matches!(r, Err(ProtocolError::Malformed(_))), "cut at {cut}: {r:?}");
        assert_eq!(types, saved, "types unchanged on error");
        assert_eq!(long.len(), 1, "long data unchanged on error");
    }
    let mut types = saved.clone();
    let e = decode_execute(&p, n, &mut types, &mut long).unwrap();
    assert_eq!(e.params.len(), n);
    assert_eq!(e.params[6], Value::str("blob"));
    assert!(long.is_empty());
    assert!(execute_stmt_id(&p[..3]).is_err());
}

#[test]
fn no_params() {
    let e = decode_execute(&payload(&[]), 0, &mut Vec::new(), &mut HashMap::new()).unwrap();
    assert!(e.params.is_empty());
    assert!(decode_execute(&payload(&[])[..8], 0, &mut Vec::new(), &mut HashMap::new()).is_err());
}

proptest! {
    #[test]
    fn random_payloads_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..120),
        n in 0usize..20,
        saved in proptest::collection::vec((any::<u8>(), any::<bool>()), 0..20),
    ) {
        let mut types: Vec<ParamType> =
            saved.into_iter().map(|(field_type, unsigned)| ParamType { field_type, unsigned }).collect();
        let mut long = HashMap::from([(1u16, vec![1u8])]);
        let _ = decode_execute(&bytes, n, &mut types, &mut long);
        let mut framed = payload(&[]);
        framed.extend(&bytes);
        let _ = decode_execute(&framed, n, &mut types, &mut long);
    }
}
