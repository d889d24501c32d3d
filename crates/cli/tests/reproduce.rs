//! `pagelab reproduce` end to end with its projection: published, projected and measured side
//! by side, the projected runs stored as `project` stores them, the one-line refusals; the
//! experiments listing; and the README's agreement table against what `validate` prints.
//! Every run is made tiny (32 MiB pft, a few samples, 64 faults per replayed CPU).

use std::path::Path;

mod common;
use common::{Dir, fails, fails_untouched, ok, pagelab};

/// A small copy of pft-pvl-2023 under a name of its own; `extra` adds keys (machine,
/// published).
fn tiny_pvl(d: &Dir, name: &str, extra: &str) -> String {
    let exp = d.path(&format!("{name}.toml"));
    std::fs::write(
        &exp,
        format!(
            "name = \"{name}\"\ndescription = \"tiny\"\nsource = \"a test\"\nworkload = \"pft\"\n\
             profiles = [\"mm-unstable-20230210\", \"pvl-v2\"]\nmodes = [\"threads\"]\n\
             tasks = \"1,2\"\nsamples = 3\nsize = \"32M\"\nsignificance = \"ttest\"\n{extra}"
        ),
    )
    .unwrap();
    exp.to_str().unwrap().to_string()
}

/// The side-by-side row for (tasks, metric, profile): its three cells, split on two or more
/// spaces (cells hold single spaces: `2683652 -9.51%`).
fn side_row(out: &str, tasks: u32, metric: &str, profile: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 4
                && w[0] == "threads"
                && w[1] == tasks.to_string()
                && w[2] == metric
                && w[3] == profile
        })
        .unwrap_or_else(|| panic!("no row threads {tasks} {metric} {profile} in:\n{out}"));
    let rest = line.split_once(profile).unwrap().1;
    rest.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

fn is_change(s: &str) -> bool {
    let s = s.trim_matches(|c| c == '(' || c == ')' || c == '*');
    s.ends_with('%') && s[..s.len() - 1].parse::<f64>().is_ok()
}

/// A cell `value change` (a number then a percent change).
fn has_value_and_change(cell: &str) -> bool {
    let mut w = cell.split_whitespace();
    matches!((w.next(), w.next()), (Some(v), Some(c)) if v.parse::<f64>().is_ok() && is_change(c))
}

#[test]
fn reproduce_sets_published_projected_and_measured_side_by_side() {
    let d = Dir::new("repro-side");
    let db = d.db();
    let exp = tiny_pvl(
        &d,
        "tiny-pvl",
        "published = \"pft-single-vma-2023\"\nmachine = \"icelake-2s-64c\"\n",
    );
    let o = pagelab(
        &db,
        &[
            "reproduce",
            &exp,
            "--project-tasks",
            "1,4",
            "--project-samples",
            "1",
            "--ops-per-cpu",
            "64",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    // The table ships and was measured on the projection's machine: its fitted row's trap is
    // fitted again from this projection's captures and the arithmetic said, or (64 faults a
    // CPU replay slower than the published fault on a slow host) the file's value is kept
    // and the reason said.
    assert!(
        err.contains(
            "kernel.trap_ns refitted on this host: mm-unstable-20230210 threads 1 task faults/sec published 1112.62 ns"
        ) || err.contains(
            "kernel.trap_ns 690 ns, the machine file's: it could not be fitted again here (calibrate pft-single-vma-2023: the replay without a trap takes"
        ),
        "{err}"
    );
    assert!(
        err.contains("(from pft-single-vma-2023; --trap-from-file keeps the file's)"),
        "{err}"
    );
    let out = String::from_utf8(o.stdout).unwrap();
    // The measured comparison comes first, as before.
    assert!(out.contains("Hmean     faults/sec-1"), "{out}");
    assert!(
        out.contains("published (pft-single-vma-2023)")
            && out.contains("projected (icelake-2s-64c)")
            && out.contains("measured (here)"),
        "{out}"
    );
    assert!(
        out.contains("harmonic means, as pft-single-vma-2023 publishes"),
        "{out}"
    );
    // One capture a profile (the default): the projected changes carry no range, and say so.
    assert!(
        out.contains("projected: one capture per profile, so a change shows no range"),
        "{out}"
    );
    // One task: all three views, the baseline without a change, pvl-v2 with one in each.
    let base = side_row(&out, 1, "faults/sec", "mm-unstable-20230210");
    assert_eq!(base.len(), 3, "{base:?}");
    assert!(base.iter().all(|c| c.parse::<f64>().is_ok()), "{base:?}");
    let pvl = side_row(&out, 1, "faults/sec", "pvl-v2");
    assert_eq!(pvl.len(), 3, "{pvl:?}");
    assert!(pvl.iter().all(|c| has_value_and_change(c)), "{pvl:?}");
    // The published change at one task is the table's: 894247.3174 against 898781.7694.
    assert!(pvl[0].starts_with("894247 -0.50%"), "{pvl:?}");
    // Measured changes carry compare's verdict marks.
    assert!(pvl[2].contains("%)") || pvl[2].ends_with("%*"), "{pvl:?}");
    // Two tasks: measured here only.
    let two = side_row(&out, 2, "faults/sec", "pvl-v2");
    assert_eq!(&two[..2], ["-", "-"], "{two:?}");
    assert!(has_value_and_change(&two[2]), "{two:?}");
    // Four: published and projected, not measured.
    let four = side_row(&out, 4, "faults/sec", "pvl-v2");
    assert!(four[0].starts_with("2683652 -9.51%"), "{four:?}");
    assert!(has_value_and_change(&four[1]) && four[2] == "-", "{four:?}");
    // 128: published only (not projected at these task counts).
    let top = side_row(&out, 128, "faults/cpu", "pvl-v2");
    assert!(has_value_and_change(&top[0]), "{top:?}");
    assert_eq!(&top[1..], ["-", "-"], "{top:?}");

    // The projection is stored as `project` stores it: projected runs labelled
    // <profile>@<machine>, under the experiment, which compare finds.
    let runs: serde_json::Value =
        serde_json::from_str(&ok(&db, &["runs", "--json", "--origin", "projected"])).unwrap();
    let mut labels: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["meta"]["label"].as_str().unwrap())
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            "mm-unstable-20230210@icelake-2s-64c",
            "pvl-v2@icelake-2s-64c"
        ]
    );
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["meta"]["experiment"] == "tiny-pvl"
                && r["meta"]["machine"] == "icelake-2s-64c"),
        "{runs}"
    );
    let c = ok(
        &db,
        &[
            "compare",
            "mm-unstable-20230210@icelake-2s-64c",
            "pvl-v2@icelake-2s-64c",
        ],
    );
    assert!(c.contains("faults/sec-4"), "{c}");

    // --no-project: measured only, nothing more projected, and the table says so.
    let out = ok(&db, &["reproduce", &exp, "--no-project", "--samples", "2"]);
    assert!(out.contains("projected: none: --no-project"), "{out}");
    let pvl = side_row(&out, 1, "faults/sec", "pvl-v2");
    assert!(pvl[0].starts_with("894247") && pvl[1] == "-", "{pvl:?}");
    let again: serde_json::Value =
        serde_json::from_str(&ok(&db, &["runs", "--json", "--origin", "projected"])).unwrap();
    assert_eq!(again.as_array().unwrap().len(), 2);
}

#[test]
fn an_experiment_without_a_machine_prints_the_measured_columns_and_says_why() {
    let d = Dir::new("repro-nomachine");
    let db = d.db();
    let exp = tiny_pvl(&d, "tiny-nomachine", "");
    let out = ok(&db, &["reproduce", &exp, "--samples", "2"]);
    assert!(
        out.contains(
            "projected: none: experiment tiny-nomachine names no machine (no `machine = \"...\"` key)"
        ),
        "{out}"
    );
    assert!(
        out.contains("published: no table of this comparison ships with pagelab"),
        "{out}"
    );
    let pvl = side_row(&out, 2, "faults/cpu", "pvl-v2");
    assert_eq!(&pvl[..2], ["-", "-"], "{pvl:?}");
    assert!(has_value_and_change(&pvl[2]), "{pvl:?}");
    // JSON: one document holding the measured comparison and the side-by-side rows.
    let json: serde_json::Value = serde_json::from_str(&ok(
        &db,
        &["reproduce", &exp, "--samples", "2", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(json["measured"]["columns"][1]["label"], "pvl-v2", "{json}");
    let rows = json["side_by_side"]["rows"].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r["profile"] == "pvl-v2"
            && r["tasks"] == 2
            && r["measured"]["change_pct"].is_f64()
            && r["projected"]["value"].is_null()),
        "{json}"
    );
}

/// kvcache's experiment names the posting's machine and is projectable: `experiments` says so,
/// and `reproduce` checks its projection against that machine before measuring anything.
#[test]
fn mglru_bulk_2023_is_projectable_to_the_epyc_7k62() {
    let d = Dir::new("repro-kv");
    let db = d.db();
    let one = ok(&db, &["experiments", "mglru-bulk-2023"]);
    for want in ["machine:    epyc-7k62-2s", "projectable: yes"] {
        assert!(one.contains(want), "{want}: {one}");
    }
    fails_untouched(
        &db,
        &["reproduce", "mglru-bulk-2023", "--project-tasks", "16,256"],
        "256 tasks is more than the 192 CPUs of epyc-7k62-2s",
    );
    assert!(
        !Path::new(&db).exists(),
        "a refused reproduce created the store"
    );
}

#[test]
fn reproduce_refuses_bad_input_in_one_line_before_measuring() {
    let d = Dir::new("repro-bad");
    let db = d.db();
    let none = tiny_pvl(&d, "tiny-none", "");
    let with = tiny_pvl(&d, "tiny-with", "machine = \"icelake-2s-64c\"\n");
    fails_untouched(
        &db,
        &["reproduce", "no-such-experiment"],
        "unknown experiment `no-such-experiment`",
    );
    fails_untouched(
        &db,
        &["reproduce", &none, "--no-project"],
        "--no-project: there is no projection to skip: experiment tiny-none names no machine",
    );
    fails_untouched(
        &db,
        &["reproduce", &none, "--captures", "2"],
        "--captures applies to the projection, and there is none: experiment tiny-none names no machine",
    );
    fails_untouched(
        &db,
        &["reproduce", &with, "--no-project", "--project-tasks", "1,4"],
        "--project-tasks",
    );
    fails_untouched(
        &db,
        &["reproduce", &with, "--project-tasks", "1,256"],
        "256 tasks is more than the 128 CPUs of icelake-2s-64c",
    );
    fails_untouched(
        &db,
        &["reproduce", &with, "--project-tasks", "lots"],
        "--project-tasks",
    );
    let bad = tiny_pvl(&d, "tiny-bad", "machine = \"icelake-2s-46c\"\n");
    fails_untouched(
        &db,
        &["reproduce", &bad],
        "experiment tiny-bad: machine = \"icelake-2s-46c\" names no shipped machine",
    );
    assert!(
        !Path::new(&db).exists(),
        "a refused reproduce created the store"
    );
}

#[test]
fn experiments_lists_seed_machine_and_what_ships() {
    let d = Dir::new("repro-list");
    let out = ok(&d.db(), &["experiments"]);
    let row = |name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not listed:\n{out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert!(out.starts_with("experiment"), "{out}");
    assert_eq!(&row("pft-pvl-2023")[1..4], ["icelake-2s-64c", "yes", "yes"]);
    assert_eq!(
        &row("page_fault1-lru-lock-2018")[1..4],
        ["broadwell-2s-44c", "yes", "yes"]
    );
    assert_eq!(
        &row("pft-pvl-vma-per-thread-2023")[1..4],
        ["icelake-2s-64c", "no", "yes"]
    );
    assert_eq!(&row("mglru-bulk-2023")[1..4], ["epyc-7k62-2s", "no", "yes"]);
    // The seed: where the comparison was published.
    assert!(
        row("pft-pvl-2023")
            .join(" ")
            .contains("[PATCH v2 00/33] Per-VMA locks")
    );
    let one = ok(&d.db(), &["experiments", "pft-pvl-2023"]);
    for want in [
        "machine:    icelake-2s-64c",
        "published:  table pft-single-vma-2023",
        "projectable: yes",
        "seed:       linux-mm, 2023-02",
    ] {
        assert!(one.contains(want), "{want}: {one}");
    }
    fails(
        &d.db(),
        &["experiments", "nope"],
        "unknown experiment `nope`",
    );
}

/// The README's agreement table: its header, one row per shipped experiment with the same
/// experiment, machine and table as `validate --format markdown-summary` prints, cells of the
/// shape validate prints, and the command that regenerates it named. The validation here is
/// tiny (one table, one capture, one sample, 64 faults per CPU): the numbers are the README's
/// own, from a real run; this checks that they are where validate puts them.
#[test]
fn the_readme_agreement_table_is_what_validate_prints() {
    let d = Dir::new("repro-readme");
    let out = ok(
        &d.db(),
        &[
            "validate",
            "--format",
            "markdown-summary",
            "--table",
            "pft-single-vma-2023",
            "--samples",
            "1",
            "--captures",
            "1",
            "--ops-per-cpu",
            "64",
        ],
    );
    let table_rows = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
            .map(|l| {
                l.trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect()
    };
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let begin = readme
        .find("<!-- agreement:begin -->")
        .expect("README has the begin marker");
    let end = readme
        .find("<!-- agreement:end -->")
        .expect("README has the end marker");
    let section = &readme[begin..end];
    let (ours, theirs) = (table_rows(&out), table_rows(section));
    assert!(ours.len() > 2, "{out}");
    assert_eq!(
        ours[0], theirs[0],
        "README's header differs from validate's"
    );
    assert_eq!(
        ours.len(),
        theirs.len(),
        "README's rows are not the shipped experiments"
    );
    let fraction = |c: &str| {
        let w: Vec<&str> = c.split(' ').collect();
        w.len() == 3 && w[1] == "of" && w[0].parse::<u32>().is_ok() && w[2].parse::<u32>().is_ok()
    };
    let number = |c: &str| c.trim_end_matches('%').parse::<f64>().is_ok();
    for (o, t) in ours[1..].iter().zip(&theirs[1..]) {
        assert_eq!(o.len(), 9, "{o:?}");
        assert_eq!(&o[..4], &t[..4], "README row differs from validate's");
        if o[3] == "none ships" {
            assert_eq!(&o[4..], &t[4..], "{t:?}");
            continue;
        }
        // Every shipped table is validated in the README's run (the held-out ones with
        // `--held-out`); a table may have no change within the published noise.
        let held_out = t[3].ends_with(" (held out)");
        assert!(
            fraction(&t[4])
                && fraction(&t[5])
                && number(&t[6])
                && (fraction(&t[7]) || held_out && t[7] == "-"),
            "README row {t:?}"
        );
        assert!(t[8].ends_with('%') && number(&t[8]), "README row {t:?}");
        if o[1] == "pft-pvl-2023" {
            assert!(
                fraction(&o[4]) && fraction(&o[5]) && number(&o[6]) && fraction(&o[7]),
                "{o:?}"
            );
        }
    }
    // The rows name every table that ships, the held-out ones as such.
    for t in [
        "page_fault1-2018",
        "pft-single-vma-2023",
        "page_fault2-gnr-2025 (held out)",
        "page_fault2-skl-2024 (held out)",
    ] {
        assert!(theirs.iter().any(|r| r[3] == t), "README misses {t}");
    }
    assert!(
        section.contains("Generated by `pagelab validate --format markdown-summary` (--samples "),
        "{section}"
    );
    assert!(readme.contains("`scripts/readme-agreement`"));
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/readme-agreement"
    ))
    .unwrap();
    assert!(script.contains("validate --format markdown-summary --held-out \"$@\""));
    fails(
        &d.db(),
        &[
            "validate",
            "--format",
            "markdown-summary",
            "--self-check-only",
        ],
        "--self-check-only",
    );
}

/// `project --experiment E` takes the machine E names; without one, --machine is needed.
#[test]
fn project_takes_the_experiments_machine() {
    let d = Dir::new("repro-projmachine");
    let db = d.db();
    let with = tiny_pvl(&d, "tiny-proj", "machine = \"icelake-2s-64c\"\n");
    let none = tiny_pvl(&d, "tiny-proj-none", "");
    let out = ok(
        &db,
        &[
            "project",
            "--experiment",
            &with,
            "--tasks",
            "1,4",
            "--samples",
            "1",
            "--captures",
            "1",
            "--ops-per-cpu",
            "64",
        ],
    );
    assert!(out.contains("pvl-v2@icelake-2s-64c"), "{out}");
    fails_untouched(
        &db,
        &["project", "--experiment", &none, "--tasks", "1"],
        &format!("--machine is needed: experiment {none} names no machine"),
    );
    fails_untouched(
        &db,
        &["project", "pft", "--profile", "pvl-v2"],
        "--machine is needed",
    );
}
