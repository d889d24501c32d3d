//! The engine instance: one "machine" running one kernel profile.
//!
//! A `Kernel` owns the physical memory (`PageAllocator`), the LRU lists, the RCU domain the
//! VMA trees are published in, the split page-table locks and the policy. Address spaces
//! ([`Mm`]) and tasks ([`Task`]) are created from it; every mechanism dispatches on the policy
//! it was built with, so two `Kernel`s side by side are two kernels of a comparison.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pagelab_sync::{LockStatsSnapshot, RcuDomain};

use crate::alloc::{Mem, MemConfig, MemError, PageAllocator};
use crate::cpu::CpuId;
use crate::lru::Lru;
use crate::policy::{Policy, Ptl, VmaLock as VmaLockPolicy};
use crate::task::Task;
use crate::vm::filemap::File;
use crate::vm::mm::Mm;
use crate::vm::pgtable::SplitPtl;
use crate::vm::vma_lock::VmaLockKind;

/// Lock statistics of every lock class, summed over instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockClassStats {
    pub zone_lock: LockStatsSnapshot,
    pub pcp_lock: LockStatsSnapshot,
    pub lru_lock: LockStatsSnapshot,
    pub mmap_lock_read: LockStatsSnapshot,
    pub mmap_lock_write: LockStatsSnapshot,
    pub vma_lock: LockStatsSnapshot,
    pub ptl: LockStatsSnapshot,
}

/// One engine instance.
pub struct Kernel {
    alloc: PageAllocator,
    lru: Lru,
    /// The RCU domain (a loom `Arc` under `--cfg loom`, like every sync primitive).
    rcu: pagelab_sync::shim::Arc<RcuDomain>,
    split_ptl: Option<Arc<SplitPtl>>,
    policy: Policy,
    next_id: AtomicU32,
}

impl Kernel {
    /// Boot a kernel with `policy` on memory configured by `cfg`.
    pub fn new(cfg: &MemConfig, policy: &Policy) -> Result<Arc<Kernel>, MemError> {
        let alloc = PageAllocator::new(cfg, policy)?;
        let mem = alloc.mem().clone();
        let lru = Lru::new(mem.clone(), &policy.lru, policy.locks.spinlock, 1);
        let split_ptl = (policy.mm.ptl == Ptl::Split)
            .then(|| Arc::new(SplitPtl::new(mem.pages().len(), policy.locks.spinlock)));
        Ok(Arc::new(Kernel {
            alloc,
            lru,
            // One reader slot per virtual CPU and a few for helpers (teardown, checks).
            rcu: RcuDomain::new(cfg.nr_cpus * 2 + 8),
            split_ptl,
            policy: policy.clone(),
            next_id: AtomicU32::new(1),
        }))
    }

    pub fn mem(&self) -> &Arc<Mem> {
        self.alloc.mem()
    }

    pub fn lru(&self) -> &Lru {
        &self.lru
    }

    pub fn rcu(&self) -> &pagelab_sync::shim::Arc<RcuDomain> {
        &self.rcu
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn nr_cpus(&self) -> usize {
        self.mem().nr_cpus()
    }

    pub(crate) fn split_ptl(&self) -> Option<&Arc<SplitPtl>> {
        self.split_ptl.as_ref()
    }

    pub(crate) fn vma_lock_kind(&self) -> Option<VmaLockKind> {
        match self.policy.mm.vma_lock {
            VmaLockPolicy::None => None,
            VmaLockPolicy::Rwsem => Some(VmaLockKind::Rwsem),
            VmaLockPolicy::Refcount => Some(VmaLockKind::Refcount),
        }
    }

    pub(crate) fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A new, empty address space (`mm_alloc`), set up from `cpu`.
    pub fn new_mm(self: &Arc<Self>, cpu: CpuId) -> Result<Arc<Mm>, crate::alloc::AllocError> {
        Mm::new(self.clone(), cpu).map(Arc::new)
    }

    /// A task running `mm` on virtual CPU `cpu`.
    pub fn new_task(self: &Arc<Self>, mm: Arc<Mm>, cpu: CpuId) -> Task {
        Task::new(self.clone(), mm, cpu)
    }

    /// A new sparse file of `nr_pages` pages (`memfd_create` + `ftruncate`).
    pub fn create_file(self: &Arc<Self>, nr_pages: u64) -> Arc<File> {
        Arc::new(File::new(
            self,
            self.next_id(),
            nr_pages,
            self.policy.locks.spinlock,
        ))
    }

    /// Lock statistics by class. `mms` are the address spaces whose locks to include.
    pub fn lock_stats(&self, mms: &[&Mm]) -> LockClassStats {
        let a = self.mem().lock_stats();
        let mut s = LockClassStats {
            zone_lock: a.zone_lock,
            pcp_lock: a.pcp_lock,
            lru_lock: self.lru.lock_stats(),
            ..Default::default()
        };
        if let Some(p) = &self.split_ptl {
            s.ptl += p.stats();
        }
        for mm in mms {
            s.mmap_lock_read += mm.mmap_lock.read_stats();
            s.mmap_lock_write += mm.mmap_lock.write_stats();
            s.vma_lock += mm.vma_lock_stats();
            s.ptl += mm.pgtable.lock_stats();
        }
        s
    }

    /// Reset every lock's statistics and the event counters.
    pub fn reset_stats(&self, mms: &[&Mm]) {
        self.mem().reset_stats();
        self.lru.reset_stats();
        if let Some(p) = &self.split_ptl {
            p.reset_stats();
        }
        for mm in mms {
            mm.mmap_lock.reset_stats();
            mm.pgtable.reset_lock_stats();
        }
    }
}
