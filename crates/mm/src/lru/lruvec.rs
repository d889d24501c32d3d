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
//! exclusively. With `release = "batch-locks"` (the RFC v1) it is a [`SpinLock`] with an
//! array of 32 batch locks beside it ([`BatchedLruLock`]): the lruvecs then sit outside both,
//! because a removal of a batch's inner page holds only its batch lock (see
//! [`super::batch_lock`]), which is why the lruvecs' mutators take `&self`. Otherwise it is a
//! [`SpinLock`] of the policy's kind.
//!
//! # What is protected
//!
//! The list links of every page on the lruvec's lists and the lists' heads: written only with
//! the lock held exclusively, or by `smp_del` with it held shared. The per-list page counts:
//! written by the exclusive holder (plain load and store), or by shared holders with an atomic
//! subtraction (the RFC made `update_lru_size` atomic for the same reason). Under batch locks
//! (RFC v1) a removal that holds only its batch lock counts itself in that lock's own tally,
//! with a plain load and store too ([`Lruvec::del`]): 4.15 kept the LRU sizes the fault path
//! updates in per-CPU vmstat deltas (`__mod_node_page_state`, `__mod_zone_page_state`), which
//! take no locked instruction and share no line, and the v1 patches as this project read them
//! (the cover letter and patch titles of 31 Jan 2018) give no sign of a shared atomic counter.
//! `PG_active` and `PG_swapbacked` of a page with `PG_lru` set, which say which list it is on:
//! changed only under the exclusive lock (activation moves the page at the same time).
//!
//! # Invariants (checked by [`Lruvec::check_list`], called from `Lru::check`)
//!
//! Each list is well formed and as long as its counter says.

use std::ops::Deref;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_utils::CachePadded;
use pagelab_sync::trace::{self, Sym};
use pagelab_sync::{LockKind, RwSem, RwSemReadGuard, RwSemWriteGuard, SpinGuard, SpinLock};

use super::LruList;
use super::batch_lock::{BatchedLruLock, ListBatches, NUM_LRU_BATCH_LOCKS};
use super::size_stats::{Holder, LruvecStat, StatCpu};
use super::smp_list::{List, ListHead, LocalChain};
use crate::page::{PageArray, Pfn};
use crate::policy::LruRelease;

/// One (memcg, node) pair's LRU lists.
#[derive(Debug, Default)]
pub struct Lruvec {
    heads: [ListHead<AtomicU32>; LruList::COUNT],
    len: [AtomicU64; LruList::COUNT],
    /// Under `release = "batch-locks"`, the lists' batch bookkeeping ([`super::batch_lock`]).
    batches: Option<ListBatches>,
    /// Under `release = "batch-locks"`, per batch lock, the non-sentinel pages its holders
    /// took off each list (wrapping; also by holders of every lock, `lru_lock_all`): written
    /// only under that batch lock, so a plain load and store. A list's size is its `len` less
    /// these ([`Lruvec::len`]).
    batch_removed: Box<[[AtomicU64; LruList::COUNT]]>,
    /// The node's, zone's and memcg's statistics of the lists' sizes, where the policy keeps
    /// them ([`super::size_stats`]).
    stat: Option<LruvecStat>,
}

impl Lruvec {
    pub fn new() -> Self {
        Self::default()
    }

    /// An lruvec whose lists are cut into batches (RFC v1, `release = "batch-locks"`).
    pub fn with_batches(batches: ListBatches) -> Self {
        Lruvec {
            batches: Some(batches),
            batch_removed: (0..NUM_LRU_BATCH_LOCKS)
                .map(|_| Default::default())
                .collect(),
            ..Self::default()
        }
    }

    /// Count this lruvec's pages in the node's, zone's and memcg's statistics too.
    pub fn with_stat(mut self, stat: Option<LruvecStat>) -> Self {
        self.stat = stat;
        self
    }

    /// The statistics this lruvec updates, if the policy keeps any.
    pub fn stat(&self) -> Option<&LruvecStat> {
        self.stat.as_ref()
    }

    /// The batch bookkeeping, under `release = "batch-locks"`.
    pub fn batches(&self) -> Option<&ListBatches> {
        self.batches.as_ref()
    }

    #[inline]
    fn list<'a>(&'a self, pages: &'a PageArray, lru: LruList) -> List<'a, PageArray> {
        List::new(pages, &self.heads[lru as usize])
    }

    /// Pages on `lru` (a racy snapshot when read without the lock).
    #[inline]
    pub fn len(&self, lru: LruList) -> u64 {
        let i = lru as usize;
        self.batch_removed
            .iter()
            .fold(self.len[i].load(Relaxed), |n, r| {
                n.wrapping_sub(r[i].load(Relaxed))
            })
    }

    /// Whether every list is empty (a racy snapshot when read without the lock).
    pub fn is_empty(&self) -> bool {
        LruList::ALL.iter().all(|&l| self.len(l) == 0)
    }

    /// Counter update by the holder of `lru_lock` (exclusively): a plain load and store, no
    /// locked instruction, as the kernel's `update_lru_size` under the lock, after the node's,
    /// zone's and memcg's statistics on `cpu`. A removal under a batch lock alone counts in
    /// that lock's tally instead ([`Self::del`]).
    #[inline]
    fn add_len(&self, lru: LruList, delta: i64, cpu: StatCpu) {
        self.stat_update(Holder::Exclusive, lru, delta, cpu);
        let c = &self.len[lru as usize];
        c.store(c.load(Relaxed).wrapping_add_signed(delta), Relaxed);
    }

    /// `update_lru_size`'s statistics beyond the lruvec's own counter.
    #[inline]
    fn stat_update(&self, holder: Holder, lru: LruList, delta: i64, cpu: StatCpu) {
        if let Some(s) = &self.stat {
            s.update(holder, cpu, lru, delta);
        }
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
    /// head, read for its end entry and rewritten, then that entry's link (whose line is
    /// whoever linked it: symbolic) and the size counter (`list_add` and `update_lru_size`
    /// under `lru_lock`). The link and the counter are stores the CPU does not wait for
    /// (`Kind::Store`): the link's address came with the head.
    #[inline]
    fn trace_link(&self, pages: &PageArray, lru: LruList, front: bool) {
        if trace::active() {
            let list = self.list(pages, lru);
            trace::line_write(&LRU_LIST, self.head_addr(lru));
            if !list.is_empty() {
                let sym = if front { Sym::First } else { Sym::Entry };
                trace::line_store(&LRU_LIST, self.head_addr(lru), sym);
            }
            self.trace_len_of(lru);
        }
    }

    /// The size counter's update under `lru_lock` as recorded: a store the CPU does not wait
    /// for (a plain `+=`, its load feeding only its store). A removal under a batch lock alone
    /// records none: its tally is its own lock's, and the kernel's was a per-CPU delta.
    #[inline]
    fn trace_len_of(&self, lru: LruList) {
        trace::line_store(&LRU_LIST, self.len_addr(lru), Sym::Here);
    }

    /// `lruvec_add_folio`: link `pfn` at the hot end of `lru`.
    #[inline]
    pub fn add_front(&self, pages: &PageArray, lru: LruList, pfn: Pfn, cpu: StatCpu) {
        self.trace_link(pages, lru, true);
        link_runs::linked(pfn);
        let list = self.list(pages, lru);
        if let Some(b) = &self.batches {
            b.link_written(lru, None);
            b.link_written(lru, list.first());
            b.link_written(lru, Some(pfn.0));
        }
        list.push_front(pfn.0);
        if let Some(b) = &self.batches {
            b.linked(&list, lru, pfn.0, true);
        }
        self.add_len(lru, 1, cpu);
    }

    /// `lruvec_add_folio_tail`: link `pfn` at the cold end of `lru`.
    #[inline]
    pub fn add_back(&self, pages: &PageArray, lru: LruList, pfn: Pfn, cpu: StatCpu) {
        self.trace_link(pages, lru, false);
        link_runs::linked(pfn);
        let list = self.list(pages, lru);
        if let Some(b) = &self.batches {
            b.link_written(lru, None);
            b.link_written(lru, list.last());
            b.link_written(lru, Some(pfn.0));
        }
        list.push_back(pfn.0);
        if let Some(b) = &self.batches {
            b.linked(&list, lru, pfn.0, false);
        }
        self.add_len(lru, 1, cpu);
    }

    /// `lruvec_del_folio`: unlink `pfn`, which is on `lru`. Under batch locks, the caller holds
    /// the page's batch lock, and `lru_lock` too if the page is a sentinel
    /// ([`super::batch_lock`]).
    #[inline]
    pub fn del(&self, pages: &PageArray, lru: LruList, pfn: Pfn, cpu: StatCpu) {
        // Read before `unlinking`, which may make this page's neighbours sentinels (not it).
        let tally = self.batch_tally(pfn);
        if trace::active() {
            // `list_del` rewrites both neighbours' links. Taking off the first entry rewrites
            // the head and the next entry's link, the last entry the head's `prev`. A
            // neighbour further in is a `struct page` of the recording task's own, a hit, when
            // the task linked it in the same `lru_lock` hold as this page (one pagevec's run);
            // across a run's edge it is another CPU's page once several CPUs add to the list
            // (their runs interleave), so it is recorded symbolically, as another entry.
            //
            // The CPU waits for the entry's own line (the first entry's, when it is that one):
            // `list_del` reads its links. The neighbours' links (the head's among them) and the
            // size counter are stores it does not wait for (`Kind::Store`).
            let list = self.list(pages, lru);
            let head = self.head_addr(lru);
            if list.first() == Some(pfn.0) {
                trace::line_sym_write(&LRU_LIST, head, Sym::First);
                trace::line_store(&LRU_LIST, head, Sym::Here);
            } else if let Some(prev) = list.prev_of(pfn.0)
                && !link_runs::same_run(prev, pfn.0)
            {
                trace::line_store(&LRU_LIST, head, Sym::Entry);
            }
            match list.next_of(pfn.0) {
                None => trace::line_store(&LRU_LIST, head, Sym::Here),
                Some(next) if !link_runs::same_run(next, pfn.0) => {
                    trace::line_store(&LRU_LIST, head, Sym::Entry)
                }
                Some(_) => {}
            }
            if tally.is_none() {
                self.trace_len_of(lru);
            }
            link_runs::unlinked(pfn);
        }
        let list = self.list(pages, lru);
        if let Some(b) = &self.batches {
            // A neighbour that is the head (`None`) is the head's links.
            b.link_written(lru, list.prev_of(pfn.0));
            b.link_written(lru, list.next_of(pfn.0));
            b.link_written(lru, Some(pfn.0));
            b.unlinking(&list, pfn.0);
        }
        list.remove(pfn.0);
        match tally {
            Some((tag, r)) => {
                self.stat_update(Holder::Batch(tag), lru, -1, cpu);
                let c = &r[lru as usize];
                c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
            }
            None => self.add_len(lru, -1, cpu),
        }
    }

    /// Under batch locks, the tally a removal of `pfn` counts in when its caller may hold only
    /// the page's batch lock: a non-sentinel's (a sentinel's remover holds `lru_lock` too, and
    /// counts in `len`). Whoever holds every lock (`lru_lock_all`) may use either.
    #[inline]
    fn batch_tally(&self, pfn: Pfn) -> Option<(usize, &[AtomicU64; LruList::COUNT])> {
        let tags = self.batches.as_ref()?.tags();
        let tag = tags.tag(pfn.0);
        (!tags.is_sentinel(pfn.0)).then(|| (tag, &self.batch_removed[tag]))
    }

    /// Splice a local chain onto the hot end of `lru` in O(1).
    #[inline]
    pub fn splice_front(&self, pages: &PageArray, lru: LruList, chain: &LocalChain, cpu: StatCpu) {
        self.trace_link(pages, lru, true);
        let list = self.list(pages, lru);
        if let Some(b) = &self.batches {
            b.link_written(lru, None);
            b.link_written(lru, list.first());
        }
        list.splice_front(chain);
        if trace::active() {
            for p in list.iter(chain.len() as usize) {
                link_runs::linked(Pfn(p));
            }
        }
        if let Some(b) = &self.batches {
            b.spliced(&list, lru, chain, true);
        }
        self.add_len(lru, i64::from(chain.len()), cpu);
    }

    /// Splice a local chain onto the cold end of `lru` in O(1).
    #[inline]
    pub fn splice_back(&self, pages: &PageArray, lru: LruList, chain: &LocalChain, cpu: StatCpu) {
        self.trace_link(pages, lru, false);
        let list = self.list(pages, lru);
        if let Some(b) = &self.batches {
            b.link_written(lru, None);
            b.link_written(lru, list.last());
        }
        list.splice_back(chain);
        if trace::active() {
            for p in list.iter_rev(chain.len() as usize) {
                link_runs::linked(Pfn(p));
            }
        }
        if let Some(b) = &self.batches {
            b.spliced(&list, lru, chain, false);
        }
        self.add_len(lru, i64::from(chain.len()), cpu);
    }

    /// `smp_del_page_from_lru_list`: unlink `pfn` from `lru` while other removers may run; the
    /// caller holds the lock shared. Returns the removal's wait count.
    #[inline]
    pub fn smp_del(&self, pages: &PageArray, lru: LruList, pfn: Pfn, cpu: StatCpu) -> u32 {
        let waits = self.list(pages, lru).smp_del(pfn.0);
        // The size is updated atomically by every concurrent remover: one shared line.
        trace::atomic(&LRU_LIST, self.len_addr(lru));
        self.stat_update(Holder::Shared, lru, -1, cpu);
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
        if let Some(b) = &self.batches {
            b.check(&self.list(pages, lru), n)
                .map_err(|e| format!("{lru:?}: {e}"))?;
        }
        Ok(n)
    }
}

/// Which of the recording task's `lru_lock` holds linked each page it put on an LRU list, so
/// that a removal can tell a neighbour linked in the same run (one pagevec drain, a hit in the
/// kernel too) from one across a run's edge: in the kernel the LRU of a node interleaves every
/// CPU's runs, and `list_del` (`del_page_from_lru_list`, under `lru_lock` in 4.15's
/// `release_pages`) writes the `lru` links of the neighbours on both sides, so at a run's edge
/// it writes a `struct page` line another CPU wrote last. Kept only while a trace records, on
/// the recording thread; a page linked by another thread, or before the recording, has no run
/// and counts as another CPU's.
mod link_runs {
    use std::cell::RefCell;

    use pagelab_sync::trace;

    use crate::hold_stamps::HoldStamps;
    use crate::page::Pfn;

    thread_local! {
        static RUNS: RefCell<HoldStamps> = RefCell::new(HoldStamps::default());
    }

    /// A new `lru_lock` hold by this thread.
    #[inline]
    pub(super) fn hold() {
        if trace::active() {
            RUNS.with_borrow_mut(HoldStamps::new_hold);
        }
    }

    #[inline]
    pub(super) fn linked(pfn: Pfn) {
        if trace::active() {
            RUNS.with_borrow_mut(|r| r.stamp(pfn.0));
        }
    }

    #[inline]
    pub(super) fn unlinked(pfn: Pfn) {
        RUNS.with_borrow_mut(|r| r.clear(pfn.0));
    }

    /// Whether this thread linked `a` and `b` in one hold.
    #[inline]
    pub(super) fn same_run(a: u32, b: u32) -> bool {
        RUNS.with_borrow(|r| r.same_hold(a, b))
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
    /// The RFC v2's `rwlock_t lru_lock`: shared for concurrent removals, exclusive otherwise.
    /// Traced as a queued rwlock (spinning waiters), not as an rw_semaphore.
    Rw(CachePadded<RwSem<Box<[Lruvec]>>>),
    /// The RFC v1's `lru_lock` with its array of batch locks ([`super::batch_lock`]).
    Batched(Box<BatchedLruLock>),
}

impl LruLock {
    /// `global`: one lock for the machine, else one per node (or per memcg and node, which
    /// for tasks of one memcg is also one per node).
    /// `tags` (the pages' batch tags) is `Some` exactly under `release = "batch-locks"`; `seed`
    /// tells this lock's lruvecs' random batch tags apart from other locks'.
    pub fn new(
        release: LruRelease,
        kind: LockKind,
        nr_lruvecs: usize,
        global: bool,
        tags: Option<&std::sync::Arc<super::batch_lock::PageTags>>,
        seed: u32,
        mut stat: impl FnMut(usize) -> Option<LruvecStat>,
    ) -> Self {
        let class = if global {
            &LRU_LOCK_GLOBAL
        } else {
            &LRU_LOCK_NODE
        };
        match (release, tags) {
            (LruRelease::BatchLocks, Some(tags)) => {
                let v = (0..nr_lruvecs)
                    .map(|i| {
                        Lruvec::with_batches(ListBatches::new(
                            tags.clone(),
                            seed.wrapping_mul(64).wrapping_add(i as u32),
                        ))
                        .with_stat(stat(i))
                    })
                    .collect();
                LruLock::Batched(Box::new(BatchedLruLock::new(kind, class, v)))
            }
            (LruRelease::BatchLocks, None) => panic!("batch locks need the pages' batch tags"),
            (LruRelease::Concurrent, _) => {
                let v = (0..nr_lruvecs)
                    .map(|i| Lruvec::new().with_stat(stat(i)))
                    .collect();
                LruLock::Rw(CachePadded::new(
                    RwSem::new(v).with_class(class).as_rwlock(),
                ))
            }
            (LruRelease::Locked, _) => {
                let v = (0..nr_lruvecs)
                    .map(|i| Lruvec::new().with_stat(stat(i)))
                    .collect();
                LruLock::Spin(CachePadded::new(SpinLock::new(kind, v).with_class(class)))
            }
        }
    }

    /// Take the lock exclusively (`spin_lock_irq(&lruvec->lru_lock)`, `write_lock`, or the RFC
    /// v1's `lru_lock_all`).
    #[inline]
    pub fn lock(&self) -> LruGuard<'_> {
        link_runs::hold();
        match self {
            LruLock::Spin(l) => LruGuard::Spin(l.lock()),
            LruLock::Rw(l) => LruGuard::Write(l.write()),
            LruLock::Batched(b) => {
                let (batch, lru) = b.lock_all();
                LruGuard::Batched {
                    _lru: lru,
                    _batch: batch,
                    lruvecs: b.lruvecs(),
                }
            }
        }
    }

    /// The hold an add (a link at either end, a splice) needs: under batch locks only
    /// `lru_lock` (RFC v1 patch 09, the add-only `__pagevec_lru_add`), else [`LruLock::lock`].
    #[inline]
    pub fn lock_for_add(&self) -> LruGuard<'_> {
        match self {
            LruLock::Batched(b) => {
                link_runs::hold();
                LruGuard::Batched {
                    _lru: b.lru_lock(),
                    _batch: Vec::new(),
                    lruvecs: b.lruvecs(),
                }
            }
            _ => self.lock(),
        }
    }

    /// Take the lock shared (`read_lock`), for concurrent removals; `None` for a spinlock.
    #[inline]
    pub fn lock_shared(&self) -> Option<RwSemReadGuard<'_, Box<[Lruvec]>>> {
        match self {
            LruLock::Rw(l) => Some(l.read()),
            LruLock::Spin(_) | LruLock::Batched(_) => None,
        }
    }

    /// The batch-lock form, under `release = "batch-locks"`.
    #[inline]
    pub fn batched(&self) -> Option<&BatchedLruLock> {
        match self {
            LruLock::Batched(b) => Some(b),
            _ => None,
        }
    }
}

/// A hold of a [`LruLock`] for an exclusive operation (or an add, under batch locks); derefs
/// to the lruvecs it protects. The lruvecs' mutators take `&self` (their words are atomics)
/// because under batch locks no single guard owns them.
pub enum LruGuard<'a> {
    Spin(SpinGuard<'a, Box<[Lruvec]>>),
    Write(RwSemWriteGuard<'a, Box<[Lruvec]>>),
    /// `lru_lock` and, for everything but adds, every batch lock (`lru_lock_all`).
    Batched {
        _lru: SpinGuard<'a, ()>,
        _batch: Vec<SpinGuard<'a, ()>>,
        lruvecs: &'a [Lruvec],
    },
}

impl Deref for LruGuard<'_> {
    type Target = [Lruvec];
    #[inline]
    fn deref(&self) -> &[Lruvec] {
        match self {
            LruGuard::Spin(g) => g,
            LruGuard::Write(g) => g,
            LruGuard::Batched { lruvecs, .. } => lruvecs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_writes(ev: &[trace::Event]) -> usize {
        crate::test_trace::entry_writes(ev, "lru list")
    }

    /// `list_del` writes both neighbours' links: a neighbour linked in the same `lru_lock`
    /// hold is the recording task's own line, one across a run's edge is another CPU's once
    /// runs interleave, and is recorded as such (4.15's `release_pages` under `lru_lock`).
    #[test]
    fn a_removal_records_the_neighbours_across_a_run_edge() {
        let pages = PageArray::new(16);
        let lock = LruLock::new(
            LruRelease::Locked,
            LockKind::Queued,
            1,
            false,
            None,
            0,
            |_| None,
        );
        let lru = LruList::ActiveAnon;
        trace::start(1024);
        for run in [0..4u32, 4..8] {
            let g = lock.lock_for_add();
            for p in run {
                g[0].add_front(&pages, lru, Pfn(p), StatCpu::Unbound);
            }
        }
        // Hot end first: 7 6 5 4 | 3 2 1 0.
        let g = lock.lock();
        let _ = trace::stop();
        let del = |p: u32| {
            trace::start(64);
            g[0].del(&pages, lru, Pfn(p), StatCpu::Unbound);
            entry_writes(&trace::stop())
        };
        assert_eq!(del(1), 0, "both neighbours (2, 0) from its own run");
        assert_eq!(del(3), 1, "4 is across the run's edge, 2 is not");
        assert_eq!(del(0), 0, "the last entry: 2 and the head");
        assert_eq!(del(2), 1, "now next to 4");
        assert_eq!(del(5), 0, "6 and 4: one run");
        drop(g);
    }
    /// Under the RFC v1's batch locks, the LRU size is kept as the kernel kept it: no locked
    /// instruction and, for a removal holding only its batch lock, no shared line. The sizes
    /// still add up over both kinds of removal.
    #[test]
    fn batch_lock_removals_count_without_a_shared_atomic_and_the_sizes_add_up() {
        use std::sync::Arc;

        use super::super::batch_lock::{LRU_BATCH_MAX, PageTags};
        use pagelab_sync::trace::Kind;

        const N: u32 = 3 * LRU_BATCH_MAX;
        let pages = PageArray::new(N as usize);
        let tags = Arc::new(PageTags::new(N as usize));
        let lock = LruLock::new(
            LruRelease::BatchLocks,
            LockKind::Queued,
            1,
            false,
            Some(&tags),
            7,
            |_| None,
        );
        let lru = LruList::InactiveAnon;
        let len_line = lock.lock()[0].len_addr(lru);
        let size_events = |ev: &[trace::Event]| {
            let atomics = ev
                .iter()
                .filter(|e| e.class.name == "lru list" && e.kind == Kind::Atomic)
                .count();
            let stores = ev
                .iter()
                .filter(|e| {
                    e.class.name == "lru list"
                        && e.kind == Kind::Store { sym: Sym::Here }
                        && e.instance == len_line
                })
                .count();
            (atomics, stores)
        };
        trace::start(4096);
        {
            let g = lock.lock_for_add();
            for p in 0..N {
                g[0].add_front(&pages, lru, Pfn(p), StatCpu::Unbound);
            }
        }
        assert_eq!(
            size_events(&trace::stop()),
            (0, N as usize),
            "adds: plain stores"
        );
        let g = lock.lock();
        assert_eq!(g[0].len(lru), u64::from(N));
        // Full batches' inner pages are no sentinels; the pages at their edges are.
        let inner = (0..N)
            .find(|&p| !tags.is_sentinel(p))
            .expect("an inner page");
        let edge = (0..N).find(|&p| tags.is_sentinel(p)).expect("a sentinel");
        trace::start(64);
        g[0].del(&pages, lru, Pfn(inner), StatCpu::Unbound);
        assert_eq!(
            size_events(&trace::stop()),
            (0, 0),
            "a batch lock's own tally"
        );
        trace::start(64);
        g[0].del(&pages, lru, Pfn(edge), StatCpu::Unbound);
        assert_eq!(size_events(&trace::stop()), (0, 1), "under lru_lock");
        assert_eq!(g[0].len(lru), u64::from(N) - 2);
        assert_eq!(g[0].check_list(&pages, lru), Ok(u64::from(N) - 2));
        for p in 0..N {
            if p != inner && p != edge {
                g[0].del(&pages, lru, Pfn(p), StatCpu::Unbound);
            }
        }
        assert_eq!(g[0].len(lru), 0);
        assert_eq!(g[0].check_list(&pages, lru), Ok(0));
    }
}
