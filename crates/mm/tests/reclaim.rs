//! Reclaim and swap on the whole engine: address spaces larger than memory, written and read
//! back through swap-out and swap-in, by one task and by more tasks than cores; unmapping
//! swapped memory; out of memory without swap. After every run: every value read is the last
//! one written, and once everything is unmapped no frame, swap slot or swap-cache entry is
//! left (the swap device's own census and the allocator's agree).

use std::sync::Arc;

use pagelab_mm::policy::MglruMove;
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
    k.stop_kswapd();
    k.drain_deferred_mms();
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
    one_task(&Policy::default());
}

/// MGLRU with either move policy.
fn mglru(bulk: bool) -> Policy {
    let mut p = Policy::default();
    p.lru.mglru = true;
    p.lru.mglru_move = if bulk {
        MglruMove::Bulk
    } else {
        MglruMove::PerFolio
    };
    p
}

#[test]
fn mglru_one_task_writes_and_reads_back_twice_its_memory() {
    for bulk in [false, true] {
        let k = one_task(&mglru(bulk));
        assert!(events(&k, VmEvent::MglruAging) > 0, "MGLRU never aged");
    }
}

/// A hot region touched between every stretch of a cold stream twice the size of memory: the
/// hot pages must stay resident (the walk finds them young, eviction moves them out of the
/// oldest generation), so a last pass over them swaps almost nothing in.
fn hot_pages_survive_a_cold_stream(policy: &Policy) -> Arc<Kernel> {
    let k = kernel(32 << 20, Some(96 << 8), 1, policy);
    // Direct reclaim only: one thread does all the aging and eviction, so what the walk finds
    // young does not depend on when the host schedules kswapd.
    k.stop_kswapd();
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let (hot_len, cold_len) = (4u64 << 20, 64u64 << 20);
    let hot = t.mmap(hot_len, true, MapKind::Anon).unwrap();
    let cold = t.mmap(cold_len, true, MapKind::Anon).unwrap();
    let touch_hot = |r: u64| {
        for i in 0..hot_len / PAGE {
            t.store(hot + i * PAGE, value(0, i, r)).unwrap();
        }
    };
    for r in 0..2 {
        for chunk in 0..cold_len / (1 << 20) {
            touch_hot(r);
            for i in 0..(1 << 20) / PAGE {
                let p = chunk * ((1 << 20) / PAGE) + i;
                t.store(cold + p * PAGE, value(1, p, r)).unwrap();
            }
        }
    }
    assert!(events(&k, VmEvent::PSwpOut) > cold_len / PAGE / 2);
    let before = events(&k, VmEvent::FaultSwap);
    for i in 0..hot_len / PAGE {
        assert_eq!(t.load(hot + i * PAGE).unwrap(), value(0, i, 1));
    }
    let swapped_in = events(&k, VmEvent::FaultSwap) - before;
    assert!(
        swapped_in * 10 < hot_len / PAGE,
        "{swapped_in} of {} hot pages had been swapped out",
        hot_len / PAGE
    );
    for i in 0..cold_len / PAGE {
        assert_eq!(t.load(cold + i * PAGE).unwrap(), value(1, i, 1), "cold {i}");
    }
    t.munmap(hot, hot_len).unwrap();
    t.munmap(cold, cold_len).unwrap();
    drop(t);
    drop(mm);
    check_empty(&k, "hot and cold");
    k
}

#[test]
fn hot_pages_survive_a_cold_stream_classic() {
    hot_pages_survive_a_cold_stream(&Policy::default());
}

#[test]
fn hot_pages_survive_a_cold_stream_mglru() {
    for bulk in [false, true] {
        let k = hot_pages_survive_a_cold_stream(&mglru(bulk));
        assert!(
            events(&k, VmEvent::MglruPromoted) > 0,
            "the walk found no young page in the oldest generation"
        );
        assert!(events(&k, VmEvent::MglruGenMoved) > 0);
    }
}

#[test]
fn mglru_more_tasks_than_cores_threads_bulk() {
    many_tasks(true, &mglru(true));
}

#[test]
fn mglru_more_tasks_than_cores_processes_per_folio() {
    many_tasks(false, &mglru(false));
}

fn one_task(policy: &Policy) -> Arc<Kernel> {
    // 32 MiB of memory, 96 MiB of swap, a 64 MiB working set.
    let k = kernel(32 << 20, Some(96 << 8), 1, policy);
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
    // The address space's checks need it quiescent: no kswapd pass changing it meanwhile.
    t.idle();
    k.stop_kswapd();
    t.resume();
    t.sync_rss();
    mm.check(true).unwrap();
    t.munmap(a, len).unwrap();
    drop(t);
    drop(mm);
    check_empty(&k, "one task");
    k
}

/// A barrier that a panicking task breaks instead of leaving the others waiting forever.
#[derive(Default)]
struct Rendezvous {
    arrived: std::sync::atomic::AtomicUsize,
    broken: std::sync::atomic::AtomicBool,
}

struct BreakOnPanic<'a>(&'a Rendezvous);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .broken
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Rendezvous {
    fn on_panic(&self) -> BreakOnPanic<'_> {
        BreakOnPanic(self)
    }

    fn wait(&self, n: usize) {
        use std::sync::atomic::Ordering::SeqCst;
        self.arrived.fetch_add(1, SeqCst);
        while self.arrived.load(SeqCst) < n {
            assert!(!self.broken.load(SeqCst), "another task panicked");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
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
    let all_written = Rendezvous::default();
    std::thread::scope(|s| {
        for ti in 0..TASKS {
            let k = &k;
            let shared = &shared;
            let all_written = &all_written;
            s.spawn(move || {
                let _leave = all_written.on_panic();
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
                        all_written.wait(TASKS);
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

/// The LLFree allocator (profile `llfree`): kswapd and direct reclaim read the zone's free
/// count, which LLFree keeps per CPU and folds; swapping through it must lose nothing.
fn llfree() -> Policy {
    Policy::from_toml_str(include_str!("../../../profiles/llfree.toml")).unwrap()
}

#[test]
fn llfree_one_task_writes_and_reads_back_twice_its_memory() {
    one_task(&llfree());
}

#[test]
fn llfree_more_tasks_than_cores_processes() {
    many_tasks(false, &llfree());
}

#[test]
fn llfree_memcg_at_its_limit_reclaims_only_from_itself() {
    memcg_at_limit(&llfree());
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

fn memcg_kernel(
    arena: u64,
    swap_pages: Option<u64>,
    memcgs: usize,
    policy: &Policy,
) -> Arc<Kernel> {
    let swap = swap_pages.map(|p| SwapConfig::new(p, Backing::Memory { compress: false }, 2));
    let cfg = MemConfig::new(arena, 2).with_memcgs(memcgs);
    Kernel::with_swap(&cfg, policy, swap).unwrap()
}

/// A group limited to 8 MiB writes 24 MiB and reads it back: its charge never passes the
/// limit, its own pages are swapped, and a task of the root group beside it keeps every page.
#[test]
fn a_memcg_at_its_limit_reclaims_only_from_itself() {
    memcg_at_limit(&Policy::default());
}

#[test]
fn mglru_memcg_at_its_limit_reclaims_only_from_itself() {
    memcg_at_limit(&mglru(true));
}

fn memcg_at_limit(policy: &Policy) {
    let k = memcg_kernel(96 << 20, Some(64 << 8), 3, policy);
    let max_pages = (8 << 20) / PAGE;
    k.mem().memcgs().set_max(1, max_pages).unwrap();
    let limited = k.new_mm(CpuId(0)).unwrap();
    limited.set_memcg(1).unwrap();
    let free = k.new_mm(CpuId(1)).unwrap();
    let tl = k.new_task(limited.clone(), CpuId(0));
    let tf = k.new_task(free.clone(), CpuId(1));
    let (big, small) = (24u64 << 20, 8u64 << 20);
    let a = tl.mmap(big, true, MapKind::Anon).unwrap();
    let b = tf.mmap(small, true, MapKind::Anon).unwrap();
    for i in 0..small / PAGE {
        tf.store(b + i * PAGE, value(1, i, 0)).unwrap();
    }
    for r in 0..2 {
        for i in 0..big / PAGE {
            tl.store(a + i * PAGE, value(0, i, r)).unwrap();
            if i % 512 == 0 {
                let s = k.mem().memcgs().stat(1).unwrap();
                assert!(
                    s.usage <= max_pages,
                    "usage {} over max {max_pages}",
                    s.usage
                );
            }
        }
        for i in 0..big / PAGE {
            assert_eq!(tl.load(a + i * PAGE).unwrap(), value(0, i, r), "page {i}");
        }
    }
    let s = k.mem().memcgs().stat(1).unwrap();
    assert!(s.usage <= max_pages && s.usage > max_pages / 2, "{s:?}");
    assert!(s.max_events > 0 && s.reclaimed > 0, "{s:?}");
    assert!(events(&k, VmEvent::MemcgReclaim) > 0);
    // Memory was never short: nothing of the root group's task went to swap.
    tf.sync_rss();
    assert_eq!(
        free.rss.sum(pagelab_mm::vm::rss::RssType::Anon),
        (small / PAGE) as i64,
        "the unlimited group lost pages"
    );
    for i in 0..small / PAGE {
        assert_eq!(tf.load(b + i * PAGE).unwrap(), value(1, i, 0));
    }
    tl.munmap(a, big).unwrap();
    tf.munmap(b, small).unwrap();
    // Pages still pinned by a per-CPU LRU add batch are freed (and uncharged) by its drain.
    k.lru().drain_all();
    no_charges_left(&k);
    drop((tl, tf, limited, free));
    check_empty(&k, "memcg");
}

/// A group whose limit is too small for its working set and which has no swap to reclaim to
/// fails the fault with out of memory, counted as the group's OOM, and nothing is lost.
#[test]
fn a_memcg_too_small_without_swap_is_out_of_memory() {
    let k = memcg_kernel(32 << 20, None, 2, &Policy::default());
    k.mem().memcgs().set_max(1, 256).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    mm.set_memcg(1).unwrap();
    assert!(mm.set_memcg(2).is_err(), "group 2 does not exist");
    let t = k.new_task(mm.clone(), CpuId(0));
    let len = 4 << 20;
    let a = t.mmap(len, true, MapKind::Anon).unwrap();
    let mut written = 0;
    let err = (0..len / PAGE).find_map(|i| {
        let r = t.store(a + i * PAGE, 7).err();
        written += u64::from(r.is_none());
        r
    });
    assert!(matches!(err, Some(FaultError::Oom { .. })), "{err:?}");
    assert_eq!(written, 256, "the group holds exactly its limit");
    let s = k.mem().memcgs().stat(1).unwrap();
    assert_eq!((s.usage, s.oom_events), (256, 1), "{s:?}");
    t.munmap(a, len).unwrap();
    k.lru().drain_all();
    no_charges_left(&k);
}

/// No page holds a charge of group 1: what its counter holds is what the CPUs' charge stocks
/// hold, and drained, nothing.
fn no_charges_left(k: &Kernel) {
    let m = k.mem().memcgs();
    let s = m.stat(1).unwrap();
    assert_eq!(s.usage, s.stocked, "charges left: {s:?}");
    m.drain_all_stocks();
    assert_eq!(m.stat(1).unwrap().usage, 0, "stocks drained");
}

/// With memory overcommitted, allocations that dip under the low watermark wake kswapd,
/// which reclaims in the background.
#[test]
fn kswapd_reclaims_when_woken() {
    let k = kernel(32 << 20, Some(96 << 8), 1, &Policy::default());
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let len = 64 << 20;
    let a = t.mmap(len, true, MapKind::Anon).unwrap();
    for r in 0..2 {
        for i in 0..len / PAGE {
            t.store(a + i * PAGE, value(0, i, r)).unwrap();
        }
    }
    assert!(events(&k, VmEvent::KswapdWake) > 0, "kswapd never woken");
    // kswapd runs when the host schedules it; give it the chance before judging.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while events(&k, VmEvent::PgStealKswapd) == 0 && std::time::Instant::now() < deadline {
        for i in 0..len / PAGE {
            assert_eq!(t.load(a + i * PAGE).unwrap(), value(0, i, 1));
        }
    }
    assert!(
        events(&k, VmEvent::PgStealKswapd) > 0,
        "kswapd reclaimed nothing"
    );
    t.munmap(a, len).unwrap();
    drop(t);
    drop(mm);
    check_empty(&k, "kswapd");
}

/// A shared file twice the size of memory, written through 8 MiB windows mapped one at a
/// time, then read back the same way, with no swap: reclaim evicts the unmapped page-cache
/// pages, writing the dirty ones back, and faults read them in again with what was written.
fn file_pages_round_trip(policy: &Policy) -> Arc<Kernel> {
    let k = Kernel::new(&MemConfig::new(32 << 20, 1), policy).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let window = 8u64 << 20;
    let windows = 8u64;
    let file = k.create_file(windows * window / PAGE);
    let map = |w: u64, writable: bool| {
        t.mmap(
            window,
            writable,
            MapKind::File {
                file: file.clone(),
                offset: w * window / PAGE,
                shared: true,
            },
        )
        .unwrap()
    };
    for w in 0..windows {
        let a = map(w, true);
        for i in 0..window / PAGE {
            t.store(a + i * PAGE, value(0, w * 4096 + i, 7)).unwrap();
        }
        t.munmap(a, window).unwrap();
    }
    assert!(
        events(&k, VmEvent::FileWriteback) > 0,
        "nothing was written back"
    );
    for w in 0..windows {
        let a = map(w, false);
        for i in 0..window / PAGE {
            assert_eq!(
                t.load(a + i * PAGE).unwrap(),
                value(0, w * 4096 + i, 7),
                "window {w} page {i}"
            );
        }
        t.munmap(a, window).unwrap();
    }
    assert!(events(&k, VmEvent::FileRead) > 0, "nothing was read back");
    assert!(file.nr_stored() > 0);
    t.lru_add_drain();
    drop(t);
    drop(mm);
    file.truncate(&k, CpuId(0));
    drop(file);
    k.lru().drain_all();
    k.mem().drain_all_pages();
    k.lru().check().unwrap();
    let c = k.mem().check().unwrap();
    assert!(c.allocated <= 4, "frames leaked: {c:?}");
    k
}

#[test]
fn file_pages_are_written_back_and_read_again() {
    file_pages_round_trip(&Policy::default());
}

#[test]
fn mglru_file_pages_are_written_back_and_read_again() {
    for bulk in [false, true] {
        file_pages_round_trip(&mglru(bulk));
    }
}
