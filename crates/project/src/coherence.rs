//! The replay's cache-coherence model: who holds each shared line, and what a read or a write
//! of it costs a CPU.
//!
//! Every shared line the trace names (lock words, list heads, counters, sequence counts) has a
//! MESI-like state: **modified** by one CPU (its last writer, no other copy), or **shared** by a
//! set of readers (the last writer's copy among them). On x86 a line moves between caches by the
//! snoop filter or directory of the line's home; what the replay charges follows what a core
//! waits for:
//!
//! - **A read** of a line this CPU holds (modified by it, or among the sharers) is a hit and
//!   costs nothing beyond the compute around it. A read of a line another CPU wrote last pays
//!   one transfer from that CPU (by SMT sibling, node or NUMA distance, the machine's
//!   `latency` table); afterwards both hold it shared.
//! - **A write** (a store or an atomic) needs the only copy. From a line modified by another
//!   CPU it pays one transfer from it. From a shared line it pays the invalidation of every
//!   other copy: the invalidations go out together and the write completes when the farthest
//!   sharer has acknowledged (the largest transfer to a sharer), and each further sharer's
//!   acknowledgement occupies the requesting core's line-fill and the home agent for one line
//!   operation (`latency.atomic_ns`), so invalidating N sharers costs the farthest one's
//!   transfer plus N-1 occupancies. That the cost of a store grows with the sharers, and with
//!   their distance, is what David, Guerraoui and Trigonakis measured on Opteron and Xeon
//!   ("Everything you always wanted to know about synchronization but were afraid to ask",
//!   SOSP 2013, section 4); the one-occupancy-per-acknowledgement form is this model's
//!   assumption, not a fitted number.
//!
//! - **A read followed at once by a locked instruction** on the same line (a trylock's read of
//!   its lock word, then its exchange) reaches this model as the instruction alone: the
//!   replay's compiler folds the read into it, one request for the line, as measured on this
//!   project's host (`replay::fold_read`, `examples/line_probe.rs`). Only a trylock with a
//!   recorded fallback and a recorded read (the rwsem trylocks) that fails, and so makes no
//!   exchange, reaches it as the read.
//!
//! Lines that cannot be named by address in a one-task capture (the `struct page` at the head of
//! a shared list, the buddy block a free merges with) are named relative to the list's head
//! ([`pagelab_sync::trace::Sym`]), and resolved here against the replay's own record of who
//! last wrote the list's first entry: a `list_add` by CPU A rewrites the old first entry (whose
//! line is the previous adder's) and leaves its own page as the new first entry, so the next
//! adder pays a transfer from A. An entry further in (a buddy) is resolved to the same record:
//! the free lists are LIFO, so the block a free merges with was put there by a recent freer,
//! and the most recent one is the one the replay knows. Entries are single-owner lines (only
//! the list's lock holder touches them), so they carry no sharer set.

use crate::replay::NONE;

/// A set of CPUs (the replay's task indices): a bitset, one bit per task, so that testing and
/// adding a sharer are one word operation and clearing costs the words only when the set is not
/// empty. 512 bytes per line at 4096 CPUs, and the replay has a few dozen shared lines.
#[derive(Clone, Debug)]
pub(crate) struct Sharers {
    words: Box<[u64]>,
    n: u32,
}

impl Sharers {
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Sharers {
            words: vec![0; nr_cpus.div_ceil(64).max(1)].into_boxed_slice(),
            n: 0,
        }
    }

    #[inline]
    pub(crate) fn contains(&self, cpu: usize) -> bool {
        self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    #[inline]
    pub(crate) fn insert(&mut self, cpu: usize) {
        let w = &mut self.words[cpu / 64];
        let bit = 1 << (cpu % 64);
        if *w & bit == 0 {
            *w |= bit;
            self.n += 1;
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.n
    }

    #[inline]
    pub(crate) fn clear(&mut self) {
        if self.n != 0 {
            self.words.fill(0);
            self.n = 0;
        }
    }

    /// The members, in increasing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    i * 64 + b
                })
            })
        })
    }
}

/// One shared line's state.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    /// The last writer ([`NONE`]: nobody yet, the line comes from memory at no modelled cost).
    pub(crate) owner: u32,
    /// Readers holding a copy since the last write (empty: modified by `owner`).
    pub(crate) sharers: Sharers,
    /// For a list head: the CPU that last wrote the list's first entry.
    pub(crate) first: u32,
    /// For a list head: the CPU that wrote the first entry before `first` took it over, whose
    /// entries lie behind `first`'s on a LIFO list.
    pub(crate) prev_first: u32,
}

impl Line {
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Line {
            owner: NONE,
            sharers: Sharers::new(nr_cpus),
            first: NONE,
            prev_first: NONE,
        }
    }

    /// Whether `cpu` holds a valid copy.
    #[inline]
    pub(crate) fn holds(&self, cpu: usize) -> bool {
        self.owner as usize == cpu && self.sharers.len() == 0 || self.sharers.contains(cpu)
    }

    /// A read by `cpu`: what it waits for, ps (`transfer[a][b]` between task CPUs).
    #[inline]
    pub(crate) fn read(&mut self, cpu: usize, transfer: &[Vec<u64>]) -> u64 {
        if self.owner == NONE || self.holds(cpu) {
            return 0;
        }
        let x = transfer[self.owner as usize][cpu];
        if self.sharers.len() == 0 {
            self.sharers.insert(self.owner as usize);
        }
        self.sharers.insert(cpu);
        x
    }

    /// A write by `cpu`: what it waits for, ps; `occupancy` is one line operation
    /// (`latency.atomic_ns`), paid for every acknowledgement beyond the first.
    #[inline]
    pub(crate) fn write(&mut self, cpu: usize, transfer: &[Vec<u64>], occupancy: u64) -> u64 {
        let cost = if self.sharers.len() == 0 {
            if self.owner == NONE || self.owner as usize == cpu {
                0
            } else {
                transfer[self.owner as usize][cpu]
            }
        } else {
            // Data from the last writer unless this CPU has a copy; invalidations to every
            // other sharer, the farthest one's acknowledgement last.
            let mut wait = if self.sharers.contains(cpu) || self.owner == NONE {
                0
            } else {
                transfer[self.owner as usize][cpu]
            };
            let mut others = 0u64;
            for s in self.sharers.iter() {
                if s != cpu {
                    others += 1;
                    wait = wait.max(transfer[cpu][s]);
                }
            }
            wait.saturating_add(others.saturating_sub(1).saturating_mul(occupancy))
        };
        self.sharers.clear();
        self.owner = cpu as u32;
        cost
    }

    /// An access to the list entry a symbolic reference names: the first entry, resolved to
    /// its last writer, or another one, resolved to the first entry's last writer unless that
    /// is `cpu` itself, and then to the CPU that linked before it (the capture records another
    /// entry only when the recording task had not linked it itself, so it was linked before
    /// this CPU's own entries: behind them on a LIFO list). A write of the first entry makes
    /// it `cpu`'s.
    #[inline]
    pub(crate) fn entry(
        &mut self,
        cpu: usize,
        write: bool,
        first: bool,
        transfer: &[Vec<u64>],
    ) -> u64 {
        let owner = if first || self.first as usize != cpu {
            self.first
        } else {
            self.prev_first
        };
        let x = if owner == NONE || owner as usize == cpu {
            0
        } else {
            transfer[owner as usize][cpu]
        };
        if write && first && self.first as usize != cpu {
            self.prev_first = self.first;
            self.first = cpu as u32;
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four CPUs: 0 and 1 SMT siblings, 2 on the same node, 3 on another node.
    fn transfer() -> Vec<Vec<u64>> {
        let d = [
            [0, 7, 45, 118],
            [7, 0, 45, 118],
            [45, 45, 0, 118],
            [118, 118, 118, 0],
        ];
        d.iter().map(|r| r.to_vec()).collect()
    }

    #[test]
    fn sharers_are_a_set() {
        let mut s = Sharers::new(130);
        for c in [0, 64, 129, 64, 3] {
            s.insert(c);
        }
        assert_eq!(s.len(), 4);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 3, 64, 129]);
        assert!(s.contains(129) && !s.contains(128));
        s.clear();
        assert_eq!((s.len(), s.iter().count()), (0, 0));
    }

    #[test]
    fn reads_of_a_line_another_cpu_wrote_pay_one_transfer_each_then_hit() {
        let x = transfer();
        let mut l = Line::new(4);
        assert_eq!(l.write(0, &x, 6), 0, "first touch comes from memory");
        assert_eq!(l.read(0, &x), 0, "own modified line");
        assert_eq!(l.read(2, &x), 45);
        assert_eq!(l.read(3, &x), 118);
        assert_eq!(l.read(2, &x), 0, "a sharer hits");
        assert_eq!(l.sharers.len(), 3, "the writer keeps its copy");
    }

    #[test]
    fn a_write_invalidates_every_sharer_and_costs_more_with_more_of_them() {
        let x = transfer();
        let occ = 6;
        // Modified by another CPU: one transfer.
        let mut l = Line::new(4);
        l.write(3, &x, occ);
        assert_eq!(l.write(2, &x, occ), 118);
        // Shared by the writer and one other CPU of its node: an upgrade, one invalidation.
        let mut l = Line::new(4);
        l.write(0, &x, occ);
        l.read(2, &x);
        assert_eq!(l.write(2, &x, occ), 45, "invalidate CPU 0's copy");
        // Shared by all four, written by CPU 1 (a sharer): the farthest ack (CPU 3, 118) plus
        // one occupancy for each of the other two sharers beyond the first.
        let mut l = Line::new(4);
        l.write(0, &x, occ);
        for c in 1..4 {
            l.read(c, &x);
        }
        assert_eq!(l.write(1, &x, occ), 118 + 2 * occ);
        assert_eq!((l.owner, l.sharers.len()), (1, 0), "modified by the writer");
        assert_eq!(l.write(1, &x, occ), 0, "and then a hit");
    }

    #[test]
    fn first_entries_belong_to_whoever_linked_last() {
        let x = transfer();
        let mut head = Line::new(4);
        assert_eq!(
            head.entry(0, true, true, &x),
            0,
            "empty record: nothing to fetch"
        );
        assert_eq!(head.entry(3, true, true, &x), 118, "CPU 0's page was first");
        assert_eq!(head.entry(3, true, true, &x), 0, "now CPU 3's own page");
        assert_eq!(
            head.entry(2, false, false, &x),
            118,
            "another entry: the last freer's"
        );
        assert_eq!(
            head.first, 3,
            "an entry further in does not change the first"
        );
    }

    /// A refill pops entry after entry: each pop rewrites the next entry's link, and behind
    /// the popper's own first entry lie the entries the previous linker freed.
    #[test]
    fn entries_behind_ones_own_first_are_the_previous_linkers() {
        let x = transfer();
        let mut head = Line::new(4);
        head.entry(0, true, true, &x);
        assert_eq!(head.entry(3, true, true, &x), 118, "CPU 0's page was first");
        assert_eq!(
            head.entry(3, true, false, &x),
            118,
            "the next one is CPU 0's too"
        );
        assert_eq!(head.entry(3, true, false, &x), 118, "and the one after it");
        assert_eq!(head.entry(3, true, true, &x), 0, "the first is CPU 3's now");
        assert_eq!(
            head.entry(2, true, false, &x),
            118,
            "CPU 3's for another CPU"
        );
        head.entry(2, true, true, &x);
        assert_eq!(
            head.entry(2, true, false, &x),
            118,
            "behind CPU 2's: CPU 3's"
        );
        let mut alone = Line::new(4);
        alone.entry(1, true, true, &x);
        assert_eq!(
            alone.entry(1, true, false, &x),
            0,
            "one CPU alone pays nothing"
        );
    }
}
