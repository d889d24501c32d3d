//! The LRU layer's event counters (the LRU's share of `/proc/vmstat`, plus what the lock
//! experiments need: lock holds per flush and per release, `smp_list_del` waits).
//!
//! One set of counters per virtual CPU, each set in its own cache line
//! ([`PerCpu`]), plus one more set for callers that run on no particular
//! CPU (`isolate`, which takes no CPU id, as `folio_isolate_lru` does not). Increments are
//! `Relaxed` `fetch_add`s, so a remote drain counting on the drained CPU's set loses nothing;
//! readers sum over the sets. No lock protects them and no invariant depends on them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::cpu::{CpuId, PerCpu};

macro_rules! lru_events {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)*) => {
        /// A counted LRU event.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum LruEvent { $($(#[$doc])* $name,)* }

        impl LruEvent {
            pub const ALL: &'static [LruEvent] = &[$(LruEvent::$name,)*];
            /// The name printed in reports.
            pub fn label(self) -> &'static str {
                match self { $(LruEvent::$name => $label,)* }
            }
        }
    };
}

lru_events! {
    /// Pages given to `add` (`folio_add_lru`).
    Add => "lru_add",
    /// Pages linked by a lock hold of their own: every add under `add = "per-page"`, and adds
    /// whose per-CPU batch was being drained remotely (its trylock failed).
    AddDirect => "lru_add_direct",
    /// The owner's trylock of its batch failed because a remote drain held it.
    BatchTrylockFail => "lru_batch_trylock_fail",
    /// Per-CPU batches flushed (`folio_batch_move_lru`), full or drained.
    Flush => "lru_flush",
    /// Pages moved to the lists by flushes.
    FlushPages => "lru_flush_pages",
    /// lru_lock holds taken by flushes: one per run of a lock (`batch`) or per lock (`splice`).
    FlushLockHold => "lru_flush_lock_hold",
    /// References dropped by `release_pages`/`put_page`.
    Release => "lru_release",
    /// Pages freed by them (their last reference).
    ReleaseFree => "lru_release_free",
    /// lru_lock holds (exclusive for `locked`, shared for `concurrent`) taken by releases.
    ReleaseLockHold => "lru_release_lock_hold",
    /// Under `release = "batch-locks"`, pages unlinked by releases that needed `lru_lock` on
    /// top of their batch lock (sentinels); the others left under their batch lock alone.
    ReleaseSentinel => "lru_release_sentinel",
    /// Wait-loop rounds in `smp_list_del` (adjacent removals colliding).
    SmpDelWait => "lru_smp_del_wait",
    /// Successful isolations.
    Isolate => "lru_isolate",
    /// Isolations that lost the PG_lru race (or found a page not on an LRU list).
    IsolateLost => "lru_isolate_lost",
    /// Isolated pages put back.
    Putback => "lru_putback",
}

const NR_EVENTS: usize = LruEvent::ALL.len();

/// Per-CPU LRU event counters (plus one unbound set).
pub struct LruEvents {
    cpus: PerCpu<[AtomicU64; NR_EVENTS]>,
    unbound: CpuId,
}

impl LruEvents {
    pub fn new(nr_cpus: usize) -> Self {
        LruEvents {
            cpus: PerCpu::new(nr_cpus + 1, |_| std::array::from_fn(|_| AtomicU64::new(0))),
            unbound: CpuId(nr_cpus as u16),
        }
    }

    #[inline]
    pub fn count(&self, cpu: CpuId, ev: LruEvent, n: u64) {
        self.cpus[cpu][ev as usize].fetch_add(n, Relaxed);
    }

    /// Count an event of a caller bound to no CPU.
    #[inline]
    pub fn count_unbound(&self, ev: LruEvent, n: u64) {
        self.count(self.unbound, ev, n);
    }

    pub fn snapshot(&self) -> LruStats {
        let mut s = LruStats::default();
        for (_, c) in self.cpus.iter() {
            for (acc, v) in s.counts.iter_mut().zip(c) {
                *acc += v.load(Relaxed);
            }
        }
        s
    }

    pub fn reset(&self) {
        for (_, c) in self.cpus.iter() {
            for a in c {
                a.store(0, Relaxed);
            }
        }
    }
}

/// Summed LRU event counts, from [`Lru::stats`](super::Lru::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruStats {
    counts: [u64; NR_EVENTS],
}

impl LruStats {
    pub fn get(&self, ev: LruEvent) -> u64 {
        self.counts[ev as usize]
    }

    /// Every event with its count, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (LruEvent, u64)> + '_ {
        LruEvent::ALL.iter().map(|&e| (e, self.get(e)))
    }

    /// Mean lru_lock holds per batch flush (0 when nothing was flushed).
    pub fn lock_holds_per_flush(&self) -> f64 {
        let f = self.get(LruEvent::Flush);
        if f == 0 {
            0.0
        } else {
            self.get(LruEvent::FlushLockHold) as f64 / f as f64
        }
    }
}
