//! `pagelab project --sensitivity` on hand-built traces: two profiles that differ only in how
//! often a fault moves one shared line, replayed on a test machine with each number scaled
//! alone.

mod common;

use std::sync::atomic::AtomicBool;

use common::TestMachine;
use pagelab_project::project::{ProjectSpec, Projection, project_traces};
use pagelab_project::sensitivity::{ChangeKey, Param, changes, sensitivity};
use pagelab_project::trace::{Event, Instance, Trace, Window};
use pagelab_sync::Scope;
use pagelab_sync::trace::LockModel;
use pagelab_workloads::{Mode, WorkloadKind};

/// A cyclic trace whose operations each take a trap (the test machine's 300 ns) and make
/// `atomics` atomics on one line every thread of the mm shares, each after 200 / `atomics` ns
/// of compute (so that another CPU can take the line between two of them).
fn trace(atomics: usize) -> Trace {
    let n = 4000;
    let mut op = vec![Event::Trap];
    for _ in 0..atomics {
        op.push(Event::Compute {
            ns: 200.0 / atomics as f64,
        });
        op.push(Event::Atomic { inst: 0 });
    }
    op.push(Event::Ops { n: 1 });
    let mut meta = common::meta(Window::Cycle, n);
    meta.ops = n;
    Trace {
        meta,
        instances: vec![Instance {
            class: "shared line".into(),
            scope: Scope::Mm,
            model: LockModel::Line,
            sleeps: false,
            rwsem: None,
        }],
        events: (0..n).flat_map(|_| op.iter().copied()).collect(),
        fallbacks: Vec::new(),
    }
}

fn spec() -> ProjectSpec {
    let profile = |n: &str| pagelab_bench::profiles::load(n).expect("shipped profile");
    ProjectSpec {
        machine: TestMachine::new(4).build(),
        workload: WorkloadKind::PageFault1,
        profiles: vec![profile("linux-6.7"), profile("pvl-v2")],
        modes: vec![Mode::Threads],
        tasks: vec![1, 4],
        samples: 2,
        captures: 1,
        seed: 1,
        ops_per_cpu: 8192,
        region_bytes: None,
        kvcache: None,
    }
}

fn key(tasks: usize) -> ChangeKey {
    ChangeKey {
        profile: "pvl-v2".into(),
        mode: Mode::Threads,
        tasks,
        metric: "ops/sec".into(),
    }
}

/// The test spec, the two profiles' traces (one atomic a fault, two) and their projection on
/// the machine as it is: what every sensitivity run below starts from.
fn projected() -> (ProjectSpec, Vec<Vec<Trace>>, Vec<Projection>) {
    let spec = spec();
    let traces = vec![vec![trace(1)], vec![trace(2)]];
    let (base, stopped) =
        project_traces(&spec, traces.clone(), &mut |_| {}, &AtomicBool::new(false)).unwrap();
    assert!(!stopped);
    (spec, traces, base)
}

#[test]
fn a_change_that_stands_on_a_moved_line_moves_with_the_transfer_and_not_with_the_trap() {
    let (spec, traces, base) = projected();
    let never = AtomicBool::new(false);
    let mut seen = Vec::new();
    let s = sensitivity(
        &spec,
        &traces,
        &base,
        &[Param::CoreNs, Param::TrapNs, Param::RemoteNs, Param::Clock],
        &[0.5, 1.5, 1000.0],
        &mut |v| seen.push((v.param, v.factor, v.error.is_some())),
        &never,
    )
    .unwrap();
    assert!(!s.interrupted);
    assert_eq!(
        s.base,
        changes(&base),
        "the base is the projection as given"
    );
    // The one-socket test machine has no remote latency: that parameter is not replayed.
    assert!(seen.iter().all(|(p, _, _)| *p != Param::RemoteNs));
    assert_eq!(
        seen.len(),
        9,
        "three parameters, three factors each: {seen:?}"
    );
    // A clock 1000 times the test machine's is no valid machine: reported, not replayed.
    let bad = s
        .variants
        .iter()
        .find(|v| v.param == Param::Clock && v.factor == 1000.0)
        .unwrap();
    assert!(bad.changes.is_err(), "{:?}", bad.changes);
    let at = |p: Param, f: f64, k: &ChangeKey| {
        *s.variants
            .iter()
            .find(|v| v.param == p && v.factor == f)
            .unwrap()
            .changes
            .as_ref()
            .unwrap()
            .get(k)
            .unwrap()
    };
    // One thread: the line never moves, and an atomic on a line the CPU holds keeps the line
    // busy but not the CPU: the profiles are alike whatever the transfer.
    let one = s.base[&key(1)];
    assert!(one.abs() < 0.5, "{one}");
    assert!((at(Param::CoreNs, 1.5, &key(1)) - one).abs() < 0.2);
    // Four threads share the line: the second atomic is a second move a fault, and a slower
    // move makes the change larger.
    let four = s.base[&key(4)];
    assert!(four < one, "{four} against {one}");
    let (slow, fast) = (
        at(Param::CoreNs, 1.5, &key(4)),
        at(Param::CoreNs, 0.5, &key(4)),
    );
    assert!(slow < four && four < fast, "{slow} {four} {fast}");
    // A longer trap spaces both profiles' visits to the line out (less contention, a smaller
    // change), but moves the change less than the transfer does.
    let trap = at(Param::TrapNs, 1.5, &key(4));
    assert!(four < trap, "trap x1.5 {trap} against {four}");
    assert!(
        trap - four < four - slow,
        "trap {trap}, transfer {slow}, base {four}"
    );
    let spread = s.spread(&key(4)).unwrap();
    assert_eq!(spread.low.1, Param::CoreNs);
    assert!(spread.flips.is_empty(), "{spread:?}");
}

#[test]
fn a_factor_that_is_not_a_positive_number_is_refused() {
    let (spec, traces, base) = projected();
    let never = AtomicBool::new(false);
    for f in [0.0, -1.0, f64::NAN] {
        let e = sensitivity(
            &spec,
            &traces,
            &base,
            &[Param::CoreNs],
            &[f],
            &mut |_| {},
            &never,
        )
        .unwrap_err();
        assert!(e.to_string().contains("positive"), "{e}");
    }
}

#[test]
fn a_stop_ends_the_run_between_variants() {
    let (spec, traces, base) = projected();
    let stop = AtomicBool::new(false);
    let s = sensitivity(
        &spec,
        &traces,
        &base,
        &[Param::CoreNs, Param::TrapNs],
        &[0.5, 1.5],
        &mut |_| stop.store(true, std::sync::atomic::Ordering::Relaxed),
        &stop,
    )
    .unwrap();
    assert!(s.interrupted);
    assert_eq!(s.variants.len(), 1, "the first variant, then the stop");
}

/// Every parameter a machine uses moves a replay that exercises it: no variant is a silent
/// no-op (as scaling every point of the loaded-latency curve alike was, the replay reading the
/// curve as ratios). One operation: a trap, compute of varying length (so that the CPUs meet
/// the shared line in no fixed order), an atomic on a line all threads share, a page cleared
/// and a TLB shootdown, on two sockets of two cores with two hardware threads each and a
/// rising loaded-latency curve; and, for the wake-up, a sleeping rwsem taken for writing.
#[test]
fn every_parameter_moves_a_replay_that_uses_it() {
    use pagelab_project::machine::Machine;
    use pagelab_project::replay::{Replay, ReplaySpec};
    use pagelab_sync::rwsem::RwsemAlgo;
    let mut m = TestMachine {
        sockets: 2,
        threads_per_core: 2,
        smt_throughput: 1.3,
        loaded_latency: Some([80.0, 240.0]),
        core_gbs: 10.0,
        node_gbs: 30.0,
        ..TestMachine::new(2)
    }
    .build();
    // The test machine's sibling transfer (1 ns) is too small for half of it to show.
    m.latency.smt_ns = 20.0;
    let n = 2000u64;
    let inst = |class: &str, model, rwsem: Option<RwsemAlgo>| Instance {
        class: class.into(),
        scope: Scope::Mm,
        model,
        sleeps: rwsem.is_some(),
        rwsem,
    };
    let mut meta = common::meta(Window::Cycle, n);
    meta.ops = n;
    let main = Trace {
        meta: meta.clone(),
        instances: vec![
            inst("shared line", LockModel::Line, None),
            inst("tlb shootdown", LockModel::Queued, None),
        ],
        events: (0..n)
            .flat_map(|i| {
                [
                    Event::Trap,
                    Event::Compute {
                        ns: 100.0 + (i * 37 % 101) as f64,
                    },
                    Event::Atomic { inst: 0 },
                    Event::Write {
                        bytes: 4096,
                        host_ns: 1.0,
                    },
                    Event::TlbFlush { inst: 1 },
                    Event::Ops { n: 1 },
                ]
            })
            .collect(),
        fallbacks: Vec::new(),
    };
    let sleeping = Trace {
        meta,
        instances: vec![inst(
            "mmap_lock",
            LockModel::RwSem,
            Some(RwsemAlgo::SleepFifo),
        )],
        events: (0..n)
            .flat_map(|_| {
                [
                    Event::Compute { ns: 200.0 },
                    Event::Acquire {
                        inst: 0,
                        shared: false,
                        trylock: false,
                    },
                    Event::Compute { ns: 300.0 },
                    Event::Release {
                        inst: 0,
                        shared: false,
                    },
                    Event::Ops { n: 1 },
                ]
            })
            .collect(),
        fallbacks: Vec::new(),
    };
    let rate = |m: &Machine, t: &Trace| {
        let spec = ReplaySpec {
            tasks: 8,
            threads: true,
            seed: 3,
            samples: 2,
            ops_per_cpu: None,
        };
        let s = Replay::new(m, t, spec).unwrap().run(3).unwrap().samples;
        s.iter().sum::<f64>() / s.len() as f64
    };
    for p in Param::ALL {
        assert!(p.applies_to(&m), "{} applies to the test machine", p.key());
        let t = if p == Param::WakeupNs {
            &sleeping
        } else {
            &main
        };
        let (base, moved) = (rate(&m, t), rate(&p.apply(&m, 1.5), t));
        assert!(
            (moved / base - 1.0).abs() > 1e-4,
            "{} x1.5 left the replay at {moved} (base {base})",
            p.key()
        );
    }
}
