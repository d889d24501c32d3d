//! Property test of address spaces against a reference model: random mmap (anonymous, private
//! file, shared file; writable or read-only), partial and whole munmap, stores and loads by
//! several tasks (threads of one mm, or processes), under random policies. The model knows
//! every mapping and every word written; after each step the engine must agree on every
//! access's outcome and value, and the allocator, LRU and address-space invariants must hold.
//! At the end, with every mapping gone and the files truncated, every frame is free again.

use std::collections::BTreeMap;
use std::sync::Arc;

use pagelab_mm::policy::{
    Allocator, LruAdd, LruRelease, MemcgCharge, MglruMove, MmapLock, PcpLists, PcpTune, Ptl,
    RssCounter, TlbShootdown, VmaLock, VmaLockFaults,
};
use pagelab_mm::reclaim::swap::{Backing, SwapConfig};
use pagelab_mm::vm::filemap::File;
use pagelab_mm::{CpuId, FaultError, Kernel, MapKind, MemConfig, Policy, Task};
use proptest::prelude::*;

const PAGE: u64 = 4096;
const TASKS: usize = 3;
const FILE_PAGES: u64 = 64;
/// Words per page the test writes and reads (the first few: enough to see a missed copy).
const WORDS: u64 = 2;

#[derive(Clone, Debug)]
enum Op {
    Mmap {
        task: usize,
        pages: u64,
        kind: u8,
        writable: bool,
        file: usize,
    },
    Munmap {
        task: usize,
        pick: usize,
        from: u64,
        len: u64,
    },
    /// `mmap(MAP_FIXED)` of anonymous memory from page `from` of a mapping, replacing
    /// whatever is there (possibly several mappings and gaps).
    MapFixed {
        task: usize,
        pick: usize,
        from: u64,
        pages: u64,
        writable: bool,
    },
    Store {
        task: usize,
        pick: usize,
        page: u64,
        val: u64,
    },
    Load {
        task: usize,
        pick: usize,
        page: u64,
    },
    Wild {
        task: usize,
        addr_page: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..TASKS, 1u64..40, 0u8..3, prop::bool::weighted(0.85), 0usize..2)
            .prop_map(|(task, pages, kind, writable, file)| Op::Mmap { task, pages, kind, writable, file }),
        1 => (0..TASKS, any::<usize>(), 0u64..40, 1u64..40)
            .prop_map(|(task, pick, from, len)| Op::Munmap { task, pick, from, len }),
        1 => (0..TASKS, any::<usize>(), 0u64..40, 1u64..80, prop::bool::weighted(0.85))
            .prop_map(|(task, pick, from, pages, writable)| Op::MapFixed { task, pick, from, pages, writable }),
        6 => (0..TASKS, any::<usize>(), 0u64..40, any::<u64>())
            .prop_map(|(task, pick, page, val)| Op::Store { task, pick, page, val }),
        4 => (0..TASKS, any::<usize>(), 0u64..40).prop_map(|(task, pick, page)| Op::Load { task, pick, page }),
        1 => (0..TASKS, 0u64..1 << 20).prop_map(|(task, addr_page)| Op::Wild { task, addr_page }),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        (0..5u8, 0..3u8, 0..3u8, any::<bool>()),
        (0..3u8, 0..3u8, 0..3u8, any::<bool>(), any::<bool>()),
        0..3u8,
        prop::sample::select(vec![0u32, 1, 4, 511]),
        prop::bool::weighted(0.25),
    )
        .prop_map(
            |(
                (vl, cover, ptl, downgrade),
                (rss, add, rel, tlb, around),
                lru_gen,
                prefault,
                llfree,
            )| {
                let mut p = Policy::default();
                // LLFree (ATC'23) in place of the buddy lists and the per-CPU lists it replaces.
                if llfree {
                    p.alloc.allocator = Allocator::Llfree;
                    p.pcp.lists = PcpLists::None;
                    p.pcp.tune = PcpTune::Fixed;
                }
                // 4: range locks (RadixVM, CortenMM), which replace the per-VMA lock.
                p.mm.vma_lock = [
                    VmaLock::None,
                    VmaLock::Rwsem,
                    VmaLock::Refcount,
                    VmaLock::Rcu,
                    VmaLock::None,
                ][vl as usize];
                // Which faults the VMA lock covers (6.4, 6.6, 6.7+); without one, the default.
                if p.mm.vma_lock != VmaLock::None {
                    p.mm.vma_lock_faults = [
                        VmaLockFaults::Anon,
                        VmaLockFaults::AnonSwap,
                        VmaLockFaults::All,
                    ][cover as usize];
                }
                p.mm.munmap_downgrade = downgrade;
                p.mm.ptl = [Ptl::Mm, Ptl::Split, Ptl::Atomic][ptl as usize];
                // Lock-free faults validate under a PTE lock: never with the lockless install.
                if p.mm.vma_lock == VmaLock::Rcu && p.mm.ptl == Ptl::Atomic {
                    p.mm.ptl = Ptl::Split;
                }
                // Range locks live with the split PTE locks.
                if vl == 4 {
                    p.mm.mmap_lock = MmapLock::Range;
                    p.mm.ptl = Ptl::Split;
                }
                p.mm.anon_prefault = prefault;
                p.mm.rss = [
                    RssCounter::Atomic,
                    RssCounter::PerThread,
                    RssCounter::PerCpu,
                ][rss as usize];
                p.lru.add = [LruAdd::PerPage, LruAdd::Batch, LruAdd::Splice][add as usize];
                p.lru.release = [
                    LruRelease::Locked,
                    LruRelease::Concurrent,
                    LruRelease::BatchLocks,
                ][rel as usize];
                p.mm.tlb_shootdown = if tlb {
                    TlbShootdown::Ipi
                } else {
                    TlbShootdown::None
                };
                p.mm.fault_around = if around { 16 } else { 0 };
                // Classic lists, or MGLRU moving folios one by one or in bulk (MGLRU never ran
                // with the 2018 splice).
                if lru_gen > 0 {
                    p.lru.mglru = true;
                    p.lru.mglru_move = if lru_gen == 2 {
                        MglruMove::Bulk
                    } else {
                        MglruMove::PerFolio
                    };
                    if p.lru.add == LruAdd::Splice {
                        p.lru.add = LruAdd::Batch;
                    }
                }
                p
            },
        )
}

/// A mapping the model knows about.
#[derive(Clone, Debug)]
struct Mapping {
    mm: usize,
    start: u64,
    end: u64,
    writable: bool,
    /// None for anonymous; Some((file, page offset of `start`, shared)).
    file: Option<(usize, u64, bool)>,
}

#[derive(Default)]
struct Model {
    maps: Vec<Mapping>,
    /// (mm, word address) -> value, for private pages (anon, or privately copied file pages).
    private: BTreeMap<(usize, u64), u64>,
    /// Pages (mm, page address) that have a private copy.
    copied: std::collections::BTreeSet<(usize, u64)>,
    /// (file, byte offset in the file) -> value of that word.
    files: BTreeMap<(usize, u64), u64>,
}

impl Model {
    fn find(&self, mm: usize, addr: u64) -> Option<&Mapping> {
        self.maps
            .iter()
            .find(|m| m.mm == mm && addr >= m.start && addr < m.end)
    }

    /// The file word behind `addr` of a file mapping.
    fn file_key(m: &Mapping, f: usize, off: u64, addr: u64) -> (usize, u64) {
        (f, off * PAGE + (addr - m.start))
    }

    fn value(&self, m: &Mapping, addr: u64) -> u64 {
        let page = addr & !(PAGE - 1);
        match m.file {
            Some((f, off, true)) => *self
                .files
                .get(&Self::file_key(m, f, off, addr))
                .unwrap_or(&0),
            Some((f, off, false)) if !self.copied.contains(&(m.mm, page)) => *self
                .files
                .get(&Self::file_key(m, f, off, addr))
                .unwrap_or(&0),
            _ => *self.private.get(&(m.mm, addr)).unwrap_or(&0),
        }
    }

    /// Forget `[start, end)` of address space `mm`: mappings are cut (or removed) and the
    /// private words and copies of the range go.
    fn unmap(&mut self, mm: usize, start: u64, end: u64) {
        let mut kept = Vec::new();
        for old in std::mem::take(&mut self.maps) {
            if old.mm != mm || old.end <= start || old.start >= end {
                kept.push(old);
                continue;
            }
            if old.start < start {
                kept.push(Mapping {
                    end: start,
                    ..old.clone()
                });
            }
            if old.end > end {
                let shift = (end - old.start) / PAGE;
                kept.push(Mapping {
                    start: end,
                    file: old.file.map(|(f, o, s)| (f, o + shift, s)),
                    ..old.clone()
                });
            }
        }
        self.maps = kept;
        let gone: Vec<_> = self
            .private
            .range((mm, start)..(mm, end))
            .map(|(k, _)| *k)
            .collect();
        for g in gone {
            self.private.remove(&g);
        }
        self.copied
            .retain(|&(m, page)| m != mm || page < start || page >= end);
    }

    /// A store to a private page: the first one copies the page (copy-on-write).
    fn store_private(&mut self, m: &Mapping, addr: u64, val: u64) {
        let page = addr & !(PAGE - 1);
        if let Some((f, off, false)) = m.file
            && self.copied.insert((m.mm, page))
        {
            for w in 0..WORDS {
                let a = page + w * 8;
                let v = *self.files.get(&Self::file_key(m, f, off, a)).unwrap_or(&0);
                self.private.insert((m.mm, a), v);
            }
        }
        self.private.insert((m.mm, addr), val);
    }
}

/// Pages a memory cgroup holding every task may charge, in the runs under pressure: a few
/// mappings' worth, so that its reclaim swaps anonymous pages out and faults bring them back
/// all the time.
const PRESSURE_MAX_PAGES: u64 = 4;

fn run(policy: &Policy, threads: bool, pressure: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let k = if pressure {
        let cfg = MemConfig::new(32 << 20, TASKS).with_memcgs(2);
        let swap = SwapConfig::new(4096, Backing::Memory { compress: false }, TASKS);
        let k = Kernel::with_swap(&cfg, policy, Some(swap)).unwrap();
        // Only the group is short of memory; kswapd would never be woken, and the checks
        // after each step need no background reclaimer.
        k.stop_kswapd();
        k.mem().memcgs().set_max(1, PRESSURE_MAX_PAGES).unwrap();
        k
    } else {
        Kernel::new(&MemConfig::new(32 << 20, TASKS), policy).unwrap()
    };
    let files: Vec<Arc<File>> = (0..2).map(|_| k.create_file(FILE_PAGES)).collect();
    let tasks: Vec<Task> = {
        let mut mms = Vec::new();
        (0..TASKS)
            .map(|i| {
                let mm = if threads && i > 0 {
                    Arc::clone(&mms[0])
                } else {
                    let mm = k.new_mm(CpuId(i as u16)).unwrap();
                    if pressure {
                        mm.set_memcg(1).unwrap();
                    }
                    mms.push(mm.clone());
                    mm
                };
                k.new_task(mm, CpuId(i as u16))
            })
            .collect()
    };
    for t in &tasks {
        t.idle();
    }
    let mm_of = |t: usize| if threads { 0 } else { t };
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Mmap {
                task,
                pages,
                kind,
                writable,
                file,
            } => {
                let len = pages * PAGE;
                let (mk, finfo) = match kind {
                    0 => (MapKind::Anon, None),
                    k2 => {
                        let shared = k2 == 2;
                        // Small offsets, so that mappings of one file overlap.
                        let off = (pages * 7) % 4;
                        if off + pages > FILE_PAGES {
                            continue;
                        }
                        (
                            MapKind::File {
                                file: files[file].clone(),
                                offset: off,
                                shared,
                            },
                            Some((file, off, shared)),
                        )
                    }
                };
                let addr = tasks[task]
                    .mmap(len, writable, mk)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    model.find(mm_of(task), addr).is_none(),
                    "mmap returned a used address"
                );
                model.maps.push(Mapping {
                    mm: mm_of(task),
                    start: addr,
                    end: addr + len,
                    writable,
                    file: finfo,
                });
            }
            Op::Munmap {
                task,
                pick,
                from,
                len,
            } => {
                let mine: Vec<usize> = (0..model.maps.len())
                    .filter(|&i| model.maps[i].mm == mm_of(task))
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let m = model.maps[mine[pick % mine.len()]].clone();
                let start = m.start + (from * PAGE).min(m.end - m.start - PAGE);
                let end = (start + len * PAGE).min(m.end);
                tasks[task]
                    .munmap(start, end - start)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                // Split the model's mapping.
                let i = model
                    .maps
                    .iter()
                    .position(|x| x.mm == m.mm && x.start == m.start)
                    .unwrap();
                let old = model.maps.remove(i);
                if old.start < start {
                    model.maps.push(Mapping {
                        end: start,
                        ..old.clone()
                    });
                }
                if old.end > end {
                    let shift = (end - old.start) / PAGE;
                    model.maps.push(Mapping {
                        start: end,
                        file: old.file.map(|(f, o, s)| (f, o + shift, s)),
                        ..old.clone()
                    });
                }
                let mmi = m.mm;
                let gone: Vec<_> = model
                    .private
                    .range((mmi, start)..(mmi, end))
                    .map(|(k, _)| *k)
                    .collect();
                for g in gone {
                    model.private.remove(&g);
                }
                // The private copies go with the range: a later mapping there starts over.
                model
                    .copied
                    .retain(|&(mm, page)| mm != mmi || page < start || page >= end);
            }
            Op::MapFixed {
                task,
                pick,
                from,
                pages,
                writable,
            } => {
                let mine: Vec<usize> = (0..model.maps.len())
                    .filter(|&i| model.maps[i].mm == mm_of(task))
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let m = model.maps[mine[pick % mine.len()]].clone();
                let start = m.start + from * PAGE;
                let end = start + pages * PAGE;
                let got = tasks[task]
                    .mmap_fixed(start, end - start, writable, MapKind::Anon)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(got, start, "MAP_FIXED mapped elsewhere");
                model.unmap(m.mm, start, end);
                model.maps.push(Mapping {
                    mm: m.mm,
                    start,
                    end,
                    writable,
                    file: None,
                });
            }
            Op::Store {
                task,
                pick,
                page,
                val,
            } => {
                let mine: Vec<&Mapping> =
                    model.maps.iter().filter(|m| m.mm == mm_of(task)).collect();
                if mine.is_empty() {
                    continue;
                }
                let m = mine[pick % mine.len()].clone();
                let addr = m.start + (page * PAGE) % (m.end - m.start) + (val % WORDS) * 8;
                let r = tasks[task].store(addr, val);
                if m.writable {
                    prop_assert!(r.is_ok(), "store to writable {addr:#x} failed: {r:?}");
                    match m.file {
                        Some((f, off, true)) => {
                            model.files.insert(Model::file_key(&m, f, off, addr), val);
                        }
                        _ => model.store_private(&m, addr, val),
                    }
                } else {
                    prop_assert!(
                        matches!(r, Err(FaultError::Segv { .. })),
                        "store to read-only mapping: {:?}",
                        r
                    );
                }
            }
            Op::Load { task, pick, page } => {
                let mine: Vec<&Mapping> =
                    model.maps.iter().filter(|m| m.mm == mm_of(task)).collect();
                if mine.is_empty() {
                    continue;
                }
                let m = mine[pick % mine.len()].clone();
                let addr = m.start + (page * PAGE) % (m.end - m.start);
                let got = tasks[task]
                    .load(addr)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(got, model.value(&m, addr), "load at {:#x} in {:?}", addr, m);
            }
            Op::Wild { task, addr_page } => {
                let addr = addr_page * PAGE;
                if model.find(mm_of(task), addr).is_none() {
                    let r = tasks[task].store(addr, 1);
                    prop_assert!(
                        matches!(r, Err(FaultError::Segv { .. })),
                        "store to unmapped {:#x}: {:?}",
                        addr,
                        r
                    );
                    let r = tasks[task].load(addr);
                    prop_assert!(
                        matches!(r, Err(FaultError::Segv { .. })),
                        "load of unmapped {:#x}: {:?}",
                        addr,
                        r
                    );
                    // munmap of an unmapped range is a no-op.
                    prop_assert!(tasks[task].munmap(addr, PAGE).is_ok());
                }
            }
        }
        // One OS thread drives every task, so the others are not running: mark them idle
        // (lazy TLB), or a shootdown would wait for their acknowledgement forever.
        for t in &tasks {
            t.idle();
            t.sync_rss();
        }
        let mut seen = Vec::new();
        for t in &tasks {
            if seen
                .iter()
                .any(|m: &Arc<pagelab_mm::Mm>| Arc::ptr_eq(m, t.mm()))
            {
                continue;
            }
            seen.push(t.mm().clone());
            t.mm().check(true).map_err(TestCaseError::fail)?;
        }
        k.mem().check().map_err(TestCaseError::fail)?;
        if pressure {
            let s = k.mem().memcgs().stat(1).unwrap();
            prop_assert!(s.usage <= s.max, "memcg over its limit: {:?}", s);
            // Reclaim ran in the step: every page it isolated is back on a list (or freed).
            k.lru().check().map_err(TestCaseError::fail)?;
        }
    }
    // Tear down: unmap all, then the address spaces must hold only their top-level tables.
    for m in std::mem::take(&mut model.maps) {
        let t = tasks
            .iter()
            .position(|_| true)
            .map(|_| if threads { 0 } else { m.mm })
            .unwrap();
        tasks[t].munmap(m.start, m.end - m.start).unwrap();
    }
    for t in &tasks {
        t.sync_rss();
        t.mm().check(true).map_err(TestCaseError::fail)?;
        // Range locks keep the upper levels above an unmapped range until exit (`Mm::check`);
        // the frame census after the tasks are gone still finds any table left behind.
        if !t.mm().range_locked() {
            prop_assert_eq!(
                t.mm().pgtable.nr_tables(),
                1,
                "page tables left after munmap"
            );
        }
    }
    drop(tasks);
    for f in &files {
        f.truncate(&k, CpuId(0));
    }
    k.drain_deferred_mms();
    k.lru().drain_all();
    k.mem().drain_all_pages();
    let c = k.mem().check().map_err(TestCaseError::fail)?;
    // Only the zero page stays, for the kernel's life.
    prop_assert_eq!(c.allocated, Kernel::RESERVED_FRAMES, "frames leaked");
    k.lru().check().map_err(TestCaseError::fail)?;
    if let Some(swap) = k.swap() {
        swap.drain_slot_caches();
        swap.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(swap.nr_free(), swap.size(), "swap slots leaked");
        let m = k.mem().memcgs();
        let s = m.stat(1).unwrap();
        prop_assert_eq!(s.usage, s.stocked, "charges left");
        m.drain_all_stocks();
        prop_assert_eq!(m.stat(1).unwrap().usage, 0, "stocks drained");
    }
    Ok(())
}

/// The policies of [`policy`], each charging its memory cgroup page by page, or through per-CPU
/// stocks of 1 to 3 pages (below the group's limit of [`PRESSURE_MAX_PAGES`], so that stocks
/// fill, drain when another CPU needs the room, and hold pages when reclaim looks).
fn pressure_policy() -> impl Strategy<Value = Policy> {
    (policy(), 0..4u32).prop_map(|(mut p, batch)| {
        if batch == 0 {
            p.memcg.charge = MemcgCharge::Atomic;
        } else {
            p.memcg.charge = MemcgCharge::Stock;
            p.memcg.charge_batch = batch;
        }
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn address_spaces_match_model(policy in policy(), threads in any::<bool>(), ops in prop::collection::vec(op(), 1..80)) {
        run(&policy, threads, false, &ops)?;
    }

    /// The same, with every task in a memory cgroup far smaller than what they map: anonymous
    /// pages go to swap and come back all the time, and every value must survive.
    #[test]
    fn address_spaces_match_model_under_memcg_pressure(policy in pressure_policy(), threads in any::<bool>(), ops in prop::collection::vec(op(), 1..80)) {
        run(&policy, threads, true, &ops)?;
    }
}
