//! Frame metadata: the engine's `struct page`.
//!
//! Models `include/linux/mm_types.h`: one small descriptor per 4 KiB frame, kept in an array beside
//! the arena (the kernel's `mem_map`/vmemmap), indexed by page frame number. Every field is an
//! atomic so that the whole engine stays safe Rust: fields that a lock protects (the list links,
//! `private` while a page is free) are accessed `Relaxed` by the lock holder, which costs the same
//! as a plain load or store on x86-64; fields read without a lock (`refcount`, `flags` bits such as
//! `PG_lru`) use the orderings documented where they are used.
//!
//! Field use by state (the same overloading as the kernel's unions):
//! | state | `next`/`prev` | `private` | `index` |
//! |---|---|---|---|
//! | free in the buddy allocator (`PG_buddy` on the head) | free list links | order | - |
//! | on a per-CPU list | pcp list links | order | migratetype |
//! | compound tail (`PG_tail`) | - | head pfn | - |
//! | slab page (`PG_slab`, head) | node partial list links | slab state | slab state |
//! | on an LRU list (`PG_lru`) | circular LRU links (`u32::MAX - 1` and `- 2` reserved for list heads) | owner-specific | owner-specific |
//!
//! Invariant checked by the allocator's `check`: a frame is on at most one list, and a block on a
//! buddy free list has `PG_buddy` set on its head only.

use std::fmt;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Size of a frame, as the kernel's `PAGE_SIZE` on x86-64.
pub const PAGE_SIZE: usize = 4096;
/// `PAGE_SHIFT`.
pub const PAGE_SHIFT: u32 = 12;

/// A page frame number: the index of a 4 KiB frame in the arena.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pfn(pub u32);

impl Pfn {
    /// The "no page" link value, so that links fit in a `u32`.
    pub const NIL: u32 = u32::MAX;

    #[inline]
    pub fn idx(self) -> usize {
        self.0 as usize
    }

    /// The buddy of the block `self` of `order`: the block it merges with (`__find_buddy_pfn`).
    #[inline]
    pub fn buddy(self, order: u32) -> Pfn {
        Pfn(self.0 ^ (1 << order))
    }

    /// The frame `n` frames after this one.
    #[inline]
    pub fn offset(self, n: u32) -> Pfn {
        Pfn(self.0 + n)
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Page flag bits (`enum pageflags`). Only the ones the engine models.
pub mod pg {
    /// Head of a free block in the buddy allocator (`PG_buddy`, a page type in the kernel).
    pub const BUDDY: u64 = 1 << 0;
    /// First frame of a compound (high-order) page (`PG_head`).
    pub const HEAD: u64 = 1 << 1;
    /// Tail frame of a compound page; `private` holds the head pfn.
    pub const TAIL: u64 = 1 << 2;
    /// Frame belongs to a slab (`PG_slab`).
    pub const SLAB: u64 = 1 << 3;
    /// Frame is on a per-CPU page list. The kernel has no such flag; the engine keeps one so
    /// that its invariant checks can tell a pcp page from an allocated one in O(1).
    pub const PCP: u64 = 1 << 4;
    /// Frame sits in the prezeroed pool and is known to be zero.
    pub const ZEROED: u64 = 1 << 5;
    /// `PG_locked`: the slab lock on a slab's head frame (`slab_lock`), the page lock on an
    /// LRU page (`folio_lock`: held by reclaim while it swaps the page out, and by a swap-in
    /// while it maps the page from the swap cache).
    pub const LOCKED: u64 = 1 << 6;
    /// On an LRU list (`PG_lru`). Cleared by test-and-clear to isolate: only the winner may
    /// move the page between lists.
    pub const LRU: u64 = 1 << 7;
    /// On an active list (`PG_active`).
    pub const ACTIVE: u64 = 1 << 8;
    /// Referenced since last scanned (`PG_referenced`).
    pub const REFERENCED: u64 = 1 << 9;
    /// Anonymous memory (the kernel's `PAGE_MAPPING_ANON` bit).
    pub const ANON: u64 = 1 << 10;
    /// Swap-backed (`PG_swapbacked`): anon and shmem; on the anon LRU lists.
    pub const SWAPBACKED: u64 = 1 << 11;
    /// Dirty (`PG_dirty`).
    pub const DIRTY: u64 = 1 << 12;
    /// Contents valid (`PG_uptodate`), for page-cache pages.
    pub const UPTODATE: u64 = 1 << 13;
    /// A page-table page.
    pub const TABLE: u64 = 1 << 14;
    /// In the swap cache (`PG_swapcache`); `private` holds the swap entry's offset.
    pub const SWAPCACHE: u64 = 1 << 15;
    /// MGLRU's generation of the page plus one (`LRU_GEN_MASK`; 0: not in a generation), as
    /// aging last judged it. The page-table walk updates it without the lru_lock, so it may
    /// be newer than the list the page is on ([`LIST_GEN_MASK`]) until eviction sorts it.
    pub const GEN_SHIFT: u32 = 16;
    pub const GEN_MASK: u64 = 0b111 << GEN_SHIFT;
    /// The generation list the page is linked on, plus one (0: a classic list, or none).
    /// Written only under the lru_lock, with the link: the kernel finds the list from the
    /// folio's `LRU_GEN_MASK` alone and keeps its sizes by it; the engine keeps the two apart
    /// so that its list operations and sizes never depend on a lockless update.
    pub const LIST_GEN_SHIFT: u32 = 19;
    pub const LIST_GEN_MASK: u64 = 0b111 << LIST_GEN_SHIFT;
    /// MGLRU's access count through file descriptors (`LRU_REFS_MASK`), which with
    /// [`WORKINGSET`] gives the page's tier.
    pub const REFS_SHIFT: u32 = 22;
    pub const REFS_MASK: u64 = 0b11 << REFS_SHIFT;
    /// `PG_workingset`: the page refaulted while it was part of the workingset.
    pub const WORKINGSET: u64 = 1 << 24;
    /// `PG_unevictable`: never set by the engine (it has no mlock); cleared with a locked
    /// instruction by the LRU add of 4.16+ kernels (`lru.add_clears_unevictable`).
    pub const UNEVICTABLE: u64 = 1 << 25;
    /// What an owner sets on an allocated page; cleared when the page is freed.
    pub const OWNER_STATE: u64 = ACTIVE
        | REFERENCED
        | ANON
        | SWAPBACKED
        | DIRTY
        | UPTODATE
        | TABLE
        | SWAPCACHE
        | GEN_MASK
        | LIST_GEN_MASK
        | REFS_MASK
        | WORKINGSET;
    /// Bits that must be clear on a freshly allocated frame.
    pub const ALLOC_CLEAR: u64 = BUDDY
        | PCP
        | ZEROED
        | HEAD
        | TAIL
        | SLAB
        | LOCKED
        | LRU
        | ACTIVE
        | TABLE
        | GEN_MASK
        | LIST_GEN_MASK;
}

/// One frame's metadata. 48 bytes: well under the 64 bytes the kernel's `struct page` takes.
#[derive(Default)]
pub struct Page {
    /// `PG_*` bits, see [`pg`].
    pub flags: AtomicU64,
    /// `_refcount`: 0 while free, 1 when handed out by the allocator.
    pub refcount: AtomicI32,
    /// `_mapcount`: number of page-table entries mapping the frame.
    pub mapcount: AtomicI32,
    /// Intrusive list links as pfns ([`Pfn::NIL`] when unlinked): buddy, pcp or LRU lists.
    pub next: AtomicU32,
    pub prev: AtomicU32,
    /// Order while free; head pfn on tails; owner-specific otherwise.
    pub private: AtomicU32,
    /// Memory cgroup id charged for the frame.
    pub memcg: AtomicU32,
    /// `mapping`: the owner (address space or file) for reverse mapping.
    pub mapping: AtomicU64,
    /// `index`: offset within the owner; migratetype while on a pcp list.
    pub index: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page>() <= 64);

impl Page {
    pub fn new() -> Self {
        Page {
            next: AtomicU32::new(Pfn::NIL),
            prev: AtomicU32::new(Pfn::NIL),
            ..Default::default()
        }
    }

    #[inline]
    pub fn flags(&self) -> u64 {
        self.flags.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn test(&self, bit: u64) -> bool {
        self.flags.load(Ordering::Relaxed) & bit != 0
    }

    /// Set flag bits. Callers own the frame or hold the lock of the list it is on.
    #[inline]
    pub fn set(&self, bits: u64) {
        self.flags.fetch_or(bits, Ordering::Relaxed);
    }

    #[inline]
    pub fn clear(&self, bits: u64) {
        self.flags.fetch_and(!bits, Ordering::Relaxed);
    }

    /// `__SetPageX`: set bits with a plain load and store, no locked read-modify-write.
    /// Only for a frame the caller owns exclusively (a free frame under its list's lock, or
    /// one being handed out or given back): nobody else may be writing its flags, or their
    /// update is lost. This is what the allocator's state changes use; a locked RMW there cost
    /// a third of the per-CPU fast path.
    #[inline]
    pub fn set_nonatomic(&self, bits: u64) {
        let f = self.flags.load(Ordering::Relaxed);
        self.flags.store(f | bits, Ordering::Relaxed);
    }

    /// `__ClearPageX`; see [`Page::set_nonatomic`].
    #[inline]
    pub fn clear_nonatomic(&self, bits: u64) {
        let f = self.flags.load(Ordering::Relaxed);
        self.flags.store(f & !bits, Ordering::Relaxed);
    }

    /// `folio_trylock`.
    #[inline]
    pub fn trylock(&self) -> bool {
        self.flags.fetch_or(pg::LOCKED, Ordering::Acquire) & pg::LOCKED == 0
    }

    /// `folio_lock`: spin (with backoff) until the page lock is ours. Holders keep it for a
    /// page's worth of work at most.
    pub fn lock(&self) {
        let mut spins = 0u32;
        while !self.trylock() {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// `folio_unlock`.
    #[inline]
    pub fn unlock(&self) {
        let old = self.flags.fetch_and(!pg::LOCKED, Ordering::Release);
        debug_assert!(old & pg::LOCKED != 0, "unlock of an unlocked page");
    }

    #[inline]
    pub fn order(&self) -> u32 {
        self.private.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn set_order(&self, order: u32) {
        self.private.store(order, Ordering::Relaxed);
    }
}

/// The frame metadata array (`mem_map`).
pub struct PageArray {
    pages: Box<[Page]>,
}

impl PageArray {
    pub fn new(nr_pages: usize) -> Self {
        PageArray {
            pages: (0..nr_pages).map(|_| Page::new()).collect(),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// `pfn_to_page`.
    #[inline]
    pub fn get(&self, pfn: Pfn) -> &Page {
        &self.pages[pfn.idx()]
    }

    /// Bytes of metadata per frame, for reports.
    pub const fn bytes_per_frame() -> usize {
        std::mem::size_of::<Page>()
    }
}

impl std::ops::Index<Pfn> for PageArray {
    type Output = Page;
    #[inline]
    fn index(&self, pfn: Pfn) -> &Page {
        &self.pages[pfn.idx()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_metadata_fits_in_a_cache_line() {
        assert!(PageArray::bytes_per_frame() <= 64);
    }

    #[test]
    fn buddy_of_block() {
        assert_eq!(Pfn(8).buddy(3), Pfn(0));
        assert_eq!(Pfn(0).buddy(3), Pfn(8));
        assert_eq!(Pfn(5).buddy(0), Pfn(4));
    }
}
