//! Never overwrite what is not ours, end to end: `run kvcache --swap PATH` refuses every file
//! that is not a swap file pagelab made (a user's file, another database, the results store in
//! use, a symlink) before anything is written or stored, and removes the swap file it used when
//! the run ends, also on a second Ctrl-C; `plot --out` and `report --out` create missing
//! directories alike and never overwrite an SQLite database.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Dir, fails, fails_untouched, ok};

/// A short engine run that puts one run (label `a`) in the store.
fn engine_run(db: &Path, label: &str) {
    ok(
        db,
        &[
            "run",
            "page_fault1",
            "--tasks",
            "1,2",
            "--samples",
            "2",
            "--warmup",
            "0",
            "--interval-ms",
            "100",
            "--memsize",
            "8M",
            "--label",
            label,
        ],
    );
}

/// A small kvcache run on a swap file at `swap`.
fn kvcache_args(swap: &str) -> Vec<&str> {
    vec![
        "run",
        "kvcache",
        "--mode",
        "threads",
        "--tasks",
        "1",
        "--keys",
        "4096",
        "--samples",
        "1",
        "--warmup",
        "0",
        "--interval-ms",
        "100",
        "--swap",
        swap,
    ]
}

/// What a killed run leaves at its swap path: the header of a pagelab swap file and a page
/// of old data.
fn leftover_swap_file(path: &Path) {
    let mut bytes = b"pagelab swapfile".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.resize(2 * 4096, 0x5a);
    std::fs::write(path, bytes).unwrap();
}

fn runs(db: &Path) -> usize {
    let out = ok(db, &["runs", "--json"]);
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn swap_refuses_a_users_file_another_database_and_the_store_untouched() {
    let d = Dir::new("swap-refuse");
    let db = d.db();
    engine_run(&db, "a");
    let text = d.path("notes.txt");
    std::fs::write(&text, b"my notes\n").unwrap();
    let other = d.path("other.db");
    std::fs::copy(&db, &other).unwrap();
    let link = d.path("link");
    std::os::unix::fs::symlink(&text, &link).unwrap();
    let roundabout = d.0.join("sub/../results.db");
    std::fs::create_dir(d.path("sub")).unwrap();
    for (swap, want) in [
        (&text, "is not a pagelab swap file"),
        (&other, "SQLite database"),
        (&db, "is the results store in use"),
        (&roundabout, "is the results store in use"),
        (&link, "symbolic link"),
        (&d.0, "is a directory"),
    ] {
        let before = std::fs::read(swap).ok();
        fails_untouched(&db, &kvcache_args(swap.to_str().unwrap()), want);
        assert_eq!(std::fs::read(swap).ok(), before, "{}", swap.display());
        assert!(swap.exists(), "{} was removed", swap.display());
    }
    assert_eq!(std::fs::read(&text).unwrap(), b"my notes\n");
    assert_eq!(runs(&db), 1, "a refused run stores nothing");
    // The store in use before it exists: refused, and not created.
    let fresh = d.path("fresh.db");
    fails(
        &fresh,
        &kvcache_args(fresh.to_str().unwrap()),
        "is the results store in use",
    );
    assert!(!fresh.exists());
}

#[test]
fn the_swap_file_is_removed_after_the_run_and_a_leftover_is_reused() {
    let d = Dir::new("swap-remove");
    let db = d.db();
    let swap = d.path("swap");
    ok(&db, &kvcache_args(swap.to_str().unwrap()));
    assert!(!swap.exists(), "the swap file pagelab created is removed");
    leftover_swap_file(&swap);
    ok(&db, &kvcache_args(swap.to_str().unwrap()));
    assert!(
        !swap.exists(),
        "a leftover swap file is reused, then removed"
    );
    assert_eq!(runs(&db), 2);
}

/// A second Ctrl-C quits at once (`exit`, no destructors): the swap file goes all the same.
#[test]
fn a_second_ctrl_c_removes_the_swap_file() {
    let d = Dir::new("swap-ctrlc");
    let db = d.db();
    let swap = d.path("swap");
    let mut args = kvcache_args(swap.to_str().unwrap());
    // Long enough to be interrupted: many samples of a larger data set.
    for (flag, value) in [("--tasks", "2"), ("--keys", "65536"), ("--samples", "100")] {
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .arg("--db")
        .arg(&db)
        .args(&args)
        .env_remove("PAGELAB_DB")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !swap.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the run never made its swap file"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = rustix::process::Pid::from_child(&child);
    // The second press comes before the run could stop on the first (it looks every 5 ms),
    // but after the first was taken (signals of one kind do not queue).
    for _ in 0..2 {
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        !swap.exists(),
        "the swap file outlived the run ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn plot_and_report_create_missing_directories_alike() {
    let d = Dir::new("out-dirs");
    let db = d.db();
    engine_run(&db, "a");
    let file = d.path("x/y/plot.svg");
    ok(
        &db,
        &[
            "plot",
            "a",
            "--metric",
            "faults/sec",
            "--mode",
            "processes",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("<svg"));
    let dir = d.path("x/z/plots");
    ok(&db, &["plot", "a", "--out", dir.to_str().unwrap()]);
    assert!(std::fs::read_dir(&dir).unwrap().count() > 0);
    let rep = d.path("r/s/t");
    ok(&db, &["report", "a", "--out", rep.to_str().unwrap()]);
    assert!(rep.join("report.html").is_file());
    // No temporary file is left beside the outputs.
    for dir in [file.parent().unwrap(), &dir, &rep] {
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name();
            assert!(!name.to_string_lossy().starts_with('.'), "{name:?} left");
        }
    }
}

#[test]
fn plot_and_report_never_overwrite_a_database() {
    let d = Dir::new("out-db");
    let db = d.db();
    engine_run(&db, "a");
    let plot = d.path("old.svg");
    std::fs::copy(&db, &plot).unwrap();
    let rep = d.path("rep");
    std::fs::create_dir(&rep).unwrap();
    std::fs::copy(&db, rep.join("report.html")).unwrap();
    let (plot_before, rep_before) = (
        std::fs::read(&plot).unwrap(),
        std::fs::read(rep.join("report.html")).unwrap(),
    );
    fails_untouched(
        &db,
        &[
            "plot",
            "a",
            "--metric",
            "faults/sec",
            "--mode",
            "processes",
            "--out",
            plot.to_str().unwrap(),
        ],
        "SQLite database",
    );
    fails_untouched(
        &db,
        &["report", "a", "--out", rep.to_str().unwrap()],
        "SQLite database",
    );
    assert_eq!(std::fs::read(&plot).unwrap(), plot_before);
    assert_eq!(std::fs::read(rep.join("report.html")).unwrap(), rep_before);
}
