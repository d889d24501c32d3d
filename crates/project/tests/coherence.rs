//! The replay's coherence model against closed forms: a critical section that touches shared
//! lines lengthens by one transfer per line the previous holder wrote; symbolic list entries
//! resolve to the CPU that last wrote the list's first entry; a read right before an exchange is
//! part of the exchange's request, and one apart from it costs the invalidation of every copy
//! the readers took.

mod common;

use common::TestMachine;
use pagelab_project::machine::Machine;
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Instance, Trace, TraceMeta, Window};
use pagelab_sync::Scope;
use pagelab_sync::trace::{LockModel, Sym};

/// A one-socket machine of `cores` cores: every transfer between two cores is `core_ns`.
fn machine(cores: usize, core_ns: f64, atomic_ns: f64) -> Machine {
    TestMachine {
        core_ns,
        atomic_ns,
        ..TestMachine::new(cores)
    }
    .build()
}

fn meta(ops: u64) -> TraceMeta {
    common::meta(Window::Cycle, ops)
}

fn inst(class: &str, model: LockModel, sleeps: bool) -> Instance {
    Instance {
        class: class.into(),
        scope: Scope::Machine,
        model,
        sleeps,
        rwsem: None,
    }
}

fn rate(m: &Machine, t: &Trace, tasks: usize) -> f64 {
    let r = Replay::new(
        m,
        t,
        ReplaySpec {
            tasks,
            threads: true,
            seed: 3,
            samples: 4,
            ops_per_cpu: None,
        },
    )
    .unwrap()
    .run(3)
    .unwrap();
    r.samples.iter().sum::<f64>() / r.samples.len() as f64
}

/// A cycle of `n` operations: think `think_ns`, take a queued spinlock (instance 0), run
/// `inside` (line events), hold `hold_ns`, release.
fn critical_section(n: usize, think_ns: f64, hold_ns: f64, inside: &[Event]) -> Trace {
    let mut events = Vec::new();
    for _ in 0..n {
        events.push(Event::Compute { ns: think_ns });
        events.push(Event::Acquire {
            inst: 0,
            shared: false,
            trylock: false,
        });
        events.extend_from_slice(inside);
        events.push(Event::Compute { ns: hold_ns });
        events.push(Event::Release {
            inst: 0,
            shared: false,
        });
        events.push(Event::Ops { n: 1 });
    }
    let mut instances = vec![inst("the lock", LockModel::Queued, false)];
    for i in 1..=8 {
        instances.push(inst(&format!("line {i}"), LockModel::Line, false));
    }
    Trace {
        meta: meta(n as u64),
        instances,
        events,
        fallbacks: Vec::new(),
    }
}

fn write(inst: u32, sym: Sym) -> Event {
    Event::Line {
        inst,
        write: true,
        sym,
    }
}

#[test]
fn a_contended_critical_section_lengthens_by_one_transfer_per_line_it_writes() {
    // Saturated: 8 CPUs, a think time far below the hold. The lock passes from CPU to CPU, one
    // transfer (80 ns) per hand-off, and every line the section writes was written last by the
    // previous holder: one more transfer each. The lock serves one section per
    // hold + (k + 1) transfers.
    let (x, hold) = (80.0, 400.0);
    let m = machine(16, x, 5.0);
    for k in [0u32, 1, 3, 6] {
        let inside: Vec<Event> = (1..=k).map(|i| write(i, Sym::Here)).collect();
        let t = critical_section(2000, 1.0, hold, &inside);
        let closed = 1e9 / (hold + f64::from(k + 1) * x);
        let got = rate(&m, &t, 8);
        assert!(
            (got - closed).abs() / closed < 0.02,
            "k = {k}: {got:.0} ops/s, closed form {closed:.0}"
        );
        // One CPU keeps every line: the section costs its hold only.
        let one = rate(&m, &t, 1);
        let alone = 1e9 / (hold + 1.0);
        assert!(
            (one - alone).abs() / alone < 0.01,
            "k = {k}: {one} vs {alone}"
        );
    }
}

#[test]
fn list_entries_resolve_to_whoever_last_wrote_the_first_entry() {
    let (x, hold) = (80.0, 400.0);
    let m = machine(16, x, 5.0);
    let saturated = |inside: &[Event]| rate(&m, &critical_section(2000, 1.0, hold, inside), 8);
    let per_transfers = |k: f64| 1e9 / (hold + k * x);
    let close = |a: f64, b: f64| (a - b).abs() / b < 0.02;
    // A list_add rewrites the first entry, which the previous holder put there: one transfer
    // beyond the hand-off.
    let add = saturated(&[write(1, Sym::First)]);
    assert!(close(add, per_transfers(2.0)), "{add}");
    // An entry further in resolves to the first entry's writer; nobody ever wrote the first
    // entry here, so it comes from memory at no modelled cost.
    let entry = saturated(&[write(1, Sym::Entry)]);
    assert!(close(entry, per_transfers(1.0)), "{entry}");
    // After this CPU's own add, another entry lies behind the CPU's own first one: the
    // capture records it only when the task had not linked it, so it is the previous
    // linker's (the previous holder's), one more transfer (a refill's next block after the
    // first pop; before 2026-11-25 it was taken for the CPU's own line).
    let add_then_entry = saturated(&[write(1, Sym::First), write(1, Sym::Entry)]);
    assert!(
        close(add_then_entry, per_transfers(3.0)),
        "{add_then_entry}"
    );
    // A batch of adds under one hold (a pcp refill, an LRU flush) pays for the first only;
    // per operation, a batch of 8 is cheaper than 8 holds of one add each.
    let batch = saturated(&[write(1, Sym::First); 8]);
    assert!(close(batch, per_transfers(2.0)), "{batch}");
    // The head and the first entry are different lines: a head write moves the head too.
    let head_and_first = saturated(&[write(1, Sym::First), write(1, Sym::Here)]);
    assert!(
        close(head_and_first, per_transfers(3.0)),
        "{head_and_first}"
    );
}

#[test]
fn a_read_right_before_the_exchange_costs_what_the_exchange_alone_costs() {
    // Cyclic: think, read the count line, then an atomic on it (an rwsem's reader count,
    // `down_read_trylock`). A read followed at once by the exchange is one request for the
    // line (measured on this project's host: examples/line_probe.rs), so the pair costs what
    // the atomic alone costs. A read with work between it and the exchange is a fetch of its
    // own: it leaves a shared copy, and with many CPUs reading between two exchanges each
    // exchange must invalidate the readers' copies, so the line serves fewer exchanges.
    let m = machine(32, 80.0, 5.0);
    let mk = |read: Option<f64>| {
        let mut events = Vec::new();
        for _ in 0..2000 {
            events.push(Event::Compute { ns: 200.0 });
            if let Some(gap) = read {
                events.push(Event::Line {
                    inst: 0,
                    write: false,
                    sym: Sym::Here,
                });
                if gap > 0.0 {
                    events.push(Event::Compute { ns: gap });
                }
            }
            events.push(Event::Atomic { inst: 0 });
            events.push(Event::Ops { n: 1 });
        }
        Trace {
            meta: meta(2000),
            instances: vec![inst("count", LockModel::Line, false)],
            events,
            fallbacks: Vec::new(),
        }
    };
    let (plain, read_first, read_apart) = (mk(None), mk(Some(0.0)), mk(Some(20.0)));
    // One CPU: the reads hit, and an op costs its work alone (the read apart: 20 ns more).
    for (name, t, ns) in [
        ("atomic only", &plain, 200.0),
        ("read first", &read_first, 200.0),
        ("read apart", &read_apart, 220.0),
    ] {
        let got = rate(&m, t, 1);
        assert!((got * ns / 1e9 - 1.0).abs() < 0.001, "{name}: {got}");
    }
    // Two CPUs, the line each time in the other's cache: one transfer a pair, not two. The
    // closed form: each CPU thinks and waits for the transfer (the atomic's own 5 ns keeps the
    // line busy but not the CPU), and the line, busy 85 ns an op, is never the bottleneck.
    let closed = 1e9 / (200.0 + 80.0) * 2.0;
    for (name, t) in [("atomic only", &plain), ("read first", &read_first)] {
        let got = rate(&m, t, 2);
        assert!(
            (got - closed).abs() / closed < 0.01,
            "{name}: {got} vs {closed}"
        );
    }
    // 24 CPUs: the line saturates at one transfer + one atomic per op (85 ns), the folded read
    // adding nothing; the read apart from its exchange lowers the rate.
    let line_bound = 1e9 / (80.0 + 5.0);
    let (p24, r24, a24) = (
        rate(&m, &plain, 24),
        rate(&m, &read_first, 24),
        rate(&m, &read_apart, 24),
    );
    for (name, got) in [("atomic only", p24), ("read first", r24)] {
        assert!(
            (got - line_bound).abs() / line_bound < 0.03,
            "{name}: {got} vs {line_bound}"
        );
    }
    assert!(
        a24 < 0.95 * p24,
        "read apart {a24} against atomic only {p24}"
    );
}

#[test]
fn reads_of_an_rwsem_line_inside_its_read_hold_pay_for_the_other_readers_writes() {
    // False sharing of a lock word's line: a reader holds an rwsem and reads `k` other fields
    // on its count's line (the trace names them by the lock's own instance). The reads share
    // the lock's coherence state: alone, the CPU keeps the line and the reads hit; with other
    // readers taking and releasing the lock, each read after another CPU's exchange is a
    // transfer, and the copy it takes is one more the next exchange must invalidate.
    let m = machine(32, 80.0, 5.0);
    let mk = |k: usize| {
        let mut events = Vec::new();
        for _ in 0..2000 {
            events.push(Event::Compute { ns: 100.0 });
            events.push(Event::Acquire {
                inst: 0,
                shared: true,
                trylock: true,
            });
            for _ in 0..k {
                events.push(Event::Compute { ns: 150.0 });
                events.push(Event::Line {
                    inst: 0,
                    write: false,
                    sym: Sym::Here,
                });
            }
            events.push(Event::Compute {
                ns: 300.0 - 150.0 * k as f64,
            });
            events.push(Event::Release {
                inst: 0,
                shared: true,
            });
            events.push(Event::Ops { n: 1 });
        }
        Trace {
            meta: meta(2000),
            instances: vec![inst("rwsem", LockModel::RwSem, true)],
            events,
            fallbacks: Vec::new(),
        }
    };
    let traces = [mk(0), mk(1), mk(2)];
    // One CPU: the same compute and no transfer, whatever k.
    let one: Vec<f64> = traces.iter().map(|t| rate(&m, t, 1)).collect();
    for r in &one[1..] {
        assert!((r - one[0]).abs() / one[0] < 0.001, "{one:?}");
    }
    // 16 CPUs: the count's line moves at every acquisition and release; each read inside a
    // hold fetches it back (80 ns) and leaves a copy to invalidate, so every added read lowers
    // the rate.
    let many: Vec<f64> = traces.iter().map(|t| rate(&m, t, 16)).collect();
    assert!(
        many[1] < 0.95 * many[0] && many[2] < 0.98 * many[1],
        "rates with 0, 1, 2 reads per hold: {many:?}"
    );
}
