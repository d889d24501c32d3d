//! What the replay's closed-form tests share: a one-socket test machine and the metadata of a
//! hand-built trace.

// Each test binary uses its own subset of these.
#![allow(dead_code)]

use pagelab_project::machine::Machine;
use pagelab_project::trace::{Pinning, TraceMeta, Window};

/// A one-socket machine of `cores` cores at 2 GHz (the test traces' clock, so their compute is
/// replayed unscaled), one node, no SMT; fields left at [`TestMachine::new`]'s values unless
/// a test sets them.
pub struct TestMachine {
    pub cores: usize,
    /// Every transfer between two cores.
    pub core_ns: f64,
    pub atomic_ns: f64,
    pub core_gbs: f64,
    pub node_gbs: f64,
    /// The loaded-latency curve's two ends, `[latency at 0, latency at full utilisation]`.
    pub loaded_latency: Option<[f64; 2]>,
    /// Sockets of `cores` cores each, a node each, 100 ns apart.
    pub sockets: usize,
    /// Hardware threads per core, and their throughput together (`cpu.smt_throughput`).
    pub threads_per_core: usize,
    pub smt_throughput: f64,
    /// `cpu.turbo_ghz` (empty: every core at 2 GHz).
    pub turbo_ghz: Vec<f64>,
}

impl TestMachine {
    pub fn new(cores: usize) -> Self {
        TestMachine {
            cores,
            core_ns: 50.0,
            atomic_ns: 5.0,
            core_gbs: 100.0,
            node_gbs: 100.0,
            loaded_latency: None,
            sockets: 1,
            threads_per_core: 1,
            smt_throughput: 1.0,
            turbo_ghz: Vec::new(),
        }
    }

    pub fn build(&self) -> Machine {
        let TestMachine {
            cores,
            core_ns,
            atomic_ns,
            core_gbs,
            node_gbs,
            loaded_latency,
            sockets,
            threads_per_core,
            smt_throughput,
            turbo_ghz,
        } = self;
        let curve = loaded_latency
            .map(|[l0, l1]| format!("loaded_latency = [[0.0, {l0}], [1.0, {l1}]]"))
            .unwrap_or_default();
        let distance: Vec<Vec<u32>> = (0..*sockets)
            .map(|a| {
                (0..*sockets)
                    .map(|b| if a == b { 10 } else { 20 })
                    .collect()
            })
            .collect();
        let remote = if *sockets > 1 { "20 = 100.0" } else { "" };
        Machine::parse(
            &format!(
                r#"
name = "test"
description = "test machine"
[cpu]
model = "test"
ghz = 2.0
turbo_ghz = {turbo_ghz:?}
smt_throughput = {smt_throughput:?}
[topology]
sockets = {sockets}
cores_per_socket = {cores}
threads_per_core = {threads_per_core}
[numa]
distance = {distance:?}
[latency]
smt_ns = 1.0
core_ns = {core_ns}
atomic_ns = {atomic_ns}
[latency.remote_ns]
{remote}
[memory]
node_bandwidth_gbs = {node_gbs}
core_bandwidth_gbs = {core_gbs}
{curve}
[kernel]
trap_ns = 300.0
wakeup_ns = 2000.0
ipi_ns = 1000.0
ipi_handler_ns = 500.0
"#
            ),
            "test",
        )
        .unwrap()
    }
}

/// A synthetic trace's metadata: `ops` operations of a `window` trace, pinned to cores, its
/// compute on a 2 GHz host and replayed as recorded (no overhead, scale 1).
pub fn meta(window: Window, ops: u64) -> TraceMeta {
    TraceMeta {
        workload: "synthetic".into(),
        profile: "test".into(),
        profile_toml: String::new(),
        op_unit: "ops".into(),
        window,
        pinning: Pinning::Cores,
        shared_vma: false,
        kernel_cpus: 1,
        host_cpu: "test".into(),
        host_ghz: 2.0,
        ops,
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
    }
}
