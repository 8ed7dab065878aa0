//! The transactional side of the bench engines, for `xbench` and `tsunami`: one trait,
//! [`TxnEngine`], and its implementations for Riptide (`Db::begin`) and RocksDB
//! (`TransactionDB`, cargo feature `bench-rocksdb`). fjall is not offered: its adapter has no
//! transactions.
//!
//! Rules every implementation keeps, so both engines see the same operations:
//! - Pessimistic transactions with row locks, deadlock detection on, and the same lock timeout
//!   (`--lock_timeout_ms`).
//! - Snapshot isolation (`--isolation=si`) fixes the snapshot at begin and reads at it; writing
//!   or reading-for-update a key someone committed after it is a conflict (Riptide's
//!   `WriteConflict`, RocksDB's `Busy`). Read committed (`rc`) reads the latest committed state.
//! - A conflict (write conflict, lock timeout, deadlock) is [`TxnError::Conflict`]: the caller
//!   rolls back and retries; anything else is [`TxnError::Fatal`].
//! - The commit batch is written with the run's `--sync` / `--disable_wal`.
//! - The initial load bypasses transactions (plain batches), as a bulk load would.

use crate::bench::engine::EngineError;
use crate::bench::error::BenchError;
use crate::bench::flags::Config;
pub use crate::bench::flags::XIsolation;
use std::time::Duration;

/// Why a transaction operation failed.
#[derive(Debug)]
pub enum TxnError {
    /// Write conflict, lock timeout or deadlock: roll back and retry.
    Conflict(EngineError),
    /// Anything else: the benchmark fails.
    Fatal(EngineError),
}

/// One open transaction.
pub trait EngineTxn {
    /// Point read at the transaction's view; the value's length if the key exists.
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError>;
    /// Locks `key`, then reads it (a conflict if it changed after the snapshot under SI).
    fn get_for_update(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError>;
    /// Buffers a put (locking the key).
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), TxnError>;
    /// Reads up to `limit` entries from the first key at or after `start`; returns the entries
    /// and their key + value bytes.
    fn scan(&mut self, start: &[u8], limit: usize) -> Result<(usize, u64), TxnError>;
    /// Commits (durable with `--sync`).
    fn commit(self) -> Result<(), TxnError>;
    /// Rolls back.
    fn rollback(self) -> Result<(), TxnError>;
}

/// An engine that runs transactions over one table of the benchmark's key space.
pub trait TxnEngine: Send + Sync + Sized {
    /// An open transaction, borrowing the engine.
    type Txn<'a>: EngineTxn
    where
        Self: 'a;

    /// Opens (creating) the database in `cfg.db` with the same options as the engine's
    /// [`crate::bench::engine::BenchEngine::open`].
    fn open_txn(cfg: &Config) -> Result<Self, BenchError>;
    /// The transaction settings, for the `Transactions:` line.
    fn describe_txn(&self) -> String;
    /// Writes `pairs` as one atomic batch, outside any transaction (the initial load).
    fn load(&self, pairs: &[(Vec<u8>, &[u8])]) -> Result<(), EngineError>;
    /// Flushes the memtables and waits for background work (after the load).
    fn settle(&self) -> Result<(), EngineError>;
    /// Begins a transaction.
    fn begin(&self) -> Result<Self::Txn<'_>, EngineError>;
    /// The engine's statistics (as the plain adapter prints them at the end of a run) and its
    /// transaction counters; `user_bytes_written` = keys and values the run put.
    fn stats_lines(&self, user_bytes_written: u64) -> Vec<String>;
    /// The write-path, row-lock and contention counters now, for the lines of where a run's
    /// time went (`None`: the engine has none).
    fn profile(&self) -> Option<crate::bench::profile::Profile> {
        None
    }
    /// Closes the database.
    fn close_txn(self) -> Result<(), EngineError>;
}

/// The transaction settings shared by both engines.
#[derive(Debug, Clone, Copy)]
pub struct TxnSettings {
    /// `--isolation`.
    pub isolation: XIsolation,
    /// `--lock_timeout_ms`.
    pub lock_timeout: Duration,
}

impl TxnSettings {
    /// From the flags.
    pub fn from_config(cfg: &Config) -> TxnSettings {
        TxnSettings {
            isolation: cfg.xbench.isolation,
            lock_timeout: cfg.xbench.lock_timeout,
        }
    }

    fn describe(&self, how: &str) -> String {
        format!(
            "pessimistic (row locks, deadlock detection), isolation {}, lock timeout {} ms; {how}",
            match self.isolation {
                XIsolation::Snapshot => "snapshot (si)",
                XIsolation::ReadCommitted => "read committed (rc)",
            },
            self.lock_timeout.as_millis()
        )
    }
}

pub mod riptide_txn {
    //! Riptide: `Db::begin` on the default table.

    use super::*;
    use crate::bench::engine::riptide::RiptideEngine;
    use crate::bench::engine::{BenchEngine, RunTotals};
    use ::riptide::{Error, Isolation, ReadOptions, Txn, TxnMode, TxnOptions, WriteBatch};

    /// Riptide with its transaction options.
    pub struct RiptideTxnEngine {
        engine: RiptideEngine,
        opts: TxnOptions,
        settings: TxnSettings,
    }

    /// A Riptide transaction on the default table.
    pub struct RiptideTxn<'a> {
        txn: Txn,
        engine: &'a RiptideEngine,
    }

    fn classify(e: Error) -> TxnError {
        if e.is_retryable() {
            TxnError::Conflict(e.into())
        } else {
            TxnError::Fatal(e.into())
        }
    }

    impl EngineTxn for RiptideTxn<'_> {
        fn get(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError> {
            Ok(self
                .txn
                .get(self.engine.table(), key)
                .map_err(classify)?
                .map(|v| v.len()))
        }

        fn get_for_update(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError> {
            Ok(self
                .txn
                .get_for_update(self.engine.table(), key)
                .map_err(classify)?
                .map(|v| v.len()))
        }

        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), TxnError> {
            self.txn.put(self.engine.table(), key, value).map_err(classify)
        }

        fn scan(&mut self, start: &[u8], limit: usize) -> Result<(usize, u64), TxnError> {
            let mut c = self
                .txn
                .raw_iter(self.engine.table(), &ReadOptions::default())
                .map_err(classify)?;
            c.seek(start);
            let (mut n, mut bytes) = (0, 0u64);
            while n < limit && c.valid() {
                bytes += (c.key().len() + c.value().len()) as u64;
                n += 1;
                c.next();
            }
            c.status().map_err(classify)?;
            Ok((n, bytes))
        }

        fn commit(self) -> Result<(), TxnError> {
            self.txn.commit().map_err(classify)
        }

        fn rollback(self) -> Result<(), TxnError> {
            self.txn.rollback();
            Ok(())
        }
    }

    impl TxnEngine for RiptideTxnEngine {
        type Txn<'a> = RiptideTxn<'a>;

        fn open_txn(cfg: &Config) -> Result<Self, BenchError> {
            let engine = RiptideEngine::open(cfg)?;
            let settings = TxnSettings::from_config(cfg);
            let opts = TxnOptions {
                isolation: match settings.isolation {
                    XIsolation::Snapshot => Isolation::Snapshot,
                    XIsolation::ReadCommitted => Isolation::ReadCommitted,
                },
                mode: TxnMode::Pessimistic,
                lock_timeout: settings.lock_timeout,
                deadlock_detect: true,
                early_lock_release: cfg.xbench.early_lock_release,
                write_options: engine.write_options().clone(),
                ..TxnOptions::default()
            };
            Ok(RiptideTxnEngine { engine, opts, settings })
        }

        fn describe_txn(&self) -> String {
            self.settings.describe(if self.opts.early_lock_release {
                "Db::begin, one WriteBatch per commit through the write pipeline, early lock release"
            } else {
                "Db::begin, one WriteBatch per commit through the write pipeline, locks held until visible"
            })
        }

        fn load(&self, pairs: &[(Vec<u8>, &[u8])]) -> Result<(), EngineError> {
            let mut b = WriteBatch::new();
            for (k, v) in pairs {
                b.put(self.engine.table(), k, v)?;
            }
            Ok(self.engine.db().write(b, self.engine.write_options())?)
        }

        fn settle(&self) -> Result<(), EngineError> {
            self.engine.flush()?;
            self.engine.wait_for_background_work()
        }

        fn begin(&self) -> Result<RiptideTxn<'_>, EngineError> {
            Ok(RiptideTxn {
                txn: self.engine.db().begin(self.opts.clone())?,
                engine: &self.engine,
            })
        }

        fn profile(&self) -> Option<crate::bench::profile::Profile> {
            Some(crate::bench::profile::Profile::of(self.engine.db()))
        }

        fn stats_lines(&self, user_bytes_written: u64) -> Vec<String> {
            let s = self.engine.db().txn_stats();
            let mut lines = self.engine.end_of_run_stats(&RunTotals { user_bytes_written });
            lines.push(format!(
                "Riptide transactions: {} begun, {} committed, {} rolled back; {} write conflicts, {} snapshots moved \
                 past a change instead of conflicting, {} lock waits, {} lock timeouts, {} deadlocks",
                s.begun,
                s.committed,
                s.rolled_back,
                s.conflicts,
                s.snapshot_advances,
                s.lock_waits,
                s.lock_timeouts,
                s.deadlocks
            ));
            lines
        }

        fn close_txn(self) -> Result<(), EngineError> {
            self.engine.close()
        }
    }
}

#[cfg(feature = "bench-rocksdb")]
pub mod rocksdb_txn {
    //! RocksDB: a `TransactionDB` opened with the same options as the plain adapter.

    use super::*;
    use crate::bench::engine::rocksdb::{stats_lines, wait_until_idle, RocksDbEngine, StatsSources};
    use crate::bench::engine::RunTotals;
    use ::rocksdb::{
        ErrorKind, MultiThreaded, Options, ReadOptions, Transaction, TransactionDB, TransactionDBOptions,
        TransactionOptions, WriteBatchWithTransaction, WriteOptions,
    };

    /// The multi-threaded TransactionDB (its column-family map is behind a lock).
    type TxDb = TransactionDB<MultiThreaded>;

    /// RocksDB's TransactionDB.
    pub struct RocksTxnEngine {
        db: TxDb,
        wopts: WriteOptions,
        topts: TransactionOptions,
        settings: TxnSettings,
        cache_capacity: u64,
        statistics: bool,
        // Kept alive with the database (its caches live in them).
        _opts: Options,
        _caches: (::rocksdb::Cache, Option<::rocksdb::Cache>),
    }

    /// A RocksDB transaction; under SI its reads use the snapshot the transaction took at begin
    /// (`ReadOptions` hold the C++ snapshot pointer, which the transaction owns and outlives).
    pub struct RocksTxn<'a> {
        ropts: ReadOptions,
        txn: Transaction<'a, TxDb>,
    }

    /// Read options at the transaction's snapshot (none: the latest state).
    fn read_options(txn: &Transaction<'_, TxDb>) -> ReadOptions {
        let mut ro = ReadOptions::default();
        let snapshot = txn.snapshot();
        ro.set_snapshot(&snapshot);
        ro
    }

    fn classify(e: ::rocksdb::Error) -> TxnError {
        match e.kind() {
            ErrorKind::Busy | ErrorKind::TimedOut | ErrorKind::TryAgain => TxnError::Conflict(e.into()),
            _ => TxnError::Fatal(e.into()),
        }
    }

    impl EngineTxn for RocksTxn<'_> {
        fn get(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError> {
            Ok(self
                .txn
                .get_pinned_opt(key, &self.ropts)
                .map_err(classify)?
                .map(|v| v.len()))
        }

        fn get_for_update(&mut self, key: &[u8]) -> Result<Option<usize>, TxnError> {
            Ok(self
                .txn
                .get_pinned_for_update_opt(key, true, &self.ropts)
                .map_err(classify)?
                .map(|v| v.len()))
        }

        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), TxnError> {
            self.txn.put(key, value).map_err(classify)
        }

        fn scan(&mut self, start: &[u8], limit: usize) -> Result<(usize, u64), TxnError> {
            let mut c = self.txn.raw_iterator_opt(read_options(&self.txn));
            c.seek(start);
            let (mut n, mut bytes) = (0, 0u64);
            while n < limit && c.valid() {
                bytes += (c.key().map_or(0, <[u8]>::len) + c.value().map_or(0, <[u8]>::len)) as u64;
                n += 1;
                c.next();
            }
            c.status().map_err(classify)?;
            Ok((n, bytes))
        }

        fn commit(self) -> Result<(), TxnError> {
            self.txn.commit().map_err(classify)
        }

        fn rollback(self) -> Result<(), TxnError> {
            self.txn.rollback().map_err(classify)
        }
    }

    impl TxnEngine for RocksTxnEngine {
        type Txn<'a> = RocksTxn<'a>;

        fn open_txn(cfg: &Config) -> Result<Self, BenchError> {
            let (opts, cache, row_cache) = RocksDbEngine::db_options(cfg);
            let settings = TxnSettings::from_config(cfg);
            let mut tdb = TransactionDBOptions::default();
            let timeout_ms = settings.lock_timeout.as_millis().min(i64::MAX as u128) as i64;
            tdb.set_default_lock_timeout(timeout_ms);
            tdb.set_txn_lock_timeout(timeout_ms);
            let db = TxDb::open(&opts, &tdb, &cfg.db).map_err(|e| {
                BenchError::engine(format!("opening the RocksDB TransactionDB in {}", cfg.db.display()), e)
            })?;
            let mut wopts = WriteOptions::default();
            wopts.set_sync(cfg.sync);
            wopts.disable_wal(cfg.disable_wal);
            let mut topts = TransactionOptions::default();
            topts.set_deadlock_detect(true);
            topts.set_lock_timeout(timeout_ms);
            topts.set_snapshot(settings.isolation == XIsolation::Snapshot);
            Ok(RocksTxnEngine {
                db,
                wopts,
                topts,
                settings,
                cache_capacity: cfg.cache_size as u64,
                statistics: cfg.statistics,
                _opts: opts,
                _caches: (cache, row_cache),
            })
        }

        fn describe_txn(&self) -> String {
            self.settings
                .describe("TransactionDB (pessimistic, WriteCommitted), one transaction per Transaction::commit")
        }

        fn load(&self, pairs: &[(Vec<u8>, &[u8])]) -> Result<(), EngineError> {
            let mut b = WriteBatchWithTransaction::<true>::default();
            for (k, v) in pairs {
                b.put(k, v);
            }
            Ok(self.db.write_opt(b, &self.wopts)?)
        }

        fn settle(&self) -> Result<(), EngineError> {
            self.db.flush()?;
            wait_until_idle(|p| {
                self.db
                    .property_int_value(p)?
                    .ok_or_else(|| format!("RocksDB has no property {p}").into())
            })
        }

        fn begin(&self) -> Result<RocksTxn<'_>, EngineError> {
            let txn = self.db.transaction_opt(&self.wopts, &self.topts);
            Ok(RocksTxn {
                ropts: read_options(&txn),
                txn,
            })
        }

        fn stats_lines(&self, user_bytes_written: u64) -> Vec<String> {
            stats_lines(
                &StatsSources {
                    property: &|name| self.db.property_value(name).ok().flatten(),
                    cache: &self._caches.0,
                    cache_capacity: self.cache_capacity,
                    row_cache: self._caches.1.as_ref(),
                    statistics: self.statistics.then_some(&self._opts),
                },
                &RunTotals { user_bytes_written },
            )
        }

        fn close_txn(self) -> Result<(), EngineError> {
            drop(self);
            Ok(())
        }
    }
}
