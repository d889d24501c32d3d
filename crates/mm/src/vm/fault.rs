//! The page-fault path (arch/x86/mm/fault.c `do_user_addr_fault`, mm/memory.c).
//!
//! Entry: with per-VMA locks on, the VMA is looked up under RCU and read-locked on its own
//! (`lock_vma_under_rcu`); if that is refused (the VMA is being changed, is gone, or — in 6.4 —
//! has no anon_vma yet, or the profile's kernel did not handle that kind of fault under the VMA
//! lock: `mm.vma_lock_faults`) or the fault must be retried, the fault takes mmap_lock for read
//! and looks the VMA up again. Each fallback is counted by reason (`vma_lock_fallback_*`).
//! With `mm.vma_lock = "rcu"` the fault takes no VMA lock at all: it snapshots the VMA's
//! sequence count and validates it under the PTE lock before installing (`vma_rcu`); a
//! missing page-table level or a changed count sends it to mmap_lock the same way.
//! `handle_mm_fault` then walks the page table, allocating missing levels, and dispatches on
//! the PTE:
//! - none, anonymous VMA: `do_anonymous_page` (a zeroed page);
//! - none, file VMA: `do_read_fault` (map the page-cache page, and with fault-around up to 16
//!   already-cached neighbours under the same PTE lock), `do_cow_fault` (private write: copy into
//!   a new anonymous page) or `do_shared_fault` (shared write: dirty the cache page);
//! - present but read-only on a write: `do_wp_page` (reuse, dirty a shared page, or copy).
//!
//! Every PTE is installed under its PTE lock after re-checking that it is still none (another
//! thread may have won the race; the loser frees its page). New pages join the LRU under the
//! PTE lock, as `folio_add_lru_vma` does before `set_pte_at`. The exception is
//! `mm.ptl = "atomic"` (Lameter 2005): an anonymous fault installs with a compare-and-exchange
//! on the empty PTE and no lock, and only the winner's page joins the LRU, after the install.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use pagelab_sync::RcuGuard;

use crate::alloc::Gfp;
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::lru::LruList;
use crate::page::{Pfn, pg};
use crate::policy::Ptl;
use crate::reclaim::swap::SwapEntry;
use crate::reclaim::vmscan;
use crate::reclaim::workingset::{LruSizes, workingset_size};
use crate::vm::mm::Mm;
use crate::vm::pgtable::{PTRS_PER_TABLE, Pte, PteSlot};
use crate::vm::range_lock::lock_leaf;
use crate::vm::rss::{RssType, TaskRss};
use crate::vm::vma::{Vma, VmaBacking};
use crate::vm::vma_lock::VmaLockKind;
use crate::vm::vma_rcu::VmaSeq;
use crate::vmstat::VmEvent;

/// A fault that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    /// No VMA, or a write to a read-only VMA (`SIGSEGV`).
    #[error("segmentation fault at {addr:#x} ({})", if *write { "write" } else { "read" })]
    Segv { addr: u64, write: bool },
    /// The page allocator could not provide a page (`VM_FAULT_OOM`).
    #[error("out of memory at {addr:#x}")]
    Oom { addr: u64 },
    /// A non-present entry the engine does not handle (`SIGBUS`).
    #[error("bus error at {addr:#x}: unsupported entry {entry:#x}")]
    Sigbus { addr: u64, entry: u64 },
}

/// `VM_FAULT_RETRY` or a final outcome.
enum Outcome {
    Done,
    Retry,
}

/// Everything a fault needs about who is faulting.
pub struct FaultCtx<'a> {
    pub k: &'a Kernel,
    pub mm: &'a Mm,
    pub cpu: CpuId,
    pub rss: &'a TaskRss,
}

/// Why `lock_vma_under_rcu` refused: the kernel's event, and the engine's finer reason for a
/// refusal the profile's kernel made by design (not by contention).
struct Refused {
    event: VmEvent,
    reason: Option<VmEvent>,
}

impl Refused {
    fn plain(event: VmEvent) -> Self {
        Refused {
            event,
            reason: None,
        }
    }

    fn abort(reason: VmEvent) -> Self {
        Refused {
            event: VmEvent::VmaLockAbort,
            reason: Some(reason),
        }
    }
}

/// Which lock the fault holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Vma,
    MmapRead,
    /// None: a lock-free fault under RCU (`mm.vma_lock = "rcu"`), validated by [`Spec`].
    Rcu,
    /// The PTE table's range lock for read (`mm.mmap_lock = "range"`).
    Range,
}

/// A lock-free fault's validation (`crate::vm::vma_rcu`): the VMA's sequence snapshot, checked
/// under every PTE lock the fault installs under. A failed check marks the fault aborted; the
/// handler then gives back what it prepared, as when it loses the race for the PTE, and the
/// fault is retried under mmap_lock.
struct Spec<'v> {
    seq: Option<(&'v VmaSeq, u64)>,
    aborted: Cell<bool>,
}

impl<'v> Spec<'v> {
    /// A fault under a lock: nothing to validate.
    fn locked() -> Self {
        Spec {
            seq: None,
            aborted: Cell::new(false),
        }
    }

    fn rcu(seq: &'v VmaSeq, snapshot: u64) -> Self {
        Spec {
            seq: Some((seq, snapshot)),
            aborted: Cell::new(false),
        }
    }

    /// Call with the PTE lock held, before storing a PTE: may the fault install?
    #[inline]
    fn ok(&self) -> bool {
        if let Some((seq, snap)) = self.seq
            && !seq.validate(snap)
        {
            self.aborted.set(true);
        }
        !self.aborted.get()
    }

    fn aborted(&self) -> bool {
        self.aborted.get()
    }
}

/// The slow path's retry loop (`should_reclaim_retry`, and `try_charge_memcg`'s for a
/// group at its limit): a failed allocation or charge reclaims and tries again; out of memory
/// is declared only after `MAX_RECLAIM_RETRIES` rounds in a row in which reclaim freed
/// nothing. One empty round is not enough: with several reclaimers, the pages this one would
/// have freed may be isolated by another, or freed into another CPU's per-CPU list (which is
/// drained before giving up, as `drain_all_pages` is).
#[derive(Default)]
struct ReclaimRetry {
    no_progress: u32,
}

impl ReclaimRetry {
    /// `MAX_RECLAIM_RETRIES`.
    const MAX: u32 = 16;

    /// One round of reclaim: from the whole machine (`memcg == None`, direct reclaim) or from
    /// one group (`try_to_free_mem_cgroup_pages`).
    fn reclaim(
        &mut self,
        f: &FaultCtx<'_>,
        addr: u64,
        memcg: Option<u32>,
    ) -> Result<(), FaultError> {
        let nr = vmscan::SWAP_CLUSTER_MAX as u64;
        let s = match memcg {
            None => vmscan::try_to_free_pages(f.k, f.cpu, nr),
            Some(id) => vmscan::try_to_free_mem_cgroup_pages(f.k, f.cpu, id, nr),
        };
        if s.reclaimed > 0 {
            self.no_progress = 0;
            return Ok(());
        }
        self.no_progress += 1;
        if self.no_progress == 1 {
            f.k.mem().drain_all_pages();
        }
        if self.no_progress >= Self::MAX || (f.k.swap().is_none() && self.no_progress > 1) {
            f.count(VmEvent::Oom);
            if let Some(id) = memcg {
                f.k.mem().memcgs().note_oom(id);
            }
            return Err(FaultError::Oom { addr });
        }
        // Let the other reclaimers finish what they isolated.
        std::thread::yield_now();
        Ok(())
    }
}

impl FaultCtx<'_> {
    #[inline]
    fn count(&self, e: VmEvent) {
        self.k.mem().events().count(self.cpu, e, 1);
    }

    /// `walk_alloc`, reclaiming when a page-table page cannot be had.
    fn walk_alloc_reclaim(&self, addr: u64) -> Result<PteSlot, FaultError> {
        let mut retry = ReclaimRetry::default();
        loop {
            match self.mm.pgtable.walk_alloc(self.cpu, addr) {
                Ok(slot) => return Ok(slot),
                Err(_) => retry.reclaim(self, addr, None)?,
            }
        }
    }

    /// Allocate a page for user memory, reclaiming when the allocator is out of pages
    /// (`__alloc_pages_slowpath` → `__alloc_pages_direct_reclaim`).
    fn alloc_user_page(&self, gfp: Gfp, addr: u64) -> Result<Pfn, FaultError> {
        let mut retry = ReclaimRetry::default();
        loop {
            match self.k.mem().alloc_page(self.cpu, gfp) {
                Ok(p) => return Ok(p),
                Err(_) => retry.reclaim(self, addr, None)?,
            }
        }
    }

    /// `filemap_fault`'s page: from the cache, or read in, reclaiming when no page can be
    /// allocated for it.
    fn file_page(
        &self,
        file: &crate::vm::filemap::File,
        index: u64,
        addr: u64,
    ) -> Result<Pfn, FaultError> {
        let mut retry = ReclaimRetry::default();
        loop {
            match file.get_page(self.k, self.cpu, index) {
                Ok(p) => return Ok(p),
                Err(_) => retry.reclaim(self, addr, None)?,
            }
        }
    }

    /// Allocate an anonymous page and charge it to the mm's memory cgroup
    /// (`vma_alloc_folio` + `mem_cgroup_charge`), reclaiming from the group while it is at
    /// its limit. The page leaves with `page.memcg` set, so the LRU files it in the group's
    /// lruvec and the free path uncharges it.
    fn alloc_charged_page(&self, gfp: Gfp, addr: u64) -> Result<Pfn, FaultError> {
        let pfn = self.alloc_user_page(gfp, addr)?;
        let memcg = self.mm.memcg();
        let memcgs = self.k.mem().memcgs();
        let mut retry = ReclaimRetry::default();
        let mut drained = false;
        while !memcgs.try_charge(self.cpu, memcg, 1) {
            if let Err(e) = retry.reclaim(self, addr, Some(memcg)) {
                self.k.mem().free_pages(self.cpu, pfn, 0);
                return Err(e);
            }
            // After the first reclaim, pages parked in other CPUs' charge stocks go back to
            // the counter once (`drain_all_stock` in `try_charge_memcg`).
            if !drained {
                memcgs.drain_all_stock(memcg);
                drained = true;
            }
        }
        self.k.mem().pages()[pfn]
            .memcg
            .store(memcg, Ordering::Relaxed);
        Ok(pfn)
    }

    /// `do_user_addr_fault`.
    pub fn fault(&self, g: &RcuGuard<'_>, addr: u64, write: bool) -> Result<(), FaultError> {
        self.count(VmEvent::PgFault);
        if self.mm.range_locked() {
            return self.fault_range(g, addr, write);
        }
        // The exception entry prefetches mmap_lock's line for writing before it looks at
        // anything else (`prefetchw(&mm->mmap_lock)`: x86's `exc_page_fault`, earlier
        // `__do_page_fault`; ia64's `ia64_do_page_fault`, "mmap_sem is performance
        // critical"), whichever lock the fault then takes: a write-intent fetch that takes the
        // line from the other CPUs, as a store would, while the CPU goes on. A fault that
        // goes straight to mmap_lock reaches it a few dozen instructions later: its trylock's
        // read and exchange (or ia64's `down_read` add) complete with the prefetched line if
        // it is still on its way, and are ordinary accesses if it has arrived (a transfer of
        // their own if another CPU took it since). A fault that tries a per-VMA lock first
        // never waits for this line unless it reads a field beside the lock
        // (`mm.mmap_lock_line_reads`), long after the prefetch.
        // Lock-free faults (`rcu-vma`, Bonsai) are left without it: the design's point is a
        // fault that writes no line other faulting CPUs write, and an mm-wide prefetch for
        // writing is exactly such a line (as range-vm's path, above, has none either).
        // 6.16 removed the prefetch (`mm.fault_prefetch_mmap_lock`).
        if self.k.policy().mm.fault_prefetch_mmap_lock
            && self.k.vma_lock_kind() != Some(VmaLockKind::Rcu)
        {
            self.mm.mmap_lock.trace_line_prefetch_write();
        }
        if self.k.vma_lock_kind() == Some(VmaLockKind::Rcu) {
            if self.fault_rcu(g, addr, write)? {
                return Ok(());
            }
        } else if let Some(kind) = self.k.vma_lock_kind() {
            match self.lock_vma_under_rcu(g, addr, kind) {
                Ok((vma, guard)) => {
                    match self.handle_mm_fault(vma, addr, write, Held::Vma, &Spec::locked())? {
                        Outcome::Done => {
                            drop(guard);
                            self.count(VmEvent::VmaLockSuccess);
                            self.mm.rss.fault_event(self.rss);
                            return Ok(());
                        }
                        Outcome::Retry => {
                            drop(guard);
                            self.count(VmEvent::VmaLockRetry);
                        }
                    }
                }
                Err(refused) => {
                    if let Some(reason) = refused.reason {
                        self.count(reason);
                    }
                    self.count(refused.event);
                }
            }
        }
        // x86 tries the lock before it waits for it (`mm.mmap_read_trylock`): the trylock's
        // read of the count before its exchange is a line access `down_read` does not make.
        let _r = if self.k.policy().mm.mmap_read_trylock {
            self.mm
                .mmap_lock
                .try_read()
                .unwrap_or_else(|| self.mm.mmap_lock.read())
        } else {
            self.mm.mmap_lock.read()
        };
        self.count(VmEvent::FaultMmapLock);
        let Some(vma) = self.mm.vmas(g).find(addr) else {
            return Err(FaultError::Segv { addr, write });
        };
        match self.handle_mm_fault(vma, addr, write, Held::MmapRead, &Spec::locked())? {
            Outcome::Done => {
                self.mm.rss.fault_event(self.rss);
                Ok(())
            }
            Outcome::Retry => unreachable!("a fault under mmap_lock is never retried"),
        }
    }

    /// The range-locked fault (`mm.mmap_lock = "range"`; see [`crate::vm::range_lock`]): walk
    /// to the PTE table (installing missing levels with a compare-and-exchange), read-lock
    /// the table's page with no ancestor write-locked, re-walk to confirm the tables are
    /// still linked (an operation we waited for may have freed them), and only then look the
    /// VMA up: every operation that could change the VMA at `addr` covers `addr`, so holds
    /// an ancestor of (or is) our table's page, and is excluded until we are done. No
    /// mmap_lock, no VMA lock; the split PTE lock is still taken around the PTE update.
    fn fault_range(&self, g: &RcuGuard<'_>, addr: u64, write: bool) -> Result<(), FaultError> {
        if addr >= crate::vm::pgtable::TASK_SIZE {
            return Err(FaultError::Segv { addr, write });
        }
        let pt = &self.mm.pgtable;
        let mut retry = ReclaimRetry::default();
        loop {
            let path = match pt.walk_alloc_path(self.cpu, addr) {
                Ok(p) => p,
                Err(_) => {
                    retry.reclaim(self, addr, None)?;
                    continue;
                }
            };
            let ancestors = [
                pt.node_lock(path[0]),
                pt.node_lock(path[1]),
                pt.node_lock(path[2]),
            ];
            pt.node_lock(path[3]).note_user(self.cpu.0);
            let _leaf = lock_leaf(pt.node_lock(path[3]), &ancestors);
            if pt.walk_path(addr) != Some(path) {
                continue;
            }
            let Some(vma) = self.mm.find_vma(g, addr) else {
                return Err(FaultError::Segv { addr, write });
            };
            return match self.handle_mm_fault(vma, addr, write, Held::Range, &Spec::locked())? {
                Outcome::Done => {
                    self.mm.rss.fault_event(self.rss);
                    Ok(())
                }
                Outcome::Retry => unreachable!("a range-locked fault is never retried"),
            };
        }
    }

    /// The lock-free fault (`mm.vma_lock = "rcu"`; see [`crate::vm::vma_rcu`]): look the VMA
    /// up in the RCU-published tree, snapshot its sequence count (loads only: no lock, no
    /// reference, no store to any line of the VMA) and handle the fault, validating the
    /// snapshot under the PTE lock. `Ok(true)`: done; `Ok(false)`: refused or aborted, retry
    /// under mmap_lock. The events follow the per-VMA lock's: `vma_lock_success`,
    /// `vma_lock_miss`, `vma_lock_abort` (refused before starting) and `vma_lock_retry`
    /// (started, then gave up), with the reason.
    fn fault_rcu(&self, g: &RcuGuard<'_>, addr: u64, write: bool) -> Result<bool, FaultError> {
        let Some(vma) = self.mm.vmas(g).find(addr) else {
            self.count(VmEvent::VmaLockMiss);
            return Ok(false);
        };
        if !vma.is_anon() && !self.k.policy().mm.vma_lock_faults.file() {
            self.count(VmEvent::VmaLockFallbackFile);
            self.count(VmEvent::VmaLockAbort);
            return Ok(false);
        }
        let seq = vma
            .lock
            .rcu_seq()
            .expect("VMAs of an rcu mm carry a sequence");
        let Ok(snapshot) = seq.begin(&vma.lock, &self.mm.mm_lock_seq) else {
            self.count(VmEvent::VmaLockAbort);
            return Ok(false);
        };
        let spec = Spec::rcu(seq, snapshot);
        match self.handle_mm_fault(vma, addr, write, Held::Rcu, &spec) {
            Ok(Outcome::Done) if !spec.aborted() => {
                self.count(VmEvent::VmaLockSuccess);
                self.mm.rss.fault_event(self.rss);
                Ok(true)
            }
            Ok(_) => {
                if spec.aborted() {
                    self.count(VmEvent::VmaRcuFallbackSeq);
                }
                self.count(VmEvent::VmaLockRetry);
                Ok(false)
            }
            // An error decided on a VMA that changed meanwhile is no verdict: redo it under
            // mmap_lock, which sees the tree as it is now.
            Err(_) if !seq.validate(snapshot) => {
                self.count(VmEvent::VmaRcuFallbackSeq);
                self.count(VmEvent::VmaLockRetry);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// `lock_vma_under_rcu`: the VMA read-locked on its own, or the events saying why not.
    ///
    /// Which VMAs qualify follows `mm.vma_lock_faults`: before 6.7 `lock_vma_under_rcu` gave
    /// up on any VMA that was not `vma_is_anonymous` (6.4's "For now only anonymous VMAs are
    /// supported"), counting `VMA_LOCK_ABORT`; the engine counts the same abort plus its
    /// reason.
    fn lock_vma_under_rcu<'g>(
        &'g self,
        g: &'g RcuGuard<'_>,
        addr: u64,
        kind: VmaLockKind,
    ) -> Result<(&'g Vma, crate::vm::vma_lock::VmaReadGuard<'g>), Refused> {
        let vma = self
            .mm
            .vmas(g)
            .find(addr)
            .ok_or(Refused::plain(VmEvent::VmaLockMiss))?;
        if !vma.is_anon() && !self.k.policy().mm.vma_lock_faults.file() {
            return Err(Refused::abort(VmEvent::VmaLockFallbackFile));
        }
        // 6.4 could not prepare an anon_vma under the VMA lock: such faults went to mmap_lock.
        if kind == VmaLockKind::Rwsem && vma.needs_anon_vma() && !vma.has_anon_vma() {
            return Err(Refused::abort(VmEvent::VmaLockFallbackAnonVma));
        }
        let guard = vma
            .lock
            .start_read(&self.mm.mm_lock_seq)
            .map_err(|_| Refused::plain(VmEvent::VmaLockAbort))?;
        Ok((vma, guard))
    }

    /// False sharing of the lock words' lines (`mm.mmap_lock_line_reads`,
    /// `mm.vma_lock_line_reads`): at `point` of the fault (0 where `handle_mm_fault` starts, 1
    /// where the anonymous fault builds its PTE) the kernel reads fields that, in the
    /// profile's layout, share the line of mmap_lock's count or of the VMA lock's word. The
    /// engine's structures keep their locks padded, so only the trace records those reads, on
    /// the lock's own instance; the replay charges each a transfer when another CPU wrote
    /// the line since. Whichever lock the fault holds, it reads these fields.
    #[inline]
    fn lock_line_reads(&self, vma: &Vma, point: u32) {
        if !pagelab_sync::trace::active() {
            return;
        }
        let mm = &self.k.policy().mm;
        if mm.mmap_lock_line_reads > point {
            self.mm.mmap_lock.trace_line_read();
        }
        if mm.vma_lock_line_reads > point {
            vma.lock.trace_line_read();
        }
    }

    /// `handle_mm_fault` for one VMA.
    fn handle_mm_fault(
        &self,
        vma: &Vma,
        addr: u64,
        write: bool,
        held: Held,
        spec: &Spec<'_>,
    ) -> Result<Outcome, FaultError> {
        if write && !vma.writable {
            return Err(FaultError::Segv { addr, write });
        }
        // access_error and handle_mm_fault read vm_flags and vm_mm, pgd_offset reads mm->pgd.
        self.lock_line_reads(vma, 0);
        let private_write = vma.needs_anon_vma() && (vma.is_anon() || write);
        if private_write && !vma.has_anon_vma() {
            // vmf_anon_prepare: under the VMA lock, only if mmap_lock is free right now.
            match held {
                // The range lock excludes every writer of this VMA's range.
                Held::MmapRead | Held::Range => vma.prepare_anon_vma(),
                Held::Vma | Held::Rcu => match self.mm.mmap_lock.try_read() {
                    Some(_r) => vma.prepare_anon_vma(),
                    None => return Ok(Outcome::Retry),
                },
            }
        }
        let pt = &self.mm.pgtable;
        let slot = if held == Held::Rcu {
            // A speculative fault allocates no page table: a table it installed could be
            // unlinked by a racing munmap that never sees it (Lespinasse's series bailed out
            // on an unpopulated level the same way).
            match pt.walk(addr) {
                Some(slot) => slot,
                None => {
                    self.count(VmEvent::VmaRcuFallbackPgtable);
                    return Ok(Outcome::Retry);
                }
            }
        } else {
            self.walk_alloc_reclaim(addr)?
        };
        // Who takes this table's lock: what decides whether traces see it shared.
        pt.note_pte_user(slot, self.cpu);
        let pte = pt.load(slot);
        if pte.is_none() {
            match &vma.backing {
                VmaBacking::Anon => self.do_anonymous_page(vma, slot, addr, write, spec)?,
                VmaBacking::File { .. } if !write => self.do_read_fault(vma, slot, addr, spec)?,
                VmaBacking::File { .. } if !vma.shared => {
                    self.do_cow_fault(vma, slot, addr, spec)?
                }
                VmaBacking::File { .. } => self.do_shared_fault(vma, slot, addr, spec)?,
            }
        } else if pte.present() {
            if write && !pte.writable() {
                self.do_wp_page(vma, slot, addr, pte, spec)?;
            } else {
                self.count(VmEvent::FaultSpurious);
            }
        } else if let Some(entry) = SwapEntry::from_pte(pte).filter(|_| self.k.swap().is_some()) {
            if held != Held::MmapRead && !self.k.policy().mm.vma_lock_faults.swap() {
                // 6.4/6.5 `do_swap_page`: `VM_FAULT_RETRY` under the VMA lock, redone under
                // mmap_lock.
                self.count(VmEvent::VmaLockFallbackSwap);
                return Ok(Outcome::Retry);
            }
            self.do_swap_page(vma, slot, addr, write, (pte, entry), spec)?;
        } else {
            return Err(FaultError::Sigbus { addr, entry: pte.0 });
        }
        if spec.aborted() {
            return Ok(Outcome::Retry);
        }
        Ok(Outcome::Done)
    }

    /// `do_swap_page`: bring a swapped-out anonymous page back, from the swap cache if it is
    /// still there (reclaim may be writing it, or not have freed it yet), else read from the
    /// device into a new page that enters the swap cache while it is read (so that a
    /// concurrent fault on the same entry waits for it instead of reading it twice). The
    /// slot is freed once no PTE and no cache reference it.
    fn do_swap_page(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        write: bool,
        (orig, entry): (Pte, SwapEntry),
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        let swap = self.k.swap().expect("checked by the caller");
        let mem = self.k.mem();
        let pages = mem.pages();
        let pt = &self.mm.pgtable;
        let mut backoff = pagelab_sync::Backoff::new();
        let pfn = loop {
            if pt.load(slot) != orig {
                // Another fault (or an unmap) got there first.
                return Ok(());
            }
            if let Some(p) = swap.swap_cache().lookup(entry) {
                if !self.k.lru().try_get_page(p) {
                    backoff.snooze();
                    continue;
                }
                pages[p].lock();
                if swap.swap_cache().lookup(entry) != Some(p) {
                    pages[p].unlock();
                    self.k.lru().put_page(self.cpu, p);
                    continue;
                }
                self.count(VmEvent::SwapInCacheHit);
                break p;
            }
            match swap.swapcache_prepare(entry) {
                Ok(()) => {}
                // Someone else is reading it in, or it just left the cache: look again.
                Err(_) => {
                    backoff.snooze();
                    continue;
                }
            }
            // We own the slot's cache reservation: read the page in.
            let q = match self.alloc_charged_page(Gfp::USER, addr) {
                Ok(q) => q,
                Err(e) => {
                    let _ = swap.put_swap_folio(self.cpu, entry);
                    return Err(e);
                }
            };
            let page = &pages[q];
            page.set_nonatomic(pg::ANON | pg::SWAPBACKED | pg::LOCKED | pg::SWAPCACHE);
            page.mapping.store(u64::from(self.mm.id), Ordering::Relaxed);
            page.index.store(addr >> 12, Ordering::Relaxed);
            page.private.store(entry.offset() as u32, Ordering::Relaxed);
            swap.swap_in_frame(self.cpu, entry, mem.arena(), q)
                .expect("a referenced slot of the device can be read");
            // The cache's reference, on top of the one the mapping will own.
            mem.get_page(q);
            let shadow = swap
                .swap_cache()
                .add_to_swap_cache(entry, q)
                .expect("the reservation keeps the cache slot empty of pages");
            if let Some(shadow) = shadow
                && self.k.lru().mglru().is_some()
            {
                // Every refault counts, as on the classic path; only a recent one feeds the
                // tiers.
                self.count(VmEvent::WorkingsetRefault);
                crate::reclaim::lru_gen::lru_gen_refault(self.k, q, shadow);
            } else if let Some(shadow) = shadow {
                self.count(VmEvent::WorkingsetRefault);
                // The lruvec the page was evicted from (`workingset_refault` looks it up from the
                // shadow's memcg and node). The nonresident clock is one per machine here.
                let sh = crate::reclaim::workingset::unpack_shadow(shadow);
                let (node, memcg) = (
                    usize::from(sh.node).min(self.k.lru().nr_nodes() - 1),
                    usize::from(sh.memcg).min(self.k.lru().nr_memcgs() - 1),
                );
                let lists = self.k.lru().with_lruvec(node, memcg, |v| LruSizes {
                    inactive_anon: v.len(LruList::InactiveAnon),
                    active_anon: v.len(LruList::ActiveAnon),
                    inactive_file: v.len(LruList::InactiveFile),
                    active_file: v.len(LruList::ActiveFile),
                });
                let size = workingset_size(false, lists, swap.nr_free() > 0);
                let v =
                    self.k
                        .nonresident_age()
                        .refault(shadow, size, 1, self.k.shadow_bucket_order());
                if v.activate {
                    page.set(pg::ACTIVE);
                    self.count(VmEvent::WorkingsetActivate);
                }
            }
            self.k.lru().add(self.cpu, q);
            break q;
        };
        // The page is locked, in the swap cache, and holds our reference (a fresh page's
        // allocation reference, or the lookup's): map it.
        let page = &pages[pfn];
        let ptl = pt.pte_lock(slot);
        if !spec.ok() || pt.load(slot) != orig {
            drop(ptl);
            // Unmapped or swapped in meanwhile (or, lock-free, the VMA changed). Leave the page in the swap cache for whoever
            // still references the slot, or drop it if nobody does.
            self.release_swapcache_page(pfn, entry);
            page.unlock();
            self.k.lru().put_page(self.cpu, pfn);
            return Ok(());
        }
        let mut pte = Pte::new(pfn, vma.writable).with_accessed(true);
        if write {
            pte = pte.with_dirty(true);
        }
        page.mapcount.fetch_add(1, Ordering::Relaxed);
        pt.set(slot, pte);
        let _ = swap.swap_free(self.cpu, entry);
        drop(ptl);
        self.mm.rss.add(self.rss, self.cpu, RssType::Anon, 1);
        // folio_free_swap: the only mapping is back, so the slot and the cache can go.
        self.release_swapcache_page(pfn, entry);
        page.unlock();
        self.count(VmEvent::FaultSwap);
        Ok(())
    }

    /// With the page locked: if no PTE references `entry` any more, take the page out of the
    /// swap cache and free the slot (`folio_free_swap`).
    fn release_swapcache_page(&self, pfn: Pfn, entry: SwapEntry) {
        let swap = self.k.swap().expect("swap-cache pages imply a device");
        if swap.swap_cache().lookup(entry) == Some(pfn)
            && matches!(swap.swap_count(entry), Ok((0, true)))
        {
            vmscan::drop_from_swap_cache(self.k, self.cpu, pfn, entry, None);
        }
    }

    /// Make a freshly allocated page an anonymous page of this mm at `addr`.
    fn prep_anon(&self, pfn: Pfn, addr: u64) {
        let page = &self.k.mem().pages()[pfn];
        page.set_nonatomic(pg::ANON | pg::SWAPBACKED);
        page.mapping.store(u64::from(self.mm.id), Ordering::Relaxed);
        page.index.store(addr >> 12, Ordering::Relaxed);
        page.mapcount.store(1, Ordering::Relaxed);
    }

    /// Give back a page that lost the race to install its PTE.
    fn discard_new_anon(&self, pfn: Pfn) {
        let page = &self.k.mem().pages()[pfn];
        page.mapcount.store(0, Ordering::Relaxed);
        self.k.mem().free_pages(self.cpu, pfn, 0);
    }

    /// `do_anonymous_page`. A read fault of a private mapping maps the shared zero page
    /// read-only (mm/memory.c: `!(vmf->flags & FAULT_FLAG_WRITE) && !mm_forbids_zeropage`,
    /// `pte_mkspecial(pfn_pte(my_zero_pfn(addr), ...))`): no allocation, no clearing, no
    /// charge, no LRU and no RSS (the kernel increments no counter on that branch, and
    /// `vm_normal_page` hides the page from rmap and zap). The first write then takes a
    /// copy-on-write fault ([`FaultCtx::do_wp_page`]) that allocates a zeroed page. A write
    /// fault allocates, zeroes and maps a page of its own.
    ///
    /// Every profile has the zero page: 2.6.13 mapped `ZERO_PAGE` on anonymous read faults
    /// too. It was taken out in 2.6.24 and restored in 2.6.32; no profile of the engine is a
    /// kernel of that gap, so the gap is not modelled. The kernels before the removal took a
    /// reference on the zero page and, from memory of their source (not checked against it
    /// here), counted the mapping in the RSS; the engine follows the kernel since 2.6.32 for
    /// every profile and counts it nowhere. Anonymous faults that fill a page of their own
    /// are what the lameter and pft workloads measure, and those are unaffected.
    fn do_anonymous_page(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        write: bool,
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        if !write && !vma.shared {
            return self.map_zero_page(slot, spec);
        }
        let pfn = self.alloc_charged_page(Gfp::USER_ZERO, addr)?;
        self.prep_anon(pfn, addr);
        // mk_pte(vma->vm_page_prot), the VM_WRITE test, and vm_mm for the PTE lock.
        self.lock_line_reads(vma, 1);
        let mut pte = Pte::new(pfn, vma.writable).with_accessed(true);
        if write {
            pte = pte.with_dirty(true);
        }
        let prefault = self.prefault_pages(vma, slot, addr);
        let pt = &self.mm.pgtable;
        let mut mapped = 0;
        if pt.ptl_mode() == Ptl::Atomic {
            debug_assert!(spec.seq.is_none(), "policy refuses rcu with ptl = atomic");
            // Lameter 2005: no lock; the compare-and-exchange decides the race, and only the
            // winner's page joins the LRU and the RSS count.
            if pt.install_if_none(slot, pte) {
                self.k.lru().add(self.cpu, pfn);
                mapped += 1;
            } else {
                self.discard_new_anon(pfn);
            }
            for (s, p) in prefault {
                if pt.install_if_none(s, Pte::new(p, vma.writable)) {
                    self.k.lru().add(self.cpu, p);
                    mapped += 1;
                } else {
                    self.discard_new_anon(p);
                }
            }
        } else {
            let mut lost = Vec::new();
            let ptl = pt.pte_lock(slot);
            let valid = spec.ok();
            if valid && pt.load(slot).is_none() {
                self.k.lru().add(self.cpu, pfn);
                pt.set(slot, pte);
                mapped += 1;
            } else {
                lost.push(pfn);
            }
            for (s, p) in prefault {
                if valid && pt.load(s).is_none() {
                    self.k.lru().add(self.cpu, p);
                    pt.set(s, Pte::new(p, vma.writable));
                    mapped += 1;
                } else {
                    lost.push(p);
                }
            }
            drop(ptl);
            for p in lost {
                self.discard_new_anon(p);
            }
        }
        if mapped > 0 {
            self.mm.rss.add(self.rss, self.cpu, RssType::Anon, mapped);
        }
        if !spec.aborted() {
            self.count(VmEvent::FaultAnon);
        }
        Ok(())
    }

    /// Anticipatory prefaulting (Christoph Lameter, 2004-2005, "prefaulting" in his page-fault
    /// scalability patch sets; never merged): a write fault on an anonymous page also
    /// allocates, zeroes and maps the next `mm.anon_prefault` pages that are still none,
    /// within the VMA and the faulting PTE table, so that a thread sweeping a region takes one
    /// fault per `N + 1` pages. (His patch sized the batch as a power of two,
    /// `max_prealloc_order`; the engine takes a page count.) The pages are allocated and
    /// charged here, before the PTE lock, without reclaiming: prefaulting is a guess, and
    /// when memory or the group's room is short it stops rather than pushing other pages
    /// out. Returns the slots and their prepared pages; the caller installs those whose PTE
    /// is still none and frees the others.
    fn prefault_pages(&self, vma: &Vma, slot: PteSlot, addr: u64) -> Vec<(PteSlot, Pfn)> {
        let n = self.k.policy().mm.anon_prefault as usize;
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        let pt = &self.mm.pgtable;
        let memcg = self.mm.memcg();
        let memcgs = self.k.mem().memcgs();
        for i in 1..=n {
            let a = addr + (i as u64) * crate::page::PAGE_SIZE as u64;
            let Some(s) = slot.offset(i) else { break };
            if a >= vma.end {
                break;
            }
            if !pt.load(s).is_none() {
                continue;
            }
            let Ok(p) = self.k.mem().alloc_page(self.cpu, Gfp::USER_ZERO) else {
                break;
            };
            if !memcgs.try_charge(self.cpu, memcg, 1) {
                self.k.mem().free_pages(self.cpu, p, 0);
                break;
            }
            self.k.mem().pages()[p]
                .memcg
                .store(memcg, Ordering::Relaxed);
            self.prep_anon(p, a);
            out.push((s, p));
        }
        out
    }

    /// The zero-page branch of `do_anonymous_page`: map the shared zero frame read-only,
    /// unless another thread filled the PTE first (then there is nothing to undo).
    fn map_zero_page(&self, slot: PteSlot, spec: &Spec<'_>) -> Result<(), FaultError> {
        let pt = &self.mm.pgtable;
        let pte = Pte::new(self.k.zero_pfn(), false).with_accessed(true);
        if pt.ptl_mode() == Ptl::Atomic {
            pt.install_if_none(slot, pte);
        } else {
            let ptl = pt.pte_lock(slot);
            if spec.ok() && pt.load(slot).is_none() {
                pt.set(slot, pte);
            }
            drop(ptl);
        }
        if !spec.aborted() {
            self.count(VmEvent::FaultAnon);
        }
        Ok(())
    }

    fn file_of(vma: &Vma) -> &crate::vm::filemap::File {
        match &vma.backing {
            VmaBacking::File { file, .. } => file,
            VmaBacking::Anon => unreachable!("file fault on an anonymous VMA"),
        }
    }

    /// `do_read_fault` with `do_fault_around`: map the faulting page and the already cached
    /// pages around it, within the VMA and the PTE table, under one PTE lock hold.
    fn do_read_fault(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let page = self.file_page(file, vma.pgoff(addr), addr)?;
        let pt = &self.mm.pgtable;
        let around = u64::from(self.k.policy().mm.fault_around.max(1));
        let page_no = addr >> 12;
        let win_start = (page_no / around * around).max(vma.start >> 12);
        let win_end = (page_no / around * around + around).min(vma.end >> 12);
        // Stay inside this PTE table.
        let table_base = page_no - slot.index as u64;
        let win_start = win_start.max(table_base);
        let win_end = win_end.min(table_base + PTRS_PER_TABLE as u64);
        let mem = self.k.mem();
        let mut extra = Vec::new();
        let ptl = pt.pte_lock(slot);
        let valid = spec.ok();
        if valid && pt.load(slot).is_none() {
            mem.pages()[page].mapcount.fetch_add(1, Ordering::Relaxed);
            pt.set(slot, Pte::new(page, false).with_accessed(true));
            self.mm.rss.add(self.rss, self.cpu, RssType::File, 1);
        } else {
            extra.push(page);
        }
        let mut mapped_around = 0;
        if around > 1 && valid {
            for p in win_start..win_end {
                if p == page_no {
                    continue;
                }
                let s = PteSlot {
                    table: slot.table,
                    index: (p - table_base) as usize,
                };
                if !pt.load(s).is_none() {
                    continue;
                }
                // filemap_map_pages: only pages already in the cache.
                let Some(pfn) = file.find_get_page(self.k, vma.pgoff(p << 12)) else {
                    continue;
                };
                mem.pages()[pfn].mapcount.fetch_add(1, Ordering::Relaxed);
                pt.set(s, Pte::new(pfn, false));
                mapped_around += 1;
            }
            if mapped_around > 0 {
                self.mm
                    .rss
                    .add(self.rss, self.cpu, RssType::File, mapped_around);
            }
        }
        drop(ptl);
        if !extra.is_empty() {
            self.k.lru().release_pages(self.cpu, &extra);
        }
        if !valid {
            return Ok(());
        }
        self.count(VmEvent::FaultFileRead);
        if mapped_around > 0 {
            mem.events()
                .count(self.cpu, VmEvent::FaultAround, mapped_around as u64);
        }
        Ok(())
    }

    /// `do_cow_fault`: a private write to a file page not yet mapped: copy it into a new
    /// anonymous page.
    fn do_cow_fault(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let mem = self.k.mem();
        let src = self.file_page(file, vma.pgoff(addr), addr)?;
        let new = match self.alloc_charged_page(Gfp::USER, addr) {
            Ok(p) => p,
            Err(e) => {
                self.k.lru().put_page(self.cpu, src);
                return Err(e);
            }
        };
        mem.arena().copy_page(new, src);
        self.k.lru().put_page(self.cpu, src);
        self.prep_anon(new, addr);
        let pt = &self.mm.pgtable;
        let ptl = pt.pte_lock(slot);
        if !spec.ok() || !pt.load(slot).is_none() {
            drop(ptl);
            self.discard_new_anon(new);
            return Ok(());
        }
        self.k.lru().add(self.cpu, new);
        self.mm.rss.add(self.rss, self.cpu, RssType::Anon, 1);
        pt.set(
            slot,
            Pte::new(new, true).with_accessed(true).with_dirty(true),
        );
        drop(ptl);
        self.count(VmEvent::FaultCow);
        Ok(())
    }

    /// `do_shared_fault`: a shared write: map the cache page writable and dirty it.
    fn do_shared_fault(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let mem = self.k.mem();
        let page = self.file_page(file, vma.pgoff(addr), addr)?;
        mem.pages()[page].set(pg::DIRTY);
        let pt = &self.mm.pgtable;
        let ptl = pt.pte_lock(slot);
        if !spec.ok() || !pt.load(slot).is_none() {
            drop(ptl);
            self.k.lru().put_page(self.cpu, page);
            return Ok(());
        }
        mem.pages()[page].mapcount.fetch_add(1, Ordering::Relaxed);
        self.mm.rss.add(self.rss, self.cpu, RssType::File, 1);
        pt.set(
            slot,
            Pte::new(page, true).with_accessed(true).with_dirty(true),
        );
        drop(ptl);
        self.count(VmEvent::FaultShared);
        Ok(())
    }

    /// `do_wp_page`: a write to a present read-only PTE in a writable VMA.
    fn do_wp_page(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        old: Pte,
        spec: &Spec<'_>,
    ) -> Result<(), FaultError> {
        let mem = self.k.mem();
        let pt = &self.mm.pgtable;
        let old_pfn = old.pfn();
        let old_page = &mem.pages()[old_pfn];
        // The zero page is never reused in place: `vm_normal_page` returns no page for it, so
        // `do_wp_page` always copies.
        let zero = self.k.is_zero_pfn(old_pfn);
        let reuse = !zero
            && (vma.shared
                || (old_page.test(pg::ANON) && old_page.mapcount.load(Ordering::Relaxed) == 1));
        if reuse {
            // wp_page_reuse / wp_page_shared: make it writable in place.
            let ptl = pt.pte_lock(slot);
            if spec.ok() && pt.load(slot) == old {
                if vma.shared {
                    old_page.set(pg::DIRTY);
                }
                pt.set(
                    slot,
                    old.with_writable(true).with_accessed(true).with_dirty(true),
                );
            }
            drop(ptl);
            self.count(VmEvent::FaultShared);
            return Ok(());
        }
        // wp_page_copy: a private copy of a file page (or of a shared anonymous page); from
        // the zero page, a freshly zeroed page (`vma_alloc_zeroed_movable_folio`) rather than
        // a copy. Charged to the mm's group like every other new anonymous page
        // (`mem_cgroup_charge` in `wp_page_copy`), reclaiming while the group is at its limit.
        let new = if zero {
            self.alloc_charged_page(Gfp::USER_ZERO, addr)?
        } else {
            let new = self.alloc_charged_page(Gfp::USER, addr)?;
            mem.arena().copy_page(new, old_pfn);
            new
        };
        self.prep_anon(new, addr);
        let ptl = pt.pte_lock(slot);
        if !spec.ok() || pt.load(slot) != old {
            drop(ptl);
            self.discard_new_anon(new);
            return Ok(());
        }
        self.k.lru().add(self.cpu, new);
        pt.set(
            slot,
            Pte::new(new, true).with_accessed(true).with_dirty(true),
        );
        // ptep_clear_flush: other CPUs may still translate to the old page.
        self.mm.tlb.shootdown(self.cpu, mem.events());
        if !zero {
            old_page.mapcount.fetch_sub(1, Ordering::Relaxed);
            let t = if old_page.test(pg::ANON) {
                RssType::Anon
            } else {
                RssType::File
            };
            self.mm.rss.add(self.rss, self.cpu, t, -1);
        }
        self.mm.rss.add(self.rss, self.cpu, RssType::Anon, 1);
        drop(ptl);
        if !zero {
            self.k.lru().put_page(self.cpu, old_pfn);
        }
        self.count(VmEvent::FaultCow);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::MemConfig;
    use crate::page::PAGE_SIZE;
    use crate::policy::{Policy, VmaLock};
    use crate::vm::mm::MapKind;
    use crate::vm::rss::TaskRss;

    const PAGE: u64 = PAGE_SIZE as u64;

    fn rcu_kernel() -> std::sync::Arc<Kernel> {
        let mut p = Policy::default();
        p.mm.vma_lock = VmaLock::Rcu;
        Kernel::new(&MemConfig::new(16 << 20, 1), &p).unwrap()
    }

    fn ev(k: &Kernel, e: VmEvent) -> u64 {
        k.mem().events().sum(e)
    }

    /// The first fault of a page table finds a level missing and retries under mmap_lock
    /// (counted as a retry with its reason); the next ones stay lock-free.
    #[test]
    fn rcu_fault_retries_on_a_missing_table_then_stays_lock_free() {
        let k = rcu_kernel();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t = k.new_task(mm.clone(), CpuId(0));
        let a = t.mmap(8 * PAGE, true, MapKind::Anon).unwrap();
        for i in 0..8 {
            t.store(a + i * PAGE, i + 1).unwrap();
        }
        assert_eq!(ev(&k, VmEvent::VmaRcuFallbackPgtable), 1);
        assert_eq!(ev(&k, VmEvent::VmaLockRetry), 1);
        assert_eq!(ev(&k, VmEvent::FaultMmapLock), 1);
        assert_eq!(ev(&k, VmEvent::VmaLockSuccess), 7);
        assert_eq!(ev(&k, VmEvent::VmaRcuFallbackSeq), 0);
        for i in 0..8 {
            assert_eq!(t.load(a + i * PAGE).unwrap(), i + 1);
        }
        t.munmap(a, 8 * PAGE).unwrap();
        mm.check(false).unwrap();
    }

    /// A writer's hold on the VMA between the fault's snapshot and its PTE-lock check makes
    /// the fault give up: nothing installed, its page freed, the fault marked for a retry.
    #[test]
    fn rcu_fault_undoes_and_retries_when_its_vma_changed() {
        let k = rcu_kernel();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t = k.new_task(mm.clone(), CpuId(0));
        let a = t.mmap(4 * PAGE, true, MapKind::Anon).unwrap();
        t.store(a, 1).unwrap();
        let reader = pagelab_sync::RcuDomain::register(k.rcu()).unwrap();
        let g = reader.lock();
        let vma = mm.vmas(&g).find(a + PAGE).unwrap();
        let seq = vma.lock.rcu_seq().unwrap();
        let snap = seq.begin(&vma.lock, &mm.mm_lock_seq).unwrap();
        {
            let _w = mm.mmap_write_lock();
            vma.lock.start_write(&mm.mm_lock_seq);
        }
        let rss = TaskRss::default();
        let f = FaultCtx {
            k: &k,
            mm: &mm,
            cpu: CpuId(0),
            rss: &rss,
        };
        let (alloc, free) = (ev(&k, VmEvent::PgAlloc), ev(&k, VmEvent::PgFree));
        let spec = Spec::rcu(seq, snap);
        let out = f.handle_mm_fault(vma, a + PAGE, true, Held::Rcu, &spec);
        assert!(matches!(out, Ok(Outcome::Retry)));
        assert!(spec.aborted());
        let slot = mm.pgtable.walk(a + PAGE).unwrap();
        assert!(
            mm.pgtable.load(slot).is_none(),
            "installed into a changed VMA"
        );
        assert_eq!(
            ev(&k, VmEvent::PgAlloc) - alloc,
            ev(&k, VmEvent::PgFree) - free,
            "the prepared page was not given back"
        );
        // A VMA a writer has had is refused from then on (the engine's writers replace what
        // they lock); the task's fault is redone under mmap_lock.
        assert!(seq.begin(&vma.lock, &mm.mm_lock_seq).is_err());
        drop(g);
        drop(reader);
        let before = ev(&k, VmEvent::FaultMmapLock);
        t.store(a + PAGE, 2).unwrap();
        assert_eq!(ev(&k, VmEvent::FaultMmapLock), before + 1);
        assert!(mm.pgtable.load(slot).present());
        t.munmap(a, 4 * PAGE).unwrap();
    }

    /// Which faults stay lock-free follows `mm.vma_lock_faults`, as for the per-VMA locks: a
    /// file fault before "all" is an abort counted with its reason and handled under
    /// mmap_lock; a swap-in before "anon+swap" is a retry.
    #[test]
    fn rcu_coverage_follows_vma_lock_faults() {
        use crate::policy::VmaLockFaults;
        use crate::reclaim::swap::{Backing, SwapConfig};
        for cover in [
            VmaLockFaults::Anon,
            VmaLockFaults::AnonSwap,
            VmaLockFaults::All,
        ] {
            let mut p = Policy::default();
            p.mm.vma_lock = VmaLock::Rcu;
            p.mm.vma_lock_faults = cover;
            let cfg = MemConfig::new(32 << 20, 1).with_memcgs(2);
            let swap = SwapConfig::new(4096, Backing::Memory { compress: false }, 1);
            let k = Kernel::with_swap(&cfg, &p, Some(swap)).unwrap();
            k.stop_kswapd();
            k.mem().memcgs().set_max(1, 256).unwrap();
            let mm = k.new_mm(CpuId(0)).unwrap();
            mm.set_memcg(1).unwrap();
            let t = k.new_task(mm.clone(), CpuId(0));
            let file = k.create_file(8);
            let f = t
                .mmap(
                    8 * PAGE,
                    false,
                    MapKind::File {
                        file,
                        offset: 0,
                        shared: true,
                    },
                )
                .unwrap();
            let a = t.mmap(1024 * PAGE, true, MapKind::Anon).unwrap();
            for i in 0..4 {
                t.load(f + i * 2 * PAGE).unwrap();
            }
            let file_fallbacks = ev(&k, VmEvent::VmaLockFallbackFile);
            assert_eq!(
                file_fallbacks,
                if cover.file() { 0 } else { 4 },
                "{cover:?}"
            );
            for i in 0..1024 {
                t.store(a + i * PAGE, i + 1).unwrap();
            }
            for i in 0..1024 {
                assert_eq!(t.load(a + i * PAGE).unwrap(), i + 1, "{cover:?}");
            }
            let swapins = ev(&k, VmEvent::FaultSwap);
            assert!(swapins > 0, "{cover:?}: nothing was swapped in");
            let fell_back = ev(&k, VmEvent::VmaLockFallbackSwap);
            assert_eq!(
                fell_back,
                if cover.swap() { 0 } else { swapins },
                "{cover:?}"
            );
            assert_eq!(
                ev(&k, VmEvent::VmaRcuFallbackSeq),
                0,
                "{cover:?}: nobody unmapped"
            );
            t.munmap(a, 1024 * PAGE).unwrap();
            t.munmap(f, 8 * PAGE).unwrap();
        }
    }

    /// The lock-free fault writes no line of the VMA: a recording of faults on one VMA shows
    /// no VMA-lock and no mmap_lock event, where the 6.15 reference count shows one
    /// acquisition and release per fault.
    #[test]
    fn rcu_fault_records_no_vma_lock_where_refcount_does() {
        use crate::vm::mm::MMAP_LOCK;
        use crate::vm::vma_lock::VMA_LOCK;
        use pagelab_sync::trace;
        for (lock, want) in [(VmaLock::Rcu, 0), (VmaLock::Refcount, 8)] {
            let mut p = Policy::default();
            p.mm.vma_lock = lock;
            let k = Kernel::new(&MemConfig::new(16 << 20, 1), &p).unwrap();
            let mm = k.new_mm(CpuId(0)).unwrap();
            let t = k.new_task(mm.clone(), CpuId(0));
            let a = t.mmap(8 * PAGE, true, MapKind::Anon).unwrap();
            t.store(a, 1).unwrap();
            trace::start(1024);
            for i in 1..5 {
                t.store(a + i * PAGE, i).unwrap();
            }
            let evs = trace::stop();
            // Acquisitions and releases only: the refcount's read before its exchange is a
            // line event of the same class.
            let n = |c: &'static pagelab_sync::LockClass| {
                evs.iter()
                    .filter(|e| {
                        std::ptr::eq(e.class, c)
                            && matches!(
                                e.kind,
                                trace::Kind::Acquire { .. } | trace::Kind::Release { .. }
                            )
                    })
                    .count()
            };
            assert_eq!(n(&VMA_LOCK), want, "{lock:?}: {evs:?}");
            assert_eq!(n(&MMAP_LOCK), 0, "{lock:?}");
            if lock == VmaLock::Rcu {
                // No line of the VMA lock at all: the fault reads its sequence line instead.
                assert!(!evs.iter().any(|e| std::ptr::eq(e.class, &VMA_LOCK)));
                assert!(
                    evs.iter()
                        .any(|e| std::ptr::eq(e.class, &crate::vm::vma_rcu::VM_SEQUENCE))
                );
            }
            t.munmap(a, 8 * PAGE).unwrap();
        }
    }
}
