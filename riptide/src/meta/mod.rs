//! Metadata: which extents make up each sub-table's levels and layers, made durable by a
//! metadata log (slog) of mini-transactions and periodic checkpoints (`docs/format-meta.md`).
//!
//! This module holds metadata as plain data ([`edit`]) and its files ([`slog`],
//! [`checkpoint`]); the engine builds its in-memory copy-on-write snapshots from it.
//!
//! Invariants: every metadata change is committed to the slog (durable) before it is applied in
//! memory; recovery = the checkpoint named by `meta/CURRENT`, then the committed transactions
//! of the slog it names, in order.
#![allow(dead_code, unused_imports)]

pub(crate) mod checkpoint;
pub(crate) mod edit;
pub(crate) mod slog;

#[cfg(test)]
mod tests;

pub(crate) use checkpoint::read_checkpoint;
pub(crate) use edit::{ExtentIdRaw, ExtentMeta, MetaState, SlogEntry, TableEdit, TableMeta};
pub(crate) use slog::{dump_slog, Slog, SlogRecordView, SlogRecovery};
