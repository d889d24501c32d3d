//! The multi-generational LRU's lists (mm/vmscan.c `lru_gen_*`, include/linux/mm_inline.h
//! `lru_gen_add_folio`/`lru_gen_del_folio`), Yu Zhao, 6.1.
//!
//! # What it models
//!
//! Each lruvec keeps, per type (anon, file), up to [`MAX_NR_GENS`] generations numbered by
//! sequence: `min_seq[type]` is the oldest, `max_seq` the youngest (shared by both types);
//! generation `seq` lives on list `seq % MAX_NR_GENS`. A page joins the youngest generation if it
//! is active (faulted in, or activated by reclaim) and the second oldest otherwise. Aging
//! ([`LruvecMut::inc_max_seq`]) opens a new youngest generation, first retiring the oldest if all
//! four are in use ([`LruvecMut::inc_min_seq`]: what is left there moves up one). Eviction
//! ([`LruvecMut::scan_oldest`]) works from the cold end of the oldest generation, at most
//! [`MAX_LRU_BATCH`] folios per lock hold: a folio the page-table walk found young since (its
//! `PG_gen` is newer than its list, see [`pg::GEN_MASK`]) moves to that generation, a folio
//! whose tier is protected by the refault feedback moves to the next generation, the rest are
//! isolated for `shrink_folio_list`.
//!
//! Tiers (`lru_tier_from_refs`): a folio's tier is `order_base_2(refs + 1)` of its accesses
//! through file descriptors plus `PG_workingset`. Per tier the lruvec counts evictions,
//! protections and refaults over the last two generations and their running averages; eviction
//! protects every tier whose refault rate exceeds tier 0's (`get_tier_idx`, the PID controller's
//! proportional term).
//!
//! The move policy ([`MglruMove`]) decides how folios bound for another generation move: one
//! `list_move` each, or in runs spliced once (Kairui Song's bulk move), which keeps their order.
//!
//! # Locking
//!
//! Everything here runs under the lruvec's `lru_lock` held exclusively, except reading the
//! sequence numbers (atomics, racy reads allowed: aging only ever increases them) and the
//! refault counters (atomics, updated by swap-in faults without the lock). `PG_gen` is also
//! written by the page-table walk without the lock (compare-and-swap on the flags word); the list
//! a page is on, `PG_list_gen`, only under the lock.
//!
//! # Invariants (`Lru::check`)
//!
//! A page on a generation list has `PG_list_gen` naming that list, and that generation is
//! within `[min_seq, max_seq]` of its type.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use super::LruList;
use super::LruvecMut;
use super::size_stats::StatCpu;
use super::smp_list::LocalChain;
use crate::page::{Page, Pfn, pg};
use crate::policy::MglruMove;

/// Generations per type (`MAX_NR_GENS`).
pub const MAX_NR_GENS: u64 = 4;
/// Fewest generations per type (`MIN_NR_GENS`): eviction needs an oldest one that is not the
/// youngest; below this, aging must run first.
pub const MIN_NR_GENS: u64 = 2;
/// Tiers per generation (`MAX_NR_TIERS`).
pub const MAX_NR_TIERS: usize = 4;
/// Generations of refault history kept (`NR_HIST_GENS`).
pub const NR_HIST_GENS: usize = 2;
/// Most folios scanned per lock hold (`MAX_LRU_BATCH`, `BITS_PER_LONG * 64`).
pub const MAX_LRU_BATCH: usize = 4096;
/// Smallest batch worth a lock hold (`MIN_LRU_BATCH`, `BITS_PER_LONG`).
pub const MIN_LRU_BATCH: u64 = 64;

type TierCounts = [[AtomicU64; MAX_NR_TIERS]; 2];

/// The sequence numbers of an lruvec's generations (`lrugen->max_seq` and `min_seq[]`, the
/// first line of `struct lru_gen_folio`). Written under `lru_lock` when aging opens a
/// generation (`inc_max_seq`) or retires one (`inc_min_seq`, `try_to_inc_min_seq`), read by
/// every CPU adding a folio (`lru_gen_add_folio` picks its generation from them), by every
/// reclaimer deciding whether to age (`should_run_aging`) and by a refault (`lru_gen_test_recent`)
/// (mm/vmscan.c, include/linux/mm_inline.h, mm/workingset.c). Per (memcg, node) lruvec, so
/// node scope: a task's pages are on its node's lruvec.
pub static LRU_GEN_SEQ: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru_gen seq", pagelab_sync::Scope::Node);

/// An lruvec's refault feedback (`lrugen->evicted`, `refaulted`: `atomic_long_t` that every
/// evicting CPU (`lru_gen_eviction`) and every refaulting one (`lru_gen_refault`) adds to in
/// mm/workingset.c; `protected`, written under `lru_lock` by `sort_folio` in mm/vmscan.c). The
/// instance is the counter's cache line.
pub static LRU_GEN_HIST: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("lru_gen refault counters", pagelab_sync::Scope::Node);

#[inline]
fn line_of(a: &AtomicU64) -> usize {
    (a as *const AtomicU64 as usize) & !63
}

/// `struct lru_gen_folio`: one lruvec's sequence numbers and refault feedback.
#[derive(Debug)]
pub struct LruGen {
    max_seq: AtomicU64,
    min_seq: [AtomicU64; 2],
    /// Running averages per type and tier (`avg_refaulted`, `avg_total`).
    avg_refaulted: TierCounts,
    avg_total: TierCounts,
    /// Per history generation, type and tier (`refaulted`, `evicted`, `protected`).
    refaulted: [TierCounts; NR_HIST_GENS],
    evicted: [TierCounts; NR_HIST_GENS],
    protected: [TierCounts; NR_HIST_GENS],
}

impl Default for LruGen {
    fn default() -> Self {
        LruGen {
            // `lru_gen_init_lruvec`: four generations, 0 to 3.
            max_seq: AtomicU64::new(MIN_NR_GENS + 1),
            min_seq: Default::default(),
            avg_refaulted: Default::default(),
            avg_total: Default::default(),
            refaulted: Default::default(),
            evicted: Default::default(),
            protected: Default::default(),
        }
    }
}

/// The generation list index of sequence `seq` (`lru_gen_from_seq`).
#[inline]
pub fn gen_from_seq(seq: u64) -> usize {
    (seq % MAX_NR_GENS) as usize
}

/// `lru_hist_from_seq`.
#[inline]
fn hist_from_seq(seq: u64) -> usize {
    (seq % NR_HIST_GENS as u64) as usize
}

/// `lru_tier_from_refs`: `order_base_2(refs + 1)`.
#[inline]
pub fn tier_from_refs(refs: u64) -> usize {
    (u64::BITS - refs.leading_zeros()) as usize
}

/// A page's tier: its fd accesses plus `PG_workingset` (`folio_lru_refs`).
#[inline]
pub fn tier_of(flags: u64) -> usize {
    let refs = ((flags & pg::REFS_MASK) >> pg::REFS_SHIFT) + u64::from(flags & pg::WORKINGSET != 0);
    tier_from_refs(refs).min(MAX_NR_TIERS - 1)
}

/// The generation `PG_gen` names, if any.
#[inline]
pub fn page_gen(flags: u64) -> Option<usize> {
    let g = (flags & pg::GEN_MASK) >> pg::GEN_SHIFT;
    (g != 0).then(|| g as usize - 1)
}

/// The generation list the page is on, if any.
#[inline]
pub fn list_gen(flags: u64) -> Option<usize> {
    let g = (flags & pg::LIST_GEN_MASK) >> pg::LIST_GEN_SHIFT;
    (g != 0).then(|| g as usize - 1)
}

#[inline]
fn with_gens(flags: u64, logical: usize, list: usize) -> u64 {
    (flags & !(pg::GEN_MASK | pg::LIST_GEN_MASK))
        | ((logical as u64 + 1) << pg::GEN_SHIFT)
        | ((list as u64 + 1) << pg::LIST_GEN_SHIFT)
}

/// `folio_update_gen`: the page-table walk found the page young; mark it with generation `g`
/// without the lru_lock. Only a page on a generation list changes; the walk leaves the accessed
/// bit of any other page (an isolated one, say) for its isolator to see. Returns whether it
/// changed.
pub fn mark_young(page: &Page, g: usize) -> bool {
    page.flags
        .fetch_update(AcqRel, Relaxed, |f| {
            if f & pg::LRU == 0 || page_gen(f).is_none() {
                return None;
            }
            Some((f & !pg::GEN_MASK) | ((g as u64 + 1) << pg::GEN_SHIFT))
        })
        .is_ok()
}

/// `positive_ctrl_err`'s operands (`struct ctrl_pos`).
#[derive(Clone, Copy, Debug)]
struct CtrlPos {
    refaulted: u64,
    total: u64,
    gain: u64,
}

impl LruGen {
    /// The sequence numbers' line, as the projector's traces name it ([`LRU_GEN_SEQ`]).
    #[inline]
    fn seq_line(&self) -> usize {
        &self.max_seq as *const AtomicU64 as usize
    }

    /// Records a read of the sequence numbers (a reclaimer deciding whether to age, a refault
    /// judging its token): [`LRU_GEN_SEQ`].
    #[inline]
    pub fn trace_seq_read(&self) {
        pagelab_sync::trace::line_read(&LRU_GEN_SEQ, self.seq_line());
    }

    /// Records a write of the sequence numbers (aging under `lru_lock`).
    #[inline]
    fn trace_seq_write(&self) {
        pagelab_sync::trace::line_write(&LRU_GEN_SEQ, self.seq_line());
    }

    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(Relaxed)
    }

    pub fn min_seq(&self, file: bool) -> u64 {
        self.min_seq[usize::from(file)].load(Relaxed)
    }

    /// Generations of a type (`max_seq - min_seq + 1`).
    pub fn nr_gens(&self, file: bool) -> u64 {
        self.max_seq() - self.min_seq(file) + 1
    }

    /// The sequence number of generation list `g` within `file`'s current window, if it is in
    /// the window.
    pub fn seq_of_gen(&self, file: bool, g: usize) -> Option<u64> {
        let (min, max) = (self.min_seq(file), self.max_seq());
        (min..=max).find(|&s| gen_from_seq(s) == g)
    }

    /// `lru_gen_is_active`: whether `g` is one of the two youngest generations.
    fn is_active(&self, g: usize) -> bool {
        let max = self.max_seq();
        g == gen_from_seq(max) || g == gen_from_seq(max - 1)
    }

    fn read_ctrl_pos(&self, ty: usize, tier: usize, gain: u64) -> CtrlPos {
        let hist = hist_from_seq(self.min_seq[ty].load(Relaxed));
        let mut total =
            self.avg_total[ty][tier].load(Relaxed) + self.evicted[hist][ty][tier].load(Relaxed);
        if tier > 0 {
            total += self.protected[hist][ty][tier - 1].load(Relaxed);
        }
        CtrlPos {
            refaulted: self.avg_refaulted[ty][tier].load(Relaxed)
                + self.refaulted[hist][ty][tier].load(Relaxed),
            total,
            gain,
        }
    }

    /// `get_tier_idx`: the highest tier not protected. Tiers above it refault more than tier
    /// 0 (set point, gain 1) relative to how much they are evicted (process variable, gain 2),
    /// so eviction keeps them.
    pub fn tier_idx(&self, file: bool) -> usize {
        let ty = usize::from(file);
        let sp = self.read_ctrl_pos(ty, 0, 1);
        for tier in 1..MAX_NR_TIERS {
            let pv = self.read_ctrl_pos(ty, tier, 2);
            if !positive_ctrl_err(sp, pv) {
                return tier - 1;
            }
        }
        MAX_NR_TIERS - 1
    }

    /// `reset_ctrl_pos(carryover)`, when `min_seq` of `ty` moves on: fold the outgoing
    /// history generation (that of the old `min_seq`) into the running averages. Call before
    /// advancing `min_seq`.
    fn carry_over_ctrl_pos(&self, ty: usize) {
        let hist = hist_from_seq(self.min_seq[ty].load(Relaxed));
        for tier in 0..MAX_NR_TIERS {
            let refaulted = self.refaulted[hist][ty][tier].load(Relaxed);
            let mut total = self.evicted[hist][ty][tier].load(Relaxed);
            if tier > 0 {
                total += self.protected[hist][ty][tier - 1].load(Relaxed);
            }
            let avg = &self.avg_refaulted[ty][tier];
            avg.store((avg.load(Relaxed) + refaulted) / 2, Relaxed);
            let avg = &self.avg_total[ty][tier];
            avg.store((avg.load(Relaxed) + total) / 2, Relaxed);
        }
    }

    /// `reset_ctrl_pos(!carryover)`, when `max_seq` moves on: clear the history generation the
    /// new youngest generation will reuse (that of `max_seq + 1`). Call before advancing
    /// `max_seq`.
    fn clear_ctrl_pos(&self) {
        let hist = hist_from_seq(self.max_seq() + 1);
        for ty in 0..2 {
            for tier in 0..MAX_NR_TIERS {
                self.refaulted[hist][ty][tier].store(0, Relaxed);
                self.evicted[hist][ty][tier].store(0, Relaxed);
                if tier > 0 {
                    self.protected[hist][ty][tier - 1].store(0, Relaxed);
                }
            }
        }
    }

    /// An evicted folio of `tier` (`lru_gen_eviction`): returns the token its shadow keeps,
    /// the oldest sequence number and the tier.
    pub fn note_eviction(&self, file: bool, tier: usize) -> u64 {
        let ty = usize::from(file);
        self.trace_seq_read();
        let min_seq = self.min_seq[ty].load(Relaxed);
        let c = &self.evicted[hist_from_seq(min_seq)][ty][tier];
        pagelab_sync::trace::atomic(&LRU_GEN_HIST, line_of(c));
        c.fetch_add(1, Relaxed);
        (min_seq << 2) | tier as u64
    }

    /// A refault of a folio evicted with `token` (`lru_gen_refault`): counted if the token is
    /// recent, i.e. the oldest generation is still the one it was evicted from
    /// (`lru_gen_test_recent`). Returns whether it was.
    pub fn note_refault(&self, file: bool, token: u64) -> bool {
        let ty = usize::from(file);
        let (seq, tier) = (token >> 2, (token & 3) as usize);
        self.trace_seq_read();
        let min_seq = self.min_seq[ty].load(Relaxed);
        if seq != min_seq {
            return false;
        }
        let c = &self.refaulted[hist_from_seq(seq)][ty][tier];
        pagelab_sync::trace::atomic(&LRU_GEN_HIST, line_of(c));
        c.fetch_add(1, Relaxed);
        true
    }
}

/// `positive_ctrl_err`: whether the process variable's refault rate is at most the set
/// point's (so its tier needs no protection).
fn positive_ctrl_err(sp: CtrlPos, pv: CtrlPos) -> bool {
    pv.refaulted < MIN_LRU_BATCH
        || pv.refaulted * (sp.total + MIN_LRU_BATCH) * sp.gain
            <= (sp.refaulted + MIN_LRU_BATCH) * pv.total * pv.gain
}

impl LruGen {
    /// `lru_gen_add_folio`'s choice, made under the lruvec's lock just before the link: the
    /// youngest generation for an active page, the second oldest otherwise. Sets `PG_gen` and
    /// `PG_list_gen`, clears `PG_active` (generations replace it).
    pub(crate) fn prepare_link(&self, page: &Page) {
        let file = page.flags() & pg::SWAPBACKED == 0;
        let g = self;
        g.trace_seq_read();
        let _ = page.flags.fetch_update(AcqRel, Relaxed, |f| {
            let seq = if f & pg::ACTIVE != 0 {
                g.max_seq()
            } else {
                (g.min_seq(file) + 1).min(g.max_seq())
            };
            let gi = gen_from_seq(seq);
            Some(with_gens(f & !pg::ACTIVE, gi, gi))
        });
        // `set_mask_bits`, a locked exchange on the page's own line.
        pagelab_sync::trace::fence();
    }

    /// `lru_gen_del_folio`'s flag update after the unlink: the page leaves its generation; a
    /// page of one of the two youngest generations keeps `PG_active` so that a putback returns
    /// it there, unless reclaim isolated it.
    pub(crate) fn unlinked(&self, page: &Page, reclaiming: bool) {
        let _ = page.flags.fetch_update(AcqRel, Relaxed, |f| {
            let logical = page_gen(f)?;
            let mut n = f & !(pg::GEN_MASK | pg::LIST_GEN_MASK | pg::ACTIVE);
            if !reclaiming && self.is_active(logical) {
                n |= pg::ACTIVE;
            }
            Some(n)
        });
        // `set_mask_bits` after the unlink's stores: a locked exchange, which waits for them.
        pagelab_sync::trace::fence();
    }
}

/// What [`LruvecMut::scan_oldest`] did.
#[derive(Debug, Default)]
pub struct GenScan {
    pub scanned: u64,
    /// Isolated folios, each holding an isolation reference: for `shrink_folio_list`.
    pub isolated: Vec<Pfn>,
    /// Moved to the generation the page-table walk found them young in.
    pub promoted: u64,
    /// Moved up one generation because their tier is protected.
    pub protected: u64,
    /// Could not be isolated (being freed, or isolated by someone else): rotated.
    pub skipped: u64,
    /// Lock-hold-sized runs spliced (bulk moves) or single moves made.
    pub moves: u64,
}

/// Folios on their way to another generation list: moved one by one, or gathered into a run
/// and spliced once ([`MglruMove`]).
struct Mover {
    policy: MglruMove,
    /// Whether moves go to the cold end (`list_move_tail`, as `inc_min_seq` does) or the hot end
    /// (`list_move`, as `sort_folio` does).
    tail: bool,
    run: Option<(LruList, LocalChain)>,
    moves: u64,
}

impl Mover {
    fn new(policy: MglruMove, tail: bool) -> Self {
        Mover {
            policy,
            tail,
            run: None,
            moves: 0,
        }
    }

    /// Move `pfn` (on `from`) to generation `to_gen`, with `PG_gen` set to `logical` unless the
    /// walk has meanwhile marked it with a newer generation (`folio_inc_gen` keeps that too).
    fn push(
        &mut self,
        v: &mut LruvecMut<'_>,
        pfn: Pfn,
        from: LruList,
        to_gen: usize,
        logical: usize,
    ) {
        let page = &v.pages[pfn];
        let file = from.is_file();
        let to = LruList::generation(to_gen, file);
        v.lruvec.del(v.pages, from, pfn, StatCpu::Move);
        let g = v.lrugen;
        let _ = page.flags.fetch_update(AcqRel, Relaxed, |f| {
            let newer = page_gen(f).filter(|&cur| {
                g.seq_of_gen(file, cur)
                    .zip(g.seq_of_gen(file, logical))
                    .is_some_and(|(c, l)| c > l)
            });
            Some(with_gens(f, newer.unwrap_or(logical), to_gen))
        });
        // `folio_inc_gen`'s `try_cmpxchg` after the unlink's stores.
        pagelab_sync::trace::fence();
        match self.policy {
            MglruMove::PerFolio => {
                if self.tail {
                    v.lruvec.add_back(v.pages, to, pfn, StatCpu::Move);
                } else {
                    v.lruvec.add_front(v.pages, to, pfn, StatCpu::Move);
                }
                self.moves += 1;
            }
            MglruMove::Bulk => {
                if self.run.as_ref().is_some_and(|(l, _)| *l != to) {
                    self.flush(v);
                }
                let (_, chain) = self.run.get_or_insert((to, LocalChain::new()));
                // Scanning goes from the cold end towards the hot end, so each folio goes in
                // front of the ones already chained: the chain keeps the list's order.
                chain.push_front(v.pages, pfn.0);
            }
        }
    }

    fn flush(&mut self, v: &mut LruvecMut<'_>) {
        if let Some((to, chain)) = self.run.take() {
            if self.tail {
                v.lruvec.splice_back(v.pages, to, &chain, StatCpu::Move);
            } else {
                v.lruvec.splice_front(v.pages, to, &chain, StatCpu::Move);
            }
            self.moves += 1;
        }
    }
}

impl LruvecMut<'_> {
    /// The lruvec's MGLRU state.
    pub fn lrugen(&self) -> &LruGen {
        self.lrugen
    }

    /// Where a folio on the oldest list of `file` goes when it is sorted: the generation the
    /// walk found it young in, if newer than its list, else `None`.
    fn promoted_gen(&self, file: bool, flags: u64, list: usize) -> Option<usize> {
        let g = self.lrugen();
        let logical = page_gen(flags)?;
        let (ls, ps) = (g.seq_of_gen(file, logical)?, g.seq_of_gen(file, list)?);
        (ls > ps).then_some(logical)
    }

    /// `inc_min_seq`: retire the oldest generation of `file` if more than [`MIN_NR_GENS`] are
    /// left, moving what is still there up one (or to the generation the walk found it young
    /// in). Returns the folios moved, or `None` if the type is at its minimum.
    pub fn inc_min_seq(&mut self, file: bool, policy: MglruMove) -> Option<u64> {
        let g = self.lrugen;
        let min = g.min_seq(file);
        if g.nr_gens(file) <= MIN_NR_GENS {
            return None;
        }
        let from = LruList::generation(gen_from_seq(min), file);
        let next = gen_from_seq(min + 1);
        let mut mover = Mover::new(policy, true);
        let mut moved = 0;
        while let Some(pfn) = self.lruvec.last(self.pages, from) {
            let flags = self.pages[pfn].flags();
            let to = self
                .promoted_gen(file, flags, gen_from_seq(min))
                .unwrap_or(next);
            mover.push(self, pfn, from, to, to);
            moved += 1;
        }
        mover.flush(self);
        let g = self.lrugen;
        g.carry_over_ctrl_pos(usize::from(file));
        g.trace_seq_write();
        g.min_seq[usize::from(file)].store(min + 1, Relaxed);
        Some(moved)
    }

    /// Advance `min_seq` of `file` past empty oldest generations (`try_to_inc_min_seq`), never
    /// below [`MIN_NR_GENS`] generations.
    pub fn try_inc_min_seq(&mut self, file: bool) -> u64 {
        let mut n = 0;
        loop {
            let g = self.lrugen;
            let min = g.min_seq(file);
            if g.nr_gens(file) <= MIN_NR_GENS
                || self
                    .lruvec
                    .len(LruList::generation(gen_from_seq(min), file))
                    != 0
            {
                return n;
            }
            g.carry_over_ctrl_pos(usize::from(file));
            g.trace_seq_write();
            g.min_seq[usize::from(file)].store(min + 1, Relaxed);
            n += 1;
        }
    }

    /// `inc_max_seq`: open a new youngest generation, retiring the oldest of a type that has
    /// all [`MAX_NR_GENS`] in use. Returns the folios `inc_min_seq` moved.
    pub fn inc_max_seq(&mut self, policy: MglruMove) -> u64 {
        let mut moved = 0;
        for file in [false, true] {
            if self.lrugen().nr_gens(file) >= MAX_NR_GENS {
                moved += self.inc_min_seq(file, policy).unwrap_or(0);
            }
        }
        let g = self.lrugen;
        g.clear_ctrl_pos();
        g.trace_seq_write();
        g.max_seq.store(g.max_seq() + 1, Relaxed);
        moved
    }

    /// `scan_folios` + `sort_folio` + `isolate_folio` on the oldest generation of `file`, from
    /// its cold end: at most [`MAX_LRU_BATCH`] folios, stopping once `max_isolate` are isolated.
    /// Folios not evictable now move to a newer generation by `policy`.
    pub fn scan_oldest(
        &mut self,
        file: bool,
        tier_idx: usize,
        policy: MglruMove,
        max_isolate: usize,
    ) -> GenScan {
        let mut out = GenScan::default();
        let ty = usize::from(file);
        let min = self.lrugen().min_seq(file);
        let oldest = gen_from_seq(min);
        let next = gen_from_seq(min + 1);
        let hist = hist_from_seq(min);
        let list = LruList::generation(oldest, file);
        let mut mover = Mover::new(policy, false);
        let mut cur = self.lruvec.last(self.pages, list);
        while let Some(pfn) = cur {
            if out.scanned as usize >= MAX_LRU_BATCH || out.isolated.len() >= max_isolate {
                break;
            }
            cur = self.lruvec.prev(self.pages, list, pfn);
            out.scanned += 1;
            let flags = self.pages[pfn].flags();
            if let Some(to) = self.promoted_gen(file, flags, oldest) {
                mover.push(self, pfn, list, to, to);
                out.promoted += 1;
                continue;
            }
            let tier = tier_of(flags);
            if tier > tier_idx {
                let c = &self.lrugen.protected[hist][ty][tier - 1];
                pagelab_sync::trace::line_write(&LRU_GEN_HIST, line_of(c));
                c.fetch_add(1, Relaxed);
                mover.push(self, pfn, list, next, next);
                out.protected += 1;
                continue;
            }
            if self.isolate(pfn) {
                self.lrugen.unlinked(&self.pages[pfn], true);
                out.isolated.push(pfn);
            } else {
                // Being freed or taken by another isolator: out of the way, to the hot end.
                mover.push(self, pfn, list, oldest, oldest);
                out.skipped += 1;
            }
        }
        mover.flush(self);
        out.moves = mover.moves;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_order_base_2() {
        assert_eq!(
            (0..6).map(tier_from_refs).collect::<Vec<_>>(),
            [0, 1, 2, 2, 3, 3]
        );
        assert_eq!(tier_of(pg::WORKINGSET), 1);
        assert_eq!(tier_of((3 << pg::REFS_SHIFT) | pg::WORKINGSET), 3);
    }

    #[test]
    fn refaults_are_counted_while_recent_and_protect_their_tier() {
        let g = LruGen::default();
        // Lots of tier-1 refaults against few tier-0 ones: tier 1 becomes protected.
        for _ in 0..1000 {
            let t = g.note_eviction(false, 1);
            assert!(g.note_refault(false, t));
            g.note_eviction(false, 0);
        }
        assert_eq!(g.tier_idx(false), 0, "tier 1 refaults: protect it");
        let fresh = LruGen::default();
        assert_eq!(
            fresh.tier_idx(false),
            MAX_NR_TIERS - 1,
            "no feedback, no protection"
        );
        // A token from generations ago is not recent.
        g.min_seq[0].store(10, Relaxed);
        assert!(!g.note_refault(false, 3 << 2));
    }
}
