//! CortenMM's microbenchmarks (Zhang et al., SOSP'25, artifact `TELOS-syslab/CortenMM-Artifact`,
//! programs `s_mmap`, `s_mmap_pf`, `s_pf` and `s_munmap` of its RadixVM-based suite).
//!
//! CortenMM replaces the VMA tree with the page table itself and locks page-table nodes
//! (range locks), so operations on disjoint ranges of one address space share no line; its
//! microbenchmarks set threads of one process against each other on small requests:
//!
//! - the address space is cut into one slot per thread of [`SLOT_PAGES`] pages (2 MiB: one
//!   last-level page table each), requests are [`REQUESTS`] per thread;
//! - **low contention**: each thread's requests fall in its own slot;
//! - **high contention**: the requests of all threads are shuffled, so every thread works in
//!   every slot and the threads meet in the same page-table pages (and, in Linux, the same
//!   VMA and its locks);
//! - all threads start at a barrier and only the requests are timed; the harness reports the
//!   average latency per request, and the paper's plots turn it into throughput (threads /
//!   average latency, in operations per microsecond), at 1 to 384 threads.
//!
//! The operations:
//! - `mmap`: each request maps 4 pages (anonymous, private), where the kernel chooses (the
//!   paper's low-contention `mmap` panel is this "unfixed" form);
//! - `mmap-pf`: each request maps one page where the kernel chooses and writes it (a fault);
//! - `pf`: one VMA covering every slot is mapped before the threads start; each request writes
//!   one page of it (an anonymous fault);
//! - `munmap`: one VMA covering every slot is mapped and its requested pages faulted in before
//!   the threads start; each request unmaps one page (the kernel splits the VMA each time).
//!
//! The high-contention forms of `mmap` and `mmap-pf` place every mapping with `MAP_FIXED` at
//! the shuffled request places (CortenMM's form): task 0 maps one region of a slot per task
//! before the round (untimed), and each request maps 4 pages (`mmap`) or one page that it then
//! writes (`mmap-pf`) over part of it with `MAP_FIXED`, which first unmaps what is there
//! (splitting the region's VMA, as Linux does). Requests of `mmap` are 4 pages apart, so at
//! most [`SLOT_PAGES`] / 4 of them fit a slot. All tasks thus map and unmap in the same
//! page-table pages and the same VMA. The region is unmapped at the end of the round.
//!
//! Differences from the original, each because of what the two targets can do: the host
//! target lets `MAP_FIXED` replace only a mapping the program made, so the high-contention
//! `mmap` forms map over a region mapped first rather than into unmapped space (the original's
//! choice of base address is not reproduced). The harness forks a process per run;
//! here a run is a sequence of rounds in one address space, each round torn down (untimed)
//! before the next. `munmap` pre-faults only the pages the requests unmap, not the whole slot
//! (the unmapped pages and the page tables they sit in are the same). The requests are
//! shuffled once per run with a fixed seed (as the original, once per process).
//!
//! The metric is `ops/sec`: tasks over the mean time per request, the paper's throughput (see
//! [`crate::rounds`]).

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use crate::WorkloadError;
use crate::rounds::{RoundBody, RoundCtx};
use crate::vm::Vm;

const PAGE: u64 = 4096;
/// Pages per thread slot: one last-level page table.
pub const SLOT_PAGES: u64 = 512;
/// Requests per thread per round (the original's 32).
pub const REQUESTS: u64 = 32;
/// Pages per `mmap` request (`s_mmap` maps 4; `s_mmap_pf` 1).
pub const MMAP_PAGES: u64 = 4;
/// At most half a slot per task per round, so that a `munmap` round always leaves part of the
/// region for its teardown.
pub const MAX_REQUESTS: u64 = SLOT_PAGES / 2;

/// Which operation is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Mmap,
    MmapPf,
    Pf,
    Munmap,
}

/// Where the requests fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contention {
    /// Each task in its own slot.
    Low,
    /// The requests of all tasks shuffled over all slots.
    High,
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CortenParams {
    pub op: Op,
    pub contention: Contention,
    /// Requests per task per round, 1 to [`MAX_REQUESTS`].
    pub requests: u64,
}

impl CortenParams {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            return Err(WorkloadError::Config(format!(
                "{} requests per task: must be 1 to {MAX_REQUESTS} (half a slot of {SLOT_PAGES} pages)",
                self.requests
            )));
        }
        if self.op == Op::Mmap
            && self.contention == Contention::High
            && self.requests * MMAP_PAGES > SLOT_PAGES
        {
            return Err(WorkloadError::Config(format!(
                "{} requests per task: the high-contention mmap test places {MMAP_PAGES}-page mappings in a slot of {SLOT_PAGES} pages, so at most {}",
                self.requests,
                SLOT_PAGES / MMAP_PAGES
            )));
        }
        Ok(())
    }

    /// The mmap tests in their high-contention form: over one region mapped first.
    fn fixed(&self) -> bool {
        matches!(self.op, Op::Mmap | Op::MmapPf) && self.contention == Contention::High
    }

    /// Pages one request maps.
    fn request_pages(&self) -> u64 {
        if self.op == Op::Mmap { MMAP_PAGES } else { 1 }
    }

    /// Bytes the region of `tasks` tasks spans (the `pf` and `munmap` VMA), or what the
    /// `mmap` tests map per round.
    pub fn bytes(&self, tasks: usize) -> u64 {
        if self.fixed() {
            return tasks as u64 * SLOT_PAGES * PAGE;
        }
        match self.op {
            Op::Pf | Op::Munmap => tasks as u64 * SLOT_PAGES * PAGE,
            Op::Mmap => tasks as u64 * self.requests * MMAP_PAGES * PAGE,
            Op::MmapPf => tasks as u64 * self.requests * PAGE,
        }
    }
}

/// A small deterministic generator (splitmix64) for the shuffle.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The page index (within the region) of every request, task by task: task `i`'s are
/// `[i * requests, (i + 1) * requests)`. Low contention: slot `i`'s first pages; high: the same
/// set of pages shuffled over all tasks.
pub fn request_pages(tasks: usize, requests: u64, contention: Contention) -> Vec<u64> {
    let mut pages: Vec<u64> = (0..tasks as u64)
        .flat_map(|i| (0..requests).map(move |j| i * SLOT_PAGES + j))
        .collect();
    if contention == Contention::High {
        let mut seed = 0x5eed ^ tasks as u64;
        for k in (1..pages.len()).rev() {
            let j = (splitmix(&mut seed) % (k as u64 + 1)) as usize;
            pages.swap(k, j);
        }
    }
    pages
}

/// The round body of one of the tests.
pub struct Corten {
    params: CortenParams,
    pages: Vec<u64>,
}

thread_local! {
    /// The `mmap` tests: the addresses this task mapped in the round under way.
    static MAPPED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Corten {
    pub fn new(params: CortenParams, tasks: usize) -> Result<Corten, WorkloadError> {
        params.validate()?;
        Ok(Corten {
            params,
            pages: request_pages(tasks, params.requests, params.contention),
        })
    }

    fn mine(&self, i: usize) -> &[u64] {
        let r = self.params.requests as usize;
        &self.pages[i * r..(i + 1) * r]
    }

    fn region_len(&self, ctx: &RoundCtx) -> u64 {
        ctx.n as u64 * SLOT_PAGES * PAGE
    }
}

impl<V: Vm> RoundBody<V> for Corten {
    fn prepare(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        if self.params.fixed() {
            if i == 0 {
                let a = vm.mmap_anon(self.region_len(ctx))?;
                ctx.region.store(a, Ordering::Release);
            }
            return Ok(());
        }
        match self.params.op {
            Op::Mmap | Op::MmapPf => Ok(()),
            Op::Pf | Op::Munmap => {
                if i == 0 {
                    let a = vm.mmap_anon(self.region_len(ctx))?;
                    ctx.region.store(a, Ordering::Release);
                }
                if self.params.op == Op::Munmap {
                    // Fault in what will be unmapped: task i its own slot's requested pages
                    // (every request of every task is one of those). The region is published
                    // at the barrier, so wait for it here first.
                    if !ctx.meet(vm) {
                        return Ok(());
                    }
                    let base = ctx.region.load(Ordering::Acquire);
                    for j in 0..self.params.requests {
                        vm.store(base + (i as u64 * SLOT_PAGES + j) * PAGE)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn timed(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<Option<u64>, WorkloadError> {
        let r = self.params.requests;
        if self.params.fixed() {
            let base = ctx.region.load(Ordering::Acquire);
            let unit = self.params.request_pages();
            for &p in self.mine(i) {
                let (slot, j) = (p / SLOT_PAGES, p % SLOT_PAGES);
                let a = base + (slot * SLOT_PAGES + j * unit) * PAGE;
                vm.mmap_fixed_anon(a, unit * PAGE)?;
                if self.params.op == Op::MmapPf {
                    vm.store(a)?;
                }
            }
            return Ok(Some(r));
        }
        match self.params.op {
            Op::Mmap | Op::MmapPf => {
                let (len, touch) = if self.params.op == Op::Mmap {
                    (MMAP_PAGES * PAGE, false)
                } else {
                    (PAGE, true)
                };
                MAPPED.with(|m| -> Result<(), WorkloadError> {
                    let mut m = m.borrow_mut();
                    m.clear();
                    for _ in 0..r {
                        let a = vm.mmap_anon(len)?;
                        m.push(a);
                        if touch {
                            vm.store(a)?;
                        }
                    }
                    Ok(())
                })?;
            }
            Op::Pf => {
                let base = ctx.region.load(Ordering::Acquire);
                for &p in self.mine(i) {
                    vm.store(base + p * PAGE)?;
                }
            }
            Op::Munmap => {
                let base = ctx.region.load(Ordering::Acquire);
                for &p in self.mine(i) {
                    vm.munmap(base + p * PAGE, PAGE)?;
                }
            }
        }
        Ok(Some(r))
    }

    fn teardown(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        match self.params.op {
            Op::Mmap | Op::MmapPf if !self.params.fixed() => {
                let len = if self.params.op == Op::Mmap {
                    MMAP_PAGES * PAGE
                } else {
                    PAGE
                };
                let mapped = MAPPED.with(|m| std::mem::take(&mut *m.borrow_mut()));
                for a in mapped {
                    vm.munmap(a, len)?;
                }
                Ok(())
            }
            _ => {
                if i == 0 {
                    let a = ctx.region.swap(0, Ordering::AcqRel);
                    if a != 0 {
                        vm.munmap(a, self.region_len(ctx))?;
                    }
                }
                Ok(())
            }
        }
    }

    fn finish(&self, i: usize, vm: &V, ctx: &RoundCtx) -> Result<(), WorkloadError> {
        // A round left part-way: what it mapped is still there.
        self.teardown(i, vm, ctx)
    }
}
