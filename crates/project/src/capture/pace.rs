//! Pacing: the engine's compute per operation of several profiles, timed side by side.
//!
//! A trace's compute is the untraced run's CPU time less its page writes (the capture's
//! untraced windows), and on a shared host that time drifts: one task of the same profile ran
//! 0.77 M and 1.12 M faults/s a minute apart here (2026-11-29, load under 1), and two captures
//! of one profile taken seconds apart differed by 25% in their untraced time. Captures of the
//! profiles of a comparison are taken in turns (A1 B1 A2 B2, [`crate::project::capture_all`]),
//! but a capture lasts seconds, and the drift is as fast: at one and four tasks, where a
//! change between kernels is a few percent, the projected change was the host's drift between
//! two captures, not the engines' difference.
//!
//! So the comparison's profiles are also run side by side: one engine per profile, each on a
//! thread of its own, taking turns on one CPU (the others block on a baton), a few
//! iterations of the workload a turn (`TURN_CYCLES` of page_fault1's 128 MiB, or one pft
//! repetition), round after round. Each turn's thread CPU time less its page writes (timed as
//! the capture's untraced windows time them, [`raw::time_writes`]) is that profile's compute
//! per operation in that turn. A round lasts a fraction of a second, so the host's drift
//! weighs on every profile of a round alike, and the profiles' ratios within a round are what
//! the host did not move. [`Paced::relative`] turns the rounds into one ratio per profile, and
//! [`Paced::targets`] sets each capture's compute from that ratio and the level the captures
//! of the round measured together.
//!
//! Only the workloads the capture times as loops of faults are paced (page_fault1..3, pft,
//! pft-vma-per-thread, lameter): kvcache, netpipe and the research benchmarks keep their own
//! untraced time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use pagelab_bench::profiles::Profile;
use pagelab_bench::run::{Sizes, engine_arena};
use pagelab_sync::trace as raw;
use pagelab_workloads::page_fault::{self, MEMSIZE, Variant};
use pagelab_workloads::pft::{self, PftParams};
use pagelab_workloads::vm::Vm;
use pagelab_workloads::{Mode, WorkloadError, WorkloadKind, engine};

use crate::error::CaptureError;
use crate::trace::CaptureGuard;

/// page_fault1..3 iterations (128 MiB each) a turn: about 70 ms on this host, short beside
/// the drift (seconds) and long beside a switch between engines.
pub const TURN_CYCLES: usize = 2;

/// Timed turns of each profile in one pacing, after one untimed turn each (the engine's first
/// iteration maps its page tables and fills its per-CPU lists).
pub const TURNS: usize = 10;

/// Whether `w` is paced: the workloads whose capture times a loop of faults.
pub fn paceable(w: WorkloadKind) -> bool {
    matches!(
        w,
        WorkloadKind::PageFault1
            | WorkloadKind::PageFault2
            | WorkloadKind::PageFault3
            | WorkloadKind::Pft
            | WorkloadKind::PftVmaPerThread
            | WorkloadKind::Lameter
    )
}

/// What one pacing measured: per profile (in the order given), per round, the compute per
/// operation in ns.
#[derive(Clone, Debug, PartialEq)]
pub struct Paced {
    pub compute_ns: Vec<Vec<f64>>,
}

impl Paced {
    /// Each profile's compute relative to the round's geometric mean over the profiles, the
    /// median over the rounds: what the host's drift between rounds does not move. `None`
    /// when no round has every profile's turn.
    pub fn relative(&self) -> Option<Vec<f64>> {
        let n = self.compute_ns.len();
        let rounds = self.compute_ns.iter().map(Vec::len).min()?;
        let mut per_profile: Vec<Vec<f64>> = vec![Vec::new(); n];
        for r in 0..rounds {
            let round: Vec<f64> = self.compute_ns.iter().map(|t| t[r]).collect();
            if round.iter().any(|&t| !(t.is_finite() && t > 0.0)) {
                continue;
            }
            let gm = (round.iter().map(|t| t.ln()).sum::<f64>() / n as f64).exp();
            for (p, t) in round.iter().enumerate() {
                per_profile[p].push(t / gm);
            }
        }
        per_profile.iter().map(|v| median(v)).collect()
    }

    /// The compute per operation each capture of a round is given: `measured[p]` is what
    /// profile `p`'s capture measured in its own untraced window (`None` where it could not
    /// time its writes). The round's level is the median over the captures of measured over
    /// relative compute (each capture's estimate of what the geometric mean of the profiles
    /// was while the captures ran), and each profile gets its relative compute times that
    /// level: the captures keep their common level and take their differences from the
    /// pacing. `None` when the pacing or every capture gives nothing to go on.
    pub fn targets(&self, measured: &[Option<f64>]) -> Option<Vec<f64>> {
        let rel = self.relative()?;
        let level = self.level(measured)?;
        Some(rel.iter().map(|r| r * level).collect())
    }

    /// The round's level that [`Paced::targets`] gives its profiles' relative compute: the
    /// median over the captures of measured over relative compute.
    pub fn level(&self, measured: &[Option<f64>]) -> Option<f64> {
        let rel = self.relative()?;
        if rel.len() != measured.len() {
            return None;
        }
        let levels: Vec<f64> = measured
            .iter()
            .zip(&rel)
            .filter_map(|(m, r)| m.filter(|m| m.is_finite() && *m > 0.0).map(|m| m / r))
            .collect();
        median(&levels)
    }
}

impl Paced {
    /// Profile `p`'s compute per operation, the median over its turns: with one profile,
    /// what the engine spends now (the self-check measures it beside each row it runs).
    pub fn median(&self, p: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .compute_ns
            .get(p)?
            .iter()
            .copied()
            .filter(|t| *t > 0.0)
            .collect();
        median(&v)
    }
}

/// The median (the mean of the middle two of an even count); `None` for no values.
fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Whose turn it is: turn `k` of profile `i` of `n` is global turn `k n + i`. A run that fails
/// breaks the baton, so that no other waits for it forever.
#[derive(Default)]
struct Baton {
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Baton {
    /// Waits for global turn `t`; false when the baton was broken.
    fn wait_for(&self, t: usize) -> bool {
        let mut s = self.state.lock().unwrap();
        while s.0 != t && !s.1 {
            s = self.cv.wait(s).unwrap();
        }
        !s.1
    }

    fn pass(&self) {
        self.state.lock().unwrap().0 += 1;
        self.cv.notify_all();
    }

    fn break_off(&self) {
        self.state.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
}

/// Breaks the baton when dropped armed (a run that failed or unwound).
struct BreakOnExit<'a>(&'a Baton, bool);

impl Drop for BreakOnExit<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.break_off();
        }
    }
}

/// One profile's task: its stores count as operations, and its turns start at the first store
/// after its baton arrives and end at the workload's boundary (after the `per_turn`-th unmap
/// of page_fault1, before a pft repetition's unmap, as the capture's windows do).
struct PacedVm<V> {
    inner: V,
    me: usize,
    profiles: usize,
    per_turn: usize,
    /// Turns in all, the untimed first one included.
    turns: usize,
    unmap_ends: bool,
    baton: Arc<Baton>,
    stop: Arc<AtomicBool>,
    // Only the task's own thread touches these (the workload moves the task to one thread):
    // plain cells, so that a turn's faults pay no locked instruction the capture's untraced
    // windows do not pay.
    turn: Cell<usize>,
    in_turn: Cell<bool>,
    boundaries: Cell<usize>,
    ops: Cell<u64>,
    cpu0: Cell<u64>,
    out: Arc<Mutex<Vec<f64>>>,
}

impl<V: Vm> PacedVm<V> {
    fn begin(&self) -> Result<(), WorkloadError> {
        let k = self.turn.get();
        if !self.baton.wait_for(k * self.profiles + self.me) {
            self.stop.store(true, Ordering::Relaxed);
            return Err(WorkloadError::Config(
                "pacing: another profile's run failed".into(),
            ));
        }
        raw::write_timing_cost();
        raw::time_writes(Some(CaptureGuard::STALL_NS));
        self.boundaries.set(0);
        self.ops.set(0);
        self.in_turn.set(true);
        self.cpu0.set(pft::thread_cpu_ns());
        Ok(())
    }

    /// Counts a boundary; ends the turn (timing it) at its last one, and says whether it did.
    fn end_turn(&self) -> bool {
        if !self.in_turn.get() {
            return false;
        }
        self.boundaries.set(self.boundaries.get() + 1);
        if self.boundaries.get() < self.per_turn {
            return false;
        }
        let cpu = pft::thread_cpu_ns().saturating_sub(self.cpu0.get()) as f64;
        let w = raw::time_writes(None);
        self.in_turn.set(false);
        let k = self.turn.get();
        self.turn.set(k + 1);
        let ops = self.ops.get();
        if k > 0 && ops > 0 {
            // As the capture's untraced windows: the timing's own cost out of the CPU time,
            // and what of it fell inside the spans out of the writes.
            let (all, inside) = raw::write_timing_cost();
            let n = w.spans as f64;
            let compute = w
                .ns()
                .map(|ns| (cpu - all * n).max(0.0) - (ns - inside * n).max(0.0))
                .unwrap_or(f64::NAN);
            self.out.lock().unwrap().push(compute / ops as f64);
        }
        if k + 1 >= self.turns {
            self.stop.store(true, Ordering::Relaxed);
        }
        true
    }
}

impl<V: Vm> Vm for PacedVm<V> {
    type File = V::File;

    fn mmap_anon(&self, len: u64) -> Result<u64, WorkloadError> {
        self.inner.mmap_anon(len)
    }

    fn mmap_fixed_anon(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        self.inner.mmap_fixed_anon(addr, len)
    }

    fn create_file(&self, len: u64) -> Result<V::File, WorkloadError> {
        self.inner.create_file(len)
    }

    fn mmap_file(&self, file: &V::File, len: u64, shared: bool) -> Result<u64, WorkloadError> {
        self.inner.mmap_file(file, len, shared)
    }

    fn store(&self, addr: u64) -> Result<(), WorkloadError> {
        if !self.in_turn.get() {
            self.begin()?;
        }
        self.ops.set(self.ops.get() + 1);
        self.inner.store(addr)
    }

    /// A turn of page_fault1 ends after its unmap (the capture's windows hold the unmaps), a
    /// pft turn before it (pft does not time its unmap); either way the baton passes only once
    /// the unmap is done, so that no profile's unmap runs on the CPU in another's turn.
    fn munmap(&self, addr: u64, len: u64) -> Result<(), WorkloadError> {
        let ended = !self.unmap_ends && self.end_turn();
        let r = self.inner.munmap(addr, len);
        if ended || (self.unmap_ends && r.is_ok() && self.end_turn()) {
            self.baton.pass();
        }
        r
    }

    fn idle(&self) {
        self.inner.idle();
    }

    fn resume(&self) {
        self.inner.resume();
    }

    fn fault_ns(&self) -> Option<u64> {
        self.inner.fault_ns()
    }
}

/// Runs `profiles` side by side on `workload` (one task each, `kernel_cpus` virtual CPUs,
/// `pft_bytes` a pft repetition), `turns` timed turns each after an untimed one, and returns
/// what each turn measured. Takes about `(turns + 1) x profiles` turns of 70 ms
/// (page_fault1) or 15 ms (pft of 64 MiB) here.
pub fn pace(
    workload: WorkloadKind,
    profiles: &[Profile],
    kernel_cpus: usize,
    pft_bytes: u64,
    turns: usize,
) -> Result<Paced, CaptureError> {
    if !paceable(workload) {
        return Err(CaptureError::Unsupported(format!(
            "pacing runs the loops of faults (page_fault1..3, pft, pft-vma-per-thread, lameter), not {workload}"
        )));
    }
    let once = matches!(
        workload,
        WorkloadKind::Pft | WorkloadKind::PftVmaPerThread | WorkloadKind::Lameter
    );
    let sizes = Sizes {
        memsize: MEMSIZE,
        pft_bytes,
        ..Sizes::default()
    };
    let baton = Arc::new(Baton::default());
    let n = profiles.len();
    let results: Vec<Result<Vec<f64>, CaptureError>> = std::thread::scope(|s| {
        let handles: Vec<_> = profiles
            .iter()
            .enumerate()
            .map(|(me, profile)| {
                let baton = baton.clone();
                s.spawn(move || {
                    // Breaks the baton if this run ends any other way than with all its turns
                    // taken, a panic included, so that no other profile waits for it forever.
                    let mut guard = BreakOnExit(&baton, true);
                    let r = run_one(
                        workload,
                        profile,
                        kernel_cpus,
                        sizes,
                        once,
                        me,
                        n,
                        turns,
                        &baton,
                    );
                    guard.1 = r.is_err();
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(CaptureError::Incomplete("a paced run panicked")))
            })
            .collect()
    });
    let compute_ns = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(Paced { compute_ns })
}

/// One profile's engine and task, taking its turns.
#[allow(clippy::too_many_arguments)]
fn run_one(
    workload: WorkloadKind,
    profile: &Profile,
    kernel_cpus: usize,
    sizes: Sizes,
    once: bool,
    me: usize,
    profiles: usize,
    turns: usize,
    baton: &Arc<Baton>,
) -> Result<Vec<f64>, CaptureError> {
    let arena = engine_arena(workload, 1, sizes);
    let kernel =
        engine::boot(&profile.policy, arena, kernel_cpus.max(1)).map_err(CaptureError::Workload)?;
    let (_run, mut vms) =
        engine::tasks(&kernel, 1, Mode::Threads, false).map_err(CaptureError::Workload)?;
    let stop = Arc::new(AtomicBool::new(false));
    let out = Arc::new(Mutex::new(Vec::new()));
    let vm = PacedVm {
        inner: vms.pop().expect("one task"),
        me,
        profiles,
        per_turn: if once { 1 } else { TURN_CYCLES },
        turns: turns + 1,
        unmap_ends: !once,
        baton: baton.clone(),
        stop: stop.clone(),
        turn: Cell::new(0),
        in_turn: Cell::new(false),
        boundaries: Cell::new(0),
        ops: Cell::new(0),
        cpu0: Cell::new(0),
        out: out.clone(),
    };
    pagelab_workloads::pin::pin_to_core(0);
    if once {
        let params = PftParams {
            bytes: sizes.pft_bytes,
            repetitions: turns + 1,
            vma_per_task: workload == WorkloadKind::PftVmaPerThread,
        };
        pft::run(vec![vm], true, params, &stop, &mut |_, _, _| {})
            .map_err(CaptureError::Workload)?;
    } else {
        let variant = match workload {
            WorkloadKind::PageFault1 => Variant::Anon,
            WorkloadKind::PageFault2 => Variant::PrivateFile,
            _ => Variant::SharedFile,
        };
        let counter = AtomicU64::new(0);
        page_fault::task_loop(&vm, variant, MEMSIZE, &counter, &stop)
            .map_err(CaptureError::Workload)?;
    }
    let out = std::mem::take(&mut *out.lock().unwrap());
    if out.len() < turns {
        return Err(CaptureError::Incomplete(
            "a paced run ended before its turns",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that panics before its turn breaks the baton: the profile waiting for the turn
    /// after it is told so instead of waiting forever.
    #[test]
    fn a_run_that_panics_breaks_the_baton_for_the_others() {
        let baton = Baton::default();
        std::thread::scope(|s| {
            let b = &baton;
            let first = s.spawn(move || {
                let _guard = BreakOnExit(b, true);
                panic!("the engine failed inside its turn");
            });
            let second = s.spawn(move || b.wait_for(1));
            assert!(first.join().is_err());
            assert!(!second.join().unwrap(), "the second run was not told");
        });
        // A run that ends with its turns taken leaves the baton whole.
        let baton = Baton::default();
        drop(BreakOnExit(&baton, false));
        baton.pass();
        assert!(baton.wait_for(1));
    }

    /// Two profiles whose ratio is 1.1 in every round while the host's speed halves and
    /// doubles between rounds: the pacing keeps the ratio and none of the drift.
    #[test]
    fn the_ratio_within_each_round_survives_the_hosts_drift_between_rounds() {
        let level = [600.0, 1200.0, 450.0, 900.0, 700.0];
        let paced = Paced {
            compute_ns: vec![level.to_vec(), level.iter().map(|l| l * 1.1).collect()],
        };
        let rel = paced.relative().unwrap();
        assert!((rel[1] / rel[0] - 1.1).abs() < 1e-12, "{rel:?}");
        assert!((rel[0] * rel[1] - 1.0).abs() < 1e-12, "{rel:?}");
    }

    /// One round in which a profile's turn was disturbed (its ratio far off) moves the median
    /// of five rounds not at all, and a round with a turn that could not be timed is left out.
    #[test]
    fn an_outlying_round_does_not_move_the_median_and_an_untimed_one_is_left_out() {
        let paced = Paced {
            compute_ns: vec![
                vec![500.0, 500.0, 500.0, 500.0, 500.0, 500.0],
                vec![550.0, 550.0, 1500.0, 550.0, 550.0, f64::NAN],
            ],
        };
        let rel = paced.relative().unwrap();
        assert!((rel[1] / rel[0] - 1.1).abs() < 1e-12, "{rel:?}");
        let none = Paced {
            compute_ns: vec![vec![500.0], vec![f64::NAN]],
        };
        assert_eq!(none.relative(), None);
    }

    /// The captures keep their common level (the median of what each says the profiles'
    /// geometric mean was) and take their ratios from the pacing; a capture that could not
    /// time its writes still gets a target.
    #[test]
    fn each_capture_gets_its_profiles_ratio_at_the_rounds_common_level() {
        let paced = Paced {
            compute_ns: vec![vec![500.0; 3], vec![550.0; 3], vec![605.0; 3]],
        };
        let rel = paced.relative().unwrap();
        // The captures measured 700, 600 and (not timed): levels 700 / rel[0] and 600 / rel[1].
        let t = paced.targets(&[Some(700.0), Some(600.0), None]).unwrap();
        let level = (700.0 / rel[0] + 600.0 / rel[1]) / 2.0;
        for (t, r) in t.iter().zip(&rel) {
            assert!((t - r * level).abs() < 1e-9, "{t} {r} {level}");
        }
        assert!((t[1] / t[0] - 1.1).abs() < 1e-12 && (t[2] / t[1] - 1.1).abs() < 1e-12);
        assert_eq!(paced.targets(&[None, None, None]), None);
        assert_eq!(
            paced.targets(&[Some(1.0)]),
            None,
            "one capture for three profiles"
        );
    }
}
