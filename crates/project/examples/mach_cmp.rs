// Scratch experiment (not committed): one capture, replayed with and without the loaded-latency curve.
use pagelab_project::capture::{CaptureSpec, capture};
use pagelab_project::machine::Machine;
use pagelab_workloads::{Mode, WorkloadKind};
fn main() {
    let m = Machine::load("broadwell-2s-44c").unwrap();
    let mut flat = m.clone();
    flat.memory.loaded_latency.clear();
    let p = pagelab_bench::profiles::load("linux-4.15").unwrap();
    let t = capture(&CaptureSpec::new(WorkloadKind::PageFault1, p, m.nr_cpus())).unwrap();
    for (name, mm) in [("curve", &m), ("flat", &flat)] {
        let mut one = 0.0;
        for n in [1, 16, 32, 64] {
            let r = pagelab_project::project::replay_row(mm, &t, Mode::Processes, n, 3, 1, 8192)
                .unwrap();
            let v = pagelab_bench::stats::hmean(&r.metrics[0].2);
            if n == 1 {
                one = v;
            }
            println!("{name} processes {n}: {v:.0} faults/s, x{:.2}", v / one);
        }
    }
}
