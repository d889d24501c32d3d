//! Runs end in a known state whatever stops them: SIGTERM and SIGHUP stop a run as Ctrl-C does
//! (incomplete, samples kept); every sample is in the store as soon as it is measured, so a run
//! killed with SIGKILL keeps what it measured, shows as abandoned and can be deleted, while a
//! run still being measured cannot be; and the small things a stop or a bad argument must not
//! print (a NaN row, a 10,000-character label, the engine's limit for a host run).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

mod common;
use common::{Dir, fails, ok, pagelab};

/// `pagelab run page_fault1` on the engine, sampling every 100 ms for far longer than any test
/// waits, in the background.
fn long_run(db: &Path, label: &str, warmup: &str, interval_ms: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .arg("--db")
        .arg(db)
        .args([
            "run",
            "page_fault1",
            "--tasks",
            "1",
            "--samples",
            "1000",
            "--warmup",
            warmup,
            "--interval-ms",
            interval_ms,
            "--memsize",
            "8M",
            "--label",
            label,
        ])
        .env_remove("PAGELAB_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The runs as `pagelab runs --json` lists them (the store opened read-only).
fn runs(db: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["runs", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(db, &all)).unwrap()
}

/// Waits until the store holds a run with at least `samples` samples; returns its id.
fn wait_for_samples(db: &Path, child: &mut Child, samples: u64) -> i64 {
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended early: {status}");
        }
        let o = pagelab(db, &["runs", "--json"]);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            if v[0]["nr_samples"].as_u64().unwrap_or(0) >= samples {
                return v[0]["id"].as_i64().unwrap();
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no {samples} samples stored within 60 s while the run went on"
        );
    }
}

fn signal(child: &Child, sig: Signal) {
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), sig).unwrap();
}

#[test]
fn sigterm_and_sighup_stop_a_run_as_ctrl_c_does() {
    for (sig, name) in [(Signal::TERM, "term"), (Signal::HUP, "hup")] {
        let d = Dir::new(&format!("safety-{name}"));
        let db = d.db();
        let mut child = long_run(&db, name, "0", "100");
        let id = wait_for_samples(&db, &mut child, 2);
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "SIG{name}: exited 0");
        assert!(
            err.contains("interrupted") && err.contains(&format!("run {id}")),
            "SIG{name}: {err}"
        );
        let v = runs(&db, &[]);
        assert_eq!(v[0]["status"], "incomplete", "SIG{name}");
        let n = v[0]["nr_samples"].as_u64().unwrap();
        assert!((2..1000).contains(&n), "SIG{name}: {n} samples");
        // What was printed is what was stored.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("interrupted: the tables hold what finished"),
            "{stdout}"
        );
    }
}

#[test]
fn ctrl_c_before_the_first_sample_prints_no_nan() {
    let d = Dir::new("safety-early");
    let db = d.db();
    // A 20 s warm-up: the signal lands long before any sample is kept.
    let mut child = long_run(&db, "early", "1", "20000");
    let t0 = Instant::now();
    while runs_or_none(&db).is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "run never started");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, Signal::INT);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("NaN"), "{stdout}");
    assert!(stdout.contains("nothing was measured"), "{stdout}");
    let v = runs(&db, &[]);
    assert_eq!(
        (v[0]["status"].as_str(), v[0]["nr_samples"].as_u64()),
        (Some("incomplete"), Some(0))
    );
}

/// The first run listed, once the store exists and holds one.
fn runs_or_none(db: &Path) -> Option<serde_json::Value> {
    let o = pagelab(db, &["runs", "--json"]);
    if !o.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    v.get(0).cloned()
}

#[test]
fn a_run_killed_with_sigkill_is_abandoned_keeps_its_samples_and_can_be_deleted() {
    let d = Dir::new("safety-kill");
    let db = d.db();
    let mut child = long_run(&db, "killed", "0", "100");
    // Samples are in the store while the run goes on, not only at its end.
    let id = wait_for_samples(&db, &mut child, 3);
    let ids = id.to_string();

    // Still being measured: listed as running, and not deletable.
    assert_eq!(runs(&db, &[])[0]["status"], "running");
    fails(
        &db,
        &["runs", "--delete", "--id", &ids],
        &format!("run {id} is still being measured by process {}", child.id()),
    );
    fails(&db, &["runs", "--delete", "--all"], "nothing was deleted");
    assert_eq!(runs(&db, &[]).len(), 1);
    assert!(runs(&db, &["--status", "abandoned"]).is_empty());

    signal(&child, Signal::KILL);
    child.wait().unwrap();
    let v = runs(&db, &[]);
    assert_eq!(v[0]["status"], "abandoned");
    let kept = v[0]["nr_samples"].as_u64().unwrap();
    assert!(kept >= 3, "{kept} samples");
    let table = ok(&db, &["runs"]);
    assert!(table.contains("abandoned"), "{table}");
    assert_eq!(runs(&db, &["--status", "abandoned"]).len(), 1);
    assert!(runs(&db, &["--status", "running"]).is_empty());
    // Its samples are readable, and count as incomplete in comparisons.
    fails(&db, &["compare", "killed"], "no complete run");
    assert!(ok(&db, &["compare", "killed", "--include-incomplete"]).contains("faults/sec-1"));

    // The store takes a new run as if nothing happened.
    ok(
        &db,
        &[
            "run",
            "pft",
            "--tasks",
            "1",
            "--mode",
            "threads",
            "--samples",
            "2",
            "--size",
            "16M",
            "--label",
            "after",
        ],
    );
    let v = runs(&db, &[]);
    assert_eq!(
        v.iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["abandoned", "complete"]
    );

    let out = ok(&db, &["runs", "--delete", "--status", "abandoned"]);
    assert!(out.contains("deleted 1 run(s)"), "{out}");
    let v = runs(&db, &[]);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["meta"]["label"], "after");
}

#[test]
fn a_huge_label_is_refused_without_being_echoed_whole() {
    let d = Dir::new("safety-label");
    let db = d.db();
    let label = "x".repeat(10_000);
    let want = format!("`{}`...(10000 characters)", "x".repeat(40));
    for args in [
        vec!["run", "pft", "--label", &label],
        vec!["import", "/nonexistent.csv", "--label", &label],
    ] {
        fails(&db, &args, &want);
        let err = String::from_utf8_lossy(&pagelab(&db, &args).stderr).into_owned();
        assert!(err.len() < 300, "{} bytes of error", err.len());
    }
    // A label looked up in a store is quoted the same way.
    ok(
        &db,
        &[
            "run",
            "pft",
            "--tasks",
            "1",
            "--mode",
            "threads",
            "--samples",
            "1",
            "--size",
            "16M",
            "--label",
            "short",
        ],
    );
    fails(&db, &["compare", &label], &want);
    let err = String::from_utf8_lossy(&pagelab(&db, &["compare", &label]).stderr).into_owned();
    assert!(err.len() < 300, "{} bytes of error", err.len());
}

#[test]
fn a_host_run_with_more_tasks_than_the_host_takes_names_the_host_limit() {
    let d = Dir::new("safety-host");
    let db = d.db();
    let o = pagelab(
        &db,
        &[
            "run",
            "page_fault1",
            "--target",
            "kernel",
            "--tasks",
            "5000",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("5000 tasks") && err.contains("this machine") && !err.contains("engine"),
        "{err}"
    );
    // Beyond what the host's kernel hands out at all, the limit named is the host's.
    fails(
        &db,
        &["run", "pft", "--target", "kernel", "--tasks", "1000000"],
        "on the host kernel: this",
    );
    assert!(!db.exists(), "a refused run created the store");
}

/// A run marked running by a process on another host (a store carried between machines) cannot
/// be judged from here: `runs --delete` refuses it, naming the host, unless `--elsewhere` says
/// its process has ended; a run whose process is alive here is refused even then.
#[test]
fn a_run_owned_by_another_host_is_deleted_only_with_elsewhere() {
    let d = Dir::new("safety-elsewhere");
    let db = d.db();
    let mut child = long_run(&db, "live", "0", "100");
    let live = wait_for_samples(&db, &mut child, 1);
    // A second run, moved to another host by hand, as if the store had been copied here while
    // that host was measuring it.
    ok(
        &db,
        &[
            "run",
            "pft",
            "--tasks",
            "1",
            "--mode",
            "threads",
            "--samples",
            "2",
            "--size",
            "16M",
            "--label",
            "moved",
        ],
    );
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        let n = c
            .execute(
                "UPDATE runs SET status = 'running', finished = NULL, owner_pid = 1, \
                 owner_start = 1, owner_host = 'another-host pid:[1]' WHERE label = 'moved'",
                [],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    fails(
        &db,
        &["runs", "--delete", "--label", "moved"],
        "is running on another-host pid:[1]",
    );
    // --elsewhere never reaches a run whose process is alive here.
    fails(
        &db,
        &["runs", "--delete", "--all", "--elsewhere"],
        &format!("run {live} is still being measured"),
    );
    let out = ok(
        &db,
        &["runs", "--delete", "--label", "moved", "--elsewhere"],
    );
    assert!(out.contains("deleted 1 run(s)"), "{out}");
    signal(&child, Signal::INT);
    child.wait().unwrap();
    let v = runs(&db, &[]);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["meta"]["label"], "live");
}
