//! Loom models of the LRU layer's concurrency protocols, run on the real code:
//! `RUSTFLAGS="--cfg loom" cargo test -p pagelab-mm --release --test loom_lru`.
//!
//! What loom sees. The lru_locks (spinlock or rwsem), the per-CPU batch locks and the
//! allocator's locks are built on loom atomics, so loom explores every interleaving of their
//! acquisitions. Page metadata (flags, reference count, list links) stays in `std` atomics:
//! sound for what is only touched under those locks. Three things need more:
//!
//! * the `PG_lru` handoff and the reference count. Under loom the LRU runs a loom operation
//!   right before each of its lockless flag and count steps (`Lru::sched_point`), so loom
//!   places the other threads' steps between any two of them; the flag word itself behaves
//!   sequentially consistently here. That is enough for this protocol: as `lru::batch`
//!   documents, its correctness rests on the atomicity of the test-and-clear and on the lock
//!   order, not on the orderings of the flag accesses;
//! * the RFC v1's batch locks, under which no single lock covers a list's links: there every
//!   link write is also an access to a loom cell standing for that page's (or head's) links
//!   (`lru::batch_lock::PageTags`), so loom reports two writes that no lock orders;
//! * `smp_list_del`, whose correctness does rest on weak-memory orderings of the link words.
//!   Its code is generic over the link cells, and the `smp_del_*` models below run it over loom
//!   atomics, so loom checks the very algorithm the engine runs, reorderings included.
//!
//! Every model ends with the LRU's and (where memory is involved) the allocator's full
//! invariant checks.
//!
//! At most two threads spin at any time in each model. With three threads that wait by
//! spinning (and yielding) on one another, loom also explores unfair schedules in which two
//! spinners take turns forever while the thread they wait for is never scheduled again (at a
//! yield loom may pick either other thread, and that choice is not a preemption), so such
//! models exceed loom's branch limit without there being a livelock under any fair scheduler.
//! Three removers of consecutive pages are therefore exercised on real threads instead
//! (`smp_list::tests::smp_del_concurrent_neighbours`, `tests/lru.rs`).
#![cfg(loom)]

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use loom::thread;
use pagelab_mm::lru::smp_list::{List, ListHead, NIL, Nodes};
use pagelab_mm::lru::{Lru, LruEvent, LruList, mglru};
use pagelab_mm::page::pg;
use pagelab_mm::policy::{
    Count, LruAdd, LruLockScope, LruPolicy, LruRelease, MglruMove, PcpLists, PcpTune, ReleaseFree,
};
use pagelab_mm::{CpuId, Gfp, Mem, MemConfig, Pfn, Policy};
use pagelab_sync::LockKind;
use pagelab_sync::shim::atomic::AtomicU32;

fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.check(f);
}

/// Small memory: one node, `cpus` CPUs, a tiny fixed pcp (fewer lock operations to explore).
fn small_mem(cpus: usize) -> Arc<Mem> {
    let mut p = Policy::default();
    p.pcp.lists = PcpLists::Order0;
    p.pcp.batch = Count::Fixed(2);
    p.pcp.high = Count::Fixed(8);
    p.pcp.tune = PcpTune::Fixed;
    Arc::new(Mem::new(&MemConfig::new(4 << 20, cpus), &p).unwrap())
}

/// Classic LRU lists over [`small_mem`].
fn setup(cpus: usize, add: LruAdd, release: LruRelease, batch: u32) -> (Arc<Mem>, Arc<Lru>) {
    let m = small_mem(cpus);
    let lp = LruPolicy {
        lock_scope: LruLockScope::MemcgNode,
        add,
        batch,
        release,
        ..LruPolicy::default()
    };
    let lru = Arc::new(Lru::new(m.clone(), &lp, LockKind::Ticket, 1));
    (m, lru)
}

fn fault(m: &Mem, anon: bool) -> Pfn {
    let pfn = m.alloc_page(CpuId(0), Gfp::USER).unwrap();
    if anon {
        m.pages()[pfn].set(pg::ANON | pg::SWAPBACKED);
    }
    pfn
}

fn refcount(m: &Mem, pfn: Pfn) -> i32 {
    m.pages()[pfn].refcount.load(Relaxed)
}

/// (1) The `PG_lru` handoff with a splice. CPU 0 adds two pages (one anon, one file) whose
/// second add fills the batch, so the flush sorts them into two local chains, splices both
/// under one hold and only then sets `PG_lru` on each; meanwhile an isolator (holding no lock,
/// relying on the references the faulting thread holds) tries to isolate both pages. Loom
/// places the isolator's test-and-clear before the adds, while the pages are batched, inside
/// the splice's hold, between the unlock and either flag store, and after them. In every
/// interleaving the isolator either does not see a page (flag clear: still private, or spliced
/// but not yet published) or sees it on its list and unlinks it exactly once; afterwards the
/// lists, counters and reference counts are exact, putback restores both pages, and releasing
/// them returns every frame.
#[test]
fn splice_publish_races_isolate() {
    // Outcomes seen over all explored executions: [no page isolated, one, both].
    static SEEN: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
    model(3, || {
        let (m, lru) = setup(2, LruAdd::Splice, LruRelease::Locked, 2);
        let p = fault(&m, true);
        let q = fault(&m, false);
        let l2 = lru.clone();
        let isolator = thread::spawn(move || [l2.isolate(p), l2.isolate(q)]);
        lru.add(CpuId(0), p);
        lru.add(CpuId(0), q);
        let won = isolator.join().unwrap();
        let c = lru.check().unwrap();
        assert_eq!(c.batched, 0);
        let nr_won = won.iter().filter(|&&w| w).count() as u64;
        SEEN[nr_won as usize].fetch_add(1, Relaxed);
        assert_eq!(c.on_lru(), 2 - nr_won);
        for (pfn, w) in [(p, won[0]), (q, won[1])] {
            assert_eq!(
                refcount(&m, pfn),
                1 + i32::from(w),
                "batch ref dropped once"
            );
            assert_eq!(m.pages()[pfn].test(pg::LRU), !w);
            if w {
                lru.putback(CpuId(1), pfn);
            }
        }
        assert_eq!(lru.check().unwrap().on_lru(), 2);
        lru.release_pages(CpuId(0), &[p, q]);
        assert_eq!(lru.check().unwrap().on_lru(), 0);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
    // The model really raced the isolator against the publication.
    for (won, n) in SEEN.iter().enumerate() {
        assert!(n.load(Relaxed) > 0, "no execution isolated {won} pages");
    }
}

/// (2) Concurrent release against an add, under `release = "concurrent"`. Pages `b` and `a`
/// sit next to each other on one list. CPU 1 drops the last reference to `a`, so it unlinks
/// `a` under a shared hold of the lruvec rwsem with `smp_list_del`; meanwhile CPU 0 adds a
/// third page under an exclusive hold and then drops the last reference to `b`, unlinking it
/// under a shared hold too. Loom interleaves the rwsem's reader and writer (the add before,
/// between or after the removal's hold, the writer waiting for the reader and the reader for
/// the writer) and the two neighbouring removals' steps at every lock and wait point (their
/// link words are `std` atomics here; models 4 and 5 check the removal protocol itself on loom
/// atomics). Afterwards only the new page is on the list and both released pages were freed
/// exactly once.
#[test]
fn concurrent_release_races_add() {
    model(3, || {
        let (m, lru) = setup(2, LruAdd::PerPage, LruRelease::Concurrent, 15);
        let a = fault(&m, true);
        let b = fault(&m, true);
        lru.add(CpuId(0), a);
        lru.add(CpuId(0), b);
        let c = fault(&m, true);
        let l1 = lru.clone();
        let t1 = thread::spawn(move || l1.put_page(CpuId(1), a));
        lru.add(CpuId(0), c);
        lru.release_pages(CpuId(0), &[b]);
        t1.join().unwrap();
        let census = lru.check().unwrap();
        assert_eq!(census.on_lru(), 1);
        assert_eq!(lru.stats().get(LruEvent::ReleaseFree), 2);
        assert_eq!(m.check().unwrap().allocated, 1);
        lru.put_page(CpuId(0), c);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
}

/// (3) A per-CPU batch against a remote `drain_all`. CPU 0 adds two pages (trylocking its
/// batch), lets go of the second while it may still be batched, and drains locally; another
/// thread drains every CPU remotely (blocking on CPU 0's batch lock). Loom covers the remote
/// drain running before, between and after the adds, holding the batch lock while an add's
/// trylock fails (that page is linked directly), and racing the local drain. In every case
/// each page reaches its list exactly once, the batch's references are dropped exactly once
/// (the released page is freed by whichever flush drops the last one), and nothing is left
/// in a batch.
#[test]
fn batch_drain_races_remote_drain_all() {
    // Executions in which an add's trylock lost to the remote drain, and in which both the
    // remote and the local drain flushed pages (the remote one ran between the adds).
    static TRYLOCK_LOST: AtomicUsize = AtomicUsize::new(0);
    static BOTH_FLUSHED: AtomicUsize = AtomicUsize::new(0);
    model(3, || {
        let (m, lru) = setup(2, LruAdd::Batch, LruRelease::Locked, 3);
        let p = fault(&m, true);
        let q = fault(&m, false);
        let l2 = lru.clone();
        let drainer = thread::spawn(move || l2.drain_all());
        lru.add(CpuId(0), p);
        lru.add(CpuId(0), q);
        lru.put_page(CpuId(0), q);
        lru.drain(CpuId(0));
        drainer.join().unwrap();
        let c = lru.check().unwrap();
        assert_eq!((c.batched, c.on_lru()), (0, 1));
        assert_eq!(refcount(&m, p), 1);
        assert!(m.pages()[p].test(pg::LRU));
        let s = lru.stats();
        assert_eq!(
            s.get(LruEvent::FlushPages) + s.get(LruEvent::AddDirect),
            2,
            "each page linked once"
        );
        assert_eq!(s.get(LruEvent::ReleaseFree), 1);
        if s.get(LruEvent::BatchTrylockFail) > 0 {
            TRYLOCK_LOST.fetch_add(1, Relaxed);
        }
        if s.get(LruEvent::Flush) == 2 {
            BOTH_FLUSHED.fetch_add(1, Relaxed);
        }
        assert_eq!(m.check().unwrap().allocated, 1);
        lru.put_page(CpuId(0), p);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
    assert!(TRYLOCK_LOST.load(Relaxed) > 0, "no add lost its trylock");
    assert!(
        BOTH_FLUSHED.load(Relaxed) > 0,
        "the remote drain never ran between the adds"
    );
}

/// Link words in loom atomics, for the `smp_list_del` models.
struct LoomNodes {
    next: Vec<AtomicU32>,
    prev: Vec<AtomicU32>,
}

impl LoomNodes {
    fn new(n: usize) -> Self {
        LoomNodes {
            next: (0..n).map(|_| AtomicU32::new(NIL)).collect(),
            prev: (0..n).map(|_| AtomicU32::new(NIL)).collect(),
        }
    }
}

impl Nodes for LoomNodes {
    type Cell = AtomicU32;
    fn next(&self, id: u32) -> &AtomicU32 {
        &self.next[id as usize]
    }
    fn prev(&self, id: u32) -> &AtomicU32 {
        &self.prev[id as usize]
    }
    fn nr_nodes(&self) -> usize {
        self.next.len()
    }
}

type Shared = Arc<(LoomNodes, ListHead<AtomicU32>)>;

/// A list of nodes `0..n` in order, built with the exclusive operations.
fn loom_list(n: u32) -> Shared {
    let s = Arc::new((LoomNodes::new(n as usize), ListHead::new()));
    let l = List::new(&s.0, &s.1);
    for id in 0..n {
        l.push_back(id);
    }
    s
}

fn remover(s: &Shared, id: u32) -> thread::JoinHandle<()> {
    let s = s.clone();
    thread::spawn(move || {
        List::new(&s.0, &s.1).smp_del(id);
    })
}

fn assert_left(s: &Shared, left: &[u32], removed: &[u32]) {
    let l = List::new(&s.0, &s.1);
    assert_eq!(l.iter(16).collect::<Vec<_>>(), left);
    assert_eq!(l.check(left.len() as u64), Ok(left.len() as u64));
    for &id in removed {
        assert_eq!(s.0.next(id).load(Relaxed), NIL);
        assert_eq!(s.0.prev(id).load(Relaxed), NIL);
    }
}

/// (4) `smp_list_del` of two adjacent nodes in the middle of a list (`0 1 2 3`, removing 1
/// and 2 at once) on loom atomics: the two removers contend for the link between them (1's
/// remover locks 1 and then 0.next; 2's remover locks 2 and must lock 1.next, which 1's remover
/// has turned into its predecessor pointer), including every weak-memory outcome of the
/// store-buffering pairs the fences order. The result is always `0 3` with both nodes
/// unlinked.
#[test]
fn smp_del_adjacent_pair() {
    model(3, || {
        let s = loom_list(4);
        let t = remover(&s, 1);
        List::new(&s.0, &s.1).smp_del(2);
        t.join().unwrap();
        assert_left(&s, &[0, 3], &[1, 2]);
    });
}

/// (5) `smp_list_del` of both nodes of a two-node list at once: the head is the first node's
/// predecessor and the second's successor, and each node is the other's neighbour, so the
/// removers lock the head's `next`, wait on each other's link words and write the head's
/// `prev`. The list always ends empty, the head pointing at itself.
#[test]
fn smp_del_whole_list() {
    model(3, || {
        let s = loom_list(2);
        let t = remover(&s, 0);
        List::new(&s.0, &s.1).smp_del(1);
        t.join().unwrap();
        assert_left(&s, &[], &[0, 1]);
        let l = List::new(&s.0, &s.1);
        assert!(l.is_empty());
        assert_eq!((l.first(), l.last()), (None, None));
    });
}

/// MGLRU on one node and one CPU, pages added one lock hold each.
fn setup_mglru(cpus: usize, add: LruAdd, mv: MglruMove) -> (Arc<Mem>, Arc<Lru>) {
    let m = small_mem(cpus);
    let lp = LruPolicy {
        lock_scope: LruLockScope::MemcgNode,
        add,
        batch: 2,
        release: LruRelease::Locked,
        release_free: ReleaseFree::Batch,
        mglru: true,
        mglru_move: mv,
        ..LruPolicy::default()
    };
    let lru = Arc::new(Lru::new(m.clone(), &lp, LockKind::Ticket, 1));
    (m, lru)
}

/// (6) MGLRU's bulk move against an isolator. Three anon pages sit in the oldest generation,
/// the first of them marked young by the page-table walk. The scanner sorts the generation
/// under one lruvec hold: the young page joins a run bound for the youngest generation, which
/// is spliced at the end of the hold, and the other two are isolated; meanwhile an isolator
/// test-and-clears one of those two outside any lock and then unlinks it under the lock. Loom
/// places the isolator's flag step before the scan (the scanner then skips the page, chaining
/// it back to the head of the oldest generation), during it, and after it (the isolator then
/// loses). In every interleaving each page is isolated by exactly one of them or on exactly
/// one list, the one its flags name, the young page ends in the youngest generation, and
/// every frame comes back.
#[test]
fn mglru_bulk_move_races_isolate() {
    static SEEN: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];
    model(3, || {
        let (m, lru) = setup_mglru(2, LruAdd::PerPage, MglruMove::Bulk);
        let pages: Vec<Pfn> = (0..3).map(|_| fault(&m, true)).collect();
        for &p in &pages {
            lru.add(CpuId(0), p);
        }
        // Three new generations: the pages' generation becomes the oldest.
        for _ in 0..3 {
            lru.with_lruvec(0, 0, |v| v.inc_max_seq(MglruMove::Bulk));
        }
        let g = lru.lrugen(0, 0);
        assert_eq!(g.nr_gens(false), 4);
        let young = mglru::gen_from_seq(g.max_seq());
        assert!(mglru::mark_young(&m.pages()[pages[0]], young));
        let (l2, q) = (lru.clone(), pages[1]);
        let isolator = thread::spawn(move || {
            let won = l2.isolate(q);
            if won {
                l2.putback(CpuId(1), q);
            }
            won
        });
        let scan = lru.with_lruvec(0, 0, |v| v.scan_oldest(false, 3, MglruMove::Bulk, 64));
        let won = isolator.join().unwrap();
        SEEN[usize::from(won)].fetch_add(1, Relaxed);
        assert_eq!(scan.promoted, 1);
        assert!(!scan.isolated.contains(&pages[0]));
        assert_eq!(scan.isolated.contains(&q), !won && scan.skipped == 0);
        for &p in &scan.isolated {
            lru.putback(CpuId(0), p);
        }
        let f = m.pages()[pages[0]].flags();
        assert_eq!(
            LruList::of(f),
            LruList::generation(young, false),
            "the young page did not reach the youngest generation"
        );
        let c = lru.check().unwrap();
        assert_eq!(c.on_lru(), 3);
        lru.release_pages(CpuId(0), &pages);
        assert_eq!(lru.check().unwrap().on_lru(), 0);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
    for (won, n) in SEEN.iter().enumerate() {
        assert!(
            n.load(Relaxed) > 0,
            "the isolator never ended with won={won}"
        );
    }
}

/// (7) An MGLRU add against an isolator: the batch flush picks each page's generation under the
/// lock (`lru_gen_add_folio`) and only then sets `PG_lru`; the isolator, relying on the
/// faulting thread's references, tries to take both pages. Either it sees a page off the LRU
/// (batched, flag clear) or it unlinks it from the generation list its flags name.
#[test]
fn mglru_add_races_isolate() {
    static SEEN: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
    model(3, || {
        let (m, lru) = setup_mglru(2, LruAdd::Batch, MglruMove::PerFolio);
        let p = fault(&m, true);
        let q = fault(&m, false);
        let l2 = lru.clone();
        let isolator = thread::spawn(move || [l2.isolate(p), l2.isolate(q)]);
        lru.add(CpuId(0), p);
        lru.add(CpuId(0), q);
        let won = isolator.join().unwrap();
        let nr_won = won.iter().filter(|&&w| w).count();
        SEEN[nr_won].fetch_add(1, Relaxed);
        let c = lru.check().unwrap();
        assert_eq!(c.on_lru(), 2 - nr_won as u64);
        for (pfn, w) in [(p, won[0]), (q, won[1])] {
            assert_eq!(m.pages()[pfn].test(pg::LRU), !w);
            if w {
                // Isolated from the youngest generation, the page keeps PG_active and goes
                // back there.
                lru.putback(CpuId(1), pfn);
            }
            assert!(LruList::of(m.pages()[pfn].flags()).gen_of().is_some());
        }
        assert_eq!(lru.check().unwrap().on_lru(), 2);
        lru.release_pages(CpuId(0), &[p, q]);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
    for (won, n) in SEEN.iter().enumerate() {
        assert!(n.load(Relaxed) > 0, "no execution isolated {won} pages");
    }
}

/// (8) The lru_lock RFC v1's batch locks (`release = "batch-locks"`): two removers of adjacent
/// pages of one batch, a sentinel (under its batch lock and lru_lock) and an inner page (under
/// the batch lock alone), race an adder at the list's hot end (under lru_lock alone). Fifteen
/// pages added one by one make a full batch `p0..p13` (hot end `p13`, a sentinel next to the
/// next batch's `p14`) and `p12` an inner page. Under loom every link write of a batch-locked
/// list is an access to a per-page (and per-head) cell, so loom reports two writes of one
/// page's links that no lock orders: the sentinel's remover and the adder both write `p14`'s,
/// the two removers both write `p13`'s and `p11`'s. Afterwards the lists, the batch invariant
/// (checked by `Lru::check`) and the frame count are exact, whatever the order.
#[test]
fn batch_lock_removers_race_an_adder() {
    model(2, || {
        let (m, lru) = setup(2, LruAdd::PerPage, LruRelease::BatchLocks, 15);
        let pfns: Vec<Pfn> = (0..15).map(|_| fault(&m, true)).collect();
        for &pfn in &pfns {
            lru.add(CpuId(0), pfn);
        }
        let new = fault(&m, true);
        let (sentinel, inner) = (pfns[13], pfns[12]);
        let c = lru.check().unwrap();
        assert_eq!((c.on_lru(), c.sentinels), (15, 3), "p0, p13 and p14");
        let (l1, l2) = (lru.clone(), lru.clone());
        let a = thread::spawn(move || l1.put_page(CpuId(0), sentinel));
        let b = thread::spawn(move || l2.put_page(CpuId(1), inner));
        lru.add(CpuId(0), new);
        a.join().unwrap();
        b.join().unwrap();
        let c = lru.check().unwrap();
        assert_eq!(c.on_lru(), 14);
        assert_eq!(lru.stats().get(LruEvent::ReleaseFree), 2);
        let mut rest: Vec<Pfn> = pfns
            .iter()
            .copied()
            .filter(|&p| p != sentinel && p != inner)
            .collect();
        rest.push(new);
        lru.release_pages(CpuId(0), &rest);
        assert_eq!(lru.check().unwrap().on_lru(), 0);
        assert_eq!(m.check().unwrap().allocated, 0);
    });
}
