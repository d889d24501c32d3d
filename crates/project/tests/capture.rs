//! Capture on the real engine, and the whole pipeline from a capture to a projection: the trace
//! counts what the workload did, holds the shared locks its profile takes, survives its file
//! format, and replays with the mode deciding what is shared.

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

/// Captures time their windows, and a capture running in another thread of this process slows
/// them: while any thread records, every thread's trace hooks pass the one shared `active` flag
/// and look for a recording buffer of their own. The tests of this file take turns.
static CAPTURES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_capture_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn page_fault1_traces_whole_iterations_of_shared_events() {
    let _turn = one_capture_at_a_time();
    let p = profiles::load("mm-unstable-20230210").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::PageFault1, p.clone(), 16);
    spec.cycles = 1;
    let t = capture(&spec).unwrap();
    assert_eq!(t.meta.window, Window::Cycle);
    // One iteration: 128 MiB, one fault per page, each a trap and a page cleared.
    assert_eq!(t.meta.ops, 32_768);
    let traps = t.events.iter().filter(|e| **e == Event::Trap).count();
    assert_eq!(traps, 32_768);
    let cleared: u64 = t
        .events
        .iter()
        .map(|e| match e {
            Event::Write { bytes, .. } => u64::from(*bytes),
            _ => 0,
        })
        .sum();
    assert!(cleared >= 32_768 * 4096, "{cleared}");
    // Without per-VMA locks every fault takes mmap_lock; the per-CPU and private locks are not
    // recorded, except the pcp lock, whose trylock has a fallback the replay can take.
    let c = classes(&t);
    assert!(c.contains(&"mmap_lock") && c.contains(&"zone->lock") && c.contains(&"lru_lock"));
    assert!(c.contains(&"pcp->lock") && !c.contains(&"ptl"), "{c:?}");
    assert!(
        t.instances
            .iter()
            .all(|i| i.scope.is_shared() || i.class == "pcp->lock")
    );
    // The era's rwsem rides on every rwsem instance.
    let mmap = t.instances.iter().find(|i| i.class == "mmap_lock").unwrap();
    assert_eq!(mmap.rwsem, Some(p.policy.locks.rwsem));
    let mmap_reads = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { inst, shared: true, .. } if t.instances[*inst as usize].class == "mmap_lock"))
        .count();
    // Each fault reads it once; munmap (4.20+) holds it for read after its downgrade, which
    // is not a read acquire but a downgrade of its write hold.
    assert!(p.policy.mm.munmap_downgrade);
    assert_eq!(mmap_reads, 32_768);
    let downgrades = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Downgrade { inst } if t.instances[*inst as usize].class == "mmap_lock"))
        .count();
    assert_eq!(downgrades, 1);
    // The scale is a ratio of two timed windows: how far it sits from 1 depends on how busy
    // the host is (speed is for benchmarks, not tests), so only its sanity is checked here.
    assert!(
        t.meta.compute_scale.is_finite() && t.meta.compute_scale > 0.0,
        "{}",
        t.meta.compute_scale
    );
    // The scaled trace adds up to the untraced window (thread CPU time), however loaded the
    // host was while the traced window ran; unless the untraced windows themselves were the
    // slow ones (their compute above the traced compute, no recording cost taken out), when
    // the traced compute is kept and the trace adds up to less.
    let kept_as_measured = t.meta.event_cost_ns.is_none() && t.meta.compute_scale == 1.0;
    assert!(
        if kept_as_measured {
            t.host_ns() <= t.meta.untraced_ns * 1.01
        } else {
            (t.host_ns() - t.meta.untraced_ns).abs() / t.meta.untraced_ns < 0.01
        },
        "host {} untraced {} scale {} event cost {:?}",
        t.host_ns(),
        t.meta.untraced_ns,
        t.meta.compute_scale,
        t.meta.event_cost_ns
    );
    // The untraced window's writes were timed in that window, and the trace's writes take
    // their time: the traced window's clearing, slowed by the recording, is not used.
    let w = t
        .meta
        .untraced_write_ns
        .expect("the untraced writes are timed");
    assert!(
        w > 0.0 && w < t.meta.untraced_ns,
        "{w} of {}",
        t.meta.untraced_ns
    );
    let writes: f64 = t
        .events
        .iter()
        .map(|e| match e {
            Event::Write { host_ns, .. } => *host_ns,
            _ => 0.0,
        })
        .sum();
    if t.meta.untraced_ns > w {
        assert!(
            (writes - w).abs() / w < 0.01,
            "writes {writes} untraced {w}"
        );
    }
    if let Some(c) = t.meta.event_cost_ns {
        assert!(c >= t.meta.overhead_ns_per_event, "{c}");
    }
    // The untraced window's unmap (one an iteration) was timed apart: some of the window's
    // compute, not all of it. When the recording's cost was taken out per event, the unmap's
    // was solved on its own, and the trace's compute under munmap's write hold of mmap_lock
    // is no more than that unmap time (the hold is inside the unmap).
    let unmap = t
        .meta
        .untraced_unmap_ns
        .expect("the untraced unmap is timed");
    assert!(unmap > 0.0 && unmap < t.meta.untraced_ns - w, "{unmap}");
    if let Some(c) = t.meta.unmap_event_cost_ns {
        assert!(c >= t.meta.overhead_ns_per_event, "{c}");
        let mmap = t
            .instances
            .iter()
            .position(|i| i.class == "mmap_lock")
            .unwrap() as u32;
        let (mut depth, mut held, mut in_write) = (0, 0.0, false);
        for e in &t.events {
            match *e {
                Event::Acquire {
                    inst,
                    shared: false,
                    ..
                } if inst == mmap => in_write = true,
                Event::Release {
                    inst,
                    shared: false,
                }
                | Event::Downgrade { inst }
                    if inst == mmap =>
                {
                    in_write = false
                }
                Event::Compute { ns } if in_write => held += ns,
                _ => {}
            }
            depth += 1;
        }
        assert!(
            depth > 0 && held > 0.0 && held <= unmap * 1.001,
            "{held} of {unmap}"
        );
    }
    // The untraced window's spinlock holds were timed per class, zone->lock's among them, and
    // the trace's compute inside zone->lock's holds adds up to what they took untraced (the
    // innermost hold counts, and zone->lock nests in nothing recorded but pcp->lock).
    let zone: Vec<_> = t
        .meta
        .untraced_holds
        .iter()
        .filter(|h| h.class == "zone->lock")
        .collect();
    assert!(!zone.is_empty(), "{:?}", t.meta.untraced_holds);
    if zone.iter().all(|h| h.event_cost_ns.is_some()) {
        let untraced: f64 = zone.iter().map(|h| h.ns).sum();
        let zl: Vec<u32> = t
            .instances
            .iter()
            .enumerate()
            .filter(|(_, i)| i.class == "zone->lock")
            .map(|(k, _)| k as u32)
            .collect();
        let (mut held, mut inside) = (false, 0.0);
        for e in &t.events {
            match *e {
                Event::Acquire { inst, .. } if zl.contains(&inst) => held = true,
                Event::Release { inst, .. } if zl.contains(&inst) => held = false,
                Event::Compute { ns } if held => inside += ns,
                _ => {}
            }
        }
        // They match unless a rule of `stretch_targets` moved them apart, which a noisy host
        // can call for: a class whose traced holds already took less than its untraced time
        // keeps them (its per-event cost is then the recording's alone), and when the rest of
        // the window cannot give up what the untraced run says it must, the holds take the
        // difference back (the rest's gaps are then kept whole).
        let base = t.meta.overhead_ns_per_event;
        let at_base = |c: Option<f64>| c.is_some_and(|c| (c - base).abs() < 1e-6);
        if (inside - untraced).abs() > 0.01 * untraced {
            if inside > untraced {
                assert!(
                    at_base(t.meta.event_cost_ns),
                    "zone->lock's holds kept {inside} ns of {untraced} untraced while the rest's gaps were cut ({:?})",
                    t.meta.event_cost_ns
                );
            } else {
                assert!(
                    zone.iter().any(|h| at_base(h.event_cost_ns)),
                    "zone->lock's holds cut to {inside} ns of {untraced} untraced ({zone:?})"
                );
            }
        }
    }
    // Every acquire has its release.
    let acq = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { .. }))
        .count();
    let rel = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Release { .. }))
        .count();
    assert_eq!(acq, rel);
    // The file keeps it exactly.
    let again = Trace::decode(&t.encode(), "t").unwrap();
    assert_eq!(again.events.len(), t.events.len());
    assert_eq!(again.meta, t.meta);

    // mmap_lock is per mm: threads meet at it, processes do not. Before 4.20 munmap zaps with
    // it held for write, so threads wait out each other's munmap (the 2018 table's threads rows
    // run at half the processes rows at 16 tasks). Since 4.20 the zap runs under the read lock
    // and what remains is the reader count's line: too small a difference for a test.
    let old = profiles::load("linux-4.15").unwrap();
    assert!(!old.policy.mm.munmap_downgrade);
    let mut spec = CaptureSpec::new(WorkloadKind::PageFault1, old, 16);
    spec.cycles = 1;
    let t = capture(&spec).unwrap();
    let m = Machine::load("broadwell-2s-44c").unwrap();
    let rate = |mode| mean(&replay_row(&m, &t, mode, 16, 3, 1, 4096).unwrap().metrics[0].2);
    let (procs, threads) = (rate(Mode::Processes), rate(Mode::Threads));
    assert!(
        threads < procs,
        "threads {threads} against processes {procs}"
    );
}

#[test]
fn pft_with_per_vma_locks_shares_its_one_vma_between_threads() {
    let _turn = one_capture_at_a_time();
    let p = profiles::load("pvl-v2").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    spec.pft_bytes = 16 << 20;
    let t = capture(&spec).unwrap();
    assert_eq!(t.meta.window, Window::Once);
    assert!(t.meta.shared_vma);
    assert_eq!(t.meta.ops, 4096);
    let vma = t
        .instances
        .iter()
        .position(|i| i.class == "vma lock")
        .expect("a vma lock");
    assert_eq!(t.instances[vma].scope, Scope::Vma);
    // Faults take the VMA's lock; mmap_lock only for the first, which finds no anon_vma yet
    // (6.4's fallback).
    let count = |class: &str| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Acquire { inst, .. } if t.instances[*inst as usize].class == class))
            .count()
    };
    assert_eq!(count("vma lock"), 4096 - count("mmap_lock"));
    // The window fitted in the buffer made resident before it opened: it never grew (and
    // copied itself) while recording.
    assert!(
        t.meta.raw_events <= t.meta.ops * pagelab_project::capture::EVENTS_PER_FAULT as u64,
        "{} events for {} faults",
        t.meta.raw_events,
        t.meta.ops
    );
    assert!(count("mmap_lock") < 8, "{}", count("mmap_lock"));
    let m = Machine::load("icelake-2s-64c").unwrap();
    let row = replay_row(&m, &t, Mode::Threads, 32, 2, 1, 2048).unwrap();
    let vma_stats = row.classes.iter().find(|c| c.name == "vma lock").unwrap();
    assert!(
        vma_stats.contended > 0,
        "32 threads on one VMA line never waited"
    );
    let names: Vec<&str> = row.metrics.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(names, ["faults/cpu", "faults/sec"]);
}

/// page_fault3 writes a shared file mapping. A 6.4-era per-VMA lock (`vma_lock_faults =
/// "anon"`, pvl-v2) gives such a fault to mmap_lock, and 6.7 (`"all"`, linux-6.7) keeps it under
/// the VMA's lock: the capture shows which lock each fault took, and the replay in threads mode
/// then has every thread meet on mmap_lock's count in the first and on its own VMA's lock in the
/// second (the `page_fault3-file-vma-lock-2023` experiment).
#[test]
fn page_fault3_faults_take_mmap_lock_under_pvl_v2_and_the_vma_lock_under_6_7() {
    let _turn = one_capture_at_a_time();
    // Read acquisitions: a fault's. (munmap write-locks the VMA it detaches, as
    // `vma_start_write` does, in every kernel with per-VMA locks.)
    let acquires = |t: &Trace, class: &str| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Acquire { inst, shared: true, .. } if t.instances[*inst as usize].class == class))
            .count() as u64
    };
    let m = Machine::load("icelake-2s-64c").unwrap();
    let mut mmap_lock_waits = Vec::new();
    for (name, faults_under_vma_lock) in [("pvl-v2", false), ("linux-6.7", true)] {
        let p = profiles::load(name).unwrap();
        let mut spec = CaptureSpec::new(WorkloadKind::PageFault3, p, 16);
        spec.cycles = 1;
        let t = capture(&spec).unwrap();
        assert_eq!(t.meta.window, Window::Cycle, "{name}");
        assert_eq!(t.meta.ops, 32_768, "{name}");
        let (vma, mmap) = (acquires(&t, "vma lock"), acquires(&t, "mmap_lock"));
        if faults_under_vma_lock {
            // Every fault under its VMA's lock (its page tables are allocated under it too).
            assert!(
                vma >= t.meta.ops,
                "{name}: {vma} VMA-lock read acquisitions"
            );
            assert!(
                mmap <= t.meta.ops / 64,
                "{name}: {mmap} mmap_lock read acquisitions"
            );
        } else {
            // A file fault gives the VMA lock up before taking it: each fault takes mmap_lock.
            assert!(
                mmap >= t.meta.ops,
                "{name}: {mmap} mmap_lock read acquisitions"
            );
            assert_eq!(
                vma, 0,
                "{name}: the VMA lock was read-locked for a file fault"
            );
        }
        let row = replay_row(&m, &t, Mode::Threads, 16, 1, 1, 2048).unwrap();
        assert!(
            row.metrics
                .iter()
                .all(|(_, _, v)| v.iter().all(|x| x.is_finite() && *x > 0.0)),
            "{name}"
        );
        // Waits for the lock itself, not for its line: every fault of both kernels still
        // prefetches mmap_lock's line for writing at its entry and reads it once, which the
        // replay books as queueing for the line.
        let waited = row
            .classes
            .iter()
            .find(|c| c.name == "mmap_lock")
            .map_or(0.0, |c| c.wait_ns - c.line_queued_ns);
        mmap_lock_waits.push(waited);
    }
    // Sixteen threads' faults queue behind each other's mmaps and munmaps on mmap_lock in the
    // fallback; under 6.7 only the mmaps and munmaps do.
    assert!(
        mmap_lock_waits[0] > 0.0 && mmap_lock_waits[0] > 10.0 * mmap_lock_waits[1],
        "mmap_lock waits, pvl-v2 against linux-6.7: {mmap_lock_waits:?}"
    );
}

/// The capture records what the engine does when a trylock fails, by making it fail: the
/// per-VMA lock's fault falls back to mmap_lock (read), a pcp allocation to zone->lock; one
/// segment per trylock of the recorded window, each ending with the fallback lock's release.
#[test]
fn the_capture_records_the_engines_fallback_for_a_failed_trylock() {
    let _turn = one_capture_at_a_time();
    let p = profiles::load("pvl-v2").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    spec.pft_bytes = 16 << 20;
    let t = capture(&spec).unwrap();
    let class = |i: u32| t.instances[i as usize].class.as_str();
    let trylocks = |name: &str| {
        t.events
            .iter()
            .filter(
                |e| matches!(e, Event::Acquire { inst, trylock: true, .. } if class(*inst) == name),
            )
            .count()
    };
    let fb = |name: &str| {
        t.fallbacks
            .iter()
            .find(|f| f.class == name)
            .unwrap_or_else(|| {
                panic!(
                    "no {name} fallback: {:?}",
                    t.fallbacks.iter().map(|f| &f.class).collect::<Vec<_>>()
                )
            })
    };
    let first_lock = |seg: &[Event]| {
        seg.iter().find_map(|e| match *e {
            Event::Acquire {
                inst,
                shared,
                trylock,
            } => Some((class(inst), shared, trylock)),
            _ => None,
        })
    };
    let last = |seg: &[Event]| match seg.last() {
        Some(Event::Release { inst, .. }) => Some(class(*inst)),
        _ => None,
    };
    let vma = fb("vma lock");
    // Every fault that took the VMA lock has its fallback (the first fault of the VMA went to
    // mmap_lock anyway, in both windows).
    let n = trylocks("vma lock");
    assert!(n > 4000, "{n}");
    assert!(
        vma.segments.len().abs_diff(n) <= 8,
        "{} segments, {n} trylocks",
        vma.segments.len()
    );
    for seg in &vma.segments {
        // x86 takes mmap_lock there with `mmap_read_trylock` first (`mm.mmap_read_trylock`).
        assert_eq!(first_lock(seg), Some(("mmap_lock", true, true)), "{seg:?}");
        assert_eq!(last(seg), Some("mmap_lock"), "{seg:?}");
        // The fault itself is in it: a page cleared under mmap_lock.
        assert!(
            seg.iter()
                .any(|e| matches!(e, Event::Write { bytes: 4096, .. }))
        );
    }
    let pcp = fb("pcp->lock");
    let n = trylocks("pcp->lock");
    assert!(n >= 4096, "{n}");
    assert!(
        pcp.segments.len().abs_diff(n) <= n / 100,
        "{} segments, {n} trylocks",
        pcp.segments.len()
    );
    for seg in &pcp.segments {
        assert_eq!(
            first_lock(seg),
            Some(("zone->lock", false, false)),
            "{seg:?}"
        );
        assert_eq!(last(seg), Some("zone->lock"), "{seg:?}");
    }
    // The file keeps them (compute to a tenth of a nanosecond).
    let again = Trace::decode(&t.encode(), "t").unwrap();
    let shape = |t: &Trace| -> Vec<(String, Vec<usize>)> {
        t.fallbacks
            .iter()
            .map(|f| (f.class.clone(), f.segments.iter().map(Vec::len).collect()))
            .collect()
    };
    assert!(
        shape(&again) == shape(&t),
        "the fallbacks changed in the file"
    );
    // Without a per-VMA lock there is no VMA fallback to record.
    let p = profiles::load("mm-unstable-20230210").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    spec.pft_bytes = 4 << 20;
    let t = capture(&spec).unwrap();
    let names: Vec<&str> = t.fallbacks.iter().map(|f| f.class.as_str()).collect();
    assert_eq!(names, ["pcp->lock"]);
}

/// pft on one VMA with 3 MiB slices: task 0 faults [0, 3M) of the region, its companion
/// [3M, 6M), so the PTE table of [2M, 4M) is both tasks' and its 256 pages of task 0 are
/// recorded under the shared lock, per mm; the tables of [0, 2M) stay private. Without a
/// companion nothing is shared.
#[test]
fn pft_companion_shares_the_boundary_pte_table() {
    let _turn = one_capture_at_a_time();
    let p = profiles::load("linux-6.7").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    assert_eq!(spec.companions, 0, "no companion unless asked for");
    spec.companions = 1;
    spec.pft_bytes = 3 << 20;
    let shared_acquires = |t: &Trace| {
        let ptl = t.instances.iter().position(|i| i.class == "ptl (shared)");
        if let Some(i) = ptl {
            assert_eq!(t.instances[i].scope, Scope::Mm);
        }
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Acquire { inst, .. } if Some(*inst as usize) == ptl))
            .count()
    };
    let t = capture(&spec).unwrap();
    assert_eq!(t.meta.ops, 768, "task 0's faults only");
    assert_eq!(shared_acquires(&t), 256, "{:?}", classes(&t));
    spec.companions = 0;
    let alone = capture(&spec).unwrap();
    assert_eq!(alone.meta.ops, 768);
    assert_eq!(shared_acquires(&alone), 0, "{:?}", classes(&alone));
}

#[test]
fn netpipe_is_refused_by_the_one_task_capture() {
    let _turn = one_capture_at_a_time();
    // netpipe is projected, but as a pair per send size, not through the one-task capture
    // (every other workload has a shape there since round 21).
    let p = profiles::load("linux-6.7").unwrap();
    let e = capture(&CaptureSpec::new(WorkloadKind::Netpipe, p, 2)).unwrap_err();
    assert!(
        matches!(e, pagelab_project::CaptureError::Unsupported(_)),
        "{e:?}"
    );
    assert!(e.to_string().contains("capture_pair"), "{e}");
}

/// The lru_lock RFC v1 (`release = "batch-locks"`, lru-lock-base): munmap's release takes the
/// node's 32 batch locks, each recorded as an instance of its own (node scope), so the replay
/// keeps one resource per lock (it keys resources by instance); large-zone-batch has none.
#[test]
fn lru_batch_locks_are_recorded_one_instance_per_lock() {
    let _turn = one_capture_at_a_time();
    let trace_of = |name: &str| {
        let mut spec =
            CaptureSpec::new(WorkloadKind::PageFault1, profiles::load(name).unwrap(), 16);
        spec.cycles = 1;
        capture(&spec).unwrap()
    };
    let t = trace_of("lru-lock-base");
    let insts = |t: &Trace, class: &str| {
        t.instances
            .iter()
            .enumerate()
            .filter(|(_, i)| i.class == class)
            .map(|(n, i)| (n as u32, i.scope))
            .collect::<Vec<_>>()
    };
    let batch = insts(&t, "lru_batch_lock");
    let lru = insts(&t, "lru_lock");
    assert!(!lru.is_empty());
    assert!(batch.iter().all(|&(_, s)| s == Scope::Node), "{batch:?}");
    // Random tags over ~2,300 batches of one iteration: every lock of the node is used.
    assert_eq!(batch.len(), 32 * lru.len(), "{batch:?}");
    let acquires = |t: &Trace, class: &str| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Acquire { inst, .. } if t.instances[*inst as usize].class == class))
            .count()
    };
    let base = trace_of("large-zone-batch");
    assert_eq!(acquires(&base, "lru_batch_lock"), 0);
    assert!(acquires(&t, "lru_batch_lock") > 0);
}

/// Every capture says what its preemption guard saw over the recorded windows, and the trace
/// file keeps it: of the windows run, those not retaken are the three recordings and one per
/// fallback class (pvl-v2: the per-VMA lock and the pcp lock).
#[test]
fn a_pft_capture_records_its_preemption_guard() {
    let _turn = one_capture_at_a_time();
    let p = profiles::load("pvl-v2").unwrap();
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 4);
    spec.pft_bytes = 4 << 20;
    let t = capture(&spec).unwrap();
    let g = t.meta.guard.clone().expect("the capture's guard");
    assert_eq!(g.windows - g.retaken, 3 + 2, "{g:?}");
    use pagelab_project::capture::{FALLBACK_RETAKES, RETAKES};
    assert!(
        g.retaken as usize <= RETAKES + 2 * FALLBACK_RETAKES,
        "{g:?}"
    );
    assert!(g.kept_preempted <= 5);
    assert!(t.summary().contains("preemption guard: "));
    let back = Trace::decode(&t.encode(), "test").unwrap();
    assert_eq!(back.meta.guard, Some(g));
}

/// Pacing runs each profile's engine in turns on one CPU and times every turn, on both
/// shapes of turn (pft's repetitions, page_fault1's iterations), and a capture paced to a
/// compute carries it into its trace, below what its recording holds (a cost per event taken
/// out) and above it (every gap scaled up).
#[test]
fn profiles_paced_side_by_side_time_every_turn_and_set_a_captures_compute() {
    use pagelab_project::capture::{capture_raw, pace};
    let _turn = one_capture_at_a_time();
    let a = profiles::load("mm-unstable-20230210").unwrap();
    let b = profiles::load("pvl-v2").unwrap();
    for (w, turns) in [(WorkloadKind::Pft, 2), (WorkloadKind::PageFault1, 1)] {
        let paced = pace::pace(w, &[a.clone(), b.clone()], 4, 16 << 20, turns).unwrap();
        assert_eq!(paced.compute_ns.len(), 2);
        for t in &paced.compute_ns {
            assert_eq!(t.len(), turns, "{w}: {paced:?}");
            assert!(
                t.iter().all(|t| t.is_finite() && *t > 0.0),
                "{w}: {paced:?}"
            );
        }
        let rel = paced.relative().unwrap();
        assert!(
            rel.iter().all(|r| r.is_finite() && *r > 0.0),
            "{w}: {rel:?}"
        );
    }
    let e = pace::pace(
        WorkloadKind::Netpipe,
        std::slice::from_ref(&a),
        4,
        16 << 20,
        2,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not netpipe"), "{e}");

    let mut spec = CaptureSpec::new(WorkloadKind::Pft, a, 4);
    spec.pft_bytes = 16 << 20;
    let raw = capture_raw(&spec).unwrap();
    let own = raw.compute_per_op().unwrap();
    let compute_per_op = |t: &Trace| {
        let c: f64 = t
            .events
            .iter()
            .map(|e| match e {
                Event::Compute { ns } => *ns,
                _ => 0.0,
            })
            .sum();
        c / t.meta.ops as f64
    };
    // What the trace holds unpaced: at most the recording's gaps, at least nothing.
    let unpaced = compute_per_op(&raw.clone().build());
    assert!(unpaced > 0.0);
    for target in [0.5 * unpaced, 3.0 * unpaced.max(own)] {
        let mut r = raw.clone();
        r.pace_to(target, 1.0, 2);
        let t = r.build();
        let per_op = compute_per_op(&t);
        assert!((per_op / target - 1.0).abs() < 0.01, "{per_op} {target}");
        let p = t.meta.paced.expect("paced");
        assert_eq!((p.compute_ns, p.measured_ns, p.turns), (target, own, 2));
        // The capture's overhead and its summary still speak of what was measured.
        let measured = t.meta.untraced_measured_ns() / t.meta.ops as f64;
        assert!(
            (measured - own - raw_writes(&t)).abs() < 1e-6 * measured,
            "{measured} {own}"
        );
        assert!(t.summary().contains("paced: compute"), "{}", t.summary());
    }
}

/// The untraced window's page writes per operation, as kept in the trace's meta.
fn raw_writes(t: &Trace) -> f64 {
    t.meta.untraced_write_ns.unwrap() / t.meta.ops as f64
}
