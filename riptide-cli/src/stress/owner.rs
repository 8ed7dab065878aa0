//! Which database is stress's own, and opening it with its expected state ([`open`]).
//!
//! A database belongs to a stress run when the expected state beside it (`<db>.expected`)
//! names it: the expected state's header carries a random owner token, and the database holds
//! the same token under [`OWNER_KEY`] in its default table (which the workload never touches).
//!
//! Rules, in order:
//! - no database at `--db` (no directory, or one without a `CATALOG`): an expected state left
//!   beside it describes writes this database never had, so it is removed and the run starts
//!   over;
//! - a database with no expected state beside it was not created by stress: refused (a usage
//!   error) unless `--reuse`, before anything is written;
//! - a database whose token differs from the expected state's was not created with it: refused
//!   unless `--reuse`, which adopts it (the token is rewritten and the run verifies against the
//!   expected state as it is);
//! - a database without a token whose expected state records no write is adopted: that is the
//!   window between creating both and stamping the token, which a killed run can leave;
//! - if the database cannot be opened, an expected state this run created is removed again, so
//!   a failed open leaves no `<db>.expected` behind.

use super::args::{options, StressArgs};
use super::error::StressError;
use super::expected::Expected;
use riptide::{Db, WriteOptions};
use std::path::{Path, PathBuf};

/// The default table's key holding the owner token (8 bytes, little-endian).
pub const OWNER_KEY: &[u8] = b"riptide-stress-owner";

/// `<db>.expected`.
pub fn expected_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".expected");
    PathBuf::from(p)
}

/// Opens the database of `a` and its expected state by the rules above.
pub fn open(a: &StressArgs) -> Result<(Db, Expected), StressError> {
    let exp_path = expected_path(&a.db);
    let existing = crate::inspect::is_database(&a.db);
    // No database yet: an expected state left beside it (`rm -rf <db>` leaves `<db>.expected`
    // behind) describes writes this database never had, so it starts over. No acknowledged
    // write can be missing here: the expected state records a write only after `Db::open` has
    // created the database.
    if !existing && exp_path.exists() {
        std::fs::remove_file(&exp_path).map_err(|e| format!("removing the stale {}: {e}", exp_path.display()))?;
        println!(
            "riptide stress: {} does not exist; removed the expected state left by an earlier run",
            a.db.display()
        );
    }
    let created = !exp_path.exists();
    if existing && created && !a.reuse {
        return Err(StressError::Usage(format!(
            "{} is a database that riptide stress did not create (no {} beside it); \
             pass --reuse to run on it anyway, or pick another --db",
            a.db.display(),
            exp_path.display()
        )));
    }
    let mut exp = Expected::open(&exp_path, a.tables, a.keys)?;
    let db = match Db::open(&a.db, options(a)?) {
        Ok(db) => db,
        Err(e) => {
            if created {
                let _ = std::fs::remove_file(&exp_path);
            }
            return Err(StressError::Failed(format!("opening {}: {e}", a.db.display())));
        }
    };
    let stamp = |db: &Db, token: u64| {
        db.default_table()
            .put_opt(
                OWNER_KEY,
                &token.to_le_bytes(),
                &WriteOptions {
                    sync: true,
                    ..WriteOptions::default()
                },
            )
            .map_err(|e| StressError::Failed(format!("writing the owner token to {}: {e}", a.db.display())))
    };
    let token = db
        .default_table()
        .get(OWNER_KEY)
        .map_err(|e| format!("reading the owner token of {}: {e}", a.db.display()))?
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map(u64::from_le_bytes);
    match token {
        Some(t) if t == exp.token() && t != 0 => {}
        None if exp.is_untouched() && exp.token() != 0 => stamp(&db, exp.token())?,
        _ if a.reuse => {
            if exp.token() == 0 {
                exp.set_token(rand::random::<u64>() | 1)?;
            }
            stamp(&db, exp.token())?;
        }
        _ => {
            let _ = db.close();
            return Err(StressError::Usage(format!(
                "{} does not belong to {} (it was made for another database); \
                 pass --reuse to run against it anyway, or pick another --db",
                exp_path.display(),
                a.db.display()
            )));
        }
    }
    Ok((db, exp))
}
