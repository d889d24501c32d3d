//! Reclaim and swap on the whole engine: address spaces larger than memory, written and read
//! back through swap-out and swap-in, by one task and by more tasks than cores; unmapping
//! swapped memory; out of memory without swap. After every run: every value read is the last
//! one written, and once everything is unmapped no frame, swap slot or swap-cache entry is
//! left (the swap device's own census and the allocator's agree).

use std::sync::Arc;

use pagelab_mm::reclaim::swap::{Backing, SwapConfig};
use pagelab_mm::vmstat::VmEvent;
use pagelab_mm::{CpuId, FaultError, Kernel, MapKind, MemConfig, Policy, Task};

const PAGE: u64 = 4096;

fn kernel(arena: u64, swap_pages: Option<u64>, cpus: usize, policy: &Policy) -> Arc<Kernel> {
    let swap = swap_pages.map(|p| SwapConfig::new(p, Backing::Memory { compress: false }, cpus));
    Kernel::with_swap(&MemConfig::new(arena, cpus), policy, swap).unwrap()
}

/// The value a task keeps in word 0 of page `i` of its region, in round `r`.
fn value(task: usize, i: u64, r: u64) -> u64 {
    ((task as u64) << 48) ^ (i << 8) ^ r ^ 0x5a5a_0000_0000
}

/// Unmapped everything: nothing may be left anywhere.
fn check_empty(k: &Kernel, what: &str) {
    k.lru().drain_all();
    k.mem().drain_all_pages();
    let swap = k.swap().unwrap();
    swap.drain_slot_caches();
    let s = swap.check().unwrap_or_else(|e| panic!("{what}: swap: {e}"));
    assert_eq!(
        swap.nr_free(),
        swap.size(),
        "{what}: swap slots leaked: {s:?}"
    );
    k.lru()
        .check()
        .unwrap_or_else(|e| panic!("{what}: lru: {e}"));
    let c = k.mem().check().unwrap_or_else(|e| panic!("{what}: {e}"));
    // Only the page tables' top levels remain (one PGD per live mm).
    assert!(c.allocated <= 4, "{what}: frames leaked: {c:?}");
}

fn events(k: &Kernel, e: VmEvent) -> u64 {
    // The swap device counts its own I/O.
    k.mem().events().sum(e) + k.swap().map_or(0, |s| s.events().sum(e))
}

#[test]
fn one_task_writes_and_reads_back_twice_its_memory() {
    let policy = Policy::default();
    // 32 MiB of memory, 96 MiB of swap, a 64 MiB working set.
    let k = kernel(32 << 20, Some(96 << 8), 1, &policy);
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let len = 64 << 20;
    let pages = len / PAGE;
    let a = t.mmap(len, true, MapKind::Anon).unwrap();
    for r in 0..3 {
        for i in 0..pages {
            t.store(a + i * PAGE, value(0, i, r)).unwrap();
        }
        for i in 0..pages {
            let got = t.load(a + i * PAGE).unwrap();
            assert_eq!(got, value(0, i, r), "page {i} round {r}");
        }
    }
    assert!(
        events(&k, VmEvent::PSwpOut) > pages,
        "memory was not overcommitted"
    );
    assert!(events(&k, VmEvent::PSwpIn) > 0);
    assert!(events(&k, VmEvent::FaultSwap) > 0);
    t.sync_rss();
    mm.check(true).unwrap();
    t.munmap(a, len).unwrap();
    drop(t);
    drop(mm);
    check_empty(&k, "one task");
}

/// Four tasks (threads of one mm, or four processes) on two cores, each writing and checking
/// its own region while reclaim swaps the others' out, unmapping and remapping half of it
/// every round.
fn many_tasks(threads: bool, policy: &Policy) {
    const TASKS: usize = 4;
    let k = kernel(24 << 20, Some(64 << 8), TASKS, policy);
    let len: u64 = 10 << 20;
    let pages = len / PAGE;
    let shared = k.new_mm(CpuId(0)).unwrap();
    // Every task's first region is written before any is unmapped: 40 MiB live in 24 MiB.
    let all_written = std::sync::Barrier::new(TASKS);
    std::thread::scope(|s| {
        for ti in 0..TASKS {
            let k = &k;
            let shared = &shared;
            let all_written = &all_written;
            s.spawn(move || {
                let mm = if threads {
                    shared.clone()
                } else {
                    k.new_mm(CpuId(ti as u16)).unwrap()
                };
                let t: Task = k.new_task(mm, CpuId(ti as u16));
                let mut a = t.mmap(len, true, MapKind::Anon).unwrap();
                for r in 0..4 {
                    for i in 0..pages {
                        t.store(a + i * PAGE, value(ti, i, r)).unwrap();
                    }
                    if r == 0 {
                        t.idle();
                        all_written.wait();
                        t.resume();
                    }
                    for i in 0..pages {
                        assert_eq!(
                            t.load(a + i * PAGE).unwrap(),
                            value(ti, i, r),
                            "task {ti} page {i} round {r}"
                        );
                    }
                    // Drop the region (much of it swapped out) and take a new one.
                    t.munmap(a, len).unwrap();
                    a = t.mmap(len, true, MapKind::Anon).unwrap();
                }
                t.munmap(a, len).unwrap();
                t.idle();
            });
        }
    });
    assert!(events(&k, VmEvent::PSwpOut) > 0, "no reclaim happened");
    drop(shared);
    check_empty(&k, if threads { "threads" } else { "processes" });
}

#[test]
fn more_tasks_than_cores_threads() {
    many_tasks(true, &Policy::default());
}

#[test]
fn more_tasks_than_cores_processes() {
    many_tasks(false, &Policy::default());
}

/// The older locking: mm-wide page_table_lock, no per-VMA locks, order-0 pcp.
#[test]
fn more_tasks_than_cores_with_2_6_13_locking() {
    let p = Policy::from_toml_str(
        "[mm]\nptl = \"mm\"\nvma_lock = \"none\"\nrss = \"atomic\"\n[pcp]\nlists = \"order0\"\nbatch = 15\nhigh = 90\n",
    )
    .unwrap();
    many_tasks(true, &p);
}

#[test]
fn without_swap_running_out_is_out_of_memory() {
    let policy = Policy::default();
    let k = kernel(16 << 20, None, 1, &policy);
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let len = 64 << 20;
    let a = t.mmap(len, true, MapKind::Anon).unwrap();
    let mut err = None;
    for i in 0..len / PAGE {
        if let Err(e) = t.store(a + i * PAGE, 1) {
            err = Some(e);
            break;
        }
    }
    assert!(matches!(err, Some(FaultError::Oom { .. })), "{err:?}");
    t.munmap(a, len).unwrap();
}

#[test]
fn a_full_swap_device_is_out_of_memory_then_recovers() {
    let policy = Policy::default();
    // 16 MiB of memory and 8 MiB of swap cannot hold 64 MiB.
    let k = kernel(16 << 20, Some(8 << 8), 1, &policy);
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let len = 64 << 20;
    let a = t.mmap(len, true, MapKind::Anon).unwrap();
    let mut written = 0;
    let mut err = None;
    for i in 0..len / PAGE {
        match t.store(a + i * PAGE, value(0, i, 0)) {
            Ok(()) => written += 1,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(matches!(err, Some(FaultError::Oom { .. })), "{err:?}");
    assert!(
        written * PAGE > 16 << 20,
        "swap was not used: {written} pages"
    );
    // Memory and swap are both full: a swapped page may not come back (a swap-in needs a
    // frame before it frees its slot), but whatever comes back is what was written.
    let mut back = 0;
    for i in 0..written {
        match t.load(a + i * PAGE) {
            Ok(v) => {
                assert_eq!(v, value(0, i, 0), "page {i}");
                back += 1;
            }
            Err(e) => assert!(matches!(e, FaultError::Oom { .. }), "{e}"),
        }
    }
    assert!(back > 0);
    t.munmap(a, len).unwrap();
    drop(t);
    drop(mm);
    check_empty(&k, "full swap");
}
