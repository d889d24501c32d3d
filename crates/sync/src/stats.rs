//! Lock instrumentation: acquisitions, contended acquisitions and time spent waiting.
//!
//! This models the kernel's `CONFIG_LOCK_STAT` (kernel/locking/lockdep.c,
//! Documentation/locking/lockstat.rst), reduced to the three numbers pagelab's
//! reports need per lock class: how often a lock was taken, how often the fast path
//! failed, and how long the waiters waited.
//!
//! # Cost model
//!
//! * Counting is switched by one process-wide flag ([`set_enabled`] / [`enabled`]), a
//!   `Relaxed` load of a read-mostly `AtomicBool`. With it off, a lock operation pays
//!   that load and a predictable branch, nothing else.
//! * [`LockStats`] is embedded in each lock right next to its lock word (the spinlocks
//!   put word and counters in one 32-byte aligned block, so they share a cache line;
//!   the rwsem keeps count word and both sides' counters in one padded line), so
//!   counting touches no extra cache line.
//! * `Instant::now()` is read only on the contended slow path, before waiting and after
//!   acquiring: an uncontended acquisition costs one counter update.
//! * Counters updated while holding an exclusive lock use a `Relaxed` load + store
//!   instead of an atomic read-modify-write: only the holder writes them, so no update
//!   can be lost (except to a concurrent [`LockStats::reset`], which is acceptable for
//!   instrumentation). Shared (reader) acquisitions use `fetch_add`.
//!
//! The counters are `std` atomics even under `--cfg loom`: they do not take part in
//! any lock protocol, and the loom models run with counting off.

use std::ops::{Add, AddAssign};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns lock statistics on or off for every lock in the process (off at start).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Relaxed);
}

/// Whether lock statistics are being counted.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// Adds `v` to a counter that only the current lock holder writes.
#[inline]
fn holder_add(counter: &AtomicU64, v: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(v), Relaxed);
}

/// Per-lock counters, embedded in every lock.
#[derive(Debug, Default)]
pub struct LockStats {
    acquisitions: AtomicU64,
    contended: AtomicU64,
    wait_ns: AtomicU64,
}

impl LockStats {
    /// Zeroed counters.
    pub const fn new() -> Self {
        Self {
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
        }
    }

    /// Records an uncontended acquisition of an exclusive lock. Call while holding it.
    #[inline]
    pub fn record_exclusive(&self) {
        if enabled() {
            holder_add(&self.acquisitions, 1);
        }
    }

    /// Records a contended acquisition of an exclusive lock that waited since `timer`
    /// was started. Call while holding the lock.
    #[inline]
    pub fn record_exclusive_contended(&self, timer: WaitTimer) {
        if let Some(ns) = timer.elapsed_ns() {
            holder_add(&self.acquisitions, 1);
            holder_add(&self.contended, 1);
            holder_add(&self.wait_ns, ns);
        }
    }

    /// Records an uncontended shared (reader) acquisition.
    #[inline]
    pub fn record_shared(&self) {
        if enabled() {
            self.acquisitions.fetch_add(1, Relaxed);
        }
    }

    /// Records a contended shared (reader) acquisition that waited since `timer` started.
    #[inline]
    pub fn record_shared_contended(&self, timer: WaitTimer) {
        if let Some(ns) = timer.elapsed_ns() {
            self.acquisitions.fetch_add(1, Relaxed);
            self.contended.fetch_add(1, Relaxed);
            self.wait_ns.fetch_add(ns, Relaxed);
        }
    }

    /// Current values.
    pub fn snapshot(&self) -> LockStatsSnapshot {
        LockStatsSnapshot {
            acquisitions: self.acquisitions.load(Relaxed),
            contended: self.contended.load(Relaxed),
            wait_ns: self.wait_ns.load(Relaxed),
        }
    }

    /// Zeroes the counters. Updates racing with the reset may be lost.
    pub fn reset(&self) {
        self.acquisitions.store(0, Relaxed);
        self.contended.store(0, Relaxed);
        self.wait_ns.store(0, Relaxed);
    }
}

/// Start time of a contended wait; reads the clock only if statistics are enabled.
#[derive(Debug)]
#[must_use = "pass the timer to a LockStats::record_*_contended method"]
pub struct WaitTimer {
    start: Option<Instant>,
}

impl WaitTimer {
    /// Starts timing a wait (a no-op when statistics are off).
    #[inline]
    pub fn start() -> Self {
        Self {
            start: enabled().then(Instant::now),
        }
    }

    /// Nanoseconds since [`WaitTimer::start`], or `None` if statistics were off then.
    #[inline]
    pub fn elapsed_ns(self) -> Option<u64> {
        self.start
            .map(|t| u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A copy of one lock's (or a sum of several locks') counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LockStatsSnapshot {
    /// Successful acquisitions (including the contended ones).
    pub acquisitions: u64,
    /// Acquisitions whose fast path failed, so they had to wait.
    pub contended: u64,
    /// Total time the contended acquisitions waited, in nanoseconds.
    pub wait_ns: u64,
}

impl Add for LockStatsSnapshot {
    type Output = Self;

    fn add(self, rhs: Self) -> Self {
        Self {
            acquisitions: self.acquisitions.wrapping_add(rhs.acquisitions),
            contended: self.contended.wrapping_add(rhs.contended),
            wait_ns: self.wait_ns.wrapping_add(rhs.wait_ns),
        }
    }
}

impl AddAssign for LockStatsSnapshot {
    fn add_assign(&mut self, rhs: Self) {
        *self = *self + rhs;
    }
}

impl std::iter::Sum for LockStatsSnapshot {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Every assertion that depends on the process-wide flag lives in the single test
    //! [`stats_switch_and_counting_for_every_lock`]: it is the only test in this binary
    //! that calls [`set_enabled`], and the locks it checks are its own, so tests running
    //! in parallel neither disturb it nor are disturbed by it.

    use super::*;
    use crate::{LockKind, QueuedSpinLock, RwSem, SpinLock, TicketLock};
    use std::time::Duration;

    const HOLD: Duration = Duration::from_millis(2);
    const HOLD_NS: u64 = 2_000_000;

    #[test]
    fn snapshot_arithmetic() {
        let a = LockStatsSnapshot {
            acquisitions: 3,
            contended: 1,
            wait_ns: 10,
        };
        let b = LockStatsSnapshot {
            acquisitions: 4,
            contended: 2,
            wait_ns: 5,
        };
        let sum = LockStatsSnapshot {
            acquisitions: 7,
            contended: 3,
            wait_ns: 15,
        };
        assert_eq!(a + b, sum);
        let mut c = a;
        c += b;
        assert_eq!(c, sum);
        assert_eq!([a, b].into_iter().sum::<LockStatsSnapshot>(), sum);
        assert_eq!(LockStatsSnapshot::default().acquisitions, 0);
    }

    /// Holds `lock` via `hold`, starts `waiter` on another thread, waits until
    /// `is_waiting` says it is queued, keeps holding for [`HOLD`], then releases.
    fn contend<G>(
        hold: impl FnOnce() -> G,
        waiter: impl FnOnce() + Send,
        is_waiting: impl Fn() -> bool,
    ) {
        let guard = hold();
        std::thread::scope(|s| {
            let t = s.spawn(waiter);
            while !is_waiting() {
                std::thread::yield_now();
            }
            std::thread::sleep(HOLD);
            drop(guard);
            t.join().unwrap();
        });
    }

    fn check_spinlock_stats(lock: &SpinLock<u64>) {
        lock.reset_stats();
        assert_eq!(lock.stats(), LockStatsSnapshot::default());

        set_enabled(false);
        *lock.lock() += 1;
        drop(lock.try_lock());
        contend(|| lock.lock(), || *lock.lock() += 1, || lock.is_contended());
        assert_eq!(
            lock.stats(),
            LockStatsSnapshot::default(),
            "{:?} counted while disabled",
            lock.kind()
        );

        set_enabled(true);
        *lock.lock() += 1;
        assert!(lock.try_lock().is_some());
        let s = lock.stats();
        assert_eq!((s.acquisitions, s.contended, s.wait_ns), (2, 0, 0));

        contend(|| lock.lock(), || *lock.lock() += 1, || lock.is_contended());
        let s = lock.stats();
        assert_eq!(s.acquisitions, 4, "{:?}", lock.kind());
        assert_eq!(s.contended, 1, "{:?}", lock.kind());
        assert!(s.wait_ns > 0, "{:?}", lock.kind());
        if lock.kind() == LockKind::Queued {
            // The queued waiter starts its timer before it publishes itself as the tail,
            // which is what `is_contended` observed, so it waited at least HOLD. (A ticket
            // waiter is visible from its ticket draw, just before it starts the timer.)
            assert!(s.wait_ns >= HOLD_NS, "wait {} ns", s.wait_ns);
        }

        lock.reset_stats();
        assert_eq!(lock.stats(), LockStatsSnapshot::default());
    }

    fn check_rwsem_stats(sem: &RwSem<u64>) {
        set_enabled(false);
        drop(sem.read());
        *sem.write() += 1;
        assert_eq!(sem.stats(), LockStatsSnapshot::default());

        set_enabled(true);
        drop(sem.read());
        drop(sem.try_read());
        *sem.write() += 1;
        assert_eq!(sem.read_stats().acquisitions, 2);
        assert_eq!(sem.write_stats().acquisitions, 1);
        assert_eq!(sem.stats().contended, 0);

        // A writer waits for a reader.
        contend(
            || sem.read(),
            || *sem.write() += 1,
            || sem.waiting_writers() == 1,
        );
        let w = sem.write_stats();
        assert_eq!((w.acquisitions, w.contended), (2, 1));
        assert!(w.wait_ns >= HOLD_NS);

        // A reader waits for a writer.
        contend(
            || sem.write(),
            || assert_eq!(*sem.read(), 3),
            || sem.waiting_readers() == 1,
        );
        let r = sem.read_stats();
        assert_eq!((r.acquisitions, r.contended), (4, 1));
        assert!(r.wait_ns >= HOLD_NS);
        assert_eq!(sem.stats(), sem.read_stats() + sem.write_stats());

        sem.reset_stats();
        assert_eq!(sem.stats(), LockStatsSnapshot::default());
    }

    #[test]
    fn stats_switch_and_counting_for_every_lock() {
        for kind in [LockKind::Ticket, LockKind::Queued] {
            check_spinlock_stats(&SpinLock::new(kind, 0));
        }

        set_enabled(true);
        let ticket = TicketLock::new(());
        drop(ticket.lock());
        assert_eq!(ticket.stats().acquisitions, 1);
        ticket.reset_stats();
        assert_eq!(ticket.stats().acquisitions, 0);

        let queued = QueuedSpinLock::new(());
        drop(queued.lock());
        assert_eq!(queued.stats().acquisitions, 1);
        queued.reset_stats();
        assert_eq!(queued.stats().acquisitions, 0);

        check_rwsem_stats(&RwSem::new(0));

        set_enabled(false);
        assert!(!enabled());
    }
}
