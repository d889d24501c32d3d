//! Dropping references to LRU pages: mm/swap.c `release_pages`/`folios_put_refs`, `put_page`
//! (`__folio_put` → `__page_cache_release`), and the 2018 RFC's concurrent removal ("mm: enable
//! concurrent LRU removals", `smp_list_del`).
//!
//! # What it models
//!
//! For each page: drop one reference (`folio_put_testzero`); a page whose count reached zero
//! leaves its LRU list if it has `PG_lru`, and is freed with
//! [`Mem::free_frozen_pages`](crate::Mem::free_frozen_pages) once the lock is dropped. The
//! lock is held across consecutive pages under the same lock and relocked when the lock
//! changes. When the freed pages go to the allocator, and so how long a hold lasts, is the
//! era's (`lru.release_free`, [`ReleaseFree`]):
//!
//! * `"batch"` (2.6's pagevec, and `folios_put_refs` from 6.9): every `lru.batch` freed pages
//!   (the `folio_batch` the caller fills: 15 from 99fbb6bfc16f, 31 from 9cecde80aae0, both
//!   6.9; a pagevec of 16 in 2.6.13) the lock is dropped and the batch freed, in release order.
//! * `"batch-list"` (99fbb6bfc16f to 7c33b8c4229a, the 6.9 merge window): the same holds, but
//!   each batch's pages are freed from a list, last first.
//! * `"list"` (3.3 to 6.8): the freed pages are gathered on a list (`list_add`, so the list
//!   runs backwards) and freed after the loop (`free_unref_page_list`); the lock is dropped
//!   every `SWAP_CLUSTER_MAX` pages looked at (`lock_batch`), except by the RFC v1's batch-lock
//!   release, which removed that. The order matters beyond the lock: the allocator's per-CPU
//!   lists, and the buddy merges when they drain, see the pages in the order they are freed.
//!
//! * `release = "locked"`: the hold is exclusive (the spinlock) and the unlink is `list_del`.
//! * `release = "batch-locks"` (the lru_lock RFC v1, Jan 2018, patches 10-12; see
//!   [`super::batch_lock`]): two passes over at most [`LRU_BITMAP_SIZE`] pages, the freed
//!   non-sentinel pages under their batch lock alone, then the sentinels under batch lock and
//!   lru_lock, a held lock kept across consecutive pages that need it. The RFC kept 4.15's
//!   list: under `"list"` the sentinels, gathered last, are freed first.
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

use pagelab_sync::{RwSemReadGuard, SpinGuard};

use super::LruList;
use super::batch_lock::{BatchedLruLock, PageTags};
use super::lruvec::{LruGuard, Lruvec};
use super::size_stats::StatCpu;
use super::stats::LruEvent;
use super::{Loc, Lru};
use crate::cpu::CpuId;
use crate::page::{Pfn, pg};
use crate::policy::{LruRelease, ReleaseFree};

/// `SWAP_CLUSTER_MAX`: the pages a `"list"` release looks at per lock hold (`lock_batch`), and
/// the size of the small gathering array a call of that many pages or fewer uses.
pub const SWAP_CLUSTER_MAX: usize = 32;

/// Pages per pass of the batch-lock release (`LRU_BITMAP_SIZE`, RFC v1 patch 12).
pub const LRU_BITMAP_SIZE: usize = 512;

/// Pages a `"list"` release gathers at most before freeing them: the callers' batches are no
/// larger (an mmu_gather batch, `MAX_GATHER_BATCH` = 510; a batch-lock pass, 512), and a
/// longer call is released in pieces of this size.
const LIST_MAX: usize = 512;

/// The batch-lock release's locks (`lru_batch_lock`/`lru_batch_unlock`, RFC v1 patch 10): one
/// batch lock, and `lru_lock` while the current page is a sentinel.
struct BatchHold<'a> {
    lock: usize,
    tag: usize,
    // Field order is drop order: lru_lock before the batch lock.
    lru: Option<SpinGuard<'a, ()>>,
    _batch: SpinGuard<'a, ()>,
}

impl<'a> BatchHold<'a> {
    /// Hold what unlinking `pfn` (tag `tag`, under lru_lock `lock`) needs, keeping what is
    /// already held when it is the same batch lock; returns the number of lock acquisitions.
    /// The sentinel flag is read with the batch lock held: a page that is no sentinel becomes
    /// one only when a neighbour of its own batch leaves, under this same lock, and every
    /// write of a flag holds `lru_lock` (adders; a sentinel's remover, which may set the
    /// already-set flag of a neighbour in another batch).
    fn relock(
        held: &mut Option<BatchHold<'a>>,
        b: &'a BatchedLruLock,
        lock: usize,
        tag: usize,
        pfn: Pfn,
        tags: &PageTags,
    ) -> u64 {
        let mut n = 0;
        if held.as_ref().is_none_or(|h| h.lock != lock || h.tag != tag) {
            drop(held.take());
            *held = Some(BatchHold {
                lock,
                tag,
                lru: None,
                _batch: b.batch_lock(tag),
            });
            n += 1;
        }
        let h = held.as_mut().expect("held above");
        match (tags.is_sentinel(pfn.0), h.lru.is_some()) {
            (true, false) => {
                h.lru = Some(b.lru_lock());
                n += 1;
            }
            (false, true) => h.lru = None,
            _ => {}
        }
        n
    }
}

/// The pages a release has taken off their lists and will free, handed to the allocator once
/// the caller has dropped its lock: a batch of `lru.batch` pages freed as it fills (the
/// kernel's `folio_batch`), or the whole call's, freed last to first (the `pages_to_free` list).
///
/// `N` pages fit: a call of at most [`SWAP_CLUSTER_MAX`] pages (a `put_page`, a batch flush)
/// uses a small array, so that it does not clear a list's worth of stack for one page.
struct ToFree<const N: usize> {
    pfns: [Pfn; N],
    nr: usize,
    /// Pages gathered before a flush is due.
    cap: usize,
    /// A list: freed in the reverse of the order gathered.
    list: bool,
    /// Pages freed so far.
    freed: u64,
}

impl<const N: usize> ToFree<N> {
    /// `batch`: the folio batch's size (`lru.batch`), which a `"batch"` or `"batch-list"`
    /// release fills.
    fn new(how: ReleaseFree, batch: usize) -> Self {
        ToFree {
            pfns: [Pfn(0); N],
            nr: 0,
            cap: match how {
                ReleaseFree::List => N,
                ReleaseFree::Batch | ReleaseFree::BatchList => batch.clamp(1, N),
            },
            list: how != ReleaseFree::Batch,
            freed: 0,
        }
    }

    /// Adds a page; true when the batch is full and must be flushed (with no lock held).
    fn push(&mut self, pfn: Pfn) -> bool {
        self.pfns[self.nr] = pfn;
        self.nr += 1;
        self.nr == self.cap
    }

    /// Frees what was gathered.
    fn flush(&mut self, lru: &Lru, cpu: CpuId) {
        let pfns = &mut self.pfns[..self.nr];
        if self.list {
            pfns.reverse();
        }
        lru.free_batch(cpu, pfns);
        self.freed += self.nr as u64;
        self.nr = 0;
    }
}

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
        if pfns.len() > LIST_MAX {
            for chunk in pfns.chunks(LIST_MAX) {
                self.release_pages(cpu, chunk);
            }
            return;
        }
        if self.release_mode == LruRelease::BatchLocks {
            for chunk in pfns.chunks(LRU_BITMAP_SIZE) {
                if chunk.len() <= SWAP_CLUSTER_MAX {
                    self.release_batch_locked::<SWAP_CLUSTER_MAX>(cpu, chunk);
                } else {
                    self.release_batch_locked::<LIST_MAX>(cpu, chunk);
                }
            }
            self.events.count(cpu, LruEvent::Release, pfns.len() as u64);
            return;
        }
        if pfns.len() <= SWAP_CLUSTER_MAX {
            self.release_locked::<SWAP_CLUSTER_MAX>(cpu, pfns);
        } else {
            self.release_locked::<LIST_MAX>(cpu, pfns);
        }
    }

    /// [`Lru::release_pages`] under `release = "locked"` or `"concurrent"`, for at most `N`
    /// pages.
    fn release_locked<const N: usize>(&self, cpu: CpuId, pfns: &[Pfn]) {
        let pages = self.mem.pages();
        let mut to_free = ToFree::<N>::new(self.release_free, self.batch_size);
        let mut held: Option<(usize, Hold<'_>)> = None;
        let (mut holds, mut waits) = (0u64, 0u64);
        // Pages looked at under the current hold (`lock_batch`, the `"list"` releases).
        let mut lock_batch = 0;
        for &pfn in pfns {
            if self.release_free == ReleaseFree::List && held.is_some() {
                lock_batch += 1;
                if lock_batch == SWAP_CLUSTER_MAX {
                    drop(held.take());
                }
            }
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
                    lock_batch = 0;
                }
                let lru = LruList::of(page.flags());
                match held.as_mut() {
                    Some((_, Hold::Exclusive(g))) => {
                        g[slot].del(pages, lru, pfn, StatCpu::Cpu(cpu))
                    }
                    Some((_, Hold::Shared(g))) => {
                        waits += u64::from(g[slot].smp_del(pages, lru, pfn, StatCpu::Cpu(cpu)));
                    }
                    None => unreachable!("locked above"),
                }
                // `__folio_clear_lru`: the count is zero, nobody else touches the page.
                page.clear_nonatomic(pg::LRU);
            }
            if to_free.push(pfn) {
                drop(held.take());
                to_free.flush(self, cpu);
            }
        }
        drop(held);
        to_free.flush(self, cpu);
        let freed = to_free.freed;
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
            LruRelease::BatchLocks => unreachable!("batch-lock release has its own path"),
        }
    }

    /// RFC v1's `release_pages` (patches 11 and 12) for at most [`LRU_BITMAP_SIZE`] pages: a
    /// first pass drops every reference and unlinks the freed non-sentinel pages under their
    /// batch locks only, remembering the freed sentinels in a bitmap; a second pass unlinks
    /// those under batch lock and `lru_lock`. Unlinking sentinels last keeps them from
    /// promoting the pages after them, in the common case of pages released in LRU order,
    /// which would send nearly every page through `lru_lock` (patch 12's motivation).
    fn release_batch_locked<const N: usize>(&self, cpu: CpuId, pfns: &[Pfn]) {
        let pages = self.mem.pages();
        let tags = self.tags.as_deref().expect("batch-lock release has tags");
        let mut sentinels = [0u64; LRU_BITMAP_SIZE / 64];
        let mut to_free = ToFree::<N>::new(self.release_free, self.batch_size);
        let mut held: Option<BatchHold<'_>> = None;
        let (mut holds, mut sentinels_unlinked) = (0u64, 0u64);
        for pass in 0..2 {
            for (i, &pfn) in pfns.iter().enumerate() {
                if pass == 0 {
                    if !self.put_testzero(pfn) {
                        continue;
                    }
                    // An unlocked read, as the kernel's: only a hint, rechecked under the
                    // batch lock (a freed page's sentinel flag can only be set meanwhile).
                    if pages[pfn].test(pg::LRU) && tags.is_sentinel(pfn.0) {
                        sentinels[i / 64] |= 1 << (i % 64);
                        continue;
                    }
                } else if sentinels[i / 64] & (1 << (i % 64)) == 0 {
                    continue;
                }
                let page = &pages[pfn];
                if page.test(pg::LRU) {
                    let Loc { lock, slot } = self.locate(pfn);
                    let b = self.locks[lock]
                        .batched()
                        .expect("batch-lock release builds batched lru_locks");
                    holds += BatchHold::relock(&mut held, b, lock, tags.tag(pfn.0), pfn, tags);
                    if held.as_ref().is_some_and(|h| h.lru.is_some()) {
                        sentinels_unlinked += 1;
                    }
                    b.lruvecs()[slot].del(pages, LruList::of(page.flags()), pfn, StatCpu::Cpu(cpu));
                    // `__ClearPageLRU`: the count is zero, nobody else touches the page.
                    page.clear_nonatomic(pg::LRU);
                }
                if to_free.push(pfn) {
                    drop(held.take());
                    to_free.flush(self, cpu);
                }
            }
        }
        drop(held);
        to_free.flush(self, cpu);
        let freed = to_free.freed;
        if freed > 0 {
            self.events.count(cpu, LruEvent::ReleaseFree, freed);
        }
        if holds > 0 {
            self.events.count(cpu, LruEvent::ReleaseLockHold, holds);
        }
        if sentinels_unlinked > 0 {
            self.events
                .count(cpu, LruEvent::ReleaseSentinel, sentinels_unlinked);
        }
    }

    /// `folio_put_testzero`: drop a reference; whether it was the last. A locked instruction
    /// on the page's own line, inside the hold from a release's second page on: on x86 it
    /// waits for the links the previous page's unlink stored (a fence in the trace).
    #[inline]
    pub(super) fn put_testzero(&self, pfn: Pfn) -> bool {
        self.sched_point();
        let prev = self.mem.pages()[pfn].refcount.fetch_sub(1, AcqRel);
        pagelab_sync::trace::fence();
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
