//! Step 4 of the sweep: one round opens and reads the damaged copy and classifies what it saw
//! (detected, harmless, a cut redo tail, or a failure: wrong data).
//!
//! Invariant: only a typed `Corruption` or `UnsupportedFormat` error counts as detected; a
//! redo tail cut must also fail to open under `AbsoluteConsistency`.

use super::super::args::StressArgs;
use super::super::{key, parse_value, value};
use super::regions::materialize;
use super::*;

pub(super) fn typed(e: &Error) -> bool {
    matches!(e, Error::Corruption { .. } | Error::UnsupportedFormat { .. })
}

/// What the database shows, read in full; `Err(Outcome)` when a read fails or shows something
/// that cannot be right whatever was lost (a wrong value, a foreign key, gets or scans that
/// disagree).
pub(super) fn read_all(db: &Db, a: &StressArgs) -> Result<State, Outcome> {
    let fail = |why: String| Outcome::Failure(why);
    let read_err = |what: String, e: Error| {
        if typed(&e) {
            Outcome::AtRead
        } else {
            Outcome::Failure(format!("{what}: an error that is not a corruption report: {e}"))
        }
    };
    let mut shown: State = Vec::new();
    // The default table holds nothing.
    let default = db.default_table();
    let mut it = default
        .iter(&ReadOptions::default())
        .map_err(|e| read_err("default table".into(), e))?;
    if let Some(item) = it.next() {
        let (k, _) = item.map_err(|e| read_err("default table scan".into(), e))?;
        return Err(fail(format!("the default table shows key {k:?}")));
    }
    for tab in 0..a.tables {
        let t = db
            .table(&table_name(tab))
            .map_err(|e| fail(format!("table s{tab} is gone without a corruption report: {e}")))?;
        let parse = |k: &[u8], v: &[u8]| -> Result<(u32, u32), Outcome> {
            let n = std::str::from_utf8(k)
                .ok()
                .and_then(|s| s.strip_prefix('k'))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&n| n < a.keys && key(n) == k)
                .ok_or_else(|| fail(format!("table s{tab}: unexpected key {k:?}")))?;
            let ver = parse_value(tab, n, v).map_err(|e| fail(format!("table s{tab} key {n}: {e}")))?;
            if v != value(tab, n, ver, a) {
                return Err(fail(format!("table s{tab} key {n}: a damaged value of version {ver}")));
            }
            Ok((n, ver))
        };
        let mut forward: Vec<Option<u32>> = vec![None; a.keys as usize];
        let mut order: Vec<u32> = Vec::new();
        for item in t
            .iter(&ReadOptions::default())
            .map_err(|e| read_err(format!("s{tab} scan"), e))?
        {
            let (k, v) = item.map_err(|e| read_err(format!("s{tab} scan"), e))?;
            let (n, ver) = parse(&k, &v)?;
            if order.last().is_some_and(|&p| p >= n) {
                return Err(fail(format!("table s{tab}: scan out of order at key {n}")));
            }
            order.push(n);
            forward[n as usize] = Some(ver);
        }
        let mut backward: Vec<Option<u32>> = vec![None; a.keys as usize];
        let mut back_order: Vec<u32> = Vec::new();
        for item in t
            .iter(&ReadOptions::default())
            .map_err(|e| read_err(format!("s{tab} reverse scan"), e))?
            .rev()
        {
            let (k, v) = item.map_err(|e| read_err(format!("s{tab} reverse scan"), e))?;
            let (n, ver) = parse(&k, &v)?;
            back_order.push(n);
            backward[n as usize] = Some(ver);
        }
        back_order.reverse();
        if back_order != order || backward != forward {
            return Err(fail(format!(
                "table s{tab}: the backward scan differs from the forward one"
            )));
        }
        for n in 0..a.keys {
            let got = match t.get(&key(n)) {
                Ok(Some(v)) => Some(parse(&key(n), &v)?.1),
                Ok(None) => None,
                Err(e) => return Err(read_err(format!("s{tab} get k{n}"), e)),
            };
            if got != forward[n as usize] {
                return Err(fail(format!(
                    "table s{tab} key {n}: get says {got:?}, the scan {:?}",
                    forward[n as usize]
                )));
            }
        }
        shown.push(forward);
    }
    Ok(shown)
}

/// The number of tail groups lost if `shown` is `expected` minus the last k groups of `tail`.
pub(super) fn tail_cut(shown: &State, expected: &State, tail: &[Group]) -> Option<usize> {
    let mut s = expected.clone();
    for (lost, g) in tail.iter().rev().enumerate() {
        for &(t, n, before, _) in g.iter().rev() {
            s[t as usize][n as usize] = before;
        }
        if *shown == s {
            return Some(lost + 1);
        }
    }
    None
}

pub(super) fn open_and_read(fs: &FaultFs, a: &StressArgs, mode: RecoveryMode) -> Result<State, Outcome> {
    let mut o = sweep_options(Some(fs));
    o.recovery_mode = mode;
    let db = match Db::open(MEM_DB, o) {
        Ok(db) => db,
        Err(e) if typed(&e) => return Err(Outcome::AtOpen),
        Err(e) => {
            return Err(Outcome::Failure(format!(
                "open failed without a corruption report: {e}"
            )))
        }
    };
    let r = read_all(&db, a);
    drop(db);
    r
}

/// One round: verify, open, read everything, classify.
pub(super) fn round(
    a: &StressArgs,
    files: &BTreeMap<PathBuf, Vec<u8>>,
    damage: Option<(&PathBuf, u64, &[u8])>,
    expected: &State,
    tail: &[Group],
    in_redo: bool,
) -> Result<Outcome, String> {
    let fs = materialize(files, damage);
    let flagged = match inspect::verify(&fs, Path::new(MEM_DB)) {
        Ok(report) => !report.ok(),
        Err(_) => true,
    };
    let shown = match open_and_read(&fs, a, RecoveryMode::TolerateCorruptedTail) {
        Ok(s) => s,
        Err(o) => return Ok(o),
    };
    if shown == *expected {
        return Ok(Outcome::Harmless { flagged });
    }
    let first_diff = || {
        for (t, (s, e)) in shown.iter().zip(expected).enumerate() {
            if let Some(n) = (0..s.len()).find(|&n| s[n] != e[n]) {
                return format!("table s{t} key {n}: shows {:?}, expected {:?}", s[n], e[n]);
            }
        }
        String::new()
    };
    if in_redo {
        if let Some(lost) = tail_cut(&shown, expected, tail) {
            // The documented torn-tail rule dropped the last records; the strict mode must
            // refuse the same bytes.
            let strict = materialize(files, damage);
            return Ok(match open_and_read(&strict, a, RecoveryMode::AbsoluteConsistency) {
                Err(Outcome::AtOpen) => Outcome::TailCut { lost },
                _ => Outcome::Failure(format!(
                    "the last {lost} redo write groups were cut as a torn tail, and AbsoluteConsistency \
                     does not refuse the same bytes"
                )),
            });
        }
    }
    Ok(Outcome::Failure(format!(
        "wrong data without an error: {}",
        first_diff()
    )))
}
