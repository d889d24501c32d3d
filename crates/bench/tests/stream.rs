//! Comparisons and exports read from the store as streams give what the in-memory
//! implementation gave: the previous `compare::build`, which held every sample, is kept here as
//! the reference and run on the same random stores.

use std::collections::{BTreeMap, BTreeSet};

use pagelab_bench::compare::{self, Comparison};
use pagelab_bench::results::{Origin, RunMeta, SampleKey, SampleRow, Status};
use pagelab_bench::stats::{self, Significance, Summary};
use pagelab_bench::store::Store;

/// A small deterministic generator: the same stores on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() * n as f64) as usize
    }
}

fn meta(label: &str, workload: &str, origin: Origin) -> RunMeta {
    RunMeta {
        label: label.into(),
        workload: workload.into(),
        target: "engine".into(),
        origin,
        profile: None,
        profile_toml: None,
        host_json: None,
        machine: None,
        experiment: None,
        pagelab_version: "0".into(),
        command: "test".into(),
    }
}

/// A store of random runs: three labels, two workloads, two modes, a rate and a time metric,
/// several runs per label (pooled by compare), sets of 1 to 40 samples, occasional ties.
fn random_store(store: &Store, rng: &mut Rng) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..7 {
        let label = ["base", "new", "other"][rng.below(3)];
        let workload = ["pft", "page_fault1"][rng.below(2)];
        let origin = [Origin::Measured, Origin::Imported][rng.below(2)];
        let run = store.begin_run(&meta(label, workload, origin)).unwrap();
        for mode in ["processes", "threads"] {
            for tasks in [1, 4] {
                for (metric, hib) in [("faults/sec", true), ("latency-us", false)] {
                    if rng.next() < 0.2 {
                        continue;
                    }
                    let k = SampleKey {
                        mode: mode.into(),
                        tasks,
                        metric: metric.into(),
                        higher_is_better: hib,
                    };
                    let level = 10f64.powf(1.0 + rng.next() * 6.0);
                    for repeat in 0..1 + rng.below(2) as u32 {
                        let n = 1 + rng.below(40);
                        let values: Vec<f64> = (0..n)
                            .map(|_| {
                                if rng.next() < 0.1 {
                                    level // ties
                                } else {
                                    level * (0.8 + 0.4 * rng.next())
                                }
                            })
                            .collect();
                        store.add_samples(run, &k, repeat, &values).unwrap();
                    }
                }
                for repeat in 0..rng.below(3) as u32 {
                    let counters = [
                        ("event:pgfault".to_string(), (rng.below(1000) * 1000) as f64),
                        ("lock:mmap_lock:wait_ns".to_string(), rng.next() * 1e6),
                    ];
                    store
                        .add_counters(run, mode, tasks, repeat, &counters)
                        .unwrap();
                }
            }
        }
        store.finish_run(run, Status::Complete).unwrap();
        ids.push(run);
    }
    ids
}

/// The previous in-memory comparison, cell values only: (workload, mode, stat, metric, tasks)
/// -> per column (value, pct_change, significant, samples).
type Cells = Vec<Option<(f64, f64, Option<bool>, usize)>>;

fn reference(samples: &[SampleRow], labels: &[String], rule: Significance) -> Vec<(String, Cells)> {
    let best = |x: &[f64], p: u32, higher: bool| {
        if higher {
            stats::bhmean(x, p, true)
        } else {
            let mut v = x.to_vec();
            v.sort_by(f64::total_cmp);
            let k = ((x.len() as u64 * u64::from(p)) / 100).max(1) as usize;
            stats::amean(&v[..k.min(v.len())])
        }
    };
    let compute = |stat: &str, x: &[f64], higher: bool| -> f64 {
        match stat {
            "Min" => x.iter().copied().fold(f64::INFINITY, f64::min),
            "Max" => x.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            "Hmean" => stats::hmean(x),
            "Amean" => stats::amean(x),
            "Stddev" => stats::stddev(x),
            "CoeffVar" => stats::coeff_var(x),
            "HStddev" => stats::hstddev(x),
            "HCoeffVar" => stats::hcoeff_var(x),
            b => best(x, b["BHmean-".len()..].parse().unwrap(), higher),
        }
    };
    let stat_names = |higher: bool| -> Vec<&'static str> {
        if higher {
            vec![
                "Min",
                "Hmean",
                "Stddev",
                "CoeffVar",
                "HStddev",
                "HCoeffVar",
                "Max",
                "BHmean-50",
                "BHmean-95",
                "BHmean-99",
            ]
        } else {
            vec![
                "Min",
                "Amean",
                "Stddev",
                "CoeffVar",
                "Max",
                "BAmean-50",
                "BAmean-95",
                "BAmean-99",
            ]
        }
    };
    type Groups<'a> = BTreeMap<(&'a str, &'a str), BTreeMap<&'a SampleKey, Vec<Vec<f64>>>>;
    let mut groups: Groups = BTreeMap::new();
    let mut metric_order: Vec<&str> = Vec::new();
    for s in samples {
        let Some(col) = labels.iter().position(|l| l == &s.label) else {
            continue;
        };
        if !metric_order.contains(&s.key.metric.as_str()) {
            metric_order.push(&s.key.metric);
        }
        groups
            .entry((&s.workload, &s.key.mode))
            .or_default()
            .entry(&s.key)
            .or_insert_with(|| vec![Vec::new(); labels.len()])[col]
            .push(s.value);
    }
    let mut out = Vec::new();
    for ((workload, mode), keys) in groups {
        let filled = (0..labels.len())
            .filter(|&c| keys.values().any(|cols| !cols[c].is_empty()))
            .count();
        if labels.len() > 1 && filled < 2 {
            continue;
        }
        let mut keys: Vec<(&SampleKey, Vec<Vec<f64>>)> = keys.into_iter().collect();
        keys.sort_by_key(|(k, _)| {
            (
                metric_order.iter().position(|m| *m == k.metric),
                k.tasks,
                k.higher_is_better,
            )
        });
        let higher_all: BTreeSet<bool> = keys.iter().map(|(k, _)| k.higher_is_better).collect();
        for higher in higher_all.into_iter().rev() {
            for stat in stat_names(higher) {
                let spread = matches!(stat, "Stddev" | "CoeffVar" | "HStddev" | "HCoeffVar");
                let hib = !spread && higher;
                for (k, cols) in keys.iter().filter(|(k, _)| k.higher_is_better == higher) {
                    let base = &cols[0];
                    let base_v = (!base.is_empty()).then(|| compute(stat, base, higher));
                    let cells = cols
                        .iter()
                        .map(|x| {
                            if x.is_empty() {
                                return None;
                            }
                            let v = compute(stat, x, higher);
                            let pct = base_v.map_or(f64::NAN, |b| {
                                if b == v {
                                    0.0
                                } else {
                                    stats::pct_change(b, v, hib)
                                }
                            });
                            let sig = (matches!(stat, "Hmean" | "Amean") && !base.is_empty())
                                .then(|| stats::significant(base, x, higher, rule));
                            Some((v, pct, sig, x.len()))
                        })
                        .collect();
                    let name = format!("{workload} {mode} {stat} {}-{}", k.metric, k.tasks);
                    out.push((name, cells));
                }
            }
        }
    }
    out
}

fn cells_of(c: &Comparison) -> Vec<(String, Cells)> {
    let mut out = Vec::new();
    for s in &c.sections {
        for r in &s.rows {
            let name = format!(
                "{} {} {} {}-{}",
                s.workload, s.mode, r.stat, r.metric, r.tasks
            );
            let cells = r
                .cells
                .iter()
                .map(|c| {
                    c.value.map(|v| {
                        (
                            v,
                            c.pct_change.unwrap_or(f64::NAN),
                            c.significant,
                            c.samples,
                        )
                    })
                })
                .collect();
            out.push((name, cells));
        }
    }
    out
}

/// Equal to rounding, relative to the scale of the row's values.
fn close(a: f64, b: f64, scale: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * scale.max(1e-300)
}

/// The streamed comparison (summaries read as a stream, best shares sorted by SQLite) equals
/// the in-memory reference on random stores, cell by cell: values, changes, verdicts, counts.
#[test]
fn streamed_comparisons_match_the_in_memory_reference() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut compared = 0;
    for round in 0..12 {
        let store = Store::open(&dir.path().join(format!("{round}.db"))).unwrap();
        let ids = random_store(&store, &mut rng);
        let samples = store.samples(&ids).unwrap();
        let present: Vec<String> = ["base", "new", "other"]
            .iter()
            .filter(|l| samples.iter().any(|s| s.label == **l))
            .map(|l| l.to_string())
            .collect();
        for rule in [Significance::Interval, Significance::TTest] {
            for labels in [present.clone(), present[..1].to_vec()] {
                let want = reference(&samples, &labels, rule);
                let Ok(got) = compare::from_store(&store, &ids, &labels, rule) else {
                    assert!(
                        want.is_empty(),
                        "streamed refused what the reference compares"
                    );
                    continue;
                };
                let got = cells_of(&got);
                let names = |v: &[(String, Cells)]| v.iter().map(|(n, _)| n.clone()).collect();
                let (gn, wn): (Vec<String>, Vec<String>) = (names(&got), names(&want));
                assert_eq!(gn, wn, "rows differ");
                for ((name, g), (_, w)) in got.iter().zip(&want) {
                    for (gc, wc) in g.iter().zip(w) {
                        let (Some(gc), Some(wc)) = (gc, wc) else {
                            assert_eq!(gc.is_some(), wc.is_some(), "{name}");
                            continue;
                        };
                        let scale = w.iter().flatten().map(|c| c.0.abs()).fold(0.0, f64::max);
                        assert!(close(gc.0, wc.0, scale), "{name}: {gc:?} vs {wc:?}");
                        assert!(close(gc.1, wc.1, 100.0), "{name}: {gc:?} vs {wc:?}");
                        assert_eq!((gc.2, gc.3), (wc.2, wc.3), "{name}");
                        compared += 1;
                    }
                }
                // Samples in memory go through the same path and agree as well.
                let mem = cells_of(&compare::build(&samples, &labels, rule).unwrap());
                assert_eq!(mem.len(), got.len());
                for ((name, m), (_, g)) in mem.iter().zip(&got) {
                    for (mc, gc) in m.iter().zip(g) {
                        if let (Some(mc), Some(gc)) = (mc, gc) {
                            assert!(close(mc.0, gc.0, mc.0.abs()), "{name}: {mc:?} vs {gc:?}");
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 2000, "{compared} cells compared");
}

/// Reading row by row gives exactly what `samples` returns; summaries per set and the best
/// shares agree with the samples.
#[test]
fn streams_agree_with_the_samples() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut rng = Rng(7);
    let ids = random_store(&store, &mut rng);
    let all = store.samples(&ids).unwrap();
    let mut streamed = Vec::new();
    store
        .for_each_sample(&ids, |s| {
            streamed.push(s.clone());
            Ok::<(), pagelab_bench::store::StoreError>(())
        })
        .unwrap();
    assert_eq!(streamed, all);
    let sets = store.sample_stats(&ids).unwrap();
    assert_eq!(sets, compare::summarise(&all));
    for set in &sets {
        let mut v: Vec<f64> = all
            .iter()
            .filter(|s| s.run_id == set.run_id && s.key == set.key)
            .map(|s| s.value)
            .collect();
        v.sort_by(f64::total_cmp);
        if set.key.higher_is_better {
            v.reverse();
        }
        let n = v.len() as u64;
        let lens = [1, stats::best_len(n, 50), n, n + 5];
        let best = store.best_samples(&[set.run_id], &set.key, &lens).unwrap();
        for (b, &len) in best.iter().zip(&lens) {
            let want = Summary::of(&v[..(len.min(n)) as usize]);
            assert_eq!(b.n(), want.n());
            assert!(close(b.amean(), want.amean(), want.amean().abs()));
            assert!(close(b.hmean(), want.hmean(), want.hmean().abs()));
        }
    }
    // Counters summed over their windows in SQL, as summing the rows gives.
    let rows = store.counters(&ids).unwrap();
    let totals = store.counter_totals(&ids).unwrap();
    assert!(!totals.is_empty());
    let mut windows = 0;
    for t in &totals {
        let mine: Vec<f64> = rows
            .iter()
            .filter(|c| {
                (c.run_id, c.mode.as_str(), c.tasks, c.name.as_str())
                    == (t.run_id, t.mode.as_str(), t.tasks, t.name.as_str())
            })
            .map(|c| c.value)
            .collect();
        assert_eq!(t.windows, mine.len() as u64);
        assert!(close(t.sum, mine.iter().sum(), t.sum.abs()));
        windows += t.windows;
    }
    assert_eq!(windows, rows.len() as u64);
    assert!(store.counter_totals(&[]).unwrap().is_empty());
}
