//! The research designs' benchmarks through the binary: RadixVM's mapbench and CortenMM's tests
//! run on the engine and on the host kernel and are stored as `ops/sec` samples; what they
//! cannot run is refused in one line and leaves the store as it was.

mod common;
use common::{Dir, fails_untouched, ok};

#[test]
fn research_benchmarks_run_and_store_ops_per_second() {
    let d = Dir::new("cli-research");
    let db = d.db();
    let quick = ["--samples", "2", "--warmup", "1", "--interval-ms", "40"];
    // Threads by default: these have no processes mode.
    for w in ["cortenmm-pf-high", "cortenmm-munmap-low", "mapbench-shared"] {
        let mut args = vec!["run", w, "--tasks", "1,2", "--requests", "8"];
        args.extend(quick);
        let out = ok(&db, &args);
        assert!(
            out.contains(&format!("{w} on engine:linux-6.7")) && out.contains("ops/sec Hmean"),
            "{out}"
        );
        assert!(out.contains("│ threads"), "{out}");
    }
    // mapbench in processes mode, on the host kernel for real.
    let mut args = vec!["run", "mapbench", "--target", "kernel", "--tasks", "1,2"];
    args.extend(quick);
    let out = ok(&db, &args);
    assert!(out.contains("│ processes"), "{out}");
    let runs = ok(&db, &["runs"]);
    for w in [
        "cortenmm-pf-high",
        "cortenmm-munmap-low",
        "mapbench-shared",
        "mapbench",
    ] {
        assert!(runs.contains(w), "{runs}");
    }
    let csv = ok(&db, &["export", "--workload", "cortenmm-pf-high"]);
    assert_eq!(
        csv.lines().filter(|l| l.contains("ops/sec")).count(),
        4,
        "{csv}"
    );

    // Refused in one line, nothing stored.
    fails_untouched(
        &db,
        &["run", "mapbench-shared", "--mode", "processes"],
        "no processes mode",
    );
    fails_untouched(
        &db,
        &["run", "cortenmm-pf-low", "--requests", "0"],
        "--requests",
    );
    fails_untouched(
        &db,
        &["run", "cortenmm-munmap-high", "--requests", "257"],
        "--requests",
    );
    fails_untouched(&db, &["run", "mapbench", "--map-pages", "0"], "--map-pages");
    fails_untouched(
        &db,
        &[
            "run",
            "mapbench",
            "--map-pages",
            "1073741824",
            "--tasks",
            "4",
        ],
        "engine arena",
    );
    fails_untouched(
        &db,
        &[
            "run",
            "mapbench",
            "--target",
            "kernel",
            "--map-pages",
            "1073741824",
            "--tasks",
            "4",
        ],
        "available",
    );
    fails_untouched(
        &db,
        &["run", "cortenmm-pf", "--tasks", "1"],
        "unknown workload",
    );
    fails_untouched(&db, &["run", "mapbench", "--samples", "0"], "--samples");
}

/// A beyond-linux member projects (the research workloads are replayed, `ops/sec`), and
/// `report --verdicts` reads every stored beyond-linux run into the verdicts table; with none
/// stored it says so in one line. The set's name runs its members: a bad flag is refused by the
/// first, before anything is measured.
#[test]
fn a_beyond_linux_projection_feeds_the_verdicts() {
    let d = Dir::new("cli-beyond");
    let db = d.db();
    fails_untouched(&db, &["report", "--verdicts"], "no results store");
    let out = ok(
        &db,
        &[
            "project",
            "--experiment",
            "beyond-linux-cortenmm-pf-high",
            "--machine",
            "dev-host",
            "--tasks",
            "2",
            "--captures",
            "1",
            "--samples",
            "1",
        ],
    );
    assert!(out.contains("ops/sec"), "{out}");
    let v = ok(&db, &["report", "--verdicts"]);
    assert!(v.starts_with("| workload | profile vs linux-6.7 |"), "{v}");
    for p in ["pvl-refcount", "rcu-vma", "range-vm", "llfree"] {
        assert!(
            v.contains(&format!("| cortenmm-pf-high | {p} |")),
            "{p}: {v}"
        );
    }
    assert!(v.contains("dev-host, 2 CPUs"), "{v}");
    // The set names each member as it starts it, then the member's refusal is the error.
    let before = std::fs::read(&db).unwrap();
    let o = common::pagelab(&db, &["reproduce", "beyond-linux", "--tasks", "0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "pagelab: beyond-linux 1/12: beyond-linux-page_fault1",
            "pagelab: error: `0` in task list `0` is not a positive number"
        ],
        "{err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before, "the store changed");
}
