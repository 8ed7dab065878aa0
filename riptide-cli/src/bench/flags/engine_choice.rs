//! The engine choice flags parse into: [`EngineKind`] (`--engine`) and [`Compression`]
//! (`--compression_type`). Defined here, below the adapters in `engine/` that match on them.
//!
//! Invariant: an [`EngineKind`] that [`EngineKind::from_name`] returns is compiled into this
//! binary; one that is not is a usage error saying which cargo feature adds it.

use crate::bench::error::BenchError;

/// Which engine `--engine` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Riptide, this repository's engine.
    Riptide,
    /// RocksDB through the `rocksdb` crate (feature `bench-rocksdb`).
    RocksDb,
    /// fjall (feature `bench-fjall`).
    Fjall,
}

impl EngineKind {
    /// Every engine, compiled in or not.
    pub const ALL: [EngineKind; 3] = [EngineKind::Riptide, EngineKind::RocksDb, EngineKind::Fjall];

    /// The `--engine` name.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Riptide => "riptide",
            EngineKind::RocksDb => "rocksdb",
            EngineKind::Fjall => "fjall",
        }
    }

    /// The cargo feature that compiles the engine in (`None`: always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            EngineKind::Riptide => None,
            EngineKind::RocksDb => Some("bench-rocksdb"),
            EngineKind::Fjall => Some("bench-fjall"),
        }
    }

    /// True if this binary has the engine.
    pub fn compiled_in(self) -> bool {
        match self {
            EngineKind::Riptide => true,
            EngineKind::RocksDb => cfg!(feature = "bench-rocksdb"),
            EngineKind::Fjall => cfg!(feature = "bench-fjall"),
        }
    }

    /// Parses `--engine`; an engine this binary was built without is a usage error saying how to
    /// build it.
    pub fn from_name(name: &str) -> Result<EngineKind, BenchError> {
        let kind = Self::ALL
            .into_iter()
            .find(|k| k.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                BenchError::Usage(format!(
                    "--engine={name}: unknown engine (known: riptide, rocksdb, fjall)"
                ))
            })?;
        if !kind.compiled_in() {
            let feature = kind.feature().unwrap_or_default();
            return Err(BenchError::Usage(format!(
                "--engine={}: this riptide binary was built without the `{feature}` cargo feature; build it with \
                 `cargo build --release -p riptide-cli --features {feature}` (see README, \"Comparing with RocksDB and \
                 fjall\")",
                kind.name()
            )));
        }
        Ok(kind)
    }

    /// The "Memtablerep:" line of the header.
    pub fn memtablerep(self) -> &'static str {
        match self {
            EngineKind::Riptide => "riptide multi-version skiplist",
            EngineKind::RocksDb => "rocksdb skip_list (default)",
            EngineKind::Fjall => "fjall (lsm-tree) skiplist",
        }
    }
}

/// Block compression (`--compression_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression (the default).
    None,
    /// LZ4 (every engine).
    Lz4,
    /// Zstandard (rocksdb).
    Zstd,
}

impl Compression {
    /// Parses `--compression_type` (db_bench spelling).
    pub fn from_name(name: &str) -> Result<Compression, BenchError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "none" | "no" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(BenchError::Usage(format!(
                "--compression_type={name}: expected none, lz4 or zstd"
            ))),
        }
    }

    /// The db_bench name.
    #[cfg_attr(not(any(feature = "bench-rocksdb", feature = "bench-fjall")), allow(dead_code))]
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The header's "Compression:" value, as db_bench prints it.
    pub fn db_bench_name(self) -> &'static str {
        match self {
            Compression::None => "NoCompression",
            Compression::Lz4 => "LZ4",
            Compression::Zstd => "ZSTD",
        }
    }
}
