//! Which database owns an object store: a random identity kept in `<db>/IDENTITY` and in the
//! store's `OWNER` object, so that two databases pointed at the same bucket and prefix never
//! reclaim each other's objects.
//!
//! Invariants:
//! - Both copies are the same 32 bytes: `"RPTIDNT\0"` ‖ 16-byte identity ‖ 4 zero bytes ‖
//!   masked CRC32C of the first 28. A damaged copy is [`Error::Corruption`].
//! - `IDENTITY` is written once, durably (temporary file, sync, rename, directory sync), the
//!   first time the database opens with an object store, and never changed.
//! - Orphan reclaim runs only after [`claim`] has seen `OWNER` name this database (or written
//!   it, create-only: two databases claiming one fresh prefix at once cannot both win); a
//!   store owned by another database fails the open with [`Error::InvalidOption`].

use super::retry::RetryPolicy;
use super::store::{ObjectErrorKind, ObjectStore};
use crate::coding::{crc_tail_ok, seal_crc_tail};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use std::path::Path;

/// The identity file in the database directory.
pub(crate) const IDENTITY_FILE: &str = "IDENTITY";
/// The owner object at the store's root.
pub(crate) const OWNER_OBJECT: &str = "OWNER";
const MAGIC: &[u8; 8] = b"RPTIDNT\0";
const SIZE: usize = 32;

fn encode(id: &[u8; 16]) -> [u8; SIZE] {
    let mut b = [0u8; SIZE];
    b[..8].copy_from_slice(MAGIC);
    b[8..24].copy_from_slice(id);
    seal_crc_tail(&mut b);
    b
}

fn decode(bytes: &[u8]) -> Option<[u8; 16]> {
    if bytes.len() != SIZE || &bytes[..8] != MAGIC || bytes[24..28] != [0; 4] || !crc_tail_ok(bytes) {
        return None;
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&bytes[8..24]);
    Some(id)
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The database's identity, created (durably) if it has none yet.
pub(crate) fn load_or_create_identity(fs: &dyn FileSystem, db: &Path) -> Result<[u8; 16]> {
    let path = db.join(IDENTITY_FILE);
    if fs.exists(&path) {
        let f = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let bytes = f.read_all().map_err(|e| Error::io("read", &path, e))?;
        return decode(&bytes).ok_or_else(|| Error::corruption(&path, 0, "damaged database identity"));
    }
    let id: [u8; 16] = rand::random();
    let tmp = db.join(format!("{IDENTITY_FILE}.tmp"));
    let written = (|| {
        let mut f = fs.create(&tmp)?;
        f.append(&encode(&id))?;
        f.sync_data()?;
        drop(f);
        fs.rename(&tmp, &path)?;
        fs.sync_dir(db)
    })();
    written.map_err(|e| Error::io("write", &path, e))?;
    Ok(id)
}

/// Makes sure `store` belongs to the database `id`: reads `OWNER`, writes it if missing.
/// `Ok(true)`: ours; `Ok(false)`: the store could not be reached (nothing is known, so nothing
/// may be reclaimed); [`Error::InvalidOption`] if another database owns it;
/// [`Error::Corruption`] if `OWNER` is damaged.
pub(crate) fn claim(store: &dyn ObjectStore, retry: &RetryPolicy, id: &[u8; 16]) -> Result<bool> {
    let location = store.location();
    let (found, _) = retry.run(|| store.get(OWNER_OBJECT));
    match found {
        Ok(bytes) => match decode(&bytes) {
            Some(owner) if owner == *id => Ok(true),
            Some(owner) => Err(Error::InvalidOption {
                option: "object_store",
                reason: format!(
                    "{location} belongs to database {} (its OWNER object); this database is {}: give each database its own prefix",
                    hex(&owner),
                    hex(id)
                ),
            }),
            None => Err(Error::corruption(format!("{location}/{OWNER_OBJECT}"), 0, "damaged owner object")),
        },
        Err(e) if e.kind == ObjectErrorKind::NotFound => {
            // Create-only: of two databases claiming a fresh prefix at once, one wins and the
            // other sees the winner's OWNER (and refuses) below.
            match retry.run(|| store.put_if_absent(OWNER_OBJECT, &encode(id))).0 {
                Ok(true) => Ok(true),
                Ok(false) => claim(store, retry, id),
                Err(_) => Ok(false),
            }
        }
        Err(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FaultFs, PosixFs};
    use crate::tier::{DirObjectStore, FaultyObjectStore, ObjectOp};
    use std::sync::Arc;

    #[test]
    fn identities_persist_and_owners_are_enforced() {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/a")).unwrap();
        fs.create_dir_all(Path::new("/b")).unwrap();
        let a = load_or_create_identity(&fs, Path::new("/a")).unwrap();
        assert_eq!(load_or_create_identity(&fs, Path::new("/a")).unwrap(), a, "stable");
        let b = load_or_create_identity(&fs, Path::new("/b")).unwrap();
        assert_ne!(a, b);
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyObjectStore::new(Arc::new(DirObjectStore::new(Arc::new(PosixFs), dir.path())));
        let retry = RetryPolicy {
            first_backoff: std::time::Duration::from_millis(1),
            max_backoff: std::time::Duration::from_millis(1),
            deadline: std::time::Duration::from_millis(5),
        };
        store.fail_always(ObjectOp::Get, ObjectErrorKind::Transient, "down");
        assert!(!claim(&store, &retry, &a).unwrap(), "unreachable: unknown");
        store.clear();
        assert!(claim(&store, &retry, &a).unwrap(), "claimed");
        assert!(claim(&store, &retry, &a).unwrap(), "ours");
        let err = claim(&store, &retry, &b).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "object_store",
                    ..
                }
            ),
            "{err}"
        );
        // A claim racing another database's: the loser's create-only put finds the winner's.
        store.delete(OWNER_OBJECT).unwrap();
        store.put_if_absent(OWNER_OBJECT, &encode(&b)).unwrap();
        assert!(matches!(claim(&store, &retry, &a), Err(Error::InvalidOption { .. })));
        store.put(OWNER_OBJECT, b"garbage").unwrap();
        assert!(matches!(claim(&store, &retry, &a), Err(Error::Corruption { .. })));
        // A damaged identity file is corruption, never a new identity.
        let mut f = fs.create(&Path::new("/a").join(IDENTITY_FILE)).unwrap();
        f.append(&[0u8; SIZE]).unwrap();
        drop(f);
        assert!(matches!(
            load_or_create_identity(&fs, Path::new("/a")),
            Err(Error::Corruption { .. })
        ));
    }
}
