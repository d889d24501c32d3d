//! What the loaded-latency curve does to page_fault1's processes curve on `broadwell-2s-44c`:
//! one capture of linux-4.15, replayed at 1, 16, 32 and 64 processes with the shipped machine
//! and with its `memory.loaded_latency` removed (processor sharing of the node's bandwidth), so
//! that the two differ only by the curve. docs/model-history.md, 2026-11-24, quotes its output.
//!
//! `cargo run --release -p pagelab-project --example memory_knee`

use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::machine::Machine;
use pagelab_workloads::{Mode, WorkloadKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let m = Machine::load("broadwell-2s-44c")?;
    let mut flat = m.clone();
    flat.memory.loaded_latency.clear();
    let p = pagelab_bench::profiles::load("linux-4.15")?;
    let t = capture(&CaptureSpec::for_machine(WorkloadKind::PageFault1, p, &m))?;
    for (name, machine) in [("with the curve", &m), ("flat latency", &flat)] {
        let mut one = 0.0;
        for n in [1, 16, 32, 64] {
            let r =
                pagelab_project::project::replay_row(machine, &t, Mode::Processes, n, 3, 1, 8192)?;
            let v = pagelab_bench::stats::hmean(&r.metrics[0].2);
            if n == 1 {
                one = v;
            }
            println!("{name}: {n} processes {v:.0} faults/s, x{:.2}", v / one);
        }
    }
    Ok(())
}
