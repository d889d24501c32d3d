//! Per-CPU counter: cheap approximate updates, exact sums on demand.
//!
//! Models lib/percpu_counter.c (`struct percpu_counter`), which the kernel uses for
//! counters updated on hot paths, such as `mm->rss_stat` (since 6.2) and
//! `vm_committed_as`. Each CPU accumulates a private delta in its own cache line; only
//! when a delta reaches `batch` in magnitude is it folded into the shared global count,
//! under a small spinlock. Updates thus almost never touch a shared cache line, at the
//! price of the global count being off by up to `nr_cpus * batch`
//! ([`PerCpuCounter::error_bound`]).
//!
//! * [`PerCpuCounter::add`] is `percpu_counter_add_batch`.
//! * [`PerCpuCounter::read`] is `percpu_counter_read`: the global count alone, no lock.
//! * [`PerCpuCounter::sum`] is `percpu_counter_sum`: global count plus every delta,
//!   under the lock. Because a delta is folded (added to the global count *and*
//!   zeroed) only while holding the same lock, `sum` can never count a delta twice or
//!   miss a folded one; concurrent unfolded `add`s are either seen or not, as in the
//!   kernel.
//!
//! pagelab has no CPU numbers, so callers pass the CPU index their thread stands for.
//! A delta is normally written only by its CPU's thread (the kernel runs the update with
//! preemption off), but pagelab updates it with atomic read-modify-writes, so a CPU
//! index shared by several threads still counts exactly; it just loses the
//! cache-locality that makes the counter cheap.

use core::fmt;

use crossbeam_utils::CachePadded;

use crate::shim::atomic::AtomicI64;
use crate::shim::atomic::Ordering::Relaxed;
use crate::spinlock::SpinLock;

/// The kernel's default batch, `percpu_counter_batch = max(32, 2 * nr_cpus)`
/// (`compute_batch_value` in lib/percpu_counter.c): large enough that folds are rare,
/// growing with the CPU count so the shared lock stays cold on big machines.
pub fn default_batch(nr_cpus: usize) -> i64 {
    i64::try_from(nr_cpus.saturating_mul(2))
        .unwrap_or(i64::MAX)
        .max(32)
}

/// A counter with one private delta per CPU and a lock-protected global count.
///
/// ```
/// # use pagelab_sync::PerCpuCounter;
/// let c = PerCpuCounter::new(2, 4);
/// c.add(0, 3);
/// c.add(1, 3);
/// assert_eq!(c.read(), 0); // both deltas below the batch
/// c.add(0, 1); // delta reaches 4: folded
/// assert_eq!(c.read(), 4);
/// assert_eq!(c.sum(), 7);
/// ```
pub struct PerCpuCounter {
    /// Serialises folds and exact sums (`fbc->lock`, a raw spinlock in the kernel).
    lock: SpinLock<()>,
    /// The global count (`fbc->count`): written under `lock`, read without it.
    count: AtomicI64,
    counters: Box<[CachePadded<AtomicI64>]>,
    batch: i64,
}

impl PerCpuCounter {
    /// A zero counter for CPUs `0..nr_cpus` that folds deltas at `|delta| >= batch`.
    ///
    /// # Panics
    ///
    /// If `nr_cpus` is 0 or `batch` is not positive.
    pub fn new(nr_cpus: usize, batch: i64) -> Self {
        assert!(nr_cpus > 0, "PerCpuCounter needs at least one CPU");
        assert!(
            batch > 0,
            "PerCpuCounter batch must be positive, got {batch}"
        );
        Self {
            lock: SpinLock::new_queued(()),
            count: AtomicI64::new(0),
            counters: (0..nr_cpus)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            batch,
        }
    }

    /// Gives the fold lock its class, so a trace shows the folds into the shared count.
    pub fn with_class(mut self, class: &'static crate::trace::LockClass) -> Self {
        self.lock = self.lock.with_class(class);
        self
    }

    /// A counter with the kernel's [`default_batch`] for `nr_cpus`.
    pub fn with_default_batch(nr_cpus: usize) -> Self {
        Self::new(nr_cpus, default_batch(nr_cpus))
    }

    /// Adds `v` on behalf of `cpu` (`percpu_counter_add_batch`).
    ///
    /// # Panics
    ///
    /// If `cpu >= nr_cpus()`.
    #[inline]
    pub fn add(&self, cpu: usize, v: i64) {
        let delta = &self.counters[cpu];
        let new = delta.fetch_add(v, Relaxed).wrapping_add(v);
        if new.unsigned_abs() >= self.batch.unsigned_abs() {
            self.fold(delta);
        }
    }

    #[cold]
    fn fold(&self, delta: &AtomicI64) {
        let _guard = self.lock.lock();
        // Both steps under the lock, so `sum` sees the amount exactly once.
        let d = delta.swap(0, Relaxed);
        self.count
            .store(self.count.load(Relaxed).wrapping_add(d), Relaxed);
    }

    /// The global count without the unfolded deltas (`percpu_counter_read`): cheap,
    /// lock-free, and within [`PerCpuCounter::error_bound`] of the true value.
    #[inline]
    pub fn read(&self) -> i64 {
        self.count.load(Relaxed)
    }

    /// The exact count: global plus all deltas, under the lock (`percpu_counter_sum`).
    pub fn sum(&self) -> i64 {
        let _guard = self.lock.lock();
        self.counters
            .iter()
            .fold(self.count.load(Relaxed), |acc, d| {
                acc.wrapping_add(d.load(Relaxed))
            })
    }

    /// The most [`PerCpuCounter::read`] can differ from [`PerCpuCounter::sum`] when no
    /// `add` is in flight: `nr_cpus * batch`.
    pub fn error_bound(&self) -> i64 {
        i64::try_from(self.counters.len())
            .unwrap_or(i64::MAX)
            .saturating_mul(self.batch)
    }

    /// The fold threshold.
    pub fn batch(&self) -> i64 {
        self.batch
    }

    /// The number of per-CPU deltas.
    pub fn nr_cpus(&self) -> usize {
        self.counters.len()
    }
}

impl fmt::Debug for PerCpuCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuCounter")
            .field("count", &self.read())
            .field("nr_cpus", &self.nr_cpus())
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn default_batch_matches_kernel_formula() {
        assert_eq!(default_batch(1), 32);
        assert_eq!(default_batch(16), 32);
        assert_eq!(default_batch(17), 34);
        assert_eq!(default_batch(64), 128);
        let c = PerCpuCounter::with_default_batch(8);
        assert_eq!((c.nr_cpus(), c.batch(), c.error_bound()), (8, 32, 256));
    }

    #[test]
    fn deltas_fold_at_batch() {
        let c = PerCpuCounter::new(2, 4);
        for _ in 0..3 {
            c.add(1, 1);
        }
        assert_eq!((c.read(), c.sum()), (0, 3));
        c.add(1, 1);
        assert_eq!((c.read(), c.sum()), (4, 4));
        c.add(0, -5);
        assert_eq!((c.read(), c.sum()), (-1, -1));
        c.add(0, -3);
        assert_eq!((c.read(), c.sum()), (-1, -4));
        c.add(1, 100);
        assert_eq!((c.read(), c.sum()), (99, 96));
    }

    #[test]
    fn sum_exact_and_read_within_bound() {
        let c = PerCpuCounter::new(4, 8);
        let mut expected = 0i64;
        for i in 0..1000i64 {
            let v = (i * 7919) % 23 - 11;
            c.add((i % 4) as usize, v);
            expected += v;
            assert!((c.read() - expected).abs() < c.error_bound());
        }
        assert_eq!(c.sum(), expected);
    }

    #[test]
    #[should_panic(expected = "batch must be positive")]
    fn zero_batch_is_rejected() {
        let _ = PerCpuCounter::new(1, 0);
    }

    #[test]
    #[should_panic]
    fn cpu_out_of_range_panics() {
        PerCpuCounter::new(2, 4).add(2, 1);
    }
}
