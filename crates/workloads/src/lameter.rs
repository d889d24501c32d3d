//! Christoph Lameter's page-fault scalability test (2005, posted with the "page fault
//! scalability" patches for SGI Altix): `Gb Rep Thr User System Wall flt/cpu/s fault/wsec`.
//!
//! It is the ancestor of mmtests' `pft` and runs the same way (one anonymous region faulted by
//! all threads at once, repeated); what differs is the report, which splits each repetition's
//! CPU time into user and system time. [`report`] turns `pft` repetitions into those rows.

use crate::pft::Repetition;

/// One row of Lameter's report.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub gib: f64,
    pub rep: usize,
    pub threads: usize,
    pub user_s: Option<f64>,
    pub system_s: Option<f64>,
    pub wall_s: f64,
    pub faults_per_cpu_s: f64,
    pub faults_per_wall_s: f64,
}

/// The report rows of `reps`, run over `bytes` with `threads` threads.
pub fn report(bytes: u64, threads: usize, reps: &[Repetition]) -> Vec<Row> {
    reps.iter()
        .enumerate()
        .map(|(i, r)| Row {
            gib: bytes as f64 / (1u64 << 30) as f64,
            rep: i + 1,
            threads,
            user_s: r.user_s(),
            system_s: r.sys_s(),
            wall_s: r.wall_s(),
            faults_per_cpu_s: r.faults_per_cpu(),
            faults_per_wall_s: r.faults_per_sec(),
        })
        .collect()
}
