//! `riptide serve`: a MySQL-protocol server over the Riptide engine.
//!
//! Layers, each its own module, each depending only on the ones before it:
//! - [`value`]: SQL values;
//! - [`protocol`]: the MySQL client/server protocol (framing, handshake and authentication,
//!   commands, result sets in the text and binary protocols) on tokio streams;
//! - `sql`: parse (sqlparser-rs, MySQL dialect), catalog, key and row codecs, execution
//!   against engine transactions;
//! - `server`: the listener, one task per connection, sessions, shutdown;
//! - [`router`]: a MySQL-protocol router over partitions (each a `riptide serve` or a
//!   replicated group of them), placing rows by a hash of their primary key.
//!
//! The engine stays synchronous; this crate is the only place with network code.

pub mod client;
pub mod protocol;
pub mod router;
pub mod server;
pub mod sql;
pub mod value;
