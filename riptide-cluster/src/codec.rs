//! Encoding of every value the cluster layer stores: one format-version byte, then the
//! postcard encoding of the value (see `docs/format.md`, "Raft storage").
//!
//! Invariant: `decode(encode(v)) == v`; a value with another version byte, or bytes that do
//! not decode to the expected type, is an error.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The version byte of every value written by this build.
pub const FORMAT_VERSION: u8 = 1;

/// A value that could not be encoded or decoded.
#[derive(Debug)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

/// `value`'s bytes: the version byte, then its postcard encoding.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![FORMAT_VERSION];
    let body = postcard::to_stdvec(value).map_err(|e| CodecError(format!("encode: {e}")))?;
    out.extend_from_slice(&body);
    Ok(out)
}

/// The value `bytes` encode; `what` names it in errors.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, CodecError> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => {
            postcard::from_bytes(body).map_err(|e| CodecError(format!("{what}: undecodable ({e})")))
        }
        Some((v, _)) => Err(CodecError(format!("{what}: unknown format version {v}"))),
        None => Err(CodecError(format!("{what}: empty value"))),
    }
}

/// The key of log index `index`: big-endian, so keys sort as indexes do.
pub fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index a log key names.
pub fn key_index(key: &[u8]) -> Result<u64, CodecError> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| CodecError(format!("log key of {} bytes, not 8", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{WriteOp, WriteSet};

    #[test]
    fn values_round_trip_and_foreign_bytes_are_refused() {
        let ws = WriteSet {
            ops: vec![
                WriteOp::Put {
                    table: "t".into(),
                    key: b"k".to_vec(),
                    value: vec![0; 300],
                },
                WriteOp::Delete {
                    table: "u".into(),
                    key: vec![],
                },
            ],
        };
        let bytes = encode(&ws).unwrap();
        assert_eq!(decode::<WriteSet>(&bytes, "write set").unwrap(), ws);
        let mut other = bytes.clone();
        other[0] = 2;
        assert!(decode::<WriteSet>(&other, "write set")
            .unwrap_err()
            .0
            .contains("version 2"));
        assert!(decode::<WriteSet>(&bytes[..bytes.len() - 1], "write set").is_err());
        assert!(decode::<WriteSet>(&[], "write set").is_err());
        assert_eq!(key_index(&index_key(u64::MAX - 3)).unwrap(), u64::MAX - 3);
        assert!(key_index(b"short").is_err());
        assert!(index_key(255) < index_key(256), "keys sort as indexes");
    }
}
