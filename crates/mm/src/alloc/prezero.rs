//! Prezeroing (Christoph Lameter, "prezeroing V2", 2005).
//!
//! A background thread (the patches' `kscrubd`) takes free pages from the zones, zeroes them
//! while the CPUs would otherwise idle, and parks them in a pool; a zero-filled order-0
//! allocation (an anonymous fault) takes a page from the pool and skips `clear_page`. Whether
//! that wins depends on whether zeroing is the bottleneck and whether an idle CPU exists, which
//! is exactly what the engine lets one measure.
//!
//! Locking: the pool has its own spinlock; allocations only *try* it, so a busy pool costs a
//! fault no more than inline zeroing would. Pool pages are outside the buddy lists and the pcps
//! and carry `PG_zeroed`; the slow allocation path gives them back (`drain`) before failing.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use pagelab_sync::{LockKind, SpinLock};

use crate::alloc::buddy::{MigrateType, Zone};
use crate::alloc::pcp::rmqueue_bulk;
use crate::arena::Arena;
use crate::list::PageList;
use crate::page::{PageArray, Pfn, pg};

/// Pages the zeroer takes from a zone per zone->lock hold.
const FILL_BATCH: u32 = 32;

/// The pool of zeroed pages.
pub struct PrezeroPool {
    list: SpinLock<PageList>,
    len: AtomicUsize,
    target: usize,
    /// Held by the zeroer across a fill: the batch it is zeroing is on no list (like pages
    /// between `rmqueue_bulk` and the pcp list in the kernel), so an invariant check must not
    /// run in the middle of it. Only the zeroer and `quiesce` take it; the fault path never does.
    filling: std::sync::Mutex<()>,
}

impl PrezeroPool {
    pub fn new(kind: LockKind, target: usize) -> Self {
        PrezeroPool {
            list: SpinLock::new(kind, PageList::new()),
            len: AtomicUsize::new(0),
            target,
            filling: std::sync::Mutex::new(()),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take one zeroed page, or `None` if the pool is empty or busy.
    #[inline]
    pub fn take(&self, pages: &PageArray) -> Option<Pfn> {
        if self.is_empty() {
            return None;
        }
        let mut l = self.list.try_lock()?;
        let pfn = l.pop_front(pages)?;
        self.len.store(l.len(), Relaxed);
        drop(l);
        pages[pfn].clear_nonatomic(pg::ZEROED);
        Some(pfn)
    }

    /// The zeroer's body: fill the pool up to its target from `zones`. Returns pages zeroed.
    pub fn fill(&self, zones: &[Zone], pages: &PageArray, arena: &Arena) -> u64 {
        let _filling = self.quiesce();
        let mut zeroed = 0;
        'zones: for zone in zones {
            while self.len() < self.target {
                // Leave the zone its high watermark: the pool must not cause reclaim.
                if !zone.watermark_ok(5, super::buddy::Wmark::High) {
                    continue 'zones;
                }
                let mut batch = PageList::new();
                let mut fb = false;
                let want = FILL_BATCH.min((self.target - self.len()) as u32);
                let got = rmqueue_bulk(
                    zone,
                    pages,
                    0,
                    want,
                    MigrateType::Movable,
                    &mut batch,
                    &mut fb,
                );
                if got == 0 {
                    continue 'zones;
                }
                for pfn in batch.iter(pages) {
                    arena.zero_page(pfn);
                    let p = &pages[pfn];
                    p.clear_nonatomic(pg::PCP);
                    p.set_nonatomic(pg::ZEROED);
                }
                zeroed += u64::from(got);
                let mut l = self.list.lock();
                l.splice_back(pages, &mut batch);
                self.len.store(l.len(), Relaxed);
            }
        }
        zeroed
    }

    /// Wait for a fill in progress and keep the zeroer out until the guard drops, so that every
    /// page it took is back on a list (invariant checks).
    pub fn quiesce(&self) -> std::sync::MutexGuard<'_, ()> {
        // A zeroer that panicked mid-fill leaves pages on no list; the check reports them.
        self.filling.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Return every pooled page to its zone.
    pub fn drain(&self, zone_of: impl Fn(Pfn) -> usize, zones: &[Zone], pages: &PageArray) {
        let mut taken = {
            let mut l = self.list.lock();
            self.len.store(0, Relaxed);
            std::mem::take(&mut *l)
        };
        while let Some(pfn) = taken.pop_front(pages) {
            pages[pfn].clear_nonatomic(pg::ZEROED);
            let zone = &zones[zone_of(pfn)];
            let mt = zone.pageblock_migratetype(pfn);
            let mut fa = zone.lock_free_area();
            zone.free_one(&mut fa, pages, pfn, 0, mt);
        }
    }

    /// Walk the pool (invariant checks).
    pub fn for_each_page(&self, pages: &PageArray, mut f: impl FnMut(Pfn)) -> usize {
        let l = self.list.lock();
        for pfn in l.iter(pages) {
            f(pfn);
        }
        l.len()
    }
}
