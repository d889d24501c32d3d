//! What one address-space operation costs the tasks that make it, range-vm against linux-6.7:
//! the requests of CortenMM's tests (`s_mmap`, `s_mmap_pf`, `s_pf`, `s_munmap`, low and high
//! contention, the high `mmap` forms with MAP_FIXED over one region, as
//! `pagelab_workloads::cortenmm` lays them out), on 1 or 2 tasks of one address space. Each
//! task's requests are timed in its own CPU time, so that a host busy with other work does not
//! count its descheduling (a wall-clock round on a loaded 2-core host is mostly that), while
//! spinning on a lock and lines moving between CPUs do count. The two profiles alternate round
//! by round; the median of the per-round ratios is reported.
//!
//! `cargo run --release -p pagelab-mm --example range_op_cost [rounds [tasks [test]]]`

use std::sync::{Arc, Barrier};

use pagelab_mm::vm::mm::MapKind;
use pagelab_mm::{CpuId, Kernel, MemConfig, PAGE_SIZE, Policy, Task};
use rustix::time::{ClockId, clock_gettime};

const PAGE: u64 = PAGE_SIZE as u64;
/// Requests per task per round, as CortenMM's 32.
const REQ: u64 = 32;
/// One slot per task: a PTE table's span.
const SLOT_PAGES: u64 = 512;

fn cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Test {
    Mmap,
    MmapPf,
    MmapHigh,
    MmapPfHigh,
    PfLow,
    PfHigh,
    MunmapLow,
    MunmapHigh,
}

impl Test {
    fn high(self) -> bool {
        matches!(
            self,
            Test::MmapHigh | Test::MmapPfHigh | Test::PfHigh | Test::MunmapHigh
        )
    }
}

/// The page (within the region) of each request, task by task, as the workload lays them out:
/// task `i`'s own slot's first pages, shuffled over all tasks for the high forms.
fn pages(tasks: usize, high: bool) -> Vec<u64> {
    let mut p: Vec<u64> = (0..tasks as u64)
        .flat_map(|i| (0..REQ).map(move |j| i * SLOT_PAGES + j))
        .collect();
    if high {
        let mut x: u64 = 0x5eed;
        for k in (1..p.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            p.swap(k, (x >> 33) as usize % (k + 1));
        }
    }
    p
}

/// One round of `test` on `tasks` (one thread each, which the task moves to and back from):
/// the CPU nanoseconds all their requests took together.
fn round(tasks: &mut Vec<Task>, test: Test) -> u64 {
    let n = tasks.len();
    let region = n as u64 * SLOT_PAGES * PAGE;
    let mapped_region = !matches!(test, Test::Mmap | Test::MmapPf);
    let base = if mapped_region {
        tasks[0].resume();
        tasks[0].mmap(region, true, MapKind::Anon).unwrap()
    } else {
        0
    };
    let pages = pages(n, test.high());
    let barrier = Barrier::new(n);
    let moved = std::mem::take(tasks);
    let total: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = moved
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let (pages, barrier) = (&pages, &barrier);
                s.spawn(move || {
                    // Run the mm (shootdowns wait for us) until our part of the round is done.
                    t.resume();
                    let mine = &pages[i * REQ as usize..(i + 1) * REQ as usize];
                    if test == Test::MunmapLow || test == Test::MunmapHigh {
                        // What the requests unmap: each task faults its own slot's pages.
                        for j in 0..REQ {
                            t.store(base + (i as u64 * SLOT_PAGES + j) * PAGE, 1)
                                .unwrap();
                        }
                    }
                    let mut mapped = Vec::with_capacity(REQ as usize);
                    barrier.wait();
                    let start = cpu_ns();
                    for &p in mine {
                        let (slot, j) = (p / SLOT_PAGES, p % SLOT_PAGES);
                        match test {
                            Test::Mmap => {
                                mapped.push(t.mmap(4 * PAGE, true, MapKind::Anon).unwrap())
                            }
                            Test::MmapPf => {
                                let a = t.mmap(PAGE, true, MapKind::Anon).unwrap();
                                t.store(a, 1).unwrap();
                                mapped.push(a);
                            }
                            Test::MmapHigh => {
                                let a = base + (slot * SLOT_PAGES + j * 4) * PAGE;
                                t.mmap_fixed(a, 4 * PAGE, true, MapKind::Anon).unwrap();
                            }
                            Test::MmapPfHigh => {
                                let a = base + p * PAGE;
                                t.mmap_fixed(a, PAGE, true, MapKind::Anon).unwrap();
                                t.store(a, 1).unwrap();
                            }
                            Test::PfLow | Test::PfHigh => t.store(base + p * PAGE, 1).unwrap(),
                            Test::MunmapLow | Test::MunmapHigh => {
                                t.munmap(base + p * PAGE, PAGE).unwrap()
                            }
                        }
                    }
                    let ns = cpu_ns() - start;
                    let len = if test == Test::Mmap { 4 * PAGE } else { PAGE };
                    for a in mapped {
                        t.munmap(a, len).unwrap();
                    }
                    t.idle();
                    (ns, t)
                })
            })
            .collect();
        let mut sum = 0;
        for h in hs {
            let (ns, t) = h.join().unwrap();
            sum += ns;
            tasks.push(t);
        }
        sum
    });
    if mapped_region {
        tasks[0].resume();
        tasks[0].munmap(base, region).unwrap();
        tasks[0].idle();
    }
    total
}

fn tasks(profile: &str, n: usize) -> (Arc<Kernel>, Vec<Task>) {
    let p = Policy::from_toml_str(profile).unwrap();
    let k = Kernel::new(&MemConfig::new(64 << 20, n), &p).unwrap();
    let mm = k.new_mm(CpuId(0)).unwrap();
    let t: Vec<Task> = (0..n)
        .map(|c| k.new_task(mm.clone(), CpuId(c as u16)))
        .collect();
    for t in &t {
        t.idle();
    }
    (k, t)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let rounds: usize = arg(1).map_or(2000, |a| a.parse().expect("rounds: a number"));
    let n: usize = arg(2).map_or(1, |a| a.parse().expect("tasks: 1 or 2"));
    // An optional third argument runs only the test of that name (e.g. under a profiler).
    let only = arg(3);
    let linux = include_str!("../../../profiles/linux-6.7.toml");
    let range = include_str!("../../../profiles/range-vm.toml");
    let (_kl, mut tl) = tasks(linux, n);
    let (_kr, mut tr) = tasks(range, n);
    println!(
        "{n} task(s), {rounds} rounds: CPU ns per request (median), range-vm/linux-6.7 (median of round ratios)"
    );
    for test in [
        Test::Mmap,
        Test::MmapPf,
        Test::MmapHigh,
        Test::MmapPfHigh,
        Test::PfLow,
        Test::PfHigh,
        Test::MunmapLow,
        Test::MunmapHigh,
    ] {
        if only
            .as_ref()
            .is_some_and(|o| !format!("{test:?}").eq_ignore_ascii_case(o))
        {
            continue;
        }
        for _ in 0..20 {
            round(&mut tl, test);
            round(&mut tr, test);
        }
        let (mut l, mut r, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        let per = (REQ * n as u64) as f64;
        for i in 0..rounds {
            let (a, b) = if i % 2 == 0 {
                (round(&mut tl, test), round(&mut tr, test))
            } else {
                let b = round(&mut tr, test);
                (round(&mut tl, test), b)
            };
            l.push(a as f64 / per);
            r.push(b as f64 / per);
            ratio.push(b as f64 / a as f64);
        }
        println!(
            "{:<11} linux-6.7 {:>6.0}  range-vm {:>6.0}  ratio {:.2}",
            format!("{test:?}"),
            median(&mut l),
            median(&mut r),
            median(&mut ratio)
        );
    }
    for t in tl.iter().chain(&tr) {
        t.idle();
    }
}
