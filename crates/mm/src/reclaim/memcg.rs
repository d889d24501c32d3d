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
//! The counter is one atomic per group, updated by every charge and uncharge: the shared cache
//! line whose traffic the kernel's per-CPU charge stock (`memcg_stock`) exists to avoid. The
//! stock is not modelled yet, so a group's counter is as contended as the kernel's was before
//! it.
//!
//! Not modelled: page-cache pages (files are tmpfs-like and stay with the root), swap
//! accounting (`memory.swap.max`, cgroup v1 `memsw`), nested hierarchies, `memory.high`
//! throttling, and moving charges between groups.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pagelab_sync::CachePadded;

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

/// Every group of the machine.
pub struct MemCgroups {
    groups: Box<[MemCgroup]>,
}

impl MemCgroups {
    /// The root and `nr - 1` children, unlimited.
    pub fn new(nr: usize) -> Self {
        assert!(nr >= 1, "a machine has at least the root memory cgroup");
        MemCgroups {
            groups: (0..nr).map(|_| MemCgroup::new()).collect(),
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

    /// `page_counter_try_charge`: add `nr` pages unless that passes the limit. The add comes
    /// first and is undone on failure, so concurrent charges never overshoot together (one of
    /// them fails and retries after reclaim).
    pub fn try_charge(&self, id: u32, nr: u64) -> bool {
        if id == ROOT_MEMCG {
            return true;
        }
        let g = &self.groups[id as usize];
        let new = g.usage.fetch_add(nr, Relaxed) + nr;
        if new > g.max.load(Relaxed) {
            g.usage.fetch_sub(nr, Relaxed);
            g.max_events.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    /// `page_counter_uncharge`.
    pub fn uncharge(&self, id: u32, nr: u64) {
        if id == ROOT_MEMCG {
            return;
        }
        let prev = self.groups[id as usize].usage.fetch_sub(nr, Relaxed);
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
        Ok(MemcgStat {
            usage: g.usage.load(Relaxed),
            max: g.max.load(Relaxed),
            max_events: g.max_events.load(Relaxed),
            oom_events: g.oom_events.load(Relaxed),
            reclaimed: g.reclaimed.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_uncharges_make_room() {
        let m = MemCgroups::new(3);
        m.set_max(1, 4).unwrap();
        for _ in 0..4 {
            assert!(m.try_charge(1, 1));
        }
        assert!(!m.try_charge(1, 1), "a fifth page passes max");
        assert!(!m.has_room(1, 1));
        assert!(m.try_charge(2, 100), "an unlimited sibling is unaffected");
        m.uncharge(1, 1);
        assert!(m.has_room(1, 1));
        assert!(m.try_charge(1, 1));
        let s = m.stat(1).unwrap();
        assert_eq!((s.usage, s.max, s.max_events), (4, 4, 1));
        assert!(
            m.try_charge(ROOT_MEMCG, 1 << 40),
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
        let m = MemCgroups::new(2);
        m.set_max(1, 1000).unwrap();
        let ok = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if m.try_charge(1, 1) {
                            ok.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(ok.load(Relaxed), 1000);
        assert_eq!(m.stat(1).unwrap().usage, 1000);
    }
}
