//! The page-fault path (arch/x86/mm/fault.c `do_user_addr_fault`, mm/memory.c).
//!
//! Entry: with per-VMA locks on, the VMA is looked up under RCU and read-locked on its own
//! (`lock_vma_under_rcu`); if that is refused (the VMA is being changed, is gone, or — in 6.4 —
//! has no anon_vma yet) or the fault must be retried, the fault takes mmap_lock for read and
//! looks the VMA up again. `handle_mm_fault` then walks the page table, allocating missing
//! levels, and dispatches on the PTE:
//! - none, anonymous VMA: `do_anonymous_page` (a zeroed page);
//! - none, file VMA: `do_read_fault` (map the page-cache page, and with fault-around up to 16
//!   already-cached neighbours under the same PTE lock), `do_cow_fault` (private write: copy into
//!   a new anonymous page) or `do_shared_fault` (shared write: dirty the cache page);
//! - present but read-only on a write: `do_wp_page` (reuse, dirty a shared page, or copy).
//!
//! Every PTE is installed under its PTE lock after re-checking that it is still none (another
//! thread may have won the race; the loser frees its page). New pages join the LRU under the
//! PTE lock, as `folio_add_lru_vma` does before `set_pte_at`.

use std::sync::atomic::Ordering;

use pagelab_sync::RcuGuard;

use crate::alloc::{AllocError, Gfp};
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::{Pfn, pg};
use crate::vm::mm::Mm;
use crate::vm::pgtable::{PTRS_PER_TABLE, Pte, PteSlot};
use crate::vm::rss::{RssType, TaskRss};
use crate::vm::vma::{Vma, VmaBacking};
use crate::vm::vma_lock::VmaLockKind;
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

/// Which lock the fault holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Vma,
    MmapRead,
}

impl FaultCtx<'_> {
    #[inline]
    fn count(&self, e: VmEvent) {
        self.k.mem().events().count(self.cpu, e, 1);
    }

    fn oom(&self, addr: u64) -> impl Fn(AllocError) -> FaultError {
        move |_| FaultError::Oom { addr }
    }

    /// `do_user_addr_fault`.
    pub fn fault(&self, g: &RcuGuard<'_>, addr: u64, write: bool) -> Result<(), FaultError> {
        self.count(VmEvent::PgFault);
        if let Some(kind) = self.k.vma_lock_kind() {
            match self.lock_vma_under_rcu(g, addr, kind) {
                Ok((vma, guard)) => match self.handle_mm_fault(vma, addr, write, Held::Vma)? {
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
                },
                Err(ev) => self.count(ev),
            }
        }
        let _r = self.mm.mmap_lock.read();
        self.count(VmEvent::FaultMmapLock);
        let Some(vma) = self.mm.vmas(g).find(addr) else {
            return Err(FaultError::Segv { addr, write });
        };
        match self.handle_mm_fault(vma, addr, write, Held::MmapRead)? {
            Outcome::Done => {
                self.mm.rss.fault_event(self.rss);
                Ok(())
            }
            Outcome::Retry => unreachable!("a fault under mmap_lock is never retried"),
        }
    }

    /// `lock_vma_under_rcu`: the VMA read-locked on its own, or the event saying why not.
    fn lock_vma_under_rcu<'g>(
        &'g self,
        g: &'g RcuGuard<'_>,
        addr: u64,
        kind: VmaLockKind,
    ) -> Result<(&'g Vma, crate::vm::vma_lock::VmaReadGuard<'g>), VmEvent> {
        let vma = self.mm.vmas(g).find(addr).ok_or(VmEvent::VmaLockMiss)?;
        // 6.4 could not prepare an anon_vma under the VMA lock: such faults went to mmap_lock.
        if kind == VmaLockKind::Rwsem && vma.needs_anon_vma() && !vma.has_anon_vma() {
            return Err(VmEvent::VmaLockAbort);
        }
        let guard = vma
            .lock
            .start_read(&self.mm.mm_lock_seq)
            .map_err(|_| VmEvent::VmaLockAbort)?;
        Ok((vma, guard))
    }

    /// `handle_mm_fault` for one VMA.
    fn handle_mm_fault(
        &self,
        vma: &Vma,
        addr: u64,
        write: bool,
        held: Held,
    ) -> Result<Outcome, FaultError> {
        if write && !vma.writable {
            return Err(FaultError::Segv { addr, write });
        }
        let private_write = vma.needs_anon_vma() && (vma.is_anon() || write);
        if private_write && !vma.has_anon_vma() {
            // vmf_anon_prepare: under the VMA lock, only if mmap_lock is free right now.
            match held {
                Held::MmapRead => vma.prepare_anon_vma(),
                Held::Vma => match self.mm.mmap_lock.try_read() {
                    Some(_r) => vma.prepare_anon_vma(),
                    None => return Ok(Outcome::Retry),
                },
            }
        }
        let pt = &self.mm.pgtable;
        let slot = pt.walk_alloc(self.cpu, addr).map_err(self.oom(addr))?;
        let pte = pt.load(slot);
        if pte.is_none() {
            match &vma.backing {
                VmaBacking::Anon => self.do_anonymous_page(vma, slot, addr, write)?,
                VmaBacking::File { .. } if !write => self.do_read_fault(vma, slot, addr)?,
                VmaBacking::File { .. } if !vma.shared => self.do_cow_fault(vma, slot, addr)?,
                VmaBacking::File { .. } => self.do_shared_fault(vma, slot, addr)?,
            }
        } else if pte.present() {
            if write && !pte.writable() {
                self.do_wp_page(vma, slot, addr, pte)?;
            } else {
                self.count(VmEvent::FaultSpurious);
            }
        } else {
            return Err(FaultError::Sigbus { addr, entry: pte.0 });
        }
        Ok(Outcome::Done)
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

    /// `do_anonymous_page`.
    fn do_anonymous_page(
        &self,
        vma: &Vma,
        slot: PteSlot,
        addr: u64,
        write: bool,
    ) -> Result<(), FaultError> {
        let mem = self.k.mem();
        let pfn = mem
            .alloc_page(self.cpu, Gfp::USER_ZERO)
            .map_err(self.oom(addr))?;
        self.prep_anon(pfn, addr);
        let pt = &self.mm.pgtable;
        let ptl = pt.pte_lock(slot);
        if !pt.load(slot).is_none() {
            drop(ptl);
            self.discard_new_anon(pfn);
            return Ok(());
        }
        self.k.lru().add(self.cpu, pfn);
        self.mm.rss.add(self.rss, self.cpu, RssType::Anon, 1);
        let mut pte = Pte::new(pfn, vma.writable).with_accessed(true);
        if write {
            pte = pte.with_dirty(true);
        }
        pt.set(slot, pte);
        drop(ptl);
        self.count(VmEvent::FaultAnon);
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
    fn do_read_fault(&self, vma: &Vma, slot: PteSlot, addr: u64) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let page = file
            .get_page(self.k, self.cpu, vma.pgoff(addr))
            .map_err(self.oom(addr))?;
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
        if pt.load(slot).is_none() {
            mem.pages()[page].mapcount.fetch_add(1, Ordering::Relaxed);
            pt.set(slot, Pte::new(page, false).with_accessed(true));
            self.mm.rss.add(self.rss, self.cpu, RssType::File, 1);
        } else {
            extra.push(page);
        }
        let mut mapped_around = 0;
        if around > 1 {
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
        self.count(VmEvent::FaultFileRead);
        if mapped_around > 0 {
            mem.events()
                .count(self.cpu, VmEvent::FaultAround, mapped_around as u64);
        }
        Ok(())
    }

    /// `do_cow_fault`: a private write to a file page not yet mapped: copy it into a new
    /// anonymous page.
    fn do_cow_fault(&self, vma: &Vma, slot: PteSlot, addr: u64) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let mem = self.k.mem();
        let src = file
            .get_page(self.k, self.cpu, vma.pgoff(addr))
            .map_err(self.oom(addr))?;
        let new = match mem.alloc_page(self.cpu, Gfp::USER) {
            Ok(p) => p,
            Err(_) => {
                self.k.lru().put_page(self.cpu, src);
                return Err(FaultError::Oom { addr });
            }
        };
        mem.arena().copy_page(new, src);
        self.k.lru().put_page(self.cpu, src);
        self.prep_anon(new, addr);
        let pt = &self.mm.pgtable;
        let ptl = pt.pte_lock(slot);
        if !pt.load(slot).is_none() {
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
    fn do_shared_fault(&self, vma: &Vma, slot: PteSlot, addr: u64) -> Result<(), FaultError> {
        let file = Self::file_of(vma);
        let mem = self.k.mem();
        let page = file
            .get_page(self.k, self.cpu, vma.pgoff(addr))
            .map_err(self.oom(addr))?;
        mem.pages()[page].set(pg::DIRTY);
        let pt = &self.mm.pgtable;
        let ptl = pt.pte_lock(slot);
        if !pt.load(slot).is_none() {
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
    fn do_wp_page(&self, vma: &Vma, slot: PteSlot, addr: u64, old: Pte) -> Result<(), FaultError> {
        let mem = self.k.mem();
        let pt = &self.mm.pgtable;
        let old_pfn = old.pfn();
        let old_page = &mem.pages()[old_pfn];
        let reuse = vma.shared
            || (old_page.test(pg::ANON) && old_page.mapcount.load(Ordering::Relaxed) == 1);
        if reuse {
            // wp_page_reuse / wp_page_shared: make it writable in place.
            let ptl = pt.pte_lock(slot);
            if pt.load(slot) == old {
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
        // wp_page_copy: a private copy of a file page (or of a shared anonymous page).
        let new = mem
            .alloc_page(self.cpu, Gfp::USER)
            .map_err(self.oom(addr))?;
        mem.arena().copy_page(new, old_pfn);
        self.prep_anon(new, addr);
        let ptl = pt.pte_lock(slot);
        if pt.load(slot) != old {
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
        old_page.mapcount.fetch_sub(1, Ordering::Relaxed);
        let t = if old_page.test(pg::ANON) {
            RssType::Anon
        } else {
            RssType::File
        };
        self.mm.rss.add(self.rss, self.cpu, t, -1);
        self.mm.rss.add(self.rss, self.cpu, RssType::Anon, 1);
        drop(ptl);
        self.k.lru().put_page(self.cpu, old_pfn);
        self.count(VmEvent::FaultCow);
        Ok(())
    }
}
