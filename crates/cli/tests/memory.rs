//! Memory is bounded by the question, not by the store: `compare`, `export`, `plot` and `report`
//! on a run of 1.5 million samples each stay under 200 MB of peak resident memory, where
//! reading every sample into memory needs several times that.
//!
//! This file holds one test so that the peak of the test process's children
//! (`getrusage(RUSAGE_CHILDREN)`, the largest peak of any child waited for) is the peak of the
//! commands below and of nothing else.

mod common;

use std::io::BufRead;
use std::path::Path;

use common::{Dir, ok};

const SAMPLES: u32 = 1_500_000;
const LIMIT_MB: i64 = 200;

/// The largest peak resident set size of any child process waited for so far, in MB.
fn children_peak_mb() -> i64 {
    // SAFETY: rusage is a plain C struct of integers and timevals, for which all-zero bytes
    // are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; getrusage only writes into it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    // Linux reports ru_maxrss in kilobytes.
    ru.ru_maxrss / 1024
}

/// A store with one run of `SAMPLES` samples: created by `pagelab import` (so it has the schema
/// and a run), then filled directly, in one transaction with one prepared statement.
fn big_store(d: &Dir) -> std::path::PathBuf {
    let db = d.db();
    let seed = d.path("seed.csv");
    std::fs::write(&seed, "tasks,value\n1,100\n1,101\n").unwrap();
    ok(
        &db,
        &[
            "import",
            seed.to_str().unwrap(),
            "--label",
            "big",
            "--workload",
            "pft",
        ],
    );
    let mut conn = rusqlite::Connection::open(&db).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO samples (run_id, mode, tasks, metric, higher_is_better, repeat, seq, value)
                 VALUES (1, 'threads', 4, 'faults/sec', 1, 0, ?1, ?2)",
            )
            .unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for seq in 0..SAMPLES {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = 1.0e6 + (x % 100_000) as f64;
            stmt.execute(rusqlite::params![seq, value]).unwrap();
        }
    }
    tx.commit().unwrap();
    db
}

/// Runs `args` and checks that no child so far peaked above the limit.
fn bounded(db: &Path, what: &str, args: &[&str]) -> String {
    let out = ok(db, args);
    let peak = children_peak_mb();
    assert!(
        peak < LIMIT_MB,
        "{what} on {SAMPLES} samples peaked at {peak} MB (limit {LIMIT_MB} MB)"
    );
    eprintln!("{what}: children's peak so far {peak} MB");
    out
}

#[test]
fn commands_on_a_big_run_stay_under_200_mb() {
    let d = Dir::new("memory");
    let db = big_store(&d);
    let table = bounded(&db, "compare", &["compare", "big"]);
    assert!(table.contains("Hmean     faults/sec-4"), "{table}");
    assert!(table.contains("BHmean-99 faults/sec-4"), "{table}");

    let json = d.path("all.json");
    bounded(
        &db,
        "export json",
        &[
            "export",
            "--format",
            "json",
            "--out",
            json.to_str().unwrap(),
        ],
    );
    // Valid JSON, every sample in it: count the objects without loading the file.
    let f = std::io::BufReader::new(std::fs::File::open(&json).unwrap());
    let (mut n, mut last) = (0u64, String::new());
    for line in f.lines() {
        let line = line.unwrap();
        if line.trim_start().starts_with("\"run_id\"") {
            n += 1;
        }
        last = line;
    }
    assert_eq!(n, u64::from(SAMPLES) + 2);
    assert_eq!(last, "]");

    let csv = d.path("all.csv");
    bounded(
        &db,
        "export csv",
        &["export", "--out", csv.to_str().unwrap()],
    );
    let lines = std::io::BufReader::new(std::fs::File::open(&csv).unwrap())
        .lines()
        .count();
    assert_eq!(lines as u64, 1 + u64::from(SAMPLES) + 2);

    let report = d.path("report");
    bounded(
        &db,
        "report",
        &["report", "big", "--out", report.to_str().unwrap()],
    );
    let page = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(
        page.contains("BHmean-99"),
        "the report has the comparison table"
    );

    let plot = d.path("big.svg");
    bounded(
        &db,
        "plot",
        &[
            "plot",
            "big",
            "--metric",
            "faults/sec",
            "--out",
            plot.to_str().unwrap(),
        ],
    );
}
