//! Lock statistics of the engine: counted per class in each kernel's own domain, by the threads
//! that run its tasks, and folded when read.
//!
//! This binary is the only one that owns the process-wide switch here: only
//! [`counts_follow_the_switch`] turns it off.

use std::sync::{Arc, Mutex};

use pagelab_mm::kernel::LockClassStats;
use pagelab_mm::policy::VmaLock;
use pagelab_mm::{CpuId, Kernel, MapKind, MemConfig, Policy};

const PAGES: u64 = 256;
const PAGE: u64 = 4096;

/// Only one test at a time may depend on the switch's position.
static SWITCH: Mutex<()> = Mutex::new(());

fn boot(cpus: usize) -> Arc<Kernel> {
    let mut p = Policy::default();
    // The 6.4 per-VMA rwsem: a reader acquisition per fault, the case the counters were moved for.
    p.mm.vma_lock = VmaLock::Rwsem;
    Kernel::new(&MemConfig::new(64 << 20, cpus), &p).unwrap()
}

/// `threads` tasks of one process fault `PAGES` pages each, each on a thread of its own.
/// Returns the address space, so that its teardown is not in the counts.
fn fault_threads(k: &Arc<Kernel>, threads: usize) -> Arc<pagelab_mm::Mm> {
    let mm = k.new_mm(CpuId(0)).unwrap();
    let tasks: Vec<_> = (0..threads)
        .map(|i| k.new_task(mm.clone(), CpuId(i as u16)))
        .collect();
    let base = tasks[0]
        .mmap(PAGES * PAGE * threads as u64, true, MapKind::Anon)
        .unwrap();
    k.reset_stats();
    std::thread::scope(|s| {
        for (i, t) in tasks.into_iter().enumerate() {
            s.spawn(move || {
                let at = base + i as u64 * PAGES * PAGE;
                for p in 0..PAGES {
                    t.store(at + p * PAGE, p).unwrap();
                }
            });
        }
    });
    mm
}

/// The classes only faults take here (kernel threads take zone and pcp locks at any time).
fn fault_path(s: &LockClassStats) -> [u64; 4] {
    [
        s.vma_lock.acquisitions,
        s.mmap_lock_read.acquisitions,
        s.mmap_lock_write.acquisitions,
        s.ptl.acquisitions,
    ]
}

fn check_faults(s: &LockClassStats, faults: u64, what: &str) {
    // Each fault takes its VMA's read lock, or falls back to mmap_lock for read (the first
    // fault after mmap, whose VMA is still marked write-locked by the mmap_lock sequence).
    assert_eq!(
        s.vma_lock.acquisitions + s.mmap_lock_read.acquisitions,
        faults,
        "{what}: one read lock per fault: {s:?}"
    );
    assert!(s.mmap_lock_read.acquisitions <= 2, "{what}: {s:?}");
    assert_eq!(s.mmap_lock_write.acquisitions, 0, "{what}: {s:?}");
    assert!(s.ptl.acquisitions >= faults, "{what}: {s:?}");
    assert!(s.pcp_lock.acquisitions >= faults / 64, "{what}: {s:?}");
}

/// Two kernels in one process count apart, each over all the threads that ran its tasks
/// (folded after the threads exited), and a reset zeroes one kernel's counts only.
#[test]
fn kernels_count_apart_over_their_threads() {
    let _g = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    pagelab_sync::stats::set_enabled(true);
    let (a, b) = (boot(2), boot(1));
    let _ma = fault_threads(&a, 2);
    let sa = a.lock_stats();
    check_faults(&sa, 2 * PAGES, "kernel a");
    assert_eq!(fault_path(&b.lock_stats()), [0; 4], "b ran nothing");

    let _mb = fault_threads(&b, 1);
    check_faults(&b.lock_stats(), PAGES, "kernel b");
    assert_eq!(
        fault_path(&a.lock_stats()),
        fault_path(&sa),
        "b's faults are not a's"
    );

    a.reset_stats();
    assert_eq!(fault_path(&a.lock_stats()), [0; 4]);
    check_faults(&b.lock_stats(), PAGES, "kernel b after a's reset");
}

/// With the switch off nothing is counted; switching it on counts again.
#[test]
fn counts_follow_the_switch() {
    let _g = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let k = boot(1);
    pagelab_sync::stats::set_enabled(false);
    let _m1 = fault_threads(&k, 1);
    assert_eq!(fault_path(&k.lock_stats()), [0; 4]);
    pagelab_sync::stats::set_enabled(true);
    let _m2 = fault_threads(&k, 1);
    check_faults(&k.lock_stats(), PAGES, "switched on");
}
