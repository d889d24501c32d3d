//! Stress runs of every workload on the engine, under every value of every switch (one switch
//! at a time from the default profile, plus the shipped-era combinations), with more tasks than
//! the machine has cores, in both modes. After each run the engine must be whole: every
//! address space passes its checks (RSS exact once tasks synced, no page table left after the
//! last munmap), and once the address spaces and files are gone every frame is free and the LRU
//! lists are consistent.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_mm::policy::{
    LruAdd, LruLockScope, LruRelease, MglruMove, MmapLock, PcpLists, PcpTune, Ptl, RssCounter,
    TlbShootdown, VmaLock, VmaLockFaults,
};
use pagelab_mm::{Kernel, Policy};
use pagelab_sync::LockKind;
use pagelab_workloads::engine::{self, EngineRun};
use pagelab_workloads::page_fault::{self, Variant};
use pagelab_workloads::pft::{self, PftParams};
use pagelab_workloads::runner::{Hooks, SampleSpec, run_continuous};
use pagelab_workloads::{Mode, WorkloadKind};

const TASKS: usize = 5;
const MEMSIZE: u64 = 1 << 20;

fn policies() -> Vec<(String, Policy)> {
    let base = Policy::default();
    let mut out = vec![("default".to_string(), base.clone())];
    let mut vary = |name: &str, f: &dyn Fn(&mut Policy)| {
        let mut p = base.clone();
        f(&mut p);
        out.push((name.to_string(), p));
    };
    vary("vma_lock=none", &|p| p.mm.vma_lock = VmaLock::None);
    vary("vma_lock=rwsem", &|p| p.mm.vma_lock = VmaLock::Rwsem);
    vary("vma_lock=rcu", &|p| p.mm.vma_lock = VmaLock::Rcu);
    vary("rcu, vma_lock_faults=anon, ptl=mm", &|p| {
        p.mm.vma_lock = VmaLock::Rcu;
        p.mm.vma_lock_faults = VmaLockFaults::Anon;
        p.mm.ptl = Ptl::Mm;
    });
    vary("mmap_lock=range", &|p| {
        p.mm.mmap_lock = MmapLock::Range;
        p.mm.vma_lock = VmaLock::None;
    });
    vary("vma_lock_faults=anon", &|p| {
        p.mm.vma_lock_faults = VmaLockFaults::Anon
    });
    vary("vma_lock_faults=anon+swap", &|p| {
        p.mm.vma_lock_faults = VmaLockFaults::AnonSwap
    });
    vary("rwsem, vma_lock_faults=anon", &|p| {
        p.mm.vma_lock = VmaLock::Rwsem;
        p.mm.vma_lock_faults = VmaLockFaults::Anon;
    });
    vary("munmap_downgrade=false", &|p| p.mm.munmap_downgrade = false);
    vary("ptl=mm", &|p| p.mm.ptl = Ptl::Mm);
    vary("ptl=atomic", &|p| p.mm.ptl = Ptl::Atomic);
    vary("ptl=atomic rss=per-thread", &|p| {
        p.mm.ptl = Ptl::Atomic;
        p.mm.rss = RssCounter::PerThread;
    });
    vary("anon_prefault=16", &|p| p.mm.anon_prefault = 16);
    vary("anon_prefault=511 ptl=atomic", &|p| {
        p.mm.anon_prefault = 511;
        p.mm.ptl = Ptl::Atomic;
    });
    vary("rss=atomic", &|p| p.mm.rss = RssCounter::Atomic);
    vary("rss=per-thread", &|p| p.mm.rss = RssCounter::PerThread);
    vary("tlb=none", &|p| p.mm.tlb_shootdown = TlbShootdown::None);
    vary("fault_around=0", &|p| p.mm.fault_around = 0);
    vary("lru.add=per-page", &|p| p.lru.add = LruAdd::PerPage);
    vary("lru.add=splice", &|p| p.lru.add = LruAdd::Splice);
    vary("lru.release=concurrent", &|p| {
        p.lru.release = LruRelease::Concurrent
    });
    vary("lru.release=batch-locks", &|p| {
        p.lru.release = LruRelease::BatchLocks
    });
    vary("lru.scope=global", &|p| {
        p.lru.lock_scope = LruLockScope::Global
    });
    vary("lru.scope=node", &|p| p.lru.lock_scope = LruLockScope::Node);
    vary("lru.batch=31", &|p| p.lru.batch = 31);
    vary("pcp=none", &|p| {
        p.pcp.lists = PcpLists::None;
        p.pcp.tune = PcpTune::Fixed;
    });
    vary("pcp=order0", &|p| {
        p.pcp.lists = PcpLists::Order0;
        p.pcp.tune = PcpTune::Fixed;
    });
    vary("spinlock=ticket", &|p| p.locks.spinlock = LockKind::Ticket);
    vary("mglru", &|p| p.lru.mglru = true);
    vary("mglru bulk", &|p| {
        p.lru.mglru = true;
        p.lru.mglru_move = MglruMove::Bulk;
    });
    vary("prezero", &|p| {
        p.alloc.prezero = true;
        p.alloc.prezero_pool = 256;
    });
    out.push(("llfree profile".to_string(), llfree()));
    out.push((
        "range-vm profile".to_string(),
        Policy::from_toml_str(include_str!("../../../profiles/range-vm.toml")).unwrap(),
    ));
    out
}

/// The shipped LLFree profile: the lock-free allocator in place of the buddy lists and pcps.
fn llfree() -> Policy {
    Policy::from_toml_str(include_str!("../../../profiles/llfree.toml")).unwrap()
}

/// Everything must be back once the run's address spaces are gone.
fn check_whole(k: &Kernel, erun: EngineRun, what: &str) {
    for mm in &erun.mms {
        mm.check(true).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Range locks keep the upper levels above an unmapped range until exit; the frame
        // census below still finds any table left behind.
        if !mm.range_locked() {
            assert_eq!(
                mm.pgtable.nr_tables(),
                1,
                "{what}: page tables left after munmap"
            );
        }
    }
    drop(erun);
    k.lru().drain_all();
    k.lru().check().unwrap_or_else(|e| panic!("{what}: {e}"));
    k.mem().drain_all_pages();
    let c = k.mem().check().unwrap_or_else(|e| panic!("{what}: {e}"));
    // Only the zero page stays, for the kernel's life.
    assert_eq!(
        c.allocated,
        Kernel::RESERVED_FRAMES,
        "{what}: {} frames leaked",
        c.allocated
    );
}

#[test]
fn page_fault_workloads_under_every_switch() {
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 1,
        warmup: 0,
        // Long enough that five tasks get some CPU even while other tests load both cores
        // (the progress check below is a liveness check, not a speed one).
        interval: Duration::from_millis(100),
    };
    for (name, policy) in policies() {
        for variant in [Variant::Anon, Variant::PrivateFile, Variant::SharedFile] {
            for mode in [Mode::Processes, Mode::Threads] {
                let what = format!("{name} {variant:?} {mode}");
                let k = engine::boot(&policy, 96 << 20, TASKS).unwrap();
                let (erun, vms) = engine::tasks(&k, TASKS, mode, false).unwrap();
                let r = run_continuous(
                    vms,
                    spec,
                    &stop,
                    Hooks {
                        measure_start: &mut || {},
                        sample: &mut |_, _, _| {},
                    },
                    |vm, c, halt| page_fault::task_loop(vm, variant, MEMSIZE, c, halt),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                // Which tasks got scheduled in so short a window is up to the host; the run as a
                // whole must have made progress.
                assert!(r.per_task.iter().sum::<u64>() > 0, "{what}: no progress");
                check_whole(&k, erun, &what);
            }
        }
    }
}

#[test]
fn pft_and_lameter_under_every_switch() {
    let stop = AtomicBool::new(false);
    for (name, policy) in policies() {
        for kind in [WorkloadKind::Pft, WorkloadKind::PftVmaPerThread] {
            for mode in [Mode::Processes, Mode::Threads] {
                let what = format!("{name} {kind} {mode}");
                let k = engine::boot(&policy, 64 << 20, TASKS).unwrap();
                let (erun, vms) = engine::tasks(&k, TASKS, mode, true).unwrap();
                let params = PftParams {
                    bytes: 8 << 20,
                    repetitions: 2,
                    vma_per_task: kind == WorkloadKind::PftVmaPerThread,
                };
                let (reps, _) =
                    pft::run(vms, mode == Mode::Threads, params, &stop, &mut |_, _, _| {})
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(reps.len(), 2);
                for r in &reps {
                    assert_eq!(
                        r.faults(),
                        (8 << 20) / 4096 / TASKS as u64 * TASKS as u64,
                        "{what}"
                    );
                    assert!(r.faults_per_cpu() > 0.0 && r.faults_per_sec() > 0.0);
                    assert!(r.sys_s().is_some(), "{what}: engine fault timing missing");
                }
                check_whole(&k, erun, &what);
            }
        }
    }
}

/// RadixVM's mapbench and CortenMM's tests under every switch: the shared forms split one VMA
/// under faults of other tasks, munmap splits it page by page, and after each run the engine
/// must be whole.
#[test]
fn research_workloads_under_every_switch() {
    use pagelab_workloads::cortenmm::{Contention, Corten, CortenParams, Op};
    use pagelab_workloads::mapbench;
    use pagelab_workloads::rounds::run_rounds;
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 1,
        warmup: 0,
        interval: Duration::from_millis(30),
    };
    // Hooks that do nothing; their closures live to the end of the call they are built in.
    macro_rules! hooks {
        () => {
            Hooks {
                measure_start: &mut || {},
                sample: &mut |_, _, _| {},
            }
        };
    }
    for (name, policy) in policies() {
        for mode in [Mode::Processes, Mode::Threads] {
            let what = format!("{name} mapbench {mode}");
            let k = engine::boot(&policy, 64 << 20, TASKS).unwrap();
            let (erun, vms) = engine::tasks(&k, TASKS, mode, false).unwrap();
            // As long as the page-fault runs above: a liveness check on a loaded host.
            let spec = SampleSpec {
                interval: Duration::from_millis(100),
                ..spec
            };
            let r = run_continuous(vms, spec, &stop, hooks!(), |vm, c, halt| {
                mapbench::local_loop(vm, 2, c, halt)
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(r.per_task.iter().sum::<u64>() > 0, "{what}: no progress");
            check_whole(&k, erun, &what);
        }
        let what = format!("{name} mapbench-shared");
        let k = engine::boot(&policy, 64 << 20, TASKS).unwrap();
        let (erun, vms) = engine::tasks(&k, TASKS, Mode::Threads, false).unwrap();
        let r = run_rounds(vms, spec, &stop, hooks!(), &mapbench::Shared { pages: 3 })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.rounds > 0, "{what}: no progress");
        check_whole(&k, erun, &what);
        for (op, contention) in [
            (Op::Mmap, Contention::Low),
            (Op::MmapPf, Contention::Low),
            (Op::Mmap, Contention::High),
            (Op::MmapPf, Contention::High),
            (Op::Pf, Contention::Low),
            (Op::Pf, Contention::High),
            (Op::Munmap, Contention::Low),
            (Op::Munmap, Contention::High),
        ] {
            let what = format!("{name} cortenmm {op:?} {contention:?}");
            let k = engine::boot(&policy, 64 << 20, TASKS).unwrap();
            let (erun, vms) = engine::tasks(&k, TASKS, Mode::Threads, false).unwrap();
            let params = CortenParams {
                op,
                contention,
                requests: 16,
            };
            let body = Corten::new(params, TASKS).unwrap();
            let r = run_rounds(vms, spec, &stop, hooks!(), &body)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(r.rounds > 0, "{what}: no progress");
            check_whole(&k, erun, &what);
        }
    }
}

/// A workload that needs more memory than the arena has stops with an out-of-memory error
/// instead of hanging or panicking, and leaves the engine whole.
#[test]
fn out_of_memory_stops_cleanly() {
    for (name, policy) in [("default", Policy::default()), ("llfree", llfree())] {
        out_of_memory_stops_cleanly_under(name, &policy);
    }
}

fn out_of_memory_stops_cleanly_under(name: &str, policy: &Policy) {
    let stop = AtomicBool::new(false);
    let k = engine::boot(policy, 16 << 20, 2).unwrap();
    let (erun, vms) = engine::tasks(&k, 2, Mode::Processes, false).unwrap();
    let r = run_continuous(
        vms,
        SampleSpec {
            samples: 2,
            warmup: 0,
            interval: Duration::from_millis(200),
        },
        &stop,
        Hooks {
            measure_start: &mut || {},
            sample: &mut |_, _, _| {},
        },
        |vm, c, halt| page_fault::task_loop(vm, Variant::Anon, 64 << 20, c, halt),
    );
    match r {
        Err(pagelab_workloads::WorkloadError::OutOfMemory(_)) => {}
        other => panic!("{name}: expected out of memory, got {other:?}"),
    }
    check_whole(&k, erun, &format!("{name} oom"));
}
