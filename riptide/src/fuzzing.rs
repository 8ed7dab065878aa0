//! Entry points for the cargo-fuzz targets in `fuzz/` (and their seed and regression tests):
//! every on-disk parser of Riptide, reachable from plain bytes. Not part of the API: compiled
//! only with the `fuzzing` feature (and in this crate's own tests).
//!
//! Invariants:
//! - Every function takes arbitrary bytes and returns a [`Result`]: the parsers under test must
//!   answer damage with a typed error (`Corruption`, `UnsupportedFormat`), never a panic, an
//!   abort, an overflow or an unbounded allocation. A panic that escapes is a bug in the parser,
//!   except the `assert!`s below, which are oracles (a contradiction between two readings of
//!   the same bytes) and also bugs if they fire.
//! - Checksums would stop a fuzzer at the first CRC. Each function therefore takes `fix`:
//!   when true, the harness first rewrites every CRC it can locate (headers, records, block
//!   trailers, footer) so that the bytes reach the structural parsing behind the checksums;
//!   when false the bytes are parsed as they are (the CRC checks themselves are fuzzed).
//! - Nothing here touches the real file system: files live in a [`FaultFs`] or in memory.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::coding::{get_u32, mask_crc, seal_crc_tail, RECORD_HEADER_SIZE};
use crate::error::{Error, Result};
use crate::extent::codec::decompress;
use crate::extent::format::{check_block, decode_index, trailer, Footer, FOOTER_SIZE, TRAILER_SIZE};
use crate::extent::{
    filter_hash, scan_entries, verify_extent, Block, BlockIter, Compression, ExtentBuilder, ExtentOptions,
    ExtentReader, PointRead, PointScratch, EXTENT_SIZE,
};
use crate::fs::{FaultFs, FileSystem, ReadableFile};
use crate::key::{compare_internal_keys, encode_internal_key, ValueKind};
use crate::meta::checkpoint::{load_checkpoint, CHECKPOINT_HEADER_SIZE};
use crate::meta::current::{Current, CURRENT_SIZE};
use crate::meta::edit::MetaState;
use crate::meta::framing::{decode_slog_header, SLOG_HEADER_SIZE};
use crate::meta::replay::replay_slog;
use crate::options::RecoveryMode;
use crate::space::header::{FileHeader, HeaderCopy, HEADER_SIZE};

/// Most entries an iterator walk visits (every entry takes at least 3 bytes, so a block can
/// hold at most a third of its length; the bound only keeps a bug from looping forever).
const MAX_STEPS: usize = 1 << 20;

/// Overwrites 4 bytes at `off` with a little-endian u32 (nothing if out of bounds).
fn set_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Rewrites the CRCs of a sequence of `24-byte header ‖ payload` records starting at `off`
/// (the framing of redo segments, slogs and checkpoints): payload CRC first, then the header
/// CRC over bytes 4..24. A record whose payload runs past the end gets only its header CRC.
fn fix_records(d: &mut [u8], mut off: usize) {
    while off + RECORD_HEADER_SIZE <= d.len() {
        let len = get_u32(d, off + 8).unwrap_or(0) as usize;
        let end = (off + RECORD_HEADER_SIZE).saturating_add(len);
        if end <= d.len() {
            let crc = mask_crc(crc32c::crc32c(&d[off + RECORD_HEADER_SIZE..end]));
            set_u32(d, off + 4, crc);
        }
        let hcrc = mask_crc(crc32c::crc32c(&d[off + 4..off + RECORD_HEADER_SIZE]));
        set_u32(d, off, hcrc);
        if end > d.len() {
            return;
        }
        off = end;
    }
}

// ---------------------------------------------------------------------------------------------
// Data blocks

/// Walks a decoded block every way a reader does: forward, backward, `seek` and `seek_point`
/// to every key seen (and to a few keys that are not there). Checks that a clean forward walk
/// and a clean backward walk see the same entries.
fn walk_block(block: Block) -> Result<usize> {
    let mut it = BlockIter::new(Arc::new(block));
    let mut forward: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    it.seek_to_first();
    while it.valid() && forward.len() < MAX_STEPS {
        forward.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    let forward_ok = it.status().is_ok();
    let mut backward: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    it.seek_to_last();
    while it.valid() && backward.len() < MAX_STEPS {
        backward.push((it.key().to_vec(), it.value().to_vec()));
        it.prev();
    }
    let backward_ok = it.status().is_ok();
    if forward_ok && backward_ok {
        backward.reverse();
        assert!(
            forward == backward,
            "a clean block reads differently forward and backward"
        );
    }
    let ikey = |u: &[u8], lsn| {
        let mut k = Vec::new();
        encode_internal_key(&mut k, u, lsn, ValueKind::Put);
        k
    };
    let probes = [ikey(b"", 0), ikey(b"m", u64::MAX >> 8), vec![0xff; 12], vec![1, 2, 3]];
    for k in forward.iter().take(64).map(|(k, _)| k.clone()).chain(probes) {
        it.seek(&k);
        if it.valid() {
            let _ = (it.key().len(), it.value().len());
            it.next();
        }
        it.seek_point(&k);
        if it.valid() {
            let _ = it.value().len();
        }
    }
    it.status()?;
    Ok(forward.len())
}

/// Data block decoding. `data[0]` selects the mode: bit 0 set = `data[1..]` are stored block
/// contents whose trailer the harness appends with a correct CRC (type: bits 1-3, 0 none, 1
/// LZ4, 2 zstd, 3 zstd with a dictionary, 4 zstd key and value streams, 5 those with a
/// dictionary; 3 and 5 are refused here for want of one, 6 and 7 are unknown types), so the
/// decompressors and then the decoder are reached; bit 0 clear = `data[1..]` are decoded block
/// contents handed straight to the decoder. Returns the number of entries read.
pub fn data_block(data: &[u8]) -> Result<usize> {
    let path: Arc<Path> = Arc::from(Path::new("fuzz.dat"));
    let Some((&mode, rest)) = data.split_first() else {
        return Ok(0);
    };
    let contents = if mode & 1 == 1 {
        let ctype = (mode >> 1) & 7;
        let mut stored = rest.to_vec();
        stored.extend_from_slice(&trailer(rest, ctype));
        let (body, ctype) = check_block(&stored).map_err(|r| Error::corruption(&*path, 0, r))?;
        let codec = Compression::from_u8(ctype)
            .ok_or_else(|| Error::corruption(&*path, 0, format!("unknown block compression type {ctype}")))?;
        decompress(codec, body, None).map_err(|r| Error::corruption(&*path, 0, r))?
    } else {
        rest.to_vec()
    };
    // Compaction's block copy reads blocks with `scan_entries`: whatever it accepts must be
    // strictly ordered and must be exactly what the iterator reads.
    let mut scanned: Vec<Vec<u8>> = Vec::new();
    let scan = scan_entries(&contents, &path, 0, |k, _, _| {
        if scanned.len() >= MAX_STEPS {
            return Err(Error::corruption(Path::new("fuzz.dat"), 0, "step limit"));
        }
        scanned.push(k.to_vec());
        Ok(())
    });
    if scan.is_ok() {
        for pair in scanned.windows(2) {
            assert!(
                compare_internal_keys(&pair[0], &pair[1]) == std::cmp::Ordering::Less,
                "scan_entries accepted keys out of order"
            );
        }
    }
    let n = walk_block(Block::new(contents, path, 0)?)?;
    if scan.is_ok() && n < MAX_STEPS {
        assert_eq!(scanned.len(), n, "scan_entries and the iterator disagree");
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Extents

/// An extent image in memory: `head` at offset 0, `footer` ending at `len`, zeros between
/// (so a fuzz input does not have to carry 2 MiB).
struct SparseExtent {
    head: Vec<u8>,
    footer: [u8; FOOTER_SIZE],
    len: u64,
}

impl ReadableFile for SparseExtent {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.len.saturating_sub(offset)) as usize;
        let footer_at = self.len - FOOTER_SIZE as u64;
        let mut done = 0;
        while done < n {
            let at = offset + done as u64;
            let out = &mut buf[done..n];
            let step = if at >= footer_at {
                let src = &self.footer[(at - footer_at) as usize..];
                let k = out.len().min(src.len());
                out[..k].copy_from_slice(&src[..k]);
                k
            } else {
                // Up to the footer: the head's bytes, then zeros.
                let k = out.len().min((footer_at - at) as usize);
                let src = self.head.get(at as usize..).unwrap_or(&[]);
                let h = k.min(src.len());
                out[..h].copy_from_slice(&src[..h]);
                out[h..k].fill(0);
                k
            };
            done += step;
        }
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }
}

/// Rewrites the trailer CRC of the block at `h_off` with `size` contents bytes, if it fits.
fn fix_trailer(head: &mut [u8], h_off: u64, size: u32) {
    let (Ok(lo), size) = (usize::try_from(h_off), size as usize) else {
        return;
    };
    let Some(end) = lo.checked_add(size).and_then(|e| e.checked_add(TRAILER_SIZE)) else {
        return;
    };
    if end > head.len() {
        return;
    }
    let ctype = head[lo + size];
    let t = trailer(&head[lo..lo + size], ctype);
    head[lo + size..end].copy_from_slice(&t);
}

/// Opens an extent image and reads all of it (`verify_extent`: footer, index, filter,
/// properties, every data block and entry), then does a point lookup of every block's first
/// key. `data` is the extent's valid bytes followed by its 64-byte footer (shorter inputs are
/// zero-padded in front of a footer). With `fix` the harness sets the footer's slot count to
/// one, and rewrites the footer CRC, the meta blocks' trailers and then every data block's
/// trailer named by the (fixed) index. Returns the number of entries.
pub fn extent(data: &[u8], fix: bool) -> Result<u64> {
    let path = Path::new("fuzz.dat");
    let split = data.len().saturating_sub(FOOTER_SIZE);
    let mut head = data[..split].to_vec();
    let mut footer = [0u8; FOOTER_SIZE];
    footer[FOOTER_SIZE - (data.len() - split)..].copy_from_slice(&data[split..]);
    let mut slots = get_u32(&footer, 12).unwrap_or(1).clamp(1, 3);
    if fix {
        slots = 1;
        set_u32(&mut footer, 12, 1);
        let crc = mask_crc(crc32c::crc32c(&footer[..60]));
        set_u32(&mut footer, 60, crc);
        if let Ok(f) = Footer::decode(&footer) {
            for h in [f.index, f.filter, f.props] {
                fix_trailer(&mut head, h.offset, h.size);
            }
            let index = usize::try_from(f.index.offset)
                .ok()
                .and_then(|lo| head.get(lo..lo.checked_add(f.index.size as usize)?.checked_add(1)?));
            // A v5 zstd extent's index block is compressed (its trailer's type byte says so).
            let index = index.and_then(|b| {
                let (contents, ctype) = b.split_at(b.len() - 1);
                match Compression::from_u8(ctype[0])? {
                    Compression::None => Some(contents.to_vec()),
                    codec => decompress(codec, contents, None).ok(),
                }
            });
            if let Some(Ok(entries)) = index.map(|b| decode_index(&b, f.version)) {
                for e in entries {
                    fix_trailer(&mut head, e.offset, e.size);
                }
            }
        }
    }
    let file = SparseExtent {
        head,
        footer,
        len: u64::from(slots) * EXTENT_SIZE,
    };
    let verified = verify_extent(&file, path, 0, slots);
    // Point lookups go through the reader's own paths (filter, index search, block seek),
    // whether or not the full verification passed.
    let reader = ExtentReader::open(&file, path, 0, slots)?;
    for i in 0..reader.index().len() {
        let key = reader.index()[i].first_key.clone();
        let user = &key[..key.len().saturating_sub(8)];
        let _ = reader.may_contain(user);
        if let Some(b) = reader.find_block(&key) {
            if let Ok(block) = reader.read_block(&file, b) {
                let mut it = BlockIter::new(Arc::new(block));
                it.seek_point(&key);
                let _ = it.valid() && !it.key().is_empty();
            }
            // The partial read of the same block: tail, hash bucket, one restart region.
            let mut scratch = PointScratch::default();
            if let Ok(PointRead::Found) = reader.point_read(&file, b, &key, filter_hash(user), &mut scratch) {
                let _ = scratch.key().len() + scratch.value().len();
            }
        }
        let _ = reader.read_raw_block(&file, i);
    }
    // Compaction's copy of every block (index entry and filter lines taken as they are, or
    // the block decoded for older formats) must fail cleanly too, and what it builds must
    // open.
    let mut copy = ExtentBuilder::new(ExtentOptions::default());
    let copied = (0..reader.index().len()).all(|i| copy.copy_block(&reader, &file, i).is_ok());
    if copied && !copy.is_empty() {
        if let Ok(built) = copy.finish() {
            let _ = ExtentReader::from_built(&built, path, 0);
        }
    }
    let entries = reader.props().entries;
    verified?;
    Ok(entries)
}

// ---------------------------------------------------------------------------------------------
// Redo log

/// Recovers a redo log whose only segment is `data` (`redo/000001.log` in a [`FaultFs`]) in
/// the recovery mode `mode % 3` (tolerate a torn tail, absolute consistency, point in time),
/// applying nothing. With `fix` the segment header's number is set to 1 and every CRC (the
/// segment header's and each record's) is rewritten. Returns the number of ops replayed.
pub fn redo_segment(data: &[u8], mode: u8, fix: bool) -> Result<u64> {
    let mut d = data.to_vec();
    if fix && d.len() >= 32 {
        d[16..24].copy_from_slice(&1u64.to_le_bytes());
        let crc = mask_crc(crc32c::crc32c(&d[..24]));
        set_u32(&mut d, 24, crc);
        fix_records(&mut d, 32);
    }
    let mode = match mode % 3 {
        0 => RecoveryMode::TolerateCorruptedTail,
        1 => RecoveryMode::AbsoluteConsistency,
        _ => RecoveryMode::PointInTime,
    };
    let fs = FaultFs::new();
    let dir = Path::new("/db/redo");
    fs.write_file(&dir.join("000001.log"), d);
    let mut ops = 0u64;
    let report = crate::redo::recover(&fs, dir, mode, &mut |op| {
        let _ = (op.key.len(), op.value.len());
        ops += 1;
        Ok(())
    })?;
    assert_eq!(
        report.ops, ops,
        "recovery reports a different op count than it replayed"
    );
    Ok(ops)
}

// ---------------------------------------------------------------------------------------------
// Metadata

/// Replays a slog image (`meta/SLOG-000001`) into the empty state: header, framing (torn
/// tails, damage in the middle), records, transactions, and every entry applied. With `fix`
/// the header's number is set to 1 and every CRC is rewritten. Returns the transactions
/// replayed.
pub fn slog(data: &[u8], fix: bool) -> Result<u64> {
    let path = Path::new("/db/meta/SLOG-000001");
    let mut d = data.to_vec();
    if fix && d.len() >= SLOG_HEADER_SIZE {
        d[16..24].copy_from_slice(&1u64.to_le_bytes());
        seal_crc_tail(&mut d[..SLOG_HEADER_SIZE]);
        fix_records(&mut d, SLOG_HEADER_SIZE);
    }
    decode_slog_header(path, &d)?;
    let mut state = MetaState::default();
    let replay = replay_slog(path, &d, &mut state)?;
    state.validate()?;
    Ok(replay.txns)
}

/// Loads a checkpoint image (`meta/CHECKPOINT-000001` in a [`FaultFs`]). With `fix` the
/// header's CRC and every record's CRCs are rewritten. Returns the extents it holds.
pub fn checkpoint(data: &[u8], fix: bool) -> Result<usize> {
    let path = Path::new("/db/meta/CHECKPOINT-000001");
    let mut d = data.to_vec();
    if fix && d.len() >= CHECKPOINT_HEADER_SIZE {
        seal_crc_tail(&mut d[..CHECKPOINT_HEADER_SIZE]);
        fix_records(&mut d, CHECKPOINT_HEADER_SIZE);
    }
    let fs = FaultFs::new();
    fs.write_file(path, d);
    let (_, state) = load_checkpoint(&fs, path)?;
    state.validate()?;
    Ok(state.extent_count())
}

/// The small fixed files, selected by `which % 3`: `meta/CURRENT`, `CATALOG`, and one
/// data-file header copy (checked as the space does: CRC, magic, version, sizes). With `fix`
/// the CRC (CURRENT: last 4 bytes of 36; CATALOG: last 4 bytes; data header: bytes 4092..4096
/// of a 4096-byte copy, zero-padded) is rewritten first.
pub fn small_file(data: &[u8], which: u8, fix: bool) -> Result<()> {
    let mut d = data.to_vec();
    match which % 3 {
        0 => {
            if fix && d.len() == CURRENT_SIZE {
                seal_crc_tail(&mut d);
            }
            Current::decode(Path::new("/db/meta/CURRENT"), &d).map(|_| ())
        }
        1 => {
            if fix && d.len() >= 24 {
                seal_crc_tail(&mut d);
            }
            let c = Catalog::decode(Path::new("/db/CATALOG"), &d)?;
            // What decodes must encode back to the same bytes (no field is lost or invented).
            assert!(
                c.encode() == d,
                "a catalog that decodes does not re-encode to its bytes"
            );
            Ok(())
        }
        _ => {
            if fix {
                d.resize(HEADER_SIZE, 0);
                seal_crc_tail(&mut d);
            }
            match FileHeader::decode(Path::new("/db/data/000001.dat"), 0, &d) {
                HeaderCopy::Valid(_) | HeaderCopy::Blank => Ok(()),
                HeaderCopy::Damaged(e) => Err(e),
            }
        }
    }
}

/// The fuzz targets, by name (one binary each in `fuzz/fuzz_targets/`).
pub const TARGETS: [&str; 6] = ["data_block", "extent", "redo", "slog", "checkpoint", "small_files"];

/// Runs fuzz target `target` on one input. Except for `data_block` (whose first byte is its
/// mode, see [`data_block`]), the first byte holds the flags: bit 0 = `fix`; for `redo` the
/// bits above are the recovery mode, for `small_files` the file kind. The rest is the image.
pub fn run(target: &str, data: &[u8]) -> Result<()> {
    if target == "data_block" {
        return data_block(data).map(|_| ());
    }
    let Some((&flags, image)) = data.split_first() else {
        return Ok(());
    };
    let fix = flags & 1 == 1;
    match target {
        "extent" => extent(image, fix).map(|_| ()),
        "redo" => redo_segment(image, flags >> 1, fix).map(|_| ()),
        "slog" => slog(image, fix).map(|_| ()),
        "checkpoint" => checkpoint(image, fix).map(|_| ()),
        "small_files" => small_file(image, flags >> 1, fix),
        _ => Err(Error::InvalidOption {
            option: "target",
            reason: format!("no fuzz target {target}"),
        }),
    }
}

/// The seed corpus of every target, as [`run`] takes its inputs: each valid image from
/// [`seeds`], with and without `fix` (and, for `redo`, in each recovery mode).
pub fn corpus() -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut out = Vec::new();
    for (kind, bytes) in seeds()? {
        let with = |flags: u8| [&[flags][..], &bytes].concat();
        match kind {
            "block" => out.push(("data_block", bytes.clone())),
            "extent" | "slog" | "checkpoint" => {
                out.push((kind, with(0)));
                out.push((kind, with(1)));
            }
            "redo" => (0..6).for_each(|f| out.push(("redo", with(f)))),
            "current" => out.push(("small_files", with(1))),
            "catalog" => out.push(("small_files", with(3))),
            _ => out.push(("small_files", with(5))),
        }
    }
    Ok(out)
}

/// Valid images of every parsed structure, built by the engine's own writers, to seed the
/// fuzz corpora (`fuzz/seeds.sh`) and to show in tests that the harness reaches deep parsing:
/// `(target name, bytes)`, where the bytes are what the target's fuzz function takes.
pub fn seeds() -> Result<Vec<(&'static str, Vec<u8>)>> {
    // A slog replays onto its checkpoint: the `slog` target starts from the empty state, so
    // its seed comes from a database that never checkpointed; everything else from one that did.
    let mut out: Vec<_> = seed_db(16 << 20)?.into_iter().filter(|(k, _)| *k == "slog").collect();
    out.extend(seed_db(4 << 10)?.into_iter().filter(|(k, _)| *k != "slog"));
    Ok(out)
}

/// Builds a small database in a [`FaultFs`] (extents in L0 and L2, data in the redo log) and
/// cuts its files into seeds.
fn seed_db(slog_checkpoint_bytes: u64) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let fs = FaultFs::new();
    let opts = crate::Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        block_size: 1 << 10,
        slog_checkpoint_bytes,
        flush_on_close: false,
        ..Default::default()
    };
    let db = crate::Db::open("/db", opts)?;
    let t = db.create_table("t")?;
    for i in 0..1500u32 {
        let k = format!("key{:05}", i * 7 % 600);
        if i % 9 == 0 {
            t.delete(k.as_bytes())?;
        } else {
            t.put(
                k.as_bytes(),
                format!("value-{i}-{}", "x".repeat((i % 50) as usize)).as_bytes(),
            )?;
        }
        if i % 50 == 49 {
            t.flush()?;
        }
    }
    t.compact()?;
    t.put(b"key00001", b"after the compaction")?;
    t.flush()?;
    for i in 0..40u32 {
        t.put(format!("late{i:03}").as_bytes(), b"in the redo log only")?;
    }
    drop(t);
    db.close()?;
    let mut out = Vec::new();
    let mut files: Vec<String> = Vec::new();
    for dir in ["/db", "/db/meta", "/db/redo", "/db/data"] {
        for name in fs
            .list_dir(Path::new(dir))
            .map_err(|e| Error::io("list", Path::new(dir), e))?
        {
            files.push(format!("{dir}/{name}"));
        }
    }
    files.sort();
    for f in &files {
        let Some(bytes) = fs.read_file(Path::new(f)) else {
            continue;
        };
        let name = f.rsplit('/').next().unwrap_or_default();
        if name.starts_with("SLOG-") {
            out.push(("slog", bytes));
        } else if name.starts_with("CHECKPOINT-") {
            out.push(("checkpoint", bytes));
        } else if name.ends_with(".log") {
            out.push(("redo", bytes));
        } else if name == "CURRENT" {
            out.push(("current", bytes));
        } else if name == "CATALOG" {
            out.push(("catalog", bytes));
        } else if name.ends_with(".dat") {
            out.push(("data_header", bytes[..HEADER_SIZE.min(bytes.len())].to_vec()));
            // Every extent: its valid bytes and footer, as `extent` takes them; and its data
            // blocks, decoded (mode 0) and stored (mode 1 or 3, LZ4).
            let file = fs
                .open_read(Path::new(f))
                .map_err(|e| Error::io("open", Path::new(f), e))?;
            for slot in 1..bytes.len() as u64 / EXTENT_SIZE {
                let base = slot * EXTENT_SIZE;
                let Ok(r) = ExtentReader::open(file.as_ref(), Path::new(f), base, 1) else {
                    continue;
                };
                let valid = &bytes[base as usize..(base + r.valid_size()) as usize];
                let footer = &bytes[(base + EXTENT_SIZE) as usize - FOOTER_SIZE..(base + EXTENT_SIZE) as usize];
                out.push(("extent", [valid, footer].concat()));
                for (i, e) in r.index().iter().enumerate().take(2) {
                    let stored = &valid[e.offset as usize..e.offset as usize + e.size as usize + TRAILER_SIZE];
                    let ctype = stored[e.size as usize];
                    out.push(("block", [&[1 | (ctype << 1)][..], &stored[..e.size as usize]].concat()));
                    let block = r.read_block(file.as_ref(), i)?;
                    out.push(("block", [&[0u8][..], block.data()].concat()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds parse cleanly through every target (with and without fix-ups, which must not
    /// change valid bytes), so the fuzzers start from inputs that reach the deepest code.
    #[test]
    fn seeds_parse_cleanly_through_their_targets() {
        let seeds = seeds().unwrap();
        let mut kinds: Vec<&str> = seeds.iter().map(|s| s.0).collect();
        kinds.dedup();
        for want in [
            "block",
            "catalog",
            "checkpoint",
            "current",
            "data_header",
            "extent",
            "redo",
            "slog",
        ] {
            assert!(kinds.contains(&want), "no {want} seed in {kinds:?}");
        }
        for (kind, bytes) in &seeds {
            for fix in [false, true] {
                let r = match *kind {
                    "block" => data_block(bytes).map(|n| assert!(n > 0)),
                    "extent" => extent(bytes, fix).map(|n| assert!(n > 0)),
                    "redo" => (0..3).try_for_each(|m| redo_segment(bytes, m, fix).map(|n| assert!(n > 0))),
                    "slog" => slog(bytes, fix).map(|n| assert!(n > 0)),
                    "checkpoint" => checkpoint(bytes, fix).map(|n| assert!(n > 0)),
                    "current" => small_file(bytes, 0, fix),
                    "catalog" => small_file(bytes, 1, fix),
                    _ => small_file(bytes, 2, fix),
                };
                r.unwrap_or_else(|e| panic!("{kind} seed (fix {fix}): {e}"));
            }
        }
    }

    /// With fix-ups, a flipped byte anywhere gets past the checksums; whatever it does, the
    /// parsers answer with a value or a typed error (never a panic).
    #[test]
    fn flipped_seeds_with_fixed_checksums_never_panic() {
        for (kind, bytes) in seeds().unwrap() {
            let step = (bytes.len() / 300).max(1);
            for at in (0..bytes.len()).step_by(step) {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[at] ^= x;
                    let _ = match kind {
                        "block" => data_block(&b).map(|_| ()),
                        "extent" => extent(&b, true).map(|_| ()),
                        "redo" => redo_segment(&b, at as u8, true).map(|_| ()),
                        "slog" => slog(&b, true).map(|_| ()),
                        "checkpoint" => checkpoint(&b, true).map(|_| ()),
                        "current" => small_file(&b, 0, true),
                        "catalog" => small_file(&b, 1, true),
                        _ => small_file(&b, 2, true),
                    };
                }
            }
        }
    }

    /// Every input kept in `fuzz/regressions/<target>/` (inputs that once crashed a fuzz
    /// target, and the seed corpus) runs through its target without a panic.
    #[test]
    fn fuzz_regressions_and_corpus_replay_without_panics() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
        let mut n = 0;
        for target in TARGETS {
            let Ok(entries) = std::fs::read_dir(dir.join(target)) else {
                continue;
            };
            for e in entries {
                let path = e.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let _ = run(target, &data);
                n += 1;
            }
        }
        assert!(n > 0, "no regression inputs under {}", dir.display());
        for (target, data) in corpus().unwrap() {
            run(target, &data).unwrap_or_else(|e| panic!("{target} seed: {e}"));
        }
    }
}
