//! [`SlotGuardFile`]: reads of a local extent by a read-only view of a database that another
//! instance has open for writes, checked against the writer freeing and reusing its slots.
//!
//! The writer frees an extent's slots only after zeroing the end of its footer
//! (`ExtentSpace::free`; a slot whose zeroing fails is never reused by that instance), and
//! writes a new extent only into free slots. So while the footer the view saw when it located
//! the extent is still in place, every byte of the extent is the one it saw.
//!
//! Invariants:
//! - Each read is followed by a read of the footer; the read's bytes are returned only if the
//!   footer still equals the one captured when the guard was made. Otherwise the read fails
//!   with [`Error::ViewOutdated`] (carried through `io::Error`, see [`CarriedError`]).
//! - A footer that does not look like one when the guard is made (zeroed: freed already) fails
//!   at once. That the captured footer is the extent's that the view's metadata names is
//!   checked by the caller, against the extent's properties (`ExtentStore::open`).

use crate::error::{CarriedError, Error};
use crate::extent::FOOTER_SIZE;
use crate::fs::ReadableFile;
use crate::space::ExtentId;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A data file seen through one extent's footer (see the module header).
pub(crate) struct SlotGuardFile {
    inner: Arc<dyn ReadableFile>,
    path: PathBuf,
    extent: ExtentId,
    /// Where the extent's footer starts in the file.
    footer_at: u64,
    /// The footer as it was when the guard was made.
    footer: [u8; FOOTER_SIZE],
}

impl SlotGuardFile {
    /// A guard of extent `extent`, whose footer starts at `footer_at` in `inner`; reads the
    /// footer now. Fails with [`Error::ViewOutdated`] (in `io::Error`) if it does not look like
    /// a footer.
    pub(crate) fn new(
        inner: Arc<dyn ReadableFile>,
        path: PathBuf,
        extent: ExtentId,
        footer_at: u64,
        looks_like_footer: impl Fn(&[u8]) -> bool,
    ) -> io::Result<SlotGuardFile> {
        let mut guard = SlotGuardFile {
            inner,
            path,
            extent,
            footer_at,
            footer: [0; FOOTER_SIZE],
        };
        let footer = guard.read_footer()?;
        match footer {
            Some(f) if looks_like_footer(&f) => {
                guard.footer = f;
                Ok(guard)
            }
            _ => Err(guard.outdated()),
        }
    }

    /// The footer's bytes now, or `None` if the file ends before it.
    fn read_footer(&self) -> io::Result<Option<[u8; FOOTER_SIZE]>> {
        let mut now = [0u8; FOOTER_SIZE];
        let mut done = 0;
        while done < FOOTER_SIZE {
            match self.inner.read_at(&mut now[done..], self.footer_at + done as u64) {
                Ok(0) => return Ok(None),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(now))
    }

    fn outdated(&self) -> io::Error {
        io::Error::other(CarriedError(Error::ViewOutdated {
            path: self.path.clone(),
            extent: self.extent.to_string(),
        }))
    }

    /// Ok if the footer is still the one captured; the outcome of a read made before this.
    fn still_in_place<T>(&self, read: io::Result<T>) -> io::Result<T> {
        match self.read_footer()? {
            Some(now) if now == self.footer => read,
            _ => Err(self.outdated()),
        }
    }
}

impl ReadableFile for SlotGuardFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let read = self.inner.read_at(buf, offset);
        self.still_in_place(read)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.inner.prefetch(offset, len);
    }

    fn read_exact_into(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<()> {
        let read = self.inner.read_exact_into(buf, len, offset);
        self.still_in_place(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FaultFs, FileSystem};
    use std::path::Path;

    fn looks_like_footer(f: &[u8]) -> bool {
        f.iter().any(|&b| b != 0)
    }

    fn outdated(e: io::Error) -> bool {
        matches!(Error::io("read", "/d", e), Error::ViewOutdated { .. })
    }

    #[test]
    fn reads_pass_while_the_footer_stays_and_fail_once_it_changes() {
        let fs = FaultFs::new();
        let path = Path::new("/d/000001.dat");
        fs.create_dir_all(Path::new("/d")).unwrap();
        let file = fs.open_rw(path, true).unwrap();
        file.write_at(&[7u8; 4096], 0).unwrap();
        file.write_at(&[9u8; FOOTER_SIZE], 4096).unwrap();
        let inner: Arc<dyn ReadableFile> = file.clone();
        let guard =
            SlotGuardFile::new(inner.clone(), path.into(), ExtentId::new(1, 1), 4096, looks_like_footer).unwrap();
        let mut buf = Vec::new();
        guard.read_exact_into(&mut buf, 100, 10).unwrap();
        assert_eq!(buf, vec![7u8; 100]);
        let mut one = [0u8; 8];
        assert_eq!(guard.read_at(&mut one, 0).unwrap(), 8);
        // The writer frees the extent (zeroes the footer's end), then reuses the slot.
        file.write_at(&[0u8; 16], 4096 + FOOTER_SIZE as u64 - 16).unwrap();
        file.write_at(&[1u8; 4096], 0).unwrap();
        assert!(outdated(guard.read_exact_into(&mut Vec::new(), 100, 10).unwrap_err()));
        assert!(outdated(guard.read_at(&mut one, 0).unwrap_err()));
        // A new extent with a footer of its own in the slot: still not the one seen.
        file.write_at(&[5u8; FOOTER_SIZE], 4096).unwrap();
        assert!(outdated(guard.read_at(&mut one, 0).unwrap_err()));
        // A zeroed footer fails at once; so does a file cut before it.
        file.write_at(&[0u8; FOOTER_SIZE], 4096).unwrap();
        let err = SlotGuardFile::new(inner.clone(), path.into(), ExtentId::new(1, 1), 4096, looks_like_footer);
        assert!(outdated(err.err().unwrap()));
        file.set_len(4100).unwrap();
        let err = SlotGuardFile::new(inner, path.into(), ExtentId::new(1, 1), 4096, looks_like_footer);
        assert!(outdated(err.err().unwrap()));
    }
}
