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
