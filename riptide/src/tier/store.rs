//! The object-store trait the object tier goes through, and its errors.
//!
//! Invariants:
//! - The trait is synchronous: the engine calls it from its own threads. An implementation on
//!   an async client (the `riptide-s3` crate, on `object_store` and tokio) blocks on its own
//!   runtime inside each call.
//! - Every failure is an [`ObjectError`] whose [`ObjectErrorKind`] says whether trying again
//!   may help ([`ObjectErrorKind::Transient`]: timeouts, 5xx, throttling, connection resets).
//!   The engine retries transient errors with backoff up to a deadline ([`super::RetryPolicy`]);
//!   an implementation may retry too, but need not.
//! - Names are relative to the store's root (its bucket and prefix): `/`-separated, never
//!   starting with `/`, never holding `..`.

pub use crate::error::ObjectErrorKind;
use std::fmt::{self, Debug};
use std::ops::Range;
use std::time::SystemTime;

/// A failed object-store request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectError {
    /// What kind of failure.
    pub kind: ObjectErrorKind,
    /// What the store said.
    pub message: String,
}

impl ObjectError {
    /// An error of `kind`.
    pub fn new(kind: ObjectErrorKind, message: impl Into<String>) -> Self {
        ObjectError {
            kind,
            message: message.into(),
        }
    }

    /// True if trying again may help.
    pub fn is_transient(&self) -> bool {
        self.kind == ObjectErrorKind::Transient
    }
}

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

impl std::error::Error for ObjectError {}

/// The result of an object-store request.
pub type ObjectResult<T> = std::result::Result<T, ObjectError>;

/// One object found by [`ObjectStore::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its name (relative to the store's root).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, if the store says.
    pub last_modified: Option<SystemTime>,
}

/// An object store: named, immutable blobs written whole and read by range (S3's model).
///
/// Riptide writes each object once and never modifies it; it deletes objects only when no
/// metadata can reach them any more.
pub trait ObjectStore: Send + Sync + Debug {
    /// Where the store's objects live, for messages (`s3://bucket/prefix`, a directory).
    fn location(&self) -> String;
    /// Writes `data` as object `name`, replacing any object of that name. Durable when it
    /// returns `Ok`.
    fn put(&self, name: &str, data: &[u8]) -> ObjectResult<()>;
    /// Writes `data` as object `name` only if no object of that name exists, atomically with
    /// respect to every other writer of the store: `Ok(true)` if written, `Ok(false)` if one
    /// existed (nothing is written then). S3: a PUT with `If-None-Match: *`.
    fn put_if_absent(&self, name: &str, data: &[u8]) -> ObjectResult<bool>;
    /// Bytes `range` of object `name`: exactly `range.end - range.start` bytes, or an error.
    fn get_range(&self, name: &str, range: Range<u64>) -> ObjectResult<Vec<u8>>;
    /// The whole object `name`.
    fn get(&self, name: &str) -> ObjectResult<Vec<u8>>;
    /// Deletes object `name`; deleting an object that does not exist succeeds.
    fn delete(&self, name: &str) -> ObjectResult<()>;
    /// Every object whose name starts with `prefix`, in no particular order.
    fn list(&self, prefix: &str) -> ObjectResult<Vec<ObjectInfo>>;
}

/// Checks that `name` is a valid object name (see the module invariants): `Permanent` if not.
/// Stores call it before sending a request.
pub fn check_name(name: &str) -> ObjectResult<()> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(ObjectError::new(
            ObjectErrorKind::Permanent,
            format!("invalid object name {name:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["a", "ext/0123", "x/y/z.ext"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/a", "a//b", "../a", "a/./b", "a/"] {
            assert_eq!(check_name(bad).unwrap_err().kind, ObjectErrorKind::Permanent, "{bad}");
        }
    }

    #[test]
    fn errors_say_whether_to_retry() {
        assert!(ObjectError::new(ObjectErrorKind::Transient, "503 SlowDown").is_transient());
        assert!(!ObjectError::new(ObjectErrorKind::NotFound, "no such key").is_transient());
        let e = ObjectError::new(ObjectErrorKind::Permanent, "403");
        assert_eq!(e.to_string(), "403 (permanent)");
    }
}
