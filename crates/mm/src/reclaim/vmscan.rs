//! Classic LRU reclaim: mm/vmscan.c `shrink_lruvec`, `shrink_active_list`,
//! `shrink_inactive_list`, `shrink_folio_list`, with mm/rmap.c `folio_referenced` and
//! `try_to_unmap` for the single mapping an anonymous page has here, and `__remove_mapping`
//! for page-cache pages.
//!
//! # What it models
//!
//! Pages are isolated from the cold end of a list ([`LruvecMut::isolate`]), at most
//! `SWAP_CLUSTER_MAX` per lock hold, file lists first, anon lists while swap has room
//! (`can_reclaim_anon_pages`). The active list of a type is aged into the inactive one when
//! the inactive list is the smaller (`inactive_is_low`). An inactive page whose PTE was
//! accessed since the last scan is kept (once, `PG_referenced`) or activated (referenced
//! again), as `folio_check_references` decides; an unreferenced one is swapped out:
//!
//! 1. `folio_alloc_swap` reserves a slot (usage `SWAP_HAS_CACHE`) and the page enters the swap
//!    cache (`add_to_swap`), which holds a reference;
//! 2. `try_to_unmap`: under the PTE lock, the PTE is exchanged for the swap entry (one more
//!    slot reference), mapcount and RSS drop; then every other CPU running the mm is flushed
//!    ([`crate::vm::tlb::TlbState::flush_for_reclaim`]), so no store through the old
//!    translation is still in flight;
//! 3. `pageout`: the page is written to the slot;
//! 4. `__remove_mapping`: if the only references left are the swap cache's and the
//!    isolation's (frozen to zero with one compare-and-swap), the page leaves the swap cache
//!    with a shadow entry (mm/workingset.c) and is freed. Otherwise a swap-in fault found it
//!    in the swap cache meanwhile and mapped it again: it goes back on the LRU.
//!
//! An inactive page-cache page that no PTE maps is written back if dirty and leaves the cache
//! ([`crate::vm::filemap::File`]); a mapped one is activated (its unmapping would need the
//! file's reverse map, not modelled). With MGLRU on, `shrink_lruvec` hands the lruvec to
//! [`crate::reclaim::lru_gen`] instead.
//!
//! # Locks and their order
//!
//! page lock (`PG_locked`) → the mm's rmap lock (read; the `anon_vma` lock's role: munmap's
//! `free_pgtables` takes it for write, so no page table is freed under the walk) → PTE lock.
//! The swap device's locks are leaves. Reclaim never waits for `mmap_lock` (MGLRU's aging only
//! trylocks it): a fault reclaiming under its VMA lock while a munmap holds `mmap_lock` and
//! waits for that VMA lock would otherwise never make progress.
//!
//! # Invariants (checked by the tests at quiescence)
//!
//! Every anonymous page is mapped by exactly one PTE or sits in the swap cache; every swap PTE
//! holds one reference on its slot, every swap-cache page the slot's `SWAP_HAS_CACHE`; no
//! page is freed while mapped or cached.

use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use crate::cpu::CpuId;
use crate::kernel::Kernel;
use crate::lru::LruList;
use crate::page::{Pfn, pg};
use crate::reclaim::swap::SwapEntry;
use crate::vm::rss::RssType;
use crate::vmstat::VmEvent;

/// Pages isolated per lock hold (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: usize = 32;

/// The first scan priority (`DEF_PRIORITY`): a pass scans a list's length >> priority pages,
/// so the last pass (priority 0) scans whole lists.
pub const DEF_PRIORITY: u32 = 12;

/// What one reclaim call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    pub scanned: u64,
    pub reclaimed: u64,
    pub activated: u64,
    pub kept: u64,
}

/// What `shrink_folio_list` decided for one page.
pub(crate) enum Verdict {
    Freed,
    Activate,
    Keep,
}

/// `try_to_free_pages`: reclaim up to `nr_to_reclaim` pages from every lruvec on behalf of an
/// allocation on `cpu` (direct reclaim). Returns what it did; `reclaimed == 0` after every
/// pass means nothing more can be had (no swap, swap full, or every page in use).
pub fn try_to_free_pages(k: &Kernel, cpu: CpuId, nr_to_reclaim: u64) -> ReclaimStats {
    k.mem().events().count(cpu, VmEvent::DirectReclaim, 1);
    let all = 0..k.lru().nr_memcgs();
    do_try_to_free_pages(k, cpu, 0..k.lru().nr_nodes(), all, nr_to_reclaim)
}

/// `shrink_node` as kswapd runs it: every memory cgroup's lruvec on `node`.
pub fn shrink_node(k: &Kernel, cpu: CpuId, node: usize, nr_to_reclaim: u64) -> ReclaimStats {
    let all = 0..k.lru().nr_memcgs();
    do_try_to_free_pages(k, cpu, node..node + 1, all, nr_to_reclaim)
}

/// `try_to_free_mem_cgroup_pages`: reclaim from group `memcg`'s lruvecs only, on behalf of a
/// charge that found the group at its limit.
pub fn try_to_free_mem_cgroup_pages(
    k: &Kernel,
    cpu: CpuId,
    memcg: u32,
    nr_to_reclaim: u64,
) -> ReclaimStats {
    k.mem().events().count(cpu, VmEvent::MemcgReclaim, 1);
    let m = memcg as usize;
    let s = do_try_to_free_pages(k, cpu, 0..k.lru().nr_nodes(), m..m + 1, nr_to_reclaim);
    k.mem().memcgs().note_reclaimed(memcg, s.reclaimed);
    s
}

/// `can_reclaim_anon_pages`: anonymous pages need a free swap slot to go anywhere. Slots
/// parked in per-CPU caches are given back first (`get_swap_pages` on a full device).
fn can_reclaim_anon_pages(k: &Kernel) -> bool {
    let Some(swap) = k.swap() else {
        return false;
    };
    if swap.nr_free() == 0 {
        swap.drain_slot_caches();
    }
    swap.nr_free() > 0
}

/// `do_try_to_free_pages`: passes from `DEF_PRIORITY` down to 0 over the lruvecs of `memcgs`
/// on `nodes`, until `nr_to_reclaim` pages are freed.
fn do_try_to_free_pages(
    k: &Kernel,
    cpu: CpuId,
    nodes: std::ops::Range<usize>,
    memcgs: std::ops::Range<usize>,
    nr_to_reclaim: u64,
) -> ReclaimStats {
    let mut total = ReclaimStats::default();
    let anon = can_reclaim_anon_pages(k);
    // Pages parked in per-CPU add batches are invisible to the scanner.
    k.lru().drain_all();
    for priority in (0..=DEF_PRIORITY).rev() {
        for node in nodes.clone() {
            for memcg in memcgs.clone() {
                let s = shrink_lruvec(k, cpu, node, memcg, priority, nr_to_reclaim, anon);
                total.scanned += s.scanned;
                total.reclaimed += s.reclaimed;
                total.activated += s.activated;
                total.kept += s.kept;
                if total.reclaimed >= nr_to_reclaim {
                    return total;
                }
            }
        }
    }
    total
}

/// `shrink_lruvec` at `priority`: per type (file always, anon when `anon`, i.e. swap has
/// room), scan the lists' length >> priority pages (at least a batch), aging the active list
/// whenever the inactive one is the smaller, until `nr_to_reclaim` pages are freed. File pages
/// go first, as `get_scan_count` prefers them when the inactive file list is large enough, and
/// because evicting a clean one costs no I/O.
pub fn shrink_lruvec(
    k: &Kernel,
    cpu: CpuId,
    node: usize,
    memcg: usize,
    priority: u32,
    nr_to_reclaim: u64,
    anon: bool,
) -> ReclaimStats {
    if k.lru().mglru().is_some() {
        return crate::reclaim::lru_gen::lru_gen_shrink_lruvec(
            k,
            cpu,
            node,
            memcg,
            nr_to_reclaim,
            anon,
        );
    }
    let mut s = ReclaimStats::default();
    let types: &[(LruList, LruList)] = if anon {
        &[
            (LruList::ActiveFile, LruList::InactiveFile),
            (LruList::ActiveAnon, LruList::InactiveAnon),
        ]
    } else {
        &[(LruList::ActiveFile, LruList::InactiveFile)]
    };
    for &(active_list, inactive_list) in types {
        let sizes = || {
            k.lru()
                .with_lruvec(node, memcg, |v| (v.len(active_list), v.len(inactive_list)))
        };
        let (active, inactive) = sizes();
        let target = ((active + inactive) >> priority).max(SWAP_CLUSTER_MAX as u64);
        let start = s.scanned;
        while s.scanned - start < target && s.reclaimed < nr_to_reclaim {
            let before = s.scanned;
            let (active, inactive) = sizes();
            if inactive < active {
                shrink_active_list(k, cpu, node, memcg, active_list, &mut s);
            }
            shrink_inactive_list(k, cpu, node, memcg, inactive_list, &mut s);
            if s.scanned == before {
                break;
            }
        }
    }
    s
}

/// Isolate up to `SWAP_CLUSTER_MAX` pages from the cold end of `lru`.
fn isolate_lru_folios(k: &Kernel, node: usize, memcg: usize, lru: LruList) -> Vec<Pfn> {
    k.lru().with_lruvec(node, memcg, |v| {
        let mut out = Vec::with_capacity(SWAP_CLUSTER_MAX);
        let mut cur = v.last(lru);
        let mut looked = 0;
        while let Some(p) = cur {
            if out.len() == SWAP_CLUSTER_MAX || looked == 4 * SWAP_CLUSTER_MAX {
                break;
            }
            cur = v.prev(lru, p);
            looked += 1;
            if v.isolate(p) {
                out.push(p);
            }
        }
        out
    })
}

/// `shrink_active_list`: deactivate a batch. Anonymous pages go to the inactive list whether
/// referenced or not (their accessed bits are left for the inactive scan to judge); so do file
/// pages, whose second chance is the inactive scan's `PG_referenced`.
fn shrink_active_list(
    k: &Kernel,
    cpu: CpuId,
    node: usize,
    memcg: usize,
    list: LruList,
    s: &mut ReclaimStats,
) {
    let pages = isolate_lru_folios(k, node, memcg, list);
    s.scanned += pages.len() as u64;
    k.mem()
        .events()
        .count(cpu, VmEvent::PgDeactivate, pages.len() as u64);
    for pfn in pages {
        k.mem().pages()[pfn].clear(pg::ACTIVE);
        k.lru().putback(cpu, pfn);
    }
}

/// `shrink_inactive_list` + `shrink_folio_list` on `list` (an inactive list).
fn shrink_inactive_list(
    k: &Kernel,
    cpu: CpuId,
    node: usize,
    memcg: usize,
    list: LruList,
    s: &mut ReclaimStats,
) {
    let pages = isolate_lru_folios(k, node, memcg, list);
    s.scanned += pages.len() as u64;
    let reclaimed_before = s.reclaimed;
    k.mem()
        .events()
        .count(cpu, VmEvent::PgScan, pages.len() as u64);
    for pfn in pages {
        shrink_folio(k, cpu, pfn, list.is_file(), s);
    }
    k.mem()
        .events()
        .count(cpu, VmEvent::PgSteal, s.reclaimed - reclaimed_before);
}

/// `shrink_folio_list` for one isolated page of either type, then what its verdict asks: freed,
/// put back active (the classic lists' activation, MGLRU's youngest generation; the
/// nonresident clock ticks for an activation), or put back as it was.
pub(crate) fn shrink_folio(k: &Kernel, cpu: CpuId, pfn: Pfn, file: bool, s: &mut ReclaimStats) {
    let verdict = if file {
        reclaim_file_page(k, cpu, pfn)
    } else {
        reclaim_anon_page(k, cpu, pfn)
    };
    match verdict {
        Verdict::Freed => s.reclaimed += 1,
        Verdict::Activate => {
            s.activated += 1;
            k.nonresident_age().age(1);
            k.mem().pages()[pfn].set(pg::ACTIVE);
            k.mem().events().count(cpu, VmEvent::PgActivate, 1);
            k.lru().putback(cpu, pfn);
        }
        Verdict::Keep => {
            s.kept += 1;
            k.lru().putback(cpu, pfn);
        }
    }
}

/// `shrink_folio_list` for an isolated page-cache page. A mapped page stays (evicting it needs
/// the file's reverse map, which is not modelled) and is activated; an unmapped one is written
/// back if dirty and leaves the cache. `PG_referenced` gives a page touched since the last
/// scan one more round (`folio_check_references` for unmapped pages).
pub(crate) fn reclaim_file_page(k: &Kernel, cpu: CpuId, pfn: Pfn) -> Verdict {
    let page = &k.mem().pages()[pfn];
    let mapping = page.mapping.load(Relaxed);
    if page.test(pg::ANON) || mapping & crate::vm::filemap::FILE_MAPPING_TAG == 0 {
        return Verdict::Keep;
    }
    if page.mapcount.load(Relaxed) > 0 {
        return Verdict::Activate;
    }
    if page.flags.fetch_and(!pg::REFERENCED, AcqRel) & pg::REFERENCED != 0 {
        return Verdict::Keep;
    }
    let Some(file) = k.file_by_id(mapping as u32) else {
        // The file is going away; its truncation frees the page.
        return Verdict::Keep;
    };
    if !page.trylock() {
        return Verdict::Keep;
    }
    if page.test(pg::DIRTY) {
        file.writeback(k, cpu, pfn);
    }
    if !file.remove_mapping(k, pfn) {
        page.unlock();
        return Verdict::Keep;
    }
    page.unlock();
    k.mem().free_frozen_pages(cpu, pfn, 0);
    Verdict::Freed
}

/// `workingset_eviction` / `lru_gen_eviction`: the shadow an evicted page leaves in the swap
/// cache. Classic: the lruvec's nonresident clock. MGLRU: the oldest generation's sequence
/// number and the page's tier, whose refault feeds the tier protection.
fn eviction_shadow(k: &Kernel, pfn: Pfn) -> u64 {
    let page = &k.mem().pages()[pfn];
    let node = k.mem().zone_of(pfn);
    let memcg = page.memcg.load(Relaxed) as usize;
    let flags = page.flags();
    let workingset = flags & pg::WORKINGSET != 0;
    if k.lru().mglru().is_some() {
        let token = k
            .lru()
            .lrugen(node, memcg)
            .note_eviction(false, crate::lru::mglru::tier_of(flags));
        return crate::reclaim::workingset::pack_shadow(
            memcg as u16,
            node as u16,
            token,
            workingset,
        );
    }
    k.nonresident_age().evict(
        memcg as u16,
        node as u16,
        workingset,
        1,
        k.shadow_bucket_order(),
    )
}

/// Reclaim one isolated anonymous page (the caller holds the isolation reference).
pub(crate) fn reclaim_anon_page(k: &Kernel, cpu: CpuId, pfn: Pfn) -> Verdict {
    let page = &k.mem().pages()[pfn];
    if !page.test(pg::ANON) || !page.trylock() {
        return Verdict::Keep;
    }
    let v = if page.test(pg::SWAPCACHE) {
        free_swapcache_locked(k, cpu, pfn)
    } else {
        swap_out_locked(k, cpu, pfn)
    };
    // A freed page was unlocked and freed inside.
    if !matches!(v, Verdict::Freed) {
        page.unlock();
    }
    v
}

/// The body of `shrink_folio_list` for a locked, isolated anonymous page.
fn swap_out_locked(k: &Kernel, cpu: CpuId, pfn: Pfn) -> Verdict {
    let mem = k.mem();
    let page = &mem.pages()[pfn];
    let Some(swap) = k.swap() else {
        return Verdict::Keep;
    };
    let Some(mm) = k.mm_by_id(page.mapping.load(Relaxed) as u32) else {
        // Its address space is exiting; the unmap will free it.
        return Verdict::Keep;
    };
    let addr = page.index.load(Relaxed) << 12;
    let _rmap = mm.rmap_read(cpu, addr);
    let pt = &mm.pgtable;
    let Some(slot) = pt.walk(addr) else {
        return Verdict::Keep;
    };
    // The rmap walk and try_to_unmap below take this table's lock on `cpu`: a taker like the
    // faults that mapped the page, so a table reclaimed by another CPU is traced as shared.
    pt.note_pte_user(slot, cpu);
    // folio_referenced + folio_check_references.
    {
        let _ptl = pt.pte_lock(slot);
        let pte = pt.load(slot);
        if !pte.present() || pte.pfn() != pfn {
            return Verdict::Keep;
        }
        let old = pt.update(slot, |p| p.with_accessed(false));
        if old.accessed() {
            let referenced_before = page.flags.fetch_or(pg::REFERENCED, AcqRel) & pg::REFERENCED;
            return if referenced_before != 0 {
                page.clear(pg::REFERENCED);
                Verdict::Activate
            } else {
                Verdict::Keep
            };
        }
    }
    // add_to_swap.
    let Some(entry) = swap.folio_alloc_swap(cpu) else {
        return Verdict::Activate;
    };
    if swap.swap_cache().add_to_swap_cache(entry, pfn).is_err() {
        let _ = swap.put_swap_folio(cpu, entry);
        return Verdict::Keep;
    }
    mem.get_page(pfn);
    page.private.store(entry.offset() as u32, Relaxed);
    page.set(pg::SWAPCACHE);
    // try_to_unmap.
    let unmapped = {
        let _ptl = pt.pte_lock(slot);
        let pte = pt.load(slot);
        if pte.present() && pte.pfn() == pfn {
            swap.swap_duplicate(entry)
                .expect("a freshly reserved slot takes a reference");
            // One exchange, never a none entry in between: a lockless anonymous fault
            // (`mm.ptl = "atomic"`) would fill it, and the swap entry would overwrite that.
            let old = pt.xchg(slot, entry.to_pte());
            if old.dirty() {
                page.set(pg::DIRTY);
            }
            page.mapcount.fetch_sub(1, Relaxed);
            // The mapping's reference goes with it (never the last: the isolation and the
            // swap cache hold theirs).
            page.refcount.fetch_sub(1, AcqRel);
            true
        } else {
            false
        }
    };
    if !unmapped {
        // A munmap took the PTE first: undo the swap cache.
        drop_from_swap_cache(k, cpu, pfn, entry, None);
        return Verdict::Keep;
    }
    mm.rss.add_direct(cpu, RssType::Anon, -1);
    mm.tlb.flush_for_reclaim(cpu, mem.events());
    // pageout.
    swap.swap_out_frame(cpu, entry, mem.arena(), pfn)
        .expect("a reserved slot of the device can be written");
    remove_swapcache_mapping(k, cpu, pfn, entry)
}

/// `__remove_mapping` for a locked, isolated, unmapped swap-cache page whose contents are in
/// its slot: if only the swap cache's and the isolation's references remain (frozen to zero
/// with one compare-and-swap), the page leaves the swap cache with a shadow entry and is
/// freed. Otherwise someone (a swap-in) holds it: it stays.
fn remove_swapcache_mapping(k: &Kernel, cpu: CpuId, pfn: Pfn, entry: SwapEntry) -> Verdict {
    let page = &k.mem().pages()[pfn];
    let swap = k.swap().expect("a swap-cache page implies a swap device");
    if page
        .refcount
        .compare_exchange(2, 0, AcqRel, Relaxed)
        .is_err()
    {
        return Verdict::Keep;
    }
    let shadow = eviction_shadow(k, pfn);
    swap.swap_cache()
        .delete_from_swap_cache(entry, Some(shadow));
    page.clear(pg::SWAPCACHE | pg::REFERENCED);
    let _ = swap.put_swap_folio(cpu, entry);
    page.unlock();
    k.mem().free_frozen_pages(cpu, pfn, 0);
    Verdict::Freed
}

/// A locked, isolated page already in the swap cache and unmapped (an earlier reclaim could
/// not free it because someone held a reference, or a swap-in found its PTE gone): its
/// contents are in its slot, so it can be freed like a page just written out.
fn free_swapcache_locked(k: &Kernel, cpu: CpuId, pfn: Pfn) -> Verdict {
    let page = &k.mem().pages()[pfn];
    if page.mapcount.load(Relaxed) != 0 {
        return Verdict::Keep;
    }
    remove_swapcache_mapping(k, cpu, pfn, swap_entry_of(k, pfn))
}

/// Take a page the caller has locked out of the swap cache and drop the cache's reference
/// and slot reservation (`delete_from_swap_cache` + `put_swap_folio` + `folio_put`).
pub(crate) fn drop_from_swap_cache(
    k: &Kernel,
    cpu: CpuId,
    pfn: Pfn,
    entry: SwapEntry,
    shadow: Option<u64>,
) {
    let swap = k.swap().expect("a swap-cache page implies a swap device");
    let page = &k.mem().pages()[pfn];
    swap.swap_cache().delete_from_swap_cache(entry, shadow);
    page.clear(pg::SWAPCACHE);
    let _ = swap.put_swap_folio(cpu, entry);
    // Never the last reference: the caller holds one.
    let prev = page.refcount.fetch_sub(1, AcqRel);
    debug_assert!(prev > 1, "{pfn:?}: the swap cache held the last reference");
}

/// The entry of a page in the swap cache.
pub(crate) fn swap_entry_of(k: &Kernel, pfn: Pfn) -> SwapEntry {
    let swap = k.swap().expect("a swap-cache page implies a swap device");
    SwapEntry::new(
        swap.swp_type(),
        u64::from(k.mem().pages()[pfn].private.load(Relaxed)),
    )
}
