//! The replay's memory under load against its closed form: N CPUs of one node clearing pages,
//! with a loaded-latency curve that is linear in the utilisation, write at the rate the
//! quadratic fixed point gives (crates/project/src/memory.rs).

use pagelab_project::machine::Machine;
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Pinning, Trace, TraceMeta, Window};

/// One socket of `cores` cores, one core clearing at `core_gbs`, the node peaking at
/// `node_gbs`, latency `l0 (1 + k u)` at utilisation u.
fn machine(cores: usize, core_gbs: f64, node_gbs: f64, l0: f64, k: f64) -> Machine {
    Machine::parse(
        &format!(
            r#"
name = "test"
description = "test machine"
[cpu]
model = "test"
ghz = 2.0
[topology]
sockets = 1
cores_per_socket = {cores}
threads_per_core = 1
[numa]
distance = [[10]]
[latency]
smt_ns = 1.0
core_ns = 50.0
atomic_ns = 5.0
[latency.remote_ns]
[memory]
node_bandwidth_gbs = {node_gbs}
core_bandwidth_gbs = {core_gbs}
loaded_latency = [[0.0, {l0}], [1.0, {l1}]]
[kernel]
trap_ns = 300.0
wakeup_ns = 2000.0
ipi_ns = 1000.0
ipi_handler_ns = 500.0
"#,
            l1 = l0 * (1.0 + k)
        ),
        "test",
    )
    .unwrap()
}

/// A cyclic trace of page clears and nothing else.
fn clears(pages: usize) -> Trace {
    let mut events = Vec::new();
    for _ in 0..pages {
        events.push(Event::Write {
            bytes: 4096,
            host_ns: 1.0,
        });
        events.push(Event::Ops { n: 1 });
    }
    Trace {
        meta: TraceMeta {
            workload: "synthetic".into(),
            profile: "test".into(),
            profile_toml: String::new(),
            op_unit: "ops".into(),
            window: Window::Cycle,
            pinning: Pinning::Cores,
            shared_vma: false,
            kernel_cpus: 1,
            host_cpu: "test".into(),
            host_ghz: 2.0,
            ops: pages as u64,
            raw_events: 0,
            overhead_ns_per_event: 0.0,
            traced_ns: 1.0,
            untraced_ns: 1.0,
            compute_scale: 1.0,
        },
        instances: Vec::new(),
        events,
        fallbacks: Vec::new(),
    }
}

fn rate(m: &Machine, t: &Trace, n: usize) -> f64 {
    let r = Replay::new(
        m,
        t,
        ReplaySpec {
            tasks: n,
            threads: false,
            seed: 3,
            samples: 4,
            ops_per_cpu: None,
        },
    )
    .unwrap()
    .run(3)
    .unwrap();
    r.samples.iter().sum::<f64>() / r.samples.len() as f64
}

/// Pages per second of `n` writers: `n c (1 + k u1) = u B (1 + k u)` solved for u, at most 1.
fn closed_form(n: usize, c: f64, b: f64, k: f64) -> f64 {
    let u1 = c / b;
    let q = n as f64 * c * (1.0 + k * u1);
    let u = ((-b + (b * b + 4.0 * k * b * q).sqrt()) / (2.0 * k * b)).min(1.0);
    u * b * 1e9 / 4096.0
}

#[test]
fn writers_on_one_node_slow_as_its_loaded_latency_curve_says() {
    // One core clears at 10 GB/s, the node peaks at 40: latency doubles from idle to peak.
    let (c, b, k) = (10.0, 40.0, 1.0);
    let m = machine(16, c, b, 100.0, k);
    let t = clears(2000);
    for n in [1, 2, 3, 4, 6, 8, 16] {
        let got = rate(&m, &t, n);
        let want = closed_form(n, c, b, k);
        assert!(
            (got - want).abs() / want < 0.01,
            "{n} writers: {got:.0} pages/s, closed form {want:.0}"
        );
    }
    // Below the peak the curve costs throughput that plain sharing would not: at 3 writers
    // (30 of 40 GB/s asked for), each writes below its 10 GB/s.
    let shared = 3.0 * c * 1e9 / 4096.0;
    assert!(rate(&m, &t, 3) < 0.9 * shared, "{}", rate(&m, &t, 3));
    // One writer alone clears at the core's bandwidth: the curve does not move one-task rows.
    let one = c * 1e9 / 4096.0;
    assert!((rate(&m, &t, 1) - one).abs() / one < 0.01);
}
