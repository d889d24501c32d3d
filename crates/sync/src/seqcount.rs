//! Sequence counter: lock-free readers that retry when they overlap a writer.
//!
//! Models `seqcount_t` from include/linux/seqlock.h (`write_seqcount_begin`/`_end`,
//! `read_seqcount_begin`/`_retry`, `raw_read_seqcount`). pagelab uses it where the
//! kernel does, e.g. for the per-VMA lock's `mm_lock_seq` and for lockless page-table
//! walks.
//!
//! A writer makes the count odd before changing the protected data and even again
//! afterwards. A reader samples an even count, reads the data, and accepts what it read
//! only if the count is still the same: then no write section overlapped its reads.
//!
//! # Rules
//!
//! * **Writers must be serialised by the caller** (the kernel pairs a seqcount with a
//!   spinlock or mutex for this; `seqlock_t` bundles them). Two concurrent
//!   `write_begin`s corrupt the count; debug builds assert the count's parity.
//! * **Protected data must be atomics accessed with `Relaxed`**: readers race with the
//!   writer by design, which would be undefined behaviour on plain memory. The
//!   orderings here make the relaxed accesses safe:
//!   - [`SeqCount::write_begin`] stores the odd count and then issues a `Release`
//!     fence (the kernel's `smp_wmb()`), so a reader that sees any data store of the
//!     section and then runs the `Acquire` fence in [`SeqCount::read_retry`] (the
//!     kernel's `smp_rmb()`) must also see the odd count, or a later one, and retries.
//!   - [`SeqCount::write_end`] is a `Release` store of the even count, paired with the
//!     `Acquire` load in [`SeqCount::read_begin`]: a reader that starts from it sees
//!     all of the section's data stores.
//!
//! ```
//! # use pagelab_sync::SeqCount;
//! # use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! let seq = SeqCount::new();
//! let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
//! seq.write_begin();
//! a.store(1, Relaxed);
//! b.store(1, Relaxed);
//! seq.write_end();
//! let (x, y) = loop {
//!     let start = seq.read_begin();
//!     let pair = (a.load(Relaxed), b.load(Relaxed));
//!     if !seq.read_retry(start) {
//!         break pair;
//!     }
//! };
//! assert_eq!(x, y);
//! ```

use core::fmt;

use crate::backoff::Backoff;
use crate::shim::atomic::Ordering::{Acquire, Relaxed, Release};
use crate::shim::atomic::{AtomicU32, fence};

/// The kernel's `seqcount_t`.
pub struct SeqCount {
    seq: AtomicU32,
}

impl SeqCount {
    /// A counter at 0 (no write in progress).
    pub fn new() -> Self {
        Self {
            seq: AtomicU32::new(0),
        }
    }

    /// Starts a write section: makes the count odd (`write_seqcount_begin`).
    ///
    /// The caller must exclude other writers until [`SeqCount::write_end`].
    #[inline]
    pub fn write_begin(&self) {
        let s = self.seq.load(Relaxed);
        debug_assert!(s & 1 == 0, "SeqCount::write_begin inside a write section");
        self.seq.store(s.wrapping_add(1), Relaxed);
        fence(Release);
    }

    /// Ends a write section: makes the count even again (`write_seqcount_end`).
    #[inline]
    pub fn write_end(&self) {
        let s = self.seq.load(Relaxed);
        debug_assert!(s & 1 == 1, "SeqCount::write_end without write_begin");
        self.seq.store(s.wrapping_add(1), Release);
    }

    /// Starts a read section: waits until no write is in progress and returns the
    /// count to pass to [`SeqCount::read_retry`] (`read_seqcount_begin`).
    #[inline]
    pub fn read_begin(&self) -> u32 {
        let s = self.seq.load(Acquire);
        if s & 1 == 0 {
            return s;
        }
        self.wait_even()
    }

    #[cold]
    fn wait_even(&self) -> u32 {
        let mut backoff = Backoff::new();
        loop {
            backoff.snooze();
            let s = self.seq.load(Acquire);
            if s & 1 == 0 {
                return s;
            }
        }
    }

    /// Whether the reads since `read_begin` returned `start` may have overlapped a
    /// write and must be retried (`read_seqcount_retry`).
    #[inline]
    #[must_use = "a read section whose retry is ignored may have seen torn data"]
    pub fn read_retry(&self, start: u32) -> bool {
        fence(Acquire);
        self.seq.load(Relaxed) != start
    }

    /// The current count, odd while a write is in progress (`raw_read_seqcount`).
    #[inline]
    pub fn raw_read(&self) -> u32 {
        self.seq.load(Acquire)
    }
}

impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SeqCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeqCount")
            .field("seq", &self.seq.load(Relaxed))
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn write_section_makes_count_odd_then_even() {
        let seq = SeqCount::new();
        assert_eq!(seq.raw_read(), 0);
        seq.write_begin();
        assert_eq!(seq.raw_read() & 1, 1);
        seq.write_end();
        assert_eq!(seq.raw_read(), 2);
    }

    #[test]
    fn overlapping_write_forces_retry() {
        let seq = SeqCount::new();
        let start = seq.read_begin();
        assert!(!seq.read_retry(start));
        seq.write_begin();
        assert!(seq.read_retry(start), "write in progress");
        seq.write_end();
        assert!(seq.read_retry(start), "write completed");
        let again = seq.read_begin();
        assert_eq!(again, start + 2);
        assert!(!seq.read_retry(again));
    }

    #[test]
    fn read_begin_waits_for_write_end() {
        let seq = SeqCount::new();
        let returned = AtomicBool::new(false);
        seq.write_begin();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let start = seq.read_begin();
                returned.store(true, Relaxed);
                start
            });
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(!returned.load(Relaxed), "read_begin returned mid-write");
            seq.write_end();
            assert_eq!(reader.join().unwrap(), 2);
        });
        assert!(returned.load(Relaxed));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "inside a write section")]
    fn nested_write_begin_is_caught_in_debug() {
        let seq = SeqCount::new();
        seq.write_begin();
        seq.write_begin();
    }
}
