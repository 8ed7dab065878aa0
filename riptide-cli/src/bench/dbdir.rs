//! The bench's database directory: what counts as a database of one of the engines, and
//! [`wipe_dir`], which empties it for a fresh run.
//!
//! Invariants:
//! - Nothing is deleted from a directory that is neither empty nor a database of one of the
//!   engines ([`BenchError::NotADatabase`]).
//! - Nothing is deleted while another process has the database open (for Riptide, nor while
//!   another instance in this process has it; fjall directories are not checked: no lock
//!   convention of fjall's is known here): a Riptide database goes through [`riptide::Db::destroy`], which takes its
//!   `LOCK` first and deletes only Riptide's own files; a RocksDB database is removed only while
//!   this process holds the fcntl lock on its `LOCK` file, as RocksDB itself takes it. Either
//!   refusal is [`BenchError::Locked`], naming the directory.

use super::error::BenchError;
use std::path::Path;

/// True if `dir` holds a database of one of the bench's engines (so it may be wiped): Riptide's
/// `CATALOG`, RocksDB's `CURRENT` + `IDENTITY`, or fjall's `version` + `keyspaces/`.
pub fn is_bench_database(dir: &Path) -> bool {
    crate::inspect::is_database(dir)
        || is_rocksdb_database(dir)
        || (dir.join("version").is_file() && dir.join("keyspaces").is_dir())
}

fn is_rocksdb_database(dir: &Path) -> bool {
    dir.join("CURRENT").is_file() && dir.join("IDENTITY").is_file()
}

/// Empties `dir` for a fresh run: nothing to do if it is missing or empty; a database of one of
/// the engines is deleted unless it is open elsewhere; anything else is refused.
pub fn wipe_dir(dir: &Path) -> Result<(), BenchError> {
    let io = |what: &str, e| BenchError::Io {
        context: format!("{what} {}", dir.display()),
        source: e,
    };
    let mut entries = match std::fs::read_dir(dir) {
        Ok(it) => it,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(BenchError::NotADatabase(dir.to_path_buf()))
        }
        Err(e) => return Err(io("reading", e)),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if crate::inspect::is_database(dir) {
        return riptide::Db::destroy(dir).map_err(|e| match e {
            riptide::Error::Locked(_) => BenchError::Locked(dir.to_path_buf()),
            riptide::Error::NotADatabase(_) => BenchError::NotADatabase(dir.to_path_buf()),
            other => BenchError::engine(format!("wiping {}", dir.display()), other),
        });
    }
    if !is_bench_database(dir) {
        return Err(BenchError::NotADatabase(dir.to_path_buf()));
    }
    // Held until the directory is gone (closing the file releases the lock).
    let _lock = if is_rocksdb_database(dir) {
        lock_rocksdb(dir)?
    } else {
        None
    };
    std::fs::remove_dir_all(dir).map_err(|e| io("wiping", e))
}

/// Takes RocksDB's lock on `dir/LOCK` (an fcntl write lock over the whole file, as RocksDB's
/// `PosixEnv::LockFile` takes it); `None` if there is no `LOCK` file.
fn lock_rocksdb(dir: &Path) -> Result<Option<std::fs::File>, BenchError> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(BenchError::Io {
                context: format!("opening {}", path.display()),
                source: e,
            })
        }
    };
    // SAFETY: a zeroed `flock` is a valid value; the fields set below are all fcntl reads.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: `file` is open for the duration of the call and `fl` outlives it.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } == -1 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EACCES | libc::EAGAIN) => BenchError::Locked(dir.to_path_buf()),
            _ => BenchError::Io {
                context: format!("locking {}", path.display()),
                source: e,
            },
        });
    }
    Ok(Some(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wipe_only_touches_riptide_databases() {
        let tmp = std::env::temp_dir().join(format!("riptide-cli-wipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        // Missing: fine.
        wipe_dir(&tmp).unwrap();
        // Empty: fine, and kept.
        std::fs::create_dir_all(&tmp).unwrap();
        wipe_dir(&tmp).unwrap();
        // Foreign content: refused, untouched.
        std::fs::write(tmp.join("precious.txt"), b"x").unwrap();
        assert!(matches!(wipe_dir(&tmp), Err(BenchError::NotADatabase(_))));
        assert!(tmp.join("precious.txt").exists());
        // A Riptide database: wiped.
        std::fs::remove_file(tmp.join("precious.txt")).unwrap();
        let db = riptide::Db::open(&tmp, riptide::Options::default()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        db.close().unwrap();
        wipe_dir(&tmp).unwrap();
        assert!(!tmp.exists());
        // What RocksDB and fjall leave in a database directory: wiped; half of it: refused.
        for markers in [&["CURRENT", "IDENTITY"][..], &["version", "keyspaces/"]] {
            std::fs::create_dir_all(&tmp).unwrap();
            for m in markers {
                match m.strip_suffix('/') {
                    Some(d) => std::fs::create_dir(tmp.join(d)).unwrap(),
                    None => std::fs::write(tmp.join(m), b"").unwrap(),
                }
            }
            std::fs::write(tmp.join("data"), b"x").unwrap();
            wipe_dir(&tmp).unwrap();
            assert!(!tmp.exists(), "{markers:?}");
        }
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("CURRENT"), b"").unwrap();
        assert!(matches!(wipe_dir(&tmp), Err(BenchError::NotADatabase(_))));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn wipe_refuses_an_open_riptide_database() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let db = riptide::Db::open(&path, riptide::Options::default()).unwrap();
        db.default_table().put(b"k", b"v").unwrap();
        assert!(matches!(wipe_dir(&path), Err(BenchError::Locked(_))));
        assert_eq!(db.default_table().get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        db.close().unwrap();
        wipe_dir(&path).unwrap();
        assert!(!path.exists());
    }
}
