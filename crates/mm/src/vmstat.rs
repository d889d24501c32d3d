//! Event counters (`include/linux/vm_event_item.h`, `count_vm_event`).
//!
//! One set of counters per virtual CPU, each set in its own cache line and written only by the
//! task running on that CPU (`Relaxed` increments, no shared line on the fast path); readers sum
//! over CPUs. What a benchmark reports beside its throughput comes from here and from the locks'
//! own statistics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cpu::{CpuId, PerCpu};

/// `calculate_normal_threshold` (mm/vmstat.c): how far a CPU's page-state differential may
/// drift before it is folded into the zone's (node's) counter: twice the bit length of the CPU
/// count times one more than the bit length of the zone's size in 128 MiB units, at most 125.
pub fn stat_threshold(managed_pages: u64, nr_cpus: usize) -> i64 {
    let fls = |x: u64| i64::from(64 - x.leading_zeros());
    let mem = managed_pages >> (27 - 12);
    (2 * fls(nr_cpus as u64) * (1 + fls(mem))).min(125)
}

macro_rules! vm_events {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)*) => {
        /// A counted event.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum VmEvent { $($(#[$doc])* $name,)* }

        impl VmEvent {
            pub const ALL: &'static [VmEvent] = &[$(VmEvent::$name,)*];
            /// The name printed in reports (the kernel's `/proc/vmstat` spelling where one exists).
            pub fn label(self) -> &'static str {
                match self { $(VmEvent::$name => $label,)* }
            }
        }
    };
}

vm_events! {
    /// Pages allocated (`pgalloc`), counted in pages.
    PgAlloc => "pgalloc",
    /// Pages freed (`pgfree`), counted in pages.
    PgFree => "pgfree",
    /// Allocations served from a per-CPU list.
    PcpAllocHit => "pcp_alloc_hit",
    /// Per-CPU list refills from the zone (`rmqueue_bulk` calls): one zone->lock hold each.
    PcpRefill => "pcp_refill",
    /// Bulk frees from a per-CPU list to the zone (`free_pcppages_bulk` calls).
    PcpDrain => "pcp_drain",
    /// Whole-list drains (`drain_pages_zone`), local or remote.
    PcpDrainAll => "pcp_drain_all",
    /// pcp trylock failed (a remote drain held it) and the operation fell back to the zone.
    PcpTrylockFail => "pcp_trylock_fail",
    /// Allocations served straight from the buddy lists (`rmqueue_buddy`).
    ZoneAlloc => "zone_alloc",
    /// Frees straight to the buddy lists (`free_one_page`).
    ZoneFree => "zone_free",
    /// A free block of another migratetype was used (`__rmqueue_fallback`).
    MigrateFallback => "migrate_fallback",
    /// A zone failed its watermark check for an allocation.
    WmarkFail => "wmark_fail",
    /// Allocations that found no memory at all.
    AllocFail => "alloc_fail",
    /// Zeroed allocations served from the prezeroed pool.
    PrezeroHit => "prezero_hit",
    /// Zeroed allocations zeroed inline (pool empty or off).
    ZeroInline => "zero_inline",
    /// Pages zeroed by the background zeroer.
    PrezeroFill => "prezero_fill",
    /// Page faults handled (`pgfault`).
    PgFault => "pgfault",
    /// Anonymous zero-fill faults.
    FaultAnon => "fault_anon",
    /// File read faults (the faulting page).
    FaultFileRead => "fault_file_read",
    /// Extra pages mapped by fault-around.
    FaultAround => "fault_around_pages",
    /// Copy-on-write faults (private file write, write to a shared anonymous copy).
    FaultCow => "fault_cow",
    /// Shared file write faults.
    FaultShared => "fault_shared",
    /// Write faults that found the page writable after all (raced with another thread).
    FaultSpurious => "fault_spurious",
    /// A fault took its VMA's per-VMA lock (`vma_lock_success`).
    VmaLockSuccess => "vma_lock_success",
    /// The per-VMA lock was refused and the fault fell back to mmap_lock (`vma_lock_abort`).
    VmaLockAbort => "vma_lock_abort",
    /// The fault started under the per-VMA lock but had to be retried under mmap_lock
    /// (`vma_lock_retry`).
    VmaLockRetry => "vma_lock_retry",
    /// No VMA was found under RCU (`vma_lock_miss`).
    VmaLockMiss => "vma_lock_miss",
    /// A fault on a file-backed VMA took mmap_lock because the profile's per-VMA lock covers
    /// anonymous VMAs only (`mm.vma_lock_faults` before "all"). Also counted in
    /// `vma_lock_abort`, as the kernel counts it.
    VmaLockFallbackFile => "vma_lock_fallback_file",
    /// A fault on an anonymous VMA without an anon_vma took mmap_lock (6.4's
    /// `lock_vma_under_rcu` refused such VMAs). Also counted in `vma_lock_abort`.
    VmaLockFallbackAnonVma => "vma_lock_fallback_anon_vma",
    /// A swap-in started under the VMA lock was retried under mmap_lock (6.4 and 6.5). Also
    /// counted in `vma_lock_retry`.
    VmaLockFallbackSwap => "vma_lock_fallback_swap",
    /// A lock-free fault (`mm.vma_lock = "rcu"`) found a page-table level missing and retried
    /// under mmap_lock (speculative faults do not allocate page tables). Also counted in
    /// `vma_lock_retry`.
    VmaRcuFallbackPgtable => "vma_rcu_fallback_pgtable",
    /// A lock-free fault found its VMA's sequence count changed when it validated under the
    /// PTE lock (a concurrent munmap) and retried under mmap_lock. Also counted in
    /// `vma_lock_retry`.
    VmaRcuFallbackSeq => "vma_rcu_fallback_seq",
    /// munmaps that downgraded mmap_lock to read for the zap, TLB flush and freeing
    /// (`mm.munmap_downgrade`).
    MunmapDowngrade => "munmap_downgrade",
    /// Faults handled under mmap_lock held for read.
    FaultMmapLock => "fault_mmap_lock",
    /// TLB shootdown IPIs sent.
    TlbShootdownIpi => "tlb_shootdown_ipi",
    /// Pages freed by unmaps (`tlb_remove_page`).
    UnmapPages => "unmap_pages",
    /// Pages written to a swap device (`pswpout`).
    PSwpOut => "pswpout",
    /// Pages read from a swap device (`pswpin`).
    PSwpIn => "pswpin",
    /// Per-CPU swap slot cache refills (`refill_swap_slots_cache`): one swap device lock hold
    /// each.
    SwapSlotRefill => "swap_slot_cache_refill",
    /// Per-CPU swap slot return arrays given back in one batch (`swapcache_free_entries` from
    /// `free_swap_slot`): one swap device lock hold each.
    SwapSlotFlush => "swap_slot_cache_flush",
    /// Whole swap slot cache drains (`drain_slots_cache_cpu`), including deactivations.
    SwapSlotDrain => "swap_slot_cache_drain",
    /// A swap slot cache trylock failed (a drain held it) and the operation went to the device.
    SwapSlotTrylockFail => "swap_slot_trylock_fail",
    /// Swap slot allocations that found the device full.
    SwapAllocFail => "swap_alloc_fail",
    /// Direct reclaim entered by an allocation that failed (`allocstall`).
    DirectReclaim => "allocstall",
    /// Reclaim passes on behalf of a memory cgroup at its limit (`try_to_free_mem_cgroup_pages`).
    MemcgReclaim => "memcg_reclaim",
    /// kswapd wake-ups by an allocation that found a zone under its low watermark.
    KswapdWake => "kswapd_wake",
    /// MGLRU generations opened by aging (`inc_max_seq`).
    MglruAging => "mglru_aging",
    /// Address spaces MGLRU's walk skipped because their `mmap_lock` was contended.
    MglruWalkSkip => "mglru_walk_skip",
    /// MGLRU moves between generation lists: one per folio, or one per spliced run (bulk).
    MglruGenMoved => "mglru_gen_moves",
    /// Folios eviction moved to the generation the walk found them young in.
    MglruPromoted => "mglru_promoted",
    /// Folios eviction kept because their tier is protected.
    MglruProtected => "mglru_protected",
    /// Pages reclaimed by kswapd (`pgsteal_kswapd`).
    PgStealKswapd => "pgsteal_kswapd",
    /// Pages taken off an inactive list to be reclaimed (`pgscan`).
    PgScan => "pgscan",
    /// Pages reclaimed (`pgsteal`).
    PgSteal => "pgsteal",
    /// Dirty page-cache pages written back by reclaim (`pgpgout` of file pages).
    FileWriteback => "file_writeback",
    /// Page-cache pages read back from a file's backing store after eviction (`pgpgin`).
    FileRead => "file_read",
    /// Pages moved to an active list by reclaim (`pgactivate`).
    PgActivate => "pgactivate",
    /// Pages moved to an inactive list by reclaim (`pgdeactivate`).
    PgDeactivate => "pgdeactivate",
    /// Faults on a swap PTE (`do_swap_page`).
    FaultSwap => "fault_swap",
    /// Swap-in faults that found the page still in the swap cache.
    SwapInCacheHit => "swapin_cache_hit",
    /// Swap-ins of pages with a shadow entry (`workingset_refault_anon`).
    WorkingsetRefault => "workingset_refault_anon",
    /// Refaults close enough to be activated at once (`workingset_activate_anon`).
    WorkingsetActivate => "workingset_activate_anon",
    /// Allocations that failed after reclaim found nothing more to free.
    Oom => "oom_kill",
}

const NR_EVENTS: usize = VmEvent::ALL.len();

/// Per-CPU event counters.
pub struct VmEvents {
    cpus: PerCpu<[AtomicU64; NR_EVENTS]>,
}

impl VmEvents {
    pub fn new(nr_cpus: usize) -> Self {
        VmEvents {
            cpus: PerCpu::new(nr_cpus, |_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// `count_vm_events`. Only the task on `cpu` calls this for `cpu`, except background threads,
    /// which use the last CPU slot (kernel threads also run on some CPU).
    #[inline]
    pub fn count(&self, cpu: CpuId, ev: VmEvent, n: u64) {
        self.cpus[cpu][ev as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Sum over CPUs (`all_vm_events`).
    pub fn sum(&self, ev: VmEvent) -> u64 {
        self.cpus
            .iter()
            .map(|(_, c)| c[ev as usize].load(Ordering::Relaxed))
            .sum()
    }

    pub fn snapshot(&self) -> Vec<(VmEvent, u64)> {
        VmEvent::ALL.iter().map(|&e| (e, self.sum(e))).collect()
    }

    pub fn reset(&self) {
        for (_, c) in self.cpus.iter() {
            for a in c {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}
