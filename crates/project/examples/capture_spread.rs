//! What the replay depends on, per trace, to compare captures of one profile side by side.
//!
//! `cargo run --release -p pagelab-project --example capture_spread -- TRACE...` prints one line
//! per trace: compute and memory-write time per operation, events per operation, the capture's
//! timings (untraced and traced CPU time per operation, the compute scale) and what the
//! preemption guard saw; then, per lock class, its holds' mean, 99th percentile and longest
//! (compute and writes between an acquire and its release), and per fallback class the mean
//! length of a segment. Captures whose quantities differ are where projected rows differ.

use std::collections::HashMap;
use std::path::Path;

use pagelab_project::trace::{Event, Trace};

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Time of each hold per class (outermost acquire to its release of the same instance).
fn holds(t: &Trace, events: &[Event], out: &mut HashMap<String, Vec<f64>>) {
    let mut open: HashMap<u32, f64> = HashMap::new();
    let mut now = 0.0;
    for e in events {
        match *e {
            Event::Compute { ns } => now += ns,
            Event::Write { host_ns, .. } => now += host_ns,
            Event::Acquire { inst, .. } => {
                open.entry(inst).or_insert(now);
            }
            // A downgrade ends a write hold and begins a read hold, counted apart.
            Event::Release { inst, .. } | Event::Downgrade { inst } => {
                if let Some(t0) = open.remove(&inst) {
                    out.entry(t.instances[inst as usize].class.clone())
                        .or_default()
                        .push(now - t0);
                }
                if matches!(e, Event::Downgrade { .. }) {
                    open.insert(inst, now);
                }
            }
            _ => {}
        }
    }
}

fn main() {
    for a in std::env::args().skip(1) {
        let t = match Trace::load(Path::new(&a)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{a}: {e}");
                std::process::exit(1);
            }
        };
        let ops = t.meta.ops.max(1) as f64;
        let (mut compute, mut writes) = (0.0, 0.0);
        for e in &t.events {
            match *e {
                Event::Compute { ns } => compute += ns,
                Event::Write { host_ns, .. } => writes += host_ns,
                _ => {}
            }
        }
        let m = &t.meta;
        println!(
            "{a}: {} ops; compute {:.1} ns/op, writes {:.1} ns/op, {:.1} events/op; untraced {:.1} traced {:.1} ns/op, scale {:.3}; guard {}",
            m.ops,
            compute / ops,
            writes / ops,
            t.events.len() as f64 / ops,
            m.untraced_ns / ops,
            m.traced_ns / ops,
            m.compute_scale,
            m.guard.as_ref().map_or("-".to_string(), |g| g.describe()),
        );
        let mut by: HashMap<String, Vec<f64>> = HashMap::new();
        holds(&t, &t.events, &mut by);
        let mut names: Vec<_> = by.keys().cloned().collect();
        names.sort();
        for n in names {
            let v = by.get_mut(&n).expect("key");
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            println!(
                "    hold {n:<24} n {:>7} mean {:>8.1} ns p99 {:>8.1} max {:>10.1}",
                v.len(),
                mean,
                pct(v, 0.99),
                pct(v, 1.0)
            );
        }
        for f in &t.fallbacks {
            let lens: Vec<f64> = f
                .segments
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|e| match *e {
                            Event::Compute { ns } => ns,
                            Event::Write { host_ns, .. } => host_ns,
                            _ => 0.0,
                        })
                        .sum()
                })
                .collect();
            let mut l = lens.clone();
            println!(
                "    fallback {:<20} n {:>7} mean {:>8.1} ns p99 {:>8.1} max {:>10.1}",
                f.class,
                lens.len(),
                lens.iter().sum::<f64>() / lens.len().max(1) as f64,
                pct(&mut l, 0.99),
                pct(&mut l, 1.0)
            );
        }
    }
}
