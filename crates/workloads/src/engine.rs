//! The engine target: boot a `Kernel` with a profile, sized for the workload, and run its
//! tasks as engine tasks (threads of one `Mm`, or processes with one `Mm` each).

use std::sync::Arc;

use pagelab_mm::vm::filemap::File;
use pagelab_mm::vmstat::VmEvent;
use pagelab_mm::{CpuId, FaultError, Kernel, MapKind, MemConfig, MmError, PAGE_SIZE, Policy, Task};

use crate::vm::Vm;
use crate::{Mode, WorkloadError};

/// One engine task as a workload target.
pub struct EngineVm {
    pub task: Task,
}

fn mm_err(e: MmError) -> WorkloadError {
    match e {
        MmError::Alloc(a) => {
            WorkloadError::OutOfMemory(format!("the engine's arena is exhausted ({a})"))
        }
        other => WorkloadError::Fault(other.to_string()),
    }
}

impl Vm for EngineVm {
    type File = Arc<File>;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError> {
        self.task.mmap(len, true, MapKind::Anon).map_err(mm_err)
    }

    fn create_file(&self, len: u64) -> Result<Arc<File>, WorkloadError> {
        Ok(self
            .task
            .kernel()
            .create_file(len.div_ceil(PAGE_SIZE as u64)))
    }

    fn mmap_file(&self, file: &Arc<File>, len: u64, shared: bool) -> Result<u64, WorkloadError> {
        self.task
            .mmap(
                len,
                true,
                MapKind::File {
                    file: file.clone(),
                    offset: 0,
                    shared,
                },
            )
            .map_err(mm_err)
    }

    #[inline]
    fn store(&self, addr: u64) -> Result<(), WorkloadError> {
        self.task.store(addr, 0).map_err(|e| match e {
            FaultError::Oom { .. } => {
                WorkloadError::OutOfMemory(format!("the engine's arena is exhausted ({e})"))
            }
            other => WorkloadError::Fault(other.to_string()),
        })
    }

    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        self.task.munmap(addr, len).map_err(mm_err)
    }

    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        self.task
            .mmap_fixed(addr, len, true, MapKind::Anon)
            .map(|_| ())
            .map_err(mm_err)
    }

    fn fault_ns(&self) -> Option<u64> {
        self.task.fault_ns()
    }

    fn idle(&self) {
        self.task.idle();
    }

    fn resume(&self) {
        self.task.resume();
    }
}

/// A booted engine with its tasks.
pub struct EngineRun {
    pub kernel: Arc<Kernel>,
    pub mms: Vec<Arc<pagelab_mm::Mm>>,
}

/// Boot a kernel of `arena` bytes with `nr_cpus` virtual CPUs.
pub fn boot(policy: &Policy, arena: u64, nr_cpus: usize) -> Result<Arc<Kernel>, WorkloadError> {
    boot_for(policy, arena, nr_cpus, None)
}

/// [`boot`], with the kernel's memory-derived tunables (pcp `"auto"` batch and high, the vmstat
/// threshold) sized for `tunables`' nodes instead of the arena's ([`pagelab_mm::TunablesFor`]).
pub fn boot_for(
    policy: &Policy,
    arena: u64,
    nr_cpus: usize,
    tunables: Option<pagelab_mm::TunablesFor>,
) -> Result<Arc<Kernel>, WorkloadError> {
    let mut cfg = MemConfig::new(arena, nr_cpus);
    cfg.tunables_for = tunables;
    // Fault the host memory in up front: first touches of a VM's memory are slow enough to
    // swamp a warm-up.
    cfg.arena.prefault = true;
    Kernel::new(&cfg, policy).map_err(|e| WorkloadError::Config(e.to_string()))
}

/// Create `tasks` engine tasks on CPUs `0..tasks` in `mode`.
pub fn tasks(
    k: &Arc<Kernel>,
    n: usize,
    mode: Mode,
    time_faults: bool,
) -> Result<(EngineRun, Vec<EngineVm>), WorkloadError> {
    let mut mms: Vec<Arc<pagelab_mm::Mm>> = Vec::new();
    let mut vms = Vec::new();
    for i in 0..n {
        let cpu = CpuId(i as u16);
        let mm = match mode {
            Mode::Threads if i > 0 => mms[0].clone(),
            _ => {
                let mm = k
                    .new_mm(cpu)
                    .map_err(|e| WorkloadError::OutOfMemory(e.to_string()))?;
                mms.push(mm.clone());
                mm
            }
        };
        let task = k.new_task(mm, cpu);
        task.set_fault_timing(time_faults);
        vms.push(EngineVm { task });
    }
    Ok((
        EngineRun {
            kernel: k.clone(),
            mms,
        },
        vms,
    ))
}

/// The engine's counters over a measured window.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineCounters {
    /// `(event, count)` for every non-zero event.
    pub events: Vec<(String, u64)>,
    /// `(lock class, acquisitions, contended, wait ns)`.
    pub locks: Vec<(String, u64, u64, u64)>,
}

impl EngineRun {
    /// Reset lock statistics and event counters (the start of a measured window).
    pub fn reset(&self) {
        self.kernel.reset_stats();
        if let Some(s) = self.kernel.swap() {
            s.events().reset();
        }
    }

    /// Collect counters (the end of a measured window).
    pub fn counters(&self) -> EngineCounters {
        let ev = self.kernel.mem().events();
        // The swap device counts its own I/O.
        let swap_ev = self.kernel.swap().map(|s| s.events());
        let events = VmEvent::ALL
            .iter()
            .map(|&e| {
                let n = ev.sum(e) + swap_ev.map_or(0, |s| s.sum(e));
                (e.label().to_string(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let l = self.kernel.lock_stats();
        let locks = [
            ("zone->lock", l.zone_lock),
            ("pcp->lock", l.pcp_lock),
            ("lru_lock", l.lru_lock),
            ("mmap_lock (read)", l.mmap_lock_read),
            ("mmap_lock (write)", l.mmap_lock_write),
            ("vma lock", l.vma_lock),
            ("ptl", l.ptl),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), s.acquisitions, s.contended, s.wait_ns))
        .collect();
        EngineCounters { events, locks }
    }
}
