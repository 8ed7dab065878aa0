//! [`StressError`]: why `riptide stress` could not run, split by who must act: a usage error
//! (a flag value, or flags that do not fit the database and expected state at `--db`; exit
//! status 2) or a runtime failure (exit status 1).
//!
//! Invariant: internal helpers return `String` errors, which convert to
//! [`StressError::Failed`]; only the checks of the command line and of `--db`'s ownership
//! build a [`StressError::Usage`].

use std::fmt;

/// A failed `riptide stress` run.
#[derive(Debug)]
pub enum StressError {
    /// The flags are wrong, or do not fit the database at `--db`.
    Usage(String),
    /// The run failed.
    Failed(String),
}

impl StressError {
    /// The process exit status: 2 for a usage error, 1 for a failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            StressError::Usage(_) => 2,
            StressError::Failed(_) => 1,
        }
    }
}

impl From<String> for StressError {
    fn from(msg: String) -> Self {
        StressError::Failed(msg)
    }
}

impl fmt::Display for StressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StressError::Usage(msg) | StressError::Failed(msg) => f.write_str(msg),
        }
    }
}
