//! Diagnosing netpipe's spread: the two profiles of `netpipe-hopcpu-2016` side by side, in
//! turn, each on a fresh engine, printing per kept sample the rate, the pair's waits per 1000
//! messages (ring full, ring empty, yields of each side), the ring's mean fill, and each
//! thread's run time and runqueue wait from its schedstat; per run, how the host disturbed the
//! samples ([`pagelab_workloads::netpipe::HostSampling`]: retakes, link probes) and the
//! arena's huge pages.
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

/// (run ns, runqueue wait ns) of every thread but the main one.
fn sched() -> Vec<(u64, u64)> {
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
            v.push((f[0], f[1]));
        }
    }
    v
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
        let mut all: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
        for r in 0..rounds {
            for (pi, (name, text)) in profs.iter().enumerate() {
                let pol = Policy::from_toml_str(text).unwrap();
                let k = engine::boot(&pol, 64 << 20, 2).unwrap();
                let mut params = NetpipeParams::new(1, size);
                if std::env::var("RELEASE1").is_ok() {
                    params.ring_depth = Some(params.depth());
                }
                let np = Netpipe::new(&k, &params).unwrap();
                let depth = np.params().depth();
                let mut last = PairWaits::default();
                let mut lines = Vec::new();
                let mut sent_last = 0u64;
                let mut sch_last: Vec<(u64, u64)> = Vec::new();
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
                                let m = (sent - sent_last).max(1) as f64 / 1000.0;
                                sent_last = sent;
                                last = w;
                                let sch = sched();
                                let st: Vec<String> = sch
                                    .iter()
                                    .enumerate()
                                    .map(|(i, &(r, wt))| {
                                        let (r0, w0) = sch_last.get(i).copied().unwrap_or((r, wt));
                                        format!("{:.0}/{:.0}", (r - r0) as f64 / 1e6, (wt - w0) as f64 / 1e6)
                                    })
                                    .collect();
                                sch_last = sch;
                                lines.push(format!(
                                    "{}{:>6.0}k full {:>5.1} empty {:>5.1} txy {:>6.1} rxy {:>6.1} fill {:>5.1}/{depth} run/wait ms {}",
                                    if kept.is_some() { " " } else { "w" },
                                    kept.unwrap_or(0.0) / 1000.0,
                                    d.full as f64 / m,
                                    d.empty as f64 / m,
                                    d.tx_yields as f64 / m,
                                    d.rx_yields as f64 / m,
                                    d.fill_sum as f64 / d.fill_n.max(1) as f64,
                                    st.join(" "),
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
                all[pi].extend(&c.samples);
                np.quiesce().unwrap();
            }
        }
        for (pi, (name, _)) in profs.iter().enumerate() {
            let s = &all[pi];
            let n = s.len() as f64;
            let mean = s.iter().sum::<f64>() / n;
            let hmean = n / s.iter().map(|v| 1.0 / v).sum::<f64>();
            let sd = (s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            println!(
                "SUMMARY send-{size} {name:8} hmean {:>8.0}k cv {:>5.1}%",
                hmean / 1000.0,
                100.0 * sd / mean
            );
        }
    }
}
