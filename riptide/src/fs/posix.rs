//! [`PosixFs`]: the real file system, through `std::fs`.
//!
//! `sync_data` is `fdatasync`; `sync_dir` opens the directory and `fsync`s it; `lock` is an
//! advisory `flock` on a LOCK file, released when the handle drops (or the process dies).

use super::{FileLock, FileSystem, RandomRwFile, ReadableFile, WritableFile};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct PosixFs;

struct PosixWritable {
    file: File,
    len: u64,
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn start_writeback(&mut self, offset: u64, len: u64) {
        start_writeback(&self.file, offset, len);
    }
}

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`: queues the range's dirty pages for writeback and
/// returns without waiting. Linux only; elsewhere nothing (the hint is optional).
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        let (Ok(off), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is valid for the lifetime of `file`; sync_file_range only
        // reads its scalar arguments and has no memory effects; a failure is ignored (it is a
        // hint: durability comes from fdatasync).
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// A file for positional reads ([`ReadableFile`], from `open_read`) or reads and writes
/// ([`RandomRwFile`], from `open_rw`): `pread`/`pwrite` on one shared descriptor.
struct PosixRw {
    file: File,
}

impl ReadableFile for PosixRw {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    /// `pread` straight into `buf`'s spare capacity: a block read does not zero-fill first.
    fn read_exact_into(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<()> {
        use std::os::unix::io::AsRawFd;
        buf.reserve(len);
        let start = buf.len();
        while buf.len() < start + len {
            let done = buf.len() - start;
            let at = libc::off_t::try_from(offset + done as u64)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let spare = &mut buf.spare_capacity_mut()[..len - done];
            // SAFETY: `spare` is writable memory owned by `buf` of `spare.len()` bytes (reserved
            // above); pread writes at most that many bytes into it and reports how many.
            let n = unsafe { libc::pread(self.file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
            match n {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n if n > 0 => {
                    // SAFETY: pread initialized the first `n` bytes of the spare capacity, and
                    // `n <= spare.len()` keeps the length within the reserved capacity.
                    unsafe { buf.set_len(buf.len() + n as usize) }
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn prefetch(&self, offset: u64, len: u64) {
        fadvise_willneed(&self.file, offset, len);
    }
}

/// `posix_fadvise(WILLNEED)`: starts reading the range into the page cache in the background.
fn fadvise_willneed(file: &File, offset: u64, len: u64) {
    use std::os::unix::io::AsRawFd;
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor is valid for the lifetime of `file`; posix_fadvise only reads its
    // arguments and has no memory effects; a failure is ignored (it is a hint).
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED);
    }
}

impl RandomRwFile for PosixRw {
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        start_writeback(&self.file, offset, len);
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::unix::io::AsRawFd;
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: the descriptor is valid for the lifetime of `self.file`; fallocate has no
        // memory effects. A file system without hole punching returns EOPNOTSUPP, which is fine
        // for a hint.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if r == 0 {
            return Ok(());
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            e => Err(e),
        }
    }
}

#[derive(Debug)]
struct PosixLock {
    _file: File,
}

impl FileLock for PosixLock {}

impl FileSystem for PosixFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    /// `st_blocks` (512-byte units, as `du` counts them).
    fn allocated_bytes(&self, path: &Path) -> io::Result<Option<u64>> {
        use std::os::unix::fs::MetadataExt;
        Ok(Some(fs::metadata(path)?.blocks().saturating_mul(512)))
    }

    fn copy_ranges(&self, src: &Path, dst: &Path, ranges: &[(u64, u64)]) -> io::Result<bool> {
        use std::os::unix::io::AsRawFd;
        let from = File::open(src)?;
        let to = OpenOptions::new().write(true).open(dst)?;
        let mut copied_any = false;
        for &(offset, len) in ranges {
            let (Ok(mut off_in), Ok(end)) = (
                libc::loff_t::try_from(offset),
                offset
                    .checked_add(len)
                    .and_then(|e| libc::loff_t::try_from(e).ok())
                    .ok_or(()),
            ) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "copy range beyond the largest offset",
                ));
            };
            let mut off_out = off_in;
            while off_in < end {
                let want = usize::try_from(end - off_in).unwrap_or(usize::MAX).min(1 << 30);
                // SAFETY: both descriptors are valid for the lifetimes of `from` and `to`; the
                // offset pointers point to live locals the kernel updates; no buffer of ours is
                // read or written.
                let n = unsafe {
                    libc::copy_file_range(from.as_raw_fd(), &mut off_in, to.as_raw_fd(), &mut off_out, want, 0)
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    let unsupported = matches!(
                        e.raw_os_error(),
                        Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL)
                    );
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return if unsupported && !copied_any { Ok(false) } else { Err(e) };
                }
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                copied_any = true;
            }
        }
        Ok(true)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(PosixWritable { file, len: 0 }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn ReadableFile>> {
        Ok(Box::new(PosixRw {
            file: File::open(path)?,
        }))
    }

    fn open_rw(&self, path: &Path, create: bool) -> io::Result<Arc<dyn RandomRwFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(PosixRw { file }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(PosixLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by another process",
            )),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `unsafe` copy_file_range call: the ranges land at the same offsets, the rest of
    /// the destination is untouched, a range past the source's end is `UnexpectedEof`.
    #[test]
    fn copy_ranges_copies_exactly_the_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 + i / 509) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        std::fs::write(&dst, vec![0xEEu8; data.len()]).unwrap();
        let ranges = [(0u64, 10u64), (4096, 2_000_000), (2_999_000, 1000), (100, 0)];
        assert!(
            PosixFs.copy_ranges(&src, &dst, &ranges).unwrap(),
            "copy_file_range unsupported here"
        );
        let got = std::fs::read(&dst).unwrap();
        let mut expected = vec![0xEEu8; data.len()];
        for (off, len) in ranges {
            let (off, len) = (off as usize, len as usize);
            expected[off..off + len].copy_from_slice(&data[off..off + len]);
        }
        assert!(got == expected);
        let err = PosixFs.copy_ranges(&src, &dst, &[(2_999_990, 100)]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(PosixFs.copy_ranges(&src, &dst, &[(u64::MAX - 1, 10)]).is_err());
    }

    /// The `unsafe` fadvise call: valid, out-of-range and zero-length hints never fail or
    /// change the data.
    #[test]
    fn prefetch_is_a_harmless_hint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let f = PosixFs.open_read(&path).unwrap();
        f.prefetch(0, 8192);
        f.prefetch(4096, 0);
        f.prefetch(1 << 40, 1 << 20);
        f.prefetch(u64::MAX, u64::MAX);
        let rw = PosixFs.open_rw(&path, false).unwrap();
        rw.prefetch(0, 4096);
        assert_eq!(f.read_all().unwrap(), vec![7u8; 8192]);
    }

    /// The `unsafe` pread into spare capacity: reads exactly the requested bytes after what the
    /// buffer held, agrees with the zero-filling default, and at the end of the file reports
    /// `UnexpectedEof` keeping only the bytes that were really read.
    #[test]
    fn read_exact_into_reads_without_zero_fill() {
        struct ViaDefault<'a>(&'a dyn ReadableFile);
        impl ReadableFile for ViaDefault<'_> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                self.0.read_at(buf, offset)
            }
            fn len(&self) -> io::Result<u64> {
                self.0.len()
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = PosixFs.open_read(&path).unwrap();
        for (off, len) in [(0usize, 0usize), (0, 1), (3, 16_384), (40_000, 10_000), (49_999, 1)] {
            let mut buf = vec![0xAAu8; 5];
            f.read_exact_into(&mut buf, len, off as u64).unwrap();
            assert_eq!(&buf[..5], &[0xAA; 5]);
            assert_eq!(&buf[5..], &data[off..off + len], "offset {off} length {len}");
            let mut via = vec![0xAAu8; 5];
            ViaDefault(&*f).read_exact_into(&mut via, len, off as u64).unwrap();
            assert_eq!(via, buf);
        }
        for file in [&*f, &ViaDefault(&*f) as &dyn ReadableFile] {
            let mut buf = Vec::with_capacity(3);
            let err = file.read_exact_into(&mut buf, 20_000, 40_000).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
            assert_eq!(buf, &data[40_000..]);
        }
    }

    /// The `unsafe` sync_file_range call: valid, past-the-end, zero-length and huge ranges
    /// never fail or change the data, and appends after it still land in order.
    #[test]
    fn start_writeback_is_a_harmless_hint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        let mut f = PosixFs.create(&path).unwrap();
        f.append(&[1u8; 10_000]).unwrap();
        f.start_writeback(0, 10_000);
        f.start_writeback(5_000, 0);
        f.start_writeback(1 << 40, 1 << 20);
        f.start_writeback(u64::MAX, u64::MAX);
        f.append(&[2u8; 100]).unwrap();
        f.sync_data().unwrap();
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len(), 10_100);
        assert!(data[..10_000].iter().all(|&b| b == 1) && data[10_000..].iter().all(|&b| b == 2));
    }

    /// The `unsafe` fallocate call: a punched range reads as zeros, the length stays, the rest
    /// of the file is untouched.
    #[test]
    fn punch_hole_zeroes_the_range_and_keeps_the_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![9u8; 3 * 4096]).unwrap();
        let rw = PosixFs.open_rw(&path, false).unwrap();
        rw.punch_hole(4096, 4096).unwrap();
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len(), 3 * 4096);
        assert!(data[..4096].iter().all(|&b| b == 9));
        assert!(data[4096..8192].iter().all(|&b| b == 0));
        assert!(data[8192..].iter().all(|&b| b == 9));
    }

    #[test]
    fn rw_file_positional_writes_and_upcast() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.dat");
        let fs = PosixFs;
        assert_eq!(fs.open_rw(&path, false).err().unwrap().kind(), io::ErrorKind::NotFound);
        let f = fs.open_rw(&path, true).unwrap();
        assert_eq!(f.len().unwrap(), 0);
        f.write_at(b"world", 6).unwrap();
        f.write_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        assert_eq!(f.read_all().unwrap(), b"hello\0world");
        // Reopening never truncates; the same handle serves readers through an upcast.
        let g = fs.open_rw(&path, true).unwrap();
        let r: Arc<dyn ReadableFile> = g.clone();
        assert_eq!(r.len().unwrap(), 11);
        g.set_len(3).unwrap();
        assert_eq!(f.read_all().unwrap(), b"hel");
        g.set_len(5).unwrap();
        g.sync_data().unwrap();
        assert_eq!(fs.open_read(&path).unwrap().read_all().unwrap(), b"hel\0\0");
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..16u64 {
                        f.write_at(&[t; 8], (u64::from(t) * 16 + i) * 8).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let all = f.read_all().unwrap();
        assert_eq!(all.len(), 4 * 16 * 8);
        for (i, b) in all.iter().enumerate() {
            assert_eq!(usize::from(*b), i / 128);
        }
    }
}
