//! MGLRU reclaim (mm/vmscan.c `lru_gen_shrink_lruvec`, `try_to_inc_max_seq`, `evict_folios`,
//! `lru_gen_refault` in mm/workingset.c).
//!
//! # What it models
//!
//! * **Aging** ([`try_to_inc_max_seq`]): when a type is down to [`MIN_NR_GENS`]
//!   generations, walk the page tables of every address space charged to the memcg
//!   (`lru_gen_mm_walk`), clearing accessed bits and marking each young page's `PG_gen` with
//!   the youngest generation, without the lru_lock; an address space whose `mmap_lock` is
//!   contended is skipped, as the kernel's walk does. Then open a new generation
//!   ([`LruvecMut::inc_max_seq`]), which may first retire the oldest one, moving what is left
//!   there by the policy's move ([`crate::policy::MglruMove`]).
//! * **Eviction** ([`evict_folios`]): under the lruvec's lock, scan the oldest generation of a
//!   type (file first, anon when swap has room)
//!   from its cold end ([`LruvecMut::scan_oldest`]: at most 4096 folios per hold), moving young
//!   or protected folios and isolating the rest; after the unlock each isolated folio goes through
//!   the same `shrink_folio_list` as classic reclaim (swap-out through the reverse map, or
//!   write-back and removal from the page cache for an unmapped file page). A folio
//!   referenced since is put back, into the youngest generation if referenced twice.
//! * **Refaults** ([`lru_gen_refault`]): a swap-in whose shadow token is still the oldest
//!   generation counts a refault for the tier it was evicted from and sets `PG_workingset`, which
//!   raises its tier; tiers that refault more than tier 0 are protected from then on.
//!
//! Not modelled: the Bloom filters that let the walk skip sparse page tables, the mm list
//! iterator shared by concurrent walkers, `lru_gen_look_around`, evicting mapped file pages,
//! and proactive aging by the `min_ttl` timer.

use std::sync::atomic::Ordering::Relaxed;

use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::lru::LruvecMut;
use crate::lru::mglru::{MIN_LRU_BATCH, MIN_NR_GENS, mark_young};
use crate::page::{Pfn, pg};
use crate::reclaim::vmscan::{ReclaimStats, shrink_folio};
use crate::vmstat::VmEvent;

/// Eviction rounds per call: each isolates at most [`MIN_LRU_BATCH`] folios. Callers that need
/// more call again (direct reclaim runs a call per priority).
const ROUNDS_PER_CALL: usize = 4;

/// What one aging pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgingStats {
    /// Address spaces walked.
    pub walked: u64,
    /// Address spaces skipped because their `mmap_lock` was contended.
    pub skipped: u64,
    /// Present PTEs looked at.
    pub ptes: u64,
    /// Young pages found (accessed bits cleared, `PG_gen` set to the youngest generation).
    pub young: u64,
    /// Folios the retirement of the oldest generation moved.
    pub moved: u64,
}

/// `try_to_inc_max_seq`: walk the page tables of the memcg's address spaces, then open a new
/// generation on the lruvec of (`node`, `memcg`).
pub fn try_to_inc_max_seq(
    k: &Kernel,
    cpu: CpuId,
    node: usize,
    memcg: usize,
    file: bool,
) -> AgingStats {
    let mut st = AgingStats::default();
    let Some(policy) = k.lru().mglru() else {
        return st;
    };
    let lrugen = k.lru().lrugen(node, memcg);
    // Another reclaimer aged this lruvec meanwhile: one new generation is enough.
    lrugen.trace_seq_read();
    if lrugen.nr_gens(file) > MIN_NR_GENS {
        return st;
    }
    let seen = lrugen.max_seq();
    let youngest = crate::lru::mglru::gen_from_seq(seen);
    let pages = k.mem().pages();
    for mm in k.live_mms() {
        if mm.memcg() as usize != memcg {
            continue;
        }
        // The kernel's walk only trylocks: an mm whose writer is busy is aged another time.
        let Some(_mmap) = mm.mmap_lock.try_read() else {
            st.skipped += 1;
            continue;
        };
        // The walk covers the whole page table, not only the VMAs in the tree, so it must
        // also exclude `free_pgtables`, which a munmap that downgraded mmap_lock to read
        // (`mm.munmap_downgrade`) runs alongside other readers: it holds the rmap lock for
        // write there, as for reclaim's rmap walks.
        let _rmap = mm.rmap_read_all(cpu);
        st.walked += 1;
        st.ptes += mm.pgtable.walk_young(cpu, |_, pfn| {
            // The zero page belongs to no generation.
            if k.is_zero_pfn(pfn) {
                return false;
            }
            let page = &pages[pfn];
            let ours = k.mem().zone_of(pfn) == node && page.memcg.load(Relaxed) as usize == memcg;
            let marked = ours && mark_young(page, youngest);
            st.young += u64::from(marked);
            marked
        });
    }
    // `inc_max_seq` bails out if someone else opened the generation first (the kernel passes
    // the max_seq its walk started from for the same reason).
    st.moved = k.lru().with_lruvec(node, memcg, |v| {
        if v.lrugen().max_seq() == seen {
            v.inc_max_seq(policy)
        } else {
            0
        }
    });
    let ev = k.mem().events();
    ev.count(cpu, VmEvent::MglruAging, 1);
    ev.count(cpu, VmEvent::MglruWalkSkip, st.skipped);
    ev.count(cpu, VmEvent::MglruGenMoved, st.moved);
    st
}

/// `lru_gen_shrink_lruvec`: per type (file always, anon when `anon`, i.e. swap has room), age
/// when too few generations are left and evict from the oldest, until `nr_to_reclaim` pages
/// are freed or a few rounds found nothing. File pages go first, as on the classic path.
pub fn lru_gen_shrink_lruvec(
    k: &Kernel,
    cpu: CpuId,
    node: usize,
    memcg: usize,
    nr_to_reclaim: u64,
    anon: bool,
) -> ReclaimStats {
    let mut s = ReclaimStats::default();
    let lrugen = k.lru().lrugen(node, memcg);
    let types: &[bool] = if anon { &[true, false] } else { &[true] };
    for &file in types {
        // A type with no pages here neither needs aging nor has anything to evict.
        let present = k.lru().with_lruvec(node, memcg, |v| {
            (0..4).any(|g| v.len(crate::lru::LruList::generation(g, file)) > 0)
        });
        if !present {
            continue;
        }
        for _ in 0..ROUNDS_PER_CALL {
            if s.reclaimed >= nr_to_reclaim {
                return s;
            }
            // should_run_aging: eviction needs an oldest generation that is not the youngest.
            lrugen.trace_seq_read();
            if lrugen.nr_gens(file) <= MIN_NR_GENS {
                try_to_inc_max_seq(k, cpu, node, memcg, file);
            }
            let r = evict_folios(k, cpu, node, memcg, file);
            s.scanned += r.scanned;
            s.reclaimed += r.reclaimed;
            s.activated += r.activated;
            s.kept += r.kept;
            if r.scanned == 0 && lrugen.nr_gens(file) <= MIN_NR_GENS {
                // Nothing left to scan even after aging: no pages of this type here.
                break;
            }
        }
    }
    s
}

/// `evict_folios`: one lock hold's scan of the oldest generation of `file`'s type, then
/// `shrink_folio_list` on what it isolated.
pub fn evict_folios(k: &Kernel, cpu: CpuId, node: usize, memcg: usize, file: bool) -> ReclaimStats {
    let mut s = ReclaimStats::default();
    let Some(policy) = k.lru().mglru() else {
        return s;
    };
    let tier_idx = k.lru().lrugen(node, memcg).tier_idx(file);
    let scan = k.lru().with_lruvec(node, memcg, |v: &mut LruvecMut<'_>| {
        let scan = v.scan_oldest(file, tier_idx, policy, MIN_LRU_BATCH as usize);
        // The oldest generation emptied: let min_seq move on.
        v.try_inc_min_seq(file);
        scan
    });
    let ev = k.mem().events();
    s.scanned = scan.scanned;
    ev.count(cpu, VmEvent::PgScan, scan.scanned);
    ev.count(cpu, VmEvent::MglruPromoted, scan.promoted);
    ev.count(cpu, VmEvent::MglruProtected, scan.protected);
    ev.count(cpu, VmEvent::MglruGenMoved, scan.moves);
    for pfn in scan.isolated {
        shrink_folio(k, cpu, pfn, file, &mut s);
    }
    ev.count(cpu, VmEvent::PgSteal, s.reclaimed);
    s
}

/// `lru_gen_refault`: a swap-in of a page whose shadow is `shadow`. Counts the refault for the
/// tier it was evicted from if the token is recent, and then marks the new page
/// `PG_workingset` (one tier up). Returns whether the refault was recent.
pub fn lru_gen_refault(k: &Kernel, pfn: Pfn, shadow: u64) -> bool {
    let sh = crate::reclaim::workingset::unpack_shadow(shadow);
    let (node, memcg) = (sh.node as usize, sh.memcg as usize);
    if node >= k.lru().nr_nodes() || memcg >= k.lru().nr_memcgs() {
        return false;
    }
    let recent = k.lru().lrugen(node, memcg).note_refault(false, sh.eviction);
    if recent {
        k.mem().pages()[pfn].set(pg::WORKINGSET);
    }
    recent
}
