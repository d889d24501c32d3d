//! Diagnosing netpipe's spread: the two profiles of `netpipe-hopcpu-2016` side by side, in
//! turn, each on a fresh engine, printing per kept sample the rate, the pair's waits per 1000
//! messages (ring full, ring empty, yields of each side), the ring's mean fill, the rate by the
//! thread's own run time (`est`; 0 for the first window, which has no baseline), each thread's
//! run time, runqueue wait and times scheduled from its schedstat, the window's wall time and
//! each vCPU's steal time from `/proc/stat` (10 ms ticks); per run, how the host disturbed the samples
//! ([`pagelab_workloads::netpipe::HostSampling`]: retakes, link probes) and the arena's huge
//! pages; per size and profile, the spread of the samples within a round against that of the
//! rounds' means, and the first kept sample against the others.
//!
//! ```sh
//! cargo run --release -p pagelab-workloads --example netpipe_diag -- ROUNDS INTERVAL_MS SAMPLES WARMUP SIZE[,SIZE..]
//! ```
//!
//! With `RELEASE1` set in the environment the receiver gives each slot back as it reads it (the
//! ring's behaviour before it modelled `udp_rmem_release`), for side-by-side comparisons.
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_mm::Policy;
use pagelab_workloads::engine;
use pagelab_workloads::netpipe::{Netpipe, NetpipeParams, PairWaits};
use pagelab_workloads::runner::{Hooks, SampleSpec};

/// (run ns, runqueue wait ns, times run on a CPU) of every thread but the main one.
fn sched() -> Vec<(u64, u64, u64)> {
    let me = std::process::id().to_string();
    let mut v = Vec::new();
    let mut ents: Vec<_> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .collect();
    ents.sort_by_key(|e| e.file_name());
    for e in ents {
        if e.file_name().to_string_lossy() == me {
            continue;
        }
        if let Ok(t) = std::fs::read_to_string(e.path().join("schedstat")) {
            let f: Vec<u64> = t.split_whitespace().map(|x| x.parse().unwrap()).collect();
            v.push((f[0], f[1], f[2]));
        }
    }
    v
}

/// Steal time (ms) of every CPU, from /proc/stat (USER_HZ ticks of 10 ms).
fn steal_ms() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .nth(8)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                * 10
        })
        .collect()
}

/// Mean and sample standard deviation.
fn mean_sd(s: &[f64]) -> (f64, f64) {
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rounds: usize = a[1].parse().unwrap();
    let ms: u64 = a[2].parse().unwrap();
    let samples: usize = a[3].parse().unwrap();
    let warmup: usize = a[4].parse().unwrap();
    let sizes: Vec<usize> = a[5].split(',').map(|s| s.parse().unwrap()).collect();
    let profs = [
        (
            "vanilla",
            include_str!("../../../profiles/vanilla-4.9.toml"),
        ),
        ("hopcpu", include_str!("../../../profiles/hopcpu.toml")),
    ];
    let spec = SampleSpec {
        samples,
        warmup,
        interval: Duration::from_millis(ms),
    };
    let stop = AtomicBool::new(false);
    pagelab_sync::stats::set_enabled(true);
    for &size in &sizes {
        // Per profile, per round: the kept samples.
        let mut all: Vec<Vec<Vec<f64>>> = vec![Vec::new(), Vec::new()];
        for r in 0..rounds {
            for (pi, (name, text)) in profs.iter().enumerate() {
                let pol = Policy::from_toml_str(text).unwrap();
                let k = engine::boot(&pol, 16 << 20, 2).unwrap();
                let mut params = NetpipeParams::new(1, size);
                if std::env::var("RELEASE1").is_ok() {
                    params.ring_depth = Some(params.depth());
                }
                let np = Netpipe::new(&k, &params).unwrap();
                let depth = np.params().depth();
                let mut last = PairWaits::default();
                let mut lines = Vec::new();
                let mut sent_last = 0u64;
                let mut sch_last: Vec<(u64, u64, u64)> = Vec::new();
                let mut wall_last = std::time::Instant::now();
                let mut steal_last = steal_ms();
                let (c, host) = np
                    .run_sampled(
                        spec,
                        &stop,
                        Hooks {
                            measure_start: &mut || {},
                            sample: &mut |_, _, kept| {
                                let w = np.waits();
                                let d = PairWaits {
                                    full: w.full - last.full,
                                    tx_yields: w.tx_yields - last.tx_yields,
                                    empty: w.empty - last.empty,
                                    rx_yields: w.rx_yields - last.rx_yields,
                                    fill_sum: w.fill_sum - last.fill_sum,
                                    fill_n: w.fill_n - last.fill_n,
                                };
                                let sent = np.totals()[0].sent;
                                let sent_n = sent - sent_last;
                                let m = sent_n.max(1) as f64 / 1000.0;
                                sent_last = sent;
                                last = w;
                                let sch = sched();
                                let st: Vec<String> = sch
                                    .iter()
                                    .enumerate()
                                    .map(|(i, &(r, wt, n))| {
                                        let (r0, w0, n0) = sch_last.get(i).copied().unwrap_or((r, wt, n));
                                        format!("{:.0}/{:.0}/{}", (r - r0) as f64 / 1e6, (wt - w0) as f64 / 1e6, n - n0)
                                    })
                                    .collect();
                                // Messages per second of the pair thread's run time, as a
                                // check of the sampler's rate (0 with no earlier reading).
                                let est = sch
                                    .first()
                                    .zip(sch_last.first())
                                    .map_or(0.0, |(a, b)| sent_n as f64 * 1e9 / (a.0 - b.0).max(1) as f64);
                                sch_last = sch;
                                let wall = wall_last.elapsed().as_secs_f64() * 1e3;
                                wall_last = std::time::Instant::now();
                                let steal = steal_ms();
                                let ds: Vec<String> = steal
                                    .iter()
                                    .zip(&steal_last)
                                    .map(|(a, b)| (a - b).to_string())
                                    .collect();
                                steal_last = steal;
                                lines.push(format!(
                                    "{}{:>6.0}k full {:>5.1} empty {:>5.1} txy {:>6.1} rxy {:>6.1} fill {:>5.1}/{depth} est {:>6.0}k run/wait ms/runs {} wall {:.0} steal {}",
                                    if kept.is_some() { " " } else { "w" },
                                    kept.unwrap_or(0.0) / 1000.0,
                                    d.full as f64 / m,
                                    d.empty as f64 / m,
                                    d.tx_yields as f64 / m,
                                    d.rx_yields as f64 / m,
                                    d.fill_sum as f64 / d.fill_n.max(1) as f64,
                                    est / 1000.0,
                                    st.join(" "),
                                    wall,
                                    ds.join("/"),
                                ));
                            },
                        },
                    )
                    .unwrap();
                let thp = std::fs::read_to_string("/proc/self/smaps_rollup")
                    .unwrap_or_default()
                    .lines()
                    .find(|l| l.starts_with("AnonHugePages"))
                    .unwrap_or("")
                    .to_string();
                println!("send-{size} r{r} {name} {host:?} {thp}");
                for l in lines {
                    println!("    {l}");
                }
                all[pi].push(c.samples.clone());
                np.quiesce().unwrap();
            }
        }
        for (pi, (name, _)) in profs.iter().enumerate() {
            let rounds = &all[pi];
            let s: Vec<f64> = rounds.iter().flatten().copied().collect();
            let (mean, sd) = mean_sd(&s);
            let hmean = s.len() as f64 / s.iter().map(|v| 1.0 / v).sum::<f64>();
            // Within a round (pooled) against between the rounds' means.
            let within: f64 = rounds
                .iter()
                .map(|r| {
                    let (m, _) = mean_sd(r);
                    r.iter().map(|v| (v - m).powi(2)).sum::<f64>()
                })
                .sum::<f64>()
                / (s.len() - rounds.len()).max(1) as f64;
            let means: Vec<f64> = rounds.iter().map(|r| mean_sd(r).0).collect();
            let firsts: Vec<f64> = rounds.iter().filter_map(|r| r.first().copied()).collect();
            let rest: Vec<f64> = rounds
                .iter()
                .flat_map(|r| r.iter().skip(1).copied())
                .collect();
            println!(
                "SUMMARY send-{size} {name:8} hmean {:>8.0}k cv {:>5.1}% within-round sd {:>4.1}% round-means sd {:>4.1}% first kept {:+.1}% vs the rest",
                hmean / 1000.0,
                100.0 * sd / mean,
                100.0 * within.sqrt() / mean,
                100.0 * mean_sd(&means).1 / mean,
                100.0 * (mean_sd(&firsts).0 / mean_sd(&rest).0 - 1.0),
            );
        }
    }
}
