//! netpipe on small engines with the two profiles of its experiment: every send size delivers
//! every message once and in order, leaves no page allocated, and reaches the page allocator
//! the way each profile says (order-1..3 blocks through zone->lock on vanilla-4.9, through the
//! per-CPU lists on hopcpu). The counting assertions use runs of a fixed number of messages,
//! whose allocator events do not depend on timing.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_mm::vmstat::VmEvent;
use pagelab_mm::{Kernel, Policy};
use pagelab_workloads::engine;
use pagelab_workloads::netpipe::{Kmalloc, Netpipe, NetpipeParams, PairTotals, SEND_SIZES};
use pagelab_workloads::runner::{Hooks, SampleSpec};

const ARENA: u64 = 64 << 20;
const MESSAGES: u64 = 3000;

fn profile(name: &str) -> Policy {
    let text = match name {
        "vanilla-4.9" => include_str!("../../../profiles/vanilla-4.9.toml"),
        "hopcpu" => include_str!("../../../profiles/hopcpu.toml"),
        _ => unreachable!(),
    };
    Policy::from_toml_str(text).unwrap()
}

const PROFILES: [&str; 2] = ["vanilla-4.9", "hopcpu"];

fn boot(name: &str) -> Arc<Kernel> {
    engine::boot(&profile(name), ARENA, 2).unwrap()
}

/// zone->lock holds as the allocator's events count them.
fn zone_lock_holds(k: &Kernel) -> u64 {
    let ev = k.mem().events();
    [
        VmEvent::ZoneAlloc,
        VmEvent::ZoneFree,
        VmEvent::PcpRefill,
        VmEvent::PcpDrain,
        VmEvent::PcpDrainAll,
    ]
    .iter()
    .map(|&e| ev.sum(e))
    .sum()
}

/// The high-order callers (slab pages and `kmalloc_large` blocks of orders 1 to 3) on the
/// LLFree allocator: every message delivered, every page allocated and freed without a zone
/// lock or a per-CPU list, nothing leaked.
#[test]
fn every_size_runs_on_llfree_without_zone_lock() {
    let policy = Policy::from_toml_str(include_str!("../../../profiles/llfree.toml")).unwrap();
    for size in SEND_SIZES {
        let ctx = format!("llfree send-{size}");
        let k = engine::boot(&policy, ARENA, 2).unwrap();
        let mem = k.mem();
        let base = mem.check().unwrap();
        let np = Netpipe::new(&k, &NetpipeParams::new(1, size)).unwrap();
        mem.reset_stats();
        np.run_messages(MESSAGES).unwrap();
        assert_eq!(
            np.totals(),
            [PairTotals {
                sent: MESSAGES,
                received: MESSAGES
            }],
            "{ctx}"
        );
        let ev = mem.events();
        assert!(ev.sum(VmEvent::PgAlloc) > 0, "{ctx}");
        assert_eq!(zone_lock_holds(&k), 0, "{ctx}");
        assert_eq!(ev.sum(VmEvent::PcpAllocHit), 0, "{ctx}");
        let census = np
            .quiesce()
            .unwrap()
            .expect("the llfree profile runs no kthreads");
        assert_eq!(census.allocated, base.allocated, "{ctx}: {census:?}");
        assert_eq!(
            census.llfree + census.allocated,
            mem.managed_pages(),
            "{ctx}"
        );
    }
}

#[test]
fn every_size_delivers_every_message_in_order_and_leaks_nothing() {
    for name in PROFILES {
        let vanilla = name == "vanilla-4.9";
        for size in SEND_SIZES {
            let ctx = format!("{name} send-{size}");
            let k = boot(name);
            let mem = k.mem();
            let base = mem.check().unwrap();
            let np = Netpipe::new(&k, &NetpipeParams::new(1, size)).unwrap();
            let bytes = np.params().alloc_size();
            let order = np.kmalloc().page_order(bytes).unwrap();
            assert!(
                order >= 1,
                "{ctx}: every buffer class sits on high-order pages"
            );

            // A counted run: the events are exact.
            mem.reset_stats();
            np.run_messages(MESSAGES).unwrap();
            assert_eq!(
                np.totals(),
                [PairTotals {
                    sent: MESSAGES,
                    received: MESSAGES
                }],
                "{ctx}"
            );
            let slab = np.kmalloc().slab().stats();
            assert_eq!((slab.allocs(), slab.frees()), {
                let n = if Kmalloc::is_large(bytes) {
                    0
                } else {
                    MESSAGES
                };
                (n, n)
            });
            // Page-allocator calls: one per message each way above the largest kmalloc cache,
            // one per slab allocated or discarded below it.
            let (allocs, frees) = if Kmalloc::is_large(bytes) {
                (MESSAGES, MESSAGES)
            } else {
                (slab.alloc_slab, slab.free_slab)
            };
            let ev = mem.events();
            assert_eq!(ev.sum(VmEvent::PgAlloc), allocs << order, "{ctx}");
            assert_eq!(ev.sum(VmEvent::PgFree), frees << order, "{ctx}");
            if vanilla {
                // Order-0 lists only: every high-order call takes zone->lock.
                assert_eq!(ev.sum(VmEvent::PcpAllocHit), 0, "{ctx}");
                assert_eq!(ev.sum(VmEvent::ZoneAlloc), allocs, "{ctx}");
                assert_eq!(ev.sum(VmEvent::ZoneFree), frees, "{ctx}");
            } else {
                // High-order lists: every call is served per CPU; the zone sees batches.
                assert_eq!(ev.sum(VmEvent::PcpAllocHit), allocs, "{ctx}");
                assert_eq!(ev.sum(VmEvent::ZoneAlloc), 0, "{ctx}");
                assert_eq!(ev.sum(VmEvent::ZoneFree), 0, "{ctx}");
                assert!(zone_lock_holds(&k) <= (allocs + frees).div_ceil(2), "{ctx}");
            }

            // A short sampled run continues the same sequence numbers.
            let stop = AtomicBool::new(false);
            // Long enough that the pair runs within the window even on a loaded machine.
            let spec = SampleSpec {
                samples: 1,
                warmup: 1,
                interval: Duration::from_millis(150),
            };
            let c = np
                .run(
                    spec,
                    &stop,
                    Hooks {
                        measure_start: &mut || {},
                        sample: &mut |_, _, _| {},
                    },
                )
                .unwrap();
            assert_eq!(c.samples.len(), 1, "{ctx}");
            assert!(c.samples[0] > 0.0 && c.per_task[0] > 0, "{ctx}");
            let t = np.totals()[0];
            assert_eq!(t.sent, t.received, "{ctx}");
            assert!(t.sent >= MESSAGES + c.per_task[0], "{ctx}");

            // Nothing leaked: every slab given back, every frame free once the pcps drain.
            let census = np
                .quiesce()
                .unwrap()
                .expect("fixed pcp profiles run no kthreads");
            assert_eq!(census.allocated, base.allocated, "{ctx}: {census:?}");
            assert_eq!(census.pcp, 0, "{ctx}");
        }
    }
}

#[test]
fn hopcpu_takes_zone_lock_less_often_per_message() {
    // Lock statistics are process-wide; nothing in this test binary turns them off.
    pagelab_sync::stats::set_enabled(true);
    let mut per_1000 = Vec::new();
    for name in PROFILES {
        let k = boot(name);
        let np = Netpipe::new(&k, &NetpipeParams::new(1, 8192)).unwrap();
        // Warm the pcps, then count a fixed number of messages.
        np.run_messages(500).unwrap();
        k.mem().reset_stats();
        np.run_messages(4000).unwrap();
        let acq = k.mem().lock_stats().zone_lock.acquisitions;
        assert_eq!(
            acq,
            zone_lock_holds(&k),
            "{name}: lock count and events agree"
        );
        per_1000.push(acq as f64 * 1000.0 / 4000.0);
        np.quiesce().unwrap();
    }
    let (vanilla, hopcpu) = (per_1000[0], per_1000[1]);
    eprintln!("zone->lock per 1000 messages, send-8192: vanilla-4.9 {vanilla}, hopcpu {hopcpu}");
    // vanilla: an order-2 block per message, taken and given back under zone->lock.
    assert_eq!(vanilla, 2000.0);
    // hopcpu: one refill per few allocations, one drain per batch of frees.
    assert!(
        hopcpu * 4.0 < vanilla,
        "hopcpu {hopcpu} vs vanilla {vanilla}"
    );
    assert!(hopcpu > 0.0);
}

#[test]
fn several_pairs_run_side_by_side() {
    let k = engine::boot(&profile("hopcpu"), ARENA, 6).unwrap();
    let base = k.mem().check().unwrap();
    let np = Netpipe::new(&k, &NetpipeParams::new(3, 16384)).unwrap();
    np.run_messages(1000).unwrap();
    let stop = AtomicBool::new(false);
    let c = np
        .run(
            SampleSpec {
                samples: 2,
                warmup: 1,
                interval: Duration::from_millis(20),
            },
            &stop,
            Hooks {
                measure_start: &mut || {},
                sample: &mut |_, _, _| {},
            },
        )
        .unwrap();
    assert_eq!(c.per_task.len(), 3);
    for t in np.totals() {
        assert_eq!(t.sent, t.received);
        assert!(t.sent >= 1000);
    }
    assert_eq!(np.quiesce().unwrap().unwrap().allocated, base.allocated);
}

/// Per message of a fixed kmalloc/kfree sequence: page-allocator calls, slab-level lock
/// acquisitions (CPU, list and slab locks) and page-allocator lock acquisitions (zone and pcp).
#[derive(Debug, PartialEq)]
struct PathCounts {
    page_calls: u64,
    slab_locks: (u64, u64, u64),
    zone_lock: u64,
    pcp_lock: u64,
    batches: u64,
}

/// Allocate on CPU 0 and free on CPU 1 from one thread, so that the slab and page-allocator
/// decisions do not depend on timing: `depth` buffers in flight, and every `depth` messages a
/// burst where the receiver falls behind by three socket queues and then catches up, which
/// empties slabs beyond the partial list's `min_partial` and sends them back to the page
/// allocator (a steady FIFO of one queue reuses its slabs forever).
fn fixed_sequence(name: &str, bytes: usize, depth: usize, n: usize) -> PathCounts {
    use pagelab_mm::CpuId;
    let k = boot(name);
    // Lock statistics are kept per engine: this thread counts into this kernel's.
    k.mem().enter_lock_stats();
    let km = Kmalloc::new(k.mem().clone());
    let mut live = std::collections::VecDeque::new();
    // A first pass fills the pcps and the partial list; the second is counted.
    for pass in 0..2 {
        if pass == 1 {
            k.mem().reset_stats();
            km.slab().reset_stats();
        }
        for i in 0..n {
            live.push_back(km.kmalloc(CpuId(0), bytes).unwrap());
            // The receiver frees nothing for three windows of `depth` messages in four.
            let lagging = !(i / depth).is_multiple_of(4);
            while !lagging && live.len() > depth {
                km.kfree(CpuId(1), live.pop_front().unwrap());
            }
        }
    }
    let ev = k.mem().events();
    let locks = k.mem().lock_stats();
    let sl = km.slab().lock_stats();
    let s = km.slab().stats();
    let counts = PathCounts {
        page_calls: if Kmalloc::is_large(bytes) {
            2 * n as u64
        } else {
            s.alloc_slab + s.free_slab
        },
        slab_locks: (
            sl.cpu_lock.acquisitions,
            sl.list_lock.acquisitions,
            sl.slab_lock.acquisitions,
        ),
        zone_lock: locks.zone_lock.acquisitions,
        pcp_lock: locks.pcp_lock.acquisitions,
        batches: ev.sum(VmEvent::PcpRefill) + ev.sum(VmEvent::PcpDrain),
    };
    while let Some(o) = live.pop_front() {
        km.kfree(CpuId(1), o);
    }
    counts
}

#[test]
fn high_order_pcp_adds_no_lock_to_the_slab_path() {
    // The question behind hopcpu's losses at send-1024..3312: does the high-order pcp cost the
    // slab path anything? The slab layer must take the same locks as often on both profiles,
    // and each page-allocator call exactly one allocator lock (zone->lock on vanilla-4.9,
    // pcp->lock on hopcpu), plus one zone->lock hold per pcp batch on hopcpu.
    pagelab_sync::stats::set_enabled(true);
    for size in [1024, 2048, 3312, 4096, 8192] {
        let bytes = pagelab_workloads::netpipe::skb_alloc_size(size);
        let depth = NetpipeParams::new(1, size).depth();
        let v = fixed_sequence("vanilla-4.9", bytes, depth, 6000);
        let h = fixed_sequence("hopcpu", bytes, depth, 6000);
        let ctx = format!("send-{size}: vanilla {v:?} hopcpu {h:?}");
        assert!(
            v.page_calls > 0,
            "{ctx}: the sequence reaches the page allocator"
        );
        assert_eq!(v.page_calls, h.page_calls, "{ctx}");
        assert_eq!(v.slab_locks, h.slab_locks, "{ctx}");
        assert_eq!((v.pcp_lock, v.batches), (0, 0), "{ctx}");
        assert_eq!(v.zone_lock, v.page_calls, "{ctx}");
        assert_eq!(h.pcp_lock, h.page_calls, "{ctx}");
        assert_eq!(h.zone_lock, h.batches, "{ctx}");
        assert!(h.zone_lock + h.pcp_lock <= v.zone_lock + h.batches, "{ctx}");
    }
}

/// Slabs a lock-step run of `n` messages at `size` allocates and discards per 1000 messages
/// (after a warm-up of a few sockets), on `name`'s allocator.
fn lockstep_slab_turnover(name: &str, size: usize, n: u64) -> (f64, f64) {
    let k = boot(name);
    let np = Netpipe::new(&k, &NetpipeParams::new(1, size)).unwrap();
    assert!(np.params().lockstep, "lock-step is the default pacing");
    np.run_messages(5000).unwrap();
    np.kmalloc().slab().reset_stats();
    np.run_messages(n).unwrap();
    let s = np.kmalloc().slab().stats();
    np.quiesce().unwrap();
    let per = |v: u64| v as f64 * 1000.0 / n as f64;
    (per(s.alloc_slab), per(s.free_slab))
}

#[test]
fn lockstep_turns_keep_slab_turnover_at_a_free_running_pairs() {
    // A free-running pair's socket stays partly full, so its slabs go back to the page
    // allocator 1 to 15 times per 1000 messages at send-64 (the runs behind
    // experiments/netpipe-hopcpu-2016.toml). Lock-step turns that empty the whole socket free
    // 278 buffers in a row, which empties their slabs: 43 slabs allocated and discarded per
    // 1000 messages. Turns of one release step keep the socket three-quarters full.
    for name in PROFILES {
        for size in [64, 256] {
            let (new, free) = lockstep_slab_turnover(name, size, 40_000);
            eprintln!("{name} send-{size}: slab_new {new} slab_free {free} per 1000 messages");
            assert!(
                new <= 15.0 && free <= 15.0,
                "{name} send-{size}: {new} slabs allocated and {free} discarded per 1000 messages"
            );
        }
    }
}
