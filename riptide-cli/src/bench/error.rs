//! [`BenchError`]: what can make `riptide bench` fail, each with a message for the user.

use super::engine::EngineError;
use std::fmt;
use std::path::PathBuf;

/// A failed bench run. `main` prints it and exits non-zero.
#[derive(Debug)]
pub enum BenchError {
    /// A flag value out of range or inconsistent with the others.
    Usage(String),
    /// The engine refused an operation.
    Engine {
        /// What the bench was doing.
        context: String,
        /// The engine's error.
        source: EngineError,
    },
    /// File-system work of the bench itself (wiping the directory) failed.
    Io {
        /// What the bench was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// `--db` exists but does not look like a database of a bench engine, so it is not wiped.
    NotADatabase(PathBuf),
    /// Writers stopped for good (see [`crate::bench::runner`]'s watchdog).
    WriteStop(String),
    /// A benchmark thread panicked (a bug in the bench or the engine).
    Panicked(String),
    /// The engine's own reads disagree with each other (`--dump_file`'s checks).
    Inconsistent(String),
}

impl BenchError {
    /// Wraps an engine error with what the bench was doing.
    pub fn engine(context: impl Into<String>, source: impl Into<EngineError>) -> Self {
        BenchError::Engine {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Usage(msg) => write!(f, "{msg}"),
            BenchError::Engine { context, source } => write!(f, "{context}: {source}"),
            BenchError::Io { context, source } => write!(f, "{context}: {source}"),
            BenchError::NotADatabase(p) => write!(
                f,
                "refusing to wipe {}: it exists, is not empty and is not a Riptide, RocksDB or fjall database \
                 (no CATALOG, CURRENT + IDENTITY, or version + keyspaces/; pick another --db, or --use_existing_db=1)",
                p.display()
            ),
            BenchError::WriteStop(msg) => write!(f, "{msg}"),
            BenchError::Panicked(msg) => write!(f, "a benchmark thread panicked: {msg}"),
            BenchError::Inconsistent(msg) => write!(f, "the engine's reads disagree: {msg}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Engine { source, .. } => Some(source.as_ref()),
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
