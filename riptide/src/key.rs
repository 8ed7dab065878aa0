//! Internal keys and LSNs.
//!
//! An internal key is `user_key ‖ fixed64_le(lsn << 8 | kind)`. Ordering: user key ascending
//! (bytewise), then LSN descending, so the newest version of a key sorts first. LSNs are 56-bit;
//! `MAX_LSN` is reserved as "newer than everything" for seeks.
//!
//! The memtable keeps user keys and version tags apart (a key node holds its versions), but
//! the same tag packing is used in memory, in the redo log and in extents.

use std::cmp::Ordering;

/// A log sequence number: the global, monotonically increasing version of every write.
pub type Lsn = u64;

/// The largest LSN the 56-bit tag can hold.
pub const MAX_LSN: Lsn = (1 << 56) - 1;

/// What a version of a key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    /// The key was deleted at this LSN (a tombstone).
    Delete = 0,
    /// The key was set to a value at this LSN.
    Put = 1,
}

impl ValueKind {
    /// Decodes a kind byte; `None` for an unknown byte (corruption).
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// Packs an LSN and a kind into the 64-bit tag stored after a user key.
#[inline]
pub fn pack_tag(lsn: Lsn, kind: ValueKind) -> u64 {
    debug_assert!(lsn <= MAX_LSN);
    (lsn << 8) | kind as u64
}

/// Splits a tag into LSN and kind; `None` if the kind byte is unknown.
#[inline]
pub fn unpack_tag(tag: u64) -> Option<(Lsn, ValueKind)> {
    ValueKind::from_u8((tag & 0xff) as u8).map(|k| (tag >> 8, k))
}

/// Encodes an internal key into `out`.
pub fn encode_internal_key(out: &mut Vec<u8>, user_key: &[u8], lsn: Lsn, kind: ValueKind) {
    out.extend_from_slice(user_key);
    out.extend_from_slice(&pack_tag(lsn, kind).to_le_bytes());
}

/// Splits an encoded internal key into (user key, LSN, kind); `None` if malformed.
pub fn decode_internal_key(ikey: &[u8]) -> Option<(&[u8], Lsn, ValueKind)> {
    let split = ikey.len().checked_sub(8)?;
    let (user, tag) = ikey.split_at(split);
    let tag = u64::from_le_bytes(tag.try_into().ok()?);
    let (lsn, kind) = unpack_tag(tag)?;
    Some((user, lsn, kind))
}

/// Compares two encoded internal keys: user key ascending, then LSN descending.
///
/// Malformed keys (shorter than 8 bytes) sort by their raw bytes before all well-formed ones,
/// so the comparison is total and never panics.
pub fn compare_internal_keys(a: &[u8], b: &[u8]) -> Ordering {
    match (a.len().checked_sub(8), b.len().checked_sub(8)) {
        (Some(sa), Some(sb)) => {
            let (ua, ta) = a.split_at(sa);
            let (ub, tb) = b.split_at(sb);
            let ta = u64::from_le_bytes(ta.try_into().unwrap_or([0; 8]));
            let tb = u64::from_le_bytes(tb.try_into().unwrap_or([0; 8]));
            ua.cmp(ub).then_with(|| tb.cmp(&ta))
        }
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_round_trips() {
        for &lsn in &[0, 1, 255, 256, 1 << 40, MAX_LSN] {
            for kind in [ValueKind::Put, ValueKind::Delete] {
                assert_eq!(unpack_tag(pack_tag(lsn, kind)), Some((lsn, kind)));
            }
        }
        assert_eq!(unpack_tag(7), None);
    }

    #[test]
    fn internal_keys_order_by_user_key_then_newest_first() {
        let enc = |k: &[u8], lsn| {
            let mut v = Vec::new();
            encode_internal_key(&mut v, k, lsn, ValueKind::Put);
            v
        };
        let mut keys = [enc(b"b", 1), enc(b"a", 1), enc(b"a", 9), enc(b"ab", 5), enc(b"b", 3)];
        keys.sort_by(|a, b| compare_internal_keys(a, b));
        let decoded: Vec<_> = keys
            .iter()
            .map(|k| {
                let (u, l, _) = decode_internal_key(k).unwrap();
                (u.to_vec(), l)
            })
            .collect();
        assert_eq!(
            decoded,
            vec![
                (b"a".to_vec(), 9),
                (b"a".to_vec(), 1),
                (b"ab".to_vec(), 5),
                (b"b".to_vec(), 3),
                (b"b".to_vec(), 1)
            ]
        );
    }

    #[test]
    fn malformed_keys_do_not_panic() {
        assert_eq!(decode_internal_key(b"short"), None);
        assert_eq!(compare_internal_keys(b"ab", b"abcdefghij"), Ordering::Less);
        let mut bad_kind = b"key".to_vec();
        bad_kind.extend_from_slice(&((5u64 << 8) | 9).to_le_bytes());
        assert_eq!(decode_internal_key(&bad_kind), None);
    }
}
