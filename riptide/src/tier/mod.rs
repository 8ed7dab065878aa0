//! The object tier: L2 extents as objects in an S3-compatible store (seed 003), and the
//! pieces around it.
//!
//! - `store`: the synchronous [`ObjectStore`] trait the tier goes through, and its errors.
//!   Implementations: [`DirObjectStore`] (a directory), [`FaultyObjectStore`] (fault injection
//!   for tests) and, in the `riptide-s3` crate, S3 through the `object_store` crate.
//! - `retry`: backoff and a deadline for transient errors ([`RetryPolicy`]).
//! - `objects`: the engine's side: naming, upload, ranged and whole reads, the deletion queue
//!   with its grace period, orphan reclaim ([`ObjectTierStats`]).
//! - `cache`: the bounded local disk cache of whole extents.
//!
//! Which tier a table's L2 lives on is [`Tier`] ([`crate::Options::l2_tier`],
//! [`crate::TableOptions::l2_tier`]).

mod cache;
mod dir;
mod fault;
pub(crate) mod objects;
pub(crate) mod owner;
pub(crate) mod pins;
mod retry;
mod store;
pub(crate) mod verify;

pub use crate::table_options::Tier;
pub(crate) use cache::{is_cached_extent_name, ExtentCache, EXTENT_CACHE_DIR};
pub use dir::DirObjectStore;
pub use fault::{FaultyObjectStore, ObjectOp};
pub(crate) use objects::ObjectTier;
pub use objects::ObjectTierStats;
pub use retry::RetryPolicy;
pub use store::{check_name as check_object_name, ObjectError, ObjectErrorKind, ObjectInfo, ObjectResult, ObjectStore};
