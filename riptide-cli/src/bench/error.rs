//! [`BenchError`]: what can make `riptide bench` fail, each with a message for the user.

use std::fmt;
use std::path::PathBuf;

/// An engine's error, boxed (each engine has its own error type).
pub type EngineError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed bench run. `main` prints it and exits with [`BenchError::exit_code`].
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
    /// `--db` is a database that another process (or instance) has open: it is not wiped.
    Locked(PathBuf),
    /// Writers stopped for good (see the runner's watchdog).
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

impl BenchError {
    /// The process exit status for this error: 2 for a usage error (a flag value refused after
    /// parsing, like clap's own errors), 1 for anything that failed at run time.
    pub fn exit_code(&self) -> u8 {
        match self {
            BenchError::Usage(_) => 2,
            _ => 1,
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
                "refusing to wipe {}: it is neither an empty directory nor a Riptide, RocksDB or fjall database \
                 (no CATALOG, CURRENT + IDENTITY, or version + keyspaces/; pick another --db, or --use_existing_db=1)",
                p.display()
            ),
            BenchError::Locked(p) => write!(
                f,
                "refusing to wipe {}: the database is open in another process (its LOCK is held); \
                 stop that process, or pick another --db",
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
