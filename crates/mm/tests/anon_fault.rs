//! The anonymous fault paths on the whole engine: the shared zero page (a read fault maps it,
//! the first write copies it into a private zeroed page), copy-on-write under a memory cgroup
//! at its limit, and the counters the kernel keeps for each (RSS, memcg usage, LRU).

use std::sync::Arc;

use pagelab_mm::policy::MemcgCharge;
use pagelab_mm::reclaim::swap::{Backing, SwapConfig};
use pagelab_mm::vm::rss::RssType;
use pagelab_mm::vmstat::VmEvent;
use pagelab_mm::{CpuId, Kernel, MapKind, MemConfig, Policy};

const PAGE: u64 = 4096;

/// Page-by-page charging, so that a group's usage is exactly the pages charged to it.
fn exact_memcg() -> Policy {
    let mut p = Policy::default();
    p.memcg.charge = MemcgCharge::Atomic;
    p
}

fn kernel(arena: u64, swap_pages: Option<u64>, policy: &Policy) -> Arc<Kernel> {
    let swap = swap_pages.map(|p| SwapConfig::new(p, Backing::Memory { compress: false }, 2));
    let cfg = MemConfig::new(arena, 2).with_memcgs(2);
    Kernel::with_swap(&cfg, policy, swap).unwrap()
}

/// The frame `addr` is mapped to and whether the mapping is writable.
fn mapping(mm: &pagelab_mm::Mm, addr: u64) -> Option<(pagelab_mm::page::Pfn, bool)> {
    let slot = mm.pgtable.walk(addr)?;
    let pte = mm.pgtable.load(slot);
    pte.present().then(|| (pte.pfn(), pte.writable()))
}

#[test]
fn a_read_maps_the_zero_page_and_a_write_gives_a_private_zeroed_page() {
    let k = kernel(16 << 20, None, &exact_memcg());
    let mm = k.new_mm(CpuId(0)).unwrap();
    mm.set_memcg(1).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let n = 8;
    let a = t.mmap(n * PAGE, true, MapKind::Anon).unwrap();
    let free_before = k.mem().check().unwrap().free();
    let tables_before = mm.pgtable.nr_tables();
    for i in 0..n {
        assert_eq!(t.load(a + i * PAGE + 8).unwrap(), 0);
    }
    // Every read mapped the one zero frame, read-only in a writable VMA.
    for i in 0..n {
        assert_eq!(
            mapping(&mm, a + i * PAGE),
            Some((k.zero_pfn(), false)),
            "page {i}"
        );
    }
    // No page was allocated for the data (only the one PTE table), none charged, none on an
    // LRU, and RSS counts nothing: the kernel adds no counter on the zero-page branch.
    t.sync_rss();
    assert_eq!(mm.rss.sum(RssType::Anon), 0);
    assert_eq!(mm.rss.sum(RssType::File), 0);
    assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 0);
    let tables = (mm.pgtable.nr_tables() - tables_before) as u64;
    assert_eq!(
        free_before - k.mem().check().unwrap().free(),
        tables,
        "only page tables"
    );
    let zero = &k.mem().pages()[k.zero_pfn()];
    assert_eq!(zero.mapcount.load(std::sync::atomic::Ordering::Relaxed), 0);

    // The first write is a copy-on-write fault: a page of its own, zeroed, writable.
    let cow_before = k.mem().events().sum(VmEvent::FaultCow);
    t.store(a + 2 * PAGE, 0xfeed).unwrap();
    assert_eq!(k.mem().events().sum(VmEvent::FaultCow) - cow_before, 1);
    let (p, w) = mapping(&mm, a + 2 * PAGE).unwrap();
    assert!(p != k.zero_pfn() && w, "{p:?} writable {w}");
    assert_eq!(t.load(a + 2 * PAGE).unwrap(), 0xfeed);
    for word in 1..512 {
        assert_eq!(t.load(a + 2 * PAGE + word * 8).unwrap(), 0, "word {word}");
    }
    // The zero page itself was not written, and the other pages still map it.
    assert!(k.mem().arena().page_is_zero(k.zero_pfn()));
    assert_eq!(mapping(&mm, a + 3 * PAGE), Some((k.zero_pfn(), false)));
    assert_eq!(t.load(a + 3 * PAGE).unwrap(), 0);
    t.sync_rss();
    assert_eq!(mm.rss.sum(RssType::Anon), 1, "only the copied page counts");
    assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 1, "and is charged");
    mm.check(true).unwrap();

    // Unmapping the zero page's mappings frees nothing of it.
    t.munmap(a, n * PAGE).unwrap();
    mm.check(true).unwrap();
    assert_eq!(mm.rss.sum(RssType::Anon), 0);
    drop(t);
    drop(mm);
    k.drain_deferred_mms();
    k.lru().drain_all();
    k.mem().drain_all_pages();
    let c = k.mem().check().unwrap();
    assert_eq!(c.allocated, Kernel::RESERVED_FRAMES, "{c:?}");
    assert!(k.mem().arena().page_is_zero(k.zero_pfn()));
    assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 0);
}

/// A group limited to 256 pages reads 1024 pages (the zero page: no charge) and then writes
/// them: every write is a copy-on-write fault, which must charge the group and reclaim from it
/// at its limit as the other fault paths do, never passing the limit nor failing.
#[test]
fn copy_on_write_under_a_tight_memcg_reclaims_instead_of_failing() {
    let k = kernel(64 << 20, Some(4096), &exact_memcg());
    let max = 256;
    k.mem().memcgs().set_max(1, max).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    mm.set_memcg(1).unwrap();
    let t = k.new_task(mm.clone(), CpuId(0));
    let n = 1024;
    let a = t.mmap(n * PAGE, true, MapKind::Anon).unwrap();
    for i in 0..n {
        assert_eq!(t.load(a + i * PAGE).unwrap(), 0);
    }
    assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 0);
    for i in 0..n {
        t.store(a + i * PAGE, i ^ 0xabc)
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
        let s = k.mem().memcgs().stat(1).unwrap();
        assert!(s.usage <= max, "usage {} over {max} at page {i}", s.usage);
    }
    let s = k.mem().memcgs().stat(1).unwrap();
    assert!(s.reclaimed > 0 && s.oom_events == 0, "{s:?}");
    assert!(k.mem().events().sum(VmEvent::FaultCow) >= n);
    for i in 0..n {
        assert_eq!(t.load(a + i * PAGE).unwrap(), i ^ 0xabc, "page {i}");
    }
    t.munmap(a, n * PAGE).unwrap();
    k.lru().drain_all();
    assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 0, "charges left");
}
