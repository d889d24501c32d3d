//! The `pagelab` binary end to end, each test on its own results store in a temporary
//! directory: runs are stored and listed, compared, exported and re-imported; Ctrl-C keeps an
//! incomplete run; bad input is one line on stderr, a non-zero exit, and leaves the store's
//! bytes as they were.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Dir, fails, ok, pagelab};

/// A quick pft run on the engine: 32 MiB, 3 repetitions.
fn quick_pft(db: &Path, profile: &str, label: &str) -> String {
    ok(
        db,
        &[
            "run",
            "pft",
            "--profile",
            profile,
            "--tasks",
            "1,2",
            "--mode",
            "threads",
            "--samples",
            "3",
            "--size",
            "32M",
            "--label",
            label,
        ],
    )
}

#[test]
fn run_store_list_compare_export_and_reimport() {
    let d = Dir::new("cli-flow");
    let db = d.db();
    let out = quick_pft(&db, "mm-unstable-20230210", "base");
    assert!(out.contains("stored as run 1 (label base)"), "{out}");
    quick_pft(&db, "pvl-v2", "pvl");
    let runs = ok(&db, &["runs"]);
    assert!(
        runs.contains("base") && runs.contains("pvl") && runs.contains("complete"),
        "{runs}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&db, &["runs", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    assert_eq!(json[0]["nr_samples"], 2 * 2 * 3);
    assert!(
        json[1]["meta"]["profile_toml"]
            .as_str()
            .unwrap()
            .contains("vma_lock = \"rwsem\"")
    );

    let table = ok(&db, &["compare", "base", "pvl"]);
    assert!(table.contains("Hmean     faults/sec-2"), "{table}");
    assert!(table.contains("(   0.00%)"), "{table}");
    let md = ok(&db, &["compare", "base", "pvl", "--format", "markdown"]);
    assert!(md.contains("| stat | metric | base | pvl |"), "{md}");

    // Export, then import the export under a new label: the same numbers come back.
    let csv_path = d.0.join("base.csv");
    ok(
        &db,
        &[
            "export",
            "--label",
            "base",
            "--out",
            csv_path.to_str().unwrap(),
        ],
    );
    let imported = ok(
        &db,
        &["import", csv_path.to_str().unwrap(), "--label", "again"],
    );
    assert!(imported.contains("imported 12 samples"), "{imported}");
    let cmp: serde_json::Value =
        serde_json::from_str(&ok(&db, &["compare", "base", "again", "--format", "json"])).unwrap();
    for s in cmp["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            assert_eq!(r["cells"][0]["value"], r["cells"][1]["value"], "{r}");
        }
    }
    // An export of two labels is two runs: importing it as one is refused.
    let both = d.0.join("both.csv");
    ok(
        &db,
        &[
            "export",
            "--label",
            "base",
            "--label",
            "pvl",
            "--out",
            both.to_str().unwrap(),
        ],
    );
    fails(
        &db,
        &["import", both.to_str().unwrap(), "--label", "mixed"],
        "one import is one run",
    );
    // Deletion needs a filter and removes exactly what it names.
    fails(&db, &["runs", "--delete"], "needs a filter");
    assert!(ok(&db, &["runs", "--delete", "--label", "again"]).contains("deleted 1 run"));
    fails(&db, &["compare", "base", "again"], "unknown label `again`");
}

#[test]
fn reproduce_runs_an_experiment_file_and_prints_its_comparison() {
    let d = Dir::new("cli-repro");
    let exp = d.0.join("tiny.toml");
    std::fs::write(
        &exp,
        "description = \"tiny\"\nsource = \"a test\"\nworkload = \"pft-vma-per-thread\"\n\
         profiles = [\"mm-unstable-20230210\", \"pvl-v2\"]\nmodes = [\"threads\"]\n\
         tasks = \"1,2\"\nsamples = 3\nsize = \"32M\"\nsignificance = \"ttest\"\n",
    )
    .unwrap();
    let out = ok(&d.db(), &["reproduce", exp.to_str().unwrap()]);
    assert!(out.contains("pft-vma-per-thread threads"), "{out}");
    assert!(
        out.contains("mm-unstable-20230210") && out.contains("pvl-v2"),
        "{out}"
    );
    assert!(out.contains("Hmean     faults/cpu-1"), "{out}");
    assert!(out.contains("significance: t-test"), "{out}");
    // The experiment's own rule applies by default.
    let again = ok(
        &d.db(),
        &["compare", "--experiment", exp.to_str().unwrap(), "--latest"],
    );
    assert!(again.contains("significance: t-test"), "{again}");
    assert_eq!(
        again
            .lines()
            .filter(|l| l.starts_with("Hmean"))
            .collect::<Vec<_>>(),
        out.lines()
            .filter(|l| l.starts_with("Hmean"))
            .collect::<Vec<_>>()
    );
}

/// Ctrl-C during a run: pagelab stops after the current sample, stores what it measured, marks
/// the run incomplete and exits non-zero.
#[test]
fn interrupted_run_is_stored_incomplete() {
    let d = Dir::new("cli-intr");
    let db = d.db();
    let child = Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .arg("--db")
        .arg(&db)
        .args([
            "run",
            "page_fault1",
            "--tasks",
            "1",
            "--samples",
            "1000",
            "--warmup",
            "0",
            "--interval-ms",
            "100",
            "--memsize",
            "8M",
            "--label",
            "cut",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a sample is stored (each is committed as it is measured), then interrupt:
    // a fixed delay would be too short on a loaded host.
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let o = pagelab(&db, &["runs", "--json"]);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            if v[0]["status"] == "running" && v[0]["nr_samples"].as_u64().unwrap_or(0) > 0 {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no sample stored within 60 s"
        );
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&ok(&db, &["runs", "--json"])).unwrap();
    assert_eq!(v[0]["status"], "incomplete");
    let n = v[0]["nr_samples"].as_u64().unwrap();
    assert!((1..1000).contains(&n), "{n} samples");
    // Interrupted runs are left out of comparisons unless asked for.
    fails(&db, &["compare", "cut"], "no complete run");
    assert!(ok(&db, &["compare", "cut", "--include-incomplete"]).contains("faults/sec-1"));
    // Exported and imported again, it stays incomplete.
    let csv = d.0.join("cut.csv");
    ok(
        &db,
        &["export", "--label", "cut", "--out", csv.to_str().unwrap()],
    );
    ok(
        &db,
        &["import", csv.to_str().unwrap(), "--label", "cut-again"],
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&db, &["runs", "--json", "--label", "cut-again"])).unwrap();
    assert_eq!(v[0]["status"], "incomplete");
}

/// The bytes of a file, compared without printing them.
fn same_bytes(p: &Path, want: &[u8]) -> bool {
    std::fs::read(p).unwrap() == want
}

/// What a store holds, as pagelab reports it (the file's bytes may change when SQLite folds its
/// write-ahead log back in, without any change to what is stored).
fn content(db: &Path) -> String {
    ok(db, &["runs", "--json"]) + &ok(db, &["export", "--format", "json"])
}

#[test]
fn bad_input_is_one_line_and_alters_nothing() {
    let d = Dir::new("cli-bad");
    let db = d.db();
    quick_pft(&db, "linux-6.7", "keep");
    let before = content(&db);
    fails(&db, &["run", "page_fault9"], "unknown workload");
    fails(
        &db,
        &["run", "pft", "--profile", "linux-9"],
        "unknown profile",
    );
    fails(&db, &["run", "pft", "--tasks", "0"], "not a positive");
    fails(
        &db,
        &["run", "pft", "--size", "64P"],
        "needs an engine arena",
    );
    fails(&db, &["run", "pft", "--tasks", "1,1"], "appears twice");
    fails(
        &db,
        &["run", "kvcache", "--target", "kernel", "--mode", "threads"],
        "kvcache runs on the engine only",
    );
    fails(&db, &["run", "kvcache"], "no processes mode");
    fails(
        &db,
        &[
            "run",
            "kvcache",
            "--mode",
            "threads",
            "--swap",
            "/nonexistent-dir/swapfile",
        ],
        "cannot open swap file",
    );
    fails(
        &db,
        &[
            "run",
            "kvcache",
            "--mode",
            "threads",
            "--value-size",
            "1001",
        ],
        "multiple of 8",
    );
    fails(
        &db,
        &[
            "run",
            "kvcache",
            "--mode",
            "threads",
            "--keys",
            "8",
            "--memcg-percent",
            "1",
        ],
        "too small",
    );
    fails(
        &db,
        &[
            "run",
            "kvcache",
            "--mode",
            "threads",
            "--keys",
            "4000000000000",
        ],
        "keys",
    );
    fails(
        &db,
        &["run", "kvcache", "--mode", "threads", "--keys", "100000000"],
        "needs an engine arena",
    );
    fails(
        &db,
        &["run", "pft", "--target", "kernel", "--profile", "linux-6.7"],
        "--profile applies to the engine",
    );
    fails(&db, &["compare", "keep", "keep"], "named twice");
    fails(
        &db,
        &["runs", "--delete", "--label", "nosuch"],
        "no run matches",
    );
    fails(&db, &["run", "pft", "--bogus"], "--bogus");
    fails(&db, &["run", "pft", "--label", "has space"], "label");
    fails(&db, &["compare", "nope"], "unknown label `nope`");
    fails(&db, &["compare"], "nothing to compare");
    fails(
        &db,
        &["compare", "keep", "--format", "pdf"],
        "invalid value 'pdf' for '--format <FORMAT>' [possible values: text, markdown, json, csv, lkp]",
    );
    fails(
        &db,
        &["reproduce", "no-such-experiment"],
        "unknown experiment",
    );
    fails(&db, &["profiles", "linux-9"], "unknown profile");
    let junk = d.0.join("junk.txt");
    std::fs::write(&junk, "this is not\nbenchmark output\n").unwrap();
    fails(
        &db,
        &["import", junk.to_str().unwrap(), "--label", "j"],
        "cannot tell the format",
    );
    let neg = d.0.join("neg.csv");
    std::fs::write(&neg, "tasks,value,workload\n1,-5,pft\n").unwrap();
    fails(
        &db,
        &["import", neg.to_str().unwrap(), "--label", "j"],
        "neg.csv:2: a rate must be positive",
    );
    let bad_csv = d.0.join("bad.csv");
    std::fs::write(&bad_csv, "tasks,value,workload\n1,12.5,pft\n2,lots,pft\n").unwrap();
    fails(
        &db,
        &["import", bad_csv.to_str().unwrap(), "--label", "j"],
        "bad.csv:3: expected a finite number",
    );
    assert!(content(&db) == before, "a failed command changed the store");
    assert!(ok(&db, &["runs"]).contains("1 run(s)"));

    // A store written by a newer pagelab, and a corrupt one, are refused and left alone.
    let newer = d.0.join("newer.db");
    std::fs::copy(&db, &newer).unwrap();
    let c = rusqlite::Connection::open(&newer).unwrap();
    c.pragma_update(None, "user_version", 999).unwrap();
    drop(c);
    let nb = std::fs::read(&newer).unwrap();
    fails(&newer, &["runs"], "newer pagelab");
    fails(
        &newer,
        &["run", "pft", "--size", "32M", "--samples", "1"],
        "newer pagelab",
    );
    assert!(same_bytes(&newer, &nb), "the newer store was modified");
    let corrupt = d.0.join("corrupt.db");
    std::fs::write(&corrupt, vec![0x5a; 8192]).unwrap();
    fails(&corrupt, &["runs"], "not a pagelab results store");
    fails(
        &corrupt,
        &["run", "pft", "--size", "32M", "--samples", "1"],
        "not a pagelab results store",
    );
    assert!(
        same_bytes(&corrupt, &[0x5a; 8192]),
        "the corrupt file was modified"
    );
}

#[test]
fn profiles_show_and_diff() {
    let d = Dir::new("cli-prof");
    let out = ok(
        &d.db(),
        &["profiles", "linux-2.6.13", "linux-2.6.13-split-ptl"],
    );
    assert!(out.contains("mm.ptl") && out.contains("\"split\""), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let list = ok(&d.db(), &["experiments"]);
    assert!(list.contains("pft-pvl-2023"), "{list}");
}
