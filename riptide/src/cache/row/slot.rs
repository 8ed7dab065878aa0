//! One cached row: its bytes (inline in the slot when small, else one heap allocation), the
//! 64-byte [`Slot`] that holds it, and what it is charged.
//!
//! Invariants:
//! - A slot is exactly one cache line (`Option<Slot>` is 64 bytes, checked at compile time), so a
//!   hit reads the index line and the slot's line, no other memory, for rows of at most
//!   [`INLINE_ROW`] key + value bytes.
//! - A row is charged [`row_charge`] of its key + value length: [`ROW_OVERHEAD`] for its slot and
//!   index share, plus its heap allocation when it is not inline. Charges depend only on the
//!   length, so what is added on insert is exactly what is subtracted on removal.
//! - A tombstone (`has_value` false) stores only the key.

use std::sync::atomic::AtomicBool;

/// Bytes charged per entry besides a large row's heap bytes: its 64-byte slot, up to four 8-byte
/// index entries and a 4-byte free-list entry. Every row is charged at least this much, so a shard
/// holds at most `capacity / ROW_OVERHEAD` rows; its slab and free list grow as rows arrive (doubling,
/// never past that many), and its index holds at most four entries per row of its peak count, so a
/// shard's memory stays within its capacity (plus a 64-entry minimum index, and twice the slab for
/// a moment while it grows).
pub(crate) const ROW_OVERHEAD: usize = 100;
/// Rows a shard's slab first makes room for.
pub(super) const SLAB_FIRST_ROWS: usize = 1024;
/// Bytes charged for a heap allocation's header.
const HEAP_OVERHEAD: usize = 16;

/// The bytes an entry of `size` key + value bytes occupies: an inline row only its slot and index
/// share; a larger one also its heap allocation.
pub(crate) fn row_charge(size: usize) -> usize {
    if size <= INLINE_ROW {
        ROW_OVERHEAD
    } else {
        ROW_OVERHEAD + HEAP_OVERHEAD + size
    }
}
/// Rows whose key and value together fit in this many bytes are stored inside their slot.
pub(crate) const INLINE_ROW: usize = 44;

/// A row's key ‖ value bytes: inside the slot when small, else in one heap allocation.
pub(super) enum RowBytes {
    Inline {
        len: u8,
        key_len: u8,
        buf: [u8; INLINE_ROW],
    },
    Heap {
        key_len: u32,
        buf: Box<[u8]>,
    },
}

impl RowBytes {
    pub(super) fn new(key: &[u8], value: &[u8]) -> RowBytes {
        let len = key.len() + value.len();
        if len <= INLINE_ROW {
            let mut buf = [0u8; INLINE_ROW];
            buf[..key.len()].copy_from_slice(key);
            buf[key.len()..len].copy_from_slice(value);
            RowBytes::Inline {
                len: len as u8,
                key_len: key.len() as u8,
                buf,
            }
        } else {
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(key);
            v.extend_from_slice(value);
            RowBytes::Heap {
                key_len: key.len() as u32,
                buf: v.into_boxed_slice(),
            }
        }
    }

    /// (key ‖ value, key length).
    #[inline]
    pub(super) fn parts(&self) -> (&[u8], usize) {
        match self {
            RowBytes::Inline { len, key_len, buf } => (&buf[..*len as usize], *key_len as usize),
            RowBytes::Heap { key_len, buf } => (buf, *key_len as usize),
        }
    }
}

/// One cached row, one cache line: a hit reads the index line and this line, no other memory.
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) lsn: u64,
    pub(super) table: u32,
    pub(super) referenced: AtomicBool,
    /// False for a cached tombstone (then `bytes` is only the key).
    pub(super) has_value: bool,
    pub(super) bytes: RowBytes,
}

const _: () = assert!(std::mem::size_of::<Option<Slot>>() == 64);

impl Slot {
    #[inline]
    pub(super) fn key(&self) -> &[u8] {
        let (b, k) = self.bytes.parts();
        b.get(..k).unwrap_or_default()
    }

    #[inline]
    pub(super) fn value(&self) -> Option<&[u8]> {
        if self.has_value {
            let (b, k) = self.bytes.parts();
            b.get(k..)
        } else {
            None
        }
    }

    pub(super) fn charge(&self) -> usize {
        row_charge(self.bytes.parts().0.len())
    }
}
