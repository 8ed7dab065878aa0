//! Helpers shared by the checkpoint, read-only and backup tests.
#![allow(dead_code)]

use riptide::fs::{FileSystem, PosixFs};
use riptide::{Options, ReadOptions, Table};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A table's contents.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Small memtables and triggers on `fs`, so a few thousand writes reach every level.
pub fn small_on(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        write_buffer_size: 64 << 10,
        redo_segment_size: 256 << 10,
        level0_layer_trigger: 2,
        level0_extents_trigger: 3,
        level1_extents_trigger: 3,
        level1_dynamic_trigger: false,
        ..Default::default()
    }
}

/// [`small_on`] the operating system's file system.
pub fn small() -> Options {
    small_on(Arc::new(PosixFs))
}

/// Every row of `t`.
pub fn scan(t: &Table) -> Model {
    t.iter(&ReadOptions::default())
        .unwrap()
        .collect::<riptide::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .collect()
}
