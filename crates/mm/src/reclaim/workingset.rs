//! Refault detection with shadow entries (mm/workingset.c, the classic two-list LRU variant).
//!
//! # What it models
//!
//! When reclaim evicts a page, the slot it leaves in its cache (the swap cache for anonymous
//! pages) keeps a *shadow*: who owned the page (memcg id, node), whether it was part of the
//! working set (`PG_workingset`), and a snapshot of its lruvec's `nonresident_age`, a clock that
//! ticks once per eviction and once per activation (`workingset_age_nonresident`). When the page
//! is faulted back in, the ticks since the snapshot, the *refault distance*, is how many
//! slots of inactive list the page would have needed to stay resident. If that is no more than
//! the working set's size (`workingset_test_recent`), the page would have stayed resident had
//! the active list given way, so it is activated straight away (`workingset_refault`).
//!
//! Packing (`pack_shadow`/`unpack_shadow`), from the least significant bit: the workingset bit,
//! [`NODES_SHIFT`] bits of node, [`MEMCG_ID_SHIFT`] bits of memcg id, then the eviction counter
//! truncated to [`EVICTION_BITS`] bits. The whole fits in [`SHADOW_BITS`] = 63 bits, since the
//! cache that stores it keeps one tag bit to tell a shadow from a page (the kernel's xarray
//! "value entries"). When memory is so large that 40 bits of counter cannot span it,
//! [`bucket_order`] coarsens the counter (the kernel's `bucket_order`).
//!
//! Distances are computed modulo 2^[`EVICTION_BITS`], so a counter that wrapped since the
//! eviction still gives the right distance (an entry lapped by the whole counter range gives a
//! wrong small one; the kernel accepts the same).
//!
//! Not modelled: hierarchical aging (the kernel ages every ancestor memcg's lruvec too), the
//! MGLRU variant, and the memcg-id lookup that can find the evicting cgroup gone.
//!
//! # Concurrency
//!
//! Everything here is a pure function except [`NonresidentAge`], one relaxed atomic counter
//! per lruvec (the kernel's `atomic_long_t nonresident_age`): it needs no ordering with
//! anything, since a refault distance off by a concurrent eviction or two changes nothing that
//! matters.
//!
//! # Invariants (unit tests below)
//!
//! `unpack_shadow(pack_shadow(x)) == x` for every field in range, the packed value fits in 63
//! bits, and a refault activates exactly when the distance is at most the working set size.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `WORKINGSET_SHIFT`: one bit for `PG_workingset`.
pub const WORKINGSET_SHIFT: u32 = 1;
/// `NODES_SHIFT` (the x86-64 default config's 6: up to 64 nodes).
pub const NODES_SHIFT: u32 = 6;
/// `MEM_CGROUP_ID_SHIFT`.
pub const MEMCG_ID_SHIFT: u32 = 16;
/// Bits a shadow may use: a 64-bit word less the tag bit of its cache slot (`BITS_PER_XA_VALUE`).
pub const SHADOW_BITS: u32 = 63;
/// Bits left for the eviction counter (64 - `EVICTION_SHIFT`): 40.
pub const EVICTION_BITS: u32 = SHADOW_BITS - WORKINGSET_SHIFT - NODES_SHIFT - MEMCG_ID_SHIFT;
/// `EVICTION_MASK`.
pub const EVICTION_MASK: u64 = (1 << EVICTION_BITS) - 1;

/// The fields of a shadow entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shadow {
    pub memcg: u16,
    /// Node id, below 2^[`NODES_SHIFT`].
    pub node: u16,
    /// The eviction counter as stored: already shifted right by the bucket order and truncated
    /// to [`EVICTION_BITS`].
    pub eviction: u64,
    /// The page had `PG_workingset` when it was evicted.
    pub workingset: bool,
}

/// `pack_shadow`. `eviction` is truncated to [`EVICTION_BITS`]; `node` must be below
/// 2^[`NODES_SHIFT`].
#[inline]
pub fn pack_shadow(memcg: u16, node: u16, eviction: u64, workingset: bool) -> u64 {
    debug_assert!(u32::from(node) < 1 << NODES_SHIFT, "node {node} too large");
    let mut v = eviction & EVICTION_MASK;
    v = (v << MEMCG_ID_SHIFT) | u64::from(memcg);
    v = (v << NODES_SHIFT) | u64::from(node) & ((1 << NODES_SHIFT) - 1);
    (v << WORKINGSET_SHIFT) | u64::from(workingset)
}

/// `unpack_shadow`.
#[inline]
pub fn unpack_shadow(shadow: u64) -> Shadow {
    let workingset = shadow & 1 != 0;
    let v = shadow >> WORKINGSET_SHIFT;
    let node = (v & ((1 << NODES_SHIFT) - 1)) as u16;
    let v = v >> NODES_SHIFT;
    let memcg = (v & ((1 << MEMCG_ID_SHIFT) - 1)) as u16;
    let eviction = (v >> MEMCG_ID_SHIFT) & EVICTION_MASK;
    Shadow {
        memcg,
        node,
        eviction,
        workingset,
    }
}

/// The kernel's `bucket_order` (set in `workingset_init`): how many low bits of the counter to
/// drop so that [`EVICTION_BITS`] still span every page of a machine of `total_pages`.
pub fn bucket_order(total_pages: u64) -> u32 {
    // fls_long(totalram_pages - 1)
    let max_order = 64 - total_pages.saturating_sub(1).leading_zeros();
    max_order.saturating_sub(EVICTION_BITS)
}

/// `workingset_eviction` without its side effect: the shadow of a page evicted when its
/// lruvec's `nonresident_age` read `age`. See [`NonresidentAge::evict`] for the whole step.
#[inline]
pub fn workingset_eviction(
    age: u64,
    memcg: u16,
    node: u16,
    workingset: bool,
    bucket_order: u32,
) -> u64 {
    pack_shadow(memcg, node, age >> bucket_order, workingset)
}

/// What a refault tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefaultVerdict {
    /// Evictions and activations on the lruvec since this page's eviction (in pages,
    /// rounded to the bucket order).
    pub refault_distance: u64,
    /// Activate the page at once: the distance fits in the working set
    /// (`workingset_test_recent`).
    pub activate: bool,
    /// The page was in the working set when evicted: restore `PG_workingset`
    /// (`WORKINGSET_RESTORE`); meaningful only with `activate`.
    pub workingset: bool,
    /// Whose lruvec the distance was measured on.
    pub memcg: u16,
    pub node: u16,
}

/// `workingset_test_recent` on a shadow: the refault distance from the eviction snapshot to
/// `refault_age` (the evicting lruvec's `nonresident_age` now), and whether it is at most
/// `workingset_size` (see [`workingset_size`]).
#[inline]
pub fn workingset_refault(
    shadow: u64,
    refault_age: u64,
    workingset_size: u64,
    bucket_order: u32,
) -> RefaultVerdict {
    let s = unpack_shadow(shadow);
    let eviction = s.eviction << bucket_order;
    let refault_distance = refault_age.wrapping_sub(eviction) & EVICTION_MASK;
    RefaultVerdict {
        refault_distance,
        activate: refault_distance <= workingset_size,
        workingset: s.workingset,
        memcg: s.memcg,
        node: s.node,
    }
}

/// Pages on the four LRU lists of an lruvec (`lruvec_page_state(NR_*_ANON/FILE)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruSizes {
    pub inactive_anon: u64,
    pub active_anon: u64,
    pub inactive_file: u64,
    pub active_file: u64,
}

/// The working set a refaulting page competes with (the sum in `workingset_test_recent`): the
/// active file list; for an anonymous page also the inactive file list; and, when swap space is
/// left, the active anon list (and for a file page the inactive anon list too), since anon
/// pages can then be reclaimed to make room.
pub fn workingset_size(file: bool, lists: LruSizes, swap_available: bool) -> u64 {
    let mut size = lists.active_file;
    if !file {
        size += lists.inactive_file;
    }
    if swap_available {
        size += lists.active_anon;
        if file {
            size += lists.inactive_anon;
        }
    }
    size
}

/// One lruvec's `nonresident_age`: the clock shadow entries are stamped with.
#[derive(Debug, Default)]
pub struct NonresidentAge(AtomicU64);

impl NonresidentAge {
    pub const fn new() -> Self {
        NonresidentAge(AtomicU64::new(0))
    }

    /// The current value (`atomic_long_read(&lruvec->nonresident_age)`).
    #[inline]
    pub fn read(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// `workingset_age_nonresident`: the lruvec aged by `nr_pages` (an eviction or an
    /// activation).
    #[inline]
    pub fn age(&self, nr_pages: u64) {
        self.0.fetch_add(nr_pages, Relaxed);
    }

    /// `workingset_eviction`: snapshot the clock into a shadow for an evicted page of
    /// `nr_pages`, then tick the clock for the eviction.
    pub fn evict(
        &self,
        memcg: u16,
        node: u16,
        workingset: bool,
        nr_pages: u64,
        bucket_order: u32,
    ) -> u64 {
        let shadow = workingset_eviction(self.read(), memcg, node, workingset, bucket_order);
        self.age(nr_pages);
        shadow
    }

    /// `workingset_refault` for a page that was evicted from this lruvec: judge the shadow
    /// against the clock now and, if the page is activated, tick the clock for the activation.
    pub fn refault(
        &self,
        shadow: u64,
        workingset_size: u64,
        nr_pages: u64,
        bucket_order: u32,
    ) -> RefaultVerdict {
        let v = workingset_refault(shadow, self.read(), workingset_size, bucket_order);
        if v.activate {
            self.age(nr_pages);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_widths_match_the_kernel_on_x86_64() {
        // EVICTION_SHIFT = (64 - 63) + 1 + 6 + 16 = 24, leaving 40 bits.
        assert_eq!(EVICTION_BITS, 40);
        assert_eq!(EVICTION_MASK, 0xff_ffff_ffff);
    }

    #[test]
    fn packing_by_hand() {
        // ((5 << 16 | 3) << 6 | 1) << 1 | 1 = 5 << 23 | 3 << 7 | 1 << 1 | 1.
        let s = pack_shadow(3, 1, 5, true);
        assert_eq!(s, 41_943_427);
        assert_eq!(s, (5 << 23) | (3 << 7) | (1 << 1) | 1);
        assert_eq!(
            unpack_shadow(s),
            Shadow {
                memcg: 3,
                node: 1,
                eviction: 5,
                workingset: true
            }
        );
        assert_eq!(pack_shadow(0, 0, 0, false), 0);
        assert_eq!(pack_shadow(0, 0, 0, true), 1);
        assert_eq!(pack_shadow(0, 63, 0, false), 63 << 1);
        assert_eq!(pack_shadow(0xffff, 0, 0, false), 0xffff << 7);
    }

    #[test]
    fn extreme_fields_round_trip_within_63_bits() {
        let s = pack_shadow(u16::MAX, 63, u64::MAX, true);
        assert_eq!(s, (1 << 63) - 1, "every bit but the tag bit");
        let u = unpack_shadow(s);
        assert_eq!(
            (u.memcg, u.node, u.eviction, u.workingset),
            (u16::MAX, 63, EVICTION_MASK, true)
        );
        // The counter is truncated, not allowed to spill into the tag bit.
        assert_eq!(
            unpack_shadow(pack_shadow(7, 2, (1 << 40) + 9, false)).eviction,
            9
        );
        for (memcg, node, ev, ws) in [(1, 0, 1, false), (42, 5, 123_456_789, true)] {
            let u = unpack_shadow(pack_shadow(memcg, node, ev, ws));
            assert_eq!(
                (u.memcg, u.node, u.eviction, u.workingset),
                (memcg, node, ev, ws)
            );
        }
    }

    #[test]
    fn distance_rule_by_hand() {
        // Evicted at age 1000, refaulting at 1300: distance 300.
        let sh = workingset_eviction(1000, 2, 0, false, 0);
        let v = workingset_refault(sh, 1300, 300, 0);
        assert_eq!(v.refault_distance, 300);
        assert!(v.activate, "distance equal to the working set activates");
        assert!(!workingset_refault(sh, 1300, 299, 0).activate);
        assert!(workingset_refault(sh, 1300, 10_000, 0).activate);
        assert_eq!((v.memcg, v.node, v.workingset), (2, 0, false));
        // Refault at the eviction age itself: distance 0, always activates.
        assert_eq!(workingset_refault(sh, 1000, 0, 0).refault_distance, 0);
    }

    #[test]
    fn distance_survives_counter_wrap() {
        // Snapshot 10 before the 40-bit counter wraps; the refault comes 5 after the wrap.
        let sh = workingset_eviction((1 << 40) - 10, 0, 0, true, 0);
        let v = workingset_refault(sh, (1 << 40) + 5, 20, 0);
        assert_eq!(v.refault_distance, 15);
        assert!(v.activate && v.workingset);
        // The same across the 64-bit wrap of the clock itself.
        let sh = workingset_eviction(u64::MAX - 2, 0, 0, false, 0);
        assert_eq!(workingset_refault(sh, 4, 0, 0).refault_distance, 7);
    }

    #[test]
    fn buckets_coarsen_the_counter() {
        assert_eq!(bucket_order(1 << 20), 0);
        assert_eq!(bucket_order(1 << 40), 0);
        assert_eq!(bucket_order((1 << 40) + 1), 1);
        assert_eq!(bucket_order(1 << 42), 2);
        // With bucket order 2, age 1000 is stored as 250 and compared as 1000 again.
        let sh = workingset_eviction(1000, 0, 0, false, 2);
        assert_eq!(unpack_shadow(sh).eviction, 250);
        assert_eq!(workingset_refault(sh, 1100, 100, 2).refault_distance, 100);
        // Age 1003 falls in the same bucket: the distance is rounded up by the lost bits.
        let sh = workingset_eviction(1003, 0, 0, false, 2);
        assert_eq!(workingset_refault(sh, 1100, 0, 2).refault_distance, 100);
    }

    #[test]
    fn workingset_size_by_page_type_and_swap() {
        let l = LruSizes {
            inactive_anon: 1,
            active_anon: 10,
            inactive_file: 100,
            active_file: 1000,
        };
        assert_eq!(workingset_size(true, l, false), 1000);
        assert_eq!(workingset_size(false, l, false), 1100);
        assert_eq!(workingset_size(true, l, true), 1011);
        assert_eq!(workingset_size(false, l, true), 1110);
    }

    #[test]
    fn the_clock_ticks_on_eviction_and_activation() {
        let age = NonresidentAge::new();
        age.age(40);
        let a = age.evict(1, 0, false, 1, 0);
        assert_eq!(unpack_shadow(a).eviction, 40);
        assert_eq!(age.read(), 41);
        for _ in 0..9 {
            age.evict(1, 0, false, 1, 0);
        }
        assert_eq!(age.read(), 50);
        // Distance 10: not in a working set of 9, no tick.
        let v = age.refault(a, 9, 1, 0);
        assert_eq!((v.refault_distance, v.activate), (10, false));
        assert_eq!(age.read(), 50);
        // In a working set of 10: activated, and the activation ticks the clock.
        let v = age.refault(a, 10, 1, 0);
        assert_eq!((v.refault_distance, v.activate), (10, true));
        assert_eq!(age.read(), 51);
    }
}
