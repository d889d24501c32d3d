//! `pagelab calibrate`: this host's machine description, measured.
//!
//! Each physical parameter the replay uses is measured with a small, direct experiment, taking
//! the median of several runs so that a noisy shared host disturbs it less:
//!
//! | parameter | experiment |
//! |---|---|
//! | `cpu.ghz` | a dependent chain of `or` + 64-bit `imul` (1 + 3 cycles on every x86-64 core since Nehalem and Zen, Agner Fog's tables) |
//! | `latency.core_ns` | two threads pinned to two cores pass a counter back and forth through one line: half the round trip |
//! | `latency.atomic_ns` | back-to-back `lock xadd` on a line in this core's cache |
//! | `memory.core_bandwidth_gbs` | one thread clears a 256 MiB buffer already faulted in, timed in its own CPU time |
//! | `memory.node_bandwidth_gbs` | every allowed CPU clears its own buffer at once |
//! | `kernel.wakeup_ns` | two threads on two cores wake each other in turn (`park`/`unpark`): half the round trip |
//! | `kernel.ipi_ns`, `ipi_handler_ns` | a thread maps, touches and unmaps one page in a loop, alone and with a second thread of the same mm storing on another core: the difference per unmap is the shootdown its sender waits for; the second thread's lost progress per IPI is the handler |
//! | `kernel.trap_ns` | the host kernel's page_fault1 loop against the engine's with the same profile, one task each: what a real fault costs beyond the engine's model of it |
//!
//! Topology comes from the host facts; a host with one CPU cannot measure transfers and is
//! refused. Nothing here is fitted to an experiment.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pagelab_bench::stats::median;
use pagelab_workloads::host::HostVm;
use pagelab_workloads::pft::thread_cpu_ns;
use pagelab_workloads::pin::{allowed_cpus, pin_to_core};
use pagelab_workloads::vm::Vm;

use pagelab_workloads::Mode;
use serde::Serialize;

use crate::error::ProjectError;
use crate::machine::{Cpu, KernelCosts, Latency, Machine, Memory, Numa, Topology};
use crate::validate::Published;

/// The fewest nanoseconds any of `runs` timings of `f` took: on a shared host another task can
/// only add time to a run (it preempts, or evicts the caches), never remove it, so the quickest
/// of many short runs, each shorter than a scheduler time slice, is the least disturbed.
fn quickest(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..runs).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// Nanoseconds `steps` steps of a dependent `or`/`imul` chain take: each step waits for the one
/// before, so the chain runs at the multiplier's latency (4 cycles a step), whatever the core's
/// width; the clock and the SMT throughput are both read off it.
fn multiply_chain_ns(steps: u64) -> f64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    let t = Instant::now();
    for _ in 0..steps {
        x = x.wrapping_mul(x | 1);
    }
    black_box(x);
    t.elapsed().as_nanos() as f64
}

/// The core clock, GHz, from the quickest of `runs` dependent `or`/`imul` chains of 0.1 ms or
/// so (4 cycles a step), taken now.
fn chain_ghz(runs: usize) -> f64 {
    const STEPS: u64 = 100_000;
    (4 * STEPS) as f64 / quickest(runs, || multiply_chain_ns(STEPS))
}

/// The core clock, GHz: the quickest of 50 chains, taken now. A draw of the moment: on a VM
/// whose core shares its turbo budget with other tenants it read 2.09 to 2.79 GHz on one host
/// within minutes. What scales a trace's compute is [`host_clock_ghz`].
pub fn clock_ghz() -> f64 {
    chain_ghz(50)
}

/// The host's core clock as traces and calibrate record it: the quickest of [`clock_ghz`]'s
/// chains over half a second (20 rounds of 10 chains, 25 ms apart), measured once per process:
/// the core's peak (turbo) clock as the chain sees it. Measuring it costs the first capture
/// of a process half a second.
///
/// Why not [`clock_ghz`] at each capture: the replay scales a trace's compute by its host clock
/// over the machine's, so a clock read low makes that capture's compute shorter. On a 2-vCPU
/// Intel Xeon VM (2026-11-28) one reading per capture gave 2.09 to 2.79 GHz while the captures'
/// own untraced times did not follow it (linux-4.15 page_fault1 captures read at 2.09-2.37 GHz
/// ran 962-1083 ns a fault, large-zone-batch ones read at 2.49-2.69 GHz ran 923-1316 ns): a
/// reading of 7 ms says nothing of windows seconds away, and it made profiles differ by the
/// draw of their readings, up to 25% of their compute. The quickest chain over half a second
/// is the core's undisturbed clock, the counterpart of the capture's quickest untraced window
/// (both best cases of the same host), and one figure for every capture of a process keeps
/// the profiles of one projection on one scale.
pub fn host_clock_ghz() -> f64 {
    static CLOCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *CLOCK.get_or_init(|| {
        let mut best = 0.0f64;
        for round in 0..20 {
            if round > 0 {
                std::thread::sleep(Duration::from_millis(25));
            }
            best = best.max(chain_ghz(10));
        }
        best
    })
}

/// Half the round trip of a counter passed between threads on the first two allowed CPUs.
pub fn core_transfer_ns() -> f64 {
    transfer_ns_between(0, 1)
}

/// Half the round trip of a counter passed between threads pinned to the `a`-th and `b`-th
/// allowed CPUs (hardware threads of one core, cores of one node, or nodes).
pub fn transfer_ns_between(a: usize, b: usize) -> f64 {
    // The peer answers every round; this side times bursts of `BURST` rounds and keeps the
    // quickest burst, one in which neither thread was preempted.
    const BURST: u64 = 1000;
    const BURSTS: u64 = 200;
    let line = Arc::new(AtomicU64::new(0));
    let l2 = line.clone();
    let peer = std::thread::spawn(move || {
        pin_to_core(b);
        for i in 0..BURST * BURSTS {
            while l2.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            l2.store(2 * i + 2, Ordering::Release);
        }
    });
    pin_to_core(a);
    let mut best = f64::INFINITY;
    for burst in 0..BURSTS {
        let t = Instant::now();
        for i in burst * BURST..(burst + 1) * BURST {
            line.store(2 * i + 1, Ordering::Release);
            while line.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    peer.join().expect("peer thread");
    best / BURST as f64 / 2.0
}

/// One `lock xadd` on a line this core owns: the quickest of 50 short runs.
pub fn atomic_ns() -> f64 {
    const N: u64 = 20_000;
    let a = AtomicU64::new(0);
    quickest(50, || {
        let t = Instant::now();
        for _ in 0..N {
            a.fetch_add(1, Ordering::SeqCst);
        }
        black_box(a.load(Ordering::Relaxed));
        t.elapsed().as_nanos() as f64
    }) / N as f64
}

/// Clearing bandwidth, GB/s, of `threads` threads clearing `bytes` each at once, each page with
/// the engine's `clear_page` ([`pagelab_mm::arena::Arena::zero_page`], word by word): the
/// kernel that runs on this host as the self-check sees it is the engine, and its clearing is
/// what the trace's writes cost here. Each thread clears its own arena, faulted in first, so
/// that the host's page faults are not in the figure. A pass that a last-level cache can hold
/// measures the cache, not the memory the engine's clears reach: callers size `bytes` beyond it
/// (256 MiB here; the self-check, the row's own footprint: `validate::Beside::footprint`).
///
/// One thread is timed in its own CPU time, not the wall clock: a pass over 256 MiB takes
/// tens of milliseconds, longer than the host's slices, so on a shared host every pass lost
/// time to other tasks and the quickest of them still did (one core measured 16 to 31 GB/s in
/// calibrations minutes apart at load average 7-10, while the engine's pft rate per CPU-second
/// stayed within 15%). Clearing takes the same CPU time preempted or not, and the replay
/// charges it per task on its CPU, the share of the CPU it gets being measured and replayed
/// apart ([`cpu_share`]).
///
/// Several threads are timed in wall time, pass by pass *together*
/// ([`group_pass_ns`]): every pass starts at a barrier, and lasts from the first thread's
/// start to the last one's end, so that every thread's pass is in it and none is one the
/// thread ran alone. Until 2026-11-29 each thread kept the quickest of its own three passes
/// and the figure took the slowest of those: but the threads' passes drift apart (a
/// preempted thread falls behind, the other's next pass runs alone), so a thread's quickest
/// pass could be one it ran with the other idle, and the figure came out above what they
/// clear together. On a 2-vCPU EPYC guest it gave 21.7 to 30.0 GB/s for two threads beside
/// 11.2 to 18.5 for one, where two threads of a C `memset` loop clearing at once each cleared
/// about a fifth to a quarter slower than one alone (18.5 to 22.6 GB/s for the two;
/// docs/model-history.md, "round 35"). 0 when `threads` is 0 or an arena could not be had.
pub fn clear_bandwidth_gbs(threads: usize, bytes: usize) -> f64 {
    use pagelab_mm::arena::{Arena, ArenaConfig};
    if threads == 0 {
        return 0.0;
    }
    let arena = move || {
        let cfg = ArenaConfig {
            prefault: true,
            ..ArenaConfig::new(bytes as u64)
        };
        Arena::new(cfg, 0).ok()
    };
    let clear = |arena: &Option<Arena>| {
        if let Some(arena) = arena {
            for pfn in 0..arena.nr_pages() {
                arena.zero_page(pagelab_mm::Pfn(pfn as u32));
            }
        }
    };
    if threads == 1 {
        let one = std::thread::spawn(move || {
            pin_to_core(0);
            let arena = arena();
            if arena.is_none() {
                return f64::INFINITY;
            }
            // The quickest of nine passes, each in this thread's own CPU time.
            quickest(9, || {
                let c = thread_cpu_ns();
                clear(&arena);
                (thread_cpu_ns() - c) as f64
            })
        });
        return bytes as f64 / one.join().unwrap_or(f64::INFINITY);
    }
    // A thread whose arena could not be had clears nothing, though its bytes would be
    // counted: the figure is then 0, not a sum of bytes nobody cleared.
    let failed = Arc::new(AtomicBool::new(false));
    let f2 = failed.clone();
    let ns = group_pass_ns(threads, 9, move |_| {
        let arena = arena();
        if arena.is_none() {
            f2.store(true, Ordering::Relaxed);
        }
        move || clear(&arena)
    });
    if failed.load(Ordering::Relaxed) {
        return 0.0;
    }
    (threads * bytes) as f64 / ns
}

/// The quickest of `passes` passes that `threads` pinned threads run together, ns: each thread
/// builds its work with `setup(i)` (outside the timing), then every pass starts at a barrier
/// and lasts from the earliest start to the latest end, so that every thread's work is in it
/// (no pass is one a thread ran while the others were idle between passes), and the quickest
/// pass is the least disturbed one. `f64::INFINITY` if `setup` or a pass panicked in any
/// thread: a thread that panics keeps meeting the barriers, so the others are not left
/// waiting for it.
fn group_pass_ns<W: FnMut() + 'static>(
    threads: usize,
    passes: usize,
    setup: impl Fn(usize) -> W + Send + Sync + 'static,
) -> f64 {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let setup = Arc::new(setup);
    let start = Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (start, setup) = (start.clone(), setup.clone());
            std::thread::spawn(move || {
                pin_to_core(i);
                let mut work = catch_unwind(AssertUnwindSafe(|| setup(i))).ok();
                let mut ok = work.is_some();
                let spans = (0..passes)
                    .map(|_| {
                        start.wait();
                        let t0 = Instant::now();
                        if let Some(w) = work.as_mut() {
                            ok &= catch_unwind(AssertUnwindSafe(w)).is_ok();
                        }
                        (t0, Instant::now())
                    })
                    .collect::<Vec<_>>();
                ok.then_some(spans)
            })
        })
        .collect();
    let spans: Vec<Vec<(Instant, Instant)>> = match handles
        .into_iter()
        .map(|h| h.join().ok().flatten())
        .collect::<Option<_>>()
    {
        Some(s) => s,
        None => return f64::INFINITY,
    };
    (0..passes)
        .map(|p| {
            let first = spans.iter().map(|s| s[p].0).min().expect("threads");
            let last = spans.iter().map(|s| s[p].1).max().expect("threads");
            last.duration_since(first).as_nanos() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Half the round trip of two threads on two cores waking each other.
pub fn wakeup_ns() -> f64 {
    const ROUNDS: u64 = 20_000;
    median(
        &(0..3)
            .map(|_| {
                let turn = Arc::new(AtomicU64::new(0));
                let main = std::thread::current();
                let t2 = turn.clone();
                let peer = std::thread::spawn(move || {
                    pin_to_core(1);
                    for i in 0..ROUNDS {
                        while t2.load(Ordering::Acquire) != 2 * i + 1 {
                            std::thread::park();
                        }
                        t2.store(2 * i + 2, Ordering::Release);
                        main.unpark();
                    }
                });
                pin_to_core(0);
                let t = Instant::now();
                for i in 0..ROUNDS {
                    turn.store(2 * i + 1, Ordering::Release);
                    peer.thread().unpark();
                    while turn.load(Ordering::Acquire) != 2 * i + 2 {
                        std::thread::park();
                    }
                }
                let ns = t.elapsed().as_nanos() as f64;
                peer.join().expect("peer thread");
                ns / ROUNDS as f64 / 2.0
            })
            .collect::<Vec<_>>(),
    )
}

/// `(sender ns per shootdown, handler ns per IPI)`: map-touch-unmap of one page alone, then
/// with a second thread of the same address space storing on another core.
pub fn shootdown_ns() -> Result<(f64, f64), ProjectError> {
    const ROUNDS: u32 = 20_000;
    let err = ProjectError::Measure;
    let vms = HostVm::threads(2);
    let mut it = vms.into_iter();
    let (a, b) = (it.next().expect("two"), it.next().expect("two"));
    let unmap_loop = |vm: &HostVm| -> Result<f64, ProjectError> {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            let p = vm.mmap_anon(4096).map_err(err)?;
            vm.store(p).map_err(err)?;
            vm.munmap(p, 4096).map_err(err)?;
        }
        Ok(t.elapsed().as_nanos() as f64 / f64::from(ROUNDS))
    };
    // The second thread's own progress with and without the IPIs, as stores per ns.
    let stop = AtomicBool::new(false);
    let progress = AtomicU64::new(0);
    let peer_region = b.mmap_anon(1 << 20).map_err(err)?;
    pin_to_core(0);
    let alone = median(
        &(0..3)
            .map(|_| unmap_loop(&a))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let (stop, progress) = (&stop, &progress);
    let (with, lost_per_ipi) = std::thread::scope(|s| -> Result<(f64, f64), ProjectError> {
        let h = s.spawn(move || {
            pin_to_core(1);
            let mut n = 0u64;
            let t = Instant::now();
            let mut quiet_rate = None;
            while !stop.load(Ordering::Relaxed) {
                for i in 0..256u64 {
                    let _ = b.store(peer_region + (i % 256) * 4096);
                }
                n += 256;
                if quiet_rate.is_none() && t.elapsed() > Duration::from_millis(100) {
                    quiet_rate = Some(n as f64 / t.elapsed().as_nanos() as f64);
                    progress.store(1, Ordering::Release);
                    n = 0;
                }
            }
            let _ = b.munmap(peer_region, 1 << 20);
            (quiet_rate.unwrap_or(0.0), n)
        });
        while progress.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let t = Instant::now();
        let with = median(
            &(0..3)
                .map(|_| unmap_loop(&a))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let busy_ns = t.elapsed().as_nanos() as f64;
        stop.store(true, Ordering::Relaxed);
        let (quiet_rate, n_during) = h
            .join()
            .map_err(|_| ProjectError::Calibrate("calibrate: the peer thread panicked".into()))?;
        let expected = quiet_rate * busy_ns;
        let lost_ns = if quiet_rate > 0.0 {
            ((expected - n_during as f64) / quiet_rate).max(0.0)
        } else {
            0.0
        };
        Ok((with, lost_ns / f64::from(3 * ROUNDS)))
    })?;
    Ok(((with - alone).max(0.0), lost_per_ipi))
}

/// What a page fault costs the host kernel beyond the engine's model of it: page_fault1's loop
/// with one task on each, ns per fault, the difference.
pub fn trap_ns(profile: &pagelab_bench::profiles::Profile) -> Result<f64, ProjectError> {
    use pagelab_workloads::page_fault::{Variant, task_loop};
    let bytes: u64 = 64 << 20;
    let per_fault = |vm: &dyn Fn(&AtomicU64, &AtomicBool) -> Result<(), ProjectError>| {
        let counter = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(400));
                stop.store(true, Ordering::Relaxed);
            });
            vm(&counter, &stop)
        })?;
        Ok::<f64, ProjectError>(
            t.elapsed().as_nanos() as f64 / counter.load(Ordering::Relaxed) as f64,
        )
    };
    pin_to_core(0);
    let host = HostVm::new();
    let host_ns = median(
        &(0..3)
            .map(|_| {
                per_fault(&|c, s| {
                    task_loop(&host, Variant::Anon, bytes, c, s).map_err(ProjectError::Measure)
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    let arena = bytes * 2 + (64 << 20);
    let k = pagelab_workloads::engine::boot(&profile.policy, arena, 1)
        .map_err(ProjectError::Measure)?;
    let (_run, vms) =
        pagelab_workloads::engine::tasks(&k, 1, pagelab_workloads::Mode::Threads, false)
            .map_err(ProjectError::Measure)?;
    let engine_ns = median(
        &(0..3)
            .map(|_| {
                per_fault(&|c, s| {
                    task_loop(&vms[0], Variant::Anon, bytes, c, s).map_err(ProjectError::Measure)
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    Ok((host_ns - engine_ns).max(0.0))
}

/// Nanoseconds per dependent load of a pointer chase through 256 MiB in a random order (every
/// load a cache and mostly a TLB miss), on the first allowed CPU, while `loaders` other CPUs
/// clear pages with the engine's `clear_page`; and the loaders' bandwidth together, GB/s. What
/// `mlc --loaded_latency` measures, with clearing as the injected traffic.
pub fn chase_latency_ns(loaders: usize) -> (f64, f64) {
    use pagelab_mm::arena::{Arena, ArenaConfig};
    const LINES: usize = (256 << 20) / 64;
    const STEPS: usize = 2_000_000;
    // A single cycle through every line in a random order (Sattolo's shuffle), 8 words a line.
    let mut next = vec![0u64; LINES * 8];
    let mut order: Vec<u32> = (0..LINES as u32).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..LINES).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    for w in 0..LINES {
        next[order[w] as usize * 8] = u64::from(order[(w + 1) % LINES]) * 8;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cleared = Arc::new(AtomicU64::new(0));
    let start = Arc::new(std::sync::Barrier::new(loaders + 1));
    let handles: Vec<_> = (0..loaders)
        .map(|i| {
            let (stop, cleared, start) = (stop.clone(), cleared.clone(), start.clone());
            std::thread::spawn(move || {
                pin_to_core(i + 1);
                let cfg = ArenaConfig {
                    prefault: true,
                    ..ArenaConfig::new(128 << 20)
                };
                let arena = Arena::new(cfg, 0).ok();
                start.wait();
                let Some(arena) = arena else { return };
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for pfn in 0..arena.nr_pages() {
                        arena.zero_page(pagelab_mm::Pfn(pfn as u32));
                    }
                    n += arena.bytes();
                }
                cleared.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    pin_to_core(0);
    start.wait();
    let t = Instant::now();
    let mut p = 0u64;
    // The quickest of bursts of 20,000 loads (about 2 ms): the least disturbed by other tasks.
    let mut best = f64::INFINITY;
    for _ in 0..STEPS / 20_000 {
        let t1 = Instant::now();
        for _ in 0..20_000 {
            p = black_box(next[p as usize]);
        }
        best = best.min(t1.elapsed().as_nanos() as f64 / 20_000.0);
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let gbs = cleared.load(Ordering::Relaxed) as f64 / t.elapsed().as_nanos() as f64;
    (best, gbs)
}

/// Throughput of two threads on the `a`-th and `b`-th allowed CPUs running the clock chain at
/// once, relative to one alone (2.0 for two whole cores; less for two hardware threads of one
/// core, or CPUs the host does not run side by side).
pub fn pair_throughput(a: usize, b: usize) -> f64 {
    const STEPS: u64 = 20_000_000;
    let chain = || multiply_chain_ns(STEPS);
    median(
        &(0..3)
            .map(|_| {
                pin_to_core(a);
                let alone = chain();
                let peer = std::thread::spawn(move || {
                    pin_to_core(b);
                    chain()
                });
                let mine = chain();
                let theirs = peer.join().expect("chain thread");
                2.0 * alone / mine.max(theirs)
            })
            .collect::<Vec<_>>(),
    )
}

/// How much of its CPU the host gives each of `threads` busy tasks pinned to the first
/// `threads` allowed CPUs: `(fraction of the wall time a task runs, mean ns it waits each time
/// it is descheduled)`, over `window`. Each thread reads the clock in a tight loop; a gap of
/// more than [`DESCHEDULED`] between two reads is time it did not run (another task had its
/// CPU, or the hypervisor ran another guest's vCPU). 1 and 0 where every task owns its CPU.
/// The engine's tasks are busy the same way (they never sleep in page_fault1 or pft), so
/// they get the same turns when measured beside it.
pub fn cpu_share(threads: usize, window: Duration) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (stop, start) = (stop.clone(), start.clone());
            std::thread::spawn(move || {
                pin_to_core(i);
                start.wait();
                let t0 = Instant::now();
                let (mut last, mut gaps, mut n) = (t0, Duration::ZERO, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        let now = Instant::now();
                        let gap = now - last;
                        if gap > DESCHEDULED {
                            gaps += gap;
                            n += 1;
                        }
                        last = now;
                    }
                }
                let wall = last.duration_since(t0).as_nanos().max(1) as f64;
                (gaps.as_nanos() as f64, n, wall)
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    let (mut gaps, mut n, mut wall) = (0.0, 0u64, 0.0);
    for h in handles {
        let (g, k, w) = h.join().expect("share thread");
        gaps += g;
        n += k;
        wall += w;
    }
    let share = (1.0 - gaps / wall).clamp(0.01, 1.0);
    let off = if n == 0 { 0.0 } else { gaps / n as f64 };
    (share, off)
}

/// A gap between two reads of the clock in a tight loop longer than this is time the thread
/// did not run: far above the loop's own step (tens of ns) and a host interrupt (a few us),
/// below a scheduler slice (CFS: 0.75 ms or more, `sysctl_sched_base_slice`).
pub const DESCHEDULED: Duration = Duration::from_micros(50);

/// The hardware threads of one core this process may use: `(i, j)` indices into the allowed
/// CPUs, from sysfs `thread_siblings_list`.
fn smt_pair() -> Option<(usize, usize)> {
    let allowed = allowed_cpus();
    for (i, &c) in allowed.iter().enumerate() {
        let list = std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"
        ))
        .ok()?;
        for sib in parse_cpu_list(&list) {
            if sib != c
                && let Some(j) = allowed.iter().position(|&x| x == sib)
            {
                return Some((i, j));
            }
        }
    }
    None
}

/// `0-3,8,10-11` as CPU numbers.
fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// NUMA nodes with allowed CPUs: `(node, its first allowed CPU's index, SLIT row)`, from sysfs.
fn numa_nodes() -> Vec<(usize, usize, Vec<u32>)> {
    let allowed = allowed_cpus();
    let mut out = Vec::new();
    for node in 0..1024 {
        let dir = format!("/sys/devices/system/node/node{node}");
        let Ok(list) = std::fs::read_to_string(format!("{dir}/cpulist")) else {
            continue;
        };
        let first = parse_cpu_list(&list)
            .into_iter()
            .find_map(|c| allowed.iter().position(|&x| x == c));
        let dist = std::fs::read_to_string(format!("{dir}/distance"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|d| d.parse().ok())
            .collect();
        if let Some(first) = first {
            out.push((node, first, dist));
        }
    }
    out
}

/// Where each number of a measured machine came from, by dotted key.
pub type Notes = Vec<(String, String)>;

/// The description as TOML with each key's note (what measured it, or the source of an
/// estimate) as a comment above it.
pub fn annotate(m: &Machine, notes: &Notes) -> String {
    let mut out = String::new();
    let mut section = String::new();
    for line in m.to_toml().lines() {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') && !t.contains('=') {
            section = t.trim_matches(|c| c == '[' || c == ']').to_string();
        } else if let Some((k, _)) = t.split_once(" = ") {
            let key = if section.is_empty() {
                k.to_string()
            } else {
                format!("{section}.{k}")
            };
            for (nk, note) in notes {
                if *nk == key {
                    for l in note.lines() {
                        out.push_str("# ");
                        out.push_str(l);
                        out.push('\n');
                    }
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Measures this host (about a minute) and describes it as a machine named `name`, with a note
/// for every number: measured (and how) or an estimate (and its source).
pub fn measure_host(
    name: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<(Machine, Notes), ProjectError> {
    measure(name, true, progress)
}

/// This host as the engine runs on it, measured: what the self-check replays. The kernel costs
/// are zero (the engine pays none: [`Machine::as_engine`]), so they are not measured.
pub fn measure_host_for_engine(
    name: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<(Machine, Notes), ProjectError> {
    measure(name, false, progress)
}

fn measure(
    name: &str,
    kernel: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(Machine, Notes), ProjectError> {
    let cpus = allowed_cpus().len();
    if cpus < 2 {
        return Err(ProjectError::Calibrate(
            "calibrate needs at least two CPUs to measure cache-line transfers (this process may use one)"
                .into(),
        ));
    }
    let mut notes: Notes = Vec::new();
    let mut note = |k: &str, v: String| notes.push((k.to_string(), v));
    let host = pagelab_bench::host::HostInfo::detect();
    let sockets = host.sockets.unwrap_or(1).max(1);
    let cores = host.cores.unwrap_or(cpus).max(1);
    let smt = smt_pair();
    let threads_per_core =
        if smt.is_some() && cores.is_multiple_of(sockets) && host.cpus == 2 * cores {
            2
        } else {
            1
        };
    progress("core clock");
    let ghz = host_clock_ghz();
    note(
        "cpu.ghz",
        "measured: a dependent or/imul chain, 4 cycles a step, the quickest over half a second"
            .into(),
    );
    progress("cache-line transfer between two cores");
    let core_pair = match smt {
        // Two CPUs that are not siblings of one core.
        Some((i, j)) => (0..cpus)
            .flat_map(|a| (0..cpus).map(move |b| (a, b)))
            .find(|&(a, b)| a != b && (a, b) != (i, j) && (a, b) != (j, i))
            .unwrap_or((0, 1)),
        None => (0, 1),
    };
    let core_ns = transfer_ns_between(core_pair.0, core_pair.1);
    note(
        "latency.core_ns",
        "measured: ping-pong of one line between two pinned threads, half the round trip".into(),
    );
    let (smt_ns, smt_throughput) = match smt {
        Some((i, j)) => {
            progress("cache-line transfer and throughput of two hardware threads of one core");
            note(
                "latency.smt_ns",
                "measured: ping-pong between two hardware threads of one core".into(),
            );
            note(
                "cpu.smt_throughput",
                "measured: the clock chain on both hardware threads of a core at once against one"
                    .into(),
            );
            (
                transfer_ns_between(i, j),
                pair_throughput(i, j).clamp(1.0, 2.0),
            )
        }
        None => {
            note(
                "latency.smt_ns",
                "not measurable: no two hardware threads of one core are allowed to this process\n\
                 (threads_per_core = 1, so the replay never uses it). Estimate: 8 ns, the transfer\n\
                 between hyper-threads github.com/nviennot/core-to-core-latency reports for recent\n\
                 x86 cores (7.6 to 9 ns: Xeon E5-2695 v4, Xeon 8375C, EPYC 9274F)"
                    .into(),
            );
            note(
                "cpu.smt_throughput",
                "not measurable without two hardware threads of one core; unused (threads_per_core = 1)".into(),
            );
            (8.0, 1.0)
        }
    };
    progress("uncontended atomic");
    let atomic = atomic_ns();
    note(
        "latency.atomic_ns",
        "measured: back-to-back lock xadd on a line this core owns".into(),
    );
    // NUMA nodes, from sysfs; remote transfers need two of them.
    let found = numa_nodes();
    let (nodes_per_socket, distance, mut remote) = if found.len() >= 2
        && found.len().is_multiple_of(sockets)
        && found.iter().all(|(_, _, d)| d.len() == found.len())
    {
        (
            found.len() / sockets,
            found.iter().map(|(_, _, d)| d.clone()).collect::<Vec<_>>(),
            std::collections::BTreeMap::new(),
        )
    } else {
        (1, Vec::new(), std::collections::BTreeMap::new())
    };
    let nodes = sockets * nodes_per_socket;
    // The kernel's MemTotal split over the nodes: what its tunables follow here.
    let node_gib = (host.mem_total > 0).then(|| {
        round(
            host.mem_total as f64 / (1u64 << 30) as f64 / nodes.max(1) as f64,
            2,
        )
    });
    if let Some(g) = node_gib {
        note(
            "memory.node_gib",
            format!(
                "measured: MemTotal over {} node(s), {g} GiB a node",
                nodes.max(1)
            ),
        );
    }
    let distance: Vec<Vec<u32>> = if distance.is_empty() {
        (0..nodes)
            .map(|a| (0..nodes).map(|b| if a == b { 10 } else { 21 }).collect())
            .collect()
    } else {
        distance
    };
    if nodes_per_socket * sockets == found.len() && found.len() >= 2 {
        progress("cache-line transfer between NUMA nodes");
        for (a, (_, ca, row)) in found.iter().enumerate() {
            for (b, (_, cb, _)) in found.iter().enumerate().skip(a + 1) {
                let d = row[b].to_string();
                if !remote.contains_key(&d) {
                    remote.insert(d.clone(), round(transfer_ns_between(*ca, *cb), 1));
                    note(
                        &format!("latency.remote_ns.{d}"),
                        format!(
                            "measured: ping-pong between a CPU of node {a} and one of node {b} (SLIT distance {d})"
                        ),
                    );
                }
            }
        }
        note(
            "numa.distance",
            "from sysfs (/sys/devices/system/node/node*/distance)".into(),
        );
    } else if nodes > 1 {
        // Several sockets but one NUMA node per socket not visible: a remote transfer cannot be
        // told apart from a local one; the sockets' CPUs are measured as one node would be.
        remote.insert("21".to_string(), round(core_ns, 1));
        note(
            "latency.remote_ns.21",
            "not measurable: sysfs shows no NUMA node per socket; the transfer between two cores\n\
             measured above stands in (an estimate)"
                .into(),
        );
        note(
            "numa.distance",
            "estimate: 21, the SLIT distance of a two-socket board".into(),
        );
    } else {
        note(
            "numa.distance",
            "one NUMA node: no remote transfer to measure or to use".into(),
        );
    }
    progress("clearing bandwidth, one core and all cores (the engine's clear_page)");
    let core_bw = clear_bandwidth_gbs(1, 256 << 20);
    // Every allowed CPU clears at once (a few GiB in all, whatever the CPU count); the sum is
    // shared by the nodes.
    let per_thread = ((4usize << 30) / cpus).clamp(8 << 20, 128 << 20);
    let node_bw = (clear_bandwidth_gbs(cpus, per_thread) / nodes as f64).max(core_bw);
    note(
        "memory.core_bandwidth_gbs",
        "measured: one thread clears a 256 MiB arena, faulted in first, with the engine's clear_page,\n\
         timed in its own CPU time (time the host gave other tasks is not clearing)"
            .into(),
    );
    note(
        "memory.node_bandwidth_gbs",
        "measured: every allowed CPU clears its own arena at once, the sum over the nodes".into(),
    );
    progress("memory latency, idle and with the other CPUs clearing");
    let (idle, _) = chase_latency_ns(0);
    let (loaded, load_gbs) = chase_latency_ns(cpus - 1);
    let u = (load_gbs / node_bw).min(1.0);
    let loaded_latency = if u > 0.0 && idle.is_finite() && loaded.is_finite() {
        note(
            "memory.loaded_latency",
            format!(
                "measured: a pointer chase through 256 MiB alone ({idle:.1} ns), then while the other\n\
                 {} CPU(s) clear pages ({loaded:.1} ns at {load_gbs:.1} GB/s, utilisation {u:.3} of the node);\n\
                 a loaded latency below the idle one (noise) is kept at the idle one",
                cpus - 1
            ),
        );
        vec![
            [0.0, round(idle, 1)],
            [round(u, 3).max(0.001), round(loaded.max(idle), 1)],
        ]
    } else {
        Vec::new()
    };
    let (wakeup, ipi, handler, trap) = if kernel {
        progress("wake-up latency");
        let wakeup = wakeup_ns();
        progress("TLB shootdown");
        let (ipi, handler) = shootdown_ns()?;
        progress("page-fault cost beyond the engine (host page_fault1 against the engine's)");
        let profile = pagelab_bench::profiles::load("linux-6.7")?;
        let trap = trap_ns(&profile)?;
        note(
            "kernel.trap_ns",
            "measured: the host kernel's page_fault1 fault time less the engine's, one task".into(),
        );
        note(
            "kernel.wakeup_ns",
            "measured: park/unpark ping-pong between two pinned threads, half the round trip"
                .into(),
        );
        note("kernel.ipi_ns", "measured: map-touch-unmap of one page with a second thread of the mm on another core, less alone".into());
        note(
            "kernel.ipi_handler_ns",
            "measured: the second thread's lost progress per shootdown".into(),
        );
        (wakeup, ipi, handler, trap)
    } else {
        for k in ["trap_ns", "wakeup_ns", "ipi_ns", "ipi_handler_ns"] {
            note(
                &format!("kernel.{k}"),
                "zero: the engine pays no kernel cost (Machine::as_engine)".into(),
            );
        }
        (0.0, 0.0, 0.0, 0.0)
    };
    let m = Machine {
        name: name.to_string(),
        description: format!(
            "{} ({} CPUs), measured by pagelab calibrate on {}",
            host.cpu_model, host.cpus, host.kernel
        ),
        cpu: Cpu {
            model: host.cpu_model.clone(),
            ghz: round(ghz, 3),
            smt_throughput: round(smt_throughput, 2),
            // The chain times one busy core; how the clock falls as more cores run is not
            // measured here, so the host is replayed at that one clock.
            turbo_ghz: Vec::new(),
            share: Vec::new(),
        },
        topology: Topology {
            sockets,
            cores_per_socket: (cores / sockets).max(1),
            threads_per_core,
            nodes_per_socket,
        },
        numa: Numa {
            distance,
            fabric: None,
        },
        latency: Latency {
            smt_ns: round(smt_ns, 1),
            core_ns: round(core_ns, 1),
            remote_ns: remote,
            atomic_ns: round(atomic, 2),
        },
        memory: Memory {
            node_bandwidth_gbs: round(node_bw, 2),
            core_bandwidth_gbs: round(core_bw, 2),
            loaded_latency,
            page_size: pagelab_mm::page::PAGE_SIZE as u64,
            node_gib,
        },
        kernel: KernelCosts {
            trap_ns: round(trap, 0),
            wakeup_ns: round(wakeup, 0),
            ipi_ns: round(ipi, 0),
            ipi_handler_ns: round(handler, 0),
        },
        calibration: None,
    };
    let m = Machine::parse(&m.to_toml(), "calibrated")?;
    Ok((m, notes))
}

/// A published row, by what identifies it in its table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RowKey {
    pub profile: String,
    pub mode: Mode,
    pub tasks: usize,
    pub metric: String,
}

impl std::fmt::Display for RowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = if self.tasks == 1 { "task" } else { "tasks" };
        write!(
            f,
            "{} {} {} {unit} {}",
            self.profile, self.mode, self.tasks, self.metric
        )
    }
}

/// The metric a calibration fits: operations per wall-clock second, what every replay gives.
pub const FITTED_METRIC: &str = "faults/sec";

/// The rows of `table` that calibration fits `kernel.trap_ns` to, and that a validation must
/// therefore leave out of its error summaries (a fitted row agrees by construction): the
/// experiment's baseline profile (its first), one task, in the table's first mode, the
/// [`FITTED_METRIC`].
pub fn fitted_rows(table: &Published) -> Result<Vec<RowKey>, ProjectError> {
    let e = pagelab_bench::experiments::load(table.experiment)?;
    let base = &e
        .profiles
        .first()
        .ok_or_else(|| {
            ProjectError::Table(format!("experiment {} has no profile", table.experiment))
        })?
        .name;
    let rows = table.rows()?;
    let mode = rows
        .first()
        .map(|r| r.mode)
        .ok_or_else(|| ProjectError::Table(format!("published table {} has no row", table.name)))?;
    let row = rows
        .iter()
        .find(|r| &r.profile == base && r.mode == mode && r.tasks == 1 && r.metric == FITTED_METRIC)
        .ok_or_else(|| {
            ProjectError::Table(format!(
                "published table {} has no `{base}` {mode} 1-task `{FITTED_METRIC}` row to calibrate against",
                table.name
            ))
        })?;
    Ok(vec![RowKey {
        profile: row.profile.clone(),
        mode: row.mode,
        tasks: row.tasks,
        metric: row.metric.clone(),
    }])
}

/// The arithmetic of one `trap_ns` calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrapFit {
    pub table: String,
    pub machine: String,
    pub row: RowKey,
    /// The published operations per second, and as nanoseconds per operation.
    pub published: f64,
    pub published_ns: f64,
    /// The replay's nanoseconds per operation with `trap_ns = 0`.
    pub replayed_ns: f64,
    /// `published_ns - replayed_ns`, rounded to whole nanoseconds: what the file holds.
    pub trap_ns: f64,
}

/// `trap_ns` for `table`'s machine, given what the replay gives its fitted row without a trap.
/// Refused when the replay is already as slow as the published row (no trap left to fit).
pub fn trap_fit(table: &Published, replayed_ns: f64) -> Result<TrapFit, ProjectError> {
    let row = fitted_rows(table)?.remove(0);
    let published = table
        .rows()?
        .into_iter()
        .find(|r| {
            r.profile == row.profile
                && r.mode == row.mode
                && r.tasks == row.tasks
                && r.metric == row.metric
        })
        .map(|r| r.value)
        .expect("fitted_rows names a row of the table");
    let published_ns = 1e9 / published;
    // The replayed figure is kept to 0.1 ns in the file; the fit uses it as kept.
    let replayed_ns = round(replayed_ns, 1);
    let trap_ns = round(published_ns - replayed_ns, 0);
    if trap_ns <= 0.0 {
        return Err(ProjectError::Calibrate(format!(
            "calibrate {}: the replay without a trap takes {replayed_ns} ns per operation, not less than the published {published_ns:.2}; there is no trap cost to fit",
            table.name
        )));
    }
    Ok(TrapFit {
        table: table.name.to_string(),
        machine: table.machine.to_string(),
        row,
        published,
        published_ns,
        replayed_ns,
        trap_ns,
    })
}

impl TrapFit {
    /// The arithmetic, as comment lines, then the keys the machine file holds.
    pub fn render(&self, host: &str, date: &str) -> String {
        format!(
            "# pagelab calibrate --machine {m} --from-table {t}\n\
             # published: {row} = {p} -> 1e9 / {p} = {pns:.2} ns per operation\n\
             # replayed with kernel.trap_ns = 0 on {host} ({date}): {r:.1} ns per operation\n\
             # kernel.trap_ns = {pns:.2} - {r:.1} = {d:.2}, rounded to {trap}\n\
             [kernel]\n\
             trap_ns = {trap:.1}\n\
             [calibration]\n\
             table = \"{t}\"\n\
             replayed_ns = {r:.1}\n",
            m = self.machine,
            t = self.table,
            row = self.row,
            p = self.published,
            pns = self.published_ns,
            r = self.replayed_ns,
            d = self.published_ns - self.replayed_ns,
            trap = self.trap_ns,
        )
    }
}

/// Captures of the baseline profile a calibration takes, keeping the quickest: the fit is the
/// one number every later projection on the machine inherits, so it is taken from the least
/// disturbed of more captures than a projection takes ([`crate::project::CAPTURE_ROUNDS`]).
pub const FIT_CAPTURES: usize = 5;

/// What the replay gives `table`'s fitted row on its machine with `kernel.trap_ns = 0`, ns per
/// operation: the baseline profile captured here [`FIT_CAPTURES`] times and each capture
/// replayed at one task, the quickest replay kept. Whatever else runs on this host only adds
/// time to a capture's compute (preemption, cache pollution), never removes it, so the
/// quickest is the least disturbed.
pub fn replay_untrapped_ns(
    table: &Published,
    samples: usize,
    seed: u64,
    ops_per_cpu: u64,
    progress: &mut dyn FnMut(crate::project::Progress<'_>),
    stop: &AtomicBool,
) -> Result<f64, ProjectError> {
    let e = pagelab_bench::experiments::load(table.experiment)?;
    let machine = Machine::load(table.machine)?;
    let profile = e.profiles[0].clone();
    let mut best = f64::INFINITY;
    for i in 0..FIT_CAPTURES {
        if stop.load(Ordering::Relaxed) {
            return Err(ProjectError::Interrupted);
        }
        progress(crate::project::Progress::Capturing {
            profile: &profile.name,
            round: i + 1,
            rounds: FIT_CAPTURES,
        });
        let trace = crate::capture::capture(&crate::capture::CaptureSpec::for_machine(
            e.workload,
            profile.clone(),
            &machine,
        ))?;
        best = best.min(untrapped_ns(
            table,
            &machine,
            std::slice::from_ref(&trace),
            samples,
            seed,
            ops_per_cpu,
        )?);
        progress(crate::project::Progress::Replayed {
            done: i + 1,
            total: FIT_CAPTURES,
        });
    }
    Ok(best)
}

/// The quickest of `traces` (captures of `table`'s baseline profile) replayed as `table`'s
/// fitted row on `machine` with `kernel.trap_ns = 0`, ns per operation: what [`trap_fit`]
/// takes, whether the captures are calibrate's own or a validation's.
pub fn untrapped_ns(
    table: &Published,
    machine: &Machine,
    traces: &[crate::trace::Trace],
    samples: usize,
    seed: u64,
    ops_per_cpu: u64,
) -> Result<f64, ProjectError> {
    let row = fitted_rows(table)?.remove(0);
    let mut machine = machine.clone();
    machine.kernel.trap_ns = 0.0;
    machine.calibration = None;
    let mut best = f64::INFINITY;
    for trace in traces {
        let r =
            crate::project::replay_row(&machine, trace, row.mode, 1, samples, seed, ops_per_cpu)?;
        let (_, _, v) = r
            .metrics
            .iter()
            .find(|(m, _, _)| *m == row.metric)
            .ok_or_else(|| ProjectError::Replay(format!("the replay gives no `{}`", row.metric)))?;
        best = best.min(1e9 / pagelab_bench::stats::hmean(v));
    }
    if !best.is_finite() {
        return Err(ProjectError::Replay(format!(
            "no capture of {}'s baseline to fit kernel.trap_ns to",
            table.name
        )));
    }
    Ok(best)
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped files hold what `pagelab calibrate --machine M --from-table T` printed: the
    /// fit redone from the table and the file's `replayed_ns` gives the file's `trap_ns`, and
    /// the file names the command. Every published table's machine is calibrated so.
    #[test]
    fn shipped_trap_ns_is_the_published_row_less_the_recorded_replay() {
        for t in crate::validate::BUILTIN {
            let m = Machine::load(t.machine).unwrap();
            if t.held_out {
                // Nothing is fitted to a held-out table: its machine holds an estimate.
                assert!(m.calibration.is_none(), "{} is calibrated", m.name);
                continue;
            }
            let c = m
                .calibration
                .as_ref()
                .unwrap_or_else(|| panic!("{} has no [calibration]", m.name));
            assert_eq!(c.table, t.name, "{}", m.name);
            let fit = trap_fit(t, c.replayed_ns).unwrap();
            assert_eq!(
                fit.trap_ns,
                m.kernel.trap_ns,
                "{}: the file's trap_ns is not what the fit gives:\n{}",
                m.name,
                fit.render("?", "?")
            );
            let (_, text) = crate::machine::BUILTIN
                .iter()
                .find(|(n, _)| *n == t.machine)
                .unwrap();
            let cmd = format!(
                "pagelab calibrate --machine {} --from-table {}",
                m.name, t.name
            );
            assert!(text.contains(&cmd), "{} does not say `{cmd}`", m.name);
        }
    }

    #[test]
    fn the_fitted_row_is_the_baseline_one_task_row() {
        let t = crate::validate::published("page_fault1-2018").unwrap();
        let rows = fitted_rows(t).unwrap();
        assert_eq!(
            rows,
            vec![RowKey {
                profile: "linux-4.15".into(),
                mode: Mode::Processes,
                tasks: 1,
                metric: "faults/sec".into(),
            }]
        );
        let t = crate::validate::published("pft-single-vma-2023").unwrap();
        let rows = fitted_rows(t).unwrap();
        assert_eq!(rows[0].profile, "mm-unstable-20230210");
        assert_eq!((rows[0].tasks, rows[0].metric.as_str()), (1, "faults/sec"));
        // The arithmetic: 1e9 / 705533 = 1417.37 ns; less 700.0 is 717.37, kept as 717.
        let fit = trap_fit(
            crate::validate::published("page_fault1-2018").unwrap(),
            700.0,
        )
        .unwrap();
        assert_eq!(fit.trap_ns, 717.0);
        assert!(
            fit.render("h", "d").contains("1417.37 - 700.0 = 717.37"),
            "{}",
            fit.render("h", "d")
        );
        // A replay slower than the table leaves nothing to fit.
        let e = trap_fit(
            crate::validate::published("page_fault1-2018").unwrap(),
            2000.0,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no trap cost to fit") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn the_clock_is_plausible() {
        let g = clock_ghz();
        // Any core from 2005 to 2030, under emulation or not.
        assert!((0.2..10.0).contains(&g), "{g} GHz");
    }

    /// A validation refits `trap_ns` from its own captures of the baseline: the quickest of
    /// them replayed without a trap, less nothing else, is what the fit subtracts.
    #[test]
    fn the_untrapped_time_is_the_quickest_capture_replayed_without_a_trap() {
        use crate::trace::{Event, Trace, TraceMeta, Window};
        let table = crate::validate::published("pft-single-vma-2023").unwrap();
        let machine = Machine::load(table.machine).unwrap();
        // Two faults of `ns` compute each, captured at the machine's own clock (scale 1); the
        // machine's trap is not zero, and must not count.
        assert!(machine.kernel.trap_ns > 0.0);
        let trace = |ns: f64| Trace {
            meta: TraceMeta {
                workload: "pft".into(),
                profile: "mm-unstable-20230210".into(),
                window: Window::Once,
                shared_vma: true,
                kernel_cpus: machine.nr_cpus(),
                host_ghz: machine.cpu.ghz,
                ops: 2,
                ..crate::trace::tests::meta()
            },
            instances: Vec::new(),
            events: vec![
                Event::Trap,
                Event::Compute { ns },
                Event::Ops { n: 1 },
                Event::Trap,
                Event::Compute { ns },
                Event::Ops { n: 1 },
            ],
            fallbacks: Vec::new(),
        };
        let ns = untrapped_ns(
            table,
            &machine,
            &[trace(700.0), trace(500.0), trace(600.0)],
            2,
            1,
            64,
        )
        .unwrap();
        assert!((ns - 500.0).abs() < 1e-6, "{ns} ns per fault");
        let fit = trap_fit(table, ns).unwrap();
        assert_eq!(fit.trap_ns, (fit.published_ns - 500.0).round());
        assert!(untrapped_ns(table, &machine, &[], 2, 1, 64).is_err());
    }

    #[test]
    fn every_trace_of_a_process_gets_one_host_clock() {
        // The replay scales each trace's compute by this figure: two captures of one
        // projection must not differ in it by the luck of when each read the clock.
        let first = host_clock_ghz();
        assert!((0.2..10.0).contains(&first), "{first} GHz");
        let again = std::thread::spawn(host_clock_ghz).join().unwrap();
        assert_eq!(first.to_bits(), again.to_bits());
    }

    #[test]
    fn transfers_and_atomics_are_plausible() {
        let a = atomic_ns();
        assert!(a > 0.0 && a < 1000.0, "{a} ns");
        if allowed_cpus().len() >= 2 {
            let t = core_transfer_ns();
            assert!(t > 0.0 && t < 100_000.0, "{t} ns");
        }
    }

    /// A group pass lasts until its last thread is done, the threads start it together, and
    /// the figure is the quickest pass. Passes 0 to 3: one thread or the other is slow (never
    /// both), which a figure built from each thread's own quickest pass (the rule before
    /// 2026-11-29) would report as a fast pass; pass 4: both are slow for four times as long,
    /// which the quickest pass must leave out. In the second case both threads are slow in
    /// every pass: a group that did not start them together would take two slow stretches.
    #[test]
    fn a_group_pass_lasts_until_its_last_thread_is_done() {
        let slow = Duration::from_millis(30);
        let slow_ns = slow.as_nanos() as f64;
        let ns = group_pass_ns(2, 5, move |i| {
            let mut pass = 0usize;
            move || {
                // Thread 0 is slow in even passes, thread 1 in odd ones; both in the last.
                if pass == 4 {
                    std::thread::sleep(4 * slow);
                } else if pass % 2 == i {
                    std::thread::sleep(slow);
                }
                pass += 1;
            }
        });
        assert!(
            ns >= slow_ns && ns < 2.0 * slow_ns,
            "the quickest group pass took {ns} ns: not one slow thread's {slow:?}"
        );
        let together = group_pass_ns(2, 3, move |_| move || std::thread::sleep(slow));
        assert!(
            together >= slow_ns && together < 1.5 * slow_ns,
            "two threads sleeping {slow:?} at once took {together} ns a pass"
        );
        // A panic in one thread's work gives no figure, and does not hang the other.
        let panicked = group_pass_ns(2, 3, move |i| {
            move || {
                assert!(i == 0, "thread 1 fails");
            }
        });
        assert_eq!(panicked, f64::INFINITY);
    }

    /// One core's clearing bandwidth is what the core clears while it runs: a busy thread
    /// sharing its CPU (which takes about half of it) does not lower the figure. Passes of
    /// 128 MiB, several milliseconds each, so that every one of them spans the host's slices.
    #[test]
    fn one_core_clearing_bandwidth_is_not_lowered_by_a_thread_sharing_its_cpu() {
        let alone = clear_bandwidth_gbs(1, 128 << 20);
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let hog = std::thread::spawn(move || {
            pin_to_core(0);
            let mut x = 1u64;
            while !s2.load(Ordering::Relaxed) {
                x = black_box(x.wrapping_mul(x | 1));
            }
        });
        let shared = clear_bandwidth_gbs(1, 128 << 20);
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        assert!(
            shared > 0.75 * alone,
            "{shared:.1} GB/s beside a busy thread, {alone:.1} GB/s alone"
        );
    }

    /// A task sharing its CPU with another busy thread is measured running at most about half
    /// the time (more of it to the other thread or to the host's other work), the two
    /// together never above the one CPU they share, and its waits as long as slices.
    #[test]
    fn a_cpu_shared_with_a_busy_thread_gives_the_task_part_of_it() {
        let window = Duration::from_millis(300);
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let hog = std::thread::spawn(move || {
            pin_to_core(0);
            let (c0, t0) = (thread_cpu_ns(), Instant::now());
            let mut x = 1u64;
            while !s2.load(Ordering::Relaxed) {
                x = black_box(x.wrapping_mul(x | 1));
            }
            (thread_cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64
        });
        std::thread::sleep(Duration::from_millis(20));
        let (shared, off) = cpu_share(1, window);
        stop.store(true, Ordering::Relaxed);
        let hog_share = hog.join().unwrap();
        assert!(shared > 0.0 && shared <= 0.75, "shared {shared}");
        assert!(shared + hog_share <= 1.1, "{shared} + {hog_share}");
        assert!(off >= DESCHEDULED.as_nanos() as f64, "waits of {off} ns");
    }
}
