//! Bad command lines: every flag with a fixed set of values refuses any other with one line on
//! stderr that names the flag, the value and the choices, and a non-zero exit; a missing
//! required argument is named on that line. None of these opens or creates the store.

mod common;
use common::{Dir, fails_untouched};

/// `args` is refused before anything runs, with one line holding `want`, and no store appears.
fn refused(args: &[&str], want: &str) {
    let d = Dir::new(&format!("flags-{}", args.join("-").replace('/', "_")));
    let db = d.db();
    fails_untouched(&db, args, want);
    assert!(!db.exists(), "pagelab {args:?} created the store");
}

#[test]
fn missing_required_argument_is_named() {
    refused(
        &["run"],
        "the following required arguments were not provided: <WORKLOAD>",
    );
    refused(&["import"], "were not provided: <FILE>");
    refused(&["plot"], "were not provided: --out <PATH>");
}

#[test]
fn wrong_significance_is_refused_with_the_choices() {
    let want = "invalid value 'anova' for '--significance <SIGNIFICANCE>' \
                [possible values: interval, ttest]";
    refused(&["compare", "a", "b", "--significance", "anova"], want);
    refused(
        &["plot", "a", "--out", "x.svg", "--significance", "anova"],
        want,
    );
    refused(
        &["reproduce", "pft-pvl-2023", "--significance", "anova"],
        want,
    );
}

#[test]
fn wrong_table_format_is_refused_with_the_choices() {
    let want = "invalid value 'html' for '--format <FORMAT>' \
                [possible values: text, markdown, json, csv]";
    refused(&["reproduce", "pft-pvl-2023", "--format", "html"], want);
    refused(
        &[
            "project",
            "pft",
            "--machine",
            "dev-host",
            "--format",
            "html",
        ],
        want,
    );
}

#[test]
fn wrong_origin_is_refused_with_the_choices() {
    let want = "invalid value 'guessed' for '--origin <ORIGIN>' \
                [possible values: measured, projected, imported]";
    refused(&["runs", "--origin", "guessed"], want);
    refused(&["export", "--origin", "guessed"], want);
    refused(
        &["plot", "a", "--out", "x.svg", "--origin", "guessed"],
        want,
    );
}

#[test]
fn wrong_status_is_refused_with_the_choices() {
    let want = "invalid value 'done' for '--status <STATUS>' \
                [possible values: running, complete, incomplete, abandoned]";
    refused(&["runs", "--status", "done"], want);
    refused(&["export", "--status", "done"], want);
}

#[test]
fn wrong_export_format_is_refused_with_the_choices() {
    refused(
        &["export", "--format", "xml"],
        "invalid value 'xml' for '--format <FORMAT>' [possible values: csv, json]",
    );
}

#[test]
fn wrong_import_format_is_refused_with_the_choices() {
    refused(
        &["import", "x.txt", "--label", "x", "--format", "lmbench"],
        "invalid value 'lmbench' for '--format <FORMAT>' \
         [possible values: will-it-scale, will-it-scale-csv, pft, csv]",
    );
}

#[test]
fn wrong_mode_is_refused_with_the_choices() {
    let one = "invalid value 'fibers' for '--mode <MODE>' [possible values: processes, threads]";
    let both = "invalid value 'fibers' for '--mode <MODE>' \
                [possible values: processes, threads, both]";
    refused(&["run", "pft", "--mode", "fibers"], both);
    refused(
        &[
            "project",
            "pft",
            "--machine",
            "dev-host",
            "--mode",
            "fibers",
        ],
        both,
    );
    refused(
        &["import", "x.txt", "--label", "x", "--mode", "fibers"],
        one,
    );
    refused(&["plot", "a", "--out", "x.svg", "--mode", "fibers"], one);
}

#[test]
fn wrong_plot_kind_and_format_are_refused_with_the_choices() {
    refused(
        &["plot", "a", "--out", "x.svg", "--kind", "pie"],
        "invalid value 'pie' for '--kind <KIND>' [possible values: scaling, change]",
    );
    refused(
        &["plot", "a", "--out", "x.svg", "--format", "pdf"],
        "invalid value 'pdf' for '--format <FORMAT>' [possible values: svg, png]",
    );
}

#[test]
fn wrong_target_is_refused_with_the_choices() {
    refused(
        &["run", "pft", "--target", "qemu"],
        "invalid value 'qemu' for '--target <TARGET>' [possible values: engine, kernel]",
    );
}

#[test]
fn wrong_lock_stat_is_refused_with_the_choices() {
    refused(
        &["run", "pft", "--lock-stat", "maybe"],
        "invalid value 'maybe' for '--lock-stat <LOCK_STAT>' [possible values: on, off]",
    );
    refused(
        &["micro", "fault", "--lock-stat", "maybe"],
        "invalid value 'maybe' for '--lock-stat <LOCK_STAT>' [possible values: on, off, both]",
    );
}

/// `micro pft`'s bad input: each refused with one line naming the flag and what it takes,
/// before any engine is built.
#[test]
fn micro_pft_bad_input_is_refused_in_one_line() {
    refused(
        &["micro", "pft", "--lock-stat", "sometimes"],
        "invalid value 'sometimes' for '--lock-stat <LOCK_STAT>' [possible values: on, off, both]",
    );
    refused(
        &["micro", "pft", "--tasks", "0"],
        "invalid value '0' for '--tasks <TASKS>': 0 is not in 1..=256",
    );
    refused(
        &["micro", "pft", "--rounds", "0"],
        "invalid value '0' for '--rounds <ROUNDS>': 0 is not in 1..=10000",
    );
    refused(
        &["micro", "pft", "--size", "12Q"],
        "invalid value '12Q' for '--size <SIZE>'",
    );
    refused(&["micro", "pft", "--profile", "linux-9"], "unknown profile");
    refused(
        &["micro", "pft", "--tasks", "4", "--size", "8K"],
        "--size must give every task at least one page",
    );
}
