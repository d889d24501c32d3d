//! The engine's compute per operation of several profiles, timed side by side
//! ([`pagelab_project::capture::pace`]), round after round: what the host's drift does to each
//! profile's time, and what it leaves of their ratios (issue 13).
//!
//! `cargo run --release -p pagelab-project --example pace -- WORKLOAD TURNS PROFILE...` prints
//! each round's compute per operation of every profile (ns), each profile's ratio to the
//! round's geometric mean, and the medians [`Paced::relative`] keeps.

use pagelab_project::capture::pace::{self, Paced};
use pagelab_workloads::WorkloadKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [w, turns, names @ ..] = args.as_slice() else {
        return Err("usage: pace WORKLOAD TURNS PROFILE...".into());
    };
    let w: WorkloadKind = w.parse().map_err(|e| format!("{e}"))?;
    let turns: usize = turns.parse()?;
    let profiles = names
        .iter()
        .map(|n| pagelab_bench::profiles::load(n))
        .collect::<Result<Vec<_>, _>>()?;
    let t0 = std::time::Instant::now();
    let paced: Paced = pace::pace(w, &profiles, 44, 64 << 20, turns)?;
    println!("paced in {:.1} s", t0.elapsed().as_secs_f64());
    let rounds = paced.compute_ns.iter().map(Vec::len).min().unwrap_or(0);
    for r in 0..rounds {
        let row: Vec<f64> = paced.compute_ns.iter().map(|t| t[r]).collect();
        let gm = (row.iter().map(|t| t.ln()).sum::<f64>() / row.len() as f64).exp();
        let cells: Vec<String> = row
            .iter()
            .map(|t| format!("{t:7.1} ({:.3})", t / gm))
            .collect();
        println!("round {r}: {}", cells.join("  "));
    }
    if let Some(rel) = paced.relative() {
        for (n, r) in names.iter().zip(rel) {
            println!("{n}: {r:.4} of the geometric mean");
        }
    }
    Ok(())
}
