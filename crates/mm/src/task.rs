//! Tasks: the threads of the simulated programs.
//!
//! A `Task` runs on one virtual CPU for its whole life and belongs to one address space; several
//! tasks sharing an `Mm` are threads of one process, a task with an `Mm` of its own is a
//! process. Its accesses go through the engine's software MMU: a load or store walks the page
//! table, sets the accessed and dirty bits as hardware would, and lands in the arena frame; a
//! missing or read-only translation takes the fault path, exactly as a real access traps.
//!
//! A task holds what the kernel keeps per task for these paths: its RCU reader slot, its
//! unfolded RSS deltas (per-thread RSS policy) and its TLB mailbox state.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pagelab_sync::RcuReader;

use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::page::PAGE_SIZE;
use crate::vm::fault::{FaultCtx, FaultError};
use crate::vm::mm::{MapKind, Mm, MmError};
use crate::vm::rss::TaskRss;

/// A thread of a simulated program.
pub struct Task {
    k: Arc<Kernel>,
    mm: Arc<Mm>,
    cpu: CpuId,
    rcu: RcuReader,
    rss: TaskRss,
    /// Time faults when set (for reports that split user and system time).
    time_faults: Cell<bool>,
    fault_ns: Cell<u64>,
}

impl Task {
    pub(crate) fn new(k: Arc<Kernel>, mm: Arc<Mm>, cpu: CpuId) -> Task {
        assert!(
            cpu.idx() < k.nr_cpus(),
            "{cpu:?} beyond the engine's {} CPUs",
            k.nr_cpus()
        );
        let rcu = pagelab_sync::RcuDomain::register(k.rcu())
            .expect("more tasks than RCU reader slots (2 per CPU)");
        mm.tlb.return_to_user(cpu);
        Task {
            k,
            mm,
            cpu,
            rcu,
            rss: TaskRss::default(),
            time_faults: Cell::new(false),
            fault_ns: Cell::new(0),
        }
    }

    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    pub fn mm(&self) -> &Arc<Mm> {
        &self.mm
    }

    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.k
    }

    fn ctx(&self) -> FaultCtx<'_> {
        FaultCtx {
            k: &self.k,
            mm: &self.mm,
            cpu: self.cpu,
            rss: &self.rss,
        }
    }

    /// The thread running this task counts its lock statistics into the task's kernel: the
    /// thread is this virtual CPU from here on. A thread-local compare when it already does, so
    /// every kernel entry calls it (tasks are built on one thread and run on another).
    #[inline]
    fn enter_lock_stats(&self) {
        self.k.mem().enter_lock_stats();
    }

    /// `mmap`: map `len` bytes; returns the address.
    pub fn mmap(&self, len: u64, writable: bool, kind: MapKind) -> Result<u64, MmError> {
        self.enter_lock_stats();
        self.mm.tlb.enter_kernel(self.cpu);
        let g = self.rcu.lock();
        let r = self.mm.mmap(&g, self.cpu, len, writable, kind);
        drop(g);
        self.mm.tlb.return_to_user(self.cpu);
        r
    }

    /// `mmap(MAP_FIXED)`: map `len` bytes at `addr`, replacing what is mapped there.
    pub fn mmap_fixed(
        &self,
        addr: u64,
        len: u64,
        writable: bool,
        kind: MapKind,
    ) -> Result<u64, MmError> {
        self.enter_lock_stats();
        self.mm.tlb.enter_kernel(self.cpu);
        let g = self.rcu.lock();
        let r = self.mm.mmap_fixed(&g, self.cpu, addr, len, writable, kind);
        drop(g);
        self.mm.tlb.return_to_user(self.cpu);
        r
    }

    /// `munmap`.
    pub fn munmap(&self, addr: u64, len: u64) -> Result<(), MmError> {
        self.enter_lock_stats();
        self.mm.tlb.enter_kernel(self.cpu);
        let g = self.rcu.lock();
        let r = self.mm.munmap(&g, self.cpu, addr, len);
        drop(g);
        self.mm.tlb.return_to_user(self.cpu);
        r
    }

    /// Time every fault from now on (costs two clock reads per fault), so that
    /// [`Task::fault_ns`] can report the task's "system time".
    pub fn set_fault_timing(&self, on: bool) {
        self.time_faults.set(on);
    }

    /// Nanoseconds spent in faults while timing was on; `None` if it never was.
    pub fn fault_ns(&self) -> Option<u64> {
        self.time_faults.get().then(|| self.fault_ns.get())
    }

    /// Take a page fault at `addr` (what an access that missed its translation does).
    pub fn fault(&self, addr: u64, write: bool) -> Result<(), FaultError> {
        // The exception a real CPU would take here (its entry and return cost nothing on the
        // engine; a trace marks both, for the replay to charge).
        pagelab_sync::trace::trap();
        let r = if self.time_faults.get() {
            let t = Instant::now();
            let r = self.fault_untimed(addr, write);
            self.fault_ns
                .set(self.fault_ns.get() + t.elapsed().as_nanos() as u64);
            r
        } else {
            self.fault_untimed(addr, write)
        };
        pagelab_sync::trace::trap_return();
        r
    }

    #[inline]
    fn fault_untimed(&self, addr: u64, write: bool) -> Result<(), FaultError> {
        self.enter_lock_stats();
        self.mm.tlb.enter_kernel(self.cpu);
        let g = self.rcu.lock();
        let r = self.ctx().fault(&g, addr, write);
        drop(g);
        self.k.drain_deferred_mms();
        self.mm.tlb.return_to_user(self.cpu);
        r
    }

    #[inline]
    fn word_index(addr: u64) -> usize {
        (addr as usize % PAGE_SIZE) / 8
    }

    /// Store a 64-bit word at `addr` (8-byte aligned).
    #[inline]
    pub fn store(&self, addr: u64, val: u64) -> Result<(), FaultError> {
        debug_assert_eq!(addr % 8, 0, "unaligned store");
        self.mm.tlb.ack(self.cpu);
        loop {
            if let Some(pfn) = self.mm.pgtable.translate(addr, true) {
                self.k.mem().arena().words(pfn)[Self::word_index(addr)]
                    .store(val, Ordering::Relaxed);
                return Ok(());
            }
            self.fault(addr, true)?;
        }
    }

    /// Load a 64-bit word from `addr` (8-byte aligned).
    #[inline]
    pub fn load(&self, addr: u64) -> Result<u64, FaultError> {
        debug_assert_eq!(addr % 8, 0, "unaligned load");
        self.mm.tlb.ack(self.cpu);
        loop {
            if let Some(pfn) = self.mm.pgtable.translate(addr, false) {
                return Ok(
                    self.k.mem().arena().words(pfn)[Self::word_index(addr)].load(Ordering::Relaxed)
                );
            }
            self.fault(addr, false)?;
        }
    }

    /// Fold this task's RSS deltas into the mm (`sync_mm_rss`).
    pub fn sync_rss(&self) {
        self.enter_lock_stats();
        self.mm.rss.sync_task(&self.rss);
    }

    /// Flush this CPU's LRU add batch (`lru_add_drain`).
    pub fn lru_add_drain(&self) {
        self.enter_lock_stats();
        self.k.lru().drain(self.cpu);
    }

    /// Stop running the mm (between phases): other CPUs' shootdowns stop waiting for us.
    pub fn idle(&self) {
        self.mm.tlb.leave(self.cpu);
    }

    /// Resume after [`Task::idle`].
    pub fn resume(&self) {
        self.enter_lock_stats();
        self.mm.tlb.return_to_user(self.cpu);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // do_exit: fold RSS, leave the mm's CPU mask, flush our LRU batch.
        self.sync_rss();
        self.mm.tlb.leave(self.cpu);
        self.k.lru().drain(self.cpu);
        self.k.drain_deferred_mms();
    }
}
