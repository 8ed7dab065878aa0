use super::*;

fn shaped(sql: &str) -> (String, Vec<Value>) {
    shape_of(sql).unwrap_or_else(|| panic!("no shape for {sql}"))
}

#[test]
fn sysbench_insert_takes_out_every_literal_and_keeps_names() {
    let (shape, values) =
        shaped("INSERT INTO sbtest3 (id, k, c, pad) VALUES (0, 50234, '68487932199-96439406143', '22195207048-7011')");
    assert_eq!(shape, "INSERT INTO sbtest3 (id, k, c, pad) VALUES (?, ?, ?, ?)");
    assert_eq!(
        values,
        vec![
            Value::Int(0),
            Value::Int(50234),
            Value::Bytes(b"68487932199-96439406143".to_vec()),
            Value::Bytes(b"22195207048-7011".to_vec()),
        ]
    );
}

#[test]
fn names_with_digits_and_quoted_names_stay() {
    let (shape, values) = shaped("update `t 1` set c2='a', k=k+1 WHERE t1.id=-7 AND x9 IN (3,4)");
    assert_eq!(shape, "update `t 1` set c2=?, k=k+? WHERE t1.id=-? AND x9 IN (?,?)");
    assert_eq!(
        values,
        vec![
            Value::Bytes(b"a".to_vec()),
            Value::Int(1),
            Value::Int(7),
            Value::Int(3),
            Value::Int(4)
        ]
    );
    let (shape, _) = shaped("SELECT c FROM `a'b` WHERE id = '0'");
    assert_eq!(shape, "SELECT c FROM `a'b` WHERE id = ?");
}

#[test]
fn anything_unsure_leaves_the_query_to_the_parser() {
    for sql in [
        "SET autocommit=0",
        "SHOW TABLES LIKE 'a'",
        "INSERT INTO t VALUES (1.5)",
        "INSERT INTO t VALUES (1e5)",
        "INSERT INTO t VALUES (0x1F)",
        "INSERT INTO t VALUES (X'ff')",
        "INSERT INTO t VALUES (_utf8mb4'x')",
        "INSERT INTO t VALUES (N'x')",
        "INSERT INTO t VALUES ('a' 'b')",
        "INSERT INTO t VALUES ('it''s')",
        "INSERT INTO t VALUES ('a\\'b')",
        "INSERT INTO t VALUES (\"x\")",
        "INSERT INTO t VALUES (?)",
        "INSERT INTO t VALUES (@a)",
        "INSERT INTO t VALUES (1) -- 2",
        "INSERT INTO t VALUES (1) # 2",
        "INSERT INTO t VALUES (1) /* 2 */",
        "INSERT INTO t VALUES (9223372036854775808)",
        "INSERT INTO t VALUES (1abc)",
        "INSERT INTO t VALUES ('unterminated)",
        "SELECT * FROM `unterminated",
        "SELECT id, v FROM t AS `q?` WHERE `q?`.id > 0 ORDER BY 2",
    ] {
        assert!(shape_of(sql).is_none(), "{sql} got a shape: {:?}", shape_of(sql));
    }
}

#[test]
fn a_cached_shape_parses_once_and_unusable_shapes_go_to_the_parser() {
    let cache = ShapeCache::new(1 << 20);
    for k in 0..3 {
        let sql = format!("INSERT INTO t (a, b) VALUES ({k}, 'v{k}')");
        match cache.parse(&sql).expect("parses") {
            Parsed::Shaped(stmt, values) => {
                assert_eq!(stmt.to_string(), "INSERT INTO t (a, b) VALUES (?, ?)");
                assert_eq!(values, vec![Value::Int(k), Value::Bytes(format!("v{k}").into_bytes())]);
            }
            Parsed::Full(_) => panic!("{sql} was not shaped"),
        }
    }
    assert_eq!(cache.shapes.len(), 1);
    for sql in [
        "SELECT 1 FROM t WHERE a = 2",
        "SELECT a FROM t WHERE a = 2 LIMIT 3",
        "SELECT a FROM t ORDER BY 1",
        "UPDATE t SET a = 1 ORDER BY a LIMIT 2",
        "DELETE FROM t WHERE a = 1 LIMIT 2",
        "INSERT INTO t SELECT a FROM u WHERE a = 1",
        "INSERT INTO t VALUES (1) LIMIT 5",
        "UPDATE t SET a = 1 WHERE id = 2 RETURNING 3",
        "DELETE FROM t WHERE id = 2 RETURNING 3",
    ] {
        for _ in 0..2 {
            // Parsed as sent (or refused by the parser as sent), never through the shape.
            if let Ok(Parsed::Shaped(..)) = cache.parse(sql) {
                panic!("{sql} must not be shaped");
            }
        }
    }
    // A shape that does not parse gives the parser's own error for the query as sent.
    let e = cache.parse("INSERT INTO t VALUES (1,,)").err().expect("syntax error");
    assert_eq!(e.code, 1064);
}
