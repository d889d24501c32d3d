//! Page tables (`pagelab_mm::vm::pgtable`): set/load round trips at every level, the software
//! MMU's accessed/dirty updates, the floor/ceiling rule of `free_pgtables`, which lock protects
//! a PTE in each mode, a model-based property test of set/zap/free, and installs racing on
//! shared upper levels with more threads than cores. Every test ends by freeing everything and
//! requiring that the allocator has no frame left allocated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

use pagelab_mm::policy::Ptl;
use pagelab_mm::vm::pgtable::{
    PAGE_TABLE_LOCK, PGDIR_SIZE, PMD_SIZE, PTE_PTL, PTRS_PER_TABLE, PUD_SIZE, PageTable, Pte,
    PteSlot, SplitPtl, TASK_SIZE,
};
use pagelab_mm::{AllocError, CpuId, Gfp, Mem, MemConfig, PAGE_SIZE, Pfn, Policy};
use pagelab_sync::LockKind;
use proptest::prelude::*;

const PAGE: u64 = PAGE_SIZE as u64;
const CPU: CpuId = CpuId(0);
const MODES: [Ptl; 3] = [Ptl::Mm, Ptl::Split, Ptl::Atomic];

fn mem(nr_cpus: usize) -> Arc<Mem> {
    Arc::new(Mem::new(&MemConfig::new(64 << 20, nr_cpus), &Policy::default()).unwrap())
}

fn allocated(mem: &Mem) -> u64 {
    mem.check().unwrap().allocated
}

/// Set one PTE the way the fault path does: walk allocating, lock, store.
fn map(pt: &PageTable, addr: u64, pte: Pte) -> PteSlot {
    let slot = pt.walk_alloc(CPU, addr).unwrap();
    let _ptl = pt.pte_lock(slot);
    pt.set(slot, pte);
    slot
}

/// Zap everything, free every table but the PGD, check, destroy, and require that no frame is
/// left allocated. Returns what the zap found.
fn teardown(pt: PageTable) -> Vec<(u64, Pte)> {
    let mem = pt.mem().clone();
    let mut zapped = Vec::new();
    pt.zap_range(CPU, 0, TASK_SIZE, |a, p| zapped.push((a, p)));
    pt.free_pgtables(CPU, 0, TASK_SIZE, 0, TASK_SIZE);
    assert_eq!(pt.nr_tables(), 1, "only the PGD is left");
    assert_eq!(pt.check().unwrap(), [0, 0, 0, 1]);
    assert_eq!(allocated(&mem), 1);
    pt.destroy(CPU);
    assert_eq!(allocated(&mem), 0, "a page-table frame leaked");
    zapped
}

#[test]
fn set_and_load_round_trip_across_levels() {
    for mode in MODES {
        let mem = mem(4);
        let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
        assert_eq!(pt.nr_tables(), 1);
        assert_eq!(allocated(&mem), 1);
        // Different PGD, PUD, PMD and PTE slots, including both ends of user space.
        let addrs = [
            0,
            PAGE,
            PMD_SIZE + 5 * PAGE,
            3 * PUD_SIZE + 7 * PMD_SIZE,
            7 * PGDIR_SIZE + 2 * PUD_SIZE + 9 * PMD_SIZE + 11 * PAGE,
            TASK_SIZE - PAGE,
        ];
        let mut slots = Vec::new();
        for (i, &a) in addrs.iter().enumerate() {
            let pte = Pte::new(Pfn(100 + i as u32), i % 2 == 0);
            let slot = map(&pt, a, pte);
            assert_eq!(pt.walk(a), Some(slot), "walk finds what walk_alloc made");
            assert_eq!(
                pt.walk_alloc(CPU, a).unwrap(),
                slot,
                "walk_alloc is idempotent"
            );
            assert_eq!(slot.index, ((a >> 12) & 511) as usize);
            slots.push(slot);
        }
        // 0 and PAGE share a PTE table; all others have their own.
        assert_eq!(slots[0].table, slots[1].table);
        assert_eq!(slots[0].index + 1, slots[1].index);
        for (i, &a) in addrs.iter().enumerate() {
            assert_eq!(
                pt.load(pt.walk(a).unwrap()),
                Pte::new(Pfn(100 + i as u32), i % 2 == 0)
            );
        }
        // PGD entries 0, 7, 255; PUD tables under them: 1 + 1 + 1; PMD tables: [0..1G),
        // [3G..4G), one under PGD 7, one under PGD 255; PTE tables: 5.
        assert_eq!(pt.check().unwrap(), [5, 4, 3, 1]);
        assert_eq!(pt.nr_tables(), 13);
        assert_eq!(allocated(&mem), 13);
        // Unmapped: a neighbour in an existing table is none, other tables do not exist.
        assert_eq!(pt.load(pt.walk(2 * PAGE).unwrap()), Pte::NONE);
        assert_eq!(pt.walk(2 * PMD_SIZE), None);
        assert_eq!(pt.walk(PUD_SIZE), None);
        assert_eq!(pt.walk(PGDIR_SIZE), None);
        assert_eq!(pt.walk(TASK_SIZE), None);
        assert_eq!(pt.walk(u64::MAX), None);
        let zapped = teardown(pt);
        let want: Vec<(u64, Pte)> = addrs
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, Pte::new(Pfn(100 + i as u32), i % 2 == 0)))
            .collect();
        assert_eq!(zapped, want, "zap reports every PTE once, in address order");
    }
}

#[test]
fn translate_sets_accessed_and_dirty_and_refuses_read_only_stores() {
    let mem = mem(4);
    let pt = PageTable::new(mem, CPU, Ptl::Split, LockKind::Ticket, None).unwrap();
    let a = 5 * PMD_SIZE + 3 * PAGE;
    let slot = map(&pt, a, Pte::new(Pfn(42), false));
    // A store to a read-only PTE faults and leaves it untouched.
    assert_eq!(pt.translate(a + 8, true), None);
    assert_eq!(pt.load(slot), Pte::new(Pfn(42), false));
    // A load sets accessed only.
    assert_eq!(pt.translate(a + 8, false), Some(Pfn(42)));
    let p = pt.load(slot);
    assert!(p.accessed() && !p.dirty() && !p.writable(), "{p:?}");
    assert_eq!(pt.translate(a, false), Some(Pfn(42)));
    assert_eq!(pt.load(slot), p, "a second load changes nothing");
    // Make it writable: a store sets dirty (and accessed).
    {
        let _ptl = pt.pte_lock(slot);
        let old = pt.update(slot, |p| p.with_writable(true).with_accessed(false));
        assert_eq!(old, p);
    }
    assert_eq!(pt.translate(a + PAGE - 1, true), Some(Pfn(42)));
    let p = pt.load(slot);
    assert!(p.accessed() && p.dirty() && p.writable(), "{p:?}");
    // Unmapped, swapped and out-of-range addresses fault.
    assert_eq!(pt.translate(a + PAGE, false), None);
    assert_eq!(pt.translate(a + PMD_SIZE, false), None);
    assert_eq!(pt.translate(TASK_SIZE, false), None);
    let s = map(&pt, a + PAGE, Pte::swap(0x77));
    assert_eq!(pt.translate(a + PAGE, false), None);
    assert_eq!(pt.translate(a + PAGE, true), None);
    assert_eq!(
        pt.load(s),
        Pte::swap(0x77),
        "the MMU leaves swap entries alone"
    );
    // get_and_clear returns the bits the MMU set.
    {
        let _ptl = pt.pte_lock(slot);
        let old = pt.get_and_clear(slot);
        assert!(old.accessed() && old.dirty() && old.pfn() == Pfn(42));
        assert_eq!(pt.load(slot), Pte::NONE);
    }
    assert_eq!(pt.translate(a, false), None);
    let zapped = teardown(pt);
    assert_eq!(zapped, vec![(a + PAGE, Pte::swap(0x77))]);
}

/// Sets a flag when dropped, also when unwinding: a thread that fails must still release
/// the threads looping until it is done, or the test would hang instead of failing.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// The MMU's accessed/dirty update races with clearing under the lock: it must never turn a
/// cleared entry back into something non-none (a plain fetch_or landing after the clear
/// would leave a fake swap entry), and it must only ever translate to the frame mapped.
///
/// Each round sets a fresh PTE (accessed and dirty clear, so every translator updates it)
/// and clears it a varying number of spins later under the same lock hold, sweeping the clear
/// across the translators' load-to-update window; before the next set, still under the lock,
/// the entry must be none. Translators outnumber the cores, so they are also preempted
/// inside that window.
#[test]
fn mmu_updates_never_resurrect_cleared_ptes() {
    let mem = mem(4);
    let pt = PageTable::new(mem, CPU, Ptl::Split, LockKind::Queued, None).unwrap();
    let a = 9 * PMD_SIZE;
    let slot = map(&pt, a, Pte::NONE);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..5 {
            let (pt, stop) = (&pt, &stop);
            s.spawn(move || {
                let _stop = SetOnDrop(stop);
                while !stop.load(Relaxed) {
                    if let Some(pfn) = pt.translate(a, t % 2 == 1) {
                        assert_eq!(pfn, Pfn(7));
                    }
                }
            });
        }
        let _stop = SetOnDrop(&stop);
        for i in 0..200_000u32 {
            let _ptl = pt.pte_lock(slot);
            assert_eq!(pt.load(slot), Pte::NONE, "a cleared entry came back");
            pt.set(slot, Pte::new(Pfn(7), true));
            for _ in 0..i % 97 {
                std::hint::spin_loop();
            }
            let old = pt.get_and_clear(slot);
            assert!(old.is_present() && old.pfn() == Pfn(7), "{old:?}");
        }
    });
    assert_eq!(pt.load(slot), Pte::NONE, "a cleared entry came back");
    assert!(teardown(pt).is_empty());
}

#[test]
fn pte_lock_is_per_table_only_in_split_mode() {
    pagelab_sync::stats::set_enabled(true);
    for mode in MODES {
        let mem = mem(4);
        mem.enter_lock_stats();
        let d = mem.lock_stat_domain().clone();
        let split = Arc::new(SplitPtl::new(mem.pages().len(), LockKind::Queued));
        let pt = PageTable::new(mem, CPU, mode, LockKind::Queued, Some(split.clone())).unwrap();
        let a = map(&pt, PMD_SIZE, Pte::new(Pfn(1), true));
        let a2 = pt.walk_alloc(CPU, PMD_SIZE + PAGE).unwrap();
        let b = map(&pt, 2 * PMD_SIZE, Pte::new(Pfn(2), true));
        assert_ne!(a.table, b.table);
        d.reset();
        {
            let _g = pt.pte_lock(a);
            assert!(pt.try_pte_lock(a2).is_none(), "same table, same lock");
            match mode {
                Ptl::Mm | Ptl::Atomic => {
                    assert!(pt.try_pte_lock(b).is_none(), "one lock for the whole mm");
                    assert!(pt.page_table_lock().try_lock().is_none());
                    assert!(pt.split_ptl().is_none());
                }
                Ptl::Split => {
                    assert!(pt.try_pte_lock(b).is_some(), "another table's lock is free");
                    assert!(pt.page_table_lock().try_lock().is_some());
                    assert!(Arc::ptr_eq(pt.split_ptl().unwrap(), &split));
                }
            }
        }
        let (mm, sp) = (
            d.class(&PAGE_TABLE_LOCK).exclusive.acquisitions,
            d.class(&PTE_PTL).exclusive.acquisitions,
        );
        match mode {
            Ptl::Mm | Ptl::Atomic => assert_eq!((mm, sp), (1, 0)),
            // pte_lock(a) and try_pte_lock(b) on split locks, try_lock of the mm lock.
            Ptl::Split => assert_eq!((mm, sp), (1, 2)),
        }
        assert_eq!(pt.ptl_mode(), mode);
        if mode == Ptl::Split {
            // Each PTE table has its own lock, the one of its frame, and no other table's.
            let slots: Vec<PteSlot> = (0..24u64)
                .map(|i| pt.walk_alloc(CPU, (8 + i) * PMD_SIZE).unwrap())
                .collect();
            for (i, si) in slots.iter().enumerate() {
                let _g = pt.pte_lock(*si);
                assert!(split.lock_of(si.table).is_locked());
                for (j, sj) in slots.iter().enumerate() {
                    if i != j {
                        assert!(!split.lock_of(sj.table).is_locked());
                        assert!(pt.try_pte_lock(*sj).is_some(), "tables {i} and {j}");
                    }
                }
            }
        }
        teardown(pt);
    }
}

/// Ranges of "VMAs" around a freed one: a table that a neighbour's span reaches into is kept.
#[test]
fn free_pgtables_keeps_tables_shared_with_neighbours() {
    for mode in MODES {
        let mem = mem(4);
        let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
        let zap = |s: u64, e: u64| {
            let mut n = 0;
            pt.zap_range(CPU, s, e, |_, _| n += 1);
            n
        };
        // A = [2M, 3M) and B = [3M, 4M) share one PTE table.
        map(&pt, PMD_SIZE, Pte::new(Pfn(1), true));
        let mb = 3 * (1 << 20);
        map(&pt, mb, Pte::new(Pfn(2), true));
        assert_eq!(pt.nr_tables(), 4);
        // Unmap B: floor is A's end, so the shared PTE table stays, and A's PTE with it.
        assert_eq!(zap(mb, 4 << 20), 1);
        pt.free_pgtables(CPU, mb, 4 << 20, mb, TASK_SIZE);
        assert_eq!(pt.nr_tables(), 4);
        assert_eq!(pt.load(pt.walk(PMD_SIZE).unwrap()), Pte::new(Pfn(1), true));
        // Floor one page into the table's span: still kept.
        pt.free_pgtables(CPU, mb, 4 << 20, PMD_SIZE + PAGE, TASK_SIZE);
        assert_eq!(pt.nr_tables(), 4);
        // Unmap A too, with the previous VMA ending exactly where the PTE table starts: the
        // PTE table goes, the PMD table [0, 1G) the previous VMA reaches into stays.
        assert_eq!(zap(PMD_SIZE, mb), 1);
        pt.free_pgtables(CPU, PMD_SIZE, mb, PMD_SIZE, TASK_SIZE);
        assert_eq!(pt.check().unwrap(), [0, 1, 1, 1]);
        // With no VMA left, a later unmap frees the rest.
        pt.free_pgtables(CPU, PMD_SIZE, mb, 0, TASK_SIZE);
        assert_eq!(pt.nr_tables(), 1);

        // Ceiling one page before the end of the table's span: kept; at its end: freed, with
        // the PMD table [0, 1G) kept because the next VMA is in it.
        map(&pt, 2 * PMD_SIZE, Pte::new(Pfn(3), true));
        map(&pt, 3 * PMD_SIZE, Pte::new(Pfn(4), true));
        assert_eq!(pt.nr_tables(), 5);
        assert_eq!(zap(2 * PMD_SIZE, 3 * PMD_SIZE), 1);
        pt.free_pgtables(
            CPU,
            2 * PMD_SIZE,
            3 * PMD_SIZE - PAGE,
            0,
            3 * PMD_SIZE - PAGE,
        );
        assert_eq!(pt.nr_tables(), 5);
        pt.free_pgtables(CPU, 2 * PMD_SIZE, 3 * PMD_SIZE, 0, 3 * PMD_SIZE);
        assert_eq!(pt.nr_tables(), 4);
        assert_eq!(pt.walk(2 * PMD_SIZE), None);
        assert_eq!(pt.translate(3 * PMD_SIZE, false), Some(Pfn(4)));
        assert_eq!(zap(3 * PMD_SIZE, 4 * PMD_SIZE), 1);
        pt.free_pgtables(CPU, 3 * PMD_SIZE, 4 * PMD_SIZE, 0, TASK_SIZE);
        assert_eq!(pt.nr_tables(), 1);

        // Upper levels: A = [1G - 2M, 1G), B = [1G, 1G + 2M). Unmapping A frees its PTE table
        // and the PMD table [0, 1G), but not the PUD table B needs.
        map(&pt, PUD_SIZE - PMD_SIZE, Pte::new(Pfn(5), true));
        map(&pt, PUD_SIZE, Pte::new(Pfn(6), true));
        assert_eq!(pt.check().unwrap(), [2, 2, 1, 1]);
        assert_eq!(zap(PUD_SIZE - PMD_SIZE, PUD_SIZE), 1);
        pt.free_pgtables(CPU, PUD_SIZE - PMD_SIZE, PUD_SIZE, 0, PUD_SIZE);
        assert_eq!(pt.check().unwrap(), [1, 1, 1, 1]);
        assert_eq!(pt.translate(PUD_SIZE, true), Some(Pfn(6)));
        // B's PMD table stays as long as a VMA at 1G + 2M (ceiling) shares its span, but its
        // PTE table goes.
        assert_eq!(zap(PUD_SIZE, PUD_SIZE + PMD_SIZE), 1);
        pt.free_pgtables(CPU, PUD_SIZE, PUD_SIZE + PMD_SIZE, 0, PUD_SIZE + PMD_SIZE);
        assert_eq!(pt.check().unwrap(), [0, 1, 1, 1]);
        // Unmapping [5G, 6G), where no table exists, next to that VMA (one page long) frees
        // nothing: the PUD table overlaps the range but the VMA below reaches into its span.
        let vma_end = PUD_SIZE + PMD_SIZE + PAGE;
        pt.free_pgtables(CPU, 5 * PUD_SIZE, 6 * PUD_SIZE, vma_end, TASK_SIZE);
        assert_eq!(pt.check().unwrap(), [0, 1, 1, 1]);
        // Once that VMA is gone too (floor 0), the same call frees the PUD table and, below
        // it, the PMD table.
        pt.free_pgtables(CPU, 5 * PUD_SIZE, 6 * PUD_SIZE, 0, TASK_SIZE);
        assert_eq!(pt.check().unwrap(), [0, 0, 0, 1]);
        teardown(pt);
    }
}

#[test]
fn destroy_and_drop_free_every_table() {
    for mode in MODES {
        let mem = mem(4);
        let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
        for i in 0..20u64 {
            pt.walk_alloc(CPU, i * (PGDIR_SIZE / 4 + PUD_SIZE + PMD_SIZE))
                .unwrap();
        }
        let n = pt.nr_tables() as u64;
        assert_eq!(allocated(&mem), n);
        pt.destroy(CPU);
        assert_eq!(allocated(&mem), 0);

        // Dropped without destroy, even with PTEs left: the tables still go back.
        let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
        map(&pt, 3 * PUD_SIZE, Pte::new(Pfn(9), true));
        assert_eq!(allocated(&mem), 4);
        drop(pt);
        assert_eq!(allocated(&mem), 0);
    }
}

#[test]
fn allocation_failure_is_reported_and_recoverable() {
    let mem = Arc::new(Mem::new(&MemConfig::new(4 << 20, 1), &Policy::default()).unwrap());
    let pt = PageTable::new(mem.clone(), CPU, Ptl::Split, LockKind::Queued, None).unwrap();
    let mut hog = Vec::new();
    while let Ok(p) = mem.alloc_page(CPU, Gfp::KERNEL) {
        hog.push(p);
    }
    assert!(matches!(
        pt.walk_alloc(CPU, PUD_SIZE),
        Err(AllocError::OutOfMemory { .. })
    ));
    assert_eq!(pt.walk(PUD_SIZE), None);
    pt.check().unwrap();
    for p in hog {
        mem.free_pages(CPU, p, 0);
    }
    map(&pt, PUD_SIZE, Pte::new(Pfn(3), true));
    assert_eq!(pt.translate(PUD_SIZE, false), Some(Pfn(3)));
    assert_eq!(pt.check().unwrap(), [1, 1, 1, 1]);
    teardown(pt);
}

// ---- Model-based property test ----

/// The window the property test works in: 8 PTE tables' worth of addresses straddling the
/// boundary between PGD entries 0 and 1, so that PTE, PMD and PUD tables all come and go.
const WIN_BASE: u64 = PGDIR_SIZE - 4 * PMD_SIZE;
const WIN_PAGES: u32 = 8 * PTRS_PER_TABLE as u32;

fn waddr(page: u32) -> u64 {
    WIN_BASE + u64::from(page) * PAGE
}

#[derive(Clone, Debug)]
enum Op {
    /// Map a page: read-only, writable, or a swap entry.
    Set { page: u32, kind: u8, val: u32 },
    /// An MMU access.
    Touch { page: u32, write: bool },
    /// Zap `len` pages.
    Zap { page: u32, len: u32 },
    /// Unmap: zap what the tables to be freed still map, then free_pgtables. `None` floor or
    /// ceiling stand for 0 and TASK_SIZE.
    Free {
        page: u32,
        len: u32,
        floor_back: Option<u32>,
        ceiling_fwd: Option<u32>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..WIN_PAGES, 0..3u8, 1..1_000_000u32)
            .prop_map(|(page, kind, val)| Op::Set { page, kind, val }),
        2 => (0..WIN_PAGES, any::<bool>()).prop_map(|(page, write)| Op::Touch { page, write }),
        1 => (0..WIN_PAGES, 1..1500u32).prop_map(|(page, len)| Op::Zap { page, len }),
        2 => (
            0..WIN_PAGES,
            1..2048u32,
            proptest::option::of(0..1500u32),
            proptest::option::of(0..1500u32)
        )
            .prop_map(|(page, len, floor_back, ceiling_fwd)| Op::Free {
                page,
                len,
                floor_back,
                ceiling_fwd
            }),
    ]
}

/// The reference model: the PTEs, and the tables that exist as `(level, base)`, level 0 being
/// PTE tables, 1 PMD tables, 2 PUD tables (the PGD always exists).
#[derive(Default)]
struct Model {
    ptes: BTreeMap<u64, Pte>,
    tables: BTreeSet<(u32, u64)>,
}

fn span(level: u32) -> u64 {
    PMD_SIZE << (9 * level)
}

impl Model {
    fn add_tables(&mut self, addr: u64) {
        for level in 0..3 {
            self.tables.insert((level, addr & !(span(level) - 1)));
        }
    }

    /// Tables free_pgtables must free: those whose span overlaps [start, end) and lies within
    /// [floor, ceiling), and every table below one of those.
    fn freed(&self, start: u64, end: u64, floor: u64, ceiling: u64) -> BTreeSet<(u32, u64)> {
        let rule = |&(level, base): &(u32, u64)| {
            let s = span(level);
            base < end && base + s > start && base >= floor && base + s <= ceiling
        };
        self.tables
            .iter()
            .filter(|&&(level, base)| (level..3).any(|l| rule(&(l, base & !(span(l) - 1)))))
            .copied()
            .collect()
    }

    fn counts(&self) -> [usize; 4] {
        let mut c = [0, 0, 0, 1];
        for &(level, _) in &self.tables {
            c[level as usize] += 1;
        }
        c
    }
}

/// Zap [s, e) in both and require that the zap reports exactly the model's entries.
fn zap_both(pt: &PageTable, model: &mut Model, s: u64, e: u64) {
    let mut got = Vec::new();
    pt.zap_range(CPU, s, e, |a, p| got.push((a, p)));
    let want: Vec<(u64, Pte)> = model.ptes.range(s..e).map(|(&a, &p)| (a, p)).collect();
    assert_eq!(got, want, "zap of {s:#x}..{e:#x}");
    for (a, _) in want {
        model.ptes.remove(&a);
    }
}

fn check_against(pt: &PageTable, model: &Model) {
    for page in 0..WIN_PAGES {
        let a = waddr(page);
        let has_table = model.tables.contains(&(0, a & !(PMD_SIZE - 1)));
        match pt.walk(a) {
            Some(slot) => {
                assert!(has_table, "unexpected PTE table for {a:#x}");
                let want = model.ptes.get(&a).copied().unwrap_or(Pte::NONE);
                assert_eq!(pt.load(slot), want, "PTE of {a:#x}");
            }
            None => {
                assert!(!has_table, "missing PTE table for {a:#x}");
                assert!(!model.ptes.contains_key(&a), "lost PTE of {a:#x}");
            }
        }
    }
    assert_eq!(pt.check().unwrap(), model.counts());
    assert_eq!(pt.nr_tables(), 1 + model.tables.len());
    // At least the tables the PTEs need (more may stay after a zap without free_pgtables).
    let needed: BTreeSet<(u32, u64)> = model
        .ptes
        .keys()
        .flat_map(|&a| (0..3).map(move |l| (l, a & !(span(l) - 1))))
        .collect();
    assert!(needed.is_subset(&model.tables));
}

fn run_model(mode: Ptl, ops: &[Op]) {
    let mem = mem(4);
    let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
    let mut model = Model::default();
    let win_end = waddr(WIN_PAGES);
    for op in ops {
        match *op {
            Op::Set { page, kind, val } => {
                let a = waddr(page);
                let pte = match kind {
                    0 => Pte::new(Pfn(val), false),
                    1 => Pte::new(Pfn(val), true),
                    _ => Pte::swap(u64::from(val)),
                };
                let slot = map(&pt, a, pte);
                assert_eq!(pt.walk(a), Some(slot));
                model.add_tables(a);
                model.ptes.insert(a, pte);
            }
            Op::Touch { page, write } => {
                let a = waddr(page);
                let want = match model.ptes.get_mut(&a) {
                    Some(p) if p.is_present() && (!write || p.writable()) => {
                        *p = p.with_accessed(true).with_dirty(p.dirty() || write);
                        Some(p.pfn())
                    }
                    _ => None,
                };
                assert_eq!(pt.translate(a + 8, write), want, "translate {a:#x}");
            }
            Op::Zap { page, len } => {
                let end = (page + len).min(WIN_PAGES);
                zap_both(&pt, &mut model, waddr(page), waddr(end));
            }
            Op::Free {
                page,
                len,
                floor_back,
                ceiling_fwd,
            } => {
                let start = waddr(page);
                let end = waddr((page + len).min(WIN_PAGES));
                let floor = floor_back.map_or(0, |b| waddr(page.saturating_sub(b)));
                let ceiling = ceiling_fwd.map_or(TASK_SIZE, |f| {
                    waddr(((page + len).min(WIN_PAGES) + f).min(WIN_PAGES))
                });
                let freed = model.freed(start, end, floor, ceiling);
                for &(level, base) in &freed {
                    if level == 0 {
                        zap_both(&pt, &mut model, base, base + PMD_SIZE);
                    }
                }
                pt.free_pgtables(CPU, start, end, floor, ceiling);
                for t in &freed {
                    model.tables.remove(t);
                }
            }
        }
        check_against(&pt, &model);
    }
    zap_both(&pt, &mut model, WIN_BASE, win_end);
    assert!(model.ptes.is_empty());
    assert!(teardown(pt).is_empty());
    assert_eq!(allocated(&mem), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn page_table_matches_model(split in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        run_model(if split { Ptl::Split } else { Ptl::Mm }, &ops);
    }
}

/// A fixed sequence that must free upper tables: the PUD and PMD tables on both sides of the
/// PGD boundary, in one free_pgtables call with floor 0 and ceiling TASK_SIZE.
#[test]
fn model_frees_upper_levels_across_the_pgd_boundary() {
    for mode in MODES {
        run_model(
            mode,
            &[
                Op::Set {
                    page: 0,
                    kind: 1,
                    val: 1,
                },
                Op::Set {
                    page: WIN_PAGES - 1,
                    kind: 0,
                    val: 2,
                },
                Op::Set {
                    page: 2048,
                    kind: 2,
                    val: 3,
                },
                Op::Touch {
                    page: 0,
                    write: true,
                },
                Op::Free {
                    page: 100,
                    len: 2048,
                    floor_back: None,
                    ceiling_fwd: None,
                },
                Op::Free {
                    page: 3000,
                    len: 1000,
                    floor_back: Some(1),
                    ceiling_fwd: Some(0),
                },
            ],
        );
    }
}

// ---- Concurrency ----

const THREADS: usize = 8;

/// A barrier whose waiters spin (yielding) instead of sleeping, so that the threads that are
/// running when it opens leave it together: a sleeping barrier wakes its waiters one by one,
/// microseconds apart, and installs would rarely race. A thread that panics breaks it (see
/// [`PanicBreaks`]), releasing every waiter for good, so that a failure ends the test instead
/// of hanging it.
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    broken: AtomicBool,
    n: usize,
}

impl SpinBarrier {
    fn new(n: usize) -> Self {
        SpinBarrier {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            n,
        }
    }

    /// Wait for the others; `false` if the barrier is broken (the caller should stop).
    fn wait(&self) -> bool {
        let generation = self.generation.load(SeqCst);
        if self.arrived.fetch_add(1, SeqCst) + 1 == self.n {
            self.arrived.store(0, SeqCst);
            self.generation.fetch_add(1, SeqCst);
        } else {
            while self.generation.load(SeqCst) == generation && !self.is_broken() {
                std::thread::yield_now();
            }
        }
        !self.is_broken()
    }

    fn is_broken(&self) -> bool {
        self.broken.load(SeqCst)
    }
}
const ROUNDS: u64 = 48;
const OWN_PAGES: u64 = 16;

/// Fake frame number of thread `t`'s page `k` in round `r` (page tables never touch it).
fn tag(r: u64, t: usize, k: u64) -> Pfn {
    Pfn((r * 10_000 + t as u64 * 100 + k) as u32)
}

/// Each round uses a fresh PGD entry. In it, every thread maps (in an order that depends on the
/// thread) one page in a PTE table all threads share, `OWN_PAGES` pages in its own 2 MiB region
/// under the PMD table all threads share, and one page in its own 2 MiB region under a second
/// shared PMD table — so all threads race to install the PUD table, both PMD tables and the
/// shared PTE table, then store into one PTE table under its lock at the same time.
fn racer(pt: &PageTable, t: usize, barrier: &SpinBarrier) {
    let cpu = CpuId(t as u16);
    let _break_on_panic = PanicBreaks(barrier);
    let set = |a: u64, pfn: Pfn| {
        let slot = pt.walk_alloc(cpu, a).unwrap();
        let _ptl = pt.pte_lock(slot);
        assert_eq!(pt.load(slot), Pte::NONE, "{a:#x} was mapped twice");
        pt.set(slot, Pte::new(pfn, true));
    };
    for r in 0..ROUNDS {
        let base = r * PGDIR_SIZE;
        // Everyone is done with the previous round; then the main thread takes
        // page_table_lock; then the round starts.
        if !barrier.wait() || !barrier.wait() {
            return;
        }
        for step in 0..3 {
            match (step + t) % 3 {
                0 => set(base + t as u64 * PAGE, tag(r, t, 99)),
                1 => {
                    for k in 0..OWN_PAGES {
                        set(base + (1 + t as u64) * PMD_SIZE + k * PAGE, tag(r, t, k));
                    }
                }
                _ => set(base + 5 * PUD_SIZE + t as u64 * PMD_SIZE, tag(r, t, 50)),
            }
        }
        for k in 0..OWN_PAGES {
            let a = base + (1 + t as u64) * PMD_SIZE + k * PAGE;
            assert_eq!(pt.translate(a, true), Some(tag(r, t, k)));
        }
    }
}

/// Breaks the barrier if its thread panics.
struct PanicBreaks<'a>(&'a SpinBarrier);

impl Drop for PanicBreaks<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.broken.store(true, SeqCst);
        }
    }
}

fn install_race(mode: Ptl) {
    let mem = mem(THREADS);
    let pt = PageTable::new(mem.clone(), CPU, mode, LockKind::Queued, None).unwrap();
    let barrier = SpinBarrier::new(THREADS + 1);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pt, barrier) = (&pt, &barrier);
            s.spawn(move || racer(pt, t, barrier));
        }
        // Hold page_table_lock as each round starts: every worker reads the round's empty PGD
        // entry, allocates a PUD table and queues for the lock to install it, so that most
        // of them lose the install race. (Only a nudge to the scheduler: nothing below
        // depends on how many races happen.)
        let _break_on_panic = PanicBreaks(&barrier);
        for _ in 0..ROUNDS {
            if !barrier.wait() {
                break;
            }
            let held = pt.page_table_lock().lock();
            if !barrier.wait() {
                break;
            }
            while !pt.page_table_lock().is_contended() && !barrier.is_broken() {
                std::thread::yield_now();
            }
            for _ in 0..THREADS {
                std::thread::yield_now();
            }
            drop(held);
        }
    });
    // Per round: one PUD table, two PMD tables, the shared PTE table, THREADS own PTE tables
    // under each PMD table.
    let rounds = ROUNDS as usize;
    assert_eq!(
        pt.check().unwrap(),
        [rounds * (1 + 2 * THREADS), rounds * 2, rounds, 1],
        "exactly one table per slot"
    );
    assert_eq!(
        allocated(&mem),
        pt.nr_tables() as u64,
        "racing losers' pages were freed"
    );
    eprintln!("{mode:?}: {} install races", pt.install_races());
    let mut want = Vec::new();
    for r in 0..ROUNDS {
        let base = r * PGDIR_SIZE;
        for t in 0..THREADS {
            let tu = t as u64;
            want.push((base + tu * PAGE, tag(r, t, 99)));
            for k in 0..OWN_PAGES {
                want.push((base + (1 + tu) * PMD_SIZE + k * PAGE, tag(r, t, k)));
            }
            want.push((base + 5 * PUD_SIZE + tu * PMD_SIZE, tag(r, t, 50)));
        }
    }
    want.sort();
    for &(a, pfn) in &want {
        assert_eq!(pt.translate(a, false), Some(pfn), "{a:#x}");
    }
    let got: Vec<(u64, Pfn)> = teardown(pt)
        .into_iter()
        .map(|(a, p)| (a, p.pfn()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn racing_installs_leave_one_table_per_slot_mm_lock() {
    install_race(Ptl::Mm);
}

#[test]
fn racing_installs_leave_one_table_per_slot_split_locks() {
    install_race(Ptl::Split);
}

/// Upper levels populated by compare-and-exchange, without `page_table_lock`.
#[test]
fn racing_installs_leave_one_table_per_slot_atomic() {
    install_race(Ptl::Atomic);
}
