//! Tests of the swap layer (`pagelab_mm::reclaim`).
//!
//! * A property test runs random sequences of slot allocations on random CPUs, reference
//!   changes (`swap_duplicate`, `swap_free`, `swapcache_prepare`, `put_swap_folio`), swap cache
//!   inserts, deletes and shadows, page writes and reads, and cache drains against a reference
//!   model, on every backing (memory plain and compressed, a file) and cache setting. After every
//!   step `check` passes and its census agrees with the model; reads return what was written; a
//!   new slot is never one in use; an allocation fails exactly when every slot is in use. At the
//!   end, dropping every reference and draining leaves every slot free.
//! * File backing: data lands at `offset * 4096` in the file, which goes away with the device;
//!   a file that is not a pagelab swap file is refused as it was; an unwritable path is a
//!   one-line error.
//! * A full device, slots parked in other CPUs' caches, and cache deactivation.
//! * A multi-threaded stress (4 threads on the machine's 2 cores, frees of other threads'
//!   slots, drains) with ownership marks and page signatures that catch a slot handed out twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;

use pagelab_mm::arena::{Arena, ArenaConfig, MIN_ARENA_BYTES};
use pagelab_mm::reclaim::swap::{
    Backing, SWAP_SLOTS_CACHE_SIZE, SwapConfig, SwapDevice, SwapEntry, SwapError,
};
use pagelab_mm::reclaim::swap_cache::{CacheSlot, Exists};
use pagelab_mm::{CpuId, PAGE_SIZE, Pfn};
use pagelab_sync::LockKind;
use proptest::prelude::*;

const CPUS: usize = 3;

fn page() -> Vec<AtomicU64> {
    (0..512).map(|_| AtomicU64::new(0)).collect()
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// What a test page holds: forms that take each storage path (same-filled, compressible,
/// incompressible).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    Zero,
    Same(u64),
    Pattern(u64),
    Random(u64),
}

impl Content {
    fn word(self, i: usize) -> u64 {
        match self {
            Content::Zero => 0,
            Content::Same(v) => v,
            Content::Pattern(s) => s.wrapping_add((i % 8) as u64),
            Content::Random(s) => {
                let mut x = s | 1;
                for _ in 0..(i % 7) + 1 {
                    xorshift(&mut x);
                }
                x ^ i as u64
            }
        }
    }

    fn fill(self, w: &[AtomicU64]) {
        for (i, a) in w.iter().enumerate() {
            a.store(self.word(i), Relaxed);
        }
    }

    fn matches(self, w: &[AtomicU64]) -> bool {
        w.iter()
            .enumerate()
            .all(|(i, a)| a.load(Relaxed) == self.word(i))
    }
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        Just(Content::Zero),
        any::<u64>().prop_map(Content::Same),
        any::<u64>().prop_map(Content::Pattern),
        any::<u64>().prop_map(Content::Random),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        cpu: u16,
    },
    Dup {
        pick: usize,
    },
    Free {
        pick: usize,
        cpu: u16,
    },
    PutCache {
        pick: usize,
        cpu: u16,
    },
    Prepare {
        pick: usize,
    },
    AddCache {
        pick: usize,
        pfn: u32,
    },
    DelCache {
        pick: usize,
        shadow: Option<u64>,
    },
    TakeShadow {
        pick: usize,
    },
    Write {
        pick: usize,
        cpu: u16,
        content: Content,
    },
    Read {
        pick: usize,
        cpu: u16,
    },
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    let cpu = 0..CPUS as u16;
    prop_oneof![
        6 => cpu.clone().prop_map(|cpu| Op::Alloc { cpu }),
        3 => any::<usize>().prop_map(|pick| Op::Dup { pick }),
        4 => (any::<usize>(), cpu.clone()).prop_map(|(pick, cpu)| Op::Free { pick, cpu }),
        3 => (any::<usize>(), cpu.clone()).prop_map(|(pick, cpu)| Op::PutCache { pick, cpu }),
        1 => any::<usize>().prop_map(|pick| Op::Prepare { pick }),
        2 => (any::<usize>(), any::<u32>()).prop_map(|(pick, pfn)| Op::AddCache { pick, pfn }),
        2 => (any::<usize>(), proptest::option::of(any::<u64>().prop_map(|s| s >> 1)))
            .prop_map(|(pick, shadow)| Op::DelCache { pick, shadow }),
        1 => any::<usize>().prop_map(|pick| Op::TakeShadow { pick }),
        4 => (any::<usize>(), cpu.clone(), content())
            .prop_map(|(pick, cpu, content)| Op::Write { pick, cpu, content }),
        3 => (any::<usize>(), cpu).prop_map(|(pick, cpu)| Op::Read { pick, cpu }),
        1 => Just(Op::Drain),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    Lz4,
    File,
}

#[derive(Clone, Debug)]
struct Setup {
    kind: Kind,
    pages: u64,
    slot_cache: usize,
    auto: bool,
    lock: LockKind,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(Kind::Plain), Just(Kind::Lz4), Just(Kind::File)],
        3u64..80,
        prop_oneof![Just(0usize), Just(2), Just(5), Just(SWAP_SLOTS_CACHE_SIZE)],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(kind, pages, slot_cache, auto, ticket)| Setup {
            kind,
            pages,
            slot_cache,
            auto,
            lock: if ticket {
                LockKind::Ticket
            } else {
                LockKind::Queued
            },
        })
}

fn device(s: &Setup, dir: &tempfile::TempDir) -> SwapDevice {
    let backing = match s.kind {
        Kind::Plain => Backing::Memory { compress: false },
        Kind::Lz4 => Backing::Memory { compress: true },
        Kind::File => Backing::File(dir.path().join("swapfile")),
    };
    let mut cfg = SwapConfig::new(s.pages, backing, CPUS);
    cfg.swp_type = 2;
    cfg.slot_cache = s.slot_cache;
    cfg.slot_cache_auto = s.auto;
    cfg.lock_kind = s.lock;
    SwapDevice::new(cfg).unwrap()
}

/// The model of one slot the caller holds.
#[derive(Clone, Debug)]
struct Held {
    count: u16,
    cache: bool,
    cached: CacheSlot,
    data: Option<Content>,
}

fn pick(live: &BTreeMap<SwapEntry, Held>, p: usize) -> Option<SwapEntry> {
    if live.is_empty() {
        None
    } else {
        live.keys().nth(p % live.len()).copied()
    }
}

fn run(s: Setup, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(&s, &dir);
    let sc = dev.swap_cache();
    let size = dev.size();
    let mut live: BTreeMap<SwapEntry, Held> = BTreeMap::new();
    let buf = page();
    let (mut writes, mut reads) = (0u64, 0u64);
    for op in ops {
        match op {
            Op::Alloc { cpu } => {
                let r = dev.folio_alloc_swap(CpuId(cpu));
                if live.len() as u64 == size {
                    prop_assert_eq!(r, None, "a full device handed out a slot");
                } else {
                    let e = r.ok_or_else(|| {
                        TestCaseError::fail(format!(
                            "allocation failed with {} of {size} slots in use",
                            live.len()
                        ))
                    })?;
                    prop_assert!(!live.contains_key(&e), "{:?} handed out twice", e);
                    prop_assert_eq!(e.swp_type(), 2);
                    prop_assert_eq!(dev.swap_count(e), Ok((0, true)));
                    prop_assert_eq!(sc.get(e), CacheSlot::Empty, "a new slot kept a shadow");
                    live.insert(
                        e,
                        Held {
                            count: 0,
                            cache: true,
                            cached: CacheSlot::Empty,
                            data: None,
                        },
                    );
                }
            }
            Op::Dup { pick: p } => {
                if let Some(e) = pick(&live, p) {
                    prop_assert_eq!(dev.swap_duplicate(e), Ok(()));
                    live.get_mut(&e).unwrap().count += 1;
                }
            }
            Op::Free { pick: p, cpu } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    let r = dev.swap_free(CpuId(cpu), e);
                    if h.count == 0 {
                        prop_assert!(matches!(r, Err(SwapError::BadEntry(..))), "{:?}", r);
                    } else {
                        h.count -= 1;
                        let freed = h.count == 0 && !h.cache;
                        prop_assert_eq!(r, Ok(freed));
                        if freed {
                            live.remove(&e);
                        }
                    }
                }
            }
            Op::PutCache { pick: p, cpu } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    if !h.cache {
                        prop_assert!(dev.put_swap_folio(CpuId(cpu), e).is_err());
                    } else if !matches!(h.cached, CacheSlot::Page(_)) {
                        let freed = h.count == 0;
                        prop_assert_eq!(dev.put_swap_folio(CpuId(cpu), e), Ok(freed));
                        h.cache = false;
                        if freed {
                            live.remove(&e);
                        }
                    }
                }
            }
            Op::Prepare { pick: p } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    if h.cache {
                        prop_assert_eq!(dev.swapcache_prepare(e), Err(SwapError::CacheBusy(e)));
                    } else {
                        prop_assert_eq!(dev.swapcache_prepare(e), Ok(()));
                        h.cache = true;
                    }
                }
            }
            Op::AddCache { pick: p, pfn } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    if h.cache {
                        let r = sc.add_to_swap_cache(e, Pfn(pfn));
                        match h.cached {
                            CacheSlot::Page(old) => prop_assert_eq!(r, Err(Exists { pfn: old })),
                            CacheSlot::Shadow(s) => prop_assert_eq!(r, Ok(Some(s))),
                            CacheSlot::Empty => prop_assert_eq!(r, Ok(None)),
                        }
                        if r.is_ok() {
                            h.cached = CacheSlot::Page(Pfn(pfn));
                        }
                    }
                }
            }
            Op::DelCache { pick: p, shadow } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    let r = sc.delete_from_swap_cache(e, shadow);
                    if let CacheSlot::Page(pfn) = h.cached {
                        prop_assert_eq!(r, Some(pfn));
                        h.cached = shadow.map_or(CacheSlot::Empty, CacheSlot::Shadow);
                    } else {
                        prop_assert_eq!(r, None);
                    }
                }
            }
            Op::TakeShadow { pick: p } => {
                if let Some(e) = pick(&live, p) {
                    let h = live.get_mut(&e).unwrap();
                    let r = sc.take_shadow(e);
                    if let CacheSlot::Shadow(s) = h.cached {
                        prop_assert_eq!(r, Some(s));
                        h.cached = CacheSlot::Empty;
                    } else {
                        prop_assert_eq!(r, None);
                    }
                }
            }
            Op::Write {
                pick: p,
                cpu,
                content,
            } => {
                if let Some(e) = pick(&live, p) {
                    content.fill(&buf);
                    prop_assert_eq!(dev.write_page(CpuId(cpu), e, &buf), Ok(()));
                    live.get_mut(&e).unwrap().data = Some(content);
                    writes += 1;
                }
            }
            Op::Read { pick: p, cpu } => {
                if let Some(e) = pick(&live, p) {
                    for w in buf.iter() {
                        w.store(0xdead, Relaxed);
                    }
                    let r = dev.read_page(CpuId(cpu), e, &buf);
                    match live[&e].data {
                        Some(c) => {
                            prop_assert_eq!(r, Ok(()));
                            prop_assert!(c.matches(&buf), "{:?} read back wrong", e);
                            reads += 1;
                        }
                        None => prop_assert_eq!(r, Err(SwapError::NotWritten(e))),
                    }
                }
            }
            Op::Drain => dev.drain_slot_caches(),
        }
        let c = dev.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(c.in_use, live.len() as u64);
        prop_assert_eq!(c.free + c.cached + c.returned, size - live.len() as u64);
        let pages = live
            .values()
            .filter(|h| matches!(h.cached, CacheSlot::Page(_)))
            .count() as u64;
        let shadows = live
            .values()
            .filter(|h| matches!(h.cached, CacheSlot::Shadow(_)))
            .count() as u64;
        let written = live.values().filter(|h| h.data.is_some()).count() as u64;
        prop_assert_eq!(c.swap_cache_pages, pages);
        // Slots waiting in return arrays keep their shadow and data until the batch free.
        prop_assert!(c.shadows >= shadows);
        prop_assert!(c.stored_pages >= written);
        if c.returned == 0 {
            prop_assert_eq!(c.shadows, shadows);
            prop_assert_eq!(c.stored_pages, written);
        }
    }
    // Drop every reference the model holds; draining then leaves every slot free.
    for (e, h) in std::mem::take(&mut live) {
        if let CacheSlot::Page(p) = h.cached {
            prop_assert_eq!(sc.delete_from_swap_cache(e, None), Some(p));
        }
        let mut freed = false;
        if h.cache {
            freed = dev.put_swap_folio(CpuId(0), e).unwrap();
        }
        for i in 0..h.count {
            prop_assert!(!freed);
            freed = dev.swap_free(CpuId(i % CPUS as u16), e).unwrap();
        }
        prop_assert!(freed, "{:?} not freed by its last reference", e);
    }
    dev.drain_slot_caches();
    let c = dev.check().map_err(TestCaseError::fail)?;
    prop_assert_eq!(c.free, size);
    prop_assert_eq!(
        (
            c.in_use,
            c.cached,
            c.returned,
            c.swap_cache_pages,
            c.shadows
        ),
        (0, 0, 0, 0, 0)
    );
    prop_assert_eq!((c.stored_pages, c.stored_bytes), (0, 0));
    let st = dev.stats();
    prop_assert_eq!((st.pswpout, st.pswpin), (writes, reads));
    prop_assert_eq!((st.inuse, st.cached), (0, 0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn swap_device_matches_model(s in setup(), ops in proptest::collection::vec(op(), 1..160)) {
        run(s, ops)?;
    }
}

/// Every slot of a small device, then the device is full; slots freed into one CPU's return
/// array are found by another CPU's allocation through the drain.
#[test]
fn full_device_drains_parked_slots() {
    for auto in [false, true] {
        let mut cfg = SwapConfig::new(10, Backing::Memory { compress: false }, 2);
        cfg.slot_cache = 4;
        cfg.slot_cache_auto = auto;
        let dev = SwapDevice::new(cfg).unwrap();
        let mut got = Vec::new();
        while let Some(e) = dev.folio_alloc_swap(CpuId(got.len() as u16 % 2)) {
            got.push(e);
            assert!(got.len() <= 9, "more slots than the device has");
        }
        assert_eq!(got.len(), 9);
        let mut offs: Vec<u64> = got.iter().map(|e| e.offset()).collect();
        offs.sort_unstable();
        assert_eq!(offs, (1..10).collect::<Vec<_>>(), "slot 0 is the header");
        assert_eq!(dev.folio_alloc_swap(CpuId(1)), None);
        assert_eq!(dev.stats().alloc_fails, 2);
        // A free on CPU 1 parks the slot in CPU 1's return array (when the caches are on).
        let e = got.pop().unwrap();
        assert_eq!(dev.put_swap_folio(CpuId(1), e), Ok(true));
        assert_eq!(dev.nr_free(), if auto { 1 } else { 0 });
        let c = dev.check().unwrap();
        assert_eq!(c.returned + c.free, 1);
        assert_eq!(dev.folio_alloc_swap(CpuId(0)), Some(e));
        assert_eq!(dev.folio_alloc_swap(CpuId(0)), None);
        for e in got.drain(..).chain([e]) {
            assert_eq!(dev.put_swap_folio(CpuId(0), e), Ok(true));
        }
        dev.drain_slot_caches();
        let c = dev.check().unwrap();
        assert_eq!((c.free, c.in_use), (9, 0));
    }
}

/// `check_cache_active`: caches deactivate (and are drained) when free slots fall below
/// 2 × size × CPUs, and come back above 5 × size × CPUs.
#[test]
fn slot_caches_deactivate_when_swap_runs_low() {
    let mut cfg = SwapConfig::new(1001, Backing::Memory { compress: false }, 2);
    cfg.slot_cache = 16;
    let dev = SwapDevice::new(cfg).unwrap();
    // 2 × 16 × 2 = 64; 5 × 16 × 2 = 160.
    let mut held = Vec::new();
    let e = dev.folio_alloc_swap(CpuId(0)).unwrap();
    held.push(e);
    assert_eq!(dev.stats().cached, 15, "a batch of 16, one handed out");
    while dev.nr_free() >= 64 {
        held.push(dev.folio_alloc_swap(CpuId(1)).unwrap());
    }
    let before = dev.stats();
    held.push(dev.folio_alloc_swap(CpuId(0)).unwrap());
    let after = dev.stats();
    assert_eq!(after.cached, 0, "deactivation drains every cache");
    assert!(after.drains > before.drains);
    let refills = after.refills;
    for _ in 0..10 {
        held.push(dev.folio_alloc_swap(CpuId(0)).unwrap());
    }
    assert_eq!(dev.stats().refills, refills, "inactive caches are bypassed");
    assert_eq!(dev.stats().cached, 0);
    // Frees go straight to the device while inactive.
    let n = held.len();
    for e in held.drain(n - 200..) {
        assert_eq!(dev.put_swap_folio(CpuId(1), e), Ok(true));
    }
    assert_eq!(dev.stats().cached, 0);
    assert!(dev.nr_free() > 160);
    held.push(dev.folio_alloc_swap(CpuId(0)).unwrap());
    assert_eq!(
        dev.stats().refills,
        refills + 1,
        "reactivated above 160 free slots"
    );
    for e in held {
        dev.put_swap_folio(CpuId(0), e).unwrap();
    }
    dev.drain_slot_caches();
    assert_eq!(dev.check().unwrap().free, 1000);
}

/// The background threads' CPU slot (`nr_cpus`) has no cache: it allocates and frees at the
/// device.
#[test]
fn background_cpu_bypasses_the_caches() {
    let mut cfg = SwapConfig::new(100, Backing::Memory { compress: false }, 2);
    cfg.slot_cache_auto = false;
    let dev = SwapDevice::new(cfg).unwrap();
    let kswapd = CpuId(2);
    let e = dev.folio_alloc_swap(kswapd).unwrap();
    assert_eq!(
        (dev.nr_free(), dev.stats().cached, dev.stats().refills),
        (98, 0, 0)
    );
    let page = page();
    dev.write_page(kswapd, e, &page).unwrap();
    assert_eq!(dev.put_swap_folio(kswapd, e), Ok(true));
    assert_eq!((dev.nr_free(), dev.stats().cached), (99, 0));
    assert_eq!(dev.stats().pswpout, 1);
    dev.check().unwrap();
}

/// Slots come from a cursor in ascending runs and the cursor wraps.
#[test]
fn allocation_cursor_runs_and_wraps() {
    let mut cfg = SwapConfig::new(9, Backing::Memory { compress: false }, 1);
    cfg.slot_cache = 0;
    let dev = SwapDevice::new(cfg).unwrap();
    let a = dev.get_swap_pages(3);
    assert_eq!(a.iter().map(|e| e.offset()).collect::<Vec<_>>(), [1, 2, 3]);
    dev.put_swap_folio(CpuId(0), a[0]).unwrap();
    let b = dev.get_swap_pages(10);
    assert_eq!(
        b.iter().map(|e| e.offset()).collect::<Vec<_>>(),
        [4, 5, 6, 7, 8, 1],
        "the cursor goes on to the end, then wraps to the freed slot"
    );
    assert!(dev.get_swap_pages(1).is_empty());
    assert_eq!(dev.check().unwrap().free, 0);
}

/// Reference counting through a swap-out and a swap-in, with the swap cache and a shadow.
#[test]
fn swap_out_and_in_through_the_arena() {
    let arena = Arena::new(
        ArenaConfig {
            bytes: MIN_ARENA_BYTES,
            huge_pages: false,
            prefault: false,
        },
        48,
    )
    .unwrap();
    let dev = SwapDevice::new(SwapConfig::new(64, Backing::Memory { compress: true }, 2)).unwrap();
    let sc = dev.swap_cache();
    let cpu = CpuId(1);
    let (src, dst) = (Pfn(10), Pfn(11));
    Content::Pattern(99).fill(arena.words(src));
    // Swap-out: reserve a slot, cache the page, unmap two PTEs to it, write, reclaim.
    let e = dev.folio_alloc_swap(cpu).unwrap();
    assert_eq!(sc.add_to_swap_cache(e, src), Ok(None));
    dev.swap_duplicate(e).unwrap();
    dev.swap_duplicate(e).unwrap();
    assert_eq!(dev.swap_count(e), Ok((2, true)));
    dev.swap_out_frame(cpu, e, &arena, src).unwrap();
    assert_eq!(sc.delete_from_swap_cache(e, Some(0x77)), Some(src));
    assert_eq!(dev.put_swap_folio(cpu, e), Ok(false));
    assert_eq!(dev.swap_count(e), Ok((2, false)));
    // Swap-in: the fault takes the reservation, reads into a new frame, takes the shadow.
    assert_eq!(dev.swapcache_prepare(e), Ok(()));
    assert_eq!(dev.swapcache_prepare(e), Err(SwapError::CacheBusy(e)));
    dev.swap_in_frame(cpu, e, &arena, dst).unwrap();
    assert!(Content::Pattern(99).matches(arena.words(dst)));
    assert_eq!(sc.add_to_swap_cache(e, dst), Ok(Some(0x77)));
    // Both PTEs now map the page; the slot is freed with the last reference.
    assert_eq!(dev.swap_free(cpu, e), Ok(false));
    assert_eq!(dev.swap_free(cpu, e), Ok(false));
    assert_eq!(sc.delete_from_swap_cache(e, None), Some(dst));
    assert_eq!(dev.put_swap_folio(cpu, e), Ok(true));
    assert_eq!(dev.swap_free(cpu, e).map_err(|_| ()), Err(()));
    let st = dev.stats();
    assert_eq!((st.pswpout, st.pswpin), (1, 1));
    dev.drain_slot_caches();
    let c = dev.check().unwrap();
    assert_eq!((c.free, c.stored_pages), (63, 0));
}

#[test]
fn file_backing_writes_at_the_slot_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swap0");
    let dev = SwapDevice::new(SwapConfig::new(16, Backing::File(path.clone()), 1)).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        16 * PAGE_SIZE as u64
    );
    let buf = page();
    let mut slots = Vec::new();
    for i in 0..5u64 {
        let e = dev.folio_alloc_swap(CpuId(0)).unwrap();
        Content::Random(i + 1).fill(&buf);
        dev.write_page(CpuId(0), e, &buf).unwrap();
        slots.push((e, Content::Random(i + 1)));
    }
    let bytes = std::fs::read(&path).unwrap();
    for &(e, c) in &slots {
        let at = e.offset() as usize * PAGE_SIZE;
        let w0 = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(w0, c.word(0), "{e:?} is at offset * 4096 in the file");
        dev.read_page(CpuId(0), e, &buf).unwrap();
        assert!(c.matches(&buf));
    }
    assert!(
        bytes[..16] == pagelab_mm::reclaim::swap::SWAP_FILE_MAGIC[..]
            && bytes[32..PAGE_SIZE].iter().all(|&b| b == 0),
        "the header slot holds the header and nothing else"
    );
    for (e, _) in slots {
        dev.put_swap_folio(CpuId(0), e).unwrap();
    }
    dev.drain_slot_caches();
    dev.check().unwrap();
    drop(dev);
    assert!(!path.exists(), "a file the device created goes with it");

    // A file that existed and is not a swap file pagelab made is refused, as it was.
    std::fs::write(&path, b"old contents").unwrap();
    let e = SwapDevice::new(SwapConfig::new(4, Backing::File(path.clone()), 1))
        .err()
        .expect("a user's file is not a swap file");
    assert!(matches!(e, SwapError::Refused { .. }), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"old contents");
}

/// Tests run as root, so a read-only directory would not stop them: a path under a regular
/// file cannot be created by anyone.
#[test]
fn unwritable_swap_file_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x-file");
    std::fs::write(&file, b"").unwrap();
    let path = file.join("swap");
    let err = SwapDevice::new(SwapConfig::new(8, Backing::File(path.clone()), 1))
        .err()
        .expect("creating a file under a regular file fails");
    let msg = err.to_string();
    assert_eq!(
        msg,
        format!("cannot open swap file {}: Not a directory", path.display())
    );
    assert!(!msg.contains('\n'));
    assert!(matches!(err, SwapError::Open { .. }));
}

#[test]
fn bad_configurations_are_refused() {
    let m = Backing::Memory { compress: false };
    for (pages, cpus, ty) in [(1, 1, 0), (8, 0, 0), (8, 1, 32)] {
        let mut cfg = SwapConfig::new(pages, m.clone(), cpus);
        cfg.swp_type = ty;
        let e = SwapDevice::new(cfg).err().unwrap();
        assert!(matches!(e, SwapError::Config(_)), "{e}");
    }
    let dev = SwapDevice::new(SwapConfig::new(8, m, 1)).unwrap();
    let other = SwapEntry::new(1, 3);
    assert!(matches!(
        dev.swap_duplicate(other),
        Err(SwapError::BadEntry(..))
    ));
    assert!(matches!(
        dev.swap_duplicate(SwapEntry::new(0, 8)),
        Err(SwapError::BadEntry(..))
    ));
    assert!(matches!(
        dev.swap_duplicate(SwapEntry::new(0, 3)),
        Err(SwapError::BadEntry(..))
    ));
    assert!(
        dev.write_page(CpuId(0), SwapEntry::new(0, 3), &page())
            .is_err()
    );
}

/// Four threads (on two cores) allocate slots on their own CPUs, write a signature into each,
/// take extra references, and release either their own slots or slots another thread handed
/// them; one thread drains every cache now and then. An ownership mark per slot catches a slot
/// handed out twice; the signature catches a slot whose data was lost or overwritten.
#[test]
fn stress_four_threads_free_each_others_slots() {
    const THREADS: usize = 4;
    const OPS: usize = 40_000;
    const HOLD: usize = 160;
    pagelab_sync::stats::set_enabled(true);
    let dir = tempfile::tempdir().unwrap();
    // (backing, slots, cache size, auto deactivation, lock): the 513-slot device is smaller
    // than what the threads want to hold, so it runs full and the slow path drains caches.
    let configs = [
        (
            Backing::Memory { compress: true },
            1025,
            16,
            true,
            LockKind::Queued,
        ),
        (
            Backing::Memory { compress: false },
            1025,
            64,
            false,
            LockKind::Ticket,
        ),
        (
            Backing::File(dir.path().join("stress")),
            1025,
            8,
            false,
            LockKind::Queued,
        ),
        (
            Backing::Memory { compress: false },
            1025,
            0,
            false,
            LockKind::Queued,
        ),
        (
            Backing::Memory { compress: false },
            513,
            16,
            false,
            LockKind::Queued,
        ),
    ];
    for (backing, pages, cache, auto, lock) in configs {
        let mut cfg = SwapConfig::new(pages, backing.clone(), THREADS);
        cfg.slot_cache = cache;
        cfg.slot_cache_auto = auto;
        cfg.lock_kind = lock;
        let dev = SwapDevice::new(cfg).unwrap();
        let owner: Vec<AtomicU32> = (0..pages).map(|_| AtomicU32::new(0)).collect();
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::sync_channel(64)).unzip();
        let full = AtomicU64::new(0);
        std::thread::scope(|s| {
            for (t, rx) in rxs.into_iter().enumerate() {
                let (dev, owner, full) = (&dev, &owner, &full);
                let next = txs[(t + 1) % THREADS].clone();
                s.spawn(move || {
                    let cpu = CpuId(t as u16);
                    let buf = page();
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                    // (entry, signature, extra PTE references, holds the cache reservation)
                    let mut held: Vec<(SwapEntry, u64, u16, bool)> = Vec::new();
                    let release = |(e, sig, refs, cache): (SwapEntry, u64, u16, bool),
                                   buf: &[AtomicU64]| {
                        dev.read_page(cpu, e, buf).unwrap();
                        assert!(
                            Content::Pattern(sig).matches(buf),
                            "{e:?} lost its data (signature {sig:#x})"
                        );
                        owner[e.offset() as usize].store(0, Relaxed);
                        let mut freed = false;
                        if cache {
                            freed = dev.put_swap_folio(cpu, e).unwrap();
                        }
                        for _ in 0..refs {
                            assert!(!freed);
                            freed = dev.swap_free(cpu, e).unwrap();
                        }
                        assert!(freed, "{e:?} survived its last reference");
                    };
                    for i in 0..OPS {
                        while let Ok(h) = rx.try_recv() {
                            held.push(h);
                        }
                        let r = xorshift(&mut rng);
                        match r % 8 {
                            0..=2 if held.len() < HOLD => match dev.folio_alloc_swap(cpu) {
                                Some(e) => {
                                    let prev =
                                        owner[e.offset() as usize].swap(t as u32 + 1, Relaxed);
                                    assert_eq!(
                                        prev,
                                        0,
                                        "{e:?} handed to thread {t} while thread {} holds it",
                                        prev.wrapping_sub(1)
                                    );
                                    let sig = r >> 8 << 8 | e.offset() & 0xff;
                                    Content::Pattern(sig).fill(&buf);
                                    dev.write_page(cpu, e, &buf).unwrap();
                                    held.push((e, sig, 0, true));
                                }
                                None => {
                                    full.fetch_add(1, Relaxed);
                                    std::thread::yield_now();
                                }
                            },
                            3 if !held.is_empty() => {
                                let k = (r >> 8) as usize % held.len();
                                dev.swap_duplicate(held[k].0).unwrap();
                                held[k].2 += 1;
                            }
                            4 if !held.is_empty() => {
                                let k = (r >> 8) as usize % held.len();
                                if held[k].3 && held[k].2 > 0 {
                                    assert_eq!(dev.put_swap_folio(cpu, held[k].0), Ok(false));
                                    held[k].3 = false;
                                }
                            }
                            0..=2 | 5 | 6 if !held.is_empty() => {
                                let k = (r >> 8) as usize % held.len();
                                release(held.swap_remove(k), &buf);
                            }
                            7 if !held.is_empty() => {
                                // A bounded channel: a descheduled receiver does not gather
                                // every slot while the others find the device full.
                                let k = (r >> 8) as usize % held.len();
                                if let Err(mpsc::TrySendError::Full(h)) =
                                    next.try_send(held.swap_remove(k))
                                {
                                    release(h, &buf);
                                }
                            }
                            _ => {}
                        }
                        if t == 0 && i % 1000 == 999 {
                            dev.drain_slot_caches();
                        }
                    }
                    // Give everything back, then keep releasing what the previous thread hands
                    // over until it is done too (its sender is dropped then), so that no slot
                    // sits idle while the others still allocate.
                    drop(next);
                    for h in held.drain(..) {
                        release(h, &buf);
                    }
                    for h in rx.iter() {
                        release(h, &buf);
                    }
                });
            }
            drop(txs);
        });
        dev.drain_slot_caches();
        let c = dev.check().unwrap();
        assert_eq!(
            (c.free, c.in_use, c.swap_cache_pages),
            (pages - 1, 0, 0),
            "{backing:?}"
        );
        assert_eq!(c.stored_pages, 0);
        let st = dev.stats();
        assert_eq!(
            st.pswpout, st.pswpin,
            "every page written was read back once"
        );
        eprintln!(
            "{backing:?} {pages} slots, cache {cache} auto {auto}: {} pages out, {} device-full, {} refills, {} flushes, {} drains, {} trylock fails, device lock {} acq",
            st.pswpout,
            full.load(Relaxed),
            st.refills,
            st.flushes,
            st.drains,
            st.trylock_fails,
            st.locks.device.acquisitions
        );
    }
}
