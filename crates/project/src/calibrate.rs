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
//! | `memory.core_bandwidth_gbs` | one thread clears a 256 MiB buffer already faulted in |
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

use pagelab_workloads::host::HostVm;
use pagelab_workloads::pin::{allowed_cpus, pin_to_core};
use pagelab_workloads::vm::Vm;

use crate::machine::{Cpu, KernelCosts, Latency, Machine, Memory, Numa, Topology};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The core clock, GHz: a dependent `or`/`imul` chain runs at 4 cycles per step.
pub fn clock_ghz() -> f64 {
    const STEPS: u64 = 4_000_000;
    median(
        (0..5)
            .map(|_| {
                let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
                let t = Instant::now();
                for _ in 0..STEPS {
                    x = x.wrapping_mul(x | 1);
                }
                black_box(x);
                (4 * STEPS) as f64 / t.elapsed().as_nanos() as f64
            })
            .collect(),
    )
}

/// Half the round trip of a counter passed between threads on the first two allowed CPUs.
pub fn core_transfer_ns() -> f64 {
    const ROUNDS: u64 = 200_000;
    let line = Arc::new(AtomicU64::new(0));
    median(
        (0..5)
            .map(|_| {
                line.store(0, Ordering::SeqCst);
                let l2 = line.clone();
                let peer = std::thread::spawn(move || {
                    pin_to_core(1);
                    for i in 0..ROUNDS {
                        while l2.load(Ordering::Acquire) != 2 * i + 1 {
                            std::hint::spin_loop();
                        }
                        l2.store(2 * i + 2, Ordering::Release);
                    }
                });
                pin_to_core(0);
                let t = Instant::now();
                for i in 0..ROUNDS {
                    line.store(2 * i + 1, Ordering::Release);
                    while line.load(Ordering::Acquire) != 2 * i + 2 {
                        std::hint::spin_loop();
                    }
                }
                let ns = t.elapsed().as_nanos() as f64;
                peer.join().expect("peer thread");
                ns / ROUNDS as f64 / 2.0
            })
            .collect(),
    )
}

/// One `lock xadd` on a line this core owns.
pub fn atomic_ns() -> f64 {
    const N: u64 = 5_000_000;
    let a = AtomicU64::new(0);
    median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..N {
                    a.fetch_add(1, Ordering::SeqCst);
                }
                black_box(a.load(Ordering::Relaxed));
                t.elapsed().as_nanos() as f64 / N as f64
            })
            .collect(),
    )
}

/// Clearing bandwidth, GB/s, of `threads` threads clearing `bytes` each at once.
pub fn clear_bandwidth_gbs(threads: usize, bytes: usize) -> f64 {
    let best: Vec<f64> = (0..3)
        .map(|_| {
            let start = Arc::new(std::sync::Barrier::new(threads + 1));
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let start = start.clone();
                    std::thread::spawn(move || {
                        pin_to_core(i);
                        let mut buf = vec![1u8; bytes];
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..3 {
                            black_box(&mut buf).fill(0);
                        }
                        let ns = t.elapsed().as_nanos() as f64;
                        black_box(&buf);
                        ns
                    })
                })
                .collect();
            start.wait();
            let worst = handles
                .into_iter()
                .map(|h| h.join().expect("clearing thread"))
                .fold(0.0f64, f64::max);
            (3 * threads * bytes) as f64 / worst
        })
        .collect();
    best.into_iter().fold(0.0, f64::max)
}

/// Half the round trip of two threads on two cores waking each other.
pub fn wakeup_ns() -> f64 {
    const ROUNDS: u64 = 20_000;
    median(
        (0..3)
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
            .collect(),
    )
}

/// `(sender ns per shootdown, handler ns per IPI)`: map-touch-unmap of one page alone, then
/// with a second thread of the same address space storing on another core.
pub fn shootdown_ns() -> Result<(f64, f64), String> {
    const ROUNDS: u32 = 20_000;
    let err = |e: pagelab_workloads::WorkloadError| format!("calibrate: {e}");
    let vms = HostVm::threads(2);
    let mut it = vms.into_iter();
    let (a, b) = (it.next().expect("two"), it.next().expect("two"));
    let unmap_loop = |vm: &HostVm| -> Result<f64, String> {
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
        (0..3)
            .map(|_| unmap_loop(&a))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let (stop, progress) = (&stop, &progress);
    let (with, lost_per_ipi) = std::thread::scope(|s| -> Result<(f64, f64), String> {
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
            (0..3)
                .map(|_| unmap_loop(&a))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let busy_ns = t.elapsed().as_nanos() as f64;
        stop.store(true, Ordering::Relaxed);
        let (quiet_rate, n_during) = h.join().map_err(|_| "calibrate: peer panicked")?;
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
pub fn trap_ns(profile: &pagelab_bench::profiles::Profile) -> Result<f64, String> {
    use pagelab_workloads::page_fault::{Variant, task_loop};
    let bytes: u64 = 64 << 20;
    let per_fault = |vm: &dyn Fn(&AtomicU64, &AtomicBool) -> Result<(), String>| {
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
        Ok::<f64, String>(t.elapsed().as_nanos() as f64 / counter.load(Ordering::Relaxed) as f64)
    };
    pin_to_core(0);
    let host = HostVm::new();
    let host_ns = median(
        (0..3)
            .map(|_| {
                per_fault(&|c, s| {
                    task_loop(&host, Variant::Anon, bytes, c, s).map_err(|e| e.to_string())
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    let arena = bytes * 2 + (64 << 20);
    let k = pagelab_workloads::engine::boot(&profile.policy, arena, 1)
        .map_err(|e| format!("calibrate: {e}"))?;
    let (_run, vms) =
        pagelab_workloads::engine::tasks(&k, 1, pagelab_workloads::Mode::Threads, false)
            .map_err(|e| format!("calibrate: {e}"))?;
    let engine_ns = median(
        (0..3)
            .map(|_| {
                per_fault(&|c, s| {
                    task_loop(&vms[0], Variant::Anon, bytes, c, s).map_err(|e| e.to_string())
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    Ok((host_ns - engine_ns).max(0.0))
}

/// Measures this host (about half a minute) and describes it as a machine named `name`.
pub fn measure_host(name: &str, progress: &mut dyn FnMut(&str)) -> Result<Machine, String> {
    let cpus = allowed_cpus().len();
    if cpus < 2 {
        return Err(
            "calibrate needs at least two CPUs to measure cache-line transfers (this process may use one)"
                .into(),
        );
    }
    let host = pagelab_bench::host::HostInfo::detect();
    let sockets = host.sockets.unwrap_or(1).max(1);
    let cores = host.cores.unwrap_or(cpus).max(1);
    let threads_per_core = if host.cpus >= 2 * cores { 2 } else { 1 };
    progress("core clock");
    let ghz = clock_ghz();
    progress("cache-line transfer between two cores");
    let core_ns = core_transfer_ns();
    progress("uncontended atomic");
    let atomic = atomic_ns();
    progress("clearing bandwidth, one core and all cores");
    let core_bw = clear_bandwidth_gbs(1, 256 << 20);
    // Every allowed CPU clears at once (a few GiB in all, whatever the CPU count); the sum is
    // shared by the nodes.
    let per_thread = ((4usize << 30) / cpus).clamp(8 << 20, 128 << 20);
    let nodes = sockets;
    let node_bw = (clear_bandwidth_gbs(cpus, per_thread) / nodes as f64).max(core_bw);
    progress("wake-up latency");
    let wakeup = wakeup_ns();
    progress("TLB shootdown");
    let (ipi, handler) = shootdown_ns()?;
    progress("page-fault cost beyond the engine (host page_fault1 against the engine's)");
    let profile = pagelab_bench::profiles::load("linux-6.7")?;
    let trap = trap_ns(&profile)?;
    let m = Machine {
        name: name.to_string(),
        description: format!(
            "{} ({} CPUs), measured by pagelab calibrate on {}",
            host.cpu_model, host.cpus, host.kernel
        ),
        cpu: Cpu {
            model: host.cpu_model.clone(),
            ghz: round(ghz, 3),
            smt_throughput: 1.0,
        },
        topology: Topology {
            sockets,
            cores_per_socket: (cores / sockets).max(1),
            threads_per_core,
            nodes_per_socket: 1,
        },
        numa: Numa {
            distance: (0..nodes)
                .map(|a| (0..nodes).map(|b| if a == b { 10 } else { 21 }).collect())
                .collect(),
        },
        latency: Latency {
            // Not measurable without SMT: the transfer inside one core's caches is taken as
            // a fifth of the one between cores.
            smt_ns: round(core_ns / 5.0, 1),
            core_ns: round(core_ns, 1),
            remote_ns: if nodes > 1 {
                [("21".to_string(), round(core_ns * 2.0, 1))].into()
            } else {
                Default::default()
            },
            atomic_ns: round(atomic, 2),
        },
        memory: Memory {
            node_bandwidth_gbs: round(node_bw, 2),
            core_bandwidth_gbs: round(core_bw, 2),
            loaded_latency: Vec::new(),
        },
        kernel: KernelCosts {
            trap_ns: round(trap, 0),
            wakeup_ns: round(wakeup, 0),
            ipi_ns: round(ipi, 0),
            ipi_handler_ns: round(handler, 0),
        },
    };
    Machine::parse(&m.to_toml(), "calibrated").map_err(|e| format!("calibrate: {e}"))
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_plausible() {
        let g = clock_ghz();
        // Any core from 2005 to 2030, under emulation or not.
        assert!((0.2..10.0).contains(&g), "{g} GHz");
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
}
