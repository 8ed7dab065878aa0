//! The crate's minimal client against an in-process server: login, queries, errors.

mod common;

use riptide_server::client::{Client, QueryResult};
use riptide_server::server::{start, ServerConfig};
use std::time::Duration;

fn config(dir: &std::path::Path) -> ServerConfig {
    common::config(dir, 1 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_user_queries_and_metrics_count_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path())).await.unwrap();
    let addr = server.addr;
    let metrics = server.metrics_addr.unwrap();
    let rows = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(addr, "app", "s3cret", Some("d")).unwrap();
        c.query("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(10))")
            .unwrap();
        assert_eq!(
            c.query("INSERT INTO t VALUES (1, 'a'), (2, NULL)").unwrap(),
            QueryResult::Ok {
                affected: 2,
                last_insert_id: 0
            }
        );
        let err = c.query("INSERT INTO t VALUES (1, 'b')").unwrap_err();
        assert_eq!(err.code(), Some(1062));
        assert_eq!(
            Client::connect(addr, "app", "wrong", None).err().and_then(|e| e.code()),
            Some(1045)
        );
        assert_eq!(
            Client::connect(addr, "root", "", Some("nope"))
                .err()
                .and_then(|e| e.code()),
            Some(1049)
        );
        let rows = c.rows("SELECT id, v FROM t ORDER BY id").unwrap();
        c.quit().unwrap();
        let mut body = String::new();
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        s.read_to_string(&mut body).unwrap();
        (rows, body)
    })
    .await
    .unwrap();
    assert_eq!(
        rows.0,
        vec![vec![Some("1".into()), Some("a".into())], vec![Some("2".into()), None]]
    );
    let body = rows.1;
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("riptide_statements_total{kind=\"insert\"} 2"), "{body}");
    assert!(body.contains("riptide_errors_total{code=\"1062\"} 1"), "{body}");
    assert!(body.contains("riptide_txn_committed_total"), "{body}");
    assert!(body.contains("riptide_commit_seconds_count 1"), "{body}");
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
