//! The research designs' benchmarks (RadixVM's mapbench, CortenMM's microbenchmarks) on the
//! engine: what each workload says it did balances with what the engine counted (mmap and munmap
//! calls against `mmap_lock` write acquisitions, pages faulted against pages freed), the shared
//! forms work in one VMA of one mm, and the low-contention forms keep each task in its own slot.
//! Then the same workloads on the host kernel, for real.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pagelab_mm::Policy;
use pagelab_sync::RcuReader;
use pagelab_workloads::cortenmm::{self, Contention, Corten, CortenParams, Op, SLOT_PAGES};
use pagelab_workloads::engine::{self, EngineRun, EngineVm};
use pagelab_workloads::host::HostVm;
use pagelab_workloads::mapbench;
use pagelab_workloads::rounds::{Rounds, run_rounds};
use pagelab_workloads::runner::{Hooks, SampleSpec, run_continuous};
use pagelab_workloads::vm::Vm;
use pagelab_workloads::{Mode, WorkloadError};

const PAGE: u64 = 4096;

fn spec() -> SampleSpec {
    SampleSpec {
        samples: 2,
        warmup: 1,
        interval: Duration::from_millis(50),
    }
}

fn no_hooks<R>(f: impl FnOnce(Hooks<'_>) -> R) -> R {
    f(Hooks {
        measure_start: &mut || {},
        sample: &mut |_, _, _| {},
    })
}

/// What the tasks did, counted at the workload's side of the system-call boundary.
#[derive(Default)]
struct Tally {
    mmaps: AtomicU64,
    munmaps: AtomicU64,
    /// munmap calls of exactly one page (the CortenMM munmap requests).
    page_munmaps: AtomicU64,
    /// `MAP_FIXED` mmap calls (the high-contention CortenMM mmap requests).
    fixed: AtomicU64,
    /// Stores to a page the task's page table did not map: each one a fault.
    faults: AtomicU64,
    /// Stores made while the mm held other than exactly one VMA.
    not_one_vma: AtomicU64,
    /// The slots (2 MiB units from the first mapping of the round) each task stored into.
    slots: Mutex<Vec<BTreeSet<u64>>>,
    /// The address task 0 mapped last.
    region: AtomicU64,
}

/// An engine task that counts what it does.
struct Counted {
    i: usize,
    vm: EngineVm,
    rcu: RcuReader,
    tally: Arc<Tally>,
}

impl Vm for Counted {
    type File = <EngineVm as Vm>::File;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError> {
        self.tally.mmaps.fetch_add(1, Ordering::Relaxed);
        let a = self.vm.mmap_anon(len)?;
        if self.i == 0 {
            self.tally.region.store(a, Ordering::Relaxed);
        }
        Ok(a)
    }
    fn create_file(&self, len: u64) -> Result<Self::File, WorkloadError> {
        self.vm.create_file(len)
    }
    fn mmap_file(&self, f: &Self::File, len: u64, shared: bool) -> Result<u64, WorkloadError> {
        self.vm.mmap_file(f, len, shared)
    }
    fn store(&self, addr: u64) -> Result<(), WorkloadError> {
        let mm = self.vm.task.mm();
        if mm.pgtable.translate(addr, true).is_none() {
            self.tally.faults.fetch_add(1, Ordering::Relaxed);
        }
        {
            let g = self.rcu.lock();
            let vmas = mm.vma_list(&g);
            if vmas.len() != 1 || mm.find_vma(&g, addr).is_none() {
                self.tally.not_one_vma.fetch_add(1, Ordering::Relaxed);
            }
        }
        let region = self.tally.region.load(Ordering::Relaxed);
        if addr >= region {
            self.tally.slots.lock().unwrap()[self.i].insert((addr - region) / (SLOT_PAGES * PAGE));
        }
        self.vm.store(addr)
    }
    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        self.tally.fixed.fetch_add(1, Ordering::Relaxed);
        self.vm.mmap_fixed_anon(addr, len)
    }
    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        self.tally.munmaps.fetch_add(1, Ordering::Relaxed);
        if len == PAGE {
            self.tally.page_munmaps.fetch_add(1, Ordering::Relaxed);
        }
        self.vm.munmap(addr, len)
    }
    fn idle(&self) {
        self.vm.idle()
    }
    fn resume(&self) {
        self.vm.resume()
    }
}

/// Boot an engine (twice the CPUs of the tasks: the counting wrappers hold RCU reader slots
/// too) and wrap `n` tasks in `mode`.
fn counted(n: usize, mode: Mode) -> (EngineRun, Vec<Counted>, Arc<Tally>) {
    counted_with(&Policy::default(), n, mode)
}

fn counted_with(policy: &Policy, n: usize, mode: Mode) -> (EngineRun, Vec<Counted>, Arc<Tally>) {
    // Lock statistics count mmap_lock's write acquisitions; nothing in this binary turns them
    // off.
    pagelab_sync::stats::set_enabled(true);
    let k = engine::boot(policy, 96 << 20, 2 * n).unwrap();
    let (erun, vms) = engine::tasks(&k, n, mode, false).unwrap();
    let tally = Arc::new(Tally {
        slots: Mutex::new(vec![BTreeSet::new(); n]),
        ..Tally::default()
    });
    let vms = vms
        .into_iter()
        .enumerate()
        .map(|(i, vm)| Counted {
            i,
            rcu: pagelab_sync::RcuDomain::register(k.rcu()).unwrap(),
            vm,
            tally: tally.clone(),
        })
        .collect();
    erun.reset();
    (erun, vms, tally)
}

/// The engine's count of an event.
fn event(erun: &EngineRun, name: &str) -> u64 {
    erun.counters()
        .events
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |e| e.1)
}

fn mmap_lock_writes(erun: &EngineRun) -> u64 {
    erun.counters()
        .locks
        .iter()
        .find(|l| l.0 == "mmap_lock (write)")
        .map_or(0, |l| l.1)
}

/// The engine took `faults` anonymous faults, every page faulted was freed again, every mmap
/// and munmap took mmap_lock for write once, and the address space is empty.
fn check_balance(what: &str, erun: &EngineRun, t: &Tally, faults: u64) {
    check_balance_racing(what, erun, t, faults, false)
}

/// [`check_balance`] where tasks race to fault the same pages (`racing`): a fault that loses
/// the race for the PTE still counts, as in the kernel, and frees its page at once; the pages
/// mapped are still exactly `faults`, and exactly those are freed by munmap.
fn check_balance_racing(what: &str, erun: &EngineRun, t: &Tally, faults: u64, racing: bool) {
    let (mmaps, munmaps) = (
        t.mmaps.load(Ordering::Relaxed),
        t.munmaps.load(Ordering::Relaxed),
    );
    assert!(faults > 0 && mmaps > 0, "{what}: nothing done");
    if racing {
        assert!(event(erun, "fault_anon") >= faults, "{what}: faults");
    } else {
        assert_eq!(event(erun, "fault_anon"), faults, "{what}: faults");
    }
    assert_eq!(event(erun, "unmap_pages"), faults, "{what}: pages freed");
    assert_eq!(
        mmap_lock_writes(erun),
        mmaps + munmaps,
        "{what}: mmap/munmap calls"
    );
    for mm in &erun.mms {
        mm.check(true).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(mm.pgtable.nr_tables(), 1, "{what}: page tables left");
    }
}

#[test]
fn mapbench_balances_with_the_engine() {
    for mode in [Mode::Threads, Mode::Processes] {
        for pages in [1, 3] {
            let what = format!("mapbench {mode} pages={pages}");
            let (erun, vms, t) = counted(2, mode);
            let stop = AtomicBool::new(false);
            no_hooks(|h| {
                run_continuous(vms, spec(), &stop, h, |vm, c, halt| {
                    mapbench::local_loop(vm, pages, c, halt)
                })
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mmaps = t.mmaps.load(Ordering::Relaxed);
            assert_eq!(t.munmaps.load(Ordering::Relaxed), mmaps, "{what}");
            assert_eq!(t.faults.load(Ordering::Relaxed), mmaps * pages, "{what}");
            // A process maps its own region: one VMA in its mm at every store.
            if mode == Mode::Processes {
                assert_eq!(t.not_one_vma.load(Ordering::Relaxed), 0, "{what}");
            }
            check_balance(&what, &erun, &t, mmaps * pages);
            assert_eq!(erun.mms.len(), if mode == Mode::Threads { 1 } else { 2 });
        }
    }
}

/// mapbench-shared: one task maps, everybody writes into that one VMA of one mm (every page
/// by every task: only the first write faults), and each unmaps its slice.
#[test]
fn mapbench_shared_shares_one_vma() {
    let n = 3;
    let (erun, vms, t) = counted(n, Mode::Threads);
    let stop = AtomicBool::new(false);
    let r =
        no_hooks(|h| run_rounds(vms, spec(), &stop, h, &mapbench::Shared { pages: 2 })).unwrap();
    assert!(r.rounds > 0 && r.samples.len() == 2, "{r:?}");
    assert!(r.samples.iter().all(|s| *s > 0.0), "{r:?}");
    assert_eq!(erun.mms.len(), 1);
    let mmaps = t.mmaps.load(Ordering::Relaxed);
    // Only task 0 maps, once per round begun; each task unmaps its own slice.
    assert!(mmaps >= r.rounds && mmaps <= r.rounds + 1, "{mmaps} {r:?}");
    assert_eq!(t.not_one_vma.load(Ordering::Relaxed), 0);
    // Every page mapped once, by whoever wrote it first (the tasks race for a page: their own
    // count of stores into unmapped pages, and the engine's count of faults, may be higher).
    // Each task that enters a round's timed part writes every page of the region; a stop that
    // comes after task 0 mapped the last round's region but before any task entered its timed
    // part leaves that region untouched (then `finish` unmaps it with nothing in it).
    let per_round = n as u64 * 2;
    let freed = event(&erun, "unmap_pages");
    assert!(
        freed == mmaps * per_round || freed + per_round == mmaps * per_round,
        "mapbench-shared: {freed} pages freed for {mmaps} regions of {per_round}"
    );
    check_balance_racing("mapbench-shared", &erun, &t, freed, true);
}

fn corten(op: Op, contention: Contention, n: usize) -> (Rounds, EngineRun, Arc<Tally>) {
    let (erun, vms, t) = counted(n, Mode::Threads);
    let params = CortenParams {
        op,
        contention,
        requests: 8,
    };
    let body = Corten::new(params, n).unwrap();
    let stop = AtomicBool::new(false);
    let r = no_hooks(|h| run_rounds(vms, spec(), &stop, h, &body))
        .unwrap_or_else(|e| panic!("{op:?} {contention:?}: {e}"));
    assert!(r.rounds > 0 && r.samples.len() == 2, "{r:?}");
    assert!(r.samples.iter().all(|s| *s > 0.0), "{r:?}");
    // Every task's requests come in whole rounds.
    assert!(
        r.ops_per_task
            .iter()
            .all(|o| o % 8 == 0 && *o >= 8 * r.rounds),
        "{r:?}"
    );
    (r, erun, t)
}

#[test]
fn cortenmm_pf_faults_what_it_reports_in_one_vma() {
    let n = 3;
    for contention in [Contention::Low, Contention::High] {
        let what = format!("pf {contention:?}");
        let (r, erun, t) = corten(Op::Pf, contention, n);
        let ops: u64 = r.ops_per_task.iter().sum();
        assert_eq!(t.faults.load(Ordering::Relaxed), ops, "{what}");
        assert_eq!(t.not_one_vma.load(Ordering::Relaxed), 0, "{what}");
        let faults = t.faults.load(Ordering::Relaxed);
        let slots = t.slots.lock().unwrap().clone();
        match contention {
            // Each task stays in its own 2 MiB slot (its own page table)...
            Contention::Low => {
                for (i, s) in slots.iter().enumerate() {
                    assert_eq!(s, &BTreeSet::from([i as u64]), "{what}");
                }
            }
            // ...or works in everyone's.
            Contention::High => {
                for s in &slots {
                    assert!(s.len() > 1, "{what}: {slots:?}");
                }
            }
        }
        check_balance(&what, &erun, &t, faults);
    }
}

#[test]
fn cortenmm_munmap_unmaps_what_it_reports() {
    for contention in [Contention::Low, Contention::High] {
        let what = format!("munmap {contention:?}");
        let (r, erun, t) = corten(Op::Munmap, contention, 3);
        let ops: u64 = r.ops_per_task.iter().sum();
        assert_eq!(t.page_munmaps.load(Ordering::Relaxed), ops, "{what}");
        let faults = t.faults.load(Ordering::Relaxed);
        check_balance(&what, &erun, &t, faults);
    }
}

#[test]
fn cortenmm_mmap_and_mmap_pf_map_what_they_report() {
    for op in [Op::Mmap, Op::MmapPf] {
        let what = format!("{op:?}");
        let (erun, vms, t) = counted(2, Mode::Threads);
        let body = Corten::new(
            CortenParams {
                op,
                contention: Contention::Low,
                requests: 8,
            },
            2,
        )
        .unwrap();
        let stop = AtomicBool::new(false);
        let r = no_hooks(|h| run_rounds(vms, spec(), &stop, h, &body)).unwrap();
        let ops: u64 = r.ops_per_task.iter().sum();
        assert!(ops > 0, "{what}");
        assert_eq!(t.mmaps.load(Ordering::Relaxed), ops, "{what}");
        assert_eq!(t.munmaps.load(Ordering::Relaxed), ops, "{what}");
        if op == Op::MmapPf {
            assert_eq!(t.faults.load(Ordering::Relaxed), ops, "{what}");
            check_balance(&what, &erun, &t, ops);
        } else {
            // Nothing is touched: no fault, no page freed.
            assert_eq!(event(&erun, "fault_anon"), 0, "{what}");
            assert_eq!(mmap_lock_writes(&erun), 2 * ops, "{what}");
        }
    }
}

/// The high-contention mmap forms: every request is one `MAP_FIXED` over the shared region,
/// landing in other tasks' slots too; `mmap-pf` faults each mapped page once; nothing is
/// left behind (each round's region goes, with what was mapped over it). Under both the
/// Linux profile and range locks.
#[test]
fn cortenmm_high_mmap_maps_fixed_over_one_region() {
    use pagelab_mm::policy::{MmapLock, VmaLock};
    let range = {
        let mut p = Policy::default();
        p.mm.mmap_lock = MmapLock::Range;
        p.mm.vma_lock = VmaLock::None;
        p
    };
    for policy in [Policy::default(), range] {
        for op in [Op::Mmap, Op::MmapPf] {
            let what = format!("{op:?} high, {:?}", policy.mm.mmap_lock);
            let (erun, vms, t) = counted_with(&policy, 3, Mode::Threads);
            let body = Corten::new(
                CortenParams {
                    op,
                    contention: Contention::High,
                    requests: 8,
                },
                3,
            )
            .unwrap();
            let stop = AtomicBool::new(false);
            let r = no_hooks(|h| run_rounds(vms, spec(), &stop, h, &body))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let ops: u64 = r.ops_per_task.iter().sum();
            assert!(ops > 0, "{what}");
            assert_eq!(t.fixed.load(Ordering::Relaxed), ops, "{what}");
            // One region per round, by task 0 (one more for a round prepared as the run
            // ended).
            let regions = t.mmaps.load(Ordering::Relaxed);
            assert!(
                (r.rounds..=r.rounds + 1).contains(&regions),
                "{what}: {regions} regions in {} rounds",
                r.rounds
            );
            let slots = t.slots.lock().unwrap().clone();
            if op == Op::MmapPf {
                assert_eq!(t.faults.load(Ordering::Relaxed), ops, "{what}");
                for s in &slots {
                    assert!(s.len() > 1, "{what}: a task stayed in one slot: {slots:?}");
                }
            }
            // Requests never overlap, so each page faulted is freed exactly once, by its
            // round's munmap of the region.
            let faults = t.faults.load(Ordering::Relaxed);
            assert_eq!(event(&erun, "fault_anon"), faults, "{what}: faults");
            assert_eq!(event(&erun, "unmap_pages"), faults, "{what}: pages freed");
            let writes = t.mmaps.load(Ordering::Relaxed)
                + t.munmaps.load(Ordering::Relaxed)
                + t.fixed.load(Ordering::Relaxed);
            let range = policy.mm.mmap_lock == MmapLock::Range;
            assert_eq!(
                mmap_lock_writes(&erun),
                if range { 0 } else { writes },
                "{what}: mmap_lock"
            );
            for mm in &erun.mms {
                mm.check(true).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let p = |op, contention, requests| CortenParams {
        op,
        contention,
        requests,
    };
    for bad in [
        p(Op::Pf, Contention::Low, 0),
        p(Op::Munmap, Contention::High, cortenmm::MAX_REQUESTS + 1),
        p(
            Op::Mmap,
            Contention::High,
            SLOT_PAGES / cortenmm::MMAP_PAGES + 1,
        ),
    ] {
        match Corten::new(bad, 2) {
            Err(WorkloadError::Config(m)) => assert!(!m.contains('\n'), "{m}"),
            Err(e) => panic!("{bad:?}: {e}"),
            Ok(_) => panic!("{bad:?} accepted"),
        }
    }
    let stop = AtomicBool::new(false);
    let r = no_hooks(|h| {
        run_rounds(
            Vec::<HostVm>::new(),
            spec(),
            &stop,
            h,
            &mapbench::Shared { pages: 1 },
        )
    });
    assert!(matches!(r, Err(WorkloadError::Config(_))));
}

/// A stop request ends a rounds run after the sample under way, marked interrupted, with
/// the engine whole.
#[test]
fn rounds_stop_when_asked() {
    let (erun, vms, t) = counted(2, Mode::Threads);
    let body = Corten::new(
        CortenParams {
            op: Op::Munmap,
            contention: Contention::High,
            requests: 4,
        },
        2,
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 50,
        ..spec()
    };
    let r = run_rounds(
        vms,
        spec,
        &stop,
        Hooks {
            measure_start: &mut || {},
            sample: &mut |i, _, _| {
                if i == 2 {
                    stop.store(true, Ordering::Relaxed);
                }
            },
        },
        &body,
    )
    .unwrap();
    assert!(r.interrupted && r.samples.len() == 1, "{r:?}");
    let faults = t.faults.load(Ordering::Relaxed);
    check_balance("interrupted", &erun, &t, faults);
}

/// The same workloads on the host kernel: real mmap, faults and munmap, with threads (and
/// processes for mapbench). Which tasks a loaded host schedules within one sample is up to it:
/// the run as a whole must make progress.
#[test]
fn on_the_host_kernel() {
    let spec = || SampleSpec {
        interval: Duration::from_millis(150),
        ..spec()
    };
    for n in [1usize, 2] {
        let stop = AtomicBool::new(false);
        let c = no_hooks(|h| {
            run_continuous(HostVm::threads(n), spec(), &stop, h, |vm, c, halt| {
                mapbench::local_loop(vm, 1, c, halt)
            })
        })
        .unwrap();
        assert!(c.samples.iter().sum::<f64>() > 0.0, "mapbench x{n}: {c:?}");
        let c = no_hooks(|h| {
            pagelab_workloads::host_proc::run_continuous_processes(
                n,
                spec(),
                &stop,
                h,
                |vm, c, halt| mapbench::local_loop(vm, 2, c, halt),
            )
        })
        .unwrap();
        assert!(
            c.samples.iter().sum::<f64>() > 0.0,
            "mapbench processes x{n}: {c:?}"
        );
        let r = no_hooks(|h| {
            run_rounds(
                HostVm::threads(n),
                spec(),
                &stop,
                h,
                &mapbench::Shared { pages: 2 },
            )
        })
        .unwrap();
        assert!(
            r.rounds > 0 && r.samples.iter().all(|s| *s > 0.0),
            "shared x{n}: {r:?}"
        );
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
            let body = Corten::new(
                CortenParams {
                    op,
                    contention,
                    requests: 16,
                },
                n,
            )
            .unwrap();
            let r = no_hooks(|h| run_rounds(HostVm::threads(n), spec(), &stop, h, &body))
                .unwrap_or_else(|e| panic!("{op:?} {contention:?} x{n}: {e}"));
            assert!(
                r.rounds > 0
                    && r.samples.iter().all(|s| *s > 0.0)
                    && r.ops_per_task
                        .iter()
                        .all(|o| o % 16 == 0 && *o >= 16 * r.rounds),
                "{op:?} {contention:?} x{n}: {r:?}"
            );
        }
    }
}
