//! Execution of bound plans against the engine.

pub mod ddl;
pub mod rows;
pub mod select;
pub mod show;
pub mod write;
