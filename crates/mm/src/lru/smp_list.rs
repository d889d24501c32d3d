//! The LRU lists' intrusive list: circular, with a sentinel, and with a removal that many
//! threads may run at once (Yosef Lev's and Daniel Jordan's `smp_list_del`, RFC 2018).
//!
//! # What it models
//!
//! Each LRU list of an lruvec is a `struct list_head` threaded through `page->lru`, circular
//! around the list head embedded in the lruvec. The engine's [`PageList`](crate::list::PageList)
//! is a linear list whose ends live in the owner's struct: fine for lists that one lock holder
//! at a time touches, but the concurrent removal below needs every node, the head included, to
//! have `next`/`prev` words that other removers can compare-and-swap. So the LRU keeps its own
//! list here: node ids are pfns, the sentinel is the reserved id [`HEAD`] whose two link words
//! live in a [`ListHead`] inside the lruvec, and an unlinked page has both links [`NIL`], as
//! everywhere else in the engine. The same list type serves every policy, so that `locked` and
//! `concurrent` release differ only in their locking, never in the list they walk.
//!
//! # Operations and what protects them
//!
//! * The *exclusive* operations ([`List::push_front`], [`List::remove`],
//!   [`List::splice_front`], walks...) are plain `list_add`/`list_del`/`list_splice`: the caller
//!   holds the list's lock exclusively (lru_lock, or the lruvec rwsem for write), so they use
//!   `Relaxed` accesses like every lock-protected link in the engine.
//! * [`List::smp_del`] is the RFC's `smp_list_del`: the caller holds the list's lock *shared*
//!   (any number of removers at once; adds, splices, isolation and walks take it exclusively,
//!   so they never overlap a removal) and no two callers remove the same node (each removes a
//!   page whose reference count it just dropped to zero). Link words double as locks:
//!   1. lock the entry `E` by swinging `E.next` from its successor to its predecessor `D`
//!      (a CAS; refused while `E.next` is [`BUSY`]). A remover of `D` now waits in its step 4
//!      while `E.next == D`; a remover of the successor `F` cannot lock `E.next` (it expects
//!      `F` there);
//!   2. reread `E.prev` until it is stable, republishing it in `E.next` each time, with a full
//!      fence between the publication and the reread: a racing remover of `D` writes `E.prev`
//!      then fences then reads `E.next`, so one of the two sees the other (store buffering
//!      with two SC fences) and `D` cannot finish while we think it is our predecessor;
//!   3. lock the predecessor's `next` by a CAS from `E` to [`BUSY`] (the RFC's NULL), waiting
//!      (and republishing a changed `E.prev`) while the predecessor is itself being removed;
//!   4. set `succ.prev = D`, fence, and wait while `succ.next == E`: the successor's remover,
//!      if any, has locked `succ` naming `E` as its predecessor; it rereads `succ.prev`, sees
//!      `D` and republishes. Then `D.next = succ`: one store that completes the removal and
//!      unlocks `D`. Finally both links of `E` become [`NIL`].
//!
//! The fences are SC fences (`smp_mb`), and the CASes are `AcqRel`; loads and stores of link
//! words are `Acquire`/`Release`, stronger than the kernel's `READ_ONCE`/`WRITE_ONCE` (the loom
//! models also pass with `Relaxed` ones; on x86-64 both compile to plain moves).
//!
//! Page metadata is never deallocated, but a removed page can be freed and reused at once, and
//! its links rewritten by the allocator or by a splicer building a local list outside any
//! lock. The protocol never relies on a node that has finished leaving the list: step 3 reads
//! a predecessor's link only after step 2 established, under the fence pairing, that it is
//! still our predecessor and is blocked in its own step 4 until we let it go (in the kernel
//! this is what keeps the read from touching freed memory); and a node cannot be linked next
//! to a listed node again while any removal is running, because linking needs the lock
//! exclusively, so even a stale read of a reused node's `next` can never show our id.
//!
//! # The loom seam
//!
//! The algorithm is generic over [`Nodes`] (where a node's link words are) and [`LinkCell`]
//! (what a link word is): the engine instantiates it over the page array's `std` atomics, and
//! `tests/loom_lru.rs` over `pagelab_sync::shim` (loom) atomics, so loom checks this very code,
//! weak-memory reorderings included.
//!
//! # Invariants ([`List::check`])
//!
//! Walking `next` from the head returns to the head within `len` steps, every node's `prev` is
//! the node before it, the head's `prev` is the last node, and no link is [`BUSY`] or [`NIL`]
//! once no removal runs.

use std::sync::atomic::Ordering::{self, AcqRel, Acquire, Relaxed, Release, SeqCst};

use pagelab_sync::Backoff;

use crate::page::{PageArray, Pfn};

/// The sentinel's id: the list head.
pub const HEAD: u32 = u32::MAX - 1;
/// A `next` word locked by the successor's remover (step 3; the RFC's NULL).
pub const BUSY: u32 = u32::MAX - 2;
/// An unlinked node's links (`LIST_POISON`; the engine's [`Pfn::NIL`]).
pub const NIL: u32 = Pfn::NIL;

/// One link word.
pub trait LinkCell: Sync {
    fn new(v: u32) -> Self;
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, v: u32, order: Ordering);
    /// `cmpxchg` (strong).
    fn cas(&self, current: u32, new: u32) -> Result<u32, u32>;
    /// `smp_mb()` of the same memory model as the cells.
    fn full_fence();
}

impl LinkCell for std::sync::atomic::AtomicU32 {
    #[inline]
    fn new(v: u32) -> Self {
        std::sync::atomic::AtomicU32::new(v)
    }
    #[inline]
    fn load(&self, order: Ordering) -> u32 {
        self.load(order)
    }
    #[inline]
    fn store(&self, v: u32, order: Ordering) {
        self.store(v, order)
    }
    #[inline]
    fn cas(&self, current: u32, new: u32) -> Result<u32, u32> {
        self.compare_exchange(current, new, AcqRel, Acquire)
    }
    #[inline]
    fn full_fence() {
        std::sync::atomic::fence(SeqCst);
    }
}

#[cfg(loom)]
impl LinkCell for pagelab_sync::shim::atomic::AtomicU32 {
    fn new(v: u32) -> Self {
        pagelab_sync::shim::atomic::AtomicU32::new(v)
    }
    fn load(&self, order: Ordering) -> u32 {
        self.load(order)
    }
    fn store(&self, v: u32, order: Ordering) {
        self.store(v, order)
    }
    fn cas(&self, current: u32, new: u32) -> Result<u32, u32> {
        self.compare_exchange(current, new, AcqRel, Acquire)
    }
    fn full_fence() {
        pagelab_sync::shim::atomic::fence(SeqCst);
    }
}

/// Where the link words of the nodes (ids other than [`HEAD`]) live.
pub trait Nodes {
    type Cell: LinkCell;
    fn next(&self, id: u32) -> &Self::Cell;
    fn prev(&self, id: u32) -> &Self::Cell;
    /// Number of valid node ids (`0..len`), for [`List::check`].
    fn nr_nodes(&self) -> usize;
}

impl Nodes for PageArray {
    type Cell = std::sync::atomic::AtomicU32;
    #[inline]
    fn next(&self, id: u32) -> &Self::Cell {
        &self[Pfn(id)].next
    }
    #[inline]
    fn prev(&self, id: u32) -> &Self::Cell {
        &self[Pfn(id)].prev
    }
    fn nr_nodes(&self) -> usize {
        self.len()
    }
}

/// The sentinel's two link words (`struct list_head` in the lruvec). An empty list points at
/// itself.
#[derive(Debug)]
pub struct ListHead<C> {
    next: C,
    prev: C,
}

impl<C: LinkCell> Default for ListHead<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: LinkCell> ListHead<C> {
    pub fn new() -> Self {
        ListHead {
            next: C::new(HEAD),
            prev: C::new(HEAD),
        }
    }
}

/// A chain of nodes built outside any lock by their owner (a flush's local list), ready to be
/// spliced in O(1). Hot end first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalChain {
    first: u32,
    last: u32,
    len: u32,
}

impl Default for LocalChain {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalChain {
    pub const fn new() -> Self {
        LocalChain {
            first: NIL,
            last: NIL,
            len: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hot end of the chain ([`NIL`] when empty).
    pub fn first(&self) -> u32 {
        self.first
    }

    /// `list_add` onto the local list. The node must be unlinked and owned by the caller: on no
    /// shared list, so no other thread reads or writes its links.
    pub fn push_front<N: Nodes>(&mut self, nodes: &N, id: u32) {
        debug_assert_eq!(
            nodes.next(id).load(Relaxed),
            NIL,
            "node {id} already linked"
        );
        nodes.prev(id).store(NIL, Relaxed);
        nodes.next(id).store(self.first, Relaxed);
        if self.first == NIL {
            self.last = id;
        } else {
            nodes.prev(self.first).store(id, Relaxed);
        }
        self.first = id;
        self.len += 1;
    }
}

/// A list: its head and the nodes' link storage. Cheap to build; build one per operation.
pub struct List<'a, N: Nodes> {
    nodes: &'a N,
    head: &'a ListHead<N::Cell>,
}

impl<'a, N: Nodes> List<'a, N> {
    #[inline]
    pub fn new(nodes: &'a N, head: &'a ListHead<N::Cell>) -> Self {
        List { nodes, head }
    }

    #[inline]
    fn next(&self, id: u32) -> &'a N::Cell {
        if id == HEAD {
            &self.head.next
        } else {
            self.nodes.next(id)
        }
    }

    #[inline]
    fn prev(&self, id: u32) -> &'a N::Cell {
        if id == HEAD {
            &self.head.prev
        } else {
            self.nodes.prev(id)
        }
    }

    // ---- exclusive operations: the caller holds the list's lock exclusively ----

    /// The hot end.
    #[inline]
    pub fn first(&self) -> Option<u32> {
        let f = self.head.next.load(Relaxed);
        (f != HEAD).then_some(f)
    }

    /// The cold end.
    #[inline]
    pub fn last(&self) -> Option<u32> {
        let l = self.head.prev.load(Relaxed);
        (l != HEAD).then_some(l)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.first().is_none()
    }

    /// The node after `id` towards the cold end.
    #[inline]
    pub fn next_of(&self, id: u32) -> Option<u32> {
        let n = self.next(id).load(Relaxed);
        (n != HEAD).then_some(n)
    }

    /// The node before `id` towards the hot end.
    #[inline]
    pub fn prev_of(&self, id: u32) -> Option<u32> {
        let p = self.prev(id).load(Relaxed);
        (p != HEAD).then_some(p)
    }

    #[inline]
    fn link_between(&self, id: u32, prev: u32, next: u32) {
        debug_assert_eq!(self.next(id).load(Relaxed), NIL, "node {id} already linked");
        self.next(id).store(next, Relaxed);
        self.prev(id).store(prev, Relaxed);
        self.prev(next).store(id, Relaxed);
        self.next(prev).store(id, Relaxed);
    }

    /// `list_add`: insert at the hot end.
    #[inline]
    pub fn push_front(&self, id: u32) {
        let first = self.head.next.load(Relaxed);
        self.link_between(id, HEAD, first);
    }

    /// `list_add_tail`: insert at the cold end.
    #[inline]
    pub fn push_back(&self, id: u32) {
        let last = self.head.prev.load(Relaxed);
        self.link_between(id, last, HEAD);
    }

    /// `list_del`: unlink `id`, which must be on this list.
    #[inline]
    pub fn remove(&self, id: u32) {
        let next = self.next(id).load(Relaxed);
        let prev = self.prev(id).load(Relaxed);
        debug_assert!(next != NIL && prev != NIL, "node {id} is not linked");
        self.prev(next).store(prev, Relaxed);
        self.next(prev).store(next, Relaxed);
        self.next(id).store(NIL, Relaxed);
        self.prev(id).store(NIL, Relaxed);
    }

    /// `list_splice`: move a local chain to the hot end in O(1), keeping its order.
    #[inline]
    pub fn splice_front(&self, chain: &LocalChain) {
        if chain.is_empty() {
            return;
        }
        let old_first = self.head.next.load(Relaxed);
        self.prev(chain.first).store(HEAD, Relaxed);
        self.next(chain.last).store(old_first, Relaxed);
        self.prev(old_first).store(chain.last, Relaxed);
        self.head.next.store(chain.first, Relaxed);
    }

    /// `list_splice_tail`: move a local chain to the cold end in O(1), keeping its order.
    #[inline]
    pub fn splice_back(&self, chain: &LocalChain) {
        if chain.is_empty() {
            return;
        }
        let old_last = self.head.prev.load(Relaxed);
        self.next(chain.last).store(HEAD, Relaxed);
        self.prev(chain.first).store(old_last, Relaxed);
        self.next(old_last).store(chain.first, Relaxed);
        self.head.prev.store(chain.last, Relaxed);
    }

    /// Walk from the hot end. At most `limit` nodes are returned, so that a corrupted (cyclic)
    /// list cannot hang a walk.
    pub fn iter(&self, limit: usize) -> Iter<'a, N> {
        Iter {
            list: List {
                nodes: self.nodes,
                head: self.head,
            },
            cur: self.head.next.load(Relaxed),
            left: limit,
            forward: true,
        }
    }

    /// Walk from the cold end (what reclaim scans).
    pub fn iter_rev(&self, limit: usize) -> Iter<'a, N> {
        Iter {
            list: List {
                nodes: self.nodes,
                head: self.head,
            },
            cur: self.head.prev.load(Relaxed),
            left: limit,
            forward: false,
        }
    }

    /// Check the list's shape (see the module documentation) and return its length. `len` is
    /// the length the caller's counter claims; the walk is bounded by it.
    pub fn check(&self, len: u64) -> Result<u64, String> {
        let mut prev = HEAD;
        let mut cur = self.head.next.load(Relaxed);
        let mut n = 0u64;
        while cur != HEAD {
            if cur == NIL || cur == BUSY || cur as usize >= self.nodes.nr_nodes() {
                return Err(format!("bad link {cur:#x} after node {prev:#x}"));
            }
            let p = self.prev(cur).load(Relaxed);
            if p != prev {
                return Err(format!(
                    "node {cur:#x} has prev {p:#x} but follows {prev:#x}"
                ));
            }
            n += 1;
            if n > len {
                return Err(format!(
                    "list holds more than the {len} nodes its counter says (or is cyclic)"
                ));
            }
            prev = cur;
            cur = self.next(cur).load(Relaxed);
        }
        let last = self.head.prev.load(Relaxed);
        if last != prev {
            return Err(format!(
                "head.prev is {last:#x} but the last node is {prev:#x}"
            ));
        }
        Ok(n)
    }

    // ---- concurrent removal: the caller holds the list's lock shared ----

    /// `smp_list_del`: unlink `e` while other threads may be unlinking other nodes of the same
    /// list, its neighbours included. Returns how many times it had to wait (the RFC measured
    /// this to be below 0.01% of calls). See the module documentation for the protocol.
    pub fn smp_del(&self, e: u32) -> u32 {
        debug_assert!(e != HEAD && e != BUSY && e != NIL);
        let mut waits = 0u32;
        let mut backoff = Backoff::new();
        let e_next = self.next(e);
        let e_prev = self.prev(e);

        // Step 1: lock `e` by pointing its `next` at its predecessor.
        let mut succ;
        let mut pred;
        loop {
            succ = e_next.load(Acquire);
            pred = e_prev.load(Acquire);
            if succ != BUSY && e_next.cas(succ, pred).is_ok() {
                break;
            }
            waits += 1;
            backoff.snooze();
        }
        // The kernel's cmpxchg is a full barrier: order the publication above before the
        // rereads of `e.prev` below (store buffering against the predecessor's step 4).
        N::Cell::full_fence();

        // Step 2: republish the predecessor until it is stable.
        loop {
            let again = e_prev.load(Acquire);
            if again == pred {
                break;
            }
            e_next.store(again, Release);
            pred = again;
            N::Cell::full_fence();
        }

        // Step 3: lock the predecessor's `next`, waiting while the predecessor is itself
        // being removed (its `next` then is not `e`).
        backoff.reset();
        loop {
            let pn = self.next(pred);
            if pn.load(Acquire) == e && pn.cas(e, BUSY).is_ok() {
                break;
            }
            waits += 1;
            backoff.snooze();
            let again = e_prev.load(Acquire);
            if again != pred {
                // Our predecessor finished its step 4 write: publish the new one, which both
                // lets it complete and sets us up to lock the new predecessor.
                e_next.store(again, Release);
                pred = again;
                N::Cell::full_fence();
            }
        }

        // Step 4: both `e` and its predecessor are locked; the successor cannot leave (its
        // remover needs `e.next == succ`).
        self.prev(succ).store(pred, Release);
        // Order the store above before the load below, pairing with a successor's remover that
        // publishes its `next` and then rereads its `prev` (steps 2 and 3).
        N::Cell::full_fence();
        backoff.reset();
        while self.next(succ).load(Acquire) == e {
            // The successor's remover still thinks we are its predecessor; it will see the
            // `prev` we just wrote and republish.
            waits += 1;
            backoff.snooze();
        }
        // Completes the removal and unlocks the predecessor in one store.
        self.next(pred).store(succ, Release);
        e_next.store(NIL, Relaxed);
        e_prev.store(NIL, Relaxed);
        waits
    }
}

/// Iterator over a [`List`].
pub struct Iter<'a, N: Nodes> {
    list: List<'a, N>,
    cur: u32,
    left: usize,
    forward: bool,
}

impl<N: Nodes> Iterator for Iter<'_, N> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.cur == HEAD || self.cur == NIL || self.cur == BUSY || self.left == 0 {
            return None;
        }
        let id = self.cur;
        self.cur = if self.forward {
            self.list.next(id).load(Relaxed)
        } else {
            self.list.prev(id).load(Relaxed)
        };
        self.left -= 1;
        Some(id)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn ids<N: Nodes>(l: &List<'_, N>) -> Vec<u32> {
        l.iter(1 << 20).collect()
    }

    #[test]
    fn exclusive_operations_keep_shape() {
        let pages = PageArray::new(16);
        let head = ListHead::<AtomicU32>::new();
        let l = List::new(&pages, &head);
        assert!(l.is_empty());
        assert_eq!(l.check(0), Ok(0));
        l.push_front(1);
        l.push_front(2);
        l.push_back(3);
        assert_eq!(ids(&l), vec![2, 1, 3]);
        assert_eq!(l.iter_rev(10).collect::<Vec<_>>(), vec![3, 1, 2]);
        assert_eq!(l.check(3), Ok(3));
        assert!(l.check(2).is_err(), "a short counter is caught");
        l.remove(1);
        assert_eq!(ids(&l), vec![2, 3]);
        assert_eq!(pages[Pfn(1)].next.load(Relaxed), NIL);
        let mut chain = LocalChain::new();
        for id in [5, 6, 7] {
            chain.push_front(&pages, id);
        }
        assert_eq!(chain.len(), 3);
        l.splice_front(&chain);
        assert_eq!(ids(&l), vec![7, 6, 5, 2, 3]);
        assert_eq!(l.check(5), Ok(5));
        assert_eq!((l.first(), l.last()), (Some(7), Some(3)));
        assert_eq!((l.next_of(5), l.prev_of(5)), (Some(2), Some(6)));
        assert_eq!((l.next_of(3), l.prev_of(7)), (None, None));
    }

    #[test]
    fn check_catches_a_broken_prev_link() {
        let pages = PageArray::new(8);
        let head = ListHead::<AtomicU32>::new();
        let l = List::new(&pages, &head);
        for id in 0..4 {
            l.push_back(id);
        }
        pages[Pfn(2)].prev.store(0, Relaxed);
        assert!(l.check(4).unwrap_err().contains("prev"));
    }

    #[test]
    fn smp_del_alone_is_list_del() {
        let pages = PageArray::new(8);
        let head = ListHead::<AtomicU32>::new();
        let l = List::new(&pages, &head);
        for id in 0..5 {
            l.push_back(id);
        }
        assert_eq!(l.smp_del(0), 0);
        assert_eq!(l.smp_del(4), 0);
        assert_eq!(l.smp_del(2), 0);
        assert_eq!(ids(&l), vec![1, 3]);
        assert_eq!(l.check(2), Ok(2));
        l.smp_del(1);
        l.smp_del(3);
        assert!(l.is_empty());
        assert_eq!(l.check(0), Ok(0));
        for id in 0..5 {
            assert_eq!(pages[Pfn(id)].next.load(Relaxed), NIL);
            assert_eq!(pages[Pfn(id)].prev.load(Relaxed), NIL);
        }
    }

    /// Many threads remove interleaved nodes of one list at once (every node's neighbours are
    /// removed by other threads), in random orders; whatever is left is a well-formed list of
    /// exactly the nodes nobody removed.
    #[test]
    fn smp_del_concurrent_neighbours() {
        const N: u32 = 30_000;
        const THREADS: u32 = 6;
        let waits = std::sync::atomic::AtomicU64::new(0);
        for round in 0..4u32 {
            let pages = PageArray::new(N as usize);
            let head = ListHead::<AtomicU32>::new();
            let l = List::new(&pages, &head);
            for id in 0..N {
                l.push_back(id);
            }
            // Node i goes to thread i % (THREADS + 1); the last share stays on the list.
            let start = std::sync::Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let l = List::new(&pages, &head);
                    let (start, waits) = (&start, &waits);
                    s.spawn(move || {
                        let mut mine: Vec<u32> =
                            (0..N).filter(|i| i % (THREADS + 1) == t).collect();
                        // A cheap deterministic shuffle, different per thread and round.
                        let mut x = 0x9e37_79b9u32 ^ (t * 7919 + round);
                        for i in (1..mine.len()).rev() {
                            x ^= x << 13;
                            x ^= x >> 17;
                            x ^= x << 5;
                            mine.swap(i, x as usize % (i + 1));
                        }
                        start.wait();
                        for id in mine {
                            waits.fetch_add(u64::from(l.smp_del(id)), Relaxed);
                        }
                    });
                }
            });
            let kept: Vec<u32> = (0..N).filter(|i| i % (THREADS + 1) == THREADS).collect();
            assert_eq!(ids(&l), kept);
            assert_eq!(l.check(kept.len() as u64), Ok(kept.len() as u64));
        }
        // Not asserted (it depends on the host's scheduling), but shown with --nocapture: how
        // often neighbours actually collided.
        println!("smp_del waits: {}", waits.into_inner());
    }
}
