//! [`WriteBatch`]: puts and deletes over one or more sub-tables, applied atomically.
//!
//! Invariants:
//! - `rep` holds the ops already in the redo-log op encoding, so a write group's log payload is
//!   the concatenation of its batches' `rep`s: no re-encoding on the write path.
//! - Limits are checked when an op is added; a refused op leaves the batch unchanged.
//! - `tables` lists each table the batch touches once, for memtable binding in the pipeline.

use crate::error::{Error, Result};
use crate::key::ValueKind;
use crate::options::{MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::redo::record::{get_op, put_op, Op};
use crate::subtable::TableInner;
use crate::Table;
use std::sync::Arc;

/// An atomic group of writes, possibly spanning several tables of one database.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let db = riptide::Db::open(dir.path(), riptide::Options::default())?;
/// let orders = db.create_table("orders")?;
/// let stock = db.create_table("stock")?;
/// let mut batch = riptide::WriteBatch::new();
/// batch.put(&orders, b"order-1", b"sku-9 x2")?;
/// batch.put(&stock, b"sku-9", b"98")?;
/// db.write(batch, &riptide::WriteOptions::default())?;
/// assert_eq!(stock.get(b"sku-9")?, Some(b"98".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default, Clone)]
pub struct WriteBatch {
    pub(crate) rep: Vec<u8>,
    pub(crate) count: u32,
    pub(crate) tables: Vec<Arc<TableInner>>,
    pub(crate) db_id: Option<u64>,
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("ops", &self.count)
            .field("bytes", &self.rep.len())
            .finish()
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of puts and deletes in the batch.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True if the batch holds no op.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size in bytes (what the batch adds to the redo log).
    pub fn size_in_bytes(&self) -> usize {
        self.rep.len()
    }

    /// Removes every op.
    pub fn clear(&mut self) {
        self.rep.clear();
        self.count = 0;
        self.tables.clear();
        self.db_id = None;
    }

    /// Sets `key` to `value` in `table`.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::BatchTooLarge`],
    /// [`Error::ForeignTable`] (a table of another database than earlier ops); the batch is
    /// unchanged then.
    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.add(table, ValueKind::Put, key, value)
    }

    /// Deletes `key` from `table` (a tombstone; deleting a missing key is fine).
    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<()> {
        self.add(table, ValueKind::Delete, key, &[])
    }

    fn add(&mut self, table: &Table, kind: ValueKind, key: &[u8], value: &[u8]) -> Result<()> {
        check_kv_sizes(key, value)?;
        let grown = self.rep.len() + key.len() + value.len() + 21;
        if grown > MAX_BATCH_SIZE {
            return Err(Error::BatchTooLarge {
                len: grown,
                max: MAX_BATCH_SIZE,
            });
        }
        let db_id = table.db_id();
        match self.db_id {
            Some(id) if id != db_id => return Err(Error::ForeignTable { what: "write batch" }),
            _ => self.db_id = Some(db_id),
        }
        let inner = table.inner();
        if !self.tables.iter().any(|t| t.id == inner.id) {
            self.tables.push(inner.clone());
        }
        put_op(&mut self.rep, kind, inner.id, key, value);
        self.count += 1;
        Ok(())
    }

    /// Iterates the ops with LSNs `first_lsn..`.
    pub(crate) fn ops(&self, first_lsn: u64) -> BatchOps<'_> {
        BatchOps {
            rep: &self.rep,
            pos: 0,
            lsn: first_lsn,
        }
    }
}

/// Iterator over a batch's ops.
pub(crate) struct BatchOps<'a> {
    rep: &'a [u8],
    pos: usize,
    lsn: u64,
}

impl<'a> Iterator for BatchOps<'a> {
    type Item = Op<'a>;

    fn next(&mut self) -> Option<Op<'a>> {
        if self.pos >= self.rep.len() {
            return None;
        }
        // The rep was encoded by `put_op` in this process, so decoding cannot fail; a `None`
        // would end the iteration rather than panic.
        let op = get_op(self.rep, &mut self.pos, self.lsn)?;
        self.lsn += 1;
        Some(op)
    }
}

/// Refuses keys over [`MAX_KEY_SIZE`] and values over [`MAX_VALUE_SIZE`] with typed errors (for
/// batches and transaction buffers alike).
pub(crate) fn check_kv_sizes(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_SIZE,
        });
    }
    if value.len() > MAX_VALUE_SIZE {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_SIZE,
        });
    }
    Ok(())
}
