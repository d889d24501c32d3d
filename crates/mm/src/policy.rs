//! Policy switches: a profile is a value.
//!
//! Every scalability technique the engine models is a switch here, and a profile (one "kernel"
//! of a comparison) is a TOML file naming their values. The code reads the `Policy` once at
//! set-up and dispatches on it in one place per mechanism; nothing on a hot path re-parses or
//! re-interprets it.
//!
//! Parsing is strict: an unknown key or value is an error that names the key and the allowed
//! values, and inconsistent settings (a pcp batch above its high mark, and the like) are
//! rejected by [`Policy::validate`], so a typo can never silently run the default kernel.

use std::fmt;
use std::str::FromStr;

use pagelab_sync::{LockKind, RwsemAlgo};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// All switches of one profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Display name; defaults to the file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One line saying which kernel or patch set this profile stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub locks: LockPolicy,
    #[serde(default)]
    pub alloc: AllocPolicy,
    #[serde(default)]
    pub pcp: PcpPolicy,
    #[serde(default)]
    pub mm: MmPolicy,
    #[serde(default)]
    pub lru: LruPolicy,
    #[serde(default)]
    pub memcg: MemcgPolicy,
}

/// `[locks]`: the architecture's lock implementation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockPolicy {
    /// `spinlock_t` implementation for zone->lock, pcp->lock and every other spinlock:
    /// `ticket` (x86 before 4.2) or `queued` (qspinlock, 4.2+).
    #[serde(default = "LockPolicy::default_spinlock", with = "lock_kind_serde")]
    pub spinlock: LockKind,
    /// How the era's rwsem (`mmap_lock`, the 6.4 per-VMA lock's writers) makes its waiters
    /// wait: `sleep-fifo` (before 3.10), `sleep-steal` (3.10), `spin-writers` (3.16),
    /// `spin-all-handoff` (5.3) or `spin-writers-handoff` (5.11+). The engine's rwsem
    /// protocol is the same for all; the projector's replay costs waiting by it
    /// ([`RwsemAlgo`]).
    #[serde(default = "LockPolicy::default_rwsem", with = "rwsem_algo_serde")]
    pub rwsem: RwsemAlgo,
}

impl LockPolicy {
    fn default_spinlock() -> LockKind {
        LockKind::Queued
    }
    fn default_rwsem() -> RwsemAlgo {
        RwsemAlgo::SpinWritersHandoff
    }
}

impl Default for LockPolicy {
    fn default() -> Self {
        LockPolicy {
            spinlock: Self::default_spinlock(),
            rwsem: Self::default_rwsem(),
        }
    }
}

mod rwsem_algo_serde {
    use super::*;

    pub fn serialize<S: serde::Serializer>(a: &RwsemAlgo, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(a.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RwsemAlgo, D::Error> {
        let s = String::deserialize(d)?;
        RwsemAlgo::from_name(&s).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown value `{s}`, expected one of {}",
                RwsemAlgo::names()
            ))
        })
    }
}

mod lock_kind_serde {
    use super::*;

    pub fn serialize<S: serde::Serializer>(k: &LockKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&k.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LockKind, D::Error> {
        let s = String::deserialize(d)?;
        LockKind::from_str(&s).map_err(|_| {
            de::Error::custom(format!(
                "unknown value `{s}`, expected one of `ticket`, `queued`"
            ))
        })
    }
}

/// `[alloc]`: the page allocator outside the per-CPU lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocPolicy {
    /// Keep a pool of pages zeroed by a background thread, so that zero-filled allocations skip
    /// the zeroing (Christoph Lameter's prezeroing patches, 2005).
    #[serde(default)]
    pub prezero: bool,
    /// Target size of the prezeroed pool, in pages.
    #[serde(default = "AllocPolicy::default_prezero_pool")]
    pub prezero_pool: u32,
    /// The page allocator behind `alloc_pages`. Profiles stored before the switch existed have
    /// no such key and read back as `buddy`, which they ran on.
    #[serde(default)]
    pub allocator: Allocator,
}

/// Which page allocator serves `alloc_pages` and `free_pages`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocator {
    /// Linux's: zones of buddy free lists under `zone->lock`, with the `[pcp]` per-CPU lists in
    /// front (mm/page_alloc.c).
    #[default]
    Buddy,
    /// LLFree (Wrenger et al., USENIX ATC'23): per-CPU reservations of trees of 64-frame
    /// bitfield words updated with atomics, no lock and no per-CPU lists
    /// ([`crate::alloc::llfree`]). Replaces both the buddy lists and the pcps, so it needs
    /// `pcp.lists = "none"`.
    Llfree,
}

impl Allocator {
    /// The value as profiles spell it.
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Buddy => "buddy",
            Allocator::Llfree => "llfree",
        }
    }
}

impl AllocPolicy {
    fn default_prezero_pool() -> u32 {
        4096
    }
}

impl Default for AllocPolicy {
    fn default() -> Self {
        AllocPolicy {
            prezero: false,
            prezero_pool: Self::default_prezero_pool(),
            allocator: Allocator::Buddy,
        }
    }
}

/// Which allocation orders the per-CPU page lists cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PcpLists {
    /// No per-CPU lists: every allocation and free takes zone->lock.
    None,
    /// Order-0 pages only (kernels before 5.14).
    Order0,
    /// Orders 0 to `PAGE_ALLOC_COSTLY_ORDER` (3), one list per order and migratetype (5.14+).
    HighOrder,
}

/// How `pcp->high` behaves over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PcpTune {
    /// `high` and `batch` stay as configured.
    Fixed,
    /// 6.7+ (Huang Ying): `high` moves between `high_min` and `high_max` with the workload,
    /// free batches scale with consecutive frees, refill batches with consecutive refills, and
    /// `high` decays by 1/8 per second when idle.
    Adaptive,
}

/// A count that is either given or computed from the zone as the kernel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Auto,
    Fixed(u32),
}

impl Serialize for Count {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Count::Auto => s.serialize_str("auto"),
            Count::Fixed(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a positive integer or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                if v >= 1 && v <= i64::from(u32::MAX) {
                    Ok(Count::Fixed(v as u32))
                } else {
                    Err(E::custom(format!(
                        "invalid value {v}, expected a positive integer or \"auto\""
                    )))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                if v == "auto" {
                    Ok(Count::Auto)
                } else {
                    Err(E::custom(format!(
                        "invalid value \"{v}\", expected a positive integer or \"auto\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `[pcp]`: per-CPU page lists (`struct per_cpu_pages`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcpPolicy {
    #[serde(default = "PcpPolicy::default_lists")]
    pub lists: PcpLists,
    /// Pages moved between the zone and a pcp per zone->lock hold. `auto` is `zone_batchsize`:
    /// a quarter of managed/1024 capped at 1 MiB of pages, rounded to 2^n - 1 (63 for zones of
    /// 1 GiB or more).
    #[serde(default = "PcpPolicy::default_count")]
    pub batch: Count,
    /// Pages a pcp may hold before it drains a batch back. `auto` is `zone_highsize`: the
    /// zone's low watermark shared among the CPUs, at least 4 x batch.
    #[serde(default = "PcpPolicy::default_count")]
    pub high: Count,
    #[serde(default = "PcpPolicy::default_tune")]
    pub tune: PcpTune,
}

impl PcpPolicy {
    fn default_lists() -> PcpLists {
        PcpLists::HighOrder
    }
    fn default_count() -> Count {
        Count::Auto
    }
    fn default_tune() -> PcpTune {
        PcpTune::Adaptive
    }
}

impl Default for PcpPolicy {
    fn default() -> Self {
        PcpPolicy {
            lists: Self::default_lists(),
            batch: Count::Auto,
            high: Count::Auto,
            tune: Self::default_tune(),
        }
    }
}

/// Per-VMA locking (`CONFIG_PER_VMA_LOCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmaLock {
    /// Every fault takes mmap_lock for read (before 6.4).
    None,
    /// 6.4: a per-VMA rwsem plus `vm_lock_seq` (Suren Baghdasaryan).
    Rwsem,
    /// 6.15: a per-VMA reference count plus `vm_lock_seq`, no separate lock object.
    Refcount,
    /// Lock-free faults (Bonsai, Clements et al., ASPLOS'12; the speculative page fault
    /// series of Laurent Dufour and Michel Lespinasse, 2018-2021, never merged): the fault
    /// finds its VMA under RCU, snapshots the VMA's sequence count and validates it under the
    /// PTE lock before installing; it takes no lock or reference on the VMA and writes none of
    /// its lines. munmap bumps the sequence and retires VMAs and page tables through RCU.
    /// Needs a PTE lock to validate under: not with `mm.ptl = "atomic"`.
    Rcu,
}

/// What serialises changes to the address space (`mm->mmap_lock` and what replaces it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MmapLock {
    /// Linux: one rwsem per address space, taken for write by mmap and munmap, for read by
    /// faults that do not use (or fall back from) a per-VMA lock.
    Rwsem,
    /// RadixVM (Clements, Kaashoek and Zeldovich, EuroSys'13) and CortenMM (SOSP'25): no
    /// mm-wide lock; mmap at a fixed address, munmap and faults lock the page-table pages
    /// that cover their range (`vm::range_lock`), so operations on disjoint ranges take no
    /// common lock. Replaces the per-VMA lock too (needs `mm.vma_lock = "none"`) and keeps
    /// its locks with the split PTE locks (needs `mm.ptl = "split"`).
    Range,
}

/// Which page faults may be handled under the per-VMA lock (`lock_vma_under_rcu` and the
/// `FAULT_FLAG_VMA_LOCK` checks of mm/memory.c), as each kernel allowed them. The values are
/// ordered: each covers what the previous one did and more. The fallbacks each refuses are
/// counted by reason (`vma_lock_fallback_*` in vmstat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum VmaLockFaults {
    /// 6.4 and 6.5 (and the pvl-v2 posting as merged): only anonymous VMAs
    /// (`lock_vma_under_rcu` gives up unless `vma_is_anonymous`), and a swap-in under the VMA
    /// lock returns `VM_FAULT_RETRY` and is redone under mmap_lock (6.4-rc's "mm: prevent
    /// do_swap_page from handling page faults under VMA lock").
    #[serde(rename = "anon")]
    Anon,
    /// 6.6: anonymous VMAs including swap-ins (Suren Baghdasaryan's "mm: handle swap page
    /// faults under per-VMA lock", part of "Per-VMA lock support for swap and userfaults",
    /// July 2023); file-backed VMAs still take mmap_lock.
    #[serde(rename = "anon+swap")]
    AnonSwap,
    /// 6.7 and later: file-backed and shared VMAs too: read, copy-on-write and shared-write
    /// faults (Matthew Wilcox's "Handle more faults under the VMA lock" series).
    #[serde(rename = "all")]
    All,
}

impl VmaLockFaults {
    /// Faults on file-backed VMAs (private or shared) may stay under the VMA lock.
    #[inline]
    pub fn file(self) -> bool {
        self == VmaLockFaults::All
    }

    /// Swap-ins may stay under the VMA lock.
    #[inline]
    pub fn swap(self) -> bool {
        self >= VmaLockFaults::AnonSwap
    }

    /// The value as profiles spell it.
    pub fn name(self) -> &'static str {
        match self {
            VmaLockFaults::Anon => "anon",
            VmaLockFaults::AnonSwap => "anon+swap",
            VmaLockFaults::All => "all",
        }
    }
}

/// Page-table locking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ptl {
    /// One `mm->page_table_lock` for every PTE update of the address space (before 2.6.15).
    Mm,
    /// One lock per PTE-table page (Hugh Dickins, 2.6.15: split page-table locks).
    Split,
    /// Christoph Lameter's page-fault scalability patches (2004-2005, last posted against
    /// 2.6.13-rc6-mm1, never merged): an anonymous fault installs its PTE with a
    /// compare-and-exchange on the empty entry (`ptep_cmpxchg`) and takes no lock; the loser
    /// of a race frees its page. Missing page-table levels are populated the same way. Every
    /// other PTE update still takes `mm->page_table_lock`.
    Atomic,
}

/// How RSS counters are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RssCounter {
    /// One atomic per counter per mm, updated by every fault.
    Atomic,
    /// Per-thread deltas folded into the mm every 64 events (`SPLIT_RSS_COUNTING`, before 6.2).
    PerThread,
    /// Per-CPU counters with batch max(32, 2 x CPUs) (`percpu_counter`, 6.2+).
    PerCpu,
}

/// TLB shootdown on unmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlbShootdown {
    /// No cross-CPU flush is modelled.
    None,
    /// The unmapping task waits until every other task running in the mm has acknowledged,
    /// as `flush_tlb_mm_range` waits for its IPIs.
    Ipi,
}

/// `[mm]`: address spaces, page tables and the fault path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmPolicy {
    #[serde(default = "MmPolicy::default_vma_lock")]
    pub vma_lock: VmaLock,
    #[serde(default = "MmPolicy::default_ptl")]
    pub ptl: Ptl,
    #[serde(default = "MmPolicy::default_rss")]
    pub rss: RssCounter,
    /// Pages mapped around a file read fault (`fault_around_bytes` / 4 KiB); 0 turns it off.
    #[serde(default = "MmPolicy::default_fault_around")]
    pub fault_around: u32,
    #[serde(default = "MmPolicy::default_tlb")]
    pub tlb_shootdown: TlbShootdown,
    // Issue 12 items 2 and 3 (munmap's lock downgrade, per-VMA lock coverage).
    /// Which faults may use the per-VMA lock; the others fall back to mmap_lock. Meaningful
    /// only with a `vma_lock` other than `none`.
    #[serde(default = "MmPolicy::default_vma_lock_faults")]
    pub vma_lock_faults: VmaLockFaults,
    /// munmap downgrades mmap_lock from write to read once the VMAs are detached, and zaps,
    /// flushes TLBs and frees pages and page tables under the read lock (Linux 4.20+, Yang
    /// Shi's "mm: mmap: zap pages with read mmap_sem in munmap"), so faults and other readers
    /// of the mm proceed meanwhile. Before 4.20 the whole munmap holds it for write.
    #[serde(default = "MmPolicy::default_munmap_downgrade")]
    pub munmap_downgrade: bool,
    /// The address-space lock: Linux's `mmap_lock` rwsem, or page-table range locks.
    #[serde(default = "MmPolicy::default_mmap_lock")]
    pub mmap_lock: MmapLock,
    /// A fault that takes `mmap_lock` tries `down_read_trylock` first and calls `down_read`
    /// only when that fails, as x86 has done since 2.6 (`do_page_fault`, then
    /// `do_user_addr_fault` until 6.4, `lock_mm_and_find_vma`'s `get_mmap_lock_carefully` from
    /// 6.5), so that a kernel-mode fault with the lock already held can be told from a bug
    /// before it sleeps. The trylock reads the count before its compare-and-exchange, where
    /// `down_read` is one unconditional add. The two adjacent instructions are one request
    /// for the line (measured on this project's host: docs/model.md, "A read right before an
    /// exchange"), and a failed `mmap_read_trylock` goes on to wait in `down_read`, so the
    /// replay compiles either to one acquisition of the line: the switch changes the
    /// engine's own path (the exchange loop), not what the projector charges. ia64
    /// (`ia64_do_page_fault`, the Altix of the 2.6.13 profiles) calls `down_read` directly:
    /// `false`.
    #[serde(default = "MmPolicy::default_mmap_read_trylock")]
    pub mmap_read_trylock: bool,
    /// The exception entry prefetches `mmap_lock`'s line for writing before it looks at
    /// anything else (`prefetchw(&current->mm->mmap_lock)`: x86's `exc_page_fault`, earlier
    /// `__do_page_fault`; ia64's `ia64_do_page_fault`, whose comment calls mmap_sem
    /// "performance critical"), whichever lock the fault then takes. With per-VMA locks most
    /// faults never take `mmap_lock`, so the prefetch only takes the line from the other
    /// faulting CPUs; Mateusz Guzik's "x86/mm: Stop prefetching current->mm->mmap_lock on page
    /// faults" (1701771d3069, merged for 6.16) removed it. `true` for every kernel before it.
    /// Lock-free (`vma_lock = "rcu"`) and range-locked faults never record it.
    #[serde(default = "MmPolicy::default_fault_prefetch_mmap_lock")]
    pub fault_prefetch_mmap_lock: bool,
    /// Anticipatory prefaulting (Lameter 2004-2005): pages mapped after the faulting one by
    /// an anonymous write fault, within the VMA and its PTE table; 0 turns it off. At most
    /// [`MmPolicy::MAX_ANON_PREFAULT`].
    #[serde(default)]
    pub anon_prefault: u32,
    /// False sharing of mmap_lock's line: at how many points of a fault
    /// ([`MmPolicy::MAX_LOCK_LINE_READS`]) the kernel reads other `mm_struct` fields that share
    /// the cache line of `mmap_lock.count` in that kernel's layout (x86-64, no lockdep, no
    /// debug options). Every fault reads `mm->pgd` where `__handle_mm_fault` starts its walk
    /// (`pgd_offset`); from 4.9 to 6.7 `pgd` shares a line with the count, because the fields
    /// declared between them (`mm_users`, `mm_count`, `pgtables_bytes`, `map_count`,
    /// `page_table_lock`) are fewer than 64 bytes; in 6.15 the concurrency-ID fields (and
    /// `mm_count`'s own line since 6.6) push the count to the next line. While other CPUs
    /// take and release mmap_lock, each such read fetches the line back from the last of
    /// them: the transfer Andrea Arcangeli's "mm: cacheline alignment for page_table_lock
    /// and mmap_lock" removed by giving the lock a line of its own. 0: the lock's line holds
    /// nothing the fault reads. docs/model.md ("False sharing of lock lines") has the layouts.
    #[serde(default)]
    pub mmap_lock_line_reads: u32,
    /// False sharing of the per-VMA lock's line: at how many points of a fault the kernel
    /// reads other `vm_area_struct` fields on the line of the VMA lock's count. The per-VMA
    /// lock series' patch "mm: add per-VMA lock and helper functions to control it" embedded
    /// the rwsem right after `vm_flags`, so its count and owner share the VMA's first line
    /// with `vm_start`, `vm_end`, `vm_mm`, `vm_page_prot`, `vm_flags` and `vm_lock_seq`, which
    /// the fault reads where it starts (the bounds and access check, `handle_mm_fault`) and
    /// again where it builds the PTE (`do_anonymous_page`): 2. The same series, as posted in
    /// v1, v2 and v3 and merged in 6.4, ends with "mm: separate vma->lock from vm_area_struct",
    /// which moves the lock into its own `struct vma_lock` ("vma->lock being part of the
    /// vm_area_struct causes performance regression during page faults ... constant cache
    /// line bouncing"), and 6.15 put `vm_refcnt` on a cache-line boundary among fields an
    /// anonymous fault does not read: 0. Meaningful only with a VMA lock that has a lock word
    /// (`vma_lock` = "rwsem" or "refcount").
    #[serde(default)]
    pub vma_lock_line_reads: u32,
    /// Pages an unmap gathers before it flushes the TLBs and frees them
    /// (`struct mmu_gather`). The generic gather chains page-sized batches since Peter
    /// Zijlstra's "mm: extended batches for generic mmu_gather" (e303297, 3.0), and since
    /// Michal Hocko's "mm: limit mmu_gather batching to fix soft lockups on !CONFIG_PREEMPT"
    /// (3.8) at most `MAX_GATHER_BATCH_COUNT` = 10000 / `MAX_GATHER_BATCH` = 19 of them of 510
    /// pointers after the 8 pages of its on-stack bundle (`MMU_GATHER_BUNDLE`): 9698 pages, so a
    /// 128 MiB munmap flushes 4 times, not 64; what it frees it still frees a batch of 510 at a
    /// time (`free_pages_and_swap_cache` per batch). ia64 in 2.6.13 kept its own gather of
    /// `FREE_PTE_NR` = 2048 pages on SMP (`include/asm-ia64/tlb.h`).
    #[serde(default = "MmPolicy::default_tlb_gather")]
    pub tlb_gather: u32,
}

impl MmPolicy {
    fn default_tlb_gather() -> u32 {
        Self::GENERIC_TLB_GATHER
    }
    /// What the generic gather holds since 3.8: 8 + 19 x 510 pages (see `tlb_gather`).
    pub const GENERIC_TLB_GATHER: u32 = crate::vm::tlb::GENERIC_GATHER_PAGES as u32;
    /// The largest gather a profile may ask for: 1 GiB of 4 KiB pages, the bound v2 of Michal
    /// Hocko's patch proposed for non-preemptible kernels (the merged patch took 10000 pages;
    /// larger gathers risk soft lockups).
    pub const MAX_TLB_GATHER: u32 = 1 << 18;
    fn default_vma_lock() -> VmaLock {
        VmaLock::Refcount
    }
    fn default_ptl() -> Ptl {
        Ptl::Split
    }
    fn default_rss() -> RssCounter {
        RssCounter::PerCpu
    }
    fn default_fault_around() -> u32 {
        16
    }
    fn default_tlb() -> TlbShootdown {
        TlbShootdown::Ipi
    }
    fn default_vma_lock_faults() -> VmaLockFaults {
        VmaLockFaults::All
    }
    fn default_munmap_downgrade() -> bool {
        true
    }
    fn default_mmap_lock() -> MmapLock {
        MmapLock::Rwsem
    }
    fn default_mmap_read_trylock() -> bool {
        true
    }
    fn default_fault_prefetch_mmap_lock() -> bool {
        true
    }
    /// The most pages `anon_prefault` may add to a fault: the rest of one PTE table (the
    /// faulting page is one of its 512 entries), as a fault maps under one table's lock.
    pub const MAX_ANON_PREFAULT: u32 = 511;
    /// The points of a fault at which the engine records reads of a lock word's line
    /// (`mmap_lock_line_reads`, `vma_lock_line_reads`): where `handle_mm_fault` starts (the
    /// VMA's bounds, flags and mm, the mm's `pgd`) and where the anonymous fault builds its PTE
    /// (`vm_page_prot`, `vm_flags`, `vm_mm`). Reads at one point are one line fill: the fields
    /// are read within a few instructions of each other, too soon for the line to move.
    pub const MAX_LOCK_LINE_READS: u32 = 2;
}

impl Default for MmPolicy {
    fn default() -> Self {
        MmPolicy {
            vma_lock: Self::default_vma_lock(),
            ptl: Self::default_ptl(),
            rss: Self::default_rss(),
            fault_around: Self::default_fault_around(),
            tlb_shootdown: Self::default_tlb(),
            vma_lock_faults: Self::default_vma_lock_faults(),
            munmap_downgrade: Self::default_munmap_downgrade(),
            mmap_lock: Self::default_mmap_lock(),
            mmap_read_trylock: Self::default_mmap_read_trylock(),
            fault_prefetch_mmap_lock: Self::default_fault_prefetch_mmap_lock(),
            anon_prefault: 0,
            mmap_lock_line_reads: 0,
            vma_lock_line_reads: 0,
            tlb_gather: Self::default_tlb_gather(),
        }
    }
}

/// Which lruvecs share one `lru_lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruLockScope {
    /// One lock for the whole machine (2.6 `zone->lru_lock` on a single-zone machine).
    Global,
    /// One per node (`pgdat->lru_lock`, 4.8 to 5.10).
    Node,
    /// One per (memcg, node) lruvec (`lruvec->lru_lock`, 5.11+, Alex Shi).
    MemcgNode,
}

/// How new pages reach the LRU lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruAdd {
    /// One lru_lock hold per page.
    PerPage,
    /// Per-CPU `folio_batch` of `batch` pages, flushed with one lock hold per run of pages of
    /// the same lruvec (`lru_add_drain`, `folio_batch_move_lru`).
    Batch,
    /// Daniel Jordan 2018: sort the batch into per-lruvec local lists outside the lock, splice
    /// each list under one lock hold, then set the LRU flag with release ordering (setting it
    /// before the splice would let an isolator unlink a page still on the private list).
    Splice,
}

/// How MGLRU moves folios between generations when it sorts them: aging's `inc_min_seq`
/// (what is left in the oldest generation moves up one) and eviction's `sort_folio` (folios
/// the page-table walk found young, or whose tier is protected, move to a newer generation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MglruMove {
    /// One `list_move` and one size update per folio (6.1 to 6.7). Walking the oldest list
    /// from its tail and moving each folio to the head of its new list reverses their order.
    #[default]
    PerFolio,
    /// Kairui Song 2023 ("move pages in bulk when aging"): chain runs of folios bound for the
    /// same generation and splice each run once, with one size update; the run keeps its order.
    Bulk,
}

/// How freed pages leave the LRU lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruRelease {
    /// `release_pages`: take lru_lock once per run of pages of the same lruvec.
    Locked,
    /// Daniel Jordan's RFC v2 (Sept 2018, `rwlock_t lru_lock` + `smp_list_del`): removals
    /// proceed concurrently under a shared hold of lru_lock, each locking only its neighbours,
    /// so release no longer serialises on one lock.
    Concurrent,
    /// Daniel Jordan's RFC v1 (Jan 2018, "lru_lock scalability"): the LRU is cut into batches
    /// guarded by 32 per-node batch locks; a page inside a batch leaves under its batch lock
    /// alone, a sentinel at a batch's edge under its batch lock and lru_lock; adds take only
    /// lru_lock, everything else every lock (`lru_lock_all`).
    BatchLocks,
}

/// When `release_pages` hands the pages whose last reference it dropped to the page
/// allocator, and how long it holds the lock that takes them off the LRU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseFree {
    /// 6.9+ (`folios_put_refs` since 7c33b8c4229a), and 2.6's pagevec: a batch of
    /// `lru.batch` pages is freed each time it fills, in the order they were released, the
    /// lock dropped first. The kernel fills its `folio_batch` with every folio passed, the
    /// engine with the pages freed: the same where every reference dropped is the last, as in
    /// an unmap of private pages; 2.6.13 filled its pagevec after `put_page_testzero`, as the
    /// engine does.
    #[default]
    Batch,
    /// The 6.9 merge window between 99fbb6bfc16f ("mm: make folios_put() the basis of
    /// release_pages()") and 7c33b8c4229a ("mm: remove use of folio list from folios_put()"):
    /// one lock hold per `lru.batch` pages, as `"batch"`, but each batch's freed pages gathered
    /// on a list with `list_add` and freed last first, as `"list"` frees a whole call's.
    BatchList,
    /// 3.3 to 6.8 (`free_hot_cold_page_list`, then `free_unref_page_list`): each freed page
    /// is put on a local list with `list_add`, and the list is freed after the loop, once the
    /// lock is dropped, so pages reach the per-CPU lists in the reverse of the order they were
    /// released. The lock is dropped every `SWAP_CLUSTER_MAX` pages looked at (4.15 has it;
    /// the lru_lock RFC v1 removed it under its batch locks).
    List,
}

/// What the kernel counts, per page and inside `lru_lock`, each time a page joins or leaves an
/// LRU list, beyond the lruvec's own list sizes (`lru_zone_size`, which every era keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LruSizeStats {
    /// Nothing more: 2.6's `zone->nr_active` and `nr_inactive` were plain fields under the
    /// zone's `lru_lock`, which the lruvec's own sizes stand for.
    Lruvec,
    /// The node's and the zone's `NR_LRU_BASE + lru` page-state counters (4.8 to 5.1:
    /// `__update_lru_size` calls `__mod_node_page_state` and `__mod_zone_page_state`): a
    /// per-CPU differential each, folded into the node's (zone's) and the machine's atomic
    /// counters when it passes `stat_threshold`.
    Vmstat,
    /// `Vmstat`, plus the memory cgroup's per-CPU statistics of the same items (5.2+,
    /// `__mod_lruvec_state` calling `__mod_memcg_lruvec_state`: the memcg's and the lruvec's
    /// per-CPU state) and rstat's count of updates per level of the hierarchy, added to the
    /// memcg's shared count every `MEMCG_CHARGE_BATCH` updates unless a flush is already due
    /// (6.8's per-group rule, Yosry Ahmed's; 6.1 to 6.7 kept one machine-wide count, which the
    /// engine does not distinguish: `lru::size_stats`).
    #[default]
    Memcg,
}

/// How a memory cgroup's page counter is charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemcgCharge {
    /// One atomic add on the group's counter per charged page: every fault of the group
    /// writes one shared line (memcg as it was before the per-CPU stock of 2.6.33).
    Atomic,
    /// The per-CPU charge stock (`memcg_stock`, 2.6.33+): a CPU charges the counter a batch at
    /// a time and serves single pages from what it holds, so the shared line is written once
    /// per `charge_batch` faults.
    #[default]
    Stock,
}

/// `[memcg]`: memory cgroup accounting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemcgPolicy {
    #[serde(default)]
    pub charge: MemcgCharge,
    /// Pages a stock charges at once and holds at most (`MEMCG_CHARGE_BATCH`: 32 from 2.6.33,
    /// 64 since 6.1).
    #[serde(default = "MemcgPolicy::default_batch")]
    pub charge_batch: u32,
}

impl MemcgPolicy {
    /// `MEMCG_CHARGE_BATCH` since 6.1 (Shakeel Butt, "memcg: increase MEMCG_CHARGE_BATCH to 64").
    fn default_batch() -> u32 {
        64
    }
    /// The largest stock accepted: a stock is a CPU's small reserve, and the kernel never
    /// raised the batch past 64; 512 (one PTE table's worth) leaves room to experiment while
    /// keeping a group's limit meaningful at a few thousand pages.
    pub const MAX_CHARGE_BATCH: u32 = 512;
}

impl Default for MemcgPolicy {
    fn default() -> Self {
        MemcgPolicy {
            charge: MemcgCharge::default(),
            charge_batch: Self::default_batch(),
        }
    }
}

/// `[lru]`: the LRU lists' locking and batching.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LruPolicy {
    #[serde(default = "LruPolicy::default_scope")]
    pub lock_scope: LruLockScope,
    #[serde(default = "LruPolicy::default_add")]
    pub add: LruAdd,
    /// Pages per per-CPU add batch (`PAGEVEC_SIZE`: 16 in the 2.6.13 era, 14 later and until 5.17;
    /// `FOLIO_BATCH` 15, or 31), and per batch of a `"batch"` or `"batch-list"` release.
    #[serde(default = "LruPolicy::default_batch")]
    pub batch: u32,
    #[serde(default = "LruPolicy::default_release")]
    pub release: LruRelease,
    /// When released pages are freed, and how long the release holds its lock.
    #[serde(default)]
    pub release_free: ReleaseFree,
    /// The multi-generational LRU (`CONFIG_LRU_GEN`, 6.1+) instead of the active and inactive
    /// lists.
    #[serde(default)]
    pub mglru: bool,
    /// How MGLRU moves folios between generations.
    #[serde(default)]
    pub mglru_move: MglruMove,
    /// The page-state statistics updated per page inside `lru_lock`.
    #[serde(default)]
    pub size_stats: LruSizeStats,
    /// Whether adding a page to the LRU clears `PG_unevictable` with a locked test-and-clear
    /// before setting `PG_lru` (`TestClearPageUnevictable` in `__pagevec_lru_add_fn` since "mm,
    /// mlock, vmscan: no more skipping pagevecs", 4.16; `folio_test_clear_unevictable` in
    /// `lru_add_fn`, later renamed `lru_add`): a second locked instruction per page inside
    /// the lock.
    #[serde(default = "LruPolicy::default_add_clears_unevictable")]
    pub add_clears_unevictable: bool,
}

impl LruPolicy {
    fn default_scope() -> LruLockScope {
        LruLockScope::MemcgNode
    }
    fn default_add() -> LruAdd {
        LruAdd::Batch
    }
    fn default_batch() -> u32 {
        15
    }
    fn default_release() -> LruRelease {
        LruRelease::Locked
    }
    fn default_add_clears_unevictable() -> bool {
        true
    }
}

impl Default for LruPolicy {
    fn default() -> Self {
        LruPolicy {
            lock_scope: Self::default_scope(),
            add: Self::default_add(),
            batch: Self::default_batch(),
            release: Self::default_release(),
            release_free: ReleaseFree::Batch,
            mglru: false,
            mglru_move: MglruMove::PerFolio,
            size_stats: LruSizeStats::default(),
            add_clears_unevictable: Self::default_add_clears_unevictable(),
        }
    }
}

/// A profile that could not be read; the message is one line naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// The range a numeric switch accepts, with where the limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The dotted key (`pcp.batch`), as errors name it.
    pub key: &'static str,
    pub min: u64,
    pub max: u64,
    /// Why the limit is where it is, said after the range in an error.
    pub why: &'static str,
}

impl Bound {
    /// The one-line error for `value` outside the range (or not a number at all).
    fn refuse(&self, value: impl fmt::Display) -> PolicyError {
        PolicyError(format!(
            "{} = {value} is out of range: {}..={} ({})",
            self.key, self.min, self.max, self.why
        ))
    }

    fn check(&self, value: u64) -> Result<(), PolicyError> {
        if (self.min..=self.max).contains(&value) {
            Ok(())
        } else {
            Err(self.refuse(value))
        }
    }
}

/// `pcp.batch`: the kernel keeps a pcp's batch in an `int` and lets a run of frees grow to
/// `batch << CONFIG_PCP_BATCH_SCALE_MAX` (5) pages, which must fit that `int`: 2^26 - 1.
pub const PCP_BATCH: Bound = Bound {
    key: "pcp.batch",
    min: 1,
    max: (i32::MAX >> crate::alloc::pcp::PCP_BATCH_SCALE_MAX) as u64,
    why: "the kernel's int must hold batch << 5; at boot also at most the zone's pages",
};

/// `pcp.high`: `per_cpu_pages.high` is an `int` in the kernel. At boot it is further bounded by
/// the zone ([`Policy::check_zone`]): a pcp cannot hold more pages than its zone has.
pub const PCP_HIGH: Bound = Bound {
    key: "pcp.high",
    min: 1,
    max: i32::MAX as u64,
    why: "the kernel keeps pcp->high in an int; at boot also at most the zone's pages",
};

/// `alloc.prezero_pool`: a pool target in pages; the engine addresses at most `u32::MAX - 1`
/// frames (pfns are 32-bit, see `Arena::check_size`), and at boot the pool must fit the arena.
pub const PREZERO_POOL: Bound = Bound {
    key: "alloc.prezero_pool",
    min: 0,
    max: (u32::MAX - 1) as u64,
    why: "pages; no arena has more frames, and at boot the pool must fit the arena",
};

/// `mm.fault_around`: the kernel refuses a `fault_around_bytes` above one PTE table
/// (`val / PAGE_SIZE > PTRS_PER_PTE` is `-EINVAL` in mm/memory.c), 512 pages on x86-64.
pub const FAULT_AROUND: Bound = Bound {
    key: "mm.fault_around",
    min: 0,
    max: 512,
    why: "fault-around stays within one PTE table of 512 entries",
};

/// `lru.batch`: the kernel's per-CPU LRU batches never held more than 31 pages: `PAGEVEC_SIZE`
/// was 14, then 15, and `folio_batch` became 31 in 6.9-rc2 (9cecde80aae0), sized so that its
/// counters and pointers fill 256 bytes. A larger batch models no kernel.
pub const LRU_BATCH: Bound = Bound {
    key: "lru.batch",
    min: 1,
    max: 31,
    why: "no kernel's pagevec or folio_batch held more than 31 pages",
};

/// `memcg.charge_batch`: the kernel's `MEMCG_CHARGE_BATCH` was 32, then 64 (6.1); a stock is
/// a CPU's small reserve, and past one PTE table's worth (512) a group's limit of a few
/// thousand pages would sit mostly in stocks.
pub const MEMCG_CHARGE_BATCH: Bound = Bound {
    key: "memcg.charge_batch",
    min: 1,
    max: MemcgPolicy::MAX_CHARGE_BATCH as u64,
    why: "MEMCG_CHARGE_BATCH was 32, then 64; at most one PTE table's worth",
};

/// `mm.anon_prefault`: the pages mapped after the faulting one stay within its PTE table (the
/// fault maps them under that table's lock), so at most 511.
pub const ANON_PREFAULT: Bound = Bound {
    key: "mm.anon_prefault",
    min: 0,
    max: MmPolicy::MAX_ANON_PREFAULT as u64,
    why: "prefaulted pages stay within the faulting page's PTE table",
};

/// `mm.mmap_lock_line_reads`: the engine's fault has two points at which the kernel reads the
/// mm's and the VMA's hot fields ([`MmPolicy::MAX_LOCK_LINE_READS`]).
pub const MMAP_LOCK_LINE_READS: Bound = Bound {
    key: "mm.mmap_lock_line_reads",
    min: 0,
    max: MmPolicy::MAX_LOCK_LINE_READS as u64,
    why: "a fault reads the lock's line at most where it starts and where it builds its PTE",
};

/// `mm.vma_lock_line_reads`: as [`MMAP_LOCK_LINE_READS`], for the per-VMA lock's line.
pub const VMA_LOCK_LINE_READS: Bound = Bound {
    key: "mm.vma_lock_line_reads",
    min: 0,
    max: MmPolicy::MAX_LOCK_LINE_READS as u64,
    why: "a fault reads the lock's line at most where it starts and where it builds its PTE",
};

/// `mm.tlb_gather`: at least one page a flush, at most [`MmPolicy::MAX_TLB_GATHER`].
pub const TLB_GATHER: Bound = Bound {
    key: "mm.tlb_gather",
    min: 1,
    max: MmPolicy::MAX_TLB_GATHER as u64,
    why: "a gather flushes after at least one page and at most 1 GiB of 4 KiB pages",
};

/// Every numeric key of a profile, and whether it also takes `"auto"`.
const NUMERIC: [(&str, &str, Bound, bool); 10] = [
    ("pcp", "batch", PCP_BATCH, true),
    ("pcp", "high", PCP_HIGH, true),
    ("alloc", "prezero_pool", PREZERO_POOL, false),
    ("mm", "fault_around", FAULT_AROUND, false),
    ("lru", "batch", LRU_BATCH, false),
    ("memcg", "charge_batch", MEMCG_CHARGE_BATCH, false),
    ("mm", "anon_prefault", ANON_PREFAULT, false),
    ("mm", "mmap_lock_line_reads", MMAP_LOCK_LINE_READS, false),
    ("mm", "vma_lock_line_reads", VMA_LOCK_LINE_READS, false),
    ("mm", "tlb_gather", TLB_GATHER, false),
];

/// The line (1-based) where `key` is set inside `[section]`, for error messages.
fn key_line(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = "";
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim();
        } else if current == section
            && let Some(rest) = l.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(i + 1);
        }
    }
    None
}

/// Check the numeric keys on the raw TOML, before they are converted to their types: a value
/// that a `u32` cannot hold (negative, above 2^32, a float) must be refused naming its key, not
/// as a bare "invalid value" from the deserializer, nor wrapped into something else.
fn check_raw_numbers(text: &str, table: &toml::Table) -> Result<(), PolicyError> {
    for (section, key, bound, auto) in NUMERIC {
        let Some(v) = table
            .get(section)
            .and_then(toml::Value::as_table)
            .and_then(|t| t.get(key))
        else {
            continue;
        };
        let expected = if auto {
            format!("{}..={} or \"auto\"", bound.min, bound.max)
        } else {
            format!("{}..={}", bound.min, bound.max)
        };
        let err = match v {
            toml::Value::Integer(i) => match u64::try_from(*i) {
                Ok(u) => bound.check(u).err(),
                Err(_) => Some(bound.refuse(i)),
            },
            toml::Value::String(s) if auto && s == "auto" => None,
            toml::Value::Float(f) => {
                // Keep the line short for floats far from any page count (1e-300, 1e300).
                let shown = if *f == 0.0 || !f.is_finite() || (1e-3..1e15).contains(&f.abs()) {
                    v.to_string()
                } else {
                    format!("{f:e}")
                };
                Some(PolicyError(format!(
                    "{} = {shown} is not a whole number of pages: expected {expected}",
                    bound.key
                )))
            }
            other => Some(PolicyError(format!(
                "{} = {other} is not a number: expected {expected}",
                bound.key
            ))),
        };
        if let Some(PolicyError(msg)) = err {
            return Err(PolicyError(match key_line(text, section, key) {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            }));
        }
    }
    Ok(())
}

impl Policy {
    /// Parse a profile from TOML text and validate it.
    pub fn from_toml_str(text: &str) -> Result<Policy, PolicyError> {
        let syntax = |e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            PolicyError(match line {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            })
        };
        let table: toml::Table = toml::from_str(text).map_err(syntax)?;
        check_raw_numbers(text, &table)?;
        let policy: Policy = toml::from_str(text).map_err(syntax)?;
        policy.validate()?;
        Ok(policy)
    }

    /// The profile as TOML, every key written out (what the results store keeps as run).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).expect("a Policy always serialises")
    }

    /// Reject values out of the kernel's range (see the [`Bound`]s) and settings that
    /// contradict each other. Profiles built in code (tests, micro-benchmarks) get the same
    /// checks as files, at engine boot.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let p = &self.pcp;
        for (count, bound) in [(p.batch, PCP_BATCH), (p.high, PCP_HIGH)] {
            if let Count::Fixed(n) = count {
                bound.check(u64::from(n))?;
            }
        }
        PREZERO_POOL.check(u64::from(self.alloc.prezero_pool))?;
        FAULT_AROUND.check(u64::from(self.mm.fault_around))?;
        LRU_BATCH.check(u64::from(self.lru.batch))?;
        MEMCG_CHARGE_BATCH.check(u64::from(self.memcg.charge_batch))?;
        ANON_PREFAULT.check(u64::from(self.mm.anon_prefault))?;
        MMAP_LOCK_LINE_READS.check(u64::from(self.mm.mmap_lock_line_reads))?;
        VMA_LOCK_LINE_READS.check(u64::from(self.mm.vma_lock_line_reads))?;
        TLB_GATHER.check(u64::from(self.mm.tlb_gather))?;
        let around = self.mm.fault_around;
        if around != 0 && !around.is_power_of_two() {
            return Err(PolicyError(format!(
                "mm.fault_around = {around} is not a power of two: the kernel maps an aligned window of 2^n pages (it would silently round down to {}); use 0 for off",
                1u32 << around.ilog2()
            )));
        }
        if let (Count::Fixed(b), Count::Fixed(h)) = (p.batch, p.high)
            && b > h
        {
            return Err(PolicyError(format!(
                "pcp.batch ({b}) is larger than pcp.high ({h}): a pcp could never hold one batch"
            )));
        }
        if p.lists == PcpLists::None && p.tune == PcpTune::Adaptive {
            return Err(PolicyError(
                "pcp.tune = \"adaptive\" needs per-CPU lists, but pcp.lists = \"none\"".into(),
            ));
        }
        if self.lru.add == LruAdd::PerPage
            && self.lru.release_free == ReleaseFree::List
            && self.lru.batch != LruPolicy::default_batch()
        {
            return Err(PolicyError(
                "lru.batch has no effect with lru.add = \"per-page\" and lru.release_free = \"list\"; remove it or choose lru.add = \"batch\" or \"splice\"".into(),
            ));
        }
        if self.lru.mglru && self.lru.add == LruAdd::Splice {
            return Err(PolicyError(
                "lru.mglru needs lru.add = \"batch\" or \"per-page\": the 2018 splice was never combined with MGLRU".into(),
            ));
        }
        if !self.lru.mglru && self.lru.mglru_move != MglruMove::PerFolio {
            return Err(PolicyError(
                "lru.mglru_move has no effect without lru.mglru = true".into(),
            ));
        }
        let m = &self.memcg;
        if m.charge == MemcgCharge::Atomic && m.charge_batch != MemcgPolicy::default_batch() {
            return Err(PolicyError(
                "memcg.charge_batch has no effect with memcg.charge = \"atomic\"; remove it or choose \"stock\"".into(),
            ));
        }
        // A coverage narrower than the default without any VMA lock says something the profile
        // does not do (every fault takes mmap_lock): refused, as lru.batch is with per-page.
        if self.mm.vma_lock == VmaLock::None
            && self.mm.vma_lock_faults != MmPolicy::default_vma_lock_faults()
        {
            return Err(PolicyError(format!(
                "mm.vma_lock_faults = \"{}\" has no effect with mm.vma_lock = \"none\" (every fault takes mmap_lock); remove it or choose a VMA lock",
                self.mm.vma_lock_faults.name()
            )));
        }
        // Reads of the VMA lock's line need a lock word in the VMA: none without a VMA lock,
        // none in the lock-free fault (which reads only the VMA's sequence count).
        let lockless = match self.mm.vma_lock {
            VmaLock::None => Some("none"),
            VmaLock::Rcu => Some("rcu"),
            VmaLock::Rwsem | VmaLock::Refcount => None,
        };
        if let Some(kind) = lockless
            && self.mm.vma_lock_line_reads != 0
        {
            return Err(PolicyError(format!(
                "mm.vma_lock_line_reads = {} has no effect with mm.vma_lock = \"{kind}\" (no lock word in the VMA); remove it or choose \"rwsem\" or \"refcount\"",
                self.mm.vma_lock_line_reads
            )));
        }
        // The speculative fault validates its snapshot under the PTE lock it installs under;
        // Lameter's lockless install has no such lock.
        if self.mm.vma_lock == VmaLock::Rcu && self.mm.ptl == Ptl::Atomic {
            return Err(PolicyError(
                "mm.vma_lock = \"rcu\" needs a PTE lock to validate its fault under: choose mm.ptl = \"split\" or \"mm\", not \"atomic\"".into(),
            ));
        }
        if self.mm.mmap_lock == MmapLock::Range {
            if self.mm.vma_lock != VmaLock::None {
                return Err(PolicyError(
                    "mm.mmap_lock = \"range\" replaces the per-VMA lock (faults lock their page-table page): set mm.vma_lock = \"none\"".into(),
                ));
            }
            if self.mm.ptl != Ptl::Split {
                return Err(PolicyError(
                    "mm.mmap_lock = \"range\" keeps its locks with the split PTE locks: set mm.ptl = \"split\"".into(),
                ));
            }
        }
        if self.alloc.allocator == Allocator::Llfree {
            if p.lists != PcpLists::None {
                return Err(PolicyError(
                    "alloc.allocator = \"llfree\" replaces the per-CPU page lists: set pcp.lists = \"none\" (and pcp.tune = \"fixed\")".into(),
                ));
            }
            if self.alloc.prezero {
                return Err(PolicyError(
                    "alloc.prezero needs alloc.allocator = \"buddy\": the zeroer fills its pool from the buddy lists".into(),
                ));
            }
        }
        if self.alloc.prezero && self.alloc.prezero_pool == 0 {
            return Err(PolicyError(
                "alloc.prezero_pool must be at least 1 page when alloc.prezero = true".into(),
            ));
        }
        Ok(())
    }

    /// The bounds that depend on the machine, checked at engine boot once a zone's size is
    /// known: the resolved `batch` and `high` of a zone of `managed` pages. A pcp can never hold
    /// more pages than its zone has (the kernel derives `high` from the zone: `zone_highsize`),
    /// and a batch must fit in `high`, or the pcp could never keep one batch.
    pub fn check_zone(&self, managed: u64, batch: u32, high: u32) -> Result<(), PolicyError> {
        let zone = |why: &str| format!("a zone of this arena has {managed} pages{why}");
        match (self.pcp.batch, self.pcp.high) {
            (_, Count::Fixed(h)) if u64::from(h) > managed => Err(PolicyError(format!(
                "pcp.high = {h} is out of range: 1..={managed} ({}; a pcp cannot hold more)",
                zone("")
            ))),
            (Count::Fixed(b), Count::Auto) if u64::from(high) > managed => {
                let max = managed / 4;
                Err(PolicyError(format!(
                    "pcp.batch = {b} is out of range: 1..={max} ({}, and pcp.high = \"auto\" is at least 4 batches)",
                    zone("")
                )))
            }
            (Count::Auto, Count::Fixed(h)) if batch > high => Err(PolicyError(format!(
                "pcp.high = {h} is below this zone's automatic pcp.batch of {batch}: a pcp could never hold one batch ({})",
                zone("")
            ))),
            _ => Ok(()),
        }
    }

    /// The bound on the prezeroed pool, checked at boot once the arena's size is known: a pool
    /// larger than all of memory could never be filled, so the value cannot mean what it says.
    pub fn check_memory(&self, total_pages: u64) -> Result<(), PolicyError> {
        let pool = self.alloc.prezero_pool;
        if self.alloc.prezero && u64::from(pool) > total_pages {
            return Err(PolicyError(format!(
                "alloc.prezero_pool = {pool} is out of range: 1..={total_pages} (the arena has {total_pages} pages)"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_profile_is_the_modern_default() {
        let p = Policy::from_toml_str("").unwrap();
        assert_eq!(p, Policy::default());
        assert_eq!(p.pcp.lists, PcpLists::HighOrder);
        assert_eq!(p.locks.spinlock, LockKind::Queued);
    }

    #[test]
    fn full_profile_round_trips() {
        let text = r#"
            name = "linux-4.15"
            [locks]
            spinlock = "ticket"
            [pcp]
            lists = "order0"
            batch = 31
            high = 186
            tune = "fixed"
        "#;
        let p = Policy::from_toml_str(text).unwrap();
        assert_eq!(p.pcp.batch, Count::Fixed(31));
        assert_eq!(p.pcp.high, Count::Fixed(186));
        assert_eq!(p.locks.spinlock, LockKind::Ticket);
        let again = Policy::from_toml_str(&p.to_toml_string()).unwrap();
        assert_eq!(p, again);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Policy::from_toml_str("[pcp]\nbtach = 3\n").unwrap_err();
        assert!(e.0.contains("btach") && e.0.contains("line 2"), "{e}");
        assert!(!e.0.contains('\n'));
    }

    #[test]
    fn unknown_value_lists_the_allowed_ones() {
        let e = Policy::from_toml_str("[pcp]\nlists = \"order1\"\n").unwrap_err();
        assert!(e.0.contains("order1") && e.0.contains("high-order"), "{e}");
        let e = Policy::from_toml_str("[locks]\nspinlock = \"mcs\"\n").unwrap_err();
        assert!(e.0.contains("ticket") && e.0.contains("queued"), "{e}");
        let e = Policy::from_toml_str("[pcp]\nbatch = 0\n").unwrap_err();
        assert!(e.0.contains("pcp.batch = 0 is out of range: 1..="), "{e}");
        let e = Policy::from_toml_str("[pcp]\nhigh = \"lots\"\n").unwrap_err();
        assert!(e.0.contains("auto"), "{e}");
    }

    #[test]
    fn inconsistent_batch_and_high_rejected() {
        let e = Policy::from_toml_str("[pcp]\nbatch = 400\nhigh = 186\n").unwrap_err();
        assert!(
            e.0.contains("pcp.batch (400)") && e.0.contains("pcp.high (186)"),
            "{e}"
        );
        let e =
            Policy::from_toml_str("[pcp]\nlists = \"none\"\ntune = \"adaptive\"\n").unwrap_err();
        assert!(e.0.contains("pcp.tune"), "{e}");
    }

    #[test]
    fn lock_line_reads_are_bounded_and_need_a_lock_word() {
        let p = Policy::from_toml_str(
            "[mm]\nvma_lock = \"rwsem\"\nmmap_lock_line_reads = 1\nvma_lock_line_reads = 2\n",
        )
        .unwrap();
        assert_eq!(
            (p.mm.mmap_lock_line_reads, p.mm.vma_lock_line_reads),
            (1, 2)
        );
        let d = Policy::from_toml_str("").unwrap().mm;
        assert_eq!((d.mmap_lock_line_reads, d.vma_lock_line_reads), (0, 0));
        for key in ["mmap_lock_line_reads", "vma_lock_line_reads"] {
            let e = Policy::from_toml_str(&format!("[mm]\n{key} = 3\n")).unwrap_err();
            assert!(
                e.0.contains(&format!("mm.{key} = 3 is out of range: 0..=2"))
                    && e.0.contains("line 2"),
                "{e}"
            );
        }
        for kind in ["none", "rcu"] {
            let e = Policy::from_toml_str(&format!(
                "[mm]\nvma_lock = \"{kind}\"\nvma_lock_line_reads = 1\n"
            ))
            .unwrap_err();
            assert!(
                e.0.contains("mm.vma_lock_line_reads = 1 has no effect")
                    && e.0.contains(&format!("\"{kind}\"")),
                "{e}"
            );
        }
        // Every shipped profile states the layout of its kernel, within the bounds: pvl-v2 as
        // posted had its VMA lock in a `struct vma_lock` of its own, away from the VMA.
        let p = Policy::from_toml_str(include_str!("../../../profiles/pvl-v2.toml")).unwrap();
        assert_eq!(
            (p.mm.mmap_lock_line_reads, p.mm.vma_lock_line_reads),
            (1, 0)
        );
    }

    #[test]
    fn atomic_ptl_and_anon_prefault_are_checked() {
        let p = Policy::from_toml_str("[mm]\nptl = \"atomic\"\nanon_prefault = 511\n").unwrap();
        assert_eq!((p.mm.ptl, p.mm.anon_prefault), (Ptl::Atomic, 511));
        assert_eq!(Policy::from_toml_str("").unwrap().mm.anon_prefault, 0);
        let e = Policy::from_toml_str("[mm]\nptl = \"lockless\"\n").unwrap_err();
        assert!(
            e.0.contains("lockless")
                && e.0.contains("mm")
                && e.0.contains("split")
                && e.0.contains("atomic")
                && e.0.contains("line 2"),
            "{e}"
        );
        for bad in [512, 4096] {
            let e = Policy::from_toml_str(&format!("[mm]\nanon_prefault = {bad}\n")).unwrap_err();
            assert!(
                e.0.contains("mm.anon_prefault") && e.0.contains("511") && !e.0.contains('\n'),
                "{e}"
            );
        }
        for bad in [0, (1 << 18) + 1] {
            let e = Policy::from_toml_str(&format!("[mm]\ntlb_gather = {bad}\n")).unwrap_err();
            assert!(
                e.0.contains("mm.tlb_gather") && e.0.contains("262144") && !e.0.contains('\n'),
                "{e}"
            );
        }
        assert_eq!(
            Policy::from_toml_str("").unwrap().mm.tlb_gather,
            MmPolicy::GENERIC_TLB_GATHER
        );
        let e = Policy::from_toml_str("[mm]\nanon_prefault = -1\n").unwrap_err();
        assert!(
            e.0.contains("anon_prefault") || e.0.contains("line 2"),
            "{e}"
        );
    }

    #[test]
    fn memcg_charge_keys_are_checked() {
        let p = Policy::from_toml_str("[memcg]\ncharge = \"stock\"\ncharge_batch = 32\n").unwrap();
        assert_eq!(
            (p.memcg.charge, p.memcg.charge_batch),
            (MemcgCharge::Stock, 32)
        );
        let e = Policy::from_toml_str("[memcg]\ncharge = \"percpu\"\n").unwrap_err();
        assert!(
            e.0.contains("percpu") && e.0.contains("atomic") && e.0.contains("stock"),
            "{e}"
        );
        for bad in ["0", "513", "4000000000"] {
            let e = Policy::from_toml_str(&format!("[memcg]\ncharge_batch = {bad}\n")).unwrap_err();
            assert!(
                e.0.contains("memcg.charge_batch") && e.0.contains("1..=512"),
                "{e}"
            );
        }
        let e =
            Policy::from_toml_str("[memcg]\ncharge = \"atomic\"\ncharge_batch = 32\n").unwrap_err();
        assert!(e.0.contains("no effect"), "{e}");
        assert!(!e.0.contains('\n'));
    }

    fn refused(text: &str) -> String {
        let e = Policy::from_toml_str(text).unwrap_err().0;
        assert!(!e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn huge_pcp_batch_is_refused_naming_the_key() {
        let e = refused("[pcp]\nbatch = 4000000000\n");
        assert!(
            e.starts_with("line 2: pcp.batch = 4000000000 is out of range: 1..=67108863"),
            "{e}"
        );
        assert!(Policy::from_toml_str("[pcp]\nbatch = 67108863\n").is_ok());
        assert!(refused("[pcp]\nbatch = 67108864\n").contains("pcp.batch"));
    }

    #[test]
    fn values_no_u32_holds_name_their_key() {
        for (text, want) in [
            ("[pcp]\nbatch = -1\n", "pcp.batch = -1 is out of range"),
            (
                "[pcp]\nhigh = 4294967296\n",
                "pcp.high = 4294967296 is out of range",
            ),
            (
                "[pcp]\nhigh = 2147483648\n",
                "pcp.high = 2147483648 is out of range",
            ),
            (
                "[pcp]\nbatch = 31.5\n",
                "pcp.batch = 31.5 is not a whole number",
            ),
            (
                "[lru]\nbatch = nan\n",
                "lru.batch = nan is not a whole number",
            ),
            (
                "[mm]\nfault_around = \"16\"\n",
                "mm.fault_around = \"16\" is not a number",
            ),
            (
                "[alloc]\nprezero_pool = -5\n",
                "alloc.prezero_pool = -5 is out of range",
            ),
            (
                "[alloc]\nprezero_pool = 4294967295\n",
                "alloc.prezero_pool = 4294967295",
            ),
        ] {
            let e = refused(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn lru_batch_is_at_most_a_kernel_folio_batch() {
        assert!(Policy::from_toml_str("[lru]\nbatch = 31\n").is_ok());
        let e = refused("[lru]\nbatch = 32\n");
        assert!(e.contains("lru.batch = 32 is out of range: 1..=31"), "{e}");
    }

    #[test]
    fn fault_around_is_a_power_of_two_within_one_pte_table() {
        for ok in [0, 1, 2, 16, 512] {
            let text = format!("[mm]\nfault_around = {ok}\n");
            assert!(Policy::from_toml_str(&text).is_ok(), "{ok}");
        }
        let e = refused("[mm]\nfault_around = 1024\n");
        assert!(
            e.contains("mm.fault_around = 1024 is out of range: 0..=512"),
            "{e}"
        );
        let e = refused("[mm]\nfault_around = 24\n");
        assert!(e.contains("mm.fault_around = 24 is not a power of two") && e.contains("16"));
    }

    #[test]
    fn policies_built_in_code_get_the_same_bounds() {
        let mut p = Policy::default();
        p.pcp.batch = Count::Fixed(4_000_000_000);
        assert!(
            p.validate()
                .unwrap_err()
                .0
                .contains("pcp.batch = 4000000000")
        );
        let mut p = Policy::default();
        p.lru.batch = 64;
        assert!(p.validate().unwrap_err().0.contains("lru.batch = 64"));
    }

    fn boot(policy: &str, bytes: u64) -> Result<crate::alloc::Mem, String> {
        let p = Policy::from_toml_str(policy).map_err(|e| format!("parse: {e}"))?;
        crate::alloc::Mem::new(&crate::alloc::MemConfig::new(bytes, 2), &p)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn pcp_larger_than_its_zone_is_refused_at_boot() {
        // 4 MiB: a zone of 1024 pages.
        let e = boot(
            "[pcp]\ntune = \"fixed\"\nbatch = 31\nhigh = 5000\n",
            4 << 20,
        )
        .err()
        .unwrap();
        assert!(
            e.starts_with("pcp.high = 5000 is out of range: 1..=1024"),
            "{e}"
        );
        let e = boot("[pcp]\ntune = \"fixed\"\nbatch = 2000\n", 4 << 20)
            .err()
            .unwrap();
        assert!(
            e.starts_with("pcp.batch = 2000 is out of range: 1..=256"),
            "{e}"
        );
        let e = boot("[pcp]\ntune = \"fixed\"\nhigh = 2\n", 64 << 20)
            .err()
            .unwrap();
        assert!(
            e.contains("pcp.high = 2 is below this zone's automatic pcp.batch"),
            "{e}"
        );
        // The same values fit a zone large enough for them.
        boot(
            "[pcp]\ntune = \"fixed\"\nbatch = 310\nhigh = 1860\n",
            16 << 20,
        )
        .unwrap();
        boot(
            "[pcp]\ntune = \"fixed\"\nbatch = 310\nhigh = 1860\n",
            4 << 20,
        )
        .err()
        .unwrap();
    }

    #[test]
    fn prezero_pool_larger_than_the_arena_is_refused_at_boot() {
        let text = "[alloc]\nprezero = true\nprezero_pool = 100000\n";
        let e = boot(text, 4 << 20).err().unwrap();
        assert!(
            e.starts_with("alloc.prezero_pool = 100000 is out of range: 1..=1024"),
            "{e}"
        );
        boot("[alloc]\nprezero = true\nprezero_pool = 1000\n", 4 << 20).unwrap();
    }

    #[test]
    fn vma_lock_faults_and_munmap_downgrade_parse() {
        let p = Policy::from_toml_str(
            "[mm]\nvma_lock = \"rwsem\"\nvma_lock_faults = \"anon+swap\"\nmunmap_downgrade = false\n",
        )
        .unwrap();
        assert_eq!(p.mm.vma_lock_faults, VmaLockFaults::AnonSwap);
        assert!(!p.mm.munmap_downgrade);
        assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
        let d = Policy::default();
        assert_eq!(d.mm.vma_lock_faults, VmaLockFaults::All);
        assert!(d.mm.munmap_downgrade);
        assert!(VmaLockFaults::AnonSwap.swap() && !VmaLockFaults::AnonSwap.file());
        assert!(!VmaLockFaults::Anon.swap() && VmaLockFaults::All.file());
    }

    #[test]
    fn vma_lock_rcu_parses_and_round_trips() {
        let p = Policy::from_toml_str("[mm]\nvma_lock = \"rcu\"\nvma_lock_faults = \"anon\"\n")
            .unwrap();
        assert_eq!(p.mm.vma_lock, VmaLock::Rcu);
        assert_eq!(p.mm.vma_lock_faults, VmaLockFaults::Anon);
        assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
    }

    #[test]
    fn unknown_vma_lock_names_every_value_and_rcu_refuses_atomic_ptl() {
        let e = Policy::from_toml_str("[mm]\nvma_lock = \"seqlock\"\n").unwrap_err();
        for v in ["`none`", "`rwsem`", "`refcount`", "`rcu`"] {
            assert!(e.0.contains(v) && e.0.contains("line 2"), "{v}: {e}");
        }
        let e = Policy::from_toml_str("[mm]\nvma_lock = \"rcu\"\nptl = \"atomic\"\n").unwrap_err();
        assert!(
            e.0.contains("mm.vma_lock = \"rcu\"") && e.0.contains("mm.ptl") && !e.0.contains('\n'),
            "{e}"
        );
        Policy::from_toml_str("[mm]\nvma_lock = \"rcu\"\nptl = \"mm\"\n").unwrap();
    }

    #[test]
    fn bad_vma_lock_faults_and_munmap_downgrade_are_named() {
        let e = Policy::from_toml_str("[mm]\nvma_lock_faults = \"file\"\n").unwrap_err();
        assert!(
            e.0.contains("line 2")
                && e.0.contains("file")
                && e.0.contains("`anon`")
                && e.0.contains("`anon+swap`")
                && e.0.contains("`all`"),
            "{e}"
        );
        let e = Policy::from_toml_str("[mm]\nmunmap_downgrade = \"yes\"\n").unwrap_err();
        assert!(e.0.contains("line 2") && e.0.contains("bool"), "{e}");
        let e = Policy::from_toml_str("[mm]\nvma_lock = \"none\"\nvma_lock_faults = \"anon\"\n")
            .unwrap_err();
        assert!(
            e.0.contains("mm.vma_lock_faults") && e.0.contains("\"none\"") && !e.0.contains('\n'),
            "{e}"
        );
        // The default coverage with no VMA lock is what every pre-6.4 profile stores.
        Policy::from_toml_str("[mm]\nvma_lock = \"none\"\nvma_lock_faults = \"all\"\n").unwrap();
    }

    #[test]
    fn rwsem_algorithm_parses_and_unknown_values_name_the_allowed_ones() {
        assert_eq!(
            Policy::from_toml_str("").unwrap().locks.rwsem,
            RwsemAlgo::SpinWritersHandoff
        );
        for a in RwsemAlgo::ALL {
            let p = Policy::from_toml_str(&format!("[locks]\nrwsem = \"{a}\"\n")).unwrap();
            assert_eq!(p.locks.rwsem, a);
            assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
        }
        let e = refused("[locks]\nrwsem = \"mcs\"\n");
        assert!(e.starts_with("line 2"), "{e}");
        assert!(e.contains("`mcs`"), "{e}");
        for a in RwsemAlgo::ALL {
            assert!(e.contains(&format!("`{a}`")), "{e}");
        }
    }

    /// Every shipped profile says which rwsem its kernel had: waiters slept FIFO before 3.10,
    /// writers spin from 3.16, hand-off from 5.3 (reader spinning 5.3 to 5.10 only).
    #[test]
    fn shipped_profiles_name_their_eras_rwsem() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
        let mut seen = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains("rwsem = "), "{name} does not name its rwsem");
            let p = Policy::from_toml_str(&text).unwrap();
            let want = if name.starts_with("linux-2.6.") {
                RwsemAlgo::SleepFifo
            } else if p.mm.munmap_downgrade {
                // 4.20 and later kernels of the shipped set are all 6.x.
                RwsemAlgo::SpinWritersHandoff
            } else {
                RwsemAlgo::SpinWriters
            };
            assert_eq!(p.locks.rwsem, want, "{name}");
            seen += 1;
        }
        assert!(seen >= 17, "{seen}");
    }

    /// The shipped profiles set the issue-12 switches as their kernels did: munmap
    /// downgrades from 4.20, the per-VMA lock covers anonymous faults only in pvl-v2 (6.4)
    /// and every fault in 6.7 and later, and the unmap gather is ia64's in 2.6.13 and the
    /// chained generic one after.
    #[test]
    fn shipped_profiles_follow_their_kernels() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
        let before_4_20 = [
            "linux-2.6.13",
            "linux-2.6.13-prezero",
            "linux-2.6.13-rss-delta",
            "linux-2.6.13-split-ptl",
            "vanilla-4.9",
            "hopcpu",
            "linux-4.15",
            "large-zone-batch",
            "lru-lock-base",
            "lru-lock-splice",
        ];
        let mut seen = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let p = Policy::from_toml_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                text.contains("munmap_downgrade"),
                "{name} does not say whether munmap downgrades"
            );
            assert_eq!(
                p.mm.munmap_downgrade,
                !(before_4_20.contains(&name.as_str()) || name.starts_with("linux-2.6.")),
                "{name}: munmap_downgrade"
            );
            // x86 tries mmap_lock before waiting for it; the 2.6.13 profiles are the Altix's
            // ia64, whose fault calls down_read.
            assert_eq!(
                p.mm.mmap_read_trylock,
                !name.starts_with("linux-2.6."),
                "{name}: mmap_read_trylock"
            );
            // The Altix's ia64 gather of 2048 pages, the chained generic one of 9698 in every
            // later seed kernel (3.8 and after).
            assert_eq!(
                p.mm.tlb_gather,
                if name.starts_with("linux-2.6.") {
                    2048
                } else {
                    MmPolicy::GENERIC_TLB_GATHER
                },
                "{name}: tlb_gather"
            );
            let want = match name.as_str() {
                "pvl-v2" => VmaLockFaults::Anon,
                _ => VmaLockFaults::All,
            };
            assert_eq!(p.mm.vma_lock_faults, want, "{name}: vma_lock_faults");
            // release_pages: a pagevec freed as it fills in 2.6.13, a list freed after the
            // loop from 3.3 to 6.8, a folio batch freed as it fills from 6.9 (from a list, in
            // the merge window's first commits).
            let want = if name.starts_with("linux-2.6.")
                || name.starts_with("linux-6.15")
                || name == "pvl-refcount"
            {
                ReleaseFree::Batch
            } else if name == "folios-put" || name == "folio-batch-31" {
                ReleaseFree::BatchList
            } else {
                ReleaseFree::List
            };
            assert_eq!(p.lru.release_free, want, "{name}: release_free");
            // update_lru_size: the lruvec's sizes only in 2.6.13, the node's and zone's per-CPU
            // page state from 4.8, the memcg's per-CPU statistics too from 5.2; lru_add's
            // test-and-clear of PG_unevictable from 4.16.
            let (stats, clears) = if name.starts_with("linux-2.6.") {
                (LruSizeStats::Lruvec, false)
            } else if before_4_20.contains(&name.as_str()) {
                (LruSizeStats::Vmstat, false)
            } else {
                (LruSizeStats::Memcg, true)
            };
            assert_eq!(p.lru.size_stats, stats, "{name}: size_stats");
            assert_eq!(
                p.lru.add_clears_unevictable, clears,
                "{name}: add_clears_unevictable"
            );
            // Every x86 and ia64 kernel before 6.16 prefetches mmap_lock's line at the fault
            // entry; the one profile that models 1701771d3069 does not.
            assert_eq!(
                p.mm.fault_prefetch_mmap_lock,
                name != "linux-6.15-no-entry-prefetch",
                "{name}: fault_prefetch_mmap_lock"
            );
            seen += 1;
        }
        assert!(
            seen >= 17,
            "only {seen} profiles found in {}",
            dir.display()
        );
    }
}
