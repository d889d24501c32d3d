//! Where the numbers come from, in words: the host a run was measured on (its stored
//! [`HostInfo`]), the machine a projection was made for, the machine imported results came
//! from. A plot's subtitle and the report's headings say it, because a number means little
//! without the machine behind it.

use std::collections::BTreeSet;

use pagelab_bench::host::HostInfo;
use pagelab_bench::results::{Origin, StoredRun};

use crate::series::Source;

/// The host facts stored with a run, when they are there and parse as [`HostInfo`] (imports
/// may carry none, or another program's JSON).
pub fn host_of(run: &StoredRun) -> Option<HostInfo> {
    serde_json::from_str(run.meta.host_json.as_deref()?).ok()
}

/// A host in one line: `Intel Xeon X (2 CPUs, Linux 6.1.0)`.
pub fn host_line(h: &HostInfo) -> String {
    format!(
        "{} ({} CPU{}, Linux {})",
        h.cpu_model,
        h.cpus,
        if h.cpus == 1 { "" } else { "s" },
        h.kernel
    )
}

/// One phrase per source among `runs`, joined by `; `: `measured: engine on Intel Xeon X (2
/// CPUs, Linux 6.1.0)`, `imported from lab-box`, `projected for big-box`.
pub fn summary<'a>(runs: impl IntoIterator<Item = &'a StoredRun>) -> String {
    let runs: Vec<&StoredRun> = runs.into_iter().collect();
    let sources: BTreeSet<Source> = runs.iter().map(|r| Source::of(r)).collect();
    let mut parts = Vec::new();
    for s in sources {
        let mine: Vec<&&StoredRun> = runs.iter().filter(|r| Source::of(r) == s).collect();
        match s.origin {
            Origin::Measured => {
                let targets: BTreeSet<&str> = mine.iter().map(|r| r.meta.target.as_str()).collect();
                let hosts: BTreeSet<String> = mine
                    .iter()
                    .map(|r| {
                        host_of(r).map_or_else(|| "an unrecorded host".into(), |h| host_line(&h))
                    })
                    .collect();
                let targets: Vec<&str> = targets.into_iter().collect();
                let hosts: Vec<String> = hosts.into_iter().collect();
                parts.push(format!(
                    "measured: {} on {}",
                    targets.join(" and "),
                    hosts.join(" and ")
                ));
            }
            Origin::Imported | Origin::Projected => parts.push(s.describe()),
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::tests::run;

    #[test]
    fn summary_names_every_source_once() {
        let h = HostInfo {
            hostname: "h".into(),
            cpu_model: "Xeon X".into(),
            cpus: 2,
            cores: Some(2),
            sockets: Some(1),
            kernel: "6.1.0".into(),
            arch: "x86_64".into(),
            mem_total: 1,
            mem_available: 1,
            swap_total: 0,
            thp: "always".into(),
            cgroup: "v2".into(),
            pagelab_version: "0".into(),
        };
        let mut a = run(1, "a", Origin::Measured, None);
        a.meta.host_json = Some(serde_json::to_string(&h).unwrap());
        let mut b = a.clone();
        b.meta.target = "kernel".into();
        let p = run(3, "a", Origin::Projected, Some("big-box"));
        let i = run(4, "a", Origin::Imported, Some("lab"));
        let mut odd = run(5, "a", Origin::Imported, None);
        odd.meta.host_json = Some("not json".into());
        assert_eq!(host_of(&odd), None);
        assert_eq!(
            summary([&p, &a, &b, &i, &a]),
            "measured: engine and kernel on Xeon X (2 CPUs, Linux 6.1.0); imported from lab; projected for big-box"
        );
        assert_eq!(
            summary([&run(6, "a", Origin::Measured, None)]),
            "measured: engine on an unrecorded host"
        );
    }
}
