//! What a posting says about *mechanisms*, checked against the projection's lock statistics.
//!
//! A published table gives throughput, and a projection can match throughput for the wrong
//! reason (a lock that is not the real bottleneck standing in for one that is). Postings often
//! say which lock limited them: the lru_lock series names `mmap_sem` as the threads case's
//! bottleneck and measured `lru_lock`'s wait time with lock_stat; the per-VMA lock series'
//! tester calls one large VMA its worst case, every fault taking that VMA's lock. Each such sentence
//! is a [`Claim`] of its table ([`crate::validate::Published::claims`]), and `pagelab validate`
//! checks it on the same projected rows it compares, with the lock statistics every replay
//! keeps ([`crate::project::ProjRow::lock_stat`]). A claim that the projection contradicts says
//! where the model is right for a wrong reason, or wrong for a known one.
//!
//! Claims are quoted from the posting, with where it says them; a claim with a number ("nearly
//! tripled") carries the band read into it, stated beside it, so that nobody has to trust the
//! reading.

use pagelab_workloads::Mode;
use serde::Serialize;

use crate::project::ProjRow;

/// How a claim is checked.
#[derive(Debug)]
pub enum Check {
    /// In every listed row of every listed profile, the lock or line class `class` is the one
    /// that cost the CPUs most per operation: its waits for the lock plus its lines' transfers
    /// ([`crate::project::LockStatLine`]).
    Costliest {
        profiles: &'static [&'static str],
        mode: Mode,
        tasks: &'static [usize],
        class: &'static str,
    },
    /// The total wait on `class` (per second of the run: wait per operation times operations
    /// per second, what lock_stat's `waittime-total` grows with over a fixed-length run) grows
    /// from `from` to `to` tasks by a factor within `[low, high]`.
    WaitGrowth {
        profile: &'static str,
        mode: Mode,
        from: usize,
        to: usize,
        class: &'static str,
        low: f64,
        high: f64,
    },
    /// In every listed row, `profile` waits less per operation on `class` than `than` does:
    /// what a patch that says it relieves that lock changes.
    LessWait(LessWait),
}

/// A kernel of the series waits less on a class than the kernel it builds on.
#[derive(Debug)]
pub struct LessWait {
    pub profile: &'static str,
    pub than: &'static str,
    pub mode: Mode,
    pub tasks: &'static [usize],
    pub class: &'static str,
}

/// One sentence of a posting about what limited its kernels.
#[derive(Debug)]
pub struct Claim {
    /// What the posting says (paraphrased closely; the source has the words).
    pub says: &'static str,
    /// Where: the message and, for a number, the band it is read as.
    pub source: &'static str,
    pub check: Check,
}

/// What the projection says of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// On every capture's replay.
    Agrees,
    /// On none.
    Disagrees,
    /// On some captures and not on others: the capture noise decides, the model does not.
    Mixed,
    /// A row the check needs was not projected (or projected no figure).
    NotChecked,
}

/// A claim checked on one capture's replay alone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureVerdict {
    /// `None`: a row the check needs is missing from this capture's replays.
    pub agrees: Option<bool>,
    /// The check's figure where it has one (a growth factor, `x2.19`).
    pub figure: Option<String>,
}

/// One claim's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClaimVerdict {
    pub says: String,
    pub source: String,
    /// What the projection shows, row by row, every capture's replay merged.
    pub projected: String,
    /// The check on each capture's replay alone (in capture order): the same noise a change's
    /// captures' range shows.
    pub per_capture: Vec<CaptureVerdict>,
    pub verdict: Verdict,
}

impl ClaimVerdict {
    pub fn verdict(&self) -> &'static str {
        match self.verdict {
            Verdict::Agrees => "agrees",
            Verdict::Disagrees => "DISAGREES",
            Verdict::Mixed => "MIXED",
            Verdict::NotChecked => "not checked",
        }
    }

    /// The captures' verdicts, `agrees, DISAGREES (x1.52)`.
    pub fn per_capture_text(&self) -> String {
        self.per_capture
            .iter()
            .map(|CaptureVerdict { agrees, figure }| {
                let v = match agrees {
                    Some(true) => "agrees",
                    Some(false) => "DISAGREES",
                    None => "not checked",
                };
                match figure {
                    Some(f) => format!("{v} ({f})"),
                    None => v.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The mean throughput of a row over its captures (per second; the first `/sec` metric).
fn rate(r: &ProjRow) -> Option<f64> {
    let metric = r
        .captures
        .first()?
        .metrics
        .iter()
        .map(|(m, _, _)| m.as_str())
        .find(|m| m.ends_with("/sec"))?
        .to_string();
    let v = r.values(&metric);
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The wait per operation on `class` in a row, ns (0 when the class never waited there).
fn wait_per_op(r: &ProjRow, class: &str) -> f64 {
    r.lock_stat()
        .into_iter()
        .find(|l| l.class == class)
        .map_or(0.0, |l| l.wait_ns_per_op)
}

/// The verdict from the merged check and the captures': agreement or disagreement only when
/// the merged figures and every capture's say the same (with no capture, the merged ones
/// alone); anything else is the capture noise deciding.
fn verdict_of(merged: Option<bool>, per_capture: impl Iterator<Item = Option<bool>>) -> Verdict {
    let Some(m) = merged else {
        return Verdict::NotChecked;
    };
    if per_capture.into_iter().all(|a| a == Some(m)) {
        if m {
            Verdict::Agrees
        } else {
            Verdict::Disagrees
        }
    } else {
        Verdict::Mixed
    }
}

impl Claim {
    /// Checks the claim on the projected rows `row(profile, mode, tasks)` gives: on every
    /// capture's replay merged, and on each capture's alone.
    pub fn check(&self, row: &dyn Fn(&str, Mode, usize) -> Option<ProjRow>) -> ClaimVerdict {
        let (projected, merged, _) = self.evaluate(row);
        let captures = self
            .rows()
            .iter()
            .filter_map(|&(p, m, t)| row(p, m, t).map(|r| r.captures.len()))
            .min()
            .unwrap_or(0);
        let per_capture: Vec<CaptureVerdict> = (0..captures)
            .map(|k| {
                let (_, a, fig) = self.evaluate(&|p, m, t| {
                    row(p, m, t).map(|mut r| {
                        r.captures = r.captures.into_iter().skip(k).take(1).collect();
                        r
                    })
                });
                CaptureVerdict {
                    agrees: a,
                    figure: fig,
                }
            })
            .collect();
        let verdict = verdict_of(merged, per_capture.iter().map(|c| c.agrees));
        ClaimVerdict {
            says: self.says.to_string(),
            source: self.source.to_string(),
            projected,
            per_capture,
            verdict,
        }
    }

    /// The rows the check reads: (profile, mode, tasks).
    fn rows(&self) -> Vec<(&'static str, Mode, usize)> {
        match &self.check {
            Check::Costliest {
                profiles,
                mode,
                tasks,
                ..
            } => profiles
                .iter()
                .flat_map(|p| tasks.iter().map(move |&t| (*p, *mode, t)))
                .collect(),
            Check::WaitGrowth {
                profile,
                mode,
                from,
                to,
                ..
            } => vec![(*profile, *mode, *from), (*profile, *mode, *to)],
            Check::LessWait(l) => [l.profile, l.than]
                .iter()
                .flat_map(|p| l.tasks.iter().map(move |&t| (*p, l.mode, t)))
                .collect(),
        }
    }

    /// The check on the rows `row` gives: what they show, whether that agrees (`None`: a row
    /// is missing), and the check's one figure where it has one.
    fn evaluate(
        &self,
        row: &dyn Fn(&str, Mode, usize) -> Option<ProjRow>,
    ) -> (String, Option<bool>, Option<String>) {
        let mut figure = None;
        let (projected, agrees) = match &self.check {
            Check::Costliest {
                profiles,
                mode,
                tasks,
                class,
            } => {
                let mut parts = Vec::new();
                let mut all = Some(true);
                for p in *profiles {
                    for &t in *tasks {
                        let Some(r) = row(p, *mode, t) else {
                            parts.push(format!("{p} {mode} {t}: not projected"));
                            all = None;
                            continue;
                        };
                        let stat = r.lock_stat();
                        let top = stat.iter().max_by(|a, b| {
                            (a.wait_ns_per_op + a.line_ns_per_op)
                                .total_cmp(&(b.wait_ns_per_op + b.line_ns_per_op))
                        });
                        match top.filter(|l| l.wait_ns_per_op + l.line_ns_per_op > 0.0) {
                            Some(l) => {
                                parts.push(format!(
                                    "{p} {mode} {t}: {} ({:.0} ns/op)",
                                    l.class,
                                    l.wait_ns_per_op + l.line_ns_per_op
                                ));
                                if l.class != *class {
                                    all = all.map(|_| false);
                                }
                            }
                            None => {
                                parts.push(format!("{p} {mode} {t}: no lock cost"));
                                all = all.map(|_| false);
                            }
                        }
                    }
                }
                (
                    format!("costliest class per row: {}", parts.join("; ")),
                    all,
                )
            }
            Check::WaitGrowth {
                profile,
                mode,
                from,
                to,
                class,
                low,
                high,
            } => {
                let total = |t: usize| -> Option<f64> {
                    let r = row(profile, *mode, t)?;
                    Some(wait_per_op(&r, class) * rate(&r)? / 1e9)
                };
                match (total(*from), total(*to)) {
                    (Some(a), Some(b)) if a > 0.0 && b.is_finite() => {
                        let g = b / a;
                        figure = Some(format!("x{g:.2}"));
                        (
                            format!(
                                "{class} wait {a:.3} s/s at {from} {mode}, {b:.3} s/s at {to}: x{g:.2} (band {low}..{high})"
                            ),
                            Some((*low..=*high).contains(&g)),
                        )
                    }
                    (Some(a), Some(b)) => (
                        format!(
                            "{class} wait {a:.3} s/s at {from} {mode}, {b:.3} s/s at {to}: no growth to measure"
                        ),
                        Some(false),
                    ),
                    _ => (
                        format!("{profile} {mode} {from} or {to}: not projected"),
                        None,
                    ),
                }
            }
            Check::LessWait(LessWait {
                profile,
                than,
                mode,
                tasks,
                class,
            }) => {
                let wait = |p: &str, t: usize| Some(wait_per_op(&row(p, *mode, t)?, class));
                let mut parts = Vec::new();
                let mut all = Some(true);
                for &t in *tasks {
                    match (wait(profile, t), wait(than, t)) {
                        (Some(a), Some(b)) => {
                            parts.push(format!("{t}: {a:.1} against {b:.1}"));
                            if a >= b {
                                all = all.map(|_| false);
                            }
                        }
                        _ => {
                            parts.push(format!("{t}: not projected"));
                            all = None;
                        }
                    }
                }
                (
                    format!(
                        "{class} wait per operation, ns, {profile} against {than}, {mode}: {}",
                        parts.join("; ")
                    ),
                    all,
                )
            }
        };
        (projected, agrees, figure)
    }
}

/// The claims of the 2018 lru_lock series (page_fault1 on the 44-core Broadwell).
pub const PAGE_FAULT1_2018: &[Claim] = &[
    Claim {
        says: "the second kernel makes zone->lock more scalable by increasing an order-0 \
               per-cpu pagelist's batch and high to 310 and 1860",
        source: "Daniel Jordan, [RFC PATCH v1 13/13], linux-mm, 2018-01-31 (Aaron Lu's patch)",
        check: Check::LessWait(LessWait {
            profile: "large-zone-batch",
            than: "linux-4.15",
            mode: Mode::Processes,
            tasks: &[16, 32, 64],
            class: "zone->lock",
        }),
    },
    Claim {
        says: "with release_pages scaling, contention on lru_lock grew in the add-to-LRU path; \
               splicing pre-sorted local lists does more of that work outside the lock",
        source: "Daniel Jordan, [RFC PATCH v1 13/13], linux-mm, 2018-01-31",
        check: Check::LessWait(LessWait {
            profile: "lru-lock-splice",
            than: "lru-lock-base",
            mode: Mode::Processes,
            tasks: &[16, 32, 64],
            class: "lru_lock",
        }),
    },
    Claim {
        says: "the threads case does worse than the processes case, most likely because of \
               mmap_sem acting as a bottleneck",
        source: "Daniel Jordan, [RFC PATCH v1 13/13] mm: splice local lists onto the front of \
                 the LRU, linux-mm, 2018-01-31",
        check: Check::Costliest {
            profiles: &[
                "linux-4.15",
                "large-zone-batch",
                "lru-lock-base",
                "lru-lock-splice",
            ],
            mode: Mode::Threads,
            tasks: &[16, 32, 64],
            class: "mmap_lock",
        },
    },
    Claim {
        says: "with the series applied, lock_stat showed the wait time on lru_lock nearly \
               tripled going from 32 to 64 processes",
        source: "Daniel Jordan, Re: [RFC PATCH v1 13/13], linux-mm, 2018-02-02, answering Tim \
                 Chen on the speedup's drop from 16 to 64 tasks; \"nearly tripled\" read as 2 to \
                 3.6 times (2.5 to 3, widened by 20% for the grain of salt he takes lock_stat with)",
        check: Check::WaitGrowth {
            profile: "lru-lock-splice",
            mode: Mode::Processes,
            from: 32,
            to: 64,
            class: "lru_lock",
            low: 2.0,
            high: 3.6,
        },
    },
];

/// The claims of the per-VMA lock series v2 (pft on one VMA, 2-socket Ice Lake).
pub const PFT_SINGLE_VMA_2023: &[Claim] = &[Claim {
    says: "one large VMA is the worst case for per-VMA locks (every fault takes the same VMA's \
           lock), and it loses page faults per second at low CPU counts",
    source: "Punit Agrawal, Re: [PATCH v2 00/33] Per-VMA locks, linux-mm, 2023-02-15 (the drop \
             at low CPU counts) and 2023-02-28 (the worst case); checked as the VMA lock being \
             the costliest class where pvl-v2 loses most, at 4 and 7 threads",
    check: Check::Costliest {
        profiles: &["pvl-v2"],
        mode: Mode::Threads,
        tasks: &[4, 7],
        class: "vma lock",
    },
}];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::Row;
    use crate::replay::ClassStats;

    fn row(tasks: usize, rate: f64, classes: Vec<(&str, f64, f64)>) -> ProjRow {
        ProjRow {
            mode: Mode::Processes,
            tasks,
            captures: vec![Row {
                mode: Mode::Processes,
                tasks,
                metrics: vec![("faults/sec".into(), true, vec![rate])],
                classes: classes
                    .into_iter()
                    .map(|(name, wait, line)| ClassStats {
                        name: name.into(),
                        acquisitions: 1000,
                        wait_ns: wait * 1000.0,
                        line_events: 1,
                        line_ns: line * 1000.0,
                        ..Default::default()
                    })
                    .collect(),
                ops: 1000,
                span_ns: 1e6,
                events: 0,
                seconds: 0.0,
            }],
        }
    }

    /// The costliest class is judged by waits plus line transfers per operation, in every
    /// listed row; a missing row leaves the claim unchecked, not agreed with.
    #[test]
    fn the_costliest_class_counts_waits_and_transfers_in_every_row() {
        let claim = Claim {
            says: "a is the bottleneck",
            source: "test",
            check: Check::Costliest {
                profiles: &["p"],
                mode: Mode::Processes,
                tasks: &[4, 8],
                class: "a",
            },
        };
        // At 8 tasks b waits longer but a's transfers make it the costlier.
        let rows = |t: usize| match t {
            4 => Some(row(4, 1e6, vec![("a", 50.0, 0.0), ("b", 10.0, 0.0)])),
            8 => Some(row(8, 1e6, vec![("a", 20.0, 40.0), ("b", 50.0, 0.0)])),
            _ => None,
        };
        let v = claim.check(&|_, _, t| rows(t));
        assert_eq!(v.verdict, Verdict::Agrees, "{}", v.projected);
        assert!(
            v.projected.contains("p processes 8: a (60 ns/op)"),
            "{}",
            v.projected
        );
        let v = claim.check(&|_, _, t| (t == 4).then(|| rows(4)).flatten());
        assert_eq!(v.verdict, Verdict::NotChecked, "{}", v.projected);
        assert_eq!(v.verdict(), "not checked");
        let b = |t: usize| Some(row(t, 1e6, vec![("a", 5.0, 0.0), ("b", 10.0, 0.0)]));
        assert_eq!(claim.check(&|_, _, t| b(t)).verdict, Verdict::Disagrees);
        // A class that cost nothing is no bottleneck, even when no other class cost more.
        let idle = |t: usize| Some(row(t, 1e6, vec![("b", 0.0, 0.0), ("a", 0.0, 0.0)]));
        let v = claim.check(&|_, _, t| idle(t));
        assert_eq!(v.verdict, Verdict::Disagrees, "{}", v.projected);
        assert!(v.projected.contains("no lock cost"), "{}", v.projected);
    }

    /// Agreement needs the merged figures and every capture's to say the same: a split, or
    /// captures that all agree while the merged figures do not (two profiles' captures
    /// weigh differently once merged), is the noise deciding; with no capture the merged
    /// figures decide; a missing row is no verdict.
    #[test]
    fn a_verdict_needs_the_merged_figures_and_every_capture() {
        use Verdict::*;
        let v = |m, c: &[Option<bool>]| verdict_of(m, c.iter().copied());
        assert_eq!(v(Some(true), &[Some(true), Some(true)]), Agrees);
        assert_eq!(v(Some(false), &[Some(false), Some(false)]), Disagrees);
        assert_eq!(v(Some(true), &[Some(true), Some(false)]), Mixed);
        assert_eq!(v(Some(false), &[Some(true), Some(true)]), Mixed);
        assert_eq!(v(Some(true), &[Some(true), None]), Mixed);
        assert_eq!(v(Some(false), &[]), Disagrees);
        assert_eq!(v(Some(true), &[]), Agrees);
        assert_eq!(v(None, &[Some(true)]), NotChecked);
    }

    /// A relieving kernel must wait less in every listed row; a row either kernel lacks
    /// leaves the claim unchecked.
    #[test]
    fn less_wait_holds_in_every_row() {
        let claim = Claim {
            says: "b relieves x",
            source: "test",
            check: Check::LessWait(LessWait {
                profile: "b",
                than: "a",
                mode: Mode::Processes,
                tasks: &[16, 64],
                class: "x",
            }),
        };
        let rows = |b64: f64| {
            move |p: &str, _: Mode, t: usize| {
                let w = match (p, t) {
                    ("a", _) => 100.0,
                    ("b", 16) => 20.0,
                    ("b", 64) => b64,
                    _ => return None,
                };
                Some(row(t, 1e6, vec![("x", w, 0.0)]))
            }
        };
        let v = claim.check(&rows(50.0));
        assert_eq!(v.verdict, Verdict::Agrees, "{}", v.projected);
        assert!(
            v.projected.contains("64: 50.0 against 100.0"),
            "{}",
            v.projected
        );
        assert_eq!(claim.check(&rows(100.0)).verdict, Verdict::Disagrees);
        let v = claim.check(&|p, m, t| (t == 16).then(|| rows(50.0)(p, m, t)).flatten());
        assert_eq!(v.verdict, Verdict::NotChecked);
    }

    /// The wait grows by total wait time, per operation times the rate: twice the wait per
    /// operation at 1.5 times the rate is a growth of 3.
    #[test]
    fn wait_growth_is_total_wait_time() {
        let claim = Claim {
            says: "x's wait nearly tripled",
            source: "test",
            check: Check::WaitGrowth {
                profile: "p",
                mode: Mode::Processes,
                from: 32,
                to: 64,
                class: "x",
                low: 2.0,
                high: 3.6,
            },
        };
        let rows = |w64: f64| {
            move |_: &str, _: Mode, t: usize| match t {
                32 => Some(row(32, 1e7, vec![("x", 100.0, 0.0)])),
                64 => Some(row(64, 1.5e7, vec![("x", w64, 0.0)])),
                _ => None,
            }
        };
        let v = claim.check(&rows(200.0));
        assert_eq!(v.verdict, Verdict::Agrees, "{}", v.projected);
        assert!(v.projected.contains("x3.00"), "{}", v.projected);
        assert_eq!(v.per_capture_text(), "agrees (x3.00)");
        assert_eq!(claim.check(&rows(110.0)).verdict, Verdict::Disagrees);
        assert_eq!(claim.check(&rows(400.0)).verdict, Verdict::Disagrees);
        // Two captures, one tripling and one not: the capture noise decides, and the verdict
        // says so whatever the merged figure.
        let two = |t: usize| {
            let (r1, r2) = match t {
                32 => (100.0, 100.0),
                _ => (200.0, 110.0),
            };
            let rate = if t == 32 { 1e7 } else { 1.5e7 };
            let mut r = row(t, rate, vec![("x", r1, 0.0)]);
            r.captures
                .extend(row(t, rate, vec![("x", r2, 0.0)]).captures);
            Some(r)
        };
        let v = claim.check(&|_, _, t| two(t));
        assert_eq!(v.verdict, Verdict::Mixed, "{}", v.per_capture_text());
        assert_eq!(v.per_capture_text(), "agrees (x3.00), DISAGREES (x1.65)");
        assert_eq!(v.verdict(), "MIXED");
    }
}
