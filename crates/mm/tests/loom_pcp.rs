//! Loom models of the per-CPU page list protocol, run on the real allocator code:
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_pcp`.
//!
//! Under loom the locks (`zone->lock`, `pcp->lock`) are built on loom's atomics, so loom
//! explores every interleaving of their acquisitions; the frame metadata they protect stays in
//! plain atomics, which is sound because it is only touched under those locks. Each model ends
//! with the allocator's full invariant check (every frame on exactly one list or allocated,
//! counts exact).
#![cfg(loom)]

use loom::thread;
use pagelab_mm::policy::{Count, PcpLists, PcpTune};
use pagelab_mm::{CpuId, Gfp, Mem, MemConfig, Policy};
use std::sync::Arc;

fn small_policy() -> Policy {
    let mut p = Policy::default();
    p.pcp.lists = PcpLists::Order0;
    p.pcp.batch = Count::Fixed(2);
    p.pcp.high = Count::Fixed(4);
    p.pcp.tune = PcpTune::Fixed;
    p
}

fn mem() -> Arc<Mem> {
    Arc::new(Mem::new(&MemConfig::new(4 << 20, 2), &small_policy()).unwrap())
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Interleaving covered: the owner of CPU 0 frees pages to its pcp (taking the pcp lock by
/// trylock) while another thread drains CPU 0's pcp remotely (taking it by a blocking lock).
/// Whenever the trylock loses, the free falls back to the zone; no frame is lost or listed
/// twice either way.
#[test]
fn trylock_free_falls_back_during_remote_drain() {
    model(|| {
        let m = mem();
        let a = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let b = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let m2 = m.clone();
        let drainer = thread::spawn(move || m2.drain_local_pages(CpuId(0)));
        m.free_pages(CpuId(0), a, 0);
        m.free_pages(CpuId(0), b, 0);
        drainer.join().unwrap();
        m.drain_all_pages();
        let c = m.check().unwrap();
        assert_eq!(c.allocated, 0);
        assert_eq!(c.buddy, m.managed_pages());
    });
}

/// Interleaving covered: CPU 0 refills its empty pcp from the zone (`rmqueue_bulk` under
/// zone->lock while holding pcp->lock) while a remote drain of CPU 0 runs. The drain either
/// waits for the refill and returns the refilled batch to the zone, or runs first and finds
/// nothing; the allocation either comes from the pcp or, if the trylock lost, straight from the
/// zone. Afterwards the census is exact.
#[test]
fn remote_drain_races_local_refill() {
    model(|| {
        let m = mem();
        let m2 = m.clone();
        let drainer = thread::spawn(move || m2.drain_all_pages());
        let p = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let q = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        assert_ne!(p, q);
        drainer.join().unwrap();
        let c = m.check().unwrap();
        assert_eq!(c.allocated, 2);
        m.free_pages(CpuId(0), p, 0);
        m.free_pages(CpuId(0), q, 0);
        m.drain_all_pages();
        assert_eq!(m.check().unwrap().allocated, 0);
    });
}

/// Interleaving covered: two CPUs allocating and freeing at once, one of them freeing a page the
/// other allocated (a cross-CPU free), with their pcps draining into the shared zone
/// (`high` = 4 forces drains). zone->lock serialises the bulk moves; the census is exact.
#[test]
fn two_cpus_share_the_zone() {
    model(|| {
        let m = mem();
        let first = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let m2 = m.clone();
        let other = thread::spawn(move || {
            let p = m2.alloc_page(CpuId(1), Gfp::KERNEL).unwrap();
            m2.free_pages(CpuId(1), first, 0);
            m2.free_pages(CpuId(1), p, 0);
        });
        let p = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        m.free_pages(CpuId(0), p, 0);
        other.join().unwrap();
        m.drain_all_pages();
        let c = m.check().unwrap();
        assert_eq!(c.allocated, 0);
    });
}
