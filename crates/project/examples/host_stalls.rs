//! What the host takes from a thread that never gives up its CPU: a loop that only reads the
//! time-stamp counter, as a capture's recording does between events, records every gap of a
//! microsecond or more. Any such gap is the host's (an interrupt, a VM exit, a steal), since
//! the loop itself takes nanoseconds. It prints the gaps by length, and for the long ones
//! where they fall modulo 4 ms and 10 ms: a periodic source (a timer tick) shows as gaps at
//! one phase. `CaptureGuard::INTERRUPT_NS` (crates/project/src/trace.rs) quotes its output.
//!
//! `cargo run --release -p pagelab-project --example host_stalls -- [SECONDS]` (3 by default)

use pagelab_sync::trace::{now, ticks_per_ns};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .map_err(|_| format!("SECONDS: `{s}` is not a number"))?,
        None => 3.0,
    };
    if !(seconds > 0.0 && seconds <= 600.0) {
        return Err("SECONDS: between 0 and 600".into());
    }
    let tpn = ticks_per_ns();
    let min_gap = (1_000.0 * tpn) as u64;
    let start = now();
    let end = start + (seconds * 1e9 * tpn) as u64;
    // (length, time since start), ns.
    let mut gaps: Vec<(f64, f64)> = Vec::with_capacity(1 << 16);
    let mut last = start;
    loop {
        let t = now();
        // Saturating: a counter read on another CPU after a migration may be a little behind.
        if t.saturating_sub(last) >= min_gap {
            gaps.push((
                (t - last) as f64 / tpn,
                last.saturating_sub(start) as f64 / tpn,
            ));
        }
        last = t;
        if t >= end {
            break;
        }
    }
    let bounds = [1e3, 2e3, 5e3, 10e3, 20e3, 40e3, 100e3, f64::INFINITY];
    println!("{seconds} s of a loop reading the time-stamp counter: gaps by length");
    let total_lost: f64 = gaps.iter().map(|g| g.0).sum();
    for w in bounds.windows(2) {
        let (n, ns) = gaps
            .iter()
            .filter(|g| g.0 >= w[0] && g.0 < w[1])
            .fold((0u64, 0.0), |(n, s), g| (n + 1, s + g.0));
        println!(
            "  {:>6.0} us to {:>6} us: {n:>7} gaps ({:>7.1} a second), {:>8.3} ms lost ({:>5.1}% of the loss)",
            w[0] / 1e3,
            if w[1].is_finite() {
                format!("{:.0}", w[1] / 1e3)
            } else {
                "more".to_string()
            },
            n as f64 / seconds,
            ns / 1e6,
            100.0 * ns / total_lost.max(1.0)
        );
    }
    println!(
        "  lost in all: {:.1} ms of {:.0} ms ({:.2}%)",
        total_lost / 1e6,
        seconds * 1e3,
        100.0 * total_lost / (seconds * 1e9)
    );
    let long: Vec<&(f64, f64)> = gaps.iter().filter(|g| g.0 >= 20e3).collect();
    for period_ms in [4.0, 10.0] {
        // The phase of each long gap in the period, in bins of a tenth of it: a periodic
        // source puts its gaps in one or two bins.
        let period = period_ms * 1e6;
        let mut bins = [0u64; 10];
        for g in &long {
            bins[((g.1 % period) / period * 10.0) as usize % 10] += 1;
        }
        println!("  gaps of 20 us or more by phase modulo {period_ms} ms (tenths): {bins:?}");
    }
    Ok(())
}
