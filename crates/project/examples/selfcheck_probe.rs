//! What the self-check replays, opened up: measures this host as `pagelab validate
//! --self-check-only` does (calibrate's engine costs), captures WORKLOAD with linux-6.7 as it
//! does, saves both (`OUT.toml`, `OUT.pltrace`), then replays threads mode at 1 and 2 tasks
//! with every task owning its CPU (share 1) and prints the rate, the faults per CPU-second and
//! each lock or line class's acquisitions, waits and holds: what to set beside the engine's
//! lock statistics for the same run (`pagelab run pft --mode threads --tasks 1,2 --lock-stat`).
//!
//! `cargo run --release -p pagelab-project --example selfcheck_probe -- WORKLOAD OUT`
//! (WORKLOAD: pft or page_fault1). Replay a saved pair again with the `replay_speed` example.
//!
//! Other modes: `transfer N` (the transfer between the first two CPUs, N times 0.5 s apart);
//! `bandwidth N` (one core's and both cores' clearing over 64 MiB each and the transfer, N
//! times; a pass that small may stay in a large last-level cache); `clear-order MIB N` (one
//! core clearing MIB MiB in address and in shuffled order, and with `CLEAR_GAP=K` with K
//! iterations of register-only work between pages: docs/model-history.md, round 43);
//! `replay TRACE MACHINE TASKS SHARE WAIT_MS OPS SEEDS`.

use std::path::Path;

use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_workloads::WorkloadKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, trace, machine, tasks, share, wait_ms, ops, seeds] = args.as_slice()
        && cmd == "replay"
    {
        return replay(trace, machine, tasks, share, wait_ms, ops, seeds);
    }
    if let [cmd, n] = args.as_slice()
        && cmd == "transfer"
    {
        // The transfer between the first two CPUs, measured N times 0.5 s apart: whether
        // it moves while the host runs (the hypervisor placing the two vCPUs).
        for i in 0..n.parse::<usize>()? {
            let t = std::time::Instant::now();
            let ns = pagelab_project::calibrate::core_transfer_ns();
            println!(
                "{i}: {ns:.1} ns ({:.0} ms)",
                t.elapsed().as_secs_f64() * 1e3
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        return Ok(());
    }
    if let [cmd, n] = args.as_slice()
        && cmd == "bandwidth"
    {
        // One core's and both cores' clearing bandwidth and the transfer, N times 0.5 s
        // apart: whether they move together.
        for i in 0..n.parse::<usize>()? {
            let one = pagelab_project::calibrate::clear_bandwidth_gbs(1, 64 << 20);
            let two = pagelab_project::calibrate::clear_bandwidth_gbs(2, 64 << 20);
            let ns = pagelab_project::calibrate::core_transfer_ns();
            println!("{i}: one core {one:.1} GB/s, two {two:.1} GB/s, transfer {ns:.1} ns");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        return Ok(());
    }
    if let [cmd, mib, n] = args.as_slice()
        && cmd == "clear-order"
    {
        return clear_order(mib, n);
    }
    let [workload, out] = args.as_slice() else {
        return Err("usage: selfcheck_probe WORKLOAD OUT".into());
    };
    let w: WorkloadKind = workload
        .parse()
        .map_err(|e| format!("workload `{workload}`: {e}"))?;
    let (host, _) = pagelab_project::calibrate::measure_host_for_engine("this-host", &mut |p| {
        eprintln!("{p}")
    })?;
    let m = host.as_engine();
    std::fs::write(format!("{out}.toml"), m.to_toml())?;
    let profile = pagelab_bench::profiles::load("linux-6.7")?;
    let trace = capture(&CaptureSpec::new(w, profile, m.nr_cpus()))?;
    trace.save(Path::new(&format!("{out}.pltrace")))?;
    for tasks in [1, 2] {
        let spec = ReplaySpec {
            tasks,
            threads: true,
            seed: 1,
            samples: 3,
            ops_per_cpu: Some(8192),
        };
        let r = Replay::new(&m, &trace, spec)?.run(1)?;
        println!(
            "{tasks} tasks: {:.0} ops/s, {:.0} ops per CPU-second, {} ops in {:.3} ms",
            r.samples.iter().sum::<f64>() / r.samples.len().max(1) as f64,
            r.ops_per_cpu_sec.unwrap_or(f64::NAN),
            r.ops,
            r.span_ns / 1e6
        );
        for k in &r.classes {
            println!(
                "   {:<24} {:>9} acq {:>8} contended {:>8} fallbacks {:>9.1} ns waited per op {:>8.1} ns per hold {:>7.3} of the span held",
                k.name,
                k.acquisitions,
                k.contended,
                k.fallbacks,
                k.wait_ns / r.ops.max(1) as f64,
                k.hold_ns / k.holds.max(1) as f64,
                k.hold_ns / r.span_ns.max(1e-9)
            );
        }
    }
    Ok(())
}

/// `replay TRACE MACHINE TASKS SHARE WAIT_MS OPS_PER_CPU SEEDS`: threads mode at TASKS with each
/// task run SHARE of the time (in turns with a mean wait of WAIT_MS, or uniformly when 0), for
/// OPS_PER_CPU operations each, over SEEDS seeds: each seed's faults per second and per
/// CPU-second, and their means.
fn replay(
    trace: &str,
    machine: &str,
    tasks: &str,
    share: &str,
    wait_ms: &str,
    ops: &str,
    seeds: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let trace = pagelab_project::trace::Trace::load(Path::new(trace))?;
    let mut m = pagelab_project::machine::Machine::load(machine)?;
    let tasks: usize = tasks.parse()?;
    m.cpu.share = vec![[tasks as f64, share.parse()?, wait_ms.parse::<f64>()? * 1e6]];
    let spec = ReplaySpec {
        tasks,
        threads: true,
        seed: 1,
        samples: 1,
        ops_per_cpu: Some(ops.parse()?),
    };
    let r = Replay::new(&m, &trace, spec)?;
    let (mut sec, mut cpu) = (Vec::new(), Vec::new());
    for seed in 0..seeds.parse::<u64>()? {
        let o = r.run(seed)?;
        sec.push(o.samples[0]);
        cpu.push(o.ops_per_cpu_sec.unwrap_or(f64::NAN));
        println!(
            "seed {seed}: {:.0} faults/sec {:.0} faults/cpu ({:.1} ms simulated)",
            o.samples[0],
            o.ops_per_cpu_sec.unwrap_or(f64::NAN),
            o.span_ns / 1e6
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "mean: {:.0} faults/sec {:.0} faults/cpu",
        mean(&sec),
        mean(&cpu)
    );
    Ok(())
}

/// One core (pinned to the first allowed CPU) clearing an arena of `mib` MiB page by page with
/// the engine's `clear_page`, in address order and in a shuffled order, `n` passes each (which
/// goes first alternates, so that neither always finds the other's last pages in the cache),
/// in the thread's CPU time. With `CLEAR_GAP=K`, also in address order with K iterations of
/// register-only work after each page, that work timed alone and taken out.
fn clear_order(mib: &str, n: &str) -> Result<(), Box<dyn std::error::Error>> {
    use pagelab_mm::arena::{Arena, ArenaConfig};
    use pagelab_workloads::pft::thread_cpu_ns;
    let mib: u64 = match mib.parse() {
        Ok(m @ 1..=65536) => m,
        _ => return Err(format!("MIB: `{mib}` is not a whole number from 1 to 65536").into()),
    };
    let n: usize = n
        .parse()
        .map_err(|_| format!("N: `{n}` is not a whole number"))?;
    let gap: u64 = match std::env::var("CLEAR_GAP") {
        Err(_) => 0,
        Ok(g) => g
            .parse()
            .map_err(|_| format!("CLEAR_GAP: `{g}` is not a whole number"))?,
    };
    pagelab_workloads::pin::pin_to_core(0);
    let arena = Arena::new(
        ArenaConfig {
            prefault: true,
            ..ArenaConfig::new(mib << 20)
        },
        0,
    )?;
    let pages = arena.nr_pages();
    let seq: Vec<u32> = (0..pages as u32).collect();
    let mut shuffled = seq.clone();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..shuffled.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        shuffled.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let spin = |k: u64| {
        let mut x = 1u64;
        for i in 0..k {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        x
    };
    // ns a page of one pass over `order`, with `k` iterations of work after each page.
    let pass = |order: &[u32], k: u64| {
        let c = thread_cpu_ns();
        for &p in order {
            arena.zero_page(pagelab_mm::Pfn(p));
            if k > 0 {
                std::hint::black_box(spin(k));
            }
        }
        (thread_cpu_ns() - c) as f64 / pages as f64
    };
    let gbs = |ns: f64| 4096.0 / ns;
    for i in 0..n {
        let (a, b) = if i % 2 == 0 {
            let a = pass(&seq, 0);
            (a, pass(&shuffled, 0))
        } else {
            let b = pass(&shuffled, 0);
            (pass(&seq, 0), b)
        };
        println!(
            "{i}: in order {a:.0} ns a page ({:.1} GB/s), shuffled {b:.0} ns ({:.1} GB/s)",
            gbs(a),
            gbs(b)
        );
        if gap > 0 {
            let both = pass(&seq, gap);
            let c = thread_cpu_ns();
            for _ in &seq {
                std::hint::black_box(spin(gap));
            }
            let work = (thread_cpu_ns() - c) as f64 / pages as f64;
            let per = both - work;
            if per > 0.0 {
                println!(
                    "{i}: with {work:.0} ns of work between pages: {per:.0} ns a page ({:.1} GB/s)",
                    gbs(per)
                );
            } else {
                println!(
                    "{i}: with {work:.0} ns of work between pages: {both:.0} ns a page in all, the clears lost in the noise"
                );
            }
        }
    }
    Ok(())
}
