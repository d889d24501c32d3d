//! Address spaces (`struct mm_struct`; mm/mmap.c, mm/vma.c, mm/mmap_lock.c).
//!
//! An `Mm` is what a process owns: its VMAs, its page table, its RSS counters and the locks
//! that serialise changes to them. Tasks in threads mode share one `Mm`; tasks in processes
//! mode each have their own, which is the whole difference between will-it-scale's two columns.
//!
//! Locking:
//! - `mmap_lock` (an rwsem whose reader count is one shared cache line) is taken for write by
//!   mmap and munmap, and for read by faults that do not use (or fall back from) per-VMA
//!   locks.
//! - The VMA tree is published with RCU: readers (faults) look VMAs up without any lock;
//!   writers, holding mmap_lock for write, publish a modified copy.
//! - A writer write-locks each VMA it changes (`vma_start_write`) and `mmap_write_unlock`
//!   releases them all by advancing `mm_lock_seq` (see `vma_lock`).
//! - Page-table pages and entries: see `pgtable`.
//!
//! Invariants (`Mm::check`): the tree is sorted and non-overlapping with attached VMAs; every
//! present PTE lies inside a VMA and maps a page whose reference and map counts account for
//! it; the RSS counters (once tasks have synced) equal the present PTEs by type; after every
//! VMA is unmapped only the top-level page-table page remains.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pagelab_sync::{RcuCell, RcuGuard, RwSem, RwSemWriteGuard};

use crate::alloc::AllocError;
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::{PAGE_SIZE, Pfn, pg};
use crate::policy::TlbShootdown;
use crate::reclaim::swap::SwapEntry;
use crate::vm::filemap::File;
use crate::vm::pgtable::{PMD_SIZE, PageTable, Pte, TASK_SIZE};
use crate::vm::rss::{Rss, RssType};
use crate::vm::tlb::{MmuGather, TlbState};
use crate::vm::vma::{Vma, VmaBacking, VmaTree};
use crate::vm::vma_lock::{MmLockSeq, VmaLockKind};
use crate::vmstat::VmEvent;

/// `mm->mmap_lock`, a sleeping rwsem whose reader count is one shared line.
pub static MMAP_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::sleeping("mmap_lock", pagelab_sync::Scope::Mm);
/// The reverse map's per-mm lock (standing in for `anon_vma->rwsem`).
pub static RMAP_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::sleeping("rmap_lock", pagelab_sync::Scope::Mm);

/// Lowest address mmap hands out (`mmap_min_addr` and then some).
pub const MMAP_MIN: u64 = 0x1000_0000;
/// Top of the mmap area (below the stack, as `mmap_base`).
pub const MMAP_TOP: u64 = 0x7f00_0000_0000;

/// What to map.
#[derive(Clone, Debug)]
pub enum MapKind {
    /// `MAP_ANONYMOUS | MAP_PRIVATE`.
    Anon,
    /// A file from page `offset`, `MAP_SHARED` or `MAP_PRIVATE`.
    File {
        file: Arc<File>,
        offset: u64,
        shared: bool,
    },
}

/// Why mmap or munmap refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MmError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("out of address space for {0} bytes")]
    NoSpace(u64),
    #[error(transparent)]
    Alloc(#[from] AllocError),
}

/// An address space.
pub struct Mm {
    pub id: u32,
    k: Arc<Kernel>,
    /// `mmap_lock`.
    pub mmap_lock: RwSem<()>,
    /// `mm_lock_seq`.
    pub mm_lock_seq: MmLockSeq,
    vmas: RcuCell<VmaTree>,
    pub pgtable: PageTable,
    pub rss: Rss,
    pub tlb: TlbState,
    vma_lock_kind: VmaLockKind,
    /// What the kernel's `anon_vma` lock does for rmap walks: reclaim holds it for read while
    /// it walks this mm's page table to a page; `free_pgtables` holds it for write, so no
    /// page-table page is freed under a walk. Reclaim never needs `mmap_lock`, so a fault
    /// that reclaims cannot deadlock with a munmap waiting for that fault's VMA lock.
    pub(crate) rmap_lock: RwSem<()>,
    /// The memory cgroup new anonymous pages are charged to (the cgroup of `mm->owner`).
    memcg: AtomicU32,
}

/// An mmap_lock write hold. Dropping it is `mmap_write_unlock`: it advances `mm_lock_seq`
/// (releasing every VMA write-locked under it) before releasing the rwsem.
pub struct MmapWriteGuard<'a> {
    mm: &'a Mm,
    guard: Option<RwSemWriteGuard<'a, ()>>,
}

impl Drop for MmapWriteGuard<'_> {
    fn drop(&mut self) {
        self.mm.mm_lock_seq.end_write_all();
        drop(self.guard.take());
    }
}

impl Mm {
    pub(crate) fn new(k: Arc<Kernel>, cpu: CpuId) -> Result<Mm, AllocError> {
        let p = k.policy().clone();
        let pgtable = PageTable::new(
            k.mem().clone(),
            cpu,
            p.mm.ptl,
            p.locks.spinlock,
            k.split_ptl().cloned(),
        )?;
        Ok(Mm {
            id: k.next_id(),
            mmap_lock: RwSem::new(()).with_class(&MMAP_LOCK),
            mm_lock_seq: MmLockSeq::new(),
            vmas: RcuCell::new(k.rcu(), VmaTree::new()),
            rmap_lock: RwSem::new(()).with_class(&RMAP_LOCK),
            memcg: AtomicU32::new(crate::reclaim::memcg::ROOT_MEMCG),
            pgtable,
            rss: Rss::new(p.mm.rss, k.nr_cpus()),
            tlb: TlbState::new(
                k.nr_cpus(),
                p.mm.tlb_shootdown == TlbShootdown::Ipi,
                k.swap().is_some(),
            ),
            vma_lock_kind: k.vma_lock_kind().unwrap_or(VmaLockKind::Refcount),
            k,
        })
    }

    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.k
    }

    /// Move the address space into memory cgroup `id` (writing the owner's pid to
    /// `cgroup.procs`): pages faulted from now on are charged there; pages already charged
    /// stay with their group, as in cgroup v2.
    pub fn set_memcg(&self, id: u32) -> Result<(), crate::reclaim::memcg::MemcgError> {
        self.k.mem().memcgs().validate(id)?;
        self.memcg.store(id, Ordering::Relaxed);
        Ok(())
    }

    /// The memory cgroup new pages are charged to.
    pub fn memcg(&self) -> u32 {
        self.memcg.load(Ordering::Relaxed)
    }

    /// The VMA tree as published, valid for the read section.
    #[inline]
    pub fn vmas<'a>(&'a self, g: &'a RcuGuard<'_>) -> &'a VmaTree {
        self.vmas.load(g)
    }

    /// `mmap_write_lock`.
    pub fn mmap_write_lock(&self) -> MmapWriteGuard<'_> {
        MmapWriteGuard {
            mm: self,
            guard: Some(self.mmap_lock.write()),
        }
    }

    /// `do_mmap`: map `len` bytes (rounded up to pages) somewhere free. Returns the address.
    pub fn mmap(
        &self,
        g: &RcuGuard<'_>,
        len: u64,
        writable: bool,
        kind: MapKind,
    ) -> Result<u64, MmError> {
        if len == 0 {
            return Err(MmError::Invalid("mmap of length 0".into()));
        }
        let len = len.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64;
        if len > MMAP_TOP - MMAP_MIN {
            return Err(MmError::NoSpace(len));
        }
        let (backing, shared) = match kind {
            MapKind::Anon => (VmaBacking::Anon, false),
            MapKind::File {
                file,
                offset,
                shared,
            } => {
                if offset + len / PAGE_SIZE as u64 > file.nr_pages() {
                    return Err(MmError::Invalid(format!(
                        "mapping {} pages at page {offset} of a {}-page file",
                        len / PAGE_SIZE as u64,
                        file.nr_pages()
                    )));
                }
                (
                    VmaBacking::File {
                        file,
                        pgoff: offset,
                    },
                    shared,
                )
            }
        };
        let _w = self.mmap_write_lock();
        let tree = self.vmas(g);
        // Align large mappings to a page-table span, as THP-aware get_unmapped_area does, so
        // that mappings do not share PTE tables by accident.
        let want = if len >= PMD_SIZE { len + PMD_SIZE } else { len };
        let start = tree
            .find_gap(want, MMAP_MIN, MMAP_TOP)
            .ok_or(MmError::NoSpace(len))?;
        let start = if len >= PMD_SIZE {
            (start + PMD_SIZE - 1) & !(PMD_SIZE - 1)
        } else {
            start
        };
        let vma = Arc::new(Vma::new(
            start,
            start + len,
            writable,
            shared,
            backing,
            self.vma_lock_kind,
        ));
        self.vmas.publish(tree.replaced(&[], vec![vma]));
        Ok(start)
    }

    /// `do_munmap`: unmap `[addr, addr + len)`, splitting VMAs that straddle the ends. Unmapping
    /// a range with nothing mapped is a no-op, as in the kernel.
    pub fn munmap(&self, g: &RcuGuard<'_>, cpu: CpuId, addr: u64, len: u64) -> Result<(), MmError> {
        if !addr.is_multiple_of(PAGE_SIZE as u64) {
            return Err(MmError::Invalid(format!(
                "munmap of unaligned address {addr:#x}"
            )));
        }
        if len == 0 {
            return Err(MmError::Invalid("munmap of length 0".into()));
        }
        let end = addr
            .checked_add(len.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64)
            .filter(|&e| e <= TASK_SIZE)
            .ok_or_else(|| {
                MmError::Invalid(format!(
                    "munmap range {addr:#x}+{len:#x} beyond the address space"
                ))
            })?;
        let w = self.mmap_write_lock();
        let tree = self.vmas(g);
        let victims: Vec<Arc<Vma>> = tree.overlapping(addr, end).to_vec();
        if victims.is_empty() {
            return Ok(());
        }
        // Write-lock every VMA we change: faults under their per-VMA locks drain, new ones fail.
        for v in &victims {
            v.lock.start_write(&self.mm_lock_seq);
        }
        let mut remnants = Vec::new();
        for v in &victims {
            if v.start < addr {
                remnants.push(Arc::new(v.split_copy(v.start, addr, self.vma_lock_kind)));
            }
            if v.end > end {
                remnants.push(Arc::new(v.split_copy(end, v.end, self.vma_lock_kind)));
            }
        }
        let new_tree = tree.replaced(&victims, remnants);
        let floor = new_tree.prev_end(addr);
        let ceiling = new_tree.next_start(end, TASK_SIZE);
        self.vmas.publish(new_tree);
        for v in &victims {
            v.lock.mark_detached();
        }
        let lo = victims[0].start.max(addr);
        let hi = victims[victims.len() - 1].end.min(end);
        self.unmap_region(cpu, lo, hi, floor, ceiling);
        drop(w);
        Ok(())
    }

    /// `unmap_region`: zap the PTEs of `[start, end)` one page table at a time, flush the TLBs
    /// and free the pages of each batch, then free the page tables nobody else can use.
    fn unmap_region(&self, cpu: CpuId, start: u64, end: u64, floor: u64, ceiling: u64) {
        let mut gather = MmuGather::new();
        let mut a = start;
        while a < end {
            let next = ((a / PMD_SIZE) + 1) * PMD_SIZE;
            let chunk_end = next.min(end);
            self.zap_range(cpu, a, chunk_end, &mut gather);
            if gather.is_full() || chunk_end == end {
                self.tlb_flush_mmu(cpu, &mut gather);
            }
            a = chunk_end;
        }
        let _rmap = self.rmap_lock.write();
        self.pgtable.free_pgtables(cpu, start, end, floor, ceiling);
    }

    /// `zap_pte_range` for one page table's span: clear the PTEs, drop the rmap and RSS
    /// accounting, and queue the pages.
    fn zap_range(&self, cpu: CpuId, start: u64, end: u64, gather: &mut MmuGather) {
        let mem = self.k.mem();
        let (mut anon, mut file) = (0i64, 0i64);
        let mut swapped = Vec::new();
        self.pgtable.zap_range(start, end, |_, pte: Pte| {
            if !pte.present() {
                if let Some(e) = SwapEntry::from_pte(pte) {
                    swapped.push(e);
                }
                return;
            }
            let pfn = pte.pfn();
            let page = &mem.pages()[pfn];
            if page.test(pg::ANON) {
                anon += 1;
            } else {
                file += 1;
                if pte.dirty() {
                    page.set(pg::DIRTY);
                }
            }
            page.mapcount.fetch_sub(1, Ordering::Relaxed);
            gather.push(pfn);
        });
        for e in swapped {
            self.free_swap_and_cache(cpu, e);
        }
        if anon != 0 {
            self.rss.add_direct(cpu, RssType::Anon, -anon);
        }
        if file != 0 {
            self.rss.add_direct(cpu, RssType::File, -file);
        }
    }

    /// `free_swap_and_cache`: a swap PTE went away. Drop its slot reference; if the page is
    /// still in the swap cache and nothing references the slot any more, free the page too
    /// (unless it is locked: then reclaim or a swap-in holds it and frees it when done).
    fn free_swap_and_cache(&self, cpu: CpuId, e: SwapEntry) {
        let Some(swap) = self.k.swap() else {
            return;
        };
        if swap.swap_free(cpu, e).unwrap_or(true) {
            return;
        }
        if !matches!(swap.swap_count(e), Ok((0, true))) {
            return;
        }
        let Some(p) = swap.swap_cache().lookup(e) else {
            return;
        };
        if !self.k.lru().try_get_page(p) {
            return;
        }
        let page = &self.k.mem().pages()[p];
        if page.trylock() {
            if swap.swap_cache().lookup(e) == Some(p)
                && matches!(swap.swap_count(e), Ok((0, true)))
                && page.mapcount.load(Ordering::Relaxed) == 0
            {
                crate::reclaim::vmscan::drop_from_swap_cache(&self.k, cpu, p, e, None);
            }
            page.unlock();
        }
        self.k.lru().put_page(cpu, p);
    }

    /// `tlb_flush_mmu`: shoot down the other CPUs' TLBs, then free the gathered pages.
    fn tlb_flush_mmu(&self, cpu: CpuId, gather: &mut MmuGather) {
        if gather.pages.is_empty() {
            return;
        }
        self.tlb.shootdown(cpu, self.k.mem().events());
        self.k
            .mem()
            .events()
            .count(cpu, VmEvent::UnmapPages, gather.pages.len() as u64);
        self.k.lru().release_pages(cpu, &gather.pages);
        gather.pages.clear();
    }

    /// `exit_mmap`: unmap everything and free the page tables. Called when the last task
    /// leaves; `cpu` is where the teardown runs.
    pub fn exit_mmap(&self, g: &RcuGuard<'_>, cpu: CpuId) {
        let _ = self.munmap(g, cpu, 0, TASK_SIZE);
    }

    /// Check the address space's invariants. Call while no task runs in it. `rss_synced` says
    /// whether every task has folded its RSS deltas (per-thread policy). Returns present PTEs
    /// `(anon, file)`.
    pub fn check(&self, rss_synced: bool) -> Result<(u64, u64), String> {
        let reader = pagelab_sync::RcuDomain::register(self.k.rcu()).map_err(|e| e.to_string())?;
        let g = reader.lock();
        let tree = self.vmas(&g);
        let mut prev_end = 0;
        for v in tree.iter() {
            if v.start < prev_end || v.start >= v.end {
                return Err(format!("{v:?} overlaps its predecessor or is empty"));
            }
            if v.lock.is_detached() {
                return Err(format!("{v:?} is in the tree but detached"));
            }
            prev_end = v.end;
        }
        let mem = self.k.mem();
        let (mut anon, mut file) = (0u64, 0u64);
        let mut err = None;
        self.pgtable.for_each_present(|addr, pte| {
            if err.is_some() {
                return;
            }
            let Some(v) = tree.find(addr) else {
                err = Some(format!("PTE at {addr:#x} outside every VMA"));
                return;
            };
            let pfn: Pfn = pte.pfn();
            let page = &mem.pages()[pfn];
            if page.refcount.load(Ordering::Relaxed) < 1
                || page.mapcount.load(Ordering::Relaxed) < 1
            {
                err = Some(format!(
                    "{pfn:?} mapped at {addr:#x} has no reference or map count"
                ));
                return;
            }
            if page.test(pg::ANON) {
                anon += 1;
                if v.shared {
                    err = Some(format!("anonymous page at {addr:#x} in a shared mapping"));
                }
            } else {
                file += 1;
            }
            if pte.writable() && !v.writable {
                err = Some(format!("writable PTE at {addr:#x} in a read-only VMA"));
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if rss_synced {
            for (t, n) in [(RssType::Anon, anon), (RssType::File, file)] {
                let s = self.rss.sum(t);
                if s != n as i64 {
                    return Err(format!("RSS {t:?} is {s} but {n} PTEs are present"));
                }
            }
        }
        if tree.is_empty() && self.pgtable.nr_tables() != 1 {
            return Err(format!(
                "no VMA left but {} page-table pages remain",
                self.pgtable.nr_tables()
            ));
        }
        Ok((anon, file))
    }
}

impl Drop for Mm {
    fn drop(&mut self) {
        self.k.unregister_mm(self.id);
        // exit_mmap from a helper context: the tasks are gone, so any CPU's pcp will do.
        if let Ok(reader) = pagelab_sync::RcuDomain::register(self.k.rcu()) {
            let g = reader.lock();
            self.exit_mmap(&g, CpuId(0));
        }
        // rcu_barrier: the trees this mm retired still hold its VMAs, and through them the
        // files they map; let them go now rather than at some later writer's reclaim.
        self.k.rcu().synchronize();
        // The page table frees its remaining (top-level) pages when it drops.
    }
}
