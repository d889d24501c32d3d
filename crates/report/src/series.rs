//! The numbers every plot is drawn from: each label's samples pooled per origin, mode and task
//! count, summarised as mmtests summarises them (Hmean ± HStddev for rates, Amean ± Stddev for
//! times, as [`pagelab_bench::compare`] does), and each label's percent change against the
//! baseline with compare's sign convention (positive is better) and significance rule.
//!
//! Samples of one label are split by [`Source`], not pooled across it: a number measured here
//! and one projected for a big machine under the same label are different curves, and a plot
//! must show them as such.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use pagelab_bench::compare;
use pagelab_bench::results::{Origin, StoredRun};
use pagelab_bench::stats::{self, Significance, Summary};
use serde::Serialize;

use crate::Results;

/// Where a curve's numbers come from: measured here, imported from the real tools on some
/// machine, or projected by the projector for a machine description.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Source {
    pub origin: Origin,
    /// The machine description's name (projected), or what the importer said about the
    /// machine (imported); `None` for measured runs, whose host facts are stored with them.
    pub machine: Option<String>,
}

impl Source {
    /// The source of a stored run.
    pub fn of(run: &StoredRun) -> Source {
        Source {
            origin: run.meta.origin,
            machine: match run.meta.origin {
                Origin::Measured => None,
                Origin::Projected | Origin::Imported => run.meta.machine.clone(),
            },
        }
    }

    pub fn measured() -> Source {
        Source {
            origin: Origin::Measured,
            machine: None,
        }
    }

    /// Measured first, then imported, then projected: what was seen before what was computed.
    fn rank(&self) -> u8 {
        match self.origin {
            Origin::Measured => 0,
            Origin::Imported => 1,
            Origin::Projected => 2,
        }
    }

    /// `measured`, `imported from machine`, `projected for machine`: how legends and headings
    /// name the source.
    pub fn describe(&self) -> String {
        match (self.origin, &self.machine) {
            (Origin::Measured, _) => "measured".into(),
            (Origin::Imported, Some(m)) => format!("imported from {m}"),
            (Origin::Imported, None) => "imported".into(),
            (Origin::Projected, Some(m)) => format!("projected for {m}"),
            (Origin::Projected, None) => "projected".into(),
        }
    }
}

impl Ord for Source {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.rank(), &self.machine).cmp(&(other.rank(), &other.machine))
    }
}

impl PartialOrd for Source {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// mmtests' summary of one sample set: `(Hmean, HStddev)` for rates (higher is better),
/// `(Amean, Stddev)` otherwise.
pub fn summarise(summary: &Summary, higher_is_better: bool) -> (f64, f64) {
    (
        summary.mean_of(higher_is_better),
        summary.spread_of(higher_is_better),
    )
}

/// What [`summarise`] computes, for axis titles: `Hmean ± HStddev`.
pub fn summary_name(higher_is_better: bool) -> &'static str {
    if higher_is_better {
        "Hmean ± HStddev"
    } else {
        "Amean ± Stddev"
    }
}

/// One task count of a curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub tasks: u32,
    pub mean: f64,
    pub spread: f64,
    /// The pooled sample set, for the significance of changes.
    pub summary: Summary,
    /// The sample set of each pooled (run, repeat): a projected run's repeats are its
    /// captures, whose means make a projected change's interval.
    #[serde(skip)]
    pub repeats: Vec<Summary>,
}

/// One curve: a label's samples from one source, in one mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub label: String,
    /// Its position in [`Results::labels`]: 0 is the baseline.
    pub label_index: usize,
    /// Its colour slot (see [`colour_slots`]).
    pub colour: usize,
    pub source: Source,
    /// By task count.
    pub points: Vec<Point>,
}

/// The curves of one mode (processes or threads).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Panel {
    pub mode: String,
    /// By label, then source.
    pub series: Vec<Series>,
}

/// Everything measured of one metric of one workload: one panel per mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chart {
    pub workload: String,
    pub metric: String,
    pub higher_is_better: bool,
    /// By mode name.
    pub panels: Vec<Panel>,
}

/// Narrows what [`charts`] returns; `None` keeps everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub metric: Option<String>,
    pub mode: Option<String>,
}

/// A colour slot per label, in label order. A label takes the colour of an earlier label of
/// the same profile whose runs come from other sources (the projector stores
/// `<profile>@<machine>` next to the measured `<profile>`): a profile keeps its colour whether
/// measured or projected, which the line and marker styles tell apart. Every other label gets
/// a colour of its own.
pub fn colour_slots(res: &Results) -> Vec<usize> {
    let profile = |l: &String| {
        res.runs
            .iter()
            .find(|r| &r.meta.label == l)
            .and_then(|r| r.meta.profile.as_deref())
    };
    let sources = |l: &String| -> BTreeSet<Source> {
        res.runs
            .iter()
            .filter(|r| &r.meta.label == l)
            .map(Source::of)
            .collect()
    };
    let mut slots: Vec<usize> = Vec::new();
    let mut next = 0;
    for (i, l) in res.labels.iter().enumerate() {
        let shared = profile(l).and_then(|p| {
            (0..i).find(|&j| {
                profile(&res.labels[j]) == Some(p)
                    && sources(l).is_disjoint(&sources(&res.labels[j]))
                    && !slots[j + 1..i].contains(&slots[j])
            })
        });
        slots.push(match shared {
            Some(j) => slots[j],
            None => {
                next += 1;
                next - 1
            }
        });
    }
    slots
}

/// The charts of the selected results: one per (workload, metric), workloads in the order the
/// sample sets first name them and metrics in compare's natural order (as compare orders its
/// rows); sets of labels not selected are ignored.
pub fn charts(res: &Results, f: &Filter) -> Vec<Chart> {
    let source_of: HashMap<i64, Source> = res.runs.iter().map(|r| (r.id, Source::of(r))).collect();
    let slots = colour_slots(res);
    type Key<'a> = (&'a str, &'a str, bool);
    // (workload, metric, higher) -> mode -> (label index, source) -> tasks -> pooled set
    type Curves = BTreeMap<(usize, Source), BTreeMap<u32, (Summary, Vec<Summary>)>>;
    let mut order: Vec<Key> = Vec::new();
    let mut groups: HashMap<Key, BTreeMap<&str, Curves>> = HashMap::new();
    for s in &res.sets {
        let Some(label_index) = res.labels.iter().position(|l| *l == s.label) else {
            continue;
        };
        if s.summary.n() == 0
            || f.metric.as_ref().is_some_and(|m| *m != s.key.metric)
            || f.mode.as_ref().is_some_and(|m| *m != s.key.mode)
        {
            continue;
        }
        let source = source_of.get(&s.run_id).cloned().unwrap_or(Source {
            origin: s.origin,
            machine: None,
        });
        let key = (
            s.workload.as_str(),
            s.key.metric.as_str(),
            s.key.higher_is_better,
        );
        if !order.contains(&key) {
            order.push(key);
        }
        let pooled = groups
            .entry(key)
            .or_default()
            .entry(&s.key.mode)
            .or_default()
            .entry((label_index, source))
            .or_default()
            .entry(s.key.tasks)
            .or_default();
        pooled.0.merge(&s.summary);
        pooled.1.extend(s.repeats.iter().map(|(_, r)| *r));
    }
    // Workloads in the order the sets first name them; within one, metrics in compare's
    // natural order (send-128 before send-1024), which the store's text order is not.
    let workloads: Vec<&str> = order.iter().fold(Vec::new(), |mut w, k| {
        if !w.contains(&k.0) {
            w.push(k.0);
        }
        w
    });
    order.sort_by(|a, b| {
        let pos = |w: &str| workloads.iter().position(|x| *x == w);
        pos(a.0)
            .cmp(&pos(b.0))
            .then_with(|| pagelab_bench::compare::natural_cmp(a.1, b.1))
    });
    order
        .into_iter()
        .map(|key @ (workload, metric, higher_is_better)| {
            let modes = groups.remove(&key).unwrap_or_default();
            let panels = modes
                .into_iter()
                .map(|(mode, curves)| Panel {
                    mode: mode.to_string(),
                    series: curves
                        .into_iter()
                        .map(|((label_index, source), by_tasks)| Series {
                            label: res.labels[label_index].clone(),
                            label_index,
                            colour: slots[label_index],
                            source,
                            points: by_tasks
                                .into_iter()
                                .map(|(tasks, (summary, repeats))| {
                                    let (mean, spread) = summarise(&summary, higher_is_better);
                                    Point {
                                        tasks,
                                        mean,
                                        spread,
                                        summary,
                                        repeats,
                                    }
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect();
            Chart {
                workload: workload.to_string(),
                metric: metric.to_string(),
                higher_is_better,
                panels,
            }
        })
        .collect()
}

/// One task count of a change curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub tasks: u32,
    /// Percent change of the mean against the baseline's, positive when better.
    pub pct: f64,
    /// Whether the selected rule calls the difference significant (compare's asterisks);
    /// never for projected curves, which carry an interval instead.
    pub significant: bool,
    /// Projected curves: the range of the change over every pairing of a baseline capture's
    /// mean with one of this curve's (as `compare` prints it).
    pub interval: Option<(f64, f64)>,
}

/// A label's change against its source's baseline label (see [`Panel::changes`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangeSeries {
    pub label: String,
    pub label_index: usize,
    pub colour: usize,
    pub source: Source,
    /// The label it is compared with.
    pub baseline: String,
    pub points: Vec<Change>,
}

impl Panel {
    /// Each curve's percent change against its source's baseline, at the task counts both
    /// have. Projected numbers are compared with projected ones for the same machine, never
    /// with what was measured here; a source's baseline is its first label, the report's
    /// baseline where the source has it (the projector stores its own labels,
    /// `<profile>@<machine>`, whose first is then the reference).
    pub fn changes(&self, higher_is_better: bool, rule: Significance) -> Vec<ChangeSeries> {
        self.series
            .iter()
            .filter_map(|s| {
                let base = self
                    .series
                    .iter()
                    .filter(|b| b.source == s.source)
                    .min_by_key(|b| b.label_index)?;
                if base.label_index == s.label_index {
                    return None;
                }
                let points: Vec<Change> = s
                    .points
                    .iter()
                    .filter_map(|p| {
                        let b = base.points.iter().find(|b| b.tasks == p.tasks)?;
                        let pct = if b.mean == p.mean {
                            0.0
                        } else {
                            stats::pct_change(b.mean, p.mean, higher_is_better)
                        };
                        let projected = s.source.origin == Origin::Projected;
                        pct.is_finite().then(|| Change {
                            tasks: p.tasks,
                            pct,
                            significant: !projected
                                && stats::significant_summary(
                                    &b.summary,
                                    &p.summary,
                                    higher_is_better,
                                    rule,
                                ),
                            interval: if projected {
                                compare::projected_interval(
                                    &b.repeats,
                                    &p.repeats,
                                    higher_is_better,
                                )
                            } else {
                                None
                            },
                        })
                    })
                    .collect();
                (!points.is_empty()).then(|| ChangeSeries {
                    label: s.label.clone(),
                    label_index: s.label_index,
                    colour: s.colour,
                    source: s.source.clone(),
                    baseline: base.label.clone(),
                    points,
                })
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pagelab_bench::results::{RunMeta, SampleKey, SampleRow, Status};

    pub(crate) fn run(id: i64, label: &str, origin: Origin, machine: Option<&str>) -> StoredRun {
        StoredRun {
            id,
            meta: RunMeta {
                label: label.into(),
                workload: "pft".into(),
                target: "engine".into(),
                origin,
                profile: None,
                profile_toml: None,
                host_json: None,
                machine: machine.map(str::to_string),
                experiment: None,
                pagelab_version: "0".into(),
                command: "pagelab run".into(),
            },
            status: Status::Complete,
            started: "2026-01-01T00:00:00Z".into(),
            finished: None,
            nr_samples: 0,
            owner: None,
        }
    }

    pub(crate) fn samples(
        run: &StoredRun,
        mode: &str,
        tasks: u32,
        metric: &str,
        values: &[f64],
    ) -> Vec<SampleRow> {
        values
            .iter()
            .enumerate()
            .map(|(i, &value)| SampleRow {
                run_id: run.id,
                label: run.meta.label.clone(),
                workload: run.meta.workload.clone(),
                origin: run.meta.origin,
                key: SampleKey {
                    mode: mode.into(),
                    tasks,
                    metric: metric.into(),
                    higher_is_better: !metric.starts_with("latency"),
                },
                repeat: 0,
                seq: i as u32,
                value,
            })
            .collect()
    }

    /// Two labels measured, the second also projected for a machine, in two modes.
    pub(crate) fn example() -> Results {
        let (labels, runs, samples) = example_parts();
        Results::from_samples(labels, runs, samples, &[], Significance::Interval)
    }

    /// What [`example`] is made of, for tests that change it first.
    pub(crate) fn example_parts() -> (Vec<String>, Vec<StoredRun>, Vec<SampleRow>) {
        let a = run(1, "base", Origin::Measured, None);
        let b = run(2, "new", Origin::Measured, None);
        let pa = run(3, "base", Origin::Projected, Some("big-box"));
        let pb = run(4, "new", Origin::Projected, Some("big-box"));
        let mut s = Vec::new();
        for mode in ["processes", "threads"] {
            s.extend(samples(&a, mode, 1, "faults/sec", &[100.0, 100.0, 100.0]));
            s.extend(samples(&a, mode, 2, "faults/sec", &[190.0, 200.0, 210.0]));
            s.extend(samples(&b, mode, 1, "faults/sec", &[110.0, 110.0, 110.0]));
            s.extend(samples(&b, mode, 2, "faults/sec", &[150.0, 250.0, 200.0]));
        }
        for t in [1, 2, 4, 8] {
            let v = 100.0 * f64::from(t);
            s.extend(samples(&pa, "threads", t, "faults/sec", &[v, v]));
            s.extend(samples(
                &pb,
                "threads",
                t,
                "faults/sec",
                &[v * 0.9, v * 0.9],
            ));
        }
        (vec!["base".into(), "new".into()], vec![a, b, pa, pb], s)
    }

    #[test]
    fn curves_are_split_by_source_and_summarised_as_mmtests_does() {
        let c = charts(&example(), &Filter::default());
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!(
            (c.workload.as_str(), c.metric.as_str()),
            ("pft", "faults/sec")
        );
        let modes: Vec<&str> = c.panels.iter().map(|p| p.mode.as_str()).collect();
        assert_eq!(modes, ["processes", "threads"]);
        let threads = &c.panels[1];
        let names: Vec<(String, String)> = threads
            .series
            .iter()
            .map(|s| (s.label.clone(), s.source.describe()))
            .collect();
        assert_eq!(
            names,
            [
                ("base".into(), "measured".into()),
                ("base".into(), "projected for big-box".into()),
                ("new".into(), "measured".into()),
                ("new".into(), "projected for big-box".into()),
            ]
        );
        // new, 2 tasks: [150, 250, 200] -> Hmean 3 / (1/150 + 1/250 + 1/200) = 191.49
        let p = &threads.series[2].points[1];
        assert_eq!(p.tasks, 2);
        assert!((p.mean - 3.0 / (1.0 / 150.0 + 1.0 / 250.0 + 1.0 / 200.0)).abs() < 1e-9);
        assert!((p.spread - stats::hstddev(&[150.0, 250.0, 200.0])).abs() < 1e-9);
        assert_eq!(threads.series[1].points.len(), 4);
    }

    /// Sets that name netpipe-like sizes in text order (the store's) give charts in size order.
    #[test]
    fn charts_order_metrics_with_numbers_as_numbers() {
        let (labels, runs, _) = example_parts();
        let mut s = Vec::new();
        for m in ["send-1024", "send-128", "send-16384", "send-64"] {
            s.extend(samples(&runs[0], "threads", 1, m, &[1.0, 2.0]));
        }
        let r = Results::from_samples(labels, runs, s, &[], Significance::Interval);
        let metrics: Vec<String> = charts(&r, &Filter::default())
            .into_iter()
            .map(|c| c.metric)
            .collect();
        assert_eq!(metrics, ["send-64", "send-128", "send-1024", "send-16384"]);
    }

    #[test]
    fn filters_narrow_to_one_metric_and_mode() {
        let (labels, runs, mut s) = example_parts();
        s.extend(samples(
            &runs[0],
            "threads",
            1,
            "latency-p99-us",
            &[5.0, 7.0],
        ));
        let r = Results::from_samples(labels, runs, s, &[], Significance::Interval);
        let all = charts(&r, &Filter::default());
        assert_eq!(all.len(), 2);
        assert!(!all[1].higher_is_better);
        // Times are summarised by Amean and Stddev.
        let p = &all[1].panels[0].series[0].points[0];
        assert_eq!((p.mean, p.spread), (6.0, 2f64.sqrt()));
        let f = Filter {
            metric: Some("faults/sec".into()),
            mode: Some("threads".into()),
        };
        let one = charts(&r, &f);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].panels.len(), 1);
        assert_eq!(one[0].panels[0].mode, "threads");
        let none = Filter {
            metric: Some("nope".into()),
            mode: None,
        };
        assert!(charts(&r, &none).is_empty());
    }

    #[test]
    fn changes_compare_like_with_like_and_use_compares_convention() {
        let r = example();
        let c = charts(&r, &Filter::default());
        let ch = c[0].panels[1].changes(true, Significance::Interval);
        assert_eq!(ch.len(), 2);
        assert_eq!(ch[0].source, Source::measured());
        // 1 task: 110 against 100 is +10%, and with no spread on either side significant.
        assert!((ch[0].points[0].pct - 10.0).abs() < 1e-9);
        assert!(ch[0].points[0].significant);
        // 2 tasks: the spread overlaps: not significant.
        assert!(!ch[0].points[1].significant);
        // Projected against projected for the same machine: -10% at every task count.
        assert_eq!(ch[1].source.describe(), "projected for big-box");
        assert_eq!(ch[1].points.len(), 4);
        for p in &ch[1].points {
            assert!((p.pct + 10.0).abs() < 1e-9, "{p:?}");
            // No spread either side, yet no asterisk: a projection is never tested for
            // significance; its interval (one capture a side here) is the change itself.
            assert!(!p.significant, "{p:?}");
            let (lo, hi) = p.interval.unwrap();
            assert!(
                (lo + 10.0).abs() < 1e-9 && (hi + 10.0).abs() < 1e-9,
                "{p:?}"
            );
        }
        assert_eq!(ch[1].baseline, "base");
        // Lower is better: a smaller time is a positive change.
        let t = Panel {
            mode: "threads".into(),
            series: vec![
                Series {
                    label: "a".into(),
                    label_index: 0,
                    colour: 0,
                    source: Source::measured(),
                    points: vec![Point {
                        tasks: 1,
                        mean: 10.0,
                        spread: 0.0,
                        summary: Summary::of(&[10.0]),
                        repeats: Vec::new(),
                    }],
                },
                Series {
                    label: "b".into(),
                    label_index: 1,
                    colour: 1,
                    source: Source::measured(),
                    points: vec![Point {
                        tasks: 1,
                        mean: 8.0,
                        spread: 0.0,
                        summary: Summary::of(&[8.0]),
                        repeats: Vec::new(),
                    }],
                },
            ],
        };
        let ch = t.changes(false, Significance::TTest);
        assert!((ch[0].points[0].pct - 20.0).abs() < 1e-9);
        // One sample a side is never significant, as in compare.
        assert!(!ch[0].points[0].significant);
    }

    /// The projector's own labels (`<profile>@<machine>`): the first of them is the reference
    /// of the others, as the report's baseline has no projected numbers.
    #[test]
    fn a_source_without_the_baseline_compares_against_its_own_first_label() {
        let mut r = example();
        r.labels = vec![
            "base".into(),
            "new".into(),
            "base@big-box".into(),
            "new@big-box".into(),
        ];
        for run in &mut r.runs {
            if run.meta.origin == Origin::Projected {
                run.meta.label += "@big-box";
            }
        }
        for s in &mut r.sets {
            if s.origin == Origin::Projected {
                s.label += "@big-box";
            }
        }
        for run in &mut r.runs {
            run.meta.profile = Some(run.meta.label.trim_end_matches("@big-box").to_string());
        }
        // A profile keeps its colour across sources.
        assert_eq!(colour_slots(&r), [0, 1, 0, 1]);
        let c = charts(&r, &Filter::default());
        let ch = c[0].panels[1].changes(true, Significance::Interval);
        let got: Vec<(&str, &str)> = ch
            .iter()
            .map(|c| (c.label.as_str(), c.baseline.as_str()))
            .collect();
        assert_eq!(got, [("new", "base"), ("new@big-box", "base@big-box")]);
        assert!((ch[1].points[3].pct + 10.0).abs() < 1e-9);
    }

    #[test]
    fn labels_of_one_profile_from_the_same_source_keep_their_own_colours() {
        let mut r = example();
        // base and new both ran the same profile, here: two colours.
        for run in &mut r.runs {
            run.meta.profile = Some("linux-6.7".into());
        }
        assert_eq!(colour_slots(&r), [0, 1]);
        // Without profiles (host kernel, imports) every label has its own.
        r.labels.push("other".into());
        assert_eq!(colour_slots(&r), [0, 1, 2]);
    }

    #[test]
    fn sources_order_and_describe_themselves() {
        let m = Source::measured();
        let i = Source {
            origin: Origin::Imported,
            machine: None,
        };
        let p = Source {
            origin: Origin::Projected,
            machine: Some("x".into()),
        };
        assert!(m < i && i < p);
        assert_eq!(i.describe(), "imported");
        let lab = Source {
            origin: Origin::Imported,
            machine: Some("lab".into()),
        };
        assert_eq!(lab.describe(), "imported from lab");
        assert_eq!(p.describe(), "projected for x");
        let r = run(9, "l", Origin::Measured, Some("ignored"));
        assert_eq!(Source::of(&r), m);
    }

    /// A projected curve's change carries the range over its captures (stored as repeats): two
    /// captures of `new` at 80 and 120 against `base` at 100 give -20% to +20%.
    #[test]
    fn projected_changes_carry_the_captures_range() {
        let pa = run(3, "base", Origin::Projected, Some("big-box"));
        let pb = run(4, "new", Origin::Projected, Some("big-box"));
        let mut s = samples(&pa, "threads", 4, "faults/sec", &[100.0, 100.0]);
        for (r, v) in [80.0, 120.0].into_iter().enumerate() {
            for mut x in samples(&pb, "threads", 4, "faults/sec", &[v, v]) {
                x.repeat = r as u32;
                x.seq += 2 * r as u32;
                s.push(x);
            }
        }
        let res = Results::from_samples(
            vec!["base".into(), "new".into()],
            vec![pa, pb],
            s,
            &[],
            Significance::Interval,
        );
        let c = charts(&res, &Filter::default());
        let ch = c[0].panels[0].changes(true, Significance::Interval);
        let p = &ch[0].points[0];
        assert_eq!(p.interval, Some((-20.0, 20.0)), "{p:?}");
        assert!(!p.significant);
    }
}
