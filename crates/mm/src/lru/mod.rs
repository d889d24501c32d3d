//! The LRU lists: which pages the kernel considers for reclaim, and the `lru_lock` that guards
//! them, one of the most argued-over scalability points of mm (Daniel Jordan's 2018
//! `lru_lock` work, Alex Shi's per-memcg `lru_lock` in 5.11, Kairui Song's MGLRU bulk moves).
//!
//! # What it models
//!
//! * [`Lru::add`]: mm/swap.c `folio_add_lru`, by the policy's add strategy: one lock hold per
//!   page, a per-CPU `folio_batch` flushed by `folio_batch_move_lru`, or Daniel Jordan's splice
//!   of per-lruvec local lists ([`batch`]); [`Lru::drain`]/[`Lru::drain_all`]: `lru_add_drain`
//!   and `lru_add_drain_all`.
//! * [`Lru::release_pages`]/[`Lru::put_page`]: `release_pages`/`folios_put`, with the unlink
//!   under an exclusive hold, under the lru_lock RFC v1's batch locks (Jan 2018,
//!   [`batch_lock`]), or, per the RFC v2 (Sept 2018), concurrently under a shared hold with
//!   `smp_list_del` ([`release`], [`smp_list`]).
//! * [`Lru::isolate`]/[`Lru::putback`]: mm/vmscan.c `folio_isolate_lru`, `move_folios_to_lru`
//!   ([`isolate`]).
//! * [`Lru::with_lruvec`]: what reclaim needs to walk and move pages under an lruvec's lock,
//!   without committing to a reclaim policy ([`LruvecMut`]).
//! * `struct lruvec` (per memcg and node) and the scope of its lock ([`lruvec`]).
//! * MGLRU's generation lists, sequence numbers, tiers and moves ([`mglru`]), when the policy
//!   turns it on: the same lruvecs and locks, with a page's list named by its `PG_list_gen`.
//!
//! A page's lruvec is (node = [`Mem::zone_of`], memcg = `page.memcg`); its list is
//! [`LruList::of`] its flags (anon if `PG_swapbacked`, active if `PG_active`), so a new page
//! (no `PG_active`) joins the inactive list of its type. Only order-0 pages are modelled.
//!
//! # Locks and their order
//!
//! | lock | protects |
//! |---|---|
//! | per-CPU batch `SpinLock` | that CPU's batch: its pages and their count |
//! | `lru_lock` ([`lruvec::LruLock`], scope per policy) | the lists' links and heads, the list counters, `PG_active`/`PG_swapbacked` of its `PG_lru` pages |
//! | under `release = "batch-locks"`: 32 `lru_batch_lock`s per lru_lock ([`batch_lock`]) | with lru_lock, the links of the pages of the batches tagged with it; alone, those of a batch's inner pages |
//!
//! Order: per-CPU batch lock → the RFC v1's `lru_batch_lock`s (in index order) → lru_lock → the
//! allocator's locks (pcp, zone). At most one lru_lock is
//! held at a time; none is held while a batch lock is taken, so remote drains cannot deadlock
//! with owners. `PG_lru` and the reference count are lockless: `PG_lru` is test-and-cleared by
//! isolators and set by whoever links a page (under the lock, or after the splice's unlock);
//! the count pins pages in batches and isolated pages.
//!
//! Callers must keep `PG_active` and `PG_swapbacked` fixed and `page.memcg` unchanged while a
//! page is on an LRU list or in a batch (the kernel changes them only under the lruvec lock or
//! on isolated pages), and may only give `add` a page they hold a reference to that is on no
//! LRU and in no batch.
//!
//! # Invariants ([`Lru::check`], at quiescence)
//!
//! Every page with `PG_lru` is on exactly one list: the one its flags say, of the lruvec its
//! node and memcg say, and has a nonzero reference count; every list is well formed and as
//! long as its counter; no page is on two lists; pages in per-CPU batches are not `PG_lru`,
//! are on no list and in no other batch, and hold a reference.

pub mod batch;
pub mod batch_lock;
pub mod isolate;
pub mod lruvec;
pub mod mglru;
pub mod release;
pub mod size_stats;
pub mod smp_list;
pub mod stats;

use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Relaxed, Release};

use pagelab_sync::{LockKind, LockStatsSnapshot, SpinLock};

use crate::alloc::Mem;
use crate::cpu::{CpuId, PerCpu};
use crate::page::{PageArray, Pfn, pg};
use crate::policy::{LruAdd, LruLockScope, LruPolicy, LruRelease};
use batch::{Batch, MAX_BATCH};
use lruvec::{LruLock, Lruvec};
use size_stats::{LruSizeStats, LruvecStat, StatCpu};
use stats::LruEvents;
pub use stats::{LruEvent, LruStats};

/// The per-CPU LRU add batch (`cpu_fbatches.lru_add`; a local lock in the kernel).
pub static LRU_BATCH: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru add batch", pagelab_sync::Scope::Cpu);

/// The LRU lists of an lruvec: the classic four (`enum lru_list`, without the unevictable
/// list) and, when MGLRU is on, `lrugen->folios[gen][type]` for the four generations (one zone
/// per node here, so no zone index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LruList {
    InactiveAnon = 0,
    ActiveAnon = 1,
    InactiveFile = 2,
    ActiveFile = 3,
    Gen0Anon = 4,
    Gen0File = 5,
    Gen1Anon = 6,
    Gen1File = 7,
    Gen2Anon = 8,
    Gen2File = 9,
    Gen3Anon = 10,
    Gen3File = 11,
}

impl LruList {
    pub const COUNT: usize = 12;
    pub const ALL: [LruList; 12] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
        LruList::Gen0Anon,
        LruList::Gen0File,
        LruList::Gen1Anon,
        LruList::Gen1File,
        LruList::Gen2Anon,
        LruList::Gen2File,
        LruList::Gen3Anon,
        LruList::Gen3File,
    ];
    /// The classic lists.
    pub const CLASSIC: [LruList; 4] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
    ];

    /// `folio_lru_list`, or the generation list for a page in a generation: the list a page
    /// with these flags is on.
    #[inline]
    pub fn of(flags: u64) -> LruList {
        let list_gen = (flags & pg::LIST_GEN_MASK) >> pg::LIST_GEN_SHIFT;
        if list_gen != 0 {
            return LruList::generation(list_gen as usize - 1, flags & pg::SWAPBACKED == 0);
        }
        match (flags & pg::SWAPBACKED != 0, flags & pg::ACTIVE != 0) {
            (true, false) => LruList::InactiveAnon,
            (true, true) => LruList::ActiveAnon,
            (false, false) => LruList::InactiveFile,
            (false, true) => LruList::ActiveFile,
        }
    }

    /// Generation `g`'s list of anon (`file == false`) or file pages.
    #[inline]
    pub fn generation(g: usize, file: bool) -> LruList {
        debug_assert!(g < 4);
        LruList::ALL[4 + g * 2 + usize::from(file)]
    }

    /// The generation of a generation list.
    #[inline]
    pub fn gen_of(self) -> Option<usize> {
        (self.idx() >= 4).then(|| (self.idx() - 4) / 2)
    }

    #[inline]
    pub fn is_active(self) -> bool {
        matches!(self, LruList::ActiveAnon | LruList::ActiveFile)
    }

    #[inline]
    pub fn is_file(self) -> bool {
        match self.gen_of() {
            Some(_) => (self.idx() - 4) % 2 == 1,
            None => matches!(self, LruList::InactiveFile | LruList::ActiveFile),
        }
    }

    #[inline]
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// Where a page's lruvec lives: which lock, and which of the lruvecs it protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub lock: usize,
    pub slot: usize,
}

/// Pages on the LRU by list and lruvec, and pages waiting in per-CPU batches, from
/// [`Lru::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LruCensus {
    /// Pages per list, summed over lruvecs.
    pub lists: [u64; LruList::COUNT],
    /// Pages per list of each lruvec, indexed `node * nr_memcgs + memcg`.
    pub lruvecs: Vec<[u64; LruList::COUNT]>,
    /// Pages in per-CPU add batches.
    pub batched: u64,
    /// Pages on lists that are batch sentinels (`release = "batch-locks"`; else 0).
    pub sentinels: u64,
    nr_memcgs: usize,
}

impl LruCensus {
    /// Pages on any list.
    pub fn on_lru(&self) -> u64 {
        self.lists.iter().sum()
    }

    pub fn list(&self, lru: LruList) -> u64 {
        self.lists[lru.idx()]
    }

    /// The pages per list of the lruvec of (`node`, `memcg`).
    pub fn lruvec(&self, node: usize, memcg: usize) -> [u64; LruList::COUNT] {
        self.lruvecs[node * self.nr_memcgs + memcg]
    }
}

/// (node, memcg) of the lruvec at `slot` of lock `lock`, under lock scope `scope`.
fn lruvec_at(scope: LruLockScope, nr_memcgs: usize, lock: usize, slot: usize) -> (usize, usize) {
    let idx = match scope {
        LruLockScope::Global => slot,
        LruLockScope::Node => lock * nr_memcgs + slot,
        LruLockScope::MemcgNode => lock,
    };
    (idx / nr_memcgs, idx % nr_memcgs)
}

/// `folio_set_lru` under `lru_lock`: a locked `or` on the page's own flags. On x86 it executes
/// only once the stores before it (the links and the size the add just stored) have their
/// lines, which the trace records as a fence ([`pagelab_sync::trace::fence`]).
#[inline]
fn set_lru(page: &crate::page::Page) {
    page.flags.fetch_or(pg::LRU, Release);
    pagelab_sync::trace::fence();
}

/// The engine's LRU: every lruvec, their locks, the per-CPU add batches and the counters.
pub struct Lru {
    mem: Arc<Mem>,
    add_mode: LruAdd,
    release_mode: LruRelease,
    /// When a release frees its pages ([`crate::policy::ReleaseFree`]).
    release_free: crate::policy::ReleaseFree,
    scope: LruLockScope,
    batch_size: usize,
    /// `lru.add_clears_unevictable`: the add's locked test-and-clear of `PG_unevictable`.
    add_clears_unevictable: bool,
    /// MGLRU's move policy when MGLRU replaces the classic lists.
    mglru: Option<crate::policy::MglruMove>,
    /// Per lruvec (indexed `node * nr_memcgs + memcg`), MGLRU's sequence numbers and refault
    /// feedback (`struct lru_gen_folio`): atomics outside the lru_lock, because refaults and
    /// evictions update them without it.
    lrugens: Box<[mglru::LruGen]>,
    nr_nodes: usize,
    nr_memcgs: usize,
    locks: Box<[LruLock]>,
    /// The pages' batch tags and sentinel flags, under `release = "batch-locks"`.
    tags: Option<Arc<batch_lock::PageTags>>,
    batches: PerCpu<SpinLock<Batch>>,
    events: LruEvents,
    /// The node's, zone's and memcg's statistics of the lists' sizes ([`size_stats`]).
    size_stats: Arc<LruSizeStats>,
    /// A loom-visible operation run before each lockless page-metadata step; see
    /// [`Lru::sched_point`].
    #[cfg(loom)]
    loom_point: pagelab_sync::shim::atomic::AtomicU32,
}

impl Lru {
    /// Build the lruvecs of `nr_memcgs` memcgs on every node of `mem` (a node per zone), their
    /// lru_locks as `policy.lock_scope` says (spinlocks of kind `spinlock`, with 32 batch locks
    /// each under `release = "batch-locks"`, or rwsems under `release = "concurrent"`), and one
    /// add batch per CPU.
    pub fn new(mem: Arc<Mem>, policy: &LruPolicy, spinlock: LockKind, nr_memcgs: usize) -> Lru {
        assert!(nr_memcgs >= 1, "the LRU needs at least the root memcg");
        assert!(
            (1..=MAX_BATCH).contains(&(policy.batch as usize)),
            "lru.batch ({}) must be between 1 and {MAX_BATCH}",
            policy.batch
        );
        assert!(
            (mem.pages().len() as u64) < u64::from(smp_list::BUSY),
            "pfns collide with the list's reserved link values"
        );
        let nr_nodes = mem.zones().len();
        let nr_lruvecs = nr_nodes * nr_memcgs;
        let (nr_locks, per_lock) = match policy.lock_scope {
            LruLockScope::Global => (1, nr_lruvecs),
            LruLockScope::Node => (nr_nodes, nr_memcgs),
            LruLockScope::MemcgNode => (nr_lruvecs, 1),
        };
        let tags = (policy.release == LruRelease::BatchLocks)
            .then(|| Arc::new(batch_lock::PageTags::new(mem.pages().len())));
        let nr_cpus = mem.nr_cpus();
        let managed = mem.tunables_node_pages();
        let stats = Arc::new(LruSizeStats::new(
            policy.size_stats,
            nr_nodes,
            nr_memcgs,
            nr_cpus,
            managed,
        ));
        let locks = (0..nr_locks)
            .map(|i| {
                LruLock::new(
                    policy.release,
                    spinlock,
                    per_lock,
                    policy.lock_scope == LruLockScope::Global,
                    tags.as_ref(),
                    i as u32,
                    |slot| {
                        let (node, memcg) = lruvec_at(policy.lock_scope, nr_memcgs, i, slot);
                        let batches = if policy.release == LruRelease::BatchLocks {
                            batch_lock::NUM_LRU_BATCH_LOCKS
                        } else {
                            0
                        };
                        let concurrent = policy.release == LruRelease::Concurrent;
                        LruvecStat::new(&stats, node, memcg, nr_cpus, batches, concurrent)
                    },
                )
            })
            .collect();
        Lru {
            add_mode: policy.add,
            release_mode: policy.release,
            release_free: policy.release_free,
            scope: policy.lock_scope,
            batch_size: policy.batch as usize,
            add_clears_unevictable: policy.add_clears_unevictable,
            mglru: policy.mglru.then_some(policy.mglru_move),
            lrugens: (0..nr_lruvecs).map(|_| mglru::LruGen::default()).collect(),
            nr_nodes,
            nr_memcgs,
            locks,
            tags,
            batches: PerCpu::new(nr_cpus, |_| {
                SpinLock::new(spinlock, Batch::new()).with_class(&LRU_BATCH)
            }),
            events: LruEvents::new(nr_cpus),
            size_stats: stats,
            #[cfg(loom)]
            loom_point: pagelab_sync::shim::atomic::AtomicU32::new(0),
            mem,
        }
    }

    pub fn mem(&self) -> &Arc<Mem> {
        &self.mem
    }

    /// The node's, zone's and memcg's statistics of the lists' sizes.
    pub fn size_stats(&self) -> &LruSizeStats {
        &self.size_stats
    }

    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes
    }

    pub fn nr_memcgs(&self) -> usize {
        self.nr_memcgs
    }

    /// MGLRU's move policy, if MGLRU is on.
    pub fn mglru(&self) -> Option<crate::policy::MglruMove> {
        self.mglru
    }

    /// Number of distinct lru_locks (1, nodes, or lruvecs, by scope).
    pub fn nr_locks(&self) -> usize {
        self.locks.len()
    }

    /// Under loom, one read-modify-write of a loom atomic shared by every thread, right before
    /// a lockless page-metadata step (a `PG_lru` or reference-count operation on `std` atomics,
    /// which loom does not see). Being a write, it makes any two such steps of different
    /// threads dependent, so loom's partial-order reduction explores both of their orders and
    /// may switch threads right before each (a load would be independent of other loads and
    /// explore nothing). Compiles to nothing otherwise.
    #[inline(always)]
    fn sched_point(&self) {
        #[cfg(loom)]
        self.loom_point.fetch_add(1, Relaxed);
    }

    #[inline]
    fn loc_of(&self, node: usize, memcg: usize) -> Loc {
        assert!(
            node < self.nr_nodes && memcg < self.nr_memcgs,
            "no lruvec for node {node} memcg {memcg} ({} nodes, {} memcgs)",
            self.nr_nodes,
            self.nr_memcgs
        );
        let idx = node * self.nr_memcgs + memcg;
        match self.scope {
            LruLockScope::Global => Loc { lock: 0, slot: idx },
            LruLockScope::Node => Loc {
                lock: node,
                slot: memcg,
            },
            LruLockScope::MemcgNode => Loc { lock: idx, slot: 0 },
        }
    }

    /// `folio_lruvec`: the lock and lruvec of a page.
    #[inline]
    fn locate(&self, pfn: Pfn) -> Loc {
        let node = self.mem.zone_of(pfn);
        let memcg = self.mem.pages()[pfn].memcg.load(Relaxed) as usize;
        self.loc_of(node, memcg)
    }

    /// The index (`node * nr_memcgs + memcg`) of the lruvec at `slot` of lock `lock`.
    #[inline]
    fn lruvec_index(&self, lock: usize, slot: usize) -> usize {
        let (node, memcg) = self.lruvec_of(lock, slot);
        node * self.nr_memcgs + memcg
    }

    /// MGLRU state of the lruvec of (`node`, `memcg`), readable without its lock.
    pub fn lrugen(&self, node: usize, memcg: usize) -> &mglru::LruGen {
        &self.lrugens[node * self.nr_memcgs + memcg]
    }

    /// (node, memcg) of the lruvec at `slot` of lock `lock`.
    fn lruvec_of(&self, lock: usize, slot: usize) -> (usize, usize) {
        lruvec_at(self.scope, self.nr_memcgs, lock, slot)
    }

    /// `folio_add_lru`: a page the caller holds a reference to joins the list its flags say
    /// (the inactive list of its type for a new page), through the policy's add strategy.
    /// Batched pages hold a reference of the batch's until their flush.
    pub fn add(&self, cpu: CpuId, pfn: Pfn) {
        let page = &self.mem.pages()[pfn];
        debug_assert!(
            page.refcount.load(Relaxed) >= 1,
            "add of {pfn:?} without a reference"
        );
        debug_assert!(!page.test(pg::LRU), "add of {pfn:?}, already on an LRU");
        debug_assert!(
            (page.memcg.load(Relaxed) as usize) < self.nr_memcgs,
            "add of {pfn:?} charged to memcg {} of {}",
            page.memcg.load(Relaxed),
            self.nr_memcgs
        );
        self.events.count(cpu, LruEvent::Add, 1);
        if self.mglru.is_some() {
            // `lru_gen_in_fault`: the engine adds pages only from faults, and MGLRU puts a
            // faulted page in the youngest generation.
            page.set(pg::ACTIVE);
        }
        match self.add_mode {
            LruAdd::PerPage => self.add_direct(cpu, pfn),
            LruAdd::Batch | LruAdd::Splice => self.add_batched(cpu, pfn),
        }
    }

    /// One lock hold for one page: link it, then set `PG_lru` (under the lock).
    fn add_direct(&self, cpu: CpuId, pfn: Pfn) {
        let pages = self.mem.pages();
        let page = &pages[pfn];
        let Loc { lock, slot } = self.locate(pfn);
        let guard = self.locks[lock].lock_for_add();
        if self.mglru.is_some() {
            self.lrugens[self.lruvec_index(lock, slot)].prepare_link(page);
        }
        self.clear_unevictable(page);
        guard[slot].add_front(pages, LruList::of(page.flags()), pfn, StatCpu::Cpu(cpu));
        set_lru(page);
        drop(guard);
        self.events.count(cpu, LruEvent::AddDirect, 1);
    }

    /// `folio_test_clear_unevictable` in `lru_add` (4.16+, where the policy says so): a locked
    /// test-and-clear of the page's flags inside the add's hold (after the splice's holds, in
    /// Daniel Jordan's splice, where `PG_lru` is set). The engine has no mlock, so
    /// the flag is never set; the instruction and its cost are the kernel's.
    #[inline]
    fn clear_unevictable(&self, page: &crate::page::Page) {
        if self.add_clears_unevictable {
            page.flags.fetch_and(!pg::UNEVICTABLE, AcqRel);
            pagelab_sync::trace::fence();
        }
    }

    /// Run `f` with the lruvec of (`node`, `memcg`) locked exclusively: what a reclaim module
    /// uses to walk the lists, isolate, rotate and activate pages. `f` must not call back into
    /// this `Lru` (its lock is held) nor free pages.
    pub fn with_lruvec<R>(
        &self,
        node: usize,
        memcg: usize,
        f: impl FnOnce(&mut LruvecMut<'_>) -> R,
    ) -> R {
        let Loc { lock, slot } = self.loc_of(node, memcg);
        let guard = self.locks[lock].lock();
        let mut view = LruvecMut {
            lruvec: &guard[slot],
            lru: self,
            lrugen: &self.lrugens[node * self.nr_memcgs + memcg],
            pages: self.mem.pages(),
            node,
            memcg,
        };
        f(&mut view)
    }

    /// Lock statistics of the lru_lock classes (both sides of an rwsem), summed over
    /// instances, in this machine's stats domain.
    pub fn lock_stats(&self) -> LockStatsSnapshot {
        let d = self.mem.lock_stat_domain();
        d.class(&lruvec::LRU_LOCK_GLOBAL).total() + d.class(&lruvec::LRU_LOCK_NODE).total()
    }

    /// Summed event counters.
    pub fn stats(&self) -> LruStats {
        self.events.snapshot()
    }

    /// Zero the lock statistics and the event counters.
    pub fn reset_stats(&self) {
        let d = self.mem.lock_stat_domain();
        d.reset_class(&lruvec::LRU_LOCK_GLOBAL);
        d.reset_class(&lruvec::LRU_LOCK_NODE);
        d.reset_class(&batch_lock::LRU_BATCH_LOCK);
        self.events.reset();
    }

    /// Pages on `list`, summed over lruvecs. Takes each lru_lock briefly (a reporting call).
    pub fn nr_pages(&self, list: LruList) -> u64 {
        self.locks
            .iter()
            .map(|l| l.lock().iter().map(|v| v.len(list)).sum::<u64>())
            .sum()
    }

    /// Check every invariant (module documentation) and count pages. Call only while nothing
    /// else uses this `Lru`. Returns a description of the first violation found.
    pub fn check(&self) -> Result<LruCensus, String> {
        let pages = self.mem.pages();
        let n = pages.len();
        // 0: nowhere, 1: on a list, 2: in a batch.
        let mut seen = vec![0u8; n];
        let mut census = LruCensus {
            lruvecs: vec![[0; LruList::COUNT]; self.nr_nodes * self.nr_memcgs],
            nr_memcgs: self.nr_memcgs,
            ..LruCensus::default()
        };
        // Each lruvec's statistics, read under its lock with its lists.
        let mut diff_totals = Vec::new();
        for (li, lock) in self.locks.iter().enumerate() {
            let guard = lock.lock();
            for (slot, lv) in guard.iter().enumerate() {
                diff_totals.extend(lv.stat().map(|s| s.diffs().totals()));
                let (node, memcg) = self.lruvec_of(li, slot);
                let here = |e: String| format!("lruvec (node {node}, memcg {memcg}): {e}");
                for lru in LruList::ALL {
                    let len = lv.check_list(pages, lru).map_err(here)?;
                    if len > 0 {
                        match (lru.gen_of(), self.mglru.is_some()) {
                            (None, true) | (Some(_), false) => {
                                return Err(here(format!(
                                    "{len} pages on {lru:?}, a list this LRU does not use"
                                )));
                            }
                            (Some(g), true) => {
                                let lg = &self.lrugens[node * self.nr_memcgs + memcg];
                                if lg.seq_of_gen(lru.is_file(), g).is_none() {
                                    return Err(here(format!(
                                        "{len} pages on {lru:?}, outside generations {}..={}",
                                        lg.min_seq(lru.is_file()),
                                        lg.max_seq()
                                    )));
                                }
                            }
                            (None, false) => {}
                        }
                    }
                    for pfn in lv.pages(pages, lru) {
                        let p = &pages[pfn];
                        if seen[pfn.idx()] != 0 {
                            return Err(here(format!("{pfn:?} is on two lists")));
                        }
                        seen[pfn.idx()] = 1;
                        let flags = p.flags();
                        let rc = p.refcount.load(Relaxed);
                        if flags & pg::LRU == 0 {
                            return Err(here(format!("{pfn:?} on {lru:?} has no PG_lru")));
                        }
                        if LruList::of(flags) != lru {
                            return Err(here(format!(
                                "{pfn:?} on {lru:?} has flags {flags:#x} of {:?}",
                                LruList::of(flags)
                            )));
                        }
                        if self.mem.zone_of(pfn) != node {
                            return Err(here(format!(
                                "{pfn:?} belongs to node {}",
                                self.mem.zone_of(pfn)
                            )));
                        }
                        if p.memcg.load(Relaxed) as usize != memcg {
                            return Err(here(format!(
                                "{pfn:?} belongs to memcg {}",
                                p.memcg.load(Relaxed)
                            )));
                        }
                        if rc < 1 {
                            return Err(here(format!("{pfn:?} on {lru:?} has refcount {rc}")));
                        }
                        if lv.batches().is_some_and(|b| b.tags().is_sentinel(pfn.0)) {
                            census.sentinels += 1;
                        }
                    }
                    census.lists[lru.idx()] += len;
                    census.lruvecs[node * self.nr_memcgs + memcg][lru.idx()] += len;
                }
            }
        }
        for (cpu, batch) in self.batches.iter() {
            let batch = batch.lock();
            for &pfn in batch.pages() {
                let p = &pages[pfn];
                let rc = p.refcount.load(Relaxed);
                match seen[pfn.idx()] {
                    1 => return Err(format!("{pfn:?} is in cpu {}'s batch and on a list", cpu.0)),
                    2 => return Err(format!("{pfn:?} is in two batches (cpu {})", cpu.0)),
                    _ => {}
                }
                seen[pfn.idx()] = 2;
                if p.test(pg::LRU) {
                    return Err(format!("{pfn:?} in cpu {}'s batch has PG_lru", cpu.0));
                }
                if rc < 1 {
                    return Err(format!(
                        "{pfn:?} in cpu {}'s batch has refcount {rc}",
                        cpu.0
                    ));
                }
            }
            census.batched += batch.len() as u64;
        }
        for (i, s) in seen.iter().enumerate() {
            let pfn = Pfn(i as u32);
            if *s == 0 && pages[pfn].test(pg::LRU) {
                return Err(format!("{pfn:?} has PG_lru but is on no list"));
            }
        }
        self.size_stats.check(&diff_totals, &census.lruvecs)?;
        Ok(census)
    }
}

/// An lruvec locked exclusively, from [`Lru::with_lruvec`]: the operations reclaim builds on.
/// Unlike [`Lru`]'s own entry points these maintain only the lists and their counters (and
/// `PG_active` where they move pages between active and inactive); `PG_lru` and references
/// are the caller's, except in [`LruvecMut::isolate`], which does the scanners' whole step.
pub struct LruvecMut<'a> {
    lruvec: &'a Lruvec,
    /// The LRU the lruvec belongs to (for its loom scheduling points).
    lru: &'a Lru,
    lrugen: &'a mglru::LruGen,
    pages: &'a PageArray,
    node: usize,
    memcg: usize,
}

impl LruvecMut<'_> {
    pub fn node(&self) -> usize {
        self.node
    }

    pub fn memcg(&self) -> usize {
        self.memcg
    }

    /// Pages on `lru`.
    pub fn len(&self, lru: LruList) -> u64 {
        self.lruvec.len(lru)
    }

    pub fn is_empty(&self) -> bool {
        self.lruvec.is_empty()
    }

    /// Hot end of `lru`.
    pub fn first(&self, lru: LruList) -> Option<Pfn> {
        self.lruvec.first(self.pages, lru)
    }

    /// Cold end of `lru` (where reclaim scans from).
    pub fn last(&self, lru: LruList) -> Option<Pfn> {
        self.lruvec.last(self.pages, lru)
    }

    /// The page after `pfn` towards the cold end.
    pub fn next(&self, lru: LruList, pfn: Pfn) -> Option<Pfn> {
        self.lruvec.next(self.pages, lru, pfn)
    }

    /// The page before `pfn` towards the hot end.
    pub fn prev(&self, lru: LruList, pfn: Pfn) -> Option<Pfn> {
        self.lruvec.prev(self.pages, lru, pfn)
    }

    /// The pages of `lru`, hot end first.
    pub fn pages(&self, lru: LruList) -> impl Iterator<Item = Pfn> + '_ {
        self.lruvec.pages(self.pages, lru)
    }

    /// The pages of `lru`, cold end first.
    pub fn pages_rev(&self, lru: LruList) -> impl Iterator<Item = Pfn> + '_ {
        self.lruvec.pages_rev(self.pages, lru)
    }

    /// Unlink `pfn` from `lru` (`lruvec_del_folio`), leaving its flags alone.
    pub fn del(&mut self, lru: LruList, pfn: Pfn) {
        self.lruvec.del(self.pages, lru, pfn, StatCpu::Unbound);
    }

    /// Link `pfn` at the hot (`hot`) or cold end of `lru`, leaving its flags alone.
    pub fn add(&mut self, lru: LruList, pfn: Pfn, hot: bool) {
        if hot {
            self.lruvec
                .add_front(self.pages, lru, pfn, StatCpu::Unbound);
        } else {
            self.lruvec.add_back(self.pages, lru, pfn, StatCpu::Unbound);
        }
    }

    /// Move a page of this lruvec that has `PG_lru` to `to` (hot or cold end), setting or
    /// clearing `PG_active` to match: activation (`folio_activate`), deactivation, rotation
    /// (`to` = its own list). Anon pages stay anon and file pages file.
    pub fn move_page(&mut self, pfn: Pfn, to: LruList, hot: bool) {
        let page = &self.pages[pfn];
        debug_assert!(page.test(pg::LRU), "move of {pfn:?}, which is not PG_lru");
        let from = LruList::of(page.flags());
        assert_eq!(
            from.is_file(),
            to.is_file(),
            "{pfn:?} cannot move between anon and file lists"
        );
        self.lruvec.del(self.pages, from, pfn, StatCpu::Unbound);
        // `SetPageActive` / `ClearPageActive`: locked, after the unlink's stores.
        if to.is_active() {
            page.set(pg::ACTIVE);
        } else {
            page.clear(pg::ACTIVE);
        }
        pagelab_sync::trace::fence();
        self.add(to, pfn, hot);
    }

    /// The scanners' isolation step (`isolate_lru_folios` for one page): take a speculative
    /// reference, win `PG_lru`, unlink. Returns `false`, leaving everything as it was, if the
    /// page is being freed or someone else owns its `PG_lru` (an isolator, or a splice still
    /// publishing it). On success the page holds the isolation reference; after the unlock,
    /// hand it to [`Lru::putback`] or drop the reference with [`Lru::put_page`].
    pub fn isolate(&mut self, pfn: Pfn) -> bool {
        let page = &self.pages[pfn];
        let rc = &page.refcount;
        self.lru.sched_point();
        let mut cur = rc.load(Relaxed);
        loop {
            if cur <= 0 {
                return false;
            }
            match rc.compare_exchange_weak(cur, cur + 1, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        // A locked exchange on the page's own line inside the hold (then the flag's): the
        // stores of the previous page's unlink wait for their lines before it.
        pagelab_sync::trace::fence();
        self.lru.sched_point();
        if page.flags.fetch_and(!pg::LRU, AcqRel) & pg::LRU == 0 {
            // Whoever owns the token holds a reference too, so this is not the last one.
            let prev = rc.fetch_sub(1, AcqRel);
            assert!(
                prev > 1,
                "{pfn:?} on an LRU list without PG_lru or references"
            );
            return false;
        }
        self.lruvec
            .del(self.pages, LruList::of(page.flags()), pfn, StatCpu::Unbound);
        true
    }
}
