//! LRU batch locks: Daniel Jordan's `lru_lock` RFC **v1** (31 Jan 2018, "[RFC PATCH v1 00/13]
//! lru_lock scalability", patches 02-12), the kernel the `page_fault1-2018` table measured
//! (`release = "batch-locks"`). Not to be confused with the v2 of September 2018 (`rwlock_t`
//! `lru_lock` and `smp_list_del`, `release = "concurrent"`, [`super::smp_list`]).
//!
//! # What it models
//!
//! The LRU is cut into *batches* of consecutive pages, each tagged with one of
//! [`NUM_LRU_BATCH_LOCKS`] (32) cache-aligned spinlocks of the node (`pgdat->lru_batch_locks`,
//! patch 02). The pages at a batch's edges are *sentinels* (`page->lru_sentinel`); the pages
//! inside are not:
//!
//! * a page linked at the hot end (`__add_page_to_lru_list`, patch 05) takes the list head's
//!   current batch tag and is a sentinel; once [`LRU_BATCH_MAX`] (`PAGEVEC_SIZE`, 14) pages
//!   joined that batch, its inner pages lose the sentinel flag and the head draws a new random
//!   tag different from the old one. Links at the cold end mirror this with the head's tail
//!   batch. The adder holds only `lru_lock` (patch 09, the add-only `__pagevec_lru_add`);
//! * a non-sentinel page leaves the list under its batch lock alone: both its neighbours carry
//!   its tag, so whoever else could write their links holds the same lock. A sentinel needs its
//!   batch lock *and* `lru_lock` (its neighbour may be in another batch or be the list head,
//!   which adders write under `lru_lock`), and makes both neighbours sentinels as it leaves
//!   (patch 05's `__del_page_from_lru_list`);
//! * every other user of the lists (isolation, putback, reclaim walks, moves) takes
//!   `lru_lock_all`: the 32 batch locks and then `lru_lock` (patches 06-08);
//! * `release_pages` (patches 11-12) runs two passes, first the non-sentinel pages under batch
//!   locks only, then the sentinels, keeping a held lock across consecutive pages that need
//!   the same one ([`super::release`]).
//!
//! # The splice (patch 13, `add = "splice"`)
//!
//! Patch 13 sorts a pagevec into per-lruvec local lists outside the lock and splices each onto
//! the hot end with one `lru_lock` hold; the posted patch does not show how the spliced pages
//! get their tags. Our reading, closest to the rest of the series: a spliced run is one batch
//! of its own, with a fresh tag and sentinels at both of its ends; the batch the head was
//! building stays as it is (all of its pages are still sentinels, which is always safe) and
//! the head draws a fresh tag for later single-page adds.
//!
//! # Where the state lives
//!
//! `page->lru_batch` and `page->lru_sentinel` are one byte per page in [`PageTags`] (a side
//! table owned by the LRU, indexed by pfn), written under the locks above and read `Relaxed`:
//! the locks order them, except `release_pages`' first pass, which only uses the flag as a hint
//! and reads it again under the batch lock. The head's batch state ([`ListBatches`]) is per
//! list and protected by `lru_lock`.
//!
//! # Invariants ([`ListBatches::check`])
//!
//! The first and last pages of every list are sentinels, and so is each of two neighbours with
//! different tags; hence every non-sentinel page has two page neighbours with its own tag.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU8, AtomicU32};

use crossbeam_utils::CachePadded;
use pagelab_sync::{LockClass, LockKind, Scope, SpinGuard, SpinLock};

use super::LruList;
use super::smp_list::{List, LocalChain};
use crate::page::PageArray;

/// Batch locks per node (`NUM_LRU_BATCH_LOCKS`, patch 02).
pub const NUM_LRU_BATCH_LOCKS: usize = 32;
/// Pages per batch before its inner pages stop being sentinels (`LRU_BATCH_MAX` =
/// `PAGEVEC_SIZE`, patch 05).
pub const LRU_BATCH_MAX: u32 = 14;

/// `pgdat->lru_batch_locks[i].lock`: per node, one instance per array slot, so that a trace
/// replays each of the 32 locks as its own resource.
pub static LRU_BATCH_LOCK: LockClass = LockClass::new("lru_batch_lock", Scope::Node);

const SENTINEL: u8 = 0x80;
const TAG_MASK: u8 = 0x1f;
const _: () = assert!(NUM_LRU_BATCH_LOCKS <= TAG_MASK as usize + 1);

/// `page->lru_batch` and `page->lru_sentinel` of every page (patch 02 adds them to
/// `struct page`).
pub struct PageTags {
    words: Box<[AtomicU8]>,
    /// Under loom, one cell per page standing for its `lru` links: every link write of a list
    /// under batch locks is an access to the cells of the nodes it writes, so loom reports any
    /// two writes of one page's links that no lock orders (the links themselves are `std`
    /// atomics, which loom does not see).
    #[cfg(loom)]
    links: Box<[LinkCell]>,
}

/// A loom cell that holds nothing and only stands for some links' accesses ([`PageTags`]).
#[cfg(loom)]
#[derive(Debug)]
struct LinkCell(pagelab_sync::shim::cell::UnsafeCell<()>);

#[cfg(loom)]
impl LinkCell {
    fn new() -> Self {
        LinkCell(pagelab_sync::shim::cell::UnsafeCell::new(()))
    }

    /// A write access, as loom sees it.
    fn write(&self) {
        self.0.with_mut(|_| ());
    }
}

// SAFETY: the cell holds `()`: there is no data to race on. Its only access, `write`, passes a
// closure that never dereferences the pointer; loom tracks the access itself (which is the
// point: it reports accesses from two threads that nothing orders).
#[cfg(loom)]
unsafe impl Sync for LinkCell {}

impl std::fmt::Debug for PageTags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTags")
            .field("pages", &self.words.len())
            .finish()
    }
}

impl PageTags {
    pub fn new(nr_pages: usize) -> Self {
        PageTags {
            words: (0..nr_pages).map(|_| AtomicU8::new(0)).collect(),
            #[cfg(loom)]
            links: (0..nr_pages).map(|_| LinkCell::new()).collect(),
        }
    }

    /// The page's batch tag: the index of its batch lock.
    #[inline]
    pub fn tag(&self, id: u32) -> usize {
        usize::from(self.words[id as usize].load(Relaxed) & TAG_MASK)
    }

    #[inline]
    pub fn is_sentinel(&self, id: u32) -> bool {
        self.words[id as usize].load(Relaxed) & SENTINEL != 0
    }

    /// Tag a page just linked, and make it a sentinel.
    #[inline]
    fn assign(&self, id: u32, tag: u8, sentinel: bool) {
        let s = if sentinel { SENTINEL } else { 0 };
        self.words[id as usize].store(tag | s, Relaxed);
    }

    /// `page->lru_sentinel = true`: a plain store, as the kernel's. Every writer of a page's
    /// byte holds `lru_lock` (adders; and a sentinel's remover, the only remover that writes
    /// its neighbours'), so a load and a store lose no update; the batch lock's holders and
    /// `release_pages`' first pass only read it.
    #[inline]
    fn set_sentinel(&self, id: u32) {
        let w = &self.words[id as usize];
        w.store(w.load(Relaxed) | SENTINEL, Relaxed);
    }

    /// `page->lru_sentinel = false`, under `lru_lock` ([`Self::set_sentinel`]).
    #[inline]
    fn clear_sentinel(&self, id: u32) {
        let w = &self.words[id as usize];
        w.store(w.load(Relaxed) & !SENTINEL, Relaxed);
    }
}

/// One end's batch in progress (`first_batch_tag`/`first_batch_npages`, or the `last_` pair).
#[derive(Debug, Default)]
struct EndBatch {
    tag: AtomicU32,
    npages: AtomicU32,
}

/// The batch bookkeeping of one lruvec's lists (patch 04's `struct lru_list_head` fields),
/// written under `lru_lock`.
#[derive(Debug)]
pub struct ListBatches {
    tags: Arc<PageTags>,
    front: [EndBatch; LruList::COUNT],
    back: [EndBatch; LruList::COUNT],
    /// `prandom_u32_max`'s state: a xorshift32 per lruvec, under `lru_lock`.
    rng: AtomicU32,
    /// Under loom, each list head's links (see [`PageTags`]).
    #[cfg(loom)]
    heads: [LinkCell; LruList::COUNT],
}

impl ListBatches {
    /// `seed` tells lruvecs' random tag sequences apart (any value).
    pub fn new(tags: Arc<PageTags>, seed: u32) -> Self {
        let b = ListBatches {
            tags,
            front: Default::default(),
            back: Default::default(),
            rng: AtomicU32::new(seed.wrapping_mul(0x9E37_79B9) | 1),
            #[cfg(loom)]
            heads: std::array::from_fn(|_| LinkCell::new()),
        };
        for (i, e) in b.back.iter().enumerate() {
            // Start the two ends on different tags, as two draws usually would.
            e.tag
                .store((i as u32 * 7 + 16) % NUM_LRU_BATCH_LOCKS as u32, Relaxed);
        }
        b
    }

    pub fn tags(&self) -> &PageTags {
        &self.tags
    }

    /// Under loom, record a write of the links of `id` (`None`: the list head of `lru`), so
    /// that loom checks the locks order it against every other thread's; nothing otherwise.
    #[inline(always)]
    pub fn link_written(&self, lru: LruList, id: Option<u32>) {
        #[cfg(loom)]
        match id {
            Some(id) => self.tags.links[id as usize].write(),
            None => self.heads[lru.idx()].write(),
        }
        #[cfg(not(loom))]
        let _ = (lru, id);
    }

    /// A random tag other than `old` (`prandom_u32_max(NUM_LRU_BATCH_LOCKS)`, bumped on a
    /// collision with the batch just closed).
    fn fresh_tag(&self, old: u32) -> u32 {
        let mut x = self.rng.load(Relaxed);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng.store(x, Relaxed);
        let n = NUM_LRU_BATCH_LOCKS as u32;
        let t = ((u64::from(x) * u64::from(n)) >> 32) as u32;
        if t == old { (t + 1) % n } else { t }
    }

    /// `__add_page_to_lru_list` (`front`) or `__add_page_to_lru_list_tail`, after `id` was
    /// linked at that end of `list` under `lru_lock`.
    pub fn linked(&self, list: &List<'_, PageArray>, lru: LruList, id: u32, front: bool) {
        let end = if front {
            &self.front[lru.idx()]
        } else {
            &self.back[lru.idx()]
        };
        let tag = end.tag.load(Relaxed);
        self.tags.assign(id, tag as u8, true);
        let n = end.npages.load(Relaxed) + 1;
        if n < LRU_BATCH_MAX {
            end.npages.store(n, Relaxed);
            return;
        }
        // The batch is full: its inner pages stop being sentinels. Every page of a batch in
        // progress is a sentinel, so only sentinels' links are read here, and those only
        // change under `lru_lock`, held (a remover of a non-sentinel neighbour rewrites the
        // link, but to another page of this tag, whose flag then ends the walk).
        let step = |p: u32| {
            if front {
                list.next_of(p)
            } else {
                list.prev_of(p)
            }
        };
        let t = tag as usize;
        if let Some(mut cur) = step(id).filter(|&s| self.tags.tag(s) == t) {
            for _ in 0..LRU_BATCH_MAX {
                match step(cur) {
                    Some(nx) if self.tags.tag(nx) == t && self.tags.is_sentinel(nx) => {
                        self.tags.clear_sentinel(cur);
                        cur = nx;
                    }
                    _ => break,
                }
            }
        }
        end.tag.store(self.fresh_tag(tag), Relaxed);
        end.npages.store(0, Relaxed);
    }

    /// After `chain` was spliced onto the hot (`front`) or cold end of `list` under
    /// `lru_lock`: the chain becomes one batch with a fresh tag and sentinels at its ends, and
    /// that end starts a fresh batch (see the module documentation: our reading of patch 13).
    pub fn spliced(
        &self,
        list: &List<'_, PageArray>,
        lru: LruList,
        chain: &LocalChain,
        front: bool,
    ) {
        if chain.is_empty() {
            return;
        }
        let end = if front {
            &self.front[lru.idx()]
        } else {
            &self.back[lru.idx()]
        };
        let old = end.tag.load(Relaxed);
        let tag = self.fresh_tag(old);
        let len = chain.len();
        let mut cur = chain.first();
        for i in 0..len {
            self.tags.assign(cur, tag as u8, i == 0 || i + 1 == len);
            if i + 1 < len {
                cur = list.next_of(cur).expect("a spliced chain is contiguous");
            }
        }
        let mut next = self.fresh_tag(tag);
        if next == old {
            next = self.fresh_tag(tag);
        }
        end.tag.store(next, Relaxed);
        end.npages.store(0, Relaxed);
    }

    /// `__del_page_from_lru_list`, before `id` is unlinked: a sentinel hands its role to both
    /// neighbours. The caller holds `id`'s batch lock, and `lru_lock` too if `id` is a
    /// sentinel.
    pub fn unlinking(&self, list: &List<'_, PageArray>, id: u32) {
        if !self.tags.is_sentinel(id) {
            return;
        }
        if let Some(p) = list.prev_of(id) {
            self.tags.set_sentinel(p);
        }
        if let Some(n) = list.next_of(id) {
            self.tags.set_sentinel(n);
        }
    }

    /// Check the sentinel invariant of `list` (module documentation); the caller holds the
    /// lock exclusively.
    pub fn check(&self, list: &List<'_, PageArray>, len: u64) -> Result<(), String> {
        let t = &self.tags;
        for id in list.iter(len as usize) {
            let prev = list.prev_of(id);
            let next = list.next_of(id);
            if t.is_sentinel(id) {
                continue;
            }
            for (side, nb) in [("first", prev), ("last", next)] {
                match nb {
                    None => return Err(format!("pfn {id} is {side} on its list but no sentinel")),
                    Some(nb) if t.tag(nb) != t.tag(id) => {
                        return Err(format!(
                            "pfn {id} (batch {}) is no sentinel but its neighbour pfn {nb} is \
                             in batch {}",
                            t.tag(id),
                            t.tag(nb)
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// `pgdat->lru_lock` and its `lru_batch_locks` array, with the lruvecs they protect. The
/// lruvecs sit outside both locks because no single lock covers all of their writers.
pub struct BatchedLruLock {
    lru_lock: CachePadded<SpinLock<()>>,
    batch_locks: Box<[CachePadded<SpinLock<()>>]>,
    lruvecs: Box<[super::lruvec::Lruvec]>,
}

impl BatchedLruLock {
    pub fn new(
        kind: LockKind,
        class: &'static LockClass,
        lruvecs: Box<[super::lruvec::Lruvec]>,
    ) -> Self {
        BatchedLruLock {
            lru_lock: CachePadded::new(SpinLock::new(kind, ()).with_class(class)),
            batch_locks: (0..NUM_LRU_BATCH_LOCKS)
                .map(|_| CachePadded::new(SpinLock::new(kind, ()).with_class(&LRU_BATCH_LOCK)))
                .collect(),
            lruvecs,
        }
    }

    /// The lruvecs; the caller must hold the locks their operation needs (module
    /// documentation).
    #[inline]
    pub fn lruvecs(&self) -> &[super::lruvec::Lruvec] {
        &self.lruvecs
    }

    /// `spin_lock(&pgdat->lru_lock)` alone: what adds take.
    #[inline]
    pub fn lru_lock(&self) -> SpinGuard<'_, ()> {
        self.lru_lock.lock()
    }

    /// The batch lock of `tag` (`page_lru_batch_lock`).
    #[inline]
    pub fn batch_lock(&self, tag: usize) -> SpinGuard<'_, ()> {
        self.batch_locks[tag].lock()
    }

    /// `lru_lock_all`: every batch lock in order, then `lru_lock`.
    pub fn lock_all(&self) -> (Vec<SpinGuard<'_, ()>>, SpinGuard<'_, ()>) {
        let batch = self.batch_locks.iter().map(|l| l.lock()).collect();
        (batch, self.lru_lock.lock())
    }
}
