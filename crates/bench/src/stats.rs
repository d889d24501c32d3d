//! Statistics computed the way mmtests computes them, so that pagelab's tables read like the
//! comparisons on the mailing lists (mmtests `lib/Stat.pm` and `compare-kernels.sh`).
//!
//! Rates (higher is better) are summarised by their harmonic mean, times (lower is better) by
//! their arithmetic mean. The harmonic spread is mmtests' HStddev,
//! `sqrt(H^4 * sum((1/x - 1/H)^2) / n)`, the standard deviation of the reciprocals mapped back
//! through the delta method. Percent changes are signed so that positive is better. Two
//! significance rules exist, as mmtests has had two:
//! - [`Significance::TTest`] (2018-2024): t = |m1 - m2| / sqrt(s1^2/n1 + s2^2/n2) with
//!   df = n1 + n2 - 2, significant when the two-sided p < 0.10 — the rule behind the asterisks
//!   of the 2023 per-VMA lock posting;
//! - [`Significance::Interval`] (current): each side's interval mean ± 1.959964·sd (HStddev for
//!   harmonic rows, Stddev for arithmetic ones); significant when the intervals do not overlap.
//!
//! # Streaming
//!
//! A store can hold millions of samples per sample set, so nothing that summarises them may
//! need them all in memory at once: [`Summary`] takes samples one at a time (or merges two
//! summaries) and keeps a constant-size state (count, sum, sum of reciprocals, extremes, and
//! Welford's running mean and squared deviations of the values and of their reciprocals), from
//! which every statistic above and both significance rules follow ([`significant_summary`]). Only
//! `BHmean-P` needs the samples in order: callers feed the best [`best_len`] of them, best first,
//! from a sorted query. The slice functions (`hmean`, `stddev`, ..., [`significant`]) are the
//! straightforward definitions, kept as the reference the streaming forms are tested against.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Harmonic mean (`Hmean`). NaN for an empty sample or one with a non-positive value.
pub fn hmean(x: &[f64]) -> f64 {
    if x.is_empty() || x.iter().any(|&v| v <= 0.0) {
        return f64::NAN;
    }
    x.len() as f64 / x.iter().map(|v| 1.0 / v).sum::<f64>()
}

/// The median: the middle value, or the mean of the middle two for an even count; NaN for an
/// empty sample, as [`amean`] and [`hmean`] give. Values are ordered by [`f64::total_cmp`], so a
/// NaN among them sorts last instead of making the order undefined. Micro-benchmarks and the
/// projector's calibration report the median of their timed rounds: a preempted round on a
/// shared host lands at one end and moves the median by at most one place.
pub fn median(x: &[f64]) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median with a distribution-free interval around it, from the sample's own order
/// statistics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MedianInterval {
    pub median: f64,
    /// The `k`-th smallest value.
    pub lo: f64,
    /// The `k`-th largest value.
    pub hi: f64,
    /// The probability that `[lo, hi]` holds the population's median, whatever its
    /// distribution: `1 - 2 P(B < k)` with B ~ Binomial(n, 1/2). At least the level asked for,
    /// unless the sample is too small to reach it (then the interval is the whole range).
    pub coverage: f64,
}

/// The median of `x` and the order-statistic interval for it at `level` (0.95: 95%): the `k`-th
/// smallest and `k`-th largest values, `k` the largest for which the chance that fewer than `k`
/// of `n` independent draws fall below the median (each does with probability 1/2) is at most
/// `(1 - level) / 2`. It assumes nothing about the distribution, only independent draws, which
/// suits ratios of benchmark passes on a shared host: their tails are the passes another
/// process preempted, and a mean and standard deviation would be pulled by them. `None` for an
/// empty sample or a NaN in it.
pub fn median_interval(x: &[f64], level: f64) -> Option<MedianInterval> {
    use statrs::distribution::{Binomial, DiscreteCDF};
    if x.is_empty() || x.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let b = Binomial::new(0.5, n as u64).ok()?;
    let tail = (1.0 - level) / 2.0;
    // P(B < k) = cdf(k - 1); k = 1 is the whole range, whose tail is 0.5^n.
    let mut k = 1;
    while k < n.div_ceil(2) && b.cdf(k as u64) <= tail {
        k += 1;
    }
    Some(MedianInterval {
        median: median(&v),
        lo: v[k - 1],
        hi: v[n - k],
        coverage: 1.0 - 2.0 * b.cdf(k as u64 - 1),
    })
}

/// Arithmetic mean (`Amean`).
pub fn amean(x: &[f64]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    x.iter().sum::<f64>() / x.len() as f64
}

/// Sample standard deviation, divisor n - 1 (`Stddev`); 0 for one sample.
pub fn stddev(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = amean(x);
    (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// mmtests' harmonic standard deviation (`HStddev`).
pub fn hstddev(x: &[f64]) -> f64 {
    let h = hmean(x);
    if x.len() < 2 || !h.is_finite() {
        return 0.0;
    }
    let s: f64 = x.iter().map(|v| (1.0 / v - 1.0 / h).powi(2)).sum();
    (h.powi(4) * s / x.len() as f64).sqrt()
}

/// `CoeffVar`: Stddev as a percentage of Amean.
pub fn coeff_var(x: &[f64]) -> f64 {
    stddev(x) * 100.0 / amean(x)
}

/// `HCoeffVar`: HStddev as a percentage of Hmean.
pub fn hcoeff_var(x: &[f64]) -> f64 {
    hstddev(x) * 100.0 / hmean(x)
}

/// `BHmean-P`: the harmonic mean of the best `int(n * p / 100)` samples (at least one), best
/// meaning highest for higher-is-better metrics.
pub fn bhmean(x: &[f64], p: u32, higher_is_better: bool) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    if higher_is_better {
        v.reverse();
    }
    let k = ((x.len() as u64 * u64::from(p)) / 100).max(1) as usize;
    hmean(&v[..k.min(v.len())])
}

/// How many samples `BHmean-P` (or `BAmean-P`) of `n` samples averages: `int(n * p / 100)`, at
/// least one, at most `n`.
pub fn best_len(n: u64, p: u32) -> u64 {
    ((n * u64::from(p)) / 100).max(1).min(n)
}

/// The summary of a sample set, built one sample at a time in constant memory: everything
/// mmtests prints of a set except the best-P means, which need the samples in order (see the
/// module documentation). Summaries of disjoint sets [`merge`](Summary::merge) into the summary
/// of their union, so the sets of several runs pool as their samples would.
///
/// Spreads use Welford's update (and Chan's formula to merge) rather than sums of squares, which
/// lose every significant digit when the spread is small against the mean, as it is for rates in
/// the millions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    n: u64,
    /// Samples `<= 0`: they leave the harmonic statistics undefined.
    nonpositive: u64,
    min: f64,
    max: f64,
    sum: f64,
    /// Welford's running mean and sum of squared deviations of the values...
    mean: f64,
    m2: f64,
    /// ... and of their reciprocals (only while every sample is positive).
    recip_sum: f64,
    recip_mean: f64,
    recip_m2: f64,
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            n: 0,
            nonpositive: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            mean: 0.0,
            m2: 0.0,
            recip_sum: 0.0,
            recip_mean: 0.0,
            recip_m2: 0.0,
        }
    }
}

/// Chan et al.'s merge of two (count, mean, M2) states.
fn merge_moments(na: u64, ma: f64, m2a: f64, nb: u64, mb: f64, m2b: f64) -> (f64, f64) {
    if na == 0 {
        return (mb, m2b);
    }
    if nb == 0 {
        return (ma, m2a);
    }
    let (fa, fb) = (na as f64, nb as f64);
    let n = fa + fb;
    let delta = mb - ma;
    (ma + delta * fb / n, m2a + m2b + delta * delta * fa * fb / n)
}

impl Summary {
    /// An empty summary.
    pub fn new() -> Summary {
        Summary::default()
    }

    /// The summary of a slice.
    pub fn of(x: &[f64]) -> Summary {
        let mut s = Summary::new();
        for &v in x {
            s.push(v);
        }
        s
    }

    /// Adds one sample.
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let n = self.n as f64;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        self.sum += x;
        let d = x - self.mean;
        self.mean += d / n;
        self.m2 += d * (x - self.mean);
        if x <= 0.0 {
            self.nonpositive += 1;
        } else if self.nonpositive == 0 {
            let r = 1.0 / x;
            self.recip_sum += r;
            let d = r - self.recip_mean;
            self.recip_mean += d / n;
            self.recip_m2 += d * (r - self.recip_mean);
        }
    }

    /// Adds every sample `other` summarises.
    pub fn merge(&mut self, other: &Summary) {
        let (mean, m2) = merge_moments(self.n, self.mean, self.m2, other.n, other.mean, other.m2);
        let (recip_mean, recip_m2) = merge_moments(
            self.n,
            self.recip_mean,
            self.recip_m2,
            other.n,
            other.recip_mean,
            other.recip_m2,
        );
        self.n += other.n;
        self.nonpositive += other.nonpositive;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.mean = mean;
        self.m2 = m2;
        self.recip_sum += other.recip_sum;
        self.recip_mean = recip_mean;
        self.recip_m2 = recip_m2;
    }

    /// The number of samples.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The smallest sample (`+inf` when empty).
    pub fn min(&self) -> f64 {
        self.min
    }

    /// The largest sample (`-inf` when empty).
    pub fn max(&self) -> f64 {
        self.max
    }

    /// As [`hmean`].
    pub fn hmean(&self) -> f64 {
        if self.n == 0 || self.nonpositive > 0 {
            return f64::NAN;
        }
        self.n as f64 / self.recip_sum
    }

    /// As [`amean`].
    pub fn amean(&self) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        self.sum / self.n as f64
    }

    /// As [`stddev`].
    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        (self.m2.max(0.0) / (self.n - 1) as f64).sqrt()
    }

    /// As [`hstddev`]: the sum of squared deviations of the reciprocals from their mean (which is
    /// `1/H`) is exactly Welford's M2 of the reciprocals.
    pub fn hstddev(&self) -> f64 {
        let h = self.hmean();
        if self.n < 2 || !h.is_finite() {
            return 0.0;
        }
        (h.powi(4) * self.recip_m2.max(0.0) / self.n as f64).sqrt()
    }

    /// As [`coeff_var`].
    pub fn coeff_var(&self) -> f64 {
        self.stddev() * 100.0 / self.amean()
    }

    /// As [`hcoeff_var`].
    pub fn hcoeff_var(&self) -> f64 {
        self.hstddev() * 100.0 / self.hmean()
    }

    /// The mean mmtests shows for the set: Hmean for rates (`harmonic`), Amean for times.
    pub fn mean_of(&self, harmonic: bool) -> f64 {
        if harmonic { self.hmean() } else { self.amean() }
    }

    /// The spread that goes with [`Summary::mean_of`]: HStddev or Stddev.
    pub fn spread_of(&self, harmonic: bool) -> f64 {
        if harmonic {
            self.hstddev()
        } else {
            self.stddev()
        }
    }
}

/// Percent change of `new` against `base`, positive when better.
pub fn pct_change(base: f64, new: f64, higher_is_better: bool) -> f64 {
    if higher_is_better {
        new * 100.0 / base - 100.0
    } else {
        100.0 - new * 100.0 / base
    }
}

/// The range of the percent change from a base to a new value over every pairing of one of
/// `base` with one of `new` (for a projection: every pairing of a baseline capture's mean with
/// a column capture's). [`pct_change`] is monotonic in each argument, so the extremes come from
/// the extremes. `None` when either side is empty or holds a value that is not a positive
/// finite number.
pub fn change_range(base: &[f64], new: &[f64], higher_is_better: bool) -> Option<(f64, f64)> {
    let ext = |v: &[f64]| {
        (!v.is_empty() && v.iter().all(|x| x.is_finite() && *x > 0.0)).then(|| {
            v.iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                    (l.min(x), h.max(x))
                })
        })
    };
    let ((bl, bh), (nl, nh)) = (ext(base)?, ext(new)?);
    let c =
        [(bl, nl), (bl, nh), (bh, nl), (bh, nh)].map(|(b, n)| pct_change(b, n, higher_is_better));
    Some((
        c.iter().copied().fold(f64::INFINITY, f64::min),
        c.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    ))
}

/// Which significance rule to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Significance {
    /// The 2018-2024 Welch-style t statistic with df = n1 + n2 - 2, two-sided p < 0.10.
    TTest,
    /// Non-overlapping mean ± 1.959964 sd intervals (the current rule).
    Interval,
}

/// Two-sided p-value of the 2018-2024 rule for samples summarised by `(mean, sd, n)`.
pub fn ttest_p(m1: f64, s1: f64, n1: usize, m2: f64, s2: f64, n2: usize) -> f64 {
    let se = (s1 * s1 / n1 as f64 + s2 * s2 / n2 as f64).sqrt();
    let df = (n1 + n2) as f64 - 2.0;
    if df < 1.0 {
        return 1.0;
    }
    if se == 0.0 {
        return if m1 == m2 { 1.0 } else { 0.0 };
    }
    let t = (m1 - m2).abs() / se;
    let dist = StudentsT::new(0.0, 1.0, df).expect("df >= 1 is a valid Student's t");
    2.0 * dist.sf(t)
}

/// A summary statistic of a sample.
type Statistic = fn(&[f64]) -> f64;

/// Is the difference between two samples significant? `harmonic` selects Hmean/HStddev (rates)
/// or Amean/Stddev (times).
///
/// Fewer than two samples on either side give no spread to judge by: never significant.
pub fn significant(a: &[f64], b: &[f64], harmonic: bool, rule: Significance) -> bool {
    if a.len() < 2 || b.len() < 2 {
        return false;
    }
    let (m, s): (Statistic, Statistic) = if harmonic {
        (hmean, hstddev)
    } else {
        (amean, stddev)
    };
    match rule {
        Significance::TTest => {
            // The 2018-2024 rule used the plain Stddev for the t statistic.
            ttest_p(m(a), stddev(a), a.len(), m(b), stddev(b), b.len()) < 0.10
        }
        Significance::Interval => {
            const Z: f64 = 1.959964;
            let (ma, sa, mb, sb) = (m(a), s(a), m(b), s(b));
            ma + Z * sa < mb - Z * sb || mb + Z * sb < ma - Z * sa
        }
    }
}

/// [`significant`] on summaries: what compare, plots and reports use, since the rules need only
/// each side's count, mean and spread.
pub fn significant_summary(a: &Summary, b: &Summary, harmonic: bool, rule: Significance) -> bool {
    if a.n() < 2 || b.n() < 2 {
        return false;
    }
    let (ma, mb) = (a.mean_of(harmonic), b.mean_of(harmonic));
    match rule {
        Significance::TTest => {
            let (na, nb) = (a.n() as usize, b.n() as usize);
            ttest_p(ma, a.stddev(), na, mb, b.stddev(), nb) < 0.10
        }
        Significance::Interval => {
            const Z: f64 = 1.959964;
            let (sa, sb) = (a.spread_of(harmonic), b.spread_of(harmonic));
            ma + Z * sa < mb - Z * sb || mb + Z * sb < ma - Z * sa
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn median_of_odd_even_and_empty_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        // The input is left in its order.
        let x = [3.0, 1.0, 2.0];
        median(&x);
        assert_eq!(x, [3.0, 1.0, 2.0]);
    }

    /// The order-statistic interval of the median, against the binomial tables: at 95%, n = 10
    /// gives the 2nd smallest and 2nd largest (coverage 1 - 2 * 11/1024 = 97.85%), n = 20 the 6th
    /// and 15th (1 - 2 * 21700/2^20 = 95.86%), n = 6 the extremes (1 - 2/64 = 96.875%), and
    /// n = 5 cannot reach 95% (the range covers 1 - 2/32 = 93.75%).
    #[test]
    fn median_interval_of_known_samples() {
        let ten: Vec<f64> = [7, 3, 10, 1, 5, 9, 2, 8, 4, 6].map(f64::from).to_vec();
        let i = median_interval(&ten, 0.95).unwrap();
        assert_eq!((i.median, i.lo, i.hi), (5.5, 2.0, 9.0));
        assert!(close(i.coverage, 1.0 - 22.0 / 1024.0), "{i:?}");
        let twenty: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        let i = median_interval(&twenty, 0.95).unwrap();
        assert_eq!((i.median, i.lo, i.hi), (10.5, 6.0, 15.0));
        assert!(close(i.coverage, 1.0 - 2.0 * 21700.0 / 1048576.0), "{i:?}");
        let six = [0.9, 1.1, 1.0, 0.95, 1.05, 1.02];
        let i = median_interval(&six, 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (0.9, 1.1));
        assert!(close(i.coverage, 1.0 - 2.0 / 64.0), "{i:?}");
        let i = median_interval(&six[..5], 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (0.9, 1.1));
        assert!(close(i.coverage, 1.0 - 2.0 / 32.0), "{i:?}");
        // A lower level narrows it: n = 20 at 80% is the 7th and 14th (P(B <= 6) = 0.058 <= 0.10 < P(B <= 7)).
        let i = median_interval(&twenty, 0.80).unwrap();
        assert_eq!((i.lo, i.hi), (7.0, 14.0));
        let one = median_interval(&[2.0], 0.95).unwrap();
        assert_eq!((one.median, one.lo, one.hi), (2.0, 2.0, 2.0));
        assert!(median_interval(&[], 0.95).is_none());
        assert!(median_interval(&[1.0, f64::NAN], 0.95).is_none());
    }

    // Hand-computed: x = [2, 4, 4]; 1/x = [0.5, 0.25, 0.25], sum 1.0, H = 3.
    #[test]
    fn harmonic_statistics_by_hand() {
        let x = [2.0, 4.0, 4.0];
        assert!(close(hmean(&x), 3.0));
        // (1/x - 1/H)^2 = (1/6)^2, (1/12)^2, (1/12)^2 = 1/36 + 2/144 = 1/24
        // HStddev = sqrt(81 * (1/24) / 3) = sqrt(1.125)
        assert!(close(hstddev(&x), 1.125f64.sqrt()));
        assert!(close(hcoeff_var(&x), 1.125f64.sqrt() * 100.0 / 3.0));
        assert!(hmean(&[]).is_nan() && hmean(&[1.0, 0.0]).is_nan());
    }

    // x = [1, 2, 3, 4]: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, /3.
    #[test]
    fn arithmetic_statistics_by_hand() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!(close(amean(&x), 2.5));
        assert!(close(stddev(&x), (5.0f64 / 3.0).sqrt()));
        assert!(close(coeff_var(&x), (5.0f64 / 3.0).sqrt() * 40.0));
        assert_eq!(stddev(&[7.0]), 0.0);
    }

    #[test]
    fn best_harmonic_mean_takes_the_best_share() {
        let x = [1.0, 2.0, 4.0, 8.0];
        // Best 50% of a higher-is-better metric: [8, 4] -> 2 / (1/8 + 1/4) = 16/3.
        assert!(close(bhmean(&x, 50, true), 16.0 / 3.0));
        // Lower is better: [1, 2] -> 4/3. At least one sample even for tiny P.
        assert!(close(bhmean(&x, 50, false), 4.0 / 3.0));
        assert!(close(bhmean(&x, 1, true), 8.0));
    }

    #[test]
    fn percent_change_is_positive_when_better() {
        // The 2023 per-VMA lock table: 2965588.9697 -> 2683651.5664 is -9.51%.
        let p = pct_change(2965588.9697, 2683651.5664, true);
        assert!((p - -9.5070).abs() < 1e-3, "{p}");
        assert!(close(pct_change(100.0, 90.0, false), 10.0));
        assert!(close(pct_change(100.0, 100.0, true), 0.0));
    }

    #[test]
    fn ttest_matches_a_tabulated_value() {
        // Two samples with means 10 and 12, sd 1, n = 5 each: t = 2 / sqrt(0.4) = 3.1623,
        // df = 8; the two-sided p of Student's t(8) at 3.1623 is 0.01338.
        let p = ttest_p(10.0, 1.0, 5, 12.0, 1.0, 5);
        assert!((p - 0.013_38).abs() < 2e-4, "{p}");
        let a = [9.0, 10.0, 11.0, 10.0, 10.0];
        let b = [12.0, 11.0, 13.0, 12.0, 12.0];
        assert!(significant(&a, &b, false, Significance::TTest));
        assert!(!significant(&a, &a, false, Significance::TTest));
    }

    /// A small deterministic generator, so the random sets are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        /// A sample set like a benchmark's: a level, a relative spread, sometimes constant.
        fn set(&mut self, n: usize) -> Vec<f64> {
            let level = 10f64.powf(self.next() * 7.0);
            let spread = [0.0, 1e-6, 0.01, 0.3][(self.next() * 4.0) as usize];
            (0..n)
                .map(|_| level * (1.0 + spread * (self.next() - 0.5)))
                .collect()
        }
    }

    /// Equal to rounding: means relative to themselves; spreads, where the reference's
    /// two-pass sums cancel, relative to the level of the samples.
    fn same(what: &str, got: f64, want: f64, x: &[f64]) {
        let level = x.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
        let scale = if what.contains("Std") || what.contains("Coeff") {
            level.max(want.abs())
        } else {
            want.abs()
        };
        let ok =
            (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= 1e-10 * scale;
        assert!(ok, "{what}: streamed {got} vs reference {want} for {x:?}");
    }

    fn check_summary(s: &Summary, x: &[f64]) {
        same("Hmean", s.hmean(), hmean(x), x);
        same("Amean", s.amean(), amean(x), x);
        same("Stddev", s.stddev(), stddev(x), x);
        same("HStddev", s.hstddev(), hstddev(x), x);
        same(
            "Min",
            s.min(),
            x.iter().copied().fold(f64::INFINITY, f64::min),
            x,
        );
        same(
            "Max",
            s.max(),
            x.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            x,
        );
        assert_eq!(s.n(), x.len() as u64);
    }

    /// The streamed statistics equal the in-memory definitions on random sets, whole or merged
    /// from two parts, including sets with a non-positive value (no harmonic statistics).
    #[test]
    fn streamed_summaries_match_the_reference() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..2000 {
            let n = 1 + (rng.next() * 60.0) as usize;
            let n = n.max(2);
            let mut x = rng.set(n);
            if round % 50 == 0 {
                x[n / 2] = if round % 100 == 0 { 0.0 } else { -3.0 };
            }
            check_summary(&Summary::of(&x), &x);
            let cut = (rng.next() * (n + 1) as f64) as usize;
            let mut merged = Summary::of(&x[..cut]);
            merged.merge(&Summary::of(&x[cut..]));
            check_summary(&merged, &x);
            same("CoeffVar", merged.coeff_var(), coeff_var(&x), &x);
            same("HCoeffVar", merged.hcoeff_var(), hcoeff_var(&x), &x);
        }
        let empty = Summary::new();
        assert!(empty.hmean().is_nan() && empty.amean().is_nan());
        assert_eq!((empty.stddev(), empty.hstddev()), (0.0, 0.0));
    }

    #[test]
    fn streamed_significance_matches_the_reference() {
        let mut rng = Rng(42);
        let mut seen = [0usize; 2];
        for _ in 0..3000 {
            let n = 1 + (rng.next() * 12.0) as usize;
            let a = rng.set(n);
            // Sometimes a shifted copy of the same level, so both verdicts occur.
            let b: Vec<f64> = if rng.next() < 0.5 {
                let shift = 1.0 + (rng.next() - 0.5) * 0.2;
                a.iter()
                    .map(|v| v * shift + rng.next() * v * 0.01)
                    .collect()
            } else {
                let m = 1 + (rng.next() * 12.0) as usize;
                rng.set(m)
            };
            for harmonic in [true, false] {
                for rule in [Significance::TTest, Significance::Interval] {
                    let want = significant(&a, &b, harmonic, rule);
                    let got =
                        significant_summary(&Summary::of(&a), &Summary::of(&b), harmonic, rule);
                    assert_eq!(got, want, "{a:?} {b:?} harmonic {harmonic} {rule:?}");
                    seen[usize::from(want)] += 1;
                }
            }
        }
        assert!(seen[0] > 100 && seen[1] > 100, "{seen:?}");
    }

    #[test]
    fn best_len_is_mmtests_share_of_the_samples() {
        assert_eq!(best_len(4, 50), 2);
        assert_eq!(best_len(4, 1), 1);
        assert_eq!(best_len(199, 99), 197);
        assert_eq!(best_len(0, 50), 0);
        assert_eq!(best_len(7_500_000, 95), 7_125_000);
    }

    #[test]
    fn interval_rule_needs_separated_intervals() {
        let a = [100.0, 101.0, 99.0, 100.0];
        let b = [110.0, 111.0, 109.0, 110.0];
        assert!(significant(&a, &b, true, Significance::Interval));
        let c = [100.0, 120.0, 80.0, 100.0];
        assert!(!significant(&a, &c, true, Significance::Interval));
    }
}
