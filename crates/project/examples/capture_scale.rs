//! The terms of a capture's compute scale, per trace, to see which one moves between captures
//! of one binary (issue 13).
//!
//! `cargo run --release -p pagelab-project --example capture_scale -- TRACE...` prints one
//! table row per trace, per operation: the untraced and traced CPU time, the page writes'
//! host time as kept in the trace, the compute before and after scaling, the recording cost
//! subtracted (per-event overhead times events), the compute scale, and the mean compute
//! inside a `lru_lock` and a `zone->lock` hold (outermost acquire to its release) before and
//! after scaling. "Before" divides the kept compute by the scale, which is exact for a trace
//! whose gaps were scaled (built before 2026-11-25, no in-place event cost); for a newer one
//! it is the same ratio, but the holds lost the in-place cost per event, not in proportion.
//! The cost per event subtracted is printed, with the tight loop's in parentheses.

use std::collections::HashMap;
use std::path::Path;

use pagelab_project::trace::{Event, Trace};

/// Mean compute inside a hold of `class` (outermost acquire to release of one instance).
fn hold_compute(t: &Trace, class: &str) -> f64 {
    let mut open: HashMap<u32, f64> = HashMap::new();
    let (mut sum, mut n) = (0.0, 0u64);
    for e in &t.events {
        match *e {
            Event::Compute { ns } => open.values_mut().for_each(|v| *v += ns),
            Event::Acquire { inst, .. } if t.instances[inst as usize].class == class => {
                open.entry(inst).or_insert(0.0);
            }
            Event::Release { inst, .. } => {
                if let Some(c) = open.remove(&inst) {
                    sum += c;
                    n += 1;
                }
            }
            _ => {}
        }
    }
    sum / n.max(1) as f64
}

fn main() {
    println!(
        "| trace | untraced | traced | writes | untraced writes | compute before | events x overhead | scale | compute after | ns per event | lru_lock hold before / after | zone->lock hold before / after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for a in std::env::args().skip(1) {
        let t = match Trace::load(Path::new(&a)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{a}: {e}");
                std::process::exit(1);
            }
        };
        let m = &t.meta;
        let ops = m.ops.max(1) as f64;
        let (mut compute, mut writes) = (0.0, 0.0);
        for e in &t.events {
            match *e {
                Event::Compute { ns } => compute += ns,
                Event::Write { host_ns, .. } => writes += host_ns,
                _ => {}
            }
        }
        let f = m.compute_scale;
        let untraced_writes = m
            .untraced_write_ns
            .map_or("-".to_string(), |w| format!("{:.1}", w / ops));
        let (lru, zone) = (hold_compute(&t, "lru_lock"), hold_compute(&t, "zone->lock"));
        println!(
            "| {a} | {:.1} | {:.1} | {:.1} | {untraced_writes} | {:.1} | {:.1} | {:.3} | {:.1} | {} | {:.1} / {:.1} | {:.1} / {:.1} |",
            m.untraced_ns / ops,
            m.traced_ns / ops,
            writes / ops,
            compute / f / ops,
            m.overhead_ns_per_event * m.raw_events as f64 / ops,
            f,
            compute / ops,
            m.event_cost_ns
                .map_or(format!("{:.1}", m.overhead_ns_per_event), |c| format!(
                    "{:.1} ({:.1})",
                    c, m.overhead_ns_per_event
                )),
            lru / f,
            lru,
            zone / f,
            zone,
        );
    }
}
