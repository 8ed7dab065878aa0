//! [`WriteBuffer`]: a transaction's uncommitted writes, indexed by (table, key) so the
//! transaction reads its own writes, with savepoints.
//!
//! Invariants:
//! - Each (table, key) has at most one entry: the transaction's last write to it (`Some(value)`
//!   for a put, `None` for a delete). The commit batch holds exactly these entries, in (table,
//!   key) order.
//! - `bytes` and `keys` are the encoded size and op count of that batch (each op charged
//!   [`OP_OVERHEAD`] bytes beyond key and value, as [`WriteBatch`] charges against
//!   [`crate::MAX_BATCH_SIZE`]). A write that would pass a limit is refused and changes nothing.
//! - Each savepoint records, for every key first written after it was set (and before a newer
//!   savepoint), the entry that key had at that moment, plus `bytes` and `keys`. Rolling back
//!   restores exactly the buffer as it was when the savepoint was set.

use crate::error::{Error, Result};
use crate::write::batch::WriteBatch;
use crate::Table;
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;

/// Bytes charged per buffered op on top of key and value (the worst-case op header of the
/// batch encoding).
pub(crate) const OP_OVERHEAD: usize = 21;

/// One buffered write: `Some(value)` is a put, `None` a delete.
pub(crate) type Pending = Option<Vec<u8>>;

pub(crate) struct TableBuf {
    pub(crate) table: Table,
    pub(crate) entries: BTreeMap<Vec<u8>, Pending>,
}

struct Savepoint {
    /// (table, key, entry before the first write after this savepoint; `None` = absent).
    undo: Vec<(u32, Vec<u8>, Option<Pending>)>,
    touched: HashSet<(u32, Vec<u8>)>,
    bytes: usize,
    keys: usize,
}

/// Limits of one transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_bytes: usize,
    pub(crate) max_keys: usize,
}

#[derive(Default)]
pub(crate) struct WriteBuffer {
    tables: BTreeMap<u32, TableBuf>,
    bytes: usize,
    keys: usize,
    savepoints: Vec<Savepoint>,
}

fn cost(key: &[u8], value: &Pending) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + OP_OVERHEAD
}

impl WriteBuffer {
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn keys(&self) -> usize {
        self.keys
    }

    /// The buffered write of `key` in table `table`, if any.
    pub(crate) fn get(&self, table: u32, key: &[u8]) -> Option<&Pending> {
        self.tables.get(&table)?.entries.get(key)
    }

    /// The (bytes, keys) the buffer would have after writing `key`; [`Error::TxnTooLarge`] if
    /// that passes a limit.
    fn sized(&self, table: u32, key: &[u8], value: &Pending, limits: Limits) -> Result<(usize, usize)> {
        let (bytes, keys) = match self.get(table, key) {
            Some(prev) => (self.bytes - cost(key, prev) + cost(key, value), self.keys),
            None => (self.bytes + cost(key, value), self.keys + 1),
        };
        if keys > limits.max_keys {
            return Err(Error::TxnTooLarge {
                what: "keys",
                len: keys,
                max: limits.max_keys,
            });
        }
        if bytes > limits.max_bytes {
            return Err(Error::TxnTooLarge {
                what: "bytes",
                len: bytes,
                max: limits.max_bytes,
            });
        }
        Ok((bytes, keys))
    }

    /// [`Error::TxnTooLarge`] if writing `key` would pass a limit (changes nothing).
    pub(crate) fn check(&self, table: &Table, key: &[u8], value: &Pending, limits: Limits) -> Result<()> {
        self.sized(table.inner().id, key, value, limits).map(|_| ())
    }

    /// Buffers a put (`Some`) or delete (`None`) of `key`; refuses it with
    /// [`Error::TxnTooLarge`] if it would pass a limit.
    pub(crate) fn write(&mut self, table: &Table, key: &[u8], value: Pending, limits: Limits) -> Result<()> {
        let id = table.inner().id;
        let (bytes, keys) = self.sized(id, key, &value, limits)?;
        let old = self.get(id, key).cloned();
        if let Some(sp) = self.savepoints.last_mut() {
            if sp.touched.insert((id, key.to_vec())) {
                sp.undo.push((id, key.to_vec(), old));
            }
        }
        self.tables
            .entry(id)
            .or_insert_with(|| TableBuf {
                table: table.clone(),
                entries: BTreeMap::new(),
            })
            .entries
            .insert(key.to_vec(), value);
        self.bytes = bytes;
        self.keys = keys;
        Ok(())
    }

    /// The buffered writes of `table` with keys in `[lower, upper)`, in key order.
    pub(crate) fn range(&self, table: u32, lower: Option<&[u8]>, upper: Option<&[u8]>) -> Vec<(Vec<u8>, Pending)> {
        let Some(t) = self.tables.get(&table) else {
            return Vec::new();
        };
        if let (Some(l), Some(u)) = (lower, upper) {
            if l >= u {
                return Vec::new();
            }
        }
        let lo = lower.map_or(Bound::Unbounded, Bound::Included);
        let hi = upper.map_or(Bound::Unbounded, Bound::Excluded);
        t.entries
            .range::<[u8], _>((lo, hi))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The commit batch: every buffered write, in (table, key) order.
    pub(crate) fn to_batch(&self) -> Result<WriteBatch> {
        let mut batch = WriteBatch::new();
        for t in self.tables.values() {
            for (k, v) in &t.entries {
                match v {
                    Some(v) => batch.put(&t.table, k, v)?,
                    None => batch.delete(&t.table, k)?,
                }
            }
        }
        Ok(batch)
    }

    pub(crate) fn set_savepoint(&mut self) {
        self.savepoints.push(Savepoint {
            undo: Vec::new(),
            touched: HashSet::new(),
            bytes: self.bytes,
            keys: self.keys,
        });
    }

    /// Undoes every write since the newest savepoint and removes it.
    pub(crate) fn rollback_to_savepoint(&mut self) -> Result<()> {
        let sp = self.savepoints.pop().ok_or(Error::NoSavepoint)?;
        for (table, key, old) in sp.undo.into_iter().rev() {
            let Some(t) = self.tables.get_mut(&table) else {
                continue;
            };
            match old {
                Some(v) => {
                    t.entries.insert(key, v);
                }
                None => {
                    t.entries.remove(&key);
                }
            }
        }
        self.tables.retain(|_, t| !t.entries.is_empty());
        self.bytes = sp.bytes;
        self.keys = sp.keys;
        Ok(())
    }

    /// Removes the newest savepoint, keeping the writes made since (an older savepoint still
    /// undoes them).
    pub(crate) fn pop_savepoint(&mut self) -> Result<()> {
        let sp = self.savepoints.pop().ok_or(Error::NoSavepoint)?;
        if let Some(outer) = self.savepoints.last_mut() {
            // A key first written after the popped savepoint but not since the outer one had,
            // at the popped savepoint, the same entry it had at the outer one.
            for (table, key, old) in sp.undo {
                if outer.touched.insert((table, key.clone())) {
                    outer.undo.push((table, key, old));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn savepoints(&self) -> usize {
        self.savepoints.len()
    }
}
