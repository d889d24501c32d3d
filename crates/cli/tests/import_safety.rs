//! `pagelab import` never stores a wrong value and never reads without end: a file cut while it
//! was written, or an input that does not end, is refused in one line and the store keeps
//! exactly what it had.

use std::process::{Command, Stdio};

mod common;
use common::{Dir, fails_untouched, ok};
use pagelab_bench::import::MAX_INPUT_BYTES;

fn fixture(name: &str) -> String {
    let p = format!("{}/../bench/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn a_cut_pft_log_is_refused_naming_the_line_and_the_store_is_unchanged() {
    let d = Dir::new("import-cut");
    let db = d.db();
    let text = fixture("pft-threads-2.log");
    let good = d.path("pft-2.log");
    std::fs::write(&good, &text).unwrap();
    let out = ok(&db, &["import", good.to_str().unwrap(), "--label", "first"]);
    assert!(out.contains("imported 6 samples"), "{out}");

    // Cut inside the second row's fault/wsec, 166141.469: what is left, 1661, is a number.
    let at = text.find("166141.469").unwrap() + "1661".len();
    let cut = d.path("pft-cut.log");
    std::fs::write(&cut, &text[..at]).unwrap();
    let name = cut.to_str().unwrap();
    fails_untouched(
        &db,
        &["import", name, "--label", "cut"],
        &format!("{name}:2: the file ends inside this line"),
    );
    fails_untouched(
        &db,
        &["import", name, "--label", "cut", "--format", "pft"],
        "cut short",
    );
    let runs = ok(&db, &["runs"]);
    assert!(runs.contains("1 run(s)"), "{runs}");
}

#[test]
fn an_endless_input_stops_at_the_limit_with_nothing_stored() {
    let d = Dir::new("import-endless");
    let db = d.db();
    let good = d.path("pf1.txt");
    std::fs::write(&good, fixture("wis-page_fault1-threads-t1.txt")).unwrap();
    ok(
        &db,
        &[
            "import",
            good.to_str().unwrap(),
            "--label",
            "first",
            "--mode",
            "threads",
            "--tasks",
            "1",
        ],
    );
    let limit = format!("{} MiB", MAX_INPUT_BYTES >> 20);
    fails_untouched(&db, &["import", "/dev/zero", "--label", "x"], &limit);

    // A pipe that never closes, of lines that each parse: the limit, not the end, stops it.
    let before = std::fs::read(&db).unwrap();
    let mut yes = Command::new("yes")
        .arg("1,2")
        .stdout(Stdio::piped())
        .spawn()
        .expect("yes runs");
    let out = Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .args(["--db", db.to_str().unwrap()])
        .args(["import", "/dev/stdin", "--label", "y", "--format", "csv"])
        .args(["--workload", "w"])
        .env_remove("PAGELAB_DB")
        .stdin(yes.stdout.take().unwrap())
        .output()
        .expect("the pagelab binary runs");
    let _ = yes.kill();
    let _ = yes.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an endless import succeeded");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&limit), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "the store changed");

    // The limit is documented where users look.
    let help = ok(&db, &["import", "--help"]);
    assert!(help.contains(&limit), "{help}");
}

#[test]
fn a_csv_with_a_byte_order_mark_imports() {
    let d = Dir::new("import-bom");
    let db = d.db();
    let csv = d.path("samples.csv");
    std::fs::write(&csv, format!("\u{feff}{}", fixture("samples.csv"))).unwrap();
    let out = ok(&db, &["import", csv.to_str().unwrap(), "--label", "bom"]);
    assert!(
        out.contains("imported 7 samples") && out.contains("csv format"),
        "{out}"
    );
}
