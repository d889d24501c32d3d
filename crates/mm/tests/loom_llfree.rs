//! Loom models of the LLFree allocator's bitfield and reservation protocol, run on the real
//! allocator code: `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_llfree`.
//!
//! Under loom the allocator's bitfield words, huge-frame counters, tree counters and per-CPU
//! reservation words are loom atomics, so loom explores the interleavings of every
//! compare-and-exchange and read-modify-write on them. The arena of 4 MiB is one tree of two
//! huge frames: both CPUs meet in one tree and, as each searches from the first frame, in one
//! 64-frame bitfield word. Each model ends with the allocator's full invariant check (every
//! bit against its huge frame's counter, every tree counter plus the reservation holding it
//! against its huge frames, `NR_FREE_PAGES` against all of them).
#![cfg(loom)]

use loom::thread;
use pagelab_mm::policy::{Allocator, PcpLists, PcpTune};
use pagelab_mm::{CpuId, Gfp, Mem, MemConfig, Pfn, Policy};
use std::sync::Arc;

fn mem() -> Arc<Mem> {
    let mut p = Policy::default();
    p.pcp.lists = PcpLists::None;
    p.pcp.tune = PcpTune::Fixed;
    p.alloc.allocator = Allocator::Llfree;
    Arc::new(Mem::new(&MemConfig::new(4 << 20, 2), &p).unwrap())
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Everything freed: the census is exact and every frame is back in the allocator.
fn all_back(m: &Mem) {
    m.drain_all_pages();
    let c = m.check().unwrap();
    assert_eq!(c.allocated, 0);
    assert_eq!(c.llfree, m.managed_pages());
}

/// Interleaving covered: two CPUs allocate at once with no reservation yet. One reserves the
/// only tree; the other finds it reserved and steals the reservation (or, if the first one's
/// count is already back in the tree, reserves it in turn); both then claim a huge frame's
/// count and a bit in the same bitfield word. The two frames differ, and after both are freed
/// (each on the other CPU: into a tree the freeing CPU may or may not hold) every count
/// balances.
#[test]
fn two_cpus_never_get_one_frame() {
    model(|| {
        let m = mem();
        let m2 = m.clone();
        let other = thread::spawn(move || m2.alloc_page(CpuId(1), Gfp::KERNEL).unwrap());
        let a = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let b = other.join().unwrap();
        assert_ne!(a, b, "one frame handed to both CPUs");
        assert_eq!(m.check().unwrap().allocated, 2);
        let m2 = m.clone();
        let other = thread::spawn(move || {
            m2.free_pages(CpuId(1), a, 0);
        });
        m.free_pages(CpuId(0), b, 0);
        other.join().unwrap();
        all_back(&m);
    });
}

/// Interleaving covered: CPU 0 holds the tree's reservation and allocates and frees in it
/// (counts moving between its reservation word and the huge-frame counter) while CPU 1,
/// finding the tree reserved, steals the reservation. Either the steal lands between CPU 0's
/// steps, and CPU 0's free goes to the tree's shared counter (the tree is no longer its own)
/// and is later synced into CPU 1's reservation, or CPU 0 is done first. No frame is lost or
/// doubled either way.
#[test]
fn reservation_steal_races_the_owner() {
    model(|| {
        let m = mem();
        // CPU 0 reserves the tree.
        let first = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let m2 = m.clone();
        let thief = thread::spawn(move || m2.alloc_page(CpuId(1), Gfp::KERNEL).unwrap());
        let p = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        m.free_pages(CpuId(0), first, 0);
        let q = thief.join().unwrap();
        assert_ne!(p, q, "one frame handed to both CPUs");
        let c = m.check().unwrap();
        assert_eq!(c.allocated, 2);
        m.free_pages(CpuId(1), p, 0);
        m.free_pages(CpuId(0), q, 0);
        all_back(&m);
    });
}

/// Interleaving covered: a remote drain gives CPU 0's reservation back to the tree while CPU 0
/// allocates from it and frees into it, and the drain folds CPU 0's `NR_FREE_PAGES` delta.
/// Whatever CPU 0 took before the drain stays allocated, whatever it frees after goes to the
/// tree, and it re-reserves the tree when it next allocates.
#[test]
fn remote_drain_races_local_alloc_and_free() {
    model(|| {
        let m = mem();
        let first = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let m2 = m.clone();
        let drainer = thread::spawn(move || m2.drain_all_pages());
        let p = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        m.free_pages(CpuId(0), first, 0);
        drainer.join().unwrap();
        assert_ne!(p, first);
        assert_eq!(m.check().unwrap().allocated, 1);
        m.free_pages(CpuId(0), p, 0);
        all_back(&m);
    });
}

/// Interleaving covered: CPU 1 takes a whole huge frame (order 9: one exchange on its counter,
/// from the tree's shared counter) while CPU 0 allocates order-0 frames in the same tree. The
/// huge frame and the small frame never overlap: the small allocation's count claim on a huge
/// frame excludes the exchange to "allocated whole", and the other way round.
#[test]
fn huge_and_small_frames_never_overlap() {
    model(|| {
        let m = mem();
        let m2 = m.clone();
        let huge = thread::spawn(move || m2.alloc_pages(CpuId(1), 9, Gfp::KERNEL).ok());
        let small = m.alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        let huge: Option<Pfn> = huge.join().unwrap();
        if let Some(h) = huge {
            assert!(
                small.0 < h.0 || small.0 >= h.0 + 512,
                "{small:?} inside the huge frame at {h:?}"
            );
            m.free_pages(CpuId(0), h, 9);
        }
        m.free_pages(CpuId(1), small, 0);
        all_back(&m);
    });
}
