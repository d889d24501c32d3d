//! Verdicts of the beyond-linux set (issue 15): per workload, each research profile against
//! linux-6.7, measured here and projected, with the interval, and what each design's
//! published headline says beside it.
//!
//! The table is made of stored runs only (`pagelab report --verdicts`, which
//! `scripts/beyond-linux` puts in the README): measured runs at 1 and 2 tasks, projected runs
//! labelled `<profile>@<machine>` at the machines' task counts. A cell is the change of the
//! profile's harmonic mean against linux-6.7's in the same place (the same machine, or here;
//! the same task count), in percent (higher is better for every metric of the set), with an
//! interval:
//!
//! - projected: the range over every pairing of a baseline capture's mean with one of the
//!   profile's (the captures are the projection's uncertainty, as `compare` shows it);
//! - measured: the range over every pairing of the two runs' extreme samples (lowest against
//!   highest), a deliberately wide bound from a handful of samples on a shared host.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pagelab_bench::compare::SetSummary;
use pagelab_bench::results::Origin;
use serde::Serialize;

/// The baseline every research profile is read against.
pub const BASELINE: &str = "linux-6.7";

/// A research design's published headline, and where the set can test it.
#[derive(Clone, Copy, Debug)]
pub struct Headline {
    pub profile: &'static str,
    pub design: &'static str,
    pub claim: &'static str,
}

/// The headlines of issue 15, per profile.
pub const HEADLINES: &[Headline] = &[
    Headline {
        profile: "rcu-vma",
        design: "Bonsai (ASPLOS'12)",
        claim: "lock-free page faults, 1.7-3.4x on 80 cores (Metis, Psearchy, Dedup)",
    },
    Headline {
        profile: "range-vm",
        design: "RadixVM (EuroSys'13) / CortenMM (SOSP'25)",
        claim: "perfect scaling of mmap/munmap on disjoint regions (mapbench, 80 cores); 1.2-26x over Linux up to 384 cores",
    },
    Headline {
        profile: "llfree",
        design: "LLFree (ATC'23)",
        claim: "-88% time for concurrent 4 KiB allocations against the buddy allocator",
    },
    Headline {
        profile: "pvl-refcount",
        design: "Linux 6.15 per-VMA reference count",
        claim: "(merged; the kernel-side comparison point)",
    },
];

/// Where a cell was measured or projected: `here`, or a machine's name.
pub type Place = String;

/// One change against the baseline, percent, with its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub change: f64,
    pub low: f64,
    pub high: f64,
}

/// One profile's cells, by `(place, tasks)`.
pub type Cells = BTreeMap<(Place, u32), Cell>;

/// The verdict table: per workload, per profile, per (place, tasks), a cell.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    /// Column order: `(place, tasks)`, measured first, then by machine and task count.
    pub columns: Vec<(Place, u32)>,
    /// `workload -> profile -> (place, tasks) -> cell`, profiles in the order first seen.
    pub rows: BTreeMap<String, Vec<(String, Cells)>>,
}

fn place_and_profile(set: &SetSummary) -> (Place, String) {
    match (set.origin, set.label.split_once('@')) {
        (Origin::Projected, Some((p, m))) => (m.to_string(), p.to_string()),
        _ => ("here".to_string(), set.label.clone()),
    }
}

/// The change of `p` against `b` in percent.
fn pct(p: f64, b: f64) -> f64 {
    (p / b - 1.0) * 100.0
}

fn cell(p: &SetSummary, b: &SetSummary) -> Option<Cell> {
    let (pm, bm) = (p.summary.hmean(), b.summary.hmean());
    if !(pm.is_finite() && bm.is_finite() && bm > 0.0) {
        return None;
    }
    let change = pct(pm, bm);
    let (low, high) = if p.origin == Origin::Projected && p.repeats.len() > 1 {
        let pr: Vec<f64> = p.repeats.iter().map(|(_, s)| s.hmean()).collect();
        let br: Vec<f64> = b.repeats.iter().map(|(_, s)| s.hmean()).collect();
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for x in &pr {
            for y in &br {
                let c = pct(*x, *y);
                lo = lo.min(c);
                hi = hi.max(c);
            }
        }
        (lo, hi)
    } else {
        (
            pct(p.summary.min(), b.summary.max()),
            pct(p.summary.max(), b.summary.min()),
        )
    };
    Some(Cell { change, low, high })
}

/// The verdicts of `sets` (threads-mode sets of one metric per workload; the first metric a
/// workload's baseline has is the one read).
pub fn verdicts(sets: &[SetSummary]) -> Verdicts {
    let mut v = Verdicts::default();
    let mut metric: BTreeMap<&str, &str> = BTreeMap::new();
    for s in sets {
        if place_and_profile(s).1 == BASELINE && s.key.mode == "threads" {
            metric.entry(&s.workload).or_insert(&s.key.metric);
        }
    }
    let key = |s: &SetSummary| {
        let (place, profile) = place_and_profile(s);
        (s.workload.clone(), place, s.key.tasks, profile)
    };
    let mut base: BTreeMap<(String, Place, u32), &SetSummary> = BTreeMap::new();
    for s in sets.iter().filter(|s| s.key.mode == "threads") {
        if metric.get(s.workload.as_str()) != Some(&s.key.metric.as_str()) {
            continue;
        }
        let (w, place, tasks, profile) = key(s);
        if profile == BASELINE {
            base.insert((w, place, tasks), s);
        }
    }
    for s in sets.iter().filter(|s| s.key.mode == "threads") {
        if metric.get(s.workload.as_str()) != Some(&s.key.metric.as_str()) {
            continue;
        }
        let (w, place, tasks, profile) = key(s);
        if profile == BASELINE {
            continue;
        }
        let Some(b) = base.get(&(w.clone(), place.clone(), tasks)) else {
            continue;
        };
        let Some(c) = cell(s, b) else { continue };
        let col = (place, tasks);
        if !v.columns.contains(&col) {
            v.columns.push(col.clone());
        }
        let profiles = v.rows.entry(w).or_default();
        let i = match profiles.iter().position(|(p, _)| *p == profile) {
            Some(i) => i,
            None => {
                profiles.push((profile, BTreeMap::new()));
                profiles.len() - 1
            }
        };
        profiles[i].1.insert(col, c);
    }
    // Measured here first, then the machines by CPU count (their task counts say it), each by
    // task count.
    v.columns
        .sort_by(|a, b| (a.0 != "here", a.1, &a.0).cmp(&(b.0 != "here", b.1, &b.0)));
    v
}

fn column_name((place, tasks): &(Place, u32)) -> String {
    if place == "here" {
        format!(
            "measured, {tasks} task{}",
            if *tasks == 1 { "" } else { "s" }
        )
    } else {
        format!("{place}, {tasks} CPUs")
    }
}

fn fmt_cell(c: Option<&Cell>) -> String {
    match c {
        Some(c) => format!("{:+.0}% [{:+.0}, {:+.0}]", c.change, c.low, c.high),
        None => "-".into(),
    }
}

/// Whether the projected cells at the largest machine task count say the profile is better
/// (the whole interval above zero), worse (below), or cannot tell.
fn reading(cells: &Cells, columns: &[(Place, u32)]) -> &'static str {
    let Some(c) = columns
        .iter()
        .rev()
        .find(|col| col.0 != "here")
        .and_then(|col| cells.get(col))
    else {
        return "not projected";
    };
    if c.low > 0.0 {
        "better"
    } else if c.high < 0.0 {
        "worse"
    } else {
        "within the interval"
    }
}

/// The table as GitHub markdown: one row per workload and profile, a column per place and
/// task count, and the reading at the largest projection.
pub fn markdown(v: &Verdicts) -> String {
    let mut out = String::new();
    let _ = write!(out, "| workload | profile vs {BASELINE} |");
    for c in &v.columns {
        let _ = write!(out, " {} |", column_name(c));
    }
    out.push_str(" at the largest projection |\n|---|---|");
    for _ in &v.columns {
        out.push_str("---:|");
    }
    out.push_str("---|\n");
    for (w, profiles) in &v.rows {
        for (p, cells) in profiles {
            let _ = write!(out, "| {w} | {p} |");
            for c in &v.columns {
                let _ = write!(out, " {} |", fmt_cell(cells.get(c)));
            }
            let _ = writeln!(out, " {} |", reading(cells, &v.columns));
        }
    }
    out
}

/// The table as the HTML report shows it (`templates/report.html`, section "Verdicts"): cells
/// as text, the headlines under the table.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub baseline: &'static str,
    pub columns: Vec<String>,
    pub rows: Vec<SectionRow>,
    pub headlines: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SectionRow {
    pub workload: String,
    pub profile: String,
    pub cells: Vec<String>,
    pub reading: &'static str,
}

/// The report's section, if there is anything to read.
pub fn section(v: &Verdicts) -> Option<Section> {
    if v.rows.is_empty() {
        return None;
    }
    Some(Section {
        baseline: BASELINE,
        columns: v.columns.iter().map(column_name).collect(),
        rows: v
            .rows
            .iter()
            .flat_map(|(w, profiles)| {
                profiles.iter().map(|(p, cells)| SectionRow {
                    workload: w.clone(),
                    profile: p.clone(),
                    cells: v.columns.iter().map(|c| fmt_cell(cells.get(c))).collect(),
                    reading: reading(cells, &v.columns),
                })
            })
            .collect(),
        headlines: HEADLINES
            .iter()
            .map(|h| format!("{} ({}): {}", h.profile, h.design, h.claim))
            .collect(),
    })
}

/// Whether `labels` hold the baseline and a research profile (measured or projected): the
/// report then carries the verdicts section.
pub fn applies(labels: &[String]) -> bool {
    let base = |l: &str| l.split_once('@').map_or(l, |(p, _)| p).to_string();
    labels.iter().any(|l| base(l) == BASELINE)
        && labels
            .iter()
            .any(|l| HEADLINES.iter().any(|h| base(l) == h.profile))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagelab_bench::results::SampleKey;
    use pagelab_bench::stats::Summary;

    fn set(label: &str, origin: Origin, tasks: u32, repeats: &[&[f64]]) -> SetSummary {
        let mut s = SetSummary {
            run_id: 0,
            label: label.into(),
            workload: "mapbench".into(),
            origin,
            key: SampleKey {
                mode: "threads".into(),
                tasks,
                metric: "ops/sec".into(),
                higher_is_better: true,
            },
            summary: Summary::new(),
            repeats: Vec::new(),
        };
        for (r, v) in repeats.iter().enumerate() {
            for x in *v {
                s.push(r as u32, *x);
            }
        }
        s
    }

    #[test]
    fn cells_read_each_profile_against_the_baseline_in_the_same_place() {
        let m = Origin::Measured;
        let p = Origin::Projected;
        let sets = vec![
            set("linux-6.7", m, 1, &[&[100.0, 100.0]]),
            set("range-vm", m, 1, &[&[150.0, 150.0]]),
            set("linux-6.7@icelake-2s-64c", p, 128, &[&[100.0], &[200.0]]),
            set("range-vm@icelake-2s-64c", p, 128, &[&[50.0], &[50.0]]),
            // No baseline at 2 tasks: no cell.
            set("range-vm", m, 2, &[&[1.0]]),
        ];
        let v = verdicts(&sets);
        assert_eq!(
            v.columns,
            [("here".to_string(), 1), ("icelake-2s-64c".to_string(), 128)]
        );
        let (profile, cells) = &v.rows["mapbench"][0];
        assert_eq!(profile, "range-vm");
        let here = cells[&("here".to_string(), 1)];
        assert!((here.change - 50.0).abs() < 1e-9, "{here:?}");
        let proj = cells[&("icelake-2s-64c".to_string(), 128)];
        // hmean(100, 200) = 133.3: 50 is -62.5%; the captures pair to -50% and -75%.
        assert!((proj.change + 62.5).abs() < 1e-9, "{proj:?}");
        assert!((proj.low + 75.0).abs() < 1e-9 && (proj.high + 50.0).abs() < 1e-9);
        let md = markdown(&v);
        assert!(
            md.contains("| mapbench | range-vm | +50% [+50, +50] | -62% [-75, -50] | worse |"),
            "{md}"
        );
        let sec = section(&v).unwrap();
        assert_eq!(sec.rows[0].cells, ["+50% [+50, +50]", "-62% [-75, -50]"]);
        assert!(sec.headlines.iter().any(|h| h.contains("RadixVM")));
        assert!(section(&verdicts(&[])).is_none());
        assert!(applies(&["linux-6.7".into(), "llfree@x".into()]));
        assert!(!applies(&["linux-6.7".into(), "linux-4.15".into()]));
    }
}
