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

/// Pages of `[a, a + n pages)` mapped, by page number.
fn mapped_pages(mm: &pagelab_mm::Mm, a: u64, n: u64) -> Vec<u64> {
    (0..n)
        .filter(|i| mapping(mm, a + i * PAGE).is_some())
        .collect()
}

/// `mm.anon_prefault = 4`: a write fault maps its page and the 4 after it, never past the VMA's
/// end nor the faulting PTE table's, and skips pages already mapped; each page is charged,
/// counted in RSS and zeroed.
#[test]
fn prefault_maps_the_next_pages_within_the_vma_and_the_table() {
    for ptl in [
        pagelab_mm::policy::Ptl::Mm,
        pagelab_mm::policy::Ptl::Split,
        pagelab_mm::policy::Ptl::Atomic,
    ] {
        let mut p = exact_memcg();
        p.mm.anon_prefault = 4;
        p.mm.ptl = ptl;
        let k = kernel(32 << 20, None, &p);
        let mm = k.new_mm(CpuId(0)).unwrap();
        mm.set_memcg(1).unwrap();
        let t = k.new_task(mm.clone(), CpuId(0));
        // 3 PTE tables' worth, so that the VMA crosses at least one table boundary.
        let n = 3 * 512;
        let a = t.mmap(n * PAGE, true, MapKind::Anon).unwrap();
        let table_page = |i: u64| ((a >> 12) + i) % 512;

        // In the middle of a table: the page and the next 4.
        let mid = (0..n - 8).find(|&i| table_page(i) == 100).unwrap();
        t.store(a + mid * PAGE, 1).unwrap();
        assert_eq!(
            mapped_pages(&mm, a, n),
            (mid..mid + 5).collect::<Vec<_>>(),
            "{ptl:?}"
        );
        for i in mid + 1..mid + 5 {
            assert_eq!(t.load(a + i * PAGE + 16).unwrap(), 0, "{ptl:?} page {i}");
        }

        // Two pages before a table's end: the page and the one after, not the next table's.
        let edge = (0..n - 8).find(|&i| table_page(i) == 510).unwrap();
        t.store(a + edge * PAGE, 2).unwrap();
        assert!(mapping(&mm, a + (edge + 1) * PAGE).is_some(), "{ptl:?}");
        assert!(
            mapping(&mm, a + (edge + 2) * PAGE).is_none(),
            "{ptl:?}: prefault crossed into the next PTE table"
        );

        // An already mapped page in the window (here the zero page, read before) is left
        // alone and the others are filled.
        let start = (0..n - 8).find(|&i| table_page(i) == 200).unwrap();
        assert_eq!(t.load(a + (start + 2) * PAGE).unwrap(), 0);
        let before = mapped_pages(&mm, a, n).len();
        t.store(a + start * PAGE, 4).unwrap();
        assert_eq!(mapped_pages(&mm, a, n).len(), before + 4, "{ptl:?}");
        assert_eq!(
            mapping(&mm, a + (start + 2) * PAGE),
            Some((k.zero_pfn(), false))
        );

        // At the VMA's last page: that page only.
        let before = mapped_pages(&mm, a, n).len();
        t.store(a + (n - 1) * PAGE, 5).unwrap();
        assert_eq!(mapped_pages(&mm, a, n).len(), before + 1, "{ptl:?}");

        // A read fault still maps the zero page and nothing more.
        let r = (0..n - 8).find(|&i| table_page(i) == 300).unwrap();
        let before = mapped_pages(&mm, a, n).len();
        assert_eq!(t.load(a + r * PAGE).unwrap(), 0);
        assert_eq!(mapped_pages(&mm, a, n).len(), before + 1, "{ptl:?}");

        let total = mapped_pages(&mm, a, n)
            .iter()
            .filter(|&&i| mapping(&mm, a + i * PAGE).unwrap().0 != k.zero_pfn())
            .count() as i64;
        assert_eq!(total, 5 + 2 + 4 + 1, "{ptl:?}");
        t.sync_rss();
        assert_eq!(mm.rss.sum(RssType::Anon), total, "{ptl:?}");
        assert_eq!(
            k.mem().memcgs().stat(1).unwrap().usage,
            total as u64,
            "{ptl:?}: every prefaulted page is charged"
        );
        mm.check(true).unwrap();
        t.munmap(a, n * PAGE).unwrap();
        k.lru().drain_all();
        assert_eq!(k.mem().memcgs().stat(1).unwrap().usage, 0, "{ptl:?}");
    }
}

/// `mm.ptl = "atomic"`: many threads fault the same pages at once, with no PTE lock; every
/// page ends mapped once, the losers' pages are freed, RSS is exact, and nothing leaks.
#[test]
fn atomic_installs_race_without_leaks() {
    let mut p = Policy::default();
    p.mm.ptl = pagelab_mm::policy::Ptl::Atomic;
    p.mm.rss = pagelab_mm::policy::RssCounter::Atomic;
    p.mm.vma_lock = pagelab_mm::policy::VmaLock::None;
    let k = Kernel::new(&MemConfig::new(32 << 20, 4), &p).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    let n = 2048;
    let a = k
        .new_task(mm.clone(), CpuId(0))
        .mmap(n * PAGE, true, MapKind::Anon)
        .unwrap();
    std::thread::scope(|s| {
        for c in 0..4u16 {
            let t = k.new_task(mm.clone(), CpuId(c));
            s.spawn(move || {
                for i in 0..n {
                    // Half the threads read first (the zero page), so that writes race
                    // both with installs and with copy-on-write of the zero page.
                    if c % 2 == 1 {
                        let _ = t.load(a + i * PAGE).unwrap();
                    }
                    t.store(a + i * PAGE + 8 * u64::from(c), u64::from(c) + 1)
                        .unwrap();
                }
                t.sync_rss();
            });
        }
    });
    let t = k.new_task(mm.clone(), CpuId(0));
    for i in 0..n {
        for c in 0..4u64 {
            assert_eq!(t.load(a + i * PAGE + 8 * c).unwrap(), c + 1, "page {i}");
        }
    }
    let (anon, _) = mm.check(true).unwrap();
    assert_eq!(anon, n);
    t.munmap(a, n * PAGE).unwrap();
    drop(t);
    drop(mm);
    k.drain_deferred_mms();
    k.lru().drain_all();
    k.mem().drain_all_pages();
    assert_eq!(k.mem().check().unwrap().allocated, Kernel::RESERVED_FRAMES);
}
