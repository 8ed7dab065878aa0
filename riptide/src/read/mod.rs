//! Reading a sub-table's extents: point lookups through the levels ([`get`]) and a cursor
//! over one sorted run of extents ([`cursor::LevelCursor`]) for merging iterators.

pub(crate) mod cursor;
mod get;

pub(crate) use get::get_from_levels;
#[cfg(test)]
pub(crate) use get::seek_key;
