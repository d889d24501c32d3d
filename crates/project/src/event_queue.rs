//! The replay's pending events: a min-queue of `(time, who)` pairs, popped in increasing order.
//!
//! Every simulated event goes through this queue once (a push when a CPU or a memory node
//! schedules itself, a pop when its time comes), and with a hundred CPUs or more the queue
//! holds a hundred entries or more. `std`'s `BinaryHeap` spent a third of a replay's time in
//! `pop` (`perf record -e cpu-clock` of `examples/replay_speed` on a pft capture at 128
//! threads, 2026-11-29): a binary heap's sift takes about eight levels for such a queue, and
//! at each the comparison of two `(u64, u32)` tuples is a branch the processor cannot predict.
//!
//! This queue is a 4-ary heap (half the levels) over one `u128` key per entry, the time above
//! `who` (bits 32 to 95 and 0 to 31), so that choosing the least of four children is a run
//! of wide compares the compiler turns into conditional moves. The order is the tuples' order
//! exactly (`(t, who)` lexicographically), and equal entries are indistinguishable, so the
//! pops come out in the same sequence as from any other correct min-queue of the same pushes:
//! a replay is bit-for-bit the one it was with `BinaryHeap` (test
//! `pops_come_out_as_from_a_binary_heap`).

/// A min-queue of `(time, who)` pairs.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventQueue {
    v: Vec<u128>,
}

#[inline]
fn key(t: u64, who: u32) -> u128 {
    (u128::from(t) << 32) | u128::from(who)
}

#[inline]
fn unkey(k: u128) -> (u64, u32) {
    ((k >> 32) as u64, k as u32)
}

/// Children per node.
const D: usize = 4;

impl EventQueue {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds `who`'s event at time `t`.
    #[inline]
    pub(crate) fn push(&mut self, t: u64, who: u32) {
        let k = key(t, who);
        let mut i = self.v.len();
        self.v.push(k);
        // Sift up: move parents larger than `k` down into the hole.
        while i > 0 {
            let p = (i - 1) / D;
            let pk = self.v[p];
            if pk <= k {
                break;
            }
            self.v[i] = pk;
            i = p;
        }
        self.v[i] = k;
    }

    /// Removes and returns the least `(time, who)`.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<(u64, u32)> {
        let last = self.v.pop()?;
        if self.v.is_empty() {
            return Some(unkey(last));
        }
        let top = self.v[0];
        self.sift_down_from_root(last);
        Some(unkey(top))
    }

    /// Places `k` at the root's hole and moves it down to where it belongs.
    #[inline]
    fn sift_down_from_root(&mut self, k: u128) {
        let n = self.v.len();
        let v = &mut self.v[..];
        let mut i = 0;
        loop {
            let c = D * i + 1;
            if c + D <= n {
                // All four children: the least of them without a branch per comparison.
                let (a, b, cc, d) = (v[c], v[c + 1], v[c + 2], v[c + 3]);
                let (ab, iab) = if b < a { (b, c + 1) } else { (a, c) };
                let (cd, icd) = if d < cc { (d, c + 3) } else { (cc, c + 2) };
                let (m, im) = if cd < ab { (cd, icd) } else { (ab, iab) };
                if m >= k {
                    break;
                }
                v[i] = m;
                i = im;
            } else {
                // The last, partial group (or none).
                let mut im = usize::MAX;
                let mut m = k;
                for (j, &x) in v[c.min(n)..].iter().enumerate() {
                    if x < m {
                        m = x;
                        im = c + j;
                    }
                }
                if im != usize::MAX {
                    v[i] = m;
                    i = im;
                }
                break;
            }
        }
        v[i] = k;
    }

    /// Entries pending (superseded ones included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.v.len()
    }

    /// The pending entries, in no particular order.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.v.iter().map(|&k| unkey(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u64, u32),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            // Few distinct times and owners, so that ties and duplicates are common.
            3 => (0u64..40, 0u32..6).prop_map(|(t, w)| Op::Push(t, w)),
            1 => (any::<u64>(), any::<u32>()).prop_map(|(t, w)| Op::Push(t, w)),
            3 => Just(Op::Pop),
        ]
    }

    proptest! {
        #[test]
        fn pops_come_out_as_from_a_binary_heap(ops in proptest::collection::vec(op(), 0..400)) {
            let mut q = EventQueue::new();
            let mut h = BinaryHeap::new();
            for o in ops {
                match o {
                    Op::Push(t, w) => {
                        q.push(t, w);
                        h.push(Reverse((t, w)));
                    }
                    Op::Pop => prop_assert_eq!(q.pop(), h.pop().map(|Reverse(x)| x)),
                }
                prop_assert_eq!(q.len(), h.len());
            }
            while let Some(Reverse(x)) = h.pop() {
                prop_assert_eq!(q.pop(), Some(x));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }

    /// Deep heaps (five and six levels), which the random sequences above seldom build:
    /// two pushes for every pop, up to two thousand entries, then drained.
    #[test]
    fn a_deep_queue_pops_in_order() {
        let mut q = EventQueue::new();
        let mut h = BinaryHeap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..3000u64 {
            let (t, w) = (next() % 5000, (next() % 300) as u32);
            q.push(t, w);
            h.push(Reverse((t, w)));
            if round % 3 == 2 {
                assert_eq!(q.pop(), h.pop().map(|Reverse(e)| e));
            }
        }
        assert_eq!(q.len(), 2000);
        while let Some(Reverse(e)) = h.pop() {
            assert_eq!(q.pop(), Some(e));
        }
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn the_time_orders_before_who_and_extremes_survive_the_key() {
        let mut q = EventQueue::new();
        q.push(u64::MAX, 0);
        q.push(5, u32::MAX);
        q.push(5, 1);
        q.push(0, u32::MAX);
        assert_eq!(q.pop(), Some((0, u32::MAX)));
        assert_eq!(q.pop(), Some((5, 1)));
        assert_eq!(q.pop(), Some((5, u32::MAX)));
        assert_eq!(q.pop(), Some((u64::MAX, 0)));
        assert_eq!(q.pop(), None);
    }
}
