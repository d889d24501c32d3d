//! Machine descriptions (`machines/*.toml`): the physical properties the replay costs a trace
//! with, and nothing fitted to any experiment.
//!
//! A machine is sockets of cores of hardware threads, split into NUMA nodes, with a distance
//! matrix between nodes as the firmware's SLIT gives it (`numactl --hardware`): 10 for local,
//! larger for farther, so router hierarchies of large machines are just more distinct values.
//! A cache line moving between two CPUs costs by how far apart they are: hardware threads of one
//! core, cores of one node, or nodes at a given distance. Memory writes share each node's
//! bandwidth. The `[kernel]` costs (trap, wake-up, IPI) are the kernel mechanisms the engine
//! does not execute but a real machine pays.
//!
//! CPUs are numbered as Linux numbers them on x86: first thread of every core, socket by
//! socket, then the second threads in the same order.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A checked machine description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub name: String,
    pub description: String,
    pub cpu: Cpu,
    pub topology: Topology,
    pub numa: Numa,
    pub latency: Latency,
    pub memory: Memory,
    pub kernel: KernelCosts,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// The processor model, for reports.
    pub model: String,
    /// Clock with every core busy (all-core turbo), GHz: the engine's compute, measured in
    /// cycles of the capture host, is replayed at this clock.
    pub ghz: f64,
    /// Throughput of a core's two hardware threads together, relative to one thread alone
    /// (1.0: no gain; only read when `threads_per_core` is 2).
    #[serde(default = "one")]
    pub smt_throughput: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub sockets: usize,
    pub cores_per_socket: usize,
    pub threads_per_core: usize,
    /// NUMA nodes each socket is split into (sub-NUMA clustering, NPS settings).
    #[serde(default = "one_usize")]
    pub nodes_per_socket: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Numa {
    /// `distance[a][b]`, SLIT values: 10 on the diagonal, more than 10 elsewhere.
    pub distance: Vec<Vec<u32>>,
}

/// Cache-line transfer latencies: the time from a CPU's request until it owns a line that
/// another CPU held modified.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Between the hardware threads of one core (the line is in their shared L1/L2).
    pub smt_ns: f64,
    /// Between two cores of one node.
    pub core_ns: f64,
    /// Between nodes, by SLIT distance (`"21" = 120.0`): every off-diagonal distance of the
    /// matrix needs one.
    pub remote_ns: BTreeMap<String, f64>,
    /// An atomic read-modify-write of a line already in this core's cache: how long the line
    /// stays busy after it arrives.
    pub atomic_ns: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Sustained write bandwidth of one node with all its cores writing, GB/s.
    pub node_bandwidth_gbs: f64,
    /// Sustained write bandwidth of one core alone (page clearing), GB/s.
    pub core_bandwidth_gbs: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelCosts {
    /// A page-fault exception's entry and return (with the kernel's mitigations).
    pub trap_ns: f64,
    /// Waking a task that sleeps on a lock until it runs (a sleeping lock's hand-off).
    pub wakeup_ns: f64,
    /// A TLB shootdown as its sender sees it: IPIs sent and every acknowledgement back.
    pub ipi_ns: f64,
    /// What taking the IPI and flushing costs each CPU that receives it.
    pub ipi_handler_ns: f64,
}

fn one() -> f64 {
    1.0
}
fn one_usize() -> usize {
    1
}

/// `(name, TOML)` of every shipped machine.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "broadwell-2s-44c",
        include_str!("../../../machines/broadwell-2s-44c.toml"),
    ),
    (
        "icelake-2s-64c",
        include_str!("../../../machines/icelake-2s-64c.toml"),
    ),
    (
        "epyc-bergamo-2s-256c",
        include_str!("../../../machines/epyc-bergamo-2s-256c.toml"),
    ),
    ("dev-host", include_str!("../../../machines/dev-host.toml")),
];

/// Where a CPU is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuPos {
    pub socket: usize,
    pub node: usize,
    /// Global core number.
    pub core: usize,
    pub thread: usize,
}

impl Machine {
    /// A shipped machine by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Machine, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Machine::parse(text, name_or_path);
        }
        let p = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || p.exists() {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("machine file {name_or_path}: {e}"))?;
            return Machine::parse(&text, name_or_path);
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(format!(
            "unknown machine `{name_or_path}`; shipped machines: {} (or give a path to a .toml file)",
            names.join(", ")
        ))
    }

    /// Parses and checks a description (`what` names it in errors).
    pub fn parse(text: &str, what: &str) -> Result<Machine, String> {
        let m: Machine = toml::from_str(text).map_err(|e| {
            let msg = e.message().to_string();
            format!("machine {what}: {}", msg.trim())
        })?;
        m.check().map_err(|e| format!("machine {what}: {e}"))?;
        Ok(m)
    }

    /// The description as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a machine serialises")
    }

    fn check(&self) -> Result<(), String> {
        let t = &self.topology;
        if self.name.trim().is_empty() {
            return Err("name is empty".into());
        }
        for (k, v) in [
            ("topology.sockets", t.sockets),
            ("topology.cores_per_socket", t.cores_per_socket),
            ("topology.nodes_per_socket", t.nodes_per_socket),
        ] {
            if v == 0 {
                return Err(format!("{k} must be at least 1"));
            }
        }
        if !(1..=2).contains(&t.threads_per_core) {
            return Err(format!(
                "topology.threads_per_core must be 1 or 2, not {}",
                t.threads_per_core
            ));
        }
        if !t.cores_per_socket.is_multiple_of(t.nodes_per_socket) {
            return Err(format!(
                "topology.cores_per_socket ({}) must be a multiple of nodes_per_socket ({})",
                t.cores_per_socket, t.nodes_per_socket
            ));
        }
        if self.nr_cpus() > 65_536 {
            return Err(format!("{} CPUs is more than 65536", self.nr_cpus()));
        }
        let positive = [
            ("cpu.ghz", self.cpu.ghz),
            ("latency.smt_ns", self.latency.smt_ns),
            ("latency.core_ns", self.latency.core_ns),
            ("memory.node_bandwidth_gbs", self.memory.node_bandwidth_gbs),
            ("memory.core_bandwidth_gbs", self.memory.core_bandwidth_gbs),
        ];
        for (k, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{k} must be a positive number, not {v}"));
            }
        }
        let non_negative = [
            ("latency.atomic_ns", self.latency.atomic_ns),
            ("kernel.trap_ns", self.kernel.trap_ns),
            ("kernel.wakeup_ns", self.kernel.wakeup_ns),
            ("kernel.ipi_ns", self.kernel.ipi_ns),
            ("kernel.ipi_handler_ns", self.kernel.ipi_handler_ns),
        ];
        for (k, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{k} must be zero or more, not {v}"));
            }
        }
        if !(self.cpu.smt_throughput.is_finite() && (1.0..=2.0).contains(&self.cpu.smt_throughput))
        {
            return Err(format!(
                "cpu.smt_throughput must be between 1.0 and 2.0, not {}",
                self.cpu.smt_throughput
            ));
        }
        if self.memory.core_bandwidth_gbs > self.memory.node_bandwidth_gbs {
            return Err(format!(
                "memory.core_bandwidth_gbs ({}) exceeds node_bandwidth_gbs ({})",
                self.memory.core_bandwidth_gbs, self.memory.node_bandwidth_gbs
            ));
        }
        let nodes = self.nr_nodes();
        let d = &self.numa.distance;
        if d.len() != nodes || d.iter().any(|r| r.len() != nodes) {
            return Err(format!(
                "numa.distance must be {nodes} x {nodes} (sockets x nodes_per_socket nodes)"
            ));
        }
        for (a, row) in d.iter().enumerate() {
            for (b, &v) in row.iter().enumerate() {
                if a == b && v != 10 {
                    return Err(format!("numa.distance[{a}][{a}] must be 10, not {v}"));
                }
                if a != b {
                    if v <= 10 {
                        return Err(format!(
                            "numa.distance[{a}][{b}] must be more than 10, not {v}"
                        ));
                    }
                    let lat = self.latency.remote_ns.get(&v.to_string()).ok_or_else(|| {
                        format!("latency.remote_ns has no entry for distance {v}")
                    })?;
                    if !(lat.is_finite() && *lat > 0.0) {
                        return Err(format!(
                            "latency.remote_ns.{v} must be a positive number, not {lat}"
                        ));
                    }
                }
            }
        }
        for k in self.latency.remote_ns.keys() {
            if k.parse::<u32>().is_err() {
                return Err(format!(
                    "latency.remote_ns key `{k}` is not a NUMA distance (an integer)"
                ));
            }
        }
        Ok(())
    }

    /// This machine as the engine runs on it: the engine takes no exception, its sleeping
    /// locks spin and its TLB shootdown is already in its own compute, so the kernel costs
    /// are zero. What the self-consistency check projects.
    pub fn as_engine(&self) -> Machine {
        Machine {
            kernel: KernelCosts {
                trap_ns: 0.0,
                wakeup_ns: 0.0,
                ipi_ns: 0.0,
                ipi_handler_ns: 0.0,
            },
            ..self.clone()
        }
    }

    pub fn nr_nodes(&self) -> usize {
        self.topology.sockets * self.topology.nodes_per_socket
    }

    pub fn nr_cores(&self) -> usize {
        self.topology.sockets * self.topology.cores_per_socket
    }

    pub fn nr_cpus(&self) -> usize {
        self.nr_cores() * self.topology.threads_per_core
    }

    /// Where Linux CPU `cpu` is.
    pub fn pos(&self, cpu: usize) -> CpuPos {
        let t = &self.topology;
        let cores = self.nr_cores();
        let core = cpu % cores;
        let thread = cpu / cores;
        let socket = core / t.cores_per_socket;
        let per_node = t.cores_per_socket / t.nodes_per_socket;
        let node = socket * t.nodes_per_socket + (core % t.cores_per_socket) / per_node;
        CpuPos {
            socket,
            node,
            core,
            thread,
        }
    }

    /// The CPU the `i`-th task runs on under `pinning`, for `tasks` tasks.
    ///
    /// `Cores` follows will-it-scale (task i on core i mod cores, the first socket's cores
    /// first); since a task is bound to a whole core, tasks beyond the core count share cores
    /// with the first ones, one per hardware thread. `Spread` is what the scheduler's load
    /// balancing converges to for busy tasks: nodes in turn, one task per core until every
    /// core has one, then the second threads.
    pub fn cpu_of(&self, i: usize, pinning: crate::trace::Pinning) -> usize {
        let cores = self.nr_cores();
        let thread = (i / cores) % self.topology.threads_per_core;
        let k = i % cores;
        let core = match pinning {
            crate::trace::Pinning::Cores => k,
            crate::trace::Pinning::Spread => {
                let nodes = self.nr_nodes();
                let per_node = cores / nodes;
                (k % nodes) * per_node + k / nodes
            }
        };
        thread * cores + core
    }

    /// Cache-line transfer latency between CPUs `a` and `b`, ns (0 for the same CPU).
    pub fn transfer_ns(&self, a: usize, b: usize) -> f64 {
        if a == b {
            return 0.0;
        }
        let (pa, pb) = (self.pos(a), self.pos(b));
        if pa.core == pb.core {
            self.latency.smt_ns
        } else if pa.node == pb.node {
            self.latency.core_ns
        } else {
            let d = self.numa.distance[pa.node][pb.node];
            self.latency.remote_ns[&d.to_string()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Pinning;

    #[test]
    fn every_shipped_machine_loads() {
        for (name, _) in BUILTIN {
            let m = Machine::load(name).unwrap();
            assert_eq!(&m.name, name);
            let again = Machine::parse(&m.to_toml(), "round trip").unwrap();
            assert_eq!(again, m);
        }
    }

    fn two_socket() -> Machine {
        Machine::load("broadwell-2s-44c").unwrap()
    }

    #[test]
    fn cpus_are_numbered_as_linux_does() {
        let m = two_socket();
        assert_eq!(m.nr_cpus(), 88);
        assert_eq!(m.pos(0).socket, 0);
        assert_eq!(m.pos(21).socket, 0);
        assert_eq!(m.pos(22).socket, 1);
        assert_eq!(m.pos(44).core, 0);
        assert_eq!(m.pos(44).thread, 1);
        assert_eq!(m.transfer_ns(0, 44), m.latency.smt_ns);
        assert_eq!(m.transfer_ns(0, 1), m.latency.core_ns);
        assert_eq!(m.transfer_ns(0, 22), m.latency.remote_ns["21"]);
        assert_eq!(m.transfer_ns(3, 3), 0.0);
    }

    #[test]
    fn placements_follow_the_benchmarks() {
        let m = two_socket();
        // will-it-scale: the first 22 tasks on socket 0, then socket 1, then SMT siblings.
        let cores: Vec<usize> = (0..46).map(|i| m.cpu_of(i, Pinning::Cores)).collect();
        assert_eq!(&cores[..3], &[0, 1, 2]);
        assert_eq!(m.pos(cores[22]).socket, 1);
        assert_eq!(cores[44], 44);
        // The scheduler: alternate sockets.
        let spread: Vec<usize> = (0..4).map(|i| m.cpu_of(i, Pinning::Spread)).collect();
        assert_eq!(
            spread.iter().map(|&c| m.pos(c).socket).collect::<Vec<_>>(),
            [0, 1, 0, 1]
        );
        let all: std::collections::HashSet<usize> =
            (0..88).map(|i| m.cpu_of(i, Pinning::Spread)).collect();
        assert_eq!(all.len(), 88, "every CPU used once");
    }

    #[test]
    fn bad_descriptions_get_one_clear_error() {
        let good = two_socket().to_toml();
        let cases: &[(&str, &str, &str)] = &[
            (
                "sockets = 2",
                "sockets = 0",
                "topology.sockets must be at least 1",
            ),
            (
                "threads_per_core = 2",
                "threads_per_core = 4",
                "threads_per_core must be 1 or 2",
            ),
            (
                "ghz = 2.8",
                "ghz = -1.0",
                "cpu.ghz must be a positive number",
            ),
            (
                "[[10, 21], [21, 10]]",
                "[[10, 21], [21, 11]]",
                "distance[1][1] must be 10",
            ),
            (
                "[[10, 21], [21, 10]]",
                "[[10, 31], [31, 10]]",
                "no entry for distance 31",
            ),
            ("[[10, 21], [21, 10]]", "[[10]]", "must be 2 x 2"),
            (
                "name = ",
                "colour = \"red\"\nname = ",
                "unknown field `colour`",
            ),
        ];
        for (from, to, want) in cases {
            assert!(good.contains(from), "{from} not in\n{good}");
            let bad = good.replacen(from, to, 1);
            let e = Machine::parse(&bad, "x.toml").unwrap_err();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(e.starts_with("machine x.toml: "), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = Machine::load("no-such-machine").unwrap_err();
        assert!(e.contains("shipped machines"), "{e}");
    }
}
