//! The SQL layer: parse, bind and execute the statements `riptide serve` accepts, over
//! engine sub-tables. `docs/server.md` describes the subset and the mapping.

pub mod access;
pub mod bind;
pub mod catalog;
pub mod error;
pub mod exec;
pub mod expr;
pub mod keycodec;
pub mod parse;
pub mod plan;
pub mod rowcodec;
pub mod schema;
pub mod session;
pub mod session_vars;
pub mod shape;
pub mod types;
pub mod xa;
