//! The line events on the real engine: a capture records the shared data lines a fault
//! touches (list heads and their first entries, counters, sequence counts, the lock word read
//! before its exchange), where the kernel touches them (under the lock that protects them).

use pagelab_bench::profiles;
use pagelab_mm::policy::{LruAdd, LruRelease};
use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::trace::{Event, Trace};
use pagelab_sync::Scope;
use pagelab_sync::trace::{LockModel, Sym};
use pagelab_workloads::WorkloadKind;

fn page_fault1(profile: &str, per_page: bool) -> Trace {
    page_fault1_with(profile, per_page, None)
}

fn page_fault1_with(profile: &str, per_page: bool, release: Option<LruRelease>) -> Trace {
    let mut p = profiles::load(profile).unwrap();
    if let Some(r) = release {
        p.policy.lru.release = r;
    }
    if per_page {
        p.policy.lru.add = LruAdd::PerPage;
        // `lru.batch` is refused with per-page adds unless it is the default (15).
        p.policy.lru.batch = 15;
    }
    let mut spec = CaptureSpec::new(WorkloadKind::PageFault1, p, 16);
    spec.cycles = 1;
    capture(&spec).unwrap()
}

/// A line event or store as (instance, written, which line): a store is a write the CPU does
/// not wait for.
fn access(e: &Event) -> Option<(u32, bool, Sym)> {
    match *e {
        Event::Line { inst, write, sym } => Some((inst, write, sym)),
        Event::Store { inst, sym } => Some((inst, true, sym)),
        _ => None,
    }
}

/// Line events (stores among them) of `class` matching `f`, per operation.
fn per_op(t: &Trace, class: &str, f: impl Fn(bool, Sym) -> bool) -> f64 {
    let n = t
        .events
        .iter()
        .filter_map(access)
        .filter(|&(inst, write, sym)| t.instances[inst as usize].class == class && f(write, sym))
        .count();
    n as f64 / t.meta.ops as f64
}

/// Every `class` line write of the trace happens while an instance of one of `locks` is held.
fn written_under(t: &Trace, class: &str, locks: &[&str]) -> bool {
    let mut held = 0i32;
    let mut seen = false;
    let is_lock = |inst: u32| locks.contains(&t.instances[inst as usize].class.as_str());
    for e in &t.events {
        match *e {
            Event::Acquire { inst, .. } if is_lock(inst) => held += 1,
            Event::Release { inst, .. } if is_lock(inst) => held -= 1,
            _ if access(e).is_some_and(|(inst, write, _)| {
                write && t.instances[inst as usize].class == class
            }) =>
            {
                seen = true;
                if held <= 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    seen
}

#[test]
fn lru_adds_write_the_list_head_and_first_entry_once_per_lru_lock_hold() {
    let per_page = page_fault1("lru-lock-base", true);
    let batch = page_fault1("lru-lock-base", false);
    let splice = page_fault1("lru-lock-splice", false);
    for t in [&per_page, &batch, &splice] {
        // RFC v1: a batch's inner pages leave under their batch lock alone.
        assert!(
            written_under(t, "lru list", &["lru_lock", "lru_batch_lock"]),
            "{}: an LRU list line written outside lru_lock and the batch locks",
            t.meta.profile
        );
        let i = t.instances.iter().find(|i| i.class == "lru list").unwrap();
        assert_eq!((i.scope, i.model), (Scope::Node, LockModel::Line));
    }
    // Every fault adds one page. One lock hold per page writes the list's first entry (the
    // page the previous adder linked) and its head once per page; a batch of 14 or a splice
    // of 14 writes them once per hold: the other 13 pages' links are the task's own lines
    // (the trace keeps a line once per exclusive section).
    let first = |t: &Trace| per_op(t, "lru list", |w, s| w && s == Sym::First);
    // The adds' head and counter writes: those under lru_lock alone (under the RFC v1's batch
    // locks the releases write the counter too, under a batch lock).
    let heads = |t: &Trace| {
        let class = |inst: u32| t.instances[inst as usize].class.as_str();
        let (mut lru, mut batch, mut n) = (0i32, 0i32, 0usize);
        for e in &t.events {
            match *e {
                Event::Acquire { inst, .. } if class(inst) == "lru_lock" => lru += 1,
                Event::Release { inst, .. } if class(inst) == "lru_lock" => lru -= 1,
                Event::Acquire { inst, .. } if class(inst) == "lru_batch_lock" => batch += 1,
                Event::Release { inst, .. } if class(inst) == "lru_batch_lock" => batch -= 1,
                _ if lru > 0
                    && batch == 0
                    && access(e).is_some_and(|(inst, write, sym)| {
                        write && sym == Sym::Here && class(inst) == "lru list"
                    }) =>
                {
                    n += 1
                }
                _ => {}
            }
        }
        n as f64 / t.meta.ops as f64
    };
    assert!(
        (first(&per_page) - 1.0).abs() < 0.01,
        "per page {}",
        first(&per_page)
    );
    for t in [&batch, &splice] {
        assert!(
            (first(t) - 1.0 / 14.0).abs() < 0.01,
            "{}: {}",
            t.meta.profile,
            first(t)
        );
        assert!(
            heads(t) < heads(&per_page) / 8.0,
            "{} {}",
            heads(t),
            heads(&per_page)
        );
    }
    // The RFC v2 (Sept 2018, release = "concurrent") releases pages concurrently under a
    // shared lru_lock: the list size is one atomic per page that every remover shares.
    let batch = page_fault1_with("lru-lock-base", false, Some(LruRelease::Concurrent));
    let size_atomics = |t: &Trace| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Atomic { inst } if t.instances[*inst as usize].class == "lru list"))
            .count() as f64
            / t.meta.ops as f64
    };
    assert!(
        (size_atomics(&batch) - 1.0).abs() < 0.01,
        "{}",
        size_atomics(&batch)
    );
}

#[test]
fn the_buddy_free_lists_are_written_under_zone_lock_once_per_list_and_hold() {
    let t = page_fault1("lru-lock-base", false);
    assert!(written_under(&t, "free_area", &["zone->lock"]));
    // pcp refills take blocks off the free lists' heads and frees back to the buddy push them:
    // once per list and hold (the rest of a bulk refill or free is the task's own lines).
    // Merges with buddies (`entry` writes) resolve to the list's first-entry writer, which
    // is this task after its first push of the hold, so they are kept only before it.
    let first = per_op(&t, "free_area", |w, s| w && s == Sym::First);
    let holds = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { inst, .. } if t.instances[*inst as usize].class == "zone->lock"))
        .count() as f64
        / t.meta.ops as f64;
    assert!(
        first > 0.0 && first < 12.0 * holds,
        "{first} per op, {holds} holds"
    );
    // `NR_FREE_PAGES`: a per-CPU delta in the kernel, no locked instruction; one store of the
    // zone's line per hold stands for its folds.
    let nr_free = |atomic: bool| {
        t.events
            .iter()
            .filter(|e| match e {
                Event::Atomic { inst } => {
                    atomic && t.instances[*inst as usize].class == "NR_FREE_PAGES"
                }
                Event::Store { inst, .. } => {
                    !atomic && t.instances[*inst as usize].class == "NR_FREE_PAGES"
                }
                _ => false,
            })
            .count()
    };
    assert!(nr_free(false) > 0);
    assert_eq!(nr_free(true), 0);
}

/// What the CPU waits for and what it leaves in its store buffer, as the kernel's code has
/// it: under `zone->lock` a hold's first free-list access is a load the CPU waits for (a pop's
/// head, or the buddy a free merges with), never a store, and `nr_free` and the links of the
/// blocks next to the ones taken off are stores; under `lru_lock` the LRU size counter and the
/// links `list_add` and `list_del` rewrite are stores, the heads the adds read are writes.
#[test]
fn list_links_and_counters_are_stores_the_cpu_does_not_wait_for() {
    let t = page_fault1("linux-4.15", false);
    let class = |inst: u32| t.instances[inst as usize].class.as_str();
    let mut in_zone = false;
    let mut first_in_hold: Vec<&Event> = Vec::new();
    for e in &t.events {
        match *e {
            Event::Acquire { inst, .. } if class(inst) == "zone->lock" => {
                in_zone = true;
                first_in_hold.push(e);
            }
            Event::Release { inst, .. } if class(inst) == "zone->lock" => in_zone = false,
            Event::Line { inst, .. } | Event::Store { inst, .. }
                if in_zone && class(inst) == "free_area" =>
            {
                if matches!(first_in_hold.last(), Some(Event::Acquire { .. })) {
                    first_in_hold.push(e);
                }
            }
            _ => {}
        }
    }
    let firsts: Vec<_> = first_in_hold
        .iter()
        .filter(|e| !matches!(e, Event::Acquire { .. }))
        .collect();
    assert!(!firsts.is_empty());
    assert!(
        firsts
            .iter()
            .all(|e| matches!(e, Event::Line { write: true, .. })),
        "a zone->lock hold began its free-list accesses with a store: {:?}",
        firsts.iter().find(|e| !matches!(e, Event::Line { .. }))
    );
    let stores = |c: &str, sym: Sym| {
        t.events
            .iter()
            .filter(
                |e| matches!(e, Event::Store { inst, sym: s } if class(*inst) == c && *s == sym),
            )
            .count() as f64
            / t.meta.ops as f64
    };
    // `nr_free` once per order a hold touches; the LRU size once per add hold and per page
    // released; a link next to a 14-page run's edge as the run is released (1/14 a fault).
    assert!(
        stores("free_area", Sym::Here) > 0.1,
        "{}",
        stores("free_area", Sym::Here)
    );
    assert!(stores("free_area", Sym::Entry) > 0.0);
    assert!(
        stores("lru list", Sym::Here) > 0.05,
        "{}",
        stores("lru list", Sym::Here)
    );
    assert!(
        stores("lru list", Sym::Entry) > 0.05,
        "{}",
        stores("lru list", Sym::Entry)
    );
    // The heads the adds and pops read are writes the CPU waits for.
    let waited = |c: &str, sym: Sym| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::Line { inst, write: true, sym: s } if class(*inst) == c && *s == sym))
            .count() as f64
            / t.meta.ops as f64
    };
    let adds = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { inst, .. } if class(*inst) == "lru_lock"))
        .count() as f64
        / t.meta.ops as f64;
    assert!(
        waited("lru list", Sym::Here) > 0.5 * adds,
        "{} {adds}",
        waited("lru list", Sym::Here)
    );
    assert!(waited("free_area", Sym::Here) > 0.0);
}

#[test]
fn per_vma_lock_faults_read_both_sequence_counts_and_the_lock_word_before_its_exchange() {
    let mut p = profiles::load("pvl-v2").unwrap();
    // Only the trylock's own read of the count here; the layout's reads of other fields on
    // its line are the next test's.
    p.policy.mm.vma_lock_line_reads = 0;
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    spec.pft_bytes = 16 << 20;
    let t = capture(&spec).unwrap();
    let vma_acquires = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { inst, .. } if t.instances[*inst as usize].class == "vma lock"))
        .count() as f64
        / t.meta.ops as f64;
    assert!(vma_acquires > 0.99, "{vma_acquires}");
    // Every per-VMA-lock fault reads vm_lock_seq and mm_lock_seq, and the rwsem's count before
    // its compare-and-exchange (the same instance as the lock, which stays an rwsem).
    let reads = |class: &str| per_op(&t, class, |w, s| !w && s == Sym::Here);
    assert!(
        reads("vm_lock_seq") >= vma_acquires,
        "{}",
        reads("vm_lock_seq")
    );
    assert!(
        reads("mm_lock_seq") >= vma_acquires,
        "{}",
        reads("mm_lock_seq")
    );
    assert!(
        (reads("vma lock") - vma_acquires).abs() < 0.01,
        "{}",
        reads("vma lock")
    );
    let vma = t.instances.iter().find(|i| i.class == "vma lock").unwrap();
    assert_eq!((vma.scope, vma.model), (Scope::Vma, LockModel::RwSem));
    let seq = t
        .instances
        .iter()
        .find(|i| i.class == "vm_lock_seq")
        .unwrap();
    assert_eq!(seq.scope, Scope::Vma);
}

/// pft on one shared VMA with the profile's lock-line switches overridden.
fn pft(profile: &str, mmap_reads: u32, vma_reads: u32) -> Trace {
    pft_with(profile, mmap_reads, vma_reads, |_| {})
}

fn pft_with(
    profile: &str,
    mmap_reads: u32,
    vma_reads: u32,
    f: impl FnOnce(&mut pagelab_mm::policy::MmPolicy),
) -> Trace {
    let mut p = profiles::load(profile).unwrap();
    p.policy.mm.mmap_lock_line_reads = mmap_reads;
    p.policy.mm.vma_lock_line_reads = vma_reads;
    f(&mut p.policy.mm);
    let mut spec = CaptureSpec::new(WorkloadKind::Pft, p, 8);
    spec.pft_bytes = 16 << 20;
    capture(&spec).unwrap()
}

/// Per shared acquisition of `lock`: its plain line reads, and of those, how many come after
/// the page's clear within the hold (the anonymous fault's read where it builds the PTE).
fn lock_line_reads(t: &Trace, lock: &str) -> (f64, f64) {
    let is = |inst: u32| t.instances[inst as usize].class == lock;
    let (mut holds, mut reads, mut after_clear) = (0u64, 0u64, 0u64);
    let mut cleared = false;
    for e in &t.events {
        match *e {
            Event::Acquire {
                inst, shared: true, ..
            } if is(inst) => {
                holds += 1;
                cleared = false;
            }
            // The trylock's read of the count comes before its acquisition.
            Event::Release { inst, .. } if is(inst) => cleared = false,
            Event::Write { .. } => cleared = true,
            Event::Line {
                inst,
                write: false,
                sym: Sym::Here,
            } if is(inst) => {
                reads += 1;
                after_clear += u64::from(cleared);
            }
            _ => {}
        }
    }
    let h = holds.max(1) as f64;
    (reads as f64 / h, after_clear as f64 / h)
}

#[test]
fn faults_read_the_lock_words_lines_as_often_as_the_layout_switch_says() {
    // With the VMA's rwsem in its first line (the series before "mm: separate vma->lock from
    // vm_area_struct"), besides the count read before the trylock each fault reads that line
    // where it starts and again after clearing its page.
    for (n, after) in [(0, 0.0), (1, 0.0), (2, 1.0)] {
        let t = pft("pvl-v2", 0, n);
        let (reads, after_clear) = lock_line_reads(&t, "vma lock");
        assert!(
            (reads - (1.0 + f64::from(n))).abs() < 0.01,
            "vma_lock_line_reads = {n}: {reads} reads of the VMA lock's line per hold"
        );
        assert!(
            (after_clear - after).abs() < 0.01,
            "vma_lock_line_reads = {n}: {after_clear} reads after the page clear per hold"
        );
        let vma = t.instances.iter().find(|i| i.class == "vma lock").unwrap();
        assert_eq!((vma.scope, vma.model), (Scope::Vma, LockModel::RwSem));
    }
    // Under mmap_lock (mm-unstable) the read is mm->pgd where the walk starts: on the lock's
    // own instance, which stays the rwsem it is. x86's `mmap_read_trylock` reads the count
    // before its exchange too (`__down_read_trylock` since 14c24048841f, 5.16), one read per
    // hold besides the layout's: it hits when the entry's prefetch still holds the line.
    for n in [0, 1, 2] {
        let t = pft("mm-unstable-20230210", n, 0);
        let (reads, after_clear) = lock_line_reads(&t, "mmap_lock");
        assert!(
            (reads - (1.0 + f64::from(n))).abs() < 0.01,
            "mmap_lock_line_reads = {n}: {reads} reads of mmap_lock's line per hold"
        );
        assert!(
            (after_clear - f64::from(n.saturating_sub(1))).abs() < 0.01,
            "mmap_lock_line_reads = {n}: {after_clear}"
        );
        let m = t.instances.iter().find(|i| i.class == "mmap_lock").unwrap();
        assert_eq!((m.scope, m.model), (Scope::Mm, LockModel::RwSem));
    }
    // Under the per-VMA lock's fallback the trylock comes long after the entry's prefetch: its
    // read of the count is recorded (one per fallback segment), and not with ia64's
    // `down_read` (`mmap_read_trylock = false`).
    for (trylock, want) in [(true, 1.0), (false, 0.0)] {
        let t = pft_with("pvl-v2", 0, 0, |mm| mm.mmap_read_trylock = trylock);
        let vma = t.fallbacks.iter().find(|f| f.class == "vma lock").unwrap();
        let m = t
            .instances
            .iter()
            .position(|i| i.class == "mmap_lock")
            .unwrap() as u32;
        let reads = vma
            .segments
            .iter()
            .map(|seg| {
                seg.iter()
                    .filter(|e| matches!(e, Event::Line { inst, write: false, .. } if *inst == m))
                    .count()
            })
            .sum::<usize>() as f64
            / vma.segments.len().max(1) as f64;
        assert!(
            (reads - want).abs() < 0.01,
            "mmap_read_trylock = {trylock}: {reads} reads per fallback"
        );
    }
    // The shipped profile: what the benchmarked series' layout says. pvl-v2 as posted ends with
    // "mm: separate vma->lock from vm_area_struct" (v2 33/33), so the VMA lock's line holds no
    // field of the VMA and the only read of it is the trylock's own, before its exchange; the
    // mm's line still holds pgd next to mmap_lock's count.
    let shipped = profiles::load("pvl-v2").unwrap().policy.mm;
    let (reads, _) = lock_line_reads(
        &pft(
            "pvl-v2",
            shipped.mmap_lock_line_reads,
            shipped.vma_lock_line_reads,
        ),
        "vma lock",
    );
    assert_eq!(
        (shipped.mmap_lock_line_reads, shipped.vma_lock_line_reads),
        (1, 0)
    );
    assert!((reads - 1.0).abs() < 0.01, "{reads}");
}

#[test]
fn every_fault_prefetches_mmap_locks_line_for_writing_whichever_lock_it_takes() {
    // `prefetchw(&mm->mmap_lock)` at the exception entry: one prefetch of the lock's line for
    // writing per fault, recorded as a prefetch (the CPU does not wait for it), never as a
    // write. Under mmap_lock the trylock's read and exchange follow it; under the per-VMA
    // lock, which never takes mmap_lock, only the layout's read of mm->pgd touches the line.
    // Lock-free faults (rcu-vma) leave it out: they write no line another faulting CPU
    // writes.
    for (profile, want) in [
        ("mm-unstable-20230210", 1.0),
        ("pvl-v2", 1.0),
        ("rcu-vma", 0.0),
    ] {
        let t = pft(profile, 0, 0);
        let m = t
            .instances
            .iter()
            .position(|i| i.class == "mmap_lock")
            .map(|i| i as u32);
        let prefetches = t
            .events
            .iter()
            .filter(|e| matches!(e, Event::Prefetch { inst } if Some(*inst) == m))
            .count() as f64
            / t.meta.ops as f64;
        assert!(
            (prefetches - want).abs() < 0.01,
            "{profile}: {prefetches} prefetches per fault"
        );
        let writes = per_op(&t, "mmap_lock", |w, s| w && s == Sym::Here);
        assert!(writes < 0.01, "{profile}: {writes} line writes per fault");
        if profile == "mm-unstable-20230210" {
            let m = m.unwrap();
            let s: String = t
                .events
                .iter()
                .filter_map(|e| match *e {
                    Event::Prefetch { inst } if inst == m => Some('p'),
                    Event::Line { inst, write, .. } if inst == m => {
                        Some(if write { 'w' } else { 'r' })
                    }
                    Event::Acquire { inst, .. } if inst == m => Some('a'),
                    _ => None,
                })
                .take(30)
                .collect();
            assert!(s.contains("prapra"), "{profile}: {s}");
        }
    }
}

#[test]
fn the_fault_entrys_prefetch_is_where_the_profile_keeps_it_and_every_fault_returns() {
    // `mm.fault_prefetch_mmap_lock`: 1701771d3069 (6.16) removed the entry's `prefetchw`.
    // With it off nothing of the fault touches mmap_lock's line under the per-VMA lock; the
    // shipped pair differs in that alone. Every fault records its exception's return
    // (`iretq`) after all of its own events: one per trap, each before the next trap, and a
    // fault's prefetch always between its trap and its return.
    for (profile, want) in [("linux-6.15", 1.0), ("linux-6.15-no-entry-prefetch", 0.0)] {
        let t = pft(profile, 0, 0);
        let prefetches = t
            .events
            .iter()
            .filter(|e| matches!(e, Event::Prefetch { .. }))
            .count() as f64
            / t.meta.ops as f64;
        assert!(
            (prefetches - want).abs() < 0.01,
            "{profile}: {prefetches} prefetches per fault"
        );
        let mut in_fault = false;
        let (mut traps, mut returns) = (0u64, 0u64);
        for e in &t.events {
            match e {
                Event::Trap => {
                    assert!(!in_fault, "{profile}: a trap inside a fault");
                    in_fault = true;
                    traps += 1;
                }
                Event::TrapReturn => {
                    assert!(in_fault, "{profile}: a return outside a fault");
                    in_fault = false;
                    returns += 1;
                }
                Event::Prefetch { .. } => {
                    assert!(in_fault, "{profile}: a prefetch outside a fault")
                }
                _ => {}
            }
        }
        assert!(
            traps > 0 && returns + u64::from(in_fault) == traps,
            "{profile}: {traps} traps, {returns} returns"
        );
    }
    let a = profiles::load("linux-6.15").unwrap().policy;
    let mut b = profiles::load("linux-6.15-no-entry-prefetch")
        .unwrap()
        .policy;
    assert!(a.mm.fault_prefetch_mmap_lock && !b.mm.fault_prefetch_mmap_lock);
    b.mm.fault_prefetch_mmap_lock = true;
    b.name = a.name.clone();
    b.description = a.description.clone();
    assert_eq!(a, b, "the pair differs in the prefetch alone");
}

#[test]
fn munmap_downgrades_mmap_lock_where_the_profile_does() {
    // `mm.munmap_downgrade` (4.20+): munmap's write hold becomes the zap's read hold with no
    // moment at which the lock is free, recorded as one event (trace format 7), not a release
    // and a new acquire between which the replay would let a waiting writer in.
    for (profile, downgrades) in [("linux-6.7", true), ("linux-4.15", false)] {
        let t = page_fault1(profile, false);
        let m = t
            .instances
            .iter()
            .position(|i| i.class == "mmap_lock")
            .unwrap() as u32;
        let ops: String = t
            .events
            .iter()
            .filter_map(|e| match *e {
                Event::Acquire { inst, shared, .. } if inst == m => {
                    Some(if shared { 'r' } else { 'w' })
                }
                Event::Downgrade { inst } if inst == m => Some('d'),
                Event::Release { inst, shared } if inst == m => {
                    Some(if shared { 'R' } else { 'W' })
                }
                _ => None,
            })
            .collect();
        // The window is one iteration: its mmap holds the lock for write, and its munmap
        // holds it for write and then, from 4.20, for read to its end.
        let (mmaps, downgraded) = if downgrades { (1, 1) } else { (2, 0) };
        assert_eq!(ops.matches("wW").count(), mmaps, "{profile}: {ops}");
        assert_eq!(ops.matches("wdR").count(), downgraded, "{profile}: {ops}");
        assert_eq!(ops.matches('d').count(), downgraded, "{profile}: {ops}");
        // No hold is left open or closed twice.
        let mut held: Option<bool> = None;
        for c in ops.chars() {
            held = match (held, c) {
                (None, 'w') => Some(false),
                (None, 'r') | (Some(false), 'd') => Some(true),
                (Some(false), 'W') | (Some(true), 'R') => None,
                (h, c) => panic!("{profile}: {c} with {h:?} in {ops}"),
            };
        }
        assert_eq!(held, None, "{profile}: a hold left open in {ops}");
    }
}

#[test]
fn lru_size_statistics_record_their_folds_where_the_profile_keeps_them() {
    // `lru.size_stats`: the node's and the zone's per-CPU differentials fold into shared
    // counters past `stat_threshold` (4.8+), the memcg's rstat bookkeeping reads its group's
    // pending count every 64 updates (5.2+ statistics, the 6.1 rule); 2.6.13 keeps neither.
    for (profile, vmstat, memcg) in [
        ("linux-6.7", true, true),
        ("linux-4.15", true, false),
        ("linux-2.6.13", false, false),
    ] {
        let t = page_fault1(profile, false);
        let count = |class: &str, atomic: bool| {
            t.events
                .iter()
                .filter(|e| match **e {
                    Event::Atomic { inst } => atomic && t.instances[inst as usize].class == class,
                    Event::Line {
                        inst, write: false, ..
                    } => !atomic && t.instances[inst as usize].class == class,
                    _ => false,
                })
                .count()
        };
        let (node, zone, machine) = (
            count("vm_stat (node)", true),
            count("vm_stat (zone)", true),
            count("vm_stat (machine)", true),
        );
        assert_eq!(node > 0, vmstat, "{profile}: {node} node folds");
        assert_eq!(node, zone, "{profile}: the node and the zone fold together");
        assert_eq!(
            machine,
            node + zone,
            "{profile}: each fold adds to the machine's sum"
        );
        let reads = count("memcg stats_updates", false);
        assert_eq!(
            reads > 0,
            memcg,
            "{profile}: {reads} reads of the group's count"
        );
        // The faults add as many pages as the unmap removes, and the folds come from both:
        // at least one per threshold's worth of pages each way, at most one per page.
        if vmstat {
            assert!(
                (2..=2 * t.meta.ops as usize).contains(&node),
                "{profile}: {node}"
            );
        }
        for i in &t.instances {
            match i.class.as_str() {
                "vm_stat (node)" | "vm_stat (zone)" => assert_eq!(i.scope, Scope::Node),
                "vm_stat (machine)" | "memcg stats_updates" => {
                    assert_eq!(i.scope, Scope::Machine)
                }
                _ => {}
            }
        }
    }
}

/// The reference drops of 4.15's `release_pages` and the `PG_lru` sets of its adds are locked
/// instructions on the page's own line inside `lru_lock`: after a neighbour's link stored at a
/// run's edge, the next one is recorded as a fence, where the CPU waits for that store's line.
/// No fence comes before any store of its hold, and none lies under `zone->lock`, whose
/// holds (the buddy allocator's) have no locked instruction per page in the kernel or the
/// engine. The RFC v1 releases unlink their runs' edges (the sentinels) in a second pass,
/// with no reference drop between them, so under its batch locks a release records none.
#[test]
fn locked_instructions_after_the_lru_stores_are_recorded_as_fences() {
    let t = page_fault1("linux-4.15", false);
    let class = |inst: u32| t.instances[inst as usize].class.as_str();
    let (mut held, mut stored) = (None::<&str>, false);
    let (mut under_lru, mut elsewhere) = (0usize, 0usize);
    for e in &t.events {
        match *e {
            Event::Acquire { inst, .. } if matches!(class(inst), "lru_lock" | "zone->lock") => {
                held = Some(class(inst));
                stored = false;
            }
            // Every lock operation and atomic drains the store buffer.
            Event::Acquire { .. } | Event::Atomic { .. } => stored = false,
            Event::Release { inst, .. } => {
                if Some(class(inst)) == held {
                    held = None;
                }
                stored = false;
            }
            Event::Store { .. } => stored = true,
            Event::Fence => {
                assert!(stored, "a fence with no store before it in its hold");
                stored = false;
                if held == Some("lru_lock") {
                    under_lru += 1;
                } else {
                    elsewhere += 1;
                }
            }
            _ => {}
        }
    }
    let ops = t.meta.ops as f64;
    // One per add hold of 14 pages after its first page's stores, and one per run's edge a
    // release unlinks: about 1/14 + 1/14 a fault.
    assert!(
        under_lru as f64 / ops > 0.1,
        "{under_lru} fences under lru_lock in {ops} faults"
    );
    assert_eq!(elsewhere, 0, "fences outside lru_lock");

    let rfc = page_fault1("lru-lock-base", false);
    let rfc_class = |inst: u32| rfc.instances[inst as usize].class.as_str();
    let mut batch_held = 0i32;
    let mut under_batch = 0usize;
    for e in &rfc.events {
        match *e {
            Event::Acquire { inst, .. } if rfc_class(inst) == "lru_batch_lock" => batch_held += 1,
            Event::Release { inst, .. } if rfc_class(inst) == "lru_batch_lock" => batch_held -= 1,
            Event::Fence if batch_held > 0 => under_batch += 1,
            _ => {}
        }
    }
    assert_eq!(under_batch, 0, "fences under the RFC v1 batch locks");
}
