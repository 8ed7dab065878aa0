//! The Riptide adapter: the engine of this repository, driven exactly as `riptide bench` always
//! did (one `Db`, its default table, `Db::write` / `Db::write_async`, a fresh raw iterator per
//! seek or scan).

use super::{bytes, durability_options, BenchEngine, Cursor, Description, EngineError, WriteStopWatch};
use crate::bench::engine::Compression;
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
use ::riptide::{Db, DbIterator, ReadOptions, Table, WriteBatch, WriteHandle, WriteOptions, WriteStats};

/// An open Riptide database and its default table.
pub struct RiptideEngine {
    db: Db,
    table: Table,
    wopts: WriteOptions,
}

impl BenchEngine for RiptideEngine {
    type Batch = WriteBatch;
    type Pending = WriteHandle;
    type Cursor<'a> = DbIterator;

    fn check(cfg: &Config) -> Result<(), BenchError> {
        if cfg.compression != Compression::None {
            return Err(BenchError::Usage(format!(
                "--compression_type={}: Riptide has no compression yet (use none)",
                cfg.compression.name()
            )));
        }
        if cfg.max_write_buffer_number.is_some() {
            return Err(BenchError::Usage(
                "--max_write_buffer_number: a RocksDB option; Riptide keeps up to immutable_stop_trigger (16) \
                 immutable memtables per table"
                    .into(),
            ));
        }
        Ok(())
    }

    fn open(cfg: &Config) -> Result<Self, BenchError> {
        let db = Db::open(&cfg.db, cfg.options.clone())
            .map_err(|e| BenchError::engine(format!("opening the database in {}", cfg.db.display()), e))?;
        let table = db.default_table();
        Ok(RiptideEngine {
            db,
            table,
            wopts: WriteOptions {
                sync: cfg.sync,
                disable_wal: cfg.disable_wal,
                no_slowdown: false,
            },
        })
    }

    fn describe(&self, cfg: &Config) -> Description {
        let o = &cfg.options;
        let mut options = vec![
            (
                "block_size",
                format!(
                    "{} (unused: Riptide writes no data blocks yet)",
                    bytes(cfg.block_size as u64)
                ),
            ),
            (
                "bloom_bits_per_key",
                format!("{} (unused: Riptide has no bloom filters yet)", cfg.bloom_bits),
            ),
            ("compression", "none (Riptide has no compression)".to_string()),
            (
                "block_cache_size",
                format!(
                    "{} (unused: Riptide has no block cache yet; every read is served from memtables)",
                    bytes(cfg.cache_size as u64)
                ),
            ),
            ("write_buffer_size", bytes(o.write_buffer_size as u64)),
            (
                "max_memtables",
                format!(
                    "1 active + up to {} immutable per table (immutable_stop_trigger; no flush yet, writes slow down \
                     at {} and stop at {})",
                    o.immutable_stop_trigger, o.immutable_slowdown_trigger, o.immutable_stop_trigger
                ),
            ),
        ];
        options.extend(durability_options(
            cfg,
            &format!("redo log, {} segments, CRC32C", bytes(o.redo_segment_size)),
            "fdatasync of the redo log (group commit)",
        ));
        options.push((
            "write_path",
            format!(
                "X-Engine pipeline: write_queues={} max_group_size={} max_group_bytes={} async_commit_depth={}",
                o.write_queues, o.max_group_size, o.max_group_bytes, cfg.async_commit_depth
            ),
        ));
        options.push(("background_threads", "none (no flush or compaction yet)".to_string()));
        Description {
            version: format!("riptide {} (this repository)", env!("CARGO_PKG_VERSION")),
            options,
        }
    }

    fn new_batch(&self, _ops: usize) -> WriteBatch {
        WriteBatch::new()
    }

    #[inline]
    fn put(&self, batch: &mut WriteBatch, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        Ok(batch.put(&self.table, key, value)?)
    }

    #[inline]
    fn delete(&self, batch: &mut WriteBatch, key: &[u8]) -> Result<(), EngineError> {
        Ok(batch.delete(&self.table, key)?)
    }

    #[inline]
    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        Ok(self.db.write(batch, &self.wopts)?)
    }

    #[inline]
    fn write_async(&self, batch: WriteBatch) -> Result<WriteHandle, EngineError> {
        Ok(self.db.write_async(batch, &self.wopts))
    }

    #[inline]
    fn wait(&self, pending: WriteHandle) -> Result<(), EngineError> {
        Ok(pending.wait()?)
    }

    #[inline]
    fn get<R>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, EngineError> {
        Ok(self.table.get(key)?.map(|v| read(&v)))
    }

    fn cursor(&self) -> Result<DbIterator, EngineError> {
        Ok(self.table.raw_iter(&ReadOptions::default())?)
    }

    fn close(self) -> Result<(), EngineError> {
        Ok(self.db.close()?)
    }

    fn write_stats(&self) -> Option<WriteStats> {
        Some(self.db.write_stats())
    }

    fn write_stop_watch(&self) -> Option<&dyn WriteStopWatch> {
        Some(self)
    }
}

impl WriteStopWatch for RiptideEngine {
    fn committed_writes(&self) -> u64 {
        self.db.write_stats().writes
    }

    fn stopped_for_good(&self, cfg: &Config) -> Option<String> {
        let stop_bytes = cfg.options.write_buffer_size as u128 * cfg.options.immutable_stop_trigger as u128;
        let usage = self.db.memtable_usage();
        (usage as u128 >= stop_bytes).then(|| {
            format!(
                "writes stopped: the memtables hold {:.1} MiB, at least immutable_stop_trigger ({}) x \
                 write_buffer_size ({} bytes), and Riptide cannot flush memtables yet, so the write stop would \
                 last forever; the database was closed. Use a smaller --num/--writes/--duration or a larger \
                 --write_buffer_size.",
                usage as f64 / 1_048_576.0,
                cfg.options.immutable_stop_trigger,
                cfg.options.write_buffer_size
            )
        })
    }

    fn abort_writers(&self) {
        // Stalled writers re-check `closed` every 50 ms and then fail with `Closed`.
        let _ = self.db.clone().close();
    }
}

impl Cursor for DbIterator {
    #[inline]
    fn seek_to_first(&mut self) {
        DbIterator::seek_to_first(self)
    }
    #[inline]
    fn seek_to_last(&mut self) {
        DbIterator::seek_to_last(self)
    }
    #[inline]
    fn seek(&mut self, target: &[u8]) {
        DbIterator::seek(self, target)
    }
    #[inline]
    fn next(&mut self) {
        DbIterator::next(self)
    }
    #[inline]
    fn prev(&mut self) {
        DbIterator::prev(self)
    }
    #[inline]
    fn valid(&self) -> bool {
        DbIterator::valid(self)
    }
    #[inline]
    fn key(&self) -> &[u8] {
        DbIterator::key(self)
    }
    #[inline]
    fn value(&self) -> &[u8] {
        DbIterator::value(self)
    }
    fn status(&self) -> Result<(), EngineError> {
        Ok(DbIterator::status(self)?)
    }
}
