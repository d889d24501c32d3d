//! `pagelab import <dir>`: the results mmtests leaves for will-it-scale (`wis-*` tests) and pft,
//! so that mmtests runs compare with pagelab's directly.
//!
//! `run-mmtests.sh <run name>` keeps everything under `work/log/<run name>/`, the run name
//! being what `compare-kernels.sh` shows as the column (conventionally the kernel's name), and
//! repeats the whole run `MMTEST_ITERATIONS` times as `iter-0/`, `iter-1/`, .... Each test writes
//! its logs to `iter-<N>/<test>/logs/` (`bin/run-single-test.sh`):
//!
//! * the `wis-*` tests (`wis-pf` runs page_fault1..3) run `./<test>_<model> -t <tasks> -s
//!   <iterations>` for every test, model (`processes`, `threads`) and task count, save its
//!   stdout as `benchlog-<test>_<model>-<tasks>` (or, split, `benchlog-<test>_<model>-<tasks>-<n>`)
//!   and delete its first eight lines (`testcase:`, `warmup` and the warm-up seconds), so what
//!   is left is the measured `min:<n> max:<n> total:<n>` lines (after `measurement`, when the
//!   will-it-scale build prints it after six warm-up seconds) and `average:`. mmtests' parser
//!   takes every `total:` as one sample; so does this import, through the will-it-scale parser of
//!   [`crate::import`] with the test, model and task count from the file name (and its checks:
//!   `average:` against the totals, each total against the task count times min and max).
//! * `pft` appends pft's result rows, one per iteration, to `pft-<tasks>.log`; they are read by
//!   the pft parser of [`crate::import`]. mmtests does not record whether pft ran threads or
//!   processes (`PFT_USE_PROCESSES`): the mode is the options', else `threads`, its default.
//!
//! Every log is read with [`read_input`] and parsed whole before anything is stored, with the
//! single-file importers' checks (a last data line without a newline is a cut file); one bad log
//! refuses the whole directory. The result is one [`RunData`] per workload, the runs of every
//! iteration and split log numbered as repeats in order, for [`crate::store::Store::insert_runs`]
//! to store in one transaction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::import::{self, Format, ImportError, ImportOptions, read_input};
use crate::results::{RunData, SampleKey, Status};

/// What the directory must hold, for messages.
const EXPECTED: &str = "expected an mmtests run directory (work/log/<run name>/) holding \
                        iter-<N>/wis-<test>/logs/benchlog-<test>_<processes|threads>-<tasks> or \
                        iter-<N>/pft/logs/pft-<tasks>.log";

/// Whether `dir` looks like an mmtests run directory: it holds an `iter-<N>` directory.
pub fn is_run_dir(dir: &Path) -> bool {
    iterations(dir).is_ok_and(|i| !i.is_empty())
}

/// `iter-<N>` subdirectories of `dir`, by N.
fn iterations(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<(u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("iter-"))
            .and_then(parse_count)
        else {
            continue;
        };
        if e.path().is_dir() {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out.into_iter().map(|(_, p)| p).collect())
}

/// Digits only, as mmtests writes counts into names.
fn parse_count(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The files of `dir` whose names `parse` accepts, with what it says, sorted by it.
fn files<T: Ord + Clone>(
    dir: &Path,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<(T, PathBuf)>, ImportError> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| dir_err(dir, &format!("cannot read it: {e}")))?;
    for e in entries {
        let e = e.map_err(|e| dir_err(dir, &format!("cannot read it: {e}")))?;
        if let Some(t) = e.file_name().to_str().and_then(&parse) {
            out.push((t, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn dir_err(dir: &Path, msg: &str) -> ImportError {
    ImportError::File {
        file: dir.display().to_string(),
        msg: msg.to_string(),
    }
}

/// `(test, model, tasks, part)` of a `benchlog-<test>_<model>-<tasks>[-<part>]` name; `Err` for
/// a benchlog name of another shape.
fn benchlog_name(name: &str) -> Option<Result<(String, String, u32, u32), ()>> {
    let rest = name.strip_prefix("benchlog-")?;
    let mut parts = rest.split('-');
    let parsed = (|| {
        let bin = parts.next()?;
        let tasks = parse_count(parts.next()?)?;
        let part = match parts.next() {
            Some(p) => parse_count(p)?,
            None => 0,
        };
        if parts.next().is_some() || tasks == 0 {
            return None;
        }
        let (test, model) = ["processes", "threads"].iter().find_map(|m| {
            let test = bin.strip_suffix(m)?.strip_suffix('_')?;
            (!test.is_empty()).then(|| (test.to_string(), m.to_string()))
        })?;
        Some((test, model, tasks, part))
    })();
    Some(parsed.ok_or(()))
}

/// The samples of one workload gathered over the logs: the first parsed run's metadata, and per
/// key the repeats in the order read.
struct Gathered {
    data: RunData,
    next_repeat: BTreeMap<SampleKey, u32>,
}

impl Gathered {
    /// Adds the samples of one parsed log, its repeats numbered after those already there.
    fn add(&mut self, d: RunData) {
        if d.status != Status::Complete {
            self.data.status = d.status;
        }
        let mut top: BTreeMap<SampleKey, u32> = BTreeMap::new();
        for (key, r, values) in d.samples {
            let base = self.next_repeat.get(&key).copied().unwrap_or(0);
            let t = top.entry(key.clone()).or_insert(0);
            *t = (*t).max(r + 1);
            self.data.samples.push((key, base + r, values));
        }
        for (key, n) in top {
            *self.next_repeat.entry(key).or_insert(0) += n;
        }
    }
}

/// Reads the wis and pft results of the mmtests run directory `dir`: one [`RunData`] per
/// workload (`page_fault1`, ..., `pft`), labelled `opts.label`. Refuses a directory that is not
/// an mmtests run directory, one that holds neither test, and any log that does not parse.
pub fn read_dir(dir: &Path, opts: &ImportOptions) -> Result<Vec<RunData>, ImportError> {
    let iters = iterations(dir).map_err(|e| dir_err(dir, &format!("cannot read it: {e}")))?;
    if iters.is_empty() {
        // A work/log directory holds the run directories: say which to give.
        let runs: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| is_run_dir(&e.path()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        let msg = if runs.is_empty() {
            format!("not an mmtests results directory (no iter-<N>/ in it): {EXPECTED}")
        } else {
            let mut runs = runs;
            runs.sort();
            format!(
                "holds the mmtests runs {}: import each run's directory on its own, e.g. {}",
                runs.join(", "),
                dir.join(&runs[0]).display()
            )
        };
        return Err(dir_err(dir, &msg));
    }
    let mut by_workload: BTreeMap<String, Gathered> = BTreeMap::new();
    let mut add = |d: RunData| match by_workload.get_mut(&d.meta.workload) {
        Some(g) => g.add(d),
        None => {
            let mut g = Gathered {
                data: RunData {
                    meta: d.meta.clone(),
                    status: Status::Complete,
                    samples: Vec::new(),
                },
                next_repeat: BTreeMap::new(),
            };
            let w = d.meta.workload.clone();
            g.add(d);
            by_workload.insert(w, g);
        }
    };
    for iter in &iters {
        let mut tests: Vec<PathBuf> = std::fs::read_dir(iter)
            .map_err(|e| dir_err(iter, &format!("cannot read it: {e}")))?
            .flatten()
            .map(|e| e.path())
            .collect();
        tests.sort();
        for test in tests {
            let Some(name) = test.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let logs = test.join("logs");
            if name == "pft" && logs.is_dir() {
                let found = files(&logs, |n| {
                    n.strip_prefix("pft-")
                        .and_then(|n| n.strip_suffix(".log"))
                        .and_then(parse_count)
                })?;
                for (_, path) in found {
                    let o = ImportOptions {
                        workload: None,
                        tasks: None,
                        ..opts.clone()
                    };
                    add(parse_log(&path, Format::Pft, &o)?);
                }
            } else if name.starts_with("wis-") && logs.is_dir() {
                let found = files(&logs, benchlog_name)?;
                for (parsed, path) in found {
                    let Ok((test, model, tasks, _)) = parsed else {
                        return Err(dir_err(
                            &path,
                            "expected a will-it-scale log named \
                             benchlog-<test>_<processes|threads>-<tasks>[-<n>], as mmtests' wis \
                             names them",
                        ));
                    };
                    let o = ImportOptions {
                        workload: Some(test),
                        mode: Some(model),
                        tasks: Some(tasks),
                        warmup: 0,
                        ..opts.clone()
                    };
                    add(parse_log(&path, Format::WillItScale, &o)?);
                }
            }
        }
    }
    if by_workload.is_empty() {
        return Err(dir_err(
            dir,
            &format!("holds neither wis (will-it-scale) nor pft results: {EXPECTED}"),
        ));
    }
    Ok(by_workload.into_values().map(|g| g.data).collect())
}

/// One log, read and parsed whole, errors naming its path.
fn parse_log(path: &Path, format: Format, opts: &ImportOptions) -> Result<RunData, ImportError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| ImportError::File {
        file: name.clone(),
        msg: format!("cannot read it: {e}"),
    })?;
    let text = read_input(&name, f)?;
    import::parse_named(format, &name, &text, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchlog_names() {
        assert_eq!(
            benchlog_name("benchlog-page_fault1_processes-4"),
            Some(Ok(("page_fault1".into(), "processes".into(), 4, 0)))
        );
        assert_eq!(
            benchlog_name("benchlog-page_fault2_threads-16-3"),
            Some(Ok(("page_fault2".into(), "threads".into(), 16, 3)))
        );
        assert_eq!(benchlog_name("benchlog-page_fault1-4"), Some(Err(())));
        assert_eq!(
            benchlog_name("benchlog-page_fault1_threads-x"),
            Some(Err(()))
        );
        assert_eq!(benchlog_name("time-page_fault1_threads-4"), None);
    }
}
