//! The engine instance: one "machine" running one kernel profile.
//!
//! A `Kernel` owns the physical memory (`PageAllocator`), the LRU lists, the RCU domain the
//! VMA trees are published in, the split page-table locks and the policy. Address spaces
//! ([`Mm`]) and tasks ([`Task`]) are created from it; every mechanism dispatches on the policy
//! it was built with, so two `Kernel`s side by side are two kernels of a comparison.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};

use pagelab_sync::{LockStatsSnapshot, RcuDomain};

use crate::alloc::{Gfp, Mem, MemConfig, MemError, PageAllocator};
use crate::cpu::CpuId;
use crate::lru::Lru;
use crate::page::Pfn;
use crate::policy::{Policy, Ptl, VmaLock as VmaLockPolicy};
use crate::reclaim::swap::{SwapConfig, SwapDevice, SwapError};
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
    /// The shared zero page (`ZERO_PAGE`, `my_zero_pfn`): one zeroed frame taken at boot and
    /// never freed, mapped read-only by every anonymous read fault. It is no anonymous or
    /// file page: never on an LRU list, never charged to a memory cgroup, no map count and
    /// no RSS (`vm_normal_page` does not return it, so the kernel's rmap and counters never
    /// see it).
    zero_pfn: Pfn,
    policy: Policy,
    next_id: AtomicU32,
    /// The swap device, if the machine has one: without it anonymous memory cannot be
    /// reclaimed and running out of memory is out of memory.
    swap: Option<SwapDevice>,
    /// Live address spaces by id: the reverse map's way from an anonymous page (whose
    /// `mapping` is its mm's id) to its page table.
    mms: RwLock<Vec<(u32, Weak<Mm>)>>,
    /// Live files by id: reclaim's way from a page-cache page to its file.
    files: RwLock<Vec<(u32, Weak<File>)>>,
    /// The (single) lruvec's `nonresident_age`, which shadow entries are stamped with.
    nonresident: crate::reclaim::workingset::NonresidentAge,
    /// `bucket_order` for this machine's size.
    shadow_bucket_order: u32,
    /// Address spaces whose last reference was dropped by reclaim (see [`MmRef`]), waiting
    /// for [`Kernel::drain_deferred_mms`] to tear them down.
    deferred_mms: std::sync::Mutex<Vec<Mm>>,
    nr_deferred_mms: AtomicUsize,
    /// The per-node kswapd threads, started with a swap device.
    kswapd: std::sync::Mutex<Option<crate::reclaim::kswapd::Kswapd>>,
}

/// An address space found through the reverse map (an anonymous page's `mapping`).
///
/// Reclaim runs inside a fault, in an RCU read section, and the last reference to an `Mm`
/// tears it down with `exit_mmap` and waits for a grace period: dropping it there would wait
/// for its own read section. As the kernel's `mmput_async` hands the teardown to a worker,
/// a last reference dropped through an `MmRef` is queued for [`Kernel::drain_deferred_mms`],
/// which tasks call outside their read sections.
pub(crate) struct MmRef<'k> {
    k: &'k Kernel,
    mm: Option<Arc<Mm>>,
}

impl std::ops::Deref for MmRef<'_> {
    type Target = Mm;
    fn deref(&self) -> &Mm {
        self.mm.as_ref().expect("set until drop")
    }
}

impl Drop for MmRef<'_> {
    fn drop(&mut self) {
        // `into_inner` returns the value to exactly the one holder whose drop was the last.
        if let Some(mm) = self.mm.take().and_then(Arc::into_inner) {
            self.k
                .deferred_mms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mm);
            self.k.nr_deferred_mms.fetch_add(1, Ordering::Release);
        }
    }
}

/// Why a kernel could not boot.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Mem(#[from] MemError),
    #[error(transparent)]
    Swap(#[from] SwapError),
    #[error("could not start kswapd: {0}")]
    Kswapd(std::io::Error),
}

impl Kernel {
    /// Boot a kernel with `policy` on memory configured by `cfg`.
    pub fn new(cfg: &MemConfig, policy: &Policy) -> Result<Arc<Kernel>, MemError> {
        match Kernel::with_swap(cfg, policy, None) {
            Ok(k) => Ok(k),
            Err(BootError::Mem(e)) => Err(e),
            Err(BootError::Swap(_) | BootError::Kswapd(_)) => {
                unreachable!("no swap device was asked for")
            }
        }
    }

    /// Boot a kernel with a swap device (`swapon` at boot).
    pub fn with_swap(
        cfg: &MemConfig,
        policy: &Policy,
        swap: Option<SwapConfig>,
    ) -> Result<Arc<Kernel>, BootError> {
        let swap = swap.map(SwapDevice::new).transpose()?;
        let alloc = PageAllocator::new(cfg, policy)?;
        let mem = alloc.mem().clone();
        let lru = Lru::new(
            mem.clone(),
            &policy.lru,
            policy.locks.spinlock,
            cfg.nr_memcgs,
        );
        let split_ptl = (policy.mm.ptl == Ptl::Split)
            .then(|| Arc::new(SplitPtl::new(mem.pages().len(), policy.locks.spinlock)));
        // The kernel's zero page lives in .bss; here it is the first frame the machine hands
        // out, taken before anything can compete for it.
        let zero_pfn = mem
            .alloc_page(CpuId(0), Gfp::KERNEL.with_zero())
            .map_err(|_| MemError::Config("no frame left for the zero page".into()))?;
        let k = Arc::new(Kernel {
            alloc,
            lru,
            // One reader slot per virtual CPU and a few for helpers (teardown, checks).
            rcu: RcuDomain::new(cfg.nr_cpus * 2 + 8),
            split_ptl,
            zero_pfn,
            policy: policy.clone(),
            next_id: AtomicU32::new(1),
            swap,
            mms: RwLock::new(Vec::new()),
            files: RwLock::new(Vec::new()),
            nonresident: crate::reclaim::workingset::NonresidentAge::new(),
            shadow_bucket_order: crate::reclaim::workingset::bucket_order(mem.pages().len() as u64),
            deferred_mms: std::sync::Mutex::new(Vec::new()),
            nr_deferred_mms: AtomicUsize::new(0),
            kswapd: std::sync::Mutex::new(None),
        });
        if k.swap.is_some() {
            let threads = crate::reclaim::kswapd::Kswapd::start(&k).map_err(BootError::Kswapd)?;
            *k.kswapd.lock().unwrap_or_else(|e| e.into_inner()) = Some(threads);
        }
        Ok(k)
    }

    /// Stop and join the kswapd threads (before invariant checks, which need every page back
    /// on a list; allocations then go straight to direct reclaim).
    ///
    /// No task may be in user mode while this runs: a kswapd pass in the middle of a TLB flush
    /// waits for every CPU in user mode of the mm to acknowledge, and the pass is what the stop
    /// waits for. Call it with the tasks idle ([`crate::Task::idle`]) or gone.
    pub fn stop_kswapd(&self) {
        let k = self.kswapd.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(k);
        self.drain_deferred_mms();
    }

    /// The first virtual CPU of `node` (kswapd's per-CPU structures are that CPU's).
    pub fn node_first_cpu(&self, node: usize) -> CpuId {
        let (cpus, nodes) = (self.nr_cpus(), self.lru.nr_nodes());
        CpuId((node * cpus).div_ceil(nodes) as u16)
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

    /// The shared zero page's frame.
    pub fn zero_pfn(&self) -> Pfn {
        self.zero_pfn
    }

    /// `is_zero_pfn`: whether `pfn` is the shared zero page, which every path meeting a PTE
    /// must leave alone (no reference, map count, RSS, LRU or charge to drop).
    #[inline]
    pub fn is_zero_pfn(&self, pfn: Pfn) -> bool {
        pfn == self.zero_pfn
    }

    /// Frames the kernel holds for its whole life (the zero page): what an allocator census
    /// counts as allocated once every address space is gone.
    pub const RESERVED_FRAMES: u64 = 1;

    pub(crate) fn split_ptl(&self) -> Option<&Arc<SplitPtl>> {
        self.split_ptl.as_ref()
    }

    pub(crate) fn vma_lock_kind(&self) -> Option<VmaLockKind> {
        match self.policy.mm.vma_lock {
            VmaLockPolicy::None => None,
            VmaLockPolicy::Rwsem => Some(VmaLockKind::Rwsem),
            VmaLockPolicy::Refcount => Some(VmaLockKind::Refcount),
            VmaLockPolicy::Rcu => Some(VmaLockKind::Rcu),
        }
    }

    pub(crate) fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A new, empty address space (`mm_alloc`), set up from `cpu`.
    pub fn new_mm(self: &Arc<Self>, cpu: CpuId) -> Result<Arc<Mm>, crate::alloc::AllocError> {
        // pgd_alloc may find memory full; like any GFP_KERNEL allocation, it reclaims.
        let mut no_progress = 0;
        let mm = loop {
            match Mm::new(self.clone(), cpu) {
                Ok(mm) => break Arc::new(mm),
                Err(e) => {
                    let s = crate::reclaim::vmscan::try_to_free_pages(
                        self,
                        cpu,
                        crate::reclaim::vmscan::SWAP_CLUSTER_MAX as u64,
                    );
                    no_progress = if s.reclaimed > 0 { 0 } else { no_progress + 1 };
                    if no_progress >= 16 || self.swap.is_none() {
                        return Err(e);
                    }
                }
            }
        };
        self.mms
            .write()
            .expect("the mm registry is never poisoned")
            .push((mm.id, Arc::downgrade(&mm)));
        Ok(mm)
    }

    /// The swap device, if any.
    pub fn swap(&self) -> Option<&SwapDevice> {
        self.swap.as_ref()
    }

    pub(crate) fn nonresident_age(&self) -> &crate::reclaim::workingset::NonresidentAge {
        &self.nonresident
    }

    pub(crate) fn shadow_bucket_order(&self) -> u32 {
        self.shadow_bucket_order
    }

    /// The live address space `id` (the reverse map of an anonymous page).
    pub(crate) fn mm_by_id(&self, id: u32) -> Option<MmRef<'_>> {
        let mm = self
            .mms
            .read()
            .expect("the mm registry is never poisoned")
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, w)| w.upgrade())?;
        Some(MmRef {
            k: self,
            mm: Some(mm),
        })
    }

    /// Every live address space (`lru_gen_mm_list`), for MGLRU's page-table walk. Taken from
    /// the registry under its lock, walked after it.
    pub(crate) fn live_mms(&self) -> Vec<MmRef<'_>> {
        self.mms
            .read()
            .expect("the mm registry is never poisoned")
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .map(|mm| MmRef {
                k: self,
                mm: Some(mm),
            })
            .collect()
    }

    /// Tear down the address spaces whose last reference reclaim dropped. Call outside any
    /// RCU read section (tasks do after each fault and when they exit).
    pub fn drain_deferred_mms(&self) {
        if self.nr_deferred_mms.load(Ordering::Acquire) == 0 {
            return;
        }
        let mms = {
            let mut v = self.deferred_mms.lock().unwrap_or_else(|e| e.into_inner());
            self.nr_deferred_mms.store(0, Ordering::Release);
            std::mem::take(&mut *v)
        };
        drop(mms);
    }

    pub(crate) fn unregister_mm(&self, id: u32) {
        if let Ok(mut v) = self.mms.write() {
            v.retain(|(i, _)| *i != id);
        }
    }

    /// A task running `mm` on virtual CPU `cpu`.
    pub fn new_task(self: &Arc<Self>, mm: Arc<Mm>, cpu: CpuId) -> Task {
        Task::new(self.clone(), mm, cpu)
    }

    /// A new sparse file of `nr_pages` pages (`memfd_create` + `ftruncate`).
    pub fn create_file(self: &Arc<Self>, nr_pages: u64) -> Arc<File> {
        let f = Arc::new(File::new(
            self,
            self.next_id(),
            nr_pages,
            self.policy.locks.spinlock,
        ));
        let mut files = self
            .files
            .write()
            .expect("the file registry is never poisoned");
        files.retain(|(_, w)| w.strong_count() > 0);
        files.push((f.id(), Arc::downgrade(&f)));
        f
    }

    /// The live file `id` (a page-cache page's `mapping` without its tag).
    pub(crate) fn file_by_id(&self, id: u32) -> Option<Arc<File>> {
        self.files
            .read()
            .expect("the file registry is never poisoned")
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, w)| w.upgrade())
    }

    /// This kernel's lock statistics domain (its machine's): the threads that run its tasks
    /// and its kernel threads count into it.
    pub fn lock_stat_domain(&self) -> &Arc<pagelab_sync::LockStatDomain> {
        self.mem().lock_stat_domain()
    }

    /// Lock statistics by class, over every instance in this kernel (every address space's,
    /// detached VMAs' included), as the kernel's `/proc/lock_stat` reports classes.
    pub fn lock_stats(&self) -> LockClassStats {
        use crate::vm::{mm::MMAP_LOCK, pgtable, vma_lock::VMA_LOCK};
        let d = self.lock_stat_domain();
        let a = self.mem().lock_stats();
        let mmap = d.class(&MMAP_LOCK);
        LockClassStats {
            zone_lock: a.zone_lock,
            pcp_lock: a.pcp_lock,
            lru_lock: self.lru.lock_stats(),
            mmap_lock_read: mmap.shared,
            mmap_lock_write: mmap.exclusive,
            vma_lock: d.class(&VMA_LOCK).total(),
            ptl: d.class(&pgtable::PTE_PTL).exclusive
                + d.class(&pgtable::PAGE_TABLE_LOCK).exclusive,
        }
    }

    /// Reset every lock class's statistics and the event counters.
    pub fn reset_stats(&self) {
        self.lock_stat_domain().reset();
        self.mem().reset_stats();
        self.lru.reset_stats();
    }
}
