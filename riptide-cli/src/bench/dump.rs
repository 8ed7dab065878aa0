//! `--dump_file`: the database's whole contents, for checking that engines agree.
//!
//! After the last benchmark, [`dump`] reads every entry three ways — a forward scan, a backward
//! scan, and a point read of each scanned key and of every key number in `[0, num)` — fails
//! with [`BenchError::Inconsistent`] if they disagree, then writes the forward scan to the file
//! as one `hex(key) hex(value)` line per entry, in key order. Two engines that ran the same
//! seeded single-threaded workload must leave byte-identical dumps
//! (`tests/adapters_agree.rs`).

use super::engine::{BenchEngine, Cursor};
use super::error::BenchError;
use super::flags::Config;
use super::keys::KeyBuf;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

type Entry = (Vec<u8>, Vec<u8>);

fn scan<E: BenchEngine>(db: &E, reverse: bool) -> Result<Vec<Entry>, BenchError> {
    let what = if reverse { "backward scan" } else { "forward scan" };
    let mut it = db.cursor().map_err(|e| BenchError::engine(what, e))?;
    let mut out = Vec::new();
    if reverse {
        it.seek_to_last();
    } else {
        it.seek_to_first();
    }
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        if reverse {
            it.prev();
        } else {
            it.next();
        }
    }
    it.status().map_err(|e| BenchError::engine(what, e))?;
    Ok(out)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The key number of a bench key of `cfg.key_size` bytes below `cfg.num`, if `key` is one.
fn key_number(cfg: &Config, key: &[u8]) -> Option<u64> {
    if key.len() != cfg.key_size || key[8..].iter().any(|&b| b != b'0') {
        return None;
    }
    let k = u64::from_be_bytes(key[..8].try_into().ok()?);
    (k < cfg.num).then_some(k)
}

/// Checks the engine's reads against each other and writes the dump; returns the entry count.
pub fn dump<E: BenchEngine>(db: &E, cfg: &Config, path: &Path) -> Result<u64, BenchError> {
    let forward = scan(db, false)?;
    if let Some(w) = forward.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(BenchError::Inconsistent(format!(
            "the forward scan is not in key order: {} then {}",
            hex(&w[0].0),
            hex(&w[1].0)
        )));
    }
    let mut backward = scan(db, true)?;
    backward.reverse();
    if backward != forward {
        return Err(BenchError::Inconsistent(format!(
            "the backward scan has {} entries, the forward scan {}, and they differ",
            backward.len(),
            forward.len()
        )));
    }
    let get = |key: &[u8]| {
        db.get(key, <[u8]>::to_vec)
            .map_err(|e| BenchError::engine(format!("reading {}", hex(key)), e))
    };
    for (k, v) in &forward {
        if get(k)?.as_ref() != Some(v) {
            return Err(BenchError::Inconsistent(format!(
                "a point read of {} does not return the value the scan saw",
                hex(k)
            )));
        }
    }
    let scanned_numbers = forward.iter().filter(|(k, _)| key_number(cfg, k).is_some()).count() as u64;
    let mut key = KeyBuf::new(cfg.key_size);
    let mut found = 0u64;
    for n in 0..cfg.num {
        if get(key.set(n))?.is_some() {
            found += 1;
        }
    }
    if found != scanned_numbers {
        return Err(BenchError::Inconsistent(format!(
            "point reads find {found} of the keys 0..{}, the scan {scanned_numbers}",
            cfg.num
        )));
    }
    let io = |e| BenchError::Io {
        context: format!("writing {}", path.display()),
        source: e,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for (k, v) in &forward {
        writeln!(out, "{} {}", hex(k), hex(v)).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(forward.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0, 0x0a, 0xff]), "000aff");
        assert_eq!(hex(b""), "");
    }
}
