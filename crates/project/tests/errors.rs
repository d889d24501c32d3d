//! The projector's errors are types a caller can match on, each carrying what caused it, and
//! each still the one line a user reads.

use std::error::Error;

use pagelab_bench::profiles;
use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::{CaptureError, Machine, MachineError, ProjectError, validate};
use pagelab_workloads::WorkloadKind;

#[test]
fn an_unreadable_machine_file_carries_the_io_error_and_names_the_path() {
    let e = Machine::load("/nonexistent/pagelab-machine.toml").unwrap_err();
    let MachineError::Read { path, source } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(path, "/nonexistent/pagelab-machine.toml");
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(e.source().is_some());
    assert!(
        e.to_string()
            .starts_with("machine file /nonexistent/pagelab-machine.toml: "),
        "{e}"
    );
}

#[test]
fn a_machine_value_out_of_range_names_the_file_and_the_key() {
    let good = Machine::load("icelake-2s-64c").unwrap().to_toml();
    let bad = good.replacen("sockets = 2", "sockets = 0", 1);
    assert_ne!(good, bad);
    let e = Machine::parse(&bad, "x.toml").unwrap_err();
    let MachineError::In { what, source } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(what, "x.toml");
    assert!(matches!(**source, MachineError::Key(ref k) if k.starts_with("topology.sockets ")));
    assert!(
        e.to_string()
            .starts_with("machine x.toml: topology.sockets "),
        "{e}"
    );
}

#[test]
fn toml_that_is_not_a_machine_keeps_the_parser_error() {
    let e = Machine::parse("name = \"x\"\nno_such_key = 1\n", "y.toml").unwrap_err();
    assert!(
        matches!(e, MachineError::Toml { ref what, .. } if what == "y.toml"),
        "{e:?}"
    );
    assert!(e.source().is_some());
    assert!(e.to_string().starts_with("machine y.toml: "), "{e}");
    assert!(!e.to_string().contains('\n'), "one line: {e}");
}

#[test]
fn an_unknown_machine_lists_the_shipped_ones() {
    let e = Machine::load("no-such-machine").unwrap_err();
    let MachineError::Unknown { name, shipped } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(name, "no-such-machine");
    assert!(shipped.contains("icelake-2s-64c"), "{shipped}");
}

#[test]
fn a_capture_the_one_task_path_does_not_take_is_unsupported_and_one_line() {
    let p = profiles::load("linux-6.7").unwrap();
    // netpipe is captured as a pair per send size, never through `capture`.
    let e = capture(&CaptureSpec::new(WorkloadKind::Netpipe, p, 2)).unwrap_err();
    assert!(matches!(e, CaptureError::Unsupported(_)), "{e:?}");
    // Into the crate-wide error, still the same line.
    let line = e.to_string();
    let p: ProjectError = e.into();
    assert!(matches!(p, ProjectError::Capture(_)));
    assert_eq!(p.to_string(), line);
}

#[test]
fn an_unknown_published_table_is_a_table_error() {
    let e = validate::published("no-such-table").unwrap_err();
    assert!(matches!(e, ProjectError::Table(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("unknown published table `no-such-table`"),
        "{e}"
    );
}
