//! RadixVM's `mapbench` (Clements, Kaashoek, Zeldovich, EuroSys'13; `bin/mapbench.cc` of the
//! xv6/sv6 RadixVM tree).
//!
//! RadixVM keeps an address space's metadata in a radix tree indexed by page and locks only
//! the nodes an operation covers, so that mmap, faults and munmap of non-overlapping regions
//! share no cache line; Linux serialises all of them on `mmap_lock` (and today on per-VMA
//! locks, the VMA tree and the shared RSS and TLB state). mapbench was written to show it:
//!
//! - **local** (`mapbench`): each thread repeatedly maps a region of its own (`npg` pages,
//!   default 1), writes one byte in every page (a fault each) and unmaps it; RadixVM reports
//!   iterations (and page touches) per second over 5 s after a 1 s warm-up, on up to 80 cores,
//!   and scaled perfectly where Linux collapsed on `mmap_sem`. Here it runs like will-it-scale
//!   (one counter per task, sampled per interval), in threads or processes mode; the metric
//!   `ops/sec` counts iterations.
//! - **shared** (`mapbench-shared`): the threads share one region, the original's "global"
//!   mode (each core faults pages of a region all cores use, so unmapping it must shoot down
//!   every core's TLB). Per round, task 0 maps one VMA of `tasks * npg` pages; every task then
//!   writes every page of it, starting at its own slice (the first writer of a page faults it,
//!   the others find it mapped); after all have written, each task unmaps its own slice (the
//!   kernel splits the VMA, and every page was in every task's TLB). The original has each core
//!   map its own part with `MAP_FIXED` and touch random pages; here one task maps the whole,
//!   which makes it one VMA on both targets by construction, where the original relied on
//!   Linux merging the parts (the CortenMM workloads' `-high` forms are the ones that use
//!   `MAP_FIXED`, [`crate::cortenmm`]). Each task times its round from the start
//!   barrier to its unmap, waits for the others included ([`crate::rounds`]; task 0's mapping of
//!   the region is not timed); the metric `ops/sec` counts one iteration per task per round.
//!   Threads only: the point is one address space.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::WorkloadError;
use crate::rounds::{RoundBody, RoundCtx};
use crate::runner::bump;
use crate::vm::Vm;

const PAGE: u64 = 4096;
/// The original's default region, in pages.
pub const PAGES: u64 = 1;

/// mapbench local: one task's loop until `stop`, one count per iteration (map, touch every
/// page, unmap).
pub fn local_loop<V: Vm>(
    vm: &V,
    pages: u64,
    counter: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), WorkloadError> {
    if pages == 0 {
        return Err(WorkloadError::Config(
            "mapbench maps at least one page".into(),
        ));
    }
    let len = pages * PAGE;
    while !stop.load(Ordering::Relaxed) {
        let a = vm.mmap_anon(len)?;
        let mut r = Ok(());
        for p in 0..pages {
            r = vm.store(a + p * PAGE);
            if r.is_err() {
                break;
            }
        }
        vm.munmap(a, len)?;
        r?;
        bump(counter);
    }
    Ok(())
}

/// mapbench shared: the round body.
pub struct Shared {
    pub pages: u64,
}

thread_local! {
    /// The region whose slice this task still has to unmap (0: none).
    static PENDING: Cell<u64> = const { Cell::new(0) };
}

impl Shared {
    fn slice(&self, base: u64, i: usize) -> (u64, u64) {
        let len = self.pages * PAGE;
        (base + i as u64 * len, len)
    }
}

impl<V: Vm> RoundBody<V> for Shared {
    fn start(&self, _i: usize, _vm: &V, _ctx: &RoundCtx) -> Result<(), WorkloadError> {
        if self.pages == 0 {
            return Err(WorkloadError::Config(
                "mapbench maps at least one page".into(),
            ));
        }
        PENDING.with(|p| p.set(0));
        Ok(())
    }

    fn prepare(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        if i == 0 {
            let a = vm.mmap_anon(ctx.n as u64 * self.pages * PAGE)?;
            ctx.region.store(a, Ordering::Release);
        }
        Ok(())
    }

    fn timed(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<Option<u64>, WorkloadError> {
        let base = ctx.region.load(Ordering::Acquire);
        PENDING.with(|p| p.set(base));
        let total = ctx.n as u64 * self.pages;
        let first = i as u64 * self.pages;
        for k in 0..total {
            vm.store(base + ((first + k) % total) * PAGE)?;
        }
        // Nobody unmaps a slice another task may still write.
        if !ctx.meet(vm) {
            return Ok(None);
        }
        let (a, len) = self.slice(base, i);
        vm.munmap(a, len)?;
        PENDING.with(|p| p.set(0));
        Ok(Some(1))
    }

    fn teardown(&self, i: usize, _vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        if i == 0 {
            // Every slice is gone: the round's region with it.
            ctx.region.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// After the run (every task has left its loop): the slices of a round left part-way may
    /// still be mapped. Task 0 unmaps every slice of that round; one its task unmapped already
    /// is skipped.
    fn finish(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        let pending = PENDING.with(|p| p.replace(0));
        if i != 0 {
            return Ok(());
        }
        let base = match ctx.region.swap(0, Ordering::AcqRel) {
            0 => pending,
            b => b,
        };
        if base != 0 {
            for t in 0..ctx.n {
                let (a, len) = self.slice(base, t);
                // The host refuses to unmap what is not mapped; the kernel would not care.
                let _ = vm.munmap(a, len);
            }
        }
        Ok(())
    }
}
