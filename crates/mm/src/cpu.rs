//! Virtual CPUs and per-CPU data.
//!
//! Each engine task runs bound to one virtual CPU id for its lifetime, the way a pinned kernel
//! thread uses `smp_processor_id()`. Per-CPU structures (pcp lists, LRU add batches, per-CPU
//! counters) are indexed by that id. Two tasks never share a virtual CPU at the same time, so a
//! per-CPU structure's lock is contended only by remote operations (drains), as in the kernel.

use crossbeam_utils::CachePadded;

/// A virtual CPU id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u16);

impl CpuId {
    #[inline]
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// One value per virtual CPU, each in its own cache line so that a CPU writing its own value
/// does not invalidate its neighbours' (`DEFINE_PER_CPU` with `____cacheline_aligned`).
pub struct PerCpu<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> PerCpu<T> {
    pub fn new(nr_cpus: usize, mut init: impl FnMut(CpuId) -> T) -> Self {
        PerCpu {
            slots: (0..nr_cpus)
                .map(|c| CachePadded::new(init(CpuId(c as u16))))
                .collect(),
        }
    }

    #[inline]
    pub fn get(&self, cpu: CpuId) -> &T {
        &self.slots[cpu.idx()]
    }

    pub fn nr_cpus(&self) -> usize {
        self.slots.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (CpuId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| (CpuId(i as u16), &**s))
    }
}

impl<T> std::ops::Index<CpuId> for PerCpu<T> {
    type Output = T;
    #[inline]
    fn index(&self, cpu: CpuId) -> &T {
        self.get(cpu)
    }
}
