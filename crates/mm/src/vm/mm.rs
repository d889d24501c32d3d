//! Address spaces (`struct mm_struct`; mm/mmap.c, mm/vma.c, mm/mmap_lock.c).
//!
//! An `Mm` is what a process owns: its VMAs, its page table, its RSS counters and the locks
//! that serialise changes to them. Tasks in threads mode share one `Mm`; tasks in processes
//! mode each have their own, which is the whole difference between will-it-scale's two columns.
//!
//! Locking:
//! - `mmap_lock` (an rwsem whose reader count is one shared cache line) is taken for write by
//!   mmap and munmap, and for read by faults that do not use (or fall back from) per-VMA
//!   locks. With `mm.munmap_downgrade` (4.20+) munmap holds it for write only while it
//!   detaches the VMAs, then downgrades to read for the zap, the TLB flush and the freeing
//!   (see [`Mm::munmap`]).
//! - The VMA tree is published with RCU: readers (faults) look VMAs up without any lock;
//!   writers, holding mmap_lock for write, publish a modified copy.
//! - A writer write-locks each VMA it changes (`vma_start_write`) and `mmap_write_unlock`
//!   releases them all by advancing `mm_lock_seq` (see `vma_lock`).
//! - Page-table pages and entries: see `pgtable`. With `mm.vma_lock = "rcu"` faults hold no
//!   lock munmap waits for, so munmap hands the page tables it unlinks to RCU (`call_rcu`)
//!   instead of freeing them at once (`vma_rcu`).
//!
//! - With `mm.mmap_lock = "range"` (RadixVM, CortenMM) there is no mmap_lock hold and no
//!   per-VMA lock: munmap and MAP_FIXED mmap write-lock the page-table page covering their
//!   range, faults read-lock their PTE table's page (`range_lock`), and the VMAs are kept per
//!   1 GiB shard (one PMD table's span), each shard's array published under its own lock, with
//!   addresses allocated from per-CPU blocks (`vma_shard`): operations on disjoint ranges of
//!   different blocks share no lock and no line.
//!
//! Invariants (`Mm::check`): the tree is sorted and non-overlapping with attached VMAs; every
//! present PTE lies inside a VMA and maps a page whose reference and map counts account for
//! it; the RSS counters (once tasks have synced) equal the present PTEs by type; after every
//! VMA is unmapped only the top-level page-table page remains.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering, fence};

use pagelab_sync::{RcuCell, RcuGuard, RwSem, RwSemReadGuard, RwSemWriteGuard};

use crate::alloc::AllocError;
use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::{PAGE_SIZE, Pfn, pg};
use crate::policy::{MmapLock, TlbShootdown};
use crate::reclaim::swap::SwapEntry;
use crate::vm::filemap::File;
use crate::vm::pgtable::{PMD_SIZE, PageTable, Pte, TASK_SIZE, table_span};
use crate::vm::range_lock::{NodeLock, lock_cover};
use crate::vm::rss::{Rss, RssType};
use crate::vm::tlb::{MmuGather, TlbState};
use crate::vm::vma::{Vma, VmaBacking, VmaTree};
use crate::vm::vma_lock::{MmLockSeq, VmaLockKind};
use crate::vm::vma_shard::{SHARD_SIZE, ShardGuard, ShardRmapGuard, Shards, shard_of};
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
    /// `mm.munmap_downgrade`: munmap zaps under mmap_lock held for read.
    munmap_downgrade: bool,
    /// `mm.tlb_gather`: pages an unmap gathers before it flushes.
    tlb_gather: usize,
    /// What the kernel's `anon_vma` lock does for rmap walks: reclaim holds it for read while
    /// it walks this mm's page table to a page; `free_pgtables` holds it for write, so no
    /// page-table page is freed under a walk. Reclaim never needs `mmap_lock`, so a fault
    /// that reclaims cannot deadlock with a munmap waiting for that fault's VMA lock.
    pub(crate) rmap_lock: RwSem<()>,
    /// The memory cgroup new anonymous pages are charged to (the cgroup of `mm->owner`).
    memcg: AtomicU32,
    /// `mm.mmap_lock = "range"`: operations lock the page-table pages covering their range
    /// (`range_lock`) instead of mmap_lock.
    range: bool,
    /// With range locks, the VMAs per 1 GiB shard and the per-CPU address blocks
    /// (`vma_shard`); `vmas` stays empty.
    shards: Option<Shards>,
    /// With range locks, how many whole-table walkers ([`Mm::rmap_read_all`]) are under way.
    /// A walker read-locks only the shards that exist when it starts; a table free inside one
    /// shard that sees a walker takes the mm-wide lock instead of its shard's (in
    /// `unmap_region`), so a shard created during the walk is covered too. Only
    /// walkers write this line; a free reads it.
    rmap_walkers: AtomicUsize,
}

/// A reclaim walker's hold on the reverse-map locks of one address ([`Mm::rmap_read`]).
pub(crate) struct RmapRead<'a> {
    _mm: RwSemReadGuard<'a, ()>,
    _shard: Option<ShardRmapGuard<'a>>,
}

/// A whole-table walker's hold on every reverse-map lock ([`Mm::rmap_read_all`]).
pub(crate) struct RmapReadAll<'a> {
    _shards: Vec<ShardRmapGuard<'a>>,
    _mm: RwSemReadGuard<'a, ()>,
    walkers: &'a AtomicUsize,
}

impl Drop for RmapReadAll<'_> {
    fn drop(&mut self) {
        self.walkers.fetch_sub(1, Ordering::Release);
    }
}

/// An mmap_lock write hold. Dropping it is `mmap_write_unlock`: it advances `mm_lock_seq`
/// (releasing every VMA write-locked under it) before releasing the rwsem.
pub struct MmapWriteGuard<'a> {
    mm: &'a Mm,
    guard: Option<RwSemWriteGuard<'a, ()>>,
}

impl<'a> MmapWriteGuard<'a> {
    /// `mmap_write_downgrade`: release every VMA write-locked under this hold (advancing
    /// `mm_lock_seq`, as the kernel's `vma_end_write_all` in `mmap_write_downgrade` does) and
    /// turn the write lock into a read lock without letting a writer in between; readers
    /// waiting now are admitted with it. VMAs detached under the write lock stay unlockable
    /// (they are marked detached), so only the VMAs still in the tree become usable again.
    pub fn downgrade(mut self) -> RwSemReadGuard<'a, ()> {
        let g = self
            .guard
            .take()
            .expect("a write guard holds the lock until dropped");
        self.mm.mm_lock_seq.end_write_all();
        self.mm.mmap_lock.downgrade(g)
    }
}

impl Drop for MmapWriteGuard<'_> {
    fn drop(&mut self) {
        // Nothing to do after a downgrade: the VMAs were released then.
        if let Some(g) = self.guard.take() {
            self.mm.mm_lock_seq.end_write_all();
            drop(g);
        }
    }
}

impl Mm {
    pub(crate) fn new(k: Arc<Kernel>, cpu: CpuId) -> Result<Mm, AllocError> {
        let p = k.policy().clone();
        let mut pgtable = PageTable::new(
            k.mem().clone(),
            cpu,
            p.mm.ptl,
            p.locks.spinlock,
            k.split_ptl().cloned(),
        )?;
        let range = p.mm.mmap_lock == MmapLock::Range;
        if range {
            pgtable.set_lockless_install();
        }
        Ok(Mm {
            id: k.next_id(),
            mmap_lock: RwSem::new(()).with_class(&MMAP_LOCK),
            mm_lock_seq: MmLockSeq::new(),
            vmas: RcuCell::new(k.rcu(), VmaTree::new()),
            rmap_lock: RwSem::new(()).with_class(&RMAP_LOCK),
            rmap_walkers: AtomicUsize::new(0),
            memcg: AtomicU32::new(crate::reclaim::memcg::ROOT_MEMCG),
            pgtable,
            rss: Rss::new(p.mm.rss, k.nr_cpus()),
            tlb: TlbState::new(
                k.nr_cpus(),
                p.mm.tlb_shootdown == TlbShootdown::Ipi,
                k.swap().is_some(),
            ),
            vma_lock_kind: k.vma_lock_kind().unwrap_or(VmaLockKind::Refcount),
            munmap_downgrade: p.mm.munmap_downgrade,
            tlb_gather: p.mm.tlb_gather as usize,
            range,
            shards: range
                .then(|| Shards::new(k.rcu(), p.locks.spinlock, k.nr_cpus(), MMAP_MIN, MMAP_TOP)),
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

    /// The VMA tree as published, valid for the read section. With range locks the VMAs are
    /// kept per shard and this tree stays empty: use [`Mm::find_vma`] or [`Mm::vma_list`].
    #[inline]
    pub fn vmas<'a>(&'a self, g: &'a RcuGuard<'_>) -> &'a VmaTree {
        self.vmas.load(g)
    }

    /// Hold off the freeing of the page tables that lead to `addr` (reclaim's rmap walk to a
    /// page mapped there): the mm-wide reverse-map lock for read and, with range locks, the
    /// lock of `addr`'s shard, which a munmap freeing tables inside that shard takes instead.
    pub(crate) fn rmap_read(&self, cpu: CpuId, addr: u64) -> RmapRead<'_> {
        RmapRead {
            _mm: self.rmap_lock.read(),
            _shard: self
                .shards
                .as_ref()
                .filter(|_| addr < TASK_SIZE)
                .map(|s| s.shard(shard_of(addr)).rmap_read(cpu)),
        }
    }

    /// [`Mm::rmap_read`] for a walk of the whole page table: every shard's lock, in order.
    pub(crate) fn rmap_read_all(&self, cpu: CpuId) -> RmapReadAll<'_> {
        // Announce the walk before looking at which shards exist: a table free that missed
        // the announcement (its fence before ours) made its shard visible to the look-up
        // below, and waits on that shard's lock; one that sees it takes the mm-wide lock.
        self.rmap_walkers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let mm = self.rmap_lock.read();
        RmapReadAll {
            _shards: self.shards.as_ref().map_or_else(Vec::new, |s| {
                s.existing_in(0, TASK_SIZE)
                    .map(|i| s.shard(i).rmap_read(cpu))
                    .collect()
            }),
            _mm: mm,
            walkers: &self.rmap_walkers,
        }
    }

    /// The VMA containing `addr`, valid for the read section, wherever this mm keeps it.
    #[inline]
    pub fn find_vma<'a>(&'a self, g: &'a RcuGuard<'_>, addr: u64) -> Option<&'a Arc<Vma>> {
        match &self.shards {
            Some(s) => s.find(g, addr),
            None => self.vmas(g).find(addr),
        }
    }

    /// Every VMA, sorted by address (a snapshot: for checks and tests, not for hot paths).
    pub fn vma_list(&self, g: &RcuGuard<'_>) -> Vec<Arc<Vma>> {
        match &self.shards {
            Some(s) => s.all(g),
            None => self.vmas(g).iter().cloned().collect(),
        }
    }

    /// `mmap_write_lock`.
    pub fn mmap_write_lock(&self) -> MmapWriteGuard<'_> {
        MmapWriteGuard {
            mm: self,
            guard: Some(self.mmap_lock.write()),
        }
    }

    /// Whether range locks (`mm.mmap_lock = "range"`) replace mmap_lock.
    pub fn range_locked(&self) -> bool {
        self.range
    }

    /// Check mmap's arguments: the length rounded up to pages, what the VMA maps, and
    /// whether it is shared.
    fn map_args(len: u64, kind: MapKind) -> Result<(u64, VmaBacking, bool), MmError> {
        if len == 0 {
            return Err(MmError::Invalid("mmap of length 0".into()));
        }
        let len = len.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64;
        if len > MMAP_TOP - MMAP_MIN {
            return Err(MmError::NoSpace(len));
        }
        Ok(match kind {
            MapKind::Anon => (len, VmaBacking::Anon, false),
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
                    len,
                    VmaBacking::File {
                        file,
                        pgoff: offset,
                    },
                    shared,
                )
            }
        })
    }

    /// `do_mmap`: map `len` bytes (rounded up to pages) somewhere free, for the task on `cpu`.
    /// Returns the address.
    ///
    /// With range locks no page-table page is locked: the range is free, so no fault or
    /// operation can be working in it. The address comes from the CPU's own block and the new
    /// VMA is published in its shard under that shard's lock, which also makes the gap search
    /// and the insertion one step (`vma_shard`).
    pub fn mmap(
        &self,
        g: &RcuGuard<'_>,
        cpu: CpuId,
        len: u64,
        writable: bool,
        kind: MapKind,
    ) -> Result<u64, MmError> {
        let (len, backing, shared) = Self::map_args(len, kind)?;
        let new_vma = |start: u64| {
            Arc::new(Vma::new(
                start,
                start + len,
                writable,
                shared,
                backing.clone(),
                self.vma_lock_kind,
            ))
        };
        if let Some(shards) = &self.shards {
            return self.mmap_sharded(g, shards, cpu, len, new_vma);
        }
        let _w = self.mmap_write_lock();
        let tree = self.vmas(g);
        let start = Self::place(tree, len, MMAP_MIN, MMAP_TOP).ok_or(MmError::NoSpace(len))?;
        self.vmas.publish(tree.replaced(&[], vec![new_vma(start)]));
        Ok(start)
    }

    /// Where a mapping of `len` bytes goes in the gaps of `tree` between `bottom` and `top`.
    /// Large mappings are aligned to a page-table span, as THP-aware `get_unmapped_area`
    /// does, so that mappings do not share PTE tables by accident.
    fn place(tree: &VmaTree, len: u64, bottom: u64, top: u64) -> Option<u64> {
        let want = if len >= PMD_SIZE { len + PMD_SIZE } else { len };
        let start = tree.find_gap(want, bottom, top)?;
        Some(if len >= PMD_SIZE {
            (start + PMD_SIZE - 1) & !(PMD_SIZE - 1)
        } else {
            start
        })
    }

    /// [`Mm::mmap`] with range locks: place the mapping in the CPU's block (taking another
    /// block when it has no room), or, if it is larger than a block, in contiguous free
    /// blocks (from the pool of freed ones first, `vma_shard`); publish it in every shard it
    /// intersects.
    fn mmap_sharded(
        &self,
        g: &RcuGuard<'_>,
        shards: &Shards,
        cpu: CpuId,
        len: u64,
        new_vma: impl Fn(u64) -> Arc<Vma>,
    ) -> Result<u64, MmError> {
        let pad = if len >= PMD_SIZE { PMD_SIZE } else { 0 };
        if len + pad <= SHARD_SIZE {
            let mut full = false;
            // A block taken fresh has room unless a MAP_FIXED mapping landed in it first.
            for _ in 0..64 {
                let base = shards.block(g, cpu, full).ok_or(MmError::NoSpace(len))?;
                let guard = shards.shard(shard_of(base)).lock(cpu);
                let tree = guard.tree(g);
                if let Some(start) = Self::place(tree, len, base, base + SHARD_SIZE) {
                    guard.publish(tree.replaced(&[], vec![new_vma(start)]));
                    return Ok(start);
                }
                full = true;
            }
            return Err(MmError::NoSpace(len));
        }
        let n = (len + pad).div_ceil(SHARD_SIZE);
        for _ in 0..64 {
            let base = shards.take(n).ok_or(MmError::NoSpace(len))?;
            let start = (base + pad - 1) & !(pad.max(1) - 1);
            let end = start + len;
            let first = shard_of(base);
            let guards: Vec<ShardGuard<'_>> = (first..first + n as usize)
                .map(|i| shards.shard(i).lock(cpu))
                .collect();
            // The blocks are nobody's: each goes back to the pool when a munmap empties it
            // (one a MAP_FIXED mapping landed in first stays retired until then).
            for s in &guards {
                s.retire();
            }
            // A block another CPU mapped into with MAP_FIXED, or one whose munmap is still
            // freeing its tables, is not free after all: it stays retired (that munmap returns
            // it) and the next run is tried.
            if guards
                .iter()
                .any(|s| !s.tree(g).overlapping(start, end).is_empty() || s.shard_unmapping() > 0)
            {
                for (i, s) in (first..).zip(&guards) {
                    shards.release_if_empty(s, i, s.tree(g));
                }
                continue;
            }
            let vma = new_vma(start);
            for (i, s) in (first..).zip(&guards) {
                if i <= shard_of(end - 1) {
                    s.publish(s.tree(g).replaced(&[], vec![vma.clone()]));
                } else {
                    // Taken for the alignment pad only: free again.
                    shards.release_if_empty(s, i, s.tree(g));
                }
            }
            return Ok(start);
        }
        Err(MmError::NoSpace(len))
    }

    /// `mmap(MAP_FIXED)`: map `len` bytes at `addr`, replacing whatever is mapped there, as
    /// Linux does (`mmap_region` unmaps the overlapped range first: its VMAs are split or
    /// removed, their pages zapped and the TLBs flushed, and the new VMA takes the place).
    /// Returns `addr`.
    ///
    /// With mmap_lock the whole replacement runs under it held for write (no downgrade: the
    /// new VMA must not be published while the old range is still being torn down). With
    /// range locks it runs under the covering page-table page's lock.
    pub fn mmap_fixed(
        &self,
        g: &RcuGuard<'_>,
        cpu: CpuId,
        addr: u64,
        len: u64,
        writable: bool,
        kind: MapKind,
    ) -> Result<u64, MmError> {
        let (len, backing, shared) = Self::map_args(len, kind)?;
        if !addr.is_multiple_of(PAGE_SIZE as u64) {
            return Err(MmError::Invalid(format!(
                "MAP_FIXED mmap at unaligned address {addr:#x}"
            )));
        }
        let end = addr
            .checked_add(len)
            .filter(|&e| addr >= MMAP_MIN && e <= TASK_SIZE)
            .ok_or_else(|| {
                MmError::Invalid(format!(
                    "MAP_FIXED range {addr:#x}+{len:#x} outside {MMAP_MIN:#x}..{TASK_SIZE:#x}"
                ))
            })?;
        let vma = Arc::new(Vma::new(
            addr,
            end,
            writable,
            shared,
            backing,
            self.vma_lock_kind,
        ));
        self.replace_range(g, cpu, addr, end, Some(vma))?;
        Ok(addr)
    }

    /// `do_munmap`: unmap `[addr, addr + len)`, splitting VMAs that straddle the ends. Unmapping
    /// a range with nothing mapped is a no-op, as in the kernel.
    ///
    /// mmap_lock is held for write while the VMAs are write-locked, split and detached. With
    /// `mm.munmap_downgrade` it is then downgraded to read for `unmap_region` (zap, TLB flush,
    /// freeing pages and page tables), as `__do_munmap(.., downgrade)` does from 4.20 (Yang
    /// Shi, "mm: mmap: zap pages with read mmap_sem in munmap") and `do_vmi_align_munmap(..,
    /// unlock)` today: the read hold still keeps mmap and other munmaps (writers) out, which is
    /// what `free_pgtables`' floor/ceiling rule needs, while faults on other VMAs and readers
    /// of the mm proceed. From 5.8 to 6.4 the kernel refused to downgrade when a neighbour of
    /// the range could grow into it (a `VM_GROWSDOWN` next or `VM_GROWSUP` previous VMA,
    /// because stack expansion ran under the read lock); 6.5 moved stack expansion under the
    /// write lock and downgrades always. The engine has no growable stack VMAs, so with the
    /// switch on every munmap that found something to unmap downgrades.
    ///
    /// With range locks (`mm.mmap_lock = "range"`) the covering page-table page is
    /// write-locked instead, for the whole unmap (see [`Mm::replace_range`]).
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
        self.replace_range(g, cpu, addr, end, None)
    }

    /// Unmap `[addr, end)` and, for MAP_FIXED, map `new` there: munmap's and mmap_region's
    /// common part.
    fn replace_range(
        &self,
        g: &RcuGuard<'_>,
        cpu: CpuId,
        addr: u64,
        end: u64,
        new: Option<Arc<Vma>>,
    ) -> Result<(), MmError> {
        if self.range {
            return self.replace_range_locked(g, cpu, addr, end, new);
        }
        let w = self.mmap_write_lock();
        let tree = self.vmas(g);
        let victims: Vec<Arc<Vma>> = tree.overlapping(addr, end).to_vec();
        if victims.is_empty() {
            if let Some(v) = new {
                self.vmas.publish(tree.replaced(&[], vec![v]));
            }
            return Ok(());
        }
        // Write-lock every VMA we change: faults under their per-VMA locks drain, new ones fail.
        for v in &victims {
            v.lock.start_write(&self.mm_lock_seq);
        }
        let (new_tree, lo, hi, floor, ceiling) = self.without(tree, &victims, addr, end);
        self.vmas.publish(new_tree);
        for v in &victims {
            v.lock.mark_detached();
        }
        if let Some(v) = new {
            // MAP_FIXED: tear the old range down under the write lock, then publish the new
            // VMA. A fault that finds the range empty meanwhile falls back to mmap_lock and
            // waits for us.
            self.unmap_region(cpu, lo, hi, floor, ceiling);
            self.vmas.publish(self.vmas(g).replaced(&[], vec![v]));
            drop(w);
        } else if self.munmap_downgrade {
            let _r = w.downgrade();
            self.k
                .mem()
                .events()
                .count(cpu, VmEvent::MunmapDowngrade, 1);
            self.unmap_region(cpu, lo, hi, floor, ceiling);
        } else {
            self.unmap_region(cpu, lo, hi, floor, ceiling);
            drop(w);
        }
        Ok(())
    }

    /// The tree without `victims` (the VMAs overlapping `[addr, end)`), with their remnants
    /// outside the range; the span to zap, and the floor and ceiling for freeing tables.
    fn without(
        &self,
        tree: &VmaTree,
        victims: &[Arc<Vma>],
        addr: u64,
        end: u64,
    ) -> (VmaTree, u64, u64, u64, u64) {
        let mut remnants = Vec::new();
        for v in victims {
            if v.start < addr {
                remnants.push(Arc::new(v.split_copy(v.start, addr, self.vma_lock_kind)));
            }
            if v.end > end {
                remnants.push(Arc::new(v.split_copy(end, v.end, self.vma_lock_kind)));
            }
        }
        let new_tree = tree.replaced(victims, remnants);
        let floor = new_tree.prev_end(addr);
        let ceiling = new_tree.next_start(end, TASK_SIZE);
        let lo = victims[0].start.max(addr);
        let hi = victims[victims.len() - 1].end.min(end);
        (new_tree, lo, hi, floor, ceiling)
    }

    /// [`Mm::replace_range`] under range locks (RadixVM, CortenMM; see `range_lock`).
    ///
    /// 1. Find (installing missing levels) the deepest page-table page whose span contains
    ///    `[addr, end)`, write-lock it with no ancestor write-locked, and wait until the
    ///    tables below it inside the range are idle. Re-walk: if the page was freed by the
    ///    operation we waited for, start again.
    /// 2. Lock the shards of the range in address order (`vma_shard`) and publish each one's
    ///    VMA array without the overlapped VMAs (their remnants stay). A range inside one
    ///    block locks its shard only: no mm-wide line is written.
    /// 3. Zap, flush the TLBs, free the pages and the page tables that the floor/ceiling rule
    ///    allows *within the covering page's span*: nobody else can be using those (a fault
    ///    there waits for our lock and re-validates its walk), while a table above the span
    ///    belongs to our ancestors' lock holders.
    ///
    /// MAP_FIXED publishes the new VMA in step 2. A fault in the range looks its VMA up only
    /// once it holds its PTE table's lock, so it never sees the range half torn down.
    fn replace_range_locked(
        &self,
        g: &RcuGuard<'_>,
        cpu: CpuId,
        addr: u64,
        end: u64,
        new: Option<Arc<Vma>>,
    ) -> Result<(), MmError> {
        let pt = &self.pgtable;
        let (path, _cover) = loop {
            let path = pt.cover_path(cpu, addr, end)?;
            let &(node, level, base) = path.last().expect("the PGD at least");
            // The ancestors' locks, on the stack (a path is four tables at most).
            let mut ancestors: [&NodeLock; 4] = [pt.node_lock(node); 4];
            for (a, &(t, _, _)) in ancestors.iter_mut().zip(&path[..path.len() - 1]) {
                *a = pt.node_lock(t);
            }
            pt.node_lock(node).note_user(cpu.0);
            let ancestors = &ancestors[..path.len() - 1];
            let cover = lock_cover(pt.node_lock(node), ancestors, |drain| {
                pt.for_each_table_below(node, level, base, addr, end, &mut |t| {
                    drain(pt.node_lock(t))
                })
            });
            if pt.cover_path(cpu, addr, end)? == path {
                break (path, cover);
            }
        };
        let &(_, level, base) = path.last().expect("the PGD at least");
        let span_end = base.saturating_add(table_span(level));
        let shards = self.shards.as_ref().expect("range locks keep shards");
        // The shards of the range, in address order (a range inside one PMD table's span
        // has one). Creating them is what lets MAP_FIXED land in a span nobody used yet. A
        // VMA overlapping the range may reach into shards beyond it (it is in each shard it
        // intersects): those are locked too, so that it leaves every one of them and its
        // remnants enter theirs. Nobody else can change the overlapping VMAs meanwhile (they
        // lie under our covering node), so widening once finds the same ones.
        let last = shard_of(end.min(TASK_SIZE) - 1);
        let (mut lo_s, mut hi_s) = (shard_of(addr), last);
        let (guards, mut victims) = loop {
            let guards: Vec<(usize, ShardGuard<'_>)> = if new.is_some() {
                (lo_s..=hi_s)
                    .map(|i| (i, shards.shard(i).lock(cpu)))
                    .collect()
            } else {
                shards
                    .existing_in(lo_s as u64 * SHARD_SIZE, (hi_s as u64 + 1) * SHARD_SIZE)
                    .map(|i| (i, shards.shard(i).lock(cpu)))
                    .collect()
            };
            let mut victims: Vec<Arc<Vma>> = Vec::new();
            for (_, s) in &guards {
                for v in s.tree(g).overlapping(addr, end) {
                    if !victims.iter().any(|x| Arc::ptr_eq(x, v)) {
                        victims.push(v.clone());
                    }
                }
            }
            let need_lo = victims.iter().map(|v| shard_of(v.start)).min();
            let need_hi = victims.iter().map(|v| shard_of(v.end - 1)).max();
            if need_lo.is_none_or(|l| l >= lo_s) && need_hi.is_none_or(|h| h <= hi_s) {
                break (guards, victims);
            }
            lo_s = lo_s.min(need_lo.unwrap_or(lo_s));
            hi_s = hi_s.max(need_hi.unwrap_or(hi_s));
        };
        if victims.is_empty() && new.is_none() {
            return Ok(());
        }
        victims.sort_by_key(|v| v.start);
        let mut remnants = Vec::new();
        for v in &victims {
            if v.start < addr {
                remnants.push(Arc::new(v.split_copy(v.start, addr, self.vma_lock_kind)));
            }
            if v.end > end {
                remnants.push(Arc::new(v.split_copy(end, v.end, self.vma_lock_kind)));
            }
        }
        // The floor and ceiling for freeing tables, within the covering page's span and
        // within the shards at the range's ends: a VMA below the first shard's start (or above
        // the last one's end) is not looked at, so tables reaching past a shard boundary stay
        // (until a munmap there or exit_mmap), which errs on the side of keeping tables.
        let (mut floor, mut ceiling) = (base.max(addr & !(SHARD_SIZE - 1)), span_end);
        ceiling = ceiling.min(((end - 1) | (SHARD_SIZE - 1)).saturating_add(1));
        let touches = |v: &Arc<Vma>, i: usize| shard_of(v.start) <= i && i <= shard_of(v.end - 1);
        // One shard (the common case: a range inside one block) holds every victim, remnant
        // and new VMA: they are used as they are, with no per-shard copies.
        let single = guards.len() == 1;
        // The shards whose VMAs this munmap removes: each stays out of the pool until the
        // tables are freed below, and may go back to it then.
        let mut unmapping: Vec<usize> = Vec::new();
        for (i, s) in &guards {
            let i = *i;
            let tree = s.tree(g);
            let pick = |list: &[Arc<Vma>]| -> Vec<Arc<Vma>> {
                list.iter().filter(|v| touches(v, i)).cloned().collect()
            };
            let (mine, mut add) = if single {
                (Cow::Borrowed(&victims[..]), std::mem::take(&mut remnants))
            } else {
                (Cow::Owned(pick(&victims)), pick(&remnants))
            };
            // The floor and ceiling as the shard will be without the victims: the victims
            // overlap the range, so the tree's own neighbours of the range are the others',
            // unless a remnant now ends at the range's start (or begins at its end).
            if i == shard_of(addr) {
                let left = add.iter().any(|r| r.end == addr);
                floor = floor.max(if left { addr } else { tree.prev_end(addr) });
            }
            if i == last {
                let right = add.iter().any(|r| r.start == end);
                ceiling = ceiling.min(if right {
                    end
                } else {
                    tree.next_start(end, TASK_SIZE)
                });
            }
            // MAP_FIXED publishes the new VMA in the same step (one new array, as for a
            // munmap), so that no mmap can place another one in the hole meanwhile; faults in
            // it wait for our lock. The floor and ceiling ignore it: its tables may go too, as
            // nobody can have reached them.
            let adds = new.as_ref().filter(|v| touches(v, i));
            if mine.is_empty() && adds.is_none() {
                continue;
            }
            add.extend(adds.cloned());
            let after = tree.replaced(&mine, add);
            s.publish(after);
            if !mine.is_empty() {
                s.begin_unmap();
                unmapping.push(i);
            }
        }
        drop(guards);
        if victims.is_empty() {
            return Ok(());
        }
        for v in &victims {
            v.lock.mark_detached();
        }
        let lo = victims[0].start.max(addr);
        let hi = victims[victims.len() - 1].end.min(end);
        self.unmap_region(cpu, lo, hi, floor, ceiling);
        // The span's pages and tables are gone: a retired block this unmap emptied goes back
        // to the pool (`vma_shard`), unless another munmap is still freeing tables in it.
        for i in unmapping {
            let s = shards.shard(i).lock(cpu);
            s.end_unmap();
            shards.release_if_empty(&s, i, s.tree(g));
        }
        Ok(())
    }

    /// `unmap_region`: zap the PTEs of `[start, end)` one page table at a time, flush the TLBs
    /// and free the pages whenever the gather is full (checked at each table's end, where the
    /// kernel checks after each page: at most a table's 511 pages later) and at the end, then
    /// free the page tables nobody else can use.
    fn unmap_region(&self, cpu: CpuId, start: u64, end: u64, floor: u64, ceiling: u64) {
        let mut gather = MmuGather::new(self.tlb_gather);
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
        // With range locks, a munmap that can free no page table (no 2 MiB block of its range
        // lies in the gap between its neighbours) leaves the mm-wide reverse-map lock alone:
        // otherwise every small munmap would write that one line. A larger table's span
        // contains a 2 MiB block, so none of those can be freed either.
        if self.range {
            let block = (floor.div_ceil(PMD_SIZE) * PMD_SIZE).max(start & !(PMD_SIZE - 1));
            if block >= end || block + PMD_SIZE > ceiling {
                return;
            }
        }
        // With range locks, tables freed inside one shard's span (floor and ceiling stop at
        // the shards of the range's ends, see `replace_range_locked`) exclude only the walkers
        // of that shard, through its own reverse-map lock; a range over several shards takes
        // the mm-wide one, which every walker holds for read too.
        // A whole-table walk under way may not hold this shard's lock (the shard may be newer
        // than its start): then the mm-wide lock, which it holds for read, is taken instead.
        let shard_rmap = self.shards.as_ref().and_then(|s| {
            let (a, b) = (shard_of(floor), shard_of(ceiling.min(TASK_SIZE) - 1));
            if a != b {
                return None;
            }
            let shard = s.shard(a);
            fence(Ordering::SeqCst);
            if self.rmap_walkers.load(Ordering::Relaxed) > 0 {
                return None;
            }
            let g = shard.rmap_write(cpu);
            // A walker that started meanwhile either saw this shard (and waits for `g`) or
            // announced itself before our fence; then step aside for the mm-wide lock (taking
            // it while holding `g` could deadlock with that walker).
            fence(Ordering::SeqCst);
            (self.rmap_walkers.load(Ordering::Relaxed) == 0).then_some(g)
        });
        let _rmap = shard_rmap.is_none().then(|| self.rmap_lock.write());
        if self.vma_lock_kind == VmaLockKind::Rcu {
            // Lock-free faults may still be walking these tables (they hold no lock munmap
            // waits for): free them after a grace period, as Bonsai does.
            let tables = self
                .pgtable
                .unlink_pgtables(cpu, start, end, floor, ceiling);
            if !tables.is_empty() {
                self.k.rcu().call_rcu(Box::new(tables));
            }
        } else {
            self.pgtable.free_pgtables(cpu, start, end, floor, ceiling);
        }
    }

    /// `zap_pte_range` for one page table's span: clear the PTEs, drop the rmap and RSS
    /// accounting, and queue the pages.
    fn zap_range(&self, cpu: CpuId, start: u64, end: u64, gather: &mut MmuGather) {
        let mem = self.k.mem();
        let (mut anon, mut file) = (0i64, 0i64);
        let mut swapped = Vec::new();
        self.pgtable.zap_range(cpu, start, end, |_, pte: Pte| {
            if !pte.present() {
                if let Some(e) = SwapEntry::from_pte(pte) {
                    swapped.push(e);
                }
                return;
            }
            let pfn = pte.pfn();
            // The zero page: nothing to drop (`vm_normal_page` returns no page for it).
            if self.k.is_zero_pfn(pfn) {
                return;
            }
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

    /// `tlb_flush_mmu`: shoot down the other CPUs' TLBs, then free the gathered pages one
    /// gather batch at a time (`free_pages_and_swap_cache` per batch of
    /// [`MAX_GATHER_BATCH`](crate::vm::tlb::MAX_GATHER_BATCH)).
    fn tlb_flush_mmu(&self, cpu: CpuId, gather: &mut MmuGather) {
        if gather.pages.is_empty() {
            return;
        }
        self.tlb.shootdown(cpu, self.k.mem().events());
        self.k
            .mem()
            .events()
            .count(cpu, VmEvent::UnmapPages, gather.pages.len() as u64);
        for batch in gather.pages.chunks(crate::vm::tlb::MAX_GATHER_BATCH) {
            self.k.lru().release_pages(cpu, batch);
        }
        gather.pages.clear();
    }

    /// `exit_mmap`: unmap everything and free the page tables. Called when the last task
    /// leaves; `cpu` is where the teardown runs.
    pub fn exit_mmap(&self, g: &RcuGuard<'_>, cpu: CpuId) {
        let _ = self.munmap(g, cpu, 0, TASK_SIZE);
        if self.range {
            // The upper-level tables earlier munmaps left (see `check`); no task is left to
            // walk them.
            let _rmap = self.rmap_lock.write();
            self.pgtable.free_pgtables(cpu, 0, TASK_SIZE, 0, TASK_SIZE);
        }
    }

    /// Check the address space's invariants. Call while no task runs in it. `rss_synced` says
    /// whether every task has folded its RSS deltas (per-thread policy). Returns present PTEs
    /// `(anon, file)`.
    pub fn check(&self, rss_synced: bool) -> Result<(u64, u64), String> {
        let reader = pagelab_sync::RcuDomain::register(self.k.rcu()).map_err(|e| e.to_string())?;
        let g = reader.lock();
        if let Some(s) = &self.shards {
            s.check(&g)?;
        }
        let list = self.vma_list(&g);
        let mut prev_end = 0;
        for v in &list {
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
            let Some(v) = self.find_vma(&g, addr) else {
                err = Some(format!("PTE at {addr:#x} outside every VMA"));
                return;
            };
            let pfn: Pfn = pte.pfn();
            if self.k.is_zero_pfn(pfn) {
                // Mapped read-only, never counted, never referenced.
                if pte.writable() {
                    err = Some(format!("zero page mapped writable at {addr:#x}"));
                }
                return;
            }
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
        // With range locks a munmap frees only the tables inside its covering page's span,
        // so the upper levels above an unmapped range stay until exit_mmap.
        if list.is_empty() && !self.range && self.pgtable.nr_tables() != 1 {
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::alloc::MemConfig;
    use crate::policy::Policy;

    /// Runs a munmap on CPU 0 whose TLB flush waits for CPU 1 (a task in user mode that does
    /// not acknowledge), and reports whether mmap_lock could be read-locked meanwhile, i.e.
    /// during the zap, after the VMAs were detached.
    fn reader_gets_in_during_zap(downgrade: bool) -> (bool, u64) {
        let mut p = Policy::default();
        p.mm.munmap_downgrade = downgrade;
        p.mm.tlb_shootdown = TlbShootdown::Ipi;
        let k = Kernel::new(&MemConfig::new(16 << 20, 2), &p).unwrap();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let _other = k.new_task(mm.clone(), CpuId(1));
        let (k2, mm2) = (k.clone(), mm.clone());
        let unmapper = std::thread::spawn(move || {
            let t = k2.new_task(mm2, CpuId(0));
            let a = t.mmap(4 * PAGE_SIZE as u64, true, MapKind::Anon).unwrap();
            t.store(a, 7).unwrap();
            t.munmap(a, 4 * PAGE_SIZE as u64).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !mm.tlb.pending(CpuId(1)) {
            assert!(Instant::now() < deadline, "the munmap never flushed");
            std::thread::yield_now();
        }
        let got = mm.mmap_lock.try_read().is_some();
        // The VMA is already gone from the tree, and a writer is still kept out.
        let reader = pagelab_sync::RcuDomain::register(k.rcu()).unwrap();
        assert!(mm.vmas(&reader.lock()).is_empty());
        drop(reader);
        assert!(mm.mmap_lock.try_write().is_none());
        while !unmapper.is_finished() {
            mm.tlb.ack(CpuId(1));
            std::thread::yield_now();
        }
        unmapper.join().unwrap();
        (got, k.mem().events().sum(VmEvent::MunmapDowngrade))
    }

    /// TLB flushes a munmap of `pages` faulted pages makes with a gather of `gather` pages,
    /// counted from the trace the flush records (one event per `flush_tlb_mm_range`).
    fn flushes_of_a_munmap(gather: u32, pages: u64) -> usize {
        let mut p = Policy::default();
        p.mm.tlb_gather = gather;
        p.mm.tlb_shootdown = TlbShootdown::Ipi;
        let k = Kernel::new(&MemConfig::new(64 << 20, 1), &p).unwrap();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t = k.new_task(mm, CpuId(0));
        let len = pages * PAGE_SIZE as u64;
        let a = t.mmap(len, true, MapKind::Anon).unwrap();
        for i in 0..pages {
            t.store(a + i * PAGE_SIZE as u64, 1).unwrap();
        }
        pagelab_sync::trace::start(1 << 16);
        t.munmap(a, len).unwrap();
        let events = pagelab_sync::trace::stop();
        events
            .iter()
            .filter(|e| e.kind == pagelab_sync::trace::Kind::TlbFlush)
            .count()
    }

    /// The gather holds what `mm.tlb_gather` says before it flushes: the chained generic
    /// gather flushes a 2048-page munmap once; one of 512 pages (about `MAX_GATHER_BATCH`,
    /// what the engine flushed at before) once per PTE table, 4 times.
    #[test]
    fn a_munmap_flushes_once_per_gather_full_of_pages() {
        assert_eq!(
            flushes_of_a_munmap(crate::policy::MmPolicy::GENERIC_TLB_GATHER, 2048),
            1
        );
        assert_eq!(flushes_of_a_munmap(512, 2048), 4);
        assert_eq!(flushes_of_a_munmap(2048, 2048), 1);
        // Not a multiple of a table: full after the second table, aligned or not.
        assert_eq!(flushes_of_a_munmap(1000, 2048), 2);
    }

    #[test]
    fn munmap_downgrade_admits_readers_during_the_zap() {
        assert_eq!(reader_gets_in_during_zap(true), (true, 1));
    }

    #[test]
    fn munmap_without_downgrade_keeps_readers_out_until_done() {
        assert_eq!(reader_gets_in_during_zap(false), (false, 0));
    }

    fn events(k: &Kernel, e: VmEvent) -> u64 {
        k.mem().events().sum(e)
    }

    /// File faults stay under the VMA lock only from 6.7 ("all"); before, each one is an
    /// abort counted with its reason, and so is 6.4's first fault of an anonymous VMA that
    /// has no anon_vma yet.
    #[test]
    fn vma_lock_coverage_decides_which_faults_fall_back() {
        use crate::policy::{VmaLock, VmaLockFaults};
        for cover in [
            VmaLockFaults::Anon,
            VmaLockFaults::AnonSwap,
            VmaLockFaults::All,
        ] {
            let mut p = Policy::default();
            p.mm.vma_lock = VmaLock::Rwsem;
            p.mm.vma_lock_faults = cover;
            let k = Kernel::new(&MemConfig::new(16 << 20, 1), &p).unwrap();
            let mm = k.new_mm(CpuId(0)).unwrap();
            let t = k.new_task(mm.clone(), CpuId(0));
            let file = k.create_file(8);
            let f = t
                .mmap(
                    8 * PAGE_SIZE as u64,
                    true,
                    MapKind::File {
                        file,
                        offset: 0,
                        shared: true,
                    },
                )
                .unwrap();
            let a = t.mmap(8 * PAGE_SIZE as u64, true, MapKind::Anon).unwrap();
            for i in 0..4 {
                t.load(f + i * 2 * PAGE_SIZE as u64).unwrap();
                t.store(a + i * PAGE_SIZE as u64, i).unwrap();
            }
            let file_fallbacks = events(&k, VmEvent::VmaLockFallbackFile);
            let anon_vma = events(&k, VmEvent::VmaLockFallbackAnonVma);
            assert_eq!(anon_vma, 1, "{cover:?}: the first anonymous fault");
            let want_file = if cover.file() { 0 } else { 4 };
            assert_eq!(file_fallbacks, want_file, "{cover:?}");
            assert_eq!(
                events(&k, VmEvent::VmaLockAbort),
                file_fallbacks + anon_vma,
                "{cover:?}: every fallback is also an abort"
            );
            assert_eq!(
                events(&k, VmEvent::VmaLockSuccess),
                8 - file_fallbacks - anon_vma,
                "{cover:?}"
            );
            t.munmap(f, 8 * PAGE_SIZE as u64).unwrap();
            t.munmap(a, 8 * PAGE_SIZE as u64).unwrap();
        }
    }

    /// 6.4 and 6.5 retried every swap-in under mmap_lock; 6.6 handled them under the VMA lock.
    #[test]
    fn swap_ins_fall_back_only_before_anon_swap_coverage() {
        use crate::policy::{VmaLock, VmaLockFaults};
        use crate::reclaim::swap::{Backing, SwapConfig};
        for cover in [VmaLockFaults::Anon, VmaLockFaults::AnonSwap] {
            let mut p = Policy::default();
            p.mm.vma_lock = VmaLock::Refcount;
            p.mm.vma_lock_faults = cover;
            let cfg = MemConfig::new(32 << 20, 1).with_memcgs(2);
            let swap = SwapConfig::new(4096, Backing::Memory { compress: false }, 1);
            let k = Kernel::with_swap(&cfg, &p, Some(swap)).unwrap();
            k.stop_kswapd();
            k.mem().memcgs().set_max(1, 256).unwrap();
            let mm = k.new_mm(CpuId(0)).unwrap();
            mm.set_memcg(1).unwrap();
            let t = k.new_task(mm.clone(), CpuId(0));
            let pages = 1024u64;
            let a = t
                .mmap(pages * PAGE_SIZE as u64, true, MapKind::Anon)
                .unwrap();
            for i in 0..pages {
                t.store(a + i * PAGE_SIZE as u64, i + 1).unwrap();
            }
            for i in 0..pages {
                assert_eq!(t.load(a + i * PAGE_SIZE as u64).unwrap(), i + 1);
            }
            let swapins = events(&k, VmEvent::FaultSwap);
            assert!(swapins > 0, "{cover:?}: nothing was swapped in");
            let fell_back = events(&k, VmEvent::VmaLockFallbackSwap);
            if cover.swap() {
                assert_eq!(fell_back, 0, "{cover:?}");
            } else {
                assert_eq!(fell_back, swapins, "{cover:?}: every swap-in retried");
                assert!(events(&k, VmEvent::VmaLockRetry) >= fell_back);
            }
            t.munmap(a, pages * PAGE_SIZE as u64).unwrap();
        }
    }

    /// Two threads fault neighbouring pages of one PTE table: its split lock is shared per mm,
    /// and traces record its acquisitions and releases under the shared class. A table only
    /// one thread faults stays private and records nothing. A table installed afresh at the
    /// same place (after munmap) starts private again.
    #[test]
    fn pte_lock_scope_follows_the_cpus_that_take_it() {
        use crate::vm::pgtable::PTE_PTL_SHARED;
        use pagelab_sync::Scope;
        use pagelab_sync::trace::{self, Kind};

        let k = Kernel::new(&MemConfig::new(32 << 20, 2), &Policy::default()).unwrap();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t0 = k.new_task(mm.clone(), CpuId(0));
        let t1 = k.new_task(mm.clone(), CpuId(1));
        let page = PAGE_SIZE as u64;
        let len = 2 * PMD_SIZE;
        let a = t0.mmap(len, true, MapKind::Anon).unwrap();
        assert!(a.is_multiple_of(PMD_SIZE));
        let (shared, private) = (a, a + PMD_SIZE);
        let scope = |addr: u64| mm.pgtable.pte_lock_scope(mm.pgtable.walk(addr).unwrap());
        for i in 0..4 {
            t0.store(shared + i * page, i).unwrap();
            t0.store(private + i * page, i).unwrap();
        }
        assert_eq!(scope(shared), Scope::Private, "one CPU so far");
        assert_eq!(scope(private), Scope::Private);

        trace::start(1024);
        for i in 4..8 {
            t1.store(shared + i * page, i).unwrap();
        }
        let in_shared = trace::stop();
        trace::start(1024);
        for i in 4..8 {
            t0.store(private + i * page, i).unwrap();
        }
        let in_private = trace::stop();
        assert_eq!(scope(shared), Scope::Mm, "two CPUs took its lock");
        assert_eq!(scope(private), Scope::Private);
        let ptl = |evs: &[trace::Event], acquire: bool| {
            evs.iter()
                .filter(|e| std::ptr::eq(e.class, &PTE_PTL_SHARED))
                .filter(|e| matches!(e.kind, Kind::Acquire { .. }) == acquire)
                .count()
        };
        // The second CPU's first fault marks the table shared as it takes the lock.
        assert_eq!(ptl(&in_shared, true), 4, "{in_shared:?}");
        assert_eq!(ptl(&in_shared, false), 4);
        assert_eq!(ptl(&in_private, true) + ptl(&in_private, false), 0);

        // CPU 1 stops running the mm, so the munmaps' TLB flushes do not wait for it.
        t1.idle();
        t0.munmap(a, len).unwrap();
        let b = t0.mmap(len, true, MapKind::Anon).unwrap();
        t0.store(b, 1).unwrap();
        assert_eq!(
            mm.pgtable.pte_lock_scope(mm.pgtable.walk(b).unwrap()),
            Scope::Private,
            "a new table forgets the old one's users"
        );
        t0.munmap(b, len).unwrap();
    }

    fn range_kernel(cpus: usize) -> Arc<Kernel> {
        let mut p = Policy::default();
        p.mm.mmap_lock = MmapLock::Range;
        p.mm.vma_lock = crate::policy::VmaLock::None;
        Kernel::new(&MemConfig::new(32 << 20, cpus), &p).unwrap()
    }

    /// With range locks, an operation waits only for the page-table page covering its range:
    /// while another party holds the PTE table of one mapping for write, a munmap and a fault
    /// in a mapping of another PTE table complete, even with mmap_lock held for write; a
    /// munmap of the held range waits until the holder lets go.
    #[test]
    fn range_locked_operations_on_other_tables_do_not_wait() {
        let k = range_kernel(2);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t0 = k.new_task(mm.clone(), CpuId(0));
        let (a, b) = (
            t0.mmap(PMD_SIZE, true, MapKind::Anon).unwrap(),
            t0.mmap(PMD_SIZE, true, MapKind::Anon).unwrap(),
        );
        t0.store(a, 1).unwrap();
        t0.store(b, 2).unwrap();
        t0.idle();
        let held = mm.pgtable.walk_path(a).unwrap()[3];
        let traced = mm.pgtable.node_lock(held).write_lock();
        // Held too: a range-locked operation that took it would wait here.
        let mmap_lock = mm.mmap_lock.write();
        let (k2, mm2) = (k.clone(), mm.clone());
        let other = std::thread::spawn(move || {
            let t = k2.new_task(mm2, CpuId(1));
            t.store(b + PAGE_SIZE as u64, 3).unwrap();
            t.munmap(b, PMD_SIZE).unwrap();
            let blocked = t.munmap(a, PAGE_SIZE as u64);
            (t, blocked)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = pagelab_sync::RcuDomain::register(k.rcu()).unwrap();
            if mm.find_vma(&r.lock(), b).is_none() {
                break;
            }
            drop(r);
            assert!(
                Instant::now() < deadline,
                "the fault and munmap of the other table waited"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !other.is_finished(),
            "a munmap of the held range went ahead"
        );
        mm.pgtable.node_lock(held).write_unlock(traced);
        let (t1, blocked) = other.join().unwrap();
        blocked.unwrap();
        drop(mmap_lock);
        t1.idle();
        t0.resume();
        assert_eq!(t0.load(a + PAGE_SIZE as u64).unwrap(), 0);
        assert!(t0.load(a).is_err(), "the unmapped page is still mapped");
        t0.munmap(a, PMD_SIZE).unwrap();
        mm.check(false).unwrap();
    }

    /// With range locks, a munmap inside a page table that stays in use does not take the
    /// reverse-map lock (it frees no table), so it completes while reclaim (here: the test)
    /// holds that lock for read; a munmap that empties the table waits for it.
    #[test]
    fn range_locked_munmap_freeing_no_table_skips_the_rmap_lock() {
        let k = range_kernel(2);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t0 = k.new_task(mm.clone(), CpuId(0));
        let a = t0.mmap(PMD_SIZE, true, MapKind::Anon).unwrap();
        for i in 0..4 {
            t0.store(a + i * PAGE_SIZE as u64, i + 1).unwrap();
        }
        t0.idle();
        let rmap = mm.rmap_lock.read();
        let (k2, mm2) = (k.clone(), mm.clone());
        let other = std::thread::spawn(move || {
            let t = k2.new_task(mm2, CpuId(1));
            t.munmap(a + PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
            t.idle();
            t
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !other.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a munmap that frees no table waited for the rmap lock"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let _t1 = other.join().unwrap();
        drop(rmap);
        t0.resume();
        assert_eq!(t0.load(a).unwrap(), 1);
        t0.munmap(a, PMD_SIZE).unwrap();
        mm.check(false).unwrap();
    }

    /// munmap's zap takes the PTE lock of every table it clears: a zap on another CPU than
    /// the one that faulted the table is a second taker, and the lock is shared from then on,
    /// as its cache line has moved between the two CPUs.
    #[test]
    fn a_zap_by_another_cpu_marks_the_pte_lock_shared() {
        use pagelab_sync::Scope;

        let k = Kernel::new(&MemConfig::new(32 << 20, 2), &Policy::default()).unwrap();
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t0 = k.new_task(mm.clone(), CpuId(0));
        let t1 = k.new_task(mm.clone(), CpuId(1));
        // One thread plays both CPUs: the one not working stops running the mm, so that the
        // other's TLB flushes do not wait for it.
        t1.idle();
        let page = PAGE_SIZE as u64;
        let a = t0.mmap(PMD_SIZE, true, MapKind::Anon).unwrap();
        assert!(
            a.is_multiple_of(PMD_SIZE),
            "one PTE table spans the mapping"
        );
        for i in 0..8 {
            t0.store(a + i * page, i).unwrap();
        }
        let scope = || mm.pgtable.pte_lock_scope(mm.pgtable.walk(a).unwrap());
        assert_eq!(scope(), Scope::Private, "one CPU faulted it");
        // A zap on CPU 0 itself changes nothing.
        t0.munmap(a + 6 * page, page).unwrap();
        assert_eq!(scope(), Scope::Private, "the faulting CPU zapped");
        // CPU 1 unmaps the upper half; the lower half keeps the table alive.
        t0.idle();
        t1.resume();
        t1.munmap(a + PMD_SIZE / 2, PMD_SIZE / 2).unwrap();
        assert_eq!(scope(), Scope::Mm, "CPU 1's zap took the lock too");
        t1.idle();
        t0.resume();
        t0.munmap(a, PMD_SIZE / 2).unwrap();
    }
}

#[cfg(test)]
mod shard_tests {
    use std::collections::BTreeSet;

    use pagelab_sync::Scope;
    use pagelab_sync::trace::{self, Kind};

    use super::*;
    use crate::alloc::MemConfig;
    use crate::policy::{Policy, VmaLock};

    fn range_kernel(cpus: usize) -> Arc<Kernel> {
        let mut p = Policy::default();
        p.mm.mmap_lock = MmapLock::Range;
        p.mm.vma_lock = VmaLock::None;
        Kernel::new(&MemConfig::new(64 << 20, cpus), &p).unwrap()
    }

    /// A whole-table walk (MGLRU's `walk_mm`) holds the reverse-map locks of the shards that
    /// existed when it began. A munmap that frees a table in a shard created after that must
    /// not go ahead under its shard's lock alone (the walker may be inside that table): it
    /// waits for the walk. The walk never ends here before the munmap would have finished, so
    /// a free that went ahead is seen.
    #[test]
    fn a_table_free_in_a_shard_newer_than_a_whole_table_walk_waits_for_it() {
        use std::sync::atomic::AtomicBool;
        let k = range_kernel(2);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let page = PAGE_SIZE as u64;
        let walk = mm.rmap_read_all(CpuId(0));
        let done = Arc::new(AtomicBool::new(false));
        let t = k.new_task(mm.clone(), CpuId(1));
        let d = done.clone();
        let h = std::thread::spawn(move || {
            let a = t.mmap(8 * page, true, MapKind::Anon).unwrap();
            t.store(a, 1).unwrap();
            t.munmap(a, 8 * page).unwrap();
            d.store(true, Ordering::SeqCst);
            t.idle();
            t
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let early = done.load(Ordering::SeqCst);
        drop(walk);
        let t = h.join().unwrap();
        assert!(!early, "the table free went ahead of the walk");
        assert!(done.load(Ordering::SeqCst));
        drop(t);
    }

    /// RadixVM's mapbench on two CPUs: each task maps, touches and unmaps its own region in a
    /// loop. With range locks their mmaps place the region in their CPUs' own blocks and
    /// publish it in their own shards, and their munmaps lock their own tables and shards and
    /// free the emptied table under their shard's reverse-map lock, so the traces record no
    /// address-space lock either shares (before the shards, every mmap and munmap took the
    /// mm-wide `vma_tree_lock`, and every munmap that freed a table the mm-wide `rmap_lock`).
    /// Returns the shared classes recorded and each task's first region.
    fn mapbench_shared_locks(cpus: u16) -> (BTreeSet<&'static str>, Vec<u64>) {
        let k = range_kernel(cpus as usize);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let page = PAGE_SIZE as u64;
        let runs: Vec<_> = (0..cpus)
            .map(|c| {
                let t = k.new_task(mm.clone(), CpuId(c));
                std::thread::spawn(move || {
                    trace::start(1 << 16);
                    let mut addrs = Vec::new();
                    for _ in 0..20 {
                        let a = t.mmap(8 * page, true, MapKind::Anon).unwrap();
                        for i in 0..8 {
                            t.store(a + i * page, i).unwrap();
                        }
                        t.munmap(a, 8 * page).unwrap();
                        addrs.push(a);
                    }
                    let ev = trace::stop();
                    t.idle();
                    (ev, addrs, t)
                })
            })
            .collect();
        let mut shared = BTreeSet::new();
        let mut firsts = Vec::new();
        let mut tasks = Vec::new();
        for r in runs {
            let (ev, addrs, t) = r.join().unwrap();
            for e in ev {
                // The address space's locks: per mm or per VMA (the page allocator's and
                // the LRU's are another matter).
                let mm_wide = matches!(e.class.scope, Scope::Mm | Scope::Vma);
                if matches!(e.kind, Kind::Acquire { .. }) && mm_wide {
                    shared.insert(e.class.name);
                }
            }
            firsts.push(addrs[0]);
            tasks.push(t);
        }
        mm.check(false).unwrap();
        (shared, firsts)
    }

    /// A mapping larger than a 1 GiB shard is in every shard it crosses; unmapping a page in
    /// its middle shard takes it out of all of them and puts its two remnants in theirs (before,
    /// only the shards of the unmapped range were updated: the others kept the detached VMA,
    /// which `check` refuses and whose second detach at exit never finished).
    #[test]
    fn a_munmap_inside_a_mapping_over_several_shards_updates_all_of_them() {
        use crate::vm::vma_shard::SHARD_SIZE;
        let k = range_kernel(1);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let t = k.new_task(mm.clone(), CpuId(0));
        let page = PAGE_SIZE as u64;
        let len = 2 * SHARD_SIZE + SHARD_SIZE / 2;
        let a = t.mmap(len, true, MapKind::Anon).unwrap();
        let mid = (a / SHARD_SIZE + 1) * SHARD_SIZE + SHARD_SIZE / 2;
        t.store(a, 1).unwrap();
        t.store(a + len - page, 2).unwrap();
        t.munmap(mid, page).unwrap();
        mm.check(false).unwrap();
        let r = pagelab_sync::RcuDomain::register(k.rcu()).unwrap();
        let g = r.lock();
        let list = mm.vma_list(&g);
        let spans: Vec<(u64, u64)> = list.iter().map(|v| (v.start, v.end)).collect();
        assert_eq!(spans, vec![(a, mid), (mid + page, a + len)]);
        assert!(mm.find_vma(&g, mid).is_none());
        assert_eq!(mm.find_vma(&g, a).unwrap().end, mid);
        assert_eq!(mm.find_vma(&g, a + len - page).unwrap().start, mid + page);
        drop(g);
        drop(r);
        assert_eq!(t.load(a).unwrap(), 1);
        assert_eq!(t.load(a + len - page).unwrap(), 2);
        t.munmap(a, len).unwrap();
        mm.check(false).unwrap();
    }

    /// Freed address blocks are reused (CortenMM and RadixVM reuse freed ranges): two CPUs
    /// each map a mapping larger than a block (two blocks) and two of 600 MiB (the second
    /// does not fit in the block the first took, so the CPU moves on), touch them and unmap
    /// them all, over and over. Every block left empty goes back to the pool and is taken
    /// again, so the loop keeps to a few blocks. Before, each round used up three fresh
    /// blocks per CPU, and a long enough loop ran out of address space.
    #[test]
    fn freed_address_blocks_are_reused() {
        use crate::vm::vma_shard::{SHARD_SHIFT, SHARD_SIZE};
        const ROUNDS: usize = 60;
        let k = range_kernel(2);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let page = PAGE_SIZE as u64;
        let runs: Vec<_> = (0..2)
            .map(|c| {
                let t = k.new_task(mm.clone(), CpuId(c));
                std::thread::spawn(move || {
                    let mut blocks = BTreeSet::new();
                    for _ in 0..ROUNDS {
                        let big = SHARD_SIZE + page;
                        let mid = 600 << 20;
                        let maps = [
                            (t.mmap(big, true, MapKind::Anon).unwrap(), big),
                            (t.mmap(mid, true, MapKind::Anon).unwrap(), mid),
                            (t.mmap(mid, true, MapKind::Anon).unwrap(), mid),
                        ];
                        for &(a, len) in &maps {
                            t.store(a, 1).unwrap();
                            t.store(a + len - page, 2).unwrap();
                            blocks.insert(a >> SHARD_SHIFT);
                            blocks.insert((a + len - 1) >> SHARD_SHIFT);
                        }
                        for (a, len) in maps {
                            t.munmap(a, len).unwrap();
                        }
                    }
                    t.idle();
                    (blocks, t)
                })
            })
            .collect();
        let mut all = BTreeSet::new();
        let mut tasks = Vec::new();
        for r in runs {
            let (b, t) = r.join().unwrap();
            all.extend(b);
            tasks.push(t);
        }
        mm.check(false).unwrap();
        assert!(
            all.len() <= 16,
            "{} blocks used by {ROUNDS} rounds on 2 CPUs",
            all.len()
        );
    }

    /// A block's CPU moves on while another CPU unmaps what it mapped there: the retirement
    /// and the munmap that empties the block agree (under the shard's lock) on who returns
    /// it, so it goes back to the pool exactly once and the pool holds exactly the free
    /// blocks (`Mm::check`), however they interleave.
    #[test]
    fn a_block_retired_while_another_cpu_empties_it_is_pooled_once() {
        use std::sync::mpsc;
        let k = range_kernel(2);
        let mm = k.new_mm(CpuId(0)).unwrap();
        let mid: u64 = 600 << 20;
        let (tx, rx) = mpsc::channel::<u64>();
        let mapper = k.new_task(mm.clone(), CpuId(0));
        let unmapper = k.new_task(mm.clone(), CpuId(1));
        let m = std::thread::spawn(move || {
            for _ in 0..200 {
                // Every second mapping does not fit the block the one before took.
                let a = mapper.mmap(mid, true, MapKind::Anon).unwrap();
                mapper.store(a, 1).unwrap();
                tx.send(a).unwrap();
            }
            mapper.idle();
            mapper
        });
        let u = std::thread::spawn(move || {
            for a in rx {
                unmapper.munmap(a, mid).unwrap();
            }
            unmapper.idle();
            unmapper
        });
        let (_m, _u) = (m.join().unwrap(), u.join().unwrap());
        mm.check(false).unwrap();
        assert!(
            mm.vma_list(&pagelab_sync::RcuDomain::register(k.rcu()).unwrap().lock())
                .is_empty()
        );
    }

    #[test]
    fn range_locked_mapbench_tasks_share_no_lock() {
        let (shared, regions) = mapbench_shared_locks(2);
        assert!(shared.is_empty(), "shared locks taken: {shared:?}");
        assert_ne!(
            regions[0] >> crate::vm::vma_shard::SHARD_SHIFT,
            regions[1] >> crate::vm::vma_shard::SHARD_SHIFT,
            "the two CPUs' regions are in one block"
        );
    }
}
