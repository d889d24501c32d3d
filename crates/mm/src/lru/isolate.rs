//! Taking single pages off the LRU and putting them back: mm/vmscan.c `folio_isolate_lru`,
//! `move_folios_to_lru` (the putback reclaim and migration use), and the speculative reference
//! of the scanners (`folio_try_get`).
//!
//! # What it models
//!
//! `PG_lru` is the token that says "on an LRU list and nobody is taking it off". To isolate a
//! page the caller, who holds a reference so the page cannot be freed under it, test-and-clears
//! `PG_lru` without any lock; only the winner takes a reference of its own and then the page's
//! lruvec lock (exclusively) to unlink it. The loser learns the page is not its to take:
//! another isolator has it, it sits in a per-CPU batch, it is being spliced (see `batch`), or
//! it is being released (impossible while the caller's reference holds, but a scanner holding
//! only a speculative reference must expect it).
//!
//! Putback links the page at the hot end of the list its flags now say (reclaim may have set
//! or cleared `PG_active` while it owned the page), sets `PG_lru` under the lock, and drops the
//! isolation reference under the same hold: when that was the last reference the page comes
//! straight off again and is freed after the unlock, as `move_folios_to_lru` does.
//!
//! # Locks and invariants
//!
//! Both hold the lruvec's lru_lock exclusively (the rwsem for write under `concurrent`). While
//! isolated a page has no `PG_lru`, is on no list, and holds the isolation reference; its
//! owner may change its flags freely. Checked by the tests: of two isolators exactly one wins,
//! and putback restores the list, the counts and the reference count.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use super::size_stats::StatCpu;
use super::stats::LruEvent;
use super::{Loc, Lru, LruList};
use crate::cpu::CpuId;
use crate::page::{Pfn, pg};

impl Lru {
    /// `folio_try_get`: take a reference unless the count is zero (the page is free or being
    /// freed). What a caller without a reference (a scanner, a stress test's isolator) does
    /// before [`Lru::isolate`]; drop it with [`Lru::put_page`].
    pub fn try_get_page(&self, pfn: Pfn) -> bool {
        let rc = &self.mem.pages()[pfn].refcount;
        self.sched_point();
        let mut cur = rc.load(Relaxed);
        loop {
            if cur <= 0 {
                return false;
            }
            match rc.compare_exchange_weak(cur, cur + 1, Acquire, Relaxed) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    /// `folio_isolate_lru`: take `pfn` off its LRU list if this caller wins its `PG_lru`. The
    /// caller must hold a reference. On success the page holds one more reference (the
    /// isolation's), which [`Lru::putback`] drops.
    pub fn isolate(&self, pfn: Pfn) -> bool {
        let pages = self.mem.pages();
        let page = &pages[pfn];
        debug_assert!(
            page.refcount.load(Relaxed) > 0,
            "isolate of {pfn:?} without a reference"
        );
        self.sched_point();
        if page.flags.fetch_and(!pg::LRU, AcqRel) & pg::LRU == 0 {
            self.events.count_unbound(LruEvent::IsolateLost, 1);
            return false;
        }
        self.mem.get_page(pfn);
        let Loc { lock, slot } = self.locate(pfn);
        let guard = self.locks[lock].lock();
        guard[slot].del(pages, LruList::of(page.flags()), pfn, StatCpu::Unbound);
        if self.mglru.is_some() {
            self.lrugens[self.lruvec_index(lock, slot)].unlinked(page, false);
        }
        drop(guard);
        self.events.count_unbound(LruEvent::Isolate, 1);
        true
    }

    /// Put an isolated page back on the list its flags say and drop the isolation reference.
    pub fn putback(&self, cpu: CpuId, pfn: Pfn) {
        let pages = self.mem.pages();
        let page = &pages[pfn];
        debug_assert!(
            !page.test(pg::LRU),
            "putback of {pfn:?}, which is on an LRU"
        );
        let Loc { lock, slot } = self.locate(pfn);
        let freed = {
            let guard = self.locks[lock].lock();
            if self.mglru.is_some() {
                self.lrugens[self.lruvec_index(lock, slot)].prepare_link(page);
            }
            let lru = LruList::of(page.flags());
            // `folio_putback_lru` adds through `lru_add`, as a new page does.
            self.clear_unevictable(page);
            guard[slot].add_front(pages, lru, pfn, StatCpu::Cpu(cpu));
            super::set_lru(page);
            if self.put_testzero(pfn) {
                guard[slot].del(pages, lru, pfn, StatCpu::Cpu(cpu));
                page.clear_nonatomic(pg::LRU);
                true
            } else {
                false
            }
        };
        self.events.count(cpu, LruEvent::Putback, 1);
        if freed {
            self.mem.free_frozen_pages(cpu, pfn, 0);
            self.events.count(cpu, LruEvent::ReleaseFree, 1);
        }
    }
}
