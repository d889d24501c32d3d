//! The results store: round trips, filters, interrupted and atomic runs, concurrent writers
//! (threads and processes), and refusing newer, foreign, corrupt and read-only files without
//! changing them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use pagelab_bench::results::{
    CounterRow, Origin, RunData, RunFilter, RunMeta, SampleKey, SampleRow, Status,
};
use pagelab_bench::store::{SCHEMA_VERSION, Store, StoreError};

fn meta(label: &str, workload: &str) -> RunMeta {
    RunMeta {
        label: label.into(),
        workload: workload.into(),
        target: "engine".into(),
        origin: Origin::Measured,
        profile: Some("baseline".into()),
        profile_toml: Some("[lru]\npolicy = \"mglru\"\n".into()),
        host_json: Some(r#"{"cpus":8,"model":"test"}"#.into()),
        machine: None,
        experiment: None,
        pagelab_version: "0.1.0".into(),
        command: format!("pagelab run {workload} --label {label}"),
    }
}

fn key(mode: &str, tasks: u32, metric: &str) -> SampleKey {
    SampleKey {
        mode: mode.into(),
        tasks,
        metric: metric.into(),
        higher_is_better: true,
    }
}

fn all() -> RunFilter {
    RunFilter::default()
}

fn ids(runs: &[pagelab_bench::results::StoredRun]) -> Vec<i64> {
    runs.iter().map(|r| r.id).collect()
}

/// A plain connection, to look at the file the way another tool would.
fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

fn count(path: &Path, table: &str) -> i64 {
    raw(path)
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// A store with two complete runs of 500 samples each, for the tests that refuse or read files.
fn populated(path: &Path) -> Vec<i64> {
    populated_in(&Store::open(path).unwrap())
}

#[test]
fn round_trip_of_a_run_with_samples_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/dir/results.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.path(), path);
    let mut m = meta("mglru", "page_fault1");
    m.experiment = Some("lru-scaling".into());
    m.machine = Some("2-socket".into());
    let run = store.begin_run(&m).unwrap();

    let fps = key("threads", 4, "faults/sec");
    let fpc = SampleKey {
        higher_is_better: false,
        ..key("processes", 2, "faults/cpu")
    };
    // Written out of order, and one set in two appends, to check ordering and seq numbering.
    store.add_samples(run, &fps, 1, &[10.0, 11.0]).unwrap();
    store.add_samples(run, &fpc, 0, &[3.0]).unwrap();
    store.add_samples(run, &fps, 0, &[1.0, 2.0]).unwrap();
    store.add_samples(run, &fps, 0, &[3.0]).unwrap();
    store.add_samples(run, &fpc, 1, &[4.0, 5.0]).unwrap();
    store.add_samples(run, &fps, 0, &[]).unwrap();
    let counters = vec![
        ("lock:lru:contended".to_string(), 17.0),
        ("event:pgfault".to_string(), 1e9),
    ];
    store.add_counters(run, "threads", 4, 1, &counters).unwrap();
    store
        .add_counters(run, "threads", 4, 0, &counters[..1])
        .unwrap();
    store.finish_run(run, Status::Complete).unwrap();
    drop(store);

    let store = Store::open_read(&path).unwrap();
    let runs = store.runs(&all()).unwrap();
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r.id, run);
    assert_eq!(r.meta, m);
    assert_eq!(r.status, Status::Complete);
    assert!(is_rfc3339_utc(&r.started), "{}", r.started);
    let finished = r.finished.as_deref().unwrap();
    assert!(is_rfc3339_utc(finished), "{finished}");
    assert!(finished >= r.started.as_str());
    assert_eq!(r.nr_samples, 8);

    let got: Vec<(String, u32, u32, u32, f64, bool)> = store
        .samples(&[run])
        .unwrap()
        .into_iter()
        .map(|s| {
            assert_eq!((s.run_id, s.label.as_str()), (run, "mglru"));
            assert_eq!(
                (s.workload.as_str(), s.origin),
                ("page_fault1", Origin::Measured)
            );
            (
                s.key.mode,
                s.key.tasks,
                s.repeat,
                s.seq,
                s.value,
                s.key.higher_is_better,
            )
        })
        .collect();
    let want: Vec<(String, u32, u32, u32, f64, bool)> = [
        ("processes", 2, 0, 0, 3.0, false),
        ("processes", 2, 1, 0, 4.0, false),
        ("processes", 2, 1, 1, 5.0, false),
        ("threads", 4, 0, 0, 1.0, true),
        ("threads", 4, 0, 1, 2.0, true),
        ("threads", 4, 0, 2, 3.0, true),
        ("threads", 4, 1, 0, 10.0, true),
        ("threads", 4, 1, 1, 11.0, true),
    ]
    .into_iter()
    .map(|(m, t, r, s, v, h)| (m.to_string(), t, r, s, v, h))
    .collect();
    assert_eq!(got, want);

    let c = |repeat, name: &str, value| CounterRow {
        run_id: run,
        mode: "threads".into(),
        tasks: 4,
        repeat,
        name: name.into(),
        value,
    };
    assert_eq!(
        store.counters(&[run]).unwrap(),
        vec![
            c(0, "lock:lru:contended", 17.0),
            c(1, "event:pgfault", 1e9),
            c(1, "lock:lru:contended", 17.0),
        ]
    );
    assert!(store.samples(&[]).unwrap().is_empty());
    assert!(store.samples(&[run + 1]).unwrap().is_empty());
    assert!(store.counters(&[]).unwrap().is_empty());
}

#[test]
fn samples_are_ordered_across_runs_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    let a = store.begin_run(&meta("a", "w")).unwrap();
    let b = store.begin_run(&meta("b", "w")).unwrap();
    // tasks must sort as numbers (2 < 10), metrics as text.
    store
        .add_samples(b, &key("threads", 1, "x"), 0, &[9.0])
        .unwrap();
    store
        .add_samples(a, &key("threads", 10, "x"), 0, &[1.0])
        .unwrap();
    store
        .add_samples(a, &key("threads", 2, "y"), 0, &[2.0])
        .unwrap();
    store
        .add_samples(a, &key("threads", 2, "x"), 0, &[3.0])
        .unwrap();
    let rows: Vec<(i64, u32, String)> = store
        .samples(&[b, a])
        .unwrap()
        .into_iter()
        .map(|s: SampleRow| (s.run_id, s.key.tasks, s.key.metric))
        .collect();
    assert_eq!(
        rows,
        vec![
            (a, 2, "x".into()),
            (a, 2, "y".into()),
            (a, 10, "x".into()),
            (b, 1, "x".into()),
        ]
    );
    assert_eq!(store.samples(&[b]).unwrap().len(), 1);
}

#[test]
fn filters_select_by_any_of_ids_and_labels_and_by_equality() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    let add = |label: &str, workload: &str, origin, experiment: Option<&str>, status| {
        let mut m = meta(label, workload);
        m.origin = origin;
        m.experiment = experiment.map(str::to_string);
        store
            .insert_run(&RunData {
                meta: m,
                status,
                samples: vec![(key("threads", 1, "f"), 0, vec![1.0, 2.0])],
            })
            .unwrap()
    };
    let r1 = add(
        "base",
        "pf1",
        Origin::Measured,
        Some("e1"),
        Status::Complete,
    );
    let r2 = add(
        "new",
        "pf1",
        Origin::Measured,
        Some("e1"),
        Status::Incomplete,
    );
    let r3 = add("base", "pft", Origin::Imported, None, Status::Complete);
    let r4 = add(
        "proj",
        "pf1",
        Origin::Projected,
        Some("e2"),
        Status::Complete,
    );
    let r5 = add("new", "pft", Origin::Measured, None, Status::Complete);
    let sel = |f: RunFilter| ids(&store.runs(&f).unwrap());

    assert_eq!(sel(all()), vec![r1, r2, r3, r4, r5]);
    assert_eq!(
        sel(RunFilter {
            ids: vec![r4, r1, 999],
            ..all()
        }),
        vec![r1, r4]
    );
    assert_eq!(
        sel(RunFilter {
            labels: vec!["new".into(), "proj".into()],
            ..all()
        }),
        vec![r2, r4, r5]
    );
    assert_eq!(
        sel(RunFilter {
            workload: Some("pft".into()),
            ..all()
        }),
        vec![r3, r5]
    );
    assert_eq!(
        sel(RunFilter {
            origin: Some(Origin::Imported),
            ..all()
        }),
        vec![r3]
    );
    assert_eq!(
        sel(RunFilter {
            status: Some(Status::Incomplete),
            ..all()
        }),
        vec![r2]
    );
    assert_eq!(
        sel(RunFilter {
            experiment: Some("e1".into()),
            ..all()
        }),
        vec![r1, r2]
    );
    // Fields combine with AND; ids and labels are each "any of".
    assert_eq!(
        sel(RunFilter {
            ids: vec![r1, r2, r3, r5],
            labels: vec!["base".into(), "new".into()],
            workload: Some("pf1".into()),
            origin: Some(Origin::Measured),
            ..all()
        }),
        vec![r1, r2]
    );
    assert_eq!(
        sel(RunFilter {
            labels: vec!["nope".into()],
            ..all()
        }),
        Vec::<i64>::new()
    );
    // A label with SQL in it is just a label.
    assert_eq!(
        sel(RunFilter {
            labels: vec!["x' OR '1'='1".into()],
            ..all()
        }),
        Vec::<i64>::new()
    );
    assert!(
        store
            .runs(&all())
            .unwrap()
            .iter()
            .all(|r| r.nr_samples == 2)
    );
    assert_eq!(
        store.labels().unwrap(),
        vec![("base".into(), 2), ("new".into(), 2), ("proj".into(), 1)]
    );
}

#[test]
fn labels_are_ordered_by_first_appearance() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    for label in ["zeta", "alpha", "zeta", "mid", "alpha", "alpha"] {
        store.begin_run(&meta(label, "w")).unwrap();
    }
    assert_eq!(
        store.labels().unwrap(),
        vec![("zeta".into(), 2), ("alpha".into(), 3), ("mid".into(), 1)]
    );
    store
        .delete_runs(&RunFilter {
            ids: vec![1],
            ..all()
        })
        .unwrap();
    assert_eq!(
        store.labels().unwrap(),
        vec![("alpha".into(), 3), ("zeta".into(), 1), ("mid".into(), 1)]
    );
}

#[test]
fn an_interrupted_run_keeps_its_samples() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    let stopped = store.begin_run(&meta("a", "w")).unwrap();
    store
        .add_samples(stopped, &key("threads", 1, "f"), 0, &[1.0, 2.0, 3.0])
        .unwrap();
    store.finish_run(stopped, Status::Incomplete).unwrap();
    // A writer that died: never finished.
    let died = store.begin_run(&meta("a", "w")).unwrap();
    store
        .add_samples(died, &key("threads", 2, "f"), 0, &[4.0, 5.0])
        .unwrap();
    drop(store);

    let store = Store::open_read(&path).unwrap();
    let runs = store.runs(&all()).unwrap();
    assert_eq!(ids(&runs), vec![stopped, died]);
    assert_eq!(runs[0].status, Status::Incomplete);
    assert!(runs[0].finished.is_some());
    assert_eq!(runs[0].nr_samples, 3);
    assert_eq!(runs[1].status, Status::Running);
    assert_eq!(runs[1].finished, None);
    assert_eq!(runs[1].nr_samples, 2);
    let values: Vec<f64> = store
        .samples(&[stopped, died])
        .unwrap()
        .iter()
        .map(|s| s.value)
        .collect();
    assert_eq!(values, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn finished_and_unknown_runs_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    let run = store.begin_run(&meta("a", "w")).unwrap();
    let k = key("threads", 1, "f");
    store.add_samples(run, &k, 0, &[1.0]).unwrap();
    let e = store.finish_run(run, Status::Running).unwrap_err();
    assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
    store.finish_run(run, Status::Complete).unwrap();

    let e = store.add_samples(run, &k, 0, &[2.0]).unwrap_err();
    assert!(e.to_string().contains("already complete"), "{e}");
    let e = store
        .add_counters(run, "threads", 1, 0, &[("c".into(), 1.0)])
        .unwrap_err();
    assert!(e.to_string().contains("already complete"), "{e}");
    let e = store.finish_run(run, Status::Incomplete).unwrap_err();
    assert!(e.to_string().contains("already complete"), "{e}");
    let e = store.add_samples(run + 100, &k, 0, &[2.0]).unwrap_err();
    assert!(
        matches!(e, StoreError::NoSuchRun { run: r, .. } if r == run + 100),
        "{e}"
    );
    let e = store.finish_run(run + 100, Status::Complete).unwrap_err();
    assert!(matches!(e, StoreError::NoSuchRun { .. }), "{e}");

    let runs = store.runs(&all()).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, Status::Complete);
    assert_eq!(store.samples(&[run]).unwrap().len(), 1);
    assert!(store.counters(&[run]).unwrap().is_empty());

    // A duplicate counter in one call stores none of that call.
    let run2 = store.begin_run(&meta("a", "w")).unwrap();
    let e = store
        .add_counters(
            run2,
            "threads",
            1,
            0,
            &[("c".into(), 1.0), ("d".into(), 2.0), ("c".into(), 3.0)],
        )
        .unwrap_err();
    assert!(e.to_string().contains("already stored"), "{e}");
    assert!(store.counters(&[run2]).unwrap().is_empty());
    // An empty label would make an unnamed comparison column.
    let e = store.begin_run(&meta("", "w")).unwrap_err();
    assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
}

#[test]
fn non_finite_values_are_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    let run = store.begin_run(&meta("a", "w")).unwrap();
    let k = key("threads", 1, "f");
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let e = store.add_samples(run, &k, 0, &[1.0, 2.0, bad]).unwrap_err();
        assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
        assert!(e.to_string().contains("finite"), "{e}");
        let e = store
            .add_counters(
                run,
                "threads",
                1,
                0,
                &[("ok".into(), 1.0), ("bad".into(), bad)],
            )
            .unwrap_err();
        assert!(e.to_string().contains("`bad`"), "{e}");
    }
    assert!(store.samples(&[run]).unwrap().is_empty());
    assert!(store.counters(&[run]).unwrap().is_empty());
    // Zero, negative and subnormal values are fine.
    store
        .add_samples(run, &k, 0, &[0.0, -1.0, f64::MIN_POSITIVE / 2.0])
        .unwrap();
    assert_eq!(
        store.samples(&[run]).unwrap()[2].value,
        f64::MIN_POSITIVE / 2.0
    );
}

#[test]
fn insert_run_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    let earlier = populated_in(&store);
    let before_runs = store.runs(&all()).unwrap();
    let before_samples = store.samples(&earlier).unwrap();
    let size = |n: usize| (0..n).map(|i| i as f64).collect::<Vec<_>>();

    // Fails only at the last key, after the run row and the earlier samples were written in the
    // transaction: the metric was first stored as higher-is-better, now as lower-is-better.
    let conflict = RunData {
        meta: meta("import", "pft"),
        status: Status::Complete,
        samples: vec![
            (key("threads", 1, "faults/sec"), 0, size(300)),
            (key("threads", 2, "faults/sec"), 0, size(300)),
            (
                SampleKey {
                    higher_is_better: false,
                    ..key("threads", 1, "faults/sec")
                },
                1,
                size(3),
            ),
        ],
    };
    let e = store.insert_run(&conflict).unwrap_err();
    assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
    assert!(e.to_string().contains("higher_is_better"), "{e}");

    // A NaN in the last key.
    let mut nan = conflict.clone();
    nan.samples[2] = (key("threads", 4, "faults/sec"), 0, vec![1.0, f64::NAN]);
    let e = store.insert_run(&nan).unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");

    assert_eq!(store.runs(&all()).unwrap(), before_runs);
    assert_eq!(store.samples(&earlier).unwrap(), before_samples);
    assert_eq!(count(&path, "runs"), 2);
    assert_eq!(count(&path, "samples"), 1000);

    // The same run without the bad key goes in whole, with the id a failed insert did not use up.
    let mut good = conflict.clone();
    good.samples.pop();
    let id = store.insert_run(&good).unwrap();
    assert_eq!(id, earlier[1] + 1);
    let r = &store
        .runs(&RunFilter {
            ids: vec![id],
            ..all()
        })
        .unwrap()[0];
    assert_eq!((r.status, r.nr_samples), (Status::Complete, 600));
    assert!(r.finished.is_some());
}

fn populated_in(store: &Store) -> Vec<i64> {
    ["a", "b"]
        .into_iter()
        .map(|label| {
            store
                .insert_run(&RunData {
                    meta: meta(label, "page_fault1"),
                    status: Status::Complete,
                    samples: vec![(
                        key("threads", 4, "faults/sec"),
                        0,
                        (0..500).map(|i| i as f64).collect(),
                    )],
                })
                .unwrap()
        })
        .collect()
}

/// Writes `runs` runs of `per_run` samples (in several transactions each) plus counters.
fn write_runs(store: &Store, label: &str, runs: usize, per_run: usize) {
    for _ in 0..runs {
        let run = store.begin_run(&meta(label, "w")).unwrap();
        let k = key("threads", 8, "faults/sec");
        let values: Vec<f64> = (0..per_run).map(|i| i as f64).collect();
        for chunk in values.chunks(50) {
            store.add_samples(run, &k, 0, chunk).unwrap();
        }
        store
            .add_counters(run, "threads", 8, 0, &[("event:pgfault".into(), 1.0)])
            .unwrap();
        store.finish_run(run, Status::Complete).unwrap();
    }
}

fn check_concurrent_result(path: &Path, labels: &[&str], runs: usize, per_run: usize) {
    let store = Store::open_read(path).unwrap();
    let all_runs = store.runs(&all()).unwrap();
    assert_eq!(all_runs.len(), labels.len() * runs);
    for r in &all_runs {
        assert_eq!((r.status, r.nr_samples), (Status::Complete, per_run as u64));
    }
    let mut counts = store.labels().unwrap();
    counts.sort();
    let mut want: Vec<(String, usize)> = labels.iter().map(|l| (l.to_string(), runs)).collect();
    want.sort();
    assert_eq!(counts, want);
    let samples = store.samples(&ids(&all_runs)).unwrap();
    assert_eq!(samples.len(), labels.len() * runs * per_run);
    for (i, s) in samples.iter().enumerate() {
        let seq = (i % per_run) as u32;
        assert_eq!((s.seq, s.value), (seq, f64::from(seq)));
    }
    assert_eq!(
        store.counters(&ids(&all_runs)).unwrap().len(),
        labels.len() * runs
    );
    let check: String = raw(path)
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn two_threads_write_one_new_store_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("r.db"));
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|label| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                // Both create and migrate the new file at the same time, then write.
                barrier.wait();
                let store = Store::open(&path).unwrap();
                write_runs(&store, label, 20, 200);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    check_concurrent_result(&path, &["left", "right"], 20, 200);
}

#[test]
fn racing_opens_of_a_new_store_all_succeed() {
    // Creating a store is the delicate moment: switching to WAL and migrating while others
    // read the half-made file. Race four openers on a new file, many times.
    let dir = tempfile::tempdir().unwrap();
    for round in 0..25 {
        let path = Arc::new(dir.path().join(format!("r{round}.db")));
        let barrier = Arc::new(Barrier::new(4));
        let openers: Vec<_> = (0..4)
            .map(|i| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let store = Store::open(&path)
                        .unwrap_or_else(|e| panic!("round {round} opener {i}: {e}"));
                    store.begin_run(&meta(&format!("t{i}"), "w")).unwrap();
                })
            })
            .collect();
        for o in openers {
            o.join().unwrap();
        }
        assert_eq!(
            Store::open_read(&path).unwrap().runs(&all()).unwrap().len(),
            4
        );
    }
}

/// Set in the child processes of [`two_processes_write_one_store_at_once`].
const WRITER_ENV: &str = "PAGELAB_STORE_TEST_WRITER";

#[test]
#[ignore = "helper: run by two_processes_write_one_store_at_once in child processes"]
fn writer_process() {
    let Some(spec) = std::env::var_os(WRITER_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let (label, path) = spec.split_once('=').unwrap();
    let store = Store::open(Path::new(path)).unwrap();
    write_runs(&store, label, 20, 200);
}

#[test]
fn two_processes_write_one_store_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["first", "second"]
        .into_iter()
        .map(|label| {
            std::process::Command::new(&exe)
                .args(["writer_process", "--exact", "--ignored", "--test-threads=1"])
                .env(WRITER_ENV, format!("{label}={}", path.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "writer failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the helper did not run"
        );
    }
    check_concurrent_result(&path, &["first", "second"], 20, 200);
}

/// The bytes of a database and which of its side files exist.
#[derive(PartialEq)]
struct Snapshot {
    bytes: Vec<u8>,
    side_files: Vec<&'static str>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sum = self
            .bytes
            .iter()
            .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        write!(
            f,
            "{} bytes (hash {sum:#x}), side files {:?}",
            self.bytes.len(),
            self.side_files
        )
    }
}

fn snapshot(path: &Path) -> Snapshot {
    let side_files = ["-wal", "-shm", "-journal"]
        .into_iter()
        .filter(|s| {
            let mut p = path.as_os_str().to_owned();
            p.push(s);
            PathBuf::from(p).exists()
        })
        .collect();
    Snapshot {
        bytes: std::fs::read(path).unwrap(),
        side_files,
    }
}

#[test]
fn a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    populated(&path);
    {
        let c = raw(&path);
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let before = snapshot(&path);
    for e in [
        Store::open(&path).unwrap_err(),
        Store::open_read(&path).unwrap_err(),
    ] {
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Newer { .. }), "{msg}");
        assert!(msg.contains("newer pagelab"), "{msg}");
        assert!(
            msg.contains(&format!("schema {}", SCHEMA_VERSION + 1)),
            "{msg}"
        );
        assert!(msg.contains(&path.display().to_string()), "{msg}");
    }
    assert_eq!(snapshot(&path), before);
}

#[test]
fn garbage_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    // A deterministic pseudo-random 8 KiB.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(&path);
    for e in [
        Store::open(&path).unwrap_err(),
        Store::open_read(&path).unwrap_err(),
    ] {
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{msg}");
        assert!(
            msg.contains("not a pagelab results store or is corrupt"),
            "{msg}"
        );
        assert!(msg.contains(&path.display().to_string()), "{msg}");
    }
    assert_eq!(snapshot(&path), before);
    assert_eq!(before.bytes, bytes);
}

#[test]
fn a_truncated_store_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    populated(&path);
    let full = std::fs::read(&path).unwrap();
    assert!(full.len() >= 4 * 4096, "{} bytes", full.len());
    let half = &full[..full.len() / 2];
    std::fs::write(&path, half).unwrap();
    let e = Store::open(&path).unwrap_err();
    assert_eq!(snapshot(&path).side_files, Vec::<&str>::new());
    for e in [e, Store::open_read(&path).unwrap_err()] {
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{msg}");
        assert!(
            msg.contains("not a pagelab results store or is corrupt"),
            "{msg}"
        );
    }
    // Only SQLite can tell a truncated store, so it has opened it, and a read-only connection
    // leaves the `-wal`/`-shm` files it made; the store itself is as it was.
    assert!(std::fs::read(&path).unwrap() == half);
}

#[test]
fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, app_id) in [("other.db", 0x1234_5678), ("plain.db", 0)] {
        let path = dir.path().join(name);
        {
            let c = raw(&path);
            c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('hi');")
                .unwrap();
            c.pragma_update(None, "application_id", app_id).unwrap();
        }
        let before = snapshot(&path);
        for e in [
            Store::open(&path).unwrap_err(),
            Store::open_read(&path).unwrap_err(),
        ] {
            let msg = e.to_string();
            assert!(matches!(e, StoreError::NotPagelab { .. }), "{msg}");
            assert!(msg.contains("is not a pagelab results store"), "{msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
        }
        assert_eq!(snapshot(&path), before, "{name}");
    }
}

#[test]
fn a_store_with_an_impossible_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    populated(&path);
    for v in [0, -1] {
        raw(&path).pragma_update(None, "user_version", v).unwrap();
        let before = snapshot(&path);
        for e in [
            Store::open(&path).unwrap_err(),
            Store::open_read(&path).unwrap_err(),
        ] {
            assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
            assert!(
                e.to_string().contains(&format!("schema version {v}")),
                "{e}"
            );
        }
        assert_eq!(snapshot(&path), before);
    }
}

#[test]
fn an_empty_file_becomes_a_store_but_is_not_one_to_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    std::fs::write(&path, b"").unwrap();
    let e = Store::open_read(&path).unwrap_err();
    assert!(e.to_string().contains("no results store at"), "{e}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let store = Store::open(&path).unwrap();
    store.begin_run(&meta("a", "w")).unwrap();
    drop(store);
    assert_eq!(
        Store::open_read(&path).unwrap().runs(&all()).unwrap().len(),
        1
    );
}

#[test]
fn open_read_of_a_missing_store_says_what_to_do_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing/here.db");
    let e = Store::open_read(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no results store at {}; run `pagelab run` or `pagelab import` first, or give --db",
            path.display()
        )
    );
    assert!(!dir.path().join("nothing").exists());
}

#[test]
fn a_store_opened_for_reading_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let ids = populated(&path);
    let before = snapshot(&path);
    let store = Store::open_read(&path).unwrap();
    let k = key("threads", 1, "f");
    let errors = [
        store.begin_run(&meta("x", "w")).unwrap_err(),
        store.add_samples(ids[0], &k, 0, &[1.0]).unwrap_err(),
        store
            .add_counters(ids[0], "threads", 1, 0, &[("c".into(), 1.0)])
            .unwrap_err(),
        store.finish_run(ids[0], Status::Complete).unwrap_err(),
        store
            .insert_run(&RunData {
                meta: meta("x", "w"),
                status: Status::Complete,
                samples: vec![],
            })
            .unwrap_err(),
        store
            .delete_runs(&RunFilter {
                ids: vec![ids[0]],
                ..all()
            })
            .unwrap_err(),
        store.delete_all_runs().unwrap_err(),
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(matches!(e, StoreError::ReadOnly { .. }), "{msg}");
        assert!(msg.contains("is read-only"), "{msg}");
        assert!(msg.contains("--db"), "{msg}");
    }
    assert_eq!(store.runs(&all()).unwrap().len(), 2);
    drop(store);
    assert!(snapshot(&path).bytes == before.bytes);
}

#[test]
fn a_file_without_write_permission() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    populated(&path);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Reading works either way.
    let store = Store::open_read(&path).unwrap();
    assert_eq!(store.runs(&all()).unwrap().len(), 2);
    drop(store);
    // Root ignores permission bits, so only an unprivileged user sees the refusal.
    if !rustix::process::geteuid().is_root() {
        let e = Store::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::ReadOnly { .. }), "{e}");
        assert!(e.to_string().contains("read-only"), "{e}");
    }
}

#[test]
fn open_below_a_regular_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let path = file.join("results.db");
    let e = Store::open(&path).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, StoreError::CreateDir { .. }), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("--db"), "{msg}");
    // A directory where the file should be.
    let e = Store::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::CannotOpen { .. }), "{e}");
    let e = Store::open_read(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::CannotOpen { .. }), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn delete_runs_cascades_and_refuses_an_empty_filter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    let mut runs = Vec::new();
    for label in ["a", "b", "a", "c"] {
        let run = store.begin_run(&meta(label, "w")).unwrap();
        store
            .add_samples(run, &key("threads", 1, "f"), 0, &[1.0, 2.0])
            .unwrap();
        store
            .add_counters(run, "threads", 1, 0, &[("c".into(), 1.0)])
            .unwrap();
        store.finish_run(run, Status::Complete).unwrap();
        runs.push(run);
    }
    let e = store.delete_runs(&all()).unwrap_err();
    assert!(matches!(e, StoreError::EmptyFilter { .. }), "{e}");
    assert_eq!(count(&path, "runs"), 4);

    let n = store
        .delete_runs(&RunFilter {
            labels: vec!["a".into()],
            ..all()
        })
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(ids(&store.runs(&all()).unwrap()), vec![runs[1], runs[3]]);
    // The rows are gone from the tables, not just hidden by a join.
    assert_eq!(count(&path, "samples"), 4);
    assert_eq!(count(&path, "counters"), 2);
    let n = store
        .delete_runs(&RunFilter {
            ids: vec![runs[0]],
            ..all()
        })
        .unwrap();
    assert_eq!(n, 0);

    assert_eq!(store.delete_all_runs().unwrap(), 2);
    assert!(store.runs(&all()).unwrap().is_empty());
    assert_eq!(count(&path, "samples"), 0);
    assert_eq!(count(&path, "counters"), 0);
    // Ids are not reused.
    assert!(store.begin_run(&meta("d", "w")).unwrap() > runs[3]);
}

#[test]
fn the_file_is_a_recognisable_wal_store_at_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    drop(Store::open(&path).unwrap());
    // Opening again is a no-op on the schema.
    drop(Store::open(&path).unwrap());
    let c = raw(&path);
    let v: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let app: i64 = c
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_ne!(app, 0);
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // Samples cannot name a run that does not exist (with foreign keys on, as the store has).
    c.pragma_update(None, "foreign_keys", true).unwrap();
    let e = c
        .execute(
            "INSERT INTO samples VALUES (42, 'threads', 1, 'f', 1, 0, 0, 1.0)",
            [],
        )
        .unwrap_err();
    assert!(e.to_string().contains("FOREIGN KEY"), "{e}");
}

#[test]
fn reading_while_a_writer_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    populated(&path);
    let writer = raw(&path);
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    writer
        .execute("UPDATE runs SET label = 'changing' WHERE id = 1", [])
        .unwrap();
    // WAL: readers see the last commit at once instead of waiting for the writer.
    let t = Instant::now();
    let store = Store::open_read(&path).unwrap();
    assert_eq!(store.labels().unwrap()[0].0, "a");
    assert!(t.elapsed().as_secs() < 5);
    writer.execute_batch("ROLLBACK").unwrap();
}

/// Schema 1 as released (before the owner columns), to test the upgrade from it.
const SCHEMA_1: &str = "
    CREATE TABLE runs (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        label           TEXT NOT NULL CHECK (label <> ''),
        workload        TEXT NOT NULL,
        target          TEXT NOT NULL,
        origin          TEXT NOT NULL CHECK (origin IN ('measured', 'projected', 'imported')),
        profile         TEXT,
        profile_toml    TEXT,
        host_json       TEXT,
        machine         TEXT,
        experiment      TEXT,
        pagelab_version TEXT NOT NULL,
        command         TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('running', 'complete', 'incomplete')),
        started         TEXT NOT NULL,
        finished        TEXT
    ) STRICT;
    CREATE INDEX runs_label ON runs (label);
    CREATE TABLE samples (
        run_id           INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        mode             TEXT NOT NULL,
        tasks            INTEGER NOT NULL CHECK (tasks BETWEEN 0 AND 4294967295),
        metric           TEXT NOT NULL,
        higher_is_better INTEGER NOT NULL CHECK (higher_is_better IN (0, 1)),
        repeat           INTEGER NOT NULL CHECK (repeat BETWEEN 0 AND 4294967295),
        seq              INTEGER NOT NULL CHECK (seq BETWEEN 0 AND 4294967295),
        value            REAL NOT NULL,
        PRIMARY KEY (run_id, mode, tasks, metric, repeat, seq)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE counters (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        mode   TEXT NOT NULL,
        tasks  INTEGER NOT NULL CHECK (tasks BETWEEN 0 AND 4294967295),
        repeat INTEGER NOT NULL CHECK (repeat BETWEEN 0 AND 4294967295),
        name   TEXT NOT NULL,
        value  REAL NOT NULL,
        PRIMARY KEY (run_id, mode, tasks, repeat, name)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO runs (label, workload, target, origin, pagelab_version, command, status, started,
        finished)
    VALUES ('old', 'pft', 'engine', 'measured', '0.1.0', 'pagelab run pft', 'complete',
            '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z'),
           ('left', 'pft', 'engine', 'measured', '0.1.0', 'pagelab run pft', 'running',
            '2026-01-02T00:00:00Z', NULL);
    INSERT INTO samples VALUES (1, 'threads', 1, 'faults/sec', 1, 0, 0, 10.0),
                               (2, 'threads', 1, 'faults/sec', 1, 0, 0, 20.0);
    PRAGMA user_version = 1;
    PRAGMA application_id = 1348947042;
    PRAGMA journal_mode = WAL;
";

fn user_version(path: &Path) -> i64 {
    raw(path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

#[test]
fn a_schema_1_store_is_read_as_is_and_upgraded_keeping_every_run() {
    assert_eq!(SCHEMA_VERSION, 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    raw(&path).execute_batch(SCHEMA_1).unwrap();

    // Read without upgrading: the owner columns are not there, and a run left running by a
    // pagelab that recorded no owner is abandoned.
    let store = Store::open_read(&path).unwrap();
    let runs = store.runs(&all()).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.owner.is_none()));
    assert!(!runs[0].abandoned() && runs[1].abandoned());
    assert_eq!(runs[1].shown_status(), "abandoned");
    drop(store);
    assert_eq!(user_version(&path), 1);

    // Opened for writing: upgraded in place, nothing lost, and new runs record their owner.
    let store = Store::open(&path).unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    let runs = store.runs(&all()).unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| (r.meta.label.as_str(), r.status, r.nr_samples))
            .collect::<Vec<_>>(),
        vec![("old", Status::Complete, 1), ("left", Status::Running, 1)]
    );
    assert!(runs[1].abandoned());
    let values: Vec<f64> = store
        .samples(&[1, 2])
        .unwrap()
        .iter()
        .map(|s| s.value)
        .collect();
    assert_eq!(values, vec![10.0, 20.0]);
    let new = store.begin_run(&meta("new", "pft")).unwrap();
    let r = &store
        .runs(&RunFilter {
            ids: vec![new],
            ..all()
        })
        .unwrap()[0];
    assert_eq!(r.owner.as_ref().map(|o| o.pid), Some(std::process::id()));
    assert!(!r.abandoned());
}

#[test]
fn a_running_run_whose_process_is_gone_is_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    let live = store.begin_run(&meta("a", "w")).unwrap();
    let dead = store.begin_run(&meta("a", "w")).unwrap();
    let done = store.begin_run(&meta("a", "w")).unwrap();
    store.finish_run(done, Status::Complete).unwrap();
    // `dead` was begun by a process that has exited since.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    raw(&path)
        .execute(
            "UPDATE runs SET owner_pid = ?1 WHERE id = ?2",
            rusqlite::params![pid, dead],
        )
        .unwrap();
    let runs = Store::open_read(&path).unwrap().runs(&all()).unwrap();
    let shown: Vec<(i64, &str, bool)> = runs
        .iter()
        .map(|r| (r.id, r.shown_status(), r.incomplete()))
        .collect();
    assert_eq!(
        shown,
        vec![
            (live, "running", false),
            (dead, "abandoned", true),
            (done, "complete", false)
        ]
    );
    // A finished run keeps its owner for the record but is never abandoned.
    assert!(runs[2].owner.is_some());
}

#[test]
fn the_samples_of_one_measurement_are_stored_together_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    let run = store.begin_run(&meta("a", "pft")).unwrap();
    let sets = |cpu: f64, wall: f64| {
        vec![
            (key("threads", 1, "faults/cpu"), vec![cpu]),
            (key("threads", 1, "faults/sec"), vec![wall]),
        ]
    };
    store.add_sample_sets(run, 0, &sets(1.0, 2.0)).unwrap();
    store.add_sample_sets(run, 0, &sets(3.0, 4.0)).unwrap();
    let e = store
        .add_sample_sets(run, 0, &sets(5.0, f64::NAN))
        .unwrap_err();
    assert!(matches!(e, StoreError::Rejected { .. }), "{e}");
    let got: Vec<(String, u32, f64)> = store
        .samples(&[run])
        .unwrap()
        .into_iter()
        .map(|s| (s.key.metric, s.seq, s.value))
        .collect();
    assert_eq!(
        got,
        vec![
            ("faults/cpu".into(), 0, 1.0),
            ("faults/cpu".into(), 1, 3.0),
            ("faults/sec".into(), 0, 2.0),
            ("faults/sec".into(), 1, 4.0),
        ]
    );
    store.finish_run(run, Status::Complete).unwrap();
    assert!(store.add_sample_sets(run, 0, &sets(5.0, 6.0)).is_err());
}

/// The cost of committing every sample on its own (one fsync of the log each): well under a
/// typical sample (100 ms and more), and spent between measured windows, never inside one.
/// About 8 ms on the development container's disk; the bound leaves room for slower ones.
#[test]
fn a_commit_per_sample_is_cheap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("r.db")).unwrap();
    let run = store.begin_run(&meta("a", "pft")).unwrap();
    let n = 200;
    let t0 = Instant::now();
    for i in 0..n {
        store
            .add_sample_sets(run, 0, &[(key("threads", 1, "faults/sec"), vec![i as f64])])
            .unwrap();
    }
    let per = t0.elapsed() / n;
    eprintln!("one sample committed in {per:?}");
    assert!(per.as_millis() < 50, "{per:?} per sample");
}
