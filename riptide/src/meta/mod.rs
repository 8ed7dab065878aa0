//! Metadata: which extents make up each sub-table's levels and layers, made durable by a
//! metadata log (slog) of mini-transactions and periodic checkpoints (`docs/format.md`).
//!
//! This module holds only durable metadata: plain data ([`edit`]) and its files ([`current`],
//! [`framing`], [`slog`], [`replay`], [`dump`], [`checkpoint`]). The engine's in-memory
//! copy-on-write snapshots (module `version`) are built from it, one level up.
//!
//! Invariants: every metadata change is committed to the slog (durable) before it is applied in
//! memory; recovery = the checkpoint named by `meta/CURRENT`, then the committed transactions
//! of the slog it names, in order.

pub(crate) mod checkpoint;
pub(crate) mod current;
pub(crate) mod dump;
pub(crate) mod edit;
pub(crate) mod framing;
pub(crate) mod replay;
pub(crate) mod slog;

#[cfg(test)]
mod tests;
