//! kvcache in the projector: the capture of one memcached worker on the real engine records the
//! shared lines and locks its reclaim touches (MGLRU's sequence numbers and refault counters,
//! the memcg's page counter and events, the swap cache's lock, the lruvec's lock and lists, the
//! swap device's lock), and a kvcache-shaped trace replays to the closed form and is reported
//! as `ops/sec`.

mod common;

use common::TestMachine;
use pagelab_bench::profiles;
use pagelab_project::capture::{CaptureSpec, capture, shape};
use pagelab_project::machine::Machine;
use pagelab_project::project::replay_row;
use pagelab_project::trace::{Event, Instance, Pinning, Trace, Window};
use pagelab_sync::Scope;
use pagelab_sync::trace::LockModel;
use pagelab_workloads::kvcache::KvParams;
use pagelab_workloads::{Mode, WorkloadKind};

/// The experiment's shape, scaled down: 8 Ki keys of 1 KiB in a memcg of 23% of them.
fn small() -> KvParams {
    KvParams {
        keys: 8 << 10,
        value_size: 1024,
        memcg_percent: 23,
        connections: 2,
        pipeline: 8,
        get_ratio: 0,
        ..KvParams::default()
    }
}

fn capture_kv(profile: &str) -> Trace {
    let mut spec = CaptureSpec::new(WorkloadKind::Kvcache, profiles::load(profile).unwrap(), 16);
    spec.kvcache = Some(small());
    spec.kvcache_window = Some(4096);
    capture(&spec).unwrap()
}

fn classes(t: &Trace) -> Vec<&str> {
    let mut v: Vec<&str> = t.instances.iter().map(|i| i.class.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every event the kvcache paths share is in an MGLRU capture, each on its own class; the trace
/// is cyclic, counts requests as `ops` and has whole operations.
#[test]
fn an_mglru_capture_records_aging_eviction_memcg_and_swap() {
    for profile in ["mglru", "mglru-bulk"] {
        let t = capture_kv(profile);
        let c = classes(&t);
        for want in [
            // mm/vmscan.c: inc_max_seq / inc_min_seq write, lru_gen_add_folio reads.
            "lru_gen seq",
            // mm/workingset.c: lru_gen_eviction / lru_gen_refault atomics.
            "lru_gen refault counters",
            // mm/memcontrol.c: page_counter charge and uncharge; memcg_memory_event(MAX).
            "memcg counter",
            "memcg memory_events",
            // mm/swap_state.c: the swap cache's xa_lock on insert and delete.
            "swap cache xa_lock",
            // the lruvec's lock and lists, the swap device's lock (slot batches).
            "lru_lock",
            "lru list",
            "swap_info->lock",
        ] {
            assert!(c.contains(&want), "{profile}: no `{want}` in {c:?}");
        }
        assert_eq!(t.meta.workload, "kvcache");
        assert_eq!(t.meta.op_unit, "ops");
        assert_eq!(t.meta.window, Window::Cycle);
        assert_eq!(t.meta.pinning, Pinning::Spread);
        assert!(t.meta.shared_vma, "memcached's workers share one VMA");
        assert_eq!(t.meta.ops, 4096, "{profile}: one op per request");
        // The sequence line is written (aging) and read (adds, reclaimers) in the window.
        let seq = t
            .instances
            .iter()
            .position(|i| i.class == "lru_gen seq")
            .unwrap() as u32;
        let (mut reads, mut writes) = (0, 0);
        for e in &t.events {
            if let Event::Line { inst, write, .. } = *e
                && inst == seq
            {
                if write {
                    writes += 1;
                } else {
                    reads += 1;
                }
            }
        }
        assert!(
            reads > 0 && writes > 0,
            "{profile}: {reads} reads, {writes} writes"
        );
        // Reclaim's isolations and the generation updates after an unlink (`folio_inc_gen`'s
        // exchange, `set_mask_bits`) are locked instructions after the unlink's stores:
        // recorded as fences.
        let fences = t.events.iter().filter(|e| **e == Event::Fence).count();
        assert!(fences > 0, "{profile}: no fence");
    }
}

/// The classic LRU has no generations: a capture with it records none of MGLRU's lines, but
/// the memcg and the swap cache as MGLRU's does.
#[test]
fn a_classic_lru_capture_has_no_generation_lines() {
    let t = capture_kv("linux-6.7");
    let c = classes(&t);
    assert!(!c.iter().any(|n| n.starts_with("lru_gen")), "{c:?}");
    for want in ["memcg counter", "swap cache xa_lock", "lru_lock"] {
        assert!(c.contains(&want), "no `{want}` in {c:?}");
    }
}

#[test]
fn kvcache_is_projectable_as_threads_of_one_vma() {
    assert_eq!(
        shape(WorkloadKind::Kvcache).unwrap(),
        (Window::Cycle, Pinning::Spread, true)
    );
}

/// A kvcache-shaped trace (cyclic, requests as `ops`): each request computes `C` and takes one
/// machine-wide line with an atomic (the swap cache lock). One server thread: `1e9 / C` requests
/// a second, stored as `ops/sec`. Two on two cores: the line alternates between them, so each
/// request also waits for the line's transfer from the other core and the atomic on it,
/// `1e9 / (C + core_ns + atomic_ns)` each.
#[test]
fn a_kvcache_trace_replays_to_its_closed_form_as_ops_per_sec() {
    let c_ns = 2000.0;
    let m: Machine = TestMachine::new(2).build();
    let mut t = Trace {
        meta: common::meta(Window::Cycle, 1),
        instances: vec![Instance {
            class: "swap cache xa_lock".into(),
            scope: Scope::Machine,
            model: LockModel::Line,
            sleeps: false,
            rwsem: None,
        }],
        events: (0..256)
            .flat_map(|_| {
                [
                    Event::Compute { ns: c_ns },
                    Event::Atomic { inst: 0 },
                    Event::Ops { n: 1 },
                ]
            })
            .collect(),
        fallbacks: Vec::new(),
    };
    t.meta.ops = 256;
    t.meta.workload = "kvcache".into();
    t.meta.pinning = Pinning::Spread;
    t.meta.shared_vma = true;
    let one = replay_row(&m, &t, Mode::Threads, 1, 4, 1, 1000).unwrap();
    let (name, higher, samples) = &one.metrics[0];
    assert_eq!((name.as_str(), *higher), ("ops/sec", true));
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    assert!(
        (mean - 1e9 / c_ns).abs() / (1e9 / c_ns) < 0.01,
        "{mean} ops/s"
    );
    let two = replay_row(&m, &t, Mode::Threads, 2, 4, 1, 1000).unwrap();
    let mean2 = two.metrics[0].2.iter().sum::<f64>() / two.metrics[0].2.len() as f64;
    let want = 2.0 * 1e9 / (c_ns + 50.0 + 5.0);
    assert!(
        (mean2 - want).abs() / want < 0.02,
        "{mean2} ops/s at 2 threads, closed form {want}"
    );
}

/// The posting's machine loads and passes the physical checks: 2 sockets of 48 cores with 2
/// threads (192 CPUs) in NPS1 (2 nodes); spread server threads alternate sockets, so the first
/// two meet across the Infinity Fabric link (SLIT 32).
#[test]
fn the_epyc_7k62_loads_with_its_topology() {
    let m = Machine::load("epyc-7k62-2s").unwrap();
    m.check().unwrap();
    assert_eq!((m.nr_cpus(), m.nr_nodes()), (192, 2));
    let (a, b) = (m.cpu_of(0, Pinning::Spread), m.cpu_of(1, Pinning::Spread));
    assert_ne!(m.pos(a).node, m.pos(b).node);
    assert_eq!(m.transfer_ns(a, b), 200.0);
    assert_eq!(m.transfer_ns(a, m.cpu_of(2, Pinning::Spread)), 100.0);
}
