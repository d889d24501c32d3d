//! Random machine values, absurd ones included (1e-12, 1e15, 0, negative, `nan` and `inf` in the
//! file, CPU counts far past 4096), through parsing, checking and a small replay: never a panic,
//! an error of one line naming a key, or a replay that ends within a bounded number of events with
//! finite figures. Issue 17 item 4: `core_ns = 1e10` once grew a replay to 24 GB, `1e15` aborted
//! it, and a bandwidth of `1e-12` hung it.

use pagelab_project::machine::{MAX_CPUS, Machine};
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Instance, Pinning, Trace, TraceMeta, Window};
use pagelab_sync::Scope;
use pagelab_sync::trace::LockModel;
use proptest::prelude::*;

/// A number as a machine file may spell it: mostly plausible, often absurd.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (-1.0f64..6.0).prop_map(|e| format!("{:?}", 10f64.powf(e))),
        1 => prop::sample::select(vec![
            "0.0", "-0.0", "-1.0", "1e-12", "1e-3", "0.1", "1e5", "1e10", "1e15", "1e300",
            "nan", "inf", "-inf", "100000.0", "10000.0", "10.0",
        ])
        .prop_map(str::to_string),
    ]
}

/// A count: small and plausible, or far too large.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 1u64..=4,
        1 => Just(0u64),
        1 => prop::sample::select(vec![64u64, 4096, 4097, 1 << 20, 1 << 40, i64::MAX as u64]),
    ]
}

#[derive(Clone, Debug)]
struct Values {
    ghz: String,
    smt_throughput: String,
    sockets: u64,
    cores_per_socket: u64,
    threads_per_core: u64,
    nodes_per_socket: u64,
    smt_ns: String,
    core_ns: String,
    remote_ns: String,
    atomic_ns: String,
    node_gbs: String,
    core_gbs: String,
    kernel: [String; 4],
    /// Off-diagonal distance and a perturbation of the matrix.
    distance: u32,
    asymmetric: bool,
}

fn values() -> impl Strategy<Value = Values> {
    (
        (number(), number(), count(), count(), 1u64..=3, count()),
        (number(), number(), number(), number(), number(), number()),
        [number(), number(), number(), number()],
        (prop_oneof![4 => Just(21u32), 1 => 0u32..300], any::<bool>()),
    )
        .prop_map(
            |(
                (
                    ghz,
                    smt_throughput,
                    sockets,
                    cores_per_socket,
                    threads_per_core,
                    nodes_per_socket,
                ),
                (smt_ns, core_ns, remote_ns, atomic_ns, node_gbs, core_gbs),
                kernel,
                (distance, asymmetric),
            )| Values {
                ghz,
                smt_throughput,
                sockets,
                cores_per_socket,
                threads_per_core,
                nodes_per_socket,
                smt_ns,
                core_ns,
                remote_ns,
                atomic_ns,
                node_gbs,
                core_gbs,
                kernel,
                distance,
                asymmetric,
            },
        )
}

fn toml_text(v: &Values) -> String {
    // The matrix has as many nodes as the topology asks for, up to a size worth writing out.
    let nodes = (v.sockets.saturating_mul(v.nodes_per_socket)).clamp(1, 16) as usize;
    let rows: Vec<String> = (0..nodes)
        .map(|a| {
            let r: Vec<String> = (0..nodes)
                .map(|b| {
                    if a == b {
                        10
                    } else if v.asymmetric && a < b {
                        v.distance + 1
                    } else {
                        v.distance
                    }
                })
                .map(|d| d.to_string())
                .collect();
            format!("[{}]", r.join(", "))
        })
        .collect();
    format!(
        r#"
name = "prop"
description = "random"
[cpu]
model = "random"
ghz = {}
smt_throughput = {}
[topology]
sockets = {}
cores_per_socket = {}
threads_per_core = {}
nodes_per_socket = {}
[numa]
distance = [{}]
[latency]
smt_ns = {}
core_ns = {}
atomic_ns = {}
[latency.remote_ns]
{} = {}
[memory]
node_bandwidth_gbs = {}
core_bandwidth_gbs = {}
[kernel]
trap_ns = {}
wakeup_ns = {}
ipi_ns = {}
ipi_handler_ns = {}
"#,
        v.ghz,
        v.smt_throughput,
        v.sockets,
        v.cores_per_socket,
        v.threads_per_core,
        v.nodes_per_socket,
        rows.join(", "),
        v.smt_ns,
        v.core_ns,
        v.atomic_ns,
        v.distance,
        v.remote_ns,
        v.node_gbs,
        v.core_gbs,
        v.kernel[0],
        v.kernel[1],
        v.kernel[2],
        v.kernel[3],
    )
}

/// A tiny trace that meets every cost of the machine: a shared queued lock, a ticket lock, a
/// sleeping rwsem, a shared line, a page write, a trap and a TLB flush.
fn trace(window: Window) -> Trace {
    let inst = |class: &str, scope, model, sleeps| Instance {
        class: class.into(),
        scope,
        model,
        sleeps,
        rwsem: None,
    };
    let acq = |inst, shared| Event::Acquire {
        inst,
        shared,
        trylock: false,
    };
    let rel = |inst, shared| Event::Release { inst, shared };
    let mut events = Vec::new();
    for i in 0..4 {
        events.extend([
            Event::Compute { ns: 200.0 },
            Event::Trap,
            acq(2, i % 2 == 0),
            acq(0, false),
            Event::Compute { ns: 30.0 },
            rel(0, false),
            acq(1, false),
            rel(1, false),
            Event::Atomic { inst: 3 },
            Event::Write {
                bytes: 4096,
                host_ns: 100.0,
            },
            rel(2, i % 2 == 0),
            Event::TlbFlush { inst: 2 },
            Event::Ops { n: 1 },
        ]);
    }
    Trace {
        meta: TraceMeta {
            workload: "synthetic".into(),
            profile: "test".into(),
            profile_toml: String::new(),
            op_unit: "ops".into(),
            window,
            pinning: Pinning::Spread,
            shared_vma: true,
            kernel_cpus: 1,
            host_cpu: "test".into(),
            host_ghz: 2.0,
            ops: 4,
            raw_events: 0,
            overhead_ns_per_event: 0.0,
            traced_ns: 1.0,
            untraced_ns: 1.0,
            untraced_write_ns: None,
            event_cost_ns: None,
            untraced_unmap_ns: None,
            unmap_event_cost_ns: None,
            untraced_holds: Vec::new(),
            compute_scale: 1.0,
            guard: None,
            paced: None,
            iterations: 1,
        },
        instances: vec![
            inst("zone->lock", Scope::Node, LockModel::Queued, false),
            inst("ticket", Scope::Machine, LockModel::Ticket, false),
            inst("mmap_lock", Scope::Mm, LockModel::RwSem, true),
            inst("rss", Scope::Mm, LockModel::Line, false),
        ],
        events,
        fallbacks: Vec::new(),
    }
}

/// Far more than the tiny trace needs on any machine (a few hundred events per task), far
/// less than what the runaway replays of issue 17 processed.
const EVENT_BOUND: u64 = 1_000_000;

/// Replays the tiny trace on `m` with a few task counts, both windows and both modes.
fn replay_is_bounded_and_finite(m: &Machine) -> Result<(), TestCaseError> {
    let cpus = m.nr_cpus();
    for window in [Window::Cycle, Window::Once] {
        let t = trace(window);
        for tasks in [1, 2.min(cpus), 8.min(cpus)] {
            for threads in [false, true] {
                let spec = ReplaySpec {
                    tasks,
                    threads,
                    seed: 3,
                    samples: 3,
                    ops_per_cpu: None,
                };
                let r = Replay::new(m, &t, spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let r = r.run(3).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(r.events <= EVENT_BOUND, "{} events", r.events);
                prop_assert!(r.span_ns.is_finite() && r.span_ns > 0.0, "{}", r.span_ns);
                for s in r.samples.iter().chain(&r.ops_per_cpu_sec) {
                    prop_assert!(s.is_finite() && *s >= 0.0, "{s}");
                }
                for c in &r.classes {
                    prop_assert!(c.wait_ns.is_finite() && c.wait_ns >= 0.0, "{c:?}");
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A machine file with random values: refused in one line naming a key, or valid and
    /// replayed within bounds.
    #[test]
    fn random_machine_files_are_refused_by_key_or_replay_within_bounds(v in values()) {
        let text = toml_text(&v);
        match Machine::parse(&text, "prop.toml").map_err(|e| e.to_string()) {
            Err(e) => {
                prop_assert!(e.starts_with("machine prop.toml: "), "{e}");
                prop_assert!(!e.contains('\n'), "one line: {e}");
                let names_a_key = ["cpu.", "topology", "numa.distance", "latency.", "memory.", "kernel."]
                    .iter()
                    .any(|k| e.contains(k));
                prop_assert!(names_a_key, "names no key: {e}");
            }
            Ok(m) => {
                prop_assert!(m.nr_cpus() <= MAX_CPUS);
                replay_is_bounded_and_finite(&m)?;
            }
        }
    }

    /// A machine built in code skips parsing: the replay checks it itself, and refuses what a
    /// file would have been refused for.
    #[test]
    fn machines_built_in_code_are_checked_by_the_replay(
        core_ns in prop_oneof![Just(1e10), Just(1e15), Just(f64::NAN), Just(0.0), 0.1f64..1e5],
        gbs in prop_oneof![Just(1e-12), Just(0.0), Just(f64::INFINITY), 0.1f64..1e4],
        atomic_ns in prop_oneof![Just(-5.0), Just(1e15), 0.1f64..1e5],
        ghz in prop_oneof![Just(1e-9), Just(1e9), 0.1f64..10.0],
    ) {
        let mut m = Machine::load("dev-host").unwrap();
        m.latency.core_ns = core_ns;
        m.memory.node_bandwidth_gbs = gbs;
        m.memory.core_bandwidth_gbs = gbs;
        m.latency.atomic_ns = atomic_ns;
        m.cpu.ghz = ghz;
        let valid = m.check().is_ok();
        let in_range = |v: f64, lo: f64, hi: f64| (lo..=hi).contains(&v);
        prop_assert_eq!(
            valid,
            in_range(core_ns, 0.1, 1e5)
                && in_range(gbs, 0.1, 1e4)
                && in_range(atomic_ns, 0.1, 1e5)
                && in_range(ghz, 0.1, 10.0)
        );
        let t = trace(Window::Cycle);
        let spec = ReplaySpec { tasks: 2, threads: true, seed: 1, samples: 2, ops_per_cpu: None };
        match Replay::new(&m, &t, spec).map_err(|e| e.to_string()) {
            Err(e) => {
                prop_assert!(!valid, "a valid machine refused: {e}");
                prop_assert!(e.starts_with("machine dev-host: ") && !e.contains('\n'), "{e}");
            }
            Ok(_) => {
                prop_assert!(valid);
                replay_is_bounded_and_finite(&m)?;
            }
        }
    }
}
