//! A small SLUB (mm/slub.c): the kmalloc size classes over the page allocator.
//!
//! # What is modelled
//!
//! A [`KmemCache`] hands out objects of one size, carved out of *slabs*: blocks of 2^order
//! frames allocated from [`Mem`] as compound pages (`__GFP_COMP`, so every tail frame records its
//! head and [`Mem::compound_head`] finds the slab of any object, as `virt_to_slab` does).
//! [`SlabAllocator`] holds the thirteen kmalloc caches, 8 bytes to 8 KiB (`kmalloc_caches[]`),
//! and maps a request size to the smallest class that fits (`kmalloc_index`). The slab order of a
//! class follows SLUB's `calculate_order` ([`calculate_order`]): at least
//! `4 * (fls(nr_cpus) + 1)` objects per slab, at most 1/16 of the slab wasted, relaxing the waste
//! to 1/8 and 1/4 and then the object count, never above `slub_max_order` = 3. The classes of
//! 1 KiB and more come out at order 1 to 3, which is why kmalloc-heavy (network) workloads
//! depend on high-order pages being available.
//!
//! The mechanisms, each named after its kernel counterpart:
//! - **Free pointers in the objects.** A free object's first word holds the next free object of
//!   the same list ("object index + 1", 0 ends the list), tagged with [`FREE_TAG`] in its upper
//!   half. Lists therefore cost no memory besides the objects, as in SLUB.
//! - **CPU slab** (`struct kmem_cache_cpu`). Each CPU owns one *frozen* slab and a private
//!   freelist of its objects. Allocation pops from that freelist; freeing an object of the
//!   CPU's own slab pushes onto it. Neither touches a line that another CPU writes. The kernel
//!   protects `kmem_cache_cpu` with `this_cpu_cmpxchg_double` against interrupts on the same
//!   CPU, and with `local_lock` on PREEMPT_RT. The engine has no interrupts, but `shrink` flushes
//!   CPU slabs from another thread (the kernel's `flush_all` IPI), so each CPU's state sits behind
//!   a [`SpinLock`] that only its own CPU takes in normal use: uncontended, it costs one atomic on
//!   a line that stays in that CPU's cache.
//! - **Slab freelist and `slab_lock`.** A free on another CPU than the slab's owner (a *remote*
//!   free) pushes onto the slab's own freelist, kept in the head frame, under `slab_lock`: a bit
//!   spinlock on `PG_locked` in the head frame's flags (the kernel uses a `cmpxchg_double` on
//!   freelist and counters where it can and `slab_lock` otherwise). When the owner's CPU
//!   freelist runs dry it takes the whole slab freelist in one go (`get_freelist`); when that is
//!   empty too, the slab is full: it is *unfrozen* and left on no list.
//! - **Node partial list and `list_lock`** (`struct kmem_cache_node`). Slabs that are neither
//!   frozen nor full wait on one partial list per cache (one node: the engine's NUMA zones all
//!   share it) under `list_lock`. A CPU without objects freezes the first partial slab
//!   (`get_partial`), or else allocates a new slab (`new_slab`). A remote free that makes a full
//!   slab partial adds it to the list's tail; one that makes a slab empty frees the slab to the
//!   page allocator (`discard_slab`) when the list already holds `min_partial` other slabs
//!   (`clamp(ilog2(size) / 2, 5, 10)`, `set_min_partial`), and keeps it partial otherwise. There
//!   is no per-CPU partial list (`CONFIG_SLUB_CPU_PARTIAL`).
//! - **Shrinking** ([`SlabAllocator::shrink`], `kmem_cache_shrink`): flush every CPU slab back
//!   to the node (`deactivate_slab`) and free every empty slab.
//!
//! # Slab state in the head frame
//!
//! While `PG_slab` is set on a slab's head frame (tails keep only `PG_tail` and the head pfn):
//!
//! | field | meaning | written |
//! |---|---|---|
//! | `flags` | `PG_slab`, `PG_head` if order > 0, `PG_locked` while `slab_lock` is held | |
//! | `private` | slab freelist: first free object's index + 1, 0 = empty | under `slab_lock` |
//! | `index` | `inuse`: objects not on the slab freelist (a frozen slab counts its CPU freelist as in use) | under `slab_lock` |
//! | `memcg` | owner: CPU id + 1 while frozen, 0 otherwise | under the owner's CPU lock *and* `slab_lock` |
//! | `mapping` | `slab->slab_cache`: allocator id << 16 \| cache index | before the slab is published |
//! | `next`/`prev` | node partial list links | under `list_lock` |
//!
//! Fields are read optimistically without the lock only to decide which locks to take; every
//! decision is re-made under the locks.
//!
//! # Locks and their order
//!
//! CPU lock (`kmem_cache_cpu`) → `list_lock` → `slab_lock`, at most one of each at a time; this
//! is the kernel's order (`list_lock` nests outside `slab_lock`). A remote free learns whether it
//! needs `list_lock` only from the slab's state, which it must read under `slab_lock`: it guesses
//! from an unlocked read, takes `list_lock` first when the guess says so, and when the guess was
//! wrong drops `slab_lock`, takes `list_lock`, retakes `slab_lock` and decides again. New slabs
//! are allocated under the CPU lock (so the page allocator's pcp and zone locks nest inside it);
//! slabs are freed to the page allocator with no slab lock held. The page allocator never calls
//! into the slab allocator.
//!
//! # Invariants ([`SlabAllocator::check`], on a quiescent allocator)
//!
//! - Every slab head has `PG_slab`, a valid cache, refcount 1, `PG_locked` clear; its tails
//!   point to it; no frame belongs to two slabs.
//! - Every freelist (CPU and slab) walks within the slab, every entry carries the free tag, and
//!   no object is on two lists or twice on one: no object can be handed out twice.
//! - `inuse` + length of the slab freelist = objects per slab.
//! - A frozen slab is the CPU slab of exactly the CPU recorded as its owner, and is on no list.
//! - An unfrozen slab is on the partial list if and only if its freelist is non-empty.
//!
//! # Double frees and corruption
//!
//! `kfree` of an object whose free word carries the tag walks the lists the object could be on
//! and panics with "double kfree" if it is found there: a double free is always detected as long
//! as the object is still free and its free word intact, and a live object whose payload happens
//! to look like a free word is never rejected. Not detected: freeing an object again after it
//! was reallocated (that frees the new owner's object: a use-after-free in the caller), or after
//! a stray write cleared its tag. Allocation panics when the object it pops has lost its tag or
//! holds an out-of-range link (a write after free), rather than handing out a wild object.
//! `kfree` of an address that is not the start of an object of this allocator panics too.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crossbeam_utils::CachePadded;
use pagelab_sync::stats::{WaitTimer, enabled as lock_stats_enabled};
use pagelab_sync::{Backoff, LockKind, LockStatsSnapshot, SpinLock};

use crate::alloc::{Gfp, Mem};
use crate::cpu::CpuId;
use crate::list::PageList;
use crate::page::{PAGE_SIZE, Page, Pfn, pg};

/// The kmalloc size classes (`kmalloc_info[]` from 8 bytes up, with the 96 and 192 byte caches).
pub const KMALLOC_SIZES: [usize; 13] = [
    8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
];
/// Largest kmalloc size served by a slab cache (`KMALLOC_MAX_CACHE_SIZE` with 4 KiB pages).
pub const KMALLOC_MAX_SIZE: usize = 8192;
/// `slub_max_order`: slabs are never larger than 2^3 frames.
pub const SLUB_MAX_ORDER: u32 = 3;
/// `MIN_PARTIAL` and `MAX_PARTIAL`: the range of a cache's `min_partial`.
pub const MIN_PARTIAL: usize = 5;
pub const MAX_PARTIAL: usize = 10;

/// Upper half of a free object's first word. A live object's first word is zeroed when it is
/// handed out, so only a free object (or a payload that happens to match) carries the tag.
pub const FREE_TAG: u64 = 0xf7ee_5ab0 << 32;
const FREE_TAG_MASK: u64 = 0xffff_ffff << 32;

/// Size class of each request size up to 192 bytes, in steps of 8 (`kmalloc_size_index`):
/// above that, classes are powers of two.
const SMALL_INDEX: [u8; 24] = {
    let mut t = [0u8; 24];
    let mut i = 0;
    while i < t.len() {
        let size = (i + 1) * 8;
        let mut c = 0;
        while KMALLOC_SIZES[c] < size {
            c += 1;
        }
        t[i] = c as u8;
        i += 1;
    }
    t
};

/// Index into [`KMALLOC_SIZES`] of the smallest class holding `size` bytes (`kmalloc_index`).
pub fn kmalloc_index(size: usize) -> Option<usize> {
    match size {
        0 => None,
        1..=192 => Some(SMALL_INDEX[(size - 1) / 8] as usize),
        // ceil(log2(size)) - 1: 256 -> 7, ..., 8192 -> 12.
        193..=KMALLOC_MAX_SIZE => Some((usize::BITS - (size - 1).leading_zeros()) as usize - 1),
        _ => None,
    }
}

/// Find last set bit, 1-based (`fls`): 0 for 0.
fn fls(x: usize) -> u32 {
    usize::BITS - x.leading_zeros()
}

/// Smallest order whose block holds `bytes` (`get_order`). Also what `kmalloc_large` sizes its
/// page blocks by (the netpipe workload's kmalloc).
pub fn get_order(bytes: usize) -> u32 {
    bytes
        .div_ceil(PAGE_SIZE)
        .max(1)
        .next_power_of_two()
        .trailing_zeros()
}

/// SLUB's default minimum of objects per slab for a machine of `nr_cpus`: more CPUs, bigger
/// slabs, so that each CPU slab serves more allocations between trips to the node.
pub fn min_objects(nr_cpus: usize) -> usize {
    4 * (fls(nr_cpus) as usize + 1)
}

/// The smallest order from the one holding `min_objects` objects up to `max_order` whose
/// leftover is at most 1/`fraction` of the slab (`calc_slab_order`).
fn slab_order(size: usize, min_objects: usize, max_order: u32, fraction: usize) -> Option<u32> {
    (get_order(size * min_objects)..=max_order).find(|&order| {
        let bytes = PAGE_SIZE << order;
        bytes % size <= bytes / fraction
    })
}

/// Slab order for objects of `size` bytes on a machine of `nr_cpus` (`calculate_order`).
///
/// Tries, in this order of preference: [`min_objects`] objects (capped at what an order-3 slab
/// holds) with at most 1/16, 1/8, then 1/4 of the slab wasted; the same with one object fewer,
/// down to two objects; then one object per slab with any waste, at the smallest order that
/// holds it (above `slub_max_order` only for objects larger than 32 KiB).
pub fn calculate_order(size: usize, nr_cpus: usize) -> u32 {
    assert!(size > 0, "calculate_order of a zero size");
    let max_objects = (PAGE_SIZE << SLUB_MAX_ORDER) / size;
    let mut min_objects = min_objects(nr_cpus).min(max_objects);
    while min_objects > 1 {
        for fraction in [16, 8, 4] {
            if let Some(order) = slab_order(size, min_objects, SLUB_MAX_ORDER, fraction) {
                return order;
            }
        }
        min_objects -= 1;
    }
    get_order(size)
}

/// Why a kmalloc failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlabError {
    #[error("kmalloc of {0} bytes: sizes from 1 to {KMALLOC_MAX_SIZE} are served by slab caches")]
    InvalidSize(usize),
    #[error("out of memory: no order-{order} block for a new slab of {size}-byte objects")]
    OutOfMemory { size: usize, order: u32 },
}

/// The address of an object: its frame and byte offset in that frame. An object of a
/// multi-frame slab may start in any frame of it, and may extend into the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Obj {
    pub pfn: Pfn,
    pub offset: u32,
}

impl Obj {
    /// The `i`-th 8-byte word of the object (objects are 8-byte aligned and sized). The caller
    /// keeps `i` within the object's size; the word may lie in the next frame of the slab.
    #[inline]
    pub fn word<'a>(&self, mem: &'a Mem, i: usize) -> &'a AtomicU64 {
        let byte = self.offset as usize + 8 * i;
        &mem.arena()
            .words(self.pfn.offset((byte / PAGE_SIZE) as u32))[(byte % PAGE_SIZE) / 8]
    }

    /// The first `n` words of the object, to write or verify a payload.
    pub fn words<'a>(
        &self,
        mem: &'a Mem,
        n: usize,
    ) -> impl Iterator<Item = &'a AtomicU64> + use<'a> {
        let obj = *self;
        (0..n).map(move |i| obj.word(mem, i))
    }
}

/// Event counters of a cache, after SLUB's `CONFIG_SLUB_STATS` (`/sys/kernel/slab/*/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Ev {
    AllocFastpath,
    AllocRefill,
    AllocFromPartial,
    AllocSlab,
    FreeFastpath,
    FreeRemote,
    FreeSlab,
    DeactivateFull,
    CpuslabFlush,
    SlabLockAcquired,
    SlabLockContended,
    SlabLockWaitNs,
}

const NR_EV: usize = Ev::SlabLockWaitNs as usize + 1;

/// A cache's event counts, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabStats {
    /// Allocations served from the CPU freelist (`alloc_fastpath`).
    pub alloc_fastpath: u64,
    /// Allocations after taking the CPU slab's remote frees (`alloc_refill`).
    pub alloc_refill: u64,
    /// Allocations after freezing a slab from the node partial list (`alloc_from_partial`).
    pub alloc_from_partial: u64,
    /// Allocations after allocating a new slab from the page allocator (`alloc_slab`).
    pub alloc_slab: u64,
    /// Frees onto the freeing CPU's own freelist (`free_fastpath`).
    pub free_fastpath: u64,
    /// Frees onto a slab freelist under `slab_lock` (`free_slowpath`).
    pub free_remote: u64,
    /// Slabs returned to the page allocator (`free_slab`).
    pub free_slab: u64,
    /// CPU slabs unfrozen because they had no free object left (`deactivate_full`).
    pub deactivate_full: u64,
    /// CPU slabs flushed by a shrink (`cpuslab_flush`).
    pub cpuslab_flush: u64,
}

impl SlabStats {
    /// Successful kmallocs.
    pub fn allocs(&self) -> u64 {
        self.alloc_fastpath + self.alloc_refill + self.alloc_from_partial + self.alloc_slab
    }

    /// kfrees.
    pub fn frees(&self) -> u64 {
        self.free_fastpath + self.free_remote
    }
}

impl std::ops::AddAssign for SlabStats {
    fn add_assign(&mut self, o: Self) {
        self.alloc_fastpath += o.alloc_fastpath;
        self.alloc_refill += o.alloc_refill;
        self.alloc_from_partial += o.alloc_from_partial;
        self.alloc_slab += o.alloc_slab;
        self.free_fastpath += o.free_fastpath;
        self.free_remote += o.free_remote;
        self.free_slab += o.free_slab;
        self.deactivate_full += o.deactivate_full;
        self.cpuslab_flush += o.cpuslab_flush;
    }
}

/// The lock of a CPU's slot in a cache (`kmem_cache_cpu`; a local lock in the kernel).
pub static SLAB_CPU_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("kmem_cache_cpu lock", pagelab_sync::Scope::Cpu);
/// `kmem_cache_node->list_lock`: one per cache, and the engine's nodes share one.
pub static SLAB_LIST_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("list_lock", pagelab_sync::Scope::Machine);

/// Statistics of the slab allocator's three lock classes, summed over instances. The CPU locks
/// and `list_lock` count through `pagelab-sync` (per class: [`SLAB_CPU_LOCK`],
/// [`SLAB_LIST_LOCK`]); `slab_lock` is a bit in a frame's flags and is counted here, in the CPU's
/// own slot, under the same process-wide switch (`pagelab_sync::stats::set_enabled`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabLockStats {
    pub cpu_lock: LockStatsSnapshot,
    pub list_lock: LockStatsSnapshot,
    pub slab_lock: LockStatsSnapshot,
}

impl std::ops::AddAssign for SlabLockStats {
    fn add_assign(&mut self, o: Self) {
        self.cpu_lock += o.cpu_lock;
        self.list_lock += o.list_lock;
        self.slab_lock += o.slab_lock;
    }
}

/// One cache's slabs and objects by state, from [`SlabAllocator::check`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCensus {
    pub slabs: u64,
    /// Frames of those slabs.
    pub pages: u64,
    /// Frozen slabs (one per CPU at most).
    pub cpu_slabs: u64,
    /// Slabs on the node partial list, empty ones included.
    pub partial: u64,
    /// Partial slabs with no object in use (kept for reuse, up to `min_partial`).
    pub empty: u64,
    /// Unfrozen slabs without a free object, on no list.
    pub full: u64,
    pub objects_in_use: u64,
    pub objects_free: u64,
}

impl std::ops::AddAssign for CacheCensus {
    fn add_assign(&mut self, o: Self) {
        self.slabs += o.slabs;
        self.pages += o.pages;
        self.cpu_slabs += o.cpu_slabs;
        self.partial += o.partial;
        self.empty += o.empty;
        self.full += o.full;
        self.objects_in_use += o.objects_in_use;
        self.objects_free += o.objects_free;
    }
}

/// Every cache's census, in the order of [`SlabAllocator::caches`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlabCensus {
    pub caches: Vec<CacheCensus>,
}

impl SlabCensus {
    /// Sum over caches.
    pub fn total(&self) -> CacheCensus {
        let mut t = CacheCensus::default();
        for c in &self.caches {
            t += *c;
        }
        t
    }
}

/// A CPU's view of a cache (`struct kmem_cache_cpu`).
#[derive(Debug, Default)]
struct CpuSlab {
    /// The frozen slab this CPU allocates from (`c->slab`).
    slab: Option<Pfn>,
    /// The CPU freelist: first free object's index + 1, 0 = empty (`c->freelist`).
    freelist: u32,
}

/// One CPU's slot of a cache: its lock-protected state and its event counters, in one padded
/// block so that the fast path touches a single line owned by the CPU.
struct CpuSlot {
    cpu: SpinLock<CpuSlab>,
    events: [AtomicU64; NR_EV],
}

impl CpuSlot {
    #[inline]
    fn count(&self, ev: Ev, n: u64) {
        self.events[ev as usize].fetch_add(n, Relaxed);
    }

    fn event(&self, ev: Ev) -> u64 {
        self.events[ev as usize].load(Relaxed)
    }
}

/// `slab_lock`: a bit spinlock on `PG_locked` of a slab's head frame. Waiters spin, then yield
/// (the engine runs more threads than cores, so a holder may be descheduled).
struct SlabLock<'a> {
    page: &'a Page,
}

impl<'a> SlabLock<'a> {
    #[inline]
    fn lock(page: &'a Page, slot: &CpuSlot) -> Self {
        if page.flags.fetch_or(pg::LOCKED, Acquire) & pg::LOCKED != 0 {
            Self::wait(page, slot);
        } else if lock_stats_enabled() {
            slot.count(Ev::SlabLockAcquired, 1);
        }
        SlabLock { page }
    }

    #[cold]
    fn wait(page: &Page, slot: &CpuSlot) {
        let timer = WaitTimer::start();
        let mut backoff = Backoff::new();
        loop {
            // Test before test-and-set: wait on a shared copy of the line, not by writing it.
            while page.flags.load(Relaxed) & pg::LOCKED != 0 {
                backoff.snooze();
            }
            if page.flags.fetch_or(pg::LOCKED, Acquire) & pg::LOCKED == 0 {
                break;
            }
        }
        if let Some(ns) = timer.elapsed_ns() {
            slot.count(Ev::SlabLockAcquired, 1);
            slot.count(Ev::SlabLockContended, 1);
            slot.count(Ev::SlabLockWaitNs, ns);
        }
    }
}

impl Drop for SlabLock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.page.flags.fetch_and(!pg::LOCKED, Release);
    }
}

/// Whether a free into `page` will probably need `list_lock`, from unlocked reads: an unfrozen
/// slab that is full (becomes partial) or about to be empty (may be freed). `list_lock` nests
/// outside `slab_lock`, so it must be taken before the state can be read for sure.
#[inline]
fn guess_needs_list(page: &Page) -> bool {
    #[cfg(test)]
    if tests::NO_GUESS.get() {
        return false;
    }
    page.memcg.load(Relaxed) == 0
        && (page.private.load(Relaxed) == 0 || page.index.load(Relaxed) <= 1)
}

/// One size class (`struct kmem_cache`). See the module documentation.
pub struct KmemCache {
    name: String,
    /// `mapping` of this cache's slab heads: allocator id << 16 | cache index.
    tag: u64,
    size: u32,
    order: u32,
    objects: u32,
    min_partial: usize,
    /// One slot per CPU, and one more for `shrink`'s counters.
    cpus: Box<[CachePadded<CpuSlot>]>,
    /// `list_lock` and the node partial list it protects.
    node: CachePadded<SpinLock<PageList>>,
}

impl KmemCache {
    fn new(size: usize, nr_cpus: usize, kind: LockKind, tag: u64) -> KmemCache {
        let order = calculate_order(size, nr_cpus);
        let name = if size >= 1024 {
            format!("kmalloc-{}k", size / 1024)
        } else {
            format!("kmalloc-{size}")
        };
        KmemCache {
            name,
            tag,
            size: size as u32,
            order,
            objects: ((PAGE_SIZE << order) / size) as u32,
            min_partial: (size.ilog2() as usize / 2).clamp(MIN_PARTIAL, MAX_PARTIAL),
            cpus: (0..=nr_cpus)
                .map(|_| {
                    CachePadded::new(CpuSlot {
                        cpu: SpinLock::new(kind, CpuSlab::default()).with_class(&SLAB_CPU_LOCK),
                        events: std::array::from_fn(|_| AtomicU64::new(0)),
                    })
                })
                .collect(),
            node: CachePadded::new(
                SpinLock::new(kind, PageList::new()).with_class(&SLAB_LIST_LOCK),
            ),
        }
    }

    /// `kmalloc-512`, `kmalloc-1k`: the kernel's `/proc/slabinfo` names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Object size in bytes.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// Slab order.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Bytes of one slab.
    pub fn slab_bytes(&self) -> usize {
        PAGE_SIZE << self.order
    }

    pub fn objects_per_slab(&self) -> u32 {
        self.objects
    }

    /// Partial slabs kept when they become empty, instead of being freed.
    pub fn min_partial(&self) -> usize {
        self.min_partial
    }

    /// Slabs on the node partial list now.
    pub fn nr_partial(&self) -> usize {
        self.node.lock().len()
    }

    /// Event counts, summed over CPUs.
    pub fn stats(&self) -> SlabStats {
        let sum = |ev| self.cpus.iter().map(|s| s.event(ev)).sum();
        SlabStats {
            alloc_fastpath: sum(Ev::AllocFastpath),
            alloc_refill: sum(Ev::AllocRefill),
            alloc_from_partial: sum(Ev::AllocFromPartial),
            alloc_slab: sum(Ev::AllocSlab),
            free_fastpath: sum(Ev::FreeFastpath),
            free_remote: sum(Ev::FreeRemote),
            free_slab: sum(Ev::FreeSlab),
            deactivate_full: sum(Ev::DeactivateFull),
            cpuslab_flush: sum(Ev::CpuslabFlush),
        }
    }

    /// Statistics of this cache's `slab_lock`s (the CPU locks and `list_lock` are counted per
    /// class, over every cache: [`SlabAllocator::lock_stats`]).
    pub fn slab_lock_stats(&self) -> LockStatsSnapshot {
        let sum = |ev| self.cpus.iter().map(|s| s.event(ev)).sum();
        LockStatsSnapshot {
            acquisitions: sum(Ev::SlabLockAcquired),
            contended: sum(Ev::SlabLockContended),
            wait_ns: sum(Ev::SlabLockWaitNs),
        }
    }

    fn reset_stats(&self) {
        for s in self.cpus.iter() {
            for e in &s.events {
                e.store(0, Relaxed);
            }
        }
    }

    fn nr_cpus(&self) -> usize {
        self.cpus.len() - 1
    }

    #[inline]
    fn slot(&self, cpu: CpuId) -> &CpuSlot {
        assert!(
            cpu.idx() < self.nr_cpus(),
            "CPU {} out of range: the memory has {} CPUs",
            cpu.0,
            self.nr_cpus()
        );
        &self.cpus[cpu.idx()]
    }

    /// The slot `shrink` and `check` count their events in.
    fn shrinker_slot(&self) -> &CpuSlot {
        &self.cpus[self.nr_cpus()]
    }

    #[inline]
    fn obj(&self, head: Pfn, idx: u32) -> Obj {
        let off = idx as usize * self.size as usize;
        Obj {
            pfn: head.offset((off / PAGE_SIZE) as u32),
            offset: (off % PAGE_SIZE) as u32,
        }
    }

    /// The word holding a free object's link.
    #[inline]
    fn free_word<'m>(&self, mem: &'m Mem, head: Pfn, idx: u32) -> &'m AtomicU64 {
        self.obj(head, idx).word(mem, 0)
    }

    /// The link in free word `v` of object `idx`, or a description of why it is not one.
    #[inline]
    fn decode(&self, v: u64, head: Pfn, idx: u32) -> Result<u32, String> {
        let next = v as u32;
        if v & FREE_TAG_MASK != FREE_TAG || next > self.objects {
            return Err(format!(
                "{}: free object {idx} of slab {head:?} is corrupted (free word {v:#x}): written after kfree?",
                self.name
            ));
        }
        Ok(next)
    }

    /// Walk the freelist starting at link `first`, calling `f` with each object index. Fails on
    /// a corrupted link or a cycle.
    fn walk(
        &self,
        mem: &Mem,
        head: Pfn,
        first: u32,
        mut f: impl FnMut(u32),
    ) -> Result<u32, String> {
        let (mut n, mut cur) = (0, first);
        while cur != 0 {
            if n == self.objects {
                return Err(format!(
                    "{}: freelist of slab {head:?} has a cycle",
                    self.name
                ));
            }
            let idx = cur - 1;
            f(idx);
            n += 1;
            cur = self.decode(self.free_word(mem, head, idx).load(Relaxed), head, idx)?;
        }
        Ok(n)
    }

    fn freelist_contains(&self, mem: &Mem, head: Pfn, first: u32, idx: u32) -> bool {
        let mut found = false;
        // A corrupted list is reported by the allocation that reaches the corruption.
        let _ = self.walk(mem, head, first, |i| found |= i == idx);
        found
    }

    #[cold]
    fn double_free(&self, head: Pfn, idx: u32) -> ! {
        panic!(
            "{}: double kfree of {:?} (object {idx} of slab {head:?} is already free)",
            self.name,
            self.obj(head, idx)
        );
    }

    /// `slab_alloc`: pop from the CPU freelist, refilling it first when it is empty.
    fn alloc(&self, mem: &Mem, cpu: CpuId) -> Result<Obj, SlabError> {
        let slot = self.slot(cpu);
        let mut c = slot.cpu.lock();
        if c.freelist == 0 {
            self.refill(mem, cpu, slot, &mut c)?;
        } else {
            slot.count(Ev::AllocFastpath, 1);
        }
        let head = c
            .slab
            .expect("a non-empty CPU freelist belongs to a CPU slab");
        let idx = c.freelist - 1;
        let w = self.free_word(mem, head, idx);
        c.freelist = self
            .decode(w.load(Relaxed), head, idx)
            .unwrap_or_else(|e| panic!("{e}"));
        // A live object carries no free tag, so that kfree's double-free test stays cheap.
        w.store(0, Relaxed);
        drop(c);
        Ok(self.obj(head, idx))
    }

    /// `___slab_alloc`: give the CPU a non-empty freelist.
    #[cold]
    fn refill(
        &self,
        mem: &Mem,
        cpu: CpuId,
        slot: &CpuSlot,
        c: &mut CpuSlab,
    ) -> Result<(), SlabError> {
        let pages = mem.pages();
        if let Some(head) = c.slab {
            // get_freelist: take the objects other CPUs freed into the slab meanwhile.
            let page = &pages[head];
            let lock = SlabLock::lock(page, slot);
            let free = page.private.load(Relaxed);
            if free != 0 {
                page.private.store(0, Relaxed);
                page.index.store(u64::from(self.objects), Relaxed);
                drop(lock);
                c.freelist = free;
                slot.count(Ev::AllocRefill, 1);
                return Ok(());
            }
            // Full: unfreeze. It is on no list until a remote free makes it partial.
            page.memcg.store(0, Relaxed);
            drop(lock);
            c.slab = None;
            slot.count(Ev::DeactivateFull, 1);
        }
        {
            // get_partial: freeze the first slab of the node list.
            let mut node = self.node.lock();
            if let Some(head) = node.pop_front(pages) {
                let page = &pages[head];
                let lock = SlabLock::lock(page, slot);
                let free = page.private.load(Relaxed);
                assert!(
                    free != 0 && page.memcg.load(Relaxed) == 0,
                    "{}: {head:?} on the partial list is frozen or has no free object",
                    self.name
                );
                page.private.store(0, Relaxed);
                page.index.store(u64::from(self.objects), Relaxed);
                page.memcg.store(u32::from(cpu.0) + 1, Relaxed);
                drop(lock);
                drop(node);
                c.slab = Some(head);
                c.freelist = free;
                slot.count(Ev::AllocFromPartial, 1);
                return Ok(());
            }
        }
        let head = self.new_slab(mem, cpu)?;
        c.slab = Some(head);
        c.freelist = 1;
        slot.count(Ev::AllocSlab, 1);
        Ok(())
    }

    /// `new_slab`: a slab from the page allocator, already frozen to `cpu` with every object on
    /// the CPU freelist. No other thread can know of it before its objects are handed out.
    fn new_slab(&self, mem: &Mem, cpu: CpuId) -> Result<Pfn, SlabError> {
        let head = mem
            .alloc_pages(cpu, self.order, Gfp::KERNEL.with_comp())
            .map_err(|_| SlabError::OutOfMemory {
                size: self.size(),
                order: self.order,
            })?;
        for i in 0..self.objects {
            let next = if i + 1 < self.objects { i + 2 } else { 0 };
            self.free_word(mem, head, i)
                .store(FREE_TAG | u64::from(next), Relaxed);
        }
        let page = &mem.pages()[head];
        page.private.store(0, Relaxed);
        page.index.store(u64::from(self.objects), Relaxed);
        page.memcg.store(u32::from(cpu.0) + 1, Relaxed);
        page.mapping.store(self.tag, Relaxed);
        page.set(pg::SLAB);
        Ok(head)
    }

    /// `discard_slab`: give an empty slab that no list or CPU references back to the page
    /// allocator.
    fn discard_slab(&self, mem: &Mem, cpu: CpuId, slot: &CpuSlot, head: Pfn) {
        let page = &mem.pages()[head];
        page.clear(pg::SLAB);
        page.private.store(0, Relaxed);
        page.index.store(0, Relaxed);
        page.memcg.store(0, Relaxed);
        page.mapping.store(0, Relaxed);
        let freed = mem.free_pages(cpu, head, self.order);
        assert!(freed, "{}: slab {head:?} had another reference", self.name);
        slot.count(Ev::FreeSlab, 1);
    }

    /// `slab_free`: object `idx` of slab `head` freed on `cpu`.
    fn free(&self, mem: &Mem, cpu: CpuId, head: Pfn, idx: u32) {
        let slot = self.slot(cpu);
        let w = self.free_word(mem, head, idx);
        let mut c = slot.cpu.lock();
        if c.slab == Some(head) {
            if w.load(Relaxed) & FREE_TAG_MASK == FREE_TAG {
                self.check_double_free_local(mem, slot, &c, head, idx);
            }
            w.store(FREE_TAG | u64::from(c.freelist), Relaxed);
            c.freelist = idx + 1;
            drop(c);
            slot.count(Ev::FreeFastpath, 1);
            return;
        }
        drop(c);
        self.free_remote(mem, cpu, slot, head, idx);
    }

    /// A free word with the tag on the CPU's own slab: the object is free if it is on the CPU
    /// freelist (which the caller's lock protects) or on the slab freelist.
    #[cold]
    fn check_double_free_local(&self, mem: &Mem, slot: &CpuSlot, c: &CpuSlab, head: Pfn, idx: u32) {
        let page = &mem.pages()[head];
        let on_slab_list = {
            let _lock = SlabLock::lock(page, slot);
            self.freelist_contains(mem, head, page.private.load(Relaxed), idx)
        };
        if on_slab_list || self.freelist_contains(mem, head, c.freelist, idx) {
            self.double_free(head, idx);
        }
    }

    /// A free word with the tag on another slab: look on the slab freelist and, if the slab is
    /// frozen, on its owner's CPU freelist, holding the owner's CPU lock (taken first: lock
    /// order) so that neither list can change during the walk.
    #[cold]
    fn on_any_freelist(&self, mem: &Mem, slot: &CpuSlot, head: Pfn, idx: u32) -> bool {
        let page = &mem.pages()[head];
        loop {
            let owner = page.memcg.load(Relaxed);
            let owner_cpu = (owner != 0).then(|| self.cpus[owner as usize - 1].cpu.lock());
            let lock = SlabLock::lock(page, slot);
            // The owner changes only under its CPU lock and slab_lock: stable once both match.
            if page.memcg.load(Relaxed) != owner {
                continue;
            }
            let mut found = self.freelist_contains(mem, head, page.private.load(Relaxed), idx);
            if let Some(c) = &owner_cpu {
                assert_eq!(
                    c.slab,
                    Some(head),
                    "{}: frozen slab not its owner's CPU slab",
                    self.name
                );
                found = found || self.freelist_contains(mem, head, c.freelist, idx);
            }
            drop(lock);
            return found;
        }
    }

    /// `__slab_free`: push onto the slab freelist under `slab_lock`, and move the slab between
    /// full, partial and freed as its new state requires.
    fn free_remote(&self, mem: &Mem, cpu: CpuId, slot: &CpuSlot, head: Pfn, idx: u32) {
        let pages = mem.pages();
        let page = &pages[head];
        let w = self.free_word(mem, head, idx);
        if w.load(Relaxed) & FREE_TAG_MASK == FREE_TAG && self.on_any_freelist(mem, slot, head, idx)
        {
            self.double_free(head, idx);
        }
        let mut node = guess_needs_list(page).then(|| self.node.lock());
        loop {
            let lock = SlabLock::lock(page, slot);
            let prior = page.private.load(Relaxed);
            let inuse = page.index.load(Relaxed);
            let frozen = page.memcg.load(Relaxed) != 0;
            if inuse == 0 {
                // Every object is already on the slab freelist.
                self.double_free(head, idx);
            }
            let was_full = prior == 0;
            let now_empty = inuse == 1;
            let needs_list = !frozen && (was_full || now_empty);
            if needs_list && node.is_none() {
                // The guess was wrong: retake in lock order and decide again.
                drop(lock);
                node = Some(self.node.lock());
                continue;
            }
            w.store(FREE_TAG | u64::from(prior), Relaxed);
            page.private.store(idx + 1, Relaxed);
            page.index.store(inuse - 1, Relaxed);
            let mut discard = false;
            if needs_list {
                let list = node.as_mut().expect("list_lock is held when needed");
                // Partial slabs besides this one (the kernel counts this one too, so that it
                // keeps one empty slab fewer here than when deactivating a CPU slab).
                let others = list.len() - usize::from(!was_full);
                if now_empty && others >= self.min_partial {
                    if !was_full {
                        list.remove(pages, head);
                    }
                    discard = true;
                } else if was_full {
                    list.push_back(pages, head);
                }
            }
            drop(lock);
            drop(node);
            slot.count(Ev::FreeRemote, 1);
            if discard {
                self.discard_slab(mem, cpu, slot, head);
            }
            return;
        }
    }

    /// `deactivate_slab` of CPU `i`'s slab, from any thread: splice its CPU freelist onto the
    /// slab freelist, unfreeze it, and put it on the partial list or free it.
    fn flush_cpu(&self, mem: &Mem, i: usize, by: CpuId) {
        let pages = mem.pages();
        let by_slot = self.shrinker_slot();
        let mut c = self.cpus[i].cpu.lock();
        let Some(head) = c.slab.take() else {
            return;
        };
        let first = std::mem::take(&mut c.freelist);
        let (mut n, mut last) = (0u64, None);
        self.walk(mem, head, first, |o| {
            n += 1;
            last = Some(o);
        })
        .unwrap_or_else(|e| panic!("CPU {i} freelist: {e}"));
        let page = &pages[head];
        let mut node = self.node.lock();
        let lock = SlabLock::lock(page, by_slot);
        if let Some(last) = last {
            let prior = page.private.load(Relaxed);
            self.free_word(mem, head, last)
                .store(FREE_TAG | u64::from(prior), Relaxed);
            page.private.store(first, Relaxed);
        }
        let inuse = page.index.load(Relaxed) - n;
        page.index.store(inuse, Relaxed);
        page.memcg.store(0, Relaxed);
        let discard = inuse == 0 && node.len() >= self.min_partial;
        if !discard && page.private.load(Relaxed) != 0 {
            node.push_front(pages, head);
        }
        drop(lock);
        drop(node);
        drop(c);
        by_slot.count(Ev::CpuslabFlush, 1);
        if discard {
            self.discard_slab(mem, by, by_slot, head);
        }
    }

    /// `kmem_cache_shrink`: flush every CPU slab, then free every empty slab.
    fn shrink(&self, mem: &Mem, by: CpuId) {
        for i in 0..self.nr_cpus() {
            self.flush_cpu(mem, i, by);
        }
        let pages = mem.pages();
        let empty: Vec<Pfn> = {
            let mut node = self.node.lock();
            // Under list_lock an empty partial slab is stable: it has no object to free, and
            // the free that emptied it held list_lock.
            let empty: Vec<Pfn> = node
                .iter(pages)
                .filter(|&p| pages[p].index.load(Relaxed) == 0)
                .collect();
            for &p in &empty {
                node.remove(pages, p);
            }
            empty
        };
        for p in empty {
            self.discard_slab(mem, by, self.shrinker_slot(), p);
        }
    }
}

/// The kmalloc caches over one [`Mem`]. Several allocators may share a `Mem`: each tags its
/// slabs with its own id, so `kfree` of another allocator's object panics instead of corrupting
/// it, and `check` counts only its own slabs.
pub struct SlabAllocator {
    mem: Arc<Mem>,
    id: u64,
    caches: Box<[KmemCache]>,
}

/// Allocator ids, so that slab heads say which allocator they belong to.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl SlabAllocator {
    /// Build the kmalloc caches, their orders computed for `mem`'s CPU count. No slab is
    /// allocated until the first kmalloc of each class.
    pub fn new(mem: Arc<Mem>) -> SlabAllocator {
        let id = NEXT_ID.fetch_add(1, Relaxed);
        let (nr_cpus, kind) = (mem.nr_cpus(), mem.spinlock_kind());
        let caches = KMALLOC_SIZES
            .iter()
            .enumerate()
            .map(|(i, &size)| KmemCache::new(size, nr_cpus, kind, id << 16 | i as u64))
            .collect();
        SlabAllocator { mem, id, caches }
    }

    pub fn mem(&self) -> &Arc<Mem> {
        &self.mem
    }

    /// All caches, smallest first.
    pub fn caches(&self) -> &[KmemCache] {
        &self.caches
    }

    /// The cache serving `size`-byte requests; `None` for 0 and above [`KMALLOC_MAX_SIZE`].
    pub fn cache_for(&self, size: usize) -> Option<&KmemCache> {
        kmalloc_index(size).map(|i| &self.caches[i])
    }

    /// `kmalloc` on `cpu`: an object of at least `size` bytes, 8-byte aligned. Its contents are
    /// undefined except the first word, which is zero.
    pub fn kmalloc(&self, cpu: CpuId, size: usize) -> Result<Obj, SlabError> {
        self.cache_for(size)
            .ok_or(SlabError::InvalidSize(size))?
            .alloc(&self.mem, cpu)
    }

    /// `kfree` on `cpu`, which may be any CPU. Panics on an address that is not a live object
    /// of this allocator (see the module documentation for what is detected).
    pub fn kfree(&self, cpu: CpuId, obj: Obj) {
        let (cache, head, idx) = self.locate(obj);
        cache.free(&self.mem, cpu, head, idx);
    }

    /// `ksize`: the usable size of an object (its class size).
    pub fn ksize(&self, obj: Obj) -> usize {
        self.locate(obj).0.size()
    }

    /// The cache, slab head and object index of `obj`, from the head frame (`virt_to_slab`,
    /// `obj_to_index`).
    fn locate(&self, obj: Obj) -> (&KmemCache, Pfn, u32) {
        let pages = self.mem.pages();
        assert!(
            obj.pfn.idx() < pages.len() && (obj.offset as usize) < PAGE_SIZE,
            "kfree of {obj:?}: outside the arena"
        );
        let head = self.mem.compound_head(obj.pfn);
        let page = &pages[head];
        let tag = page.mapping.load(Relaxed);
        if !page.test(pg::SLAB) || tag >> 16 != self.id {
            panic!("kfree of {obj:?}: not a slab object of this allocator");
        }
        let cache = &self.caches[(tag & 0xffff) as usize];
        let off = (obj.pfn.0 - head.0) as usize * PAGE_SIZE + obj.offset as usize;
        if !off.is_multiple_of(cache.size()) || off / cache.size() >= cache.objects as usize {
            panic!("kfree of {obj:?}: not the start of a {} object", cache.name);
        }
        (cache, head, (off / cache.size()) as u32)
    }

    /// Event counts summed over caches (each cache has its own [`KmemCache::stats`]).
    pub fn stats(&self) -> SlabStats {
        let mut s = SlabStats::default();
        for c in self.caches.iter() {
            s += c.stats();
        }
        s
    }

    /// Lock statistics per lock class, summed over caches. The CPU locks and `list_lock` are
    /// counted per class in the machine's domain, so they include any other slab allocator on
    /// the same machine.
    pub fn lock_stats(&self) -> SlabLockStats {
        let d = self.mem.lock_stat_domain();
        SlabLockStats {
            cpu_lock: d.class(&SLAB_CPU_LOCK).exclusive,
            list_lock: d.class(&SLAB_LIST_LOCK).exclusive,
            slab_lock: self.caches.iter().map(|c| c.slab_lock_stats()).sum(),
        }
    }

    /// Zero event counters and lock statistics (between a warm-up and a measurement).
    pub fn reset_stats(&self) {
        let d = self.mem.lock_stat_domain();
        d.reset_class(&SLAB_CPU_LOCK);
        d.reset_class(&SLAB_LIST_LOCK);
        for c in self.caches.iter() {
            c.reset_stats();
        }
    }

    /// `kmem_cache_shrink` of every cache: flush the CPU slabs (taking each CPU's lock, as the
    /// kernel's `flush_all` interrupts each CPU) and free every empty slab, so that only slabs
    /// with live objects keep frames. Slab frames are freed on CPU 0's pcp; see
    /// [`SlabAllocator::shrink_on`]. Safe to run concurrently with kmalloc and kfree.
    pub fn shrink(&self) {
        self.shrink_on(CpuId(0));
    }

    /// [`SlabAllocator::shrink`], freeing frames as `cpu`.
    pub fn shrink_on(&self, cpu: CpuId) {
        for c in self.caches.iter() {
            c.shrink(&self.mem, cpu);
        }
    }

    /// Check every slab invariant (module documentation) and count slabs and objects by state.
    /// Call only while no other thread uses the allocator. Returns the first violation found.
    pub fn check(&self) -> Result<SlabCensus, String> {
        use std::collections::HashSet;
        let pages = self.mem.pages();
        let mut cpu_slabs = Vec::with_capacity(self.caches.len());
        let mut partial = Vec::with_capacity(self.caches.len());
        for cache in self.caches.iter() {
            let cpus: Vec<(Option<Pfn>, u32)> = cache
                .cpus
                .iter()
                .map(|s| {
                    let c = s.cpu.lock();
                    (c.slab, c.freelist)
                })
                .collect();
            let node = cache.node.lock();
            let mut set = HashSet::new();
            for p in node.iter(pages) {
                if !set.insert(p) {
                    return Err(format!("{}: {p:?} twice on the partial list", cache.name));
                }
            }
            if set.len() != node.len() {
                return Err(format!(
                    "{}: partial list says {} slabs but links {}",
                    cache.name,
                    node.len(),
                    set.len()
                ));
            }
            drop(node);
            for (cpu, &(slab, freelist)) in cpus.iter().enumerate() {
                match slab {
                    None if freelist != 0 => {
                        return Err(format!(
                            "{}: CPU {cpu} has a freelist but no slab",
                            cache.name
                        ));
                    }
                    None => {}
                    Some(h) => {
                        let p = &pages[h];
                        if cpu == cache.nr_cpus()
                            || !p.test(pg::SLAB)
                            || p.mapping.load(Relaxed) != cache.tag
                            || p.memcg.load(Relaxed) as usize != cpu + 1
                            || set.contains(&h)
                        {
                            return Err(format!(
                                "{}: CPU {cpu}'s slab {h:?} is not a slab of this cache frozen to it and off the lists",
                                cache.name
                            ));
                        }
                    }
                }
            }
            for &h in &set {
                let p = &pages[h];
                if !p.test(pg::SLAB)
                    || p.mapping.load(Relaxed) != cache.tag
                    || p.memcg.load(Relaxed) != 0
                {
                    return Err(format!(
                        "{}: {h:?} on the partial list is not an unfrozen slab of this cache",
                        cache.name
                    ));
                }
            }
            cpu_slabs.push(cpus);
            partial.push(set);
        }

        let mut census = SlabCensus {
            caches: vec![CacheCensus::default(); self.caches.len()],
        };
        let mut pfn = 0usize;
        while pfn < pages.len() {
            let head = Pfn(pfn as u32);
            let p = &pages[head];
            let tag = p.mapping.load(Relaxed);
            if !p.test(pg::SLAB) || tag >> 16 != self.id {
                pfn += 1;
                continue;
            }
            let ci = (tag & 0xffff) as usize;
            let Some(cache) = self.caches.get(ci) else {
                return Err(format!(
                    "slab {head:?} names cache {ci}, which does not exist"
                ));
            };
            let name = &cache.name;
            let nr = 1usize << cache.order;
            if p.flags() & (pg::TAIL | pg::LOCKED | pg::BUDDY | pg::PCP) != 0
                || p.test(pg::HEAD) != (cache.order > 0)
                || p.refcount.load(Relaxed) != 1
                || pfn + nr > pages.len()
            {
                return Err(format!(
                    "{name}: slab {head:?} has flags {:#x}, refcount {}",
                    p.flags(),
                    p.refcount.load(Relaxed)
                ));
            }
            for t in 1..nr {
                let tp = &pages[head.offset(t as u32)];
                if !tp.test(pg::TAIL) || tp.test(pg::SLAB) || tp.private.load(Relaxed) != head.0 {
                    return Err(format!(
                        "{name}: frame {t} of slab {head:?} is not its tail"
                    ));
                }
            }
            let mut free = vec![false; cache.objects as usize];
            let mut dup = None;
            let mut mark = |i: u32| {
                if std::mem::replace(&mut free[i as usize], true) {
                    dup = Some(i);
                }
            };
            let on_slab_list = cache.walk(&self.mem, head, p.private.load(Relaxed), &mut mark)?;
            let owner = p.memcg.load(Relaxed) as usize;
            let mut on_cpu_list = 0;
            let cc = &mut census.caches[ci];
            if owner != 0 {
                match cpu_slabs[ci].get(owner - 1) {
                    Some(&(Some(h), freelist)) if h == head => {
                        on_cpu_list = cache.walk(&self.mem, head, freelist, &mut mark)?;
                    }
                    _ => {
                        return Err(format!(
                            "{name}: slab {head:?} is frozen to CPU {} but is not its CPU slab",
                            owner - 1
                        ));
                    }
                }
                cc.cpu_slabs += 1;
            } else if partial[ci].contains(&head) {
                if on_slab_list == 0 {
                    return Err(format!(
                        "{name}: slab {head:?} on the partial list has no free object"
                    ));
                }
                cc.partial += 1;
                if on_slab_list == cache.objects {
                    cc.empty += 1;
                }
            } else if on_slab_list != 0 {
                return Err(format!(
                    "{name}: unfrozen slab {head:?} with {on_slab_list} free objects is not on the partial list"
                ));
            } else {
                cc.full += 1;
            }
            if let Some(i) = dup {
                return Err(format!(
                    "{name}: object {i} of slab {head:?} is on a freelist twice"
                ));
            }
            let inuse = p.index.load(Relaxed);
            if inuse + u64::from(on_slab_list) != u64::from(cache.objects) {
                return Err(format!(
                    "{name}: slab {head:?} has inuse {inuse} and {on_slab_list} objects on its freelist, of {}",
                    cache.objects
                ));
            }
            let nfree = u64::from(on_slab_list + on_cpu_list);
            cc.slabs += 1;
            cc.pages += nr as u64;
            cc.objects_free += nfree;
            cc.objects_in_use += u64::from(cache.objects) - nfree;
            pfn += nr;
        }
        Ok(census)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemConfig, Policy};

    thread_local! {
        /// Set by a test to make every remote free start without `list_lock`, as when the
        /// unlocked guess loses a race, so that the drop-and-retake path runs deterministically.
        pub(super) static NO_GUESS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    fn slab(nr_cpus: usize) -> SlabAllocator {
        let mem = Mem::new(&MemConfig::new(16 << 20, nr_cpus), &Policy::default()).unwrap();
        SlabAllocator::new(Arc::new(mem))
    }

    #[test]
    fn kmalloc_index_is_the_smallest_fitting_class() {
        assert_eq!(kmalloc_index(0), None);
        assert_eq!(kmalloc_index(KMALLOC_MAX_SIZE + 1), None);
        for size in 1..=KMALLOC_MAX_SIZE {
            let linear = KMALLOC_SIZES.iter().position(|&s| s >= size);
            assert_eq!(kmalloc_index(size), linear, "size {size}");
        }
    }

    #[test]
    fn calculate_order_relaxes_waste_then_object_count() {
        // 5000 B, 2 CPUs: six objects (an order-3 slab's worth) leave 2768 B: more than 1/16
        // of 32 KiB, within 1/8.
        assert_eq!(calculate_order(5000, 2), 3);
        // 12000 B: two objects waste more than 1/4 at every order up to 3, so one object per
        // slab at the smallest order that holds it.
        assert_eq!(calculate_order(12000, 2), 2);
        // Larger than an order-3 slab: the order that holds one object.
        assert_eq!(calculate_order(40000, 2), 4);
        assert_eq!(min_objects(1), 8);
        assert_eq!(min_objects(2), 12);
        assert_eq!(min_objects(8), 20);
        assert_eq!(get_order(1), 0);
        assert_eq!(get_order(4097), 1);
        assert_eq!(get_order(32768), 3);
    }

    #[test]
    fn new_slab_state_lives_in_the_head_frame() {
        let sa = slab(2);
        let obj = sa.kmalloc(CpuId(1), 1000).unwrap();
        let cache = sa.cache_for(1000).unwrap();
        assert_eq!(cache.name(), "kmalloc-1k");
        let head = sa.mem().compound_head(obj.pfn);
        let p = &sa.mem().pages()[head];
        assert!(p.test(pg::SLAB) && p.test(pg::HEAD));
        assert_eq!(
            p.private.load(Relaxed),
            0,
            "every free object is on the CPU freelist"
        );
        assert_eq!(p.index.load(Relaxed), u64::from(cache.objects_per_slab()));
        assert_eq!(p.memcg.load(Relaxed), 2, "frozen to CPU 1");
        assert_eq!(
            obj.word(sa.mem(), 0).load(Relaxed),
            0,
            "live objects carry no tag"
        );
        // The second object's free word links to the third.
        let second = cache.obj(head, 1);
        assert_eq!(second.word(sa.mem(), 0).load(Relaxed), FREE_TAG | 3);
        sa.kfree(CpuId(1), obj);
        assert_eq!(obj.word(sa.mem(), 0).load(Relaxed), FREE_TAG | 2);
        sa.check().unwrap();
    }

    #[test]
    fn remote_free_retakes_locks_in_order_when_the_guess_is_wrong() {
        NO_GUESS.set(true);
        let sa = slab(2);
        let cache = sa.cache_for(512).unwrap();
        let n = 8 * cache.objects_per_slab() as usize;
        let objs: Vec<Obj> = (0..n).map(|_| sa.kmalloc(CpuId(0), 512).unwrap()).collect();
        // CPU 0's last slab is exhausted too: the next kmalloc unfreezes it.
        let last = sa.kmalloc(CpuId(0), 512).unwrap();
        for &o in &objs {
            sa.kfree(CpuId(1), o);
        }
        NO_GUESS.set(false);
        // Eight full slabs became partial, then empty: five kept, three freed.
        let c = sa.check().unwrap().caches[8];
        assert_eq!(
            (c.partial, c.empty, c.full),
            (cache.min_partial() as u64, 5, 0),
            "{c:?}"
        );
        assert_eq!(cache.stats().free_slab, 3);
        sa.kfree(CpuId(0), last);
        sa.shrink();
        assert_eq!(sa.check().unwrap().total().pages, 0);
        assert_eq!(sa.mem().check().unwrap().allocated, 0);
    }

    #[test]
    fn live_object_that_looks_free_is_not_a_double_free() {
        let sa = slab(2);
        let mem = sa.mem().clone();
        // Local path: the object's slab is the freeing CPU's slab.
        let a = sa.kmalloc(CpuId(0), 64).unwrap();
        a.word(&mem, 0).store(FREE_TAG | 1, Relaxed);
        sa.kfree(CpuId(0), a);
        // Remote path, frozen slab of another CPU.
        let b = sa.kmalloc(CpuId(0), 64).unwrap();
        b.word(&mem, 0).store(FREE_TAG, Relaxed);
        sa.kfree(CpuId(1), b);
        // Remote path, slab that is not frozen.
        let c = sa.kmalloc(CpuId(0), 64).unwrap();
        sa.shrink();
        c.word(&mem, 0).store(FREE_TAG | 5, Relaxed);
        sa.kfree(CpuId(1), c);
        let census = sa.check().unwrap();
        assert_eq!(census.total().objects_in_use, 0);
        assert_eq!(sa.stats().frees(), 3);
    }

    #[test]
    #[should_panic(expected = "is corrupted")]
    fn write_after_free_is_caught_by_the_next_allocation() {
        let sa = slab(1);
        let a = sa.kmalloc(CpuId(0), 32).unwrap();
        sa.kfree(CpuId(0), a);
        a.word(sa.mem(), 0).store(0xdead_beef, Relaxed);
        let _ = sa.kmalloc(CpuId(0), 32);
    }

    #[test]
    fn check_reports_a_corrupted_freelist() {
        let sa = slab(1);
        let a = sa.kmalloc(CpuId(0), 128).unwrap();
        let b = sa.kmalloc(CpuId(0), 128).unwrap();
        sa.kfree(CpuId(0), a);
        sa.check().unwrap();
        // Link the free object to itself: a cycle.
        let link = u64::from(a.offset) / 128 + 1;
        let saved = a.word(sa.mem(), 0).swap(FREE_TAG | link, Relaxed);
        let err = sa.check().unwrap_err();
        assert!(err.contains("twice") || err.contains("cycle"), "{err}");
        a.word(sa.mem(), 0).store(saved, Relaxed);
        sa.kfree(CpuId(0), b);
        sa.check().unwrap();
    }
}
