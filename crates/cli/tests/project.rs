//! The projector's commands end to end, each test on its own store: a projection is stored as
//! projected rows that `runs` and `compare` see; a trace file is written and read back;
//! validation prints its summary; bad input is one line, a non-zero exit and an untouched store.

mod common;
use common::{Dir, fails_untouched as fails, ok};

#[test]
fn a_projection_is_stored_as_projected_rows_and_compares() {
    let d = Dir::new("proj-store");
    let db = d.db();
    let out = ok(
        &db,
        &[
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--profile",
            "mm-unstable-20230210",
            "--profile",
            "pvl-v2",
            "--tasks",
            "1,16",
            "--samples",
            "2",
            "--ops-per-cpu",
            "512",
        ],
    );
    assert!(out.contains("faults/sec-16"), "{out}");
    assert!(out.contains("is projected"), "{out}");
    let runs = ok(&db, &["runs", "--origin", "projected", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["meta"]["target"], "projector");
        assert_eq!(r["meta"]["machine"], "icelake-2s-64c");
        assert_eq!(r["status"], "complete");
    }
    let cmp = ok(
        &db,
        &[
            "compare",
            "mm-unstable-20230210@icelake-2s-64c",
            "pvl-v2@icelake-2s-64c",
        ],
    );
    assert!(cmp.contains("faults/cpu-16"), "{cmp}");
    // Lock counters come along for reports.
    let csv = ok(&db, &["export", "--format", "json"]);
    assert!(csv.contains("faults/sec"));
}

/// compare on projected columns: every mean row shows the change with its range over the
/// captures' pairings and no significance asterisk, and says the columns are projected.
#[test]
fn compare_prints_intervals_for_projected_columns_not_asterisks() {
    let d = Dir::new("proj-interval");
    let db = d.db();
    ok(
        &db,
        &[
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--profile",
            "mm-unstable-20230210",
            "--profile",
            "pvl-v2",
            "--tasks",
            "1,16",
            "--samples",
            "2",
            "--captures",
            "2",
            "--ops-per-cpu",
            "512",
        ],
    );
    let cmp = ok(
        &db,
        &[
            "compare",
            "mm-unstable-20230210@icelake-2s-64c",
            "pvl-v2@icelake-2s-64c",
        ],
    );
    let means: Vec<&str> = cmp.lines().filter(|l| l.starts_with("Hmean")).collect();
    assert_eq!(means.len(), 4, "{cmp}");
    for l in &means {
        assert!(!l.contains('*'), "an asterisk on a projected column: {cmp}");
        // The baseline's own change is 0 with an interval too (its captures against its
        // captures), the other column's is its change with its range.
        assert_eq!(l.matches("% [").count(), 2, "{cmp}");
    }
    assert!(cmp.contains("pvl-v2@icelake-2s-64c is projected"), "{cmp}");
    assert!(cmp.contains("no significance asterisks"), "{cmp}");
    // Each capture is a repeat of the stored run.
    let json = ok(&db, &["export", "--format", "json"]);
    assert!(json.contains("\"repeat\": 1"), "{json}");
}

/// `project --lock-stat`: each row's lock classes as lock_stat would show them on the machine
/// (pft on one VMA at 16 threads waits on `mmap_lock`'s line, taken once per fault), as text
/// and inside one JSON document; `--format json` alone stays one document (the line naming
/// the most waited-for lock once followed it); CSV has no layout for them.
#[test]
fn lock_statistics_come_per_row_and_json_stays_one_document() {
    let d = Dir::new("proj-lockstat");
    let db = d.db();
    let args = |extra: &[&'static str]| {
        let mut v = vec![
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--profile",
            "mm-unstable-20230210",
            "--tasks",
            "1,16",
            "--samples",
            "2",
            "--captures",
            "1",
            "--ops-per-cpu",
            "512",
        ];
        v.extend_from_slice(extra);
        v
    };
    let out = ok(&db, &args(&["--lock-stat"]));
    assert!(
        out.contains("projected lock statistics of mm-unstable-20230210@icelake-2s-64c"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("threads") && l.contains(" 16 ") && l.contains("mmap_lock"))
        .unwrap_or_else(|| panic!("no mmap_lock line at 16 threads:\n{out}"));
    let acq: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!((acq - 1.0).abs() < 0.01, "one mmap_lock per fault: {row}");
    let json = ok(&db, &args(&["--lock-stat", "--format", "json"]));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(doc["comparison"].is_object(), "{json}");
    let rows = doc["lock_stat"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    let at16 = rows.iter().find(|r| r["tasks"] == 16).unwrap();
    let lock = at16["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == "mmap_lock")
        .unwrap();
    assert!(lock["wait_ns_per_op"].as_f64().unwrap() > 0.0, "{lock}");
    let plain = ok(&db, &args(&["--format", "json"]));
    serde_json::from_str::<serde_json::Value>(&plain)
        .unwrap_or_else(|e| panic!("--format json is not one document ({e}):\n{plain}"));
    fails(
        &db,
        &args(&["--lock-stat", "--format", "csv"]),
        "--lock-stat has no CSV layout",
    );
    // A cyclic workload's rows (will-it-scale): linux-4.15 refills and drains its per-CPU
    // lists 31 pages at a time, so each fault takes zone->lock 2/31 times, and the lock is held
    // for a share of the run between 0 and its one instance on the node the tasks use.
    let out = ok(
        &db,
        &[
            "project",
            "--machine",
            "broadwell-2s-44c",
            "page_fault1",
            "--profile",
            "linux-4.15",
            "--mode",
            "processes",
            "--tasks",
            "2",
            "--samples",
            "1",
            "--captures",
            "1",
            "--lock-stat",
        ],
    );
    let zone = out
        .lines()
        .find(|l| l.starts_with("processes") && l.contains("zone->lock"))
        .unwrap_or_else(|| panic!("no zone->lock line:\n{out}"));
    let cells: Vec<&str> = zone.split_whitespace().collect();
    let acq: f64 = cells[3].parse().unwrap();
    assert!((acq - 2.0 / 31.0).abs() < 0.1 * 2.0 / 31.0, "{zone}");
    let held: f64 = cells[7].parse().unwrap();
    assert!(held > 0.0 && held < 1.0, "{zone}");
}

#[test]
fn bad_projections_are_refused_before_anything_is_stored() {
    let d = Dir::new("proj-bad");
    let db = d.db();
    fails(
        &db,
        &[
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--tasks",
            "1,200",
        ],
        "200 tasks is more than the 128 CPUs of icelake-2s-64c",
    );
    fails(
        &db,
        &["project", "--machine", "no-such", "pft"],
        "unknown machine `no-such`",
    );
    // Every workload is projectable now (kvcache, netpipe and the research benchmarks joined
    // in round 21), so no "the projector replays ..." refusal is reachable from the CLI.
    fails(
        &db,
        &["project", "--machine", "dev-host"],
        "nothing to project",
    );
    let bad = d.0.join("bad.toml");
    std::fs::write(
        &bad,
        ok(&db, &["machines", "dev-host"]).replace("sockets = 1", "sockets = 0"),
    )
    .unwrap();
    fails(
        &db,
        &["project", "--machine", bad.to_str().unwrap(), "pft"],
        "topology.sockets must be at least 1",
    );
    fails(
        &db,
        &["machines", bad.to_str().unwrap()],
        "topology.sockets must be at least 1",
    );
}

#[test]
fn traces_are_written_and_read_back() {
    let d = Dir::new("proj-trace");
    let db = d.db();
    let f = d.0.join("pft.pltrace");
    let out = ok(
        &db,
        &[
            "capture",
            "pft-vma-per-thread",
            "--profile",
            "linux-4.15",
            "--out",
            f.to_str().unwrap(),
        ],
    );
    assert!(out.contains("capture overhead"), "{out}");
    assert!(out.contains("bytes per fault"), "{out}");
    let show = ok(&db, &["trace", f.to_str().unwrap()]);
    assert!(
        show.contains("pft-vma-per-thread on the engine with linux-4.15"),
        "{show}"
    );
    let junk = d.0.join("junk.pltrace");
    std::fs::write(&junk, b"PLTRACE8 but not really").unwrap();
    fails(&db, &["trace", junk.to_str().unwrap()], "corrupt");
    fails(
        &db,
        &["capture", "pft", "--out", "/nonexistent-dir/x.pltrace"],
        "no such directory",
    );
}

#[test]
fn validation_prints_rows_changes_and_a_summary() {
    let d = Dir::new("proj-validate");
    let json = d.0.join("v.json");
    let out = ok(
        &d.db(),
        &[
            "validate",
            "--table",
            "pft-single-vma-2023",
            "--no-self-check",
            "--samples",
            "1",
            "--captures",
            "2",
            "--ops-per-cpu",
            "256",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(
        out.contains("pft-single-vma-2023 (pft-pvl-2023) on icelake-2s-64c: harmonic means"),
        "{out}"
    );
    assert_eq!(out.matches("\npvl-v2 ").count(), 20 + 20, "{out}");
    for class in ["beyond", "within"] {
        assert!(
            out.contains(&format!(
                "pft-single-vma-2023: changes {class} the published noise"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("all tables: changes {class} the published noise")),
            "{out}"
        );
    }
    assert!(out.contains("with the published sign"), "{out}");
    assert!(
        out.contains("left out of these summaries: mm-unstable-20230210 threads 1 faults/cpu"),
        "{out}"
    );
    // The one fitted number is fitted again from these captures, its arithmetic printed; or,
    // where 256 faults a CPU already replay slower than the published fault (a slow or loaded
    // host), the file's value is kept and the reason printed.
    assert!(
        out.contains(
            "kernel.trap_ns refitted on this host: mm-unstable-20230210 threads 1 task faults/sec published 1112.62 ns, replayed without a trap"
        ) || out.contains(
            "kernel.trap_ns 690 ns, the machine file's: it could not be fitted again here"
        ),
        "{out}"
    );
    // --json carries the same summaries, per table and overall.
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = &j["pft-single-vma-2023"];
    assert_eq!(t["mean"], "harmonic");
    assert_eq!(t["captures"], 2);
    let b = &t["summary"]["beyond_noise"];
    assert!(b["changes"].as_u64().unwrap() >= 10, "{b}");
    assert!(
        b["right_sign"].is_u64() && b["within_10_points"].is_u64(),
        "{b}"
    );
    assert_eq!(
        j["all-tables"]["beyond_noise"]["changes"], b["changes"],
        "{j}"
    );
    // The posting's claim, judged on each of the two captures too.
    let claim = &t["claims"][0];
    assert!(
        claim["says"].as_str().unwrap().contains("worst case"),
        "{claim}"
    );
    let verdict = claim["verdict"].as_str().unwrap();
    assert!(
        ["agrees", "disagrees", "mixed", "not-checked"].contains(&verdict),
        "{claim}"
    );
    assert_eq!(claim["per_capture"].as_array().unwrap().len(), 2, "{claim}");
    assert!(claim["per_capture"][0]["agrees"].is_boolean(), "{claim}");
    assert!(
        out.contains("what the posting says limited its kernels"),
        "{out}"
    );
    let trap = &t["trap"];
    assert_eq!(trap["file_ns"], 690.0, "{trap}");
    if trap["refit"].is_null() {
        assert!(trap["refit_failed"].is_string(), "{trap}");
    } else {
        let refit = trap["refit"]["trap_ns"].as_f64().unwrap();
        let replayed = trap["refit"]["replayed_ns"].as_f64().unwrap();
        assert_eq!(refit, (1112.62f64 - replayed).round(), "{trap}");
    }
    fails(
        &d.db(),
        &["validate", "--table", "nope"],
        "unknown published table `nope`",
    );
    fails(
        &d.db(),
        &["validate", "--self-check-only", "--trap-from-file"],
        "cannot be used with",
    );
    // A held-out table is never fitted to, and --held-out adds those tables to a full run.
    fails(
        &d.db(),
        &[
            "calibrate",
            "--machine",
            "granite-rapids-2s-128c",
            "--from-table",
            "page_fault2-gnr-2025",
        ],
        "--from-table page_fault2-gnr-2025 is held out: nothing is fitted to it",
    );
    fails(
        &d.db(),
        &["validate", "--held-out", "--table", "pft-single-vma-2023"],
        "cannot be used with",
    );
}

/// `validate --sensitivity`: per published change, its extremes over the machine's numbers
/// scaled alone and the variants that give it the published sign, and the table's count.
#[test]
fn validate_sensitivity_says_which_errors_an_estimate_could_account_for() {
    let d = Dir::new("validate-sensitivity");
    let json = d.path("v.json");
    let out = ok(
        &d.db(),
        &[
            "validate",
            "--table",
            "pft-single-vma-2023",
            "--no-self-check",
            "--samples",
            "1",
            "--captures",
            "1",
            "--ops-per-cpu",
            "128",
            "--sensitivity",
            "20",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(
        out.contains("each machine number scaled alone by x0.80 and x1.20"),
        "{out}"
    );
    assert!(out.contains("published sign under"), "{out}");
    // Every published change gets a line: 10 thread counts, two metrics.
    let part = out.split("published sign under").nth(1).unwrap();
    assert_eq!(part.matches("\npvl-v2 ").count(), 20, "{out}");
    assert!(
        out.contains("pft-single-vma-2023: sensitivity: wrong signs beyond the published noise: "),
        "{out}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let changes = doc["pft-single-vma-2023"]["sensitivity"]["changes"]
        .as_array()
        .unwrap();
    assert_eq!(changes.len(), 20);
    // icelake-2s-64c has two sockets and SMT: all 12 numbers apply, two factors each.
    assert_eq!(changes[0]["variants"].as_array().unwrap().len(), 24);
    fails(
        &d.db(),
        &[
            "validate",
            "--table",
            "pft-single-vma-2023",
            "--sensitivity",
            "20",
            "--format",
            "markdown-summary",
        ],
        "--sensitivity shows each change's variants",
    );
    fails(
        &d.db(),
        &["validate", "--sensitivity", "95"],
        "invalid value '95'",
    );
    fails(
        &d.db(),
        &["validate", "--self-check-only", "--sensitivity", "20"],
        "cannot be used with",
    );
}

/// `project --sensitivity`: after the comparison, each machine number scaled alone and the
/// same captures replayed, a table of each change's extremes; bad requests are one line.
#[test]
fn sensitivity_replays_each_machine_number_scaled_and_says_whether_signs_hold() {
    let d = Dir::new("proj-sensitivity");
    let db = d.db();
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--profile",
            "mm-unstable-20230210",
            "--profile",
            "pvl-v2",
            "--tasks",
            "1,16",
            "--captures",
            "1",
            "--ops-per-cpu",
            "256",
        ];
        a.extend_from_slice(extra);
        a
    };
    let out = ok(&db, &args(&["--sensitivity", "20"]));
    for key in [
        "cpu.ghz",
        "latency.core_ns",
        "latency.remote_ns",
        "kernel.trap_ns",
    ] {
        assert!(out.contains(&format!("{key}  ")), "{key} missing:\n{out}");
    }
    assert!(out.contains("x0.80") && out.contains("x1.20"), "{out}");
    // Two metrics (faults/cpu and faults/sec) at two task counts for pvl-v2.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("pvl-v2") && l.contains("threads"))
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert!(
        out.contains("of 4 changes keep their sign under every variant"),
        "{out}"
    );
    fails(
        &db,
        &args(&["--sensitivity", "20", "--format", "json"]),
        "--sensitivity has no JSON or CSV layout",
    );
    fails(&db, &args(&["--sensitivity", "0"]), "invalid value '0'");
    fails(
        &db,
        &[
            "project",
            "--machine",
            "icelake-2s-64c",
            "pft",
            "--profile",
            "pvl-v2",
            "--tasks",
            "1",
            "--sensitivity",
            "20",
        ],
        "at least two profiles",
    );
}
