//! Issue 17 for machines and the projector's output files, end to end: a machine file outside
//! physics or named like a shipped machine it is not is refused in one line before anything is
//! stored; `capture --out`, `calibrate --out` and `validate --json` refuse the store (and any
//! database or directory) before any work, and leave it whole.

mod common;
use std::time::{Duration, Instant};

use common::{Dir, fails_untouched as fails, ok};

/// A results store with one run in it, so that "untouched" means something.
fn store_with_a_run(d: &Dir) -> std::path::PathBuf {
    let db = d.db();
    let csv = d.path("kept.csv");
    std::fs::write(&csv, "tasks,value\n1,1000\n1,1010\n").unwrap();
    let out = ok(
        &db,
        &[
            "import",
            csv.to_str().unwrap(),
            "--label",
            "kept",
            "--workload",
            "page_fault1",
        ],
    );
    assert!(out.contains("imported 2 samples"), "{out}");
    db
}

/// A copy of a shipped machine with one text replaced.
fn machine_file(d: &Dir, name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../machines/icelake-2s-64c.toml"
    ))
    .unwrap();
    assert!(text.contains(from), "{from}");
    let p = d.path(name);
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn machine_files_outside_physics_are_refused_by_key() {
    let d = Dir::new("ms-ranges");
    let db = store_with_a_run(&d);
    let cases = [
        (
            "core_ns = 51.0",
            "core_ns = 1e10",
            "latency.core_ns must be from 0.1 to 100000 ns, not 10000000000",
        ),
        (
            "core_ns = 51.0",
            "core_ns = 1e15",
            "latency.core_ns must be from 0.1 to 100000 ns",
        ),
        (
            "core_ns = 51.0",
            "core_ns = nan",
            "latency.core_ns must be from 0.1 to 100000 ns, not NaN",
        ),
        (
            "node_bandwidth_gbs = 155.0",
            "node_bandwidth_gbs = 1e-12",
            "memory.node_bandwidth_gbs must be from 0.1 to 10000 GB/s",
        ),
        (
            "ghz = 3.0",
            "ghz = 0.0",
            "cpu.ghz must be from 0.1 to 10 GHz, not 0",
        ),
        (
            "cores_per_socket = 32",
            "cores_per_socket = 4000",
            "is 16000 CPUs; at most 4096",
        ),
        (
            "[[10, 20], [20, 10]]",
            "[[10, 20], [30, 10]]",
            "numa.distance[0][1] is 20 but numa.distance[1][0] is 30",
        ),
        (
            "[[10, 20], [20, 10]]",
            "[[10, 20]]",
            "numa.distance has 1 rows; it must be 2 x 2",
        ),
    ];
    for (i, (from, to, want)) in cases.iter().enumerate() {
        // Renamed, so that the range (not the shipped name) is what is refused.
        let f = machine_file(&d, &format!("m{i}.toml"), from, to);
        let text = std::fs::read_to_string(&f).unwrap().replacen(
            "name = \"icelake-2s-64c\"",
            &format!("name = \"mine-{i}\""),
            1,
        );
        std::fs::write(&f, text).unwrap();
        fails(&db, &["machines", &f], want);
        fails(
            &db,
            &["project", "--machine", &f, "pft", "--tasks", "1"],
            want,
        );
    }
}

#[test]
fn a_changed_copy_keeping_a_shipped_name_is_refused_and_an_identical_one_loads() {
    let d = Dir::new("ms-names");
    let db = store_with_a_run(&d);
    let copy = machine_file(
        &d,
        "icelake-2s-64c.toml",
        "core_ns = 51.0",
        "core_ns = 60.0",
    );
    let want = "name `icelake-2s-64c` is a shipped machine's, but this file differs from it in latency.core_ns";
    fails(
        &db,
        &[
            "project",
            "--machine",
            &copy,
            "pft",
            "--tasks",
            "1",
            "--samples",
            "1",
        ],
        want,
    );
    fails(&db, &["machines", &copy], want);
    // Byte for byte the shipped file: the same machine, under its own name.
    let same = machine_file(&d, "same.toml", "core_ns = 51.0", "core_ns = 51.0");
    let shown = ok(&db, &["machines", &same]);
    assert_eq!(shown, ok(&db, &["machines", "icelake-2s-64c"]));
}

#[test]
fn capture_out_refuses_the_store_and_any_database_before_capturing() {
    let d = Dir::new("ms-capture");
    let db = store_with_a_run(&d);
    let store = db.to_str().unwrap();
    let t0 = Instant::now();
    fails(
        &db,
        &["capture", "pft", "--out", store],
        "this is the results store in use",
    );
    // By another name too.
    let roundabout = d.0.join(".").join("results.db");
    fails(
        &db,
        &["capture", "pft", "--out", roundabout.to_str().unwrap()],
        "this is the results store in use",
    );
    // Another store is any SQLite database.
    let other = d.path("other.db");
    std::fs::copy(&db, &other).unwrap();
    let before = std::fs::read(&other).unwrap();
    fails(
        &db,
        &["capture", "pft", "--out", other.to_str().unwrap()],
        "is an SQLite database",
    );
    assert_eq!(std::fs::read(&other).unwrap(), before);
    fails(
        &db,
        &["capture", "pft", "--out", d.0.to_str().unwrap()],
        "is a directory",
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "refused before capturing: {:?}",
        t0.elapsed()
    );
    let runs = ok(&db, &["runs"]);
    assert!(
        runs.contains("kept"),
        "the store still lists its run: {runs}"
    );
}

#[test]
fn calibrate_out_is_checked_before_measuring() {
    let d = Dir::new("ms-calibrate");
    let db = store_with_a_run(&d);
    let other = d.path("other.db");
    std::fs::copy(&db, &other).unwrap();
    let t0 = Instant::now();
    // --force overwrites an ordinary file, never the store or a database.
    fails(
        &db,
        &["calibrate", "--out", db.to_str().unwrap(), "--force"],
        "this is the results store in use",
    );
    fails(
        &db,
        &["calibrate", "--out", other.to_str().unwrap(), "--force"],
        "is an SQLite database",
    );
    fails(
        &db,
        &["calibrate", "--out", d.0.to_str().unwrap(), "--force"],
        "is a directory",
    );
    fails(
        &db,
        &[
            "calibrate",
            "--name",
            "my box",
            "--out",
            d.path("m.toml").to_str().unwrap(),
        ],
        "--name: name `my box` must be 1 to 64 letters",
    );
    // Calibrating takes minutes; each refusal came before any of it.
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "refused before measuring: {:?}",
        t0.elapsed()
    );
    assert!(!d.path("m.toml").exists());
}

/// `calibrate --machine M --from-table T` refuses a table measured on another machine, an
/// unknown table, and either flag alone, in one line and before capturing anything.
#[test]
fn calibrate_from_a_table_is_checked_before_capturing() {
    let d = Dir::new("ms-calibrate-table");
    let db = store_with_a_run(&d);
    let t0 = Instant::now();
    fails(
        &db,
        &[
            "calibrate",
            "--machine",
            "icelake-2s-64c",
            "--from-table",
            "page_fault1-2018",
        ],
        "--from-table page_fault1-2018 was measured on broadwell-2s-44c, not on --machine icelake-2s-64c",
    );
    fails(
        &db,
        &[
            "calibrate",
            "--machine",
            "broadwell-2s-44c",
            "--from-table",
            "no-such-table",
        ],
        "unknown published table `no-such-table`",
    );
    fails(
        &db,
        &["calibrate", "--machine", "broadwell-2s-44c"],
        "--from-table",
    );
    fails(
        &db,
        &["calibrate", "--from-table", "page_fault1-2018"],
        "--machine",
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

#[test]
fn validate_json_refuses_the_store_before_validating() {
    let d = Dir::new("ms-validate");
    let db = store_with_a_run(&d);
    let t0 = Instant::now();
    fails(
        &db,
        &["validate", "--json", db.to_str().unwrap()],
        "this is the results store in use",
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

/// The Altix's router fabric and page size, and an experiment's machine, refused by key from the
/// command line: one line, a non-zero exit, the store untouched.
#[test]
fn fabrics_page_sizes_and_experiment_machines_are_refused_by_key() {
    let d = Dir::new("ms-fabric");
    let db = store_with_a_run(&d);
    let altix = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../machines/altix-3700-512p.toml"
    ))
    .unwrap()
    .replacen("name = \"altix-3700-512p\"", "name = \"my-altix\"", 1);
    let cases = [
        (
            "nodes = 256\n",
            "nodes = 512\n",
            "numa.fabric describes 512 nodes",
        ),
        (
            "nodes = 32\n",
            "nodes = 30\n",
            "numa.fabric.levels[1].nodes (30) must be a multiple",
        ),
        (
            "page_size = 16384",
            "page_size = 10000",
            "memory.page_size must be a power of two",
        ),
        (
            "cores_per_socket = 2",
            "cores_per_socket = 32",
            "is 8192 CPUs; at most 4096",
        ),
    ];
    for (i, (from, to, want)) in cases.iter().enumerate() {
        assert!(altix.contains(from), "{from}");
        let f = d.path(&format!("a{i}.toml"));
        std::fs::write(&f, altix.replacen(from, to, 1)).unwrap();
        let f = f.to_str().unwrap();
        fails(&db, &["machines", f], want);
        fails(
            &db,
            &["project", "--machine", f, "lameter", "--tasks", "1"],
            want,
        );
    }
    // An experiment naming a machine that does not ship.
    let exp = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../experiments/lameter-2005.toml"
    ))
    .unwrap()
    .replacen("name = \"lameter-2005\"", "name = \"my-lameter\"", 1)
    .replacen(
        "machine = \"altix-3700-512p\"",
        "machine = \"altix-3700-1024p\"",
        1,
    );
    let e = d.path("my-lameter.toml");
    std::fs::write(&e, exp).unwrap();
    fails(
        &db,
        &[
            "project",
            "--machine",
            "altix-3700-512p",
            "--experiment",
            e.to_str().unwrap(),
        ],
        "machine = \"altix-3700-1024p\" names no shipped machine",
    );
}
