//! An LLFree-style lock-free page-frame allocator (`alloc.allocator = "llfree"`).
//!
//! LLFree (Wrenger, Rommel, Halbuer, Dietrich, Lohmann: "LLFree: Scalable and
//! Optionally-Persistent Page-Frame Allocation", USENIX ATC'23) replaces both the buddy lists
//! and the per-CPU page lists of Linux with two levels of atomically updated counters and
//! bits, so that no allocation or free takes a lock and CPUs working in different parts of
//! memory share no cache line:
//!
//! - **Lower level**: one bit per 4 KiB frame, kept as a 512-bit bitfield per 2 MiB huge frame
//!   (eight 64-bit words: exactly one cache line). An order-0 allocation sets one clear bit with
//!   a compare-and-exchange on its word; orders up to 6 set an aligned run of bits inside one
//!   word; orders 7 and 8 take two or four whole words, one exchange each, undone if a later one
//!   loses. A free clears the bits with one `fetch_and`.
//! - **Huge-frame counters** (the paper's "children"): per huge frame, a 16-bit word with its
//!   free-frame count and a flag saying it was handed out whole. An order-9 allocation turns a
//!   fully free child into a huge one with one exchange and never touches the bitfield; order 10
//!   does so on two aligned neighbours.
//! - **Trees**: groups of [`TREE_HUGE`] huge frames (16 MiB) with an atomic free-frame count and
//!   a "reserved" flag.
//! - **Per-CPU reservations**: a CPU allocates from the tree it has reserved. Reserving moves the
//!   tree's whole free count into the CPU's local reservation word, so the allocation fast path
//!   decrements a counter no other CPU writes; the tree's shared counter is touched again only
//!   when the reservation runs dry. Then the CPU takes what other CPUs freed into its tree
//!   meanwhile (`sync`), or reserves another tree, searching with atomics and preferring, as the
//!   paper does, partially allocated trees over free ones (free trees stay whole for huge frames
//!   and other CPUs), or steals another CPU's reservation, or as a last resort takes frames from
//!   any tree's shared counter without reserving it.
//!
//! Frees go straight back to the frame's bitfield and counters: to the freeing CPU's reservation
//! count when the frame lies in the tree it has reserved, to the tree's shared counter
//! otherwise. There are no per-CPU free lists: with this allocator the engine's pcp layer is not
//! used at all (the profile must say `pcp.lists = "none"`), as LLFree replaces both the buddy
//! allocator and the per-CPU lists.
//!
//! Accounting: the zone's `NR_FREE_PAGES`, which the watermark checks and kswapd read, is kept
//! as Linux keeps it, per CPU: each CPU accumulates a delta and folds it into the zone's counter
//! when it passes the zone's `stat_threshold` (`__mod_zone_page_state`, mm/vmstat.c, with the
//! threshold of `calculate_normal_threshold`). A drain (`drain_all_pages` on the slow path)
//! folds every delta, as `refresh_cpu_vm_stats` would, so that the allocation that decides to
//! fail sees the exact count.
//!
//! Not modelled: the paper's persistence and crash recovery, its "last frees" heuristic (a CPU
//! that keeps freeing into another tree reserves it), separate reservations per mobility type
//! and for huge frames (the engine's callers pass a migratetype, which this allocator ignores),
//! and compaction.
//!
//! Shared lines: every read-modify-write of a tree counter, of another CPU's reservation (a
//! steal or drain) and of the zone's free count is recorded with [`pagelab_sync::trace::atomic`]
//! under node-scoped classes, and so are the bitfield words and huge-frame counters of trees the
//! CPU has not reserved (remote frees, reservation-less allocations). The bitfield words and
//! counters of the CPU's own reserved tree are recorded under CPU-scoped classes, which traces
//! leave out: in LLFree only their owner writes them on the fast path, which is the point of the
//! reservation.

use crossbeam_utils::CachePadded;
use pagelab_sync::shim::atomic::{
    AtomicI64, AtomicU16, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use pagelab_sync::{LockClass, Scope, trace};

use super::buddy::Zone;
use crate::cpu::CpuId;
use crate::page::Pfn;
use crate::vmstat::stat_threshold;

/// Order of a huge frame (2 MiB).
pub const HUGE_ORDER: u32 = 9;
/// Frames per huge frame.
pub const HUGE_FRAMES: u32 = 1 << HUGE_ORDER;
/// Huge frames per tree (LLFree's `TREE_HUGE`).
pub const TREE_HUGE: u32 = 8;
/// Frames per tree (16 MiB).
pub const TREE_FRAMES: u32 = TREE_HUGE << HUGE_ORDER;
/// Largest order: two huge frames.
pub const MAX_ORDER: u32 = HUGE_ORDER + 1;
const WORD_BITS: u32 = 64;
const WORDS: usize = (HUGE_FRAMES / WORD_BITS) as usize;
/// Rounds of reservation refills before falling back to reservation-less allocation.
const RETRIES: usize = 4;
/// Whole searches repeated while the huge-frame counters show free frames that no search
/// found (frames in flight between a tree and a reservation).
const SETTLE_RETRIES: usize = 8;

const CHILD_HUGE: u16 = 1 << 15;
const CHILD_FREE: u16 = (1 << 10) - 1;
const TREE_RESERVED: u32 = 1 << 31;
const TREE_FREE: u32 = TREE_RESERVED - 1;
const LOCAL_VALID: u64 = 1 << 63;

/// A tree's free count and reserved flag: shared by every CPU of the node (the counters are
/// packed sixteen to a cache line, as in LLFree).
pub static LLFREE_TREE: LockClass = LockClass::new("llfree tree counter", Scope::Node);
/// A huge frame's counter of a tree the CPU has not reserved.
pub static LLFREE_CHILD: LockClass = LockClass::new("llfree huge-frame counter", Scope::Node);
/// A bitfield word of a tree the CPU has not reserved.
pub static LLFREE_BITFIELD: LockClass = LockClass::new("llfree bitfield", Scope::Node);
/// Another CPU's reservation word, written by a steal or a remote drain.
pub static LLFREE_RESERVATION: LockClass = LockClass::new("llfree reservation", Scope::Node);
/// The bitfield words and huge-frame counters of the CPU's own reserved tree.
pub static LLFREE_LOCAL: LockClass = LockClass::new("llfree reserved tree", Scope::Cpu);
/// The zone's `NR_FREE_PAGES`, where the per-CPU deltas are folded.
pub static NR_FREE_PAGES: LockClass = LockClass::new("NR_FREE_PAGES", Scope::Node);

/// One huge frame's bits: one cache line.
#[repr(align(64))]
struct Bitfield([AtomicU64; WORDS]);

/// A CPU's state: its reservation, where it last allocated, its counter delta.
struct Local {
    /// `LOCAL_VALID | tree << 32 | free`: the reserved tree and the free frames taken from it.
    res: AtomicU64,
    /// The huge frame this CPU last allocated from (the search starts there, for locality).
    hint: AtomicU32,
    /// This CPU's `NR_FREE_PAGES` delta not yet folded into the zone (`vm_stat_diff`).
    diff: AtomicI64,
    /// Trees this CPU reserved, and reservations it stole.
    reserves: AtomicU64,
    steals: AtomicU64,
}

#[inline]
fn res_tree(r: u64) -> Option<u32> {
    (r & LOCAL_VALID != 0).then_some(((r >> 32) as u32) & !(1 << 31))
}

#[inline]
fn res_free(r: u64) -> u32 {
    r as u32
}

#[inline]
fn res_make(tree: u32, free: u32) -> u64 {
    LOCAL_VALID | (u64::from(tree) << 32) | u64::from(free)
}

/// Mask of `2^order` bits (orders up to 6).
#[inline]
fn run_mask(order: u32) -> u64 {
    if order >= 6 {
        u64::MAX
    } else {
        (1u64 << (1u32 << order)) - 1
    }
}

/// The first aligned run of `2^order` clear bits in `v` (orders up to 6).
#[inline]
fn free_run(v: u64, order: u32) -> Option<u32> {
    if order == 0 {
        return (v != u64::MAX).then(|| (!v).trailing_zeros());
    }
    let n = 1u32 << order;
    let mask = run_mask(order);
    (0..WORD_BITS)
        .step_by(n as usize)
        .find(|&i| (v >> i) & mask == 0)
}

/// Counts of the reservation machinery, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LlFreeStats {
    /// Trees reserved.
    pub reserves: u64,
    /// Reservations taken over from another CPU.
    pub steals: u64,
}

/// The LLFree allocator of one zone. See the module documentation.
pub struct LlFree {
    base: u32,
    frames: u32,
    bitfields: Box<[Bitfield]>,
    children: Box<[AtomicU16]>,
    trees: Box<[AtomicU32]>,
    locals: Box<[CachePadded<Local>]>,
    threshold: i64,
}

/// The bits of a huge frame's bitfield word `w` that stand for frames past the zone's end, of a
/// huge frame holding `cap` frames: set, as allocated, so that no search ever hands them out
/// (LLFree marks a partial last huge frame the same way at init).
fn past_the_end(w: usize, cap: u32) -> u64 {
    let first = w as u32 * WORD_BITS;
    if first >= cap {
        u64::MAX
    } else if cap - first >= WORD_BITS {
        0
    } else {
        u64::MAX << (cap - first)
    }
}

impl LlFree {
    /// All frames of `[start, end)` free, with reservation slots for CPUs `0..=nr_cpus` (the
    /// last one for kernel threads). The caller adds the frames to the zone's free count. The
    /// counter's fold threshold follows a zone of `sizing_pages` if given (the machine the
    /// engine stands for, [`super::TunablesFor`]), else this one.
    pub fn new(start: Pfn, end: Pfn, nr_cpus: usize, sizing_pages: Option<u64>) -> LlFree {
        let frames = end.0 - start.0;
        let nr_children = frames.div_ceil(HUGE_FRAMES) as usize;
        let nr_trees = frames.div_ceil(TREE_FRAMES) as usize;
        let cap = |c: usize| (frames - c as u32 * HUGE_FRAMES).min(HUGE_FRAMES);
        let bitfields = (0..nr_children)
            .map(|c| {
                let cap = cap(c);
                // Frames past the zone's end are never free.
                Bitfield(std::array::from_fn(|w| {
                    AtomicU64::new(past_the_end(w, cap))
                }))
            })
            .collect();
        let children = (0..nr_children)
            .map(|c| AtomicU16::new(cap(c) as u16))
            .collect();
        let trees = (0..nr_trees)
            .map(|t| {
                let first = t * TREE_HUGE as usize;
                let last = (first + TREE_HUGE as usize).min(nr_children);
                AtomicU32::new((first..last).map(cap).sum())
            })
            .collect();
        let locals = (0..=nr_cpus)
            .map(|_| {
                CachePadded::new(Local {
                    res: AtomicU64::new(0),
                    hint: AtomicU32::new(u32::MAX),
                    diff: AtomicI64::new(0),
                    reserves: AtomicU64::new(0),
                    steals: AtomicU64::new(0),
                })
            })
            .collect();
        LlFree {
            base: start.0,
            frames,
            bitfields,
            children,
            trees,
            locals,
            threshold: stat_threshold(sizing_pages.unwrap_or(u64::from(frames)), nr_cpus),
        }
    }

    /// Frames this allocator manages.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Trees of this zone.
    pub fn nr_trees(&self) -> usize {
        self.trees.len()
    }

    /// The per-CPU drift allowed before a delta is folded into `NR_FREE_PAGES`.
    pub fn threshold(&self) -> i64 {
        self.threshold
    }

    #[inline]
    fn slot(&self, cpu: CpuId) -> usize {
        cpu.idx().min(self.locals.len() - 1)
    }

    #[inline]
    fn local(&self, cpu: CpuId) -> &Local {
        &self.locals[self.slot(cpu)]
    }

    fn child_cap(&self, c: usize) -> u32 {
        (self.frames - c as u32 * HUGE_FRAMES).min(HUGE_FRAMES)
    }

    fn tree_children(&self, t: usize) -> std::ops::Range<usize> {
        let first = t * TREE_HUGE as usize;
        first..(first + TREE_HUGE as usize).min(self.children.len())
    }

    fn tree_cap(&self, t: usize) -> u32 {
        self.tree_children(t).map(|c| self.child_cap(c)).sum()
    }

    /// The tree CPU `cpu` currently has reserved.
    pub fn reserved_tree(&self, cpu: CpuId) -> Option<u32> {
        res_tree(self.local(cpu).res.load(Relaxed))
    }

    /// Reservation counts, summed over CPUs.
    pub fn stats(&self) -> LlFreeStats {
        self.locals
            .iter()
            .fold(LlFreeStats::default(), |s, l| LlFreeStats {
                reserves: s.reserves + l.reserves.load(Relaxed),
                steals: s.steals + l.steals.load(Relaxed),
            })
    }

    /// The class a line of tree `t` is recorded under: CPU-private while `own` is `t`.
    #[inline]
    fn line_class(own: Option<u32>, t: usize, shared: &'static LockClass) -> &'static LockClass {
        if own == Some(t as u32) {
            &LLFREE_LOCAL
        } else {
            shared
        }
    }

    #[inline]
    fn trace_line<T>(class: &'static LockClass, at: &T) {
        trace::atomic(class, (at as *const T as usize) & !63);
    }

    /// Allocate `2^order` frames on `cpu`, keeping `zone`'s free count. `None` when no tree
    /// could serve the order.
    pub fn alloc(&self, cpu: CpuId, order: u32, zone: &Zone) -> Option<Pfn> {
        debug_assert!(order <= MAX_ORDER);
        let mut attempt = 0;
        let off = loop {
            let got = if order >= HUGE_ORDER {
                self.alloc_huge(cpu, order)
            } else {
                self.alloc_small(cpu, order)
            };
            if let Some(off) = got {
                break off;
            }
            // Counts move between words in two steps (a tree's count into a reservation, a
            // stolen or drained reservation back into its tree), so a search can find nothing
            // while the frames are in flight. The huge-frame counters are updated first on
            // free and last on allocation: while they show enough free frames, look again.
            attempt += 1;
            if attempt > SETTLE_RETRIES || self.huge_frame_free() < 1 << order {
                return None;
            }
            pagelab_sync::shim::hint::spin_loop();
        };
        self.account(cpu, zone, -(1i64 << order));
        Some(Pfn(self.base + off))
    }

    /// Free frames by the huge-frame counters (racy: a sum over many words).
    fn huge_frame_free(&self) -> u32 {
        self.children
            .iter()
            .map(|c| c.load(Relaxed))
            .filter(|v| v & CHILD_HUGE == 0)
            .map(|v| u32::from(v & CHILD_FREE))
            .sum()
    }

    /// Orders below a huge frame: from the CPU's reserved tree, refilling the reservation as
    /// needed.
    fn alloc_small(&self, cpu: CpuId, order: u32) -> Option<u32> {
        let n = 1u32 << order;
        let local = self.local(cpu);
        // A tree whose count sufficed but whose frames are too fragmented for this order.
        let mut skip = None;
        for _ in 0..RETRIES {
            if let Some(t) = self.local_take(local, n) {
                if let Some(off) = self.alloc_in_tree(local, Some(t), t as usize, order) {
                    return Some(off);
                }
                self.local_put(local, t, n);
                skip = Some(t);
            } else if let Some(t) = res_tree(local.res.load(Relaxed))
                && skip != Some(t)
                && self.sync(local, t)
            {
                continue;
            }
            if !self.reserve(cpu, local, n, skip) && !self.steal(cpu, local, n, skip) {
                break;
            }
        }
        self.alloc_global(cpu, order)
    }

    /// Take `n` frames from the CPU's reservation; returns the reserved tree.
    #[inline]
    fn local_take(&self, local: &Local, n: u32) -> Option<u32> {
        local
            .res
            .fetch_update(Acquire, Relaxed, |r| {
                (r & LOCAL_VALID != 0 && res_free(r) >= n).then(|| r - u64::from(n))
            })
            .ok()
            .and_then(res_tree)
    }

    /// Give `n` frames of tree `t` back: to the reservation if it still holds `t`, to the
    /// tree's shared counter otherwise.
    #[inline]
    fn local_put(&self, local: &Local, t: u32, n: u32) {
        let mine = local.res.fetch_update(Release, Relaxed, |r| {
            (res_tree(r) == Some(t)).then(|| r + u64::from(n))
        });
        if mine.is_err() {
            self.tree_add(t as usize, n);
        }
    }

    fn tree_add(&self, t: usize, n: u32) {
        Self::trace_line(&LLFREE_TREE, &self.trees[t]);
        self.trees[t].fetch_add(n, Release);
    }

    /// Move what other CPUs freed into the reserved tree `t` from its shared counter into the
    /// reservation. Whether anything was found.
    fn sync(&self, local: &Local, t: u32) -> bool {
        let tree = &self.trees[t as usize];
        if tree.load(Relaxed) & TREE_FREE == 0 {
            return false;
        }
        Self::trace_line(&LLFREE_TREE, tree);
        let Ok(old) = tree.fetch_update(AcqRel, Relaxed, |w| {
            (w & TREE_RESERVED != 0 && w & TREE_FREE != 0).then_some(TREE_RESERVED)
        }) else {
            return false;
        };
        self.local_put(local, t, old & TREE_FREE);
        true
    }

    /// Where CPU `cpu` starts searching the trees: spread over the zone, so that CPUs start
    /// apart.
    #[inline]
    fn start_tree(&self, cpu: CpuId) -> usize {
        self.slot(cpu) * self.trees.len() / self.locals.len()
    }

    /// Reserve a tree with at least `n` free frames for `cpu`, returning the old reservation's
    /// frames to its tree. Partially allocated trees first (between 1/64 and 1/2 free), then
    /// half-free or free ones, then any.
    fn reserve(&self, cpu: CpuId, local: &Local, n: u32, skip: Option<u32>) -> bool {
        let nt = self.trees.len();
        let start = self.start_tree(cpu);
        for pass in 0..3 {
            for i in 0..nt {
                let t = (start + i) % nt;
                if skip == Some(t as u32) {
                    continue;
                }
                let tree = &self.trees[t];
                let w = tree.load(Relaxed);
                let free = w & TREE_FREE;
                if w & TREE_RESERVED != 0 || free < n {
                    continue;
                }
                let cap = self.tree_cap(t);
                let fits = match pass {
                    0 => free >= cap / 64 && free < cap / 2,
                    1 => free >= cap / 2,
                    _ => true,
                };
                if !fits {
                    continue;
                }
                Self::trace_line(&LLFREE_TREE, tree);
                if tree
                    .compare_exchange(w, TREE_RESERVED, AcqRel, Relaxed)
                    .is_ok()
                {
                    self.install(local, t as u32, free);
                    local.reserves.fetch_add(1, Relaxed);
                    return true;
                }
            }
        }
        false
    }

    /// Make `(t, free)` the CPU's reservation and give the previous one back.
    fn install(&self, local: &Local, t: u32, free: u32) {
        let old = local.res.swap(res_make(t, free), AcqRel);
        if let Some(ot) = res_tree(old) {
            self.unreserve(ot as usize, res_free(old));
        }
    }

    /// Return a reservation's frames to tree `t` and clear its reserved flag.
    fn unreserve(&self, t: usize, free: u32) {
        Self::trace_line(&LLFREE_TREE, &self.trees[t]);
        let _ = self.trees[t].fetch_update(AcqRel, Relaxed, |w| {
            Some(((w & TREE_FREE) + free) & TREE_FREE)
        });
    }

    /// Take over another CPU's reservation holding at least `n` frames.
    fn steal(&self, cpu: CpuId, local: &Local, n: u32, skip: Option<u32>) -> bool {
        let me = self.slot(cpu);
        let nl = self.locals.len();
        for i in 1..nl {
            let other = &self.locals[(me + i) % nl];
            let r = other.res.load(Relaxed);
            let Some(t) = res_tree(r) else { continue };
            if res_free(r) < n || skip == Some(t) {
                continue;
            }
            Self::trace_line(&LLFREE_RESERVATION, &other.res);
            if other.res.compare_exchange(r, 0, AcqRel, Relaxed).is_ok() {
                self.install(local, t, res_free(r));
                local.steals.fetch_add(1, Relaxed);
                return true;
            }
        }
        false
    }

    /// The last resort: frames from any tree's shared counter, without reserving the tree.
    fn alloc_global(&self, cpu: CpuId, order: u32) -> Option<u32> {
        let n = 1u32 << order;
        let own = res_tree(self.local(cpu).res.load(Relaxed));
        let nt = self.trees.len();
        let start = self.start_tree(cpu);
        for i in 0..nt {
            let t = (start + i) % nt;
            if !self.tree_take(t, n) {
                continue;
            }
            if let Some(off) = self.alloc_in_tree(self.local(cpu), own, t, order) {
                return Some(off);
            }
            self.tree_add(t, n);
        }
        None
    }

    /// Take `n` frames from tree `t`'s shared counter, reserved or not.
    fn tree_take(&self, t: usize, n: u32) -> bool {
        let tree = &self.trees[t];
        if tree.load(Relaxed) & TREE_FREE < n {
            return false;
        }
        Self::trace_line(&LLFREE_TREE, tree);
        tree.fetch_update(AcqRel, Relaxed, |w| (w & TREE_FREE >= n).then(|| w - n))
            .is_ok()
    }

    /// Find `2^order` frames (below a huge frame) in tree `t`, whose count the caller has
    /// already taken. `own` is the CPU's reserved tree (for the trace classes).
    fn alloc_in_tree(&self, local: &Local, own: Option<u32>, t: usize, order: u32) -> Option<u32> {
        let range = self.tree_children(t);
        let len = range.len();
        let hint = local.hint.load(Relaxed) as usize;
        let first = if range.contains(&hint) {
            hint - range.start
        } else {
            0
        };
        loop {
            for i in 0..len {
                let c = range.start + (first + i) % len;
                if let Some(bit) = self.alloc_in_child(own, t, c, order) {
                    if c != hint {
                        local.hint.store(c as u32, Relaxed);
                    }
                    return Some(c as u32 * HUGE_FRAMES + bit);
                }
            }
            // As for the bits below: a tree-level count taken guarantees a huge frame with an
            // order-0 count (counts are taken top-down and given back bottom-up), so an
            // order-0 miss is a race with other CPUs' claims and frees; higher orders may
            // really find the tree too fragmented.
            if order > 0 {
                return None;
            }
            pagelab_sync::shim::hint::spin_loop();
        }
    }

    /// Claim `2^order` frames of huge frame `c`'s count, then set their bits.
    fn alloc_in_child(&self, own: Option<u32>, t: usize, c: usize, order: u32) -> Option<u32> {
        let n = 1u16 << order;
        let child = &self.children[c];
        let v = child.load(Relaxed);
        if v & CHILD_HUGE != 0 || v & CHILD_FREE < n {
            return None;
        }
        let class = Self::line_class(own, t, &LLFREE_CHILD);
        Self::trace_line(class, child);
        child
            .fetch_update(AcqRel, Acquire, |v| {
                (v & CHILD_HUGE == 0 && v & CHILD_FREE >= n).then(|| v - n)
            })
            .ok()?;
        let words = &self.bitfields[c].0;
        let bclass = Self::line_class(own, t, &LLFREE_BITFIELD);
        let got = if order <= 6 {
            loop {
                let found = words.iter().enumerate().find_map(|(i, w)| {
                    Self::claim_in_word(bclass, w, order).map(|b| i as u32 * WORD_BITS + b)
                });
                // The claimed count guarantees an order-0 frame: every allocation takes its
                // count before its bit and every free clears its bit before it gives the count
                // back, so clear bits never fall below the counts taken. A miss is a race with
                // another CPU's search; look again.
                if found.is_some() || order > 0 {
                    break found;
                }
                pagelab_sync::shim::hint::spin_loop();
            }
        } else {
            Self::claim_words(bclass, words, order)
        };
        if got.is_none() {
            Self::trace_line(class, child);
            child.fetch_add(n, Release);
        }
        got
    }

    /// Set an aligned run of `2^order` clear bits of `w` (orders up to 6).
    #[inline]
    fn claim_in_word(class: &'static LockClass, w: &AtomicU64, order: u32) -> Option<u32> {
        let mut v = w.load(Relaxed);
        loop {
            let b = free_run(v, order)?;
            Self::trace_line(class, w);
            match w.compare_exchange(v, v | (run_mask(order) << b), Acquire, Relaxed) {
                Ok(_) => return Some(b),
                Err(cur) => v = cur,
            }
        }
    }

    /// Orders 7 and 8: two or four aligned whole words, each taken by an exchange from clear to
    /// set, the ones already taken given back if a later one is not clear.
    fn claim_words(
        class: &'static LockClass,
        words: &[AtomicU64; WORDS],
        order: u32,
    ) -> Option<u32> {
        let k = 1usize << (order - 6);
        'group: for g in (0..WORDS).step_by(k) {
            for j in 0..k {
                Self::trace_line(class, &words[g + j]);
                if words[g + j]
                    .compare_exchange(0, u64::MAX, Acquire, Relaxed)
                    .is_err()
                {
                    for undo in &words[g..g + j] {
                        undo.store(0, Release);
                    }
                    continue 'group;
                }
            }
            return Some(g as u32 * WORD_BITS);
        }
        None
    }

    /// Orders 9 and 10: whole huge frames, from the reservation when it has the count, else
    /// from any tree's shared counter.
    fn alloc_huge(&self, cpu: CpuId, order: u32) -> Option<u32> {
        let n = 1u32 << order;
        let local = self.local(cpu);
        let own = res_tree(local.res.load(Relaxed));
        if let Some(t) = self.local_take(local, n) {
            if let Some(off) = self.alloc_huge_in_tree(own, t as usize, order) {
                return Some(off);
            }
            self.local_put(local, t, n);
        }
        let nt = self.trees.len();
        let start = self.start_tree(cpu);
        for i in 0..nt {
            let t = (start + i) % nt;
            if !self.tree_take(t, n) {
                continue;
            }
            if let Some(off) = self.alloc_huge_in_tree(own, t, order) {
                return Some(off);
            }
            self.tree_add(t, n);
        }
        None
    }

    /// Turn `2^(order-9)` aligned, entirely free huge frames of tree `t` into huge ones.
    fn alloc_huge_in_tree(&self, own: Option<u32>, t: usize, order: u32) -> Option<u32> {
        let k = 1usize << (order - HUGE_ORDER);
        let range = self.tree_children(t);
        let class = Self::line_class(own, t, &LLFREE_CHILD);
        let full = HUGE_FRAMES as u16;
        'group: for c in range.clone().step_by(k) {
            if c + k > range.end {
                break;
            }
            for j in 0..k {
                let child = &self.children[c + j];
                if child.load(Relaxed) != full {
                    for undo in &self.children[c..c + j] {
                        undo.store(full, Release);
                    }
                    continue 'group;
                }
                Self::trace_line(class, child);
                if child
                    .compare_exchange(full, CHILD_HUGE, Acquire, Relaxed)
                    .is_err()
                {
                    for undo in &self.children[c..c + j] {
                        undo.store(full, Release);
                    }
                    continue 'group;
                }
            }
            return Some(c as u32 * HUGE_FRAMES);
        }
        None
    }

    /// Free `2^order` frames at `pfn` on `cpu`: clear their bits (or the huge flag), raise the
    /// huge frame's count, then the reservation's or the tree's.
    ///
    /// Panics on frames that are not allocated: a double free would corrupt the counts.
    pub fn free(&self, cpu: CpuId, pfn: Pfn, order: u32, zone: &Zone) {
        let off = pfn.0 - self.base;
        let n = 1u32 << order;
        let c = (off / HUGE_FRAMES) as usize;
        let t = c / TREE_HUGE as usize;
        let local = self.local(cpu);
        let own = res_tree(local.res.load(Relaxed));
        let class = Self::line_class(own, t, &LLFREE_CHILD);
        if order >= HUGE_ORDER {
            for j in 0..(1usize << (order - HUGE_ORDER)) {
                let child = &self.children[c + j];
                Self::trace_line(class, child);
                if let Err(v) =
                    child.compare_exchange(CHILD_HUGE, HUGE_FRAMES as u16, Release, Relaxed)
                {
                    panic!(
                        "bad page state: llfree free of {pfn:?} (order {order}): huge frame {} is not allocated whole (counter {v:#x})",
                        c + j
                    );
                }
            }
        } else {
            let bclass = Self::line_class(own, t, &LLFREE_BITFIELD);
            let words = &self.bitfields[c].0;
            let in_child = off % HUGE_FRAMES;
            let w = (in_child / WORD_BITS) as usize;
            if order <= 6 {
                let mask = run_mask(order) << (in_child % WORD_BITS);
                Self::trace_line(bclass, &words[w]);
                let old = words[w].fetch_and(!mask, Release);
                assert!(
                    old & mask == mask,
                    "bad page state: llfree free of {pfn:?} (order {order}): frames already free (word {old:#x})"
                );
            } else {
                for word in &words[w..w + (1 << (order - 6))] {
                    Self::trace_line(bclass, word);
                    let old = word.swap(0, Release);
                    assert!(
                        old == u64::MAX,
                        "bad page state: llfree free of {pfn:?} (order {order}): frames already free (word {old:#x})"
                    );
                }
            }
            Self::trace_line(class, &self.children[c]);
            self.children[c].fetch_add(n as u16, Release);
        }
        self.local_put(local, t as u32, n);
        self.account(cpu, zone, i64::from(n));
    }

    /// `__mod_zone_page_state(zone, NR_FREE_PAGES, delta)`: per CPU, folded past the threshold.
    #[inline]
    fn account(&self, cpu: CpuId, zone: &Zone, delta: i64) {
        let diff = &self.local(cpu).diff;
        let v = diff.fetch_add(delta, Relaxed) + delta;
        if v.abs() > self.threshold {
            let d = diff.swap(0, Relaxed);
            Self::trace_line(&NR_FREE_PAGES, zone);
            zone.mod_free_pages(d);
        }
    }

    /// Give CPU `cpu`'s reservation back to its tree and fold its counter delta: the pcp
    /// drain's counterpart, callable from any CPU (a remote drain takes the reservation word
    /// as a steal does).
    pub fn drain(&self, cpu: CpuId, zone: &Zone) {
        let local = self.local(cpu);
        Self::trace_line(&LLFREE_RESERVATION, &local.res);
        let old = local.res.swap(0, AcqRel);
        if let Some(t) = res_tree(old) {
            self.unreserve(t as usize, res_free(old));
        }
        let d = local.diff.swap(0, Relaxed);
        if d != 0 {
            Self::trace_line(&NR_FREE_PAGES, zone);
            zone.mod_free_pages(d);
        }
    }

    /// Drain every CPU, the kernel threads' slot included.
    pub fn drain_all(&self, zone: &Zone) {
        for i in 0..self.locals.len() {
            self.drain(CpuId(i as u16), zone);
        }
    }

    /// Fold every CPU's counter delta into the zone (`refresh_cpu_vm_stats`), leaving the
    /// reservations in place.
    pub fn fold_all(&self, zone: &Zone) {
        for l in self.locals.iter() {
            let d = l.diff.swap(0, Relaxed);
            if d != 0 {
                zone.mod_free_pages(d);
            }
        }
    }

    /// Whether frame `pfn` is free. Quiescent use only.
    pub fn is_free(&self, pfn: Pfn) -> bool {
        let off = pfn.0 - self.base;
        let c = (off / HUGE_FRAMES) as usize;
        if self.children[c].load(Relaxed) & CHILD_HUGE != 0 {
            return false;
        }
        let in_child = off % HUGE_FRAMES;
        let w = self.bitfields[c].0[(in_child / WORD_BITS) as usize].load(Relaxed);
        w & (1 << (in_child % WORD_BITS)) == 0
    }

    /// Whether an aligned free block of `order` exists anywhere (what an allocation of that
    /// order could find once every reservation is given back). Quiescent use only.
    pub fn has_free_block(&self, order: u32) -> bool {
        let n = 1u32 << order;
        let aligned_free =
            |start: u32| (start..start + n).all(|i| self.is_free(Pfn(self.base + i)));
        (0..self.frames)
            .step_by(n as usize)
            .filter(|s| s + n <= self.frames)
            .any(aligned_free)
    }

    /// Check the counts against the bits and return the free frames. Quiescent use only.
    pub fn check(&self) -> Result<u64, String> {
        let mut reserved_by: Vec<Option<usize>> = vec![None; self.trees.len()];
        let mut local_free = vec![0u64; self.trees.len()];
        for (i, l) in self.locals.iter().enumerate() {
            let r = l.res.load(Relaxed);
            if let Some(t) = res_tree(r) {
                let t = t as usize;
                if t >= self.trees.len() {
                    return Err(format!("cpu slot {i} reserves tree {t}, past the last"));
                }
                if let Some(j) = reserved_by[t] {
                    return Err(format!("tree {t} is reserved by cpu slots {j} and {i}"));
                }
                reserved_by[t] = Some(i);
                local_free[t] = u64::from(res_free(r));
            }
        }
        let mut total = 0u64;
        for t in 0..self.trees.len() {
            let mut tree_free = 0u64;
            for c in self.tree_children(t) {
                let cap = self.child_cap(c);
                let v = self.children[c].load(Relaxed);
                let bits: Vec<u64> = self.bitfields[c]
                    .0
                    .iter()
                    .map(|w| w.load(Relaxed))
                    .collect();
                for (w, &b) in bits.iter().enumerate() {
                    let absent = past_the_end(w, cap);
                    if b & absent != absent {
                        return Err(format!(
                            "huge frame {c} word {w}: frames past the zone's end are marked free ({b:#x})"
                        ));
                    }
                }
                let clear: u32 = bits.iter().map(|b| b.count_zeros()).sum();
                if v & CHILD_HUGE != 0 {
                    if v & CHILD_FREE != 0 || clear != HUGE_FRAMES {
                        return Err(format!(
                            "huge frame {c} is allocated whole but has counter {v:#x} and {} bits set",
                            HUGE_FRAMES - clear
                        ));
                    }
                } else {
                    if u32::from(v & CHILD_FREE) != clear {
                        return Err(format!(
                            "huge frame {c}: counter {} but {clear} frames clear in its bitfield",
                            v & CHILD_FREE
                        ));
                    }
                    tree_free += u64::from(clear);
                }
            }
            let w = self.trees[t].load(Relaxed);
            let reserved = w & TREE_RESERVED != 0;
            if reserved != reserved_by[t].is_some() {
                return Err(format!(
                    "tree {t}: reserved flag {reserved} but {} CPU holds it",
                    if reserved_by[t].is_some() { "a" } else { "no" }
                ));
            }
            let counted = u64::from(w & TREE_FREE) + local_free[t];
            if counted != tree_free {
                return Err(format!(
                    "tree {t}: counter {} + reservation {} but {tree_free} frames free in its huge frames",
                    w & TREE_FREE,
                    local_free[t]
                ));
            }
            total += tree_free;
        }
        Ok(total)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn free_runs_are_aligned() {
        assert_eq!(free_run(0, 0), Some(0));
        assert_eq!(free_run(0b1011, 0), Some(2));
        assert_eq!(free_run(0b0010, 1), Some(2));
        assert_eq!(free_run(0x0f, 2), Some(4));
        assert_eq!(free_run(1 << 63, 6), None);
        assert_eq!(free_run(0, 6), Some(0));
        assert_eq!(free_run(u64::MAX, 0), None);
    }

    /// A capture records what other CPUs can meet: nothing for an allocation and free in the
    /// CPU's own reserved tree, the bitfield word, huge-frame counter and tree counter for a
    /// free into a tree another CPU holds.
    #[test]
    fn capture_records_shared_lines_only() {
        let zone = Zone::new(0, 0, Pfn(0), Pfn(8192), 32, pagelab_sync::LockKind::Queued);
        zone.mod_free_pages(8192);
        let ll = LlFree::new(Pfn(0), Pfn(8192), 2, None);
        // Reserves a tree for CPU 0.
        let a = ll.alloc(CpuId(0), 0, &zone).unwrap();
        trace::start(1024);
        let b = ll.alloc(CpuId(0), 0, &zone).unwrap();
        ll.free(CpuId(0), b, 0, &zone);
        let ev = trace::stop();
        assert!(ev.is_empty(), "own-tree fast path recorded {ev:?}");
        trace::start(1024);
        ll.free(CpuId(1), a, 0, &zone);
        let ev = trace::stop();
        let names: Vec<&str> = ev.iter().map(|e| e.class.name).collect();
        for want in [
            "llfree bitfield",
            "llfree huge-frame counter",
            "llfree tree counter",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(ev.iter().all(|e| e.class.scope == Scope::Node));
        assert_eq!(ll.check().unwrap(), 8192);
    }

    #[test]
    fn stat_threshold_follows_vmstat() {
        // 2 * fls(cpus) * (1 + fls(mem / 128 MiB)), at most 125.
        assert_eq!(stat_threshold(1 << 18, 2), 2 * 2 * (1 + 4));
        assert_eq!(stat_threshold(1024, 1), 2);
        assert_eq!(stat_threshold(1 << 30, 512), 125);
    }
}
