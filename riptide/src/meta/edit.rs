//! Metadata as plain data: extent metadata, per-table edits, the whole-database [`MetaState`],
//! and the byte encoding of [`SlogEntry`] shared by the slog and checkpoints (see
//! `docs/format.md`, "Entries").
//!
//! Invariants of a [`MetaState`] (kept by [`MetaState::apply`] and checked by
//! `MetaState::from_tables` / [`MetaState::validate`]):
//! - Every extent id is live in at most one place (one table, level, layer) of the whole state.
//! - Levels are 0..=2; L1 and L2 use only layer id 0; every L0 layer id is below the table's
//!   `next_layer`; an extent's `table` field names the table it is filed under.
//! - No layer is empty (empty layers are dropped), and the extents of a layer are sorted by
//!   `smallest` ([`compare_internal_keys`]), ties by id.
//! - `apply` is all-or-nothing: an entry that would break an invariant, remove an extent that is
//!   not there, add an id that is already live, or move `flushed_lsn`/`next_layer` backward is
//!   [`Error::Corruption`] and leaves the state unchanged.
//!
//! Encoding: entries are self-delimiting; decoding never trusts a count or length beyond the
//! bytes present and never panics on arbitrary input.

use crate::coding::{get_varint, put_varint};
use crate::error::{Error, Result};
use crate::extent::BuiltExtent;
use crate::key::compare_internal_keys;
use crate::space::ExtentId;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

/// The path named in [`Error::Corruption`] for a violation found in memory (not in a file).
pub(crate) const STATE_PATH: &str = "<meta state>";

pub(crate) use crate::LEVELS;

/// What metadata knows about one extent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExtentMeta {
    /// The extent's id ([`ExtentIdRaw`]).
    pub id: u64,
    /// Number of consecutive extent slots it occupies.
    pub slots: u32,
    /// The table the extent belongs to.
    pub table: u32,
    /// Smallest internal key (see `crate::key`).
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Lowest LSN of any entry.
    pub min_lsn: u64,
    /// Highest LSN of any entry.
    pub max_lsn: u64,
    /// Number of entries.
    pub entries: u64,
    /// Number of tombstones among them.
    pub deletes: u64,
    /// Valid bytes of the extent.
    pub data_size: u64,
    /// Number of data blocks.
    pub blocks: u32,
}

impl ExtentMeta {
    /// Checks every checksum of this extent's bytes (`file` at `base`) and that its
    /// properties match this metadata: `Ok(None)` when all is well, `Ok(Some(problem))` when
    /// the bytes check but disagree with the metadata, `Err(problem)` when they do not check.
    /// For `riptide inspect verify`.
    pub(crate) fn verify_bytes(
        &self,
        file: &dyn crate::fs::ReadableFile,
        path: &std::path::Path,
        base: u64,
    ) -> std::result::Result<Option<String>, String> {
        let id = ExtentId(self.id);
        let r = crate::extent::verify_extent(file, path, base, self.slots)
            .map_err(|err| format!("extent {id} (table id {}): {err}", self.table))?;
        let p = r.props();
        let agrees = p.entries == self.entries && p.smallest == self.smallest && p.largest == self.largest;
        Ok((!agrees).then(|| {
            format!(
                "extent {id}: properties ({} entries) disagree with its metadata ({} entries)",
                p.entries, self.entries
            )
        }))
    }

    /// The metadata of a new extent of `table`, `built` and written at `id` (the outputs of
    /// flushes and compactions).
    pub(crate) fn of_built(table: u32, id: ExtentId, built: &BuiltExtent) -> ExtentMeta {
        let p = &built.props;
        ExtentMeta {
            id: id.0,
            slots: built.slots,
            table,
            smallest: p.smallest.clone(),
            largest: p.largest.clone(),
            min_lsn: p.min_lsn,
            max_lsn: p.max_lsn,
            entries: p.entries,
            deletes: p.deletes,
            data_size: built.data_size,
            blocks: built.blocks,
        }
    }
}

/// One change to one table's extent tree: removals are applied before additions, so an extent
/// can move (remove at the old position, add at the new one, same id) in one edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableEdit {
    /// The table changed.
    pub table: u32,
    /// `(level 0..=2, layer id (0 for L1/L2), extent id)` to remove.
    pub removed: Vec<(u8, u64, u64)>,
    /// `(level, layer id, extent)` to add.
    pub added: Vec<(u8, u64, ExtentMeta)>,
    /// New recovery point: every write to this table with LSN <= this is in extents.
    pub flushed_lsn: Option<u64>,
    /// The next L0 layer id to assign.
    pub next_layer: Option<u64>,
}

/// One entry of a slog mini-transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlogEntry {
    /// A change to one table.
    Edit(TableEdit),
    /// The table and all its extents are gone.
    DropTable(u32),
}

/// Where a live extent is filed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Location {
    table: u32,
    level: u8,
    layer: u64,
}

/// Plain metadata of every sub-table; what a checkpoint holds and what replay produces.
///
/// `tables` is public for reading. Change it only through [`MetaState::apply`], or build a
/// state with `MetaState::from_tables`: a private index of extent locations is kept in step
/// with it. Equality compares `tables` only.
#[derive(Clone, Debug, Default)]
pub(crate) struct MetaState {
    /// Every table with metadata, by id.
    pub tables: BTreeMap<u32, TableMeta>,
    /// Extent id -> where it lives; exactly the extents of `tables`.
    index: HashMap<u64, Location>,
}

impl PartialEq for MetaState {
    fn eq(&self, other: &Self) -> bool {
        self.tables == other.tables
    }
}

impl Eq for MetaState {}

/// Metadata of one table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TableMeta {
    /// Every write to this table with LSN <= this is in extents (redo replay skips them).
    pub flushed_lsn: u64,
    /// The next L0 layer id to assign.
    pub next_layer: u64,
    /// Per level: layer id -> extents sorted by `smallest`. L1 and L2 have only layer 0.
    pub levels: [BTreeMap<u64, Vec<ExtentMeta>>; LEVELS],
}

impl TableMeta {
    /// Number of extents in the table.
    #[cfg(test)]
    pub(crate) fn extent_count(&self) -> usize {
        self.levels.iter().flat_map(|l| l.values()).map(Vec::len).sum()
    }

    /// Every extent of the table with its level and layer, level by level, layers ascending.
    pub(crate) fn extents(&self) -> impl Iterator<Item = (u8, u64, &ExtentMeta)> {
        self.levels.iter().enumerate().flat_map(|(level, layers)| {
            layers
                .iter()
                .flat_map(move |(&layer, v)| v.iter().map(move |e| (level as u8, layer, e)))
        })
    }
}

/// The order of extents within a layer.
pub(crate) fn extent_order(a: &ExtentMeta, b: &ExtentMeta) -> Ordering {
    compare_internal_keys(&a.smallest, &b.smallest).then(a.id.cmp(&b.id))
}

fn check_position(level: u8, layer: u64) -> std::result::Result<(), String> {
    if usize::from(level) >= LEVELS {
        return Err(format!("level {level} does not exist"));
    }
    if level > 0 && layer != 0 {
        return Err(format!("L{level} has only layer 0, not layer {layer}"));
    }
    Ok(())
}

impl MetaState {
    /// Builds a state from plain tables, checking every invariant (see the module docs).
    pub(crate) fn from_tables(tables: BTreeMap<u32, TableMeta>) -> Result<Self> {
        let mut state = MetaState {
            tables,
            index: HashMap::new(),
        };
        state.rebuild_index().map_err(|r| Error::corruption(STATE_PATH, 0, r))?;
        Ok(state)
    }

    /// Checks every invariant of `tables`, including that the private index matches them.
    pub(crate) fn validate(&self) -> Result<()> {
        let mut seen: HashMap<u64, Location> = HashMap::with_capacity(self.index.len());
        for (&table, tm) in &self.tables {
            Self::check_table(table, tm, &mut seen).map_err(|r| Error::corruption(STATE_PATH, 0, r))?;
        }
        if seen != self.index {
            return Err(Error::corruption(
                STATE_PATH,
                0,
                "the extent index does not match the tables (tables changed outside apply)",
            ));
        }
        Ok(())
    }

    fn check_table(table: u32, tm: &TableMeta, seen: &mut HashMap<u64, Location>) -> std::result::Result<(), String> {
        for (level, layers) in tm.levels.iter().enumerate() {
            let level = level as u8;
            for (&layer, extents) in layers {
                check_position(level, layer).map_err(|r| format!("table {table}: {r}"))?;
                if level == 0 && layer >= tm.next_layer {
                    return Err(format!(
                        "table {table}: L0 layer {layer} is not below next_layer {}",
                        tm.next_layer
                    ));
                }
                if extents.is_empty() {
                    return Err(format!("table {table}: L{level} layer {layer} is empty"));
                }
                for (i, e) in extents.iter().enumerate() {
                    if e.table != table {
                        return Err(format!(
                            "extent {} of table {} is filed under table {table}",
                            e.id, e.table
                        ));
                    }
                    if i > 0 && extent_order(&extents[i - 1], e) != Ordering::Less {
                        return Err(format!(
                            "table {table}: L{level} layer {layer} is not sorted at extent {}",
                            e.id
                        ));
                    }
                    if seen.insert(e.id, Location { table, level, layer }).is_some() {
                        return Err(format!("extent {} is live twice", e.id));
                    }
                }
            }
        }
        Ok(())
    }

    fn rebuild_index(&mut self) -> std::result::Result<(), String> {
        let mut seen = HashMap::new();
        for (&table, tm) in &self.tables {
            Self::check_table(table, tm, &mut seen)?;
        }
        self.index = seen;
        Ok(())
    }

    /// Applies one entry; a removal of an extent that is not there, or an add of an id already
    /// present anywhere, is [`Error::Corruption`] (replay of a damaged log must not silently
    /// diverge). Empty layers are dropped. Extents within a layer are kept sorted by `smallest`
    /// ([`compare_internal_keys`]). An Edit for a table not present creates it. On error the
    /// state is unchanged.
    pub fn apply(&mut self, entry: &SlogEntry) -> Result<()> {
        self.try_apply(entry).map_err(|r| Error::corruption(STATE_PATH, 0, r))
    }

    /// [`MetaState::apply`] with the reason as a plain string (callers add file and offset).
    pub(crate) fn try_apply(&mut self, entry: &SlogEntry) -> std::result::Result<(), String> {
        match entry {
            SlogEntry::DropTable(table) => {
                if let Some(tm) = self.tables.remove(table) {
                    for (_, _, e) in tm.extents() {
                        self.index.remove(&e.id);
                    }
                }
                Ok(())
            }
            SlogEntry::Edit(edit) => self.apply_edit(edit),
        }
    }

    fn apply_edit(&mut self, edit: &TableEdit) -> std::result::Result<(), String> {
        let t = edit.table;
        // Validate everything first, so a refused edit changes nothing.
        let mut removed_ids = HashSet::with_capacity(edit.removed.len());
        for &(level, layer, id) in &edit.removed {
            check_position(level, layer)?;
            let want = Location { table: t, level, layer };
            match self.index.get(&id) {
                Some(loc) if *loc == want => {}
                Some(loc) => {
                    return Err(format!(
                        "removal of extent {id} from table {t} L{level} layer {layer}, but it lives in table {} L{} layer {}",
                        loc.table, loc.level, loc.layer
                    ))
                }
                None => return Err(format!("removal of extent {id} from table {t}, but it is not live")),
            }
            if !removed_ids.insert(id) {
                return Err(format!("extent {id} removed twice in one edit"));
            }
        }
        let (cur_flushed, cur_next) = self.tables.get(&t).map_or((0, 0), |tm| (tm.flushed_lsn, tm.next_layer));
        if let Some(f) = edit.flushed_lsn {
            if f < cur_flushed {
                return Err(format!("table {t}: flushed_lsn moves back from {cur_flushed} to {f}"));
            }
        }
        if let Some(n) = edit.next_layer {
            if n < cur_next {
                return Err(format!("table {t}: next_layer moves back from {cur_next} to {n}"));
            }
        }
        let next_layer = edit.next_layer.unwrap_or(cur_next);
        let mut added_ids = HashSet::with_capacity(edit.added.len());
        for (level, layer, e) in &edit.added {
            check_position(*level, *layer)?;
            if *level == 0 && *layer >= next_layer {
                return Err(format!(
                    "table {t}: extent {} added to L0 layer {layer}, not below next_layer {next_layer}",
                    e.id
                ));
            }
            if e.table != t {
                return Err(format!("extent {} of table {} added to table {t}", e.id, e.table));
            }
            if self.index.contains_key(&e.id) && !removed_ids.contains(&e.id) {
                return Err(format!("extent {} added to table {t}, but it is already live", e.id));
            }
            if !added_ids.insert(e.id) {
                return Err(format!("extent {} added twice in one edit", e.id));
            }
        }

        // Apply.
        let tm = self.tables.entry(t).or_default();
        let mut removals: HashMap<(u8, u64), HashSet<u64>> = HashMap::new();
        for &(level, layer, id) in &edit.removed {
            removals.entry((level, layer)).or_default().insert(id);
            self.index.remove(&id);
        }
        for ((level, layer), ids) in removals {
            let layers = &mut tm.levels[usize::from(level)];
            if let Some(v) = layers.get_mut(&layer) {
                v.retain(|e| !ids.contains(&e.id));
                if v.is_empty() {
                    layers.remove(&layer);
                }
            }
        }
        let mut adds: BTreeMap<(u8, u64), Vec<ExtentMeta>> = BTreeMap::new();
        for (level, layer, e) in &edit.added {
            adds.entry((*level, *layer)).or_default().push(e.clone());
            self.index.insert(
                e.id,
                Location {
                    table: t,
                    level: *level,
                    layer: *layer,
                },
            );
        }
        for ((level, layer), mut new) in adds {
            new.sort_by(extent_order);
            let slot = tm.levels[usize::from(level)].entry(layer).or_default();
            let old = std::mem::take(slot);
            *slot = merge_sorted(old, new);
        }
        if let Some(f) = edit.flushed_lsn {
            tm.flushed_lsn = f;
        }
        tm.next_layer = next_layer;
        Ok(())
    }

    /// All live extents of all tables.
    pub fn extents(&self) -> impl Iterator<Item = &ExtentMeta> {
        self.tables.values().flat_map(|tm| tm.extents().map(|(_, _, e)| e))
    }

    /// Number of live extents.
    pub(crate) fn extent_count(&self) -> usize {
        self.index.len()
    }

    /// True if extent `id` is live somewhere.
    #[cfg(test)]
    pub(crate) fn contains_extent(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }
}

/// Merges two vectors sorted by [`extent_order`].
fn merge_sorted(a: Vec<ExtentMeta>, b: Vec<ExtentMeta>) -> Vec<ExtentMeta> {
    if a.is_empty() {
        return b;
    }
    // Fast path (checkpoint loading, appends at the end of a layer).
    if let (Some(x), Some(y)) = (a.last(), b.first()) {
        if extent_order(x, y) == Ordering::Less {
            let mut a = a;
            a.extend(b);
            return a;
        }
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => extent_order(x, y) != Ordering::Greater,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Entry tag: [`SlogEntry::Edit`].
const ENTRY_EDIT: u8 = 1;
/// Entry tag: [`SlogEntry::DropTable`].
const ENTRY_DROP_TABLE: u8 = 2;
/// Edit flag: `flushed_lsn` follows.
const FLAG_FLUSHED_LSN: u8 = 1;
/// Edit flag: `next_layer` follows.
const FLAG_NEXT_LAYER: u8 = 2;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends the encoding of one extent.
pub(crate) fn put_extent(out: &mut Vec<u8>, e: &ExtentMeta) {
    put_varint(out, e.id);
    put_varint(out, u64::from(e.slots));
    put_varint(out, u64::from(e.table));
    put_bytes(out, &e.smallest);
    put_bytes(out, &e.largest);
    for v in [e.min_lsn, e.max_lsn, e.entries, e.deletes, e.data_size] {
        put_varint(out, v);
    }
    put_varint(out, u64::from(e.blocks));
}

/// Appends the encoding of one entry.
pub(crate) fn put_entry(out: &mut Vec<u8>, entry: &SlogEntry) {
    match entry {
        SlogEntry::Edit(e) => {
            out.push(ENTRY_EDIT);
            put_varint(out, u64::from(e.table));
            put_varint(out, e.removed.len() as u64);
            for &(level, layer, id) in &e.removed {
                out.push(level);
                put_varint(out, layer);
                put_varint(out, id);
            }
            put_varint(out, e.added.len() as u64);
            for (level, layer, x) in &e.added {
                out.push(*level);
                put_varint(out, *layer);
                put_extent(out, x);
            }
            let flags = if e.flushed_lsn.is_some() { FLAG_FLUSHED_LSN } else { 0 }
                | if e.next_layer.is_some() { FLAG_NEXT_LAYER } else { 0 };
            out.push(flags);
            if let Some(f) = e.flushed_lsn {
                put_varint(out, f);
            }
            if let Some(n) = e.next_layer {
                put_varint(out, n);
            }
        }
        SlogEntry::DropTable(t) => {
            out.push(ENTRY_DROP_TABLE);
            put_varint(out, u64::from(*t));
        }
    }
}

fn get_u8(buf: &[u8], pos: &mut usize) -> Option<u8> {
    let b = *buf.get(*pos)?;
    *pos += 1;
    Some(b)
}

fn get_u32(buf: &[u8], pos: &mut usize) -> Option<u32> {
    u32::try_from(get_varint(buf, pos)?).ok()
}

fn get_bytes(buf: &[u8], pos: &mut usize) -> Option<Vec<u8>> {
    let len = usize::try_from(get_varint(buf, pos)?).ok()?;
    let end = pos.checked_add(len)?;
    let b = buf.get(*pos..end)?.to_vec();
    *pos = end;
    Some(b)
}

/// A count read from the input, refused if it cannot possibly fit in what is left (each item
/// takes at least `min_item` bytes), so a corrupt count never drives a huge allocation.
fn get_count(buf: &[u8], pos: &mut usize, min_item: usize) -> Option<usize> {
    let n = usize::try_from(get_varint(buf, pos)?).ok()?;
    let left = buf.len().saturating_sub(*pos);
    (n <= left / min_item).then_some(n)
}

/// Decodes one extent at `*pos`; `None` if malformed or truncated.
pub(crate) fn get_extent(buf: &[u8], pos: &mut usize) -> Option<ExtentMeta> {
    Some(ExtentMeta {
        id: get_varint(buf, pos)?,
        slots: get_u32(buf, pos)?,
        table: get_u32(buf, pos)?,
        smallest: get_bytes(buf, pos)?,
        largest: get_bytes(buf, pos)?,
        min_lsn: get_varint(buf, pos)?,
        max_lsn: get_varint(buf, pos)?,
        entries: get_varint(buf, pos)?,
        deletes: get_varint(buf, pos)?,
        data_size: get_varint(buf, pos)?,
        blocks: get_u32(buf, pos)?,
    })
}

/// Decodes one entry at `*pos`; `None` if malformed or truncated (`*pos` is then unspecified).
pub(crate) fn get_entry(buf: &[u8], pos: &mut usize) -> Option<SlogEntry> {
    match get_u8(buf, pos)? {
        ENTRY_EDIT => {
            let table = get_u32(buf, pos)?;
            let n = get_count(buf, pos, 3)?;
            let mut removed = Vec::with_capacity(n);
            for _ in 0..n {
                let level = get_u8(buf, pos)?;
                let layer = get_varint(buf, pos)?;
                let id = get_varint(buf, pos)?;
                removed.push((level, layer, id));
            }
            let n = get_count(buf, pos, 13)?;
            let mut added = Vec::with_capacity(n);
            for _ in 0..n {
                let level = get_u8(buf, pos)?;
                let layer = get_varint(buf, pos)?;
                added.push((level, layer, get_extent(buf, pos)?));
            }
            let flags = get_u8(buf, pos)?;
            if flags & !(FLAG_FLUSHED_LSN | FLAG_NEXT_LAYER) != 0 {
                return None;
            }
            let flushed_lsn = if flags & FLAG_FLUSHED_LSN != 0 {
                Some(get_varint(buf, pos)?)
            } else {
                None
            };
            let next_layer = if flags & FLAG_NEXT_LAYER != 0 {
                Some(get_varint(buf, pos)?)
            } else {
                None
            };
            Some(SlogEntry::Edit(TableEdit {
                table,
                removed,
                added,
                flushed_lsn,
                next_layer,
            }))
        }
        ENTRY_DROP_TABLE => Some(SlogEntry::DropTable(get_u32(buf, pos)?)),
        _ => None,
    }
}

/// Decodes a payload that is a sequence of entries. `Err(pos)` gives the payload offset of the
/// first malformed entry.
pub(crate) fn decode_entries(payload: &[u8]) -> std::result::Result<Vec<SlogEntry>, usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let start = pos;
        match get_entry(payload, &mut pos) {
            Some(e) => out.push(e),
            None => return Err(start),
        }
    }
    Ok(out)
}

/// A corruption error for a file (helper for the slog and checkpoint readers).
pub(crate) fn corrupt(path: &std::path::Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::corruption(PathBuf::from(path), offset, reason)
}
