//! [`ObjectTier`]: extents kept as objects in an [`ObjectStore`], as seed 003 puts X-Engine's
//! bottom level on object storage.
//!
//! Invariants:
//! - An object-tier extent is one object, `ext/<id as 16 hex digits>`, written once by
//!   [`ObjectTier::upload`], create-only (`upload.rs`), and never modified. Its bytes are the extent's image without the
//!   gap: `valid ‖ footer` (see `crate::extent`). Its id carries [`OBJECT_ID_BIT`] and 63 random
//!   bits, so no counter needs to be persisted; an id still waiting for deletion is never handed
//!   out again.
//! - Reads see the extent at its usual offsets (`0..slots * EXTENT_SIZE`) through
//!   [`ObjectExtentFile`], which maps them onto the object: a read inside `valid` or inside the
//!   footer is one ranged GET (or a read of the cached copy); a read reaching into the gap is
//!   refused, as the reader never makes one.
//! - An object leaves the store only through the deletion queue: [`ObjectTier::retire`]
//!   (metadata no longer names it and no reader holds it) or [`ObjectTier::discard`] (a failed
//!   compaction's output) queue it, and the collector deletes it once its due time (retire:
//!   now + the grace period) has passed. A failed delete is queued again.
//! - An open extent keeps a weak reference to its cached image, so reads of a cached extent
//!   take no cache lock (as block swizzling does for the block cache); eviction drops the
//!   image all the same.
//! - An extent read by range [`WHOLE_AFTER_RANGED_READS`] times since it was opened is read
//!   whole into the extent cache on its next miss (hot extents end up local even when only
//!   point reads touch them).
//! - Every request is retried per the [`RetryPolicy`]; what still fails is
//!   [`Error::ObjectStore`] naming the object.

use super::cache::{CachedImage, ExtentCache};
use super::pins::PinSet;
use super::retry::RetryPolicy;
use super::store::{ObjectError, ObjectErrorKind, ObjectStore};
use crate::error::{Error, ObjectReadError, Result};
use crate::extent::{EXTENT_SIZE, FOOTER_SIZE};
use crate::fs::ReadableFile;
use crate::space::{ExtentId, OBJECT_ID_BIT};
use arc_swap::ArcSwapWeak;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Ranged reads of one extent after which the next read fetches it whole into the cache.
pub(crate) const WHOLE_AFTER_RANGED_READS: u32 = 8;

/// Prefix of extent objects' names.
pub(crate) const EXTENT_PREFIX: &str = "ext/";

/// The object name of extent `id`.
pub(crate) fn object_name(id: ExtentId) -> String {
    format!("{EXTENT_PREFIX}{:016x}", id.0)
}

/// The extent id an object name stands for, if it names an extent object.
pub(crate) fn parse_object_name(name: &str) -> Option<ExtentId> {
    let hex = name.strip_prefix(EXTENT_PREFIX)?;
    if hex.len() != 16 {
        return None;
    }
    let id = u64::from_str_radix(hex, 16).ok()?;
    (id & OBJECT_ID_BIT != 0).then_some(ExtentId(id))
}

/// Counters of the object tier since open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectTierStats {
    /// Where the objects live (`s3://bucket/prefix`, a directory).
    pub location: String,
    /// Extent objects written.
    pub objects_written: u64,
    /// Bytes written to the store.
    pub bytes_written: u64,
    /// Ranged reads (a block, a footer, an index).
    pub range_reads: u64,
    /// Whole-object reads (scans and compactions filling the extent cache).
    pub whole_reads: u64,
    /// Bytes read from the store.
    pub bytes_read: u64,
    /// Objects deleted.
    pub objects_deleted: u64,
    /// Objects waiting in the deletion queue.
    pub pending_deletes: u64,
    /// Extents that checkpoints pin (kept until [`crate::Db::release_checkpoint`]).
    pub pinned_objects: u64,
    /// Objects found that no metadata names (queued for deletion at open).
    pub orphans_found: u64,
    /// Requests retried after a transient error.
    pub retries: u64,
    /// Requests that failed for good (after retries).
    pub errors: u64,
    /// Extents read whole ahead of a scan, in the background.
    pub prefetches: u64,
    /// Reads served from the local extent cache.
    pub cache_hits: u64,
    /// Reads that found their extent not cached.
    pub cache_misses: u64,
    /// Extents in the local extent cache.
    pub cache_extents: u64,
    /// Bytes in the local extent cache.
    pub cache_bytes: u64,
    /// The extent cache's capacity in bytes.
    pub cache_capacity: u64,
}

#[derive(Default)]
struct Counters {
    objects_written: AtomicU64,
    bytes_written: AtomicU64,
    range_reads: AtomicU64,
    whole_reads: AtomicU64,
    bytes_read: AtomicU64,
    objects_deleted: AtomicU64,
    orphans_found: AtomicU64,
    retries: AtomicU64,
    errors: AtomicU64,
    prefetches: AtomicU64,
}

/// The deletion queue: extent id -> when it may be deleted.
#[derive(Default)]
struct Queue {
    due: HashMap<u64, Instant>,
    stop: bool,
}

/// The object tier of one open database.
pub(crate) struct ObjectTier {
    store: Arc<dyn ObjectStore>,
    retry: RetryPolicy,
    grace: Duration,
    cache: ExtentCache,
    queue: Mutex<Queue>,
    wake: Condvar,
    prefetch: Mutex<Prefetch>,
    prefetch_wake: Condvar,
    /// Extents being downloaded whole, and the signal that one finished.
    inflight: Mutex<std::collections::HashSet<u64>>,
    fetched: Condvar,
    /// Extents that checkpoints name (`super::pins`): never deleted while pinned.
    pins: Mutex<PinSet>,
    counters: Counters,
}

/// Most read-ahead requests waiting; more are dropped (a hint).
const MAX_PREFETCH_PENDING: usize = 4;

/// Scans' read-ahead: extents to read whole into the cache in the background.
#[derive(Default)]
struct Prefetch {
    pending: std::collections::VecDeque<(ExtentId, u64)>,
    stop: bool,
}

impl std::fmt::Debug for ObjectTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectTier").field("store", &self.store).finish()
    }
}

impl ObjectTier {
    /// The tier over `store`, with its extent cache.
    pub(crate) fn new(store: Arc<dyn ObjectStore>, retry: RetryPolicy, grace: Duration, cache: ExtentCache) -> Self {
        ObjectTier {
            store,
            retry,
            grace,
            cache,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            prefetch: Mutex::new(Prefetch::default()),
            prefetch_wake: Condvar::new(),
            inflight: Mutex::new(std::collections::HashSet::new()),
            fetched: Condvar::new(),
            pins: Mutex::new(PinSet::default()),
            counters: Counters::default(),
        }
    }

    /// The full name of extent `id`'s object, for messages.
    pub(crate) fn url(&self, id: ExtentId) -> String {
        format!("{}/{}", self.store.location().trim_end_matches('/'), object_name(id))
    }

    /// Runs one request with retries; a final failure is counted and named.
    fn request<T>(
        &self,
        op: &'static str,
        id: ExtentId,
        f: impl FnMut() -> std::result::Result<T, ObjectError>,
    ) -> Result<T> {
        let (r, retries) = self.retry.run(f);
        self.counters.retries.fetch_add(u64::from(retries), Ordering::Relaxed);
        r.map_err(|e| {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            self.name_error(op, id, e)
        })
    }

    /// `e`, from a request of `op` on extent `id`, as the engine's error naming the object.
    fn name_error(&self, op: &'static str, id: ExtentId, e: ObjectError) -> Error {
        Error::ObjectStore {
            op,
            object: self.url(id),
            kind: e.kind,
            message: e.message,
        }
    }

    /// A fresh extent id: random, never one waiting in the deletion queue.
    pub(crate) fn allocate(&self) -> ExtentId {
        let queue = self.queue.lock();
        loop {
            let id = rand::random::<u64>() | OBJECT_ID_BIT;
            if !queue.due.contains_key(&id) {
                return ExtentId(id);
            }
        }
    }

    /// A file reading extent `id` (`valid` bytes of data, `slots` slots) at its usual offsets.
    pub(crate) fn file(self: &Arc<Self>, id: ExtentId, valid: u64, slots: u32) -> Arc<dyn ReadableFile> {
        Arc::new(ObjectExtentFile {
            tier: self.clone(),
            id,
            valid,
            end: u64::from(slots) * EXTENT_SIZE,
            ranged_reads: AtomicU32::new(0),
            local: ArcSwapWeak::new(Weak::new()),
            direct_hits: AtomicU32::new(0),
        })
    }

    /// Reads `buf.len()` bytes at `at` of extent `id`'s object (`valid` bytes of data): from
    /// the cache, or by range; or, once `ranged_reads` (the extent's count) reaches
    /// [`WHOLE_AFTER_RANGED_READS`], by reading it whole into the cache first.
    fn read_object(&self, file: &ObjectExtentFile, buf: &mut [u8], at: u64) -> Result<()> {
        let (id, valid, ranged_reads) = (file.id, file.valid, &file.ranged_reads);
        // The extent's own weak reference to its cached image first: no cache lock.
        let mut cached = file.local.load().upgrade();
        if cached.is_some() {
            let nth = file.direct_hits.fetch_add(1, Ordering::Relaxed);
            self.cache.hit_direct(id.0, nth);
        } else {
            cached = self.cache.get(id.0);
        }
        if cached.is_none()
            && self.fits_cache(valid)
            && ranged_reads.fetch_add(1, Ordering::Relaxed) >= WHOLE_AFTER_RANGED_READS
        {
            ranged_reads.store(0, Ordering::Relaxed);
            // Best effort: if the whole read or the cache fails, this read goes by range.
            let _ = self.fetch_whole(id, valid);
            cached = self.cache.get(id.0);
        }
        if let Some(f) = cached {
            file.local.store(Arc::downgrade(&f));
            let mut done = 0;
            while done < buf.len() {
                let n =
                    f.0.read_at(&mut buf[done..], at + done as u64)
                        .map_err(|e| Error::io("read", format!("extent cache: {}", self.url(id)), e))?;
                if n == 0 {
                    return Err(Error::corruption(
                        self.url(id),
                        at,
                        "cached extent is shorter than the read",
                    ));
                }
                done += n;
            }
            return Ok(());
        }
        let name = object_name(id);
        let range = at..at + buf.len() as u64;
        let bytes = self.request("get", id, || {
            let b = self.store.get_range(&name, range.clone())?;
            if b.len() != buf.len() {
                return Err(ObjectError::new(
                    ObjectErrorKind::Permanent,
                    format!("ranged read of {} bytes returned {}", buf.len(), b.len()),
                ));
            }
            Ok(b)
        })?;
        self.counters.range_reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        buf.copy_from_slice(&bytes);
        Ok(())
    }

    /// Reads extent `id`'s whole object into the cache, unless it is there already (what a
    /// scan or a compaction does before reading an extent block by block). Returns whether it
    /// read the object.
    pub(crate) fn fetch_whole(&self, id: ExtentId, valid: u64) -> Result<bool> {
        self.fetch_whole_with(id, valid, true)
    }

    /// [`Self::fetch_whole`]; `retry: false` makes one attempt and counts no error (the
    /// prefetcher's hint, which a close must never wait on).
    fn fetch_whole_with(&self, id: ExtentId, valid: u64, retry: bool) -> Result<bool> {
        if self.cache.contains(id.0) || !self.fits_cache(valid) {
            return Ok(false);
        }
        // One download per extent at a time: a scan reaching an extent the prefetcher is
        // reading waits for it instead of reading it too.
        {
            let mut inflight = self.inflight.lock();
            while inflight.contains(&id.0) {
                self.fetched.wait(&mut inflight);
            }
            // Retired or discarded meanwhile: nobody will read it again.
            if self.cache.contains(id.0) || self.queue.lock().due.contains_key(&id.0) {
                return Ok(false);
            }
            inflight.insert(id.0);
        }
        let done = self.download(id, valid, retry);
        self.inflight.lock().remove(&id.0);
        self.fetched.notify_all();
        done.map(|()| true)
    }

    /// Downloads extent `id` whole into the cache (the caller holds its in-flight mark).
    fn download(&self, id: ExtentId, valid: u64, retry: bool) -> Result<()> {
        let name = object_name(id);
        let want = valid + FOOTER_SIZE as u64;
        let get = || {
            let b = self.store.get(&name)?;
            if b.len() as u64 != want {
                return Err(ObjectError::new(
                    ObjectErrorKind::Permanent,
                    format!("object has {} bytes, metadata says {want}", b.len()),
                ));
            }
            Ok(b)
        };
        let image = if retry {
            self.request("get", id, get)?
        } else {
            get().map_err(|e| self.name_error("get", id, e))?
        };
        self.counters.whole_reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(image.len() as u64, Ordering::Relaxed);
        self.cache.insert(id.0, &image)?;
        Ok(())
    }

    /// True if an extent of `valid` bytes can be cached at all.
    fn fits_cache(&self, valid: u64) -> bool {
        valid + FOOTER_SIZE as u64 <= self.cache.capacity()
    }

    /// Replaces the set of extents checkpoints pin: the collector and orphan reclaim skip them.
    /// Extents kept for a pin that no longer is are queued for deletion at once (their grace
    /// period passed while they were kept).
    pub(crate) fn set_pinned(&self, ids: std::collections::HashSet<u64>) {
        let released = self.pins.lock().replace(ids);
        for id in released {
            self.enqueue(ExtentId(id), Instant::now());
        }
    }

    /// Queues extent `id` for deletion after the grace period: no metadata names it and no
    /// reader holds it any more.
    pub(crate) fn retire(&self, id: ExtentId) {
        self.cache.remove(id.0);
        self.enqueue(id, Instant::now() + self.grace);
    }

    /// Queues extent `id` for deletion at once: it was written but never named by metadata
    /// (a failed compaction's output).
    pub(crate) fn discard(&self, id: ExtentId) {
        self.cache.remove(id.0);
        self.enqueue(id, Instant::now());
    }

    fn enqueue(&self, id: ExtentId, due: Instant) {
        self.queue.lock().due.insert(id.0, due);
        self.wake.notify_all();
    }

    /// Deletes every queued object that is due, one attempt each (no retry loop, so a close
    /// never waits on a failing store for long); a failed delete is queued again one grace
    /// period (at least a second) later. Stops early once the collector is told to stop.
    /// Returns the number deleted.
    pub(crate) fn delete_due(&self) -> usize {
        let now = Instant::now();
        let due: Vec<u64> = {
            let q = self.queue.lock();
            q.due.iter().filter(|(_, t)| **t <= now).map(|(id, _)| *id).collect()
        };
        let mut deleted = 0;
        for id in due {
            if self.queue.lock().stop {
                break;
            }
            {
                // Under the pins lock (pins before queue), so a release in between cannot
                // queue it again before it leaves the queue here.
                let mut pins = self.pins.lock();
                if pins.keep_if_pinned(id) {
                    // A checkpoint names it: kept until no pin does.
                    self.queue.lock().due.remove(&id);
                    continue;
                }
            }
            let id = ExtentId(id);
            let name = object_name(id);
            match self.store.delete(&name) {
                Ok(()) => {
                    self.queue.lock().due.remove(&id.0);
                    self.counters.objects_deleted.fetch_add(1, Ordering::Relaxed);
                    deleted += 1;
                }
                Err(_) => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    let later = Instant::now() + self.grace.max(Duration::from_secs(1));
                    self.queue.lock().due.insert(id.0, later);
                }
            }
        }
        deleted
    }

    /// Makes sure the store belongs to the database `identity` (see `super::owner::claim`).
    pub(crate) fn claim(&self, identity: &[u8; 16]) -> Result<bool> {
        super::owner::claim(self.store.as_ref(), &self.retry, identity)
    }

    /// Lists the store and queues for deletion (after the grace period) every extent object
    /// that `live` does not name, no checkpoint pins and that is not queued already. Returns how many it queued.
    /// Called at open, before anything can be uploaded.
    pub(crate) fn reclaim_orphans(&self, live: &HashMap<u64, u64>) -> Result<usize> {
        let listed = self.request("list", ExtentId(OBJECT_ID_BIT), || self.store.list(EXTENT_PREFIX))?;
        let mut queued = 0;
        for info in listed {
            let Some(id) = parse_object_name(&info.name) else {
                continue;
            };
            let queued_already = self.queue.lock().due.contains_key(&id.0);
            let pinned = self.pins.lock().is_pinned(id.0);
            if live.contains_key(&id.0) || queued_already || pinned {
                continue;
            }
            self.enqueue(id, Instant::now() + self.grace);
            queued += 1;
        }
        self.counters.orphans_found.fetch_add(queued as u64, Ordering::Relaxed);
        Ok(queued)
    }

    /// Starts the tier's threads until [`Self::stop_threads`]: the collector, which deletes
    /// queued objects when they fall due, and the prefetcher, which reads whole the extents
    /// scans will reach next.
    pub(crate) fn start_threads(self: &Arc<Self>) -> Result<Vec<std::thread::JoinHandle<()>>> {
        let (a, b) = (self.clone(), self.clone());
        let collector = std::thread::Builder::new()
            .name("riptide-objects".into())
            .spawn(move || a.collect())
            .map_err(|e| Error::io("spawn", "riptide-objects thread", e))?;
        let prefetcher = std::thread::Builder::new()
            .name("riptide-prefetch".into())
            .spawn(move || b.prefetch_loop());
        match prefetcher {
            Ok(p) => Ok(vec![collector, p]),
            Err(e) => {
                self.stop_threads();
                let _ = collector.join();
                Err(Error::io("spawn", "riptide-prefetch thread", e))
            }
        }
    }

    /// Asks for extent `id` (`valid` bytes) to be read whole into the cache in the background,
    /// unless it is cached, cannot be, or the queue is full (a hint).
    pub(crate) fn prefetch_async(&self, id: ExtentId, valid: u64) {
        if self.cache.contains(id.0) || !self.fits_cache(valid) {
            return;
        }
        let mut p = self.prefetch.lock();
        if p.stop || p.pending.len() >= MAX_PREFETCH_PENDING || p.pending.iter().any(|(i, _)| *i == id) {
            return;
        }
        p.pending.push_back((id, valid));
        self.prefetch_wake.notify_one();
    }

    fn prefetch_loop(&self) {
        loop {
            let (id, valid) = {
                let mut p = self.prefetch.lock();
                loop {
                    if p.stop {
                        return;
                    }
                    if let Some(job) = p.pending.pop_front() {
                        break job;
                    }
                    self.prefetch_wake.wait(&mut p);
                }
            };
            if let Ok(true) = self.fetch_whole_with(id, valid, false) {
                self.counters.prefetches.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn collect(&self) {
        loop {
            {
                let mut q = self.queue.lock();
                if q.stop {
                    return;
                }
                let now = Instant::now();
                let next = q.due.values().min().copied();
                match next {
                    Some(t) if t <= now => {}
                    Some(t) => {
                        let wait = (t - now).min(Duration::from_secs(1));
                        self.wake.wait_for(&mut q, wait);
                        continue;
                    }
                    None => {
                        self.wake.wait_for(&mut q, Duration::from_secs(1));
                        continue;
                    }
                }
            }
            self.delete_due();
        }
    }

    /// Stops the collector and the prefetcher (queued objects not yet due stay in the store:
    /// the next open finds them as orphans).
    pub(crate) fn stop_threads(&self) {
        self.queue.lock().stop = true;
        self.wake.notify_all();
        self.prefetch.lock().stop = true;
        self.prefetch_wake.notify_all();
    }

    /// The counters.
    pub(crate) fn stats(&self) -> ObjectTierStats {
        let c = &self.counters;
        let (cache_extents, cache_bytes) = self.cache.usage();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ObjectTierStats {
            location: self.store.location(),
            objects_written: get(&c.objects_written),
            bytes_written: get(&c.bytes_written),
            range_reads: get(&c.range_reads),
            whole_reads: get(&c.whole_reads),
            bytes_read: get(&c.bytes_read),
            objects_deleted: get(&c.objects_deleted),
            pending_deletes: self.queue.lock().due.len() as u64,
            pinned_objects: self.pins.lock().len() as u64,
            orphans_found: get(&c.orphans_found),
            retries: get(&c.retries),
            errors: get(&c.errors),
            prefetches: get(&c.prefetches),
            cache_hits: get(&self.cache.hits),
            cache_misses: get(&self.cache.misses),
            cache_extents,
            cache_bytes,
            cache_capacity: self.cache.capacity(),
        }
    }
}

/// An object-tier extent seen as a file of `slots * EXTENT_SIZE` bytes (see the module
/// invariants). Read-only.
struct ObjectExtentFile {
    tier: Arc<ObjectTier>,
    id: ExtentId,
    /// Valid bytes (the object is `valid ‖ footer`).
    valid: u64,
    /// `slots * EXTENT_SIZE`: where the footer ends.
    end: u64,
    /// Ranged reads since the last whole read (see [`WHOLE_AFTER_RANGED_READS`]).
    ranged_reads: AtomicU32,
    /// The cached image, while the cache holds it (weak: eviction frees it).
    local: ArcSwapWeak<CachedImage>,
    /// Reads served through `local`.
    direct_hits: AtomicU32,
}

/// The object offset of a read of `len` bytes at extent offset `offset`, for an extent of
/// `valid` bytes whose footer ends at `end` (see the module invariants).
fn map_offset(valid: u64, end: u64, offset: u64, len: u64) -> io::Result<u64> {
    let footer_start = end.saturating_sub(FOOTER_SIZE as u64);
    if offset.checked_add(len).is_some_and(|e| e <= valid) {
        Ok(offset)
    } else if offset >= footer_start && offset.checked_add(len).is_some_and(|e| e <= end) {
        Ok(valid + (offset - footer_start))
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("read of {len} bytes at {offset} reaches outside the extent's valid bytes and footer"),
        ))
    }
}

impl ObjectExtentFile {
    fn map(&self, offset: u64, len: u64) -> io::Result<u64> {
        map_offset(self.valid, self.end, offset, len)
    }
}

/// A whole object image in memory, read at the extent's usual offsets (for verification).
pub(crate) struct ImageFile {
    image: Vec<u8>,
    valid: u64,
    end: u64,
}

impl ImageFile {
    /// The image of an extent of `valid` bytes and `slots` slots.
    pub(crate) fn new(image: Vec<u8>, valid: u64, slots: u32) -> Self {
        ImageFile {
            image,
            valid,
            end: u64::from(slots) * EXTENT_SIZE,
        }
    }
}

impl ReadableFile for ImageFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let at = map_offset(self.valid, self.end, offset, buf.len() as u64)?;
        let src = usize::try_from(at)
            .ok()
            .and_then(|a| self.image.get(a..a.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "object shorter than its metadata says"))?;
        buf.copy_from_slice(src);
        Ok(buf.len())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.end)
    }
}

impl ReadableFile for ObjectExtentFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let at = self.map(offset, buf.len() as u64)?;
        self.tier
            .read_object(self, buf, at)
            .map_err(|e| io::Error::other(ObjectReadError(e)))?;
        Ok(buf.len())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.end)
    }

    /// Fetches the whole object into the extent cache (scans and compactions read it all).
    fn prefetch(&self, _offset: u64, _len: u64) {
        let _ = self.tier.fetch_whole(self.id, self.valid);
    }
}

mod upload;

#[cfg(test)]
mod tests;
