//! Import of mmtests run directories. The fixtures are written here by hand from the layout
//! mmtests leaves (`work/log/<run>/iter-<N>/<test>/logs/`), with numbers chosen to pass the
//! single-file importers' consistency checks; none is a captured log.

use std::path::Path;

use pagelab_bench::import::{ImportError, ImportOptions};
use pagelab_bench::mmtests::{is_run_dir, read_dir};
use pagelab_bench::results::{Origin, RunData, Status};

/// What `wis-bench` leaves of `./page_fault1_processes -t 2 -s 3` after deleting the first
/// eight lines: `measurement`, the measured seconds, `average:` (the mean of the totals).
pub const BENCHLOG_T2: &str = "measurement
min:100 max:110 total:210
min:105 max:115 total:220
min:100 max:120 total:230
average:220
";

/// pft rows as pft prints them, one per iteration: 262144 faults (1 GiB of 4 KiB pages) over
/// User + System and over Wall.
pub const PFT_T2: &str = "   1    2   1     0.02s     0.98s     0.50s  262144.000 524288.000
   1    2   1     0.04s     1.96s     1.00s  131072.000 262144.000
";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A run directory with two iterations of wis-pf (page_fault1 both models, page_fault2
/// processes) and one of pft, with the files mmtests leaves beside the logs.
fn run_dir(root: &Path) {
    for it in ["iter-0", "iter-1"] {
        let logs = format!("{it}/wis-pf/logs");
        write(
            root,
            &format!("{logs}/benchlog-page_fault1_processes-2"),
            BENCHLOG_T2,
        );
        write(
            root,
            &format!("{logs}/benchlog-page_fault1_threads-2"),
            BENCHLOG_T2,
        );
        write(
            root,
            &format!("{logs}/time-page_fault1_processes-2"),
            "0.1user 2.0system\n",
        );
        write(
            root,
            &format!("{logs}/workloads"),
            "page_fault1,page_fault2\n",
        );
    }
    write(
        root,
        "iter-0/wis-pf/logs/benchlog-page_fault2_processes-2",
        BENCHLOG_T2,
    );
    write(root, "iter-0/pft/logs/pft-2.log", PFT_T2);
    write(root, "iter-0/pft/logs/mmtests.log.gz", "not read\n");
}

fn opts() -> ImportOptions {
    ImportOptions {
        label: "v6.7".into(),
        command: "pagelab import test".into(),
        ..ImportOptions::default()
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn run<'a>(runs: &'a [RunData], workload: &str) -> &'a RunData {
    runs.iter()
        .find(|r| r.meta.workload == workload)
        .unwrap_or_else(|| panic!("no {workload} in {runs:#?}"))
}

#[test]
fn wis_and_pft_one_run_per_workload_iterations_as_repeats() {
    let d = tmp();
    run_dir(d.path());
    assert!(is_run_dir(d.path()));
    let runs = read_dir(d.path(), &opts()).unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.meta.workload.as_str()).collect();
    assert_eq!(names, ["page_fault1", "page_fault2", "pft"]);
    let pf1 = run(&runs, "page_fault1");
    assert_eq!(pf1.meta.label, "v6.7");
    assert_eq!(pf1.meta.origin, Origin::Imported);
    assert_eq!(pf1.meta.target, "will-it-scale");
    assert_eq!(pf1.status, Status::Complete);
    // Every `total:` is a sample, as mmtests' parser takes them; iter-1 is repeat 1.
    let mut got: Vec<(String, u32, u32, Vec<f64>)> = pf1
        .samples
        .iter()
        .map(|(k, r, v)| (k.mode.clone(), k.tasks, *r, v.clone()))
        .collect();
    got.sort_by(|a, b| (&a.0, a.2).cmp(&(&b.0, b.2)));
    let t = vec![210.0, 220.0, 230.0];
    assert_eq!(
        got,
        [
            ("processes".into(), 2, 0, t.clone()),
            ("processes".into(), 2, 1, t.clone()),
            ("threads".into(), 2, 0, t.clone()),
            ("threads".into(), 2, 1, t.clone()),
        ]
    );
    assert!(pf1.samples.iter().all(|(k, _, _)| k.metric == "faults/sec"));
    let pft = run(&runs, "pft");
    assert_eq!(pft.meta.target, "pft");
    // Each row is a repetition; the mode is pft's default, threads.
    let cpu: Vec<(u32, Vec<f64>)> = pft
        .samples
        .iter()
        .filter(|(k, _, _)| k.metric == "faults/cpu")
        .map(|(k, r, v)| {
            assert_eq!((k.mode.as_str(), k.tasks), ("threads", 2));
            (*r, v.clone())
        })
        .collect();
    assert_eq!(cpu, [(0, vec![262144.0]), (1, vec![131072.0])]);
    // --mode says what mmtests does not record.
    let o = ImportOptions {
        mode: Some("processes".into()),
        ..opts()
    };
    let runs = read_dir(d.path(), &o).unwrap();
    assert!(
        run(&runs, "pft")
            .samples
            .iter()
            .all(|(k, _, _)| k.mode == "processes")
    );
    // ... and never overrides the model a wis log's name gives.
    assert!(
        run(&runs, "page_fault1")
            .samples
            .iter()
            .any(|(k, _, _)| k.mode == "threads")
    );
}

#[test]
fn split_logs_and_an_interrupted_run() {
    let d = tmp();
    write(
        d.path(),
        "iter-0/wis-pf/logs/benchlog-page_fault1_processes-2-1",
        BENCHLOG_T2,
    );
    // No `average:`: interrupted, its samples kept, the run incomplete.
    let cut_short = BENCHLOG_T2.replace("average:220\n", "");
    write(
        d.path(),
        "iter-0/wis-pf/logs/benchlog-page_fault1_processes-2-2",
        &cut_short,
    );
    let runs = read_dir(d.path(), &opts()).unwrap();
    let pf1 = run(&runs, "page_fault1");
    assert_eq!(pf1.status, Status::Incomplete);
    let repeats: Vec<u32> = pf1.samples.iter().map(|(_, r, _)| *r).collect();
    assert_eq!(repeats, [0, 1]);
}

fn err(dir: &Path) -> String {
    let e: ImportError = read_dir(dir, &opts()).unwrap_err();
    let s = e.to_string();
    assert_eq!(s.lines().count(), 1, "{s}");
    s
}

#[test]
fn not_mmtests_or_neither_test_is_refused_naming_the_path() {
    let d = tmp();
    write(d.path(), "notes.txt", "hello\n");
    let e = err(d.path());
    assert!(e.starts_with(&d.path().display().to_string()), "{e}");
    assert!(e.contains("not an mmtests results directory"), "{e}");
    assert!(e.contains("iter-<N>/pft/logs/pft-<tasks>.log"), "{e}");
    // work/log, holding run directories: told which to give.
    run_dir(&d.path().join("v6.7"));
    let e = err(d.path());
    assert!(e.contains("holds the mmtests runs v6.7"), "{e}");
    // A run of other tests only.
    let other = tmp();
    write(other.path(), "iter-0/stream/logs/stream-1.log", "1 2 3\n");
    write(other.path(), "iter-0/wis-pf/nologs", "x\n");
    let e = err(other.path());
    assert!(
        e.contains("holds neither wis (will-it-scale) nor pft results"),
        "{e}"
    );
}

#[test]
fn a_cut_or_malformed_log_refuses_the_directory() {
    let d = tmp();
    run_dir(d.path());
    // Cut in the middle of a number, as a copy stopped short leaves it.
    let cut = "   1    2   1     0.02s     0.98s     0.50s  262144.000 524288.000\n   1    2   1     0.04s     1.96s     1.00s  1310";
    write(d.path(), "iter-0/pft/logs/pft-2.log", cut);
    let e = err(d.path());
    assert!(
        e.contains("iter-0/pft/logs/pft-2.log:2: the file ends inside this line"),
        "{e}"
    );

    let d = tmp();
    run_dir(d.path());
    // A total edited so that average: no longer is their mean.
    let edited = BENCHLOG_T2.replace("total:230", "total:239");
    write(
        d.path(),
        "iter-1/wis-pf/logs/benchlog-page_fault1_threads-2",
        &edited,
    );
    let e = err(d.path());
    assert!(
        e.contains(
            "iter-1/wis-pf/logs/benchlog-page_fault1_threads-2:5: average:220 is not the mean"
        ),
        "{e}"
    );

    let d = tmp();
    run_dir(d.path());
    write(
        d.path(),
        "iter-0/wis-pf/logs/benchlog-page_fault1-2",
        BENCHLOG_T2,
    );
    let e = err(d.path());
    assert!(
        e.contains("benchlog-page_fault1-2: expected a will-it-scale log named"),
        "{e}"
    );

    // An empty pft log (pft-bench truncates it before the first iteration).
    let d = tmp();
    run_dir(d.path());
    write(d.path(), "iter-0/pft/logs/pft-4.log", "");
    let e = err(d.path());
    assert!(e.contains("pft-4.log"), "{e}");
}
