//! The engine's counters as tables: why a profile scales the way it does. Lock statistics per
//! lock class (how often each lock was taken, how often it had to wait, and how long), the
//! per-VMA lock's fallbacks to `mmap_lock` and the per-CPU page lists' refills and drains side
//! by side per label, then every other event.
//!
//! Counters are stored per measured window (`CounterRow`: run, mode, tasks, repeat); a table
//! cell is the mean over the windows of that label, task count and mode, so that labels with
//! different numbers of runs or repeats read alike. The store sums them per run
//! ([`CounterTotal`]: the sum and the number of windows), so the tables need one row per run and
//! counter, not per window.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use pagelab_bench::store::CounterTotal;
use serde::Serialize;

use crate::Results;
use crate::series::Source;

/// The events shown first, in this order: the per-VMA lock's outcomes and the per-CPU page
/// lists' traffic with the zone.
pub const KEY_EVENTS: &[&str] = &[
    "vma_lock_success",
    "vma_lock_abort",
    "vma_lock_retry",
    "vma_lock_miss",
    "fault_mmap_lock",
    "pcp_refill",
    "pcp_drain",
    "pcp_drain_all",
    "pcp_trylock_fail",
];

/// One table of one (source, workload, mode).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Table {
    pub heading: String,
    pub workload: String,
    pub mode: String,
    /// The labels, one column group each.
    pub labels: Vec<String>,
    /// The columns within each group.
    pub sub: Vec<String>,
    pub rows: Vec<Row>,
    /// Shown folded: a long table of secondary counters.
    pub folded: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub name: String,
    pub tasks: u32,
    /// Per label, per sub-column, formatted; `-` where the label has no such counter.
    pub cells: Vec<Vec<String>>,
}

/// The counter tables of one source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Counters {
    pub source: Source,
    /// Lock classes, then key events, then other events (those with a non-zero mean), per
    /// (workload, mode).
    pub tables: Vec<Table>,
}

/// (workload, mode) -> name -> tasks -> label index -> mean over windows.
type Means = BTreeMap<(String, String), BTreeMap<String, BTreeMap<u32, BTreeMap<usize, f64>>>>;

/// The counter tables of the selected runs, one [`Counters`] per source that has counters.
pub fn tables(res: &Results) -> Vec<Counters> {
    let runs: HashMap<i64, (usize, Source, &str)> = res
        .runs
        .iter()
        .filter_map(|r| {
            let i = res.labels.iter().position(|l| *l == r.meta.label)?;
            Some((r.id, (i, Source::of(r), r.meta.workload.as_str())))
        })
        .collect();
    // source -> (workload, mode) -> name -> tasks -> label -> (sum, windows)
    type Acc<'a> = BTreeMap<
        Source,
        BTreeMap<(String, String), BTreeMap<String, BTreeMap<u32, BTreeMap<usize, (f64, u64)>>>>,
    >;
    let mut acc: Acc = BTreeMap::new();
    for c in &res.counters {
        let c: &CounterTotal = c;
        let Some((label, source, workload)) = runs.get(&c.run_id) else {
            continue;
        };
        acc.entry(source.clone())
            .or_default()
            .entry((workload.to_string(), c.mode.clone()))
            .or_default()
            .entry(c.name.clone())
            .or_default()
            .entry(c.tasks)
            .or_default()
            .entry(*label)
            .and_modify(|(sum, n)| {
                *sum += c.sum;
                *n += c.windows;
            })
            .or_insert((c.sum, c.windows));
    }
    acc.into_iter()
        .map(|(source, groups)| {
            let means: Means = groups
                .into_iter()
                .map(|(k, names)| {
                    let names = names
                        .into_iter()
                        .map(|(n, by_tasks)| {
                            let by_tasks = by_tasks
                                .into_iter()
                                .map(|(t, by_label)| {
                                    let by_label = by_label
                                        .into_iter()
                                        .map(|(l, (sum, n))| (l, sum / n as f64))
                                        .collect();
                                    (t, by_label)
                                })
                                .collect();
                            (n, by_tasks)
                        })
                        .collect();
                    (k, names)
                })
                .collect();
            Counters {
                tables: build(&means, &res.labels),
                source,
            }
        })
        .collect()
}

fn build(means: &Means, labels: &[String]) -> Vec<Table> {
    let mut out = Vec::new();
    for ((workload, mode), names) in means {
        // Only the labels that have counters here get a column group.
        let present: BTreeSet<usize> = names
            .values()
            .flat_map(|t| t.values().flat_map(|l| l.keys().copied()))
            .collect();
        let present: Vec<usize> = present.into_iter().collect();
        let cols: Vec<String> = present.iter().map(|&i| labels[i].clone()).collect();
        let table = |heading: &str, sub: &[&str], rows: Vec<Row>| Table {
            heading: heading.to_string(),
            workload: workload.clone(),
            mode: mode.clone(),
            labels: cols.clone(),
            sub: sub.iter().map(|s| s.to_string()).collect(),
            rows,
            folded: false,
        };
        let value = |name: &str, tasks: u32, label: usize| -> Option<f64> {
            names.get(name)?.get(&tasks)?.get(&label).copied()
        };
        // Locks: lock:<class>:acquisitions|contended|wait_ns, and for projected rows
        // hold_ns (lock_stat's holdtime-total; the engine's own counters do not time holds).
        let classes: BTreeSet<&str> = names
            .keys()
            .filter_map(|n| n.strip_prefix("lock:")?.rsplit_once(':').map(|(c, _)| c))
            .collect();
        let holds = classes
            .iter()
            .any(|c| names.contains_key(&format!("lock:{c}:hold_ns")));
        let mut rows = Vec::new();
        for class in &classes {
            let tasks: BTreeSet<u32> = ["acquisitions", "contended", "wait_ns"]
                .iter()
                .filter_map(|q| names.get(&format!("lock:{class}:{q}")))
                .flat_map(|t| t.keys().copied())
                .collect();
            for t in tasks {
                let cells = present
                    .iter()
                    .map(|&l| {
                        let acq = value(&format!("lock:{class}:acquisitions"), t, l);
                        let cont = value(&format!("lock:{class}:contended"), t, l);
                        let wait = value(&format!("lock:{class}:wait_ns"), t, l);
                        let mut cells = vec![
                            acq.map_or("-".into(), count),
                            match (cont, acq) {
                                (Some(c), Some(a)) if a > 0.0 => {
                                    format!("{} ({:.1}%)", count(c), c * 100.0 / a)
                                }
                                (Some(c), _) => count(c),
                                _ => "-".into(),
                            },
                            wait.map_or("-".into(), |w| format!("{:.3}", w / 1e6)),
                        ];
                        if holds {
                            let hold = value(&format!("lock:{class}:hold_ns"), t, l);
                            cells.push(hold.map_or("-".into(), |h| format!("{:.3}", h / 1e6)));
                        }
                        cells
                    })
                    .collect();
                rows.push(Row {
                    name: class.to_string(),
                    tasks: t,
                    cells,
                });
            }
        }
        if !rows.is_empty() {
            let sub: &[&str] = if holds {
                &["acquisitions", "contended", "wait ms", "hold ms"]
            } else {
                &["acquisitions", "contended", "wait ms"]
            };
            out.push(table("Lock contention per lock class", sub, rows));
        }
        let event_rows = |pick: &dyn Fn(&str) -> bool| -> Vec<Row> {
            let mut events: Vec<&str> = names
                .keys()
                .filter_map(|n| n.strip_prefix("event:"))
                .filter(|e| pick(e))
                .collect();
            events.sort_by_key(|e| (KEY_EVENTS.iter().position(|k| k == e), *e));
            let mut rows = Vec::new();
            for e in events {
                let key = format!("event:{e}");
                for (&t, by_label) in &names[&key] {
                    if !KEY_EVENTS.contains(&e) && by_label.values().all(|v| *v == 0.0) {
                        continue;
                    }
                    rows.push(Row {
                        name: e.to_string(),
                        tasks: t,
                        cells: present
                            .iter()
                            .map(|&l| vec![value(&key, t, l).map_or("-".into(), count)])
                            .collect(),
                    });
                }
            }
            rows
        };
        let key_rows = event_rows(&|e| KEY_EVENTS.contains(&e));
        if !key_rows.is_empty() {
            out.push(table(
                "VMA-lock fallbacks and per-CPU list refills and drains",
                &["per window"],
                key_rows,
            ));
        }
        let other_rows = event_rows(&|e| !KEY_EVENTS.contains(&e));
        if !other_rows.is_empty() {
            out.push(Table {
                folded: true,
                ..table("Other engine events", &["per window"], other_rows)
            });
        }
    }
    out
}

/// A count with thousands separators; fractional means keep one decimal.
fn count(v: f64) -> String {
    if !v.is_finite() {
        return "NaN".into();
    }
    let whole = v.trunc();
    let frac = v - whole;
    let digits = format!("{}", whole.abs() as u64);
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    if frac.abs() >= 0.05 {
        format!(
            "{sign}{grouped}.{}",
            ((frac.abs() * 10.0).round() as u64).min(9)
        )
    } else {
        format!("{sign}{grouped}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::tests::{example_parts, run};
    use pagelab_bench::results::{CounterRow, Origin};
    use pagelab_bench::stats::Significance;

    fn counter(run: i64, tasks: u32, repeat: u32, name: &str, value: f64) -> CounterRow {
        CounterRow {
            run_id: run,
            mode: "threads".into(),
            tasks,
            repeat,
            name: name.into(),
            value,
        }
    }

    /// Projected rows carry lock_stat's hold time: the lock table gains a hold column, with
    /// `-` for a label that has none (a measured run).
    #[test]
    fn projected_hold_times_get_a_column() {
        let (labels, runs, samples) = example_parts();
        let counters = [
            counter(1, 2, 0, "lock:zone:acquisitions", 1000.0),
            counter(1, 2, 0, "lock:zone:hold_ns", 1_000_000.0),
            counter(1, 2, 1, "lock:zone:acquisitions", 3000.0),
            counter(1, 2, 1, "lock:zone:hold_ns", 3_000_000.0),
            counter(2, 2, 0, "lock:zone:acquisitions", 500.0),
        ];
        let r = Results::from_samples(labels, runs, samples, &counters, Significance::Interval);
        let t = &tables(&r)[0].tables[0];
        assert_eq!(t.sub, ["acquisitions", "contended", "wait ms", "hold ms"]);
        assert_eq!(t.rows[0].cells[0], ["2,000", "-", "-", "2.000"]);
        assert_eq!(t.rows[0].cells[1], ["500", "-", "-", "-"]);
    }

    #[test]
    fn tables_average_windows_and_put_key_events_first() {
        let (labels, mut runs, samples) = example_parts();
        runs.push(run(7, "unselected", Origin::Measured, None));
        let counters = [
            counter(1, 2, 0, "lock:zone:acquisitions", 1000.0),
            counter(1, 2, 0, "lock:zone:contended", 100.0),
            counter(1, 2, 0, "lock:zone:wait_ns", 2_000_000.0),
            counter(1, 2, 1, "lock:zone:acquisitions", 3000.0),
            counter(1, 2, 1, "lock:zone:contended", 300.0),
            counter(1, 2, 1, "lock:zone:wait_ns", 4_000_000.0),
            counter(2, 2, 0, "lock:zone:acquisitions", 500.0),
            counter(1, 2, 0, "event:pgfault", 12345.0),
            counter(1, 2, 0, "event:pcp_drain", 7.0),
            counter(1, 2, 0, "event:vma_lock_abort", 3.0),
            counter(2, 2, 0, "event:vma_lock_abort", 0.0),
            counter(1, 2, 0, "event:oom_kill", 0.0),
            counter(7, 2, 0, "event:pgfault", 1.0),
        ];
        let r = Results::from_samples(labels, runs, samples, &counters, Significance::Interval);
        let t = tables(&r);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].source, Source::measured());
        let t = &t[0].tables;
        let headings: Vec<&str> = t.iter().map(|t| t.heading.as_str()).collect();
        assert_eq!(
            headings,
            [
                "Lock contention per lock class",
                "VMA-lock fallbacks and per-CPU list refills and drains",
                "Other engine events"
            ]
        );
        assert_eq!(t[0].labels, ["base", "new"]);
        // Two windows: acquisitions (1000 + 3000) / 2, contended 200 = 10%, wait 3 ms.
        assert_eq!(t[0].rows[0].name, "zone");
        assert_eq!(t[0].rows[0].cells[0], ["2,000", "200 (10.0%)", "3.000"]);
        assert_eq!(t[0].rows[0].cells[1], ["500", "-", "-"]);
        assert_eq!(
            t[0].sub,
            ["acquisitions", "contended", "wait ms"],
            "no hold column"
        );
        let key: Vec<(&str, &Vec<String>)> = t[1]
            .rows
            .iter()
            .map(|r| (r.name.as_str(), &r.cells[0]))
            .collect();
        assert_eq!(key[0].0, "vma_lock_abort");
        assert_eq!(key[1].0, "pcp_drain");
        assert_eq!(t[1].rows[0].cells[1], ["0"]);
        // Zero-only other events are left out; the unselected label's counters too.
        assert_eq!(t[2].rows.len(), 1);
        assert!(t[2].folded && !t[1].folded);
        assert_eq!(
            t[2].rows[0].cells,
            [vec!["12,345".to_string()], vec!["-".into()]]
        );
    }

    #[test]
    fn counts_are_grouped() {
        assert_eq!(count(0.0), "0");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(1_234_567.0), "1,234,567");
        assert_eq!(count(12.5), "12.5");
        assert_eq!(count(-1000.0), "-1,000");
    }
}
