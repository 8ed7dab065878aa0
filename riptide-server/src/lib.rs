//! `riptide serve`: a MySQL-protocol server over the Riptide engine.
//!
//! Layers, each its own module, each depending only on the ones before it:
//! - [`value`]: SQL values;
//! - [`protocol`]: the MySQL client/server protocol (framing, handshake and authentication,
//!   commands, result sets in the text and binary protocols) on tokio streams;
//! - `sql`: parse (sqlparser-rs, MySQL dialect), catalog, key and row codecs, execution
//!   against engine transactions;
//! - `server`: the listener, one task per connection, sessions, shutdown.
//!
//! The engine stays synchronous; this crate is the only place with network code.

pub mod client;
pub mod protocol;
pub mod server;
pub mod sql;
pub mod value;
