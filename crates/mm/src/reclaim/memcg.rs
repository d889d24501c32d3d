//! Memory cgroups: mm/memcontrol.c `mem_cgroup_charge`/`try_charge`/`uncharge`, and
//! mm/page_counter.c.
//!
//! # What it models
//!
//! A machine has a fixed set of groups, chosen at boot ([`crate::MemConfig::nr_memcgs`]): the
//! root (id 0, never limited, never charged, as the kernel skips the root's page counter) and
//! children (ids 1..) directly under it. Each child has a page counter (`memory.current`) and a
//! limit (`memory.max`, in pages). An address space belongs to one group
//! ([`crate::Mm::set_memcg`]); every anonymous page it faults in, copies on write or swaps in is
//! charged to that group before it is mapped and carries the group's id in `page.memcg`, which
//! also places it on that group's lruvec (one per (memcg, node)). The charge is dropped when
//! the page is freed ([`crate::alloc::Mem::free_frozen_pages`]).
//!
//! A charge that would take a group over its limit reclaims from that group's lruvecs only
//! (`try_to_free_mem_cgroup_pages`) and tries again; after `MAX_RECLAIM_RETRIES` rounds in a row
//! that free nothing, the fault fails with out of memory (the memcg OOM), which the workloads
//! report instead of hanging.
//!
//! # The charge stock
//!
//! A group's counter is one cache line that every charge and uncharge of the group writes. With
//! `memcg.charge = "stock"` (the kernel's `memcg_stock`, 2.6.33+) each CPU keeps a stock of
//! pages already charged to one group's counter: a charge is served from the CPU's stock when it
//! holds pages of that group (`consume_stock`), and otherwise charges the counter
//! `memcg.charge_batch` pages at once (`MEMCG_CHARGE_BATCH`: 32, 64 since 6.1) and keeps the
//! surplus (`refill_stock`). A stock holds one group at a time: charging another group returns
//! the old group's surplus to its counter first (`drain_stock`), as does a stock that grows past
//! the batch. A group at its limit first tries the exact charge without the surplus; after
//! reclaim, the fault drains every CPU's stock of that group once (`drain_all_stock`) before it
//! tries again, so pages parked in other CPUs' stocks never cause an out-of-memory.
//! `memory.current` ([`MemcgStat::usage`]) includes the stocked pages, as the kernel's does;
//! [`MemcgStat::stocked`] says how many.
//!
//! Uncharging writes the counter directly, but once per run of pages of one group freed
//! together ([`UnchargeGather`], the kernel's `uncharge_gather` in `release_pages`), not per
//! page. With `memcg.charge = "atomic"` every charge is one add on the counter.
//!
//! The stock's lock stands for the kernel's `local_lock` (interrupts off on the local CPU): only
//! its CPU takes it, except a drain of all stocks, so it never bounces.
//!
//! Not modelled: page-cache pages (files are tmpfs-like and stay with the root), swap
//! accounting (`memory.swap.max`, cgroup v1 `memsw`), nested hierarchies, `memory.high`
//! throttling, and moving charges between groups.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pagelab_sync::{CachePadded, LockClass, LockKind, Scope, SpinLock};

use crate::cpu::CpuId;
use crate::policy::{MemcgCharge, MemcgPolicy};

/// A group's page counter: one line every CPU charging the group writes.
pub static MEMCG_COUNTER: LockClass = LockClass::new("memcg counter", Scope::Machine);

/// A group's event counters (`memcg->memory_events`): `memcg_memory_event(memcg, MEMCG_MAX)`
/// in mm/memcontrol.c increments one with an atomic on every charge that finds the group at
/// its limit, from whichever CPU charged.
pub static MEMCG_EVENTS: LockClass = LockClass::new("memcg memory_events", Scope::Machine);

/// A CPU's charge stock lock (`memcg_stock.stock_lock`, a `local_lock`).
pub static MEMCG_STOCK: LockClass = LockClass::new("memcg_stock", Scope::Cpu);

/// The root group's id.
pub const ROOT_MEMCG: u32 = 0;

/// One group's page counter and events.
pub struct MemCgroup {
    /// Pages charged (`memory.current`), on its own cache line: every fault of the group
    /// updates it.
    usage: CachePadded<AtomicU64>,
    /// `memory.max` in pages.
    max: AtomicU64,
    /// Charges that found the group at its limit (`memory.events` `max`).
    max_events: AtomicU64,
    /// Charges that failed after reclaim (`memory.events` `oom`).
    oom_events: AtomicU64,
    /// Pages reclaimed on behalf of this group's charges.
    reclaimed: AtomicU64,
}

/// One CPU's charge stock (`struct memcg_stock_pcp`): `nr` pages charged to group `cached`'s
/// counter and not yet given to any page. `cached` is the root (0) when the stock is empty,
/// since the root is never charged.
#[derive(Default)]
struct Stock {
    cached: u32,
    nr: u64,
}

impl MemCgroup {
    fn new() -> Self {
        MemCgroup {
            usage: CachePadded::new(AtomicU64::new(0)),
            max: AtomicU64::new(u64::MAX),
            max_events: AtomicU64::new(0),
            oom_events: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
        }
    }
}

/// What a group has seen (`memory.current`, `memory.max`, `memory.events`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcgStat {
    pub usage: u64,
    pub max: u64,
    pub max_events: u64,
    pub oom_events: u64,
    pub reclaimed: u64,
    /// Of `usage`, the pages held in CPUs' charge stocks rather than by pages.
    pub stocked: u64,
}

/// Why a limit could not be set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemcgError {
    #[error("memory cgroup {0} does not exist (this machine has {1})")]
    NoSuchGroup(u32, usize),
    #[error("the root memory cgroup cannot be limited")]
    Root,
    #[error("a memory cgroup limit of 0 pages leaves no room for any page")]
    Zero,
}

/// Every group of the machine, and every CPU's charge stock.
pub struct MemCgroups {
    groups: Box<[MemCgroup]>,
    /// One per CPU, plus one for background threads; empty with `memcg.charge = "atomic"`.
    stocks: Box<[CachePadded<SpinLock<Stock>>]>,
    /// Pages a stock charges at once (`MEMCG_CHARGE_BATCH`).
    batch: u64,
}

impl MemCgroups {
    /// The root and `nr - 1` children, unlimited, charged without a stock.
    pub fn new(nr: usize) -> Self {
        Self::with_policy(
            nr,
            0,
            &MemcgPolicy {
                charge: MemcgCharge::Atomic,
                ..MemcgPolicy::default()
            },
        )
    }

    /// The root and `nr - 1` children, unlimited, charged as `policy` says by `nr_cpus` CPUs.
    pub fn with_policy(nr: usize, nr_cpus: usize, policy: &MemcgPolicy) -> Self {
        assert!(nr >= 1, "a machine has at least the root memory cgroup");
        let stocks = match policy.charge {
            MemcgCharge::Atomic => 0,
            MemcgCharge::Stock => nr_cpus + 1,
        };
        MemCgroups {
            groups: (0..nr).map(|_| MemCgroup::new()).collect(),
            stocks: (0..stocks)
                .map(|_| {
                    CachePadded::new(
                        SpinLock::new(LockKind::Queued, Stock::default()).with_class(&MEMCG_STOCK),
                    )
                })
                .collect(),
            batch: u64::from(policy.charge_batch),
        }
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    fn group(&self, id: u32) -> Result<&MemCgroup, MemcgError> {
        self.groups
            .get(id as usize)
            .ok_or(MemcgError::NoSuchGroup(id, self.groups.len()))
    }

    /// Write `memory.max` (pages). Lowering it below the usage does not reclaim by itself:
    /// the group's next charge does.
    pub fn set_max(&self, id: u32, pages: u64) -> Result<(), MemcgError> {
        if id == ROOT_MEMCG {
            return Err(MemcgError::Root);
        }
        if pages == 0 {
            return Err(MemcgError::Zero);
        }
        self.group(id)?.max.store(pages, Relaxed);
        Ok(())
    }

    /// Check that `id` names a group.
    pub fn validate(&self, id: u32) -> Result<(), MemcgError> {
        self.group(id).map(|_| ())
    }

    /// `try_charge_memcg` without its reclaim: charge `nr` pages to group `id` from `cpu`,
    /// from the CPU's stock when it holds the group's pages, else from the counter (a batch at
    /// a time with a stock). False when the group is at its limit; the caller reclaims, drains
    /// the stocks ([`MemCgroups::drain_all_stock`]) and tries again.
    pub fn try_charge(&self, cpu: CpuId, id: u32, nr: u64) -> bool {
        if id == ROOT_MEMCG {
            return true;
        }
        let Some(stock) = self.stock(cpu) else {
            return self.counter_try_charge(id, nr);
        };
        if nr <= self.batch {
            let mut s = stock.lock();
            if s.cached == id && s.nr >= nr {
                s.nr -= nr;
                return true;
            }
        }
        let batch = self.batch.max(nr);
        if self.counter_try_charge(id, batch) {
            if batch > nr {
                self.refill_stock(stock, id, batch - nr);
            }
            return true;
        }
        // Without the surplus the charge may still fit (the kernel's retry with
        // `batch = nr_pages`).
        batch > nr && self.counter_try_charge(id, nr)
    }

    /// `page_counter_try_charge`: add `nr` pages unless that passes the limit. The add comes
    /// first and is undone on failure, so concurrent charges never overshoot together (one of
    /// them fails and retries after reclaim).
    fn counter_try_charge(&self, id: u32, nr: u64) -> bool {
        let g = &self.groups[id as usize];
        pagelab_sync::trace::atomic(&MEMCG_COUNTER, &*g.usage as *const _ as usize);
        let new = g.usage.fetch_add(nr, Relaxed) + nr;
        if new > g.max.load(Relaxed) {
            g.usage.fetch_sub(nr, Relaxed);
            pagelab_sync::trace::atomic(&MEMCG_EVENTS, &g.max_events as *const _ as usize);
            g.max_events.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    fn stock(&self, cpu: CpuId) -> Option<&SpinLock<Stock>> {
        let n = self.stocks.len();
        (n > 0).then(|| &*self.stocks[usize::from(cpu.0).min(n - 1)])
    }

    /// `refill_stock`: keep `nr` charged pages of group `id` in the CPU's stock, returning
    /// another group's pages to their counter first, and everything once the stock passes the
    /// batch.
    fn refill_stock(&self, stock: &SpinLock<Stock>, id: u32, nr: u64) {
        let mut s = stock.lock();
        if s.cached != id {
            self.drain_stock(&mut s);
            s.cached = id;
        }
        s.nr += nr;
        if s.nr > self.batch {
            self.drain_stock(&mut s);
        }
    }

    /// `drain_stock`: give a stock's pages back to its group's counter.
    fn drain_stock(&self, s: &mut Stock) {
        if s.nr > 0 {
            self.uncharge(s.cached, s.nr);
        }
        *s = Stock::default();
    }

    /// `drain_all_stock`: return every CPU's stocked pages of group `id` to its counter (before
    /// a charge at the limit gives up). Other groups' stocks are left alone.
    pub fn drain_all_stock(&self, id: u32) {
        for stock in self.stocks.iter() {
            let mut s = stock.lock();
            if s.cached == id {
                self.drain_stock(&mut s);
            }
        }
    }

    /// Return every stock to its counter (what taking a CPU offline or removing a group does),
    /// so that `usage` counts only pages.
    pub fn drain_all_stocks(&self) {
        for stock in self.stocks.iter() {
            self.drain_stock(&mut stock.lock());
        }
    }

    /// `page_counter_uncharge`.
    pub fn uncharge(&self, id: u32, nr: u64) {
        if id == ROOT_MEMCG || nr == 0 {
            return;
        }
        let g = &self.groups[id as usize];
        pagelab_sync::trace::atomic(&MEMCG_COUNTER, &*g.usage as *const _ as usize);
        let prev = g.usage.fetch_sub(nr, Relaxed);
        debug_assert!(prev >= nr, "memcg {id}: uncharge of {nr} below zero");
    }

    pub(crate) fn note_oom(&self, id: u32) {
        self.groups[id as usize].oom_events.fetch_add(1, Relaxed);
    }

    pub(crate) fn note_reclaimed(&self, id: u32, nr: u64) {
        self.groups[id as usize].reclaimed.fetch_add(nr, Relaxed);
    }

    /// Whether a charge of `nr` more pages fits right now (no reclaim needed).
    pub fn has_room(&self, id: u32, nr: u64) -> bool {
        if id == ROOT_MEMCG {
            return true;
        }
        let g = &self.groups[id as usize];
        g.usage.load(Relaxed) + nr <= g.max.load(Relaxed)
    }

    /// A group's counters.
    pub fn stat(&self, id: u32) -> Result<MemcgStat, MemcgError> {
        let g = self.group(id)?;
        let stocked = self
            .stocks
            .iter()
            .map(|st| {
                let s = st.lock();
                if s.cached == id { s.nr } else { 0 }
            })
            .sum();
        Ok(MemcgStat {
            usage: g.usage.load(Relaxed),
            max: g.max.load(Relaxed),
            max_events: g.max_events.load(Relaxed),
            oom_events: g.oom_events.load(Relaxed),
            reclaimed: g.reclaimed.load(Relaxed),
            stocked,
        })
    }
}

/// The kernel's `uncharge_gather`: pages freed together uncharge their group's counter once
/// per run of pages of one group, not once per page.
#[derive(Default)]
pub struct UnchargeGather {
    memcg: u32,
    nr: u64,
}

impl UnchargeGather {
    /// Add `nr` pages of group `id`; a change of group uncharges the run gathered so far.
    pub fn add(&mut self, memcgs: &MemCgroups, id: u32, nr: u64) {
        if id != self.memcg {
            self.flush(memcgs);
            self.memcg = id;
        }
        self.nr += nr;
    }

    /// Uncharge what was gathered.
    pub fn flush(&mut self, memcgs: &MemCgroups) {
        memcgs.uncharge(self.memcg, self.nr);
        self.nr = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_uncharges_make_room() {
        let m = MemCgroups::new(3);
        m.set_max(1, 4).unwrap();
        let cpu = CpuId(0);
        for _ in 0..4 {
            assert!(m.try_charge(cpu, 1, 1));
        }
        assert!(!m.try_charge(cpu, 1, 1), "a fifth page passes max");
        assert!(!m.has_room(1, 1));
        assert!(
            m.try_charge(cpu, 2, 100),
            "an unlimited sibling is unaffected"
        );
        m.uncharge(1, 1);
        assert!(m.has_room(1, 1));
        assert!(m.try_charge(cpu, 1, 1));
        let s = m.stat(1).unwrap();
        assert_eq!((s.usage, s.max, s.max_events), (4, 4, 1));
        assert!(
            m.try_charge(cpu, ROOT_MEMCG, 1 << 40),
            "the root is never limited"
        );
    }

    #[test]
    fn bad_limits_are_refused() {
        let m = MemCgroups::new(2);
        assert_eq!(m.set_max(0, 10), Err(MemcgError::Root));
        assert_eq!(m.set_max(1, 0), Err(MemcgError::Zero));
        assert_eq!(m.set_max(2, 10), Err(MemcgError::NoSuchGroup(2, 2)));
    }

    #[test]
    fn concurrent_charges_never_overshoot() {
        for m in [MemCgroups::new(2), stocked(2, 4, 64)] {
            m.set_max(1, 1000).unwrap();
            let ok = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for cpu in 0..4 {
                    let (m, ok) = (&m, &ok);
                    s.spawn(move || {
                        for _ in 0..1000 {
                            if m.try_charge(CpuId(cpu), 1, 1) {
                                ok.fetch_add(1, Relaxed);
                            } else {
                                // What the fault does at the limit before it reclaims.
                                m.drain_all_stock(1);
                                if m.try_charge(CpuId(cpu), 1, 1) {
                                    ok.fetch_add(1, Relaxed);
                                }
                            }
                        }
                    });
                }
            });
            let s = m.stat(1).unwrap();
            assert!(s.usage <= 1000, "usage {} passed the limit", s.usage);
            assert_eq!(ok.load(Relaxed) + s.stocked, s.usage);
            m.drain_all_stocks();
            assert_eq!(m.stat(1).unwrap().usage, ok.load(Relaxed));
        }
    }

    fn stocked(groups: usize, cpus: usize, batch: u32) -> MemCgroups {
        MemCgroups::with_policy(
            groups,
            cpus,
            &MemcgPolicy {
                charge: MemcgCharge::Stock,
                charge_batch: batch,
            },
        )
    }

    #[test]
    fn a_stock_charges_the_counter_once_per_batch() {
        let m = stocked(3, 2, 64);
        let cpu = CpuId(0);
        assert!(m.try_charge(cpu, 1, 1));
        let s = m.stat(1).unwrap();
        assert_eq!((s.usage, s.stocked), (64, 63), "one batch charged, 63 kept");
        for _ in 0..63 {
            assert!(m.try_charge(cpu, 1, 1));
        }
        let s = m.stat(1).unwrap();
        assert_eq!((s.usage, s.stocked), (64, 0), "served from the stock");
        assert!(m.try_charge(cpu, 1, 1));
        assert_eq!(m.stat(1).unwrap().usage, 128, "the next batch");
        // Another CPU has a stock of its own.
        assert!(m.try_charge(CpuId(1), 1, 1));
        assert_eq!(m.stat(1).unwrap().usage, 192);
        // Charging another group drains this CPU's stock of the first.
        assert!(m.try_charge(cpu, 2, 1));
        let (s1, s2) = (m.stat(1).unwrap(), m.stat(2).unwrap());
        // 66 pages charged, plus CPU 1's 63 stocked; CPU 0's 63 went back.
        assert_eq!(
            (s1.usage, s1.stocked),
            (129, 63),
            "CPU 0's stock was drained"
        );
        assert_eq!((s2.usage, s2.stocked), (64, 63));
        // Uncharges go to the counter, not the stock.
        m.uncharge(1, 3);
        assert_eq!(m.stat(1).unwrap().usage, 126);
        m.drain_all_stocks();
        assert_eq!(m.stat(1).unwrap().usage, 63, "the 66 pages charged, less 3");
        assert_eq!(m.stat(2).unwrap().usage, 1);
    }

    #[test]
    fn near_the_limit_the_exact_charge_is_tried_and_drains_free_stocked_pages() {
        let m = stocked(2, 2, 64);
        m.set_max(1, 100).unwrap();
        assert!(m.try_charge(CpuId(0), 1, 1)); // 64 charged, 63 stocked on CPU 0
        // CPU 1 cannot take a batch (128 > 100) but one page still fits.
        assert!(m.try_charge(CpuId(1), 1, 1));
        assert_eq!(m.stat(1).unwrap().usage, 65);
        for _ in 0..35 {
            assert!(m.try_charge(CpuId(1), 1, 1));
        }
        assert!(
            !m.try_charge(CpuId(1), 1, 1),
            "CPU 0's stock holds the rest"
        );
        m.drain_all_stock(1);
        assert!(m.try_charge(CpuId(1), 1, 1), "drained, the charge fits");
    }

    #[test]
    fn uncharges_are_gathered_per_run_of_one_group() {
        let m = MemCgroups::new(3);
        for id in [1, 2] {
            assert!(m.try_charge(CpuId(0), id, 10));
        }
        let mut g = UnchargeGather::default();
        for id in [1, 1, 2, 2, 2, 1] {
            g.add(&m, id, 1);
        }
        assert_eq!(
            m.stat(1).unwrap().usage,
            8,
            "the first run of group 1 is uncharged"
        );
        g.flush(&m);
        assert_eq!((m.stat(1).unwrap().usage, m.stat(2).unwrap().usage), (7, 7));
    }
}
