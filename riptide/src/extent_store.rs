//! [`ExtentStore`]: reading extents through the table cache and the block cache, and releasing
//! extents no metadata can reach any more.
//!
//! Invariants:
//! - Every extent in memory is a [`LiveExtent`] with a `cache_id` unique for the life of the
//!   process. Cache keys use the `cache_id`, never the on-disk [`ExtentId`]: a slot freed and
//!   reused by a new extent can never be served from the old extent's cache entries. An extent
//!   re-linked between levels keeps its `LiveExtent` (and so its cache entries).
//! - An extent's slots go back to the free list only when its `LiveExtent` drops after being
//!   marked obsolete, i.e. when the last `LevelSet` (module `version`) naming it is gone.
//!   At shutdown nothing is marked obsolete, so nothing is freed.
//! - A point lookup that misses the block cache reads the whole block and caches it while the
//!   cache is less than 15/16 full; after that, a random one miss in [`POINT_FILL_ONE_IN`] does,
//!   and the others read just the block's tail and one restart region
//!   ([`crate::extent::PointRead`]), or, when that cannot answer, the whole block without
//!   caching it. With `partial_block_reads` off every miss fills.
//! - Pointer swizzling (seed 001): an open extent keeps, per data block, a weak reference to
//!   the block the cache holds; a read that finds it alive skips the cache's hash lookup and
//!   shard lock. The reference is weak, so an evicted block's memory is freed as before (the
//!   upgrade then fails and the read goes to the cache); extents are immutable and cache ids
//!   never reused, so a live referenced block is always the right one. One swizzled hit in
//!   [`SWIZZLED_TOUCH_ONE_IN`] per thread also looks the block up in the cache, so that the
//!   cache's policy still sees the block used. Swizzled hits count as block cache hits.
//! - Every data-block read through [`ExtentStore::block`] or [`ExtentStore::point_block`] counts
//!   towards the extent's temperature (sampled, one in [`TEMPERATURE_SAMPLE`] per thread):
//!   reads and scans, and the few block reads of compactions' cache refills and split
//!   planning; compactions' merges read extents directly and do not count.

use crate::cache::{BlockCache, BlockKey, CacheStats, StripedCounter, TableCache};
use crate::error::{Error, Result};
use crate::extent::{Block, ExtentReader, PointRead, PointScratch};
use crate::fs::ReadableFile;
use crate::meta::edit::ExtentMeta;
use crate::space::{ExtentId, ExtentSpace};
use crate::tier::{ObjectTier, Tier};
use arc_swap::ArcSwapWeak;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// One swizzled hit in this many (per thread) also looks the block up in the block cache.
pub(crate) const SWIZZLED_TOUCH_ONE_IN: u32 = 16;

thread_local! {
    static SWIZZLED_HITS: Cell<u32> = const { Cell::new(0) };
}

/// An extent reader with the file it reads from (what the table cache holds), and a weak
/// reference to each of its data blocks that the block cache holds (see the module header).
pub(crate) struct OpenExtent {
    pub(crate) reader: ExtentReader,
    pub(crate) file: Arc<dyn ReadableFile>,
    swizzled: Box<[ArcSwapWeak<Block>]>,
}

impl OpenExtent {
    pub(crate) fn new(reader: ExtentReader, file: Arc<dyn ReadableFile>) -> Self {
        let swizzled = (0..reader.index().len())
            .map(|_| ArcSwapWeak::new(Weak::new()))
            .collect();
        OpenExtent { reader, file, swizzled }
    }

    /// Block `i` if the reference to it is still alive.
    #[inline]
    fn swizzled(&self, i: usize) -> Option<Arc<Block>> {
        self.swizzled.get(i)?.load().upgrade()
    }

    /// Remembers the cached block `i`.
    fn swizzle(&self, i: usize, block: &Arc<Block>) {
        if let Some(slot) = self.swizzled.get(i) {
            slot.store(Arc::downgrade(block));
        }
    }
}

/// One extent named by metadata, shared by every level set that contains it.
pub(crate) struct LiveExtent {
    pub(crate) meta: ExtentMeta,
    pub(crate) id: ExtentId,
    pub(crate) cache_id: u64,
    /// The open reader, pinned once opened (index and filter stay in memory while the extent
    /// is live, like RocksDB with `max_open_files = -1`): point reads skip the table cache.
    open: std::sync::OnceLock<Arc<OpenExtent>>,
    obsolete: AtomicBool,
    store: Arc<ExtentStore>,
    /// Temperature: about one count per [`TEMPERATURE_SAMPLE`] data-block reads, halved by
    /// every major compaction of the table ([`LiveExtent::decay`]).
    reads: AtomicU32,
}

/// One data-block read in this many (per thread) counts towards an extent's temperature, so
/// the count costs a shared atomic add only rarely.
pub(crate) const TEMPERATURE_SAMPLE: u32 = 8;

/// An extent at or above this temperature counts as hot in the statistics.
pub(crate) const HOT_TEMPERATURE: u32 = 4;

thread_local! {
    static BLOCK_READS: Cell<u32> = const { Cell::new(0) };
}

impl std::fmt::Debug for LiveExtent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveExtent").field("id", &self.id).finish()
    }
}

impl LiveExtent {
    /// Marks the extent as removed from the metadata: its slots are freed when the last
    /// reference drops.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Counts a data-block read (sampled: see [`TEMPERATURE_SAMPLE`]).
    #[inline]
    pub(crate) fn touch(&self) {
        let sampled = BLOCK_READS.with(|n| {
            let v = n.get().wrapping_add(1);
            n.set(v);
            v.is_multiple_of(TEMPERATURE_SAMPLE)
        });
        if sampled {
            // Saturating: a table that is only read never decays.
            let _ = self
                .reads
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_add(1));
        }
    }

    /// The extent's temperature: sampled reads, decayed.
    pub(crate) fn temperature(&self) -> u32 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Raises the temperature to at least `t` (an extent a compaction wrote takes the
    /// temperature of the inputs it replaces).
    pub(crate) fn warm_to(&self, t: u32) {
        self.reads.fetch_max(t, Ordering::Relaxed);
    }

    /// Halves the temperature (each major compaction of the table does), so it follows recent
    /// reads.
    pub(crate) fn decay(&self) {
        let _ = self
            .reads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| Some(r / 2));
    }

    /// The extent's user-key range check: might `user_key` be inside?
    pub(crate) fn user_range_contains(&self, user_key: &[u8]) -> bool {
        let lo = user_part(&self.meta.smallest);
        let hi = user_part(&self.meta.largest);
        lo <= user_key && user_key <= hi
    }
}

/// True if `tail` (the last bytes of a slot) starts like an extent footer (for reporting
/// extents that no metadata owns).
pub(crate) fn looks_like_footer(tail: &[u8]) -> bool {
    tail.len() >= 8 && tail[..8] == crate::extent::EXTENT_MAGIC.to_le_bytes()
}

/// The user key of an internal key (the whole slice if malformed).
pub(crate) fn user_part(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(8)]
}

impl Drop for LiveExtent {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.store.release(self);
        }
    }
}

/// Once the block cache is full, one point-lookup miss in this many reads and caches the whole
/// block: often enough that hot blocks get in after a few misses, rare enough that a cache
/// too small for the working set does not churn (each churned fill copies and checksums a
/// whole block and evicts another that was rarely hit again).
pub(crate) const POINT_FILL_ONE_IN: u32 = 8;

thread_local! {
    /// Buffers of this thread's partial block reads.
    static POINT_SCRATCH: std::cell::RefCell<PointScratch> = std::cell::RefCell::new(PointScratch::default());
    /// This thread's point-lookup misses and random state (see `point_miss_fills`).
    static POINT_MISSES: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A thread's point-lookup misses between two looks at the block cache's occupancy.
const OCCUPANCY_CHECK_EVERY: u64 = 64;

/// Counters of the read path's caches.
#[derive(Debug, Clone, Default)]
pub struct CacheCounters {
    /// The block cache.
    pub block_cache: CacheStats,
    /// The table cache (open extent readers).
    pub table_cache: CacheStats,
    /// The row cache.
    pub row_cache: CacheStats,
    /// Point lookups that missed the block cache and read only a block's tail and one restart
    /// region instead of the whole block.
    pub partial_block_reads: u64,
    /// Block reads served through an open extent's reference to its cached block, without a
    /// block cache lookup (also counted as block cache hits).
    pub swizzled_block_hits: u64,
}

/// Extent space (and the object tier, if any) plus the caches that read them.
pub(crate) struct ExtentStore {
    pub(crate) space: Arc<ExtentSpace>,
    /// The object tier, where extents with [`ExtentId::is_object`] live.
    pub(crate) objects: Option<Arc<ObjectTier>>,
    pub(crate) blocks: BlockCache<Block>,
    pub(crate) readers: TableCache<OpenExtent>,
    next_cache_id: AtomicU64,
    /// Extents freed since open (for statistics and tests).
    pub(crate) freed: AtomicU64,
    /// Point lookups may read part of a block instead of filling the cache.
    partial_reads: bool,
    /// Whether the block cache was at least 15/16 full when last looked at.
    block_cache_full: AtomicBool,
    /// Partial block reads since open.
    pub(crate) partial_block_reads: StripedCounter,
    /// Reads take cached blocks through the extents' weak references first.
    swizzling: bool,
    /// Block reads served through those references since open.
    pub(crate) swizzled_block_hits: StripedCounter,
}

impl ExtentStore {
    pub(crate) fn new(space: Arc<ExtentSpace>, block_cache_bytes: usize, table_cache_entries: usize) -> Self {
        ExtentStore {
            space,
            objects: None,
            blocks: BlockCache::new(block_cache_bytes),
            readers: TableCache::new(table_cache_entries),
            next_cache_id: AtomicU64::new(1),
            freed: AtomicU64::new(0),
            partial_reads: true,
            block_cache_full: AtomicBool::new(false),
            partial_block_reads: StripedCounter::default(),
            swizzling: true,
            swizzled_block_hits: StripedCounter::default(),
        }
    }

    /// Puts extents with [`ExtentId::is_object`] in `tier`.
    pub(crate) fn with_objects(mut self, tier: Option<Arc<ObjectTier>>) -> Self {
        self.objects = tier;
        self
    }

    /// The object tier, or an error naming `what` needs it.
    fn object_tier(&self, what: ExtentId) -> Result<&Arc<ObjectTier>> {
        self.objects.as_ref().ok_or_else(|| Error::InvalidOption {
            option: "object_store",
            reason: format!("extent {what} lives in the object tier, and no object store is configured"),
        })
    }

    /// Allocates a new extent of `slots` slots in `tier`.
    pub(crate) fn allocate(&self, slots: u32, tier: Tier) -> Result<ExtentId> {
        match tier {
            Tier::Local => self.space.allocate(slots),
            Tier::Object => Ok(self.object_tier(ExtentId(crate::space::OBJECT_ID_BIT))?.allocate()),
        }
    }

    /// Writes an allocated extent's bytes (`valid` at its start, `footer` at its end). A local
    /// extent is durable after [`Self::sync`]; an object-tier extent when this returns.
    pub(crate) fn write_extent(&self, id: ExtentId, slots: u32, valid: &[u8], footer: &[u8]) -> Result<()> {
        if id.is_object() {
            return self.object_tier(id)?.upload(id, valid, footer);
        }
        self.space.write_extent(id, slots, valid, footer)
    }

    /// Makes the written local extents among `ids` durable (object-tier extents already are).
    pub(crate) fn sync(&self, ids: &[ExtentId]) -> Result<()> {
        let local: Vec<ExtentId> = ids.iter().copied().filter(|id| !id.is_object()).collect();
        self.space.sync(&local)
    }

    /// Gives back an extent that was allocated (maybe written) but never named by metadata.
    pub(crate) fn discard(&self, id: ExtentId, slots: u32) {
        if id.is_object() {
            if let Some(t) = &self.objects {
                t.discard(id);
            }
        } else {
            self.space.free(id, slots);
        }
    }

    /// The file, path and base offset to read extent `e` at.
    pub(crate) fn locate(&self, e: &LiveExtent) -> Result<(Arc<dyn ReadableFile>, PathBuf, u64)> {
        if e.id.is_object() {
            let tier = self.object_tier(e.id)?;
            return Ok((
                tier.file(e.id, e.meta.data_size, e.meta.slots),
                PathBuf::from(tier.url(e.id)),
                0,
            ));
        }
        let (file, path, base) = self.space.locate(e.id)?;
        Ok((file, path, base))
    }

    /// Extent `e` is being scanned: an object-tier extent is read whole into the extent cache
    /// (once), so the scan's block reads are local. Only a hint: a failure here surfaces on the
    /// block read that follows.
    pub(crate) fn scanning(&self, e: &LiveExtent) {
        if let (true, Some(tier)) = (e.id.is_object(), &self.objects) {
            let _ = tier.fetch_whole(e.id, e.meta.data_size);
        }
    }

    /// A scan will reach extent `e` soon: an object-tier extent is read whole into the extent
    /// cache in the background (a hint).
    pub(crate) fn prefetch_ahead(&self, e: &LiveExtent) {
        if let (true, Some(tier)) = (e.id.is_object(), &self.objects) {
            tier.prefetch_async(e.id, e.meta.data_size);
        }
    }

    /// Turns pointer swizzling of cached blocks on or off (on by default).
    pub(crate) fn with_swizzling(mut self, on: bool) -> Self {
        self.swizzling = on;
        self
    }

    /// Block `i` of `open` through its swizzled reference, if on and alive.
    #[inline]
    fn swizzled(&self, open: &OpenExtent, key: &BlockKey, i: usize) -> Option<Arc<Block>> {
        if !self.swizzling {
            return None;
        }
        let block = open.swizzled(i)?;
        self.blocks.count_hit();
        self.swizzled_block_hits.add(1);
        let touch = SWIZZLED_HITS.with(|n| {
            let v = n.get().wrapping_add(1);
            n.set(v);
            v % SWIZZLED_TOUCH_ONE_IN == 0
        });
        if touch {
            self.blocks.touch(key);
        }
        Some(block)
    }

    /// Block `i` of `open` from the block cache (swizzling it on a hit).
    #[inline]
    fn cached(&self, open: &OpenExtent, key: &BlockKey, i: usize) -> Option<Arc<Block>> {
        let block = self.blocks.get(key)?;
        if self.swizzling {
            open.swizzle(i, &block);
        }
        Some(block)
    }

    /// Caches block `i` of `open`.
    fn fill(&self, open: &OpenExtent, key: BlockKey, i: usize, block: &Arc<Block>) {
        self.blocks.insert(key, block.clone(), block.size());
        if self.swizzling && self.blocks.enabled() {
            open.swizzle(i, block);
        }
    }

    /// Turns partial block reads of point lookups on or off (on by default).
    pub(crate) fn with_partial_reads(mut self, on: bool) -> Self {
        self.partial_reads = on;
        self
    }

    /// Wraps metadata of an extent that exists on disk.
    pub(crate) fn live(self: &Arc<Self>, meta: ExtentMeta) -> Arc<LiveExtent> {
        Arc::new(LiveExtent {
            id: ExtentId(meta.id),
            meta,
            cache_id: self.next_cache_id.fetch_add(1, Ordering::Relaxed),
            open: std::sync::OnceLock::new(),
            obsolete: AtomicBool::new(false),
            store: self.clone(),
            reads: AtomicU32::new(0),
        })
    }

    /// The open reader of `e`: pinned in the extent once opened; the first open goes through
    /// the table cache, which opens each extent once even under concurrent misses.
    pub(crate) fn open<'a>(&self, e: &'a LiveExtent) -> Result<&'a Arc<OpenExtent>> {
        if let Some(open) = e.open.get() {
            return Ok(open);
        }
        let open = self.readers.get_or_try_insert_with(e.cache_id, || {
            let (file, path, base) = self.locate(e)?;
            let reader = ExtentReader::open(file.as_ref(), &path, base, e.meta.slots)?;
            Ok(Arc::new(OpenExtent::new(reader, file)))
        })?;
        Ok(e.open.get_or_init(|| open))
    }

    /// The open reader of `e` if it is already open (never does I/O).
    #[inline]
    pub(crate) fn open_if_ready<'a>(&self, e: &'a LiveExtent) -> Option<&'a Arc<OpenExtent>> {
        e.open.get()
    }

    /// Data block `i` of `e` (through the block cache).
    pub(crate) fn block(&self, e: &LiveExtent, open: &OpenExtent, i: usize) -> Result<Arc<Block>> {
        e.touch();
        let Some(offset) = open.reader.block_offset(i) else {
            // Out of range: `read_block` reports it as an error.
            return Ok(Arc::new(open.reader.read_block(open.file.as_ref(), i)?));
        };
        let key = BlockKey {
            extent: e.cache_id,
            offset,
        };
        if let Some(b) = self.swizzled(open, &key, i).or_else(|| self.cached(open, &key, i)) {
            return Ok(b);
        }
        let block = Arc::new(open.reader.read_block(open.file.as_ref(), i)?);
        self.fill(open, key, i, &block);
        Ok(block)
    }

    /// Whether a point lookup that missed the block cache should cache the whole block (see the
    /// module invariants). The cache counts as full from 15/16 of its capacity; its occupancy is
    /// looked at every [`OCCUPANCY_CHECK_EVERY`] misses of a thread (summing the shards is not
    /// free), and the sampled fills are random, so no pattern of misses always or never fills.
    fn point_miss_fills(&self) -> bool {
        if !self.partial_reads {
            return true;
        }
        if !self.blocks.enabled() {
            return false;
        }
        let (check, sampled) = POINT_MISSES.with(|m| {
            let (n, rng) = m.get();
            // xorshift64: a cheap per-thread random stream, seeded by the address of this
            // thread's cell (never 0 once seeded).
            let mut x = if rng == 0 {
                ((m as *const _ as u64) << 1) | 1
            } else {
                rng
            };
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            m.set((n.wrapping_add(1), x));
            (n % OCCUPANCY_CHECK_EVERY == 0, x % u64::from(POINT_FILL_ONE_IN) == 0)
        });
        if check {
            let (usage, capacity) = (self.blocks.usage(), self.blocks.capacity());
            self.block_cache_full
                .store(usage >= capacity - capacity / 16, Ordering::Relaxed);
        }
        !self.block_cache_full.load(Ordering::Relaxed) || sampled
    }

    /// Data block `i` of `e` for a point lookup of `seek` (user key hash `hash`): the cached
    /// block, or the whole block read (and cached if [`Self::point_miss_fills`] says so), or a
    /// partial read whose found entry `with_scratch` sees. `with_scratch` runs at most once,
    /// with the outcome of a partial read and this thread's scratch.
    pub(crate) fn point_block<R>(
        &self,
        e: &LiveExtent,
        open: &OpenExtent,
        i: usize,
        seek: &[u8],
        hash: u64,
        with_scratch: impl FnOnce(PointRead, &PointScratch) -> Result<R>,
    ) -> Result<std::result::Result<R, Arc<Block>>> {
        e.touch();
        let Some(offset) = open.reader.block_offset(i) else {
            return Ok(Err(Arc::new(open.reader.read_block(open.file.as_ref(), i)?)));
        };
        let key = BlockKey {
            extent: e.cache_id,
            offset,
        };
        if let Some(b) = self.swizzled(open, &key, i).or_else(|| self.cached(open, &key, i)) {
            return Ok(Err(b));
        }
        let fill = self.point_miss_fills();
        if !fill {
            let mut with_scratch = Some(with_scratch);
            let mut partial = |scratch: &mut PointScratch| -> Result<Option<R>> {
                match open.reader.point_read(open.file.as_ref(), i, seek, hash, scratch)? {
                    PointRead::NeedFull => Ok(None),
                    found => {
                        self.partial_block_reads.add(1);
                        match with_scratch.take() {
                            Some(f) => f(found, scratch).map(Some),
                            None => Ok(None),
                        }
                    }
                }
            };
            // A nested lookup on this thread (none today), or one during thread teardown, gets
            // a scratch of its own.
            let answer = match POINT_SCRATCH.try_with(|cell| cell.try_borrow_mut().ok().map(|mut s| partial(&mut s))) {
                Ok(Some(r)) => r,
                _ => partial(&mut PointScratch::default()),
            }?;
            if let Some(r) = answer {
                return Ok(Ok(r));
            }
        }
        let block = Arc::new(open.reader.read_block(open.file.as_ref(), i)?);
        if fill {
            self.fill(open, key, i, &block);
        }
        Ok(Err(block))
    }

    fn release(&self, e: &LiveExtent) {
        if let Some(open) = e.open.get() {
            for entry in open.reader.index() {
                self.blocks.remove(&BlockKey {
                    extent: e.cache_id,
                    offset: entry.offset,
                });
            }
        }
        self.readers.remove(e.cache_id);
        if e.id.is_object() {
            if let Some(t) = &self.objects {
                t.retire(e.id);
            }
        } else {
            self.space.free(e.id, e.meta.slots);
        }
        self.freed.fetch_add(1, Ordering::Relaxed);
    }
}
