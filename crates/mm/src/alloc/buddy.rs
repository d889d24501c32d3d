//! The buddy allocator: zones, free areas, migratetypes and watermarks (mm/page_alloc.c).
//!
//! A zone owns a contiguous pfn range. Its free memory is kept as naturally aligned blocks of
//! 2^order frames on per-(order, migratetype) lists, the `free_area`. Allocation takes the
//! smallest block of the wanted migratetype that fits and splits it, returning the unused halves
//! to lower orders (`__rmqueue_smallest`, `expand`); when the wanted migratetype has nothing, a
//! block is borrowed from another one (`__rmqueue_fallback`), taking over its whole pageblock
//! when the block is large, which is how the kernel keeps unmovable allocations from salting
//! every pageblock. Freeing merges a block with its buddy as long as the buddy is free and of
//! the same order (`__free_one_page`).
//!
//! Locking: everything in [`FreeArea`] and the `PG_buddy` bit and order of free blocks are
//! protected by `zone->lock` (the `SpinLock<FreeArea>`). `nr_free` mirrors the free page count
//! for lockless watermark checks, as `NR_FREE_PAGES` does; it is written under the lock only.
//! A pageblock's migratetype is read without the lock on free (a racy read the kernel also
//! makes) and changed under it.
//!
//! Invariants (checked by `PageAllocator::check`): every free block is aligned to its order,
//! lies inside the zone, has `PG_buddy` and its order on its head frame and is on the list of the
//! migratetype stored in its `index`; `nr_free` equals the frames on the lists; no two free
//! buddies of the same order coexist (they would have merged).

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU32, Ordering::Relaxed};

use pagelab_sync::SpinLock;
use pagelab_sync::trace::{self, Sym};

use crate::list::PageList;
use crate::page::{PageArray, Pfn, pg};

/// `zone->lock`: one per zone, and a zone belongs to one node (a task allocates from its own).
pub static ZONE_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("zone->lock", pagelab_sync::Scope::Node);

/// The lines of a zone's free lists (`zone->free_area[order].free_list[mt]` heads, the
/// per-order `nr_free`, and symbolically the blocks on them), written under `zone->lock`.
pub static FREE_AREA: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("free_area", pagelab_sync::Scope::Node);

/// `NR_FREE_PAGES`: the zone's free page count, updated atomically under `zone->lock` and read
/// locklessly by watermark checks.
pub static NR_FREE_PAGES: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("NR_FREE_PAGES", pagelab_sync::Scope::Node);

/// The kernel's update of `NR_FREE_PAGES` under `zone->lock` (`__mod_zone_page_state`,
/// `__mod_zone_freepage_state`) adds to a per-CPU delta, with no locked instruction; the zone's
/// line is written (by a locked add) only when the delta passes the zone's `stat_threshold`,
/// every few holds at page_fault1's rates. The trace keeps one write of the zone's line per
/// hold for it, as a store the CPU does not wait for (until 2026-11-28 an atomic, which made the
/// replay drain the store buffer in the middle of every hold).
#[inline]
fn trace_nr_free_pages(nr_free: &AtomicI64) {
    trace::line_store(
        &NR_FREE_PAGES,
        nr_free as *const AtomicI64 as usize,
        Sym::Here,
    );
}

/// Largest block order (`MAX_PAGE_ORDER`): 4 MiB blocks.
pub const MAX_ORDER: u32 = 10;
/// Orders above this are "costly" (`PAGE_ALLOC_COSTLY_ORDER`); pcp lists stop here.
pub const COSTLY_ORDER: u32 = 3;
/// `pageblock_order`: 2 MiB pageblocks, the unit migratetypes are tracked in.
pub const PAGEBLOCK_ORDER: u32 = 9;

/// Mobility class of an allocation (`enum migratetype`, the pcp types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MigrateType {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
}

/// `MIGRATE_PCPTYPES`.
pub const MIGRATE_TYPES: usize = 3;

impl MigrateType {
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
    ];

    #[inline]
    pub fn from_u8(v: u8) -> MigrateType {
        match v {
            0 => MigrateType::Unmovable,
            1 => MigrateType::Movable,
            _ => MigrateType::Reclaimable,
        }
    }

    /// The kernel's `fallbacks[]` table: where to borrow from, in order.
    fn fallbacks(self) -> [MigrateType; 2] {
        match self {
            MigrateType::Unmovable => [MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => [MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => [MigrateType::Unmovable, MigrateType::Movable],
        }
    }
}

/// Which watermark an allocation must stay above (`ALLOC_WMARK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wmark {
    Min = 0,
    Low = 1,
    High = 2,
}

/// The free lists of a zone, protected by `zone->lock`.
pub struct FreeArea {
    lists: [[PageList; MIGRATE_TYPES]; MAX_ORDER as usize + 1],
    nr_free: [u64; MAX_ORDER as usize + 1],
}

impl FreeArea {
    fn new() -> Self {
        FreeArea {
            lists: std::array::from_fn(|_| std::array::from_fn(|_| PageList::new())),
            nr_free: [0; MAX_ORDER as usize + 1],
        }
    }

    /// Free blocks of `order` (all migratetypes).
    pub fn nr_free(&self, order: u32) -> u64 {
        self.nr_free[order as usize]
    }

    pub fn list(&self, order: u32, mt: MigrateType) -> &PageList {
        &self.lists[order as usize][mt as usize]
    }
}

/// Which blocks the recording task pushed on a free list in its current `zone->lock` hold
/// (kept only while a trace records, on the recording thread): such a block's `struct page` is
/// the task's own line when it is unlinked again in the same hold, whereas any other block on
/// a shared free list was pushed by whichever CPU freed it.
mod free_runs {
    use std::cell::RefCell;

    use pagelab_sync::trace;

    use crate::hold_stamps::HoldStamps;
    use crate::page::Pfn;

    thread_local! {
        static RUNS: RefCell<HoldStamps> = RefCell::new(HoldStamps::default());
    }

    /// A new `zone->lock` hold by this thread.
    #[inline]
    pub(super) fn hold() {
        if trace::active() {
            RUNS.with_borrow_mut(HoldStamps::new_hold);
        }
    }

    #[inline]
    pub(super) fn pushed(pfn: Pfn) {
        RUNS.with_borrow_mut(|r| r.stamp(pfn.0));
    }

    #[inline]
    pub(super) fn popped(pfn: Pfn) {
        RUNS.with_borrow_mut(|r| r.clear(pfn.0));
    }

    /// Whether this thread pushed `pfn` in its current hold.
    #[inline]
    pub(super) fn this_hold(pfn: Pfn) -> bool {
        RUNS.with_borrow(|r| r.in_this_hold(pfn.0))
    }
}

/// A zone (`struct zone`): one per node in the engine (`ZONE_NORMAL`).
pub struct Zone {
    pub id: usize,
    pub node: usize,
    pub start_pfn: Pfn,
    pub end_pfn: Pfn,
    /// Frames the buddy allocator manages (`managed_pages`).
    pub managed: u64,
    /// min, low and high watermarks in pages.
    pub wmark: [u64; 3],
    /// `zone->lock` and what it protects.
    pub lock: SpinLock<FreeArea>,
    /// `NR_FREE_PAGES`: frames on the buddy lists.
    nr_free: AtomicI64,
    /// One migratetype per pageblock.
    pageblock_mt: Box<[AtomicU8]>,
    /// `ZONE_BELOW_HIGH` and friends.
    flags: AtomicU32,
}

/// Zone flag: free pages fell below the high watermark (6.7+ pcp tuning reads it).
pub const ZONE_BELOW_HIGH: u32 = 1;

/// `min_free_kbytes` for a machine of `total_pages`: sqrt(16 x KiB), between 128 KiB and 256 MiB.
pub fn min_free_pages(total_pages: u64) -> u64 {
    let kbytes = total_pages * 4;
    let min_kb = ((kbytes * 16) as f64).sqrt() as u64;
    min_kb.clamp(128, 262_144) / 4
}

/// `__setup_per_zone_wmarks`: min, low and high of a zone of `managed` pages whose share of
/// `min_free_kbytes` is `min_pages`; low and high add max(min/4, 0.1% of the zone) each
/// (`watermark_scale_factor` = 10).
pub fn zone_wmarks(managed: u64, min_pages: u64) -> [u64; 3] {
    let step = (min_pages / 4).max(managed * 10 / 10_000);
    [min_pages, min_pages + step, min_pages + 2 * step]
}

impl Zone {
    /// A zone over `[start, end)`, its frames not yet freed into it. `min_pages` is this zone's
    /// share of `min_free_kbytes`.
    pub fn new(
        id: usize,
        node: usize,
        start: Pfn,
        end: Pfn,
        min_pages: u64,
        spinlock: pagelab_sync::LockKind,
    ) -> Zone {
        let managed = u64::from(end.0 - start.0);
        let nr_blocks = (managed as usize).div_ceil(1 << PAGEBLOCK_ORDER);
        Zone {
            id,
            node,
            start_pfn: start,
            end_pfn: end,
            managed,
            wmark: zone_wmarks(managed, min_pages),
            lock: SpinLock::new(spinlock, FreeArea::new()).with_class(&ZONE_LOCK),
            nr_free: AtomicI64::new(0),
            pageblock_mt: (0..nr_blocks)
                .map(|_| AtomicU8::new(MigrateType::Movable as u8))
                .collect(),
            flags: AtomicU32::new(0),
        }
    }

    /// Take `zone->lock` (what every path that touches the free lists calls, so that a
    /// recording can tell the blocks pushed in this hold from the others).
    #[inline]
    pub fn lock_free_area(&self) -> pagelab_sync::SpinGuard<'_, FreeArea> {
        free_runs::hold();
        self.lock.lock()
    }

    #[inline]
    pub fn contains(&self, pfn: Pfn) -> bool {
        pfn >= self.start_pfn && pfn < self.end_pfn
    }

    /// `NR_FREE_PAGES`, read without the lock.
    #[inline]
    pub fn free_pages(&self) -> i64 {
        self.nr_free.load(Relaxed)
    }

    /// Add `delta` to `NR_FREE_PAGES` for an allocator that keeps no free lists here (the
    /// LLFree policy folds its per-CPU deltas into it, as `__mod_zone_page_state` does).
    #[inline]
    pub fn mod_free_pages(&self, delta: i64) {
        self.nr_free.fetch_add(delta, Relaxed);
    }

    /// Add `delta` to `NR_FREE_PAGES` while holding `zone->lock` (`fa` is what the lock
    /// guards: holding it proves the lock is held). A load and a store, no locked
    /// instruction: with the buddy allocator every writer of the count holds the lock (only
    /// LLFree's [`Zone::mod_free_pages`] does not, and a zone uses one allocator or the
    /// other), and lockless readers (watermark checks) read it with a plain load, as they do
    /// in the kernel. The kernel's own update under the lock (`__mod_zone_freepage_state`)
    /// adds to a per-CPU delta and writes the zone's count, with a locked add, only every
    /// `stat_threshold` pages; a locked add per page was a cost the engine had inside every
    /// `zone->lock` hold and the kernel did not (docs/model.md, section 1). The trace records
    /// the zone's line once per hold ([`trace_nr_free_pages`]).
    #[inline]
    fn mod_free_pages_locked(&self, _fa: &mut FreeArea, delta: i64) {
        trace_nr_free_pages(&self.nr_free);
        self.nr_free
            .store(self.nr_free.load(Relaxed) + delta, Relaxed);
    }

    #[inline]
    pub fn test_flag(&self, f: u32) -> bool {
        self.flags.load(Relaxed) & f != 0
    }

    #[inline]
    pub fn set_flag(&self, f: u32) {
        if !self.test_flag(f) {
            self.flags.fetch_or(f, Relaxed);
        }
    }

    #[inline]
    pub fn clear_flag(&self, f: u32) {
        if self.test_flag(f) {
            self.flags.fetch_and(!f, Relaxed);
        }
    }

    /// `zone_watermark_ok`: would taking 2^order pages keep the zone above `mark`?
    #[inline]
    pub fn watermark_ok(&self, order: u32, mark: Wmark) -> bool {
        self.free_pages() - (1i64 << order) + 1 > self.wmark[mark as usize] as i64
    }

    /// `get_pfnblock_migratetype`.
    #[inline]
    pub fn pageblock_migratetype(&self, pfn: Pfn) -> MigrateType {
        let i = ((pfn.0 - self.start_pfn.0) >> PAGEBLOCK_ORDER) as usize;
        MigrateType::from_u8(self.pageblock_mt[i].load(Relaxed))
    }

    fn set_pageblock_migratetype(&self, pfn: Pfn, mt: MigrateType) {
        let i = ((pfn.0 - self.start_pfn.0) >> PAGEBLOCK_ORDER) as usize;
        self.pageblock_mt[i].store(mt as u8, Relaxed);
    }

    fn add_to_free_list(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        pfn: Pfn,
        order: u32,
        mt: MigrateType,
    ) {
        let p = &pages[pfn];
        p.set_order(order);
        p.index.store(mt as u64, Relaxed);
        p.set_nonatomic(pg::BUDDY);
        if trace::active() {
            free_runs::pushed(pfn);
            // `list_add` reads the head for its first block, then rewrites that block's link
            // (freed by whoever freed it) and the head; `nr_free` is next to it. The link and
            // the counter are stores the CPU does not wait for (`Kind::Store`); the head's
            // load it does.
            let list = &fa.lists[order as usize][mt as usize];
            let head = list as *const PageList as usize;
            trace::line_write(&FREE_AREA, head);
            if !list.is_empty() {
                trace::line_store(&FREE_AREA, head, Sym::First);
            }
            trace::line_store(
                &FREE_AREA,
                &fa.nr_free[order as usize] as *const u64 as usize,
                Sym::Here,
            );
        }
        fa.lists[order as usize][mt as usize].push_front(pages, pfn);
        fa.nr_free[order as usize] += 1;
    }

    /// Take the free block `pfn` of `order` off its list: `pop` when it is taken as the list's
    /// first block (`__rmqueue_smallest`, `__rmqueue_fallback`: the head is read to find it),
    /// not when a merge or a move reaches it through its own page (`page_is_buddy`).
    fn del_from_free_list(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        pfn: Pfn,
        order: u32,
        pop: bool,
    ) {
        let p = &pages[pfn];
        let mt = p.index.load(Relaxed) as usize;
        if trace::active() {
            // The block's own `struct page` was last written by whoever freed it: the first
            // block when allocating (`__rmqueue_smallest`), another one when a free merges
            // with its buddy. `list_del` of the first block also rewrites the next block's
            // link, a `struct page` its freer wrote: each pop of a refill writes one such line
            // (the "cache misses on struct page" under zone->lock that Aaron Lu measured in
            // 4.15's page_fault1), not only the first pop of a hold. A block the recording
            // task pushed in this same hold (an `expand` half, a buddy it just freed) is its
            // own line and is not recorded.
            //
            // The CPU waits for the loads: the head of a pop (read for its first block), the
            // block itself (read for its links; a buddy, read by `page_is_buddy`). The next
            // block's link, the head's link when a merge unlinks the first block, and `nr_free`
            // are stores it does not wait for (`Kind::Store`: the counter's load only feeds its
            // store, which the out-of-order core overlaps).
            let list = &fa.lists[order as usize][mt];
            let head = list as *const PageList as usize;
            let first = list.first() == Some(pfn);
            if first {
                // A pop reads the head first; a merge reaches the block through its own page
                // and then only stores the head's link.
                if pop {
                    trace::line_write(&FREE_AREA, head);
                }
                trace::line_sym_write(&FREE_AREA, head, Sym::First);
                if !pop {
                    trace::line_store(&FREE_AREA, head, Sym::Here);
                }
                let next = pages[pfn].next.load(Relaxed);
                if next != Pfn::NIL && !free_runs::this_hold(Pfn(next)) {
                    trace::line_store(&FREE_AREA, head, Sym::Entry);
                }
            } else if !free_runs::this_hold(pfn) {
                trace::line_sym_write(&FREE_AREA, head, Sym::Entry);
            }
            trace::line_store(
                &FREE_AREA,
                &fa.nr_free[order as usize] as *const u64 as usize,
                Sym::Here,
            );
            free_runs::popped(pfn);
        }
        fa.lists[order as usize][mt].remove(pages, pfn);
        p.clear_nonatomic(pg::BUDDY);
        fa.nr_free[order as usize] -= 1;
    }

    /// Is `pfn` the head of a free block of exactly `order` (`page_is_buddy`)?
    #[inline]
    fn is_buddy(&self, pages: &PageArray, pfn: Pfn, order: u32) -> bool {
        self.contains(pfn) && pages[pfn].test(pg::BUDDY) && pages[pfn].order() == order
    }

    /// `__free_one_page`: return a block, merging it with free buddies. Caller holds the lock.
    pub fn free_one(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        mut pfn: Pfn,
        mut order: u32,
        mt: MigrateType,
    ) {
        let nr = 1i64 << order;
        while order < MAX_ORDER {
            let buddy = pfn.buddy(order);
            if !self.is_buddy(pages, buddy, order) {
                break;
            }
            self.del_from_free_list(fa, pages, buddy, order, false);
            pfn = Pfn(pfn.0 & buddy.0);
            order += 1;
        }
        let mt = if order >= PAGEBLOCK_ORDER {
            // A merged block spanning whole pageblocks takes the freed page's type.
            for b in 0..(1u32 << (order - PAGEBLOCK_ORDER)) {
                self.set_pageblock_migratetype(pfn.offset(b << PAGEBLOCK_ORDER), mt);
            }
            mt
        } else {
            self.pageblock_migratetype(pfn)
        };
        self.add_to_free_list(fa, pages, pfn, order, mt);
        self.mod_free_pages_locked(fa, nr);
    }

    /// `expand`: split a block of `high` down to `low`, freeing the upper halves.
    fn expand(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        pfn: Pfn,
        low: u32,
        mut high: u32,
        mt: MigrateType,
    ) {
        while high > low {
            high -= 1;
            self.add_to_free_list(fa, pages, pfn.offset(1 << high), high, mt);
        }
    }

    /// `__rmqueue_smallest`.
    fn rmqueue_smallest(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        order: u32,
        mt: MigrateType,
    ) -> Option<Pfn> {
        for o in order..=MAX_ORDER {
            if let Some(pfn) = fa.lists[o as usize][mt as usize].first() {
                self.del_from_free_list(fa, pages, pfn, o, true);
                self.expand(fa, pages, pfn, order, o, mt);
                return Some(pfn);
            }
        }
        None
    }

    /// `__rmqueue_fallback`: borrow the largest block of another migratetype. A block of half a
    /// pageblock or more takes its pageblock over, moving the pageblock's other free blocks to
    /// the new type (`steal_suitable_fallback`, `move_freepages_block`).
    fn rmqueue_fallback(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        order: u32,
        mt: MigrateType,
    ) -> Option<Pfn> {
        for o in (order..=MAX_ORDER).rev() {
            for from in mt.fallbacks() {
                let Some(pfn) = fa.lists[o as usize][from as usize].first() else {
                    continue;
                };
                if o >= PAGEBLOCK_ORDER {
                    // Whole pageblocks: retype them all, then serve from the new type.
                    self.del_from_free_list(fa, pages, pfn, o, true);
                    for b in 0..(1u32 << (o - PAGEBLOCK_ORDER)) {
                        self.set_pageblock_migratetype(pfn.offset(b << PAGEBLOCK_ORDER), mt);
                    }
                    self.add_to_free_list(fa, pages, pfn, o, mt);
                } else if o >= PAGEBLOCK_ORDER / 2 {
                    self.claim_pageblock(fa, pages, pfn, mt);
                }
                // Serve from the (possibly retyped) block at `pfn`.
                let cur_mt = MigrateType::from_u8(pages[pfn].index.load(Relaxed) as u8);
                self.del_from_free_list(fa, pages, pfn, o, true);
                self.expand(fa, pages, pfn, order, o, cur_mt);
                return Some(pfn);
            }
        }
        None
    }

    /// Retype the pageblock holding `pfn` and move its free blocks to the new type's lists.
    fn claim_pageblock(&self, fa: &mut FreeArea, pages: &PageArray, pfn: Pfn, mt: MigrateType) {
        let start = Pfn(pfn.0 & !((1 << PAGEBLOCK_ORDER) - 1)).max(self.start_pfn);
        let end = Pfn((start.0 + (1 << PAGEBLOCK_ORDER)).min(self.end_pfn.0));
        self.set_pageblock_migratetype(start, mt);
        let mut p = start;
        while p < end {
            let page = &pages[p];
            if page.test(pg::BUDDY) {
                let o = page.order();
                if page.index.load(Relaxed) != mt as u64 {
                    self.del_from_free_list(fa, pages, p, o, false);
                    self.add_to_free_list(fa, pages, p, o, mt);
                }
                p = p.offset(1 << o);
            } else {
                p = p.offset(1);
            }
        }
    }

    /// `__rmqueue`: one block of `order`, falling back to other migratetypes. Caller holds
    /// the lock.
    pub fn rmqueue(
        &self,
        fa: &mut FreeArea,
        pages: &PageArray,
        order: u32,
        mt: MigrateType,
        fallback_used: &mut bool,
    ) -> Option<Pfn> {
        let pfn = self.rmqueue_smallest(fa, pages, order, mt).or_else(|| {
            *fallback_used = true;
            self.rmqueue_fallback(fa, pages, order, mt)
        })?;
        self.mod_free_pages_locked(fa, -(1 << order));
        Some(pfn)
    }

    /// Free every frame of the zone into the buddy lists (`memblock_free_all` at boot).
    pub fn free_all_bootmem(&self, pages: &PageArray) {
        let mut fa = self.lock_free_area();
        let mut pfn = self.start_pfn;
        while pfn < self.end_pfn {
            // The largest naturally aligned block that starts here and fits.
            let mut order = MAX_ORDER;
            while order > 0
                && (pfn.0 & ((1 << order) - 1) != 0 || pfn.0 + (1 << order) > self.end_pfn.0)
            {
                order -= 1;
            }
            self.free_one(&mut fa, pages, pfn, order, MigrateType::Movable);
            pfn = pfn.offset(1 << order);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_writes(ev: &[trace::Event]) -> usize {
        crate::test_trace::entry_writes(ev, "free_area")
    }

    /// `list_del` of a free list's first block rewrites the next block's link: every pop of a
    /// refill writes a `struct page` that its freer wrote, unless the popper pushed it itself
    /// in the same hold.
    #[test]
    fn each_pop_records_the_next_block_unless_pushed_in_the_same_hold() {
        let pages = PageArray::new(64);
        let zone = Zone::new(0, 0, Pfn(0), Pfn(64), 0, pagelab_sync::LockKind::Queued);
        let mv = MigrateType::Movable;
        {
            // Four order-0 blocks whose buddies are not free: no merging.
            let mut fa = zone.lock_free_area();
            for p in [0, 2, 4, 6] {
                zone.free_one(&mut fa, &pages, Pfn(p), 0, mv);
            }
        }
        let mut fb = false;
        trace::start(1024);
        {
            let mut fa = zone.lock_free_area();
            for want in [6, 4, 2] {
                assert_eq!(
                    zone.rmqueue(&mut fa, &pages, 0, mv, &mut fb),
                    Some(Pfn(want))
                );
            }
        }
        let ev = trace::stop();
        assert_eq!(entry_writes(&ev), 3, "one next block per pop: 4, 2, 0");
        trace::start(1024);
        {
            let mut fa = zone.lock_free_area();
            zone.free_one(&mut fa, &pages, Pfn(10), 0, mv);
            zone.free_one(&mut fa, &pages, Pfn(12), 0, mv);
            assert_eq!(zone.rmqueue(&mut fa, &pages, 0, mv, &mut fb), Some(Pfn(12)));
        }
        let ev = trace::stop();
        assert_eq!(entry_writes(&ev), 0, "10 was pushed in this hold");
    }
}
