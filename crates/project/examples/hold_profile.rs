//! What one pass of a trace does inside and outside each class's exclusive holds.
//!
//! `cargo run --release -p pagelab-project --example hold_profile -- TRACE` prints, per lock
//! class, its exclusive and shared holds in the trace: how many, and what they contain (compute,
//! traps, bytes written, TLB flushes, nested acquisitions, atomics and line events), against the
//! whole trace. It answers how long `mmap_lock`'s write hold in munmap is beside the faults.

use std::collections::HashMap;
use std::path::Path;

use pagelab_project::trace::{Event, Trace};

#[derive(Default, Debug)]
struct Sum {
    holds: u64,
    compute_ns: f64,
    traps: u64,
    bytes: u64,
    write_host_ns: f64,
    flushes: u64,
    acquires: HashMap<String, u64>,
    atomics: u64,
    lines: u64,
    /// Line events by class, kind and symbol.
    line_kinds: HashMap<String, u64>,
    ops: u64,
}

impl Sum {
    fn add(&mut self, e: &Event, t: &Trace) {
        match *e {
            Event::Compute { ns } => self.compute_ns += ns,
            Event::Trap => self.traps += 1,
            Event::Write { bytes, host_ns } => {
                self.bytes += u64::from(bytes);
                self.write_host_ns += host_ns;
            }
            Event::TlbFlush { .. } => self.flushes += 1,
            Event::Acquire { inst, shared, .. } => {
                let k = format!(
                    "{} ({})",
                    t.instances[inst as usize].class,
                    if shared { "shared" } else { "exclusive" }
                );
                *self.acquires.entry(k).or_default() += 1;
            }
            Event::Atomic { .. } | Event::Downgrade { .. } => self.atomics += 1,
            Event::Line { inst, write, sym } => {
                self.lines += 1;
                let k = format!(
                    "{} {} {sym:?}",
                    t.instances[inst as usize].class,
                    if write { "write" } else { "read" }
                );
                *self.line_kinds.entry(k).or_default() += 1;
            }
            Event::Store { inst, sym } => {
                self.lines += 1;
                let k = format!("{} store {sym:?}", t.instances[inst as usize].class);
                *self.line_kinds.entry(k).or_default() += 1;
            }
            Event::Prefetch { inst } => {
                self.lines += 1;
                let k = format!("{} prefetch", t.instances[inst as usize].class);
                *self.line_kinds.entry(k).or_default() += 1;
            }
            Event::Ops { n } => self.ops += u64::from(n),
            Event::Fence => *self.line_kinds.entry("fence".into()).or_default() += 1,
            Event::Release { .. } | Event::TrapReturn => {}
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace] = args.as_slice() else {
        return Err("usage: hold_profile TRACE".into());
    };
    let t = Trace::load(Path::new(trace)).map_err(|e| e.to_string())?;
    println!(
        "{} with {}: {} ops, compute scale {:.3}, host {:.2} GHz",
        t.meta.workload, t.meta.profile, t.meta.ops, t.meta.compute_scale, t.meta.host_ghz
    );
    let mut whole = Sum::default();
    for e in &t.events {
        whole.add(e, &t);
    }
    println!("whole trace: {whole:?}");
    // Outermost holds of each (class, access): everything between acquire and its release.
    let mut inside: HashMap<(String, bool), Sum> = HashMap::new();
    // Each hold's compute, per (class, access), for the spread printed below.
    let mut spread: HashMap<(String, bool), Vec<f64>> = HashMap::new();
    let mut open: Vec<(u32, bool, f64)> = Vec::new();
    for e in &t.events {
        for (inst, shared, compute) in &mut open {
            let c = &t.instances[*inst as usize].class;
            if let Some(s) = inside.get_mut(&(c.clone(), *shared)) {
                s.add(e, &t);
            }
            if let Event::Compute { ns } = *e {
                *compute += ns;
            }
        }
        match *e {
            Event::Acquire { inst, shared, .. } => {
                let c = t.instances[inst as usize].class.clone();
                inside.entry((c, shared)).or_default().holds += 1;
                open.push((inst, shared, 0.0));
            }
            Event::Release { inst, .. } => {
                if let Some(p) = open.iter().rposition(|&(i, _, _)| i == inst) {
                    let (i, shared, compute) = open.remove(p);
                    let c = t.instances[i as usize].class.clone();
                    spread.entry((c, shared)).or_default().push(compute);
                }
            }
            // The write hold ends and a read hold begins (munmap's zap).
            Event::Downgrade { inst } => {
                if let Some(p) = open.iter().rposition(|&(i, s, _)| i == inst && !s) {
                    open[p].1 = true;
                    let c = t.instances[inst as usize].class.clone();
                    inside.entry((c, true)).or_default().holds += 1;
                }
            }
            _ => {}
        }
    }
    let mut keys: Vec<_> = inside.keys().cloned().collect();
    keys.sort();
    for k in keys {
        let s = &inside[&k];
        println!(
            "{} {}: {} holds; inside: compute {:.3} ms ({:.1} ns per hold), {} traps, {} bytes written ({:.3} ms host), {} flushes, {} atomics, {} line events {:?}, acquires {:?}",
            k.0,
            if k.1 { "shared" } else { "exclusive" },
            s.holds,
            s.compute_ns / 1e6,
            s.compute_ns / s.holds.max(1) as f64,
            s.traps,
            s.bytes,
            s.write_host_ns / 1e6,
            s.flushes,
            s.atomics,
            s.lines,
            s.line_kinds,
            s.acquires
        );
        if let Some(v) = spread.get_mut(&k).filter(|v| !v.is_empty()) {
            v.sort_by(f64::total_cmp);
            let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
            println!(
                "    compute per hold: p10 {:.0}, median {:.0}, p90 {:.0}, p99 {:.0}, max {:.0} ns",
                q(0.1),
                q(0.5),
                q(0.9),
                q(0.99),
                q(1.0)
            );
        }
    }
    Ok(())
}
