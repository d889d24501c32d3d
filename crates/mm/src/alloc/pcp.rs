//! Per-CPU page lists (`struct per_cpu_pages`, mm/page_alloc.c).
//!
//! Each (zone, CPU) pair caches free blocks so that most allocations and frees touch only
//! CPU-local data and `zone->lock` is taken once per `batch` operations: a refill
//! (`rmqueue_bulk`) moves a batch from the buddy lists under one lock hold, and a free that
//! finds the list at or above `high` returns a batch from the cold end (`free_pcppages_bulk`).
//! Frees go to the hot (head) end so that the next allocation reuses a cache-warm page.
//!
//! Locking: each pcp has its own spinlock, taken by the local CPU with *trylock*; it is
//! contended only by a remote drain (`drain_all_pages`), and a failed trylock falls back to the
//! zone (Mel Gorman, 5.19: "mm/page_alloc: protect PCP lists with a spinlock"). Lock order is
//! pcp->lock, then zone->lock.
//!
//! Policies ([`crate::policy::PcpPolicy`]): no lists; order-0 only (before 5.14); orders 0..3
//! (5.14+); fixed batch/high; or the 6.7 adaptive scheme, where `high` moves between
//! `high_min` and `high_max`, a run of frees without allocations drains bigger batches
//! (`free_count`), a run of refills fetches bigger batches (`alloc_factor`), and an idle pcp
//! decays `high` by 1/8 per second (`decay_pcp_high`, run by the vmstat worker).
//!
//! Invariant (checked): `count` equals the frames on the lists, every frame on a list has `PG_pcp`
//! set and its order in `private`.

use std::sync::atomic::Ordering::Relaxed;

use crate::alloc::buddy::{COSTLY_ORDER, FreeArea, MIGRATE_TYPES, MigrateType, Zone};
use crate::list::PageList;
use crate::page::{PageArray, Pfn, pg};
use crate::policy::{Count, PcpLists, PcpPolicy, PcpTune};

/// `NR_PCP_LISTS`: one list per (order 0..=3, migratetype).
pub const NR_PCP_LISTS: usize = MIGRATE_TYPES * (COSTLY_ORDER as usize + 1);
/// `CONFIG_PCP_BATCH_SCALE_MAX`: batches scale up to `batch << 5`.
pub const PCP_BATCH_SCALE_MAX: u32 = 5;

#[inline]
pub fn order_to_pindex(mt: MigrateType, order: u32) -> usize {
    order as usize * MIGRATE_TYPES + mt as usize
}

#[inline]
fn pindex_to_order(pindex: usize) -> u32 {
    (pindex / MIGRATE_TYPES) as u32
}

/// `zone_batchsize`: a quarter of managed/1024 pages, capped at 1 MiB worth, rounded down to a
/// power of two minus one (63 for zones of 1 GiB or more).
pub fn zone_batchsize(managed: u64) -> u32 {
    let mut batch = (managed >> 10).min(256) as u32;
    batch /= 4;
    batch = batch.max(1);
    let b = batch + batch / 2;
    let pow = 1u32 << (31 - b.leading_zeros());
    (pow - 1).max(1)
}

/// `zone_highsize`: the zone's low watermark (or managed/`fraction` if a fraction is given)
/// shared among the CPUs, but at least four batches.
pub fn zone_highsize(
    managed: u64,
    low_wmark: u64,
    batch: u32,
    nr_cpus: usize,
    fraction: u64,
) -> u32 {
    // fraction 0 means "use the low watermark" (percpu_pagelist_high_fraction unset).
    let total = managed.checked_div(fraction).unwrap_or(low_wmark);
    let high = total / nr_cpus.max(1) as u64;
    (high.min(u64::from(u32::MAX)) as u32).max(batch << 2)
}

/// The resolved per-zone pcp settings (`zone->pageset_batch`, `pageset_high_min/max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpParams {
    pub lists: PcpLists,
    pub batch: u32,
    pub high_min: u32,
    pub high_max: u32,
    pub adaptive: bool,
}

impl PcpParams {
    /// Resolve a policy for a zone of `managed` pages with low watermark `low_wmark`.
    pub fn resolve(p: &PcpPolicy, managed: u64, low_wmark: u64, nr_cpus: usize) -> PcpParams {
        let batch = match p.batch {
            Count::Fixed(b) => b,
            Count::Auto => zone_batchsize(managed),
        };
        let high = match p.high {
            Count::Fixed(h) => h,
            Count::Auto => zone_highsize(managed, low_wmark, batch, nr_cpus, 0),
        };
        let adaptive = p.tune == PcpTune::Adaptive;
        // MIN_PERCPU_PAGELIST_HIGH_FRACTION = 8: at most 1/8 of the zone on pcp lists.
        let high_max = if adaptive {
            zone_highsize(managed, low_wmark, batch, nr_cpus, 8).max(high)
        } else {
            high
        };
        PcpParams {
            lists: p.lists,
            batch,
            high_min: high,
            high_max,
            adaptive,
        }
    }

    /// Does an allocation or free of `order` go through the pcp (`pcp_allowed_order`)?
    #[inline]
    pub fn allowed(&self, order: u32) -> bool {
        match self.lists {
            PcpLists::None => false,
            PcpLists::Order0 => order == 0,
            PcpLists::HighOrder => order <= COSTLY_ORDER,
        }
    }
}

/// The lists and counters of one pcp, protected by its lock.
pub struct PcpState {
    lists: [PageList; NR_PCP_LISTS],
    /// Frames on all lists (blocks counted by their size).
    pub count: u32,
    pub high: u32,
    pub high_min: u32,
    pub high_max: u32,
    pub batch: u32,
    adaptive: bool,
    /// Consecutive frees without an allocation, in pages (6.7).
    free_count: u32,
    /// Refill batch scale (6.7).
    alloc_factor: u32,
}

impl PcpState {
    pub fn new(p: &PcpParams) -> Self {
        PcpState {
            lists: std::array::from_fn(|_| PageList::new()),
            count: 0,
            high: p.high_min,
            high_min: p.high_min,
            high_max: p.high_max,
            batch: p.batch,
            adaptive: p.adaptive,
            free_count: 0,
            alloc_factor: 0,
        }
    }

    pub fn list(&self, pindex: usize) -> &PageList {
        &self.lists[pindex]
    }

    /// `nr_pcp_alloc`: blocks to fetch on a refill of `order`.
    fn nr_pcp_alloc(&mut self, zone: &Zone, order: u32) -> u32 {
        let base = self.batch;
        if !self.adaptive {
            // Classic: one batch of pages, at least two blocks for high orders.
            return if order == 0 {
                base
            } else {
                (base >> order).max(2)
            };
        }
        let mut high = self.high.clamp(self.high_min, self.high_max);
        let batch = if order == 0 {
            base << self.alloc_factor
        } else {
            base
        };
        if self.high_min != self.high_max && !zone.test_flag(super::buddy::ZONE_BELOW_HIGH) {
            high = (high + batch).min(self.high_max);
        }
        self.high = high;
        if order != 0 {
            return (batch >> order).max(2);
        }
        // Double the refill each time refills follow each other without frees, within what
        // the list has room for.
        let room = i64::from(high) - i64::from(self.count) - i64::from(base);
        let max_nr_alloc = room.max(i64::from(base)) as u32;
        if batch <= max_nr_alloc && self.alloc_factor < PCP_BATCH_SCALE_MAX {
            self.alloc_factor += 1;
        }
        batch.min(max_nr_alloc).max(1)
    }

    /// `nr_pcp_high`: the mark at which a free drains. Adjusts `high` in adaptive mode.
    fn nr_pcp_high(&mut self, zone: &Zone) -> u32 {
        if !self.adaptive || self.high_min == self.high_max {
            return self.high;
        }
        if zone.test_flag(super::buddy::ZONE_BELOW_HIGH) {
            self.high = self.high.saturating_sub(self.free_count).max(self.high_min);
            return self.count.max(self.high_min);
        }
        if self.count >= self.high {
            let need = self.free_count + self.batch;
            if self.high < need {
                self.high = need.clamp(self.high_min, self.high_max);
            }
        }
        self.high
    }

    /// `nr_pcp_free`: pages to return to the zone when over `high`.
    fn nr_pcp_free(&self, high: u32) -> u32 {
        let batch = self.batch;
        if high < batch {
            return 1;
        }
        if !self.adaptive {
            return batch;
        }
        let min_nr = batch;
        let max_nr = (high - batch).max(min_nr);
        self.free_count.clamp(min_nr, max_nr)
    }

    /// Take a block of `order` from the hot end, refilling from the zone first if the list is
    /// empty (`__rmqueue_pcplist`). Returns `(pfn, refilled, fallback_used)`.
    pub fn rmqueue(
        &mut self,
        zone: &Zone,
        pages: &PageArray,
        order: u32,
        mt: MigrateType,
    ) -> Option<(Pfn, bool, bool)> {
        let pindex = order_to_pindex(mt, order);
        let mut refilled = false;
        let mut fallback = false;
        if self.lists[pindex].is_empty() {
            let blocks = self.nr_pcp_alloc(zone, order);
            let got = rmqueue_bulk(
                zone,
                pages,
                order,
                blocks,
                mt,
                &mut self.lists[pindex],
                &mut fallback,
            );
            self.count += got << order;
            refilled = true;
            if got == 0 {
                return None;
            }
        }
        let pfn = self.lists[pindex].pop_front(pages)?;
        pages[pfn].clear_nonatomic(pg::PCP);
        self.count -= 1 << order;
        self.free_count >>= 1;
        Some((pfn, refilled, fallback))
    }

    /// `free_unref_page_commit`: add a block at the hot end; drain a batch from the cold end if
    /// the list reached `high`. Returns whether a drain (one zone->lock hold) happened.
    pub fn free(
        &mut self,
        zone: &Zone,
        pages: &PageArray,
        pfn: Pfn,
        order: u32,
        mt: MigrateType,
    ) -> bool {
        let pindex = order_to_pindex(mt, order);
        let p = &pages[pfn];
        p.set_order(order);
        p.index.store(mt as u64, Relaxed);
        p.set_nonatomic(pg::PCP);
        self.lists[pindex].push_front(pages, pfn);
        self.count += 1 << order;
        if self.adaptive {
            self.alloc_factor >>= 1;
            if self.free_count < (self.batch << PCP_BATCH_SCALE_MAX) {
                self.free_count += 1 << order;
            }
        }
        let high = self.nr_pcp_high(zone);
        if self.count >= high {
            let n = self.nr_pcp_free(high);
            self.free_bulk(zone, pages, n, pindex);
            if zone.test_flag(super::buddy::ZONE_BELOW_HIGH)
                && zone.watermark_ok(0, super::buddy::Wmark::High)
            {
                zone.clear_flag(super::buddy::ZONE_BELOW_HIGH);
            }
            return true;
        }
        false
    }

    /// `free_pcppages_bulk`: return at least `count` pages to the zone from the cold ends of the
    /// lists, round-robin starting with `pindex`, under one zone->lock hold.
    pub fn free_bulk(&mut self, zone: &Zone, pages: &PageArray, count: u32, pindex: usize) {
        let mut count = count.min(self.count) as i64;
        if count <= 0 {
            return;
        }
        let mut fa = zone.lock_free_area();
        let mut idx = pindex;
        while count > 0 {
            let mut tries = 0;
            while self.lists[idx].is_empty() {
                idx = (idx + 1) % NR_PCP_LISTS;
                tries += 1;
                debug_assert!(
                    tries <= NR_PCP_LISTS,
                    "pcp count says pages but lists are empty"
                );
            }
            let order = pindex_to_order(idx);
            while count > 0 {
                let Some(pfn) = self.lists[idx].pop_back(pages) else {
                    break;
                };
                free_pcp_page_to_zone(zone, &mut fa, pages, pfn, order);
                count -= 1 << order;
                self.count -= 1 << order;
            }
            idx = (idx + 1) % NR_PCP_LISTS;
        }
    }

    /// Empty every list into the zone, `batch << 5` pages per zone->lock hold
    /// (`drain_pages_zone`).
    pub fn drain(&mut self, zone: &Zone, pages: &PageArray) {
        while self.count > 0 {
            let n = self.count.min(self.batch << PCP_BATCH_SCALE_MAX);
            self.free_bulk(zone, pages, n, 0);
        }
    }

    /// `decay_pcp_high`: shrink `high` by 1/8 towards `high_min` and drain down to it. Returns
    /// whether anything changed.
    pub fn decay(&mut self, zone: &Zone, pages: &PageArray) -> bool {
        let mut changed = false;
        if self.high > self.high_min {
            let by_count = self.count.saturating_sub(self.batch << PCP_BATCH_SCALE_MAX);
            self.high = by_count
                .max(self.high - (self.high >> 3))
                .max(self.high_min);
            changed = true;
        }
        if self.count > self.high {
            let n = self.count - self.high;
            self.free_bulk(zone, pages, n, 0);
            changed = true;
        }
        changed
    }

    /// Walk the lists (invariant checks): yields `(pfn, order)`.
    pub fn for_each_page(&self, pages: &PageArray, mut f: impl FnMut(Pfn, u32, usize)) {
        for (i, l) in self.lists.iter().enumerate() {
            for pfn in l.iter(pages) {
                f(pfn, pindex_to_order(i), i);
            }
        }
    }
}

fn free_pcp_page_to_zone(zone: &Zone, fa: &mut FreeArea, pages: &PageArray, pfn: Pfn, order: u32) {
    let p = &pages[pfn];
    p.clear_nonatomic(pg::PCP);
    let mt = MigrateType::from_u8(p.index.load(Relaxed) as u8);
    zone.free_one(fa, pages, pfn, order, mt);
}

/// `rmqueue_bulk`: move up to `count` blocks of `order` from the buddy lists to `list` under one
/// zone->lock hold, in ascending pfn order at the cold end. Returns the number of blocks.
pub fn rmqueue_bulk(
    zone: &Zone,
    pages: &PageArray,
    order: u32,
    count: u32,
    mt: MigrateType,
    list: &mut PageList,
    fallback_used: &mut bool,
) -> u32 {
    let mut fa = zone.lock_free_area();
    let mut got = 0;
    while got < count {
        let Some(pfn) = zone.rmqueue(&mut fa, pages, order, mt, fallback_used) else {
            break;
        };
        let p = &pages[pfn];
        p.set_order(order);
        p.index.store(mt as u64, Relaxed);
        p.set_nonatomic(pg::PCP);
        list.push_back(pages, pfn);
        got += 1;
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_batch_sizes() {
        // 1 GiB and more: 63 (the modern default); 512 MiB: 31.
        assert_eq!(zone_batchsize(1 << 18), 63);
        assert_eq!(zone_batchsize(6 << 20), 63);
        assert_eq!(zone_batchsize(1 << 17), 31);
        assert_eq!(zone_batchsize(1024), 1);
    }

    #[test]
    fn high_is_at_least_four_batches() {
        assert_eq!(zone_highsize(1 << 20, 100, 63, 2, 0), 252);
        assert_eq!(zone_highsize(1 << 20, 10_000, 63, 2, 0), 5000);
        assert_eq!(zone_highsize(1 << 20, 10_000, 63, 2, 8), (1 << 20) / 8 / 2);
    }

    #[test]
    fn resolve_fixed_and_adaptive() {
        let fixed = PcpPolicy {
            lists: PcpLists::Order0,
            batch: Count::Fixed(31),
            high: Count::Fixed(186),
            tune: PcpTune::Fixed,
        };
        let p = PcpParams::resolve(&fixed, 1 << 20, 5000, 4);
        assert_eq!((p.batch, p.high_min, p.high_max), (31, 186, 186));
        assert!(p.allowed(0) && !p.allowed(1));
        let auto = PcpPolicy::default();
        let p = PcpParams::resolve(&auto, 1 << 20, 5000, 4);
        assert_eq!(p.batch, 63);
        assert_eq!(p.high_min, 1250);
        assert_eq!(p.high_max, (1 << 20) / 8 / 4);
        assert!(p.allowed(3) && !p.allowed(4));
    }
}
