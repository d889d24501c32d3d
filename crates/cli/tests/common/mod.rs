//! What every end-to-end test of the binary needs: run `pagelab` on a store of its own, expect
//! success, or expect the one-line error bad input must give.

// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `pagelab --db DB ARGS...`, with `$PAGELAB_DB` out of the way.
pub fn pagelab(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagelab"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("PAGELAB_DB")
        .output()
        .expect("the pagelab binary runs")
}

/// Succeeds; returns standard output.
pub fn ok(db: &Path, args: &[&str]) -> String {
    let o = pagelab(db, args);
    assert!(
        o.status.success(),
        "pagelab {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Fails with exactly one line on stderr that contains `want`.
pub fn fails(db: &Path, args: &[&str], want: &str) {
    let o = pagelab(db, args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "pagelab {args:?} succeeded");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "pagelab {args:?}: not one line: {err}");
    assert!(
        lines[0].starts_with("pagelab: error: ") && lines[0].contains(want),
        "pagelab {args:?}: {err}"
    );
}

/// As [`fails`], and the store's bytes (or its absence) are as they were.
pub fn fails_untouched(db: &Path, args: &[&str], want: &str) {
    let before = std::fs::read(db).ok();
    fails(db, args, want);
    assert_eq!(
        std::fs::read(db).ok(),
        before,
        "pagelab {args:?} changed the store"
    );
}

/// A scratch directory for one test, removed when it ends.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("pagelab-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn db(&self) -> PathBuf {
        self.0.join("results.db")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
