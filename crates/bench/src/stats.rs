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

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Harmonic mean (`Hmean`). NaN for an empty sample or one with a non-positive value.
pub fn hmean(x: &[f64]) -> f64 {
    if x.is_empty() || x.iter().any(|&v| v <= 0.0) {
        return f64::NAN;
    }
    x.len() as f64 / x.iter().map(|v| 1.0 / v).sum::<f64>()
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

/// Percent change of `new` against `base`, positive when better.
pub fn pct_change(base: f64, new: f64, higher_is_better: bool) -> f64 {
    if higher_is_better {
        new * 100.0 / base - 100.0
    } else {
        100.0 - new * 100.0 / base
    }
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
type Summary = fn(&[f64]) -> f64;

/// Is the difference between two samples significant? `harmonic` selects Hmean/HStddev (rates)
/// or Amean/Stddev (times).
///
/// Fewer than two samples on either side give no spread to judge by: never significant.
pub fn significant(a: &[f64], b: &[f64], harmonic: bool, rule: Significance) -> bool {
    if a.len() < 2 || b.len() < 2 {
        return false;
    }
    let (m, s): (Summary, Summary) = if harmonic {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
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

    #[test]
    fn interval_rule_needs_separated_intervals() {
        let a = [100.0, 101.0, 99.0, 100.0];
        let b = [110.0, 111.0, 109.0, 110.0];
        assert!(significant(&a, &b, true, Significance::Interval));
        let c = [100.0, 120.0, 80.0, 100.0];
        assert!(!significant(&a, &c, true, Significance::Interval));
    }
}
