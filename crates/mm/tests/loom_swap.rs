//! Loom models of the per-CPU swap slot caches, run on the real `SwapDevice` code:
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_swap`.
//!
//! Under loom the device lock and each CPU's `alloc_lock` and `free_lock` are built on loom's
//! atomics, so loom explores every interleaving of their acquisitions (the owner's trylocks
//! included); the usage map and counters they guard stay in plain atomics, which is sound
//! because the transitions that matter happen under those locks. The devices are memory-backed
//! and never written, so no arena is needed. Each model ends with the device's full invariant
//! check (every slot free, in use, or in exactly one cache, counts exact) and then shows that
//! dropping every reference and draining gets every slot back.
#![cfg(loom)]

use loom::thread;
use pagelab_mm::CpuId;
use pagelab_mm::reclaim::swap::{Backing, SwapConfig, SwapDevice};
use std::sync::Arc;

/// 5 usable slots, 2 CPUs, caches of 2 slots that never deactivate.
fn device() -> Arc<SwapDevice> {
    let mut cfg = SwapConfig::new(6, Backing::Memory { compress: false }, 2);
    cfg.slot_cache = 2;
    cfg.slot_cache_auto = false;
    Arc::new(SwapDevice::new(cfg).unwrap())
}

fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.check(f);
}

/// Interleaving covered: CPU 0's owner takes a slot from its cache and then refills it (under
/// `alloc_lock`, then the device lock) while a drainer empties every cache (blocking on the
/// same locks) and a third thread frees a slot into CPU 0's return array (by trylock on
/// `free_lock`, falling back to the device when the drainer holds it). The owner's two slots
/// differ, and no slot is lost: after the owner's slots go back and a final drain, all 5 are
/// free.
#[test]
fn owner_allocates_while_caches_drain_and_a_slot_comes_back() {
    model(3, || {
        let d = device();
        // CPU 0's cache now holds one more slot.
        let e0 = d.folio_alloc_swap(CpuId(0)).unwrap();
        let d1 = d.clone();
        let drainer = thread::spawn(move || d1.drain_slot_caches());
        let d2 = d.clone();
        let freer = thread::spawn(move || assert_eq!(d2.put_swap_folio(CpuId(0), e0), Ok(true)));
        let a = d.folio_alloc_swap(CpuId(0)).unwrap();
        let b = d.folio_alloc_swap(CpuId(0)).unwrap();
        assert_ne!(a, b, "one slot handed out twice");
        drainer.join().unwrap();
        freer.join().unwrap();
        let c = d.check().unwrap();
        assert_eq!(c.in_use, 2);
        assert_eq!(c.free + c.cached + c.returned, 3);
        for e in [a, b] {
            assert_eq!(d.put_swap_folio(CpuId(1), e), Ok(true));
        }
        d.drain_slot_caches();
        let c = d.check().unwrap();
        assert_eq!((c.free, c.in_use), (5, 0));
    });
}

/// Interleaving covered: a free that finds CPU 1's return array full gives the batch back to
/// the device (`swapcache_free_entries` under `free_lock`, then the device lock) while a
/// drainer empties the same array (and CPU 1's cached slot). Every slot is returned exactly
/// once: the device's free-path assertion would fire on a slot freed twice, and the census is
/// exact at the end.
#[test]
fn return_array_flush_races_drain() {
    model(3, || {
        let d = device();
        let slots: Vec<_> = (0..3)
            .map(|_| d.folio_alloc_swap(CpuId(1)).unwrap())
            .collect();
        // Fill CPU 1's return array (2 slots).
        assert_eq!(d.put_swap_folio(CpuId(1), slots[0]), Ok(true));
        assert_eq!(d.put_swap_folio(CpuId(1), slots[1]), Ok(true));
        let d1 = d.clone();
        let drainer = thread::spawn(move || d1.drain_slot_caches());
        // The third free flushes the full array first.
        assert_eq!(d.put_swap_folio(CpuId(1), slots[2]), Ok(true));
        drainer.join().unwrap();
        let c = d.check().unwrap();
        assert_eq!(c.in_use, 0);
        assert_eq!(c.free + c.cached + c.returned, 5);
        d.drain_slot_caches();
        assert_eq!(d.check().unwrap().free, 5);
    });
}
