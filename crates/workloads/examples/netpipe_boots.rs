//! Is netpipe's spread between repeats a property of the engine a repeat boots, or of the
//! time it runs at? Boots `ENGINES` engines of one profile side by side (all alive at once) and
//! measures them in turn, one window each, for `ROUNDS` rounds: an engine that is slow in
//! every round, next to engines measured a moment before and after it that are not, is slow
//! by what its boot gave it (where its structures landed in memory), not by the host.
//!
//! ```sh
//! cargo run --release -p pagelab-workloads --example netpipe_boots -- PROFILE SIZE ENGINES ROUNDS INTERVAL_MS
//! ```
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pagelab_mm::Policy;
use pagelab_workloads::engine;
use pagelab_workloads::netpipe::{Netpipe, NetpipeParams};
use pagelab_workloads::runner::{Hooks, SampleSpec};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let text = match a[1].as_str() {
        "vanilla-4.9" => include_str!("../../../profiles/vanilla-4.9.toml"),
        "hopcpu" => include_str!("../../../profiles/hopcpu.toml"),
        p => panic!("unknown profile {p}"),
    };
    let size: usize = a[2].parse().unwrap();
    let engines: usize = a[3].parse().unwrap();
    let rounds: usize = a[4].parse().unwrap();
    let ms: u64 = a[5].parse().unwrap();
    let pol = Policy::from_toml_str(text).unwrap();
    pagelab_sync::stats::set_enabled(true);
    let nps: Vec<Netpipe> = (0..engines)
        .map(|_| {
            let k = engine::boot(&pol, 16 << 20, 2).unwrap();
            Netpipe::new(&k, &NetpipeParams::new(1, size)).unwrap()
        })
        .collect();
    let stop = AtomicBool::new(false);
    let spec = SampleSpec {
        samples: 1,
        warmup: 1,
        interval: Duration::from_millis(ms),
    };
    let mut rates = vec![Vec::new(); engines];
    for r in 0..rounds {
        let mut line = format!("round {r}:");
        for (e, np) in nps.iter().enumerate() {
            let c = np
                .run(
                    spec,
                    &stop,
                    Hooks {
                        measure_start: &mut || {},
                        sample: &mut |_, _, _| {},
                    },
                )
                .unwrap();
            let v = c.samples[0];
            rates[e].push(v);
            line += &format!(" e{e} {:>6.0}k", v / 1000.0);
        }
        println!("{line}");
    }
    let all: Vec<f64> = rates.iter().flatten().copied().collect();
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    let means: Vec<f64> = rates
        .iter()
        .map(|r| r.iter().sum::<f64>() / r.len() as f64)
        .collect();
    for (e, m) in means.iter().enumerate() {
        println!(
            "engine {e}: mean {:+.1}% against all engines",
            100.0 * (m / mean - 1.0)
        );
    }
    // One-way analysis of variance: the spread of the engines' means against what the spread
    // within each engine (across rounds) alone would give them.
    let within = rates
        .iter()
        .zip(&means)
        .map(|(r, m)| r.iter().map(|v| (v - m).powi(2)).sum::<f64>())
        .sum::<f64>()
        / (all.len() - engines) as f64;
    let between = means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (engines - 1) as f64;
    println!(
        "within an engine sd {:.1}%; engines' means sd {:.1}%, expected from within alone {:.1}%; F = {:.2} ({} and {} degrees of freedom)",
        100.0 * within.sqrt() / mean,
        100.0 * between.sqrt() / mean,
        100.0 * (within / rounds as f64).sqrt() / mean,
        between * rounds as f64 / within,
        engines - 1,
        all.len() - engines,
    );
}
