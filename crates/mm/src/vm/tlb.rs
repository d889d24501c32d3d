//! TLB shootdown and the unmap gather (mm/mmu_gather.c, arch/x86/mm/tlb.c).
//!
//! When an address space loses a mapping, every other CPU running it may still hold the old
//! translation in its TLB, so the unmapping CPU sends an IPI to each and waits for their
//! acknowledgement before the pages may be freed (`flush_tlb_mm_range`). That wait, multiplied
//! by the CPUs in `mm_cpumask`, is a large part of why munmap-heavy workloads stop scaling in
//! threads mode.
//!
//! The model (policy `tlb_shootdown = "ipi"`): each virtual CPU running the mm has a mailbox.
//! A task is "in user mode" while it runs the workload's accesses and acknowledges pending
//! flushes at its next access; while it is inside the engine (a fault, mmap, munmap) it counts
//! as having flushed (the kernel would handle the IPI there at once) and acknowledges on its
//! return to user mode. The unmapper posts a request to every other CPU in user mode and waits
//! for each to acknowledge or to enter the engine. With `none`, nothing is sent.
//!
//! The gather (`struct mmu_gather`) collects the pages an unmap removed, up to the profile's
//! `mm.tlb_gather` pages, and frees them after the flush, [`MAX_GATHER_BATCH`] at a time, as
//! `tlb_flush_mmu` does.

use crossbeam_utils::CachePadded;
use pagelab_sync::Backoff;
use pagelab_sync::shim::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::cpu::CpuId;
use crate::page::Pfn;
use crate::vm::pgtable::PTRS_PER_TABLE;
use crate::vmstat::VmEvent;

/// Pages per gather batch: what fits in one page of pointers on x86-64
/// (`MAX_GATHER_BATCH`).
pub const MAX_GATHER_BATCH: usize = 510;

/// Pages the gather holds on the stack before it needs a batch page (`MMU_GATHER_BUNDLE`).
pub const MMU_GATHER_BUNDLE: usize = 8;

/// Batch pages one gather may chain before it must flush (`MAX_GATHER_BATCH_COUNT`, 3.8+).
pub const MAX_GATHER_BATCH_COUNT: usize = 10_000 / MAX_GATHER_BATCH;

/// What the generic gather holds before it flushes: the bundle and every batch it may chain,
/// 9698 pages (the default of `mm.tlb_gather`).
pub const GENERIC_GATHER_PAGES: usize =
    MMU_GATHER_BUNDLE + MAX_GATHER_BATCH_COUNT * MAX_GATHER_BATCH;
const _: () = assert!(GENERIC_GATHER_PAGES == 9698);

struct Mailbox {
    in_user: AtomicBool,
    requested: AtomicU64,
    done: AtomicU64,
}

/// Per-mm shootdown state: one mailbox per virtual CPU (`mm_cpumask`).
pub struct TlbState {
    cpus: Box<[CachePadded<Mailbox>]>,
    enabled: bool,
    /// Whether CPUs' user/kernel state is tracked at all: always when IPIs are modelled, and
    /// also when reclaim may unmap pages behind a task's back (a swap device is configured):
    /// reclaim must wait for in-flight stores whatever the policy says about munmap.
    tracking: bool,
}

impl TlbState {
    /// `enabled`: munmap shoots down other CPUs (the policy); `track`: keep the per-CPU
    /// state reclaim's [`TlbState::flush_for_reclaim`] needs.
    pub fn new(nr_cpus: usize, enabled: bool, track: bool) -> Self {
        TlbState {
            cpus: (0..nr_cpus)
                .map(|_| {
                    CachePadded::new(Mailbox {
                        in_user: AtomicBool::new(false),
                        requested: AtomicU64::new(0),
                        done: AtomicU64::new(0),
                    })
                })
                .collect(),
            enabled,
            tracking: enabled || track,
        }
    }

    /// Acknowledge pending flushes (a TLB flush on this CPU). Called at every access.
    #[inline]
    pub fn ack(&self, cpu: CpuId) {
        if !self.tracking {
            return;
        }
        let m = &self.cpus[cpu.idx()];
        let r = m.requested.load(Ordering::Acquire);
        if m.done.load(Ordering::Relaxed) != r {
            m.done.store(r, Ordering::Release);
        }
    }

    /// Whether a flush was requested from `cpu` and not yet acknowledged (a snapshot): a
    /// shootdown is waiting for it.
    pub fn pending(&self, cpu: CpuId) -> bool {
        let m = &self.cpus[cpu.idx()];
        m.done.load(Ordering::Acquire) != m.requested.load(Ordering::Acquire)
    }

    /// The task on `cpu` enters the engine (kernel mode).
    #[inline]
    pub fn enter_kernel(&self, cpu: CpuId) {
        if self.tracking {
            self.cpus[cpu.idx()].in_user.store(false, Ordering::SeqCst);
            self.ack(cpu);
        }
    }

    /// The task on `cpu` returns to the workload (user mode).
    #[inline]
    pub fn return_to_user(&self, cpu: CpuId) {
        if self.tracking {
            self.cpus[cpu.idx()].in_user.store(true, Ordering::SeqCst);
            self.ack(cpu);
        }
    }

    /// The task on `cpu` stops running this mm (exit, or idle between phases).
    pub fn leave(&self, cpu: CpuId) {
        self.enter_kernel(cpu);
    }

    /// `flush_tlb_mm_range` from `cpu`: IPI every other CPU in user mode and wait for their
    /// acknowledgements. Returns the number of IPIs sent.
    pub fn shootdown(&self, cpu: CpuId, events: &crate::vmstat::VmEvents) -> u64 {
        if !self.enabled {
            return 0;
        }
        self.flush_others(cpu, events)
    }

    /// The flush reclaim does after unmapping a page (`try_to_unmap_flush`), before it reads
    /// or frees the page: every other CPU in user mode may be in the middle of a store through
    /// the old translation. Done whenever the state is tracked, whatever the munmap policy.
    pub fn flush_for_reclaim(&self, cpu: CpuId, events: &crate::vmstat::VmEvents) -> u64 {
        assert!(
            self.tracking,
            "reclaim unmapping from an mm whose CPUs are not tracked"
        );
        // No CPU is skipped: a reclaiming task's own CPU is in kernel mode (not waited for),
        // while kswapd borrows a CPU id whose task may well be in user mode.
        self.flush_cpus(cpu, None, events)
    }

    fn flush_others(&self, cpu: CpuId, events: &crate::vmstat::VmEvents) -> u64 {
        self.flush_cpus(cpu, Some(cpu), events)
    }

    /// Ask every CPU in user mode except `skip` to flush, and wait for each to acknowledge
    /// (or leave user mode). Counted on `cpu`.
    fn flush_cpus(&self, cpu: CpuId, skip: Option<CpuId>, events: &crate::vmstat::VmEvents) -> u64 {
        // On a machine, an IPI to every other CPU running the mm; replay decides which.
        pagelab_sync::trace::tlb_flush(&MM_CPUMASK, self as *const Self as usize);
        let mut sent: Vec<(usize, u64)> = Vec::new();
        for (i, m) in self.cpus.iter().enumerate() {
            if Some(i) != skip.map(CpuId::idx) && m.in_user.load(Ordering::SeqCst) {
                let req = m.requested.fetch_add(1, Ordering::AcqRel) + 1;
                sent.push((i, req));
            }
        }
        for &(i, req) in &sent {
            let m = &self.cpus[i];
            let mut b = Backoff::new();
            while m.done.load(Ordering::Acquire) < req && m.in_user.load(Ordering::SeqCst) {
                b.snooze();
            }
        }
        let n = sent.len() as u64;
        if n > 0 {
            events.count(cpu, VmEvent::TlbShootdownIpi, n);
        }
        n
    }
}

/// `mm_cpumask(mm)`: the CPUs a TLB flush of the mm must reach, one set per mm.
pub static MM_CPUMASK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("tlb shootdown", pagelab_sync::Scope::Mm);

/// Pages waiting to be freed after the TLB flush (`struct mmu_gather`).
pub struct MmuGather {
    pub pages: Vec<Pfn>,
    /// Pages it holds before the unmap must flush (`mm.tlb_gather`).
    cap: usize,
}

impl MmuGather {
    /// A gather that holds `cap` pages (at least one) before it is full.
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        MmuGather {
            // Full is checked at a PTE table's end, so it may hold a table less one page more.
            pages: Vec::with_capacity((cap + PTRS_PER_TABLE - 1).min(1 << 15)),
            cap,
        }
    }

    #[inline]
    pub fn push(&mut self, pfn: Pfn) {
        self.pages.push(pfn);
    }

    pub fn is_full(&self) -> bool {
        self.pages.len() >= self.cap
    }
}
