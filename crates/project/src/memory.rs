//! Memory under load: how fast each of `n` CPUs clearing (or copying) pages on one node writes,
//! given the node's loaded-latency curve.
//!
//! A core streams stores to memory with a fixed number of line fills in flight (on Intel the
//! L1 fill buffers and the L2 super queue; on AMD the miss address buffers): by Little's law
//! its bandwidth is that concurrency times 64 bytes over the memory latency. The latency is not
//! a constant: every line waits at the memory controller behind the others' requests, and the
//! wait grows as the node's traffic approaches what its channels can carry. Intel's Memory
//! Latency Checker measures that curve (`mlc --loaded_latency`: a pointer chase's latency while
//! other cores inject traffic at decreasing delays), and every published curve has the same
//! shape: flat to about half the peak, then rising steeply to two or three times the idle
//! latency at the peak. So when more cores write, each one's stores take longer, and it clears
//! a page more slowly, well before the node's peak is reached.
//!
//! The model, per node, with `c` one core's bandwidth alone (`memory.core_bandwidth_gbs`), `B`
//! the node's peak (`memory.node_bandwidth_gbs`) and `L(u)` the latency at utilisation `u`
//! (`memory.loaded_latency`, utilisation as a fraction of `B`):
//!
//! - one writer alone loads the node to `u1 = c / B` and writes at `c` (that is what
//!   `core_bandwidth_gbs` measures), so its concurrency is `c * L(u1)`;
//! - `n` writers at once each write at `r = c * L(u1) / L(u)`, where the utilisation `u` they
//!   create is `n * r / B`: the fixed point `n * c * L(u1) / L(u) = u * B`, unique because the
//!   left side falls and the right side rises with `u`;
//! - if even at `u = 1` the writers would ask for more than `B` (`n * c * L(u1) / L(1) > B`),
//!   the node is saturated and they share `B` equally (the queue grows without bound, beyond
//!   what the curve tabulates).
//!
//! With no curve (a flat latency) this is processor sharing of the node's bandwidth, each writer
//! capped at one core's: `r = min(c, B / n)`, the replay's model before the curve.
//!
//! What goes to memory is what the trace says: the bytes of every page cleared or copied
//! (`Arena::zero_page`, `copy_page`). The compute between events also misses in the caches (page
//! tables, `struct page`, the LRU lists), but the trace records no cache misses, so that traffic
//! neither loads the node nor slows with it; its time is the capture host's, scaled by the clock.

use crate::machine::Machine;

/// The latency at utilisation `u` (0 to 1) by linear interpolation in `curve` (`[u, ns]` points,
/// `u` increasing from 0); flat beyond the last point; `None` for an empty curve.
pub fn latency_at(curve: &[[f64; 2]], u: f64) -> Option<f64> {
    let first = curve.first()?;
    if u <= first[0] {
        return Some(first[1]);
    }
    for w in curve.windows(2) {
        let ([u0, l0], [u1, l1]) = (w[0], w[1]);
        if u <= u1 {
            let f = if u1 > u0 { (u - u0) / (u1 - u0) } else { 1.0 };
            return Some(l0 + f * (l1 - l0));
        }
    }
    curve.last().map(|p| p[1])
}

/// The bandwidth of each of `n` writers on one node at once, GB/s (see the module docs):
/// `rate(c, B, curve, n)`. `n = 0` gives 0.
pub fn writer_gbs(core_gbs: f64, node_gbs: f64, curve: &[[f64; 2]], n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let nf = n as f64;
    let Some(l1) = latency_at(curve, core_gbs / node_gbs) else {
        return core_gbs.min(node_gbs / nf);
    };
    let l = |u: f64| latency_at(curve, u).unwrap_or(l1);
    // Demand minus supply at utilisation u: falls with u.
    let gap = |u: f64| nf * core_gbs * l1 / l(u) - u * node_gbs;
    if gap(1.0) >= 0.0 {
        return node_gbs / nf;
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    // 60 halvings take the interval below 1e-18 of the peak: exact to f64 precision.
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if gap(mid) >= 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi) * node_gbs / nf).min(core_gbs)
}

/// [`writer_gbs`] for `0..=max_writers` writers on one node of `m`.
pub fn writer_rates_gbs(m: &Machine, max_writers: usize) -> Vec<f64> {
    (0..=max_writers)
        .map(|n| {
            writer_gbs(
                m.memory.core_bandwidth_gbs,
                m.memory.node_bandwidth_gbs,
                &m.memory.loaded_latency,
                n,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_curve_writers_share_the_node_capped_at_one_core() {
        for n in 1..20 {
            let r = writer_gbs(10.0, 40.0, &[], n);
            assert_eq!(r, (40.0 / n as f64).min(10.0), "{n}");
        }
        // A flat curve is no curve.
        let flat = [[0.0, 90.0], [1.0, 90.0]];
        for n in 1..20 {
            let r = writer_gbs(10.0, 40.0, &flat, n);
            assert!((r - (40.0 / n as f64).min(10.0)).abs() < 1e-9, "{n}: {r}");
        }
    }

    #[test]
    fn one_writer_alone_writes_at_the_core_bandwidth() {
        let curve = [[0.0, 100.0], [0.5, 110.0], [1.0, 300.0]];
        assert!((writer_gbs(10.0, 32.0, &curve, 1) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_linear_curve_meets_its_quadratic_closed_form() {
        // L(u) = L0 (1 + k u): n c (1 + k u1) = u B (1 + k u), a quadratic in u.
        let (c, b, l0, k) = (10.0, 32.0, 100.0, 2.0);
        let curve = [[0.0, l0], [1.0, l0 * (1.0 + k)]];
        let u1 = c / b;
        for n in 1..=6 {
            let nf = n as f64;
            let q = nf * c * (1.0 + k * u1);
            let u = (-b + (b * b + 4.0 * k * b * q).sqrt()) / (2.0 * k * b);
            let want = if u >= 1.0 { b / nf } else { u * b / nf };
            let got = writer_gbs(c, b, &curve, n);
            assert!(
                (got - want).abs() < 1e-9 * want,
                "{n}: {got} against {want}"
            );
        }
    }

    #[test]
    fn interpolation_is_linear_and_flat_outside() {
        let curve = [[0.0, 100.0], [0.5, 120.0], [1.0, 300.0]];
        assert_eq!(latency_at(&curve, -1.0), Some(100.0));
        assert_eq!(latency_at(&curve, 0.25), Some(110.0));
        assert_eq!(latency_at(&curve, 0.75), Some(210.0));
        assert_eq!(latency_at(&curve, 2.0), Some(300.0));
        assert_eq!(latency_at(&[], 0.5), None);
    }
}
