//! Why two tasks on this host do not do what the self-check's replay predicts: each candidate
//! limit measured at 1 and 2 threads pinned to the first two allowed CPUs, side by side and
//! interleaved, several rounds (docs/model-history.md, 2026-11-24, quotes its output).
//!
//! - `compute`: a dependent `or`/`imul` chain (no memory traffic): what two vCPUs give a pure
//!   compute loop (SMT siblings underneath, frequency, or CPU time taken by other work);
//! - `clear`: the engine's `clear_page` over an arena faulted in first: memory bandwidth shared
//!   by the two;
//! - `fault-proc`, `fault-thr`: the engine's page_fault1 loop (linux-6.7), one address space per
//!   task or one shared;
//!
//! For each it prints the throughput at 2 over 1, and each thread's CPU time over the wall time
//! of the window (below 1: the host did not run the thread the whole window), and the steal
//! time /proc/stat counted over the window (the hypervisor ran another guest's vCPU).
//!
//! `cargo run --release -p pagelab-project --example two_task_probe [ROUNDS]`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pagelab_mm::arena::{Arena, ArenaConfig};
use pagelab_workloads::page_fault::{Variant, task_loop};
use pagelab_workloads::pft::thread_cpu_ns;
use pagelab_workloads::pin::pin_to_core;
use pagelab_workloads::{Mode, engine};

/// One thread's loop: its index, its counter, the stop flag.
type Body = Arc<dyn Fn(usize, &AtomicU64, &AtomicBool) + Send + Sync>;

const WINDOW: Duration = Duration::from_millis(400);

/// The `steal` column of /proc/stat's `cpu` line, in clock ticks.
fn steal_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(8).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// `n` threads, the `i`-th pinned to CPU `i`, each running `body(i, counter, stop)` for
/// [`WINDOW`]: (operations per second in all, each thread's CPU time over the window, steal
/// ticks over the window).
fn window(n: usize, body: Body) -> (f64, Vec<f64>, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let start = Arc::new(Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (stop, counters, start, body) =
                (stop.clone(), counters.clone(), start.clone(), body.clone());
            std::thread::spawn(move || {
                pin_to_core(i);
                start.wait();
                let c0 = thread_cpu_ns();
                body(i, &counters[i], &stop);
                (thread_cpu_ns() - c0) as f64
            })
        })
        .collect();
    start.wait();
    let s0 = steal_ticks();
    let t = Instant::now();
    std::thread::sleep(WINDOW);
    let ops0: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    let wall = t.elapsed().as_nanos() as f64;
    stop.store(true, Ordering::Relaxed);
    let s1 = steal_ticks();
    let cpu: Vec<f64> = handles
        .into_iter()
        .map(|h| h.join().expect("probe thread") / wall)
        .collect();
    (ops0 as f64 * 1e9 / wall, cpu, s1 - s0)
}

fn compute() -> Body {
    Arc::new(|_, c, stop| {
        let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..10_000 {
                x = x.wrapping_mul(x | 1);
            }
            c.fetch_add(1, Ordering::Relaxed);
        }
        black_box(x);
    })
}

fn clear(arenas: Arc<Vec<Arena>>) -> Body {
    Arc::new(move |i, c, stop| {
        let a = &arenas[i];
        'outer: loop {
            for pfn in 0..a.nr_pages() {
                a.zero_page(pagelab_mm::Pfn(pfn as u32));
                c.fetch_add(1, Ordering::Relaxed);
                if pfn % 64 == 0 && stop.load(Ordering::Relaxed) {
                    break 'outer;
                }
            }
        }
    })
}

fn fault(mode: Mode, n: usize) -> Result<Body, String> {
    let p = pagelab_bench::profiles::load("linux-6.7").map_err(|e| e.to_string())?;
    let memsize: u64 = 128 << 20;
    let k = engine::boot(&p.policy, memsize * 2 * 2 + (64 << 20), 2).map_err(|e| e.to_string())?;
    let (run, vms) = engine::tasks(&k, n, mode, false).map_err(|e| e.to_string())?;
    let vms = Arc::new(std::sync::Mutex::new(
        vms.into_iter().map(Some).collect::<Vec<_>>(),
    ));
    Ok(Arc::new(move |i, c, stop| {
        let _keep = &run;
        let vm = vms.lock().expect("vms")[i]
            .take()
            .expect("one body per task");
        task_loop(&vm, Variant::Anon, memsize, c, stop).expect("engine page_fault1");
    }))
}

fn main() -> Result<(), String> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let arenas = Arc::new(
        (0..2)
            .map(|_| {
                Arena::new(
                    ArenaConfig {
                        prefault: true,
                        ..ArenaConfig::new(64 << 20)
                    },
                    0,
                )
                .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    println!(
        "load average at start: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let names = ["compute", "clear", "fault-proc", "fault-thr"];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        for (k, name) in names.iter().enumerate() {
            let mut rate = [0.0; 2];
            let mut line = String::new();
            for n in [1usize, 2] {
                let body = match *name {
                    "compute" => compute(),
                    "clear" => clear(arenas.clone()),
                    "fault-proc" => fault(Mode::Processes, n)?,
                    _ => fault(Mode::Threads, n)?,
                };
                let (r, cpu, steal) = window(n, body);
                rate[n - 1] = r;
                let cpu: Vec<String> = cpu.iter().map(|c| format!("{c:.2}")).collect();
                line += &format!(
                    "  {n}: {r:>12.0}/s cpu/wall [{}] steal {steal}",
                    cpu.join(" ")
                );
            }
            ratios[k].push(rate[1] / rate[0]);
            println!(
                "round {round} {name:<10} 2/1 = {:.2}{line}",
                rate[1] / rate[0]
            );
        }
    }
    for (k, name) in names.iter().enumerate() {
        let mut r = ratios[k].clone();
        r.sort_by(f64::total_cmp);
        println!(
            "{name:<10} 2 tasks over 1: median {:.2}, range {:.2} to {:.2}",
            r[r.len() / 2],
            r[0],
            r[r.len() - 1]
        );
    }
    println!(
        "load average at end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}
