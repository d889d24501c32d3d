//! An engine standing for a larger machine sizes the kernel's memory-derived tunables for that
//! machine's nodes, not for its own arena (`MemConfig::tunables_for`).

use pagelab_mm::policy::Policy;
use pagelab_mm::{Kernel, MemConfig, TunablesFor};

/// A node of 256 GiB with 64 CPUs of a two-node machine (Ice Lake's 512 GB, 128 CPUs).
const ICELAKE_NODE: TunablesFor = TunablesFor {
    node_pages: 256 << 18,
    nodes: 2,
    node_cpus: 64,
};

#[test]
fn pcp_auto_sizes_and_the_vmstat_threshold_follow_the_machine_not_the_arena() {
    let policy = Policy::default();
    let small = MemConfig::new(64 << 20, 128);
    let k = Kernel::new(&small, &policy).unwrap();
    // 16 384 frames: zone_batchsize gives 16384 / 1024 pages = 64 KiB, a quarter is 4 pages,
    // and 4 + 2 rounded down to a power of two, less one, is 3.
    assert_eq!(k.mem().pcp_params(0).batch, 3);
    // 2 * fls(128) * (1 + fls(0)) = 16.
    assert_eq!(k.lru().size_stats().threshold(), 16);
    drop(k);

    let k = Kernel::new(&small.with_tunables_for(ICELAKE_NODE), &policy).unwrap();
    let p = k.mem().pcp_params(0);
    // zone_batchsize caps a batch at 1 MiB / 4 = 256 KiB (64 pages) and rounds to 63.
    assert_eq!(p.batch, 63);
    // min_free_kbytes = sqrt(16 * 512 GiB in kB) = 92 681 kB, 23 170 pages, half a node's;
    // low = 11 585 + max(11 585 / 4, 0.1% of 67 108 864) = 78 693; over 64 CPUs: 1229.
    assert_eq!(p.high_min, 1229);
    // 2 * fls(128) * (1 + fls(2048)) = 208, at most 125.
    assert_eq!(k.lru().size_stats().threshold(), 125);
    // The arena itself is unchanged.
    assert_eq!(k.mem().managed_pages(), 16 << 10);
}
