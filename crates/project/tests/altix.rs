//! The SGI Altix 3700 Bx2 (512 CPUs in 256 nodes, a router fabric, 16 KiB pages) and Lameter's
//! 2005 test projected to it: the machine as documented, replays at 512 CPUs against closed
//! forms, the page size followed by what a fault clears, and the lameter capture on the engine.

mod common;

use pagelab_bench::profiles;
use pagelab_project::capture::{CaptureSpec, capture, shape};
use pagelab_project::machine::Machine;
use pagelab_project::project::{ProjectSpec, replay_row};
use pagelab_project::replay::{Replay, ReplaySpec};
use pagelab_project::trace::{Event, Instance, Pinning, Trace, TraceMeta, Window};
use pagelab_sync::Scope;
use pagelab_sync::trace::LockModel;
use pagelab_workloads::{Mode, WorkloadKind};

fn altix() -> Machine {
    Machine::load("altix-3700-512p").unwrap()
}

#[test]
fn the_altix_has_512_cpus_in_256_nodes_and_16_kib_pages() {
    let m = altix();
    assert_eq!(m.nr_cpus(), 512);
    assert_eq!(m.nr_nodes(), 256);
    assert_eq!(m.topology.threads_per_core, 1, "Madison has no SMT");
    assert_eq!(m.memory.page_size, 16 << 10);
    // Two CPUs per node (one SHUB, one front-side bus).
    assert_eq!(m.pos(0).node, m.pos(1).node);
    assert_ne!(m.pos(1).node, m.pos(2).node);
    assert_eq!(m.pos(511).node, 255);
    // Printed and read back, it is the same machine (the fabric, not 65 536 numbers).
    let text = m.to_toml();
    assert!(text.contains("[[numa.fabric.levels]]"), "{text}");
    assert!(!text.contains("distance"), "{text}");
    assert_eq!(Machine::parse(&text, "again").unwrap(), m);
}

/// The matrix is built from the router hierarchy: square, symmetric, 10 on the diagonal, and
/// two nodes are 10 + 10 x the routers between them apart (docs/model.md, section 2): one router
/// within a CR-brick (4 nodes), three within a rack (32 nodes), five through the metarouters.
#[test]
fn the_distance_matrix_counts_the_routers_between_nodes() {
    let m = altix();
    let d = &m.numa.distance;
    assert_eq!(d.len(), 256);
    for (a, row) in d.iter().enumerate() {
        assert_eq!(row.len(), 256);
        assert_eq!(row[a], 10);
        for (b, &v) in row.iter().enumerate() {
            assert_eq!(v, d[b][a], "symmetric at {a}, {b}");
        }
    }
    let f = m.numa.fabric.as_ref().expect("built from a fabric");
    for (a, b, routers) in [
        (0, 1, 1),
        (0, 3, 1),
        (2, 3, 1),
        (3, 4, 3),
        (0, 31, 3),
        (31, 32, 5),
        (0, 255, 5),
        (128, 159, 3),
        (252, 255, 1),
    ] {
        assert_eq!(f.routers(a, b), routers, "{a} {b}");
        assert_eq!(d[a][b], 10 + 10 * routers, "{a} {b}");
    }
    // Each distance has its latency: the local access plus 50 ns per router crossed.
    for (cpu_b, ns) in [
        (1, 132.0),
        (2, 182.0),
        (8, 282.0),
        (64, 382.0),
        (511, 382.0),
    ] {
        assert_eq!(m.transfer_ns(0, cpu_b), ns, "CPU 0 to {cpu_b}");
    }
}

fn meta(workload: &str) -> TraceMeta {
    TraceMeta {
        workload: workload.into(),
        op_unit: "faults".into(),
        pinning: Pinning::Spread,
        shared_vma: true,
        kernel_cpus: 512,
        host_ghz: 1.6,
        ..common::meta(Window::Once, 0)
    }
}

/// `faults` faults of `compute_ns` each, with a trap, an atomic on an mm-scoped line (the RSS
/// counter of atomic RSS) when `rss`, and a page of the engine cleared when `write`.
fn fault_trace(faults: u32, compute_ns: f64, rss: bool, write: bool) -> Trace {
    let mut events = Vec::new();
    for _ in 0..faults {
        events.push(Event::Trap);
        events.push(Event::Compute { ns: compute_ns });
        if rss {
            events.push(Event::Atomic { inst: 0 });
        }
        if write {
            events.push(Event::Write {
                bytes: 4096,
                host_ns: 0.0,
            });
        }
        events.push(Event::Ops { n: 1 });
    }
    let mut m = meta("lameter");
    m.ops = u64::from(faults);
    Trace {
        meta: m,
        instances: vec![Instance {
            class: "rss_stat".into(),
            scope: Scope::Mm,
            model: LockModel::Line,
            sleeps: false,
            rwsem: None,
        }],
        events,
        fallbacks: Vec::new(),
    }
}

fn faults_per_sec(m: &Machine, t: &Trace, tasks: usize, threads: bool) -> f64 {
    let spec = ReplaySpec {
        tasks,
        threads,
        seed: 1,
        samples: 1,
        ops_per_cpu: None,
    };
    let r = Replay::new(m, t, spec).unwrap().run(1).unwrap();
    assert_eq!(r.ops, t.meta.ops * tasks as u64, "every CPU ran its faults");
    r.samples[0]
}

/// A 512-CPU replay finishes, and as the closed forms say: faults that share nothing scale by
/// the CPU count (less the start skew of at most 1 us over a 2 ms run), and faults that all
/// write one line (threads' atomic RSS counter) are bounded by that line: one atomic at a time,
/// each paying at least the nearest transfer (the other CPU of the node) and the atomic.
#[test]
fn a_512_cpu_replay_scales_as_the_closed_form_says() {
    let m = altix();
    let t = fault_trace(1000, 1000.0, true, false);
    let one = faults_per_sec(&m, &t, 1, true);
    // 1000 ns of compute at the host's clock (1.6 GHz, the machine's) and the trap.
    let per_fault_ns = 1000.0 + m.kernel.trap_ns;
    assert!((one - 1e9 / per_fault_ns).abs() / one < 1e-3, "{one}");
    // Processes: the mm's RSS line is private to each, nothing is shared.
    let procs = faults_per_sec(&m, &t, 512, false);
    let scaling = procs / one;
    assert!((scaling - 512.0).abs() / 512.0 < 0.002, "{scaling}");
    // Threads: every fault writes the one line; its atomics are serialised.
    let threads = faults_per_sec(&m, &t, 512, true);
    let ceiling = 1e9 / (m.latency.core_ns + m.latency.atomic_ns);
    let floor = 1e9 / (m.latency.remote_ns["60"] + m.latency.atomic_ns);
    assert!(
        threads <= ceiling * 1.001 && threads >= floor * 0.999,
        "{threads} not within [{floor}, {ceiling}]"
    );
    assert!(threads < procs / 50.0, "{threads} vs {procs}");
}

/// On a machine of 16 KiB pages a fault clears 16 KiB: each traced page write (the engine's 4
/// KiB) costs four times the bytes at the core's bandwidth. Closed form, one task: a fault is
/// the trap plus page_size / core_bandwidth, so the clearing part is 4 times as long.
#[test]
fn a_16_kib_page_quadruples_what_a_fault_clears() {
    let m16 = altix();
    let mut m4 = m16.clone();
    m4.name = "altix-4k".into();
    m4.memory.page_size = 4096;
    let t = fault_trace(200, 0.0, false, true);
    let clear_ns = |m: &Machine| 1e9 / faults_per_sec(m, &t, 1, true) - m.kernel.trap_ns;
    let (c16, c4) = (clear_ns(&m16), clear_ns(&m4));
    let want16 = 16384.0 / m16.memory.core_bandwidth_gbs;
    assert!((c16 - want16).abs() / want16 < 1e-3, "{c16} vs {want16}");
    assert!((c16 / c4 - 4.0).abs() < 4e-3, "{c16} / {c4}");
    // Two CPUs of a node clearing at once share the node's bus: the same closed form.
    let two = faults_per_sec(&m16, &t, 512, false) / 512.0;
    let shared = 1e9 / (m16.kernel.trap_ns + 2.0 * 16384.0 / m16.memory.node_bandwidth_gbs);
    let alone = 1e9 / (m16.kernel.trap_ns + want16);
    assert!(two <= alone * 1.001 && two >= shared * 0.999, "{two}");
}

/// Lameter's repetition is one region split between the threads: each faults its slice in the
/// machine's pages, at most `ops_per_cpu`.
#[test]
fn lameters_region_is_sliced_in_the_machines_pages() {
    let mut spec = ProjectSpec {
        machine: altix(),
        workload: WorkloadKind::Lameter,
        profiles: vec![profiles::load("linux-2.6.13").unwrap()],
        modes: vec![Mode::Threads],
        tasks: vec![1, 512],
        samples: 1,
        captures: 1,
        seed: 1,
        ops_per_cpu: 8192,
        region_bytes: Some(1 << 30),
        kvcache: None,
    };
    spec.check().unwrap();
    assert_eq!(spec.ops_for(512), (1 << 30) / 512 / 16384);
    assert_eq!(spec.ops_for(64), 1024);
    assert_eq!(spec.ops_for(1), 8192, "capped at ops_per_cpu");
    spec.machine.memory.page_size = 4096;
    assert_eq!(spec.ops_for(512), 512, "4 KiB pages: four times the faults");
    spec.region_bytes = None;
    assert_eq!(spec.ops_for(512), 8192);
}

/// The lameter workload captured on the real engine: one shared VMA faulted like pft, its
/// faults counted, and what the 2.6.13 kernels share recorded as the shared lines they are: the
/// atomic RSS counter (one line every thread writes), mmap_sem's count, and with the mm-wide
/// page_table_lock that lock; with the atomic PTE install no page-table lock at all.
#[test]
fn the_lameter_capture_records_its_shared_events() {
    assert_eq!(
        shape(WorkloadKind::Lameter).unwrap(),
        (Window::Once, Pinning::Spread, true)
    );
    let m = altix();
    for (profile, ptl) in [
        ("linux-2.6.13-atomic", false),
        ("linux-2.6.13", true),
        ("linux-2.6.13-atomic-rss-delta", false),
    ] {
        let p = profiles::load(profile).unwrap();
        let mut spec = CaptureSpec::new(WorkloadKind::Lameter, p, m.nr_cpus());
        spec.pft_bytes = 8 << 20;
        let t = capture(&spec).unwrap();
        assert_eq!(t.meta.workload, "lameter");
        assert!(t.meta.shared_vma && t.meta.window == Window::Once);
        assert_eq!(t.meta.ops, 2048, "{profile}: 8 MiB of 4 KiB engine pages");
        let traps = t.events.iter().filter(|e| **e == Event::Trap).count();
        assert_eq!(traps, 2048, "{profile}");
        let class_events = |class: &str| {
            t.events
                .iter()
                .filter(|e| match e {
                    Event::Atomic { inst }
                    | Event::Acquire { inst, .. }
                    | Event::Line { inst, .. }
                    | Event::Store { inst, .. } => t.instances[*inst as usize].class == class,
                    _ => false,
                })
                .count()
        };
        let rss = t.instances.iter().find(|i| i.class == "rss_stat");
        if profile.ends_with("rss-delta") {
            // Per-thread deltas fold into the mm's counter now and then, not per fault.
            assert!(class_events("rss_stat") < 2048 / 4, "{profile}");
        } else {
            let rss = rss.unwrap_or_else(|| panic!("{profile}: no rss_stat line"));
            assert_eq!(rss.scope, Scope::Mm);
            assert!(
                class_events("rss_stat") >= 2048,
                "{profile}: one atomic per fault"
            );
        }
        assert!(
            class_events("mmap_lock") >= 2048,
            "{profile}: mmap_sem per fault"
        );
        assert_eq!(
            class_events("page_table_lock") >= 2048,
            ptl,
            "{profile}: page_table_lock"
        );
        // Replayed on the Altix at 8 threads, the shared line costs: threads are slower per
        // CPU than processes (same trace, nothing shared).
        let row = |mode| {
            replay_row(&m, &t, mode, 8, 1, 1, 512)
                .unwrap()
                .metrics
                .into_iter()
                .find(|(n, _, _)| n == "faults/sec")
                .unwrap()
                .2[0]
        };
        let (thr, procs) = (row(Mode::Threads), row(Mode::Processes));
        assert!(thr < procs, "{profile}: threads {thr} processes {procs}");
    }
}

/// The experiments' list of machine names (the harness cannot load machines) is the
/// projector's, and every experiment's machine loads.
#[test]
fn experiments_name_only_machines_that_ship() {
    let mut shipped: Vec<&str> = pagelab_project::machine::BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let mut listed = pagelab_bench::experiments::MACHINES.to_vec();
    shipped.sort_unstable();
    listed.sort_unstable();
    assert_eq!(shipped, listed);
    for (name, _) in pagelab_bench::experiments::BUILTIN {
        let e = pagelab_bench::experiments::load(name).unwrap();
        if let Some(m) = &e.machine {
            Machine::load(m).unwrap_or_else(|err| panic!("{name}: {err}"));
        }
    }
}
