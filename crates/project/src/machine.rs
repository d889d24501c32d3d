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

pub use crate::error::MachineError;

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
    /// How `kernel.trap_ns` was fitted, for the machines of published tables: what
    /// `pagelab calibrate --machine NAME --from-table TABLE` printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// The inputs of the one fitted number of a published machine, `kernel.trap_ns`: the table
/// whose baseline one-task row it matches ([`crate::calibrate::fitted_rows`]) and what the
/// replay gives that row without it. `trap_ns` is the published time per operation less
/// `replayed_ns`, so anyone can redo the arithmetic, and a test redoes it for every shipped
/// file ([`crate::calibrate::trap_fit`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The published table (`data/published/<table>.csv`).
    pub table: String,
    /// Nanoseconds per operation of the replay of the fitted row with `trap_ns = 0`, on the
    /// host that captured the trace (the file's comment names it and the date).
    pub replayed_ns: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// The processor model, for reports.
    pub model: String,
    /// Clock with every core busy (all-core turbo), GHz: the engine's compute, measured in
    /// cycles of the capture host, is converted at this clock, then stretched or shrunk to the
    /// clock of its socket's busy cores when `turbo_ghz` lists them.
    pub ghz: f64,
    /// The clock with `k` cores of a socket running, at index `k - 1` (Intel Turbo Boost's
    /// per-active-core ratio limits, `MSR_TURBO_RATIO_LIMIT`): a socket with few busy cores
    /// runs them faster than `ghz`, so one task's fault costs fewer nanoseconds than one of many
    /// tasks' on the same socket. Non-increasing, its last entry `ghz`, which holds for more
    /// cores than it lists. Empty: every core runs at `ghz` whatever the load (no turbo, or
    /// a table not published for the part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turbo_ghz: Vec<f64>,
    /// Throughput of a core's two hardware threads together, relative to one thread alone
    /// (1.0: no gain; only read when `threads_per_core` is 2).
    #[serde(default = "one")]
    pub smt_throughput: f64,
    /// How much of its CPU the host gives each of `tasks` tasks pinned one per CPU, as
    /// `[tasks, fraction, off_ns]` entries, measured ([`crate::calibrate::cpu_share`]): the
    /// fraction of the wall time the task runs, and the mean time it waits, each time it is
    /// descheduled, before it runs again (0: slices far shorter than anything the replay times,
    /// a uniform slowdown). Below 1 where the CPUs run other work too: the scheduler (CFS,
    /// `kernel/sched/fair.c`) runs each runnable task on a CPU in turn for a slice, and a
    /// hypervisor's vCPU runs only while the host runs it. A task descheduled inside a
    /// critical section keeps the lock for the whole wait (lock-holder preemption, what
    /// paravirt spinlocks work around for vCPUs, `kernel/locking/qspinlock_paravirt.h`). Empty
    /// (every task owns its CPU) for the described machines; the self-check's measured host
    /// has it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share: Vec<[f64; 3]>,
}

impl Cpu {
    /// The clock of a socket with `active` cores running (`turbo_ghz`, else `ghz`).
    pub fn clock_at(&self, active: usize) -> f64 {
        match self.turbo_ghz.len() {
            0 => self.ghz,
            n => self.turbo_ghz[active.clamp(1, n) - 1],
        }
    }

    /// Each task's `(fraction of the wall time it runs, mean wait in ns each time it is
    /// descheduled)` with `tasks` tasks: the entry for that task count, else the one for the
    /// most tasks below it (more tasks never get more of a CPU each), else its whole CPU.
    pub fn share_at(&self, tasks: usize) -> (f64, f64) {
        self.share
            .iter()
            .filter(|e| e[0] <= tasks as f64)
            .max_by(|a, b| a[0].total_cmp(&b[0]))
            .map_or((1.0, 0.0), |e| (e[1], e[2]))
    }
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

/// The NUMA distances: a matrix as written (`distance`), or a router fabric (`fabric`) the loader
/// expands into one. Either way `distance` holds the matrix once loaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "NumaFile", into = "NumaFile")]
pub struct Numa {
    /// `distance[a][b]`, SLIT values: 10 on the diagonal, more than 10 elsewhere.
    pub distance: Vec<Vec<u32>>,
    /// The router hierarchy the matrix was built from, when the file describes one (written
    /// back instead of the matrix).
    pub fabric: Option<Fabric>,
}

/// `[numa]` as a file writes it: a matrix or a fabric, not both.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NumaFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    distance: Option<Vec<Vec<u32>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fabric: Option<Fabric>,
}

impl TryFrom<NumaFile> for Numa {
    type Error = MachineError;

    fn try_from(f: NumaFile) -> Result<Numa, MachineError> {
        match (f.distance, f.fabric) {
            (Some(distance), None) => Ok(Numa {
                distance,
                fabric: None,
            }),
            (None, Some(fabric)) => Ok(Numa {
                distance: fabric.distances()?,
                fabric: Some(fabric),
            }),
            (Some(_), Some(_)) => Err(MachineError::Key(
                "numa: give numa.distance or numa.fabric, not both (the fabric is expanded into the matrix)"
                    .into(),
            )),
            (None, None) => Err(MachineError::Key(
                "numa: give numa.distance (the SLIT matrix) or numa.fabric (a router hierarchy)"
                    .into(),
            )),
        }
    }
}

impl From<Numa> for NumaFile {
    fn from(n: Numa) -> NumaFile {
        match n.fabric {
            Some(f) => NumaFile {
                distance: None,
                fabric: Some(f),
            },
            None => NumaFile {
                distance: Some(n.distance),
                fabric: None,
            },
        }
    }
}

/// A router fabric, for machines whose nodes meet through a hierarchy of routers (SGI's
/// NUMAlink: a node's hub, the routers of its brick, rack routers, metarouters). Writing out the
/// SLIT of 256 nodes would take 65 536 numbers; the hierarchy that determines it takes a few.
///
/// Nodes are grouped level by level, innermost first: the first `levels[0].nodes` nodes share
/// the innermost routers, and so on, every level's group a whole number of the level below's.
/// Two nodes whose smallest common group is level `i` are `levels[i].routers` routers apart (the
/// routers a request crosses one way), and their SLIT distance is
/// `10 + ROUTER_DISTANCE x routers`: in proportion to the routers crossed, as the firmware of
/// such machines reports it. The latency a distance costs is the machine's
/// `latency.remote_ns` entry for it, so a file states the per-router latency there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    pub levels: Vec<FabricLevel>,
}

/// One level of a [`Fabric`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricLevel {
    /// What a group of this level is (`brick`, `rack`), for reading the file.
    pub name: String,
    /// Nodes in one group of this level.
    pub nodes: usize,
    /// Routers crossed between two nodes whose smallest common group is this level's.
    pub routers: u32,
}

/// SLIT units per router crossed, in a distance matrix built from a [`Fabric`].
pub const ROUTER_DISTANCE: u32 = 10;

impl Fabric {
    /// Nodes in all (the outermost level's group).
    pub fn nodes(&self) -> usize {
        self.levels.last().map_or(0, |l| l.nodes)
    }

    /// Routers crossed between nodes `a` and `b` (0 for the same node).
    pub fn routers(&self, a: usize, b: usize) -> u32 {
        if a == b {
            return 0;
        }
        self.levels
            .iter()
            .find(|l| a / l.nodes == b / l.nodes)
            .map_or(u32::MAX, |l| l.routers)
    }

    /// Checks the hierarchy (one line naming the key) and expands it into a SLIT matrix.
    pub fn distances(&self) -> Result<Vec<Vec<u32>>, MachineError> {
        let key = "numa.fabric.levels";
        if self.levels.is_empty() {
            return Err(MachineError::Key(format!(
                "{key} is empty; give at least one level of routers"
            )));
        }
        let max_routers = (MAX_DISTANCE - LOCAL_DISTANCE) / ROUTER_DISTANCE;
        for (i, l) in self.levels.iter().enumerate() {
            if l.nodes < 2 || l.nodes > MAX_CPUS {
                return Err(MachineError::Key(format!(
                    "{key}[{i}].nodes must be from 2 to {MAX_CPUS} (a group of nodes), not {}",
                    l.nodes
                )));
            }
            if !(1..=max_routers).contains(&l.routers) {
                return Err(MachineError::Key(format!(
                    "{key}[{i}].routers must be from 1 to {max_routers} (SLIT distances stop at {MAX_DISTANCE}), not {}",
                    l.routers
                )));
            }
            if i > 0 {
                let p = &self.levels[i - 1];
                if l.nodes <= p.nodes || !l.nodes.is_multiple_of(p.nodes) {
                    return Err(MachineError::Key(format!(
                        "{key}[{i}].nodes ({}) must be a multiple of {key}[{}].nodes ({}) and larger: each group is made of whole groups of the level below",
                        l.nodes,
                        i - 1,
                        p.nodes
                    )));
                }
                if l.routers < p.routers {
                    return Err(MachineError::Key(format!(
                        "{key}[{i}].routers ({}) is below {key}[{}].routers ({}); a larger group's nodes are not nearer",
                        l.routers,
                        i - 1,
                        p.routers
                    )));
                }
            }
        }
        let n = self.nodes();
        Ok((0..n)
            .map(|a| {
                (0..n)
                    .map(|b| LOCAL_DISTANCE + ROUTER_DISTANCE * self.routers(a, b))
                    .collect()
            })
            .collect())
    }
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
    /// The node's loaded-latency curve: `[utilisation, ns]` points, utilisation as a fraction
    /// of `node_bandwidth_gbs` from 0 up to at most 1, latency not falling as it rises (what
    /// `mlc --loaded_latency` measures). Each writer's bandwidth falls as the latency of its
    /// line fills rises ([`crate::memory`]); empty: a flat latency, the node's bandwidth shared
    /// equally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded_latency: Vec<[f64; 2]>,
    /// The kernel's page size on this machine, bytes (4096 unless the file says otherwise:
    /// ia64 Linux on SGI Altix ran 16 KiB pages). A fault clears one page, so the bytes every
    /// traced page write stands for follow it (the engine's pages are
    /// [`pagelab_mm::page::PAGE_SIZE`]).
    #[serde(
        default = "default_page_size",
        skip_serializing_if = "is_default_page_size"
    )]
    pub page_size: u64,
    /// Memory of one NUMA node, GiB: what the kernel's memory-derived tunables follow (the
    /// per-CPU lists' automatic batch and high, the vmstat fold threshold), which a capture
    /// sizes for this machine instead of its own small arena ([`Machine::tunables_for`]).
    /// Absent: unknown, and captures size them from their arena.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_gib: Option<f64>,
}

fn default_page_size() -> u64 {
    DEFAULT_PAGE_SIZE
}
fn is_default_page_size(v: &u64) -> bool {
    *v == DEFAULT_PAGE_SIZE
}

/// Page size when a machine file names none: x86's 4 KiB.
pub const DEFAULT_PAGE_SIZE: u64 = 4096;
/// The largest page size a machine may have: ia64's largest base page (64 KiB).
pub const MAX_PAGE_SIZE: u64 = 64 << 10;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelCosts {
    /// A page-fault exception's entry and return (with the kernel's mitigations), and for a
    /// published machine whatever else its fault costs beyond the engine's model (the one fitted
    /// number). With `cpu.turbo_ghz` it is the cost at one busy core's clock, where the fitted
    /// one-task row ran; the replay stretches all of it as the socket's clock falls.
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
    (
        "epyc-7k62-2s",
        include_str!("../../../machines/epyc-7k62-2s.toml"),
    ),
    (
        "altix-3700-512p",
        include_str!("../../../machines/altix-3700-512p.toml"),
    ),
    (
        "broadwell-2s-20c",
        include_str!("../../../machines/broadwell-2s-20c.toml"),
    ),
    (
        "granite-rapids-2s-128c",
        include_str!("../../../machines/granite-rapids-2s-128c.toml"),
    ),
    (
        "skylake-sp-2s-52c",
        include_str!("../../../machines/skylake-sp-2s-52c.toml"),
    ),
];

/// At most this many CPUs (sockets x cores x threads): Linux's `NR_CPUS` of distribution
/// kernels of the era, and more than any machine a published table ran on.
pub const MAX_CPUS: usize = 4096;
/// Sockets of one machine. x86 machines glue at most 32, but the format counts an SGI Altix
/// node (a SHUB with two single-socket CPUs on one front-side bus) as one socket of two cores,
/// and such machines reached 256 nodes (512 CPUs) in one system image; ia64 Linux allowed 1024
/// NUMA nodes (`NODES_SHIFT` up to 10). The CPU bound, [`MAX_CPUS`], is the one that counts.
pub const MAX_SOCKETS: usize = 1024;
/// NUMA nodes per socket (sub-NUMA clustering and NPS settings split a socket in up to 4).
pub const MAX_NODES_PER_SOCKET: usize = 16;
/// A node's SLIT distance to itself.
pub const LOCAL_DISTANCE: u32 = 10;
/// The farthest SLIT distance: ACPI stores one byte, and 255 means unreachable.
pub const MAX_DISTANCE: u32 = 254;

/// The physical range of a floating-point parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub lo: f64,
    pub hi: f64,
    /// Zero is admitted too (a cost the machine does not pay, as [`Machine::as_engine`] says).
    pub zero: bool,
    pub unit: &'static str,
}

impl Range {
    /// Whether `v` is within the range (never for NaN or an infinity).
    pub fn admits(&self, v: f64) -> bool {
        (self.zero && v == 0.0) || (self.lo..=self.hi).contains(&v)
    }

    /// "from 0.1 to 100000 ns", as errors and the docs give it.
    pub fn describe(&self) -> String {
        format!(
            "{}from {} to {} {}",
            if self.zero { "0 or " } else { "" },
            self.lo,
            self.hi,
            self.unit
        )
    }
}

/// Cache-line and kernel latencies: 0.1 ns (a fraction of a cycle at 10 GHz) to 100 us (far
/// beyond any transfer or trap; a wake-up from the deepest C-state is about that).
pub const LATENCY: Range = Range {
    lo: 0.1,
    hi: 100_000.0,
    zero: false,
    unit: "ns",
};
/// The kernel's costs, which the engine itself does not pay (zero there).
pub const KERNEL_COST: Range = Range {
    zero: true,
    ..LATENCY
};
/// Write bandwidths: 0.1 GB/s (a single DRAM channel of the 1990s) to 10 TB/s (beyond HBM).
pub const BANDWIDTH: Range = Range {
    lo: 0.1,
    hi: 10_000.0,
    zero: false,
    unit: "GB/s",
};
/// Memory of one node: 64 MiB to 64 TiB.
pub const NODE_MEMORY: Range = Range {
    lo: 1.0 / 16.0,
    hi: 65_536.0,
    zero: false,
    unit: "GiB",
};
/// All-core clock.
pub const CLOCK: Range = Range {
    lo: 0.1,
    hi: 10.0,
    zero: false,
    unit: "GHz",
};
/// Two hardware threads' throughput relative to one: from no gain to two whole cores.
pub const SMT_THROUGHPUT: Range = Range {
    lo: 1.0,
    hi: 2.0,
    zero: false,
    unit: "(times one thread)",
};

/// The range of the floating-point parameter at dotted key `key`.
pub fn range_of(key: &str) -> Range {
    match key {
        "cpu.ghz" => CLOCK,
        "cpu.smt_throughput" => SMT_THROUGHPUT,
        k if k.starts_with("kernel.") => KERNEL_COST,
        "memory.node_gib" => NODE_MEMORY,
        k if k.starts_with("memory.") => BANDWIDTH,
        _ => LATENCY,
    }
}

/// A machine name becomes part of stored labels (`<profile>@<machine>`): letters, digits, `.`,
/// `_` and `-`, at most 64 of them.
pub fn check_name(name: &str) -> Result<(), MachineError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(MachineError::Key(format!(
            "name `{}` must be 1 to 64 letters, digits, `.`, `_` or `-`",
            name.escape_debug()
        )))
    }
}

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
    /// Where `kernel.trap_ns` comes from, in one line for whoever projects with it, `given`
    /// being how they named the machine. A fitted trap is the published time per operation
    /// less the replay of the engine's capture, so it moves with the host that captured it:
    /// broadwell-2s-44c's, fitted on an AMD EPYC guest at 770 ns, came out 546 ns when fitted
    /// again on an Intel Xeon guest (2026-11-30). `validate` and `reproduce` fit it again from
    /// their own captures; `project` takes the file's, and says so.
    pub fn trap_source(&self, given: &str) -> String {
        match &self.calibration {
            Some(c) => format!(
                "kernel.trap_ns {} ns, the machine file's: fitted to {} on the host that calibrated it, and it moves with the host that captures (`pagelab calibrate --machine {given} --from-table {}` fits it on this one)",
                self.kernel.trap_ns, c.table, c.table
            ),
            None => format!(
                "kernel.trap_ns {} ns, the machine file's estimate (no published table is fitted to {})",
                self.kernel.trap_ns, self.name
            ),
        }
    }

    /// A shipped machine by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Machine, MachineError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Machine::parse(text, name_or_path);
        }
        let p = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || p.exists() {
            let text = std::fs::read_to_string(p).map_err(|source| MachineError::Read {
                path: name_or_path.to_string(),
                source,
            })?;
            let m = Machine::parse(&text, name_or_path)?;
            m.check_not_a_shipped_name(name_or_path)?;
            return Ok(m);
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(MachineError::Unknown {
            name: name_or_path.to_string(),
            shipped: names.join(", "),
        })
    }

    /// Parses and checks a description (`what` names it in errors).
    pub fn parse(text: &str, what: &str) -> Result<Machine, MachineError> {
        let m: Machine = toml::from_str(text).map_err(|source| MachineError::Toml {
            what: what.to_string(),
            source,
        })?;
        m.check().map_err(|e| MachineError::In {
            what: what.to_string(),
            source: Box::new(e),
        })?;
        Ok(m)
    }

    /// A file that takes a shipped machine's name must describe that machine: projected rows
    /// are stored as `<profile>@<machine>`, and a modified copy that kept the name would put its
    /// rows under the shipped machine's labels, where `compare` pools them with the real ones.
    /// An identical copy (comments, key order and `description` aside) is accepted.
    fn check_not_a_shipped_name(&self, what: &str) -> Result<(), MachineError> {
        let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == self.name) else {
            return Ok(());
        };
        let shipped = Machine::parse(text, &self.name)?;
        match shipped.first_difference(self) {
            None => Ok(()),
            Some(key) => Err(MachineError::ShippedName {
                what: what.to_string(),
                name: self.name.clone(),
                key,
            }),
        }
    }

    /// The description as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a machine serialises")
    }

    /// Checks every parameter against its physical range (see [`RANGES`] and the module
    /// docs). Called on every file loaded and by the replay on any machine it is given, so a
    /// description built in code cannot reach the replay's arithmetic with values that would
    /// overflow it or make it spin. The error is one line naming the key and its range.
    pub fn check(&self) -> Result<(), MachineError> {
        check_name(&self.name)?;
        let t = &self.topology;
        for (k, v, lo, hi) in [
            ("topology.sockets", t.sockets, 1, MAX_SOCKETS),
            ("topology.cores_per_socket", t.cores_per_socket, 1, MAX_CPUS),
            ("topology.threads_per_core", t.threads_per_core, 1, 2),
            (
                "topology.nodes_per_socket",
                t.nodes_per_socket,
                1,
                MAX_NODES_PER_SOCKET,
            ),
        ] {
            if !(lo..=hi).contains(&v) {
                return Err(MachineError::Key(format!(
                    "{k} must be at least {lo} and at most {hi}, not {v}"
                )));
            }
        }
        if !t.cores_per_socket.is_multiple_of(t.nodes_per_socket) {
            return Err(MachineError::Key(format!(
                "topology.cores_per_socket ({}) must be a multiple of nodes_per_socket ({})",
                t.cores_per_socket, t.nodes_per_socket
            )));
        }
        // Each factor is bounded above, so the product cannot overflow.
        let cpus = t.sockets * t.cores_per_socket * t.threads_per_core;
        if cpus > MAX_CPUS {
            return Err(MachineError::Key(format!(
                "topology: sockets x cores_per_socket x threads_per_core is {cpus} CPUs; at most {MAX_CPUS}"
            )));
        }
        for (k, v) in self.numbers() {
            let r = range_of(&k);
            if !r.admits(v) {
                return Err(MachineError::Key(format!(
                    "{k} must be {}, not {v}",
                    r.describe()
                )));
            }
        }
        if self.memory.core_bandwidth_gbs > self.memory.node_bandwidth_gbs {
            return Err(MachineError::Key(format!(
                "memory.core_bandwidth_gbs ({}) exceeds node_bandwidth_gbs ({})",
                self.memory.core_bandwidth_gbs, self.memory.node_bandwidth_gbs
            )));
        }
        self.check_loaded_latency()?;
        for (i, &[n, f, off]) in self.cpu.share.iter().enumerate() {
            // A scheduler's wait is a few slices: milliseconds, never a second.
            if !(0.0..=1e9).contains(&off) {
                return Err(MachineError::Key(format!(
                    "cpu.share[{i}] off_ns must be from 0 to 1e9 ns (a second), not {off}"
                )));
            }
            if n < 1.0 || n.fract() != 0.0 || n > MAX_CPUS as f64 {
                return Err(MachineError::Key(format!(
                    "cpu.share[{i}] task count must be a whole number from 1 to {MAX_CPUS}, not {n}"
                )));
            }
            if f.is_nan() || f <= 0.0 || f > 1.0 {
                return Err(MachineError::Key(format!(
                    "cpu.share[{i}] fraction must be above 0 and at most 1, not {f}"
                )));
            }
        }
        self.check_turbo()?;
        if let Some(c) = &self.calibration {
            if c.table.is_empty() {
                return Err(MachineError::Key(
                    "calibration.table must name a published table".into(),
                ));
            }
            if !LATENCY.admits(c.replayed_ns) {
                return Err(MachineError::Key(format!(
                    "calibration.replayed_ns must be {}, not {}",
                    LATENCY.describe(),
                    c.replayed_ns
                )));
            }
        }
        for k in self.latency.remote_ns.keys() {
            if k.parse::<u32>().is_err() {
                return Err(MachineError::Key(format!(
                    "latency.remote_ns key `{k}` is not a NUMA distance (an integer)"
                )));
            }
        }
        let p = self.memory.page_size;
        if !(DEFAULT_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&p) || !p.is_power_of_two() {
            return Err(MachineError::Key(format!(
                "memory.page_size must be a power of two from {DEFAULT_PAGE_SIZE} to {MAX_PAGE_SIZE} bytes, not {p}"
            )));
        }
        let nodes = self.nr_nodes();
        if let Some(f) = &self.numa.fabric
            && f.nodes() != nodes
        {
            return Err(MachineError::Key(format!(
                "numa.fabric describes {} nodes (its outermost level's), but the topology has {nodes} (sockets x nodes_per_socket)",
                f.nodes()
            )));
        }
        let d = &self.numa.distance;
        if d.len() != nodes {
            return Err(MachineError::Key(format!(
                "numa.distance has {} rows; it must be {nodes} x {nodes} (sockets x nodes_per_socket nodes)",
                d.len()
            )));
        }
        if let Some((a, row)) = d.iter().enumerate().find(|(_, r)| r.len() != nodes) {
            return Err(MachineError::Key(format!(
                "numa.distance[{a}] has {} entries; it must be {nodes} x {nodes} (sockets x nodes_per_socket nodes)",
                row.len()
            )));
        }
        for (a, row) in d.iter().enumerate() {
            for (b, &v) in row.iter().enumerate() {
                if a == b && v != LOCAL_DISTANCE {
                    return Err(MachineError::Key(format!(
                        "numa.distance[{a}][{a}] must be {LOCAL_DISTANCE} (a node to itself), not {v}"
                    )));
                }
                if a == b {
                    continue;
                }
                if !(LOCAL_DISTANCE + 1..=MAX_DISTANCE).contains(&v) {
                    return Err(MachineError::Key(format!(
                        "numa.distance[{a}][{b}] must be from {} to {MAX_DISTANCE} (a SLIT distance farther than the node itself), not {v}",
                        LOCAL_DISTANCE + 1
                    )));
                }
                if d[b][a] != v {
                    return Err(MachineError::Key(format!(
                        "numa.distance[{a}][{b}] is {v} but numa.distance[{b}][{a}] is {}; the matrix must be symmetric",
                        d[b][a]
                    )));
                }
                if !self.latency.remote_ns.contains_key(&v.to_string()) {
                    return Err(MachineError::Key(format!(
                        "latency.remote_ns has no entry for distance {v}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// `cpu.turbo_ghz`: clocks in [`CLOCK`]'s range, one per active core at most, never rising
    /// as cores wake, and ending at the all-core clock `cpu.ghz`.
    fn check_turbo(&self) -> Result<(), MachineError> {
        let t = &self.cpu.turbo_ghz;
        if t.len() > self.topology.cores_per_socket {
            return Err(MachineError::Key(format!(
                "cpu.turbo_ghz lists {} clocks, more than the {} cores of a socket",
                t.len(),
                self.topology.cores_per_socket
            )));
        }
        for (i, &g) in t.iter().enumerate() {
            if !CLOCK.admits(g) {
                return Err(MachineError::Key(format!(
                    "cpu.turbo_ghz[{i}] must be {}, not {g}",
                    CLOCK.describe()
                )));
            }
            if i > 0 && g > t[i - 1] {
                return Err(MachineError::Key(format!(
                    "cpu.turbo_ghz[{i}] ({g} GHz) is above the clock with fewer cores ({} GHz); a socket does not speed up as cores wake",
                    t[i - 1]
                )));
            }
        }
        if let Some(&last) = t.last()
            && last != self.cpu.ghz
        {
            return Err(MachineError::Key(format!(
                "cpu.turbo_ghz ends at {last} GHz, not at the all-core clock cpu.ghz ({} GHz)",
                self.cpu.ghz
            )));
        }
        Ok(())
    }

    /// `memory.loaded_latency`: at least two points, the first at utilisation 0, utilisations
    /// rising to at most 1, every latency within [`LATENCY`] and none below the one before (a
    /// queue does not shorten as more traffic joins it).
    fn check_loaded_latency(&self) -> Result<(), MachineError> {
        let c = &self.memory.loaded_latency;
        if c.is_empty() {
            return Ok(());
        }
        let key = "memory.loaded_latency";
        if c.len() < 2 {
            return Err(MachineError::Key(format!(
                "{key} needs at least two [utilisation, ns] points (idle and loaded), not {}",
                c.len()
            )));
        }
        for (i, &[u, ns]) in c.iter().enumerate() {
            if !(0.0..=1.0).contains(&u) {
                return Err(MachineError::Key(format!(
                    "{key}[{i}] utilisation must be from 0 to 1 (a fraction of node_bandwidth_gbs), not {u}"
                )));
            }
            if !LATENCY.admits(ns) {
                return Err(MachineError::Key(format!(
                    "{key}[{i}] latency must be {}, not {ns}",
                    LATENCY.describe()
                )));
            }
            if i == 0 && u != 0.0 {
                return Err(MachineError::Key(format!(
                    "{key}[0] utilisation must be 0 (the idle latency), not {u}"
                )));
            }
            if i > 0 {
                let [pu, pns] = c[i - 1];
                if u <= pu {
                    return Err(MachineError::Key(format!(
                        "{key}[{i}] utilisation {u} must be above the previous point's {pu}"
                    )));
                }
                if ns < pns {
                    return Err(MachineError::Key(format!(
                        "{key}[{i}] latency {ns} ns is below the previous point's {pns} ns; loaded latency does not fall as the load rises"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every floating-point parameter with its dotted key, in file order.
    fn numbers(&self) -> Vec<(String, f64)> {
        let mut v = vec![
            ("cpu.ghz".to_string(), self.cpu.ghz),
            ("cpu.smt_throughput".to_string(), self.cpu.smt_throughput),
            ("latency.smt_ns".to_string(), self.latency.smt_ns),
            ("latency.core_ns".to_string(), self.latency.core_ns),
            ("latency.atomic_ns".to_string(), self.latency.atomic_ns),
        ];
        for (k, &x) in &self.latency.remote_ns {
            v.push((format!("latency.remote_ns.{k}"), x));
        }
        v.extend([
            (
                "memory.node_bandwidth_gbs".to_string(),
                self.memory.node_bandwidth_gbs,
            ),
            (
                "memory.core_bandwidth_gbs".to_string(),
                self.memory.core_bandwidth_gbs,
            ),
        ]);
        if let Some(g) = self.memory.node_gib {
            v.push(("memory.node_gib".to_string(), g));
        }
        v.extend([
            ("kernel.trap_ns".to_string(), self.kernel.trap_ns),
            ("kernel.wakeup_ns".to_string(), self.kernel.wakeup_ns),
            ("kernel.ipi_ns".to_string(), self.kernel.ipi_ns),
            (
                "kernel.ipi_handler_ns".to_string(),
                self.kernel.ipi_handler_ns,
            ),
        ]);
        v
    }

    /// The first parameter in which `other` differs from this machine (its dotted key), ignoring
    /// the free-text `description`; `None` when they describe the same machine.
    pub fn first_difference(&self, other: &Machine) -> Option<String> {
        let key = |m: &Machine| {
            let mut m = m.clone();
            m.description.clear();
            match toml::Value::try_from(&m).expect("a machine serialises") {
                toml::Value::Table(t) => t,
                _ => unreachable!("a machine serialises to a table"),
            }
        };
        fn walk(prefix: &str, a: &toml::Table, b: &toml::Table) -> Option<String> {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (a.get(k), b.get(k)) {
                    (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                        if let Some(p) = walk(&path, x, y) {
                            return Some(p);
                        }
                    }
                    (x, y) if x != y => return Some(path),
                    _ => {}
                }
            }
            None
        }
        walk("", &key(self), &key(other))
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
            calibration: None,
            ..self.clone()
        }
    }

    pub fn nr_nodes(&self) -> usize {
        // Saturating: a machine built in code is only checked when the replay gets it.
        self.topology
            .sockets
            .saturating_mul(self.topology.nodes_per_socket)
    }

    pub fn nr_cores(&self) -> usize {
        self.topology
            .sockets
            .saturating_mul(self.topology.cores_per_socket)
    }

    pub fn nr_cpus(&self) -> usize {
        self.nr_cores()
            .saturating_mul(self.topology.threads_per_core)
    }

    /// What an engine standing for this machine sizes its memory-derived tunables for: one
    /// node's pages, the nodes, one node's CPUs. `None` when the file gives no node memory, or
    /// when its pages are not the engine's 4 KiB, which the engine's copies of the kernel's
    /// formulas (`zone_batchsize`'s 1 MiB cap, `min_free_kbytes`, the threshold's 128 MiB
    /// units) count in.
    pub fn tunables_for(&self) -> Option<pagelab_mm::TunablesFor> {
        let gib = self.memory.node_gib?;
        if self.memory.page_size != pagelab_mm::page::PAGE_SIZE as u64 {
            return None;
        }
        let nodes = self.nr_nodes();
        Some(pagelab_mm::TunablesFor {
            node_pages: (gib * (1u64 << 30) as f64 / self.memory.page_size as f64) as u64,
            nodes,
            node_cpus: (self.nr_cpus() / nodes.max(1)).max(1),
        })
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

    /// netpipe-hopcpu-2016's machine: two sockets of ten cores with two threads, a node each,
    /// and a fault cost that is the sourced exception round trip, not a calibration.
    #[test]
    fn the_2016_two_socket_machine_loads_as_described() {
        let m = Machine::load("broadwell-2s-20c").unwrap();
        assert_eq!(m.nr_cpus(), 40);
        assert_eq!(m.pos(9).socket, 0);
        assert_eq!(m.pos(10).socket, 1);
        assert_eq!(m.pos(20).core, m.pos(0).core);
        assert_eq!(m.pos(0).node, 0);
        assert_eq!(m.pos(10).node, 1);
        assert!(m.calibration.is_none(), "no table is fitted to it");
        assert!((m.kernel.trap_ns - 1050.0 / 3.1).abs() < 1.0);
    }

    /// `project` says where the trap it replays with comes from: a fitted one names its table
    /// and the command that fits it on this host; an estimate says no table is fitted.
    #[test]
    fn the_trap_says_where_it_comes_from() {
        let fitted = Machine::load("broadwell-2s-44c").unwrap();
        let s = fitted.trap_source("broadwell-2s-44c");
        assert!(
            s.starts_with(&format!("kernel.trap_ns {} ns", fitted.kernel.trap_ns)),
            "{s}"
        );
        assert!(
            s.contains(
                "pagelab calibrate --machine broadwell-2s-44c --from-table page_fault1-2018"
            ),
            "{s}"
        );
        let estimated = Machine::load("broadwell-2s-20c").unwrap();
        let s = estimated.trap_source("broadwell-2s-20c");
        assert!(s.contains("estimate"), "{s}");
        assert!(!s.contains("calibrate"), "{s}");
    }

    /// A capture stands for the machine's nodes: their pages in the machine's page size, the
    /// nodes, the CPUs of one. A machine without `memory.node_gib` leaves the arena's sizing.
    #[test]
    fn tunables_follow_the_nodes_memory_where_the_file_gives_it() {
        let t = Machine::load("skylake-sp-2s-52c")
            .unwrap()
            .tunables_for()
            .unwrap();
        assert_eq!((t.node_pages, t.nodes, t.node_cpus), (96 << 18, 2, 52));
        // 16 KiB pages: the engine's formulas count 4 KiB ones, so the arena sizes them.
        let altix = Machine::load("altix-3700-512p").unwrap();
        assert_eq!(altix.memory.node_gib, Some(4.0));
        assert!(altix.tunables_for().is_none());
        assert!(
            Machine::load("epyc-7k62-2s")
                .unwrap()
                .tunables_for()
                .is_none()
        );
        for name in [
            "broadwell-2s-44c",
            "icelake-2s-64c",
            "granite-rapids-2s-128c",
            "dev-host",
        ] {
            assert!(
                Machine::load(name).unwrap().memory.node_gib.is_some(),
                "{name}"
            );
        }
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
                "topology.threads_per_core must be at least 1 and at most 2, not 4",
            ),
            (
                "ghz = 2.8",
                "ghz = -1.0",
                "cpu.ghz must be from 0.1 to 10 GHz, not -1",
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
            let e = Machine::parse(&bad, "x.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(e.starts_with("machine x.toml: "), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = Machine::load("no-such-machine").unwrap_err().to_string();
        assert!(e.contains("shipped machines"), "{e}");
    }

    /// `cpu.turbo_ghz`: a clock per busy core at most, never rising with more cores, ending at
    /// the all-core `cpu.ghz`; each refused with one line naming the key.
    #[test]
    fn a_turbo_table_that_is_not_a_socket_slowing_to_its_all_core_clock_is_refused() {
        let mut m = two_socket();
        m.cpu.ghz = 2.8;
        m.cpu.turbo_ghz = vec![3.6, 3.4, 2.8];
        m.check().unwrap();
        assert_eq!(m.cpu.clock_at(0), 3.6);
        assert_eq!(m.cpu.clock_at(1), 3.6);
        assert_eq!(m.cpu.clock_at(2), 3.4);
        assert_eq!(m.cpu.clock_at(22), 2.8);
        let back = Machine::parse(&m.to_toml(), "x.toml").unwrap();
        assert_eq!(back.cpu.turbo_ghz, m.cpu.turbo_ghz);
        for (table, want) in [
            (vec![3.4, 3.6, 2.8], "cpu.turbo_ghz[1] (3.6 GHz) is above"),
            (vec![3.6, 3.0], "ends at 3 GHz, not at the all-core clock"),
            (
                vec![12.0, 2.8],
                "cpu.turbo_ghz[0] must be from 0.1 to 10 GHz",
            ),
            (vec![f64::NAN, 2.8], "cpu.turbo_ghz[0] must be"),
            (vec![2.8; 99], "more than the"),
        ] {
            let mut bad = m.clone();
            bad.cpu.turbo_ghz = table;
            let e = bad.check().unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        m.cpu.turbo_ghz.clear();
        assert_eq!(m.cpu.clock_at(1), 2.8);
    }

    /// `Machine::parse` of `m` written out, expecting one line that contains `want`.
    fn refused(m: &Machine, want: &str) {
        let e = Machine::parse(&m.to_toml(), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e} (wanted {want})");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    /// Every floating-point key, below and above its range, and as NaN and infinity.
    #[test]
    fn every_number_outside_its_physical_range_is_refused_by_key() {
        let good = two_socket();
        type Set = fn(&mut Machine, f64);
        let keys: &[(&str, Set)] = &[
            ("cpu.ghz", |m, v| m.cpu.ghz = v),
            ("cpu.smt_throughput", |m, v| m.cpu.smt_throughput = v),
            ("latency.smt_ns", |m, v| m.latency.smt_ns = v),
            ("latency.core_ns", |m, v| m.latency.core_ns = v),
            ("latency.atomic_ns", |m, v| m.latency.atomic_ns = v),
            ("latency.remote_ns.21", |m, v| {
                m.latency.remote_ns.insert("21".into(), v);
            }),
            ("memory.node_bandwidth_gbs", |m, v| {
                m.memory.node_bandwidth_gbs = v;
            }),
            ("memory.core_bandwidth_gbs", |m, v| {
                m.memory.core_bandwidth_gbs = v;
            }),
            ("memory.node_gib", |m, v| m.memory.node_gib = Some(v)),
            ("kernel.trap_ns", |m, v| m.kernel.trap_ns = v),
            ("kernel.wakeup_ns", |m, v| m.kernel.wakeup_ns = v),
            ("kernel.ipi_ns", |m, v| m.kernel.ipi_ns = v),
            ("kernel.ipi_handler_ns", |m, v| m.kernel.ipi_handler_ns = v),
        ];
        assert_eq!(keys.len(), good.numbers().len(), "a key is missing here");
        for &(key, set) in keys {
            let r = range_of(key);
            let below = if r.zero { r.lo / 2.0 } else { r.lo * 0.99 };
            for v in [below, r.hi * 1.01, -1.0, f64::NAN, f64::INFINITY, 1e15] {
                let mut m = good.clone();
                // Keep the two bandwidths ordered, so that the range is what fails.
                if key == "memory.node_bandwidth_gbs" {
                    m.memory.core_bandwidth_gbs = r.lo;
                }
                set(&mut m, v);
                refused(&m, &format!("{key} must be {}, not ", r.describe()));
            }
            // The ends of the range are admitted.
            for v in [r.lo, r.hi] {
                let mut m = good.clone();
                m.memory.core_bandwidth_gbs = BANDWIDTH.lo;
                m.memory.node_bandwidth_gbs = BANDWIDTH.hi;
                // The turbo table ends at the all-core clock: none, so that `cpu.ghz` may move.
                m.cpu.turbo_ghz.clear();
                set(&mut m, v);
                Machine::parse(&m.to_toml(), "x.toml")
                    .unwrap_or_else(|e| panic!("{key} = {v}: {e}"));
            }
        }
        // Kernel costs may be zero (the engine's own machine); latencies may not.
        let mut m = good.clone();
        m.kernel.trap_ns = 0.0;
        Machine::parse(&m.to_toml(), "x.toml").unwrap();
        let mut m = good.clone();
        m.latency.atomic_ns = 0.0;
        refused(&m, "latency.atomic_ns must be from 0.1 to 100000 ns, not 0");
        assert_eq!(
            LATENCY.describe(),
            "from 0.1 to 100000 ns",
            "what docs/user-guide.md says"
        );
    }

    /// `memory.loaded_latency` outside its physical shape: one line naming the key and point.
    #[test]
    fn a_loaded_latency_curve_must_be_physical() {
        let good = two_socket();
        assert!(
            good.memory.loaded_latency.len() >= 2,
            "broadwell ships a curve"
        );
        let cases: &[(&[[f64; 2]], &str)] = &[
            (&[[0.0, 90.0]], "memory.loaded_latency needs at least two"),
            (
                &[[0.1, 90.0], [1.0, 200.0]],
                "memory.loaded_latency[0] utilisation must be 0",
            ),
            (
                &[[0.0, 90.0], [1.5, 200.0]],
                "memory.loaded_latency[1] utilisation must be from 0 to 1",
            ),
            (
                &[[0.0, 90.0], [0.5, 100.0], [0.5, 200.0]],
                "memory.loaded_latency[2] utilisation 0.5 must be above the previous point's 0.5",
            ),
            (
                &[[0.0, 90.0], [0.5, 80.0]],
                "memory.loaded_latency[1] latency 80 ns is below the previous point's 90 ns",
            ),
            (
                &[[0.0, 90.0], [1.0, 1e6]],
                "memory.loaded_latency[1] latency must be from 0.1 to 100000 ns, not 1000000",
            ),
            (
                &[[0.0, 0.0], [1.0, 100.0]],
                "memory.loaded_latency[0] latency must be from 0.1 to 100000 ns, not 0",
            ),
            (
                &[[0.0, 90.0], [f64::NAN, 100.0]],
                "memory.loaded_latency[1] utilisation must be from 0 to 1",
            ),
        ];
        for (curve, want) in cases {
            let mut m = good.clone();
            m.memory.loaded_latency = curve.to_vec();
            refused(&m, want);
        }
        // Absent: a flat latency, admitted; and a file without the key loads.
        let mut m = good.clone();
        m.memory.loaded_latency.clear();
        let text = m.to_toml();
        assert!(!text.contains("loaded_latency"), "{text}");
        Machine::parse(&text, "x.toml").unwrap();
    }

    #[test]
    fn nan_and_inf_written_in_the_file_are_refused() {
        let good = two_socket().to_toml();
        for bad in ["nan", "inf", "-inf", "+nan"] {
            let text = good.replacen("core_ns = 45.0", &format!("core_ns = {bad}"), 1);
            let e = Machine::parse(&text, "x.toml").unwrap_err().to_string();
            assert!(
                e.contains("latency.core_ns must be from 0.1 to 100000 ns"),
                "{e}"
            );
        }
    }

    #[test]
    fn counts_stay_within_4096_cpus_and_sane_topologies() {
        let good = two_socket();
        type Change = fn(&mut Topology);
        let cases: &[(Change, &str)] = &[
            (
                |t| t.cores_per_socket = 4097,
                "topology.cores_per_socket must be at least 1 and at most 4096, not 4097",
            ),
            (
                |t| t.sockets = 1025,
                "topology.sockets must be at least 1 and at most 1024, not 1025",
            ),
            (
                |t| t.nodes_per_socket = 32,
                "topology.nodes_per_socket must be at least 1 and at most 16, not 32",
            ),
            (
                |t| t.threads_per_core = 0,
                "topology.threads_per_core must be at least 1 and at most 2, not 0",
            ),
            (
                // 64 x 64 x 2 = 8192: every count in range, the product not.
                |t| {
                    t.sockets = 64;
                    t.cores_per_socket = 64;
                },
                "is 8192 CPUs; at most 4096",
            ),
            (
                // 1024 sockets of 5 single-threaded cores: every count in range, 5120 CPUs not.
                |t| {
                    t.sockets = 1024;
                    t.cores_per_socket = 5;
                    t.threads_per_core = 1;
                },
                "is 5120 CPUs; at most 4096",
            ),
            (
                |t| t.cores_per_socket = usize::MAX,
                "topology.cores_per_socket must be at least 1 and at most 4096",
            ),
        ];
        for (change, want) in cases {
            let mut m = good.clone();
            change(&mut m.topology);
            let e = m.check().unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
        // As a file says it.
        let text = good
            .to_toml()
            .replacen("cores_per_socket = 22", "cores_per_socket = 100000", 1);
        let e = Machine::parse(&text, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("topology.cores_per_socket must be at least 1 and at most 4096"),
            "{e}"
        );
        // 4096 CPUs exactly is admitted.
        let mut m = good.clone();
        m.topology.sockets = 32;
        m.topology.cores_per_socket = 64;
        m.numa.distance = (0..32)
            .map(|a| (0..32).map(|b| if a == b { 10 } else { 21 }).collect())
            .collect();
        assert_eq!(m.nr_cpus(), 4096);
        m.check().unwrap();
    }

    #[test]
    fn distances_are_square_symmetric_and_smallest_on_the_diagonal() {
        let good = two_socket().to_toml();
        let cases: &[(&str, &str)] = &[
            (
                "[[10, 21], [31, 10]]",
                "numa.distance[0][1] is 21 but numa.distance[1][0] is 31",
            ),
            (
                "[[10, 21], [21]]",
                "numa.distance[1] has 1 entries; it must be 2 x 2",
            ),
            (
                "[[10, 21, 21], [21, 10, 21]]",
                "numa.distance[0] has 3 entries; it must be 2 x 2",
            ),
            (
                "[[10, 21], [21, 10], [21, 21]]",
                "numa.distance has 3 rows; it must be 2 x 2",
            ),
            (
                "[[10, 9], [9, 10]]",
                "numa.distance[0][1] must be from 11 to 254",
            ),
            (
                "[[10, 10], [10, 10]]",
                "numa.distance[0][1] must be from 11 to 254",
            ),
            (
                "[[10, 255], [255, 10]]",
                "numa.distance[0][1] must be from 11 to 254",
            ),
            ("[[5, 21], [21, 5]]", "numa.distance[0][0] must be 10"),
            ("[[10, -21], [-21, 10]]", "machine x.toml: "),
        ];
        for (to, want) in cases {
            let bad = good.replacen("[[10, 21], [21, 10]]", to, 1);
            let e = Machine::parse(&bad, "x.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// A fabric instead of a matrix: refused with one line naming the key when it cannot be
    /// expanded or does not fit the topology; and a page size that is not a power of two.
    #[test]
    fn fabrics_and_page_sizes_are_checked_by_key() {
        let (_, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == "altix-3700-512p")
            .unwrap();
        let cases: &[(&str, &str, &str)] = &[
            (
                "[numa]\n",
                "[numa]\ndistance = [[10]]\n",
                "give numa.distance or numa.fabric, not both",
            ),
            (
                "nodes = 32\n",
                "nodes = 30\n",
                "numa.fabric.levels[1].nodes (30) must be a multiple of numa.fabric.levels[0].nodes (4)",
            ),
            (
                "routers = 3\n",
                "routers = 0\n",
                "numa.fabric.levels[1].routers must be from 1 to 24",
            ),
            (
                "routers = 5\n",
                "routers = 2\n",
                "numa.fabric.levels[2].routers (2) is below numa.fabric.levels[1].routers (3)",
            ),
            (
                "nodes = 256\n",
                "nodes = 512\n",
                "numa.fabric describes 512 nodes (its outermost level's), but the topology has 256",
            ),
            (
                "routers = 5\n",
                "routers = 6\n",
                "latency.remote_ns has no entry for distance 70",
            ),
            (
                "page_size = 16384",
                "page_size = 12288",
                "memory.page_size must be a power of two from 4096 to 65536 bytes, not 12288",
            ),
            (
                "page_size = 16384",
                "page_size = 131072",
                "memory.page_size must be a power of two",
            ),
            (
                "page_size = 16384",
                "page_size = 2048",
                "memory.page_size must be a power of two",
            ),
        ];
        for (from, to, want) in cases {
            assert!(text.contains(from), "{from}");
            let bad = text.replacen(from, to, 1);
            let e = Machine::parse(&bad, "x.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(e.starts_with("machine x.toml: "), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        // Neither a matrix nor a fabric.
        let start = text.find("[[numa.fabric.levels]]").unwrap();
        let end = text.find("[latency]").unwrap();
        let bare = format!("{}{}", &text[..start], &text[end..]);
        let e = Machine::parse(&bare, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("give numa.distance (the SLIT matrix) or numa.fabric"),
            "{e}"
        );
    }

    #[test]
    fn names_go_into_labels_so_they_are_plain() {
        let mut m = two_socket();
        for bad in ["", "a b", "x@y", "new\nline", &"n".repeat(65)] {
            m.name = bad.to_string();
            let e = m.check().unwrap_err().to_string();
            assert!(e.contains("must be 1 to 64 letters"), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn a_file_with_a_shipped_name_must_be_that_machine() {
        let dir = tempfile::tempdir().unwrap();
        let (_, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == "icelake-2s-64c")
            .unwrap();
        let path = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
        // A byte-identical copy, and one rewritten without comments, load.
        std::fs::write(path("same.toml"), text).unwrap();
        assert_eq!(
            Machine::load(&path("same.toml")).unwrap(),
            Machine::load("icelake-2s-64c").unwrap()
        );
        let mut m = Machine::load("icelake-2s-64c").unwrap();
        m.description = "my notes".into();
        std::fs::write(path("plain.toml"), m.to_toml()).unwrap();
        Machine::load(&path("plain.toml")).unwrap();
        // One number changed: refused, naming the key.
        let changed = text.replacen("core_ns = 51.0", "core_ns = 60.0", 1);
        assert_ne!(&changed, text);
        std::fs::write(path("copy.toml"), &changed).unwrap();
        let e = Machine::load(&path("copy.toml")).unwrap_err().to_string();
        assert!(
            e.contains("name `icelake-2s-64c` is a shipped machine's")
                && e.contains("differs from it in latency.core_ns"),
            "{e}"
        );
        // Renamed, it loads.
        let renamed = changed.replacen("name = \"icelake-2s-64c\"", "name = \"my-icelake\"", 1);
        std::fs::write(path("mine.toml"), renamed).unwrap();
        assert_eq!(
            Machine::load(&path("mine.toml")).unwrap().name,
            "my-icelake"
        );
    }

    /// `cpu.share` is a list of `[tasks, fraction]` with whole task counts and fractions in
    /// (0, 1]; a machine without it gives every task its CPU.
    #[test]
    fn cpu_share_is_checked_and_defaults_to_whole_cpus() {
        let mut m = two_socket();
        assert!(m.cpu.share.is_empty());
        assert_eq!(m.cpu.share_at(4), (1.0, 0.0));
        m.cpu.share = vec![[1.0, 0.9, 3000.0], [2.0, 0.5, 0.0]];
        let back = Machine::parse(&m.to_toml(), "x.toml").unwrap();
        assert_eq!(back.cpu.share, m.cpu.share);
        assert_eq!(back.cpu.share_at(1), (0.9, 3000.0));
        assert_eq!(back.cpu.share_at(2), (0.5, 0.0));
        assert_eq!(back.cpu.share_at(8), (0.5, 0.0));
        for (bad, want) in [
            ([1.0, 0.0, 0.0], "cpu.share[0] fraction"),
            ([1.0, 1.5, 0.0], "cpu.share[0] fraction"),
            ([1.0, f64::NAN, 0.0], "cpu.share[0] fraction"),
            ([0.0, 0.5, 0.0], "cpu.share[0] task count"),
            ([1.5, 0.5, 0.0], "cpu.share[0] task count"),
            ([1.0, 0.5, -1.0], "cpu.share[0] off_ns"),
            ([1.0, 0.5, f64::INFINITY], "cpu.share[0] off_ns"),
        ] {
            m.cpu.share = vec![bad];
            refused(&m, want);
        }
    }
}
