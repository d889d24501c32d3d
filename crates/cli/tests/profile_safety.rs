//! Profiles and experiments the binary must refuse before anything is stored: a value outside
//! the kernel's range, a user's copy that keeps a shipped name but changes what it runs (its rows
//! would be stored under the shipped label and pooled with the real ones), and an experiment
//! naming a published table that does not ship. Each is one line on stderr, a non-zero exit,
//! and the store's bytes as they were.

use std::path::Path;

mod common;
use common::{Dir, fails_untouched, ok};

const LINUX_4_15: &str = include_str!("../../../profiles/linux-4.15.toml");
const PFT_PVL: &str = include_str!("../../../experiments/pft-pvl-2023.toml");

/// A store holding one real run of the shipped `linux-4.15`, so that "untouched" means
/// something.
fn store_with_a_run(d: &Dir) {
    ok(
        &d.db(),
        &[
            "run",
            "pft",
            "--profile",
            "linux-4.15",
            "--tasks",
            "1",
            "--mode",
            "threads",
            "--samples",
            "2",
            "--size",
            "16M",
        ],
    );
}

fn run_with(db: &Path, profile: &Path, want: &str) {
    let p = profile.to_str().unwrap();
    let args = [
        "run",
        "pft",
        "--profile",
        p,
        "--tasks",
        "1",
        "--samples",
        "2",
        "--size",
        "16M",
    ];
    fails_untouched(db, &args, want);
}

#[test]
fn a_changed_copy_of_a_shipped_profile_is_refused_and_stores_nothing() {
    let d = Dir::new("prof-copy");
    store_with_a_run(&d);
    let changed = LINUX_4_15.replace("batch = 31", "batch = 62");
    assert_ne!(changed, LINUX_4_15);
    // Named in the file, under another file name.
    let copy = d.path("my-kernel.toml");
    std::fs::write(&copy, &changed).unwrap();
    run_with(
        &d.db(),
        &copy,
        "named `linux-4.15` like a shipped profile but differs from it (pcp.batch 31 -> 62)",
    );
    // Named by its file stem alone.
    let stem = d.path("linux-4.15.toml");
    std::fs::write(&stem, changed.replace("name = \"linux-4.15\"\n", "")).unwrap();
    run_with(&d.db(), &stem, "named `linux-4.15` like a shipped profile");
    // An identical copy is the shipped profile: it loads, under the shipped name.
    std::fs::write(&stem, LINUX_4_15).unwrap();
    let shown = ok(&d.db(), &["profiles", stem.to_str().unwrap()]);
    assert!(shown.contains("linux-4.15"), "{shown}");
}

#[test]
fn out_of_range_profile_values_are_refused_naming_the_key() {
    let d = Dir::new("prof-range");
    store_with_a_run(&d);
    let f = d.path("big-batch.toml");
    for (text, want) in [
        (
            "[pcp]\nbatch = 4000000000\n",
            "line 2: pcp.batch = 4000000000 is out of range: 1..=67108863",
        ),
        ("[pcp]\nhigh = -1\n", "pcp.high = -1 is out of range"),
        (
            "[lru]\nbatch = 64\n",
            "lru.batch = 64 is out of range: 1..=31",
        ),
        (
            "[mm]\nfault_around = 24\n",
            "mm.fault_around = 24 is not a power of two",
        ),
        (
            "[mm]\nfault_around = 16.5\n",
            "mm.fault_around = 16.5 is not a whole number",
        ),
    ] {
        std::fs::write(&f, text).unwrap();
        run_with(&d.db(), &f, want);
    }
}

#[test]
fn experiments_with_a_shipped_name_or_a_missing_table_are_refused() {
    let d = Dir::new("exp-names");
    store_with_a_run(&d);
    let db = d.db();
    let missing = d.path("pft-mine.toml");
    std::fs::write(
        &missing,
        PFT_PVL
            .replace("name = \"pft-pvl-2023\"", "name = \"pft-mine\"")
            .replace("pft-single-vma-2023", "pft-single-vma-2032"),
    )
    .unwrap();
    fails_untouched(
        &db,
        &["reproduce", missing.to_str().unwrap(), "--samples", "2"],
        "experiment pft-mine: published = \"pft-single-vma-2032\" names no shipped table",
    );
    let copy = d.path("pft-pvl-2023.toml");
    let tasks = PFT_PVL
        .lines()
        .find(|l| l.starts_with("tasks"))
        .expect("pft-pvl-2023 sets tasks");
    std::fs::write(&copy, PFT_PVL.replace(tasks, "tasks = \"1\"")).unwrap();
    fails_untouched(
        &db,
        &["reproduce", copy.to_str().unwrap(), "--samples", "2"],
        "named `pft-pvl-2023` like a shipped experiment but differs from it in tasks",
    );
}

/// A bound that depends on the machine (here a pcp `high` above the pages of the engine's zone)
/// is found before the run is opened: no empty, incomplete run is left in the store.
#[test]
fn a_profile_too_big_for_the_engines_zone_leaves_no_run_behind() {
    let d = Dir::new("prof-zone");
    store_with_a_run(&d);
    let big = d.path("huge-high.toml");
    std::fs::write(
        &big,
        "name = \"huge-high\"\n[pcp]\nlists = \"order0\"\nbatch = 31\nhigh = 3000000\ntune = \"fixed\"\n",
    )
    .unwrap();
    run_with(&d.db(), &big, "pcp.high = 3000000 is out of range");
}
