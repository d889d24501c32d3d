//! The slab allocator (`pagelab_mm::alloc::slab`): size classes and orders, object placement,
//! a model-based property test, remote-free stress with more threads than cores, slab movement
//! between the CPU, partial and free states, lock statistics, and double-free detection.
//!
//! Every object's whole payload is filled with a pattern derived from a seed and verified
//! before it is freed: two live objects sharing memory would corrupt each other's pattern.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, mpsc};

use pagelab_mm::alloc::slab::{
    KMALLOC_MAX_SIZE, KMALLOC_SIZES, Obj, SLUB_MAX_ORDER, SlabAllocator, SlabError, calculate_order,
};
use pagelab_mm::{CpuId, Gfp, Mem, MemConfig, PAGE_SIZE, Policy};
use proptest::prelude::*;

fn setup(nr_cpus: usize, bytes: u64) -> SlabAllocator {
    let mem = Mem::new(&MemConfig::new(bytes, nr_cpus), &Policy::default()).unwrap();
    SlabAllocator::new(Arc::new(mem))
}

/// splitmix64: the pattern word `i` of the object stamped with `seed`.
fn pattern(seed: u64, i: usize) -> u64 {
    let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill `words` words of `obj` with the pattern of `seed`; returns their checksum.
fn stamp(mem: &Mem, obj: Obj, words: usize, seed: u64) -> u64 {
    let mut sum = 0u64;
    for (i, w) in obj.words(mem, words).enumerate() {
        let v = pattern(seed, i);
        w.store(v, Relaxed);
        sum = sum.rotate_left(5) ^ v;
    }
    sum
}

/// Checksum of the first `words` words of `obj`.
fn checksum(mem: &Mem, obj: Obj, words: usize) -> u64 {
    obj.words(mem, words)
        .fold(0u64, |sum, w| sum.rotate_left(5) ^ w.load(Relaxed))
}

/// The first word of `obj` that differs from the pattern of `seed`.
fn first_mismatch(mem: &Mem, obj: Obj, words: usize, seed: u64) -> Option<usize> {
    obj.words(mem, words)
        .enumerate()
        .position(|(i, w)| w.load(Relaxed) != pattern(seed, i))
}

/// Free everything, shrink, and require that no frame is left allocated.
fn assert_all_frames_return(sa: &SlabAllocator) {
    let census = sa.check().unwrap();
    assert_eq!(census.total().objects_in_use, 0, "{census:?}");
    sa.shrink();
    let census = sa.check().unwrap();
    assert_eq!(
        census.total().pages,
        0,
        "slabs left after shrink: {census:?}"
    );
    let mem = sa.mem().check().unwrap();
    assert_eq!(mem.allocated, 0, "frames leaked: {mem:?}");
}

/// Every test is in `mod slab` so that `cargo test -p pagelab-mm slab` selects them all.
mod slab {
    use super::*;

    /// The order table, printed for a few machine sizes (`cargo test -- --nocapture`).
    #[test]
    fn order_table_per_size_class() {
        for nr_cpus in [1, 2, 4, 8, 64] {
            println!("nr_cpus = {nr_cpus}");
            println!(
                "{:>6} {:>5} {:>7} {:>5}",
                "size", "order", "objects", "waste"
            );
            for size in KMALLOC_SIZES {
                let order = calculate_order(size, nr_cpus);
                let bytes = PAGE_SIZE << order;
                let objects = bytes / size;
                println!(
                    "{size:>6} {order:>5} {objects:>7} {:>5}",
                    bytes - objects * size
                );
                assert!(order <= SLUB_MAX_ORDER, "{size}: order {order}");
                assert!(objects >= 2, "{size}: {objects} objects");
                assert!(
                    (bytes - objects * size) * 4 <= bytes,
                    "{size}: wastes more than 1/4"
                );
                if size >= 1024 {
                    assert!(
                        (1..=3).contains(&order),
                        "{size} B at order {order}: large classes need high-order slabs"
                    );
                }
            }
        }
        // (size, order, objects) with 2 CPUs: at least 4 * (fls(2) + 1) = 12 objects per slab.
        let two_cpus = [
            (8, 0, 512),
            (16, 0, 256),
            (32, 0, 128),
            (64, 0, 64),
            (96, 0, 42),
            (128, 0, 32),
            (192, 0, 21),
            (256, 0, 16),
            (512, 1, 16),
            (1024, 2, 16),
            (2048, 3, 16),
            (4096, 3, 8),
            (8192, 3, 4),
        ];
        let sa = setup(2, 16 << 20);
        let built: Vec<_> = sa
            .caches()
            .iter()
            .map(|c| (c.size(), c.order(), c.objects_per_slab()))
            .collect();
        assert_eq!(built, two_cpus);
        for c in sa.caches() {
            assert!(
                c.objects_per_slab() as usize * c.size() <= c.slab_bytes(),
                "{}",
                c.name()
            );
        }
        let names: Vec<_> = sa.caches().iter().map(|c| c.name().to_string()).collect();
        assert_eq!(names[8], "kmalloc-512");
        assert_eq!(names[12], "kmalloc-8k");
        // 8 CPUs: 20 objects; the orders of /proc/slabinfo on a typical 8-CPU machine.
        let eight: Vec<_> = KMALLOC_SIZES
            .iter()
            .map(|&s| calculate_order(s, 8))
            .collect();
        assert_eq!(eight, [0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3]);
    }

    #[test]
    fn kmalloc_rejects_sizes_outside_the_classes() {
        let sa = setup(1, 16 << 20);
        assert_eq!(sa.kmalloc(CpuId(0), 0), Err(SlabError::InvalidSize(0)));
        assert_eq!(
            sa.kmalloc(CpuId(0), KMALLOC_MAX_SIZE + 1),
            Err(SlabError::InvalidSize(KMALLOC_MAX_SIZE + 1))
        );
        assert!(sa.cache_for(0).is_none());
        for (size, class) in [
            (1, 8),
            (8, 8),
            (9, 16),
            (65, 96),
            (97, 128),
            (129, 192),
            (193, 256),
            (4097, 8192),
        ] {
            assert_eq!(sa.cache_for(size).unwrap().size(), class, "size {size}");
        }
        assert_eq!(
            sa.check().unwrap().total().slabs,
            0,
            "a refused kmalloc allocates nothing"
        );
    }

    #[test]
    fn objects_are_distinct_aligned_and_never_overlap() {
        let sa = setup(2, 64 << 20);
        let mem = sa.mem().clone();
        let mut live: Vec<(Obj, usize, u64)> = Vec::new();
        let mut seen = HashSet::new();
        let sizes = [
            1, 8, 9, 24, 64, 65, 96, 100, 128, 150, 192, 200, 256, 300, 512, 1000, 1024, 2000,
            3000, 4096, 5000, 8192,
        ];
        for (k, &size) in sizes.iter().enumerate() {
            let cache = sa.cache_for(size).unwrap();
            // Three slabs' worth, alternating CPUs, so that objects come from several slabs.
            for j in 0..3 * cache.objects_per_slab() as usize {
                let cpu = CpuId((j % 2) as u16);
                let obj = sa.kmalloc(cpu, size).unwrap();
                assert!(seen.insert(obj), "{obj:?} handed out twice");
                assert_eq!(obj.offset % 8, 0, "{obj:?} misaligned");
                assert_eq!(sa.ksize(obj), cache.size());
                let head = mem.compound_head(obj.pfn);
                let start = (obj.pfn.0 - head.0) as usize * PAGE_SIZE + obj.offset as usize;
                assert!(
                    start + cache.size() <= cache.slab_bytes(),
                    "{obj:?} runs past its slab"
                );
                assert_eq!(start % cache.size(), 0);
                let seed = (k as u64) << 32 | j as u64;
                stamp(&mem, obj, cache.size() / 8, seed);
                live.push((obj, cache.size(), seed));
            }
        }
        for &(obj, size, seed) in &live {
            assert_eq!(
                first_mismatch(&mem, obj, size / 8, seed),
                None,
                "{obj:?} overwritten"
            );
        }
        let census = sa.check().unwrap();
        assert_eq!(census.total().objects_in_use, live.len() as u64);
        assert_eq!(
            mem.check().unwrap().allocated,
            census.total().pages,
            "every allocated frame is a slab frame"
        );
        for (i, (obj, _, _)) in live.into_iter().enumerate() {
            sa.kfree(CpuId((i % 3 % 2) as u16), obj);
        }
        let stats = sa.stats();
        assert_eq!(stats.allocs(), seen.len() as u64);
        assert_eq!(stats.frees(), seen.len() as u64);
        assert_all_frames_return(&sa);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc { cpu: u16, size: usize },
        Free { cpu: u16, pick: usize },
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3u16, 1..=256usize).prop_map(|(cpu, size)| Op::Alloc { cpu, size }),
            2 => (0..3u16, 257..=KMALLOC_MAX_SIZE).prop_map(|(cpu, size)| Op::Alloc { cpu, size }),
            4 => (0..3u16, any::<usize>()).prop_map(|(cpu, pick)| Op::Free { cpu, pick }),
            1 => Just(Op::Shrink),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random kmalloc/kfree/shrink sequences on three CPUs against a set of live objects.
        #[test]
        fn random_kmalloc_kfree_against_a_model(ops in prop::collection::vec(op(), 1..300)) {
            let sa = setup(3, 16 << 20);
            let mem = sa.mem().clone();
            let mut live: HashMap<Obj, (usize, u64)> = HashMap::new();
            let mut order: Vec<Obj> = Vec::new();
            let (mut allocs, mut frees) = (0u64, 0u64);
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Alloc { cpu, size } => {
                        let obj = sa.kmalloc(CpuId(cpu), size).unwrap();
                        let class = sa.ksize(obj);
                        prop_assert!(class >= size && obj.offset.is_multiple_of(8), "{obj:?} for {size} B");
                        stamp(&mem, obj, class / 8, n as u64);
                        prop_assert!(live.insert(obj, (class, n as u64)).is_none(), "{obj:?} handed out twice");
                        order.push(obj);
                        allocs += 1;
                    }
                    Op::Free { cpu, pick } => {
                        if order.is_empty() {
                            continue;
                        }
                        let obj = order.swap_remove(pick % order.len());
                        let (class, seed) = live.remove(&obj).unwrap();
                        prop_assert_eq!(first_mismatch(&mem, obj, class / 8, seed), None, "{:?} overwritten", obj);
                        sa.kfree(CpuId(cpu), obj);
                        frees += 1;
                    }
                    Op::Shrink => sa.shrink(),
                }
                if n % 64 == 63 {
                    let census = sa.check().map_err(TestCaseError::fail)?;
                    prop_assert_eq!(census.total().objects_in_use, live.len() as u64);
                }
            }
            let census = sa.check().map_err(TestCaseError::fail)?;
            prop_assert_eq!(census.total().objects_in_use, live.len() as u64);
            for (i, obj) in order.into_iter().enumerate() {
                let (class, seed) = live[&obj];
                prop_assert_eq!(first_mismatch(&mem, obj, class / 8, seed), None, "{:?} overwritten", obj);
                sa.kfree(CpuId((i % 3) as u16), obj);
                frees += 1;
            }
            let stats = sa.stats();
            prop_assert_eq!(stats.allocs(), allocs);
            prop_assert_eq!(stats.frees(), frees);
            assert_all_frames_return(&sa);
        }
    }

    /// A tiny deterministic generator per thread.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Mostly small objects, some large ones: 50% up to 256 B, 30% up to 2 KiB, 20% up to 8 KiB.
        fn size(&mut self) -> usize {
            let r = self.next();
            let (lo, hi) = match r % 10 {
                0..=4 => (1, 256),
                5..=7 => (257, 2048),
                _ => (2049, KMALLOC_MAX_SIZE),
            };
            lo + (r >> 8) as usize % (hi - lo + 1)
        }
    }

    /// Four sender/receiver pairs on eight CPUs (eight threads on two cores): senders kmalloc and
    /// fill buffers, receivers verify the checksum and kfree them on their own CPU, where they
    /// never allocate, so every free is remote.
    #[test]
    fn stress_producer_consumer_every_free_remote() {
        const PAIRS: usize = 4;
        const PER_SENDER: usize = 15_000;
        let sa = setup(2 * PAIRS, 64 << 20);
        let mem = sa.mem().clone();
        std::thread::scope(|s| {
            for pair in 0..PAIRS {
                let (tx, rx) = mpsc::sync_channel::<(Obj, usize, u64)>(64);
                let (sa, mem) = (&sa, &mem);
                s.spawn(move || {
                    let cpu = CpuId(2 * pair as u16);
                    let mut rng =
                        XorShift(0x2545_f491_4f6c_dd1d ^ ((pair as u64 + 1) * 0x9e37_79b9));
                    for seq in 0..PER_SENDER {
                        let size = rng.size();
                        let obj = sa.kmalloc(cpu, size).unwrap();
                        let words = size.div_ceil(8);
                        let sum = stamp(mem, obj, words, (pair as u64) << 40 | seq as u64);
                        tx.send((obj, words, sum)).unwrap();
                    }
                });
                s.spawn(move || {
                    let cpu = CpuId(2 * pair as u16 + 1);
                    for (obj, words, sum) in rx {
                        assert_eq!(
                            checksum(mem, obj, words),
                            sum,
                            "{obj:?} corrupted in flight"
                        );
                        sa.kfree(cpu, obj);
                    }
                });
            }
        });
        let stats = sa.stats();
        let total = (PAIRS * PER_SENDER) as u64;
        assert_eq!(stats.allocs(), total);
        assert_eq!(stats.free_remote, total, "{stats:?}");
        assert_eq!(stats.free_fastpath, 0);
        println!("{stats:?}\n{:?}", sa.lock_stats());
        assert_all_frames_return(&sa);
    }

    /// Eight threads on eight CPUs that each free half of their objects themselves and pass the
    /// other half to their neighbour, while a ninth thread on a ninth CPU keeps shrinking: local
    /// frees, remote frees onto the same frozen slabs, and CPU slab flushes all race.
    #[test]
    fn stress_mixed_frees_with_concurrent_shrink() {
        const THREADS: usize = 8;
        const OPS: usize = 10_000;
        let sa = setup(THREADS + 1, 64 << 20);
        let mem = sa.mem().clone();
        let stop = AtomicBool::new(false);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS)
            .map(|_| mpsc::channel::<(Obj, usize, u64)>())
            .unzip();
        std::thread::scope(|s| {
            let shrinker = s.spawn(|| {
                let mut rounds = 0u64;
                while !stop.load(Relaxed) {
                    sa.shrink_on(CpuId(THREADS as u16));
                    rounds += 1;
                    std::thread::yield_now();
                }
                rounds
            });
            let workers: Vec<_> = rxs
                .into_iter()
                .enumerate()
                .map(|(t, rx)| {
                    let tx = txs[(t + 1) % THREADS].clone();
                    let (sa, mem) = (&sa, &mem);
                    s.spawn(move || {
                        let cpu = CpuId(t as u16);
                        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 7919));
                        let mut mine: Vec<(Obj, usize, u64)> = Vec::new();
                        let verify_free = |(obj, words, seed): (Obj, usize, u64)| {
                            assert_eq!(
                                first_mismatch(mem, obj, words, seed),
                                None,
                                "{obj:?} overwritten"
                            );
                            sa.kfree(cpu, obj);
                        };
                        for seq in 0..OPS {
                            let size = rng.size();
                            let obj = sa.kmalloc(cpu, size).unwrap();
                            let words = size.div_ceil(8);
                            let seed = (t as u64) << 40 | seq as u64;
                            stamp(mem, obj, words, seed);
                            if rng.next().is_multiple_of(2) {
                                tx.send((obj, words, seed)).unwrap();
                            } else {
                                mine.push((obj, words, seed));
                            }
                            if mine.len() > 32 {
                                let i = rng.next() as usize % mine.len();
                                verify_free(mine.swap_remove(i));
                            }
                            while let Ok(m) = rx.try_recv() {
                                verify_free(m);
                            }
                        }
                        drop(tx);
                        mine.into_iter().for_each(verify_free);
                        rx.into_iter().for_each(verify_free);
                    })
                })
                .collect();
            drop(txs);
            // Stop the shrinker before reporting a worker's panic, or the scope would wait for
            // it forever.
            let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
            stop.store(true, Relaxed);
            let rounds = shrinker.join().unwrap();
            for r in results {
                if let Err(panic) = r {
                    std::panic::resume_unwind(panic);
                }
            }
            assert!(rounds > 0);
        });
        let stats = sa.stats();
        assert_eq!(stats.allocs(), (THREADS * OPS) as u64);
        assert_eq!(stats.frees(), (THREADS * OPS) as u64);
        assert!(
            stats.free_fastpath > 0 && stats.free_remote > 0,
            "{stats:?}"
        );
        println!("{stats:?}\n{:?}", sa.lock_stats());
        assert_all_frames_return(&sa);
    }

    /// Remote frees move slabs from full to partial and, once the node holds `min_partial`
    /// slabs, from empty back to the page allocator; the owner later takes its slab's remote
    /// frees, and another CPU takes a slab from the partial list.
    #[test]
    fn remote_frees_move_slabs_between_full_partial_and_free() {
        let sa = setup(2, 16 << 20);
        let cache = sa.cache_for(256).unwrap();
        let per_slab = cache.objects_per_slab() as usize;
        let min_partial = cache.min_partial();
        assert_eq!(min_partial, 5);
        let nr_slabs = 20;
        let objs: Vec<Obj> = (0..nr_slabs * per_slab)
            .map(|_| sa.kmalloc(CpuId(0), 256).unwrap())
            .collect();
        let c = sa.check().unwrap().caches[7];
        assert_eq!((c.slabs, c.full, c.cpu_slabs, c.partial), (20, 19, 1, 0));
        assert_eq!(cache.stats().deactivate_full, 19);
        for &o in &objs {
            sa.kfree(CpuId(1), o);
        }
        let c = sa.check().unwrap().caches[7];
        // The first five emptied slabs stay; the next fourteen go back; CPU 0's slab stays frozen.
        assert_eq!(
            (c.partial, c.empty, c.cpu_slabs, c.full),
            (5, 5, 1, 0),
            "{c:?}"
        );
        assert_eq!(cache.stats().free_slab, 14);
        assert_eq!(cache.nr_partial(), min_partial);
        // CPU 0 takes back the objects CPU 1 freed into its frozen slab.
        let a = sa.kmalloc(CpuId(0), 256).unwrap();
        assert_eq!(cache.stats().alloc_refill, 1);
        // CPU 1 has no slab: it freezes one from the partial list.
        let b = sa.kmalloc(CpuId(1), 256).unwrap();
        assert_eq!(cache.stats().alloc_from_partial, 1);
        assert_eq!(cache.nr_partial(), min_partial - 1);
        sa.kfree(CpuId(1), a);
        sa.kfree(CpuId(0), b);
        assert_all_frames_return(&sa);
        assert_eq!(cache.stats().free_slab, 20);
    }

    /// Lock statistics count each class: CPU locks on every operation, `list_lock` when a CPU
    /// looks for a slab, `slab_lock` on every remote free.
    #[test]
    fn lock_stats_count_each_lock_class() {
        pagelab_sync::stats::set_enabled(true);
        let sa = setup(2, 16 << 20);
        sa.mem().enter_lock_stats();
        let objs: Vec<Obj> = (0..10).map(|_| sa.kmalloc(CpuId(0), 64).unwrap()).collect();
        for &o in &objs {
            sa.kfree(CpuId(1), o);
        }
        let s = sa.lock_stats();
        // 10 kmallocs and 10 kfrees each take their CPU's lock once.
        assert_eq!(s.cpu_lock.acquisitions, 20, "{s:?}");
        // One get_partial, which found nothing and allocated a slab.
        assert_eq!(s.list_lock.acquisitions, 1, "{s:?}");
        // The slab stays frozen to CPU 0: 10 remote frees take slab_lock alone.
        assert_eq!(s.slab_lock.acquisitions, 10, "{s:?}");
        assert_eq!(
            sa.cache_for(64).unwrap().slab_lock_stats(),
            s.slab_lock,
            "other caches untouched"
        );
        sa.reset_stats();
        assert_eq!(sa.lock_stats(), Default::default());
        assert_eq!(sa.stats().allocs(), 0);
        assert_all_frames_return(&sa);
    }

    #[test]
    #[should_panic(expected = "double kfree")]
    fn double_kfree_on_the_allocating_cpu_panics() {
        let sa = setup(2, 16 << 20);
        let a = sa.kmalloc(CpuId(0), 100).unwrap();
        sa.kfree(CpuId(0), a);
        sa.kfree(CpuId(0), a);
    }

    #[test]
    #[should_panic(expected = "double kfree")]
    fn double_kfree_on_another_cpu_panics() {
        let sa = setup(2, 16 << 20);
        let a = sa.kmalloc(CpuId(0), 2000).unwrap();
        sa.kfree(CpuId(1), a);
        sa.kfree(CpuId(1), a);
    }

    #[test]
    #[should_panic(expected = "double kfree")]
    fn double_kfree_in_an_unfrozen_slab_panics() {
        let sa = setup(2, 16 << 20);
        let a = sa.kmalloc(CpuId(0), 8).unwrap();
        let _keep = sa.kmalloc(CpuId(0), 8).unwrap();
        sa.shrink();
        sa.kfree(CpuId(0), a);
        sa.kfree(CpuId(1), a);
    }

    /// The object is free on its owner's CPU freelist, where only the owner's lock reaches it.
    #[test]
    #[should_panic(expected = "double kfree")]
    fn double_kfree_of_an_object_back_on_the_owners_freelist_panics() {
        let sa = setup(2, 16 << 20);
        assert_eq!(sa.cache_for(8192).unwrap().objects_per_slab(), 4);
        let [a, b, _c] = [(); 3].map(|_| sa.kmalloc(CpuId(0), 8192).unwrap());
        sa.kfree(CpuId(1), a);
        sa.kfree(CpuId(1), b);
        let _d = sa.kmalloc(CpuId(0), 8192).unwrap();
        // CPU 0's freelist is empty: it takes [b, a] from the slab and hands out b.
        let e = sa.kmalloc(CpuId(0), 8192).unwrap();
        assert_eq!(e, b);
        sa.kfree(CpuId(1), a);
    }

    #[test]
    #[should_panic(expected = "not a slab object")]
    fn kfree_of_a_page_allocator_frame_panics() {
        let sa = setup(1, 16 << 20);
        let pfn = sa.mem().alloc_page(CpuId(0), Gfp::KERNEL).unwrap();
        sa.kfree(CpuId(0), Obj { pfn, offset: 0 });
    }

    #[test]
    #[should_panic(expected = "not the start of a kmalloc-64 object")]
    fn kfree_inside_an_object_panics() {
        let sa = setup(1, 16 << 20);
        let a = sa.kmalloc(CpuId(0), 64).unwrap();
        sa.kfree(
            CpuId(0),
            Obj {
                pfn: a.pfn,
                offset: a.offset + 8,
            },
        );
    }

    #[test]
    #[should_panic(expected = "not a slab object of this allocator")]
    fn kfree_on_the_wrong_allocator_panics() {
        let a = setup(1, 16 << 20);
        let b = SlabAllocator::new(a.mem().clone());
        let obj = a.kmalloc(CpuId(0), 64).unwrap();
        b.kfree(CpuId(0), obj);
    }
}
