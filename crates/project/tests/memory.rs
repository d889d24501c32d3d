//! The replay's memory under load against its closed form: N CPUs of one node clearing pages,
//! with a loaded-latency curve that is linear in the utilisation, write at the rate the
//! quadratic fixed point gives (crates/project/src/memory.rs).

mod common;

use common::TestMachine;
use pagelab_project::machine::Machine;
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Trace, Window};

/// One socket of `cores` cores, one core clearing at `core_gbs`, the node peaking at
/// `node_gbs`, latency `l0 (1 + k u)` at utilisation u.
fn machine(cores: usize, core_gbs: f64, node_gbs: f64, l0: f64, k: f64) -> Machine {
    TestMachine {
        core_gbs,
        node_gbs,
        loaded_latency: Some([l0, l0 * (1.0 + k)]),
        ..TestMachine::new(cores)
    }
    .build()
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
        meta: common::meta(Window::Cycle, pages as u64),
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
