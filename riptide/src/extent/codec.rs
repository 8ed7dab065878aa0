//! Block codecs: how a data block's contents are compressed (the trailer's type byte says
//! which; see `docs/format.md`).
//!
//! Stored forms:
//! - type 0 (none): the block as is;
//! - type 1 (LZ4): `varint32 raw_len ‖ LZ4 block` (lz4_flex block format);
//! - type 2 (zstd, extent format 4 on): `varint32 raw_len ‖ zstd frame` (no checksum and no
//!   content size in the frame: the trailer's CRC32C covers the stored bytes, the prefix gives
//!   the size);
//! - type 3 (zstd with the extent's dictionary, extent format 5 on): as type 2, the frame
//!   compressed with the dictionary stored in the same extent (no dictionary id in the frame).
//! - type 4 (zstd over the block's two streams, extent format 6 on): `varint32 raw_len ‖
//!   varint32 entries ‖ varint32 keys_len ‖ varint32 keys_stored_len ‖ keys frame ‖ values
//!   frame`, the key stream and the value stream of `block::streams` each one zstd frame as in
//!   type 2. Only data blocks; a zstd compressor without a dictionary writes its data blocks so
//!   (about 10 % smaller than type 2 on 100-byte values), and a block that does not split
//!   (never one a builder made) as type 2.
//! - type 5 (extent format 6 on): as type 4, both frames compressed with the extent's
//!   dictionary; a zstd compressor with a dictionary writes its data blocks so, and a block that
//!   does not split as type 3.
//!
//! Invariants:
//! - A block is stored compressed only when that saves at least 12.5 % ([`worth_it`]);
//!   otherwise it is stored as type 0, whatever the codec asked for.
//! - [`decompress`] takes arbitrary bytes (the caller has checked the CRC, but a bug or a
//!   crafted file may still hand it anything) and returns `Err(reason)`, never panics, and
//!   never allocates more than [`MAX_DECOMPRESSED`] bytes per buffer (a type-4/5 block: its
//!   two streams and the joined block) or far beyond what the stored bytes (each frame's, for
//!   the streams) can expand to; the output length must equal the prefix exactly.
//! - Any zstd level decodes with the same decoder: blocks of types 0 to 2 and 4 are interchangeable
//!   whatever level wrote them (compaction copies them between extents of different levels);
//!   a type-3 or type-5 block only between extents holding the same dictionary.

use std::cell::RefCell;

use super::block::streams;
use super::dictionary::BlockDict;
use super::Compression;
use crate::coding::{get_varint32, put_varint};

/// Largest decompressed block accepted (a bound against absurd length prefixes).
const MAX_DECOMPRESSED: usize = 1 << 30;

/// Most bytes one stored zstd byte may expand to (zstd's RLE blocks reach about 32,768).
const ZSTD_MAX_RATIO: usize = 1 << 16;

/// True if `stored` bytes are worth storing instead of `raw_len` raw bytes (a saving of at
/// least 12.5 %).
fn worth_it(stored: usize, raw_len: usize) -> bool {
    stored <= raw_len - raw_len / 8
}

/// Compresses data blocks for one extent builder (keeps the zstd context between blocks).
pub(crate) struct BlockCompressor {
    kind: Compression,
    level: i32,
    /// The dictionary's bytes and id (type 3), loaded into the zstd context when it is made.
    dict: Option<(Box<[u8]>, u64)>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    /// A block's key and value streams (type 4), kept between blocks.
    streams: (Vec<u8>, Vec<u8>),
}

impl BlockCompressor {
    /// A compressor of data blocks for `kind` (at zstd level `level`; ignored by the other
    /// codecs). A zstd kind stores its blocks as type 4 (key and value streams apart), or with
    /// `dict` as type 5 (the streams compressed with it); other codecs ignore `dict`.
    pub(crate) fn new(kind: Compression, level: i32, dict: Option<&BlockDict>) -> Self {
        let zstd_like = kind.is_zstd();
        let (kind, dict) = match dict {
            Some(d) if zstd_like => (Compression::ZstdSplitDict, Some((d.bytes().into(), d.id()))),
            _ if zstd_like => (Compression::ZstdSplit, None),
            _ => (kind, None),
        };
        BlockCompressor {
            kind,
            level,
            dict,
            zstd: None,
            streams: (Vec::new(), Vec::new()),
        }
    }

    /// A compressor that stores whole blocks as one zstd frame (type 2): for blocks that are
    /// not data blocks (a zstd extent's index block).
    pub(crate) fn plain_zstd(level: i32) -> Self {
        BlockCompressor {
            kind: Compression::Zstd,
            ..Self::new(Compression::Zstd, level, None)
        }
    }

    /// The stored type this compressor aims for.
    pub(crate) fn kind(&self) -> Compression {
        self.kind
    }

    /// The id of the dictionary blocks are compressed with (types 3 and 5), if any.
    pub(crate) fn dict_id(&self) -> Option<u64> {
        self.dict.as_ref().map(|d| d.1)
    }

    /// Compresses `raw` into `out` (cleared first). Returns the stored type: `self.kind()`,
    /// or [`Compression::None`] (and `out` unspecified) when compressing would not save
    /// 12.5 % or the codec failed (the block is then stored raw: nothing is lost).
    pub(crate) fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Compression {
        out.clear();
        if raw.is_empty() {
            return Compression::None;
        }
        let stored_as = match self.kind {
            Compression::None => None,
            Compression::Lz4 => compress_lz4(raw, out).then_some(Compression::Lz4),
            Compression::Zstd | Compression::ZstdDict => self.compress_zstd(raw, out).then_some(self.kind),
            Compression::ZstdSplit | Compression::ZstdSplitDict => self.compress_split(raw, out),
        };
        stored_as.unwrap_or(Compression::None)
    }

    /// Type 4 (5 with a dictionary), or type 2 (3) for bytes that are not a block.
    fn compress_split(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Option<Compression> {
        let (mut keys, mut values) = std::mem::take(&mut self.streams);
        let one_frame = if self.dict.is_some() {
            Compression::ZstdDict
        } else {
            Compression::Zstd
        };
        let stored_as = match streams::split(raw, &mut keys, &mut values) {
            Some(entries) => self.compress_streams(raw.len(), entries, &keys, &values, out),
            None => self.compress_zstd(raw, out).then_some(one_frame),
        };
        self.streams = (keys, values);
        stored_as
    }

    fn compress_streams(
        &mut self,
        raw_len: usize,
        entries: u32,
        keys: &[u8],
        values: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Compression> {
        let c = self.zstd_context()?;
        put_varint(out, raw_len as u64);
        put_varint(out, u64::from(entries));
        put_varint(out, keys.len() as u64);
        // The key frame's stored length goes before it: only that (small) frame is moved.
        let at = out.len();
        let n = append_frame(c, keys, out)?;
        let mut len = Vec::with_capacity(5);
        put_varint(&mut len, n as u64);
        out.splice(at..at, len);
        append_frame(c, values, out)?;
        worth_it(out.len(), raw_len).then_some(self.kind)
    }

    /// The zstd context (made on first use, with the dictionary if any).
    fn zstd_context(&mut self) -> Option<&mut zstd::bulk::Compressor<'static>> {
        if self.zstd.is_none() {
            let dict: &[u8] = self.dict.as_ref().map_or(&[], |d| &d.0);
            let Ok(mut c) = zstd::bulk::Compressor::with_dictionary(self.level, dict) else {
                return None;
            };
            // The trailer's CRC covers the bytes, the prefix gives the size and the extent
            // names the dictionary.
            let configured = c.include_checksum(false).is_ok()
                && c.include_contentsize(false).is_ok()
                && c.include_dictid(false).is_ok();
            if !configured {
                return None;
            }
            self.zstd = Some(c);
        }
        self.zstd.as_mut()
    }

    fn compress_zstd(&mut self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        let Some(c) = self.zstd_context() else {
            return false;
        };
        put_varint(out, raw.len() as u64);
        append_frame(c, raw, out).is_some() && worth_it(out.len(), raw.len())
    }
}

/// Appends `src` compressed as one zstd frame to `out`; returns the frame's length.
fn append_frame(c: &mut zstd::bulk::Compressor<'static>, src: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let at = out.len();
    out.resize(at + zstd::zstd_safe::compress_bound(src.len()), 0);
    match c.compress_to_buffer(src, &mut out[at..]) {
        Ok(n) => {
            out.truncate(at + n);
            Some(n)
        }
        Err(_) => {
            out.truncate(at);
            None
        }
    }
}

/// Compresses `raw` with LZ4 into `out` (`varint32 raw_len ‖ lz4 block`); false (and `out`
/// unspecified) when that would not save at least 12.5 %.
fn compress_lz4(raw: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    put_varint(out, raw.len() as u64);
    let hdr = out.len();
    out.resize(hdr + lz4_flex::block::get_maximum_output_size(raw.len()), 0);
    match lz4_flex::block::compress_into(raw, &mut out[hdr..]) {
        Ok(n) if worth_it(hdr + n, raw.len()) => {
            out.truncate(hdr + n);
            true
        }
        _ => false,
    }
}

/// Decompresses the stored `contents` of a block of type `kind` (the caller has checked its
/// CRC); `dict` is the dictionary of the block's extent, which type 3 needs. Type 0 is copied.
pub(crate) fn decompress(kind: Compression, contents: &[u8], dict: Option<&BlockDict>) -> Result<Vec<u8>, String> {
    match kind {
        Compression::None => Ok(contents.to_vec()),
        Compression::Lz4 => decompress_lz4(contents),
        Compression::Zstd => decompress_zstd(contents, None),
        Compression::ZstdDict => match dict {
            Some(d) => decompress_zstd(contents, Some(d)),
            None => Err("zstd block needs a dictionary its extent does not have".into()),
        },
        Compression::ZstdSplit => decompress_split(contents, None),
        Compression::ZstdSplitDict => match dict {
            Some(d) => decompress_split(contents, Some(d)),
            None => Err("zstd stream block needs a dictionary its extent does not have".into()),
        },
    }
}

/// Decompresses type-4 contents (type 5 with `dict`) written by [`BlockCompressor`]: both
/// frames, then the block joined from its streams.
fn decompress_split(contents: &[u8], dict: Option<&BlockDict>) -> Result<Vec<u8>, String> {
    let (raw_len, body) = split_prefix(contents, "zstd stream", ZSTD_MAX_RATIO)?;
    let mut pos = 0;
    let mut field =
        |what: &str| get_varint32(body, &mut pos).ok_or_else(|| format!("malformed {what} of a zstd stream block"));
    let entries = field("entry count")?;
    let keys_len = field("key stream length")? as usize;
    let keys_stored = field("key frame length")? as usize;
    let values_len = raw_len
        .checked_sub(keys_len)
        .ok_or_else(|| format!("key stream of {keys_len} bytes in a block of {raw_len}"))?;
    let frames = &body[pos..];
    if keys_stored > frames.len() {
        return Err(format!(
            "key frame of {keys_stored} bytes in {} stored bytes",
            frames.len()
        ));
    }
    let (keys_frame, values_frame) = frames.split_at(keys_stored);
    // Each frame can expand only so far: refuse before reserving for it.
    for (what, len, frame) in [("key", keys_len, keys_frame), ("value", values_len, values_frame)] {
        if len > frame.len().saturating_mul(ZSTD_MAX_RATIO).saturating_add(16) {
            return Err(format!(
                "implausible {what} stream of {len} bytes for a {}-byte frame",
                frame.len()
            ));
        }
    }
    STREAM_SCRATCH.with(|cell| {
        let mut scratch = cell
            .try_borrow_mut()
            .map_err(|_| "zstd stream buffers in use".to_string())?;
        let (keys, values) = &mut *scratch;
        let joined = zstd_frame_into(keys_frame, keys_len, dict, keys)
            .and_then(|()| zstd_frame_into(values_frame, values_len, dict, values))
            .and_then(|()| streams::join(keys, values, entries, raw_len));
        // Keep at most a few blocks' worth per thread: a block with a huge value (or a damaged
        // length) must not pin its size in every thread that read it.
        for buf in [keys, values] {
            if buf.capacity() > SCRATCH_KEEP {
                *buf = Vec::new();
            }
        }
        joined
    })
}

/// Stream buffer capacity a thread keeps between blocks (a few 16 KiB blocks).
const SCRATCH_KEEP: usize = 256 << 10;

/// Splits `varint32 raw_len ‖ body`, checking `raw_len` against the bounds of a codec that
/// expands at most `max_ratio` times.
fn split_prefix<'a>(contents: &'a [u8], codec: &str, max_ratio: usize) -> Result<(usize, &'a [u8]), String> {
    let mut pos = 0;
    let raw_len = get_varint32(contents, &mut pos).ok_or_else(|| format!("malformed {codec} length prefix"))? as usize;
    let body = &contents[pos..];
    if raw_len > MAX_DECOMPRESSED || raw_len > body.len().saturating_mul(max_ratio).saturating_add(16) {
        return Err(format!(
            "implausible decompressed length {raw_len} for {} {codec} bytes",
            body.len()
        ));
    }
    Ok((raw_len, body))
}

/// Decompresses LZ4 block contents written by [`compress_lz4`].
pub(crate) fn decompress_lz4(contents: &[u8]) -> Result<Vec<u8>, String> {
    // LZ4 cannot expand more than 255x; anything beyond is a damaged prefix.
    let (raw_len, body) = split_prefix(contents, "LZ4", 255)?;
    let mut out = vec![0u8; raw_len];
    match lz4_flex::block::decompress_into(body, &mut out) {
        Ok(n) if n == raw_len => Ok(out),
        Ok(n) => Err(format!("LZ4 block decompressed to {n} bytes, expected {raw_len}")),
        Err(e) => Err(format!("LZ4 block does not decompress: {e}")),
    }
}

thread_local! {
    /// The key and value streams of the last type-4 or type-5 block this thread decoded
    /// (reused: a block read allocates only its joined bytes).
    static STREAM_SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// One zstd decompression context per thread (creating one per block costs more than
    /// decompressing a small block).
    static ZSTD_DECODER: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// Decompresses zstd block contents written by [`BlockCompressor`] (with `dict` for type 3).
fn decompress_zstd(contents: &[u8], dict: Option<&BlockDict>) -> Result<Vec<u8>, String> {
    let (raw_len, body) = split_prefix(contents, "zstd", ZSTD_MAX_RATIO)?;
    let mut out = Vec::new();
    zstd_frame_into(body, raw_len, dict, &mut out)?;
    Ok(out)
}

/// Decompresses one zstd frame `body` into `out` (cleared first; its capacity is reused), which
/// must come to exactly `raw_len` bytes (the caller has bounded `raw_len`).
fn zstd_frame_into(body: &[u8], raw_len: usize, dict: Option<&BlockDict>, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.reserve(raw_len);
    ZSTD_DECODER.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| "zstd decoder in use".to_string())?;
        if slot.is_none() {
            *slot = Some(zstd::zstd_safe::DCtx::try_create().ok_or("zstd decoder: out of memory")?);
        }
        let d = slot.as_mut().ok_or("zstd decoder missing")?;
        let done = match dict {
            Some(dict) => d.decompress_using_ddict(out, body, dict.ddict()),
            None => d.decompress(out, body),
        };
        match done {
            Ok(n) if n == raw_len && out.len() == raw_len => Ok(()),
            Ok(n) => Err(format!("zstd block decompressed to {n} bytes, expected {raw_len}")),
            Err(code) => {
                // A failed frame may leave the context mid-frame: start the next one afresh.
                *slot = None;
                Err(format!(
                    "zstd block does not decompress: {}",
                    zstd::zstd_safe::get_error_name(code)
                ))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| b"riptide-row-"[i % 12] ^ ((i / 97) as u8 & 3)).collect()
    }

    #[test]
    fn every_codec_round_trips_and_reports_its_type() {
        let raw = sample(16 << 10);
        for kind in [Compression::None, Compression::Lz4, Compression::Zstd] {
            for level in [1, 3, 19] {
                // (Zstd: bytes that are not a data block, stored as one frame.)
                let mut c = BlockCompressor::new(kind, level, None);
                let mut out = Vec::new();
                let stored_as = c.compress(&raw, &mut out);
                assert_eq!(stored_as, kind, "{kind:?} level {level}");
                let back = match stored_as {
                    Compression::None => raw.clone(),
                    k => decompress(k, &out, None).unwrap(),
                };
                assert_eq!(back, raw);
                if kind != Compression::None {
                    assert!(out.len() < raw.len() / 2, "{kind:?}: {} bytes", out.len());
                }
            }
        }
    }

    /// A data block of `n` entries (16-byte keys with zeroed LSN tags, as in a bottom level)
    /// whose values `value(i)` gives.
    fn data_block(n: usize, value: impl Fn(usize) -> Vec<u8>) -> Vec<u8> {
        let mut b = super::super::block::BlockBuilder::with_hash_index(16, false);
        b.region_crcs = false;
        let mut prev = Vec::new();
        for i in 0..n {
            let mut key = (i as u64 * 3).to_be_bytes().to_vec();
            key.extend_from_slice(b"00000000");
            key.extend_from_slice(&1u64.to_le_bytes());
            b.add(&prev, &key, &value(i));
            prev = key;
        }
        b.finish().to_vec()
    }

    /// db_bench's values: 50 random printable bytes, repeated to 100.
    fn bench_value(i: usize) -> Vec<u8> {
        let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let half: Vec<u8> = (0..50)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b' ' + (x % 95) as u8
            })
            .collect();
        [half.clone(), half].concat()
    }

    #[test]
    fn zstd_data_blocks_are_stored_as_two_streams_and_come_back_exactly() {
        let blocks = [
            data_block(135, bench_value),
            data_block(40, |i| sample(i % 300)),
            // All tombstones: an empty value stream.
            data_block(200, |_| Vec::new()),
        ];
        let mut c = BlockCompressor::new(Compression::Zstd, 3, None);
        assert_eq!(c.kind(), Compression::ZstdSplit);
        let mut out = Vec::new();
        for raw in &blocks {
            assert_eq!(c.compress(raw, &mut out), Compression::ZstdSplit);
            assert_eq!(&decompress(Compression::ZstdSplit, &out, None).unwrap(), raw);
        }
        // Bytes that are not a block are stored as one frame (type 2).
        let raw = sample(16 << 10);
        assert_eq!(c.compress(&raw, &mut out), Compression::Zstd);
        assert_eq!(decompress(Compression::Zstd, &out, None).unwrap(), raw);
        // The index-block compressor stores one frame whatever it is given.
        let mut plain = BlockCompressor::plain_zstd(3);
        assert_eq!(plain.compress(&blocks[0], &mut out), Compression::Zstd);
    }

    #[test]
    fn two_streams_store_bench_values_smaller_than_one_frame() {
        let raw = data_block(135, bench_value);
        let mut one = Vec::new();
        let mut two = Vec::new();
        assert_eq!(
            BlockCompressor::plain_zstd(3).compress(&raw, &mut one),
            Compression::Zstd
        );
        assert_eq!(
            BlockCompressor::new(Compression::Zstd, 3, None).compress(&raw, &mut two),
            Compression::ZstdSplit
        );
        assert!(
            two.len() * 100 < one.len() * 95,
            "two streams {} bytes, one frame {}",
            two.len(),
            one.len()
        );
    }

    #[test]
    fn stream_blocks_with_a_dictionary_decode_only_with_it() {
        // A raw-content dictionary: bytes of another block.
        let dict = BlockDict::from_bytes(&data_block(40, |i| bench_value(i + 7))).unwrap();
        let raw = data_block(135, bench_value);
        let mut c = BlockCompressor::new(Compression::Zstd, 3, Some(&dict));
        assert_eq!(c.kind(), Compression::ZstdSplitDict);
        let mut out = Vec::new();
        assert_eq!(c.compress(&raw, &mut out), Compression::ZstdSplitDict);
        assert_eq!(decompress(Compression::ZstdSplitDict, &out, Some(&dict)).unwrap(), raw);
        assert!(decompress(Compression::ZstdSplitDict, &out, None)
            .unwrap_err()
            .contains("dictionary"));
        for i in (0..out.len()).step_by(7) {
            let mut bad = out.clone();
            bad[i] ^= 0x41;
            if let Ok(v) = decompress(Compression::ZstdSplitDict, &bad, Some(&dict)) {
                assert_eq!(v.len(), raw.len());
            }
        }
        // Bytes that are not a block: one frame with the dictionary (type 3).
        let other = sample(8 << 10);
        assert_eq!(c.compress(&other, &mut out), Compression::ZstdDict);
        assert_eq!(decompress(Compression::ZstdDict, &out, Some(&dict)).unwrap(), other);
    }

    #[test]
    fn damaged_stream_contents_are_errors_never_panics() {
        let raw = data_block(60, bench_value);
        let mut out = Vec::new();
        assert_eq!(
            BlockCompressor::new(Compression::Zstd, 3, None).compress(&raw, &mut out),
            Compression::ZstdSplit
        );
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x41;
            if let Ok(v) = decompress(Compression::ZstdSplit, &bad, None) {
                let mut pos = 0;
                assert_eq!(v.len() as u32, get_varint32(&bad, &mut pos).unwrap());
            }
        }
        for n in 0..out.len() {
            assert!(
                decompress(Compression::ZstdSplit, &out[..n], None).is_err(),
                "{n} bytes"
            );
        }
        // A header whose key stream claims more than its frame can hold is refused before
        // anything is reserved for it (raw_len stays plausible for the whole body).
        let mut pos = 0;
        let fields: Vec<u32> = (0..4).map(|_| get_varint32(&out, &mut pos).unwrap()).collect();
        let mut forged = Vec::new();
        let claimed = 100_000_000u64;
        assert!(claimed < (out.len() as u64 - 16) * ZSTD_MAX_RATIO as u64);
        put_varint(&mut forged, claimed);
        put_varint(&mut forged, u64::from(fields[1]));
        put_varint(&mut forged, claimed - 10);
        put_varint(&mut forged, 1);
        forged.extend_from_slice(&out[pos..]);
        assert!(decompress(Compression::ZstdSplit, &forged, None)
            .unwrap_err()
            .contains("implausible key stream"));
        assert_eq!(decompress(Compression::ZstdSplit, &out, None).unwrap(), raw);
    }

    #[test]
    fn incompressible_blocks_are_stored_raw() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for kind in [Compression::Lz4, Compression::Zstd] {
            let mut out = Vec::new();
            assert_eq!(
                BlockCompressor::new(kind, 3, None).compress(&raw, &mut out),
                Compression::None
            );
        }
    }

    #[test]
    fn a_compressor_reuses_its_context_across_blocks() {
        let mut c = BlockCompressor::new(Compression::Zstd, 3, None);
        let mut out = Vec::new();
        for n in [1000, 16 << 10, 300, 64 << 10] {
            let raw = sample(n);
            assert_eq!(c.compress(&raw, &mut out), Compression::Zstd);
            assert_eq!(decompress(Compression::Zstd, &out, None).unwrap(), raw);
        }
    }

    #[test]
    fn damaged_zstd_contents_are_errors_never_panics() {
        let raw = sample(8 << 10);
        let mut out = Vec::new();
        assert_eq!(
            BlockCompressor::new(Compression::Zstd, 3, None).compress(&raw, &mut out),
            Compression::Zstd
        );
        // Every single-byte flip: an error or (rarely, in literals) different bytes; never a
        // panic, and never the wrong length.
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x41;
            if let Ok(v) = decompress(Compression::Zstd, &bad, None) {
                let mut pos = 0;
                assert_eq!(v.len() as u32, get_varint32(&bad, &mut pos).unwrap());
            }
        }
        // Truncations.
        for n in 0..out.len() {
            let _ = decompress(Compression::Zstd, &out[..n], None);
        }
        // A length prefix beyond what the body can expand to is refused before allocating.
        let mut huge = Vec::new();
        put_varint(&mut huge, (MAX_DECOMPRESSED as u64) - 1);
        huge.extend_from_slice(&out[2..]);
        assert!(decompress(Compression::Zstd, &huge, None)
            .unwrap_err()
            .contains("implausible"));
        // The decoder still works after a failure.
        assert_eq!(decompress(Compression::Zstd, &out, None).unwrap(), raw);
    }

    #[test]
    fn damaged_lz4_prefix_is_refused() {
        let mut bad = Vec::new();
        put_varint(&mut bad, 1 << 29);
        bad.extend_from_slice(&[0u8; 8]);
        assert!(decompress(Compression::Lz4, &bad, None)
            .unwrap_err()
            .contains("implausible"));
    }
}
