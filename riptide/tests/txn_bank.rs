//! The bank test: money moves between accounts in random transactions while the process is
//! killed with SIGKILL at random; after each reopen the books must balance.
//!
//! The test binary re-executes itself as a child (the ignored test `bank_child`, which does
//! nothing unless `RIPTIDE_BANK_CHILD_DIR` is set), as `tests/crash.rs` does. The child's
//! threads run transfers in transactions of random kinds (pessimistic snapshot isolation with
//! `get` or `get_for_update`, read committed with `get_for_update`, optimistic), reading the
//! two balances in random order (so deadlocks happen), writing both balances and a ledger
//! entry `id -> from,to,amount`, committing with `sync` (`commit` or `commit_async`). It prints
//! `START <id>` before committing and `ACK <id>` once the commit is acknowledged.
//!
//! After the kill the parent reopens the database and checks:
//! - the total of all balances never changes, and no balance is negative;
//! - every account's balance equals its initial balance plus the ledger's credits minus its
//!   debits (a transfer applied without its ledger entry, or half applied, breaks this);
//! - every acknowledged transfer, and every transfer seen in an earlier round, is in the ledger;
//! - no ledger entry exists for a transfer that was never started.
//!
//! `bank_stress` (ignored) runs 200 rounds. `RIPTIDE_BANK_SEED` replays a seed printed by a
//! failure.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riptide::{Db, Isolation, Options, ReadOptions, Table, Txn, TxnMode, TxnOptions, WriteOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_DIR_ENV: &str = "RIPTIDE_BANK_CHILD_DIR";
const CHILD_BASE_ENV: &str = "RIPTIDE_BANK_CHILD_BASE";
const SEED_ENV: &str = "RIPTIDE_BANK_SEED";
const ACCOUNTS: u64 = 16;
const INITIAL: i64 = 1000;
const THREADS: u64 = 4;
const THREAD_SPAN: u64 = 1_000_000;
const ROUND_SPAN: u64 = 10_000_000;
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(10);

fn options() -> Options {
    Options {
        redo_segment_size: 64 << 10,
        write_buffer_size: 64 << 10,
        slog_checkpoint_bytes: 4 << 10,
        level0_layer_trigger: 3,
        level0_extents_trigger: 2,
        level1_extents_trigger: 2,
        level1_dynamic_trigger: false,
        ..Default::default()
    }
}

fn account(i: u64) -> Vec<u8> {
    format!("acct-{i:02}").into_bytes()
}

fn ledger_key(id: u64) -> Vec<u8> {
    format!("xfer-{id:016}").into_bytes()
}

fn parse_i64(v: &[u8]) -> i64 {
    std::str::from_utf8(v).unwrap().parse().unwrap()
}

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(format_args!("{line}\n"));
    let _ = out.flush();
}

/// One transfer attempt; `Ok(false)` when the source lacks the money.
fn transfer(db: &Db, accounts: &Table, ledger: &Table, rng: &mut StdRng, id: u64) -> riptide::Result<bool> {
    let from = rng.random_range(0..ACCOUNTS);
    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
    let amount: i64 = rng.random_range(1..=200);
    let (mode, isolation, for_update) = match rng.random_range(0..4) {
        0 => (TxnMode::Pessimistic, Isolation::Snapshot, false),
        1 => (TxnMode::Pessimistic, Isolation::Snapshot, true),
        2 => (TxnMode::Pessimistic, Isolation::ReadCommitted, true),
        _ => (TxnMode::Optimistic, Isolation::Snapshot, false),
    };
    let mut txn: Txn = db.begin(TxnOptions {
        mode,
        isolation,
        lock_timeout: Duration::from_secs(2),
        write_options: WriteOptions {
            sync: true,
            ..Default::default()
        },
        ..Default::default()
    })?;
    let read = |txn: &mut Txn, i: u64| -> riptide::Result<i64> {
        let v = if for_update {
            txn.get_for_update(accounts, &account(i))?
        } else {
            txn.get(accounts, &account(i))?
        };
        Ok(parse_i64(&v.expect("every account exists")))
    };
    let (a, b) = if rng.random_bool(0.5) { (from, to) } else { (to, from) };
    let va = read(&mut txn, a)?;
    let vb = read(&mut txn, b)?;
    let (f, t) = if a == from { (va, vb) } else { (vb, va) };
    if f < amount {
        return Ok(false);
    }
    txn.put(accounts, &account(from), (f - amount).to_string().as_bytes())?;
    txn.put(accounts, &account(to), (t + amount).to_string().as_bytes())?;
    txn.put(ledger, &ledger_key(id), format!("{from},{to},{amount}").as_bytes())?;
    say(format_args!("START {id}"));
    if rng.random_bool(0.5) {
        txn.commit()?;
    } else {
        txn.commit_async().wait()?;
    }
    say(format_args!("ACK {id}"));
    Ok(true)
}

/// The child process: does nothing unless started by `run_rounds`.
#[test]
#[ignore = "child process of the bank test"]
fn bank_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let base: u64 = std::env::var(CHILD_BASE_ENV).unwrap().parse().unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_TIME_LIMIT + Duration::from_secs(5));
        std::process::exit(3);
    });
    let deadline = Instant::now() + CHILD_TIME_LIMIT;
    say(format_args!("\nOPENING"));
    let db = Db::open(&dir, options()).unwrap();
    let accounts = db.table("accounts").unwrap();
    let ledger = db.table("ledger").unwrap();
    say(format_args!("READY"));
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let (db, accounts, ledger) = (db.clone(), accounts.clone(), ledger.clone());
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(base + th);
                let mut next = base + th * THREAD_SPAN;
                while Instant::now() < deadline {
                    let id = next;
                    next += 1;
                    match transfer(&db, &accounts, &ledger, &mut rng, id) {
                        Ok(_) => {}
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("transfer {id}: {e}"),
                    }
                }
            });
        }
    });
    say(format_args!("DONE"));
}

#[derive(Default)]
struct ChildOutput {
    started: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    other: Vec<String>,
}

fn read_child_stdout(stdout: impl Read) -> ChildOutput {
    let mut out = ChildOutput::default();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Some(l) = line.strip_suffix('\n') else { break };
        if let Some(id) = l.strip_prefix("ACK ") {
            out.acked.insert(id.parse().expect("bad ACK line"));
        } else if let Some(id) = l.strip_prefix("START ") {
            out.started.insert(id.parse().expect("bad START line"));
        } else if !l.is_empty() && l != "READY" && l != "OPENING" {
            out.other.push(l.to_string());
        }
    }
    out
}

/// Checks the books after a kill; returns the transfers in the ledger.
fn check_books(dir: &Path, started: &BTreeSet<u64>, must_have: &BTreeSet<u64>) -> Result<BTreeSet<u64>, String> {
    let db = Db::open(dir, options()).map_err(|e| format!("reopen failed: {e}"))?;
    let accounts = db.table("accounts").unwrap();
    let ledger = db.table("ledger").unwrap();
    let snap = db.snapshot();
    let at = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    let mut balances: BTreeMap<u64, i64> = BTreeMap::new();
    for i in 0..ACCOUNTS {
        let v = accounts
            .get_opt(&account(i), &at)
            .map_err(|e| e.to_string())?
            .ok_or(format!("account {i} missing"))?;
        balances.insert(i, parse_i64(&v));
    }
    let total: i64 = balances.values().sum();
    if total != ACCOUNTS as i64 * INITIAL {
        return Err(format!("total is {total}, expected {}", ACCOUNTS as i64 * INITIAL));
    }
    if let Some((i, b)) = balances.iter().find(|(_, b)| **b < 0) {
        return Err(format!("account {i} is negative: {b}"));
    }
    let mut expected: BTreeMap<u64, i64> = (0..ACCOUNTS).map(|i| (i, INITIAL)).collect();
    let mut seen = BTreeSet::new();
    for entry in ledger.iter(&at).map_err(|e| e.to_string())? {
        let (k, v) = entry.map_err(|e| e.to_string())?;
        let id: u64 = std::str::from_utf8(&k).unwrap()[5..].parse().unwrap();
        let parts: Vec<i64> = std::str::from_utf8(&v)
            .unwrap()
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        *expected.get_mut(&(parts[0] as u64)).unwrap() -= parts[2];
        *expected.get_mut(&(parts[1] as u64)).unwrap() += parts[2];
        if !started.contains(&id) {
            return Err(format!("ledger has transfer {id}, which was never started"));
        }
        seen.insert(id);
    }
    if balances != expected {
        return Err(format!(
            "balances do not match the ledger (a transfer was half applied or lost):\n  balances {balances:?}\n  ledger   {expected:?}"
        ));
    }
    if let Some(lost) = must_have.difference(&seen).next() {
        return Err(format!("acknowledged or previously seen transfer {lost} is missing"));
    }
    db.close().map_err(|e| e.to_string())?;
    Ok(seen)
}

fn run_rounds(rounds: u64) {
    let seed = match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().expect("RIPTIDE_BANK_SEED must be a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let root = tempfile::tempdir().unwrap().keep();
    let dir = root.join("db");
    {
        let db = Db::open(&dir, options()).unwrap();
        let accounts = db.create_table("accounts").unwrap();
        db.create_table("ledger").unwrap();
        for i in 0..ACCOUNTS {
            accounts
                .put_opt(
                    &account(i),
                    INITIAL.to_string().as_bytes(),
                    &WriteOptions {
                        sync: true,
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        db.close().unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let mut started_ever: BTreeSet<u64> = BTreeSet::new();
    let mut must_have: BTreeSet<u64> = BTreeSet::new();
    let mut acked_total = 0usize;
    let t0 = Instant::now();
    for round in 1..=rounds {
        let base = round * ROUND_SPAN;
        let mut child = Command::new(&exe)
            .args(["bank_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, &dir)
            .env(CHILD_BASE_ENV, base.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the child");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out_reader = std::thread::spawn(move || read_child_stdout(stdout));
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let delay = Duration::from_millis(rng.random_range(100..=600));
        std::thread::sleep(delay);
        let exited = child.try_wait().unwrap();
        if exited.is_none() {
            child.kill().expect("SIGKILL");
        }
        let status = child.wait().unwrap();
        let out = out_reader.join().unwrap();
        let err = err_reader.join().unwrap();
        let fail = |what: String| -> ! {
            panic!(
                "bank test failed in round {round} (seed {seed}, killed after {delay:?}, child status {status:?}) \
                 on {} (kept): {what}\nchild stdout (other lines): {:?}\nchild stderr:\n{err}",
                dir.display(),
                out.other
            );
        };
        if let Some(st) = exited {
            fail(format!("the child exited by itself ({st}) before the kill"));
        }
        if let Some(bad) = out.acked.difference(&out.started).next() {
            fail(format!("transfer {bad} acknowledged but never started"));
        }
        started_ever.extend(&out.started);
        must_have.extend(&out.acked);
        acked_total += out.acked.len();
        match check_books(&dir, &started_ever, &must_have) {
            Ok(seen) => must_have = seen,
            Err(what) => fail(what),
        }
    }
    eprintln!(
        "bank test: {rounds} rounds in {:?} (seed {seed}): {acked_total} transfers acknowledged, {} in the ledger",
        t0.elapsed(),
        must_have.len()
    );
    assert!(acked_total > 0, "no transfer was ever acknowledged");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bank_transfers_survive_sigkill() {
    run_rounds(6);
}

#[test]
#[ignore = "stress: 200 rounds, a few minutes"]
fn bank_stress() {
    run_rounds(200);
}
