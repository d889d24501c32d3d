//! Bounded exponential spinning followed by yielding, used by every waiting loop.
//!
//! The kernel's spinlocks busy-wait with `cpu_relax()` because a lock holder cannot be
//! preempted while it holds a spinlock (`spin_lock()` disables preemption,
//! include/linux/spinlock_api_smp.h). pagelab runs the kernel's paths on ordinary
//! threads, and its experiments routinely run more threads than there are cores
//! (e.g. 8 threads on 2 cores), so a lock holder *can* be descheduled. A waiter that
//! only spins would then burn its whole timeslice while the holder it waits for cannot
//! run. [`Backoff`] therefore spins with an exponentially growing number of
//! [`spin_loop`](crate::shim::hint::spin_loop) hints for a few rounds (cheap handoff
//! when the holder is running on another core) and then calls
//! [`yield_now`](crate::shim::thread::yield_now) on every further round, giving the
//! core to whoever holds the lock. This is the userspace stand-in for what paravirt
//! spinlocks do for preempted vCPUs (kernel/locking/qspinlock_paravirt.h).
//!
//! Under `--cfg loom` every round is exactly one `loom::thread::yield_now()`: loom must
//! see a yield in each iteration of a wait loop or it reports the loop as a livelock,
//! and spinning would only add states to explore.

use crate::shim;

/// Rounds of spinning before switching to yielding: 1 + 2 + ... + 2^6 = 127 hints.
const SPIN_LIMIT: u32 = 6;

/// Wait-loop helper: exponential spinning, then yielding.
///
/// ```
/// # use pagelab_sync::Backoff;
/// # use std::sync::atomic::{AtomicBool, Ordering};
/// let flag = AtomicBool::new(true);
/// let mut backoff = Backoff::new();
/// while !flag.load(Ordering::Acquire) {
///     backoff.snooze();
/// }
/// ```
#[derive(Debug, Default, Clone)]
pub struct Backoff {
    step: u32,
}

impl Backoff {
    /// A fresh backoff, starting with the shortest spin.
    #[inline]
    pub const fn new() -> Self {
        Self { step: 0 }
    }

    /// Restarts from the shortest spin (e.g. after the awaited condition changed once).
    #[inline]
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// Waits one round: spins `2^step` hints while `step <= 6`, then yields each round.
    #[inline]
    pub fn snooze(&mut self) {
        if cfg!(loom) {
            shim::thread::yield_now();
            return;
        }
        if self.step <= SPIN_LIMIT {
            for _ in 0..(1u32 << self.step) {
                shim::hint::spin_loop();
            }
            self.step += 1;
        } else {
            shim::thread::yield_now();
        }
    }

    /// Whether spinning is exhausted and each round now yields the CPU.
    #[inline]
    pub fn is_yielding(&self) -> bool {
        self.step > SPIN_LIMIT
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn backoff_switches_to_yield_after_spin_limit() {
        let mut b = Backoff::new();
        for _ in 0..=SPIN_LIMIT {
            assert!(!b.is_yielding());
            b.snooze();
        }
        assert!(b.is_yielding());
        b.snooze();
        assert!(b.is_yielding());
        b.reset();
        assert!(!b.is_yielding());
    }
}
