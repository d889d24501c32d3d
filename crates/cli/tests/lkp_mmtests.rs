//! `pagelab import <mmtests run directory>` and `pagelab compare --format lkp`, end to end: two
//! kernels' mmtests runs (written here by hand in mmtests' layout), imported and compared in the
//! 0-day robot's rows.

mod common;

use std::path::Path;

use common::{Dir, fails, fails_untouched, ok};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A `wis-bench` log of a 2-task run (first eight lines deleted, as mmtests does): the totals
/// and their mean.
fn benchlog(rows: &[(u64, u64, u64)]) -> String {
    let mut s = "measurement\n".to_string();
    for (min, max, total) in rows {
        s += &format!("min:{min} max:{max} total:{total}\n");
    }
    let avg = rows.iter().map(|r| r.2).sum::<u64>() / rows.len() as u64;
    s + &format!("average:{avg}\n")
}

/// `work/log/<kernel>` with wis-pf page_fault1 (processes, 2 tasks) and pft at 2 threads.
fn mmtests_run(root: &Path, kernel: &str, wis: &[(u64, u64, u64)], pft: &str) -> String {
    let dir = root.join("work/log").join(kernel);
    write(
        &dir,
        "iter-0/wis-pf/logs/benchlog-page_fault1_processes-2",
        &benchlog(wis),
    );
    write(&dir, "iter-0/pft/logs/pft-2.log", pft);
    dir.to_str().unwrap().to_string()
}

const OLD_WIS: [(u64, u64, u64); 3] = [
    (100_000, 110_000, 210_000),
    (105_000, 115_000, 220_000),
    (100_000, 120_000, 230_000),
];
const NEW_WIS: [(u64, u64, u64); 3] = [
    (120_000, 121_000, 241_000),
    (120_000, 122_000, 242_000),
    (121_000, 122_000, 243_000),
];
/// 262144 faults over User + System and over Wall.
const OLD_PFT: &str = "   1    2   1     0.02s     0.98s     0.50s  262144.000 524288.000
   1    2   1     0.02s     0.98s     0.50s  262144.000 524288.000
";
const NEW_PFT: &str = "   1    2   1     0.02s     0.78s     0.50s  327680.000 524288.000
   1    2   1     0.02s     0.78s     0.40s  327680.000 655360.000
";

#[test]
fn import_two_kernels_and_compare_in_the_robots_rows() {
    let d = Dir::new("lkp-mmtests");
    let db = d.db();
    let old = mmtests_run(&d.0, "v6.6", &OLD_WIS, OLD_PFT);
    let new = mmtests_run(&d.0, "v6.7", &NEW_WIS, NEW_PFT);
    // The label defaults to the run name.
    let out = ok(&db, &["import", &old]);
    assert!(
        out.contains(
            "imported 3 samples of page_fault1 (mmtests will-it-scale) as run 1, label v6.6"
        ),
        "{out}"
    );
    assert!(
        out.contains("imported 4 samples of pft (mmtests pft) as run 2, label v6.6"),
        "{out}"
    );
    ok(&db, &["import", &new]);
    let text = ok(&db, &["compare", "v6.6", "v6.7", "--format", "lkp"]);
    let want = "\
=========================================================================================
testcase/test:
  will-it-scale/page_fault1

label:
  v6.6
  v6.7

            v6.6                        v6.7
---------------- ---------------------------
         %stddev     %change         %stddev
             \\          |                \\
    220000 ±  4%     +10.0%     242000        will-it-scale.2.processes

=========================================================================================
testcase:
  pft

label:
  v6.6
  v6.7

            v6.6                        v6.7
---------------- ---------------------------
         %stddev     %change         %stddev
             \\          |                \\
    262144           +25.0%     327680        pft.2.threads.faults_per_sec_per_cpu
    524288           +12.5%     589824 ± 15%  pft.2.threads.faults_per_sec

";
    assert_eq!(text, want);
}

#[test]
fn nothing_is_stored_from_a_directory_with_one_bad_log() {
    let d = Dir::new("lkp-mmtests-bad");
    let db = d.db();
    let good = mmtests_run(&d.0, "v6.6", &OLD_WIS, OLD_PFT);
    ok(&db, &["import", &good]);
    // The wis log is fine, the pft log cut short: neither is stored.
    let cut = OLD_PFT.trim_end().to_string();
    let bad = mmtests_run(&d.0, "v6.7", &NEW_WIS, &cut);
    fails_untouched(
        &db,
        &["import", &bad],
        "iter-0/pft/logs/pft-2.log:2: the file ends inside this line",
    );
    let runs = ok(&db, &["runs"]);
    assert!(!runs.contains("v6.7"), "{runs}");
    // Not an mmtests directory; work/log itself.
    let empty = d.path("empty");
    std::fs::create_dir(&empty).unwrap();
    fails_untouched(
        &db,
        &["import", empty.to_str().unwrap()],
        &format!("{}: not an mmtests results directory", empty.display()),
    );
    let log = d.path("work/log");
    fails_untouched(
        &db,
        &["import", log.to_str().unwrap()],
        "holds the mmtests runs v6.6, v6.7",
    );
}

#[test]
fn flags_that_do_not_apply_and_bad_values_are_refused() {
    let d = Dir::new("lkp-mmtests-flags");
    let db = d.db();
    let dir = mmtests_run(&d.0, "v6.6", &OLD_WIS, OLD_PFT);
    fails_untouched(
        &db,
        &["import", &dir, "--tasks", "4"],
        "--tasks does not apply to an mmtests directory",
    );
    fails_untouched(&db, &["import", &dir, "--label", "has space"], "label");
    let f = d.path("pft.log");
    std::fs::write(&f, OLD_PFT).unwrap();
    fails_untouched(
        &db,
        &["import", f.to_str().unwrap()],
        "--label is required for a file",
    );
    ok(&db, &["import", &dir, "--label", "kernel-a"]);
    fails(
        &db,
        &["compare", "kernel-a", "--format", "robot"],
        "[possible values: text, markdown, json, csv, lkp]",
    );
}
