//! Offline inspection of a database directory, for `riptide inspect` (like RocksDB's `ldb` and
//! `sst_dump`): the levels of every sub-table, one extent (footer, properties, index, rows), the
//! slog, the redo log, and a checksum verification of every file.
//!
//! Invariant: nothing here writes. The metadata is rebuilt the way recovery does it (the
//! checkpoint named by `meta/CURRENT`, then the committed transactions of the slog) but
//! without truncating torn tails or creating files, so it can run on a damaged copy (it must
//! not run beside an open instance that is changing the files).

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::extent::{BlockIter, ExtentReader, EXTENT_SIZE};
use crate::fs::FileSystem;
use crate::key::decode_internal_key;
use crate::meta::current::{meta_dir, slog_path, Current};
use crate::meta::dump::dump_slog;
use crate::meta::edit::{ExtentMeta, MetaState};
use crate::meta::replay::recover_state;
use crate::space::header::{FileHeader, HeaderCopy, HEADER_COPY_OFFSETS, HEADER_SIZE};
use crate::space::{ExtentId, DATA_DIR};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The result of [`verify`]: what was checked and every problem found.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Files read (catalog, metadata, data files, redo segments).
    pub files: u64,
    /// Extents whose every block, index, filter, properties block and footer were checksummed.
    pub extents: u64,
    /// Redo records checksummed.
    pub redo_records: u64,
    /// Damage found, one line each (file, offset and what is wrong). Empty when all is well.
    pub problems: Vec<String>,
    /// Things worth knowing that are not damage (a torn slog or redo tail that recovery will
    /// cut, slots holding extents no metadata owns, which the next open reclaims).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// True when no damage was found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn data_file_path(db: &Path, file: u32) -> PathBuf {
    db.join(DATA_DIR).join(format!("{file:06}.dat"))
}

/// Reads `meta/CURRENT`.
fn read_current(fs: &dyn FileSystem, db: &Path) -> Result<Current> {
    let path = meta_dir(db).join("CURRENT");
    let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
    let data = file.read_all().map_err(|e| Error::io("read", &path, e))?;
    Current::decode(&path, &data)
}

/// The metadata as recovery would rebuild it (the same replay as `Slog::open`), read-only,
/// with a note when the slog ends in a tail recovery would cut.
pub(crate) fn load_meta(fs: &dyn FileSystem, db: &Path) -> Result<(MetaState, Vec<String>)> {
    let cur = read_current(fs, db)?;
    let r = recover_state(fs, &meta_dir(db), cur)?;
    let mut notes = Vec::new();
    let tail = r.data.len() - r.replay.committed_end;
    if tail > 0 {
        notes.push(format!(
            "{}: {tail} bytes after the last committed transaction (torn or uncommitted); recovery cuts them",
            r.path.display()
        ));
    }
    Ok((r.state, notes))
}

fn table_names(fs: &dyn FileSystem, db: &Path) -> BTreeMap<u32, String> {
    Catalog::load(fs, db)
        .ok()
        .flatten()
        .map(|c| c.tables.into_iter().collect())
        .unwrap_or_default()
}

fn key_text(k: &[u8]) -> String {
    if k.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("'{}'", String::from_utf8_lossy(k))
    } else {
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    }
}

fn ikey_text(ik: &[u8]) -> String {
    match decode_internal_key(ik) {
        Some((u, lsn, kind)) => format!("{} @{lsn} {kind:?}", key_text(u)),
        None => format!("<malformed {}>", key_text(ik)),
    }
}

/// The levels of every sub-table (or only `table`), from the current metadata.
pub fn levels(fs: &dyn FileSystem, db: &Path, table: Option<&str>) -> Result<String> {
    let (state, notes) = load_meta(fs, db)?;
    let names = table_names(fs, db);
    let catalog = Catalog::load(fs, db).ok().flatten();
    let mut out = String::new();
    for (id, name) in &names {
        if table.is_some_and(|t| t != name) {
            continue;
        }
        let meta = state.tables.get(id).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "table {name} (id {id}): recovery point LSN {}, next L0 layer {}",
            meta.flushed_lsn, meta.next_layer
        );
        let options = catalog.as_ref().map(|c| c.options_of(*id)).unwrap_or_default();
        for line in options.describe() {
            let _ = writeln!(out, "  option {line}");
        }
        for (level, layers) in meta.levels.iter().enumerate() {
            let extents: usize = layers.values().map(|v| v.len()).sum();
            let bytes: u64 = layers.values().flatten().map(|e| e.data_size).sum();
            let entries: u64 = layers.values().flatten().map(|e| e.entries).sum();
            let _ = writeln!(
                out,
                "  L{level}: {} layer(s), {extents} extent(s), {bytes} bytes, {entries} entries",
                layers.len()
            );
            for (layer, es) in layers.iter().rev() {
                if level == 0 {
                    let _ = writeln!(out, "    layer {layer}:");
                }
                for e in es {
                    let _ = writeln!(
                        out,
                        "      extent {} x{}: {} .. {}  LSN {}..{}  {} entries ({} deletes), {} bytes, {} blocks",
                        ExtentId(e.id),
                        e.slots,
                        ikey_text(&e.smallest),
                        ikey_text(&e.largest),
                        e.min_lsn,
                        e.max_lsn,
                        e.entries,
                        e.deletes,
                        e.data_size,
                        e.blocks
                    );
                }
            }
        }
    }
    if table.is_none() {
        let (objects, local): (Vec<&ExtentMeta>, Vec<&ExtentMeta>) =
            state.extents().partition(|e| ExtentId(e.id).is_object());
        let bytes = |v: &[&ExtentMeta]| v.iter().map(|e| e.data_size).sum::<u64>();
        let _ = writeln!(
            out,
            "tiers: local {} extent(s), {} bytes; object {} extent(s), {} bytes",
            local.len(),
            bytes(&local),
            objects.len(),
            bytes(&objects)
        );
        let _ = writeln!(out, "{}", space_line(fs, db, bytes(&local))?);
        let pins = crate::tier::pins::Pins::load(fs, db)?;
        if !pins.entries.is_empty() {
            let _ = writeln!(
                out,
                "checkpoint pins: {} checkpoint(s) keep {} object-tier extent(s)",
                pins.entries.len(),
                pins.ids().len()
            );
            for (dir, ids) in &pins.entries {
                let _ = writeln!(out, "  {dir}: {} extent(s)", ids.len());
            }
        }
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    Ok(out)
}

/// `space: ...`: the data files' length and allocated bytes against the live extents' valid
/// bytes (`live`), and their ratio (space amplification).
fn space_line(fs: &dyn FileSystem, db: &Path, live: u64) -> Result<String> {
    let data_dir = db.join(DATA_DIR);
    let (mut files, mut length, mut allocated) = (0u64, 0u64, Some(0u64));
    if fs.exists(&data_dir) {
        for name in fs.list_dir(&data_dir).map_err(|e| Error::io("list", &data_dir, e))? {
            if !crate::space::is_data_file_name(&name) {
                continue;
            }
            let path = data_dir.join(&name);
            files += 1;
            let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
            length += file.len().map_err(|e| Error::io("stat", &path, e))?;
            let a = fs.allocated_bytes(&path).map_err(|e| Error::io("stat", &path, e))?;
            allocated = allocated.zip(a).map(|(x, y)| x + y);
        }
    }
    Ok(match allocated {
        Some(a) if live > 0 => format!(
            "space: {files} data file(s), {length} bytes long, {a} bytes on disk; live extents {live} bytes; \
             space amplification {:.3}",
            a as f64 / live as f64
        ),
        _ => format!("space: {files} data file(s), {length} bytes long; live extents {live} bytes"),
    })
}

fn parse_extent_id(s: &str) -> Option<ExtentId> {
    let (f, slot) = s.split_once('.')?;
    Some(ExtentId::new(f.parse().ok()?, slot.parse().ok()?))
}

/// One extent (`"file.slot"`): footer, properties and index entries, and up to `rows` rows.
pub fn extent(fs: &dyn FileSystem, db: &Path, id: &str, rows: usize) -> Result<String> {
    let eid = parse_extent_id(id).ok_or_else(|| Error::InvalidOption {
        option: "extent",
        reason: format!("`{id}` is not FILE.SLOT (e.g. 1.3)"),
    })?;
    let (state, _) = load_meta(fs, db).unwrap_or_default();
    let meta: Option<&ExtentMeta> = state.extents().find(|e| e.id == eid.0);
    let slots = meta.map_or(1, |m| m.slots);
    let path = data_file_path(db, eid.file());
    let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
    let base = u64::from(eid.slot()) * EXTENT_SIZE;
    let reader = ExtentReader::open(file.as_ref(), &path, base, slots)?;
    let p = reader.props();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "extent {eid} in {} at offset {base}, {slots} slot(s)",
        path.display()
    );
    match meta {
        Some(m) => {
            let _ = writeln!(out, "owned by table id {}", m.table);
        }
        None => {
            let _ = writeln!(out, "not named by the current metadata (free or leaked)");
        }
    }
    let _ = writeln!(out, "properties: {p:#?}");
    if let Some(d) = reader.dictionary() {
        let _ = writeln!(out, "zstd dictionary: {} bytes, id {:016x}", d.bytes().len(), d.id());
    }
    let _ = writeln!(out, "index: {} data block(s)", reader.index().len());
    for (i, e) in reader.index().iter().enumerate() {
        let _ = writeln!(
            out,
            "  block {i}: offset {} size {}  {} .. {}  rows {} deletes {} LSN {}..{}",
            e.offset,
            e.size,
            ikey_text(&e.first_key),
            ikey_text(&e.last_key),
            e.rows,
            e.deletes,
            e.min_lsn,
            e.max_lsn
        );
    }
    let mut shown = 0;
    'blocks: for i in 0..reader.index().len() {
        if shown >= rows {
            break;
        }
        let block = reader.read_block(file.as_ref(), i)?;
        let mut it = BlockIter::new(Arc::new(block));
        it.seek_to_first();
        while it.valid() {
            if shown >= rows {
                break 'blocks;
            }
            let v = it.value();
            let shown_v = if v.len() > 64 {
                format!("{}.. ({} bytes)", key_text(&v[..64]), v.len())
            } else {
                key_text(v)
            };
            let _ = writeln!(out, "  {} => {shown_v}", ikey_text(it.key()));
            shown += 1;
            it.next();
        }
        it.status()?;
    }
    Ok(out)
}

/// Every record of the live slog, and what CURRENT names.
pub fn slog(fs: &dyn FileSystem, db: &Path) -> Result<String> {
    let cur = read_current(fs, db)?;
    let dir = meta_dir(db);
    let mut out = String::new();
    let _ = writeln!(out, "CURRENT: checkpoint {} slog {}", cur.checkpoint, cur.slog);
    let path = slog_path(&dir, cur.slog);
    for (off, rec) in dump_slog(fs, &path)? {
        let _ = writeln!(out, "  @{off}: {rec:?}");
    }
    Ok(out)
}

/// Every redo segment: records, ops, LSN range and damage.
pub fn redo(fs: &dyn FileSystem, db: &Path) -> Result<String> {
    let mut out = String::new();
    for d in crate::redo::dump(fs, &crate::redo::redo_dir(db))? {
        let _ = writeln!(
            out,
            "{}: {} bytes{}, header {:?}, {} records, {} ops, LSN {}..{}{}",
            d.path.display(),
            d.bytes,
            match d.zeros_from {
                Some(end) => format!(" (records end at {end}, zero-filled after)"),
                None => String::new(),
            },
            d.header,
            d.records,
            d.ops,
            d.lsns.0,
            d.lsns.1,
            match &d.damage {
                Some((off, torn, why)) =>
                    format!(", damage at {off} ({why}{})", if *torn { ", torn tail" } else { "" }),
                None => String::new(),
            }
        );
    }
    Ok(out)
}

fn check_data_header(fs: &dyn FileSystem, path: &Path, number: u32, report: &mut VerifyReport) {
    let file = match fs.open_read(path) {
        Ok(f) => f,
        Err(e) => {
            report.problems.push(format!("{}: cannot open: {e}", path.display()));
            return;
        }
    };
    let mut valid = 0;
    for at in HEADER_COPY_OFFSETS {
        let mut buf = vec![0u8; HEADER_SIZE];
        let n = file.read_at(&mut buf, at).unwrap_or(0);
        buf.truncate(n);
        match FileHeader::decode(path, at, &buf) {
            HeaderCopy::Valid(h) if h.file_number == number => valid += 1,
            HeaderCopy::Valid(h) => report.problems.push(format!(
                "{}: header copy at {at} names file {}",
                path.display(),
                h.file_number
            )),
            HeaderCopy::Blank => report
                .problems
                .push(format!("{}: header copy at {at} is blank", path.display())),
            HeaderCopy::Damaged(e) => report.problems.push(e.to_string()),
        }
    }
    if valid == 0 {
        report.problems.push(format!(
            "{}: no valid header copy: the file cannot be opened",
            path.display()
        ));
    }
}

/// Verifies every checksum in the database directory: catalog, CURRENT, checkpoint, slog,
/// every data-file header (both copies), every extent the metadata names (every block, the
/// index, filter and properties blocks, the footer) and every redo record. Also lists slots
/// holding an extent footer that no metadata owns.
pub fn verify(fs: &dyn FileSystem, db: &Path) -> Result<VerifyReport> {
    verify_with_objects(fs, db, None)
}

/// [`verify`], and with `objects` (the database's object store) also every object-tier
/// extent the metadata names (read whole and checksummed), and the extent objects no
/// metadata names (noted: the next open queues them for deletion). Without a store,
/// object-tier extents are noted as not checked.
pub fn verify_with_objects(
    fs: &dyn FileSystem,
    db: &Path,
    objects: Option<&dyn crate::tier::ObjectStore>,
) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    match Catalog::load(fs, db) {
        Ok(Some(_)) => report.files += 1,
        Ok(None) => report.problems.push(format!("{}: no CATALOG", db.display())),
        Err(e) => report.problems.push(e.to_string()),
    }
    let state = match load_meta(fs, db) {
        Ok((state, notes)) => {
            report.files += 2;
            report.notes.extend(notes);
            Some(state)
        }
        Err(e) => {
            report.problems.push(format!("metadata: {e}"));
            None
        }
    };
    // Data files.
    let data_dir = db.join(DATA_DIR);
    let mut files: BTreeSet<u32> = BTreeSet::new();
    if fs.exists(&data_dir) {
        for name in fs.list_dir(&data_dir).map_err(|e| Error::io("list", &data_dir, e))? {
            if let Some(n) = name.strip_suffix(".dat").and_then(|s| s.parse::<u32>().ok()) {
                files.insert(n);
            }
        }
    }
    for &n in &files {
        report.files += 1;
        check_data_header(fs, &data_file_path(db, n), n, &mut report);
    }
    // Extents named by metadata.
    let mut owned: BTreeSet<u64> = BTreeSet::new();
    if let Some(state) = &state {
        let object_extents: Vec<&ExtentMeta> = state.extents().filter(|e| ExtentId(e.id).is_object()).collect();
        match objects {
            Some(store) => {
                let pinned = match crate::tier::pins::Pins::load(fs, db) {
                    Ok(p) => p.ids(),
                    Err(e) => {
                        report.problems.push(format!("checkpoint pins: {e}"));
                        Default::default()
                    }
                };
                let found = crate::tier::verify::verify_objects(store, &object_extents, &pinned);
                report.extents += found.extents;
                report.problems.extend(found.problems);
                report.notes.extend(found.notes);
            }
            None if !object_extents.is_empty() => report.notes.push(format!(
                "{} extent(s) in the object tier not checked (no object store given)",
                object_extents.len()
            )),
            None => {}
        }
        for e in state.extents().filter(|e| !ExtentId(e.id).is_object()) {
            let id = ExtentId(e.id);
            for s in 0..e.slots {
                owned.insert(ExtentId::new(id.file(), id.slot() + s).0);
            }
            let path = data_file_path(db, id.file());
            let file = match fs.open_read(&path) {
                Ok(f) => f,
                Err(err) => {
                    report
                        .problems
                        .push(format!("extent {id}: data file {} missing: {err}", path.display()));
                    continue;
                }
            };
            match e.verify_bytes(file.as_ref(), &path, u64::from(id.slot()) * EXTENT_SIZE) {
                Ok(mismatch) => {
                    report.extents += 1;
                    report.problems.extend(mismatch);
                }
                Err(problem) => report.problems.push(problem),
            }
        }
    }
    // Slots holding a footer that no metadata owns.
    for &n in &files {
        let path = data_file_path(db, n);
        let Ok(file) = fs.open_read(&path) else { continue };
        let len = file.len().unwrap_or(0);
        let slots = len.div_ceil(EXTENT_SIZE);
        for slot in 1..slots {
            let id = ExtentId::new(n, slot as u32);
            if owned.contains(&id.0) {
                continue;
            }
            let end = (slot + 1) * EXTENT_SIZE;
            if end > len {
                continue;
            }
            let mut tail = [0u8; 64];
            if file.read_at(&mut tail, end - 64).unwrap_or(0) == 64 && crate::extent_store::looks_like_footer(&tail) {
                report.notes.push(format!(
                    "slot {id} holds an extent no metadata owns (free space; reclaimed at open)"
                ));
            }
        }
    }
    // Redo log.
    for d in crate::redo::dump(fs, &crate::redo::redo_dir(db))? {
        report.files += 1;
        report.redo_records += d.records;
        if let Err(e) = &d.header {
            report.problems.push(e.clone());
        }
        if let Some((off, torn, why)) = &d.damage {
            let line = format!("{}: at {off}: {why}", d.path.display());
            if *torn {
                report.notes.push(format!("{line} (a torn tail; recovery cuts it)"));
            } else {
                report.problems.push(line);
            }
        }
    }
    Ok(report)
}

/// The data-file path and byte range of every region of extent `id` (`"file.slot"`), for
/// tools and corruption tests: `("data block N" | "index" | "filter" | "properties" |
/// "footer", path, offset, length)`.
pub fn extent_regions(fs: &dyn FileSystem, db: &Path, id: &str) -> Result<Vec<(String, PathBuf, u64, u64)>> {
    let eid = parse_extent_id(id).ok_or_else(|| Error::InvalidOption {
        option: "extent",
        reason: format!("`{id}` is not FILE.SLOT"),
    })?;
    let (state, _) = load_meta(fs, db)?;
    let slots = state.extents().find(|e| e.id == eid.0).map_or(1, |m| m.slots);
    let path = data_file_path(db, eid.file());
    let file = fs.open_read(&path).map_err(|e| Error::io("open", &path, e))?;
    let base = u64::from(eid.slot()) * EXTENT_SIZE;
    let reader = ExtentReader::open(file.as_ref(), &path, base, slots)?;
    let mut out = Vec::new();
    for (i, e) in reader.index().iter().enumerate() {
        let off = reader.block_file_offset(i).unwrap_or(base + e.offset);
        out.push((format!("data block {i}"), path.clone(), off, u64::from(e.size)));
    }
    for (name, (off, len)) in reader.meta_regions() {
        out.push((name.to_string(), path.clone(), base + off, len));
    }
    out.push((
        "footer".to_string(),
        path.clone(),
        base + u64::from(slots) * EXTENT_SIZE - crate::extent::FOOTER_SIZE as u64,
        crate::extent::FOOTER_SIZE as u64,
    ));
    Ok(out)
}

/// The ids (`"file.slot"`) of every extent of every table in the current metadata.
pub fn extent_ids(fs: &dyn FileSystem, db: &Path) -> Result<Vec<String>> {
    let (state, _) = load_meta(fs, db)?;
    Ok(state.extents().map(|e| ExtentId(e.id).to_string()).collect())
}

/// Opens the file system for a directory on disk.
pub fn posix() -> Arc<dyn FileSystem> {
    Arc::new(crate::fs::PosixFs)
}
