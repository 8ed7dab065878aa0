//! Tests of the extent space, mostly on [`FaultFs`] (files live in RAM: keep extents few).

use super::header::{HEADER_COPY_OFFSETS, HEADER_SIZE};
use super::*;
use crate::error::Result;
use crate::fs::{CrashMode, FaultFs, FaultOp, PosixFs, ReadableFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashSet};

const E: u64 = EXTENT_SIZE;
const MAGIC: &[u8; 8] = b"TESTFOOT";

fn db() -> &'static Path {
    Path::new("/db")
}

fn data(name: &str) -> PathBuf {
    Path::new("/db/data").join(name)
}

fn opts(extents_per_file: u32) -> SpaceOptions {
    SpaceOptions {
        extents_per_file,
        watch_readers: false,
    }
}

/// A test footer: the id, then the magic, so it ends with the magic.
fn footer(id: ExtentId) -> Vec<u8> {
    let mut f = id.0.to_le_bytes().to_vec();
    f.extend_from_slice(MAGIC);
    f
}

fn looks(b: &[u8]) -> bool {
    b.ends_with(MAGIC)
}

fn open(fs: &FaultFs, epf: u32) -> Result<ExtentSpace> {
    ExtentSpace::open(Arc::new(fs.clone()), db(), opts(epf))
}

/// A fresh FaultFs with `/db` and a recovered, empty space.
fn setup(epf: u32) -> (FaultFs, ExtentSpace) {
    let fs = FaultFs::new();
    fs.create_dir_all(db()).unwrap();
    let space = open(&fs, epf).unwrap();
    let report = space.finish_recovery(&looks).unwrap();
    assert_eq!(
        report,
        RecoveryReport {
            files: 0,
            used_slots: 0,
            free_slots: 0,
            unowned_with_data: vec![]
        }
    );
    (fs, space)
}

fn id(file: u32, slot: u32) -> ExtentId {
    ExtentId::new(file, slot)
}

fn alloc_n(space: &ExtentSpace, n: usize) -> Vec<ExtentId> {
    (0..n).map(|_| space.allocate(1).unwrap()).collect()
}

fn names(fs: &FaultFs) -> Vec<String> {
    let mut v = fs.list_dir(Path::new("/db/data")).unwrap();
    v.sort();
    v
}

fn read_at(space: &ExtentSpace, id: ExtentId, rel: u64, len: usize) -> Vec<u8> {
    let (file, _, off) = space.locate(id).unwrap();
    let r: Arc<dyn ReadableFile> = file;
    let mut buf = vec![0u8; len];
    assert_eq!(r.read_at(&mut buf, off + rel).unwrap(), len);
    buf
}

#[test]
fn extent_id_parts_and_display() {
    let x = ExtentId::new(0x5ead_beef, 42);
    assert_eq!(x.file(), 0x5ead_beef);
    assert_eq!(x.slot(), 42);
    assert_eq!(x.0, 0x5ead_beef_0000_002a);
    assert_eq!(x.to_string(), format!("{}.42", 0x5ead_beefu32));
    assert!(!x.is_object());
    let o = ExtentId(super::OBJECT_ID_BIT | 0xabc);
    assert!(o.is_object());
    assert_eq!(o.to_string(), "object 8000000000000abc");
    // Data-file names that would collide with object ids are not data files.
    assert!(is_data_file_name("2147483647.dat"));
    assert!(!is_data_file_name("2147483648.dat"));
    assert!(ExtentId::new(1, 9) < ExtentId::new(2, 1));
    assert_eq!(SpaceOptions::default().extents_per_file, 5120);
}

#[test]
fn allocation_packs_toward_the_front() {
    let (fs, space) = setup(8);
    let ids = alloc_n(&space, 9);
    let want: Vec<_> = (1..8).map(|s| id(1, s)).chain([id(2, 1), id(2, 2)]).collect();
    assert_eq!(ids, want);
    assert_eq!(names(&fs), ["000001.dat", "000002.dat"]);
    // Files grow slot by slot.
    assert_eq!(fs.read_file(&data("000001.dat")).unwrap().len() as u64, 8 * E);
    assert_eq!(fs.read_file(&data("000002.dat")).unwrap().len() as u64, 3 * E);
    let st = space.stats();
    assert_eq!(
        st,
        SpaceStats {
            files: 2,
            total_slots: 9,
            used_slots: 9,
            held_slots: 0,
            free_slots: 0,
            unpunched_slots: 0,
            file_bytes: 11 * E
        }
    );
    // Freed slots are reused lowest first, before any later file's slots.
    space.free(id(1, 5), 1);
    space.free(id(1, 3), 1);
    space.free(id(2, 1), 1);
    assert_eq!(space.stats().free_slots, 3);
    assert_eq!(alloc_n(&space, 4), [id(1, 3), id(1, 5), id(2, 1), id(2, 3)]);
    // Ignored: not allocated, wrong size, unknown file.
    space.free(id(1, 3), 2);
    space.free(id(2, 6), 1);
    space.free(id(9, 1), 1);
    assert_eq!(space.stats().used_slots, 10);
    assert_eq!(space.data_files(), [(1, data("000001.dat")), (2, data("000002.dat"))]);
    assert!(format!("{space:?}").contains("used_slots: 10"));
}

#[test]
fn multi_slot_allocation() {
    let (fs, space) = setup(8);
    assert_eq!(alloc_n(&space, 3), [id(1, 1), id(1, 2), id(1, 3)]);
    space.free(id(1, 2), 1);
    // A one-slot hole is too small for two slots.
    assert_eq!(space.allocate(2).unwrap(), id(1, 4));
    assert_eq!(space.allocate(1).unwrap(), id(1, 2));
    // Slots 6 and 7 are free but three are needed: the next file.
    assert_eq!(space.allocate(3).unwrap(), id(2, 1));
    // Longer than a whole file of 8: a file of its own size.
    assert_eq!(space.allocate(10).unwrap(), id(3, 1));
    assert_eq!(fs.read_file(&data("000003.dat")).unwrap().len() as u64, 11 * E);
    assert_eq!(space.allocate(2).unwrap(), id(1, 6));
    assert_eq!(space.allocate(4).unwrap(), id(2, 4));
    assert_eq!(space.allocate(1).unwrap(), id(4, 1));
    // The big file serves ordinary allocations once freed, in order.
    space.free(id(3, 1), 10);
    assert_eq!(space.allocate(1).unwrap(), id(3, 1));
    assert_eq!(space.allocate(9).unwrap(), id(3, 2));
    assert_eq!(space.allocate(1).unwrap(), id(4, 2));
    assert!(space.allocate(0).is_err());
    let st = space.stats();
    assert_eq!(st.used_slots, 3 + 2 + 3 + 2 + 4 + 1 + 1 + 9 + 1);
}

#[test]
fn write_extent_locate_and_free_zeroes_footer() {
    let (fs, space) = setup(8);
    let a = space.allocate(1).unwrap();
    let b = space.allocate(2).unwrap();
    space.write_extent(a, 1, b"first", &footer(a)).unwrap();
    space.write_extent(b, 2, b"second", &footer(b)).unwrap();
    // Each write starts the writeback of exactly its extent's slots (not waiting for it; the
    // handle is the one that created the file, under its temporary name).
    let hints: Vec<(u64, u64)> = fs.writebacks().into_iter().map(|(_, off, len)| (off, len)).collect();
    assert_eq!(hints, [(E, E), (2 * E, 2 * E)]);
    space.sync(&[a, b, a]).unwrap();
    assert_eq!(read_at(&space, a, 0, 5), b"first");
    assert_eq!(read_at(&space, b, 0, 6), b"second");
    assert_eq!(read_at(&space, a, E - 16, 16), footer(a));
    assert_eq!(read_at(&space, b, 2 * E - 16, 16), footer(b));
    let (_, path, off) = space.locate(b).unwrap();
    assert_eq!((path, off), (data("000001.dat"), 2 * E));
    // Misuse is an error, not a panic.
    let big = vec![0u8; E as usize];
    assert!(space.write_extent(a, 1, &big, b"x").is_err());
    assert!(space.write_extent(a, 2, b"", b"").is_err());
    assert!(space.write_extent(id(1, 6), 1, b"", b"").is_err());
    assert!(space.sync(&[id(7, 1)]).is_err());
    assert!(space.locate(id(7, 1)).err().unwrap().is_corruption());
    assert!(space.locate(id(1, 0)).err().unwrap().is_corruption());
    assert!(space.locate(id(1, 8)).err().unwrap().is_corruption());
    space.free(b, 2);
    assert_eq!(read_at(&space, b, 2 * E - 64, 64), [0u8; 64]);
    assert_eq!(read_at(&space, b, 0, 6), b"second");
    assert!(space.write_extent(b, 2, b"", b"").is_err());
}

#[test]
fn recovery_refuses_allocation_and_misuse() {
    let (fs, space) = setup(8);
    alloc_n(&space, 3);
    space.sync(&[id(1, 1)]).unwrap();
    assert!(space.reference(id(1, 1), 1).is_err());
    assert!(space.finish_recovery(&looks).is_err());
    drop(space);
    let space = open(&fs, 8).unwrap();
    assert!(space.allocate(1).is_err());
    assert!(space.shrink().is_err());
    space.finish_recovery(&looks).unwrap();
    assert_eq!(space.allocate(1).unwrap(), id(1, 1));
    assert!(matches!(
        ExtentSpace::open(Arc::new(fs.clone()), db(), opts(1)),
        Err(Error::InvalidOption {
            option: "extents_per_file",
            ..
        })
    ));
}

#[test]
fn bad_references_are_corruption() {
    let (fs, space) = setup(8);
    alloc_n(&space, 6);
    space.sync(&[id(1, 1)]).unwrap();
    drop(space);
    let space = open(&fs, 8).unwrap();
    let corrupt = |id: ExtentId, slots: u32| {
        let e = space.reference(id, slots).unwrap_err();
        assert!(e.is_corruption(), "{id} x{slots}: {e}");
        e
    };
    corrupt(id(2, 1), 1); // no such file
    corrupt(id(1, 0), 1); // header slot
    corrupt(id(1, 6), 2); // past the file's length (7 slots)
    corrupt(id(1, 7), 1);
    corrupt(id(1, 1), 0);
    space.reference(id(1, 2), 2).unwrap();
    space.reference(id(1, 5), 1).unwrap();
    let e = corrupt(id(1, 3), 1); // inside 1.2
    assert!(e.to_string().contains("overlaps extent 1.2"), "{e}");
    corrupt(id(1, 1), 2); // runs into 1.2
    corrupt(id(1, 4), 2); // runs into 1.5
    corrupt(id(1, 2), 1); // the same start
    corrupt(id(1, 1), 5); // covers both
    space.reference(id(1, 1), 1).unwrap();
    space.reference(id(1, 4), 1).unwrap();
    let r = space.finish_recovery(&looks).unwrap();
    assert_eq!((r.files, r.used_slots, r.free_slots), (1, 5, 1));
    assert_eq!(space.allocate(1).unwrap(), id(1, 6));
    assert_eq!(space.allocate(1).unwrap(), id(1, 7));
}

/// The expected allocator: the lowest file with a free run of `n`, the lowest such run.
#[derive(Default, Clone)]
struct Model {
    /// file -> (max slots, used slots)
    files: BTreeMap<u32, (u32, BTreeSet<u32>)>,
    next_file: u32,
}

impl Model {
    fn new() -> Self {
        Model {
            files: BTreeMap::new(),
            next_file: 1,
        }
    }

    fn allocate(&mut self, n: u32, epf: u32) -> ExtentId {
        for (&f, (max, used)) in &mut self.files {
            if let Some(s) = (1..*max).find(|&s| s + n <= *max && (s..s + n).all(|x| !used.contains(&x))) {
                used.extend(s..s + n);
                return id(f, s);
            }
        }
        let f = self.next_file;
        self.next_file += 1;
        self.files.insert(f, ((n + 1).max(epf), (1..=n).collect()));
        id(f, 1)
    }

    fn free(&mut self, x: ExtentId, n: u32) {
        let used = &mut self.files.get_mut(&x.file()).unwrap().1;
        for s in x.slot()..x.slot() + n {
            assert!(used.remove(&s));
        }
    }

    fn used(&self) -> u64 {
        self.files.values().map(|(_, u)| u.len() as u64).sum()
    }
}

#[test]
fn randomized_against_model_with_crash_recovery() {
    for seed in 0..6u64 {
        let epf = 6;
        let mut rng = StdRng::seed_from_u64(seed);
        let (fs, mut space) = setup(epf);
        let mut model = Model::new();
        let mut live: Vec<(ExtentId, u32)> = Vec::new();
        for step in 0..200 {
            let r = rng.random_range(0..100);
            if r < 45 && live.len() < 12 {
                let n = if rng.random_range(0..8) == 0 {
                    rng.random_range(2..=7)
                } else {
                    1
                };
                let x = space.allocate(n).unwrap();
                assert_eq!(x, model.allocate(n, epf), "seed {seed} step {step}");
                space.write_extent(x, n, &x.0.to_le_bytes(), &footer(x)).unwrap();
                live.push((x, n));
            } else if r < 85 && !live.is_empty() {
                let (x, n) = live.swap_remove(rng.random_range(0..live.len()));
                space.free(x, n);
                model.free(x, n);
            } else if r < 92 {
                // Crash and recover. Live extents are synced first (as a flush does before
                // metadata names them); one extra extent may leak: written, synced, unnamed.
                let leak = if rng.random_bool(0.5) {
                    let x = space.allocate(1).unwrap();
                    assert_eq!(x, model.allocate(1, epf));
                    space.write_extent(x, 1, b"leak", &footer(x)).unwrap();
                    space.sync(&[x]).unwrap();
                    model.free(x, 1);
                    Some(x)
                } else {
                    None
                };
                let ids: Vec<_> = live.iter().map(|l| l.0).collect();
                space.sync(&ids).unwrap();
                drop(space);
                let mode = if rng.random_bool(0.5) {
                    CrashMode::DropUnsynced
                } else {
                    CrashMode::KeepRandomPrefix { seed: step }
                };
                fs.crash(mode);
                space = open(&fs, epf).unwrap();
                for &(x, n) in &live {
                    space.reference(x, n).unwrap();
                }
                let report = space.finish_recovery(&looks).unwrap();
                assert_eq!(report.used_slots, model.used());
                assert_eq!(report.files, model.files.len());
                if let Some(x) = leak {
                    assert!(report.unowned_with_data.contains(&x), "{x} not reported");
                }
                for x in &report.unowned_with_data {
                    assert!(live
                        .iter()
                        .all(|&(l, n)| l.file() != x.file() || x.slot() < l.slot() || x.slot() >= l.slot() + n));
                }
                for &(x, n) in &live {
                    assert_eq!(read_at(&space, x, 0, 8), x.0.to_le_bytes());
                    assert_eq!(read_at(&space, x, u64::from(n) * E - 16, 16), footer(x));
                }
            }
            if (92..97).contains(&r) {
                // Give back the blocks of free slots beyond a reserve: never a live extent's.
                let keep = rng.random_range(0..4);
                space.punch_free_slots(keep);
                assert!(space.stats().unpunched_slots <= keep, "seed {seed} step {step}");
                for &(x, n) in &live {
                    assert_eq!(read_at(&space, x, 0, 8), x.0.to_le_bytes(), "seed {seed} step {step}");
                    assert_eq!(read_at(&space, x, u64::from(n) * E - 16, 16), footer(x));
                }
            }
            let st = space.stats();
            assert_eq!(st.used_slots, model.used(), "seed {seed} step {step}");
            assert_eq!(st.used_slots + st.free_slots, st.total_slots);
            assert!(st.unpunched_slots <= st.free_slots);
        }
    }
}

#[test]
fn freed_slots_keep_their_blocks_until_punched_beyond_the_reserve() {
    let (fs, space) = setup(16);
    let ids = alloc_n(&space, 7);
    for &x in &ids {
        space.write_extent(x, 1, &x.0.to_le_bytes(), &footer(x)).unwrap();
    }
    // Fresh slots hold nothing in their gaps: no hole punched.
    assert!(fs.punches().is_empty());
    // Freeing does no hole punching: the slot keeps its bytes (but not its footer).
    for slot in [2, 3, 4, 6, 7] {
        space.free(id(1, slot), 1);
    }
    assert!(fs.punches().is_empty());
    assert_eq!(space.stats().unpunched_slots, 5);
    assert_eq!(read_at(&space, id(1, 4), 0, 8), id(1, 4).0.to_le_bytes());
    assert_eq!(read_at(&space, id(1, 4), E - 64, 64), [0u8; 64]);
    // Reusing a slot overwrites its blocks: it is no longer counted. Its gap, beyond what the
    // new extent writes, is punched by the write (from the page after its 8 valid bytes to the
    // page of its footer, never either of them).
    assert_eq!(space.allocate(1).unwrap(), id(1, 2));
    assert_eq!(space.stats().unpunched_slots, 4);
    space
        .write_extent(id(1, 2), 1, &id(1, 2).0.to_le_bytes(), &footer(id(1, 2)))
        .unwrap();
    let gaps: Vec<(u64, u64)> = fs.punches().into_iter().map(|(_, off, len)| (off, len)).collect();
    assert_eq!(gaps, [(2 * E + 4096, E - 2 * 4096)]);
    assert_eq!(read_at(&space, id(1, 2), 0, 8), id(1, 2).0.to_le_bytes());
    assert_eq!(read_at(&space, id(1, 2), E - 16, 16), footer(id(1, 2)));
    let writes = gaps.len();
    // Keep 1: the highest go first, consecutive slots in one call.
    assert_eq!(space.punch_free_slots(1), 3);
    // (The handle is the one that created the file, under its temporary name.)
    let punched: Vec<(u64, u64)> = fs
        .punches()
        .into_iter()
        .skip(writes)
        .map(|(_, off, len)| (off, len))
        .collect();
    assert_eq!(punched, [(6 * E, 2 * E), (4 * E, E)]);
    assert_eq!(space.stats().unpunched_slots, 1);
    assert_eq!(read_at(&space, id(1, 4), 0, 8), [0u8; 8]);
    assert_eq!(read_at(&space, id(1, 3), 0, 8), id(1, 3).0.to_le_bytes());
    assert_eq!(
        read_at(&space, id(1, 5), 0, 8),
        id(1, 5).0.to_le_bytes(),
        "a live neighbour is untouched"
    );
    // Punched slots are free again, lowest first; a second call has nothing to do.
    assert_eq!(space.punch_free_slots(1), 0);
    assert_eq!(space.allocate(1).unwrap(), id(1, 3));
    assert_eq!(space.allocate(1).unwrap(), id(1, 4));
    assert_eq!(space.stats().unpunched_slots, 0);
    assert_eq!(space.stats().free_slots, 2);
    // A crash may leave anything in a free slot: recovery counts every free slot inside the
    // file as holding blocks, so they get punched too.
    space.sync(&[id(1, 1)]).unwrap();
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    let space = open(&fs, 16).unwrap();
    space.reference(id(1, 1), 1).unwrap();
    let r = space.finish_recovery(&looks).unwrap();
    assert_eq!(space.stats().unpunched_slots, r.free_slots);
    assert_eq!(space.punch_free_slots(0), r.free_slots);
    assert_eq!(space.stats().unpunched_slots, 0);
}

#[test]
fn reopen_rebuilds_exactly() {
    let (fs, space) = setup(8);
    let ids = alloc_n(&space, 12);
    let big = space.allocate(3).unwrap();
    for &x in &ids {
        space.write_extent(x, 1, b"v", &footer(x)).unwrap();
    }
    for &x in ids.iter().step_by(2) {
        space.free(x, 1);
    }
    space.sync(&ids).unwrap();
    space.sync(&[big]).unwrap();
    let before = space.stats();
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    let space = open(&fs, 8).unwrap();
    for &x in ids.iter().skip(1).step_by(2) {
        space.reference(x, 1).unwrap();
    }
    space.reference(big, 3).unwrap();
    let report = space.finish_recovery(&looks).unwrap();
    // Freed extents had their footers zeroed: nothing looks leaked.
    assert_eq!(
        report,
        RecoveryReport {
            files: 3,
            used_slots: 9,
            free_slots: 6,
            unowned_with_data: vec![]
        }
    );
    assert_eq!(space.stats(), before);
    let again: Vec<_> = (0..7).map(|_| space.allocate(1).unwrap()).collect();
    assert_eq!(
        again,
        [id(1, 1), id(1, 3), id(1, 5), id(1, 7), id(2, 2), id(2, 4), id(2, 6)]
    );
}

#[test]
fn unsynced_growth_and_unreferenced_extents_after_crash() {
    let (fs, space) = setup(8);
    let a = space.allocate(1).unwrap();
    space.write_extent(a, 1, b"a", &footer(a)).unwrap();
    space.sync(&[a]).unwrap();
    // Written but never synced, then a crash: the file is back to two slots.
    let b = space.allocate(2).unwrap();
    space.write_extent(b, 2, b"b", &footer(b)).unwrap();
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    let space = open(&fs, 8).unwrap();
    assert!(space.reference(b, 2).unwrap_err().is_corruption());
    space.reference(a, 1).unwrap();
    let r = space.finish_recovery(&looks).unwrap();
    assert_eq!((r.used_slots, r.free_slots), (1, 0));
    assert_eq!(space.allocate(2).unwrap(), b);
}

#[test]
fn shrink_truncates_tails_and_deletes_empty_files() {
    let (fs, space) = setup(8);
    let ids = alloc_n(&space, 16); // 1.1-1.7, 2.1-2.7, 3.1-3.2
    for &x in &ids {
        space.write_extent(x, 1, b"", &footer(x)).unwrap();
    }
    space.sync(&ids).unwrap();
    for x in [id(1, 5), id(1, 6), id(1, 7), id(1, 2), id(3, 2)] {
        space.free(x, 1);
    }
    for s in 1..8 {
        space.free(id(2, s), 1);
    }
    assert_eq!(space.shrink().unwrap(), 3 * E + 8 * E + E);
    assert_eq!(names(&fs), ["000001.dat", "000003.dat"]);
    assert_eq!(fs.read_file(&data("000001.dat")).unwrap().len() as u64, 5 * E);
    assert_eq!(fs.read_file(&data("000003.dat")).unwrap().len() as u64, 2 * E);
    let st = space.stats();
    assert_eq!(
        (st.files, st.total_slots, st.used_slots, st.file_bytes),
        (2, 5, 4, 7 * E)
    );
    assert_eq!(space.shrink().unwrap(), 0);
    // Durable: a crash keeps the shrunken state.
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), ["000001.dat", "000003.dat"]);
    let space = open(&fs, 8).unwrap();
    for x in [id(1, 1), id(1, 3), id(1, 4), id(3, 1)] {
        space.reference(x, 1).unwrap();
    }
    space.finish_recovery(&looks).unwrap();
    // Holes first, then regrowth; a new file takes the next number.
    let next = alloc_n(&space, 5);
    assert_eq!(next, [id(1, 2), id(1, 5), id(1, 6), id(1, 7), id(3, 2)]);
    for x in next.iter().chain(&[id(1, 1), id(1, 3), id(1, 4), id(3, 1)]) {
        space.free(*x, 1);
    }
    space.allocate(7).unwrap();
    assert_eq!(space.allocate(7).unwrap(), id(3, 1));
    assert_eq!(space.allocate(1).unwrap(), id(4, 1));
    space.free(id(1, 1), 7);
    space.free(id(3, 1), 7);
    space.free(id(4, 1), 1);
    // Everything empty: only the lowest file stays, cut to its header slot.
    assert_eq!(space.shrink().unwrap(), 7 * E + 8 * E + 2 * E);
    assert_eq!(names(&fs), ["000001.dat"]);
    assert_eq!(space.stats().file_bytes, E);
    assert_eq!(space.allocate(1).unwrap(), id(1, 1));
}

#[test]
fn crash_during_file_creation_leftovers_are_deleted_on_open() {
    let (fs, space) = setup(4);
    alloc_n(&space, 3);
    // File 2's creation fails after its header is synced, at the rename; removing the .tmp
    // fails too, and the directory entry reaches the disk anyway.
    fs.fail_after(FaultOp::Rename, Some("000002"), 0, libc::EIO);
    fs.fail_after(FaultOp::Remove, Some("000002"), 0, libc::EIO);
    let e = space.allocate(1).unwrap_err();
    assert!(matches!(e, Error::Io { op: "rename", .. }), "{e}");
    assert_eq!(space.stats().files, 1);
    fs.sync_dir(Path::new("/db/data")).unwrap();
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), ["000001.dat", "000002.dat.tmp"]);
    // More leftovers: a short file, and one with blank headers and no extent slot. Names that
    // are not ours stay.
    fs.write_file(&data("000003.dat"), vec![1u8; 100]);
    fs.write_file(&data("000004.dat"), vec![0u8; E as usize]);
    fs.write_file(&data("000005.dat.tmp"), vec![]);
    fs.write_file(&data("notes.dat"), vec![]);
    fs.write_file(&data("12.dat"), vec![]);
    fs.write_file(&data("000000.dat"), vec![]);
    let space = open(&fs, 4).unwrap();
    assert_eq!(names(&fs), ["000000.dat", "000001.dat", "12.dat", "notes.dat"]);
    assert_eq!(space.data_files(), [(1, data("000001.dat"))]);
    // The deletions are durable.
    drop(space);
    fs.crash(CrashMode::DropUnsynced);
    assert_eq!(names(&fs), ["000000.dat", "000001.dat", "12.dat", "notes.dat"]);
    fs.write_file(&data("000005.dat.tmp"), vec![]);
    let space = open(&fs, 4).unwrap();
    space.finish_recovery(&looks).unwrap();
    // File numbers continue after the deleted leftovers.
    assert_eq!(alloc_n(&space, 4), [id(1, 1), id(1, 2), id(1, 3), id(6, 1)]);
    // Blank headers in a file longer than slot 0 are damage, not a leftover.
    fs.write_file(&data("000007.dat"), vec![0u8; 2 * E as usize]);
    assert!(open(&fs, 4).unwrap_err().is_corruption());
}

#[test]
fn header_damage() {
    let (fs, space) = setup(4);
    let x = space.allocate(1).unwrap();
    space.write_extent(x, 1, b"keep", &footer(x)).unwrap();
    space.sync(&[x]).unwrap();
    drop(space);
    let path = data("000001.dat");
    let good = fs.read_file(&path).unwrap();
    let copies = HEADER_COPY_OFFSETS.map(|o| o as usize);
    let check_opens = |bytes: Vec<u8>| {
        fs.write_file(&path, bytes);
        let space = open(&fs, 4).unwrap();
        space.reference(x, 1).unwrap();
        space.finish_recovery(&looks).unwrap();
        assert_eq!(read_at(&space, x, 0, 4), b"keep");
    };
    let check_corrupt = |bytes: Vec<u8>| {
        fs.write_file(&path, bytes);
        let e = open(&fs, 4).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        e
    };
    let mut rng = StdRng::seed_from_u64(9);
    for _ in 0..20 {
        let (i, j) = (rng.random_range(0..HEADER_SIZE), rng.random_range(0..HEADER_SIZE));
        // One copy damaged (or zeroed): still opens.
        for c in 0..2 {
            let mut b = good.clone();
            b[copies[c] + i] ^= 0x20;
            check_opens(b);
        }
        // Both damaged: corruption, at the first copy's offending field or CRC.
        let mut b = good.clone();
        b[copies[0] + i] ^= 0x20;
        b[copies[1] + j] ^= 0x01;
        match check_corrupt(b) {
            Error::Corruption { path: p, offset, .. } => {
                assert_eq!(p, path);
                assert!(offset < HEADER_SIZE as u64, "{offset}");
            }
            e => panic!("{e}"),
        }
    }
    let mut b = good.clone();
    b[..HEADER_SIZE].fill(0);
    check_opens(b);
    let mut b = good.clone();
    b[copies[1]..copies[1] + HEADER_SIZE].fill(0);
    check_opens(b.clone());
    b[..HEADER_SIZE].fill(0xff);
    check_corrupt(b);
    // A file under another number's name.
    fs.write_file(&path, good.clone());
    fs.rename(&path, &data("000002.dat")).unwrap();
    let e = check_corrupt(good.clone());
    assert!(e.to_string().contains("names data file 1, not 2"), "{e}");
    fs.remove_file(&data("000002.dat")).unwrap();
    // A newer format version (checksummed) is UnsupportedFormat.
    let mut b = good.clone();
    for c in copies {
        let mut h = b[c..c + HEADER_SIZE].to_vec();
        h[8] = 9;
        let crc = crate::coding::mask_crc(crc32c::crc32c(&h[..HEADER_SIZE - 4]));
        h[HEADER_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        b[c..c + HEADER_SIZE].copy_from_slice(&h);
    }
    fs.write_file(&path, b);
    assert!(matches!(
        open(&fs, 4).unwrap_err(),
        Error::UnsupportedFormat {
            found: 9,
            supported: 1,
            ..
        }
    ));
    check_opens(good);
}

#[test]
fn io_errors_leave_the_space_consistent() {
    // Faults at every matching call of each kind during a run of allocations that creates and
    // grows files; after the faults are cleared the run ends exactly like a fault-free one.
    let reference: Vec<ExtentId> = {
        let (_fs, space) = setup(4);
        let mut v = alloc_n(&space, 5);
        v.push(space.allocate(2).unwrap());
        v.extend(alloc_n(&space, 3));
        v
    };
    let ops = [
        FaultOp::Create,
        FaultOp::WriteAt,
        FaultOp::SetLen,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ];
    let mut fired = 0;
    for op in ops {
        for after in 0..8 {
            for errno in [libc::EIO, libc::ENOSPC] {
                let (fs, space) = setup(4);
                fs.fail_after(op, Some("/db/data"), after, errno);
                let mut got = Vec::new();
                while got.len() < reference.len() {
                    let n = if got.len() == 5 { 2 } else { 1 };
                    match space.allocate(n) {
                        Ok(x) => got.push(x),
                        Err(e) => {
                            assert_eq!(e.raw_os_error(), Some(errno), "{op:?} {after}: {e}");
                            fired += 1;
                            let st = space.stats();
                            assert_eq!(st.used_slots, got.len() as u64 + u64::from(got.len() > 5));
                            assert_eq!(st.used_slots + st.free_slots, st.total_slots);
                        }
                    }
                }
                assert_eq!(got, reference, "{op:?} after {after}");
                fs.clear_faults();
                // Everything allocated is distinct and a crash + recovery agrees.
                assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len());
                space.sync(&got).unwrap();
                drop(space);
                fs.crash(CrashMode::DropUnsynced);
                assert!(names(&fs).iter().all(|n| !n.ends_with(".tmp")), "{:?}", names(&fs));
                let space = open(&fs, 4).unwrap();
                for (i, &x) in got.iter().enumerate() {
                    space.reference(x, if i == 5 { 2 } else { 1 }).unwrap();
                }
                let r = space.finish_recovery(&looks).unwrap();
                assert_eq!(r.used_slots, 10);
            }
        }
    }
    assert!(fired > 40, "only {fired} faults fired");
}

#[test]
fn io_errors_in_write_sync_and_shrink_are_typed() {
    let (fs, space) = setup(4);
    let ids = alloc_n(&space, 5);
    fs.fail_after(FaultOp::WriteAt, None, 1, libc::ENOSPC);
    let e = space.write_extent(ids[0], 1, b"valid", &footer(ids[0])).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    fs.fail_after(FaultOp::Sync, Some("000002"), 0, libc::EIO);
    let e = space.sync(&ids).unwrap_err();
    assert!(
        matches!(&e, Error::Io { op: "fsync", path, .. } if path.ends_with("000002.dat")),
        "{e}"
    );
    space.sync(&ids).unwrap();
    for &x in &ids[1..] {
        space.free(x, 1);
    }
    fs.fail_after(FaultOp::SetLen, None, 0, libc::EIO);
    assert_eq!(space.shrink().unwrap_err().raw_os_error(), Some(libc::EIO));
    fs.fail_after(FaultOp::Remove, None, 0, libc::EIO);
    assert_eq!(space.shrink().unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(space.stats().files, 2);
    fs.fail_after(FaultOp::SyncDir, None, 0, libc::EIO);
    assert_eq!(space.shrink().unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(space.stats().files, 1);
    assert_eq!(space.shrink().unwrap(), 0);
    assert_eq!(alloc_n(&space, 4), [id(1, 2), id(1, 3), id(2 + 1, 1), id(3, 2)]);
}

#[test]
fn concurrent_allocate_and_free_on_posix() {
    let dir = tempfile::tempdir().unwrap();
    let space = Arc::new(ExtentSpace::open(Arc::new(PosixFs), dir.path(), opts(8)).unwrap());
    space.finish_recovery(&looks).unwrap();
    let live = Arc::new(parking_lot::Mutex::new(HashSet::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (space, live) = (space.clone(), live.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut mine: Vec<(ExtentId, u32)> = Vec::new();
                for _ in 0..150 {
                    if mine.len() < 5 && rng.random_bool(0.6) {
                        let n = if rng.random_range(0..6) == 0 { 2 } else { 1 };
                        let x = space.allocate(n).unwrap();
                        for s in x.slot()..x.slot() + n {
                            assert!(live.lock().insert(ExtentId::new(x.file(), s)), "{x} handed out twice");
                        }
                        space.write_extent(x, n, &t.to_le_bytes(), &footer(x)).unwrap();
                        mine.push((x, n));
                    } else if let Some((x, n)) = mine.pop() {
                        assert_eq!(read_at(&space, x, 0, 8), t.to_le_bytes());
                        assert_eq!(read_at(&space, x, u64::from(n) * E - 16, 16), footer(x));
                        for s in x.slot()..x.slot() + n {
                            live.lock().remove(&ExtentId::new(x.file(), s));
                        }
                        space.free(x, n);
                    }
                    if rng.random_range(0..20) == 0 {
                        space.shrink().unwrap();
                    }
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().unwrap());
    }
    let ids: Vec<_> = all.iter().map(|a| a.0).collect();
    space.sync(&ids).unwrap();
    let used: u64 = all.iter().map(|a| u64::from(a.1)).sum();
    assert_eq!(space.stats().used_slots, used);
    drop(space);
    let space = ExtentSpace::open(Arc::new(PosixFs), dir.path(), opts(8)).unwrap();
    for &(x, n) in &all {
        space.reference(x, n).unwrap();
    }
    assert_eq!(space.finish_recovery(&looks).unwrap().used_slots, used);
}
