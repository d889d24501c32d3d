//! Capture of the research designs' benchmarks (mapbench, the CortenMM tests) on the real
//! engine, and their replay: the trace holds whole iterations or rounds of requests, counts
//! the workload's own operations, and replays to the workload's metric.

use pagelab_bench::profiles;
use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::machine::Machine;
use pagelab_project::project::replay_row;
use pagelab_project::trace::{Event, Trace, Window};
use pagelab_sync::Scope;
use pagelab_workloads::{Mode, WorkloadKind};

fn classes(t: &Trace) -> Vec<&str> {
    let mut v: Vec<&str> = t.instances.iter().map(|i| i.class.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn count(t: &Trace, f: impl Fn(&Event) -> bool) -> usize {
    t.events.iter().filter(|e| f(e)).count()
}

fn spec(w: WorkloadKind, profile: &str) -> CaptureSpec {
    let mut s = CaptureSpec::new(w, profiles::load(profile).unwrap(), 4);
    s.cycles = 1;
    s
}

/// mapbench: whole iterations (map, one fault, unmap), one operation each, under mmap_lock on
/// linux-6.7; replayed, two threads share the lock and the rate is `ops/sec`.
#[test]
fn mapbench_traces_whole_map_touch_unmap_iterations() {
    let t = capture(&spec(WorkloadKind::Mapbench, "linux-6.7")).unwrap();
    assert_eq!(t.meta.window, Window::Cycle);
    assert_eq!(t.meta.op_unit, "ops");
    assert!(!t.meta.shared_vma);
    assert_eq!(t.meta.ops, 2048, "one window of 2048 iterations");
    // One fault per iteration, and one TLB flush at most (the unmap of a touched page).
    assert_eq!(count(&t, |e| *e == Event::Trap), 2048);
    let flushes = count(&t, |e| matches!(e, Event::TlbFlush { .. }));
    assert!(flushes <= 2048, "{flushes}");
    // mmap and munmap write-lock mmap_lock every iteration.
    let c = classes(&t);
    assert!(c.contains(&"mmap_lock"), "{c:?}");
    let mmap = t
        .instances
        .iter()
        .position(|i| i.class == "mmap_lock")
        .unwrap() as u32;
    let writes = count(
        &t,
        |e| matches!(e, Event::Acquire { inst, shared: false, .. } if *inst == mmap),
    );
    assert!(
        writes >= 2 * 2048,
        "{writes} write acquisitions of mmap_lock"
    );
    let m = Machine::load("dev-host").unwrap();
    let row = replay_row(&m, &t, Mode::Threads, 2, 2, 1, 1000).unwrap();
    let (name, _, v) = &row.metrics[0];
    assert_eq!(name, "ops/sec");
    assert!(v.iter().all(|x| x.is_finite() && *x > 0.0), "{v:?}");
}

/// The range-locked profile takes no mmap_lock in mapbench, and no other lock the tasks
/// share: each maps in its own CPU's address block, publishes in its own shard, and locks its
/// own page-table nodes, which the trace records as private (nothing) since one CPU takes
/// them. Before, every mmap and munmap took the per-mm `vma_tree_lock`, and every node lock
/// was recorded per VMA.
#[test]
fn mapbench_on_range_vm_takes_no_mmap_lock() {
    let t = capture(&spec(WorkloadKind::Mapbench, "range-vm")).unwrap();
    let c = classes(&t);
    assert!(!c.contains(&"mmap_lock"), "{c:?}");
    assert_eq!(t.meta.ops, 2048);
    // The TLB shootdown of a munmap still reaches every CPU that runs the mm: one page table
    // is shared by all threads (RadixVM's per-core page tables, which avoid it, are not
    // modelled).
    let mm_wide: Vec<&str> = t
        .instances
        .iter()
        .filter(|i| matches!(i.scope, Scope::Mm | Scope::Vma) && i.class != "tlb shootdown")
        .map(|i| i.class.as_str())
        .collect();
    assert!(mm_wide.is_empty(), "{mm_wide:?}");
}

/// CortenMM's `pf` in its low-contention form on range-vm: the tasks fault one VMA, each in
/// its own slot (its own PTE table), so no page-table node lock is recorded as shared; in the
/// high-contention form they fault one table, whose node is recorded per mm.
#[test]
fn range_vm_node_locks_are_recorded_with_the_scope_they_have() {
    let node = |w| {
        let t = capture(&spec(w, "range-vm")).unwrap();
        t.instances
            .iter()
            .filter(|i| i.class.starts_with("pt node lock"))
            .map(|i| (i.class.clone(), i.scope))
            .collect::<Vec<_>>()
    };
    assert_eq!(node(WorkloadKind::CortenmmPfLow), vec![]);
    let high = node(WorkloadKind::CortenmmPfHigh);
    assert!(
        high.contains(&("pt node lock (shared)".to_string(), Scope::Mm)),
        "{high:?}"
    );
}

/// The CortenMM `pf` test records only its timed requests: one fault each, 32 per round, and
/// none of the round's untimed map and unmap of the region.
#[test]
fn cortenmm_pf_records_only_the_timed_requests() {
    let t = capture(&spec(WorkloadKind::CortenmmPfLow, "linux-6.7")).unwrap();
    // Rounds keep their fixed order and read no scheduler account: the guard says so.
    let g = t.meta.guard.as_ref().expect("a capture records its guard");
    assert!(g.windows > 0 && g.unaccounted, "{g:?}");
    assert_eq!(t.meta.window, Window::Cycle);
    assert!(t.meta.shared_vma, "pf's tasks fault one VMA");
    // 2048 requests a window: 64 rounds of 32.
    assert_eq!(t.meta.ops, 2048);
    assert_eq!(count(&t, |e| *e == Event::Trap), 2048);
    // The region's map and unmap are outside the recording: no mmap_lock write, no flush.
    assert_eq!(count(&t, |e| matches!(e, Event::TlbFlush { .. })), 0);
    let c = classes(&t);
    assert!(
        !c.contains(&"mmap_lock") || {
            let mmap = t
                .instances
                .iter()
                .position(|i| i.class == "mmap_lock")
                .unwrap() as u32;
            count(
                &t,
                |e| matches!(e, Event::Acquire { inst, shared: false, .. } if *inst == mmap),
            ) == 0
        }
    );
}

/// The CortenMM `munmap` test: each request is one unmap (its TLB flush, no fault).
#[test]
fn cortenmm_munmap_records_one_unmap_a_request() {
    let t = capture(&spec(WorkloadKind::CortenmmMunmapLow, "linux-6.7")).unwrap();
    assert_eq!(t.meta.ops, 2048);
    assert_eq!(count(&t, |e| *e == Event::Trap), 0);
    assert_eq!(count(&t, |e| matches!(e, Event::TlbFlush { .. })), 2048);
}

/// Every research workload captures and replays on every beyond-linux profile (small windows).
#[test]
fn every_research_workload_captures_and_replays() {
    let m = Machine::load("dev-host").unwrap();
    for w in [
        WorkloadKind::MapbenchShared,
        WorkloadKind::CortenmmMmap,
        WorkloadKind::CortenmmMmapPf,
        WorkloadKind::CortenmmMmapHigh,
        WorkloadKind::CortenmmMmapPfHigh,
        WorkloadKind::CortenmmPfHigh,
        WorkloadKind::CortenmmMunmapHigh,
    ] {
        for p in ["linux-6.7", "range-vm"] {
            let t = capture(&spec(w, p)).unwrap_or_else(|e| panic!("{w} on {p}: {e}"));
            assert!(t.meta.ops >= 2048, "{w} on {p}: {} ops", t.meta.ops);
            let row = replay_row(&m, &t, Mode::Threads, 2, 1, 1, 1000).unwrap();
            assert!(
                row.metrics[0].2.iter().all(|x| x.is_finite() && *x > 0.0),
                "{w} on {p}: {:?}",
                row.metrics
            );
        }
    }
}

/// The beyond-linux set: every member loads, runs the five profiles on a workload the
/// projector replays, and names the 512-CPU machine; the set is what `reproduce beyond-linux`
/// runs, and the machines the verdicts project to have the CPUs the README says.
#[test]
fn the_beyond_linux_set_is_projectable_to_128_and_512_cpus() {
    use pagelab_bench::experiments;
    let set = experiments::set("beyond-linux");
    assert_eq!(set.len(), 12, "{set:?}");
    for name in &set {
        let e = experiments::load(name).unwrap();
        let p: Vec<&str> = e.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            p,
            ["linux-6.7", "pvl-refcount", "rcu-vma", "range-vm", "llfree"],
            "{name}"
        );
        assert_eq!(e.tasks, [1, 2], "{name}");
        assert!(
            pagelab_project::capture::shape(e.workload).is_ok(),
            "{name}"
        );
        let m = Machine::load(e.machine.as_deref().unwrap()).unwrap();
        assert_eq!(m.nr_cpus(), 512, "{name}");
    }
    assert_eq!(Machine::load("icelake-2s-64c").unwrap().nr_cpus(), 128);
    // A name that is an experiment is not a set; an unknown prefix is an empty set.
    assert!(experiments::set("beyond-linux-pft").is_empty());
    assert!(experiments::set("nothing").is_empty());
    assert_eq!(
        experiments::set_of("beyond-linux-pft"),
        Some("beyond-linux")
    );
    assert_eq!(experiments::set_of("pft-pvl-2023"), None);
}

/// mapbench-shared on range-vm: the tasks unmap their slices of one region, so the munmap that
/// empties the region's page table (whichever task comes last) frees it under the shard's
/// reverse-map lock from different CPUs. The lock is then recorded per mm, as the node locks
/// the tasks share are, so that the replay makes them meet there; mapbench, each task in its
/// own block (a companion beside task 0), records it nowhere. Before, it was recorded as
/// private whoever took it, and mapbench-shared was captured with one task, which shares
/// nothing.
#[test]
fn range_vm_shard_rmap_lock_is_recorded_shared_once_two_cpus_take_it() {
    let rmap = |s: &CaptureSpec| {
        let t = capture(s).unwrap();
        t.instances
            .iter()
            .filter(|i| i.class.starts_with("shard rmap_lock"))
            .map(|i| (i.class.clone(), i.scope))
            .collect::<Vec<_>>()
    };
    let mut local = spec(WorkloadKind::Mapbench, "range-vm");
    local.companions = 1;
    assert_eq!(rmap(&local), vec![]);
    let shared = rmap(&spec(WorkloadKind::MapbenchShared, "range-vm"));
    assert!(
        shared.contains(&("shard rmap_lock (shared)".to_string(), Scope::Mm)),
        "{shared:?}"
    );
}
