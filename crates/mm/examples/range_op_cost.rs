//! What one address-space operation costs the task that makes it, range-vm against linux-6.7,
//! on one task: the requests of CortenMM's tests (`s_mmap`, `s_mmap_pf`, `s_pf`, `s_munmap`
//! and the MAP_FIXED form of the high-contention `mmap`), each timed in the task's own CPU
//! time (so that a host busy with other work does not count), the two profiles alternating
//! round by round, and the median of the per-round ratios reported.
//!
//! `cargo run --release -p pagelab-mm --example range_op_cost [rounds [test]]`

use std::sync::Arc;

use pagelab_mm::vm::mm::MapKind;
use pagelab_mm::{CpuId, Kernel, MemConfig, PAGE_SIZE, Policy, Task};
use rustix::time::{ClockId, clock_gettime};

const PAGE: u64 = PAGE_SIZE as u64;
/// Requests per round, as CortenMM's 32.
const REQ: u64 = 32;
/// One slot: a PTE table's span.
const SLOT: u64 = 512 * PAGE;

fn cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[derive(Clone, Copy, Debug)]
enum Test {
    Mmap,
    MmapPf,
    Pf,
    Munmap,
    MmapFixed,
}

/// One round of `test` on `t`: the nanoseconds its requests took.
fn round(t: &Task, test: Test) -> u64 {
    match test {
        Test::Mmap | Test::MmapPf => {
            let (len, touch) = match test {
                Test::Mmap => (4 * PAGE, false),
                _ => (PAGE, true),
            };
            let mut mapped = [0u64; REQ as usize];
            let s = cpu_ns();
            for m in mapped.iter_mut() {
                *m = t.mmap(len, true, MapKind::Anon).unwrap();
                if touch {
                    t.store(*m, 1).unwrap();
                }
            }
            let ns = cpu_ns() - s;
            for m in mapped {
                t.munmap(m, len).unwrap();
            }
            ns
        }
        Test::Pf | Test::Munmap | Test::MmapFixed => {
            let base = t.mmap(SLOT, true, MapKind::Anon).unwrap();
            if matches!(test, Test::Munmap) {
                for j in 0..REQ {
                    t.store(base + j * PAGE, 1).unwrap();
                }
            }
            let s = cpu_ns();
            for j in 0..REQ {
                match test {
                    Test::Pf => t.store(base + j * PAGE, 1).unwrap(),
                    Test::Munmap => t.munmap(base + j * PAGE, PAGE).unwrap(),
                    _ => {
                        t.mmap_fixed(base + j * 4 * PAGE, 4 * PAGE, true, MapKind::Anon)
                            .unwrap();
                    }
                }
            }
            let ns = cpu_ns() - s;
            t.munmap(base, SLOT).unwrap();
            ns
        }
    }
}

fn task(profile: &str) -> (Arc<Kernel>, Task) {
    let p = Policy::from_toml_str(profile).unwrap();
    let k = Kernel::new(&MemConfig::new(64 << 20, 2), &p).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t = k.new_task(mm, CpuId(0));
    (k, t)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(2000, |a| a.parse().expect("rounds: a number"));
    // An optional second argument runs only the test of that name (e.g. under a profiler).
    let only = std::env::args().nth(2);
    let linux = include_str!("../../../profiles/linux-6.7.toml");
    let range = include_str!("../../../profiles/range-vm.toml");
    let (_kl, tl) = task(linux);
    let (_kr, tr) = task(range);
    println!("test        linux-6.7 ns/op  range-vm ns/op  range/linux (median of round ratios)");
    for test in [
        Test::Mmap,
        Test::MmapPf,
        Test::Pf,
        Test::Munmap,
        Test::MmapFixed,
    ] {
        if only.as_ref().is_some_and(|o| !format!("{test:?}").eq_ignore_ascii_case(o)) {
            continue;
        }
        // Warm both up.
        for _ in 0..50 {
            round(&tl, test);
            round(&tr, test);
        }
        let (mut l, mut r, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..rounds {
            let (a, b) = if i % 2 == 0 {
                (round(&tl, test), round(&tr, test))
            } else {
                let b = round(&tr, test);
                (round(&tl, test), b)
            };
            l.push(a as f64 / REQ as f64);
            r.push(b as f64 / REQ as f64);
            ratio.push(b as f64 / a as f64);
        }
        println!(
            "{:<11} {:>15.0}  {:>14.0}  {:.2}",
            format!("{test:?}"),
            median(&mut l),
            median(&mut r),
            median(&mut ratio)
        );
    }
    tl.idle();
    tr.idle();
}
