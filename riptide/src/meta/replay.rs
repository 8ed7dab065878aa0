//! Recovery of the metadata, read-only: the checkpoint `CURRENT` names, then the committed
//! transactions of the slog it names, in order.
//!
//! Invariants:
//! - A transaction is `BEGIN, ENTRIES*, COMMIT`; only transactions whose COMMIT is present and
//!   valid are applied, and their ids strictly increase. A CRC-valid record that breaks this
//!   structure, or a committed transaction that does not apply, is [`crate::Error::Corruption`].
//! - Only the newest transaction can be incomplete (the writer never appends after a torn or
//!   uncommitted tail); replay stops at the end of the last committed one
//!   ([`Replay::committed_end`]).
//! - Nothing here writes: `Slog::open` and the inspect tool share it.

use super::checkpoint::load_checkpoint;
use super::current::{checkpoint_path, read_file, slog_path, Current};
use super::dump::{view_record, SlogRecordView};
use super::edit::{corrupt, MetaState, SlogEntry};
use super::framing::{decode_slog_header, frame_slog, SLOG_HEADER_SIZE};
use crate::error::Result;
use crate::fs::FileSystem;
use std::path::{Path, PathBuf};

/// The metadata named by `cur`, rebuilt without writing anything: the checkpoint, then the
/// committed transactions of the slog (used by `Slog::open` and by the inspect tool).
pub(crate) struct RecoveredState {
    pub(crate) state: MetaState,
    /// The slog image that was replayed, and its path.
    pub(crate) data: Vec<u8>,
    pub(crate) path: PathBuf,
    pub(crate) replay: Replay,
}

/// Loads the checkpoint and replays the slog that `cur` names, read-only.
pub(crate) fn recover_state(fs: &dyn FileSystem, dir: &Path, cur: Current) -> Result<RecoveredState> {
    let named_missing = |p: &Path| -> Result<()> {
        if fs.exists(p) {
            Ok(())
        } else {
            Err(corrupt(p, 0, "named by CURRENT but missing"))
        }
    };
    let mut state = if cur.checkpoint > 0 {
        let p = checkpoint_path(dir, cur.checkpoint);
        named_missing(&p)?;
        let (number, state) = load_checkpoint(fs, &p)?;
        if number != cur.checkpoint {
            return Err(corrupt(&p, 16, format!("checkpoint header says number {number}")));
        }
        state
    } else {
        MetaState::default()
    };
    let path = slog_path(dir, cur.slog);
    named_missing(&path)?;
    let data = read_file(fs, &path)?;
    let (number, _) = decode_slog_header(&path, &data)?;
    if number != cur.slog {
        return Err(corrupt(&path, 16, format!("slog header says number {number}")));
    }
    let replay = replay_slog(&path, &data, &mut state)?;
    Ok(RecoveredState {
        state,
        data,
        path,
        replay,
    })
}

/// What replaying one slog image found.
pub(crate) struct Replay {
    /// End offset of the last committed transaction (the header size if none).
    pub(crate) committed_end: usize,
    pub(crate) txns: u64,
    pub(super) last_txn: u64,
}

/// Replays the committed transactions of a slog image into `state`.
pub(crate) fn replay_slog(path: &Path, data: &[u8], state: &mut MetaState) -> Result<Replay> {
    let (records, _tail) = frame_slog(path, data)?;
    let mut out = Replay {
        committed_end: SLOG_HEADER_SIZE,
        txns: 0,
        last_txn: 0,
    };
    // The open transaction: (id, buffered entries).
    let mut open: Option<(u64, Vec<SlogEntry>)> = None;
    for r in &records {
        let at = r.offset as u64;
        match view_record(path, data, r)? {
            SlogRecordView::Begin { txn } => {
                if let Some((t, _)) = &open {
                    return Err(corrupt(path, at, format!("BEGIN of txn {txn} while txn {t} is open")));
                }
                if txn <= out.last_txn {
                    return Err(corrupt(
                        path,
                        at,
                        format!("txn id {txn} does not follow {}", out.last_txn),
                    ));
                }
                open = Some((txn, Vec::new()));
            }
            SlogRecordView::Entries { txn, entries } => match &mut open {
                Some((t, buf)) if *t == txn => buf.extend(entries),
                _ => return Err(corrupt(path, at, format!("entries of txn {txn}, which is not open"))),
            },
            SlogRecordView::Commit { txn, entries } => {
                let Some((t, buf)) = open.take() else {
                    return Err(corrupt(path, at, format!("COMMIT of txn {txn}, which is not open")));
                };
                if t != txn {
                    return Err(corrupt(path, at, format!("COMMIT of txn {txn} while txn {t} is open")));
                }
                if buf.len() as u64 != entries {
                    return Err(corrupt(
                        path,
                        at,
                        format!("txn {txn} commits {entries} entries but holds {}", buf.len()),
                    ));
                }
                for e in &buf {
                    state
                        .try_apply(e)
                        .map_err(|why| corrupt(path, at, format!("txn {txn} does not apply: {why}")))?;
                }
                out.committed_end = r.end;
                out.txns += 1;
                out.last_txn = txn;
            }
            SlogRecordView::Header { .. } | SlogRecordView::TornTail { .. } => {}
        }
    }
    Ok(out)
}
