//! The community's memory-management benchmarks, each written once and runnable on two
//! targets: the engine (a `pagelab_mm::Kernel` booted with a profile) and the host kernel (real
//! `mmap`, faults and `munmap`).
//!
//! - [`page_fault`]: will-it-scale `page_fault1` (anonymous), `page_fault2` (private file,
//!   copy-on-write) and `page_fault3` (shared file): per iteration map 128 MiB, write one word
//!   per page, unmap; the metric is faults per second summed over tasks, sampled per interval
//!   after a warm-up, one counter per task in its own cache line.
//! - [`pft`]: mmtests `pft`: a region faulted by T threads in parallel, one VMA sliced across
//!   threads or one VMA per thread; faults per CPU-second and per wall-second per repetition.
//! - [`lameter`]: Christoph Lameter's 2005 fault test: N GiB faulted by T threads, repeated R
//!   times; user, system and wall time per repetition.
//! - [`kvcache`]: memcached driven by memtier (set-only, sequential keys, 1 KiB values) inside a
//!   memory cgroup smaller than its data, so reclaim and swap run all the time; ops per second
//!   and latency percentiles (engine only).
//! - [`sockbuf`]: loopback TCP's socket buffers (an skb from the slab, its payload in the
//!   sending task's page frag, freed on the sending CPU), which kvcache's requests and replies
//!   travel in.
//! - [`netpipe`]: netperf UDP_STREAM reduced to its allocations: sender/receiver pairs on
//!   different CPUs pass kmalloc'd buffers of the netperf send sizes (64 to 16384 bytes), the
//!   receiver freeing on its own CPU; messages per second per send size (engine only).
//! - [`mapbench`]: RadixVM's mapbench: each task maps, touches and unmaps a region of its own
//!   in a loop (`mapbench`), or the tasks share one region per round (`mapbench-shared`).
//! - [`cortenmm`]: CortenMM's microbenchmarks `mmap`, `mmap-pf`, `pf` and `munmap`, timed
//!   rounds of small requests by threads of one process, in their own slots (low contention)
//!   or shuffled over everyone's (high contention; [`rounds`] runs them).
//!
//! Tasks run as threads of one address space or as processes with their own (on the engine a
//! process is a task with its own `Mm`).

pub mod cortenmm;
pub mod engine;
pub mod host;
pub mod host_proc;
pub mod kvcache;
pub mod lameter;
pub mod mapbench;
pub mod netpipe;
pub mod page_fault;
pub mod pft;
pub mod pin;
pub mod rounds;
pub mod runner;
pub mod sockbuf;
pub mod vm;

use std::fmt;
use std::str::FromStr;

/// Threads of one address space, or processes with one each.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Processes,
    Threads,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Processes => "processes",
            Mode::Threads => "threads",
        })
    }
}

impl FromStr for Mode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Mode, ParseError> {
        match s {
            "processes" => Ok(Mode::Processes),
            "threads" => Ok(Mode::Threads),
            _ => Err(ParseError::Mode(s.to_string())),
        }
    }
}

/// A name that is not one of the workloads', modes' or swap devices'.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown mode `{0}`; expected processes or threads")]
    Mode(String),
    #[error("unknown workload `{0}`; workloads: {names}", names = WorkloadKind::ALL.map(WorkloadKind::name).join(", "))]
    Workload(String),
    #[error("an empty swap device name; use memory, lz4 or a file path")]
    EmptySwapDevice,
}

/// Why a run stopped without a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The engine's arena (or the host) ran out of memory; the run stopped cleanly.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Fault(String),
    #[error("host: {0}")]
    Host(String),
}

/// The workloads by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    PageFault1,
    PageFault2,
    PageFault3,
    Pft,
    PftVmaPerThread,
    Lameter,
    Netpipe,
    Kvcache,
    Mapbench,
    MapbenchShared,
    CortenmmMmap,
    CortenmmMmapPf,
    /// `mmap` in its high-contention form: `MAP_FIXED` at shuffled places of one region.
    CortenmmMmapHigh,
    /// `mmap-pf` in its high-contention form.
    CortenmmMmapPfHigh,
    CortenmmPfLow,
    CortenmmPfHigh,
    CortenmmMunmapLow,
    CortenmmMunmapHigh,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 18] = [
        WorkloadKind::PageFault1,
        WorkloadKind::PageFault2,
        WorkloadKind::PageFault3,
        WorkloadKind::Pft,
        WorkloadKind::PftVmaPerThread,
        WorkloadKind::Lameter,
        WorkloadKind::Netpipe,
        WorkloadKind::Kvcache,
        WorkloadKind::Mapbench,
        WorkloadKind::MapbenchShared,
        WorkloadKind::CortenmmMmap,
        WorkloadKind::CortenmmMmapPf,
        WorkloadKind::CortenmmMmapHigh,
        WorkloadKind::CortenmmMmapPfHigh,
        WorkloadKind::CortenmmPfLow,
        WorkloadKind::CortenmmPfHigh,
        WorkloadKind::CortenmmMunmapLow,
        WorkloadKind::CortenmmMunmapHigh,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::PageFault1 => "page_fault1",
            WorkloadKind::PageFault2 => "page_fault2",
            WorkloadKind::PageFault3 => "page_fault3",
            WorkloadKind::Pft => "pft",
            WorkloadKind::PftVmaPerThread => "pft-vma-per-thread",
            WorkloadKind::Lameter => "lameter",
            WorkloadKind::Netpipe => "netpipe",
            WorkloadKind::Kvcache => "kvcache",
            WorkloadKind::Mapbench => "mapbench",
            WorkloadKind::MapbenchShared => "mapbench-shared",
            WorkloadKind::CortenmmMmap => "cortenmm-mmap",
            WorkloadKind::CortenmmMmapPf => "cortenmm-mmap-pf",
            WorkloadKind::CortenmmMmapHigh => "cortenmm-mmap-high",
            WorkloadKind::CortenmmMmapPfHigh => "cortenmm-mmap-pf-high",
            WorkloadKind::CortenmmPfLow => "cortenmm-pf-low",
            WorkloadKind::CortenmmPfHigh => "cortenmm-pf-high",
            WorkloadKind::CortenmmMunmapLow => "cortenmm-munmap-low",
            WorkloadKind::CortenmmMunmapHigh => "cortenmm-munmap-high",
        }
    }

    /// The CortenMM test this is, if it is one.
    pub fn cortenmm(self) -> Option<(cortenmm::Op, cortenmm::Contention)> {
        use cortenmm::{Contention, Op};
        Some(match self {
            WorkloadKind::CortenmmMmap => (Op::Mmap, Contention::Low),
            WorkloadKind::CortenmmMmapPf => (Op::MmapPf, Contention::Low),
            WorkloadKind::CortenmmMmapHigh => (Op::Mmap, Contention::High),
            WorkloadKind::CortenmmMmapPfHigh => (Op::MmapPf, Contention::High),
            WorkloadKind::CortenmmPfLow => (Op::Pf, Contention::Low),
            WorkloadKind::CortenmmPfHigh => (Op::Pf, Contention::High),
            WorkloadKind::CortenmmMunmapLow => (Op::Munmap, Contention::Low),
            WorkloadKind::CortenmmMunmapHigh => (Op::Munmap, Contention::High),
            _ => return None,
        })
    }

    /// Workloads whose tasks share one address space by definition: they have no processes
    /// mode.
    pub fn threads_only(self) -> bool {
        matches!(self, WorkloadKind::MapbenchShared) || self.cortenmm().is_some()
    }
}

impl FromStr for WorkloadKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        WorkloadKind::ALL
            .iter()
            .copied()
            .find(|w| w.name() == s)
            .ok_or_else(|| ParseError::Workload(s.to_string()))
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_typed_errors_with_one_line_messages() {
        assert_eq!(
            "fibers".parse::<Mode>(),
            Err(ParseError::Mode("fibers".into()))
        );
        let e = "page_fault9".parse::<WorkloadKind>().unwrap_err();
        assert_eq!(e, ParseError::Workload("page_fault9".into()));
        let msg = e.to_string();
        assert!(
            msg.starts_with("unknown workload `page_fault9`; workloads: page_fault1, ")
                && !msg.contains('\n'),
            "{msg}"
        );
        assert_eq!(
            kvcache::parse_swap("").unwrap_err(),
            ParseError::EmptySwapDevice
        );
    }
}
