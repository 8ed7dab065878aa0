//! Verification of a whole database against the expected state: [`read_all`] (a scan and a
//! point read per key, which must agree), [`check_groups`] (an atomic write that was in flight
//! is wholly there or wholly absent) and [`verify_all`], which also resolves each in-flight
//! write to the version the database kept.
//!
//! Invariants: nothing here writes to the database; the expected state changes only by
//! resolving a pending write to the old or the new version the database shows, and only after
//! every group checked whole.

use super::expected::{Expected, MAX_THREADS};
use super::{key, ops, parse_value, shown};
use riptide::{Db, ReadOptions, Table};

/// Opens (or creates) the main tables `s0..s{n-1}`.
pub(super) fn open_tables(db: &Db, n: u32) -> Result<Vec<Table>, String> {
    (0..n)
        .map(|i| match db.table(&format!("s{i}")) {
            Ok(t) => Ok(t),
            Err(_) => db.create_table(&format!("s{i}")),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tables: {e}"))
}

/// What the database shows for every key of every table (`[table][key]`: `None` = absent,
/// `Some(version)`), read with a full scan per table and a point read per key, which must
/// agree.
pub(super) fn read_all(tables: &[Table], keys: u32) -> Result<Vec<Vec<Option<u32>>>, String> {
    let mut all = Vec::with_capacity(tables.len());
    for (ti, t) in tables.iter().enumerate() {
        let ti = ti as u32;
        let mut in_scan: Vec<Option<u32>> = vec![None; keys as usize];
        for item in t.iter(&ReadOptions::default()).map_err(|e| format!("scan: {e}"))? {
            let (k, v) = item.map_err(|e| format!("table s{ti}: scan failed: {e}"))?;
            let n = std::str::from_utf8(&k)
                .ok()
                .and_then(|s| s.strip_prefix('k'))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&n| n < keys)
                .ok_or_else(|| format!("table s{ti}: unexpected key {k:?}"))?;
            in_scan[n as usize] = Some(parse_value(ti, n, &v)?);
        }
        for n in 0..keys {
            let point = t
                .get(&key(n))
                .map_err(|e| format!("table s{ti} key {n}: get failed: {e}"))?
                .map(|v| parse_value(ti, n, &v))
                .transpose()?;
            if point != in_scan[n as usize] {
                return Err(format!(
                    "table s{ti} key {n}: get says {point:?}, the scan {:?}",
                    in_scan[n as usize]
                ));
            }
        }
        all.push(in_scan);
    }
    Ok(all)
}

/// Checks that each atomic write that was in flight (a thread's group record) is wholly
/// present or wholly absent in `seen`; a key whose old and new states look the same (absent
/// both) says nothing.
pub(super) fn check_groups(exp: &Expected, seen: &[Vec<Option<u32>>]) -> Result<(), String> {
    for th in 0..MAX_THREADS {
        let g = exp.group(th);
        let (mut applied, mut missing) = (Vec::new(), Vec::new());
        for k in &g {
            let (old, new) = (shown(k.old), shown(k.new));
            let got = seen[k.table as usize][k.key as usize];
            if old == new {
                continue;
            }
            if got == new {
                applied.push(format!("s{} k{}", k.table, k.key));
            } else if got == old {
                missing.push(format!("s{} k{}", k.table, k.key));
            }
        }
        if !applied.is_empty() && !missing.is_empty() {
            return Err(format!(
                "an atomic write of thread {th} is torn: {applied:?} have the new version, {missing:?} the old one \
                 (the write: {g:?})"
            ));
        }
    }
    Ok(())
}

/// Reads every key of every table and the scratch tables and compares them with the expected
/// state; resolves in-flight writes (each key to its old or new version, each atomic group
/// wholly). Returns how many keys were resolved.
pub(super) fn verify_all(db: &Db, tables: &[Table], exp: &Expected) -> Result<u64, String> {
    let seen = read_all(tables, exp.keys)?;
    check_groups(exp, &seen)?;
    let mut resolved = 0;
    for (ti, col) in seen.iter().enumerate() {
        let ti = ti as u32;
        for n in 0..exp.keys {
            let point = col[n as usize];
            let (c, p) = exp.get(ti, n);
            if point == shown(c) {
                if p != 0 {
                    exp.resolve(ti, n, c)?;
                    resolved += 1;
                }
            } else if p != 0 && point == shown(p) {
                exp.resolve(ti, n, p)?;
                resolved += 1;
            } else {
                return Err(format!(
                    "table s{ti} key {n}: the database has version {point:?}; expected {:?}{}",
                    shown(c),
                    if p != 0 {
                        format!(" or the in-flight {:?}", shown(p))
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    exp.clear_groups()?;
    ops::verify_scratch(db, exp, None)?;
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stress::expected::{GroupKey, DELETED};

    #[test]
    fn a_torn_atomic_write_is_caught_after_a_kill() {
        let exp = Expected::in_memory(2, 4);
        let g = [
            GroupKey {
                table: 0,
                key: 1,
                old: 3,
                new: 4,
            },
            GroupKey {
                table: 1,
                key: 1,
                old: 0,
                new: 1 | DELETED,
            },
            GroupKey {
                table: 1,
                key: 2,
                old: 5 | DELETED,
                new: 6,
            },
        ];
        exp.set_group(1, &g).unwrap();
        let seen = |a: Option<u32>, b: Option<u32>| vec![vec![None, a, None, None], vec![None, None, b, None]];
        // All new, or all old (k1 of s1 says nothing: absent before and after).
        check_groups(&exp, &seen(Some(4), Some(6))).unwrap();
        check_groups(&exp, &seen(Some(3), None)).unwrap();
        // Half of it.
        let e = check_groups(&exp, &seen(Some(4), None)).unwrap_err();
        assert!(e.contains("torn"), "{e}");
        assert!(check_groups(&exp, &seen(Some(3), Some(6))).is_err());
    }
}
