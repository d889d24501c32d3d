//! The swap cache (mm/swap_state.c): swap entry → page, or → shadow once the page is gone.
//!
//! # What it models
//!
//! A page being swapped out stays findable by its swap entry until reclaim frees it
//! (`add_to_swap_cache`, `__delete_from_swap_cache`), so that a fault on the swap PTE meanwhile
//! finds the page instead of reading the slot (`swap_cache_get_folio`). When reclaim frees the
//! page it leaves a *shadow* in its place ([`super::workingset`]), which the swap-in of a later
//! fault takes back to judge the refault (`add_to_swap_cache` hands back the shadow it
//! replaces). Freeing the swap slot drops the shadow (`clear_shadow_from_swap_cache`).
//!
//! # Why a flat array of words
//!
//! The kernel keeps one xarray per 64 MiB of swap space (`SWAP_ADDRESS_SPACE_PAGES`), each with
//! its own `xa_lock`, so that stores into different parts of a device do not serialise on one
//! lock; lookups walk the tree under RCU. Here the index space is already dense and bounded
//! (the device's slots, as `swap_map` is), so the cache is one `AtomicU64` per slot. A lookup
//! is one load, and an insert, delete or shadow exchange is one compare-and-swap on that slot's
//! word: there is no lock at all, and two CPUs contend only when their slots share a cache
//! line (8 slots). The price is 8 bytes per slot allocated up front (0.2% of the slot's 4 KiB),
//! about what a full xarray leaf costs per entry; an engine's swap devices are small enough
//! that the sparse tree would save nothing worth its walk.
//!
//! Word encoding: `0` empty; `(pfn + 1) << 1` a page (bit 0 clear, never 0); `shadow << 1 | 1`
//! a shadow (bit 0 set, the xarray's value-entry tag), so shadows have 63 bits
//! ([`super::workingset::SHADOW_BITS`]).
//!
//! # Locking rules
//!
//! * Each slot's word is changed only by compare-and-swap, so the operations here are atomic
//!   with respect to each other; they never block.
//! * *Who* may insert is decided outside: the caller owns the slot's `SWAP_HAS_CACHE`
//!   reservation in the device's `swap_map` (from `folio_alloc_swap` on swap-out, or
//!   `swapcache_prepare` on swap-in), as in the kernel, where that bit, not the xarray lock,
//!   settles races between two faults reading in the same entry. An insert that finds a page
//!   fails with [`Exists`].
//! * A page is published with Release and looked up with Acquire, so a reader that finds the
//!   pfn also sees what the inserter wrote to the page's metadata before inserting.
//! * The device clears a slot's shadow when it frees the slot, before the slot can be handed
//!   out again; a page must have been deleted before its `SWAP_HAS_CACHE` reservation is
//!   dropped (the device's `check` reports a page cached on a slot without the reservation).

use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};

use super::swap::SwapEntry;
use crate::page::Pfn;

/// The kernel's swap cache lock: one `xa_lock` of `address_space->i_pages` per 64 MiB of swap
/// space (`swapper_spaces`, `SWAP_ADDRESS_SPACE_SHIFT` = 14 pages), taken to insert a page
/// (`add_to_swap_cache`, also on swap-in, where it replaces the shadow), to delete it
/// (`__delete_from_swap_cache` under `__remove_mapping`, `folio_free_swap`) and to clear a
/// freed slot's shadow (`clear_shadow_from_swap_cache`), in mm/swap_state.c. The engine needs
/// no lock (module docs), so only the projector sees it: each of those is traced as one
/// atomic on the lock's line (a short hold: lock and unlock on one line), per 64 MiB of the
/// device, so that CPUs swapping in and out of the same part of a device meet there.
pub static SWAP_CACHE_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("swap cache xa_lock", pagelab_sync::Scope::Machine);

/// Pages of swap space per swap cache lock (`SWAP_ADDRESS_SPACE_PAGES`).
pub const SWAP_ADDRESS_SPACE_PAGES: u64 = 1 << 14;

/// The entry already has a page in the swap cache (`-EEXIST`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("swap entry already cached by page {pfn:?}")]
pub struct Exists {
    pub pfn: Pfn,
}

/// What a slot of the swap cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSlot {
    Empty,
    Page(Pfn),
    Shadow(u64),
}

impl CacheSlot {
    #[inline]
    fn decode(w: u64) -> CacheSlot {
        if w == 0 {
            CacheSlot::Empty
        } else if w & 1 == 1 {
            CacheSlot::Shadow(w >> 1)
        } else {
            CacheSlot::Page(Pfn(((w >> 1) - 1) as u32))
        }
    }

    #[inline]
    fn encode(self) -> u64 {
        match self {
            CacheSlot::Empty => 0,
            CacheSlot::Page(pfn) => (u64::from(pfn.0) + 1) << 1,
            CacheSlot::Shadow(s) => {
                debug_assert!(s < 1 << 63, "shadow {s:#x} exceeds 63 bits");
                (s << 1) | 1
            }
        }
    }
}

/// The swap cache of one swap device: one word per slot. See the module documentation.
pub struct SwapCache {
    swp_type: u32,
    slots: Box<[AtomicU64]>,
}

impl SwapCache {
    /// A cache for a device of `nr_slots` slots (header slot included).
    pub fn new(swp_type: u32, nr_slots: usize) -> Self {
        SwapCache {
            swp_type,
            slots: (0..nr_slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records the swap cache lock of `entry`'s 64 MiB of swap space ([`SWAP_CACHE_LOCK`]);
    /// its instance is the address of the first slot word of that space, one per space.
    #[inline]
    fn trace_xa_lock(&self, entry: SwapEntry) {
        if pagelab_sync::trace::active() {
            let first = (entry.offset() / SWAP_ADDRESS_SPACE_PAGES) * SWAP_ADDRESS_SPACE_PAGES;
            let at = self.slots.as_ptr() as usize + first as usize * 8;
            pagelab_sync::trace::atomic(&SWAP_CACHE_LOCK, at);
        }
    }

    #[inline]
    fn word(&self, entry: SwapEntry) -> &AtomicU64 {
        debug_assert_eq!(
            entry.swp_type(),
            self.swp_type,
            "{entry:?} of another device"
        );
        &self.slots[entry.offset() as usize]
    }

    /// What the slot holds now (a snapshot).
    #[inline]
    pub fn get(&self, entry: SwapEntry) -> CacheSlot {
        CacheSlot::decode(self.word(entry).load(Acquire))
    }

    /// `add_to_swap_cache`: make `pfn` the page of `entry`. Returns the shadow it replaced, if
    /// any (the kernel's `shadowp`), or [`Exists`] if a page is cached already. The caller
    /// holds the slot's `SWAP_HAS_CACHE` reservation.
    pub fn add_to_swap_cache(&self, entry: SwapEntry, pfn: Pfn) -> Result<Option<u64>, Exists> {
        self.trace_xa_lock(entry);
        let w = self.word(entry);
        let new = CacheSlot::Page(pfn).encode();
        let mut cur = w.load(Relaxed);
        loop {
            let old = match CacheSlot::decode(cur) {
                CacheSlot::Page(p) => return Err(Exists { pfn: p }),
                CacheSlot::Shadow(s) => Some(s),
                CacheSlot::Empty => None,
            };
            match w.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => return Ok(old),
                Err(x) => cur = x,
            }
        }
    }

    /// `swap_cache_get_folio` without the reference: the page cached for `entry`.
    #[inline]
    pub fn lookup(&self, entry: SwapEntry) -> Option<Pfn> {
        match self.get(entry) {
            CacheSlot::Page(p) => Some(p),
            _ => None,
        }
    }

    /// `__delete_from_swap_cache`: take the page out, leaving `shadow` (or nothing) in its
    /// place. Returns the page removed; with no page cached, changes nothing and returns `None`.
    pub fn delete_from_swap_cache(&self, entry: SwapEntry, shadow: Option<u64>) -> Option<Pfn> {
        self.trace_xa_lock(entry);
        let w = self.word(entry);
        let new = shadow.map_or(CacheSlot::Empty, CacheSlot::Shadow).encode();
        let mut cur = w.load(Relaxed);
        loop {
            let CacheSlot::Page(p) = CacheSlot::decode(cur) else {
                return None;
            };
            match w.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => return Some(p),
                Err(x) => cur = x,
            }
        }
    }

    /// Take the shadow of `entry` out, if it holds one (a page stays where it is).
    pub fn take_shadow(&self, entry: SwapEntry) -> Option<u64> {
        self.trace_xa_lock(entry);
        let w = self.word(entry);
        let mut cur = w.load(Relaxed);
        loop {
            let CacheSlot::Shadow(s) = CacheSlot::decode(cur) else {
                return None;
            };
            match w.compare_exchange_weak(cur, 0, AcqRel, Relaxed) {
                Ok(_) => return Some(s),
                Err(x) => cur = x,
            }
        }
    }

    /// `clear_shadow_from_swap_cache` for one slot: drop its shadow, never a page. Returns
    /// whether there was a shadow.
    #[inline]
    pub fn clear(&self, entry: SwapEntry) -> bool {
        self.take_shadow(entry).is_some()
    }

    /// Pages and shadows cached (an O(slots) scan; a snapshot unless quiescent).
    pub fn count(&self) -> (u64, u64) {
        let (mut pages, mut shadows) = (0, 0);
        for w in self.slots.iter() {
            match CacheSlot::decode(w.load(Relaxed)) {
                CacheSlot::Page(_) => pages += 1,
                CacheSlot::Shadow(_) => shadows += 1,
                CacheSlot::Empty => {}
            }
        }
        (pages, shadows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(off: u64) -> SwapEntry {
        SwapEntry::new(3, off)
    }

    #[test]
    fn encoding_round_trips() {
        for s in [
            CacheSlot::Empty,
            CacheSlot::Page(Pfn(0)),
            CacheSlot::Page(Pfn(u32::MAX)),
            CacheSlot::Shadow(0),
            CacheSlot::Shadow((1 << 63) - 1),
        ] {
            assert_eq!(CacheSlot::decode(s.encode()), s);
        }
        assert_ne!(CacheSlot::Page(Pfn(0)).encode(), 0);
    }

    #[test]
    fn page_then_shadow_then_refault() {
        let c = SwapCache::new(3, 8);
        assert_eq!(c.lookup(e(1)), None);
        assert_eq!(c.add_to_swap_cache(e(1), Pfn(7)), Ok(None));
        assert_eq!(
            c.add_to_swap_cache(e(1), Pfn(8)),
            Err(Exists { pfn: Pfn(7) })
        );
        assert_eq!(c.lookup(e(1)), Some(Pfn(7)));
        assert_eq!(c.take_shadow(e(1)), None, "a page is not a shadow");
        assert!(!c.clear(e(1)));
        assert_eq!(c.delete_from_swap_cache(e(1), Some(0x1234)), Some(Pfn(7)));
        assert_eq!(c.get(e(1)), CacheSlot::Shadow(0x1234));
        assert_eq!(c.delete_from_swap_cache(e(1), None), None);
        assert_eq!(c.count(), (0, 1));
        // Swap-in: the insert hands back the shadow it replaces.
        assert_eq!(c.add_to_swap_cache(e(1), Pfn(9)), Ok(Some(0x1234)));
        assert_eq!(c.delete_from_swap_cache(e(1), None), Some(Pfn(9)));
        assert_eq!(c.get(e(1)), CacheSlot::Empty);
        c.delete_from_swap_cache(e(2), Some(5));
        assert_eq!(c.get(e(2)), CacheSlot::Empty, "no page, nothing changes");
        c.add_to_swap_cache(e(2), Pfn(1)).unwrap();
        c.delete_from_swap_cache(e(2), Some(5));
        assert!(c.clear(e(2)));
        assert_eq!(c.get(e(2)), CacheSlot::Empty);
    }

    #[test]
    fn racing_inserts_have_one_winner() {
        let c = SwapCache::new(3, 4);
        let wins: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let c = &c;
                    s.spawn(move || c.add_to_swap_cache(e(3), Pfn(i)).is_ok() as usize)
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
    }
}
