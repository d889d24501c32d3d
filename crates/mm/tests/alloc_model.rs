//! Property tests of the page allocator against a reference model.
//!
//! Random sequences of allocations of every order on several CPUs, frees (on any CPU), local
//! and remote drains and prezero fills run against a `Mem` under each policy. The model keeps
//! the set of live blocks. After every step: each new block is aligned, inside the arena and
//! disjoint from every live block; `Mem::check` passes and counts exactly the live frames as
//! allocated. An allocation may fail only when the zone really cannot serve it. At the end,
//! freeing everything and draining coalesces the zone back into maximal blocks.

use std::collections::BTreeMap;

use pagelab_mm::alloc::buddy::{MAX_ORDER, MigrateType, Wmark};
use pagelab_mm::policy::{Allocator, Count, PcpLists, PcpTune};
use pagelab_mm::{AllocError, CpuId, Gfp, Mem, MemConfig, Pfn, Policy};
use pagelab_sync::LockKind;
use proptest::prelude::*;

const CPUS: usize = 3;
const ARENA: u64 = 8 << 20;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        cpu: u16,
        order: u32,
        mt: u8,
        zero: bool,
    },
    Free {
        pick: usize,
        cpu: u16,
    },
    DrainCpu {
        cpu: u16,
    },
    DrainAll,
    PrezeroFill,
    Decay,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..CPUS as u16, prop_oneof![4 => 0u32..=3, 1 => 4u32..=MAX_ORDER], 0u8..3, any::<bool>())
            .prop_map(|(cpu, order, mt, zero)| Op::Alloc { cpu, order, mt, zero }),
        5 => (any::<usize>(), 0..CPUS as u16).prop_map(|(pick, cpu)| Op::Free { pick, cpu }),
        1 => (0..CPUS as u16).prop_map(|cpu| Op::DrainCpu { cpu }),
        1 => Just(Op::DrainAll),
        1 => Just(Op::PrezeroFill),
        1 => Just(Op::Decay),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (0..6usize, any::<bool>(), any::<bool>()).prop_map(|(p, prezero, ticket)| {
        let mut pol = Policy::default();
        let (lists, batch, high, tune) = match p {
            0 => (PcpLists::None, Count::Auto, Count::Auto, PcpTune::Fixed),
            1 => (
                PcpLists::Order0,
                Count::Fixed(31),
                Count::Fixed(186),
                PcpTune::Fixed,
            ),
            2 => (
                PcpLists::HighOrder,
                Count::Fixed(7),
                Count::Fixed(28),
                PcpTune::Fixed,
            ),
            3 => (
                PcpLists::HighOrder,
                Count::Auto,
                Count::Auto,
                PcpTune::Fixed,
            ),
            // LLFree: no per-CPU lists, no prezeroing (see `alloc.allocator`).
            5 => (PcpLists::None, Count::Auto, Count::Auto, PcpTune::Fixed),
            _ => (
                PcpLists::HighOrder,
                Count::Auto,
                Count::Auto,
                PcpTune::Adaptive,
            ),
        };
        pol.pcp.lists = lists;
        pol.pcp.batch = batch;
        pol.pcp.high = high;
        pol.pcp.tune = tune;
        pol.alloc.prezero = prezero && p != 5;
        pol.alloc.prezero_pool = 64;
        if p == 5 {
            pol.alloc.allocator = Allocator::Llfree;
        }
        pol.locks.spinlock = if ticket {
            LockKind::Ticket
        } else {
            LockKind::Queued
        };
        pol
    })
}

/// Could the zone have served `order` at all once pcps and the pool were drained?
fn failure_is_legitimate(mem: &Mem, order: u32) -> bool {
    mem.zones().iter().enumerate().all(|(i, z)| {
        let below_min = !z.watermark_ok(order, Wmark::Min);
        if let Some(ll) = mem.llfree(i) {
            return below_min || !ll.has_free_block(order);
        }
        let fa = z.lock.lock();
        let no_block = (order..=MAX_ORDER).all(|o| fa.nr_free(o) == 0);
        below_min || no_block
    })
}

fn run(policy: &Policy, ops: &[Op]) -> Result<(), TestCaseError> {
    let mem = Mem::new(&MemConfig::new(ARENA, CPUS), policy).unwrap();
    let total = mem.managed_pages();
    // live blocks: start pfn -> order
    let mut live: BTreeMap<u32, u32> = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Alloc {
                cpu,
                order,
                mt,
                zero,
            } => {
                let mut gfp = Gfp::KERNEL.with_migratetype(MigrateType::ALL[mt as usize]);
                gfp.zero = zero;
                match mem.alloc_pages(CpuId(cpu), order, gfp) {
                    Ok(pfn) => {
                        let (s, e) = (pfn.0, pfn.0 + (1 << order));
                        prop_assert_eq!(s % (1 << order), 0, "misaligned block");
                        prop_assert!(e as usize <= mem.pages().len());
                        if let Some((&ls, &lo)) = live.range(..e).next_back() {
                            prop_assert!(
                                ls + (1 << lo) <= s,
                                "block {s:#x}+{order} overlaps live {ls:#x}+{lo}"
                            );
                        }
                        if zero {
                            for i in 0..(1 << order) {
                                prop_assert!(
                                    mem.arena().page_is_zero(Pfn(s + i)),
                                    "zeroed block not zero"
                                );
                            }
                        }
                        // Dirty the block so a later zeroed allocation must really zero it.
                        mem.arena().words(pfn)[7]
                            .store(0xdead, std::sync::atomic::Ordering::Relaxed);
                        live.insert(s, order);
                    }
                    Err(AllocError::OutOfMemory { .. }) => {
                        prop_assert!(
                            failure_is_legitimate(&mem, order),
                            "allocation of order {order} failed with memory free"
                        );
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e}"),
                }
            }
            Op::Free { pick, cpu } => {
                if live.is_empty() {
                    continue;
                }
                let (&s, &o) = live.iter().nth(pick % live.len()).unwrap();
                live.remove(&s);
                prop_assert!(mem.free_pages(CpuId(cpu), Pfn(s), o));
            }
            Op::DrainCpu { cpu } => mem.drain_local_pages(CpuId(cpu)),
            Op::DrainAll => mem.drain_all_pages(),
            Op::PrezeroFill => mem.prezero_fill(),
            Op::Decay => mem.decay_pcp_high(),
        }
        let census = mem.check().map_err(TestCaseError::fail)?;
        let want: u64 = live.values().map(|o| 1u64 << o).sum();
        prop_assert_eq!(census.allocated, want);
        prop_assert_eq!(census.free() + census.allocated, total);
    }
    for (s, o) in std::mem::take(&mut live) {
        mem.free_pages(CpuId(0), Pfn(s), o);
    }
    mem.drain_all_pages();
    // Pool pages are free but outside the buddy lists; an OOM-path drain returns them. Make
    // the pool give them back by allocating everything once more.
    let census = mem.check().map_err(TestCaseError::fail)?;
    prop_assert_eq!(census.allocated, 0);
    if let Some(ll) = mem.llfree(0) {
        // Every huge frame whole again: the largest order can be served from each pair.
        prop_assert_eq!(census.llfree, total);
        prop_assert!(ll.has_free_block(MAX_ORDER));
        for order in [0, 6, 7, 8, 9, MAX_ORDER] {
            let p = mem.alloc_pages(CpuId(0), order, Gfp::KERNEL);
            prop_assert!(
                p.is_ok(),
                "order {} after everything was freed: {:?}",
                order,
                p
            );
            mem.free_pages(CpuId(1), p.unwrap(), order);
        }
        mem.drain_all_pages();
        prop_assert_eq!(mem.check().map_err(TestCaseError::fail)?.llfree, total);
    } else if census.prezeroed == 0 {
        let z = &mem.zones()[0];
        let fa = z.lock.lock();
        prop_assert_eq!(
            fa.nr_free(MAX_ORDER),
            total >> MAX_ORDER,
            "free memory did not coalesce to max-order blocks"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_model(policy in policy(), ops in prop::collection::vec(op(), 1..200)) {
        run(&policy, &ops)?;
    }
}

/// Allocating every frame, freeing all and draining rebuilds the maximal blocks, for every
/// pcp policy: the exhaustive corner of the model test.
#[test]
fn full_cycle_coalesces_back() {
    for lists in [PcpLists::None, PcpLists::Order0, PcpLists::HighOrder] {
        let mut pol = Policy::default();
        pol.pcp.lists = lists;
        pol.pcp.tune = PcpTune::Fixed;
        let mem = Mem::new(&MemConfig::new(ARENA, 2), &pol).unwrap();
        let mut got = Vec::new();
        let mut gfp = Gfp::KERNEL;
        gfp.wmark = Wmark::Min;
        while let Ok(p) = mem.alloc_pages(CpuId((got.len() % 2) as u16), 0, gfp) {
            got.push(p);
        }
        let c = mem.check().unwrap();
        assert_eq!(c.allocated, got.len() as u64);
        assert!(mem.zones()[0].free_pages() <= mem.zones()[0].wmark[Wmark::Min as usize] as i64);
        for (i, p) in got.iter().enumerate() {
            mem.free_pages(CpuId((i % 2) as u16), *p, 0);
        }
        mem.drain_all_pages();
        let c = mem.check().unwrap();
        assert_eq!(c.allocated, 0);
        assert_eq!(c.buddy, mem.managed_pages());
        assert_eq!(
            mem.zones()[0].lock.lock().nr_free(MAX_ORDER),
            mem.managed_pages() >> MAX_ORDER
        );
    }
}

/// LLFree: allocating every frame at order 0 on two CPUs (reservations, refills from frees,
/// steals and the reservation-less fallback all run), freeing them all on the other CPU and
/// draining leaves every tree, huge frame and bitfield free again, every order servable, and
/// `NR_FREE_PAGES` exact.
#[test]
fn llfree_full_cycle() {
    let mut pol = Policy::default();
    pol.pcp.lists = PcpLists::None;
    pol.pcp.tune = PcpTune::Fixed;
    pol.alloc.allocator = pagelab_mm::policy::Allocator::Llfree;
    // 40 MiB: two full trees and a partial one.
    let mem = Mem::new(&MemConfig::new(40 << 20, 2), &pol).unwrap();
    let total = mem.managed_pages();
    let mut got = Vec::new();
    let mut gfp = Gfp::KERNEL;
    gfp.wmark = Wmark::Min;
    while let Ok(p) = mem.alloc_pages(CpuId((got.len() % 2) as u16), 0, gfp) {
        got.push(p);
    }
    let c = mem.check().unwrap();
    assert_eq!(c.allocated, got.len() as u64);
    assert_eq!(c.llfree + c.allocated, total);
    let z = &mem.zones()[0];
    assert!(z.free_pages() <= z.wmark[Wmark::Min as usize] as i64);
    let mut seen = std::collections::HashSet::new();
    assert!(
        got.iter().all(|p| seen.insert(p.0)),
        "a frame was handed out twice"
    );
    for (i, p) in got.iter().enumerate() {
        mem.free_pages(CpuId(((i + 1) % 2) as u16), *p, 0);
    }
    mem.drain_all_pages();
    let c = mem.check().unwrap();
    assert_eq!((c.allocated, c.llfree, c.buddy), (0, total, 0));
    assert_eq!(z.free_pages(), total as i64);
    let ll = mem.llfree(0).unwrap();
    assert!(ll.stats().reserves >= 3, "{:?}", ll.stats());
    let blocks: Vec<_> = (0..=MAX_ORDER)
        .map(|o| (o, mem.alloc_pages(CpuId(0), o, Gfp::KERNEL).unwrap()))
        .collect();
    for (o, p) in &blocks {
        assert_eq!(p.0 % (1 << o), 0, "order {o} misaligned");
    }
    assert_eq!(
        mem.check().unwrap().allocated,
        (0..=MAX_ORDER).map(|o| 1u64 << o).sum::<u64>()
    );
    for (o, p) in blocks {
        mem.free_pages(CpuId(1), p, o);
    }
    mem.drain_all_pages();
    assert_eq!(mem.check().unwrap().llfree, total);
}

#[test]
fn double_free_is_caught() {
    let mem = Mem::new(&MemConfig::new(ARENA, 1), &Policy::default()).unwrap();
    let p = mem.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
    assert!(mem.free_pages(CpuId(0), p, 0));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mem.free_pages(CpuId(0), p, 0)
    }));
    let msg = r.unwrap_err();
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or("");
    assert!(msg.contains("bad page state"), "{msg}");
}

#[test]
fn extra_references_delay_the_free() {
    let mem = Mem::new(&MemConfig::new(ARENA, 1), &Policy::default()).unwrap();
    let p = mem
        .alloc_pages(CpuId(0), 2, Gfp::KERNEL.with_comp())
        .unwrap();
    assert_eq!(mem.compound_head(p.offset(3)), p);
    mem.get_page(p);
    assert!(!mem.free_pages(CpuId(0), p, 2));
    assert_eq!(mem.check().unwrap().allocated, 4);
    assert!(mem.free_pages(CpuId(0), p, 2));
    assert_eq!(mem.check().unwrap().allocated, 0);
    assert_eq!(mem.compound_head(p.offset(3)), p.offset(3));
}

#[test]
fn invalid_order_is_an_error() {
    let mem = Mem::new(&MemConfig::new(ARENA, 1), &Policy::default()).unwrap();
    assert_eq!(
        mem.alloc_pages(CpuId(0), MAX_ORDER + 1, Gfp::KERNEL),
        Err(AllocError::InvalidOrder(MAX_ORDER + 1))
    );
}

/// Unmovable allocations that find only movable memory take over whole pageblocks instead of
/// salting every pageblock with a few pages.
#[test]
fn fallback_claims_pageblocks() {
    let mut pol = Policy::default();
    pol.pcp.lists = PcpLists::None;
    pol.pcp.tune = PcpTune::Fixed;
    let mem = Mem::new(&MemConfig::new(ARENA, 1), &pol).unwrap();
    let a = mem.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
    let b = mem.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
    let z = &mem.zones()[0];
    assert_eq!(z.pageblock_migratetype(a), MigrateType::Unmovable);
    // The second unmovable page comes from the claimed pageblock, not a fresh one.
    assert_eq!(a.0 >> 9, b.0 >> 9);
    assert_eq!(
        mem.events()
            .sum(pagelab_mm::vmstat::VmEvent::MigrateFallback),
        1
    );
    mem.free_pages(CpuId(0), a, 0);
    mem.free_pages(CpuId(0), b, 0);
    assert_eq!(mem.check().unwrap().allocated, 0);
}
