//! The projector's commands end to end, each test on its own store: a projection is stored as
//! projected rows that `runs` and `compare` see; a trace file is written and read back;
//! validation prints its summary; bad input is one line, a non-zero exit and an untouched store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pagelab(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("PAGELAB_DB")
        .output()
        .expect("the pagelab binary runs")
}

fn ok(db: &Path, args: &[&str]) -> String {
    let o = pagelab(db, args);
    assert!(
        o.status.success(),
        "pagelab {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fails(db: &Path, args: &[&str], want: &str) {
    let before = std::fs::read(db).ok();
    let o = pagelab(db, args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "pagelab {args:?} succeeded");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "pagelab {args:?}: not one line: {err}");
    assert!(
        lines[0].starts_with("pagelab: error: ") && lines[0].contains(want),
        "pagelab {args:?}: {err}"
    );
    assert_eq!(
        std::fs::read(db).ok(),
        before,
        "pagelab {args:?} changed the store"
    );
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("pagelab-proj-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn db(&self) -> PathBuf {
        self.0.join("results.db")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_projection_is_stored_as_projected_rows_and_compares() {
    let d = Dir::new("store");
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

#[test]
fn bad_projections_are_refused_before_anything_is_stored() {
    let d = Dir::new("bad");
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
    fails(
        &db,
        &["project", "--machine", "dev-host", "netpipe"],
        "the projector replays page_fault1",
    );
    fails(
        &db,
        &[
            "project",
            "--machine",
            "dev-host",
            "--experiment",
            "netpipe-hopcpu-2016",
        ],
        "the projector replays page_fault1",
    );
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
    let d = Dir::new("trace");
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
    std::fs::write(&junk, b"PLTRACE1 but not really").unwrap();
    fails(&db, &["trace", junk.to_str().unwrap()], "corrupt");
    fails(
        &db,
        &["capture", "pft", "--out", "/nonexistent-dir/x.pltrace"],
        "no such directory",
    );
}

#[test]
fn validation_prints_rows_changes_and_a_summary() {
    let d = Dir::new("validate");
    let out = ok(
        &d.db(),
        &[
            "validate",
            "--table",
            "pft-single-vma-2023",
            "--no-self-check",
            "--samples",
            "1",
            "--ops-per-cpu",
            "256",
        ],
    );
    assert!(
        out.contains("pft-single-vma-2023 (pft-pvl-2023) on icelake-2s-64c"),
        "{out}"
    );
    assert_eq!(out.matches("\npvl-v2 ").count(), 20 + 20, "{out}");
    assert!(out.contains("changes with the published sign"), "{out}");
    fails(
        &d.db(),
        &["validate", "--table", "nope"],
        "unknown published table `nope`",
    );
}
