//! `struct lruvec` and the lock its lists share (`lru_lock`).
//!
//! # What it models
//!
//! An lruvec (include/linux/mmzone.h, mm/memcontrol.c `mem_cgroup_lruvec`) holds the LRU lists
//! of one (memcg, node) pair and their sizes (`lru_zone_size`/`NR_LRU_BASE + lru`). Which lock
//! protects them changed over the years, and is the policy's `lock_scope`:
//!
//! | scope | lock | kernel |
//! |---|---|---|
//! | `global` | one for every lruvec | 2.6 `zone->lru_lock` on a one-zone machine |
//! | `node` | one per node, shared by that node's memcgs | `pgdat->lru_lock`, 4.8 to 5.10 |
//! | `memcg-node` | one per lruvec | `lruvec->lru_lock`, 5.11+ (Alex Shi) |
//!
//! The lruvecs are always per (memcg, node); a [`LruLock`] owns the lruvecs that share it, so
//! a guard hands out exactly the lruvecs it protects. With `release = "concurrent"` the lock is
//! an [`RwSem`] (the RFC turned `lru_lock` into an `rwlock_t`): removals of freed pages hold it
//! shared and use [`List::smp_del`](super::smp_list::List::smp_del); everything else holds it
//! exclusively. Otherwise it is a [`SpinLock`] of the policy's kind.
//!
//! # What is protected
//!
//! The list links of every page on the lruvec's lists and the lists' heads: written only with
//! the lock held exclusively, or by `smp_del` with it held shared. The per-list page counts:
//! written by the exclusive holder (plain load and store), or by shared holders with an atomic
//! subtraction (the RFC made `update_lru_size` atomic for the same reason). `PG_active` and
//! `PG_swapbacked` of a page with `PG_lru` set, which say which list it is on: changed only
//! under the exclusive lock (activation moves the page at the same time).
//!
//! # Invariants (checked by [`Lruvec::check_list`], called from `Lru::check`)
//!
//! Each list is well formed and as long as its counter says.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_utils::CachePadded;
use pagelab_sync::trace::{self, Sym};
use pagelab_sync::{LockKind, RwSem, RwSemReadGuard, RwSemWriteGuard, SpinGuard, SpinLock};

use super::LruList;
use super::smp_list::{List, ListHead, LocalChain};
use crate::page::{PageArray, Pfn};

/// One (memcg, node) pair's LRU lists.
#[derive(Debug, Default)]
pub struct Lruvec {
    heads: [ListHead<AtomicU32>; LruList::COUNT],
    len: [AtomicU64; LruList::COUNT],
}

impl Lruvec {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn list<'a>(&'a self, pages: &'a PageArray, lru: LruList) -> List<'a, PageArray> {
        List::new(pages, &self.heads[lru as usize])
    }

    /// Pages on `lru` (a racy snapshot when read without the lock).
    #[inline]
    pub fn len(&self, lru: LruList) -> u64 {
        self.len[lru as usize].load(Relaxed)
    }

    /// Whether every list is empty (a racy snapshot when read without the lock).
    pub fn is_empty(&self) -> bool {
        LruList::ALL.iter().all(|&l| self.len(l) == 0)
    }

    /// Counter update by the exclusive holder: a plain load and store, no locked instruction.
    #[inline]
    fn add_len(&mut self, lru: LruList, delta: i64) {
        let c = &self.len[lru as usize];
        c.store(c.load(Relaxed).wrapping_add_signed(delta), Relaxed);
    }

    /// The address of `lru`'s head (its line is the list's instance in traces).
    #[inline]
    fn head_addr(&self, lru: LruList) -> usize {
        &self.heads[lru as usize] as *const ListHead<AtomicU32> as usize
    }

    #[inline]
    fn len_addr(&self, lru: LruList) -> usize {
        &self.len[lru as usize] as *const AtomicU64 as usize
    }

    /// Records the shared lines a link at the hot (`front`) or cold end of `lru` writes: the
    /// end entry's link (whose line is whoever linked it: symbolic), the head and the size
    /// counter (`list_add` and `update_lru_size` under `lru_lock`).
    #[inline]
    fn trace_link(&self, pages: &PageArray, lru: LruList, front: bool) {
        if trace::active() {
            let list = self.list(pages, lru);
            if !list.is_empty() {
                let sym = if front { Sym::First } else { Sym::Entry };
                trace::line_sym_write(&LRU_LIST, self.head_addr(lru), sym);
            }
            trace::line_write(&LRU_LIST, self.head_addr(lru));
            trace::line_write(&LRU_LIST, self.len_addr(lru));
        }
    }

    /// `lruvec_add_folio`: link `pfn` at the hot end of `lru`.
    #[inline]
    pub fn add_front(&mut self, pages: &PageArray, lru: LruList, pfn: Pfn) {
        self.trace_link(pages, lru, true);
        self.list(pages, lru).push_front(pfn.0);
        self.add_len(lru, 1);
    }

    /// `lruvec_add_folio_tail`: link `pfn` at the cold end of `lru`.
    #[inline]
    pub fn add_back(&mut self, pages: &PageArray, lru: LruList, pfn: Pfn) {
        self.trace_link(pages, lru, false);
        self.list(pages, lru).push_back(pfn.0);
        self.add_len(lru, 1);
    }

    /// `lruvec_del_folio`: unlink `pfn`, which is on `lru`.
    #[inline]
    pub fn del(&mut self, pages: &PageArray, lru: LruList, pfn: Pfn) {
        if trace::active() {
            // Taking off the first entry rewrites the head and the next entry's link. The
            // neighbours of an entry further in are not recorded (see docs/model.md).
            if self.list(pages, lru).first() == Some(pfn.0) {
                trace::line_sym_write(&LRU_LIST, self.head_addr(lru), Sym::First);
                trace::line_write(&LRU_LIST, self.head_addr(lru));
            }
            trace::line_write(&LRU_LIST, self.len_addr(lru));
        }
        self.list(pages, lru).remove(pfn.0);
        self.add_len(lru, -1);
    }

    /// Splice a local chain onto the hot end of `lru` in O(1).
    #[inline]
    pub fn splice_front(&mut self, pages: &PageArray, lru: LruList, chain: &LocalChain) {
        self.trace_link(pages, lru, true);
        self.list(pages, lru).splice_front(chain);
        self.add_len(lru, i64::from(chain.len()));
    }

    /// Splice a local chain onto the cold end of `lru` in O(1).
    #[inline]
    pub fn splice_back(&mut self, pages: &PageArray, lru: LruList, chain: &LocalChain) {
        self.trace_link(pages, lru, false);
        self.list(pages, lru).splice_back(chain);
        self.add_len(lru, i64::from(chain.len()));
    }

    /// `smp_del_page_from_lru_list`: unlink `pfn` from `lru` while other removers may run; the
    /// caller holds the lock shared. Returns the removal's wait count.
    #[inline]
    pub fn smp_del(&self, pages: &PageArray, lru: LruList, pfn: Pfn) -> u32 {
        let waits = self.list(pages, lru).smp_del(pfn.0);
        // The size is updated atomically by every concurrent remover: one shared line.
        trace::atomic(&LRU_LIST, self.len_addr(lru));
        self.len[lru as usize].fetch_sub(1, Relaxed);
        waits
    }

    /// First page (hot end) of `lru`.
    pub fn first(&self, pages: &PageArray, lru: LruList) -> Option<Pfn> {
        self.list(pages, lru).first().map(Pfn)
    }

    /// Last page (cold end) of `lru`.
    pub fn last(&self, pages: &PageArray, lru: LruList) -> Option<Pfn> {
        self.list(pages, lru).last().map(Pfn)
    }

    /// The page after `pfn` (towards the cold end) on `lru`.
    pub fn next(&self, pages: &PageArray, lru: LruList, pfn: Pfn) -> Option<Pfn> {
        self.list(pages, lru).next_of(pfn.0).map(Pfn)
    }

    /// The page before `pfn` (towards the hot end) on `lru`.
    pub fn prev(&self, pages: &PageArray, lru: LruList, pfn: Pfn) -> Option<Pfn> {
        self.list(pages, lru).prev_of(pfn.0).map(Pfn)
    }

    /// The pages of `lru`, hot end first.
    pub fn pages<'a>(
        &'a self,
        pages: &'a PageArray,
        lru: LruList,
    ) -> impl Iterator<Item = Pfn> + 'a {
        let limit = self.len(lru) as usize;
        self.list(pages, lru).iter(limit).map(Pfn)
    }

    /// The pages of `lru`, cold end first.
    pub fn pages_rev<'a>(
        &'a self,
        pages: &'a PageArray,
        lru: LruList,
    ) -> impl Iterator<Item = Pfn> + 'a {
        let limit = self.len(lru) as usize;
        self.list(pages, lru).iter_rev(limit).map(Pfn)
    }

    /// Check `lru`'s shape against its counter; returns its length.
    pub fn check_list(&self, pages: &PageArray, lru: LruList) -> Result<u64, String> {
        let len = self.len(lru);
        let n = self.list(pages, lru).check(len)?;
        if n != len {
            return Err(format!(
                "{lru:?} holds {n} pages but its counter says {len}"
            ));
        }
        Ok(n)
    }
}

/// The lines of an lruvec's lists: list heads, size counters and (symbolically, relative to a
/// head) the entries at its ends. Per node: a task links its pages on its own node's lruvec.
pub static LRU_LIST: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru list", pagelab_sync::Scope::Node);

/// `lru_lock` when one protects every lruvec (`lock_scope = "global"`).
pub static LRU_LOCK_GLOBAL: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru_lock", pagelab_sync::Scope::Machine);
/// `lru_lock` per node (`pgdat->lru_lock`) or per (memcg, node) (`lruvec->lru_lock`).
pub static LRU_LOCK_NODE: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru_lock", pagelab_sync::Scope::Node);

/// A `lru_lock` and the lruvecs it protects.
pub enum LruLock {
    /// `spinlock_t lru_lock`.
    Spin(CachePadded<SpinLock<Box<[Lruvec]>>>),
    /// The RFC's `rwlock_t lru_lock`: shared for concurrent removals, exclusive otherwise.
    /// Traced as a queued rwlock (spinning waiters), not as an rw_semaphore.
    Rw(CachePadded<RwSem<Box<[Lruvec]>>>),
}

impl LruLock {
    /// `global`: one lock for the machine, else one per node (or per memcg and node, which
    /// for tasks of one memcg is also one per node).
    pub fn new(concurrent: bool, kind: LockKind, nr_lruvecs: usize, global: bool) -> Self {
        let v: Box<[Lruvec]> = (0..nr_lruvecs).map(|_| Lruvec::new()).collect();
        let class = if global {
            &LRU_LOCK_GLOBAL
        } else {
            &LRU_LOCK_NODE
        };
        if concurrent {
            LruLock::Rw(CachePadded::new(
                RwSem::new(v).with_class(class).as_rwlock(),
            ))
        } else {
            LruLock::Spin(CachePadded::new(SpinLock::new(kind, v).with_class(class)))
        }
    }

    /// Take the lock exclusively (`spin_lock_irq(&lruvec->lru_lock)`, or `write_lock`).
    #[inline]
    pub fn lock(&self) -> LruGuard<'_> {
        match self {
            LruLock::Spin(l) => LruGuard::Spin(l.lock()),
            LruLock::Rw(l) => LruGuard::Write(l.write()),
        }
    }

    /// Take the lock shared (`read_lock`), for concurrent removals; `None` for a spinlock.
    #[inline]
    pub fn lock_shared(&self) -> Option<RwSemReadGuard<'_, Box<[Lruvec]>>> {
        match self {
            LruLock::Spin(_) => None,
            LruLock::Rw(l) => Some(l.read()),
        }
    }
}

/// An exclusive hold of a [`LruLock`]; derefs to the lruvecs it protects.
pub enum LruGuard<'a> {
    Spin(SpinGuard<'a, Box<[Lruvec]>>),
    Write(RwSemWriteGuard<'a, Box<[Lruvec]>>),
}

impl Deref for LruGuard<'_> {
    type Target = [Lruvec];
    #[inline]
    fn deref(&self) -> &[Lruvec] {
        match self {
            LruGuard::Spin(g) => g,
            LruGuard::Write(g) => g,
        }
    }
}

impl DerefMut for LruGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Lruvec] {
        match self {
            LruGuard::Spin(g) => g,
            LruGuard::Write(g) => g,
        }
    }
}
