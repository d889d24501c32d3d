//! Dropping references to LRU pages: mm/swap.c `release_pages`/`folios_put_refs`, `put_page`
//! (`__folio_put` → `__page_cache_release`), and the 2018 RFC's concurrent removal ("mm: enable
//! concurrent LRU removals", `smp_list_del`).
//!
//! # What it models
//!
//! For each page: drop one reference (`folio_put_testzero`); a page whose count reached zero
//! leaves its LRU list if it has `PG_lru`, and is freed with
//! [`Mem::free_frozen_pages`](crate::Mem::free_frozen_pages) once the lock is dropped
//! (`free_unref_folios` after the loop). The lock is held across consecutive pages under the
//! same lock, relocked when the lock changes, and dropped at least every `SWAP_CLUSTER_MAX`
//! (32) freed pages, when the collected pages are freed (the kernel's `lock_batch` and
//! `folio_batch` of pages to free).
//!
//! * `release = "locked"`: the hold is exclusive (the spinlock) and the unlink is `list_del`.
//! * `release = "concurrent"`: the lock is the lruvec rwsem and the hold is *shared*: any
//!   number of CPUs unlink freed pages from the same lists at once with
//!   [`List::smp_del`](super::smp_list::List::smp_del), each locking only the page's and its
//!   predecessor's link words, waiting only when an adjacent page is being removed at the same
//!   moment. Adds, splices, isolation, putback and reclaim walks take the rwsem exclusively,
//!   so no removal ever overlaps a structural change other than another removal. The lists'
//!   page counts are then updated atomically. This is the RFC's design (rwlock_t lru_lock,
//!   `smp_list_del` in `release_pages`) in full: two removers of the same page cannot exist,
//!   because each removes a page whose last reference it dropped.
//!
//! Note that the shared hold is still an atomic read-modify-write on one count word per lock
//! (the rwsem is built that way on purpose, as is the kernel's qrwlock), so releasing CPUs do
//! not serialise on the lock but still share its cache line; the RFC measured the same.
//!
//! # Invariants
//!
//! A page whose count reaches zero is either `PG_lru` and on exactly its list, or on no list:
//! everyone who takes a page off a list without freeing it (isolation, a batch) holds a
//! reference. `PG_lru` is cleared (non-atomically, as `__folio_clear_lru`: nobody else may
//! touch a page without a reference) before the page is freed, so the allocator never sees
//! it; a release that drops a count below zero panics, as `Mem::free_pages` does.

use std::sync::atomic::Ordering::AcqRel;

use pagelab_sync::RwSemReadGuard;

use super::LruList;
use super::lruvec::{LruGuard, Lruvec};
use super::stats::LruEvent;
use super::{Loc, Lru};
use crate::cpu::CpuId;
use crate::page::{Pfn, pg};
use crate::policy::LruRelease;

/// Pages freed per lock hold at most, and per call to the allocator (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: usize = 32;

/// A release's hold of one lru_lock.
enum Hold<'a> {
    Exclusive(LruGuard<'a>),
    Shared(RwSemReadGuard<'a, Box<[Lruvec]>>),
}

impl Lru {
    /// `put_page`: drop one reference; the last one takes the page off its list and frees it.
    pub fn put_page(&self, cpu: CpuId, pfn: Pfn) {
        self.release_pages(cpu, std::slice::from_ref(&pfn));
    }

    /// `release_pages`/`folios_put`: drop one reference on each page; see the module
    /// documentation. A page may appear several times (one reference each).
    pub fn release_pages(&self, cpu: CpuId, pfns: &[Pfn]) {
        if pfns.is_empty() {
            return;
        }
        let pages = self.mem.pages();
        let mut to_free = [Pfn(0); SWAP_CLUSTER_MAX];
        let mut nr_free = 0;
        let mut held: Option<(usize, Hold<'_>)> = None;
        let (mut holds, mut waits, mut freed) = (0u64, 0u64, 0u64);
        for &pfn in pfns {
            if !self.put_testzero(pfn) {
                continue;
            }
            let page = &pages[pfn];
            if page.test(pg::LRU) {
                let Loc { lock, slot } = self.locate(pfn);
                if held.as_ref().is_none_or(|(l, _)| *l != lock) {
                    drop(held.take());
                    held = Some((lock, self.hold_for_release(lock)));
                    holds += 1;
                }
                let lru = LruList::of(page.flags());
                match held.as_mut() {
                    Some((_, Hold::Exclusive(g))) => g[slot].del(pages, lru, pfn),
                    Some((_, Hold::Shared(g))) => {
                        waits += u64::from(g[slot].smp_del(pages, lru, pfn));
                    }
                    None => unreachable!("locked above"),
                }
                // `__folio_clear_lru`: the count is zero, nobody else touches the page.
                page.clear_nonatomic(pg::LRU);
            }
            to_free[nr_free] = pfn;
            nr_free += 1;
            if nr_free == SWAP_CLUSTER_MAX {
                drop(held.take());
                self.free_batch(cpu, &to_free[..nr_free]);
                freed += nr_free as u64;
                nr_free = 0;
            }
        }
        drop(held);
        self.free_batch(cpu, &to_free[..nr_free]);
        freed += nr_free as u64;
        self.events.count(cpu, LruEvent::Release, pfns.len() as u64);
        if freed > 0 {
            self.events.count(cpu, LruEvent::ReleaseFree, freed);
        }
        if holds > 0 {
            self.events.count(cpu, LruEvent::ReleaseLockHold, holds);
        }
        if waits > 0 {
            self.events.count(cpu, LruEvent::SmpDelWait, waits);
        }
    }

    #[inline]
    fn hold_for_release(&self, lock: usize) -> Hold<'_> {
        match self.release_mode {
            LruRelease::Locked => Hold::Exclusive(self.locks[lock].lock()),
            LruRelease::Concurrent => Hold::Shared(
                self.locks[lock]
                    .lock_shared()
                    .expect("concurrent release builds rwsem lru_locks"),
            ),
        }
    }

    /// `folio_put_testzero`: drop a reference; whether it was the last.
    #[inline]
    pub(super) fn put_testzero(&self, pfn: Pfn) -> bool {
        self.sched_point();
        let prev = self.mem.pages()[pfn].refcount.fetch_sub(1, AcqRel);
        assert!(
            prev >= 1,
            "bad page state: {pfn:?} released with refcount {prev}"
        );
        prev == 1
    }

    fn free_batch(&self, cpu: CpuId, pfns: &[Pfn]) {
        self.mem.free_frozen_batch(cpu, pfns);
    }
}
