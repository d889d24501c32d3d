//! `compare --format lkp`: a comparison in the layout of the 0-day kernel test robot's reports
//! (lkp-tests' `compare` / `lkp ncompare`), so a pagelab result reads like the rows the robot
//! mails to linux-mm:
//!
//! ```text
//!    6588847           +18.4%    7802117        will-it-scale.224.processes
//! ```
//!
//! The robot's columns, as lkp-tests prints them: the baseline's value in ten characters and six
//! for its spread, then for every other column the change in percent (`%+10.1f%` followed by a
//! blank), the value and its spread; then two blanks and the metric name. A value is the
//! arithmetic mean of its samples, printed with two decimals below 1000, `%.4g` above 10^8 and
//! as a whole number between. The spread is shown as `± N%` (the relative standard deviation,
//! truncated to a whole percent, in three characters) only where it exceeds 2%, as the robot
//! prints it; below that, six blanks. The change is the plain relative change of the means,
//! `100 * (new - base) / base`, signed by direction of the number, not by better or worse (the
//! robot leaves that to the reader), printed `%+.2g` when it is 100000% or more.
//!
//! One group per workload, headed like the robot's: a rule, the axes the group shares (the
//! testcase, and for will-it-scale tests the test), the labels compared (the baseline first),
//! the column header with each label cut to its column (16 characters for the baseline, 27 for
//! the others), and the `%stddev %change %stddev` lines. Lines carry no trailing blanks.
//!
//! # Metric names
//!
//! lkp-tests names will-it-scale's headline `will-it-scale.<tasks>.<mode>` (`224.processes`:
//! the sum over all tasks, which is what pagelab's `faults/sec` or `ops/sec` of a page_fault
//! workload is), with the test (`page_fault1`) as an axis of the group. pagelab follows that for
//! the workloads that are will-it-scale tests (`page_fault1`..`page_fault4`, and any workload
//! whose metric is will-it-scale's `ops/sec`). lkp runs pft at one task count per job and calls
//! its `flt/cpu/s` `pft.faults_per_sec_per_cpu`; since one pagelab comparison spans task counts
//! and modes, they go in the name as for will-it-scale, and the metric after them:
//! `pft.<tasks>.<mode>.faults_per_sec_per_cpu` (pagelab's `faults/cpu`) and
//! `pft.<tasks>.<mode>.faults_per_sec` (`faults/sec`). Any other metric is
//! `<workload>.<tasks>.<mode>.<metric>`, the metric's `/` spelt `_per_` as lkp spells it.
//!
//! # Spread
//!
//! The robot's spread is over its runs of a job, each run giving one value. pagelab's samples
//! are what a run measured (pft: one per repetition, as the robot's; will-it-scale: one per
//! second, not one per run), pooled over the selected runs of a label; the spread is the sample
//! standard deviation (divisor n - 1) of those samples, as [`Summary::stddev`] computes it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::compare::{CompareError, SetSummary, check_labels};
use crate::results::SampleKey;
use crate::stats::Summary;

/// The width of a value (lkp-tests' `ABS_WIDTH`).
const VALUE_W: usize = 10;
/// The width of a change (`REL_WIDTH`).
const CHANGE_W: usize = 10;
/// The width of a spread, `" ±NNN%"` (`ERR_WIDTH`).
const SPREAD_W: usize = 6;
/// Relative standard deviations above this many percent are printed.
const SPREAD_SHOWN_ABOVE: f64 = 2.0;

/// The name lkp-tests gives a sample set of `workload`.
pub fn metric_name(workload: &str, key: &SampleKey) -> String {
    let (t, m) = (key.tasks, &key.mode);
    if is_will_it_scale(workload) && matches!(key.metric.as_str(), "faults/sec" | "ops/sec") {
        return format!("will-it-scale.{t}.{m}");
    }
    let metric = match (workload, key.metric.as_str()) {
        ("pft", "faults/cpu") => "faults_per_sec_per_cpu".to_string(),
        ("pft", "faults/sec") => "faults_per_sec".to_string(),
        (_, other) => other.replace('/', "_per_").replace(' ', "_"),
    };
    format!("{workload}.{t}.{m}.{metric}")
}

/// Whether `workload` is one of will-it-scale's tests, which lkp-tests reports under the
/// testcase `will-it-scale` with the test as an axis.
fn is_will_it_scale(workload: &str) -> bool {
    workload
        .strip_prefix("page_fault")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// One row: the name and, per label, the pooled samples (`None`: no samples).
struct Row {
    name: String,
    cells: Vec<Option<Summary>>,
}

/// The lkp-style comparison of `labels` (the baseline first) over the given sample-set
/// summaries (sets of other labels are ignored; each label's runs are pooled). Errors as
/// [`crate::compare::build_from`] does: no label, a label named twice, a label without samples,
/// or nothing shared by two labels.
pub fn render(sets: &[SetSummary], labels: &[String]) -> Result<String, CompareError> {
    check_labels(sets, labels)?;
    // workload -> (key, name) -> per-label pooled summary
    type Cells = Vec<Option<Summary>>;
    let mut groups: BTreeMap<&str, BTreeMap<(&SampleKey, String), Cells>> = BTreeMap::new();
    for s in sets {
        let Some(col) = labels.iter().position(|l| l == &s.label) else {
            continue;
        };
        if s.summary.n() == 0 {
            continue;
        }
        let name = metric_name(&s.workload, &s.key);
        let cell = &mut groups
            .entry(&s.workload)
            .or_default()
            .entry((&s.key, name))
            .or_insert_with(|| vec![None; labels.len()])[col];
        cell.get_or_insert_with(Summary::new).merge(&s.summary);
    }
    let mut out = String::new();
    let mut shown = 0;
    for (workload, rows) in groups {
        let filled: BTreeSet<usize> = rows
            .values()
            .flat_map(|c| c.iter().enumerate().filter(|(_, s)| s.is_some()))
            .map(|(i, _)| i)
            .collect();
        if labels.len() > 1 && filled.len() < 2 {
            continue;
        }
        // Rows by mode, then task count, then name: the robot sorts its stat keys by name, which
        // would put 16 before 2.
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|((_, name), cells)| Row { name, cells })
            .collect();
        group(&mut out, workload, labels, &rows);
        shown += 1;
    }
    if shown == 0 {
        return Err(CompareError::NothingShared { by: "workload" });
    }
    Ok(out)
}

/// One group: header and rows.
fn group(out: &mut String, workload: &str, labels: &[String], rows: &[Row]) {
    let mut lines: Vec<String> = vec!["=".repeat(89)];
    if is_will_it_scale(workload) {
        lines.push("testcase/test:".into());
        lines.push(format!("  will-it-scale/{workload}"));
    } else {
        lines.push("testcase:".into());
        lines.push(format!("  {workload}"));
    }
    lines.push(String::new());
    lines.push("label:".into());
    lines.extend(labels.iter().map(|l| format!("  {l}")));
    lines.push(String::new());
    let first_w = VALUE_W + SPREAD_W;
    let other_w = first_w + CHANGE_W + 1;
    let cut = |l: &str, w: usize| l.chars().take(w).collect::<String>();
    let mut head = format!("{:>first_w$} ", cut(&labels[0], first_w));
    let mut rule = format!("{} ", "-".repeat(first_w));
    for l in &labels[1..] {
        let _ = write!(head, "{:>other_w$} ", cut(l, other_w));
        let _ = write!(rule, "{} ", "-".repeat(other_w));
    }
    lines.push(head);
    lines.push(rule);
    let others = labels.len() - 1;
    lines.push(format!(
        "         %stddev{}",
        "     %change         %stddev".repeat(others)
    ));
    lines.push(format!(
        "             \\  {}",
        "        |                \\  ".repeat(others)
    ));
    for r in rows {
        lines.push(row(r));
    }
    for l in lines {
        let _ = writeln!(out, "{}", l.trim_end());
    }
    out.push('\n');
}

fn row(r: &Row) -> String {
    let mut line = String::new();
    let base = r.cells[0].as_ref().map(Summary::amean);
    for (i, c) in r.cells.iter().enumerate() {
        let mean = c.as_ref().map(Summary::amean);
        if i > 0 {
            match (base, mean) {
                (Some(b), Some(m)) if b != 0.0 && b.is_finite() && m.is_finite() => {
                    let p = 100.0 * (m - b) / b;
                    let p = if p.abs() < 100_000.0 {
                        format!("{p:+.1}")
                    } else {
                        fmt_g(p, 2, true)
                    };
                    let _ = write!(line, "{p:>CHANGE_W$}% ");
                }
                _ => line.push_str(&" ".repeat(CHANGE_W + 2)),
            }
        }
        let (Some(s), Some(m)) = (c, mean) else {
            let _ = write!(line, "{:>VALUE_W$}{}", "-", " ".repeat(SPREAD_W));
            continue;
        };
        let _ = write!(line, "{:>VALUE_W$}", fmt_value(m));
        let rsd = if m != 0.0 {
            100.0 * s.stddev() / m
        } else {
            s.stddev()
        };
        if rsd > SPREAD_SHOWN_ABOVE && rsd.is_finite() {
            // Truncated to a whole percent, as `%d` of a Float prints it.
            let _ = write!(line, " ±{:>3}%", rsd.trunc() as i64);
        } else {
            line.push_str(&" ".repeat(SPREAD_W));
        }
    }
    let _ = write!(line, "  {}", r.name);
    line
}

/// A mean as the robot prints it: `%.2f` below 1000, `%.4g` above 10^8, else `%d` (truncated).
fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return "NaN".into();
    }
    if v.abs() < 1000.0 {
        format!("{v:.2}")
    } else if v.abs() > 100_000_000.0 {
        fmt_g(v, 4, false)
    } else {
        format!("{}", v.trunc() as i64)
    }
}

/// C's `%.<prec>g` (with `+` when `plus`): `prec` significant digits, trailing zeros removed,
/// in exponent form (`1.235e+09`) when the exponent is below -4 or at least `prec`.
fn fmt_g(v: f64, prec: usize, plus: bool) -> String {
    let sign = if v < 0.0 {
        "-"
    } else if plus {
        "+"
    } else {
        ""
    };
    let a = v.abs();
    if a == 0.0 {
        return format!("{sign}0");
    }
    // The exponent after rounding to `prec` digits.
    let e_form = format!("{:.*e}", prec - 1, a);
    let (mant, exp) = e_form.split_once('e').expect("Rust's {:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= prec as i32 {
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{}e{esign}{:02}", trim(mant), exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        format!("{sign}{}", trim(&format!("{a:.decimals$}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Origin;

    fn set(
        run: i64,
        label: &str,
        workload: &str,
        tasks: u32,
        metric: &str,
        v: &[f64],
    ) -> SetSummary {
        SetSummary {
            run_id: run,
            label: label.into(),
            workload: workload.into(),
            origin: Origin::Measured,
            key: SampleKey {
                mode: "processes".into(),
                tasks,
                metric: metric.into(),
                higher_is_better: true,
            },
            summary: Summary::of(v),
            repeats: Vec::new(),
        }
    }

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    /// The issue's row: equal samples (no spread) give the robot's line exactly.
    #[test]
    fn the_robots_row() {
        let sets = [
            set(1, "base", "page_fault1", 224, "faults/sec", &[6588847.0; 3]),
            set(2, "new", "page_fault1", 224, "faults/sec", &[7802117.0; 3]),
        ];
        let text = render(&sets, &labels(&["base", "new"])).unwrap();
        assert!(
            text.contains(
                "\n   6588847           +18.4%    7802117        will-it-scale.224.processes\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn formats_follow_c() {
        assert_eq!(fmt_g(1234567890.0, 4, false), "1.235e+09");
        assert_eq!(fmt_g(150000.0, 2, true), "+1.5e+05");
        assert_eq!(fmt_g(-250000.0, 2, true), "-2.5e+05");
        assert_eq!(fmt_g(12.0, 4, false), "12");
        assert_eq!(fmt_value(12.345), "12.35");
        assert_eq!(fmt_value(1999.9), "1999");
        assert_eq!(fmt_value(123456789.0), "1.235e+08");
    }

    #[test]
    fn names_follow_lkp() {
        let k = |m: &str| SampleKey {
            mode: "threads".into(),
            tasks: 8,
            metric: m.into(),
            higher_is_better: true,
        };
        assert_eq!(
            metric_name("page_fault2", &k("faults/sec")),
            "will-it-scale.8.threads"
        );
        assert_eq!(
            metric_name("pft", &k("faults/cpu")),
            "pft.8.threads.faults_per_sec_per_cpu"
        );
        assert_eq!(
            metric_name("pft", &k("faults/sec")),
            "pft.8.threads.faults_per_sec"
        );
        assert_eq!(
            metric_name("lameter", &k("ns/fault")),
            "lameter.8.threads.ns_per_fault"
        );
    }

    /// A whole group with three labels, spreads above and below 2%, a missing cell.
    #[test]
    fn golden_group() {
        let sets = [
            set(1, "base", "pft", 1, "faults/cpu", &[100.0, 110.0, 90.0]),
            set(1, "base", "pft", 2, "faults/cpu", &[2000.0, 2001.0, 1999.0]),
            set(
                2,
                "patched-kernel-with-a-very-long-name",
                "pft",
                1,
                "faults/cpu",
                &[150.0, 150.0],
            ),
            set(
                2,
                "patched-kernel-with-a-very-long-name",
                "pft",
                2,
                "faults/cpu",
                &[1000.0, 1000.0],
            ),
            set(3, "other", "pft", 1, "faults/cpu", &[50.0, 50.0]),
        ];
        let l = labels(&["base", "patched-kernel-with-a-very-long-name", "other"]);
        let want = "\
=========================================================================================
testcase:
  pft

label:
  base
  patched-kernel-with-a-very-long-name
  other

            base patched-kernel-with-a-very-                       other
---------------- --------------------------- ---------------------------
         %stddev     %change         %stddev     %change         %stddev
             \\          |                \\          |                \\
    100.00 ± 10%     +50.0%     150.00           -50.0%      50.00        pft.1.processes.faults_per_sec_per_cpu
      2000           -50.0%       1000                           -        pft.2.processes.faults_per_sec_per_cpu

";
        assert_eq!(render(&sets, &l).unwrap(), want);
    }

    #[test]
    fn refusals() {
        let sets = [set(1, "a", "pft", 1, "faults/cpu", &[1.0])];
        assert!(render(&sets, &[]).is_err());
        assert!(
            render(&sets, &labels(&["a", "a"]))
                .unwrap_err()
                .to_string()
                .contains("named twice")
        );
        assert!(
            render(&sets, &labels(&["a", "b"]))
                .unwrap_err()
                .to_string()
                .contains("`b` has no samples")
        );
    }
}
