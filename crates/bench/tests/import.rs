//! `pagelab import` parsers on output captured from the real tools (see tests/data/README).

use pagelab_bench::import::{
    self, Format, ImportError, ImportOptions, detect, name_hints, parse, parse_named,
};
use pagelab_bench::results::{Origin, RunData, Status};

fn data(name: &str) -> String {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn opts() -> ImportOptions {
    ImportOptions {
        label: "host".into(),
        command: "pagelab import test".into(),
        ..ImportOptions::default()
    }
}

fn with(mode: &str, tasks: u32) -> ImportOptions {
    ImportOptions {
        mode: Some(mode.into()),
        tasks: Some(tasks),
        ..opts()
    }
}

/// The samples of `(metric, mode, tasks, repeat)`.
fn values(d: &RunData, metric: &str, mode: &str, tasks: u32, repeat: u32) -> Vec<f64> {
    d.samples
        .iter()
        .find(|(k, r, _)| k.metric == metric && k.mode == mode && k.tasks == tasks && *r == repeat)
        .map(|(_, _, v)| v.clone())
        .unwrap_or_else(|| panic!("no {metric} {mode} {tasks} repeat {repeat} in {d:#?}"))
}

fn nr_samples(d: &RunData) -> usize {
    d.samples.iter().map(|(_, _, v)| v.len()).sum()
}

const WIS_FIXTURES: [&str; 5] = [
    "wis-page_fault1-processes-t2.txt",
    "wis-page_fault1-threads-t1.txt",
    "wis-page_fault2-threads-t2.txt",
    "wis-page_fault1-threads-t2-x2.txt",
    "wis-page_fault1-processes-t1-interrupted.txt",
];
const PFT_FIXTURES: [&str; 5] = [
    "pft-threads-1.log",
    "pft-threads-2.log",
    "pft-processes-2.log",
    "pft-title-tag-t2.txt",
    "pft-clipped-t4.txt",
];
const WIS_CSV_FIXTURE: &str = "wis-runtest-page_fault1.csv";
const CSV_FIXTURE: &str = "samples.csv";

fn all_fixtures() -> Vec<(&'static str, Format)> {
    let mut v: Vec<_> = WIS_FIXTURES
        .iter()
        .map(|f| (*f, Format::WillItScale))
        .collect();
    v.extend(PFT_FIXTURES.iter().map(|f| (*f, Format::Pft)));
    v.push((WIS_CSV_FIXTURE, Format::WillItScaleCsv));
    v.push((CSV_FIXTURE, Format::Csv));
    v
}

// --- will-it-scale stdout -------------------------------------------------------------------

#[test]
fn will_it_scale_processes_takes_the_totals_after_measurement() {
    let d = parse(
        Format::WillItScale,
        &data("wis-page_fault1-processes-t2.txt"),
        &with("processes", 2),
    )
    .unwrap();
    assert_eq!(
        d.meta.workload, "page_fault1",
        "from `testcase:Anonymous memory page fault`"
    );
    assert_eq!(d.meta.target, "will-it-scale");
    assert_eq!(d.meta.origin, Origin::Imported);
    assert_eq!(d.meta.label, "host");
    assert_eq!(d.meta.command, "pagelab import test");
    assert_eq!(d.meta.pagelab_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(d.meta.host_json, None);
    assert_eq!(d.meta.profile, None);
    assert_eq!(d.status, Status::Complete);
    assert_eq!(d.samples.len(), 1);
    let k = &d.samples[0].0;
    assert_eq!((k.mode.as_str(), k.tasks), ("processes", 2));
    assert_eq!(
        (k.metric.as_str(), k.higher_is_better),
        ("faults/sec", true)
    );
    // The five lines after `measurement`; their mean is the file's `average:298856`.
    assert_eq!(
        values(&d, "faults/sec", "processes", 2, 0),
        [285511.0, 296258.0, 268727.0, 308746.0, 335039.0]
    );
}

#[test]
fn will_it_scale_threads_and_page_fault2() {
    let d = parse(
        Format::WillItScale,
        &data("wis-page_fault1-threads-t1.txt"),
        &with("threads", 1),
    )
    .unwrap();
    let v = values(&d, "faults/sec", "threads", 1, 0);
    assert_eq!(v.len(), 5);
    assert_eq!((v[0], v[4]), (307387.0, 276741.0));

    let d = parse(
        Format::WillItScale,
        &data("wis-page_fault2-threads-t2.txt"),
        &with("threads", 2),
    )
    .unwrap();
    assert_eq!(d.meta.workload, "page_fault2");
    let v = values(&d, "faults/sec", "threads", 2, 0);
    assert_eq!(v.len(), 5);
    assert_eq!((v[0], v[4]), (272406.0, 306697.0));
}

#[test]
fn will_it_scale_appended_runs_are_repeats() {
    let d = parse(
        Format::WillItScale,
        &data("wis-page_fault1-threads-t2-x2.txt"),
        &with("threads", 2),
    )
    .unwrap();
    assert_eq!(d.status, Status::Complete);
    assert_eq!(d.samples.len(), 2);
    assert_eq!(
        values(&d, "faults/sec", "threads", 2, 0),
        [200668.0, 187358.0, 223638.0]
    );
    assert_eq!(
        values(&d, "faults/sec", "threads", 2, 1),
        [225042.0, 186302.0, 199203.0]
    );
}

#[test]
fn will_it_scale_interrupted_run_is_incomplete() {
    let d = parse(
        Format::WillItScale,
        &data("wis-page_fault1-processes-t1-interrupted.txt"),
        &with("processes", 1),
    )
    .unwrap();
    assert_eq!(d.status, Status::Incomplete);
    assert_eq!(
        values(&d, "faults/sec", "processes", 1, 0),
        [249599.0, 227207.0, 217770.0]
    );
}

#[test]
fn will_it_scale_without_marker_skips_the_warmup_option() {
    let text: String = data("wis-page_fault1-threads-t1.txt")
        .lines()
        .filter(|l| *l != "measurement")
        .map(|l| format!("{l}\n"))
        .collect();
    let o = ImportOptions {
        warmup: 6,
        ..with("threads", 1)
    };
    let d = parse(Format::WillItScale, &text, &o).unwrap();
    // average: is only checked against a marked measurement; the 11 totals minus 6 remain.
    assert_eq!(
        values(&d, "faults/sec", "threads", 1, 0),
        [307387.0, 270176.0, 297380.0, 279747.0, 276741.0]
    );
    let o = ImportOptions {
        warmup: 11,
        ..with("threads", 1)
    };
    let e = parse(Format::WillItScale, &text, &o).unwrap_err();
    assert!(matches!(e, ImportError::NoSamples { .. }), "{e}");
}

#[test]
fn will_it_scale_options_and_names_supply_what_the_output_does_not_say() {
    let text = data("wis-page_fault1-processes-t2.txt");
    let e = parse(
        Format::WillItScale,
        &text,
        &ImportOptions {
            mode: Some("processes".into()),
            ..opts()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("--tasks"), "{e}");
    let e = parse(
        Format::WillItScale,
        &text,
        &ImportOptions {
            tasks: Some(2),
            ..opts()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("--mode"), "{e}");

    // The capture's name says mode and task count.
    let name = "tests/data/wis-page_fault1-processes-t2.txt";
    let d = parse_named(Format::WillItScale, name, &text, &opts()).unwrap();
    assert_eq!(d.samples[0].0.mode, "processes");
    assert_eq!(d.samples[0].0.tasks, 2);
    // Options win over the name.
    let o = ImportOptions {
        workload: Some("pf1".into()),
        ..with("processes", 2)
    };
    let d = parse_named(Format::WillItScale, name, &text, &o).unwrap();
    assert_eq!(d.meta.workload, "pf1");
    assert_eq!(
        d.samples[0].0.metric, "ops/sec",
        "not a page_fault workload name"
    );

    // A wrong task count cannot produce these totals.
    let e = parse(Format::WillItScale, &text, &with("processes", 1)).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    assert!(e.to_string().contains("task count"), "{e}");
}

#[test]
fn will_it_scale_unknown_test_needs_a_workload() {
    let text =
        data("wis-page_fault1-threads-t1.txt").replace("Anonymous memory page fault", "getppid");
    let e = parse(Format::WillItScale, &text, &with("threads", 1)).unwrap_err();
    assert!(e.to_string().contains("--workload"), "{e}");
    let d = parse_named(
        Format::WillItScale,
        "getppid1_threads-t1.txt",
        &text,
        &opts(),
    )
    .unwrap();
    assert_eq!(d.meta.workload, "getppid1");
    assert_eq!(d.samples[0].0.metric, "ops/sec");
    assert_eq!(d.samples[0].0.mode, "threads");
}

#[test]
fn will_it_scale_malformed_lines_name_the_line() {
    let text = data("wis-page_fault1-processes-t2.txt");
    let o = with("processes", 2);
    // Line 11 is the second measured second.
    let bad = text.replace("total:296258", "total:29x258");
    let e = parse_named(Format::WillItScale, "pf1.txt", &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(11), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("pf1.txt:11: "), "{msg}");
    assert!(msg.contains("total:"), "{msg}");
    assert!(!msg.contains('\n'));

    let bad = text.replace("average:298856", "average:298000");
    let e = parse(Format::WillItScale, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(15), "{e}");

    let bad = text.replace("min:148129 max:148129", "min:148129");
    let e = parse(Format::WillItScale, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(11), "{e}");

    let bad = text.replace("measurement", "measurement\nSegmentation fault");
    let e = parse(Format::WillItScale, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(10), "{e}");

    let bad = format!("{text}{text}").replacen(
        "testcase:Anonymous memory page fault",
        "testcase:Separate file shared mapping page fault",
        1,
    );
    let e = parse(Format::WillItScale, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(16), "{e}");
}

// --- runtest.py CSV -------------------------------------------------------------------------

#[test]
fn runtest_csv_gives_one_sample_per_mode_and_task_count() {
    let text = data(WIS_CSV_FIXTURE);
    let e = parse(Format::WillItScaleCsv, &text, &opts()).unwrap_err();
    assert!(e.to_string().contains("--workload"), "{e}");
    let d = parse_named(Format::WillItScaleCsv, WIS_CSV_FIXTURE, &text, &opts()).unwrap();
    assert_eq!(d.meta.workload, "page_fault1");
    assert_eq!(d.meta.target, "will-it-scale");
    assert_eq!(d.status, Status::Complete);
    // The `0,0,100,0,100,0` row is skipped: 2 task counts x 2 modes.
    assert_eq!(d.samples.len(), 4);
    assert_eq!(values(&d, "faults/sec", "processes", 1, 0), [290693.0]);
    assert_eq!(values(&d, "faults/sec", "threads", 1, 0), [262286.0]);
    assert_eq!(values(&d, "faults/sec", "processes", 2, 0), [292992.0]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 0), [256352.0]);

    // --mode picks one column; runtest.py's own name for the file gives the workload.
    let o = ImportOptions {
        mode: Some("threads".into()),
        ..opts()
    };
    let d = parse_named(Format::WillItScaleCsv, "out/brk1.csv", &text, &o).unwrap();
    assert_eq!(d.meta.workload, "brk1");
    assert_eq!(d.samples.len(), 2);
    assert!(d.samples.iter().all(|(k, _, _)| k.mode == "threads"));
    assert!(d.samples.iter().all(|(k, _, _)| k.metric == "ops/sec"));
    // Only a test-like name (ending in a digit, as will-it-scale's tests do) is taken.
    let e = parse_named(Format::WillItScaleCsv, "results.csv", &text, &opts()).unwrap_err();
    assert!(e.to_string().contains("--workload"), "{e}");
}

#[test]
fn runtest_csv_skips_failed_runs_and_rejects_garbage() {
    let o = ImportOptions {
        workload: Some("page_fault1".into()),
        ..opts()
    };
    let text = "tasks,processes,processes_idle,threads,threads_idle,linear\n\
                0,0,100,0,100,0\n\
                1,-1,0.00,262286,0.00,262286\n";
    let d = parse(Format::WillItScaleCsv, text, &o).unwrap();
    assert_eq!(d.samples.len(), 1, "processes printed no average (-1)");

    let bad = text.replace("262286,0.00", "26x286,0.00");
    let e = parse(Format::WillItScaleCsv, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let bad = text.replace("1,-1,", "one,-1,");
    let e = parse(Format::WillItScaleCsv, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let bad = format!("{text}2,5\n");
    let e = parse(Format::WillItScaleCsv, &bad, &o).unwrap_err();
    assert_eq!(e.line(), Some(4), "{e}");
    let e = parse(Format::WillItScaleCsv, "processes,threads\n1,2\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    assert!(e.to_string().contains("tasks"), "{e}");
}

// --- pft ------------------------------------------------------------------------------------

#[test]
fn pft_rows_are_repetitions_of_two_metrics() {
    let d = parse(Format::Pft, &data("pft-threads-2.log"), &opts()).unwrap();
    assert_eq!(d.meta.workload, "pft");
    assert_eq!(d.meta.target, "pft");
    assert_eq!(d.status, Status::Complete);
    assert_eq!(nr_samples(&d), 6);
    for r in 0..3 {
        assert_eq!(values(&d, "faults/cpu", "threads", 2, r).len(), 1);
    }
    assert_eq!(values(&d, "faults/cpu", "threads", 2, 0), [427491.871]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 0), [294978.661]);
    assert_eq!(values(&d, "faults/cpu", "threads", 2, 2), [301847.165]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 2), [193547.426]);
    assert!(d.samples.iter().all(|(k, _, _)| k.higher_is_better));

    let d = parse(Format::Pft, &data("pft-threads-1.log"), &opts()).unwrap();
    assert_eq!(nr_samples(&d), 6);
    assert_eq!(values(&d, "faults/cpu", "threads", 1, 0), [62852.859]);
    assert_eq!(values(&d, "faults/sec", "threads", 1, 2), [152012.997]);
}

#[test]
fn pft_mode_comes_from_options_or_name() {
    let text = data("pft-processes-2.log");
    let d = parse_named(Format::Pft, "pft-processes-2.log", &text, &opts()).unwrap();
    assert_eq!(values(&d, "faults/cpu", "processes", 2, 0), [269020.707]);
    assert_eq!(values(&d, "faults/sec", "processes", 2, 2), [239679.372]);
    let d = parse(Format::Pft, &text, &opts()).unwrap();
    assert!(
        d.samples.iter().all(|(k, _, _)| k.mode == "threads"),
        "pft's default"
    );
    let o = ImportOptions {
        mode: Some("processes".into()),
        ..opts()
    };
    let d = parse(Format::Pft, &text, &o).unwrap();
    assert!(d.samples.iter().all(|(k, _, _)| k.mode == "processes"));
    let o = ImportOptions {
        mode: Some("procs".into()),
        ..opts()
    };
    assert!(parse(Format::Pft, &text, &o).is_err());
}

#[test]
fn pft_title_tag_and_diagnostics_are_skipped() {
    let d = parse(Format::Pft, &data("pft-title-tag-t2.txt"), &opts()).unwrap();
    assert_eq!(nr_samples(&d), 2);
    assert_eq!(values(&d, "faults/cpu", "threads", 2, 0), [426337.060]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 0), [281311.329]);
    // `-t 4` on two CPUs: pft says it clipped, and Thr is what it ran.
    let d = parse(Format::Pft, &data("pft-clipped-t4.txt"), &opts()).unwrap();
    assert_eq!(values(&d, "faults/cpu", "threads", 2, 0), [375227.947]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 0), [264820.031]);
}

#[test]
fn pft_with_a_rep_column() {
    let text = "  Gb  Rep  Thr CLine   User     System     Wall    flt/cpu/s fault/wsec\n   \
                1    1    4   1     0.03s     0.58s     0.89s  427491.871 294978.661\n";
    let d = parse(Format::Pft, text, &opts()).unwrap();
    assert_eq!(values(&d, "faults/cpu", "threads", 4, 0), [427491.871]);
    // Without the header a 9-field row is read the same way.
    let row = format!("{}\n", text.lines().nth(1).unwrap());
    let d = parse(Format::Pft, &row, &opts()).unwrap();
    assert_eq!(values(&d, "faults/sec", "threads", 4, 0), [294978.661]);
}

#[test]
fn pft_malformed_rows_name_the_line() {
    let text = data("pft-threads-2.log");
    let bad = text.replace("0.94s", "x.94s");
    let e = parse_named(Format::Pft, "pft-2.log", &bad, &opts()).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(e.to_string().starts_with("pft-2.log:2: "), "{e}");
    assert!(e.to_string().contains("System"), "{e}");
    let bad = text.replace("301847.165 ", "");
    let e = parse(Format::Pft, &bad, &opts()).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let bad = text.replace("   1    2   1     0.03s", "   1    0   1     0.03s");
    let e = parse(Format::Pft, &bad, &opts()).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    let e = parse(
        Format::Pft,
        "clipping nr_tests to nr_cpus_allowed [2]\n",
        &opts(),
    )
    .unwrap_err();
    assert!(matches!(e, ImportError::NoSamples { .. }), "{e}");
}

// --- plain CSV ------------------------------------------------------------------------------

#[test]
fn plain_csv_fixture() {
    let d = parse(Format::Csv, &data(CSV_FIXTURE), &opts()).unwrap();
    assert_eq!(d.meta.workload, "page_fault1");
    assert_eq!(d.meta.target, "csv");
    assert_eq!(nr_samples(&d), 7);
    assert_eq!(
        values(&d, "faults/sec", "threads", 1, 0),
        [286286.0, 290000.5]
    );
    assert_eq!(values(&d, "faults/sec", "threads", 1, 1), [281000.0]);
    assert_eq!(values(&d, "faults/sec", "processes", 2, 0), [298856.0]);
    assert_eq!(values(&d, "faults/sec", "threads", 2, 0), [256352.0]);
    let lat = d
        .samples
        .iter()
        .find(|(k, _, _)| k.metric == "latency-ns")
        .unwrap();
    assert!(!lat.0.higher_is_better);
    assert_eq!(lat.2, [812.5, 790.0]);
}

#[test]
fn plain_csv_defaults_and_errors() {
    let o = ImportOptions {
        workload: Some("w".into()),
        ..opts()
    };
    let d = parse(Format::Csv, "tasks,value\n4,10\n4,12\n", &o).unwrap();
    assert_eq!(d.samples.len(), 1);
    let (k, r, v) = &d.samples[0];
    assert_eq!(
        (
            k.mode.as_str(),
            k.tasks,
            k.metric.as_str(),
            k.higher_is_better,
            *r
        ),
        ("threads", 4, "faults/sec", true, 0)
    );
    assert_eq!(v, &[10.0, 12.0]);
    let om = ImportOptions {
        mode: Some("processes".into()),
        ..o.clone()
    };
    let d = parse(Format::Csv, "tasks,value\n4,10\n", &om).unwrap();
    assert_eq!(d.samples[0].0.mode, "processes");

    // No workload anywhere.
    let e = parse(Format::Csv, "tasks,value\n4,10\n", &opts()).unwrap_err();
    assert!(e.to_string().contains("--workload"), "{e}");
    // Missing `tasks`.
    let e = parse(Format::Csv, "value,mode\n1,threads\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    assert!(e.to_string().contains("tasks"), "{e}");
    // Unknown column, bad cells, a ragged row, conflicting workloads and directions.
    let e = parse(Format::Csv, "tasks,value,colour\n1,2,red\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
    let e = parse(Format::Csv, "tasks,value\n1,2\n1,two\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value\n1,2\n0,2\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value\n1,2\n1,NaN\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value\n1,2\n1,2,3\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value,mode\n1,2,cores\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    let e = parse(Format::Csv, "tasks,value,workload\n1,2,a\n1,2,b\n", &opts()).unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value,workload\n1,2,a\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    let e = parse(
        Format::Csv,
        "tasks,value,metric,higher_is_better\n1,2,m,true\n1,2,m,false\n",
        &o,
    )
    .unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    let e = parse(Format::Csv, "tasks,value,higher_is_better\n1,2,yes\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    let e = parse(Format::Csv, "tasks,value,repeat\n1,2,-1\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    let e = parse(Format::Csv, "tasks,value\n", &o).unwrap_err();
    assert!(matches!(e, ImportError::NoSamples { .. }), "{e}");
}

// --- detection, names, formats --------------------------------------------------------------

#[test]
fn detect_recognises_every_fixture() {
    for (f, format) in all_fixtures() {
        assert_eq!(detect(f, &data(f)).unwrap(), format, "{f}");
    }
}

#[test]
fn detect_rejects_junk() {
    for junk in [
        "",
        "\n\n  \n",
        "hello world\n",
        "a,b,c\n1,2,3\n",
        "Segmentation fault (core dumped)\n",
        "\u{0}\u{1}\u{2}binary\u{ff}",
        "1 2 3\n",
    ] {
        let e = detect("junk.txt", junk).unwrap_err();
        assert!(
            matches!(e, ImportError::UnknownFormat { .. }),
            "{junk:?}: {e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("junk.txt") && msg.contains("--format"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }
}

#[test]
fn empty_files_have_no_samples_in_every_format() {
    for format in Format::ALL {
        for text in ["", "\n", "   \n\n"] {
            let e = parse_named(format, "empty.txt", text, &with("threads", 1)).unwrap_err();
            assert!(matches!(e, ImportError::NoSamples { .. }), "{format}: {e}");
            assert!(
                e.to_string().starts_with("no samples found in empty.txt"),
                "{e}"
            );
        }
    }
}

#[test]
fn format_names_round_trip() {
    for f in Format::ALL {
        assert_eq!(f.as_str().parse::<Format>().unwrap(), f);
        assert_eq!(f.to_string(), f.as_str());
    }
    assert_eq!(Format::WillItScaleCsv.tool(), "will-it-scale");
    let e = "wis".parse::<Format>().unwrap_err();
    assert_eq!((e.what, e.name.as_str()), ("import format", "wis"));
    let e = e.to_string();
    assert!(
        e.contains(
            "unknown import format `wis`; expected will-it-scale, will-it-scale-csv, pft, csv"
        ),
        "{e}"
    );
}

#[test]
fn name_hints_read_will_it_scale_names() {
    let h = name_hints("/tmp/run/page_fault3_threads-t16.txt");
    assert_eq!(h.workload.as_deref(), Some("page_fault3"));
    assert_eq!(h.mode.as_deref(), Some("threads"));
    assert_eq!(h.tasks, Some(16));
    let h = name_hints("wis-page_fault1-processes-t2.txt");
    assert_eq!(h.workload.as_deref(), Some("page_fault1"));
    assert_eq!(h.mode.as_deref(), Some("processes"));
    assert_eq!(h.tasks, Some(2));
    let h = name_hints("results.txt");
    assert_eq!(h, import::NameHints::default());
    assert_eq!(
        name_hints("processes-vs-threads-t0-t99999999999.txt").tasks,
        None
    );
}

// --- robustness -----------------------------------------------------------------------------

/// xorshift64*, so the garbling is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn garble(rng: &mut Rng, text: &str) -> String {
    const BYTES: &[u8] = b"0123456789:,. -sx\n\r\t#\"e+-9Ginfa";
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(7) {
            0 if at < b.len() => b[at] = BYTES[rng.below(BYTES.len())],
            1 => b.insert(at, BYTES[rng.below(BYTES.len())]),
            2 => {
                let end = (at + rng.below(40)).min(b.len());
                b.drain(at..end);
            }
            3 => {
                let end = (at + rng.below(60)).min(b.len());
                let chunk = b[at..end].to_vec();
                let to = rng.below(b.len() + 1);
                b.splice(to..to, chunk);
            }
            4 => b.insert(at, 0xff),
            5 => {
                b.splice(at..at, "é€".bytes());
            }
            _ => b.truncate(at),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Whatever the input, every entry point returns: an error is one line, a success holds
/// finite samples.
fn check_no_panic(name: &str, text: &str) {
    let _ = detect(name, text);
    for format in Format::ALL {
        for o in [opts(), with("threads", 2), with("processes", 1)] {
            let o = ImportOptions {
                warmup: 3,
                workload: Some("w".into()),
                ..o
            };
            for r in [
                parse(format, text, &o),
                parse(format, text, &opts()),
                parse_named(format, name, text, &o),
                parse_named(format, name, text, &opts()),
            ] {
                match r {
                    Ok(d) => {
                        assert!(nr_samples(&d) > 0, "{name} {format}: {text:?}");
                        assert!(
                            d.samples.iter().flat_map(|s| &s.2).all(|v| v.is_finite()),
                            "{name} {format}: {text:?}"
                        );
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn truncated_and_garbled_inputs_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (f, _) in all_fixtures() {
        let text = data(f);
        for cut in 0..=text.len() {
            if text.is_char_boundary(cut) {
                check_no_panic(f, &text[..cut]);
            }
        }
        for _ in 0..300 {
            let g = garble(&mut rng, &text);
            check_no_panic(f, &g);
        }
    }
}

// --- whole lines: cut files, strict numbers, the tools' own totals, BOM, size limit ---------

/// Every number in `text`'s lines that end with a newline.
fn numbers_of_whole_lines(text: &str) -> Vec<f64> {
    let whole = text.rsplit_once('\n').map_or("", |(w, _)| w);
    whole
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse::<f64>().ok())
        .collect()
}

#[test]
fn a_cut_last_line_is_refused_in_every_format() {
    for (f, format) in all_fixtures() {
        let text = data(f);
        let cut = text.trim_end_matches('\n');
        let last = cut.lines().count();
        let e = parse_named(format, f, cut, &opts()).unwrap_err();
        assert_eq!(e.line(), Some(last), "{f}: {e}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("{f}:{last}: ")), "{msg}");
        assert!(msg.contains("cut short"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        // The whole file, newline included, imports.
        parse_named(format, f, &text, &opts()).unwrap();
    }
}

#[test]
fn no_cut_of_any_fixture_stores_a_number_from_a_cut_line() {
    for (f, format) in all_fixtures() {
        let text = data(f);
        for cut in 1..text.len() {
            let part = &text[..cut];
            let Ok(d) = parse_named(format, f, part, &opts()) else {
                continue;
            };
            let whole = numbers_of_whole_lines(part);
            for v in d.samples.iter().flat_map(|s| &s.2) {
                assert!(
                    whole.contains(v),
                    "{f} cut after byte {cut} stored {v}, which no whole line says: {part:?}"
                );
            }
        }
    }
}

#[test]
fn pft_log_cut_inside_a_rate_is_refused_naming_the_line() {
    // The report behind this check: 1661 faults/s stored where the line said 166141.469.
    let text = data("pft-threads-2.log");
    let at = text.find("166141.469").unwrap() + "1661".len();
    let e = parse_named(Format::Pft, "pft-2.log", &text[..at], &opts()).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(e.to_string().starts_with("pft-2.log:2: "), "{e}");
    assert!(e.to_string().contains("cut short"), "{e}");
    // pft's diagnostics are not data: one without a newline at the end does not matter.
    let text = format!("{text}clipping nr_tests to nr_cpus_allowed [2]");
    assert_eq!(nr_samples(&parse(Format::Pft, &text, &opts()).unwrap()), 6);
}

#[test]
fn pft_numbers_must_be_printed_as_pft_prints_them() {
    let text = data("pft-threads-2.log");
    for (from, to, column) in [
        ("166141.469", "1661", "fault/wsec"),
        ("166141.469", "166141.4", "fault/wsec"),
        ("267868.347", "267868", "flt/cpu/s"),
        ("0.94s", "0.94", "System"),
        ("1.58s", "1.5s", "Wall"),
        ("0.04s", "+0.04s", "User"),
        ("   1    2   1     0.04s", "   +1    2   1     0.04s", "Gb"),
    ] {
        let bad = text.replace(from, to);
        let e = parse(Format::Pft, &bad, &opts()).unwrap_err();
        assert_eq!(e.line(), Some(2), "{to}: {e}");
        assert!(e.to_string().contains(column), "{to}: {e}");
    }
}

#[test]
fn pft_rates_must_come_from_one_fault_count() {
    let text = data("pft-threads-2.log");
    // Well formed, but no fault count over these times gives both rates.
    for (from, to) in [
        ("166141.469", "186141.469"),
        ("267868.347", "207868.347"),
        ("0.94s     1.58s", "0.94s     1.18s"),
        ("0.04s     0.94s", "0.04s     0.64s"),
    ] {
        let bad = text.replace(from, to);
        let e = parse(Format::Pft, &bad, &opts()).unwrap_err();
        assert_eq!(e.line(), Some(2), "{to}: {e}");
        assert!(e.to_string().contains("one fault count"), "{to}: {e}");
    }
    // Rounding of the printed times is allowed for: tiny runs whose times print as 0.00s.
    let tiny = "   0    1   1     0.00s     0.00s     0.00s  262144.000 524288.000\n";
    assert_eq!(nr_samples(&parse(Format::Pft, tiny, &opts()).unwrap()), 2);
}

#[test]
fn will_it_scale_counts_are_plain_digits() {
    let text = data("wis-page_fault1-processes-t2.txt");
    let o = with("processes", 2);
    for (from, to, line) in [
        ("total:296258", "total:+296258", 11),
        ("min:148129 max", "min:+148129 max", 11),
        ("average:298856", "average:+298856", 15),
    ] {
        let bad = text.replace(from, to);
        let e = parse(Format::WillItScale, &bad, &o).unwrap_err();
        assert_eq!(e.line(), Some(line), "{to}: {e}");
    }
}

#[test]
fn runtest_csv_cells_are_checked_whole() {
    let text = data(WIS_CSV_FIXTURE);
    let o = ImportOptions {
        workload: Some("page_fault1".into()),
        ..opts()
    };
    for (from, to, line, what) in [
        // `linear` is 2 x the better 1-task average (290693): a cut or edited one is not.
        ("0.00,581386", "0.00,58138", 4, "linear"),
        ("0.00,581386", "0.00,581387", 4, "linear"),
        ("0.00,581386", "0.00,", 4, "linear"),
        (
            "2,292992,0.00,256352",
            "2,292992,0.00,256352.5",
            4,
            "threads",
        ),
        (
            "2,292992,0.00,256352",
            "2,+292992,0.00,256352",
            4,
            "processes",
        ),
        ("2,292992,0.00,256352", "2,-2,0.00,256352", 4, "processes"),
        ("2,292992,0.00,", "2,292992,0.0,", 4, "processes_idle"),
        (
            "1,290693,0.00,262286,0.00",
            "1,290693,0.00,262286,100.01",
            3,
            "threads_idle",
        ),
        ("0,0,100,0,100,0", "0,0,100,0,100,5", 2, "linear"),
        ("1,290693,", "+1,290693,", 3, "tasks"),
    ] {
        let bad = text.replace(from, to);
        let e = parse(Format::WillItScaleCsv, &bad, &o).unwrap_err();
        assert_eq!(e.line(), Some(line), "{to}: {e}");
        assert!(e.to_string().contains(what), "{to}: {e}");
    }
    // --mode takes one column, but the other is still checked.
    let threads = ImportOptions {
        mode: Some("threads".into()),
        ..o.clone()
    };
    let bad = text.replace("2,292992,", "2,29x992,");
    let e = parse(Format::WillItScaleCsv, &bad, &threads).unwrap_err();
    assert_eq!(e.line(), Some(4), "{e}");
}

#[test]
fn plain_csv_counts_are_plain_digits() {
    let o = ImportOptions {
        workload: Some("w".into()),
        ..opts()
    };
    let e = parse(Format::Csv, "tasks,value\n+4,10\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
    let e = parse(Format::Csv, "tasks,value,repeat\n4,10,+1\n", &o).unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
}

#[test]
fn a_byte_order_mark_is_skipped() {
    for (f, format) in all_fixtures() {
        let text = data(f);
        let marked = format!("\u{feff}{text}");
        assert_eq!(detect(f, &marked).unwrap(), format, "{f}");
        let want = parse_named(format, f, &text, &opts()).unwrap();
        let got = parse_named(format, f, &marked, &opts()).unwrap();
        assert_eq!(got.samples, want.samples, "{f}");
    }
    let o = ImportOptions {
        workload: Some("w".into()),
        ..opts()
    };
    let d = parse(Format::Csv, "\u{feff}tasks,value\n4,10\n", &o).unwrap();
    assert_eq!(d.samples[0].2, [10.0]);
}

#[test]
fn read_input_stops_at_the_size_limit() {
    assert_eq!(import::MAX_INPUT_BYTES, 256 << 20);
    // An endless stream ends in an error, not in exhausted memory.
    let e = import::read_input("/dev/zero", std::io::repeat(0)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("/dev/zero: ") && msg.contains("256 MiB"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    // A leading byte-order mark goes; invalid UTF-8 is named.
    let t = import::read_input("x", &b"\xef\xbb\xbftasks,value\n"[..]).unwrap();
    assert_eq!(t, "tasks,value\n");
    let e = import::read_input("x", &b"tasks\xff\n"[..]).unwrap_err();
    assert!(e.to_string().contains("not a text file"), "{e}");
}
