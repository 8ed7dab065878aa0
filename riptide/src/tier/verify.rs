//! Offline verification of the object tier (`riptide inspect verify --object_store ...`):
//! every object-tier extent the metadata names, read whole and checked block by block, and
//! the extent objects no metadata names.
//!
//! Invariant: it only reads (GET and LIST); it never deletes, so it is safe beside a live
//! database (whose uploads in flight it may report as unnamed).

use super::objects::{object_name, parse_object_name, ImageFile, EXTENT_PREFIX};
use super::store::ObjectStore;
use crate::extent::FOOTER_SIZE;
use crate::meta::edit::ExtentMeta;
use crate::space::ExtentId;
use std::collections::HashSet;
use std::path::PathBuf;

/// What [`verify_objects`] found.
#[derive(Default)]
pub(crate) struct ObjectsReport {
    /// Extents read whole and checked.
    pub extents: u64,
    /// Damage, one line each.
    pub problems: Vec<String>,
    /// Unnamed objects, one line each.
    pub notes: Vec<String>,
}

/// Checks `extents` (object-tier extents the metadata names) in `store` and lists the
/// unnamed ones, telling those that checkpoints pin (`pinned`) from orphans.
pub(crate) fn verify_objects(store: &dyn ObjectStore, extents: &[&ExtentMeta], pinned: &HashSet<u64>) -> ObjectsReport {
    let mut report = ObjectsReport::default();
    let location = store.location();
    for e in extents {
        let id = ExtentId(e.id);
        let name = object_name(id);
        let url = format!("{}/{name}", location.trim_end_matches('/'));
        let image = match store.get(&name) {
            Ok(b) => b,
            Err(err) => {
                report
                    .problems
                    .push(format!("extent {id} (table id {}): object {url}: {err}", e.table));
                continue;
            }
        };
        let want = e.data_size + FOOTER_SIZE as u64;
        if image.len() as u64 != want {
            report.problems.push(format!(
                "extent {id}: object {url} has {} bytes, its metadata says {want}",
                image.len()
            ));
            continue;
        }
        let file = ImageFile::new(image, e.data_size, e.slots);
        match e.verify_bytes(&file, &PathBuf::from(&url), 0) {
            Ok(mismatch) => {
                report.extents += 1;
                report.problems.extend(mismatch);
            }
            Err(problem) => report.problems.push(problem),
        }
    }
    let named: HashSet<u64> = extents.iter().map(|e| e.id).collect();
    match store.list(EXTENT_PREFIX) {
        Ok(listed) => {
            for o in listed {
                let Some(id) = parse_object_name(&o.name).filter(|id| !named.contains(&id.0)) else {
                    continue;
                };
                let why = if pinned.contains(&id.0) {
                    "pinned by a checkpoint (kept until Db::release_checkpoint)"
                } else {
                    "queued for deletion at the next open"
                };
                report.notes.push(format!(
                    "object {}/{} ({} bytes): no metadata names it; {why}",
                    location.trim_end_matches('/'),
                    o.name,
                    o.size
                ));
            }
        }
        Err(err) => report.problems.push(format!("listing {location}: {err}")),
    }
    report
}
