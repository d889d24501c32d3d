//! Multi-threaded stress of the page allocator: more threads than cores, every policy, frees on
//! other CPUs than the allocating one, remote drains, the zeroer and the vmstat worker all
//! running at once. Each block carries a signature written by its owner and verified before its
//! free, which catches a block handed to two owners. At the end every frame must be back.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;

use pagelab_mm::alloc::buddy::MigrateType;
use pagelab_mm::policy::{Allocator, Count, PcpLists, PcpTune};
use pagelab_mm::{CpuId, Gfp, MemConfig, PageAllocator, Pfn, Policy};
use pagelab_sync::LockKind;

const THREADS: usize = 8;
const OPS: usize = 6_000;

fn policies() -> Vec<(&'static str, Policy)> {
    let mk = |lists, batch, high, tune, prezero, lock| {
        let mut p = Policy::default();
        p.pcp.lists = lists;
        p.pcp.batch = batch;
        p.pcp.high = high;
        p.pcp.tune = tune;
        p.alloc.prezero = prezero;
        p.alloc.prezero_pool = 256;
        p.locks.spinlock = lock;
        p
    };
    use Count::{Auto, Fixed};
    let mut llfree = mk(
        PcpLists::None,
        Auto,
        Auto,
        PcpTune::Fixed,
        false,
        LockKind::Queued,
    );
    llfree.alloc.allocator = Allocator::Llfree;
    vec![
        // Remote drains here give back reservations other threads are allocating from.
        ("llfree", llfree),
        (
            "zone only",
            mk(
                PcpLists::None,
                Auto,
                Auto,
                PcpTune::Fixed,
                false,
                LockKind::Queued,
            ),
        ),
        (
            "order0 ticket",
            mk(
                PcpLists::Order0,
                Fixed(31),
                Fixed(186),
                PcpTune::Fixed,
                false,
                LockKind::Ticket,
            ),
        ),
        (
            "high-order small",
            mk(
                PcpLists::HighOrder,
                Fixed(3),
                Fixed(12),
                PcpTune::Fixed,
                false,
                LockKind::Queued,
            ),
        ),
        (
            "adaptive",
            mk(
                PcpLists::HighOrder,
                Auto,
                Auto,
                PcpTune::Adaptive,
                false,
                LockKind::Queued,
            ),
        ),
        (
            "prezero",
            mk(
                PcpLists::Order0,
                Fixed(15),
                Fixed(90),
                PcpTune::Fixed,
                true,
                LockKind::Ticket,
            ),
        ),
    ]
}

/// A tiny deterministic generator per thread (no shared RNG state between threads).
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn signature(t: usize, seq: usize) -> u64 {
    ((t as u64) << 48) | seq as u64 | 1 << 63
}

#[test]
fn stress_every_policy_with_cross_cpu_frees() {
    for (name, policy) in policies() {
        let alloc = PageAllocator::new(&MemConfig::new(64 << 20, THREADS), &policy).unwrap();
        let mem = &*alloc;
        let total = mem.managed_pages();
        let stop_drainer = AtomicBool::new(false);
        // Thread t sends some of its blocks to thread (t+1) % THREADS, which frees them on its
        // own CPU.
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS)
            .map(|_| mpsc::channel::<(Pfn, u32, u64)>())
            .unzip();
        std::thread::scope(|s| {
            s.spawn(|| {
                // Remote drains and decay racing the owners' trylocks.
                while !stop_drainer.load(Relaxed) {
                    mem.drain_all_pages();
                    mem.decay_pcp_high();
                    std::thread::yield_now();
                }
            });
            let mut handles = Vec::new();
            for (t, rx) in rxs.into_iter().enumerate() {
                let tx = txs[(t + 1) % THREADS].clone();
                handles.push(s.spawn(move || {
                    let cpu = CpuId(t as u16);
                    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 7919));
                    let mut mine: Vec<(Pfn, u32, u64)> = Vec::new();
                    let check_and_free = |(p, o, sig): (Pfn, u32, u64)| {
                        let w = mem.arena().words(p);
                        assert_eq!(
                            w[0].load(Relaxed),
                            sig,
                            "{name}: block {p:?} was handed to two owners"
                        );
                        mem.free_pages(cpu, p, o);
                    };
                    for seq in 0..OPS {
                        while let Ok(b) = rx.try_recv() {
                            check_and_free(b);
                        }
                        let r = rng.next();
                        if !r.is_multiple_of(3) || mine.is_empty() {
                            let order = [0, 0, 0, 0, 1, 2, 3, 5][(r >> 8) as usize % 8];
                            let mt = MigrateType::ALL[(r >> 16) as usize % 3];
                            let gfp = if r & (1 << 20) != 0 {
                                Gfp::USER_ZERO
                            } else {
                                Gfp::KERNEL
                            }
                            .with_migratetype(mt);
                            if let Ok(p) = mem.alloc_pages(cpu, order, gfp) {
                                if gfp.zero {
                                    assert!(
                                        mem.arena().page_is_zero(p),
                                        "{name}: zeroed page is dirty"
                                    );
                                }
                                let sig = signature(t, seq);
                                mem.arena().words(p)[0].store(sig, Relaxed);
                                mine.push((p, order, sig));
                            }
                        } else {
                            let i = (r >> 24) as usize % mine.len();
                            let b = mine.swap_remove(i);
                            if r & (1 << 40) != 0 {
                                // The receiver may have finished; then free it here.
                                if let Err(mpsc::SendError(b)) = tx.send(b) {
                                    check_and_free(b);
                                }
                            } else {
                                check_and_free(b);
                            }
                        }
                    }
                    for b in mine {
                        check_and_free(b);
                    }
                    rx
                }));
            }
            drop(txs);
            let rxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            // Blocks sent to threads that had already finished.
            for (t, rx) in rxs.into_iter().enumerate() {
                for (p, o, sig) in rx.try_iter() {
                    assert_eq!(mem.arena().words(p)[0].load(Relaxed), sig);
                    mem.free_pages(CpuId(t as u16), p, o);
                }
            }
            stop_drainer.store(true, Relaxed);
        });
        let mut alloc = alloc;
        alloc.stop_kthreads();
        alloc_check(&alloc, name, total);
    }
}

fn alloc_check(alloc: &PageAllocator, name: &str, total: u64) {
    alloc.drain_all_pages();
    let c = alloc.check().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(c.allocated, 0, "{name}: {} frames leaked", c.allocated);
    assert_eq!(c.free(), total, "{name}");
}

/// The zeroer keeps refilling its pool in the background; an invariant check that lands in the
/// middle of a fill must wait for the batch in flight rather than report its pages as lost.
#[test]
fn check_waits_for_the_zeroer() {
    let mut policy = Policy::default();
    policy.alloc.prezero = true;
    policy.alloc.prezero_pool = 256;
    let alloc = PageAllocator::new(&MemConfig::new(32 << 20, 1), &policy).unwrap();
    let total = alloc.managed_pages();
    let cpu = CpuId(0);
    for round in 0..300u32 {
        // Empty the pool so the zeroer has a fill to do, then check while it may be filling.
        let pages: Vec<Pfn> = (0..300)
            .filter_map(|_| alloc.alloc_pages(cpu, 0, Gfp::USER_ZERO).ok())
            .collect();
        for p in pages {
            alloc.free_pages(cpu, p, 0);
        }
        std::thread::sleep(std::time::Duration::from_micros(u64::from(round % 7) * 700));
        let c = alloc
            .check()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(c.free() + c.allocated, total);
        assert_eq!(c.allocated, 0, "round {round}");
    }
    let mut alloc = alloc;
    alloc.stop_kthreads();
    alloc_check(&alloc, "prezero", total);
}
