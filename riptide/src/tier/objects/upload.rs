//! [`ObjectTier::upload`]: an extent's one write to the object store, create-only.
//!
//! Invariants:
//! - An upload never replaces an object: it is a put-if-absent (S3: `If-None-Match: *`). A name
//!   already taken is either this upload's own earlier attempt, whose answer was lost and which
//!   the retry repeated (then the object holds exactly these bytes, and the upload succeeded),
//!   or another object under a colliding random id, which is never overwritten: the upload
//!   fails, so the compaction that made the extent is undone and retried with new ids.

use super::{object_name, ObjectTier};
use crate::error::{Error, ObjectErrorKind, Result};
use crate::space::ExtentId;
use std::sync::atomic::Ordering;

impl ObjectTier {
    /// Writes extent `id` (`valid ‖ footer`) as its object, and caches it locally (the newest
    /// extents are the likeliest to be read). Durable when it returns.
    pub(crate) fn upload(&self, id: ExtentId, valid: &[u8], footer: &[u8]) -> Result<()> {
        let mut image = Vec::with_capacity(valid.len() + footer.len());
        image.extend_from_slice(valid);
        image.extend_from_slice(footer);
        let name = object_name(id);
        let created = self.request("put", id, || self.store.put_if_absent(&name, &image))?;
        if !created && self.request("get", id, || self.store.get(&name))? != image {
            return Err(Error::ObjectStore {
                op: "put",
                object: self.url(id),
                kind: ObjectErrorKind::Permanent,
                message: "an object of this name already exists with other bytes; it was left as it is".into(),
            });
        }
        self.counters.objects_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(image.len() as u64, Ordering::Relaxed);
        // A cache that cannot write is only slower.
        let _ = self.cache.insert(id.0, &image);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::object_name;
    use super::super::tests::tier;
    use crate::error::Error;
    use crate::extent::FOOTER_SIZE;
    use crate::tier::{ObjectOp, ObjectStore};

    #[test]
    fn an_upload_whose_answer_was_lost_succeeds_on_its_retry() {
        let dir = tempfile::tempdir().unwrap();
        let (tier, store) = tier(dir.path(), 0);
        let id = tier.allocate();
        store.lose_put_answers(1);
        tier.upload(id, &[5; 300], &[6; FOOTER_SIZE]).unwrap();
        assert_eq!(store.requests(ObjectOp::Put), 2, "the put was retried");
        let mut want = vec![5u8; 300];
        want.extend_from_slice(&[6; FOOTER_SIZE]);
        assert_eq!(store.get(&object_name(id)).unwrap(), want);
    }

    #[test]
    fn an_upload_never_replaces_another_object() {
        let dir = tempfile::tempdir().unwrap();
        let (tier, store) = tier(dir.path(), 0);
        let id = tier.allocate();
        store.put(&object_name(id), b"someone else's object").unwrap();
        let err = tier.upload(id, &[5; 300], &[6; FOOTER_SIZE]).unwrap_err();
        assert!(
            matches!(&err, Error::ObjectStore { op: "put", .. }) && err.to_string().contains("already exists"),
            "{err}"
        );
        assert_eq!(store.get(&object_name(id)).unwrap(), b"someone else's object");
    }
}
