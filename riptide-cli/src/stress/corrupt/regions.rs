//! Steps 2 and 3 of the sweep: every byte of the database assigned a region kind, one damage
//! picked per round, and the damaged copy materialised in an in-memory `FaultFs`.
//!
//! Invariant: the pristine files are read once and never written; every round works on its own
//! in-memory copy.

use super::*;

/// Every file of the database, by path relative to it.
pub(super) fn load_files(db: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let dir = db.join(&rel);
        for e in std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let r = rel.join(e.file_name());
            if e.file_type().map_err(|e| e.to_string())?.is_dir() {
                dirs.push(r);
            } else {
                let bytes = std::fs::read(db.join(&r)).map_err(|e| format!("reading {}: {e}", r.display()))?;
                out.insert(r, bytes);
            }
        }
    }
    Ok(out)
}

/// The regions of every kind (`KINDS` order).
pub(super) fn regions(db: &Path, files: &BTreeMap<PathBuf, Vec<u8>>) -> Result<Vec<Vec<Region>>, String> {
    let mut kinds: Vec<Vec<Region>> = vec![Vec::new(); KINDS.len()];
    let whole = |file: &Path, len: usize| Region {
        file: file.to_path_buf(),
        start: 0,
        end: len as u64,
    };
    // Extent regions of each data file, from the metadata.
    let fs = inspect::posix();
    let mut extent_parts: BTreeMap<PathBuf, Vec<(usize, u64, u64)>> = BTreeMap::new();
    for id in inspect::extent_ids(fs.as_ref(), db).map_err(|e| format!("extent ids: {e}"))? {
        for (name, path, off, len) in
            inspect::extent_regions(fs.as_ref(), db, &id).map_err(|e| format!("extent {id}: {e}"))?
        {
            let rel = path.strip_prefix(db).map_err(|e| e.to_string())?.to_path_buf();
            let (kind, len) = match name.as_str() {
                // A data block's region is its contents; its 5-byte trailer follows.
                n if n.starts_with("data block") => (EXTENT_BLOCK, len + 5),
                "footer" => (EXTENT_FOOTER, len),
                _ => (EXTENT_META, len),
            };
            extent_parts.entry(rel).or_default().push((kind, off, off + len));
        }
    }
    for (rel, bytes) in files {
        if bytes.is_empty() {
            continue; // LOCK: nothing to flip
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = match rel.parent().and_then(|p| p.to_str()).unwrap_or("") {
            "" if name == "CATALOG" => Some(0),
            "meta" if name == "CURRENT" => Some(1),
            "meta" if name.starts_with("CHECKPOINT-") => Some(2),
            "meta" if name.starts_with("SLOG-") => Some(3),
            "redo" if name.ends_with(".log") => Some(REDO),
            "data" if name.ends_with(".dat") => None,
            // Read only by a view opening next to a writer (which fails, typed, on damage).
            "" if name == "WRITER" => continue,
            _ => return Err(format!("unexpected file {} in the database", rel.display())),
        };
        if let Some(k) = kind {
            kinds[k].push(whole(rel, bytes.len()));
            if k == REDO {
                // The newest segment's last records (redo files are listed in order, so the
                // last one pushed wins): where the torn-tail rule applies.
                kinds[REDO_TAIL] = vec![Region {
                    file: rel.clone(),
                    start: (bytes.len() as u64).saturating_sub(1024).max(32),
                    end: bytes.len() as u64,
                }];
            }
            continue;
        }
        // A data file: header copies, extent parts, and everything else is unused.
        let mut parts: Vec<(usize, u64, u64)> = extent_parts.remove(rel).unwrap_or_default();
        parts.push((DATA_HEADER, 0, 4096));
        parts.push((DATA_HEADER, 16 << 10, (16 << 10) + 4096));
        parts.sort_by_key(|p| p.1);
        let mut at = 0u64;
        for (k, s, e) in parts {
            if s > at {
                kinds[UNUSED].push(Region {
                    file: rel.clone(),
                    start: at,
                    end: s,
                });
            }
            kinds[k].push(Region {
                file: rel.clone(),
                start: s,
                end: e,
            });
            at = at.max(e);
        }
        if (bytes.len() as u64) > at {
            kinds[UNUSED].push(Region {
                file: rel.clone(),
                start: at,
                end: bytes.len() as u64,
            });
        }
    }
    if let Some((f, _)) = extent_parts.into_iter().next() {
        return Err(format!("metadata names extents in {}, which is missing", f.display()));
    }
    Ok(kinds)
}

/// A random damage in one of `regions`: the file, the offset and 1–3 non-zero XOR masks (the
/// bytes stay inside the region's file).
pub(super) fn pick(
    rng: &mut StdRng,
    regions: &[Region],
    files: &BTreeMap<PathBuf, Vec<u8>>,
) -> (PathBuf, u64, Vec<u8>) {
    let total: u64 = regions.iter().map(|r| r.end - r.start).sum();
    let mut x = rng.random_range(0..total);
    let r = regions
        .iter()
        .find(|r| {
            let len = r.end - r.start;
            if x < len {
                true
            } else {
                x -= len;
                false
            }
        })
        .unwrap_or(&regions[0]);
    let offset = r.start + x;
    let file_len = files.get(&r.file).map_or(0, |f| f.len() as u64);
    let n = rng.random_range(1..=3u64).min(file_len - offset);
    let masks = (0..n).map(|_| rng.random_range(1..=255u8)).collect();
    (r.file.clone(), offset, masks)
}

/// A fresh in-memory copy of the database, with the damage applied.
pub(super) fn materialize(files: &BTreeMap<PathBuf, Vec<u8>>, damage: Option<(&PathBuf, u64, &[u8])>) -> FaultFs {
    let fs = FaultFs::new();
    for (rel, bytes) in files {
        let mut b = bytes.clone();
        if let Some((f, off, masks)) = damage {
            if f == rel {
                for (i, m) in masks.iter().enumerate() {
                    b[off as usize + i] ^= m;
                }
            }
        }
        fs.write_file(&Path::new(MEM_DB).join(rel), b);
    }
    fs
}

pub(super) fn save_copy(
    db: &Path,
    round: u32,
    files: &BTreeMap<PathBuf, Vec<u8>>,
    file: &PathBuf,
    offset: u64,
    masks: &[u8],
) -> String {
    let mut out = db.as_os_str().to_owned();
    out.push(format!(".failed-round-{round}"));
    let out = PathBuf::from(out);
    let fs = materialize(files, Some((file, offset, masks)));
    for rel in files.keys() {
        let target = out.join(rel);
        if let (Some(bytes), Some(parent)) = (fs.read_file(&Path::new(MEM_DB).join(rel)), target.parent()) {
            if std::fs::create_dir_all(parent)
                .and_then(|_| std::fs::write(&target, bytes))
                .is_err()
            {
                return format!("(could not write {})", target.display());
            }
        }
    }
    out.display().to_string()
}

// ---------------------------------------------------------------------------------------------
// One round
