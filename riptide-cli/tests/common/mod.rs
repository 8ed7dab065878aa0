//! Helpers shared by the `riptide stress` integration tests.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `riptide stress --db=<db> <args>` and waits for it.
pub fn stress(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riptide"))
        .arg("stress")
        .arg(format!("--db={}", db.display()))
        .args(args)
        .output()
        .expect("run riptide stress")
}

/// A run's stdout followed by its stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
