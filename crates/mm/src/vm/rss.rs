//! RSS counters (`mm->rss_stat`, include/linux/mm.h `add_mm_counter`, `get_mm_counter`).
//!
//! Every fault that maps a page and every unmap that removes one updates the address space's
//! resident-set counters. With many threads faulting one mm that single set of counters is a
//! shared cache line, and three kernels answer it differently (the policy switch):
//! - `atomic`: one atomic per counter, updated by every fault (before 2.6.34 and in the
//!   2.6.13 fault-scalability era);
//! - `per-thread`: `SPLIT_RSS_COUNTING` (2.6.34 to 6.1): each task accumulates deltas and folds
//!   them into the mm's atomics every 64 faults (`TASK_RSS_EVENTS_THRESH`) and when it exits, so
//!   readers see a value that is off by the unfolded deltas;
//! - `per-cpu`: 6.2+ `percpu_counter`s with batch max(32, 2 x CPUs): exact on `sum`,
//!   approximate on `read`.
//!
//! The counting error (what a reader of `/proc/pid/status` would be off by) is observable
//! through [`Rss::read`] against [`Rss::sum`].

use std::cell::Cell;

use crossbeam_utils::CachePadded;
use pagelab_sync::PerCpuCounter;
use pagelab_sync::shim::atomic::{AtomicI64, Ordering};

use crate::cpu::CpuId;
use crate::policy::RssCounter;

/// `mm->rss_stat`: the mm's shared counters (or, per-CPU, the lock their folds take).
pub static RSS_STAT: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("rss_stat", pagelab_sync::Scope::Mm);

/// `NR_MM_COUNTERS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RssType {
    File = 0,
    Anon = 1,
    Swap = 2,
}

pub const NR_RSS: usize = 3;

/// Faults between folds of a task's deltas (`TASK_RSS_EVENTS_THRESH`).
pub const TASK_RSS_EVENTS_THRESH: u32 = 64;

/// The mm's counters.
pub enum Rss {
    Atomic(CachePadded<[AtomicI64; NR_RSS]>),
    PerThread(CachePadded<[AtomicI64; NR_RSS]>),
    PerCpu(Box<[PerCpuCounter; NR_RSS]>),
}

/// A task's unfolded deltas (`task->rss_stat`), used by the per-thread policy.
#[derive(Default)]
pub struct TaskRss {
    delta: Cell<[i64; NR_RSS]>,
    events: Cell<u32>,
}

impl Rss {
    pub fn new(policy: RssCounter, nr_cpus: usize) -> Rss {
        match policy {
            RssCounter::Atomic => Rss::Atomic(CachePadded::new(Default::default())),
            RssCounter::PerThread => Rss::PerThread(CachePadded::new(Default::default())),
            RssCounter::PerCpu => {
                let batch = pagelab_sync::default_batch(nr_cpus);
                Rss::PerCpu(Box::new(std::array::from_fn(|_| {
                    PerCpuCounter::new(nr_cpus, batch).with_class(&RSS_STAT)
                })))
            }
        }
    }

    /// `add_mm_counter_fast` from the fault path of `task` on `cpu`.
    #[inline]
    pub fn add(&self, task: &TaskRss, cpu: CpuId, t: RssType, v: i64) {
        match self {
            Rss::Atomic(a) => {
                pagelab_sync::trace::atomic(&RSS_STAT, &a[t as usize] as *const _ as usize);
                a[t as usize].fetch_add(v, Ordering::Relaxed);
            }
            Rss::PerThread(_) => {
                let mut d = task.delta.get();
                d[t as usize] += v;
                task.delta.set(d);
            }
            Rss::PerCpu(c) => c[t as usize].add(cpu.idx(), v),
        }
    }

    /// `add_mm_counter`: a direct update (unmap paths), bypassing task deltas.
    #[inline]
    pub fn add_direct(&self, cpu: CpuId, t: RssType, v: i64) {
        match self {
            Rss::Atomic(a) | Rss::PerThread(a) => {
                pagelab_sync::trace::atomic(&RSS_STAT, &a[t as usize] as *const _ as usize);
                a[t as usize].fetch_add(v, Ordering::Relaxed);
            }
            Rss::PerCpu(c) => c[t as usize].add(cpu.idx(), v),
        }
    }

    /// `check_sync_rss_stat`: count a fault; fold the task's deltas every 64.
    #[inline]
    pub fn fault_event(&self, task: &TaskRss) {
        if let Rss::PerThread(_) = self {
            let e = task.events.get() + 1;
            if e >= TASK_RSS_EVENTS_THRESH {
                self.sync_task(task);
            } else {
                task.events.set(e);
            }
        }
    }

    /// `sync_mm_rss`: fold a task's deltas (also at exit).
    pub fn sync_task(&self, task: &TaskRss) {
        if let Rss::PerThread(a) = self {
            let d = task.delta.replace([0; NR_RSS]);
            for (i, v) in d.iter().enumerate() {
                if *v != 0 {
                    pagelab_sync::trace::atomic(&RSS_STAT, &a[i] as *const _ as usize);
                    a[i].fetch_add(*v, Ordering::Relaxed);
                }
            }
        }
        task.events.set(0);
    }

    /// `get_mm_counter`: what a reader sees (approximate for per-thread and per-cpu).
    pub fn read(&self, t: RssType) -> i64 {
        match self {
            Rss::Atomic(a) | Rss::PerThread(a) => a[t as usize].load(Ordering::Relaxed),
            Rss::PerCpu(c) => c[t as usize].read(),
        }
    }

    /// The exact value, folding per-CPU deltas. Per-thread deltas of live tasks are not
    /// visible here: they are the counting error of that policy until the tasks sync.
    pub fn sum(&self, t: RssType) -> i64 {
        match self {
            Rss::Atomic(a) | Rss::PerThread(a) => a[t as usize].load(Ordering::Relaxed),
            Rss::PerCpu(c) => c[t as usize].sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_deltas_fold_every_64_faults() {
        let rss = Rss::new(RssCounter::PerThread, 2);
        let t = TaskRss::default();
        for i in 1..=63 {
            rss.add(&t, CpuId(0), RssType::Anon, 1);
            rss.fault_event(&t);
            assert_eq!(rss.read(RssType::Anon), 0, "after {i}");
        }
        rss.add(&t, CpuId(0), RssType::Anon, 1);
        rss.fault_event(&t);
        assert_eq!(rss.read(RssType::Anon), 64);
    }

    #[test]
    fn per_cpu_read_is_within_the_batch_and_sum_exact() {
        let rss = Rss::new(RssCounter::PerCpu, 4);
        let t = TaskRss::default();
        for c in 0..4u16 {
            for _ in 0..20 {
                rss.add(&t, CpuId(c), RssType::File, 1);
            }
        }
        assert_eq!(rss.sum(RssType::File), 80);
        assert!((80 - rss.read(RssType::File)).abs() <= 4 * 32);
    }

    #[test]
    fn atomic_is_exact() {
        let rss = Rss::new(RssCounter::Atomic, 1);
        let t = TaskRss::default();
        rss.add(&t, CpuId(0), RssType::Anon, 5);
        rss.add_direct(CpuId(0), RssType::Anon, -2);
        assert_eq!(rss.read(RssType::Anon), 3);
    }
}
