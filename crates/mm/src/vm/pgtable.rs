//! Page tables: four levels of 512-entry tables in arena frames, walked by a software MMU.
//!
//! # What this models
//!
//! An x86-64 address space with 48-bit virtual addresses and 4 KiB pages: a PGD (bits 39-47)
//! points to PUD tables (bits 30-38), which point to PMD tables (bits 21-29), which point to PTE
//! tables (bits 12-20). Every table is one 4 KiB frame taken from the page allocator
//! ([`Mem::alloc_page`], zeroed, `PG_table` set while in use), and every entry is an
//! `AtomicU64` word of that frame, exactly as hardware page tables are words in RAM. Page tables
//! therefore cost arena memory, allocator time and cache misses as they do in the kernel.
//!
//! The kernel paths modelled, each re-implemented here rather than transcribed:
//! - `__pud_alloc`/`__pmd_alloc`/`__pte_alloc` (mm/memory.c) in [`PageTable::walk_alloc`]:
//!   read an upper entry without a lock; if it is empty, allocate a zeroed table *outside* any
//!   lock, take `mm->page_table_lock`, re-check, and either install the new table or give the
//!   page back because another thread installed one first.
//! - `pte_offset_map_lock` and the split PTE lock `ptlock_ptr` (include/linux/mm.h) in
//!   [`PageTable::pte_lock`]: with [`Ptl::Split`] every PTE table has its own spinlock (Hugh
//!   Dickins' split page-table locks, 2.6.15, kept in `struct ptdesc` today; here in
//!   [`SplitPtl`], one lock per arena frame); with [`Ptl::Mm`] every PTE update of the address
//!   space serialises on the one `mm->page_table_lock`, as before 2.6.15.
//! - Who shares a split lock: a PTE table's lock is contended only when tasks on different
//!   CPUs fault pages of the same table (neighbouring pages of one VMA, such as the edges of
//!   pft's per-thread slices). Each split lock remembers the first CPU that took it since the
//!   table was installed and sets a shared bit once another one does
//!   ([`PageTable::note_pte_user`]); traces then see its acquisitions with the scope that is
//!   really shared ([`PageTable::pte_lock_scope`]): private while one task uses the table,
//!   per mm once several do.
//! - `ptep_get_and_clear` in [`PageTable::get_and_clear`], `zap_pte_range` and its upper-level
//!   callers in [`PageTable::zap_range`].
//! - `free_pgtables`/`free_pgd_range` with their floor/ceiling rule in
//!   [`PageTable::free_pgtables`], and `free_pgd` at `exit_mmap` in [`PageTable::destroy`].
//! - The hardware page walker and its accessed/dirty updates in [`PageTable::translate`].
//!
//! # Entry format
//!
//! [`Pte`] is used at every level: bit 0 present, bit 1 writable, bit 5 accessed, bit 6 dirty,
//! bits 12.. the frame number. Upper-level entries are either zero or `present | writable | pfn`.
//! A PTE that is not present but not zero is a swap entry ([`Pte::swap`]); the MMU ignores it
//! and the fault path tells none, present and swap apart.
//!
//! # Locking: which lock protects what
//!
//! - **Upper-level entries** (PGD, PUD, PMD words) are written only under
//!   `mm->page_table_lock` (installs in `walk_alloc`, clears in `free_pgtables` and
//!   `destroy`), except that [`Ptl::Atomic`] installs fill an empty entry with a
//!   compare-and-exchange and no lock. They are read without any lock (walks).
//! - **PTEs** are written only under the PTE lock of their table ([`PageTable::pte_lock`]):
//!   the table's split lock, or `mm->page_table_lock` in [`Ptl::Mm`] and [`Ptl::Atomic`]
//!   modes. In [`Ptl::Atomic`] mode anonymous faults fill *empty* PTEs with a
//!   compare-and-exchange and no lock ([`PageTable::install_if_none`]), so nobody may leave a
//!   PTE transiently none while changing it under the lock. The other exception
//!   is the MMU's accessed/dirty update in `translate`, a compare-and-swap that only ever adds
//!   those two bits to a present entry it has just read, as the hardware's locked update does;
//!   it can therefore never resurrect an entry cleared under the lock.
//! - **Table lifetime**: a table is freed only by `free_pgtables` (or `destroy`), and only when
//!   its whole span lies inside `[floor, ceiling)`, the gap between the neighbouring VMAs. A
//!   lockless walker (MMU, fault path, per-VMA-locked fault) of an address inside *another*
//!   VMA therefore never passes through a table being freed. Callers must exclude concurrent
//!   creation of VMAs in that gap (the kernel holds `mmap_lock` for that), and a walker of the
//!   gap itself is a use-after-munmap: it reads defined (atomic) but meaningless words.
//!
//! # Memory ordering
//!
//! A table's zeroed contents must be visible before the entry that points to it, so installs
//! store with `Release` and walks load with `Acquire`. A PTE is stored with `Release` and loaded
//! with `Acquire` for the same reason one level down: whoever filled the page (zeroing on an
//! anonymous fault, a copy on copy-on-write) did so before the PTE made it reachable. On
//! x86-64 all of these are plain moves.
//!
//! # Invariants (checked by the tests and by [`PageTable::check`])
//!
//! - Every table reachable from the PGD is an allocated frame with `PG_table`, reachable once;
//!   [`PageTable::nr_tables`] counts them, the PGD included.
//! - Racing installers leave exactly one table per upper entry; the losers' pages go back to
//!   the allocator (no frame leaks: after `destroy`, `Mem::check` reports nothing allocated).
//! - After every PTE has been zapped and `free_pgtables(0, TASK_SIZE, 0, TASK_SIZE)`, only the
//!   PGD is left; a table shared with an address range outside `[floor, ceiling)` is kept.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

use crossbeam_utils::CachePadded;
use pagelab_sync::trace::{self, Access, LockModel};
use pagelab_sync::{LockKind, Scope, SpinGuard, SpinLock};

use crate::alloc::{AllocError, Gfp, Mem};
use crate::cpu::CpuId;
use crate::page::{PAGE_SHIFT, PAGE_SIZE, Pfn, pg};
use crate::policy::Ptl;
use crate::vm::range_lock::NodeLock;

/// A split PTE-table lock (`ptlock_ptr`) while one task takes it: private, so traces fold it
/// into compute.
pub static PTE_PTL: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("ptl", pagelab_sync::Scope::Private);
/// A split PTE-table lock that tasks on more than one CPU have taken (they fault neighbouring
/// pages of one table): shared by the threads of the mm, so replay makes them meet there.
pub static PTE_PTL_SHARED: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("ptl (shared)", pagelab_sync::Scope::Mm);
/// `mm->page_table_lock`: one per address space.
pub static PAGE_TABLE_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("page_table_lock", pagelab_sync::Scope::Mm);

/// Entries per table at every level (`PTRS_PER_PTE` and friends).
pub const PTRS_PER_TABLE: usize = 512;
/// Address bits resolved by one level.
const TABLE_BITS: u32 = 9;
/// `PMD_SHIFT`: bits mapped by one PMD entry, i.e. by one PTE table.
pub const PMD_SHIFT: u32 = PAGE_SHIFT + TABLE_BITS;
/// `PUD_SHIFT`: bits mapped by one PUD entry, i.e. by one PMD table.
pub const PUD_SHIFT: u32 = PMD_SHIFT + TABLE_BITS;
/// `PGDIR_SHIFT`: bits mapped by one PGD entry, i.e. by one PUD table.
pub const PGDIR_SHIFT: u32 = PUD_SHIFT + TABLE_BITS;
/// Span of one PTE table (2 MiB).
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
/// Span of one PMD table (1 GiB).
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
/// Span of one PUD table (512 GiB).
pub const PGDIR_SIZE: u64 = 1 << PGDIR_SHIFT;
/// End of the user address space (x86-64 `TASK_SIZE_MAX`, rounded): the lower half of the
/// 48-bit space, PGD entries 0 to 255.
pub const TASK_SIZE: u64 = 1 << 47;

/// Table levels, named by the kind of table (not of entry): a level-`L` table's entries each
/// map `1 << entry_shift(L)` bytes.
const LEVEL_PTE: u32 = 0;
const LEVEL_PMD: u32 = 1;
const LEVEL_PGD: u32 = 3;
/// Levels of the table, PGD to PTE.
const LEVELS: usize = LEVEL_PGD as usize + 1;

/// [`PageTable::cover_path`]'s tables, root first: each with its level and the address its
/// span starts at.
#[derive(Clone, Copy, Debug)]
pub struct CoverPath {
    nodes: [(Pfn, u32, u64); LEVELS],
    len: usize,
}

impl PartialEq for CoverPath {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::ops::Deref for CoverPath {
    type Target = [(Pfn, u32, u64)];

    fn deref(&self) -> &Self::Target {
        &self.nodes[..self.len]
    }
}

/// Bytes mapped by one entry of a level-`level` table.
#[inline]
const fn entry_shift(level: u32) -> u32 {
    PAGE_SHIFT + TABLE_BITS * level
}

/// Bytes spanned by a whole level-`level` table (2 MiB for a PTE table).
#[inline]
pub const fn table_span(level: u32) -> u64 {
    1u64 << (entry_shift(level) + TABLE_BITS)
}

/// Index of `addr`'s entry in a level-`level` table.
#[inline]
const fn index(addr: u64, level: u32) -> usize {
    ((addr >> entry_shift(level)) as usize) & (PTRS_PER_TABLE - 1)
}

/// `pte_index`: the index of `addr`'s PTE within its PTE table.
#[inline]
pub const fn pte_index(addr: u64) -> usize {
    index(addr, LEVEL_PTE)
}

/// `pmd_addr_end`: the end of the PTE table's span containing `addr`, capped at `end`. Loops
/// over a range use it to take each PTE table's lock once.
#[inline]
pub const fn pmd_addr_end(addr: u64, end: u64) -> u64 {
    let boundary = (addr & !(PMD_SIZE - 1)) + PMD_SIZE;
    if boundary < end { boundary } else { end }
}

/// A page-table entry, at any level. See the module documentation for the bit layout.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pte(pub u64);

impl Pte {
    /// The empty entry (`pte_none`).
    pub const NONE: Pte = Pte(0);
    /// `_PAGE_PRESENT`.
    pub const PRESENT: u64 = 1 << 0;
    /// `_PAGE_RW`.
    pub const WRITABLE: u64 = 1 << 1;
    /// `_PAGE_ACCESSED`: set by the MMU on any access.
    pub const ACCESSED: u64 = 1 << 5;
    /// `_PAGE_DIRTY`: set by the MMU on a store.
    pub const DIRTY: u64 = 1 << 6;
    /// Where the frame number starts.
    pub const PFN_SHIFT: u32 = 12;
    /// Frame numbers are 32-bit ([`Pfn`]).
    const PFN_MASK: u64 = (u32::MAX as u64) << Self::PFN_SHIFT;
    /// Where a swap entry's payload starts. Bits 0 to 11 of a swap PTE are zero, so it is
    /// never present and, with a nonzero payload, never none.
    pub const SWAP_SHIFT: u32 = 12;
    /// Largest swap payload that fits.
    pub const MAX_SWAP_ENTRY: u64 = (1 << (64 - Self::SWAP_SHIFT)) - 1;

    /// A present PTE mapping `pfn` (`mk_pte`), accessed and dirty clear.
    #[inline]
    pub const fn new(pfn: Pfn, writable: bool) -> Pte {
        let w = if writable { Self::WRITABLE } else { 0 };
        Pte(((pfn.0 as u64) << Self::PFN_SHIFT) | w | Self::PRESENT)
    }

    /// A swap PTE (`swp_entry_to_pte`). `entry` must be nonzero so that the PTE is not none:
    /// as in the kernel, where slot 0 of a swap device is its header and never holds a page.
    #[inline]
    pub const fn swap(entry: u64) -> Pte {
        assert!(
            entry != 0 && entry <= Self::MAX_SWAP_ENTRY,
            "swap entry must be nonzero and fit in 52 bits"
        );
        Pte(entry << Self::SWAP_SHIFT)
    }

    /// `pte_none`: nothing mapped, nothing swapped.
    #[inline]
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// `pte_present`.
    #[inline]
    pub const fn is_present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }

    /// Same as [`Pte::is_present`], for symmetry with the other accessors.
    #[inline]
    pub const fn present(self) -> bool {
        self.is_present()
    }

    /// A swap entry: not present and not none.
    #[inline]
    pub const fn is_swap(self) -> bool {
        !self.is_present() && !self.is_none()
    }

    /// The swap payload, if this is a swap entry (`pte_to_swp_entry`).
    #[inline]
    pub const fn swap_entry(self) -> Option<u64> {
        if self.is_swap() {
            Some(self.0 >> Self::SWAP_SHIFT)
        } else {
            None
        }
    }

    /// `pte_write`.
    #[inline]
    pub const fn writable(self) -> bool {
        self.is_present() && self.0 & Self::WRITABLE != 0
    }

    /// `pte_young`.
    #[inline]
    pub const fn accessed(self) -> bool {
        self.is_present() && self.0 & Self::ACCESSED != 0
    }

    /// `pte_dirty`.
    #[inline]
    pub const fn dirty(self) -> bool {
        self.is_present() && self.0 & Self::DIRTY != 0
    }

    /// `pte_pfn`. Meaningless for a PTE that is not present (debug-checked).
    #[inline]
    pub fn pfn(self) -> Pfn {
        debug_assert!(self.is_present(), "pfn of a non-present {self:?}");
        Pfn(((self.0 & Self::PFN_MASK) >> Self::PFN_SHIFT) as u32)
    }

    /// `pte_mkwrite`/`pte_wrprotect`.
    #[inline]
    pub const fn with_writable(self, on: bool) -> Pte {
        self.with_bit(Self::WRITABLE, on)
    }

    /// `pte_mkyoung`/`pte_mkold`.
    #[inline]
    pub const fn with_accessed(self, on: bool) -> Pte {
        self.with_bit(Self::ACCESSED, on)
    }

    /// `pte_mkdirty`/`pte_mkclean`.
    #[inline]
    pub const fn with_dirty(self, on: bool) -> Pte {
        self.with_bit(Self::DIRTY, on)
    }

    #[inline]
    const fn with_bit(self, bit: u64, on: bool) -> Pte {
        debug_assert!(self.is_present(), "flag change on a non-present PTE");
        if on {
            Pte(self.0 | bit)
        } else {
            Pte(self.0 & !bit)
        }
    }
}

impl fmt::Debug for Pte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            f.write_str("Pte(none)")
        } else if let Some(e) = self.swap_entry() {
            write!(f, "Pte(swap {e:#x})")
        } else {
            write!(
                f,
                "Pte({:?}{}{}{})",
                self.pfn(),
                if self.writable() { " rw" } else { " ro" },
                if self.accessed() { " A" } else { "" },
                if self.dirty() { " D" } else { "" }
            )
        }
    }
}

/// An upper-level entry pointing to the table in `pfn` (`_PAGE_TABLE`).
#[inline]
const fn table_entry(pfn: Pfn) -> u64 {
    ((pfn.0 as u64) << Pte::PFN_SHIFT) | Pte::WRITABLE | Pte::PRESENT
}

/// The table an upper-level entry points to.
#[inline]
const fn entry_table(e: u64) -> Pfn {
    Pfn(((e & Pte::PFN_MASK) >> Pte::PFN_SHIFT) as u32)
}

/// Where the PTE of an address lives: the PTE table's frame and the index in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PteSlot {
    pub table: Pfn,
    pub index: usize,
}

impl PteSlot {
    /// The slot `n` entries further in the same table (the PTE of the address `n` pages
    /// higher), or `None` past the table's end: fault-around and zapping stay within one
    /// table, whose lock they hold.
    #[inline]
    pub fn offset(self, n: usize) -> Option<PteSlot> {
        let index = self.index.checked_add(n)?;
        (index < PTRS_PER_TABLE).then_some(PteSlot {
            table: self.table,
            index,
        })
    }
}

/// A word a PTE can live in: the arena's `AtomicU64`s, and under `--cfg loom` loom's, so that
/// the model of the lockless install (tests/loom_pte.rs) runs the engine's own
/// [`ptep_cmpxchg_none`].
pub trait PteWord {
    fn cas(&self, current: u64, new: u64, success: Ordering, failure: Ordering)
    -> Result<u64, u64>;
}

impl PteWord for AtomicU64 {
    #[inline]
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.compare_exchange(current, new, success, failure)
    }
}

#[cfg(loom)]
impl PteWord for loom::sync::atomic::AtomicU64 {
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.compare_exchange(current, new, success, failure)
    }
}

/// `ptep_cmpxchg` from `pte_none` to `pte` (Lameter 2005): whether this caller installed it.
/// `Release` on success, so that whoever loads the PTE with `Acquire` (the MMU, a later
/// fault) sees the page as it was prepared (zeroed, copied); `Relaxed` on failure, as the
/// loser only frees its own page and never looks at the winner's.
#[inline]
pub fn ptep_cmpxchg_none(w: &impl PteWord, pte: Pte) -> bool {
    debug_assert!(!pte.is_none(), "installing an empty PTE");
    w.cas(0, pte.0, Release, Relaxed).is_ok()
}

/// One split PTE lock. Aligned to 64 bytes, the stride of `struct page` in which the kernel
/// embeds its `ptlock`, so that two tables' locks never share a cache line.
///
/// `first` and `shared` say who takes the lock (see [`PageTable::note_pte_user`]). They sit in
/// the lock's own line, which every taker writes anyway, and are written only when they
/// change (once when the table is installed, once when a second CPU arrives), so reading them
/// on every fault adds no cache-line transfer.
#[repr(align(64))]
struct PtlCell {
    lock: SpinLock<()>,
    /// The CPU (plus one) that first took the lock since the table was installed; 0: none.
    first: AtomicU32,
    /// Another CPU has taken it too.
    shared: AtomicBool,
    /// The page's range lock (`mm.mmap_lock = "range"`, [`crate::vm::range_lock`]), in the
    /// same line as the split lock: every page-table page has one, at every level.
    node: NodeLock,
}

// One line, as the comment above says: the split lock (two words since its release became a
// store), the two fields and the range lock must not spill into a second. (Loom's atomics are
// larger than the machine's.)
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<PtlCell>() == 64);

/// A held PTE-table lock ([`PageTable::pte_lock`]). When the acquisition was traced as a
/// shared split lock, the release is traced too, before the lock is let go.
#[must_use = "the PTE lock is released as soon as the guard is dropped"]
pub struct PtlGuard<'a> {
    traced: Option<(usize, LockModel)>,
    _guard: SpinGuard<'a, ()>,
}

impl Drop for PtlGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some((id, model)) = self.traced {
            trace::release(&PTE_PTL_SHARED, id, model, Access::Exclusive);
        }
    }
}

/// Split PTE locks: one `SpinLock<()>` per frame of the arena, used for the frames that are
/// PTE tables (the kernel's `ptlock` in `struct ptdesc`, with `ALLOC_SPLIT_PTLOCKS` off).
///
/// Allocated once per engine and shared by every [`PageTable`] (through an `Arc`): a frame is
/// a PTE table of at most one address space at a time, so its lock never needs to be
/// initialised or torn down when the table is allocated or freed.
pub struct SplitPtl {
    locks: Box<[PtlCell]>,
}

impl SplitPtl {
    /// Locks for frames `0..nr_pages`, of the given kind.
    pub fn new(nr_pages: usize, kind: LockKind) -> Self {
        SplitPtl {
            locks: (0..nr_pages)
                .map(|_| PtlCell {
                    lock: SpinLock::new(kind, ()).with_class(&PTE_PTL),
                    first: AtomicU32::new(0),
                    shared: AtomicBool::new(false),
                    node: NodeLock::new(),
                })
                .collect(),
        }
    }

    /// The lock of the PTE table in frame `table` (`ptlock_ptr`).
    #[inline]
    pub fn lock_of(&self, table: Pfn) -> &SpinLock<()> {
        &self.locks[table.idx()].lock
    }

    /// The range lock of the page-table page in frame `table`.
    #[inline]
    pub fn node_lock(&self, table: Pfn) -> &NodeLock {
        &self.locks[table.idx()].node
    }

    /// The task on `cpu` is about to take the lock of the PTE table in `table`: remember the
    /// first CPU, and mark the lock shared when another one comes. Loads only, once settled.
    #[inline]
    pub fn note_user(&self, table: Pfn, cpu: CpuId) {
        let c = &self.locks[table.idx()];
        if c.shared.load(Relaxed) {
            return;
        }
        let me = u32::from(cpu.0) + 1;
        let first = match c.first.load(Relaxed) {
            0 => match c.first.compare_exchange(0, me, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(f) => f,
            },
            f => f,
        };
        if first != me {
            c.shared.store(true, Relaxed);
        }
    }

    /// Whether tasks on more than one CPU have taken the lock of the table in `table` since it
    /// was installed.
    #[inline]
    pub fn is_shared(&self, table: Pfn) -> bool {
        self.locks[table.idx()].shared.load(Relaxed)
    }

    /// Forget who took the lock of `table`: the frame becomes a new PTE table (installed, not
    /// yet reachable), whose users start afresh.
    fn reset_users(&self, table: Pfn, cpu: CpuId) {
        let c = &self.locks[table.idx()];
        // Whoever installs the table is about to take its lock: the first user.
        c.first.store(u32::from(cpu.0) + 1, Relaxed);
        if c.shared.load(Relaxed) {
            c.shared.store(false, Relaxed);
        }
    }

    /// Frames covered.
    pub fn nr_locks(&self) -> usize {
        self.locks.len()
    }
}

/// The mm-wide lock with the counters written under it, in a cache line of their own so that
/// taking the lock does not invalidate the read-mostly fields every walk reads (`mem`, `pgd`).
struct MmPtl {
    /// `mm->page_table_lock`.
    page_table_lock: SpinLock<()>,
    /// Table frames in use, PGD included.
    nr_tables: AtomicUsize,
    /// Times an installer found, under the lock, that another thread had installed the table
    /// it allocated.
    install_races: AtomicU64,
}

/// The page tables of one address space (the `pgd` of an `mm_struct`, with the locks that
/// protect it). See the module documentation.
pub struct PageTable {
    mem: Arc<Mem>,
    pgd: Pfn,
    mode: Ptl,
    /// `Some` exactly in [`Ptl::Split`] mode.
    split: Option<Arc<SplitPtl>>,
    mm: CachePadded<MmPtl>,
    /// Set once the tables are freed, so that `Drop` does not free them again.
    torn_down: bool,
    /// Upper levels are installed with a compare-and-exchange ([`PageTable::set_lockless_install`]).
    lockless_install: bool,
}

/// The arguments of one `free_pgtables` call.
struct FreeRange {
    start: u64,
    end: u64,
    floor: u64,
    ceiling: u64,
}

/// Page-table pages unlinked by [`PageTable::unlink_pgtables`], freed when this drops.
pub struct UnlinkedTables {
    mem: Arc<Mem>,
    cpu: CpuId,
    tables: Vec<Pfn>,
}

impl UnlinkedTables {
    /// How many table pages wait to be freed.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

impl Drop for UnlinkedTables {
    fn drop(&mut self) {
        for &t in &self.tables {
            free_table(&self.mem, self.cpu, t, true);
        }
    }
}

/// `pagetable_alloc` + constructor: a zeroed frame marked `PG_table`.
fn alloc_table(mem: &Mem, cpu: CpuId) -> Result<Pfn, AllocError> {
    let pfn = mem.alloc_page(cpu, Gfp::KERNEL.with_zero())?;
    // The frame is ours alone until it is installed.
    mem.pages()[pfn].set_nonatomic(pg::TABLE);
    Ok(pfn)
}

/// Destructor + `pagetable_free`. With `check`, the table must be empty: every entry either
/// never set or cleared before (a non-empty table would leak what it maps).
fn free_table(mem: &Mem, cpu: CpuId, pfn: Pfn, check: bool) {
    debug_assert!(
        !check || mem.arena().page_is_zero(pfn),
        "freeing page table {pfn:?} that still has entries"
    );
    let page = &mem.pages()[pfn];
    debug_assert!(page.test(pg::TABLE), "{pfn:?} is not a page table");
    page.clear_nonatomic(pg::TABLE);
    let freed = mem.free_pages(cpu, pfn, 0);
    debug_assert!(freed, "page table {pfn:?} had extra references");
}

impl PageTable {
    /// A new address space's page tables: just a PGD (`pgd_alloc`).
    ///
    /// `kind` is the spinlock algorithm of `page_table_lock`. In [`Ptl::Split`] mode the PTE
    /// locks come from `split`, which the engine shares between all address spaces; when it is
    /// `None`, a private set is allocated for this page table (convenient for tests, costly:
    /// one lock per arena frame). `split` is ignored in [`Ptl::Mm`] mode.
    pub fn new(
        mem: Arc<Mem>,
        cpu: CpuId,
        mode: Ptl,
        kind: LockKind,
        split: Option<Arc<SplitPtl>>,
    ) -> Result<PageTable, AllocError> {
        let split = match mode {
            Ptl::Mm | Ptl::Atomic => None,
            Ptl::Split => {
                Some(split.unwrap_or_else(|| Arc::new(SplitPtl::new(mem.pages().len(), kind))))
            }
        };
        if let Some(s) = &split {
            assert!(
                s.nr_locks() >= mem.pages().len(),
                "split PTE locks cover {} frames, the arena has {}",
                s.nr_locks(),
                mem.pages().len()
            );
        }
        let pgd = alloc_table(&mem, cpu)?;
        if let Some(s) = &split {
            s.node_lock(pgd).reset_users();
        }
        Ok(PageTable {
            mem,
            pgd,
            mode,
            split,
            mm: CachePadded::new(MmPtl {
                page_table_lock: SpinLock::new(kind, ()).with_class(&PAGE_TABLE_LOCK),
                nr_tables: AtomicUsize::new(1),
                install_races: AtomicU64::new(0),
            }),
            torn_down: false,
            lockless_install: false,
        })
    }

    /// The memory the tables live in.
    pub fn mem(&self) -> &Arc<Mem> {
        &self.mem
    }

    /// The PGD's frame.
    pub fn pgd(&self) -> Pfn {
        self.pgd
    }

    /// How PTE tables are locked.
    pub fn ptl_mode(&self) -> Ptl {
        self.mode
    }

    /// The shared split locks, in [`Ptl::Split`] mode.
    pub fn split_ptl(&self) -> Option<&Arc<SplitPtl>> {
        self.split.as_ref()
    }

    /// `mm->page_table_lock`. It protects every upper-level entry, and in [`Ptl::Mm`] mode
    /// every PTE too. Never call [`PageTable::walk_alloc`], `free_pgtables` or `destroy` while
    /// holding it (nor, in `Mm` mode, while holding a PTE lock): they take it.
    pub fn page_table_lock(&self) -> &SpinLock<()> {
        &self.mm.page_table_lock
    }

    /// The word holding entry `i` of the table in `table`.
    #[inline]
    fn word(&self, table: Pfn, i: usize) -> &AtomicU64 {
        &self.mem.arena().words(table)[i]
    }

    /// The lock protecting the PTE table in `table`.
    #[inline]
    fn ptl(&self, table: Pfn) -> &SpinLock<()> {
        match &self.split {
            Some(s) => s.lock_of(table),
            None => &self.mm.page_table_lock,
        }
    }

    /// Lockless walk: the PTE slot of `addr` if every upper level exists, `None` otherwise or
    /// outside the user address space. Three `Acquire` loads, no lock, no allocation: this is
    /// the first half of every simulated memory access.
    #[inline]
    pub fn walk(&self, addr: u64) -> Option<PteSlot> {
        if addr >= TASK_SIZE {
            return None;
        }
        let mut table = self.pgd;
        for level in (LEVEL_PMD..=LEVEL_PGD).rev() {
            let e = self.word(table, index(addr, level)).load(Acquire);
            if e & Pte::PRESENT == 0 {
                return None;
            }
            table = entry_table(e);
        }
        Some(PteSlot {
            table,
            index: pte_index(addr),
        })
    }

    /// Walk to `addr`'s PTE slot, allocating missing tables on the way (`__pud_alloc`,
    /// `__pmd_alloc`, `__pte_alloc`). On an allocation failure the levels installed so far
    /// stay (they are empty and freed with the range, as in the kernel).
    ///
    /// Must not be called with `page_table_lock` held, nor in [`Ptl::Mm`] mode with a PTE
    /// lock held. `addr` must be below [`TASK_SIZE`].
    pub fn walk_alloc(&self, cpu: CpuId, addr: u64) -> Result<PteSlot, AllocError> {
        assert!(addr < TASK_SIZE, "address {addr:#x} outside user space");
        let mut table = self.pgd;
        for level in (LEVEL_PMD..=LEVEL_PGD).rev() {
            let w = self.word(table, index(addr, level));
            let e = w.load(Acquire);
            table = if e & Pte::PRESENT != 0 {
                entry_table(e)
            } else {
                self.install(cpu, w, level - 1)?
            };
        }
        Ok(PteSlot {
            table,
            index: pte_index(addr),
        })
    }

    /// The tables from the PGD down to the deepest one whose span contains `[start, end)`
    /// (the range lock's covering node, [`crate::vm::range_lock`]), each with its level and
    /// the address its span starts at; missing tables on the way are installed. The last one
    /// is the covering node, the others its ancestors, root first. Kept on the stack: every
    /// munmap and MAP_FIXED walks it twice (CortenMM's walk allocates nothing either).
    pub fn cover_path(&self, cpu: CpuId, start: u64, end: u64) -> Result<CoverPath, AllocError> {
        assert!(
            start < end && end <= TASK_SIZE,
            "range {start:#x}..{end:#x} outside user space"
        );
        let (mut table, mut level, mut base) = (self.pgd, LEVEL_PGD, 0u64);
        let mut path = CoverPath {
            nodes: [(table, level, base); LEVELS],
            len: 1,
        };
        while level > LEVEL_PTE {
            let i = index(start, level);
            if i != index(end - 1, level) {
                break;
            }
            let w = self.word(table, i);
            let e = w.load(Acquire);
            table = if e & Pte::PRESENT != 0 {
                entry_table(e)
            } else {
                self.install(cpu, w, level - 1)?
            };
            base += (i as u64) << entry_shift(level);
            level -= 1;
            path.nodes[path.len] = (table, level, base);
            path.len += 1;
        }
        Ok(path)
    }

    /// [`PageTable::walk_alloc`] that also returns the tables walked through: PGD, PUD and
    /// PMD tables, then the PTE table (a fault's leaf node and its ancestors).
    pub fn walk_alloc_path(&self, cpu: CpuId, addr: u64) -> Result<[Pfn; 4], AllocError> {
        assert!(addr < TASK_SIZE, "address {addr:#x} outside user space");
        let mut path = [self.pgd; 4];
        let mut table = self.pgd;
        for (n, level) in (LEVEL_PMD..=LEVEL_PGD).rev().enumerate() {
            let w = self.word(table, index(addr, level));
            let e = w.load(Acquire);
            table = if e & Pte::PRESENT != 0 {
                entry_table(e)
            } else {
                self.install(cpu, w, level - 1)?
            };
            path[n + 1] = table;
        }
        Ok(path)
    }

    /// [`PageTable::walk_alloc_path`] without allocating: `None` where a level is missing. A
    /// fault that holds its leaf's range lock re-walks with it to confirm that the tables it
    /// locked are still the ones linked at its address.
    pub fn walk_path(&self, addr: u64) -> Option<[Pfn; 4]> {
        if addr >= TASK_SIZE {
            return None;
        }
        let mut path = [self.pgd; 4];
        let mut table = self.pgd;
        for (n, level) in (LEVEL_PMD..=LEVEL_PGD).rev().enumerate() {
            let e = self.word(table, index(addr, level)).load(Acquire);
            if e & Pte::PRESENT == 0 {
                return None;
            }
            table = entry_table(e);
            path[n + 1] = table;
        }
        Some(path)
    }

    /// Call `f` for every table that exists below the level-`level` table `table` (spanning
    /// from `base`) and overlaps `[start, end)`, parents before children.
    pub fn for_each_table_below(
        &self,
        table: Pfn,
        level: u32,
        base: u64,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(Pfn),
    ) {
        if level == LEVEL_PTE {
            return;
        }
        let shift = entry_shift(level);
        let (first, last) = index_range(base, level, start, end);
        for i in first..=last {
            // After the covering lock's SeqCst fence: sees any table installed before an
            // installer's own fence (see `crate::vm::range_lock`).
            let e = self.word(table, i).load(Acquire);
            if e & Pte::PRESENT == 0 {
                continue;
            }
            let child = entry_table(e);
            f(child);
            self.for_each_table_below(
                child,
                level - 1,
                base + ((i as u64) << shift),
                start,
                end,
                f,
            );
        }
    }

    /// The range lock of the page-table page in `table` (needs split PTE locks, which keep
    /// them).
    #[inline]
    pub fn node_lock(&self, table: Pfn) -> &NodeLock {
        self.split
            .as_ref()
            .expect("range locks live with the split PTE locks")
            .node_lock(table)
    }

    /// Install upper-level tables with a compare-and-exchange, without `page_table_lock`
    /// (`mm.mmap_lock = "range"`: faults and operations on disjoint ranges must not meet on
    /// an mm-wide lock).
    pub fn set_lockless_install(&mut self) {
        self.lockless_install = true;
    }

    /// Fill the empty upper entry `w` with a new table, or adopt the one a racing thread
    /// installed. The page is allocated and zeroed before the lock is taken, so that the lock
    /// is held for a load and a store only; the price is an allocation wasted on a lost race.
    ///
    /// In [`Ptl::Atomic`] mode the entry is filled with a compare-and-exchange and no lock, as
    /// the 2005 atomic-fault patches populated the upper levels (`pud/pmd_test_and_populate`,
    /// as far as can be told without the patch text at hand); `free_pgtables` still clears
    /// entries under the lock, which is safe because it never clears an entry a fault can be
    /// walking through (the floor/ceiling rule).
    #[cold]
    fn install(&self, cpu: CpuId, w: &AtomicU64, level: u32) -> Result<Pfn, AllocError> {
        let new = alloc_table(&self.mem, cpu)?;
        if let Some(s) = &self.split {
            // Before it is published: the frame may have been another mm's page-table page,
            // whose range lock other CPUs took.
            s.node_lock(new).reset_users();
            if level == LEVEL_PTE {
                s.reset_users(new, cpu);
            }
        }
        if self.mode == Ptl::Atomic || self.lockless_install {
            // Release: whoever sees the entry sees the zeroed table; Acquire on failure: the
            // winner's zeroing of its table is visible to us.
            return match w.compare_exchange(0, table_entry(new), Release, Acquire) {
                Ok(_) => {
                    self.mm.nr_tables.fetch_add(1, Relaxed);
                    Ok(new)
                }
                Err(e) => {
                    self.mm.install_races.fetch_add(1, Relaxed);
                    free_table(&self.mem, cpu, new, true);
                    Ok(entry_table(e))
                }
            };
        }
        let guard = self.mm.page_table_lock.lock();
        // Every writer of upper entries holds the lock, and our acquisition of it makes the
        // winner's zeroing of its table visible too, so a relaxed load is enough.
        let e = w.load(Relaxed);
        if e & Pte::PRESENT != 0 {
            self.mm.install_races.fetch_add(1, Relaxed);
            drop(guard);
            free_table(&self.mem, cpu, new, true);
            return Ok(entry_table(e));
        }
        self.mm.nr_tables.fetch_add(1, Relaxed);
        // Release: lockless walkers that see the entry see the zeroed table.
        w.store(table_entry(new), Release);
        drop(guard);
        Ok(new)
    }

    /// Read a PTE (`ptep_get`). `Acquire`, pairing with [`PageTable::set`]'s `Release`, so
    /// that a reader without the PTE lock also sees the page contents prepared before the
    /// PTE was set. Without the lock the value may change at any time.
    #[inline]
    pub fn load(&self, slot: PteSlot) -> Pte {
        Pte(self.word(slot.table, slot.index).load(Acquire))
    }

    /// `pte_offset_map_lock`'s lock: the lock that protects the PTE table of `slot`, i.e. the
    /// table's split lock, or the mm-wide `page_table_lock` in [`Ptl::Mm`] mode.
    #[inline]
    pub fn pte_lock(&self, slot: PteSlot) -> PtlGuard<'_> {
        self.lock_table(slot.table)
    }

    /// [`PageTable::pte_lock`] if it is free right now (`spin_trylock(ptl)`).
    #[inline]
    pub fn try_pte_lock(&self, slot: PteSlot) -> Option<PtlGuard<'_>> {
        let l = self.ptl(slot.table);
        let guard = l.try_lock()?;
        Some(PtlGuard {
            traced: self.trace_shared(slot.table, l, true),
            _guard: guard,
        })
    }

    #[inline]
    fn lock_table(&self, table: Pfn) -> PtlGuard<'_> {
        let l = self.ptl(table);
        let guard = l.lock();
        PtlGuard {
            traced: self.trace_shared(table, l, false),
            _guard: guard,
        }
    }

    /// Record the acquisition of a split lock that several CPUs take, under the shared class
    /// (the lock's own class is private and records nothing). Returns what the release must
    /// record.
    #[inline]
    fn trace_shared(
        &self,
        table: Pfn,
        l: &SpinLock<()>,
        trylock: bool,
    ) -> Option<(usize, LockModel)> {
        if !trace::active() {
            return None;
        }
        let s = self.split.as_ref()?;
        if !s.is_shared(table) {
            return None;
        }
        let id = l as *const SpinLock<()> as usize;
        let model = match l.kind() {
            LockKind::Ticket => LockModel::Ticket,
            LockKind::Queued => LockModel::Queued,
        };
        trace::acquire(&PTE_PTL_SHARED, id, model, Access::Exclusive, trylock);
        Some((id, model))
    }

    /// The task on `cpu` is about to lock the PTE table of `slot` (a fault that walked to it):
    /// see [`SplitPtl::note_user`]. Nothing to remember in [`Ptl::Mm`] mode, where the one
    /// lock is per mm anyway.
    #[inline]
    pub fn note_pte_user(&self, slot: PteSlot, cpu: CpuId) {
        if let Some(s) = &self.split {
            s.note_user(slot.table, cpu);
        }
    }

    /// How far the lock of `slot`'s PTE table is shared, as traces record it: per mm for the
    /// mm-wide lock or a split lock several CPUs took, private for a split lock one CPU took.
    pub fn pte_lock_scope(&self, slot: PteSlot) -> Scope {
        match &self.split {
            Some(s) if !s.is_shared(slot.table) => Scope::Private,
            _ => Scope::Mm,
        }
    }

    /// Store a PTE (`set_pte_at`). The caller holds [`PageTable::pte_lock`] for the slot's
    /// table (debug builds check that the lock is held, by someone). `Release`: everything the
    /// caller wrote to the mapped page before is visible to whoever finds this PTE.
    ///
    /// Overwriting a present PTE loses accessed/dirty bits the MMU sets concurrently; change
    /// present PTEs with [`PageTable::get_and_clear`] or [`PageTable::update`].
    #[inline]
    pub fn set(&self, slot: PteSlot, pte: Pte) {
        debug_assert!(
            self.ptl(slot.table).is_locked(),
            "set of {slot:?} without its PTE lock"
        );
        self.word(slot.table, slot.index).store(pte.0, Release);
    }

    /// Install `pte` in an empty slot without any lock (`ptep_cmpxchg` on a `pte_none` entry,
    /// Lameter 2005): `false`, and nothing changed, if the slot is no longer none because
    /// another thread got there first. `Release` on success, like [`PageTable::set`].
    ///
    /// This is what lets [`Ptl::Atomic`] faults skip the PTE lock. Everyone else who writes a
    /// PTE under the lock must then never leave a none entry in between two stores that mean
    /// one change (a cleared entry could be filled by a lockless installer): a present or
    /// swap entry is replaced with one [`PageTable::xchg`].
    #[inline]
    pub fn install_if_none(&self, slot: PteSlot, pte: Pte) -> bool {
        ptep_cmpxchg_none(self.word(slot.table, slot.index), pte)
    }

    /// Replace a PTE with `pte` in one atomic exchange and return the old value, accessed and
    /// dirty bits included (`ptep_xchg` of the 2005 patches; today's `ptep_get_and_clear` +
    /// `set_pte_at` pair under the lock). The caller holds the PTE lock.
    #[inline]
    pub fn xchg(&self, slot: PteSlot, pte: Pte) -> Pte {
        debug_assert!(
            self.ptl(slot.table).is_locked(),
            "xchg of {slot:?} without its PTE lock"
        );
        Pte(self.word(slot.table, slot.index).swap(pte.0, AcqRel))
    }

    /// Take a PTE, leaving it none (`ptep_get_and_clear`). An atomic swap, so the value
    /// returned includes accessed/dirty bits the MMU set up to the last moment; an MMU that
    /// read the old value can no longer update it. The caller holds the PTE lock.
    #[inline]
    pub fn get_and_clear(&self, slot: PteSlot) -> Pte {
        debug_assert!(
            self.ptl(slot.table).is_locked(),
            "get_and_clear of {slot:?} without its PTE lock"
        );
        Pte(self.word(slot.table, slot.index).swap(0, AcqRel))
    }

    /// Replace a PTE by `f(old)` atomically, retrying if the MMU changed it meanwhile, and
    /// return the old value (`ptep_modify_prot_start`/`commit`, `ptep_test_and_clear_young`
    /// when `f` clears the accessed bit). `f` may be called more than once. The caller holds
    /// the PTE lock.
    #[inline]
    pub fn update(&self, slot: PteSlot, mut f: impl FnMut(Pte) -> Pte) -> Pte {
        debug_assert!(
            self.ptl(slot.table).is_locked(),
            "update of {slot:?} without its PTE lock"
        );
        let w = self.word(slot.table, slot.index);
        let old = w.fetch_update(AcqRel, Acquire, |v| Some(f(Pte(v)).0));
        match old {
            Ok(v) | Err(v) => Pte(v),
        }
    }

    /// The software MMU: translate `addr` for a load (`write == false`) or a store.
    ///
    /// If the PTE is present, and writable for a store, sets the accessed bit (and dirty for a
    /// store) when it is not already set, and returns the frame. Otherwise returns `None` and
    /// the caller takes a page fault. The bits are set with a compare-and-swap on the value
    /// just read, like the hardware's locked update: a plain `fetch_or` could land after a
    /// concurrent `get_and_clear` and turn the empty entry into a fake swap entry. Skipping
    /// the update when the bits are already set keeps the PTE's cache line shared between
    /// CPUs on the common path.
    ///
    /// The frame returned is like a TLB entry: valid until the PTE is cleared; the caller's
    /// TLB-shootdown model decides how long it may keep using it.
    #[inline]
    pub fn translate(&self, addr: u64, write: bool) -> Option<Pfn> {
        let slot = self.walk(addr)?;
        let w = self.word(slot.table, slot.index);
        let want = if write {
            Pte::ACCESSED | Pte::DIRTY
        } else {
            Pte::ACCESSED
        };
        let mut e = w.load(Acquire);
        loop {
            if e & Pte::PRESENT == 0 || (write && e & Pte::WRITABLE == 0) {
                return None;
            }
            if e & want == want {
                return Some(Pte(e).pfn());
            }
            match w.compare_exchange_weak(e, e | want, Relaxed, Acquire) {
                Ok(_) => return Some(Pte(e).pfn()),
                Err(cur) => e = cur,
            }
        }
    }

    /// `zap_page_range`: clear every present or swap PTE in `[start, end)` (page aligned) and
    /// hand each old value to `f(addr, old)`, which releases what it mapped.
    ///
    /// Each PTE table's lock is taken once for all its entries in the range, and `f` runs under
    /// it, as the kernel drops rmap and reference counts under the PTE lock in
    /// `zap_pte_range`. Hence `f` must not take page-table locks (nor call `walk_alloc`).
    /// Missing tables are skipped a whole span at a time (2 MiB, 1 GiB or 512 GiB). Tables are
    /// not freed: that is [`PageTable::free_pgtables`]'s job.
    ///
    /// The zap runs on `cpu` and takes each table's lock there, so it counts as a taker of
    /// the lock ([`SplitPtl::note_user`]): a munmap on one CPU of a table another CPU faulted
    /// bounces the lock's line between them exactly as a second faulting CPU does.
    pub fn zap_range(&self, cpu: CpuId, start: u64, end: u64, mut f: impl FnMut(u64, Pte)) {
        let page_mask = PAGE_SIZE as u64 - 1;
        assert!(
            start & page_mask == 0 && end & page_mask == 0 && start <= end && end <= TASK_SIZE,
            "bad zap range {start:#x}..{end:#x}"
        );
        if start < end {
            self.zap_level(cpu, self.pgd, LEVEL_PGD, 0, start, end, &mut f);
        }
    }

    /// Zap the part of `[start, end)` mapped by the level-`level` table `table`, which spans
    /// from `base`.
    #[allow(clippy::too_many_arguments)]
    fn zap_level<F: FnMut(u64, Pte)>(
        &self,
        cpu: CpuId,
        table: Pfn,
        level: u32,
        base: u64,
        start: u64,
        end: u64,
        f: &mut F,
    ) {
        let words = self.mem.arena().words(table);
        let shift = entry_shift(level);
        let (first, last) = index_range(base, level, start, end);
        if level == LEVEL_PTE {
            if let Some(s) = &self.split {
                s.note_user(table, cpu);
            }
            let _ptl = self.lock_table(table);
            for (i, w) in words.iter().enumerate().take(last + 1).skip(first) {
                // Relaxed: a zero entry becomes nonzero only under the lock, or (in
                // `Ptl::Atomic` mode) by a fault, which the caller excludes from the range
                // being zapped (mmap_lock or the VMA's write lock).
                if w.load(Relaxed) == 0 {
                    continue;
                }
                let old = Pte(w.swap(0, AcqRel));
                f(base + ((i as u64) << shift), old);
            }
            return;
        }
        for (i, w) in words.iter().enumerate().take(last + 1).skip(first) {
            let e = w.load(Acquire);
            if e & Pte::PRESENT != 0 {
                let child_base = base + ((i as u64) << shift);
                self.zap_level(cpu, entry_table(e), level - 1, child_base, start, end, f);
            }
        }
    }

    /// `free_pgtables`/`free_pgd_range`: free the PTE, PMD and PUD tables left by unmapping
    /// `[start, end)`, given `floor`, the end of the previous VMA (or 0), and `ceiling`, the
    /// start of the next VMA (or [`TASK_SIZE`]).
    ///
    /// A table is freed when its span overlaps `[start, end)` and lies wholly within
    /// `[floor, ceiling)` — so no other VMA can map through it — and so is every table below a
    /// freed one. That is the kernel's rule: it rounds `floor` up and `ceiling` down to each
    /// level's span and frees the tables between. (The kernel frees only the lower tables that
    /// overlap `[start, end)` and relies on no table existing outside any VMA; freeing the
    /// whole subtree gives the same result then, and never leaks otherwise.)
    ///
    /// The PTEs in freed tables must already be zapped (debug-checked). Each upper entry is
    /// cleared under `page_table_lock`, then the table is given back to the allocator. Lockless
    /// walkers of other VMAs never reach a freed table, by the floor/ceiling rule; the caller
    /// excludes the creation of new VMAs in `[floor, ceiling)` meanwhile (`mmap_lock`).
    pub fn free_pgtables(&self, cpu: CpuId, start: u64, end: u64, floor: u64, ceiling: u64) {
        drop(self.unlink_pgtables(cpu, start, end, floor, ceiling));
    }

    /// [`PageTable::free_pgtables`] whose frames are given back only when the returned
    /// [`UnlinkedTables`] drops: a caller whose walkers hold no lock that excludes the unmap
    /// (lock-free faults, `crate::vm::vma_rcu`) hands it to RCU (`call_rcu`), as Bonsai and
    /// `MMU_GATHER_RCU_TABLE_FREE` free page-table pages after a grace period. The entries
    /// pointing to the tables are cleared now, so no new walk reaches them.
    pub fn unlink_pgtables(
        &self,
        cpu: CpuId,
        start: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
    ) -> UnlinkedTables {
        let mut out = UnlinkedTables {
            mem: self.mem.clone(),
            cpu,
            tables: Vec::new(),
        };
        assert!(
            floor <= start && start <= end && end <= ceiling && ceiling <= TASK_SIZE,
            "bad free_pgtables range {start:#x}..{end:#x} within {floor:#x}..{ceiling:#x}"
        );
        if start == end {
            return out;
        }
        let r = FreeRange {
            start,
            end,
            floor,
            ceiling,
        };
        self.free_level(&mut out.tables, self.pgd, LEVEL_PGD, 0, &r, false);
        out
    }

    /// Free the tables below the level-`level` table `table` (spanning from `base`) that `r`
    /// allows; all of them if `whole` (the table itself is being freed).
    fn free_level(
        &self,
        unlinked: &mut Vec<Pfn>,
        table: Pfn,
        level: u32,
        base: u64,
        r: &FreeRange,
        whole: bool,
    ) {
        let words = self.mem.arena().words(table);
        let shift = entry_shift(level);
        let child_span = 1u64 << shift;
        let (first, last) = if whole {
            (0, PTRS_PER_TABLE - 1)
        } else {
            index_range(base, level, r.start, r.end)
        };
        for (i, w) in words.iter().enumerate().take(last + 1).skip(first) {
            let e = w.load(Acquire);
            if e & Pte::PRESENT == 0 {
                continue;
            }
            let child = entry_table(e);
            let child_base = base + ((i as u64) << shift);
            let free = whole || span_within(child_base, child_span, r.floor, r.ceiling);
            if level > LEVEL_PMD {
                self.free_level(unlinked, child, level - 1, child_base, r, free);
            }
            if free {
                if self.lockless_install {
                    // Range locks: the caller holds the covering node of this entry, and
                    // installs only ever fill empty entries.
                    w.store(0, Release);
                } else {
                    let _g = self.mm.page_table_lock.lock();
                    w.store(0, Release);
                }
                self.mm.nr_tables.fetch_sub(1, Relaxed);
                unlinked.push(child);
            }
        }
    }

    /// Table frames in use, the PGD included.
    pub fn nr_tables(&self) -> usize {
        self.mm.nr_tables.load(Relaxed)
    }

    /// Times a table allocated by `walk_alloc` was given back because another thread
    /// installed one first.
    pub fn install_races(&self) -> u64 {
        self.mm.install_races.load(Relaxed)
    }

    /// Call `f(addr, pte)` for every present PTE, in address order (invariant checks; call only
    /// while no other thread changes the tables).
    pub fn for_each_present(&self, mut f: impl FnMut(u64, Pte)) {
        self.present_level(self.pgd, LEVEL_PGD, 0, &mut f);
    }

    fn present_level(&self, table: Pfn, level: u32, base: u64, f: &mut impl FnMut(u64, Pte)) {
        for (i, w) in self.mem.arena().words(table).iter().enumerate() {
            let e = w.load(Acquire);
            if e == 0 {
                continue;
            }
            let addr = base + ((i as u64) << entry_shift(level));
            if level == LEVEL_PTE {
                let pte = Pte(e);
                if pte.present() {
                    f(addr, pte);
                }
            } else {
                self.present_level(entry_table(e), level - 1, addr, f);
            }
        }
    }

    /// MGLRU aging's page-table walk (`walk_pte_range`): for every present PTE whose accessed
    /// bit is set, call `f(addr, pfn)`, and clear the bit if `f` took note of it (returned
    /// `true`): a page `f` leaves alone (another memcg's or node's, or one an isolator holds)
    /// keeps its bit for whoever judges it next. One PTE-lock hold per PTE table. Returns the
    /// PTEs looked at. The caller holds `mmap_lock` for read, so no table is freed under the
    /// walk; tables installed meanwhile by faults are seen or not. The walk runs on `cpu`, a
    /// taker of each table's lock like any other ([`SplitPtl::note_user`]).
    pub fn walk_young(&self, cpu: CpuId, mut f: impl FnMut(u64, Pfn) -> bool) -> u64 {
        self.young_level(cpu, self.pgd, LEVEL_PGD, 0, &mut f)
    }

    fn young_level(
        &self,
        cpu: CpuId,
        table: Pfn,
        level: u32,
        base: u64,
        f: &mut impl FnMut(u64, Pfn) -> bool,
    ) -> u64 {
        if level == LEVEL_PTE {
            self.note_pte_user(PteSlot { table, index: 0 }, cpu);
            let _ptl = self.pte_lock(PteSlot { table, index: 0 });
            let mut seen = 0;
            for index in 0..PTRS_PER_TABLE {
                let slot = PteSlot { table, index };
                let pte = self.load(slot);
                if !pte.present() {
                    continue;
                }
                seen += 1;
                if pte.accessed() && f(base + ((index as u64) << entry_shift(level)), pte.pfn()) {
                    self.update(slot, |p| p.with_accessed(false));
                }
            }
            return seen;
        }
        let mut seen = 0;
        for (i, w) in self.mem.arena().words(table).iter().enumerate() {
            let e = w.load(Acquire);
            if e & Pte::PRESENT == 0 {
                continue;
            }
            let addr = base + ((i as u64) << entry_shift(level));
            seen += self.young_level(cpu, entry_table(e), level - 1, addr, f);
        }
        seen
    }

    /// Check the tables' invariants and count them per level: `[PTE, PMD, PUD, PGD]` tables.
    /// Every reachable table is an allocated `PG_table` frame reached exactly once, upper
    /// entries are none or well-formed table entries, and the count equals `nr_tables`. Call
    /// only while no other thread changes the tables.
    pub fn check(&self) -> Result<[usize; 4], String> {
        let mut counts = [0usize; 4];
        let mut seen = HashSet::new();
        self.check_table(self.pgd, LEVEL_PGD, &mut counts, &mut seen)?;
        let total: usize = counts.iter().sum();
        if total != self.nr_tables() {
            return Err(format!(
                "{total} tables reachable but nr_tables is {}",
                self.nr_tables()
            ));
        }
        Ok(counts)
    }

    fn check_table(
        &self,
        table: Pfn,
        level: u32,
        counts: &mut [usize; 4],
        seen: &mut HashSet<Pfn>,
    ) -> Result<(), String> {
        if table.idx() >= self.mem.pages().len() {
            return Err(format!("level-{level} table {table:?} outside the arena"));
        }
        if !seen.insert(table) {
            return Err(format!("table {table:?} is reachable twice"));
        }
        let page = &self.mem.pages()[table];
        if !page.test(pg::TABLE) || page.refcount.load(Relaxed) != 1 {
            return Err(format!(
                "level-{level} table {table:?} has flags {:#x}, refcount {}",
                page.flags(),
                page.refcount.load(Relaxed)
            ));
        }
        counts[level as usize] += 1;
        if level == LEVEL_PTE {
            return Ok(());
        }
        for (i, w) in self.mem.arena().words(table).iter().enumerate() {
            let e = w.load(Acquire);
            if e == 0 {
                continue;
            }
            if e != table_entry(entry_table(e)) {
                return Err(format!(
                    "level-{level} table {table:?} entry {i} is malformed: {e:#x}"
                ));
            }
            if level == LEVEL_PGD && (i as u64) << PGDIR_SHIFT >= TASK_SIZE {
                return Err(format!("PGD entry {i} is above TASK_SIZE"));
            }
            self.check_table(entry_table(e), level - 1, counts, seen)?;
        }
        Ok(())
    }

    /// Free every table, the PGD included (`free_pgd_range` over everything and `pgd_free`, at
    /// `exit_mmap`). Every PTE must already be zapped (debug-checked).
    pub fn destroy(mut self, cpu: CpuId) {
        self.teardown(cpu, true);
    }

    fn teardown(&mut self, cpu: CpuId, check: bool) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        self.free_subtree(cpu, self.pgd, LEVEL_PGD, check);
        self.mm.nr_tables.fetch_sub(1, Relaxed);
        free_table(&self.mem, cpu, self.pgd, check);
    }

    /// Free every table below the level-`level` table `table`, clearing its entries.
    fn free_subtree(&self, cpu: CpuId, table: Pfn, level: u32, check: bool) {
        for w in self.mem.arena().words(table) {
            let e = w.load(Acquire);
            if e & Pte::PRESENT == 0 {
                continue;
            }
            let child = entry_table(e);
            if level > LEVEL_PMD {
                self.free_subtree(cpu, child, level - 1, check);
            } else if !check {
                // Dropped without zapping: the frames mapped leak (their owner's bug, or a
                // panic), but the table frame goes back clean.
                self.mem.arena().zero_page(child);
            }
            w.store(0, Release);
            self.mm.nr_tables.fetch_sub(1, Relaxed);
            free_table(&self.mem, cpu, child, check);
        }
    }
}

impl Drop for PageTable {
    /// A page table dropped without [`PageTable::destroy`] still gives its frames back, from
    /// CPU 0 and without checking that the PTEs were zapped (it may be dropped by a panic).
    fn drop(&mut self) {
        self.teardown(CpuId(0), false);
    }
}

impl fmt::Debug for PageTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageTable")
            .field("pgd", &self.pgd)
            .field("mode", &self.mode)
            .field("nr_tables", &self.nr_tables())
            .finish_non_exhaustive()
    }
}

/// Indices of the entries of a level-`level` table spanning from `base` that overlap
/// `[start, end)`, as an inclusive range. The range must overlap the table's span.
#[inline]
fn index_range(base: u64, level: u32, start: u64, end: u64) -> (usize, usize) {
    let shift = entry_shift(level);
    let table_end = base + (1u64 << (shift + TABLE_BITS));
    let lo = start.max(base);
    let hi = end.min(table_end);
    debug_assert!(
        lo < hi,
        "{start:#x}..{end:#x} misses the table at {base:#x}"
    );
    (
        ((lo - base) >> shift) as usize,
        ((hi - 1 - base) >> shift) as usize,
    )
}

/// Whether the span `[base, base + span)` lies within `[floor, ceiling)`: with `base` aligned
/// to `span`, the same as the kernel's test against `floor` rounded up and `ceiling` rounded
/// down to the span.
#[inline]
fn span_within(base: u64, span: u64, floor: u64, ceiling: u64) -> bool {
    base >= floor && base + span <= ceiling
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pte_bits_round_trip() {
        let p = Pte::new(Pfn(0x1234), false);
        assert!(p.is_present() && p.present() && !p.is_none() && !p.is_swap());
        assert!(!p.writable() && !p.accessed() && !p.dirty());
        assert_eq!(p.pfn(), Pfn(0x1234));
        assert_eq!(p.0, (0x1234 << 12) | 1);
        let q = p.with_writable(true).with_accessed(true).with_dirty(true);
        assert!(q.writable() && q.accessed() && q.dirty());
        assert_eq!(q.pfn(), Pfn(0x1234));
        assert_eq!(
            q.with_dirty(false)
                .with_accessed(false)
                .with_writable(false),
            p
        );
        let top = Pte::new(Pfn(u32::MAX), true);
        assert_eq!(top.pfn(), Pfn(u32::MAX));
        assert!(top.writable());
        assert_eq!(format!("{q:?}"), "Pte(pfn 0x1234 rw A D)");
    }

    #[test]
    fn swap_entries_are_neither_none_nor_present() {
        for e in [1, 0x55, Pte::MAX_SWAP_ENTRY] {
            let s = Pte::swap(e);
            assert!(s.is_swap() && !s.is_present() && !s.is_none(), "{s:?}");
            assert!(!s.writable() && !s.accessed() && !s.dirty());
            assert_eq!(s.swap_entry(), Some(e));
        }
        assert_eq!(Pte::NONE.swap_entry(), None);
        assert_eq!(Pte::new(Pfn(1), true).swap_entry(), None);
        assert!(Pte::NONE.is_none() && !Pte::NONE.is_swap());
        assert_eq!(format!("{:?}", Pte::swap(0x55)), "Pte(swap 0x55)");
    }

    #[test]
    #[should_panic(expected = "nonzero")]
    fn swap_entry_zero_is_refused() {
        let _ = Pte::swap(0);
    }

    #[test]
    fn indices_per_level() {
        let addr = (3 << PGDIR_SHIFT) | (5 << PUD_SHIFT) | (7 << PMD_SHIFT) | (9 << 12) | 0x123;
        assert_eq!(index(addr, LEVEL_PGD), 3);
        assert_eq!(index(addr, 2), 5);
        assert_eq!(index(addr, LEVEL_PMD), 7);
        assert_eq!(pte_index(addr), 9);
        assert_eq!(PMD_SIZE, 2 << 20);
        assert_eq!(PUD_SIZE, 1 << 30);
        assert_eq!(PGDIR_SIZE, 512 << 30);
        // The user half of the PGD.
        assert_eq!(index(TASK_SIZE - 1, LEVEL_PGD), 255);
    }

    #[test]
    fn index_range_clips_to_the_table() {
        // A PTE table at 2 MiB: [2M + 4K, 2M + 12K) is entries 1 and 2.
        assert_eq!(
            index_range(PMD_SIZE, LEVEL_PTE, PMD_SIZE + 4096, PMD_SIZE + 3 * 4096),
            (1, 2)
        );
        // A range covering the table and more.
        assert_eq!(index_range(PMD_SIZE, LEVEL_PTE, 0, 1 << 40), (0, 511));
        // The PGD, for the whole user space.
        assert_eq!(index_range(0, LEVEL_PGD, 0, TASK_SIZE), (0, 255));
        // A PMD table, from the middle of one PTE table's span to the start of another's.
        assert_eq!(
            index_range(
                PUD_SIZE,
                LEVEL_PMD,
                PUD_SIZE + PMD_SIZE + 1,
                PUD_SIZE + 3 * PMD_SIZE + 1
            ),
            (1, 3)
        );
    }

    #[test]
    fn pmd_addr_end_stops_at_table_boundaries() {
        assert_eq!(pmd_addr_end(4096, 1 << 30), PMD_SIZE);
        assert_eq!(pmd_addr_end(4096, 8192), 8192);
        assert_eq!(pmd_addr_end(PMD_SIZE, 1 << 30), 2 * PMD_SIZE);
    }

    #[test]
    fn slot_add_stays_in_the_table() {
        let s = PteSlot {
            table: Pfn(7),
            index: 510,
        };
        assert_eq!(
            s.offset(1),
            Some(PteSlot {
                table: Pfn(7),
                index: 511
            })
        );
        assert_eq!(s.offset(2), None);
        assert_eq!(s.offset(usize::MAX), None);
    }

    #[test]
    fn floor_and_ceiling_round_inwards() {
        // A PTE table [2M, 4M): freed only if nothing else lies in its span.
        assert!(span_within(PMD_SIZE, PMD_SIZE, 0, TASK_SIZE));
        assert!(span_within(PMD_SIZE, PMD_SIZE, PMD_SIZE, 2 * PMD_SIZE));
        // Previous VMA ends one page into the span: keep.
        assert!(!span_within(PMD_SIZE, PMD_SIZE, PMD_SIZE + 4096, TASK_SIZE));
        // Next VMA starts one page before the span's end: keep.
        assert!(!span_within(PMD_SIZE, PMD_SIZE, 0, 2 * PMD_SIZE - 4096));
        // The PUD table of PGD entry 255 ends exactly at TASK_SIZE.
        assert!(span_within(255 * PGDIR_SIZE, PGDIR_SIZE, 0, TASK_SIZE));
    }
}
