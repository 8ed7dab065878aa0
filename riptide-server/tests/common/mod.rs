//! The in-process server configuration shared by the server's integration tests: loopback on a
//! free port, metrics on, users `root` (no password) and `app`/`s3cret`, database `d`, commits
//! not synced (these tests do not cut power).

use riptide_server::server::ServerConfig;
use riptide_server::sql::session::SessionConfig;
use std::time::Duration;

/// A server configuration on `dir` accepting packets up to `max_packet` bytes.
pub fn config(dir: &std::path::Path, max_packet: usize) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        users: vec![("root".into(), "".into()), ("app".into(), "s3cret".into())],
        max_allowed_packet: max_packet,
        session: SessionConfig {
            sync: false,
            lock_wait_timeout: Duration::from_secs(5),
            current_reads: false,
        },
        create_databases: vec!["d".into()],
        engine: riptide::Options::default(),
        cluster: None,
    }
}
