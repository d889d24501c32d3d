//! Replay speed: simulated events per second of CPU time, for a saved trace on a machine.
//!
//! `cargo run --release -p pagelab-project --example replay_speed -- TRACE MACHINE TASKS...`
//! replays the trace in processes and threads mode at each task count and prints the events
//! and the process CPU time they took (`CLOCK_PROCESS_CPUTIME_ID`), which a loaded shared
//! host does not inflate as it does wall time. `REPLAY_CLASSES=1` prints the rate and each
//! class's waits, its mean exclusive hold and the share of the run its instances were held
//! exclusively (summed over instances, so a node-scoped lock on two nodes can reach 2): the
//! figures lock_stat's `waittime-total` and `holdtime-total` give, to set beside published
//! ones; `REPLAY_STRIP_LINES=1` drops the line events first (the replay as it was
//! before the coherence model, on the same capture); `REPLAY_STRIP_LRU_ENTRIES=1` drops the
//! LRU lists' other-entry writes (a removal's neighbours across a run's edge);
//! `REPLAY_PREFETCH_AS=none|write` drops the prefetches for writing or replays each as a
//! plain write the CPU waits for; `REPLAY_QRWLOCK_AS_RWSEM=ALGO` replays
//! every queued rwlock of the trace as an rw_semaphore of that algorithm (`spin-writers`: the
//! replay of `lru_lock` in concurrent mode before it was traced as a queued rwlock);
//! `REPLAY_NO_RETURNS=1` drops the exceptions' returns, at which a CPU waits for a prefetch
//! still in flight (the replay before trace format 6); `REPLAY_NO_FENCES=1` drops the fences
//! (a private locked instruction after a store, where the CPU waits for its stores' lines;
//! the replay before format 8); `REPLAY_DOWNGRADE_AS_RELEASE=1`
//! replays each rwsem downgrade as a release and a new read acquire (before format 7);
//! `REPLAY_WHOLE_TRACE=1` makes each CPU's cycle the whole trace (the rule before 2026-11-29)
//! and `REPLAY_SEEDS=N` prints each row's mean rate over seeds 1 to N and its spread.
//! `REPLAY_SCALE_HOLDS=CLASS:F` multiplies the compute inside the class's exclusive holds by F
//! (`lru_lock:2`): how long a lock's holds would have to be for a published shape.
//! `REPLAY_OWNER_LINE=CLASS` gives the rwsem of CLASS an `owner` word on a line of its own,
//! stored after every read acquisition (`rwsem_set_reader_owned`): what a lock object that
//! straddles two lines would cost (`vma lock`: v2's 40-byte `struct vma_lock`, from a slab
//! without cache alignment; docs/model-history.md, round 45).

use std::path::Path;

use pagelab_project::machine::Machine;
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Trace};

fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, machine, tasks @ ..] = args.as_slice() else {
        return Err("usage: replay_speed TRACE MACHINE TASKS...".into());
    };
    let mut t = Trace::load(Path::new(trace)).map_err(|e| e.to_string())?;
    if std::env::var_os("REPLAY_STRIP_LINES").is_some() {
        // The trace as the replay saw it before line events: no plain line accesses, and no
        // atomics on the data lines they introduced (lock words and RSS counters stay).
        let data = [
            "lru list",
            "free_area",
            "NR_FREE_PAGES",
            "vm_lock_seq",
            "mm_lock_seq",
        ];
        let inst = t.instances.clone();
        t.events.retain(|e| match e {
            Event::Line { .. } | Event::Prefetch { .. } | Event::Store { .. } => false,
            Event::Atomic { inst: i } => !data.contains(&inst[*i as usize].class.as_str()),
            _ => true,
        });
    }
    if let Ok(spec) = std::env::var("REPLAY_SCALE_HOLDS") {
        // What longer holds of one class would do, on one capture: the compute inside its
        // exclusive holds times F (a diagnostic of how long the machine's holds must be for
        // a published table's shape; nothing in the model takes F).
        let (class, f) = spec
            .split_once(':')
            .ok_or("REPLAY_SCALE_HOLDS: CLASS:FACTOR, e.g. lru_lock:2")?;
        let f: f64 = f
            .parse()
            .ok()
            .filter(|f: &f64| f.is_finite() && *f >= 0.0)
            .ok_or("REPLAY_SCALE_HOLDS: the factor is a number, 0 or more")?;
        let inst = t.instances.clone();
        let of_class = |i: u32| inst[i as usize].class == class;
        let scale = |events: &mut [Event]| {
            let mut depth = 0i32;
            for e in events {
                match e {
                    Event::Acquire {
                        inst,
                        shared: false,
                        ..
                    } if of_class(*inst) => depth += 1,
                    Event::Release {
                        inst,
                        shared: false,
                    } if of_class(*inst) => depth -= 1,
                    Event::Compute { ns } if depth > 0 => *ns *= f,
                    _ => {}
                }
            }
        };
        scale(&mut t.events);
        for seg in t.fallbacks.iter_mut().flat_map(|fb| fb.segments.iter_mut()) {
            scale(seg);
        }
    }
    if let Ok(class) = std::env::var("REPLAY_OWNER_LINE") {
        // The owner word on a line of its own: a store to it right after each read
        // acquisition of the class's rwsem (a trylock's too: a failed one skips it with the
        // rest of its success path). Same scope as the lock, so threads share it.
        let lock = t
            .instances
            .iter()
            .position(|i| i.class == class)
            .ok_or_else(|| format!("REPLAY_OWNER_LINE: the trace has no class `{class}`"))?;
        let owner = t.instances.len() as u32;
        let mut line = t.instances[lock].clone();
        line.class = format!("{class} owner");
        line.model = pagelab_sync::trace::LockModel::Line;
        line.rwsem = None;
        t.instances.push(line);
        let add_owner = |events: &mut Vec<Event>| {
            *events = events
                .iter()
                .flat_map(|e| match *e {
                    Event::Acquire {
                        inst, shared: true, ..
                    } if inst as usize == lock => vec![
                        *e,
                        Event::Store {
                            inst: owner,
                            sym: pagelab_sync::trace::Sym::Here,
                        },
                    ],
                    e => vec![e],
                })
                .collect();
        };
        add_owner(&mut t.events);
        for seg in t.fallbacks.iter_mut().flat_map(|fb| fb.segments.iter_mut()) {
            add_owner(seg);
        }
    }
    if let Some(how) = std::env::var_os("REPLAY_PREFETCH_AS") {
        // What the prefetches for writing add, on one capture: `none` drops them, `write`
        // replays each as a plain write the CPU waits for (what format 3 did for faults that
        // try a per-VMA lock first; it recorded none for faults that go straight to mmap_lock).
        let write = match how.to_str() {
            Some("none") => false,
            Some("write") => true,
            _ => return Err("REPLAY_PREFETCH_AS: `none` or `write`".into()),
        };
        t.events = t
            .events
            .iter()
            .filter_map(|e| match *e {
                Event::Prefetch { inst } => write.then_some(Event::Line {
                    inst,
                    write: true,
                    sym: pagelab_sync::trace::Sym::Here,
                }),
                e => Some(e),
            })
            .collect();
    }
    if std::env::var_os("REPLAY_DOWNGRADE_AS_RELEASE").is_some() {
        // What the downgrade keeps out, on one capture: a release and a new read acquire let
        // a waiting writer in between (the rule before format 7).
        t.events = t
            .events
            .iter()
            .flat_map(|e| match *e {
                Event::Downgrade { inst } => vec![
                    Event::Release {
                        inst,
                        shared: false,
                    },
                    Event::Acquire {
                        inst,
                        shared: true,
                        trylock: false,
                    },
                ],
                e => vec![e],
            })
            .collect();
    }
    if std::env::var_os("REPLAY_NO_RETURNS").is_some() {
        // What the exception's return adds, on one capture: without its events no CPU waits
        // at a fault's end for a prefetch still on its way (the rule before format 6).
        t.events.retain(|e| *e != Event::TrapReturn);
    }
    if std::env::var_os("REPLAY_NO_FENCES").is_some() {
        // What the private locked instructions' drains add, on one capture: without them a
        // hold's stores wait for their lines only at its release (the rule before format 8).
        t.events.retain(|e| *e != Event::Fence);
        for seg in t.fallbacks.iter_mut().flat_map(|fb| fb.segments.iter_mut()) {
            seg.retain(|e| *e != Event::Fence);
        }
    }
    if let Some(how) = std::env::var_os("REPLAY_STORES_AS") {
        // What the store buffer takes off, on one capture: `write` replays each store the CPU
        // does not wait for as a write it waits for (what format 4 recorded).
        if how.to_str() != Some("write") {
            return Err("REPLAY_STORES_AS: `write`".into());
        }
        for e in &mut t.events {
            if let Event::Store { inst, sym } = *e {
                *e = Event::Line {
                    inst,
                    write: true,
                    sym,
                };
            }
        }
    }
    if std::env::var_os("REPLAY_STRIP_LRU_ENTRIES").is_some() {
        // The LRU lists' other-entry writes dropped (the neighbours a removal writes across a
        // run's edge, recorded from 2026-11-25): what they add, on one capture.
        let inst = t.instances.clone();
        t.events.retain(|e| {
            !matches!(e, Event::Line { inst: i, sym: pagelab_sync::trace::Sym::Entry, .. }
                | Event::Store { inst: i, sym: pagelab_sync::trace::Sym::Entry }
                if inst[*i as usize].class == "lru list")
        });
    }
    if let Some(a) = std::env::var_os("REPLAY_QRWLOCK_AS_RWSEM") {
        let a = a.to_string_lossy();
        let algo = pagelab_sync::RwsemAlgo::from_name(&a).ok_or_else(|| {
            format!(
                "REPLAY_QRWLOCK_AS_RWSEM: `{a}` is not one of {}",
                pagelab_sync::RwsemAlgo::names()
            )
        })?;
        for i in &mut t.instances {
            if i.model == pagelab_sync::trace::LockModel::QRwLock {
                i.model = pagelab_sync::trace::LockModel::RwSem;
                i.rwsem = Some(algo);
            }
        }
    }
    if std::env::var_os("REPLAY_WHOLE_TRACE").is_some() {
        // Each CPU's cycle the whole trace, as before 2026-11-29 (then a page_fault trace's
        // two iterations were one cycle).
        t.meta.iterations = 1;
    }
    // `REPLAY_SEEDS=N`: the mean rate over seeds 1..=N and its spread, after each row.
    let seeds: u64 = match std::env::var("REPLAY_SEEDS") {
        Ok(n) => n.parse().map_err(|e| format!("REPLAY_SEEDS `{n}`: {e}"))?,
        Err(_) => 0,
    };
    let m = Machine::load(machine)?;
    let (mut events, mut cpu) = (0u64, 0.0);
    for n in tasks {
        let n: usize = n.parse().map_err(|e| format!("task count `{n}`: {e}"))?;
        for threads in [false, true] {
            let spec = ReplaySpec {
                tasks: n,
                threads,
                seed: 1,
                samples: 3,
                ops_per_cpu: Some(8192),
            };
            let r = Replay::new(&m, &t, spec)?;
            let c0 = cpu_seconds();
            let out = r.run(1)?;
            let c = cpu_seconds() - c0;
            events += out.events;
            cpu += c;
            println!(
                "{n:>4} {:<9} {:>12} events {:>7.2} s CPU {:>6.1} M events/s",
                if threads { "threads" } else { "processes" },
                out.events,
                c,
                out.events as f64 / 1e6 / c.max(1e-9)
            );
            let rate_of = |o: &pagelab_project::ReplayResult| {
                o.samples.iter().sum::<f64>() / o.samples.len().max(1) as f64
            };
            if seeds > 0 {
                let mut rates = Vec::new();
                for s in 1..=seeds {
                    rates.push(rate_of(&r.run(s)?));
                }
                let mean = rates.iter().sum::<f64>() / rates.len() as f64;
                let sd = (rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
                    / (rates.len().max(2) - 1) as f64)
                    .sqrt();
                println!("     seeds 1..={seeds}: {mean:.0} ops/s, sd {sd:.0}");
            }
            if std::env::var_os("REPLAY_CLASSES").is_some() {
                let rate = rate_of(&out);
                println!("     {rate:.0} ops/s");
                for k in &out.classes {
                    println!(
                        "     {:<24} {:>10} acq {:>10} contended {:>12.1} ns waited per op {:>9.1} ns per exclusive hold {:>7.3} of the span held",
                        k.name,
                        k.acquisitions,
                        k.contended,
                        k.wait_ns / out.ops.max(1) as f64,
                        k.hold_ns / k.holds.max(1) as f64,
                        k.hold_ns / out.span_ns.max(1e-9)
                    );
                    if k.line_events > 0 {
                        println!(
                            "     {:<24} {:>10.4} line accesses per op, {:>7.1} ns of transfers per op; list entries {:.4} per op, {:.1} ns per op",
                            "",
                            k.line_events as f64 / out.ops.max(1) as f64,
                            k.line_ns / out.ops.max(1) as f64,
                            k.entry_events as f64 / out.ops.max(1) as f64,
                            k.entry_ns / out.ops.max(1) as f64,
                        );
                    }
                    if k.stores > 0 || k.drain_ns > 0.0 {
                        println!(
                            "     {:<24} {:>10.4} stores no CPU waited for per op ({:.1} ns of their transfers per op); {:.1} ns per op waited for the store buffer to drain",
                            "",
                            k.stores as f64 / out.ops.max(1) as f64,
                            k.store_ns / out.ops.max(1) as f64,
                            k.drain_ns / out.ops.max(1) as f64,
                        );
                    }
                    if k.prefetches > 0 {
                        println!(
                            "     {:<24} {:>10.4} prefetches for writing per op, {:.3} of them lost to another CPU before the next access, {:.3} still on their way at the exception's return ({:.1} ns per op waited there)",
                            "",
                            k.prefetches as f64 / out.ops.max(1) as f64,
                            k.prefetches_lost as f64 / k.prefetches as f64,
                            k.prefetch_return_waits as f64 / k.prefetches as f64,
                            k.prefetch_return_ns / out.ops.max(1) as f64,
                        );
                    }
                }
            }
        }
    }
    println!(
        "all: {:.1} M events in {cpu:.2} s CPU: {:.1} M events/s",
        events as f64 / 1e6,
        events as f64 / 1e6 / cpu.max(1e-9)
    );
    Ok(())
}
