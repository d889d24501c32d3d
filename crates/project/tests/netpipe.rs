//! netpipe in the projector: a pair captured on the real engine, and N pairs replayed against
//! closed forms.

mod common;

use common::{TestMachine, meta};
use pagelab_bench::profiles::Profile;
use pagelab_project::netpipe::{PairCaptureSpec, capture_pair};
use pagelab_project::trace::{Event, Fallback, Instance, PAIR_RECEIVER, Trace, Window};
use pagelab_project::{Replay, ReplaySpec};
use pagelab_sync::Scope;
use pagelab_sync::trace::{LockModel, Sym};
use pagelab_workloads::netpipe::NetpipeParams;

fn profile(name: &str) -> Profile {
    pagelab_bench::profiles::load(name).unwrap()
}

/// Acquisitions of instances of class `class` in `events`.
fn acquires(t: &Trace, events: &[Event], class: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Acquire { inst, .. } if t.instances[*inst as usize].class == class))
        .count()
}

fn ops(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| match e {
            Event::Ops { n } => u64::from(*n),
            _ => 0,
        })
        .sum()
}

#[test]
fn a_pair_is_captured_from_the_engine_in_whole_turns_with_what_both_sides_share() {
    let step = NetpipeParams::new(1, 16384).release() as u64;
    let mut zone = Vec::new();
    for name in ["vanilla-4.9", "hopcpu"] {
        let t = capture_pair(&PairCaptureSpec {
            profile: profile(name),
            kernel_cpus: 4,
            send_size: 16384,
            messages: 700,
        })
        .unwrap();
        assert_eq!(t.meta.op_unit, "send-16384 messages");
        assert_eq!(pagelab_project::netpipe::metric_of(&t), "send-16384");
        assert_eq!(t.meta.window, Window::Cycle);
        // A capture's guard, so that the host's interruptions are taken out of both sides
        // (`Trace::from_raw_pair`), and the longest gap the kept recording held is reported.
        let guard = t.meta.guard.as_ref().expect("a captured pair has a guard");
        assert!(guard.longest_gap_ns > 0.0, "{guard:?}");
        assert!(
            t.meta.compute_scale > 0.0 && t.meta.compute_scale <= 1.0,
            "{}",
            t.meta.compute_scale
        );
        // Whole turns: each receiver turn takes exactly one release step (a quarter of the
        // receive buffer), at least the messages asked for in all; the sender tops the socket
        // up to what was given back, which is the messages read but for those read and not
        // yet given back (fewer than a step) at either end of the window.
        let turns = t.receiver_turns().expect("a pair trace");
        assert_eq!(turns.len() as u64, 700u64.div_ceil(step));
        for turn in turns {
            assert_eq!(ops(turn), step);
        }
        let received = step * turns.len() as u64;
        assert!(
            t.meta.ops.abs_diff(received) < step,
            "{name}: {} sent, {received} received",
            t.meta.ops
        );
        assert_eq!(ops(&t.events), t.meta.ops);
        // The socket's lines are per-mm instances, written by the sender and read by the
        // receiver on the same instances.
        let class_of = |e: &Event| match e {
            Event::Line { inst, write, .. } => {
                Some((t.instances[*inst as usize].class.as_str(), *write, *inst))
            }
            _ => None,
        };
        let tx_data: std::collections::HashSet<u32> = t
            .events
            .iter()
            .filter_map(class_of)
            .filter(|(c, w, _)| *c == "skb data" && *w)
            .map(|x| x.2)
            .collect();
        let rx_data: std::collections::HashSet<u32> = turns
            .iter()
            .flatten()
            .filter_map(class_of)
            .filter(|(c, w, _)| *c == "skb data" && !*w)
            .map(|x| x.2)
            .collect();
        assert!(!tx_data.is_empty());
        assert_eq!(
            tx_data, rx_data,
            "{name}: the receiver reads what the sender wrote"
        );
        for i in &t.instances {
            if i.class.starts_with("socket") || i.class == "skb data" {
                assert_eq!(i.scope, Scope::Mm);
            }
        }
        // zone->lock, one instance for both sides.
        let rx: Vec<Event> = turns.iter().flatten().copied().collect();
        let (a, f) = (
            acquires(&t, &t.events, "zone->lock"),
            acquires(&t, &rx, "zone->lock"),
        );
        zone.push((name, a, f, t.meta.ops, received));
    }
    // 16384-byte sends are order-3 kmalloc_large blocks: without high-order pcp lists every
    // allocation and every free takes zone->lock; with them only refills and drains do.
    let (_, va, vf, sent, received) = zone[0];
    assert_eq!((va as u64, vf as u64), (sent, received), "vanilla-4.9");
    // Each refill serves several allocations and each drain several frees.
    let (_, ha, hf, _, msgs) = zone[1];
    assert!(
        (ha as u64) < msgs / 2 && (hf as u64) < msgs / 2,
        "hopcpu takes zone->lock {ha} + {hf} times for {msgs} messages"
    );
}

/// A hand-built pair trace: the sender computes `tx_ns` per message, the receiver `rx_ns`,
/// each marking its message boundary; with `lock`, each side holds a machine-wide lock for
/// `hold_ns` of its message (the allocator's `zone->lock`).
fn pair_trace(tx_ns: f64, rx_ns: f64, lock: Option<f64>, depth: u64) -> Trace {
    let side = |ns: f64| {
        let mut v = Vec::new();
        match lock {
            Some(h) => {
                v.push(Event::Compute { ns: ns - h });
                v.push(Event::Acquire {
                    inst: 0,
                    shared: false,
                    trylock: false,
                });
                v.push(Event::Compute { ns: h });
                v.push(Event::Release {
                    inst: 0,
                    shared: false,
                });
            }
            None => v.push(Event::Compute { ns }),
        }
        v.push(Event::Ops { n: 1 });
        v
    };
    let turns = 64;
    let events: Vec<Event> = (0..depth * turns).flat_map(|_| side(tx_ns)).collect();
    let segments = (0..turns)
        .map(|_| (0..depth).flat_map(|_| side(rx_ns)).collect())
        .collect();
    Trace {
        meta: meta(Window::Cycle, depth * turns),
        instances: vec![Instance {
            class: "zone->lock".into(),
            scope: Scope::Machine,
            model: LockModel::Queued,
            sleeps: false,
            rwsem: None,
        }],
        events,
        fallbacks: vec![Fallback {
            class: PAIR_RECEIVER.into(),
            segments,
        }],
    }
}

fn rate(t: &Trace, cores: usize, tasks: usize) -> f64 {
    let m = TestMachine::new(cores).build();
    let r = Replay::new(
        &m,
        t,
        ReplaySpec {
            tasks,
            threads: true,
            seed: 1,
            samples: 4,
            ops_per_cpu: None,
        },
    )
    .unwrap()
    .run(1)
    .unwrap();
    r.samples.iter().sum::<f64>() / r.samples.len() as f64
}

#[test]
fn a_pair_runs_at_its_slower_side_and_pairs_add_up() {
    // Sender 100 ns a message, receiver 300 ns: the socket fills and the pair runs at the
    // receiver's pace, 1/300 ns = 3.33 M messages per second; four pairs on eight cores,
    // sharing nothing, four times that. Messages count once (when received).
    let t = pair_trace(100.0, 300.0, None, 8);
    let one = rate(&t, 8, 2);
    assert!((one / (1e9 / 300.0) - 1.0).abs() < 0.01, "{one}");
    let four = rate(&t, 8, 8);
    assert!((four / (4e9 / 300.0) - 1.0).abs() < 0.01, "{four}");
    // The other way round: the receiver waits for the sender.
    let t = pair_trace(250.0, 100.0, None, 8);
    let one = rate(&t, 8, 2);
    assert!((one / (1e9 / 250.0) - 1.0).abs() < 0.01, "{one}");
}

#[test]
fn pairs_meet_at_a_machine_lock_and_saturate_it() {
    // Each side holds the lock for 100 ns of its 400 ns message: one pair uses it 200 ns per
    // message; with a queued lock the lock saturates at one message per 200 ns of holds plus
    // a transfer (50 ns) per hand-over between cores. Eight pairs are limited by the lock:
    // at most 1e9 / 200 = 5 M messages per second, whatever the pairs' count; one pair runs
    // at its own pace, 1e9 / 400 plus the transfers of the lock between its two CPUs.
    let t = pair_trace(400.0, 400.0, Some(100.0), 8);
    let one = rate(&t, 16, 2);
    assert!(one < 1e9 / 400.0 && one > 1e9 / 500.0, "{one}");
    let eight = rate(&t, 16, 16);
    // Each hold is followed by a hand-over transfer when contended: 100 + 50 ns per hold,
    // two holds per message.
    let bound = 1e9 / (2.0 * 150.0);
    assert!(eight <= 1e9 / 200.0, "{eight}");
    assert!((eight / bound - 1.0).abs() < 0.1, "{eight} vs {bound}");
}

#[test]
fn an_odd_task_count_is_refused_for_a_pair_trace() {
    let t = pair_trace(100.0, 100.0, None, 4);
    let m = TestMachine::new(4).build();
    let e = Replay::new(
        &m,
        &t,
        ReplaySpec {
            tasks: 3,
            threads: true,
            seed: 1,
            samples: 1,
            ops_per_cpu: None,
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("not a whole number of pairs"), "{e}");
    // The lines a pair shares with nobody else are its own: a per-mm line written by the
    // sender and read by the receiver costs each pair a transfer per message, not a queue
    // behind the other pairs.
    let mut t = pair_trace(200.0, 200.0, None, 8);
    t.instances.push(Instance {
        class: "socket queue slot".into(),
        scope: Scope::Mm,
        model: LockModel::Line,
        sleeps: false,
        rwsem: None,
    });
    let line = |write| Event::Line {
        inst: 1,
        write,
        sym: Sym::Here,
    };
    let mut ev = Vec::new();
    for e in &t.events {
        ev.push(*e);
        if matches!(e, Event::Ops { .. }) {
            ev.push(line(true));
        }
    }
    t.events = ev;
    for seg in &mut t.fallbacks[0].segments {
        let mut v = Vec::new();
        for e in seg.iter() {
            v.push(*e);
            if matches!(e, Event::Ops { .. }) {
                v.push(line(false));
            }
        }
        *seg = v;
    }
    let one = rate(&t, 16, 2);
    let eight = rate(&t, 16, 16);
    assert!((eight / (8.0 * one) - 1.0).abs() < 0.02, "{one} {eight}");
    assert!(one < 1e9 / 200.0, "the transfers cost the pair: {one}");
}
