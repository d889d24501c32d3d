//! Swap-out and swap-in throughput of the three swap backings (memory, LZ4-compressed memory,
//! a file), one thread, measured side by side in one run over the same frames and slots:
//! `cargo bench -p pagelab-mm --bench swap`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use pagelab_mm::arena::{Arena, ArenaConfig};
use pagelab_mm::reclaim::swap::{Backing, SwapConfig, SwapDevice, SwapEntry};
use pagelab_mm::{CpuId, PAGE_SIZE, Pfn};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    const N: u64 = 32_768; // 128 MiB of pages
    let dir = tempfile::tempdir().unwrap();
    let arena = Arena::new(
        ArenaConfig {
            bytes: 64 << 20,
            huge_pages: true,
            prefault: true,
        },
        48,
    )
    .unwrap();
    // Two contents: "text-like" words of small values (compresses about 4:1) and random.
    let frames = arena.nr_pages() as u64;
    let fill = |random: bool| {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for f in 0..frames {
            for w in arena.words(Pfn(f as u32)) {
                let v = xorshift(&mut x);
                w.store(if random { v } else { v % 1000 }, Relaxed);
            }
        }
    };
    println!(
        "{:<24} {:>14} {:>14} {:>10}",
        "backing", "out pages/s", "in pages/s", "ratio"
    );
    for random in [false, true] {
        fill(random);
        for (name, backing) in [
            ("memory", Backing::Memory { compress: false }),
            ("memory lz4", Backing::Memory { compress: true }),
            ("file", Backing::File(dir.path().join("bench"))),
        ] {
            let dev = SwapDevice::new(SwapConfig::new(N + 1, backing, 1)).unwrap();
            let cpu = CpuId(0);
            let entries: Vec<SwapEntry> =
                (0..N).map(|_| dev.folio_alloc_swap(cpu).unwrap()).collect();
            // One untimed pass faults in the buffers' host memory (or the file's page cache);
            // then the median of three timed passes over the same slots.
            let pass = |write: bool| {
                let t = Instant::now();
                for (i, &e) in entries.iter().enumerate() {
                    let pfn = Pfn(((i as u64 + u64::from(!write)) % frames) as u32);
                    if write {
                        dev.swap_out_frame(cpu, e, &arena, pfn).unwrap();
                    } else {
                        dev.swap_in_frame(cpu, e, &arena, pfn).unwrap();
                    }
                }
                N as f64 / t.elapsed().as_secs_f64()
            };
            let median = |write: bool| {
                let mut v = [pass(write), pass(write), pass(write)];
                v.sort_by(f64::total_cmp);
                v[1]
            };
            pass(true);
            let out = median(true);
            let inn = median(false);
            let st = dev.stats();
            let ratio = if st.stored_bytes > 0 {
                format!(
                    "{:.2}",
                    (N * PAGE_SIZE as u64) as f64 / st.stored_bytes as f64
                )
            } else {
                "-".into()
            };
            println!(
                "{:<24} {:>14.0} {:>14.0} {:>10}",
                format!("{name} ({})", if random { "random" } else { "text-like" }),
                out,
                inn,
                ratio
            );
        }
    }
}
